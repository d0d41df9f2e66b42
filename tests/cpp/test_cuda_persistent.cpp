// Persistent ring all_reduce kernels (ncclz/cuda_persistent.hpp,
// cuda/persistent_ring.cu): ranks as threads of one process on one device,
// each with its own stream, their kernels waiting on each other through the
// FIFOs in device memory. Every result is compared with the CPU ring
// (algorithms/ring.cpp over prims/prims.cpp, the same slot size, slots and
// options) on the same inputs: bit for bit on every rank, and for integer
// codes also with the exact wrapping sum. Abort and timeout make a waiting
// kernel report instead of hanging.
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
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "codec/slice.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/cuda_support.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_fifo.hpp"

using namespace ncclz;
using codec::ElemType;
using codec::Predictor;
using ncclz_test::DevBuf;
using ncclz_test::from_device;
using ncclz_test::to_device;
namespace nc = ncclz::cuda;

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
};
std::string describe(const Case& c) {
  return std::to_string(c.N) + " ranks, type " + std::to_string(int(c.type)) +
         (c.coded ? " coded, predictor " : " raw") + (c.coded ? std::to_string(int(c.pred)) : "") + ", " +
         std::to_string(c.channels) + " channel(s) x " + std::to_string(c.ctas) + " CTA(s), " +
         std::to_string(c.slots) + " slots of " + std::to_string(c.slot) + " bytes" + (c.v1 ? ", first version" : "");
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
    } else if (es == 4) {
      const int32_t c = int32_t(uint32_t(uint64_t(v)));
      std::memcpy(&b[i * 4], &c, 4);
    } else {
      std::memcpy(&b[i * 8], &v, 8);
    }
  }
  return b;
}

/// The CPU ring's all_reduce of in[r] (count elements) on N ranks as threads.
std::vector<std::vector<uint8_t>> cpu_all_reduce(const Case& c, size_t count,
                                                 const std::vector<std::vector<uint8_t>>& in) {
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
        a.reduce = prims::reduce_fn(c.type, RedOp::Sum);
        a.int_sum = codec::is_code_type(c.type);
        a.raw_esize = es;
        a.deadline = transport::Clock::now() + std::chrono::seconds(120);
        a.rank = r;
        if (c.coded) {
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
  return out;
}

/// Each wait's timeout: NCCLZ_PERSISTENT_TEST_TIMEOUT_S seconds (default 60;
/// tools/gpu_session.sh shortens it under compute-sanitizer, which may run
/// the ranks' kernels one after the other: then TimedOut, not a hang).
uint64_t test_timeout_ns() {
  const char* v = std::getenv("NCCLZ_PERSISTENT_TEST_TIMEOUT_S");
  const double s = v != nullptr && std::atof(v) > 0 ? std::atof(v) : 60.0;
  return uint64_t(s * 1e9);
}

/// N rings of a group, connected, each with its own stream.
struct Group {
  nc::RingAbort abort;
  std::vector<std::unique_ptr<nc::PersistentRing>> rings;
  explicit Group(const Case& c, uint64_t timeout_ns = test_timeout_ns()) {
    for (int r = 0; r < c.N; ++r) {
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
      rings.push_back(std::make_unique<nc::PersistentRing>(o, &abort));
    }
    for (int r = 0; r < c.N; ++r) rings[size_t(r)]->connect(rings[size_t((r + 1) % c.N)]->fifo());
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

/// The per-rank inputs of a case, the CPU ring's outputs (channel by channel
/// over the same contiguous parts as the kernel's CTAs), and the kernel's.
void check_case(const Case& c, size_t count, bool in_place = false, size_t shift = 0) {
  SCOPED_TRACE(describe(c) + ", count " + std::to_string(count) + (in_place ? ", in place" : "") +
               (shift ? ", buffers shifted by " + std::to_string(shift) : ""));
  const size_t es = codec::elem_size(c.type);
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < c.N; ++r) in.push_back(make_input(c.type, count, 7919 * uint64_t(r) + count + uint64_t(c.N)));
  std::vector<std::vector<uint8_t>> want(size_t(c.N), std::vector<uint8_t>(count * es));
  const size_t per = (count + size_t(c.channels) - 1) / size_t(c.channels);
  for (size_t c0 = 0; c0 < count; c0 += per) {
    const size_t n = std::min(per, count - c0);
    std::vector<std::vector<uint8_t>> part;
    for (int r = 0; r < c.N; ++r)
      part.emplace_back(in[size_t(r)].begin() + long(c0 * es), in[size_t(r)].begin() + long((c0 + n) * es));
    const auto got = cpu_all_reduce(c, n, part);
    for (int r = 0; r < c.N; ++r) std::memcpy(want[size_t(r)].data() + c0 * es, got[size_t(r)].data(), n * es);
  }
  if (codec::is_code_type(c.type)) {  // the CPU ring's result is the exact wrapping sum
    std::vector<uint8_t> sum(count * es, 0);
    for (int r = 0; r < c.N; ++r)
      prims::reduce_fn(c.type, RedOp::Sum)(sum.data(), sum.data(), in[size_t(r)].data(), count);
    ASSERT_EQ(want[0], sum);
  }
  Group g(c);
  for (const auto& ring : g.rings) ASSERT_EQ(ring->status(), 0);
  for (int call = 0; call < 2; ++call) {  // twice: the FIFO counters carry over between calls
    std::vector<int> rc;
    const auto got = device_all_reduce(g, c, count, in, in_place, &rc, shift);
    for (int r = 0; r < c.N; ++r) {
      ASSERT_EQ(rc[size_t(r)], 0) << "rank " << r << " call " << call;
      ASSERT_TRUE(got[size_t(r)] == want[size_t(r)])
          << "rank " << r << " call " << call << ": differs from the CPU ring";
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
  nc::PersistentRing ok(o, &abort);
  EXPECT_EQ(ok.status(), 0);
  EXPECT_EQ(ok.slice_elems(), (1024u - 24u) / 4u);
  EXPECT_LT(ok.all_reduce_async(nullptr, nullptr, 10), 0);  // 2 ranks, not connected
  EXPECT_GT(ok.max_resident_ctas(), 0);
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

}  // namespace

#endif  // NCCLZ_WITH_CUDA
