"""The decision: :class:`Policy` chooses none, lossless or the requested lossy mode per call.

Given the message size, the collective, the number of ranks, the link rate and how fast the codec
runs on this machine, which of ``none``, ``lossless`` and ``lossy`` (the caller's bound; never
looser) finishes first? Compression must never make a call much slower than sending it raw, so the
caller's compressed mode is kept only when it is predicted a clear win (``margin``, default 20%)
over the lighter modes; otherwise the fastest lighter mode is used, and ``none`` for small
messages. With an unknown link rate the caller's mode is kept (no evidence).

Inputs: the cost model (:mod:`.model`), calibrations (:mod:`.calibration`), the measurement history
(:mod:`.history`) and the link rate: ``link_gbps=``, else ``NCCLZ_LINK_GBPS``, else
``NCCLZ_SOCKET_THROTTLE_GBPS``, else what :meth:`Policy.observe` learns from uncompressed calls
(``wire_bytes / wall_s``, an exponential average; a compressed call only raises the estimate: its
wall time includes the codec). Where every rank is on one host joined by a memory-class transport
(``memory_link`` "shm" or "inproc"; the Communicator fills it in from its topology) the link is
memory: without a configured rate a host call runs none by rule, before any calibration
(:meth:`Policy.exact_on_memory`; the reason starts "one host over shared memory: no host codec is
faster than ..."), until a compressed mode has a measured time for the size class; from then on,
and for device calls, the model takes the memory-class rate of :mod:`.memory_link`
(``memory_gbps``, half a memcpy measured once, times the cores a call's codec gets; device calls
:data:`~ncclz.policy.memory_link.DEVICE_MEMORY_GBPS`), or an observed rate above it, and the reason
starts with "one host over shared memory, link <rate> (<source>): " (:meth:`Policy.link_used`).
cores_per_rank: ``NCCLZ_CORES_PER_RANK``, else os.cpu_count() /
LOCAL_WORLD_SIZE, capped at the communicator's channel count (``nchannels``; no cap while unknown).

Measured times win over the model: where a mode has a measurement for the call's size class,
``choose()`` uses it instead of the prediction (modes not measured get the model scaled by how far
off it was for the measured ones). When a lighter mode is measured and the requested one is not,
the requested mode runs until it is measured too (two calls: the first is cold; one for another
codec effort), unless the model (scaled by its error on the requested mode's measured variants, if
any: a CPU-bound plain path tells little about the codec) puts it beyond ``probe_factor`` (2) times
the lighter mode's measured time. With both measured, a margin of ``measured_margin`` (5%) decides
instead of ``margin``. When a measurement keeps the requested mode off, it re-runs the requested
mode every ``probe_every``-th (64) call to refresh it.

Codec effort: a lossy request has up to four variants with the same bound and result
(:mod:`.modes`), each calibrated and measured on its own; an unmeasured variant is measured (one call
each) when the model puts it within ``probe_factor`` of the fastest measured mode, and the fastest one
runs (``Choice.rans_margin``; ``efforts=False`` keeps the default only). ``lossy/dense`` (rANS on any
gain) is a candidate only where the link is the bottleneck: where the default effort's calibration
codes the raw bytes (its encode speed times the rank's cores) faster than the link carries them
divided by its ratio, on any algorithm the call may run (a hierarchical call's rank has 1/L of its
host's link: L ranks' wires share it). Elsewhere fewer bytes cannot pay for a slower coder, and the
call pays no calibration of it.

Algorithm: where the topology allows hierarchical collectives (``hosts`` > 1 hosts with the same
number > 1 of ranks each; the Communicator fills in its :attr:`~ncclz.Communicator.topology`), each
mode is predicted with the flat ring and the hierarchical algorithm (:mod:`.model`; a lossy sum's
hierarchical calibration at L times the bound, since it quantizes with E/H where the ring uses E/n),
measured times win per (mode, algorithm), and the faster runs (``Choice.algorithm``). Lossless takes
none's algorithm, so the two stay bit-identical to each other whatever the policy proposes. A call's
``algorithm=`` restricts the choice to that algorithm.

Device calls (``choose(..., device=True)``: CUDA arrays the runtime codes on the GPU): the model's
device speeds replace the calibration's and the rank's cores (:mod:`.model`), a lossy request has one
variant (the device codes without rANS whatever the effort: calibrated as ``lossy/fast``, run as
``lossy``), and measurements are filed apart from host calls' (the dtype with ``@cuda``,
:func:`~ncclz.policy.history.device_dtype`).

Use::

    from ncclz.policy import Policy
    pol = Policy(world_size=4, link_gbps=0.5)
    choice = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3))
    comm.all_reduce(x, compression=choice.compression)
    print(choice)                                          # the prediction for every mode

``choose(..., requested=ncclz.Lossless())`` only considers none and lossless, and
``requested=None`` always returns none. The decision never weakens the caller's guarantee: none and
lossless are exact, so they satisfy any lossy bound.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from ..spec import Lossless, Lossy
from .calibration import Calibration, Calibrator, reduction_terms
from .history import DEVICE_SUFFIX, History, device_dtype, size_class
from .memory_link import DEVICE_MEMORY_GBPS, MEMORY_LINKS, memory_link_gbps
from .model import INTRA_FACTOR, CostModel
from .modes import EFFORTS, bounded, label, mode_class


@dataclasses.dataclass
class Choice:
    """What :meth:`Policy.choose` decided.

    mode: "none", "lossless" or "lossy"; compression: what to pass as ``compression=`` (None,
    ncclz.Lossless() or the caller's Lossy); predicted_s: mode name -> predicted (or measured)
    seconds (with its algorithm); reason: why; measured: the mode names whose time in predicted_s
    was measured on earlier calls; rans_margin, effort (lossy only): the codec effort (None / "":
    the default; see :mod:`ncclz.policy.modes`); algorithm: the algorithm to run ("ring",
    "hierarchical"; "" where the policy has no opinion: the runtime's default); algorithms: mode
    name -> its algorithm in predicted_s; by_algorithm: mode name -> {algorithm: seconds}, where more
    than one was predicted."""

    mode: str
    compression: Any
    predicted_s: dict
    reason: str
    measured: tuple = ()
    rans_margin: float | None = None
    effort: str = ""
    algorithm: str = ""
    algorithms: dict = dataclasses.field(default_factory=dict)
    by_algorithm: dict = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        def one(k, v):
            a = self.algorithms.get(k)
            on = f" ({_SHORT.get(a, a)})" if a and len(self.by_algorithm.get(k, ())) > 1 else ""
            return f"{k}{on} {v * 1e3:.1f} ms{' (measured)' if k in self.measured else ''}"

        p = ", ".join(one(k, v) for k, v in self.predicted_s.items())
        effort = f"/{self.effort}" if self.effort else ""
        algo = f" on {self.algorithm}" if self.algorithm and len(self.by_algorithm.get(self.mode, ())) > 1 else ""
        # a rule that predicts nothing (Policy.exact_on_memory) says so by leaving the predictions out
        return f"{self.mode}{effort}{algo} ({self.reason}{f'; predicted {p}' if p else ''})"


_SHORT = {"hierarchical": "hier"}


def env_float(*names: str) -> float | None:
    """The first of the variables that is set, as a number > 0 (ValueError for anything else)."""
    for n in names:
        v = os.environ.get(n)
        if v:
            try:
                f = float(v)
            except ValueError:
                f = float("nan")
            if not (0 < f < float("inf")):
                raise ValueError(f"environment variable {n}={v!r} must be a number > 0")
            return f
    return None


#: Policy.min_bytes by default: messages below it are latency-bound (none runs them).
DEFAULT_MIN_BYTES = 256 << 10


class Policy:
    """Chooses none / lossless / lossy per call (see the module doc).

    world_size: the ranks of the communicator (None: filled in by the Communicator it is given
    to); link_gbps: the link rate (None: the environment, else observed); cores_per_rank: CPU cores
    of each rank's codec (None: the environment, else CPUs / LOCAL_WORLD_SIZE); nchannels: the
    communicator's channel count, which caps the cores a call's codec uses (None: filled in by the
    Communicator; no cap meanwhile); memory_link: "shm" or "inproc" where every rank is on one host
    joined by that memory-class transport, "" where not (None: filled in by the Communicator from its
    topology; "" meanwhile); memory_gbps: the link rate taken there while none is configured or
    observed (None: measured on first use, :func:`~ncclz.policy.memory_link.memory_link_gbps`). The
    other parameters are the model's (module doc)."""

    def __init__(self, world_size: int | None = None, link_gbps: float | None = None,
                 cores_per_rank: float | None = None, *, nchannels: int | None = None,
                 hosts: int | None = None, hierarchical: bool | None = None,
                 alpha_s: float = 50e-6, goodput: float = 0.95, overlap: float = 0.25, margin: float = 0.2,
                 min_bytes: int = DEFAULT_MIN_BYTES, sample_bytes: int = 4 << 20, quant_Bps: float = 2e9, reps: int = 3,
                 measured_margin: float = 0.05, probe_factor: float = 2.0, probe_every: int = 64,
                 window: int = 4, efforts: bool = True, intra_Bps: float = 4e9, memory_link: str | None = None,
                 memory_gbps: float | None = None):
        self.n = None if world_size is None else int(world_size)
        if memory_link not in (None, "", *MEMORY_LINKS):
            raise ValueError(f"memory_link must be one of {', '.join(MEMORY_LINKS)}, '' or None, got {memory_link!r}")
        if memory_gbps is not None and not (0 < float(memory_gbps) < float("inf")):
            raise ValueError(f"memory_gbps must be a number > 0 or None, got {memory_gbps!r}")
        self.memory_link = memory_link
        self._memory_gbps = None if memory_gbps is None else float(memory_gbps)
        self.nchannels = None if nchannels is None else int(nchannels)
        # the topology (the Communicator fills it in): hosts, and whether hierarchical collectives can run
        self.hosts = None if hosts is None else int(hosts)
        self.hierarchical = (self.hosts is not None and self.hosts > 1) if hierarchical is None else bool(hierarchical)
        self._link_gbps = link_gbps if link_gbps else env_float("NCCLZ_LINK_GBPS", "NCCLZ_SOCKET_THROTTLE_GBPS")
        # a configured rate (argument or environment) is used as is; observe() fills in when there is none
        self.configured = self._link_gbps is not None
        if cores_per_rank is None:
            cores_per_rank = env_float("NCCLZ_CORES_PER_RANK")
        if cores_per_rank is None:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
            cores_per_rank = (os.cpu_count() or 1) / max(1, local)
        self.cores_per_rank = float(cores_per_rank)
        self.model = CostModel(alpha_s=alpha_s, goodput=goodput, overlap=overlap, quant_Bps=quant_Bps,
                               intra_Bps=intra_Bps)
        self.margin, self.min_bytes = margin, min_bytes
        self.calibrator = Calibrator(sample_bytes=sample_bytes, reps=reps)
        self.history = History(window=window)
        self.observed = 0  # calls observe() learned the link from
        self.probe_every = probe_every
        self.probe_factor = probe_factor
        # also consider the requested lossy bound with the other codec efforts (Choice.rans_margin)
        self.efforts = efforts
        self.measured_margin = measured_margin
        self._lighter_run: dict = {}

    # ------------------------------------------------------------------ configuration
    @property
    def link_gbps(self) -> float | None:
        """The link rate the model uses (Gbit/s), None while unknown. Setting it configures it
        (observations no longer change it); setting None makes it unknown and observable again."""
        return self._link_gbps

    @link_gbps.setter
    def link_gbps(self, gbps: float | None) -> None:
        if gbps is not None and not (0 < float(gbps) < float("inf")):
            raise ValueError(f"link_gbps must be a number > 0 or None, got {gbps!r}")
        self._link_gbps = None if gbps is None else float(gbps)
        self.configured = gbps is not None

    @property
    def memory_gbps(self) -> float:
        """The link rate (Gbit/s) per core that host calls take on a memory-class host (``memory_link``)
        while none is configured or observed: ``memory_gbps=``, else measured once (:mod:`.memory_link`);
        a call takes it times :attr:`cores` (:meth:`link_used`)."""
        if self._memory_gbps is None:
            self._memory_gbps = memory_link_gbps()
        return self._memory_gbps

    def link_used(self, device: bool = False) -> tuple:
        """(Gbit/s, source) of the link rate the model uses for a call (`device`: of CUDA arrays):
        source "configured" (``link_gbps=`` or the environment), "observed" (uncompressed calls),
        "memory" (a memory-class host's estimate: :attr:`memory_gbps` x :attr:`cores`, device calls
        :data:`~ncclz.policy.memory_link.DEVICE_MEMORY_GBPS`), or (None, "") while unknown. On a
        memory-class host an observed rate counts only above the estimate: an uncompressed call slower
        than memory was slowed by the CPU (cold pages, other load, a short call's latency), which
        slows the codec as much, not by a link that compressing could relieve."""
        if self._link_gbps is not None and self.configured:
            return self._link_gbps, "configured"
        if self.memory_link:
            # host calls: per core the call's codec would get (the exact call's copies run on the same
            # channels' threads), so no core count makes a codec slower than memcpy look faster
            mem = DEVICE_MEMORY_GBPS if device else self.memory_gbps * self.cores
            if self._link_gbps is None or self._link_gbps <= mem:
                return mem, "memory"
        if self._link_gbps is not None:
            return self._link_gbps, "observed"
        return None, ""

    @property
    def cores(self) -> float:
        """CPU cores the model gives one call's codec: cores_per_rank, capped at the channel count."""
        c = self.cores_per_rank if self.nchannels is None else min(self.cores_per_rank, float(self.nchannels))
        return max(0.1, c)

    def pin(self, mode: str, *, ratio: float | None = None, enc_Bps: float | None = None,
            dec_Bps: float | None = None) -> Policy:
        """Fixes a mode's ratio and / or codec speeds (bytes/s of one coder thread) instead of
        measuring them on this machine: ``mode`` is one of :data:`~ncclz.policy.MODES` but
        "none" ("lossless", "lossy", "lossy/dense", "lossy/mid", "lossy/fast"). Returns self. See :meth:`Calibrator.pin`."""
        self.calibrator.pin(mode, ratio=ratio, enc_Bps=enc_Bps, dec_Bps=dec_Bps)
        return self

    # ------------------------------------------------------------------ inspection
    def calibrations(self) -> list:
        """The calibrations taken so far (:class:`Calibration`, with dtype, label and sums)."""
        return self.calibrator.entries()

    def measurements(self) -> list:
        """The measured call times so far (:class:`~ncclz.policy.history.Measurement`)."""
        return self.history.entries()

    def measured(self, coll: str, dtype: str, nbytes: int, spec, effort: str = "",
                 algorithm: str = "") -> float | None:
        """The measured wall time for a call of `nbytes` with `spec` (and codec effort, algorithm), or None."""
        return self.history.measured(coll, dtype, nbytes, spec, effort, algorithm)

    # ------------------------------------------------------------------ inputs
    def observe(self, stats) -> None:
        """Learns the link rate from a call's ``comm.last_stats`` (the mode that ran, wire bytes, wall
        time); see :meth:`observe_link`."""
        if stats is not None:
            self.observe_link(getattr(stats, "compression", "none"), getattr(stats, "wire_bytes", 0),
                              getattr(stats, "wall_s", 0))

    def observe_link(self, ran: str | None, wire_bytes: float, wall_s: float) -> None:
        """Learns the link rate from one call: this rank's sent bytes over the call's wall time.
        An uncompressed call (`ran` "none") measures the link (an exponential average); a
        compressed one only proves the link is at least that fast (its wall time includes the
        codec), so it can raise the estimate but never lower it. Calls under 1 MiB on the wire are
        ignored (latency-bound). A configured rate is kept as is."""
        if self.configured and self._link_gbps is not None:
            return
        wb, ws = float(wire_bytes or 0), float(wall_s or 0)
        if wb < (1 << 20) or ws <= 0:
            return  # too small to say anything about bandwidth
        g = wb * 8 / ws / 1e9 / self.model.goodput
        self.observed += 1
        if ran in ("none", None):
            self._link_gbps = g if not self._link_gbps else 0.7 * self._link_gbps + 0.3 * g
        elif self._link_gbps is not None and g > self._link_gbps:
            self._link_gbps = g

    def record(self, coll: str, dtype: str, nbytes: int, spec, wall_s: float, effort: str = "",
               algorithm: str = "") -> None:
        """Learns from a finished call: its wall time with the mode that ran (`spec`: None,
        ncclz.Lossless() or the Lossy spec; `effort`: a lossy call's codec effort, a key of
        EFFORTS), per (collective, dtype, power-of-two size class); see
        :mod:`ncclz.policy.history`. choose() uses these measurements instead of the model where it
        has them: they capture what the model does not (this data's ratio on the wire, the
        machine), and a calibration cached per (dtype, spec) may come from other data."""
        self.history.record(coll, dtype, nbytes, spec, wall_s, effort, algorithm)

    def calibrate(self, x, spec, effort: str = "", sums: int = 0) -> Calibration:
        """Times ncclz.codec on a sample of x with spec (cached); see :mod:`ncclz.policy.calibration`."""
        return self.calibrator.calibrate(x, spec, effort=effort, sums=sums)

    # ------------------------------------------------------------------ model
    def predict(self, coll: str, nbytes: int, cal: Calibration | None, lossy: bool = False,
                mostly_zero: bool = False, algorithm: str = "ring", device: bool = False) -> float:
        """Predicted seconds of a call of `nbytes`: uncompressed (cal None) or with calibration `cal`,
        with `algorithm` on this policy's hosts; `device`: coded on the GPU."""
        return self.model.predict(coll, self._world(), nbytes, self.link_used(device)[0] or 1e9, self.cores, cal,
                                  lossy=lossy, mostly_zero=mostly_zero, algorithm=algorithm, hosts=self.hosts,
                                  device=device)

    def algorithms(self, coll: str = "all_reduce", algorithm: str | None = None) -> tuple:
        """The algorithms a call may run: the ring, and the hierarchical one where the topology
        allows it; only `algorithm` where the call names one ("auto" / None: no restriction)."""
        # (the collectives with a hierarchical schedule: INTRA_FACTOR's)
        known = ("ring", "hierarchical") if self.hierarchical and coll in INTRA_FACTOR else ("ring",)
        if algorithm in (None, "", "auto"):
            return known
        return (algorithm,) if algorithm in known else ("ring",)

    def _algorithm_spec(self, spec, algorithm: str, coll: str, op: str):
        """The spec to calibrate `algorithm` with (see the module doc): a lossy sum or mean on the
        hierarchical algorithm quantizes with L times the ring's bound."""
        if algorithm != "hierarchical" or not isinstance(spec, Lossy) or op not in ("sum", "avg"):
            return spec
        if coll not in ("all_reduce", "reduce_scatter") or not self.hosts:
            return spec
        L = self._world() / self.hosts
        return Lossy(abs=spec.bound * L) if spec.abs is not None else Lossy(rel=spec.bound * L)

    def _fastest(self, times: dict, coll: str, dt: str, nbytes: int, spec, effort: str) -> tuple:
        """(algorithm, seconds, measured?) of the fastest entry of `times` (algorithm -> model
        seconds), measured times replacing the model's where there are any. An unmeasured algorithm
        competes with its prediction, so it runs (and gets measured) when the model favours it."""
        best = None
        for a, t in times.items():
            m = self.history.measured(coll, dt, nbytes, spec, effort, a)
            cand = (m if m is not None else t, a, m is not None)
            if best is None or cand[0] < best[0]:
                best = cand
        return best[1], best[0], best[2]

    def choose_algorithm(self, coll: str, nbytes: int, dtype: str = "", algorithm: str | None = None) -> tuple:
        """(algorithm, {algorithm: seconds}) for an uncompressed call of `nbytes`: the faster of the
        algorithms the topology allows (measured times win over the model); "" while the link rate
        is unknown (no evidence: the runtime's default runs). `dtype` as measurements are filed
        (a device call's with ``@cuda``: :func:`~ncclz.policy.history.device_dtype`)."""
        algos = self.algorithms(coll, algorithm)
        device = dtype.endswith(DEVICE_SUFFIX)
        times = {a: self.predict(coll, nbytes, None, algorithm=a, device=device) for a in algos}
        if len(algos) == 1:
            return algos[0], times
        if self.link_used(device)[0] is None:
            return "", times
        a, _, _ = self._fastest(times, coll, dtype, nbytes, None, "")
        return a, times

    def _world(self) -> int:
        if self.n is None:
            raise ValueError("Policy(world_size=None) has no world size yet: pass world_size=, or give the "
                             "policy to a Communicator (policy=...), which fills it in")
        return self.n

    def exact_on_memory(self, coll: str, dtype: str, requested, nbytes: int, device: bool = False) -> Choice | None:
        """The memory-class rule (:mod:`.memory_link`, "No codec beats the copies"): a Choice of none for a
        compressed request of >= min_bytes of host arrays where every rank shares one host over memory
        (``memory_link``), no link rate is configured, and no compressed mode (lossless, or the
        requested lossy bound at any codec effort) has a measured time for the call's size class
        (measured times win over the model, and over this rule). None where the rule does not apply:
        :meth:`choose` then calibrates and predicts. Needs neither the data nor this machine's
        speeds, so it calibrates nothing and times no memcpy."""
        req = mode_class(requested)
        if not self.memory_link or device or self.configured or req == "none":
            return None
        if self.n is None or self.n <= 1 or nbytes < self.min_bytes:
            return None
        variants = [(Lossless(), "")] + ([(requested, e) for e in EFFORTS] if req == "lossy" else [])
        if any(self.history.measured(coll, dtype, nbytes, spec, e) is not None for spec, e in variants):
            return None
        why = (f"{MEMORY_LINKS[self.memory_link]}: no host codec is faster than the memory copies of an "
               f"uncompressed call, whatever the data (nothing calibrated)")
        return Choice("none", None, {}, why)

    def choose(self, coll: str, x, requested, nbytes: int | None = None, *, op: str = "sum",
               algorithm: str | None = None, device: bool = False) -> Choice:
        """The mode to use for collective `coll` on array `x` when the caller asked for `requested`.

        Never looser than `requested` (none and lossless are exact). The requested compressed mode
        is kept when the link rate is unknown, when its calibration fails, or when it is predicted
        at least `margin` faster than the best lighter mode; otherwise the fastest lighter mode.
        Each mode runs with the faster of the algorithms the topology allows (see the module doc);
        `op`: the reduction (a sum's hierarchical bound differs); `algorithm`: the call's own;
        `device`: x is a host copy of CUDA arrays the runtime codes on the GPU (module doc)."""
        n = self._world()
        arr = np.asarray(x)
        if nbytes is None:
            nbytes = arr.nbytes * (n if coll in ("all_gather", "gather") else 1)
        rule = self.exact_on_memory(coll, str(arr.dtype), requested, nbytes, device)
        if rule is not None:
            return rule
        dt = device_dtype(str(arr.dtype), device)
        algos = self.algorithms(coll, algorithm)
        multi = len(algos) > 1
        none_algo, none_times = self.choose_algorithm(coll, nbytes, dt, algorithm)
        if not none_algo:  # the link rate is unknown: the runtime's default (no proposal)
            none_algo = "hierarchical" if "hierarchical" in algos else algos[0]
            multi = False
        pred = {"none": none_times[none_algo]}
        algo_of = {"none": none_algo}
        by_algo = {"none": none_times} if multi else {}

        def early(mode: str, comp, why: str, algo: str = "") -> Choice:
            return Choice(mode, comp, pred, why, algorithm=algo if multi else "", algorithms=algo_of,
                          by_algorithm=by_algo)

        req = mode_class(requested)
        if req == "none":
            return early("none", None, "no compression requested", none_algo)
        if n <= 1:
            return early(req, requested, "one rank: nothing goes over a link")
        # a small message is latency-bound whatever the link (its time is the hops, not the bytes): known
        # or not, none runs it fastest, and exactly (the runtime's latency algorithm, where it has one)
        if nbytes < self.min_bytes:
            return early("none", None, f"message {nbytes} B < {self.min_bytes} B: latency-bound", none_algo)
        gbps, source = self.link_used(device)
        if gbps is None:
            return early(req, requested, "link rate unknown: as requested (set NCCLZ_LINK_GBPS, or make an "
                                         "uncompressed call >= 1 MiB for the policy to observe)")
        # on a memory-class host the reasons say so, with the rate the model took (module doc)
        where = ""
        if self.memory_link and source != "configured":
            est = "memory-class estimate" if source == "memory" else "observed"
            where = f"{MEMORY_LINKS[self.memory_link]}, link {gbps:.3g} Gbit/s ({est}): "
        # candidates: (name, spec, codec effort); "lossy/mid" and "lossy/fast" are the requested bound
        # with another codec effort (same guarantee: only the wire coder differs)
        cands = [("lossless", requested if req == "lossless" else Lossless(), "")]
        if req == "lossy" and device:
            cands += [("lossy", requested, "fast")]  # the device codes without rANS, whatever the effort
        elif req == "lossy":
            cands += [("lossy", requested, "")]
            if self.efforts:
                cands += [(f"lossy/{e}", requested, e) for e in EFFORTS if e]
        specs = {name: (spec, effort) for name, spec, effort in cands}
        sums = reduction_terms(coll, n, arr)
        # the default lossy effort's calibration says the link is slower than its codec (on any algorithm
        # the call may run: one fixed to "hierarchical" has no ring calibration)
        link_bound = False
        for name, spec, effort in cands:
            if effort == "dense" and not link_bound:
                continue  # fewer bytes cannot pay where the codec already takes longer than the link
            # lossless runs with none's algorithm: the two stay bit-identical to each other
            times = {}
            for a in (none_algo,) if name == "lossless" else algos:
                try:
                    cal = self.calibrate(arr, self._algorithm_spec(spec, a, coll, op), effort=effort, sums=sums)
                except Exception as e:  # noqa: BLE001
                    if name == req and a == "ring":
                        return early(req, requested, f"{where}as requested: no calibration ({type(e).__name__}: {e})")
                    continue
                if name == "lossy" and not link_bound:
                    # a hierarchical call's L ranks of a host share its link, each with its block's wire
                    share = self._world() / self.hosts if a == "hierarchical" and self.hosts else 1
                    link_bound = cal.ratio * self.model.link_Bps(gbps) / share < cal.enc_Bps * self.cores
                times[a] = self.predict(coll, nbytes, cal, lossy=name.startswith("lossy"), mostly_zero=bool(sums),
                                        algorithm=a, device=device)
            if not times:
                continue
            if multi:
                by_algo[name] = times
            a = none_algo if name == "lossless" else self._fastest(times, coll, dt, nbytes, spec, effort)[0]
            algo_of[name] = a
            pred[name] = times[a]
        model = dict(pred)
        measured = []
        for name, (spec, effort) in (("none", (None, "")), *specs.items()):
            if name not in pred:
                continue
            m = self.history.measured(coll, dt, nbytes, spec, effort=effort, algorithm=algo_of[name])
            if m is not None:
                pred[name] = m
                measured.append(name)
        measured = tuple(measured)
        # modes without a measurement: scale the model by how far it was off for the measured ones
        # (e.g. a plain call that is CPU-bound on this machine, not link-bound); comparing a
        # measured time with a raw prediction would be biased towards the unmeasured mode
        if measured and len(measured) < len(pred):
            f = float(np.exp(np.mean([np.log(pred[m] / model[m]) for m in measured if model[m] > 0])))
            for name in pred:
                if name not in measured:
                    pred[name] *= f

        # what a probe is judged by: the model, scaled by its error on the measured variants of the
        # requested mode where there are any (a measured plain call says little about codec time)
        comp = [m for m in measured if m.split("/")[0] == req and model[m] > 0]
        fc = float(np.exp(np.mean([np.log(pred[m] / model[m]) for m in comp]))) if comp else 1.0

        def pick(name: str, why: str) -> Choice:
            spec, effort = specs.get(name, (None, ""))
            return Choice(name.split("/")[0], None if name == "none" else spec, pred, where + why, measured,
                          EFFORTS[effort], effort, algo_of[name] if multi else "", algo_of, by_algo)

        # the requested mode's variants (the codec efforts): the fastest, measured where possible
        variants = [v for v in [req] + [f"{req}/{e}" for e in EFFORTS if e] if v in pred]
        if len(variants) > 1:
            known = [v for v in variants if v in measured]
            unknown = [v for v in variants if v not in measured]
            if known and unknown and self.probe_factor:
                # measure the other effort when the raw model puts it within probe_factor of the
                # fastest measured mode (a lighter mode included: no probe where none clearly wins)
                best_known = min(measured, key=pred.get)
                probe = min(unknown, key=model.get)
                if fc * model[probe] <= self.probe_factor * pred[best_known]:
                    return pick(probe, f"measuring {probe} (unmeasured; model {fc * model[probe] * 1e3:.1f} ms "
                                       f"within {self.probe_factor:g}x of {best_known}'s measured time)")
        chosen = min(variants, key=pred.get)
        lighter = [m for m in ("none", "lossless") if m in pred and m != req]
        best = min(lighter, key=pred.get)
        # Both measured: the times are evidence, so a small margin (against noise) decides; with a
        # prediction in the comparison the model's larger margin applies.
        both = chosen in measured and best in measured
        margin = self.measured_margin if both else self.margin
        if pred[chosen] * (1 + margin) <= pred[best]:
            return pick(chosen, f"{chosen} {'measured' if both else 'predicted'} >= {margin:.0%} faster than {best}")
        # The requested mode has no measurement but a lighter one has: the decision rests on the
        # model, which misjudges this machine in ways the measured mode's error does not tell
        # (a CPU-bound plain path says little about codec time). Measure it, as long as the model
        # (scaled by fc) does not put it beyond probe_factor x the lighter mode's measured time.
        if (chosen not in measured and best in measured and self.probe_factor
                and fc * model[chosen] <= self.probe_factor * pred[best]):
            return pick(chosen, f"measuring {chosen} (unmeasured; model {fc * model[chosen] * 1e3:.1f} ms within "
                                f"{self.probe_factor:g}x of {best}'s measured time)")
        # a lighter mode: now and then run the requested one again when its time is a measurement,
        # so a stale measurement (the data changed) cannot keep compression off for good
        k = size_class(coll, dt, nbytes) + (label(requested),)
        runs = self._lighter_run.pop(k, 0) + 1  # (the most recent last: bounded drops the others first)
        self._lighter_run[k] = runs
        bounded(self._lighter_run)
        if chosen in measured and self.probe_every and runs % self.probe_every == 0:
            return pick(chosen, f"re-measuring {chosen} (every {self.probe_every}th call it is not predicted faster)")
        return pick(best, f"{req} not predicted >= {margin:.0%} faster than {best}")

