"""ncclz-codec-demo: compress a few typical arrays in every mode and print what came out.

For each array and mode it prints the compressed size, the ratio, the largest error measured
over the finite elements, the bound promised, and whether the bound held (lossless: whether the
round trip was bit-exact), plus the codecs the selector chose.
"""

from __future__ import annotations

import argparse
import sys
import time

import ml_dtypes
import numpy as np

import ncclz
from ncclz import codec


def _arrays(n: int, rng: np.random.Generator):
    side = max(8, round(n ** (1 / 3)))
    z, y, x = np.meshgrid(np.arange(side), np.arange(side), np.arange(side), indexing="ij")
    field = np.sin(x * 0.08) * np.cos(y * 0.05) + 0.02 * z
    grads = rng.normal(0, 1e-2, n)
    grads[rng.random(n) < 0.3] = 0.0
    return [
        ("gaussian f32", rng.normal(0, 1, n).astype(np.float32)),
        ("smooth 3-D f32", field.astype(np.float32)),
        ("sparse grads bf16", grads.astype(ml_dtypes.bfloat16)),
        ("activations f16", np.maximum(rng.normal(0, 1, n), 0).astype(np.float16)),
        ("smooth f64", np.cumsum(rng.normal(0, 1e-3, n))),
        ("counts int32", rng.poisson(20, n).astype(np.int32)),
    ]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ncclz-codec-demo", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--elements", type=int, default=1 << 20, help="elements per array (default 2^20)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)

    print(
        f"{'array':<18} {'dtype':<9} {'mode':<16} {'bytes':>10} {'ratio':>7} {'max err':>10} "
        f"{'bound':>10} {'ok':>3} {'MB/s':>7}  codecs"
    )
    failures = 0
    for name, x in _arrays(args.elements, rng):
        is_float = x.dtype.kind == "f" or x.dtype == np.dtype(ml_dtypes.bfloat16)
        specs = [ncclz.Lossless()]
        if is_float:
            specs += [ncclz.Lossy(rel=1e-2), ncclz.Lossy(rel=1e-4), ncclz.Lossy(abs=1e-3)]
        for spec in specs:
            t0 = time.perf_counter()
            blob = codec.compress(x, spec)
            dt = time.perf_counter() - t0
            y = codec.decompress(blob)
            info = codec.inspect(blob)
            if isinstance(spec, ncclz.Lossless):
                ok = bool(np.array_equal(_bits(x), _bits(y)))
                err, bound = 0.0, 0.0
            else:
                xf, yf = x.astype(np.float64), y.astype(np.float64)
                fin = np.isfinite(xf)
                err = float(np.abs(xf[fin] - yf[fin]).max()) if fin.any() else 0.0
                # the promise: E itself for abs, r * (max - min) of the finite inputs for rel
                # (a constant array is promised exactness; the blob's own bound covers it)
                if spec.abs is not None:
                    bound = float(spec.abs)
                elif fin.any() and xf[fin].max() > xf[fin].min():
                    bound = float(spec.rel) * float(xf[fin].max() - xf[fin].min())
                else:
                    bound = info["error_bound"]
                ok = err <= bound and bool(np.array_equal(_bits(x)[~fin], _bits(y)[~fin]))
            failures += not ok
            used = ", ".join(f"{k}:{v['slices']}" for k, v in info["codecs"].items())
            print(
                f"{name:<18} {info['dtype']:<9} {spec!r:<16} {blob.size:>10} {info['ratio']:>7.2f} "
                f"{err:>10.3g} {bound:>10.3g} {'yes' if ok else 'NO':>3} {x.nbytes / dt / 1e6:>7.0f}  {used}"
            )
    if failures:
        print(f"{failures} round trip(s) broke their promise", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
