"""Compression specs: what a compressed array or collective promises.

- ``Lossy(abs=E)``: every finite element of the result is within ``E`` of the exact value.
- ``Lossy(rel=r)``: the same with ``E = r * (max - min)`` over the finite input values.
- ``Lossless()``: bit-identical results.

Non-finite values (NaN, +-inf) always come back exactly.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Union

from .errors import InvalidArgumentError

__all__ = ["Lossless", "Lossy", "Spec"]


def _check_bound(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"Lossy({name}=...) must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(f"Lossy({name}=...) must be finite and > 0, got {value!r}")
    return v


@dataclass(frozen=True)
class Lossy:
    """Error-bounded lossy compression: give exactly one of ``abs`` and ``rel``.

    ``abs``: absolute bound E, ``|result - exact| <= E`` for every finite element.
    ``rel``: relative bound r, ``E = r * (max - min)`` of the finite input values.
    """

    abs: float | None = None
    rel: float | None = None

    def __post_init__(self):
        if (self.abs is None) == (self.rel is None):
            raise InvalidArgumentError(
                "Lossy needs exactly one of abs= and rel=, e.g. Lossy(abs=1e-3) or Lossy(rel=1e-4)"
            )
        if self.abs is not None:
            object.__setattr__(self, "abs", _check_bound("abs", self.abs))
        else:
            object.__setattr__(self, "rel", _check_bound("rel", self.rel))

    @property
    def kind(self) -> str:
        """``"abs"`` or ``"rel"``."""
        return "abs" if self.abs is not None else "rel"

    @property
    def bound(self) -> float:
        """The bound given (E for abs, r for rel)."""
        return self.abs if self.abs is not None else self.rel

    def __repr__(self) -> str:
        return f"Lossy({self.kind}={self.bound!r})"


@dataclass(frozen=True)
class Lossless:
    """Lossless compression: results are bit-identical (NaN payloads and -0.0 included)."""

    def __repr__(self) -> str:
        return "Lossless()"


Spec = Union[Lossy, Lossless]
