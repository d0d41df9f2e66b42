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
// Topology. At creation the ranks find which of them share a host
// (topology/topology.hpp: the bootstrap's host names, or NCCLZ_TOPO_HOST(S)).
// Where that allows hierarchical collectives (several hosts, the same number
// L > 1 of ranks on each) every channel also gets an intra-host ring (the L
// ranks of this host) and an inter-host ring (the ranks with this local rank,
// one per host; core/hier_channels.hpp). The inter-host rings use the
// communicator's transport. The intra-host rings use it too where it is
// shared memory or in-process already; where it is sockets and a host's ranks
// share a machine, they get a transport of their own over a bootstrap of the
// host's ranks (topology/group_bootstrap.hpp): shared memory between
// processes, the heap between threads.
//
// Errors. Argument errors and mismatched calls are found before data moves and
// leave the communicator usable. A failure while data moves (timeout, corrupt
// slice, a vanished peer) leaves the slot FIFOs out of step, so it aborts the
// communicator: the sibling channels wake up with Aborted, the original error
// is rethrown, and later calls fail with Aborted. Aborting (abort(), or any
// such failure) closes every connection with a note naming this rank and why,
// so a peer blocked in any call fails at once with Aborted, and passes the
// note on to its own peers (transport/transport.hpp, "Aborting").
//
// Threads. A communicator runs one call at a time, and the ranks match calls
// by their order, so calls from several threads of one rank would pair up
// differently on different ranks (silently wrong sums where the shapes agree).
// A call made while another thread's call is running therefore raises
// InvalidArgument naming both calls and aborts the communicator, so every
// rank fails instead of mixing data. Calls from several threads one after
// another (the user's own ordering, the same on every rank) are fine; so is
// abort() from any thread at any time.
#include "ncclz/communicator.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "base/trace.hpp"
#include "bootstrap/bootstrap.hpp"
#include "core/call.hpp"
#include "core/config.hpp"
#include "core/runtime.hpp"
#include "core/split.hpp"
#include "core/validate.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "topology/group_bootstrap.hpp"
#include "topology/topology.hpp"
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
  const Topology& topology() const override { return rt_->topo; }
  void check_call(const CallArgs& args, const PolicyHints* hints) const override {
    core::check_call(args, hints, rank_, size_, rt_->cfg.p2p != 0);
  }
  void refuse(const CallArgs& a, const std::string& why) override;
  uint64_t rounds() const override { return rt_->rounds; }

  void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Compression& c,
                  CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "all_reduce", count, t);
    routine_->collective(core::all_reduce_desc(send, recv, count, op), t, c, hints, stats);
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, RedOp op, const Compression& c,
                      CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "reduce_scatter", recv_count, t);
    routine_->collective(core::reduce_scatter_desc(send, recv, recv_count, op, size_), t, c, hints, stats);
  }
  void all_gather(const void* send, void* recv, size_t send_count, DataType t, const Compression& c, CallStats* stats,
                  const PolicyHints* hints) override {
    CallGuard g(this, "all_gather", send_count, t);
    routine_->collective(core::all_gather_desc(send, recv, send_count, size_), t, c, hints, stats);
  }
  void broadcast(void* buf, size_t count, DataType t, int root, const Compression& c, CallStats* stats,
                 const PolicyHints* hints) override {
    CallGuard g(this, "broadcast", count, t);
    routine_->collective(core::broadcast_desc(buf, count, root, rank_), t, c, hints, stats);
  }
  void reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root, const Compression& c,
              CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "reduce", count, t);
    routine_->collective(core::reduce_desc(send, recv, count, op, root, rank_), t, c, hints, stats);
  }
  void gather(const void* send, void* recv, size_t send_count, DataType t, int root, const Compression& c,
              CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "gather", send_count, t);
    routine_->collective(core::gather_desc(send, recv, send_count, root, rank_, size_), t, c, hints, stats);
  }
  void scatter(const void* send, void* recv, size_t recv_count, DataType t, int root, const Compression& c,
               CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "scatter", recv_count, t);
    routine_->collective(core::scatter_desc(send, recv, recv_count, root, rank_, size_), t, c, hints, stats);
  }
  void all_to_all(const void* send, void* recv, size_t count, DataType t, const Compression& c, CallStats* stats,
                  const PolicyHints* hints) override {
    CallGuard g(this, "all_to_all", count, t);
    routine_->collective(core::all_to_all_desc(send, recv, count, rank_, size_), t, c, hints, stats);
  }
  void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts, DataType t,
                   const Compression& c, CallStats* stats, const PolicyHints* hints) override {
    CallGuard g(this, "all_to_allv", 0, t);
    routine_->collective(core::all_to_allv_desc(send, send_counts, recv, recv_counts, rank_, size_), t, c, hints,
                         stats);
  }
  void send(const void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override {
    CallGuard g(this, "send", count, t);
    routine_->point_to_point(core::send_desc(buf, count, rank_, peer), t, c, stats);
  }
  void recv(void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override {
    CallGuard g(this, "recv", count, t);
    routine_->point_to_point(core::recv_desc(buf, count, rank_, peer), t, c, stats);
  }
  void group(const std::vector<PeerCall>& calls, CallStats* stats) override {
    CallGuard g(this, "group", calls.size(), DataType::U8);
    routine_->group(calls, stats);
  }
  void barrier() override {
    CallGuard g(this, "barrier", 0, DataType::U8);
    routine_->barrier();
  }
  void abort(const std::string& reason) override { fail(reason); }
  std::unique_ptr<Communicator> split(int color, int key, const CommConfig* config) override {
    return core::split(*this, color, key, config ? *config : requested_, rt_->topo, boot_->advertised_address());
  }

 private:
  /// One call at a time (see "Threads" above): holds call_mu_ for the call,
  /// or, when another thread's call holds it, aborts the communicator and
  /// throws InvalidArgument naming both calls.
  class CallGuard {
   public:
    CallGuard(CommunicatorImpl* c, const char* what, size_t count, DataType t);
    ~CallGuard();
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;

   private:
    CommunicatorImpl* c_;
  };

  /// Aborts the communicator: every pending and later call fails with Aborted.
  void fail(const std::string& reason);
  /// The hierarchical links (see the file comment), where the topology allows them.
  void connect_hierarchical(const transport::TransportConfig& tc, Clock::time_point deadline);

  int rank_ = 0, size_ = 1;
  CommConfig requested_;  // the settings as given (split's default for new communicators)
  std::unique_ptr<Bootstrap> boot_;
  std::shared_ptr<transport::AbortFlag> abort_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::vector<transport::PeerLink>> ring_links_, p2p_links_;
  // Hierarchical links: the host's own bootstrap and transport (where it has
  // one), the intra-host and inter-host rings.
  std::unique_ptr<topology::GroupBootstrap> host_boot_;
  std::unique_ptr<transport::Transport> host_transport_;
  std::vector<std::vector<transport::PeerLink>> intra_links_, inter_links_;
  std::unique_ptr<core::Runtime> rt_;
  std::unique_ptr<core::CallRoutine> routine_;
  int wait_pauses_ = transport::kSpinIters;  // the waits' pause spin (0 where ranks outnumber CPUs)
  std::mutex call_mu_;                       // one call at a time
  std::mutex running_mu_;
  /// The call holding call_mu_ and its thread, for the concurrent-use error
  /// (kept as it is and put in words only for that error: calls stay cheap).
  struct Running {
    const char* what = nullptr;  // nullptr: none
    size_t count = 0;
    DataType type = DataType::U8;
    std::thread::id thread;
  } running_;
  std::mutex abort_mu_;  // abort()/fail() against each other
};

CommunicatorImpl::CommunicatorImpl(std::unique_ptr<Bootstrap> boot, const CommConfig& given)
    : requested_(given), boot_(std::move(boot)) {
  rank_ = boot_->rank();
  size_ = boot_->size();
  CommConfig cfg = given.resolved();
  cfg.rank = rank_;
  cfg.size = size_;
  cfg.token.clear();  // not reported by config()
  // Every rank must run the same number of rings, agree on point-to-point
  // links and slice the same way (both ends of a connection compute the same
  // slices from the slot sizes).
  // And on which calls carry their data in the descriptor message (the
  // latency algorithm): a rank that carries must meet ranks that expect it.
  constexpr size_t kAgreed = 11;
  const char* agreed_what[kAgreed] = {"NCCLZ_NCHANNELS",          "NCCLZ_P2P",
                                      "NCCLZ_SLOT_BYTES",         "NCCLZ_NSLOTS",
                                      "NCCLZ_SPARSE_SLICE_BYTES", "NCCLZ_LATENCY_BYTES",
                                      "NCCLZ_EXACT_NCHANNELS",    "NCCLZ_EXACT_SLICE_BYTES",
                                      "NCCLZ_TWO_HOP_BYTES",      "NCCLZ_DIRECT_FROM_BYTES",
                                      "NCCLZ_PERSISTENT"};
  std::vector<int64_t> all(static_cast<size_t>(size_) * kAgreed, 0);
  const int64_t mine[kAgreed] = {cfg.nchannels,
                                 cfg.p2p,
                                 int64_t(cfg.slot_bytes),
                                 cfg.nslots,
                                 int64_t(cfg.sparse_slice_bytes),
                                 cfg.latency_bytes,
                                 cfg.exact_nchannels,
                                 int64_t(cfg.exact_slice_bytes),
                                 cfg.two_hop_bytes,
                                 cfg.direct_from_bytes,
                                 cfg.persistent};
  boot_->allgather(mine, sizeof mine, all.data());
  Topology topo = topology::find(*boot_, cfg);
  for (int r = 0; r < size_; ++r) {
    for (size_t k = 0; k < kAgreed; ++k) {
      const int64_t theirs = all[kAgreed * size_t(r) + k];
      if (theirs != all[k]) {
        // (an unset channel count or exact shape travels as 0, an unset two_hop_bytes or direct_from_bytes as -1)
        auto said = [k](int64_t v) {
          const bool unset = ((k == 0 || k == 6 || k == 7) && v == 0) || (k >= 8 && k <= 9 && v < 0);
          return unset ? std::string("unset") : std::to_string(v);
        };
        throw InvalidArgument("ncclz: ranks disagree on " + std::string(agreed_what[k]) + " (rank 0: " + said(all[k]) +
                              ", rank " + std::to_string(r) + ": " + said(theirs) +
                              "); set it the same way on every rank");
      }
    }
  }
  // An unset channel count (0 on every rank, as just checked): each rank
  // proposes one from its share of the host's cores, and all take the
  // smallest, so that no rank runs more rings than its cores can drive. The
  // same round says whether some rank is short of cores for two rings, which
  // fixes the exact calls' shape (core::resolve_exact_shape) the same way on
  // every rank, whatever each one's CPUs or NCCLZ_CORES_PER_RANK (resolved
  // once the transport is known, below).
  const bool auto_channels = cfg.nchannels == 0;
  bool short_of_cores = false;
  const bool short_here = core::rings_share_cores(topo.local_size);  // (this rank's own: Runtime::short_of_cores)
  {
    const int64_t mine_p[2] = {core::proposed_channels(topo.local_size), short_here ? 1 : 0};
    std::vector<int64_t> proposals(static_cast<size_t>(size_) * 2, 0);
    boot_->allgather(mine_p, sizeof mine_p, proposals.data());
    int64_t fewest = mine_p[0];
    for (int r = 0; r < size_; ++r) {
      fewest = std::min(fewest, proposals[2 * size_t(r)]);
      short_of_cores = short_of_cores || proposals[2 * size_t(r) + 1] != 0;
    }
    if (auto_channels) cfg.nchannels = int(fewest);
  }

  // How the waits wait before they sleep (CommConfig::spin_us, Transport::
  // set_wait): where this machine's ranks have a CPU each, a pause spin and a
  // short poll; where they outnumber its CPUs, no pause spin (the awaited rank
  // may need this CPU) and a longer poll that yields the CPU between checks,
  // so that a rank runs as soon as a peer posts instead of sleeping until it
  // is woken (the bootstrap's host ids, not the topology override, say which
  // ranks share the machine).
  {
    int here = 0;
    for (int r = 0; r < size_; ++r) here += boot_->host_id(r) == boot_->host_id(rank_) ? 1 : 0;
    cpu_set_t cpus;
    const int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    const bool shared_cpus = here > ncpu;
    wait_pauses_ = shared_cpus ? 0 : transport::kSpinIters;
    if (cfg.spin_us < 0) cfg.spin_us = shared_cpus ? core::kDefaultSharedSpinUs : core::kDefaultSpinUs;
  }

  abort_ = std::make_shared<transport::AbortFlag>();
  transport::TransportConfig tc;
  tc.transport = cfg.transport;
  tc.slot_bytes = core::slot_of(cfg.slot_bytes);
  tc.nslots = cfg.nslots;
  tc.socket_ifname = cfg.socket_ifname;
  tc.throttle_gbps = cfg.throttle_gbps;
  transport_ = transport::create_transport(*boot_, tc, abort_);
  transport_->set_wait(wait_pauses_, int64_t(cfg.spin_us) * 1000);
  cfg.transport = transport::kind_name(transport_->kind());
  // Every rank has the same transport kind, so every rank resolves the same shape.
  core::resolve_exact_shape(cfg, auto_channels, short_of_cores, transport_->kind() == transport::Kind::Socket);
  core::resolve_two_hop(cfg, size_, transport_->kind() == transport::Kind::Socket, topo.hierarchical());
  // Direct two hops (transport/peer_memory.hpp): where every rank shares this
  // host, the topology is flat, the slots carry no checksums (asked for over
  // shared memory: the data stays in the checked slots) and every peer's
  // memory reads back (probed and agreed, so every rank decides the same).
  bool one_host = true;
  for (int r = 0; r < size_; ++r) one_host = one_host && boot_->host_id(r) == boot_->host_id(0);
  std::unique_ptr<transport::PeerMemory> peer_mem;
  if (size_ > 1) {
    const bool want = cfg.direct_from_bytes != 0 && cfg.p2p && one_host && !topo.hierarchical() &&
                      transport_->kind() != transport::Kind::Socket && !transport_->checksums();
    peer_mem = transport::PeerMemory::probe(*boot_, want);
    if (want && !peer_mem->usable()) {
      NCCLZ_INFO(rank_, "direct two hops off: %s", peer_mem->why_not().c_str());
    }
  }
  const bool direct_defaulted = cfg.direct_from_bytes < 0;  // (agreed above: unset on every rank, or the same value)
  core::resolve_direct(cfg, size_, peer_mem && peer_mem->usable());
  // The ring links' slots hold the larger slices too, except where slots are
  // reserved memory (shared memory: posix_fallocate'd for the whole ring):
  // there mostly-zero sums keep the ordinary slices. Every rank has the same
  // transport kind, so every rank decides the same.
  if (transport_->kind() == transport::Kind::SharedMemory) cfg.sparse_slice_bytes = cfg.slot_bytes;
  const size_t slot_capacity = core::slot_of(std::max(cfg.slot_bytes, cfg.sparse_slice_bytes));

  rt_ = std::make_unique<core::Runtime>(rank_, size_, cfg, slot_capacity, abort_,
                                        [this](const std::string& reason) { fail(reason); });
  rt_->topo = std::move(topo);
  rt_->short_of_cores = short_here;
  rt_->one_host = one_host;
  if (peer_mem && peer_mem->usable()) rt_->peer_mem = std::move(peer_mem);
  rt_->direct_defaulted = direct_defaulted;
  if (!cfg.trace_file.empty()) {
    rt_->trace = std::make_unique<trace::Recorder>(trace::file_for(cfg.trace_file, rank_), rank_, size_);
  }
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
    connect_hierarchical(tc, deadline);
    // The persistent ring kernels' connections (core/persistent_call.hpp):
    // made here, since connect() is collective; the ring takes them at its
    // first call.
    if (core::persistent_wanted(cfg, size_)) {
      rt_->persistent_links = transport::ring_channels(*transport_, rank_, size_, core::persistent_channels(cfg),
                                                       deadline, core::persistent_slot_bytes(cfg));
    }
  }
  // Rank 0's bootstrap may learn later that another process claims a rank of
  // this job (two jobs on one port): the communicator then aborts.
  boot_->set_conflict_handler([this](const std::string& why) { fail(why); });
  NCCLZ_INFO(rank_,
             "communicator: %d ranks, %d channels, %d slots x %zu bytes (slices of %zu bytes, %zu for mostly-zero "
             "lossy sums; exact calls: at most %d channels, slices of %zu bytes); topology %s",
             size_, cfg.nchannels, cfg.nslots, slot_capacity, cfg.slot_bytes, cfg.sparse_slice_bytes,
             cfg.exact_nchannels, cfg.exact_slice_bytes, rt_->topo.describe().c_str());
}

void CommunicatorImpl::connect_hierarchical(const transport::TransportConfig& tc, Clock::time_point deadline) {
  Topology& topo = rt_->topo;
  const char* main_kind = transport::kind_name(transport_->kind());
  topo.inter_link = topo.nhosts > 1 ? main_kind : "";
  topo.intra_link = topo.local_size > 1 ? main_kind : "";
  if (!topo.hierarchical()) return;
  const CommConfig& cfg = rt_->cfg;
  const int H = topo.nhosts, L = topo.local_size, h = topo.host, l = topo.local_rank;
  // A host's own transport where the communicator's is sockets and the host's
  // ranks share a machine (the bootstrap's host ids). Every rank decides every
  // host's case the same way, so all of them know whether the intra-host
  // rings of some host still go through the communicator's transport (whose
  // connect() every rank must then join).
  auto own_transport = [&](int g) {
    if (transport_->kind() != transport::Kind::Socket) return false;
    const int first = topo.rank_of(g, 0);
    for (int j = 1; j < L; ++j) {
      if (boot_->host_id(topo.rank_of(g, j)) != boot_->host_id(first)) return false;
    }
    return true;
  };
  bool any_shared = false;
  for (int g = 0; g < H; ++g) any_shared |= !own_transport(g);
  auto ring_peers = [](int prev, int next) {
    return prev == next ? std::vector<int>{next} : std::vector<int>{prev, next};
  };
  const int nch = cfg.nchannels;
  const size_t slot = core::slot_of(cfg.slot_bytes);

  // Intra-host rings: local rank l receives from l-1, sends to l+1.
  if (own_transport(h)) {
    std::vector<int> members(static_cast<size_t>(L));
    for (int j = 0; j < L; ++j) members[size_t(j)] = topo.rank_of(h, j);
    host_boot_ = std::make_unique<topology::GroupBootstrap>(*boot_, members, h);
    transport::TransportConfig htc = tc;
    htc.transport = "auto";  // shared memory (processes) or in-process (threads)
    htc.throttle_gbps = 0;
    topology::with_note(host_boot_->note(), [&] {
      host_transport_ = transport::create_transport(*host_boot_, htc, abort_);
      host_transport_->set_wait(wait_pauses_, int64_t(cfg.spin_us) * 1000);
      intra_links_ = host_transport_->connect(ring_peers((l + L - 1) % L, (l + 1) % L), nch, deadline, slot);
    });
    topo.intra_link = transport::kind_name(host_transport_->kind());
    if (any_shared) transport_->connect({}, nch, deadline, slot);
  } else {
    intra_links_ = transport_->connect(ring_peers(topo.rank_of(h, (l + L - 1) % L), topo.rank_of(h, (l + 1) % L)), nch,
                                       deadline, slot);
  }
  // Inter-host rings: host h receives from h-1, sends to h+1 (same local rank).
  inter_links_ = transport_->connect(ring_peers(topo.rank_of((h + H - 1) % H, l), topo.rank_of((h + 1) % H, l)), nch,
                                     deadline, slot);
  rt_->hier = std::make_unique<core::HierChannels>(topo, rank_, nch, cfg.nslots, cfg.slot_bytes,
                                                   host_boot_ ? host_boot_->note() : std::string());
  for (int c = 0; c < nch; ++c) {
    rt_->hier->attach_intra(c, intra_links_[size_t(c)].back().send.get(), intra_links_[size_t(c)].front().recv.get());
    rt_->hier->attach_inter(c, inter_links_[size_t(c)].back().send.get(), inter_links_[size_t(c)].front().recv.get());
  }
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
    if (rt_->hier) {
      for (int c = 0; c < rt_->hier->count(); ++c) {
        flush(rt_->hier->intra_send(c));
        flush(rt_->hier->inter_send(c));
      }
    }
    for (int r = 0; r < size_; ++r) {
      if (transport::PeerLink* l = rt_->peers.link(r)) flush(l->send.get());
    }
  }
  routine_.reset();
  if (rt_->trace) rt_->trace->write();  // the timeline (CommConfig::trace_file), before the connections close
  rt_.reset();
  p2p_links_.clear();
  ring_links_.clear();
  intra_links_.clear();
  inter_links_.clear();
  host_transport_.reset();
  host_boot_.reset();
  transport_.reset();
  boot_.reset();
}

void CommunicatorImpl::fail(const std::string& reason) {
  std::lock_guard<std::mutex> lk(abort_mu_);
  if (!abort_->set(reason)) return;  // aborted already (here, or by a peer's notice)
  // Tell the peers: every connection closes with the note, and each peer
  // passes it on (transport.hpp, "Aborting").
  if (transport_) transport_->abort("rank " + std::to_string(rank_) + " aborted the communicator: " + reason);
  try {
    boot_->abort(reason);
  } catch (...) {
  }
}

/// "all_reduce(count=8, float32) on thread 1234", "barrier() on thread 1234".
std::string call_words(const char* what, size_t count, DataType t, std::thread::id thread) {
  std::ostringstream o;
  if (std::string(what) == "barrier") {
    o << "barrier()";
  } else {
    o << what << "(count=" << count << ", " << dtype_name(t) << ")";
  }
  o << " on thread " << thread;
  return o.str();
}

void CommunicatorImpl::refuse(const CallArgs& a, const std::string& why) {
  CallGuard g(this, call_name(a.kind), 0, a.send_type);
  // The call's descriptor without its buffers or counts, which the refusal
  // does not trust (all_to_allv: all_to_all's, which reads no count arrays;
  // the kind only names the call in the others' error).
  CallArgs named;
  named.kind = a.kind == CallKind::AllToAllv ? CallKind::AllToAll : a.kind;
  named.op = a.op;
  named.root = a.root;
  const core::Collective cd = core::desc_of(named, rank_, size_);
  routine_->refuse_next(why.empty() ? std::string("refused by the caller") : why);
  try {
    if (cd.p2p()) {
      routine_->point_to_point(cd, a.send_type, Compression::none(), nullptr);
    } else {
      routine_->collective(cd, a.send_type, Compression::none(), nullptr, nullptr);
    }
  } catch (const InvalidArgument&) {
    // The refusal itself (or, send / recv, a peer that is no peer).
  }
}

CommunicatorImpl::CallGuard::CallGuard(CommunicatorImpl* c, const char* what, size_t count, DataType t) : c_(c) {
  if (!c_->call_mu_.try_lock()) {
    const std::string me = call_words(what, count, t, std::this_thread::get_id());
    std::string other;
    {
      std::lock_guard<std::mutex> lk(c_->running_mu_);
      const Running& r = c_->running_;
      other = r.what ? call_words(r.what, r.count, r.type, r.thread) : std::string("another call");
    }
    const std::string why = "two threads called the communicator at once: " + me + " while " + other +
                            " was running. A communicator runs one call at a time, and every rank must make its "
                            "calls in the same order; with several threads, make the calls from one thread (or "
                            "order them yourself, the same way on every rank), or give each thread its own "
                            "communicator";
    c_->fail(why);
    throw InvalidArgument("ncclz rank " + std::to_string(c_->rank_) + ": " + why +
                          ". The communicator was aborted: the ranks' call orders can no longer be trusted");
  }
  std::lock_guard<std::mutex> lk(c_->running_mu_);
  c_->running_ = Running{what, count, t, std::this_thread::get_id()};
}

CommunicatorImpl::CallGuard::~CallGuard() {
  {
    std::lock_guard<std::mutex> lk(c_->running_mu_);
    c_->running_.what = nullptr;
  }
  c_->call_mu_.unlock();
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
