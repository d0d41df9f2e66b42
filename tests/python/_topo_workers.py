"""Rank programs of the topology tests (tests/python/test_topology.py).

Run as ``python _topo_workers.py SCENARIO OUTDIR [ARGS...]`` in every rank with the environment of
test_comm.run_ranks (RANK, WORLD_SIZE, ..., NCCLZ_TOPO_HOSTS or NCCLZ_TOPO_HOST). Each rank checks
every element against the fp64 reference (the helpers of _checks.py) and writes OUTDIR/rank<R>.json
with what it saw: the topology, each call's algorithm, and hashes of its outputs.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checks import Checker, as_f64, bound_of, modes, plain_tolerance, rank_input, reference, run_rank_program


def topology_of(comm) -> dict:
    t = comm.topology
    return {"hosts": t.hosts, "host": t.host, "local_rank": t.local_rank, "local_size": t.local_size,
            "host_of": list(t.host_of), "local_rank_of": list(t.local_rank_of), "intra_link": t.intra_link,
            "inter_link": t.inter_link, "source": t.source, "hierarchical": t.hierarchical}


def scenario_hier(ncclz, comm, args):
    """Every collective in every mode with the algorithm given (args[0]: hierarchical, ring, auto):
    every element against the fp64 reference, the algorithm and byte counts each call reports."""
    algo = args[0] if args else "auto"
    count = int(args[1]) if len(args) > 1 else 70001
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    calls = {}
    seed = 100
    for dtype in ("float32", "float64", "bfloat16", "int32"):
        seed += 10  # the same inputs for every mode (lossless must give none's bits)
        for mname, comp in modes(ncclz, dtype):
            # all_reduce (sum, avg, max) and reduce_scatter (sum)
            for op in ("sum", "avg", "max") if dtype != "int32" else ("sum", "max"):
                inputs = [rank_input(k, count, dtype, seed) for k in range(W)]
                ref = reference(inputs, op)
                y = comm.all_reduce(inputs[r].copy(), op=op, compression=comp, algorithm=algo, policy="off")
                name = f"all_reduce/{dtype}/{op}/{mname}"
                check(ck, name, y, ref, comp, inputs, dtype, op)
                calls[name] = stats_of(comm)
            inputs = [rank_input(k, count * W, dtype, seed) for k in range(W)]
            ref = reference(inputs, "sum")[r * count:(r + 1) * count]
            y = comm.reduce_scatter(inputs[r], compression=comp, algorithm=algo, policy="off")
            name = f"reduce_scatter/{dtype}/{mname}"
            check(ck, name, y, ref, comp, [a[r * count:(r + 1) * count] for a in inputs], dtype, "sum",
                  full=inputs)
            calls[name] = stats_of(comm)
            # all_gather and broadcast: data movement (eb = E)
            inputs = [rank_input(k, count, dtype, seed + 1) for k in range(W)]
            y = comm.all_gather(inputs[r], compression=comp, algorithm=algo, policy="off")
            name = f"all_gather/{dtype}/{mname}"
            for k in range(W):
                check(ck, f"{name}/block{k}", y[k], as_f64(inputs[k]), comp, inputs, dtype, "copy")
            ck.record(name, y)
            calls[name] = stats_of(comm)
            root = W - 1
            x = inputs[r].copy() if r == root else np.zeros_like(inputs[r])
            y = comm.broadcast(x, root=root, compression=comp, algorithm=algo, policy="off")
            name = f"broadcast/{dtype}/{mname}"
            check(ck, name, y, as_f64(inputs[root]), comp, [inputs[root]], dtype, "copy")
            calls[name] = stats_of(comm)
    return {"topology": topology_of(comm), "calls": calls, "hashes": ck.hashes, "checks": ck.checks}


def check(ck, name, got, ref, comp, inputs, dtype, op, full=None):
    """got against ref: within E (lossy; E from every rank's whole input), bit-exact for data
    movement, within the float rounding of the plain reduction otherwise."""
    E = bound_of(comp, full if full is not None else inputs)
    if E is not None:
        ck.check_close(name, got, np.asarray(ref, np.float64), E, comp, dtype)
    elif op == "copy":
        ck.require(np.array_equal(as_f64(got).ravel(), np.asarray(ref).ravel()), f"{name}: not the owner's values")
    elif dtype.startswith("int"):
        ck.require(np.array_equal(as_f64(got).ravel(), np.asarray(ref).ravel()), f"{name}: wrong integers")
    else:
        ck.check_close(name, got, ref, plain_tolerance(dtype, ref, inputs, op), comp, dtype)
    ck.record(name, got)
    ck.checks += 1


def stats_of(comm) -> dict:
    st = comm.last_stats
    return {"algorithm": st.algorithm, "local_bytes": st.local_bytes, "wire_bytes": st.wire_bytes,
            "raw_bytes": st.raw_bytes, "ratio": st.ratio, "compression": st.compression,
            "fallback": st.exact_fallback, "error_bound": st.error_bound}


def scenario_policy(ncclz, comm, args):
    """The policy's algorithm proposal (rank 0 decides): calls under policy "auto" with the link rate
    from NCCLZ_LINK_GBPS; every rank reports what ran."""
    W, r = comm.world_size, comm.rank
    out = {}
    x = rank_input(r, 1 << 20, "float32", 7)
    for mname, comp in (("none", None), ("lossless", ncclz.Lossless()), ("rel", ncclz.Lossy(rel=1e-3))):
        y = comm.all_reduce(x.copy(), compression=comp)
        st = comm.last_stats
        out[mname] = {"algorithm": st.algorithm, "policy": st.policy, "compression": st.compression}
        ref = reference([rank_input(k, 1 << 20, "float32", 7) for k in range(W)], "sum")
        E = st.error_bound if st.compression.startswith("lossy") else 1e-3 * W
        assert float(np.max(np.abs(as_f64(y) - ref))) <= E, mname
    # a call's algorithm= wins over the policy, rank 0's counts
    comm.all_reduce(x.copy(), compression=ncclz.Lossy(rel=1e-3), algorithm="ring" if r == 0 else "hierarchical")
    out["forced"] = {"algorithm": comm.last_stats.algorithm}
    if r == 0:
        out["measurements"] = [m.mode for m in comm.policy.measurements()]
    return {"calls": out, "topology": topology_of(comm)}


def scenario_topology(ncclz, comm, args):
    """The topology as reported, and one all_reduce (128 KiB: above NCCLZ_LATENCY_BYTES, so the
    algorithm the topology gives it, not the latency algorithm of small calls; on one host also
    above NCCLZ_TWO_HOP_BYTES where the test sets it to 0)."""
    x = np.full(1 << 15, comm.rank + 1.0, np.float32)
    comm.all_reduce(x)
    assert np.all(x == comm.world_size * (comm.world_size + 1) / 2)
    return {"topology": topology_of(comm), "algorithm": comm.last_stats.algorithm}


def scenario_bytes(ncclz, comm, args):
    """The bytes each collective's schedule moves (test_scale_model.py: against the scale model's
    schedule_bytes): every collective uncompressed, on the ring and hierarchically, args[0] bytes of
    float32 per rank (all_gather: its output); this rank's last_stats of each call."""
    W, r = comm.world_size, comm.rank
    n = int(args[0]) // 4
    out = {}
    for algo in ("ring", "hierarchical"):
        kw = {"algorithm": algo, "policy": "off"}
        x = np.full(n, r + 1.0, np.float32)
        comm.all_reduce(x, **kw)
        assert np.all(x == W * (W + 1) / 2)
        out[f"all_reduce/{algo}"] = stats_of(comm)
        y = comm.reduce_scatter(np.full(n, r + 1.0, np.float32), **kw)
        assert y.size == n // W and np.all(y == W * (W + 1) / 2)
        out[f"reduce_scatter/{algo}"] = stats_of(comm)
        g = comm.all_gather(np.full(n // W, r + 1.0, np.float32), **kw)
        assert np.array_equal(np.asarray(g).ravel(), np.repeat(np.arange(1.0, W + 1), n // W))
        out[f"all_gather/{algo}"] = stats_of(comm)
        b = np.full(n, 7.0 if r == 0 else 0.0, np.float32)
        comm.broadcast(b, root=0, **kw)
        assert np.all(b == 7.0)
        out[f"broadcast/{algo}"] = stats_of(comm)
    return {"calls": out, "topology": topology_of(comm)}


SCENARIOS = {"hier": scenario_hier, "policy": scenario_policy, "topology": scenario_topology,
             "bytes": scenario_bytes}


if __name__ == "__main__":
    run_rank_program(SCENARIOS)
