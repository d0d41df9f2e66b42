"""Which parts of a flat gradient buffer get lossy compression, and which go exact.

Shared by the DDP hook and the sharded optimizer so both follow one rule (the
CGX rule): a tensor is *compressible* when it has at least ``min_elements``
elements and at least two dimensions (``compress_1d=True`` lifts the second
condition). Biases, norm scales and other small or 1-D tensors carry little
traffic but their errors hurt most, so they travel exactly.

The decision depends on shapes only, so every rank makes the same one and the
collectives stay matched.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError
from ..spec import Lossless, Lossy

#: Default ``min_elements``: tensors smaller than this (4 KiB of fp32) go exact.
DEFAULT_MIN_ELEMENTS = 1024


def check_spec(spec: Any, what: str) -> Any:
    """Validates a compression spec (None, ncclz.Lossless(), ncclz.Lossy(...)); returns it."""
    if spec is None or isinstance(spec, (Lossless, Lossy)):
        return spec
    hint = ""
    if isinstance(spec, str):
        hint = " (strings are not accepted: write ncclz.Lossless() or ncclz.Lossy(rel=1e-3))"
    elif isinstance(spec, numbers.Real):
        hint = f" (for a bound write ncclz.Lossy(rel={spec!r}) or ncclz.Lossy(abs={spec!r}))"
    elif isinstance(spec, type) and spec in (Lossless, Lossy):
        hint = " (an instance is needed: ncclz.Lossless() or ncclz.Lossy(rel=...))"
    raise InvalidArgumentError(
        f"{what} must be None, ncclz.Lossless() or ncclz.Lossy(abs=...|rel=...), got {spec!r}{hint}"
    )


def check_min_elements(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidArgumentError(f"min_elements must be an integer >= 0, got {value!r}")
    return int(value)


def is_lossy(spec: Any) -> bool:
    return isinstance(spec, Lossy)


def compressible(shape: Sequence[int], numel: int, min_elements: int, compress_1d: bool) -> bool:
    """The rule above, for one tensor."""
    return numel >= min_elements and (len(shape) >= 2 or compress_1d)


@dataclass(frozen=True)
class Run:
    """A contiguous range ``[start, start + count)`` of a flat buffer, all of one class."""

    start: int
    count: int
    lossy: bool


def runs(total: int, spans: Sequence[tuple]) -> list:
    """Covers ``[0, total)`` with runs of one class each.

    ``spans``: (offset, numel, lossy) of the tensors laid out in the buffer.
    Gaps and overlaps (never seen in DDP buckets, handled anyway) go exact.
    """
    lossy = bytearray(total)  # 1 = lossy element; total is at most a bucket (tens of MB of fp32)
    if total > 0:
        for offset, numel, is_l in spans:
            if is_l and numel > 0:
                lossy[offset : offset + numel] = b"\x01" * numel
        for offset, numel, is_l in spans:  # an exact tensor wins over an overlapping lossy one
            if not is_l and numel > 0:
                lossy[offset : offset + numel] = bytes(numel)
    out: list = []
    pos = 0
    while pos < total:
        cls = lossy[pos]
        nxt = lossy.find(b"\x00" if cls else b"\x01", pos)
        end = total if nxt < 0 else nxt
        out.append(Run(pos, end - pos, bool(cls)))
        pos = end
    return out


def sequential_spans(tensors: Sequence[Any], min_elements: int, compress_1d: bool) -> list:
    """(offset, numel, lossy) of ``tensors`` laid out back to back in this order."""
    spans, pos = [], 0
    for t in tensors:
        n = int(t.numel())
        spans.append((pos, n, compressible(tuple(t.shape), n, min_elements, compress_1d)))
        pos += n
    return spans
