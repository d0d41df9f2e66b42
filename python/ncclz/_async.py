"""Asynchronous calls: ``async_op=True`` on any collective, ``comm.synchronize()``.

Every rank must issue its calls on a communicator in the same order. An asynchronous
call therefore goes into the communicator's *call queue*: one FIFO and one thread
(started with the first asynchronous call) that makes the calls one after another,
exactly as the synchronous API would have made them. The caller gets a :class:`Work`
at once and goes on (computing the next bucket of gradients, say) while the call
moves data.

Order. A synchronous call made while asynchronous calls are queued or running is
queued behind them and waited for, so a thread mixing both keeps its issue order
(and so does every rank that issues the same sequence). Calls from *different*
threads are still the caller's to order (docs/PYTHON_API.md, "Threads").

GPU arrays. The framework's current stream at the time of the call (PyTorch's or
CuPy's, for the device of the call's GPU arrays) is made current in the queue's
thread while the call runs, so the staging copies are ordered after the work the
caller queued before the call, as for a synchronous call (JAX arrays are waited
for). The result is on the array's device when the Work completes.

Errors. A call's exception is raised by ``Work.wait()`` (and
``Work.exception()`` returns it); ``synchronize()`` waits for every queued call
and raises the first exception no ``wait()`` has raised yet. A failed call
leaves the queue running: the calls behind it run as they would have run
synchronously (most errors abort the communicator, and those calls then fail
at once with AbortedError). ``abort()`` works from any thread as before;
``close()`` first waits for the queued calls.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable

from . import _device


class Work:
    """A queued call: ``wait()`` for its result, ``is_completed()`` to poll."""

    __slots__ = ("_done", "_error", "_name", "_result", "_seen", "_stats")

    def __init__(self, name: str):
        self._name = name
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._seen = False  # its error was raised by wait() (synchronize() does not raise it again)
        self._stats: Any = None

    def wait(self, timeout: float | None = None) -> Any:
        """Blocks until the call completed; returns what the synchronous call returns, or raises its
        exception. ``timeout`` (seconds): raises TimeoutError if it has not completed by then (the call
        stays queued; the communicator's own timeouts still apply to it)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self._name} did not complete within {timeout} s")
        if self._error is not None:
            self._seen = True
            raise self._error
        return self._result

    @property
    def stats(self) -> Any:
        """The call's :class:`ncclz.CallStats` once it completed successfully (what ``comm.last_stats``
        said right after it, before any later call replaced it); None before, or after a failure."""
        if not self._done.is_set() or self._stats is None:
            return None
        if callable(self._stats):  # built on first use, on the reader's thread
            self._stats = self._stats()
        return self._stats

    def is_completed(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._done.is_set()

    def exception(self) -> BaseException | None:
        """The call's exception once it completed (None if it succeeded or has not completed)."""
        return self._error if self._done.is_set() else None

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else "completed" if self._done.is_set() else "pending"
        return f"<ncclz.Work {self._name} ({state})>"


class CallQueue:
    """The FIFO and thread of one communicator's asynchronous calls."""

    def __init__(self, name: str):
        self._name = name
        self._cv = threading.Condition()
        self._jobs: collections.deque = collections.deque()
        self._pending: list[Work] = []  # submitted, not yet returned by synchronize()
        self._busy = False
        self._thread: threading.Thread | None = None

    def idle(self) -> bool:
        """Nothing queued or running (a synchronous call may then run on the caller's thread)."""
        with self._cv:
            return not self._jobs and not self._busy

    def submit(self, name: str, fn: Callable[[], Any], args: tuple, stats: Callable[[], Any] | None = None) -> Work:
        """Queues ``fn()`` (run under the caller's current GPU streams of ``args``' arrays); ``stats()``,
        called right after a successful ``fn()`` on the queue's thread, gives the Work's stats (or a
        function that builds them: Work.stats calls it when first read)."""
        work = Work(name)
        streams = _device.caller_streams(args)
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.append((work, fn, streams, stats))
            # forget calls that completed and whose outcome someone has seen (or that succeeded)
            self._pending = [w for w in self._pending if not (w._done.is_set() and (w._error is None or w._seen))]
            self._pending.append(work)
            self._cv.notify_all()
        return work

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs:
                    self._cv.wait()
                work, fn, streams, stats = self._jobs.popleft()
                if work is None:  # stop()
                    self._cv.notify_all()
                    return
                self._busy = True
            try:
                with contextlib.ExitStack() as stack:
                    for s in streams:
                        stack.enter_context(s())
                    work._result = fn()
                    work._stats = stats() if stats is not None else None
            except BaseException as e:  # noqa: BLE001 - delivered through the Work
                work._error = e
            finally:
                with self._cv:
                    self._busy = False
                    work._done.set()
                    if work._error is None:  # synchronize() keeps only what it may still raise
                        self._pending = [w for w in self._pending if w is not work]
                    self._cv.notify_all()
            # Idle, the thread holds nothing of the call: its closure keeps the communicator and
            # the arrays alive, and a daemon thread still holding them at exit (a communicator
            # never closed) made nanobind report them as leaked.
            work = fn = streams = stats = None

    def synchronize(self) -> None:
        """Waits for every queued call; raises the first exception that no wait() raised."""
        with self._cv:
            works, self._pending = self._pending, []
        first = None
        for w in works:
            w._done.wait()
            if w._error is not None and not w._seen and first is None:
                first = w
        if first is not None:
            first._seen = True
            raise first._error

    def stop(self) -> None:
        """Waits for the queued calls, then ends the thread."""
        with self._cv:
            t = self._thread
            if t is None:
                return
            self._jobs.append((None, None, (), None))
            self._cv.notify_all()
        t.join()
        with self._cv:
            self._thread = None
