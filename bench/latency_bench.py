#!/usr/bin/env python3
"""Small-message latency: uncompressed float32 sum all_reduce of ncclz beside Open MPI (mpi4py),
n ranks on one host, side by side in one run (issue 19's latency target); or another collective.

    python bench/latency_bench.py --out bench/results/latency.json            # driver: both, 5 rounds
    python bench/latency_bench.py -n 4 --rounds 3 --sizes 4K,64K,1M --no-mpi  # ncclz only
    python bench/latency_bench.py --base /work/venvs/base/bin/python           # + another build
    python bench/latency_bench.py --ring --env NCCLZ_SPIN_NS=0 --no-mpi       # + this build's ring
    python bench/latency_bench.py --sizes 1M,4M --variant old:NCCLZ_EXACT_NCHANNELS=2,NCCLZ_EXACT_SLICE_BYTES=1M
    python bench/latency_bench.py --mode lossless --data gradients --sizes 1M,16M --variant ...  # no MPI
    python bench/latency_bench.py --coll reduce_scatter --variant slots:NCCLZ_DIRECT_FROM_BYTES=0

The driver alternates the systems round after round (ncclz under ncclz-run, then MPI under
mpirun, then ncclz again, ...): on a shared machine one run can be several times slower than the
next, so only medians over alternating rounds compare. Each round starts fresh processes that
run, per size, a few warm-up calls and then back-to-back calls (no barrier between them, as
OSU's osu_allreduce does) for about `--seconds` each; every rank times each call, and a call's
time is the slowest rank's (the ranks' times gathered after the loop). A round reports the
median and the 10th percentile of those call times. `--base PYTHON` adds a third system,
"ncclz-base": the same ncclz rounds with another interpreter (another build of ncclz installed in
its own virtual environment, e.g. the branch before a change), for before/after side by side;
`--ring` adds "ncclz-ring", this build with NCCLZ_LATENCY_BYTES=0 (the ring for every size: the
latency algorithm's own effect). `--env K=V` sets a variable for every ncclz system (experiments);
`--variant NAME:K=V,...` adds a system "ncclz-NAME", this build with those variables too (another
shape side by side). `--mode lossless|lossy` (rel 1e-3) runs the ncclz systems compressed (no MPI
then) on `--data smooth|gradients` (each call starts from the same input); the run prints each
ncclz system's last call of each size as channels x slice bytes and its wire ratio (last_stats).
ncclz runs with policy="off" (the call as asked: uncompressed) over shared memory; MPI with its
default shared-memory path (`--mca btl self,vader`). ncclz's `barrier` (one descriptor exchange and
nothing else) is timed the same way: the fixed part of every call.

`--coll` picks the collective (default all_reduce, in place; MPI's Allreduce with IN_PLACE):
reduce_scatter (into a preallocated output; Reduce_scatter_block), all_gather (Allgather) and
broadcast from rank 0 (Bcast). A size is the call's message as ncclz counts it (NCCLZ_DIRECT_FROM_BYTES
and the other thresholds compare against it): reduce_scatter's input (every rank's, N blocks),
all_gather's output (N blocks), broadcast's buffer, all_reduce's buffer.

Rank role (started by the driver): `python bench/latency_bench.py --rank-role ncclz|mpi OUT.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = "4K,16K,64K,256K,1M,4M,16M,64M"


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def size_name(b: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


# ---- rank role ---------------------------------------------------------------------------------------
class _Ncclz:
    def __init__(self, mode: str = "none"):
        import ncclz

        self.comm = ncclz.init(policy="off")
        self.rank, self.size = self.comm.rank, self.comm.world_size
        self.compression = {"none": None, "lossless": ncclz.Lossless(), "lossy": ncclz.Lossy(rel=1e-3)}[mode]
        # LATENCY_BENCH_FULL_PATH=1 (a --variant): every call through the Python layer's full path
        # (algorithm="auto" skips the short ways of small uncompressed calls), for their A/B
        self.kw = {"algorithm": "auto"} if os.environ.get("LATENCY_BENCH_FULL_PATH") == "1" else {}

    def all_reduce(self, x):
        self.comm.all_reduce(x, compression=self.compression, **self.kw)

    def reduce_scatter(self, x, y):
        self.comm.reduce_scatter(x, compression=self.compression, out=y, **self.kw)

    def all_gather(self, x, y):
        self.comm.all_gather(x, compression=self.compression, out=y, **self.kw)

    def broadcast(self, x):
        self.comm.broadcast(x, 0, compression=self.compression, **self.kw)

    def barrier(self):
        self.comm.barrier()

    def gather_max(self, t: np.ndarray) -> np.ndarray:
        return np.asarray(self.comm.all_gather(t)).max(axis=0)

    def close(self):
        self.comm.close()


class _Mpi:
    def __init__(self):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def all_reduce(self, x):
        self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self.MPI.SUM)

    def reduce_scatter(self, x, y):
        self.comm.Reduce_scatter_block(x, y, op=self.MPI.SUM)

    def all_gather(self, x, y):
        self.comm.Allgather(x, y)

    def broadcast(self, x):
        self.comm.Bcast(x, root=0)

    def barrier(self):
        self.comm.Barrier()

    def gather_max(self, t: np.ndarray) -> np.ndarray:
        out = np.empty_like(t)
        self.comm.Allreduce(t, out, op=self.MPI.MAX)
        return out

    def close(self):
        pass


def _timed(sys_, fn, seconds: float, max_calls: int) -> dict:
    """Back-to-back calls of fn for about `seconds` (the count agreed from rank 0's warm-up)."""
    for _ in range(5):
        fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    n = np.array([min(max_calls, max(10, int(seconds / max(one, 1e-6))))], dtype=np.float64)
    n = int(sys_.gather_max(n)[0])
    ts = np.empty(n, dtype=np.float64)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t0
    ts = sys_.gather_max(ts)
    return {"calls": n, "median_us": float(np.median(ts)) * 1e6, "p10_us": float(np.percentile(ts, 10)) * 1e6}


def _input(kind: str, n: int, rank: int) -> np.ndarray:
    """A rank's float32 input: a constant (the latency runs), a smooth field, or gradient-like noise."""
    if kind == "constant":
        return np.full(n, float(rank + 1), dtype=np.float32)
    rng = np.random.default_rng(rank)
    if kind == "smooth":
        t = np.linspace(0, 40, n)
        return (50 * np.sin(t + rank) + 0.01 * rng.standard_normal(n)).astype(np.float32)
    return (rng.standard_normal(n) * 1e-3).astype(np.float32)  # gradients


def _call_of(sys_, coll: str, b: int, data: str):
    """One call of `coll` with a message of b bytes (float32; see the module's docstring), on fresh
    buffers made once."""
    n, N = b // 4, sys_.size
    if coll == "reduce_scatter":
        x, y = _input(data, n // N * N, sys_.rank), np.empty(n // N, np.float32)
        return lambda: sys_.reduce_scatter(x, y)
    if coll == "all_gather":
        x, y = _input(data, n // N, sys_.rank), np.empty((N, n // N), np.float32)
        return lambda: sys_.all_gather(x, y)
    if coll == "broadcast":
        x = _input(data, n, sys_.rank)
        return lambda: sys_.broadcast(x)
    x0 = _input(data, n, sys_.rank)
    x = x0.copy()

    def call():
        if data != "constant":
            x[:] = x0  # in place: every call starts from the same input (a sum would grow)
        sys_.all_reduce(x)

    return call


def rank_role(system: str, out: str, sizes: list, seconds: float, mode: str = "none", data: str = "constant",
              coll: str = "all_reduce") -> int:
    sys_ = _Ncclz(mode) if system == "ncclz" else _Mpi()
    res = {"system": system, "ranks": sys_.size, "coll": coll, "sizes": {}}
    res["barrier"] = _timed(sys_, sys_.barrier, seconds / 2, 20000)
    for b in sizes:
        call = _call_of(sys_, coll, b, data)

        res["sizes"][str(b)] = _timed(sys_, call, seconds, 20000)
        if system == "ncclz":
            call()  # once more: the timing ended with a gather, whose stats these would be
            st = sys_.comm.last_stats
            res["sizes"][str(b)].update(ratio=st.ratio, shape=f"{st.channels}x{st.slice_bytes >> 10}K",
                                        algorithm=st.algorithm)
    sys_.barrier()
    if sys_.rank == 0:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    sys_.close()
    return 0


# ---- driver ------------------------------------------------------------------------------------------
def _launch(system: str, n: int, sizes: str, seconds: float, out: str, base: str | None = None,
            extra_env: dict | None = None, variants: dict | None = None, mode: str = "none",
            data: str = "constant", coll: str = "all_reduce") -> None:
    py = base if system == "ncclz-base" else sys.executable
    role = "mpi" if system == "mpi" else "ncclz"
    me = [py, os.path.abspath(__file__), "--rank-role", role, out, "--sizes", sizes, "--seconds", str(seconds),
          "--mode", mode, "--data", data, "--coll", coll]
    if role == "ncclz":
        cmd = [py, "-m", "ncclz.run", "-n", str(n), "--timeout", "120", *me]
    else:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
               "self,vader", "-np", str(n), *me]
    env = dict(os.environ, NCCLZ_POLICY="off", OMP_NUM_THREADS="1", NCCLZ_TRANSPORT="shm")
    if role == "ncclz":
        env.update(extra_env or {})
    if system == "ncclz-ring":
        env["NCCLZ_LATENCY_BYTES"] = "0"
    env.update((variants or {}).get(system, {}))
    subprocess.run(cmd, check=True, env=env, timeout=900, stdout=subprocess.DEVNULL)


def driver(args) -> int:
    variants = {}
    for v in args.variant:
        name, _, kvs = v.partition(":")
        variants["ncclz-" + name] = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
    systems = (["ncclz"] + (["ncclz-base"] if args.base else []) + (["ncclz-ring"] if args.ring else [])
               + list(variants) + ([] if args.no_mpi or args.mode != "none" else ["mpi"]))
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    if "mpi" in systems:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            print("mpi4py is missing: install Open MPI and mpi4py, or pass --no-mpi", file=sys.stderr)
            return 2
        if not shutil.which("mpirun"):
            print("mpirun is missing", file=sys.stderr)
            return 2
    rounds = {s: [] for s in systems}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for s in systems:
                out = os.path.join(tmp, f"{s}{r}.json")
                _launch(s, args.n, args.sizes, args.seconds, out, args.base, extra_env, variants, args.mode, args.data,
                        args.coll)
                with open(out) as f:
                    rounds[s].append(json.load(f))
                print(f"round {r} {s}: " + ", ".join(
                    f"{size_name(int(b))} {v['median_us']:.0f}" for b, v in rounds[s][-1]["sizes"].items()),
                      file=sys.stderr)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    summary = {}
    for s in systems:
        summary[s] = {size_name(b): statistics.median(x["sizes"][str(b)]["median_us"] for x in rounds[s])
                      for b in sizes}
        summary[s]["barrier"] = statistics.median(x["barrier"]["median_us"] for x in rounds[s])
    # what each ncclz system's last call of a size reported: the ring shape (channels x slice) and ratio
    shapes = {s: {size_name(b): "{} {} ({:.2f}x)".format(rounds[s][-1]["sizes"][str(b)].get("algorithm", "?"),
                                                        rounds[s][-1]["sizes"][str(b)].get("shape", "?"),
                                                        rounds[s][-1]["sizes"][str(b)].get("ratio", 1.0))
                  for b in sizes} for s in systems if s != "mpi"}
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": _machine(), "ranks": args.n,
           "coll": args.coll,
           "mode": args.mode, "data": args.data, "shapes": shapes,
           "base": args.base or "", "env": extra_env, "variants": variants,
           "command": " ".join(["python", "bench/latency_bench.py", *sys.argv[1:]]), "rounds": rounds,
           "median_of_rounds_us": summary}
    print(json.dumps(summary, indent=1))
    print(table(doc))
    print("\n".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in shape.items()) for s, shape in shapes.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


# issue 19's targets: ncclz's time over Open MPI's, at most
TARGETS = {4 << 10: 1.5, 64 << 10: 1.2, **{b: 1.0 for b in (1 << 20, 4 << 20, 16 << 20, 64 << 20)}}


def table(doc: dict) -> str:
    """The medians of rounds as a markdown table, with ncclz / MPI against the targets."""
    summary = doc["median_of_rounds_us"]
    systems = list(summary)
    rows = ["| size | " + " | ".join(f"{s} (us)" for s in systems)
            + (" | ncclz / MPI (target) |" if "mpi" in summary else " |"),
            "|---|" + "---:|" * len(systems) + ("---|" if "mpi" in summary else "")]
    for key in summary[systems[0]]:
        cells = [f"{summary[s][key]:.0f}" for s in systems]
        line = f"| {key} | " + " | ".join(cells) + " |"
        if "mpi" in summary:
            ratio = summary["ncclz"][key] / summary["mpi"][key]
            targeted = key != "barrier" and doc.get("coll", "all_reduce") == "all_reduce"  # (the targets are its)
            target = TARGETS.get(parse_size(key)) if targeted else None
            verdict = "" if target is None else f" (<= {target}: {'met' if ratio <= target else 'missed'})"
            line += f" {ratio:.2f}{verdict} |"
        rows.append(line)
    return "\n".join(rows)


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), {platform.release()}, load {os.getloadavg()[0]:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank-role", nargs=2, metavar=("SYSTEM", "OUT"))
    ap.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--sizes", default=SIZES, help=f"message sizes (default {SIZES})")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed calls per size, about (default 1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--base", metavar="PYTHON", help="also run ncclz with this interpreter (another build)")
    ap.add_argument("--ring", action="store_true", help="also run this build with NCCLZ_LATENCY_BYTES=0")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="a variable for the ncclz systems")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:K=V[,K=V]",
                    help="also run this build as system ncclz-NAME with these variables (on top of --env)")
    ap.add_argument("--mode", default="none", choices=("none", "lossless", "lossy"),
                    help="the ncclz systems' compression (lossy: rel 1e-3; other than none: no MPI)")
    ap.add_argument("--data", default="constant", choices=("constant", "smooth", "gradients"),
                    help="the inputs (default constant; otherwise each call starts from the same input)")
    ap.add_argument("--coll", default="all_reduce", choices=("all_reduce", "reduce_scatter", "all_gather", "broadcast"),
                    help="the collective (default all_reduce)")
    ap.add_argument("--out", help="JSON of every round and the medians")
    ap.add_argument("--render", metavar="JSON", help="print the table of a run's JSON (measures nothing)")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            print(table(json.load(f)))
        return 0
    if args.rank_role:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        return rank_role(args.rank_role[0], args.rank_role[1], sizes, args.seconds, args.mode, args.data, args.coll)
    return driver(args)


if __name__ == "__main__":
    raise SystemExit(main())
