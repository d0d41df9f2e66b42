"""ncclz.codec: compress / decompress / inspect, and the Lossy / Lossless specs.

Properties checked (docs/FORMAT.md, "Container (blob)"):
- Lossless is bit-exact (NaN payloads, -0.0) for every dtype and shape.
- Lossy(abs=E): every finite element within E; Lossy(rel=r): within r * (max - min);
  non-finite elements bit-exact.
- Bad input raises ncclz.InvalidArgumentError, corrupt blobs ncclz.CorruptDataError; every
  single-bit flip of a blob (every codec, layout, mode and dtype) is an error, never other values.
- inspect() reports the bound as requested, E and the grid's half step by name.
"""

import dataclasses
import math

import ml_dtypes
import ncclz
import numpy as np
import pytest
from ncclz import codec

try:
    import torch
except ImportError:  # the torch tests skip; everything else runs
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
INT_DTYPES = [np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)]
F8 = [np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)]
#: NCCL's other types: lossless only, as the bit patterns of a type of their size (the blob names them)
OTHER_DTYPES = [np.dtype(np.int8), np.dtype(np.uint32), np.dtype(np.uint64), *F8]
CARRIER = {"int8": "uint8", "uint32": "int32", "uint64": "int64", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}
SHAPES = [(), (0,), (1,), (7,), (1001,), (3, 5, 7), (0, 4), (33, 65), (9, 10, 11, 3), (300_001,)]


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of an array (compares NaN payloads and -0.0)."""
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def make(dtype, shape, rng, specials=True):
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.float64)
    v = 10 * np.sin(i * 0.003) + np.cos(i * 0.05) + rng.normal(0, 0.01, n)
    if dtype in F8:
        x = v.astype(dtype)
        if specials and n > 8:
            bits(x)[1] = 0x7F  # NaN (both types)
            x[5] = -0.0
        return x.reshape(shape)
    if dtype.kind == "f" or dtype == BF16:
        x = v.astype(dtype)
        if specials and n > 8:
            u = bits(x)
            width = dtype.itemsize * 8
            if dtype == np.float32:
                u[1] = 0x7FC00123  # NaN with payload
                u[2] = 0xFF800001  # signalling NaN, negative
            elif dtype == np.float64:
                u[1] = 0x7FF8000000ABCDEF
            elif dtype == np.float16:
                u[1] = 0x7E01
            else:
                u[1] = 0xFFC1
            x[3] = np.inf
            x[4] = -np.inf
            x[5] = -0.0
            assert width in (16, 32, 64)
        return x.reshape(shape)
    if dtype == np.uint8:
        return (v * 10).astype(np.int64).astype(np.uint8).reshape(shape)
    x = (v * 1000).astype(dtype)
    if n > 2:
        x[0] = np.iinfo(dtype).min
        x[1] = np.iinfo(dtype).max
    return x.reshape(shape)


def assert_within(x: np.ndarray, y: np.ndarray, eb: float):
    assert y.dtype == x.dtype and y.shape == x.shape
    with np.errstate(invalid="ignore"):  # signalling NaNs
        xf = x.astype(np.float64)
        yf = y.astype(np.float64)
    finite = np.isfinite(xf)
    # every finite element within the bound (exact in float64 for these types)
    err = np.abs(xf[finite] - yf[finite])
    assert err.size == 0 or err.max() <= eb, f"max error {err.max()} > {eb}"
    # non-finite elements bit-exact
    assert np.array_equal(bits(x)[~finite], bits(y)[~finite])


# ---- specs ------------------------------------------------------------------


def test_specs_validate_and_repr():
    assert repr(ncclz.Lossy(abs=1e-3)) == "Lossy(abs=0.001)"
    assert repr(ncclz.Lossy(rel=0.5)) == "Lossy(rel=0.5)"
    assert repr(ncclz.Lossless()) == "Lossless()"
    assert ncclz.Lossy(abs=1) == ncclz.Lossy(abs=1.0)
    assert ncclz.Lossy(abs=np.float32(0.5)).abs == 0.5
    bads = [{}, {"abs": 1, "rel": 1}, {"abs": 0}, {"abs": -1}, {"rel": math.inf}, {"abs": math.nan}]
    for bad in [*bads, {"abs": "1"}, {"abs": True}]:
        with pytest.raises(ncclz.InvalidArgumentError):
            ncclz.Lossy(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ncclz.Lossy(abs=1).abs = 2


# ---- round trips ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES + OTHER_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_lossless_bit_exact(dtype, shape, rng):
    x = make(dtype, shape, rng)
    blob = codec.compress(x, ncclz.Lossless())
    assert isinstance(blob, np.ndarray) and blob.dtype == np.uint8 and blob.ndim == 1
    y = codec.decompress(blob)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(bits(x), bits(y))
    info = codec.inspect(blob)
    assert info["mode"] == "lossless" and info["version"] == 2 and info["checksum"] == "crc32c"
    assert info["bound"] == info["error_bound"] == info["grid_half_step"] == 0 and info["bound_kind"] is None
    assert info["dtype"] == ("bfloat16" if dtype == BF16 else str(dtype))
    assert info["code_dtype"] == CARRIER.get(info["dtype"], info["dtype"])
    assert info["shape"] == shape
    assert info["compressed_bytes"] == blob.size
    assert info["raw_bytes"] == x.nbytes


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("eb", [1e-1, 1e-3])
def test_lossy_abs_bound_on_every_element(dtype, shape, eb, rng):
    x = make(dtype, shape, rng)
    blob = codec.compress(x, ncclz.Lossy(abs=eb))
    y = codec.decompress(blob)
    assert_within(x, y, eb)
    info = codec.inspect(blob)
    assert info["mode"] == "lossy" and info["bound_kind"] == "abs" and info["bound"] == eb
    # E is the bound asked for; the grid's half step is E less at most 1/8 of it (docs/FORMAT.md, lossy mode)
    assert info["error_bound"] == eb
    assert 0.875 * eb <= info["grid_half_step"] <= eb


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("r", [1e-2, 1e-4])
def test_lossy_rel_bound(dtype, r, rng):
    x = make(dtype, (50, 80), rng)
    with np.errstate(invalid="ignore"):
        xf = x.astype(np.float64)
    fin = xf[np.isfinite(xf)]
    eb = r * (fin.max() - fin.min())
    blob = codec.compress(x, ncclz.Lossy(rel=r))
    info = codec.inspect(blob)
    assert info["bound_kind"] == "rel" and info["bound"] == r
    # E = r * (max - min), resolved by compress() and stored: what a user measures against
    assert info["error_bound"] == pytest.approx(eb, rel=1e-12)
    assert 0.875 * eb * (1 - 1e-12) <= info["grid_half_step"] <= info["error_bound"]
    assert_within(x, codec.decompress(blob), eb * (1 + 1e-12))


def test_lossy_rel_constant_array_is_exact():
    for c in [0.0, 3.25, -7e-20, 1e30]:
        x = np.full((10, 10), c, dtype=np.float32)
        y = codec.decompress(codec.compress(x, ncclz.Lossy(rel=1e-3)))
        assert np.array_equal(x, y)


def test_lossy_compresses_smooth_data(rng):
    z, yy, xx = np.meshgrid(np.arange(48), np.arange(64), np.arange(80), indexing="ij")
    x = (np.sin(xx * 0.1) * np.cos(yy * 0.07) + 0.01 * z).astype(np.float32)
    blob = codec.compress(x, ncclz.Lossy(rel=1e-3))
    assert codec.inspect(blob)["ratio"] > 4
    assert_within(x, codec.decompress(blob), codec.inspect(blob)["error_bound"])


def smooth_field(shape, dtype=np.float32):
    """Low-frequency sinusoids along every axis (like bench/data.py smooth3d, smaller)."""
    grids = np.meshgrid(*[np.arange(n) / n for n in shape], indexing="ij")
    rng = np.random.default_rng(3)
    v = 0
    for _ in range(4):  # plane waves mixing the axes (a sum of 1-D functions would suit Lorenzo)
        w = rng.integers(-2, 3, len(shape))
        v = v + rng.uniform(0.5, 1.5) * np.sin(2 * np.pi * sum(wi * g for wi, g in zip(w, grids)) + rng.uniform(0, 6))
    v = v + 2 * np.exp(-sum((g - 0.5) ** 2 for g in grids) / 0.08)
    return np.asarray(v).astype(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(24, 40, 48), (70, 90), (20_000,), (5, 6, 7, 8, 9)], ids=str)
def test_smooth_fields_bound_and_interp_gain(dtype, shape):
    x = smooth_field(shape, dtype)
    x.reshape(-1)[[3, 500, 4000]] = [np.nan, np.inf, -np.inf]  # carried exactly
    xf = x.astype(np.float64)
    span = np.nanmax(xf[np.isfinite(xf)]) - np.nanmin(xf[np.isfinite(xf)])
    for r in (1e-2, 1e-3, 1e-4):
        blob = codec.compress(x, ncclz.Lossy(rel=r))
        assert_within(x, codec.decompress(blob), r * span)
        if dtype == np.float32 and r == 1e-3 and shape in [(70, 90), (20_000,)]:
            # the interp layout: far smaller than the classic one (a forced codec keeps that)
            classic = codec.compress(x, ncclz.Lossy(rel=r), codec="rans")
            assert blob.size * 1.5 < classic.size, (blob.size, classic.size)


def test_layout_option_and_inspect():
    x = smooth_field((70, 90))
    auto = codec.compress(x, ncclz.Lossy(rel=1e-3))
    classic = codec.compress(x, ncclz.Lossy(rel=1e-3), layout="classic")
    forced = codec.compress(x, ncclz.Lossy(rel=1e-3), layout="interp")
    assert codec.inspect(auto)["layout"] == "interp" and codec.inspect(auto)["grid_factor"] > 1
    assert codec.inspect(classic)["layout"] == "classic" and codec.inspect(classic)["grid_factor"] == 1
    assert codec.inspect(forced)["layout"] == "interp"
    assert auto.size * 1.5 < classic.size
    for b in (auto, classic, forced):
        assert_within(x, codec.decompress(b), 1e-3 * float(x.max() - x.min()))
    # Gaussian noise: the auto layout stays classic, the forced one is interp and still in bound
    g = np.random.default_rng(5).normal(size=(64, 64)).astype(np.float32)
    assert codec.inspect(codec.compress(g, ncclz.Lossy(abs=1e-2)))["layout"] == "classic"
    gi = codec.compress(g, ncclz.Lossy(abs=1e-2), layout="interp")
    assert codec.inspect(gi)["layout"] == "interp"
    assert_within(g, codec.decompress(gi), 1e-2)
    with pytest.raises(ncclz.InvalidArgumentError, match="lossy"):
        codec.compress(x, ncclz.Lossless(), layout="interp")
    with pytest.raises(ncclz.InvalidArgumentError, match="layout"):
        codec.compress(x, ncclz.Lossy(rel=1e-3), layout="zigzag")
    with pytest.raises(ncclz.InvalidArgumentError, match="predictor"):
        codec.compress(x, ncclz.Lossy(rel=1e-3), layout="interp", predictor="lorenzo2d")


def test_interp_blob_corruption(rng):
    x = smooth_field((70, 90))
    blob = codec.compress(x, ncclz.Lossy(rel=1e-3))
    assert blob.size * 1.5 < codec.compress(x, ncclz.Lossy(rel=1e-3), codec="rans").size  # interp layout
    for n in range(blob.size):
        with pytest.raises(ncclz.CorruptDataError):
            codec.decompress(blob[:n])
    for _ in range(2000):
        b = blob.copy()
        for _ in range(int(rng.integers(1, 4))):
            b[rng.integers(b.size)] ^= np.uint8(1 << int(rng.integers(8)))
        try:
            y = codec.decompress(b)
            assert y.size == x.size
        except ncclz.CorruptDataError:
            pass


def test_huge_values_and_outliers():
    x = np.array([1e12, -3e12, 0.5, 1e20, -1e300, 42.0, np.nan], dtype=np.float64)
    blob = codec.compress(x, ncclz.Lossy(abs=1e-3))
    info = codec.inspect(blob)
    assert info["code_dtype"] == "int64"
    assert info["outliers"] == 3  # 1e20 and -1e300 (codes past the limit), NaN
    assert_within(x, codec.decompress(blob), 1e-3)
    f = np.array([3.4e38, -3.4e38, 1.0, 0.0], dtype=np.float32)
    assert_within(f, codec.decompress(codec.compress(f, ncclz.Lossy(abs=1e30))), 1e30)


# ---- forced codecs ----------------------------------------------------------------


def test_sparse_data_takes_the_sparse_codec(rng):
    """1% nonzero values (sparse gradients): the selector picks Sparse on every slice, smaller than
    Rans forced; inspect() names it; round trip within the bound."""
    g = rng.normal(0, 1e-3, 1 << 20).astype(np.float32)
    x = np.where(rng.random(g.size) < 0.01, g, np.float32(0))
    auto = codec.compress(x, ncclz.Lossy(rel=1e-3))
    rans = codec.compress(x, ncclz.Lossy(rel=1e-3), codec="rans")
    info = codec.inspect(auto)
    assert list(info["codecs"]) == ["sparse"] and info["codecs"]["sparse"]["slices"] == info["slices"]
    assert auto.size < 0.95 * rans.size  # measured 0.85
    assert_within(x, codec.decompress(auto), 1e-3 * float(x.max() - x.min()))


@pytest.mark.parametrize("name", [None, "auto", "raw", "block", "rans", "sparse"])
@pytest.mark.parametrize("predictor", [None, "none", "delta1", "delta2", "lorenzo2d", "lorenzo3d"])
def test_forced_codecs_lossy(name, predictor, rng):
    if predictor not in (None, "none") and name == "raw":
        pytest.skip("raw takes no predictor (tested below)")
    x = make(np.dtype(np.float32), (20, 30, 40), rng, specials=False)
    blob = codec.compress(x, ncclz.Lossy(abs=1e-3), codec=name, predictor=predictor)
    assert_within(x, codec.decompress(blob), 1e-3)
    used = codec.inspect(blob)["codecs"]
    for key in used:
        c, _, p = key.partition("+")
        if name not in (None, "auto"):
            assert c in (name, "raw")
        if predictor not in (None, "none") and c != "raw":
            assert p == predictor


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("name", ["floatexp", "floathuff", "raw"])
def test_forced_lossless_float_codecs(dtype, name, rng):
    x = make(dtype, (1000,), rng)
    y = codec.decompress(codec.compress(x, ncclz.Lossless(), codec=name))
    assert np.array_equal(bits(x), bits(y))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
def test_floathuff_codes_gaussian_floats(dtype, rng):
    # FloatHuff (the device's lossless float layout) only when forced: its slices
    # carry it, decode bit-exact, and cost at most 3% more than FloatExp's.
    x = rng.normal(0, 1e-3, 200_000).astype(np.float32).astype(dtype)
    huff = codec.compress(x, ncclz.Lossless(), codec="floathuff")
    exp = codec.compress(x, ncclz.Lossless(), codec="floatexp")
    auto = codec.compress(x, ncclz.Lossless())
    assert set(codec.inspect(huff)["codecs"]) == {"floathuff"}
    assert "floathuff" not in codec.inspect(auto)["codecs"]
    assert np.array_equal(bits(x), bits(codec.decompress(huff)))
    assert len(exp) < len(huff) < 1.03 * len(exp)


@pytest.mark.parametrize("name", ["block", "rans", "sparse"])
@pytest.mark.parametrize("predictor", ["none", "delta1", "delta2", "lorenzo2d"])
def test_forced_lossless_int_codecs(name, predictor, rng):
    x = make(np.dtype(np.int64), (40, 50), rng)
    y = codec.decompress(codec.compress(x, ncclz.Lossless(), codec=name, predictor=predictor))
    assert np.array_equal(x, y)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("keep", [0.0, 0.002, 0.05])
@pytest.mark.parametrize("signed_zeros", [False, True])
def test_lossless_mostly_zero_floats_bit_exact(dtype, keep, signed_zeros, rng):
    # Mostly-zero floats (sparse gradients): the Sparse coder over their bit
    # patterns; every pattern comes back (-0.0, NaN payloads, infinities,
    # subnormals included), at a small fraction of the raw bytes. Zeros of
    # random sign (g * mask) cost a sign bit per value.
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    n = 200_003
    pat = rng.integers(1, np.iinfo(bits).max, size=n, dtype=bits, endpoint=True)
    pat[:6] = [np.iinfo(bits).max, 1 << (8 * dt.itemsize - 1), 1, (1 << (8 * dt.itemsize - 1)) | 1, 2, 3]
    mask = rng.random(n) < keep
    mask[:6] = keep > 0
    zero = np.where(rng.random(n) < 0.5, bits(1) << bits(8 * dt.itemsize - 1), bits(0)) if signed_zeros else 0
    x = np.where(mask, pat, zero).astype(bits).view(dt)
    for name in ["auto", "sparse"]:
        blob = codec.compress(x, ncclz.Lossless(), codec=name)
        y = codec.decompress(blob)
        assert y.dtype == dt and y.shape == x.shape
        assert np.array_equal(x.view(bits), np.asarray(y).view(bits))
        raw = x.nbytes
        nz = int(mask.sum())
        plane = n // 8 if signed_zeros else 0
        assert len(blob) < 2048 + plane + nz * (dt.itemsize + 3), (name, len(blob), nz)
        assert len(blob) * (2.5 if signed_zeros else 5) < raw


def test_codec_that_cannot_carry_the_data():
    x = np.ones(10, np.float32)
    with pytest.raises(ncclz.InvalidArgumentError, match="floatexp"):
        codec.compress(x, ncclz.Lossy(abs=1e-3), codec="floatexp")
    with pytest.raises(ncclz.InvalidArgumentError, match="floatexp"):
        codec.compress(x.astype(np.float64), ncclz.Lossless(), codec="floatexp")
    with pytest.raises(ncclz.InvalidArgumentError, match="floathuff"):
        codec.compress(x.astype(np.float64), ncclz.Lossless(), codec="floathuff")
    with pytest.raises(ncclz.InvalidArgumentError, match="block"):
        codec.compress(x, ncclz.Lossless(), codec="block")
    with pytest.raises(ncclz.InvalidArgumentError, match="rans"):
        codec.compress(x, ncclz.Lossless(), codec="rans")
    with pytest.raises(ncclz.InvalidArgumentError, match="block"):
        codec.compress(x.astype(np.uint8), ncclz.Lossless(), codec="block")
    b = x.astype(np.uint8)  # bytes: rans over the bytes themselves
    assert np.array_equal(codec.decompress(codec.compress(b, ncclz.Lossless(), codec="rans")), b)
    with pytest.raises(ncclz.InvalidArgumentError, match="sparse"):
        codec.compress(x.astype(np.uint8), ncclz.Lossless(), codec="sparse")
    with pytest.raises(ncclz.InvalidArgumentError, match="lorenzo2d"):
        codec.compress(x, ncclz.Lossy(abs=1e-3), predictor="lorenzo2d")
    with pytest.raises(ncclz.InvalidArgumentError, match="lorenzo3d"):
        codec.compress(x.reshape(2, 5), ncclz.Lossy(abs=1e-3), predictor="lorenzo3d")
    with pytest.raises(ncclz.InvalidArgumentError, match="integer codes"):
        codec.compress(x, ncclz.Lossless(), predictor="delta1")
    with pytest.raises(ncclz.InvalidArgumentError):
        codec.compress(x, ncclz.Lossy(abs=1e-3), codec="raw", predictor="delta1")
    with pytest.raises(ncclz.InvalidArgumentError, match="unknown codec"):
        codec.compress(x, ncclz.Lossless(), codec="zstd")
    with pytest.raises(ncclz.InvalidArgumentError, match="unknown predictor"):
        codec.compress(x, ncclz.Lossless(), predictor="lorenzo4d")


# ---- inputs from other frameworks ---------------------------------------------------


@needs_torch
@pytest.mark.parametrize("tname", ["float32", "float64", "float16", "bfloat16"])
def test_torch_tensors(tname):
    tdtype = getattr(torch, tname)
    g = torch.Generator().manual_seed(0)
    t = torch.randn(17, 33, generator=g).to(tdtype)
    y = codec.decompress(codec.compress(t, ncclz.Lossy(abs=1e-2)))
    assert y.shape == (17, 33)
    expect = BF16 if tdtype == torch.bfloat16 else np.dtype(str(tdtype).replace("torch.", ""))
    assert y.dtype == expect
    ref = t.double().numpy()
    assert np.abs(y.astype(np.float64) - ref).max() <= 1e-2
    z = codec.decompress(codec.compress(t, ncclz.Lossless()))
    assert np.array_equal(
        bits(z),
        t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
        .numpy()
        .view(bits(z).dtype),
    )


@needs_torch
def test_torch_requires_grad_and_ints():
    t = torch.randn(100, requires_grad=True)
    y = codec.decompress(codec.compress(t, ncclz.Lossy(rel=1e-3)))
    assert y.shape == (100,)
    ti = torch.arange(-50, 50, dtype=torch.int32)
    assert np.array_equal(codec.decompress(codec.compress(ti, ncclz.Lossless())), ti.numpy())


@needs_torch
def test_torch_non_contiguous():
    t = torch.randn(8, 8).t()
    with pytest.raises(ncclz.InvalidArgumentError, match="contiguous"):
        codec.compress(t, ncclz.Lossless())
    codec.compress(t.contiguous(), ncclz.Lossless())


def test_numpy_like_inputs():
    y = codec.decompress(codec.compress([[1.5, 2.5], [3.5, 4.5]], ncclz.Lossless()))
    assert y.dtype == np.float64 and y.tolist() == [[1.5, 2.5], [3.5, 4.5]]
    y = codec.decompress(codec.compress(np.float32(2.5), ncclz.Lossless()))
    assert y.shape == () and y.dtype == np.float32 and float(y) == 2.5
    x = np.arange(10, dtype=">f4")  # big-endian: converted
    assert np.array_equal(codec.decompress(codec.compress(x, ncclz.Lossless())), x)
    ro = np.arange(10, dtype=np.float32)
    ro.setflags(write=False)
    assert np.array_equal(codec.decompress(codec.compress(ro, ncclz.Lossless())), ro)
    blob = codec.compress(ro, ncclz.Lossless())
    assert np.array_equal(codec.decompress(bytes(blob)), ro)  # blobs as bytes


@pytest.mark.parametrize("dtype", OTHER_DTYPES, ids=str)
def test_nccls_other_types_lossless_only(dtype, rng):
    """int8, uint32, uint64 and the 8-bit floats: lossless, as the bit patterns of a type of their size
    (NumPy, and torch's own tensors, whose 8-bit floats DLPack does not carry), into out= too; lossy
    refused, naming the type."""
    x = make(dtype, (40, 50), rng)
    blob = codec.compress(x, ncclz.Lossless())
    assert codec.decompress(blob).dtype == dtype
    out = np.empty_like(x)
    assert codec.decompress(blob, out=out) is out and np.array_equal(bits(out), bits(x))
    with pytest.raises(ncclz.InvalidArgumentError, match=f"not {dtype}; use Lossless"):
        codec.compress(x, ncclz.Lossy(abs=1.0))
    with pytest.raises(ncclz.InvalidArgumentError, match="float32, float16 and bfloat16"):
        codec.compress(x, ncclz.Lossless(), codec="floatexp")
    if dtype.itemsize > 1:
        assert codec.inspect(blob)["ratio"] > 2  # the integer coders
    else:  # Rans over the bytes: skewed bytes compress (8-bit floats of Gaussian values: few exponents)
        g = rng.normal(0, 1, 100_000)
        skewed = g.astype(dtype) if dtype in F8 else np.round(g * 6).astype(dtype)
        info = codec.inspect(codec.compress(skewed, ncclz.Lossless()))
        assert info["ratio"] > 1.2 and "rans" in info["codecs"], info
        # FloatHuff over the bytes (what ranks write where a device rank codes): close to Rans.
        huff = codec.compress(skewed, ncclz.Lossless(), codec="floathuff")
        hinfo = codec.inspect(huff)
        assert set(hinfo["codecs"]) == {"floathuff"} and hinfo["ratio"] > 0.9 * info["ratio"], hinfo
        assert np.array_equal(bits(codec.decompress(huff)), bits(skewed))
        noise = rng.integers(0, 256, 100_000).astype(np.uint8).view(dtype)
        assert codec.inspect(codec.compress(noise, ncclz.Lossless()))["ratio"] < 1
    if torch is not None:
        t = torch.from_numpy(x.view(np.uint8)).view(getattr(torch, str(dtype)))
        y = codec.decompress(codec.compress(t, ncclz.Lossless()))
        assert y.dtype == dtype and np.array_equal(bits(y), bits(x)), "torch"


# ---- bad input ---------------------------------------------------------------------------


def test_bad_inputs():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises(ncclz.InvalidArgumentError, match="np.ascontiguousarray"):
        codec.compress(x[:, ::2], ncclz.Lossless())
    with pytest.raises(ncclz.InvalidArgumentError, match="int16.*supported"):
        codec.compress(x.astype(np.int16), ncclz.Lossless())
    with pytest.raises(ncclz.InvalidArgumentError, match="complex"):
        codec.compress(x.astype(np.complex64), ncclz.Lossless())
    if torch is not None:
        with pytest.raises(ncclz.InvalidArgumentError, match="int16"):
            codec.compress(torch.zeros(3, dtype=torch.int16), ncclz.Lossless())
    with pytest.raises(ncclz.InvalidArgumentError, match="lossy mode needs"):
        codec.compress(x.astype(np.int32), ncclz.Lossy(abs=1))
    with pytest.raises(ncclz.InvalidArgumentError, match="spec"):
        codec.compress(x, None)
    with pytest.raises(ncclz.InvalidArgumentError, match="spec"):
        codec.compress(x, 1e-3)


def test_gpu_arrays_are_refused():
    class FakeCuda:  # looks like a CUDA DLPack producer
        def __dlpack__(self, **kw):
            raise AssertionError("must not be exported")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ncclz.InvalidArgumentError, match="GPU"):
        codec.compress(FakeCuda(), ncclz.Lossless())


# ---- corrupt blobs ----------------------------------------------------------------------------


def test_corrupt_blobs(rng):
    x = make(np.dtype(np.float32), (6, 11), rng)
    for spec in [ncclz.Lossless(), ncclz.Lossy(abs=1e-2)]:
        blob = codec.compress(x, spec)
        for n in range(blob.size):
            with pytest.raises(ncclz.CorruptDataError):
                codec.decompress(blob[:n])
        with pytest.raises(ncclz.CorruptDataError):
            codec.inspect(blob[:-1])
        with pytest.raises(ncclz.CorruptDataError):
            codec.decompress(np.concatenate([blob, np.zeros(1, np.uint8)]))
        for _ in range(2000):  # one flipped bit: always caught (the CRC-32C trailer)
            b = blob.copy()
            i = rng.integers(b.size)
            b[i] ^= np.uint8(1 << int(rng.integers(8)))
            with pytest.raises(ncclz.CorruptDataError):
                codec.decompress(b)
    with pytest.raises(ncclz.CorruptDataError, match="magic"):
        codec.decompress(np.zeros(100, np.uint8))
    with pytest.raises(ncclz.InvalidArgumentError):
        codec.decompress(np.zeros(10, np.float32))


def small_blobs():
    """Small blobs of every codec, layout and mode (lossy abs and rel, lossless), every dtype."""
    rng = np.random.default_rng(5)
    options = [
        (ncclz.Lossless(), {}),
        *[(ncclz.Lossless(), {"codec": c}) for c in ("raw", "block", "rans", "sparse", "floatexp")],
        (ncclz.Lossy(abs=1e-2), {}),
        (ncclz.Lossy(rel=1e-3), {"codec": "rans", "predictor": "delta1"}),
        (ncclz.Lossy(rel=1e-2), {"layout": "interp"}),
        (ncclz.Lossy(abs=1e-1), {"codec": "block", "predictor": "lorenzo2d"}),
        (ncclz.Lossy(abs=1e-1), {"codec": "raw"}),
    ]
    blobs = []
    for dtype in FLOAT_DTYPES + INT_DTYPES + OTHER_DTYPES:
        x = make(dtype, (6, 20), rng)
        for spec, kw in options:
            try:
                blobs.append(codec.compress(x, spec, **kw))
            except ncclz.InvalidArgumentError:  # a codec that does not carry this dtype
                pass
    sparse = np.zeros(120, np.float32)
    sparse[[3, 50, 99]] = [1.5, -2.0, 7.25]
    blobs.append(codec.compress(sparse, ncclz.Lossless(), codec="sparse"))
    return blobs


def test_every_single_bit_flip_is_an_error():
    """No single flipped bit of any blob decodes to other values (before checksums 69-96% did)."""
    blobs = small_blobs()
    infos = [codec.inspect(b) for b in blobs]
    assert {i["dtype"] for i in infos} == set(codec.SUPPORTED_DTYPES)
    assert {i["layout"] for i in infos} == {"classic", "interp"}
    assert {i["bound_kind"] for i in infos} == {None, "abs", "rel"}
    assert {k.split("+")[0] for i in infos for k in i["codecs"]} == {"raw", "block", "rans", "sparse", "floatexp"}
    flips, silent = 0, []
    for k, blob in enumerate(blobs):
        b = blob.copy()
        for bit in range(b.size * 8):
            b[bit // 8] ^= np.uint8(1 << (bit % 8))
            for f in (codec.decompress, codec.inspect):
                try:
                    f(b)
                    silent.append((k, bit, f.__name__))
                except ncclz.CorruptDataError:
                    pass
            b[bit // 8] ^= np.uint8(1 << (bit % 8))
            flips += 1
    assert not silent, f"{len(silent)} flips not caught, e.g. (blob, bit, call) {silent[:5]}"
    assert flips > 100_000
    # Into an output of the right dtype and shape: also an error, whatever the flip hit (the shape too).
    for blob in blobs[::7]:
        out = codec.decompress(blob)
        b = blob.copy()
        for bit in range(b.size * 8):
            b[bit // 8] ^= np.uint8(1 << (bit % 8))
            try:
                codec.decompress(b, out=out)
                silent.append((bit, "out="))
            except ncclz.CorruptDataError:
                pass
            b[bit // 8] ^= np.uint8(1 << (bit % 8))
    assert not silent, silent[:5]


def test_checksum_error_says_what():
    blob = codec.compress(np.arange(100, dtype=np.float32), ncclz.Lossy(abs=0.5))
    blob[70] ^= 4
    with pytest.raises(ncclz.CorruptDataError, match="checksum mismatch .*changed after compress"):
        codec.decompress(blob)


def test_fresh_outputs_never_share_memory_with_live_arrays(rng):
    """decompress(blob) reuses the memory of freed outputs (a pool), never of live ones."""
    x = rng.normal(size=(512, 1024)).astype(np.float32)  # 2 MiB: pooled
    blob = codec.compress(x, ncclz.Lossy(abs=1e-3))
    ref = codec.decompress(blob)
    live = [codec.decompress(blob) for _ in range(4)]
    for a in live:
        assert a.flags.owndata is False and a.flags.writeable and a.flags.c_contiguous
        assert np.array_equal(a, ref)
    for i, a in enumerate(live):
        for b in live[i + 1 :]:
            assert not np.shares_memory(a, b)
    for _ in range(6):  # freed and reused: still right, and independent of the arrays alive
        del live[0]
        y = codec.decompress(blob)
        assert np.array_equal(y, ref)
        for a in live:
            assert not np.shares_memory(a, y)
        y[:] = -1.0
        for a in live:
            assert np.array_equal(a, ref)
        live.append(y)
        live[-1] = codec.decompress(blob)
    # Every dtype and odd sizes through the same path (small ones are not pooled).
    for dtype in FLOAT_DTYPES + INT_DTYPES:
        for shape in [(), (0,), (3,), (700, 1000)]:
            z = make(dtype, shape, rng)
            w = codec.decompress(codec.compress(z, ncclz.Lossless()))
            assert w.dtype == z.dtype and w.shape == z.shape and np.array_equal(bits(w), bits(z))


def test_decompress_into_preallocated_output(rng):
    x = rng.normal(size=(37, 129)).astype(np.float32)
    blob = ncclz.codec.compress(x, ncclz.Lossy(abs=1e-3))
    out = np.full_like(x, np.nan)
    y = ncclz.codec.decompress(blob, out=out)
    assert y is out
    np.testing.assert_array_equal(out, ncclz.codec.decompress(blob))
    assert np.abs(out.astype(np.float64) - x).max() <= 1e-3
    with pytest.raises(ncclz.InvalidArgumentError, match="holds"):
        ncclz.codec.decompress(blob, out=np.empty((37, 128), np.float32))
    with pytest.raises(ncclz.InvalidArgumentError, match="holds"):
        ncclz.codec.decompress(blob, out=np.empty((37, 129), np.float64))
    with pytest.raises(ncclz.InvalidArgumentError, match="C-contiguous"):
        ncclz.codec.decompress(blob, out=np.empty((129, 37), np.float32).T)


@pytest.mark.parametrize("seed", [0, 1])
def test_codec_demo_keeps_every_promise(seed, capsys):
    from ncclz.tools import codec_demo

    assert codec_demo.main(["--elements", str(1 << 16), "--seed", str(seed)]) == 0
    assert "broke" not in capsys.readouterr().out


def test_rans_margin_trades_ratio_for_speed():
    # a smooth field: the default selector takes rANS for most slices; margin 1 never does (Sparse,
    # Block, Raw only), and the blob still decodes within the bound; bad margins are argument errors
    y, x = np.meshgrid(np.linspace(0, 1, 512), np.linspace(0, 1, 2048), indexing="ij")
    f = (np.sin(9 * x + 4 * y) + np.cos(7 * y - 3 * x)).astype(np.float32).reshape(-1)
    spec = ncclz.Lossy(abs=1e-3)
    default = codec.compress(f, spec, layout="classic")
    fast = codec.compress(f, spec, layout="classic", rans_margin=1.0)
    assert any(k.startswith("rans") for k in codec.inspect(default)["codecs"]), codec.inspect(default)
    assert not any(k.startswith("rans") for k in codec.inspect(fast)["codecs"]), codec.inspect(fast)
    assert fast.nbytes > default.nbytes
    assert np.abs(codec.decompress(fast).astype(np.float64) - f).max() <= 1e-3
    zero = codec.compress(f, spec, layout="classic", rans_margin=0.0)  # the smallest estimate wins
    assert zero.nbytes <= default.nbytes * 1.01
    for bad in (-0.1, 1.5, float("nan"), "x"):
        with pytest.raises(ncclz.InvalidArgumentError, match="rans_margin"):
            codec.compress(f, spec, rans_margin=bad)
