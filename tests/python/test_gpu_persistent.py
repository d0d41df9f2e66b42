"""The persistent ring kernels (NCCLZ_PERSISTENT=1) with ranks as processes sharing GPU 0: device
FIFOs over CUDA IPC (NCCLZ_PERSISTENT_FIFOS=device, one abort word in /dev/shm) and host FIFOs with
proxies (host), against the call with the opt-in off (docs/GPU.md, "Persistent ring kernels in the
call path"). Rank program: _persistent_gpu_worker.py.

- 2 and 4 processes: every call's result bytes are the opt-in-off call's, on every rank, for both
  placements; last_stats says the call ran on the persistent ring with the FIFOs asked for;
- a rank killed (SIGKILL) while the others run a call on device FIFOs ends that call on every
  other rank with an error within seconds (the watching thread sees its connection close without
  a goodbye and sets the group's abort word), not a hang until the timeout.

Needs a CUDA GPU visible to PyTorch: skips without one, fails under NCCLZ_REQUIRE_GPU=1 (the fixture
of test_gpu.py). The kernels of different processes time-slice the GPU (no MPS here): slow, but
each makes progress.
"""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest
from test_faults import Job
from test_gpu import GPU_ENV, gpu  # noqa: F401 - the fixture

WORKER = Path(__file__).with_name("_persistent_gpu_worker.py")


def _job(tmp_path, name: str, scenario: str, n: int, **env) -> Job:
    """n processes of the worker over shared memory, all on GPU 0 (test_faults.Job)."""
    return Job(tmp_path, scenario, "shm", n=n, worker=WORKER, name=name, **GPU_ENV, **env)


def _calls(tmp_path, n, persistent, fifos):
    job = _job(tmp_path, f"calls-{n}-{persistent}-{fifos}", "calls", n, NCCLZ_PERSISTENT=str(persistent),
               NCCLZ_PERSISTENT_FIFOS=fifos)
    res = job.finish(timeout=300)
    assert sorted(res) == list(range(n)), job.logs()
    for p in job.procs:
        assert p.returncode == 0, job.logs()
    return job.out, res


@pytest.mark.parametrize("n", [2, 4])
def test_persistent_processes_match_the_opt_in_off_bits(gpu, tmp_path, n):  # noqa: F811 - the fixture
    off_dir, off = _calls(tmp_path, n, 0, "auto")
    for fifos in ("device", "host"):
        on_dir, on = _calls(tmp_path, n, 1, fifos)
        for r in range(n):
            for call in on[r]["calls"]:
                k = call["k"]
                assert call["persistent"], (fifos, r, call)
                assert call["device_fifos"] == (fifos == "device"), (fifos, r, call)
                assert not off[r]["calls"][k]["persistent"], off[r]["calls"][k]
                a = np.load(on_dir / f"rank{r}-{k}.npy")
                b = np.load(off_dir / f"rank{r}-{k}.npy")
                c = np.load(on_dir / f"rank0-{k}.npy")
                assert np.array_equal(a, b), f"{fifos}: rank {r}, call {call}: not the opt-in-off bits"
                assert np.array_equal(a, c), f"{fifos}: rank {r}, call {call}: ranks differ"


def test_persistent_killed_rank_ends_the_others(gpu, tmp_path):  # noqa: F811 - the fixture
    n = 3
    job = _job(tmp_path, "kill", "kill", n, NCCLZ_PERSISTENT="1", NCCLZ_PERSISTENT_FIFOS="device")
    res = job.finish(timeout=240)
    assert sorted(res) == list(range(n - 1)), job.logs()  # the killed rank wrote nothing
    assert job.procs[n - 1].returncode == -signal.SIGKILL, job.logs()
    t_kill = float((job.out / "ready").read_text())
    for r in range(n - 1):
        assert res[r]["first"]["kind"] == "returned" and res[r]["first"]["device_fifos"], res[r]
        last = res[r]["second"]
        assert last["kind"] != "returned", f"rank {r}: {res[r]['calls']} calls, all returned\n{job.logs()}"
        assert last["at"] - t_kill < 30.0, f"rank {r}: {last['at'] - t_kill:.1f} s (the timeout is 120 s)"
