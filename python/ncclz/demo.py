"""``ncclz-demo``: compressed all-reduce of a real field across 4 local ranks.

Starts 4 ranks (through ncclz-run's machinery); each holds a quarter of the
winters of the NCEP/NCAR reanalysis 500 hPa geopotential height (the example
data the ``eofs`` package ships; a smooth synthetic field if eofs or scipy is
missing, and the demo says so). They all-reduce (sum) it in every compression
mode, and rank 0 prints per mode: compression ratio, bytes on the wire,
the largest error against the exact fp64 sum next to the promised bound,
and the time against no compression.

    ncclz-demo                                   # 4 ranks, automatic transport (shared memory)
    ncclz-demo --transport socket --throttle-gbps 1   # as if on a 1 Gb/s network
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

from . import run as _run

DATA_NOTE_REAL = (
    "NCEP/NCAR reanalysis 500 hPa geopotential height [m], DJF means of 65 winters "
    "on a 29x49 grid (hgt_djf.nc from the eofs package)"
)
DATA_NOTE_SYNTH = (
    "SYNTHETIC smooth field (eofs/scipy not importable, so no real data): "
    "sum of waves resembling geopotential height [m]"
)


def load_field() -> tuple[np.ndarray, str]:
    """(winters, lat, lon) float64 field and a sentence saying where it came from."""
    try:
        import eofs.examples
        import scipy.io

        path = eofs.examples.example_data_path("hgt_djf.nc")
        with scipy.io.netcdf_file(path, "r", mmap=False) as f:
            z = np.array(f.variables["z"].data, dtype=np.float64)
        z = z.reshape(z.shape[0], z.shape[-2], z.shape[-1])
        if not np.all(np.isfinite(z)) or np.any(np.abs(z) > 1e10):
            raise ValueError("missing values in hgt_djf.nc")
        return z, DATA_NOTE_REAL
    except Exception:  # noqa: BLE001 - any failure: fall back to synthetic data, and say so
        t = np.arange(64)[:, None, None]
        lat = np.linspace(-np.pi / 2, np.pi / 2, 29)[None, :, None]
        lon = np.linspace(0, 2 * np.pi, 49)[None, None, :]
        z = 5400 + 300 * np.cos(lat) + 80 * np.sin(3 * lon + 0.1 * t) * np.cos(2 * lat) + 5 * np.sin(0.7 * t)
        return z, DATA_NOTE_SYNTH


def rank_slice(z: np.ndarray, rank: int, world: int) -> np.ndarray:
    per = z.shape[0] // world
    return np.ascontiguousarray(z[rank * per : (rank + 1) * per]).astype(np.float32)


def worker(repeat: int) -> int:
    import ncclz

    comm = ncclz.init()
    rank, world = comm.rank, comm.world_size
    z, note = load_field()
    mine = rank_slice(z, rank, world)
    inputs = [rank_slice(z, r, world) for r in range(world)]
    exact = np.sum([a.astype(np.float64) for a in inputs], axis=0)
    span = float(max(a.max() for a in inputs) - min(a.min() for a in inputs))
    modes = [
        ("none", None, None),
        ("lossless", ncclz.Lossless(), 0.0),
        ("lossy rel=1e-3", ncclz.Lossy(rel=1e-3), 1e-3 * span),
        ("lossy abs=1 m", ncclz.Lossy(abs=1.0), 1.0),
    ]
    rows = []
    x_none = None
    for name, comp, bound in modes:
        times = []
        x = None
        for i in range(repeat + 1):
            x = mine.copy()
            comm.barrier()
            t0 = time.perf_counter()
            comm.all_reduce(x, compression=comp)
            dt = time.perf_counter() - t0
            if i > 0:  # the first call warms up buffers and connections
                times.append(dt)
        st = comm.last_stats
        # Totals over all ranks, and the slowest rank's time, through the library itself.
        tot = np.array([st.raw_bytes, st.wire_bytes], dtype=np.int64)
        comm.all_reduce(tot)
        t = np.array([statistics.median(times)], dtype=np.float64)
        comm.all_reduce(t, op="max")
        err = float(np.max(np.abs(x.astype(np.float64) - exact)))
        if comp is None:
            x_none = x
        ok = np.array_equal(x, x_none) if bound == 0.0 else (bound is None or err <= bound)
        rows.append(
            (
                name,
                tot[0] / max(tot[1], 1),
                int(tot[1]),
                err,
                bound,
                float(t[0]),
                bool(ok),
                bool(st.exact_fallback),
            )
        )
    if rank == 0:
        kib = mine.nbytes / 1024
        transport = os.environ.get("NCCLZ_TRANSPORT") or "auto (shared memory on one host)"
        throttle = os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS")
        print(
            f"ncclz demo: all_reduce(sum) across {world} ranks, each float32{list(mine.shape)} "
            f"({kib:.1f} KiB), transport {transport}"
            + (f", throttled to {throttle} Gb/s" if throttle else "")
        )
        print(f"data: {note}")
        print(
            f"{'mode':<16}{'ratio':>8}{'wire bytes':>13}{'max error':>12}{'bound':>11}{'time':>11}{'vs none':>9}"
        )
        base = rows[0][5]
        for name, ratio, wire, err, bound, t, good, fallback in rows:
            b = "-" if bound is None else ("= none" if bound == 0 else f"{bound:.3g}")
            ok = "" if good else ("  DIFFERS FROM none" if bound == 0 else "  EXCEEDS BOUND")
            ok += "  (ran exactly: the runtime's exact fallback)" if fallback else ""
            print(
                f"{name:<16}{ratio:>7.2f}x{wire:>13,}{err:>12.3g}{b:>11}{t * 1e3:>9.2f}ms{t / base:>8.2f}x{ok}"
            )
        print(
            'max error: against the exact fp64 sum of the float32 inputs ("none" shows float32 rounding; '
            "lossless must equal none bit for bit); "
            f"time: median of {repeat} calls, slowest rank."
        )
        if not os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS"):
            print(
                "On one host the link is memory-fast, so codec time is not repaid; try "
                "`ncclz-demo --transport socket --throttle-gbps 1` to see a slow network."
            )
    comm.close()
    bad = [r for r in rows if not r[6]]
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="ncclz-demo",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--nproc", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--transport", choices=["auto", "shm", "socket"], default="auto")
    p.add_argument(
        "--throttle-gbps",
        type=float,
        default=None,
        help="emulate a network of this many Gb/s (socket transport)",
    )
    p.add_argument("--repeat", type=int, default=5, help="timed calls per mode (default 5)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.repeat)
    env = dict(os.environ)
    if args.transport != "auto":
        env["NCCLZ_TRANSPORT"] = args.transport
    if args.throttle_gbps:
        env["NCCLZ_TRANSPORT"] = "socket"
        env["NCCLZ_SOCKET_THROTTLE_GBPS"] = f"{args.throttle_gbps:g}"
    cmd = [sys.executable, "-m", "ncclz.demo", "--worker", "--repeat", str(args.repeat)]
    return _run.launch(cmd, args.nproc, timeout=30, grace=2.0, prefix=False, env=env, deadline=120)


if __name__ == "__main__":
    sys.exit(main())
