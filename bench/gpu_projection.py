"""Projection of compressed all_reduce speed-ups on GPU clusters from measured device-codec speed.

Reads the device codec benchmark of a GPU run (bench/gpu_codec_bench.cu's JSON: quantize+encode
and decode+dequantize GB/s and ratio per data set and predictor) and projects the speed-up of a
lossy all_reduce over an uncompressed one for clusters of 8 to 1024 GPUs on 25, 100 and 400
Gbit/s links per GPU, with the model below. It measures nothing itself.

Model (a ring all_reduce of S bytes per GPU over N GPUs, the schedule ncclz runs):
- uncompressed: 2(N-1) steps, each moving S/N bytes: T0 = 2(N-1)/N * S / B + 2(N-1) * a.
- compressed, coding inside the loops and overlapped with the transfer (the design; today's
  GPU path stages through the host and does not reach this): the wire carries S/r per
  direction and every byte is encoded and decoded once per step it crosses, so each step
  takes the slower of its transfer and its coding, plus one slice's pipeline fill:
  T = 2(N-1)/N * S * max(1/(r B), 1/E + 1/D) + 2(N-1) * a + fill,
  E, D the codec's encode and decode speeds of input bytes, fill = slice / min(E, D).
  Reduce-scatter steps decode, add and re-encode; all-gather steps forward the slice bytes
  (no coding) in ncclz's schedule, so the max() above over-counts the coding by about half:
  the projection is conservative.
- a = per-step latency (default 10 us: an RDMA hop plus a kernel's turn around); B = link
  rate per GPU in bytes/s; r = measured ratio; one GPU per node link (no NVLink tier).
Assumptions not modelled: congestion, stragglers, hierarchical algorithms (a two-level ring
cuts the 2(N-1) latency terms to about 2(N/8 - 1) + 14 for 8 GPUs per node), and the ratio's
dependence on the data and bound (the measured one for rel 1e-3 is used).

Usage:
  python bench/gpu_projection.py bench/results/gpu_raw/2026-11-26_h200_run1/bench.json \
      --md bench/results/gpu_projection.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GBIT = 1e9 / 8  # bytes/s per Gbit/s


def ring_times(S: float, N: int, B: float, r: float, E: float, D: float, a: float, slice_bytes: float):
    """(uncompressed, compressed) seconds for one all_reduce, the model of the module doc."""
    steps = 2 * (N - 1)
    t0 = steps / N * S / B + steps * a
    per_byte = max(1.0 / (r * B), 1.0 / E + 1.0 / D)
    t1 = steps / N * S * per_byte + steps * a + slice_bytes / min(E, D)
    return t0, t1


def project(bench: dict, sizes, gpus, rates, a: float) -> list:
    rows = []
    for row in bench["rows"]:
        if not row.get("check_ok", True):
            continue
        E, D, r = row["encode_gbs"] * 1e9, row["decode_gbs"] * 1e9, row["ratio"]
        slice_bytes = 4.0 * bench.get("slice_len", 262144)
        for S in sizes:
            for N in gpus:
                for g in rates:
                    t0, t1 = ring_times(S, N, g * GBIT, r, E, D, a, slice_bytes)
                    rows.append(
                        {
                            "data": row["data"],
                            "predictor": row["predictor"],
                            "ratio": r,
                            "encode_gbs": row["encode_gbs"],
                            "decode_gbs": row["decode_gbs"],
                            "MiB": S / 2**20,
                            "gpus": N,
                            "gbps": g,
                            "t_none_ms": t0 * 1e3,
                            "t_lossy_ms": t1 * 1e3,
                            "speedup": t0 / t1,
                            "codec_bound": 1.0 / E + 1.0 / D > 1.0 / (r * g * GBIT),
                        }
                    )
    return rows


def best_per_data(rows: list) -> list:
    """Per data set, size, GPUs and rate: the predictor with the highest projected speed-up."""
    best = {}
    for x in rows:
        k = (x["data"], x["MiB"], x["gpus"], x["gbps"])
        if k not in best or x["speedup"] > best[k]["speedup"]:
            best[k] = x
    return [best[k] for k in sorted(best)]


def markdown(bench: dict, rows: list, a: float, source: str, targets: dict | None) -> str:
    out = [
        "# Projected all_reduce speed-ups on GPU clusters",
        "",
        (
            f"From the device codec measured on {bench.get('device', '?')} ({source}); model and assumptions in "
            "`bench/gpu_projection.py`'s doc (ring all_reduce, coding overlapped with the transfer inside the loops, "
            f"per-step latency {a * 1e6:g} us, one link per GPU). Projections, not measurements."
        ),
        "",
    ]
    for label, speeds in [("measured codec", None)] + ([("issue 21 targets", targets)] if targets else []):
        out += [
            f"## With the {label}"
            + (f" (encode {speeds['E']:g} GB/s, decode {speeds['D']:g} GB/s)" if speeds else ""),
            "",
        ]
        out += [
            "| data | predictor | ratio | enc/dec GB/s | MiB | GPUs | Gbit/s | none ms | lossy ms | speed-up | bound by |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for x in rows[label]:
            out.append(
                f"| {x['data']} | {x['predictor']} | {x['ratio']:.2f} | {x['encode_gbs']:.0f}/{x['decode_gbs']:.0f} | "
                f"{x['MiB']:g} | {x['gpus']} | {x['gbps']:g} | {x['t_none_ms']:.2f} | {x['t_lossy_ms']:.2f} | "
                f"{x['speedup']:.2f}x | {'codec' if x['codec_bound'] else 'link'} |"
            )
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", help="gpu_codec_bench --json output of a GPU run")
    ap.add_argument(
        "--sizes-mib", default="256", help="message sizes per GPU, MiB, comma-separated (default 256)"
    )
    ap.add_argument("--gpus", default="8,64,1024", help="cluster sizes (default 8,64,1024)")
    ap.add_argument("--gbps", default="25,100,400", help="link rates per GPU, Gbit/s (default 25,100,400)")
    ap.add_argument("--latency-us", type=float, default=10.0, help="per-step latency a (default 10 us)")
    ap.add_argument(
        "--target-encode-gbs",
        type=float,
        default=1200.0,
        help="also project at these codec speeds (issue 21's targets; 0 to skip)",
    )
    ap.add_argument("--target-decode-gbs", type=float, default=1600.0)
    ap.add_argument("--md", default=None, help="write the markdown here (default: stdout)")
    args = ap.parse_args(argv)
    bench = json.loads(Path(args.bench_json).read_text())
    sizes = [float(s) * 2**20 for s in args.sizes_mib.split(",")]
    gpus = [int(n) for n in args.gpus.split(",")]
    rates = [float(g) for g in args.gbps.split(",")]
    a = args.latency_us * 1e-6
    rows = {"measured codec": best_per_data(project(bench, sizes, gpus, rates, a))}
    targets = None
    if args.target_encode_gbs > 0:
        targets = {"E": args.target_encode_gbs, "D": args.target_decode_gbs}
        fast = dict(
            bench, rows=[dict(r, encode_gbs=targets["E"], decode_gbs=targets["D"]) for r in bench["rows"]]
        )
        rows["issue 21 targets"] = best_per_data(project(fast, sizes, gpus, rates, a))
    text = markdown(bench, rows, a, args.bench_json, targets)
    if args.md:
        Path(args.md).write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
