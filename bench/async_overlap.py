"""Asynchronous calls (``async_op=True``) against synchronous ones: a training-like step that computes
a bucket of gradients, then reduces it, bucket after bucket, with and without overlapping the
reductions with the next bucket's computation.

    NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=1 ncclz-run -n 2 python bench/async_overlap.py

Each step: ``--buckets`` buckets of ``--bucket`` bytes of float32; a bucket's "gradient" is computed
by a matrix product sized to take about ``--compute-ms`` on one core (calibrated on rank 0, the
same work on every rank), then all_reduce'd (sum). *sync*: compute, reduce, compute, reduce, ...;
*async*: compute, queue the reduction (async_op=True), compute the next one meanwhile, ...,
``comm.synchronize()`` at the end of the step. Both orders reduce the same data (the results are
compared bit for bit). Modes: none and Lossy(rel=1e-3) with the policy off. Rounds alternate sync
and async; the table gives the median step time of the slowest rank, the time of compute alone
and of the reductions alone, and the share of the reduction time that the overlap hid.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buckets", type=int, default=6, help="buckets per step (default 6)")
    ap.add_argument("--bucket", type=parse_size, default=4 << 20, help="bytes per bucket (default 4M)")
    ap.add_argument("--compute-ms", type=float, default=30.0, help="compute per bucket, ms on one core (default 30)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; each times sync and async once (default 5)")
    ap.add_argument("--json", default=None, help="write the rows here (rank 0)")
    a = ap.parse_args()

    import ncclz

    with ncclz.init(policy="off") as comm:
        r, n = comm.rank, comm.world_size
        count = a.bucket // 4
        rng = np.random.default_rng(100 + r)
        grads = [rng.normal(size=count).astype(np.float32) for _ in range(a.buckets)]
        # the compute: a square matrix product whose size rank 0 calibrates to --compute-ms
        k = 64
        while True:
            m = np.ones((k, k), np.float32)
            t0 = time.perf_counter()
            m @ m
            if time.perf_counter() - t0 > a.compute_ms / 1e3 or k >= 4096:
                break
            k = int(k * 1.25) + 1
        size = np.array([k], np.int64)
        comm.broadcast(size, root=0)
        mat = np.ones((int(size[0]), int(size[0])), np.float32)

        def compute(i: int) -> np.ndarray:
            mat @ mat
            return grads[i].copy()

        def step(mode, overlap: bool) -> tuple:
            comm.barrier()
            t0 = time.perf_counter()
            outs, works = [], []
            for i in range(a.buckets):
                g = compute(i)
                if overlap:
                    works.append(comm.all_reduce(g, compression=mode, async_op=True))
                else:
                    comm.all_reduce(g, compression=mode)
                outs.append(g)
            if overlap:
                comm.synchronize()
            dt = time.perf_counter() - t0
            t = np.array([dt], np.float64)
            comm.all_reduce(t, op="max")
            return float(t[0]), outs

        def parts(mode) -> tuple:
            comm.barrier()
            t0 = time.perf_counter()
            for i in range(a.buckets):
                compute(i)
            tc = time.perf_counter() - t0
            comm.barrier()
            t0 = time.perf_counter()
            for i in range(a.buckets):
                comm.all_reduce(grads[i].copy(), compression=mode)
            tr = time.perf_counter() - t0
            t = np.array([tc, tr], np.float64)
            comm.all_reduce(t, op="max")
            return float(t[0]), float(t[1])

        rows = []
        for name, mode in (("none", None), ("rel=1e-3", ncclz.Lossy(rel=1e-3))):
            step(mode, False)  # warm-up
            step(mode, True)
            times = {"sync": [], "async": [], "compute": [], "reduce": []}
            for _ in range(a.rounds):
                ts, out_s = step(mode, False)
                ta, out_a = step(mode, True)
                tc, tr = parts(mode)
                times["sync"].append(ts)
                times["async"].append(ta)
                times["compute"].append(tc)
                times["reduce"].append(tr)
                same = all(np.array_equal(x.view(np.uint32), y.view(np.uint32)) for x, y in zip(out_s, out_a))
                if not same:
                    raise SystemExit(f"rank {r}: async results differ from sync ones ({name})")
            med = {key: statistics.median(v) for key, v in times.items()}
            hidden = (med["sync"] - med["async"]) / med["reduce"] if med["reduce"] > 0 else 0.0
            rows.append({"mode": name, "ranks": n, "buckets": a.buckets, "bucket_bytes": a.bucket,
                         "compute_ms_per_bucket": a.compute_ms, "matrix": int(size[0]),
                         **{f"{key}_s": v for key, v in med.items()}, "runs": times,
                         "speedup": med["sync"] / med["async"], "reduce_hidden": hidden})
        if r == 0:
            print(f"async_overlap: {n} ranks, {a.buckets} buckets x {a.bucket >> 20} MiB float32, "
                  f"~{a.compute_ms:g} ms compute per bucket (matrix {int(size[0])}), "
                  f"transport {comm.config.transport}, NCCLZ_SOCKET_THROTTLE_GBPS="
                  f"{os.environ.get('NCCLZ_SOCKET_THROTTLE_GBPS', '')}, {comm.config.nchannels} channels")
            print("| mode | step, sync (ms) | step, async (ms) | speed-up | compute alone (ms) | reductions alone (ms) "
                  "| reduction time hidden |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for row in rows:
                print(f"| {row['mode']} | {row['sync_s'] * 1e3:.1f} | {row['async_s'] * 1e3:.1f} | "
                      f"{row['speedup']:.2f}x | {row['compute_s'] * 1e3:.1f} | {row['reduce_s'] * 1e3:.1f} | "
                      f"{row['reduce_hidden']:.0%} |")
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"argv": sys.argv, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
