"""Rank program of tests/python/test_integrity.py: one collective while the transport corrupts a slot.

Run as ``python _integrity_worker.py OUTDIR VERB MODE`` in every rank (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, NCCLZ_TRANSPORT, NCCLZ_TEST_CORRUPT set by the test), or as
``python _integrity_worker.py OUTDIR VERB MODE --threads N`` for N ranks as threads (in-process
transport). Each rank runs the call once; if it returns, the result is checked against the exact
reference (none, lossless: bit-exact; lossy: within the bound), so a wrong result fails the rank
itself. Each rank writes OUTDIR/rank<R>.json: what the call did ("returned" or the error's type and
message), whether a returned result was right, and what a second call did.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

import numpy as np

COUNT = 1 << 20  # 4 MiB of float32 per rank: several slots per channel


def rank_input(rank):
    """A noisy wave in multiples of 1/4: sums of a few are exact in float32 in any order."""
    rng = np.random.default_rng(rank)
    t = np.linspace(0, 8 * np.pi, COUNT)
    return (np.round(4 * (10 * np.sin(t + rank) + rng.normal(0, 0.3, COUNT))) / 4).astype(np.float32)


def compression(ncclz, mode):
    return {"none": None, "lossless": ncclz.Lossless(), "lossy": ncclz.Lossy(rel=1e-3)}[mode]


def run_call(ncclz, comm, verb, mode):
    """Runs the call; returns (result, expected, bound): bound None = must be bit-exact."""
    r, n = comm.rank, comm.world_size
    comp = compression(ncclz, mode)
    inputs = [rank_input(k) for k in range(n)]
    x = inputs[r].copy()
    if verb == "all_reduce":
        ref = np.sum(np.stack([a.astype(np.float64) for a in inputs]), axis=0)
        comm.all_reduce(x, compression=comp, policy="off")
        return x, ref, comm.last_stats.error_bound if mode == "lossy" else None
    if verb == "all_gather":
        y = comm.all_gather(x, compression=comp, policy="off")
        ref = np.stack([a.astype(np.float64) for a in inputs]).reshape(np.shape(y))
        return y, ref, comm.last_stats.error_bound if mode == "lossy" else None
    if verb == "broadcast":
        y = comm.broadcast(x, root=0, compression=comp, policy="off")
        return y, inputs[0].astype(np.float64), comm.last_stats.error_bound if mode == "lossy" else None
    if verb == "sendrecv":  # ring shift: rank r sends to r+1 and receives from r-1
        buf = np.empty_like(x)
        nxt, prv = (r + 1) % n, (r - 1) % n
        if r % 2 == 0:
            comm.send(x, nxt, compression=comp)
            comm.recv(buf, prv, compression=comp)
        else:
            comm.recv(buf, prv, compression=comp)
            comm.send(x, nxt, compression=comp)
        return buf, inputs[prv].astype(np.float64), comm.last_stats.error_bound if mode == "lossy" else None
    raise ValueError(verb)


def one_rank(ncclz, comm, verb, mode):
    out = {"rank": comm.rank}
    t0 = time.monotonic()
    try:
        y, ref, bound = run_call(ncclz, comm, verb, mode)
        err = np.abs(np.asarray(y, np.float64) - ref)
        out["call"] = "returned"
        out["correct"] = bool(err.max() == 0) if bound is None else bool(err.max() <= bound)
        out["max_err"] = float(err.max())
    except ncclz.Error as e:
        out["call"] = type(e).__name__
        out["message"] = str(e)
    out["elapsed"] = time.monotonic() - t0
    try:  # the communicator is aborted now: a second call must fail at once
        comm.all_reduce(np.ones(16, np.float32))
        out["second"] = "returned"
    except ncclz.Error as e:
        out["second"] = type(e).__name__
    return out


def write(outdir, out):
    with open(os.path.join(outdir, f"rank{out['rank']}.json"), "w") as f:
        json.dump(out, f)


def main():
    outdir, verb, mode = sys.argv[1:4]
    import ncclz

    if len(sys.argv) > 4 and sys.argv[4] == "--threads":
        n = int(sys.argv[5])

        def thread(rank):
            try:
                with ncclz.Communicator(rank=rank, world_size=n, transport="inproc") as comm:
                    write(outdir, one_rank(ncclz, comm, verb, mode))
            except BaseException:  # noqa: BLE001 - the test sees the missing file and the traceback
                traceback.print_exc()

        ts = [threading.Thread(target=thread, args=(r,)) for r in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return
    with ncclz.init() as comm:
        write(outdir, one_rank(ncclz, comm, verb, mode))


if __name__ == "__main__":
    main()
