// A hierarchical call's buffers and wires (see hier_call.hpp).
#include "core/hier_call.hpp"

#include "core/device_work.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

/// Raw slots of the wire's elements (the intra-host rings).
Wire raw(Wire w) {
  w.mode = prims::WireMode::Raw;
  w.stage = nullptr;
  return w;
}

/// A device rank's host sums quantized on the channel's stream (the
/// host path's quantize_buf, the same codes; an outlier, which the plan rules
/// out for inputs within the scanned statistics, fails the call as
/// LossyStage does), and the inter-host result dequantized.
class DeviceHostSums final : public algorithms::HostSumCodes {
 public:
  DeviceHostSums(DeviceWork& dw, ElemType t, const LossyPlan& plan, double out_step)
      : dw_(dw), t_(t), plan_(plan), out_step_(out_step) {}
  void quantize(int channel, const void* values, void* codes, size_t n) override {
    const size_t bad = dw_.quantize_on(channel, t_, plan_.eb, plan_.check_eb, plan_.limit, plan_.wide, values, n, codes,
                                       plan_.exact_check);
    if (bad) {
      throw Error("ncclz: " + std::to_string(bad) +
                  " element(s) of a host's sums do not fit the lossy grid although the call's statistics said they "
                  "would: was the input modified during the call?");
    }
  }
  void dequantize(int channel, const void* codes, void* values, size_t n) override {
    dw_.dequantize_on(channel, t_, plan_.wide, codes, n, out_step_, values);
  }

 private:
  DeviceWork& dw_;
  ElemType t_;
  const LossyPlan& plan_;
  double out_step_;
};

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
                              const Compression& c, int nch, CallState& call, bool no_rans, DeviceWork* dev) {
  const size_t cs = plan.wide ? 8 : 4;
  Wire values = raw(native_wire(t, Mode::None, cd.op, Compression{}));
  Wire codes = code_wire(t, plan.wide, cd.op, c);
  if (no_rans) codes.enc.allow_rans = false;  // what a device rank decodes
  HierChannels::Buffers b;
  b.src = cd.send;
  b.dst = cd.recv;
  if (dev) {
    // The host sums' codes in device buffers of their own, made and read
    // back between the phases (or the rounds' pieces) on each channel's
    // stream.
    values.device = codes.device = dev;
    DeviceHostSums q(*dev, elem_of(t), plan, out_step);
    if (cd.coll == Coll::AllReduce) {
      b.mid = dev->codes(0, cd.count * cs);
    } else {
      const size_t blocks = size_t(rt.topo.nhosts) * cd.split;
      b.work = dev->codes(1, blocks * dsize(t));
      b.mid = dev->codes(0, (blocks + cd.split) * cs);
      b.mid_out = static_cast<uint8_t*>(b.mid) + blocks * cs;
    }
    b.codes = &q;
    rt.hier->run_schedule(rt.channels, cd, b, values, codes, nch, call);
    return;
  }
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
  codes.stage = &stage;
  rt.hier->run_schedule(rt.channels, cd, b, values, codes, nch, call);
}

void run_hier_codes(Runtime& rt, const Collective& cd, const void* codes, void* out_codes, const Wire& w, int nch,
                    CallState& call) {
  HierChannels::Buffers b;
  b.src = codes;
  b.dst = out_codes;
  rt.hier->run_schedule(rt.channels, cd, b, raw(w), w, nch, call);
}

}  // namespace ncclz::core
