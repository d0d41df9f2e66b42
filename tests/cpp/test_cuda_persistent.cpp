// Persistent ring all_reduce kernels (ncclz/cuda_persistent.hpp,
// cuda/persistent_ring.cu): ranks as threads of one process on one device,
// each with its own stream, their kernels waiting on each other through the
// FIFOs in device memory. Every result is compared with the CPU ring
// (algorithms/ring.cpp over prims/prims.cpp, the same slot size, slots and
// options) on the same inputs: bit for bit on every rank, and for integer
// codes also with the exact wrapping sum. Abort and timeout make a waiting
// kernel report instead of hanging. With the device selector (Shape::select)
// every slot's bytes are the CPU ring's with codec::fast_select_options()
// (recorded on the proxies' connections; with device FIFOs the byte counts),
// on data where each candidate wins somewhere; max / min (Shape::op) equal
// the host's fold of prims::reduce_fn over the ranks (NaN and infinity rows
// for floats).
//
// With host FIFOs (Options::fifo_in_host_memory) every link of the ring goes
// through the ranks' proxies (transport/persistent_proxy.hpp) over an
// in-process slot ring of the transport (slot_ring.hpp), each rank with an
// abort word of its own, as ranks on separate hosts: the same bits as the
// CPU ring (so as the device FIFOs), and a link that closes mid-call ends
// every rank's kernel with Aborted.
//
// Built with CUDA (NCCLZ_WITH_CUDA; skips without a GPU, fails under
// NCCLZ_REQUIRE_GPU=1) and in the CPU emulator (tools/cuda_emu:
// ncclz_cuda_emu_prims_tests, whose host threads run their kernels
// concurrently there).
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "codec/select_rule.hpp"
#include "codec/slice.hpp"
#include "codec/slice_frame.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/cuda_support.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_dying_send.hpp"
#include "test_fifo.hpp"
#include "transport/persistent_proxy.hpp"

using namespace ncclz;
using codec::ElemType;
using codec::Predictor;
using ncclz_test::DevBuf;
using ncclz_test::from_device;
using ncclz_test::store_code;
using ncclz_test::to_device;
namespace nc = ncclz::cuda;
using nc::ReduceOp;

namespace {

constexpr size_t kSlot = 1024;  // slot bytes: 250 int32 or 125 int64 per slice
constexpr int kSlots = 4;       // chunks of 2 slices

struct Case {
  int N = 2;
  ElemType type = ElemType::I32;
  bool coded = true;
  Predictor pred = Predictor::None;
  int channels = 1;
  int ctas = 1;  // per channel
  size_t slot = kSlot;
  int slots = kSlots;
  bool v1 = false;  // Options::first_version_slices
  // Host FIFOs and proxies: the transport's slots (0: the FIFO's) and how many.
  bool proxy = false;
  size_t tslot = 0;
  int tslots = 3;
  bool select = false;          // Shape::select: the CPU ring with codec::fast_select_options()
  ReduceOp op = ReduceOp::Sum;  // Shape::op
  int data = 0;                 // the inputs: 0 make_input, kCandidates, kSpecials
};
constexpr int kCandidates = 1;  // make_candidates_input: each selector candidate wins somewhere
constexpr int kSpecials = 2;    // make_input's floats with NaN and infinity rows (make_specials_input)
std::string describe(const Case& c) {
  return std::to_string(c.N) + " ranks, type " + std::to_string(int(c.type)) +
         (c.coded ? " coded, predictor " : " raw") + (c.coded ? std::to_string(int(c.pred)) : "") + ", " +
         std::to_string(c.channels) + " channel(s) x " + std::to_string(c.ctas) + " CTA(s), " +
         std::to_string(c.slots) + " slots of " + std::to_string(c.slot) + " bytes" + (c.v1 ? ", first version" : "") +
         (c.proxy ? ", host FIFOs and proxies over " + std::to_string(c.tslots) + " transport slots of " +
                        std::to_string(c.tslot ? c.tslot : c.slot) + " bytes"
                  : "") +
         (c.select ? ", device selector" : "") + (c.op != ReduceOp::Sum ? ", op " + std::to_string(int(c.op)) : "") +
         (c.data ? ", data " + std::to_string(c.data) : "");
}

/// Integer codes (a noisy walk, an incompressible stretch: Raw fallback,
/// values near the limits: sums wrap) or floats of many magnitudes (no NaN).
std::vector<uint8_t> make_input(ElemType t, size_t n, uint64_t seed) {
  const size_t es = codec::elem_size(t);
  std::vector<uint8_t> b(n * es);
  std::mt19937_64 rng(seed);
  int64_t walk = int64_t(rng() % 1000) - 500;
  for (size_t i = 0; i < n; ++i) {
    walk += int64_t(rng() % 7) - 3;
    int64_t v = walk + int64_t(rng() % 5) - 2;
    if ((i / 300) % 5 == 3) v = int64_t(rng());
    if ((i / 300) % 5 == 4 && i % 97 == 0) v = es == 4 ? int64_t(INT32_MAX) : INT64_MAX;
    if (t == ElemType::F32 || t == ElemType::F64) {
      const double d = std::ldexp(double(int64_t(rng() >> 20) % 100000), int(rng() % 40) - 20) * (rng() % 2 ? 1 : -1);
      if (t == ElemType::F32) {
        const float f = float(d);
        std::memcpy(&b[i * 4], &f, 4);
      } else {
        std::memcpy(&b[i * 8], &d, 8);
      }
    } else {
      store_code(b, i, es, v);
    }
  }
  return b;
}

/// Codes where each candidate of the fast selector wins somewhere, in
/// stretches of 700 (several slices of either type): a quadratic (Delta2), a
/// random walk (Delta1), small white noise (None), uniformly random codes
/// (Raw). Sums, maxima and minima over the ranks keep those shapes.
std::vector<uint8_t> make_candidates_input(ElemType t, size_t n, uint64_t seed) {
  const size_t es = codec::elem_size(t);
  std::vector<uint8_t> b(n * es);
  std::mt19937_64 rng(seed);
  const int64_t a = 1 + int64_t(seed % 3);
  int64_t walk = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = int64_t(i % 700);
    int64_t v = 0;
    switch ((i / 700) % 4) {
      case 0: v = a * j * j + int64_t(rng() % 3) - 1; break;
      case 1: v = (walk += int64_t(rng() % 101) - 50); break;
      case 2: v = int64_t(rng() % 7) - 3; break;
      default: v = int64_t(rng()); break;
    }
    store_code(b, i, es, v);
  }
  return b;
}

/// make_input, and for floats rows of specials: every 13th element NaN on
/// rank `rank` % 3 == 0 (one quiet NaN, so that every order of the operands
/// gives the same bits), every 17th +infinity on rank 1, every 19th
/// -infinity on rank 2, every 23rd +infinity and every 29th -infinity on
/// every rank; no -0 (a max of +0 and -0 depends on the operands' order).
std::vector<uint8_t> make_specials_input(ElemType t, size_t n, uint64_t seed, int rank) {
  std::vector<uint8_t> b = make_input(t, n, seed);
  if (t != ElemType::F32 && t != ElemType::F64) return b;
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    double v = t == ElemType::F32 ? double(reinterpret_cast<const float*>(b.data())[i])
                                  : reinterpret_cast<const double*>(b.data())[i];
    if (v == 0) v = 1;  // no -0
    if (i % 13 == 0 && rank % 3 == 0) v = std::numeric_limits<double>::quiet_NaN();
    if (i % 17 == 0 && rank == 1) v = inf;
    if (i % 19 == 0 && rank == 2) v = -inf;
    if (i % 23 == 0) v = inf;
    if (i % 29 == 0) v = -inf;
    if (t == ElemType::F32) {
      const float f = float(v);
      std::memcpy(&b[i * 4], &f, 4);
    } else {
      std::memcpy(&b[i * 8], &v, 8);
    }
  }
  return b;
}

/// Every posted slice of each rank's send connection (per channel), in order.
using SliceLog = std::vector<std::vector<uint8_t>>;

/// The CPU ring's all_reduce of in[r] (count elements) on N ranks as threads.
/// logs (when not null): the slices each rank sent, in order.
std::vector<std::vector<uint8_t>> cpu_all_reduce(const Case& c, size_t count,
                                                 const std::vector<std::vector<uint8_t>>& in,
                                                 std::vector<SliceLog>* logs = nullptr) {
  const size_t es = codec::elem_size(c.type);
  std::vector<std::unique_ptr<ncclz_test::Fifo>> links;
  for (int r = 0; r < c.N; ++r) links.push_back(std::make_unique<ncclz_test::Fifo>(c.slot, c.slots));
  std::vector<std::vector<uint8_t>> out(size_t(c.N), std::vector<uint8_t>(count * es));
  std::vector<std::string> errors(size_t(c.N));
  std::vector<std::thread> ts;
  for (int r = 0; r < c.N; ++r) {
    ts.emplace_back([&, r] {
      try {
        ncclz_test::FakeSend s(links[size_t(r)].get());
        ncclz_test::FakeRecv rv(links[size_t((r + c.N - 1) % c.N)].get());
        prims::PrimsArgs a;
        a.type = c.type;
        a.mode = c.coded ? prims::WireMode::Coded : prims::WireMode::Raw;
        a.reduce = prims::reduce_fn(c.type, RedOp(uint8_t(c.op)));
        a.int_sum = codec::is_code_type(c.type) && c.op == ReduceOp::Sum;
        a.raw_esize = es;
        a.deadline = transport::Clock::now() + std::chrono::seconds(120);
        a.rank = r;
        if (c.coded && c.select) {
          a.enc = codec::fast_select_options();
        } else if (c.coded) {
          a.enc.choice = codec::EncodeOptions::Choice::Block;
          a.enc.predictor = int(c.pred);
        }
        prims::ChannelStats st;
        std::vector<uint64_t> scratch((prims::slice_elems_for(c.slot, es) * es + 7) / 8);
        prims::Prims p(&s, &rv, a, &st, scratch.data());
        algorithms::ring_all_reduce(p, algorithms::RingPos{r, c.N}, in[size_t(r)].data(), out[size_t(r)].data(), count,
                                    algorithms::ring_segment_elems(p, c.slots));
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < c.N; ++r) EXPECT_EQ(errors[size_t(r)], "") << "CPU rank " << r;
  if (logs) {
    logs->clear();
    for (int r = 0; r < c.N; ++r) logs->push_back(links[size_t(r)]->log);
  }
  return out;
}

/// A send connection that records every slice posted on it (the proxy's
/// side of a host-FIFO ring: each slice as the kernel wrote it).
class RecordingSend : public transport::SendConn {
 public:
  RecordingSend(std::unique_ptr<transport::SendConn> inner, SliceLog* log) : inner_(std::move(inner)), log_(log) {}
  uint8_t* acquire(transport::Clock::time_point deadline) override { return slot_ = inner_->acquire(deadline); }
  void post(size_t bytes) override {
    log_->emplace_back(slot_, slot_ + bytes);
    inner_->post(bytes);
  }
  void flush(transport::Clock::time_point deadline) override { inner_->flush(deadline); }
  size_t slot_bytes() const override { return inner_->slot_bytes(); }
  int peer() const override { return inner_->peer(); }

 private:
  std::unique_ptr<transport::SendConn> inner_;
  SliceLog* log_;
  uint8_t* slot_ = nullptr;
};

/// Each wait's timeout: NCCLZ_PERSISTENT_TEST_TIMEOUT_S seconds (default 60;
/// tools/gpu_session.sh shortens it under compute-sanitizer, which may run
/// the ranks' kernels one after the other: then TimedOut, not a hang).
uint64_t test_timeout_ns() {
  const char* v = std::getenv("NCCLZ_PERSISTENT_TEST_TIMEOUT_S");
  const double s = v != nullptr && std::atof(v) > 0 ? std::atof(v) : 60.0;
  return uint64_t(s * 1e9);
}

/// N rings of a group, connected, each with its own stream. Device FIFOs:
/// one abort word, each kernel writes into the next rank's FIFO. Host FIFOs
/// (c.proxy): an abort word per rank, each rank's proxy started over
/// in-process connections (the test may replace a connection first: `wrap`).
struct Group {
  using Wrap = std::function<void(int rank, int channel, transport::ProxyChannel&)>;
  nc::RingAbort abort;
  std::vector<std::unique_ptr<nc::RingAbort>> aborts;  // host FIFOs: rank r's
  std::vector<std::unique_ptr<nc::PersistentRing>> rings;
  std::vector<std::unique_ptr<transport::PersistentProxy>> proxies;
  Case c;
  explicit Group(const Case& cs, uint64_t timeout_ns = test_timeout_ns(), const Wrap& wrap = nullptr) : c(cs) {
    for (int r = 0; r < c.N; ++r) {
      if (c.proxy) aborts.push_back(std::make_unique<nc::RingAbort>());
      nc::PersistentRing::Options o;
      o.rank = r;
      o.nranks = c.N;
      o.channels = c.channels;
      o.ctas_per_channel = c.ctas;
      o.type = c.type;
      o.coded = c.coded;
      o.predictor = c.pred;
      o.slot_bytes = c.slot;
      o.slots = c.slots;
      o.timeout_ns = timeout_ns;
      o.first_version_slices = c.v1;
      o.fifo_in_host_memory = c.proxy;
      o.select = c.select;
      o.op = c.op;
      rings.push_back(std::make_unique<nc::PersistentRing>(o, c.proxy ? aborts.back().get() : &abort));
    }
    if (!c.proxy) {
      for (int r = 0; r < c.N; ++r) rings[size_t(r)]->connect(rings[size_t((r + 1) % c.N)]->fifo());
      return;
    }
    for (int r = 0; r < c.N; ++r) {
      if (rings[size_t(r)]->status() != 0) return;  // the test's ASSERT says so
      transport::PersistentProxy::Options po;
      po.rank = r;
      po.timeout = std::chrono::nanoseconds(timeout_ns);
      proxies.push_back(std::make_unique<transport::PersistentProxy>(fifos(r), po));
    }
    start(wrap);
  }
  transport::PersistentProxy::Fifos fifos(int r) const {
    const nc::PersistentRing& ring = *rings[size_t(r)];
    transport::PersistentProxy::Fifos f;
    f.inbox = static_cast<uint8_t*>(ring.fifo_host());
    f.outbox = static_cast<uint8_t*>(ring.outbox_host());
    f.channels = c.channels;
    f.slots = c.slots;
    f.slot_bytes = c.slot;
    f.abort_word = aborts[size_t(r)]->host_ptr();
    return f;
  }
  /// Every proxy started over new in-process connections.
  void start(const Wrap& wrap = nullptr) {
    if (c.N < 2) return;  // one rank sends nothing
    auto links = transport::local_ring_channels(c.N, c.channels, c.tslots, c.tslot ? c.tslot : c.slot);
    for (int r = 0; r < c.N; ++r) {
      if (wrap) {
        for (int ch = 0; ch < c.channels; ++ch) wrap(r, ch, links[size_t(r)][size_t(ch)]);
      }
      proxies[size_t(r)]->start(std::move(links[size_t(r)]));
    }
  }
  ~Group() {
    for (auto& p : proxies) p->request_stop();  // all first: no proxy fails on a peer's close
    for (auto& p : proxies) p->stop();
  }
};

/// The persistent all_reduce of in[r] on every rank (threads), in place when
/// asked, the buffers `shift` elements past a cudaMalloc'ed address (so that
/// they are aligned to the element only, not to 16 bytes).
std::vector<std::vector<uint8_t>> device_all_reduce(Group& g, const Case& c, size_t count,
                                                    const std::vector<std::vector<uint8_t>>& in, bool in_place,
                                                    std::vector<int>* rc, size_t shift = 0) {
  const size_t es = codec::elem_size(c.type);
  std::vector<std::vector<uint8_t>> out(size_t(c.N));
  rc->assign(size_t(c.N), -1);
  std::vector<std::thread> ts;
  for (int r = 0; r < c.N; ++r) {
    ts.emplace_back([&, r] {
      nc::PersistentRing& ring = *g.rings[size_t(r)];
      DevBuf src_buf((count + shift) * es), dst_buf((count + shift) * es);
      uint8_t* src = static_cast<uint8_t*>(src_buf.get()) + shift * es;
      to_device(src, in[size_t(r)]);
      void* d = in_place ? src : static_cast<uint8_t*>(dst_buf.get()) + shift * es;
      int e = ring.all_reduce_async(src, d, count);
      if (e == 0) e = ring.synchronize();
      (*rc)[size_t(r)] = e;
      if (e == 0) out[size_t(r)] = from_device(d, count * es);
    });
  }
  for (auto& t : ts) t.join();
  return out;
}

/// The (codec, predictor) of every slice in the logs.
using Kinds = std::set<std::pair<codec::Codec, Predictor>>;
void add_kinds(const std::vector<SliceLog>& logs, Kinds* kinds) {
  for (const SliceLog& log : logs) {
    for (const auto& slice : log) {
      codec::SliceHeader h;
      ASSERT_EQ(codec::read_header(slice.data(), slice.size(), &h), codec::Status::Ok);
      kinds->insert({h.codec, h.predictor});
    }
  }
}

/// A slice's size, codec and predictor in words.
std::string kind_of(const std::vector<uint8_t>& slice) {
  codec::SliceHeader h;
  const codec::Status st = codec::read_header(slice.data(), slice.size(), &h);
  return std::to_string(slice.size()) + " bytes, " +
         (st == codec::Status::Ok
              ? "codec " + std::to_string(int(h.codec)) + " predictor " + std::to_string(int(h.predictor))
              : "no header");
}

/// Whether `slice` (codes of c.type) is what the CPU's encode_slice writes
/// for its decoded codes with the case's options (Block and the predictor,
/// or codec::fast_select_options(), after a reduction with the incoming
/// slice's predictor: either is taken, the slice does not say which).
bool reencodes(const Case& c, const std::vector<uint8_t>& slice) {
  codec::SliceHeader h;
  if (codec::read_header(slice.data(), slice.size(), &h) != codec::Status::Ok) return false;
  std::vector<uint8_t> codes(size_t(h.count) * codec::elem_size(c.type)), again(c.slot);
  if (codec::decode_slice(slice.data(), slice.size(), c.type, h.count, codes.data()) != codec::Status::Ok) return false;
  codec::EncodeOptions opt;
  if (c.select) {
    opt = codec::fast_select_options();
  } else {
    opt.choice = codec::EncodeOptions::Choice::Block;
    opt.predictor = int(c.pred);
  }
  for (int hint : {-1, int(h.predictor)}) {
    if (hint >= 0 && !c.select) break;
    codec::EncodeOptions o = opt;
    if (hint >= 0) o.predictor = hint;
    codec::SliceInfo info;
    if (codec::encode_slice(codes.data(), c.type, h.count, again.data(), again.size(), o, &info) == codec::Status::Ok &&
        info.bytes == slice.size() && std::memcmp(again.data(), slice.data(), slice.size()) == 0)
      return true;
  }
  return false;
}

/// The per-rank inputs of a case, the CPU ring's outputs (channel by channel
/// over the same contiguous parts as the kernel's CTAs), and the kernel's;
/// with integers, or op max / min, also the host's fold of prims::reduce_fn
/// over the ranks. The slices sent: with host FIFOs each one as the proxy
/// carried it, equal to the CPU ring's (rank by rank, channel by channel, in
/// order); with device FIFOs their byte count (PersistentRing::sent_bytes).
/// Two ranks of codes: the CPU exchanges the ranks' own slices instead
/// (algorithms/ring.cpp, pair_all_reduce), the kernel runs the ring: each
/// slice the kernel sent is then checked on its own (reencodes).
/// kinds (when not null): the CPU ring's slices' (codec, predictor)s.
void check_case(const Case& c, size_t count, bool in_place = false, size_t shift = 0, Kinds* kinds = nullptr) {
  SCOPED_TRACE(describe(c) + ", count " + std::to_string(count) + (in_place ? ", in place" : "") +
               (shift ? ", buffers shifted by " + std::to_string(shift) : ""));
  const size_t es = codec::elem_size(c.type);
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < c.N; ++r) {
    const uint64_t seed = 7919 * uint64_t(r) + count + uint64_t(c.N);
    in.push_back(c.data == kCandidates ? make_candidates_input(c.type, count, seed)
                 : c.data == kSpecials ? make_specials_input(c.type, count, seed, r)
                                       : make_input(c.type, count, seed));
  }
  std::vector<std::vector<uint8_t>> want(size_t(c.N), std::vector<uint8_t>(count * es));
  std::vector<std::vector<SliceLog>> cpu_logs(size_t(c.channels));  // [channel][rank]
  for (int ch = 0; ch < c.channels; ++ch) {  // channel ch: [count * ch / C, count * (ch + 1) / C)
    const size_t c0 = count * size_t(ch) / size_t(c.channels), n = count * size_t(ch + 1) / size_t(c.channels) - c0;
    std::vector<std::vector<uint8_t>> part;
    for (int r = 0; r < c.N; ++r)
      part.emplace_back(in[size_t(r)].begin() + long(c0 * es), in[size_t(r)].begin() + long((c0 + n) * es));
    const auto got = cpu_all_reduce(c, n, part, &cpu_logs[size_t(ch)]);
    for (int r = 0; r < c.N; ++r) std::memcpy(want[size_t(r)].data() + c0 * es, got[size_t(r)].data(), n * es);
    if (kinds) add_kinds(cpu_logs[size_t(ch)], kinds);
  }
  if (codec::is_code_type(c.type) || c.op != ReduceOp::Sum) {
    // The exact wrapping sum, or max / min (floats: one NaN pattern and no -0, so any order gives these bits).
    const auto fn = prims::reduce_fn(c.type, RedOp(uint8_t(c.op)));
    std::vector<uint8_t> ref = in[0];
    for (int r = 1; r < c.N; ++r) fn(ref.data(), in[size_t(r)].data(), ref.data(), count);
    ASSERT_EQ(want[0], ref) << "the CPU ring differs from the host's reduction";
  }
  std::vector<std::vector<SliceLog>> dev_logs(size_t(c.N), std::vector<SliceLog>(size_t(c.channels)));
  Group g(c, test_timeout_ns(), [&](int r, int ch, transport::ProxyChannel& pc) {
    pc.send = std::make_unique<RecordingSend>(std::move(pc.send), &dev_logs[size_t(r)][size_t(ch)]);
  });
  for (const auto& ring : g.rings) ASSERT_EQ(ring->status(), 0);
  for (int call = 0; call < 2; ++call) {  // twice: the FIFO counters carry over between calls
    std::vector<int> rc;
    const auto got = device_all_reduce(g, c, count, in, in_place, &rc, shift);
    for (int r = 0; r < c.N; ++r) {
      ASSERT_EQ(rc[size_t(r)], 0) << "rank " << r << " call " << call;
      ASSERT_TRUE(got[size_t(r)] == want[size_t(r)])
          << "rank " << r << " call " << call << ": differs from the CPU ring";
      for (int ch = 0; ch < c.channels; ++ch) {
        const SliceLog& cpu = cpu_logs[size_t(ch)][size_t(r)];
        uint64_t cpu_bytes = 0;
        for (const auto& slice : cpu) cpu_bytes += slice.size();
        const bool pair = c.N == 2 && c.coded;  // the CPU's exchange of two, not the ring
        if (c.proxy && pair) {
          const SliceLog& dev = dev_logs[size_t(r)][size_t(ch)];
          for (size_t i = 0; i < dev.size(); ++i)
            ASSERT_TRUE(reencodes(c, dev[i])) << "rank " << r << " channel " << ch << " call " << call << ": slice "
                                              << i << " (" << kind_of(dev[i]) << ") is not encode_slice's";
        } else if (c.proxy) {
          const SliceLog& dev = dev_logs[size_t(r)][size_t(ch)];
          ASSERT_EQ(dev.size(), cpu.size() * size_t(call + 1)) << "rank " << r << " channel " << ch;
          for (size_t i = 0; i < dev.size(); ++i)
            ASSERT_TRUE(dev[i] == cpu[i % cpu.size()])
                << "rank " << r << " channel " << ch << " call " << call << ": slice " << i % cpu.size()
                << " differs from the CPU ring's (" << kind_of(dev[i]) << ", the CPU's " << kind_of(cpu[i % cpu.size()])
                << ")";
        } else if (c.N > 1 && !pair) {
          uint64_t sent = 0;
          ASSERT_EQ(g.rings[size_t(r)]->sent_bytes(ch, &sent), 0);
          EXPECT_EQ(sent, cpu_bytes * uint64_t(call + 1)) << "rank " << r << " channel " << ch << " call " << call;
        }
      }
    }
  }
}

std::vector<size_t> counts(ElemType t, int N) {
  const size_t slice = prims::slice_elems_for(kSlot, codec::elem_size(t));
  return {1, slice, 2 * slice + 37, 2 * slice * size_t(N) * 2 + slice / 3};  // the last: two loops and a short third
}

TEST(CudaPersistent, CodedAllReduceMatchesCpuRing) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 3, 4}) {
    for (ElemType t : {ElemType::I32, ElemType::I64}) {
      for (Predictor p : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
        if (ncclz_test::quick() && t == ElemType::I64 && p != Predictor::Delta1) continue;
        for (size_t n : counts(t, N)) {
          check_case(Case{N, t, true, p, 1}, n);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CudaPersistent, RawAllReduceMatchesCpuRing) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 3, 4}) {
    for (ElemType t : {ElemType::I32, ElemType::I64, ElemType::F32, ElemType::F64}) {
      for (size_t n : counts(t, N)) {
        check_case(Case{N, t, false, Predictor::None, 1}, n);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A small ring for the sanitizers (tools/gpu_session.sh, memcheck-persistent):
// one rank alone, then two ranks of codes over two ring loops, then two CTAs
// per channel (codes, and Raw floats through the 16-byte vector loop and its
// element-aligned fallback).
TEST(CudaPersistent, SmallRing) {
  SKIP_WITHOUT_GPU();
  check_case(Case{1, ElemType::I32, true, Predictor::Delta1, 1}, 600);
  check_case(Case{2, ElemType::I32, true, Predictor::Delta1, 1}, 2 * 4 * 250 + 37);
  check_case(Case{2, ElemType::I32, true, Predictor::Delta1, 1, 2}, 2 * 4 * 250 + 37);
  check_case(Case{2, ElemType::F32, false, Predictor::None, 1, 2, 16 << 10, 4}, 20000, false, 1);
}

TEST(CudaPersistent, ChannelsAndInPlace) {
  SKIP_WITHOUT_GPU();
  check_case(Case{3, ElemType::I32, true, Predictor::Delta1, 3}, 5000);
  check_case(Case{4, ElemType::F32, false, Predictor::None, 2}, 3001, true);
  check_case(Case{2, ElemType::I64, true, Predictor::Delta2, 2}, 777, true);
  check_case(Case{3, ElemType::I32, true, Predictor::None, 4}, 2);  // channels with nothing to do
  check_case(Case{1, ElemType::I32, true, Predictor::None, 1}, 100);
  // 16 KiB slots: several codes per thread in each tile (the decode-and-add's
  // reads of the local codes before its writes, here to the same addresses).
  check_case(Case{2, ElemType::I32, true, Predictor::None, 1, 1, 16 << 10, 4}, 30000, true);
  check_case(Case{2, ElemType::F32, false, Predictor::None, 1}, 3001, false, 1);  // element-aligned buffers
  check_case(Case{3, ElemType::F64, false, Predictor::None, 2}, 2001, true, 1);
}

// Several CTAs per channel (CTA g runs the channel's steps g, g + G, ...):
// the CPU ring's bits whatever G, also where G exceeds the steps (CTAs with
// nothing to do), with deeper FIFOs, and slots big enough for the Raw
// loop's 16-byte vectors to take several rounds per slice.
TEST(CudaPersistent, CtasPerChannelMatchCpuRing) {
  SKIP_WITHOUT_GPU();
  for (int G : {2, 3}) {
    for (int N : {2, 4}) {
      const size_t slice = prims::slice_elems_for(kSlot, 4);
      for (size_t n : {size_t(1), 2 * slice * size_t(N) * 2 + slice / 3}) {
        check_case(Case{N, ElemType::I32, true, Predictor::Delta1, 1, G}, n);
        check_case(Case{N, ElemType::F32, false, Predictor::None, 1, G}, n);
        if (HasFatalFailure()) return;
      }
    }
  }
  check_case(Case{3, ElemType::I64, true, Predictor::Delta2, 2, 4, kSlot, 8}, 5000);
  check_case(Case{4, ElemType::I32, true, Predictor::None, 2, 3, kSlot, 6}, 7777, true);
  check_case(Case{3, ElemType::F32, false, Predictor::None, 1, 4, 64 << 10, 8}, 300000);
  check_case(Case{2, ElemType::I64, false, Predictor::None, 2, 2, 40 << 10, 4}, 70001, false, 1);
  check_case(Case{3, ElemType::I32, true, Predictor::Delta1, 1, 2, 32 << 10, 4}, 100000);
}

// The first version's per-slice code (Options::first_version_slices, kept for
// A/B timing): the same bits.
TEST(CudaPersistent, FirstVersionSlicesMatchCpuRing) {
  SKIP_WITHOUT_GPU();
  Case c{3, ElemType::I32, true, Predictor::Delta1, 2};
  c.v1 = true;
  check_case(c, 5000);
  c.type = ElemType::F32;
  c.coded = false;
  c.ctas = 2;
  check_case(c, 3001, false, 1);
}

// Rank 0 of a 2-rank ring runs alone: it sends its first chunk, then waits
// for rank 1 forever; the abort word (set by the host 100 ms later) makes it
// report Aborted.
TEST(CudaPersistent, AbortStopsAWaitingKernel) {
  SKIP_WITHOUT_GPU();
  const Case c{2, ElemType::I32, true, Predictor::None, 1};
  Group g(c);
  const size_t count = 10000;
  DevBuf src(count * 4), dst(count * 4);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    g.abort.set();
  });
  const auto t0 = std::chrono::steady_clock::now();
  int e = g.rings[0]->all_reduce_async(src.get(), dst.get(), count);
  nc::RingReport rep;
  if (e == 0) e = g.rings[0]->synchronize(&rep);
  setter.join();
  EXPECT_EQ(e, 1000 + int(nc::RingError::Aborted));
  EXPECT_EQ(rep.error, int(nc::RingError::Aborted));
  EXPECT_EQ(rep.peer, 1);  // waiting on rank 1: for its slot (send) or its slice (receive)
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // Reset and cleared, the group runs a call again.
  for (auto& r : g.rings) ASSERT_EQ(r->reset(), 0);
  g.abort.clear();
  std::vector<int> rc;
  const std::vector<std::vector<uint8_t>> in = {make_input(ElemType::I32, 500, 1), make_input(ElemType::I32, 500, 2)};
  const auto got = device_all_reduce(g, c, 500, in, false, &rc);
  ASSERT_EQ(rc[0], 0);
  ASSERT_EQ(rc[1], 0);
  std::vector<uint8_t> sum(500 * 4, 0);
  for (const auto& x : in) prims::reduce_fn(ElemType::I32, RedOp::Sum)(sum.data(), sum.data(), x.data(), 500);
  EXPECT_EQ(got[0], sum);
  EXPECT_EQ(got[1], sum);
}

// The same lone rank with a 50 ms timeout: TimedOut, and the abort word set
// for its peers.
TEST(CudaPersistent, TimeoutStopsAWaitingKernel) {
  SKIP_WITHOUT_GPU();
  const Case c{3, ElemType::F32, false, Predictor::None, 2};
  Group g(c, 50'000'000ull);
  const size_t count = 4000;
  DevBuf src(count * 4), dst(count * 4);
  int e = g.rings[1]->all_reduce_async(src.get(), dst.get(), count);
  nc::RingReport rep;
  if (e == 0) e = g.rings[1]->synchronize(&rep);
  EXPECT_EQ(e, 1000 + int(nc::RingError::TimedOut));
  EXPECT_EQ(rep.error, int(nc::RingError::TimedOut));
  EXPECT_TRUE(rep.peer == 0 || rep.peer == 2) << rep.peer;
  EXPECT_TRUE(g.abort.is_set());
}

// A corrupt slice in the FIFO (a peer that sent garbage): the receiving rank
// reports Codec with the CPU decoder's status and sets the abort word. Rank 0
// of 2 runs alone; the test posts the slice into its FIFO as rank 1 would
// (nc::FifoLayout: slice 0 in slot 0, its size in sizes[0], posted[0] = 1).
TEST(CudaPersistent, CorruptSliceIsACodecError) {
  SKIP_WITHOUT_GPU();
  const Case c{2, ElemType::I32, true, Predictor::Delta1, 1};
  Group g(c);
  const size_t count = 100;  // chunks of 50: one slice each
  DevBuf src(count * 4), dst(count * 4);
  std::vector<uint8_t> bad(64, 0x5A);
  std::vector<int32_t> scratch(50);
  const codec::Status want = codec::decode_slice(bad.data(), bad.size(), ElemType::I32, 50, scratch.data());
  ASSERT_NE(want, codec::Status::Ok);
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto* f = static_cast<uint8_t*>(g.rings[0]->fifo());
    const uint64_t size = bad.size(), head = 1;
    cudaMemcpy(f + nc::FifoLayout::kSlotsAt, bad.data(), bad.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(f + nc::FifoLayout::kSizesAt, &size, 8, cudaMemcpyHostToDevice);
    cudaMemcpy(f + nc::FifoLayout::kPostedAt, &head, 8, cudaMemcpyHostToDevice);
  });
  int e = g.rings[0]->all_reduce_async(src.get(), dst.get(), count);
  nc::RingReport rep;
  if (e == 0) e = g.rings[0]->synchronize(&rep);
  peer.join();
  EXPECT_EQ(e, 1000 + int(nc::RingError::Codec));
  EXPECT_EQ(rep.codec_status, int(want));
  EXPECT_EQ(rep.peer, 1);
  EXPECT_EQ(rep.step, 1u);  // step 0 sent chunk 1; step 1 received the bad slice
  EXPECT_TRUE(g.abort.is_set());
}

TEST(CudaPersistent, RefusesBadOptions) {
  SKIP_WITHOUT_GPU();
  nc::RingAbort abort;
  nc::PersistentRing::Options o;
  o.type = ElemType::F32;  // coded floats: no
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.type = ElemType::I32;
  o.predictor = Predictor::Lorenzo2D;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.predictor = Predictor::None;
  o.slots = 1;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.slots = 65;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.slots = 4;
  o.ctas_per_channel = 0;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.ctas_per_channel = 33;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.ctas_per_channel = 1;
  o.slot_bytes = 24;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.slot_bytes = 1024;
  o.rank = 2;
  o.nranks = 2;
  EXPECT_LT(nc::PersistentRing(o, &abort).status(), 0);
  o.rank = 0;
  for (ReduceOp op : {ReduceOp::Avg, ReduceOp::Prod, ReduceOp(9)}) {  // Sum, Max, Min only
    o.op = op;
    EXPECT_EQ(nc::PersistentRing(o, &abort).status(), -int(codec::Status::Unsupported)) << int(op);
  }
  o.op = ReduceOp::Max;
  nc::PersistentRing ok(o, &abort);
  EXPECT_EQ(ok.status(), 0);
  EXPECT_EQ(ok.slice_elems(), (1024u - 24u) / 4u);
  EXPECT_LT(ok.all_reduce_async(nullptr, nullptr, 10), 0);  // 2 ranks, not connected
  EXPECT_GT(ok.max_resident_ctas(), 0);
  // A call's Shape is checked the same way (one rank: nothing to connect).
  o.nranks = 1;
  nc::PersistentRing one(o, &abort);
  ASSERT_EQ(one.status(), 0);
  nc::PersistentRing::Shape sh;
  sh.op = ReduceOp::Prod;
  EXPECT_EQ(one.all_reduce_async(nullptr, nullptr, 10, sh), -int(codec::Status::Unsupported));
  sh.op = ReduceOp::Min;
  sh.predictor = Predictor::Lorenzo3D;
  EXPECT_EQ(one.all_reduce_async(nullptr, nullptr, 10, sh), -int(codec::Status::Unsupported));
}

// A shape whose CTAs cannot all be resident at once (they would wait on each
// other forever) is refused at construction: kNotResident, also from every
// call, and nothing launched. The bound is the occupancy API's (the
// emulator: 256 CTAs).
TEST(CudaPersistent, RefusesShapesThatCannotBeResident) {
  SKIP_WITHOUT_GPU();
  nc::RingAbort abort;
  nc::PersistentRing::Options o;
  o.nranks = 4;
  o.slot_bytes = 1024;
  nc::PersistentRing fits(o, &abort);
  ASSERT_EQ(fits.status(), 0);
  const int most = fits.max_resident_ctas();
  ASSERT_GE(most, 4);
  o.ctas_per_channel = 32;
  o.channels = most / (4 * 32) + 1;  // 4 x 32 x channels > most
  nc::PersistentRing big(o, &abort);
  EXPECT_EQ(big.status(), nc::PersistentRing::kNotResident);
  EXPECT_EQ(big.max_resident_ctas(), most);
  EXPECT_EQ(big.all_reduce_async(nullptr, nullptr, 10), nc::PersistentRing::kNotResident);
  EXPECT_EQ(big.synchronize(), nc::PersistentRing::kNotResident);
  o.channels = most / (4 * 32);  // exactly resident (or none)
  if (o.channels > 0) {
    nc::PersistentRing edge(o, &abort);
    EXPECT_EQ(edge.status(), 0);
  }
}

// ---- Host FIFOs and proxies (Options::fifo_in_host_memory) ------------------

Case proxied(Case c, size_t tslot = 0, int tslots = 3) {
  c.proxy = true;
  c.tslot = tslot;
  c.tslots = tslots;
  return c;
}

// Every link through the ranks' proxies and an in-process transport
// connection: the CPU ring's bits, for codes (Block, a predictor) and Raw
// values (int32, float32), 2, 3 and 4 ranks, one element to three ring loops
// with a short tail, two calls each.
TEST(CudaPersistent, ProxyAllReduceMatchesCpuRing) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 3, 4}) {
    const size_t slice = prims::slice_elems_for(kSlot, 4);
    for (size_t n : {size_t(1), 2 * slice + 37, 2 * slice * size_t(N) * 2 + slice / 3}) {
      check_case(proxied(Case{N, ElemType::I32, true, Predictor::Delta1, 1}), n);
      check_case(proxied(Case{N, ElemType::I32, false, Predictor::None, 1}), n);
      check_case(proxied(Case{N, ElemType::F32, false, Predictor::None, 1}), n);
      if (HasFatalFailure()) return;
    }
  }
  check_case(proxied(Case{3, ElemType::I32, true, Predictor::None, 1}), 1001);
}

// Two channels, two CTAs a channel (their slices posted and released out of
// order, carried in order), in place, element-aligned buffers, transport
// slots larger than the FIFO's and fewer of them.
TEST(CudaPersistent, ProxyChannelsAndCtasMatchCpuRing) {
  SKIP_WITHOUT_GPU();
  check_case(proxied(Case{3, ElemType::I32, true, Predictor::Delta2, 2, 2}, 2 * kSlot, 2), 5001);
  check_case(proxied(Case{4, ElemType::F32, false, Predictor::None, 2, 2}), 3001, true, 1);
  check_case(proxied(Case{2, ElemType::I32, true, Predictor::None, 2, 1}), 777, true);
  check_case(proxied(Case{4, ElemType::I32, false, Predictor::None, 1, 2, kSlot, 6}, kSlot, 4), 7777);
  check_case(proxied(Case{2, ElemType::I32, true, Predictor::Delta1, 1, 2, 16 << 10, 4}), 30001);
}

// The same call through device FIFOs and through host FIFOs and proxies: the
// same outputs, and each rank's receive FIFO holds the same bytes afterwards
// (flags, sizes, and each slot's slice: FifoLayout).
TEST(CudaPersistent, ProxyMatchesDeviceFifos) {
  SKIP_WITHOUT_GPU();
  const Case dc{3, ElemType::I32, true, Predictor::Delta1, 2, 2};
  const Case hc = proxied(dc);
  const size_t count = 4321;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < dc.N; ++r) in.push_back(make_input(dc.type, count, 31 * uint64_t(r) + 5));
  Group dg(dc), hg(hc);
  for (int r = 0; r < dc.N; ++r) {
    ASSERT_EQ(dg.rings[size_t(r)]->status(), 0);
    ASSERT_EQ(hg.rings[size_t(r)]->status(), 0);
  }
  std::vector<int> drc, hrc;
  const auto dout = device_all_reduce(dg, dc, count, in, false, &drc);
  const auto hout = device_all_reduce(hg, hc, count, in, false, &hrc);
  const size_t fifo_bytes = size_t(dc.channels) * nc::FifoLayout::channel_bytes(dc.slot, dc.slots);
  for (int r = 0; r < dc.N; ++r) {
    ASSERT_EQ(drc[size_t(r)], 0);
    ASSERT_EQ(hrc[size_t(r)], 0);
    EXPECT_TRUE(dout[size_t(r)] == hout[size_t(r)]) << "rank " << r;
    const std::vector<uint8_t> dev = from_device(dg.rings[size_t(r)]->fifo(), fifo_bytes);
    const auto* host = static_cast<const uint8_t*>(hg.rings[size_t(r)]->fifo_host());
    for (int ch = 0; ch < dc.channels; ++ch) {
      const size_t base = size_t(ch) * nc::FifoLayout::channel_bytes(dc.slot, dc.slots);
      const size_t flags = nc::FifoLayout::kSlotsAt;  // posted, released, sizes
      ASSERT_EQ(std::memcmp(dev.data() + base, host + base, flags), 0) << "rank " << r << " channel " << ch;
      uint64_t posted0 = 0;
      std::memcpy(&posted0, dev.data() + base + nc::FifoLayout::kPostedAt, 8);
      EXPECT_GT(posted0, 0u);  // slices went through this FIFO
      for (int k = 0; k < dc.slots; ++k) {
        uint64_t n = 0;
        std::memcpy(&n, dev.data() + base + nc::FifoLayout::kSizesAt + 8 * size_t(k), 8);
        ASSERT_LE(n, dc.slot);
        const size_t at = base + nc::FifoLayout::kSlotsAt + size_t(k) * nc::FifoLayout::slot_stride(dc.slot);
        EXPECT_EQ(std::memcmp(dev.data() + at, host + at, size_t(n)), 0) << "rank " << r << " slot " << k;
      }
    }
  }
}

// ---- The device selector (Shape::select) and max / min (Shape::op) -------

Case selecting(Case c, int data = kCandidates) {
  c.select = true;
  c.data = data;
  return c;
}
Case with_op(Case c, ReduceOp op, int data = 0) {
  c.op = op;
  c.data = data;
  return c;
}

// Each slice's codec and predictor chosen on the device: every slice the
// CPU ring's with codec::fast_select_options(), byte for byte through the
// proxies, on data where each candidate wins somewhere (Block with Delta2,
// Delta1 and None, and Raw: the test asks that the CPU chose each), 2-4
// ranks, int32 and int64, odd counts (four stretches of the data and a
// short tail), 1-3 CTAs a channel, two channels; with device FIFOs the same
// outputs and byte counts, also on make_input's data and in place.
TEST(CudaPersistent, SelectorSlicesMatchCpuRing) {
  SKIP_WITHOUT_GPU();
  Kinds kinds;
  for (int N : {2, 3, 4}) {
    for (ElemType t : {ElemType::I32, ElemType::I64}) {
      const size_t slice = prims::slice_elems_for(kSlot, codec::elem_size(t));
      const int G = 1 + (N + int(t == ElemType::I64)) % 3;
      check_case(selecting(proxied(Case{N, t, true, Predictor::None, 1, G})), 4 * 700 + 2 * slice + 37, false, 0,
                 &kinds);
      if (HasFatalFailure()) return;
    }
  }
  using codec::Codec;
  for (auto k : {std::pair{Codec::Block, Predictor::None}, std::pair{Codec::Block, Predictor::Delta1},
                 std::pair{Codec::Block, Predictor::Delta2}, std::pair{Codec::Raw, Predictor::None}}) {
    EXPECT_EQ(kinds.count(k), 1u) << "no slice of codec " << int(k.first) << ", predictor " << int(k.second);
  }
  check_case(selecting(proxied(Case{3, ElemType::I32, true, Predictor::Delta1, 2, 2})), 6001, true);
  check_case(selecting(Case{3, ElemType::I32, true, Predictor::None, 2, 3}), 5001, true);
  check_case(selecting(Case{4, ElemType::I64, true, Predictor::None, 1, 2}), 3001);
  check_case(selecting(Case{2, ElemType::I32, true, Predictor::None, 1, 1}, 0), 2 * 4 * 250 + 37);
  check_case(selecting(Case{2, ElemType::I32, true, Predictor::None, 1, 2, 16 << 10, 4}), 30001);
}

// Max and min: the host's fold of prims::reduce_fn over the ranks, bit for
// bit, and the CPU ring's slices: codes (int32 and int64: integer max / min,
// Block with a predictor or the selector's choice) and Raw values (float32
// and float64 with NaN and infinity rows, int32, int64), 2-4 ranks, in place,
// element-aligned buffers, several CTAs and channels, host FIFOs too.
TEST(CudaPersistent, MaxMinMatchHostReduction) {
  SKIP_WITHOUT_GPU();
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    for (int N : {2, 3, 4}) {
      const size_t slice = prims::slice_elems_for(kSlot, 4);
      check_case(with_op(Case{N, ElemType::I32, true, Predictor::Delta1, 1, 2}, op), 2 * slice * size_t(N) * 2 + 83,
                 true);
      check_case(selecting(with_op(Case{N, ElemType::I64, true, Predictor::None, 2, 1}, op), kCandidates), 3001);
      for (ElemType t : {ElemType::F32, ElemType::F64, ElemType::I32, ElemType::I64}) {
        check_case(with_op(Case{N, t, false, Predictor::None, 1, 1 + N % 2}, op, kSpecials), 2001, N == 3,
                   N == 4 ? 1 : 0);
      }
      if (HasFatalFailure()) return;
    }
    check_case(proxied(with_op(Case{3, ElemType::I32, true, Predictor::Delta2, 2, 2}, op)), 4001);
    check_case(proxied(with_op(Case{3, ElemType::F32, false, Predictor::None, 1, 2}, op, kSpecials)), 3001, true);
    check_case(with_op(Case{1, ElemType::F64, false, Predictor::None, 1}, op, kSpecials), 100);
  }
}

using ncclz_test::DyingSend;

/// Every rank's all_reduce of `in` at once; the return codes, and the
/// longest a rank's call took.
std::vector<int> run_all(Group& g, size_t count, const std::vector<std::vector<uint8_t>>& in, double* max_s) {
  std::vector<int> rc;
  const auto t0 = std::chrono::steady_clock::now();
  device_all_reduce(g, g.c, count, in, false, &rc);
  *max_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rc;
}

// Rank 1's connection to rank 2 (channel 0) closes after 3 slices, in the
// first of a call's many: rank 1's proxy fails and sets its abort word, its
// connections close with a note, and the abort travels round the ring
// through the other proxies (each rank its own abort word, as on separate
// hosts): every kernel of every rank ends with Aborted (none waits for its
// timeout), every proxy stops with an error. Then, stopped, reset and
// cleared, the group runs the call again over new connections.
TEST(CudaPersistent, ProxyLinkClosedMidCallAbortsEveryRank) {
  SKIP_WITHOUT_GPU();
  const Case c = proxied(Case{3, ElemType::I32, true, Predictor::Delta1, 2});
  const size_t slice = prims::slice_elems_for(kSlot, 4), count = 2 * (2 * slice * 3 * 2);  // two loops a channel
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < c.N; ++r) in.push_back(make_input(c.type, count, 77 + uint64_t(r)));
  Group g(c, 60'000'000'000ull, [](int r, int ch, transport::ProxyChannel& pc) {
    if (r == 1 && ch == 0) pc.send = std::make_unique<DyingSend>(std::move(pc.send), 3);
  });
  for (const auto& ring : g.rings) ASSERT_EQ(ring->status(), 0);
  double took = 0;
  const std::vector<int> rc = run_all(g, count, in, &took);
  for (int r = 0; r < c.N; ++r) {
    EXPECT_EQ(rc[size_t(r)], 1000 + int(nc::RingError::Aborted)) << "rank " << r;
    EXPECT_TRUE(g.aborts[size_t(r)]->is_set()) << "rank " << r;
  }
  EXPECT_LT(took, 30.0);
  for (int r = 0; r < c.N; ++r) {
    const std::string e = g.proxies[size_t(r)]->stop();
    EXPECT_NE(e, "") << "rank " << r;
    EXPECT_TRUE(g.proxies[size_t(r)]->halted()) << "rank " << r;
    if (r == 1) {
      EXPECT_NE(e.find("closed mid-call"), std::string::npos) << e;
    }
  }
  // Stopped, reset, cleared, new connections: the same group runs again.
  for (auto& ring : g.rings) ASSERT_EQ(ring->reset(), 0);
  for (auto& a : g.aborts) a->clear();
  g.start();
  const std::vector<int> rc2 = run_all(g, count, in, &took);
  std::vector<uint8_t> sum(count * 4, 0);
  for (const auto& x : in) prims::reduce_fn(ElemType::I32, RedOp::Sum)(sum.data(), sum.data(), x.data(), count);
  std::vector<int> rc3;
  const auto got = device_all_reduce(g, c, count, in, false, &rc3);  // and once more, back to back
  for (int r = 0; r < c.N; ++r) {
    ASSERT_EQ(rc2[size_t(r)], 0) << "rank " << r;
    ASSERT_EQ(rc3[size_t(r)], 0) << "rank " << r;
    EXPECT_TRUE(got[size_t(r)] == sum) << "rank " << r;
    EXPECT_EQ(g.proxies[size_t(r)]->error(), "");
  }
}

// A kernel that fails (rank 1 alone, a 50 ms timeout) sets its abort word;
// its proxy stops, closing its connections with a note, and the proxies of
// the idle ranks downstream fail on it and set theirs.
TEST(CudaPersistent, ProxyStopsWhenItsKernelFails) {
  SKIP_WITHOUT_GPU();
  const Case c = proxied(Case{3, ElemType::F32, false, Predictor::None, 1});
  Group g(c, 50'000'000ull);
  for (const auto& ring : g.rings) ASSERT_EQ(ring->status(), 0);
  const size_t count = 4000;
  DevBuf src(count * 4), dst(count * 4);
  int e = g.rings[1]->all_reduce_async(src.get(), dst.get(), count);
  nc::RingReport rep;
  if (e == 0) e = g.rings[1]->synchronize(&rep);
  EXPECT_EQ(e, 1000 + int(nc::RingError::TimedOut));
  const auto t0 = std::chrono::steady_clock::now();
  auto all_halted = [&] {
    for (int r = 0; r < c.N; ++r)
      if (!g.proxies[size_t(r)]->halted() || !g.aborts[size_t(r)]->is_set()) return false;
    return true;
  };
  while (!all_halted() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(all_halted());
  EXPECT_EQ(g.proxies[1]->error(), "");  // it stopped on its kernel's word, with nothing of its own to report
  const std::string e2 = g.proxies[2]->error();
  EXPECT_NE(e2.find("rank 1's persistent ring stopped"), std::string::npos) << e2;
}

// A transport slot smaller than the FIFO's cannot carry a slice: start()
// refuses it (and a wrong channel count, and a proxy without FIFOs).
TEST(CudaPersistent, ProxyRefusesSmallTransportSlots) {
  SKIP_WITHOUT_GPU();
  nc::RingAbort abort;
  nc::PersistentRing::Options o;
  o.nranks = 2;
  o.slot_bytes = kSlot;
  o.fifo_in_host_memory = true;
  nc::PersistentRing ring(o, &abort);
  ASSERT_EQ(ring.status(), 0);
  ASSERT_NE(ring.fifo_host(), nullptr);
  ASSERT_NE(ring.outbox_host(), nullptr);
  transport::PersistentProxy::Fifos f;
  f.inbox = static_cast<uint8_t*>(ring.fifo_host());
  f.outbox = static_cast<uint8_t*>(ring.outbox_host());
  f.slot_bytes = kSlot;
  f.abort_word = abort.host_ptr();
  transport::PersistentProxy proxy(f, {});
  auto small = transport::local_ring_channels(2, 1, 3, kSlot - 16);
  try {
    proxy.start(std::move(small[0]));
    ADD_FAILURE() << "a transport slot of " << kSlot - 16 << " bytes was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("slots hold " + std::to_string(kSlot - 16) + " bytes, the FIFO's " +
                                         std::to_string(kSlot)),
              std::string::npos)
        << e.what();
  }
  auto two = transport::local_ring_channels(2, 2, 3, kSlot);
  EXPECT_THROW(proxy.start(std::move(two[0])), InvalidArgument);  // 2 channels for a 1-channel ring
  EXPECT_EQ(proxy.stop(), "");
  f.outbox = nullptr;
  EXPECT_THROW({ transport::PersistentProxy p(f, {}); }, InvalidArgument);
}

}  // namespace

#endif  // NCCLZ_WITH_CUDA
