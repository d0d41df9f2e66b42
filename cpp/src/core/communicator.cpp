// The C++ Communicator: connection setup, the API layer (argument checks, the
// call descriptor exchange, quantization and the error budget), and the
// channel threads that run the ring schedules.
//
// Connections. Each channel c has its own ring over ranks 0..N-1 in rank
// order: a receive connection from rank-1 and a send connection to rank+1
// (with N == 2 both are the one link to the other rank). Send/recv use a
// separate set of links, one to every other rank, connected eagerly at
// creation (Transport::connect is collective, so connections cannot be made
// lazily by two ranks alone). That costs (N-1) * nslots * slot_bytes of slot
// memory per rank for point-to-point; see docs/ALGORITHMS.md.
//
// Channels. A call with enough data runs nchannels rings in parallel, each over
// a contiguous part of the buffer, each on its own thread (channel 0 on the
// caller's thread, the others on a persistent worker pool that also splits the
// API layer's element-wise passes): parallel codec throughput. The number of channels used and
// every chunk boundary depend only on the call's count and user type, never on
// the compression mode, which is what keeps lossless bit-identical to none.
//
// A call. Check the arguments locally; exchange the call descriptor around
// channel 0's ring (core/call_desc.hpp: mismatch detection, and for lossy calls
// the input statistics); then
//  - none / lossless: run the schedule on the user's buffers (raw slots, or
//    slices through the selector); avg divides at the end;
//  - lossy: plan eb and the code width from the global statistics
//    (core/lossy_plan.hpp), quantize into the code buffer, agree in a second
//    small round that no rank had outliers, run the schedule on the codes,
//    dequantize once. Anything unusual (non-finite inputs, outliers, a bound
//    the type cannot honour) takes the exact path instead (docs/ALGORITHMS.md).
//
// Errors. Argument errors and mismatched calls are found before data moves and
// leave the communicator usable. A failure while data moves (timeout, corrupt
// slice, a vanished peer) leaves the slot FIFOs out of step, so it aborts the
// communicator: the sibling channels wake up with Aborted, the original error
// is rethrown, and later calls fail with Aborted.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "bootstrap/bootstrap.hpp"
#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "core/call_desc.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "core/types.hpp"
#include "base/worker_pool.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "transport/transport.hpp"

namespace ncclz {

// ---- configuration ----------------------------------------------------------

namespace {
constexpr int kDefaultChannels = 2;
constexpr size_t kDefaultSlotBytes = size_t(1) << 20;
/// Slices of mostly-zero lossy sums (NCCLZ_SPARSE_SLICE_BYTES): their slots
/// carry a few percent of these bytes, and each slot costs fixed work (wakeups,
/// frame setup), so they pay for larger ones than dense data, which overlaps
/// codec and link better with the smaller default.
constexpr size_t kDefaultSparseSliceBytes = size_t(8) << 20;
constexpr int kDefaultSlots = 4;
/// The transport slot that carries slices of `bytes` bytes of data: the slice
/// header on top, so that a slice holds exactly bytes / esize elements (with
/// power-of-two slot sizes the ring's chunks then split into whole slices,
/// with no short remainder slice or loop, each of which costs a ring step's
/// fixed latency).
constexpr size_t slot_of(size_t bytes) { return bytes + codec::kHeaderBytes; }
/// A call uses one more channel per this many bytes (up to nchannels).
constexpr size_t kBytesPerChannel = size_t(256) << 10;
}  // namespace

CommConfig CommConfig::from_env() {
  CommConfig c;
  c.rank = int(env::get_int("RANK", c.rank, 0, 1 << 30));
  c.size = int(env::get_int("WORLD_SIZE", c.size, 1, 1 << 30));
  c.master_addr = env::get_string("MASTER_ADDR", c.master_addr);
  c.master_port = int(env::get_int("MASTER_PORT", c.master_port, 0, 65535));
  c.token = env::get_string("NCCLZ_TOKEN", c.token);
  c.timeout_s = env::get_double("NCCLZ_TIMEOUT", c.timeout_s, 1e-3, 1e9);
  c.transport = env::get_string("NCCLZ_TRANSPORT", c.transport);
  c.nchannels = int(env::get_int("NCCLZ_NCHANNELS", c.nchannels, 0, 64));
  c.slot_bytes = size_t(env::get_int("NCCLZ_SLOT_BYTES", int64_t(c.slot_bytes), 0, int64_t(1) << 31));
  c.nslots = int(env::get_int("NCCLZ_NSLOTS", c.nslots, 0, 1024));
  c.sparse_slice_bytes = size_t(env::get_int("NCCLZ_SPARSE_SLICE_BYTES", int64_t(c.sparse_slice_bytes), 0,
                                             int64_t(1) << 31));
  c.throttle_gbps = env::get_double("NCCLZ_SOCKET_THROTTLE_GBPS", c.throttle_gbps, 0, 1e9);
  c.socket_ifname = env::get_string("NCCLZ_SOCKET_IFNAME", c.socket_ifname);
  return c;
}

namespace {

using namespace core;  // NOLINT: the communicator is the core's front door
using Clock = transport::Clock;
using Mode = Compression::Mode;

// ---- codec names ------------------------------------------------------------------

codec::EncodeOptions::Choice parse_codec(const std::string& s, bool* ok) {
  using C = codec::EncodeOptions::Choice;
  *ok = true;
  if (s.empty() || s == "auto") return C::Auto;
  if (s == "raw") return C::Raw;
  if (s == "block") return C::Block;
  if (s == "rans") return C::Rans;
  if (s == "floatexp" || s == "float") return C::FloatExp;
  if (s == "sparse") return C::Sparse;
  *ok = false;
  return C::Auto;
}

bool choice_accepts(codec::EncodeOptions::Choice ch, ElemType t) {
  using C = codec::EncodeOptions::Choice;
  switch (ch) {
    case C::Auto:
    case C::Raw: return true;
    case C::Block: return codec::codec_accepts(codec::Codec::Block, t, codec::Predictor::None);
    case C::Rans: return codec::codec_accepts(codec::Codec::Rans, t, codec::Predictor::None);
    case C::FloatExp: return codec::codec_accepts(codec::Codec::FloatExp, t, codec::Predictor::None);
    case C::Sparse: return codec::codec_accepts(codec::Codec::Sparse, t, codec::Predictor::None);
  }
  return false;
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool is_aborted_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Aborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

/// A growable 8-byte aligned buffer.
struct Buffer {
  std::unique_ptr<uint64_t[]> mem;
  size_t cap = 0;
  void* get(size_t bytes) {
    if (bytes > cap) {
      mem.reset(new uint64_t[(bytes + 7) / 8]);
      cap = (bytes + 7) / 8 * 8;
    }
    return mem.get();
  }
};

// ---- the communicator -------------------------------------------------------------

/// What the prims of one call move: wire type, slot format, reduction, codec.
struct Wire {
  ElemType type = ElemType::U8;
  prims::WireMode mode = prims::WireMode::Raw;
  RedOp op = RedOp::Sum;
  size_t raw_esize = 1;
  codec::EncodeOptions enc;
  prims::Stage* stage = nullptr;  ///< pipelined quantize/dequantize (lossy reductions)
  size_t slice_bytes = 0;         ///< slot bytes a slice is sized for (0: NCCLZ_SLOT_BYTES)
};

class CommunicatorImpl final : public Communicator {
 public:
  CommunicatorImpl(std::unique_ptr<Bootstrap> boot, const CommConfig& cfg);
  ~CommunicatorImpl() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Compression& c,
                  CallStats* stats) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, RedOp op, const Compression& c,
                      CallStats* stats) override;
  void all_gather(const void* send, void* recv, size_t send_count, DataType t, const Compression& c,
                  CallStats* stats) override;
  void broadcast(void* buf, size_t count, DataType t, int root, const Compression& c, CallStats* stats) override;
  void send(const void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override;
  void recv(void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) override;
  void barrier() override;
  void abort(const std::string& reason) override;

 private:
  struct Channel {
    transport::SendConn* send = nullptr;
    transport::RecvConn* recv = nullptr;
    Buffer scratch;
  };

  /// Per-call bookkeeping: wall time, channel counters, the CallStats out.
  struct Call {
    Clock::time_point t0 = Clock::now();
    Clock::time_point deadline;
    std::vector<prims::ChannelStats> ch;
    double quantize_s = 0;
    double bound = 0;
    bool fallback = false;
    Mode ran = Mode::None;   ///< the mode the call ran with
    bool lightened = false;  ///< rank 0's lighter proposal was taken
    double rans_margin = -1; ///< rank 0's codec effort (EncodeOptions::rans_margin; < 0: default)
    CallStats* out = nullptr;
    void finish() {
      if (!out) return;
      prims::ChannelStats s;
      for (const auto& c : ch) s.add(c);
      CallStats r;
      r.raw_bytes = s.raw_bytes;
      r.wire_bytes = s.wire_bytes;
      r.ratio = s.wire_bytes ? double(s.raw_bytes) / double(s.wire_bytes) : 1.0;
      r.encode_s = s.encode_s;
      r.decode_s = s.decode_s;
      r.quantize_s = quantize_s + s.stage_s;
      r.wait_s = s.wait_s;
      r.wall_s = seconds(t0, Clock::now());
      r.error_bound = bound;
      r.exact_fallback = fallback;
      r.ran_mode = ran;
      r.lightened = lightened;
      *out = r;
    }
  };

  // -- helpers
  Call begin(CallStats* stats);
  void check_alive() const;
  void fail(const std::string& reason);
  Mode effective_mode(const Compression& c, size_t bytes) const;
  std::string check_compression(DataType t, Mode m, const Compression& c) const;
  CallDesc make_desc(Coll coll, size_t count, DataType t, RedOp op, int root, Mode m, const Compression& c) const;
  std::vector<CallDesc> exchange(const CallDesc& mine, Call& call);
  /// The mode every rank runs the call with: rank 0's lighter proposal, else m.
  /// For a lossy m the proposal is taken only if the exact run in the element
  /// type keeps the bound E (exact_keeps_bound); `call` records the outcome.
  Mode run_mode(const std::vector<CallDesc>& all, Mode m, DataType t, core::Combine how, const Compression& c,
                Call& call) const;
  void check_all(const std::vector<CallDesc>& all, const std::string& my_err) const;
  bool any_outliers(uint64_t seq, size_t mine, Call& call);
  /// Whether a pipelined lossy sum is mostly zero: every rank's scan listed
  /// its input (CallDesc::density) and their nonzeros together stay below the
  /// share where the selector takes Sparse from (so the sum is mostly zero
  /// too). Such calls run with slices of sparse_slice_bytes_. A function of
  /// all descriptors: every rank decides the same.
  bool mostly_zero(const std::vector<CallDesc>& all) const;
  int pick_channels(size_t bytes) const;
  Wire native_wire(DataType t, Mode m, RedOp op, const Compression& c) const;
  Wire code_wire(DataType t, bool wide, RedOp op, const Compression& c) const;
  prims::Prims make_prims(int c, const Wire& w, Call& call);

  // -- point to point
  /// What send() and recv() settle before the handshake.
  struct P2PCall {
    std::string me;   ///< "ncclz rank R: " prefix for errors
    Mode m;           ///< effective mode
    int nch;          ///< threads for the API-layer passes
    std::string err;  ///< this rank's argument error ("" if none)
    CallDesc d;       ///< this rank's call descriptor
  };
  P2PCall p2p_begin(Coll coll, const void* buf, size_t count, DataType t, int peer, const Compression& c);
  /// Prims on the p2p link to a peer; w = Wire{} moves raw bytes (the handshake).
  prims::Prims p2p_prims(transport::PeerLink& link, const Wire& w, Call& call, prims::ChannelStats* st);
  /// Runs fn; a failure other than Aborted aborts the communicator ("<what> failed: ...") and rethrows.
  template <class Fn>
  void p2p_step(const char* what, Fn&& fn);
  template <class Fn>
  void run_channels(int nch, Call& call, Fn&& fn);

  // -- wire-level collectives (all ranks already agreed on the call)
  void exec_all_reduce(const void* src, void* dst, size_t count, const Wire& w, int nch, Call& call);
  void exec_reduce_scatter(const void* src, void* dst, size_t rc, const Wire& w, int nch, Call& call);
  void exec_all_gather(const void* src, void* dst, size_t sc, const Wire& w, int nch, Call& call);
  void exec_broadcast(void* buf, size_t count, int root, const Wire& w, int nch, Call& call);
  template <class Exec>
  void reduce_call(Coll coll, const void* send, void* recv, size_t desc_count, size_t in_count, size_t out_count,
                   DataType t, RedOp op, const Compression& c, CallStats* stats, Exec&& exec);

  CommConfig cfg_;
  int rank_ = 0, size_ = 1;
  int nch_ = kDefaultChannels;
  size_t slot_bytes_ = kDefaultSlotBytes;  ///< a slice's slot bytes (NCCLZ_SLOT_BYTES)
  size_t sparse_slice_bytes_ = kDefaultSparseSliceBytes;  ///< mostly-zero lossy sums' (== slot_bytes_: off)
  size_t slot_capacity_ = kDefaultSlotBytes;  ///< the transport's slots: the larger of the two
  int nslots_ = kDefaultSlots;
  bool pipeline_quantize_ = true;  ///< NCCLZ_PIPELINE_QUANTIZE; rank 0's setting decides (kEagerQuantize)
  bool sparse_input_ = true;       ///< NCCLZ_SPARSE_INPUT; per rank (results do not depend on it)
  core::NonzeroIndex nonzeros_;    ///< the lossy reductions' list of input nonzeros (LossyStage)
  std::unique_ptr<Bootstrap> boot_;
  std::shared_ptr<transport::AbortFlag> abort_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::vector<transport::PeerLink>> ring_links_, p2p_links_;
  std::vector<Channel> ch_;
  std::vector<transport::PeerLink*> p2p_;  // by peer rank
  std::unique_ptr<base::WorkerPool> pool_;  // channels 1.. and the API-layer passes
  bool p2p_enabled_ = true;                // NCCLZ_P2P
  Buffer p2p_scratch_;
  Buffer work_[2];
  uint64_t seq_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;
  std::mutex call_mu_;   // one call at a time
  std::mutex abort_mu_;  // abort()/fail() against each other
};

CommunicatorImpl::CommunicatorImpl(std::unique_ptr<Bootstrap> boot, const CommConfig& cfg)
    : cfg_(cfg), boot_(std::move(boot)) {
  rank_ = boot_->rank();
  size_ = boot_->size();
  nch_ = cfg.nchannels > 0 ? cfg.nchannels : int(env::get_int("NCCLZ_NCHANNELS", kDefaultChannels, 1, 64));
  slot_bytes_ = cfg.slot_bytes > 0 ? cfg.slot_bytes
                                   : size_t(env::get_int("NCCLZ_SLOT_BYTES", int64_t(kDefaultSlotBytes), 1024,
                                                         int64_t(1) << 31));
  nslots_ = cfg.nslots > 0 ? cfg.nslots : int(env::get_int("NCCLZ_NSLOTS", kDefaultSlots, 1, 1024));
  pipeline_quantize_ = env::get_int("NCCLZ_PIPELINE_QUANTIZE", 1, 0, 1) != 0;
  sparse_input_ = env::get_int("NCCLZ_SPARSE_INPUT", 1, 0, 1) != 0;
  sparse_slice_bytes_ =
      cfg.sparse_slice_bytes > 0
          ? cfg.sparse_slice_bytes
          : size_t(env::get_int("NCCLZ_SPARSE_SLICE_BYTES", int64_t(kDefaultSparseSliceBytes), 0, int64_t(1) << 31));
  if (sparse_slice_bytes_ <= slot_bytes_) sparse_slice_bytes_ = slot_bytes_;  // no larger slices
  if (nch_ < 1 || nch_ > 64) throw InvalidArgument("ncclz: nchannels must be in [1, 64], got " + std::to_string(nch_));
  if (nslots_ < 2) {
    // Forwarding holds its incoming slot while it acquires the outgoing one:
    // with one slot per connection every rank of a ring could wait on the next.
    throw InvalidArgument("ncclz: nslots (NCCLZ_NSLOTS) must be at least 2, got " + std::to_string(nslots_));
  }
  if (slot_bytes_ < 1024) {
    throw InvalidArgument("ncclz: slot_bytes must be at least 1024, got " + std::to_string(slot_bytes_));
  }
  p2p_enabled_ = env::get_bool("NCCLZ_P2P", true);
  // Every rank must run the same number of rings, agree on point-to-point
  // links and slice the same way (both ends of a connection compute the same
  // slices from the slot sizes).
  constexpr size_t kAgreed = 5;
  const char* agreed_what[kAgreed] = {"NCCLZ_NCHANNELS", "NCCLZ_P2P", "NCCLZ_SLOT_BYTES", "NCCLZ_NSLOTS",
                                      "NCCLZ_SPARSE_SLICE_BYTES"};
  std::vector<int64_t> all(static_cast<size_t>(size_) * kAgreed, 0);
  const int64_t mine[kAgreed] = {nch_, p2p_enabled_ ? 1 : 0, int64_t(slot_bytes_), nslots_,
                                 int64_t(sparse_slice_bytes_)};
  boot_->allgather(mine, sizeof mine, all.data());
  for (int r = 0; r < size_; ++r) {
    for (size_t k = 0; k < kAgreed; ++k) {
      const int64_t theirs = all[kAgreed * size_t(r) + k];
      if (theirs != all[k]) {
        throw InvalidArgument("ncclz: ranks disagree on " + std::string(agreed_what[k]) + " (rank 0: " +
                              std::to_string(all[k]) + ", rank " + std::to_string(r) + ": " +
                              std::to_string(theirs) + "); set it the same way on every rank");
      }
    }
  }

  abort_ = std::make_shared<transport::AbortFlag>();
  transport::TransportConfig tc;
  tc.transport = cfg.transport;
  tc.slot_bytes = slot_of(slot_bytes_);
  tc.nslots = nslots_;
  tc.socket_ifname = cfg.socket_ifname;
  tc.throttle_gbps = cfg.throttle_gbps;
  transport_ = transport::create_transport(*boot_, tc, abort_);
  // The ring links' slots hold the larger slices too, except where slots are
  // reserved memory (shared memory: posix_fallocate'd for the whole ring):
  // there mostly-zero sums keep the ordinary slices. Every rank has the same
  // transport kind, so every rank decides the same.
  if (transport_->kind() == transport::Kind::SharedMemory) sparse_slice_bytes_ = slot_bytes_;
  slot_capacity_ = slot_of(std::max(slot_bytes_, sparse_slice_bytes_));

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(cfg.timeout_s > 0 ? cfg.timeout_s : 300));
  ch_.resize(size_t(nch_));
  send_seq_.assign(size_t(size_), 0);
  recv_seq_.assign(size_t(size_), 0);
  p2p_.assign(size_t(size_), nullptr);
  if (size_ > 1) {
    const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
    std::vector<int> peers = prev == next ? std::vector<int>{next} : std::vector<int>{prev, next};
    ring_links_ = transport_->connect(peers, nch_, deadline, slot_capacity_);
    for (int c = 0; c < nch_; ++c) {
      auto& links = ring_links_[size_t(c)];
      const size_t ip = 0, in = peers.size() - 1;
      ch_[size_t(c)].recv = links[ip].recv.get();
      ch_[size_t(c)].send = links[in].send.get();
    }
    if (p2p_enabled_) {
      std::vector<int> others;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) others.push_back(r);
      }
      p2p_links_ = transport_->connect(others, 1, deadline);
      for (size_t i = 0; i < others.size(); ++i) p2p_[size_t(others[i])] = &p2p_links_[0][i];
    }
  }
  for (auto& c : ch_) c.scratch.get(slot_capacity_ + 64);
  p2p_scratch_.get(slot_of(slot_bytes_) + 64);
  pool_ = std::make_unique<base::WorkerPool>(nch_ - 1);
  // Rank 0's bootstrap may learn later that another process claims a rank of
  // this job (two jobs on one port): the communicator then aborts.
  boot_->set_conflict_handler([this](const std::string& why) { fail(why); });
  NCCLZ_INFO(rank_,
             "communicator: %d ranks, %d channels, %d slots x %zu bytes (slices of %zu bytes, %zu for mostly-zero "
             "lossy sums)",
             size_, nch_, nslots_, slot_capacity_, slot_bytes_, sparse_slice_bytes_);
}

CommunicatorImpl::~CommunicatorImpl() {
  boot_->set_conflict_handler(nullptr);  // no fail() from the bootstrap's thread from here on
  // A call still running on another thread (abort() then destroy, as
  // ncclzCommAbort does) leaves with Aborted first.
  std::lock_guard<std::mutex> lk(call_mu_);
  // Let the last posted slots reach the peers before the connections close.
  if (!abort_->aborted.load()) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::min(30.0, cfg_.timeout_s)));
    auto flush = [&](transport::SendConn* s) {
      try {
        if (s) s->flush(deadline);
      } catch (const std::exception& e) {
        NCCLZ_WARN(rank_, "communicator: flushing the connection to rank %d at destruction failed: %s", s->peer(),
                   e.what());
      }
    };
    for (auto& c : ch_) flush(c.send);
    for (auto* l : p2p_) {
      if (l) flush(l->send.get());
    }
  }
  p2p_.clear();
  ch_.clear();
  p2p_links_.clear();
  ring_links_.clear();
  transport_.reset();
  boot_.reset();
}

void CommunicatorImpl::abort(const std::string& reason) { fail(reason); }

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

void CommunicatorImpl::check_alive() const {
  if (abort_->aborted.load()) {
    throw Aborted("ncclz rank " + std::to_string(rank_) + ": the communicator was aborted (" + abort_->reason +
                  "); create a new one");
  }
}

CommunicatorImpl::Call CommunicatorImpl::begin(CallStats* stats) {
  check_alive();
  Call c;
  c.out = stats;
  c.deadline = c.t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.timeout_s));
  return c;
}

Mode CommunicatorImpl::effective_mode(const Compression& c, size_t bytes) const {
  if (c.mode == Mode::Lossless && c.min_bytes && bytes < c.min_bytes) return Mode::None;
  return c.mode;
}

std::string CommunicatorImpl::check_compression(DataType t, Mode m, const Compression& c) const {
  if (!valid_dtype(uint8_t(t))) return "unknown data type " + std::to_string(int(t));
  if (uint8_t(m) > uint8_t(Mode::LossyRel)) return "unknown compression mode " + std::to_string(int(m));
  if (is_lossy(m)) {
    if (!is_float(t)) {
      return std::string("lossy compression needs a floating-point type, got ") + dtype_name(uint8_t(t)) +
             " (use Compression::lossless() or none() for integers)";
    }
    if (!(c.bound > 0) || !std::isfinite(c.bound)) {
      std::ostringstream s;
      s << "the lossy error bound must be positive and finite, got " << c.bound;
      return s.str();
    }
  }
  if (c.lighter < -1 || c.lighter > int(Mode::Lossless)) {
    return "the policy's lighter mode must be -1 (none proposed), 0 (none) or 1 (lossless), got " +
           std::to_string(c.lighter);
  }
  if (!(c.rans_margin < 0) && !(c.rans_margin <= 1)) {
    std::ostringstream s;
    s << "the policy's rans_margin must be < 0 (the selector's default) or in [0, 1], got " << c.rans_margin;
    return s.str();
  }
  if (c.codec.size() >= sizeof(CallDesc::codec)) return "codec name '" + c.codec + "' is too long";
  bool ok = false;
  const auto ch = parse_codec(c.codec, &ok);
  if (!ok) return "unknown codec '" + c.codec + "' (auto, raw, block, rans, sparse, floatexp)";
  if (m == Mode::Lossless && !choice_accepts(ch, elem_of(t))) {
    return "codec '" + c.codec + "' does not accept " + dtype_name(uint8_t(t)) + " values in lossless mode";
  }
  if (is_lossy(m) && !choice_accepts(ch, ElemType::I32)) {
    return "codec '" + c.codec + "' does not accept the integer codes of lossy mode";
  }
  return "";
}

CallDesc CommunicatorImpl::make_desc(Coll coll, size_t count, DataType t, RedOp op, int root, Mode m,
                                     const Compression& c) const {
  CallDesc d;
  d.coll = uint8_t(coll);
  d.count = count;
  d.dtype = uint8_t(t);
  d.op = uint8_t(op);
  d.root = root;
  d.mode = uint8_t(m);
  d.bound = (is_lossy(m) ? c.bound : 0.0);
  if (m != Mode::None) std::memcpy(d.codec, c.codec.data(), std::min(c.codec.size(), sizeof d.codec - 1));
  // Only a strictly lighter proposal is carried (None < Lossless < lossy).
  if (c.lighter >= 0 && c.lighter < std::min(int(m), int(Mode::Lossless) + 1)) d.lighter = uint8_t(c.lighter + 1);
  if (c.rans_margin >= 0 && c.rans_margin <= 1) d.rans_margin = uint8_t(std::lround(c.rans_margin * 100) + 1);
  return d;
}

namespace {

double largest_of(DataType t) {
  switch (t) {
    case DataType::F32: return double(std::numeric_limits<float>::max());
    case DataType::F64: return std::numeric_limits<double>::max();
    case DataType::F16: return 65504.0;
    case DataType::BF16: return 3.3895313892515355e38;
    default: return 0;
  }
}

// Whether the plain collective in the element type keeps |out - exact| <= E.
// Max/min and data movement return one rank's value exactly. A ring sum adds
// N-1 times in T, each partial sum bounded by N*A (A = max |x|), so it is off
// by at most (N-1) half-ulps of N*A; avg adds one rounding of the division.
// The policy's proposal is taken when that is at most half of E.
bool exact_keeps_bound(DataType t, core::Combine how, int nranks, double E, const core::DataStats& g) {
  if (how == core::Combine::Select) return true;
  if (g.nonfinite || !(E > 0) || !std::isfinite(E)) return false;
  const double N = double(nranks);
  const double R = N * g.maxabs * (1 + std::ldexp(1.0, -30));
  if (!(R < largest_of(t))) return false;
  double err = (N - 1) * core::half_ulp_bound(elem_of(t), R);
  if (how == core::Combine::Mean) err = err / N + core::half_ulp_bound(elem_of(t), g.maxabs);
  return err <= 0.5 * E;
}

}  // namespace

Mode CommunicatorImpl::run_mode(const std::vector<CallDesc>& all, Mode m, DataType t, core::Combine how,
                                const Compression& c, Call& call) const {
  call.ran = m;
  if (all[0].rans_margin) call.rans_margin = double(std::min<int>(all[0].rans_margin, 101) - 1) / 100.0;
  const int p = int(all[0].lighter) - 1;
  if (p < 0 || p >= std::min(int(m), int(Mode::Lossless) + 1)) return m;
  if (is_lossy(m)) {
    const core::DataStats g = merge_stats(all);
    const double E = resolve_bound(c, g);
    if (!exact_keeps_bound(t, how, size_, E, g)) {
      NCCLZ_TRACE(rank_, "call #%llu: policy proposal %s ignored: the exact sum in the element type may exceed the "
                  "bound", (unsigned long long)all[0].seq, p == 0 ? "none" : "lossless");
      return m;
    }
    call.bound = E;
  }
  call.ran = Mode(p);
  call.lightened = true;
  NCCLZ_TRACE(rank_, "call #%llu runs %s instead of %s (rank 0's policy)", (unsigned long long)all[0].seq,
              p == 0 ? "none" : "lossless", mode_string(uint8_t(m), 0, "").c_str());
  return call.ran;
}

std::vector<CallDesc> CommunicatorImpl::exchange(const CallDesc& mine, Call& call) {
  std::vector<CallDesc> all(static_cast<size_t>(size_));
  if (size_ == 1) {
    all[0] = mine;
    return all;
  }
  prims::ChannelStats st;  // control traffic is not counted in the call's stats
  prims::PrimsArgs a;
  a.type = ElemType::U8;
  a.mode = prims::WireMode::Raw;
  a.raw_esize = 1;
  a.deadline = call.deadline;
  a.rank = rank_;
  a.channel = 0;
  a.slice_bytes = slot_of(slot_bytes_);
  try {
    prims::Prims p(ch_[0].send, ch_[0].recv, a, &st, ch_[0].scratch.get(slot_capacity_ + 64));
    algorithms::ring_all_gather(p, {rank_, size_}, &mine, all.data(), sizeof(CallDesc), sizeof(CallDesc),
                                sizeof(CallDesc));
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("call descriptor exchange failed: ") + e.what());
    throw;
  }
  return all;
}

void CommunicatorImpl::check_all(const std::vector<CallDesc>& all, const std::string& my_err) const {
  const std::string me = "ncclz rank " + std::to_string(rank_) + ": ";
  if (!my_err.empty()) {
    throw InvalidArgument(me + describe(all[size_t(rank_)]) + ": " + my_err);
  }
  for (int r = 0; r < size_; ++r) {
    if (all[size_t(r)].flags & core::kInvalid) {
      throw RemoteError(me + "rank " + std::to_string(r) + " called call #" + std::to_string(all[size_t(r)].seq) +
                        " " + describe(all[size_t(r)]) +
                        " with invalid arguments (it raised InvalidArgument); the call was cancelled on every rank");
    }
  }
  for (int r = 1; r < size_; ++r) {
    if (!same_call(all[0], all[size_t(r)])) {
      throw RemoteError(me + "mismatched calls: rank 0 called call #" + std::to_string(all[0].seq) + " " +
                        describe(all[0]) + " but rank " + std::to_string(r) + " called call #" +
                        std::to_string(all[size_t(r)].seq) + " " + describe(all[size_t(r)]) +
                        ". Every rank must make the same collective calls in the same order (same count, type, "
                        "op, root and compression); the call was cancelled on every rank");
    }
  }
}

bool CommunicatorImpl::any_outliers(uint64_t seq, size_t mine, Call& call) {
  CallDesc d;
  d.coll = uint8_t(Coll::Outliers);
  d.seq = seq;
  if (mine) d.flags |= core::kOutliers;
  const auto all = exchange(d, call);
  bool any = false;
  for (const auto& x : all) {
    if (x.coll != d.coll || x.seq != seq) {
      fail("lossy outlier round out of step");
      throw RemoteError("ncclz rank " + std::to_string(rank_) + ": the lossy outlier round of call #" +
                        std::to_string(seq) + " is out of step with another rank");
    }
    any |= (x.flags & core::kOutliers) != 0;
  }
  return any;
}

bool CommunicatorImpl::mostly_zero(const std::vector<CallDesc>& all) const {
  double total = 0;
  for (const CallDesc& d : all) {
    if (d.density == 0) return false;
    total += d.density;
  }
  return total <= 1024.0 * (1.0 - codec::EncodeOptions{}.sparse_fast_zeros);
}

int CommunicatorImpl::pick_channels(size_t bytes) const {
  const size_t n = bytes / kBytesPerChannel;
  return int(std::max<size_t>(1, std::min<size_t>(size_t(nch_), n)));
}

Wire CommunicatorImpl::native_wire(DataType t, Mode m, RedOp op, const Compression& c) const {
  Wire w;
  w.type = elem_of(t);
  w.mode = m == Mode::None ? prims::WireMode::Raw : prims::WireMode::Coded;
  w.op = op;
  w.raw_esize = dsize(t);
  bool ok = false;
  w.enc.choice = parse_codec(c.codec, &ok);
  w.enc.row = c.row;
  w.enc.plane = c.plane;
  return w;
}

Wire CommunicatorImpl::code_wire(DataType t, bool wide, RedOp op, const Compression& c) const {
  Wire w;
  w.type = wide ? ElemType::I64 : ElemType::I32;
  w.mode = prims::WireMode::Coded;
  w.op = op == RedOp::Avg ? RedOp::Sum : op;
  w.raw_esize = dsize(t);
  bool ok = false;
  w.enc.choice = parse_codec(c.codec, &ok);
  w.enc.row = c.row;
  w.enc.plane = c.plane;
  return w;
}

prims::Prims CommunicatorImpl::make_prims(int c, const Wire& w, Call& call) {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.reduce = prims::reduce_fn(w.type, w.op);
  a.int_sum = (w.type == ElemType::I32 || w.type == ElemType::I64) && (w.op == RedOp::Sum || w.op == RedOp::Avg);
  a.enc = w.enc;
  if (call.rans_margin >= 0) a.enc.rans_margin = call.rans_margin;  // rank 0's codec effort
  a.raw_esize = w.raw_esize;
  a.deadline = call.deadline;
  a.rank = rank_;
  a.channel = c;
  a.stage = w.stage;
  a.slice_bytes = slot_of(w.slice_bytes ? w.slice_bytes : slot_bytes_);
  Channel& ch = ch_[size_t(c)];
  return prims::Prims(ch.send, ch.recv, a, &call.ch[size_t(c)], ch.scratch.get(slot_capacity_ + 64));
}

template <class Fn>
void CommunicatorImpl::run_channels(int nch, Call& call, Fn&& fn) {
  call.ch.assign(size_t(nch), prims::ChannelStats{});
  std::vector<std::exception_ptr> errs(static_cast<size_t>(nch));
  auto guarded = [&](int c) {
    try {
      fn(c);
      // The call is complete only when its last slots have left this process
      // (the socket proxy may still be writing them): a rank may exit right
      // after the call returns, and its peers must still get every byte.
      if (ch_[size_t(c)].send) ch_[size_t(c)].send->flush(call.deadline);
    } catch (...) {
      errs[size_t(c)] = std::current_exception();
      std::string what = "failed";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      fail("channel " + std::to_string(c) + ": " + what);
    }
  };
  pool_->run(nch, guarded);
  std::exception_ptr first;
  for (auto& e : errs) {
    if (e && !is_aborted_error(e)) {
      first = e;
      break;
    }
  }
  if (!first) {
    for (auto& e : errs) {
      if (e) {
        first = e;
        break;
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

// ---- wire-level collectives ---------------------------------------------------------

void CommunicatorImpl::exec_all_reduce(const void* src, void* dst, size_t count, const Wire& w, int nch,
                                       Call& call) {
  const size_t es = codec::elem_size(w.type);
  run_channels(nch, call, [&](int c) {
    const size_t b = count * size_t(c) / size_t(nch), e = count * size_t(c + 1) / size_t(nch);
    prims::Prims p = make_prims(c, w, call);
    algorithms::ring_all_reduce(p, {rank_, size_}, static_cast<const uint8_t*>(src) + b * es,
                                static_cast<uint8_t*>(dst) + b * es, e - b, algorithms::ring_segment_elems(p, nslots_));
  });
}

void CommunicatorImpl::exec_reduce_scatter(const void* src, void* dst, size_t rc, const Wire& w, int nch,
                                           Call& call) {
  const size_t es = codec::elem_size(w.type);
  run_channels(nch, call, [&](int c) {
    const size_t b = rc * size_t(c) / size_t(nch), e = rc * size_t(c + 1) / size_t(nch);
    prims::Prims p = make_prims(c, w, call);
    algorithms::ring_reduce_scatter(p, {rank_, size_}, static_cast<const uint8_t*>(src) + b * es, rc,
                                    static_cast<uint8_t*>(dst) + b * es, e - b,
                                    algorithms::ring_segment_elems(p, nslots_));
  });
}

void CommunicatorImpl::exec_all_gather(const void* src, void* dst, size_t sc, const Wire& w, int nch, Call& call) {
  const size_t es = codec::elem_size(w.type);
  run_channels(nch, call, [&](int c) {
    const size_t b = sc * size_t(c) / size_t(nch), e = sc * size_t(c + 1) / size_t(nch);
    prims::Prims p = make_prims(c, w, call);
    algorithms::ring_all_gather(p, {rank_, size_}, static_cast<const uint8_t*>(src) + b * es,
                                static_cast<uint8_t*>(dst) + b * es, sc, e - b,
                                algorithms::ring_segment_elems(p, nslots_));
  });
}

void CommunicatorImpl::exec_broadcast(void* buf, size_t count, int root, const Wire& w, int nch, Call& call) {
  const size_t es = codec::elem_size(w.type);
  run_channels(nch, call, [&](int c) {
    const size_t b = count * size_t(c) / size_t(nch), e = count * size_t(c + 1) / size_t(nch);
    prims::Prims p = make_prims(c, w, call);
    algorithms::chain_broadcast(p, {rank_, size_}, root, static_cast<uint8_t*>(buf) + b * es, e - b);
  });
}

// ---- the API ----------------------------------------------------------------------

std::string check_reduce_op(DataType t, RedOp op, Mode m) {
  if (!valid_op(uint8_t(op))) return "unknown reduction op " + std::to_string(int(op));
  if (is_lossy(m) && op == RedOp::Prod) return "prod is not offered in lossy mode (use lossless or none)";
  (void)t;
  return "";
}

std::string check_buffers(const void* a, const void* b, size_t count) {
  if (count > 0 && (!a || !b)) return "null buffer with count > 0";
  return "";
}

core::Combine combine_of(RedOp op) {
  return op == RedOp::Sum ? core::Combine::Sum : op == RedOp::Avg ? core::Combine::Mean : core::Combine::Select;
}

// all_reduce and reduce_scatter share one body: `in_count` input elements,
// `out_count` output elements (equal for allreduce, which then works in place
// on its code buffer), and `exec` runs the schedule on wire buffers.
template <class Exec>
void CommunicatorImpl::reduce_call(Coll coll, const void* send, void* recv, size_t desc_count, size_t in_count,
                                   size_t out_count, DataType t, RedOp op, const Compression& c, CallStats* stats,
                                   Exec&& exec) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const Mode m = effective_mode(c, in_count * dsize(t));
  const int nch = pick_channels(in_count * dsize(t));
  const bool in_place_codes = coll == Coll::AllReduce;
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_reduce_op(t, op, m);
  if (err.empty()) err = check_buffers(send, recv, desc_count);
  CallDesc d = make_desc(coll, desc_count, t, op, -1, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  if (!pipeline_quantize_) d.flags |= core::kEagerQuantize;
  // Sums of a mostly-zero input: the scan lists its nonzeros, and the
  // pipelined path carries them as lists (LossyStage::prepare_nonzeros), where
  // the wire codec may be Sparse (an unknown name is check_compression's error).
  bool known_codec = false;
  const auto choice = parse_codec(c.codec, &known_codec);
  const bool lossy_sum = is_lossy(m) && err.empty() && (op == RedOp::Sum || op == RedOp::Avg);
  const bool sparse_codec =
      choice == codec::EncodeOptions::Choice::Auto || choice == codec::EncodeOptions::Choice::Sparse;
  core::NonzeroIndex* index = lossy_sum && sparse_input_ && size_ > 1 && sparse_codec ? &nonzeros_ : nullptr;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty()) put_stats(d, scan(t, send, in_count, pool_.get(), nch, index));
  if (index && index->covers_all()) {
    const double per1024 = std::ceil(1024.0 * double(index->listed()) / double(std::max<size_t>(1, in_count)));
    d.density = uint8_t(std::clamp(per1024, 1.0, 255.0));
  }
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const Mode run = run_mode(all, m, t, combine_of(op), c, call);

  if (!is_lossy(run)) {
    exec(send, recv, native_wire(t, run, op, run == m ? c : Compression{}), nch, call);
    if (op == RedOp::Avg) prims::divide_in_place(elem_of(t), recv, out_count, size_);
    call.finish();
    return;
  }

  const core::DataStats g = merge_stats(all);
  const double E = resolve_bound(c, g);
  core::LossyPlan plan = core::plan_lossy(elem_of(t), combine_of(op), size_, E, g);
  apply_min_bytes(plan, c, in_count * dsize(t));
  call.bound = E;
  void* codes = nullptr;
  void* out_codes = nullptr;
  const double out_step = op == RedOp::Avg ? 2 * plan.eb / double(size_) : 2 * plan.eb;
  if (plan.compress && size_ > 1 && !(all[0].flags & core::kEagerQuantize)) {
    // Quantize and dequantize slice by slice inside the ring's loops, so they
    // overlap the transfers (prims::Stage, core::LossyStage). The plan rules out
    // outliers for these statistics, so no rank needs to quantize everything
    // before the first slice leaves.
    const size_t cs = plan.wide ? 8 : 4;
    codes = work_[0].get(in_count * cs);
    out_codes = in_place_codes ? codes : work_[1].get(out_count * cs);
    core::LossyStage stage(t, plan, send, codes, recv, out_codes, out_step, index,
                           in_place_codes && send == recv);
    Wire w = code_wire(t, plan.wide, op, c);
    w.stage = &stage;
    w.slice_bytes = mostly_zero(all) && sparse_slice_bytes_ > slot_bytes_ ? sparse_slice_bytes_ : 0;
    exec(codes, out_codes, w, nch, call);
    call.finish();
    return;
  }
  if (plan.compress) {
    const auto t1 = Clock::now();
    const size_t cs = plan.wide ? 8 : 4;
    codes = work_[0].get(in_count * cs);
    out_codes = in_place_codes ? codes : work_[1].get(out_count * cs);
    const size_t outliers = quantize_buf(t, plan, send, in_count, codes, pool_.get(), nch);
    call.quantize_s += seconds(t1, Clock::now());
    if (any_outliers(d.seq, outliers, call)) {
      plan.compress = false;
      plan.why_not = "quantizer outliers";
    }
  }
  if (!plan.compress) {
    // Exact path: sum/avg accumulate in double and round once; max/min are exact in T.
    call.fallback = true;
    NCCLZ_TRACE(rank_, "%s: lossy call #%llu runs exactly: %s", coll_name(coll), (unsigned long long)d.seq,
                plan.why_not);
    if (op == RedOp::Max || op == RedOp::Min) {
      exec(send, recv, native_wire(t, Mode::None, op, c), nch, call);
    } else {
      double* din = static_cast<double*>(work_[0].get(in_count * 8));
      double* dout = in_place_codes ? din : static_cast<double*>(work_[1].get(out_count * 8));
      to_f64(t, send, in_count, din, pool_.get(), nch);
      Wire w;
      w.type = ElemType::F64;
      w.raw_esize = dsize(t);
      // Mostly-zero inputs on every rank: the doubles go losslessly coded (the
      // selector takes Sparse over their bit patterns), not 8 raw bytes each.
      // Same schedule, same additions: the same bits.
      if (mostly_zero(all)) w.mode = prims::WireMode::Coded;
      exec(din, dout, w, nch, call);
      from_f64(t, dout, out_count, op == RedOp::Avg ? double(size_) : 1.0, recv, pool_.get(), nch);
    }
    call.finish();
    return;
  }
  exec(codes, out_codes, code_wire(t, plan.wide, op, c), nch, call);
  const auto t2 = Clock::now();
  dequantize_buf(t, plan.wide, out_codes, out_count, out_step, recv, pool_.get(), nch);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                  const Compression& c, CallStats* stats) {
  reduce_call(Coll::AllReduce, send, recv, count, count, count, t, op, c, stats,
              [&](const void* src, void* dst, const Wire& w, int nch, Call& call) {
                exec_all_reduce(src, dst, count, w, nch, call);
              });
}

void CommunicatorImpl::reduce_scatter(const void* send, void* recv, size_t rc, DataType t, RedOp op,
                                      const Compression& c, CallStats* stats) {
  reduce_call(Coll::ReduceScatter, send, recv, rc, rc * size_t(size_), rc, t, op, c, stats,
              [&](const void* src, void* dst, const Wire& w, int nch, Call& call) {
                exec_reduce_scatter(src, dst, rc, w, nch, call);
              });
}

void CommunicatorImpl::all_gather(const void* send, void* recv, size_t sc, DataType t, const Compression& c,
                                  CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const size_t total = sc * size_t(size_);
  const Mode m = effective_mode(c, total * dsize(t));
  const int nch = pick_channels(total * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_buffers(send, recv, sc);
  CallDesc d = make_desc(Coll::AllGather, sc, t, RedOp::Sum, -1, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty()) put_stats(d, scan(t, send, sc, pool_.get(), nch));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const Mode run = run_mode(all, m, t, core::Combine::Select, c, call);
  if (run != m) {
    exec_all_gather(send, recv, sc, native_wire(t, run, RedOp::Sum, Compression{}), nch, call);
    call.finish();
    return;
  }

  core::LossyPlan plan;
  if (is_lossy(m)) {
    const core::DataStats g = merge_stats(all);
    const double E = resolve_bound(c, g);
    plan = core::plan_lossy(elem_of(t), core::Combine::Select, size_, E, g);
    apply_min_bytes(plan, c, total * dsize(t));
    call.bound = E;
  }
  void* own = nullptr;
  void* codes = nullptr;
  if (is_lossy(m) && plan.compress) {
    const auto t1 = Clock::now();
    const size_t cs = plan.wide ? 8 : 4;
    own = work_[0].get(sc * cs);
    codes = work_[1].get(total * cs);
    const size_t outliers = quantize_buf(t, plan, send, sc, own, pool_.get(), nch);
    call.quantize_s += seconds(t1, Clock::now());
    if (any_outliers(d.seq, outliers, call)) plan.compress = false;
  }
  if (!is_lossy(m) || !plan.compress) {
    call.fallback = is_lossy(m);
    exec_all_gather(send, recv, sc, native_wire(t, is_lossy(m) ? Mode::None : m, RedOp::Sum, c), nch, call);
    call.finish();
    return;
  }
  exec_all_gather(own, codes, sc, code_wire(t, plan.wide, RedOp::Sum, c), nch, call);
  const auto t2 = Clock::now();
  dequantize_buf(t, plan.wide, codes, total, 2 * plan.eb, recv, pool_.get(), nch);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::broadcast(void* buf, size_t count, DataType t, int root, const Compression& c,
                                 CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const Mode m = effective_mode(c, count * dsize(t));
  const int nch = pick_channels(count * dsize(t));
  std::string err;
  if (root < 0 || root >= size_) {
    err = "root " + std::to_string(root) + " is not a rank of this communicator (size " + std::to_string(size_) + ")";
  }
  if (err.empty()) err = check_compression(t, m, c);
  if (err.empty()) err = check_buffers(buf, buf, count);
  CallDesc d = make_desc(Coll::Broadcast, count, t, RedOp::Sum, root, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty() && rank_ == root) put_stats(d, scan(t, buf, count, pool_.get(), nch));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const Mode run = run_mode(all, m, t, core::Combine::Select, c, call);
  if (run != m) {
    exec_broadcast(buf, count, root, native_wire(t, run, RedOp::Sum, Compression{}), nch, call);
    call.finish();
    return;
  }

  core::LossyPlan plan;
  if (is_lossy(m)) {
    const core::DataStats g = merge_stats(all);  // only the root contributed statistics
    const double E = resolve_bound(c, g);
    plan = core::plan_lossy(elem_of(t), core::Combine::Select, size_, E, g);
    apply_min_bytes(plan, c, count * dsize(t));
    call.bound = E;
  }
  void* codes = nullptr;
  if (is_lossy(m) && plan.compress) {
    const auto t1 = Clock::now();
    codes = work_[0].get(count * (plan.wide ? 8 : 4));
    size_t outliers = 0;
    if (rank_ == root) outliers = quantize_buf(t, plan, buf, count, codes, pool_.get(), nch);
    call.quantize_s += seconds(t1, Clock::now());
    if (any_outliers(d.seq, outliers, call)) plan.compress = false;
  }
  if (!is_lossy(m) || !plan.compress) {
    call.fallback = is_lossy(m);
    exec_broadcast(buf, count, root, native_wire(t, is_lossy(m) ? Mode::None : m, RedOp::Sum, c), nch, call);
    call.finish();
    return;
  }
  exec_broadcast(codes, count, root, code_wire(t, plan.wide, RedOp::Sum, c), nch, call);
  const auto t2 = Clock::now();
  // The root too takes the dequantized values: every rank ends bit-identical.
  dequantize_buf(t, plan.wide, codes, count, 2 * plan.eb, buf, pool_.get(), nch);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::barrier() {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(nullptr);
  CallDesc d;
  d.coll = uint8_t(Coll::Barrier);
  d.seq = seq_++;
  const auto all = exchange(d, call);
  check_all(all, "");
}

// Point-to-point. The sender posts its descriptor (with its lossy plan) on the
// link, the receiver answers with its own; each side checks the pair and both
// throw on a mismatch before any data moves. Then the data follows on the same
// link: the user type (none: raw slots; lossless: coded) or the sender's codes.

CommunicatorImpl::P2PCall CommunicatorImpl::p2p_begin(Coll coll, const void* buf, size_t count, DataType t,
                                                      int peer, const Compression& c) {
  const bool sending = coll == Coll::Send;
  const char* verb = sending ? "send" : "recv";
  P2PCall p;
  p.me = "ncclz rank " + std::to_string(rank_) + ": ";
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw InvalidArgument(p.me + verb + ": peer " + std::to_string(peer) +
                          " must be another rank of this communicator (0.." + std::to_string(size_ - 1) +
                          ", not " + std::to_string(rank_) + ")");
  }
  if (!p2p_enabled_) {
    throw InvalidArgument(p.me + verb + ": point-to-point links are off (NCCLZ_P2P=0 at communicator creation)");
  }
  p.m = effective_mode(c, count * dsize(t));
  p.nch = pick_channels(count * dsize(t));
  p.err = check_compression(t, p.m, c);
  if (p.err.empty()) p.err = check_buffers(buf, buf, count);
  p.d = make_desc(coll, count, t, RedOp::Sum, sending ? rank_ : peer, p.m, c);
  p.d.peer = sending ? peer : rank_;
  p.d.seq = (sending ? send_seq_ : recv_seq_)[size_t(peer)]++;
  if (!p.err.empty()) p.d.flags |= core::kInvalid;
  return p;
}

prims::Prims CommunicatorImpl::p2p_prims(transport::PeerLink& link, const Wire& w, Call& call,
                                         prims::ChannelStats* st) {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.enc = w.enc;
  a.raw_esize = w.raw_esize;
  a.deadline = call.deadline;
  a.rank = rank_;
  a.channel = -1;
  a.slice_bytes = slot_of(slot_bytes_);
  return prims::Prims(link.send.get(), link.recv.get(), a, st, p2p_scratch_.get(slot_of(slot_bytes_) + 64));
}

template <class Fn>
void CommunicatorImpl::p2p_step(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string(what) + " failed: " + e.what());
    throw;
  }
}

void CommunicatorImpl::send(const void* buf, size_t count, DataType t, int peer, const Compression& c,
                            CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  P2PCall pc = p2p_begin(Coll::Send, buf, count, t, peer, c);
  const std::string& me = pc.me;
  const Mode m = pc.m;
  call.ran = m;
  const int nch = pc.nch;
  const std::string& err = pc.err;
  CallDesc& d = pc.d;

  core::LossyPlan plan;
  void* codes = nullptr;
  if (is_lossy(m) && err.empty()) {
    const auto t1 = Clock::now();
    const core::DataStats s = scan(t, buf, count, pool_.get(), nch);
    const double E = resolve_bound(c, s);
    plan = core::plan_lossy(elem_of(t), core::Combine::Select, 1, E, s);
    apply_min_bytes(plan, c, count * dsize(t));
    call.bound = E;
    if (plan.compress) {
      codes = work_[0].get(count * (plan.wide ? 8 : 4));
      if (quantize_buf(t, plan, buf, count, codes, pool_.get(), nch) > 0) plan.compress = false;
    }
    call.fallback = !plan.compress;
    if (plan.compress) {
      d.flags |= core::kCompress;
      if (plan.wide) d.flags |= core::kWide;
      d.eb = plan.eb;
    }
    d.E = E;
    call.quantize_s += seconds(t1, Clock::now());
  }

  transport::PeerLink& link = *p2p_[size_t(peer)];
  CallDesc ans;
  call.ch.assign(1, prims::ChannelStats{});
  p2p_step("send handshake", [&] {
    prims::ChannelStats ctl;
    prims::Prims p = p2p_prims(link, Wire{}, call, &ctl);
    p.send(&d, sizeof d);
    p.recv(&ans, sizeof ans);
  });
  if (!err.empty()) throw InvalidArgument(me + describe(d) + ": " + err);
  if (ans.flags & core::kInvalid) {
    throw RemoteError(me + describe(d) + ": the receiving rank " + std::to_string(peer) + " called " +
                      describe(ans) + " with invalid arguments; the transfer was cancelled");
  }
  const std::string why = ans.coll != uint8_t(Coll::Recv) || ans.root != rank_ ? "it is not a matching recv"
                                                                                 : p2p_mismatch(d, ans);
  if (!why.empty()) {
    throw RemoteError(me + "mismatched send/recv: rank " + std::to_string(rank_) + " called " + describe(d) +
                      " but rank " + std::to_string(peer) + " called " + describe(ans) + " (" + why +
                      "); the transfer was cancelled on both ranks");
  }
  Wire w = (d.flags & core::kCompress) ? code_wire(t, plan.wide, RedOp::Sum, c)
                                       : native_wire(t, is_lossy(m) ? Mode::None : m, RedOp::Sum, c);
  p2p_step("send", [&] {
    prims::Prims p = p2p_prims(link, w, call, &call.ch[0]);
    p.send((d.flags & core::kCompress) ? codes : buf, count);
    link.send->flush(call.deadline);  // complete only once the bytes have left this process
  });
  call.finish();
}

void CommunicatorImpl::recv(void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  P2PCall pc = p2p_begin(Coll::Recv, buf, count, t, peer, c);
  const std::string& me = pc.me;
  const Mode m = pc.m;
  call.ran = m;
  const int nch = pc.nch;
  const std::string& err = pc.err;
  CallDesc& d = pc.d;

  transport::PeerLink& link = *p2p_[size_t(peer)];
  CallDesc snd;
  call.ch.assign(1, prims::ChannelStats{});
  p2p_step("recv handshake", [&] {
    prims::ChannelStats ctl;
    prims::Prims p = p2p_prims(link, Wire{}, call, &ctl);
    p.recv(&snd, sizeof snd);
    p.send(&d, sizeof d);
  });
  if (!err.empty()) throw InvalidArgument(me + describe(d) + ": " + err);
  if (snd.flags & core::kInvalid) {
    throw RemoteError(me + describe(d) + ": the sending rank " + std::to_string(peer) + " called " + describe(snd) +
                      " with invalid arguments; the transfer was cancelled");
  }
  const std::string why = snd.coll != uint8_t(Coll::Send) || snd.peer != rank_ ? "it is not a matching send"
                                                                                 : p2p_mismatch(snd, d);
  if (!why.empty()) {
    throw RemoteError(me + "mismatched send/recv: rank " + std::to_string(peer) + " called " + describe(snd) +
                      " but rank " + std::to_string(rank_) + " called " + describe(d) + " (" + why +
                      "); the transfer was cancelled on both ranks");
  }
  const bool compressed = (snd.flags & core::kCompress) != 0;
  const bool wide = (snd.flags & core::kWide) != 0;
  if (is_lossy(m)) {
    call.fallback = !compressed;
    call.bound = snd.E;
  }
  Wire w = compressed ? code_wire(t, wide, RedOp::Sum, c)
                      : native_wire(t, is_lossy(m) ? Mode::None : m, RedOp::Sum, c);
  void* target = compressed ? work_[0].get(count * (wide ? 8 : 4)) : buf;
  p2p_step("recv", [&] {
    prims::Prims p = p2p_prims(link, w, call, &call.ch[0]);
    p.recv(target, count);
  });
  if (compressed) {
    const auto t2 = Clock::now();
    dequantize_buf(t, wide, target, count, 2 * snd.eb, buf, pool_.get(), nch);
    call.quantize_s += seconds(t2, Clock::now());
  }
  call.finish();
}

}  // namespace

// ---- factories --------------------------------------------------------------------------

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
