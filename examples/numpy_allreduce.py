"""NumPy: compressed all-reduce of float32 arrays, what it does to the data, and who decides when.

    ncclz-run -n 4 python examples/numpy_allreduce.py
    NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=0.25 ncclz-run -n 4 python examples/numpy_allreduce.py

The first compressed call forces the requested lossy mode (policy="off") to show the ratio and the
error bound. The next ones leave the choice to the compression policy (the default): rank 0
decides per call from the link rate (here measured on the uncompressed reference call, or the
socket pacing of the second command) and the codec's speed on this machine and data, may measure
a mode on a call or two first, and runs the call uncompressed (exact, so within any bound) where
compressing would not pay; last_stats.policy says what it did and why. On one host the ranks talk
through shared memory: the link is memory, which the policy knows, so it runs the calls
uncompressed ("one host over shared memory: ..."); over the 0.25 Gbit/s link of the second command
compression wins by far.
"""

import ncclz
import numpy as np

with ncclz.init() as comm:  # closes (or aborts, on an exception) at the end of the block
    rng = np.random.default_rng(comm.rank)
    t = np.linspace(0, 8 * np.pi, 1 << 20)
    x = (np.sin(t) + 0.01 * rng.normal(size=t.size)).astype(np.float32)  # a smooth field plus noise, 4 MiB

    exact = x.astype(np.float64)
    comm.all_reduce(exact, op="avg")  # float64, uncompressed: the reference

    y = x.copy()
    comm.all_reduce(y, op="avg", compression=ncclz.Lossy(rel=1e-3), policy="off")  # exactly as requested
    s = comm.last_stats
    err = np.abs(y - exact).max()
    if comm.rank == 0:
        print(f"forced ({s.policy}): ran {s.compression}, ratio {s.ratio:.1f}x, wire {s.wire_bytes} B of "
              f"{s.raw_bytes} B, max error {err:.2e} <= bound {s.error_bound:.2e}: {err <= s.error_bound}")

    ran = []
    for _ in range(10):  # it measures the modes it has not timed yet on a call or two, then settles
        y = x.copy()
        comm.all_reduce(y, op="avg", compression=ncclz.Lossy(rel=1e-3))  # in place; the policy decides
        ran.append(comm.last_stats.compression)
    s = comm.last_stats
    err = np.abs(y - exact).max()
    if comm.rank == 0:
        tally = ", ".join(f"{m} x{ran.count(m)}" for m in dict.fromkeys(ran))
        print(f"default policy, 10 calls: ran {tally}; the last: ratio {s.ratio:.1f}x, {s.wall_s * 1e3:.1f} ms, "
              f"max error {err:.2e} <= bound {s.error_bound:.2e}: {err <= s.error_bound}\n  why: {s.policy}")

    shard = comm.reduce_scatter(np.ones((comm.world_size * 4, 3), np.float32), compression=ncclz.Lossless())
    rows = comm.all_gather(np.full(2, comm.rank, np.int32))
    if comm.rank == 0:
        print("reduce_scatter block:", shard.shape, "all_gather:", rows.tolist())
