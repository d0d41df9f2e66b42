"""CuPy: the Python runtime takes host arrays today, so stage through NumPy.

    ncclz-run -n 2 python examples/cupy_allreduce.py

(Needs a GPU and cupy; the GPU path of the collectives is not wired to Python
yet, so device arrays are refused with a clear InvalidArgumentError.)
"""

import cupy as cp
import ncclz

with ncclz.init() as comm:
    cp.cuda.Device(comm.rank % cp.cuda.runtime.getDeviceCount()).use()
    g = cp.random.default_rng(comm.rank).standard_normal(1 << 20, dtype=cp.float32)
    host = cp.asnumpy(g)  # device -> host
    comm.all_reduce(host, op="avg", compression=ncclz.Lossy(rel=1e-3))
    g.set(host)  # host -> device, in place
    st = comm.last_stats
    if comm.rank == 0:
        print(f"averaged on {comm.world_size} ranks: ran {st.compression}, ratio {st.ratio:.2f}x ({st.policy})")
