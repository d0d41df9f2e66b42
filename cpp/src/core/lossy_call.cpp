// The lossy orchestration (see lossy_call.hpp).
#include "core/lossy_call.hpp"

#include <algorithm>
#include <cmath>

#include "base/env.hpp"
#include "base/log.hpp"
#include "base/trace.hpp"
#include "core/codec_choice.hpp"
#include "core/device_call.hpp"
#include "core/hier_call.hpp"
#include "core/persistent_call.hpp"
#include "prims/reduce.hpp"

namespace ncclz::core {

LossyCall::LossyCall(Runtime& rt, const Collective& cd, DataType t, const Compression& c, int nch, CallState& call)
    : rt_(rt), cd_(cd), t_(t), c_(c), nch_(nch), call_(call) {}

void LossyCall::describe(CallDesc& d) {
  trace::Scope ev("describe_stats");
  ev.arg("count", double(cd_.in_count)).arg("on_device", cd_.device >= 0 ? 1.0 : 0.0);
  const auto t0 = Clock::now();
  if (cd_.input_here && cd_.device >= 0) {
    put_stats(d, device_work(rt_, cd_.device).scan(elem_of(t_), cd_.send, cd_.in_count));
  } else if (cd_.input_here) {
    // Sums of a mostly-zero input: the scan lists its nonzeros, and the
    // staged path carries them as lists (LossyStage::prepare_nonzeros), where
    // the wire codec may be Sparse (an unknown name is an argument error).
    bool known = false;
    const auto choice = parse_codec(c_.codec, &known);
    const bool sparse_codec =
        choice == codec::EncodeOptions::Choice::Auto || choice == codec::EncodeOptions::Choice::Sparse;
    if (cd_.sums() && rt_.cfg.sparse_input && rt_.nranks > 1 && sparse_codec) index_ = &rt_.nonzeros;
    put_stats(d, scan(t_, cd_.send, cd_.in_count, rt_.pool.get(), nch_, index_));
    if (index_ && index_->covers_all()) {
      const double per1024 = std::ceil(1024.0 * double(index_->listed()) / double(std::max<size_t>(1, cd_.in_count)));
      d.density = uint8_t(std::clamp(per1024, 1.0, 255.0));
    }
  }
  call_.quantize_s += seconds(t0, Clock::now());
}

bool LossyCall::mostly_zero(const std::vector<CallDesc>& all) {
  double total = 0;
  for (const CallDesc& d : all) {
    if (d.density == 0) return false;
    total += d.density;
  }
  return total <= 1024.0 * (1.0 - codec::EncodeOptions{}.sparse_fast_zeros);
}

double LossyCall::out_step(const LossyPlan& plan) const {
  return cd_.how == Combine::Mean ? 2 * plan.eb / double(rt_.nranks) : 2 * plan.eb;
}

bool LossyCall::any_outliers(const std::vector<CallDesc>& all, size_t outliers) {
  trace::Scope ev("any_outliers");
  ev.arg("outliers", double(outliers));
  return rt_.protocol.any_outliers(all[0].seq, outliers, call_);
}

bool LossyCall::outlier_round(const std::vector<CallDesc>& all) { return any_flag(all, kEagerQuantize); }

int64_t LossyCall::quantizer_limit(const LossyPlan& plan, bool round) const {
  // Test hook (NCCLZ_TEST_OUTLIER=<rank>): that rank's quantizer on the
  // planned path allows code 0 only, so its nonzero values become the
  // outliers the plan said could not happen.
  if (!round && env::get_int("NCCLZ_TEST_OUTLIER", -1) == rt_.rank) return 0;
  return plan.limit;
}

bool LossyCall::settle_outliers(const std::vector<CallDesc>& all, bool round, size_t outliers) {
  if (round) return any_outliers(all, outliers);
  if (outliers == 0) return false;
  // Before any of this rank's codes left it: this rank raises, and the
  // communicator's abort fails the call on every other rank (Aborted, with
  // this note) instead of letting them finish with the outliers' zero codes.
  const std::string why = std::string(coll_name(cd_.coll)) + " (lossy call #" + std::to_string(all[0].seq) +
                          "): " + std::to_string(outliers) + " input element(s) of rank " + std::to_string(rt_.rank) +
                          " do not fit the lossy grid although the call's statistics said they would (was the input "
                          "modified during the call?)";
  rt_.fail(why);
  throw Error("ncclz rank " + std::to_string(rt_.rank) + ": " + why +
              "; the call was cancelled and the communicator aborted on every rank");
}

bool LossyCall::any_flag(const std::vector<CallDesc>& all, uint8_t flag) {
  for (const CallDesc& d : all) {
    if (d.flags & flag) return true;
  }
  return false;
}

Wire LossyCall::codes_wire(bool wide, const std::vector<CallDesc>& all) const {
  Wire w = code_wire(t_, wide, cd_.op, c_);
  if (any_device(all)) {
    w.enc.allow_rans = false;  // what a device rank decodes
    // The larger slices where the links have them (NCCLZ_SPARSE_SLICE_BYTES):
    // a device rank's cost per slice is launches and stream syncs, so fewer,
    // larger slices (every rank the same: each sees every descriptor).
    if (rt_.cfg.sparse_slice_bytes > rt_.cfg.slot_bytes) w.slice_bytes = rt_.cfg.sparse_slice_bytes;
  }
  return w;
}

void LossyCall::run(const std::vector<CallDesc>& all, HostStaging& staging) {
  const DataStats g = merge_stats(all);
  const double E = resolve_bound(c_, g);
  // Hierarchical calls quantize each host's combined values (its sum, or max /
  // min) once: their own budget (core/hier_call.hpp).
  const bool hier = cd_.algorithm == Algorithm::Hierarchical;
  LossyPlan plan = hier ? plan_lossy_hier(elem_of(t_), cd_.how, rt_.topo.nhosts, rt_.topo.local_size, E, g)
                        : plan_lossy(elem_of(t_), cd_.how, rt_.nranks, E, g);
  apply_min_bytes(plan, c_, cd_.message * dsize(t_));
  call_.bound = call_.requested = E;
  // Device buffers: a compressed call codes on the device, on the flat
  // schedules and the hierarchical ones (movement: the codes quantized
  // before; reductions: the host's sums or max / min quantized between the
  // phases), its codes summed or, for a max / min, their max / min taken
  // there (DeviceSliceCodec::set_value_reduction); every other path (the
  // exact one, one rank) runs on host copies (core/device_call.hpp).
  const bool device_run = cd_.device >= 0 && plan.compress && rt_.nranks > 1;
  if (cd_.device >= 0 && !device_run) staging.begin();
  if (plan.compress && hier && cd_.reduces) {
    run_hier_lossy_reduction(rt_, cd_, t_, plan, out_step(plan), c_, nch_, call_, any_device(all),
                             device_run ? &device_work(rt_, cd_.device) : nullptr);
    call_.on_device = device_run;
    return;
  }
  if (device_run) {
    run_device(plan, all, staging);
    return;
  }
  // Staged unless a rank asked for the eager path or codes on the device
  // (the same path on every rank: the CPU ranks of a mixed call quantize
  // eagerly and hold the device ranks' rounds: outlier_round).
  if (plan.compress && !hier && rt_.nranks > 1 && !any_flag(all, kEagerQuantize) && !any_device(all)) {
    run_staged(plan, all);
    return;
  }
  void* codes = nullptr;
  void* out_codes = nullptr;
  if (plan.compress) {
    const auto t1 = Clock::now();
    const size_t cs = plan.wide ? 8 : 4;
    codes = rt_.work[0].get(cd_.in_count * cs);
    out_codes = cd_.codes_in_place ? codes : rt_.work[1].get(cd_.out_count * cs);
    const bool round = outlier_round(all);
    size_t outliers = 0;
    if (cd_.input_here) {
      trace::Scope ev("quantize");
      ev.arg("count", double(cd_.in_count));
      LossyPlan q = plan;
      q.limit = quantizer_limit(plan, round);
      outliers = quantize_buf(t_, q, cd_.send, cd_.in_count, codes, rt_.pool.get(), nch_);
    }
    call_.quantize_s += seconds(t1, Clock::now());
    if (settle_outliers(all, round, outliers)) {
      plan.compress = false;
      plan.why_not = "quantizer outliers";
    }
  }
  if (!plan.compress) {
    run_exact(plan, all);
    return;
  }
  if (hier) {
    run_hier_codes(rt_, cd_, codes, out_codes, codes_wire(plan.wide, all), nch_, call_);
  } else {
    rt_.channels.run_schedule(cd_, codes, out_codes, codes_wire(plan.wide, all), nch_, call_);
  }
  dequantize_output(plan, out_codes);
}

void LossyCall::run_device(LossyPlan plan, const std::vector<CallDesc>& all, HostStaging& staging) {
  DeviceWork& dw = device_work(rt_, cd_.device);
  const auto t1 = Clock::now();
  const size_t cs = plan.wide ? 8 : 4;
  void* codes = dw.codes(0, cd_.in_count * cs);
  void* out_codes = cd_.codes_in_place ? codes : dw.codes(1, cd_.out_count * cs);
  // The host waits for the quantizer (the channels' encodes, on their own
  // streams, read its codes next) and reads its count from page-locked
  // memory; the ranks hold the round only where one asked for the eager
  // quantize (outlier_round), else settle_outliers is this rank's own check.
  const bool round = outlier_round(all);
  size_t outliers = 0;
  if (cd_.input_here) {
    trace::Scope ev("quantize");
    ev.arg("count", double(cd_.in_count)).arg("on_device", 1.0);
    outliers = dw.quantize(elem_of(t_), plan.eb, plan.check_eb, quantizer_limit(plan, round), plan.wide, cd_.send,
                           cd_.in_count, codes, plan.exact_check);
  }
  call_.quantize_s += seconds(t1, Clock::now());
  if (settle_outliers(all, round, outliers)) {
    plan.compress = false;
    plan.why_not = "quantizer outliers";
    staging.begin();
    run_exact(plan, all);
    return;
  }
  Wire w = codes_wire(plan.wide, all);
  w.device = &dw;
  const codec::ElemType code_type = plan.wide ? codec::ElemType::I64 : codec::ElemType::I32;
  if (cd_.algorithm == Algorithm::Hierarchical) {
    run_hier_codes(rt_, cd_, codes, out_codes, w, nch_, call_);
  } else if (persistent_eligible(rt_, cd_, all, code_type, true)) {
    // Every rank's buffers on a device: the Coded ring on the persistent kernels (core/persistent_call.hpp).
    run_persistent(rt_, cd_, code_type, true, codes, out_codes, cd_.in_count, nch_, dsize(t_), call_);
  } else {
    rt_.channels.run_schedule(cd_, codes, out_codes, w, nch_, call_);
  }
  // As dequantize_output: the output but this rank's own block (the routine copies it).
  trace::Scope ev("dequantize");
  ev.arg("count", double(cd_.out_count)).arg("on_device", 1.0);
  const auto t2 = Clock::now();
  const size_t es = dsize(t_), a = cd_.self_count ? cd_.self_dst : cd_.out_count, b = a + cd_.self_count;
  const auto* q = static_cast<const uint8_t*>(out_codes);
  auto* out = static_cast<uint8_t*>(cd_.recv);
  dw.dequantize(elem_of(t_), plan.wide, q, a, out_step(plan), out);
  if (b < cd_.out_count)
    dw.dequantize(elem_of(t_), plan.wide, q + b * cs, cd_.out_count - b, out_step(plan), out + b * es);
  call_.quantize_s += seconds(t2, Clock::now());
  call_.on_device = true;
}

void LossyCall::dequantize_output(const LossyPlan& plan, const void* out_codes) {
  trace::Scope ev("dequantize");
  ev.arg("count", double(cd_.out_count));
  const auto t2 = Clock::now();
  const size_t cs = plan.wide ? 8 : 4, es = dsize(t_);
  const size_t a = cd_.self_count ? cd_.self_dst : cd_.out_count, b = a + cd_.self_count;
  const auto* q = static_cast<const uint8_t*>(out_codes);
  auto* out = static_cast<uint8_t*>(cd_.recv);
  dequantize_buf(t_, plan.wide, q, a, out_step(plan), out, rt_.pool.get(), nch_);
  if (b < cd_.out_count) {
    dequantize_buf(t_, plan.wide, q + b * cs, cd_.out_count - b, out_step(plan), out + b * es, rt_.pool.get(), nch_);
  }
  call_.quantize_s += seconds(t2, Clock::now());
}

void LossyCall::run_staged(const LossyPlan& plan, const std::vector<CallDesc>& all) {
  // The code buffers are address ranges for the schedule: the stage quantizes
  // each slice of the input into a buffer of its own right before the verb
  // reads it and dequantizes each final slice straight into the output.
  const size_t cs = plan.wide ? 8 : 4;
  void* codes = rt_.work[0].get(cd_.in_count * cs);
  void* out_codes = cd_.codes_in_place ? codes : rt_.work[1].get(cd_.out_count * cs);
  LossyStage stage(t_, plan, cd_.send, codes, cd_.recv, out_codes, out_step(plan), index_,
                   cd_.codes_in_place && cd_.send == cd_.recv);
  Wire w = codes_wire(plan.wide, all);
  w.stage = &stage;  // quantize / dequantize: the channels' stage_prepare / stage_finish events
  const size_t sparse_slice = rt_.cfg.sparse_slice_bytes;
  w.slice_bytes = mostly_zero(all) && sparse_slice > rt_.cfg.slot_bytes ? sparse_slice : 0;
  rt_.channels.run_schedule(cd_, codes, out_codes, w, nch_, call_);
}

void LossyCall::run_exact(const LossyPlan& plan, const std::vector<CallDesc>& all) {
  trace::Scope ev("lossy_exact");
  ev.arg("why", plan.why_not);
  call_.fallback = true;
  call_.algorithm = Algorithm::Ring;  // the exact path is the flat ring's
  NCCLZ_TRACE(rt_.rank, "%s: lossy call #%llu runs exactly: %s", coll_name(cd_.coll), (unsigned long long)all[0].seq,
              plan.why_not);
  if (!cd_.sums()) {
    // max/min and data movement return one rank's values: exact in T.
    call_.bound = 0;
    rt_.channels.run_schedule(cd_, cd_.send, cd_.recv, native_wire(t_, Mode::None, cd_.op, c_), nch_, call_);
    return;
  }
  // Sums and means: the narrowest accumulation that keeps E, or, where none
  // does, the narrowest as good as float64's (bound::choose_exact; the same
  // on every rank: it reads the exchanged statistics). Mostly-zero inputs on
  // every rank go losslessly coded (the selector takes Sparse over their bit
  // patterns), not raw: in T, else in float64 (same schedule, same additions:
  // the same bits).
  const bool sparse = mostly_zero(all);
  const bound::ExactChoice x = bound::choose_exact(elem_of(t_), cd_.how, rt_.nranks, plan.E, merge_stats(all), !sparse);
  call_.bound = x.error;  // what this path achieves (CallStats::error_bound); above E where nothing keeps it
  const char* acc = x.acc == bound::Accumulation::InT   ? "the element type"
                    : x.acc == bound::Accumulation::F32 ? "float32"
                                                        : "float64";
  NCCLZ_TRACE(rt_.rank, "lossy call #%llu: exact sum in %s, bound %g (E %g)", (unsigned long long)all[0].seq, acc,
              x.error, plan.E);
  if (x.acc != bound::Accumulation::InT) {
    run_widened(x.acc == bound::Accumulation::F32 ? ElemType::F32 : ElemType::F64, sparse);
    return;
  }
  // The uncompressed call, byte for byte (or its lossless coding).
  Wire w = native_wire(t_, Mode::None, cd_.op, c_);
  if (sparse) {
    w.mode = prims::WireMode::Coded;
    w.enc = codec::EncodeOptions{};  // the selector, whatever codec the lossy call named
  }
  rt_.channels.run_schedule(cd_, cd_.send, cd_.recv, w, nch_, call_);
  // avg: the schedule sums; the sum divided once, as the uncompressed call
  // does (CallRoutine divides only after calls that did not run lossy).
  if (cd_.how == Combine::Mean && cd_.recv != nullptr) {
    prims::divide_in_place(t_, cd_.recv, cd_.out_count, rt_.nranks);
  }
}

void LossyCall::run_widened(ElemType acc, bool coded) {
  const bool f32 = acc == ElemType::F32;
  const size_t es = f32 ? 4 : 8;
  void* in = rt_.work[0].get(cd_.in_count * es);
  void* out = cd_.codes_in_place ? in : rt_.work[1].get(cd_.out_count * es);
  {
    trace::Scope ev("widen");
    ev.arg("count", double(cd_.in_count));
    if (f32) {
      to_f32(t_, cd_.send, cd_.in_count, static_cast<float*>(in), rt_.pool.get(), nch_);
    } else {
      to_f64(t_, cd_.send, cd_.in_count, static_cast<double*>(in), rt_.pool.get(), nch_);
    }
  }
  Wire w;
  w.type = acc;
  w.raw_esize = dsize(t_);
  if (coded) w.mode = prims::WireMode::Coded;
  rt_.channels.run_schedule(cd_, in, out, w, nch_, call_);
  // avg: the sum divided in double, then rounded once to T.
  const double div = cd_.how == Combine::Mean ? double(rt_.nranks) : 1.0;
  trace::Scope ev("narrow");
  ev.arg("count", double(cd_.out_count));
  if (f32) {
    from_f32(t_, static_cast<const float*>(out), cd_.out_count, div, cd_.recv, rt_.pool.get(), nch_);
  } else {
    from_f64(t_, static_cast<const double*>(out), cd_.out_count, div, cd_.recv, rt_.pool.get(), nch_);
  }
}

void LossyCall::plan_send(CallDesc& d, HostStaging& staging) {
  trace::Scope ev("plan_send");
  ev.arg("count", double(cd_.in_count));
  const auto t1 = Clock::now();
  DeviceWork* dw = cd_.device >= 0 ? &device_work(rt_, cd_.device) : nullptr;
  const DataStats s =
      dw ? dw->scan(elem_of(t_), cd_.send, cd_.in_count) : scan(t_, cd_.send, cd_.in_count, rt_.pool.get(), nch_);
  const double E = resolve_bound(c_, s);
  plan_ = plan_lossy(elem_of(t_), Combine::Select, 1, E, s);
  apply_min_bytes(plan_, c_, cd_.message * dsize(t_));
  call_.requested = E;
  if (plan_.compress && dw) {
    // Device buffers: the codes on the device (the receiver gets the same bytes).
    codes_ = dw->codes(0, cd_.in_count * (plan_.wide ? 8 : 4));
    const size_t bad = dw->quantize(elem_of(t_), plan_.eb, plan_.check_eb, plan_.limit, plan_.wide, cd_.send,
                                    cd_.in_count, codes_, plan_.exact_check);
    if (bad > 0) plan_.compress = false;
  } else if (plan_.compress) {
    codes_ = codes_buf_->get(cd_.in_count * (plan_.wide ? 8 : 4));
    if (stage_p2p_) {
      // The codes' address range only: the stage quantizes each slice as it is sent. The plan rules
      // out outliers (every input finite, within the scanned max |x|), as for the staged collectives.
      stage_.emplace(t_, plan_, cd_.send, codes_, nullptr, nullptr, 0.0);
    } else if (quantize_buf(t_, plan_, cd_.send, cd_.in_count, codes_, rt_.pool.get(), nch_) > 0) {
      plan_.compress = false;
    }
  }
  if (dw && !plan_.compress) staging.begin();  // the values themselves go, from a host copy
  call_.on_device = dw != nullptr && plan_.compress;
  call_.fallback = !plan_.compress;
  call_.bound = plan_.compress ? E : 0;  // the exact path moves the values themselves
  if (plan_.compress) {
    d.flags |= kCompress;
    if (plan_.wide) d.flags |= kWide;
    d.eb = plan_.eb;
  }
  d.E = E;
  call_.quantize_s += seconds(t1, Clock::now());
}

const void* LossyCall::send_data() const { return plan_.compress ? codes_ : cd_.send; }

Wire LossyCall::exact_wire(Mode m, bool device_peer) const {
  Wire w = native_wire(t_, m, RedOp::Sum, c_);
  w.as_wire = true;  // moved, never reduced: any type as its wire type's bits (float8 too)
  if (m == Mode::Lossless && (cd_.device >= 0 || device_peer)) w.enc.allow_rans = false;  // what a device decodes
  return w;
}

bool LossyCall::exact_on_device(Mode m) const {
  return cd_.device >= 0 && !is_lossy(m) && device_codes_exact(exact_wire(m, true));
}

Wire LossyCall::send_wire(Mode m, const CallDesc& receiver) const {
  if (is_lossy(m) && !plan_.compress) return native_wire(t_, Mode::None, RedOp::Sum, c_);
  if (!is_lossy(m)) {
    Wire w = exact_wire(m, receiver.device != 0);
    if (exact_on_device(m)) w.device = rt_.device_work.get();
    return w;
  }
  Wire w = code_wire(t_, plan_.wide, RedOp::Sum, c_);
  if (cd_.device >= 0 || receiver.device) w.enc.allow_rans = false;  // what a device rank decodes
  if (cd_.device >= 0) w.device = rt_.device_work.get();
  if (stage_) w.stage = &*stage_;
  return w;
}

void* LossyCall::recv_target(const CallDesc& sender, Mode m, HostStaging& staging) {
  const bool compressed = (sender.flags & kCompress) != 0;
  const bool wide = (sender.flags & kWide) != 0;
  if (is_lossy(m)) {
    call_.fallback = !compressed;
    call_.requested = sender.E;
    call_.bound = compressed ? sender.E : 0;
  }
  // Device buffers: codes arrive into device memory, and so do the values of
  // an exact call the device codes; those of a lossy call sent uncompressed
  // (the sender's fallback) into a host copy.
  const bool exact = exact_on_device(m);
  const bool device = cd_.device >= 0 && compressed && is_lossy(m);
  if (cd_.device >= 0 && !device && !exact) staging.begin();
  if (device) {
    codes_ = device_work(rt_, cd_.device).codes(0, cd_.out_count * (wide ? 8 : 4));
  } else {
    codes_ = compressed ? codes_buf_->get(cd_.out_count * (wide ? 8 : 4)) : cd_.recv;
  }
  if (compressed && is_lossy(m) && !device && stage_p2p_) {
    // The codes' address range only: the stage dequantizes each slice into the output as it arrives.
    LossyPlan p;
    p.wide = wide;
    stage_.emplace(t_, p, nullptr, nullptr, cd_.recv, codes_, 2 * sender.eb);
  }
  call_.on_device = device || exact;
  return codes_;
}

Wire LossyCall::recv_wire(const CallDesc& sender, Mode m) const {
  if (!is_lossy(m)) {
    Wire w = exact_wire(m, sender.device != 0);
    if (call_.on_device) w.device = rt_.device_work.get();
    return w;
  }
  if (!(sender.flags & kCompress)) return native_wire(t_, Mode::None, RedOp::Sum, c_);
  Wire w = code_wire(t_, (sender.flags & kWide) != 0, RedOp::Sum, c_);
  if (call_.on_device) w.device = rt_.device_work.get();
  if (stage_) w.stage = &*stage_;
  return w;
}

void LossyCall::finish_recv(const CallDesc& sender) {
  if (!(sender.flags & kCompress) || stage_) return;  // (a stage dequantized each slice as it came)
  trace::Scope ev("dequantize");
  ev.arg("count", double(cd_.out_count));
  const auto t2 = Clock::now();
  if (call_.on_device) {
    device_work(rt_, cd_.device)
        .dequantize(elem_of(t_), (sender.flags & kWide) != 0, codes_, cd_.out_count, 2 * sender.eb, cd_.recv);
  } else {
    dequantize_buf(t_, (sender.flags & kWide) != 0, codes_, cd_.out_count, 2 * sender.eb, cd_.recv, rt_.pool.get(),
                   nch_);
  }
  call_.quantize_s += seconds(t2, Clock::now());
}

}  // namespace ncclz::core
