"""Rank programs of the collectives themselves: every collective, mode, dtype and op against the fp64 reference
(test_comm.py, test_pairwise_rooted.py, test_topology.py), the shape hint, mostly-zero inputs and the pipelined quantizer.

Run by _workers.py (its docstring says how); each scenario returns a JSON-able dict."""

from __future__ import annotations

import os

import numpy as np
from _checks import (
    FLOAT_DTYPES,
    Checker,
    Errors,
    as_f64,
    bits,
    bound_of,
    digest,
    layout_field,
    modes,
    np_dtype,
    plain_tolerance,
    rank_input,
    reference,
)


def scenario_collectives(ncclz, comm, args):
    """Every collective, every mode, several dtypes and ops, NumPy inputs (torch if asked; CUDA
    tensors with "cuda" or NCCLZ_TEST_DEVICE=cuda on this rank, whose results must stay there)."""
    device = "cuda" if "cuda" in args else os.environ.get("NCCLZ_TEST_DEVICE", "cpu")
    use_torch = "torch" in args or device == "cuda"
    if use_torch:
        import torch
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    sizes = [int(a.split("=")[1]) for a in args if a.startswith("count=")] or [12347]
    dtypes = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]
    if use_torch:
        dtypes = ["float32", "bfloat16", "int64"]

    def wrap(a):
        if not use_torch:
            return a
        if a.dtype == np_dtype("bfloat16"):
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
        t = torch.from_numpy(a.copy()).to(device)
        return t.requires_grad_(True) if t.is_floating_point() else t

    def unwrap(t):
        if not use_torch:
            return t
        ck.require(t.device.type == device, f"a result is on {t.device}, the inputs on {device}")
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np_dtype("bfloat16"))
        return t.numpy()

    seed = 0
    for count in sizes:
        for dtype in dtypes:
            ops = ["sum", "max"] if dtype in ("uint8",) else ["sum", "avg", "max", "min"]
            if dtype in ("float16", "bfloat16", "int64") or use_torch:
                ops = ["sum", "max"]
            for op in ops:
                seed += 1
                inputs = [rank_input(k, count, dtype, seed) for k in range(W)]
                ref = reference(inputs, op)
                none_out = None
                for mname, comp in modes(ncclz, dtype):
                    x = wrap(inputs[r].copy())
                    y = comm.all_reduce(x, op=op, compression=comp)
                    ck.require(y is x, "all_reduce must work in place by default")
                    got = unwrap(y)
                    name = f"all_reduce/{count}/{dtype}/{op}/{mname}"
                    ck.record(name, got)
                    E = bound_of(comp, inputs)
                    if E is None:
                        if dtype in FLOAT_DTYPES:
                            ck.check_close(
                                name, got, ref, plain_tolerance(dtype, ref, inputs, op), mname, dtype
                            )
                        else:
                            ref_int = ref.astype(np.float64)
                            if dtype == "uint8":  # wraps modulo 256 like any uint8 sum
                                ref_int = np.mod(ref_int, 256) if op == "sum" else ref_int
                            if op == "avg":
                                ck.check_close(name, got, ref, 1.0, mname, dtype)
                            else:
                                ck.require(
                                    np.array_equal(as_f64(got), ref_int),
                                    f"rank {r}: {name}: wrong integer result",
                                )
                        if mname == "none":
                            none_out = bits(got)
                        else:
                            ck.require(
                                bits(got) == none_out, f"rank {r}: {name}: lossless differs from uncompressed"
                            )
                    else:
                        st = comm.last_stats
                        ck.require(
                            st is not None and st.op == "all_reduce",
                            'check failed: st is not None and st.op == "all_reduce"',
                        )
                        # error_bound is what the result meets: E, or where the call ran exactly
                        # (exact_fallback) what that achieved, above E only where E is below the
                        # dtype's own rounding of the result (no method could meet it).
                        ck.require(
                            abs(st.requested_bound - E) <= 1e-9 * E + 1e-300
                            and (st.error_bound <= E * (1 + 1e-9) or st.exact_fallback),
                            f"rank {r}: {name}: stats promise {st.error_bound} (asked {st.requested_bound}, exact "
                            f"fallback {st.exact_fallback}) but the contract says {E}",
                        )
                        ck.check_close(name, got, ref, max(E, st.error_bound), mname, dtype)
                        ck.require(
                            st.raw_bytes > 0 and st.wire_bytes > 0 and st.ratio > 0,
                            "check failed: st.raw_bytes > 0 and st.wire_bytes > 0 and st.ratio > 0",
                        )

        # out= and a read-only input: result in a new array, input untouched
        inputs = [rank_input(k, count, "float32", 99) for k in range(W)]
        ro = inputs[r].copy()
        ro.flags.writeable = False
        y = comm.all_reduce(ro, compression=ncclz.Lossy(rel=1e-3))
        ck.require(
            y is not ro and np.array_equal(ro, inputs[r]),
            "check failed: y is not ro and np.array_equal(ro, inputs[r])",
        )
        ck.check_close(
            "all_reduce/readonly",
            y,
            reference(inputs, "sum"),
            bound_of(ncclz.Lossy(rel=1e-3), inputs),
            "rel",
            "float32",
        )
        out = np.empty_like(ro)
        ck.require(comm.all_reduce(ro, out=out) is out, "check failed: comm.all_reduce(ro, out=out) is out")

        # reduce_scatter: first dim divisible by W, then flat count divisible
        for dtype in ["float32", "bfloat16"] if use_torch else ["float32", "float64", "int32"]:
            for shape in [(W * 3, 7, count // 97 + 1), (W * (count // W + 1),)]:
                seed += 1
                n = int(np.prod(shape))
                inputs = [rank_input(k, n, dtype, seed, shape) for k in range(W)]
                ref = reference(inputs, "sum")
                blk = shape[0] // W
                ref_mine = ref[r * blk : (r + 1) * blk]
                none_out = None
                for mname, comp in modes(ncclz, dtype):
                    y = unwrap(comm.reduce_scatter(wrap(inputs[r].copy()), op="sum", compression=comp))
                    name = f"reduce_scatter/{shape}/{dtype}/{mname}"
                    ck.require(tuple(y.shape) == (blk, *shape[1:]), f"{name}: shape {y.shape}")
                    E = bound_of(comp, inputs)
                    if E is None:
                        if dtype in FLOAT_DTYPES:
                            tol = plain_tolerance(dtype, ref, inputs, "sum")[r * blk : (r + 1) * blk]
                            ck.check_close(name, y, ref_mine, tol, mname, dtype)
                        else:
                            ck.require(np.array_equal(as_f64(y), ref_mine), name)
                        if mname == "none":
                            none_out = bits(y)
                        else:
                            ck.require(
                                bits(y) == none_out, f"rank {r}: {name}: lossless differs from uncompressed"
                            )
                    else:
                        ck.check_close(name, y, ref_mine, E, mname, dtype)

        # all_gather, broadcast
        for dtype in ["float32", "bfloat16"] if use_torch else ["float32", "float16", "int64", "uint8"]:
            seed += 1
            shape = (count // 10 + 3, 10)
            n = int(np.prod(shape))
            inputs = [rank_input(k, n, dtype, seed, shape) for k in range(W)]
            exact = np.stack([as_f64(a) for a in inputs])
            for mname, comp in modes(ncclz, dtype):
                E = bound_of(comp, inputs)
                y = unwrap(comm.all_gather(wrap(inputs[r].copy()), compression=comp))
                name = f"all_gather/{dtype}/{mname}"
                ck.require(tuple(y.shape) == (W, *shape), f"{name}: shape {y.shape}")
                ck.record(name, y)
                if E is None:
                    ck.require(bits(y) == bits(np.stack(inputs)), f"rank {r}: {name}: not exact")
                else:
                    ck.check_close(name, y, exact, E, mname, dtype)
                for root in sorted({0, W - 1}):
                    E = bound_of(comp, [inputs[root]])  # rel: the range of root's data
                    x = wrap(inputs[r].copy())
                    y = unwrap(comm.broadcast(x, root=root, compression=comp))
                    name = f"broadcast/{root}/{dtype}/{mname}"
                    ck.record(name, y)
                    if E is None:
                        ck.require(bits(y) == bits(inputs[root]), f"rank {r}: {name}: not exact")
                    else:
                        ck.check_close(name, y, as_f64(inputs[root]), E, mname, dtype)
                    if r == root and E is None:
                        ck.require(
                            bits(y) == bits(inputs[root]), "check failed: bits(y) == bits(inputs[root])"
                        )

        # send/recv around a ring (even ranks send first, odd ranks receive first)
        if W > 1:
            for dtype in ["float32", "int32"]:
                seed += 1
                inputs = [rank_input(k, count, dtype, seed) for k in range(W)]
                nxt, prv = (r + 1) % W, (r - 1) % W
                for mname, comp in modes(ncclz, dtype):
                    E = bound_of(comp, [inputs[prv]])  # rel: the range of the sender's data
                    buf = wrap(np.zeros(count, np_dtype(dtype)))
                    send = wrap(inputs[r].copy())
                    if r % 2 == 0:
                        comm.send(send, nxt, compression=comp)
                        comm.recv(buf, prv, compression=comp)
                    else:
                        comm.recv(buf, prv, compression=comp)
                        comm.send(send, nxt, compression=comp)
                    got = unwrap(buf)
                    name = f"sendrecv/{dtype}/{mname}"
                    if E is None:
                        ck.require(bits(got) == bits(inputs[prv]), f"rank {r}: {name}: not exact")
                    else:
                        ck.check_close(name, got, as_f64(inputs[prv]), E, mname, dtype)
        comm.barrier()
    if ck.failures:
        raise AssertionError(f"{len(ck.failures)} failed checks:\n" + "\n".join(ck.failures))
    return {"hashes": ck.hashes, "checks": ck.checks, "max_err_ratio": ck.max_err_ratio}


def uneven_splits(W, seed):
    """counts[i][j]: rows rank i sends to rank j: uneven, with empty blocks (the last rank sends
    nothing at all, rank 0 nothing to rank 1); the same matrix on every rank."""
    rng = np.random.default_rng(5000 + seed)
    m = rng.choice([0, 0, 1, 3, 40, 257, 700], size=(W, W))
    if W > 2:
        m[W - 1, :] = 0
        m[0, 1] = 0
    return m.astype(int)


def scenario_float16_avg(ncclz, comm, args):
    """float16 averages of values near the type's top (|x| up to 40000 of 65504), whose sums overflow:
    every rank's input is divided by N before the sum (NCCL's premultiplied average), so the result is
    finite and within the roundings of the divided inputs and of the partial sums; lossless gives the
    bits of none. Sizes for the latency algorithm, the direct / two-hop ones and the rings; ``algorithm=``
    each of args' ("ring", "hierarchical"; default: the call's own choice)."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    algorithms = [a.split("=")[1] for a in args if a.startswith("algorithm=")] or [None]
    f16 = np.float16
    for count in (300, 60000, 700001):
        count -= count % W
        xs = []
        for q in range(W):
            rng = np.random.default_rng(1000 + q)
            xs.append((rng.uniform(20000, 40000, count) * np.where(np.arange(count) % 7 == 0, -1, 1)).astype(f16))
        exact = np.mean([as_f64(x) for x in xs], axis=0)
        big = np.max(np.abs(np.stack([as_f64(x) for x in xs])), axis=0)
        # N roundings of x/N (half a float16 unit of |x|/N each) and N-1 of the partial sums (at most |x|):
        # N units of the largest input in all; float16's unit at 2^15..2^16 is 32.
        tol = W * 32.0 * np.maximum(big, 1) / 32768
        for algorithm in algorithms:
            kw = {} if algorithm is None else {"algorithm": algorithm}
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                name = f"avg16-{count}-{algorithm}-{mode}"
                mine = xs[r].copy()  # the input as made: calls that only read xs[r] must leave it so
                x = xs[r].copy()
                comm.all_reduce(x, "avg", comp, policy="off", **kw)
                ck.require(np.isfinite(as_f64(x)).all(), f"{name}: all_reduce overflowed")
                ck.check_close(name + "-all_reduce", x, exact, tol, mode, "float16")
                ck.record(name + "-all_reduce", x)
                out = np.empty_like(xs[r])
                comm.all_reduce(xs[r], "avg", comp, out=out, policy="off", **kw)  # the input untouched
                ck.require(np.array_equal(bits(out), bits(x)), f"{name}: out= differs from in place")
                ck.require(np.array_equal(bits(xs[r]), bits(mine)), f"{name}: all_reduce(out=) wrote its input")
                y = comm.reduce_scatter(xs[r], "avg", comp, policy="off", **kw)
                blk = count // W
                ck.check_close("own-" + name + "-reduce_scatter", y, exact[r * blk:(r + 1) * blk], tol[r * blk:(r + 1) * blk],
                               mode, "float16")
                ck.record("own-" + name + "-reduce_scatter", y)
                keep = xs[r].copy()
                z = comm.reduce(keep if r == 1 % W else xs[r], root=1 % W, op="avg", compression=comp, policy="off")
                if r == 1 % W:
                    ck.check_close("own-" + name + "-reduce", z, exact, tol, mode, "float16")
                    ck.record("own-" + name + "-reduce", z)
                else:
                    ck.require(z is None, f"{name}: reduce returned a result off the root")
                ck.require(np.array_equal(bits(xs[r]), bits(mine)), f"{name}: reduce_scatter or reduce wrote its input")
    ck.require(all(ck.hashes[k] == ck.hashes[k.replace("-lossless", "-none")] for k in ck.hashes if "-lossless" in k),
               "lossless differs from none")
    return {"hashes": ck.hashes, "checks": ck.checks}


def int_reference(inputs, op):
    """NCCL's reduction of int8 / uint32 / uint64 in the type itself: the sum and the product wrap, max
    and min in the type's order, avg the wrapped sum divided by N toward zero."""
    x = np.stack(inputs)
    dt = x.dtype
    with np.errstate(over="ignore"):
        if op in ("sum", "avg"):
            s = np.add.reduce(x, axis=0, dtype=dt)
            if op == "sum":
                return s
            n = len(inputs)
            if dt.kind == "u":
                return s // dt.type(n)
            return (np.sign(s) * (np.abs(s.astype(np.int64)) // n)).astype(dt)
        if op == "prod":
            return np.multiply.reduce(x, axis=0, dtype=dt)
    return x.max(0) if op == "max" else x.min(0)


def int_input(rank, count, dtype, seed):
    """Full-range values: a third near the type's top (where a signed and an unsigned order disagree),
    a third anywhere, a third small."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7000 * seed + rank)
    kind = rng.integers(0, 3, count)
    anywhere = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    top = dtype.type(info.max) - rng.integers(0, 7, count).astype(dtype)
    small = rng.integers(0, 9, count).astype(dtype)
    return np.where(kind == 0, top, np.where(kind == 1, anywhere, small)).astype(dtype)


def scenario_int_types(ncclz, comm, args):
    """int8, uint32 and uint64 (NumPy; torch tensors with "torch"): every reducing collective and op in
    both exact modes against the reduction in the type itself, the moving collectives' bits, lossy modes
    refused; ``algorithm=`` each of args' (default: the call's own choice, by size)."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    use_torch = "torch" in args
    if use_torch:
        import torch
    algorithms = [a.split("=")[1] for a in args if a.startswith("algorithm=")] or [None]

    def wrap(a):
        return torch.from_numpy(a.copy()) if use_torch else a.copy()

    def unwrap(t):
        return t.numpy() if use_torch else t

    seed = 0
    for dtype in ("int8", "uint32", "uint64"):
        for count in (5, 3001):  # the latency algorithm's size, and the rings' (or the direct hops')
            for algorithm in algorithms:
                kw = {"policy": "off"} if algorithm is None else {"policy": "off", "algorithm": algorithm}
                for op in ("sum", "avg", "max", "min", "prod"):
                    seed += 1
                    xs = [int_input(q, count * W, np.dtype(dtype), seed) for q in range(W)]
                    want = int_reference(xs, op)
                    blk = slice(r * count, (r + 1) * count)
                    for mname, comp in (("none", None), ("lossless", ncclz.Lossless())):
                        name = f"int-{dtype}-{count}-{algorithm}-{op}-{mname}"
                        got = unwrap(comm.all_reduce(wrap(xs[r]), op, comp, **kw))
                        ck.require(got.dtype == np.dtype(dtype), f"{name}: all_reduce gave {got.dtype}")
                        ck.require(np.array_equal(got, want), f"{name}: all_reduce differs from the reduction in {dtype}")
                        ck.record(name + "-all_reduce", got)
                        got = unwrap(comm.reduce_scatter(wrap(xs[r]), op, comp, **kw))
                        ck.require(np.array_equal(got, want[blk]), f"{name}: reduce_scatter differs")
                        root = seed % W
                        got = comm.reduce(wrap(xs[r]), root=root, op=op, compression=comp, policy="off")
                        if r == root:
                            ck.require(np.array_equal(unwrap(got), want), f"{name}: reduce differs on the root")
                        ck.checks += 3
        # the moving collectives carry the bits (their wire type's path)
        xs = [int_input(q, 1001 * W, np.dtype(dtype), 99) for q in range(W)]
        for mname, comp in (("none", None), ("lossless", ncclz.Lossless())):
            name = f"int-{dtype}-{mname}"
            got = unwrap(comm.all_gather(wrap(xs[r]), comp))
            ck.require(np.array_equal(np.asarray(got).reshape(-1), np.concatenate(xs)), f"{name}: all_gather")
            got = unwrap(comm.broadcast(wrap(xs[r]), root=W - 1, compression=comp))
            ck.require(np.array_equal(got, xs[W - 1]), f"{name}: broadcast")
            got = unwrap(comm.all_to_all(wrap(xs[r]), compression=comp))
            ck.require(np.array_equal(got, np.concatenate([x[r * 1001:(r + 1) * 1001] for x in xs])), f"{name}: all_to_all")
            if W >= 2 and r < 2:
                if r == 0:
                    comm.send(wrap(xs[0]), 1, compression=comp)
                else:
                    got = unwrap(comm.recv(wrap(np.zeros_like(xs[0])), 0, compression=comp))
                    ck.require(np.array_equal(got, xs[0]), f"{name}: send/recv")
            ck.checks += 4
        try:
            comm.all_reduce(wrap(xs[r]), compression=ncclz.Lossy(rel=1e-3))
            ck.fail(f"a lossy all_reduce of {dtype} did not raise")
        except ncclz.InvalidArgumentError as e:
            ck.require(f"floating-point type, got {dtype}" in str(e), f"lossy {dtype}: {e}")
    return {"hashes": ck.hashes, "checks": ck.checks}


def scenario_split(ncclz, comm, args):
    """Communicator.split: parity groups ranked backwards by key, their calls independent (exact and
    lossy, at once), color None, a split queued behind asynchronous calls, splits of splits, a bad color
    on one rank failing every rank with the parent still in step, and under NCCLZ_TOPO_HOSTS the
    members' part of the layout."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    g = comm.split(r % 2, key=-r)
    members = [q for q in range(W) if q % 2 == r % 2][::-1]  # by key -q
    ck.require(g.world_size == len(members) and g.rank == members.index(r), f"split: rank {g.rank} of {g.world_size}")
    x = np.full(1000, r + 1.0)
    ck.require(np.array_equal(g.all_reduce(x.copy()), np.full(1000, float(sum(q + 1 for q in members)))), "group sum")
    inputs = [rank_input(members[k], 5000, "float32", 3) for k in range(len(members))]
    y = g.all_reduce(rank_input(r, 5000, "float32", 3), compression=ncclz.Lossy(abs=1e-2))
    ck.check_close("split-lossy", y, reference(inputs, "sum"), 1e-2, "abs", "float32")
    ck.record("split-group", y)
    # color None, and a split queued behind asynchronous calls
    w = comm.all_reduce(np.ones(10), async_op=True)
    n = comm.split(None if r == 0 else 5)
    ck.require(np.array_equal(w.wait(), np.full(10, float(W))), "the queued call before the split")
    ck.require((n is None) == (r == 0) and (n is None or n.world_size == W - 1), "split(None)")
    # a split of a split: the group's first rank alone
    if g.world_size > 1:
        h = g.split(0 if g.rank == 0 else 1)
        ck.require(h.world_size == (1 if g.rank == 0 else g.world_size - 1), "split of a split")
        h.close()
    # a bad color on rank 1: every rank fails, naming it; the parent goes on
    try:
        comm.split(-7 if r == 1 % W else 0)
        ck.fail("a bad color did not fail")
    except ncclz.InvalidArgumentError as e:
        ck.require(r == 1 % W and "color must be an int >= 0" in str(e), f"bad color here: {e}")
    except ncclz.RemoteError as e:
        ck.require(r != 1 % W and f"rank {1 % W} passed color" in str(e), f"bad color elsewhere: {e}")
    ck.require(np.array_equal(comm.all_reduce(np.ones(3)), np.full(3, float(W))), "the parent after a failed split")
    hosts = os.environ.get("NCCLZ_TOPO_HOSTS")
    if hosts:
        t = comm.topology
        mine = [q for q in range(W) if t.host_of[q] == t.host_of[r]]
        local = comm.split(t.host_of[r])
        ck.require(local.world_size == len(mine) and local.topology.hosts == 1, f"host split: {local.topology}")
        across = comm.split(t.local_rank_of[r])
        ck.require(across.topology.hosts == t.hosts and across.topology.local_size == 1,
                   f"cross-host split: {across.topology}")
        local.close()
        across.close()
    for c in (g, n):
        if c is not None:
            c.close()
    ck.checks += 8
    return {"hashes": ck.hashes, "checks": ck.checks}


def scenario_float8(ncclz, comm, args):
    """NCCL's 8-bit floats (ml_dtypes' and torch's float8_e4m3fn and float8_e5m2): every reduction in
    none and lossless mode on values whose partial sums are exact (any order gives the reference:
    ml_dtypes' own arithmetic, rounded once), overflow to NaN / inf, data movement of every byte, and
    lossy modes refused on every rank."""
    import ml_dtypes

    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    try:
        import torch
    except ImportError:
        torch = None
    n = 3000 * W
    for name in ("float8_e4m3fn", "float8_e5m2"):
        f8 = np.dtype(getattr(ml_dtypes, name))
        for container in ("numpy", "torch") if torch is not None else ("numpy",):
            def T(a, f8=f8, name=name, container=container):
                if container == "numpy":
                    return a.copy()
                return torch.from_numpy(a.view(np.uint8).copy()).view(getattr(torch, name))

            def N(y, f8=f8):
                return y if isinstance(y, np.ndarray) else y.view(torch.uint8).numpy().view(f8)

            for op in ("sum", "avg", "max", "min", "prod"):
                rng = [np.random.default_rng([q, 77, len(op)]) for q in range(W)]
                if op == "prod":
                    xs = [g.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], n) for g in rng]
                elif op in ("max", "min"):
                    xs = [g.normal(0, 30, n) for g in rng]
                else:
                    xs = [g.integers(-2, 3, n).astype(np.float64) for g in rng]
                xs = [x.astype(np.float32).astype(f8) for x in xs]  # the inputs, rounded to the type once
                wide = np.stack([x.astype(np.float64) for x in xs])
                want = {"sum": wide.sum(0), "avg": wide.sum(0), "prod": wide.prod(0), "max": wide.max(0),
                        "min": wide.min(0)}[op]
                want = want.astype(np.float32).astype(f8)
                if op == "avg":
                    want = (want.astype(np.float32) / np.float32(W)).astype(f8)
                for c in (None, ncclz.Lossless()):
                    y = N(comm.all_reduce(T(xs[r]), op, c))
                    ck.require(y.dtype == f8, f"{name} {container}: the result's dtype {y.dtype}")
                    ck.require(np.array_equal(y.view(np.uint8), want.view(np.uint8)),
                               f"{name} {container} {op} {c}: differs from the reference")
            # data movement: every code, NaNs included, keeps its bits
            codes = ((np.arange(256) + r) % 256).astype(np.uint8).view(f8)
            g = N(comm.all_gather(T(codes), ncclz.Lossless()))
            ck.require(np.array_equal(g.view(np.uint8).reshape(W, 256),
                                      np.stack([(np.arange(256) + q) % 256 for q in range(W)]).astype(np.uint8)),
                       f"{name} {container}: all_gather bits")
            # overflow: NaN for e4m3fn, inf for e5m2 (never the largest finite value)
            big = np.full(4, 448.0 if name == "float8_e4m3fn" else 57344.0, np.float32).astype(f8)
            o = N(comm.all_reduce(T(big))).astype(np.float32)
            ck.require(bool(np.all(np.isnan(o) if name == "float8_e4m3fn" else np.isinf(o))) or W == 1,
                       f"{name} {container}: overflow gave {o}")
            try:
                comm.all_reduce(T(big), compression=ncclz.Lossy(abs=0.5))
                ck.fail(f"{name}: a lossy all_reduce was taken")
            except ncclz.InvalidArgumentError as e:
                ck.require("lossy compression takes float32" in str(e), f"lossy refusal: {e}")
    ck.checks += 4
    return {"hashes": ck.hashes, "checks": ck.checks}


def scenario_group(ncclz, comm, args):
    """Communicator.group: a ring shift in every mode and float dtype (single calls would wait for
    each other), a halo exchange with a compression per item, a torch tensor among NumPy arrays, the
    recv arrays returned, plain calls meeting groups, a group queued behind an asynchronous call, and
    a bad item refused before any message with the communicator still in step."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    right, left = (r + 1) % W, (r - 1) % W
    count = 30001
    for dtype in FLOAT_DTYPES:
        for name, c in modes(ncclz, dtype):
            x = rank_input(r, count, dtype, 11)
            y = np.zeros(count, dtype=np_dtype(dtype))
            (got,) = comm.group(sends=[(x, right)], recvs=[(y, left)], compression=c)
            ck.require(got is y, "group returns the recv arrays themselves")
            theirs = rank_input(left, count, dtype, 11)
            E = bound_of(c, [theirs])
            if E is not None:
                ck.check_close(f"group-{dtype}-{name}", y, as_f64(theirs), E, c, dtype)
            else:
                ck.require(np.array_equal(bits(y), bits(theirs)), f"exact {dtype} {name}")
    # a halo exchange: edges of different sizes both ways, lossy to the right, lossless to the left
    L, R = rank_input(r, 4000, "float32", 12), rank_input(r, 7000, "float32", 13)
    from_left, from_right = np.zeros(7000, np.float32), np.zeros(4000, np.float32)
    recvs = [(from_left, left, ncclz.Lossy(abs=1e-3)), (from_right, right, ncclz.Lossless())]
    if left == right:  # two ranks: both edges go to the one peer, matched in order (its L first, then its R)
        recvs.reverse()
    comm.group(sends=[(L, left, ncclz.Lossless()), (R, right, ncclz.Lossy(abs=1e-3))], recvs=recvs)
    ck.check_close(
        "halo-left",
        from_left,
        as_f64(rank_input(left, 7000, "float32", 13)),
        1e-3,
        ncclz.Lossy(abs=1e-3),
        "float32",
    )
    ck.require(np.array_equal(from_right, rank_input(right, 4000, "float32", 12)), "halo lossless edge")
    # large messages to both neighbours at once: the group's streams move on lanes (several channels)
    big = 400001
    A, B = rank_input(r, big, "float32", 14), rank_input(r, big, "float32", 15)
    ga, gb = np.zeros(big, np.float32), np.zeros(big, np.float32)
    comm.group(sends=[(A, right, ncclz.Lossy(abs=1e-3)), (B, left, ncclz.Lossless())],
               recvs=[(ga, left, ncclz.Lossy(abs=1e-3)), (gb, right, ncclz.Lossless())])
    ck.check_close("lanes-lossy", ga, as_f64(rank_input(left, big, "float32", 14)), 1e-3, ncclz.Lossy(abs=1e-3),
                   "float32")
    ck.require(np.array_equal(bits(gb), bits(rank_input(right, big, "float32", 15))), "lanes lossless")
    # a ring shift in which the odd ranks make plain calls one by one (send then recv, or recv then
    # send) and the even ranks group theirs: NCCL's ungrouped calls meeting a peer's group
    for name, c in (("lossless", ncclz.Lossless()), ("lossy", ncclz.Lossy(abs=1e-3))):
        x = rank_input(r, 90001, "float32", 16)
        y = np.zeros(90001, np.float32)
        if r % 2 == 0:
            comm.group(sends=[(x, right)], recvs=[(y, left)], compression=c)
        elif r % 4 == 1:
            comm.send(x, right, compression=c)
            comm.recv(y, left, compression=c)
        else:
            comm.recv(y, left, compression=c)
            comm.send(x, right, compression=c)
        ck.check_close(f"plain-meets-group-{name}", y, as_f64(rank_input(left, 90001, "float32", 16)),
                       1e-3 if name == "lossy" else 0.0, c, "float32")
    try:
        import torch

        t = torch.zeros(5000, dtype=torch.float64)
        out = comm.group(sends=(np.full(5000, float(r)), right), recvs=[(t, left)])
        ck.require(out[0] is t and bool((t == float(left)).all()), "torch recv in a group")
    except ImportError:
        pass
    # behind a queued call
    w = comm.all_reduce(np.ones(10), async_op=True)
    z = np.zeros(100)
    comm.group(sends=[(np.full(100, r + 0.5), right)], recvs=[(z, left)])
    ck.require(
        np.array_equal(w.wait(), np.full(10, float(W))) and np.all(z == left + 0.5),
        "group behind a queued call",
    )
    # a bad item: refused here before any message (every rank makes the same mistake)
    try:
        comm.group(sends=[(np.ones(3), r)])
        ck.fail("a send to itself in a group was taken")
    except ncclz.InvalidArgumentError as e:
        ck.require("must be another rank" in str(e), f"bad peer: {e}")
    try:
        comm.group(sends=[np.ones(3)])
        ck.fail("a bare array was taken as an item")
    except ncclz.InvalidArgumentError as e:
        ck.require("must be (array, peer)" in str(e), f"bad item: {e}")
    ck.require(np.array_equal(comm.all_reduce(np.ones(3)), np.full(3, float(W))), "in step after refusals")
    ck.record("group-last", z)
    ck.checks += 6
    return {"hashes": ck.hashes, "checks": ck.checks}


def scenario_pairwise_rooted(ncclz, comm, args):
    """all_to_all (equal blocks and uneven splits), reduce, gather, scatter: every mode, every dtype
    (lossy on the float ones), every root, NumPy inputs; every element against the fp64 reference
    and the bound, lossless the same bits as none, a rank's own block exact in every mode. Reports
    the wire bytes of large smooth calls per mode."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    count = int(kv.get("count", 3001))
    dtypes = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]
    out = {}

    def exact(name, got, want):
        ck.require(bits(got) == bits(want), f"rank {r}: {name}: not bit-identical to the data sent")
        ck.checks += 1

    def same_as_none(name, mname):
        if mname == "lossless":
            ck.require(ck.hashes[name] == ck.hashes[name.replace("/lossless", "/none")],
                       f"rank {r}: {name}: lossless differs from none")

    for di, dtype in enumerate(dtypes):
        base = 1000 * (di + 1)  # the same inputs in every mode
        for mname, comp in modes(ncclz, dtype):
            lossy = mname not in ("none", "lossless")
            # ---- all_to_all, equal blocks: (W*3, k) rows, block j = rows 3j..3j+2
            shape = (W * 3, count // 7 + 1)
            n = int(np.prod(shape))
            inputs = [rank_input(k, n, dtype, base + 1, shape) for k in range(W)]
            E = bound_of(comp, inputs)
            want = np.concatenate([inputs[j][3 * r : 3 * r + 3] for j in range(W)])
            y = comm.all_to_all(inputs[r].copy(), compression=comp)
            name = f"all_to_all/{dtype}/{mname}"
            ck.require(tuple(y.shape) == shape, f"{name}: shape {y.shape}")
            ck.record(name, y)
            if not lossy:
                exact(name, y, want)
            else:
                ck.check_close(name, y, as_f64(want), E, mname, dtype)
                exact(name + "/own", y[3 * r : 3 * r + 3], inputs[r][3 * r : 3 * r + 3])
                st = comm.last_stats
                ck.require(st.op == "all_to_all" and abs(st.error_bound - E) <= 1e-9 * E,
                           f"{name}: stats {st.op} promise {st.error_bound}, the contract says {E}")
            same_as_none(name, mname)

            # ---- all_to_all, uneven splits (rows along the first dimension), with and without recv_counts
            for vi, variant in enumerate(("counts", "exchange")):
                m = uneven_splits(W, base + vi)
                cols = 5
                inputs = [rank_input(k, int(m[k].sum()) * cols, dtype, base + 2 + vi, (int(m[k].sum()), cols))
                          for k in range(W)]
                E = bound_of(comp, [np.concatenate([a.ravel() for a in inputs])])  # uneven: one range
                offs = [np.concatenate([[0], np.cumsum(m[k])]) for k in range(W)]
                want = np.concatenate([inputs[j][offs[j][r] : offs[j][r + 1]] for j in range(W)])
                rc = m[:, r].tolist() if variant == "counts" else None
                y = comm.all_to_all(inputs[r].copy(), compression=comp, send_counts=m[r].tolist(), recv_counts=rc)
                name = f"all_to_allv/{variant}/{dtype}/{mname}"
                ck.require(tuple(y.shape) == (int(m[:, r].sum()), cols), f"{name}: shape {y.shape}")
                ck.record(name, y)
                if not lossy:
                    exact(name, y, want)
                else:
                    ck.check_close(name, y, as_f64(want), E, mname, dtype)
                    own = slice(int(m[:r, r].sum()), int(m[: r + 1, r].sum()))
                    exact(name + "/own", y[own], inputs[r][offs[r][r] : offs[r][r + 1]])
                same_as_none(name, mname)

            # ---- reduce to every root
            ops = ["sum", "avg", "max", "min"] + ([] if lossy or dtype == "uint8" else ["prod"])
            if dtype in ("float16", "bfloat16", "uint8"):
                ops = ["sum", "max"]
            for oi, op in enumerate(ops):
                for root in range(W):
                    inputs = [rank_input(k, count, dtype, base + 10 + 10 * oi + root) for k in range(W)]
                    if op == "prod":  # small integral values: an exact product in range
                        inputs = [(np.sign(a) * (np.round(np.abs(a)) % 3 + 1)).astype(a.dtype) for a in inputs]
                    ref = reference(inputs, op)
                    E = bound_of(comp, inputs)
                    x = inputs[r].copy()
                    y = comm.reduce(x, root=root, op=op, compression=comp)
                    name = f"reduce/{op}/{root}/{dtype}/{mname}"
                    if r != root:
                        ck.require(y is None and bits(x) == bits(inputs[r]), f"{name}: a non-root result or input changed")
                        continue
                    ck.require(y is x, f"{name}: reduce must work in place on the root by default")
                    ck.record(name, y)
                    if lossy:
                        ck.check_close(name, y, ref, E, mname, dtype)
                    elif dtype in FLOAT_DTYPES:
                        ck.check_close(name, y, ref, plain_tolerance(dtype, ref, inputs, op), mname, dtype)
                    elif op == "avg":
                        ck.check_close(name, y, ref, 1.0, mname, dtype)
                    else:
                        want = np.mod(ref, 256) if dtype == "uint8" and op == "sum" else ref
                        ck.require(np.array_equal(as_f64(y), want), f"{name}: wrong integer result")
                    same_as_none(name, mname)

            # ---- gather and scatter, every root
            for root in range(W):
                shape = (count // 10 + 2, 10)
                n = int(np.prod(shape))
                inputs = [rank_input(k, n, dtype, base + 100 + root, shape) for k in range(W)]
                E = bound_of(comp, inputs)
                y = comm.gather(inputs[r].copy(), root=root, compression=comp)
                name = f"gather/{root}/{dtype}/{mname}"
                if r != root:
                    ck.require(y is None, f"{name}: a result on a non-root rank")
                else:
                    ck.require(tuple(y.shape) == (W, *shape), f"{name}: shape {y.shape}")
                    ck.record(name, y)
                    if not lossy:
                        exact(name, y, np.stack(inputs))
                    else:
                        ck.check_close(name, y, np.stack([as_f64(a) for a in inputs]), E, mname, dtype)
                        exact(name + "/own", y[root], inputs[root])
                    same_as_none(name, mname)
                # scatter: the root's (W*rows, 10) array in W blocks of rows
                full = rank_input(root, n * W, dtype, base + 200 + root, (W * shape[0], 10))
                E = bound_of(comp, [full])  # rel: the range of the root's data
                y = comm.scatter(full.copy() if r == root else None, root=root, compression=comp,
                                 out=None if r == root else np.empty(shape, np_dtype(dtype)))
                name = f"scatter/{root}/{dtype}/{mname}"
                mine = full[r * shape[0] : (r + 1) * shape[0]]
                ck.require(tuple(y.shape) == shape, f"{name}: shape {y.shape}")
                ck.record(name, y)
                if not lossy or r == root:
                    exact(name, y, mine)
                else:
                    ck.check_close(name, y, as_f64(mine), E, mname, dtype)
                if lossy:
                    st = comm.last_stats
                    ck.require(abs(st.error_bound - E) <= 1e-9 * E, f"{name}: bound {st.error_bound}, expected {E}")
                same_as_none(name, mname)

    # torch tensors (bfloat16 too): the same calls through DLPack
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        t = torch.arange(W * 6, dtype=torch.float32).reshape(W * 2, 3) + 100 * r
        y = comm.all_to_all(t.to(torch.bfloat16), compression=ncclz.Lossless())
        want = torch.cat([(torch.arange(W * 6, dtype=torch.float32).reshape(W * 2, 3) + 100 * j)[2 * r : 2 * r + 2]
                          for j in range(W)]).to(torch.bfloat16)
        ck.require(isinstance(y, torch.Tensor) and torch.equal(y, want), f"rank {r}: torch all_to_all")
        x = torch.full((7,), float(r + 1))
        y = comm.reduce(x, root=W - 1, op="sum", compression=ncclz.Lossy(abs=1e-3))
        ck.require((y is x and abs(float(x[0]) - W * (W + 1) / 2) <= 1e-3) if r == W - 1 else y is None,
                   f"rank {r}: torch reduce")
        g = comm.gather(torch.full((2,), r, dtype=torch.int64), root=0)
        ck.require(g.tolist() == [[j, j] for j in range(W)] if r == 0 else g is None, f"rank {r}: torch gather")
        s_ = comm.scatter(torch.arange(W, dtype=torch.float64) if r == 0 else None, root=0,
                          out=None if r == 0 else torch.empty(1, dtype=torch.float64))
        ck.require(s_.tolist() == [float(r)], f"rank {r}: torch scatter")

    # wire bytes of a large smooth all_to_all, gather and reduce per mode (compressible data)
    big = [rank_input(k, W * 65536, "float32", 999) for k in range(W)]
    for mname, comp in modes(ncclz, "float32"):  # policy="off": the requested mode, whatever the link
        comm.all_to_all(big[r].copy(), compression=comp, policy="off")
        out[f"wire/all_to_all/{mname}"] = comm.last_stats.wire_bytes
        comm.gather(big[r][:65536].copy(), root=0, compression=comp, policy="off")
        out[f"wire/gather/{mname}"] = comm.last_stats.wire_bytes
        comm.reduce(big[r].copy(), root=W - 1, compression=comp, policy="off")
        out[f"wire/reduce/{mname}"] = comm.last_stats.wire_bytes
    comm.barrier()
    if ck.failures:
        raise AssertionError(f"{len(ck.failures)} failed checks:\n" + "\n".join(ck.failures))
    out.update({"hashes": ck.hashes, "checks": ck.checks})
    return out


def scenario_pairwise_rooted_errors(ncclz, comm, args):
    """Bad input to the new collectives raises InvalidArgumentError (each rank its own), mismatched
    calls and counts RemoteError on every rank; no hang, and the communicator stays usable."""
    W, r = comm.world_size, comm.rank
    errs = Errors(ncclz)
    expect = errs.expect

    f = np.ones((W * 4, 3), np.float32)
    expect("bad_root_reduce", lambda: comm.reduce(f.copy(), root=W))
    expect("bad_root_gather", lambda: comm.gather(f, root=-1))
    expect("bad_root_scatter", lambda: comm.scatter(f, root=W + 2, out=np.empty((4, 3), np.float32)))
    expect("lossy_int_a2a", lambda: comm.all_to_all(np.ones(W * 2, np.int32), compression=ncclz.Lossy(abs=1.0)))
    expect("lossy_int_gather", lambda: comm.gather(np.ones(4, np.int64), compression=ncclz.Lossy(rel=1e-3)))
    expect("lossy_prod_reduce",
           lambda: comm.reduce(f.copy(), op="prod", compression=ncclz.Lossy(rel=1e-3)))
    expect("a2a_indivisible", lambda: comm.all_to_all(np.ones(W * 3 + 1, np.float32)))
    expect("a2a_counts_sum", lambda: comm.all_to_all(f, send_counts=[4] * (W - 1) + [5]))
    expect("a2a_counts_len", lambda: comm.all_to_all(f, send_counts=[4] * (W + 1)))
    expect("a2a_counts_negative", lambda: comm.all_to_all(f, send_counts=[-1] + [4] * (W - 2) + [5]))
    expect("a2a_recv_only", lambda: comm.all_to_all(f, recv_counts=[4] * W))
    expect("a2a_bad_out", lambda: comm.all_to_all(f, out=np.empty((W * 4, 2), np.float32)))
    expect("scatter_root_indivisible", lambda: comm.scatter(np.ones(W * 4 + 1, np.float32), root=r,
                                                             out=None))
    # root-only buffers, checked where they are used: the root's output of the wrong shape, a non-root's
    # missing out=; that rank raises InvalidArgumentError and still takes part in the call as refused, so
    # the others' same call raises RemoteError (and the ranks stay in step)
    mine, theirs = ncclz.InvalidArgumentError, ncclz.RemoteError
    expect("gather_bad_out", lambda: comm.gather(f, root=0, out=np.empty((W, 5), np.float32) if r == 0 else None),
           mine if r == 0 else theirs)
    expect("reduce_bad_out", lambda: comm.reduce(f, root=0, out=np.empty(5, np.float32) if r == 0 else None),
           mine if r == 0 else theirs)
    expect("scatter_no_out", lambda: comm.scatter(np.ones((W * 4, 3), np.float32) if r == 0 else None, root=0),
           theirs if r == 0 else mine)
    # counts that do not match across ranks: rank 0 sends one more row to rank 1 than rank 1 expects
    sc = [2] * W
    rc = [2] * W
    if r == 0:
        sc[1 % W] += 1
    x = np.ones((sum(sc), 3), np.float32)
    expect("counts_mismatch", lambda: comm.all_to_all(x, send_counts=sc, recv_counts=rc), ncclz.RemoteError)
    # mismatched calls: roots, collectives, dtypes
    expect("roots_differ", lambda: comm.reduce(f.copy(), root=0 if r == 0 else W - 1), ncclz.RemoteError)
    if r == 0:
        expect("calls_differ", lambda: comm.all_to_all(f), ncclz.RemoteError)
    else:
        expect("calls_differ", lambda: comm.gather(f, root=0), ncclz.RemoteError)
    expect("dtypes_differ",
           lambda: comm.all_to_all(np.ones(W * 2, np.float32 if r == 0 else np.float64)), ncclz.RemoteError)
    # still usable
    y = comm.all_to_all(np.arange(W * 2, dtype=np.int64) + 100 * r)
    assert y.tolist() == [100 * j + 2 * r + k for j in range(W) for k in range(2)], y
    return {"errors": errs}


def scenario_layout(ncclz, comm, args):
    """all_reduce / all_gather of a 2-D field, shaped and flattened: the shape lets the wire codec use
    2-D predictors (higher ratio); both stay within the bound on every element."""
    n = comm.world_size
    fields = [layout_field(r) for r in range(n)]
    exact = sum(f.astype(np.float64) for f in fields)
    spec = ncclz.Lossy(rel=1e-3)
    span = float(exact.max() - exact.min())
    out = {}
    for name, x in (("shaped", fields[comm.rank].copy()), ("flat", fields[comm.rank].reshape(-1).copy())):
        comm.all_reduce(x, compression=spec, policy="off")
        st = comm.last_stats
        err = float(np.abs(x.reshape(exact.shape).astype(np.float64) - exact).max())
        out[f"all_reduce_{name}"] = {"ratio": st.ratio, "err": err, "bound": 1e-3 * span}
        src = fields[comm.rank] if name == "shaped" else fields[comm.rank].reshape(-1)
        g = comm.all_gather(src.copy(), compression=spec, policy="off")
        st = comm.last_stats
        gspan = float(max(f.max() for f in fields) - min(f.min() for f in fields))
        gerr = max(
            float(np.abs(np.asarray(g).reshape(n, -1)[r].astype(np.float64) - fields[r].reshape(-1)).max())
            for r in range(n)
        )
        out[f"all_gather_{name}"] = {"ratio": st.ratio, "err": gerr, "bound": 1e-3 * gspan}
    return out


def scenario_sparse(ncclz, comm, args):
    """all_reduce of sparse gradients (1% nonzero per rank, like the benchmark's "sparse" data) at
    Lossy(rel=1e-3): the selector's codec (Sparse, from the scan's lists of nonzeros) against Rans
    forced (the dense path); in place and out of place, reduce_scatter, and 16-bit types. Every
    element within the bound; digests let the test compare runs (transports, NCCLZ_SPARSE_INPUT)."""
    n, W = 3 << 18, comm.world_size
    inputs = []
    for r in range(W):
        rng = np.random.default_rng(1000 + r)
        inputs.append((rng.normal(0, 1e-3, n) * (rng.random(n) < 0.01)).astype(np.float32))
        inputs[-1][r] = -0.0  # listed by the scan, code 0: +0.0 in the output
    exact = sum(x.astype(np.float64) for x in inputs)
    lo = min(float(x.min()) for x in inputs)
    hi = max(float(x.max()) for x in inputs)
    bound = 1e-3 * (hi - lo)
    out = {}
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class ForcedLossy(ncclz.Lossy):  # a `codec` knob comm.py reads (a distinct class: its own cache key)
        codec: str = ""

    for codec in ("", "rans", "sparse"):
        spec = ForcedLossy(rel=1e-3, codec=codec)
        x = inputs[comm.rank].copy()
        comm.all_reduce(x, compression=spec, policy="off")
        st = comm.last_stats
        out[codec or "auto"] = {
            "ratio": st.ratio, "err": float(np.abs(x.astype(np.float64) - exact).max()), "bound": bound,
            "hash": digest(x), "compression": st.compression,
        }
    spec = ncclz.Lossy(rel=1e-3)
    y = np.full_like(inputs[comm.rank], np.nan)
    comm.all_reduce(inputs[comm.rank], compression=spec, out=y, policy="off")
    out["out_of_place"] = {"hash": digest(y), "err": float(np.abs(y.astype(np.float64) - exact).max()), "bound": bound}
    k = n // W
    z = comm.reduce_scatter(inputs[comm.rank], compression=spec, policy="off")
    out["reduce_scatter"] = {
        "hash": digest(z), "bound": bound,
        "err": float(np.abs(np.asarray(z, np.float64) - exact[comm.rank * k:(comm.rank + 1) * k]).max()),
    }
    for dtype, rel in (("float16", 5e-2), ("bfloat16", 2e-1)):
        dt = np_dtype(dtype)
        xs = []
        for r in range(W):
            g = np.random.default_rng(7 + r)
            xs.append((g.normal(0, 1, n) * (g.random(n) < 0.01)).astype(dt))
        ex = sum(v.astype(np.float64) for v in xs)
        span = float(max(v.astype(np.float64).max() for v in xs) - min(v.astype(np.float64).min() for v in xs))
        v = xs[comm.rank].copy()
        comm.all_reduce(v, compression=ncclz.Lossy(rel=rel), policy="off")
        out[dtype] = {"hash": digest(v), "err": float(np.abs(v.astype(np.float64) - ex).max()), "bound": rel * span,
                          "exact": comm.last_stats.exact_fallback}
        # Lossless: the uncompressed sum's bits, the mostly-zero slices as Sparse lists of bit patterns.
        ll = {}
        for mode in (ncclz.Lossless(), None):
            w = xs[comm.rank].copy()
            comm.all_reduce(w, compression=mode, policy="off")
            ll["lossless" if mode else "none"] = (digest(w), comm.last_stats.ratio)
        out[f"lossless_{dtype}"] = {"hash": ll["lossless"][0], "none_hash": ll["none"][0], "ratio": ll["lossless"][1]}
    return out


def scenario_pipeline(ncclz, comm, args):
    """Lossy all_reduce / reduce_scatter over several slices, dtypes and ops, in place and out of place,
    and all_gather / broadcast (the same lossy paths). Every element within the bound; digests of the
    outputs let the test compare the pipelined quantizer (the default) with the eager one
    (NCCLZ_PIPELINE_QUANTIZE=0 on rank 0) bit for bit."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    out = {}
    seed = 0
    for count in (W * 777, W * 300_001):  # one slice; several slices per channel and a ragged tail
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            for op in ("sum", "avg", "max"):
                seed += 1
                inputs = [rank_input(k, count, dtype, seed) for k in range(W)]
                ref = reference(inputs, op)
                # bounds well above the 16-bit types' own rounding of the sum (else the call runs exactly)
                spec = ncclz.Lossy(rel={"float16": 5e-2, "bfloat16": 2e-1}.get(dtype, 1e-2))
                x = inputs[r].copy()
                comm.all_reduce(x, op=op, compression=spec, policy="off")
                st = comm.last_stats
                ck.require(not st.exact_fallback, f"all_reduce {dtype} {op} ran exactly")
                ck.require(st.error_bound > 0, f"all_reduce {dtype} {op}: no bound")
                ck.check_close(f"ar-{count}-{dtype}-{op}", x, ref, st.error_bound, spec, dtype)
                y = np.empty_like(inputs[r])
                comm.all_reduce(inputs[r], op=op, compression=spec, out=y, policy="off")
                ck.require(digest(y) == digest(x), f"all_reduce {dtype} {op}: out= differs from in place")
                z = comm.reduce_scatter(inputs[r], op=op, compression=spec, policy="off")
                st = comm.last_stats
                ck.require(not st.exact_fallback, f"reduce_scatter {dtype} {op} ran exactly")
                ck.check_close(f"rs-{count}-{dtype}-{op}", z, ref.reshape(W, -1)[r], st.error_bound, spec, dtype)
                out[f"all_reduce-{count}-{dtype}-{op}"] = digest(x)
                out[f"reduce_scatter-{count}-{dtype}-{op}"] = digest(z)
            # data movement: inputs[-1] (the last seed's) gathered, and broadcast from the last rank
            g = comm.all_gather(inputs[r][: count // W], compression=spec, policy="off")
            st = comm.last_stats
            ck.require(not st.exact_fallback, f"all_gather {dtype} ran exactly")
            ck.check_close(f"ag-{count}-{dtype}", g, np.stack([as_f64(v[: count // W]) for v in inputs]),
                           st.error_bound, spec, dtype)
            b = inputs[r].copy() if r == W - 1 else np.zeros_like(inputs[r])
            comm.broadcast(b, root=W - 1, compression=spec, policy="off")
            st = comm.last_stats
            ck.require(not st.exact_fallback, f"broadcast {dtype} ran exactly")
            ck.check_close(f"bc-{count}-{dtype}", b, as_f64(inputs[W - 1]), st.error_bound, spec, dtype)
            out[f"all_gather-{count}-{dtype}"] = digest(g)
            out[f"broadcast-{count}-{dtype}"] = digest(b)
    out["checks"] = ck.checks
    return out


def scenario_trace(ncclz, comm, args):
    """A lossy and an uncompressed all_reduce of 300k floats (the channels' loops), for the timeline
    trace (NCCLZ_TRACE_FILE, set by tests/python/test_trace.py): the file is written at close."""
    x = (np.sin(np.arange(300_000) * 1e-3) + comm.rank).astype(np.float32)
    comm.all_reduce(x.copy(), "sum", ncclz.Lossy(rel=1e-3), policy="off")
    lossy = comm.last_stats.compression
    comm.all_reduce(x.copy(), "sum", None, policy="off")
    return {"lossy": lossy, "none": comm.last_stats.compression}
