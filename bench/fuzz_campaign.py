"""Fuzz campaigns over communicator settings: each run draws its own rank count and settings, then runs
bench/fuzz_calls.py (or bench/fuzz_torch.py) with them.

    python bench/fuzz_campaign.py --first 1001 --runs 60 --calls 200 [--tool torch] [--mismatch 0.15] [--dir D]

A run's seed is ``first + k``; it draws 2, 3, 4 or 6 ranks and, each with its own probability, the
transport (shm or sockets), channels, slot bytes, slots per connection, the sparse slices' and exact
slices' bytes, pipelined quantization, hierarchical rounds, sparse inputs, the latency, two-hop and
direct thresholds, polling, checksums, exact channels, a hierarchical layout (2x2; 2x3 or 3x2 for 6
ranks) and the algorithm; unset ones keep their defaults. One line per run (seed, ranks, settings,
exit status, counts); each run's summary in ``DIR/<tool><seed>.json``, its log beside it. Exit status 1
if any run found something (the fuzz tools' exit status). bench/results/fuzz.md has the campaigns run.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def settings(seed: int) -> tuple[int, dict]:
    """Run `seed`'s rank count and environment."""
    g = random.Random(seed)
    ranks = g.choice([2, 3, 4, 4, 6])
    env: dict = {}

    def maybe(name: str, values: list, p: float = 0.5) -> None:
        if g.random() < p:
            env[name] = str(g.choice(values))

    maybe("NCCLZ_TRANSPORT", ["shm", "socket"], 0.6)
    maybe("NCCLZ_NCHANNELS", [1, 2, 4, 8])
    maybe("NCCLZ_SLOT_BYTES", [1024, 4096, 65536, 262144])
    maybe("NCCLZ_NSLOTS", [2, 3, 8], 0.3)
    maybe("NCCLZ_SPARSE_SLICE_BYTES", [4096, 65536, 1 << 20], 0.4)
    maybe("NCCLZ_EXACT_SLICE_BYTES", [1024, 8192], 0.3)
    maybe("NCCLZ_PIPELINE_QUANTIZE", [0, 1], 0.3)
    maybe("NCCLZ_HIER_ROUNDS", [0, 1], 0.3)
    maybe("NCCLZ_SPARSE_INPUT", [0, 1], 0.3)
    maybe("NCCLZ_LATENCY_BYTES", [0, 1024, 16384], 0.4)
    maybe("NCCLZ_TWO_HOP_BYTES", [0, 65536], 0.3)
    maybe("NCCLZ_DIRECT_FROM_BYTES", [0, 4096, 1 << 20], 0.4)
    maybe("NCCLZ_SPIN_US", [0, 50], 0.2)
    maybe("NCCLZ_CHECKSUM", [1], 0.15)
    if "NCCLZ_NCHANNELS" in env:
        maybe("NCCLZ_EXACT_NCHANNELS", [1, int(env["NCCLZ_NCHANNELS"])], 0.3)
    if ranks == 4 and g.random() < 0.4:
        env["NCCLZ_TOPO_HOSTS"] = "2x2"
    if ranks == 6 and g.random() < 0.5:
        env["NCCLZ_TOPO_HOSTS"] = g.choice(["2x3", "3x2"])
    if g.random() < 0.2:
        env["NCCLZ_ALGO"] = g.choice(["ring", "hierarchical"])
    return ranks, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--first", type=int, default=1001)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--tool", choices=["calls", "torch"], default="calls")
    ap.add_argument("--mismatch", type=float, default=0.0, help="fuzz_calls --mismatch")
    ap.add_argument("--dir", default="fuzz-campaign", help="where the runs' summaries and logs go")
    a = ap.parse_args()
    out = Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    tool = HERE / f"fuzz_{a.tool}.py"
    found = 0
    for seed in range(a.first, a.first + a.runs):
        ranks, env = settings(seed)
        summary = out / f"{a.tool}{seed}.json"
        cmd = [sys.executable, str(tool), "--ranks", str(ranks), "--seed", str(seed), "--calls", str(a.calls),
               "--timeout", "900", "--out", str(summary)]
        if a.mismatch:
            cmd += ["--mismatch", str(a.mismatch)]
        for kv in env.items():
            cmd += ["--env", "=".join(kv)]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        (out / f"{a.tool}{seed}.log").write_text(p.stdout + p.stderr)
        counts = ""
        if summary.exists():
            s = json.loads(summary.read_text())
            counts = " ".join(f"{k} {len(s[k]) if isinstance(s[k], list) else s[k]}"
                              for k in ("calls", "ok", "mismatched", "wrong", "split", "python") if k in s)
        found += p.returncode != 0
        print(f"seed {seed} ranks {ranks} {' '.join('='.join(kv) for kv in env.items()) or '-'}: "
              f"exit {p.returncode} {counts}", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
