"""ncclz.torch.ShardedOptimizer against an unsharded optimizer step, on 3 CPU processes.

One launch of WORLD ranks (``python test_sharded.py worker OUTDIR RANK WORLD STORE``,
subprocess timeout) runs every scenario. Each rank computes its local gradients,
the exact fp64 average over ranks (gloo all_gather of the local gradients), and
steps a plain copy of the model with the unsharded optimizer on that average:
the reference. The sharded step must match it (exact modes: to float rounding;
``Lossy(abs=E)`` with SGD: every parameter within lr * E). Failed checks are
recorded, not raised, so every rank keeps making the same collective calls.
WORLD = 3 makes the shards padded (no parameter count divides by 3).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
ncclz = pytest.importorskip("ncclz")

WORKER_TIMEOUT_S = 60
WORLD = int(os.environ.get("NCCLZ_TEST_TORCH_WORLD_SHARDED", "3"))


def _has_runtime() -> bool:
    try:
        import ncclz.comm  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


# ---------------------------------------------------------------- worker side
def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(20, 64),  # 1280: lossy
        torch.nn.ReLU(),
        torch.nn.LayerNorm(64),  # 1-D: exact
        torch.nn.Linear(64, 33),  # 2112: lossy
        torch.nn.ReLU(),
        torch.nn.Linear(33, 5),  # 165: exact
    )


def _batch(rank, step):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(8, 20, generator=g) * (rank + 1), torch.randint(0, 5, (8,), generator=g)


SCENARIOS = {
    # name: (optimizer, kwargs, compression, param_compression, steps)
    "sgd_none": (torch.optim.SGD, {"lr": 0.1}, None, None, 3),
    "adam_none": (torch.optim.Adam, {"lr": 1e-2}, None, None, 3),
    "adam_lossless": (torch.optim.Adam, {"lr": 1e-2}, "lossless", "lossless", 2),
    "sgd_lossy_abs": (torch.optim.SGD, {"lr": 0.5}, ("abs", 1e-3), None, 1),
    "sgd_lossy_rel_params": (torch.optim.SGD, {"lr": 0.5}, ("rel", 1e-2), ("abs", 1e-4), 1),
    "sgd_optout": (torch.optim.SGD, {"lr": 0.5}, ("rel", 1e-2), ("abs", 1e-4), 2),  # step(compress=False)
}


def _spec(v):
    if v is None:
        return None
    if v == "lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(**{v[0]: v[1]})


def _exact_avg(model, rank, world, step):
    import torch.distributed as dist

    ref = copy.deepcopy(model)
    x, y = _batch(rank, step)
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    out = []
    for p in ref.parameters():
        parts = [torch.empty_like(p.grad) for _ in range(world)]
        dist.all_gather(parts, p.grad.contiguous())
        out.append(torch.stack(parts).double().mean(0).float())
    return out


def _hash(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _run_scenario(name, comm, rank, world):
    import ncclz.torch as nt

    opt_cls, kw, spec, pspec, steps = SCENARIOS[name]
    spec, pspec = _spec(spec), _spec(pspec)
    model = _model()
    ref_model = copy.deepcopy(model)
    ref_opt = opt_cls(ref_model.parameters(), **kw)
    opt = nt.ShardedOptimizer(
        model.parameters(), opt_cls, comm, compression=spec, param_compression=pspec, **kw
    )
    failures = []
    report = {"failures": failures, "steps": []}
    for step in range(steps):
        # reference: unsharded step on the exact average gradient, from the same parameters
        grads = _exact_avg(model, rank, world, step)
        with torch.no_grad():
            for rp, p in zip(ref_model.parameters(), model.parameters()):
                rp.copy_(p)
        for rp, g in zip(ref_model.parameters(), grads):
            rp.grad = g.clone()
        ref_opt.step()
        # sharded step on local gradients
        opt.zero_grad()
        x, y = _batch(rank, step)
        compress = name != "sgd_optout"
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step(compress=compress)
        bound = opt.last_step.get("max_error_bound", 0.0)
        lossy = isinstance(spec, ncclz.Lossy) and compress
        if lossy != (bound > 0):
            failures.append(f"step {step}: bound {bound} but lossy={lossy}")
        errs = []
        for (pname, p), rp in zip(model.named_parameters(), ref_model.parameters()):
            err = float((p.detach().double() - rp.detach().double()).abs().max())
            errs.append(err)
            big = p.dim() >= 2 and p.numel() >= 1024
            scale = float(rp.detach().abs().max()) + 1e-3
            if lossy and big:
                tol = kw["lr"] * bound * (1 + 1e-5) + 1e-6 * scale
                if isinstance(pspec, ncclz.Lossy):
                    tol += pspec.bound * (1 + 1e-5)
            else:
                tol = 2e-6 * scale
            if not err <= tol:
                failures.append(f"step {step}: {pname} differs by {err:.3g} > {tol:.3g}")
        report["steps"].append(
            {
                "errors": errs,
                "bound": bound,
                "wire": opt.last_step.get("wire_bytes"),
                "raw": opt.last_step.get("raw_bytes"),
            }
        )
    report["param_hash"] = _hash(model.parameters())
    # the optimizer state is sharded: this rank's masters hold about 1/world of the elements
    report["shard_elements"] = sum(g.master.numel() for g in opt.groups)
    report["total_elements"] = sum(p.numel() for p in model.parameters())
    report["repr"] = repr(opt)
    return report


def worker(outdir, rank, world, store_path):
    import ncclz.torch as nt
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    comm = nt.communicator(timeout=WORKER_TIMEOUT_S)
    reports = {name: _run_scenario(name, comm, rank, world) for name in SCENARIOS}
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(reports, f)
    comm.close()
    dist.destroy_process_group()


# ---------------------------------------------------------------- test side
@pytest.fixture(scope="module")
def sharded_reports(tmp_path_factory):
    if not _has_runtime():
        pytest.skip("ncclz built without the collective runtime")
    tmp = tmp_path_factory.mktemp("sharded")
    env = dict(os.environ, OMP_NUM_THREADS="1", NCCLZ_TIMEOUT=str(WORKER_TIMEOUT_S))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "worker",
                str(tmp),
                str(r),
                str(WORLD),
                str(tmp / "store"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(WORLD)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=WORKER_TIMEOUT_S + 30)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} failed ({p.returncode}):\n{out}"
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sharded_matches_unsharded_step(sharded_reports, scenario):
    reports = [r[scenario] for r in sharded_reports]
    for rank, rep in enumerate(reports):
        assert not rep["failures"], f"rank {rank}: " + "; ".join(rep["failures"])
    for rep in reports[1:]:
        assert rep["param_hash"] == reports[0]["param_hash"], "ranks ended with different parameters"
    total = reports[0]["total_elements"]
    shards = [rep["shard_elements"] for rep in reports]
    assert all(s < total for s in shards) and sum(shards) >= total  # state sharded, padding only
    if scenario.startswith("sgd_lossy"):
        assert reports[0]["steps"][0]["bound"] > 0


def test_bad_configuration_errors():
    import ncclz.torch as nt

    class FakeComm:
        world_size, rank, last_stats = 1, 0, None

        def reduce_scatter(self, *a, **k):  # pragma: no cover - must not run
            raise AssertionError

        broadcast = all_gather = reduce_scatter

    comm = FakeComm()
    lin = torch.nn.Linear(4, 4)
    with pytest.raises(ncclz.InvalidArgumentError, match="ncclz.Communicator"):
        nt.ShardedOptimizer(lin.parameters(), torch.optim.SGD, object(), lr=0.1)
    with pytest.raises(ncclz.InvalidArgumentError, match="must be None"):
        nt.ShardedOptimizer(
            lin.parameters(), torch.optim.SGD, comm, compression="lossy", lr=0.1, broadcast_initial=False
        )
    with pytest.raises(ncclz.InvalidArgumentError, match="exact_compression"):
        nt.ShardedOptimizer(
            lin.parameters(),
            torch.optim.SGD,
            comm,
            exact_compression=ncclz.Lossy(abs=1e-3),
            broadcast_initial=False,
        )
    with pytest.raises(ncclz.InvalidArgumentError, match="floating-point"):

        class IntParam:  # int tensors cannot require grad in torch; model one that claims to
            dtype, requires_grad, device, shape = torch.int64, True, torch.device("cpu"), (4,)

            def numel(self):
                return 4

        nt.ShardedOptimizer([IntParam()], torch.optim.SGD, comm, broadcast_initial=False)
    with pytest.raises(ncclz.InvalidArgumentError, match="one dtype"):
        nt.ShardedOptimizer(
            [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))],
            torch.optim.SGD,
            comm,
            broadcast_initial=False,
        )
    with pytest.raises(ncclz.InvalidArgumentError, match="one parameter group"):
        nt.ShardedOptimizer([{"params": lin.parameters()}], torch.optim.SGD, comm, broadcast_initial=False)
    with pytest.raises(ncclz.InvalidArgumentError, match="single tensor"):
        nt.ShardedOptimizer(lin.weight, torch.optim.SGD, comm)
    with pytest.raises(ncclz.InvalidArgumentError, match="min_elements"):
        nt.ShardedOptimizer(
            lin.parameters(), torch.optim.SGD, comm, min_elements=1.5, broadcast_initial=False
        )


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
