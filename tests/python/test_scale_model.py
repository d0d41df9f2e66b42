"""The scale model (bench/scale_model.py): its schedules' byte counts against the C++ schedules'
`last_stats` (live, with overridden topologies, and as the network lab recorded them), the
mechanisms of its time (the ring's wire fraction, broadcast chains, the work bound on shared CPUs,
the lab harness's share, the overlap), and its validation against the lab's stored measurements
(every point within 20%)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ncclz
import numpy as np
import pytest
import test_comm
from test_comm import run_ranks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import scale_model as sm

RAW = ROOT / "bench" / "results" / "topology_raw"
COLLS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
TOPO_WORKERS = Path(__file__).with_name("_topo_workers.py")


def _lab_rows(*phases) -> list:
    rows = []
    for ph in phases:
        p = RAW / f"{ph}.json"
        if p.exists():
            rows += json.loads(p.read_text())
    return rows


def test_wire_fractions():
    """The flat ring's bytes per rank: 2(N-1)/N of the message for all_reduce, (N-1)/N for
    reduce_scatter and all_gather, all of it for broadcast's root; hierarchically the inter-host
    ring's share of S/L and the intra-host ring's of S."""
    S = 1 << 24
    for n in (2, 4, 8, 64, 1024):
        assert sm.schedule_bytes("all_reduce", "ring", n, n, S) == (2 * (n - 1) / n * S, 0.0)
        assert sm.schedule_bytes("reduce_scatter", "ring", n, 1, S) == ((n - 1) / n * S, 0.0)
        assert sm.schedule_bytes("all_gather", "ring", n, n // 2 or 1, S) == ((n - 1) / n * S, 0.0)
        assert sm.schedule_bytes("broadcast", "ring", n, n, S) == (S, 0.0)
    # 4 hosts x 2: the inter-host all_reduce of S/2 among 4, the intra-host reduce-scatter and
    # all-gather of S between 2
    assert sm.schedule_bytes("all_reduce", "hierarchical", 8, 4, S) == (2 * 3 / 4 * S / 2, 2 * 1 / 2 * S)
    assert sm.schedule_bytes("broadcast", "hierarchical", 8, 4, S) == (S, S)
    # a chain: every rank but the last sends once; hierarchically the inter-host chain's last rank
    # and the host chains' ranks send inside their hosts only
    assert [x[:2] for x in sm.chain_sends("ring", 4, 2, S)] == [(S, 0), (S, S), (S, S), (0, S)]
    assert sm.chain_sends("hierarchical", 6, 3, S) == [(S, 0, S, 0), (0, 0, 0, S), (S, S, S, 0), (0, 0, 0, S),
                                                       (0, S, S, 0), (0, 0, 0, S)]
    # one host (or one rank per host) runs the flat ring
    assert sm.schedule_bytes("all_reduce", "hierarchical", 8, 1, S) == sm.schedule_bytes("all_reduce", "ring", 8, 1, S)
    assert sm.schedule_bytes("all_reduce", "hierarchical", 8, 8, S) == sm.schedule_bytes("all_reduce", "ring", 8, 8, S)


def test_schedule_bytes_match_the_lab_records():
    """Every lab point's recorded last_stats (rank 0: raw bytes over its ring or chain, bytes inside
    its host) is what the model's schedules move."""
    rows = _lab_rows("one", "colls", "quad", "pair")
    if not rows:
        pytest.skip("no lab results")
    for r in rows:
        S = r["nbytes"]
        if r["coll"] == "reduce_scatter":
            S -= (S // 4) % r["world_size"] * 4
        wire, local = sm.schedule_bytes(r["coll"], r["ran"], r["world_size"], r["hosts"], S)
        assert r["raw_bytes"] == pytest.approx(wire, rel=1e-6), r
        assert r["local_bytes"] == pytest.approx(local, rel=1e-6, abs=0.5), r
        if r["mode"] == "none":
            assert r["wire_bytes"] == r["raw_bytes"]


@pytest.mark.skipif(not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the runtime bindings")
@pytest.mark.parametrize("layout,n", [("2x2", 4), ("4x2", 8)])
def test_schedule_bytes_match_the_runtime(tmp_path, monkeypatch, layout, n):
    """Live: each collective uncompressed on the ring and hierarchically with an overridden topology
    (shared memory between the emulated hosts); every rank's last_stats against the model's
    schedule_bytes, and for broadcast every rank's against chain_sends (root, relays, chain ends)."""
    monkeypatch.setattr(test_comm, "WORKERS", TOPO_WORKERS)
    S = 1 << 20
    env = {"NCCLZ_LINK_GBPS": "", "NCCLZ_POLICY": "", "NCCLZ_ALGO": "", "NCCLZ_TOPO_HOSTS": layout, "NCCLZ_TOPO_HOST": ""}
    ranks = run_ranks(tmp_path, "bytes", n, "shm", args=[str(S)], env=env, timeout=180)
    ranks.assert_ok()
    hosts = int(layout.split("x")[0])
    for rank, res in enumerate(ranks.results):
        for key, st in res["calls"].items():
            coll, algo = key.split("/")
            assert st["algorithm"] == algo, (rank, key, st)
            wire, local = sm.schedule_bytes(coll, algo, n, hosts, S)
            if coll == "broadcast":
                ls, _, hs, _ = sm.chain_sends(algo, n, hosts, S)[rank]
                assert (st["raw_bytes"], st["local_bytes"]) == (ls, hs), (rank, key, st)
                if rank == 0:
                    assert (ls, hs) == (wire, local)
                continue
            assert st["raw_bytes"] == pytest.approx(wire), (rank, key, st)
            assert st["wire_bytes"] == pytest.approx(wire), (rank, key, st)
            assert st["local_bytes"] == pytest.approx(local), (rank, key, st)


def _dc() -> sm.DataCodec:
    """A data set's codec figures (the stored calibration's smooth field), or made-up ones."""
    try:
        return sm.load_calibration()["smooth:4194304"]
    except (OSError, KeyError):
        return sm.DataCodec("made-up", ranges={"8": 16.0}, single={"0": 2.0, "-3": 3.0, "-9": 9.0})


def _one_op(op: str) -> sm.DataCodec:
    """Made-up codec figures where only stage `op` costs anything: 1 s per byte (its seconds are its bytes)."""
    fast = 1e30
    dc = sm.DataCodec("made-up", ranges={"8": 16.0}, single={"0": 2.0, "-3": 3.0, "-9": 9.0},
                      **{f: (1.0 if f == op else fast) for f in ("scan_Bps", "scan_sums_Bps", "prep_Bps", "fin_Bps",
                                                                 "q_Bps", "dq_Bps")})
    dc.coder = {"1:1": {o: (1.0 if o == op else fast) for o in sm.CODER_OPS}}
    dc.exact = {"1:1": 2.0}
    return dc


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("algo,n,hosts", [("ring", 2, 1), ("ring", 4, 2), ("ring", 8, 4), ("hierarchical", 4, 2), ("hierarchical", 8, 4),
                                          ("hierarchical", 8, 2)])
def test_ring_codec_stages_follow_the_schedule(coll, algo, n, hosts):
    """A rank's codec work per stage, in bytes (ring_codec_s with one stage costing 1 s/B), is what the
    ring's schedule does: a reduction scans its whole input and quantizes its ring's data D once;
    encodes D (all_reduce: one chunk by the selector, the rest with the kept predictor) or (m-1)/m of
    it (reduce_scatter: only the first send by the selector); reduces (m-1)/m D; all_reduce decodes
    the all-gather's (m-1)/m D and dequantizes D, reduce_scatter its own chunk (an all_reduce ring of
    two: the exchange). all_gather codes its
    own block once and decodes the other ring ranks' blocks, staged on the flat ring and with the
    eager path's whole-buffer passes (not in the ring) hierarchically."""
    S = float(1 << 24)
    hier = algo == "hierarchical"
    L, m = (n // hosts, hosts) if hier else (1, n)
    D = S / L
    c = D / m

    def bytes_of(op):
        ring, serial = sm.ring_codec_s(_one_op(op), coll, algo, n, hosts, S)
        return pytest.approx(ring, rel=1e-9), pytest.approx(serial, rel=1e-9, abs=1e-9)

    if coll == "all_gather":
        own = S / n
        ring_scan = (0.0, own) if hier else (own, 0.0)
        assert bytes_of("scan_Bps") == ring_scan
        assert bytes_of("scan_sums_Bps") == (0.0, 0.0)
        assert bytes_of("prep_Bps") == (0.0 if hier else own, 0.0)
        assert bytes_of("q_Bps") == (0.0, own if hier else 0.0)
        assert bytes_of("enc") == (own, 0.0)
        assert bytes_of("enc_hint") == (0.0, 0.0) and bytes_of("red") == (0.0, 0.0)
        assert bytes_of("dec") == ((m - 1) * S / n, 0.0)
        assert bytes_of("fin_Bps") == (0.0 if hier else S, 0.0)
        assert bytes_of("dq_Bps") == (0.0, S if hier else 0.0)
        return
    ar = coll == "all_reduce"
    assert bytes_of("scan_sums_Bps") == (S, 0.0)
    if ar and m == 2:
        # the exchange of two (pair_all_reduce): each slice quantized once (kept from its send for the
        # addition); the own codes encoded by the selector, the other's decoded and added; D dequantized
        assert bytes_of("prep_Bps") == (D, 0.0)
        assert bytes_of("enc") == (D, 0.0) and bytes_of("red") == (D, 0.0)
        assert bytes_of("enc_hint") == (0.0, 0.0) and bytes_of("dec") == (0.0, 0.0)
        assert bytes_of("fin_Bps") == (D, 0.0)
        return
    assert bytes_of("scan_Bps") == (0.0, 0.0) and bytes_of("q_Bps") == (0.0, 0.0)
    assert bytes_of("prep_Bps") == (D, 0.0)
    assert bytes_of("enc") == (c, 0.0)
    assert bytes_of("enc_hint") == ((m - 1 if ar else m - 2) * c, 0.0)
    assert bytes_of("red") == ((m - 1) * c, 0.0)
    assert bytes_of("dec") == ((m - 1) * c if ar else 0.0, 0.0)
    assert bytes_of("fin_Bps") == (D if ar else c, 0.0)


def test_coder_speed_measured_or_interpolated_in_bits():
    """The slice coder's speed of a partial sum is the one timed for it; for a sum `calibrate` did not
    time, interpolated in its bits per element between the timed ones (clamped at their ends)."""
    dc = sm.DataCodec("made-up", ranges={"8": 16.0}, single={"0": 2.0, "-3": 5.0, "-9": 11.0}, growth=1.0)
    dc.exact = {"1:0.016": 2.0, "2:0.016": 4.0}
    dc.coder = {"1:0.016": {o: 4e9 for o in sm.CODER_OPS}, "2:0.016": {o: 1e9 for o in sm.CODER_OPS}}
    assert dc.speed("enc", 1, 0.016) == 4e9 and dc.speed("red", 2, 0.016) == 1e9
    # eb = 0.016 / 2 at k = 1: log2(eb / E) = -1, bits 3 (between the timed 2 and 4: the geometric mean)
    assert dc.bits(1, 0.008) == pytest.approx(3.0)
    assert dc.speed("dec", 1, 0.008) == pytest.approx(2e9)
    assert dc.speed("dec", 64, 0.016 / 64) == pytest.approx(1e9)  # more bits than any timed sum
    assert sm.DataCodec("none").speed("enc", 3, 1.0) == sm.CODER_DEFAULT["enc"]


@pytest.mark.skipif(not hasattr(ncclz._core, "stages"), reason="ncclz._core was built without the stage bindings")
@pytest.mark.parametrize("name", ["smooth", "grad"])
def test_calibrated_stages_are_the_calls(name):
    """The stages `calibrate` times (ncclz._core.stages) do the call's work on the lab's data: the eager
    quantize gives the grid's codes (round to nearest of x / 2eb), the staged one accepts every
    element, the slice coder's slices decode to the codes bit for bit with or without the kept
    predictor, a reduction gives the exact sum of the codes, and both dequantize paths give every
    element within eb of x."""
    from ncclz._core import stages
    from ncclz.tools.data import rank_input, unavailable

    if unavailable(name):  # the gradients: cached, or torch and scikit-learn to train the CNN
        pytest.skip(unavailable(name))
    n = 3 * (1 << 18) + 12345  # slices of 2^18 codes and a short last one
    x, y = rank_input(name, 0, n), rank_input(name, 1, n)
    eb = 1e-3 * float(max(x.max(), y.max()) - min(x.min(), y.min())) / 4
    sl = stages.slice_elems(sm.SLOT_BYTES)
    assert sl == (1 << 20) // 4  # a slot: the slice header and 1 MiB of codes
    qx, qy = np.empty(n, np.int32), np.empty(n, np.int32)
    assert stages.quantize(x, eb, qx) == 0 and stages.quantize(y, eb, qy) == 0
    ref = np.rint(x.astype(np.float64) / (2 * eb))
    assert np.abs(qx - ref).max() <= 1  # ties and float32 rounding of x / 2eb
    assert (qx == ref).mean() > 0.999
    stages.prepare(x, eb, sl)  # raises on an element off the grid
    lo, hi = stages.scan(x, True)
    assert (lo, hi) == (float(x.min()), float(x.max())) == stages.scan(x, False)
    slots, sizes, pred = stages.encode(qx, sl)
    assert len(sizes) == len(pred) == -(-n // sl) and sizes.sum() < qx.nbytes
    for hints in (None, pred):
        s2, z2, _ = stages.encode(qx, sl, hints)
        got = np.empty(n, np.int32)
        stages.decode(s2, z2, got, sl)
        assert np.array_equal(got, qx)
    got = np.empty(n, np.int32)
    stages.reduce(slots, sizes, qy, got, sl)
    assert np.array_equal(got, qx + qy)
    out_staged, out_eager = np.empty(n, np.float32), np.empty(n, np.float32)
    stages.finish(qx, 2 * eb, out_staged, sl)
    stages.dequantize(qx, 2 * eb, out_eager)
    assert np.array_equal(out_staged, out_eager)
    assert np.abs(out_staged.astype(np.float64) - x).max() <= eb * (1 + 1e-3)
    with pytest.raises(ncclz.errors.Error):
        stages.encode(qx, sl, pred[:-1])  # one hint per slice


def test_broadcast_chain_fill_counts_host_links():
    """A network-bound chain takes the message's link time plus one slice time per further host link
    it crosses; shared-memory hops add no link time (the flat chain of 4 x 2 crosses 3 host links,
    as the hierarchical one does)."""
    m = sm.Machine(cores_per_rank=64.0, alpha=0.0, c_call=0.0, c_sock=0.0, c_intra=0.0, c_exact=0.0)
    dc, S, gbps = _dc(), 64 << 20, 1.0
    B = gbps * 1e9 / 8 * m.goodput
    for algo in ("ring", "hierarchical"):
        for hosts in (2, 4, 8):
            t, parts = sm.predict(m, dc, "broadcast", "none", algo, 2 * hosts, hosts, S, gbps, parts=True)
            assert parts["t_net"] == pytest.approx(S / B + (hosts - 2) * m.slice_bytes / B)
            assert t == pytest.approx(parts["t_net"])


def test_work_bound_on_shared_cpus():
    """On the shared machine a lossy broadcast (the root does more than the others) takes at least
    all ranks' CPU work on the CPUs they get and at least the root's, and less than every rank at
    the root's cost; symmetric collectives take the busiest rank's work at its fair share."""
    m = sm.Machine(cpus=2.0, background=0.0)
    dc, S = _dc(), 16 << 20
    for algo in ("ring", "hierarchical"):
        inter, _, _ = sm.work(dc, "broadcast", "lossy", algo, 8, 4, S, sm.ratio(dc, "broadcast", "lossy", algo, 8, 4))
        costs = [(m.cost(f), k) for f, k in inter if k]
        total, top = sum(c * k for c, k in costs), max(c for c, _ in costs)
        _, parts = sm.predict(m, dc, "broadcast", "lossy", algo, 8, 4, S, 1.0, parts=True)
        assert parts["t_cpu"] >= total / 2 - 1e-12 and parts["t_cpu"] >= top
        assert parts["t_cpu"] < top * 8 / 2
    inter, _, _ = sm.work(dc, "all_reduce", "lossy", "ring", 8, 4, S, sm.ratio(dc, "all_reduce", "lossy", "ring", 8, 4))
    _, parts = sm.predict(m, dc, "all_reduce", "lossy", "ring", 8, 4, S, 1.0, parts=True)
    assert parts["t_cpu"] == pytest.approx(m.cost(inter[0][0]) * 8 / 2)


def test_harness_only_in_the_lab():
    """The lab harness's input reset (all_reduce: a copy on every rank; broadcast: the root's copy,
    a fresh zeroed array on the others) adds its span before the call; without it (projections)
    the call alone."""
    m = sm.Machine(cpus=2.0)
    dc, S = _dc(), 16 << 20
    h = {str(S): {"copy_s_per_B": 1e-10, "zero_copy_s_per_B": 3e-10}}
    for coll in COLLS:
        pre = sm.harness(h, coll, 8, S)
        t0 = sm.predict(m, dc, coll, "none", "ring", 8, 4, S, 1.0)
        t1, parts = sm.predict(m, dc, coll, "none", "ring", 8, 4, S, 1.0, parts=True, pre=pre)
        assert bool(pre) == (coll in ("all_reduce", "broadcast"))
        assert t1 - t0 == pytest.approx(parts["t_pre"])
        if coll == "broadcast":  # the 7 zeroed arrays on 2 CPUs, beside the root's copy
            assert parts["t_pre"] == pytest.approx((1e-10 + 7 * 3e-10) * S / 2)


def test_lab_rows_say_whether_the_input_reset_was_timed():
    """Rows of topo_bench before 2026-11-27 18:14 timed the input reset with the call (no key): the
    validation counts it; rows with reset_timed false did not: nothing before the call."""
    S = 16 << 20
    h = {str(S): {"copy_s_per_B": 1e-10, "zero_copy_s_per_B": 3e-10}}
    row = {"coll": "broadcast", "mode": "none", "algorithm": "ring", "world_size": 8, "hosts": 4, "nbytes": S,
           "link_gbps": 1.0}
    assert sm.point_pre(h, row) == sm.harness(h, "broadcast", 8, S) != []
    assert sm.point_pre(h, {**row, "reset_timed": True}) == sm.harness(h, "broadcast", 8, S)
    assert sm.point_pre(h, {**row, "reset_timed": False}) == []


def test_overlap_with_cores_of_its_own_is_the_policys():
    """With cores of its own a rank's CPU time is its own work, and the call's body is the policy's
    combination: max(net, cpu) + (1 - overlap) min(net, cpu)."""
    m = sm.Machine(cores_per_rank=2.0, alpha=0.0, c_call=0.0, overlap=0.6)
    dc, S = _dc(), 64 << 20
    for gbps in (1.0, 25.0, 400.0):
        t, p = sm.predict(m, dc, "all_reduce", "lossy", "ring", 64, 8, S, gbps, parts=True)
        assert t == pytest.approx(max(p["t_net"], p["t_cpu"]) + 0.4 * min(p["t_net"], p["t_cpu"]))


def test_validation_reproduces_the_recorded_one(tmp_path):
    """Fitted on the declared phases, the model predicts every lab point (fitted and predicted) as
    recorded in bench/results/scale_validation.json (to the BLAS's last digits), which scale.md's table and its worst error (the
    target: 20% at every point, `validate`'s exit status) come from: a change to the model must come with
    a rerun of `validate` and `project`."""
    if not _lab_rows("colls", "quad", "pair") or not sm.CALIB.exists():
        pytest.skip("no lab results or calibration")
    recorded = json.loads((sm.RESULTS / "scale_validation.json").read_text())
    out = tmp_path / "validation.json"
    sm.validate(out=out)
    v = json.loads(out.read_text())
    assert len(v["rows"]) >= 40
    assert len(v["rows"]) == len(recorded["rows"])
    for got, want in zip(v["rows"], recorded["rows"]):
        key = (got["phase"], got["coll"], got["data"], got["mode"], got["algorithm"])
        assert key == (want["phase"], want["coll"], want["data"], want["mode"], want["algorithm"])
        # (the fit's least squares run on the machine's BLAS, whose kernels differ per CPU in the last
        # digits: 3e-9 between this project's Intel and AMD VMs; scale.md shows 3 digits)
        assert got["predicted_s"] == pytest.approx(want["predicted_s"], rel=1e-6), key
        assert got["measured_s"] == pytest.approx(want["measured_s"], rel=1e-12), key
    assert v["worst_all"] == pytest.approx(recorded["worst_all"], rel=1e-6)
    # issue 19's target, and a calibration that describes the calls: the stages timed on one core
    # account for the lab's codec CPU seconds within a quarter (k_codec was 0.59 while the quantize
    # was timed through ncclz.codec's containers, and the gradients' calls over-predicted by 23%)
    assert v["worst_all"] <= 0.2
    assert 0.75 <= v["machine"]["k_codec"] <= 1.25
    assert f"{recorded['worst_all']:.0%} at all {len(recorded['rows'])} points" in (
        sm.RESULTS / "scale.md").read_text()