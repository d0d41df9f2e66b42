"""ncclz-run (python -m ncclz.run) and ncclz-demo, with real processes and bounded time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ncclz
import pytest

WORKERS = Path(__file__).with_name("_workers.py")
RUN = [sys.executable, "-m", "ncclz.run"]

needs_runtime = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)


def launch(args, timeout=60, **kw):
    return subprocess.run(
        RUN + list(args), check=False, capture_output=True, text=True, timeout=timeout, **kw
    )


def test_sets_the_environment_and_prefixes_lines():
    code = (
        "import os; print(' '.join(os.environ[k] for k in "
        "('RANK','WORLD_SIZE','LOCAL_RANK','MASTER_ADDR','MASTER_PORT','NCCLZ_TOKEN')))"
    )
    p = launch(["-n", "3", sys.executable, "-c", code])
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.splitlines())
    assert [ln.split("] ")[0] for ln in lines] == ["[rank 0", "[rank 1", "[rank 2"]
    fields = [ln.split("] ", 1)[1].split() for ln in lines]
    assert [f[:3] for f in fields] == [[str(r), "3", str(r)] for r in range(3)]
    assert len({f[4] for f in fields}) == 1 and int(fields[0][4]) > 0  # one port
    assert len({f[5] for f in fields}) == 1 and len(fields[0][5]) >= 16  # one random token


def test_a_reader_that_goes_away_stops_nothing(tmp_path):
    """`ncclz-run ... | head`: the ranks run to the end (their pipes keep draining), the launcher exits 0
    and prints no BrokenPipeError."""
    code = ("import os, sys\nfor i in range(3000): print(i, 'x' * 100)\n"
            f"open(os.path.join({str(tmp_path)!r}, 'done' + os.environ['RANK']), 'w').close()")
    p = subprocess.Popen(RUN + ["-n", "2", sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()  # the reader goes away after one line
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()
    assert b"BrokenPipe" not in err, err.decode()
    assert all((tmp_path / f"done{r}").exists() for r in range(2)), list(tmp_path.iterdir())


def test_thread_pools_default_to_a_share_of_the_cpus_unless_set():
    code = "import os; print(os.environ['OMP_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    p = launch(["-n", "2", sys.executable, "-c", code], env=env)
    assert p.returncode == 0, p.stderr
    want = str(max(1, (os.cpu_count() or 1) // 2))
    assert [ln.split("] ", 1)[1] for ln in p.stdout.splitlines()] == [want, want]
    p = launch(["-n", "2", sys.executable, "-c", code], env=dict(env, OMP_NUM_THREADS="3"))
    assert [ln.split("] ", 1)[1] for ln in p.stdout.splitlines()] == ["3", "3"]


def test_fresh_token_and_port_per_job():
    code = "import os; print(os.environ['NCCLZ_TOKEN'], os.environ['MASTER_PORT'])"
    a = launch(["-n", "1", sys.executable, "-c", code]).stdout
    b = launch(["-n", "1", sys.executable, "-c", code]).stdout
    assert a.split()[2] != b.split()[2]


def test_failing_rank_propagates_and_others_are_stopped():
    code = (
        "import os, sys, time\n"
        "r = int(os.environ['RANK'])\n"
        "if r == 1:\n    time.sleep(0.2); sys.exit(7)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    p = launch(["-n", "3", "--grace", "1", sys.executable, "-c", code], timeout=30)
    assert p.returncode == 7, p.stderr
    assert "rank 1" in p.stderr and "exited with code 7" in p.stderr
    assert time.monotonic() - t0 < 15


def test_blames_the_rank_that_failed_on_its_own():
    """A rank that only saw a peer fail (ncclz marks it) is not blamed, even if it exited first."""
    code = (
        "import os, sys, time\n"
        "r = int(os.environ['RANK'])\n"
        "if r == 1:\n"
        "    open(os.path.join(os.environ['NCCLZ_RUN_STATE_DIR'], 'rank1.peer_error'), 'w').close()\n"
        "    sys.exit(3)\n"
        "time.sleep(0.2); sys.exit(5)\n"
    )
    p = launch(["-n", "2", sys.executable, "-c", code], timeout=30)
    assert p.returncode == 5, p.stderr
    assert "rank 0" in p.stderr.splitlines()[0], p.stderr


def test_rank_killed_by_signal():
    code = "import os, signal\nif os.environ['RANK'] == '0': os.kill(os.getpid(), signal.SIGKILL)\n"
    p = launch(["-n", "2", sys.executable, "-c", code], timeout=30)
    assert p.returncode == 128 + signal.SIGKILL
    assert "rank 0" in p.stderr and "SIGKILL" in p.stderr


def test_signals_are_forwarded(tmp_path):
    code = (
        "import signal, sys, time, os\n"
        "def h(s, f):\n    print('got', s, flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, h)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        RUN + ["-n", "2", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = 0
    while seen < 2:
        line = p.stdout.readline()
        assert line, "launcher exited early"
        seen += "ready" in line
    p.send_signal(signal.SIGTERM)
    # Generous: a CI run once saw rank 1's line missing after 20 s on a loaded machine (not
    # reproduced since); a timeout now reports what the launcher had written by then.
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"the launcher did not exit 60 s after SIGTERM; stdout {out!r}, stderr {err!r}") from None
    assert out.count(f"got {int(signal.SIGTERM)}") == 2, out + err
    assert p.returncode != 0


def test_python_script_shortcut(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import os; print('hi', os.environ['RANK'])\n")
    p = launch(["-n", "2", str(script)])
    assert p.returncode == 0 and p.stdout.count("hi") == 2


def test_usage_errors():
    assert launch([]).returncode == 2
    assert launch(["-n", "2", "/nonexistent/program"]).returncode == 127


@needs_runtime
def test_launcher_runs_ncclz_ranks(tmp_path):
    p = launch(["-n", "3", sys.executable, str(WORKERS), "launcher", str(tmp_path)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(p.stdout.split("\n"))[-3:] == [f"[rank {r}] sum=3 rank={r}" for r in range(3)]


@needs_runtime
def test_launcher_exit_code_when_an_ncclz_rank_fails(tmp_path):
    t0 = time.monotonic()
    p = launch(
        [
            "-n",
            "3",
            "--timeout",
            "5",
            "--grace",
            "10",
            sys.executable,
            str(WORKERS),
            "launcher",
            str(tmp_path),
            "fail",
            "2",
            "9",
        ],
        timeout=120,
    )
    assert p.returncode == 9, p.stdout + p.stderr
    assert "rank 2" in p.stderr
    # The survivors noticed the dead peer by themselves (RemoteError), well before the grace period ended.
    assert p.stdout.count("saw ") == 2, p.stdout + p.stderr
    assert time.monotonic() - t0 < 60


@needs_runtime
def test_demo_runs_quickly():
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "ncclz.demo"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    for mode in ("none", "Lossless()", "Lossy(rel=1e-3)", "Lossy(rel=1e-4)"):  # the demo's rows (test_demo.py)
        assert mode in p.stdout
    assert "EXCEEDS" not in p.stdout and "DIFFERS" not in p.stdout
    assert wall < 60, f"ncclz-demo took {wall:.1f} s"
