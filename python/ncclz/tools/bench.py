"""ncclz-bench: nccl-tests-style sweeps of the ncclz collectives, with compression, beside baselines.

    ncclz-bench -n 4                                    # 4 local ranks, all collectives
    ncclz-bench -n 4 -b 1M -e 64M -c all_reduce -m none,lossless,rel=1e-3 -d smooth,gaussian
    ncclz-bench -n 4 --throttle-gbps 0.5 ...            # socket transport paced to 0.5 Gbit/s (root-less)
    ip netns exec ... env RANK=.. ncclz-bench ...        # one rank (RANK set): runs as that rank

For every collective, data set, compression mode and size it prints, like nccl-tests:
size (bytes), count (elements), type, redop, root, time (us; per call, slowest rank, median over
iterations), algbw = size / time and busbw = algbw * factor in GB/s (1e9 B/s) from the
UNCOMPRESSED size (factors: all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n,
broadcast 1; "size" is the per-rank input for all_reduce/broadcast/reduce_scatter and the
output for all_gather, as nccl-tests), then ratio (raw/wire bytes), wire bytes per rank,
the max absolute error against the exact fp64 result (every rank regenerates all ranks' inputs
from their seeds), the bound E of the mode (0 for exact modes), err/E, and the codec share
(encode+decode+quantize seconds, summed over channels, over the wall time; it can exceed 100%
because channels run in parallel and overlap the transfer).

Systems (--systems): ``ncclz`` (the modes of -m), ``gloo`` (torch.distributed gloo, same data,
uncompressed), ``sz3`` (compress-then-communicate: every rank SZ3-compresses its input with
eb = E/n for sums and E for gathers/broadcast, the blobs are all-gathered uncompressed, then
every rank decompresses all of them and sums in float32: what MPI-based compressed libraries
do; its bound contract is the ncclz one for the same mode). MPI is in bench/baselines/mpi_bench.py
(needs mpirun).

Data (-d): the data sets of :mod:`ncclz.tools.data` (gaussian, smooth, sparse, real, grad and the
-shaped variants), part of the package, so the tool runs from any directory; real needs the optional
packages eofs and scipy, grad torch and scikit-learn (a data set whose packages are missing is
skipped with a message saying what to install). Rank r's input is a deterministic function of
(data set, r, count), see :func:`ncclz.tools.data.rank_input`.

Output: one table per (collective, data set) on stdout, a row per size, system and mode; progress,
skipped points and notes on stderr (a bar on a terminal). --json / --csv / --plot write the rows.
Exit status: 0 when every point ran within its bound, 1 when nothing ran or an ncclz row exceeded
its bound, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from ncclz.policy import EFFORTS, Policy
from ncclz.tools import data
from ncclz.tools.console import PROGRESS_ENV, Console, LaunchSinks, default_mode
from ncclz.tools.data import DATASETS, SHAPE_PLANES, np_dtype, rank_input, shaped_base  # noqa: F401 - re-exported

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
SYSTEMS = ("ncclz", "gloo", "sz3")
DTYPES = ("float32", "float64", "float16", "bfloat16")


# =========================================================================== small pure helpers
def parse_size(s) -> int:
    """'64M' / '64MiB' / '1k' / '4096' -> bytes (binary multiples)."""
    if isinstance(s, int):
        return s
    t = str(s).strip().upper()
    for suf in ("IB", "B"):
        if t.endswith(suf) and len(t) > len(suf):
            t = t[: -len(suf)]
            break
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def format_size(n: int) -> str:
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def sizes_between(lo: int, hi: int, factor: float = 2.0) -> list[int]:
    if lo <= 0 or hi < lo or factor <= 1:
        raise ValueError("need 0 < min <= max and factor > 1")
    out, s = [], lo
    while s <= hi:
        out.append(int(s))
        s = s * factor
    return out


def busbw_factor(coll: str, n: int) -> float:
    """nccl-tests bus-bandwidth factors (PERFORMANCE.md of nccl-tests)."""
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    if coll == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {coll!r}")


def parse_modes(spec: str) -> list[str]:
    """'none,lossless,rel=1e-3,abs=0.01' -> normalised labels; validated."""
    out = []
    for m in str(spec).split(","):
        m = m.strip().lower()
        if not m:
            continue
        if m.startswith("auto:"):
            inner = parse_modes(m[5:])
            if len(inner) != 1 or inner[0] == "none":
                raise ValueError(f"auto:<mode> needs one of lossless, rel=R, abs=E, got {m!r}")
            out.append("auto:" + inner[0])
        elif m in ("none", "lossless"):
            out.append(m)
        elif m.startswith(("rel=", "abs=")):
            v = float(m.split("=", 1)[1])
            if not v > 0:
                raise ValueError(f"bound must be > 0 in {m!r}")
            out.append(f"{m[:3]}={v:g}")
        else:
            raise ValueError(f"unknown mode {m!r}: none, lossless, rel=R, abs=E")
    if not out:
        raise ValueError("no mode given")
    return out


def mode_compression(mode: str):
    import ncclz

    if mode == "none":
        return None
    if mode == "lossless":
        return ncclz.Lossless()
    kind, v = mode.split("=")
    return ncclz.Lossy(**{kind: float(v)})


def is_lossy(mode: str) -> bool:
    return mode.split(":")[-1].startswith(("rel=", "abs="))


POLICY_CHOICES = ("none", "lossless", "lossy")


def resolve_auto(ctx, coll: str, x, mode: str, nbytes: int) -> tuple[str, str]:
    """auto:<mode>: rank 0 asks the policy (calibrating on its own input), all ranks agree.
    Returns (concrete mode, the policy's explanation)."""
    inner = mode[5:]
    why = ""
    pick = np.zeros(len(POLICY_CHOICES))
    if ctx.rank == 0:
        pol = Policy(world_size=ctx.n)
        ch = pol.choose(coll, x, mode_compression(inner), nbytes=nbytes)
        pick[POLICY_CHOICES.index(ch.mode)] = 1
        why = str(ch)
    pick = ctx.reduce(pick, "max")
    chosen = POLICY_CHOICES[int(np.argmax(pick))]
    return ({"none": "none", "lossless": "lossless", "lossy": inner}[chosen], why)


def count_for(coll: str, nbytes: int, itemsize: int, n: int, dataset: str = "") -> int:
    """Elements of each rank's input for a `nbytes` point (nccl-tests convention). Shaped data sets
    round up to whole planes (and reduce_scatter to n whole planes, so block r is whole planes too)."""
    count = max(1, nbytes // itemsize)
    plane = shaped_base(dataset)[1]
    q = int(np.prod(plane)) if plane else 1
    if coll == "reduce_scatter":  # input = n blocks
        if q > 1 and count >= q * n:
            return -(-count // (q * n)) * q * n
        count = max(n, count - count % n)
    if coll == "all_gather":  # size = output; input = size / n
        count = max(1, count // n)
    if q > 1 and count >= q:
        count = -(-count // q) * q
    return count


def size_bytes(coll: str, count: int, itemsize: int, n: int) -> int:
    """The nccl-tests "size" column for an input of `count` elements."""
    if coll == "all_gather":
        return count * itemsize * n
    return count * itemsize


# =========================================================================== data
def available_data(a, ctx=None) -> tuple[list, dict]:
    """(the data sets of -d that can be built, {data set: why not} for the others). With `ctx`, a
    data set missing on any rank is skipped on all."""
    why = {d: data.unavailable(d) for d in a.data}
    if ctx is not None:
        flags = ctx.reduce([1.0 if why[d] else 0.0 for d in a.data], "max")
        for d, f in zip(a.data, flags):
            if f and not why[d]:
                why[d] = "not available on every rank"
    return [d for d in a.data if not why[d]], {d: w for d, w in why.items() if w}


def prepare_data(a, datasets) -> dict:
    """Builds (and caches) every data set at the largest count of the sweep, once; returns {data set:
    error} for those that failed."""
    biggest = max(sizes_between(a.min_bytes, a.max_bytes, a.factor))
    count = max(1, biggest // np_dtype(a.dtype).itemsize)
    failed = {}
    for d in datasets:
        try:
            data.base_field(shaped_base(d)[0], count)
        except Exception as e:  # noqa: BLE001 - reported, and the data set skipped
            failed[d] = f"{type(e).__name__}: {e}"
    return failed


def dtype_label(name: str) -> str:
    return {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16"}.get(str(name), str(name))


def reference(coll: str, dataset: str, n: int, rank: int, count: int, dtype: str, root: int = 0):
    """Exact fp64 expected result on `rank`, plus the global (min, max) of all inputs."""
    ins = [rank_input(dataset, k, count, dtype).astype(np.float64).ravel() for k in range(n)]
    gmin = min(float(a.min()) for a in ins)
    gmax = max(float(a.max()) for a in ins)
    if coll == "all_reduce":
        ref = np.sum(ins, axis=0)
    elif coll == "reduce_scatter":
        blk = count // n
        ref = np.sum([a[rank * blk:(rank + 1) * blk] for a in ins], axis=0)
    elif coll == "all_gather":
        ref = np.stack(ins)
    elif coll == "broadcast":
        ref = ins[root]
    else:
        raise ValueError(coll)
    return ref, gmin, gmax


def bound_for(mode: str, gmin: float, gmax: float) -> float:
    if not is_lossy(mode):
        return 0.0
    kind, v = mode.split("=")
    v = float(v)
    return v if kind == "abs" else v * (gmax - gmin)


# =========================================================================== systems (rank side)
class Ctx:
    """Per-rank state: communicators and a small control plane (max/sum of float64 vectors)."""

    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
        self.n = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
        self.comm = None
        self.pg = False
        need_ncclz = "ncclz" in args.systems or ("sz3" in args.systems and args.sz3_via == "ncclz")
        if need_ncclz:
            import ncclz

            self.comm = ncclz.init()
        if "gloo" in args.systems or ("sz3" in args.systems and args.sz3_via == "gloo") or self.comm is None:
            import torch.distributed as dist

            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = int(os.environ.get("MASTER_PORT", "29500")) + 1
            dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                    world_size=self.n, timeout=datetime.timedelta(seconds=600))
            self.pg = True

    def reduce(self, v, op: str = "max") -> np.ndarray:
        v = np.ascontiguousarray(np.asarray(v, dtype=np.float64).ravel())
        if self.comm is not None:
            out = np.empty_like(v)
            self.comm.all_reduce(v, op=op, out=out)
            return out
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(v.copy())
        dist.all_reduce(t, op={"max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN}[op])
        return t.numpy()

    def barrier(self):
        if self.comm is not None:
            self.comm.barrier()
        else:
            import torch.distributed as dist

            dist.barrier()

    def close(self):
        if self.pg:
            import torch.distributed as dist

            with contextlib.suppress(Exception):  # already torn down
                dist.destroy_process_group()
        if self.comm is not None:
            self.comm.close()


def _ncclz_call(ctx: Ctx, coll, x, out, mode, root):
    """One call. `auto:<mode>` asks for <mode> under the communicator's compression policy (its
    default, NCCLZ_POLICY); any other mode runs exactly as named (policy="off")."""
    policy = None if mode.startswith("auto:") else "off"
    comp = mode_compression(mode.removeprefix("auto:"))
    c = ctx.comm
    if coll == "all_reduce":
        return c.all_reduce(x, op="sum", compression=comp, out=out, policy=policy)
    if coll == "reduce_scatter":
        return c.reduce_scatter(x, op="sum", compression=comp, out=out, policy=policy)
    if coll == "all_gather":
        return c.all_gather(x, compression=comp, out=out, policy=policy)
    if coll == "broadcast":
        return c.broadcast(out, root=root, compression=comp, policy=policy)
    raise ValueError(coll)


def policy_choice_of(mode: str, stats) -> str:
    """The bench label of the mode an `auto:<mode>` call ran with (from comm.last_stats)."""
    ran = getattr(stats, "compression", "")
    if ran in ("none", "lossless"):
        return ran
    label = mode.removeprefix("auto:")
    why = str(getattr(stats, "policy", ""))
    for effort in EFFORTS:  # rank 0's policy ran the bound with another codec effort
        if effort and why.startswith(f"auto: lossy/{effort} "):
            label += f"/{effort}"
    return label


def _torch_dtype(npdt):
    import torch

    if npdt.name == "bfloat16":
        return torch.bfloat16
    return {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}[npdt.name]


def _to_torch(x: np.ndarray):
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def _from_torch(t) -> np.ndarray:
    import torch

    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


class GlooRunner:
    supported = ("all_reduce", "all_gather", "broadcast")  # gloo has no reduce_scatter

    def __init__(self, ctx, coll, x, root):
        import torch

        self.coll, self.root, self.ctx = coll, root, ctx
        self.src = _to_torch(x)
        self.buf = self.src.clone()
        if coll == "all_gather":
            self.outs = [torch.empty_like(self.src) for _ in range(ctx.n)]

    def prep(self):
        if self.coll in ("all_reduce", "broadcast"):
            self.buf.copy_(self.src)

    def run(self):
        import torch.distributed as dist

        if self.coll == "all_reduce":
            dist.all_reduce(self.buf)
        elif self.coll == "all_gather":
            dist.all_gather(self.outs, self.src)
        elif self.coll == "broadcast":
            dist.broadcast(self.buf, src=self.root)

    def result(self):
        import torch

        if self.coll == "all_gather":
            return _from_torch(torch.stack(self.outs))
        return _from_torch(self.buf)


class SZ3Runner:
    """Compress-then-communicate with SZ3 (pysz): ABS eb = E/n for sums, E for gathers/broadcast."""

    supported = ("all_reduce", "all_gather", "broadcast")

    def __init__(self, ctx, coll, x, root, mode):
        from pysz import sz, szConfig, szErrorBoundMode  # noqa: F401

        self.ctx, self.coll, self.x, self.root, self.mode = ctx, coll, x, root, mode
        self.timing = {"compress_s": 0.0, "comm_s": 0.0, "decompress_s": 0.0, "range_s": 0.0}
        self.wire = 0
        self.res = None

    def _gather_bytes(self, blob: np.ndarray) -> list[np.ndarray]:
        ctx, n = self.ctx, self.ctx.n
        sizes = ctx.reduce(np.eye(n)[ctx.rank] * blob.size, "sum").astype(np.int64) if True else None
        m = int(sizes.max())
        pad = np.zeros(m, np.uint8)
        pad[: blob.size] = blob
        if self.ctx.args.sz3_via == "ncclz":
            out = ctx.comm.all_gather(pad)
        else:
            import torch
            import torch.distributed as dist

            t = torch.from_numpy(pad)
            outs = [torch.empty_like(t) for _ in range(n)]
            dist.all_gather(outs, t)
            out = np.stack([o.numpy() for o in outs])
        self.wire = m * (n - 1)
        return [out[k, : sizes[k]] for k in range(n)]

    def _bcast_bytes(self, blob):
        ctx = self.ctx
        m = int(ctx.reduce([blob.size if ctx.rank == self.root else 0], "max")[0])
        buf = np.zeros(m, np.uint8)
        if ctx.rank == self.root:
            buf[:] = blob
        if ctx.args.sz3_via == "ncclz":
            ctx.comm.broadcast(buf, root=self.root)
        else:
            import torch
            import torch.distributed as dist

            t = torch.from_numpy(buf)
            dist.broadcast(t, src=self.root)
        self.wire = m
        return buf

    def prep(self):
        pass

    def run(self):
        from pysz import sz, szConfig, szErrorBoundMode

        x, n = self.x, self.ctx.n
        t0 = time.perf_counter()
        kind, v = self.mode.split("=")
        if kind == "rel":  # the same contract as ncclz: E = rel * (global max - global min)
            mm = self.ctx.reduce([-float(x.min()), float(x.max())], "max")
            E = float(v) * (mm[1] + mm[0])
        else:
            E = float(v)
        t1 = time.perf_counter()
        eb = E / n if self.coll == "all_reduce" else E
        cfg = szConfig()
        cfg.errorBoundMode = szErrorBoundMode.ABS
        cfg.absErrorBound = float(eb)
        cfg.openmp = False
        x32 = x if x.dtype == np.float32 else x.astype(np.float32)
        if self.coll == "broadcast" and self.ctx.rank != self.root:
            blob = np.zeros(0, np.uint8)
        else:
            blob, _ = sz.compress(x32, cfg)
        t2 = time.perf_counter()
        if self.coll == "broadcast":
            b = self._bcast_bytes(blob)
            t3 = time.perf_counter()
            y, _ = sz.decompress(b, np.float32, x32.shape)
            self.res = y
        else:
            blobs = self._gather_bytes(blob)
            t3 = time.perf_counter()
            outs = []
            for b in blobs:
                y, _ = sz.decompress(np.ascontiguousarray(b), np.float32, x32.shape)
                outs.append(y)
            self.res = np.sum(outs, axis=0, dtype=np.float32) if self.coll == "all_reduce" else np.stack(outs)
        t4 = time.perf_counter()
        tm = self.timing
        tm["range_s"] += t1 - t0
        tm["compress_s"] += t2 - t1
        tm["comm_s"] += t3 - t2
        tm["decompress_s"] += t4 - t3
        self.E = E

    def result(self):
        return self.res


# =========================================================================== one measurement point
class SkipPoint(Exception):
    pass


STAT_KEYS = ("encode_s", "decode_s", "quantize_s", "wait_s", "wall_s", "wire_bytes", "raw_bytes")


def measure_point(ctx: Ctx, system: str, coll: str, dataset: str, mode: str, nbytes: int, ref_cache: dict):
    a, n, rank = ctx.args, ctx.n, ctx.rank
    npdt = np_dtype(a.dtype)
    count = count_for(coll, nbytes, npdt.itemsize, n, dataset)
    root = a.root if coll == "broadcast" else -1
    failed = None
    try:
        x = rank_input(dataset, rank, count, a.dtype)
        key = (coll, dataset, count)
        if key not in ref_cache:
            ref_cache.clear()
            ref_cache[key] = (reference(coll, dataset, n, rank, count, a.dtype, max(root, 0)) if a.check
                              else (None, 0, 0))
        ref, gmin, gmax = ref_cache[key]
    except Exception as e:  # noqa: BLE001 - every rank must agree to skip the point
        failed = e
    if ctx.reduce([1.0 if failed else 0.0], "max")[0] > 0:
        raise SkipPoint(f"input preparation failed on some rank: {failed!r}")
    if not a.check:
        mm = ctx.reduce([-float(x.astype(np.float64).min()), float(x.astype(np.float64).max())], "max")
        gmin, gmax = -mm[0], mm[1]

    # ---- the runner
    # auto:<mode> on ncclz: the communicator's own policy decides per call (rank 0's decision, in
    # the call descriptor); other systems have no policy: the tool's model picks once (resolve_auto).
    policy_mode, policy_why = None, ""
    if mode.startswith("auto:") and system != "ncclz":
        policy_mode, policy_why = resolve_auto(ctx, coll, x, mode, size_bytes(coll, count, npdt.itemsize, n))
    run_mode = policy_mode or mode
    if system == "ncclz" and mode.startswith("auto:"):
        # every auto row starts as a fresh job on its data: the policy's calibrations and measured
        # times are per (dtype, spec) and size class, not per data set, so rows of other data sets
        # in this run would otherwise decide for this one
        ctx.comm.reset_policy()
    if system == "ncclz":
        if coll == "all_reduce":
            out = np.empty_like(x)
        elif coll == "reduce_scatter":
            out = np.empty((x.shape[0] // n, *x.shape[1:]) if x.ndim > 1 else count // n, x.dtype)
        elif coll == "all_gather":
            out = np.empty((n, *x.shape), x.dtype)
        else:
            out = np.empty_like(x)

        class R:
            pass

        r = R()
        r.stats = []

        def prep():
            if coll == "broadcast":
                np.copyto(out, x)

        def run():
            _ncclz_call(ctx, coll, x, out, run_mode, max(root, 0))
            s = ctx.comm.last_stats
            r.stats.append(s)

        r.prep, r.run, r.result = prep, run, (lambda: out)
    elif system == "gloo":
        r = GlooRunner(ctx, coll, x, max(root, 0))
    elif system == "sz3":
        r = SZ3Runner(ctx, coll, x, max(root, 0), mode)
    else:
        raise ValueError(system)

    def one():
        r.prep()
        ctx.barrier()
        t0 = time.perf_counter()
        r.run()
        return time.perf_counter() - t0

    for _ in range(a.warmup):
        one()
    if system == "ncclz":
        r.stats.clear()
    if system == "sz3":
        r.timing = {k: 0.0 for k in r.timing}
    # iterations: enough for --budget seconds (rank 0's estimate from the warm-up, agreed by max)
    if a.iters:
        iters = a.iters
    else:
        t = one()
        if system == "ncclz":
            r.stats.clear()
        if system == "sz3":
            r.timing = {k: 0.0 for k in r.timing}
        iters = int(ctx.reduce([max(1, min(a.max_iters, int(a.budget / max(t, 1e-6))))], "max")[0])
    times = [one() for _ in range(iters)]
    tmax = ctx.reduce(times, "max")  # per-iteration slowest rank
    t_med = float(np.median(tmax))
    t_mean = float(np.mean(tmax))

    # ---- correctness
    res = r.result()
    bare = run_mode.removeprefix("auto:")
    E = bound_for(bare, gmin, gmax) if (system != "ncclz" or not r.stats) else float(r.stats[-1].error_bound)
    if system == "sz3":
        E = r.E
    if ref is not None:
        err = float(np.max(np.abs(np.asarray(res, dtype=np.float64).reshape(ref.shape) - ref))) if ref.size else 0.0
    else:
        err = float("nan")
    err = float(ctx.reduce([err], "max")[0])

    # ---- stats
    row = {"system": system, "collective": coll, "dataset": dataset, "mode": mode if system != "gloo" else "none",
           "dtype": a.dtype, "size": size_bytes(coll, count, npdt.itemsize, n), "count": count,
           "redop": "sum" if coll in ("all_reduce", "reduce_scatter") else "none", "root": root,
           "nranks": n, "iters": iters, "time_us": t_med * 1e6, "time_mean_us": t_mean * 1e6,
           "times_us": [float(t) * 1e6 for t in tmax]}
    row["algbw"] = row["size"] / t_med / 1e9
    row["busbw"] = row["algbw"] * busbw_factor(coll, n)
    if system == "ncclz" and mode.startswith("auto:") and r.stats:
        picks = [policy_choice_of(mode, s) for s in r.stats]
        policy_mode = max(set(picks), key=picks.count)
        if len(set(picks)) > 1:
            policy_mode += " (" + ", ".join(f"{k} x{picks.count(k)}" for k in sorted(set(picks))) + ")"
        policy_why = r.stats[-1].policy
    if policy_mode is not None:
        row["policy_choice"] = policy_mode
        row["policy_why"] = policy_why
    row["max_err"] = err
    row["bound"] = E
    row["err_over_bound"] = (err / E) if E > 0 else 0.0
    row["ok"] = bool(E <= 0 or err <= E * (1 + 1e-6) + 1e-30) if ref is not None else None
    if system == "ncclz" and r.stats:
        v = np.array([[float(getattr(s, k)) for k in STAT_KEYS] for s in r.stats]).mean(axis=0)
        v = ctx.reduce(v, "sum") / n  # mean over ranks
        st = dict(zip(STAT_KEYS, v.tolist()))
        st["exact_fallback"] = bool(getattr(r.stats[-1], "exact_fallback", False))
        row.update(st)
        row["ratio"] = st["raw_bytes"] / st["wire_bytes"] if st["wire_bytes"] else 1.0
        # per call (all ranks' bytes): an auto row's calls may differ (the policy's codec effort), and
        # the median call's ratio is the one that goes with the median time
        per = np.array([[float(s.raw_bytes), float(s.wire_bytes)] for s in r.stats])
        per = ctx.reduce(per.reshape(-1), "sum").reshape(-1, 2)
        calls = [float(a / b) if b else 1.0 for a, b in per]
        row["ratio_calls"] = calls
        row["ratio_median"] = float(np.median(calls)) if calls else row["ratio"]
        codec = st["encode_s"] + st["decode_s"] + st["quantize_s"]
        row["codec_s"] = codec
        row["codec_share"] = codec / st["wall_s"] if st["wall_s"] else 0.0
    elif system == "sz3":
        tm = {k: v / iters for k, v in r.timing.items()}
        v = ctx.reduce([tm["compress_s"], tm["comm_s"], tm["decompress_s"], tm["range_s"], r.wire], "sum") / n
        row.update(compress_s=v[0], comm_s=v[1], decompress_s=v[2], range_s=v[3], wire_bytes=v[4], via=a.sz3_via)
        raw = count * npdt.itemsize * (n - 1) if coll != "broadcast" else count * npdt.itemsize
        row["raw_bytes"] = raw
        row["ratio"] = raw / v[4] if v[4] else float("nan")
        row["codec_s"] = v[0] + v[2]
        row["codec_share"] = row["codec_s"] / t_med
    else:
        row["ratio"] = 1.0
        row["wire_bytes"] = None
        row["codec_share"] = 0.0
    return row


# =========================================================================== printing
HEADER = ("#       size        count      type   redop  root  system  mode            time(us)   algbw   busbw"
          "    ratio     wire(B)    max_err      bound  err/E  codec%  ran")


def format_row(r: dict) -> str:
    """One table row (the columns of HEADER). `ran`: for an auto row, the mode the policy ran."""
    wire = r.get("wire_bytes")
    wire_s = f"{wire:11.4g}" if isinstance(wire, (int, float)) else f"{'-':>11s}"
    ratio = r.get("ratio")
    ratio_s = f"{ratio:8.2f}" if ratio is not None and not math.isnan(ratio) else f"{'-':>8s}"
    err = r.get("max_err", float("nan"))
    ran = r.get("policy_choice", "")
    return (f"{r['size']:12d} {r['count']:12d} {dtype_label(r['dtype']):>9s} {r['redop']:>7s} {r['root']:5d}  "
            f"{r.get('system', 'ncclz'):<6s}  {r.get('mode', ''):<14s} "
            f"{r['time_us']:10.1f} {r['algbw']:7.3f} {r['busbw']:7.3f} {ratio_s} {wire_s} "
            f"{err:10.3g} {r['bound']:10.3g} {r['err_over_bound']:6.3f} {100 * r.get('codec_share', 0):6.1f}"
            f"{'  ' + ran if ran else ''}").rstrip()


def group_title(r: dict) -> str:
    """The title of a row's table: one table per (collective, data set)."""
    return f"# {r['collective']}  data={r['dataset']}  {r['nranks']} ranks"


def link_description() -> str:
    """What the run knows about the link, for the run's header."""
    throttle, link = os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS"), os.environ.get("NCCLZ_LINK_GBPS")
    if throttle:
        s = f"the socket transport paced to {throttle} Gbit/s per rank (NCCLZ_SOCKET_THROTTLE_GBPS)"
        if link and float(link) != float(throttle):
            s += f"; the policy assumes {link} Gbit/s (NCCLZ_LINK_GBPS)"
        return s
    if link:
        return f"{link} Gbit/s (NCCLZ_LINK_GBPS)"
    return "rate not set (auto rows: the policy measures it from uncompressed calls)"


# =========================================================================== rank main
def _point_label(p) -> str:
    system, coll, ds, mode, s = p
    return f"{coll} {ds} {format_size(s)}B {system} {mode}"


def rank_main(a) -> int:
    ctx = Ctx(a)
    rank, n = ctx.rank, ctx.n
    con = Console(mode=_progress_mode(a)) if rank == 0 else None

    def note(msg: str) -> None:
        if con is not None:
            con.note(msg)

    datasets, why_not = available_data(a, ctx)
    for d, why in why_not.items():
        note(f"# skipped data set {d}: {why}")
    # rank 0 builds the cached data files first (the fields are cached on disk), then the others load
    # them: every rank must build its in-memory bases at the same (largest) size, since a smooth
    # field's prefix depends on the size it was generated at
    failed = prepare_data(a, datasets) if rank == 0 else {}
    ctx.barrier()
    if rank != 0:
        failed = prepare_data(a, datasets)
    flags = ctx.reduce([1.0 if d in failed else 0.0 for d in datasets], "max")
    for d, f in zip(list(datasets), flags):
        if f:
            note(f"# skipped data set {d}: building it failed ({failed.get(d, 'on another rank')})")
            datasets.remove(d)
    sizes = sizes_between(a.min_bytes, a.max_bytes, a.factor)
    plan = []
    for coll in a.collectives:
        for ds in datasets:
            for system in a.systems:
                modes = a.modes if system == "ncclz" else (["none"] if system == "gloo" else
                                                           [m for m in a.modes if is_lossy(m) and not m.startswith("auto:")])
                if system == "gloo" and coll not in GlooRunner.supported:
                    continue
                if system == "sz3" and coll not in SZ3Runner.supported:
                    continue
                for mode in modes:
                    for s in sizes:
                        plan.append((system, coll, ds, mode, s))
    # one table per (collective, data set); inside it, size by size, so one reference serves every
    # system and mode of a size
    plan.sort(key=lambda p: (COLLECTIVES.index(p[1]), p[2], p[4], SYSTEMS.index(p[0]), p[3]))
    rows, skipped = [], []
    t_start = time.perf_counter()
    ref_cache: dict = {}
    last_title = None
    env = {"link_gbps": os.environ.get("NCCLZ_LINK_GBPS") or os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS"),
           "transport": os.environ.get("NCCLZ_TRANSPORT", ""), "netlab_ns": os.environ.get("NETLAB_NS")}
    if con is not None:
        con.result(f"# ncclz-bench: {n} ranks, {a.dtype}, systems {','.join(a.systems)}; link: {link_description()}; "
                   f"transport {env['transport'] or 'auto'}; host {platform.node()}, {os.cpu_count()} CPUs")
        con.result("# time: per call, slowest rank, median over iterations; algbw/busbw in GB/s from uncompressed "
                   "bytes; ran: the mode the policy ran (auto rows)")
    for k, point in enumerate(plan):
        system, coll, ds, mode, s = point
        if con is not None:
            con.progress(k, len(plan), _point_label(point), time.perf_counter() - t_start)
        try:
            row = measure_point(ctx, system, coll, ds, mode, s, ref_cache)
        except SkipPoint as e:
            skipped.append((_point_label(point), str(e)))
            note(f"# skipped {_point_label(point)}: {e}")
            continue
        row.update(env)
        row["loadavg1"] = os.getloadavg()[0]
        row["nchannels_env"] = os.environ.get("NCCLZ_NCHANNELS", "")
        rows.append(row)
        if con is not None:
            title = group_title(row)
            if title != last_title:
                if last_title is not None:
                    con.result("")
                con.result(title)
                con.result(HEADER)
                last_title = title
            con.result(format_row(row))
    status = 0
    if con is not None:
        con.close()
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(), "cpus": os.cpu_count(), "nranks": n, "argv": sys.argv,
                "skipped_data": why_not, "skipped_points": skipped, **env}
        write_outputs(a, rows, meta, con)
    broken = [r for r in rows if r["system"] == "ncclz" and r.get("ok") is False]
    if not rows:
        note(f"ncclz-bench: nothing ran ({len(plan)} points planned, {len(skipped)} skipped; "
             f"{len(why_not)} of {len(a.data)} data sets unavailable; see the messages above)")
        status = 1
    elif broken:
        note(f"ncclz-bench: {len(broken)} ncclz rows exceeded their error bound (err/E > 1): a bug, please report it")
        status = 1
    elif con is not None:
        note(f"# {len(rows)} points ran, {len(skipped)} skipped, in {time.perf_counter() - t_start:.0f} s")
    ctx.close()
    return status


def _progress_mode(a) -> str:
    if not a.progress:
        return "off"
    if os.environ.get(PROGRESS_ENV) == "records":
        return "records"
    return default_mode()


def write_outputs(a, rows, meta, con: Console) -> None:
    if a.json:
        p = Path(a.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        con.note(f"# wrote {p}")
    if a.csv:
        p = Path(a.csv)
        p.parent.mkdir(parents=True, exist_ok=True)
        keys = []
        for r in rows:
            for k in r:
                if k not in keys and k != "times_us":
                    keys.append(k)
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow(r)
        con.note(f"# wrote {p}")
    if a.plot and rows:
        plot_rows(rows, a.plot)
        con.note(f"# wrote {a.plot}")


def plot_rows(rows: list, path: str) -> None:
    """Time and ratio against size, one line per (system, mode), a pair of panels per (collective,
    data set)."""
    from ncclz.tools.plot import pyplot

    plt = pyplot()
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["collective"], r["dataset"]), []).append(r)
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.6 * len(groups)), squeeze=False)
    for (coll, ds), (ax_t, ax_r) in zip(groups, axes):
        lines: dict = {}
        for r in groups[(coll, ds)]:
            lines.setdefault(f"{r['system']} {r['mode']}", []).append(r)
        for name, rs in lines.items():
            rs.sort(key=lambda r: r["size"])
            x = [r["size"] for r in rs]
            ax_t.plot(x, [r["time_us"] / 1e3 for r in rs], "o-", label=name)
            ax_r.plot(x, [r.get("ratio") or float("nan") for r in rs], "o-", label=name)
        for ax, what in ((ax_t, "time per call (ms)"), (ax_r, "ratio (raw / wire bytes)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(what)
            ax.set_title(f"{coll}, {ds}")
            ax.grid(True, alpha=0.3)
        ax_t.set_yscale("log")
        ax_t.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# =========================================================================== CLI
_EPILOG = """data sets (-d):
{datasets}

systems (-s):
  ncclz  the modes of -m
  gloo   torch.distributed gloo, same data, uncompressed (needs torch; all_reduce, all_gather, broadcast)
  sz3    SZ3-compress, all-gather the blobs uncompressed, decompress all (needs pysz; lossy modes only)

modes (-m):
  none, lossless, rel=R, abs=E   run as named (policy="off")
  auto:<mode>                    <mode> under the Communicator's compression policy, which may run
                                 none or lossless instead (column "ran")

examples:
  ncclz-bench -n 4 -c all_reduce -d smooth,real -b 1M -e 64M
  ncclz-bench -n 4 --throttle-gbps 0.5 -c all_reduce -m none,rel=1e-3,auto:rel=1e-3 --json out.json --plot out.png

Exit status: 0 when every point ran within its bound; 1 when nothing ran (every data set
unavailable or every point skipped) or an ncclz row exceeded its error bound; 2 for bad arguments.
"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ncclz-bench", description=__doc__.split("\n\n")[0],
        epilog=_EPILOG.format(datasets="\n".join(f"  {d:14s} {data.DESCRIPTIONS[d]}" for d in DATASETS)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--nranks", type=int, default=4,
                    help="local ranks to launch when RANK is not set (default: %(default)s)")
    ap.add_argument("-b", "--min-bytes", type=parse_size, default=parse_size("1M"), metavar="SIZE",
                    help="smallest size, bytes with K/M/G suffixes (nccl-tests 'size': per-rank input; the output "
                         "for all_gather) (default: 1M)")
    ap.add_argument("-e", "--max-bytes", type=parse_size, default=parse_size("64M"), metavar="SIZE",
                    help="largest size (default: 64M)")
    ap.add_argument("-f", "--factor", type=float, default=4.0, help="size multiplication factor, > 1 (default: %(default)g)")
    ap.add_argument("-c", "--collectives", default=",".join(COLLECTIVES), metavar="LIST",
                    help=f"comma-separated, of: {', '.join(COLLECTIVES)} (default: all)")
    ap.add_argument("-m", "--modes", default="none,lossless,rel=1e-3", metavar="LIST",
                    help="comma-separated, of: none, lossless, rel=R, abs=E, auto:<mode> (below) "
                         "(default: %(default)s)")
    ap.add_argument("-d", "--data", default="gaussian,smooth", metavar="LIST",
                    help=f"comma-separated data sets, of: {', '.join(DATASETS)} (below) (default: %(default)s)")
    ap.add_argument("-t", "--dtype", default="float32", choices=DTYPES, help="element type (default: %(default)s)")
    ap.add_argument("-s", "--systems", default="ncclz", metavar="LIST",
                    help=f"comma-separated, of: {', '.join(SYSTEMS)} (below) (default: %(default)s)")
    ap.add_argument("-r", "--root", type=int, default=0, help="broadcast root (default: %(default)s)")
    ap.add_argument("-w", "--warmup", type=int, default=1, help="untimed calls per point (default: %(default)s)")
    ap.add_argument("-i", "--iters", type=int, default=0,
                    help="timed calls per point; 0: as many as fit --budget (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="seconds per point when --iters is 0 (default: %(default)g)")
    ap.add_argument("--max-iters", type=int, default=20,
                    help="most timed calls per point when --iters is 0 (default: %(default)s)")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip the fp64 reference and the error columns (default: check)")
    ap.add_argument("--sz3-via", choices=["ncclz", "gloo", "auto"], default="auto",
                    help="how the SZ3 baseline moves its blobs, uncompressed; auto: ncclz when it is measured, "
                         "else gloo (default: %(default)s)")
    ap.add_argument("--transport", default=None, choices=["shm", "socket"],
                    help="local launch only: NCCLZ_TRANSPORT for the ranks (default: automatic, shared memory)")
    ap.add_argument("--throttle-gbps", type=float, default=None, metavar="GBPS",
                    help="local launch only: the socket transport paced to this many Gbit/s per rank, a root-less "
                         "emulation of a slow network (sets NCCLZ_SOCKET_THROTTLE_GBPS; default: off)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the rows and the run's metadata as JSON (default: none)")
    ap.add_argument("--csv", default=None, metavar="PATH", help="write the rows as CSV (default: none)")
    ap.add_argument("--plot", default=None, metavar="PATH",
                    help="write a PNG of time and ratio against size (needs matplotlib; default: none)")
    ap.add_argument("--no-progress", dest="progress", action="store_false",
                    help="no progress on stderr (default: a bar on a terminal, plain lines otherwise)")
    return ap


def parse_args(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    a.collectives = [c.strip() for c in a.collectives.split(",") if c.strip()]
    for c in a.collectives:
        if c not in COLLECTIVES:
            ap.error(f"unknown collective {c!r}; one of {', '.join(COLLECTIVES)}")
    a.data = [d.strip() for d in a.data.split(",") if d.strip()]
    for d in a.data:
        if d not in DATASETS:
            ap.error(f"unknown data set {d!r}; one of {', '.join(DATASETS)}")
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in a.systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; one of {', '.join(SYSTEMS)}")
    try:
        a.modes = parse_modes(a.modes)
    except ValueError as e:
        ap.error(str(e))
    if not (a.collectives and a.data and a.systems):
        ap.error("-c, -d and -s need at least one entry each")
    if a.min_bytes > a.max_bytes:
        ap.error("--min-bytes must be <= --max-bytes")
    if a.factor <= 1:
        ap.error("--factor must be > 1")
    if a.nranks < 1:
        ap.error("-n must be at least 1")
    if a.throttle_gbps is not None and not a.throttle_gbps > 0:
        ap.error("--throttle-gbps must be > 0")
    if a.plot:
        from ncclz.tools.plot import PlotUnavailable, check

        try:
            check()
        except PlotUnavailable as e:
            ap.error(str(e))
    if a.sz3_via == "auto":
        a.sz3_via = "ncclz" if "ncclz" in a.systems else "gloo"
    return a


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return rank_main(a)
    # launcher: n local ranks of this module; rank 0's tables come through as they are, its progress
    # is drawn here (a bar on a terminal)
    from ncclz.run import launch

    prepare_data(a, available_data(a)[0])  # build the caches once, before the ranks load them
    env = dict(os.environ)
    if a.throttle_gbps:
        env["NCCLZ_SOCKET_THROTTLE_GBPS"] = str(a.throttle_gbps)
        env.setdefault("NCCLZ_LINK_GBPS", str(a.throttle_gbps))
        env["NCCLZ_TRANSPORT"] = a.transport or "socket"
    elif a.transport:
        env["NCCLZ_TRANSPORT"] = a.transport
    con = Console(mode=_progress_mode(a))
    if con.mode != "off":
        env[PROGRESS_ENV] = "records"
    sinks = LaunchSinks(con)
    try:
        return launch([sys.executable, "-m", "ncclz.tools.bench", *argv], a.nranks, env=env,
                      out=sinks.out, err=sinks.err)
    finally:
        con.close()


if __name__ == "__main__":
    sys.exit(main())
