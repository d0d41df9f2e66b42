"""Compression settings of one ``torch.distributed`` group on the "ncclz" backend (``pg_options``).

::

    import ncclz, ncclz.torch
    dist.init_process_group("ncclz", pg_options=ncclz.torch.Options(compression=ncclz.Lossy(rel=1e-3)))
    sub = dist.new_group([0, 1], backend="ncclz", pg_options=ncclz.torch.Options(compression=None))

Which calls are compressed (decided per tensor, from dtype, size and op only, so
every rank decides the same):

- A tensor is *eligible* when its dtype is in ``dtypes`` (the floating types by
  default) and it has at least ``min_elements`` elements. Integer tensors, small
  tensors and DDP's bookkeeping (shape all-gathers, flags) go exact.
- An eligible tensor of a sum-like reduction (SUM, AVG, PREMUL_SUM) of a
  collective named in ``lossy_collectives`` (all_reduce, reduce_scatter and
  reduce by default: gradients) gets ``compression``.
- An eligible tensor of data movement (all_gather, broadcast, send/recv, gather,
  scatter, all_to_all) gets ``compression`` when its collective is named in
  ``lossy_collectives`` (none is by default).
- Every other eligible tensor (all-gathers and broadcasts of parameters, MIN /
  MAX / PRODUCT) gets ``compression`` when it is exact (``Lossless()``), else
  ``exact_compression`` (``None`` or ``Lossless()``). So with a lossy spec,
  DDP's initial parameter broadcast and FSDP2's parameter all-gathers stay exact
  unless you add them to ``lossy_collectives``.

The size that ``min_elements`` is compared with is the same on every rank: the
tensor of an all-reduce / reduce / broadcast / send, one rank's block of an
all-gather / reduce-scatter / gather / scatter, and for all_to_all one rank's
input (with uneven splits, the average over the ranks: the backend exchanges
the totals in one small all-gather first, only where compression could apply).

Without ``pg_options`` a group takes :meth:`Options.from_env`: the defaults, with
``compression`` from NCCLZ_TORCH_COMPRESSION (``none``, ``lossless``,
``rel=1e-3``, ``abs=1e-4``; default ``lossless``), so a script switches modes
without a code change. Every rank of a group must pass the same options: the
backend compares them when the group is created and every rank raises
``InvalidArgumentError`` naming the ranks that differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import numbers
import os
from typing import Any

import torch

from ..errors import InvalidArgumentError
from ..spec import Lossless, Lossy

__all__ = ["COLLECTIVES", "DEFAULT_MIN_ELEMENTS", "FLOAT_DTYPES", "Options"]

#: Default ``min_elements``: tensors with fewer elements (64 KiB of float32) go exact.
DEFAULT_MIN_ELEMENTS = 16384

#: The floating types the runtime compresses (the default ``dtypes``).
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

#: Dtypes the runtime can carry compressed at all (lossless; the 8-bit ones as their bytes); lossy needs
#: FLOAT_DTYPES.
_CODEC_DTYPES = FLOAT_DTYPES + tuple(
    getattr(torch, n)
    for n in ("int8", "int32", "int64", "uint8", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
    if hasattr(torch, n)
)

#: Collective names accepted in ``lossy_collectives``.
COLLECTIVES = (
    "all_reduce",
    "reduce_scatter",
    "reduce",
    "all_gather",
    "broadcast",
    "send",
    "gather",
    "scatter",
    "all_to_all",
)

#: Reductions (a lossy spec applies to their sum-like ops) and data movement (any eligible tensor).
REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")
MOVEMENT = ("all_gather", "broadcast", "send", "gather", "scatter", "all_to_all")

_ENV = "NCCLZ_TORCH_COMPRESSION"
_ENV_ANY = "NCCLZ_TORCH_ANY_SOURCE"
_LOSSLESS = Lossless()  # the default compression (specs are frozen: one instance serves all)


def _check_spec(spec: Any, what: str) -> Any:
    if spec is None or isinstance(spec, (Lossless, Lossy)):
        return spec
    hint = ""
    if isinstance(spec, str):
        hint = " (strings are not accepted here: write ncclz.Lossless() or ncclz.Lossy(rel=1e-3))"
    raise InvalidArgumentError(
        f"{what} must be None, ncclz.Lossless() or ncclz.Lossy(abs=...|rel=...), got {spec!r}{hint}"
    )


def parse_spec(text: str, what: str = _ENV) -> Any:
    """``none`` / ``lossless`` / ``rel=R`` / ``abs=E`` (also ``rel:R``) to a spec."""
    s = text.strip().lower().replace(":", "=")
    if s in ("none", "off", "0", ""):
        return None
    if s == "lossless":
        return Lossless()
    kind, _, value = s.partition("=")
    if kind in ("rel", "abs") and value:
        try:
            bound = float(value)
        except ValueError:
            bound = None
        if bound is not None:
            return Lossy(rel=bound) if kind == "rel" else Lossy(abs=bound)
    raise InvalidArgumentError(
        f"{what}={text!r} is not a compression: use none, lossless, rel=R or abs=E (e.g. rel=1e-3)"
    )


@dataclasses.dataclass(frozen=True)
class Options:
    """``pg_options`` of a group on the "ncclz" backend (see the module doc for the rules).

    compression: ``None``, ``ncclz.Lossless()`` (default; bit-identical results)
        or ``ncclz.Lossy(abs=E|rel=r)`` (every element within E of the exact
        result; rel: E = r * (max - min) of the call's inputs over all ranks).
    min_elements: tensors with fewer elements go exact (default 16384).
    dtypes: dtypes that may be compressed (default the floating types; lossless
        also takes int8, int32, int64, uint8, uint32, uint64, float8_e4m3fn and
        float8_e5m2).
    lossy_collectives: where a lossy spec applies (default all_reduce,
        reduce_scatter and reduce, the gradient reductions); add "all_gather",
        "broadcast", "send", "gather", "scatter" or "all_to_all" to make that
        data movement lossy too.
    exact_compression: ``None`` (default) or ``ncclz.Lossless()`` for the eligible
        tensors a lossy spec does not apply to.
    error_feedback: keep each rank's quantization residual of every lossy
        reduction and add it to the next call of the same collective, shape and
        dtype (the k-th such call of a step gets the residual of the k-th call of
        the previous step). Lossy specs only.
    policy: the Communicator's compression policy, "auto" (may run a call with a
        lighter mode where compressing would not pay) or "off"; None: NCCLZ_POLICY.
    transport: "shm", "socket", "inproc" or None (NCCLZ_TRANSPORT / automatic).
    any_source: let ``dist.recv(t)`` / ``irecv`` without ``src`` work (default
        False; NCCLZ_TORCH_ANY_SOURCE=1 for groups without pg_options): every
        send then also counts itself in the group's store (one store ``add``
        per send), and a recv without src polls those counters to pick a rank
        with a message no recv has claimed yet. Without it such a recv raises.
    """

    compression: Any = _LOSSLESS
    min_elements: int = DEFAULT_MIN_ELEMENTS
    dtypes: tuple = FLOAT_DTYPES
    lossy_collectives: tuple = ("all_reduce", "reduce_scatter", "reduce")
    exact_compression: Any = None
    error_feedback: bool = False
    policy: str | None = None
    transport: str | None = None
    any_source: bool = False

    def __post_init__(self):
        _check_spec(self.compression, "Options.compression")
        _check_spec(self.exact_compression, "Options.exact_compression")
        if isinstance(self.exact_compression, Lossy):
            raise InvalidArgumentError(
                "Options.exact_compression must be None or ncclz.Lossless() (it carries what the lossy spec "
                "does not apply to); put the lossy spec in compression="
            )
        m = self.min_elements
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
            raise InvalidArgumentError(f"Options.min_elements must be an integer >= 0, got {m!r}")
        object.__setattr__(self, "min_elements", int(m))

        dtypes = self.dtypes
        if isinstance(dtypes, torch.dtype):
            dtypes = (dtypes,)
        try:
            dtypes = tuple(dtypes)
        except TypeError:
            raise InvalidArgumentError(
                f"Options.dtypes must be a tuple of torch dtypes, got {dtypes!r}"
            ) from None
        for d in dtypes:
            if not isinstance(d, torch.dtype):
                raise InvalidArgumentError(f"Options.dtypes must hold torch dtypes, got {d!r}")
            if d not in _CODEC_DTYPES:
                raise InvalidArgumentError(
                    f"Options.dtypes: ncclz cannot compress {d}; use some of "
                    f"{', '.join(str(x) for x in _CODEC_DTYPES)}"
                )
        object.__setattr__(self, "dtypes", dtypes)

        lossy = isinstance(self.compression, Lossy)
        if lossy:
            ints = [str(d) for d in dtypes if d not in FLOAT_DTYPES]
            if not dtypes or ints:
                if any(d in FLOAT_DTYPES for d in dtypes):
                    what = ", ".join(ints)
                elif all(not d.is_floating_point for d in dtypes):
                    what = "an integer-only group"
                else:
                    what = "a group without float32, float64, float16 or bfloat16"
                raise InvalidArgumentError(
                    f"Options: lossy compression {self.compression!r} on {what} (dtypes "
                    f"{', '.join(str(d) for d in dtypes) or 'none'}): lossy needs floating-point tensors; "
                    "list only float32/float64/float16/bfloat16 in dtypes, or use ncclz.Lossless()"
                )

        colls = self.lossy_collectives
        if isinstance(colls, str):
            colls = (colls,)
        try:
            colls = tuple(str(c) for c in colls)
        except TypeError:
            raise InvalidArgumentError(
                f"Options.lossy_collectives must be a tuple of names, got {self.lossy_collectives!r}"
            ) from None
        for c in colls:
            if c not in COLLECTIVES:
                raise InvalidArgumentError(
                    f"Options.lossy_collectives: unknown collective {c!r}; use some of {', '.join(COLLECTIVES)}"
                )
        object.__setattr__(self, "lossy_collectives", colls)

        if not isinstance(self.error_feedback, bool):
            raise InvalidArgumentError(
                f"Options.error_feedback must be True or False, got {self.error_feedback!r}"
            )
        if self.error_feedback and not lossy:
            raise InvalidArgumentError(
                f"Options.error_feedback=True needs a lossy compression (ncclz.Lossy(...)), got "
                f"{self.compression!r}: exact modes leave no residual"
            )
        if not isinstance(self.any_source, bool):
            raise InvalidArgumentError(f"Options.any_source must be True or False, got {self.any_source!r}")
        if self.policy is not None and self.policy not in ("auto", "off"):
            raise InvalidArgumentError(f"Options.policy must be 'auto', 'off' or None, got {self.policy!r}")
        if self.transport is not None and self.transport not in ("shm", "socket", "inproc", "auto"):
            raise InvalidArgumentError(
                f"Options.transport must be 'shm', 'socket', 'inproc', 'auto' or None, got {self.transport!r}"
            )

    @classmethod
    def from_env(cls) -> Options:
        """The defaults, with ``compression`` from NCCLZ_TORCH_COMPRESSION and ``any_source`` from
        NCCLZ_TORCH_ANY_SOURCE (0 or 1) when they are set."""
        kw: dict = {}
        v = os.environ.get(_ENV)
        if v is not None and v.strip() != "":
            kw["compression"] = parse_spec(v)
        a = os.environ.get(_ENV_ANY, "").strip()
        if a not in ("", "0", "1"):
            raise InvalidArgumentError(f"{_ENV_ANY}={a!r}: use 0 or 1")
        if a == "1":
            kw["any_source"] = True
        return cls(**kw)

    @classmethod
    def coerce(cls, value: Any) -> Options:
        """``pg_options`` as given to init_process_group / new_group: None (from_env), an Options,
        or a dict of Options' fields. Anything else is refused with a message that says what to pass."""
        if value is None:
            return cls.from_env()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(str(k) for k in value if k not in names)
            if unknown:
                raise InvalidArgumentError(
                    f"pg_options for the ncclz backend: unknown option(s) {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(names))}"
                )
            return cls(**value)
        raise InvalidArgumentError(
            f"pg_options for the ncclz backend must be ncclz.torch.Options(...) (or a dict of its fields), "
            f"got {type(value).__module__}.{type(value).__name__}"
        )

    def describe(self) -> str:
        """A canonical text of every field (what ranks compare at group creation)."""
        parts = [
            f"compression={self.compression!r}",
            f"min_elements={self.min_elements}",
            f"dtypes=({','.join(str(d) for d in self.dtypes)})",
            f"lossy_collectives=({','.join(self.lossy_collectives)})",
            f"exact_compression={self.exact_compression!r}",
            f"error_feedback={self.error_feedback}",
            f"policy={self.policy}",
            f"transport={self.transport}",
            f"any_source={self.any_source}",
        ]
        return "Options(" + ", ".join(parts) + ")"

    def fingerprint(self) -> int:
        """63-bit hash of :meth:`describe` (stable across processes, unlike hash())."""
        digest = hashlib.sha256(self.describe().encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    # ---- the per-tensor rule --------------------------------------------------
    def spec_for(self, collective: str, tensor: torch.Tensor, sum_like: bool) -> Any:
        """The compression for one tensor of one call (see the module doc)."""
        return self.spec_for_count(collective, tensor.dtype, int(tensor.numel()), sum_like)

    def spec_for_count(self, collective: str, dtype: torch.dtype, numel: int, sum_like: bool) -> Any:
        """The same rule from the dtype and the element count that the module doc says is compared."""
        spec = self.compression
        if spec is None or dtype not in self.dtypes or numel < self.min_elements:
            return None
        if isinstance(spec, Lossy):
            if collective in self.lossy_collectives and (sum_like or collective in MOVEMENT):
                return spec
            return self.exact_compression
        return spec
