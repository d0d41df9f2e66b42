#!/usr/bin/env python3
"""Two ranks' lossy all_reduce: its wire ratio and time per call (the exchange of two ranks).

    NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=0.2 ncclz-run -n 2 python bench/pair_bench.py --label after

An all-reduce of two ranks on coded integers exchanges each rank's own codes (algorithms/ring.cpp,
pair_all_reduce) where the ring sent a sum in its second half. Rank 0 prints, per data set, the
ratio (last_stats.ratio), the median time of calls 2..iters (barrier to return, rank 0's) and the
first call's. For a side-by-side with an older commit, install that commit into a second
environment and run the same command with it in turn (bench/results/pair_exchange.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import ncclz
from ncclz.tools.data import rank_input


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=64 << 20, help="bytes of float32 per rank")
    ap.add_argument("--data", default="smooth,grad")
    ap.add_argument("--rel", type=float, default=1e-3)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    with ncclz.init() as comm:
        if comm.world_size != 2:
            raise SystemExit("pair_bench.py runs on 2 ranks")
        for data in a.data.split(","):
            x = rank_input(data, comm.rank, a.size // 4)
            ts = []
            for _ in range(a.iters):
                y = x.copy()
                comm.barrier()
                t0 = time.perf_counter()
                comm.all_reduce(y, op="sum", compression=ncclz.Lossy(rel=a.rel), policy="off", algorithm="ring")
                ts.append(time.perf_counter() - t0)
            s = comm.last_stats
            if comm.rank == 0:
                rest = statistics.median(ts[1:]) if len(ts) > 1 else ts[0]
                print(f"{a.label} {data}: ratio {s.ratio:.2f}, wire {s.wire_bytes} B, median {rest * 1e3:.1f} ms "
                      f"(first {ts[0] * 1e3:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
