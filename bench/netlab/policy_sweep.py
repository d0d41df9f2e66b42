#!/usr/bin/env python3
"""The compression policy over the rate sweep, repeated: is the Communicator's default policy ever
more than 5% slower than no compression? Needs root (bench/netlab/netlab.py).

    python bench/netlab/policy_sweep.py --repeats 3            # runs the lab, then the table
    python bench/netlab/policy_sweep.py --table-only           # the table from earlier runs

Each repeat is one `suite.py --phases rates` run (4 hosts, 64 MiB float32 all_reduce, smooth and
gaussian, ncclz none / rel=1e-3 / auto:rel=1e-3 side by side in the same run), raw JSON in
bench/results/netlab_policy_raw/rate_<R>_r<k>.json. `auto:rel=1e-3` asks for rel=1e-3 and lets
the Communicator's default policy (rank 0's decision, in the call descriptor) pick the mode;
`none` and `rel=1e-3` run with policy="off". The table gives medians over the repeats of each
row's median time, and "auto vs none" per repeat (same run), then its median and worst.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "bench", "results", "netlab_policy_raw")


def loadavg() -> list:
    return [round(v, 2) for v in os.getloadavg()]


def run(a) -> None:
    os.makedirs(a.out, exist_ok=True)
    meta_path = os.path.join(a.out, "runs.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else []
    for k in range(a.first, a.first + a.repeats):
        cmd = [sys.executable, os.path.join(HERE, "suite.py"), "--phases", "rates", "--rates", a.rates,
               "--systems", "ncclz", "--no-mpi", "--tag", f"_r{k}", "--raw", a.out, "--prefix", a.prefix,
               "--budget", str(a.budget)]
        rec = {"repeat": k, "cmd": " ".join(cmd[1:]), "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "load_before": loadavg()}
        print(f"[policy_sweep] repeat {k}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        rc = subprocess.run(cmd, timeout=a.timeout).returncode
        rec.update(rc=rc, load_after=loadavg(), end=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        rec["netns_left"] = [x for x in ns if x.startswith(a.prefix)]
        # a repeat overwrites the raw files of an earlier one with the same number: so its record
        meta = [m for m in meta if m.get("repeat") != k] + [rec]
        json.dump(meta, open(meta_path, "w"), indent=1)
        if rc != 0:
            print(f"[policy_sweep] repeat {k} failed (exit {rc}); stopping", file=sys.stderr)
            break


def load(out: str) -> tuple[dict, list]:
    """{(rate, dataset): {repeat: {mode: row}}} of the ncclz rows, and the runs' metadata."""
    rows: dict = {}
    for f in sorted(glob.glob(os.path.join(out, "rate_*_r*.json"))):
        rate, rep = os.path.basename(f)[5:-5].rsplit("_r", 1)
        for r in json.load(open(f))["rows"]:
            if r["system"] == "ncclz":
                rows.setdefault((float(rate), r["dataset"]), {}).setdefault(int(rep), {})[r["mode"]] = r
    meta_path = os.path.join(out, "runs.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else []
    return rows, meta


def table(out: str) -> tuple[str, float | None, float | None]:
    """(markdown, worst median auto-vs-none over the sweep, worst single repeat)."""
    rows, meta = load(out)
    L = [("| Gbit/s | data | none ms | rel=1e-3 ms | auto ms | auto ran | auto vs none | chosen mode vs none | "
         "auto vs none, worst repeat | rel=1e-3 vs none | repeats | load avg (1 min) |"),
         "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    worst_med = worst_one = None
    for (rate, ds), reps in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "smooth")):
        full = [r for r in reps.values() if all(m in r for m in ("none", "rel=0.001", "auto:rel=0.001"))]
        if not full:
            continue
        med = lambda m, full=full: statistics.median(r[m]["time_us"] / 1e3 for r in full)
        auto = [r["auto:rel=0.001"]["time_us"] / r["none"]["time_us"] - 1 for r in full]
        lz = [r["rel=0.001"]["time_us"] / r["none"]["time_us"] - 1 for r in full]
        # decision quality: the measured time of the mode the policy ran, from its own row in the same run
        chosen = [(r["none"] if r["auto:rel=0.001"].get("policy_choice") == "none" else r["rel=0.001"])["time_us"]
                  / r["none"]["time_us"] - 1 for r in full
                  if r["auto:rel=0.001"].get("policy_choice") in ("none", "rel=0.001")]
        picks = sorted({r["auto:rel=0.001"].get("policy_choice", "?") for r in full})
        loads = [r[m].get("loadavg1", float("nan")) for r in full for m in r]
        m_auto = statistics.median(auto)
        worst_med = m_auto if worst_med is None else max(worst_med, m_auto)
        worst_one = max(auto) if worst_one is None else max(worst_one, max(auto))
        L.append(f"| {rate:g} | {ds} | {med('none'):.0f} | {med('rel=0.001'):.0f} | {med('auto:rel=0.001'):.0f} | "
                 f"{' / '.join(picks)} | {100 * m_auto:+.1f}% | "
                 f"{(f'{100 * statistics.median(chosen):+.1f}%') if chosen else '-'} | {100 * max(auto):+.1f}% | "
                 f"{100 * statistics.median(lz):+.1f}% | {len(full)} | {min(loads):.1f} .. {max(loads):.1f} |")
    L.append("")
    L.append("Times: per call, slowest rank, median over the iterations of a run, then the median over the repeats. "
             "\"vs none\" columns: per repeat against the none row of the same run, then the median; \"chosen mode "
             "vs none\": the row of the mode the policy ran (none or rel=1e-3) against none, same run.")
    if worst_med is not None:
        L.append("")
        L.append(f"Worst over the sweep, auto vs none: median {100 * worst_med:+.1f}%, single repeat "
                 f"{100 * worst_one:+.1f}%; target <= +5%.")
    if meta:
        L.append("")
        L.append("Runs: " + "; ".join(f"repeat {m['repeat']} {m['start']} .. {m['end']} exit {m['rc']}, load average "
                                     f"{m['load_before'][0]} -> {m['load_after'][0]}, namespaces left afterwards: "
                                     f"{m['netns_left'] or 'none'}" for m in meta) + ".")
    return "\n".join(L), worst_med, worst_one


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--first", type=int, default=1, help="number of the first repeat (to add repeats later)")
    ap.add_argument("--rates", default="0.1,0.5,1,2.5,10")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--prefix", default="nczp", help="namespace prefix (apart from other labs on the machine)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args(argv)
    if not a.table_only:
        run(a)
    t = table(a.out)[0]
    print(t)
    with open(os.path.join(a.out, "policy.md"), "w") as f:
        f.write(t + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
