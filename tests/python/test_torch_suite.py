"""A subset of PyTorch's own distributed test suite against the "ncclz" backend (3 ranks).

The whole suite (torch_suite/ncclz_dist_suite.py, run as that file says) takes
well over an hour on a 2-core machine: every test spawns 3 processes that import
torch. This subset takes a few minutes and covers what DDP and FSDP2 lean on:
DDP on CPU (buckets, futures), asynchronous all-reduces, coalesced all-gathers,
broadcast on a new_group, send/recv with tags, and reduce, gather and scatter. Each named test must
pass (a skip counts as a failure here). bench/results/torch_suite.md has the
whole suite's counts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # the suite imports it (pip install expecttest, in ncclz's [test] extra)

HERE = os.path.dirname(os.path.abspath(__file__))
SUBSET = [
    "test_DistributedDataParallelCPU",
    "test_all_reduce_sum_async",
    "test_all_gather_coalesced_simple",
    "test_broadcast_full_group",
    "test_send_recv_with_tag",
    "test_reduce_sum",
    "test_gather",
    "test_scatter",
]
TIMEOUT_S = 900


def test_pytorch_distributed_suite_subset(tmp_path):
    env = dict(os.environ, WORLD_SIZE="3", BACKEND="ncclz", OMP_NUM_THREADS="1")
    ids = [f"ncclz_dist_suite.py::TestNcclzBackend::{name}" for name in SUBSET]
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *ids]
    try:
        p = subprocess.run(
            cmd,
            check=False,
            cwd=os.path.join(HERE, "torch_suite"),
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the suite subset ran past {TIMEOUT_S} s:\n{(e.stdout or '')[-4000:]}")
    out = p.stdout + p.stderr
    passed = set(re.findall(r"^PASSED \S+::(test_\w+)", out, re.MULTILINE))
    missing = [n for n in SUBSET if n not in passed]
    assert p.returncode == 0 and not missing, f"not passed: {missing}\n{out[-8000:]}"
