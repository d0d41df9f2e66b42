"""The collective runtime from Python: :class:`Communicator` and :func:`init`.

A communicator joins ``world_size`` processes (ranks). Rank 0 listens at
``master_addr:master_port`` and every rank presents the job's secret token
(the torchrun convention, as set by ``ncclz-run`` and torchrun), or the ranks
meet through a store (``store=``, a ``torch.distributed`` Store). Then the
collectives move data between them, optionally compressed::

    import ncclz, numpy as np
    comm = ncclz.init()                       # RANK, WORLD_SIZE, MASTER_ADDR, ...
    x = np.random.rand(1 << 20).astype(np.float32)
    comm.all_reduce(x, compression=ncclz.Lossy(rel=1e-3))   # in place
    print(comm.last_stats.ratio)

Compression is a request with a guarantee: by default (``policy="auto"``) the
communicator may run a requested call with a lighter mode (none or lossless
instead of lossy, none instead of lossless) when its cost model predicts that
compressing would not pay on this link (see :mod:`ncclz.policy`). Such a
result is exact, so it keeps any requested bound. Rank 0 decides and its
decision travels in the call descriptor every call exchanges anyway, so all
ranks run the same mode with no extra message. Where every rank is on one host
over shared memory (or in-process), the link is memory: with no rate configured
the policy runs lossy and lossless requests of host arrays uncompressed, by rule
and without calibrating the codec, since no codec outruns memory copies
(last_stats.policy: "one host over shared memory: ..."; :mod:`ncclz.policy.memory_link`).
Elsewhere, with no evidence about the link (no NCCLZ_LINK_GBPS /
NCCLZ_SOCKET_THROTTLE_GBPS, no uncompressed call of >= 1 MiB observed yet) the
requested mode runs. ``policy="off"`` (or
NCCLZ_POLICY=off) turns it off; ``policy="off"`` on one call forces the mode,
and ``policy="auto"`` on one call lets rank 0's policy decide that call.

Arrays are CPU arrays of NumPy, PyTorch, JAX or any DLPack producer
(see :mod:`ncclz._dlpack`). Every call blocks until this rank's part is done
and releases the GIL while it communicates, unless made with ``async_op=True``:
then it is queued and returns a :class:`ncclz.Work` (see :mod:`ncclz._async`;
``comm.synchronize()`` waits for every queued call). Errors raise ncclz exceptions:
InvalidArgumentError for bad calls (raised before any data moves; the rank
still takes part in the call as refused, so the others' same call raises
RemoteError and every rank's next call meets the others' next one),
RemoteError / TimeoutError / AbortedError when a peer fails or a call does
not match across ranks.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import inspect
import os
from typing import Any

import numpy as np

from . import _async, _core, _dlpack
from . import store as _store
from .errors import Error, InvalidArgumentError, RemoteError
from .policy import POLICIES, Call, CommPolicy, Decision, resolve_setting
from .spec import Lossless, Lossy

_native = _core.comm

#: Reduction ops accepted by the collectives.
OPS = ("sum", "avg", "max", "min", "prod")

__all__ = ["ALGORITHMS", "OPS", "POLICIES", "CallStats", "Communicator", "Topology", "init", "make_unique_id"]


@dataclasses.dataclass(frozen=True)
class CallStats:
    """Statistics of the last call on this rank (``comm.last_stats``).

    raw_bytes: bytes this rank would have sent uncompressed.
    wire_bytes: bytes it actually sent, headers included.
    ratio: raw_bytes / wire_bytes.
    encode_s, decode_s: time in the wire coders (all channels summed; they
        overlap with communication, so they may add up to more than wall_s).
    quantize_s: time quantizing / dequantizing at the API layer.
    wait_s: time blocked waiting for slots (peers, the network).
    wall_s: wall time of the call.
    error_bound: the bound the result meets, max |out - exact| over the finite
        elements (0 for exact modes): the requested E where the call ran
        compressed; where a lossy call ran exactly (exact_fallback, or the
        policy's lighter mode), what that achieved: 0 for a copy, for sums
        and means the rounding of the accumulation taken (the dtype itself,
        float32 for 16-bit floats, or float64: the narrowest that keeps E,
        or where none can, the narrowest about as good as float64), which
        may exceed a requested E below the dtype's own rounding.
    requested_bound: the bound E the call asked for (0 for exact modes).
    exact_fallback: a lossy call that ran exactly instead (non-finite inputs,
        outliers, a bound below the dtype's own rounding, a small message).
    requested: the compression the caller asked for.
    policy: what the compression policy did and why, e.g. ``"auto: none
        (lossy not predicted >= 20% faster than none; predicted ...)"``,
        ``"off"``, or on ranks other than 0 ``"auto: rank 0 chose none"``.
        ``compression`` is the mode that ran.
    algorithm: the algorithm the call ran, "ring", "hierarchical" (exact
        inside each host, compressed between hosts; see :attr:`Communicator.topology`)
        or "latency" (small uncompressed or lossless calls: one round of
        messages, the data with the call descriptor; NCCLZ_LATENCY_BYTES;
        all_reduce in two rounds up to NCCLZ_TWO_HOP_BYTES).
        A hierarchical call's raw_bytes, wire_bytes and ratio count its
        inter-host links (the ones that compress); local_bytes the bytes it
        sent to ranks on its own host (uncompressed; 0 for ring calls).
    on_device: the call's arrays were CUDA arrays (PyTorch, CuPy, JAX) whose values stayed on the
        GPU, on the flat or hierarchical schedules of several ranks: lossy (quantized, coded and
        dequantized there), lossless float32 / bfloat16 / float16 (FloatHuff slices coded there) or
        uncompressed (raw slices moved and reduced there); False where it ran on host copies
        (lossless of other types, the exact fallback, the latency algorithm, one rank).
    persistent: the call ran on the persistent ring kernels (``NCCLZ_PERSISTENT=1``: an all_reduce
        sum of CUDA arrays on every rank, one kernel per rank; docs/GPU.md).
    persistent_device_fifos: ... with its FIFOs in device memory written by the kernels (ranks
        on one host; ``NCCLZ_PERSISTENT_FIFOS``); False: host FIFOs bridged by proxy threads.
    channels: the rings the call's data moved on (lanes for all_to_all, gather and scatter; 1 for
        send/recv and the latency algorithm). Exact calls may run fewer rings than compressed ones
        (``comm.config.exact_nchannels``).
    slice_bytes: the data bytes each slice (one per slot) was sized for; 0 for the latency
        algorithm. Exact calls use ``comm.config.exact_slice_bytes``.
    schedule_s: wall time of the call's channel loops (from their start to the last slot leaving
        this process); ``wall_s - schedule_s`` is what the call spent around them (checks, the
        descriptor exchange, statistics, quantizing, the outlier round, dequantizing, device
        syncs). 0 where no channel loop ran (the latency algorithm, send/recv).
    """

    op: str
    compression: str
    raw_bytes: int
    wire_bytes: int
    ratio: float
    encode_s: float
    decode_s: float
    quantize_s: float
    wait_s: float
    wall_s: float
    error_bound: float
    exact_fallback: bool = False
    requested: str = ""
    requested_bound: float = 0.0
    policy: str = ""
    algorithm: str = "ring"
    local_bytes: int = 0
    on_device: bool = False
    persistent: bool = False
    persistent_device_fifos: bool = False
    channels: int = 0
    slice_bytes: int = 0
    schedule_s: float = 0.0

    @property
    def codec_s(self) -> float:
        """Total codec work: encode + decode + quantize."""
        return self.encode_s + self.decode_s + self.quantize_s

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Topology:
    """Which ranks share a host, as the communicator found it at creation (``comm.topology``).

    hosts: the number of hosts; host: this rank's (0..hosts-1, numbered by their lowest rank);
    local_rank, local_size: this rank's index among its host's ranks, and their number;
    host_of, local_rank_of: every rank's host and local rank; intra_link, inter_link: the
    transport inside a host and between hosts ("shm", "inproc", "socket"; "" where there are
    none); source: where the hosts came from ("bootstrap": the host names; "NCCLZ_TOPO_HOST" /
    "NCCLZ_TOPO_HOSTS": the override, docs/ENVIRONMENT.md); hierarchical: whether hierarchical
    collectives can run (several hosts with the same number > 1 of ranks each).
    """

    hosts: int
    host: int
    local_rank: int
    local_size: int
    host_of: tuple
    local_rank_of: tuple
    intra_link: str
    inter_link: str
    source: str
    hierarchical: bool

    def ranks_on(self, host: int) -> tuple:
        """The ranks of `host`, in local-rank order."""
        return tuple(r for r, h in sorted(enumerate(self.host_of), key=lambda x: self.local_rank_of[x[0]])
                     if h == host)


#: Values of the collectives' ``algorithm=`` (None: the policy's choice, else the communicator's default).
ALGORITHMS = ("auto", "ring", "hierarchical")


def _env(name: str, default: Any = None) -> str | None:
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def _env_int(names: tuple, what: str) -> int | None:
    for n in names:
        v = _env(n)
        if v is not None:
            try:
                return int(v)
            except ValueError:
                raise InvalidArgumentError(
                    f"environment variable {n}={v!r} is not an integer ({what})"
                ) from None
    return None


def _env_float(name: str) -> float | None:
    v = _env(name)
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        raise InvalidArgumentError(f"environment variable {name}={v!r} is not a number") from None


_NO_COMPRESSION = _native.Compression("none")
_PLAIN_OPS = OPS  # the ops and policy= values the short way takes as they are (Communicator._small_plain_all_reduce)
_PLAIN_POLICIES = (None, "auto", "off")
_converted: dict = {}  # spec -> native Compression (specs are frozen and hashable)


def _compression(spec: Any) -> Any:
    """Converts None / ncclz.Lossless() / ncclz.Lossy(abs=|rel=) to the native Compression."""
    if spec is None:
        return _NO_COMPRESSION if _NO_COMPRESSION is not None else _native.Compression("none")
    if isinstance(spec, _native.Compression):
        return spec
    try:
        return _converted[spec]
    except (KeyError, TypeError):
        pass
    c = _convert(spec)
    if len(_converted) < 1024:
        try:
            _converted[spec] = c
        except TypeError:  # an unhashable spec-like object
            pass
    return c


@atexit.register
def _release_native_specs() -> None:
    """At exit, before the native module goes: the cached native Compression objects are dropped. nanobind
    reports instances still alive when its module is torn down as leaks, and another library's closure can
    keep this module's globals alive past that (seen with torch and pytest). A later call converts again."""
    global _NO_COMPRESSION
    _converted.clear()
    _NO_COMPRESSION = None


def _convert(spec: Any) -> Any:
    codec = getattr(spec, "codec", None) or ""  # optional test/benchmark knobs, if a spec carries them
    min_bytes = int(getattr(spec, "min_bytes", 0) or 0)
    if isinstance(spec, Lossless):
        return _native.Compression("lossless", 0.0, str(codec), min_bytes)
    if isinstance(spec, Lossy):  # the spec validated its bound already
        mode = "lossy_abs" if spec.abs is not None else "lossy_rel"
        return _native.Compression(mode, float(spec.bound), str(codec), min_bytes)
    raise InvalidArgumentError(
        f"compression must be None, ncclz.Lossless() or ncclz.Lossy(abs=...|rel=...), got {spec!r}"
    )


def _mark_peer_error() -> None:
    """Under ncclz-run: records that this rank failed because of a peer (see ncclz.run.launch)."""
    d = os.environ.get("NCCLZ_RUN_STATE_DIR")
    if d:
        try:
            with open(os.path.join(d, f"rank{os.environ.get('RANK', '')}.peer_error"), "w"):
                pass
        except OSError:
            pass


def _name_rank(method):
    """Prefixes InvalidArgumentError messages with the rank (messages say where things failed);
    notes RemoteErrors for the launcher."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        return _refusable(self, method, lambda: method(self, *args, **kwargs), args, kwargs)

    return wrapper


def _refusable(self: Any, method: Any, run: Any, args: tuple, kwargs: dict) -> Any:
    """run() (a call of `method` with args, kwargs): an error of this rank's arguments takes part in the
    call as refused (_join_refused) and is raised named; a RemoteError is noted (_named)."""
    rounds = self._rounds()
    try:
        return run()
    except (InvalidArgumentError, TypeError) as e:
        _join_refused(self, method, args, kwargs, rounds)
        if isinstance(e, TypeError):
            raise
        raise _named(self, e) from None
    except RemoteError as e:
        raise _named(self, e) from None


_ROOTED = ("broadcast", "reduce", "gather", "scatter")


def _join_refused(self: Any, method: Any, args: tuple, kwargs: dict, rounds: int | None) -> None:
    """After this rank refused a call before it reached the runtime (an InvalidArgumentError or TypeError
    from the checks of Python or of the bindings): the runtime takes part in it as refused
    (Communicator::refuse), so that the other ranks' call raises RemoteError naming this rank and every
    rank's next call meets the others' next call. Without it this rank's next call would meet the
    others' refused one: an error at best, another call's data where the two look alike. Nothing where
    the call took part already (the runtime's own refusals: its rounds went up by a whole call's) or the
    communicator is closed; blocks until the others make the call (send / recv: until the peer does), as
    any call does."""
    name = method.__name__
    if rounds is None or name == "barrier":
        return
    # The rounds a complete call takes: an uneven all_to_all without recv_counts exchanges its counts
    # first (one refusal ends the others' call in whichever of the two rounds they are).
    full = 2 if name == "all_to_all" and kwargs.get("send_counts") is not None and kwargs.get("recv_counts") is None else 1
    now = self._rounds()
    if now is None or now - rounds >= full:
        return
    root: Any = 0
    if name in _ROOTED or name in ("send", "recv"):
        try:
            bound = inspect.signature(method).bind(self, *args, **kwargs)
            root = bound.arguments.get("peer" if name in ("send", "recv") else "root", 0)
        except TypeError:
            root = None
        if not isinstance(root, (int, np.integer)) or isinstance(root, bool):
            if name in ("send", "recv"):
                return  # no peer to tell
            root = 0
    with contextlib.suppress(Error):  # (a timeout or an abort: the refusal itself is what the caller sees)
        self._native.refuse(name, int(root), "")


def _named(self: Any, e: Exception) -> Exception:
    """What _name_rank raises for e: e itself (a RemoteError, noted for the launcher; a message that
    names its rank), or an InvalidArgumentError prefixed with the rank."""
    if isinstance(e, RemoteError):
        _mark_peer_error()
        return e
    msg = str(e)
    if msg.startswith(("rank ", "ncclz rank ")):
        return e
    return InvalidArgumentError(f"rank {self._rank}: {msg}")


def _short_way(name: str):
    """Marks a collective whose calls with positional arguments only (no keywords, no async_op)
    first try the method `name`, which takes the collective's positional parameters and returns
    None where the call needs the full path: the outer wrapper (_queueable) calls it before its own
    per-call machinery and _name_rank's."""

    def mark(method):
        method.__ncclz_short_way__ = name
        return method

    return mark


def _queueable(method):
    """Adds ``async_op`` to a collective. ``async_op=True`` queues the call on the communicator's call
    queue and returns a :class:`ncclz.Work`; a synchronous call made while calls are queued goes
    behind them (ncclz/_async.py), else it runs here on the caller's thread."""
    name = method.__name__
    short = getattr(method, "__ncclz_short_way__", None)

    @functools.wraps(method)
    def wrapper(self, *args, async_op: bool = False, **kwargs):
        if short is not None and not kwargs and async_op is False and (self._queue is None or self._queue.idle()):
            y = _refusable(self, method, lambda: getattr(self, short)(*args), args, kwargs)
            if y is not None:
                return y
        if not isinstance(async_op, bool):
            raise InvalidArgumentError(f"rank {self._rank}: {name}: async_op must be True or False, got {async_op!r}")
        q = self._queue
        if not async_op and (q is None or q.idle()):
            return method(self, *args, **kwargs)
        if self.closed:
            raise InvalidArgumentError(f"rank {self._rank}: {name}: the communicator is closed")
        if q is None:
            q = self._queue = _async.CallQueue(f"ncclz-calls-rank{self._rank}")
        seen: list = [None]  # what the call recorded (barrier records nothing), built when Work.stats is read

        def call():
            before = self._last_raw
            out = method(self, *args, **kwargs)
            seen[0] = self._last_raw if self._last_raw is not before else None
            return out

        def stats():
            raw = seen[0]
            return (lambda: self._build_stats(raw)) if raw is not None else None

        work = q.submit(name, call, (*args, *kwargs.values()), stats=stats)
        return work if async_op else work.wait()

    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    params.append(inspect.Parameter("async_op", inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool"))
    wrapper.__signature__ = sig.replace(parameters=params)
    return wrapper


def _device_path_on() -> bool:
    """Whether calls of CUDA arrays pass them to the runtime as they are, which codes them on the
    device (NCCLZ_DEVICE_PATH: auto, the default, where ncclz was built with CUDA; staged: through
    host copies made here, the first GPU path)."""
    mode = os.environ.get("NCCLZ_DEVICE_PATH", "auto").strip().lower() or "auto"
    if mode not in ("auto", "staged"):
        raise InvalidArgumentError(f"NCCLZ_DEVICE_PATH must be auto or staged, got {mode!r}")
    return mode == "auto" and bool(_core.built_with_cuda())


def _describe_compression(c: Any) -> str:
    if c.mode in ("lossy_abs", "lossy_rel"):
        return f"{c.mode}({c.bound:g})"
    return c.mode


def _hints(d: Decision, algorithm: str | None = None) -> Any:
    """The policy's decision as the native call's hints argument: rank 0's proposal (a lighter mode,
    a lossy call's codec effort, the algorithm) as a native PolicyHints, passed beside the requested
    Compression; None when there is none. `algorithm`: the call's own ``algorithm=`` (wins over the
    policy's). Every collective passes what this returns; nothing else turns a decision into native
    arguments."""
    algo = _algorithm(algorithm) or d.algorithm or ""
    if not d.lighter and d.rans_margin is None and not algo:
        return None
    margin = -1.0 if d.rans_margin is None else float(d.rans_margin)
    key = (d.lighter, margin, algo)
    r = _proposals.get(key)
    if r is None:
        r = _native.PolicyHints(d.lighter, margin, algo)
        if len(_proposals) < 1024:
            _proposals[key] = r
    return r


def _algorithm(a: Any) -> str:
    """A collective's ``algorithm=``: "" for None / "auto", else "ring" or "hierarchical"."""
    if a is None:
        return ""
    if not isinstance(a, str) or a.strip().lower() not in ALGORITHMS + ("hier",):
        raise InvalidArgumentError(f"algorithm must be one of {', '.join(ALGORITHMS)} or None, got {a!r}")
    a = a.strip().lower()
    return "" if a == "auto" else "hierarchical" if a == "hier" else a


_proposals: dict = {}  # (lighter, rans_margin, algorithm) -> native PolicyHints


class Communicator:
    """A group of ``world_size`` ranks that run collectives together.

    Arguments left as None come from the environment: RANK, WORLD_SIZE,
    MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500), NCCLZ_TOKEN,
    NCCLZ_TIMEOUT (seconds, default 300), NCCLZ_TRANSPORT (shm | socket |
    inproc; default: automatic), NCCLZ_NCHANNELS (default: a channel per
    core of this rank's share of its host, 2-8, the smallest over the
    ranks). OMPI_COMM_WORLD_* and PMI_* are read when RANK / WORLD_SIZE are
    absent.

    store: a ``torch.distributed`` Store (TCPStore, FileStore, ...) shared by
        all ranks. Rank 0 makes the bootstrap id and puts it in the store; the
        others take it from there (within ``timeout``). master_addr/port and
        token are then not used. Under torchrun, init() uses torchrun's store
        automatically.
    unique_id: bytes from :func:`make_unique_id` on rank 0, shared by any
        other means (mpi4py, a file); the alternative to a store.
    policy: "auto" (default; NCCLZ_POLICY) lets the compression policy run a
        requested call with a lighter mode where compressing would not pay;
        "off" always runs the requested mode. A
        :class:`ncclz.policy.Policy` instance means "auto" with that
        model (its margin, link rate, ...). Only rank 0's policy decides.
    topo_hosts: every rank's host, as NCCLZ_TOPO_HOSTS gives it ("0,0,1,1" or
        "2x2"), for this communicator in place of that variable (which
        describes the whole job: a communicator of some of its ranks needs
        their part of it).

    Use it as a context manager, or call close(); abort() makes pending calls
    fail (from any thread), here and on every peer (AbortedError naming this
    rank). Ctrl-C (or any signal handler that raises) interrupts a blocked
    call within about 0.1 s: the call aborts the communicator and raises the
    handler's exception (KeyboardInterrupt).

    Threads: one call at a time, and every rank must make its calls in the
    same order. A call made while another thread's call on the same
    communicator is running raises InvalidArgumentError naming both calls and
    aborts the communicator (on every rank), since the ranks would otherwise
    pair calls differently and mix their data silently. Make the calls from
    one thread (``async_op=True`` queues them, to overlap them with work),
    order them yourself the same way on every rank, or give each thread its
    own communicator.
    """

    def __init__(
        self,
        rank: int | None = None,
        world_size: int | None = None,
        master_addr: str | None = None,
        master_port: int | None = None,
        token: str | None = None,
        timeout: float | None = None,
        transport: str | None = None,
        store: Any = None,
        *,
        nchannels: int | None = None,
        unique_id: bytes | None = None,
        policy: Any = None,
        topo_hosts: str | None = None,
    ):
        if rank is None:
            rank = _env_int(("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"), "rank")
        if world_size is None:
            world_size = _env_int(("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"), "world size")
        if rank is None or world_size is None:
            raise InvalidArgumentError(
                "rank and world_size are needed: pass them, or set RANK and WORLD_SIZE (ncclz-run and torchrun do)"
            )
        rank, world_size = int(rank), int(world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidArgumentError(f"rank {rank} is not in [0, world_size={world_size})")
        if timeout is None:
            timeout = _env_float("NCCLZ_TIMEOUT")
        timeout = 300.0 if timeout is None else float(timeout)
        if not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout}")

        cfg = self._base_config()
        cfg.rank, cfg.size, cfg.timeout_s = rank, world_size, timeout
        cfg.master_addr = master_addr if master_addr is not None else _env("MASTER_ADDR", "127.0.0.1")
        port = master_port if master_port is not None else _env_int(("MASTER_PORT",), "master port")
        cfg.master_port = 29500 if port is None else int(port)
        cfg.token = token if token is not None else _env("NCCLZ_TOKEN", "")
        if transport is None:
            transport = _env("NCCLZ_TRANSPORT", "")
        transport = (transport or "").lower()
        if transport in ("auto",):
            transport = ""
        if transport not in ("", "shm", "socket", "inproc"):
            raise InvalidArgumentError(f"transport must be shm, socket, inproc or auto, got {transport!r}")
        cfg.transport = transport
        if nchannels is None:
            nchannels = _env_int(("NCCLZ_NCHANNELS",), "channels")
        if nchannels is not None:
            cfg.nchannels = int(nchannels)
        if topo_hosts is not None:  # this communicator's layout, in place of NCCLZ_TOPO_HOSTS
            cfg.topo_hosts = str(topo_hosts)
        setting = resolve_setting(policy)  # bad settings fail here, before the rendezvous

        try:
            self._connect(cfg, rank, world_size, timeout, store, unique_id, master_port)
        except RemoteError:
            _mark_peer_error()
            raise
        self._setup(rank, world_size, transport or "auto", setting, cfg)

    def _setup(self, rank: int, world_size: int, transport: str, setting: Any, cfg: Any) -> None:
        """Everything but the rendezvous (self._native is connected): __init__'s and split()'s."""
        self._rank, self._world_size = rank, world_size
        self._transport = transport
        self._setting = setting  # the policy setting, which split() passes on
        self._last_stats: CallStats | None = None
        self._last_raw: tuple | None = None
        self._device: Any = None  # the CUDA device of the first GPU array this rank passed (a DeviceArray)
        self._queue: _async.CallQueue | None = None  # asynchronous calls (async_op=True), made on first use
        self._topology = self._find_topology()
        self._policy = CommPolicy(setting, rank, world_size, nchannels=self._channels(cfg),
                                  topology=self._topology, algorithm=self._configured_algorithm(),
                                  latency_bytes=self._latency_bytes())

    def _connect(self, cfg, rank, world_size, timeout, store, unique_id, master_port) -> None:
        """Rendezvous: torchrun's store, a given store or unique id, or MASTER_ADDR:MASTER_PORT."""
        if store is None and unique_id is None and master_port is None and _store.under_torchrun():
            store = _store.store_from_env(timeout)
        if store is not None or unique_id is not None:
            if unique_id is None:
                key = _store.next_key(store, rank)
                if rank == 0:
                    uid = _native.UniqueId.make(_env("NCCLZ_BOOTSTRAP_ADDR", ""), 0)
                    _store.publish(store, key, uid.bytes)
                else:
                    uid = _native.UniqueId(_store.fetch(store, key, timeout, rank))
            else:
                uid = _native.UniqueId(bytes(unique_id))
            self._native = _native.Communicator.create_from_id(uid, rank, world_size, cfg)
        else:
            self._native = _native.Communicator.create(cfg)

    def _channels(self, cfg: Any) -> int | None:
        """The channel count this communicator runs with, for the policy's cost model (the one place
        it is read): the native communicator's effective configuration where the bindings expose
        it, else the count this communicator was configured with (None: the runtime's default)."""
        effective = getattr(self._native, "config", None)
        n = getattr(effective, "nchannels", 0) if effective is not None else cfg.nchannels
        return int(n) if n and n > 0 else None

    def _find_topology(self) -> Topology:
        """The native communicator's topology as a :class:`Topology` (one host of all ranks where the
        bindings do not report one)."""
        t = getattr(self._native, "topology", None)
        if t is None:
            n = self._world_size
            return Topology(1, 0, self._rank, n, (0,) * n, tuple(range(n)), "", "", "bootstrap", False)
        return Topology(int(t.nhosts), int(t.host), int(t.local_rank), int(t.local_size), tuple(t.host_of),
                        tuple(t.local_rank_of), str(t.intra_link), str(t.inter_link), str(t.source),
                        bool(t.hierarchical))

    def _configured_algorithm(self) -> str:
        """NCCLZ_ALGO / the config's algorithm as the native communicator resolved it ("auto", "ring",
        "hierarchical")."""
        effective = getattr(self._native, "config", None)
        return str(getattr(effective, "algorithm", "auto") or "auto")

    def _latency_bytes(self) -> int:
        """The native communicator's latency_bytes (NCCLZ_LATENCY_BYTES): exact calls up to it run the
        latency algorithm."""
        effective = getattr(self._native, "config", None)
        return int(getattr(effective, "latency_bytes", 0) or 0)

    @staticmethod
    def _base_config() -> Any:
        try:
            return _native.CommConfig.from_env()
        except Exception:  # noqa: BLE001 - a partial environment; every field is set below anyway
            return _native.CommConfig()

    # ---- properties -------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def topology(self) -> Topology:
        """Which ranks share a host (:class:`Topology`), as found at creation: from the host names,
        or NCCLZ_TOPO_HOST / NCCLZ_TOPO_HOSTS (docs/ENVIRONMENT.md)."""
        return self._topology

    @property
    def config(self) -> Any:
        """The configuration this communicator runs with (a ``CommConfig``: the environment read once,
        defaults resolved, the transport chosen; ``as_dict()`` for all fields; the token is not
        reported). docs/PYTHON_API.md, "The runtime's configuration"."""
        return self._native.config

    @property
    def last_stats(self) -> CallStats | None:
        """Statistics of this rank's last completed call (None before the first)."""
        if self._last_stats is None and self._last_raw is not None:
            self._last_stats = self._build_stats()
        return self._last_stats

    @property
    def closed(self) -> bool:
        return self._native.closed

    def _rounds(self) -> int | None:
        """The runtime's descriptor rounds so far (None once closed): _join_refused's reference."""
        try:
            return None if self._native.closed else self._native.rounds
        except Error:
            return None

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._transport
        return f"<ncclz.Communicator rank {self._rank} of {self._world_size} ({state})>"

    # ---- helpers ----------------------------------------------------------
    def _prepare(self, x: Any, what: str, op: str | None, compression: Any, load: bool = True,
                 device_path: bool = False, policy: Any = None) -> tuple:
        """The array and compression as the native layer takes them. Only the Python types are checked
        here; the runtime checks the call itself (dtype, op, bound, counts, root, peer). ``load=False``:
        the call only writes x (a GPU array's contents are then not copied to the host first).
        ``device_path``: the call codes CUDA arrays on the device (every collective, send and
        recv): a call of a PyTorch or CuPy CUDA array then passes it as it is, in every mode
        (docs/GPU.md, "Device buffers": the runtime runs it on the device where it can, on host
        copies where not; NCCLZ_DEVICE_PATH=staged turns it off), except where the policy runs
        the call exact by its size alone (``policy``: the call's own setting): those take the
        staged path's latency algorithm."""
        c = _compression(compression)
        direct = device_path and _device_path_on() and not self._small_for_policy(x, policy)
        b = _dlpack.as_buffer(x, what, load=load, direct=direct)
        if b.gpu is not None:
            self._check_device(b, what)
        if op is not None:
            if not isinstance(op, str):
                raise InvalidArgumentError(f"{what}: op must be a string, one of {', '.join(OPS)}; got {op!r}")
            op = op.lower()
        return b, c, op

    def _small_for_policy(self, x: Any, policy: Any) -> bool:
        """Whether rank 0's policy runs a call of x exact by its size alone (CommPolicy.small_bytes)."""
        if (policy if policy is not None else self._policy.mode) == "off":
            return False
        n = getattr(x, "nbytes", None)
        if n is None and hasattr(x, "numel"):
            n = x.numel() * x.element_size()
        return n is not None and int(n) <= self._policy.small_bytes()

    def _check_device(self, b: Any, what: str) -> None:
        """GPU arrays of one rank stay on one device: the first one's (CPU arrays are always taken)."""
        if self._device is None:
            self._device = b.gpu
        elif not b.gpu.same_device(self._device):
            raise InvalidArgumentError(
                f"{what} is on {b.gpu.name} but this communicator's GPU arrays are on {self._device.name} "
                "(the device of the first GPU array it was given); one rank works with one GPU"
            )

    @property
    def device(self) -> str | None:
        """'cuda:N' once this rank passed a GPU array (its device), else None."""
        return None if self._device is None else self._device.name

    @property
    def policy(self) -> Any:
        """The compression policy's model on this rank (an :class:`ncclz.policy.Policy` unless
        another was given): inspect what it learned (``calibrations()``, ``measurements()``,
        ``link_gbps``). Only rank 0's decides; see docs/PYTHON_API.md."""
        return self._policy.model

    @property
    def policy_mode(self) -> str:
        """"auto" or "off": the setting of ``policy=`` / NCCLZ_POLICY."""
        return self._policy.mode

    def reset_policy(self, policy: Any = None) -> None:
        """Makes the compression policy forget what it learned on this rank: its codec calibrations
        (taken on the first call's data), measured call times and observed link rate. For a job
        whose data changes character (another model, another field). ``policy``: an
        :class:`ncclz.policy.Policy` to decide with from now on (default: a fresh default one).
        Only rank 0's policy decides, so calling it on rank 0 is enough; on other ranks it does
        nothing harmful."""
        self._policy.reset(policy)

    def _decide(self, coll: str, b: Any, c: Any, compression: Any, nbytes: int, policy: Any, op: str | None = None,
                algorithm: Any = None, data: bool = True) -> Decision:
        """Asks the policy about this call (only rank 0's answer counts: it travels in the call
        descriptor); `policy` and `algorithm` are the call's own ``policy=`` and ``algorithm=``;
        `data`: whether b holds the call's input (a scatter's non-root ranks hold only their output)."""
        return self._policy.choose(Call(coll, b.dtype, nbytes, c.mode, c.bound, compression,
                                        (lambda: _dlpack.to_numpy(b, self._sample_bytes())) if data else None,
                                        op or "sum", _algorithm(algorithm), b.device is not None), policy)

    def _sample_bytes(self) -> int:
        """How much of a CUDA array the policy gets as its host copy: its calibration sample
        (Policy(sample_bytes=...), 4 MiB by default); the device path's arrays are not copied whole."""
        cal = getattr(self._policy.model, "calibrator", None)
        return int(getattr(cal, "sample_bytes", 4 << 20))

    def _record(self, name: str, c: Any, st: Any, d: Decision | None = None) -> None:
        # Kept raw; last_stats builds the dataclass when asked (keeps small calls cheap).
        self._last_raw = (name, c, st, d)
        self._last_stats = None
        self._policy.record(d, st)
        if d is not None and d.call is not None:
            d.call.release()  # the call was made: its input is the caller's again

    def _build_stats(self, raw: tuple | None = None) -> CallStats | None:
        """CallStats of a recorded call (``raw``: what _record kept; default the last call's)."""
        raw = raw if raw is not None else self._last_raw
        if raw is None:
            return None
        name, c, st, d = raw
        requested = _describe_compression(c)
        ran = st.ran_mode
        return CallStats(
            op=name,
            compression=ran if st.lightened else requested,
            raw_bytes=int(st.raw_bytes),
            wire_bytes=int(st.wire_bytes),
            ratio=float(st.ratio),
            encode_s=float(st.encode_s),
            decode_s=float(st.decode_s),
            quantize_s=float(st.quantize_s),
            wait_s=float(st.wait_s),
            wall_s=float(st.wall_s),
            error_bound=float(st.error_bound),
            exact_fallback=bool(getattr(st, "exact_fallback", False)),
            requested=requested,
            requested_bound=float(getattr(st, "requested_bound", 0.0)),
            policy=d.describe(ran, bool(st.lightened)) if d is not None else "",
            algorithm=str(getattr(st, "algorithm", "ring")),
            local_bytes=int(getattr(st, "local_bytes", 0)),
            on_device=bool(getattr(st, "on_device", False)),
            persistent=bool(getattr(st, "persistent", False)),
            persistent_device_fifos=bool(getattr(st, "persistent_device_fifos", False)),
            channels=int(getattr(st, "channels", 0)),
            slice_bytes=int(getattr(st, "slice_bytes", 0)),
            schedule_s=float(getattr(st, "schedule_s", 0.0)),
        )

    def _check_rank(self, r: Any, what: str) -> int:
        if isinstance(r, bool) or not isinstance(r, int) and not hasattr(r, "__index__"):
            raise InvalidArgumentError(f"{what} must be an integer rank, got {r!r}")
        return int(r)  # its range is the runtime's check

    def _plain_small(self, x: Any, nbytes: int, op: Any, compression: Any, out: Any, policy: Any,
                     writes_x: bool) -> bool:
        """Whether a call may take a short way (the ``_small_plain_*`` methods): an uncompressed call
        of a contiguous NumPy array of a plain dtype (writable where the call writes ``x``), ``out=``
        None or a NumPy array (the short way checks it further: _plain_out), a plain op (None: the call has none), small enough (``nbytes``: the message as
        the policy counts it) that the policy neither proposes nor learns anything from it
        (CommPolicy.small_bytes). A short way makes the same native call, with the same
        last_stats, as the full path, with a fraction of its Python (with 4 ranks on 2 cores the
        Python layer was most of a 4 KiB call)."""
        if type(x) is not np.ndarray or compression is not None or (out is not None and type(out) is not np.ndarray):
            return False
        if op is not None and (type(op) is not str or op not in _PLAIN_OPS):
            return False
        if nbytes > self._policy.small_bytes() or policy not in _PLAIN_POLICIES:
            return False
        flags = x.flags
        return _dlpack.plain_numpy_dtype(x.dtype) is not None and flags.c_contiguous and (flags.writeable or not writes_x)

    @staticmethod
    def _plain_out(x: np.ndarray, out: Any, shape: tuple) -> np.ndarray | None:
        """A short way's output: a new array, or ``out`` where it is one the full path takes as it is
        (x's dtype, ``shape``, contiguous, writable, not overlapping x); None: take the full path
        (which raises where ``out`` is wrong)."""
        if out is None:
            return np.empty(shape, x.dtype)
        f = out.flags
        if out.dtype != x.dtype or out.shape != shape or not f.c_contiguous or not f.writeable:
            return None
        return None if np.may_share_memory(x, out) else out

    def _ran_plain(self, coll: str, st: Any) -> None:
        """Records a short way's native stats as _record does an uncompressed call's."""
        self._last_raw = (coll, _compression(None), st, None)
        self._last_stats = None

    def _small_plain_all_reduce(self, x: Any, op: Any = "sum", compression: Any = None, out: Any = None,
                                policy: Any = None) -> np.ndarray | None:
        """The short way (_plain_small) of an in-place all_reduce. None: take the full path."""
        if out is not None or not self._plain_small(x, getattr(x, "nbytes", 0), op, compression, out, policy, True):
            return None
        self._ran_plain("all_reduce", self._native.all_reduce(x, x, op, _compression(None), "", None))
        return x

    def _small_plain_reduce_scatter(self, x: Any, op: Any = "sum", compression: Any = None, out: Any = None,
                                    policy: Any = None) -> np.ndarray | None:
        """The short way (_plain_small) of a reduce_scatter into a new array or ``out``. None: take the
        full path (which also raises for a size the world size does not divide)."""
        if not self._plain_small(x, getattr(x, "nbytes", 0), op, compression, out, policy, False):
            return None
        w = self._world_size
        if x.ndim >= 1 and x.shape[0] % w == 0:
            shape = (x.shape[0] // w, *x.shape[1:])
        elif x.size % w == 0:
            shape = (x.size // w,)
        else:
            return None
        o = self._plain_out(x, out, shape)
        if o is None:
            return None
        self._ran_plain("reduce_scatter", self._native.reduce_scatter(x, o, op, _compression(None), "", None))
        return o

    def _small_plain_all_gather(self, x: Any, compression: Any = None, out: Any = None,
                                policy: Any = None) -> np.ndarray | None:
        """The short way (_plain_small) of an all_gather into a new array or ``out``. None: take the
        full path."""
        if not self._plain_small(x, getattr(x, "nbytes", 0) * self._world_size, None, compression, out, policy,
                                 False):
            return None
        o = self._plain_out(x, out, (self._world_size, *x.shape))
        if o is None:
            return None
        self._ran_plain("all_gather", self._native.all_gather(x, o, _compression(None), "", None))
        return o

    def _small_plain_broadcast(self, x: Any, root: Any = 0, compression: Any = None,
                               policy: Any = None) -> np.ndarray | None:
        """The short way (_plain_small) of an in-place broadcast. None: take the full path."""
        if type(root) is not int or not self._plain_small(x, getattr(x, "nbytes", 0), None, compression, None,
                                                          policy, True):
            return None
        self._ran_plain("broadcast", self._native.broadcast(x, root, _compression(None), "", None))
        return x

    # ---- collectives ------------------------------------------------------
    @_queueable
    @_name_rank
    @_short_way("_small_plain_all_reduce")
    def all_reduce(self, x: Any, op: str = "sum", compression: Any = None, out: Any = None, *,
                   policy: str | None = None, algorithm: str | None = None) -> Any:
        """Reduces ``x`` over all ranks; every rank gets the result.

        In place by default (returns ``x``). With ``out=`` the result goes
        there; read-only inputs (JAX arrays, read-only NumPy) get a new array.
        ``policy="off"`` runs exactly the requested compression for this call
        (see the module doc); None: the communicator's setting.
        ``algorithm``: "ring" or "hierarchical" for this call (rank 0's counts;
        hierarchical runs where :attr:`topology` allows it, else the ring);
        None or "auto": the policy's choice, else NCCLZ_ALGO, else the latency
        algorithm for exact calls up to NCCLZ_LATENCY_BYTES (64 KiB; all_reduce
        up to NCCLZ_TWO_HOP_BYTES, 1.25 MiB with 4 ranks over shared memory, and
        on one host from NCCLZ_DIRECT_FROM_BYTES up at any size), else
        hierarchical where the topology allows it, else the ring.
        """
        if algorithm is None:
            y = self._small_plain_all_reduce(x, op, compression, out, policy)
            if y is not None:
                return y
        b, c, op = self._prepare(x, "all_reduce input", op, compression, device_path=True, policy=policy)
        d = self._decide("all_reduce", b, c, compression, b.nbytes, policy, op, algorithm)
        if out is not None:
            o = _dlpack.check_output(out, b, b.shape, "all_reduce out")
        elif b.writable:
            o = b
        else:
            o = _dlpack.empty(b, b.shape)
        st = self._native.all_reduce(b.native, o.native, op, c, b.as_dtype, _hints(d, algorithm))
        self._record("all_reduce", c, st, d)
        return _result(o, x if o is b else out)

    @_queueable
    @_name_rank
    @_short_way("_small_plain_reduce_scatter")
    def reduce_scatter(self, x: Any, op: str = "sum", compression: Any = None, out: Any = None, *,
                       policy: str | None = None, algorithm: str | None = None) -> Any:
        """Reduces ``x`` over all ranks; rank r gets block r of the result.

        ``x.shape[0]`` must be divisible by world_size (result shape
        ``(x.shape[0] // world_size, *x.shape[1:])``), or else the element
        count (result: 1-D of ``x.size // world_size``). ``policy``, ``algorithm``: as in all_reduce
        (an exact call on one host runs direct, single-copy, from its threshold: NCCLZ_DIRECT_FROM_BYTES,
        docs/ALGORITHMS.md).
        """
        if algorithm is None:
            y = self._small_plain_reduce_scatter(x, op, compression, out, policy)
            if y is not None:
                return y
        b, c, op = self._prepare(x, "reduce_scatter input", op, compression, device_path=True, policy=policy)
        d = self._decide("reduce_scatter", b, c, compression, b.nbytes, policy, op, algorithm)
        shape = _block_shape(b, self._world_size, "reduce_scatter input")
        o = (
            _dlpack.check_output(out, b, shape, "reduce_scatter out")
            if out is not None
            else _dlpack.empty(b, shape)
        )
        st = self._native.reduce_scatter(b.native, o.native, op, c, b.as_dtype, _hints(d, algorithm))
        self._record("reduce_scatter", c, st, d)
        return _result(o, out)

    @_queueable
    @_name_rank
    @_short_way("_small_plain_all_gather")
    def all_gather(self, x: Any, compression: Any = None, out: Any = None, *, policy: str | None = None,
                   algorithm: str | None = None) -> Any:
        """Gathers every rank's ``x``; returns shape ``(world_size, *x.shape)``, rank r's at [r].
        ``policy``, ``algorithm``: as in all_reduce (direct on one host as reduce_scatter)."""
        if algorithm is None:
            y = self._small_plain_all_gather(x, compression, out, policy)
            if y is not None:
                return y
        b, c, _ = self._prepare(x, "all_gather input", None, compression, device_path=True, policy=policy)
        d = self._decide("all_gather", b, c, compression, b.nbytes * self._world_size, policy, None, algorithm)
        shape = (self._world_size, *b.shape)
        o = (
            _dlpack.check_output(out, b, shape, "all_gather out")
            if out is not None
            else _dlpack.empty(b, shape)
        )
        st = self._native.all_gather(b.native, o.native, c, b.as_dtype, _hints(d, algorithm))
        self._record("all_gather", c, st, d)
        return _result(o, out)

    @_queueable
    @_name_rank
    @_short_way("_small_plain_broadcast")
    def broadcast(self, x: Any, root: int = 0, compression: Any = None, *, policy: str | None = None,
                  algorithm: str | None = None) -> Any:
        """Copies root's ``x`` to every rank, in place (returns ``x``; a new array if x is read-only, as
        JAX arrays are: on the device path a JAX copy of x on its device, which the call overwrites).
        ``policy``, ``algorithm``: as in all_reduce (rank 0 decides even when another rank is the root;
        direct on one host as reduce_scatter)."""
        if algorithm is None:
            y = self._small_plain_broadcast(x, root, compression, policy)
            if y is not None:
                return y
        root = self._check_rank(root, "broadcast root")
        b, c, _ = self._prepare(x, "broadcast buffer", None, compression, device_path=True, policy=policy)
        d = self._decide("broadcast", b, c, compression, b.nbytes, policy, None, algorithm)
        o = b if b.writable else _dlpack.writable_copy(b)
        st = self._native.broadcast(o.native, root, c, o.as_dtype, _hints(d, algorithm))
        self._record("broadcast", c, st, d)
        return _result(o, x if o is b else None)

    @_queueable
    @_name_rank
    def reduce(self, x: Any, root: int = 0, op: str = "sum", compression: Any = None, out: Any = None, *,
               policy: str | None = None) -> Any:
        """Reduces ``x`` over all ranks into rank ``root``; returns the result there, None elsewhere.

        On the root the result goes into ``x`` (in place) by default, or into ``out=``; read-only
        inputs get a new array. Other ranks' ``x`` is only read (``out`` is not used there). Lossy
        bounds as all_reduce's with the same op. ``policy``: as in all_reduce.
        """
        root = self._check_rank(root, "reduce root")
        b, c, op = self._prepare(x, "reduce input", op, compression, device_path=True, policy=policy)
        d = self._decide("reduce", b, c, compression, b.nbytes, policy)
        o = None
        if self._rank == root:
            if out is not None:
                o = _dlpack.check_output(out, b, b.shape, "reduce out")
            elif b.writable:
                o = b
            else:
                o = _dlpack.empty(b, b.shape)
        st = self._native.reduce(b.native, None if o is None else o.native, op, root, c, b.as_dtype, _hints(d))
        self._record("reduce", c, st, d)
        if o is None:
            return None
        return _result(o, x if o is b else out)

    @_queueable
    @_name_rank
    def gather(self, x: Any, root: int = 0, compression: Any = None, out: Any = None, *,
               policy: str | None = None) -> Any:
        """Gathers every rank's ``x`` on rank ``root``: returns shape ``(world_size, *x.shape)`` there
        (rank r's at [r]; into ``out=`` if given), None elsewhere. Every rank's ``x`` must have the
        same size. ``policy``: as in all_reduce."""
        root = self._check_rank(root, "gather root")
        b, c, _ = self._prepare(x, "gather input", None, compression, device_path=True, policy=policy)
        d = self._decide("gather", b, c, compression, b.nbytes * self._world_size, policy)
        o = None
        if self._rank == root:
            shape = (self._world_size, *b.shape)
            o = _dlpack.check_output(out, b, shape, "gather out") if out is not None else _dlpack.empty(b, shape)
        st = self._native.gather(b.native, None if o is None else o.native, root, c, b.as_dtype, _hints(d))
        self._record("gather", c, st, d)
        if o is None:
            return None
        return _result(o, out)

    @_queueable
    @_name_rank
    def scatter(self, x: Any, root: int = 0, compression: Any = None, out: Any = None, *,
                policy: str | None = None) -> Any:
        """Scatters the root's ``x`` in world_size blocks: rank r gets block r. Returns it.

        On the root ``x.shape[0]`` must be divisible by world_size (each rank gets
        ``(x.shape[0] // world_size, *x.shape[1:])``), or else the element count (1-D blocks); the
        result goes into ``out=`` if given. Other ranks pass ``x=None`` (it is not read) and must
        pass ``out=``: the array that receives their block (it sets the dtype and size; a JAX array,
        immutable, is only the template of a new array with the block, which is returned). Lossy:
        the relative bound is of the root's range, as for broadcast. ``policy``: as in all_reduce.
        """
        root = self._check_rank(root, "scatter root")
        w = self._world_size
        if self._rank == root:
            if x is None:
                raise InvalidArgumentError(f"scatter: rank {root} is the root and needs x (the blocks to scatter)")
            b, c, _ = self._prepare(x, "scatter input", None, compression, device_path=True, policy=policy)
            shape = _block_shape(b, w, "scatter input")
            o = _dlpack.check_output(out, b, shape, "scatter out") if out is not None else _dlpack.empty(b, shape)
            d = self._decide("scatter", b, c, compression, b.nbytes, policy)
            send = b.native
        else:
            if out is None:
                raise InvalidArgumentError(
                    f"scatter: rank {self._rank} is not the root ({root}): pass out=, the array that receives "
                    "this rank's block"
                )
            o, c, _ = self._prepare(out, "scatter out", None, compression, load=False, device_path=True, policy=policy)
            o = self._written(o, "scatter out")
            d = self._decide("scatter", o, c, compression, o.nbytes * w, policy, data=False)
            send = None
        st = self._native.scatter(send, o.native, root, c, o.as_dtype, _hints(d))
        self._record("scatter", c, st, d)
        return _result(o, out if o.user is out else None)

    @_queueable
    @_name_rank
    def all_to_all(self, x: Any, compression: Any = None, out: Any = None, *, send_counts: Any = None,
                   recv_counts: Any = None, policy: str | None = None) -> Any:
        """Exchanges blocks between all ranks: block j of ``x`` goes to rank j, and the result holds
        rank j's block for this rank at position j (torch.distributed's all_to_all_single).

        Equal blocks: ``x.shape[0]`` divisible by world_size (or else the element count: 1-D); the
        result has x's shape. Uneven blocks: ``send_counts[j]`` rows of ``x`` (along its first
        dimension, in rank order) go to rank j and ``recv_counts[j]`` rows come from rank j; the
        result has shape ``(sum(recv_counts), *x.shape[1:])``. Rank i's send_counts[j] must equal
        rank j's recv_counts[i] (a mismatch raises RemoteError on every rank before any data
        moves). Without recv_counts the ranks first exchange their send_counts (one more small
        all_to_all). Every block crosses one link (pairwise exchange); a rank's own block is copied
        exactly. ``out=``: the result array. ``policy``: as in all_reduce.
        """
        b, c, _ = self._prepare(x, "all_to_all input", None, compression, device_path=True, policy=policy)
        w = self._world_size
        d = self._decide("all_to_all", b, c, compression, b.nbytes, policy)
        if send_counts is None and recv_counts is None:
            if not (len(b.shape) >= 1 and b.shape[0] % w == 0) and b.size % w != 0:
                raise InvalidArgumentError(
                    f"all_to_all input {_dlpack.describe(b)}: neither the first dimension nor the element count "
                    f"({b.size}) is divisible by the world size {w}; pass send_counts= for uneven blocks"
                )
            shape = b.shape if len(b.shape) >= 1 and b.shape[0] % w == 0 else (b.size,)
            o = _dlpack.check_output(out, b, shape, "all_to_all out") if out is not None else _dlpack.empty(b, shape)
            st = self._native.all_to_all(b.native, o.native, c, b.as_dtype, _hints(d))
        else:
            if send_counts is None:
                raise InvalidArgumentError("all_to_all: recv_counts= needs send_counts= too")
            rows = b.shape[0] if len(b.shape) >= 1 else 1
            row = _prod(b.shape[1:])  # elements per row
            sc = self._counts(send_counts, "send_counts")
            if sum(sc) != rows:
                raise InvalidArgumentError(
                    f"all_to_all: send_counts add up to {sum(sc)} rows but the input {_dlpack.describe(b)} has "
                    f"{rows} (its first dimension)"
                )
            rc = self._counts(recv_counts, "recv_counts") if recv_counts is not None else self._exchange_counts(sc)
            shape = (sum(rc), *b.shape[1:]) if len(b.shape) >= 1 else (sum(rc),)
            o = _dlpack.check_output(out, b, shape, "all_to_all out") if out is not None else _dlpack.empty(b, shape)
            st = self._native.all_to_allv(b.native, o.native, [n * row for n in sc], [n * row for n in rc], c,
                                          b.as_dtype, _hints(d))
        self._record("all_to_all", c, st, d)
        return _result(o, out)

    def _counts(self, counts: Any, what: str) -> list:
        """send_counts / recv_counts as a list of world_size non-negative ints."""
        try:
            vals = [int(v) for v in (counts.tolist() if hasattr(counts, "tolist") else counts)]
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"all_to_all: {what} must be a sequence of integers, got {counts!r}") from None
        if len(vals) != self._world_size or any(v < 0 for v in vals):
            raise InvalidArgumentError(
                f"all_to_all: {what} must have one non-negative count per rank ({self._world_size}), got {vals}"
            )
        return vals

    def _exchange_counts(self, send_counts: list) -> list:
        """Every rank's send_counts for this rank: an all_to_all of one int64 per rank."""
        import numpy as np

        mine = np.asarray(send_counts, dtype=np.int64)
        theirs = np.empty_like(mine)
        self._native.all_to_all(mine, theirs, _compression(None), "", None)
        return [int(v) for v in theirs]

    @_queueable
    @_name_rank
    def send(self, x: Any, peer: int, compression: Any = None) -> None:
        """Sends ``x`` to ``peer`` (which must call recv with the same count, dtype and compression)."""
        peer = self._check_rank(peer, "send peer")
        b, c, _ = self._prepare(x, "send buffer", None, compression, device_path=True, policy="off")
        st = self._native.send(b.native, peer, c, b.as_dtype)
        self._record("send", c, st)

    @_queueable
    @_name_rank
    def recv(self, x: Any, peer: int, compression: Any = None) -> Any:
        """Receives from ``peer`` into ``x`` (writable); returns ``x``. A JAX array (immutable) is only
        the template: a new JAX array of its shape and dtype on its device gets the data and is returned."""
        peer = self._check_rank(peer, "recv peer")
        b, c, _ = self._prepare(x, "recv buffer", None, compression, load=False, device_path=True, policy="off")
        o = self._written(b, "recv buffer")
        st = self._native.recv(o.native, peer, c, o.as_dtype)
        self._record("recv", c, st)
        return _result(o, x if o is b else None)

    @_queueable
    def group(self, sends: Any = (), recvs: Any = (), compression: Any = None) -> list:
        """Sends and recvs that run together (NCCL's ncclGroupStart / ncclGroupEnd around them): a
        ring shift, a halo exchange or both directions of one pair complete, where single calls
        would wait for each other. ``sends``: ``(array, peer)`` or ``(array, peer, compression)``
        items; ``recvs`` alike, into writable arrays (``compression`` is the default of items
        without one). Each item matches the peer's next send or recv with this rank as a single
        call would (count, dtype, compression); only the order among the sends and among the
        recvs counts. The peer may group its calls too or make them one by one, in any order
        that keeps its sends and its recvs with this rank in theirs. At most NCCLZ_NSLOTS (default 4) sends to and recvs from one peer per
        group. GPU arrays run on host copies. Returns the recv arrays; raises the first item's
        error after the others ran (InvalidArgumentError for this rank's arguments, RemoteError
        for the peer's); items that do not match abort the communicator."""

        def items(given: Any, what: str) -> list:
            if isinstance(given, tuple) and len(given) in (2, 3) and isinstance(given[1], (int, np.integer)):
                given = [given]  # one item passed alone
            out = []
            for i, item in enumerate(given):
                if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                    raise InvalidArgumentError(
                        f"rank {self._rank}: group: {what}[{i}] must be (array, peer) or (array, peer, "
                        f"compression), got {type(item).__name__}"
                    )
                peer = self._check_rank(item[1], f"group {what}[{i}] peer")
                comp = item[2] if len(item) == 3 else compression
                b, c, _ = self._prepare(
                    item[0], f"group {what}[{i}] buffer", None, comp, load=what == "sends"
                )
                out.append((item[0], b, peer, c))
            return out

        s_items, r_items = items(sends, "sends"), items(recvs, "recvs")
        written = []
        for x, b, _, _ in r_items:
            o = self._written(b, "group recv buffer")
            written.append((x, b, o))
        st = self._native.group(
            [(b.native, peer, c, b.as_dtype) for _, b, peer, c in s_items],
            [(o.native, peer, c, o.as_dtype) for (_, _, peer, c), (_, _, o) in zip(r_items, written)],
        )
        self._record(
            "group", r_items[0][3] if r_items else (s_items[0][3] if s_items else _compression(None)), st
        )
        return [_result(o, x if o is b else None) for x, b, o in written]

    @staticmethod
    def _written(b: Any, what: str) -> Any:
        """The buffer a call writes for the caller's array b (recv's, a non-root scatter's out=): b
        itself, or for an immutable JAX array a new array like it (returned instead of b)."""
        if b.writable:
            return b
        if not b.immutable:
            raise InvalidArgumentError(f"{what} {_dlpack.describe(b)} is read-only; pass a writable array")
        return _dlpack.empty(b, b.shape)

    @_queueable
    @_name_rank
    def barrier(self) -> None:
        """Returns when every rank has called barrier()."""
        self._native.barrier()

    @_queueable
    @_name_rank
    def split(self, color: int | None, key: int = 0) -> Communicator | None:
        """A new communicator of the ranks that pass the same ``color`` (NCCL's ncclCommSplit,
        MPI's Comm_Split): every rank of this communicator calls it, in order with its other calls.
        The new ranks go by ``key``, then by their rank here; ``color=None`` joins none (returns None).
        The new communicator has this one's settings and policy (a NCCLZ_TOPO_HOSTS layout cut to its
        members' part) and is independent of it: close each one. Colors are ints >= 0, keys ints
        (32 bits). A color or key that is not one, on any rank, fails the call on every rank
        (InvalidArgumentError here, RemoteError naming this rank elsewhere)."""
        def small(v: Any, lo: int) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= int(v) < 2**31

        bad = None
        if color is not None and not small(color, 0):
            bad = f"split: color must be an int >= 0 (32 bits) or None, got {color!r}"
        elif not small(key, -(2**31)):
            bad = f"split: key must be a 32-bit int, got {key!r}"
        c = -1 if color is None or bad else int(color)
        # (a bad argument travels as a color that is none: every rank's split fails, none waits)
        try:
            native = self._native.split(-2 if bad else c, 0 if bad else int(key))
        except InvalidArgumentError:
            if bad:
                raise InvalidArgumentError(bad) from None
            raise
        if native is None:
            return None
        made = Communicator.__new__(Communicator)
        made._native = native
        made._setup(int(native.rank), int(native.size), self._transport, self._setting, native.config)
        return made

    # ---- lifetime -----------------------------------------------------------
    def abort(self, reason: str = "aborted by user") -> None:
        """Makes pending and future calls fail with AbortedError (here and, where reachable, on peers)."""
        self._native.abort(str(reason))

    def synchronize(self) -> None:
        """Waits for every call queued with ``async_op=True`` so far; raises the first exception among
        them that no ``Work.wait()`` has raised yet (the others still ran). Returns at once when
        nothing is queued."""
        if self._queue is not None:
            self._queue.synchronize()

    def close(self) -> None:
        """Waits for the queued asynchronous calls, then releases the connections. Further calls raise
        InvalidArgumentError."""
        q = getattr(self, "_queue", None)
        if q is not None:
            q.stop()
        self._native.close()

    def __enter__(self) -> Communicator:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.closed:
            self.abort(f"exception on rank {self._rank}: {exc_type.__name__}")
        self.close()


def _block_shape(b: Any, w: int, what: str) -> tuple:
    """The shape of one of w blocks of b: along the first dimension when it divides, else 1-D of
    the element count."""
    if len(b.shape) >= 1 and b.shape[0] % w == 0:
        return (b.shape[0] // w, *b.shape[1:])
    if b.size % w == 0:
        return (b.size // w,)
    raise InvalidArgumentError(
        f"{what} {_dlpack.describe(b)}: neither the first dimension nor the element count ({b.size}) is "
        f"divisible by the world size {w}"
    )


def _result(o: Any, given: Any) -> Any:
    """What a collective returns once the native call wrote ``o``: ``given`` (the caller's own
    array: x in place, or out=) after a staged GPU array got its result back, else a new array
    (on the input's device for GPU inputs)."""
    if given is not None:
        _dlpack.finish(o)
        return given
    return _dlpack.to_user(o)


def _prod(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def init(**kwargs: Any) -> Communicator:
    """A communicator from the environment (ncclz-run, torchrun, mpirun, or variables you set).

    Keyword arguments override the environment (see :class:`Communicator`).
    """
    return Communicator(**kwargs)


def make_unique_id(addr: str = "", port: int = 0) -> bytes:
    """On rank 0: a bootstrap id (128 bytes) to share with the other ranks, who pass it as
    ``Communicator(unique_id=...)``. This process must then be rank 0."""
    return _native.UniqueId.make(addr, int(port)).bytes
