#!/usr/bin/env python3
"""Thin wrapper: `python bench/ncclz_bench.py ...` == `ncclz-bench ...` (python/ncclz/tools/bench.py).

Runs the repository's copy of the tool (so it works before the package is rebuilt) with
NCCLZ_BENCH_DIR pointing at this bench/ folder (for bench/data.py).
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("NCCLZ_BENCH_DIR", HERE)
TOOL = os.path.join(os.path.dirname(HERE), "python", "ncclz", "tools", "bench.py")

if __name__ == "__main__":
    sys.argv[0] = TOOL
    runpy.run_path(TOOL, run_name="__main__")
