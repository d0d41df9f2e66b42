"""``python -m ncclz.tools.policy``: the compression policy's decision table over link rates.

    python -m ncclz.tools.policy --gbps 0.1,1,10 --size 64M --data smooth

For every link rate, what :class:`ncclz.policy.Policy` would run for an all_reduce of ``--size``
bytes per rank of a benchmark data set (``ncclz.tools.data``) on ``-n`` ranks, with its predictions
for every mode (the codec calibrated on this machine). The policy itself is :mod:`ncclz.policy`;
this module re-exports its names for code written against the older ``ncclz.tools.policy``.
"""

from __future__ import annotations

import argparse

from ..policy import (  # noqa: F401 - re-exported for users of the older module path
    EFFORTS,
    FAST_MARGIN,
    MID_MARGIN,
    Calibration,
    Choice,
    Policy,
    effort_of_margin,
)


def build_parser() -> argparse.ArgumentParser:
    from . import data

    ap = argparse.ArgumentParser(prog="python -m ncclz.tools.policy",
                                 description="Print the compression policy's decision for an all_reduce over link rates.")
    ap.add_argument("-n", "--nranks", type=int, default=4, help="ranks (default: %(default)s)")
    ap.add_argument("--gbps", default="0.1,0.5,1,2,5,10,25",
                    help="link rates in Gbit/s, comma-separated (default: %(default)s)")
    ap.add_argument("--size", default="64M", help="bytes per rank, with K/M/G suffixes (default: %(default)s)")
    ap.add_argument("--data", default="smooth", choices=data.DATASETS, help="data set (default: %(default)s)")
    ap.add_argument("--rel", type=float, default=1e-3, help="requested Lossy(rel=...) bound (default: %(default)g)")
    ap.add_argument("--cores-per-rank", type=float, default=None,
                    help="CPU cores per rank's codec (default: NCCLZ_CORES_PER_RANK, else CPUs / LOCAL_WORLD_SIZE)")
    ap.add_argument("--nchannels", type=int, default=None,
                    help="the communicator's channel count, which caps the cores a call uses (default: no cap)")
    return ap


def main(argv=None) -> int:
    import ncclz

    from . import data
    from .bench import parse_size

    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        rates = [float(v) for v in a.gbps.split(",") if v.strip()]
        S = parse_size(a.size)
    except ValueError as e:
        ap.error(str(e))
    try:
        x = data.rank_input(a.data, 0, max(1, S // 4))
    except data.DataUnavailable as e:
        ap.exit(1, f"{ap.prog}: {e}\n")
    for g in rates:
        p = Policy(a.nranks, link_gbps=g, cores_per_rank=a.cores_per_rank, nchannels=a.nchannels)
        c = p.choose("all_reduce", x, ncclz.Lossy(rel=a.rel))
        print(f"{g:6.2f} Gbit/s  {a.size}  {a.data}: {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
