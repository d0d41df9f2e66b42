#!/usr/bin/env python3
"""`python bench/ncclz_bench.py ...` == `ncclz-bench ...` (python/ncclz/tools/bench.py, as installed),
with the data sets cached in this bench/data/ folder (unless NCCLZ_BENCH_DATA names another).
"""

import os
import sys

os.environ.setdefault("NCCLZ_BENCH_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))

from ncclz.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
