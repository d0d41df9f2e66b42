"""The link of ranks on one host: memory, and how fast the policy takes it to be.

When every rank of a communicator sits on one host and the transport between them is memory-class
(shared memory between processes, the heap between threads: ``Topology.intra_link`` "shm" or
"inproc" with ``hosts == 1``), an uncompressed call moves its bytes with memory copies, so the link
is as fast as memory. Compressing cannot pay there: the codec reads every raw byte and writes the
coded ones, at a few GB/s per core, to save copies that run at memory speed.

No codec beats the copies (:meth:`~ncclz.policy.Policy.exact_on_memory`): the uncompressed call
moves each byte with memory copies (the direct schedules of all_reduce, reduce_scatter, all_gather
and broadcast read each peer byte once, straight from the peer's buffer; the others copy through
the shared-memory slots), and a compressed call of the same bytes must still read every raw byte
to code it and write every result byte when it decodes, as the copies do, and compute besides. So
for host calls with no configured rate (``link_gbps=``, NCCLZ_LINK_GBPS,
NCCLZ_SOCKET_THROTTLE_GBPS) :class:`~ncclz.policy.Policy` answers none by rule, whatever the data,
without calibrating the codec or timing a memcpy: a lossy or lossless request's first call costs
what a later one does (bench/results/policy_one_host.md: before the rule the first call of each
request calibrated three lossy codec efforts and lossless, 30-150 ms). Measured times win over
the rule as over the model: once a compressed mode has a measured time for the call's size class
(a call forced with ``policy="off"``), the model below decides that size class.

The model, where it decides (a measured compressed mode, device calls): without a configured rate
and before any uncompressed call was observed it takes the link to be :func:`memory_link_gbps`,
not unknown. The rate, measured once per process (:func:`memcpy_Bps`): a single-threaded copy of
8 MiB between two buffers this process allocates (``numpy.copyto``, one untimed copy to fault the
pages in, then the best of 3), halved: the shared-memory slots copy each byte twice (into the slot,
out of it) and the direct two hops' cross-memory copy costs about two memcpys per byte
(bench/results/latency.md, "Direct two hops"). About 40 ms on this project's 2-core VM (most of it
the page faults), once, on rank 0, at the first call the model decides with it; 13-15 GB/s there,
so 52-60 Gbit/s.
A call takes that rate times the cores the model gives its codec (``Policy.cores``: the rank's share
of the CPUs, capped at the channel count): an exact call's copies run on the channels' threads as
the codec would, and per core a memcpy is several times faster than the codec, so no core count
makes compressing look faster than copying (4 ranks on 2 CPUs: 0.5 cores, 29.6 Gbit/s, against the
20-27 Gbit/s of the 64 MiB uncompressed all_reduce, 30-40 ms; bench/results/policy_one_host.md).
Uncompressed calls it then observes (:meth:`~ncclz.policy.Policy.observe_link`) replace it where
they are faster; a slower one does not lower it: on memory the CPU slowed that call (cold pages,
other load, a short call's latency; a cold first all_reduce of 1.5 MiB on 2 ranks here observed
0.74 Gbit/s, which made a lossy all_gather look faster), and the CPU slows the codec as much.

Device calls (CUDA arrays coded on the GPU) on such a host: an uncompressed call's slices move
between the devices and page-locked host slots by DMA (PCIe; CUDA IPC peer memory where wired) and
never through a host memcpy, so the host's memcpy is not their link. They take
:data:`DEVICE_MEMORY_GBPS` instead: an assumption (no GPU measured it), the rate of one direction of
PCIe 5.0 x16, about 50 GB/s, the slowest path an exact device call's bytes take between ranks of
one host (NVLink and a device's own memory, 2 TB/s for a device-to-device copy on the H200 of
bench/results/gpu.md, are faster). At that rate the model's device codec (100 GB/s encode and decode,
:class:`~ncclz.policy.model.CostModel`) is not predicted 20% faster than the exact call on 2 to 8
ranks (about as fast: 2.3 against 2.4 ms for 64 MiB on 4 ranks at a ratio of 20), so device
requests run none first; once none is measured, the requested mode is measured too where the model
puts it within 2x of none's measured time (the policy's probe), and the faster measurement wins.

Sockets on one host (loopback) are not memory-class: the topology cannot tell a loopback from
links that are shaped (NCCLZ_SOCKET_THROTTLE_GBPS, which is link evidence of its own) or that join
network namespaces of one kernel, which share a host name and boot id (the network lab's hosts with
one rank each, bench/netlab/netlab.py: one host to the topology, its links tc-shaped to 0.5-10
Gbit/s). There the policy keeps learning the rate from uncompressed calls, as on any link.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: Topology.intra_link values that are memory-class, and how the policy's reasons name them.
MEMORY_LINKS = {"shm": "one host over shared memory", "inproc": "one host, ranks as threads of one process"}
#: The link rate device calls take on a memory-class host (Gbit/s; the module doc: PCIe 5.0 x16, assumed).
DEVICE_MEMORY_GBPS = 400.0
#: Bytes :func:`memcpy_Bps` copies.
SAMPLE_BYTES = 8 << 20

_memcpy_Bps: float | None = None


def memory_link(topology: Any, world_size: int) -> str:
    """"shm" or "inproc" where all `world_size` > 1 ranks share one host joined by that memory-class
    transport (`topology`: an :class:`ncclz.Topology`, None: unknown), else ""."""
    if topology is None or world_size <= 1:
        return ""
    if int(getattr(topology, "hosts", 0) or 0) != 1:
        return ""
    kind = str(getattr(topology, "intra_link", "") or "")
    return kind if kind in MEMORY_LINKS else ""


def memcpy_Bps(nbytes: int = SAMPLE_BYTES, reps: int = 3) -> float:
    """Bytes/s of a single-threaded copy of `nbytes` on this machine: one untimed copy, then the best
    of `reps`. Measured on the first call and cached for the process."""
    global _memcpy_Bps
    if _memcpy_Bps is None:
        src = np.ones(max(1, nbytes // 4), np.float32)
        dst = np.empty_like(src)
        np.copyto(dst, src)  # faults the pages in
        best = float("inf")
        for _ in range(max(1, reps)):
            t = time.perf_counter()
            np.copyto(dst, src)
            best = min(best, time.perf_counter() - t)
        _memcpy_Bps = src.nbytes / max(best, 1e-9)
    return _memcpy_Bps


def memory_link_gbps() -> float:
    """The link rate (Gbit/s) host calls on a memory-class host take: half a memcpy (module doc)."""
    return memcpy_Bps() / 2 * 8 / 1e9
