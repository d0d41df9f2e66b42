"""Rewrites CUDA launches `k<<<cfg>>>(args);` into emulator calls (tools/cuda_emu).

Usage: python3 rewrite.py IN.cu [OUT.cpp]   (stdout without OUT)
"""

import re
import sys

src = open(sys.argv[1]).read()
pat = re.compile(r"([A-Za-z_][\w:]*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)
out, n = pat.subn(lambda m: "::emu::launch([&] { %s(%s); }, %s);" % (m.group(1), m.group(3), m.group(2)), src)
if "<<<" in out:
    sys.exit("rewrite.py: a launch was not rewritten in " + sys.argv[1])
text = '#line 1 "%s"\n' % sys.argv[1] + out
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(text)
else:
    sys.stdout.write(text)
