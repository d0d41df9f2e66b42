"""The policy on one host joined by memory (ncclz/policy/memory_link.py).

Where every rank shares one host over shared memory (or as threads of one process) and no link rate
is configured, a lossy or lossless request of host arrays runs none (exactly) by rule, without a
codec calibration or a memcpy timing, and says why; where a compressed mode was measured (and for
device calls) the model decides, taking the link to be memory. A configured rate (link_gbps=,
NCCLZ_LINK_GBPS, NCCLZ_SOCKET_THROTTLE_GBPS) keeps priority, observed uncompressed calls replace the
estimate, and topologies of several hosts, or sockets on one host, are not memory-class. Decisions
here rest on pinned codec figures and a pinned memory rate, never on this machine's speed, except
the one test of the measured rate itself.
"""

from __future__ import annotations

import dataclasses

import ncclz
import numpy as np
import pytest
from ncclz.policy import Call, CommPolicy, Policy, resolve_setting
from ncclz.policy import memory_link as ml
from test_comm import run_ranks

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)

CLEAN = {"NCCLZ_LINK_GBPS": "", "NCCLZ_SOCKET_THROTTLE_GBPS": "", "NCCLZ_POLICY": ""}
LOSSY = ncclz.Lossy(rel=1e-3)


@dataclasses.dataclass
class Topo:
    """The fields of ncclz.Topology the policy reads."""

    hosts: int
    intra_link: str
    local_size: int = 4
    hierarchical: bool = False


@pytest.fixture(autouse=True)
def _no_link_env(monkeypatch):
    for v in CLEAN:
        monkeypatch.delenv(v, raising=False)


def _pinned(pol: Policy, ratio: float = 20.0, Bps: float = 1e9) -> Policy:
    """Codec figures fixed (a good ratio at 1 GB/s per core), so no decision depends on this machine."""
    for m in ("lossy", "lossy/mid", "lossy/fast"):
        pol.pin(m, ratio=ratio, enc_Bps=Bps, dec_Bps=Bps)
    return pol.pin("lossless", ratio=1.2, enc_Bps=Bps, dec_Bps=Bps)


RULE = "one host over shared memory: no host codec is faster than the memory copies of an uncompressed call"


def _measured(pol: Policy, spec, nbytes: int = 64 << 20, coll: str = "all_reduce", seconds: float = 1.0) -> Policy:
    """A measured time of `spec` for the size class (two calls: the first is cold), as calls forced with
    policy="off" leave: the model, not the memory-class rule, then decides that class."""
    for _ in range(2):
        pol.record(coll, "float32", nbytes, spec, seconds)
    return pol


def test_one_host_runs_none_by_rule_without_calibrating(monkeypatch):
    """Nothing configured, host arrays, nothing compressed measured: none by rule, for any data, with no
    codec calibration and no memcpy timing (either would show: a calibration is listed, the memcpy
    probe raises here)."""

    def no_memcpy(*a, **k):
        raise AssertionError("the memcpy was timed")

    monkeypatch.setattr(ml, "memcpy_Bps", no_memcpy)
    for link, name in ml.MEMORY_LINKS.items():
        pol = Policy(4, cores_per_rank=1, memory_link=link)  # nothing pinned: a calibration would measure
        for x in (np.zeros(16 << 20, np.float32), np.linspace(-1, 1, 1 << 20).astype(np.float64)):
            for req in (LOSSY, ncclz.Lossy(abs=1e-2), ncclz.Lossless()):
                for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"):
                    ch = pol.choose(coll, x, req)
                    assert ch.mode == "none" and ch.compression is None, (coll, str(ch))
                    assert ch.reason == RULE.replace("one host over shared memory", name) + \
                        ", whatever the data (nothing calibrated)", ch.reason
                    assert ch.predicted_s == {} and "predicted" not in str(ch), str(ch)
        assert pol.calibrations() == [], pol.calibrations()
    # what the rule leaves alone: a call without compression, one rank, a small message (the latency rule)
    monkeypatch.undo()
    pol = Policy(4, cores_per_rank=1, memory_link="shm")
    x = np.zeros(1 << 20, np.float32)
    assert pol.exact_on_memory("all_reduce", "float32", None, x.nbytes) is None
    assert Policy(1, memory_link="shm").exact_on_memory("all_reduce", "float32", LOSSY, x.nbytes) is None
    ch = pol.choose("all_reduce", x[:1024], LOSSY)
    assert ch.mode == "none" and "latency-bound" in ch.reason, str(ch)


def test_a_measured_compressed_mode_reopens_the_model():
    """Measured times win over the rule: where a compressed mode was measured for the size class, the
    model decides it (with the memory-class estimate), and a measured win keeps compression."""
    x = np.zeros(16 << 20, np.float32)
    for spec in (ncclz.Lossless(), LOSSY):
        pol = _measured(_pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0)), spec, x.nbytes)
        assert pol.exact_on_memory("all_reduce", "float32", LOSSY, x.nbytes) is None
        # another size class, collective or bound is still the rule's
        assert pol.exact_on_memory("all_reduce", "float32", LOSSY, x.nbytes * 4) is not None
        assert pol.exact_on_memory("all_gather", "float32", LOSSY, x.nbytes) is not None
        ch = pol.choose("all_reduce", x, LOSSY)
        assert ch.reason.startswith("one host over shared memory, link 40 Gbit/s (memory-class estimate): "), str(ch)
    # a lossless request reopens on lossless only; a lossy measurement of another bound is another mode
    pol = _measured(_pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0)), ncclz.Lossy(rel=1e-4))
    assert pol.exact_on_memory("all_reduce", "float32", ncclz.Lossless(), 64 << 20) is not None
    assert pol.exact_on_memory("all_reduce", "float32", LOSSY, 64 << 20) is not None
    # both measured, compression 4x faster (say, a machine where the copies crawl): it runs
    pol = _measured(_measured(_pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0)), None,
                              x.nbytes, seconds=0.4), LOSSY, x.nbytes, seconds=0.1)
    ch = pol.choose("all_reduce", x, LOSSY)
    assert ch.mode == "lossy" and ch.compression == LOSSY, str(ch)


def test_one_host_over_shared_memory_runs_none_and_says_why():
    """The model's side (a compressed mode measured, so the rule stands aside): the memory-class
    estimate is the link, and the model runs none too."""
    x = np.zeros(16 << 20, np.float32)
    pol = _measured(_pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0)), ncclz.Lossless(),
                    x.nbytes, seconds=10.0)
    assert pol.link_gbps is None  # nothing configured or observed ...
    assert pol.link_used() == (40.0, "memory")  # ... but the link is memory
    for req in (LOSSY, ncclz.Lossless()):
        ch = pol.choose("all_reduce", x, req)
        assert ch.mode == "none" and ch.compression is None, str(ch)
        assert ch.reason.startswith("one host over shared memory, link 40 Gbit/s (memory-class estimate): "), ch.reason
    # the same policy without the memory link has no evidence: the request runs as asked
    blind = _pinned(Policy(4, cores_per_rank=1, memory_link="", memory_gbps=40.0))
    ch = blind.choose("all_reduce", x, LOSSY)
    assert ch.mode == "lossy" and "unknown" in ch.reason, str(ch)
    # threads of one process: memory too, named so
    inproc = _measured(_pinned(Policy(4, cores_per_rank=1, memory_link="inproc", memory_gbps=40.0)),
                       ncclz.Lossless(), x.nbytes, seconds=10.0)
    ch = inproc.choose("all_reduce", x, LOSSY)
    assert ch.mode == "none" and ch.reason.startswith("one host, ranks as threads of one process, link"), str(ch)


def test_the_memory_rate_scales_with_the_codec_cores():
    """The exact call's copies run on the cores the codec would get: the estimate is per core."""
    pol = Policy(4, cores_per_rank=0.5, memory_link="shm", memory_gbps=40.0)
    assert pol.link_used() == (20.0, "memory")
    pol = Policy(4, cores_per_rank=16, nchannels=4, memory_link="shm", memory_gbps=40.0)
    assert pol.link_used() == (160.0, "memory")  # capped at the channel count, as the codec is


def test_a_configured_rate_overrides_the_memory_link(monkeypatch):
    x = np.zeros(16 << 20, np.float32)
    slow = _pinned(Policy(4, link_gbps=0.05, cores_per_rank=1, memory_link="shm", memory_gbps=40.0))
    ch = slow.choose("all_reduce", x, LOSSY)
    assert slow.link_used() == (0.05, "configured")
    assert ch.mode == "lossy" and "one host" not in ch.reason, str(ch)
    for var in ("NCCLZ_LINK_GBPS", "NCCLZ_SOCKET_THROTTLE_GBPS"):
        monkeypatch.setenv(var, "0.05")
        pol = _pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0))
        assert pol.link_used() == (0.05, "configured"), var
        ch = pol.choose("all_reduce", x, LOSSY)
        assert ch.mode == "lossy" and "one host" not in ch.reason, (var, str(ch))
        monkeypatch.delenv(var)


def test_observed_calls_count_above_the_memory_estimate():
    x = np.zeros(16 << 20, np.float32)
    # (lossless measured slow: the model decides, the rule stands aside)
    pol = _measured(_pinned(Policy(4, cores_per_rank=1, memory_link="shm", memory_gbps=40.0)), ncclz.Lossless(),
                    x.nbytes, seconds=10.0)
    # a compressed call says only that the link is at least that fast: no observation of its own
    pol.observe_link("lossy", 4 << 20, 1.0)
    assert pol.link_used() == (40.0, "memory")
    # an uncompressed call slower than memory (a cold first call, other load) does not lower it: the
    # CPU slowed it, and would slow the codec as much
    pol.observe_link("none", 64 << 20, 64 * 2**20 * 8 / 0.5e9 / 0.95)
    assert pol.link_gbps == pytest.approx(0.5)
    assert pol.link_used() == (40.0, "memory")
    ch = pol.choose("all_reduce", x, LOSSY)
    assert ch.mode == "none" and "(memory-class estimate)" in ch.reason, str(ch)
    # a faster one replaces it
    pol.link_gbps = None
    pol.observe_link("none", 64 << 20, 64 * 2**20 * 8 / 80e9 / 0.95)
    g, src = pol.link_used()
    assert src == "observed" and g == pytest.approx(80.0)
    ch = pol.choose("all_reduce", x, LOSSY)
    assert ch.mode == "none" and ch.reason.startswith("one host over shared memory, link 80 Gbit/s (observed)"), str(ch)
    # elsewhere (no memory link) a slow observed rate is the link, and compression pays on it
    far = _pinned(Policy(4, cores_per_rank=1, memory_link="", memory_gbps=40.0))
    far.observe_link("none", 64 << 20, 64 * 2**20 * 8 / 0.5e9 / 0.95)
    assert far.link_used()[1] == "observed" and far.choose("all_reduce", x, LOSSY).mode == "lossy"


def test_device_calls_on_one_host_run_none():
    """Device calls take DEVICE_MEMORY_GBPS on a memory-class host (not the host memcpy): with the
    model's device codec speeds, none on 2 to 8 ranks, even at a ratio of 30."""
    x = np.zeros(16 << 20, np.float32)
    for n in (2, 4, 8):
        pol = _pinned(Policy(n, cores_per_rank=1, memory_link="shm", memory_gbps=40.0), ratio=30.0)
        assert pol.link_used(device=True) == (ml.DEVICE_MEMORY_GBPS, "memory")
        for req in (LOSSY, ncclz.Lossless()):
            ch = pol.choose("all_reduce", x, req, device=True)
            assert ch.mode == "none" and ch.reason.startswith("one host over shared memory"), (n, str(ch))
    # on a slow configured link the same device call compresses (the device branch is unchanged)
    pol = _pinned(Policy(4, link_gbps=10.0, cores_per_rank=1, memory_link="shm"), ratio=30.0)
    assert pol.choose("all_reduce", x, LOSSY, device=True).mode == "lossy"


def test_memory_link_from_the_topology():
    assert ml.memory_link(Topo(1, "shm"), 4) == "shm"
    assert ml.memory_link(Topo(1, "inproc"), 4) == "inproc"
    assert ml.memory_link(Topo(1, "socket"), 4) == ""  # loopback or namespaces: a link to measure
    assert ml.memory_link(Topo(2, "shm", 2, True), 4) == ""  # several hosts (NCCLZ_TOPO_HOSTS=2x2, the lab)
    assert ml.memory_link(Topo(4, "", 1), 4) == ""  # one rank per host (the lab's namespaces)
    assert ml.memory_link(Topo(1, ""), 1) == ""  # one rank: no link at all
    assert ml.memory_link(None, 4) == ""


def test_the_communicator_policy_gets_the_memory_link():
    x = np.zeros(4 << 20, np.float32)
    call = Call("all_reduce", "float32", x.nbytes, "lossy_rel", 1e-3, LOSSY, lambda: x)
    lead = CommPolicy(resolve_setting("auto"), rank=0, world_size=4, topology=Topo(1, "shm"))
    assert lead.model.memory_link == "shm"
    # a Policy given to the communicator gets it filled in, unless it says otherwise
    given = _pinned(Policy(memory_gbps=40.0, cores_per_rank=1))
    d = CommPolicy(resolve_setting(given), rank=0, world_size=4, topology=Topo(1, "shm")).choose(call)
    assert given.memory_link == "shm"
    assert d.lighter == "none" and "one host over shared memory" in d.describe("none", True), d.describe("none", True)
    # by rule: the data is never looked at (nothing to calibrate), and last_stats.policy says why
    for req, mode in ((LOSSY, "lossy_rel"), (ncclz.Lossless(), "lossless")):

        def no_data():
            raise AssertionError("the policy read the data")

        blind_call = Call("all_reduce", "float32", x.nbytes, mode, 1e-3 if req is LOSSY else 0.0, req, no_data)
        fresh = CommPolicy(resolve_setting("auto"), rank=0, world_size=4, topology=Topo(1, "shm"))
        d = fresh.choose(blind_call)
        assert d.lighter == "none" and d.describe("none", True) == f"auto: none ({RULE}, whatever the data " \
            "(nothing calibrated))", d.describe("none", True)
        assert fresh.model.calibrations() == []
        # where rank 0's exact run could not keep the bound (the runtime ignores the proposal), it says so
        assert d.describe(mode, False).endswith("not taken: the exact none sum in the element type could exceed "
                                                "the bound"), d.describe(mode, False)
    off = _pinned(Policy(memory_link="", cores_per_rank=1))
    d = CommPolicy(resolve_setting(off), rank=0, world_size=4, topology=Topo(1, "shm")).choose(call)
    assert off.memory_link == "" and d.lighter == "" and "unknown" in d.describe("lossy_rel", False)
    # several hosts: unaffected, no evidence, the request runs as asked
    multi = CommPolicy(resolve_setting("auto"), rank=0, world_size=4, topology=Topo(2, "shm", 2, True))
    assert multi.model.memory_link == ""
    multi.reset(_pinned(Policy(cores_per_rank=1)))
    d = multi.choose(call)
    assert d.lighter == "" and "unknown" in d.describe("lossy_rel", False)


def test_the_measured_memory_rate():
    g = ml.memory_link_gbps()
    assert g == pytest.approx(ml.memcpy_Bps() / 2 * 8 / 1e9)
    assert ml.memcpy_Bps() is ml.memcpy_Bps()  # measured once per process
    assert 1.0 < g < 1e4, g  # any real machine copies between 0.25 and 2500 GB/s on one thread
    assert Policy(4, memory_link="shm").memory_gbps == g
    with pytest.raises(ValueError, match="memory_link"):
        Policy(4, memory_link="socket")
    with pytest.raises(ValueError, match="memory_gbps"):
        Policy(4, memory_gbps=0)


# ---- real ranks ------------------------------------------------------------------------------------------
def _policy_run(tmp_path, n, transport, args):
    ranks = run_ranks(tmp_path, "policy", n, transport, args=args, env=dict(CLEAN), timeout=180)
    ranks.assert_ok()
    return [res["calls"] for res in ranks.results]


@pytest.mark.parametrize("n", [2, 4])
def test_shm_lossy_request_runs_none_exactly(tmp_path, n):
    """Ranks on one host over shared memory, nothing configured: a lossy request of 1.5 MiB runs none
    from the first call, on every rank, with the result bits of the uncompressed call (`exact`: the
    scenario compares them), and last_stats says so."""
    calls = _policy_run(tmp_path, n, "shm", ["count=393216", "comp=rel=1e-3", "colls=all_reduce,all_gather", "exact"])
    for c in ("all_reduce", "all_gather"):
        assert [cl[c]["compression"] for cl in calls] == ["none"] * n, c
        assert calls[0][c]["requested"] == "lossy_rel(0.001)"
        assert calls[0][c]["policy"].startswith("auto: none (one host over shared memory"), calls[0][c]["policy"]
        assert calls[1][c]["policy"] == "auto: rank 0 chose none"
        assert len({cl[c]["hash"] for cl in calls}) == 1


@pytest.mark.parametrize("comp", ["rel=1e-3", "abs=1e-2", "lossless"])
def test_shm_request_runs_none_by_rule_without_calibrating(tmp_path, comp):
    """4 ranks over shared memory, 6 MiB (above the direct schedules' threshold): lossy and lossless
    requests of every direct collective run none by the memory-class rule on every rank, bit for bit
    the uncompressed call's result (the scenario's `exact`), and rank 0's policy calibrated nothing."""
    ranks = run_ranks(tmp_path, "policy", 4, "shm", args=["count=1572864", f"comp={comp}", "exact"],
                      env=dict(CLEAN), timeout=180)
    ranks.assert_ok()
    calls = [res["calls"] for res in ranks.results]
    for c in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        assert [cl[c]["compression"] for cl in calls] == ["none"] * 4, c
        assert calls[0][c]["policy"].startswith(f"auto: none ({RULE}"), calls[0][c]["policy"]
        assert calls[3][c]["policy"] == "auto: rank 0 chose none"
    assert ranks.results[0]["calibrations"] == []




@pytest.mark.parametrize("hosts", ["1x4", "2x2"])
def test_hosts_from_the_topology_override(tmp_path, hosts):
    """NCCLZ_TOPO_HOSTS (as topo_bench's and the scale model's runs set it) decides: 4 shm ranks
    declared one host of 4 run a lossy request as none; declared 2 hosts of 2 they have no link
    evidence, and the request runs as asked, as before this rule."""
    env = dict(CLEAN, NCCLZ_TOPO_HOSTS=hosts)
    ranks = run_ranks(tmp_path, "policy", 4, "shm", args=["count=393216", "comp=rel=1e-3", "colls=all_reduce"],
                      env=env, timeout=180)
    ranks.assert_ok()
    call = ranks.results[0]["calls"]["all_reduce"]
    if hosts == "1x4":
        assert call["compression"] == "none" and "one host over shared memory" in call["policy"], call
    else:
        assert call["compression"] == "lossy_rel(0.001)" and "unknown" in call["policy"], call


@pytest.mark.parametrize("what", ["compression", "bound", "count"])
def test_shm_mismatched_requests_still_raise_everywhere(tmp_path, what):
    """Rank 0's rule runs its lossy request as none without looking at the data, but the call is still
    matched across ranks: a rank asking none, another bound, or another size raises on every rank."""
    ranks = run_ranks(tmp_path, "mismatch", 3, "shm", args=[what, "big"], env=dict(CLEAN), nccl_timeout=10,
                      timeout=90)
    ranks.assert_ok()
    for res in ranks.results:
        assert res["error"] == "RemoteError" and "mismatched calls" in res["message"], res
