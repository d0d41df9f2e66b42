"""The compression policy (ncclz.policy) and the Communicator's use of it (ncclz.comm).

Real ranks (processes, tests/python/_policy_scenarios.py scenario_policy): each checks every element of
every result against the requested bound (bit-identity for lossless) and reports the mode each
call ran with; here we check which mode ran, that all ranks ran the same one even when their
local inputs (link rate, data) differ, the opt-outs, and the errors for bad configuration.
The link rate comes from NCCLZ_LINK_GBPS or the socket throttle, never from timing a test, and
where a decision rests on codec speeds the test pins them (Policy.pin), so the decisions asserted
here do not depend on this machine's speed or load. Everything is read through public API
(comm.policy, Policy.calibrations() / measurements() / measured(), Communicator.reset_policy).
"""

from __future__ import annotations

import logging

import ncclz
import numpy as np
import pytest
from ncclz.policy import (
    DENSE_MARGIN,
    EFFORTS,
    FAST_MARGIN,
    MID_MARGIN,
    Call,
    CommPolicy,
    Policy,
    effort_of_margin,
    reduction_terms,
    resolve_setting,
)
from ncclz.tools.data import rank_input
from test_comm import free_port, run_ranks

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)

COLLS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
CLEAN = {"NCCLZ_LINK_GBPS": "", "NCCLZ_SOCKET_THROTTLE_GBPS": "", "NCCLZ_POLICY": ""}


def _calls(ranks):
    ranks.assert_ok()
    calls = [res["calls"] for res in ranks.results]
    # every rank ran every call with the same mode and got the same bits (where results are shared)
    for c in COLLS:
        if c not in calls[0]:
            continue
        modes = {cl[c]["compression"] for cl in calls}
        assert len(modes) == 1, f"{c}: ranks ran different modes {modes}"
        if c != "reduce_scatter":
            assert len({cl[c]["hash"] for cl in calls}) == 1, f"{c}: ranks got different results"
    assert all(res["checks"] > 0 for res in ranks.results if "lossless" not in str(res["calls"]))
    return calls


def _run(tmp_path, n, args, env=None, rank_env=None, transport="shm", name="policy"):
    e = dict(CLEAN)
    e.update(env or {})
    return run_ranks(tmp_path, name, n, transport, args=args, env=e, rank_env=rank_env, timeout=180)


def test_unknown_link_runs_the_requested_mode(tmp_path):
    # sockets: a link to measure even on one host (loopback, or the lab's namespaces of one kernel); on
    # shared memory the link is memory, evidence of its own (test_policy_onehost.py)
    calls = _calls(_run(tmp_path, 3, ["count=393216", "comp=rel=1e-3"], transport="socket"))
    for c in COLLS:
        assert calls[0][c]["compression"] == "lossy_rel(0.001)", calls[0][c]
        assert "unknown" in calls[0][c]["policy"], calls[0][c]["policy"]
        assert calls[1][c]["policy"] == "auto: rank 0 kept the requested mode"


def test_fast_link_picks_none_and_keeps_the_bound(tmp_path):
    ranks = _run(tmp_path, 3, ["count=393216", "comp=rel=1e-3"], env={"NCCLZ_LINK_GBPS": "10000"})
    calls = _calls(ranks)
    for c in COLLS:
        assert calls[0][c]["compression"] == "none", calls[0][c]
        assert calls[0][c]["requested"] == "lossy_rel(0.001)"
        assert calls[0][c]["policy"].startswith("auto: none"), calls[0][c]["policy"]
        assert calls[2][c]["policy"] == "auto: rank 0 chose none"
        # the promise stands (the workers checked every element against E and against the achieved
        # bound); the stats report E as requested_bound and what the exact run achieved as error_bound
        assert calls[0][c]["requested_bound"] > 0, calls[0][c]
        assert calls[0][c]["error_bound"] <= calls[0][c]["requested_bound"], calls[0][c]
    # rank 0 recorded each call's time with the mode that ran (none), one call per collective; the
    # first call of a class is cold, so none has a measured time yet. The lightened calls (all four have
    # a direct schedule) ran the latency algorithm (direct: every rank carried its addresses with the lossy request;
    # 1.5 MB with 3 ranks is above every collective's direct size, core::direct_from)
    ms = ranks.results[0]["measurements"]
    assert sorted(m["collective"] for m in ms) == sorted(COLLS), ms
    assert all(m["calls"] == 1 and m["seconds"] is None for m in ms), ms
    assert all(m["mode"] == "none@latency" for m in ms), ms
    assert all(m["dtype"] == "float32" for m in ms), ms
    assert "measurements" not in ranks.results[1]  # only rank 0 learns


def test_tiny_message_picks_none(tmp_path):
    calls = _calls(_run(tmp_path, 2, ["count=1000", "comp=abs=0.01", "colls=all_reduce,broadcast"],
                        env={"NCCLZ_LINK_GBPS": "0.01"}))
    for c in ("all_reduce", "broadcast"):
        assert calls[0][c]["compression"] == "none" and "latency-bound" in calls[0][c]["policy"]


def test_slow_link_keeps_lossy(tmp_path):
    calls = _calls(_run(tmp_path, 3, ["count=393216", "comp=rel=1e-3"], env={"NCCLZ_LINK_GBPS": "0.01"}))
    for c in COLLS:
        assert calls[0][c]["compression"] == "lossy_rel(0.001)", calls[0][c]
        assert "faster than" in calls[0][c]["policy"]


def test_socket_throttle_is_link_evidence(tmp_path):
    # the root-less throttle paces the sockets at 0.05 Gbit/s: a slow link, compression is kept
    calls = _calls(_run(tmp_path, 2, ["count=262144", "comp=rel=1e-3", "colls=all_reduce"],
                        env={"NCCLZ_SOCKET_THROTTLE_GBPS": "0.05"}, transport="socket"))
    assert calls[0]["all_reduce"]["compression"] == "lossy_rel(0.001)"
    assert "faster than" in calls[0]["all_reduce"]["policy"]


def test_lossless_request_on_fast_link_runs_none_bit_identical(tmp_path):
    calls = _calls(_run(tmp_path, 2, ["count=524288", "comp=lossless"], env={"NCCLZ_LINK_GBPS": "10000"}))
    for c in COLLS:
        assert calls[0][c]["compression"] == "none" and calls[0][c]["requested"] == "lossless"


@pytest.mark.parametrize("fast_rank0", [True, False])
def test_all_ranks_follow_rank_0(tmp_path, fast_rank0):
    # only rank 0 would choose differently: its link rate differs from the other ranks' (and its
    # data differs too); every rank must run rank 0's choice
    fast, slow = {"NCCLZ_LINK_GBPS": "10000"}, {"NCCLZ_LINK_GBPS": "0.01"}
    rank_env = {0: fast if fast_rank0 else slow, 1: slow if fast_rank0 else fast, 2: {}}
    calls = _calls(_run(tmp_path, 3, ["count=393216", "comp=rel=1e-3"], rank_env=rank_env))
    want = "none" if fast_rank0 else "lossy_rel(0.001)"
    for c in COLLS:
        assert [cl[c]["compression"] for cl in calls] == [want] * 3


def test_lighter_proposal_ignored_when_the_plain_sum_could_exceed_the_bound(tmp_path):
    # abs=1e-5 on values up to ~30: a float32 sum of 3 ranks may round by more than half of that, so the runtime
    # must not take rank 0's "none"; it runs the lossy request (exactly, in float64) instead
    calls = _calls(_run(tmp_path, 3, ["count=3000", "comp=abs=1e-5", "colls=all_reduce,all_gather", "stub=none"]))
    assert calls[0]["all_reduce"]["compression"] == "lossy_abs(1e-05)"
    assert "not taken" in calls[0]["all_reduce"]["policy"]
    # data movement is exact in any type: taken
    assert calls[0]["all_gather"]["compression"] == "none"


def test_a_failing_policy_on_rank_0_runs_the_requested_mode(tmp_path):
    calls = _calls(_run(tmp_path, 2, ["count=262144", "comp=rel=1e-3", "colls=all_reduce,broadcast", "stub=raise"]))
    for c in ("all_reduce", "broadcast"):
        assert calls[0][c]["compression"] == "lossy_rel(0.001)" and "policy failed" in calls[0][c]["policy"]


@pytest.mark.parametrize("how", ["ctor_env", "percall"])
def test_opt_out(tmp_path, how):
    env = {"NCCLZ_LINK_GBPS": "10000"}
    args = ["count=393216", "comp=rel=1e-3"]
    if how == "ctor_env":
        env["NCCLZ_POLICY"] = "off"
    else:
        args.append("percall=off")
    calls = _calls(_run(tmp_path, 3, args, env=env))
    for c in COLLS:
        assert calls[0][c]["compression"] == "lossy_rel(0.001)" and calls[0][c]["policy"] == "off"


def test_a_calls_own_auto_decides_on_an_off_communicator(tmp_path):
    # policy="auto" on one call overrides NCCLZ_POLICY=off as policy="off" overrides "auto": rank 0
    # decides that call (none on a 10000 Gbit/s link) and every rank runs its decision
    env = {"NCCLZ_LINK_GBPS": "10000", "NCCLZ_POLICY": "off"}
    calls = _calls(_run(tmp_path, 3, ["count=393216", "comp=rel=1e-3", "percall=auto"], env=env))
    for c in COLLS:
        assert calls[0][c]["compression"] == "none", calls[0][c]
        assert calls[0][c]["policy"].startswith("auto: none"), calls[0][c]["policy"]
        assert calls[1][c]["policy"] == "auto: rank 0 chose none"


def test_observed_uncompressed_call_gives_the_link_rate(tmp_path):
    ranks = _run(tmp_path, 2, ["count=262144", "comp=rel=1e-3", "colls=all_reduce", "observe"])
    calls = _calls(ranks)
    assert ranks.results[0]["link_gbps"] and ranks.results[0]["link_gbps"] > 0
    # the decision then depends on how fast this machine's shared memory was; it is an informed one
    assert "unknown" not in calls[0]["all_reduce"]["policy"]


def test_measured_calls_flip_the_decision_across_ranks(tmp_path):
    # rank 0 learns from its own calls: after slow compressed calls on a link the model thinks is
    # slow enough for compression, it runs none -- and so do the other ranks
    ranks = _run(tmp_path, 3, ["count=393216", "comp=rel=1e-3", "colls=all_reduce", "measure"],
                 env={"NCCLZ_LINK_GBPS": "0.5"})
    calls = _calls(ranks)
    assert calls[0]["all_reduce"]["compression"] == "none", calls[0]["all_reduce"]
    assert "(measured)" in calls[0]["all_reduce"]["policy"]


# ---- single process: the communicator's configuration and errors ------------------------------------------
def _comm(**kw):
    return ncclz.Communicator(rank=0, world_size=1, master_port=free_port(), token="t", timeout=10, **kw)


def test_policy_config_errors(monkeypatch):
    for k in CLEAN:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ncclz.InvalidArgumentError, match="policy must be one of auto, off"):
        _comm(policy="sometimes")
    with pytest.raises(ncclz.InvalidArgumentError, match="policy must be one of"):
        _comm(policy=3)
    monkeypatch.setenv("NCCLZ_POLICY", "maybe")
    with pytest.raises(ncclz.InvalidArgumentError, match="NCCLZ_POLICY"):
        _comm()
    monkeypatch.setenv("NCCLZ_POLICY", "OFF")
    with _comm() as c:
        assert c.policy_mode == "off"
    monkeypatch.delenv("NCCLZ_POLICY")
    for bad in ("fast", "0", "-1", "inf"):
        monkeypatch.setenv("NCCLZ_LINK_GBPS", bad)
        with pytest.raises(ncclz.InvalidArgumentError, match="NCCLZ_LINK_GBPS"):
            _comm()
    _comm(policy="off").close()  # the link rate is not read with the policy off
    monkeypatch.delenv("NCCLZ_LINK_GBPS")
    with pytest.raises(ncclz.InvalidArgumentError, match="world_size=3"):
        _comm(policy=Policy(3))  # a model of another world size
    with _comm() as c:
        assert c.policy_mode == "auto"
        x = np.ones(100, np.float32)
        with pytest.raises(ncclz.InvalidArgumentError, match="policy must be one of"):
            c.all_reduce(x, compression=ncclz.Lossless(), policy="never")
        c.all_reduce(x, compression=ncclz.Lossless(), policy="OFF")
        assert c.last_stats.policy == "off" and c.last_stats.compression == "lossless"
        c.all_reduce(x, compression=ncclz.Lossless())
        assert c.last_stats.compression == "lossless" and c.last_stats.policy.startswith("auto")
        c.all_reduce(x)
        assert c.last_stats.policy == "" and c.last_stats.requested == "none"


def test_native_lighter_validation():
    H = ncclz._core.comm.PolicyHints
    assert H("none").lighter == "none" and H(lighter="lossless").lighter == "lossless"
    assert H().lighter == "" and H().rans_margin == -1.0 and H(rans_margin=0.4).rans_margin == 0.4
    with pytest.raises(ncclz.InvalidArgumentError, match="lighter"):
        H("lossy")
    # the policy's hints are not part of the user's Compression
    with pytest.raises(TypeError):
        ncclz._core.comm.Compression("lossy_rel", 1e-3, "", 0, "none")


def test_the_communicator_gives_its_channel_count_and_size_to_the_policy(monkeypatch):
    # the model caps a call's codec cores at the communicator's channel count: it comes from the
    # communicator (never a default guessed in Python)
    monkeypatch.delenv("NCCLZ_NCHANNELS", raising=False)
    with _comm(nchannels=3) as c:
        assert c.policy.nchannels == 3 and c.policy.n == 1
        assert c.policy.cores <= 3
    monkeypatch.setenv("NCCLZ_NCHANNELS", "5")
    mine = Policy(cores_per_rank=64)
    with _comm(policy=mine) as c:
        assert c.policy is mine and mine.nchannels == 5 and mine.n == 1 and mine.cores == 5
    assert Policy(4, cores_per_rank=64).cores == 64  # no channel count known: no cap
    assert Policy(4, cores_per_rank=64, nchannels=2).cores == 2


def test_reset_policy_forgets_what_it_learned():
    with _comm() as comm:
        pol = comm.policy
        for _ in range(2):
            pol.record("all_reduce", "float32", 1 << 26, None, 0.1)
        assert pol.measured("all_reduce", "float32", 1 << 26, None) == pytest.approx(0.1)
        comm.reset_policy()
        fresh = comm.policy
        assert fresh is not pol and fresh.measurements() == [] and fresh.calibrations() == []
        mine = Policy(margin=0.5)
        comm.reset_policy(mine)
        assert comm.policy is mine and mine.n == 1
        with pytest.raises(ncclz.InvalidArgumentError, match="must be an ncclz.policy.Policy"):
            comm.reset_policy("fast")


# ---- the contract comm.py depends on (ncclz.policy.CommPolicy), without processes ----------------------------
class _Stats:
    """The native call statistics CommPolicy.record reads."""

    def __init__(self, ran, wall_s, wire_bytes=0, lightened=False):
        self.ran_mode, self.wall_s, self.wire_bytes, self.lightened = ran, wall_s, wire_bytes, lightened


def _call(coll="all_reduce", mode="lossy_rel", bound=1e-3, nbytes=64 << 20, data=None):
    return Call(coll, "float32", nbytes, mode, bound, None, data if data is not None else (lambda: np.zeros(16, np.float32)))


def _pinned(n=4, gbps=0.5, **kw):
    """A Policy whose codec ratio and speeds are fixed (nothing timed on this machine)."""
    pol = Policy(n, link_gbps=gbps, cores_per_rank=1, efforts=False, **kw)
    pol.pin("lossless", ratio=1.2, enc_Bps=1e9, dec_Bps=2e9)
    pol.pin("lossy", ratio=8.0, enc_Bps=1e9, dec_Bps=2e9)
    return pol


def test_comm_policy_only_rank_0_decides_and_learns():
    follower = CommPolicy(resolve_setting("auto"), rank=1, world_size=4)
    d = follower.choose(_call())
    assert not d.learn and d.lighter == "" and d.rans_margin is None
    assert d.describe("none", True) == "auto: rank 0 chose none"
    assert d.describe("lossy_rel", False) == "auto: rank 0 kept the requested mode"
    follower.record(d, _Stats("none", 0.2, 64 << 20, lightened=True))
    # a small compressed call: the follower expects rank 0 to run it exact (its hints say so, so that
    # it sends its data with the descriptor); above latency_bytes, or with no latency_bytes, it does not
    small = CommPolicy(resolve_setting("auto"), rank=1, world_size=4, latency_bytes=64 << 10)
    assert small.choose(_call(nbytes=4096)).lighter == "none"
    assert small.choose(_call(nbytes=64 << 10)).lighter == "none"
    assert small.choose(_call(nbytes=(64 << 10) + 4)).lighter == ""
    assert small.choose(_call(nbytes=4096, mode="none")).lighter == ""
    assert follower.choose(_call(nbytes=4096)).lighter == ""
    assert small.choose(_call(nbytes=4096)).describe("none", True) == "auto: rank 0 chose none"
    # ... and below a given model's min_bytes only
    tight = CommPolicy(resolve_setting(Policy(min_bytes=1024)), rank=1, world_size=4, latency_bytes=64 << 10)
    assert tight.choose(_call(nbytes=1000)).lighter == "none" and tight.choose(_call(nbytes=4096)).lighter == ""
    assert follower._model is None and small._model is None  # a follower never builds (or calibrates) a model
    # rank 0 proposes none for a small call at once (the model's first rule, no calibration)
    lead = CommPolicy(resolve_setting("auto"), rank=0, world_size=4, latency_bytes=64 << 10)
    d = lead.choose(_call(nbytes=4096, data=lambda: pytest.fail("a small call needs no data")))
    assert d.lighter == "none" and d.learn and "latency-bound" in d.describe("none", True)
    assert "not taken" in d.describe("lossy_rel", False)

    slow = CommPolicy(resolve_setting(_pinned(gbps=0.5)), rank=0, world_size=4)
    d = slow.choose(_call())
    assert d.learn and d.lighter == "" and d.describe("lossy_rel", False).startswith("auto: lossy (lossy predicted")
    fast = CommPolicy(resolve_setting(_pinned(gbps=10000)), rank=0, world_size=4)
    d = fast.choose(_call())
    assert d.lighter == "none" and d.describe("none", True).startswith("auto: none (lossy not predicted")
    # the runtime may refuse a lighter proposal (a plain sum could exceed the bound): the text says so
    assert "not taken" in d.describe("lossy_rel", False)
    # what ran is what is recorded: the lightened call under none, a refused proposal under the lossy spec
    for _ in range(2):
        fast.record(d, _Stats("none", 0.3, 96 << 20, lightened=True))
    assert fast.model.measured("all_reduce", "float32", 64 << 20, None) == pytest.approx(0.3)
    for _ in range(2):
        fast.record(d, _Stats("lossy_rel", 0.2, 12 << 20))
    assert fast.model.measured("all_reduce", "float32", 64 << 20, ncclz.Lossy(rel=1e-3)) == pytest.approx(0.2)
    assert fast.model.link_gbps == 10000  # a configured rate: observations do not change it


def test_comm_policy_of_an_off_communicator_learns_only_from_calls_that_ask_auto():
    lead = CommPolicy(resolve_setting("off"), rank=0, world_size=4)
    d = lead.choose(_call())
    assert not d.learn and d.describe("lossy_rel", False) == "off"
    lead.record(d, _Stats("lossy_rel", 0.2, 12 << 20))
    lead.record(None, _Stats("none", 0.2, 64 << 20))  # a send: no link rate learned either
    assert lead._model is None  # nothing built, nothing learned
    lead.reset(_pinned(gbps=10000))
    d = lead.choose(_call(), "auto")
    assert d.learn and d.lighter == "none" and d.describe("none", True).startswith("auto: none (lossy not predicted")
    for _ in range(2):
        lead.record(d, _Stats("none", 0.3, 96 << 20, lightened=True))
    assert lead.model.measured("all_reduce", "float32", 64 << 20, None) == pytest.approx(0.3)
    d = lead.choose(_call(), "off")
    assert not d.learn
    for _ in range(2):
        lead.record(d, _Stats("lossy_rel", 0.01, 12 << 20))
    assert lead.model.measured("all_reduce", "float32", 64 << 20, ncclz.Lossy(rel=1e-3)) is None
    # the other ranks follow rank 0 on such a call, and build no model
    follower = CommPolicy(resolve_setting("off"), rank=1, world_size=4)
    d = follower.choose(_call(), "auto")
    assert not d.learn and d.describe("none", True) == "auto: rank 0 chose none" and follower._model is None


def test_comm_policy_paths_that_do_not_consult_the_model():
    pol = CommPolicy(resolve_setting("auto"), rank=0, world_size=4)
    none = pol.choose(_call(mode="none", bound=0.0))
    assert none.learn and none.describe("none", False) == ""  # uncompressed calls are measured too
    off = pol.choose(_call(), override="OFF")
    assert off.learn and off.describe("lossy_rel", False) == "off" and off.lighter == ""
    with pytest.raises(ncclz.InvalidArgumentError, match="all_reduce: policy must be one of"):
        pol.choose(_call(), override="sometimes")
    no_view = pol.choose(_call(data=lambda: (_ for _ in ()).throw(TypeError("no NumPy view"))))
    assert "no NumPy view" in no_view.describe("lossy_rel", False)

    class Broken:
        def choose(self, coll, x, requested, nbytes=None):
            raise RuntimeError("boom")

    pol.reset(Broken())
    d = pol.choose(_call())
    assert d.lighter == "" and "the policy failed: RuntimeError: boom" in d.describe("lossy_rel", False)
    pol.record(d, _Stats("lossy_rel", 0.1, 2 << 20))  # a model without observe/record: nothing to tell
    # a communicator with the policy off decides nothing, on any rank
    off = CommPolicy(resolve_setting("off"), rank=0, world_size=4)
    assert off.choose(_call()).describe("lossy_rel", False) == "off" and not off.choose(_call()).learn


def test_comm_policy_codec_effort_reaches_the_decision(caplog):
    caplog.set_level(logging.DEBUG, logger="ncclz.policy")
    pol = Policy(4, link_gbps=0.5, cores_per_rank=0.5)
    for mode, enc in (("lossless", 1e9), ("lossy", 0.3e9), ("lossy/mid", 0.6e9), ("lossy/fast", 3e9)):
        pol.pin(mode, ratio=1.2 if mode == "lossless" else 8.0, enc_Bps=enc, dec_Bps=2 * enc)
    cp = CommPolicy(resolve_setting(pol), rank=0, world_size=4)
    d = cp.choose(_call())
    assert d.effort == "fast" and d.rans_margin == FAST_MARGIN, d.describe("lossy_rel", False)
    assert d.describe("lossy_rel", False).startswith("auto: lossy/fast")
    # rank 0 logs each decision (the ncclz.policy logger; NCCLZ_DEBUG=INFO prints it)
    assert any("all_reduce 67108864 B, requested lossy_rel(0.001): auto: lossy/fast (" in r.getMessage()
               for r in caplog.records), caplog.text
    for _ in range(2):
        cp.record(d, _Stats("lossy_rel", 0.25, 12 << 20))
    assert pol.measured("all_reduce", "float32", 64 << 20, ncclz.Lossy(rel=1e-3), effort="fast") == pytest.approx(0.25)
    assert pol.measured("all_reduce", "float32", 64 << 20, ncclz.Lossy(rel=1e-3)) is None


# ---- the model (ncclz.policy.Policy) -------------------------------------------------------------------------
def test_policy_choose_rules(monkeypatch):
    monkeypatch.delenv("NCCLZ_LINK_GBPS", raising=False)
    monkeypatch.delenv("NCCLZ_SOCKET_THROTTLE_GBPS", raising=False)
    x = np.zeros(16 << 20, np.float32)
    pol = Policy(4, cores_per_rank=1, efforts=False)
    assert pol.link_gbps is None
    assert pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3)).mode == "lossy"  # unknown link: as asked
    # ... except a small message, latency-bound on any link: none
    ch = pol.choose("all_reduce", np.zeros(1000, np.float32), ncclz.Lossy(rel=1e-3))
    assert ch.mode == "none" and "latency-bound" in ch.reason, ch
    pol.link_gbps = 1.0
    # a codec that barely compresses is not worth it; one that compresses 10x at 1 GB/s is
    pol.pin("lossless", ratio=1.05, enc_Bps=1e9, dec_Bps=1e9).pin("lossy", ratio=10, enc_Bps=1e9, dec_Bps=1e9)
    assert pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3)).mode == "lossy"
    assert pol.choose("all_reduce", x, ncclz.Lossless()).mode == "none"
    assert pol.choose("all_reduce", x, None).mode == "none"
    ch = pol.choose("all_reduce", np.zeros(1000, np.float32), ncclz.Lossy(rel=1e-3))
    assert ch.mode == "none" and "latency-bound" in ch.reason
    pol.pin("lossy", ratio=10, enc_Bps=1e7, dec_Bps=1e7)  # a codec slower than the link
    assert pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3)).mode == "none"
    # data the codec does not take: no calibration, the requested mode runs
    z = np.zeros(1 << 20, np.complex64)
    ch = Policy(4, link_gbps=1.0, cores_per_rank=1).choose("all_reduce", z, ncclz.Lossless())
    assert ch.mode == "lossless" and "no calibration" in ch.reason, str(ch)


def test_policy_device_calls_use_the_device_codec_speeds(monkeypatch):
    """A call of CUDA arrays the runtime codes on the GPU (device=True) is predicted with the model's
    device codec speeds, not the host calibration's and the rank's cores: at 100 Gbit/s a host codec
    of 0.2 GB/s keeps compression off, the device's does not; the device has one lossy variant (no
    rANS: the fast effort's calibration and rANS margin); its measurements are filed apart (the dtype
    with @cuda), for the model and through CommPolicy.record."""
    monkeypatch.delenv("NCCLZ_LINK_GBPS", raising=False)
    monkeypatch.delenv("NCCLZ_SOCKET_THROTTLE_GBPS", raising=False)
    x = np.zeros(16 << 20, np.float32)
    pol = Policy(4, link_gbps=100.0, cores_per_rank=1)
    for m in ("lossy", "lossy/mid", "lossy/fast"):
        pol.pin(m, ratio=8.0, enc_Bps=2e8, dec_Bps=2e8)
    pol.pin("lossless", ratio=1.1, enc_Bps=2e8, dec_Bps=2e8)
    spec = ncclz.Lossy(rel=1e-3)
    host = pol.choose("all_reduce", x, spec)
    assert host.mode == "none", host
    dev = pol.choose("all_reduce", x, spec, device=True)
    assert dev.mode == "lossy" and dev.rans_margin == FAST_MARGIN and dev.effort == "fast", dev
    assert set(dev.predicted_s) == {"none", "lossless", "lossy"}
    assert dev.predicted_s["lossy"] < host.predicted_s["lossy"] / 10
    assert dev.predicted_s["none"] == pytest.approx(host.predicted_s["none"])  # the same link
    # the model itself: the device speeds replace the calibration's and the cores
    m = pol.model
    cal = pol.calibrate(x, spec, effort="fast")
    t_host = m.predict("all_reduce", 4, 64 << 20, 100.0, 1.0, cal, lossy=True)
    t_dev = m.predict("all_reduce", 4, 64 << 20, 100.0, 1.0, cal, lossy=True, device=True)
    assert t_dev < t_host / 10
    assert m.predict("all_reduce", 4, 64 << 20, 100.0, 64.0, cal, lossy=True, device=True) == pytest.approx(t_dev)
    # measurements: a device call's time is not a host call's
    for _ in range(3):  # (the first of a class is cold)
        pol.record("all_reduce", "float32@cuda", 64 << 20, spec, 0.5, effort="fast")
    assert pol.measured("all_reduce", "float32@cuda", 64 << 20, spec, "fast") == pytest.approx(0.5)
    assert pol.measured("all_reduce", "float32", 64 << 20, spec, "fast") is None
    lead = CommPolicy(resolve_setting(pol), rank=0, world_size=4)
    call = Call("all_reduce", "float32", 32 << 20, "lossy_rel", 1e-3, None, lambda: x[: 8 << 20], device=True)
    d = lead.choose(call)
    assert d.effort == "fast" and d.rans_margin == FAST_MARGIN
    for _ in range(3):
        lead.record(d, _Stats("lossy_rel", 0.25, 4 << 20))
    assert pol.measured("all_reduce", "float32@cuda", 32 << 20, spec, "fast") == pytest.approx(0.25)
    assert pol.measured("all_reduce", "float32", 32 << 20, spec, "fast") is None


def test_policy_pins_replace_measurements():
    x = rank_input("smooth", 0, 1 << 16)
    pol = Policy(4, link_gbps=1.0, cores_per_rank=1, sample_bytes=1 << 18, reps=1)
    measured = pol.calibrate(x, ncclz.Lossy(rel=1e-3))
    assert measured.ratio > 2 and measured.sample_bytes == x.nbytes and measured.pinned == ()
    pol.pin("lossy", enc_Bps=5e8, dec_Bps=7e8)  # speeds pinned, the ratio still measured on the data
    c = pol.calibrate(x, ncclz.Lossy(rel=1e-3))
    assert (c.enc_Bps, c.dec_Bps, c.pinned) == (5e8, 7e8, ("enc_Bps", "dec_Bps"))
    assert c.ratio == pytest.approx(measured.ratio)
    full = Policy(4, link_gbps=1.0).pin("lossless", ratio=3.0, enc_Bps=1e9, dec_Bps=1e9)
    c = full.calibrate(x, ncclz.Lossless())
    assert c.ratio == 3.0 and c.sample_bytes == 0 and c.seconds == 0  # fully pinned: the codec never ran
    assert [(k.mode, k.dtype) for k in full.calibrations()] == [("lossless", "float32")]
    with pytest.raises(ValueError, match="unknown mode"):
        full.pin("zstd", ratio=2.0)
    with pytest.raises(ValueError, match="must be a number > 0"):
        full.pin("lossy", ratio=0)


def test_policy_sums_of_mostly_zero_data_are_calibrated_on_sums():
    # A reduction's wire carries partial sums, whose nonzeros are the union of the ranks': one
    # rank's 99%-zero sample overstates the ratio. With lossless coding mostly-zero floats well
    # (Sparse on bit patterns), that made lossless look faster than lossy for sparse gradients,
    # which on the lab's 0.5 Gbit/s link it is not (55 ms vs 31 ms measured for 64 MiB, 4 ranks).
    x = rank_input("sparse", 0, 1 << 20)  # 99% zeros
    dense = rank_input("gaussian", 0, 1 << 20)
    assert reduction_terms("all_reduce", 4, x) == 4 and reduction_terms("reduce_scatter", 4, x) == 4
    assert reduction_terms("all_gather", 4, x) == 0 and reduction_terms("broadcast", 4, x) == 0
    assert reduction_terms("all_reduce", 4, dense) == 0
    assert reduction_terms("all_reduce", 1, x) == 0
    assert reduction_terms("all_reduce", 4, np.zeros(1000, np.float32)) == 0  # nothing to union
    pol = Policy(4, link_gbps=0.5, cores_per_rank=0.5, sample_bytes=1 << 20, reps=1)
    for spec in (ncclz.Lossless(), ncclz.Lossy(rel=1e-3)):
        one, summed = pol.calibrate(x, spec), pol.calibrate(x, spec, sums=4)
        assert summed is not one and summed.sums == 4 and one.sums == 0
        assert summed.ratio < 0.5 * one.ratio, (spec, one.ratio, summed.ratio)
        assert pol.calibrate(x, spec, sums=4) is summed  # cached apart from the plain sample
    # the lossy passes of a mostly-zero sum run on lists: cheaper than the dense quantize
    cal = pol.calibrate(x, ncclz.Lossy(rel=1e-3), sums=4)
    S = 64 << 20
    assert pol.predict("all_reduce", S, cal, lossy=True, mostly_zero=True) < pol.predict("all_reduce", S, cal, lossy=True)
    # and the choice for 64 MiB of sparse gradients on 4 ranks at 0.5 Gbit/s is the requested lossy.
    # The decision rests on the ratios (measured on the sums, deterministic) and on codec speeds:
    # those are pinned to what an idle 2-core VM of this project measures on these sums (lossless
    # encodes 1.1 GB/s and decodes 2.0 GB/s; lossy 0.8 / 1.2 / 2.4 GB/s encode and 5.5 / 5.5 / 4.5 GB/s
    # decode for the three efforts), so that a loaded test machine cannot flip it.
    pol.pin("lossless", enc_Bps=1.1e9, dec_Bps=2.0e9)
    for mode, enc, dec in (("lossy", 0.8e9, 5.5e9), ("lossy/mid", 1.2e9, 5.5e9), ("lossy/fast", 2.4e9, 4.5e9)):
        pol.pin(mode, enc_Bps=enc, dec_Bps=dec)
    ch = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3), nbytes=S)
    assert ch.mode == "lossy", str(ch)
    sums = {c.mode: c for c in pol.calibrations() if c.sums == 4}
    assert set(sums) == {"lossless", "lossy:rel=0.001", "lossy:rel=0.001/mid", "lossy:rel=0.001/fast"}, sums
    assert all(c.pinned == ("enc_Bps", "dec_Bps") for c in sums.values())


def test_policy_observe_lower_bounds(monkeypatch):
    monkeypatch.delenv("NCCLZ_LINK_GBPS", raising=False)
    monkeypatch.delenv("NCCLZ_SOCKET_THROTTLE_GBPS", raising=False)
    pol = Policy(4, cores_per_rank=1)
    assert pol.link_gbps is None and not pol.configured

    class S:
        def __init__(self, comp, wb, ws):
            self.compression, self.wire_bytes, self.wall_s = comp, wb, ws

    pol.observe(S("lossy_rel(0.001)", 100e6, 1.0))
    assert pol.link_gbps is None  # a compressed call alone says nothing definite
    pol.observe(S("none", 1000, 1e-6))
    assert pol.link_gbps is None  # too small
    pol.observe(S("none", 100e6, 1.0))
    g = pol.link_gbps
    assert g == pytest.approx(0.8 / 0.95) and pol.observed == 2  # calls of >= 1 MiB on the wire
    pol.observe(S("lossy_rel(0.001)", 10e6, 1.0))
    assert pol.link_gbps == g  # slower than the estimate: not lowered
    pol.observe(S("lossy_rel(0.001)", 200e6, 1.0))
    assert pol.link_gbps == pytest.approx(1.6 / 0.95)  # the link is at least that fast
    pol.observe_link("none", 100e6, 1.0)
    assert pol.link_gbps == pytest.approx(0.7 * 1.6 / 0.95 + 0.3 * 0.8 / 0.95)  # an exponential average
    fixed = Policy(4, link_gbps=2.0, cores_per_rank=1)
    fixed.observe(S("none", 100e6, 1.0))
    assert fixed.link_gbps == 2.0 and fixed.configured  # a configured rate is not overridden by observations
    pol.link_gbps = 3.0  # setting it configures it
    pol.observe(S("none", 100e6, 1.0))
    assert pol.link_gbps == 3.0
    with pytest.raises(ValueError, match="link_gbps"):
        pol.link_gbps = -1
    monkeypatch.setenv("NCCLZ_SOCKET_THROTTLE_GBPS", "0.25")
    assert Policy(4).link_gbps == 0.25 and Policy(4).configured  # the throttle is link evidence


def _model_policy(gbps, lossless=(1.05, 2e9, 2e9), lossy=(10, 5e9, 5e9), efforts=False, **kw):
    pol = Policy(4, link_gbps=gbps, cores_per_rank=1, efforts=efforts, **kw)
    pol.pin("lossless", ratio=lossless[0], enc_Bps=lossless[1], dec_Bps=lossless[2])
    pol.pin("lossy", ratio=lossy[0], enc_Bps=lossy[1], dec_Bps=lossy[2])
    return pol


def test_policy_measurements_override_the_model():
    # a calibration cached per (dtype, spec) may come from other data: the measured time of the
    # calls themselves (comm.last_stats.wall_s, recorded per size class) wins over the model
    x = np.zeros(16 << 20, np.float32)
    S = x.nbytes
    pol = _model_policy(2.5)  # the model: a fast codec, 10x
    spec = ncclz.Lossy(rel=1e-3)
    assert pol.choose("all_reduce", x, spec).mode == "lossy"
    pol.record("all_reduce", "float32", S, spec, 0.05)  # the first call of a class and mode: ignored (cold)
    pol.record("all_reduce", "float32", S, None, 5.0)
    assert pol.choose("all_reduce", x, spec).measured == ()
    for t in (0.9, 0.6, 0.7):
        pol.record("all_reduce", "float32", S, spec, t)  # but the calls took >= 600 ms
    pol.record("all_reduce", "float32", S, None, 0.34)  # and uncompressed ones 340 ms
    assert pol.measured("all_reduce", "float32", S, spec) == pytest.approx(0.6)
    m = {e.mode: e for e in pol.measurements()}
    assert m["lossy:rel=0.001"].calls == 4 and m["lossy:rel=0.001"].class_bytes == 1 << 26
    assert m["lossy:rel=0.001"].seconds == pytest.approx(0.6) and m["none"].seconds == pytest.approx(0.34)
    ch = pol.choose("all_reduce", x, spec)
    assert ch.mode == "none" and set(ch.measured) == {"none", "lossy"}, str(ch)
    assert "(measured)" in str(ch)
    # with only the plain call measured, the compressed modes' model is scaled by the same factor:
    # a machine 4x slower than the model for plain calls is not assumed fast for compressed ones
    fresh = _model_policy(2.5)
    assert fresh.choose("all_reduce", x, spec).mode == "lossy"
    model_lossy = fresh.choose("all_reduce", x, spec).predicted_s["lossy"]
    none_model = fresh.predict("all_reduce", S, None)
    for _ in range(2):
        fresh.record("all_reduce", "float32", S, None, 4 * none_model)
    ch = fresh.choose("all_reduce", x, spec)
    assert ch.measured == ("none",) and ch.predicted_s["lossy"] == pytest.approx(4 * model_lossy), str(ch)
    assert ch.mode == "lossy"
    # other size classes and dtypes are not affected
    assert pol.choose("all_reduce", np.zeros(1 << 20, np.float32), spec).mode == "lossy"
    assert pol.choose("all_reduce", np.zeros(8 << 20, np.float64), spec).mode == "lossy"
    # the requested mode is re-measured every probe_every-th lighter decision
    pol.probe_every = 4
    modes = [pol.choose("all_reduce", x, spec).mode for _ in range(8)]
    assert modes.count("lossy") == 2 and modes.count("none") == 6, modes
    # a faster measurement brings compression back (the fastest of the last 4 counts)
    pol.record("all_reduce", "float32", S, spec, 0.1)
    assert pol.choose("all_reduce", x, spec).mode == "lossy"


def test_policy_measures_the_requested_mode_before_keeping_it_off():
    # the model says none (a 10 Gbit/s link, a modest codec) and the plain calls, measured, are
    # CPU-bound here (1.9x the model): that error says nothing about the codec, so the requested
    # mode runs until it is measured too, and then the two measurements decide (5% margin)
    x = np.zeros(16 << 20, np.float32)
    S = x.nbytes
    spec = ncclz.Lossy(rel=1e-3)

    def fresh(enc_Bps):
        return _model_policy(10, lossy=(3.0, enc_Bps, 2 * enc_Bps))

    pol = fresh(1e9)
    first = pol.choose("all_reduce", x, spec)
    assert first.mode == "none" and first.measured == (), str(first)
    for _ in range(2):  # the first of a class and mode is cold, the second counts
        pol.record("all_reduce", "float32", S, None, 0.160)
    ch = pol.choose("all_reduce", x, spec)
    assert ch.mode == "lossy" and "measuring" in ch.reason and ch.measured == ("none",), str(ch)
    pol.record("all_reduce", "float32", S, spec, 0.300)  # cold
    assert pol.choose("all_reduce", x, spec).mode == "lossy"  # still unmeasured: measure again
    pol.record("all_reduce", "float32", S, spec, 0.137)
    ch = pol.choose("all_reduce", x, spec)
    assert ch.mode == "lossy" and set(ch.measured) == {"none", "lossy"} and "measured" in ch.reason, str(ch)
    # measured, but not 5% faster than none: none (and no more probing until probe_every)
    slow = fresh(1e9)
    for t in (0.160, 0.160):
        slow.record("all_reduce", "float32", S, None, t)
    for t in (0.3, 0.155):
        slow.record("all_reduce", "float32", S, spec, t)
    modes = [slow.choose("all_reduce", x, spec).mode for _ in range(10)]
    assert modes == ["none"] * 10, modes
    # a codec the model puts beyond 2x the measured plain time is not probed at all
    hopeless = fresh(0.1e9)
    for _ in range(2):
        hopeless.record("all_reduce", "float32", S, None, 0.160)
    ch = hopeless.choose("all_reduce", x, spec)
    assert ch.mode == "none" and "measuring" not in ch.reason, str(ch)
    pol2 = fresh(1e9)  # and probing can be turned off
    pol2.probe_factor = 0
    for _ in range(2):
        pol2.record("all_reduce", "float32", S, None, 0.160)
    assert pol2.choose("all_reduce", x, spec).mode == "none"


def test_policy_picks_the_faster_codec_effort_by_measurement():
    # a CPU-bound machine: the default effort (rANS where it pays in bytes) is measured slow; the
    # other efforts (mid: rANS only where it saves 30%; fast: no rANS) are measured next, one call
    # each, and the fastest wins; Choice.rans_margin carries it to the call
    x = np.zeros(16 << 20, np.float32)
    S = x.nbytes
    spec = ncclz.Lossy(rel=1e-3)

    def fresh():
        pol = Policy(4, link_gbps=0.5, cores_per_rank=0.5)
        pol.pin("lossless", ratio=1.2, enc_Bps=1e9, dec_Bps=2e9)
        pol.pin("lossy", ratio=8.5, enc_Bps=0.4e9, dec_Bps=1e9)
        pol.pin("lossy/mid", ratio=8.0, enc_Bps=0.8e9, dec_Bps=1.5e9)
        pol.pin("lossy/fast", ratio=7.5, enc_Bps=1.5e9, dec_Bps=2e9)
        return pol

    assert EFFORTS == {"": None, "dense": DENSE_MARGIN, "mid": MID_MARGIN, "fast": FAST_MARGIN}
    times = {"": 0.320, "mid": 0.230, "fast": 0.250}
    pol = fresh()
    first = pol.choose("all_reduce", x, spec)
    assert first.mode == "lossy" and first.measured == (), str(first)
    assert first.rans_margin == EFFORTS[first.effort], str(first)
    for t in (0.5, times[first.effort]):  # the model's pick, measured (the first call is cold)
        pol.record("all_reduce", "float32", S, spec, t, effort=first.effort)
    probes = []
    ch = pol.choose("all_reduce", x, spec)
    while "measuring " in ch.reason:
        assert ch.mode == "lossy" and ch.effort not in probes and ch.effort != first.effort, str(ch)
        assert ch.rans_margin == EFFORTS[ch.effort], str(ch)
        probes.append(ch.effort)
        pol.record("all_reduce", "float32", S, spec, times[ch.effort], effort=ch.effort)  # one call each
        ch = pol.choose("all_reduce", x, spec)
    # (the dense effort is no candidate: here the codec, not the link, is the bottleneck)
    assert sorted([*probes, first.effort]) == sorted(e for e in EFFORTS if e != "dense"), (probes, first.effort)
    assert "lossy/dense" not in ch.predicted_s, str(ch)
    assert ch.mode == "lossy" and ch.effort == "mid" and ch.rans_margin == MID_MARGIN, str(ch)
    assert {"lossy", "lossy/mid", "lossy/fast"} <= set(ch.measured) and str(ch).startswith("lossy/mid"), str(ch)
    # the default effort measured faster: no rans_margin
    pol.record("all_reduce", "float32", S, spec, 0.2)
    ch = pol.choose("all_reduce", x, spec)
    assert ch.mode == "lossy" and ch.rans_margin is None and ch.effort == "", str(ch)
    # probing the other effort costs one call: its first call is not cold once its twin is measured
    one = fresh()
    for t in (0.5, 0.320):
        one.record("all_reduce", "float32", S, spec, t)  # default effort: the first call is cold
    assert one.measured("all_reduce", "float32", S, spec) == 0.320
    one.record("all_reduce", "float32", S, spec, 0.250, effort="fast")
    assert one.measured("all_reduce", "float32", S, spec, effort="fast") == 0.250
    one.record("all_reduce", "float32", S, spec, 0.300, effort="mid")
    assert one.measured("all_reduce", "float32", S, spec, effort="mid") == 0.300
    ch = one.choose("all_reduce", x, spec)
    assert ch.rans_margin == FAST_MARGIN and {"lossy", "lossy/mid", "lossy/fast"} <= set(ch.measured), str(ch)
    # ... but a first call of a mode whose twin has not run is still cold
    cold = fresh()
    cold.record("all_reduce", "float32", S, spec, 0.250, effort="fast")
    cold.record("all_reduce", "float32", S, None, 0.9)
    cold.record("all_reduce", "float32", S, None, 0.8)
    cold.record("all_reduce", "float32", S, ncclz.Lossless(), 0.7)
    assert cold.measured("all_reduce", "float32", S, spec, effort="fast") is None
    assert cold.measured("all_reduce", "float32", S, ncclz.Lossless()) is None
    assert cold.measured("all_reduce", "float32", S, None) == 0.8
    # efforts=False: only the default effort is ever proposed
    plain = fresh()
    plain.efforts = False
    assert all(plain.choose("all_reduce", x, spec).rans_margin is None for _ in range(3))
    assert not {"lossy/fast", "lossy/mid"} & set(plain.choose("all_reduce", x, spec).predicted_s)


def _pinned_efforts(gbps, **kw):
    """A 4-rank Policy at `gbps` whose modes and codec efforts have fixed figures (Policy.pin)."""
    pol = Policy(4, link_gbps=gbps, cores_per_rank=1, **kw)
    pol.pin("lossless", ratio=1.2, enc_Bps=1e9, dec_Bps=2e9)
    pol.pin("lossy", ratio=7.4, enc_Bps=0.8e9, dec_Bps=1.5e9)
    pol.pin("lossy/mid", ratio=7.2, enc_Bps=0.9e9, dec_Bps=1.6e9)
    pol.pin("lossy/fast", ratio=7.0, enc_Bps=1e9, dec_Bps=2e9)
    pol.pin("lossy/dense", ratio=8.2, enc_Bps=0.5e9, dec_Bps=1e9)
    return pol


def test_policy_considers_the_dense_effort_only_where_the_link_is_the_bottleneck():
    # lossy/dense (rANS on any gain: the fewest bytes, the slowest coder) is calibrated and may run
    # only where the default effort's coder outruns the link; on a fast link it is not even
    # calibrated (no cost on calls it cannot win)
    x = np.zeros(16 << 20, np.float32)
    spec = ncclz.Lossy(rel=1e-3)
    slow = _pinned_efforts(0.05)  # 6 MB/s x 7.4 < 0.8 GB/s: link-bound
    ch = slow.choose("all_reduce", x, spec)
    assert ch.mode == "lossy" and ch.effort == "dense" and ch.rans_margin == DENSE_MARGIN, str(ch)
    assert ch.predicted_s["lossy/dense"] < ch.predicted_s["lossy"], str(ch)
    assert str(ch).startswith("lossy/dense")
    # measured slower than the default, it no longer runs
    for _ in range(2):
        slow.record("all_reduce", "float32", x.nbytes, spec, 2.0, effort="dense")
        slow.record("all_reduce", "float32", x.nbytes, spec, 1.5)
    assert slow.choose("all_reduce", x, spec).effort != "dense"

    fast = Policy(4, link_gbps=100.0, cores_per_rank=1)
    fast.pin("lossy", ratio=7.4, enc_Bps=0.8e9, dec_Bps=1.5e9)  # 11.9 GB/s x 7.4 > 0.8 GB/s: codec-bound
    ch = fast.choose("all_reduce", x, spec)
    assert "lossy/dense" not in ch.predicted_s and "lossy/mid" in ch.predicted_s, str(ch)
    assert fast.calibrator.cached("float32", spec, effort="dense") is None
    assert fast.calibrator.cached("float32", spec, effort="mid") is not None
    # the same link made slow: now it is calibrated (on the data: no pin) and predicted
    fast.link_gbps = 0.01
    ch = fast.choose("all_reduce", np.random.default_rng(0).normal(size=1 << 20).astype(np.float32), spec)
    assert "lossy/dense" in ch.predicted_s, str(ch)
    assert fast.calibrator.cached("float32", spec, effort="dense") is not None


def test_policy_considers_the_dense_effort_on_a_hierarchical_only_call():
    # a call fixed to the hierarchical algorithm (algorithm="hierarchical", NCCLZ_ALGO) has no ring
    # calibration: the hierarchical one tells whether the link is the bottleneck, each of a host's L ranks
    # having 1/L of its link
    x = np.zeros(16 << 20, np.float32)
    spec = ncclz.Lossy(rel=1e-3)
    for algo in ("hierarchical", None):
        ch = _pinned_efforts(0.05, hosts=2).choose("all_reduce", x, spec, algorithm=algo)  # 6 MB/s / 2 x 7.4 < 0.8 GB/s
        assert "lossy/dense" in ch.predicted_s, (algo, str(ch))
    # 0.2 GB/s for each of the 2 ranks x 7.4 > 0.8 GB/s: codec-bound on either algorithm
    ch = _pinned_efforts(3.2, hosts=2).choose("all_reduce", x, spec, algorithm="hierarchical")
    assert "lossy/dense" not in ch.predicted_s, str(ch)


def test_effort_names_and_bench_labels():
    # the margin a call ran with maps back to the effort's name (what record() files the time
    # under), and ncclz-bench labels an auto row with it
    from types import SimpleNamespace

    from ncclz.tools.bench import policy_choice_of

    assert effort_of_margin(None) == "" and effort_of_margin(-1.0) == ""
    assert effort_of_margin(MID_MARGIN) == "mid" and effort_of_margin(FAST_MARGIN) == "fast"
    assert effort_of_margin(DENSE_MARGIN) == "dense" and effort_of_margin(0.15) == ""  # the selector's own
    with pytest.raises(ValueError, match="unknown codec effort"):
        Policy(2, link_gbps=1.0).record("all_reduce", "float32", 1 << 20, ncclz.Lossy(rel=1e-3), 0.1, effort="slow")
    for why, label in (("auto: lossy/mid (measured)", "rel=1e-3/mid"), ("auto: lossy/fast (x)", "rel=1e-3/fast"),
                       ("auto: lossy (x)", "rel=1e-3")):
        assert policy_choice_of("auto:rel=1e-3", SimpleNamespace(compression="lossy", policy=why)) == label
    assert policy_choice_of("auto:rel=1e-3", SimpleNamespace(compression="none", policy="auto: none")) == "none"


def test_old_module_path_still_works():
    # ncclz.tools.policy re-exports the policy for code written against it; its CLI prints decisions
    import ncclz.tools.policy as old

    assert old.Policy is Policy and old.EFFORTS is EFFORTS


def test_policy_cli_prints_a_decision_per_rate(capsys):
    from ncclz.tools.policy import main

    assert main(["--gbps", "0.01,10000", "--size", "1M", "--data", "gaussian", "-n", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "0.01 Gbit/s" in lines[0] and "predicted" in lines[0]
    assert lines[1].split(": ", 1)[1].startswith("none"), lines[1]  # 10 Tbit/s: compression never pays


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_a_calls_input_is_not_kept_after_the_call(tmp_path, transport):
    """Once a call returned and the caller dropped its input, nothing of the communicator keeps the
    input alive (before: rank 0's last_stats kept the policy's view of the call, whose function
    returning the input also held the communicator), on every collective and mode, policy "auto"."""
    ranks = _run(tmp_path, 3, [], transport=transport, name="inputs_not_kept")
    ranks.assert_ok()
    for r, res in enumerate(ranks.results):
        assert res["policy"] == "auto", res
        assert res["kept"] == [], f"rank {r} kept the inputs of {res['kept']}"


def test_a_bound_that_changes_every_call_keeps_the_policy_small():
    # a job whose bound follows a schedule (or the gradients' norm): bounds within a few percent share
    # a label, so their calibration and measurements, and the tables keyed by labels stay bounded
    from ncclz.policy import modes

    assert modes.label(ncclz.Lossy(abs=1.234e-3)) == modes.label(ncclz.Lossy(abs=1.2e-3)) == "lossy:abs=0.0012"
    assert modes.label(ncclz.Lossy(rel=1e-3), "fast") == "lossy:rel=0.001/fast"
    assert modes.label(ncclz.Lossy(rel=1e-3)) != modes.label(ncclz.Lossy(rel=1.1e-3))
    x = np.random.default_rng(0).normal(size=1 << 14).astype(np.float32)
    pol = Policy(4, link_gbps=1.0, cores_per_rank=1, sample_bytes=x.nbytes)
    for i in range(40):  # a bound decaying by 0.1% a call: 40 bounds, 4-5 labels
        spec = ncclz.Lossy(abs=1e-2 * 0.999**i)
        pol.choose("all_reduce", x, spec)
        pol.record("all_reduce", "float32", x.nbytes, spec, 0.01)
    assert len(pol.calibrations()) <= 5, [c.mode for c in pol.calibrations()]
    for i in range(3 * modes.MAX_ENTRIES):  # ever new bounds and sizes: the tables stay within the bound
        pol.record("all_reduce", "float32", 4096 << (i % 20), ncclz.Lossy(abs=1.0 + i), 0.01)
    assert len(pol.measurements()) <= modes.MAX_ENTRIES
    steady = ncclz.Lossy(rel=1e-3)  # recorded last: kept
    pol.record("all_reduce", "float32", 1 << 20, steady, 0.02)
    pol.record("all_reduce", "float32", 1 << 20, steady, 0.01)
    assert pol.measured("all_reduce", "float32", 1 << 20, steady) == pytest.approx(0.01)
    table = {k: k for k in range(10)}
    assert modes.bounded(table, 4) == [0, 1, 2, 3, 4, 5] and list(table) == [6, 7, 8, 9]
