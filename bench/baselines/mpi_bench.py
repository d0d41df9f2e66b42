#!/usr/bin/env python3
"""MPI baseline (Open MPI through mpi4py): the same collectives, data and timing as ncclz-bench.

    mpirun --allow-run-as-root -np 4 python bench/baselines/mpi_bench.py -c all_reduce -d smooth -b 64M -e 64M

Under the network lab (bench/netlab/suite.py) mpirun runs inside host 0's namespace and starts
the other ranks in their namespaces through bench/netlab/netns_rsh.sh (Open MPI's rsh agent),
with the TCP BTL on the lab interface (--mca btl tcp,self --mca btl_tcp_if_include eth0), so
MPI traffic crosses the shaped links like everything else.

Rows have the schema of ncclz-bench's JSON with system "mpi" (uncompressed; float32/float64
only: MPI has no bfloat16 sum). Inputs come from ncclz.tools.data.rank_input (same seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from ncclz.tools import bench as _bench

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("NCCLZ_BENCH_DATA", os.path.join(REPO, "bench", "data"))
B = vars(_bench)


def main(argv=None) -> int:
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--min-bytes", type=B["parse_size"], default=B["parse_size"]("1M"))
    ap.add_argument("-e", "--max-bytes", type=B["parse_size"], default=B["parse_size"]("64M"))
    ap.add_argument("-f", "--factor", type=float, default=4.0)
    ap.add_argument("-c", "--collectives", default="all_reduce,reduce_scatter,all_gather,broadcast")
    ap.add_argument("-d", "--data", default="gaussian,smooth")
    ap.add_argument("-t", "--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("-w", "--warmup", type=int, default=1)
    ap.add_argument("-i", "--iters", type=int, default=0)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--max-iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, n = comm.rank, comm.size
    ns = os.readlink("/proc/self/ns/net")
    nss = comm.allgather(ns)
    addrs = comm.allgather(os.environ.get("NETLAB_HOST_ADDR", ""))
    if rank == 0:
        print(f"# mpi_bench: {n} ranks, {MPI.Get_library_version().splitlines()[0]}; network namespaces "
              f"{len(set(nss))} distinct {nss}", flush=True)
    rows = []
    npdt = np.dtype(a.dtype)
    for coll in a.collectives.split(","):
        for ds in a.data.split(","):
            for s in B["sizes_between"](a.min_bytes, a.max_bytes, a.factor):
                count = B["count_for"](coll, s, npdt.itemsize, n, ds)
                x = B["rank_input"](ds, rank, count, a.dtype)
                ref, _, _ = B["reference"](coll, ds, n, rank, count, a.dtype, 0)
                if coll == "all_reduce":
                    out = np.empty_like(x)

                    def run(x=x, out=out):
                        comm.Allreduce(x, out, op=MPI.SUM)
                elif coll == "reduce_scatter":
                    out = np.empty(count // n, x.dtype)

                    def run(x=x, out=out):
                        comm.Reduce_scatter_block(x, out, op=MPI.SUM)
                elif coll == "all_gather":
                    out = np.empty((n, count), x.dtype)

                    def run(x=x, out=out):
                        comm.Allgather(x, out)
                else:
                    out = np.empty_like(x)

                    def run(x=x, out=out):
                        if rank == 0:
                            np.copyto(out, x)
                        comm.Bcast(out, root=0)

                def one():
                    comm.Barrier()
                    t0 = time.perf_counter()
                    run()
                    return time.perf_counter() - t0

                for _ in range(a.warmup):
                    one()
                if a.iters:
                    iters = a.iters
                else:
                    t = one()
                    iters = comm.allreduce(max(1, min(a.max_iters, int(a.budget / max(t, 1e-6)))), op=MPI.MAX)
                times = np.array([one() for _ in range(iters)])
                tmax = np.empty_like(times)
                comm.Allreduce(times, tmax, op=MPI.MAX)
                err = float(np.max(np.abs(out.astype(np.float64).reshape(ref.shape) - ref)))
                err = comm.allreduce(err, op=MPI.MAX)
                t_med = float(np.median(tmax))
                size = B["size_bytes"](coll, count, npdt.itemsize, n)
                row = {"system": "mpi", "collective": coll, "dataset": ds, "mode": "none", "dtype": a.dtype, "size": size,
                           "count": count, "redop": "sum" if coll in ("all_reduce", "reduce_scatter") else "none",
                           "root": 0 if coll == "broadcast" else -1, "nranks": n, "iters": iters, "time_us": t_med * 1e6,
                           "time_mean_us": float(np.mean(tmax)) * 1e6, "times_us": (tmax * 1e6).tolist(),
                           "algbw": size / t_med / 1e9, "busbw": size / t_med / 1e9 * B["busbw_factor"](coll, n),
                           "max_err": err, "bound": 0.0, "err_over_bound": 0.0, "ok": True, "ratio": 1.0, "wire_bytes": None,
                           "codec_share": 0.0, "link_gbps": os.environ.get("NETLAB_GBPS"), "netlab_ns": nss[rank],
                           "addrs": addrs}
                rows.append(row)
                if rank == 0:
                    print(B["group_title"](row))
                    print(B["format_row"](row), flush=True)
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": {"system": "mpi", "nranks": n, "namespaces": nss}, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        # one rank failing must not leave the others (and mpirun) waiting in a collective forever
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
