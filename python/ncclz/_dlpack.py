"""Array checks and conversions shared by the collectives and the codec.

Every public entry point that takes user arrays runs them through :func:`as_buffer`,
which returns a :class:`Buffer`: the object to hand to the native layer, its
canonical dtype name, shape, framework and writability. Nothing here copies
data except where a function says so (read-only inputs that need an output,
frameworks whose arrays are immutable).

Supported: CPU arrays from NumPy (including ``ml_dtypes.bfloat16``), PyTorch
(``requires_grad`` tensors are detached) and anything else exporting CPU DLPack
or ``__array__`` (JAX, CuPy-on-host, ...); CUDA arrays from PyTorch, CuPy and JAX
as they are (the device path: :func:`direct_buffer`, the Buffer's ``device``), or
staged through host memory (``_device.py``: the Buffer's ``stage``), as are other
CUDA DLPack producers. Non-contiguous arrays and other devices (ROCm, ...) are
refused with an :class:`ncclz.InvalidArgumentError` that says what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._device import DeviceArray, stage_of
from .errors import InvalidArgumentError

#: Canonical dtype names, in the order the docs list them.
SUPPORTED_DTYPES = (
    "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2",
)
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
#: The 8-bit floats (exact modes only): they reach the native layer as uint8 views (``as_dtype``).
FLOAT8_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})
#: The dtypes NumPy knows only through ml_dtypes, and the plain NumPy type the native layer receives
#: views of them as (with ``Buffer.as_dtype`` naming them); torch hands bfloat16 over by DLPack as it
#: is, and views only the 8-bit floats (``_TORCH_VIEWS``).
_NUMPY_VIEWS = {"bfloat16": np.dtype(np.uint16), "float8_e4m3fn": np.dtype(np.uint8), "float8_e5m2": np.dtype(np.uint8)}
_TORCH_VIEWS = FLOAT8_DTYPES
ITEMSIZE = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1, "int8": 1,
    "uint32": 4, "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

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
    framework: "numpy" | "torch" | "cupy" | "jax" | "other" (of ``native``: a staged CUDA array's
        host copy is NumPy or torch; on the device path, the CUDA array's own framework).
    writable: whether collectives may write into it (never the caller's JAX array; a JAX array
        ncclz made for a result is: :class:`JaxOutput`).
    stage: None for host arrays; for a GPU array the :class:`DeviceArray` whose host copy
        ``native`` is (:func:`finish` and :func:`to_user` copy results back to the device).
    device: for a GPU array the native layer takes as it is (the device path: ``as_buffer``'s
        ``direct``), its :class:`DeviceArray`; ``native`` is then the array on the device.
    """

    __slots__ = ("device", "dtype", "framework", "native", "shape", "size", "stage", "user", "writable")

    def __init__(
        self,
        native: Any,
        user: Any,
        dtype: str,
        shape: tuple,
        size: int,
        framework: str,
        writable: bool,
        stage: DeviceArray | None = None,
        device: DeviceArray | None = None,
    ):
        self.native, self.user, self.dtype, self.shape = native, user, dtype, shape
        self.size, self.framework, self.writable, self.stage = size, framework, writable, stage
        self.device = device

    @property
    def gpu(self) -> DeviceArray | None:
        """The DeviceArray of a GPU array, staged or direct; None for host arrays."""
        return self.stage if self.stage is not None else self.device

    def replace(self, **changes: Any) -> Buffer:
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        return Buffer(**fields)

    def __repr__(self) -> str:
        return f"Buffer({describe(self)}, writable={self.writable})"

    @property
    def immutable(self) -> bool:
        """Whether the caller's array can never be written (JAX, on the host or a GPU, staged or
        not): results go to new arrays, and an array passed to be written is only a template."""
        return (self.gpu.framework if self.gpu is not None else self.framework) == "jax"

    @property
    def as_dtype(self) -> str:
        """The native call's dtype override: "bfloat16" where ``native`` holds bfloat16 as a uint16
        view (NumPy); "" where its DLPack dtype says what it is (torch, JAX arrays on the device path)."""
        if self.dtype in _TORCH_VIEWS:
            return self.dtype  # a uint8 view, in every framework
        if self.dtype not in _NUMPY_VIEWS or self.framework == "torch":
            return ""
        return "" if self.device is not None and self.framework == "jax" else self.dtype

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


def _ml_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a canonical name (ml_dtypes' for the ones plain NumPy lacks)."""
    if name in _NUMPY_VIEWS:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _numpy_dtypes() -> dict:
    table = {np.dtype(n): n for n in SUPPORTED_DTYPES if n not in _NUMPY_VIEWS}
    try:
        table.update({_ml_dtype(n): n for n in _NUMPY_VIEWS})
    except ImportError:
        pass
    return table


_NUMPY_DTYPES = _numpy_dtypes()  # dtype -> canonical name (a dict lookup per call)


def _numpy_dtype_name(dt: np.dtype) -> str | None:
    return _NUMPY_DTYPES.get(dt)


def plain_numpy_dtype(dt: np.dtype) -> str | None:
    """The canonical name of a native-endian NumPy dtype that the native layer takes as it is (not
    bfloat16, which travels as a uint16 view); None otherwise."""
    name = _NUMPY_DTYPES.get(dt)
    return None if name in _NUMPY_VIEWS else name


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
        f"{what} is on device {device}; ncclz takes host (CPU) and CUDA arrays: copy it to one of those first"
    )


def _not_contiguous(what: str, how: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is not contiguous; make it contiguous first ({how})")


def _numpy_native(arr: np.ndarray, name: str) -> np.ndarray:
    """What the native layer receives for a NumPy array of dtype `name`: it, or its plain view."""
    view = _NUMPY_VIEWS.get(name)
    return arr if view is None else arr.view(view)


def _torch_native(t: Any, name: str) -> Any:
    """What the native layer receives for a torch tensor of dtype `name`: it, or its uint8 view."""
    return t.view(_torch().uint8) if name in _TORCH_VIEWS else t


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
    return Buffer(
        native=_numpy_native(arr, name),
        user=user,
        dtype=name,
        shape=tuple(arr.shape),
        size=int(arr.size),
        framework=framework,
        writable=bool(arr.flags.writeable) and framework == "numpy",
    )


def as_buffer(x: Any, what: str = "input", load: bool = True, direct: bool = False) -> Buffer:
    """Checks ``x`` (device, dtype, contiguity) and returns a :class:`Buffer`.

    A CUDA array is staged: the Buffer holds a host copy (``load=False``: an
    uninitialised host array of its dtype and shape, for outputs whose old
    contents the collective never reads). ``direct``: a CUDA PyTorch tensor, CuPy
    array or JAX array goes to the native layer as it is (the device path, after the
    caller's current stream, or the JAX array's value, is waited for:
    :func:`direct_buffer`). Raises
    InvalidArgumentError for other devices, unsupported dtypes and
    non-contiguous arrays; TypeError for objects that are not arrays.
    """
    if isinstance(x, Buffer):
        return x
    if isinstance(x, np.ndarray):
        return _numpy_buffer(x, x, what, "numpy")
    stage = stage_of(x, what)
    if stage is not None and direct:
        return direct_buffer(x, stage, what)
    if stage is not None:
        host = stage.to_host() if load else stage.host_empty(tuple(x.shape), _host_dtype(stage, x))
        b = as_buffer(host, what)
        return b.replace(user=x, stage=stage, writable=stage.writable)
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
            native=_torch_native(t, name),
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


def direct_buffer(x: Any, stage: DeviceArray, what: str) -> Buffer:
    """A Buffer whose native array is the CUDA array x itself (PyTorch, CuPy or JAX): the native
    layer codes it on the device. The work queued on the caller's current stream is waited for
    first (ncclz's own streams then read it), so the call sees everything queued before it. JAX
    exposes no stream to order after: its array's value is waited for (``block_until_ready``), and
    the array is only read (its Buffer is not writable: results go to new arrays, :func:`empty`)."""
    if stage.framework == "jax":
        name = _numpy_dtype_name(np.dtype(x.dtype))  # bfloat16 is ml_dtypes' (as in NumPy)
        if name is None:
            raise _unsupported_dtype(what, x.dtype)
        x.block_until_ready()
        return Buffer(native=x, user=x, dtype=name, shape=tuple(x.shape), size=int(x.size), framework="jax",
                      writable=False, device=stage)
    if stage.framework == "torch":
        t = x.detach() if x.requires_grad else x
        name = _torch_dtype_name(t.dtype)
        if name is None:
            raise _unsupported_dtype(what, t.dtype)
        _torch().cuda.current_stream(stage.index).synchronize()
        return Buffer(native=_torch_native(t, name), user=x, dtype=name, shape=tuple(t.shape), size=int(t.numel()),
                      framework="torch", writable=True, device=stage)
    import cupy

    name = _numpy_dtype_name(np.dtype(x.dtype))
    if name is None:
        raise _unsupported_dtype(what, x.dtype)
    with cupy.cuda.Device(stage.index):
        cupy.cuda.get_current_stream().synchronize()
    return Buffer(native=x, user=x, dtype=name, shape=tuple(x.shape), size=int(x.size), framework="cupy",
                  writable=True, device=stage)


def _host_dtype(stage: DeviceArray, x: Any) -> Any:
    """The host dtype matching a device array's (torch dtypes stay torch's; CuPy's and JAX's are NumPy's)."""
    if stage.framework == "torch":
        return x.dtype
    return np.dtype(x.dtype)


def empty(like: Buffer, shape: Sequence[int]) -> Buffer:
    """A new, writable, contiguous array of like's dtype and framework (NumPy for
    frameworks we do not allocate in: the result is converted by :func:`to_user`).
    For a staged ``like`` the array is a host array whose result :func:`to_user`
    puts on like's device."""
    shape = tuple(int(s) for s in shape)
    if like.device is not None:
        return _device_empty(like, shape)
    if like.stage is not None:
        host = like.replace(stage=None)
        return empty(host, shape).replace(stage=like.stage.for_output())
    if like.framework == "torch":
        torch = _torch()
        t = torch.empty(shape, dtype=getattr(torch, like.dtype), device="cpu")
        return Buffer(
            native=_torch_native(t, like.dtype),
            user=t,
            dtype=like.dtype,
            shape=shape,
            size=int(t.numel()),
            framework="torch",
            writable=True,
        )
    arr = np.empty(shape, dtype=_ml_dtype(like.dtype))
    b = _numpy_buffer(arr, arr, "output", "numpy")
    return b.replace(framework=like.framework if like.framework in ("jax",) else "numpy")


class JaxOutput:
    """A JAX array that ncclz made for a call's result, as the native layer takes it: writable.

    JAX arrays are immutable, and JAX hands its DLPack buffers out without promising anything
    about writes into them. Writing into this one is safe because ncclz made it in this call
    (:func:`_device_empty`, :func:`writable_copy`) and nothing else holds it yet: no other
    array, view or cached host value shares its buffer, no JAX work on it is pending (its
    making was waited for), and the runtime's work on it is complete when the call returns
    (each device call synchronises its own streams), before the caller gets the array. The
    caller's own JAX arrays are never written.

    ``__dlpack__`` asks JAX for an unversioned capsule whatever the importer asks (nanobind asks
    a writable import for DLPack 1.0): a versioned one may carry a read-only flag, which the
    writable import would refuse.
    """

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __dlpack__(self, **_kwargs: Any) -> Any:
        return self.array.__dlpack__()

    def __dlpack_device__(self) -> tuple:
        return self.array.__dlpack_device__()


def _jax_output(arr: Any, like: Buffer, shape: tuple) -> Buffer:
    arr.block_until_ready()  # nothing of JAX's may still write it when the runtime does
    return Buffer(native=JaxOutput(arr), user=arr, dtype=like.dtype, shape=shape, size=_size(shape),
                  framework="jax", writable=True, device=like.device.for_output())


def writable_copy(b: Buffer) -> Buffer:
    """A new writable array holding b's values, for a collective in place (broadcast) of a
    read-only array: a JAX array on the device path gets a JAX copy on its device (a device
    copy, JAX's own), others a new array of b's kind (:func:`empty`) filled by :func:`copy_into`."""
    if b.device is not None and b.framework == "jax":
        import jax.numpy as jnp

        return _jax_output(jnp.array(b.user, copy=True), b, b.shape)
    o = empty(b, b.shape)
    copy_into(o, b)
    return o


def _device_empty(like: Buffer, shape: tuple) -> Buffer:
    """A new array of like's dtype and framework on like's device (the device path's outputs; for
    JAX, on the device of like's JAX array: uninitialised where JAX can make it so)."""
    index = like.device.index
    if like.framework == "jax":
        import jax.numpy as jnp

        return _jax_output(jnp.empty(shape, dtype=like.user.dtype, device=like.device.jax_device), like, shape)
    if like.framework == "torch":
        t = _torch().empty(shape, dtype=like.native.dtype, device=f"cuda:{index}")
        arr = t
    else:
        import cupy

        with cupy.cuda.Device(index):
            arr = cupy.empty(shape, dtype=like.native.dtype)
    return Buffer(native=arr, user=arr, dtype=like.dtype, shape=shape, size=_size(shape), framework=like.framework,
                  writable=True, device=like.device.for_output())


def _size(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


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


def to_numpy(b: Buffer, max_bytes: int | None = None) -> np.ndarray:
    """A NumPy view of the buffer (bfloat16 as ml_dtypes.bfloat16); a host copy of a GPU array
    the native layer takes as it is, of its first elements (flat) up to `max_bytes` where given
    (what the compression policy samples: not the whole array on every call)."""
    if b.device is not None:
        x = b.user if b.framework == "jax" else b.native  # a JaxOutput's array
        if max_bytes is not None and b.nbytes > max_bytes:
            x = x.reshape(-1)[: max(1, max_bytes // ITEMSIZE[b.dtype])]  # a view, contiguous
        return to_numpy(as_buffer(DeviceArray(x, b.framework, b.device.index, False).to_host(), "array"))
    arr = _as_numpy(b)
    if b.dtype in _NUMPY_VIEWS:
        arr = arr.view(_ml_dtype(b.dtype))
    return arr.reshape(b.shape)


def finish(b: Buffer) -> None:
    """After the native call wrote ``b``: a staged caller's array gets the result (host to device)."""
    if b.stage is not None and b.stage.user is not None:
        b.stage.write_back(b.native)


def to_user(b: Buffer) -> Any:
    """The object to return to the caller for an output buffer we allocated."""
    if b.device is not None:
        return b.user  # already on the device, in the input's framework
    if b.stage is not None:
        host = b.native if b.framework == "torch" else to_numpy(b)
        return b.stage.new_array(host)
    if b.framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(to_numpy(b))
    return b.user


def check_output(out: Any, like: Buffer, shape: Sequence[int], what: str, load: bool = False) -> Buffer:
    """Checks a caller-provided output: writable, contiguous, like's dtype and device, shape's size.
    ``load``: whether the collective reads the output's old contents (a staged output is then
    copied to the host first)."""
    b = as_buffer(out, what, load=load, direct=like.device is not None)
    if (b.gpu is None) != (like.gpu is None) or (b.gpu is not None and not b.gpu.same_device(like.gpu)) or (
        (b.device is None) != (like.device is None)
    ):
        raise InvalidArgumentError(
            f"{what} is on {device_name(b)} but the input is on {device_name(like)}; pass an output on the "
            "input's device"
        )
    if not b.writable:
        if b.immutable:
            raise InvalidArgumentError(
                f"{what} is a JAX array, which is immutable; leave out= away (the call returns a new array)"
            )
        raise InvalidArgumentError(f"{what} is read-only; pass a writable array")
    if b.dtype != like.dtype:
        raise InvalidArgumentError(f"{what} has dtype {b.dtype}, expected {like.dtype} (the input's dtype)")
    want = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if b.size != want:
        raise InvalidArgumentError(
            f"{what} has {b.size} elements (shape {b.shape}), expected shape {tuple(shape)}"
        )
    return b


def device_name(b: Buffer) -> str:
    """'cpu' or 'cuda:N'."""
    return "cpu" if b.gpu is None else b.gpu.name


def describe(b: Buffer) -> str:
    """Short description for error messages: 'float32[1024] (numpy)', 'float32[8] (torch, cuda:0)'."""
    if b.gpu is not None:
        return f"{b.dtype}{list(b.shape)} ({b.gpu.framework}, {b.gpu.name})"
    return f"{b.dtype}{list(b.shape)} ({b.framework})"
