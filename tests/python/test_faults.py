"""Fault suite (the CI part; the long chaos run is bench/chaos.py): real processes on shared memory
and sockets, each case ending with a correct result or a clear error on every rank within a stated
bound, far below the timeout where the timeout is not the point.

- abort() on one rank reaches the peers blocked in a call (AbortedError naming the rank and why);
- SIGINT to a rank blocked in a call raises KeyboardInterrupt there within 2 s, leaves its
  communicator aborted, and its peer's next call fails with AbortedError naming it;
- a rank killed (SIGKILL) mid-call is an error on the others within seconds (also inside a group
  whose data moves on lanes); a stopped one (SIGSTOP) a TimeoutError after NCCLZ_TIMEOUT naming it;
- a call over a slow link that takes several times NCCLZ_TIMEOUT succeeds (the timeout bounds
  each wait without progress, not the call);
- two threads calling one communicator at once never return a wrong result: the misuse is an
  InvalidArgumentError naming both calls; threads taking turns in a fixed order are fine;
- an exact fallback reports the bound it achieved, and meets it.

Rank programs: tests/python/_fault_worker.py.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import ncclz
import pytest

WORKER = Path(__file__).with_name("_fault_worker.py")

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """n rank processes running one scenario of the worker."""

    def __init__(self, tmp_path, scenario, transport, n=2, timeout="120", worker=WORKER, name=None, **env):
        """`worker`: the rank program (another test's worker takes the same arguments); `name`: the
        output folder under tmp_path (default: scenario-transport)."""
        self.out = tmp_path / (name or f"{scenario}-{transport}")
        self.out.mkdir()
        port, token = free_port(), secrets.token_hex(8)
        base = dict(os.environ)
        for k in ("NCCLZ_TEST_CORRUPT", "NCCLZ_SOCKET_THROTTLE_GBPS", "NCCLZ_CHECKSUM"):
            base.pop(k, None)
        base.update(NCCLZ_TIMEOUT=timeout, NCCLZ_POLICY="off", PYTHONUNBUFFERED="1", NCCLZ_TRANSPORT=transport,
                    WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCLZ_TOKEN=token, **env)
        self.n = n
        self.procs = [
            subprocess.Popen([sys.executable, str(worker), str(self.out), scenario],
                             env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for r in range(n)
        ]

    def wait_file(self, name, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not (self.out / name).exists():
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in self.procs):
                self.kill()
                pytest.fail(f"{name} did not appear\n{self.logs()}")
            time.sleep(0.02)
        time.sleep(0.3)  # the rank is now inside its call

    def finish(self, timeout=90.0, expect_exit=None):
        """Waits for every process; returns the results of the ranks that wrote one."""
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"ranks did not finish in {timeout:g} s\n{self.logs()}")
        res = {}
        for r in range(self.n):
            f = self.out / f"rank{r}.json"
            if f.exists():
                res[r] = json.loads(f.read_text())
        return res

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()

    def logs(self):
        parts = []
        for i, p in enumerate(self.procs):
            text = p.stdout.read().decode(errors="replace") if p.poll() is not None and p.stdout else ""
            parts.append(f"--- rank {i} (exit {p.returncode}) ---\n{text[-3000:]}")
        return "\n".join(parts)


TRANSPORTS = ["shm", "socket"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_abort_reaches_peers_blocked_in_a_call(tmp_path, transport):
    job = Job(tmp_path, "abort", transport, n=3)
    res = job.finish()
    assert sorted(res) == [0, 1, 2], job.logs()
    t_abort = res[0]["abort_at"]
    for r in (1, 2):
        call = res[r]["call"]
        assert call["kind"] == "AbortedError", f"rank {r}: {call}\n{job.logs()}"
        assert "rank 0 aborted the communicator: the fault test stops the job" in call["message"], call
        assert call["at"] - t_abort < 5.0, f"rank {r} heard of the abort after {call['at'] - t_abort:.2f} s"
        assert res[r]["second"]["kind"] == "AbortedError", res[r]
    assert res[0]["second"]["kind"] == "AbortedError", res[0]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sigint_interrupts_a_blocked_call(tmp_path, transport):
    job = Job(tmp_path, "sigint", transport, n=2)
    job.wait_file("blocked")
    t_kill = time.monotonic()
    job.procs[1].send_signal(signal.SIGINT)
    res = job.finish()
    assert sorted(res) == [0, 1], job.logs()
    call = res[1]["call"]
    assert call["kind"] == "KeyboardInterrupt", f"{call}\n{job.logs()}"
    assert call["at"] - t_kill < 2.0, f"KeyboardInterrupt {call['at'] - t_kill:.2f} s after SIGINT"
    assert res[1]["second"]["kind"] == "AbortedError", res[1]  # the communicator is aborted
    peer = res[0]["call"]
    assert peer["kind"] == "AbortedError", peer
    assert "rank 1 aborted the communicator" in peer["message"] and "KeyboardInterrupt" in peer["message"], peer


def assert_the_others_failed_soon(job, res, t_kill):
    """Ranks 0 and 1 of a job whose rank 2 was killed at t_kill: each call failed (RemoteError or
    AbortedError) within 10 s, far below the 120 s timeout."""
    assert sorted(res) == [0, 1], job.logs()
    for r in (0, 1):
        call = res[r]["call"]
        assert call["kind"] in ("RemoteError", "AbortedError"), f"rank {r}: {call}\n{job.logs()}"
        assert call["at"] - t_kill < 10.0, f"rank {r}: {call['at'] - t_kill:.2f} s"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_killed_rank_is_an_error_on_the_others_within_seconds(tmp_path, transport):
    job = Job(tmp_path, "kill", transport, n=3)
    job.wait_file("blocked")
    t_kill = time.monotonic()
    job.procs[2].send_signal(signal.SIGKILL)
    res = job.finish()
    assert_the_others_failed_soon(job, res, t_kill)
    # the rank that waited on the dead one names it; the other hears from that rank
    assert any("rank 2" in res[r]["call"]["message"] for r in (0, 1)), res


def test_rank_killed_inside_a_group_is_an_error_on_the_others_within_seconds(tmp_path):
    """A group whose data moves on lanes (both neighbours, 4 MiB of noise each way, lossy, over sockets
    paced to 0.02 Gbit/s: about 1.3 s of data a rank): the rank killed while the data moves is an error
    on the others within seconds, never a hang."""
    job = Job(tmp_path, "kill_group", "socket", n=3, NCCLZ_SOCKET_THROTTLE_GBPS="0.02")
    job.wait_file("blocked")
    t_kill = time.monotonic()
    job.procs[2].send_signal(signal.SIGKILL)
    res = job.finish()
    assert_the_others_failed_soon(job, res, t_kill)


def test_stopped_rank_is_a_timeout_naming_it(tmp_path):
    job = Job(tmp_path, "kill", "shm", n=3, timeout="2")
    job.wait_file("blocked")
    job.procs[2].send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while not all((job.out / f"rank{r}.json").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.05)
    finally:
        job.procs[2].send_signal(signal.SIGKILL)
        job.procs[2].send_signal(signal.SIGCONT)
    res = job.finish()
    kinds = sorted(res[r]["call"]["kind"] for r in (0, 1))
    assert "TimeoutError" in kinds and set(kinds) <= {"TimeoutError", "AbortedError"}, res
    timed_out = next(res[r]["call"] for r in (0, 1) if res[r]["call"]["kind"] == "TimeoutError")
    assert "peer rank 2" in timed_out["message"] and "no progress for" in timed_out["message"], timed_out


def test_slow_link_call_longer_than_the_timeout_succeeds(tmp_path):
    # 2 MiB per rank at 0.004 Gbit/s (0.5 MB/s): the call takes ~4 s, 4x the 1 s timeout, and
    # each slot several hundred ms; only a wait with no bytes moving for 1 s would time out.
    job = Job(tmp_path, "slow", "socket", n=2, timeout="1", NCCLZ_SOCKET_THROTTLE_GBPS="0.004")
    res = job.finish(timeout=120)
    assert sorted(res) == [0, 1], job.logs()
    for r in (0, 1):
        assert res[r]["call"] == {**res[r]["call"], "kind": "returned", "value": True}, res[r]
        assert res[r]["wall_s"] > 2.0, res[r]  # the call really outlived the timeout


def test_two_threads_at_once_never_mix_calls(tmp_path):
    job = Job(tmp_path, "threads", "shm", n=2)
    res = job.finish()
    assert sorted(res) == [0, 1], job.logs()
    misuse = []
    for r in (0, 1):
        for t, calls in res[r]["threads"].items():
            for c in calls:
                assert c["kind"] != "returned" or c["value"] is True, f"rank {r} thread {t}: wrong result"
                assert c["kind"] in ("returned", "InvalidArgumentError", "AbortedError", "RemoteError"), c
                if c["kind"] == "InvalidArgumentError":
                    misuse.append(c["message"])
    # Calls that overlapped on a rank are refused there (InvalidArgumentError naming both); calls
    # that did not overlap but paired up differently across ranks fail as mismatched
    # (RemoteError); which of the two happens depends on the threads' timing.
    told = [c for r in (0, 1) for calls in res[r]["threads"].values() for c in calls if c["kind"] != "returned"]
    assert told, res  # the two threads' calls cannot all pair up: someone was told
    for m in misuse:
        assert "two threads called the communicator at once" in m, m
        assert m.count("all_reduce(count=100") == 2, m  # both calls named (counts 1000 and 1001)


def test_threads_taking_turns_and_the_achieved_bound(tmp_path):
    job = Job(tmp_path, "turns", "shm", n=2)
    res = job.finish()
    assert sorted(res) == [0, 1], job.logs()
    for r in (0, 1):
        for t, calls in res[r]["threads"].items():
            assert len(calls) == 20 and all(c["kind"] == "returned" and c["value"] for c in calls), (r, t, calls)
        b = res[r]["bound"]
        assert b["exact_fallback"] and b["requested_bound"] == 1e-12, b
        assert b["error_bound"] > 1e-12, b  # float32's rounding of the sum, not the request
        assert b["max_err"] <= b["error_bound"], b


class _PersistentStore:
    """A store that outlives its job (like a FileStore or a long-lived TCPStore): set/get/add over a
    dict that the next job's store object shares."""

    def __init__(self, data):
        self.data = data

    def set(self, key, value):
        self.data[key] = bytes(value)

    def get(self, key):  # blocks until the key is set, as torch's stores do
        deadline = time.monotonic() + 30
        while key not in self.data and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.data[key]

    def add(self, key, n):
        self.data[key] = str(int(self.data.get(key, b"0")) + n).encode()
        return int(self.data[key])


def test_a_job_recreated_on_a_persistent_store_takes_fresh_keys(monkeypatch):
    """Two jobs, one after the other, on one persistent store, each rank a thread (in-process
    transport): the second job's ranks must not read the first job's bootstrap id. Each job starts
    with a fresh process counter, as a new process would."""
    import itertools
    import threading

    import numpy as np

    data = {}
    sums = {}
    for job in (1, 2):
        monkeypatch.setattr(ncclz.store, "_sequence", itertools.count())
        store = _PersistentStore(data)
        errors = []

        def rank(r, job=job, store=store, errors=errors):
            try:
                with ncclz.Communicator(rank=r, world_size=2, store=store, transport="inproc", timeout=30) as c:
                    x = np.full(8, float(10 * job + r), np.float32)
                    c.all_reduce(x, policy="off")
                    sums[(job, r)] = float(x[0])
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
    ids = sorted(k for k in data if not k.startswith("ncclz/unique_id/count/"))
    assert ids == ["ncclz/unique_id/0", "ncclz/unique_id/1"], ids
    assert data["ncclz/unique_id/0"] != data["ncclz/unique_id/1"]
    assert sums == {(1, 0): 21.0, (1, 1): 21.0, (2, 0): 41.0, (2, 1): 41.0}, sums


def test_chaos_harness_on_hierarchical_layouts(tmp_path):
    """bench/chaos.py --topo, two short episodes (no fault, a killed rank) on a pretend 2x2 / 2x3 /
    3x2 layout: every checked result within its guarantee, no hang, no leak, every rank's ending
    clear; and its option checks."""
    chaos = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(chaos), "--topo", "--episodes", "2", "--seed", "3", "--faults", "none,kill",
                        "--workdir", str(tmp_path / "w"), "--out", str(out)],
                       check=False, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    total = d["total"]
    assert total["topo"] and total["episodes"] == 2
    assert total["calls"] > 0 and total["returned"] > 0
    for k in ("silent_wrong", "hangs", "leaked_shm", "unclear", "slow_link_errors"):
        assert total[k] == 0, (k, total)
    for e in d["episodes"]:
        h, l = (int(v) for v in e["layout"].split("x"))
        assert (h, l) in [(2, 2), (2, 3), (3, 2)] and e["ranks"] == h * l, e
        assert e["fault"] in ("none", "kill")
        assert any(c["algo"] == "hierarchical" for c in e["plan"]["calls"]), e["plan"]
    for bad, what in ((["--faults", "meteor"], "unknown faults"), (["--topo", "--lab"], "exclusive")):
        r = subprocess.run([sys.executable, str(chaos), "--episodes", "1", *bad], check=False, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and what in r.stderr, r.stderr
