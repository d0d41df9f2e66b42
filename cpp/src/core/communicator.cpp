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
// caller's thread): parallel codec throughput. The number of channels used and
// every chunk boundary depend only on the call's count and user type, never on
// the compression mode, which is what keeps lossless bit-identical to none.
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
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/lossy_plan.hpp"
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
constexpr int kDefaultSlots = 4;
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
  c.throttle_gbps = env::get_double("NCCLZ_SOCKET_THROTTLE_GBPS", c.throttle_gbps, 0, 1e9);
  c.socket_ifname = env::get_string("NCCLZ_SOCKET_IFNAME", c.socket_ifname);
  return c;
}

namespace {

using codec::ElemType;
using core::CallDesc;
using core::Coll;
using Clock = transport::Clock;
using Mode = Compression::Mode;

// ---- names and types ----------------------------------------------------------

ElemType elem_of(DataType t) {
  switch (t) {
    case DataType::F32: return ElemType::F32;
    case DataType::F64: return ElemType::F64;
    case DataType::F16: return ElemType::F16;
    case DataType::BF16: return ElemType::BF16;
    case DataType::I32: return ElemType::I32;
    case DataType::I64: return ElemType::I64;
    case DataType::U8: return ElemType::U8;
  }
  throw InvalidArgument("ncclz: unknown data type " + std::to_string(int(t)));
}

bool valid_dtype(uint8_t t) { return t <= uint8_t(DataType::U8); }
bool valid_op(uint8_t o) { return o <= uint8_t(RedOp::Prod); }
bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}
size_t dsize(DataType t) { return valid_dtype(uint8_t(t)) ? codec::elem_size(elem_of(t)) : 0; }
bool is_lossy(Mode m) { return m == Mode::LossyAbs || m == Mode::LossyRel; }

const char* dtype_name(uint8_t t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"};
  return valid_dtype(t) ? names[t] : "?";
}
const char* op_name(uint8_t o) {
  static const char* names[] = {"sum", "avg", "max", "min", "prod"};
  return valid_op(o) ? names[o] : "?";
}
const char* coll_name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "all_reduce";
    case Coll::ReduceScatter: return "reduce_scatter";
    case Coll::AllGather: return "all_gather";
    case Coll::Broadcast: return "broadcast";
    case Coll::Send: return "send";
    case Coll::Recv: return "recv";
    case Coll::Barrier: return "barrier";
    case Coll::Outliers: return "(lossy outlier round)";
  }
  return "?";
}

std::string mode_string(uint8_t mode, double bound, const char* codec) {
  std::ostringstream s;
  switch (Mode(mode)) {
    case Mode::None: s << "none"; break;
    case Mode::Lossless: s << "lossless"; break;
    case Mode::LossyAbs: s << "lossy_abs(" << bound << ")"; break;
    case Mode::LossyRel: s << "lossy_rel(" << bound << ")"; break;
    default: s << "mode " << int(mode);
  }
  if (codec && codec[0]) s << ", codec=" << std::string(codec, strnlen(codec, 16));
  return s.str();
}

std::string describe(const CallDesc& d) {
  std::ostringstream s;
  const Coll c = Coll(d.coll);
  s << coll_name(c) << "(";
  if (c == Coll::Barrier) return s.str() + ")";
  s << (c == Coll::ReduceScatter ? "recv_count=" : c == Coll::AllGather ? "send_count=" : "count=") << d.count << ", "
    << dtype_name(d.dtype);
  if (c == Coll::AllReduce || c == Coll::ReduceScatter) s << ", " << op_name(d.op);
  if (c == Coll::Broadcast) s << ", root=" << d.root;
  if (c == Coll::Send) s << ", peer=" << d.peer;
  if (c == Coll::Recv) s << ", peer=" << d.root;
  s << ", " << mode_string(d.mode, d.bound, d.codec) << ")";
  return s.str();
}

bool same_call(const CallDesc& a, const CallDesc& b) {
  return a.seq == b.seq && a.coll == b.coll && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root && a.mode == b.mode && std::memcmp(&a.bound, &b.bound, sizeof(double)) == 0 &&
         std::memcmp(a.codec, b.codec, sizeof a.codec) == 0;
}

codec::EncodeOptions::Choice parse_codec(const std::string& s, bool* ok) {
  using C = codec::EncodeOptions::Choice;
  *ok = true;
  if (s.empty() || s == "auto") return C::Auto;
  if (s == "raw") return C::Raw;
  if (s == "block") return C::Block;
  if (s == "rans") return C::Rans;
  if (s == "floatexp" || s == "float") return C::FloatExp;
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
  }
  return false;
}

// ---- typed helpers for the lossy path -------------------------------------------

template <class Fn>
void with_float_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::F32: fn(float{}); return;
    case DataType::F64: fn(double{}); return;
    case DataType::F16: fn(codec::F16{}); return;
    case DataType::BF16: fn(codec::Bf16{}); return;
    default: throw InvalidArgument("ncclz: lossy compression needs a floating-point type");
  }
}

template <class Fn>
void with_code_type(bool wide, Fn&& fn) {
  if (wide) {
    fn(int64_t{});
  } else {
    fn(int32_t{});
  }
}

/// One pass: finite min/max/max|x| and whether any element is non-finite.
template <class T>
core::DataStats scan_typed(const T* x, size_t n) {
  core::DataStats s;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool bad = false;
  constexpr size_t kBlock = 1024;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    double l = lo, h = hi;
    bool nf = false;
    for (size_t i = 0; i < m; ++i) {
      const double v = codec::to_double(x[b + i]);
      const bool fin = codec::abs_le(v, std::numeric_limits<double>::max());
      nf |= !fin;
      l = (fin && v < l) ? v : l;
      h = (fin && v > h) ? v : h;
    }
    lo = l;
    hi = h;
    bad |= nf;
  }
  s.nonfinite = bad;
  s.any_finite = lo <= hi;
  if (s.any_finite) {
    s.lo = lo;
    s.hi = hi;
    s.maxabs = std::max(std::fabs(lo), std::fabs(hi));
  }
  return s;
}

core::DataStats scan(DataType t, const void* x, size_t n) {
  core::DataStats s;
  with_float_type(t, [&](auto tag) { s = scan_typed(static_cast<const decltype(tag)*>(x), n); });
  return s;
}

void put_stats(CallDesc& d, const core::DataStats& s) {
  if (s.any_finite) d.flags |= core::kAnyFinite;
  if (s.nonfinite) d.flags |= core::kNonFinite;
  d.lo = s.lo;
  d.hi = s.hi;
  d.maxabs = s.maxabs;
}

core::DataStats merge_stats(const std::vector<CallDesc>& all) {
  core::DataStats g;
  for (const CallDesc& d : all) {
    if (d.flags & core::kNonFinite) g.nonfinite = true;
    if (!(d.flags & core::kAnyFinite)) continue;
    if (!g.any_finite) {
      g.lo = d.lo;
      g.hi = d.hi;
      g.maxabs = d.maxabs;
      g.any_finite = true;
    } else {
      g.lo = std::min(g.lo, d.lo);
      g.hi = std::max(g.hi, d.hi);
      g.maxabs = std::max(g.maxabs, d.maxabs);
    }
  }
  return g;
}

/// Lossy messages under min_bytes run exactly (the plan says so).
void apply_min_bytes(core::LossyPlan& p, const Compression& c, size_t bytes) {
  if (p.compress && c.min_bytes && bytes < c.min_bytes) {
    p.compress = false;
    p.why_not = "message smaller than min_bytes";
  }
}

double resolve_bound(const Compression& c, const core::DataStats& g) {
  if (c.mode == Mode::LossyAbs) return c.bound;
  return g.any_finite ? c.bound * (g.hi - g.lo) : 0.0;
}

size_t quantize_buf(DataType t, const core::LossyPlan& p, const void* x, size_t n, void* q) {
  size_t out = 0;
  codec::QuantGrid g = codec::QuantGrid::from_bound(p.eb);
  g.eb = p.check_eb;  // the grid is 2*eb; the check allows for T's rounding (lossy_plan.hpp)
  std::vector<uint64_t> idx;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(p.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      out = codec::quantize<T, Code>(static_cast<const T*>(x), n, g, p.limit, static_cast<Code*>(q), &idx);
    });
  });
  return out;
}

/// out[i] = T(q[i] * step) (step = 2*eb, or 2*eb/N for avg).
void dequantize_buf(DataType t, bool wide, const void* q, size_t n, double step, void* out) {
  codec::QuantGrid g;
  g.step = step;
  g.eb = step / 2;
  g.inv_step = 1 / step;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(wide, [&](auto ctag) {
      using Code = decltype(ctag);
      codec::dequantize<T, Code>(static_cast<const Code*>(q), n, g, static_cast<T*>(out));
    });
  });
}

void to_f64(DataType t, const void* x, size_t n, double* out) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    for (size_t i = 0; i < n; ++i) out[i] = codec::to_double(p[i]);
  });
}

/// out[i] = T(in[i] / div), one rounding.
void from_f64(DataType t, const double* in, size_t n, double div, void* out) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    if (div == 1) {
      for (size_t i = 0; i < n; ++i) p[i] = codec::from_double<T>(in[i]);
    } else {
      for (size_t i = 0; i < n; ++i) p[i] = codec::from_double<T>(in[i] / div);
    }
  });
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
      r.quantize_s = quantize_s;
      r.wait_s = s.wait_s;
      r.wall_s = seconds(t0, Clock::now());
      r.error_bound = bound;
      r.exact_fallback = fallback;
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
  void check_all(const std::vector<CallDesc>& all, const std::string& my_err) const;
  bool any_outliers(uint64_t seq, size_t mine, Call& call);
  int pick_channels(size_t bytes) const;
  Wire native_wire(DataType t, Mode m, RedOp op, const Compression& c) const;
  Wire code_wire(DataType t, bool wide, RedOp op, const Compression& c) const;
  prims::Prims make_prims(int c, const Wire& w, Call& call);
  template <class Fn>
  void run_channels(int nch, Call& call, Fn&& fn);

  // -- wire-level collectives (all ranks already agreed on the call)
  void exec_all_reduce(const void* src, void* dst, size_t count, const Wire& w, int nch, Call& call);
  void exec_reduce_scatter(const void* src, void* dst, size_t rc, const Wire& w, int nch, Call& call);
  void exec_all_gather(const void* src, void* dst, size_t sc, const Wire& w, int nch, Call& call);
  void exec_broadcast(void* buf, size_t count, int root, const Wire& w, int nch, Call& call);

  CommConfig cfg_;
  int rank_ = 0, size_ = 1;
  int nch_ = kDefaultChannels;
  size_t slot_bytes_ = kDefaultSlotBytes;
  int nslots_ = kDefaultSlots;
  std::unique_ptr<Bootstrap> boot_;
  std::shared_ptr<transport::AbortFlag> abort_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::vector<transport::PeerLink>> ring_links_, p2p_links_;
  std::vector<Channel> ch_;
  std::vector<transport::PeerLink*> p2p_;  // by peer rank
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
  if (nch_ < 1 || nch_ > 64) throw InvalidArgument("ncclz: nchannels must be in [1, 64], got " + std::to_string(nch_));
  if (nslots_ < 2) {
    // Forwarding holds its incoming slot while it acquires the outgoing one:
    // with one slot per connection every rank of a ring could wait on the next.
    throw InvalidArgument("ncclz: nslots (NCCLZ_NSLOTS) must be at least 2, got " + std::to_string(nslots_));
  }
  if (slot_bytes_ < 1024) {
    throw InvalidArgument("ncclz: slot_bytes must be at least 1024, got " + std::to_string(slot_bytes_));
  }
  // Every rank must run the same number of rings.
  std::vector<int32_t> all(static_cast<size_t>(size_), 0);
  const int32_t mine = nch_;
  boot_->allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < size_; ++r) {
    if (all[r] != all[0]) {
      throw InvalidArgument("ncclz: rank 0 uses " + std::to_string(all[0]) + " channels but rank " +
                            std::to_string(r) + " uses " + std::to_string(all[r]) +
                            "; set NCCLZ_NCHANNELS the same way on every rank");
    }
  }

  abort_ = std::make_shared<transport::AbortFlag>();
  transport::TransportConfig tc;
  tc.transport = cfg.transport;
  tc.slot_bytes = slot_bytes_;
  tc.nslots = nslots_;
  tc.socket_ifname = cfg.socket_ifname;
  tc.throttle_gbps = cfg.throttle_gbps;
  transport_ = transport::create_transport(*boot_, tc, abort_);

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(cfg.timeout_s > 0 ? cfg.timeout_s : 300));
  ch_.resize(size_t(nch_));
  send_seq_.assign(size_t(size_), 0);
  recv_seq_.assign(size_t(size_), 0);
  p2p_.assign(size_t(size_), nullptr);
  if (size_ > 1) {
    const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
    std::vector<int> peers = prev == next ? std::vector<int>{next} : std::vector<int>{prev, next};
    ring_links_ = transport_->connect(peers, nch_, deadline);
    for (int c = 0; c < nch_; ++c) {
      auto& links = ring_links_[size_t(c)];
      const size_t ip = 0, in = peers.size() - 1;
      ch_[size_t(c)].recv = links[ip].recv.get();
      ch_[size_t(c)].send = links[in].send.get();
    }
    std::vector<int> others;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) others.push_back(r);
    }
    p2p_links_ = transport_->connect(others, 1, deadline);
    for (size_t i = 0; i < others.size(); ++i) p2p_[size_t(others[i])] = &p2p_links_[0][i];
  }
  for (auto& c : ch_) c.scratch.get(slot_bytes_ + 64);
  p2p_scratch_.get(slot_bytes_ + 64);
  NCCLZ_INFO(rank_, "communicator: %d ranks, %d channels, %d slots x %zu bytes", size_, nch_, nslots_, slot_bytes_);
}

CommunicatorImpl::~CommunicatorImpl() {
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
  if (c.codec.size() >= sizeof(CallDesc::codec)) return "codec name '" + c.codec + "' is too long";
  bool ok = false;
  const auto ch = parse_codec(c.codec, &ok);
  if (!ok) return "unknown codec '" + c.codec + "' (auto, raw, block, rans, floatexp)";
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
  return d;
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
  try {
    prims::Prims p(ch_[0].send, ch_[0].recv, a, &st, ch_[0].scratch.get(slot_bytes_ + 64));
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
  return w;
}

prims::Prims CommunicatorImpl::make_prims(int c, const Wire& w, Call& call) {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.reduce = prims::reduce_fn(w.type, w.op);
  a.enc = w.enc;
  a.raw_esize = w.raw_esize;
  a.deadline = call.deadline;
  a.rank = rank_;
  a.channel = c;
  Channel& ch = ch_[size_t(c)];
  return prims::Prims(ch.send, ch.recv, a, &call.ch[size_t(c)], ch.scratch.get(slot_bytes_ + 64));
}

template <class Fn>
void CommunicatorImpl::run_channels(int nch, Call& call, Fn&& fn) {
  call.ch.assign(size_t(nch), prims::ChannelStats{});
  std::vector<std::exception_ptr> errs(static_cast<size_t>(nch));
  auto guarded = [&](int c) {
    try {
      fn(c);
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
  if (nch == 1) {
    guarded(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(size_t(nch - 1));
    for (int c = 1; c < nch; ++c) threads.emplace_back(guarded, c);
    guarded(0);
    for (auto& t : threads) t.join();
  }
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

void CommunicatorImpl::all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                  const Compression& c, CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const Mode m = effective_mode(c, count * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_reduce_op(t, op, m);
  if (err.empty()) err = check_buffers(send, recv, count);
  CallDesc d = make_desc(Coll::AllReduce, count, t, op, -1, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty()) put_stats(d, scan(t, send, count));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const int nch = pick_channels(count * dsize(t));

  if (!is_lossy(m)) {
    exec_all_reduce(send, recv, count, native_wire(t, m, op, c), nch, call);
    if (op == RedOp::Avg) prims::divide_in_place(elem_of(t), recv, count, size_);
    call.finish();
    return;
  }

  const core::DataStats g = merge_stats(all);
  const double E = resolve_bound(c, g);
  core::LossyPlan plan = core::plan_lossy(elem_of(t), combine_of(op), size_, E, g);
  apply_min_bytes(plan, c, count * dsize(t));
  call.bound = E;
  void* codes = nullptr;
  if (plan.compress) {
    const auto t1 = Clock::now();
    codes = work_[0].get(count * (plan.wide ? 8 : 4));
    const size_t outliers = quantize_buf(t, plan, send, count, codes);
    call.quantize_s += seconds(t1, Clock::now());
    if (any_outliers(d.seq, outliers, call)) {
      plan.compress = false;
      plan.why_not = "quantizer outliers";
    }
  }
  if (!plan.compress) {
    // Exact path: sum/avg accumulate in double and round once; max/min are exact in T.
    call.fallback = true;
    NCCLZ_TRACE(rank_, "all_reduce: lossy call #%llu runs exactly: %s", (unsigned long long)d.seq, plan.why_not);
    if (op == RedOp::Max || op == RedOp::Min) {
      exec_all_reduce(send, recv, count, native_wire(t, Mode::None, op, c), nch, call);
    } else {
      double* dd = static_cast<double*>(work_[1].get(count * 8));
      to_f64(t, send, count, dd);
      Wire w;
      w.type = ElemType::F64;
      w.raw_esize = dsize(t);
      exec_all_reduce(dd, dd, count, w, nch, call);
      from_f64(t, dd, count, op == RedOp::Avg ? double(size_) : 1.0, recv);
    }
    call.finish();
    return;
  }
  exec_all_reduce(codes, codes, count, code_wire(t, plan.wide, op, c), nch, call);
  const auto t2 = Clock::now();
  const double step = 2 * plan.eb;
  dequantize_buf(t, plan.wide, codes, count, op == RedOp::Avg ? step / double(size_) : step, recv);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::reduce_scatter(const void* send, void* recv, size_t rc, DataType t, RedOp op,
                                      const Compression& c, CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const size_t total = rc * size_t(size_);
  const Mode m = effective_mode(c, total * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_reduce_op(t, op, m);
  if (err.empty()) err = check_buffers(send, recv, rc);
  CallDesc d = make_desc(Coll::ReduceScatter, rc, t, op, -1, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty()) put_stats(d, scan(t, send, total));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const int nch = pick_channels(total * dsize(t));

  if (!is_lossy(m)) {
    exec_reduce_scatter(send, recv, rc, native_wire(t, m, op, c), nch, call);
    if (op == RedOp::Avg) prims::divide_in_place(elem_of(t), recv, rc, size_);
    call.finish();
    return;
  }
  const core::DataStats g = merge_stats(all);
  const double E = resolve_bound(c, g);
  core::LossyPlan plan = core::plan_lossy(elem_of(t), combine_of(op), size_, E, g);
  apply_min_bytes(plan, c, total * dsize(t));
  call.bound = E;
  void* codes = nullptr;
  void* out_codes = nullptr;
  if (plan.compress) {
    const auto t1 = Clock::now();
    const size_t cs = plan.wide ? 8 : 4;
    codes = work_[0].get(total * cs);
    out_codes = work_[1].get(rc * cs);
    const size_t outliers = quantize_buf(t, plan, send, total, codes);
    call.quantize_s += seconds(t1, Clock::now());
    if (any_outliers(d.seq, outliers, call)) {
      plan.compress = false;
      plan.why_not = "quantizer outliers";
    }
  }
  if (!plan.compress) {
    call.fallback = true;
    if (op == RedOp::Max || op == RedOp::Min) {
      exec_reduce_scatter(send, recv, rc, native_wire(t, Mode::None, op, c), nch, call);
    } else {
      double* din = static_cast<double*>(work_[0].get(total * 8));
      double* dout = static_cast<double*>(work_[1].get(rc * 8));
      to_f64(t, send, total, din);
      Wire w;
      w.type = ElemType::F64;
      w.raw_esize = dsize(t);
      exec_reduce_scatter(din, dout, rc, w, nch, call);
      from_f64(t, dout, rc, op == RedOp::Avg ? double(size_) : 1.0, recv);
    }
    call.finish();
    return;
  }
  exec_reduce_scatter(codes, out_codes, rc, code_wire(t, plan.wide, op, c), nch, call);
  const auto t2 = Clock::now();
  const double step = 2 * plan.eb;
  dequantize_buf(t, plan.wide, out_codes, rc, op == RedOp::Avg ? step / double(size_) : step, recv);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::all_gather(const void* send, void* recv, size_t sc, DataType t, const Compression& c,
                                  CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const size_t total = sc * size_t(size_);
  const Mode m = effective_mode(c, total * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_buffers(send, recv, sc);
  CallDesc d = make_desc(Coll::AllGather, sc, t, RedOp::Sum, -1, m, c);
  d.seq = seq_++;
  if (!err.empty()) d.flags |= core::kInvalid;
  const auto tq = Clock::now();
  if (is_lossy(m) && err.empty()) put_stats(d, scan(t, send, sc));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const int nch = pick_channels(total * dsize(t));

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
    const size_t outliers = quantize_buf(t, plan, send, sc, own);
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
  dequantize_buf(t, plan.wide, codes, total, 2 * plan.eb, recv);
  call.quantize_s += seconds(t2, Clock::now());
  call.finish();
}

void CommunicatorImpl::broadcast(void* buf, size_t count, DataType t, int root, const Compression& c,
                                 CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const Mode m = effective_mode(c, count * dsize(t));
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
  if (is_lossy(m) && err.empty() && rank_ == root) put_stats(d, scan(t, buf, count));
  call.quantize_s += seconds(tq, Clock::now());
  const auto all = exchange(d, call);
  check_all(all, err);
  const int nch = pick_channels(count * dsize(t));

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
    if (rank_ == root) outliers = quantize_buf(t, plan, buf, count, codes);
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
  dequantize_buf(t, plan.wide, codes, count, 2 * plan.eb, buf);
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
namespace {

std::string p2p_mismatch(const CallDesc& s, const CallDesc& r) {
  if (s.seq != r.seq) return "they are at different send/recv counts between the two ranks";
  if (s.count != r.count) return "the counts differ";
  if (s.dtype != r.dtype) return "the data types differ";
  if (s.mode != r.mode || std::memcmp(&s.bound, &r.bound, sizeof(double)) != 0 ||
      std::memcmp(s.codec, r.codec, sizeof s.codec) != 0) {
    return "the compression settings differ";
  }
  return "";
}

}  // namespace

void CommunicatorImpl::send(const void* buf, size_t count, DataType t, int peer, const Compression& c,
                            CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const std::string me = "ncclz rank " + std::to_string(rank_) + ": ";
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw InvalidArgument(me + "send: peer " + std::to_string(peer) + " must be another rank of this communicator (0.." +
                          std::to_string(size_ - 1) + ", not " + std::to_string(rank_) + ")");
  }
  const Mode m = effective_mode(c, count * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_buffers(buf, buf, count);
  CallDesc d = make_desc(Coll::Send, count, t, RedOp::Sum, rank_, m, c);
  d.peer = peer;
  d.seq = send_seq_[size_t(peer)]++;
  if (!err.empty()) d.flags |= core::kInvalid;

  core::LossyPlan plan;
  void* codes = nullptr;
  if (is_lossy(m) && err.empty()) {
    const auto t1 = Clock::now();
    const core::DataStats s = scan(t, buf, count);
    const double E = resolve_bound(c, s);
    plan = core::plan_lossy(elem_of(t), core::Combine::Select, 1, E, s);
    apply_min_bytes(plan, c, count * dsize(t));
    call.bound = E;
    if (plan.compress) {
      codes = work_[0].get(count * (plan.wide ? 8 : 4));
      if (quantize_buf(t, plan, buf, count, codes) > 0) plan.compress = false;
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
  auto raw_prims = [&](prims::ChannelStats* st) {
    prims::PrimsArgs a;
    a.type = ElemType::U8;
    a.deadline = call.deadline;
    a.rank = rank_;
    a.channel = -1;
    return prims::Prims(link.send.get(), link.recv.get(), a, st, p2p_scratch_.get(slot_bytes_ + 64));
  };
  try {
    prims::ChannelStats ctl;
    prims::Prims p = raw_prims(&ctl);
    p.send(&d, sizeof d);
    p.recv(&ans, sizeof ans);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("send handshake failed: ") + e.what());
    throw;
  }
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
  try {
    prims::PrimsArgs a;
    a.type = w.type;
    a.mode = w.mode;
    a.enc = w.enc;
    a.raw_esize = w.raw_esize;
    a.deadline = call.deadline;
    a.rank = rank_;
    a.channel = -1;
    prims::Prims p(link.send.get(), link.recv.get(), a, &call.ch[0], p2p_scratch_.get(slot_bytes_ + 64));
    p.send((d.flags & core::kCompress) ? codes : buf, count);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("send failed: ") + e.what());
    throw;
  }
  call.finish();
}

void CommunicatorImpl::recv(void* buf, size_t count, DataType t, int peer, const Compression& c, CallStats* stats) {
  std::lock_guard<std::mutex> lk(call_mu_);
  Call call = begin(stats);
  const std::string me = "ncclz rank " + std::to_string(rank_) + ": ";
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw InvalidArgument(me + "recv: peer " + std::to_string(peer) + " must be another rank of this communicator (0.." +
                          std::to_string(size_ - 1) + ", not " + std::to_string(rank_) + ")");
  }
  const Mode m = effective_mode(c, count * dsize(t));
  std::string err = check_compression(t, m, c);
  if (err.empty()) err = check_buffers(buf, buf, count);
  CallDesc d = make_desc(Coll::Recv, count, t, RedOp::Sum, peer, m, c);
  d.peer = rank_;
  d.seq = recv_seq_[size_t(peer)]++;
  if (!err.empty()) d.flags |= core::kInvalid;

  transport::PeerLink& link = *p2p_[size_t(peer)];
  CallDesc snd;
  call.ch.assign(1, prims::ChannelStats{});
  try {
    prims::ChannelStats ctl;
    prims::PrimsArgs a;
    a.type = ElemType::U8;
    a.deadline = call.deadline;
    a.rank = rank_;
    a.channel = -1;
    prims::Prims p(link.send.get(), link.recv.get(), a, &ctl, p2p_scratch_.get(slot_bytes_ + 64));
    p.recv(&snd, sizeof snd);
    p.send(&d, sizeof d);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("recv handshake failed: ") + e.what());
    throw;
  }
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
  try {
    prims::PrimsArgs a;
    a.type = w.type;
    a.mode = w.mode;
    a.enc = w.enc;
    a.raw_esize = w.raw_esize;
    a.deadline = call.deadline;
    a.rank = rank_;
    a.channel = -1;
    prims::Prims p(link.send.get(), link.recv.get(), a, &call.ch[0], p2p_scratch_.get(slot_bytes_ + 64));
    p.recv(target, count);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("recv failed: ") + e.what());
    throw;
  }
  if (compressed) {
    const auto t2 = Clock::now();
    dequantize_buf(t, wide, target, count, 2 * snd.eb, buf);
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
