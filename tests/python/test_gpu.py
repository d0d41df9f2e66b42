"""GPU arrays through the collectives: staged through host memory (python/ncclz/_device.py), and
the device path (CUDA arrays of PyTorch, CuPy and JAX passed as they are; cpp/src/core/device_work.hpp).

Needs a CUDA GPU visible to PyTorch: without one every test here skips, and fails
under NCCLZ_REQUIRE_GPU=1 (tools/gpu_session.sh sets it on the GPU machine); the JAX
device-path test also skips where JAX is missing or sees no GPU. The ranks are processes
sharing GPU 0. The tests from test_one_gpu_per_rank_is_enforced on need no GPU (device
descriptions, fake JAX arrays, CPU JAX arrays standing in for CUDA ones).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from test_comm import assert_same_on_all_ranks, run_ranks

REQUIRE = os.environ.get("NCCLZ_REQUIRE_GPU") == "1"
# JAX takes 75% of the GPU's memory per process by default; the ranks share one GPU.
GPU_ENV = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
}


def _gpu_reason() -> str | None:
    """None when PyTorch sees a CUDA GPU, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    import torch

    if not torch.cuda.is_available():
        return f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return None


@pytest.fixture
def gpu():
    why = _gpu_reason()
    if why is not None:
        if REQUIRE:
            pytest.fail(f"NCCLZ_REQUIRE_GPU=1 but no GPU: {why}", pytrace=False)
        pytest.skip(f"no GPU: {why}")


def _need(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


@functools.cache
def _jax_gpu_reason() -> str | None:
    """None when JAX sees a CUDA GPU, else why not (asked in a child process: JAX keeps the GPU it
    opens, and this process runs no JAX)."""
    if importlib.util.find_spec("jax") is None:
        return "JAX is not installed"
    probe = "import jax; print(jax.__version__, jax.devices('gpu')[0].platform)"
    try:
        p = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True,
                           timeout=120, env={**os.environ, **GPU_ENV})
    except subprocess.TimeoutExpired:
        return "JAX took over 120 s to list its GPUs"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"JAX sees no CUDA GPU (no CUDA plugin for jaxlib?): {last}"
    return None


@pytest.mark.parametrize("transport,n", [("shm", 2), ("shm", 4), ("socket", 2)])
def test_gpu_collectives(gpu, tmp_path, transport, n):
    """all_reduce (every op, mode, dtype), reduce_scatter, all_gather, broadcast, send/recv of CUDA
    tensors: on the device, every element within the bound, identical on all ranks."""
    ranks = run_ranks(tmp_path, "collectives", n, transport, args=["cuda"], timeout=300, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] > 20
    assert_same_on_all_ranks(ranks.results)


@pytest.mark.parametrize("n", [2, 4])
def test_gpu_rooted_and_all_to_all(gpu, tmp_path, n):
    """reduce, gather, scatter, all_to_all of CUDA tensors, bit-identical to the host calls."""
    ranks = run_ranks(tmp_path, "gpu_rooted", n, "shm", timeout=300, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] > 0


def test_gpu_float16_avg_near_the_top(gpu, tmp_path):
    """float16 avg of CUDA tensors whose sums pass 65504: divided on the device first, finite, the host
    call's bits."""
    ranks = run_ranks(tmp_path, "gpu_float16_avg", 2, "shm", timeout=300, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] == 4


def test_gpu_mixed_cpu_and_gpu_ranks(gpu, tmp_path):
    """Rank 0 passes CUDA tensors, rank 1 CPU tensors, rank 2 CUDA again: one communicator, the
    same bits everywhere."""
    rank_env = {
        0: {"NCCLZ_TEST_DEVICE": "cuda"},
        1: {"NCCLZ_TEST_DEVICE": "cpu"},
        2: {"NCCLZ_TEST_DEVICE": "cuda"},
    }
    ranks = run_ranks(
        tmp_path, "collectives", 3, "shm", args=["torch"], timeout=300, env=GPU_ENV, rank_env=rank_env
    )
    ranks.assert_ok()
    assert_same_on_all_ranks(ranks.results)


@pytest.mark.parametrize("framework", ["torch", "cupy", "jax"])
def test_gpu_frameworks_and_streams(gpu, tmp_path, framework):
    """CuPy and JAX arrays (in place / new arrays on the input's device), and the current stream."""
    _need(framework)
    ranks = run_ranks(tmp_path, "gpu_frameworks", 2, "shm", args=[framework], timeout=240, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] > 0


@pytest.mark.parametrize("transport,n", [("shm", 2), ("shm", 3), ("socket", 4)])
def test_gpu_device_path(gpu, tmp_path, transport, n):
    """Lossy ring collectives of CUDA arrays quantize, code and dequantize on the GPU
    (last_stats.on_device), with the host call's bits and the staged path's, within the bound."""
    ranks = run_ranks(tmp_path, "gpu_device_path", n, transport, timeout=300, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] > 10
    assert_same_on_all_ranks(ranks.results)


@pytest.mark.parametrize("n", [2, 3])
def test_gpu_jax_device_path(gpu, tmp_path, n):
    """JAX CUDA arrays take the device path as torch's do: every collective and send / recv, none,
    lossless and lossy, float32 and bfloat16, on the device where the torch rows are, with the host
    call's bits and the staged path's; results new JAX arrays on the input's device, inputs unchanged.
    Skips (also under NCCLZ_REQUIRE_GPU=1) where JAX is missing or sees no GPU."""
    why = _jax_gpu_reason()
    if why is not None:
        pytest.skip(why)
    ranks = run_ranks(tmp_path, "gpu_device_path", n, "shm", args=["jax"], timeout=300, env=GPU_ENV)
    ranks.assert_ok()
    assert ranks.results[0]["checks"] >= 8
    assert_same_on_all_ranks(ranks.results)


def test_gpu_bad_input(gpu, tmp_path):
    ranks = run_ranks(tmp_path, "gpu_bad_input", 2, "shm", timeout=120, env=GPU_ENV)
    ranks.assert_ok()


def test_one_gpu_per_rank_is_enforced():
    """A rank's GPU arrays must stay on one device (no GPU needed: two device descriptions)."""
    import ncclz
    from ncclz import _dlpack
    from ncclz._device import DeviceArray

    with ncclz.Communicator(rank=0, world_size=1, transport="inproc", master_port=0) as comm:
        on = {
            i: _dlpack.as_buffer(np.zeros(4, np.float32)).replace(stage=DeviceArray(None, "torch", i, True))
            for i in (0, 1)
        }
        assert comm.device is None
        comm._check_device(on[0], "x")
        assert comm.device == "cuda:0"
        comm._check_device(on[0], "x")
        with pytest.raises(ncclz.InvalidArgumentError, match=r"x is on cuda:1 .* on cuda:0"):
            comm._check_device(on[1], "x")
        # an output on another device than its input
        with pytest.raises(ncclz.InvalidArgumentError, match="cuda:1 but the input is on cuda:0"):
            _dlpack.check_output(on[1], on[0], (4,), "out")


def test_small_calls_keep_the_staged_path():
    """The device path is skipped where rank 0's policy runs the call exact by its size alone (the
    staged path's latency algorithm is faster there); policy="off" keeps it. No GPU needed."""
    import ncclz

    with ncclz.Communicator(rank=0, world_size=1, transport="inproc", master_port=0) as comm:
        small = comm._policy.small_bytes()
        assert small > 0
        assert comm._small_for_policy(np.zeros(small // 4, np.float32), None)
        assert not comm._small_for_policy(np.zeros(small // 4 + 1, np.float32), None)
        assert not comm._small_for_policy(np.zeros(16, np.float32), "off")
    with ncclz.Communicator(rank=0, world_size=1, transport="inproc", master_port=0, policy="off") as comm:
        assert not comm._small_for_policy(np.zeros(16, np.float32), None)


def test_the_policy_samples_device_arrays_not_whole(monkeypatch):
    """The policy's host copy of a CUDA array on the device path is its calibration sample (the
    array's first sample_bytes, flat), not the whole array, on every call it decides. No GPU needed:
    a CPU torch tensor stands in for the device array (pageable staging: no CUDA call)."""
    torch = pytest.importorskip("torch")
    import ncclz
    from ncclz import _dlpack
    from ncclz._device import DeviceArray

    monkeypatch.setenv("NCCLZ_STAGING", "pageable")
    t = torch.arange(3 << 18, dtype=torch.float32).reshape(768, 1024)
    b = _dlpack.as_buffer(t).replace(device=DeviceArray(t, "torch", 0, True))
    part = _dlpack.to_numpy(b, 4096)
    assert part.shape == (1024,) and np.array_equal(part, np.arange(1024, dtype=np.float32))
    whole = _dlpack.to_numpy(b)
    assert whole.shape == (768, 1024) and whole[-1, -1] == (3 << 18) - 1
    assert _dlpack.to_numpy(b, 1 << 30).shape == (768, 1024)  # a sample larger than the array: all of it
    with ncclz.Communicator(rank=0, world_size=1, transport="inproc", master_port=0,
                            policy=ncclz.policy.Policy(sample_bytes=1 << 16)) as comm:
        assert comm._sample_bytes() == 1 << 16
    with ncclz.Communicator(rank=0, world_size=1, transport="inproc", master_port=0) as comm:
        assert comm._sample_bytes() == 4 << 20


def test_jax_device_path_rehearsed_on_cpu(tmp_path):
    """The JAX rows of the device path with CPU JAX arrays standing in for CUDA ones (no GPU needed:
    the Python layer's device path and the native layer's DLPack import of JAX arrays, read-only
    inputs and the JaxOutput results; the runtime sees host memory)."""
    _need("jax")
    env = {"JAX_PLATFORMS": "cpu"}
    ranks = run_ranks(tmp_path, "gpu_device_path", 2, "shm", args=["jax", "rehearse"], timeout=240, env=env)
    ranks.assert_ok()
    for res in ranks.results:
        # 2 dtypes x 4 modes x 11 calls of a JAX array on the device path, new JAX results (but for a
        # non-root reduce or gather)
        assert res["checks"] >= 8 and res["direct"] >= 88 and res["outputs"] >= 72, res
    assert_same_on_all_ranks(ranks.results)


class _FakeJaxCudaArray:
    """Looks like a JAX array on cuda:1 to ncclz (its module, DLPack device, block_until_ready), with
    host memory behind it (NumPy's DLPack export), and records what is asked of it."""

    __module__ = "jaxlib._jax"

    def __init__(self, values):
        self.values, self.waits, self.exports = values, 0, []
        self.dtype, self.shape, self.size = values.dtype, values.shape, values.size

    def __dlpack_device__(self):
        return (2, 1)

    def __dlpack__(self, **kwargs):
        self.exports.append(kwargs)
        return self.values.__dlpack__()

    def __array__(self, dtype=None, copy=None):
        return self.values

    def block_until_ready(self):
        self.waits += 1
        return self


def test_jax_cuda_arrays_take_the_device_path():
    """A JAX CUDA array goes to the native layer as it is (no host copy), read-only, after its value
    is waited for; bfloat16 keeps its DLPack dtype; staged, it is copied to the host as before. No
    GPU or JAX needed: a fake JAX array."""
    import ml_dtypes
    import ncclz
    from ncclz import _dlpack

    x = _FakeJaxCudaArray(np.arange(8, dtype=ml_dtypes.bfloat16))
    b = _dlpack.as_buffer(x, "input", direct=True)
    assert b.native is x and b.user is x and b.stage is None and x.waits == 1
    assert (b.device.framework, b.device.index, b.framework, b.dtype) == ("jax", 1, "jax", "bfloat16")
    assert not b.writable and b.immutable and b.as_dtype == "" and b.shape == (8,)
    assert _dlpack.describe(b) == "bfloat16[8] (jax, cuda:1)" and x.exports == []
    staged = _dlpack.as_buffer(x, "input")  # NCCLZ_DEVICE_PATH=staged: a host copy of the value
    assert staged.device is None and staged.stage.framework == "jax" and staged.immutable
    assert not staged.writable and staged.as_dtype == "bfloat16" and staged.native.dtype == np.uint16
    with pytest.raises(ncclz.InvalidArgumentError, match="immutable; leave out= away"):
        _dlpack.check_output(x, b, (8,), "all_reduce out")
    bad = _FakeJaxCudaArray(np.zeros(4, np.complex64))
    with pytest.raises(ncclz.InvalidArgumentError, match="dtype complex64"):
        _dlpack.as_buffer(bad, "input", direct=True)


def test_jax_output_exports_unversioned():
    """JaxOutput (a JAX array ncclz made for a result) hands the native layer JAX's unversioned
    DLPack capsule whatever the importer asks, and JAX's device."""
    from ncclz import _dlpack

    x = _FakeJaxCudaArray(np.zeros(4, np.float32))
    out = _dlpack.JaxOutput(x)
    cap = out.__dlpack__(max_version=(1, 1))
    assert type(cap).__name__ == "PyCapsule" and x.exports == [{}]
    assert out.__dlpack_device__() == (2, 1)


def test_jax_device_path_outputs_and_samples():
    """The device path's JAX helpers on a CPU JAX array described as a CUDA one: new outputs on its
    device (JaxOutput, writable), broadcast's copy in a buffer of its own, the policy's sample."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from ncclz import _dlpack
    from ncclz._device import DeviceArray

    x = jnp.arange(1024, dtype=jnp.bfloat16).reshape(32, 32)
    b = _dlpack.direct_buffer(x, DeviceArray(x, "jax", 0, False), "x")
    o = _dlpack.empty(b, (2, 32, 32))
    assert isinstance(o.native, _dlpack.JaxOutput) and isinstance(o.user, jax.Array) and o.writable
    assert o.user.shape == (2, 32, 32) and o.user.dtype == x.dtype and o.user.devices() == x.devices()
    assert _dlpack.to_user(o) is o.user and o.as_dtype == ""
    c = _dlpack.writable_copy(b)
    assert c.user is not x and c.user.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    assert np.array_equal(np.asarray(c.user), np.asarray(x)) and c.writable
    part = _dlpack.to_numpy(b, 8)  # the policy's sample: the first 4 bfloat16 values, flat
    assert part.shape == (4,) and np.array_equal(part.astype(np.float32), np.arange(4, dtype=np.float32))
