"""NumPy: compressed all-reduce of float32 arrays.

ncclz-run -n 4 python examples/numpy_allreduce.py
"""

import ncclz
import numpy as np

with ncclz.init() as comm:  # closes (or aborts, on an exception) at the end of the block
    rng = np.random.default_rng(comm.rank)
    t = np.linspace(0, 8 * np.pi, 1 << 20)
    x = (np.sin(t) + 0.01 * rng.normal(size=t.size)).astype(np.float32)  # a smooth field plus noise

    exact = x.astype(np.float64)
    comm.all_reduce(exact, op="avg")  # float64, uncompressed: the reference

    comm.all_reduce(x, op="avg", compression=ncclz.Lossy(rel=1e-3))  # in place
    s = comm.last_stats
    err = np.abs(x - exact).max()
    if comm.rank == 0:
        print(
            f"ratio {s.ratio:.1f}x, wire {s.wire_bytes} B of {s.raw_bytes} B, "
            f"max error {err:.2e} <= bound {s.error_bound:.2e}: {err <= s.error_bound}"
        )

    shard = comm.reduce_scatter(np.ones((comm.world_size * 4, 3), np.float32), compression=ncclz.Lossless())
    rows = comm.all_gather(np.full(2, comm.rank, np.int32))
    if comm.rank == 0:
        print("reduce_scatter block:", shard.shape, "all_gather:", rows.tolist())
