"""A DistributedDataParallel communication hook that averages gradients through ncclz.

::

    import torch.distributed as dist, ncclz, ncclz.torch
    dist.init_process_group("gloo")                      # DDP's own group (buffers, bookkeeping)
    comm = ncclz.torch.communicator()                    # same ranks, through the same store
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = ncclz.torch.HookState(comm, compression=ncclz.Lossy(rel=1e-3))
    model.register_comm_hook(state, ncclz.torch.ddp_hook)

What one bucket does (``ddp_hook``):

1. The bucket's flat buffer is split by tensor (``bucket.parameters()`` and
   ``bucket.gradients()`` give shapes and offsets) into *lossy* ranges (tensors
   with >= ``min_elements`` elements and >= 2 dimensions) and *exact* ranges
   (biases, norm scales, small tensors). See :mod:`ncclz.torch._layout`.
2. With a lossy spec, one ``all_reduce(op="avg")`` with that spec carries all
   lossy ranges (gathered into one contiguous tensor when they are not already
   contiguous), and one exact ``all_reduce(op="avg")`` carries the rest. A
   bucket with only one class makes one call on the buffer itself, in place.
   With ``Lossless()`` or ``None`` the whole bucket is one call (results are
   bit-identical either way).
3. The averaged buffer is returned in a completed ``torch.futures.Future``
   (the hook returns when the bucket is done), or, with ``overlap=True``, in a
   Future that a background thread completes while backward goes on (buckets
   are averaged one at a time, in the order DDP hands them over, which is the
   same on every rank).

Error bound: with ``Lossy(abs=E)`` every lossy element of the averaged gradient
is within E of the exact average; with ``Lossy(rel=r)``, E = r * (max - min)
of the lossy part of that bucket over all ranks (``state.last_error_bound``).
Exact ranges are the float average of the gradients (as ``None`` would give).

Error feedback (``error_feedback=True``): each rank keeps, per bucket, the
part of its lossy contribution that quantization dropped and adds it to the
next step's gradient before compressing. ncclz quantizes each rank's input
once on the grid ``q * 2E`` (docs/ALGORITHMS.md), so the residual is
``x - round(x / 2E) * 2E`` with the call's E (the runtime's grid step is a few
ulps smaller than 2E; the difference is far below E). Memory starts at the
second iteration, after DDP has rebuilt its buckets (as PowerSGD does).
"""

from __future__ import annotations

import contextlib
import numbers
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..errors import InvalidArgumentError
from ..spec import Lossless
from . import _layout

__all__ = ["HookState", "StepStats", "ddp_hook"]

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass
class StepStats:
    """Traffic of one training step (all buckets of one backward pass) on this rank."""

    step: int
    calls: int = 0
    raw_bytes: int = 0
    wire_bytes: int = 0
    lossy_elements: int = 0
    exact_elements: int = 0
    max_error_bound: float = 0.0
    exact_fallbacks: int = 0

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.wire_bytes if self.wire_bytes else 1.0


class HookState:
    """State for :func:`ddp_hook`: the communicator, the spec and the per-bucket memory.

    comm: an ``ncclz.Communicator`` over the same ranks as the DDP process
        group (e.g. from :func:`ncclz.torch.communicator`).
    compression: ``None``, ``ncclz.Lossless()`` or ``ncclz.Lossy(abs=|rel=)``
        for the gradients (default ``Lossy(rel=1e-3)``).
    min_elements: tensors with fewer elements go exact (default 1024).
        A whole bucket below it makes one exact call.
    compress_1d: also compress 1-D tensors (biases, norms) of >= min_elements
        elements (default False).
    error_feedback: keep each rank's quantization residual per bucket and
        add it back next step (lossy specs only; default False).
    exact_compression: spec for the exact ranges, ``None`` (default) or
        ``ncclz.Lossless()`` (bit-identical, fewer bytes on smooth data).
    keep_history: number of :class:`StepStats` kept in ``state.history``.
    overlap: run the collectives on one background thread (in bucket order)
        and return pending Futures, so backward keeps computing the next
        buckets' gradients while ncclz communicates (it releases the GIL).
        DDP waits for every Future before ``backward()`` returns. Default False
        (the hook returns when its bucket is averaged). ``state.close()`` stops
        the thread.

    ``state.enabled = False`` or ``with state.disable():`` makes the hook
    average exactly (``compression=None``) through the same communicator.
    """

    def __init__(
        self,
        comm: Any,
        compression: Any = ...,
        min_elements: int = _layout.DEFAULT_MIN_ELEMENTS,
        compress_1d: bool = False,
        error_feedback: bool = False,
        exact_compression: Any = None,
        keep_history: int = 10_000,
        overlap: bool = False,
    ):
        if not (callable(getattr(comm, "all_reduce", None)) and hasattr(comm, "world_size")):
            raise InvalidArgumentError(
                f"HookState needs an ncclz.Communicator as comm (ncclz.torch.communicator() makes one "
                f"for the DDP ranks), got {type(comm).__name__}"
            )
        if compression is ...:
            from ..spec import Lossy

            compression = Lossy(rel=1e-3)
        self.comm = comm
        self.compression = _layout.check_spec(compression, "HookState compression")
        self.exact_compression = _layout.check_spec(exact_compression, "HookState exact_compression")
        if _layout.is_lossy(self.exact_compression):
            raise InvalidArgumentError(
                "HookState exact_compression must be None or ncclz.Lossless() (it carries the tensors "
                "kept exact); put the lossy spec in compression="
            )
        self.min_elements = _layout.check_min_elements(min_elements)
        self.compress_1d = bool(compress_1d)
        if error_feedback and not _layout.is_lossy(self.compression):
            raise InvalidArgumentError(
                f"error_feedback=True needs a lossy compression (ncclz.Lossy(...)), got {self.compression!r}: "
                "exact modes leave no residual"
            )
        self.error_feedback = bool(error_feedback)
        if (
            isinstance(keep_history, bool)
            or not isinstance(keep_history, numbers.Integral)
            or keep_history < 0
        ):
            raise InvalidArgumentError(f"keep_history must be an integer >= 0, got {keep_history!r}")
        self.keep_history = int(keep_history)
        self.enabled = True
        self.iteration = 0  # completed backward passes (counted on the last bucket)
        self.history: list = []
        self.last_error_bound = 0.0
        self._residuals: dict = {}
        self._current = StepStats(step=0)
        self._layouts: dict = {}
        self._lock = threading.Lock()
        self.overlap = bool(overlap)
        self._executor = None
        if self.overlap:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ncclz-ddp-hook")

    def close(self) -> None:
        """Stops the background thread of ``overlap=True`` (waits for pending buckets)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # ---- control -----------------------------------------------------------
    @contextlib.contextmanager
    def disable(self):
        """``with state.disable(): loss.backward()`` averages this step's gradients exactly."""
        previous = self.enabled
        self.enabled = False
        try:
            yield self
        finally:
            self.enabled = previous

    def reset_error_feedback(self) -> None:
        """Forgets the residuals (e.g. after loading a checkpoint)."""
        self._residuals.clear()

    @property
    def last_step(self) -> StepStats | None:
        """Traffic of the last completed step (None before the first)."""
        return self.history[-1] if self.history else None

    @property
    def totals(self) -> StepStats:
        """Traffic summed over the steps in ``history``."""
        t = StepStats(step=len(self.history))
        for s in self.history:
            t.calls += s.calls
            t.raw_bytes += s.raw_bytes
            t.wire_bytes += s.wire_bytes
            t.lossy_elements += s.lossy_elements
            t.exact_elements += s.exact_elements
            t.max_error_bound = max(t.max_error_bound, s.max_error_bound)
            t.exact_fallbacks += s.exact_fallbacks
        return t

    def __repr__(self) -> str:
        return (
            f"<ncclz.torch.HookState compression={self.compression!r} min_elements={self.min_elements} "
            f"error_feedback={self.error_feedback} enabled={self.enabled} iteration={self.iteration}>"
        )

    # ---- bookkeeping -----------------------------------------------------------
    def _note(self, numel: int, lossy: bool) -> None:
        st = self.comm.last_stats
        cur = self._current
        cur.calls += 1
        if st is not None:
            cur.raw_bytes += st.raw_bytes
            cur.wire_bytes += st.wire_bytes
            cur.max_error_bound = max(cur.max_error_bound, st.error_bound)
            cur.exact_fallbacks += int(bool(st.exact_fallback) and lossy)
        if lossy:
            cur.lossy_elements += numel
        else:
            cur.exact_elements += numel

    def _end_step(self) -> None:
        if self.keep_history:
            self.history.append(self._current)
            if len(self.history) > self.keep_history:
                del self.history[: len(self.history) - self.keep_history]
        self.iteration += 1
        self._current = StepStats(step=self.iteration)
        if self.iteration == 1:
            # DDP rebuilds its buckets after the first iteration: indices change meaning.
            self._residuals.clear()
            self._layouts.clear()


def _bucket_runs(state: HookState, bucket: Any, buf: torch.Tensor) -> list:
    """Lossy/exact runs of this bucket's buffer (cached per bucket index and size)."""
    index = int(bucket.index())
    key = (index, buf.numel())
    cached = state._layouts.get(key)
    if cached is not None:
        return cached
    params = list(bucket.parameters())
    grads = list(bucket.gradients())
    spans = []
    base = buf.storage_offset()
    same_storage = all(g.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr() for g in grads)
    pos = 0
    for i, g in enumerate(grads):
        n = int(g.numel())
        shape = tuple(params[i].shape) if i < len(params) else tuple(g.shape)
        offset = g.storage_offset() - base if same_storage else pos
        spans.append((offset, n, _layout.compressible(shape, n, state.min_elements, state.compress_1d)))
        pos += n
    if not grads:  # no per-tensor view: decide for the bucket as a whole
        n = buf.numel()
        spans = [(0, n, n >= state.min_elements)]
    result = _layout.runs(buf.numel(), spans)
    state._layouts[key] = result
    return result


def _gather(buf: torch.Tensor, runs: list) -> torch.Tensor:
    if len(runs) == 1:
        r = runs[0]
        return buf[r.start : r.start + r.count]
    return torch.cat([buf[r.start : r.start + r.count] for r in runs])


def _scatter(buf: torch.Tensor, runs: list, flat: torch.Tensor) -> None:
    if len(runs) == 1 and flat.data_ptr() == buf[runs[0].start :].data_ptr():
        return  # averaged in place
    pos = 0
    for r in runs:
        buf[r.start : r.start + r.count].copy_(flat[pos : pos + r.count])
        pos += r.count


def _lossy_average(state: HookState, index: int, x: torch.Tensor, spec: Any) -> None:
    """Averages ``x`` in place with the lossy spec, with error feedback if enabled."""
    use_ef = state.error_feedback and state.iteration >= 1
    if use_ef:
        res = state._residuals.get(index)
        if res is not None and res.numel() == x.numel():
            x.add_(res)
        before = x.clone()
    state.comm.all_reduce(x, op="avg", compression=spec)
    st = state.comm.last_stats
    if st is not None and st.error_bound > 0:
        state.last_error_bound = float(st.error_bound)
    if use_ef:
        if st is None or st.exact_fallback or not st.error_bound > 0:
            state._residuals.pop(index, None)
        else:
            step = 2.0 * float(st.error_bound)
            q = torch.round(before.double() / step) * step
            state._residuals[index] = (before.double() - q).to(x.dtype)


def ddp_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Averages one DDP gradient bucket through ``state.comm`` (see the module docstring).

    Register with ``ddp_model.register_comm_hook(state, ncclz.torch.ddp_hook)``.
    Returns a Future holding ``bucket.buffer()``, averaged in place: completed,
    or with ``HookState(overlap=True)`` completed by the background thread.
    """
    if not isinstance(state, HookState):
        raise InvalidArgumentError(
            f"ddp_hook's state must be an ncclz.torch.HookState, got {type(state).__name__}; "
            "register with model.register_comm_hook(ncclz.torch.HookState(comm, ...), ncclz.torch.ddp_hook)"
        )
    buf = bucket.buffer()
    if buf.device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"ddp_hook: bucket {bucket.index()} is on {buf.device}; ncclz takes CPU and CUDA tensors"
        )
    spec = state.compression if state.enabled else None
    lossy = _layout.is_lossy(spec)
    if lossy and buf.dtype not in _FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"ddp_hook: bucket {bucket.index()} holds {buf.dtype}; lossy compression {spec!r} needs "
            "float32, float64, float16 or bfloat16 gradients; use compression=ncclz.Lossless() or None"
        )
    runs = _bucket_runs(state, bucket, buf) if lossy and buf.numel() else None
    job = (
        buf,
        int(bucket.index()),
        bool(bucket.is_last()),
        spec,
        state.exact_compression if state.enabled else None,
        runs,
    )
    # A CUDA bucket is staged through host memory by the communicator, on the current stream of the
    # thread that calls it: the overlap thread takes backward's stream, so the copy follows the
    # gradient kernels; the Future (with the bucket's device) records that stream for DDP to wait on.
    cuda = buf.is_cuda
    stream = torch.cuda.current_stream(buf.device) if cuda else None
    fut: torch.futures.Future = torch.futures.Future(devices=[buf.device]) if cuda else torch.futures.Future()
    if state._executor is None:
        _average_bucket(state, *job)
        fut.set_result(buf)
        return fut

    def run():
        with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
            try:
                _average_bucket(state, *job)
            except BaseException as e:  # noqa: BLE001 - handed to DDP through the Future
                fut.set_exception(e)
            else:
                fut.set_result(buf)

    state._executor.submit(run)
    return fut


def _average_bucket(state: HookState, buf, index, is_last, spec, exact_spec, runs) -> None:
    """Averages ``buf`` in place (called in the hook, or on the overlap thread in bucket order)."""
    n = buf.numel()
    with state._lock:
        if n == 0:
            pass
        elif runs is None:
            # Lossless or None: one call on the whole bucket, bit-identical either way.
            whole = spec if isinstance(spec, Lossless) else exact_spec
            if n < state.min_elements and whole is not None:
                whole = None
            state.comm.all_reduce(buf, op="avg", compression=whole)
            state._note(n, False)
        else:
            lossy_runs = [r for r in runs if r.lossy]
            exact_runs = [r for r in runs if not r.lossy]
            if lossy_runs:
                x = _gather(buf, lossy_runs)
                _lossy_average(state, index, x, spec)
                state._note(x.numel(), True)
                _scatter(buf, lossy_runs, x)
            if exact_runs:
                x = _gather(buf, exact_runs)
                state.comm.all_reduce(x, op="avg", compression=exact_spec)
                state._note(x.numel(), False)
                _scatter(buf, exact_runs, x)
        if is_last:
            state._end_step()


# DDP compares the annotations as objects (not strings) in register_comm_hook.
ddp_hook.__annotations__ = {
    "state": HookState,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}
