"""ncclz-bench: nccl-tests-style sweeps of the ncclz collectives, with compression, beside baselines.

    ncclz-bench -n 4                                    # 4 local ranks (ncclz-run), all collectives
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

Data (-d): gaussian (N(0, 1e-3)), smooth (the smooth3d field of bench/data.py), sparse
(gaussian with 99% zeros), real (NCEP/NCAR Z500 reanalysis of bench/data.py, tiled along time),
grad (CNN gradients of bench/data.py, tiled). Rank r's input is a deterministic function of
(data set, r, count), see :func:`rank_input`.
"""

from __future__ import annotations

import argparse
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

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DATASETS = ("gaussian", "smooth", "sparse", "real", "grad", "smooth-shaped", "real-shaped")
# "<name>-shaped": the same values as <name>, handed to the collectives in their natural shape
# (so ncclz's wire codec can use 2-D/3-D predictors, and SZ3 gets the dimensions); the count is
# rounded up to whole planes (SHAPE_PLANES) when it is at least one plane.
SHAPE_PLANES = {"smooth": (256, 256), "real": (29, 49)}
SYSTEMS = ("ncclz", "gloo", "sz3")


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


def _load_policy():
    try:
        from ncclz.tools import policy
    except ImportError:  # running from the source tree before the package is rebuilt
        import runpy
        import types

        policy = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                      "policy.py"), run_name="ncclz_policy"))
    return policy


def resolve_auto(ctx, coll: str, x, mode: str, nbytes: int) -> tuple[str, str]:
    """auto:<mode>: rank 0 asks the policy (calibrating on its own input), all ranks agree.
    Returns (concrete mode, the policy's explanation)."""
    inner = mode[5:]
    why = ""
    pick = np.zeros(len(POLICY_CHOICES))
    if ctx.rank == 0:
        pol = _load_policy().Policy(world_size=ctx.n)
        ch = pol.choose(coll, x, mode_compression(inner), nbytes=nbytes)
        pick[POLICY_CHOICES.index(ch.mode)] = 1
        why = str(ch)
    pick = ctx.reduce(pick, "max")
    chosen = POLICY_CHOICES[int(np.argmax(pick))]
    return ({"none": "none", "lossless": "lossless", "lossy": inner}[chosen], why)


def shaped_base(dataset: str) -> tuple[str, tuple[int, ...] | None]:
    """("smooth", (256, 256)) for "smooth-shaped"; (dataset, None) for the flat data sets."""
    if dataset.endswith("-shaped"):
        name = dataset[: -len("-shaped")]
        return name, SHAPE_PLANES[name]
    return dataset, None


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
_BENCH_DATA = None


def bench_data_module():
    """Imports bench/data.py (the repository's benchmark data sets): NCCLZ_BENCH_DIR, ./bench, or the
    bench/ folder next to this package's source tree. None if not found."""
    global _BENCH_DATA
    if _BENCH_DATA is not None:
        return _BENCH_DATA or None
    cands = []
    if os.environ.get("NCCLZ_BENCH_DIR"):
        cands.append(Path(os.environ["NCCLZ_BENCH_DIR"]))
    cands += [Path.cwd() / "bench", Path(__file__).resolve().parents[3] / "bench"]
    for c in cands:
        if (c / "data.py").is_file():
            import importlib.util

            spec = importlib.util.spec_from_file_location("ncclz_bench_data", c / "data.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _BENCH_DATA = mod
            return mod
    _BENCH_DATA = False
    return None


_BASE_CACHE: dict = {}


def _base(dataset: str, count: int) -> np.ndarray:
    """A float32 base array of at least `count` values for the data set (cached in memory)."""
    key = dataset
    have = _BASE_CACHE.get(key)
    if have is not None and have.size >= count:
        return have
    d = bench_data_module()
    if dataset in ("gaussian", "sparse"):
        if d is not None:
            a = d.gaussian(max(count, 1 << 20))
        else:  # same recipe as bench/data.py
            rng = np.random.default_rng(20261122)
            a = rng.standard_normal(max(count, 1 << 20), dtype=np.float32) * np.float32(1e-3)
    elif dataset == "smooth":
        if d is None:
            raise RuntimeError("data set 'smooth' needs bench/data.py (set NCCLZ_BENCH_DIR=<repo>/bench)")
        z = max(1, math.ceil(count / (256 * 256)))
        a = d.smooth3d((z, 256, 256)).ravel()
    elif dataset == "real":
        if d is None:
            raise RuntimeError("data set 'real' needs bench/data.py and eofs")
        a = d.reanalysis()  # (65, 29, 49)
    elif dataset == "grad":
        if d is None:
            raise RuntimeError("data set 'grad' needs bench/data.py, torch and scikit-learn")
        a = d.gradients()
    else:
        raise ValueError(f"unknown data set {dataset!r}; one of {', '.join(DATASETS)}")
    _BASE_CACHE[key] = a
    return a


def prepare_data(a) -> None:
    """Builds (and caches) every data set at the largest count of the sweep, once."""
    biggest = max(sizes_between(a.min_bytes, a.max_bytes, a.factor))
    count = max(1, biggest // np_dtype(a.dtype).itemsize)
    for d in a.data:
        try:
            _base(shaped_base(d)[0], count)
        except Exception as e:
            print(f"# data set {d}: {e}", file=sys.stderr)


def rank_input(dataset: str, rank: int, count: int, dtype="float32") -> np.ndarray:
    """Rank `rank`'s input: deterministic in (dataset, rank, count), so every rank can rebuild all.

    "<name>-shaped": <name>'s values, shaped (count / plane, *plane) when count is a whole number of
    planes (SHAPE_PLANES; else flat): smooth (z, 256, 256), real (t, 29, 49).

    gaussian: bench/data.gaussian values, rolled by rank * (count // 7 + 1).
    sparse:   the same with 99% of the values zeroed (mask from numpy seed 1000 + rank).
    smooth:   bench/data.smooth3d((ceil(count/65536), 256, 256)) flat[:count] * (1 + 0.1 rank) + 0.25 rank.
    real:     reanalysis Z500 (65, 29, 49), time axis tiled cyclically from time step 5 * rank.
    grad:     the flat CNN gradient, rolled by rank * 104729 and tiled to count.
    """
    count = int(count)
    base, plane = shaped_base(dataset)
    if plane is not None:
        x = rank_input(base, rank, count, dtype)
        q = int(np.prod(plane))
        return x.reshape(count // q, *plane) if count >= q and count % q == 0 else x
    if dataset in ("gaussian", "sparse"):
        b = _base(dataset, count)[:count]
        x = np.roll(b, rank * (count // 7 + 1)) if rank else b.copy()
        if dataset == "sparse":
            keep = np.random.default_rng(1000 + rank).random(count) < 0.01
            x = np.where(keep, x, np.float32(0))
    elif dataset == "smooth":
        b = _base(dataset, count)[:count]
        x = b * np.float32(1 + 0.1 * rank) + np.float32(0.25 * rank)
    elif dataset == "real":
        b = _base(dataset, count)
        t, plane = b.shape[0], b.shape[1] * b.shape[2]
        steps = math.ceil(count / plane)
        idx = (np.arange(steps) + 5 * rank) % t
        x = b[idx].ravel()[:count]
    elif dataset == "grad":
        b = _base(dataset, count)
        x = np.resize(np.roll(b, rank * 104729), count)
    else:
        raise ValueError(f"unknown data set {dataset!r}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if str(dtype) != "float32":
        x = np.ascontiguousarray(x.astype(np_dtype(dtype)))
    return x


def np_dtype(name: str):
    name = str(name)
    if name in ("bfloat16", "bf16"):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name in ("float16", "fp16", "half"):
        return np.dtype(np.float16)
    return np.dtype(name)


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
        self.rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0)))
        self.n = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", 1)))
        self.comm = None
        self.pg = False
        need_ncclz = "ncclz" in args.systems or ("sz3" in args.systems and args.sz3_via == "ncclz")
        if need_ncclz:
            import ncclz
            from ncclz import comm as _comm

            init = getattr(ncclz, "init", None) or getattr(_comm, "init")
            self.comm = init()
        if "gloo" in args.systems or ("sz3" in args.systems and args.sz3_via == "gloo") or self.comm is None:
            import torch.distributed as dist

            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = int(os.environ.get("MASTER_PORT", 29500)) + 1
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

            try:
                dist.destroy_process_group()
            except Exception:
                pass
        if self.comm is not None:
            self.comm.close()


def _ncclz_call(ctx: Ctx, coll, x, out, mode, root):
    """One call. `auto:<mode>` asks for <mode> under the communicator's compression policy (its
    default, NCCLZ_POLICY); any other mode runs exactly as named (policy="off")."""
    policy = None if mode.startswith("auto:") else "off"
    comp = mode_compression(mode[5:] if mode.startswith("auto:") else mode)
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
    label = mode[5:] if mode.startswith("auto:") else mode
    EFFORTS = _load_policy().EFFORTS  # not a relative import: bench/ncclz_bench.py runs this file by path

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
        self.timing = dict(compress_s=0.0, comm_s=0.0, decompress_s=0.0, range_s=0.0)
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
    except Exception as e:
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
    bare = run_mode[5:] if run_mode.startswith("auto:") else run_mode
    E = bound_for(bare, gmin, gmax) if (system != "ncclz" or not r.stats) else float(r.stats[-1].error_bound)
    if system == "sz3":
        E = r.E
    if ref is not None:
        err = float(np.max(np.abs(np.asarray(res, dtype=np.float64).reshape(ref.shape) - ref))) if ref.size else 0.0
    else:
        err = float("nan")
    err = float(ctx.reduce([err], "max")[0])

    # ---- stats
    row = dict(system=system, collective=coll, dataset=dataset, mode=mode if system != "gloo" else "none",
               dtype=a.dtype, size=size_bytes(coll, count, npdt.itemsize, n), count=count,
               redop="sum" if coll in ("all_reduce", "reduce_scatter") else "none", root=root,
               nranks=n, iters=iters, time_us=t_med * 1e6, time_mean_us=t_mean * 1e6,
               times_us=[float(t) * 1e6 for t in tmax])
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
HEADER = ("#       size        count      type   redop  root   time(us)   algbw   busbw    ratio     wire(B)"
          "    max_err      bound  err/E  codec%")


def format_row(r: dict) -> str:
    wire = r.get("wire_bytes")
    wire_s = f"{wire:11.4g}" if isinstance(wire, (int, float)) and wire is not None else f"{'-':>11s}"
    ratio = r.get("ratio")
    ratio_s = f"{ratio:8.2f}" if ratio is not None and not math.isnan(ratio) else f"{'-':>8s}"
    err = r.get("max_err", float("nan"))
    return (f"{r['size']:12d} {r['count']:12d} {dtype_label(r['dtype']):>9s} {r['redop']:>7s} {r['root']:5d} "
            f"{r['time_us']:10.1f} {r['algbw']:7.3f} {r['busbw']:7.3f} {ratio_s} {wire_s} "
            f"{err:10.3g} {r['bound']:10.3g} {r['err_over_bound']:6.3f} {100 * r.get('codec_share', 0):6.1f}")


def group_title(r: dict) -> str:
    return (f"# {r['system']}  {r['collective']}  data={r['dataset']}  mode={r['mode']}  "
            f"nranks={r['nranks']}")


# =========================================================================== rank main
def rank_main(a) -> int:
    ctx = Ctx(a)
    rank, n = ctx.rank, ctx.n
    sizes = sizes_between(a.min_bytes, a.max_bytes, a.factor)
    # rank 0 builds the cached data files first (bench/data.py caches on disk), then the others load
    # them: every rank must build its in-memory bases at the same (largest) size, since a smooth
    # field's prefix depends on the size it was generated at
    if rank == 0:
        prepare_data(a)
    ctx.barrier()
    if rank != 0:
        prepare_data(a)
    plan = []
    for coll in a.collectives:
        for ds in a.data:
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
    rows = []
    t_start = time.perf_counter()
    ref_cache: dict = {}
    last_title = None
    env = dict(link_gbps=os.environ.get("NCCLZ_LINK_GBPS") or os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS"),
               transport=os.environ.get("NCCLZ_TRANSPORT", ""), netlab_ns=os.environ.get("NETLAB_NS"))
    if rank == 0:
        print(f"# ncclz-bench: {n} ranks, dtype {a.dtype}, systems {','.join(a.systems)}, link {env['link_gbps']} Gbit/s,"
              f" transport {env['transport'] or 'auto'}, host {platform.node()}, {os.cpu_count()} CPUs", flush=True)
        print("# time: per call, slowest rank, median over iterations; algbw/busbw in GB/s from uncompressed bytes",
              flush=True)
    # sort so that one reference is reused across systems/modes
    plan.sort(key=lambda p: (COLLECTIVES.index(p[1]), p[2], p[4], SYSTEMS.index(p[0]), p[3]))
    for k, (system, coll, ds, mode, s) in enumerate(plan):
        if rank == 0 and a.progress:
            el = time.perf_counter() - t_start
            print(f"[{k + 1}/{len(plan)}] {system} {coll} {ds} {mode} {format_size(s)}B  ({el:.0f}s elapsed)",
                  file=sys.stderr, flush=True)
        try:
            row = measure_point(ctx, system, coll, ds, mode, s, ref_cache)
        except SkipPoint as e:
            if rank == 0:
                print(f"# SKIPPED {system} {coll} {ds} {mode} {s}: {e}", flush=True)
            continue
        row.update(env)
        row["loadavg1"] = os.getloadavg()[0]
        row["nchannels_env"] = os.environ.get("NCCLZ_NCHANNELS", "")
        rows.append(row)
        if rank == 0:
            title = group_title(row)
            if title != last_title:
                print(title)
                print(HEADER)
                last_title = title
            print(format_row(row), flush=True)
    if rank == 0:
        meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    host=platform.node(), cpus=os.cpu_count(), nranks=n, argv=sys.argv, **env)
        write_outputs(a, rows, meta)
    ctx.close()
    return 0


def write_outputs(a, rows, meta):
    if a.json:
        p = Path(a.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
        print(f"# wrote {p}", file=sys.stderr)
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
        print(f"# wrote {p}", file=sys.stderr)


# =========================================================================== CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ncclz-bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--nranks", type=int, default=4, help="local ranks to launch when RANK is not set")
    ap.add_argument("-b", "--min-bytes", type=parse_size, default=parse_size("1M"))
    ap.add_argument("-e", "--max-bytes", type=parse_size, default=parse_size("64M"))
    ap.add_argument("-f", "--factor", type=float, default=4.0, help="size multiplication factor")
    ap.add_argument("-c", "--collectives", default="all_reduce,reduce_scatter,all_gather,broadcast")
    ap.add_argument("-m", "--modes", default="none,lossless,rel=1e-3")
    ap.add_argument("-d", "--data", default="gaussian,smooth")
    ap.add_argument("-t", "--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    ap.add_argument("-s", "--systems", default="ncclz", help="ncclz,gloo,sz3")
    ap.add_argument("-r", "--root", type=int, default=0)
    ap.add_argument("-w", "--warmup", type=int, default=1)
    ap.add_argument("-i", "--iters", type=int, default=0, help="0: as many as fit --budget")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per point when --iters 0")
    ap.add_argument("--max-iters", type=int, default=20)
    ap.add_argument("--no-check", dest="check", action="store_false", help="skip the fp64 reference")
    ap.add_argument("--sz3-via", choices=["ncclz", "gloo", "auto"], default="auto",
                    help="how the SZ3 baseline moves its blobs (uncompressed)")
    ap.add_argument("--transport", default=None, help="local launch: NCCLZ_TRANSPORT (shm, socket)")
    ap.add_argument("--throttle-gbps", type=float, default=None,
                    help="local launch: socket transport paced to this rate (root-less emulation)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--no-progress", dest="progress", action="store_false")
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
    if a.min_bytes > a.max_bytes:
        ap.error("--min-bytes must be <= --max-bytes")
    if a.sz3_via == "auto":
        a.sz3_via = "ncclz" if "ncclz" in a.systems else "gloo"
    return a


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return rank_main(a)
    # launcher: n local ranks of this module
    from ncclz.run import launch

    prepare_data(a)

    env = dict(os.environ)
    if a.throttle_gbps:
        env["NCCLZ_SOCKET_THROTTLE_GBPS"] = str(a.throttle_gbps)
        env.setdefault("NCCLZ_LINK_GBPS", str(a.throttle_gbps))
        env["NCCLZ_TRANSPORT"] = a.transport or "socket"
    elif a.transport:
        env["NCCLZ_TRANSPORT"] = a.transport
    return launch([sys.executable, os.path.abspath(__file__), *argv], a.nranks, env=env)


if __name__ == "__main__":
    sys.exit(main())
