"""Calibration: the codec's ratio and speed on a sample of the caller's data, on this machine.

:meth:`Calibrator.calibrate` runs ``ncclz.codec.compress`` / ``decompress`` on a sample (<= 4 MiB by
default) with the caller's spec, as the wire codes it (the classic layout, with the codec effort's
rANS margin), best of ``reps`` timings (on a shared machine a single timing is often slowed by other
jobs), and caches the result per (dtype, mode label, sums).

For sums (all_reduce, reduce_scatter, reduce) of mostly-zero data the sample is first summed with n-1
shifted copies of itself (:func:`reduction_terms`): the wire carries partial sums, whose nonzeros are
the union of the ranks'.

:meth:`Calibrator.pin` fixes the ratio and / or the speeds of a mode (``"lossless"``, ``"lossy"``,
``"lossy/mid"``, ``"lossy/fast"``) whatever this machine measures: for a model of another machine,
and for tests whose decisions must not depend on this machine's load. A mode with all three pinned
is never timed.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .. import codec
from ..spec import Lossy
from .modes import EFFORTS, MODES, bounded, check_effort, label, mode_name


@dataclasses.dataclass
class Calibration:
    """Codec ratio and speed on a sample: bytes/s of the single-threaded coder.

    mode: the label it was taken for ("lossless", "lossy:rel=0.001/fast", ...); dtype: the
    sample's; sums > 1: taken on the sum of that many shifted copies of the sample; pinned: the
    fields that come from :meth:`Calibrator.pin`, not from a measurement."""

    mode: str
    ratio: float
    enc_Bps: float
    dec_Bps: float
    sample_bytes: int
    seconds: float
    dtype: str = ""
    sums: int = 0
    pinned: tuple = ()


_PIN_FIELDS = ("ratio", "enc_Bps", "dec_Bps")


def reduction_terms(coll: str, n: int, arr) -> int:
    """For a reduction (all_reduce, reduce_scatter, reduce) of mostly-zero data over n > 1 ranks, n (the
    terms a full sum covers), else 0. The wire of a sum carries partial sums, whose nonzeros are the
    union of the ranks' (99%-zero gradients on 4 ranks: ~3% nonzero on the wire, not 1%): a sample
    of one rank's data would promise ratios the wire does not reach (for lossless, ~4x too high),
    and make lossless look as fast as lossy. Dense data keeps its own sample: a sum is as dense as
    its terms. Decided on a strided probe of <= 8 Ki values (cheap per call: ~0.1 ms on 64 MiB)."""
    if coll not in ("all_reduce", "reduce_scatter", "reduce") or n <= 1 or arr.size == 0:
        return 0
    try:
        probe = np.asarray(arr).reshape(-1)[:: max(1, arr.size // 8192)]
        nz = int(np.count_nonzero(probe))
    except Exception:  # noqa: BLE001 - a dtype NumPy cannot compare: keep the plain sample
        return 0
    return n if 0 < nz <= 0.5 * probe.size else 0


class Calibrator:
    """Calibrations, cached per (dtype, mode label, sums); see the module doc."""

    def __init__(self, sample_bytes: int = 4 << 20, reps: int = 3):
        self.sample_bytes = int(sample_bytes)
        self.reps = max(1, int(reps))
        self._cache: dict = {}  # (dtype, label, sums) -> Calibration, or the exception it raised
        self._pins: dict = {}  # mode name -> {field: value}

    def pin(self, mode: str, *, ratio: float | None = None, enc_Bps: float | None = None,
            dec_Bps: float | None = None) -> None:
        """Fixes `mode`'s ratio and / or encode / decode speed (bytes/s of one coder thread) for
        every dtype and bound; None leaves that field to the measurement. Cached calibrations of
        the mode are dropped."""
        if mode not in MODES or mode == "none":
            raise ValueError(f"pin: unknown mode {mode!r}; one of {', '.join(m for m in MODES if m != 'none')}")
        vals = {"ratio": ratio, "enc_Bps": enc_Bps, "dec_Bps": dec_Bps}
        for k, v in vals.items():
            if v is not None and not (0 < float(v) < float("inf")):
                raise ValueError(f"pin({mode!r}): {k} must be a number > 0, got {v!r}")
        self._pins[mode] = {k: float(v) for k, v in vals.items() if v is not None}
        self._cache = {k: v for k, v in self._cache.items() if _mode_of_label(k[1]) != mode}

    def pins(self) -> dict:
        """{mode name: {field: value}} of the pinned values."""
        return {m: dict(p) for m, p in self._pins.items()}

    def cached(self, dtype: str, spec, effort: str = "", sums: int = 0) -> Calibration | None:
        """The calibration taken for (dtype, spec, effort, sums), or None if there is none."""
        c = self._cache.get(_key(dtype, spec, effort, sums))
        return c if isinstance(c, Calibration) else None

    def entries(self) -> list:
        """Every calibration kept (failed ones left out), the least recently used first."""
        return [c for c in self._cache.values() if isinstance(c, Calibration)]

    def calibrate(self, x, spec, effort: str = "", sums: int = 0) -> Calibration:
        """Times ncclz.codec on a sample of x with spec and the codec effort (cached; see the module
        doc). sums > 1: on the sum of `sums` copies of the sample shifted against each other.
        Raises what the codec raises for data it does not take (and again on later calls)."""
        check_effort(effort)
        arr = np.ascontiguousarray(np.asarray(x)).reshape(-1)
        key = _key(str(arr.dtype), spec, effort, sums)
        hit = self._cache.pop(key, None)
        if hit is not None:
            self._cache[key] = hit  # the most recently used last (bounded drops the others first)
            if isinstance(hit, Exception):
                raise hit
            return hit
        pins = self._pins.get(mode_name(spec, effort), {})
        if len(pins) == len(_PIN_FIELDS):  # nothing left to measure
            c = Calibration(mode=key[1], sample_bytes=0, seconds=0.0, dtype=key[0], sums=key[2],
                            pinned=_PIN_FIELDS, **pins)
            self._cache[key] = c
            return c
        try:
            c = self._measure(arr, spec, effort, key)
        except Exception as e:
            self._cache[key] = e
            bounded(self._cache)
            raise
        if pins:
            c = dataclasses.replace(c, pinned=tuple(k for k in _PIN_FIELDS if k in pins), **pins)
        self._cache[key] = c
        bounded(self._cache)
        return c

    def _measure(self, arr, spec, effort: str, key: tuple) -> Calibration:
        k = max(1, min(arr.size, self.sample_bytes // max(1, arr.dtype.itemsize)))
        sample = np.ascontiguousarray(arr[:k])
        sums = key[2]
        if sums > 1:
            acc = sample.astype(np.float64)
            for j in range(1, sums):
                acc += np.roll(sample, j * (k // sums) + j).astype(np.float64)
            sample = acc.astype(sample.dtype)
        t_enc = t_dec = float("inf")
        t_start = time.perf_counter()
        for _ in range(self.reps):
            t0 = time.perf_counter()
            if isinstance(spec, Lossy):
                blob = codec.compress(sample, spec, layout="classic", rans_margin=EFFORTS[effort])
            else:
                blob = codec.compress(sample, spec)
            t1 = time.perf_counter()
            codec.decompress(blob)
            t2 = time.perf_counter()
            t_enc, t_dec = min(t_enc, t1 - t0), min(t_dec, t2 - t1)
        return Calibration(mode=key[1], ratio=sample.nbytes / max(1, blob.size),
                           enc_Bps=sample.nbytes / max(t_enc, 1e-9), dec_Bps=sample.nbytes / max(t_dec, 1e-9),
                           sample_bytes=sample.nbytes, seconds=time.perf_counter() - t_start,
                           dtype=key[0], sums=sums)


def _key(dtype: str, spec, effort: str, sums: int) -> tuple:
    return (str(dtype), label(spec, effort), int(sums) if sums > 1 else 0)


def _mode_of_label(lab: str) -> str:
    """"lossy:rel=0.001/fast" -> "lossy/fast"; "lossless" -> "lossless"."""
    if not lab.startswith("lossy:"):
        return lab
    return "lossy/" + lab.rsplit("/", 1)[1] if "/" in lab else "lossy"
