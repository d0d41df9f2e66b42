"""Torch tensors as the ncclz runtime takes them, and c10d reduce ops as ncclz ops.

The runtime moves contiguous arrays of float32, float64, float16, bfloat16,
int8, int32, int64, uint8, uint32, uint64, float8_e4m3fn and float8_e5m2 (reduced in
their own arithmetic, uncompressed or lossless), on the CPU or on a CUDA device (``ncclz.Communicator``'s
device path, or staged through host memory; results come back onto the input's device). Everything else is *staged* into such a tensor and
copied back after the call:

- data movement (all-gather, broadcast, send/recv) of any other dtype travels
  as its bytes (``uint8``), uncompressed;
- reductions of bool use uint8 MAX (SUM, MAX, BOR) or MIN (PRODUCT, MIN, BAND),
  as ProcessGroupNCCL does; int16 and uint16 are reduced in int32 and cast back
  (the same bits: sums and products wrap in the narrow type either way);
  complex tensors travel as (real, imaginary) float pairs, for SUM, AVG and
  PREMUL_SUM only;
- non-contiguous tensors are reduced in a contiguous copy.

Staging depends on dtype and layout only, so every rank stages alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..errors import InvalidArgumentError

#: Dtypes the runtime takes as they are.
NATIVE = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.uint8) + tuple(
    getattr(torch, n) for n in ("uint32", "uint64", "float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)
)

#: Reduced in int32 and cast back (every value fits; the cast wraps as the narrow type's own sum would).
_WIDENED = tuple(getattr(torch, n) for n in ("int16", "uint16") if hasattr(torch, n))

_RED = dist.ReduceOp.RedOpType

#: c10d reduce op -> ncclz op name (PREMUL_SUM is a sum of inputs scaled by its factor).
OP_NAMES = {
    _RED.SUM: "sum",
    _RED.AVG: "avg",
    _RED.MIN: "min",
    _RED.MAX: "max",
    _RED.PRODUCT: "prod",
    _RED.PREMUL_SUM: "sum",
}

#: Ops whose error a lossy spec bounds: sums of values (what gradients go through).
SUM_LIKE = (_RED.SUM, _RED.AVG, _RED.PREMUL_SUM)


@dataclass(frozen=True)
class ReduceOp:
    """A c10d reduce op as the backend runs it."""

    kind: Any  # ReduceOp.RedOpType
    name: str  # ncclz op ("sum", "avg", ...)
    factor: Any = None  # PREMUL_SUM's factor (a number or a one-element tensor)

    @property
    def sum_like(self) -> bool:
        return self.kind in SUM_LIKE

    def __str__(self) -> str:
        return str(self.kind).rsplit(".", 1)[-1]


def reduce_op(op: Any) -> ReduceOp:
    """From ``opts.reduceOp`` (a ReduceOp, or its RedOpType)."""
    kind = getattr(op, "op", op)
    if kind == _RED.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if factor is None:
            raise InvalidArgumentError(
                "ReduceOp.PREMUL_SUM without a factor: use dist._make_nccl_premul_sum(f)"
            )
        return ReduceOp(kind, "sum", factor)
    for k, name in OP_NAMES.items():
        if kind == k:
            return ReduceOp(k, name)
    raise InvalidArgumentError(
        f"the ncclz backend does not offer ReduceOp.{str(kind).rsplit('.', 1)[-1]}; it has SUM, AVG, MIN, MAX, "
        "PRODUCT and PREMUL_SUM (bitwise BAND/BOR/BXOR only on bool tensors)"
    )


def check_tensor(t: Any, what: str) -> torch.Tensor:
    """A dense CPU or CUDA tensor, or a clear error."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_sparse or t.layout != torch.strided:
        raise InvalidArgumentError(
            f"{what}: {t.layout} tensors are not supported by the ncclz backend; pass a dense tensor "
            "(t.to_dense())"
        )
    if t.device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"{what} is on {t.device}: the ncclz backend takes CPU and CUDA tensors; move it to one of them"
        )
    return t


def same_device(tensors: list, what: str) -> None:
    """All tensors of one call on one device (results stay on the inputs' device)."""
    devs = {t.device for t in tensors}
    if len(devs) > 1:
        raise InvalidArgumentError(
            f"{what}: the tensors of one call must be on one device, got {', '.join(sorted(str(d) for d in devs))}"
        )


def cuda_devices(tensors: Any) -> list:
    """The CUDA devices of the tensors in ``tensors`` (nested lists too), for a Future's ``devices``."""
    found: set = set()
    stack = [tensors]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                found.add(x.device)
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return sorted(found, key=str)


def check_one(tensors: Any, what: str) -> torch.Tensor:
    """The single tensor of a c10d tensor list (one device per process)."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
        n = len(tensors) if isinstance(tensors, (list, tuple)) else "not a list"
        raise InvalidArgumentError(
            f"{what}: the ncclz backend takes exactly one tensor per process (one device per rank), got {n}"
        )
    return check_tensor(tensors[0], what)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)


def movable(t: torch.Tensor) -> tuple:
    """(tensor the runtime can move, whether it is a staging copy) for data movement of ``t``'s bytes.

    Native contiguous tensors go as they are (in their natural shape: the codec uses it as a layout
    hint); anything else as a contiguous copy of its bytes."""
    if t.dtype in NATIVE and t.is_contiguous():
        return t, False
    c = t.contiguous()
    if c.dtype in NATIVE:
        return c, True
    if c.is_complex():
        return torch.view_as_real(c), True
    return _flat(c).view(torch.uint8), True


def rows(t: torch.Tensor) -> tuple:
    """(rows, elements per row) of ``t`` along its first dimension (a 0-d tensor is one row of one)."""
    if t.dim() == 0:
        return 1, 1
    row = 1
    for n in t.shape[1:]:
        row *= int(n)
    return int(t.shape[0]), row


def row_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a tensor the runtime can move whose first dimension is still ``t``'s rows (split sizes
    count rows): ``t`` itself when native and contiguous, complex as float pairs, else each row's bytes."""
    n, row = rows(t)
    if t.dim() == 0:
        t = t.reshape(1)
    if t.dtype in NATIVE and t.is_contiguous():
        return t
    c = t.contiguous()
    if c.dtype in NATIVE:
        return c
    if c.is_complex():
        return torch.view_as_real(c)
    return c.reshape(n, row).view(torch.uint8)


def reducible(t: torch.Tensor, op: ReduceOp, what: str) -> tuple:
    """(staged tensor, ncclz op name, dtype to cast back to or None) for a reduction of ``t``.

    The staged tensor is ``t`` itself when the runtime takes it as it is (contiguous, native dtype)."""
    name = op.name
    dt = t.dtype
    if dt == torch.bool:
        if op.kind in (_RED.SUM, _RED.MAX, _RED.BOR):
            name = "max"
        elif op.kind in (_RED.MIN, _RED.PRODUCT, _RED.BAND):
            name = "min"
        else:
            raise InvalidArgumentError(f"{what}: ReduceOp.{op} is not defined for bool tensors")
        return t.to(torch.uint8), name, torch.bool
    if op.kind == _RED.AVG and not (dt.is_floating_point or dt.is_complex):
        raise InvalidArgumentError(
            f"{what}: ReduceOp.AVG needs a floating-point tensor, got {dt} (reduce with SUM and divide)"
        )
    if dt.is_complex:
        if not op.sum_like:
            raise InvalidArgumentError(
                f"{what}: ReduceOp.{op} is not defined for complex tensors (SUM, AVG and PREMUL_SUM are)"
            )
        return torch.view_as_real(t.contiguous()), name, None
    if dt in _WIDENED:
        return t.to(torch.int32), name, dt
    if dt not in NATIVE:
        raise InvalidArgumentError(
            f"{what}: the ncclz backend cannot reduce {dt} tensors; it reduces float32, float64, float16, "
            "bfloat16, float8_e4m3fn, float8_e5m2, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool "
            "and complex"
        )
    if not t.is_contiguous():
        return t.contiguous(), name, None
    return t, name, None


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' memory ranges intersect (an in-place all-gather passes its input as a
    block of the output; the runtime wants separate buffers, so such an input is copied first)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def scale(t: torch.Tensor, factor: Any, in_place: bool) -> torch.Tensor:
    """``t * factor`` (PREMUL_SUM's pre-multiplication), in ``t``'s dtype."""
    if isinstance(factor, torch.Tensor):
        factor = factor.to(device=t.device)
    return t.mul_(factor) if in_place else t * factor


def write_back(dst: torch.Tensor, staged: torch.Tensor, cast: Any) -> None:
    """Copies a staged result into the caller's tensor (no-op when they are the same)."""
    if staged is dst or (
        dst.is_contiguous()
        and staged.data_ptr() == dst.data_ptr()
        and staged.numel() * staged.element_size() == dst.numel() * dst.element_size()
    ):
        return  # reduced in place (a view of the caller's memory)
    if dst.is_complex() and not staged.is_complex():
        staged = torch.view_as_complex(staged.reshape(-1, 2))  # (real, imaginary) pairs, flat or not
    dst.copy_(staged.reshape(dst.shape) if cast is None else staged.reshape(dst.shape).to(cast))
