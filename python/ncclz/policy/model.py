"""The cost model: predicted time of one collective call per mode.

Per rank, ring algorithms, times in seconds; S = the nccl-tests "size" in bytes (all_gather and gather: the output, scatter: the root's
input, all_to_all: each rank's input)::

    wire  W = f_wire * S                        f_wire: all_reduce 2(n-1)/n, reduce_scatter and
                                                all_gather (n-1)/n, broadcast 1, reduce 1 (the
                                                chain: every link carries the message once),
                                                gather and scatter (n-1)/n (the root's link),
                                                all_to_all (n-1)/n (each rank's own links)
    T_none = steps * alpha + W / B              B = link bytes/s * goodput (0.95, TCP/IP headers)
    T_mode = steps * alpha + max(t_net, t_cpu) + (1 - overlap) * min(t_net, t_cpu) + t_fixed
        t_net = W / (ratio * B)
        t_cpu = (f_enc * S / enc_Bps + f_dec * S / dec_Bps) / cores_per_rank
        f_enc, f_dec: bytes each rank encodes / decodes (all_reduce 1 and 2(n-1)/n,
                      reduce_scatter (n-1)/n and (n-1)/n, all_gather 1/n and (n-1)/n,
                      broadcast 1 (root) and 1, reduce 1 and 1 (a middle rank of the
                      chain), gather 1/n and (n-1)/n (the root decodes),
                      scatter (n-1)/n and 1/n (the root encodes),
                      all_to_all (n-1)/n and (n-1)/n)
        t_fixed = S / quant_Bps for lossy (the quantize / dequantize passes), 0 otherwise;
                  S / (8 quant_Bps) for lossy sums of mostly-zero data (lists of nonzeros)
        overlap = 0.25: how much of the shorter of network and codec time hides under the longer;
        conservative (the netlab runs on a shared 2-core VM measured 0.1 .. 0.6)

ratio, enc_Bps and dec_Bps come from a :class:`~ncclz.policy.calibration.Calibration`.

**Algorithms** (``algorithm=``, :data:`ALGORITHMS`). The formulas above are the flat ring's: on H hosts
of L ranks the ring crosses each host's link once per channel, so the slowest link carries
f_wire(n) * S. The hierarchical algorithm (docs/ALGORITHMS.md) runs three phases: an exact
intra-host phase, the compressed inter-host ring among the H ranks of one local rank (each carrying
1/L of the data, L of them sharing each host's link), and the intra-host distribution. all_reduce,
reduce_scatter and all_gather run them in rounds (docs/ALGORITHMS.md, "Rounds"): the intra-host
work of a round runs while pieces cross the network, beside the inter-host ring's codec on the
rank's cores, and only a round's worth of it (ROUND_BYTES of the rank's share) before and after;
broadcast runs its two chains interleaved, counted one after the other here::

    T_hier = steps_h * alpha + T_inter(t_cpu + t_intra) + t_intra * min(1, ROUND_BYTES / (S/L))   (rounds)
    T_hier = steps_h * alpha + t_intra + T_inter                                                 (broadcast)
      t_intra = f_intra(L) * S / (intra_Bps * cores_per_rank)   f_intra: all_reduce 2(L-1)/L,
                reduce_scatter and all_gather (L-1)/L, broadcast 1 (raw copies and reductions
                through shared memory)
      T_inter = the ring formula with n = H ranks on the host link: t_net = f_wire(H) * S / (ratio * B)
                (L rings of S/L each), t_cpu with the codec factors of H ranks on S/L per rank (broadcast:
                the relaying rank codes all of S), t_fixed on S/L (reductions: each rank quantizes its
                host's sum of its own block)
      steps_h = the ring steps of L ranks (intra) plus those of H ranks (inter)

**Device calls** (``device=True``: CUDA arrays the runtime codes on the GPU, docs/GPU.md): the codec
runs on the device, not on the rank's cores, so t_cpu uses ``device_codec_Bps`` for encoding and
decoding (one device: cores = 1), t_fixed ``device_quant_Bps``, and a hierarchical call's intra-host
phases ``device_intra_Bps`` (raw slices through host memory: a copy from and to the device per
byte). The ratio is the calibration's, taken without rANS (the device has no rANS coder). These
speeds are assumptions, set well below the kernels' measured rates (an H200 in
bench/results/gpu.md: slice encode 440-580 GB/s, decode 310-680 GB/s) for the per-slice launches
and synchronisations of the device path; measured call times replace the model as for host calls.

A lossy sum's ratio depends on the algorithm: the ring quantizes with E/n, the hierarchical
algorithm with E/H, so its calibration is taken at L times the bound (the caller's job:
:meth:`~ncclz.policy.Policy.choose` does it). A latency-optimised algorithm is one more entry of
:data:`ALGORITHMS` with its own formula here.
"""

from __future__ import annotations

import dataclasses

WIRE_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}
# (bytes encoded, bytes decoded) per rank as a multiple of S
CODEC_FACTOR = {
    "all_reduce": lambda n: (1.0, 2.0 * (n - 1) / n),
    "reduce_scatter": lambda n: ((n - 1) / n, (n - 1) / n),
    "all_gather": lambda n: (1.0 / n, (n - 1) / n),
    "broadcast": lambda n: (1.0, 1.0),
    "reduce": lambda n: (1.0, 1.0),
    "gather": lambda n: (1.0 / n, (n - 1) / n),
    "scatter": lambda n: ((n - 1) / n, 1.0 / n),
    "all_to_all": lambda n: ((n - 1) / n, (n - 1) / n),
}
STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
    "reduce": lambda n: n - 1,
    "gather": lambda n: n - 1,
    "scatter": lambda n: n - 1,
    "all_to_all": lambda n: n - 1,
}
#: How much faster the API-layer passes of a lossy sum of mostly-zero data run than quant_Bps (the
#: dense quantize / dequantize): the scan lists the nonzeros, only they are quantized, and the
#: output is written from the lists (measured on this project's 2-core VM: scan ~20 GB/s, output
#: write ~25 GB/s, against ~2 GB/s for the dense passes).
SPARSE_PASS_SPEEDUP = 8.0
#: The collectives the model knows.
COLLECTIVES = tuple(WIRE_FACTOR)
#: The algorithms the model predicts (the runtime's Algorithm, docs/ALGORITHMS.md).
ALGORITHMS = ("ring", "hierarchical")
# the collectives whose hierarchical schedule runs in rounds, and a round's bytes of a rank's share
ROUNDS = ("all_reduce", "reduce_scatter", "all_gather")
ROUND_BYTES = 1 << 20
# bytes each rank sends on the intra-host links of a hierarchical call, as a multiple of S (L ranks per host)
INTRA_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


@dataclasses.dataclass
class CostModel:
    """The model's constants (see the module doc for the formulas)."""

    alpha_s: float = 50e-6  # per ring step
    goodput: float = 0.95  # of the link rate
    overlap: float = 0.25
    quant_Bps: float = 2e9  # the dense quantize / dequantize passes, per core
    intra_Bps: float = 4e9  # a hierarchical call's intra-host phases (raw copies and reductions), per core
    alpha_intra_s: float = 20e-6  # per intra-host ring step
    device_codec_Bps: float = 100e9  # device calls: slice encode and decode on the GPU (module doc)
    device_quant_Bps: float = 300e9  # device calls: the quantize / dequantize passes
    device_intra_Bps: float = 10e9  # device calls: a hierarchical call's intra-host phases (via host memory)

    def link_Bps(self, link_gbps: float) -> float:
        return link_gbps * 1e9 / 8 * self.goodput

    def predict(self, coll: str, n: int, nbytes: int, link_gbps: float, cores: float, cal=None,
                lossy: bool = False, mostly_zero: bool = False, algorithm: str = "ring",
                hosts: int | None = None, device: bool = False) -> float:
        """Predicted seconds of a call: uncompressed (cal None) or coded with the calibration `cal`;
        `algorithm` one of :data:`ALGORITHMS` on `hosts` hosts of n / hosts ranks (the ring: any);
        `device`: coded on the GPU (the module doc's device speeds instead of `cores` and the
        calibration's)."""
        quant, intra = self.quant_Bps, self.intra_Bps
        if device:
            cores, quant, intra = 1.0, self.device_quant_Bps, self.device_intra_Bps
            if cal is not None:
                cal = dataclasses.replace(cal, enc_Bps=self.device_codec_Bps, dec_Bps=self.device_codec_Bps)
        if coll not in WIRE_FACTOR:
            raise ValueError(f"unknown collective {coll!r}; one of {', '.join(COLLECTIVES)}")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")
        if n <= 1:
            return 0.0
        if algorithm == "ring" or not hosts or hosts <= 1 or hosts >= n:
            return self._ring(coll, n, nbytes, nbytes, link_gbps, cores, cal, lossy, mostly_zero, quant=quant)
        H = int(hosts)
        L = n / H
        # the inter-host ring: H ranks, each on S/L of the data (broadcast: the relay codes all of S)
        share = nbytes if coll == "broadcast" else nbytes / L
        # all_gather and broadcast dequantize the whole output after the call (codes move everywhere)
        fix = nbytes if coll in ("all_gather", "broadcast") else share
        t_intra = INTRA_FACTOR[coll](L) * nbytes / (intra * cores)
        lat = STEPS[coll](L) * self.alpha_intra_s
        if coll in ROUNDS:
            fill = t_intra * min(1.0, ROUND_BYTES / share)
            inter = self._ring(coll, H, nbytes, share, link_gbps, cores, cal, lossy, mostly_zero, fix, quant=quant,
                               beside_s=t_intra - fill)
            return lat + fill + inter
        inter = self._ring(coll, H, nbytes, share, link_gbps, cores, cal, lossy, mostly_zero, fix, quant=quant)
        return lat + t_intra + inter

    def _ring(self, coll: str, n: int, wire_bytes: float, codec_bytes: float, link_gbps: float, cores: float,
              cal, lossy: bool, mostly_zero: bool, fix_bytes: float | None = None, quant: float = 0.0,
              beside_s: float = 0.0) -> float:
        """A ring of n ranks whose slowest link carries f_wire(n) * wire_bytes and whose ranks each code
        codec_bytes of data and quantize / dequantize fix_bytes (default codec_bytes) at `quant`
        bytes/s (default quant_Bps): the module doc's formulas. `beside_s`: CPU seconds of other work
        the rank does between the ring's steps (a hierarchical call's intra-host rounds)."""
        quant = quant or self.quant_Bps
        B = self.link_Bps(link_gbps)
        W = WIRE_FACTOR[coll](n) * wire_bytes
        lat = STEPS[coll](n) * self.alpha_s
        if cal is None:
            t_net = W / B
            return lat + max(t_net, beside_s) + (1 - self.overlap) * min(t_net, beside_s)
        fe, fd = CODEC_FACTOR[coll](n)
        t_net = W / (max(cal.ratio, 1e-3) * B)
        t_cpu = (fe * codec_bytes / cal.enc_Bps + fd * codec_bytes / cal.dec_Bps) / cores + beside_s
        # a lossy sum of mostly-zero data quantizes and writes out lists of nonzeros: its passes run
        # at about memory speed (the statistics scan and the output write), not quant_Bps
        fix = codec_bytes if fix_bytes is None else fix_bytes
        t_fix = fix / (quant * (SPARSE_PASS_SPEEDUP if mostly_zero else 1)) / cores if lossy else 0.0
        return lat + max(t_net, t_cpu) + (1 - self.overlap) * min(t_net, t_cpu) + t_fix
