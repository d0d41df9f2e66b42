"""Measurement history: the wall times of earlier calls, per size class and mode.

A *size class* is (collective, dtype, power-of-two size): calls of 33..64 MiB share one. Times are
kept normalised to the class's size (the lower power of two), so calls of a class compare. Calls of
CUDA arrays that the runtime runs on the device are filed under their dtype with ``@cuda``
appended (:func:`device_dtype`): another codec, another measurement.

:meth:`History.record` files a call's wall time under the label of the mode that ran (with
``@hierarchical`` appended for a hierarchical call: another algorithm is another measurement); the measured
time of a (class, label) is the fastest of the last ``window`` (4) calls (the minimum, because
other load only ever slows a call down), skipping the first call of each (class, label): it is
cold (buffers, threads, pages), unless another codec effort of the same lossy spec ran in this
class already (they share every buffer and thread, so probing an effort costs one call, not two).
"""

from __future__ import annotations

import dataclasses

from .modes import EFFORTS, bounded, check_effort, label


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One (size class, mode label) of the history.

    class_bytes: the class's size (a power of two; times are normalised to it); calls: the calls
    recorded (the cold first one included); seconds: the measured time at class_bytes, None while
    only the cold call is known."""

    collective: str
    dtype: str
    class_bytes: int
    mode: str
    calls: int
    seconds: float | None


#: Appended to the dtype of a call that runs on the device (its measurements and size classes).
DEVICE_SUFFIX = "@cuda"


def device_dtype(dtype: str, device: bool) -> str:
    """The dtype a call's measurements are filed under: `dtype`, with DEVICE_SUFFIX for a call of
    CUDA arrays that the runtime runs on the device."""
    return str(dtype) + DEVICE_SUFFIX if device else str(dtype)


def size_class(coll: str, dtype: str, nbytes: int) -> tuple:
    return (coll, str(dtype), max(0, int(nbytes)).bit_length())


def _class_bytes(nbytes: int) -> int:
    return 1 << (int(nbytes).bit_length() - 1)


class History:
    """Measured wall times (see the module doc)."""

    def __init__(self, window: int = 4):
        self.window = max(1, int(window))
        self._times: dict = {}  # (class, label) -> [first (never used), the last `window` times]
        self._best: dict = {}  # class -> {label: measured seconds at the class size}
        self._calls: dict = {}  # (class, label) -> calls recorded

    def record(self, coll: str, dtype: str, nbytes: int, spec, wall_s: float, effort: str = "",
               algorithm: str = "") -> None:
        """Files a finished call's wall time under the mode that ran (`spec`: None, Lossless() or the
        Lossy spec; `effort`: its codec effort, a key of EFFORTS; `algorithm`: the algorithm it ran,
        "" or "ring" for the ring)."""
        check_effort(effort)
        if not (wall_s > 0) or nbytes <= 0:
            return
        cls, key = size_class(coll, dtype, nbytes), _key(spec, effort, algorithm)
        t = wall_s * _class_bytes(nbytes) / nbytes
        self._calls[(cls, key)] = self._calls.pop((cls, key), 0) + 1  # (the most recent last)
        for c, k in bounded(self._calls):  # the least recently recorded beyond the bound, everywhere
            self._times.pop((c, k), None)
            best = self._best.get(c, {})
            best.pop(k, None)
            if not best:
                self._best.pop(c, None)
        lst = self._times.setdefault((cls, key), [])
        lst.append(t)
        if len(lst) == 1:
            done = self._best.get(cls, {})
            twins = [_key(spec, e, algorithm) for e in EFFORTS if e != effort] if key.startswith("lossy:") else []
            if not any(w in done for w in twins):
                return  # cold
            lst.insert(0, t)  # counts as measured (the list's first entry is the one never used)
        del lst[1:-self.window]
        self._best.setdefault(cls, {})[key] = min(lst[1:])

    def measured(self, coll: str, dtype: str, nbytes: int, spec, effort: str = "",
                 algorithm: str = "") -> float | None:
        """The measured time of a call of `nbytes` (scaled from its class) with `algorithm`, or None."""
        d = self._best.get(size_class(coll, dtype, nbytes))
        key = _key(spec, check_effort(effort), algorithm)
        if not d or key not in d:
            return None
        return d[key] * nbytes / _class_bytes(nbytes)

    def entries(self) -> list:
        """Every (size class, mode label) recorded, as Measurements, the least recently recorded first."""
        out = []
        for (cls, key), calls in self._calls.items():
            coll, dtype, bits = cls
            out.append(Measurement(coll, dtype, 1 << (bits - 1), key, calls, self._best.get(cls, {}).get(key)))
        return out


def _key(spec, effort: str, algorithm: str) -> str:
    """The label a measurement is filed under: the mode's, with "@<algorithm>" for all but the ring."""
    lab = label(spec, effort)
    return lab if algorithm in ("", "ring") else f"{lab}@{algorithm}"
