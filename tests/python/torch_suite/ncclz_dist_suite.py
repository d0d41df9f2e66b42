"""PyTorch's own distributed test suite, run against the "ncclz" backend.

``torch.testing._internal.distributed.distributed_test`` ships in the torch
wheel; third-party backends run it the way torch's test_distributed_spawn.py
runs gloo: BACKEND names the backend, the backend is added to the suite's
feature tables before the suite is imported (its skip decorators read them at
import), and a test class combining ``TestDistBackend`` (which spawns
WORLD_SIZE processes per test, each calling ``init_process_group(BACKEND)``
through a FileStore) with ``DistributedTest._DistTestBase`` (the tests) is
collected by pytest. The spawned processes import this module again, which
registers the backend there too.

What is declared (and why):

- backend_feature "ddp", "subgroup", "plugin": the backend runs DDP, new_group
  subgroups, and is a registered plugin;
- nothing in skip_collective: every call the suite can declare missing is
  offered (reduce; recv from any source through Options(any_source=True),
  which NCCLZ_TORCH_ANY_SOURCE=1, set below, gives every group of the run).

Run (from tests/python/torch_suite; WORLD_SIZE defaults to 3)::

    python -m pytest -p no:cacheprovider -q ncclz_dist_suite.py            # the whole suite
    python -m pytest -p no:cacheprovider -q ncclz_dist_suite.py -k all_reduce

tests/python/test_torch_suite.py runs a subset in CI.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import unittest

os.environ.setdefault("BACKEND", "ncclz")
os.environ.setdefault("WORLD_SIZE", "3")
# a stuck collective fails (and names its peer) long before the harness's own per-test timeout
os.environ.setdefault("NCCLZ_TIMEOUT", "120")
# the suite's any-source tests call dist.recv(t) without src: every group of the run allows it
os.environ.setdefault("NCCLZ_TORCH_ANY_SOURCE", "1")

import ncclz.torch  # noqa: F401 - registers the backend (here and in every spawned rank)
import torch
from torch.testing._internal.common_distributed import DistTestCases

BACKEND = os.environ["BACKEND"]
for _feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[_feature].add(BACKEND)

from torch.testing._internal.common_utils import TEST_WITH_DEV_DBG_ASAN
from torch.testing._internal.distributed.distributed_test import (
    DistributedTest,
    TestDistBackend,
)

if TEST_WITH_DEV_DBG_ASAN:  # pragma: no cover - torch's own restriction
    print("torch + multiprocessing spawn do not work under dev-asan", file=sys.stderr)
    sys.exit(0)


# Decorators whose spawned ranks would all exit with a skip on this machine: deciding that here saves
# spawning WORLD_SIZE processes that import torch (about half of the suite's tests on a CPU-only host).
_SKIPS_IN_RANKS = {
    "skip_if_no_gpu": lambda: not torch.cuda.is_available(),
    "skip_if_lt_x_gpu": lambda: not torch.cuda.is_available(),
    "skip_if_odd_worldsize": lambda: int(os.environ["WORLD_SIZE"]) % 2 == 1,
    "skip_if_small_worldsize": lambda: int(os.environ["WORLD_SIZE"]) < 8,  # sic: torch's threshold
}


def _skip_reason(test) -> str | None:
    try:
        head = inspect.getsource(test).split("def ", 1)[0]
    except (OSError, TypeError):
        return None
    for name in re.findall(r"@(\w+)", head):
        if name in _SKIPS_IN_RANKS and _SKIPS_IN_RANKS[name]():
            return f"@{name}: every rank would skip on this machine (decided before spawning)"
    return None


# NCCLZ_SUITE_NAME_GATED=1: also run the tests the suite keeps for backends it names (gloo, nccl, ucc,
# mpi) where the test itself is a CPU test of calls ncclz offers: the skip flag that the name check
# set at import is cleared. Not what torch runs for a third-party backend; reported apart.
_NAME_GATES = (
    "get_future is only supported on mpi, nccl and gloo",
    "Only Nccl & Gloo backend support DistributedDataParallel",
)
_NOT_OFFERED = ("monitored_barrier", "timeout")  # gloo features the backend does not offer


def _name_gated(why: str) -> bool:
    # "Test requires backend X to be one of {...}" (a set: its order varies between processes)
    listed = why.startswith(f"Test requires backend {BACKEND} to be one of {{") and "'gloo'" in why
    return listed or why in _NAME_GATES


def _branches_on_backend(cls, f) -> bool:
    """Whether the test (or a ``self._test_*`` helper it calls) picks its setup by backend name: those
    set nothing up for a backend they do not name."""
    try:
        body = inspect.getsource(f).split("def ", 1)[1]
        for helper in re.findall(r"self\.(_test_\w+)\(", body):
            if hasattr(cls, helper):
                body += inspect.getsource(getattr(cls, helper))
    except (OSError, TypeError):
        return True
    return re.search(r"BACKEND (==|!=|in\b)", body) is not None


def _open_name_gated(cls) -> list:
    opened = []
    for name in dir(cls):
        f = getattr(cls, name)
        why = getattr(f, "__unittest_skip_why__", None) or ""
        skipped = name.startswith("test_") and getattr(f, "__unittest_skip__", False)
        offered = not any(k in name for k in _NOT_OFFERED)
        if skipped and _name_gated(why) and offered and not _branches_on_backend(cls, f):
            f.__unittest_skip__ = False
            opened.append(name)
    return opened


class TestNcclzBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        reason = _skip_reason(getattr(type(self), self._testMethodName))
        if reason:
            raise unittest.SkipTest(reason)
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if os.environ.get("NCCLZ_SUITE_NAME_GATED") == "1":
    NAME_GATED = _open_name_gated(TestNcclzBackend)
