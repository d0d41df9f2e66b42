"""The policy as a communicator runs it: the contract ``ncclz.comm`` depends on.

Per call the Communicator asks, then tells::

    d = comm_policy.choose(Call(...), override)   # before the native call: what to propose
    ...the native call, with d's proposal (d.lighter, d.rans_margin)...
    comm_policy.record(d, stats)                  # after it: the mode that ran, bytes, wall time

and ``d.describe(ran, lightened)`` is what ``last_stats.policy`` says.

Only rank 0 decides (``"auto"``, the default): its proposal rides in the call descriptor every call
exchanges anyway (one byte each, ``CallDesc::lighter``, ``CallDesc::rans_margin`` and
``CallDesc::algorithm``), so all ranks run the same mode and algorithm with no extra message; the
other ranks neither calibrate nor measure. Where the topology allows hierarchical collectives the
policy also proposes the algorithm (uncompressed calls included: the faster of ring and
hierarchical by the model and measurements), unless NCCLZ_ALGO / the call's ``algorithm=`` fixes
it. Rank 0
records every call's time with the mode that ran (calls forced with ``policy="off"`` included) and
learns the link rate from calls of >= 1 MiB on the wire (send / recv included). ``"off"`` runs the
requested mode. A call's own ``policy=`` overrides the communicator's setting both ways: ``"off"``
forces one call's mode, and ``"auto"`` on a communicator set to ``"off"`` lets rank 0 decide that
call (and learn from it, and from nothing else).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any

from ..errors import InvalidArgumentError
from ..spec import Lossless, Lossy
from .decision import DEFAULT_MIN_BYTES, Policy, env_float
from .history import device_dtype
from .memory_link import memory_link
from .modes import effort_of_margin

#: Values of ``Communicator(policy=...)``, the per-call ``policy=`` and NCCLZ_POLICY.
POLICIES = ("auto", "off")

_log = logging.getLogger("ncclz.policy")
_DEBUG = (os.environ.get("NCCLZ_DEBUG") or "").upper() in ("INFO", "TRACE")


def policy_name(v: Any, what: str) -> str:
    """"auto" or "off" from a setting (any case); InvalidArgumentError naming `what` otherwise."""
    if not isinstance(v, str) or v.strip().lower() not in POLICIES:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(POLICIES)}, got {v!r}")
    return v.strip().lower()


@dataclasses.dataclass(frozen=True)
class Setting:
    """A communicator's policy setting, validated: mode "auto" or "off", and the model to decide
    with (None: a default :class:`Policy`, made when first needed)."""

    mode: str
    model: Any = None


def resolve_setting(setting: Any) -> Setting:
    """The Setting of ``Communicator(policy=...)``: None (NCCLZ_POLICY, default "auto"), "auto",
    "off", or a Policy instance (or any object with ``choose(coll, x, requested, nbytes)``), which
    means "auto" with that model. Checks the environment the policy reads, so that bad values fail
    when the communicator is created, on every rank. Raises InvalidArgumentError."""
    model = None
    if setting is None:
        env = os.environ.get("NCCLZ_POLICY") or None
        mode = "auto" if env is None else policy_name(env, "environment variable NCCLZ_POLICY")
    elif isinstance(setting, str):
        mode = policy_name(setting, "Communicator policy")
    elif callable(getattr(setting, "choose", None)):
        mode, model = "auto", setting
    else:
        raise InvalidArgumentError(
            f"Communicator policy must be one of {', '.join(POLICIES)} or an ncclz.policy.Policy, got {setting!r}"
        )
    if mode == "auto":
        for name in ("NCCLZ_LINK_GBPS", "NCCLZ_CORES_PER_RANK"):
            try:
                env_float(name)
            except ValueError as e:
                raise InvalidArgumentError(str(e)) from None
    return Setting(mode, model)


class Call:
    """One collective call as the policy sees it.

    collective: one of :data:`ncclz.policy.COLLECTIVES` ("all_reduce", "reduce_scatter",
    "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all"); dtype: the element
    type's name; nbytes: the nccl-tests size (all_gather and gather: the output; scatter: the
    root's input; all_to_all: this rank's input); mode, bound: the requested
    compression as the native layer names it ("none", "lossless", "lossy_abs", "lossy_rel") and its
    bound; spec: the caller's ncclz.Lossy / Lossless if given as one; data: the input as a NumPy
    array, or a function returning it (called only where the policy calibrates); op: the reduction
    ("sum" for the others); algorithm: the call's own ``algorithm=`` ("" for none); device: the
    arrays are CUDA arrays that the runtime codes on the GPU (the data is then a host copy, made
    only where the policy calibrates)."""

    __slots__ = ("_data", "_spec", "algorithm", "bound", "collective", "device", "dtype", "mode", "nbytes", "op")

    def __init__(self, collective: str, dtype: str, nbytes: int, mode: str, bound: float = 0.0,
                 spec: Any = None, data: Any = None, op: str = "sum", algorithm: str = "", device: bool = False):
        # plain assignments: a Call is made for every collective call
        self.collective, self.dtype, self.nbytes, self.mode, self.bound = collective, dtype, nbytes, mode, bound
        self._spec, self._data = spec, data
        self.op, self.algorithm, self.device = op or "sum", algorithm or "", bool(device)

    @property
    def requested(self) -> Lossy | Lossless | None:
        """The requested compression as a spec."""
        if not isinstance(self._spec, (Lossy, Lossless)):
            if self.mode == "none":
                return None
            if self.mode == "lossless":
                self._spec = Lossless()
            else:
                self._spec = Lossy(abs=self.bound) if self.mode == "lossy_abs" else Lossy(rel=self.bound)
        return self._spec

    def release(self) -> None:
        """Drops the input (or the function that returns it) once the call was made: a Decision kept
        for ``last_stats`` must not keep the caller's array alive, nor, through that function, the
        communicator (a reference cycle that only the cyclic collector frees)."""
        self._data = None

    def array(self):
        """The input as a NumPy array, or None where there is no NumPy view of it (or no longer: release)."""
        d = self._data
        if callable(d):
            try:
                d = d()
            except Exception:  # noqa: BLE001 - e.g. bfloat16 without ml_dtypes: nothing to calibrate on
                d = None
        return d


class Decision:
    """The policy's answer for one call.

    lighter: "" or the lighter mode proposed ("none", "lossless"); rans_margin, effort: the codec
    effort proposed for a lossy call (None / ""); algorithm: "" or the algorithm proposed ("ring",
    "hierarchical"); why: what last_stats.policy reports (a string, or rank 0's
    :class:`~ncclz.policy.Choice`, formatted only when asked); learn: whether this rank records the
    call's outcome."""

    __slots__ = ("algorithm", "call", "effort", "learn", "lighter", "rans_margin", "why")

    def __init__(self, call: Call | None, why: Any = None, lighter: str = "", rans_margin: float | None = None,
                 effort: str = "", learn: bool = False, algorithm: str = ""):
        self.call, self.why, self.lighter = call, why, lighter
        self.rans_margin, self.effort, self.learn = rans_margin, effort, learn
        self.algorithm = algorithm

    def describe(self, ran: str, lightened: bool) -> str:
        """last_stats.policy: what the policy did and why, given the mode that ran (`ran`) and
        whether it was rank 0's lighter proposal (`lightened`)."""
        why = self.why
        if why is None:
            return ""
        if not isinstance(why, str):
            why = f"auto: {why}"
        elif why == "auto":  # not rank 0: say what rank 0's decision did here
            return f"auto: rank 0 chose {ran}" if lightened else "auto: rank 0 kept the requested mode"
        if self.lighter and not lightened and why.startswith("auto"):
            why += f"; not taken: the exact {self.lighter} sum in the element type could exceed the bound"
        return why


_AS_REQUESTED = Decision(None)  # no compression requested, nothing to learn
_OFF = Decision(None, "off")
_FOLLOW = Decision(None, "auto")  # a rank that follows rank 0
# ... on a small compressed call, which rank 0's policy runs exact (Policy.min_bytes): this rank's
# hints say so, and the runtime sends its data with the call descriptor (the latency algorithm; the
# mode is still rank 0's proposal alone)
_FOLLOW_SMALL = Decision(None, "auto", lighter="none")


class _Observation:
    """What Policy.observe reads from a call (the mode that ran, wire bytes, wall time)."""

    __slots__ = ("compression", "wall_s", "wire_bytes")

    def __init__(self, compression: str, wire_bytes: int, wall_s: float):
        self.compression, self.wire_bytes, self.wall_s = compression, wire_bytes, wall_s


class CommPolicy:
    """The policy of one communicator (see the module doc).

    setting: from :func:`resolve_setting`; nchannels: the communicator's channel count (the cost
    model caps a call's codec cores at it), None if unknown; topology: the communicator's
    (:class:`ncclz.Topology`, None: one host; where all ranks share one host over a memory-class
    transport, the model takes the link to be memory: :mod:`ncclz.policy.memory_link`); algorithm: NCCLZ_ALGO as the communicator resolved it
    ("auto": the policy proposes one where the topology allows a choice); latency_bytes: the
    communicator's NCCLZ_LATENCY_BYTES: calls up to this size get no algorithm proposal, so that the
    runtime runs the exact ones with its latency algorithm (the policy's model has no per-hop
    latency term to weigh it with)."""

    def __init__(self, setting: Setting, rank: int, world_size: int, nchannels: int | None = None,
                 topology: Any = None, algorithm: str = "auto", latency_bytes: int = 0):
        self.mode = setting.mode
        self.rank, self.world_size = int(rank), int(world_size)
        self.nchannels = None if not nchannels else int(nchannels)
        self.hosts = int(getattr(topology, "hosts", 1) or 1)
        self.local_size = int(getattr(topology, "local_size", 1) or 1)
        self.hierarchical = bool(getattr(topology, "hierarchical", False))
        # "shm" / "inproc" where every rank is on one host joined by memory (policy/memory_link.py)
        self.memory_link = memory_link(topology, self.world_size)
        self.algorithm = algorithm if algorithm in ("ring", "hierarchical") else ""
        self.latency_bytes = max(0, int(latency_bytes or 0))
        self._model = None
        self._small = None  # small_bytes(), once known
        if setting.model is not None:
            self._model = self._bind(setting.model)

    # ---- the model --------------------------------------------------------------------
    @property
    def model(self) -> Any:
        """The model that decides on this rank (a :class:`Policy` unless one was given); made on
        first use."""
        if self._model is None:
            self._model = Policy(world_size=self.world_size, nchannels=self.nchannels, hosts=self.hosts,
                                 hierarchical=self.hierarchical, memory_link=self.memory_link)
        return self._model

    def _bind(self, model: Any) -> Any:
        if not callable(getattr(model, "choose", None)):
            raise InvalidArgumentError(f"a policy must be an ncclz.policy.Policy (or have choose()), got {model!r}")
        if isinstance(model, Policy):
            if model.n is None:
                model.n = self.world_size
            elif model.n != self.world_size:
                raise InvalidArgumentError(
                    f"Policy(world_size={model.n}) given to a communicator of {self.world_size} ranks; "
                    "pass world_size=None (the communicator fills it in) or the communicator's size"
                )
            if model.nchannels is None:
                model.nchannels = self.nchannels
            if model.hosts is None:
                model.hosts = self.hosts
                model.hierarchical = self.hierarchical
            if model.memory_link is None:
                model.memory_link = self.memory_link
        return model

    def reset(self, model: Any = None) -> None:
        """Forgets what the model learned: a fresh default Policy, or `model` from now on."""
        self._model = None if model is None else self._bind(model)
        self._small = None

    # ---- ask ------------------------------------------------------------------------------
    def choose(self, call: Call, override: str | None = None) -> Decision:
        """The decision for `call`; `override`: the call's own ``policy=`` ("auto", "off", None)."""
        mode = self.mode if override is None else policy_name(override, f"{call.collective}: policy")
        # a call forced "off" on an "auto" communicator still teaches rank 0 (its time and mode); an
        # "off" communicator's rank 0 learns only from the calls that ask for "auto" themselves
        learn = self.rank == 0 and self.world_size > 1 and "auto" in (mode, self.mode)
        # the algorithm is the policy's to propose where the topology offers a choice and neither
        # NCCLZ_ALGO nor the call fixed it
        fixed = call.algorithm or self.algorithm
        algo_choice = (learn and mode == "auto" and self.hierarchical and not fixed
                       and call.nbytes > self.latency_bytes)
        if call.mode == "none":
            if algo_choice and hasattr(self.model, "choose_algorithm"):
                try:
                    algo, _ = self.model.choose_algorithm(call.collective, call.nbytes,
                                                          device_dtype(call.dtype, call.device))
                except Exception:  # noqa: BLE001 - no proposal: the runtime's default
                    algo = ""
                return Decision(call, learn=True, algorithm=algo)
            return Decision(call, learn=True) if learn else _AS_REQUESTED
        if mode == "off":
            return Decision(call, "off", learn=True) if learn else _OFF
        if not learn:
            return _FOLLOW_SMALL if 0 < call.nbytes <= self.small_bytes() and self.world_size > 1 else _FOLLOW
        model = self.model
        if isinstance(model, Policy) and call.nbytes < model.min_bytes and not algo_choice and not fixed:
            # the model's first rule, without its calibration and predictions (small calls are many)
            return Decision(call, f"auto: none (message {call.nbytes} B < {model.min_bytes} B: latency-bound)",
                            lighter="none", learn=True)
        # the memory-class rule needs no data (a device call's host copy is not made)
        choice = model.exact_on_memory(call.collective, call.dtype, call.requested, call.nbytes, call.device) \
            if isinstance(model, Policy) else None
        if choice is None:
            arr = call.array()
            if arr is None:
                return Decision(call, "auto: as requested (no NumPy view of the data to calibrate on)", learn=True)
            try:
                if isinstance(model, Policy):
                    choice = model.choose(call.collective, arr, call.requested, call.nbytes, op=call.op,
                                          algorithm=fixed or None, device=call.device)
                else:  # a custom policy: the original signature
                    choice = model.choose(call.collective, arr, call.requested, call.nbytes)
            except Exception as e:  # noqa: BLE001 - rank 0 must still make the call the others are making
                return Decision(call, f"auto: as requested (the policy failed: {type(e).__name__}: {e})", learn=True)
        d = Decision(call, choice, learn=True)
        if algo_choice:
            d.algorithm = getattr(choice, "algorithm", "") or ""
        requested = "lossy" if call.mode.startswith("lossy") else call.mode
        if choice.mode in ("none", "lossless") and choice.mode != requested:
            d.lighter = choice.mode
        elif choice.mode == "lossy" and requested == "lossy" and getattr(choice, "rans_margin", None) is not None:
            d.rans_margin = float(choice.rans_margin)
            # a custom policy's Choice may give only the margin
            d.effort = getattr(choice, "effort", None) or effort_of_margin(d.rans_margin)
        if _DEBUG or _log.isEnabledFor(logging.DEBUG):
            req = f"{call.mode}({call.bound:g})" if call.mode.startswith("lossy") else call.mode
            msg = f"policy: {call.collective} {call.nbytes} B, requested {req}: auto: {choice}"
            _log.debug("rank %d: %s", self.rank, msg)
            if _DEBUG:
                print(f"ncclz rank {self.rank}: INFO {msg}", file=sys.stderr, flush=True)
        return d

    def small_bytes(self) -> int:
        """The calls rank 0's policy runs exact by size alone, as far as this rank can tell, and learns
        nothing from: up to the communicator's latency_bytes, and below the model's min_bytes (0: none)."""
        if self._small is None:
            small = self.latency_bytes
            # the model's min_bytes where one was given (a follower builds none of its own)
            mb = DEFAULT_MIN_BYTES if self._model is None else getattr(self._model, "min_bytes", None)
            if isinstance(mb, (int, float)):
                small = min(small, int(mb) - 1)
            self._small = max(0, small)
        return self._small

    # ---- tell -----------------------------------------------------------------------------
    def record(self, decision: Decision | None, stats: Any) -> None:
        """Learns from a finished call: `stats` is the native call's statistics (``ran_mode``,
        ``lightened``, ``wire_bytes``, ``wall_s``); `decision` what choose() returned (None for
        send / recv, which only tell the link rate)."""
        if self.rank != 0 or (self.mode != "auto" and not (decision is not None and decision.learn)):
            return
        model = self.model
        algo = str(getattr(stats, "algorithm", "ring"))
        # a hierarchical call's wire bytes are this rank's share of its host's link: L ranks send them
        wire = stats.wire_bytes * (self.local_size if algo == "hierarchical" else 1)
        if wire >= (1 << 20) and hasattr(model, "observe"):
            model.observe(_Observation(stats.ran_mode, wire, stats.wall_s))
        if decision is None or not decision.learn or not hasattr(model, "record"):
            return
        call = decision.call
        if call.nbytes <= self.latency_bytes and call.nbytes < getattr(model, "min_bytes", 0):
            return  # nothing to learn: the size alone decides these calls (and no algorithm is proposed)
        ran = stats.ran_mode
        effort = ""
        if stats.lightened or ran == "none":
            spec = None if ran == "none" else Lossless()
        else:
            spec, effort = call.requested, decision.effort
        kw = {"effort": effort} if effort else {}
        if algo != "ring" and isinstance(model, Policy):
            kw["algorithm"] = algo
        model.record(call.collective, device_dtype(call.dtype, call.device), call.nbytes, spec, float(stats.wall_s),
                     **kw)
