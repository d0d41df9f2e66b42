// The communicator object: its connections, its lifetime and abort. Every call
// goes through the call routine (core/call.hpp) with its collective's
// description (core/collective.hpp).
//
// Connections. Each channel has its own ring (core/channels.hpp). Send/recv
// use a separate set of links, one to every other rank, connected eagerly at
// creation (Transport::connect is collective, so connections cannot be made
// lazily by two ranks alone). That costs (N-1) * nslots * slot_bytes of slot
// memory per rank for point-to-point; see docs/ALGORITHMS.md.
//
// Errors. Argument errors and mismatched calls are found before data moves and
// leave the communicator usable. A failure while data moves (timeout, corrupt
// slice, a vanished peer) leaves the slot FIFOs out of step, so it aborts the
// communicator: the sibling channels wake up with Aborted, the original error
// is rethrown, and later calls fail with Aborted.
#include "ncclz/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "bootstrap/bootstrap.hpp"
#include "core/call.hpp"
#include "core/config.hpp"
#include "core/runtime.hpp"
#include "core/validate.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "transport/transport.hpp"

namespace ncclz {
namespace {

using core::Clock;

class CommunicatorImpl final : public Communicator {
 public:
  CommunicatorImpl(std::unique_ptr<Bootstrap> boot, const CommConfig& cfg);
  ~CommunicatorImpl() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CommConfig& config() const override { return rt_->cfg; }
  void check_call(const CallArgs& args, const PolicyHints* hints) const override {
    core::check_call(args, hints, rank_, size_, rt_->cfg.p2p != 0);
  }

  void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Compression& c,
                  CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::all_reduce_desc(send, recv, count, op), t, c, hints, stats);
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, RedOp op, const Compression& c,
                      CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::reduce_scatter_desc(send, recv, recv_count, op, size_), t, c, hints, stats);
  }
  void all_gather(const void* send, void* recv, size_t send_count, DataType t, const Compression& c, CallStats* stats,
                  const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::all_gather_desc(send, recv, send_count, size_), t, c, hints, stats);
  }
  void broadcast(void* buf, size_t count, DataType t, int root, const Compression& c, CallStats* stats,
                 const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::broadcast_desc(buf, count, root, rank_), t, c, hints, stats);
  }
  void reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root, const Compression& c,
              CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::reduce_desc(send, recv, count, op, root, rank_), t, c, hints, stats);
  }
  void gather(const void* send, void* recv, size_t send_count, DataType t, int root, const Compression& c,
              CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::gather_desc(send, recv, send_count, root, rank_, size_), t, c, hints, stats);
  }
  void scatter(const void* send, void* recv, size_t recv_count, DataType t, int root, const Compression& c,
               CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::scatter_desc(send, recv, recv_count, root, rank_, size_), t, c, hints, stats);
  }
  void all_to_all(const void* send, void* recv, size_t count, DataType t, const Compression& c, CallStats* stats,
                  const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::all_to_all_desc(send, recv, count, rank_, size_), t, c, hints, stats);
  }
  void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts, DataType t,
                   const Compression& c, CallStats* stats, const PolicyHints* hints) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->collective(core::all_to_allv_desc(send, send_counts, recv, recv_counts, rank_, size_), t, c, hints,
                         stats);
  }
  void send(const void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->point_to_point(core::send_desc(buf, count, rank_, peer), t, c, stats);
  }
  void recv(void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->point_to_point(core::recv_desc(buf, count, rank_, peer), t, c, stats);
  }
  void barrier() override {
    std::lock_guard<std::mutex> lk(call_mu_);
    routine_->barrier();
  }
  void abort(const std::string& reason) override { fail(reason); }

 private:
  /// Aborts the communicator: every pending and later call fails with Aborted.
  void fail(const std::string& reason);

  int rank_ = 0, size_ = 1;
  std::unique_ptr<Bootstrap> boot_;
  std::shared_ptr<transport::AbortFlag> abort_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::vector<transport::PeerLink>> ring_links_, p2p_links_;
  std::unique_ptr<core::Runtime> rt_;
  std::unique_ptr<core::CallRoutine> routine_;
  std::mutex call_mu_;   // one call at a time
  std::mutex abort_mu_;  // abort()/fail() against each other
};

CommunicatorImpl::CommunicatorImpl(std::unique_ptr<Bootstrap> boot, const CommConfig& given) : boot_(std::move(boot)) {
  rank_ = boot_->rank();
  size_ = boot_->size();
  CommConfig cfg = given.resolved();
  cfg.rank = rank_;
  cfg.size = size_;
  cfg.token.clear();  // not reported by config()
  // Every rank must run the same number of rings, agree on point-to-point
  // links and slice the same way (both ends of a connection compute the same
  // slices from the slot sizes).
  constexpr size_t kAgreed = 5;
  const char* agreed_what[kAgreed] = {"NCCLZ_NCHANNELS", "NCCLZ_P2P", "NCCLZ_SLOT_BYTES", "NCCLZ_NSLOTS",
                                      "NCCLZ_SPARSE_SLICE_BYTES"};
  std::vector<int64_t> all(static_cast<size_t>(size_) * kAgreed, 0);
  const int64_t mine[kAgreed] = {cfg.nchannels, cfg.p2p, int64_t(cfg.slot_bytes), cfg.nslots,
                                 int64_t(cfg.sparse_slice_bytes)};
  boot_->allgather(mine, sizeof mine, all.data());
  for (int r = 0; r < size_; ++r) {
    for (size_t k = 0; k < kAgreed; ++k) {
      const int64_t theirs = all[kAgreed * size_t(r) + k];
      if (theirs != all[k]) {
        throw InvalidArgument("ncclz: ranks disagree on " + std::string(agreed_what[k]) +
                              " (rank 0: " + std::to_string(all[k]) + ", rank " + std::to_string(r) + ": " +
                              std::to_string(theirs) + "); set it the same way on every rank");
      }
    }
  }

  abort_ = std::make_shared<transport::AbortFlag>();
  transport::TransportConfig tc;
  tc.transport = cfg.transport;
  tc.slot_bytes = core::slot_of(cfg.slot_bytes);
  tc.nslots = cfg.nslots;
  tc.socket_ifname = cfg.socket_ifname;
  tc.throttle_gbps = cfg.throttle_gbps;
  transport_ = transport::create_transport(*boot_, tc, abort_);
  cfg.transport = transport::kind_name(transport_->kind());
  // The ring links' slots hold the larger slices too, except where slots are
  // reserved memory (shared memory: posix_fallocate'd for the whole ring):
  // there mostly-zero sums keep the ordinary slices. Every rank has the same
  // transport kind, so every rank decides the same.
  if (transport_->kind() == transport::Kind::SharedMemory) cfg.sparse_slice_bytes = cfg.slot_bytes;
  const size_t slot_capacity = core::slot_of(std::max(cfg.slot_bytes, cfg.sparse_slice_bytes));

  rt_ = std::make_unique<core::Runtime>(rank_, size_, cfg, slot_capacity, abort_,
                                        [this](const std::string& reason) { fail(reason); });
  routine_ = std::make_unique<core::CallRoutine>(*rt_);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(cfg.timeout_s > 0 ? cfg.timeout_s : 300));
  if (size_ > 1) {
    const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
    std::vector<int> peers = prev == next ? std::vector<int>{next} : std::vector<int>{prev, next};
    ring_links_ = transport_->connect(peers, cfg.nchannels, deadline, slot_capacity);
    for (int c = 0; c < cfg.nchannels; ++c) {
      auto& links = ring_links_[size_t(c)];
      rt_->channels.attach(c, links.back().send.get(), links.front().recv.get());
    }
    if (cfg.p2p) {
      std::vector<int> others;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) others.push_back(r);
      }
      p2p_links_ = transport_->connect(others, 1, deadline);
      for (size_t i = 0; i < others.size(); ++i) rt_->peers.attach(others[i], &p2p_links_[0][i]);
    }
  }
  // Rank 0's bootstrap may learn later that another process claims a rank of
  // this job (two jobs on one port): the communicator then aborts.
  boot_->set_conflict_handler([this](const std::string& why) { fail(why); });
  NCCLZ_INFO(rank_,
             "communicator: %d ranks, %d channels, %d slots x %zu bytes (slices of %zu bytes, %zu for mostly-zero "
             "lossy sums)",
             size_, cfg.nchannels, cfg.nslots, slot_capacity, cfg.slot_bytes, cfg.sparse_slice_bytes);
}

CommunicatorImpl::~CommunicatorImpl() {
  boot_->set_conflict_handler(nullptr);  // no fail() from the bootstrap's thread from here on
  // A call still running on another thread (abort() then destroy, as
  // ncclzCommAbort does) leaves with Aborted first.
  std::lock_guard<std::mutex> lk(call_mu_);
  // Let the last posted slots reach the peers before the connections close.
  if (!abort_->aborted.load()) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::min(30.0, rt_->cfg.timeout_s)));
    auto flush = [&](transport::SendConn* s) {
      try {
        if (s) s->flush(deadline);
      } catch (const std::exception& e) {
        NCCLZ_WARN(rank_, "communicator: flushing the connection to rank %d at destruction failed: %s", s->peer(),
                   e.what());
      }
    };
    for (int c = 0; c < rt_->channels.count(); ++c) flush(rt_->channels.send_conn(c));
    for (int r = 0; r < size_; ++r) {
      if (transport::PeerLink* l = rt_->peers.link(r)) flush(l->send.get());
    }
  }
  routine_.reset();
  rt_.reset();
  p2p_links_.clear();
  ring_links_.clear();
  transport_.reset();
  boot_.reset();
}

void CommunicatorImpl::fail(const std::string& reason) {
  std::lock_guard<std::mutex> lk(abort_mu_);
  if (abort_->aborted.load()) return;
  abort_->reason = reason;
  abort_->aborted.store(true);
  try {
    boot_->abort(reason);
  } catch (...) {
  }
}

}  // namespace

// ---- factories --------------------------------------------------------------------------

UniqueId make_unique_id(const std::string& addr, int port) { return Bootstrap::make_unique_id(addr, port); }

std::unique_ptr<Communicator> Communicator::create(const CommConfig& cfg) {
  BootstrapConfig b;
  b.rank = cfg.rank;
  b.size = cfg.size;
  b.master_addr = cfg.master_addr;
  b.master_port = cfg.master_port;
  b.token = cfg.token;
  b.timeout_s = cfg.timeout_s;
  b.socket_ifname = cfg.socket_ifname;
  auto boot = Bootstrap::create(b);
  return std::make_unique<CommunicatorImpl>(std::move(boot), cfg);
}

std::unique_ptr<Communicator> Communicator::create(const UniqueId& id, int rank, int size, const CommConfig& base) {
  auto boot = Bootstrap::create(id, rank, size, base.timeout_s);
  CommConfig cfg = base;
  cfg.rank = rank;
  cfg.size = size;
  return std::make_unique<CommunicatorImpl>(std::move(boot), cfg);
}

}  // namespace ncclz
