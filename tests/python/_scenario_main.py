"""The main() of the scenario rank programs (_fault_worker.py, _persistent_gpu_worker.py).

A rank program is run as ``python PROGRAM OUTDIR SCENARIO``: it makes the communicator, runs its
function ``scenario_<SCENARIO>`` and writes what it returned (with the rank and any fields given)
to OUTDIR/rank<R>.json, also when the scenario raised, so the test sees how far every rank got.
The communicator is closed afterwards; a close that fails (a scenario that killed a peer or
aborted the communicator) is expected there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_scenario(scenarios, call, fields=None):
    """Runs the scenario named on the command line: call(fn, ncclz, comm, outdir) calls
    scenarios[f"scenario_{name}"] with the program's own arguments."""
    outdir, scenario = sys.argv[1:3]
    import ncclz

    comm = ncclz.init()
    res = {"rank": comm.rank, **(fields or {})}
    try:
        res.update(call(scenarios[f"scenario_{scenario}"], ncclz, comm, outdir))
    finally:
        Path(outdir, f"rank{comm.rank}.json").write_text(json.dumps(res))
    try:
        comm.close()
    except ncclz.Error:
        pass
