#!/usr/bin/env python3
"""The default policy on one host over shared memory: before and after the memory-class link and its rule.

    ncclz-run -n 4 python bench/onehost_policy.py --sizes 16M,64M --data smooth,grad --iters 6

Every rank on this machine, the transport ranks on one host get (shared memory), policy "auto", no
link rate configured (the script refuses to run with NCCLZ_LINK_GBPS, NCCLZ_SOCKET_THROTTLE_GBPS or
NCCLZ_POLICY set). Per size, data set and requested mode (none, Lossless(), Lossy(rel=1e-3)) it
makes ``--iters`` float32 sum all_reduce calls with each of three policies, one after the other on
the same communicator (``comm.reset_policy``: each starts with nothing learned):

- before: ``Policy(memory_link="")``, the policy before the memory-class link: on an unknown link the
  request runs as asked until an uncompressed call is observed;
- model: the memory-class link decided by the model (:class:`ModelOnly`: the default policy without
  its rule), as it was before the rule: the first call calibrates the codec, and the run's first
  such call times a memcpy;
- after: the default ``Policy()``, which the communicator tells it is on one host over shared memory
  (ncclz/policy/memory_link.py): none by rule, nothing calibrated.

Reported per row: the first call, the median of the other calls (each call's time is the slowest
rank's, from a barrier to the end of the call), what ran on those calls (rank 0's
last_stats.compression, with counts where it changed), the calibrations rank 0's policy took, and
rank 0's last reason, the largest error against none's result of the same row's inputs, and the
load average before and after. Prints a Markdown table (rank 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ncclz
import numpy as np
from ncclz.policy import Policy
from ncclz.tools import data
from ncclz.tools.bench import parse_size

REQUESTS = (("none", None), ("Lossless()", ncclz.Lossless()), ("Lossy(rel=1e-3)", ncclz.Lossy(rel=1e-3)))


class ModelOnly(Policy):
    """The default policy without the memory-class rule (Policy.exact_on_memory): the model decides."""

    def exact_on_memory(self, *args, **kwargs):
        return None


POLICIES = (("before", lambda: Policy(memory_link="")), ("model", lambda: ModelOnly()), ("after", lambda: Policy()))


def run_row(comm, x0: np.ndarray, spec, make_policy, iters: int) -> dict:
    comm.reset_policy(make_policy())
    times, ran, why, x = [], [], "", None
    for _ in range(iters):
        x = x0.copy()
        comm.barrier()
        t0 = time.perf_counter()
        comm.all_reduce(x, compression=spec)
        dt = np.array([time.perf_counter() - t0])
        st = comm.last_stats
        comm.all_reduce(dt, op="max", policy="off")
        times.append(float(dt[0]))
        ran.append(st.compression)
        why = st.policy
    cals = len(comm.policy.calibrations()) if comm.rank == 0 else 0
    return {"first_s": times[0], "median_s": statistics.median(times[1:]), "ran": ran[1:], "first_ran": ran[0],
            "why": why, "out": x, "calibrations": cals}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16M,64M", help="bytes per rank, comma-separated (default: %(default)s)")
    ap.add_argument("--data", default="smooth,grad", help="ncclz.tools.data sets (default: %(default)s)")
    ap.add_argument("--iters", type=int, default=6, help="calls per row, the first reported apart (default: 6)")
    a = ap.parse_args()
    for v in ("NCCLZ_LINK_GBPS", "NCCLZ_SOCKET_THROTTLE_GBPS", "NCCLZ_POLICY"):
        if os.environ.get(v):
            raise SystemExit(f"onehost_policy: unset {v} (the point is the policy with no configured link)")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    sets = a.data.split(",")
    load0 = os.getloadavg()
    t_start = time.time()
    rows = []
    with ncclz.init() as comm:
        topo = comm.topology
        for nbytes in sizes:
            for dset in sets:
                x0 = data.rank_input(dset, comm.rank, nbytes // 4).astype(np.float32)
                ref = None
                for label, spec in REQUESTS:
                    for pname, make in POLICIES:
                        r = run_row(comm, x0, spec, make, a.iters)
                        if ref is None:
                            ref = r["out"]
                        err = np.array([float(np.max(np.abs(r["out"].astype(np.float64) - ref)))])
                        comm.all_reduce(err, op="max", policy="off")
                        rows.append((nbytes, dset, label, pname, r, float(err[0])))
        if comm.rank == 0:
            print(f"{comm.world_size} ranks, {topo.hosts} host(s), transport {comm.config.transport}, intra_link "
                  f"{topo.intra_link!r}, {comm.config.nchannels} channels; float32 sum all_reduce, {a.iters} calls "
                  f"per row; load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}; "
                  f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(t_start))} UTC, {time.time() - t_start:.0f} s")
            print()
            print("| size | data | requested | policy | first call ms | median ms (calls 2..) | ran (calls 2..) "
                  "| calibrations | max abs diff vs none | rank 0's reason (last call) |")
            print("|---|---|---|---|---:|---:|---|---:|---:|---|")
            for nbytes, dset, label, pname, r, err in rows:
                counts = {m: r["ran"].count(m) for m in dict.fromkeys(r["ran"])}
                ran = " / ".join(f"{m} x{c}" for m, c in counts.items()) if len(counts) > 1 else r["ran"][0]
                why = r["why"].split("; predicted ")[0] + (")" if "; predicted " in r["why"] else "")
                print(f"| {nbytes >> 20} MiB | {dset} | {label} | {pname} | {r['first_s'] * 1e3:.1f} "
                      f"({r['first_ran']}) | {r['median_s'] * 1e3:.1f} | {ran} | {r['calibrations']} | {err:.3g} "
                      f"| {why or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
