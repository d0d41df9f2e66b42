"""Rank programs of the latency-algorithm tests (tests/python/test_latency.py).

Run as ``python _latency_workers.py SCENARIO OUTDIR [ARGS...]`` in every rank with the environment of
test_comm.run_ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN, NCCLZ_TRANSPORT). Each
rank checks every element against the fp64 reference itself (the helpers of _checks.py) and writes
OUTDIR/rank<R>.json with what it saw: each call's algorithm, hashes of its outputs, the errors of the
fault scenarios.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def _refuse_peer_reads(rank):
    """NCCLZ_TEST_NO_PEER_READS=R: rank R cannot read or write the other ranks' memory (it leaves for a user
    namespace of its own, losing CAP_SYS_PTRACE over them; they make themselves non-dumpable, so that a
    same-user reader without that capability is refused), as where a container forbids it. Runs before
    anything starts a thread (unshare needs a single-threaded process)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if rank != os.environ["NCCLZ_TEST_NO_PEER_READS"]:
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        return
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


if os.environ.get("NCCLZ_TEST_NO_PEER_READS"):
    _refuse_peer_reads(os.environ["RANK"])

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checks import Checker, bits, np_dtype, plain_tolerance, rank_input, reference, run_rank_program


def _reduction(comm, coll, x, block_input, op, comp):
    """One reduction of a copy of the input (reduce: to rank 1)."""
    if coll == "all_reduce":
        return comm.all_reduce(x.copy(), op, comp, policy="off")
    if coll == "reduce_scatter":
        return comm.reduce_scatter(block_input.copy(), op, comp, policy="off")
    return comm.reduce(x.copy(), 1, op, comp, policy="off")


def _reduce(comm, coll, y, op, comp, **kw):
    """all_reduce, reduce_scatter or reduce (to rank 1) of y."""
    if coll == "all_reduce":
        return comm.all_reduce(y, op, comp, **kw)
    if coll == "reduce_scatter":
        return comm.reduce_scatter(y, op, comp, **kw)
    return comm.reduce(y, 1, op, comp, **kw)


def scenario_latency(ncclz, comm, args):
    """Every collective of the latency algorithm, in both exact modes, on small messages: every element
    against the fp64 reference, lossless bit-identical to none, data movement bit-identical to the ring,
    and the algorithm each call reports."""
    count = int(args[0]) if args else 1000
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    algos = {}
    seed = 0
    for dtype in ("float32", "bfloat16", "float64", "int32"):
        for op in ("sum", "avg", "max"):
            seed += 1
            inputs = [rank_input(j, count, dtype, seed) for j in range(W)]
            blocks = [rank_input(j, count * W, dtype, seed) for j in range(W)]
            ref = reference(inputs, op)
            ref_rs = reference(blocks, op)[r * count:(r + 1) * count]
            tol = plain_tolerance(dtype, ref, inputs, op)
            tol_rs = plain_tolerance(dtype, ref_rs, [b[r * count:(r + 1) * count] for b in blocks], op)
            if dtype == "int32" and op == "avg":  # the integer mean truncates toward zero
                tol = tol_rs = 1.0
            none_bits = {}
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                name = f"{dtype}/{op}/{mode}"
                for coll in ("all_reduce", "reduce_scatter", "reduce"):
                    out = _reduction(comm, coll, inputs[r], blocks[r], op, comp)
                    algos[f"{coll}/{name}"] = comm.last_stats.algorithm
                    if coll == "reduce" and r != 1:
                        continue
                    want, allowed = (ref_rs, tol_rs) if coll == "reduce_scatter" else (ref, tol)
                    ck.check_close(f"{coll}/{name}", out, want, allowed, mode, dtype)
                    ck.record(f"{coll}/{name}", out)
                    if mode == "none":
                        none_bits[coll] = bits(out)
                    else:
                        ck.require(bits(out) == none_bits[coll], f"{coll}/{name}: lossless differs from none")
            if op != "sum":
                continue
            # data movement: the inputs exactly, and the ring's bits
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                name = f"{dtype}/{mode}"
                g = comm.all_gather(inputs[r], comp, policy="off")
                algos[f"all_gather/{name}"] = comm.last_stats.algorithm
                ck.require(bits(np.asarray(g).reshape(-1)) == bits(np.concatenate(inputs)),
                           f"all_gather/{name}: not the inputs")
                g_latency_stats = comm.last_stats
                g_ring = comm.all_gather(inputs[r], comp, policy="off", algorithm="ring")
                ck.require(comm.last_stats.algorithm == "ring", "algorithm='ring' did not run the ring")
                # the ring's channel loops take part of the call's wall time; the latency algorithm has none
                st = comm.last_stats
                ck.require(0 < st.schedule_s <= st.wall_s, f"ring schedule_s {st.schedule_s} of wall_s {st.wall_s}")
                if g_latency_stats.algorithm == "latency":
                    ck.require(g_latency_stats.schedule_s == 0, "the latency algorithm reported channel loops")
                ck.require(bits(g) == bits(g_ring), f"all_gather/{name}: not the ring's bits")
                b = comm.broadcast(inputs[r].copy(), 2 % W, comp, policy="off")
                algos[f"broadcast/{name}"] = comm.last_stats.algorithm
                ck.require(bits(b) == bits(inputs[2 % W]), f"broadcast/{name}: not the root's input")
                ck.record(f"all_gather/{name}", g)
    # all_reduce near the limit: two hops where one would send (N-1) x 40 KB (docs/ALGORITHMS.md)
    for dtype in ("float32", "bfloat16"):
        n = 40000 // np_dtype(dtype).itemsize
        inputs = [rank_input(j, n, dtype, 99) for j in range(W)]
        ref = reference(inputs, "sum")
        for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
            out = comm.all_reduce(inputs[r].copy(), "sum", comp, policy="off")
            name = f"all_reduce/wide/{dtype}/{mode}"
            algos[name] = comm.last_stats.algorithm
            ck.check_close(name, out, ref, plain_tolerance(dtype, ref, inputs, "sum"), mode, dtype)
            ck.record(name, out)
    # all_reduce above latency_bytes: two hops, each block in pieces of at most a slot less 128 bytes,
    # up to two_hop_bytes (by default (2N-3) x the slot / 4, not on sockets): just over the one, at the other
    cfg = comm.config
    for dtype in ("float32", "bfloat16"):
        isz = np_dtype(dtype).itemsize
        for n in ((cfg.latency_bytes // isz) + 9, max(cfg.two_hop_bytes, 0) // isz):
            if cfg.latency_bytes <= 0 or not cfg.latency_bytes < n * isz <= cfg.two_hop_bytes:
                continue  # (no two hops here: sockets by default, or the latency algorithm off)
            inputs = [rank_input(j, n, dtype, 7) for j in range(W)]
            ref = reference(inputs, "sum")
            none_bits = None
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                out = comm.all_reduce(inputs[r].copy(), "sum", comp, policy="off")
                name = f"all_reduce/two_hop/{n}/{dtype}/{mode}"
                algos[name] = comm.last_stats.algorithm
                ck.check_close(name, out, ref, plain_tolerance(dtype, ref, inputs, "sum"), mode, dtype)
                ck.record(name, out)
                if none_bits is None:
                    none_bits = bits(out)
                else:
                    ck.require(bits(out) == none_bits, f"{name}: lossless differs from none")
    comm.barrier()
    return {"algorithms": algos, "hashes": ck.hashes, "checks": ck.checks,
            "two_hop_bytes": cfg.two_hop_bytes, "slot_bytes": cfg.slot_bytes}


def scenario_latency_lossy(ncclz, comm, args):
    """Small lossy requests under the default policy: rank 0 proposes none (latency-bound), every rank
    carries its data with the descriptor, and the call runs the latency algorithm exactly, with the same
    bits as the uncompressed call; every element against the fp64 reference within the plain sum's
    rounding (and within E). With policy="off" the same request runs lossy on the ring within E, and a
    bound below the exact sum's rounding makes the lightened proposal fail: the call runs lossy on the
    ring although every rank carried its data."""
    count = int(args[0]) if args else 1000
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    seen = {}
    for dtype in ("float32", "float64", "bfloat16"):
        for op in ("sum", "avg", "max"):
            inputs = [rank_input(j, count, dtype, 7) for j in range(W)]
            blocks = [rank_input(j, count * W, dtype, 8) for j in range(W)]
            ref = reference(inputs, op)
            ref_rs = reference(blocks, op)[r * count:(r + 1) * count]
            tol = plain_tolerance(dtype, ref, inputs, op)
            tol_rs = plain_tolerance(dtype, ref_rs, [b[r * count:(r + 1) * count] for b in blocks], op)
            # a bound the exact bfloat16 sum keeps (its own rounding exceeds 1e-3 and 5e-2 of the range here)
            rel = 0.2 if dtype == "bfloat16" else 1e-3
            lossy = ncclz.Lossy(rel=rel)
            for coll in ("all_reduce", "reduce_scatter", "reduce"):
                name = f"{coll}/{dtype}/{op}"
                x = blocks[r] if coll == "reduce_scatter" else inputs[r]
                plain = _reduce(comm, coll, x.copy(), op, None, policy="off")
                out = _reduce(comm, coll, x.copy(), op, lossy)  # the communicator's policy: auto
                st = comm.last_stats
                seen[name] = [st.compression, st.algorithm, st.requested]
                ck.require(st.compression == "none" and st.algorithm == "latency",
                           f"{name}: ran {st.compression} / {st.algorithm} ({st.policy})")
                if coll == "reduce" and r != 1:
                    continue
                want, allowed = (ref_rs, tol_rs) if coll == "reduce_scatter" else (ref, tol)
                ck.check_close(name, out, want, allowed, "none", dtype)
                ck.require(bits(out) == bits(plain), f"{name}: the lightened call differs from none")
                ck.record(name, out)
                if op == "sum" and coll == "all_reduce":
                    # policy off: the lossy ring within E (rel of the sum's range)
                    forced = _reduce(comm, coll, x.copy(), op, lossy, policy="off")
                    st = comm.last_stats
                    ck.require(st.compression.startswith("lossy") and st.algorithm == "ring",
                               f"{name}/off: ran {st.compression} / {st.algorithm}")
                    E = rel * float(ref.max() - ref.min())
                    ck.check_close(f"{name}/off", forced, ref, E * (1 + 1e-6) + tol, "lossy", dtype)
                    ck.record(f"{name}/off", forced)
        g = comm.all_gather(inputs[r], ncclz.Lossy(rel=5e-2))
        st = comm.last_stats
        seen[f"all_gather/{dtype}"] = [st.compression, st.algorithm, st.requested]
        ck.require(st.algorithm == "latency", f"all_gather/{dtype}: ran {st.algorithm}")
        ck.require(bits(np.asarray(g).reshape(-1)) == bits(np.concatenate(inputs)), f"all_gather/{dtype}: not the inputs")
        b = comm.broadcast(inputs[r].copy(), 2 % W, ncclz.Lossy(abs=0.5))
        st = comm.last_stats
        seen[f"broadcast/{dtype}"] = [st.compression, st.algorithm, st.requested]
        ck.require(st.algorithm == "latency", f"broadcast/{dtype}: ran {st.algorithm}")
        ck.require(bits(b) == bits(inputs[2 % W]), f"broadcast/{dtype}: not the root's input")
    # a bound below the exact float32 sum's rounding: the proposal is not taken, the lossy ring runs
    inputs = [rank_input(j, count, "float32", 9) * 1000 for j in range(W)]
    ref = reference(inputs, "sum")
    out = comm.all_reduce(inputs[r].copy(), "sum", ncclz.Lossy(rel=1e-12))
    st = comm.last_stats
    seen["all_reduce/tiny"] = [st.compression, st.algorithm, st.requested]
    ck.require(st.compression.startswith("lossy") and st.algorithm == "ring",
               f"tiny bound: ran {st.compression} / {st.algorithm}")
    ck.require("not taken" in st.policy or r != 0, f"tiny bound: policy says {st.policy!r}")
    ck.check_close("all_reduce/tiny", out, ref, plain_tolerance("float32", ref, inputs, "sum"), "lossy", "float32")
    ck.record("all_reduce/tiny", out)
    comm.barrier()
    return {"seen": seen, "hashes": ck.hashes, "checks": ck.checks}


def scenario_latency_mismatch(ncclz, comm, args):
    """Ranks disagree about a small call (a count over the limit, another collective, another mode):
    every rank raises, and the next call works on every rank (the links stay in step)."""
    r = comm.rank
    errors = {}
    cases = {
        "count": lambda: comm.all_reduce(np.ones(1000 if r != 1 else 100000, np.float32), policy="off"),
        "collective": lambda: (comm.all_gather(np.ones(250, np.float32), policy="off") if r == 2
                               else comm.all_reduce(np.ones(1000, np.float32), policy="off")),
        "mode": lambda: comm.all_reduce(np.ones(1000, np.float32),
                                        compression=ncclz.Lossy(rel=1e-3) if r == 0 else ncclz.Lossless(),
                                        policy="off"),
        # the short way (positional arguments only, Communicator._small_plain_all_reduce) on every rank
        "count/short": lambda: comm.all_reduce(np.ones(1000 if r != 1 else 2000, np.float32)),
        "dtype/short": lambda: comm.all_reduce(np.ones(1000, np.float32 if r != 2 else np.float64)),
    }
    for name, fn in cases.items():
        try:
            fn()
            errors[name] = None
        except ncclz.Error as e:
            errors[name] = {"kind": type(e).__name__, "message": str(e)}
        x = np.full(1000, float(r + 1), np.float32)
        if name.endswith("/short"):
            comm.all_reduce(x)
        else:
            comm.all_reduce(x, policy="off")
        ok = bool(np.all(x == comm.world_size * (comm.world_size + 1) / 2))
        errors[name + "/after"] = {"ok": ok, "algorithm": comm.last_stats.algorithm}
    return {"errors": errors}


def scenario_latency_short_others(ncclz, comm, args):
    """The short ways of small uncompressed reduce_scatter, all_gather and broadcast (positional
    arguments only): the bits and last_stats of the full path (algorithm="auto" takes it), every
    element against the fp64 reference; a rank with another count raises on every rank, and the next
    call works."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    for dtype in ("float32", "float64", "float16", "int32", "int64"):
        inputs = [rank_input(j, 96 * W, dtype, 41) for j in range(W)]
        for op in ("sum", "max", "min"):
            ref = reference(inputs, op)[r * 96:(r + 1) * 96]
            tol = plain_tolerance(dtype, ref, [a[r * 96:(r + 1) * 96] for a in inputs], op)
            y = comm.reduce_scatter(inputs[r], op) if op != "sum" else comm.reduce_scatter(inputs[r])
            st = comm.last_stats
            ck.require((st.op, st.compression, st.policy, y.shape, str(y.dtype))
                       == ("reduce_scatter", "none", "", (96,), dtype), f"reduce_scatter {dtype}/{op}: {st} {y.shape}")
            full = comm.reduce_scatter(inputs[r], op, algorithm="auto")
            ck.require(bits(y) == bits(full), f"reduce_scatter {dtype}/{op}: the short way differs from the full path")
            ck.check_close(f"reduce_scatter/{dtype}/{op}", y, ref, tol, "none", dtype)
            ck.record(f"reduce_scatter/{dtype}/{op}/rank{r}", y)
            o = np.full(96, 7, dtype)
            ck.require(comm.reduce_scatter(inputs[r], op, None, o) is o and bits(o) == bits(y),
                       f"reduce_scatter {dtype}/{op}: out= differs")
        mine = rank_input(r, 77, dtype, 43).reshape(7, 11)
        g = comm.all_gather(mine)
        st = comm.last_stats
        ck.require((st.op, st.compression, g.shape) == ("all_gather", "none", (W, 7, 11)), f"all_gather {st} {g.shape}")
        ck.require(bits(g) == bits(comm.all_gather(mine, algorithm="auto")), f"all_gather {dtype}: differs")
        for j in range(W):
            ck.require(bits(g[j]) == bits(rank_input(j, 77, dtype, 43).reshape(7, 11)), f"all_gather {dtype}: block {j}")
        ck.record(f"all_gather/{dtype}", g)
        o = np.zeros((W, 7, 11), dtype)
        ck.require(comm.all_gather(mine, None, o) is o and bits(o) == bits(g), f"all_gather {dtype}: out= differs")
        root = W - 1
        b = rank_input(r, 300, dtype, 47)
        y = comm.broadcast(b, root)
        ck.require(y is b and comm.last_stats.op == "broadcast", f"broadcast {dtype}: not in place")
        ck.require(bits(y) == bits(rank_input(root, 300, dtype, 47)), f"broadcast {dtype}: not the root's")
        ck.record(f"broadcast/{dtype}", y)
    errors = {}
    buf = np.zeros(10 * W, np.float32)
    for name, fn in (("rs out shape", lambda: comm.reduce_scatter(np.ones(8 * W, np.float32), "sum", None,
                                                                  np.empty(9, np.float32))),
                     ("ag out dtype", lambda: comm.all_gather(np.ones(5, np.float32), None, np.empty((W, 5)))),
                     ("ag out overlaps", lambda: comm.all_gather(buf[:10], None, buf.reshape(W, 10)))):
        try:
            fn()
            errors[name] = None
        except ncclz.Error as e:
            errors[name] = {"kind": type(e).__name__, "message": str(e)}
    for name, fn in (("reduce_scatter", lambda: comm.reduce_scatter(np.ones(8 * W if r != 1 else 16 * W, np.float32))),
                     ("all_gather", lambda: comm.all_gather(np.ones(100 if r != 0 else 101, np.float32))),
                     ("broadcast", lambda: comm.broadcast(np.ones(50, np.float32 if r != 1 else np.float64)))):
        try:
            fn()
            errors[name] = None
        except ncclz.Error as e:
            errors[name] = {"kind": type(e).__name__, "message": str(e)}
        x = np.full(4 * W, float(r + 1), np.float32)
        after = comm.reduce_scatter(x)
        errors[name + "/after"] = {"ok": bool(np.all(after == W * (W + 1) / 2))}
    comm.barrier()
    return {"hashes": ck.hashes, "checks": ck.checks, "errors": errors}


def scenario_latency_short(ncclz, comm, args):
    """The short way of small uncompressed all_reduces (positional arguments only): the same bits and
    last_stats as the full path (out= takes that), every element against the fp64 reference; calls it
    does not take (read-only, non-contiguous, bfloat16, an op in capitals, a bad op, async_op) behave as
    before."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    for dtype in ("float32", "float64", "float16", "int32", "int64"):
        for op in ("sum", "avg", "max", "min"):
            inputs = [rank_input(j, 777, dtype, 31) for j in range(W)]
            ref = reference(inputs, op)
            tol = plain_tolerance(dtype, ref, inputs, op)
            if dtype in ("int32", "int64") and op == "avg":  # the integer mean truncates toward zero
                tol = 1.0
            x = inputs[r].copy()
            y = comm.all_reduce(x, op) if op != "sum" else comm.all_reduce(x)
            ck.require(y is x, f"{dtype}/{op}: not in place")
            st = comm.last_stats
            ck.require((st.op, st.compression, st.requested, st.algorithm, st.policy)
                       == ("all_reduce", "none", "none", "latency", ""), f"{dtype}/{op}: last_stats {st}")
            ck.require(st.raw_bytes == (W - 1) * x.nbytes, f"{dtype}/{op}: raw_bytes {st.raw_bytes}")
            full = comm.all_reduce(inputs[r].copy(), op, out=np.empty_like(x))  # out=: the full path
            ck.require(bits(y) == bits(full), f"{dtype}/{op}: the short way differs from the full path")
            ck.check_close(f"{dtype}/{op}", y, ref, tol, "none", dtype)
            ck.record(f"all_reduce/{dtype}/{op}", y)
    x = rank_input(r, 500, "float32", 3)
    ref = reference([rank_input(j, 500, "float32", 3) for j in range(W)], "sum")
    tol = plain_tolerance("float32", ref, [rank_input(j, 500, "float32", 3) for j in range(W)], "sum")
    ro = x.copy()
    ro.setflags(write=False)
    y = comm.all_reduce(ro)  # read-only: a new array
    ck.require(y is not ro and bits(ro) == bits(x), "read-only input: written or returned")
    ck.check_close("readonly", y, ref, tol, "none", "float32")
    z = comm.all_reduce(x.copy(), "SUM")
    ck.check_close("capitals", z, ref, tol, "none", "float32")
    w = comm.all_reduce(x.copy(), async_op=True).wait(60)
    ck.check_close("async", w, ref, tol, "none", "float32")
    errors = {}
    for name, fn in (("strided", lambda: comm.all_reduce(np.ones(1000, np.float32)[::2])),
                     ("bad op", lambda: comm.all_reduce(np.ones(100, np.float32), "bogus")),
                     ("array op", lambda: comm.all_reduce(np.ones(100, np.float32), np.ones(2)))):
        try:
            fn()
            errors[name] = None
        except ncclz.Error as e:
            errors[name] = {"kind": type(e).__name__, "message": str(e)}
    comm.barrier()
    return {"hashes": ck.hashes, "checks": ck.checks, "errors": errors}


def scenario_latency_direct(ncclz, comm, args):
    """all_reduce above latency_bytes, whichever way its two hops run (straight between the processes'
    buffers, or through the slots: the test runs both and compares the hashes): sizes from just over
    latency_bytes to several 64 KiB pieces per block and a block over a slot, counts that N does not
    divide, float32 / bfloat16 / float64 / int32, sum / max / avg (min for int32) in turn, in place (the array itself) and
    into another array, none and lossless; every element against the fp64 reference, lossless the bits
    of none; then back-to-back calls whose arrays are freed at once (a rank must not return while a
    peer still reads or writes its buffers)."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    algos = {}
    cfg = comm.config
    ops = ("sum", "max", "avg")
    k = 0
    for dtype in ("float32", "bfloat16", "float64", "int32"):
        isz = np_dtype(dtype).itemsize
        for n in (cfg.latency_bytes // isz + 9, (3 << 16) // isz * W + 5, (5 << 20) // isz // 4 * W + W - 1):
            k += 1
            op = ops[k % 3] if dtype != "int32" else ("sum", "max", "min")[k % 3]  # (an integer avg truncates)
            inputs = [rank_input(j, n, dtype, 11 + k) for j in range(W)]
            ref = reference(inputs, op)
            none_bits = None
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                x = inputs[r].copy()
                if k % 2:
                    out = comm.all_reduce(x, op, comp, policy="off")  # in place
                    ck.require(out is x or np.shares_memory(out, x), "in place: a new array came back")
                else:
                    out = comm.all_reduce(x, op, comp, out=np.empty_like(x), policy="off")
                    ck.require(bits(x) == bits(inputs[r]), f"{dtype}/{n}: the input changed")
                name = f"all_reduce/direct/{n}/{dtype}/{op}/{mode}"
                algos[name] = comm.last_stats.algorithm
                ck.check_close(name, out, ref, plain_tolerance(dtype, ref, inputs, op), mode, dtype)
                ck.record(name, out)
                if none_bits is None:
                    none_bits = bits(out)
                else:
                    ck.require(bits(out) == none_bits, f"{name}: lossless differs from none")
    n = 300001
    for it in range(20):
        x = np.arange(n, dtype=np.int32) % 1000 * (r + 1) + it
        if (it + r) % 3 == 0:
            time.sleep(0.002)
        y = comm.all_reduce(x, policy="off")
        want = np.arange(n, dtype=np.int32) % 1000 * (W * (W + 1) // 2) + W * it
        ck.require(np.array_equal(y, want), f"back to back: call {it} wrong")
        ck.checks += 1
        del x, y
    others = _direct_others(ncclz, comm, ck)
    comm.barrier()
    return {"algorithms": algos, "others": others, "hashes": ck.hashes, "checks": ck.checks,
            "direct_from_bytes": cfg.direct_from_bytes, "two_hop_bytes": cfg.two_hop_bytes}


def _direct_others(ncclz, comm, ck):
    """reduce_scatter, all_gather and broadcast above latency_bytes (direct from NCCLZ_DIRECT_FROM_BYTES
    up, else the ring: the test compares the hashes of both runs): blocks just over the limit, of several
    64 KiB pieces and of megabytes, counts that neither N nor a piece divides, float32 / bfloat16 /
    float64 / int32, sum / max / avg / min in turn, into new arrays and given ones (out=; the Python API
    has no in-place reduce_scatter or all_gather; broadcast is in place), none and lossless; every
    element against the fp64 reference (data movement: the inputs' bits); then back-to-back calls on
    arrays freed at once. Returns each call's algorithm."""
    W, r = comm.world_size, comm.rank
    cfg = comm.config
    algos = {}
    k = 0
    for dtype in ("float32", "bfloat16", "float64", "int32"):
        isz = np_dtype(dtype).itemsize
        for c in (cfg.latency_bytes // isz // W + 3, (3 << 16) // isz + 5, (3 << 20) // isz // W + 1):
            k += 1
            op = ("sum", "max", "avg")[k % 3] if dtype != "int32" else ("sum", "max", "min")[k % 3]
            blocks = [rank_input(j, c * W, dtype, 40 + k) for j in range(W)]
            ref = reference(blocks, op)[r * c:(r + 1) * c]
            tol = plain_tolerance(dtype, ref, [b[r * c:(r + 1) * c] for b in blocks], op)
            inputs = [rank_input(j, c, dtype, 70 + k) for j in range(W)]
            root = k % W
            none_bits = None
            for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
                x = blocks[r].copy()
                if k % 2:
                    out = comm.reduce_scatter(x, op, comp, out=np.full(c, 7, x.dtype), policy="off")
                else:
                    out = comm.reduce_scatter(x, op, comp, policy="off")
                ck.require(bits(x) == bits(blocks[r]), f"reduce_scatter {dtype}/{c}: the input changed")
                name = f"reduce_scatter/direct/{c}/{dtype}/{op}/{mode}"
                algos[name] = comm.last_stats.algorithm
                ck.check_close(name, out, ref, tol, mode, dtype)
                ck.record(name, out)
                if none_bits is None:
                    none_bits = bits(out)
                else:
                    ck.require(bits(out) == none_bits, f"{name}: lossless differs from none")
                name = f"all_gather/direct/{c}/{dtype}/{mode}"
                if k % 2:
                    g = comm.all_gather(inputs[r], comp, out=np.full((W, c), 7, inputs[r].dtype), policy="off")
                else:
                    g = comm.all_gather(inputs[r], comp, policy="off")
                algos[name] = comm.last_stats.algorithm
                ck.require(bits(np.asarray(g).reshape(-1)) == bits(np.concatenate(inputs)), f"{name}: not the inputs")
                ck.record(name, g)
                name = f"broadcast/direct/{c}/{dtype}/{mode}"
                b = comm.broadcast(blocks[r].copy(), root, comp, policy="off")  # (the message: c * N elements)
                algos[name] = comm.last_stats.algorithm
                ck.require(bits(b) == bits(blocks[root]), f"{name}: not the root's input")
                ck.checks += 2
    for it in range(24):
        c = 100003 + 17 * it
        if (it + r) % 3 == 0:
            time.sleep(0.002)
        if it % 3 == 0:
            x = np.arange(c * W, dtype=np.int32) % 1000 * (r + 1) + it
            y = comm.reduce_scatter(x, policy="off")
            want = (np.arange(r * c, (r + 1) * c, dtype=np.int32) % 1000) * (W * (W + 1) // 2) + W * it
        elif it % 3 == 1:
            x = np.full(c, r * 1000 + it, np.int32)
            y = comm.all_gather(x, policy="off")
            want = np.repeat(np.arange(W, dtype=np.int32) * 1000 + it, c).reshape(W, c)
        else:
            x = np.full(c * W, it if r == it % W else -1, np.int32)
            y = comm.broadcast(x, it % W, policy="off")
            want = np.full(c * W, it, np.int32)
        ck.require(np.array_equal(y, want), f"back to back: call {it} wrong")
        algos[f"back_to_back/{it}"] = comm.last_stats.algorithm
        ck.checks += 1
        del x, y
    return algos


def scenario_latency_fault(ncclz, comm, args):
    """A rank fails during a small call: `kill` (the last rank exits without calling), `stall` (it
    sleeps past NCCLZ_TIMEOUT) or `abort` (rank 0 aborts from another thread while blocked in a call
    the last rank never joins). Every other rank must raise, within seconds."""
    what = args[0]
    W, r = comm.world_size, comm.rank
    last = W - 1
    count = int(args[1]) if len(args) > 1 else 1000  # (over latency_bytes: two hops in pieces)
    coll = args[2] if len(args) > 2 else "all_reduce"
    x = np.full(count, float(r + 1), np.float32)

    def call():
        if coll == "reduce_scatter":
            return comm.reduce_scatter(x, policy="off")
        if coll == "all_gather":
            return comm.all_gather(x[:count // W], policy="off")
        if coll == "broadcast":
            return comm.broadcast(x, 0, policy="off")
        return comm.all_reduce(x, policy="off")

    call()  # one good call first
    first = comm.last_stats.algorithm
    if r == last:
        if what == "kill":
            time.sleep(0.5)  # the others finish the first call (its bytes reached them) and block in the next
            os._exit(0)
        time.sleep(8.0 if what == "stall" else 4.0)
        return {"first": first, "error": None}
    if what == "abort" and r == 0:
        threading.Timer(0.5, comm.abort, args=("the latency test aborts",)).start()
    t0 = time.monotonic()
    try:
        call()
    except ncclz.Error as e:
        return {"first": first, "error": type(e).__name__, "message": str(e), "elapsed": time.monotonic() - t0}
    raise AssertionError(f"rank {r}: the small {coll} returned although rank {last} never called it")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


if __name__ == "__main__":
    run_rank_program(SCENARIOS)
