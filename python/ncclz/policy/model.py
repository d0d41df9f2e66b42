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


@dataclasses.dataclass
class CostModel:
    """The model's constants (see the module doc for the formulas)."""

    alpha_s: float = 50e-6  # per ring step
    goodput: float = 0.95  # of the link rate
    overlap: float = 0.25
    quant_Bps: float = 2e9  # the dense quantize / dequantize passes, per core

    def link_Bps(self, link_gbps: float) -> float:
        return link_gbps * 1e9 / 8 * self.goodput

    def predict(self, coll: str, n: int, nbytes: int, link_gbps: float, cores: float, cal=None,
                lossy: bool = False, mostly_zero: bool = False) -> float:
        """Predicted seconds of a call: uncompressed (cal None) or coded with the calibration `cal`."""
        if coll not in WIRE_FACTOR:
            raise ValueError(f"unknown collective {coll!r}; one of {', '.join(COLLECTIVES)}")
        if n <= 1:
            return 0.0
        B = self.link_Bps(link_gbps)
        W = WIRE_FACTOR[coll](n) * nbytes
        lat = STEPS[coll](n) * self.alpha_s
        if cal is None:
            return lat + W / B
        fe, fd = CODEC_FACTOR[coll](n)
        t_net = W / (max(cal.ratio, 1e-3) * B)
        t_cpu = (fe * nbytes / cal.enc_Bps + fd * nbytes / cal.dec_Bps) / cores
        # a lossy sum of mostly-zero data quantizes and writes out lists of nonzeros: its passes run
        # at about memory speed (the statistics scan and the output write), not quant_Bps
        t_fix = nbytes / (self.quant_Bps * (SPARSE_PASS_SPEEDUP if mostly_zero else 1)) / cores if lossy else 0.0
        return lat + max(t_net, t_cpu) + (1 - self.overlap) * min(t_net, t_cpu) + t_fix
