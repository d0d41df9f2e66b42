#!/usr/bin/env python3
"""End-to-end: a float32 all_reduce of the benchmark's "sparse" data (99% zeros per rank) at
Lossy(rel=1e-3), policy="off", timed per call (slowest rank), with ratio and codec seconds.

    NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=0.5 ncclz-run -n 4 python bench/sparse_allreduce.py

Options: --size 64M (bytes of float32 per rank), --iters 9, --codec NAME (force the wire codec,
e.g. rans; default: the selector), --out-of-place (into a second array, as ncclz-bench does; default:
in place, the input copied back before each call, outside the timing), --margin M (the codec effort
the policy would propose: PolicyHints.rans_margin, 1 = lossy/fast). Rank 0 prints one line:
median / min wall time per call (max over ranks), ratio, the medians of rank 0's encode, decode and
quantize seconds, and the median CPU seconds of all ranks together per call (user + system, every
thread). bench/netlab/sparse_input.py runs it side by side with NCCLZ_SPARSE_INPUT and
NCCLZ_SPARSE_SLICE_BYTES varied.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from dataclasses import dataclass

import ncclz
import numpy as np
from ncclz.tools.data import rank_input


@dataclass(frozen=True)
class ForcedLossy(ncclz.Lossy):
    """Lossy with the `codec` knob the communicator reads from a spec (comm.py); a class of its own,
    so that the communicator's spec cache does not take it for a plain Lossy."""

    codec: str = ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="64M")
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--codec", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--out-of-place", action="store_true")
    ap.add_argument("--margin", type=float, default=-1.0,
                    help="codec effort as the policy proposes it (PolicyHints.rans_margin; 1: lossy/fast)")
    a = ap.parse_args()
    s = a.size
    nbytes = int(s[:-1]) << {"K": 10, "M": 20, "G": 30}[s[-1]] if s[-1] in "KMG" else int(s)
    n = nbytes // 4
    spec = ForcedLossy(rel=1e-3, codec=a.codec)
    # the policy's codec effort travels beside the Compression (native PolicyHints): the native call
    hints = ncclz._core.comm.PolicyHints("", a.margin) if a.margin >= 0 else None
    native_spec = ncclz._core.comm.Compression("lossy_rel", 1e-3, a.codec, 0)
    with ncclz.init() as comm:
        x0 = rank_input("sparse", comm.rank, n)
        x = np.empty_like(x0)
        out = np.empty_like(x0) if a.out_of_place else None
        walls, enc, dec, qua, ratios, cpus = [], [], [], [], [], []

        def cpu_s():
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime

        for i in range(a.iters + 2):
            np.copyto(x, x0)  # in place: the input back (the same buffer: no page faults in the call)
            comm.barrier()
            c0 = cpu_s()
            t0 = time.perf_counter()
            if hints is None:
                comm.all_reduce(x, compression=spec, policy="off", out=out)
                st = comm.last_stats
            else:
                st = comm._native.all_reduce(x, x if out is None else out, "sum", native_spec, "", hints)
            dt = np.array([time.perf_counter() - t0])
            c = np.array([cpu_s() - c0])
            comm.all_reduce(dt, op="max", policy="off")
            comm.all_reduce(c, op="sum", policy="off")
            if i >= 2:  # two warm-up calls
                walls.append(float(dt[0]))
                cpus.append(float(c[0]))
                enc.append(st.encode_s)
                dec.append(st.decode_s)
                qua.append(st.quantize_s)
                ratios.append(st.ratio)
        if comm.rank == 0:
            med = statistics.median
            print(
                f"{a.label or 'run'}: {comm.world_size} ranks, {s} float32 sparse all_reduce rel=1e-3 "
                f"codec={a.codec or 'auto'}: median {med(walls) * 1e3:.1f} ms, min {min(walls) * 1e3:.1f} ms, "
                f"ratio {med(ratios):.2f}, rank 0 encode {med(enc) * 1e3:.1f} ms, decode {med(dec) * 1e3:.1f} ms, "
                f"quantize {med(qua) * 1e3:.1f} ms, CPU all ranks {med(cpus) * 1e3:.1f} ms, "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
