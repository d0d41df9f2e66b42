"""Differential fuzz of the torch.distributed backend "ncclz": random dist calls, every result checked.

    python bench/fuzz_torch.py --ranks 3 --seed 1 --calls 200 [--env K=V ...] [--out F]

bench/fuzz_calls.py's counterpart for the backend (python/ncclz/torch/backend.py): each call picks a
process group (``Options(compression=None)``, ``Lossless()``, ``Lossy(rel=1e-3)`` and
``Lossy(abs=0.05)``, the lossy ones with ``min_elements=64`` and every collective in
``lossy_collectives``), a dist function (all_reduce, reduce_scatter_tensor, reduce_scatter of a list,
all_gather_into_tensor, all_gather of a list, broadcast, reduce, gather, scatter, all_to_all_single
with equal and uneven splits, all_to_all of lists, send/recv pairs, and in half of those draws a ring
shift through ``dist.batch_isend_irecv``: every rank sending to r+1 and receiving from r-1), a dtype (fuzz_calls.py's seven, and
int8, int16, bool, complex64, which the backend stages, and in half of the int16 / int32 / int64 calls
uint16 / uint32 / uint64 in their place, in half of the float16 calls float8_e4m3fn or float8_e5m2 with
SUM, MIN or MAX), an op (SUM, AVG, MIN, MAX, PRODUCT,
PREMUL_SUM with a factor; the ones torch defines for the dtype), a count, the data (fuzz_calls.py's
kinds) and a non-contiguous input now and then. Every call is made with ``async_op=True`` and waited
for; the bound of a lossy call is the largest ``error_bound`` of its ``work.stats`` (0: the call ran
exact, checked as exact). Counted as in fuzz_calls.py (wrong, split, python: every call drawn is one
torch defines, so any exception but an ncclz error is a finding), exit status 1 on any.

The rank program is this file with ``--rank SEED CALLS OUTDIR`` under ncclz-run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_calls as fc  # the checks and the driver are the API fuzz's

FUNCS = ("all_reduce", "reduce_scatter_tensor", "reduce_scatter", "all_gather_into_tensor", "all_gather",
         "broadcast", "reduce", "gather", "scatter", "all_to_all_single", "all_to_all_single_uneven",
         "all_to_all", "sendrecv")
DTYPES = (*fc.DTYPES, "int8", "int16", "bool", "complex64")
#: Unsigned tensors, each drawn in half of the calls of its signed sibling from a generator of its own (a
#: seed's other draws stay as they were): uint32 and uint64 reduced as they are, uint16 staged in int32.
UNSIGNED = {"int16": "uint16", "int32": "uint32", "int64": "uint64"}
GROUPS = ("exact", "lossless", "rel", "abs")
COUNTS = (1, 3, 8, 63, 64, 100, 1000, 4097, 65536, 100003, 262147)
REDUCING = ("all_reduce", "reduce_scatter_tensor", "reduce_scatter", "reduce")


def draw(seed, i, w):
    g = np.random.default_rng([seed, i, 99])
    dt = str(g.choice(DTYPES))
    if dt in UNSIGNED and np.random.default_rng([seed, i, 98]).random() < 0.5:
        dt = UNSIGNED[dt]
    f8 = np.random.default_rng([seed, i, 96])
    if dt == "float16" and f8.random() < 0.5:
        dt = str(f8.choice(fc.FLOAT8))
    fn = str(g.choice(FUNCS))
    if fn == "sendrecv" and np.random.default_rng([seed, i, 97]).random() < 0.5:
        fn = "batch_ring"  # (a generator of its own: a seed's other draws stay as they were)
    if dt in fc.FLOAT8:
        ops = ["SUM", "MIN", "MAX"]
    elif dt in fc.FLOATS:
        ops = ["SUM", "SUM", "AVG", "MIN", "MAX", "PRODUCT", "PREMUL_SUM"]
    elif dt == "complex64":
        ops = ["SUM", "AVG", "PREMUL_SUM"]
    else:
        ops = ["SUM", "MIN", "MAX", "PRODUCT"]
    return {"fn": fn, "dt": dt, "n": int(g.choice(COUNTS)), "op": str(g.choice(ops)), "group": str(g.choice(GROUPS)),
            "root": int(g.integers(0, w)), "factor": float(g.choice([0.5, 0.25, 1.0 / 3, 3.0])),
            "data": str(g.choice(fc.DATA)), "strided": bool(g.random() < 0.1),
            "splits": g.integers(0, 4, size=(w, w)).tolist()}


def make(torch, s, seed, i, rank, n):
    """Rank `rank`'s input of n elements as a torch tensor of s's dtype."""
    dt = s["dt"]
    if dt in ("int8", "int16", "bool", "uint16", "uint32", "uint64"):
        g = np.random.default_rng([seed, i, rank, 5])
        hi = 2 if dt == "bool" or s["op"] == "PRODUCT" else 40
        # (negative values of uint16 and uint32 wrap to the type's top, where a signed order disagrees;
        # float64, the reference's type, cannot hold uint64's)
        v = g.integers(0 if dt in ("bool", "uint64") else -hi, hi, n)
        return torch.from_numpy(v.astype(np.bool_ if dt == "bool" else np.dtype(dt)))
    if dt == "complex64":
        sub = dict(s, dt="float32")
        re, im = fc.rank_data(sub, seed, i, rank, n), fc.rank_data(sub, seed + 1, i, rank, n)
        return torch.complex(torch.from_numpy(re), torch.from_numpy(im))
    sub = dict(s, op={"PRODUCT": "prod", "AVG": "avg"}.get(s["op"], "sum"))
    a = fc.rank_data(sub, seed, i, rank, n)
    if dt == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if dt in fc.FLOAT8:
        return torch.from_numpy(a.view(np.uint8)).view(getattr(torch, dt))
    return torch.from_numpy(a)


def as_f64(torch, t):
    """A tensor as float64 NumPy values (complex: (real, imaginary) pairs)."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.to(torch.float64).numpy()


def reference(xs, s, w):
    """The exact result of reducing the fp64 values xs, as the backend defines it for s's dtype and op."""
    x = np.stack(xs)
    op, dt = s["op"], s["dt"]
    with np.errstate(all="ignore"):
        if dt == "bool":
            return (x.max(0) if op in ("SUM", "MAX") else x.min(0)).astype(np.float64)
        if op == "PREMUL_SUM":
            return (x * s["factor"]).sum(0)
        if not fc.is_float(dt) and dt != "complex64" and op in ("SUM", "PRODUCT"):
            r = x.astype(np.int64).sum(0) if op == "SUM" else x.astype(np.int64).prod(0)
            return r.astype(np.dtype(dt)).astype(np.float64)  # wraps as the type does (int8, int16: cast back)
        return {"SUM": x.sum(0), "AVG": x.sum(0) / w, "MIN": x.min(0), "MAX": x.max(0), "PRODUCT": x.prod(0)}[op]


def checked(torch, got, ref, s, bound, scale, w):
    """fuzz_calls.check for the backend's dtypes: complex as float32 pairs, the staged integers exact."""
    dt = "float32" if s["dt"] == "complex64" else s["dt"] if s["dt"] in (*fc.DTYPES, *fc.FLOAT8) else "int64"
    op = {"SUM": "sum", "PREMUL_SUM": "sum", "AVG": "avg", "MIN": "min", "MAX": "max", "PRODUCT": "prod"}[s["op"]]
    mode = "none" if bound == 0 else "rel"
    return fc.check(as_f64(torch, got), ref, {"dt": dt, "mode": mode, "op": op}, bound, scale, w)


def run_call(torch, dist, groups, s, seed, i, rank, w):
    import ncclz.torch  # noqa: F401 - the backend

    fn, n = s["fn"], s["n"]
    if fn in ("reduce_scatter_tensor", "scatter", "all_to_all_single"):
        n = max(n - n % w, w)
    grp = groups[s["group"]]
    xs = [make(torch, s, seed, i, q, n) for q in range(w)]
    vals = [as_f64(torch, x) for x in xs]
    x = xs[rank].clone()
    if s["strided"] and n > 1:
        big = torch.zeros(2 * n, dtype=x.dtype)
        big[::2] = x
        x = big[::2]
    red = dist.ReduceOp
    op = dist._make_nccl_premul_sum(s["factor"]) if s["op"] == "PREMUL_SUM" else getattr(red, s["op"])
    sc = [np.abs(v) * (s["factor"] if s["op"] == "PREMUL_SUM" else 1) for v in vals]
    scale = np.sum(sc, axis=0) if s["op"] in ("SUM", "AVG", "PREMUL_SUM") else np.max(sc, axis=0)

    def done(work):
        work.wait()
        return max([st.error_bound for st in getattr(work, "stats", None) or []], default=0.0)

    if fn == "all_reduce":
        e = done(dist.all_reduce(x, op=op, group=grp, async_op=True))
        return checked(torch, x, reference(vals, s, w), s, e, scale, w)
    if fn in ("reduce_scatter_tensor", "reduce_scatter"):
        blk = n // w if fn == "reduce_scatter_tensor" else n
        out = torch.empty(blk, dtype=x.dtype)
        if fn == "reduce_scatter_tensor":
            e = done(dist.reduce_scatter_tensor(out, x.contiguous(), op=op, group=grp, async_op=True))
            want, scale = reference(vals, s, w).reshape(w, -1)[rank], scale.reshape(w, -1)[rank]
        else:  # rank q's list: one tensor per destination, made from (q, j)
            lists = [[make(torch, s, seed + 7 + j, i, q, n) for j in range(w)] for q in range(w)]
            e = done(dist.reduce_scatter(out, lists[rank], op=op, group=grp, async_op=True))
            mine = [as_f64(torch, lists[q][rank]) for q in range(w)]
            want = reference(mine, s, w)
            f = s["factor"] if s["op"] == "PREMUL_SUM" else 1
            scale = np.sum([np.abs(v) * f for v in mine], 0) if s["op"] in ("SUM", "AVG", "PREMUL_SUM") else None
        return checked(torch, out, want, s, e, scale, w)
    if fn == "reduce":
        e = done(dist.reduce(x, dst=s["root"], op=op, group=grp, async_op=True))
        return checked(torch, x, reference(vals, s, w), s, e, scale, w) if rank == s["root"] else None
    if fn == "all_gather_into_tensor":
        out = torch.empty(w * n, dtype=x.dtype)
        e = done(dist.all_gather_into_tensor(out, x.contiguous(), group=grp, async_op=True))
        return checked(torch, out, np.concatenate(vals), dict(s, op="MAX"), e, None, w)
    if fn == "all_gather":
        outs = [torch.empty(n, dtype=x.dtype) for _ in range(w)]
        e = done(dist.all_gather(outs, x, group=grp, async_op=True))
        return checked(torch, torch.cat(outs), np.concatenate(vals), dict(s, op="MAX"), e, None, w)
    if fn == "broadcast":
        e = done(dist.broadcast(x, src=s["root"], group=grp, async_op=True))
        return checked(torch, x, vals[s["root"]], dict(s, op="MAX"), e, None, w)
    if fn == "gather":
        outs = [torch.empty(n, dtype=x.dtype) for _ in range(w)] if rank == s["root"] else None
        e = done(dist.gather(x, gather_list=outs, dst=s["root"], group=grp, async_op=True))
        if rank != s["root"]:
            return None
        return checked(torch, torch.cat(outs), np.concatenate(vals), dict(s, op="MAX"), e, None, w)
    if fn == "scatter":
        blocks = list(xs[s["root"]].chunk(w)) if rank == s["root"] else None
        out = torch.empty(n // w, dtype=x.dtype)
        e = done(dist.scatter(out, scatter_list=blocks, src=s["root"], group=grp, async_op=True))
        return checked(torch, out, np.split(vals[s["root"]], w)[rank], dict(s, op="MAX"), e, None, w)
    if fn in ("all_to_all_single", "all_to_all_single_uneven"):
        if fn == "all_to_all_single":
            ins, outs = None, None
            sends = [[n // w] * w for _ in range(w)]
        else:
            sends = s["splits"]  # sends[q][j]: elements rank q sends to rank j
            ins, outs = sends[rank], [sends[q][rank] for q in range(w)]
        srcs = [make(torch, s, seed, i, q, sum(sends[q])) for q in range(w)]
        out = torch.empty(sum(sends[q][rank] for q in range(w)), dtype=x.dtype)
        e = done(dist.all_to_all_single(out, srcs[rank], output_split_sizes=outs, input_split_sizes=ins, group=grp,
                                        async_op=True))
        want = [as_f64(torch, srcs[q])[sum(sends[q][:rank]):sum(sends[q][:rank + 1])] for q in range(w)]
        return checked(torch, out, np.concatenate(want), dict(s, op="MAX"), e, None, w)
    if fn == "all_to_all":
        ins = [make(torch, s, seed + j, i, rank, n) for j in range(w)]
        outs = [torch.empty(n, dtype=x.dtype) for _ in range(w)]
        e = done(dist.all_to_all(outs, ins, group=grp, async_op=True))
        want = [as_f64(torch, make(torch, s, seed + rank, i, q, n)) for q in range(w)]
        return checked(torch, torch.cat(outs), np.concatenate(want), dict(s, op="MAX"), e, None, w)
    if fn == "batch_ring":  # every rank sends to r+1 and receives from r-1, as one batch
        right, left = (rank + 1) % w, (rank - 1) % w
        buf = torch.empty(n, dtype=x.dtype)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x.contiguous(), right, group=grp),
                                       dist.P2POp(dist.irecv, buf, left, group=grp)])
        bound = max([done(r) for r in reqs], default=0.0)
        return checked(torch, buf, vals[left], dict(s, op="MAX"), bound, None, w)
    if w % 2:  # sendrecv: pairs (0, 1), (2, 3), ...
        return None
    peer, buf = rank ^ 1, torch.empty(n, dtype=x.dtype)
    if rank % 2 == 0:
        done(dist.isend(x.contiguous(), peer, group=grp))
        bound = done(dist.irecv(buf, peer, group=grp))
    else:
        bound = done(dist.irecv(buf, peer, group=grp))
        done(dist.isend(x.contiguous(), peer, group=grp))
    return checked(torch, buf, vals[peer], dict(s, op="MAX"), bound, None, w)


def rank_main(seed, calls, outdir):
    import ncclz
    import ncclz.torch
    import torch
    import torch.distributed as dist

    dist.init_process_group("ncclz", pg_options=ncclz.torch.Options(compression=None))
    rank, w = dist.get_rank(), dist.get_world_size()
    every = ("all_reduce", "reduce_scatter", "reduce", "all_gather", "broadcast", "send", "gather", "scatter",
             "all_to_all")
    groups = {
        "exact": None,
        "lossless": dist.new_group(backend="ncclz", pg_options=ncclz.torch.Options(compression=ncclz.Lossless())),
        "rel": dist.new_group(backend="ncclz", pg_options=ncclz.torch.Options(
            compression=ncclz.Lossy(rel=1e-3), min_elements=64, lossy_collectives=every)),
        "abs": dist.new_group(backend="ncclz", pg_options=ncclz.torch.Options(
            compression=ncclz.Lossy(abs=0.05), min_elements=64, lossy_collectives=every)),
    }
    results = []
    for i in range(calls):
        s = draw(seed, i, w)
        outcome, wrong = "ok", None
        try:
            wrong = run_call(torch, dist, groups, s, seed, i, rank, w)
        except ncclz.Error as e:
            outcome = f"{type(e).__name__}: {e}"  # refused (the same on every rank, or a split)
        except Exception as e:  # counted: the calls drawn are valid, so any other exception is a finding
            outcome = f"python {type(e).__name__}: {e}\n{traceback.format_exc()[-800:]}"
        results.append({"i": i, "call": {k: v for k, v in s.items() if k != "splits"}, "outcome": outcome,
                        "wrong": wrong})
        if outcome.startswith(("AbortedError", "TimeoutError", "RemoteError")):
            break
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        sys.exit(0)
    sys.exit(fc.main(os.path.abspath(__file__), argparse.ArgumentParser(description=__doc__.split("\n\n")[0])))
