"""The modes the policy chooses between, and their names.

A call that asks for ``ncclz.Lossy(...)`` may run as ``none``, ``lossless`` or ``lossy`` with one of
four codec efforts (same bound, same result bits; only the wire coder's selector differs):

- ``lossy``: the selector's default;
- ``lossy/dense``: rANS wherever its estimate is smaller than the fast coders' (``DENSE_MARGIN``):
  the fewest bytes, for links slower than the codec (considered only there: :mod:`.decision`);
- ``lossy/mid``: rANS only where it beats the fast coders by 30% (``MID_MARGIN``), not 15%;
- ``lossy/fast``: never rANS (``FAST_MARGIN``), which encodes several times slower than Block.

These names key :attr:`Choice.predicted_s <ncclz.policy.Choice>`, :meth:`Policy.pin
<ncclz.policy.Policy.pin>` and the measurements. A *label* names a mode with its bound
(``"lossy:rel=0.001/fast"``), so measurements of different bounds stay apart; the bound to two
significant digits, so that a job whose bound changes from call to call (a schedule, a bound from
the gradients' norm) reuses them instead of calibrating and filing every call anew (bounds within a
few percent code alike). The tables the labels key are bounded too (:data:`MAX_ENTRIES`).
"""

from __future__ import annotations

from ..spec import Lossless, Lossy

#: The codec effort of the "lossy/fast" variant: the selector's rANS margin 1 (Block, Raw and
#: Sparse only). rANS encodes several times slower than Block: where the codec, not the link, is
#: the bottleneck, the lower ratio can finish first.
FAST_MARGIN = 1.0
#: The codec effort of the "lossy/mid" variant: rANS only where its estimate beats Block/Raw by
#: 30% (the default asks 15%). Measured in the network lab (4 ranks on 2 cores, 0.5 Gbit/s, 3-D
#: smooth field): 186 ms at ratio 10.7 against 196 ms at 11.6 (default) and 224 ms at 7.7 (fast);
#: on the flat smooth field the default won (217 ms against 230), hence a variant of its own.
MID_MARGIN = 0.3
#: The codec effort of the "lossy/dense" variant: rANS wherever its size estimate beats Block/Raw at
#: all. On noisy codes (gradients) rANS saves about 10% of the bytes, below the default's 15% bar, at
#: several times Block's encode time: worth it only where the link, not the codec, bounds the call.
#: Measured in the network lab (2 hosts x 2 ranks on 2 cores, 64 MiB gradients, rel 1e-3, hierarchical;
#: bench/results/topology.md, "Codec effort"): ratio 7.44 -> 8.14; at 0.1 Gbit/s 826 -> 767 ms, at
#: 1 Gbit/s 162 -> 220 ms (the smooth field takes rANS at the default effort already: no change).
DENSE_MARGIN = 0.0
#: The codec efforts of a lossy request: name -> the selector's rANS margin (None: its default).
EFFORTS = {"": None, "dense": DENSE_MARGIN, "mid": MID_MARGIN, "fast": FAST_MARGIN}
#: Every mode name the policy predicts, measures and may run.
MODES = ("none", "lossless", "lossy", "lossy/dense", "lossy/mid", "lossy/fast")


#: The selector's own rANS margin (codec::EncodeOptions::rans_margin), the default effort's.
DEFAULT_MARGIN = 0.15


def effort_of_margin(margin: float | None) -> str:
    """The name of the effort whose rANS margin is nearest `margin` (None or < 0: the default, "")."""
    if margin is None or margin < 0:
        return ""
    return min(EFFORTS, key=lambda k: abs((DEFAULT_MARGIN if EFFORTS[k] is None else EFFORTS[k]) - margin))


def check_effort(effort: str) -> str:
    """`effort` if it names a codec effort (a key of EFFORTS), else ValueError."""
    if effort not in EFFORTS:
        raise ValueError(f"unknown codec effort {effort!r}; one of {sorted(EFFORTS)}")
    return effort


def mode_class(spec) -> str:
    """"none", "lossless" or "lossy" for None, ncclz.Lossless() or ncclz.Lossy(...)."""
    if spec is None:
        return "none"
    if isinstance(spec, Lossless):
        return "lossless"
    if isinstance(spec, Lossy):
        return "lossy"
    raise TypeError(f"compression must be None, ncclz.Lossless() or ncclz.Lossy(...), got {spec!r}")


def label(spec, effort: str = "") -> str:
    """The label measurements and calibrations are filed under: "none", "lossless", or
    "lossy:<kind>=<bound>[/<effort>]"."""
    cls = mode_class(spec)
    if cls != "lossy":
        return cls
    return f"lossy:{spec.kind}={float(f'{spec.bound:.2g}'):g}" + (f"/{effort}" if effort else "")


#: The most entries a table keyed by labels keeps (calibrations, measurements, probe counters): the
#: least recently used go first (a long job of ever new bounds or sizes stays within it).
MAX_ENTRIES = 512


def bounded(table: dict, limit: int = MAX_ENTRIES) -> list:
    """Drops `table`'s first entries (insertion order: its users put the most recently used last)
    beyond `limit`; returns the keys dropped."""
    dropped = []
    while len(table) > limit:
        k = next(iter(table))
        del table[k]
        dropped.append(k)
    return dropped


def mode_name(spec, effort: str = "") -> str:
    """The mode name of MODES for a spec and codec effort ("lossy/fast", "none", ...)."""
    cls = mode_class(spec)
    return f"{cls}/{effort}" if cls == "lossy" and effort else cls
