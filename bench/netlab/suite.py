#!/usr/bin/env python3
"""The network-lab evaluation: ncclz (every mode) beside gloo, MPI and SZ3-then-communicate, same
hosts, same data, same run. Needs root (bench/netlab/netlab.py). Raw JSON goes to
bench/results/netlab_raw/; bench/netlab/report.py turns it into bench/results/netlab.md + PNGs.

    sudo python bench/netlab/suite.py                     # every phase (~15-25 min on 2 cores)
    sudo python bench/netlab/suite.py --phases main --quick

Phases (all 4 hosts, one rank per host namespace, tbf-shaped NICs):
  main   0.5 Gbit/s, 64 MiB float32 all_reduce; data gaussian, smooth, real, grad, sparse, and
         smooth/real passed in their natural shape (smooth-shaped, real-shaped);
         ncclz none / lossless / rel=1e-3 / auto:rel=1e-3 (the policy), gloo, SZ3, MPI
  bf16   0.5 Gbit/s, 64 MiB bfloat16 gradients all_reduce: ncclz none / lossless, gloo
  colls  0.5 Gbit/s, 64 MiB all_gather, broadcast, reduce_scatter; smooth, gaussian;
         ncclz none / rel=1e-3, gloo, SZ3, MPI
  rates  64 MiB all_reduce at 0.1 .. 10 Gbit/s; smooth, gaussian; ncclz none / rel=1e-3 /
         auto:rel=1e-3 (rel=1e-3 under the Communicator's default policy), gloo
  sizes  0.5 Gbit/s, all_reduce 64 KiB .. 64 MiB, smooth: none / rel=1e-3 / auto:rel=1e-3
  twohost  the main all_reduce on 2 hosts only (2 ranks on 2 cores: a core per rank)
  rootless after the lab is gone: smooth/gaussian all_reduce on loopback with
           NCCLZ_SOCKET_THROTTLE_GBPS = the main rate (the no-root emulation), for comparison
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netlab

BENCH = [sys.executable, os.path.join(REPO, "bench", "ncclz_bench.py")]
MPI_BENCH = [sys.executable, os.path.join(REPO, "bench", "baselines", "mpi_bench.py")]
RAW = os.path.join(REPO, "bench", "results", "netlab_raw")


def log(msg):
    print(f"[suite {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


TAG = ""


def run_bench(lab, name, args, port, timeout, nranks=None):
    if "-s" in args and not args[args.index("-s") + 1]:
        log(f"{name}: no system to run")
        return 0
    if "ncclz" not in args[args.index("-s") + 1]:
        args = list(args)
        k = args.index("-m")
        args[k + 1] = ",".join(m for m in args[k + 1].split(",") if m.startswith(("rel", "abs"))) or "rel=1e-3"
    out = os.path.join(RAW, f"{name}{TAG}.json")
    cmd = BENCH + args + ["--json", out]
    log(f"{name}: rate {lab.gbps} Gbit/s: ncclz-bench {' '.join(args)}")
    t = time.time()
    rc, _ = lab.exec_ranks(cmd, nranks=nranks, port=port, timeout=timeout, capture=True,
                           extra_env={"NCCLZ_BENCH_DATA": os.path.join(REPO, "bench", "data"),
                                      "NCCLZ_CORES_PER_RANK": str((os.cpu_count() or 1) / (nranks or lab.n))})
    log(f"{name}: exit {rc} after {time.time() - t:.0f}s")
    return rc


def run_mpi(lab, name, args, timeout):
    """mpirun inside host 0's namespace; the other ranks start in theirs via netns_rsh.sh."""
    out = os.path.join(RAW, f"{name}{TAG}.json")
    hosts = ",".join(lab.addr(i) for i in range(lab.n))
    env = dict(os.environ, NETLAB_PREFIX=lab.prefix, NETLAB_GBPS=str(lab.gbps or ""),
               NCCLZ_BENCH_DATA=os.path.join(REPO, "bench", "data"), OMPI_MCA_plm_rsh_agent=os.path.join(HERE, "netns_rsh.sh"))
    cmd = ["ip", "netns", "exec", lab.host(0), "mpirun", "--allow-run-as-root", "-np", str(lab.n), "--host", hosts,
           "--mca", "plm_rsh_agent", os.path.join(HERE, "netns_rsh.sh"), "--mca", "plm_rsh_no_tree_spawn", "1",
           "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", netlab.IFNAME,
           "--mca", "oob_tcp_if_include", netlab.IFNAME, "-x", "NETLAB_GBPS", "-x", "NCCLZ_BENCH_DATA",
           "-x", "PATH", *MPI_BENCH, *args, "--json", out]
    log(f"{name}: rate {lab.gbps} Gbit/s: mpirun (4 namespaces) mpi_bench {' '.join(args)}")
    t = time.time()
    try:
        p = subprocess.run(cmd, env=env, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(p.stdout)
        rc = p.returncode
    except subprocess.TimeoutExpired as e:
        sys.stdout.write((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
        rc = 124
    log(f"{name}: exit {rc} after {time.time() - t:.0f}s")
    return rc


def ncclz_runtime_available() -> bool:
    r = subprocess.run([sys.executable, "-c", "import ncclz, ncclz._core as c; c.comm; ncclz.comm.Communicator"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    return r.returncode == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="main,bf16,colls,rates,sizes,twohost,rootless")
    ap.add_argument("-n", "--hosts", type=int, default=4)
    ap.add_argument("--rate", type=float, default=0.5, help="Gbit/s of the main/bf16/colls/sizes phases")
    ap.add_argument("--rates", default="0.1,0.25,0.5,1,2,5,10")
    ap.add_argument("--size", default="64M")
    ap.add_argument("--data", default="gaussian,smooth,real,grad,sparse,smooth-shaped,real-shaped")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per point (>= 1 timed iteration)")
    ap.add_argument("--quick", action="store_true", help="16M messages, budget 1 s, rates 0.5,2,10")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--systems", default="ncclz,gloo,sz3", help="drop ncclz automatically if its runtime is missing")
    ap.add_argument("--tag", default="", help="suffix of the raw JSON names")
    ap.add_argument("--raw", default=None, help="directory of the raw JSON (default bench/results/netlab_raw)")
    ap.add_argument("--prefix", default=netlab.DEFAULT_PREFIX)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args(argv)
    netlab.require_root()
    global TAG, RAW
    TAG = a.tag
    if a.raw:
        RAW = os.path.abspath(a.raw)
    if a.quick:
        a.size, a.budget, a.rates = "16M", 1.0, "0.5,2,10"
    os.makedirs(RAW, exist_ok=True)
    systems = [x for x in a.systems.split(",") if x]
    if "ncclz" in systems and not ncclz_runtime_available():
        log("ncclz runtime (ncclz._core.comm) not in the installed package: running the baselines only")
        systems.remove("ncclz")

    def S(*want):
        have = [x for x in want if x in systems]
        return ",".join(have)

    phases = a.phases.split(",")
    common = ["-b", a.size, "-e", a.size, "--budget", str(a.budget), "-w", "1", "--max-iters", "10"]
    mpi_ok = not a.no_mpi and subprocess.run(["sh", "-c", "command -v mpirun"], stdout=subprocess.DEVNULL).returncode == 0
    if mpi_ok:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            mpi_ok = False
    if not mpi_ok and not a.no_mpi:
        log("MPI baseline skipped: mpirun or mpi4py missing (apt-get install -y openmpi-bin libopenmpi-dev; pip install mpi4py)")
    status = {}
    port = 29600
    with netlab.Lab(a.hosts, a.rate, a.prefix) as lab:
        log(lab.describe())
        if [ph for ph in phases if ph != "rootless"]:
            tbf = {str(r): netlab.tbf_args(float(r)) for r in [a.rate] + [float(x) for x in a.rates.split(",")]}
            with open(os.path.join(RAW, "lab.json"), "w") as f:
                json.dump({"hosts": a.hosts, "prefix": a.prefix, "tbf": tbf, "argv": sys.argv,
                               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f, indent=1)
            # measured goodput of one link at the main rate (the tbf check)
            got = netlab.iperf(lab, 32 << 20)
            log(f"iperf h1->h0 at {a.rate} Gbit/s: {got:.3f} Gbit/s")
            with open(os.path.join(RAW, "iperf.json"), "w") as f:
                json.dump({"rate": a.rate, "measured_gbps": got}, f)

        def nextport():
            nonlocal port
            port += 7
            return port

        if "main" in phases:
            lab.set_rate(a.rate)
            status["main"] = run_bench(lab, "main", common + ["-c", "all_reduce", "-d", a.data, "-s", S("ncclz", "gloo", "sz3"),
                                                              "-m", "none,lossless,rel=1e-3,auto:rel=1e-3"],
                                       nextport(), a.timeout)
            if mpi_ok:
                status["main_mpi"] = run_mpi(lab, "main_mpi", common + ["-c", "all_reduce", "-d", a.data], a.timeout)
        if "bf16" in phases:
            lab.set_rate(a.rate)
            status["bf16"] = run_bench(lab, "bf16", common + ["-c", "all_reduce", "-d", "grad", "-t", "bfloat16",
                                                              "-s", S("ncclz", "gloo"), "-m", "none,lossless,auto:lossless"],
                                       nextport(), a.timeout)
        if "colls" in phases:
            lab.set_rate(a.rate)
            status["colls"] = run_bench(lab, "colls", common + ["-c", "all_gather,broadcast,reduce_scatter",
                                                                "-d", "smooth,gaussian", "-s", S("ncclz", "gloo", "sz3"),
                                                                "-m", "none,rel=1e-3"], nextport(), a.timeout)
            if mpi_ok:
                status["colls_mpi"] = run_mpi(lab, "colls_mpi", common + ["-c", "all_gather,broadcast,reduce_scatter",
                                                                          "-d", "smooth,gaussian"], a.timeout)
        if "rates" in phases:
            for r in [float(x) for x in a.rates.split(",")]:
                lab.set_rate(r)
                status[f"rate_{r:g}"] = run_bench(lab, f"rate_{r:g}", common + [
                    "-c", "all_reduce", "-d", "smooth,gaussian", "-s", S("ncclz", "gloo"),
                    "-m", "none,rel=1e-3,auto:rel=1e-3", "--max-iters", "5"], nextport(), a.timeout)
        if "twohost" in phases:
            # 2 ranks on the 2 cores (a core per rank, as real hosts have): how much of the 4-rank
            # result is the shared CPU
            lab.set_rate(a.rate)
            two_data = "smooth,real,gaussian,grad,sparse,smooth-shaped"
            status["twohost"] = run_bench(lab, "twohost", common + ["-c", "all_reduce", "-d", two_data,
                                                                    "-s", S("ncclz"), "-m", "none,rel=1e-3"],
                                          nextport(), a.timeout, nranks=2)
        if "sizes" in phases:
            lab.set_rate(a.rate)
            status["sizes"] = run_bench(lab, "sizes", ["-b", "64K", "-e", a.size, "-f", "4", "--budget", "1",
                                                       "-c", "all_reduce", "-d", "smooth", "-s", S("ncclz"),
                                                       "-m", "none,rel=1e-3,auto:rel=1e-3"], nextport(), a.timeout)
    if "rootless" in phases and "ncclz" in systems:
        # the root-less emulation on loopback: the ncclz socket transport paces itself
        out = os.path.join(RAW, f"rootless{TAG}.json")
        cmd = BENCH + ["-n", str(a.hosts), "--throttle-gbps", str(a.rate), "-c", "all_reduce", "-d", "smooth,gaussian",
                       "-m", "none,rel=1e-3", "-b", a.size, "-e", a.size, "--budget", str(a.budget), "--json", out]
        log(f"rootless: NCCLZ_SOCKET_THROTTLE_GBPS={a.rate} on loopback: {' '.join(cmd[2:])}")
        r = subprocess.run(cmd, env=dict(os.environ, NCCLZ_BENCH_DATA=os.path.join(REPO, "bench", "data"),
                                         NCCLZ_CORES_PER_RANK=str((os.cpu_count() or 1) / a.hosts)),
                           timeout=a.timeout)
        status["rootless"] = r.returncode
    json.dump(status, open(os.path.join(RAW, "status.json"), "w"), indent=1)
    log(f"done: {status}; namespaces left: {netlab.list_namespaces(a.prefix)}")
    return 0 if all(v == 0 for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
