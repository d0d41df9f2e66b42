#!/usr/bin/env python3
"""What the compression policy costs when it decides to run uncompressed: calls with
compression=Lossy(rel=1e-3) under the default policy on a link it knows to be fast (so it runs
none) against compression=None with policy="off", interleaved call by call so that other load
on a shared machine hits both alike.

    ncclz-run -n 4 python bench/policy_overhead.py --size 64M --iters 15      # NCCLZ_LINK_GBPS=1000 set here

Rank 0 prints the median per-call time of each (slowest rank per call) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("NCCLZ_LINK_GBPS", "1000")

import ncclz
import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="64M")
    ap.add_argument("--iters", type=int, default=15)
    a = ap.parse_args()
    n = int(a.size[:-1]) << {"K": 10, "M": 20}[a.size[-1]] if a.size[-1] in "KM" else int(a.size)
    with ncclz.init() as comm:
        rng = np.random.default_rng(comm.rank)
        x0 = (np.sin(np.linspace(0, 20, n // 4)) + rng.normal(0, 0.01, n // 4)).astype(np.float32)
        times = {"auto (Lossy requested)": [], "auto (Lossless requested)": [], "none, policy off": []}
        kinds = list(times)
        ran = set()
        for i in range(a.iters + 2):
            for k in (kinds if i % 2 == 0 else kinds[::-1]):
                x = x0.copy()
                comm.barrier()
                t0 = time.perf_counter()
                if k.startswith("auto"):
                    comm.all_reduce(x, compression=ncclz.Lossy(rel=1e-3) if "Lossy" in k else ncclz.Lossless())
                    ran.add(comm.last_stats.compression)
                else:
                    comm.all_reduce(x, policy="off")
                dt = np.array([time.perf_counter() - t0])
                comm.all_reduce(dt, op="max", policy="off")
                if i >= 2:  # two warm-up rounds
                    times[k].append(float(dt[0]))
        if comm.rank == 0:
            m = {k: statistics.median(v) for k, v in times.items()}
            print(f"{comm.world_size} ranks, {a.size} float32 all_reduce, {a.iters} interleaved calls each, "
                  f"load average {os.getloadavg()[0]:.1f}; auto ran {sorted(ran)}")
            for k, v in m.items():
                print(f"  {k:24s} median {v * 1e3:8.1f} ms")
            for k in kinds[:-1]:
                print(f"  {k} / none = {m[k] / m[kinds[-1]]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
