"""Rank programs of the errors a user meets (test_comm.py): a killed rank, abort, mismatched calls, bad input.

Run by _workers.py (its docstring says how); each scenario returns a JSON-able dict."""

from __future__ import annotations

import os
import time

import numpy as np
from _checks import Errors


def scenario_kill(ncclz, comm, args):
    """Rank VICTIM dies (SIGKILL) right after its first call returns; the others must raise quickly.

    The survivors may already fail that first call: the victim's call can return while its
    last bytes are still on their way (socket proxy), and they die with it.
    """
    victim = comm.world_size - 1
    t0 = time.monotonic()
    calls = 0
    try:
        comm.all_reduce(np.ones(1 << 16, np.float32))
        calls += 1
        if comm.rank == victim:
            os.kill(os.getpid(), 9)
        for _ in range(100000):
            comm.all_reduce(np.ones(1 << 16, np.float32))
            calls += 1
    except ncclz.RemoteError as e:  # TimeoutError and AbortedError derive from it
        return {
            "error": type(e).__name__,
            "message": str(e),
            "elapsed": time.monotonic() - t0,
            "calls": calls,
        }
    raise AssertionError("all_reduce kept working after a rank died")


def scenario_abort(ncclz, comm, args):
    """abort() from another thread wakes a call that waits for a peer that never comes."""
    import threading

    if comm.rank == 0:
        t = threading.Timer(1.0, comm.abort, args=("test abort",))
        t.start()
        t0 = time.monotonic()
        try:
            comm.recv(np.empty(10, np.float32), 1)
        except ncclz.RemoteError as e:
            return {"error": type(e).__name__, "elapsed": time.monotonic() - t0}
        raise AssertionError("recv returned without a sender")
    time.sleep(3.0)
    return {"error": None}


def scenario_mismatch(ncclz, comm, args):
    """Ranks disagree about the call; every rank must raise (not hang, not corrupt memory).
    args: what ("count", "dtype", "compression": rank 0 asks Lossy(rel=1e-3), the others none;
    "bound": rank 0 asks rel 1e-3, the others 1e-2), then "big" for 6 MiB (above the policy's
    min_bytes and the direct schedules' threshold) instead of 4 KB."""
    what = args[0]
    r = comm.rank
    n = 1572864 if "big" in args[1:] else 1000
    if what == "count":
        x = np.ones(n + 100 * r, np.float32)
    elif what == "dtype":
        x = np.ones(n, np.float32 if r == 0 else np.float64)
    elif what in ("compression", "bound"):
        x = np.ones(n, np.float32)
    else:
        raise ValueError(what)
    comp = ncclz.Lossy(rel=1e-3) if (what == "compression" and r == 0) else None
    if what == "bound":
        comp = ncclz.Lossy(rel=1e-3 if r == 0 else 1e-2)
    t0 = time.monotonic()
    try:
        comm.all_reduce(x, compression=comp)
    except ncclz.Error as e:
        return {"error": type(e).__name__, "message": str(e), "elapsed": time.monotonic() - t0}
    raise AssertionError(f"mismatched all_reduce ({what}) returned normally on rank {r}")


def scenario_badinput(ncclz, comm, args):
    """Bad arguments raise InvalidArgumentError before any communication; the communicator stays usable."""
    errs = Errors(ncclz)
    expect = errs.expect

    a = np.ones((8, 8), np.float32)
    expect("noncontig", lambda: comm.all_reduce(a[:, ::2]))
    expect("noncontig_T", lambda: comm.all_reduce(a.T))
    expect("bad_dtype", lambda: comm.all_reduce(np.ones(4, np.int16)))
    expect("complex", lambda: comm.all_reduce(np.ones(4, np.complex64)))
    expect("lossy_int", lambda: comm.all_reduce(np.ones(4, np.int32), compression=ncclz.Lossy(abs=1.0)))
    expect(
        "lossy_prod",
        lambda: comm.all_reduce(np.ones(4, np.float32), op="prod", compression=ncclz.Lossy(rel=1e-3)),
    )
    expect("bad_op", lambda: comm.all_reduce(np.ones(4, np.float32), op="xor"))
    expect("bad_root", lambda: comm.broadcast(np.ones(4, np.float32), root=comm.world_size))
    expect("neg_root", lambda: comm.broadcast(np.ones(4, np.float32), root=-1))
    expect("bad_peer", lambda: comm.send(np.ones(4, np.float32), peer=comm.world_size + 3))
    if comm.world_size > 1:
        expect("rs_indivisible", lambda: comm.reduce_scatter(np.ones(comm.world_size * 5 + 1, np.float32)))
    expect("bad_out", lambda: comm.all_gather(np.ones(4, np.float32), out=np.empty(3, np.float32)))
    expect("bad_compression", lambda: comm.all_reduce(np.ones(4, np.float32), compression="zstd"))
    expect("not_array", lambda: comm.all_reduce([1.0, 2.0]), TypeError)
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    # A refused recv still meets its send (the runtime takes part in it as refused): the sender raises.
    if comm.rank == 0 and comm.world_size > 1:
        expect("recv_readonly", lambda: comm.recv(ro, 1))
    elif comm.rank == 1:
        expect("send_to_refused_recv", lambda: comm.send(np.ones(4, np.float32), 0), ncclz.RemoteError)
    try:
        import torch

        t = torch.ones(4, 4)
        expect("torch_noncontig", lambda: comm.all_reduce(t.t()))
        expect("torch_bool", lambda: comm.all_reduce(torch.ones(4, dtype=torch.bool)))

        class FakeGpu:  # a DLPack producer that says it lives on CUDA
            def __dlpack_device__(self):
                return (2, 0)

            def __dlpack__(self, **kw):
                raise BufferError("not here")

        expect("gpu", lambda: comm.all_reduce(FakeGpu()))
        expect("meta", lambda: comm.all_reduce(torch.ones(4, device="meta")))
    except ImportError:
        pass
    # Still usable, and every rank agrees.
    x = np.full(100, comm.rank + 1, np.float32)
    comm.all_reduce(x)
    assert np.all(x == sum(range(1, comm.world_size + 1)))
    return {"errors": errs}


def scenario_refused_on_one_rank(ncclz, comm, args):
    """One rank refuses a call the others make (a lossy integer all_reduce, a non-contiguous input, an
    out= of the wrong shape, a bad root, a read-only recv buffer): it raises InvalidArgumentError, the
    others RemoteError naming it, and every rank's next calls meet the others' next calls: each later
    all_reduce sums values that differ from call to call, so a rank a call behind would be seen."""
    r, W = comm.rank, comm.world_size
    bad = W - 1  # the refusing rank
    x = np.ones(1000, np.float32)
    cases = {
        "lossy_int": lambda: comm.all_reduce(np.ones(1000, np.int32) if r == bad else x.copy(),
                                             compression=ncclz.Lossy(rel=1e-3)),
        "noncontig": lambda: comm.all_gather(np.ones((10, 20), np.float32)[:, ::2] if r == bad else x[:100].copy()),
        "out_shape": lambda: comm.reduce_scatter(np.ones(W * 8, np.float32),
                                                 out=np.empty(7 if r == bad else 8, np.float32)),
        "root": lambda: comm.broadcast(x.copy(), root=W + 5 if r == bad else 0),
        "short_way": lambda: comm.all_reduce(np.ones(7, np.float16 if r == bad else np.float32)[::1]
                                             if r != bad else np.ones((4, 4), np.float32).T),
        # uneven all_to_all: refused after its counts round (lossy integers) and before it (bad counts)
        "uneven_after_counts": lambda: comm.all_to_all(np.ones(2 * W, np.int32 if r == bad else np.float32),
                                                       ncclz.Lossy(rel=1e-3), send_counts=[2] * W),
        "uneven_before_counts": lambda: comm.all_to_all(np.ones(2 * W, np.float32),
                                                        send_counts=[3 if r == bad else 2] * W),
    }
    out, k = {}, 0
    for name, fn in cases.items():
        try:
            fn()
            out[name] = "returned"
        except ncclz.Error as e:
            out[name] = type(e).__name__ + ("" if r == bad or f"rank {bad}" in str(e) else " (another rank named)")
        for _ in range(2):
            k += 1
            y = np.full(64, float(k * 10 + r), np.float32)
            comm.all_reduce(y)
            want = sum(k * 10 + q for q in range(W))
            out[f"{name}/after{k}"] = bool(np.all(y == want))
    if W > 1:  # a refused recv meets its send
        ro = np.ones(4, np.float32)
        ro.flags.writeable = False
        try:
            if r == 0:
                comm.recv(ro, 1)
            elif r == 1:
                comm.send(np.ones(4, np.float32), 0)
            out["recv"] = "returned" if r < 2 else "not in it"
        except ncclz.Error as e:
            out["recv"] = type(e).__name__
        y = np.full(64, float(r), np.float32)
        comm.all_reduce(y)
        out["recv/after"] = bool(np.all(y == sum(range(W))))
    return {"out": out, "bad": bad}
