"""GPU arrays in the collectives: where a CUDA array lives, and the staged path through host memory.

CUDA arrays from PyTorch, CuPy and JAX normally go to the native runtime as they are (the
device path: ``_dlpack.direct_buffer``; docs/GPU.md, "Device buffers"). This module describes
them (:class:`DeviceArray`) and implements the other way, which ``NCCLZ_DEVICE_PATH=staged``
selects for every call and the device path takes for calls the policy runs exact by their size
alone. Staged, a CUDA array from PyTorch, CuPy, JAX (or any CUDA DLPack producer that PyTorch or
CuPy can import) goes through a collective like this:

1. ``to_host``: its framework copies it to host memory. The copy is queued on the
   framework's current stream (``torch.cuda.current_stream()``, CuPy's current
   stream; JAX waits for the array's value) and waited for, so everything the
   caller queued before the call is in the copy.
2. The collective runs on the host copy: same codecs, same wire format and the
   same error contract as for CPU arrays. A GPU rank and a CPU rank can therefore
   be in one communicator.
3. ``write_back`` / ``new_array``: the result is copied onto the array's device on
   the framework's current stream (a synchronous copy from pageable memory), into
   the caller's array (in-place collectives, ``out=``) or into a new array of the
   input's framework on the input's device.

Host copies live in page-locked (pinned) memory from the framework's own caching
pool (``torch.empty(..., pin_memory=True)``, ``cupyx.empty_pinned``), so both copies
run at the bus's speed and the pool reuses its blocks from call to call;
``NCCLZ_STAGING=pageable`` uses ordinary memory instead (an A/B switch for the
benchmarks). The call is synchronous, as every ncclz call is. Results are identical to the
CPU path's and to the device path's.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

DL_CUDA = 2  # DLPack's kDLCUDA
DL_CUDA_MANAGED = 13


def _torch() -> Any:
    return sys.modules.get("torch")


def _pinned() -> bool:
    """Whether host copies go to page-locked memory (NCCLZ_STAGING: pinned, the default, or pageable)."""
    mode = os.environ.get("NCCLZ_STAGING", "pinned").strip().lower() or "pinned"
    if mode not in ("pinned", "pageable"):
        raise InvalidArgumentError(f"NCCLZ_STAGING must be pinned or pageable, got {mode!r}")
    return mode == "pinned"


def _framework(x: Any) -> str:
    mod = type(x).__module__ or ""
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith(("jax", "jaxlib")):
        return "jax"
    return "other"


class DeviceArray:
    """Where a staged array lives and how to move data between it and the host.

    user: the caller's device array (None for an output ncclz allocates).
    framework: "torch" | "cupy" | "jax".
    index: the CUDA device ordinal.
    writable: whether collectives may write the result back into ``user``.
    """

    __slots__ = ("framework", "index", "like", "user", "writable")

    def __init__(self, user: Any, framework: str, index: int, writable: bool, like: Any = None):
        self.user, self.framework, self.index, self.writable = user, framework, index, writable
        self.like = like if like is not None else user  # an array on the device (JAX places by it)

    @property
    def name(self) -> str:
        return f"cuda:{self.index}"

    @property
    def jax_device(self) -> Any:
        """The jax.Device of a JAX array's stage (where its results go)."""
        return next(iter(self.like.devices()))

    def same_device(self, other: DeviceArray | None) -> bool:
        return other is not None and other.index == self.index

    # ---- device -> host ---------------------------------------------------
    def to_host(self) -> Any:
        """A host copy of ``user``: a CPU torch tensor for PyTorch, else a NumPy array."""
        x = self.user
        if self.framework == "torch":
            host = self.host_empty(tuple(x.shape), x.dtype)
            host.copy_(x.detach())  # queued on the current stream, then waited for
            return host
        if self.framework == "cupy":
            return x.get(out=self.host_empty(x.shape, x.dtype))  # the current stream, then waited for
        return np.asarray(x)  # JAX: waits for the value

    def host_empty(self, shape: tuple, dtype: Any) -> Any:
        """An uninitialised host array for an output whose old contents are not read."""
        if self.framework == "torch":
            return _torch().empty(shape, dtype=dtype, device="cpu", pin_memory=_pinned())
        if self.framework == "cupy" and _pinned():
            import cupyx

            return cupyx.empty_pinned(shape, dtype=dtype)
        return np.empty(shape, dtype=dtype)

    # ---- host -> device ---------------------------------------------------
    def write_back(self, host: Any) -> None:
        """Copies the host result into ``user`` (same element count)."""
        x = self.user
        if self.framework == "torch":
            x.detach().view(-1).copy_(host.reshape(-1))
        elif self.framework == "cupy":
            x.reshape(-1).set(np.ascontiguousarray(host).reshape(-1))
        else:  # pragma: no cover - JAX arrays are immutable: never writable
            raise InvalidArgumentError("internal: write-back into an immutable array")

    def new_array(self, host: Any) -> Any:
        """A new array of the framework on this device holding ``host``."""
        if self.framework == "torch":
            return host.to(f"cuda:{self.index}")
        if self.framework == "cupy":
            import cupy

            with cupy.cuda.Device(self.index):
                return cupy.asarray(host)
        import jax

        return jax.device_put(host, self.jax_device)

    def for_output(self) -> DeviceArray:
        """The stage of a new output on this device (no user array yet)."""
        return DeviceArray(None, self.framework, self.index, True, like=self.like)


def caller_streams(args: Any) -> list:
    """For a call queued now and run later on another thread (ncclz/_async.py): context-manager
    factories that make the caller's current stream of each GPU array's device current there again
    (PyTorch's, CuPy's), so that the call's staging copies are ordered after the work the caller
    queued before the call. Empty for host arrays and JAX (whose values are waited for)."""
    found, seen = [], set()
    for x in args:
        for a in x if isinstance(x, (list, tuple)) else (x,):
            try:
                st = stage_of(a, "array")
            except InvalidArgumentError:
                continue  # the call itself reports it
            if st is None or (st.framework, st.index) in seen:
                continue
            seen.add((st.framework, st.index))
            if st.framework == "torch":
                torch = _torch()
                stream = torch.cuda.current_stream(st.index)
                found.append(lambda s=stream: _torch().cuda.stream(s))
            elif st.framework == "cupy":
                import cupy

                with cupy.cuda.Device(st.index):
                    stream = cupy.cuda.get_current_stream()

                def use(s=stream, index=st.index):
                    stack = contextlib.ExitStack()
                    stack.enter_context(cupy.cuda.Device(index))
                    stack.enter_context(s)
                    return stack

                found.append(use)
    return found


def _refuse_managed(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is in CUDA managed memory; ncclz takes device or host arrays")


def stage_of(x: Any, what: str) -> DeviceArray | None:
    """The DeviceArray of a CUDA array, None for host arrays (and for objects that are no arrays).

    Checks what must be checked before anything is copied: contiguity (a
    non-contiguous device array is refused, as on the host).
    """
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cuda":
            return None
        if not x.is_contiguous():
            raise InvalidArgumentError(
                f"{what} is a non-contiguous CUDA tensor; make it contiguous first (tensor.contiguous())"
            )
        return DeviceArray(x, "torch", int(x.device.index or 0), True)
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return None
    try:
        dev_type, dev_id = dev()
    except Exception:  # noqa: BLE001 - a broken producer: treated as a host array
        return None
    dev_type = int(dev_type)
    if dev_type == DL_CUDA_MANAGED:
        raise _refuse_managed(what)
    if dev_type != DL_CUDA:
        return None
    fw = _framework(x)
    if fw == "cupy":
        if not x.flags.c_contiguous:
            raise InvalidArgumentError(
                f"{what} is a non-contiguous CuPy array; make it contiguous first (cupy.ascontiguousarray(x))"
            )
        return DeviceArray(x, "cupy", int(dev_id), True)
    if fw == "jax":
        return DeviceArray(x, "jax", int(dev_id), False)  # immutable: results are new arrays
    # Another CUDA producer: through PyTorch (or CuPy) by DLPack, zero-copy.
    try:
        if torch is None:
            try:
                import torch
            except ImportError:
                torch = None
        if torch is not None:
            imported = torch.from_dlpack(x)
        else:
            try:
                import cupy
            except ImportError:
                raise InvalidArgumentError(
                    f"{what} is a CUDA array of {type(x).__name__}; ncclz imports foreign CUDA arrays through "
                    "PyTorch or CuPy, and neither is installed"
                ) from None
            imported = cupy.from_dlpack(x)
    except InvalidArgumentError:
        raise
    except Exception as e:  # the producer's or the importer's failure, whatever its type
        raise InvalidArgumentError(
            f"{what}: could not import this CUDA array ({type(x).__name__}) through DLPack: {e}"
        ) from e
    return stage_of(imported, what)
