"""``ncclz-run``: start N local ranks of a program, torchrun style.

    ncclz-run -n 4 python train.py --epochs 3
    ncclz-run -n 2 --master-port 29600 --timeout 30 script.py   # .py: run with this Python

Each rank is a subprocess with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT (a free port unless given), NCCLZ_TOKEN (a fresh
random secret) and NCCLZ_JOB_ID (a fresh id of this run) set, plus
NCCLZ_TIMEOUT when --timeout is given. Output lines are prefixed with the rank
(``[rank 2] ...``). SIGINT/SIGTERM/SIGHUP are forwarded to every rank. When a
rank fails (non-zero exit or killed by a signal) the others get ``--grace``
seconds to notice on their own (ncclz raises RemoteError in them), then are
terminated; ncclz-run exits with the failing rank's code and says which rank
failed: a rank that is stopped (SIGSTOP, Ctrl-Z, a debugger) while the others
failed waiting for it, else the first that failed on its own (ranks whose
ncclz calls raised RemoteError mark themselves in NCCLZ_RUN_STATE_DIR as
followers). A rank stopped for ``STOPPED_NOTE_S`` seconds is reported at once.
When every rank has exited, the shared-memory segments of this run that ranks
killed by a signal could not remove (``/dev/shm/ncclz-j<job tag>*``) are
removed.

:func:`launch` is the same machinery as a function (used by ncclz-demo and the tests).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import IO

_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: Seconds a rank may stay stopped (state T) before ncclz-run says so.
STOPPED_NOTE_S = 3.0


def job_tag(job_id: str) -> str:
    """The head of the job key of a run with NCCLZ_JOB_ID=``job_id`` (cpp/src/bootstrap/job_identity.hpp):
    the first 8 hex digits of SHA-256("NCCLZ_JOB_ID=" + job_id). Shared-memory segments of that run are named
    ``/dev/shm/ncclz-j<tag>...``."""
    return hashlib.sha256(f"NCCLZ_JOB_ID={job_id}".encode()).hexdigest()[:8]


def remove_shm_leftovers(job_id: str) -> list[str]:
    """Removes /dev/shm/ncclz-j<tag>* of a run; returns the names removed."""
    removed = []
    for path in glob.glob(f"/dev/shm/ncclz-j{job_tag(job_id)}*"):
        try:
            os.unlink(path)
            removed.append(os.path.basename(path))
        except OSError:
            pass
    return removed


def stopped_groups() -> set[int]:
    """Process groups with a stopped process (state T or t: SIGSTOP, Ctrl-Z, a debugger), from /proc.

    Every rank runs in its own process group (its pid), so this also finds a rank whose
    program is a wrapper and the stopped process one of its children."""
    groups = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # [0] state, [1] ppid, [2] process group
        if len(fields) > 2 and fields[0] in ("T", "t"):
            groups.add(int(fields[2]))
    return groups


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``addr`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def rank_env(
    rank: int,
    nproc: int,
    master_addr: str,
    master_port: int,
    token: str,
    timeout: float | None = None,
    base: dict | None = None,
    state_dir: str | None = None,
    job_id: str | None = None,
) -> dict:
    """The environment of one rank."""
    env = dict(os.environ if base is None else base)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        NCCLZ_TOKEN=token,
        NCCLZ_JOB_ID=job_id or token[:16],
        NCCLZ_LAUNCHER="ncclz-run",
        PYTHONUNBUFFERED="1",
    )
    # Not torchrun: keep ncclz.init() from looking for torchrun's store.
    for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"):
        env.pop(k, None)
    # As torchrun does: ranks sharing this host share its cores, so their OpenMP/BLAS pools
    # default to a share each (idle OpenBLAS threads otherwise spin on the ranks' cores).
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, nproc)))
    if timeout is not None:
        env["NCCLZ_TIMEOUT"] = f"{timeout:g}"
    if state_dir is not None:
        env["NCCLZ_RUN_STATE_DIR"] = state_dir
    return env


def _pump(stream: IO[bytes], sink: IO[str], prefix: str, lock: threading.Lock) -> None:
    """Copies lines from a rank's pipe to our stdout/stderr, prefixed. Where our reader has gone (a
    closed pipe: ``ncclz-run ... | head``) it keeps draining the rank's pipe, so the rank never blocks
    writing, and drops the lines."""
    gone = False
    for raw in iter(stream.readline, b""):
        if gone:
            continue
        line = raw.decode("utf-8", errors="replace")
        if not line.endswith("\n"):
            line += "\n"
        with lock:
            try:
                sink.write(prefix + line)
                sink.flush()
            except (BrokenPipeError, ValueError):  # ValueError: the sink was closed
                gone = True
                _silence(sink)
    stream.close()


def _silence(sink: IO[str]) -> None:
    """Points a sink whose reader has gone at /dev/null, so that writing (and Python's own flush at
    exit) raises no BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sink.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


def launch(
    cmd: Sequence[str],
    nproc: int,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout: float | None = None,
    grace: float = 5.0,
    prefix: bool = True,
    env: dict | None = None,
    deadline: float | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    settle: float = 0.5,
) -> int:
    """Runs ``cmd`` as ``nproc`` local ranks; returns the exit status (0 if every rank succeeded).

    deadline: give up after this many seconds (ranks terminated, status 124).
    settle: after the first failure, how long to collect other failures before blaming one
        (a rank that raised ncclz.RemoteError only saw a peer fail and is blamed last).
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    cmd = list(cmd)
    if not cmd:
        raise ValueError("no command to run")
    if cmd[0].endswith(".py"):
        cmd = [sys.executable] + cmd
    out = out or sys.stdout
    err = err or sys.stderr
    port = master_port or free_port(master_addr)
    token = secrets.token_hex(16)
    job_id = secrets.token_hex(8)
    # ncclz marks here which ranks failed because of a peer (RemoteError and subclasses),
    # so that the launcher blames the rank that failed first for its own reasons.
    state_dir = tempfile.mkdtemp(prefix="ncclz-run-")
    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []

    def note(msg: str) -> None:
        with lock:
            err.write(f"ncclz-run: {msg}\n")
            err.flush()

    def signal_all(sig: int) -> None:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    received: list[int] = []
    old_handlers = {}
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:

        def on_signal(signum, frame):
            received.append(signum)
            signal_all(signum)

        for s in _FORWARDED_SIGNALS:
            old_handlers[s] = signal.signal(s, on_signal)
    try:
        for r in range(nproc):
            e = rank_env(r, nproc, master_addr, port, token, timeout, env, state_dir, job_id)
            p = subprocess.Popen(
                cmd,
                env=e,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            procs.append(p)
            tag = f"[rank {r}] " if prefix else ""
            for stream, sink in ((p.stdout, out), (p.stderr, err)):
                t = threading.Thread(target=_pump, args=(stream, sink, tag, lock), daemon=True)
                t.start()
                pumps.append(t)

        # One watcher per rank records when it exited, so that the rank that failed
        # first is blamed even when the others follow it within milliseconds.
        exit_times: list[float | None] = [None] * nproc
        wake = threading.Event()

        def watch(r: int, p: subprocess.Popen) -> None:
            p.wait()
            exit_times[r] = time.monotonic()
            wake.set()

        for r, p in enumerate(procs):
            threading.Thread(target=watch, args=(r, p), daemon=True).start()

        def after_peer_error(r: int) -> bool:
            return os.path.exists(os.path.join(state_dir, f"rank{r}.peer_error"))

        stopped_since: list[float | None] = [None] * nproc
        stopped_noted = [False] * nproc
        next_stop_check = 0.0

        def check_stopped(now: float) -> None:
            groups = stopped_groups()
            for r in range(nproc):
                if exit_times[r] is not None or procs[r].pid not in groups:
                    stopped_since[r] = None
                    continue
                if stopped_since[r] is None:
                    stopped_since[r] = now
                if not stopped_noted[r] and now - stopped_since[r] >= STOPPED_NOTE_S:
                    stopped_noted[r] = True
                    note(
                        f"rank {r} (pid {procs[r].pid}) is stopped (SIGSTOP, Ctrl-Z or a debugger): "
                        "the other ranks wait for it until NCCLZ_TIMEOUT; send it SIGCONT to resume"
                    )

        def culprit(failed: list[int]) -> tuple[int, str | None]:
            # A rank stopped while the others failed is the cause (they timed out waiting for it).
            groups = stopped_groups()
            for r in range(nproc):
                if exit_times[r] is None and procs[r].pid in groups:
                    return (
                        r,
                        "is stopped (SIGSTOP, Ctrl-Z or a debugger) and the others failed waiting for it",
                    )
            # A rank that failed on its own beats one that only saw a peer fail; then the earliest.
            return min(failed, key=lambda r: (after_peer_error(r), exit_times[r])), None

        status = 0
        decided = False
        failed_at: float | None = None  # when the first failure was seen
        terminated = killed = False
        start = time.monotonic()
        while True:
            wake.wait(0.05)
            wake.clear()
            done = [r for r in range(nproc) if exit_times[r] is not None]
            if len(done) == nproc:
                break
            now = time.monotonic()
            if now >= next_stop_check:
                check_stopped(now)
                next_stop_check = now + 1.0
            failed = [r for r in done if procs[r].returncode != 0]
            if failed_at is None and failed:
                failed_at = now
            if not decided and failed_at is not None and now - failed_at >= min(settle, grace):
                decided = True
                r, why = culprit(failed)
                first = min(failed, key=lambda i: exit_times[i])
                status = _exit_status(procs[first if why else r].returncode)
                others = [i for i in range(nproc) if exit_times[i] is None]
                what = why or _describe_exit(procs[r].returncode)
                note(
                    f"rank {r} (pid {procs[r].pid}) {what}; "
                    f"stopping ranks {others} in {grace:g} s unless they exit first"
                )
            if failed_at is None and deadline is not None and now - start > deadline:
                note(f"deadline of {deadline:g} s passed; terminating all ranks")
                failed_at, status, grace, decided = now, 124, 0.0, True
            if decided:
                if not terminated and now - failed_at >= grace:
                    signal_all(signal.SIGTERM)
                    signal_all(signal.SIGCONT)  # a stopped rank acts on SIGTERM only once continued
                    terminated = True
                elif terminated and not killed and now - failed_at >= grace + 3.0:
                    signal_all(signal.SIGKILL)
                    killed = True
        codes = [p.returncode for p in procs]
        if not decided:
            failed = [r for r in range(nproc) if codes[r] != 0]
            if failed:
                r, _ = culprit(failed)
                status = _exit_status(codes[r])
                if not received:
                    note(f"rank {r} (pid {procs[r].pid}) {_describe_exit(codes[r])}")
        for t in pumps:
            t.join(timeout=2.0)
        if received and status == 0:
            status = 128 + received[0]
        if status != 0:
            summary = ", ".join(f"rank {r}: {c}" for r, c in enumerate(codes))
            note(f"failed (exit status {status}; {summary})")
        return status
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.wait()
        for s, h in old_handlers.items():
            signal.signal(s, h)
        shutil.rmtree(state_dir, ignore_errors=True)
        left = remove_shm_leftovers(job_id)
        if left:
            note(f"removed {len(left)} shared-memory segment(s) that killed ranks left in /dev/shm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ncclz-run",
        description="Start N local ranks of a program for ncclz (sets RANK, WORLD_SIZE, LOCAL_RANK, "
        "MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN, NCCLZ_JOB_ID).",
        epilog="example: ncclz-run -n 4 python train.py --epochs 3",
    )
    p.add_argument(
        "-n",
        "--nproc",
        "--nproc-per-node",
        dest="nproc",
        type=int,
        default=2,
        help="number of ranks (default 2)",
    )
    p.add_argument("--master-addr", default="127.0.0.1", help="address rank 0 listens on (default 127.0.0.1)")
    p.add_argument(
        "--master-port", type=int, default=None, help="port rank 0 listens on (default: a free port)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="NCCLZ_TIMEOUT for the ranks: seconds before a stuck call fails",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds the other ranks get to exit after one fails (default 5)",
    )
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with the rank")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        build_parser().error("no program given (e.g. ncclz-run -n 4 python script.py)")
    if args.nproc < 1:
        build_parser().error("-n must be at least 1")
    try:
        return launch(
            cmd,
            args.nproc,
            master_addr=args.master_addr,
            master_port=args.master_port,
            timeout=args.timeout,
            grace=args.grace,
            prefix=not args.no_prefix,
        )
    except FileNotFoundError as e:
        print(f"ncclz-run: cannot start {cmd[0]!r}: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
