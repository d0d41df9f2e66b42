"""Tests of the evaluation tools: ncclz-bench (the installed package's, run as a user would, from
outside the repository), its data sets and console, the policy's model shapes, and the network
lab's pure parts. No root needed; the runs skip when the runtime is missing."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import ncclz
import numpy as np
import pytest
from ncclz.policy import Calibration, Policy
from ncclz.tools import bench as B
from ncclz.tools import console, data

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


NL = _load("netlab_under_test", REPO / "bench" / "netlab" / "netlab.py")
# generated data sets are cached where bench/ keeps them (git-ignored), not in the user's home
os.environ.setdefault(data.CACHE_ENV, str(REPO / "bench" / "data"))


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
    row = {"size": 1 << 20, "count": 1 << 18, "dtype": "float32", "redop": "sum", "root": -1, "system": "ncclz",
           "mode": "auto:rel=0.001", "time_us": 1000.0, "algbw": 1.0, "busbw": 1.5, "ratio": 4.0, "wire_bytes": 1e5,
           "max_err": 1e-4, "bound": 2e-4, "err_over_bound": 0.5, "codec_share": 0.3, "policy_choice": "rel=0.001/fast"}
    s = B.format_row(row)
    assert len(s.split()) == len(B.HEADER.split()) - 1  # '#' in the header
    assert "float" in s and "30.0" in s and s.endswith("rel=0.001/fast") and "auto:rel=0.001" in s
    del row["policy_choice"]  # not an auto row: no "ran" entry
    assert len(B.format_row(row).split()) == len(B.HEADER.split()) - 2


# ------------------------------------------------------------------ netlab (pure parts)
def test_hier_timeline_summarizes_each_ranks_calls(tmp_path):
    """bench/netlab/hier_timeline.py's summary of timeline files: the calls of the given size only,
    the warm-up calls skipped, steps and channel events inside each call's span only, and the
    slowest rank per call."""
    HT = _load("hier_timeline_under_test", REPO / "bench" / "netlab" / "hier_timeline.py")
    nbytes = 64 << 20

    def x(name, ts, dur, tid=0, **args):
        return {"name": name, "ph": "X", "pid": 0, "tid": tid, "ts": ts, "dur": dur, "args": args}

    for rank, extra in ((0, 0), (1, 5000)):
        ev = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "channel 0"}}]
        for k in range(3):  # call k at 100000 k: 50 ms on rank 0, 55 ms on rank 1
            t = 100000 * k
            ev += [x("all_reduce", t, 50000 + extra, bytes=nbytes), x("describe_stats", t, 2000),
                   x("exchange", t + 2000, 1000), x("schedule", t + 4000, 46000 + extra),
                   x("wait_in", t + 5000, 10000, tid=1), x("encode", t + 6000, 3000, tid=1),
                   x("encode", t + 9000, 3000, tid=1)]
        ev += [x("all_reduce", 400000, 30000, bytes=8), x("encode", 60000, 9999, tid=1)]  # other size; outside
        (tmp_path / f"t.rank{rank}.json").write_text(json.dumps({"traceEvents": ev}))
    rows = HT.summarize(str(tmp_path / "t"), nbytes, skip=1)
    assert rows["call"] == [50.0, 50.0, 55.0, 55.0]
    assert rows["slowest rank"] == [55.0, 55.0]
    assert rows["pre"] == [4.0] * 4 and rows["describe_stats"] == [2.0] * 4 and rows["exchange"] == [1.0] * 4
    assert rows["schedule"] == [46.0, 46.0, 51.0, 51.0] and rows["after"] == [0.0] * 4
    assert rows["wait_in"] == [10.0] * 4 and rows["encode"] == [6.0] * 4 and rows["decode"] == [0.0] * 4


def test_topology_report_policy_section(tmp_path, monkeypatch):
    """bench/netlab/topology_report.py's policy table: per rate and data set, the forced and the
    policy's lossy call against the uncompressed one (speedup and its share of the ratio) and what the
    policy ran; nothing without the phase's file."""
    TR = _load("topology_report_under_test", REPO / "bench" / "netlab" / "topology_report.py")
    monkeypatch.setattr(TR, "RAW", tmp_path)
    assert TR.policy_section() == []

    def row(data, mode, t, ratio, **kw):
        return {"data": data, "mode": mode, "algorithm": "hierarchical", "median_s": t, "ratio": ratio,
                "link_gbps": 1.0, "load": 2.5, "started": 0, **kw}

    rows = [row("smooth", "none", 0.57, 1.0), row("smooth", "rel=1e-3", 0.114, 14.0),
            row("smooth", "rel=1e-3/auto", 0.076, 10.0, chosen=["lossy/fast"] * 3 + ["lossy/mid"]),
            row("grad", "none", 0.57, 1.0), row("grad", "rel=1e-3", 0.09, 7.0)]  # grad: no policy row
    (tmp_path / "policy-1g.json").write_text(json.dumps(rows))
    L = TR.policy_section()
    body = [x for x in L if x.startswith("| 1 Gbit/s")]
    assert len(body) == 1 and L[0].startswith("## The target call as the policy runs it")
    cells = [c.strip() for c in body[0].strip("|").split("|")]
    assert cells[:3] == ["1 Gbit/s", "smooth", "570"]
    assert cells[3:6] == ["114", "14.00", "5.00x = 36%"]
    assert cells[6:9] == ["76", "10.00", "7.50x = 75%"]
    assert cells[9] == "lossy/fast x3, lossy/mid x1"


@pytest.mark.skipif(not runtime_available(), reason="ncclz._core was built without the collective runtime")
def test_topo_bench_auto_mode_runs_the_policy_per_configuration(tmp_path):
    """bench/topo_bench.py's "/auto" modes (the lab's policy phase): policy="auto" on a communicator whose
    setting is "off" (as the lab's), each auto configuration recording what rank 0's policy ran; the
    forced configurations record nothing of the kind; every element within its bound."""
    TB = _load("topo_bench_under_test", REPO / "bench" / "topo_bench.py")
    assert TB.is_auto("rel=1e-3/auto") and not TB.is_auto("rel=1e-3/dense") and TB.margin_of("rel=1e-3/auto") is None
    assert TB.chosen("auto: lossy/fast (lossy/fast predicted >= 20% faster than lossless)") == "lossy/fast"
    assert TB.chosen("auto: none (message 10 B < 1024 B: latency-bound)") == "none"
    out = tmp_path / "rows.json"
    env = dict(os.environ, NCCLZ_TRANSPORT="socket", NCCLZ_SOCKET_THROTTLE_GBPS="0.5", NCCLZ_POLICY="off")
    r = subprocess.run([sys.executable, "-m", "ncclz.run", "-n", "2", sys.executable, str(REPO / "bench" / "topo_bench.py"),
                        "--size", "1M", "--data", "smooth,gaussian", "--modes", "none,rel=1e-3,rel=1e-3/auto",
                        "--algos", "ring", "--iters", "2", "--rounds", "1", "--auto-warmup", "2", "--json", str(out)],
                       check=False, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert len(rows) == 6
    from ncclz.policy import MODES

    for row in rows:
        assert row["err_over_bound"] <= 1.0, row
        if row["mode"].endswith("/auto"):
            assert len(row["chosen"]) == 2 and all(c in MODES for c in row["chosen"]), row["chosen"]
        else:
            assert "chosen" not in row


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
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "needs root" in r.stderr and "NCCLZ_SOCKET_THROTTLE_GBPS" in r.stderr




# ------------------------------------------------------------------ the policy's model (shapes)
def _policy(gbps, cal_ratio=10.0, enc=1e9, dec=1e9):
    pol = Policy(4, link_gbps=gbps, cores_per_rank=1)
    return pol, Calibration("x", cal_ratio, enc, dec, 1 << 20, 0.0)


def test_policy_model_shapes():
    pol, cal = _policy(0.5)
    S = 64 << 20
    t0 = pol.predict("all_reduce", S, None)
    assert t0 == pytest.approx(6 * 50e-6 + 1.5 * S / (0.5e9 / 8 * 0.95))
    assert pol.predict("all_reduce", S, cal) < t0 / 4  # slow link: compression pays
    fast, calf = _policy(100.0)
    assert fast.predict("all_reduce", S, calf) > fast.predict("all_reduce", S, None)  # fast link: it does not
    assert pol.predict("broadcast", S, None) > pol.predict("all_gather", S, None)
    with pytest.raises(ValueError, match="unknown collective"):
        pol.predict("alltoall", S, None)
    with pytest.raises(ValueError, match="world size"):
        Policy(link_gbps=1.0).predict("all_reduce", S, None)  # a model not yet given to a communicator


def test_policy_calibration_real_codec():
    pol = Policy(4, link_gbps=1.0, cores_per_rank=1, sample_bytes=256 << 10)
    x = B.rank_input("gaussian", 0, 1 << 18)
    c = pol.calibrate(x, ncclz.Lossy(rel=1e-2))
    assert c.ratio > 1.5 and c.enc_Bps > 0 and c.dec_Bps > 0 and c.sample_bytes == 256 << 10
    assert pol.calibrate(x, ncclz.Lossy(rel=1e-2)) is c  # cached
    assert pol.calibrations() == [c] and c.dtype == "float32" and c.mode == "lossy:rel=0.01"


# ------------------------------------------------------------------ data sets (ncclz.tools.data)
def test_every_listed_data_set_is_described_and_generated_ones_need_nothing():
    assert set(data.DESCRIPTIONS) == set(data.DATASETS) == set(B.DATASETS)
    for d in ("gaussian", "smooth", "sparse", "smooth-shaped"):
        assert data.unavailable(d) is None
    with pytest.raises(ValueError, match="unknown data set"):
        data.unavailable("imagenet")


def test_a_data_set_without_its_packages_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path))  # no cached gradients either
    real_find = importlib.util.find_spec
    monkeypatch.setattr(data.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("eofs", "sklearn") else real_find(name, *a))
    for d, pkgs in (("real", ("eofs", "scipy")), ("real-shaped", ("eofs",)), ("grad", ("torch", "scikit-learn"))):
        why = data.unavailable(d)
        assert why and all(p in why for p in pkgs) and "pip install" in why, (d, why)
    monkeypatch.setattr(data, "_BASE_CACHE", {})
    with pytest.raises(data.DataUnavailable, match="eofs"):
        data.rank_input("real", 0, 1000)
    with pytest.raises(data.DataUnavailable, match="scikit-learn"):
        data.rank_input("grad", 0, 1000)


def test_bench_data_py_is_the_package_with_the_repo_cache():
    bd = _load("bench_data_under_test", REPO / "bench" / "data.py")
    assert bd.gaussian is data.gaussian and bd.DATASETS is data.FIELDS
    assert bd.cache_dir() == Path(os.environ[data.CACHE_ENV])


# ------------------------------------------------------------------ console: progress apart from results
class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_console_keeps_progress_apart_from_results():
    out, err = io.StringIO(), io.StringIO()
    con = console.Console(out, err)  # not a terminal: plain lines
    assert con.mode == "lines"
    con.progress(0, 3, "all_reduce smooth 1MB ncclz none", 1.0)
    con.result("row 1")
    con.note("# skipped something")
    con.close()
    assert out.getvalue() == "row 1\n"
    assert err.getvalue() == "[1/3] all_reduce smooth 1MB ncclz none  (1 s elapsed)\n# skipped something\n"
    out, err = io.StringIO(), _Tty()
    bar = console.Console(out, err)
    assert bar.mode == "bar"
    bar.progress(1, 4, "x", 2.0)
    bar.result("row")  # the bar is cleared first and drawn again after
    bar.close()
    assert out.getvalue() == "row\n"
    e = err.getvalue()
    assert e.startswith("[######") and "1/4" in e and e.count("\r\033[K") == 2 and e.endswith("\r\033[K")


def test_launch_sinks_draw_rank_0_records_and_strip_its_prefix():
    out, err = io.StringIO(), io.StringIO()
    con = console.Console(out, err, mode="lines")
    sinks = console.LaunchSinks(con)
    rec = console.Console(io.StringIO(), io.StringIO(), mode="records")
    rec.progress(4, 9, "broadcast real 4MB ncclz none", 3.0)
    sinks.err.write("[rank 0] " + rec.err.getvalue())
    sinks.out.write("[rank 0] # all_reduce  data=smooth  2 ranks\n[rank 0] row")
    sinks.out.write(" continued\n[rank 1] Traceback\n")
    sinks.err.write("ncclz-run: rank 1 exited with code 1\n")
    assert out.getvalue() == "# all_reduce  data=smooth  2 ranks\nrow continued\n[rank 1] Traceback\n"
    assert err.getvalue() == "[5/9] broadcast real 4MB ncclz none  (3 s elapsed)\nncclz-run: rank 1 exited with code 1\n"


# ------------------------------------------------------------------ the CLI
def test_help_documents_every_option_with_its_default_and_choices():
    ap = B.build_parser()
    for act in ap._actions:
        if act.dest == "help":
            continue
        assert act.help and "default" in act.help, (act.option_strings, act.help)
    text = ap.format_help()
    for name in (*B.COLLECTIVES, *B.DATASETS, *B.SYSTEMS, *B.DTYPES, "auto:<mode>", "rel=R", "abs=E"):
        assert name in text, name
    assert "Exit status" in text and "eofs" in text


def test_plot_without_matplotlib_fails_before_running(monkeypatch, capsys):
    from ncclz.tools import plot

    monkeypatch.setattr(plot.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SystemExit) as e:
        B.parse_args(["--plot", "x.png"])
    assert e.value.code == 2 and "--plot needs matplotlib" in capsys.readouterr().err


def _bench_cmd():
    """The installed ncclz-bench (the console script next to this Python), as a user runs it."""
    exe = Path(sys.executable).parent / "ncclz-bench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ncclz.tools.bench"]


def _run_bench(tmp_path, args, timeout=300):
    env = dict(os.environ)
    env[data.CACHE_ENV] = str(tmp_path / "cache")  # a user's fresh cache, outside the repository
    for k in ("RANK", "WORLD_SIZE", "NCCLZ_LINK_GBPS", "NCCLZ_SOCKET_THROTTLE_GBPS", "PYTHONPATH"):
        env.pop(k, None)
    return subprocess.run([*_bench_cmd(), *args], check=False, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(not runtime_available(), reason="ncclz runtime (ncclz._core.comm) not built yet")
def test_bench_from_outside_the_repo_runs_every_listed_data_set(tmp_path):
    out = tmp_path / "r.json"
    csv_path = tmp_path / "r.csv"
    r = _run_bench(tmp_path, ["-n", "2", "--transport", "shm", "-b", "64K", "-e", "64K", "-c", "all_reduce,broadcast",
                              "-m", "none,rel=1e-2", "-d", ",".join(B.DATASETS), "-i", "1", "-w", "0",
                              "--json", str(out), "--csv", str(csv_path)])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    ran = {row["dataset"] for row in rows}
    absent = {d: data.unavailable(d) for d in B.DATASETS if data.unavailable(d)}
    assert ran == set(B.DATASETS) - set(absent), (ran, absent, r.stderr)
    for d, why in absent.items():  # only the optional ones may be absent, with the message saying why
        assert d in ("real", "grad", "real-shaped") and f"# skipped data set {d}: {why}" in r.stderr, (d, r.stderr)
    for row in rows:
        assert row["ok"], row
    assert len(rows) == 2 * 2 * len(ran)  # 2 collectives x 2 modes x 1 size per data set
    assert len(csv_path.read_text().splitlines()) == len(rows) + 1
    # results on stdout, one header per (collective, data set) table; progress on stderr only
    lines = r.stdout.splitlines()
    assert sum(line == B.HEADER for line in lines) == 2 * len(ran)
    assert sum(line.startswith("# all_reduce  data=") for line in lines) == len(ran)
    assert not any(line.startswith("[") for line in lines) and "[1/" in r.stderr
    assert "None" not in lines[0] and "link: rate not set" in lines[0], lines[0]
    if absent:
        pytest.skip(f"every data set ran except {sorted(absent)}: their optional packages are missing here "
                    f"(checked that the run says what to install)")


@pytest.mark.skipif(not runtime_available(), reason="ncclz runtime (ncclz._core.comm) not built yet")
def test_bench_exits_non_zero_when_nothing_ran(tmp_path):
    # SZ3 runs lossy modes only: with -m none there is nothing to run
    r = _run_bench(tmp_path, ["-n", "2", "--transport", "shm", "-s", "sz3", "--sz3-via", "ncclz", "-m", "none",
                              "-c", "all_reduce", "-d", "gaussian", "-b", "64K", "-e", "64K"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing ran" in r.stderr and "nothing ran" not in r.stdout


@pytest.mark.skipif(not runtime_available(), reason="ncclz runtime (ncclz._core.comm) not built yet")
def test_bench_throttled_auto_rows_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    r = _run_bench(tmp_path, ["-n", "2", "--throttle-gbps", "0.5", "-b", "1M", "-e", "1M", "-c", "all_reduce",
                              "-m", "none,auto:rel=1e-3", "-d", "smooth", "-i", "2", "--plot", str(png)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    head = r.stdout.splitlines()[0]
    assert "link: the socket transport paced to 0.5 Gbit/s" in head, head


# ------------------------------------------------------------------ the repository's wrapper
@pytest.mark.skipif(not runtime_available(), reason="ncclz runtime (ncclz._core.comm) not built yet")
def test_tiny_two_rank_run_over_shm(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ncclz_bench.py"), "-n", "2", "--transport", "shm",
                        "-b", "64K", "-e", "64K", "-c", "all_reduce,reduce_scatter,all_gather,broadcast",
                        "-m", "none,lossless,rel=1e-3", "-d", "gaussian", "-i", "2", "--no-progress",
                        "--json", str(out)], check=False, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 12
    for row in rows:
        assert row["ok"], row
        assert row["busbw"] == pytest.approx(row["algbw"] * B.busbw_factor(row["collective"], 2))
    assert "[1/" not in r.stderr  # --no-progress


@pytest.mark.skipif(not runtime_available(), reason="ncclz._core was built without the collective runtime")
def test_shaped_sweep_over_two_sizes_checks_every_element(tmp_path):
    """A shaped data set through every collective and two sizes: every rank builds the same inputs
    (the smaller size is a prefix of the field built at the largest), and errors stay within E."""
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ncclz_bench.py"), "-n", "2", "--transport", "shm",
                        "-b", "512K", "-e", "1M", "-f", "2", "-c", "all_reduce,reduce_scatter,all_gather,broadcast",
                        "-m", "none,rel=1e-3", "-d", "smooth-shaped", "-i", "1", "--no-progress",
                        "--json", str(out)], check=False, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 16
    for row in rows:
        assert row["ok"], row
        assert row["count"] % 65536 == 0
        if row["mode"] == "none":
            assert row["max_err"] <= 1e-5 * 2, row  # f32 rounding of a 2-term sum
        else:
            assert row["max_err"] <= row["bound"], row
