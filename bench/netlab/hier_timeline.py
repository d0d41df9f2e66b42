#!/usr/bin/env python3
"""Where the time of a hierarchical call goes, from its timeline, in the network lab.

    sudo python bench/netlab/hier_timeline.py                         # gradients and smooth field
    sudo python bench/netlab/hier_timeline.py --data grad --calls 20 --rate 1

Two hosts x 2 ranks (namespaces ``nzht-h0..1``, subnet 10.79.0.0/24, NICs shaped to --rate Gbit/s),
the issue-19 call: a 64 MiB float32 all_reduce at rel 1e-3, hierarchical, policy off, run by
bench/topo_bench.py (a barrier before each call) with ``NCCLZ_TRACE_FILE`` set, so every rank
writes its timeline (docs/GPU.md, "Timeline"). For each call but the first two, on every rank:
the call's steps before its schedule (the statistics scan ``describe_stats``, the descriptor
``exchange``), the schedule, and the channel threads' time in each kind of event (waits for
incoming slots, encode, reduce, posts, the stage's quantize and dequantize, decode). Printed as
a markdown table (medians over calls and ranks, with the range), beside the time the
compressed bytes need on the link (the hosts' wire bytes at the measured TCP goodput, 0.967 of
the rate) and the CPU time per call of the four ranks on this machine's CPUs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "bench"))
from netlab import Lab
from scale_model import GOODPUT  # TCP goodput / tbf rate, measured in the lab

STEPS = ("describe_stats", "exchange")
CHANNEL = ("wait_in", "encode", "reduce", "post_out", "stage_prepare", "stage_finish", "decode")


def summarize(base: str, nbytes: int, skip: int = 2) -> dict:
    """Per-call figures of every rank's timeline file <base>.rank<R>.json (ms lists)."""
    rows: dict = {k: [] for k in ("call", "pre", "schedule", "after", *STEPS, *CHANNEL)}
    slowest: dict = {}
    for f in sorted(glob.glob(base + ".rank*.json")):
        ev = json.load(open(f))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        xs = [e for e in ev if e.get("ph") == "X"]
        calls = [e for e in xs if e["tid"] == 0 and e["name"] == "all_reduce"
                 and e.get("args", {}).get("bytes") == nbytes][skip:]
        for k, c in enumerate(calls):
            t0, t1 = c["ts"], c["ts"] + c["dur"]
            inside = [e for e in xs if t0 <= e["ts"] < t1 and e is not c]
            step = {e["name"]: e for e in inside if e["tid"] == 0}
            sched = step.get("schedule")
            if not sched:
                continue
            rows["call"].append(c["dur"] / 1e3)
            slowest[k] = max(slowest.get(k, 0.0), c["dur"] / 1e3)
            rows["pre"].append((sched["ts"] - t0) / 1e3)
            rows["schedule"].append(sched["dur"] / 1e3)
            rows["after"].append((t1 - sched["ts"] - sched["dur"]) / 1e3)
            for s in STEPS:
                rows[s].append(step[s]["dur"] / 1e3 if s in step else 0.0)
            for n in CHANNEL:
                rows[n].append(sum(e["dur"] for e in inside if e["tid"] != 0 and e["name"] == n) / 1e3)
    rows["slowest rank"] = list(slowest.values())
    return rows


def report(data: str, rows: dict, bench: dict, rate: float) -> list[str]:
    link_ms = bench["wire_bytes"] * bench["local_size"] * 8 / (rate * GOODPUT * 1e9) * 1e3
    cpu_ms = bench["cpu_s"] * 1e3
    med = statistics.median
    host_mb = bench["wire_bytes"] * bench["local_size"] / 1e6
    head = (f"**{data}**: ratio {bench['ratio']:.2f}, {host_mb:.1f} MB per host link = {link_ms:.0f} ms on the link; "
            f"CPU {cpu_ms:.0f} ms per call for the 4 ranks = {cpu_ms / bench['cpus']:.0f} ms on the {bench['cpus']} "
            f"CPUs; {len(rows['call'])} calls x ranks")
    lines = [head, "", "| part | median ms | range ms |", "|---|---:|---|"]
    names = {"call": "call (each rank's)", "slowest rank": "call (the slowest rank's)",
             "pre": "before the schedule", "describe_stats": "- statistics scan", "exchange": "- descriptor exchange",
             "schedule": "schedule", "after": "after the schedule"}
    for k in ("slowest rank", "call", "pre", "describe_stats", "exchange", "schedule", "after", *CHANNEL):
        v = rows[k]
        if v:
            label = names.get(k, f"channel threads: `{k}`")
            lines.append(f"| {label} | {med(v):.1f} | {min(v):.1f}-{max(v):.1f} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="grad,smooth")
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--rate", type=float, default=1.0, help="host NIC rate, Gbit/s")
    a = ap.parse_args()
    nbytes = 64 << 20
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nzht-") as tmp, Lab(2, a.rate, prefix="nzht", subnet="10.79.0") as lab:
        port = 29880
        for data in a.data.split(","):
            base = os.path.join(tmp, data)
            js = os.path.join(tmp, f"{data}.json")
            cmd = [sys.executable, str(ROOT / "bench" / "topo_bench.py"), "--size", "64M", "--data", data,
                   "--modes", "rel=1e-3", "--algos", "hierarchical", "--iters", str(a.calls + 2), "--rounds", "1",
                   "--json", js]
            rc, _ = lab.exec_ranks(cmd, nranks=4, port=port, timeout=900, ranks_per_host=2, capture=True,
                                   extra_env={"NCCLZ_TRACE_FILE": base})
            port += 1
            if rc != 0:
                raise SystemExit(f"hier_timeline: {data} failed (status {rc})")
            bench = json.load(open(js))[0]
            out += report(data, summarize(base, nbytes), bench, a.rate) + [""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
