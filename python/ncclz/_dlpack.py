"""Array checks and conversions shared by the collectives and the codec.

Every public entry point that takes user arrays runs them through :func:`as_buffer`,
which returns a :class:`Buffer`: the object to hand to the native layer, its
canonical dtype name, shape, framework and writability. Nothing here copies
data except where a function says so (read-only inputs that need an output,
frameworks whose arrays are immutable).

Supported: CPU arrays from NumPy (including ``ml_dtypes.bfloat16``), PyTorch
(``requires_grad`` tensors are detached) and anything else exporting CPU DLPack
or ``__array__`` (JAX, CuPy-on-host, ...). GPU arrays and non-contiguous
arrays are refused with an :class:`ncclz.InvalidArgumentError` that says what
to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

#: Canonical dtype names, in the order the docs list them.
SUPPORTED_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}

# DLPack device types that are ordinary host memory.
_DL_CPU = 1
_DL_CUDA_HOST = 3
_DL_DEVICE_NAMES = {
    2: "cuda",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    13: "cuda_managed",
    14: "oneapi",
}


class Buffer:
    """A checked CPU array (a plain slotted class: it is made on every call).

    native: the object the native layer receives (NumPy array or torch tensor;
        a ``uint16`` view for NumPy bfloat16, see ``as_dtype``).
    user: the caller's original object.
    dtype: canonical dtype name; shape, size: of the array.
    framework: "numpy" | "torch" | "jax" | "other".
    writable: whether collectives may write into it (never for borrowed JAX memory).
    """

    __slots__ = ("dtype", "framework", "native", "shape", "size", "user", "writable")

    def __init__(
        self, native: Any, user: Any, dtype: str, shape: tuple, size: int, framework: str, writable: bool
    ):
        self.native, self.user, self.dtype, self.shape = native, user, dtype, shape
        self.size, self.framework, self.writable = size, framework, writable

    def replace(self, **changes: Any) -> Buffer:
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        return Buffer(**fields)

    def __repr__(self) -> str:
        return f"Buffer({describe(self)}, writable={self.writable})"

    @property
    def as_dtype(self) -> str:
        return "bfloat16" if self.dtype == "bfloat16" and self.framework != "torch" else ""

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


def _torch():
    import sys

    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _framework_of(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return "numpy"
    if _is_torch(x):
        return "torch"
    mod = type(x).__module__ or ""
    if mod.startswith(("jax", "jaxlib")):
        return "jax"
    return "other"


def _numpy_dtypes() -> dict:
    table = {np.dtype(n): n for n in SUPPORTED_DTYPES if n != "bfloat16"}
    try:
        import ml_dtypes

        table[np.dtype(ml_dtypes.bfloat16)] = "bfloat16"
    except ImportError:
        pass
    return table


_NUMPY_DTYPES = _numpy_dtypes()  # dtype -> canonical name (a dict lookup per call)


def _numpy_dtype_name(dt: np.dtype) -> str | None:
    return _NUMPY_DTYPES.get(dt)


_TORCH_DTYPES: dict = {}


def _torch_dtype_name(dt: Any) -> str | None:
    try:
        return _TORCH_DTYPES[dt]
    except KeyError:
        name = str(dt).replace("torch.", "")
        _TORCH_DTYPES[dt] = name = name if name in SUPPORTED_DTYPES else None
        return name


def _unsupported_dtype(what: str, got: Any) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} has dtype {got}; supported dtypes: {', '.join(SUPPORTED_DTYPES)}")


def _device_error(what: str, device: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{what} is on device {device}; the Python API takes CPU arrays only for now (the GPU path is "
        "not implemented yet): copy it to the host first (tensor.cpu(), cupy.asnumpy(x), np.asarray(x))"
    )


def _not_contiguous(what: str, how: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is not contiguous; make it contiguous first ({how})")


def _numpy_buffer(arr: np.ndarray, user: Any, what: str, framework: str) -> Buffer:
    name = _numpy_dtype_name(arr.dtype)
    if name is None:
        raise _unsupported_dtype(what, arr.dtype)
    if arr.dtype.byteorder == ">":
        raise InvalidArgumentError(
            f"{what} is big-endian ({arr.dtype}); convert it with x.astype(x.dtype.newbyteorder('='))"
        )
    if not arr.flags.c_contiguous:
        raise _not_contiguous(what, "numpy.ascontiguousarray(x)")
    native = arr.view(np.uint16) if name == "bfloat16" else arr
    return Buffer(
        native=native,
        user=user,
        dtype=name,
        shape=tuple(arr.shape),
        size=int(arr.size),
        framework=framework,
        writable=bool(arr.flags.writeable) and framework == "numpy",
    )


def as_buffer(x: Any, what: str = "input") -> Buffer:
    """Checks ``x`` (device, dtype, contiguity) and returns a :class:`Buffer`.

    Raises InvalidArgumentError for GPU arrays, unsupported dtypes and
    non-contiguous arrays; TypeError for objects that are not arrays.
    """
    if isinstance(x, Buffer):
        return x
    if isinstance(x, np.ndarray):
        return _numpy_buffer(x, x, what, "numpy")
    if _is_torch(x):
        t = x
        if t.device.type != "cpu":
            raise _device_error(what, str(t.device))
        if t.requires_grad:
            t = t.detach()
        name = _torch_dtype_name(t.dtype)  # complex (and so conj views) are refused here
        if name is None:
            raise _unsupported_dtype(what, t.dtype)
        if not t.is_contiguous():
            raise _not_contiguous(what, "tensor.contiguous()")
        return Buffer(
            native=t,
            user=x,
            dtype=name,
            shape=tuple(t.shape),
            size=int(t.numel()),
            framework="torch",
            writable=True,
        )
    framework = _framework_of(x)
    # Other producers: refuse device arrays before touching their memory.
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            dev_type, dev_id = dev()
        except Exception:  # noqa: BLE001 - a broken producer: fall through to __array__
            dev_type, dev_id = _DL_CPU, 0
        dev_type = int(dev_type)
        if dev_type not in (_DL_CPU, _DL_CUDA_HOST):
            raise _device_error(what, f"{_DL_DEVICE_NAMES.get(dev_type, dev_type)}:{dev_id}")
    arr = None
    if hasattr(x, "__array__"):
        arr = np.asarray(x)  # zero-copy for JAX/CPU; keeps ml_dtypes bfloat16
    elif hasattr(x, "__dlpack__"):
        try:
            arr = np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError) as e:
            raise InvalidArgumentError(f"{what}: could not import it through DLPack: {e}") from e
    if arr is None:
        raise TypeError(
            f"{what} must be an array (NumPy, PyTorch, JAX, or any CPU DLPack producer), "
            f"got {type(x).__name__}"
        )
    buf = _numpy_buffer(arr, x, what, framework)
    if framework != "numpy":
        # Never write into memory we only borrowed from an immutable framework (JAX).
        buf = buf.replace(writable=False)
    return buf


def empty(like: Buffer, shape: Sequence[int]) -> Buffer:
    """A new, writable, contiguous array of like's dtype and framework (NumPy for
    frameworks we do not allocate in: the result is converted by :func:`to_user`)."""
    shape = tuple(int(s) for s in shape)
    if like.framework == "torch":
        torch = _torch()
        t = torch.empty(shape, dtype=like.native.dtype, device="cpu")
        return Buffer(
            native=t,
            user=t,
            dtype=like.dtype,
            shape=shape,
            size=int(t.numel()),
            framework="torch",
            writable=True,
        )
    if like.dtype == "bfloat16":
        import ml_dtypes

        arr = np.empty(shape, dtype=ml_dtypes.bfloat16)
    else:
        arr = np.empty(shape, dtype=like.dtype)
    b = _numpy_buffer(arr, arr, "output", "numpy")
    return b.replace(framework=like.framework if like.framework in ("jax",) else "numpy")


def copy_into(dst: Buffer, src: Buffer) -> None:
    """dst[...] = src (same dtype and size; shapes may differ)."""
    if dst.framework == "torch" and src.framework == "torch":
        dst.native.view(-1).copy_(src.native.reshape(-1))
        return
    np.copyto(_as_numpy(dst).reshape(-1), _as_numpy(src).reshape(-1))


def _as_numpy(b: Buffer) -> np.ndarray:
    if b.framework == "torch":
        t = b.native
        if b.dtype == "bfloat16":
            torch = _torch()
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    return b.native


def to_numpy(b: Buffer) -> np.ndarray:
    """A NumPy view of the buffer (bfloat16 as ml_dtypes.bfloat16)."""
    arr = _as_numpy(b)
    if b.dtype == "bfloat16":
        import ml_dtypes

        arr = arr.view(ml_dtypes.bfloat16)
    return arr.reshape(b.shape)


def to_user(b: Buffer) -> Any:
    """The object to return to the caller for an output buffer we allocated."""
    if b.framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(to_numpy(b))
    return b.user


def check_output(out: Any, like: Buffer, shape: Sequence[int], what: str) -> Buffer:
    """Checks a caller-provided output: writable, contiguous, like's dtype, shape's size."""
    b = as_buffer(out, what)
    if not b.writable:
        raise InvalidArgumentError(f"{what} is read-only; pass a writable array")
    if b.dtype != like.dtype:
        raise InvalidArgumentError(f"{what} has dtype {b.dtype}, expected {like.dtype} (the input's dtype)")
    want = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if b.size != want:
        raise InvalidArgumentError(
            f"{what} has {b.size} elements (shape {b.shape}), expected shape {tuple(shape)}"
        )
    return b


def describe(b: Buffer) -> str:
    """Short description for error messages: 'float32[1024] (numpy)'."""
    return f"{b.dtype}{list(b.shape)} ({b.framework})"
