"""``ncclz-run``: start N local ranks of a program, torchrun style.

    ncclz-run -n 4 python train.py --epochs 3
    ncclz-run -n 2 --master-port 29600 --timeout 30 script.py   # .py: run with this Python

Each rank is a subprocess with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT (a free port unless given) and NCCLZ_TOKEN (a fresh
random secret) set, plus NCCLZ_TIMEOUT when --timeout is given. Output lines
are prefixed with the rank (``[rank 2] ...``). SIGINT/SIGTERM/SIGHUP are
forwarded to every rank. When a rank fails (non-zero exit or killed by a
signal) the others get ``--grace`` seconds to notice on their own (ncclz
raises RemoteError in them), then are terminated; ncclz-run exits with the
failing rank's code and says which rank failed (the first that failed on its own: ranks
whose ncclz calls raised RemoteError mark themselves in NCCLZ_RUN_STATE_DIR as followers).

:func:`launch` is the same machinery as a function (used by ncclz-demo and the tests).
"""

from __future__ import annotations

import argparse
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
    """Copies lines from a rank's pipe to our stdout/stderr, prefixed."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        if not line.endswith("\n"):
            line += "\n"
        with lock:
            sink.write(prefix + line)
            sink.flush()
    stream.close()


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
            e = rank_env(r, nproc, master_addr, port, token, timeout, env, state_dir)
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

        def culprit(failed: list[int]) -> int:
            # A rank that failed on its own beats one that only saw a peer fail; then the earliest.
            return min(failed, key=lambda r: (after_peer_error(r), exit_times[r]))

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
            failed = [r for r in done if procs[r].returncode != 0]
            if failed_at is None and failed:
                failed_at = now
            if not decided and failed_at is not None and now - failed_at >= min(settle, grace):
                decided = True
                r = culprit(failed)
                status = _exit_status(procs[r].returncode)
                others = [i for i in range(nproc) if exit_times[i] is None]
                note(
                    f"rank {r} (pid {procs[r].pid}) {_describe_exit(procs[r].returncode)}; "
                    f"stopping ranks {others} in {grace:g} s unless they exit first"
                )
            if failed_at is None and deadline is not None and now - start > deadline:
                note(f"deadline of {deadline:g} s passed; terminating all ranks")
                failed_at, status, grace, decided = now, 124, 0.0, True
            if decided:
                if not terminated and now - failed_at >= grace:
                    signal_all(signal.SIGTERM)
                    terminated = True
                elif terminated and not killed and now - failed_at >= grace + 3.0:
                    signal_all(signal.SIGKILL)
                    killed = True
        codes = [p.returncode for p in procs]
        if not decided:
            failed = [r for r in range(nproc) if codes[r] != 0]
            if failed:
                r = culprit(failed)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ncclz-run",
        description="Start N local ranks of a program for ncclz (sets RANK, WORLD_SIZE, LOCAL_RANK, "
        "MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN).",
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
