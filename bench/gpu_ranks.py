"""Multi-rank all-reduce of GPU tensors over a throttled socket link: compressed against uncompressed.

    python bench/gpu_ranks.py                                  # the default grid (~60-90 s on a GPU machine)
    python bench/gpu_ranks.py --device cpu --ranks 2 --sizes 4M --gbps 1 --reps 2   # a rehearsal, no GPU
    python bench/gpu_ranks.py --ranks 2,4 --sizes 64M,256M --dtypes float32,bfloat16 --gbps 1,10,25

Ranks are processes on this machine (this script, run with --worker), or with --threads threads of
this process (one CUDA context: without MPS the GPU time-slices the contexts of several processes,
so their short kernels queue behind each other), every one on GPU 0
(torch.cuda; the machine this was written for has one GPU), over the socket transport
(NCCLZ_TRANSPORT=socket) paced by NCCLZ_SOCKET_THROTTLE_GBPS, i.e. link emulation without latency
or loss (docs/ENVIRONMENT.md). Each case (ranks, Gbit/s, dtype, size, data) runs the modes side by
side in one communicator: one warm-up call of each mode, then --reps rounds of none, lossless and
Lossy(rel) in turn, each call timed on every rank from a barrier to the end of the call (CUDA
synchronised) and taken as the slowest rank's time; a mode's time is the median of its rounds.
Every call starts from the same input (copied back in before the barrier, untimed). The
communicator runs with policy="off": the requested mode, never a lighter one.

Reported per case and mode: the algorithm rank 0's call ran (NCCLZ_TOPO_HOSTS=2x2 with 4 ranks:
hierarchical) and whether on the device, time, speedup over none, the compression ratio comm.last_stats
measured on rank 0 (raw bytes / wire bytes sent), speedup / ratio (the target at 10 Gbit/s is
>= 0.8), and checks: lossless output bit-identical to none's; lossy maximum |error| against none's
output beside the promised bound (none's own float32/bf16 sum rounding is inside that difference).

Data, float32 converted to the dtype on the device, as ncclz.tools.data.rank_input defines it:
"smooth" (the smooth3d field of (ceil(count / 65536), 256, 256), scaled by 1 + 0.1 rank and shifted
by 0.25 rank; its formula is evaluated here with torch on the rank's device, in float64 like
smooth3d, since numpy needs ~10 s per 32 M values) and "gaussian" (N(0, 1e-3) values rolled per
rank: gradient-like; from ncclz.tools.data, cached under NCCLZ_BENCH_DATA, default
/tmp/ncclz-bench-data, generated once by the launcher).

Default grid, sized for ~90 s on a GPU machine (--budget stops starting cases when time runs out;
the cases not run are listed as skipped): 2 and 4 ranks, 64 MiB float32 and bfloat16, both data
sets, 10 Gbit/s; plus 1 and 25 Gbit/s for float32 at 4 ranks (--extra-gbps).

Timeline (--trace PATH): NCCLZ_TRACE_FILE=PATH.n<N> for the ranks of the N-rank group, so each
rank writes PATH.n<N>.rank<R>.json when its communicator closes (one communicator per --gbps value:
the second writes PATH.n<N>.rank<R>.1.json, ...; docs/GPU.md, "Timeline"), and the launcher merges
each communicator's rank files into PATH.n<N>.json (PATH.n<N>.1.json, ...), removing them: one
file with a process per rank for ui.perfetto.dev or chrome://tracing.

Output: a table on stdout, --md FILE (the same table), --json FILE (every time, the machine, the
command). Exit status: 0 when every case ran (or --device cuda was asked without a GPU: a message
and 0, unless NCCLZ_REQUIRE_GPU=1, then 1); 1 when a rank failed or a check did not hold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("none", "lossless", "lossy")
DATASETS = ("smooth", "gaussian")


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def csv(kind):
    return lambda s: [kind(v) for v in s.split(",") if v.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan(args, nranks: int) -> list:
    """[(gbps, [(dtype, nbytes, data), ...]), ...] for one rank count: one communicator per rate."""
    out = []
    rates = list(args.gbps)
    if nranks == max(args.ranks):
        rates += [g for g in args.extra_gbps if g not in rates]
    for g in rates:
        extra = g not in args.gbps
        cases = [
            (dt, nb, data)
            for nb in args.sizes
            for dt in (args.extra_dtypes if extra else args.dtypes)
            for data in args.data
        ]
        out.append((g, cases))
    return out


def max_count(args) -> int:
    """The most elements any case has (the data fields are generated once at this size)."""
    item = {"float32": 4, "bfloat16": 2, "float16": 2}
    return max(nb // item[dt] for dt in set(args.dtypes) | set(args.extra_dtypes) for nb in args.sizes)


def smooth_input(torch, nd, rank: int, count: int, dev):
    """rank_input("smooth", rank, count) computed on `dev`: smooth3d's formula and parameters
    (nd.smooth3d_params) in float64 over (ceil(count / 65536), 256, 256), rounded once to float32,
    the first `count` values scaled and shifted per rank in float32."""
    p = nd.smooth3d_params()
    Z, Y, X = -(-count // 65536), 256, 256
    f64 = torch.float64
    z = (torch.arange(Z, dtype=f64, device=dev) / Z)[:, None, None]
    y = (torch.arange(Y, dtype=f64, device=dev) / Y)[None, :, None]
    x = (torch.arange(X, dtype=f64, device=dev) / X)[None, None, :]
    f = torch.zeros((Z, Y, X), dtype=f64, device=dev)
    for k in range(6):
        wz, wy, wx = (float(v) for v in p["w"][k])
        f += float(p["a"][k]) * torch.sin(2 * math.pi * (wz * z + wy * y + wx * x) + float(p["phi"][k]))
    for j in range(4):
        cz, cy, cx = (float(v) for v in p["c"][j])
        r2 = (z - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2
        f += float(p["b"][j]) * torch.exp(-r2 / (2 * float(p["s"][j]) ** 2))
    b = f.to(torch.float32).reshape(-1)[:count]
    del f
    return b * float(np.float32(1 + 0.1 * rank)) + float(np.float32(0.25 * rank))


# ---- rank side -------------------------------------------------------------------------------------
def worker(args, env=None) -> int:
    """One rank (a process: --worker; or a thread: --threads, with its own `env`)."""
    env = os.environ if env is None else env
    rank, n = int(env["RANK"]), int(env["WORLD_SIZE"])
    deadline = float(env["GPU_RANKS_DEADLINE"])
    ports = [int(p) for p in env["GPU_RANKS_PORTS"].split(",")]
    res_path = os.path.join(args.worker, f"rank{rank}.json")
    res: dict = {"rank": rank, "rows": [], "skipped": [], "error": None}

    def save():
        with open(res_path + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(res_path + ".tmp", res_path)

    try:
        import ncclz
        import torch
        from ncclz.tools import data as nd

        dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
            res["device_name"] = torch.cuda.get_device_name(dev)
        tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        compress = {"none": None, "lossless": ncclz.Lossless(), "lossy": ncclz.Lossy(rel=args.rel)}

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        def agree(comm, ok: bool) -> bool:  # every rank takes the same branch
            f = np.array([1 if ok else 0], np.int32)
            comm.all_reduce(f, op="min")
            return bool(f[0])

        def slowest(comm, dt: float) -> float:
            t = np.array([dt], np.float64)
            comm.all_reduce(t, op="max")
            return float(t[0])

        # The largest field first (from the cache the launcher filled): every smaller input is its prefix.
        if "gaussian" in args.data:
            nd.base_field("gaussian", max_count(args))
        todo = plan(args, n)
        for gi, (gbps, cases) in enumerate(todo):
            os.environ["NCCLZ_SOCKET_THROTTLE_GBPS"] = str(gbps)
            comm = ncclz.Communicator(rank=rank, world_size=n, master_port=ports[gi], transport="socket",
                                      policy="off")
            try:
                for ci, (dtname, nbytes, dataset) in enumerate(cases):
                    est = time.time() + args.case_estimate_s
                    if not agree(comm, est < deadline):
                        res["skipped"] += [[gbps, dt, nb, d] for dt, nb, d in cases[ci:]]
                        for g2, c2 in todo[gi + 1:]:
                            res["skipped"] += [[g2, dt, nb, d] for dt, nb, d in c2]
                        save()
                        return 0
                    count = nbytes // torch.tensor([], dtype=tdtype[dtname]).element_size()
                    if dataset == "smooth":
                        x0 = smooth_input(torch, nd, rank, count, dev).to(tdtype[dtname])
                    else:
                        x0 = torch.from_numpy(nd.rank_input(dataset, rank, count, "float32")).to(dev).to(tdtype[dtname])
                    x = torch.empty_like(x0)
                    times = {m: [] for m in MODES}
                    stats = {}
                    outs = {}
                    for rep in range(args.reps + 1):  # rep 0: warm-up
                        for m in MODES:
                            x.copy_(x0)
                            sync()
                            comm.barrier()
                            t0 = time.perf_counter()
                            comm.all_reduce(x, compression=compress[m])
                            sync()
                            dt = time.perf_counter() - t0
                            st = comm.last_stats  # before slowest(): its all_reduce replaces last_stats
                            dt = slowest(comm, dt)
                            if rep == 0:
                                outs[m] = x.clone()
                            else:
                                times[m].append(dt)
                                # The last timed call's statistics (the warm-up's include set-up costs).
                                stats[m] = st.as_dict() if st is not None else {}
                    # Checks (rank 0's output; every rank has the same).
                    same = bool(torch.equal(outs["lossless"].view(torch.int16 if x.element_size() == 2 else torch.int32),
                                            outs["none"].view(torch.int16 if x.element_size() == 2 else torch.int32)))
                    err = float((outs["lossy"].double() - outs["none"].double()).abs().max())
                    med = {m: statistics.median(times[m]) for m in MODES}
                    for m in MODES:
                        st = stats[m]
                        row = {
                            "ranks": n, "gbps": gbps, "dtype": dtname, "mib": nbytes / (1 << 20), "data": dataset,
                            "mode": m, "median_s": med[m], "times_s": times[m],
                            "speedup": med["none"] / med[m] if med[m] > 0 else None,
                            "ratio": st.get("ratio"), "raw_bytes": st.get("raw_bytes"),
                            "wire_bytes": st.get("wire_bytes"), "ran": st.get("compression"),
                            "exact_fallback": st.get("exact_fallback"), "error_bound": st.get("error_bound"),
                            "encode_s": st.get("encode_s"), "decode_s": st.get("decode_s"),
                            "quantize_s": st.get("quantize_s"), "wait_s": st.get("wait_s"),
                            "wall_s": st.get("wall_s"), "schedule_s": st.get("schedule_s"),
                            "nchannels": int(comm.config.nchannels),
                            "algorithm": st.get("algorithm"), "on_device": st.get("on_device"),
                            "persistent": st.get("persistent"),
                            "persistent_device_fifos": st.get("persistent_device_fifos"),
                            "staging": os.environ.get("NCCLZ_STAGING", "pinned"),
                        }
                        if m == "lossless":
                            row["bit_identical_to_none"] = same
                        if m == "lossy":
                            row["max_abs_err_vs_none"] = err
                        if row["speedup"] and row["ratio"]:
                            row["speedup_over_ratio"] = row["speedup"] / row["ratio"]
                        res["rows"].append(row)
                    save()
                    del x0, x, outs
                if gi + 1 < len(todo) and not agree(comm, time.time() + args.case_estimate_s < deadline):
                    for g2, c2 in todo[gi + 1:]:
                        res["skipped"] += [[g2, dt, nb, d] for dt, nb, d in c2]
                    save()
                    return 0
            except BaseException as e:
                comm.abort(f"gpu_ranks rank {rank}: {type(e).__name__}")  # the peers fail now, not at the timeout
                raise
            finally:
                comm.close()
    except Exception as e:
        res["error"] = f"rank {rank}: {type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()
        save()
        return 1
    save()
    return 0


# ---- launcher side -----------------------------------------------------------------------------------
def merge_traces(base: str) -> list:
    """Merges the rank files BASE.rank<R>.json (and BASE.rank<R>.<k>.json of a k-th later
    communicator) into BASE.json (BASE.<k>.json): every rank's events, pid = rank; the rank files
    are removed once merged (the device tool returns 8 files). Returns the files written."""
    import glob
    import re

    groups: dict = {}
    for f in sorted(glob.glob(glob.escape(base) + ".rank*.json")):
        m = re.fullmatch(re.escape(base) + r"\.rank(\d+)((?:\.\d+)?)\.json", f)
        if m:
            groups.setdefault(m.group(2), []).append(f)
    out = []
    for k, files in sorted(groups.items()):
        events, other = [], {}
        for f in files:
            with open(f) as fh:
                doc = json.load(fh)
            events += doc["traceEvents"]
            other[f"rank{doc['otherData']['ncclz_rank']}"] = doc["otherData"]
        path = f"{base}{k}.json"
        with open(path, "w") as fh:
            json.dump({"displayTimeUnit": "ns", "traceEvents": events, "otherData": other}, fh)
        out.append(path)
        for f in files:
            os.remove(f)
    return out


def run_group(args, nranks: int, deadline: float, tmp: str) -> tuple:
    """Runs the cases of one rank count; returns (rows, skipped, errors)."""
    gdir = os.path.join(tmp, f"n{nranks}")
    os.makedirs(gdir, exist_ok=True)
    ports = [free_port() for _ in plan(args, nranks)]
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", gdir] + args.passthrough
    env = dict(os.environ, WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", NCCLZ_TRANSPORT="socket",
               NCCLZ_TOKEN=f"gpu_ranks{os.getpid()}", NCCLZ_TIMEOUT=str(args.rank_timeout),
               GPU_RANKS_DEADLINE=str(deadline), GPU_RANKS_PORTS=",".join(map(str, ports)),
               PYTHONUNBUFFERED="1")
    if args.trace:
        env["NCCLZ_TRACE_FILE"] = f"{args.trace}.n{nranks}"
    errors = []
    hard = deadline + args.grace  # a case that started in time may run past the deadline
    if args.threads:
        # Ranks as threads of this process: one CUDA context, each rank's channels on their own
        # streams, so the GPU runs their kernels side by side instead of time-slicing processes.
        # The settings every rank shares go to this process's environment (the ranks read them
        # there when their communicators start).
        args.worker = gdir
        os.environ.update({k: v for k, v in env.items() if k.startswith("NCCLZ_")})
        threads = [threading.Thread(target=worker, args=(args, dict(env, RANK=str(r), LOCAL_RANK=str(r))),
                                    daemon=True) for r in range(nranks)]
        for t in threads:
            t.start()
        for r, t in enumerate(threads):
            t.join(timeout=max(1.0, hard - time.time()))
            if t.is_alive():
                errors.append(f"{nranks} ranks: rank {r} still running at the hard deadline (a thread: not killed)")
        procs = []
    else:
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(nranks)]
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(1.0, hard - time.time()))
        except subprocess.TimeoutExpired:
            errors.append(f"{nranks} ranks: rank {r} still running at the hard deadline; killed")
            for q in procs:
                q.kill()
            for q in procs:
                q.wait()
            break
    results = []
    for r in range(nranks):
        f = os.path.join(gdir, f"rank{r}.json")
        res = None
        if os.path.exists(f):
            with open(f) as fh:
                res = json.load(fh)
        if res is None:
            code = procs[r].returncode if procs else "none: a thread"
            errors.append(f"{nranks} ranks: rank {r} wrote no result (exit code {code})")
        elif res.get("error"):
            errors.append(res["error"] + "\n" + res.get("traceback", ""))
        results.append(res)
    rows = results[0]["rows"] if results and results[0] else []
    skipped = results[0]["skipped"] if results and results[0] else []
    dev_name = results[0].get("device_name") if results and results[0] else None
    return rows, skipped, errors, dev_name


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def where(r: dict) -> str:
    """The persistent ring kernels' mark for the table: which FIFOs the call ran with."""
    if not r.get("persistent"):
        return ""
    return ", persistent (device FIFOs)" if r.get("persistent_device_fifos") else ", persistent (host FIFOs)"


def parts(r: dict) -> str:
    """The last timed call's time split (CallStats: encode_s, decode_s, wait_s, quantize_s; and the
    call's wall time outside its channel loops, wall_s - schedule_s), in ms."""
    keys = ("encode_s", "decode_s", "wait_s", "quantize_s")
    if any(r.get(k) is None for k in keys):
        return ""
    split = " / ".join(f"{r[k] * 1e3:.1f}" for k in keys)
    if r.get("wall_s") is not None and r.get("schedule_s") is not None:
        split += f" / {(r['wall_s'] - r['schedule_s']) * 1e3:.1f}"
    return split


def table(rows: list) -> str:
    lines = [("| ranks | channels | Gbit/s | dtype | MiB | data | mode | ran (rank 0) | ms (median) | speedup | ratio "
              "| speedup/ratio | check | encode / decode / wait / quantize ms (rank 0, channels summed) "
              "/ outside the channel loops ms (rank 0) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        check = ""
        if "bit_identical_to_none" in r:
            check = "bit-identical" if r["bit_identical_to_none"] else "DIFFERS from none"
        if "max_abs_err_vs_none" in r:
            check = f"max err {r['max_abs_err_vs_none']:.3g} (bound {fmt(r.get('error_bound'), '.3g')})"
            if r.get("exact_fallback"):
                check += ", exact fallback"
        lines.append(
            f"| {r['ranks']} | {r.get('nchannels', '')} | {r['gbps']:g} | {r['dtype']} | {r['mib']:g} | {r['data']} | {r['mode']} "
            f"| {r.get('algorithm') or ''}{', device' if r.get('on_device') else ''}{where(r)} | {r['median_s'] * 1e3:.1f} | {fmt(r['speedup'], '.2f')} | {fmt(r['ratio'], '.2f')} "
            f"| {fmt(r.get('speedup_over_ratio'), '.2f')} | {check} | {parts(r)} |")
    return "\n".join(lines)


def check_rows(rows: list) -> list:
    bad = []
    for r in rows:
        if r["mode"] == "lossless" and not r.get("bit_identical_to_none", True):
            bad.append(f"lossless output differs from none's: {r['ranks']} ranks {r['dtype']} {r['data']}")
        # none's own float32 sum rounding is inside the difference: a little slack.
        if (r["mode"] == "lossy" and r.get("error_bound") and r["dtype"] == "float32"
                and r["max_abs_err_vs_none"] > 1.01 * r["error_bound"] + 1e-5 * r["ranks"]):
            bad.append(f"lossy error {r['max_abs_err_vs_none']:.3g} above the bound {r['error_bound']:.3g}: "
                       f"{r['ranks']} ranks {r['dtype']} {r['data']}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--ranks", type=csv(int), default=[2, 4])
    ap.add_argument("--sizes", type=csv(parse_size), default=[64 << 20], help="bytes per rank, e.g. 64M,256M")
    ap.add_argument("--dtypes", type=csv(str), default=["float32", "bfloat16"])
    ap.add_argument("--data", type=csv(str), default=list(DATASETS), help="smooth,gaussian")
    ap.add_argument("--gbps", type=csv(float), default=[10.0], help="throttle rates for every case")
    ap.add_argument("--extra-gbps", type=csv(float), default=[1.0, 25.0],
                    help="more rates, at the largest rank count and --extra-dtypes only")
    ap.add_argument("--extra-dtypes", type=csv(str), default=["float32"])
    ap.add_argument("--rel", type=float, default=1e-3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=90.0, help="seconds; no case starts after it")
    ap.add_argument("--case-estimate-s", type=float, default=8.0, help="start a case only this long before --budget")
    ap.add_argument("--grace", type=float, default=12.0, help="seconds after --budget before ranks are killed")
    ap.add_argument("--rank-timeout", type=float, default=60.0, help="NCCLZ_TIMEOUT of the ranks")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--threads", action="store_true",
                    help="ranks as threads of this process (one CUDA context) instead of processes")
    ap.add_argument("--trace", default=None, metavar="PATH",
                    help="record a timeline: NCCLZ_TRACE_FILE=PATH.n<N> for the N-rank ranks (files "
                         "PATH.n<N>.rank<R>.json), merged per communicator into PATH.n<N>.json")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for d in args.data:
        if d not in DATASETS:
            ap.error(f"--data: {d!r} is not one of {', '.join(DATASETS)}")
    # The ranks get the same options.
    args.passthrough = [a for a in sys.argv[1:]]
    if args.worker:
        return worker(args)

    start = time.time()
    require = os.environ.get("NCCLZ_REQUIRE_GPU") == "1"
    if args.device == "cuda":
        try:
            import torch

            ok = torch.cuda.is_available()
            why = "torch.cuda.is_available() is False"
        except ImportError as e:
            ok, why = False, f"torch is not importable ({e})"
        if not ok:
            print(f"gpu_ranks: no GPU ({why}); nothing measured. Use --device cpu to rehearse without one.")
            return 1 if require else 0
    deadline = start + args.budget
    os.environ.setdefault("NCCLZ_BENCH_DATA", "/tmp/ncclz-bench-data")
    t0 = time.time()
    from ncclz.tools import data as nd

    if "gaussian" in args.data:  # generate (or load) once, before the ranks start: they read the cache
        nd.base_field("gaussian", max_count(args))
        print(f"gpu_ranks: gaussian data for {max_count(args)} elements in {time.time() - t0:.1f} s", flush=True)
    rows, skipped, errors, dev_name = [], [], [], None
    with tempfile.TemporaryDirectory(prefix="gpu_ranks") as tmp:
        for n in args.ranks:
            if time.time() + args.case_estimate_s >= deadline:
                for g, cases in plan(args, n):
                    skipped += [[g, dt, nb, d] for dt, nb, d in cases]
                continue
            t0 = time.time()
            r, s, e, name = run_group(args, n, deadline, tmp)
            print(f"gpu_ranks: {n} ranks: {len(r) // len(MODES)} cases in {time.time() - t0:.1f} s"
                  f"{', ' + str(len(s)) + ' skipped' if s else ''}{', errors' if e else ''}", flush=True)
            rows += r
            skipped += [[n, *x] for x in s]
            errors += e
            dev_name = dev_name or name
    if args.trace:
        for n in args.ranks:
            for merged in merge_traces(f"{args.trace}.n{n}"):
                print(f"gpu_ranks: timeline {merged}", flush=True)
    bad = check_rows(rows)
    head = (f"gpu_ranks: {dev_name or args.device}, socket transport throttled, Lossy(rel={args.rel:g}), "
            f"ranks as {'threads of one process' if args.threads else 'processes'}, "
            f"median of {args.reps} after a warm-up, slowest rank; {time.time() - start:.0f} s")
    md = [head, "", table(rows)]
    if skipped:
        md += ["", f"skipped (budget {args.budget:g} s): " + "; ".join(str(s) for s in skipped)]
    if bad or errors:
        md += ["", "FAILED:"] + [f"- {b}" for b in bad] + [f"- {e.splitlines()[0]}" for e in errors]
    text = "\n".join(md) + "\n"
    print(text)
    for e in errors:
        print(e, file=sys.stderr)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.json:
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(), "machine": platform.platform(), "cpus": os.cpu_count(),
                "device": dev_name or args.device, "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                "python": sys.version.split()[0]}
        try:
            import torch

            meta["torch"] = torch.__version__
        except ImportError:
            pass
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "args": {k: v for k, v in vars(args).items() if k != "passthrough"},
                       "rows": rows, "skipped": skipped, "errors": errors, "check_failures": bad}, f, indent=1)
    return 1 if (bad or errors) else 0


if __name__ == "__main__":
    sys.exit(main())
