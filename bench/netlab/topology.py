#!/usr/bin/env python3
"""Topology benchmarks in the network lab: several ranks per emulated host, hierarchical against flat.

    sudo python bench/netlab/topology.py                  # every phase, then the report
    sudo python bench/netlab/topology.py --phases pair    # one phase
    python bench/netlab/topology.py --report-only         # bench/results/topology.md from the raw files

One lab of 4 hosts (namespaces ``nztp-h0..3``, bridge ``nztpbr``, subnet 10.78.0.0/24: a prefix of
its own, so another lab may run beside it) whose host NICs are shaped to --rate Gbit/s; each phase
runs L = 2 ranks per host (netlab.Lab.exec_ranks(ranks_per_host=2): NCCLZ_TOPO_HOST is the host's
index, so the two ranks of a namespace are one host and talk through shared memory, and the
namespaces talk through their shaped NICs). Phases:

  pair   2 hosts x 2 ranks: 64 MiB float32 all_reduce of the smooth field and of CNN gradients,
         uncompressed and at rel 1e-3, on the flat ring and hierarchically, side by side
         (bench/topo_bench.py: rounds that run every configuration in turn, slowest rank's time)
  check  4 hosts x 2 ranks: every collective in every mode hierarchically, every element against
         the fp64 reference on every rank (tests/python/_topo_workers.py's "hier" scenario)
  quad   4 hosts x 2 ranks: every collective, uncompressed and at rel 1e-3, ring and hierarchical
  colls  2 hosts x 2 ranks: the same as quad
  wide   2 hosts x 4 ranks: the pair phase's lossy calls, for their ratios (L = 4 ranks per host)
  one    1 host x 2 ranks over shared memory, uncompressed: the intra-host rate of each collective
         (the scale model's calibration, not a validation point)
  spot   4 hosts x 2 ranks: the quad phase's lossy all_reduce and reduce_scatter again, on their own
         (--phases spot; not in the default run): their run-to-run spread
  effort 2 hosts x 2 ranks: the pair phase's lossy calls with the default and the dense codec
         effort (--phases effort --rate R; not in the default run), raw file effort-<R>g.json
  policy 2 hosts x 2 ranks: the pair phase's hierarchical all_reduce, uncompressed, at rel 1e-3 as
         forced (policy "off") and as rank 0's policy runs it (policy "auto": the mode and codec
         effort a user's call gets; --phases policy --rate R; not in the default run), raw file
         policy-<R>g.json
  rounds, phased  2 hosts x 2 ranks: the hierarchical all_reduce, reduce_scatter and all_gather,
         64 MiB, uncompressed and at rel 1e-3, in rounds (the default where they apply) and with the phases
         one after the other (NCCLZ_HIER_ROUNDS=0), taking turns
         (--phases rounds,phased --rate R; not in the default run), raw files rounds-<R>g.json,
         phased-<R>g.json

Raw results: bench/results/topology_raw/<phase>.json; the report (bench/results/topology.md) puts
them side by side with the targets of issue 19 and the scale model's predictions
(bench/scale_model.py). The lab's 8 ranks share this machine's CPUs (2 on the development VM):
compression runs CPU-bound there, which the report says where it matters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from netlab import Lab

RAW = ROOT / "bench" / "results" / "topology_raw"
PREFIX, SUBNET = "nztp", "10.78.0"
BENCH = [sys.executable, str(ROOT / "bench" / "topo_bench.py")]
WORKERS = ROOT / "tests" / "python" / "_topo_workers.py"


def run_bench(lab: Lab, name: str, hosts: int, local: int, args: list, port: int, timeout: float,
              env: dict | None = None) -> list:
    out = RAW / f"{name}.json"
    if out.exists():
        out.unlink()
    cmd = BENCH + [*args, "--json", str(out), "--label", name]
    print(f"== {name}: {hosts} hosts x {local} ranks: {' '.join(args)}", file=sys.stderr, flush=True)
    t0 = time.time()
    rc, _ = lab.exec_ranks(cmd, nranks=hosts * local, port=port, timeout=timeout, ranks_per_host=local,
                           capture=True, extra_env=env)
    if rc != 0 or not out.exists():
        raise SystemExit(f"topology: phase {name} failed (status {rc})")
    rows = json.loads(out.read_text())
    for r in rows:
        r["machine"] = machine()
    out.write_text(json.dumps(rows, indent=1))
    print(f"== {name}: {len(rows)} configurations in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


# phase -> (hosts, ranks per host, topo_bench arguments, extra environment). The first call of a
# configuration in a round was slower than the next ones until 2026-11-27 (85-136 ms against 50-98
# for the 4 x 2 lossy all_gather): topo_bench checked it while other ranks were still in the call
# (bench/results/scale.md, "First calls"); --iters >= 3 let the median skip it.
ALL = "all_reduce,reduce_scatter,all_gather,broadcast"
PHASES = {
    "one": (1, 2, ["--size", "16M", "--data", "smooth", "--colls", ALL, "--modes", "none", "--algos", "ring",
                   "--iters", "3"], {"NCCLZ_TRANSPORT": "shm"}),
    "pair": (2, 2, ["--size", "64M", "--data", "smooth,grad", "--modes", "none,rel=1e-3", "--algos",
                    "ring,hierarchical", "--iters", "3"], None),
    "colls": (2, 2, ["--size", "16M", "--data", "smooth", "--colls", ALL, "--modes", "none,rel=1e-3", "--algos",
                     "ring,hierarchical", "--iters", "4"], None),
    "quad": (4, 2, ["--size", "16M", "--data", "smooth", "--colls", ALL, "--modes", "none,rel=1e-3", "--algos",
                    "ring,hierarchical", "--iters", "4"], None),
    # 2 hosts x 4 ranks: the ratios of the pair phase's lossy calls with twice the ranks per host (each
    # host's sum spans 4 ranks' inputs); 8 ranks on this VM's CPUs, so its times are not reported
    "wide": (2, 4, ["--size", "64M", "--data", "smooth,grad", "--modes", "rel=1e-3", "--algos", "ring,hierarchical",
                    "--iters", "1"], None),
    # 4 hosts x 2 ranks, a rerun of the quad phase's lossy reductions (not in the default phases): the
    # run-to-run spread of the points the scale model is furthest from (bench/results/scale.md)
    "spot": (4, 2, ["--size", "16M", "--data", "smooth", "--colls", "all_reduce,reduce_scatter", "--modes", "rel=1e-3",
                    "--algos", "ring,hierarchical", "--iters", "4"], None),
    # 2 hosts x 2 ranks, the pair phase's lossy calls with the default and the dense codec effort
    # (ncclz.policy.modes: rANS on any gain), not in the default phases; its raw file is named by
    # the lab's rate (effort-<rate>g.json), so runs at several rates stand side by side
    "effort": (2, 2, ["--size", "64M", "--data", "smooth,grad", "--modes", "rel=1e-3,rel=1e-3/dense", "--algos",
                      "ring,hierarchical", "--iters", "3"], None),
    # 2 hosts x 2 ranks, the pair phase's hierarchical all_reduce with the policy deciding the lossy call
    # ("rel=1e-3/auto": bench/topo_bench.py) beside the forced one and the uncompressed one; not in the
    # default phases; raw file policy-<rate>g.json
    "policy": (2, 2, ["--size", "64M", "--data", "smooth,grad", "--modes", "none,rel=1e-3,rel=1e-3/auto",
                      "--algos", "hierarchical", "--iters", "3"], None),
    # 2 hosts x 2 ranks, the hierarchical all_reduce, reduce_scatter and all_gather (both modes) in
    # rounds (the intra-host phases overlapping the exchange between
    # hosts, the default) and with the phases one after the other (NCCLZ_HIER_ROUNDS=0), taking turns;
    # not in the default phases; raw files rounds-<rate>g.json and phased-<rate>g.json
    "rounds": (2, 2, ["--size", "64M", "--data", "smooth,grad", "--colls", "all_reduce,reduce_scatter,all_gather",
                      "--modes", "none,rel=1e-3", "--algos", "hierarchical", "--iters", "3"], {"NCCLZ_HIER_ROUNDS": "1"}),
    "phased": (2, 2, ["--size", "64M", "--data", "smooth,grad", "--colls", "all_reduce,reduce_scatter,all_gather",
                      "--modes", "none,rel=1e-3", "--algos", "hierarchical", "--iters", "3"], {"NCCLZ_HIER_ROUNDS": "0"}),
}
BY_RATE = ("effort", "policy", "rounds", "phased")  # phases whose raw files are named by the lab's rate


def merge(name: str, runs: list) -> None:
    """One row per configuration over all rounds: every call's time, the median, and the medians of
    the rounds' statistics; the rounds' own files are removed."""
    import statistics

    rows = []
    for i, row in enumerate(runs[0]):
        rr = [run[i] for run in runs]
        m = dict(row)
        m["times"] = [t for r in rr for t in r["times"]]
        m["median_s"] = statistics.median(m["times"])
        m["min_s"] = min(m["times"])
        m["rounds"] = len(rr)
        m["round_medians"] = [r["median_s"] for r in rr]
        if "chosen" in row:  # a "/auto" configuration: what the policy ran each timed call with
            m["chosen"] = [c for r in rr for c in r["chosen"]]
        for k in ("ratio", "wire_bytes", "raw_bytes", "local_bytes", "encode_s", "decode_s", "quantize_s", "wait_s",
                  "cpu_s", "load"):
            m[k] = statistics.median(r[k] for r in rr)
        m["err_over_bound"] = max((r["err_over_bound"] or 0.0) for r in rr)
        m["label"] = name
        rows.append(m)
    (RAW / f"{name}.json").write_text(json.dumps(rows, indent=1))
    for f in RAW.glob(f"{name}-r*.json"):
        f.unlink()


def run_check(lab: Lab, hosts: int, local: int, port: int, timeout: float) -> dict:
    """The correctness phase: every collective and mode, every element checked on every rank."""
    import tempfile

    outdir = Path(tempfile.mkdtemp(prefix="nztp-check-"))  # the ranks' files; check.json keeps the summary
    cmd = [sys.executable, str(WORKERS), "hier", str(outdir), "hierarchical", "70001"]
    print(f"== check: {hosts} hosts x {local} ranks, every collective and mode", file=sys.stderr, flush=True)
    rc, _ = lab.exec_ranks(cmd, nranks=hosts * local, port=port, timeout=timeout, ranks_per_host=local)
    res = [json.loads((outdir / f"rank{r}.json").read_text()) if (outdir / f"rank{r}.json").exists() else None
           for r in range(hosts * local)]
    ok = rc == 0 and all(r is not None for r in res)
    calls = res[0]["calls"] if ok else {}
    same = ok and all(r["hashes"][k] == res[0]["hashes"][k] for r in res[1:] for k in res[0]["hashes"]
                      if not k.startswith("reduce_scatter"))
    summary = {"status": rc, "ok": ok, "identical": same, "ranks": hosts * local, "hosts": hosts,
               "checks_per_rank": [r["checks"] if r else None for r in res],
               "topology": res[0]["topology"] if ok else None,
               "calls": calls, "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M")}
    (RAW / "check.json").write_text(json.dumps(summary, indent=1))
    print(f"== check: status {rc}, all ranks identical: {same}", file=sys.stderr, flush=True)
    return summary


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "?"
    return f"{os.cpu_count()} CPUs ({model}), {os.uname().release}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="one,pair,colls,quad,wide,check")
    ap.add_argument("--rate", type=float, default=1.0, help="host NIC rate, Gbit/s")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of the timed phases, taking turns")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    RAW.mkdir(parents=True, exist_ok=True)
    if not a.report_only:
        phases = a.phases.split(",")
        os.environ["NCCLZ_POLICY"] = "off"
        timed = [p for p in ("one", "pair", "colls", "quad", "wide", "spot", "effort", "policy", "rounds", "phased")
                 if p in phases]
        runs: dict = {p: [] for p in timed}
        raw_name = {p: f"{p}-{a.rate:g}g" if p in BY_RATE else p for p in timed}
        with Lab(4, a.rate, prefix=PREFIX, subnet=SUBNET) as lab:
            print(lab.describe(), file=sys.stderr)
            port = 29700
            # The phases take turns, round after round, so that each sees the same mix of this
            # machine's other load (the median of every configuration is over all rounds).
            for rnd in range(a.rounds):
                for p in timed:
                    hosts, local, args, env = PHASES[p]
                    runs[p].append(run_bench(lab, f"{raw_name[p]}-r{rnd}", hosts, local, args + ["--rounds", "1"],
                                             port, 1800, env))
                    port += 1
            for p in timed:
                merge(raw_name[p], runs[p])
            if "check" in phases:
                run_check(lab, 4, 2, port, 1800)
    subprocess.run([sys.executable, str(HERE / "topology_report.py")], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
