"""Rank program of tests/python/test_setup_faults.py.

    python _fault_rank.py OUTDIR MODE [SECONDS]

Environment as a launcher sets it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
NCCLZ_TOKEN, NCCLZ_JOB_ID, NCCLZ_TRANSPORT, NCCLZ_TIMEOUT). Prints "ready" once
ncclz is imported (the test may kill or stop it from then on), then by MODE:

- calls: init(), then all_reduce of (rank + BASE) every 50 ms for SECONDS
  (default 0: one call), checking every sum against the exact one;
- init_exit: init(), then leaves at once (os._exit, as a crash would);

FAULT_NOFILE=N lowers this process's RLIMIT_NOFILE (soft and hard) to N first.
Writes OUTDIR/rank<R>.json: {"status": "ok" | "error", "type", "message",
"calls", "wrong": sums that were not exact (must stay 0), "wall"}.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

if "FAULT_NOFILE" in os.environ:  # a lowered descriptor limit, soft and hard (before ncclz is loaded)
    _n = int(os.environ["FAULT_NOFILE"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (_n, _n))

import ncclz
import numpy as np

BASE = float(os.environ.get("FAULT_BASE", "1"))


def main() -> int:
    outdir, mode = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print("ready", flush=True)
    t0 = time.monotonic()
    result = {"status": "ok", "calls": 0, "wrong": 0}
    try:
        comm = ncclz.init()
        if mode == "init_exit":
            os._exit(0)
        want = sum(r + BASE for r in range(n))
        x = np.full(1024, rank + BASE, dtype=np.float64)
        out = np.empty_like(x)
        end = time.monotonic() + seconds
        while True:
            comm.all_reduce(x, out=out)
            result["calls"] += 1
            if not np.all(out == want):
                result["wrong"] += 1
            if time.monotonic() >= end:
                break
            time.sleep(0.05)
        comm.close()
    except ncclz.Error as e:
        result.update(status="error", type=type(e).__name__, message=str(e))
    result["wall"] = time.monotonic() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    return 0 if result["status"] == "ok" and result["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
