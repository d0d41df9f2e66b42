"""Benchmark data sets for the scripts in bench/: the package's ``ncclz.tools.data`` (formulas, seeds,
the training recipe and the real data's source are documented there), cached under bench/data/
(git-ignored) unless NCCLZ_BENCH_DATA names another folder.

    python bench/data.py          # builds and describes every field
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from ncclz.tools.data import (  # noqa: F401 - re-exported for the bench scripts
    FIELDS,
    DataUnavailable,
    cache_dir,
    gaussian,
    gradients,
    gradients_meta,
    gradients_per_layer,
    load,
    rank_input,
    reanalysis,
    reanalysis_path,
    smooth3d,
    smooth3d_params,
)

# the cache folder is read at every use: bench/ keeps its own unless NCCLZ_BENCH_DATA says otherwise
os.environ.setdefault("NCCLZ_BENCH_DATA", str(Path(__file__).resolve().parent / "data"))

#: The codec benchmark's data sets (name -> full / quick / desc), as bench/codec_bench.py reads them.
DATASETS = FIELDS
DATA_DIR = cache_dir()

if __name__ == "__main__":
    runpy.run_module("ncclz.tools.data", run_name="__main__")
