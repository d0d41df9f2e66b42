"""Rendezvous through a key-value store (a ``torch.distributed`` Store or anything alike).

The native runtime bootstraps from a 128-byte :class:`UniqueId` that rank 0
makes (it binds rank 0's listening socket and draws the job's secret token).
A store only carries that id from rank 0 to the others, the way
``ProcessGroupNCCL`` shares its NCCL unique id: rank 0 ``set``s it, the others
``wait`` for it (bounded by the timeout) and ``get`` it.

Any object with ``set(key, bytes)`` and ``get(key) -> bytes`` works; ``wait(keys,
timedelta)`` is used when present. Under torchrun, :func:`store_from_env`
connects to the store torchrun already runs on MASTER_ADDR:MASTER_PORT (so no
second server fights for that port).
"""

from __future__ import annotations

import builtins
import datetime
import itertools
import os
import sys
import threading
import time
from typing import Any

from .errors import InvalidArgumentError, RemoteError, TimeoutError

#: Prefix of every key ncclz writes into a user's store.
KEY_PREFIX = "ncclz/unique_id/"

_sequence = itertools.count()
_sequence_lock = threading.Lock()


def next_key() -> str:
    """Key for the next communicator made through a store in this process.

    Every rank creates its communicators in the same order, so the n-th
    communicator of each rank uses the same key.
    """
    with _sequence_lock:
        return f"{KEY_PREFIX}{next(_sequence)}"


def _check_store(store: Any) -> None:
    if not (callable(getattr(store, "set", None)) and callable(getattr(store, "get", None))):
        raise InvalidArgumentError(
            f"store must have set(key, value) and get(key) (a torch.distributed Store), got {type(store).__name__}"
        )


def publish(store: Any, key: str, value: bytes) -> None:
    """Rank 0's half: stores ``value`` under ``key``."""
    _check_store(store)
    try:
        store.set(key, value)
    except (
        Exception
    ) as e:  # stores raise RuntimeError, DistStoreError, OSError... (re-raised as ncclz errors)
        raise RemoteError(f"could not write the ncclz unique id to the store (key {key!r}): {e}") from e


def wait_report_first() -> float:
    """Seconds before the first progress report of a wait (``NCCLZ_WAIT_REPORT``, default 5; 0: never).

    The schedule is the bootstrap's (cpp/src/bootstrap/wait_report.hpp): a report after the
    first interval R, then after intervals of 2R, 4R, ... at most 60 s."""
    raw = os.environ.get("NCCLZ_WAIT_REPORT", "").strip()
    if not raw:
        return 5.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0.0 <= value <= 1e9):
        raise InvalidArgumentError(
            f"NCCLZ_WAIT_REPORT={raw!r}: expected seconds, a number >= 0 (0: no reports)"
        )
    return value


def _warn(rank: int, text: str) -> None:
    """One WARN line on stderr, formatted and filtered like the native log (NCCLZ_DEBUG=NONE hides it)."""
    if os.environ.get("NCCLZ_DEBUG", "").strip().upper() == "NONE":
        return
    sys.stderr.write(f"ncclz rank {rank}: WARN {text}\n")
    sys.stderr.flush()


def _is_timeout(e: BaseException) -> bool:
    msg = str(e).lower()
    return isinstance(e, builtins.TimeoutError) or "timeout" in msg or "timed out" in msg


def fetch(store: Any, key: str, timeout_s: float, rank: int) -> bytes:
    """The other ranks' half: waits up to ``timeout_s`` for ``key`` and returns its value.

    A wait longer than ``NCCLZ_WAIT_REPORT`` seconds says on stderr what it waits for, and again on
    the schedule of :func:`wait_report_first`, until the key comes or the timeout passes. Stores with
    ``check(keys)`` (every torch Store) are polled; stores with only ``wait(keys, timedelta)`` wait in
    slices between reports; others block in ``get``."""
    _check_store(store)
    start = time.monotonic()
    deadline = start + timeout_s
    interval = wait_report_first()
    next_report = start + interval if interval > 0 else float("inf")

    def timed_out(detail: str) -> TimeoutError:
        return TimeoutError(
            f"rank {rank}: rank 0 did not publish the ncclz unique id (store key {key!r}) within "
            f"{timeout_s:g} s; is rank 0 running and using the same store? ({detail})"
        )

    def report(now: float) -> None:
        nonlocal interval, next_report
        _warn(
            rank,
            f"store rendezvous: rank {rank} has waited {now - start:.0f} s for rank 0 to put the ncclz unique id "
            f"into the store ({type(store).__name__}, key {key!r}): is rank 0 running, with the same store, and "
            "does every rank create its communicators in the same order? "
            f"(timeout after {timeout_s:g} s, NCCLZ_TIMEOUT)",
        )
        interval = min(interval * 2, 60.0)
        next_report = now + interval

    check = getattr(store, "check", None)
    wait = getattr(store, "wait", None)
    try:
        if callable(check):
            pause = 0.005
            while not check([key]):
                now = time.monotonic()
                if now >= deadline:
                    raise timed_out("the key never appeared")
                if now >= next_report:
                    report(now)
                time.sleep(min(pause, max(0.0, deadline - now)))
                pause = min(pause * 2, 0.1)
        elif callable(wait):
            while True:
                now = time.monotonic()
                slice_end = min(deadline, next_report)
                try:
                    wait([key], datetime.timedelta(seconds=max(0.001, slice_end - now)))
                    break
                except TypeError:  # a wait() without a timeout argument
                    wait([key])
                    break
                except Exception as e:  # a slice that ended without the key, or a failure
                    now = time.monotonic()
                    if not _is_timeout(e):
                        raise
                    if now >= deadline:
                        raise timed_out(str(e)) from e
                    if now >= next_report:
                        report(now)
        value = store.get(key)
    except TimeoutError:
        raise
    except (
        Exception
    ) as e:  # stores raise RuntimeError, DistStoreError, OSError... (re-raised as ncclz errors)
        msg = str(e)
        if _is_timeout(e) or time.monotonic() >= deadline:
            raise timed_out(msg) from e
        raise RemoteError(
            f"rank {rank}: could not read the ncclz unique id from the store (key {key!r}): {msg}"
        ) from e
    if isinstance(value, str):
        value = value.encode("latin-1")
    return bytes(value)


def under_torchrun() -> bool:
    """True when the process was started by torchrun (torch.distributed.run / elastic agent)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_USE_AGENT_STORE" in os.environ


def store_from_env(timeout_s: float) -> Any:
    """A store built from the torchrun environment, the way ``env://`` builds one.

    If torch.distributed is initialized already, its default store is reused.
    If torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True),
    every rank is a client and keys live under torchrun's per-attempt prefix;
    otherwise rank 0 hosts a TCPStore on MASTER_ADDR:MASTER_PORT.
    """
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise InvalidArgumentError(
            "running under torchrun needs torch.distributed for the rendezvous store"
        ) from e
    timeout = datetime.timedelta(seconds=timeout_s)
    if dist.is_available() and dist.is_initialized():
        try:
            from torch.distributed.distributed_c10d import _get_default_store

            return dist.PrefixStore("ncclz", _get_default_store())
        except Exception:  # noqa: BLE001, S110 - private API; fall back to our own client
            pass
    try:
        addr = os.environ["MASTER_ADDR"]
        port = int(os.environ["MASTER_PORT"])
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError) as e:
        raise InvalidArgumentError(
            f"torchrun environment incomplete or malformed ({e}); "
            "need MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE"
        ) from e
    try:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
            base = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            base = dist.PrefixStore(f"/worker/attempt_{attempt}", base)
        else:
            base = dist.TCPStore(addr, port, world, is_master=(rank == 0), timeout=timeout, multi_tenant=True)
    except (
        Exception
    ) as e:  # stores raise RuntimeError, DistStoreError, OSError... (re-raised as ncclz errors)
        raise RemoteError(
            f"rank {rank}: could not reach the torch.distributed store at {addr}:{port}: {e}"
        ) from e
    return dist.PrefixStore("ncclz", base)
