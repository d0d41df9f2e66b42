"""A subset of the differential fuzz of the API (bench/fuzz_calls.py: random collectives, dtypes, counts,
modes, ops, algorithms, policies, containers and memory layouts, every result against the fp64
reference): fixed seeds on a few layouts, none of its findings allowed (a wrong result, ranks that
ended a call differently, a Python exception that is not an ncclz error). Longer runs: the tool
itself (docs/BENCHMARKS.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import ncclz
import pytest

TOOL = Path(__file__).resolve().parents[2] / "bench" / "fuzz_calls.py"

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)


def _tool():
    spec = importlib.util.spec_from_file_location("fuzz_calls_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_seed_draws_a_float16_average_whose_sum_overflows():
    """Seed 36 on 3 ranks holds the call the fuzz found (float16 avg of values near 65504, exact): the
    subset below keeps checking it."""
    s = _tool().draw(36, 147, 3)
    assert (s["coll"], s["dt"], s["op"], s["mode"], s["data"]) == ("reduce_scatter", "float16", "avg", "none", "huge")


@pytest.mark.parametrize(
    "ranks,seed,calls,env",
    [(3, 36, 250, []), (4, 22, 120, ["NCCLZ_TOPO_HOSTS=2x2", "NCCLZ_TRANSPORT=socket"])],
)
def test_random_calls_keep_their_guarantees(tmp_path, ranks, seed, calls, env):
    out = tmp_path / "summary.json"
    cmd = [sys.executable, str(TOOL), "--ranks", str(ranks), "--seed", str(seed), "--calls", str(calls),
           "--timeout", "400", "--out", str(out)]
    for kv in env:
        cmd += ["--env", kv]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=450)
    assert out.exists(), f"the fuzz did not finish (exit status {p.returncode}):\n{p.stderr[-3000:]}"
    s = json.loads(out.read_text())
    findings = s["wrong"] + s["split"] + s["python"]
    assert not findings, json.dumps(findings[:5], indent=1)
    assert p.returncode == 0
    assert s["calls"] == calls and s["ok"] >= calls * 0.8  # most calls ran and were checked
