"""Rank programs of the integrations (test_comm.py, test_launcher.py): torch Stores, torchrun, JAX arrays, ncclz-run.

Run by _workers.py (its docstring says how); each scenario returns a JSON-able dict."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from _checks import (
    bound_of,
    digest,
    rank_input,
    reference,
)


def scenario_store(ncclz, comm_unused, args):
    raise RuntimeError("handled in main")


def scenario_torchrun(ncclz, comm, args):
    import torch

    if args and args[0] == "pg":  # torch.distributed was initialized before ncclz.init()
        import torch.distributed as dist

        assert dist.is_initialized()
        dist.barrier()

    t = torch.full((1000,), float(comm.rank + 1))
    comm.all_reduce(t, compression=ncclz.Lossless())
    assert torch.all(t == sum(range(1, comm.world_size + 1))), t[:4]
    comm.all_reduce(t, op="avg", compression=ncclz.Lossy(abs=1e-3))
    return {"value": float(t[0]), "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}}


def scenario_jax(ncclz, comm, args):
    """JAX arrays are immutable: every call returns a new JAX array and leaves the input alone."""
    import jax.numpy as jnp

    W, r = comm.world_size, comm.rank
    inputs = [rank_input(k, 5000, "float32", 7) for k in range(W)]
    x = jnp.asarray(inputs[r])
    y = comm.all_reduce(x, compression=ncclz.Lossy(rel=1e-3))
    assert type(y).__module__.startswith("jax") and y is not x, type(y)
    assert np.array_equal(np.asarray(x), inputs[r]), "the JAX input was modified"
    E = bound_of(ncclz.Lossy(rel=1e-3), inputs)
    assert np.max(np.abs(np.asarray(y, np.float64) - reference(inputs, "sum"))) <= E
    b = jnp.asarray(inputs[r]).astype(jnp.bfloat16)
    g = comm.all_gather(b, compression=ncclz.Lossless())
    assert g.dtype == jnp.bfloat16 and g.shape == (W, 5000)
    assert np.array_equal(np.asarray(g[r]), np.asarray(b))
    z = comm.broadcast(jnp.full(10, float(r)), root=W - 1)
    assert np.all(np.asarray(z) == W - 1)
    rs = comm.reduce_scatter(jnp.ones((2 * W, 3), jnp.int32))
    assert rs.shape == (2, 3) and np.all(np.asarray(rs) == W)
    # the arrays recv and a non-root scatter would write: for JAX the templates of new arrays
    if r == 0:
        comm.send(np.arange(6, dtype=np.float32), 1)
    elif r == 1:
        t = jnp.zeros(6, jnp.float32)
        got = comm.recv(t, 0)
        assert got is not t and np.array_equal(np.asarray(got), np.arange(6)) and not np.asarray(t).any()
    t = jnp.zeros(2, jnp.float32)
    s = comm.scatter(jnp.arange(2 * W, dtype=jnp.float32) if r == 0 else None, root=0, out=None if r == 0 else t)
    assert s is not t and np.array_equal(np.asarray(s), [2 * r, 2 * r + 1]) and not np.asarray(t).any()
    return {"hashes": {"all_reduce/jax": digest(np.asarray(y)), "all_gather/jax": digest(np.asarray(g))}}


def scenario_launcher(ncclz, comm, args):
    """Used by test_launcher: an all_reduce, then optionally fail on one rank."""
    x = np.full(4096, comm.rank, np.float64)
    comm.all_reduce(x)
    print(f"sum={x[0]:g} rank={comm.rank}", flush=True)
    if args and args[0] == "fail" and comm.rank == int(args[1]):
        os._exit(int(args[2]))  # a crash: no teardown, no abort message to the peers
    if args and args[0] == "fail":
        # The healthy ranks go on talking; the dead rank makes them raise.
        try:
            for _ in range(1000):
                comm.all_reduce(np.ones(1 << 14, np.float32))
                time.sleep(0.01)
        except ncclz.RemoteError as e:
            print(f"rank {comm.rank} saw {type(e).__name__}", flush=True)
            sys.exit(3)
    return {"sum": float(x[0])}
