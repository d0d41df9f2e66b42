"""The lossy calls' exact path for 16-bit floats (docs/ALGORITHMS.md, "The exact path").

A bound that quantization cannot meet in bfloat16/float16 (their own rounding is 2^-9 / 2^-12
of a value) runs the sum exactly, in the narrowest accumulation that keeps the bound: the element
type itself when its N-1 roundings keep it (the uncompressed call's bytes), else float32 (2x the
raw bytes), else float64 (4x). Where none keeps it (a bound below the type's own rounding of the
result), the narrowest whose bound is as good as float64's: the type itself on 2 ranks (one
rounding of the exact sum, the uncompressed call's bits), float32 on more. Bounds at the type's
resolution compress. Ranks are threads of this process (in-process transport).
"""

from __future__ import annotations

import threading

import ml_dtypes
import ncclz
import numpy as np
import pytest

N_ELEMS = 1 << 16


def _inputs(world, dtype):
    t = np.linspace(0, 20, N_ELEMS)
    return [(10 * np.sin(t) + k).astype(dtype) for k in range(world)]


def _run(world, dtype, spec, op="sum"):
    inputs = _inputs(world, dtype)
    out, stats, errors = [None] * world, [None] * world, []

    def one(r):
        try:
            with ncclz.Communicator(rank=r, world_size=world, transport="inproc") as c:
                out[r] = c.all_reduce(inputs[r].copy(), op=op, compression=spec, policy="off")
                stats[r] = c.last_stats
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((r, repr(e)))

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    ref = np.sum([a.astype(np.float64) for a in inputs], axis=0)
    if op == "avg":
        ref = ref / world
    return inputs, ref, out, stats


# (world, dtype, rel, bytes on the wire per raw byte for sum and avg): which accumulation the exact
# path takes. Since 16-bit floats quantize with the check in double, a bound the quantizer cannot
# meet is below T's own rounding of the result, which no accumulation can meet either: the
# narrowest one as good as float64's.
CASES = [
    (2, ml_dtypes.bfloat16, 1e-3, 1.0),  # one rounding of the exact sum (avg: halved exactly)
    (3, ml_dtypes.bfloat16, 1e-3, 2.0),  # float32's 2 roundings add 2 * 2^-16 of bf16's one
    (4, ml_dtypes.bfloat16, 1e-3, 2.0),
    (2, np.float16, 1e-4, 1.0),
    (4, np.float16, 1e-4, 2.0),  # float32's 3 roundings add 3 * 2^-13 of f16's one
]


@pytest.mark.parametrize("op", ["sum", "avg"])
@pytest.mark.parametrize("world,dtype,rel,wire_per_raw", CASES)
def test_exact_path_below_the_types_rounding_takes_the_narrowest_accumulation_as_good_as_float64(
        world, dtype, rel, wire_per_raw, op):
    inputs, ref, out, stats = _run(world, dtype, ncclz.Lossy(rel=rel), op)
    E = rel * (
        np.max([a.astype(np.float64).max() for a in inputs])
        - np.min([a.astype(np.float64).min() for a in inputs])
    )
    u = 2.0**-8 if dtype is ml_dtypes.bfloat16 else 2.0**-11
    R = world * np.max([np.abs(a.astype(np.float64)).max() for a in inputs])  # the largest possible |sum|
    if op == "avg":
        R /= world
    for r in range(world):
        st = stats[r]
        assert st.exact_fallback, f"rank {r}: expected the exact path, got {st}"
        assert st.requested_bound == pytest.approx(E, rel=1e-12), st
        assert st.wire_bytes / st.raw_bytes == pytest.approx(wire_per_raw, rel=0.02), st
        assert out[r].tobytes() == out[0].tobytes(), f"rank {r} differs from rank 0"
        err = np.abs(out[r].astype(np.float64) - ref)
        assert np.all(err <= st.error_bound), f"rank {r}: max error {err.max()} > reported {st.error_bound}"
        # about one rounding of the largest result, and above E
        assert E < st.error_bound <= R * u * (1 + 2.0**-9), st
    if world == 2:  # the uncompressed call's bits
        _, _, none, _ = _run(world, dtype, None, op)
        for r in range(world):
            assert out[r].tobytes() == none[r].tobytes(), f"rank {r}: differs from compression=None"


# Bounds at T's resolution compress: bf16 at rel 1e-2 on 2 and 4 ranks, f16 at 3e-3 on 4 (they ran
# exactly while the quantizer's check rounded to T).
@pytest.mark.parametrize("world,dtype,rel", [(2, ml_dtypes.bfloat16, 1e-2), (4, ml_dtypes.bfloat16, 1e-2),
                                             (4, np.float16, 3e-3)])
def test_bounds_at_the_types_resolution_compress(world, dtype, rel):
    inputs, ref, out, stats = _run(world, dtype, ncclz.Lossy(rel=rel))
    E = rel * (
        np.max([a.astype(np.float64).max() for a in inputs])
        - np.min([a.astype(np.float64).min() for a in inputs])
    )
    for r in range(world):
        st = stats[r]
        assert not st.exact_fallback, f"rank {r}: ran exactly: {st}"
        assert st.ratio > 1.5, st
        assert out[r].tobytes() == out[0].tobytes(), f"rank {r} differs from rank 0"
        err = np.abs(out[r].astype(np.float64) - ref)
        assert np.all(err <= E), f"rank {r}: max error {err.max()} > E {E}"
