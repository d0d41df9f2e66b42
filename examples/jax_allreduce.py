"""JAX (CPU arrays): ncclz takes JAX arrays through DLPack and returns new JAX arrays.

    pip install jax            # CPU wheel is enough
    ncclz-run -n 2 python examples/jax_allreduce.py

JAX arrays are immutable: all_reduce never writes its input and returns a new
array. GPU (CUDA) arrays are not accepted by the Python runtime yet: copy them
to the host first (jax.device_get).
"""

import jax.numpy as jnp
import ncclz

with ncclz.init() as comm:
    x = jnp.linspace(0.0, 1.0, 1 << 16, dtype=jnp.float32) + comm.rank
    y = comm.all_reduce(x, op="avg", compression=ncclz.Lossy(abs=1e-4))  # a new jax.Array
    expected = jnp.linspace(0.0, 1.0, 1 << 16, dtype=jnp.float32) + (comm.world_size - 1) / 2
    st = comm.last_stats
    if comm.rank == 0:
        print(f"{type(y).__name__}: max error {float(jnp.abs(y - expected).max()):.2e} <= 1e-4; ran {st.compression}, "
              f"ratio {st.ratio:.1f}x ({st.policy})")
