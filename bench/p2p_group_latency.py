#!/usr/bin/env python3
"""Small grouped sends and receives on one host: what a group's handshakes cost.

    python bench/p2p_group_latency.py                      # 4 ranks, this checkout's ncclz
    python bench/p2p_group_latency.py --build new=/tmp/a --build base=/tmp/b --runs 8

Two groups, called back to back (a barrier before each timed batch): a ring shift of 4 KiB
(``comm.group(sends=[(x, r+1)], recvs=[(y, r-1)])``) and a halo of 64 KiB to both neighbours (two
sends, two receives). Each run starts the ranks afresh (``ncclz-run``, shared memory, policy off)
and reports rank 0's time per group: the median of 5 batches. With several ``--build NAME=DIR``
(DIR goes first on PYTHONPATH: a directory holding an ``ncclz`` package with its ``_core`` module)
the builds take turns run by run; the table gives each build's median over its runs and every run's
value, so compare builds only within one invocation. Every result's values are checked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

RANK_PROGRAM = r"""
import json, sys, time
import numpy as np, ncclz
comm = ncclz.init()
r, W = comm.rank, comm.world_size
right, left = (r + 1) % W, (r - 1) % W
out = {}
for name, n, iters, both in (("ring shift 4 KiB", 1024, 3000, False), ("halo 64 KiB", 16384, 1000, True)):
    x = np.full(n, float(r), np.float32)
    y = np.empty(n, np.float32)
    z = np.empty(n, np.float32)
    def one():
        if both:
            comm.group(sends=[(x, right), (x, left)], recvs=[(y, left), (z, right)])
        else:
            comm.group(sends=[(x, right)], recvs=[(y, left)])
    for _ in range(50):
        one()
    batch, ts = iters // 5, []
    for _ in range(5):
        comm.barrier()
        t = time.perf_counter()
        for _ in range(batch):
            one()
        ts.append((time.perf_counter() - t) / batch * 1e6)
    assert (y == left).all() and (not both or (z == right).all()), name
    out[name] = sorted(ts)[2]
if r == 0:
    print("RESULT " + json.dumps(out), flush=True)
comm.close()
"""


def run_once(ranks: int, pythonpath: str | None) -> dict:
    env = dict(os.environ, NCCLZ_POLICY="off")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(RANK_PROGRAM)
    try:
        p = subprocess.run([sys.executable, "-m", "ncclz.run", "-n", str(ranks), f.name], env=env,
                           capture_output=True, text=True, timeout=600, check=False)
    finally:
        os.unlink(f.name)
    for line in p.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise SystemExit(f"a run failed (exit status {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--out", help="write every run's numbers here (JSON)")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.build] or [["ncclz", ""]]
    runs: dict[str, list[dict]] = {name: [] for name, _ in builds}
    for _ in range(a.runs):
        for name, path in builds:
            runs[name].append(run_once(a.ranks, path or None))
    groups = list(runs[builds[0][0]][0])
    print(f"{a.ranks} ranks, us per group: the median of the runs (each run's value)\n")
    print(f"| build | {' | '.join(groups)} |")
    print("|---|" + "---|" * len(groups))
    for name, got in runs.items():
        cells = []
        for g in groups:
            vals = [r[g] for r in got]
            cells.append(f"{statistics.median(vals):.1f} ({', '.join(f'{v:.0f}' for v in vals)})")
        print(f"| {name} | {' | '.join(cells)} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"ranks": a.ranks, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
