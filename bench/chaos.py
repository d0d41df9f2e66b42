"""Chaos run: many short jobs, each with a random fault, counting what must never happen.

    python bench/chaos.py --episodes 60 --seed 1 [--out bench/results/reliability.json]

Each episode starts a job of 2-4 rank processes (shared memory or sockets, sockets sometimes
throttled to a slow link) that makes 6-12 random calls (all_reduce, all_gather, broadcast,
reduce_scatter, send/recv ring shifts; none, lossless or lossy) on inputs every rank can
recompute, and checks every result it gets: bit-exact for none and lossless (small integers, exact
sums in any order), within ``last_stats.error_bound`` of the float64 reference for lossy. Then one
random fault (or none):

- kill: SIGKILL one rank at a random moment;
- stop: SIGSTOP one rank (the others must time out, NCCLZ_TIMEOUT = 3 s), then SIGKILL it;
- sigint: SIGINT one rank (KeyboardInterrupt in its call; the others get AbortedError);
- abort: one rank calls comm.abort() before a random call;
- corrupt: flip one bit of one slot in flight (NCCLZ_TEST_CORRUPT; checksums on);
- threads: one rank makes one call from a second thread while its main thread is in a call;
- slow: sockets throttled to 0.02 Gbit/s with NCCLZ_TIMEOUT = 1 s (2 s with more than 4 ranks;
  calls longer than the timeout must still succeed: ``slow_link_errors`` counts the errors of these
  episodes and of the lab's slowlink ones, which must be 0).

With ``--topo`` every episode's ranks pretend to be several hosts (NCCLZ_TOPO_HOSTS: 2x2, 2x3
or 3x2 on this machine, shared memory or sockets between all of them), and most calls ask for the
hierarchical algorithm (the rest for the ring), in rounds or, in a quarter of the episodes, in
phases (NCCLZ_HIER_ROUNDS=0): the same faults, now landing inside the intra-host and inter-host
parts of the hierarchical schedules; calls of up to 1 Mi elements, so that those run several rounds.

With ``--lab`` (root) the ranks run on the network lab's emulated hosts (bench/netlab/netlab.py:
network namespaces, 0.5 Gbit/s token-bucket NICs, sockets between them), and three network faults
join the list:

- linkdown: the victim host's NIC goes down for 0.5-3 s, then up again (NCCLZ_TIMEOUT = 10 s:
  every call must succeed, TCP retransmits);
- partition: the victim host's NIC goes down for good (NCCLZ_TIMEOUT = 3 s: every rank must end
  with an error, none hangs);
- slowlink: the victim host's NIC drops to 0.01 Gbit/s for 3-6 s (NCCLZ_TIMEOUT = 2 s, calls of
  2 MiB per rank: calls longer than the timeout must succeed). The timeout must stay above the
  time one slot (1 MiB) takes over the slowest link, 0.84 s here: a rank whose peer itself waits
  on the slow link sees no bytes for about that long (docs/TRANSPORTS.md, "Waiting").

Counted per episode: calls made and their outcomes; **silent wrong results** (a call returned a
result outside its guarantee: must be 0); **hangs** (a surviving rank still running 3 x timeout + 20 s
after the fault: must be 0); **unclear endings** (a surviving rank that neither finished every call
nor raised an ncclz error / KeyboardInterrupt); **leaks** (ncclz segments left in /dev/shm, or rank
processes left running, after the episode: must be 0). Loss, reordering and corruption inside
the network (netem, iptables) are not available on this machine; corruption is injected by the
transport's own test hook instead.

The rank program is this file run with ``--rank OUTDIR PLAN`` (RANK, WORLD_SIZE, MASTER_* set).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

FAULTS = ["none", "kill", "stop", "sigint", "abort", "corrupt", "threads", "slow"]
LAB_FAULTS = ["none", "kill", "stop", "sigint", "abort", "corrupt", "threads", "linkdown", "partition", "slowlink"]
OPS = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "shift"]
MODES = ["none", "lossless", "lossy"]


# ---- rank program ------------------------------------------------------------------------------


def rank_input(seed, rank, n, mode):
    rng = np.random.default_rng([seed, rank])
    if mode == "lossy":
        t = np.linspace(0, 6 * np.pi, n)
        return (10 * np.sin(t + rank) + rng.normal(0, 0.1, n)).astype(np.float32)
    return rng.integers(-1000, 1000, n).astype(np.float32)


def one_call(ncclz, comm, call, entered=lambda: None):
    """Runs one planned call; returns (ok, max_err, bound). entered() runs just before the collective
    (after the inputs and the reference are made)."""
    op, mode, n, seed = call["op"], call["mode"], call["n"], call["seed"]
    r, w = comm.rank, comm.world_size
    comp = {"none": None, "lossless": ncclz.Lossless(), "lossy": ncclz.Lossy(rel=1e-3)}[mode]
    kw = {"compression": comp, "policy": "off", "algorithm": call.get("algo")}
    ins = [rank_input(seed, k, n * (w if op == "reduce_scatter" else 1), mode).astype(np.float64) for k in range(w)]
    x = rank_input(seed, r, n * (w if op == "reduce_scatter" else 1), mode)
    entered()
    if op == "all_reduce":
        comm.all_reduce(x, **kw)
        got, want = x, sum(ins)
    elif op == "reduce_scatter":
        got = comm.reduce_scatter(x, **kw)
        want = sum(ins).reshape(w, n)[r]
    elif op == "all_gather":
        got = comm.all_gather(x, **kw)
        want = np.stack(ins).reshape(np.shape(got))
    elif op == "broadcast":
        got = comm.broadcast(x, root=seed % w, **kw)
        want = ins[seed % w]
    else:  # ring shift by send/recv
        buf = np.empty_like(x)
        nxt, prv = (r + 1) % w, (r - 1) % w
        if r % 2 == 0:
            comm.send(x, nxt, compression=comp)
            comm.recv(buf, prv, compression=comp)
            recv_bound = comm.last_stats.error_bound
        else:
            comm.recv(buf, prv, compression=comp)
            recv_bound = comm.last_stats.error_bound  # the sender's E, before the send's stats replace it
            comm.send(x, nxt, compression=comp)
        got, want = buf, ins[prv]
        err = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if n else 0.0
        bound = recv_bound if mode == "lossy" else 0.0
        return err <= bound, err, bound
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if n else 0.0
    bound = comm.last_stats.error_bound if mode == "lossy" else 0.0
    return err <= bound, err, bound


def rank_main(outdir, plan_json):
    plan = json.loads(plan_json)
    import ncclz

    with open(Path(outdir, f"rank{os.environ['RANK']}.jsonl"), "a", buffering=1) as log:
        rank_calls(ncclz, plan, log)


def rank_calls(ncclz, plan, log):
    def note(**kw):
        log.write(json.dumps(dict(kw, t=time.monotonic())) + "\n")

    try:
        comm = ncclz.init()
    except ncclz.Error as e:
        note(event="init", kind=type(e).__name__, message=str(e)[:300])
        return
    me = comm.rank
    note(event="ready", pid=os.getpid())
    try:
        for i, call in enumerate(plan["calls"]):
            if plan["fault"] == "abort" and me == plan["victim"] and i == plan["at_call"]:
                note(event="abort")
                comm.abort("chaos: rank aborts")
            if plan["fault"] == "threads" and me == plan["victim"] and i == plan["at_call"]:
                # a second thread calls while this one is in the call below
                def other():
                    time.sleep(0.05)
                    try:
                        comm.barrier()
                        note(event="thread_call", kind="returned")
                    except ncclz.Error as e:
                        note(event="thread_call", kind=type(e).__name__, message=str(e)[:300])

                threading.Thread(target=other, daemon=True).start()
                call = dict(call, n=max(call["n"], 1 << 18))  # long enough to overlap
            time.sleep(call["pause"])  # spread the calls out, so faults land inside calls too
            note(event="call", i=i, op=call["op"], mode=call["mode"], n=call["n"])
            try:
                ok, err, bound = one_call(ncclz, comm, call, lambda i=i: note(event="enter", i=i))
            except KeyboardInterrupt:
                note(event="end", i=i, kind="KeyboardInterrupt")
                return
            except ncclz.Error as e:
                note(event="end", i=i, kind=type(e).__name__, message=str(e)[:300])
                return
            note(event="end", i=i, kind="returned", ok=bool(ok), err=err, bound=bound)
        note(event="done")
    finally:
        comm.close()


# ---- harness -----------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shm_segments():
    try:
        return {f for f in os.listdir("/dev/shm") if f.startswith("ncclz-")}
    except OSError:
        return set()


def read_events(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut by a kill
    return out


def lab_fault(lab, fault, victim, rng, events):
    """Runs a network fault on the victim's host (a thread): link down / up, rate down / up."""
    from netlab import _run, tbf_args

    ns, dev = lab.host(victim), "eth0"
    time.sleep(rng.uniform(0.0, 0.4))
    events.append(("fault", time.monotonic()))
    if fault in ("linkdown", "partition"):
        _run(["ip", "-n", ns, "link", "set", dev, "down"])
        if fault == "partition":
            return
        time.sleep(rng.uniform(0.5, 3.0))
        _run(["ip", "-n", ns, "link", "set", dev, "up"])
    else:  # slowlink
        rate, burst, limit = tbf_args(0.01)
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
              "burst", burst, "limit", limit])
        time.sleep(rng.uniform(3.0, 6.0))
        lab.set_rate(lab.gbps)
    events.append(("healed", time.monotonic()))


TOPO_LAYOUTS = [(2, 2), (2, 3), (3, 2)]  # --topo: hosts x ranks per host


def episode(k, rng, workdir, python, lab=None, topo=False, faults=None):
    fault = rng.choice(faults or (LAB_FAULTS if lab else FAULTS))
    layout = rng.choice(TOPO_LAYOUTS) if topo else None
    n = layout[0] * layout[1] if layout else rng.choice([2, 3, 4])
    transport = "socket" if fault == "slow" or lab else rng.choice(["shm", "socket"])
    timeout = {"stop": 3.0, "slow": 1.0, "partition": 3.0, "slowlink": 2.0, "linkdown": 10.0}.get(fault, 30.0)
    if fault == "slow" and n > 4:
        # Six processes on two cores: a rank may enter a call more than a second after a peer (seen:
        # 1.17 s; the previous call's pipeline finishes rank after rank, then each makes every rank's
        # input in float64 for its check), and the peer's wait for it counts against the timeout like
        # a stuck rank's would: the library is right to raise there, the harness gives it 2 s.
        timeout = 2.0
    sizes = [1, 100, 5000, 1 << 16, 1 << 18] + ([1 << 20] if layout else [])
    calls = [
        {"op": rng.choice(OPS), "mode": rng.choice(MODES), "n": rng.choice(sizes),
         "seed": rng.randrange(1 << 30), "pause": rng.uniform(0, 0.08),
         "algo": rng.choice(["hierarchical", "hierarchical", "hierarchical", "ring"]) if layout else None}
        for _ in range(rng.randint(6, 12))
    ]
    if fault in ("slow", "slowlink"):
        for c in calls:
            c["n"] = 1 << 18 if fault == "slow" else 1 << 19
    victim = rng.randrange(n)
    plan = {"calls": calls, "fault": fault, "victim": victim, "at_call": rng.randrange(len(calls))}
    out = workdir / f"ep{k:04d}"
    out.mkdir(parents=True)
    env = dict(os.environ, NCCLZ_TRANSPORT=transport, NCCLZ_TIMEOUT=str(timeout), NCCLZ_POLICY="off",
               WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               NCCLZ_TOKEN=secrets.token_hex(8), PYTHONUNBUFFERED="1")
    for v in ("NCCLZ_TEST_CORRUPT", "NCCLZ_SOCKET_THROTTLE_GBPS", "NCCLZ_CHECKSUM", "NCCLZ_TOPO_HOSTS",
              "NCCLZ_HIER_ROUNDS"):
        env.pop(v, None)
    if layout:
        env["NCCLZ_TOPO_HOSTS"] = f"{layout[0]}x{layout[1]}"
        env["NCCLZ_HIER_ROUNDS"] = rng.choice(["1", "1", "1", "0"])
    if fault == "slow":
        env["NCCLZ_SOCKET_THROTTLE_GBPS"] = "0.02"
    if fault == "corrupt":
        env["NCCLZ_CHECKSUM"] = "on"
        env["NCCLZ_TEST_CORRUPT"] = f"{victim}:{(victim + 1) % n}:{rng.randrange(2, 12)}:{rng.randrange(1 << 20)}"
    before = shm_segments()
    cmd = [python, __file__, "--rank", str(out), json.dumps(plan)]
    if lab:
        lab.set_rate(lab.gbps)  # a slowlink episode's rate back, whatever happened
        for h in range(lab.n):
            subprocess.run(["ip", "-n", lab.host(h), "link", "set", "eth0", "up"], check=False)
        token = env["NCCLZ_TOKEN"]
        procs = [lab.spawn(r, cmd, lab.rank_env(r, n, int(env["MASTER_PORT"]), token, {
                     k: v for k, v in env.items() if k.startswith("NCCLZ_") and k != "NCCLZ_TOKEN"}),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=open(out / f"rank{r}.err", "w"))
                 for r in range(n)]
    else:
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(out / f"rank{r}.err", "w"))
                 for r in range(n)]
    t_start = time.monotonic()
    t_fault = None
    signalled = set()
    net_events = []
    if fault in ("kill", "stop", "sigint", "linkdown", "partition", "slowlink"):
        # wait until every rank is connected: the fault then lands among the calls
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(any(e["event"] == "ready" for e in read_events(out / f"rank{r}.jsonl")) for r in range(n)):
                break
            time.sleep(0.05)
    if fault in ("linkdown", "partition", "slowlink"):
        th = threading.Thread(target=lab_fault, args=(lab, fault, victim, random.Random(rng.random()), net_events))
        th.start()
        th.join()  # the ranks run meanwhile; a partition stays down until the episode ends
        t_fault = net_events[0][1]
    if fault in ("kill", "stop", "sigint"):
        time.sleep(rng.uniform(0.0, 0.6))
        sig = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "sigint": signal.SIGINT}[fault]
        if procs[victim].poll() is None:
            procs[victim].send_signal(sig)
            signalled.add(victim)
        t_fault = time.monotonic()
    limit = (t_fault or t_start) + 3 * timeout + 20 + (60 if fault in ("slow", "slowlink") else 0)
    hung = []
    for r, p in enumerate(procs):
        if fault == "stop" and r == victim:
            continue
        try:
            p.wait(timeout=max(0.1, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(r)
    if fault == "stop":
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].send_signal(signal.SIGCONT)
    for r in hung:
        procs[r].send_signal(signal.SIGKILL)
    for p in procs:
        p.wait()
    time.sleep(0.2)
    leaked = sorted(shm_segments() - before)
    res = {"episode": k, "fault": fault, "ranks": n, "transport": transport, "victim": victim,
           "layout": env.get("NCCLZ_TOPO_HOSTS", ""), "hier_rounds": env.get("NCCLZ_HIER_ROUNDS", ""),
           "calls_planned": len(calls), "plan": plan, "hung": hung, "leaked_shm": leaked, "calls": 0, "returned": 0,
           "wrong": 0, "errors": {}, "unclear": []}
    for r in range(n):
        ev = read_events(out / f"rank{r}.jsonl")
        ends = [e for e in ev if e["event"] == "end"]
        res["calls"] += len(ends)
        for e in ends:
            if e["kind"] == "returned":
                res["returned"] += 1
                if not e["ok"]:
                    res["wrong"] += 1
            else:
                res["errors"][e["kind"]] = res["errors"].get(e["kind"], 0) + 1
        for e in ev:
            if e["event"] == "thread_call":
                res["errors"]["thread:" + e["kind"]] = res["errors"].get("thread:" + e["kind"], 0) + 1
        finished = any(e["event"] == "done" for e in ev) or (ends and ends[-1]["kind"] != "returned")
        if r not in signalled and not finished and r not in hung:
            stderr = (out / f"rank{r}.err").read_text(errors="replace")[-400:]
            res["unclear"].append({"rank": r, "exit": procs[r].returncode, "stderr": stderr})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", nargs=2, metavar=("OUTDIR", "PLAN"), help=argparse.SUPPRESS)
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", default="/tmp/ncclz-chaos")
    ap.add_argument("--out", default="", help="write the per-episode results here (JSON)")
    ap.add_argument("--lab", action="store_true", help="ranks on the network lab's hosts (root), network faults too")
    ap.add_argument("--faults", default="", help="only these faults (comma-separated names; default: all)")
    ap.add_argument("--topo", action="store_true",
                    help="ranks as 2x2, 2x3 or 3x2 hosts (NCCLZ_TOPO_HOSTS), hierarchical calls")
    a = ap.parse_args()
    if a.topo and a.lab:
        ap.error("--topo and --lab are exclusive (the lab's namespaces are the hosts)")
    a.faults = [f for f in a.faults.split(",") if f]
    unknown = set(a.faults) - set(LAB_FAULTS if a.lab else FAULTS)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}; one of {LAB_FAULTS if a.lab else FAULTS}")
    if a.rank:
        rank_main(*a.rank)
        return
    rng = random.Random(a.seed)
    workdir = Path(a.workdir) / f"run-{os.getpid()}"
    lab = None
    if a.lab:
        sys.path.insert(0, str(Path(__file__).with_name("netlab")))
        from netlab import Lab

        lab = Lab(4, 0.5, prefix="nzch").up()
    try:
        results = run_episodes(a, rng, workdir, lab)
    finally:
        if lab:
            lab.down()
    faults = LAB_FAULTS if lab else FAULTS
    total = {
        "episodes": len(results),
        "lab": bool(lab),
        "topo": bool(a.topo),
        "calls": sum(r["calls"] for r in results),
        "returned": sum(r["returned"] for r in results),
        "faults": {f: sum(r["fault"] == f for r in results) for f in faults},
        "silent_wrong": sum(r["wrong"] for r in results),
        "hangs": sum(len(r["hung"]) for r in results),
        "leaked_shm": sum(len(r["leaked_shm"]) for r in results),
        "unclear": sum(len(r["unclear"]) for r in results),
        # a slow link alone must not fail a call: calls longer than the timeout still succeed
        "slow_link_errors": sum(sum(r["errors"].values()) for r in results if r["fault"] in ("slow", "slowlink")),
        "seconds": round(sum(r["seconds"] for r in results), 1),
    }
    print(json.dumps(total, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps({"total": total, "episodes": results}, indent=1))


def run_episodes(a, rng, workdir, lab):
    results = []
    for k in range(a.episodes):
        t0 = time.monotonic()
        r = episode(k, rng, workdir, sys.executable, lab, a.topo, a.faults)
        r["seconds"] = round(time.monotonic() - t0, 2)
        results.append(r)
        flag = "" if not (r["wrong"] or r["hung"] or r["leaked_shm"] or r["unclear"]) else "  <-- CHECK"
        print(f"ep {k:3d} {r['fault']:8s} n={r['ranks']} {r['layout'] or '-':3s} {r['transport']:6s} calls={r['calls']:3d} "
              f"returned={r['returned']:3d} errors={r['errors']} wrong={r['wrong']} hung={r['hung']} "
              f"leaked={len(r['leaked_shm'])} unclear={len(r['unclear'])}{flag}", flush=True)
    return results


if __name__ == "__main__":
    main()
