"""Time to create a communicator (rendezvous + transport setup), N local ranks.

    python bench/setup_time.py --nproc 4 --transport shm --reps 30
    python bench/setup_time.py --nproc 4 --transport socket --reps 30

Each rank runs ``reps`` rounds. A round starts together on every rank (an
all_reduce on the previous round's communicator, then its close), rank 0
creates the next communicator at once and the others wait ``--stagger`` ms
first (so that they find rank 0 listening and do not fall into connect's retry
backoff); the round's setup time is the slowest rank's creation time minus the
stagger. The first round (imports, first connections) is not counted.
Prints the median, quartiles and max over rounds; compare two builds side by
side on one machine (run the script with each build's Python in one session).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def rank_main(args) -> None:
    import ncclz
    import numpy as np

    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    port = int(os.environ["MASTER_PORT"])
    times = []
    one = np.ones(1, dtype=np.float64)
    prev = None
    for _ in range(args.reps + 1):
        if prev is not None:
            prev.all_reduce(one, out=np.empty_like(one))  # all ranks start the round together
            prev.close()
        t0 = time.perf_counter()
        if rank != 0:
            time.sleep(args.stagger / 1e3)
        c = ncclz.Communicator(
            rank=rank, world_size=n, master_port=port, timeout=60, transport=args.transport
        )
        times.append(time.perf_counter() - t0 - (args.stagger / 1e3 if rank != 0 else 0.0))
        prev = c
    out = np.empty_like(one)
    prev.all_reduce(one, out=out)
    assert out[0] == n
    prev.close()
    with open(os.path.join(args.outdir, f"rank{rank}.json"), "w") as f:
        json.dump(times[1:], f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--transport", default="shm", choices=("shm", "socket"), help="transport (default shm)")
    p.add_argument("--reps", type=int, default=30, help="timed rounds (default 30)")
    p.add_argument(
        "--stagger", type=float, default=20.0, help="ms the non-zero ranks wait per round (default 20)"
    )
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--outdir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank:
        rank_main(args)
        return 0
    from ncclz.run import launch

    with tempfile.TemporaryDirectory() as d:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--rank",
            "--outdir",
            d,
            "--transport",
            args.transport,
            "--reps",
            str(args.reps),
            "--stagger",
            str(args.stagger),
        ]
        rc = launch(cmd, args.nproc, timeout=60, deadline=600)
        if rc != 0:
            print(f"ranks failed (exit status {rc})", file=sys.stderr)
            return rc
        per_rank = []
        for r in range(args.nproc):
            with open(os.path.join(d, f"rank{r}.json")) as f:
                per_rank.append(json.load(f))
    rounds = [max(ts[i] for ts in per_rank) * 1e3 for i in range(args.reps)]
    q = statistics.quantiles(rounds, n=4)
    import ncclz

    print(
        f"{args.nproc} ranks, {args.transport}, {args.reps} rounds ({ncclz.__file__}): setup ms "
        f"median {statistics.median(rounds):.2f}  q1 {q[0]:.2f}  q3 {q[2]:.2f}  max {max(rounds):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
