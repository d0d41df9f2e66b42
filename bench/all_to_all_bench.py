#!/usr/bin/env python3
"""all_to_all over a slow link: lossy (and lossless) against none, side by side.

    python bench/all_to_all_bench.py                       # 4 ranks, socket at 0.5 Gbit/s, 16/32/64 MiB
    python bench/all_to_all_bench.py --sizes 16M --rounds 1 --out -

Every rank's input is `size` bytes of the benchmark's smooth field (ncclz.tools.data.rank_input
"smooth", float32, in its natural (z, 256, 256) shape), so each rank sends (n-1)/n of it, one block
to every other rank over their direct link (the pairwise exchange, docs/ALGORITHMS.md). The ranks
run over the socket transport paced by NCCLZ_SOCKET_THROTTLE_GBPS (a token bucket on each rank's
sends: a host with a slow NIC; no added latency). The modes take turns within each round (size by
size), `--rounds` rounds, policy off (the requested mode runs). Time per call: the slowest rank's
wall time (each call starts after a barrier), median over the timed calls of a round, then over
rounds. Columns as nccl-tests' alltoall: size = each rank's input bytes, algbw = size / time, busbw
= algbw * (n-1)/n; ratio and wire bytes from comm.last_stats (rank 0), max error against the input
(every element of every rank, fp64) beside the bound E.

Writes bench/results/collectives.md (and .json next to it) unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import secrets
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("none", "lossless", "lossy rel=1e-4", "lossy rel=1e-3", "lossy rel=1e-3 fast")


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def spec_of(ncclz, name: str):
    if name == "none":
        return None
    if name == "lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(rel=float(name.split("rel=")[1].split()[0]))


def cpu_s() -> float:
    """User + system CPU seconds of this process (every thread)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ---- rank side --------------------------------------------------------------------------------------------
def worker(args) -> None:
    import ncclz
    from ncclz.tools.data import rank_input

    comm = ncclz.init(policy="off")
    r, n = comm.rank, comm.world_size
    rows = []
    for rnd in range(args.rounds):
        for nbytes in args.sizes:
            count = nbytes // 4
            x = rank_input("smooth-shaped", r, count)  # (z, 256, 256): every rank's block is whole planes
            blk = x.shape[0] // n
            # what this rank must receive (the first round checks every element)
            want = np.concatenate([rank_input("smooth-shaped", j, count)[r * blk : (r + 1) * blk] for j in range(n)]
                                  ) if rnd == 0 else None
            for mode in args.modes:
                spec = spec_of(ncclz, mode)
                # "fast": the codec effort the policy proposes as lossy/fast (never rANS), passed the
                # way the policy passes it (native PolicyHints beside the Compression)
                hints = ncclz._core.comm.PolicyHints("", 1.0) if mode.endswith(" fast") else None
                native_spec = ncclz.comm._compression(spec)
                out = np.empty_like(x)
                walls, cpu = [], 0.0
                for i in range(args.warmup + args.iters):
                    comm.barrier()
                    c0 = cpu_s()
                    t0 = time.perf_counter()
                    if hints is None:
                        comm.all_to_all(x, compression=spec, out=out)
                        st = comm.last_stats
                    else:
                        st = comm._native.all_to_all(x, out, native_spec, "", hints)
                    w = np.array([time.perf_counter() - t0, cpu_s() - c0])
                    comm.all_reduce(w[:1], op="max")
                    comm.all_reduce(w[1:])  # every rank's CPU
                    if i >= args.warmup:
                        walls.append(float(w[0]))
                        cpu += float(w[1]) / args.iters
                err = 0.0
                if want is not None:
                    err = float(np.max(np.abs(out.astype(np.float64) - want.astype(np.float64))))
                e = np.array([err, st.error_bound])
                comm.all_reduce(e, op="max")
                rows.append({"round": rnd, "bytes": nbytes, "mode": mode, "time_s": float(np.median(walls)),
                             "walls": walls, "ratio": st.ratio, "wire_bytes": st.wire_bytes,
                             "raw_bytes": st.raw_bytes, "max_err": float(e[0]) if want is not None else None,
                             "bound": float(e[1]), "exact_fallback": st.exact_fallback,
                             "codec_s": st.encode_s + st.decode_s + st.quantize_s, "wait_s": st.wait_s,
                             "cpu_s": cpu})
    if r == 0:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    comm.close()


# ---- launcher ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args) -> list:
    port, token = free_port(), secrets.token_hex(8)
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "rows.json")
        procs = []
        for r in range(args.n):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.n), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), NCCLZ_TOKEN=token, NCCLZ_TRANSPORT="socket",
                       NCCLZ_SOCKET_THROTTLE_GBPS=str(args.gbps), NCCLZ_TIMEOUT="600")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--json", js,
                   "--sizes", ",".join(str(s) for s in args.sizes), "--modes", ",".join(args.modes),
                   "--rounds", str(args.rounds), "--iters", str(args.iters), "--warmup", str(args.warmup)]
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"a rank failed: exit codes {codes}")
        with open(js) as f:
            return json.load(f)


def report(args, rows, started: str, load: tuple) -> str:
    n = args.n
    lines = [
        "# all_to_all over a slow link: lossy and lossless against none",
        "",
        (f"Measured {started} on {platform.node()} ({os.cpu_count()} CPU cores) by "
         f"`{' '.join(['python bench/all_to_all_bench.py', *args.argv])}`."),
        "",
        (f"{n} ranks on this one VM over the socket transport, each rank's sends paced to {args.gbps:g} Gbit/s "
        "(NCCLZ_SOCKET_THROTTLE_GBPS: a token bucket, no added latency). Every rank's input is `size` bytes of "
        "the smooth field (`ncclz.tools.data.rank_input('smooth-shaped', ...)`, float32, shape (z, 256, 256)); "
        "all_to_all sends block j (z/n planes) to rank j over their direct link (pairwise exchange: "
        f"each rank sends (n-1)/n of its input once). The modes take turns size by size, {args.rounds} rounds of "
        f"{args.warmup} warm-up + {args.iters} timed calls each, policy off. time: the slowest rank's wall time "
        "per call (a barrier before each), median of a round's calls, then the median of the rounds (each "
        "round's median listed). algbw = size / time, busbw = algbw * (n-1)/n (nccl-tests' alltoall). ratio, "
        "wire: rank 0's last call. err: the largest difference from the data sent, over every element of every "
        "rank (first round), beside the bound E of the call. CPU: user + system seconds of all ranks (every "
        "thread) per call, median of the rounds' means. `fast`: the same bound with the codec effort the "
        "policy proposes as lossy/fast (PolicyHints rans_margin 1: never rANS)."),
        "",
        ("| size | mode | time ms | each round | algbw GB/s | busbw GB/s | vs none | ratio | wire MiB/rank | max err "
         "| E | err/E | CPU ms, all ranks |"),
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for nbytes in args.sizes:
        by_mode = {}
        for mode in args.modes:
            rs = [x for x in rows if x["bytes"] == nbytes and x["mode"] == mode]
            by_mode[mode] = (float(np.median([x["time_s"] for x in rs])), rs)
        t_none = by_mode.get("none", (None,))[0]
        for mode in args.modes:
            t, rs = by_mode[mode]
            last = rs[-1]
            first = next(x for x in rs if x["round"] == 0)
            algbw = nbytes / t / 1e9
            err = first["max_err"]
            each = ", ".join(f"{x['time_s'] * 1e3:.0f}" for x in rs)
            lines.append(
                f"| {nbytes >> 20} MiB | {mode} | {t * 1e3:.0f} | {each} "
                f"| {algbw:.3f} | {algbw * (n - 1) / n:.3f} | {t_none / t:.2f}x | {last['ratio']:.2f} "
                f"| {last['wire_bytes'] / 2**20:.2f} | {err:.3g} | {first['bound']:.3g} "
                f"| {err / first['bound'] if first['bound'] else 0:.3f} "
                f"| {np.median([x['cpu_s'] for x in rs]) * 1e3:.0f} |"
            )
    lines += ["", f"Load average (1 min) before and after: {load[0]:.2f}, {load[1]:.2f} (the VM is shared)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--gbps", type=float, default=0.5, help="NCCLZ_SOCKET_THROTTLE_GBPS (default 0.5)")
    ap.add_argument("--sizes", default="16M,32M,64M", help="each rank's input bytes (default 16M,32M,64M)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"default {','.join(MODES)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "collectives.md"),
                    help="the markdown report (- : print only); the .json of the rows beside it")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = ap.parse_args()
    args.sizes = [parse_size(s) for s in str(args.sizes).split(",")]
    args.modes = [m for m in str(args.modes).split(",") if m]
    if args.worker:
        worker(args)
        return
    args.argv = argv
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()[0]
    rows = run(args)
    text = report(args, rows, started, (load0, os.getloadavg()[0]))
    print(text)
    if args.out != "-":
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"started": started, "argv": argv, "rows": rows}, f)


if __name__ == "__main__":
    main()
