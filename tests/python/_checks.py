"""Checks shared by the rank programs of the multi-process tests (_workers.py, _gpu_scenarios.py):
every rank's input from a seed, the exact fp64 reference, the promised bound of each mode, and a
Checker that tests every element against it and records hashes of the outputs."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback

import numpy as np

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def rank_input(rank, count, dtype, seed=0, shape=None):
    """A smooth field plus noise (floats), or small integers, for rank ``rank``."""
    rng = np.random.default_rng(1000 * seed + rank)
    if dtype in FLOAT_DTYPES:
        t = np.linspace(0, 6 * np.pi, count)
        v = 10 * np.sin(t + rank) + rng.normal(0, 0.5, count) + rank
    elif dtype == "uint8":
        v = rng.integers(0, 60, count)
    else:
        v = rng.integers(-1000, 1000, count)
    a = v.astype(np_dtype(dtype))
    return a.reshape(shape) if shape is not None else a


def as_f64(a):
    return np.asarray(a).astype(np.float64)


def reference(inputs, op):
    """Exact reduction in fp64 of the (already type-rounded) inputs."""
    x = np.stack([as_f64(a) for a in inputs])
    if op == "sum":
        return x.sum(0)
    if op == "avg":
        return x.sum(0) / len(inputs)
    if op == "max":
        return x.max(0)
    if op == "min":
        return x.min(0)
    if op == "prod":
        return x.prod(0)
    raise ValueError(op)


def digest(a) -> str:
    if hasattr(a, "detach"):  # torch
        import torch

        t = a.detach().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        a = t.numpy()
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def bits(a) -> bytes:
    return np.ascontiguousarray(np.asarray(a)).tobytes()


def modes(ncclz, dtype):
    """(name, compression) pairs valid for dtype."""
    out = [("none", None), ("lossless", ncclz.Lossless())]
    if dtype in FLOAT_DTYPES:
        rel = 1e-2 if dtype in ("float16", "bfloat16") else 1e-3
        absb = 0.25 if dtype in ("float16", "bfloat16") else 1e-2
        out += [(f"rel{rel:g}", ncclz.Lossy(rel=rel)), (f"abs{absb:g}", ncclz.Lossy(abs=absb))]
    return out


def bound_of(comp, inputs):
    """The promised absolute bound E (None for exact modes)."""
    if comp is None or type(comp).__name__ == "Lossless":
        return None
    if getattr(comp, "abs", None) is not None:
        return float(comp.abs)
    x = np.stack([as_f64(a) for a in inputs])
    return float(comp.rel) * float(x.max() - x.min())


def plain_tolerance(dtype, ref, inputs, op):
    """How far an uncompressed float reduction may be from the fp64 reference."""
    if dtype not in FLOAT_DTYPES:
        return 0.0
    eps = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7}[dtype]
    if op in ("max", "min"):
        return 0.0
    mag = np.sum(np.abs(np.stack([as_f64(a) for a in inputs])), axis=0)
    if op == "avg":
        mag = mag / len(inputs)
    return (len(inputs) + 1) * eps * mag + np.abs(ref) * eps


class Checker:
    def __init__(self, comm):
        self.comm = comm
        self.rank, self.world = comm.rank, comm.world_size
        self.hashes = {}
        self.checks = 0
        self.max_err_ratio = {}
        self.soft = bool(os.environ.get("NCCLZ_TEST_SOFT"))  # collect failures instead of stopping
        self.failures = []

    def check_close(self, name, out, ref, tol, comp, dtype):
        got = as_f64(out).reshape(ref.shape)
        finite = np.isfinite(ref)
        err = np.abs(got - ref)[finite]
        worst = float(err.max()) if err.size else 0.0
        if np.any(err > tol if np.isscalar(tol) else err > np.asarray(tol)[finite]):
            i = int(np.argmax(err - (tol if np.isscalar(tol) else np.asarray(tol)[finite])))
            return self.fail(
                f"rank {self.rank}: {name}: element {i} off by {err[i]:.6g} > allowed "
                f"{tol if np.isscalar(tol) else np.asarray(tol)[finite][i]:.6g} (compression {comp}, {dtype})"
            )
        if np.isscalar(tol) and tol > 0:
            self.max_err_ratio[name] = worst / tol
        self.checks += 1

    def require(self, cond, msg):
        if not cond:
            self.fail(f"rank {self.rank}: {msg}" if not str(msg).startswith("rank") else str(msg))

    def fail(self, msg):
        if self.soft:
            self.failures.append(msg)
        else:
            raise AssertionError(msg)

    def record(self, name, out):
        self.hashes[name] = digest(out)


def layout_field(rank, rows=384, cols=512):
    """A smooth 2-D field, different on every rank (for the shape-hint scenario)."""
    y, x = np.meshgrid(np.linspace(0, 1, rows), np.linspace(0, 1, cols), indexing="ij")
    f = np.sin(6 * x + 3 * y + 0.3 * rank) + np.cos(5 * y - 2 * x) + np.exp(-((x - 0.4) ** 2 + (y - 0.6) ** 2) / 0.02)
    return f.astype(np.float32)


class Errors(dict):
    """The errors of calls that must fail, by name: ``errs.expect(name, fn, exc)`` runs ``fn`` and
    records ``"ExcType: message"`` (default exc: InvalidArgumentError); a call that does not raise
    fails the scenario. Expecting RemoteError (a mismatch) refuses its TimeoutError and AbortedError
    subclasses: those mean a rank waited or gave up, not that the ranks compared their calls."""

    def __init__(self, ncclz):
        super().__init__()
        self._ncclz = ncclz

    def expect(self, name, fn, exc=None):
        nz = self._ncclz
        exc = exc or nz.InvalidArgumentError
        try:
            fn()
        except exc as e:
            if exc is nz.RemoteError and isinstance(e, (nz.TimeoutError, nz.AbortedError)):
                raise AssertionError(f"{name}: {type(e).__name__} instead of a mismatch: {e}") from e
            self[name] = f"{type(e).__name__}: {e}"
            return
        raise AssertionError(f"{name}: no {exc.__name__}")


def run_rank_program(scenarios: dict) -> None:
    """The main of a rank program run as ``python PROGRAM SCENARIO OUTDIR [ARGS...]`` in every rank (the
    environment of test_comm.run_ranks): creates the communicator (ncclz.init()), runs
    ``scenarios[SCENARIO](ncclz, comm, args)`` and writes its dict, with "rank" and "wall", to
    OUTDIR/rank<R>.json; a failed creation is reported there ("init_error", "message"). Any other
    failure prints its traceback and exits 1 at once (no teardown that could hang)."""
    try:
        name, outdir, args = sys.argv[1], sys.argv[2], sys.argv[3:]
        import ncclz

        rank = int(os.environ["RANK"])
        t0 = time.monotonic()
        try:
            comm = ncclz.init()
        except ncclz.Error as e:
            result = {"init_error": type(e).__name__, "message": str(e)}
        else:
            with comm:
                result = scenarios[name](ncclz, comm, args) or {}
        result["rank"] = rank
        result["wall"] = time.monotonic() - t0
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    except BaseException:  # noqa: BLE001 - any failure: traceback, exit 1
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
