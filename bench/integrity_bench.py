"""Cost of the transports' slot checksums (NCCLZ_CHECKSUM): all_reduce with checksums off and on,
side by side in one run.

Every rank creates two communicators, one with NCCLZ_CHECKSUM=off and one with =on, and alternates
calls between them (off, on, on, off, ...), so both see the same machine, data and moment; a barrier
precedes each timed call. Per mode and size it prints the median time per call (the slowest rank's),
algbw, and on / off.

    python bench/integrity_bench.py -n 4 -t shm               # 4 processes on this host, shared memory
    python bench/integrity_bench.py -n 4 -t inproc            # 4 threads of one process
    python bench/integrity_bench.py -n 4 -t socket            # 4 processes over loopback sockets
    # the network lab (root): 4 hosts, 0.5 Gbit/s NICs, sockets
    python bench/netlab/integrity_lab.py

Options: -s sizes (bytes per rank, float32; default 16M,64M), -m modes (none,lossy,lossless;
default none,lossy), -r repetitions per configuration (default 6), --json FILE.
The data: a smooth 1-D field per rank (sines and a little noise), which lossy (rel=1e-3) compresses
about 10x.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import threading
import time

import numpy as np


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def field(rank: int, count: int) -> np.ndarray:
    t = np.linspace(0, 40 * np.pi, count, dtype=np.float64)
    rng = np.random.default_rng(rank)
    v = np.sin(t + rank) + 0.3 * np.sin(7.1 * t) + rng.normal(0, 1e-3, count)
    return v.astype(np.float32)


def compression(ncclz, mode):
    return {"none": None, "lossless": ncclz.Lossless(), "lossy": ncclz.Lossy(rel=1e-3)}[mode]


def measure(ncclz, comms, sizes, modes, reps, rank, world):
    """Alternates the communicators call by call; returns {(mode, size, name): [(wall s, CPU s) per call]}
    (CPU: this process's user + system time, all its threads)."""
    times = {}
    for size in sizes:
        count = size // 4
        x0 = field(rank, count)
        x = np.empty_like(x0)
        for mode in modes:
            comp = compression(ncclz, mode)
            for name, comm in comms:  # warm-up: buffers, pages, policy-free path
                np.copyto(x, x0)
                comm.all_reduce(x, compression=comp, policy="off")
            for k in range(reps):
                order = comms if k % 2 == 0 else comms[::-1]
                for name, comm in order:
                    np.copyto(x, x0)
                    comm.barrier()
                    t0, c0 = time.perf_counter(), time.process_time()
                    comm.all_reduce(x, compression=comp, policy="off")
                    t = (time.perf_counter() - t0, time.process_time() - c0)
                    times.setdefault((mode, size, name), []).append(t)
    return times


def report(all_times, sizes, modes, world, meta, json_path, cpu_of_all=False):
    """all_times: one dict per rank. Wall: the slowest rank's time per call; CPU: the ranks' CPU time
    per call added up (cpu_of_all: rank 0's process holds every rank, its CPU time is the total);
    then the median over calls."""
    rows = []
    print(
        f"# {meta['transport']}, {world} ranks, {meta['host']}; median of {meta['reps']} calls each, "
        f"checksum off and on alternating; wall = slowest rank, CPU = all ranks together"
    )
    print(
        f"{'mode':>8} {'size':>10} {'off ms':>9} {'on ms':>9} {'on/off':>7} {'off CPU ms':>11} {'on CPU ms':>10} "
        f"{'on/off':>7}"
    )
    for size in sizes:
        for mode in modes:
            wall, cpu = {}, {}
            for name in ("off", "on"):
                t = np.array([r[(mode, size, name)] for r in all_times])  # rank, call, (wall, cpu)
                wall[name] = float(np.median(t[:, :, 0].max(axis=0)))
                cpu[name] = float(np.median(t[0, :, 1] if cpu_of_all else t[:, :, 1].sum(axis=0)))
            rows.append(
                {
                    "mode": mode,
                    "bytes": size,
                    "off_s": wall["off"],
                    "on_s": wall["on"],
                    "on_over_off": wall["on"] / wall["off"],
                    "off_cpu_s": cpu["off"],
                    "on_cpu_s": cpu["on"],
                    "cpu_on_over_off": cpu["on"] / cpu["off"],
                }
            )
            print(
                f"{mode:>8} {size:>10} {wall['off'] * 1e3:9.2f} {wall['on'] * 1e3:9.2f} {wall['on'] / wall['off']:7.3f} "
                f"{cpu['off'] * 1e3:11.2f} {cpu['on'] * 1e3:10.2f} {cpu['on'] / cpu['off']:7.3f}",
                flush=True,
            )
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def make_comms(ncclz, make):
    """(name, communicator) for NCCLZ_CHECKSUM off and on; `make(i)` creates the i-th communicator."""
    comms = []
    for i, setting in enumerate(("off", "on")):
        os.environ["NCCLZ_CHECKSUM"] = setting
        comms.append((setting, make(i)))
    return comms


def rank_main(args):
    """One rank of a multi-process run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)."""
    import ncclz

    port = int(os.environ["MASTER_PORT"])

    def make(i):
        os.environ["MASTER_PORT"] = str(port + i)
        return ncclz.init()

    comms = make_comms(ncclz, make)
    rank, world = comms[0][1].rank, comms[0][1].world_size
    times = measure(ncclz, comms, args.sizes, args.modes, args.reps, rank, world)
    # Every rank's times to rank 0 (one gather on the first communicator).
    keys = sorted(times)
    mine = np.array([times[k] for k in keys], dtype=np.float64)  # key, call, (wall, cpu)
    gathered = np.asarray(comms[0][1].all_gather(mine)).reshape((world, *mine.shape))
    if rank == 0:
        per_rank = [dict(zip(keys, [r.tolist() for r in gathered[w]])) for w in range(world)]
        meta = {
            "transport": os.environ.get("NCCLZ_TRANSPORT", "auto"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "reps": args.reps,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "link_gbps": os.environ.get("NCCLZ_LINK_GBPS"),
        }
        report(per_rank, args.sizes, args.modes, world, meta, args.json)
    for _, c in comms:
        c.close()


def threads_main(args):
    """n ranks as threads of this process (in-process transport)."""
    import ncclz

    n = args.nproc
    made = threading.Barrier(n)
    results = [None] * n

    def one(rank):
        comms = []
        for i, setting in enumerate(("off", "on")):
            if rank == 0:
                os.environ["NCCLZ_CHECKSUM"] = setting
            made.wait()  # every thread reads the variable after rank 0 set it ...
            comms.append((setting, ncclz.Communicator(rank=rank, world_size=n, transport="inproc")))
            made.wait()  # ... and before it changes again
        results[rank] = measure(ncclz, comms, args.sizes, args.modes, args.reps, rank, n)
        for _, c in comms:
            c.close()

    ts = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    meta = {
        "transport": "inproc",
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "reps": args.reps,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    report(results, args.sizes, args.modes, n, meta, args.json, cpu_of_all=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    """Starts args.nproc rank processes on this host and waits for them."""
    port = free_port()
    while True:  # two consecutive free ports (one per communicator)
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    token = secrets.token_hex(8)
    procs = []
    for r in range(args.nproc):
        env = dict(
            os.environ,
            RANK=str(r),
            WORLD_SIZE=str(args.nproc),
            LOCAL_RANK=str(r),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NCCLZ_TOKEN=token,
            NCCLZ_TRANSPORT=args.transport,
            NCCLZ_POLICY="off",
        )
        procs.append(
            subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", *sys.argv[1:]], env=env)
        )
    return max(p.wait() for p in procs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("-t", "--transport", default="shm", choices=["shm", "socket", "inproc"])
    p.add_argument(
        "-s", "--sizes", type=lambda s: [parse_size(v) for v in s.split(",")], default=[16 << 20, 64 << 20]
    )
    p.add_argument("-m", "--modes", type=lambda s: s.split(","), default=["none", "lossy"])
    p.add_argument("-r", "--reps", type=int, default=6)
    p.add_argument("--json")
    p.add_argument("--rank", action="store_true", help="run as one rank (RANK etc. from the environment)")
    args = p.parse_args()
    if args.rank:
        rank_main(args)
    elif args.transport == "inproc":
        threads_main(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
