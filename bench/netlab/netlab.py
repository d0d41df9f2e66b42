#!/usr/bin/env python3
"""Network lab: N emulated hosts on one machine (network namespaces + veth + bridge + tc tbf).

Needs root (CAP_NET_ADMIN). Layout, all inside namespaces this script creates (the root
namespace is never touched):

    <prefix>-sw      "switch" namespace holding bridge <prefix>br
    <prefix>-h<I>    host I: interface "eth0" = veth peer of <prefix>p<I> (a bridge port in -sw),
                     address <subnet>.<I+1>/24, loopback up

Each host's NIC is a token bucket: ``tc qdisc ... root tbf rate R burst B latency L`` on eth0
(the host's egress, "NIC TX") and, unless --no-ingress, on the switch port towards the host
(its ingress, "NIC RX"), so a host can neither send nor receive faster than R. netem is not
available on this kernel, so no delay or loss is added; the propagation latency is the veth
latency (tens of microseconds).

Commands::

    netlab.py up      -n 4 --rate 0.5       # create (Gbit/s); prints the host addresses
    netlab.py rate    --rate 2              # change the rate of an existing lab
    netlab.py run     -n 4 --rate 0.5 -- python script.py args   # up, one rank per host, down
    netlab.py run     -n 2 -L 2 --rate 1 -- python script.py     # two ranks per host (NCCLZ_TOPO_HOST)
    netlab.py exec    -n 4 -- python script.py args              # ranks in an existing lab
    netlab.py iperf   -n 2 --rate 1         # self-test: TCP stream h1 -> h0, measured rate
    netlab.py down | --cleanup              # remove everything with the prefix

``run``/``exec`` start rank I as ``ip netns exec <prefix>-hI env RANK=I WORLD_SIZE=N
MASTER_ADDR=<h0 address> MASTER_PORT=P NCCLZ_TOKEN=... NCCLZ_SOCKET_IFNAME=eth0
GLOO_SOCKET_IFNAME=eth0 NCCLZ_TRANSPORT=socket NCCLZ_LINK_GBPS=R <cmd>``; output lines are
prefixed with ``[rank I]`` unless --quiet-ranks.

Teardown is guaranteed as far as a process can: try/finally, atexit and SIGINT/SIGTERM/SIGHUP
handlers delete the namespaces (deleting a namespace deletes its veth ends and the bridge);
``--cleanup`` removes leftovers of a killed run by name prefix.

Without root, use the root-less emulation instead: ``NCCLZ_SOCKET_THROTTLE_GBPS=R`` paces the
ncclz socket transport itself (ranks on loopback); it shapes only ncclz traffic, not gloo/MPI.
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

DEFAULT_PREFIX = "nczl"
DEFAULT_SUBNET = "10.77.0"  # /24, private, used only inside our namespaces
HZ = 250  # CONFIG_HZ of this kernel; tbf burst must be >= rate / HZ
IFNAME = "eth0"


def _run(cmd, check=True, quiet=False):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr.strip()}")
    return r


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit(
            "netlab: needs root (CAP_NET_ADMIN) to create network namespaces, veth pairs, a bridge and\n"
            "tc qdiscs. Run it with sudo, e.g. `sudo bash bench/run_all.sh`.\n"
            "Root-less alternative (emulation only, ncclz traffic only): run the ranks on loopback with\n"
            "NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=<rate>, e.g.\n"
            "  NCCLZ_SOCKET_THROTTLE_GBPS=0.5 ncclz-run -n 4 python -m ncclz.tools.bench --transport socket"
        )
    if shutil.which("ip") is None or shutil.which("tc") is None:
        sys.exit("netlab: needs iproute2 (`ip`, `tc`): apt-get install -y iproute2")


def list_namespaces(prefix: str):
    r = _run(["ip", "netns", "list"], check=False)
    out = []
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(prefix + "-"):
            out.append(name)
    return out


def cleanup(prefix: str = DEFAULT_PREFIX, verbose: bool = True) -> int:
    """Delete every namespace named <prefix>-*; returns how many were removed."""
    names = list_namespaces(prefix)
    # hosts first (their veth ends vanish with them), then the switch
    names.sort(key=lambda n: n.endswith("-sw"))
    for n in names:
        _run(["ip", "netns", "pids", n], check=False)
        # kill processes still running inside (only those in our own namespaces)
        pids = _run(["ip", "netns", "pids", n], check=False).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass
        _run(["ip", "netns", "del", n], check=False)
    if verbose and names:
        print(f"netlab: removed {len(names)} namespaces: {' '.join(names)}", file=sys.stderr)
    return len(names)


def tbf_args(gbps: float):
    """rate, burst, limit for a tbf on a link of `gbps` Gbit/s."""
    rate_bps = gbps * 1e9
    bytes_per_s = rate_bps / 8
    # burst: 2x the minimum (rate/HZ) but at least 64 KiB (one GSO super-packet of veth)
    burst = int(max(2 * bytes_per_s / HZ, 64 * 1024))
    # queue: ~20 ms at line rate (TCP needs a queue), at least 4 bursts
    limit = int(max(bytes_per_s * 0.02, 4 * burst))
    return f"{rate_bps / 1e6:.3f}mbit", str(burst), str(limit)


class Lab:
    def __init__(self, hosts: int, gbps: float | None, prefix: str = DEFAULT_PREFIX,
                 subnet: str = DEFAULT_SUBNET, ingress: bool = True):
        if not 1 <= hosts <= 200:
            raise ValueError("hosts must be 1..200")
        self.n = hosts
        self.gbps = gbps
        self.prefix = prefix
        self.subnet = subnet
        self.ingress = ingress
        self.sw = f"{prefix}-sw"
        self.br = f"{prefix}br"
        self.created = False
        self._procs: list[subprocess.Popen] = []

    def host(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def port(self, i: int) -> str:
        return f"{self.prefix}p{i}"

    # ------------------------------------------------------------------ lifecycle
    def up(self):
        require_root()
        if list_namespaces(self.prefix):
            raise RuntimeError(
                f"netlab: namespaces with prefix '{self.prefix}-' exist already (another lab, or leftovers): "
                f"run `netlab.py --cleanup --prefix {self.prefix}` or pick another --prefix")
        self.created = True
        _register(self)
        r = _run
        r(["ip", "netns", "add", self.sw])
        r(["ip", "-n", self.sw, "link", "add", self.br, "type", "bridge"])
        r(["ip", "-n", self.sw, "link", "set", self.br, "up"])
        r(["ip", "-n", self.sw, "link", "set", "lo", "up"])
        for i in range(self.n):
            h = self.host(i)
            r(["ip", "netns", "add", h])
            r(["ip", "link", "add", IFNAME, "netns", h, "type", "veth", "peer", "name", self.port(i), "netns", self.sw])
            r(["ip", "-n", self.sw, "link", "set", self.port(i), "master", self.br])
            r(["ip", "-n", self.sw, "link", "set", self.port(i), "up"])
            r(["ip", "-n", h, "addr", "add", f"{self.addr(i)}/24", "dev", IFNAME])
            r(["ip", "-n", h, "link", "set", IFNAME, "up"])
            r(["ip", "-n", h, "link", "set", "lo", "up"])
        if self.gbps:
            self.set_rate(self.gbps, replace=False)
        # wait for the bridge ports to forward (no STP, so immediately; check ping-less with a TCP connect)
        return self

    def set_rate(self, gbps: float | None, replace: bool = True):
        """Shape every host NIC to `gbps` Gbit/s (None or 0: remove shaping)."""
        self.gbps = gbps
        for i in range(self.n):
            targets = [(self.host(i), IFNAME)]
            if self.ingress:
                targets.append((self.sw, self.port(i)))
            for ns, dev in targets:
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
                if gbps:
                    rate, burst, limit = tbf_args(gbps)
                    _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                          "rate", rate, "burst", burst, "limit", limit])

    def describe(self) -> str:
        lines = [(f"netlab: {self.n} hosts, prefix {self.prefix}, bridge {self.br} in {self.sw}, "
                 f"rate {self.gbps or 'unshaped'} Gbit/s per host NIC "
                 f"({'egress+ingress' if self.ingress else 'egress only'})")]
        for i in range(self.n):
            lines.append(f"  {self.host(i)}: {IFNAME} {self.addr(i)}/24")
        if self.gbps:
            rate, burst, limit = tbf_args(self.gbps)
            lines.append(f"  tc qdisc ... root tbf rate {rate} burst {burst} limit {limit}")
        return "\n".join(lines)

    def down(self):
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self._procs.clear()
        if self.created:
            cleanup(self.prefix, verbose=False)
            self.created = False

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # ------------------------------------------------------------------ running ranks
    def rank_env(self, i: int, nranks: int, port: int, token: str, extra: dict | None = None,
                 ranks_per_host: int = 1) -> dict:
        """Rank i's environment: it runs in host i // ranks_per_host as local rank i % ranks_per_host.
        With several ranks per host, NCCLZ_TOPO_HOST names the host (the namespaces share one kernel,
        so their host names would make them one host) and LOCAL_RANK / LOCAL_WORLD_SIZE say where the
        rank sits; the ranks of a host reach each other through shared memory (hierarchical
        collectives) or through the host's loopback, never through the shaped NIC."""
        L = max(1, int(ranks_per_host))
        h = i // L
        env = dict(os.environ)
        env.update({
            "RANK": str(i), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(i % L), "LOCAL_WORLD_SIZE": str(L),
            "MASTER_ADDR": self.addr(0), "MASTER_PORT": str(port), "NCCLZ_TOKEN": token,
            "NCCLZ_SOCKET_IFNAME": IFNAME, "GLOO_SOCKET_IFNAME": IFNAME, "NCCLZ_TRANSPORT": "socket",
            "NETLAB_HOST_ADDR": self.addr(h), "NETLAB_NS": self.host(h),
            "NETLAB_ADDRS": ",".join(self.addr(k // L) for k in range(nranks)),
        })
        if L > 1:
            env["NCCLZ_TOPO_HOST"] = str(h)
        else:
            env.pop("NCCLZ_TOPO_HOST", None)
        env.pop("NCCLZ_TOPO_HOSTS", None)
        env.pop("NCCLZ_SOCKET_THROTTLE_GBPS", None)  # the network shapes, not the transport
        # the compression policy's CPU share: the emulated hosts share this machine's cores
        # (LOCAL_WORLD_SIZE=1 above would make it assume all cores per rank)
        env.setdefault("NCCLZ_CORES_PER_RANK", f"{(os.cpu_count() or 1) / nranks:g}")
        # and their BLAS/OpenMP thread pools likewise (every system alike): idle OpenBLAS threads
        # of 4 processes spinning on 2 cores cost the ranks ~5% (measured on ncclz alone)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nranks)))
        if self.gbps:
            env["NCCLZ_LINK_GBPS"] = str(self.gbps)
            env["NETLAB_GBPS"] = str(self.gbps)
        if extra:
            env.update(extra)
        return env

    def spawn(self, i: int, cmd: list[str], env: dict, **kw) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", self.host(i), *cmd], env=env,
                             start_new_session=True, **kw)
        self._procs.append(p)
        return p

    def exec_ranks(self, cmd: list[str], nranks: int | None = None, port: int = 29500,
                   timeout: float | None = None, extra_env: dict | None = None,
                   prefix_output: bool = True, capture: bool = False,
                   ranks_per_host: int = 1) -> tuple[int, list[str]]:
        """Run `cmd` ranks_per_host times per host (rank I in host I // ranks_per_host). Returns
        (status, captured lines of rank 0)."""
        L = max(1, int(ranks_per_host))
        nranks = nranks or self.n * L
        if (nranks + L - 1) // L > self.n:
            raise ValueError(f"netlab: {nranks} ranks of {L} per host need {(nranks + L - 1) // L} hosts; "
                             f"the lab has {self.n}")
        token = secrets.token_hex(16)
        procs = []
        rank0_lines: list[str] = []
        threads = []
        for i in range(nranks):
            env = self.rank_env(i, nranks, port, token, extra_env, ranks_per_host=L)
            p = self.spawn(i // L, cmd, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           bufsize=1)
            procs.append(p)

            def pump(p=p, i=i):
                for line in p.stdout:
                    if capture and i == 0:
                        rank0_lines.append(line)
                    out = f"[rank {i}] {line}" if prefix_output else line
                    (sys.stdout if i == 0 or not capture else sys.stderr).write(out)
                    sys.stdout.flush()

            t = threading.Thread(target=pump, daemon=True)
            t.start()
            threads.append(t)
        deadline = None if timeout is None else time.monotonic() + timeout
        status = 0
        try:
            pending = set(range(nranks))
            while pending:
                for i in list(pending):
                    rc = procs[i].poll()
                    if rc is not None:
                        pending.discard(i)
                        if rc != 0 and status == 0:
                            status = rc
                            print(f"netlab: rank {i} exited with status {rc}; stopping the others in 5 s",
                                  file=sys.stderr)
                            deadline = min(deadline or 1e18, time.monotonic() + 5)
                if deadline is not None and time.monotonic() > deadline and pending:
                    print(f"netlab: timeout, killing ranks {sorted(pending)}", file=sys.stderr)
                    for i in pending:
                        try:
                            os.killpg(procs[i].pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    status = status or 124
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p.wait()
            for t in threads:
                t.join(timeout=2)
            for p in procs:
                if p in self._procs:
                    self._procs.remove(p)
        return status, rank0_lines


# ---------------------------------------------------------------------- guaranteed teardown
_LABS: list[Lab] = []
_handlers_installed = False


def _teardown_all():
    for lab in _LABS:
        try:
            lab.down()
        except Exception as e:  # pragma: no cover
            print(f"netlab: teardown error: {e}", file=sys.stderr)
    _LABS.clear()


def _on_signal(signum, frame):
    _teardown_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _register(lab: Lab):
    global _handlers_installed
    _LABS.append(lab)
    if not _handlers_installed:
        atexit.register(_teardown_all)
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(s, _on_signal)
        _handlers_installed = True


# ---------------------------------------------------------------------- iperf-like self test
IPERF_CODE = r"""
import socket, sys, time
mode, addr, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); got = 0; t0 = None; buf = bytearray(1 << 20)
    while got < nbytes:
        k = c.recv_into(buf)
        if not k: break
        if t0 is None: t0 = time.perf_counter()
        got += k
    dt = time.perf_counter() - t0
    c.sendall(b"k"); print(f"RESULT {got} {dt:.6f} {got * 8 / dt / 1e9:.4f}", flush=True)
else:
    for _ in range(200):
        try:
            c = socket.create_connection((addr, port)); break
        except OSError: time.sleep(0.05)
    buf = b"\0" * (1 << 20); sent = 0
    while sent < nbytes:
        c.sendall(buf); sent += len(buf)
    c.recv(1)
"""


def iperf(lab: Lab, nbytes: int, src: int = 1, dst: int = 0, port: int = 5201) -> float:
    """TCP stream from host src to host dst; returns measured Gbit/s at the receiver."""
    srv = lab.spawn(dst, [sys.executable, "-c", IPERF_CODE, "server", lab.addr(dst), str(port), str(nbytes)],
                    dict(os.environ), stdout=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "ready"
    cli = lab.spawn(src, [sys.executable, "-c", IPERF_CODE, "client", lab.addr(dst), str(port), str(nbytes)],
                    dict(os.environ))
    line = srv.stdout.readline()
    srv.wait(timeout=120)
    cli.wait(timeout=30)
    parts = line.split()
    if not parts or parts[0] != "RESULT":
        raise RuntimeError(f"iperf failed: {line!r}")
    return float(parts[3])


# ---------------------------------------------------------------------- CLI
def parse_rate(s: str | None) -> float | None:
    """'0.5' or '0.5gbit' or '500mbit' -> Gbit/s; 'none'/'0' -> None."""
    if s is None:
        return None
    t = s.strip().lower()
    if t in ("", "0", "none", "off", "unshaped"):
        return None
    for suf, mul in (("gbit", 1.0), ("mbit", 1e-3), ("g", 1.0), ("m", 1e-3)):
        if t.endswith(suf):
            return float(t[: -len(suf)]) * mul
    return float(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", choices=["up", "down", "rate", "run", "exec", "iperf", "show"])
    ap.add_argument("-n", "--hosts", type=int, default=4)
    ap.add_argument("-L", "--ranks-per-host", type=int, default=1,
                    help="run/exec: ranks per host (namespace); >1 sets NCCLZ_TOPO_HOST to the host's index")
    ap.add_argument("--rate", default=None, help="per-host NIC rate, Gbit/s (or 500mbit); none = unshaped")
    ap.add_argument("--prefix", default=DEFAULT_PREFIX)
    ap.add_argument("--subnet", default=DEFAULT_SUBNET, help="first three octets of the private /24")
    ap.add_argument("--no-ingress", action="store_true", help="shape only host egress")
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--bytes", type=int, default=64 << 20, help="iperf: bytes to send")
    ap.add_argument("--cleanup", action="store_true", help="remove leftovers with the prefix and exit")
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    require_root()
    if a.cleanup or a.command == "down":
        k = cleanup(a.prefix)
        print(f"netlab: {k} namespaces removed; left: {list_namespaces(a.prefix)}")
        return 0
    gbps = parse_rate(a.rate)
    if a.command == "up":
        lab = Lab(a.hosts, gbps, a.prefix, a.subnet, not a.no_ingress).up()
        lab.created = False  # keep it after exit
        _LABS.remove(lab)
        print(lab.describe())
        return 0
    if a.command in ("rate", "exec", "show"):
        existing = [n for n in list_namespaces(a.prefix) if "-h" in n]
        if not existing:
            sys.exit(f"netlab: no lab with prefix {a.prefix}: run `netlab.py up` first")
        lab = Lab(len(existing), gbps, a.prefix, a.subnet, not a.no_ingress)
        if a.command == "rate":
            lab.set_rate(gbps)
            print(lab.describe())
            return 0
        if a.command == "show":
            for n in sorted(existing) + [lab.sw]:
                print(n, _run(["ip", "netns", "exec", n, "tc", "qdisc", "show"], check=False).stdout.strip())
            return 0
        rc, _ = lab.exec_ranks(cmd, port=a.port, timeout=a.timeout, ranks_per_host=a.ranks_per_host)
        return rc
    if a.command == "run":
        if not cmd:
            ap.error("run needs a command after --")
        with Lab(a.hosts, gbps, a.prefix, a.subnet, not a.no_ingress) as lab:
            print(lab.describe(), file=sys.stderr)
            rc, _ = lab.exec_ranks(cmd, port=a.port, timeout=a.timeout, ranks_per_host=a.ranks_per_host)
        return rc
    if a.command == "iperf":
        with Lab(max(a.hosts, 2), gbps, a.prefix, a.subnet, not a.no_ingress) as lab:
            print(lab.describe())
            got = iperf(lab, a.bytes)
            print(f"iperf h1 -> h0: {a.bytes} bytes at {got:.3f} Gbit/s (shaped to {gbps or 'unshaped'})")
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
