#!/usr/bin/env python3
"""One rank of the topology benchmark: collectives timed per algorithm and mode, side by side.

    NCCLZ_TOPO_HOSTS=2x2 ncclz-run -n 4 python bench/topo_bench.py --size 16M --data smooth
    sudo python bench/netlab/topology.py            # in the network lab (ranks per namespace)

Every *round* runs every configuration (collective x data set x mode x algorithm) `--iters` times in
turn, so configurations are compared side by side under the same load; `--rounds` rounds. Each
call is timed on every rank from a barrier to its return, and the slowest rank's time counts (an
all_reduce of the times, max); the CPU seconds of all ranks together per call (user + system of
every thread, getrusage) are summed the same way. Rank 0 prints one JSON object per configuration
at the end (and with --json writes them all to a file): the times, their median, the CPU seconds,
the ratio and bytes from comm.last_stats (ratio: a hierarchical call's inter-host links;
local_bytes: its intra-host bytes), the encode / decode / quantize / wait seconds of rank 0, the
largest error over the promised bound (every element against the fp64 result, on the first timed
call; --no-check skips it), and the run's environment (world size, topology, link rate, load).

Options: --size (bytes per rank of float32: the nccl-tests size; all_gather's is its output),
--data (ncclz.tools.data sets), --colls, --modes (none, lossless, rel=R, abs=E; a lossy all_reduce's
mode may name a codec effort, "rel=1e-3/dense", which the call takes as the policy would propose
it; "rel=1e-3/auto" runs with policy="auto" instead of "off": rank 0's policy chooses the mode and
effort, as for a user's call, with a model of its own per configuration, so that configurations
taking turns do not mix their measurements), --algos (ring,
hierarchical), --iters, --rounds, --warmup (untimed calls per configuration before round 1; an
"/auto" configuration takes --auto-warmup more, for its policy to measure what it probes first).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

import ncclz
import numpy as np
from ncclz.policy import Policy
from ncclz.tools.data import rank_input


def cpu_s() -> float:
    """CPU seconds of this process so far (user + system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parse_size(s: str) -> int:
    s = s.strip().upper()
    return int(float(s[:-1]) * (1 << {"K": 10, "M": 20, "G": 30}[s[-1]])) if s[-1] in "KMG" else int(s)


def spec_of(mode: str):
    """The Compression of a mode ("none", "lossless", "rel=R", "abs=E"; a lossy mode may end in
    "/<effort>", a codec effort of ncclz.policy.EFFORTS: see margin_of)."""
    mode = mode.split("/")[0]
    if mode == "none":
        return None
    if mode == "lossless":
        return ncclz.Lossless()
    kind, v = mode.split("=")
    return ncclz.Lossy(**{kind: float(v)})


def is_auto(mode: str) -> bool:
    """Whether a mode is run with policy="auto" ("rel=1e-3/auto")."""
    return mode.endswith("/auto")


def chosen(policy: str) -> str:
    """What rank 0's policy ran a call with, from last_stats.policy ("auto: lossy/fast (...)" ->
    "lossy/fast")."""
    return policy[len("auto: "):].split(" ", 1)[0] if policy.startswith("auto: ") else policy


def margin_of(mode: str) -> float | None:
    """The selector's rANS margin of a mode's codec effort ("rel=1e-3/dense": 0.0), as the policy
    proposes it (PolicyHints.rans_margin); None for none given."""
    if "/" not in mode or is_auto(mode):
        return None
    from ncclz.policy import EFFORTS

    effort = mode.split("/", 1)[1]
    if not effort or effort not in EFFORTS or mode.startswith(("none", "lossless")):
        raise SystemExit(f"topo_bench: unknown codec effort in {mode!r}; one of {sorted(e for e in EFFORTS if e)}")
    return EFFORTS[effort]


class Config:
    """One configuration: inputs, the call, and what it measured."""

    def __init__(self, comm, coll: str, data: str, mode: str, algo: str, nbytes: int):
        self.comm, self.coll, self.data, self.mode, self.algo = comm, coll, data, mode, algo
        W, r = comm.world_size, comm.rank
        n = nbytes // 4
        if coll == "all_gather":
            n //= W
        if coll == "reduce_scatter":
            n -= n % W
        self.n = n
        self.x = rank_input(data, r, n)
        self.buf = self.x.copy()
        self.out = np.empty(n // W if coll == "reduce_scatter" else n * W if coll == "all_gather" else n,
                            np.float32)
        self.spec = spec_of(mode)
        self.margin = margin_of(mode)
        if self.margin is not None:
            if coll != "all_reduce":
                raise SystemExit("topo_bench: a codec effort only for all_reduce")
            # the policy's proposal, as comm.py passes it beside the Compression (the native call)
            self.native_spec = ncclz._core.comm.Compression(f"lossy_{self.spec.kind}", float(self.spec.bound), "auto", 0)
            self.hints = ncclz._core.comm.PolicyHints("", float(self.margin), algo)
        # the model bound before each call (Communicator.reset_policy): an "/auto" configuration's own; the
        # others share one beside any "/auto" configuration (main), which their forced calls teach instead
        self.auto = is_auto(mode)
        self.policy = Policy() if self.auto else None
        self.times, self.stats, self.err = [], [], None
        self.cpu = []  # CPU seconds of all ranks together per call (user + system, every thread)

    def reset(self):
        """The call's input back in its buffer (an all_reduce's, out of place, for safety; a broadcast's,
        in place: the root's data, zeros elsewhere). Outside the timed region: until 2026-11-27 these
        copies (64 MiB per rank, a fresh array of zeros per broadcast) were timed with the call."""
        if self.coll == "all_reduce":
            np.copyto(self.buf, self.x)
        elif self.coll == "broadcast":
            if self.comm.rank == 0:
                np.copyto(self.buf, self.x)
            else:
                self.buf.fill(0)

    def call(self):
        c, kw = self.comm, {"compression": self.spec, "algorithm": self.algo, "policy": "off"}
        if self.policy is not None:
            c.reset_policy(self.policy)
        if self.auto:
            kw["policy"] = "auto"
        if self.coll == "all_reduce":
            if self.margin is not None:
                st = c._native.all_reduce(self.buf, self.out, "sum", self.native_spec, "", self.hints)
                c._record("all_reduce", self.native_spec, st)  # comm.last_stats, as a public call keeps it
                return self.out
            return c.all_reduce(self.buf, out=self.out, **kw)
        if self.coll == "reduce_scatter":
            return c.reduce_scatter(self.x, out=self.out, **kw)
        if self.coll == "all_gather":
            return c.all_gather(self.x, out=self.out.reshape(c.world_size, -1), **kw)
        return c.broadcast(self.buf, root=0, **kw)

    def check(self, y, st) -> float:
        """Largest |error| / E over every element (0 for exact modes: then within the float rounding
        of the plain reduction, or bit-exact for data movement); st: the call's stats. Streams over the
        ranks' inputs."""
        W, r = self.comm.world_size, self.comm.rank
        got = np.asarray(y, np.float64).ravel()
        m = self.n // W
        if self.coll in ("all_reduce", "reduce_scatter"):
            ref = np.zeros(self.n if self.coll == "all_reduce" else m)
            mag = np.zeros_like(ref)
            for k in range(W):
                x = rank_input(self.data, k, self.n).astype(np.float64)
                x = x if self.coll == "all_reduce" else x[r * m:(r + 1) * m]
                ref += x
                mag += np.abs(x)
            err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
            tol = W * 2.0**-23 * float(mag.max()) if mag.size else 0.0
        else:
            err = 0.0
            for k in range(W if self.coll == "all_gather" else 1):
                x = rank_input(self.data, k, self.n).astype(np.float64)
                err = max(err, float(np.max(np.abs(got[k * self.n:(k + 1) * self.n] - x))) if x.size else 0.0)
            tol = 0.0
        if st.error_bound > 0:
            if err > st.error_bound:
                raise AssertionError(f"{self.key()}: error {err:g} > bound {st.error_bound:g}")
            return err / st.error_bound
        if err > tol:
            raise AssertionError(f"{self.key()}: exact mode off by {err:g} > {tol:g}")
        return 0.0

    def key(self) -> str:
        return f"{self.coll}/{self.data}/{self.mode}/{self.algo}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="64M")
    ap.add_argument("--data", default="smooth")
    ap.add_argument("--colls", default="all_reduce")
    ap.add_argument("--modes", default="none,rel=1e-3")
    ap.add_argument("--algos", default="ring,hierarchical")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--auto-warmup", type=int, default=5)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    nbytes = parse_size(a.size)
    with ncclz.init() as comm:
        configs = [Config(comm, c, d, m, g, nbytes) for c in a.colls.split(",") for d in a.data.split(",")
                   for m in a.modes.split(",") for g in a.algos.split(",")]
        if any(cf.auto for cf in configs):
            shared = Policy()
            for cf in configs:
                if not cf.auto:
                    cf.policy = shared
        for cf in configs:
            for _ in range(a.warmup + (a.auto_warmup if cf.auto else 0)):
                cf.reset()
                cf.call()
        t_run = time.time()
        for _ in range(a.rounds):
            for cf in configs:
                for _ in range(a.iters):
                    cf.reset()
                    comm.barrier()
                    c0 = cpu_s()
                    t0 = time.perf_counter()
                    y = cf.call()
                    dt = np.array([time.perf_counter() - t0])
                    c = np.array([cpu_s() - c0])
                    st = comm.last_stats
                    comm.all_reduce(dt, op="max", policy="off", algorithm="ring")
                    comm.all_reduce(c, op="sum", policy="off", algorithm="ring")
                    # Checked only now, when every rank has finished the call (the max above waits
                    # for them all): a rank checking while another still runs its call takes that
                    # rank's CPU on a machine with fewer cores than ranks, and the slowest rank's
                    # time grew by 7-63 ms on every configuration's first call, the checked one
                    # (bench/results/scale.md, "First calls").
                    if cf.err is None and not a.no_check:
                        cf.err = cf.check(y, st)
                    cf.times.append(float(dt[0]))
                    cf.cpu.append(float(c[0]))
                    cf.stats.append(st)
        if comm.rank == 0:
            t = comm.topology
            env = {"world_size": comm.world_size, "hosts": t.hosts, "local_size": t.local_size,
                   "intra_link": t.intra_link, "inter_link": t.inter_link,
                   "link_gbps": float(os.environ.get("NETLAB_GBPS") or os.environ.get("NCCLZ_LINK_GBPS") or 0),
                   "nbytes": nbytes, "label": a.label, "started": t_run, "cpus": os.cpu_count(),
                   "reset_timed": False,  # Config.reset runs before the barrier (rows without the key: timed)
                   # the hierarchical all_reduce of two hosts in rounds (NCCLZ_HIER_ROUNDS; rank 0's here,
                   # any rank's 0 counts for all: the lab gives every rank the same environment)
                   "hier_rounds": int(comm.config.hier_rounds)}
            rows = []
            for cf in configs:
                s = cf.stats
                med = lambda f, s=s: float(statistics.median(f(x) for x in s))
                rows.append({**env, "coll": cf.coll, "data": cf.data, "mode": cf.mode, "algorithm": cf.algo,
                             "ran": s[-1].algorithm, "compression": s[-1].compression,
                             "times": cf.times, "median_s": float(statistics.median(cf.times)),
                             "cpu_s": float(statistics.median(cf.cpu)), "load": os.getloadavg()[0],
                             "min_s": min(cf.times), "ratio": med(lambda x: x.ratio),
                             "wire_bytes": med(lambda x: x.wire_bytes), "raw_bytes": med(lambda x: x.raw_bytes),
                             "local_bytes": med(lambda x: x.local_bytes), "encode_s": med(lambda x: x.encode_s),
                             "decode_s": med(lambda x: x.decode_s), "quantize_s": med(lambda x: x.quantize_s),
                             "wait_s": med(lambda x: x.wait_s), "fallback": bool(s[-1].exact_fallback),
                             "err_over_bound": cf.err,
                             # an "/auto" configuration's timed calls: what rank 0's policy ran each with
                             **({"chosen": [chosen(x.policy) for x in s]} if cf.auto else {})})
            for r in rows:
                print(json.dumps(r), flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
