"""The latency algorithm with real ranks (processes) over shared memory and sockets: small exact calls
carry their data in the call descriptor's message (docs/ALGORITHMS.md, "The latency algorithm").

The ranks check every element against the fp64 reference themselves (_latency_workers.py); here we
check that they ran the latency algorithm, that all ranks got the same bits, and that mismatches, a
killed or stalled rank and abort still end a small call on every rank, within seconds.
"""

from __future__ import annotations

from pathlib import Path

import ncclz
import pytest
import test_comm
from test_comm import assert_same_on_all_ranks, run_ranks

LATENCY_WORKERS = Path(__file__).with_name("_latency_workers.py")
# the runtime's own choice: no policy proposals, no algorithm or limit from the environment
DEFAULTS = {"NCCLZ_POLICY": "off", "NCCLZ_ALGO": "", "NCCLZ_LATENCY_BYTES": "", "NCCLZ_TWO_HOP_BYTES": "",
            "NCCLZ_DIRECT_FROM_BYTES": "", "NCCLZ_P2P": ""}

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)


@pytest.fixture(autouse=True)
def latency_workers(monkeypatch):
    """run_ranks with _latency_workers.py's scenarios."""
    monkeypatch.setattr(test_comm, "WORKERS", LATENCY_WORKERS)


@pytest.mark.parametrize("transport,n", [("shm", 4), ("socket", 3), ("shm", 2)])
def test_every_collective_is_exact_and_the_same_on_every_rank(tmp_path, transport, n):
    ranks = run_ranks(tmp_path, "latency", n, transport, env=DEFAULTS, timeout=240)
    ranks.assert_ok()
    res = ranks.results
    assert res[0]["checks"] > 20
    for r, rr in enumerate(res):
        wrong = {k: a for k, a in rr["algorithms"].items() if a != "latency"}
        assert not wrong, f"rank {r} ran other algorithms: {wrong}"
    assert_same_on_all_ranks(res, prefixes=("all_reduce", "all_gather"))
    # above latency_bytes, all_reduce's two hops: (2N-3) x the slot / 4 over shared memory, off on sockets
    two_hop = [k for k in res[0]["algorithms"] if k.startswith("all_reduce/two_hop/")]
    if transport == "shm":
        assert res[0]["two_hop_bytes"] == (2 * n - 3) * (res[0]["slot_bytes"] // 4), res[0]
        assert len(two_hop) == 8, two_hop
    else:
        assert res[0]["two_hop_bytes"] == 0 and not two_hop, res[0]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_direct_two_hops_give_the_bits_of_the_slots(tmp_path, n):
    """all_reduce's two hops straight between the processes' buffers (cross-memory attach; on by default
    over shared memory from NCCLZ_DIRECT_FROM_BYTES up, here 1 byte: every two-hop size) against the same
    calls' two hops through the slots (NCCLZ_DIRECT_FROM_BYTES=0, two_hop_bytes raised to cover the sizes):
    the same bits, every element checked by the ranks, lossless the bits of none, back-to-back calls on
    freed arrays."""
    (tmp_path / "direct").mkdir()
    (tmp_path / "slots").mkdir()
    direct = run_ranks(tmp_path / "direct", "latency_direct", n, "shm", env=dict(DEFAULTS, NCCLZ_DIRECT_FROM_BYTES="1"),
                       timeout=240)
    direct.assert_ok()
    slots = run_ranks(tmp_path / "slots", "latency_direct", n, "shm", timeout=240,
                      env=dict(DEFAULTS, NCCLZ_DIRECT_FROM_BYTES="0", NCCLZ_TWO_HOP_BYTES=str(8 << 20)))
    slots.assert_ok()
    assert direct.results[0]["direct_from_bytes"] == 1, direct.results[0]
    assert slots.results[0]["direct_from_bytes"] == 0, slots.results[0]
    for run in (direct, slots):
        assert run.results[0]["checks"] > 40
        for rr in run.results:
            assert set(rr["algorithms"].values()) == {"latency"}, rr["algorithms"]
        assert_same_on_all_ranks(run.results, prefixes=("all_reduce",))
    assert len(direct.results[0]["hashes"]) >= 24
    assert direct.results[0]["hashes"] == slots.results[0]["hashes"]
    # reduce_scatter, all_gather and broadcast above latency_bytes: direct, or the ring (its bits)
    for run, want in ((direct, "latency"), (slots, "ring")):
        for rr in run.results:
            assert len(rr["others"]) >= 24 * 3 + 24 and set(rr["others"].values()) == {want}, rr["others"]
    assert_same_on_all_ranks(direct.results, prefixes=("all_gather", "broadcast"))  # (reduce_scatter: a block each)


def test_ranks_that_cannot_reach_each_other_keep_the_slots(tmp_path):
    """Where one rank cannot read the others' memory (its own user namespace, the others non-dumpable: as a
    container may forbid cross-memory attach), the probe at creation turns direct off on every rank and
    the same calls run through the slots, with the same bits."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = dict(DEFAULTS, NCCLZ_TWO_HOP_BYTES=str(8 << 20))
    refused = run_ranks(tmp_path / "a", "latency_direct", 3, "shm", timeout=240,
                        env=dict(env, NCCLZ_TEST_NO_PEER_READS="1"))
    refused.assert_ok()
    assert [rr["direct_from_bytes"] for rr in refused.results] == [0, 0, 0], refused.results
    direct = run_ranks(tmp_path / "b", "latency_direct", 3, "shm", env=env, timeout=240)
    direct.assert_ok()
    assert direct.results[0]["direct_from_bytes"] == 256 << 10  # the default with 3 ranks
    assert refused.results[0]["hashes"] == direct.results[0]["hashes"]
    assert set(refused.results[0]["others"].values()) == {"ring"}, refused.results[0]["others"]
    # direct from 256 KiB (3 ranks): the megabyte calls of reduce_scatter, all_gather and broadcast
    assert "latency" in set(direct.results[0]["others"].values()), direct.results[0]["others"]


def test_the_limit_turns_it_off(tmp_path):
    env = dict(DEFAULTS, NCCLZ_LATENCY_BYTES="0")
    ranks = run_ranks(tmp_path, "latency", 3, "shm", env=env, args=["300"], timeout=240)
    ranks.assert_ok()
    algos = set(ranks.results[0]["algorithms"].values())
    assert algos == {"ring"}, algos
    assert_same_on_all_ranks(ranks.results, prefixes=("all_reduce", "all_gather"))


@pytest.mark.parametrize("transport,n", [("shm", 4), ("socket", 2)])
def test_the_short_way_is_the_full_path(tmp_path, transport, n):
    """Small uncompressed all_reduces with positional arguments skip most of the Python layer: the ranks
    check the same bits and stats as the full path, every element, and the calls it leaves alone."""
    ranks = run_ranks(tmp_path, "latency_short", n, transport, env=DEFAULTS, timeout=240)
    ranks.assert_ok()
    res = ranks.results
    assert res[0]["checks"] > 20
    assert_same_on_all_ranks(res, prefixes=("all_reduce",))
    for r, rr in enumerate(res):
        e = rr["errors"]
        assert e["strided"]["kind"] == "InvalidArgumentError" and "not contiguous" in e["strided"]["message"], e
        assert e["strided"]["message"].startswith(f"rank {r}:"), e
        assert e["bad op"]["kind"] in ("InvalidArgumentError", "RemoteError") and "bogus" in e["bad op"]["message"], e
        assert e["array op"]["kind"] == "InvalidArgumentError" and "op must be a string" in e["array op"]["message"], e


@pytest.mark.parametrize("transport,n", [("shm", 4), ("socket", 2)])
def test_the_other_short_ways_are_the_full_path(tmp_path, transport, n):
    """Small uncompressed reduce_scatter, all_gather and broadcast with positional arguments skip most of
    the Python layer too: the ranks check the full path's bits and stats, every element, and that
    mismatched calls still raise on every rank."""
    ranks = run_ranks(tmp_path, "latency_short_others", n, transport, env=DEFAULTS, timeout=240)
    ranks.assert_ok()
    res = ranks.results
    assert res[0]["checks"] >= 15
    assert_same_on_all_ranks(res, prefixes=("all_gather", "broadcast"))
    for rr in res:
        e = rr["errors"]
        for name in ("reduce_scatter", "all_gather", "broadcast"):
            assert e[name] is not None and e[name]["kind"] in ("InvalidArgumentError", "RemoteError"), e
            assert e[name + "/after"]["ok"], e
        for name in ("rs out shape", "ag out dtype", "ag out overlaps"):
            assert e[name] is not None and e[name]["kind"] == "InvalidArgumentError", (name, e)


@pytest.mark.parametrize("transport,n", [("shm", 4), ("socket", 3)])
def test_small_lossy_requests_run_exact_with_the_latency_algorithm(tmp_path, transport, n):
    """The default policy runs small lossy requests as none on the latency algorithm (the ranks check
    every element, the bits of the uncompressed call, and the fallbacks: policy="off" and a bound below
    the exact sum's rounding run the lossy ring)."""
    env = dict(DEFAULTS, NCCLZ_POLICY="auto", NCCLZ_LINK_GBPS="")
    ranks = run_ranks(tmp_path, "latency_lossy", n, transport, env=env, timeout=240)
    ranks.assert_ok()
    res = ranks.results
    assert res[0]["checks"] > 20
    for rr in res:
        assert rr["seen"]["all_reduce/float32/sum"][:2] == ["none", "latency"], rr["seen"]
        assert rr["seen"]["all_reduce/tiny"][1] == "ring", rr["seen"]
    assert_same_on_all_ranks(res, prefixes=("all_reduce",))


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_mismatched_small_calls_raise_on_every_rank(tmp_path, transport):
    ranks = run_ranks(tmp_path, "latency_mismatch", 4, transport, env=DEFAULTS)
    ranks.assert_ok()
    for r, rr in enumerate(ranks.results):
        e = rr["errors"]
        for case, needle in (("count", "count=100000"), ("collective", "all_gather(send_count=250"),
                             ("mode", "lossy_rel"), ("count/short", "count=2000"), ("dtype/short", "float64")):
            assert e[case] and e[case]["kind"] == "RemoteError", f"rank {r}, {case}: {e[case]}"
            assert "mismatched calls" in e[case]["message"] and needle in e[case]["message"], e[case]
            assert e[case + "/after"] == {"ok": True, "algorithm": "latency"}, f"rank {r}, {case}: {e}"


@pytest.mark.parametrize("transport,count,coll", [("shm", 1000, "all_reduce"), ("socket", 1000, "all_reduce"),
                                                ("shm", 250000, "all_reduce"), ("shm", 250000, "reduce_scatter"),
                                                ("shm", 250000, "all_gather"), ("shm", 250000, "broadcast")])
def test_a_killed_rank_ends_a_small_call_on_every_rank(tmp_path, transport, count, coll):
    """(250000 floats over shared memory: all_reduce's two hops, above latency_bytes, direct; reduce_scatter,
    all_gather and broadcast of 1 MB, direct.)"""
    ranks = run_ranks(tmp_path, "latency_fault", 4, transport, args=["kill", str(count), coll], env=DEFAULTS,
                      nccl_timeout=60)
    assert ranks.codes[:3] == [0, 0, 0], ranks.log()
    for r in range(3):
        rr = ranks.results[r]
        assert rr["first"] == "latency", rr
        assert rr["error"] in ("RemoteError", "AbortedError"), rr
        assert rr["elapsed"] < 20, rr  # the timeout is 60 s: the death was noticed, not waited out
    assert any("rank 3" in ranks.results[r]["message"] for r in range(3)), [ranks.results[r] for r in range(3)]


def test_a_stalled_rank_is_a_timeout(tmp_path):
    ranks = run_ranks(tmp_path, "latency_fault", 3, "shm", args=["stall"], env=DEFAULTS, nccl_timeout=2.0)
    ranks.assert_ok()
    kinds = sorted(ranks.results[r]["error"] for r in (0, 1))
    assert "TimeoutError" in kinds and set(kinds) <= {"TimeoutError", "AbortedError"}, ranks.results
    timed_out = next(ranks.results[r] for r in (0, 1) if ranks.results[r]["error"] == "TimeoutError")
    assert "peer rank 2" in timed_out["message"], timed_out
    assert all(ranks.results[r]["elapsed"] < 10 for r in (0, 1)), ranks.results


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_abort_wakes_a_small_call_on_every_rank(tmp_path, transport):
    ranks = run_ranks(tmp_path, "latency_fault", 3, transport, args=["abort"], env=DEFAULTS, nccl_timeout=60)
    ranks.assert_ok()
    for r in (0, 1):
        rr = ranks.results[r]
        assert rr["error"] == "AbortedError", rr
        assert rr["elapsed"] < 10, rr
    assert "the latency test aborts" in ranks.results[1]["message"], ranks.results[1]
