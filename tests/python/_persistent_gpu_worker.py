"""Rank program of tests/python/test_gpu_persistent.py: all_reduce (sum) of CUDA tensors on the
persistent ring kernels, ranks as processes sharing GPU 0.

Run as ``python _persistent_gpu_worker.py OUTDIR SCENARIO`` in every rank (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN, NCCLZ_TRANSPORT, NCCLZ_PERSISTENT and NCCLZ_PERSISTENT_FIFOS
set by the test). Each rank writes OUTDIR/rank<R>.json (what its calls did) and, for "calls",
OUTDIR/rank<R>-<k>.npy: call k's result bytes, for the test to compare with another placement's.

Scenarios:
  calls  float32 and float64, none and lossy (abs 1e-3), three sizes (one element, less than a
         slice, several ring loops): the result's bytes and last_stats (persistent, its FIFOs)
  kill   one good call, then every rank loops over calls of 16 MiB; the last rank kills itself
         (SIGKILL) one second in (OUTDIR/ready holds when, as time.monotonic()); the others' loop
         must end with an error, not hang.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from _scenario_main import run_scenario

SIZES = (1, 1000, 300001)


def value(n, seed):
    """A smooth field plus noise: deterministic, the same in every job."""
    g = np.random.default_rng(seed)
    return np.sin(0.001 * np.arange(n)) * (1 + seed % 7) + g.normal(0, 0.05, n)


def outcome(fn):
    import ncclz

    out = {}
    try:
        fn()
        out["kind"] = "returned"
    except ncclz.Error as e:
        out["kind"] = type(e).__name__
        out["message"] = str(e)
    out["at"] = time.monotonic()
    return out


def stats(comm):
    st = comm.last_stats
    return {
        "persistent": bool(st.persistent),
        "device_fifos": bool(st.persistent_device_fifos),
        "on_device": bool(st.on_device),
        "wire_bytes": int(st.wire_bytes),
    }


def scenario_calls(ncclz, torch, comm, outdir):
    res, k = {"calls": []}, 0
    for dtype in ("float32", "float64"):
        for lossy in (False, True):
            for n in SIZES:
                x = torch.tensor(value(n, 100 * k + comm.rank).astype(dtype), device="cuda")
                comp = ncclz.Lossy(abs=1e-3) if lossy else None
                comm.all_reduce(x, compression=comp, policy="off", algorithm="ring")
                torch.cuda.synchronize()
                np.save(Path(outdir, f"rank{comm.rank}-{k}.npy"), x.cpu().numpy().view(np.uint8))
                res["calls"].append({"k": k, "dtype": dtype, "lossy": lossy, "n": n, **stats(comm)})
                k += 1
    return res


def scenario_kill(ncclz, torch, comm, outdir):
    import signal
    import threading

    x = torch.tensor(value(1 << 22, comm.rank).astype("float32"), device="cuda")
    res = {"first": outcome(lambda: comm.all_reduce(x, policy="off", algorithm="ring"))}
    res["first"].update(stats(comm))
    comm.barrier()
    if comm.rank == comm.world_size - 1:
        # This rank kills itself one second into the loop below, most likely inside a kernel.
        t_kill = time.monotonic() + 1.0
        Path(outdir, "ready").write_text(repr(t_kill))
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()

    def call():
        comm.all_reduce(x, policy="off", algorithm="ring")
        torch.cuda.synchronize()

    res["calls"] = 0
    for _ in range(2000):
        res["second"] = outcome(call)
        if res["second"]["kind"] != "returned":
            break
        res["calls"] += 1
    return res


def main():
    import torch

    torch.cuda.set_device(0)
    run_scenario(globals(), lambda fn, ncclz, comm, outdir: fn(ncclz, torch, comm, outdir))


if __name__ == "__main__":
    main()
