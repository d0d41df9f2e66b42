"""The ``torch.distributed`` backend "ncclz": a Python ProcessGroup over ``ncclz.Communicator``.

::

    import torch.distributed as dist
    import ncclz.torch                       # registers the backend "ncclz"
    dist.init_process_group("ncclz")         # env://, file://, tcp:// as with gloo
    # or with compression settings for this group:
    dist.init_process_group("ncclz", pg_options=ncclz.torch.Options(compression=ncclz.Lossy(rel=1e-3)))

DDP, FSDP2 (``fully_shard``), DTensor and functional collectives then run on
ncclz unchanged. Registration (:func:`register`, done on import) uses torch's
extended API: for every group torch creates (the default one, ``new_group``,
device meshes) the creator gets the group's prefix store, rank, size, timeout
and name, and ``pg_options`` (:class:`ncclz.torch.Options`).

How a group works:

- Rendezvous: rank 0 makes an ncclz bootstrap id and puts it in the group's
  store under ``ncclz/comm/<n>`` (n counts this group's communicators per rank,
  kept in the store, so a group re-created on a persistent store gets a fresh
  key); the others wait for it within the group's timeout. Then every rank
  checks that all ranks passed the same options (a rank with bad options still
  joins, so that every rank fails with the reason instead of waiting).
- Collectives run on the group's worker thread in issue order (:mod:`._work`);
  each returns a Work at once. Point-to-point calls run on one communicator and
  worker per (sender, receiver) pair and direction, created on first use, so
  sends and receives between different pairs, and the two directions of a
  pair, never wait for each other; calls in one direction are matched in
  order (tags are not used). A send completes once its receiver has posted the
  matching recv (a synchronous send, as in NCCL).
  A recv without src needs ``Options(any_source=True)`` (see
  :meth:`ProcessGroupNCCLZ.recv_anysource`).
- CPU and CUDA tensors (CUDA staged through host memory by the Communicator); a
  CUDA call runs with the caller's current stream (see :mod:`._work`).
- ``opts.timeout`` of a call, where set, is that call's deadline
  (:meth:`ProcessGroupNCCLZ._watch`).
- Each tensor gets the compression its group's :class:`Options` give it
  (dtype, size, collective, op); see :mod:`ncclz.torch.options`.
- ``destroy_process_group`` (``shutdown``) waits for queued work, then closes
  the communicators; ``abort`` and interpreter exit abort them first, so no
  call outlives the process and no thread is left blocked.
- An op that raises before it queued its call (an argument error: the
  root's gather / scatter list, this rank's all-to-all split sizes, a tensor
  of the wrong size or kind) queues a refusal in the call's place
  (:mod:`._refusal`): where only this rank refused, the others' call fails at
  once with ``RemoteError`` naming it (instead of meeting this rank's next
  call, or waiting for the group's timeout); where every rank refused alike,
  each raises its own error and the group goes on.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .. import _core
from .. import store as _store
from ..comm import Communicator, make_unique_id
from ..errors import AbortedError, Error, InvalidArgumentError, RemoteError
from ..errors import TimeoutError as NcclzTimeoutError
from ..spec import Lossy
from . import _tensors as T
from ._refusal import count_queued, joins
from ._work import Work, Worker, caller_stream, timeout_seconds
from .options import Options

__all__ = ["BACKEND", "ProcessGroupNCCLZ", "Traffic", "register"]

#: The name to pass to ``init_process_group`` / ``new_group``.
BACKEND = "ncclz"

#: Devices the backend registers for. CUDA tensors are staged through host memory by
#: ncclz.Communicator (python/ncclz/_device.py); results stay on the input's device.
DEVICES = ("cpu", "cuda")

_live_groups: weakref.WeakSet = weakref.WeakSet()
_live_lock = threading.Lock()


class Traffic:
    """What one group's calls sent on this rank since the last ``reset_traffic()``."""

    __slots__ = ("calls", "compressed_calls", "max_error_bound", "raw_bytes", "wire_bytes")

    def __init__(self):
        self.calls = 0
        self.compressed_calls = 0
        self.raw_bytes = 0
        self.wire_bytes = 0
        self.max_error_bound = 0.0

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.wire_bytes if self.wire_bytes else 1.0

    def copy(self) -> Traffic:
        t = Traffic()
        for k in self.__slots__:
            setattr(t, k, getattr(self, k))
        return t

    def __repr__(self) -> str:
        return (
            f"Traffic(calls={self.calls}, compressed_calls={self.compressed_calls}, raw_bytes={self.raw_bytes}, "
            f"wire_bytes={self.wire_bytes}, ratio={self.ratio:.3g}, max_error_bound={self.max_error_bound:g})"
        )


def _seconds(timeout: Any) -> float:
    if isinstance(timeout, datetime.timedelta):
        s = timeout.total_seconds()
    elif timeout is None:
        s = 0.0
    else:
        s = float(timeout)
    return s if s > 0 else 1800.0


def _member_hosts(members: list | None) -> str | None:
    """NCCLZ_TOPO_HOSTS (every rank's host, for the whole job's ranks) for a communicator of the given
    global ranks: their hosts in member order (a group of some ranks, a point-to-point pair). None where
    the variable is unset, describes another number of ranks than it lists (left to the runtime to refuse),
    the members are unknown or they are the whole job in order (the variable applies as it is)."""
    spec = os.environ.get("NCCLZ_TOPO_HOSTS", "").strip()
    if not spec or not members:
        return None
    try:
        hosts = _core.comm.topology_hosts(spec)  # the runtime's own parser (ncclz/topology.hpp)
    except InvalidArgumentError:
        return None
    if list(members) == list(range(len(hosts))) or not all(0 <= g < len(hosts) for g in members):
        return None
    return ",".join(hosts[g] for g in members)


def _connect(store: Any, name: str, rank: int, size: int, timeout_s: float, options: Options,
             members: list | None = None) -> Communicator:
    """A communicator over ``store`` (see the module doc for the keys); ``members``: the global ranks of
    its ranks, in order, where known (their hosts from NCCLZ_TOPO_HOSTS: _member_hosts)."""
    gen = int(store.add(f"ncclz/{name}/count/{rank}", 1))
    key = f"ncclz/{name}/{gen}"
    if rank == 0:
        uid = make_unique_id(os.environ.get("NCCLZ_BOOTSTRAP_ADDR", ""))
        _store.publish(store, key, uid)
    else:
        uid = _store.fetch(store, key, timeout_s, rank)
    return Communicator(
        rank=rank,
        world_size=size,
        unique_id=uid,
        timeout=timeout_s,
        transport=options.transport,
        policy=options.policy,
        topo_hosts=_member_hosts(members),
    )


class _ErrorFeedback:
    """Residuals of lossy reductions, matched call by call across optimizer steps.

    A round is what happens between two ``optimizer.step()`` calls (any torch
    optimizer; counted by a global step hook). The k-th lossy call of a given
    (collective, dtype, element count) in a round gets the residual that the
    k-th such call of the previous round left."""

    _round = 0
    _hook = None

    def __init__(self):
        self._seen_round = _ErrorFeedback._round
        self._previous: dict = {}
        self._current: dict = {}
        self._counts: collections.Counter = collections.Counter()
        if _ErrorFeedback._hook is None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            _ErrorFeedback._hook = register_optimizer_step_post_hook(_ErrorFeedback._step)

    @staticmethod
    def _step(*_args: Any) -> None:
        _ErrorFeedback._round += 1

    def key(self, signature: tuple) -> tuple:
        if self._seen_round != _ErrorFeedback._round:
            self._seen_round = _ErrorFeedback._round
            self._previous, self._current = self._current, {}
            self._counts.clear()
        k = self._counts[signature]
        self._counts[signature] += 1
        return (*signature, k)

    def take(self, key: tuple) -> torch.Tensor | None:
        return self._previous.pop(key, None)

    def keep(self, key: tuple, residual: torch.Tensor) -> None:
        if len(self._current) < 65536:
            self._current[key] = residual

    def clear(self) -> None:
        self._previous.clear()
        self._current.clear()
        self._counts.clear()


def _residual(x: torch.Tensor, step: float) -> torch.Tensor:
    """What quantizing ``x`` on the grid ``q * step`` drops (the runtime's grid is a few ulps finer)."""
    xd = x.double()
    return (xd - torch.round(xd / step) * step).to(x.dtype)


class ProcessGroupNCCLZ(dist.ProcessGroup):
    """A ``torch.distributed`` group whose calls run on an ncclz communicator (see the module doc).

    Made by torch through :func:`register`'s creator; user code gets it from
    ``init_process_group`` / ``new_group``. Extra to the c10d interface:
    ``options``, ``communicator``, ``traffic()`` / ``reset_traffic()``,
    ``last_work_stats``.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: Any,
        group_id: str = "",
        options: Options | None = None,
        options_error: BaseException | None = None,
        global_ranks: list | None = None,
    ):
        super().__init__(rank, size)
        self._store = store
        self._rank_, self._size_ = int(rank), int(size)
        self._timeout_s = _seconds(timeout)
        self._group_id = str(group_id or "")
        self._group_name = self._group_id
        self._group_desc = ""
        self._global_ranks = list(global_ranks or [])
        self._options = options if options is not None else Options()
        self._lock = threading.Lock()
        self._traffic = Traffic()
        self._p2p: dict = {}
        self._claimed: collections.Counter = collections.Counter()  # messages claimed per sender (recvs)
        self._anysource: Worker | None = None
        self._shut = False
        self._failure: str | None = None
        self._ef = _ErrorFeedback() if self._options.error_feedback else None
        self.last_work_stats: list = []
        tag = f"ncclz-pg{self._group_id or ''}-r{rank}"
        self._comm = _connect(store, "comm", self._rank_, self._size_, self._timeout_s, self._options,
                              self._global_ranks if len(self._global_ranks) == self._size_ else None)
        try:
            self._agree(options_error)
        except BaseException:
            self._comm.abort("the group's options were refused")
            self._comm.close()
            raise
        self._worker = Worker(tag)
        with _live_lock:
            _live_groups.add(self)

    # ---- creation -----------------------------------------------------------------
    def _agree(self, options_error: BaseException | None) -> None:
        """Every rank checks that every rank has valid options equal to its own (one all-gather)."""
        me = self._rank_
        bad = options_error is not None
        try:
            self._store.set(
                f"ncclz/options/{me}", self._options.describe() if not bad else f"error: {options_error}"
            )
        except Exception:  # noqa: BLE001, S110 - only used to name the difference in the error below
            pass
        mine = np.array([1 if bad else 0, self._options.fingerprint()], dtype=np.int64)
        everyone = self._comm.all_gather(mine)
        if bad:
            raise options_error
        bad_ranks = [r for r in range(self._size_) if everyone[r, 0]]
        if bad_ranks:
            raise InvalidArgumentError(
                f"rank {me}: ncclz process group {self._group_id!r}: rank(s) {bad_ranks} passed invalid pg_options "
                "(their error says which); the group was not created"
            )
        differ = [r for r in range(self._size_) if everyone[r, 1] != mine[1]]
        if differ:
            other = differ[0]
            try:
                theirs = self._store.get(f"ncclz/options/{other}").decode()
            except Exception:  # noqa: BLE001 - the store may not give it back; the ranks are still named
                theirs = "(unavailable)"
            raise InvalidArgumentError(
                f"rank {me}: ncclz process group {self._group_id!r}: ranks disagree on pg_options: rank(s) {differ} "
                f"have other options than rank {me}; rank {me}: {self._options.describe()}, rank {other}: {theirs}. "
                "Pass the same ncclz.torch.Options on every rank"
            )

    # ---- identity -----------------------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    # torch names every group (_set_group_name) and looks groups up by name (functional collectives, DTensor)
    def setGroupName(self, name: str) -> None:
        self._group_name = str(name)

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = str(desc)

    def getGroupDesc(self) -> str:
        return self._group_desc

    @property
    def options(self) -> Options:
        return self._options

    @property
    def communicator(self) -> Communicator:
        """The group's ncclz communicator (its calls run on the group's worker thread: do not call it
        from elsewhere while the group is in use)."""
        return self._comm

    def traffic(self) -> Traffic:
        """A copy of this group's counters on this rank (collectives and point-to-point)."""
        with self._lock:
            return self._traffic.copy()

    def reset_traffic(self) -> None:
        with self._lock:
            self._traffic = Traffic()

    def reset_error_feedback(self) -> None:
        """Forgets the error-feedback residuals (e.g. after loading a checkpoint)."""
        if self._ef is not None:
            self._ef.clear()

    def __repr__(self) -> str:
        return f"<ncclz ProcessGroup {self._group_id!r} rank {self._rank_} of {self._size_} {self._options.describe()}>"

    # ---- running calls ------------------------------------------------------------------------
    def _note(self, work: Work, comm: Communicator) -> None:
        st = comm.last_stats
        if st is None:
            return
        work.stats.append(st)
        with self._lock:
            t = self._traffic
            t.calls += 1
            t.raw_bytes += int(st.raw_bytes)
            t.wire_bytes += int(st.wire_bytes)
            if st.compression != "none":
                t.compressed_calls += 1
            if st.error_bound > t.max_error_bound:
                t.max_error_bound = float(st.error_bound)

    def _submit(
        self,
        op: str,
        outputs: Any,
        job: Any,
        worker: Worker | None = None,
        opts: Any = None,
        work: Work | None = None,
        inputs: Any = None,
    ) -> Work:
        """Queues ``job`` on the group's worker (or ``worker``) and returns its Work (``work``: complete
        that one instead of a new one). ``opts.timeout``, where torch's options carry one that is set,
        is the call's own deadline, counted from now (see :meth:`_watch`)."""
        if self._shut:
            raise InvalidArgumentError(
                f"ncclz process group {self._group_id!r}: {op} after the group was shut down "
                "(destroy_process_group); create a new group"
            )
        if self._failure is not None:
            raise AbortedError(
                f"ncclz process group {self._group_id!r}: {op} on a group whose communication failed earlier "
                f"({self._failure}); create a new group (or restart the job)"
            )
        if work is None:
            work = self._work(op, outputs, inputs)
        timer = self._watch(op, work, timeout_seconds(getattr(opts, "timeout", None)))

        def run(w: Work) -> None:
            try:
                if (
                    self._failure is not None
                ):  # an earlier call of this group failed after this one was issued
                    raise AbortedError(
                        f"ncclz process group {self._group_id!r}: {op} not started: a call issued before it failed "
                        f"({self._failure})"
                    )
                try:
                    job(w)
                except RemoteError as e:
                    self._fail(e)
                    raise
            finally:
                if timer is not None:
                    timer.cancel()

        queued = (worker or self._worker).submit(run, work)
        count_queued()
        return queued

    def _work(self, op: str, outputs: Any, inputs: Any = None) -> Work:
        """A Work for ``outputs``; CUDA calls remember the caller's current stream (the job runs with it,
        see :mod:`._work`) and give the Future the outputs' devices."""
        stream = caller_stream([outputs, inputs])
        devices = T.cuda_devices(outputs) if stream is not None else None
        return Work(op, outputs, self._abort_on_timeout, devices=devices, stream=stream)

    def _watch(self, op: str, work: Work, seconds: float | None) -> threading.Timer | None:
        """A per-call timeout (c10d's ``opts.timeout``, e.g. ``pg.allreduce([t], opts)``): if ``work``
        has not completed ``seconds`` after it was issued, it fails with ncclz.TimeoutError and the
        group is aborted, as for ``Work.wait(timeout)`` (a collective cannot be taken back once peers may
        be in it; aborting makes them fail at once). Unset (torch's default): the group's timeout."""
        if seconds is None:
            return None

        def fire() -> None:
            if work.is_completed():
                return
            msg = (
                f"ncclz process group {self._group_id!r}: {op} did not complete within its timeout of {seconds:g} s "
                "(opts.timeout); the group's communicator was aborted"
            )
            work._fail(NcclzTimeoutError(msg))
            self.abort(msg)

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.name = f"ncclz-pg{self._group_id}-timeout"
        timer.start()
        return timer

    def _fail(self, error: BaseException) -> None:
        """A call failed because of a peer (or an abort): the group is dead. Its communicators are
        aborted and closed now, so the peers still waiting on this rank's links see them close and fail
        too (a failure travels around the group instead of leaving ranks waiting for the timeout)."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = f"{type(error).__name__}: {error}"
        for c in self._comms():
            try:
                c.abort(f"ncclz process group {self._group_id!r} failed: {error}")
                c.close()
            except Exception:  # noqa: BLE001, S110 - already failing; closing is best effort
                pass

    def _abort_on_timeout(self, reason: str) -> None:
        self.abort(reason)

    def _spec(self, collective: str, t: torch.Tensor, sum_like: bool = False) -> Any:
        if t.dtype.is_complex or t.dtype not in T.NATIVE:
            return None
        return self._options.spec_for(collective, t, sum_like)

    # reductions -------------------------------------------------------------------------------
    def _reduce_into(
        self,
        comm: Communicator,
        work: Work,
        coll: str,
        src: torch.Tensor,
        op: T.ReduceOp,
        spec: Any,
        out: torch.Tensor | None,
        root: int | None = None,
    ) -> None:
        """One all_reduce (out None: in place on src), reduce (root given: in place on the root's src,
        src only read elsewhere) or reduce_scatter (into out) of native tensors, with PREMUL_SUM's
        factor and error feedback."""
        writable = out is None and (root is None or root == self._rank_)  # src receives the result
        x = src
        if op.factor is not None:
            x = T.scale(x, op.factor, in_place=writable)
        ef = self._ef if isinstance(spec, Lossy) and op.sum_like else None
        key = before = None
        if ef is not None:
            key = ef.key((coll, str(x.dtype), x.numel()))
            res = ef.take(key)
            if res is not None:
                x = x.add_(res) if (writable or x is not src) else x + res
            before = x.clone()
        if root is not None:
            comm.reduce(x, root=root, op=op.name, compression=spec)
            if writable and x is not src:
                src.copy_(x)
        elif out is None:
            comm.all_reduce(x, op=op.name, compression=spec)
            if x is not src:
                src.copy_(x)
        else:
            comm.reduce_scatter(x, op=op.name, compression=spec, out=out)
        self._note(work, comm)
        if ef is not None:
            st = comm.last_stats
            if st is not None and st.error_bound > 0 and not st.exact_fallback:
                eb = st.error_bound / (self._size_ if op.name == "sum" else 1)
                ef.keep(key, _residual(before, 2.0 * eb))

    @joins("all_reduce")
    def allreduce(self, tensors: list, opts: Any = None) -> Work:
        t = T.check_one(tensors, "all_reduce")
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        staged, name, cast = T.reducible(t, op, "all_reduce")
        spec = self._spec("all_reduce", t, op.sum_like) if cast is None else None
        op_run = T.ReduceOp(op.kind, name, op.factor)

        def job(work: Work) -> None:
            self._reduce_into(self._comm, work, "all_reduce", staged, op_run, spec, None)
            T.write_back(t, staged, cast)

        return self._submit("all_reduce", tensors, job, opts=opts)

    @joins("all_reduce")
    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> Work:
        ts = [T.check_tensor(t, "all_reduce_coalesced") for t in tensors]
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        # one call per (dtype, compression) class, in first-appearance order (the same on every rank)
        classes: dict = {}
        for i, t in enumerate(ts):
            _, _, cast = T.reducible(t, op, "all_reduce_coalesced")  # checks dtype/op support early
            spec = self._spec("all_reduce", t, op.sum_like) if cast is None else None
            classes.setdefault((t.dtype, spec), []).append(i)

        def job(work: Work) -> None:
            for (_, spec), idx in classes.items():
                members = [ts[i] for i in idx]
                flat = torch.cat([m.reshape(-1) for m in members]) if len(members) > 1 else members[0]
                staged, name, cast = T.reducible(flat, op, "all_reduce_coalesced")
                self._reduce_into(
                    self._comm, work, "all_reduce", staged, T.ReduceOp(op.kind, name, op.factor), spec, None
                )
                result = staged if cast is None else staged.to(cast)
                if len(members) == 1 and result is members[0]:
                    continue
                if result.dtype != members[0].dtype and members[0].is_complex():
                    result = torch.view_as_complex(result)
                pos = 0
                for m in members:
                    n = m.numel()
                    m.copy_(result.reshape(-1)[pos : pos + n].view(m.shape))
                    pos += n

        return self._submit("all_reduce_coalesced", tensors, job, opts=opts)

    def _rs_job(self, out: torch.Tensor, inp: torch.Tensor, op: T.ReduceOp, what: str):
        """A job reducing ``inp`` (size * out.numel() elements) and scattering block r into ``out``."""
        w = self._size_
        T.same_device([out, inp], what)
        if inp.dtype != out.dtype:
            raise InvalidArgumentError(f"{what}: input {inp.dtype} and output {out.dtype} differ")
        if inp.numel() != w * out.numel():
            raise InvalidArgumentError(
                f"{what}: the input has {inp.numel()} elements, expected world size {w} x output "
                f"{out.numel()} = {w * out.numel()}"
            )
        staged_in, name, cast = T.reducible(inp, op, what)
        spec = self._spec("reduce_scatter", inp, op.sum_like) if cast is None else None
        direct = cast is None and out.is_contiguous() and out.dtype in T.NATIVE and not out.is_complex()
        op_run = T.ReduceOp(op.kind, name, op.factor)

        def job(work: Work) -> None:
            x = staged_in.clone() if T.overlaps(staged_in, out) else staged_in  # output inside the input
            if (
                direct
                and x.dim() >= 1
                and x.shape[0] == w * (out.shape[0] if out.dim() else 0)
                and tuple(x.shape[1:]) == tuple(out.shape[1:])
            ):
                target, x_run = out, x  # natural shapes: the codec sees the rows
            else:
                x_run = x.reshape(-1)
                target = (
                    out.reshape(-1)
                    if direct
                    else torch.empty(x_run.numel() // w, dtype=x_run.dtype, device=x_run.device)
                )
            self._reduce_into(self._comm, work, "reduce_scatter", x_run, op_run, spec, target)
            if not direct:
                T.write_back(out, target, cast)

        return job

    @joins("reduce_scatter")
    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Work:
        out = T.check_tensor(output, "reduce_scatter_single output")
        inp = T.check_tensor(input, "reduce_scatter_single input")
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._submit(
            "reduce_scatter_single",
            [output],
            self._rs_job(out, inp, op, "reduce_scatter_single"),
            opts=opts,
        )

    _reduce_scatter_base = reduce_scatter_single

    @joins("reduce_scatter")
    def reduce_scatter_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Work:
        if len(outputs) != len(inputs):
            raise InvalidArgumentError(
                f"reduce_scatter_single_coalesced: {len(outputs)} outputs but {len(inputs)} inputs"
            )
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        jobs = [
            self._rs_job(
                T.check_tensor(o, "reduce_scatter output"),
                T.check_tensor(i, "reduce_scatter input"),
                op,
                "reduce_scatter_single_coalesced",
            )
            for o, i in zip(outputs, inputs)
        ]

        def job(work: Work) -> None:
            for j in jobs:
                j(work)

        return self._submit("reduce_scatter_single_coalesced", list(outputs), job, opts=opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    @joins("reduce_scatter")
    def reduce_scatter(self, output_tensors: list, input_lists: list, opts: Any = None) -> Work:
        out = T.check_one(output_tensors, "reduce_scatter output")
        if not isinstance(input_lists, (list, tuple)) or len(input_lists) != 1:
            raise InvalidArgumentError("reduce_scatter: the ncclz backend takes one input list per process")
        parts = [T.check_tensor(p, "reduce_scatter input") for p in input_lists[0]]
        w = self._size_
        if len(parts) != w:
            raise InvalidArgumentError(f"reduce_scatter: {len(parts)} input tensors, expected world size {w}")
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        T.same_device([out, *parts], "reduce_scatter")
        if any(p.dtype != out.dtype for p in parts):
            raise InvalidArgumentError("reduce_scatter: the input tensors' dtypes must match the output's")
        if all(p.numel() == out.numel() for p in parts):
            flat = torch.cat([p.reshape(-1) for p in parts]).view(w * out.numel()) if parts else out
            return self._submit(
                "reduce_scatter",
                output_tensors,
                self._rs_job(out, flat, op, "reduce_scatter"),
                opts=opts,
            )
        # uneven blocks (reduce_scatter_v): one all_reduce of the concatenation, each rank keeps its block
        if parts[self._rank_].numel() != out.numel():
            raise InvalidArgumentError(
                f"reduce_scatter: input block {self._rank_} has {parts[self._rank_].numel()} elements but the "
                f"output {out.numel()}"
            )
        sizes = [p.numel() for p in parts]
        flat = torch.cat([p.reshape(-1) for p in parts])
        staged, name, cast = T.reducible(flat, op, "reduce_scatter")
        spec = self._spec("reduce_scatter", flat, op.sum_like) if cast is None else None
        start = sum(sizes[: self._rank_])

        def job(work: Work) -> None:
            self._reduce_into(
                self._comm, work, "all_reduce", staged, T.ReduceOp(op.kind, name, op.factor), spec, None
            )
            mine = staged[start : start + out.numel()]
            T.write_back(out, mine.to(cast) if cast is not None else mine, None)

        return self._submit("reduce_scatter", output_tensors, job, opts=opts)

    # data movement --------------------------------------------------------------------------------
    def _ag_job(self, out: torch.Tensor, inp: torch.Tensor, what: str):
        w = self._size_
        T.same_device([out, inp], what)
        if inp.dtype != out.dtype:
            raise InvalidArgumentError(f"{what}: input {inp.dtype} and output {out.dtype} differ")
        if out.numel() != w * inp.numel():
            raise InvalidArgumentError(
                f"{what}: the output has {out.numel()} elements, expected world size {w} x input "
                f"{inp.numel()} = {w * inp.numel()}"
            )
        x, _ = T.movable(inp)
        spec = self._spec("all_gather", inp)
        direct = out.is_contiguous() and out.dtype in T.NATIVE
        in_place = T.overlaps(x, out)  # the input is this rank's block of the output (FSDP2 does this)

        def job(work: Work) -> None:
            src = x.clone() if in_place else x
            if direct:
                self._comm.all_gather(src, compression=spec, out=out.view(w, *x.shape))
            else:
                buf = self._comm.all_gather(src, compression=spec)
                out.copy_(_from_bytes(buf, out))
            self._note(work, self._comm)

        return job

    @joins("all_gather")
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Work:
        out = T.check_tensor(output, "all_gather_single output")
        inp = T.check_tensor(input, "all_gather_single input")
        return self._submit(
            "all_gather_single", [output], self._ag_job(out, inp, "all_gather_single"), opts=opts
        )

    _allgather_base = all_gather_single

    @joins("all_gather")
    def all_gather_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Work:
        if len(outputs) != len(inputs):
            raise InvalidArgumentError(
                f"all_gather_single_coalesced: {len(outputs)} outputs but {len(inputs)} inputs"
            )
        jobs = [
            self._ag_job(
                T.check_tensor(o, "all_gather output"),
                T.check_tensor(i, "all_gather input"),
                "all_gather_single_coalesced",
            )
            for o, i in zip(outputs, inputs)
        ]

        def job(work: Work) -> None:
            for j in jobs:
                j(work)

        return self._submit("all_gather_single_coalesced", list(outputs), job, opts=opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _gather_list_job(self, outs: list, inp: torch.Tensor, what: str):
        """All-gather of ``inp`` into the list ``outs`` (one tensor per rank, sizes may differ)."""
        w = self._size_
        if len(outs) != w:
            raise InvalidArgumentError(f"{what}: {len(outs)} output tensors, expected world size {w}")
        T.same_device([inp, *outs], what)
        for o in outs:
            T.check_tensor(o, f"{what} output")
            if o.dtype != inp.dtype:
                raise InvalidArgumentError(f"{what}: output {o.dtype} differs from the input's {inp.dtype}")
        if outs[self._rank_].numel() != inp.numel():
            raise InvalidArgumentError(
                f"{what}: output {self._rank_} has {outs[self._rank_].numel()} elements but this rank's input "
                f"{inp.numel()}"
            )
        x, _ = T.movable(inp)
        even = all(o.numel() == inp.numel() for o in outs)
        spec = self._spec("all_gather", inp) if even else None

        def job(work: Work) -> None:
            if even:
                buf = self._comm.all_gather(x, compression=spec)
                self._note(work, self._comm)
                for r, o in enumerate(outs):
                    _copy_bytes_into(o, buf[r])
                return
            # uneven sizes (all_gather_v): one broadcast per rank
            for r, o in enumerate(outs):
                if r == self._rank_:
                    self._comm.broadcast(x, root=r)
                    _copy_bytes_into(o, x)
                else:
                    y, staged = T.movable(o)
                    self._comm.broadcast(y, root=r)
                    if staged:
                        _copy_bytes_into(o, y)
                self._note(work, self._comm)

        return job

    @joins("all_gather")
    def allgather(self, output_lists: list, input_tensors: list, opts: Any = None) -> Work:
        inp = T.check_one(input_tensors, "all_gather input")
        if not isinstance(output_lists, (list, tuple)) or len(output_lists) != 1:
            raise InvalidArgumentError("all_gather: the ncclz backend takes one output list per process")
        return self._submit(
            "all_gather",
            output_lists,
            self._gather_list_job(list(output_lists[0]), inp, "all_gather"),
            opts=opts,
        )

    @joins("all_gather")
    def allgather_coalesced(self, output_lists: list, input_tensors: list, opts: Any = None) -> Work:
        # output_lists[r][i] receives rank r's input i
        w = self._size_
        if len(output_lists) != w:
            raise InvalidArgumentError(
                f"all_gather_coalesced: {len(output_lists)} output lists, expected {w}"
            )
        inputs = [T.check_tensor(t, "all_gather_coalesced input") for t in input_tensors]
        for r in range(w):
            if len(output_lists[r]) != len(inputs):
                raise InvalidArgumentError(
                    f"all_gather_coalesced: output list {r} has {len(output_lists[r])} tensors, expected "
                    f"{len(inputs)} (one per input)"
                )
        jobs = [
            self._gather_list_job([output_lists[r][i] for r in range(w)], t, "all_gather_coalesced")
            for i, t in enumerate(inputs)
        ]

        def job(work: Work) -> None:
            for j in jobs:
                j(work)

        return self._submit("all_gather_coalesced", output_lists, job, opts=opts)

    @joins("broadcast", "rooted")
    def broadcast(self, tensors: list, opts: Any = None) -> Work:
        t = T.check_one(tensors, "broadcast")
        root = int(opts.rootRank) if opts is not None else 0
        if opts is not None and int(getattr(opts, "rootTensor", 0)) != 0:
            raise InvalidArgumentError("broadcast: rootTensor must be 0 (one tensor per process)")
        if not 0 <= root < self._size_:
            raise InvalidArgumentError(
                f"broadcast: root {root} is not a rank of this group (size {self._size_})"
            )
        x, staged = T.movable(t)
        spec = self._spec("broadcast", t)

        def job(work: Work) -> None:
            self._comm.broadcast(x, root=root, compression=spec)
            self._note(work, self._comm)
            if staged:
                _copy_bytes_into(t, x)

        return self._submit("broadcast", tensors, job, opts=opts)

    def barrier(self, opts: Any = None) -> Work:
        def job(work: Work) -> None:
            self._comm.barrier()

        return self._submit("barrier", [], job, opts=opts)

    # point to point ----------------------------------------------------------------------------
    def _p2p_channel(self, src: int, dst: int) -> tuple:
        """(worker, holder) of the (src -> dst) direction; its communicator is made on its worker."""
        key = (src, dst)
        with self._lock:
            ch = self._p2p.get(key)
            if ch is None:
                ch = (Worker(f"ncclz-pg{self._group_id}-p2p{src}to{dst}-r{self._rank_}"), {})
                self._p2p[key] = ch
        return ch

    def _p2p_comm(self, holder: dict, src: int, dst: int) -> Communicator:
        comm = holder.get("comm")
        if comm is None:
            comm = _connect(
                self._store,
                f"p2p/{src}to{dst}",
                0 if self._rank_ == src else 1,
                2,
                self._timeout_s,
                self._options,
                [self._global(src), self._global(dst)],
            )
            holder["comm"] = comm
        return comm

    @contextlib.contextmanager
    def _pair_errors(self, src: int, dst: int) -> Iterator[None]:
        """Errors of the (src -> dst) pair's communicator, led by who this rank is in the group: that
        communicator numbers the sender 0 and the receiver 1, which its own messages use."""
        try:
            yield
        except Error as e:
            me, other = ("sending to", dst) if src == self._rank_ else ("receiving from", src)
            lead = (
                f"ncclz process group {self._group_id!r}: rank {self._rank_} {me} rank {other} "
                f"(below, as their pair's link numbers them: sender rank {src} = 0, receiver rank {dst} = 1): "
            )
            try:
                named = type(e)(lead + str(e))
            except Exception:  # noqa: BLE001 - an error type that takes other arguments: as it was
                raise e from None
            named.__dict__.update(getattr(e, "__dict__", {}))
            raise named from None

    def _global(self, r: int) -> int:
        """The job-wide rank of this group's rank r."""
        return self._global_ranks[r] if len(self._global_ranks) == self._size_ else r

    def _check_peer(self, peer: int, what: str) -> int:
        peer = int(peer)
        if not 0 <= peer < self._size_ or peer == self._rank_:
            raise InvalidArgumentError(
                f"{what}: peer {peer} is not another rank of this group (rank {self._rank_} of {self._size_})"
            )
        return peer

    @joins("send", "p2p")
    def send(self, tensors: list, dst: int, tag: int = 0) -> Work:
        t = T.check_one(tensors, "send")
        dst = self._check_peer(dst, "send")
        x, _ = T.movable(t)
        spec = self._spec("send", t)
        worker, holder = self._p2p_channel(self._rank_, dst)

        announce = self._options.any_source

        def job(work: Work) -> None:
            if announce:  # a recv without src on dst counts the sends to it (before the pair's link exists)
                self._store.add(_sent_key(self._rank_, dst), 1)
            with self._pair_errors(self._rank_, dst):
                comm = self._p2p_comm(holder, self._rank_, dst)
                comm.send(x, 1, compression=spec)
            self._note(work, comm)

        return self._submit("send", tensors, job, worker)

    @joins("recv", "p2p")
    def recv(self, tensors: list, src: int, tag: int = 0) -> Work:
        t = T.check_one(tensors, "recv")
        src = self._check_peer(src, "recv")
        with self._lock:
            self._claimed[src] += 1  # this recv takes the next message from src (recv_anysource counts it)
        return self._post_recv(tensors, t, src)

    def _post_recv(self, tensors: list, t: torch.Tensor, src: int, work: Work | None = None) -> Work:
        x, staged = T.movable(t)
        spec = self._spec("send", t)
        worker, holder = self._p2p_channel(src, self._rank_)

        def job(w: Work) -> None:
            with self._pair_errors(src, self._rank_):
                comm = self._p2p_comm(holder, src, self._rank_)
                comm.recv(x, 0, compression=spec)
            self._note(w, comm)
            if staged:
                _copy_bytes_into(t, x)
            w.source = src

        return self._submit("recv", tensors, job, worker, work=work)

    def recv_anysource(self, tensors: list, tag: int = 0) -> Work:
        """A recv from whichever rank has sent this rank a message that no recv has claimed yet.

        Needs ``Options(any_source=True)`` on every rank (then each send counts itself in the group's
        store). A thread of its own polls the counters of the ranks in turn (from 1 ms, backing off to
        20 ms) and, once one shows a message more than this rank's recvs from it have claimed, posts the
        recv on that pair's link; the Work then completes with that recv and ``_source_rank()`` names
        the rank. No such message within the group's timeout: ncclz.TimeoutError. A recv with src
        posted before the sender is picked claims its message first."""
        t = T.check_one(tensors, "recv")
        if not self._options.any_source:
            raise InvalidArgumentError(
                f"rank {self._rank_}: recv from any source (dist.recv / irecv without src) needs "
                "pg_options=ncclz.torch.Options(any_source=True) (or NCCLZ_TORCH_ANY_SOURCE=1) on every rank of the "
                "group: every send then counts itself in the group's store (one store add per send), which a recv "
                "without src reads to pick its sender. Otherwise pass src="
            )
        outer = self._work("recv_anysource", tensors)
        with self._lock:
            if self._anysource is None:
                self._anysource = Worker(f"ncclz-pg{self._group_id}-anysource-r{self._rank_}")
            picker = self._anysource

        def pick(_: Work) -> None:
            try:
                src = self._pick_sender()
                self._post_recv(tensors, t, src, work=outer)
            except BaseException as e:  # noqa: BLE001 - delivered through the caller's Work
                outer._fail(e)

        self._submit("recv_anysource (picking the sender)", [], pick, picker)
        return outer

    def _pick_sender(self) -> int:
        deadline = time.monotonic() + self._timeout_s
        delay = 0.001
        peers = [r for r in range(self._size_) if r != self._rank_]
        start = 0
        while True:
            for k in range(len(peers)):
                r = peers[(start + k) % len(peers)]
                sent = int(self._store.add(_sent_key(r, self._rank_), 0))
                with self._lock:
                    if sent > self._claimed[r]:
                        self._claimed[r] += 1
                        return r
            if self._shut or self._failure is not None:
                raise AbortedError(
                    f"ncclz process group {self._group_id!r}: recv from any source: the group closed"
                )
            if time.monotonic() > deadline:
                raise NcclzTimeoutError(
                    f"rank {self._rank_}: recv from any source: no rank of group {self._group_id!r} sent a message "
                    f"that no recv had claimed within the group's timeout of {self._timeout_s:g} s"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
            start += 1

    # rooted collectives and all-to-all --------------------------------------------------------------
    def _root(self, opts: Any, what: str) -> int:
        root = int(opts.rootRank) if opts is not None else 0
        if not 0 <= root < self._size_:
            raise InvalidArgumentError(
                f"{what}: root {root} is not a rank of this group (size {self._size_})"
            )
        if opts is not None and int(getattr(opts, "rootTensor", 0)) != 0:
            raise InvalidArgumentError(f"{what}: rootTensor must be 0 (one tensor per process)")
        return root

    def _refuse(self, op: str, error: InvalidArgumentError) -> None:
        """Raises ``error``, an argument error of ``op`` that only this rank can see (a root-only list,
        this rank's split sizes), named; the op's :func:`._refusal.joins` then takes part in the others'
        call as refused, which fails it there at once with RemoteError naming this rank."""
        raise InvalidArgumentError(
            f"rank {self._rank_}: {error}. The call was cancelled on every rank (the others' {op} fails with "
            "RemoteError naming this rank)"
        ) from None

    def _join_refused(self, kind: str, target: int, error: BaseException) -> None:
        """Queues this rank's part in a call it refused before queueing it (see :mod:`._refusal`): the
        runtime's refusal of ``kind`` (``target``: its root, or for send / recv the peer), in order on the
        worker the call would have run on. Nothing where the group is shut down or failed."""
        why = f"{type(error).__name__}: {error}"
        if kind in ("send", "recv"):
            src, dst = (self._rank_, target) if kind == "send" else (target, self._rank_)
            worker, holder = self._p2p_channel(src, dst)
            announce = kind == "send" and self._options.any_source

            def job(work: Work) -> None:
                if announce:  # a recv from any source on dst picks this refusal like a send
                    self._store.add(_sent_key(src, dst), 1)
                with self._pair_errors(src, dst):
                    comm = self._p2p_comm(holder, src, dst)
                    comm._native.refuse(kind, 1 if kind == "send" else 0, why)

        else:
            worker = self._worker

            def job(work: Work) -> None:
                self._comm._native.refuse(kind, target, why)

        try:
            self._submit(f"{kind} (refused on rank {self._rank_})", [], job, worker)
        except Exception:  # noqa: BLE001, S110 - a group already shut down or failed: nobody waits
            pass

    def _root_list(self, lists: Any, like: torch.Tensor, what: str, name: str) -> list:
        """The root's list of world-size tensors (``gather_list`` / ``scatter_list``), each like ``like``."""
        w = self._size_
        if not isinstance(lists, (list, tuple)) or len(lists) != 1:
            raise InvalidArgumentError(f"{what}: the root takes one {name} per process")
        ts = list(lists[0])
        if len(ts) != w:
            raise InvalidArgumentError(
                f"{what}: {name} has {len(ts)} tensors on the root, expected world size {w}"
            )
        for r, t in enumerate(ts):
            T.check_tensor(t, f"{what} {name}[{r}]")
            if t.device != like.device:
                raise InvalidArgumentError(
                    f"{what}: {name}[{r}] is on {t.device} but this rank's tensor on {like.device}"
                )
            if t.dtype != like.dtype:
                raise InvalidArgumentError(
                    f"{what}: {name}[{r}] is {t.dtype} but this rank's tensor {like.dtype}"
                )
            if t.numel() != like.numel():
                raise InvalidArgumentError(
                    f"{what}: {name}[{r}] has {t.numel()} elements (shape {tuple(t.shape)}) but this rank's tensor "
                    f"{like.numel()} (shape {tuple(like.shape)}); every block has the same size"
                )
        return ts

    @joins("reduce", "rooted")
    def reduce(self, tensors: list, opts: Any = None) -> Work:
        t = T.check_one(tensors, "reduce")
        root = self._root(opts, "reduce")
        op = T.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        staged, name, cast = T.reducible(t, op, "reduce")
        spec = self._spec("reduce", t, op.sum_like) if cast is None else None
        op_run = T.ReduceOp(op.kind, name, op.factor)
        is_root = self._rank_ == root

        def job(work: Work) -> None:
            self._reduce_into(self._comm, work, "reduce", staged, op_run, spec, None, root)
            if is_root:
                T.write_back(t, staged, cast)

        return self._submit("reduce", tensors, job, opts=opts)

    @joins("gather", "rooted")
    def gather(self, output_lists: list, input_tensors: list, opts: Any = None) -> Work:
        inp = T.check_one(input_tensors, "gather input")
        root = self._root(opts, "gather")
        outs = None
        if self._rank_ == root:
            try:
                outs = self._root_list(output_lists, inp, "gather", "gather_list")
            except InvalidArgumentError as e:
                self._refuse("gather", e)
        x, _ = T.movable(inp)
        spec = self._spec("gather", inp)

        def job(work: Work) -> None:
            buf = self._comm.gather(x, root=root, compression=spec)
            self._note(work, self._comm)
            if outs is not None:
                for r, o in enumerate(outs):
                    _copy_bytes_into(o, buf[r])

        return self._submit("gather", output_lists if outs is not None else [], job, opts=opts, inputs=[inp])

    @joins("scatter", "rooted")
    def scatter(self, output_tensors: list, input_lists: list, opts: Any = None) -> Work:
        out = T.check_one(output_tensors, "scatter output")
        root = self._root(opts, "scatter")
        y, staged = T.movable(out)
        y1 = y.reshape(1) if y.dim() == 0 else y  # blocks along the first dimension
        x = None
        if self._rank_ == root:
            try:
                parts = self._root_list(input_lists, out, "scatter", "scatter_list")
            except InvalidArgumentError as e:
                self._refuse("scatter", e)
            x = torch.cat([T.movable(p)[0].reshape(y1.shape) for p in parts])  # read now, as the call's input
        spec = self._spec("scatter", out)

        def job(work: Work) -> None:
            self._comm.scatter(x, root=root, compression=spec, out=y1)
            self._note(work, self._comm)
            if staged:
                _copy_bytes_into(out, y)

        return self._submit("scatter", output_tensors, job, opts=opts)

    def _a2a_job(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list, in_splits: list, what: str):
        """A job exchanging the rows of ``inp`` into ``out`` (``in_splits[j]`` rows to rank j,
        ``out_splits[j]`` rows from rank j; both empty: equal blocks)."""
        w = self._size_
        T.same_device([out, inp], what)
        if inp.dtype != out.dtype:
            raise InvalidArgumentError(f"{what}: input {inp.dtype} and output {out.dtype} differ")
        rows_in, row_in = T.rows(inp)
        rows_out, row_out = T.rows(out)
        uneven = bool(in_splits) or bool(out_splits)
        sc = _splits(in_splits, rows_in, w, "input", what)
        rc = _splits(out_splits, rows_out, w, "output", what)
        if row_in != row_out:
            raise InvalidArgumentError(
                f"{what}: a row of the input has {row_in} elements (shape {tuple(inp.shape)}) but a row of the "
                f"output {row_out} (shape {tuple(out.shape)}); they must match"
            )
        if not uneven and inp.numel() != out.numel():
            raise InvalidArgumentError(
                f"{what}: input has {inp.numel()} elements but output {out.numel()}; with equal blocks they match"
            )
        x = T.row_major(inp)
        if T.overlaps(inp, out):
            x = x.clone()  # the runtime wants separate buffers
        direct = out.dtype in T.NATIVE and out.is_contiguous()
        target = (
            out.reshape(rows_out, *x.shape[1:])
            if direct
            else torch.empty((rows_out, *x.shape[1:]), dtype=x.dtype, device=x.device)
        )
        # equal blocks: every rank's input has the same size; uneven: decided in the job (below)
        spec = self._spec("all_to_all", inp) if not uneven else None
        eligible = (
            uneven
            and inp.dtype in T.NATIVE
            and self._options.compression is not None
            and inp.dtype in self._options.dtypes
        )

        def job(work: Work) -> None:
            comp = spec
            if eligible:
                # min_elements is compared with the average rank's input, which needs every rank's total
                totals = self._comm.all_gather(np.array([sum(sc) * row_in], dtype=np.int64))
                avg = int(totals.sum()) // w
                comp = self._options.spec_for_count("all_to_all", inp.dtype, avg, False)
            if uneven:
                self._comm.all_to_all(x, compression=comp, out=target, send_counts=sc, recv_counts=rc)
            else:
                self._comm.all_to_all(x, compression=comp, out=target)
            self._note(work, self._comm)
            if not direct:
                _copy_bytes_into(out, target)

        return job

    @joins("all_to_all")
    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: Any = None,
        input_split_sizes: Any = None,
        opts: Any = None,
    ) -> Work:
        out = T.check_tensor(output, "all_to_all_single output")
        inp = T.check_tensor(input, "all_to_all_single input")
        try:
            job = self._a2a_job(
                out, inp, list(output_split_sizes or []), list(input_split_sizes or []), "all_to_all_single"
            )
        except InvalidArgumentError as e:
            self._refuse("all_to_all_single", e)
        return self._submit("all_to_all_single", [output], job, opts=opts)

    alltoall_base = all_to_all_single

    @joins("all_to_all")
    def alltoall(self, output_tensors: list, input_tensors: list, opts: Any = None) -> Work:
        w = self._size_
        try:
            outs = [T.check_tensor(t, "all_to_all output") for t in output_tensors]
            ins = [T.check_tensor(t, "all_to_all input") for t in input_tensors]
            if len(outs) != w or len(ins) != w:
                raise InvalidArgumentError(
                    f"all_to_all: {len(ins)} input and {len(outs)} output tensors, expected world size {w} of each"
                )
            dt = ins[0].dtype
            if any(t.dtype != dt for t in ins + outs):
                raise InvalidArgumentError("all_to_all: every input and output tensor must have one dtype")
            n_in, n_out = [t.numel() for t in ins], [t.numel() for t in outs]
            T.same_device(ins + outs, "all_to_all")
            flat_in = torch.cat([t.reshape(-1) for t in ins])
            flat_out = torch.empty(sum(n_out), dtype=dt, device=ins[0].device)
            even = len(set(n_in + n_out)) == 1
            job_a2a = self._a2a_job(
                flat_out, flat_in, [] if even else n_out, [] if even else n_in, "all_to_all"
            )
        except InvalidArgumentError as e:
            self._refuse("all_to_all", e)

        def job(work: Work) -> None:
            job_a2a(work)
            pos = 0
            for o in outs:
                o.copy_(flat_out[pos : pos + o.numel()].view(o.shape))
                pos += o.numel()

        return self._submit("all_to_all", output_tensors, job, opts=opts)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        raise InvalidArgumentError(
            "monitored_barrier is a gloo feature; the ncclz backend offers dist.barrier() (a stuck rank makes it "
            "fail with ncclz.TimeoutError naming the peer after the group's timeout)"
        )

    # ---- lifetime ------------------------------------------------------------------------------
    def _workers(self) -> list:
        with self._lock:
            extra = [self._anysource] if self._anysource is not None else []
            return [self._worker] + extra + [w for w, _ in self._p2p.values()]

    def _comms(self) -> list:
        with self._lock:
            return [self._comm] + [h["comm"] for _, h in self._p2p.values() if "comm" in h]

    def shutdown(self) -> None:
        """Waits (up to the group's timeout) for the calls already issued, then closes the communicators."""
        if self._shut:
            return
        self._shut = True
        for w in self._workers():
            if not w.drain(self._timeout_s):
                self.abort("destroy_process_group: calls still pending after the group's timeout")
                break
        self._close("the process group was shut down")

    def abort(self, reason: str = "aborted") -> None:
        """Makes pending and future calls fail (here and, where reachable, on peers); then closes."""
        self._shut = True
        for c in self._comms():
            try:
                c.abort(f"ncclz process group {self._group_id!r}: {reason}")
            except Exception:  # noqa: BLE001, S110 - closing anyway
                pass
        self._close(reason)

    def _close(self, reason: str) -> None:
        for w in self._workers():
            w.close(reason)
        for c in self._comms():
            try:
                c.close()
            except Exception:  # noqa: BLE001, S110 - a communicator already gone
                pass
        with self._lock:
            # torch may keep this object alive after destroy_process_group; the communicators
            # (and the native objects they hold) go now
            self._comm = _Closed(self._group_id)
            self._p2p.clear()
        with _live_lock:
            _live_groups.discard(self)


class _Closed:
    """Stands for the communicator of a group that was shut down."""

    closed = True
    last_stats = None

    def __init__(self, group_id: str):
        self._group_id = group_id

    def __getattr__(self, name: str) -> Any:
        raise InvalidArgumentError(
            f"ncclz process group {self._group_id!r} was shut down (destroy_process_group); create a new group"
        )

    def abort(self, reason: str = "") -> None:
        return None

    def close(self) -> None:
        return None


def _copy_bytes_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copies ``src`` (a tensor :func:`T.movable` made from a tensor like ``dst``) into ``dst``."""
    if dst.dtype in T.NATIVE and src.dtype == dst.dtype:
        if src.data_ptr() != dst.data_ptr():
            dst.copy_(src.reshape(dst.shape))
        return
    dst.copy_(_from_bytes(src, dst))


def _from_bytes(buf: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``buf`` (bytes or the movable dtype of ``like``) viewed as a tensor shaped like ``like``."""
    if like.is_complex():
        return torch.view_as_complex(buf.reshape(*like.shape, 2)) if buf.dtype != like.dtype else buf
    if buf.dtype == like.dtype:
        return buf.reshape(like.shape)
    return buf.reshape(-1).view(like.dtype).reshape(like.shape)


def _sent_key(src: int, dst: int) -> str:
    """The store counter of sends from group rank src to dst (kept only with Options(any_source=True))."""
    return f"ncclz/sent/{src}to{dst}"


def _splits(sizes: list, rows: int, w: int, which: str, what: str) -> list:
    """Split sizes (rows per rank) as given, or equal blocks when empty; checked against ``rows``."""
    if not sizes:
        if rows % w:
            raise InvalidArgumentError(
                f"{what}: no {which}_split_sizes, so the {which}'s first dimension ({rows}) must divide by the "
                f"world size {w}"
            )
        return [rows // w] * w
    try:
        vals = [int(v) for v in sizes]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what}: {which}_split_sizes must be integers, got {sizes!r}") from None
    if len(vals) != w or any(v < 0 for v in vals):
        raise InvalidArgumentError(
            f"{what}: {which}_split_sizes must have one non-negative size per rank ({w}), got {vals}"
        )
    if sum(vals) != rows:
        raise InvalidArgumentError(
            f"{what}: {which}_split_sizes {vals} add up to {sum(vals)} rows but the {which} has {rows} (its first "
            "dimension)"
        )
    return vals


def _abort_all_at_exit() -> None:
    """At interpreter exit: groups nobody destroyed are aborted, so no worker thread is left inside a
    native call while Python finalizes."""
    with _live_lock:
        groups = list(_live_groups)
    for g in groups:
        try:
            g.abort("the process is exiting without destroy_process_group()")
        except Exception:  # noqa: BLE001, S110 - best effort at exit
            pass


atexit.register(_abort_all_at_exit)


def _create(dist_opts: Any, pg_options: Any) -> ProcessGroupNCCLZ:
    """The creator torch calls for every group on the "ncclz" backend (extended API)."""
    error = None
    try:
        options = Options.coerce(pg_options)
    except Exception as e:  # noqa: BLE001 - reported on every rank after the rendezvous (see _agree)
        options, error = Options(), e
    return ProcessGroupNCCLZ(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        group_id=str(getattr(dist_opts, "group_id", "") or ""),
        options=options,
        options_error=error,
        global_ranks=list(getattr(dist_opts, "global_ranks_in_group", []) or []),
    )


def register() -> None:
    """Registers the backend "ncclz" with torch.distributed (idempotent; done by ``import ncclz.torch``)."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=list(DEVICES))
