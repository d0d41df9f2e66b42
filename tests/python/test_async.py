"""Asynchronous calls (``async_op=True``, ``ncclz.Work``, ``comm.synchronize()``; ncclz/_async.py):
real ranks over shared memory and sockets (tests/python/_async_scenarios.py). The ranks check every
element themselves; here: exit codes, identical results on every rank, and the abort outcome."""

from __future__ import annotations

import inspect

import ncclz
import numpy as np
import pytest
from test_comm import free_port, run_ranks


@pytest.mark.parametrize("transport,n", [("shm", 2), ("shm", 3), ("socket", 3)])
def test_queued_calls_every_collective(tmp_path, transport, n):
    ranks = run_ranks(tmp_path, "async", n, transport, timeout=180)
    ranks.assert_ok()
    keys = ("all_reduce", "all_gather", "small")
    for res in ranks.results[1:]:
        assert {k: res[k] for k in keys} == {k: ranks.results[0][k] for k in keys}, res["rank"]
    assert all(res["checks"] >= 4 for res in ranks.results), ranks.results


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_abort_with_calls_queued(tmp_path, transport):
    ranks = run_ranks(tmp_path, "async_abort", 3, transport, timeout=120)
    ranks.assert_ok()
    for res in ranks.results:
        assert res["outcomes"] == ["ok"] * 10 + ["AbortedError"] * 4, res
        assert res["elapsed"] < 15, res  # the abort reached the queued calls, not the 20 s timeout


def test_single_rank_and_signature():
    """One rank: a Work completes with the synchronous call's result; async_op is in every
    collective's signature (help() shows it)."""
    for name in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter",
                 "all_to_all", "send", "recv", "barrier"):
        p = inspect.signature(getattr(ncclz.Communicator, name)).parameters
        assert "async_op" in p and p["async_op"].default is False, name
    with ncclz.Communicator(rank=0, world_size=1, master_port=free_port(), token="t", timeout=10) as comm:
        x = np.arange(10, dtype=np.float32)
        w = comm.all_reduce(x, compression=ncclz.Lossless(), async_op=True)
        assert w.wait(timeout=30) is x and w.is_completed() and w.exception() is None
        assert "completed" in repr(w)
        comm.synchronize()
        assert np.array_equal(x, np.arange(10, dtype=np.float32))
    comm.synchronize()  # nothing queued: returns


def test_exit_without_close_after_async_calls_is_clean(tmp_path):
    """A program that queued calls and exits without close(): the queue's idle thread holds nothing of
    its calls, so nothing is reported as leaked at exit (nanobind listed the communicator, its
    functions and types, some 20 lines, where the thread still held its last call's closure)."""
    import subprocess
    import sys

    script = (
        "import numpy as np, ncclz\n"
        "comm = ncclz.Communicator(rank=0, world_size=1, master_port=0)\n"
        "w = comm.all_reduce(np.ones(1000, np.float32), async_op=True)\n"
        "assert w.wait()[0] == 1.0\n"
        "print('done')\n"
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "done" in p.stdout, p.stderr[-2000:]
    assert "leaked" not in p.stderr, p.stderr[-2000:]
