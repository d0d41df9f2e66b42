"""Rank program of tests/python/test_faults.py: one fault scenario per run.

Run as ``python _fault_worker.py OUTDIR SCENARIO`` in every rank (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, NCCLZ_TOKEN, NCCLZ_TRANSPORT set by the test). Each rank writes OUTDIR/rank<R>.json:
what its calls did ("returned", or the error's type and message), when (time.monotonic(), which
every process on the machine shares), and whether a returned result was right. Results are exact
where checked: the inputs are small integers, whose float32 sums are exact in any order.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
from _scenario_main import run_scenario


def outcome(fn):
    """Runs fn(); returns what it did: kind ("returned", an error's class name), message, end time."""
    import ncclz

    out = {}
    try:
        out["value"] = fn()
        out["kind"] = "returned"
    except KeyboardInterrupt:
        out["kind"] = "KeyboardInterrupt"
    except ncclz.Error as e:
        out["kind"] = type(e).__name__
        out["message"] = str(e)
    out["at"] = time.monotonic()
    return out


def ints(n, seed):
    return np.random.default_rng(seed).integers(-100, 100, n).astype(np.float32)


def exact_all_reduce(comm, n, seed):
    """all_reduce of small integers; returns whether the result is exact."""
    x = ints(n, seed * 1000 + comm.rank)
    want = sum(ints(n, seed * 1000 + r).astype(np.float64) for r in range(comm.world_size))
    comm.all_reduce(x, policy="off")
    return bool(np.array_equal(x.astype(np.float64), want))


def wait_for(path, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.02)


def scenario_abort(comm, outdir):
    """Rank 0 aborts while the others block in an all_reduce it never joins."""
    comm.barrier()
    res = {}
    if comm.rank == 0:
        time.sleep(0.5)
        res["abort_at"] = time.monotonic()
        comm.abort("the fault test stops the job")
    else:
        res["call"] = outcome(lambda: exact_all_reduce(comm, 1 << 18, 1))
    res["second"] = outcome(lambda: comm.barrier())
    return res


def scenario_sigint(comm, outdir):
    """Rank 1 blocks in an all_reduce rank 0 does not join; the test sends it SIGINT. Rank 0 stays
    out of any call until rank 1 has reported, then calls."""
    comm.barrier()
    res = {}
    if comm.rank == 1:
        Path(outdir, "blocked").write_text(str(os.getpid()))
        res["call"] = outcome(lambda: exact_all_reduce(comm, 1 << 18, 1))
        res["second"] = outcome(lambda: comm.barrier())
    else:
        wait_for(Path(outdir, "rank1.json"))
        res["call"] = outcome(lambda: exact_all_reduce(comm, 1 << 18, 1))
    return res


def scenario_kill(comm, outdir):
    """The last rank stays out of the call and is killed (SIGKILL) or stopped (SIGSTOP) by the test
    while the others block in an all_reduce."""
    comm.barrier()
    res = {}
    if comm.rank == comm.world_size - 1:
        Path(outdir, "blocked").write_text(str(os.getpid()))
        time.sleep(600)
    res["call"] = outcome(lambda: exact_all_reduce(comm, 1 << 18, 1))
    return res


def scenario_kill_group(comm, outdir):
    """Every rank sends 4 MiB of noise to each neighbour and receives 4 MiB from each in one group (its
    data on lanes, lossy: quantized slice by slice) over a throttled link; the test kills the last
    rank once it is inside the group, while the data moves."""
    import ncclz

    comm.barrier()
    W, r = comm.world_size, comm.rank
    x = np.random.default_rng(r).normal(size=1 << 20).astype(np.float32)
    y = np.zeros_like(x)
    if r == W - 1:
        Path(outdir, "blocked").write_text(str(os.getpid()))
    res = {"call": outcome(lambda: comm.group(sends=[(x, (r + 1) % W), (x, (r - 1) % W)],
                                              recvs=[(y, (r - 1) % W), (y.copy(), (r + 1) % W)],
                                              compression=ncclz.Lossy(abs=1e-3)) and None)}
    return res


def scenario_slow(comm, outdir):
    """One all_reduce over a throttled socket that takes several times NCCLZ_TIMEOUT."""
    comm.barrier()
    res = {"call": outcome(lambda: exact_all_reduce(comm, 1 << 19, 2))}
    st = comm.last_stats
    res["wall_s"] = st.wall_s if st is not None else None
    return res


def scenario_threads(comm, outdir):
    """Two threads per rank call all_reduce on one communicator at once, with different counts, so
    a mix-up is a mismatch or a wrong value, never silent. The threads start their calls together
    (a barrier): started one after the other on a loaded machine, the first could finish all 40
    small calls before the second began, and every call would pair up."""
    comm.barrier()
    results = {0: [], 1: []}
    together = threading.Barrier(2)

    def run(t):
        together.wait(timeout=30)
        for k in range(40):
            r = outcome(lambda k=k: exact_all_reduce(comm, 1000 + t, 100 * t + k))
            results[t].append(r)
            if r["kind"] != "returned":
                break

    ts = [threading.Thread(target=run, args=(t,)) for t in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"threads": results}


def scenario_turns(comm, outdir):
    """The supported pattern: two threads per rank take turns in a fixed order (the same on every
    rank); then the bounds an exact fallback reports."""
    import ncclz

    comm.barrier()
    turn = [0]
    cv = threading.Condition()
    results = {0: [], 1: []}

    def run(t):
        for k in range(20):
            with cv:
                cv.wait_for(lambda k=k: turn[0] == 2 * k + t)
            results[t].append(outcome(lambda k=k: exact_all_reduce(comm, 1000, 100 * t + k)))
            with cv:
                turn[0] += 1
                cv.notify_all()

    ts = [threading.Thread(target=run, args=(t,)) for t in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # A bound below float32's rounding of the sum: the call runs exactly and says what it achieved.
    x = (np.random.default_rng(comm.rank).standard_normal(5000) * 10).astype(np.float32)
    want = sum((np.random.default_rng(r).standard_normal(5000) * 10).astype(np.float32).astype(np.float64)
               for r in range(comm.world_size))
    comm.all_reduce(x, compression=ncclz.Lossy(abs=1e-12), policy="off")
    st = comm.last_stats
    bound = {"requested_bound": st.requested_bound, "error_bound": st.error_bound,
             "exact_fallback": st.exact_fallback, "max_err": float(np.abs(x.astype(np.float64) - want).max())}
    return {"threads": results, "bound": bound}


def main():
    # Python's own Ctrl-C handler, as in an interactive program: a process started in the background
    # by a non-interactive shell (a CI job under `cmd &`) inherits SIGINT ignored, and Python then
    # leaves it ignored, which would make the SIGINT test test the shell instead of ncclz.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run_scenario(globals(), lambda fn, ncclz, comm, outdir: fn(comm, outdir), {"pid": os.getpid()})


if __name__ == "__main__":
    main()
