"""Rank programs of asynchronous calls (test_async.py): ``async_op=True``, ``Work``, ``synchronize()``.

Run by _workers.py (its docstring says how); each scenario returns a JSON-able dict.
"""

from __future__ import annotations

import time

import numpy as np
from _checks import Checker, bits, bound_of, digest, plain_tolerance, rank_input, reference


def scenario_async(ncclz, comm, args):
    """Every collective queued with async_op=True, a synchronous call behind them, many small queued
    calls, errors through Work.wait() and synchronize(), and close() with calls still queued. Every
    element against the fp64 reference (lossy within the bound, none and lossless exact where the
    synchronous call is), the results the same bits as the same calls made synchronously."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    n = 300_001
    comp = ncclz.Lossy(rel=1e-3)
    inputs = [rank_input(k, n, "float32", 11) for k in range(W)]
    ref = reference(inputs, "sum")
    E = bound_of(comp, inputs)

    # 1. every collective queued, then a synchronous all_reduce behind them
    a = inputs[r].copy()
    w_ar = comm.all_reduce(a, compression=comp, policy="off", async_op=True)
    ck.require(isinstance(w_ar, ncclz.Work), f"async_op=True must return a Work, got {type(w_ar)}")
    w_ag = comm.all_gather(inputs[r], compression=ncclz.Lossless(), async_op=True)
    b = np.full(1000, float(r), np.float64)
    w_bc = comm.broadcast(b, root=W - 1, async_op=True)
    w_rs = comm.reduce_scatter(np.ones((2 * W, 5), np.int32), async_op=True)
    w_red = comm.reduce(inputs[r], root=0, out=np.empty(n, np.float32) if r == 0 else None, async_op=True)
    w_a2a = comm.all_to_all(np.arange(W * 3, dtype=np.int64) + 100 * r, async_op=True)
    w_bar = comm.barrier(async_op=True)
    s = inputs[r].copy()
    comm.all_reduce(s)  # synchronous: queued behind the others, returns after them
    for name, w in (("all_reduce", w_ar), ("all_gather", w_ag), ("broadcast", w_bc), ("reduce_scatter", w_rs),
                    ("reduce", w_red), ("all_to_all", w_a2a), ("barrier", w_bar)):
        ck.require(w.is_completed(), f"queued {name} not completed when a later synchronous call returned")
    ck.require(w_ar.wait() is a, "all_reduce's Work must return the in-place array")
    ck.check_close("async/all_reduce", a, ref, E, "rel", "float32")
    ck.require(comm.last_stats is not None and comm.last_stats.compression, "last_stats after queued calls")
    g = w_ag.wait()
    ck.require(all(bits(g[k]) == bits(inputs[k]) for k in range(W)), "lossless all_gather not bit-exact")
    ck.require(w_bc.wait() is b and np.all(b == W - 1), "broadcast from the last rank")
    ck.require(np.all(w_rs.wait() == W), "reduce_scatter of ones")
    red = w_red.wait()
    if r == 0:
        ck.check_close("async/reduce", red, ref, plain_tolerance("float32", ref, inputs, "sum"), "none", "float32")
    got = w_a2a.wait()
    want = np.array([100 * k + 3 * r + j for k in range(W) for j in range(3)], np.int64)
    ck.require(np.array_equal(np.asarray(got).reshape(-1), want), f"all_to_all: {got} != {want}")
    ck.require(w_bar.wait() is None, "barrier's Work returns None")
    # each Work's own stats (last_stats now describes only the synchronous call behind them)
    st = w_ar.stats
    ck.require(st is not None and st.op == "all_reduce" and st.requested.startswith("lossy_rel"),
               f"all_reduce's Work.stats: {st}")
    ck.require(0 < st.error_bound <= E * (1 + 1e-9), f"all_reduce's Work.stats bound {st.error_bound} (E {E})")
    ck.require(w_ag.stats.op == "all_gather" and w_ag.stats.requested == "lossless", f"{w_ag.stats}")
    ck.require(w_a2a.stats.op == "all_to_all" and w_rs.stats.op == "reduce_scatter", "Work.stats of the others")
    ck.require(w_bar.stats is None, "barrier's Work has no stats (it records none)")
    ck.require(comm.last_stats.op == "all_reduce" and comm.last_stats.compression == "none", "last_stats")
    # the synchronous call got the same bits as the same call made with nothing queued
    s2 = inputs[r].copy()
    comm.all_reduce(s2)
    ck.require(bits(s) == bits(s2), "a synchronous call behind queued ones differs from the same call alone")

    # 2. many small calls queued back to back: each its own result, in issue order
    works = [comm.all_reduce(np.full(64, float(k * W + r), np.float64), async_op=True) for k in range(40)]
    comm.synchronize()
    for k, w in enumerate(works):
        want = sum(k * W + q for q in range(W))
        ck.require(w.is_completed() and np.all(w.wait() == want), f"queued call {k}: {w.wait()[:2]} != {want}")

    # 3. errors: raised by wait(), not raised again by synchronize(); an unseen one is
    w_bad = comm.all_reduce(np.ones(8, np.float32), op="bogus", async_op=True)
    w_ok = comm.all_reduce(np.ones(8, np.float32), async_op=True)  # still runs after the failed call
    try:
        w_bad.wait()
        ck.fail("op='bogus' did not raise through Work.wait()")
    except ncclz.InvalidArgumentError as e:
        ck.require("bogus" in str(e), f"error names the op: {e}")
    ck.require(isinstance(w_bad.exception(), ncclz.InvalidArgumentError), "Work.exception()")
    ck.require(w_bad.stats is None, "a failed call's Work.stats")
    comm.synchronize()  # w_bad's error was seen: nothing raised
    ck.require(np.all(w_ok.wait() == W), "the call after a failed one")
    ck.require(w_ok.stats is not None and w_ok.stats.op == "all_reduce", "the call after a failed one: stats")
    comm.all_reduce(np.ones(8, np.float32), op="bogus", async_op=True)
    try:
        comm.synchronize()
        ck.fail("synchronize() did not raise the unseen error")
    except ncclz.InvalidArgumentError:
        pass
    comm.synchronize()  # raised once only
    try:
        comm.all_reduce(np.ones(4, np.float32), async_op="yes")
        ck.fail("async_op='yes' accepted")
    except ncclz.InvalidArgumentError as e:
        ck.require("async_op" in str(e), str(e))

    # 4. calls still queued when the communicator closes: close() waits for them
    tail = [inputs[r].copy() for _ in range(3)]
    tail_works = [comm.all_reduce(t, compression=comp, policy="off", async_op=True) for t in tail]
    comm.close()
    for k, (t, w) in enumerate(zip(tail, tail_works)):
        ck.require(w.is_completed(), f"close() returned before queued call {k} completed")
        w.wait()
        ck.check_close(f"async/close/{k}", t, ref, E, "rel", "float32")
    try:
        comm.all_reduce(np.ones(4, np.float32), async_op=True)
        ck.fail("an asynchronous call on a closed communicator was accepted")
    except ncclz.InvalidArgumentError as e:
        ck.require("closed" in str(e), str(e))
    return {"checks": ck.checks, "all_reduce": digest(a), "all_gather": digest(g), "small": [float(w.wait()[0]) for w in works]}


def scenario_async_abort(ncclz, comm, args):
    """Rank 0 aborts while every rank has calls queued behind a recv that no send answers: the calls
    before it complete with the right sums, the recv and every call behind it raise AbortedError
    (here and, naming rank 0, on the peers) through their Works; nothing hangs."""
    W, r = comm.world_size, comm.rank
    x = [np.full(1 << 16, float(r + k), np.float32) for k in range(10)]
    works = [comm.all_reduce(v, async_op=True) for v in x]
    works.append(comm.recv(np.empty(10, np.float32), 1 if r == 0 else 0, async_op=True))  # never sent
    behind = [np.full(1 << 10, 1.0, np.float32) for _ in range(3)]
    works += [comm.all_reduce(v, async_op=True) for v in behind]
    if r == 0:
        for w in works[:10]:
            w.wait(timeout=60)
        time.sleep(0.3)
        # the calls returned at once: the recv (and what is queued behind it) is still pending
        assert not any(w.is_completed() for w in works[10:]), [w.is_completed() for w in works]
        comm.abort("rank 0 aborts with calls queued")
    t0 = time.monotonic()
    outcomes, messages = [], []
    for w in works:
        try:
            w.wait(timeout=60)
            outcomes.append("ok")
        except ncclz.AbortedError as e:
            outcomes.append("AbortedError")
            messages.append(str(e))
    assert outcomes == ["ok"] * 10 + ["AbortedError"] * 4, (outcomes, messages)
    assert r == 0 or "rank 0" in messages[0], f"the peers' recv must name the aborting rank: {messages[0]}"
    for k, v in enumerate(x):
        assert np.all(v == sum(q + k for q in range(W))), (k, v[:3])
    try:
        comm.synchronize()  # every error was seen through wait()
    except ncclz.Error as e:
        raise AssertionError(f"synchronize() raised an error already seen: {e}") from e
    return {"outcomes": outcomes, "messages": messages, "elapsed": time.monotonic() - t0}
