#!/usr/bin/env python3
"""Side by side of two builds of ncclz (e.g. main's and a branch's, each installed in its own
virtual environment): the same calls, their results and their cost. Run under ncclz-run:

    ncclz-run -n 3 VENV/bin/python bench/call_ab.py digests OUT_DIR   # per rank: OUT_DIR/rankR.json
    ncclz-run -n 2 VENV/bin/python bench/call_ab.py latency OUT.json  # rank 0's per-call times

digests: a grid of calls (every collective and send/recv; none, lossless, lossy abs / rel / a bound
below the type's rounding; float32/64/16 and int32; smooth, mostly-zero and NaN-holding inputs;
sum/avg/max; 1 to 900k elements per rank) with the policy off; for each call the SHA-1 of the
output and the call's wire bytes, raw bytes, exact fallback, bound and mode. Two builds that move
the same bytes and compute the same results write the same files (compare them with diff).

latency: the time of each call of small all_reduce calls (policy off), its median and 10th
percentile over 2000 calls after 50 warm-up calls; run the builds alternately several times, as
on a shared machine one run can be 5x slower than the next (bench/results/call_routine.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import ncclz
import numpy as np


def digest(a) -> str:
    return hashlib.sha1(np.ascontiguousarray(a).view(np.uint8).tobytes()).hexdigest()[:16]


def make_input(n: int, dtype: str, seed: int, kind: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "smooth":
        x = 50 * np.sin(np.linspace(0, 20, n) + seed) + rng.normal(0, 0.01, n)
    elif kind == "sparse":
        x = np.where(rng.random(n) < 0.01, rng.normal(0, 1, n), 0.0)
    else:  # "nan": Gaussian with one NaN
        x = rng.normal(0, 1, n)
        x[n // 2] = np.nan
    return (x * 10).astype(dtype) if dtype.startswith("int") else x.astype(dtype)


def digests(comm, out_dir: str) -> None:
    W, r = comm.world_size, comm.rank
    res = {}

    def stats():
        s = comm.last_stats
        return [s.wire_bytes, s.raw_bytes, s.exact_fallback, s.error_bound, s.compression]

    modes = {"none": None, "lossless": ncclz.Lossless(), "abs": ncclz.Lossy(abs=1e-3), "rel": ncclz.Lossy(rel=1e-2),
             "tiny": ncclz.Lossy(abs=1e-12)}
    for n in (1, 1000, 300_001):
        for dtype in ("float32", "float64", "float16", "int32"):
            for kind in ("smooth", "sparse", "nan"):
                for name, m in modes.items():
                    if dtype == "int32" and name not in ("none", "lossless"):
                        continue
                    if dtype == "float16" and name == "abs":
                        m = ncclz.Lossy(abs=0.1)
                    x = make_input(n * W, dtype, 7 * r + 1, kind)
                    key = f"{n}/{dtype}/{kind}/{name}"
                    for op in ("sum", "avg", "max"):
                        y = x.copy()
                        comm.all_reduce(y, op=op, compression=m)
                        res[f"all_reduce/{key}/{op}"] = [digest(y), *stats()]
                        z = comm.reduce_scatter(x.copy(), op=op, compression=m)
                        res[f"reduce_scatter/{key}/{op}"] = [digest(z), *stats()]
                    g = comm.all_gather(x[:n].copy(), compression=m)
                    res[f"all_gather/{key}"] = [digest(g), *stats()]
                    b = x.copy() if r == W - 1 else np.zeros_like(x)
                    comm.broadcast(b, root=W - 1, compression=m)
                    res[f"broadcast/{key}"] = [digest(b), *stats()]
                    if W > 1 and r == 0:
                        comm.send(x, 1, compression=m)
                        res[f"send/{key}"] = stats()
                    elif W > 1 and r == 1:
                        q = np.zeros_like(x)
                        comm.recv(q, 0, compression=m)
                        res[f"recv/{key}"] = [digest(q), *stats()]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
        json.dump(res, f, indent=0, sort_keys=True)


def latency(comm, out: str) -> None:
    res = {}
    for nbytes in (4 << 10, 64 << 10):
        x = (np.sin(np.linspace(0, 30, nbytes // 4)) * 10 + comm.rank).astype(np.float32)
        for name, m in (("none", None), ("lossy", ncclz.Lossy(rel=1e-3))):
            for _ in range(50):
                comm.all_reduce(x, compression=m)
            ts = []
            for _ in range(2000):
                t0 = time.perf_counter()
                comm.all_reduce(x, compression=m)
                ts.append(time.perf_counter() - t0)
            comm.barrier()
            res[f"all_reduce {name} {nbytes >> 10} KiB"] = {
                "median_us": float(np.median(ts)) * 1e6, "p10_us": float(np.percentile(ts, 10)) * 1e6}
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("digests", "latency"):
        print(__doc__, file=sys.stderr)
        return 2
    with ncclz.init(policy="off") as comm:
        (digests if sys.argv[1] == "digests" else latency)(comm, sys.argv[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
