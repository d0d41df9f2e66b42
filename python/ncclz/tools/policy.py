"""When (not) to compress: a cost model for one collective call.

The question: given the message size, the collective, the number of ranks, the link rate and
how fast the codec runs on this machine, which of ``none``, ``lossless`` and ``lossy`` (the
caller's bound; never looser) finishes first? Compression must never make a call much slower
than sending it raw, so the caller's compressed mode is kept only when it is predicted a clear win
(``margin``, default 20%) over the lighter modes; otherwise the fastest lighter mode is used, and
``none`` for small messages. With an unknown link rate the caller's mode is kept (no evidence).

``ncclz.Communicator`` uses this by default (``policy="auto"``): rank 0 decides and its decision
travels in the call descriptor (see docs/PYTHON_API.md).

Model (per rank, ring algorithms, times in seconds; S = the nccl-tests "size" in bytes)::

    wire  W = f_wire * S                        f_wire: all_reduce 2(n-1)/n, reduce_scatter and
                                                all_gather (n-1)/n, broadcast 1
    T_none = steps * alpha + W / B              B = link bytes/s * goodput (0.95, TCP/IP headers)
    T_mode = steps * alpha + max(t_net, t_cpu) + (1 - overlap) * min(t_net, t_cpu) + t_fixed
        t_net = W / (ratio * B)
        t_cpu = (f_enc * S / enc_Bps + f_dec * S / dec_Bps) / cores_per_rank
        f_enc, f_dec: bytes each rank encodes / decodes (all_reduce 1 and 2(n-1)/n,
                      reduce_scatter (n-1)/n and (n-1)/n, all_gather 1/n and (n-1)/n,
                      broadcast 1 (root) and 1)
        t_fixed = S / quant_Bps for lossy (the quantize / dequantize passes), 0 otherwise;
                  S / (8 quant_Bps) for lossy sums of mostly-zero data (lists of nonzeros)
        overlap = 0.25: how much of the shorter of network and codec time hides under the longer;
        conservative (the netlab runs on a shared 2-core VM measured 0.1 .. 0.6)

Measured times win over the model: ``record()`` (the Communicator calls it on rank 0 after every
call) keeps the fastest of the last 4 wall times (the first call skipped: cold) per (collective,
dtype, power-of-two size class) and mode that ran (modes not measured get the model scaled by how
far off it was for the measured ones); ``choose()`` uses it instead of the prediction where present.
When a lighter mode is measured and the requested one is not, the requested mode runs until it
is measured too (two calls: the first is cold; one for the other codec effort), unless the model (scaled by its error on the
requested mode's measured variants, if any: a CPU-bound plain path tells little about the
codec) puts it beyond ``probe_factor`` (2) times the lighter mode's measured time. With both
measured, a margin of ``measured_margin`` (5%) decides instead of ``margin``.

Codec effort: a lossy request has three variants with the same bound and result (``EFFORTS``):
the selector's default (``lossy``), ``lossy/mid`` (``MID_MARGIN``: rANS only where it beats the
fast coders by 30%, not 15%) and ``lossy/fast`` (``FAST_MARGIN``: the selector never picks rANS,
which encodes several times slower than Block), each calibrated and measured on its own; an
unmeasured variant is measured (one call each) when the model puts it within ``probe_factor`` of
the fastest measured mode, and the fastest one runs (``Choice.rans_margin``; ``efforts=False``
keeps the default only). When a measurement keeps the requested
mode off, it re-runs the requested mode every ``probe_every``-th (64) call to refresh it.

ratio, enc_Bps and dec_Bps come from a calibration: ``ncclz.codec.compress``/``decompress`` of
a sample of the caller's data (<= 4 MiB by default) with the caller's spec, timed on this
machine (best of 3), cached per (dtype, spec). For sums (all_reduce, reduce_scatter) of
mostly-zero data the sample is first summed with n-1 shifted copies of itself: the wire carries
partial sums, whose nonzeros are the union of the ranks'. The link rate B comes from ``NCCLZ_LINK_GBPS``, or
``NCCLZ_SOCKET_THROTTLE_GBPS``, or :meth:`Policy.observe` of uncompressed calls
(``wire_bytes / wall_s`` of ``comm.last_stats``, an exponential average; a compressed call only
raises the estimate: its wall time includes the codec) when no rate is configured. cores_per_rank:
``NCCLZ_CORES_PER_RANK``, else os.cpu_count() / LOCAL_WORLD_SIZE (capped at the channel count).

Use::

    from ncclz.tools.policy import Policy
    pol = Policy(world_size=comm.world_size)               # link from NCCLZ_LINK_GBPS
    choice = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3))
    comm.all_reduce(x, compression=choice.compression)
    print(choice)                                          # the prediction for every mode

``choose(..., requested=ncclz.Lossless())`` only considers none and lossless, and
``requested=None`` always returns none. With no link rate it returns the requested mode. The decision never weakens the caller's guarantee:
none and lossless are exact, so they satisfy any lossy bound.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np

WIRE_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
# (bytes encoded, bytes decoded) per rank as a multiple of S
CODEC_FACTOR = {
    "all_reduce": lambda n: (1.0, 2.0 * (n - 1) / n),
    "reduce_scatter": lambda n: ((n - 1) / n, (n - 1) / n),
    "all_gather": lambda n: (1.0 / n, (n - 1) / n),
    "broadcast": lambda n: (1.0, 1.0),
}
# How much faster the API-layer passes of a lossy sum of mostly-zero data run than quant_Bps (the
# dense quantize / dequantize): the scan lists the nonzeros, only they are quantized, and the
# output is written from the lists (measured on this project's 2-core VM: scan ~20 GB/s, output
# write ~25 GB/s, against ~2 GB/s for the dense passes).
SPARSE_PASS_SPEEDUP = 8.0
STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
}


@dataclasses.dataclass
class Calibration:
    """Codec speed and ratio on a sample: bytes/s of the single-threaded coder."""

    mode: str
    ratio: float
    enc_Bps: float
    dec_Bps: float
    sample_bytes: int
    seconds: float


@dataclasses.dataclass
class Choice:
    mode: str  # "none" | "lossless" | "lossy"
    compression: Any  # None, ncclz.Lossless(), or the caller's ncclz.Lossy
    predicted_s: dict  # mode -> predicted (or measured) seconds
    reason: str
    measured: tuple = ()  # the modes whose time in predicted_s was measured on earlier calls
    # lossy only: the codec effort, the selector's margin for rANS (None: its default; see
    # EFFORTS), and its name ("": default, "mid", "fast": the "lossy/<name>" entry of predicted_s)
    rans_margin: float | None = None
    effort: str = ""

    def __str__(self) -> str:
        p = ", ".join(f"{k} {v * 1e3:.1f} ms{' (measured)' if k in self.measured else ''}"
                      for k, v in self.predicted_s.items())
        effort = f"/{self.effort}" if self.effort else ""
        return f"{self.mode}{effort} ({self.reason}; predicted {p})"


def _env_float(*names: str) -> float | None:
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


#: The codec effort of the "lossy/fast" variant: the selector's rANS margin 1 (Block, Raw and
#: Sparse only). rANS encodes several times slower than Block: where the codec, not the link, is
#: the bottleneck, the lower ratio can finish first.
FAST_MARGIN = 1.0
#: The codec effort of the "lossy/mid" variant: rANS only where its estimate beats Block/Raw by
#: 30% (the default asks 15%). Measured in the network lab (4 ranks on 2 cores, 0.5 Gbit/s, 3-D
#: smooth field): 186 ms at ratio 10.7 against 196 ms at 11.6 (default) and 224 ms at 7.7 (fast);
#: on the flat smooth field the default won (217 ms against 230), hence a variant of its own.
MID_MARGIN = 0.3
#: The codec efforts of a lossy request: name -> the selector's rANS margin (None: its default).
EFFORTS = {"": None, "mid": MID_MARGIN, "fast": FAST_MARGIN}


def effort_of_margin(margin: float | None) -> str:
    """The name of the effort whose rANS margin is `margin` (None or < 0: the default, "")."""
    if margin is None or margin < 0:
        return ""
    return min((k for k in EFFORTS if k), key=lambda k: abs(EFFORTS[k] - margin))


def _check_effort(effort: str) -> str:
    if effort not in EFFORTS:
        raise ValueError(f"unknown codec effort {effort!r}; one of {sorted(EFFORTS)}")
    return effort


def _spec_label(spec, effort: str = "") -> str:
    if spec is None:
        return "none"
    name = type(spec).__name__
    if name == "Lossless":
        return "lossless"
    return f"lossy:{spec.kind}={spec.bound:g}" + (f"/{effort}" if effort else "")


class Policy:
    """Chooses none / lossless / lossy per call from the cost model above."""

    def __init__(self, world_size: int, link_gbps: float | None = None, cores_per_rank: float | None = None,
                 alpha_s: float = 50e-6, goodput: float = 0.95, overlap: float = 0.25, margin: float = 0.2,
                 min_bytes: int = 256 << 10, sample_bytes: int = 4 << 20, quant_Bps: float = 2e9, reps: int = 3,
                 measured_margin: float = 0.05, probe_factor: float = 2.0, efforts: bool = True):
        self.n = int(world_size)
        self.link_gbps = link_gbps if link_gbps else _env_float("NCCLZ_LINK_GBPS", "NCCLZ_SOCKET_THROTTLE_GBPS")
        # a configured rate (argument or environment) is used as is; observe() fills in when there is none
        self.configured = self.link_gbps is not None
        if cores_per_rank is None:
            cores_per_rank = _env_float("NCCLZ_CORES_PER_RANK")
        if cores_per_rank is None:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
            cores_per_rank = (os.cpu_count() or 1) / max(1, local)
        self.cores = max(0.1, min(float(cores_per_rank), float(os.environ.get("NCCLZ_NCHANNELS", 4) or 4)))
        self.alpha, self.goodput, self.overlap, self.margin = alpha_s, goodput, overlap, margin
        self.min_bytes, self.sample_bytes, self.quant_Bps = min_bytes, sample_bytes, quant_Bps
        self.reps = max(1, int(reps))
        self.cal: dict = {}
        self.observed = 0  # calls observe() learned from
        # measured wall time per (collective, dtype, size class) and mode label: see record()
        self.meas: dict = {}
        self.probe_every = 64
        self.probe_factor = probe_factor
        # also consider the requested lossy bound with the other codec efforts (Choice.rans_margin)
        self.efforts = efforts
        self.measured_margin = measured_margin
        self.window = 4
        self._samples: dict = {}  # (class, mode) -> [first (ignored), last `window` times]
        self._lighter_run: dict = {}

    # ------------------------------------------------------------------ inputs
    def observe(self, stats) -> None:
        """Learns the link rate from a call's comm.last_stats (wire_bytes / wall_s, this rank's
        sent bytes over the call's wall time). An uncompressed call measures the link (an
        exponential average); a compressed one only proves the link is at least that fast (its
        wall time includes the codec), so it can raise the estimate but never lower it. Calls
        under 1 MiB on the wire are ignored (latency-bound). A configured rate (argument,
        NCCLZ_LINK_GBPS, NCCLZ_SOCKET_THROTTLE_GBPS) is kept as is."""
        if stats is None or (self.configured and self.link_gbps is not None):
            return
        wb, ws = float(getattr(stats, "wire_bytes", 0)), float(getattr(stats, "wall_s", 0))
        if wb < (1 << 20) or ws <= 0:
            return  # too small to say anything about bandwidth
        g = wb * 8 / ws / 1e9 / self.goodput
        self.observed += 1
        if getattr(stats, "compression", "none") in ("none", None):
            self.link_gbps = g if not self.link_gbps else 0.7 * self.link_gbps + 0.3 * g
        elif self.link_gbps is not None and g > self.link_gbps:
            self.link_gbps = g

    @staticmethod
    def _class(coll: str, dtype: str, nbytes: int) -> tuple:
        return (coll, dtype, max(0, int(nbytes)).bit_length())  # size classes: powers of two

    def record(self, coll: str, dtype: str, nbytes: int, spec, wall_s: float, effort: str = "") -> None:
        """Learns from a finished call: its wall time with the mode that ran (`spec`: None,
        ncclz.Lossless() or the Lossy spec), per (collective, dtype, power-of-two size class):
        the fastest of the last `window` (4) calls, skipping the first call of each (class, mode)
        (cold buffers and threads; not for a lossy codec effort whose twin effort is measured in
        this class already). The minimum, because other load only ever slows a call down.
        choose() uses these measurements instead of the model where it has them: they capture
        what the model does not (this data's ratio on the wire, the machine), and a calibration
        cached per (dtype, spec) may come from other data. `effort`: a lossy call that ran with
        another codec effort than the default (a key of EFFORTS; Choice.effort), measured apart
        from the others."""
        _check_effort(effort)
        if not (wall_s > 0) or nbytes <= 0:
            return
        cls, key = self._class(coll, dtype, nbytes), _spec_label(spec, effort)
        t = wall_s * (1 << (int(nbytes).bit_length() - 1)) / nbytes  # normalised to the class size
        lst = self._samples.setdefault((cls, key), [])
        lst.append(t)
        if len(lst) == 1:
            # the first call of this class and mode is cold (buffers, threads, pages), unless
            # another codec effort of the same lossy spec ran in this class already: they share
            # every buffer and thread, so probing an effort costs one call, not two
            done = self.meas.get(cls, {})
            twins = [_spec_label(spec, e) for e in EFFORTS if e != effort] if key.startswith("lossy:") else []
            if not any(t in done for t in twins):
                return
            lst.insert(0, t)  # counts as measured (the list's first entry is the one never used)
        del lst[1:-self.window]
        self.meas.setdefault(cls, {})[key] = min(lst[1:])

    def _measured(self, coll: str, dtype: str, nbytes: int, spec, effort: str = "") -> float | None:
        d = self.meas.get(self._class(coll, dtype, nbytes))
        label = _spec_label(spec, _check_effort(effort))
        if not d or label not in d:
            return None
        return d[label] * nbytes / (1 << (int(nbytes).bit_length() - 1))

    def calibrate(self, x, spec, effort: str = "", sums: int = 0) -> Calibration:
        """Times ncclz.codec on a sample of x with spec (cached per dtype, spec and effort), as the
        wire codes it: the classic layout (the collectives never use interp), with the effort's
        rANS margin (EFFORTS). sums > 1: on what a reduction's wire carries instead, the sum of
        `sums` copies of the sample shifted against each other (see _sum_ranks)."""
        import ncclz

        _check_effort(effort)
        arr = np.ascontiguousarray(np.asarray(x)).reshape(-1)
        key = (str(arr.dtype), _spec_label(spec, effort)) + ((f"sum of {sums}",) if sums > 1 else ())
        if key in self.cal:
            if isinstance(self.cal[key], Exception):
                raise self.cal[key]
            return self.cal[key]
        k = max(1, min(arr.size, self.sample_bytes // max(1, arr.dtype.itemsize)))
        sample = np.ascontiguousarray(arr[:k])
        if sums > 1:
            acc = sample.astype(np.float64)
            for j in range(1, sums):
                acc += np.roll(sample, j * (k // sums) + j).astype(np.float64)
            sample = acc.astype(sample.dtype)
        # best of `reps` timings: on a shared machine a single timing is often slowed by other jobs
        t_enc = t_dec = float("inf")
        t_start = time.perf_counter()
        try:
            for _ in range(self.reps):
                t0 = time.perf_counter()
                if type(spec).__name__ == "Lossy":
                    blob = ncclz.codec.compress(sample, spec, layout="classic", rans_margin=EFFORTS[effort])
                else:
                    blob = ncclz.codec.compress(sample, spec)
                t1 = time.perf_counter()
                ncclz.codec.decompress(blob)
                t2 = time.perf_counter()
                t_enc, t_dec = min(t_enc, t1 - t0), min(t_dec, t2 - t1)
        except Exception as e:  # noqa: BLE001 - a dtype the standalone codec does not take: no calibration
            self.cal[key] = e
            raise
        c = Calibration(mode=key[1], ratio=sample.nbytes / max(1, blob.size), enc_Bps=sample.nbytes / max(t_enc, 1e-9),
                        dec_Bps=sample.nbytes / max(t_dec, 1e-9), sample_bytes=sample.nbytes,
                        seconds=time.perf_counter() - t_start)
        self.cal[key] = c
        return c

    def _sum_ranks(self, coll: str, arr) -> int:
        """For a reduction of mostly-zero data, n (the ranks a full sum covers), else 0. The wire
        of a sum carries partial sums, whose nonzeros are the union of the ranks' (99%-zero
        gradients on 4 ranks: ~3% nonzero on the wire, not 1%): a sample of one rank's data would
        promise ratios the wire does not reach (for lossless, ~4x too high), and make lossless
        look as fast as lossy. Dense data keeps its own sample: a sum is as dense as its terms.
        Decided on a strided probe of <= 8 Ki values (cheap per call: ~0.1 ms on 64 MiB)."""
        if coll not in ("all_reduce", "reduce_scatter") or self.n <= 1 or arr.size == 0:
            return 0
        try:
            probe = np.asarray(arr).reshape(-1)[:: max(1, arr.size // 8192)]
            nz = int(np.count_nonzero(probe))
        except Exception:  # noqa: BLE001 - a dtype NumPy cannot compare: keep the plain sample
            return 0
        return self.n if 0 < nz <= 0.5 * probe.size else 0

    # ------------------------------------------------------------------ model
    def predict(self, coll: str, nbytes: int, cal: Calibration | None, lossy: bool = False,
                mostly_zero: bool = False) -> float:
        n = self.n
        if n <= 1:
            return 0.0
        B = (self.link_gbps or 1e9) * 1e9 / 8 * self.goodput
        W = WIRE_FACTOR[coll](n) * nbytes
        lat = STEPS[coll](n) * self.alpha
        if cal is None:
            return lat + W / B
        fe, fd = CODEC_FACTOR[coll](n)
        t_net = W / (max(cal.ratio, 1e-3) * B)
        t_cpu = (fe * nbytes / cal.enc_Bps + fd * nbytes / cal.dec_Bps) / self.cores
        # a lossy sum of mostly-zero data quantizes and writes out lists of nonzeros: its passes run
        # at about memory speed (the statistics scan and the output write), not quant_Bps
        t_fix = nbytes / (self.quant_Bps * (SPARSE_PASS_SPEEDUP if mostly_zero else 1)) / self.cores if lossy else 0.0
        return lat + max(t_net, t_cpu) + (1 - self.overlap) * min(t_net, t_cpu) + t_fix

    def choose(self, coll: str, x, requested, nbytes: int | None = None) -> Choice:
        """The mode to use for collective `coll` on array `x` when the caller asked for `requested`.

        Never looser than `requested` (none and lossless are exact). The requested compressed mode
        is kept when the link rate is unknown, when its calibration fails, or when it is predicted
        at least `margin` faster than the best lighter mode; otherwise the fastest lighter mode."""
        import ncclz

        arr = np.asarray(x)
        if nbytes is None:
            nbytes = arr.nbytes * (self.n if coll == "all_gather" else 1)
        pred = {"none": self.predict(coll, nbytes, None)}
        if requested is None:
            return Choice("none", None, pred, "no compression requested")
        req = "lossy" if type(requested).__name__ == "Lossy" else "lossless"
        if self.n <= 1:
            return Choice(req, requested, pred, "one rank: nothing goes over a link")
        if self.link_gbps is None:
            return Choice(req, requested, pred, "link rate unknown: as requested (set NCCLZ_LINK_GBPS, or make an "
                                                "uncompressed call >= 1 MiB for the policy to observe)")
        if nbytes < self.min_bytes:
            return Choice("none", None, pred, f"message {nbytes} B < {self.min_bytes} B: latency-bound")
        # candidates: (name, spec, codec effort); "lossy/mid" and "lossy/fast" are the requested bound
        # with another codec effort (same guarantee: only the wire coder differs)
        cands = [("lossless", requested if req == "lossless" else ncclz.Lossless(), "")]
        if req == "lossy":
            cands += [("lossy", requested, "")]
            if self.efforts:
                cands += [(f"lossy/{e}", requested, e) for e in EFFORTS if e]
        specs = {name: (spec, effort) for name, spec, effort in cands}
        sums = self._sum_ranks(coll, arr)
        for name, spec, effort in cands:
            try:
                kw = dict(effort=effort) if effort else {}
                if sums:
                    kw["sums"] = sums
                cal = self.calibrate(arr, spec, **kw)
            except Exception as e:  # noqa: BLE001
                if name == req:
                    return Choice(req, requested, pred, f"as requested: no calibration ({type(e).__name__}: {e})")
                continue
            pred[name] = self.predict(coll, nbytes, cal, lossy=name.startswith("lossy"), mostly_zero=bool(sums))
        # measurements of earlier calls of this size class replace the model where present
        model = dict(pred)
        dt = str(arr.dtype)
        measured = []
        for name, (spec, effort) in (("none", (None, "")), *specs.items()):
            m = self._measured(coll, dt, nbytes, spec, effort=effort)
            if m is not None and name in pred:
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
            return Choice(name.split("/")[0], None if name == "none" else spec, pred, why, measured,
                          EFFORTS[effort], effort)

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
        k = self._class(coll, dt, nbytes) + (_spec_label(requested),)
        n = self._lighter_run.get(k, 0) + 1
        self._lighter_run[k] = n
        if chosen in measured and self.probe_every and n % self.probe_every == 0:
            return pick(chosen, f"re-measuring {chosen} (every {self.probe_every}th call it is not predicted faster)")
        return pick(best, f"{req} not predicted >= {margin:.0%} faster than {best}")


def main(argv=None) -> int:
    """`python -m ncclz.tools.policy --gbps 0.5 --size 64M --data smooth`: print the decision table."""
    import argparse

    import ncclz
    from ncclz.tools import bench as B

    ap = argparse.ArgumentParser(description="print the policy's predictions over sizes and link rates")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--gbps", default="0.1,0.5,1,2,5,10,25")
    ap.add_argument("--size", default="64M")
    ap.add_argument("--data", default="smooth")
    ap.add_argument("--rel", type=float, default=1e-3)
    ap.add_argument("--cores-per-rank", type=float, default=None)
    a = ap.parse_args(argv)
    S = B.parse_size(a.size)
    x = B.rank_input(a.data, 0, S // 4)
    for g in [float(v) for v in a.gbps.split(",")]:
        p = Policy(a.n, link_gbps=g, cores_per_rank=a.cores_per_rank)
        c = p.choose("all_reduce", x, ncclz.Lossy(rel=a.rel))
        print(f"{g:6.2f} Gbit/s  {a.size}  {a.data}: {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
