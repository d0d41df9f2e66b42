"""Rank programs for the multi-process tests (tests/python/test_comm.py, test_launcher.py).

Run as ``python _workers.py SCENARIO OUTDIR [ARGS...]`` in every rank, with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN (and NCCLZ_TRANSPORT,
NCCLZ_TIMEOUT) set by the test or by a launcher. Each rank checks what it can
check alone (every element against the fp64 reference and the promised bound)
and writes OUTDIR/rank<R>.json with hashes of its outputs, so the test can
check that all ranks got identical results. A failed check raises, which exits
non-zero with the traceback on stderr.

Every rank generates every rank's input from a seed, so each can compute the
exact reference (fp64) by itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback

import numpy as np
from _checks import (
    FLOAT_DTYPES,
    Checker,
    as_f64,
    bits,
    bound_of,
    digest,
    modes,
    np_dtype,
    plain_tolerance,
    rank_input,
    reference,
)
from _gpu_scenarios import scenario_gpu_bad_input, scenario_gpu_frameworks, scenario_gpu_rooted  # noqa: F401


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
    errs = {}

    def expect(name, fn, exc=None):
        exc = exc or ncclz.InvalidArgumentError
        try:
            fn()
        except exc as e:
            if exc is ncclz.RemoteError and isinstance(e, (ncclz.TimeoutError, ncclz.AbortedError)):
                raise AssertionError(f"{name}: {type(e).__name__} instead of a mismatch: {e}") from e
            errs[name] = f"{type(e).__name__}: {e}"
            return
        raise AssertionError(f"{name}: no {exc.__name__}")

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
    # the root's output of the wrong shape: the root raises before communicating (the others do not call)
    if r == 0:
        expect("gather_bad_out", lambda: comm.gather(f, root=0, out=np.empty((W, 5), np.float32)))
        expect("reduce_bad_out", lambda: comm.reduce(f, root=0, out=np.empty(5, np.float32)))
    else:
        expect("scatter_no_out", lambda: comm.scatter(None, root=0))
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
    """Ranks disagree about the call; every rank must raise (not hang, not corrupt memory)."""
    what = args[0]
    r = comm.rank
    if what == "count":
        x = np.ones(1000 + 100 * r, np.float32)
    elif what == "dtype":
        x = np.ones(1000, np.float32 if r == 0 else np.float64)
    elif what == "compression":
        x = np.ones(1000, np.float32)
    else:
        raise ValueError(what)
    comp = ncclz.Lossy(rel=1e-3) if (what == "compression" and r == 0) else None
    t0 = time.monotonic()
    try:
        comm.all_reduce(x, compression=comp)
    except ncclz.Error as e:
        return {"error": type(e).__name__, "message": str(e), "elapsed": time.monotonic() - t0}
    raise AssertionError(f"mismatched all_reduce ({what}) returned normally on rank {r}")


def scenario_badinput(ncclz, comm, args):
    """Bad arguments raise InvalidArgumentError before any communication; the communicator stays usable."""
    errs = {}

    def expect(name, fn, exc=None):
        exc = exc or ncclz.InvalidArgumentError
        try:
            fn()
        except exc as e:
            errs[name] = str(e)
            return
        raise AssertionError(f"{name}: no {exc.__name__}")

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
    expect("recv_readonly", lambda: comm.recv(ro, 0))
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


def scenario_store(ncclz, comm_unused, args):
    raise RuntimeError("handled in main")


def scenario_torchrun(ncclz, comm, args):
    import torch

    if args and args[0] == "pg":  # torch.distributed was initialized before ncclz.init()
        import torch.distributed as dist

        assert dist.is_initialized()
        dist.barrier()

    t = torch.full((1000,), float(comm.rank + 1))
    comm.all_reduce(t, compression=ncclz.Lossless())
    assert torch.all(t == sum(range(1, comm.world_size + 1))), t[:4]
    comm.all_reduce(t, op="avg", compression=ncclz.Lossy(abs=1e-3))
    return {"value": float(t[0]), "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}}


def scenario_jax(ncclz, comm, args):
    """JAX arrays are immutable: every call returns a new JAX array and leaves the input alone."""
    import jax.numpy as jnp

    W, r = comm.world_size, comm.rank
    inputs = [rank_input(k, 5000, "float32", 7) for k in range(W)]
    x = jnp.asarray(inputs[r])
    y = comm.all_reduce(x, compression=ncclz.Lossy(rel=1e-3))
    assert type(y).__module__.startswith("jax") and y is not x, type(y)
    assert np.array_equal(np.asarray(x), inputs[r]), "the JAX input was modified"
    E = bound_of(ncclz.Lossy(rel=1e-3), inputs)
    assert np.max(np.abs(np.asarray(y, np.float64) - reference(inputs, "sum"))) <= E
    b = jnp.asarray(inputs[r]).astype(jnp.bfloat16)
    g = comm.all_gather(b, compression=ncclz.Lossless())
    assert g.dtype == jnp.bfloat16 and g.shape == (W, 5000)
    assert np.array_equal(np.asarray(g[r]), np.asarray(b))
    z = comm.broadcast(jnp.full(10, float(r)), root=W - 1)
    assert np.all(np.asarray(z) == W - 1)
    rs = comm.reduce_scatter(jnp.ones((2 * W, 3), jnp.int32))
    assert rs.shape == (2, 3) and np.all(np.asarray(rs) == W)
    return {"hashes": {"all_reduce/jax": digest(np.asarray(y)), "all_gather/jax": digest(np.asarray(g))}}


def scenario_launcher(ncclz, comm, args):
    """Used by test_launcher: an all_reduce, then optionally fail on one rank."""
    x = np.full(4096, comm.rank, np.float64)
    comm.all_reduce(x)
    print(f"sum={x[0]:g} rank={comm.rank}", flush=True)
    if args and args[0] == "fail" and comm.rank == int(args[1]):
        os._exit(int(args[2]))  # a crash: no teardown, no abort message to the peers
    if args and args[0] == "fail":
        # The healthy ranks go on talking; the dead rank makes them raise.
        try:
            for _ in range(1000):
                comm.all_reduce(np.ones(1 << 14, np.float32))
                time.sleep(0.01)
        except ncclz.RemoteError as e:
            print(f"rank {comm.rank} saw {type(e).__name__}", flush=True)
            sys.exit(3)
    return {"sum": float(x[0])}


def scenario_policy(ncclz, comm, args):
    """The compression policy (tests/python/test_policy.py): requested-compression calls on every
    collective; checks every element against the requested bound (or bit-identity for lossless),
    and reports the mode each call ran with and why, so the test can check all ranks agree.

    args: count=N, comp=rel=R|abs=E|lossless, colls=a,b, percall=off (policy="off" on each call),
    stub=none|lossless|raise (rank 0's policy always proposes that, or raises), observe (an uncompressed 8 MiB
    all_reduce first, for the policy to measure the link), measure (rank 0's policy starts with
    measured times for all_reduce: compressed 10 s, uncompressed 10 ms), seed=S."""
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    W, r = comm.world_size, comm.rank
    count = int(kv.get("count", 1 << 20))
    seed = int(kv.get("seed", 7))
    comp_s = kv.get("comp", "rel=1e-3")
    comp = ncclz.Lossless() if comp_s == "lossless" else ncclz.Lossy(**{comp_s.split("=")[0]: float(comp_s.split("=")[1])})
    colls = kv.get("colls", "all_reduce,reduce_scatter,all_gather,broadcast").split(",")
    percall = kv.get("percall")
    ck = Checker(comm)
    out = {"calls": {}}
    if "stub" in kv and r == 0:
        from ncclz.policy import Choice

        want = kv["stub"]

        class Stub:
            def choose(self, coll, x, requested, nbytes=None):
                if want == "raise":
                    raise RuntimeError("stub policy failure")
                return Choice(want, None if want == "none" else ncclz.Lossless(), {}, "test stub")

            def observe(self, stats):
                pass

        comm.reset_policy(Stub())
    if "measure" in args and r == 0:  # as if earlier calls had measured: compressed 10 s, plain 10 ms
        pol = comm.policy
        for _ in range(2):  # (the first of each is ignored: cold)
            pol.record("all_reduce", "float32", count * 4, comp, 10.0)
            pol.record("all_reduce", "float32", count * 4, None, 0.01)
    if "observe" in args:
        big = np.ones(2 << 20, np.float32)
        comm.all_reduce(big)
        out["link_gbps"] = comm.policy.link_gbps if r == 0 else None
    # rank-local data differs (every rank's input is different, rank 0's is noisier)
    inputs = [rank_input(k, count, "float32", seed + (100 if k == 0 else 0)) for k in range(W)]
    if W > 1:
        inputs[0] = inputs[0] + np.random.default_rng(seed).normal(0, 3, count).astype(np.float32)
    E = bound_of(comp, inputs)
    for coll in colls:
        kw = {} if percall is None else {"policy": percall}
        x = inputs[r].copy()
        if coll == "all_reduce":
            got = comm.all_reduce(x, compression=comp, **kw)
            ref = reference(inputs, "sum")
        elif coll == "reduce_scatter":
            got = comm.reduce_scatter(x, compression=comp, **kw)
            ref = reference(inputs, "sum").reshape(W, -1)[r]
        elif coll == "all_gather":
            got = comm.all_gather(x, compression=comp, **kw)
            ref = np.stack([as_f64(a) for a in inputs])
        else:
            got = comm.broadcast(x, root=W - 1, compression=comp, **kw)
            ref = as_f64(inputs[W - 1])
        st = comm.last_stats
        out["calls"][coll] = {"compression": st.compression, "requested": st.requested, "policy": st.policy,
                              "error_bound": st.error_bound, "requested_bound": st.requested_bound,
                              "hash": digest(got)}
        if E is not None:
            ck.require(st.error_bound <= E * (1 + 1e-9), f"{coll}: stats promise {st.error_bound} > {E}")
            ck.check_close(f"{coll}", got, ref, E, comp_s, "float32")
            if st.error_bound > 0:  # what the call reports it achieved holds too
                ck.check_close(f"{coll} (achieved)", got, ref, st.error_bound, comp_s, "float32")
        else:  # lossless requested: bit-identical to the uncompressed call whatever mode ran
            y = inputs[r].copy()
            if coll == "all_reduce":
                plain = comm.all_reduce(y, policy="off")
            elif coll == "reduce_scatter":
                plain = comm.reduce_scatter(y, policy="off")
            elif coll == "all_gather":
                plain = comm.all_gather(y, policy="off")
            else:
                plain = comm.broadcast(y, root=W - 1, policy="off")
            ck.require(bits(got) == bits(plain), f"{coll}: lossless result differs from uncompressed")
    out["checks"] = ck.checks
    if r == 0 and "stub" not in kv:  # what rank 0's policy learned from the calls (ncclz.policy.Measurement)
        out["measurements"] = [dataclasses.asdict(m) for m in comm.policy.measurements()]
    return out


def layout_field(rank, rows=384, cols=512):
    """A smooth 2-D field, different on every rank (for the shape-hint scenario)."""
    y, x = np.meshgrid(np.linspace(0, 1, rows), np.linspace(0, 1, cols), indexing="ij")
    f = np.sin(6 * x + 3 * y + 0.3 * rank) + np.cos(5 * y - 2 * x) + np.exp(-((x - 0.4) ** 2 + (y - 0.6) ** 2) / 0.02)
    return f.astype(np.float32)


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


def scenario_effort(ncclz, comm, args):
    """The policy's codec effort (PolicyHints.rans_margin), proposed by rank 0 only: every rank must
    encode with it (its wire bytes change) and the results must be the same bits as with the default
    effort, within the bound on every element. all_reduce, reduce_scatter, all_gather, broadcast of a
    smooth field (where the default selector picks rANS). The hints are the policy's, passed beside the
    Compression to the native collectives."""
    W, r = comm.world_size, comm.rank
    nat = comm._native
    c = ncclz._core.comm.Compression("lossy_rel", 1e-3, "", 0)
    H = ncclz._core.comm.PolicyHints
    fields = [layout_field(k).reshape(-1) for k in range(W)]
    exact = sum(f.astype(np.float64) for f in fields)
    bound = 1e-3 * float(exact.max() - exact.min())
    out = {}
    for margin in (-1.0, 1.0, 0.4):
        # only rank 0 proposes: the others pass the default and must follow rank 0
        h = H("", margin if r == 0 else -1.0)
        res = {}
        x = fields[r].copy()
        st = nat.all_reduce(x, x, "sum", c, "", h)
        res["all_reduce"] = {"hash": digest(x), "wire": st.wire_bytes, "bound": bound,
                             "err": float(np.abs(x.astype(np.float64) - exact).max())}
        k = exact.size // W
        y = np.empty(k, fields[r].dtype)
        st = nat.reduce_scatter(fields[r].copy(), y, "sum", c, "", h)
        res["reduce_scatter"] = {"hash": digest(y), "wire": st.wire_bytes, "bound": bound,
                                 "err": float(np.abs(np.asarray(y, np.float64) - exact[r * k:(r + 1) * k]).max())}
        g = np.empty((W, fields[r].size), fields[r].dtype)
        st = nat.all_gather(fields[r].copy(), g, c, "", h)
        gspan = float(max(f.max() for f in fields) - min(f.min() for f in fields))
        res["all_gather"] = {"hash": digest(g), "wire": st.wire_bytes, "bound": 1e-3 * gspan,
                             "err": max(float(np.abs(g[k2].astype(np.float64) - fields[k2]).max()) for k2 in range(W))}
        b = fields[0].copy() if r == 0 else np.zeros_like(fields[0])
        st = nat.broadcast(b, 0, c, "", h)
        res["broadcast"] = {"hash": digest(b), "wire": st.wire_bytes, "bound": 1e-3 * float(np.ptp(fields[0])),
                            "err": float(np.abs(b.astype(np.float64) - fields[0]).max())}
        out[str(margin)] = res
    # a margin outside [0, 1] is an argument error on the rank that passes it (all ranks here)
    errs = {}
    for bad in (1.5, float("nan")):
        try:
            x = fields[r].copy()
            nat.all_reduce(x, x, "sum", c, "", H("", bad))
            errs[str(bad)] = "no error"
        except ncclz.InvalidArgumentError as e:
            errs[str(bad)] = str(e)
    out["errors"] = errs
    # rank 0's proposal alone is bad: it fails the call on every rank (the others: RemoteError)
    try:
        x = fields[r].copy()
        nat.all_reduce(x, x, "sum", c, "", H("", 2.0 if r == 0 else -1.0))
        out["rank0_bad"] = "no error"
    except ncclz.Error as e:
        out["rank0_bad"] = type(e).__name__
    return out


def scenario_config(ncclz, comm, args):
    """The configuration the communicator uses (the runtime's, defaults resolved)."""
    return comm._native.config.as_dict()


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


SCENARIOS = {name[len("scenario_") :]: fn for name, fn in globals().items() if name.startswith("scenario_")}


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
