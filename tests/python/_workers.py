"""Rank programs for the multi-process tests: the entry point that every rank runs.

Run as ``python _workers.py SCENARIO OUTDIR [ARGS...]`` in every rank, with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN (and NCCLZ_TRANSPORT,
NCCLZ_TIMEOUT) set by the test or by a launcher. Each rank checks what it can
check alone (every element against the fp64 reference and the promised bound)
and writes OUTDIR/rank<R>.json with hashes of its outputs, so the test can
check that all ranks got identical results. A failed check raises, which exits
non-zero with the traceback on stderr.

Every rank generates every rank's input from a seed, so each can compute the
exact reference (fp64) by itself (_checks.py).

The scenarios live by area, each a function ``scenario_NAME(ncclz, comm, args)``:
_collective_scenarios.py (every collective, mode, dtype, op; shape hints; mostly-zero
inputs; the pipelined quantizer), _error_scenarios.py (killed rank, abort, mismatched
calls, bad input), _framework_scenarios.py (torch Stores, torchrun, JAX, ncclz-run),
_policy_scenarios.py (the compression policy, the configuration), _async_scenarios.py
(async_op=True, synchronize()), _gpu_scenarios.py (GPU arrays).
``python _workers.py threads OUTDIR N SCENARIO [ARGS...]`` runs N ranks as threads of
one process instead.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import _async_scenarios
import _collective_scenarios
import _error_scenarios
import _framework_scenarios
import _gpu_scenarios
import _policy_scenarios
import numpy as np


def run_threads(ncclz, outdir, n, scenario, args):
    """n ranks as threads of this process (in-process transport): also proves the GIL is released."""
    import threading

    errors = []

    def one(rank):
        t0 = time.monotonic()
        try:
            with ncclz.Communicator(rank=rank, world_size=n, transport="inproc") as comm:
                result = SCENARIOS[scenario](ncclz, comm, args) or {}
        except BaseException as e:  # noqa: BLE001 - reported per thread below
            errors.append((rank, traceback.format_exc()))
            result = {"error": type(e).__name__, "message": str(e)}
        result["rank"] = rank
        result["wall"] = time.monotonic() - t0
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for r, tb in errors:
            sys.stderr.write(f"--- thread rank {r} ---\n{tb}")
        raise SystemExit(1)


def _collect(*modules):
    """Every scenario_NAME of the area modules, by NAME."""
    found = {}
    for m in modules:
        for name, fn in vars(m).items():
            if name.startswith("scenario_"):
                assert name not in found, f"two scenarios named {name}"
                found[name[len("scenario_") :]] = fn
    return found


SCENARIOS = _collect(
    _async_scenarios, _collective_scenarios, _error_scenarios, _framework_scenarios, _policy_scenarios, _gpu_scenarios
)


def main():
    name, outdir, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    import ncclz

    if name == "threads":
        run_threads(ncclz, outdir, int(args[0]), args[1], args[2:])
        return
    rank = int(os.environ["RANK"])
    result = {}
    t0 = time.monotonic()
    if name == "store":
        import datetime

        import torch.distributed as dist

        kind = args[0]
        world = int(os.environ["WORLD_SIZE"])
        if kind == "file":
            store = dist.FileStore(os.path.join(outdir, "filestore"), world)
        else:
            store = dist.TCPStore(
                "127.0.0.1",
                int(os.environ["MASTER_PORT"]),
                world,
                rank == 0,
                timeout=datetime.timedelta(seconds=30),
            )
        with ncclz.Communicator(rank=rank, world_size=world, store=store) as comm:
            x = np.full(1000, rank + 1.0, np.float32)
            comm.all_reduce(x)
            assert np.all(x == world * (world + 1) / 2)
            # a second communicator through the same store gets its own key
            with ncclz.Communicator(rank=rank, world_size=world, store=store) as comm2:
                y = comm2.all_gather(np.array([rank], np.int64))
                assert y.ravel().tolist() == list(range(world))
        result = {"ok": True}
    else:
        if name == "torchrun" and args and args[0] == "pg":
            import torch.distributed as dist

            dist.init_process_group("gloo")
        try:
            comm = ncclz.init()
        except ncclz.Error as e:
            result = {"init_error": type(e).__name__, "message": str(e), "elapsed": time.monotonic() - t0}
            comm = None
        if comm is not None:
            with comm:
                result = SCENARIOS[name](ncclz, comm, args) or {}
    result["rank"] = rank
    result["wall"] = time.monotonic() - t0
    if outdir != "-":
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - any failure: traceback, exit 1
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
