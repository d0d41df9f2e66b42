"""Rewrites CUDA launches `k<<<cfg>>>(args);` into emulator calls (tools/cuda_emu).

Usage: python3 rewrite.py IN.cu [OUT.cpp]   (stdout without OUT)
"""

import re
import sys

LAUNCH = re.compile(
    r"([A-Za-z_][\w:]*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.DOTALL
)


def emulated(m: re.Match) -> str:
    # The arguments are evaluated once, at the launch, as CUDA does (the
    # kernel may run later: NCCLZ_EMU_LAZY); the first lambda names the
    # devices of the pointer arguments (evaluated only with several emulated
    # devices), the second runs the kernel on copies of them.
    kernel, config, args = m.group(1), m.group(2), m.group(3)
    if not args.strip():
        return f"::emu::launch_checked([] {{ return ::std::vector<int>{{}}; }}, [] {{ {kernel}(); }}, {config});"
    return (
        f"{{ auto emu_args = ::std::make_tuple({args}); "
        f"::emu::launch_checked([&] {{ return ::std::apply([](const auto&... a) {{ "
        f"return ::emu::pointer_devices(a...); }}, emu_args); }}, "
        f"[emu_args]() mutable {{ ::std::apply([](auto&... a) {{ {kernel}(a...); }}, emu_args); }}, {config}); }}"
    )


with open(sys.argv[1]) as f:
    src = f.read()
out = LAUNCH.sub(emulated, src)
if "<<<" in out:
    sys.exit("rewrite.py: a launch was not rewritten in " + sys.argv[1])
text = f'#line 1 "{sys.argv[1]}"\n' + out
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(text)
else:
    sys.stdout.write(text)
