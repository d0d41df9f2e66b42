"""The timeline trace (NCCLZ_TRACE_FILE; docs/GPU.md, "Timeline"): each rank writes
<path>.rank<R>.json, Chrome trace-event JSON, when its communicator closes."""

from __future__ import annotations

import json

from test_comm import run_ranks

CHANNEL_EVENTS = {"channel", "wait_in", "acquire_out", "encode", "post_out", "settle"}
CALL_STEPS = {"check_describe", "exchange", "decide", "schedule"}


def test_trace_file_per_rank(tmp_path):
    base = tmp_path / "timeline"
    ranks = run_ranks(tmp_path, "trace", 2, "shm", env={"NCCLZ_TRACE_FILE": str(base)})
    ranks.assert_ok()
    assert sorted(p.name for p in tmp_path.glob("timeline*")) == ["timeline.rank0.json", "timeline.rank1.json"]
    for r in range(2):
        with open(f"{base}.rank{r}.json") as f:
            doc = json.load(f)
        assert doc["otherData"]["ncclz_rank"] == r and doc["otherData"]["dropped_events"] == 0
        events = doc["traceEvents"]
        assert all(e["pid"] == r for e in events)
        threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
        assert threads[0] == "calls" and threads[1] == "channel 0", threads
        spans = [e for e in events if e["ph"] == "X"]
        assert all(e["dur"] >= 0 for e in spans)
        calls = [e for e in spans if e["name"] == "all_reduce"]
        assert [c["args"]["ran"] for c in calls] == ["lossy_rel", "none"], calls
        assert [c["args"]["seq"] for c in calls] == [0, 1]
        assert all(c["args"]["bytes"] == 1_200_000 and c["tid"] == 0 for c in calls)
        names = {e["name"] for e in spans}
        assert CALL_STEPS | CHANNEL_EVENTS | {"describe_stats"} <= names, names
        assert names & {"decode", "reduce"}, names
        # The channels' events lie inside the calls.
        for e in spans:
            if e["tid"] >= 1:
                assert any(c["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 1e-3 for c in calls), e


def test_no_trace_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCLZ_TRACE_FILE", raising=False)
    ranks = run_ranks(tmp_path, "trace", 2, "shm")
    ranks.assert_ok()
    assert not list(tmp_path.rglob("*.rank*.json"))
