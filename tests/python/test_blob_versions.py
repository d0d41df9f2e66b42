"""Blobs of older format versions still decode (docs/FORMAT.md, "Container (blob)", "Versions").

tests/python/data/blobs_v1/ holds version-1 blobs (before checksums and the stored E) written by the
last code that wrote version 1, with the values that code decoded them to
(tests/python/data/make_blobs_v1.py). Today's decoder must give the same values, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ncclz import codec

V1 = Path(__file__).with_name("data") / "blobs_v1"
NAMES = sorted(p.stem for p in V1.glob("*.blob"))


def test_the_vectors_are_there():
    assert len(NAMES) >= 16, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_version1_blob_decodes_to_the_same_values(name):
    blob = np.fromfile(V1 / f"{name}.blob", dtype=np.uint8)
    want = np.load(V1 / f"{name}.npy", allow_pickle=False)
    assert blob[4] == 1
    y = codec.decompress(blob)
    assert y.shape == want.shape
    assert y.tobytes() == want.tobytes()
    out = np.empty_like(y)
    codec.decompress(blob, out=out)
    assert out.tobytes() == want.tobytes()
    info = codec.inspect(blob)
    assert info["version"] == 1 and info["checksum"] is None
    if info["mode"] == "lossless":
        assert info["error_bound"] == info["grid_half_step"] == 0
    elif info["bound_kind"] == "abs":
        assert info["error_bound"] == info["bound"] and 0 < info["grid_half_step"] <= info["bound"]
    else:  # version 1 did not store E for rel blobs
        assert info["error_bound"] is None and info["grid_half_step"] > 0


def test_reencoding_writes_version2_with_the_same_values():
    for name in NAMES:
        blob = np.fromfile(V1 / f"{name}.blob", dtype=np.uint8)
        y = codec.decompress(blob)
        again = codec.compress(y, codec_spec_of(codec.inspect(blob)))
        assert again[4] == 2 and codec.inspect(again)["checksum"] == "crc32c"
        if codec.inspect(blob)["mode"] == "lossless":
            assert codec.decompress(again).tobytes() == y.tobytes()


def codec_spec_of(info):
    import ncclz

    if info["mode"] == "lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(abs=info["bound"]) if info["bound_kind"] == "abs" else ncclz.Lossy(rel=info["bound"])
