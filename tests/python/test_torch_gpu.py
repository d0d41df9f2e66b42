"""CUDA tensors through the torch.distributed backend "ncclz", the DDP hook and ShardedOptimizer.

The runtime stages CUDA arrays through host memory (python/ncclz/_device.py); these tests check
that the backend passes CUDA tensors through with results on the input's device, on the caller's
stream, and that DDP (backend and hook) and ShardedOptimizer train on cuda:0 as on the CPU.

Two processes share GPU 0 (``python test_torch_gpu.py worker SCENARIO RANK 2 DIR``). Without a
CUDA GPU every test skips, and fails under NCCLZ_REQUIRE_GPU=1 (the GPU machine's setting).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
ncclz = pytest.importorskip("ncclz")

WORLD = 2
TIMEOUT_S = 150


@pytest.fixture
def gpu():
    if not torch.cuda.is_available():
        if os.environ.get("NCCLZ_REQUIRE_GPU") == "1":
            pytest.fail("NCCLZ_REQUIRE_GPU=1 but torch.cuda.is_available() is False", pytrace=False)
        pytest.skip("no CUDA GPU visible to PyTorch")


# ------------------------------------------------------------------ worker side
def _close(got, want, tol: float, what: str) -> None:
    err = (got.double().cpu() - want.double().cpu()).abs().max().item() if got.numel() else 0.0
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


def _collectives(rank: int, out: dict) -> None:
    import ncclz.torch as nt
    import torch.distributed as dist

    dev = torch.device("cuda", 0)
    w = WORLD
    f32eps = torch.finfo(torch.float32).eps

    def inp(r, shape, seed, dtype=torch.float32):
        g = torch.Generator().manual_seed(100 * seed + r)
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + r).to(dtype)

    # all_reduce (in place), all_gather_into_tensor, reduce_scatter_tensor, broadcast: values and device
    xs = [inp(r, (64, 33), 1) for r in range(w)]
    x = xs[rank].to(dev)
    dist.all_reduce(x)
    assert x.is_cuda and x.device == dev
    _close(x, sum(t.double() for t in xs), 4 * f32eps * 10, "all_reduce")
    flat = torch.empty(w * 64, 33, device=dev)
    dist.all_gather_into_tensor(flat, xs[rank].to(dev))
    assert flat.is_cuda and torch.equal(flat.cpu(), torch.cat(xs)), "all_gather_into_tensor"
    o = torch.empty(32, 33, device=dev)
    dist.reduce_scatter_tensor(o, xs[rank].to(dev))
    _close(o, (xs[0].double() + xs[1].double())[rank * 32 : (rank + 1) * 32], 1e-5, "reduce_scatter_tensor")
    assert o.is_cuda
    b = xs[rank].to(dev)
    dist.broadcast(b, src=1)
    assert b.is_cuda and torch.equal(b.cpu(), xs[1]), "broadcast"
    # an integer and a bfloat16 tensor, a list all_gather, a reduce, all_to_all_single with splits
    i = torch.full((7,), rank + 1, dtype=torch.int64, device=dev)
    dist.all_reduce(i, op=dist.ReduceOp.MAX)
    assert i.is_cuda and torch.equal(i.cpu(), torch.full((7,), w, dtype=torch.int64))
    lst = [torch.empty(5, dtype=torch.bfloat16, device=dev) for _ in range(w)]
    dist.all_gather(lst, torch.full((5,), float(rank), dtype=torch.bfloat16, device=dev))
    assert all(
        t.is_cuda and torch.equal(t.cpu(), torch.full((5,), float(r), dtype=torch.bfloat16))
        for r, t in enumerate(lst)
    )
    red = torch.full((9,), float(rank + 1), device=dev)
    dist.reduce(red, dst=0)
    if rank == 0:
        assert torch.equal(red.cpu(), torch.full((9,), float(sum(range(1, w + 1)))))
    send = torch.arange(3 * (rank + 1), dtype=torch.float32, device=dev) + 10 * rank
    sends = [rank + 1, 2 * (rank + 1)]  # rows to rank 0, rank 1
    recvs = [r + 1 if rank == 0 else 2 * (r + 1) for r in range(w)]
    got = torch.empty(sum(recvs), device=dev)
    dist.all_to_all_single(got, send, output_split_sizes=recvs, input_split_sizes=sends)
    want = []
    for r in range(w):
        src = torch.arange(3 * (r + 1), dtype=torch.float32) + 10 * r
        start = 0 if rank == 0 else r + 1
        want.append(src[start : start + recvs[r]])
    assert got.is_cuda and torch.equal(got.cpu(), torch.cat(want)), "all_to_all_single uneven"
    # send / recv
    if rank == 0:
        dist.send(torch.full((4,), 3.5, device=dev), 1)
    else:
        r_ = torch.empty(4, device=dev)
        dist.recv(r_, 0)
        assert torch.equal(r_.cpu(), torch.full((4,), 3.5))

    # the caller's stream: the input is produced on a side stream and the call issued there; the
    # result must include that work (the staging copy runs on the caller's stream)
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        big = torch.ones(1 << 20, device=dev)
        torch.cuda._sleep(100_000_000)  # tens of ms of queued work before the last write
        big.add_(20.0)  # the copy to the host must see this: 21
        work = dist.all_reduce(big, async_op=True)
    work.wait()  # the current (default) stream now waits for the call's stream
    assert torch.equal(big.cpu(), torch.full((1 << 20,), 21.0 * w)), "side stream"
    fut = dist.all_reduce(torch.full((8,), 1.0, device=dev), async_op=True).get_future()
    val = fut.wait()[0]
    assert val.is_cuda and torch.equal(val.cpu(), torch.full((8,), float(w))), "future value"

    # a lossy group: every element within the call's E; small and integer tensors exact
    lg = dist.new_group(
        backend="ncclz",
        pg_options=nt.Options(compression=ncclz.Lossy(rel=1e-3), min_elements=1024, policy="off"),
    )
    xs = [inp(r, (256, 128), 2) for r in range(w)]
    x = xs[rank].to(dev)
    wk = dist.all_reduce(x, op=dist.ReduceOp.AVG, group=lg, async_op=True)
    wk.wait()
    (st,) = wk.stats
    assert st.compression.startswith("lossy") and st.error_bound > 0, st
    ref = (xs[0].double() + xs[1].double()) / 2
    _close(x, ref, st.error_bound * (1 + 1e-6) + 4 * f32eps * ref.abs().max().item(), "lossy all_reduce")
    out["lossy_E"] = st.error_bound
    out["lossy_ratio"] = st.ratio

    # a CUDA tensor and a CPU tensor in one call: refused, naming both devices
    try:
        dist.all_gather_into_tensor(torch.empty(w * 3), torch.ones(3, device=dev))
    except (ncclz.InvalidArgumentError, ValueError) as e:
        assert "device" in str(e), e
    else:
        raise AssertionError("mixed devices were not refused")
    dist.barrier()


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _data(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 + 10 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randint(0, 4, (16,), generator=g)


def _reference(steps: int) -> list:
    """The same training in one process on the CPU: the gradient of the mean loss of both ranks' batches."""
    torch.manual_seed(0)
    net = _Net().double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for s in range(steps):
        opt.zero_grad()
        loss = sum(
            torch.nn.functional.cross_entropy(net(x.double()), y)
            for x, y in (_data(s, r) for r in range(WORLD))
        )
        (loss / WORLD).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def _training(rank: int, out: dict) -> None:
    """DDP through the backend (none and rel 1e-3), DDP with the hook, ShardedOptimizer: on cuda:0."""
    import ncclz.torch as nt
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("cuda", 0)
    steps = 3
    ref, ref1 = _reference(steps), _reference(1)
    # float32 on the GPU against a float64 CPU reference: a few float32 roundings per step
    tol = 2e-5

    def train(model, opt, n=steps):
        for s in range(n):
            opt.zero_grad()
            x, y = _data(s, rank)
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
        return [p.detach() for p in (model.module if hasattr(model, "module") else model).parameters()]

    def fresh():
        torch.manual_seed(0)
        return _Net().to(dev)

    for mode, spec in (("none", None), ("rel=1e-3", ncclz.Lossy(rel=1e-3))):
        g = dist.new_group(
            backend="ncclz", pg_options=nt.Options(compression=spec, min_elements=256, policy="off")
        )
        model = DDP(fresh(), process_group=g)
        n = steps if spec is None else 1
        params = train(model, torch.optim.SGD(model.parameters(), lr=0.1), n)
        assert all(p.is_cuda for p in params)
        if spec is None:
            for p, q in zip(params, ref):
                _close(p, q, tol, "DDP backend none")
        else:
            e = g.traffic().max_error_bound
            assert e > 0 and g.traffic().compressed_calls >= 1, g.traffic()
            # one step: the averaged gradient is within E of the exact one, so a parameter within lr * E
            for p, q in zip(params, ref1):
                _close(p, q, tol + 0.1 * e * 1.01, "DDP backend rel 1e-3")
            out["ddp_E"] = e

    # the DDP hook on a gloo-free setup: DDP's own group is the ncclz world group, the hook its own communicator
    comm = nt.communicator()
    model = DDP(fresh())
    state = nt.HookState(comm, compression=ncclz.Lossless(), overlap=True)  # the background thread's stream
    model.register_comm_hook(state, nt.ddp_hook)
    params = train(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for p, q in zip(params, ref):
        _close(p, q, tol, "DDP hook lossless")

    # ShardedOptimizer: shards, masters and the optimizer state on the GPU
    net = fresh()
    sopt = nt.ShardedOptimizer(list(net.parameters()), torch.optim.SGD, comm, compression=None, lr=0.1)

    params = train(net, sopt)  # it averages the ranks' gradients itself (reduce_scatter avg)
    assert all(g_.master.is_cuda for g_ in sopt.groups)
    for p, q in zip(params, ref):
        _close(p, q, tol, "ShardedOptimizer")
    dist.barrier()


SCENARIOS = {"collectives": _collectives, "training": _training}


def _worker(scenario: str, rank: int, world: int, tmp: str) -> None:
    import faulthandler

    import ncclz.torch  # noqa: F401 - registers the backend
    import torch.distributed as dist

    faulthandler.dump_traceback_later(TIMEOUT_S - 20, exit=True)
    torch.cuda.set_device(0)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("ncclz", init_method=f"file://{tmp}/init", rank=rank, world_size=world)
    out: dict = {}
    SCENARIOS[scenario](rank, out)
    dist.destroy_process_group()
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


# ------------------------------------------------------------------ test side
def _run(scenario: str, tmp_path) -> list:
    env = dict(os.environ, NCCLZ_TIMEOUT="60", OMP_NUM_THREADS="1", NCCLZ_TORCH_COMPRESSION="none")
    env.setdefault("CUDA_VISIBLE_DEVICES", "0")
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", scenario, str(r), str(WORLD), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(WORLD)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    outputs = []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{scenario}: a rank hung past {TIMEOUT_S} s")
        outputs.append(o)
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"{scenario} rank {r} exited {p.returncode}:\n{outputs[r][-6000:]}"
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in range(WORLD)]


def test_cuda_collectives_through_the_backend(gpu, tmp_path):
    res = _run("collectives", tmp_path)
    assert res[0]["lossy_E"] == res[1]["lossy_E"] > 0


def test_cuda_ddp_hook_and_sharded_optimizer(gpu, tmp_path):
    res = _run("training", tmp_path)
    assert res[0]["ddp_E"] > 0


def test_backend_registers_cuda():
    import ncclz.torch  # noqa: F401
    import torch.distributed as dist

    assert dist.Backend.backend_capability["ncclz"] == ["cpu", "cuda"]


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
