"""Rank programs of the compression policy and the configuration (test_policy.py, test_comm.py).

Run by _workers.py (its docstring says how); each scenario returns a JSON-able dict."""

from __future__ import annotations

import dataclasses

import numpy as np
from _checks import (
    Checker,
    as_f64,
    bits,
    bound_of,
    digest,
    layout_field,
    rank_input,
    reference,
)


def scenario_policy(ncclz, comm, args):
    """The compression policy (tests/python/test_policy.py): requested-compression calls on every
    collective; checks every element against the requested bound (or bit-identity for lossless),
    and reports the mode each call ran with and why, so the test can check all ranks agree.

    args: count=N, comp=rel=R|abs=E|lossless, colls=a,b, percall=off (policy="off" on each call),
    stub=none|lossless|raise (rank 0's policy always proposes that, or raises), observe (an uncompressed 8 MiB
    all_reduce first, for the policy to measure the link), measure (rank 0's policy starts with
    measured times for all_reduce: compressed 10 s, uncompressed 10 ms), exact (a lossy request's result
    too must be the uncompressed call's bits), seed=S."""
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
        if E is None or "exact" in args:  # bit-identical to the uncompressed call whatever mode ran
            y = inputs[r].copy()
            if coll == "all_reduce":
                plain = comm.all_reduce(y, policy="off")
            elif coll == "reduce_scatter":
                plain = comm.reduce_scatter(y, policy="off")
            elif coll == "all_gather":
                plain = comm.all_gather(y, policy="off")
            else:
                plain = comm.broadcast(y, root=W - 1, policy="off")
            ck.require(bits(got) == bits(plain), f"{coll}: result differs from the uncompressed call's")
    out["checks"] = ck.checks
    if r == 0 and "stub" not in kv:  # what rank 0's policy learned from the calls (ncclz.policy.Measurement)
        out["measurements"] = [dataclasses.asdict(m) for m in comm.policy.measurements()]
        out["calibrations"] = [c.mode for c in comm.policy.calibrations()]
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
    return comm.config.as_dict()


def scenario_exact_shape(ncclz, comm, args):
    """The exact calls' ring shape (docs/ALGORITHMS.md, "The exact calls' shape"): the configuration,
    then float32 sums of 1 MiB and 4 MiB (rings) uncompressed and lossless, with the shape each call
    reported and the hashes of their results (the same on every rank, lossless the same as none),
    and a lossy call's shape."""
    import hashlib

    import numpy as np

    out = {"config": comm.config.as_dict(), "calls": {}}
    rng = np.random.default_rng(comm.rank)
    for n in (1 << 18, 1 << 20):
        x = rng.standard_normal(n).astype(np.float32)
        for mode, c in (("none", None), ("lossless", ncclz.Lossless())):
            y = x.copy()
            comm.all_reduce(y, compression=c, policy="off")
            st = comm.last_stats
            out["calls"][f"{n}/{mode}"] = [st.channels, st.slice_bytes, hashlib.sha1(y.tobytes()).hexdigest()]
    comm.all_reduce(rng.standard_normal(1 << 20).astype(np.float32), compression=ncclz.Lossy(rel=1e-3), policy="off")
    out["lossy"] = [comm.last_stats.channels, comm.last_stats.slice_bytes]
    return out


def scenario_inputs_not_kept(ncclz, comm, args):
    """Every collective with the policy deciding (compressed requests, policy auto) and without it: is
    a call's input still alive once the call returned and the caller dropped it? (It was, on rank 0:
    the policy's view of the call kept a function returning the input, and last_stats kept that view;
    the function also held the communicator, a cycle only the cyclic collector freed.) The cyclic
    collector is off while the calls run, so a cycle counts as kept."""
    import gc
    import weakref

    w, r = comm.world_size, comm.rank
    n = w << 14  # blocks of 16 Ki elements
    lossy = ncclz.Lossy(rel=1e-3)
    calls = {
        "all_reduce": lambda x, c: comm.all_reduce(x, compression=c),
        "reduce_scatter": lambda x, c: comm.reduce_scatter(x, compression=c),
        "all_gather": lambda x, c: comm.all_gather(x, compression=c),
        "broadcast": lambda x, c: comm.broadcast(x, root=w - 1, compression=c),
        "reduce": lambda x, c: comm.reduce(x, root=0, compression=c),
        "gather": lambda x, c: comm.gather(x, root=0, compression=c),
        "scatter": lambda x, c: comm.scatter(x if r == 0 else None, root=0, compression=c,
                                             out=np.empty(n // w, np.float32)),
        "all_to_all": lambda x, c: comm.all_to_all(x, compression=c),
    }
    kept = []
    gc.collect()
    gc.disable()
    try:
        for name, call in calls.items():
            for mode, c in (("none", None), ("lossy", lossy), ("lossless", ncclz.Lossless())):
                x = np.random.default_rng(r).standard_normal(n).astype(np.float32)
                ref = weakref.ref(x)
                result = call(x, c)
                _ = comm.last_stats  # what a caller reads after the call: kept raw until asked
                del x, result
                if ref() is not None:
                    kept.append(f"{name}/{mode}")
        for mode, c in (("none", None), ("lossy", lossy)):  # queued calls: once waited for and dropped
            x = np.random.default_rng(r).standard_normal(n).astype(np.float32)
            ref = weakref.ref(x)
            work = comm.all_reduce(x, compression=c, async_op=True)
            work.wait()
            comm.synchronize()
            del x, work
            if ref() is not None:
                kept.append(f"all_reduce async/{mode}")
    finally:
        gc.enable()
    return {"kept": kept, "policy": comm.policy_mode}
