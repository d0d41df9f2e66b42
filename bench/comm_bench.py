"""Runtime benchmark: uncompressed all-reduce bus bandwidth, beside memcpy and socket baselines,
plus the overlap of codec work and communication in a compressed all-reduce.

    python bench/comm_bench.py                      # 4 ranks, shm and socket, 1 KiB .. 64 MiB
    python bench/comm_bench.py -n 2 -e 16M --out -  # print only

Columns follow nccl-tests: size (bytes), count (elements), type, redop, root, time (us, mean per
call, slowest rank), algbw = size / time (GB/s = 1e9 B/s), busbw = algbw * 2(n-1)/n, #wrong.
Baselines measured in the same run: a single-threaded memcpy (numpy.copyto) and a plain TCP
copy between two processes over loopback (one send, receiver acknowledges), each as GB/s.
The overlap section runs Lossy(rel=1e-3) all-reduces of a smooth field and reports, from
comm.last_stats, codec time (encode+decode+quantize, summed over channels), wait time and
wall time next to the uncompressed wall time of the same size; by default once more over
sockets throttled to 1 Gb/s (NCCLZ_SOCKET_THROTTLE_GBPS), a slow network where compression pays.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import socket
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def sizes_between(lo: int, hi: int, factor: int):
    s = lo
    while s <= hi:
        yield s
        s *= factor


def iters_for(nbytes: int) -> int:
    """Enough calls for a stable mean, few enough that 64 MiB on 2 cores stays quick."""
    return int(min(200, max(3, 256e6 / max(nbytes, 1) / 4)))


# ---- rank side ---------------------------------------------------------------------------------------
def worker(args) -> None:
    import ncclz

    comm = ncclz.init()
    rank, n = comm.rank, comm.world_size
    res = {"sweep": [], "overlap": []}
    for nbytes in sizes_between(args.min_bytes, args.max_bytes, args.factor):
        count = nbytes // 4
        x = np.zeros(count, np.float32)  # stays 0 over repeated in-place sums (no overflow)
        iters = iters_for(nbytes)
        for _ in range(2):
            comm.all_reduce(x)
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(x)
        dt = (time.perf_counter() - t0) / iters
        # #wrong: one fresh call checked exactly.
        y = np.full(count, rank + 1, np.float32)
        comm.all_reduce(y)
        wrong = int(np.count_nonzero(y != n * (n + 1) / 2))
        t = np.array([dt], np.float64)
        comm.all_reduce(t, op="max")
        w = np.array([wrong], np.int64)
        comm.all_reduce(w)
        res["sweep"].append(
            {"bytes": nbytes, "count": count, "iters": iters, "time_s": float(t[0]), "wrong": int(w[0])}
        )
    if args.overlap:
        import ncclz as nz

        for nbytes in (1 << 22, 1 << 24):
            count = nbytes // 4
            t = np.linspace(0, 40 * np.pi, count)
            base = (np.sin(t) * 10 + np.sin(7.3 * t + rank) * 3).astype(np.float32)
            rows = {}
            for name, comp in (("none", None), ("lossy rel=1e-3", nz.Lossy(rel=1e-3))):
                walls, stats = [], []
                for i in range(4):
                    x = base.copy()
                    comm.barrier()
                    t0 = time.perf_counter()
                    # policy off: this section times the codec; on shared memory the default policy
                    # would run the lossy request uncompressed (the link is memory)
                    comm.all_reduce(x, compression=comp, policy="off")
                    w = time.perf_counter() - t0
                    if i:
                        walls.append(w)
                        stats.append(comm.last_stats)
                st = stats[-1]
                rows[name] = {
                    "wall_s": float(np.median(walls)),
                    "stat_wall_s": st.wall_s,
                    "encode_s": st.encode_s,
                    "decode_s": st.decode_s,
                    "quantize_s": st.quantize_s,
                    "wait_s": st.wait_s,
                    "ratio": st.ratio,
                    "wire_bytes": st.wire_bytes,
                    "raw_bytes": st.raw_bytes,
                }
            res["overlap"].append({"bytes": nbytes, **rows})
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(res, f)
    comm.close()


# ---- baselines ---------------------------------------------------------------------------------------
def memcpy_gbps(nbytes: int) -> float:
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    iters = iters_for(nbytes)
    t0 = time.perf_counter()
    for _ in range(iters):
        np.copyto(dst, src)
    return nbytes / ((time.perf_counter() - t0) / iters) / 1e9


def _sink(port: int, sizes, ready) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    ready.set()
    c, _ = srv.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(max(sizes))
    view = memoryview(buf)
    while True:
        hdr = c.recv(8, socket.MSG_WAITALL)
        if len(hdr) < 8:
            break
        n = int.from_bytes(hdr, "little")
        got = 0
        while got < n:
            k = c.recv_into(view[got:n])
            if k == 0:
                return
            got += k
        c.sendall(b"k")


def socket_gbps(sizes) -> dict:
    """Plain TCP copy between two processes over loopback: GB/s per message size."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_sink, args=(port, list(sizes), ready), daemon=True)
    p.start()
    ready.wait(10)
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    for n in sizes:
        data = np.ones(n, np.uint8).tobytes()
        hdr = n.to_bytes(8, "little")
        iters = iters_for(n)
        for i in range(iters + 1):
            if i == 1:
                t0 = time.perf_counter()
            c.sendall(hdr)
            c.sendall(data)
            c.recv(1)
        out[n] = n / ((time.perf_counter() - t0) / iters) / 1e9
    c.close()
    p.join(5)
    return out


# ---- report ------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ncclz_info() -> str:
    import ncclz

    return f"{getattr(ncclz, '__version__', '?')} imported from {os.path.dirname(ncclz.__file__)}"


def human(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def run_transport(transport: str, args, throttle_gbps: float = 0.0) -> dict:
    """One 4-rank run on `transport`; with a throttle, only the overlap section (an emulated slow link)."""
    from ncclz import run as ncclz_run

    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "res.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--json",
            js,
            "-b",
            str(args.min_bytes if not throttle_gbps else args.max_bytes + 1),
            "-e",
            str(args.max_bytes),
            "-f",
            str(args.factor),
        ] + (["--overlap"] if args.overlap else [])
        env = dict(os.environ, NCCLZ_TRANSPORT=transport)
        if throttle_gbps:
            env["NCCLZ_SOCKET_THROTTLE_GBPS"] = f"{throttle_gbps:g}"
        rc = ncclz_run.launch(cmd, args.nproc, timeout=120, env=env, deadline=args.deadline)
        if rc != 0:
            raise SystemExit(f"comm_bench: the {transport} run failed (exit {rc})")
        with open(js) as f:
            return json.load(f)


def report(args, results, mem, sock) -> str:
    n = args.nproc
    fac = 2 * (n - 1) / n
    lines = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines += [
        "# ncclz runtime benchmark",
        "",
        f"- date: {now}",
        (
            f"- machine: {platform.node()}, {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}, "
            f"Python {platform.python_version()}"
        ),
        f"- command: `{args.command}`",
        f"- ncclz {ncclz_info()}",
        (
            f"- {n} ranks (processes) on one host; float32, sum, no compression; time = mean per call of the "
            "slowest rank; algbw = size/time, busbw = algbw * 2(n-1)/n (nccl-tests); GB/s = 1e9 B/s."
        ),
        (
            "- baselines from the same run: memcpy = single-threaded numpy.copyto; socket = plain TCP copy "
            "between two processes over loopback (send, ack), i.e. the link a socket ring step can reach."
        ),
        "",
    ]
    for transport, res in results.items():
        if not res["sweep"]:
            continue
        lines += [
            f"## all_reduce over {transport}",
            "",
            (
                "| size | count | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong "
                "| memcpy (GB/s) | socket copy (GB/s) |"
            ),
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        bus = []
        for row in res["sweep"]:
            b, t = row["bytes"], row["time_s"]
            alg = b / t / 1e9
            bus.append(alg * fac)
            lines.append(
                f"| {human(b)} | {row['count']} | float | sum | -1 | {t * 1e6:.1f} | {alg:.3f} | "
                f"{alg * fac:.3f} | {row['wrong']} | {mem[b]:.2f} | {sock[b]:.3f} |"
            )
        lines += ["", f"Avg bus bandwidth: {np.mean(bus):.3f} GB/s; peak {max(bus):.3f} GB/s.", ""]
    ov = [(t, r) for t, res in results.items() for r in res.get("overlap", [])]
    if ov:
        lines += [
            "## Overlap: compressed all_reduce (Lossy(rel=1e-3), smooth field)",
            "",
            (
                "codec = encode + decode + quantize seconds from `last_stats` of rank 0 (summed over the "
                "channel threads, so codec/wall > 1 means codec work ran in parallel); wait = time blocked on "
                "slots (also summed over channels); speedup = t_none / wall, both measured the same way "
                "(median of 3 calls after a barrier). With 4 ranks on 2 cores the codec threads compete with "
                "the other ranks for the CPU, so these figures understate what separate hosts get."
            ),
            "",
            (
                "| transport | size | ratio | t_none (ms) | wall (ms) | encode (ms) | decode (ms) | quantize (ms) "
                "| wait (ms) | codec/wall | speedup |"
            ),
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for transport, r in ov:
            c = r["lossy rel=1e-3"]
            codec = c["encode_s"] + c["decode_s"] + c["quantize_s"]
            tn, w = r["none"]["wall_s"], c["wall_s"]
            lines.append(
                f"| {transport} | {human(r['bytes'])} | {c['ratio']:.2f} | {tn * 1e3:.2f} | {w * 1e3:.2f} | "
                f"{c['encode_s'] * 1e3:.2f} | {c['decode_s'] * 1e3:.2f} | {c['quantize_s'] * 1e3:.2f} | "
                f"{c['wait_s'] * 1e3:.2f} | {codec / w:.2f} | {tn / w:.2f}x |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("-b", "--min-bytes", type=parse_size, default=1 << 10)
    p.add_argument("-e", "--max-bytes", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("-t", "--transports", default="shm,socket")
    p.add_argument("--no-overlap", dest="overlap", action="store_false")
    p.add_argument(
        "--throttle-gbps",
        type=float,
        default=1.0,
        help="also run the overlap section over sockets throttled to this link rate (0: skip)",
    )
    p.add_argument(
        "--out", default=os.path.join(HERE, "results", "runtime.md"), help="markdown file, or - for stdout"
    )
    p.add_argument(
        "--deadline", type=float, default=600, help="give up after this many seconds per transport"
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--overlap", dest="overlap", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    args.command = " ".join(["python bench/comm_bench.py", *(argv if argv is not None else sys.argv[1:])])
    sizes = list(sizes_between(args.min_bytes, args.max_bytes, args.factor))
    mem = {s: memcpy_gbps(s) for s in sizes}
    sock = socket_gbps(sizes)
    results = {}
    for t in args.transports.split(","):
        results[t] = run_transport(t, args)
    if args.overlap and args.throttle_gbps:
        results[f"socket at {args.throttle_gbps:g} Gb/s"] = run_transport("socket", args, args.throttle_gbps)
    text = report(args, results, mem, sock)
    print(text)
    if args.out != "-":
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
