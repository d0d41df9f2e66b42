"""Fast tests of the evaluation tools: ncclz-bench helpers, the compression policy and the
network lab's pure parts. No root needed; the 2-rank run skips when the runtime is missing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


os.environ.setdefault("NCCLZ_BENCH_DIR", str(REPO / "bench"))
B = _load("ncclz_tools_bench_under_test", REPO / "python" / "ncclz" / "tools" / "bench.py")
P = _load("ncclz_tools_policy_under_test", REPO / "python" / "ncclz" / "tools" / "policy.py")
NL = _load("netlab_under_test", REPO / "bench" / "netlab" / "netlab.py")


def runtime_available() -> bool:
    try:
        import ncclz._core as c

        return hasattr(c, "comm")
    except ImportError:
        return False


# ------------------------------------------------------------------ bench helpers
@pytest.mark.parametrize("s,v", [("4096", 4096), ("1K", 1024), ("64M", 64 << 20), ("64MiB", 64 << 20),
                                 ("2MB", 2 << 20), ("1G", 1 << 30), (12, 12)])
def test_parse_size(s, v):
    assert B.parse_size(s) == v


def test_sizes_between():
    assert B.sizes_between(1024, 8192, 2) == [1024, 2048, 4096, 8192]
    assert B.sizes_between(1 << 20, 64 << 20, 4) == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    with pytest.raises(ValueError):
        B.sizes_between(8, 4, 2)


def test_busbw_factors_match_nccl_tests():
    assert B.busbw_factor("all_reduce", 4) == pytest.approx(1.5)
    assert B.busbw_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert B.busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert B.busbw_factor("broadcast", 4) == 1.0
    assert B.busbw_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        B.busbw_factor("alltoall", 4)


def test_parse_modes():
    assert B.parse_modes("none,lossless,rel=1e-3,abs=0.5") == ["none", "lossless", "rel=0.001", "abs=0.5"]
    assert B.parse_modes("auto:rel=1e-3,auto:lossless") == ["auto:rel=0.001", "auto:lossless"]
    for bad in ("zstd", "rel=0", "rel=-1", "auto:none", ""):
        with pytest.raises(ValueError):
            B.parse_modes(bad)
    assert B.is_lossy("rel=0.001") and B.is_lossy("auto:abs=1") and not B.is_lossy("lossless")


def test_counts_follow_nccl_tests_size_convention():
    n = 4
    assert B.count_for("all_reduce", 1 << 20, 4, n) == 1 << 18
    c = B.count_for("all_gather", 1 << 20, 4, n)
    assert c == (1 << 18) // n and B.size_bytes("all_gather", c, 4, n) == 1 << 20
    assert B.count_for("reduce_scatter", 4 * 10 + 4, 4, n) % n == 0


def test_shaped_data_sets_round_to_whole_planes_and_keep_the_values():
    n = 4
    assert B.count_for("all_reduce", 64 << 20, 4, n, "real-shaped") == 11807 * 1421  # >= 64 MiB
    assert B.count_for("all_reduce", 64 << 20, 4, n, "smooth-shaped") == 1 << 24  # already whole planes
    rs = B.count_for("reduce_scatter", 64 << 20, 4, n, "real-shaped")
    assert rs % (n * 1421) == 0 and 0 <= rs - (1 << 24) < n * 1421
    assert B.count_for("all_gather", 64 << 20, 4, n, "smooth-shaped") == (1 << 22)
    assert B.count_for("all_reduce", 1000, 4, n, "real-shaped") == 250  # under a plane: flat
    x = B.rank_input("smooth-shaped", 1, 3 * 65536)
    assert x.shape == (3, 256, 256)
    assert np.array_equal(x.ravel(), B.rank_input("smooth", 1, 3 * 65536))
    assert B.rank_input("smooth-shaped", 1, 1000).shape == (1000,)
    ref, _, _ = B.reference("reduce_scatter", "smooth-shaped", 2, 1, 4 * 65536, "float32")
    want = (B.rank_input("smooth", 0, 4 * 65536).astype(np.float64)
            + B.rank_input("smooth", 1, 4 * 65536).astype(np.float64))[2 * 65536:]
    np.testing.assert_array_equal(ref, want)


def test_cli_parsing():
    a = B.parse_args(["-b", "1K", "-e", "4K", "-c", "all_reduce,broadcast", "-m", "none,rel=1e-2",
                      "-d", "gaussian", "-s", "ncclz,gloo,sz3"])
    assert a.min_bytes == 1024 and a.max_bytes == 4096
    assert a.collectives == ["all_reduce", "broadcast"] and a.modes == ["none", "rel=0.01"]
    assert a.sz3_via == "ncclz"
    assert B.parse_args(["-s", "gloo,sz3"]).sz3_via == "gloo"
    for bad in (["-c", "alltoall"], ["-d", "imagenet"], ["-s", "nccl"], ["-m", "foo"], ["-b", "8K", "-e", "4K"]):
        with pytest.raises(SystemExit):
            B.parse_args(bad)


def test_rank_inputs_deterministic_and_reference():
    n, count = 3, 4096
    xs = [B.rank_input("gaussian", r, count) for r in range(n)]
    assert all(x.dtype == np.float32 and x.shape == (count,) for x in xs)
    assert np.array_equal(xs[1], B.rank_input("gaussian", 1, count))
    assert not np.array_equal(xs[0], xs[1])
    ref, lo, hi = B.reference("all_reduce", "gaussian", n, 0, count, "float32")
    np.testing.assert_allclose(ref, np.sum([x.astype(np.float64) for x in xs], axis=0))
    assert lo == min(float(x.min()) for x in xs) and hi == max(float(x.max()) for x in xs)
    rs, _, _ = B.reference("reduce_scatter", "gaussian", n, 1, count - count % n, "float32")
    assert rs.shape == ((count - count % n) // n,)
    ag, _, _ = B.reference("all_gather", "gaussian", n, 2, count, "float32")
    assert ag.shape == (n, count)
    sp = B.rank_input("sparse", 0, 100000)
    assert 0.002 < np.count_nonzero(sp) / sp.size < 0.02
    assert B.bound_for("rel=0.001", -1.0, 3.0) == pytest.approx(0.004)
    assert B.bound_for("abs=0.5", -1.0, 3.0) == 0.5 and B.bound_for("lossless", 0, 1) == 0.0


def test_format_row_has_all_columns():
    row = dict(size=1 << 20, count=1 << 18, dtype="float32", redop="sum", root=-1, time_us=1000.0, algbw=1.0,
               busbw=1.5, ratio=4.0, wire_bytes=1e5, max_err=1e-4, bound=2e-4, err_over_bound=0.5, codec_share=0.3)
    s = B.format_row(row)
    assert len(s.split()) == len(B.HEADER.split()) - 1  # '#' in the header
    assert "float" in s and "30.0" in s


# ------------------------------------------------------------------ policy
def _policy(gbps, cal_ratio=10.0, enc=1e9, dec=1e9):
    pol = P.Policy(4, link_gbps=gbps, cores_per_rank=1)
    cal = P.Calibration("x", cal_ratio, enc, dec, 1 << 20, 0.0)
    return pol, cal


def test_policy_model_shapes():
    pol, cal = _policy(0.5)
    S = 64 << 20
    t0 = pol.predict("all_reduce", S, None)
    assert t0 == pytest.approx(6 * 50e-6 + 1.5 * S / (0.5e9 / 8 * 0.95))
    assert pol.predict("all_reduce", S, cal) < t0 / 4  # slow link: compression pays
    fast, calf = _policy(100.0)
    assert fast.predict("all_reduce", S, calf) > fast.predict("all_reduce", S, None)  # fast link: it does not
    assert pol.predict("broadcast", S, None) > pol.predict("all_gather", S, None)


def test_policy_choices(monkeypatch):
    import ncclz

    x = np.zeros(16 << 20, np.float32)
    for gbps, want in ((0.5, "lossy"), (400.0, "none")):
        pol, cal = _policy(gbps)
        lossless = P.Calibration("lossless", 1.2, 1e9, 1e9, 1 << 20, 0.0)
        monkeypatch.setattr(pol, "calibrate",
                            lambda arr, spec, cal=cal, ll=lossless: ll if type(spec).__name__ == "Lossless" else cal)
        ch = pol.choose("all_reduce", x, ncclz.Lossy(rel=1e-3))
        assert ch.mode == want, str(ch)
    pol, cal = _policy(0.5)
    assert pol.choose("all_reduce", x, None).mode == "none"
    assert pol.choose("all_reduce", np.zeros(1000, np.float32), ncclz.Lossy(rel=1e-3)).mode == "none"
    unknown = P.Policy(4, link_gbps=None, cores_per_rank=1)
    unknown.link_gbps = None
    assert "unknown" in unknown.choose("all_reduce", x, ncclz.Lossless()).reason


def test_policy_observe_learns_link():
    pol = P.Policy(4, link_gbps=None, cores_per_rank=1)
    pol.link_gbps = None

    class S:
        compression, wire_bytes, wall_s = "none", 100e6, 1.0

    pol.observe(S())
    assert pol.link_gbps == pytest.approx(0.8 / 0.95)


def test_policy_calibration_real_codec():
    import ncclz

    pol = P.Policy(4, link_gbps=1.0, cores_per_rank=1, sample_bytes=256 << 10)
    x = B.rank_input("gaussian", 0, 1 << 18)
    c = pol.calibrate(x, ncclz.Lossy(rel=1e-2))
    assert c.ratio > 1.5 and c.enc_Bps > 0 and c.dec_Bps > 0
    assert pol.calibrate(x, ncclz.Lossy(rel=1e-2)) is c  # cached


# ------------------------------------------------------------------ netlab (pure parts)
def test_netlab_rates_and_tbf():
    assert NL.parse_rate("0.5") == 0.5 and NL.parse_rate("500mbit") == pytest.approx(0.5)
    assert NL.parse_rate("10gbit") == 10.0 and NL.parse_rate("none") is None
    rate, burst, limit = NL.tbf_args(1.0)
    assert rate == "1000.000mbit" and int(burst) >= 1e9 / 8 / NL.HZ and int(limit) >= 4 * int(burst)
    lab = NL.Lab(4, 0.5)
    assert lab.addr(0) == "10.77.0.1" and lab.host(3) == "nczl-h3"
    env = lab.rank_env(2, 4, 29500, "tok")
    assert env["RANK"] == "2" and env["MASTER_ADDR"] == "10.77.0.1" and env["NCCLZ_SOCKET_IFNAME"] == "eth0"
    assert "NCCLZ_SOCKET_THROTTLE_GBPS" not in env and env["NCCLZ_LINK_GBPS"] == "0.5"


def test_netlab_without_root_says_so():
    code = ("import os, sys; os.geteuid = lambda: 1000; sys.argv = ['netlab.py', 'up'];"
            f"exec(open({str(REPO / 'bench' / 'netlab' / 'netlab.py')!r}).read())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "needs root" in r.stderr and "NCCLZ_SOCKET_THROTTLE_GBPS" in r.stderr


def test_auto_row_label_works_when_the_tool_runs_by_path():
    """bench/ncclz_bench.py runs bench.py by path (no package): labelling an auto row that ran
    lossy must not need a relative import (it did, and every auto row of the lab failed)."""
    from types import SimpleNamespace

    st = SimpleNamespace(compression="lossy", policy="auto: lossy/mid (measured)")
    assert B.policy_choice_of("auto:rel=1e-3", st) == "rel=1e-3/mid"
    st = SimpleNamespace(compression="lossy", policy="auto: lossy (x)")
    assert B.policy_choice_of("auto:rel=1e-3", st) == "rel=1e-3"


# ------------------------------------------------------------------ a tiny real run
@pytest.mark.skipif(not runtime_available(), reason="ncclz runtime (ncclz._core.comm) not built yet")
def test_tiny_two_rank_run_over_shm(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ncclz_bench.py"), "-n", "2", "--transport", "shm",
                        "-b", "64K", "-e", "64K", "-c", "all_reduce,reduce_scatter,all_gather,broadcast",
                        "-m", "none,lossless,rel=1e-3", "-d", "gaussian", "-i", "2", "--no-progress",
                        "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    import json

    rows = json.load(open(out))["rows"]
    assert len(rows) == 12
    for row in rows:
        assert row["ok"], row
        assert row["busbw"] == pytest.approx(row["algbw"] * B.busbw_factor(row["collective"], 2))


@pytest.mark.skipif(not runtime_available(), reason="ncclz._core was built without the collective runtime")
def test_shaped_sweep_over_two_sizes_checks_every_element(tmp_path):
    """A shaped data set through every collective and two sizes: every rank builds the same inputs
    (the smaller size is a prefix of the field built at the largest), and errors stay within E."""
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ncclz_bench.py"), "-n", "2", "--transport", "shm",
                        "-b", "512K", "-e", "1M", "-f", "2", "-c", "all_reduce,reduce_scatter,all_gather,broadcast",
                        "-m", "none,rel=1e-3", "-d", "smooth-shaped", "-i", "1", "--no-progress",
                        "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    import json

    rows = json.load(open(out))["rows"]
    assert len(rows) == 16
    for row in rows:
        assert row["ok"], row
        assert row["count"] % 65536 == 0
        if row["mode"] == "none":
            assert row["max_err"] <= 1e-5 * 2, row  # f32 rounding of a 2-term sum
        else:
            assert row["max_err"] <= row["bound"], row
