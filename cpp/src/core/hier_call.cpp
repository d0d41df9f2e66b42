// A hierarchical call's buffers and wires (see hier_call.hpp).
#include "core/hier_call.hpp"

#include "core/device_work.hpp"

namespace ncclz::core {
namespace {

/// Raw slots of the wire's elements (the intra-host rings).
Wire raw(Wire w) {
  w.mode = prims::WireMode::Raw;
  w.stage = nullptr;
  return w;
}

}  // namespace

void run_hier_values(Runtime& rt, const Collective& cd, DataType t, const Wire& inter, int nch, CallState& call) {
  HierChannels::Buffers b;
  b.src = cd.send;
  b.dst = cd.recv;
  b.mid = cd.recv;
  if (cd.coll == Coll::ReduceScatter) {
    // The host's sums of this local rank's H blocks, then reduced between hosts.
    const size_t bytes = size_t(rt.topo.nhosts) * cd.split * dsize(t);
    b.work = inter.device ? inter.device->codes(0, bytes) : rt.work[0].get(bytes);
    b.mid = b.work;
    b.mid_out = cd.recv;
  }
  rt.hier->run_schedule(rt.channels, cd, b, raw(inter), inter, nch, call);
}

void run_hier_lossy_reduction(Runtime& rt, const Collective& cd, DataType t, const LossyPlan& plan, double out_step,
                              const Compression& c, int nch, CallState& call) {
  const size_t cs = plan.wide ? 8 : 4;
  const Wire values = raw(native_wire(t, Mode::None, cd.op, Compression{}));
  HierChannels::Buffers b;
  b.src = cd.send;
  b.dst = cd.recv;
  // The code buffers are address ranges for the schedule (the stage quantizes
  // each slice into a buffer of its own and dequantizes final slices straight
  // into the output); only reduce_scatter's host sums need memory of their own.
  const void* x = cd.recv;  // all_reduce: the host's sums are in the output
  void* out_codes = nullptr;
  if (cd.coll == Coll::AllReduce) {
    b.mid = rt.work[0].get(cd.count * cs);
    out_codes = b.mid;
  } else {
    const size_t blocks = size_t(rt.topo.nhosts) * cd.split;
    b.work = rt.work[1].get(blocks * dsize(t));
    b.mid = rt.work[0].get((blocks + cd.split) * cs);  // the host sums' codes, then the output's
    b.mid_out = static_cast<uint8_t*>(b.mid) + blocks * cs;
    x = b.work;
    out_codes = b.mid_out;
  }
  LossyStage stage(t, plan, x, b.mid, cd.recv, out_codes, out_step);
  Wire codes = code_wire(t, plan.wide, cd.op, c);
  codes.stage = &stage;
  rt.hier->run_schedule(rt.channels, cd, b, values, codes, nch, call);
}

void run_hier_codes(Runtime& rt, const Collective& cd, DataType t, bool wide, const void* codes, void* out_codes,
                    const Compression& c, int nch, CallState& call) {
  const Wire w = code_wire(t, wide, cd.op, c);
  HierChannels::Buffers b;
  b.src = codes;
  b.dst = out_codes;
  rt.hier->run_schedule(rt.channels, cd, b, raw(w), w, nch, call);
}

}  // namespace ncclz::core
