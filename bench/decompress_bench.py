"""ncclz.codec.decompress(blob) into a new array against decompress(blob, out=reused), side by side.

    python bench/decompress_bench.py [--reps 21] [--md] [--write bench/results/codec.md]

For each data set: compress once, then alternate the two calls (fresh, out=, out=, fresh, ...) and
report the median over the repetitions of the wall time and of the process's CPU time (user + system:
what the call costs, whatever else runs on the machine) as GB/s of decoded output, their ratio, and
the minor page faults per call. For scale: the first fresh call of the run (the pool of freed outputs
is empty, every page faults), a fresh call while the previous outputs are all kept alive (the same),
and NumPy filling a fresh array (np.empty(...).fill). Data: bench/data.py gaussian (32 MiB float32,
rel 1e-3: the case issue 20 measured), smooth3d (16 MiB, rel 1e-3) and gaussian lossless.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data
import ncclz
from ncclz import codec


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(f):
    f0, c0, t0 = faults(), time.process_time(), time.perf_counter()
    f()
    return time.perf_counter() - t0, time.process_time() - c0, faults() - f0


def run(name, x, spec, reps):
    blob = codec.compress(x, spec)
    out = np.empty_like(x)
    out.fill(0)
    first = timed(lambda: codec.decompress(blob))
    # Keep every output alive: the pool has nothing to give, every page faults.
    kept = [codec.decompress(blob) for _ in range(3)]
    keep_alive2 = timed(lambda: kept.append(codec.decompress(blob)))
    kept.clear()
    res = {"fresh": [], "out=": [], "np.empty+fill": []}
    calls = {
        "fresh": lambda: codec.decompress(blob),
        "out=": lambda: codec.decompress(blob, out=out),
        "np.empty+fill": lambda: np.empty_like(x).fill(1.0),
    }
    for k in range(reps):
        order = ["fresh", "out=", "np.empty+fill"] if k % 2 == 0 else ["np.empty+fill", "out=", "fresh"]
        for key in order:
            res[key].append(timed(calls[key]))
    y = codec.decompress(blob)
    assert np.array_equal(y.view(np.uint8), codec.decompress(blob, out=np.empty_like(x)).view(np.uint8))
    gbs = lambda s: x.nbytes / s / 1e9
    med = {k: tuple(float(np.median([r[i] for r in v])) for i in range(3)) for k, v in res.items()}
    return {
        "name": name,
        "bytes": x.nbytes,
        "ratio": x.nbytes / blob.size,
        "rows": [
            ("fresh (decompress(blob))", gbs(med["fresh"][0]), gbs(med["fresh"][1]), med["fresh"][2]),
            ("out= (reused array)", gbs(med["out="][0]), gbs(med["out="][1]), med["out="][2]),
            ("fresh / out= (time)", med["fresh"][0] / med["out="][0], med["fresh"][1] / med["out="][1], None),
            ("first fresh call of the run", gbs(first[0]), gbs(first[1]), first[2]),
            ("fresh, earlier outputs alive", gbs(keep_alive2[0]), gbs(keep_alive2[1]), keep_alive2[2]),
            (
                "np.empty(...).fill(1)",
                gbs(med["np.empty+fill"][0]),
                gbs(med["np.empty+fill"][1]),
                med["np.empty+fill"][2],
            ),
        ],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--md", action="store_true", help="print markdown tables")
    p.add_argument("--write", help="put the markdown section into this file (between its markers)")
    args = p.parse_args()
    md = args.md or bool(args.write)
    lines = []

    def out(text=""):
        print(text, flush=True)
        lines.append(text)

    cases = [
        ("gaussian 32 MiB, rel 1e-3", data.gaussian(), ncclz.Lossy(rel=1e-3)),
        ("smooth3d 16 MiB, rel 1e-3", data.smooth3d(), ncclz.Lossy(rel=1e-3)),
        ("gaussian 32 MiB, lossless", data.gaussian(), ncclz.Lossless()),
    ]
    out(
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); "
        f"{time.strftime('%Y-%m-%d %H:%M')}; ncclz {getattr(ncclz, '__version__', '?')}, numpy {np.__version__}; "
        f"1-min load {os.getloadavg()[0]:.1f} at the start"
    )
    for name, x, spec in cases:
        r = run(name, x, spec, args.reps)
        out(f"\n{r['name']} (ratio {r['ratio']:.2f})")
        if md:
            out("\n| call | wall GB/s | CPU GB/s | page faults / call |\n|---|---:|---:|---:|")
        for label, wall, cpu, flt in r["rows"]:
            if label.startswith("fresh / out="):
                out(
                    f"| {label} | {wall:.3f} | {cpu:.3f} | |"
                    if md
                    else f"  {label:<32} {wall:8.3f} {cpu:8.3f}"
                )
            else:
                out(
                    f"| {label} | {wall:.2f} | {cpu:.2f} | {flt:.0f} |"
                    if md
                    else f"  {label:<32} {wall:8.2f} {cpu:8.2f} GB/s  {flt:6.0f} faults"
                )
    out(f"\n1-min load {os.getloadavg()[0]:.1f} at the end")
    if args.write:
        write_section(args.write, "\n".join(lines), args.reps)


SECTION = """## decompress(blob) into a new array against decompress(blob, out=)

Command: `python bench/decompress_bench.py --write bench/results/codec.md` (median of {reps}
alternating calls each). Wall time is what a user sees; on a loaded machine it includes time the
process waits for a core, so the CPU time (user + system of this process) is the fairer comparison.

Why a new array was slow: each call mapped fresh memory (glibc maps allocations of 32 MiB and
more afresh every time and unmaps them on free), and the first write to each page faults and
the kernel zeroes it, between the decoder's passes: 528 minor faults per 32 MiB call (16 huge
pages plus the unaligned ends), about half of the call (before the fix, on this VM: 18-23 ms
of CPU time per call against 10 ms into `out=`). `out=` touches no new page. The fix
(python/csrc/register_codec.cpp, `OutputPool`): the memory of the last two decoded outputs of
1 MiB or more that Python freed (at most 1 GiB, marked MADV_FREE so the kernel can reclaim it)
serves the next decode of a similar size; every call still returns a new array that shares
memory with no live one. So a loop of `decompress(blob)` pays no faults: the rows "fresh / out="
below. A call with nothing to reuse still pays them ("first fresh call", "earlier outputs
alive"). The blob's CRC-32C (version 2) is checked slice by slice right before each slice is
decoded, while its bytes are in cache anyway: +2% decode CPU time on the Gaussian rel 1e-3
blob (a separate pass first cost +10%), +13% on the lossless one (whose blob is 27 MiB).

{body}
"""


def write_section(path, body, reps):
    text = SECTION.format(reps=reps, body=body.strip())
    block = f"<!-- decompress_bench:begin -->\n{text}<!-- decompress_bench:end -->"
    old = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    a, b = old.find("<!-- decompress_bench:begin -->"), old.find("<!-- decompress_bench:end -->")
    if 0 <= a < b:
        new = old[:a] + block + old[b + len("<!-- decompress_bench:end -->") :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(new)


if __name__ == "__main__":
    main()
