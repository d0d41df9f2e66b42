#!/usr/bin/env python3
"""Lossless ratio and speed of the 8-bit types in ncclz.codec: real gradients cast to float8 and int8.

    python bench/byte_types_bench.py

The benchmark's real gradients (ncclz.tools.data "grad": a small CNN's, 2.1 M float32) as
float8_e4m3fn scaled so that the largest magnitude is the type's largest (448), as float8_e5m2 as
they are, and as int8 quantized by their largest magnitude (round(g * 127 / max|g|)). Each is
compressed losslessly with the selector (bytes: Rans over the bytes, or Raw) and with FloatHuff
forced (what ranks write where a device rank takes part: Huffman sub-streams over the bytes, the
device's coder; here its CPU coder), decompressed and checked bit for bit; speeds are the best of 3,
one thread. Prints a Markdown table.
"""

from __future__ import annotations

import os
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data
import ncclz


def main() -> None:
    g = data.gradients().ravel()
    s = float(np.abs(g).max())
    print("| data | codec | elements | ratio | encode GB/s | decode GB/s | slices' codecs |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, dt, scale in (
        ("float8_e4m3fn (scaled to its largest, 448)", ml_dtypes.float8_e4m3fn, 448 / s),
        ("float8_e5m2 (as they are)", ml_dtypes.float8_e5m2, 1.0),
        ("int8 (absmax-quantized)", np.int8, 127 / s),
    ):
        x = g * scale
        x = np.round(x).astype(dt) if dt is np.int8 else x.astype(dt)
        for codec in (None, "floathuff"):
            enc = dec = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                blob = ncclz.codec.compress(x, ncclz.Lossless(), codec=codec)
                enc = min(enc, time.perf_counter() - t)
                t = time.perf_counter()
                y = ncclz.codec.decompress(blob)
                dec = min(dec, time.perf_counter() - t)
            assert np.array_equal(y.view(np.uint8), x.view(np.uint8)), (name, codec)
            info = ncclz.codec.inspect(blob)
            print(f"| {name} | {codec or 'selector'} | {x.size} | {info['ratio']:.3f} | {x.nbytes / enc / 1e9:.2f} "
                  f"| {x.nbytes / dec / 1e9:.2f} | {', '.join(info['codecs'])} |")


if __name__ == "__main__":
    main()
