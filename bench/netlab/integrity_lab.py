#!/usr/bin/env python3
"""The network lab's short integrity run: the cost of the socket transport's slot checksums.

4 hosts (network namespaces, tbf-shaped 0.5 Gbit/s NICs, one rank each), 64 MiB float32 all_reduce,
none and lossy (rel=1e-3), each rank alternating calls between a communicator with
NCCLZ_CHECKSUM=off and one with =on (bench/integrity_bench.py). Needs root; creates its own
namespaces (prefix nczi) and removes them on exit. About 2 minutes on a 2-core VM.

    sudo python bench/netlab/integrity_lab.py [--rate 0.5] [--reps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netlab


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=0.5, help="per-host NIC rate, Gbit/s")
    ap.add_argument("-n", "--hosts", type=int, default=4)
    ap.add_argument("-s", "--sizes", default="64M")
    ap.add_argument("-m", "--modes", default="none,lossy")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--prefix", default="nczi")
    args = ap.parse_args()
    netlab.require_root()
    netlab.cleanup(args.prefix, verbose=False)
    cmd = [
        sys.executable,
        os.path.join(REPO, "bench", "integrity_bench.py"),
        "--rank",
        "-s",
        args.sizes,
        "-m",
        args.modes,
        "-r",
        str(args.reps),
    ]
    if args.json:
        cmd += ["--json", os.path.abspath(args.json)]
    with netlab.Lab(args.hosts, args.rate, prefix=args.prefix, subnet="10.78.0") as lab:
        print(lab.describe(), flush=True)
        rc, _ = lab.exec_ranks(cmd, port=29600, timeout=1800, extra_env={"NCCLZ_POLICY": "off"})
    left = netlab.list_namespaces(args.prefix)
    if left:
        print(f"integrity_lab: namespaces left behind: {left}", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
