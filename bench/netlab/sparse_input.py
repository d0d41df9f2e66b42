#!/usr/bin/env python3
"""Mostly-zero inputs side by side in the network lab: the lossy all-reduce of the 99%-zero data set
(64 MiB float32 per rank, rel 1e-3, out of place, policy off) on the dense path
(NCCLZ_SPARSE_INPUT=0), with lists of nonzeros in the ordinary 1 MiB slices
(NCCLZ_SPARSE_SLICE_BYTES=0), and with lists in the larger slices (the default). The three take
turns, round after round, in one lab, so that they see the same machine. Needs root
(bench/netlab/netlab.py).

    python bench/netlab/sparse_input.py                    # 4 and 2 hosts at 0.5 Gbit/s, 3 rounds
    python bench/netlab/sparse_input.py --hosts 4 --rounds 5

Writes bench/results/sparse_input.md. Each run is bench/sparse_allreduce.py (9 timed calls after 2
warm-up calls; median of the per-call times of the slowest rank; the CPU seconds of all ranks
together per call).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netlab

CONFIGS = [
    ("dense path", {"NCCLZ_SPARSE_INPUT": "0"}),
    ("lists, 1 MiB slices", {"NCCLZ_SPARSE_SLICE_BYTES": "0"}),
    ("lists, 8 MiB slices (default)", {}),
]
LINE = re.compile(r"median ([\d.]+) ms, min ([\d.]+) ms, ratio ([\d.]+).*CPU all ranks ([\d.]+) ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="4,2")
    ap.add_argument("--rate", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "sparse_input.md"))
    ap.add_argument("--prefix", default="nczs")
    a = ap.parse_args(argv)
    netlab.require_root()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res: dict = {}
    port = 29700
    for hosts in [int(h) for h in a.hosts.split(",")]:
        with netlab.Lab(hosts, a.rate, a.prefix) as lab:
            for rnd in range(a.rounds):
                for name, env in CONFIGS:
                    port += 3
                    cmd = [sys.executable, os.path.join(REPO, "bench", "sparse_allreduce.py"), "--out-of-place",
                           "--size", a.size, "--label", name]
                    rc, lines = lab.exec_ranks(cmd, port=port, timeout=300, extra_env=env, capture=True)
                    m = next((LINE.search(x) for x in lines if LINE.search(x)), None)
                    if rc != 0 or not m:
                        print(f"sparse_input: {hosts} hosts, {name}: exit {rc}, no result", file=sys.stderr)
                        return 1
                    res.setdefault(hosts, {}).setdefault(name, []).append(
                        {"ms": float(m.group(1)), "ratio": float(m.group(3)), "cpu": float(m.group(4)),
                             "load": os.getloadavg()[0]})
    L = ["# Mostly-zero inputs: the dense path, lists of nonzeros, larger slices\n",
         (f"Measured {started} on {os.uname().nodename} ({os.cpu_count()} CPU cores) by "
         f"`python {os.path.relpath(__file__, REPO)}`: network lab (netns + tbf) at {a.rate:g} Gbit/s per host, "
         f"{a.size} float32 per rank of the benchmark's `sparse` data (99% of each rank's elements +0.0), "
         "all_reduce Lossy(rel=1e-3), out of place, policy off; the three configurations take turns, "
         f"{a.rounds} rounds. Time: per call, slowest rank, median of 9 calls; CPU: user + system seconds "
         "of all ranks (every thread) per call, median. Same result bits in all three "
         "(tests/cpp/test_collectives.cpp, CollectiveSparseInput).\n")]
    for hosts, by in res.items():
        L.append(f"\n## {hosts} hosts\n")
        L.append("| configuration | time ms (median of rounds) | each round | vs dense path | ratio | CPU ms, all ranks |")
        L.append("|---|---:|---|---:|---:|---:|")
        base = statistics.median(r["ms"] for r in by[CONFIGS[0][0]])
        for name, _ in CONFIGS:
            rs = by[name]
            t = statistics.median(r["ms"] for r in rs)
            each = ", ".join("{:.1f}".format(r["ms"]) for r in rs)
            ratio = statistics.median(r["ratio"] for r in rs)
            cpu = statistics.median(r["cpu"] for r in rs)
            L.append(f"| {name} | {t:.1f} | {each} | {base / t:.2f}x | {ratio:.2f} | {cpu:.1f} |")
    loads = [r["load"] for by in res.values() for rs in by.values() for r in rs]
    L.append(f"\nLoad average (1 min) during the runs: {min(loads):.2f} .. {max(loads):.2f}.")
    text = "\n".join(L) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
