"""Topology and hierarchical collectives with real ranks (processes) on one machine, hosts made with
the topology override (NCCLZ_TOPO_HOSTS, NCCLZ_TOPO_HOST): docs/ALGORITHMS.md, "Hierarchical
collectives". The network lab runs the same with network namespaces (bench/netlab/topology.py).

The ranks check every element against the fp64 reference themselves (_topo_workers.py, and the
shared scenarios of _workers.py under an overridden topology); here we check that they ran the
hierarchical algorithm, that all ranks got the same bits, and that failures still reach every rank.
"""

from __future__ import annotations

import signal
from pathlib import Path

import ncclz
import pytest
import test_comm
from test_comm import assert_same_on_all_ranks, run_ranks

TOPO_WORKERS = Path(__file__).with_name("_topo_workers.py")

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)

# (layout, ranks, transport): shm between the emulated hosts, or sockets between them (each host's
# ranks then get shared memory of their own)
LAYOUTS = [("2x2", 4, "shm"), ("2x3", 6, "socket"), ("4x2", 8, "shm")]
NO_POLICY = {"NCCLZ_LINK_GBPS": "", "NCCLZ_SOCKET_THROTTLE_GBPS": "", "NCCLZ_POLICY": "", "NCCLZ_ALGO": ""}


@pytest.fixture
def topo_workers(monkeypatch):
    """run_ranks with _topo_workers.py's scenarios."""
    monkeypatch.setattr(test_comm, "WORKERS", TOPO_WORKERS)


def _env(layout: str, **more) -> dict:
    e = dict(NO_POLICY, NCCLZ_TOPO_HOSTS=layout, NCCLZ_TOPO_HOST="")
    e.update(more)
    return e


@pytest.mark.parametrize("layout,n,transport", LAYOUTS)
def test_hierarchical_collectives(tmp_path, topo_workers, layout, n, transport):
    """Every collective and mode on float32/64, bfloat16 and int32: within the bound on every element,
    the same bits on every rank, lossless identical to none, every call hierarchical."""
    ranks = run_ranks(tmp_path, "hier", n, transport, args=["hierarchical", "20011"], env=_env(layout),
                      timeout=420)
    ranks.assert_ok()
    res = ranks.results
    hosts, local = (int(v) for v in layout.split("x"))
    for r, rr in enumerate(res):
        t = rr["topology"]
        assert (t["hosts"], t["local_size"], t["host"], t["local_rank"]) == (hosts, local, r // local, r % local)
        assert t["source"] == "NCCLZ_TOPO_HOSTS" and t["hierarchical"]
        assert t["intra_link"] == "shm" and t["inter_link"] == transport
    calls = res[0]["calls"]
    assert len(calls) > 40
    for name, st in calls.items():
        if not st["fallback"]:
            assert st["algorithm"] == "hierarchical", (name, st)
            # (a broadcast's last rank of a host chain sends nothing)
            assert st["local_bytes"] > 0 or name.startswith("broadcast"), (name, st)
    assert not any(st["fallback"] for name, st in calls.items() if "float32" in name), calls
    for rr in res[1:]:
        assert {k: v["algorithm"] for k, v in rr["calls"].items()} == {k: v["algorithm"] for k, v in calls.items()}
    keys = [k for k in res[0]["hashes"] if not k.startswith("reduce_scatter")]
    for r, rr in enumerate(res[1:], 1):
        diff = [k for k in keys if rr["hashes"][k] != res[0]["hashes"][k]]
        assert not diff, f"rank {r} differs from rank 0 in {diff[:5]}"
    for rr in res:
        h = rr["hashes"]
        for k in h:
            if k.endswith("/lossless"):
                assert h[k] == h[k[: -len("lossless")] + "none"], f"{k}: lossless differs from none"


def test_hierarchical_bound_is_split_among_hosts(tmp_path, topo_workers):
    """The same lossy sums on the ring and hierarchically: both within E (checked by the ranks), the
    hierarchical ones with fewer bytes between hosts (codes for E/2 rather than E/4)."""
    hier = run_ranks(tmp_path, "hier", 4, "shm", args=["hierarchical", "65536"], env=_env("2x2"), timeout=300)
    hier.assert_ok()
    ring = run_ranks(tmp_path, "hier", 4, "shm", args=["ring", "65536"], env=_env("2x2"), timeout=300)
    ring.assert_ok()
    h, g = hier.results[0]["calls"], ring.results[0]["calls"]
    for name in ("all_reduce/float32/sum/rel0.001", "all_reduce/float64/sum/abs0.01"):
        assert h[name]["algorithm"] == "hierarchical" and g[name]["algorithm"] == "ring"
        assert h[name]["ratio"] > g[name]["ratio"], (name, h[name], g[name])


@pytest.mark.parametrize("layout,n,transport", [("2x2", 4, "socket"), ("4x2", 8, "shm")])
def test_shared_scenario_under_a_hierarchical_topology(tmp_path, layout, n, transport):
    """_collective_scenarios.py's collectives scenario (every collective, mode, dtype and op; send/recv) as is,
    with the hosts overridden: the default algorithm is then hierarchical."""
    ranks = run_ranks(tmp_path, "collectives", n, transport, args=["count=3001"], env=_env(layout), timeout=420)
    ranks.assert_ok()
    assert_same_on_all_ranks(ranks.results)


def test_per_rank_host_ids(tmp_path, topo_workers):
    env = {r: {"NCCLZ_TOPO_HOST": f"node-{'ab'[r % 2]}"} for r in range(4)}
    ranks = run_ranks(tmp_path, "topology", 4, "shm", env=dict(NO_POLICY, NCCLZ_TOPO_HOSTS=""), rank_env=env)
    ranks.assert_ok()
    for r, res in enumerate(ranks.results):
        t = res["topology"]
        assert t["source"] == "NCCLZ_TOPO_HOST"
        assert t["host_of"] == [0, 1, 0, 1] and t["local_rank_of"] == [0, 0, 1, 1]
        assert (t["host"], t["local_rank"]) == (r % 2, r // 2)
        assert res["algorithm"] == "hierarchical"


def test_no_override_is_one_host_and_the_ring(tmp_path, topo_workers):
    # (NCCLZ_TWO_HOP_BYTES=0: one host's 128 KiB all_reduce would otherwise take the latency algorithm's two hops)
    ranks = run_ranks(tmp_path, "topology", 3, "shm",
                      env=dict(NO_POLICY, NCCLZ_TOPO_HOSTS="", NCCLZ_TOPO_HOST="", NCCLZ_TWO_HOP_BYTES="0"))
    ranks.assert_ok()
    for res in ranks.results:
        t = res["topology"]
        assert (t["hosts"], t["local_size"], t["source"], t["hierarchical"]) == (1, 3, "bootstrap", False)
        assert t["intra_link"] == "shm" and t["inter_link"] == ""
        assert res["algorithm"] == "ring"


@pytest.mark.parametrize("bad,what", [("0,0,1", "names 3 hosts"), ("3x2", "describes 3 x 2")])
def test_bad_override_fails_on_every_rank(tmp_path, topo_workers, bad, what):
    ranks = run_ranks(tmp_path, "topology", 4, "shm", env=_env(bad), nccl_timeout=10, timeout=60)
    for r in range(4):
        assert ranks.codes[r] == 0, ranks.log()
        res = ranks.results[r]
        assert res.get("init_error") == "InvalidArgumentError", res
        assert what in res["message"] and "NCCLZ_TOPO_HOSTS" in res["message"], res


def test_override_on_some_ranks_only_fails_on_every_rank(tmp_path, topo_workers):
    env = {0: {"NCCLZ_TOPO_HOST": "a"}, 1: {"NCCLZ_TOPO_HOST": "a"}, 2: {"NCCLZ_TOPO_HOST": "b"}}
    ranks = run_ranks(tmp_path, "topology", 4, "shm", env=dict(NO_POLICY, NCCLZ_TOPO_HOSTS=""), rank_env=env,
                      nccl_timeout=10, timeout=60)
    for r in range(4):
        res = ranks.results[r]
        assert res.get("init_error") == "InvalidArgumentError" and "not on rank 3" in res["message"], res


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_killed_rank_makes_others_raise(tmp_path, transport):
    """Rank 3 (host 1) dies: its host's rank and the ranks of host 0 all raise, quickly."""
    timeout = 5.0
    ranks = run_ranks(tmp_path, "kill", 4, transport, env=_env("2x2"), nccl_timeout=timeout, timeout=90)
    assert ranks.codes[3] == -signal.SIGKILL, ranks.log()
    for r in (0, 1, 2):
        assert ranks.codes[r] == 0, ranks.log()
        res = ranks.results[r]
        assert res["error"] in ("RemoteError", "TimeoutError", "AbortedError"), res
        assert res["elapsed"] < timeout + 5, res


@pytest.mark.parametrize("what", ["count", "compression"])
def test_mismatched_calls_raise_everywhere(tmp_path, what):
    ranks = run_ranks(tmp_path, "mismatch", 4, "shm", args=[what], env=_env("2x2"), nccl_timeout=10, timeout=60)
    ranks.assert_ok()
    for res in ranks.results:
        assert res["error"] in ("RemoteError", "InvalidArgumentError"), res


def test_policy_proposes_the_algorithm(tmp_path, topo_workers):
    """Rank 0's policy chooses the algorithm (a known link: NCCLZ_LINK_GBPS); every rank runs it, and a
    call's algorithm= (rank 0's) wins."""
    ranks = run_ranks(tmp_path, "policy", 4, "shm", env=_env("2x2", NCCLZ_LINK_GBPS="1"), timeout=180)
    ranks.assert_ok()
    calls = [res["calls"] for res in ranks.results]
    for name in ("none", "lossless", "rel"):
        assert len({c[name]["algorithm"] for c in calls}) == 1, name
        assert calls[0][name]["algorithm"] in ("ring", "hierarchical")
    # none and lossless run the same algorithm (the policy keeps them bit-identical)
    assert calls[0]["none"]["algorithm"] == calls[0]["lossless"]["algorithm"]
    # at 1 Gbit/s the hierarchical algorithm moves half the bytes between hosts
    assert calls[0]["rel"]["algorithm"] == "hierarchical", calls[0]["rel"]
    assert "hier" in calls[0]["rel"]["policy"], calls[0]["rel"]["policy"]
    assert all(c["forced"]["algorithm"] == "ring" for c in calls)
    assert any(m.endswith("@hierarchical") for m in calls[0]["measurements"]), calls[0]["measurements"]


def test_nccl_style_algorithm_variable(tmp_path, topo_workers):
    """NCCLZ_ALGO=ring on rank 0 makes every rank run the ring (the policy proposes nothing)."""
    env = _env("2x2", NCCLZ_LINK_GBPS="1")
    ranks = run_ranks(tmp_path, "policy", 4, "shm", env=env, rank_env={0: {"NCCLZ_ALGO": "ring"}}, timeout=180)
    ranks.assert_ok()
    for res in ranks.results:
        for name in ("none", "lossless", "rel"):
            assert res["calls"][name]["algorithm"] == "ring", (name, res["calls"][name])


# ---- the policy's model of the algorithms (no ranks) ---------------------------------------------------
def test_model_prefers_hierarchical_on_slow_links():
    from ncclz.policy import CostModel

    m = CostModel()
    S = 64 << 20
    # 4 hosts x 2 ranks at 1 Gbit/s: the ring's slowest link carries 2(8-1)/8 S, the hierarchical
    # algorithm's host links 2(4-1)/4 S
    ring = m.predict("all_reduce", 8, S, 1.0, 1.0, algorithm="ring", hosts=4)
    hier = m.predict("all_reduce", 8, S, 1.0, 1.0, algorithm="hierarchical", hosts=4)
    assert hier < ring
    assert hier == pytest.approx(ring * (1.5 / 1.75), rel=0.1)
    # one host, or one rank per host: the hierarchical formula is the ring's
    for hosts in (1, 8):
        assert m.predict("all_reduce", 8, S, 1.0, 1.0, algorithm="hierarchical", hosts=hosts) == ring
    with pytest.raises(ValueError):
        m.predict("all_reduce", 8, S, 1.0, 1.0, algorithm="tree", hosts=4)


def test_model_overlaps_the_hierarchical_rounds():
    """all_reduce, reduce_scatter and all_gather run their intra-host phases in rounds beside the
    inter-host ring (docs/ALGORITHMS.md): the model counts them beside it, not after it, except a
    round's worth; broadcast's chains are counted one after the other."""
    from ncclz.policy import CostModel
    from ncclz.policy.model import INTRA_FACTOR, ROUND_BYTES, STEPS

    m = CostModel()
    S, n, H = 64 << 20, 8, 2
    L = n // H
    for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        share = S if coll == "broadcast" else S / L
        fix = S if coll in ("all_gather", "broadcast") else share
        for gbps, cal in ((1.0, None), (100.0, None), (1.0, "coded")):
            c = None
            if cal:
                from ncclz.policy.calibration import Calibration

                c = Calibration(mode="lossy", ratio=8.0, enc_Bps=1e9, dec_Bps=2e9, sample_bytes=1 << 20, seconds=0.0)
            t = m.predict(coll, n, S, gbps, 1.0, c, lossy=c is not None, algorithm="hierarchical", hosts=H)
            inter = m._ring(coll, H, S, share, gbps, 1.0, c, c is not None, False, fix)
            t_intra = INTRA_FACTOR[coll](L) * S / m.intra_Bps
            phases = STEPS[coll](L) * m.alpha_intra_s + t_intra + inter
            if coll == "broadcast":
                assert t == pytest.approx(phases), (coll, gbps, cal)
            else:
                # beside the ring, never faster than either part; uncompressed on a slow link (the
                # transfer longer than the intra-host work) the model's share of overlap, m.overlap,
                # of all but a round's worth of the intra-host work is saved
                assert t < phases and t >= max(inter, t_intra), (coll, gbps, cal)
                if cal is None and gbps == 1.0:
                    saved = m.overlap * t_intra * (1 - ROUND_BYTES / share)
                    assert phases - t == pytest.approx(saved, rel=1e-6), coll


def test_policy_chooses_mode_and_algorithm_together():
    import numpy as np
    from ncclz.policy import Policy

    x = np.sin(np.linspace(0, 50, 1 << 20)).astype(np.float32)
    pol = Policy(world_size=8, link_gbps=1.0, cores_per_rank=1.0, hosts=4, hierarchical=True)
    pol.pin("lossless", ratio=1.2, enc_Bps=1e9, dec_Bps=1e9)
    for mode in ("lossy", "lossy/mid", "lossy/fast"):
        pol.pin(mode, ratio=8.0, enc_Bps=1e9, dec_Bps=1e9)
    c = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3), 64 << 20)
    assert c.mode == "lossy" and c.algorithm == "hierarchical", c
    assert set(c.by_algorithm["lossy"]) == {"ring", "hierarchical"}
    assert "on hierarchical" in str(c)
    # lossless runs with none's algorithm, whatever is fastest for it alone
    c = pol.choose("all_reduce", x, ncclz.Lossless(), 64 << 20)
    assert c.algorithms["lossless"] == c.algorithms["none"]
    # a call's own algorithm restricts the choice
    c = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3), 64 << 20, algorithm="ring")
    assert c.algorithm == "" and c.algorithms["lossy"] == "ring"
    # measured times win per (mode, algorithm): a measured slow hierarchical call turns the choice
    for _ in range(3):
        pol.record("all_reduce", "float32", 64 << 20, None, 10.0, algorithm="hierarchical")
    assert pol.choose_algorithm("all_reduce", 64 << 20, "float32")[0] == "ring"
    assert any(m.mode == "none@hierarchical" for m in pol.measurements())
    # no link rate: no proposal (the runtime's default runs)
    assert Policy(world_size=8, hosts=4, hierarchical=True).choose_algorithm("all_reduce", 1 << 20)[0] == ""
    # one rank per host: the ring only
    assert Policy(world_size=4, link_gbps=1, hosts=4, hierarchical=False).algorithms() == ("ring",)


def test_topology_hosts_parses_the_override_as_the_runtime_does():
    """ncclz's own NCCLZ_TOPO_HOSTS parser, which the torch backend uses for its groups' parts of the job's
    layout: HxL and lists (ids trimmed), the count checked where given, a clear error for a bad value."""
    hosts = ncclz._core.comm.topology_hosts
    assert hosts("2x2") == ["0", "0", "1", "1"]
    assert hosts(" 3X1 ") == ["0", "1", "2"]
    assert hosts("a, b ,a", 3) == ["a", "b", "a"]
    assert hosts("n0") == ["n0"]
    for bad, what in [("2x", "is not HxL"), ("0x4", "describes 0 x 4"), ("a,,b", "empty host id"), ("", "empty")]:
        with pytest.raises(ncclz.InvalidArgumentError, match=what):
            hosts(bad)
    with pytest.raises(ncclz.InvalidArgumentError, match="describes 2 x 2 ranks but the communicator has 3"):
        hosts("2x2", 3)
    with pytest.raises(ncclz.InvalidArgumentError, match="names 2 hosts but the communicator has 4"):
        hosts("a,b", 4)
