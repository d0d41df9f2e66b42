// One rank's persistent ring in the call path (core/persistent_call.hpp,
// PersistentWork): the cuda::PersistentRing with host-mapped FIFOs, its
// RingAbort and the PersistentProxy over the connections made at creation.
// Built where cuda/ is (NCCLZ_WITH_CUDA); elsewhere create() throws
// (core/cuda_fallback.cpp).
#if defined(NCCLZ_WITH_CUDA)

#include <algorithm>
#include <chrono>
#include <string>

#include "base/env.hpp"
#include "core/persistent_call.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

using cuda::PersistentRing;
using cuda::RingAbort;

/// The coded ring's predictor: Delta1 (Block with first differences; the
/// device selector's usual pick for smooth fields' codes).
constexpr codec::Predictor kPredictor = codec::Predictor::Delta1;

const char* ring_error_name(int e) {
  switch (cuda::RingError(e)) {
    case cuda::RingError::Aborted: return "aborted (the abort word was set: a peer, the proxy or the communicator)";
    case cuda::RingError::TimedOut: return "timed out (a wait made no progress)";
    case cuda::RingError::Codec: return "a slice did not decode";
    default: return "no error";
  }
}

class RingWork final : public PersistentWork {
 public:
  RingWork(int rank, int nranks, int device, const CommConfig& cfg, std::vector<transport::ProxyChannel> links)
      : rank_(rank), timeout_(std::chrono::duration<double>(cfg.timeout_s > 0 ? cfg.timeout_s : 300)), abort_(device) {
    const std::string who = "persistent ring of rank " + std::to_string(rank);
    if (links.empty()) throw Error(who + ": no connections (made at creation where NCCLZ_PERSISTENT=1)");
    if (abort_.status() != 0) throw Error(who + ": the abort word: " + PersistentRing::describe(abort_.status()));
    PersistentRing::Options o;
    o.rank = rank;
    o.nranks = nranks;
    o.channels = int(links.size());
    o.type = codec::ElemType::I32;
    o.coded = true;
    o.predictor = kPredictor;
    o.slot_bytes = persistent_slot_bytes(cfg);
    o.slots = cfg.nslots;
    o.timeout_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count());
    o.fifo_in_host_memory = true;
    o.device = device;
    // G CTAs a channel: NCCLZ_PERSISTENT_CTAS, else one per two slots, at most 4;
    // fewer where the device cannot hold every rank's at once.
    const int asked = int(env::get_int("NCCLZ_PERSISTENT_CTAS", 0, 0, 32));
    o.ctas_per_channel = asked > 0 ? asked : std::clamp(cfg.nslots / 2, 1, 4);
    for (;;) {
      ring_ = std::make_unique<PersistentRing>(o, &abort_);
      if (ring_->status() != PersistentRing::kNotResident || o.ctas_per_channel == 1) break;
      o.ctas_per_channel = std::max(1, o.ctas_per_channel / 2);
    }
    if (ring_->status() != 0) {
      throw Error(who + " (" + std::to_string(nranks) + " ranks x " + std::to_string(o.channels) + " channels x " +
                  std::to_string(o.ctas_per_channel) + " CTAs, the device holds " +
                  std::to_string(ring_->max_resident_ctas()) + "): " + PersistentRing::describe(ring_->status()));
    }
    transport::PersistentProxy::Fifos f;
    f.inbox = static_cast<uint8_t*>(ring_->fifo_host());
    f.outbox = static_cast<uint8_t*>(ring_->outbox_host());
    f.channels = o.channels;
    f.slots = o.slots;
    f.slot_bytes = o.slot_bytes;
    f.abort_word = abort_.host_ptr();
    transport::PersistentProxy::Options po;
    po.rank = rank;
    po.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_);
    proxy_ = std::make_unique<transport::PersistentProxy>(f, po);
    proxy_->start(std::move(links));
  }

  ~RingWork() override {
    // No kernel runs (every call synchronizes): the proxy's threads end (the
    // peers' receiving threads see a close without a note after every slice
    // they expect: no failure), then the ring and the abort word go.
    if (proxy_) proxy_->stop();
  }

  void all_reduce(codec::ElemType wire, bool coded, const void* src, void* dst, size_t count, int nch,
                  const std::vector<uint64_t>& expect_recv, const std::vector<uint64_t>& sent) override {
    const std::string who = "rank " + std::to_string(rank_);
    for (int c = 0; c < channels(); ++c) proxy_->expect(c, expect_recv[size_t(c)], sent[size_t(c)]);
    if (proxy_->halted() || proxy_->peer_gone() || abort_.is_set()) {
      abort_.set();  // the peers' kernels stop through the communicator's abort (the caller's)
      throw Error(who + ": the persistent ring's proxy stopped before the call: " + proxy_why());
    }
    PersistentRing::Shape sh;
    sh.type = wire;
    sh.coded = coded;
    sh.predictor = kPredictor;
    sh.channels = nch;
    const int launched = ring_->all_reduce_async(src, dst, count, sh);
    if (launched != 0)
      throw Error(who + ": launching the persistent ring kernel: " + PersistentRing::describe(launched));
    cuda::RingReport rep;
    const int rc = ring_->synchronize(&rep);
    if (rc >= 1000) {
      std::string msg = who + ": the persistent ring kernel " + ring_error_name(rc - 1000) + " at channel step " +
                        std::to_string(rep.step) + " waiting on or decoding from rank " + std::to_string(rep.peer);
      if (rep.error == int(cuda::RingError::Codec)) msg += " (codec status " + std::to_string(rep.codec_status) + ")";
      const std::string pe = proxy_->error();
      if (!pe.empty()) msg += "; proxy: " + pe;
      throw Error(msg);
    }
    if (rc != 0) throw Error(who + ": the persistent ring kernel: " + PersistentRing::describe(rc));
    // The call's slices left this process (a rank may exit once its call returns).
    for (int c = 0; c < nch; ++c) {
      const std::string e =
          proxy_->wait_flushed(c, sent[size_t(c)], std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_));
      if (!e.empty()) throw Error(who + ": " + e);
    }
  }

  uint64_t sent_bytes(int c) const override { return proxy_->sent_bytes(c); }
  size_t slice_elems(size_t esize) const override { return ring_->slice_elems_for(esize); }
  int channels() const override { return ring_->options().channels; }

 private:
  std::string proxy_why() const {
    const std::string e = proxy_->error();
    if (!e.empty()) return e;
    if (proxy_->peer_gone()) return "a ring neighbour closed its connection (its communicator was closed)";
    return "the abort word was set";
  }

  int rank_;
  std::chrono::duration<double> timeout_;
  RingAbort abort_;  // (before the ring and the proxy: they use it until they go)
  std::unique_ptr<PersistentRing> ring_;
  std::unique_ptr<transport::PersistentProxy> proxy_;
};

}  // namespace

std::unique_ptr<PersistentWork> PersistentWork::create(int rank, int nranks, int device, const CommConfig& cfg,
                                                       std::vector<transport::ProxyChannel> links) {
  return std::make_unique<RingWork>(rank, nranks, device, cfg, std::move(links));
}

}  // namespace ncclz::core

#endif  // NCCLZ_WITH_CUDA
