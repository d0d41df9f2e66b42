"""Compress and decompress whole arrays with ncclz's codec (the same slice coders the
collectives use on the wire).

>>> import numpy as np, ncclz
>>> x = np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32)
>>> blob = ncclz.codec.compress(x, ncclz.Lossy(abs=1e-3))
>>> y = ncclz.codec.decompress(blob)
>>> bool(np.abs(y - x).max() <= 1e-3)
True

The blob layout is documented in docs/FORMAT.md, "Container (blob)".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._dlpack import (
    FLOAT8_DTYPES,
    _ml_dtype,
    _numpy_dtype_name,
    _numpy_native,
    _torch_dtype_name,
    _torch_native,
)
from .errors import InvalidArgumentError
from .spec import Lossless, Lossy

__all__ = ["CODECS", "PREDICTORS", "SUPPORTED_DTYPES", "compress", "decompress", "inspect"]

#: Codec names accepted by ``compress(codec=...)`` (None or "auto": the selector chooses per slice).
CODECS = {"auto": 0, "raw": 1, "block": 2, "rans": 3, "floatexp": 4, "sparse": 5, "floathuff": 6}
#: Predictor names accepted by ``compress(predictor=...)`` (None or "auto": the selector chooses).
PREDICTORS = {"auto": -1, "none": 0, "delta1": 1, "delta2": 2, "lorenzo2d": 3, "lorenzo3d": 4}
#: Layouts accepted by ``compress(layout=...)`` (None or "auto": classic, interp tried on smooth data).
LAYOUTS = {"auto": -1, "classic": 0, "interp": 1}
#: Element types the codec carries (lossy mode: the first four; int8, uint32, uint64 and the 8-bit
#: floats as the bit patterns of a type of their size, lossless only).
SUPPORTED_DTYPES = (
    "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2",
)
#: The blob's dtype byte of each (docs/FORMAT.md, "Container (blob)"): what the binding is told an
#: unsigned view of an array holds.
_ARRAY_TYPES = {
    "int32": 1, "int64": 2, "float32": 3, "float64": 4, "float16": 5, "bfloat16": 6, "uint8": 7, "int8": 8,
    "uint32": 9, "uint64": 10, "float8_e4m3fn": 11, "float8_e5m2": 12,
}
_NUMPY_DTYPES = {name: _ml_dtype(name) for name in SUPPORTED_DTYPES}
_KDLCPU = 1


def _lookup(table: dict[str, int], value: str | None, what: str) -> int:
    if value is None:
        return table["auto"]
    if not isinstance(value, str) or value.lower() not in table:
        names = ", ".join(repr(k) for k in table)
        raise InvalidArgumentError(f"unknown {what} {value!r}; choose one of None, {names}")
    return table[value.lower()]


def _host_array(x: Any):
    """Returns (array for the binding, the blob dtype of the unsigned view it is, or 0: its own)."""
    if getattr(x, "requires_grad", False) and hasattr(x, "detach"):
        x = x.detach()  # torch refuses to export tensors that require grad
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        device = getattr(x, "__dlpack_device__", None)
        if device is not None and int(device()[0]) != _KDLCPU:
            raise InvalidArgumentError(
                "GPU arrays are not yet supported by ncclz.codec; copy to the host first "
                "(e.g. x.cpu(), cupy.asnumpy(x) or np.asarray(x))"
            )
        if getattr(x, "is_conj", None) is not None and x.is_conj():
            x = x.resolve_conj()
        name = _torch_dtype_name(x.dtype) if type(x).__module__.startswith("torch") else None
        if name in FLOAT8_DTYPES:  # (DLPack does not carry torch's 8-bit floats)
            return _torch_native(x, name), _ARRAY_TYPES[name]
        return x, 0
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    name = _numpy_dtype_name(arr.dtype)
    if name is None:
        raise InvalidArgumentError(f"unsupported dtype {arr.dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
    view = _numpy_native(arr, name)
    return view, (_ARRAY_TYPES[name] if view is not arr else 0)


def compress(
    x: Any, spec, codec: str | None = None, *, predictor: str | None = None, layout: str | None = None,
    rans_margin: float | None = None,
) -> np.ndarray:
    """Compresses an array into a self-describing blob (a NumPy uint8 array).

    Args:
        x: a C-contiguous CPU array: NumPy, PyTorch, JAX, anything with ``__dlpack__``, or
            anything ``np.asarray`` accepts. dtype float32, float64, float16, bfloat16
            (``ml_dtypes.bfloat16`` or ``torch.bfloat16``), or, lossless only, int32, int64,
            uint8, int8, uint32, uint64, float8_e4m3fn or float8_e5m2 (``ml_dtypes`` or torch's;
            the last five travel as the bit patterns of a type of their size).
        spec: ``ncclz.Lossy(abs=E)``, ``ncclz.Lossy(rel=r)`` or ``ncclz.Lossless()``.
        codec: None or ``"auto"`` (the selector picks per slice), or force one of ``"raw"``,
            ``"block"``, ``"rans"`` (integer codes or data), ``"sparse"`` (integer codes or
            data, or the bit patterns of lossless floats: mostly-zero data), ``"floatexp"``
            (lossless float32/float16/bfloat16 only), ``"floathuff"`` (the same and the
            8-bit types' bytes, coded as the device codec codes them: parallel Huffman
            sub-streams, docs/FORMAT.md).
        predictor: None/``"auto"``, or force ``"none"``, ``"delta1"``, ``"delta2"``,
            ``"lorenzo2d"`` (>= 2-D) or ``"lorenzo3d"`` (>= 3-D) for the integer coders.
        layout: lossy mode only. None/``"auto"``: the classic layout (slices of codes on the
            2E grid), plus, for smooth data, a trial of the ``"interp"`` layout (multilevel
            interpolation over the whole array on a finer grid, docs/FORMAT.md), keeping the
            smaller blob. ``"classic"`` never tries interp (fastest encode); ``"interp"`` always
            uses it (predictor then must be None, ``"none"``, ``"delta1"`` or ``"delta2"``).
        rans_margin: None (the selector's default, 0.15), or a number in [0, 1]: the selector
            picks the rANS coder only where its estimate is smaller than the fast coders' (Block,
            Raw) by more than this fraction; 1 never picks it (Sparse still may). Higher is
            faster with a lower ratio (the trade the collectives' policy makes on fast links).

    Raises:
        ncclz.InvalidArgumentError: bad spec, dtype, device, layout or codec choice.
    """
    if isinstance(spec, Lossy):
        lossy, abs_bound, rel_bound = True, spec.abs or 0.0, spec.rel or 0.0
    elif isinstance(spec, Lossless):
        lossy, abs_bound, rel_bound = False, 0.0, 0.0
    else:
        raise InvalidArgumentError(
            f"spec must be ncclz.Lossy(abs=...), ncclz.Lossy(rel=...) or ncclz.Lossless(), got {spec!r}"
        )
    codec_id = _lookup(CODECS, codec, "codec")
    predictor_id = _lookup(PREDICTORS, predictor, "predictor")
    interp = _lookup(LAYOUTS, layout, "layout")
    if interp > 0 and not lossy:
        raise InvalidArgumentError("layout='interp' applies to lossy compression only")
    if rans_margin is None:
        margin = -1.0
    else:
        try:
            margin = float(rans_margin)
        except (TypeError, ValueError):
            margin = float("nan")
        if not 0.0 <= margin <= 1.0:
            raise InvalidArgumentError(f"rans_margin must be None or a number in [0, 1], got {rans_margin!r}")
    arr, as_type = _host_array(x)
    try:
        return _core.codec_compress(arr, lossy, abs_bound, rel_bound, codec_id, predictor_id, as_type, interp, margin)
    except TypeError as e:  # nanobind could not import the array at all
        raise InvalidArgumentError(
            f"cannot read the input as a CPU array ({type(x).__name__}): {e}; "
            f"supported dtypes: {', '.join(SUPPORTED_DTYPES)}"
        ) from None


def _blob_bytes(blob: Any) -> np.ndarray:
    if isinstance(blob, (bytes, bytearray, memoryview)):
        return np.frombuffer(blob, dtype=np.uint8)
    arr = np.asarray(blob)
    if arr.dtype != np.uint8:
        raise InvalidArgumentError(f"a blob is a uint8 array or bytes, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr.reshape(-1))


def decompress(blob: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Decompresses a blob from :func:`compress` into a NumPy array of the original shape and
    dtype (bfloat16 as ``ml_dtypes.bfloat16``).

    Without ``out`` the result is a new array. Its memory may be that of a large array this
    function returned before and Python has since freed (a small pool keeps the last two
    such blocks of 1 MiB or more, up to 1 GiB, and lets the kernel reclaim them under memory
    pressure): touching fresh memory costs a page fault per page, as much as decoding itself,
    and with the pool a loop of ``decompress(blob)`` runs as fast as one into a reused ``out``.

    With ``out`` (a writable, C-contiguous NumPy array of the blob's shape and dtype) the
    values are written there and ``out`` is returned.

    Raises:
        ncclz.CorruptDataError: the blob is truncated, changed (its CRC-32C does not match: any
            change of up to 3 bits is caught) or of an unknown format version.
        ncclz.InvalidArgumentError: ``out`` has the wrong shape, dtype or layout.
    """
    b = _blob_bytes(blob)
    if out is None:
        data, name, shape = _core.codec_decompress(b)
        return data.view(_NUMPY_DTYPES[name]).reshape(shape)
    name, shape = _core.codec_array(b)  # the fixed header only: decompress_into checks the rest
    want_dtype, want_shape = _NUMPY_DTYPES[name], tuple(shape)
    if not isinstance(out, np.ndarray):
        raise InvalidArgumentError(f"out must be a NumPy array, got {type(out).__name__}")
    if out.dtype != want_dtype or tuple(out.shape) != want_shape:
        _core.codec_inspect(b)  # a damaged header is CorruptDataError, not the caller's mistake
        raise InvalidArgumentError(
            f"out is {out.dtype}{list(out.shape)} but the blob holds {want_dtype}{list(want_shape)}"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InvalidArgumentError("out must be writable and C-contiguous (e.g. np.empty(shape, dtype))")
    _core.codec_decompress_into(b, out.reshape(-1).view(np.uint8))
    return out


def inspect(blob: Any) -> dict[str, Any]:
    """Describes a blob without decoding it (its checksum and headers are checked).

    Keys: ``version`` (format version: 2, or 1 for blobs of ncclz before checksums), ``checksum``
    (``"crc32c"``, None for version 1), ``mode`` (``"lossy"``/``"lossless"``), ``dtype``,
    ``code_dtype`` (what the slices carry: the dtype, or int32/int64 codes), ``shape``,
    ``bound_kind`` (``"abs"``, ``"rel"`` or None) and ``bound`` (the bound as requested: E for
    abs, r for rel; 0 lossless), ``error_bound`` (E, what every finite element is guaranteed
    within: the abs bound, or r * (max - min) resolved for rel; 0 lossless; None for version-1
    rel blobs, which did not store it), ``grid_half_step`` (half the quantization grid's step,
    E less at most E/8 so that rounding to the dtype never crosses E; 0 lossless),
    ``elements``, ``slice_elements``, ``slices``, ``raw_bytes``, ``compressed_bytes``, ``ratio``,
    ``outliers``, ``outlier_bytes``, ``layout`` (``"classic"``/``"interp"``), ``grid_factor``, and
    under ``"codecs"`` slices and bytes per codec (``"block+delta1"``, ...).

    Raises:
        ncclz.CorruptDataError: the blob is truncated, corrupt or of an unknown format version.
    """
    return _core.codec_inspect(_blob_bytes(blob))
