"""Rewrites CUDA launches `k<<<cfg>>>(args);` into emulator calls (tools/cuda_emu).

Usage: python3 rewrite.py IN.cu [OUT.cpp]   (stdout without OUT)
"""

import re
import sys

LAUNCH = re.compile(
    r"([A-Za-z_][\w:]*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.DOTALL
)


def emulated(m: re.Match) -> str:
    # The first lambda names the devices of the launch's pointer arguments
    # (evaluated only with several emulated devices), the second runs it.
    kernel, config, args = m.group(1), m.group(2), m.group(3)
    return (
        f"::emu::launch_checked([&] {{ return ::emu::pointer_devices({args}); }}, "
        f"[&] {{ {kernel}({args}); }}, {config});"
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
