"""Setup under faults, with real processes on this host (bounded: about a minute in all).

Two jobs on one port, impostor and idle connections, descriptor exhaustion in
a child with a lowered RLIMIT_NOFILE, ranks killed, stopped or dying early at
random points of setup on shared memory and sockets, and the rendezvous
progress messages. Every case ends with a correct result or a clear error on
every rank within the stated time, never a wrong sum, and leaves nothing in
/dev/shm. Ranks run tests/python/_fault_rank.py; the rules they check are in
cpp/src/bootstrap/tcp_bootstrap.cpp and docs/TRANSPORTS.md.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import ncclz
import pytest
from ncclz.run import free_port, job_tag

RANK_PROG = Path(__file__).with_name("_fault_rank.py")
RUN = [sys.executable, "-m", "ncclz.run"]
TRANSPORTS = ("shm", "socket")

# Variables that give a job its identity or change what these tests see.
_CLEARED = (
    "NCCLZ_TOKEN",
    "NCCLZ_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "NCCLZ_WAIT_REPORT",
    "NCCLZ_DEBUG",
    "NCCLZ_RUN_STATE_DIR",
)

needs_runtime = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)
pytestmark = needs_runtime


def rank_env(rank, n, port, transport, timeout, **extra):
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(n),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCLZ_TRANSPORT=transport,
        NCCLZ_TIMEOUT=f"{timeout:g}",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(
    outdir, rank, n, port, transport="shm", mode="calls", seconds=0.0, timeout=10.0, preexec=None, **extra
):
    return subprocess.Popen(
        [sys.executable, str(RANK_PROG), str(outdir), mode, str(seconds)],
        env=rank_env(rank, n, port, transport, timeout, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_ready(p, limit=30.0):
    """Waits for the rank's "ready" (ncclz imported)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        r, _, _ = select.select([p.stdout], [], [], 0.1)
        if r and "ready" in p.stdout.readline():
            return
        assert p.poll() is None, p.stderr.read()
    raise AssertionError("rank never got ready")


def finish(procs, limit):
    """Waits (at most `limit` s for all) and returns (stderr texts, wall seconds)."""
    t0 = time.monotonic()
    errs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(0.1, limit - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
            raise AssertionError(f"a rank did not end within {limit} s: {err}") from None
        errs.append(err)
    return errs, time.monotonic() - t0


def result(outdir, rank):
    path = Path(outdir) / f"rank{rank}.json"
    return json.loads(path.read_text()) if path.exists() else None


def wait_listening(port, limit=30.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError(f"nothing listens at port {port}")


def shm_names(prefix):
    return {os.path.basename(p) for p in glob.glob(f"/dev/shm/{prefix}*")}


def anonymous_prefix():
    """Segment names of jobs without a job id start with the tag of the empty id."""
    return "ncclz-j" + hashlib.sha256(b"").hexdigest()[:8]


# ---- two jobs on one port ------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_two_anonymous_jobs_on_one_port_never_mix(tmp_path, transport):
    """No token, no job id, one port: job B's ranks must not join job A silently.

    B's rank 0 cannot bind and says who holds the port; B's rank 1 claims a
    rank A already has: A cannot tell which claimant is real, so every rank
    of both jobs ends with an error naming the conflict. No sum is ever wrong.
    """
    before = shm_names(anonymous_prefix())
    port = free_port()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = [start(a_dir, r, 2, port, transport, seconds=6, timeout=5, FAULT_BASE=1) for r in range(2)]
    for p in a:
        wait_ready(p)
    wait_listening(port)
    time.sleep(0.5)
    b = [start(b_dir, r, 2, port, transport, seconds=6, timeout=5, FAULT_BASE=100) for r in range(2)]
    errs, _ = finish(a + b, 40)
    res = [result(a_dir, 0), result(a_dir, 1), result(b_dir, 0), result(b_dir, 1)]
    for i, r in enumerate(res):
        assert r is not None, errs[i]
        assert r["wrong"] == 0, r
        assert r["status"] == "error", (i, r)
    # Which rank of B arrives first decides the details, not the outcome: job A stops with an error
    # naming the conflict (a second rank 0, or rank 1 claimed twice); B's rank 0 either found the
    # port taken (and says who holds it: A's rank 0, or, where A was stopping during the probe, a
    # listener that did not answer within 2 s) or, once A had stopped, found its rank 1 gone (timeout);
    # B's rank 1 either heard of the conflict or found nobody at the port (timeout).
    conflict = ("claimed twice", "started as rank 0")
    assert any(c in res[0]["message"] for c in conflict), res[0]
    taken = "Address already in use" in res[2]["message"] and any(
        w in res[2]["message"] for w in ("already runs there", "does not answer an ncclz hello"))
    assert taken or "missing ranks: 1" in res[2]["message"], res[2]
    assert "claimed twice" in res[3]["message"] or f"127.0.0.1:{port}" in res[3]["message"], res[3]
    assert f"127.0.0.1:{port}" in res[0]["message"]
    assert shm_names(anonymous_prefix()) - before == set()


def test_jobs_with_their_own_tokens_never_meet(tmp_path):
    """Job B (another token) on job A's port: B fails at once, saying so; A's sums stay exact."""
    port = free_port()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = [start(a_dir, r, 2, port, seconds=3, timeout=10, NCCLZ_TOKEN="token-of-a") for r in range(2)]
    for p in a:
        wait_ready(p)
    wait_listening(port)
    time.sleep(0.3)
    t0 = time.monotonic()
    b = [start(b_dir, r, 2, port, timeout=10, NCCLZ_TOKEN="token-of-b") for r in range(2)]
    finish(b, 20)
    b_wall = time.monotonic() - t0
    errs_a, _ = finish(a, 30)
    for r in range(2):
        ra = result(a_dir, r)
        assert ra is not None and ra["status"] == "ok" and ra["wrong"] == 0 and ra["calls"] > 5, (
            ra,
            errs_a[r],
        )
    rb0, rb1 = result(b_dir, 0), result(b_dir, 1)
    assert "another NCCLZ_TOKEN" in rb0["message"], rb0
    assert "could not prove" in rb1["message"], rb1
    assert b_wall < 8, f"job B took {b_wall:.1f} s to fail"
    assert "does not hold this job's token" in errs_a[0]  # logged on A's rank 0 (WARN)


# ---- hostile connections -----------------------------------------------------------


def test_impostor_and_idle_connections_never_delay_or_join(tmp_path):
    """200 idle connections and an impostor hello for rank 1 (no token) on the port, NCCLZ_TIMEOUT=2:
    the real rank 1 joins (each idle connection used to hold setup for 5 s) and the sums are exact."""
    port = free_port()
    r0 = start(tmp_path, 0, 2, port, seconds=0.5, timeout=2, NCCLZ_TOKEN="tok")
    wait_ready(r0)
    wait_listening(port)
    idle = []
    for _ in range(200):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        idle.append(s)
    # An impostor's hello (protocol v2 header, rank 1 of 2, no job id) that never proves anything.
    imp = socket.create_connection(("127.0.0.1", port))
    body = (1).to_bytes(4, "little") + (2).to_bytes(4, "little") + (0).to_bytes(4, "little")
    body += (0).to_bytes(4, "little") + secrets.token_bytes(16)
    imp.sendall(b"NCZB" + (2).to_bytes(4, "little") + len(body).to_bytes(4, "little") + body)
    r1 = start(tmp_path, 1, 2, port, seconds=0.5, timeout=2, NCCLZ_TOKEN="tok")
    errs, _ = finish([r0, r1], 30)
    for s in idle + [imp]:
        s.close()
    for r in range(2):
        res = result(tmp_path, r)
        assert res is not None and res["status"] == "ok" and res["wrong"] == 0, (res, errs[r])


def test_descriptor_exhaustion_sheds_connections_and_serves_ranks(tmp_path):
    """Rank 0 limited to 96 descriptors (soft and hard), 1,100 connections flood its port: it
    used to die with "accept: Too many open files"; now it sheds them and the job completes."""

    port = free_port()
    r0 = start(tmp_path, 0, 2, port, transport="socket", seconds=0.3, timeout=20, FAULT_NOFILE=96)
    wait_ready(r0)
    wait_listening(port)
    flood = []
    for _ in range(1100):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        flood.append(s)
    time.sleep(0.5)
    r1 = start(tmp_path, 1, 2, port, transport="socket", seconds=0.3, timeout=20)
    errs, _ = finish([r0, r1], 60)
    for s in flood:
        s.close()
    for r in range(2):
        res = result(tmp_path, r)
        assert res is not None and res["status"] == "ok" and res["wrong"] == 0, (res, errs[r])
    assert "out of file descriptors" in errs[0], errs[0]


# ---- kills, stops and early deaths during setup -------------------------------------------


@pytest.mark.parametrize("fault", ("kill", "stop"))
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_rank_killed_or_stopped_at_a_random_point_of_setup(tmp_path, transport, fault):
    """3 ranks; one of them SIGKILLed or SIGSTOPped 0-150 ms after ncclz is imported (before,
    during or after the rendezvous and the transport setup; setup takes tens of ms). Every other
    rank ends, with exact sums or an error, within the timeout (3-4 s) plus a margin, and once the
    victim is gone /dev/shm holds nothing of the job."""
    rng = random.Random(f"{transport}-{fault}")
    trials, timeout = (5, 4) if fault == "kill" else (3, 3)
    for trial in range(trials):
        d = tmp_path / f"t{trial}"
        d.mkdir()
        job = secrets.token_hex(8)
        port = free_port()
        victim = rng.randrange(3)
        delay = rng.uniform(0.0, 0.15)
        procs = [
            start(d, r, 3, port, transport, seconds=0.3, timeout=timeout, NCCLZ_TOKEN="tok", NCCLZ_JOB_ID=job)
            for r in range(3)
        ]
        for p in procs:
            wait_ready(p)
        time.sleep(delay)
        os.killpg(procs[victim].pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        others = [p for r, p in enumerate(procs) if r != victim]
        errs, _ = finish(others, 3 * timeout)
        os.killpg(procs[victim].pid, signal.SIGKILL)
        procs[victim].communicate()
        for r in range(3):
            if r == victim:
                continue
            res = result(d, r)
            assert res is not None, (trial, r, errs)
            assert res["wrong"] == 0, res
            if res["status"] == "error":
                assert res["type"] in ("RemoteError", "TimeoutError", "AbortedError"), res
        leftovers = shm_names(f"ncclz-j{job_tag(job)}")
        assert leftovers == set(), (trial, victim, delay, leftovers)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_rank_dying_right_after_init_is_noticed_at_the_first_call(tmp_path, transport):
    """A rank that exits (as a crash) right after init(): the others' first call raises a
    RemoteError naming it within seconds, not at the 20 s timeout (on shm its pid used to be
    gone at the first liveness check and never checked again)."""
    port = free_port()
    job = secrets.token_hex(8)
    procs = [
        start(
            tmp_path,
            r,
            3,
            port,
            transport,
            mode="init_exit" if r == 2 else "calls",
            timeout=20,
            NCCLZ_JOB_ID=job,
        )
        for r in range(3)
    ]
    errs, wall = finish(procs, 30)
    assert wall < 15, wall
    for r in (0, 1):
        res = result(tmp_path, r)
        assert res is not None and res["status"] == "error", (res, errs[r])
        assert res["wall"] < 10, res
        assert "rank 2" in res["message"] or "rank 0" in res["message"], res
    if transport == "shm":
        assert any("died" in result(tmp_path, r)["message"] for r in (0, 1))
    assert shm_names(f"ncclz-j{job_tag(job)}") == set()


def test_launcher_names_the_stopped_rank(tmp_path):
    """ncclz-run, rank 1 SIGSTOPped before setup, NCCLZ_TIMEOUT=3: the others time out
    waiting for it, and ncclz-run blames rank 1 (it used to blame a rank that timed out)."""
    p = subprocess.Popen(
        RUN
        + [
            "-n",
            "3",
            "--timeout",
            "3",
            "--grace",
            "1",
            sys.executable,
            str(RANK_PROG),
            str(tmp_path),
            "calls",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in _CLEARED},
    )
    # Find rank 1's process once it is ready.
    seen = set()
    end = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < end:
        line = p.stdout.readline()
        if "ready" in line:
            seen.add(line.split("]")[0])
    assert len(seen) == 3
    rank1 = None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"_fault_rank.py" in cmd and b"RANK=1" in env and str(tmp_path).encode() in cmd:
            rank1 = int(pid)
    assert rank1 is not None
    os.kill(rank1, signal.SIGSTOP)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert f"rank 1 (pid {rank1}) is stopped" in err, err


def test_launcher_removes_what_killed_ranks_left_in_dev_shm(tmp_path):
    """A rank that made a segment with its run's job tag and was SIGKILLed: ncclz-run removes it."""
    code = (
        "import os, hashlib, signal\n"
        "tag = hashlib.sha256(('NCCLZ_JOB_ID=' + os.environ['NCCLZ_JOB_ID']).encode()).hexdigest()[:8]\n"
        "open(f'/dev/shm/ncclz-j{tag}-left-by-rank' + os.environ['RANK'], 'w').close()\n"
        "print(tag, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    p = subprocess.run(
        [*RUN, "-n", "2", sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    tag = p.stdout.split()[-1]
    assert p.returncode == 128 + signal.SIGKILL
    assert shm_names(f"ncclz-j{tag}") == set()
    assert "removed 2 shared-memory segment(s)" in p.stderr, p.stderr


# ---- rendezvous messages ------------------------------------------------------


def test_waiting_ranks_say_what_they_wait_for(tmp_path):
    """Ranks started with different MASTER_PORTs used to wait silently for the whole timeout.
    Now, after NCCLZ_WAIT_REPORT seconds, rank 0 names the missing rank and rank 1 says that
    nothing answers at its MASTER_ADDR:MASTER_PORT, both through the default (WARN) log,
    before the timeout's error."""
    port0, port1 = free_port(), free_port()
    r0 = start(tmp_path, 0, 2, port0, timeout=4, NCCLZ_WAIT_REPORT=1)
    r1 = start(tmp_path, 1, 2, port1, timeout=4, NCCLZ_WAIT_REPORT=1)
    errs, _ = finish([r0, r1], 30)
    # (The rank ends at its Timeout: every line in its stderr came before.)
    assert "rank 0 has waited" in errs[0] and "missing ranks 1 (joined: 0)" in errs[0], errs[0]
    assert "rank 1 has waited" in errs[1] and f"MASTER_ADDR:MASTER_PORT 127.0.0.1:{port1}" in errs[1], errs[1]
    assert "MASTER_ADDR, MASTER_PORT, WORLD_SIZE (here 2) and NCCLZ_TOKEN" in errs[1], errs[1]
    assert result(tmp_path, 0)["type"] == "TimeoutError"
    assert "missing ranks: 1" in result(tmp_path, 0)["message"]
