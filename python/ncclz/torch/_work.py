"""Asynchronous execution of a group's calls: one worker thread per communicator, in issue order.

A communicator must see its calls in the same order on every rank, and torch
issues collectives in program order on every rank, so each communicator gets
one FIFO and one thread (:class:`Worker`). ``ProcessGroup`` methods enqueue a
job and return a :class:`Work` at once; the thread runs the jobs one after the
other (ncclz releases the GIL while it communicates, so the caller goes on: DDP
computes the next buckets' gradients while the previous one is reduced).

A :class:`Work` completes once, with the job's output tensors or its error. Its
``torch.futures.Future`` (``get_future()``) gets the same, so DDP's C++ reducer
and ``then`` callbacks see results and errors alike. ``wait(timeout)`` that runs
out aborts the communicator (a collective cannot be taken back once peers may
be in it; aborting makes them fail fast instead of waiting for their own
timeout) and raises ``ncclz.TimeoutError``.

CUDA calls: the Work holds the caller's current CUDA stream at issue time; the
worker runs the job and completes the Work with that stream current, so the
Communicator's copies (device to host before the collective, host to device
after it) are queued behind what the caller queued before the call. The Future
is made with the outputs' devices (it records that stream when it completes and
its users wait for it), and ``wait()`` / ``synchronize()`` make the caller's
current stream wait for the call's stream.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..errors import AbortedError, InvalidArgumentError
from ..errors import TimeoutError as NcclzTimeoutError


def timeout_seconds(timeout: Any) -> float | None:
    """A c10d timeout (timedelta, milliseconds from C++, seconds) as seconds; None for "no timeout"
    (c10d's kNoTimeout is 0 ms, and the Python default of Work.wait is a negative timedelta)."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        s = timeout.total_seconds()
    else:
        s = float(timeout)
    return None if s <= 0 else s


class Work(dist.Work):
    """One call of an ncclz process group: completes with its output tensors or its error."""

    def __init__(
        self,
        op: str,
        outputs: Any,
        on_timeout: Callable[[str], None] | None = None,
        devices: list | None = None,
        stream: Any = None,
    ):
        super().__init__()
        self._op = op
        self._outputs = outputs
        #: The caller's CUDA stream when it issued the call (None for CPU calls): the job runs and
        #: completes with it current, so the staging copies follow what the caller queued before.
        self.stream = stream
        self._done = threading.Event()
        self._settle_lock = threading.Lock()
        self._settled = False
        self._error: BaseException | None = None
        # with CUDA outputs the Future records their streams when it completes, and whoever uses its
        # value waits for them (a Future without devices refuses CUDA tensors)
        self._future: torch.futures.Future = (
            _WorkFuture(devices=list(devices)) if devices else _WorkFuture()
        )
        self._future._work = weakref.ref(self)
        # weak: torch may keep a Work (and so what it references) alive in C++ until exit
        self._on_timeout = weakref.WeakMethod(on_timeout) if on_timeout is not None else None
        #: ncclz.CallStats of the native calls this work made (filled on the worker thread).
        self.stats: list = []
        #: The sender's group rank of a recv from any source, once it is chosen (torch reads _source_rank()).
        self.source: int = -1
        self._worker: Worker | None = None  # the worker it is queued on (wait() from that worker's thread)

    # ---- completion (worker thread) -----------------------------------------------
    # The Future completes first (its callbacks run here, on the worker thread), then wait() returns:
    # a caller of wait() finds the Future done.
    # A Work completes once: a per-call timeout (``opts.timeout``) may fail it while its job still runs;
    # what the job does after that (the abort's error, or a late success) is dropped.
    def _settle(self) -> bool:
        with self._settle_lock:
            if self._settled:
                return False
            self._settled = True
            return True

    def _finish(self) -> None:
        if not self._settle():
            return
        self._future.set_result(self._outputs)
        self._done.set()

    def _fail(self, error: BaseException) -> None:
        if not self._settle():
            return
        self._error = error
        try:
            self._future.set_exception(_detached(error))
        finally:
            self._done.set()

    # ---- the c10d Work interface ---------------------------------------------------
    def wait(self, timeout: Any = None) -> bool:
        seconds = timeout_seconds(timeout)
        worker = self._worker
        if worker is not None and not self._done.is_set():
            worker.run_until(self)  # a callback on its own worker waiting for it (Worker.run_until)
        if not self._done.wait(seconds):
            msg = (
                f"ncclz process group: {self._op} did not complete within {seconds:g} s "
                "(Work.wait timeout); the group's communicator was aborted"
            )
            callback = self._on_timeout() if self._on_timeout is not None else None
            if callback is not None:
                callback(msg)
            raise NcclzTimeoutError(msg)
        if self._error is not None:
            raise self._error
        self.synchronize()
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._error is None

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> Any:
        self.wait()
        return self._outputs

    def _source_rank(self) -> int:
        """The sender of a recv (from any source: the rank it picked), for ``dist.recv`` / ``irecv``."""
        self.wait()
        return self.source

    source_rank = _source_rank

    def get_future(self) -> torch.futures.Future:
        return self._future

    def synchronize(self) -> None:
        """CUDA calls: the caller's current stream waits for the stream the call's results were copied
        on (they are the same unless the caller switched streams). CPU calls: nothing to do."""
        s = self.stream
        if s is not None:
            current = torch.cuda.current_stream(s.device)
            if current != s:
                current.wait_stream(s)

    def __repr__(self) -> str:
        state = "pending" if not self._done.is_set() else ("failed" if self._error else "completed")
        return f"<ncclz Work {self._op} {state}>"


def caller_stream(tensors: Any) -> Any:
    """The current CUDA stream of the first CUDA tensor's device in ``tensors``, else None."""
    stack = [tensors]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                return torch.cuda.current_stream(x.device)
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return None


def on_stream(stream: Any) -> Any:
    """``torch.cuda.stream(stream)`` for a CUDA stream, a no-op context for None."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


class _WorkFuture(torch.futures.Future):
    """A Work's Future: ``wait()`` / ``value()`` called on the Work's own worker thread (a ``then``
    callback waiting for a call queued behind the one it follows) runs the queued calls up to the
    Work's (``Worker.run_until``, as ``Work.wait`` does) instead of waiting for itself. The Futures
    ``then`` returns are torch's own: waiting for one of those there still waits for itself."""

    _work: Any = None  # weakref to the Work (the Work holds its Future)

    def _pump(self) -> None:
        work = self._work() if self._work is not None else None
        worker = work._worker if work is not None else None
        if worker is not None and not self.done():
            worker.run_until(work)

    def wait(self) -> Any:
        self._pump()
        return super().wait()

    def value(self) -> Any:
        self._pump()
        return super().value()


def _detached(error: BaseException) -> BaseException:
    """``error`` for the torch Future: the same type, message and attributes, without its traceback,
    cause or context. The Future holds it in C++, a reference Python's garbage collector cannot see:
    a traceback there kept its frames (the job's closure: the group and its communicators) and the
    Work alive until exit, where nanobind reported the communicators' native objects as leaked."""
    try:
        copy = type(error).__new__(type(error), *error.args)
        copy.__dict__.update(getattr(error, "__dict__", {}))
    except Exception:  # noqa: BLE001 - an exception type that cannot be made again: its text
        copy = RuntimeError(f"{type(error).__name__}: {error}")
    BaseException.__init__(copy, *error.args)
    return copy


def _execute(job: Callable[[Work], None], work: Work) -> None:
    """Runs ``job(work)`` with the Work's stream current, then completes ``work`` with its outputs or
    the error (nothing raises out of here)."""
    with on_stream(work.stream):
        try:
            job(work)
        except BaseException as e:  # noqa: BLE001 - delivered through the Work and its Future
            work._fail(e)
        else:
            try:
                work._finish()
            except BaseException as e:  # noqa: BLE001 - a Future callback raised: the Work fails
                if not work._done.is_set():
                    work._error = e
                    work._done.set()


class Worker:
    """A FIFO of jobs and the thread that runs them (started on the first job)."""

    def __init__(self, name: str):
        self._name = name
        self._jobs: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._idle = True

    def submit(self, job: Callable[[Work], None], work: Work) -> Work:
        """Runs ``job(work)`` after every job submitted before; then completes ``work``.

        Submitted from this worker's own thread (a ``then`` callback of one of its Works, which torch
        runs where the Work completes: here), the job runs at once, before the jobs still queued:
        queued, a synchronous call in such a callback would wait for a job that waits for it. So the
        callback's call comes right after the call that completed, on every rank alike, whatever the
        caller's thread queued meanwhile."""
        with self._cv:
            if self._closed:
                raise InvalidArgumentError(
                    f"{self._name}: the process group was shut down (destroy_process_group); "
                    "create a new group to communicate"
                )
            inline = self._thread is threading.current_thread()
            if not inline:
                self._jobs.append((job, work))
                work._worker = self
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()
        if inline:
            _execute(job, work)
        return work

    def _run(self) -> None:
        while True:
            with self._cv:
                self._idle = not self._jobs
                if self._idle:
                    self._cv.notify_all()
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if not self._jobs:
                    return
                job, work = self._jobs.popleft()
                self._idle = False
            _execute(job, work)
            job = work = None  # the job's closure holds its group: keep nothing while idle

    def run_until(self, work: Work) -> None:
        """Called on this worker's own thread (a ``then`` callback of one of its Works) by ``wait()`` of
        ``work``, queued here behind the job running the callback: runs the queued jobs in order, up to
        and including ``work``'s, instead of waiting for itself. Elsewhere: nothing."""
        if self._thread is not threading.current_thread():
            return
        while not work._done.is_set():
            with self._cv:
                if not self._jobs:
                    return
                job, queued = self._jobs.popleft()
            _execute(job, queued)

    def pending(self) -> int:
        with self._cv:
            return len(self._jobs) + (0 if self._idle else 1)

    def drain(self, timeout: float | None) -> bool:
        """Waits until every submitted job has run; False if ``timeout`` ran out first."""
        with self._cv:
            if self._thread is None:
                return True
            return self._cv.wait_for(lambda: self._idle and not self._jobs, timeout)

    def close(self, reason: str, timeout: float | None = 10.0) -> None:
        """Stops taking jobs; jobs still queued fail with AbortedError(reason); joins the thread."""
        with self._cv:
            self._closed = True
            dropped = list(self._jobs)
            self._jobs.clear()
            self._cv.notify_all()
            thread = self._thread
        for _, work in dropped:
            work._fail(AbortedError(f"{self._name}: {reason}; this call was not started"))
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed
