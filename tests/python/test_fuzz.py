"""A subset of the differential fuzz of the API (bench/fuzz_calls.py: random collectives, dtypes, counts,
modes, ops, algorithms, policies, containers and memory layouts, every result against the fp64
reference) and of the torch.distributed backend (bench/fuzz_torch.py): fixed seeds on a few layouts,
none of their findings allowed (a wrong result, ranks that ended a call differently, a Python exception
that is not an ncclz error). Longer runs: the tools themselves (tests/README.md, "Random calls")."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import ncclz
import pytest

TOOL = Path(__file__).resolve().parents[2] / "bench" / "fuzz_calls.py"
TORCH_TOOL = TOOL.with_name("fuzz_torch.py")

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


def test_the_mismatch_seed_draws_a_call_one_rank_refuses_alone():
    """Seed 7 on 3 ranks with --mismatch 0.3 holds the call the fuzz found: rank 1 alone makes call 43 a
    lossy all_gather of integers, which it refuses before the runtime sees it."""
    t = _tool()
    s, mine = t.mismatched(t.draw(7, 43, 3), 7, 43, 3, 0.3)
    assert s["mismatch"] == {"rank": 1, "kind": "dtype"} and s["coll"] == "all_gather" and s["mode"] == "rel_small"
    assert mine["dt"] not in t.FLOATS


def test_the_seeds_draw_ring_shifts_whose_odd_ranks_make_plain_calls():
    """The subsets below draw ring shifts in which the odd ranks send then receive, or receive then
    send, with plain calls against their neighbours' groups (seed 36 on 3 ranks: calls 176 and 190)."""
    t = _tool()
    for seed, w, calls in ((36, 3, 250), (22, 4, 120)):
        plain = {t.draw(seed, i, w)["plain"] for i in range(calls) if t.draw(seed, i, w)["coll"] == "group"}
        assert plain == {0, 1, 2}, (seed, plain)
    assert (t.draw(36, 176, 3)["plain"], t.draw(36, 190, 3)["plain"]) == (1, 2)


def test_the_torch_seed_draws_a_complex_reduce_scatter():
    """Seed 1 on 2 ranks holds the torch backend's call the fuzz found (a complex reduce_scatter, which
    raised while writing its result back)."""
    spec = importlib.util.spec_from_file_location("fuzz_torch_under_test", TORCH_TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    draws = [mod.draw(1, i, 2) for i in range(150)]
    assert any(d["fn"].startswith("reduce_scatter") and d["dt"] == "complex64" for d in draws)


@pytest.mark.parametrize(
    "tool,ranks,seed,calls,env",
    [
        ("api", 3, 36, 250, []),
        ("api", 4, 22, 120, ["NCCLZ_TOPO_HOSTS=2x2", "NCCLZ_TRANSPORT=socket"]),
        ("torch", 2, 1, 150, []),
        # one rank makes some calls differently (--mismatch): call 43 is a lossy uint8 all_gather on
        # rank 1 alone, which it refused on its own, and its later calls met the others' earlier ones
        ("api", 3, 7, 60, ["--mismatch=0.3"]),
    ],
)
def test_random_calls_keep_their_guarantees(tmp_path, tool, ranks, seed, calls, env):
    if tool == "torch":
        pytest.importorskip("torch")
    out = tmp_path / "summary.json"
    program = TOOL if tool == "api" else TORCH_TOOL
    cmd = [sys.executable, str(program), "--ranks", str(ranks), "--seed", str(seed), "--calls", str(calls),
           "--timeout", "400", "--out", str(out)]
    for kv in env:
        cmd += [kv] if kv.startswith("--") else ["--env", kv]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=450)
    assert out.exists(), f"the fuzz did not finish (exit status {p.returncode}):\n{p.stderr[-3000:]}"
    s = json.loads(out.read_text())
    findings = s["wrong"] + s["split"] + s["python"]
    assert not findings, json.dumps(findings[:5], indent=1)
    assert p.returncode == 0
    mismatched = s.get("mismatched", 0)  # (every rank raised in these, as it must)
    assert s["calls"] == calls and s["ok"] >= (calls - mismatched) * 0.8  # most calls ran and were checked
