"""Differential fuzz of the API: random calls, every result checked against the fp64 reference.

    python bench/fuzz_calls.py --ranks 3 --seed 1 --calls 200 [--env NCCLZ_TOPO_HOSTS=2x2 ...] [--out F]

Where bench/chaos.py injects faults into a few kinds of calls, this drives the API's breadth with no
faults: each call picks a collective (all_reduce, reduce_scatter, all_gather, broadcast, reduce, gather,
scatter, all_to_all with equal and uneven blocks, a send/recv pair exchange, in half of those draws
a ring shift through ``comm.group``, in half of the ring shifts with the odd ranks making plain send
and recv calls one after another, in either order, against their neighbours' groups), a dtype (float32, float64,
float16, bfloat16, int32, int64, uint8, and in half of the integer calls NCCL's uint32, uint64 or int8
in their place, in half of the float16 calls one of the 8-bit floats, float8_e4m3fn or float8_e5m2,
exact modes only), a count (0, 1, odd, prime, around the latency, direct and
ring thresholds, up to 1.5 M), a mode (none, lossless, Lossy(rel=1e-3), Lossy(abs=0.05),
Lossy(rel=1e-6)), an op, ``algorithm=`` and ``policy=`` (unset or each value), the data (smooth, noise,
small integers, zeros, constant, NaN and infinities, magnitudes over 1e±8, values near the type's
largest, tiny values), the container (NumPy or torch), the call's shape (1-D or 2-D), ``out=``,
``async_op=True`` (waited for later, after up to 3 more calls, in any order, each checked with
its ``Work.stats``), and the input's memory (contiguous, strided, read-only, offset by one element).
Every rank draws the same calls from the seed and makes every rank's input, so it computes the
reference itself.

What counts (per call, from all ranks' outcomes): **wrong**, a returned result outside its guarantee
(none and lossless: the float reduction's roundings, which grow with the sum of the inputs'
magnitudes, and N subnormal units near zero, or bit-exact for integers, wrapping as the type does; lossy: ``last_stats.error_bound``
plus the output type's rounding; non-finite elements where the float reduction puts them, an element
whose partial sums may pass the type's largest value may be infinite); **split**, ranks that ended a
call differently (one raised, another returned, or different error classes); **python**, an exception
that is not an ``ncclz.Error``. All three must be 0: the exit status is 1 otherwise. Refused calls
(``ncclz.Error`` on every rank: a dtype lossy does not take, prod in lossy mode, a non-contiguous
input) are counted by message. A call that fails on every rank with an error that aborts the
communicator ends the rank's run (the rest would only repeat it).

With ``--mismatch P`` a call is, with probability P, made differently by one rank (another count,
dtype, op, root, mode or collective, as a caller's bug would): every rank must raise an ``ncclz.Error``
(``RemoteError``, or ``InvalidArgumentError`` where the changed call is invalid on its rank), and the
communicator must stay usable. Counted as **wrong**: a rank that returned from such a call, and a call
after it that fails with an error that aborts the communicator.

The rank program is this file with ``--rank SEED CALLS OUTDIR`` under ncclz-run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

FLOATS = ("float32", "float64", "float16", "bfloat16")
DTYPES = (*FLOATS, "int32", "int64", "uint8")
#: NCCL's other integer types, each drawn in half of the calls of its sibling from a generator of its own
#: (the draws of a seed from before they were added stay as they were).
SIBLINGS = {"int32": "uint32", "int64": "uint64", "uint8": "int8"}
#: The 8-bit floats (exact modes only: each op rounds to nearest even in their own arithmetic), drawn in half
#: of the float16 calls, from a generator of their own as the siblings.
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
COUNTS = (0, 1, 2, 3, 5, 7, 8, 31, 64, 100, 255, 1000, 4097, 16385, 65536, 100003, 262147, 1 << 20, 1500007)
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter",
               "all_to_all", "all_to_allv", "sendrecv")
DATA = ("smooth", "noise", "ints", "zeros", "const", "special", "wide", "huge", "tiny")


def np_dtype(name):
    if name == "bfloat16" or name in FLOAT8:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def is_float(dt):
    """Whether dt is a floating type (the 8-bit floats too, which take no lossy mode)."""
    return dt in FLOATS or dt in FLOAT8


def largest(dt):
    return {"bfloat16": 3.3895313892515355e38, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}.get(dt) or float(
        np.finfo(np_dtype(dt)).max)


def unit(dt):
    """The type's relative rounding unit (half an ulp at 1, as a fraction)."""
    return {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53,
            "float8_e4m3fn": 2.0**-4, "float8_e5m2": 2.0**-3}[dt]


def tiniest(dt):
    """The type's smallest subnormal: what a rounding near zero may lose."""
    return {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 2.0**-1074,
            "float8_e4m3fn": 2.0**-9, "float8_e5m2": 2.0**-16}[dt]


def draw(seed, i, w):
    """Call i's parameters, the same on every rank."""
    g = np.random.default_rng([seed, i])
    dt = str(g.choice(DTYPES))
    if dt in SIBLINGS and np.random.default_rng([seed, i, 11]).random() < 0.5:
        dt = SIBLINGS[dt]
    f8 = np.random.default_rng([seed, i, 21])  # (keeps the float16 call test_fuzz names)
    if dt == "float16" and f8.random() < 0.5:
        dt = str(f8.choice(FLOAT8))
    n = int(g.choice(COUNTS))
    if n > 100000 and g.random() < 0.5:
        n = int(g.integers(1, 300000))
    coll = str(g.choice(COLLECTIVES))
    if coll == "sendrecv" and np.random.default_rng([seed, i, 13]).random() < 0.5:
        coll = "group"  # (a generator of its own: the other draws of a seed stay as they were)
    return {
        "coll": coll,
        "dt": dt,
        "n": n,
        "mode": str(g.choice(["none", "lossless"] + (["rel", "abs", "rel_small"] if dt in FLOATS else []))),
        "op": str(g.choice(["sum", "sum", "avg", "max", "min", "prod"])),
        "algo": str(g.choice(["unset", "unset", "ring", "hierarchical", "auto"])),
        "policy": str(g.choice(["unset", "off", "auto"])),
        "root": int(g.integers(0, w)),
        "out": bool(g.random() < 0.4),
        "memory": str(g.choice(["plain"] * 6 + ["strided", "readonly", "offset"])),
        "async": bool(g.random() < 0.2),
        "torch": bool(g.random() < 0.3),
        "data": str(g.choice(DATA)),
        "2d": bool(g.random() < 0.3),
        "counts": g.integers(0, 5, size=(w, w)).tolist(),  # all_to_allv: rows rank i sends to rank j
        "mismatch": None,
        # a ring shift's odd ranks: 0 grouped, 1 plain send then recv, 2 plain recv then send
        "plain": int(np.random.default_rng([seed, i, 31]).choice([0, 0, 1, 2])) if coll == "group" else 0,
    }


MISMATCH_KINDS = ("count", "dtype", "op", "root", "mode", "collective")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")


def mismatched(s, seed, i, w, p):
    """Call i as one rank makes it where it mismatches (probability p): s with "mismatch" set to
    {"rank", "kind"} on every rank, and the changed call for that rank. Its own generator: the calls
    drawn without --mismatch stay the same."""
    h = np.random.default_rng([seed, i, 11])
    if w < 2 or s["coll"] in ("sendrecv", "group") or h.random() >= p:
        return s, s
    # (all_to_allv: the receivers learn the counts from the senders, so a count is no mismatch there)
    kinds = [k for k in MISMATCH_KINDS
             if (k != "op" or s["coll"] in REDUCING) and (k != "root" or s["coll"] in ROOTED)
             and (k != "count" or s["coll"] != "all_to_allv")]
    kind = str(h.choice(kinds))
    s = dict(s, mismatch={"rank": int(h.integers(0, w)), "kind": kind})
    t = dict(s)
    if kind == "count":
        t["n"] = s["n"] + w
    elif kind == "dtype":
        t["dt"] = str(h.choice([d for d in DTYPES if d != s["dt"]]))
    elif kind == "op":
        t["op"] = str(h.choice([o for o in ("sum", "avg", "max", "min", "prod") if o != s["op"]]))
    elif kind == "root":
        t["root"] = (s["root"] + 1 + int(h.integers(0, w - 1))) % w
    elif kind == "mode":
        t["mode"] = str(h.choice([m for m in ("none", "lossless", "rel", "abs", "rel_small") if m != s["mode"]]))
    else:
        t["coll"] = str(h.choice([c for c in COLLECTIVES if c not in (s["coll"], "sendrecv", "group")]))
    return s, t


def rank_data(s, seed, i, rank, n):
    g = np.random.default_rng([seed, i, rank, 7])
    dt, kind = s["dt"], s["data"]
    if kind == "zeros":
        v = np.zeros(n)
    elif kind == "const":
        v = np.full(n, 3.0)
    elif not is_float(dt) or kind == "ints" or s["op"] == "prod":
        hi = 3 if s["op"] == "prod" else 15 if dt == "int8" else 20 if dt in ("uint8", "float16", "bfloat16") else 1000
        # uint32's negative values wrap to the type's top (where a signed order would disagree); not for avg,
        # whose reference is the exact mean (the wrapped sum's division is tested in test_comm), nor for
        # uint64, whose top values float64 cannot hold
        signed = dt not in ("uint8", "uint64") and not (dt == "uint32" and s["op"] == "avg")
        if not is_float(dt):
            return g.integers(-hi if signed else 0, hi, n).astype(np_dtype(dt))  # (an integer cast wraps)
        v = g.integers(-hi, hi, n).astype(np.float64)
    elif kind == "smooth":
        v = 10 * np.sin(np.linspace(0, 6, n) + rank) + rank
    elif kind == "wide":
        v = g.normal(0, 1, n) * np.exp(g.uniform(-20, 20, n))
    elif kind == "huge":
        v = g.uniform(-1, 1, n) * largest(dt) * 0.6
    elif kind == "tiny":
        v = g.normal(0, 1, n) * 1e-30
    else:
        v = g.normal(0, 5, n)
        if kind == "special" and n > 4:
            k = g.integers(0, n, 3)
            v[k[0]], v[k[1]], v[k[2]] = np.nan, np.inf, -np.inf if rank % 2 else np.inf
    return v.astype(np_dtype(dt))


def reduce_ref(xs, op, dt):
    x = np.stack([np.asarray(a, np.float64) for a in xs])
    with np.errstate(all="ignore"):
        if not is_float(dt) and op in ("sum", "prod"):
            r = x.astype(np.int64).sum(0) if op == "sum" else x.astype(np.int64).prod(0)
            return r.astype(np_dtype(dt)).astype(np.float64)  # wraps as the type does
        return {"sum": x.sum(0), "avg": x.sum(0) / len(xs), "max": x.max(0), "min": x.min(0),
                "prod": x.prod(0)}[op]


def magnitude(xs, op):
    """Per element, what bounds the partial results' size: the sum of |x| (sum, avg), else max |x|."""
    x = np.abs(np.stack([np.asarray(a, np.float64) for a in xs]))
    with np.errstate(all="ignore"):
        return x.sum(0) if op in ("sum", "avg") else x.max(0)


def check(got, ref, s, bound, scale, w):
    """None, or what is wrong with `got` (every element against `ref`)."""
    got = np.asarray(got, np.float64).reshape(-1)
    ref = np.asarray(ref, np.float64).reshape(-1)
    if got.shape != ref.shape:
        return f"shape {got.shape}, want {ref.shape}"
    dt, exact = s["dt"], s["mode"] in ("none", "lossless")
    scale = np.abs(ref) if scale is None or np.size(scale) != ref.size else np.asarray(scale, np.float64).reshape(-1)
    with np.errstate(all="ignore"):
        if dt in FLOATS and s["op"] == "avg" and dt == "float16" and exact:
            scale = scale / w  # each input divided by N before the sum (NCCL's premultiplied average)
        if not is_float(dt):
            tol = np.full(ref.shape, 1.0 if s["op"] == "avg" else 0.0)  # avg truncates
        elif exact:
            tol = (np.abs(ref) + scale) * unit(dt) * 2 * (w + 1) + tiniest(dt) * w
        else:
            rounding = (np.abs(ref) + bound) * unit(dt) if dt != "float64" else 0.0
            tol = bound * (1 + 1e-9) + rounding
        tol = np.broadcast_to(tol, ref.shape)
        if is_float(dt):
            # where the partial results, or the result within its tolerance, may pass the type's largest
            # value, infinity is what the float arithmetic gives: any value goes
            top = largest(dt)
            free = (scale * (1 + 2 * (w + 1) * unit(dt)) >= top) | (np.abs(ref) + tol >= top)
            ref = np.where(np.abs(ref) > top, np.sign(ref) * np.inf, ref)
        else:
            free = np.zeros(ref.shape, bool)
        nonfinite = ~np.isfinite(ref) & ~free
        same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
        if np.any(nonfinite & ~same):
            j = int(np.flatnonzero(nonfinite & ~same)[0])
            return f"element {j}: {got[j]!r}, want {ref[j]!r}"
        fin = np.isfinite(ref) & ~free
        bad = fin & ~(np.abs(got - ref) <= tol)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        return f"{int(bad.sum())} elements off, first {j}: {got[j]!r}, want {ref[j]!r} (allowed {tol[j]:.3g})"
    return None


def run_call(ncclz, torch, comm, s, seed, i):
    """Makes call i; returns None or what was wrong with its result (raises what the call raises)."""
    r, w = comm.rank, comm.world_size
    coll, dt = s["coll"], s["dt"]
    n = s["n"] - s["n"] % w if coll in ("reduce_scatter", "scatter", "all_to_all") else s["n"]
    comp = {"none": None, "lossless": ncclz.Lossless(), "rel": ncclz.Lossy(rel=1e-3), "abs": ncclz.Lossy(abs=0.05),
            "rel_small": ncclz.Lossy(rel=1e-6)}[s["mode"]]
    kw = {} if s["policy"] == "unset" else {"policy": s["policy"]}
    akw = dict(kw, **({} if s["algo"] == "unset" else {"algorithm": s["algo"]}))
    allx = [rank_data(s, seed, i, q, n) for q in range(w)]
    x = allx[r].copy()
    if s["2d"] and n % 2 == 0 and n > 0 and coll not in ("reduce_scatter", "scatter", "all_to_all", "all_to_allv"):
        x = x.reshape(2, n // 2)
    if s["memory"] == "strided" and x.ndim == 1 and coll not in ("scatter", "sendrecv", "group"):
        big = np.empty(2 * n, x.dtype)
        big[::2] = x
        x = big[::2]
    elif s["memory"] == "readonly":
        x.setflags(write=False)
    elif s["memory"] == "offset" and x.ndim == 1:
        big = np.empty(n + 1, x.dtype)
        big[1:] = x
        x = big[1:]

    def T(a):  # the container
        if not s["torch"] or a is None:
            return a
        if a.dtype == np_dtype("bfloat16"):
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        if dt in FLOAT8:
            return torch.from_numpy(a.view(np.uint8)).view(getattr(torch, dt))
        return torch.from_numpy(a)

    def N(y):
        y = y.wait() if s["async"] and hasattr(y, "wait") else y
        if torch is not None and isinstance(y, torch.Tensor):
            if y.dtype == torch.bfloat16:
                return y.view(torch.int16).numpy().view(np_dtype("bfloat16"))
            return y.view(torch.uint8).numpy().view(np_dtype(dt)) if dt in FLOAT8 else y.numpy()
        return y

    def bound():
        st = comm.last_stats
        return st.error_bound if st else 0.0

    def checked(y, ref, scale):
        """check() now, or for an asynchronous call a function that waits for it and checks it later
        (with the bound from its Work.stats: other calls may have completed meanwhile)."""
        if not s["async"]:
            return check(N(y), ref, s, bound(), scale, w)

        def finish():
            got = N(y)
            st = y.stats
            return check(got, ref, s, st.error_bound if st else 0.0, scale, w)

        return finish

    a = {"async_op": True} if s["async"] else {}
    op = s["op"]
    if coll == "all_reduce":
        y = comm.all_reduce(T(x), op, comp, out=T(np.empty_like(x)) if s["out"] else None, **a, **akw)
        return checked(y, reduce_ref(allx, op, dt), magnitude(allx, op))
    if coll == "reduce_scatter":
        y = comm.reduce_scatter(T(x), op, comp, **a, **akw)
        return checked(y, reduce_ref(allx, op, dt).reshape(w, -1)[r], magnitude(allx, op).reshape(w, -1)[r])
    if coll == "all_gather":
        y = comm.all_gather(T(x), comp, **a, **akw)
        return checked(y, np.stack([a_.astype(np.float64) for a_ in allx]), None)
    if coll == "broadcast":
        y = comm.broadcast(T(x), s["root"], comp, **a, **akw)
        return checked(y, allx[s["root"]], None)
    if coll == "reduce":
        y = N(comm.reduce(T(x), s["root"], op, comp, **kw))
        if r != s["root"]:
            return None if y is None else "a result off the root"
        return check(y, reduce_ref(allx, op, dt), s, bound(), magnitude(allx, op), w)
    if coll == "gather":
        y = N(comm.gather(T(x), s["root"], comp, **kw))
        if r != s["root"]:
            return None if y is None else "a result off the root"
        return check(y, np.stack([a_.astype(np.float64) for a_ in allx]), s, bound(), None, w)
    if coll == "scatter":
        if r == s["root"]:
            y = N(comm.scatter(T(x), s["root"], comp, **kw))
        else:
            y = N(comm.scatter(None, s["root"], comp, out=T(np.empty(n // w, np_dtype(dt))), **kw))
        return check(y, allx[s["root"]].astype(np.float64).reshape(w, -1)[r], s, bound(), None, w)
    if coll == "all_to_all":
        y = comm.all_to_all(T(x), comp, **a, **kw)
        want = np.concatenate([allx[q].astype(np.float64).reshape(w, -1)[r] for q in range(w)]) if n else np.zeros(0)
        return checked(y, want, None)
    if coll == "all_to_allv":
        cnt = s["counts"]
        rows = [rank_data(s, seed, i, q, 3 * sum(cnt[q])).reshape(-1, 3) for q in range(w)]
        y = N(comm.all_to_all(T(rows[r]), comp, send_counts=cnt[r], **kw))
        want = np.concatenate([rows[q][sum(cnt[q][:r]):sum(cnt[q][:r + 1])].astype(np.float64) for q in range(w)])
        return check(y, want, s, bound(), None, w)
    if coll == "group":  # a ring shift: each rank sends to r+1 and receives from r-1 at once
        right, left = (r + 1) % w, (r - 1) % w
        y = T(np.empty_like(allx[r]))
        if r % 2 == 0 or not s["plain"]:
            (y,) = comm.group(sends=[(T(x), right)], recvs=[(y, left)], compression=comp)
            e = bound()  # the larger of the two ends' E
        elif s["plain"] == 1:  # (both neighbours of an odd rank are even: they group)
            comm.send(T(x), right, comp)
            y = comm.recv(y, left, comp)
            e = bound()
        else:
            y = comm.recv(y, left, comp)
            e = bound()  # the sender's E, before the send's stats replace it
            comm.send(T(x), right, comp)
        return check(N(y), allx[left], s, e, None, w)
    if w % 2:  # sendrecv: pairs (0, 1), (2, 3), ...
        return None
    peer = r ^ 1
    buf = np.empty_like(allx[r])
    if r % 2 == 0:
        comm.send(x, peer, comp)
        y = comm.recv(buf, peer, comp)
        e = bound()
    else:
        y = comm.recv(buf, peer, comp)
        e = bound()  # the sender's E, before the send's stats replace it
        comm.send(x, peer, comp)
    return check(y, allx[peer], s, e, None, w)


def rank_main(seed, calls, outdir, p_mismatch=0.0):
    import ncclz

    try:
        import torch
    except ImportError:
        torch = None
    comm = ncclz.init()
    results, pending = [], []  # pending: (result, finish) of asynchronous calls not waited for yet

    def outcome_of(fn):
        try:
            return "ok", fn()
        except ncclz.Error as e:
            return f"{type(e).__name__}: {e}", None
        except Exception as e:  # counted: any exception that is not an ncclz error is a finding
            return f"python {type(e).__name__}: {e}\n{traceback.format_exc()[-800:]}", None

    def finish_pending(g):
        for k in g.permutation(len(pending)):  # waited for in any order; they ran in issue order
            res, fin = pending[k]
            res["outcome"], res["wrong"] = outcome_of(fin)
        pending.clear()

    for i in range(calls):
        s = draw(seed, i, comm.world_size)
        if s["torch"] and torch is None:
            s["torch"] = False
        s, mine = mismatched(s, seed, i, comm.world_size, p_mismatch)
        if s["mismatch"] and s["mismatch"]["rank"] != comm.rank:
            mine = s
        outcome, wrong = outcome_of(lambda s=mine, i=i: run_call(ncclz, torch, comm, s, seed, i))
        res = {"i": i, "call": {k: v for k, v in s.items() if k != "counts"}, "outcome": outcome, "wrong": wrong}
        results.append(res)
        if callable(wrong):
            res["wrong"] = None
            pending.append((res, wrong))
        g = np.random.default_rng([seed, i, 3])
        if len(pending) >= 4 or g.random() < 0.5:
            finish_pending(g)
        if outcome.startswith(("AbortedError", "TimeoutError", "RemoteError")) and not s["mismatch"]:
            break
    finish_pending(np.random.default_rng([seed, calls, 3]))
    Path(outdir, f"rank{comm.rank}.json").write_text(json.dumps(results))
    comm.close()


def summarize(per_rank):
    """The counts described in the module doc, from every rank's list of outcomes."""
    out = {"calls": 0, "ok": 0, "wrong": [], "split": [], "python": [], "refused": collections.Counter(),
           "mismatched": 0}
    after_mismatch = False
    for calls in zip(*per_rank):
        out["calls"] += 1
        first = calls[0]
        kinds = {c["outcome"].split(":")[0] for c in calls}
        if first["call"].get("mismatch"):
            out["mismatched"] += 1
            after_mismatch = True
            for r, c in enumerate(calls):
                if c["outcome"] == "ok":
                    out["wrong"].append({"rank": r, "call": first["call"], "wrong": "returned from a mismatched call"})
            continue
        if after_mismatch and kinds & {"AbortedError", "TimeoutError"}:
            out["wrong"].append({"call": first["call"], "wrong": "the communicator failed after a mismatched call",
                                 "outcomes": [c["outcome"][:300] for c in calls]})
        if len(kinds) > 1:
            out["split"].append({"call": first["call"], "outcomes": [c["outcome"][:300] for c in calls]})
        for r, c in enumerate(calls):
            if c["outcome"].startswith("python"):
                out["python"].append({"rank": r, "call": c["call"], "error": c["outcome"]})
            if c["wrong"]:
                out["wrong"].append({"rank": r, "call": c["call"], "wrong": c["wrong"]})
        if first["outcome"] == "ok":
            out["ok"] += 1
        else:
            msg = first["outcome"].split(": ", 2)
            out["refused"][": ".join(msg[:1] + [msg[-1][:90]])] += 1
    if len({len(x) for x in per_rank}) > 1:
        out["split"].append({"ranks ended after": [len(x) for x in per_rank]})
    out["refused"] = dict(out["refused"].most_common())
    return out


def main(program=None, ap=None):
    """The driver: starts the ranks of `program` (this file, or bench/fuzz_torch.py) under ncclz-run,
    then summarizes their outcomes."""
    program = program or os.path.abspath(__file__)
    ap = ap or argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", nargs=3, metavar=("SEED", "CALLS", "OUTDIR"), help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--env", action="append", default=[], help="K=V for the ranks (repeatable)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    ap.add_argument("--out", help="write the summary (JSON) here too")
    ap.add_argument("--mismatch", type=float, default=0.0,
                    help="probability that one rank makes a call differently (fuzz_calls only)")
    a = ap.parse_args()
    if a.rank:
        rank_main(int(a.rank[0]), int(a.rank[1]), a.rank[2], float(os.environ.get("NCCLZ_FUZZ_MISMATCH", "0")))
        return 0
    # the policy off unless asked for (--env NCCLZ_POLICY=auto; calls still draw policy="auto"): on one
    # host it runs every lossy call exact, and the lossy paths would go unchecked
    env = dict(os.environ, NCCLZ_TIMEOUT=os.environ.get("NCCLZ_TIMEOUT", "30"),
               NCCLZ_POLICY=os.environ.get("NCCLZ_POLICY", "off"))
    env.update(kv.split("=", 1) for kv in a.env)
    env["NCCLZ_FUZZ_MISMATCH"] = str(a.mismatch)
    with tempfile.TemporaryDirectory(prefix="ncclz-fuzz-") as d:
        cmd = [sys.executable, "-m", "ncclz.run", "-n", str(a.ranks), sys.executable, program,
               "--rank", str(a.seed), str(a.calls), d]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
            log, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            log, rc = f"the ranks did not finish in {a.timeout:g} s: {e}", "timeout"
        files = [Path(d, f"rank{r}.json") for r in range(a.ranks)]
        if rc != 0 or not all(f.exists() for f in files):
            print(f"fuzz: the ranks failed (exit status {rc})\n{log[-4000:]}", file=sys.stderr)
            return 1
        summary = summarize([json.loads(f.read_text()) for f in files])
    summary.update(ranks=a.ranks, seed=a.seed, env=a.env, mismatch=a.mismatch)
    text = json.dumps(summary, indent=1, default=str)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 1 if summary["wrong"] or summary["split"] or summary["python"] else 0


if __name__ == "__main__":
    sys.exit(main())
