#!/usr/bin/env python3
"""Compress-then-communicate baseline with SZ3 (pysz), as MPI-based compressed libraries do:
every rank compresses its input (ABS eb = E/n for sums, E for all_gather/broadcast, where E is
the ncclz contract: abs=E, or rel=r -> r * (global max - global min), found by a tiny max
all-reduce inside the timed call), the blobs are all-gathered uncompressed (through ncclz, or
gloo with --sz3-via gloo), every rank decompresses all n blobs and sums them in float32.
Implementation: SZ3Runner in python/ncclz/tools/bench.py.

    python bench/baselines/sz3_bench.py -n 4 -c all_reduce -d smooth -m rel=1e-3 -b 64M -e 64M
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.argv[1:1] = ["-s", "sz3"]
    runpy.run_path(os.path.join(os.path.dirname(HERE), "ncclz_bench.py"), run_name="__main__")
