#!/usr/bin/env python3
"""A ring shift over a slow link: comm.group against the ways to write it without groups.

    python bench/p2p_group_bench.py                       # 4 ranks, socket at 1 Gbit/s, 4/16/64 MiB
    python bench/p2p_group_bench.py --sizes 16M --rounds 1 --out -

Every rank sends `size` bytes of the benchmark's smooth field (ncclz.tools.data.rank_input "smooth",
float32) to rank r+1 and receives rank r-1's: the exchange of a pipeline or a periodic halo. Three
ways to write it, taking turns call by call:

- group: ``comm.group(sends=[(x, r+1)], recvs=[(y, r-1)])``: both directions at once;
- all_to_allv: ``comm.all_to_all(x, send_counts=...)`` with every count 0 but the one to r+1 (the
  workaround before groups: a collective, all ranks take part);
- paired: single send and recv, even ranks sending first and odd ranks receiving first (needs an even
  number of ranks; two phases, each link busy in one of them).

Ranks over the socket transport paced by NCCLZ_SOCKET_THROTTLE_GBPS (a token bucket on each rank's
sends, no added latency), policy off. Time: the slowest rank's wall time per call (a barrier before
each), median over a round's timed calls, then over rounds. Every element of the first round's
results is checked against the sender's data (bit-exact for none, within E for lossy).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from all_to_all_bench import parse_size

METHODS = ("group", "all_to_allv", "paired")
MODES = ("none", "lossy rel=1e-3")


def worker(args) -> None:
    import ncclz
    from ncclz.tools.data import rank_input

    comm = ncclz.init(policy="off")
    r, n = comm.rank, comm.world_size
    right, left = (r + 1) % n, (r - 1) % n
    rows = []
    for rnd in range(args.rounds):
        for nbytes in args.sizes:
            count = nbytes // 4
            x = rank_input("smooth", r, count)
            want = rank_input("smooth", left, count).astype(np.float64) if rnd == 0 else None
            for mode in args.modes:
                spec = None if mode == "none" else ncclz.Lossy(rel=float(mode.split("rel=")[1]))
                for method in args.methods:
                    y = np.zeros_like(x)
                    sc = [0] * n
                    sc[right] = count
                    rc = [0] * n
                    rc[left] = count
                    walls = []
                    for i in range(args.warmup + args.iters):
                        comm.barrier()
                        t0 = time.perf_counter()
                        if method == "group":
                            comm.group(sends=[(x, right)], recvs=[(y, left)], compression=spec)
                        elif method == "all_to_allv":
                            comm.all_to_all(x, spec, out=y, send_counts=sc, recv_counts=rc)
                        elif r % 2 == 0:
                            comm.send(x, right, spec)
                            comm.recv(y, left, spec)
                        else:
                            comm.recv(y, left, spec)
                            comm.send(x, right, spec)
                        w = np.array([time.perf_counter() - t0])
                        bound = comm.last_stats.error_bound  # (paired: the last call's, a recv's or a send's)
                        comm.all_reduce(w, op="max")
                        if i >= args.warmup:
                            walls.append(float(w[0]))
                    e = np.array([0.0 if want is None else float(np.max(np.abs(y - want))), bound])
                    comm.all_reduce(e, op="max")
                    rows.append({"round": rnd, "bytes": nbytes, "mode": mode, "method": method,
                                 "time_s": float(np.median(walls)), "max_err": float(e[0]), "bound": float(e[1]),
                                 "checked": want is not None})
    if r == 0:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    comm.close()


def run(args) -> list:
    """The ranks under ncclz's launcher (ncclz-run), on this host."""
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "rows.json")
        env = dict(os.environ, NCCLZ_TRANSPORT="socket", NCCLZ_TIMEOUT="600", NCCLZ_SOCKET_THROTTLE_GBPS=str(args.gbps))
        cmd = [sys.executable, "-m", "ncclz.run", "-n", str(args.n), sys.executable, os.path.abspath(__file__),
               "--worker", "--json", js, "--sizes", ",".join(str(s) for s in args.sizes), "--modes",
               ",".join(args.modes), "--methods", ",".join(args.methods), "--rounds", str(args.rounds), "--iters",
               str(args.iters), "--warmup", str(args.warmup)]
        if subprocess.run(cmd, env=env).returncode:
            raise SystemExit("a rank failed (its output is above)")
        with open(js) as f:
            return json.load(f)


def report(args, rows, started: str, load: tuple) -> str:
    lines = [
        "# A ring shift: comm.group against all_to_allv and paired sends",
        "",
        (f"Measured {started} on {platform.node()} ({os.cpu_count()} CPU cores) by "
         f"`{' '.join(['python bench/p2p_group_bench.py', *args.argv])}`: {args.n} ranks over the socket "
         f"transport, each rank's sends paced to {args.gbps:g} Gbit/s, every rank sending `size` bytes of the "
         f"smooth field to r+1; {args.rounds} rounds of {args.warmup} warm-up + {args.iters} timed calls, the "
         "methods taking turns (bench/p2p_group_bench.py says what each is). time: the slowest rank's, median "
         "of the rounds' medians (each round's listed). err / E: the first round's largest error over every "
         "element of every rank against the data sent, and the bound."),
        "",
        "| size | mode | method | time ms | each round | vs group | max err | E |",
        "|---:|---|---|---:|---|---:|---:|---:|",
    ]
    for nbytes in args.sizes:
        for mode in args.modes:
            t = {}
            for method in args.methods:
                rs = [x for x in rows if x["bytes"] == nbytes and x["mode"] == mode and x["method"] == method]
                t[method] = (float(np.median([x["time_s"] for x in rs])), rs)
            for method in args.methods:
                tm, rs = t[method]
                first = next(x for x in rs if x["checked"])
                each = ", ".join(f"{x['time_s'] * 1e3:.1f}" for x in rs)
                lines.append(f"| {nbytes >> 20} MiB | {mode} | {method} | {tm * 1e3:.1f} | {each} "
                             f"| {tm / t['group'][0]:.2f}x | {first['max_err']:.3g} | {first['bound']:.3g} |")
    lines += ["", f"Load average (1 min) before and after: {load[0]:.2f}, {load[1]:.2f} (the VM is shared)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=4, help="ranks, even (default 4)")
    ap.add_argument("--gbps", type=float, default=1.0, help="NCCLZ_SOCKET_THROTTLE_GBPS (default 1)")
    ap.add_argument("--sizes", default="4M,16M,64M", help="bytes each rank sends (default 4M,16M,64M)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "p2p_group.md"), help="the report (- : print)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = ap.parse_args()
    args.sizes = [parse_size(s) for s in str(args.sizes).split(",")]
    args.modes = [m for m in str(args.modes).split(",") if m]
    args.methods = [m for m in str(args.methods).split(",") if m]
    if args.worker:
        worker(args)
        return
    if args.n % 2:
        raise SystemExit("-n must be even (the paired method)")
    args.argv = argv
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()[0]
    rows = run(args)
    text = report(args, rows, started, (load0, os.getloadavg()[0]))
    print(text)
    if args.out != "-":
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
