"""What a single flipped bit does to a blob, before and after the version-2 checksum.

    python bench/blob_bitflips.py

For each blob of tests/python/data/blobs_v1 (version 1: written before checksums, every codec,
dtype and mode) and for the same array compressed again by this ncclz (version 2), every bit is
flipped once and the blob decoded: each flip is an error (CorruptDataError), decodes to the same
values (a bit the decoder does not use), or decodes silently to other values. Prints a table per
blob and the totals.
"""

from __future__ import annotations

import os
from pathlib import Path

import ncclz
import numpy as np
from ncclz import codec

V1 = Path(__file__).resolve().parent.parent / "tests" / "python" / "data" / "blobs_v1"


def spec_of(info):
    if info["mode"] == "lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(abs=info["bound"]) if info["bound_kind"] == "abs" else ncclz.Lossy(rel=info["bound"])


def flips(blob):
    ref = codec.decompress(blob).tobytes()
    b = blob.copy()
    err = same = other = 0
    for bit in range(b.size * 8):
        b[bit // 8] ^= np.uint8(1 << (bit % 8))
        try:
            y = codec.decompress(b)
            if y.tobytes() == ref:
                same += 1
            else:
                other += 1
        except ncclz.CorruptDataError:
            err += 1
        b[bit // 8] ^= np.uint8(1 << (bit % 8))
    return err, same, other


def main():
    print(f"ncclz {getattr(ncclz, '__version__', '?')}, {os.uname().nodename}")
    print("| blob | version | bytes | flips | error | same values | other values (silent) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    tot = {1: np.zeros(4, int), 2: np.zeros(4, int)}
    for path in sorted(V1.glob("*.blob")):
        b1 = np.fromfile(path, dtype=np.uint8)
        info = codec.inspect(b1)
        b2 = codec.compress(codec.decompress(b1), spec_of(info))
        for v, b in ((1, b1), (2, b2)):
            e, s, o = flips(b)
            tot[v] += (b.size * 8, e, s, o)
            print(
                f"| {path.stem} | {v} | {b.size} | {b.size * 8} | {e} | {s} | {o} ({100 * o / (b.size * 8):.0f}%) |"
            )
    for v in (1, 2):
        n, e, s, o = tot[v]
        print(f"| **all, version {v}** | {v} | | {n} | {e} | {s} | {o} ({100 * o / n:.1f}%) |")


if __name__ == "__main__":
    main()
