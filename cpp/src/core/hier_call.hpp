// A hierarchical call's buffers and wires (core/hier_channels.hpp runs it):
// what each phase moves, in which element type and on which wire.
//
// Every hierarchical call moves raw slots inside a host (no coding, no
// quantization: reductions there are exact in the user type) and the call's
// wire between hosts:
//
//   none, lossless   the user's values between hosts too (raw, or the
//                    lossless coder); the same reductions in the same order as
//                    none, so lossless is bit-identical to none.
//   lossy reduction  (all_reduce, reduce_scatter) the hosts' values are
//                    quantized, slice by slice, as the inter-host ring first
//                    reads them (a core::LossyStage over the host's sums:
//                    all_reduce's in the output, reduce_scatter's in a work
//                    buffer) and the ring reduces codes; its final slices are
//                    dequantized into the output as they complete. The bound
//                    is split among H hosts (bound::plan_lossy_hier).
//   lossy movement   (all_gather, broadcast) every value is quantized once by
//                    its owner before the call and the codes move everywhere
//                    (raw inside hosts, coded between them); every rank
//                    dequantizes its output after it, so all end with the
//                    owner's codes' values.
#pragma once

#include "core/collective.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "core/runtime.hpp"

namespace ncclz::core {

/// none / lossless: the user's values, on the inter-host wire `inter`
/// (native_wire of the call's mode); inside hosts the same values raw. A
/// device rank (inter.device) runs both rings on its device.
void run_hier_values(Runtime& rt, const Collective& cd, DataType t, const Wire& inter, int nch, CallState& call);

/// A lossy all_reduce or reduce_scatter with the hierarchical plan; out_step:
/// the output grid's step (2 eb, or 2 eb / N for a mean). no_rans: a rank
/// of the call codes on a device (the codes go without rANS). `dev`: this
/// rank's buffers are on that device, where it runs: both rings there, the
/// host sums quantized whole between the phases (algorithms::HostSumCodes)
/// instead of slice by slice in a stage (a max / min's host values as a
/// sum's: their codes' max / min on the inter-host ring).
void run_hier_lossy_reduction(Runtime& rt, const Collective& cd, DataType t, const LossyPlan& plan, double out_step,
                              const Compression& c, int nch, CallState& call, bool no_rans = false,
                              DeviceWork* dev = nullptr);

/// A lossy all_gather or broadcast on codes quantized beforehand: `codes`
/// (the input's) to `out_codes` (broadcast: the same buffer), on the
/// inter-host wire `w` (the codes' wire; inside hosts the same codes raw; a
/// device rank's with w.device).
void run_hier_codes(Runtime& rt, const Collective& cd, const void* codes, void* out_codes, const Wire& w, int nch,
                    CallState& call);

}  // namespace ncclz::core
