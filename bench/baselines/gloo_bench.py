#!/usr/bin/env python3
"""gloo baseline: torch.distributed (gloo, init_method tcp://MASTER_ADDR:MASTER_PORT+1) all_reduce /
all_gather / broadcast of the same inputs as ncclz-bench, uncompressed. The implementation is
GlooRunner in python/ncclz/tools/bench.py (so the netlab suite runs it in the same processes as
ncclz); this script is the stand-alone entry point:

    python bench/baselines/gloo_bench.py -n 4 -c all_reduce -d smooth -b 64M -e 64M
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.argv[1:1] = ["-s", "gloo"]
    runpy.run_path(os.path.join(os.path.dirname(HERE), "ncclz_bench.py"), run_name="__main__")
