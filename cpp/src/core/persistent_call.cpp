// The persistent ring kernels in the call path (see persistent_call.hpp).
#include "core/persistent_call.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "algorithms/ring.hpp"
#include "base/trace.hpp"
#include "core/config.hpp"
#include "core/runtime.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {

bool persistent_wanted(const CommConfig& cfg, int nranks) {
  return cfg.persistent == 1 && nranks > 1 && cfg.nslots >= 2 && cfg.nslots <= cuda::FifoLayout::kMaxSlots;
}

int persistent_channels(const CommConfig& cfg) {
  return std::max(1, std::min(cfg.nchannels, cfg.exact_nchannels > 0 ? cfg.exact_nchannels : cfg.nchannels));
}

size_t persistent_slot_bytes(const CommConfig& cfg) {
  const size_t exact = cfg.exact_slice_bytes ? cfg.exact_slice_bytes : cfg.slot_bytes;
  return slot_of(std::min(exact, cfg.slot_bytes));  // RingChannels: exact_slice_bytes(), else the slots' own
}

bool persistent_eligible(const Runtime& rt, const Collective& cd, const std::vector<CallDesc>& all,
                         codec::ElemType wire, bool coded) {
  using codec::ElemType;
  if (!persistent_wanted(rt.cfg, rt.nranks) || cd.device < 0) return false;
  const bool op_ok = cd.op == RedOp::Sum || cd.op == RedOp::Max || cd.op == RedOp::Min;
  if (cd.coll != Coll::AllReduce || !op_ok || cd.algorithm != Algorithm::Ring || cd.peer_schedule) return false;
  for (const CallDesc& d : all) {
    if (!d.device) return false;  // a host rank: the usual path on every rank
  }
  if (coded) return wire == ElemType::I32 || wire == ElemType::I64;
  return wire == ElemType::F32 || wire == ElemType::F64 || wire == ElemType::I32 || wire == ElemType::I64;
}

RingTraffic ring_traffic(size_t count, int nranks, int rank, size_t seg, size_t slice) {
  RingTraffic t;
  const int N = nranks, r = rank;
  auto mod = [N](int x) { return ((x % N) + N) % N; };
  const size_t loop = seg * size_t(N);
  for (size_t base = 0; base < count; base += loop) {
    const size_t rem = std::min(loop, count - base), c = (rem + size_t(N) - 1) / size_t(N);
    auto len = [&](int j) { return std::min(c, rem - std::min(size_t(j) * c, rem)); };
    auto slices = [&](size_t n) { return (n + slice - 1) / slice; };
    // Sends: chunks r-1 .. r-(N-1) (reduce-scatter), then r, r-1 .. r-(N-2)
    // (allgather): every chunk but r, then every chunk but r+1. Receives:
    // every chunk but r-1, then every chunk but r.
    for (int j = 0; j < N; ++j) {
      const size_t n = len(j);
      const int sends = (j != r ? 1 : 0) + (j != mod(r + 1) ? 1 : 0);
      const int recvs = (j != mod(r - 1) ? 1 : 0) + (j != r ? 1 : 0);
      t.elems_sent += uint64_t(sends) * n;
      t.slices_sent += uint64_t(sends) * slices(n);
      t.slices_received += uint64_t(recvs) * slices(n);
    }
  }
  return t;
}

void run_persistent(Runtime& rt, const Collective& cd, codec::ElemType wire, bool coded, const void* src, void* dst,
                    size_t count, int nch, size_t raw_esize, CallState& call) {
  trace::Scope ev("persistent");
  ev.arg("count", double(count)).arg("coded", coded ? 1.0 : 0.0);
  const auto t0 = Clock::now();
  try {
    if (!rt.persistent)
      rt.persistent = PersistentWork::create(rt.rank, rt.nranks, cd.device, rt.cfg, std::move(rt.persistent_links),
                                             rt.one_host, rt.abort);
    PersistentWork& pw = *rt.persistent;
    nch = std::max(1, std::min(nch, pw.channels()));
    const size_t es = codec::elem_size(wire), slice = pw.slice_elems(es);
    const size_t seg = algorithms::ring_segment_elems(slice, rt.cfg.nslots);
    if (rt.persistent_recv.size() != size_t(pw.channels())) {
      rt.persistent_recv.assign(size_t(pw.channels()), 0);
      rt.persistent_sent.assign(size_t(pw.channels()), 0);
    }
    std::vector<uint64_t> recv = rt.persistent_recv, sent = rt.persistent_sent;
    std::vector<uint64_t> bytes0(size_t(nch), 0);
    call.ch.assign(size_t(nch), prims::ChannelStats{});
    for (int c = 0; c < nch; ++c) {
      const size_t b = count * size_t(c) / size_t(nch), e = count * size_t(c + 1) / size_t(nch);
      const RingTraffic t = ring_traffic(e - b, rt.nranks, rt.rank, seg, slice);
      recv[size_t(c)] += t.slices_received;
      sent[size_t(c)] += t.slices_sent;
      call.ch[size_t(c)].raw_bytes = t.elems_sent * raw_esize;
      bytes0[size_t(c)] = pw.sent_bytes(c);
    }
    pw.all_reduce(wire, coded, cd.op, src, dst, count, nch, recv, sent);
    rt.persistent_recv = recv;
    rt.persistent_sent = sent;
    for (int c = 0; c < nch; ++c) call.ch[size_t(c)].wire_bytes = pw.sent_bytes(c) - bytes0[size_t(c)];
    call.slice_bytes = persistent_slot_bytes(rt.cfg) - codec::kHeaderBytes;
    call.schedule_s += seconds(t0, Clock::now());
    call.persistent = true;
    call.persistent_device_fifos = pw.device_fifos();
    call.on_device = true;
  } catch (const std::exception& e) {
    call.schedule_s += seconds(t0, Clock::now());
    const std::string who = "ncclz rank " + std::to_string(rt.rank) + ": ";
    if (rt.abort->aborted.load()) {
      throw Aborted(who + "the communicator was aborted (" + rt.abort->reason +
                    ") during an all_reduce on the persistent ring kernels (" + e.what() + "); create a new one");
    }
    const std::string why = std::string("all_reduce on the persistent ring kernels failed: ") + e.what();
    rt.fail(why);
    throw Error(who + why + "; the communicator was aborted on every rank");
  }
}

}  // namespace ncclz::core
