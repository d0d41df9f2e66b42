"""ncclz.torch.ddp_hook against uncompressed DDP averaging, on 2 and 4 CPU processes.

Each test starts WORLD processes of this very file (``python test_torch_hook.py
worker SCENARIO RANK WORLD STORE OUTDIR``) with a subprocess timeout. Every
rank joins a gloo process group through a FileStore (DDP's group), makes its
ncclz communicator through the same store (``ncclz.torch.communicator()``),
computes the exact fp64 average of all ranks' gradients itself (gloo
all_gather of the local gradients of a plain copy of the model), runs DDP with
the hook, and checks every gradient element against it: lossy tensors within
the E the calls reported, exact tensors to float rounding. It writes its
parameters' and gradients' hashes so the test can check all ranks agree
bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
ncclz = pytest.importorskip("ncclz")

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_TIMEOUT_S = 60


def _has_runtime() -> bool:
    try:
        import ncclz.comm  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


needs_runtime = pytest.mark.skipif(not _has_runtime(), reason="ncclz built without the collective runtime")


# ---------------------------------------------------------------- worker side
def _model(seed: int = 0):
    torch.manual_seed(seed)
    # fc1.weight 2048 (lossy), fc1.bias 64 (1-D: exact), fc2.weight 640 (< min_elements: exact),
    # fc2.bias 10, conv weight 8*1*3*3=72 (small: exact), fc3.weight 64*64 = 4096 (lossy)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 10),
    )


def _batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 32, generator=g) * (1 + rank)
    y = torch.randint(0, 10, (16,), generator=g)
    return x, y


def _exact_avg_grads(model, rank, world, step):
    """fp64 average over ranks of the local gradients of a plain copy of ``model``."""
    import copy

    import torch.distributed as dist

    ref = copy.deepcopy(model)
    x, y = _batch(rank, step)
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    out = []
    for p in ref.parameters():
        parts = [torch.empty_like(p.grad) for _ in range(world)]
        dist.all_gather(parts, p.grad.contiguous())
        out.append(torch.stack(parts).double().mean(0))
    return out


def _hash(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


SPECS = {
    "none": None,
    "lossless": "Lossless",
    "lossy_rel": ("rel", 1e-2),
    "lossy_abs": ("abs", 1e-4),
    "ef": ("rel", 1e-2),
    "disabled": ("rel", 1e-2),
    "overlap": ("rel", 1e-2),  # HookState(overlap=True): collectives on the background thread
}
SCENARIOS = tuple(SPECS)
STEPS = 3


def _spec(scenario):
    v = SPECS[scenario]
    if v is None:
        return None
    if v == "Lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(**{v[0]: v[1]})


def _run_scenario(scenario, comm, rank, world):
    """One DDP model with the hook for STEPS steps; returns the report (failed checks listed, not raised,
    so that every rank keeps making the same collective calls)."""
    import ncclz.torch as nt
    from torch.nn.parallel import DistributedDataParallel as DDP

    spec = _spec(scenario)
    model = _model()
    # Small buckets (about 4 KB) so the model spans several buckets, some mixed.
    ddp = DDP(model, bucket_cap_mb=0.004)
    state = nt.HookState(
        comm,
        compression=spec,
        min_elements=1024,
        error_feedback=(scenario == "ef"),
        overlap=(scenario == "overlap"),
    )
    ddp.register_comm_hook(state, nt.ddp_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    names = [n for n, _ in model.named_parameters()]
    report = {"steps": [], "failures": []}

    def check(ok, *what):
        if not ok:
            report["failures"].append(" ".join(str(w) for w in what))

    lossy_spec = isinstance(spec, ncclz.Lossy) and scenario != "disabled"
    for step in range(STEPS):
        ref = _exact_avg_grads(model, rank, world, step)
        opt.zero_grad()
        x, y = _batch(rank, step)
        if scenario == "disabled":
            with state.disable():
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
        else:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        st = state.last_step
        check(st is not None and st.step == step, "step stats", st, step)
        bound = st.max_error_bound
        check((bound > 0) == lossy_spec, "bound", bound)
        if scenario == "lossy_abs":
            check(bound <= 1e-4 * (1 + 1e-6), "abs bound", bound)
        errs = {}
        for name, p, r in zip(names, model.parameters(), ref):
            err = float((p.grad.double() - r).abs().max())
            errs[name] = err
            lossy_tensor = lossy_spec and p.dim() >= 2 and p.numel() >= 1024
            if lossy_tensor and scenario != "ef":
                check(err <= bound * (1 + 1e-6) + 1e-12, "step", step, name, "error", err, "> bound", bound)
            elif lossy_tensor:  # error feedback: the input carries last step's residual (< bound per rank)
                check(err <= 3 * bound + 1e-12, "step", step, name, "error", err, "> 3*bound", bound)
            else:
                tol = 1e-6 * float(r.abs().max()) + 1e-9
                check(err <= tol, "step", step, name, "exact tensor error", err, "> tol", tol)
        report["steps"].append(
            {
                "errors": errs,
                "bound": bound,
                "raw_bytes": st.raw_bytes,
                "wire_bytes": st.wire_bytes,
                "lossy_elements": st.lossy_elements,
                "exact_elements": st.exact_elements,
                "grad_hash": _hash([p.grad for p in model.parameters()]),
            }
        )
        opt.step()
    report["param_hash"] = _hash(model.parameters())
    report["iteration"] = state.iteration
    state.close()
    return report


def worker(scenarios: str, rank: int, world: int, store_path: str, outdir: str) -> None:
    import ncclz.torch as nt
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    comm = nt.communicator(timeout=WORKER_TIMEOUT_S)
    reports = {sc: _run_scenario(sc, comm, rank, world) for sc in scenarios.split(",")}
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(reports, f)
    comm.close()
    dist.destroy_process_group()


# ---------------------------------------------------------------- test side
def _run(tmp_path, scenarios: str, world: int) -> list:
    # policy off: the hook's calls run the modes it asks for (the default policy would run this small
    # model's buckets, latency-bound, uncompressed)
    env = dict(os.environ, OMP_NUM_THREADS="1", NCCLZ_TIMEOUT=str(WORKER_TIMEOUT_S), NCCLZ_POLICY="off")
    store = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "worker",
                scenarios,
                str(r),
                str(world),
                str(store),
                str(tmp_path),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=WORKER_TIMEOUT_S + 30)
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} failed ({p.returncode}):\n{out}"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


WORLD = int(os.environ.get("NCCLZ_TEST_TORCH_WORLD", "2"))


@pytest.fixture(scope="module")
def hook_reports(tmp_path_factory):
    """All scenarios in one launch of WORLD ranks (starting torch and DDP costs seconds per process)."""
    if not _has_runtime():
        pytest.skip("ncclz built without the collective runtime")
    reports = _run(tmp_path_factory.mktemp("hook"), ",".join(SCENARIOS), WORLD)
    if os.environ.get("NCCLZ_TEST_DUMP"):
        print(json.dumps(reports[0], indent=1))
    return reports


@needs_runtime
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_hook_matches_exact_average(hook_reports, scenario):
    reports = [r[scenario] for r in hook_reports]
    for rank, rep in enumerate(reports):
        assert not rep["failures"], f"rank {rank}: " + "; ".join(rep["failures"])
    # identical gradients and parameters on every rank, every step
    for rep in reports[1:]:
        assert rep["param_hash"] == reports[0]["param_hash"]
        for a, b in zip(rep["steps"], reports[0]["steps"]):
            assert a["grad_hash"] == b["grad_hash"]
    assert reports[0]["iteration"] == STEPS
    s = reports[0]["steps"][-1]
    if scenario in ("lossy_rel", "lossy_abs", "ef", "overlap"):
        assert s["lossy_elements"] == 2048 + 4096
        assert s["exact_elements"] == 64 + 64 + 640 + 10
        assert max(s["errors"].values()) > 0  # the lossy path really ran
    else:
        assert s["exact_elements"] == 2048 + 4096 + 64 + 64 + 640 + 10
    if scenario in ("lossy_rel", "overlap"):
        assert s["wire_bytes"] < s["raw_bytes"], s
    if scenario in ("lossless", "disabled"):  # bit-identical to no compression
        assert reports[0]["param_hash"] == hook_reports[0]["none"]["param_hash"]
    if scenario == "overlap":  # same specs and inputs as lossy_rel: the same results
        same = [r["lossy_rel"] for r in hook_reports]
        assert reports[0]["param_hash"] == same[0]["param_hash"]


# ---------------------------------------------------------------- in-process checks
class _FakeComm:
    """Stands in for a communicator where a test must fail before any communication."""

    world_size = 1
    rank = 0
    last_stats = None

    def all_reduce(self, x, op="sum", compression=None, out=None):  # pragma: no cover - must not run
        raise AssertionError("no communication expected")


class _FakeBucket:
    def __init__(self, buf):
        self._buf = buf

    def buffer(self):
        return self._buf

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        return [self._buf]

    def parameters(self):
        return [self._buf]


def test_bad_configuration_errors():
    import ncclz.torch as nt

    comm = _FakeComm()
    with pytest.raises(ncclz.InvalidArgumentError, match="ncclz.Communicator"):
        nt.HookState(object())
    with pytest.raises(ncclz.InvalidArgumentError, match="strings are not accepted"):
        nt.HookState(comm, compression="lossy")
    with pytest.raises(ncclz.InvalidArgumentError, match="Lossy\\(rel=0.001\\)"):
        nt.HookState(comm, compression=0.001)
    with pytest.raises(ncclz.InvalidArgumentError, match="an instance is needed"):
        nt.HookState(comm, compression=ncclz.Lossless)
    with pytest.raises(ncclz.InvalidArgumentError, match="min_elements"):
        nt.HookState(comm, min_elements=-1)
    with pytest.raises(ncclz.InvalidArgumentError, match="error_feedback"):
        nt.HookState(comm, compression=None, error_feedback=True)
    with pytest.raises(ncclz.InvalidArgumentError, match="exact_compression"):
        nt.HookState(comm, exact_compression=ncclz.Lossy(rel=1e-3))
    with pytest.raises(ncclz.InvalidArgumentError):
        ncclz.Lossy(rel=-1)
    state = nt.HookState(comm, compression=ncclz.Lossy(rel=1e-3))
    with pytest.raises(ncclz.InvalidArgumentError, match="lossy compression .* needs float"):
        nt.ddp_hook(state, _FakeBucket(torch.zeros(4096, dtype=torch.int64)))
    with pytest.raises(ncclz.InvalidArgumentError, match="HookState"):
        nt.ddp_hook(object(), _FakeBucket(torch.zeros(4)))


def test_disable_context_restores():
    import ncclz.torch as nt

    state = nt.HookState(_FakeComm())
    assert state.enabled
    with state.disable():
        assert not state.enabled
    assert state.enabled
    assert "Lossy(rel=0.001)" in repr(state)


def test_layout_runs():
    from ncclz.torch._layout import runs

    r = runs(10, [(0, 3, True), (3, 2, False), (5, 5, True)])
    assert [(x.start, x.count, x.lossy) for x in r] == [(0, 3, True), (3, 2, False), (5, 5, True)]
    r = runs(10, [(0, 3, True), (5, 5, True)])  # a gap goes exact
    assert [(x.start, x.count, x.lossy) for x in r] == [(0, 3, True), (3, 2, False), (5, 5, True)]
    assert runs(0, []) == []


@needs_runtime
def test_register_with_ddp_single_process(tmp_path):
    """The hook's signature passes DDP's checks; a 1-rank job runs end to end in this process."""
    import ncclz.torch as nt
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    store = dist.FileStore(str(tmp_path / "store1"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        comm = nt.communicator(timeout=20)
        model = _model()
        ddp = DDP(model)
        state = nt.HookState(comm, compression=ncclz.Lossy(rel=1e-3))
        ddp.register_comm_hook(state, nt.ddp_hook)
        x, y = _batch(0, 0)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        assert state.iteration == 1 and state.last_step.calls >= 1
        comm.close()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
