// Device ranks in the send/receive loops (prims::DeviceSliceCodec,
// cpp/src/prims/device_slices.hpp; cuda/device_slice_codec.cu,
// cuda/slice_reduce.cu): the real ring and chain schedules
// (algorithms/ring.cpp: all_reduce, reduce_scatter, all_gather, broadcast)
// over the real step routine (prims/prims.cpp), ranks as threads joined by
// in-memory slot FIFOs (test_fifo.hpp), values in device memory on the device
// ranks. Every run is compared with the same run on CPU ranks only: outputs
// equal bit for bit (and to the exact wrapping integer result), and the
// bytes posted on every link identical, slot by slot; in one communicator
// device and CPU ranks mix.
//
// Built with CUDA (NCCLZ_WITH_CUDA; tests/cpp/CMakeLists.txt: skips without
// a GPU, fails under NCCLZ_REQUIRE_GPU=1) and in the CPU emulator
// (tools/cuda_emu: ncclz_cuda_emu_prims_tests, run by `run.sh ci` with each
// slice-kernel version; about 2 s each there).
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "prims/device_slices.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_fifo.hpp"

using namespace ncclz;
using codec::ElemType;
using codec::Predictor;
using ncclz_test::DevBuf;
using ncclz_test::FakeRecv;
using ncclz_test::FakeSend;
using ncclz_test::Fifo;
using ncclz_test::from_device;
using ncclz_test::store_code;
using ncclz_test::to_device;
using prims::WireMode;
using transport::Clock;

namespace {

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast };
constexpr int kRoot = 1;  // the broadcasts' root (a relay before it from 3 ranks on)
const char* name(Coll c) {
  return c == Coll::AllReduce       ? "all_reduce"
         : c == Coll::ReduceScatter ? "reduce_scatter"
         : c == Coll::AllGather     ? "all_gather"
                                    : "broadcast";
}

constexpr size_t kSlot = 1024;  // slot bytes: 250 int32 or 125 int64 per slice
constexpr int kSlots = 4;       // slots per connection: ring chunks of 2 slices

/// How the ranks code: the wire mode, the element type and, in Coded mode of
/// codes, the forced Block predictor (CPU ranks get the same options). Coded
/// floats (lossless F32 / BF16 / F16): FloatHuff slices, the selector without
/// rANS (allow_rans = false), reduced with `op`.
struct Wire {
  WireMode mode = WireMode::Coded;
  ElemType type = ElemType::I32;
  Predictor pred = Predictor::None;
  RedOp op = RedOp::Sum;  ///< the reductions' operator
};
std::string describe(const Wire& w) {
  return std::string(w.mode == WireMode::Raw ? "raw" : "coded") + " type " + std::to_string(int(w.type)) + " op " +
         std::to_string(int(w.op)) + (w.mode == WireMode::Coded ? " predictor " + std::to_string(int(w.pred)) : "");
}

prims::PrimsArgs make_args(const Wire& w, int rank) {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.reduce = prims::reduce_fn(w.type, w.op);
  a.int_sum = codec::is_code_type(w.type) && w.op == RedOp::Sum;
  a.raw_esize = codec::elem_size(w.type);
  a.deadline = Clock::now() + std::chrono::seconds(120);
  a.rank = rank;
  if (w.mode == WireMode::Coded && !codec::is_code_type(w.type)) {
    a.enc.allow_rans = false;  // what a device rank codes: FloatHuff
  } else if (w.mode == WireMode::Coded) {
    a.enc.choice = codec::EncodeOptions::Choice::Block;
    a.enc.predictor = int(w.pred);
  }
  return a;
}

/// Codes with structure: a smooth walk with noise (Block and the delta
/// predictors compress it), a stretch of large values (Block falls back to
/// Raw there) and values near the type's limits (sums wrap).
std::vector<uint8_t> make_codes(ElemType t, size_t n, uint64_t seed) {
  const size_t es = codec::elem_size(t);
  std::vector<uint8_t> b(n * es);
  std::mt19937_64 rng(seed);
  int64_t walk = int64_t(rng() % 1000) - 500;
  for (size_t i = 0; i < n; ++i) {
    walk += int64_t(rng() % 7) - 3;
    int64_t v = walk + int64_t(rng() % 5) - 2;
    const size_t phase = (i / 300) % 5;
    if (phase == 3) v = int64_t(rng());  // incompressible: Raw fallback
    if (phase == 4 && i % 97 == 0) v = es == 4 ? int64_t(INT32_MAX) - int64_t(rng() % 3) : INT64_MAX;
    store_code(b, i, es, v);
  }
  return b;
}

/// Values of any type with no NaN (the payload of a NaN that an operation on
/// NaNs makes differs between x86 and GPUs): floats of every magnitude,
/// subnormals, signed zeros and infinities of one sign (no inf - inf; none
/// for products: no 0 x inf); integers of every bit pattern.
std::vector<uint8_t> make_values(ElemType t, RedOp op, size_t n, uint64_t seed) {
  const size_t es = codec::elem_size(t);
  std::vector<uint8_t> b(n * es);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const int kind = int(bits % 16);
    double d = std::ldexp(double(int64_t(bits >> 20) % 100000), int((bits >> 4) % 40) - 20);
    if (kind == 0) d = 0.0;
    if (kind == 1) d = -0.0;
    if (kind == 2 && op != RedOp::Prod) d = std::numeric_limits<double>::infinity();
    if (kind == 3) d = double(std::numeric_limits<float>::denorm_min()) * double(bits >> 60);
    if (t == ElemType::F32) {
      const float f = float(d);
      std::memcpy(&b[i * 4], &f, 4);
    } else if (t == ElemType::F64) {
      std::memcpy(&b[i * 8], &d, 8);
    } else if (t == ElemType::BF16 || t == ElemType::F16) {
      const uint16_t h = t == ElemType::BF16 ? codec::float_to_bf16(float(d)) : codec::float_to_f16(float(d));
      std::memcpy(&b[i * 2], &h, 2);
    } else {
      std::memcpy(&b[i * es], &bits, es);
    }
  }
  return b;
}

/// Floats as gradients are (what lossless mode compresses): Gaussian values
/// of a few exponents, with zeros of both signs and a few tiny values mixed in.
std::vector<uint8_t> make_floats(ElemType t, size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n * codec::elem_size(t));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.01f);
  for (size_t i = 0; i < n; ++i) {
    float f = g(rng);
    if (i % 61 == 0) f = (i & 64) ? -0.0f : 0.0f;
    if (i % 67 == 0) f *= 1e-5f;
    if (t == ElemType::F32) {
      std::memcpy(&b[i * 4], &f, 4);
    } else if (t == ElemType::U8) {
      b[i] = uint8_t(std::lround(f * 600.0f) & 0xFF);  // bytes (int8): about 4.6 bits each
    } else {
      const uint16_t h = t == ElemType::BF16 ? codec::float_to_bf16(f) : codec::float_to_f16(f);
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  return b;
}

/// Wrapping sum of element i of every buffer.
void add_into(ElemType t, std::vector<uint8_t>& acc, const uint8_t* x, size_t n) {
  prims::reduce_fn(t, RedOp::Sum)(acc.data(), acc.data(), x, n);
}

struct RingRun {
  std::vector<std::vector<uint8_t>> out;                // per rank
  std::vector<std::vector<std::vector<uint8_t>>> wire;  // per link r -> r+1: every posted slot
  std::vector<std::string> errors;                      // per rank ("" if none)
};

/// One collective on N = device.size() ranks (device[r]: rank r's values in
/// device memory, coded by a DeviceSliceCodec), count elements per rank
/// (all_reduce, broadcast: the buffer; reduce_scatter: each block;
/// all_gather: each rank's part), inputs in[r] (broadcast: in place from
/// rank kRoot's, the chain along the ring).
RingRun run_ring(Coll c, const Wire& w, const std::vector<bool>& device, size_t count,
                 const std::vector<std::vector<uint8_t>>& in) {
  const int N = int(device.size());
  const size_t es = codec::elem_size(w.type);
  const size_t in_elems = c == Coll::ReduceScatter ? count * size_t(N) : count;
  const size_t out_elems = c == Coll::AllGather ? count * size_t(N) : count;
  std::vector<std::unique_ptr<Fifo>> links;
  for (int r = 0; r < N; ++r) links.push_back(std::make_unique<Fifo>(kSlot, kSlots));
  RingRun res;
  res.out.assign(size_t(N), {});
  res.errors.assign(size_t(N), "");
  std::vector<std::thread> ts;
  for (int r = 0; r < N; ++r) {
    ts.emplace_back([&, r] {
      try {
        FakeSend s(links[size_t(r)].get());
        FakeRecv rv(links[size_t((r + N - 1) % N)].get());
        prims::PrimsArgs a = make_args(w, r);
        const size_t slice = prims::slice_elems_for(kSlot, es);
        prims::ChannelStats st;
        std::unique_ptr<prims::DeviceSliceCodec> dc;
        std::unique_ptr<DevBuf> dsrc, ddst, dscr;
        std::vector<uint8_t> hsrc = in[size_t(r)], hdst(out_elems * es, 0xEE);
        if (c == Coll::Broadcast) hdst = hsrc;  // in place
        std::vector<uint64_t> hscr((slice * es + 7) / 8);
        const uint8_t* src = hsrc.data();
        uint8_t* dst = hdst.data();
        void* scratch = hscr.data();
        if (device[size_t(r)]) {
          dc = std::make_unique<prims::DeviceSliceCodec>(w.type, w.mode, a.enc, a.int_sum, kSlot, slice);
          if (!a.int_sum) dc->set_value_reduction(w.op);  // as core::DeviceWork::slices
          a.device = dc.get();
          dsrc = std::make_unique<DevBuf>(in_elems * es);
          ddst = std::make_unique<DevBuf>(out_elems * es);
          dscr = std::make_unique<DevBuf>(slice * es);
          to_device(dsrc->get(), hsrc);
          to_device(ddst->get(), hdst);
          src = dsrc->get();
          dst = ddst->get();
          scratch = dscr->get();
        }
        prims::Prims p(&s, &rv, a, &st, scratch);
        const size_t seg = algorithms::ring_segment_elems(p, kSlots);
        const algorithms::RingPos pos{r, N};
        if (c == Coll::AllReduce) {
          algorithms::ring_all_reduce(p, pos, src, dst, count, seg);
        } else if (c == Coll::ReduceScatter) {
          algorithms::ring_reduce_scatter(p, pos, src, count, dst, count, seg);
        } else if (c == Coll::AllGather) {
          algorithms::ring_all_gather(p, pos, src, dst, count, count, seg);
        } else {
          algorithms::chain_broadcast(p, pos, kRoot % N, dst, count);
        }
        if (dc) {
          if (cudaStreamSynchronize(static_cast<cudaStream_t>(dc->stream())) != cudaSuccess) throw Error("sync");
          res.out[size_t(r)] = from_device(dst, out_elems * es);
        } else {
          res.out[size_t(r)] = hdst;
        }
      } catch (const std::exception& e) {
        res.errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < N; ++r) res.wire.push_back(links[size_t(r)]->log);
  return res;
}

/// The exact result of the collective for rank r (integers: wrapping sums, or
/// their max / min).
std::vector<uint8_t> expected(Coll c, ElemType t, RedOp op, int N, int r, size_t count,
                              const std::vector<std::vector<uint8_t>>& in) {
  const size_t es = codec::elem_size(t);
  if (c == Coll::Broadcast) return in[size_t(kRoot % N)];
  if (c == Coll::AllGather) {
    std::vector<uint8_t> o;
    for (int j = 0; j < N; ++j) o.insert(o.end(), in[size_t(j)].begin(), in[size_t(j)].end());
    return o;
  }
  const size_t off = c == Coll::ReduceScatter ? size_t(r) * count * es : 0;
  std::vector<uint8_t> acc(in[0].begin() + long(off), in[0].begin() + long(off + count * es));
  for (int j = 1; j < N; ++j) prims::reduce_fn(t, op)(acc.data(), acc.data(), in[size_t(j)].data() + off, count);
  return acc;
}

// Whether element i of v (type t) is a NaN.
bool is_nan_at(ElemType t, const std::vector<uint8_t>& v, size_t i) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * codec::elem_size(t), codec::elem_size(t));
  switch (t) {
    case ElemType::F32: return (x & 0x7FFFFFFFu) > 0x7F800000u;
    case ElemType::F64: return (x & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
    case ElemType::F16: return (x & 0x7FFFu) > 0x7C00u;
    case ElemType::BF16: return (x & 0x7FFFu) > 0x7F80u;
    default: return false;
  }
}

/// got and want element by element, two NaNs counting as equal: the payload
/// of an operation on NaNs is the hardware's (IEEE 754 leaves it open; x86
/// keeps an operand's, GPUs return a canonical one: cuda_codec.hpp,
/// reduce_values_async). For raw value reductions, whose partial results
/// travel as they are.
bool same_values(ElemType t, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  const size_t es = codec::elem_size(t);
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i * es < want.size(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0 &&
        !(is_nan_at(t, got, i) && is_nan_at(t, want, i))) {
      return false;
    }
  }
  return true;
}

/// Runs c on CPU ranks, then with each device pattern, and compares.
void check_collective(Coll c, const Wire& w, int N, size_t count, const std::vector<std::vector<bool>>& patterns) {
  SCOPED_TRACE(testing::Message() << name(c) << ", " << describe(w) << ", " << N << " ranks, count " << count);
  const size_t in_elems = c == Coll::ReduceScatter ? count * size_t(N) : count;
  // Codes: sums, and in Coded mode their max / min (a lossy max / min).
  const bool codes = codec::is_code_type(w.type) && (w.op == RedOp::Sum || w.mode == WireMode::Coded);
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < N; ++r) {
    const uint64_t seed = uint64_t(1000 * N + 17 * r) + count;
    const bool lossless = w.mode == WireMode::Coded && !codec::is_code_type(w.type);
    in.push_back(codes      ? make_codes(w.type, in_elems, seed)
                 : lossless ? make_floats(w.type, in_elems, seed)
                            : make_values(w.type, w.op, in_elems, seed));
  }
  const RingRun ref = run_ring(c, w, std::vector<bool>(size_t(N), false), count, in);
  for (int r = 0; r < N; ++r) {
    ASSERT_EQ(ref.errors[size_t(r)], "") << "CPU rank " << r;
    // (Float reductions: the CPU ranks' own order of operations is the reference.)
    if (codes) {
      ASSERT_EQ(ref.out[size_t(r)], expected(c, w.type, w.op, N, r, count, in)) << "CPU rank " << r;
    }
  }
  size_t slots = 0;
  for (const auto& l : ref.wire) slots += l.size();
  EXPECT_GT(slots, size_t(0));
  if (w.mode == WireMode::Coded) {
    // The coded wire carries slices of the forced codec: Block (codes) or
    // FloatHuff (floats), or Raw where that is larger; some are coded.
    const codec::Codec coder = codec::is_code_type(w.type) ? codec::Codec::Block : codec::Codec::FloatHuff;
    size_t coded = 0;
    for (const auto& l : ref.wire) {
      for (const auto& b : l) {
        codec::SliceHeader h;
        ASSERT_EQ(codec::read_header(b.data(), b.size(), &h), codec::Status::Ok);
        ASSERT_TRUE(h.codec == coder || h.codec == codec::Codec::Raw);
        coded += h.codec == coder;
      }
    }
    if (count >= 2048) {  // (FloatHuff's table and index outweigh its gain on a few hundred float32 in places)
      EXPECT_GT(coded, size_t(0)) << "no slice was coded";
    }
  }
  for (const auto& dev : patterns) {
    std::string pat;
    for (bool d : dev) pat += d ? 'G' : 'C';
    SCOPED_TRACE("ranks " + pat + " (G: device rank, C: CPU rank)");
    const RingRun got = run_ring(c, w, dev, count, in);
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(got.errors[size_t(r)], "") << "rank " << r;
      if (w.mode == WireMode::Raw) {
        ASSERT_TRUE(same_values(w.type, got.out[size_t(r)], ref.out[size_t(r)]))
            << "rank " << r << ": output differs from the CPU ranks'";
      } else {
        ASSERT_EQ(got.out[size_t(r)], ref.out[size_t(r)]) << "rank " << r << ": output differs from the CPU ranks'";
      }
    }
    for (int l = 0; l < N; ++l) {
      ASSERT_EQ(got.wire[size_t(l)].size(), ref.wire[size_t(l)].size()) << "link " << l << " -> " << (l + 1) % N;
      for (size_t k = 0; k < ref.wire[size_t(l)].size(); ++k) {
        const auto& gk = got.wire[size_t(l)][k];
        const auto& rk = ref.wire[size_t(l)][k];
        ASSERT_TRUE(w.mode == WireMode::Raw ? same_values(w.type, gk, rk) : gk == rk)
            << "link " << l << " -> " << (l + 1) % N << ", slot " << k << ": wire bytes differ";
      }
    }
  }
}

/// Counts per rank: one element, exactly one slice, a short last slice, and
/// several ring loops with short and empty last chunks.
std::vector<size_t> counts(ElemType t, int N) {
  const size_t slice = prims::slice_elems_for(kSlot, codec::elem_size(t));
  return {1, slice, 2 * slice + 37,
          2 * slice * size_t(N) * 2 + slice / 3};  // the last: two ring loops and a short third
}

std::vector<std::vector<bool>> patterns(int N) {
  std::vector<bool> all(size_t(N), true), mixed(size_t(N), false), one(size_t(N), false);
  for (int r = 0; r < N; r += 2) mixed[size_t(r)] = true;
  one[size_t(N - 1)] = true;
  return {all, mixed, one};
}

class CudaPrimsRing : public ::testing::TestWithParam<Coll> {};

TEST_P(CudaPrimsRing, CodedInt32MatchesCpuRanks) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 3, 4}) {
    for (Predictor p : {Predictor::None, Predictor::Delta1}) {
      for (size_t n : counts(ElemType::I32, N))
        check_collective(GetParam(), Wire{WireMode::Coded, ElemType::I32, p}, N, n, patterns(N));
    }
  }
}

// A lossy max / min's wire: Coded codes reduced by their max / min on the
// device ranks (DeviceSliceCodec::set_value_reduction: fused into the v3
// decode for Block slices, decode then reduce for Raw ones and with v1 / v2),
// int32 and int64, device and CPU ranks mixed: the exact max / min, the
// all-CPU run's output bits and every slot's bytes.
TEST(CudaPrims, CodedMaxMinMatchCpuRanks) {
  SKIP_WITHOUT_GPU();
  for (Coll c : {Coll::AllReduce, Coll::ReduceScatter}) {
    for (RedOp op : {RedOp::Max, RedOp::Min}) {
      const auto n2 = counts(ElemType::I32, 2), n3 = counts(ElemType::I32, 3), n4 = counts(ElemType::I64, 4);
      check_collective(c, Wire{WireMode::Coded, ElemType::I32, Predictor::Delta1, op}, 2, n2[2], patterns(2));
      for (size_t n : {n3[0], n3[3]})
        check_collective(c, Wire{WireMode::Coded, ElemType::I32, Predictor::Delta1, op}, 3, n, patterns(3));
      check_collective(c, Wire{WireMode::Coded, ElemType::I64, Predictor::Delta2, op}, 4, n4[3], patterns(4));
    }
  }
}

TEST_P(CudaPrimsRing, RawInt32MatchesCpuRanks) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 4}) {
    for (size_t n : counts(ElemType::I32, N))
      check_collective(GetParam(), Wire{WireMode::Raw, ElemType::I32}, N, n, patterns(N));
  }
}

TEST_P(CudaPrimsRing, Int64AndDelta2MatchCpuRanks) {
  SKIP_WITHOUT_GPU();
  const int N = 3;
  for (size_t n : counts(ElemType::I64, N)) {
    check_collective(GetParam(), Wire{WireMode::Coded, ElemType::I64, Predictor::Delta2}, N, n, patterns(N));
    check_collective(GetParam(), Wire{WireMode::Raw, ElemType::I64}, N, n, {patterns(N)[1]});
  }
}

// Raw mode moves elements of any type: float32 (here as its bytes) gathered and broadcast.
TEST(CudaPrims, RawFloat32MovesMatchCpuRanks) {
  SKIP_WITHOUT_GPU();
  for (Coll c : {Coll::AllGather, Coll::Broadcast}) {
    for (size_t n : counts(ElemType::F32, 3))
      check_collective(c, Wire{WireMode::Raw, ElemType::F32}, 3, n, patterns(3));
  }
}

// Raw mode reduces values of any type on a device rank (set_value_reduction:
// an uncompressed device rank's REDUCE step): sums and maxima of floats and
// integer maxima through the reducing ring collectives, device and CPU ranks
// mixed: the all-CPU run's output bits and every slot's bytes.
TEST(CudaPrims, RawValueReductionsMatchCpuRanks) {
  SKIP_WITHOUT_GPU();
  const int N = 3;
  for (ElemType t : {ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::F64, ElemType::I32}) {
    for (RedOp op : {RedOp::Sum, RedOp::Max, RedOp::Prod}) {
      if (t == ElemType::I32 && op == RedOp::Sum) continue;  // RawInt32MatchesCpuRanks
      for (Coll c : {Coll::AllReduce, Coll::ReduceScatter}) {
        const auto ns = counts(t, N);
        for (size_t n : {ns[0], ns[2], ns[3]})
          check_collective(c, Wire{WireMode::Raw, t, Predictor::None, op}, N, n, patterns(N));
      }
    }
  }
  // Coded codes reduce by sum, max or min (a lossy call's operators): not by a product.
  prims::DeviceSliceCodec coded(ElemType::I32, WireMode::Coded, make_args(Wire{}, 0).enc, true, kSlot,
                                prims::slice_elems_for(kSlot, 4));
  EXPECT_NO_THROW(coded.set_value_reduction(RedOp::Max));
  EXPECT_NO_THROW(coded.set_value_reduction(RedOp::Min));
  EXPECT_THROW(coded.set_value_reduction(RedOp::Prod), InvalidArgument);
}

// Lossless floats on device ranks (Coded floats: FloatHuff slices, reduced
// in their type after the decode), and bytes the same way: sums and maxima
// through every ring collective, device and CPU ranks mixed: the all-CPU
// run's output bits and every slot's bytes (the CPU ranks code without rANS,
// as a device rank's peers do).
TEST(CudaPrims, LosslessFloatsMatchCpuRanks) {
  SKIP_WITHOUT_GPU();
  const int N = 3;
  for (ElemType t : {ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::U8}) {
    for (RedOp op : {RedOp::Sum, RedOp::Max}) {
      for (Coll c : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast}) {
        if (op != RedOp::Sum && (c == Coll::AllGather || c == Coll::Broadcast)) continue;
        const auto ns = counts(t, N);
        for (size_t n : {ns[0], ns[2], ns[3]})
          check_collective(c, Wire{WireMode::Coded, t, Predictor::None, op}, N, n, patterns(N));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, CudaPrimsRing,
                         ::testing::Values(Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast),
                         [](const testing::TestParamInfo<Coll>& i) {
                           return std::string(i.param == Coll::AllReduce       ? "AllReduce"
                                              : i.param == Coll::ReduceScatter ? "ReduceScatter"
                                              : i.param == Coll::AllGather     ? "AllGather"
                                                                               : "Broadcast");
                         });

// The lossy all_reduce's shape on device ranks: float32 inputs quantized on
// the device (DeviceCodec::quantize_async) into int32 codes, the ring
// all_reduce of the codes through the device slice codec, the sum
// dequantized on the device (dequantize_async); CPU ranks do the same with
// the CPU quantizer (quantize_one / dequantize_one). Every rank's output is
// the all-CPU run's bit for bit and within N * eb (+ float rounding) of the
// exact sum.
struct QuantRun {
  std::vector<std::vector<float>> out;
  std::vector<std::string> errors;
  std::vector<std::vector<std::vector<uint8_t>>> wire;
};

QuantRun run_quantized_all_reduce(const std::vector<bool>& device, const std::vector<std::vector<float>>& x, double eb,
                                  Predictor pred) {
  const int N = int(device.size());
  const size_t n = x[0].size();
  const Wire w{WireMode::Coded, ElemType::I32, pred};
  const codec::QuantGrid g = codec::QuantGrid::from_bound(eb);
  const int64_t limit = codec::max_code_limit<int32_t>() / N;  // sums of N codes never wrap
  std::vector<std::unique_ptr<Fifo>> links;
  for (int r = 0; r < N; ++r) links.push_back(std::make_unique<Fifo>(kSlot, kSlots));
  QuantRun res;
  res.out.assign(size_t(N), {});
  res.errors.assign(size_t(N), "");
  std::vector<std::thread> ts;
  for (int r = 0; r < N; ++r) {
    ts.emplace_back([&, r] {
      try {
        FakeSend s(links[size_t(r)].get());
        FakeRecv rv(links[size_t((r + N - 1) % N)].get());
        prims::PrimsArgs a = make_args(w, r);
        const size_t slice = prims::slice_elems_for(kSlot, 4);
        prims::ChannelStats st;
        std::vector<float> out(n);
        if (!device[size_t(r)]) {
          std::vector<int32_t> q(n);
          for (size_t i = 0; i < n; ++i) {
            if (!codec::quantize_one<float, int32_t>(x[size_t(r)][i], g, limit, &q[i])) throw Error("CPU outlier");
          }
          std::vector<uint64_t> scr((slice * 4 + 7) / 8);
          prims::Prims p(&s, &rv, a, &st, scr.data());
          algorithms::ring_all_reduce(p, {r, N}, q.data(), q.data(), n, algorithms::ring_segment_elems(p, kSlots));
          for (size_t i = 0; i < n; ++i) out[i] = codec::dequantize_one<float, int32_t>(q[i], g);
        } else {
          prims::DeviceSliceCodec dc(ElemType::I32, WireMode::Coded, a.enc, true, kSlot, slice);
          a.device = &dc;
          cuda::DeviceCodec qc(dc.stream());  // the quantizer, on the slice codec's stream
          DevBuf dx(n * 4), dq(n * 4), dout(n * 4), dcount(8), dscr(slice * 4);
          std::vector<uint8_t> hx(n * 4);
          std::memcpy(hx.data(), x[size_t(r)].data(), n * 4);
          to_device(dx.get(), hx);
          uint64_t* d_count = reinterpret_cast<uint64_t*>(dcount.get());
          if (qc.quantize_async(dx.get(), ElemType::F32, n, eb, limit, dq.get(), ElemType::I32, d_count, nullptr, 0) !=
              0) {
            throw Error("quantize_async");
          }
          if (qc.synchronize() != 0) throw Error("sync");
          uint64_t outliers = 0;
          std::memcpy(&outliers, from_device(d_count, 8).data(), 8);
          if (outliers != 0) throw Error("device outliers");
          prims::Prims p(&s, &rv, a, &st, dscr.get());
          algorithms::ring_all_reduce(p, {r, N}, dq.get(), dq.get(), n, algorithms::ring_segment_elems(p, kSlots));
          if (qc.dequantize_async(dq.get(), ElemType::I32, n, eb, dout.get(), ElemType::F32) != 0) {
            throw Error("dequantize_async");
          }
          if (qc.synchronize() != 0) throw Error("sync");
          std::memcpy(out.data(), from_device(dout.get(), n * 4).data(), n * 4);
        }
        res.out[size_t(r)] = out;
      } catch (const std::exception& e) {
        res.errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < N; ++r) res.wire.push_back(links[size_t(r)]->log);
  return res;
}

TEST(CudaPrims, QuantizedAllReduceMatchesCpuRanks) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 4}) {
    for (size_t n : {size_t(1), size_t(777), size_t(4321)}) {
      SCOPED_TRACE(testing::Message() << N << " ranks, " << n << " floats");
      std::vector<std::vector<float>> x(static_cast<size_t>(N), std::vector<float>(n));
      std::mt19937 rng(uint32_t(N * 1000 + n));
      std::normal_distribution<float> noise(0.f, 0.05f);
      for (int r = 0; r < N; ++r) {
        for (size_t i = 0; i < n; ++i) x[size_t(r)][i] = std::sin(0.01f * float(i) + float(r)) + noise(rng);
      }
      const double eb = 1e-3 / N;  // each rank's share of a 1e-3 bound
      const QuantRun ref = run_quantized_all_reduce(std::vector<bool>(size_t(N), false), x, eb, Predictor::Delta1);
      for (int r = 0; r < N; ++r) {
        ASSERT_EQ(ref.errors[size_t(r)], "");
        ASSERT_EQ(ref.out[size_t(r)], ref.out[0]) << "CPU rank " << r;  // every rank ends with the same bits
      }
      for (size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (int r = 0; r < N; ++r) exact += double(x[size_t(r)][i]);
        // N codes, each within eb of its value, then one rounding to float.
        ASSERT_LE(std::fabs(double(ref.out[0][i]) - exact), N * eb + 1e-6 * std::fabs(exact) + 1e-7) << "element " << i;
      }
      for (const auto& dev : patterns(N)) {
        const QuantRun got = run_quantized_all_reduce(dev, x, eb, Predictor::Delta1);
        for (int r = 0; r < N; ++r) {
          ASSERT_EQ(got.errors[size_t(r)], "") << "rank " << r;
          ASSERT_EQ(0, std::memcmp(got.out[size_t(r)].data(), ref.out[0].data(), n * 4))
              << "rank " << r << ": output differs from the CPU ranks'";
        }
        ASSERT_EQ(got.wire, ref.wire) << "wire bytes differ";
      }
    }
  }
}

/// A slice's operands in device memory (x, y: copies of the host's; `to`:
/// an output of their size), and x's slice (cs, cb bytes) as encode() made it.
struct OnDevice {
  OnDevice(const std::vector<uint8_t>& hx, const std::vector<uint8_t>& hy)
      : hx_(hx), x(hx.size()), y(hy.size()), to(hx.size()) {
    to_device(x.get(), hx);
    to_device(y.get(), hy);
  }
  /// Encodes x (n elements) with the CPU's slice codec and the device's into
  /// slots of `slot` bytes: the same bytes, or a failure; cs: the CPU's slice
  /// (slot + 1 bytes of room).
  void encode(const prims::SliceCodec& cpu, prims::DeviceSliceCodec& dev, size_t n, size_t slot) {
    std::vector<uint8_t> ds(slot + 1, 0xCC);
    cs.assign(slot + 1, 0);
    size_t db = 0;
    ASSERT_EQ(cpu.encode(prims::SliceValues::of_dense(hx_.data()), n, cs.data(), &cb), codec::Status::Ok);
    ASSERT_EQ(dev.encode(prims::SliceValues::of_dense(x.get()), n, ds.data(), &db), codec::Status::Ok);
    ASSERT_EQ(db, cb);
    ASSERT_EQ(0, std::memcmp(ds.data(), cs.data(), cb)) << "device slice differs from the CPU's";
  }
  const std::vector<uint8_t>& hx_;
  DevBuf x, y, to;
  std::vector<uint8_t> cs;
  size_t cb = 0;
};

// The codec's three calls directly, against SliceCodec with the same options.
TEST(CudaPrims, SliceCodecCallsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (ElemType t : {ElemType::I32, ElemType::I64}) {
    for (Predictor pred : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
      SCOPED_TRACE(testing::Message() << "esize " << codec::elem_size(t) << " predictor " << int(pred));
      const size_t es = codec::elem_size(t);
      const size_t slice = prims::slice_elems_for(kSlot, es);
      Wire w{WireMode::Coded, t, pred};
      const prims::PrimsArgs a = make_args(w, 0);
      std::vector<uint64_t> scr((slice * es + 7) / 8);
      prims::SliceCodec cpu(t, w.mode, a.enc, a.reduce, true, kSlot, reinterpret_cast<uint8_t*>(scr.data()));
      prims::DeviceSliceCodec dev(t, w.mode, a.enc, true, kSlot, slice);
      for (size_t n : {size_t(1), size_t(2), size_t(31), size_t(33), slice - 1, slice}) {
        SCOPED_TRACE(testing::Message() << "n " << n);
        for (uint64_t seed : {1u, 2u}) {
          const auto x = make_codes(t, n, seed * 77 + n), y = make_codes(t, n, seed * 91 + n + 5);
          OnDevice d(x, y);
          ASSERT_NO_FATAL_FAILURE(d.encode(cpu, dev, n, kSlot));
          const DevBuf &dy = d.y, &dto = d.to;
          std::vector<uint8_t>& cs = d.cs;
          const size_t cb = d.cb;
          // decode (a CPU slice on the device)
          prims::SliceValues v;
          ASSERT_EQ(dev.decode(cs.data(), cb, n, dto.get(), &v), codec::Status::Ok);
          ASSERT_EQ(v.dense, dto.get());
          ASSERT_EQ(from_device(dto.get(), n * es), x);
          // reduce: incoming x + local y, fused (decode-and-add) and not,
          // into another buffer and in place into the local values
          std::vector<uint8_t> want = y;
          add_into(t, want, x.data(), n);
          for (bool fused : {false, true}) {
            SCOPED_TRACE(fused ? "fused decode-and-add" : "decode, then add");
            dev.set_fused(fused);
            to_device(dy.get(), y);
            ASSERT_EQ(dev.reduce(cs.data(), cb, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v),
                      codec::Status::Ok);
            ASSERT_EQ(from_device(dto.get(), n * es), want);
            ASSERT_EQ(dev.reduce(cs.data(), cb, n, prims::SliceValues::of_dense(dy.get()), dy.get(), &v),
                      codec::Status::Ok);
            ASSERT_EQ(from_device(dy.get(), n * es), want);
            // Corrupt planes (a byte of the payload flipped) are an error on both paths, never a quiet sum.
            if (cb > codec::kHeaderBytes + 8) {
              std::vector<uint8_t> bad(cs.begin(), cs.begin() + long(cb));
              codec::SliceHeader hb;
              ASSERT_EQ(codec::read_header(bad.data(), cb, &hb), codec::Status::Ok);
              if (hb.codec == codec::Codec::Block) {
                bad[codec::kHeaderBytes] = 0xFF;  // first width nibbles: 15 and an escape that is not there
                std::vector<uint8_t> cpu_out(n * es);
                size_t used = 0;
                const codec::Status cpu_s = codec::decode_slice(bad.data(), cb, t, uint32_t(n), cpu_out.data(), &used);
                const codec::Status dev_s =
                    dev.reduce(bad.data(), cb, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v);
                EXPECT_EQ(dev_s == codec::Status::Ok, cpu_s == codec::Status::Ok && used == cb);
              }
            }
          }
          // A byte after the slice is corruption, as on the CPU; a truncated slice fails.
          cs[cb] = 0;
          ASSERT_EQ(dev.decode(cs.data(), cb + 1, n, dto.get(), &v), codec::Status::Corrupt);
          ASSERT_NE(dev.decode(cs.data(), cb - 1, n, dto.get(), &v), codec::Status::Ok);
          ASSERT_NE(dev.decode(cs.data(), cb, n + 1, dto.get(), &v), codec::Status::Ok);  // wrong count
        }
      }
    }
  }
}

// A lossy max / min's REDUCE step directly: a CPU slice of codes x (Block
// with each predictor, Raw where that is smaller) reduced with local codes y
// on the device by their max / min, fused (the v3 tile decoder's reducing
// output) and not, into another buffer and in place: prims::reduce_fn's bits.
TEST(CudaPrims, CodedMaxMinSliceCallsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (ElemType t : {ElemType::I32, ElemType::I64}) {
    for (Predictor pred : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
      for (RedOp op : {RedOp::Max, RedOp::Min}) {
        SCOPED_TRACE(testing::Message() << "esize " << codec::elem_size(t) << " predictor " << int(pred) << " op "
                                        << int(op));
        const size_t es = codec::elem_size(t);
        const size_t slice = prims::slice_elems_for(kSlot, es);
        const Wire w{WireMode::Coded, t, pred, op};
        const prims::PrimsArgs a = make_args(w, 0);
        std::vector<uint64_t> scr((slice * es + 7) / 8);
        prims::SliceCodec cpu(t, w.mode, a.enc, a.reduce, false, kSlot, reinterpret_cast<uint8_t*>(scr.data()));
        prims::DeviceSliceCodec dev(t, w.mode, a.enc, false, kSlot, slice);
        dev.set_value_reduction(op);
        for (size_t n : {size_t(1), size_t(33), slice / 2 + 1, slice}) {
          SCOPED_TRACE(testing::Message() << "n " << n);
          const auto x = make_codes(t, n, 5 * n + 3), y = make_codes(t, n, 9 * n + 4);
          OnDevice d(x, y);
          ASSERT_NO_FATAL_FAILURE(d.encode(cpu, dev, n, kSlot));
          std::vector<uint8_t> want(n * es);
          prims::SliceValues v;
          ASSERT_EQ(cpu.reduce(d.cs.data(), d.cb, n, prims::SliceValues::of_dense(y.data()), want.data(), &v),
                    codec::Status::Ok);
          std::vector<uint8_t> direct = y;
          a.reduce(direct.data(), x.data(), direct.data(), n);
          ASSERT_EQ(want, direct);  // the CPU's REDUCE step is the max / min of the codes
          for (bool fused : {false, true}) {
            SCOPED_TRACE(fused ? "fused decode-and-reduce" : "decode, then reduce");
            dev.set_fused(fused);
            to_device(d.y.get(), y);
            ASSERT_EQ(dev.reduce(d.cs.data(), d.cb, n, prims::SliceValues::of_dense(d.y.get()), d.to.get(), &v),
                      codec::Status::Ok);
            ASSERT_EQ(from_device(d.to.get(), n * es), want);
            ASSERT_EQ(dev.reduce(d.cs.data(), d.cb, n, prims::SliceValues::of_dense(d.y.get()), d.y.get(), &v),
                      codec::Status::Ok);
            ASSERT_EQ(from_device(d.y.get(), n * es), want);
          }
        }
      }
    }
  }
}

// Coded floats' three calls directly (lossless F32 / BF16 / F16, and U8's
// bytes), against SliceCodec with the same options (allow_rans = false): the
// same slices (FloatHuff, Raw for noise), CPU slices decoded on the device,
// reductions with the CPU's bits, and the decoder's errors: damaged payloads
// as the CPU decoder, bytes after the slice, a wrong count, a FloatExp slice
// (bytes: a Rans one; what a peer coding with rANS would send: the device
// cannot decode it).
TEST(CudaPrims, FloatSliceCallsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (ElemType t : {ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::U8}) {
    for (RedOp op : {RedOp::Sum, RedOp::Max}) {
      SCOPED_TRACE(testing::Message() << "type " << int(t) << " op " << int(op));
      const size_t es = codec::elem_size(t);
      const size_t slot = 16384, slice = prims::slice_elems_for(slot, es);
      Wire w{WireMode::Coded, t, Predictor::None, op};
      const prims::PrimsArgs a = make_args(w, 0);
      std::vector<uint64_t> scr((slice * es + 7) / 8);
      prims::SliceCodec cpu(t, w.mode, a.enc, a.reduce, false, slot, reinterpret_cast<uint8_t*>(scr.data()));
      prims::DeviceSliceCodec dev(t, w.mode, a.enc, false, slot, slice);
      dev.set_value_reduction(op);
      for (size_t n : {size_t(1), size_t(300), slice - 1, slice}) {
        for (int kind : {0, 1}) {  // 0: gradients (FloatHuff); 1: values of every magnitude (either)
          SCOPED_TRACE(testing::Message() << "n " << n << " kind " << kind);
          auto x = make_floats(t, n, 5 * n + 1), y = make_floats(t, n, 7 * n + 2);
          if (kind == 1) x = make_values(t, RedOp::Prod, n, 11 * n + 3);
          OnDevice d(x, y);
          ASSERT_NO_FATAL_FAILURE(d.encode(cpu, dev, n, slot));
          const DevBuf &dy = d.y, &dto = d.to;
          std::vector<uint8_t>& cs = d.cs;
          const size_t cb = d.cb;
          codec::SliceHeader h;
          ASSERT_EQ(codec::read_header(cs.data(), cb, &h), codec::Status::Ok);
          // (300 bytes code to more than 300 with FloatHuff's 136-byte index)
          if (n == 1 || (kind == 0 && n >= (t == ElemType::U8 ? 1000u : 300u))) {
            EXPECT_EQ(h.codec, n == 1 ? codec::Codec::Raw : codec::Codec::FloatHuff);
          }
          prims::SliceValues v;
          ASSERT_EQ(dev.decode(cs.data(), cb, n, dto.get(), &v), codec::Status::Ok);
          ASSERT_EQ(from_device(dto.get(), n * es), x);
          // incoming x op local y, into another buffer and in place
          std::vector<uint8_t> want(n * es);
          a.reduce(want.data(), x.data(), y.data(), n);
          ASSERT_EQ(dev.reduce(cs.data(), cb, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v),
                    codec::Status::Ok);
          ASSERT_EQ(from_device(dto.get(), n * es), want);
          ASSERT_EQ(dev.reduce(cs.data(), cb, n, prims::SliceValues::of_dense(dy.get()), dy.get(), &v),
                    codec::Status::Ok);
          ASSERT_EQ(from_device(dy.get(), n * es), want);
          // Damaged payloads: the CPU decoder's verdict (a FloatHuff slice's
          // index and words are checked; a Raw slice's bytes are any values).
          std::mt19937 g{uint32_t(n)};
          for (int rep = 0; rep < 12 && cb > codec::kHeaderBytes; ++rep) {
            std::vector<uint8_t> bad(cs.begin(), cs.begin() + long(cb));
            const size_t at = codec::kHeaderBytes + g() % (cb - codec::kHeaderBytes);
            bad[at] = uint8_t(bad[at] ^ (1u + g() % 255u));
            std::vector<uint8_t> cpu_out(n * es);
            size_t used = 0;
            const codec::Status cpu_s = codec::decode_slice(bad.data(), cb, t, uint32_t(n), cpu_out.data(), &used);
            const codec::Status dev_s = dev.decode(bad.data(), cb, n, dto.get(), &v);
            EXPECT_EQ(dev_s, cpu_s) << "byte " << at;
            if (cpu_s == codec::Status::Ok) {
              EXPECT_EQ(from_device(dto.get(), n * es), cpu_out);
            }
          }
          cs[cb] = 0;
          EXPECT_EQ(dev.decode(cs.data(), cb + 1, n, dto.get(), &v), codec::Status::Corrupt);
          EXPECT_NE(dev.decode(cs.data(), cb - 1, n, dto.get(), &v), codec::Status::Ok);
          EXPECT_NE(dev.decode(cs.data(), cb, n + 1, dto.get(), &v), codec::Status::Ok);  // wrong count
          // A FloatExp slice: not what a device decodes.
          if (kind == 0 && n >= 300) {
            codec::EncodeOptions fe;
            fe.choice = t == ElemType::U8 ? codec::EncodeOptions::Choice::Rans : codec::EncodeOptions::Choice::FloatExp;
            codec::SliceInfo info;
            std::vector<uint8_t> fs(slot);
            ASSERT_EQ(codec::encode_slice(x.data(), t, uint32_t(n), fs.data(), slot, fe, &info), codec::Status::Ok);
            ASSERT_EQ(info.codec, t == ElemType::U8 ? codec::Codec::Rans : codec::Codec::FloatExp);
            EXPECT_EQ(dev.decode(fs.data(), info.bytes, n, dto.get(), &v), codec::Status::Unsupported);
            EXPECT_EQ(dev.reduce(fs.data(), info.bytes, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v),
                      codec::Status::Unsupported);
          }
        }
      }
    }
  }
  // Lossless floats: F32 / BF16 / F16 with the selector or FloatHuff (not FloatExp, Sparse, rANS), no integer sums.
  const size_t slice = prims::slice_elems_for(kSlot, 8);
  codec::EncodeOptions o;
  EXPECT_THROW(prims::DeviceSliceCodec(ElemType::F64, WireMode::Coded, o, false, kSlot, slice), InvalidArgument);
  for (auto choice : {codec::EncodeOptions::Choice::FloatExp, codec::EncodeOptions::Choice::Sparse,
                      codec::EncodeOptions::Choice::Rans}) {
    o.choice = choice;
    EXPECT_THROW(prims::DeviceSliceCodec(ElemType::F32, WireMode::Coded, o, false, kSlot, slice), InvalidArgument);
  }
  o.choice = codec::EncodeOptions::Choice::FloatHuff;
  EXPECT_THROW(prims::DeviceSliceCodec(ElemType::F32, WireMode::Coded, o, true, kSlot, slice), InvalidArgument);
  prims::DeviceSliceCodec ok(ElemType::BF16, WireMode::Coded, o, false, kSlot, slice);
  EXPECT_NO_THROW(ok.set_value_reduction(RedOp::Prod));
}

/// The device selector's options (choice Auto, no Rans) for codes of type t,
/// and the CPU's slice codec with them: what a device slice must match.
struct SelectingCpu {
  explicit SelectingCpu(ElemType t)
      : w{WireMode::Coded, t, Predictor::Delta1},
        a(selecting(make_args(w, 0))),
        es(codec::elem_size(t)),
        slice(prims::slice_elems_for(kSlot, es)),
        scr((slice * es + 7) / 8),
        codec(t, w.mode, a.enc, a.reduce, true, kSlot, reinterpret_cast<uint8_t*>(scr.data())) {}
  static prims::PrimsArgs selecting(prims::PrimsArgs a) {
    a.enc.choice = codec::EncodeOptions::Choice::Auto;
    a.enc.allow_rans = false;
    return a;
  }
  Wire w;
  prims::PrimsArgs a;
  size_t es, slice;
  std::vector<uint64_t> scr;
  prims::SliceCodec codec;
};

// A registered slot (prims::HostPins: what core::DeviceWork does with the
// transport's slots) takes the slice from the device (copy_sized_async): the
// same bytes and size as the unregistered slot's copy and the CPU encoder's,
// nothing written past the slice, and the selector's every choice (Block,
// Sparse for mostly-zero codes, Raw for noise) on both paths.
TEST(CudaPrims, EncodeIntoRegisteredSlotsMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (ElemType t : {ElemType::I32, ElemType::I64}) {
    SelectingCpu sel(t);
    // Two slots in one registered range, at an offset that is not 16-byte aligned too (the kernel's byte path).
    // Page-aligned, as the transports' slot memory is.
    const size_t ring_bytes = (3 * kSlot + 4096 + 4095) / 4096 * 4096;  // (aligned_alloc: a multiple of 4096)
    std::unique_ptr<uint8_t, decltype(&std::free)> ring_mem(static_cast<uint8_t*>(std::aligned_alloc(4096, ring_bytes)),
                                                            &std::free);
    ASSERT_NE(ring_mem, nullptr);
    uint8_t* ring = ring_mem.get();
    prims::HostPins pins(true);
    ASSERT_TRUE(pins.pin(ring, ring_bytes));
    EXPECT_EQ(pins.pinned_bytes(), ring_bytes);
    prims::DeviceSliceCodec plain(t, sel.w.mode, sel.a.enc, true, kSlot, sel.slice);
    prims::DeviceSliceCodec mapped(t, sel.w.mode, sel.a.enc, true, kSlot, sel.slice, nullptr, &pins);
    for (size_t n : {size_t(1), size_t(33), sel.slice / 3, sel.slice}) {
      for (int kind = 0; kind < 3; ++kind) {  // smooth codes, mostly zeros, noise
        SCOPED_TRACE(testing::Message() << "esize " << sel.es << " n " << n << " kind " << kind);
        std::vector<uint8_t> x = make_codes(t, n, 11 * n + uint64_t(kind));
        if (kind == 1) {
          for (size_t i = 0; i < n; ++i) {
            if (i % 37 != 0) std::memset(x.data() + i * sel.es, 0, sel.es);
          }
        } else if (kind == 2) {
          std::mt19937_64 g(n);
          for (auto& b : x) b = uint8_t(g());
        }
        DevBuf dx(n * sel.es);
        to_device(dx.get(), x);
        std::vector<uint8_t> cs(kSlot), ps(kSlot, 0xCC);
        size_t cb = 0, pb = 0, mb = 0;
        ASSERT_EQ(sel.codec.encode(prims::SliceValues::of_dense(x.data()), n, cs.data(), &cb), codec::Status::Ok);
        ASSERT_EQ(plain.encode(prims::SliceValues::of_dense(dx.get()), n, ps.data(), &pb), codec::Status::Ok);
        for (size_t off : {size_t(0), kSlot + 7}) {
          std::memset(ring, 0xAB, ring_bytes);
          uint8_t* slot = ring + off;
          ASSERT_NE(pins.device_pointer(slot, kSlot), nullptr);  // the codec writes it from the device
          ASSERT_EQ(mapped.encode(prims::SliceValues::of_dense(dx.get()), n, slot, &mb), codec::Status::Ok);
          ASSERT_EQ(mb, cb);
          ASSERT_EQ(pb, cb);
          EXPECT_EQ(0, std::memcmp(slot, cs.data(), cb)) << "registered slot differs from the CPU's slice";
          EXPECT_EQ(0, std::memcmp(ps.data(), cs.data(), cb)) << "copied slot differs from the CPU's slice";
          for (size_t i = 0; i < ring_bytes; ++i) {
            if (i < off || i >= off + mb) {
              ASSERT_EQ(ring[i], 0xAB) << "byte " << i << " outside the slice written";
            }
          }
        }
      }
    }
  }
}

// reduce_encode (a ring step that reduces and sends): the sum and the slice
// of reduce() then encode(), with one sync (fused step) or two calls, into a
// registered slot and an ordinary one; a slice that does not decode is the
// reduction's failure, and nothing is reported as encoded.
TEST(CudaPrims, ReduceEncodeMatchesReduceThenEncode) {
  SKIP_WITHOUT_GPU();
  for (ElemType t : {ElemType::I32, ElemType::I64}) {
    SelectingCpu sel(t);
    // Two slots, page-aligned (aligned_alloc's size: a multiple of the alignment).
    static_assert(2 * kSlot <= 4096, "two slots in one page");
    std::unique_ptr<uint8_t, decltype(&std::free)> ring_mem(static_cast<uint8_t*>(std::aligned_alloc(4096, 4096)),
                                                            &std::free);
    ASSERT_NE(ring_mem, nullptr);
    prims::HostPins pins(true);
    ASSERT_TRUE(pins.pin(ring_mem.get(), 2 * kSlot));
    for (bool mapped : {false, true}) {
      for (bool fused_step : {true, false}) {
        SCOPED_TRACE(testing::Message() << "esize " << sel.es << (mapped ? " registered slot" : " ordinary slot")
                                        << (fused_step ? ", one sync" : ", reduce then encode"));
        prims::DeviceSliceCodec dev(t, sel.w.mode, sel.a.enc, true, kSlot, sel.slice, nullptr,
                                    mapped ? &pins : nullptr);
        dev.set_fused_step(fused_step);
        EXPECT_EQ(dev.fused_step(), fused_step);
        std::vector<uint8_t> plain(kSlot);
        uint8_t* slot = mapped ? ring_mem.get() + 64 : plain.data();
        for (size_t n : {size_t(1), size_t(40), sel.slice}) {
          SCOPED_TRACE(testing::Message() << "n " << n);
          const auto x = make_codes(t, n, 5 * n + 1), y = make_codes(t, n, 7 * n + 2);
          std::vector<uint8_t> sum = y;
          add_into(t, sum, x.data(), n);
          std::vector<uint8_t> in(kSlot), want(kSlot);
          size_t ib = 0, wb = 0;
          ASSERT_EQ(sel.codec.encode(prims::SliceValues::of_dense(x.data()), n, in.data(), &ib), codec::Status::Ok);
          ASSERT_EQ(sel.codec.encode(prims::SliceValues::of_dense(sum.data()), n, want.data(), &wb), codec::Status::Ok);
          DevBuf dy(n * sel.es), dto(n * sel.es);
          to_device(dy.get(), y);
          prims::SliceValues v;
          size_t bytes = 0;
          codec::Status rs = codec::Status::Unsupported, enc = codec::Status::Unsupported;
          dev.reduce_encode(in.data(), ib, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v, slot, &bytes, &rs,
                            &enc);
          ASSERT_EQ(rs, codec::Status::Ok);
          ASSERT_EQ(enc, codec::Status::Ok);
          EXPECT_EQ(v.dense, dto.get());
          EXPECT_EQ(from_device(dto.get(), n * sel.es), sum);
          ASSERT_EQ(bytes, wb);
          EXPECT_EQ(0, std::memcmp(slot, want.data(), wb)) << "the sum's slice differs from the CPU's";
          // A slice one byte short does not decode: the reduction's failure, nothing encoded.
          dev.reduce_encode(in.data(), ib - 1, n, prims::SliceValues::of_dense(dy.get()), dto.get(), &v, slot, &bytes,
                            &rs, &enc);
          EXPECT_NE(rs, codec::Status::Ok);
          EXPECT_EQ(bytes, 0u);
          EXPECT_NE(enc, codec::Status::Ok);
        }
      }
    }
  }
}

// HostPins: ranges are looked up inside what was registered; a range is tried
// once; disabled (NCCLZ_DEVICE_PIN=0) registers nothing and maps nothing.
TEST(CudaPrims, HostPinsLookUpRegisteredRanges) {
  SKIP_WITHOUT_GPU();
  std::vector<uint8_t> mem(1 << 16), other(4096);
  prims::HostPins pins(true);
  EXPECT_FALSE(pins.pin(nullptr, 10));
  EXPECT_FALSE(pins.pin(mem.data(), 0));
  EXPECT_EQ(pins.device_pointer(mem.data(), 1), nullptr);
  ASSERT_TRUE(pins.pin(mem.data(), mem.size()));
  ASSERT_TRUE(pins.pin(mem.data() + 100, 200));  // inside: no second registration
  EXPECT_EQ(pins.pinned_bytes(), mem.size());
  uint8_t* d0 = static_cast<uint8_t*>(pins.device_pointer(mem.data(), mem.size()));
  ASSERT_NE(d0, nullptr);
  EXPECT_EQ(pins.device_pointer(mem.data() + 1000, 24), d0 + 1000);
  EXPECT_EQ(pins.device_pointer(mem.data() + 1000, mem.size()), nullptr);  // runs past the range
  EXPECT_EQ(pins.device_pointer(other.data(), 16), nullptr);
  // A second owner of the same memory (another communicator of this process)
  // finds it registered: page-locked, but not mapped for it.
  {
    prims::HostPins second(true);
    EXPECT_FALSE(second.pin(mem.data(), mem.size()));
    EXPECT_EQ(second.device_pointer(mem.data(), 16), nullptr);
    EXPECT_EQ(second.pinned_bytes(), 0u);
  }
  EXPECT_EQ(pins.device_pointer(mem.data(), 16), d0);  // the first owner's registration stays
  prims::HostPins off(false);
  EXPECT_FALSE(off.pin(other.data(), other.size()));
  EXPECT_EQ(off.device_pointer(other.data(), 16), nullptr);
  EXPECT_EQ(off.pinned_bytes(), 0u);
}

TEST(CudaPrims, UnsupportedSlicesAndOptions) {
  SKIP_WITHOUT_GPU();
  const size_t slice = prims::slice_elems_for(kSlot, 4);
  Wire w{WireMode::Coded, ElemType::I32, Predictor::None};
  prims::PrimsArgs a = make_args(w, 0);
  // Coded mode codes with the device selector or a forced Block predictor
  // (not rANS, FloatExp, or Block without a predictor), integer codes, room for a slice.
  for (auto choice : {codec::EncodeOptions::Choice::Rans, codec::EncodeOptions::Choice::FloatExp,
                      codec::EncodeOptions::Choice::Block}) {
    codec::EncodeOptions o;
    o.choice = choice;
    EXPECT_THROW(prims::DeviceSliceCodec(ElemType::I32, WireMode::Coded, o, true, kSlot, slice), InvalidArgument);
  }
  EXPECT_THROW(prims::DeviceSliceCodec(ElemType::F32, WireMode::Coded, a.enc, true, kSlot, slice), InvalidArgument);
  EXPECT_THROW(prims::DeviceSliceCodec(ElemType::I32, WireMode::Coded, a.enc, true, kSlot, slice + 1), InvalidArgument);
  EXPECT_THROW(prims::DeviceSliceCodec(ElemType::F32, WireMode::Raw, a.enc, true, kSlot, slice), InvalidArgument);
  // A Sparse slice (a CPU rank with the selector free may send one) decodes
  // on the device too (the device Sparse decoder): the CPU's values.
  prims::DeviceSliceCodec dev(ElemType::I32, WireMode::Coded, a.enc, true, kSlot, slice);
  std::vector<int32_t> x(slice, 0);
  x[3] = 5;
  std::vector<uint8_t> buf(kSlot);
  codec::EncodeOptions sp;
  sp.choice = codec::EncodeOptions::Choice::Sparse;
  sp.predictor = 0;
  codec::SliceInfo info;
  ASSERT_EQ(codec::encode_slice(x.data(), ElemType::I32, uint32_t(slice), buf.data(), buf.size(), sp, &info),
            codec::Status::Ok);
  Fifo f(kSlot, 2);
  FakeSend s(&f);
  FakeRecv r(&f);
  std::memcpy(s.acquire(Clock::now() + std::chrono::seconds(1)), buf.data(), info.bytes);
  s.post(info.bytes);
  DevBuf out(slice * 4), scr(slice * 4);
  prims::ChannelStats st;
  a.device = &dev;
  prims::Prims p(nullptr, &r, a, &st, scr.get());
  p.recv(out.get(), slice);
  const std::vector<uint8_t> got = from_device(out.get(), slice * 4);
  EXPECT_EQ(std::memcmp(got.data(), x.data(), slice * 4), 0);
  // A device rank takes no Stage, and its codec's wire mode.
  struct NoStage : prims::Stage {
    void* prepare(const void* src, size_t) override { return const_cast<void*>(src); }
    void finish(const void*, const void*, size_t) override {}
  } stage;
  prims::PrimsArgs b = a;
  b.stage = &stage;
  EXPECT_THROW(prims::Prims(nullptr, &r, b, &st, scr.get()), InvalidArgument);
  b = a;
  b.mode = WireMode::Raw;
  EXPECT_THROW(prims::Prims(nullptr, &r, b, &st, scr.get()), InvalidArgument);
}

// A CUDA failure inside the codec (here a copy to a null device pointer,
// cudaErrorInvalidValue) is reported by the step as a device failure with the
// CUDA error, not as a corrupt slice from the peer.
TEST(CudaPrims, CudaFailuresAreNotBlamedOnThePeer) {
  SKIP_WITHOUT_GPU();
  const size_t n = 10;
  Wire w{WireMode::Raw, ElemType::I32};
  prims::PrimsArgs a = make_args(w, 3);
  prims::DeviceSliceCodec dev(ElemType::I32, WireMode::Raw, a.enc, true, kSlot, prims::slice_elems_for(kSlot, 4));
  a.device = &dev;
  Fifo f(kSlot, 2);
  FakeSend s(&f);
  FakeRecv r(&f);
  std::memset(s.acquire(Clock::now() + std::chrono::seconds(1)), 7, n * 4);
  s.post(n * 4);
  prims::ChannelStats st;
  prims::Prims p(nullptr, &r, a, &st, nullptr);
  try {
    p.recv(nullptr, n);
    FAIL() << "no error";
  } catch (const CorruptData& e) {
    FAIL() << "blamed on the peer: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
    EXPECT_NE(what.find("device slice codec failed"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA error"), std::string::npos) << what;
  }
  EXPECT_NE(dev.cuda_error(), 0);
  // Taken as the thread's last error: a later launch check of this thread
  // (another codec's, another test's) does not report it as its own.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The next call starts clean.
  prims::SliceValues v;
  DevBuf to(n * 4);
  std::vector<uint8_t> slot(n * 4, 1);
  EXPECT_EQ(dev.decode(slot.data(), slot.size(), n, to.get(), &v), codec::Status::Ok);
  EXPECT_EQ(dev.cuda_error(), 0);
  EXPECT_EQ(dev.device_error(), "");
}

}  // namespace

#endif  // NCCLZ_WITH_CUDA

// The first element where got and want differ, with both operands' bits
// (little-endian hex); "" where they are equal. Two NaNs are equal: which
// payload an operation on NaNs returns is left open by IEEE 754, and x86 and
// GPUs choose differently (cuda_codec.hpp, reduce_values_async).
std::string first_difference(ElemType t, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                             const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t es = codec::elem_size(t);
  auto hex = [es](const std::vector<uint8_t>& v, size_t i) {
    uint64_t x = 0;
    std::memcpy(&x, v.data() + i * es, es);
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(x));
    return std::string(buf);
  };
  for (size_t i = 0; i * es < want.size(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0 &&
        !(is_nan_at(t, got, i) && is_nan_at(t, want, i))) {
      return "element " + std::to_string(i) + ": " + hex(a, i) + " op " + hex(b, i) + " = " + hex(got, i) + ", host " +
             hex(want, i);
    }
  }
  return "";
}

// The device's element-wise reduction (an uncompressed or lossless device
// rank's REDUCE step) gives the host's bits for every wire type and operator:
// random values beside the special ones (signed zeros, infinities, NaNs with
// payloads, subnormals, sums that overflow), out of place and in place.
TEST(CudaPrims, ReduceValuesMatchesHostBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  const size_t n = 4099;
  auto special32 = [](size_t i) -> uint32_t {
    static const uint32_t v[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00001u,
                                 0xFFA00003u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x3F800000u};
    return v[i % 10];
  };
  auto special16 = [](size_t i) -> uint16_t {
    static const uint16_t v[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E01, 0x7F81, 0x0001, 0x83FF, 0x7BFF, 0x7F7F};
    return v[i % 10];
  };
  for (ElemType t :
       {ElemType::F32, ElemType::F64, ElemType::F16, ElemType::BF16, ElemType::I32, ElemType::I64, ElemType::U8}) {
    const size_t es = codec::elem_size(t);
    std::vector<uint8_t> a(n * es), b(n * es);
    for (size_t i = 0; i < n; ++i) {
      for (std::vector<uint8_t>* v : {&a, &b}) {
        uint64_t bits = rng();
        const bool special = (rng() % 5) == 0;
        if (t == ElemType::F32) {
          float f = float(std::ldexp(double(int64_t(bits % 2000001) - 1000000), int(bits >> 58) - 40));
          uint32_t u;
          std::memcpy(&u, &f, 4);
          if (special) u = special32(bits >> 8);
          std::memcpy(v->data() + i * 4, &u, 4);
        } else if (t == ElemType::F64) {
          double d = std::ldexp(double(int64_t(bits % 2000001) - 1000000), int(bits >> 54) - 600);
          if (special) d = double(float(std::ldexp(1.0, -149))) * double(bits % 3);
          if (special && (bits & 1)) d = -std::numeric_limits<double>::infinity();
          std::memcpy(v->data() + i * 8, &d, 8);
        } else if (es == 2) {
          uint16_t h = uint16_t(bits);
          if (special) h = special16(bits >> 8);
          std::memcpy(v->data() + i * 2, &h, 2);
        } else {
          std::memcpy(v->data() + i * es, &bits, es);
        }
      }
    }
    auto da = to_device(a), db = to_device(b);
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod}) {
      std::vector<uint8_t> want(n * es);
      prims::reduce_fn(t, op)(want.data(), a.data(), b.data(), n);
      DevBuf out(n * es);
      const auto dop = cuda::ReduceOp(uint8_t(op));
      ASSERT_EQ(cuda::reduce_values_async(nullptr, t, dop, out.get(), da->get(), db->get(), n), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(first_difference(t, from_device(out.get(), n * es), want, a, b), "")
          << "type " << int(t) << " op " << int(op);
      // In place (out = the incoming operand), as the receive loops reduce.
      auto inplace = to_device(a);
      ASSERT_EQ(cuda::reduce_values_async(nullptr, t, dop, inplace->get(), inplace->get(), db->get(), n), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(first_difference(t, from_device(inplace->get(), n * es), want, a, b), "")
          << "in place, type " << int(t) << " op " << int(op);
    }
  }
  EXPECT_LT(cuda::reduce_values_async(nullptr, ElemType::F32, cuda::ReduceOp(9), nullptr, nullptr, nullptr, 1), 0);
}
