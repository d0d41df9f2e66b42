"""Rank programs for the GPU tests (tests/python/test_gpu.py), run by _workers.py.

CUDA arrays from PyTorch, CuPy and JAX through the collectives. Each rank checks
that results stay on the input's device, every element against the fp64
reference and the promised bound, and that a GPU call gives the same bits as
the same call on host arrays (the staged path must not change a single bit).
Calls pass policy="off" where bits are compared, so that the compression
policy cannot choose differently between the two calls.
"""

from __future__ import annotations

import numpy as np
from _checks import Checker, as_f64, bits, bound_of, modes, plain_tolerance, rank_input, reference


def _torch_in(torch, a, device="cuda"):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(a.copy()).to(device)


def _torch_out(ck, torch, t):
    ck.require(t.device.type == "cuda", f"a result is on {t.device}, expected the GPU")
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_bf16())
    return t.numpy()


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def scenario_gpu_rooted(ncclz, comm, args):
    """reduce, gather, scatter and all_to_all (equal and uneven blocks) of CUDA torch tensors in
    every mode: on the device, within the bound, and bit-identical to the same call on host arrays;
    and a grouped ring shift into a CUDA tensor (on host copies)."""
    import torch

    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    n = 4099 * W
    seed = 500
    for dtype in ("float32", "bfloat16"):
        for mname, comp in modes(ncclz, dtype):
            seed += 1
            inputs = [rank_input(k, n, dtype, seed) for k in range(W)]
            E = bound_of(comp, inputs)

            # reduce onto the last rank, in place there
            root = W - 1
            x = _torch_in(torch, inputs[r])
            y = comm.reduce(x, root=root, compression=comp, policy="off")
            host = comm.reduce(inputs[r].copy(), root=root, compression=comp, policy="off")
            name = f"gpu/reduce/{dtype}/{mname}"
            if r == root:
                ck.require(y is x, f"{name}: not in place")
                got = _torch_out(ck, torch, y)
                ck.require(bits(got) == bits(host), f"{name}: differs from the host call")
                ref = reference(inputs, "sum")
                if E is None:
                    ck.require(bits(got) == bits(host), name)
                else:
                    ck.check_close(name, got, ref, E, mname, dtype)
            else:
                ck.require(y is None and host is None, f"{name}: non-root got a result")

            # gather onto rank 0: a new CUDA tensor (W, n)
            x = _torch_in(torch, inputs[r])
            y = comm.gather(x, root=0, compression=comp, policy="off")
            host = comm.gather(inputs[r].copy(), root=0, compression=comp, policy="off")
            name = f"gpu/gather/{dtype}/{mname}"
            if r == 0:
                got = _torch_out(ck, torch, y)
                ck.require(tuple(got.shape) == (W, n), f"{name}: shape {tuple(got.shape)}")
                ck.require(bits(got) == bits(host), f"{name}: differs from the host call")
                exact = np.stack([as_f64(a) for a in inputs])
                if E is None:
                    ck.require(bits(got) == bits(np.stack(inputs)), f"{name}: not exact")
                else:
                    ck.check_close(name, got, exact, E, mname, dtype)

            # scatter from rank 0: other ranks receive into a CUDA out=
            blk = n // W
            if r == 0:
                x = _torch_in(torch, inputs[0])
                y = comm.scatter(x, root=0, compression=comp, policy="off")
                host = comm.scatter(inputs[0].copy(), root=0, compression=comp, policy="off")
            else:
                out = torch.full(
                    (blk,), 7.0, dtype=_torch_in(torch, inputs[0][:1], "cpu").dtype, device="cuda"
                )
                y = comm.scatter(None, root=0, compression=comp, out=out, policy="off")
                ck.require(y is out, "scatter must return out=")
                host = comm.scatter(
                    None, root=0, compression=comp, out=np.zeros(blk, inputs[0].dtype), policy="off"
                )
            name = f"gpu/scatter/{dtype}/{mname}"
            got = _torch_out(ck, torch, y)
            ck.require(bits(got) == bits(host), f"{name}: differs from the host call")
            want = inputs[0][r * blk : (r + 1) * blk]
            if E is None:
                ck.require(bits(got) == bits(want), f"{name}: not exact")
            else:
                ck.check_close(name, got, as_f64(want), bound_of(comp, [inputs[0]]), mname, dtype)

            # all_to_all, equal blocks then uneven ones (rank i sends i + j + 1 rows to rank j)
            x = _torch_in(torch, inputs[r])
            y = comm.all_to_all(x, compression=comp, policy="off")
            host = comm.all_to_all(inputs[r].copy(), compression=comp, policy="off")
            name = f"gpu/all_to_all/{dtype}/{mname}"
            got = _torch_out(ck, torch, y)
            ck.require(bits(got) == bits(host), f"{name}: differs from the host call")
            want = np.concatenate([inputs[j][r * blk : (r + 1) * blk] for j in range(W)])
            if E is None:
                ck.require(bits(got) == bits(want), f"{name}: not exact")
            else:
                ck.check_close(name, got, as_f64(want), E, mname, dtype)
            sc = [r + j + 1 for j in range(W)]
            rc = [j + r + 1 for j in range(W)]
            xs = inputs[r][: sum(sc)]
            y = comm.all_to_all(
                _torch_in(torch, xs), compression=comp, send_counts=sc, recv_counts=rc, policy="off"
            )
            host = comm.all_to_all(xs.copy(), compression=comp, send_counts=sc, recv_counts=rc, policy="off")
            got = _torch_out(ck, torch, y)
            ck.require(bits(got) == bits(host), f"{name}/uneven: differs from the host call")

            # a grouped ring shift into a CUDA tensor (grouped calls run on host copies)
            right, left = (r + 1) % W, (r - 1) % W
            out = _torch_in(torch, np.zeros_like(inputs[r]))
            (y,) = comm.group(sends=[(_torch_in(torch, inputs[r]), right)], recvs=[(out, left)], compression=comp)
            name = f"gpu/group/{dtype}/{mname}"
            ck.require(y is out, f"{name}: group must return the recv tensor")
            got = _torch_out(ck, torch, y)
            if E is None:
                ck.require(bits(got) == bits(inputs[left]), f"{name}: not exact")
            else:
                ck.check_close(name, got, as_f64(inputs[left]), bound_of(comp, [inputs[left]]), mname, dtype)
    comm.barrier()
    return {"hashes": ck.hashes, "checks": ck.checks}


def scenario_gpu_float16_avg(ncclz, comm, args):
    """float16 averages of CUDA tensors near the type's top (each input divided by N on the device before
    the sum, core/call.cpp): finite, the same bits as the same calls on host arrays (the host divides on
    the host), all_reduce in place and into out=, reduce_scatter, none and lossless."""
    import torch

    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    for count in (300, 1 << 20):
        count -= count % W
        rng = np.random.default_rng(77 + r)
        x = (rng.uniform(20000, 40000, count) * np.where(np.arange(count) % 5 == 0, -1, 1)).astype(np.float16)
        for mode, comp in (("none", None), ("lossless", ncclz.Lossless())):
            name = f"avg16-{count}-{mode}"
            host = x.copy()
            comm.all_reduce(host, "avg", comp, policy="off")
            ck.require(np.isfinite(host.astype(np.float64)).all(), f"{name}: the host call overflowed")
            dev = torch.from_numpy(x.copy()).cuda()
            comm.all_reduce(dev, "avg", comp, policy="off")
            ck.require(bits(_torch_out(ck, torch, dev)) == bits(host), f"{name}: all_reduce bits differ from the host's")
            src, out = torch.from_numpy(x.copy()).cuda(), torch.empty(count, dtype=torch.float16, device="cuda")
            comm.all_reduce(src, "avg", comp, out=out, policy="off")
            ck.require(bits(_torch_out(ck, torch, out)) == bits(host), f"{name}: all_reduce(out=) bits")
            ck.require(bits(_torch_out(ck, torch, src)) == bits(x), f"{name}: all_reduce(out=) wrote its input")
            hrs = comm.reduce_scatter(x.copy(), "avg", comp, policy="off")
            drs = comm.reduce_scatter(torch.from_numpy(x.copy()).cuda(), "avg", comp, policy="off")
            ck.require(bits(_torch_out(ck, torch, drs)) == bits(hrs), f"{name}: reduce_scatter bits")
            ck.checks += 1
    return {"checks": ck.checks}


def scenario_gpu_frameworks(ncclz, comm, args):
    """CuPy and JAX CUDA arrays (whichever args name), and the frameworks' current streams: work
    queued on a side stream before a call is in the call's input, and the result is there for work
    queued after it."""
    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    n = 1 << 20
    inputs = [rank_input(k, n, "float32", 77) for k in range(W)]
    ref = reference(inputs, "sum")
    comp = ncclz.Lossy(rel=1e-3)
    E = bound_of(comp, inputs)

    if "torch" in args:
        import torch

        s = torch.cuda.Stream()
        x = torch.zeros(n, device="cuda")
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)  # the copy below would lose a race with the call
            x.copy_(torch.from_numpy(inputs[r]).to("cuda", non_blocking=True))
            y = comm.all_reduce(x, compression=comp)
            z = y * 2  # queued on s after the call: must see the result
        torch.cuda.synchronize()
        ck.require(y is x, "torch all_reduce must be in place")
        ck.check_close("gpu/torch/stream", z.cpu().numpy() / 2, ref, E, "rel", "float32")
        # queued (async_op=True): the call runs on another thread, still after the side stream's work
        a = torch.zeros(n, device="cuda")
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)
            a.copy_(torch.from_numpy(inputs[r]).to("cuda", non_blocking=True))
            w = comm.all_reduce(a, compression=comp, async_op=True)
        ck.require(w.wait(timeout=120) is a, "torch async all_reduce must return the tensor")
        torch.cuda.synchronize()
        ck.check_close("gpu/torch/async", a.cpu().numpy(), ref, E, "rel", "float32")

    if "cupy" in args:
        import cupy

        with cupy.cuda.Stream(non_blocking=True):
            x = cupy.zeros(n, dtype=cupy.float32)
            x += cupy.asarray(inputs[r])  # queued on the side stream
            y = comm.all_reduce(x, compression=comp)
        ck.require(y is x and isinstance(y, cupy.ndarray), "cupy all_reduce must be in place")
        ck.check_close("gpu/cupy/all_reduce", cupy.asnumpy(y), ref, E, "rel", "float32")
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            a = cupy.zeros(n, dtype=cupy.float32)
            a += cupy.asarray(inputs[r])  # queued on the side stream before the queued call
            w = comm.all_reduce(a, compression=comp, async_op=True)
        ck.require(w.wait(timeout=120) is a, "cupy async all_reduce must return the array")
        side.synchronize()
        ck.check_close("gpu/cupy/async", cupy.asnumpy(a), ref, E, "rel", "float32")
        out = cupy.empty(n, dtype=cupy.float32)
        ck.require(comm.all_reduce(cupy.asarray(inputs[r]), out=out) is out, "cupy out= must be returned")
        ck.check_close(
            "gpu/cupy/out",
            cupy.asnumpy(out),
            ref,
            plain_tolerance("float32", ref, inputs, "sum"),
            "none",
            "float32",
        )
        g = comm.all_gather(cupy.asarray(inputs[r][:1000]))
        ck.require(isinstance(g, cupy.ndarray) and g.shape == (W, 1000), f"cupy all_gather gave {type(g)}")
        ck.require(
            bits(cupy.asnumpy(g)) == bits(np.stack([a[:1000] for a in inputs])), "cupy all_gather not exact"
        )
        b = cupy.asarray(inputs[r][:1000])
        ck.require(comm.broadcast(b, root=W - 1) is b, "cupy broadcast must be in place")
        ck.require(bits(cupy.asnumpy(b)) == bits(inputs[W - 1][:1000]), "cupy broadcast not exact")

    if "jax" in args:
        import jax
        import jax.numpy as jnp

        gpu = jax.devices("gpu")[0]
        for dtype in ("float32", "bfloat16"):
            inp = [rank_input(k, 50_000, dtype, 78) for k in range(W)]
            x = jax.device_put(jnp.asarray(inp[r]), gpu)
            y = comm.all_reduce(x, compression=ncclz.Lossy(rel=1e-2))
            ck.require(
                y is not x and list(y.devices()) == [gpu], f"jax all_reduce gave {type(y)} on {y.devices()}"
            )
            ck.require(bits(np.asarray(x)) == bits(inp[r]), "jax input changed")
            ck.check_close(
                f"gpu/jax/{dtype}",
                np.asarray(y),
                reference(inp, "sum"),
                bound_of(ncclz.Lossy(rel=1e-2), inp),
                "rel",
                dtype,
            )
            g = comm.all_gather(x)
            ck.require(
                list(g.devices()) == [gpu] and g.shape == (W, 50_000), "jax all_gather: device or shape"
            )
            ck.require(bits(np.asarray(g)) == bits(np.stack(inp)), "jax all_gather not exact")
    comm.barrier()
    return {"checks": ck.checks}


def scenario_gpu_bad_input(ncclz, comm, args):
    """Bad GPU input raises InvalidArgumentError naming the problem; the communicator stays usable."""
    import torch

    r = comm.rank
    ck = Checker(comm)

    def expect(name, fn, *words):
        try:
            fn()
        except ncclz.InvalidArgumentError as e:
            msg = str(e)
            ck.require(all(w in msg for w in words), f"{name}: message {msg!r} lacks {words}")
            return
        ck.fail(f"rank {r}: {name}: no InvalidArgumentError")

    x = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
    expect("non-contiguous", lambda: comm.all_reduce(x.t()), "non-contiguous")
    expect(
        "cpu out for a cuda input", lambda: comm.all_reduce(x, out=np.empty(64, np.float32)), "cuda:0", "cpu"
    )
    expect(
        "cuda out for a cpu input", lambda: comm.all_reduce(np.ones(64, np.float32), out=x), "cuda:0", "cpu"
    )
    expect(
        "cuda out of another dtype",
        lambda: comm.all_gather(
            x, out=torch.empty((comm.world_size, 8, 8), dtype=torch.float64, device="cuda")
        ),
        "dtype",
    )
    expect(
        "complex cuda", lambda: comm.all_reduce(torch.ones(4, dtype=torch.complex64, device="cuda")), "dtype"
    )
    ck.require(comm.device == "cuda:0", f"comm.device is {comm.device!r}")
    y = comm.all_reduce(torch.ones(1000, device="cuda"))
    ck.require(bool((y == comm.world_size).all()), "all_reduce after the errors is wrong")
    comm.barrier()
    return {"checks": ck.checks}


def _framework_io(ck, fw, jax_device=None):
    """(to_gpu, to_host) for CUDA arrays of framework fw: to_gpu(a) puts NumPy array a on the GPU
    (for JAX on jax_device); to_host(y) checks that a result is fw's array there and returns it as
    NumPy (bfloat16 as ml_dtypes')."""
    if fw == "torch":
        import torch

        return (lambda a: _torch_in(torch, a)), (lambda y: _torch_out(ck, torch, y))
    if fw == "cupy":
        import cupy

        def cupy_host(y):
            ck.require(isinstance(y, cupy.ndarray), f"a result is a {type(y).__name__}, expected a CuPy array")
            return cupy.asnumpy(y)

        return cupy.asarray, cupy_host
    import jax

    def jax_host(y):
        ck.require(isinstance(y, jax.Array), f"a result is a {type(y).__name__}, expected a JAX array")
        ck.require(y.devices() == {jax_device}, f"a result is on {y.devices()}, expected {jax_device}")
        return np.asarray(y)

    return (lambda a: jax.device_put(a.copy(), jax_device)), jax_host


def _rehearse_jax_on_cpu():
    """No GPU needed: CPU JAX arrays stand in for CUDA ones (on "cuda:0"), and the device path is on
    unless NCCLZ_DEVICE_PATH=staged, so that the device path's Python layer runs with JAX arrays
    (direct_buffer, JaxOutput, writable_copy, the templates of recv and scatter) and the native
    layer imports them by DLPack; the runtime sees host memory there (on_device stays false).
    Returns a dict that counts the device path's JAX inputs ("direct") and results ("outputs")."""
    import os

    from ncclz import _device, _dlpack
    from ncclz import comm as comm_module

    real_stage_of, real_direct, real_output = _dlpack.stage_of, _dlpack.direct_buffer, _dlpack._jax_output
    seen = {"direct": 0, "outputs": 0}

    def stage_of(x, what):
        if _device._framework(x) == "jax":
            return _device.DeviceArray(x, "jax", 0, False)
        return real_stage_of(x, what)

    def direct_buffer(*a):
        seen["direct"] += 1
        return real_direct(*a)

    def jax_output(*a):
        seen["outputs"] += 1
        return real_output(*a)

    _dlpack.stage_of, _dlpack.direct_buffer, _dlpack._jax_output = stage_of, direct_buffer, jax_output
    comm_module._device_path_on = lambda: os.environ.get("NCCLZ_DEVICE_PATH", "auto") != "staged"
    return seen


def scenario_gpu_device_path(ncclz, comm, args):
    """all_reduce (sum, avg, max), reduce_scatter (sum, min), all_gather, broadcast, reduce, gather,
    scatter and all_to_all of CUDA arrays (torch, and CuPy where installed), uncompressed, lossless
    and lossy, on the device path (a lossy max / min too: the codes' max / min on the device): last_stats.on_device (lossless: float32 and bfloat16 code FloatHuff slices
    there, float64 runs on host copies inside the runtime), the results on the input's device, every
    lossy element within the bound, and the same bits as the same call on host arrays and as the
    staged GPU path (NCCLZ_DEVICE_PATH=staged). Then send / recv, and a call small enough for the
    policy's staged path.

    args "jax": JAX arrays (float32 and bfloat16) instead of torch's and CuPy's, without importing
    torch: the same rows, and every result a new JAX array on the input's device, every input
    unchanged (recv and a non-root scatter get a JAX template, not an array they write). With
    "rehearse" too, CPU JAX arrays stand in for CUDA ones (_rehearse_jax_on_cpu: no GPU needed, and
    on_device is not checked)."""
    import os

    W, r = comm.world_size, comm.rank
    ck = Checker(comm)
    n = 65536 * W
    seed = 900
    rehearse = "rehearse" in args
    jax_device, seen = None, {}
    if "jax" in args:
        import jax

        if rehearse:
            seen = _rehearse_jax_on_cpu()
        jax_device = jax.devices("cpu" if rehearse else "gpu")[0]
        frameworks, dtypes = ["jax"], ("float32", "bfloat16")
    else:
        frameworks, dtypes = ["torch"], ("float32", "float64", "bfloat16")
        try:
            import cupy  # noqa: F401

            frameworks.append("cupy")
        except ImportError:
            pass

    def run(coll, x, comp, op):
        if coll == "all_reduce":
            return comm.all_reduce(x, op=op, compression=comp, policy="off")
        if coll == "reduce_scatter":
            return comm.reduce_scatter(x, op=op, compression=comp, policy="off")
        if coll == "all_gather":
            return comm.all_gather(x, compression=comp, policy="off")
        if coll == "reduce":
            return comm.reduce(x, root=W - 1, op=op, compression=comp, policy="off")
        if coll == "gather":
            return comm.gather(x, root=W - 1, compression=comp, policy="off")
        if coll == "scatter":
            if r == W - 1:
                return comm.scatter(x, root=W - 1, compression=comp, policy="off")
            # a non-root rank passes out= (its block: zeros of x's dtype) and no input
            return comm.scatter(None, root=W - 1, compression=comp, policy="off", out=x)
        if coll == "all_to_all":
            return comm.all_to_all(x, compression=comp, policy="off")
        return comm.broadcast(x, root=W - 1, compression=comp, policy="off")

    def staged_run(coll, x, comp, op):
        os.environ["NCCLZ_DEVICE_PATH"] = "staged"
        try:
            return run(coll, x, comp, op)
        finally:
            del os.environ["NCCLZ_DEVICE_PATH"]

    for fw in frameworks:
        to_gpu, to_host = _framework_io(ck, fw, jax_device)
        for dtype in dtypes:
            if fw == "cupy" and dtype == "bfloat16":
                continue
            for mname, comp in modes(ncclz, dtype):
                for coll, op in (
                    ("all_reduce", "sum"),
                    ("all_reduce", "avg"),
                    ("all_reduce", "max"),
                    ("reduce_scatter", "sum"),
                    ("reduce_scatter", "min"),
                    ("all_gather", None),
                    ("broadcast", None),
                    ("reduce", "sum"),
                    ("gather", None),
                    ("scatter", None),
                    ("all_to_all", None),
                ):
                    seed += 1
                    m = n if coll in ("reduce_scatter", "scatter", "all_to_all") else n // W
                    inputs = [rank_input(k, m, dtype, seed) for k in range(W)]
                    name = f"{coll}/device/{fw}/{op}/{dtype}/{mname}"
                    # the array this rank passes: its input, or a non-root scatter's out= (three calls as the root's)
                    given = inputs[r] if coll != "scatter" or r == W - 1 else np.zeros(m // W, inputs[0].dtype)
                    host = run(coll, given.copy(), comp, op)
                    host_algorithm = comm.last_stats.algorithm
                    x = to_gpu(given)
                    dev = run(coll, x, comp, op)
                    st = comm.last_stats
                    # small exact calls: the latency algorithm from host copies, as the host call
                    ck.require(st.algorithm == host_algorithm, f"{name}: ran {st.algorithm}, the host {host_algorithm}")
                    staged = staged_run(coll, to_gpu(given), comp, op)
                    ck.require(not comm.last_stats.on_device, f"{name}: the staged call ran on the device")
                    if fw == "jax":  # immutable: the result is a new array, the input (or template) unchanged
                        ck.require(dev is not x and bits(np.asarray(x)) == bits(given), f"{name}: the JAX input changed")
                    if rehearse:
                        pass
                    elif st.algorithm == "latency":
                        ck.require(not st.on_device, f"{name}: the latency algorithm ran on the device")
                    elif mname == "lossless":
                        # FloatHuff codes float32 and bfloat16 on the device; float64 runs on host copies
                        ck.require(st.on_device == (dtype != "float64"), f"{name}: on_device is {st.on_device}")
                    else:
                        # bf16 sums at these bounds may run exact (the plan's budget): off the device then
                        ck.require(st.on_device or st.exact_fallback, f"{name}: neither on the device nor exact")
                        if dtype != "bfloat16" or mname == "none":
                            ck.require(st.on_device, f"{name}: did not run on the device ({st})")
                    if host is None:  # reduce, gather: not the root
                        ck.require(dev is None and staged is None, f"{name}: a non-root rank got a result")
                        continue
                    got = to_host(dev)
                    ck.require(got.dtype == host.dtype and got.shape == host.shape,
                               f"{name}: {got.dtype}{got.shape}, expected {host.dtype}{host.shape}")
                    ck.require(bits(got) == bits(host), f"{name}: differs from the host call")
                    ck.require(bits(to_host(staged)) == bits(host), f"{name}: differs from the staged call")
                    if coll in ("all_reduce", "broadcast", "all_gather"):
                        ck.record(name, got)
                    if coll == "all_reduce" and bound_of(comp, inputs) is not None:
                        ref = reference(inputs, op)
                        ck.check_close(name, got, ref, bound_of(comp, inputs), mname, dtype)
    to_gpu, to_host = _framework_io(ck, frameworks[0], jax_device)
    # send / recv, lossy: coded on the device on both sides, the host pair's bits; then uncompressed
    # and lossless: on the device on both sides, exact.
    if W >= 2 and r < 2:
        for xseed, comp in ((55, ncclz.Lossy(abs=1e-3)), (56, None), (56, ncclz.Lossless())):
            x = rank_input(0, 100000, "float32", xseed)
            if r == 0:
                comm.send(x.copy(), 1, compression=comp)
                comm.send(to_gpu(x), 1, compression=comp)
                ck.require(rehearse or comm.last_stats.on_device, f"send {comp}: did not run on the device")
            else:
                host = comm.recv(np.zeros_like(x), 0, compression=comp)
                template = to_gpu(np.zeros_like(x))
                dev = comm.recv(template, 0, compression=comp)
                ck.require(rehearse or comm.last_stats.on_device, f"recv {comp}: did not run on the device")
                got = to_host(dev)
                ck.require(bits(got) == bits(host), f"send/recv {comp}: differs from the host pair")
                if bound_of(comp, [x]) is None:
                    ck.require(bits(got) == bits(x), f"send/recv {comp}: not exact")
                else:
                    ck.check_close("send/recv", got, as_f64(x), 1e-3, "abs1e-3", "float32")
                if frameworks[0] == "jax":
                    ck.require(dev is not template and not np.asarray(template).any(), "recv: the JAX template changed")
    # Lossless bytes on the device (FloatHuff over the bytes: no rank codes with rANS where one is a
    # device): uint8 all_gather and sum, int8 sum (its wire type's), the host call's bits; on the
    # ring (2 ranks: 1 MiB a rank is above the latency algorithm's sizes), on the device, and the
    # skewed bytes (about 4.6 bits each) compress.
    if frameworks[0] == "torch" and not rehearse and W >= 2:
        g = np.random.default_rng(1000 + r).normal(0, 6, 1 << 20)
        for dtype in ("uint8", "int8"):
            x = np.clip(np.round(g), -128, 127).astype(np.int8).view(dtype)
            for coll in ("all_gather", "all_reduce"):
                name = f"{coll}/device/torch/bytes/{dtype}"
                host = run(coll, x.copy(), ncclz.Lossless(), "sum")
                dev = to_host(run(coll, to_gpu(x), ncclz.Lossless(), "sum"))
                st = comm.last_stats
                ck.require(bits(dev) == bits(host), f"{name}: differs from the host call")
                if W == 2 or st.algorithm != "latency":
                    ck.require(st.on_device, f"{name}: did not run on the device ({st})")
                    ck.require(st.ratio > 1.2, f"{name}: ratio {st.ratio}, the bytes did not compress")
    # A small uncompressed call (rank 0's policy runs it exact by size): the staged path, same bits.
    small = comm._policy.small_bytes() // 4
    ck.require(small > 0, "no call is small for the policy")
    x = rank_input(r, small, "float32", 77)
    y = to_host(comm.all_reduce(to_gpu(x)))
    ck.require(not comm.last_stats.on_device, "a small call ran on the device")
    ck.require(bits(y) == bits(comm.all_reduce(x.copy())), "small: differs from the host call")
    comm.barrier()
    return {"hashes": ck.hashes, "checks": ck.checks, **seen}
