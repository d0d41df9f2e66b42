"""Writes the version-1 blob test vectors in blobs_v1/ (run once, with the code of commit 1f59feb, the
last one that wrote version 1; kept to say how the files were made, not to be run again).

Each vector is <name>.blob (the blob as compress() wrote it) and <name>.npy (what decompress() of that
code returned). tests/python/test_blob_versions.py checks that today's decoder gives the same values.
"""

import os

import ml_dtypes
import ncclz
import numpy as np
from ncclz import codec

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blobs_v1")
rng = np.random.default_rng(20240917)
i = np.arange(600, dtype=np.float64)
smooth = 3 * np.sin(i * 0.02) + 0.5 * np.cos(i * 0.11)
noisy = rng.normal(0, 1, 600)
grid = np.add.outer(np.sin(np.arange(24) * 0.2), np.cos(np.arange(40) * 0.1))
special = noisy.astype(np.float32)
special[[3, 50, 400]] = [np.nan, np.inf, -np.inf]
special[7] = 1e30  # an outlier of the code range

VECTORS = {
    "lossless_f32_auto": (noisy.astype(np.float32), ncclz.Lossless(), {}),
    "lossless_f32_raw": (noisy.astype(np.float32), ncclz.Lossless(), {"codec": "raw"}),
    "lossless_f32_floatexp": (smooth.astype(np.float32), ncclz.Lossless(), {"codec": "floatexp"}),
    "lossless_bf16": (smooth.astype(ml_dtypes.bfloat16), ncclz.Lossless(), {}),
    "lossless_f16": (smooth.astype(np.float16), ncclz.Lossless(), {}),
    "lossless_f64_sparse": (
        np.where(rng.random(600) < 0.05, noisy, 0.0),
        ncclz.Lossless(),
        {"codec": "sparse"},
    ),
    "lossless_i32_block": ((smooth * 1000).astype(np.int32), ncclz.Lossless(), {"codec": "block"}),
    "lossless_i64_rans": ((noisy * 50).astype(np.int64), ncclz.Lossless(), {"codec": "rans"}),
    "lossless_u8": ((smooth * 20 + 100).astype(np.uint8), ncclz.Lossless(), {}),
    "lossy_abs_f32_block": (smooth.astype(np.float32), ncclz.Lossy(abs=1e-3), {"codec": "block"}),
    "lossy_abs_f32_specials": (special, ncclz.Lossy(abs=1e-2), {}),
    "lossy_rel_f64_rans": (noisy, ncclz.Lossy(rel=1e-4), {"codec": "rans"}),
    "lossy_rel_f16": (smooth.astype(np.float16), ncclz.Lossy(rel=1e-2), {}),
    "lossy_abs_bf16": (smooth.astype(ml_dtypes.bfloat16), ncclz.Lossy(abs=0.05), {}),
    "lossy_abs_f32_lorenzo2d": (
        grid.astype(np.float32),
        ncclz.Lossy(abs=1e-3),
        {"codec": "block", "predictor": "lorenzo2d"},
    ),
    "lossy_rel_f32_interp": (grid.astype(np.float32), ncclz.Lossy(rel=1e-3), {"layout": "interp"}),
}

for name, (x, spec, kw) in VECTORS.items():
    blob = codec.compress(x, spec, **kw)
    assert blob[4] == 1, "not a version-1 blob"
    y = codec.decompress(blob)
    with open(os.path.join(HERE, name + ".blob"), "wb") as f:
        f.write(blob.tobytes())
    np.save(os.path.join(HERE, name + ".npy"), y, allow_pickle=False)
    print(f"{name}: {x.dtype}{list(x.shape)} -> {blob.size} bytes, {codec.inspect(blob)['codecs']}")
