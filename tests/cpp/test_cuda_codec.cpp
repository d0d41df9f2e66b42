// Device codec (cpp/include/ncclz/cuda_codec.hpp, cuda/*.cu) against the CPU
// codec: same quantizer codes and outliers, byte-identical slices, slices
// decoding across host and device, statuses for corrupt input.
//
// Built with CUDA (NCCLZ_WITH_CUDA; tests/cpp/CMakeLists.txt), and as host code
// in the CPU emulator (tools/cuda_emu: the kernels' logic, every CPU CI run).
// In a CUDA build every test skips when no CUDA device is visible (fails
// under NCCLZ_REQUIRE_GPU=1), so there these tests prove nothing about the
// kernels without a GPU: tools/gpu_session.sh runs them on one.
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_support.hpp"

using namespace ncclz::codec;
namespace nc = ncclz::cuda;

namespace {

using ncclz_test::code_type;
using ncclz_test::DevBuf;
using ncclz_test::quick;
using ncclz_test::to_device;

// The device codec of most tests: on the legacy default stream (LAUNCH_OK
// synchronises it), created on first use and never destroyed.
nc::DeviceCodec& dev() {
  static nc::DeviceCodec* c = new nc::DeviceCodec(nullptr);
  return *c;
}

enum class Dist { Zeros, Constant, SmallGauss, WideGauss, HugeEscapes, FullRange, Extremes, Smooth };
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::Zeros: return "zeros";
    case Dist::Constant: return "constant";
    case Dist::SmallGauss: return "gauss(3)";
    case Dist::WideGauss: return "gauss(1e4)";
    case Dist::HugeEscapes: return "huge";
    case Dist::FullRange: return "fullrange";
    case Dist::Extremes: return "extremes";
    case Dist::Smooth: return "smooth";
  }
  return "?";
}
const Dist kAllDists[] = {Dist::Zeros,       Dist::Constant,  Dist::SmallGauss, Dist::WideGauss,
                          Dist::HugeEscapes, Dist::FullRange, Dist::Extremes,   Dist::Smooth};

template <class Code>
std::vector<Code> make_codes(size_t n, Dist d, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Code> v(n);
  std::normal_distribution<double> g(0, 1);
  using Lim = std::numeric_limits<Code>;
  for (size_t i = 0; i < n; ++i) {
    switch (d) {
      case Dist::Zeros: v[i] = 0; break;
      case Dist::Constant: v[i] = Code(-12345); break;
      case Dist::SmallGauss: v[i] = Code(std::llround(3 * g(rng))); break;
      case Dist::WideGauss: v[i] = Code(std::llround(1e4 * g(rng))); break;
      case Dist::HugeEscapes:  // mostly narrow, some blocks with widths >= 15 (escapes)
        v[i] = (i / 32) % 3 == 1 ? Code(std::llround(double(Lim::max() / 4) * std::tanh(g(rng))))
                                 : Code(std::llround(5 * g(rng)));
        break;
      case Dist::FullRange: v[i] = Code(rng()); break;  // forces the Raw fallback
      case Dist::Extremes: {
        const Code opts[] = {Lim::min(), Lim::max(), Code(0), Code(-1), Code(1), Code(Lim::min() + 1)};
        v[i] = opts[rng() % 6];
        break;
      }
      case Dist::Smooth:
        v[i] = Code(std::llround(1000 * std::sin(0.01 * double(i)) + 300 * std::cos(0.003 * double(i % 97))));
        break;
    }
  }
  return v;
}

std::vector<uint8_t> cpu_encode(const void* q, ElemType t, uint32_t count, int pred, uint32_t row, uint32_t plane,
                                size_t cap, Status* st) {
  EncodeOptions opt;
  opt.choice = EncodeOptions::Choice::Block;
  opt.predictor = pred;
  opt.row = row;
  opt.plane = plane;
  std::vector<uint8_t> out(cap);
  SliceInfo info;
  *st = encode_slice(q, t, count, out.data(), cap, opt, &info);
  out.resize(*st == Status::Ok ? info.bytes : 0);
  return out;
}

std::string hex_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return "first difference at byte " + std::to_string(i) + ": cpu " + std::to_string(a[i]) + " gpu " +
             std::to_string(b[i]) + " (sizes " + std::to_string(a.size()) + ", " + std::to_string(b.size()) + ")";
  return a.size() == b.size() ? "equal" : "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

// Encodes q on the device as one slice; checks it equals the CPU's bytes, that
// the device decodes it, and that the CPU decodes the device's bytes.
template <class Code>
void check_one_slice(const std::vector<Code>& q, int pred, uint32_t row, uint32_t plane, size_t cap) {
  const ElemType t = code_type<Code>();
  const uint32_t n = uint32_t(q.size());
  Status cst;
  const std::vector<uint8_t> cpu = cpu_encode(q.data(), t, n, pred, row, plane, cap, &cst);

  auto dq = to_device(q);
  DevBuf dst(cap), dsize(8), dstat(4);
  LAUNCH_OK(dev().encode_slice_async(dq->get(), t, n, Predictor(pred), row, plane, dst.get<uint8_t>(), cap,
                                     dsize.get<uint64_t>(), dstat.get<int>()));
  const int gst = dstat.download<int>(1)[0];
  const uint64_t gsize = dsize.download<uint64_t>(1)[0];
  ASSERT_EQ(gst, int(cst)) << "device encode status";
  if (cst != Status::Ok) {
    EXPECT_EQ(gsize, 0u);
    return;
  }
  ASSERT_EQ(gsize, cpu.size());
  const std::vector<uint8_t> gpu = dst.download<uint8_t>(gsize);
  ASSERT_TRUE(gpu == cpu) << hex_diff(cpu, gpu);

  // Device decode of those bytes, from a buffer of exactly the slice's size.
  auto dsrc = to_device(gpu);
  DevBuf dout(q.size() * sizeof(Code));
  LAUNCH_OK(dev().decode_slice_async(dsrc->get<uint8_t>(), gpu.size(), t, n, dout.get(), dstat.get<int>()));
  ASSERT_EQ(dstat.download<int>(1)[0], int(Status::Ok));
  ASSERT_TRUE(dout.download<Code>(q.size()) == q) << "device decode differs";

  // CPU decode of the device's bytes.
  std::vector<Code> back(q.size());
  ASSERT_EQ(decode_slice(gpu.data(), gpu.size(), t, n, back.data()), Status::Ok);
  ASSERT_TRUE(back == q);
}

const size_t kSizes[] = {1, 31, 32, 33, 63, 65, 1000, 4097, 100003, size_t(1) << 18};

template <class Code>
void slices_match_cpu(bool large) {
  uint32_t seed = 1;
  for (size_t n : kSizes) {
    if ((n > 5000) != large) continue;
    if (quick() && n != 1 && n != 33 && n != 1000 && n != 100003) continue;
    for (Dist d : kAllDists) {
      if (quick() && d != Dist::SmallGauss && d != Dist::HugeEscapes && d != Dist::Extremes && d != Dist::FullRange)
        continue;
      const auto q = make_codes<Code>(n, d, seed++);
      for (int pred = 0; pred < kNumPredictors; ++pred) {
        // (row, plane) pairs: a regular grid, an odd one, and one that makes
        // Lorenzo not apply (the CPU then uses predictor None).
        const uint32_t geo[][2] = {{16, 256}, {7, 35}, {1, 0}};
        for (const auto& g : geo) {
          if (pred < 3 && g[0] != 16) continue;  // Delta/None ignore row and plane
          SCOPED_TRACE(testing::Message() << "n=" << n << " dist=" << dist_name(d) << " pred=" << pred
                                          << " row=" << g[0] << " plane=" << g[1]);
          check_one_slice(q, pred, g[0], g[1], max_slice_bytes(code_type<Code>(), n));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace

TEST(CudaCodec, DeviceCountIsSane) {
  EXPECT_TRUE(nc::built_with_cuda());
  EXPECT_GE(nc::device_count(), 0);
}

// The two examples of docs/FORMAT.md ("Block", "Example"), encoded on the
// device: the smallest checks, to run first when something is wrong.
TEST(CudaCodec, FormatExamplesOnDevice) {
  SKIP_WITHOUT_GPU();
  std::vector<int32_t> r(34, 0);
  r[0] = 3;
  r[1] = -1;
  r[31] = 5;
  const std::vector<uint8_t> want = {0x03, 0x02, 0, 0, 0, 0x03, 0, 0, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0x80};
  auto dq = to_device(r);
  DevBuf dst(max_slice_bytes(ElemType::I32, 34)), dsize(8), dstat(4);
  LAUNCH_OK(dev().encode_slice_async(dq->get(), ElemType::I32, 34, Predictor::None, 0, 0, dst.get<uint8_t>(),
                                     max_slice_bytes(ElemType::I32, 34), dsize.get<uint64_t>(), dstat.get<int>()));
  ASSERT_EQ(dstat.download<int>(1)[0], int(Status::Ok));
  ASSERT_EQ(dsize.download<uint64_t>(1)[0], kHeaderBytes + want.size());
  const auto got = dst.download<uint8_t>(kHeaderBytes + want.size());
  EXPECT_EQ(got[4], uint8_t(Codec::Block));
  EXPECT_EQ(load_u32(got.data() + 8), 34u);
  EXPECT_EQ(load_u32(got.data() + 12), uint32_t(want.size()));
  EXPECT_TRUE(std::vector<uint8_t>(got.begin() + kHeaderBytes, got.end()) == want);

  // Widths 16, 2, 20, 0, 14: nibbles 2F 0F 0E, escape bytes 10 14, 229 bytes.
  std::vector<int32_t> e(160, 0);
  e[0] = 1 << 15;
  e[32] = 3;
  e[64] = -(1 << 19);
  e[128] = (1 << 13) + 1;
  auto de = to_device(e);
  DevBuf dst2(max_slice_bytes(ElemType::I32, 160));
  LAUNCH_OK(dev().encode_slice_async(de->get(), ElemType::I32, 160, Predictor::None, 0, 0, dst2.get<uint8_t>(),
                                     max_slice_bytes(ElemType::I32, 160), dsize.get<uint64_t>(), dstat.get<int>()));
  ASSERT_EQ(dstat.download<int>(1)[0], int(Status::Ok));
  ASSERT_EQ(dsize.download<uint64_t>(1)[0], kHeaderBytes + 229);
  const auto got2 = dst2.download<uint8_t>(kHeaderBytes + 5);
  const std::vector<uint8_t> head = {0x2F, 0x0F, 0x0E, 0x10, 0x14};
  EXPECT_TRUE(std::vector<uint8_t>(got2.begin() + kHeaderBytes, got2.end()) == head);
}

TEST(CudaCodec, SlicesMatchCpuSmallI32) {
  SKIP_WITHOUT_GPU();
  slices_match_cpu<int32_t>(false);
}
TEST(CudaCodec, SlicesMatchCpuSmallI64) {
  SKIP_WITHOUT_GPU();
  slices_match_cpu<int64_t>(false);
}
TEST(CudaCodec, SlicesMatchCpuLargeI32) {
  SKIP_WITHOUT_GPU();
  slices_match_cpu<int32_t>(true);
}
TEST(CudaCodec, SlicesMatchCpuLargeI64) {
  SKIP_WITHOUT_GPU();
  slices_match_cpu<int64_t>(true);
}

TEST(CudaCodec, EmptySliceAndSmallCapacity) {
  SKIP_WITHOUT_GPU();
  const std::vector<int32_t> none;
  check_one_slice(none, 1, 0, 0, kHeaderBytes);
  const auto q = make_codes<int32_t>(1000, Dist::FullRange, 9);
  // Room for neither Block nor Raw: NoSpace on both sides.
  check_one_slice(q, 0, 0, 0, 500);
  check_one_slice(q, 0, 0, 0, 10);
  // Gaussian: Block fits in less than raw.
  const auto g = make_codes<int32_t>(1000, Dist::SmallGauss, 10);
  check_one_slice(g, 1, 0, 0, 1500);
}

// Many slices in one call, each equal to the CPU's slice of that range.
template <class Code>
void batch_matches_cpu(size_t n, uint32_t L, int pred, uint32_t row, uint32_t plane, Dist d) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " L=" << L << " pred=" << pred << " dist=" << dist_name(d));
  const ElemType t = code_type<Code>();
  const auto q = make_codes<Code>(n, d, uint32_t(n + L));
  const size_t S = (n + L - 1) / L, slot = nc::slice_slot_bytes(t, L);
  auto dq = to_device(q);
  DevBuf dst(S * slot), dsizes(S * 8), dstat(S * 4), dout(n * sizeof(Code));
  LAUNCH_OK(dev().encode_slices_async(dq->get(), t, n, L, Predictor(pred), row, plane, dst.get<uint8_t>(), slot,
                                      dsizes.get<uint64_t>(), dstat.get<int>()));
  const auto sizes = dsizes.download<uint64_t>(S);
  const auto stats = dstat.download<int>(S);
  const auto bytes = dst.download<uint8_t>(S * slot);
  for (size_t k = 0; k < S; ++k) {
    const uint32_t cnt = uint32_t(std::min<size_t>(L, n - k * L));
    Status cst;
    const auto cpu = cpu_encode(q.data() + k * L, t, cnt, pred, row, plane, slot, &cst);
    ASSERT_EQ(stats[k], int(cst)) << "slice " << k;
    ASSERT_EQ(sizes[k], cpu.size()) << "slice " << k;
    const std::vector<uint8_t> gpu(bytes.begin() + k * slot, bytes.begin() + k * slot + sizes[k]);
    ASSERT_TRUE(gpu == cpu) << "slice " << k << ": " << hex_diff(cpu, gpu);
  }
  // Decode the batch on the device, with exact lengths.
  auto dlens = to_device(sizes);
  LAUNCH_OK(dev().decode_slices_async(dst.get<uint8_t>(), slot, dlens->get<uint64_t>(), n, L, t, dout.get(),
                                      dstat.get<int>()));
  const auto dstats = dstat.download<int>(S);
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(dstats[k], int(Status::Ok)) << "slice " << k;
  ASSERT_TRUE(dout.download<Code>(n) == q);
}

TEST(CudaCodec, BatchesMatchCpu) {
  SKIP_WITHOUT_GPU();
  batch_matches_cpu<int32_t>(1000003, 65536 + 5, 1, 0, 0, Dist::WideGauss);
  batch_matches_cpu<int32_t>(1 << 20, 1 << 18, 0, 0, 0, Dist::SmallGauss);
  batch_matches_cpu<int32_t>(300000, 4096, 3, 64, 0, Dist::Smooth);
  batch_matches_cpu<int32_t>(300000, 4096 + 100, 4, 10, 100, Dist::Smooth);
  batch_matches_cpu<int64_t>(500001, 77777, 2, 0, 0, Dist::HugeEscapes);
  batch_matches_cpu<int64_t>(100000, 1000, 0, 0, 0, Dist::FullRange);
  batch_matches_cpu<int32_t>(12345, 1, 1, 0, 0, Dist::Extremes);  // one code per slice
  batch_matches_cpu<int32_t>(40000, 33, 2, 0, 0, Dist::WideGauss);
}

// Slices the CPU selector chose (Raw, Block with any predictor, Rans, Sparse)
// decode on the device, or report Unsupported for Rans (no device decoder
// for it; Sparse: select_kernels.cu).
TEST(CudaCodec, CpuAutoSlicesDecodeOnDevice) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 100;
  for (size_t n : {size_t(1), size_t(33), size_t(1000), size_t(100003)}) {
    for (Dist d : kAllDists) {
      const auto q = make_codes<int32_t>(n, d, seed++);
      EncodeOptions opt;
      opt.row = 50;
      opt.plane = 500;
      std::vector<uint8_t> buf(max_slice_bytes(ElemType::I32, n));
      SliceInfo info;
      ASSERT_EQ(encode_slice(q.data(), ElemType::I32, uint32_t(n), buf.data(), buf.size(), opt, &info), Status::Ok);
      buf.resize(info.bytes);
      auto dsrc = to_device(buf);
      DevBuf dout(n * 4), dstat(4);
      LAUNCH_OK(dev().decode_slice_async(dsrc->get<uint8_t>(), buf.size(), ElemType::I32, uint32_t(n), dout.get(),
                                         dstat.get<int>()));
      const int st = dstat.download<int>(1)[0];
      SCOPED_TRACE(testing::Message() << "n=" << n << " dist=" << dist_name(d) << " codec=" << int(info.codec)
                                      << " pred=" << int(info.predictor));
      if (info.codec == Codec::Rans) {
        EXPECT_EQ(st, int(Status::Unsupported));
      } else {
        ASSERT_EQ(st, int(Status::Ok));
        ASSERT_TRUE(dout.download<int32_t>(n) == q);
      }
    }
  }
}

// Truncated, cut, flipped and retyped slices: the device gives the CPU
// decoder's status (never a crash; compute-sanitizer checks the reads), and
// where both accept a mutated slice they decode it to the same codes.
TEST(CudaCodec, CorruptSlicesGiveTheCpuStatus) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  int mutations = 0;
  for (Dist d : {Dist::SmallGauss, Dist::HugeEscapes, Dist::Extremes, Dist::FullRange, Dist::Zeros}) {
    for (int pred : {0, 1, 3}) {
      const uint32_t n = 1000;
      const auto q = make_codes<int32_t>(n, d, uint32_t(pred) * 10 + uint32_t(d));
      Status cst;
      const auto good = cpu_encode(q.data(), ElemType::I32, n, pred, 40, 0, max_slice_bytes(ElemType::I32, n), &cst);
      ASSERT_EQ(cst, Status::Ok);
      const int trials = quick() ? 12 : 60;
      for (int trial = 0; trial < trials; ++trial) {
        std::vector<uint8_t> bad = good;
        size_t len = bad.size();
        ElemType t = ElemType::I32;
        uint32_t count = n;
        switch (trial % 6) {
          case 0: len = rng() % bad.size(); break;                                                  // truncated
          case 1: bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8)); break;                     // one bit
          case 2: bad[kHeaderBytes + rng() % (bad.size() - kHeaderBytes)] = uint8_t(rng()); break;  // payload byte
          case 3: bad[rng() % kHeaderBytes] = uint8_t(rng()); break;                                // header byte
          case 4: count = n - 1 - rng() % 3; break;                                                 // count mismatch
          case 5: t = ElemType::I64; break;                                                         // type mismatch
        }
        bad.resize(len);
        const size_t esize = t == ElemType::I32 ? 4 : 8;
        std::vector<uint8_t> cpu_out(size_t(count) * esize);
        Status want = decode_slice(bad.data(), len, t, count, cpu_out.data());
        // A header mutated into a valid Rans header: the device has no
        // decoder for it and says Unsupported whatever the payload (Sparse:
        // the CPU's status; the fused decode to values: Unsupported, below).
        SliceHeader h;
        const bool sparse_header = read_header(bad.data(), len, &h) == Status::Ok && h.elem_type == t &&
                                   h.count == count && h.codec == Codec::Sparse;
        if (read_header(bad.data(), len, &h) == Status::Ok && h.elem_type == t && h.count == count &&
            h.codec == Codec::Rans)
          want = Status::Unsupported;
        auto dsrc = to_device(bad);
        DevBuf dout(size_t(count) * esize), dstat(4);
        LAUNCH_OK(dev().decode_slice_async(dsrc->get<uint8_t>(), len, t, count, dout.get(), dstat.get<int>()));
        const int got = dstat.download<int>(1)[0];
        ASSERT_EQ(got, int(want)) << "dist=" << dist_name(d) << " pred=" << pred << " trial=" << trial
                                  << " cpu: " << status_string(want);
        if (want == Status::Ok) {
          ASSERT_TRUE(dout.download<uint8_t>(cpu_out.size()) == cpu_out) << "trial " << trial;
        }
        // The fused decode to values: the same status (but a valid Block
        // header with a Lorenzo predictor is Unsupported there whatever the
        // payload, as Rans is), and the CPU's dequantized codes.
        DevBuf dval(size_t(count) * 8);
        LAUNCH_OK(dev().decode_dequantize_slices_async(dsrc->get<uint8_t>(), len, nullptr, count, count ? count : 1, t,
                                                       0.25, dval.get(), ElemType::F64, dstat.get<int>()));
        const bool lorenzo_block = read_header(bad.data(), len, &h) == Status::Ok && h.elem_type == t &&
                                   h.count == count && h.codec == Codec::Block &&
                                   (h.predictor == Predictor::Lorenzo2D || h.predictor == Predictor::Lorenzo3D);
        const Status fused_want = lorenzo_block || sparse_header ? Status::Unsupported : want;
        ASSERT_EQ(dstat.download<int>(1)[0], int(fused_want)) << "fused, trial " << trial;
        if (fused_want == Status::Ok) {
          std::vector<double> wantv(count);
          if (t == ElemType::I32)
            dequantize<double, int32_t>(reinterpret_cast<const int32_t*>(cpu_out.data()), count,
                                        QuantGrid::from_bound(0.25), wantv.data());
          else
            dequantize<double, int64_t>(reinterpret_cast<const int64_t*>(cpu_out.data()), count,
                                        QuantGrid::from_bound(0.25), wantv.data());
          ASSERT_TRUE(dval.download<double>(count) == wantv) << "fused, trial " << trial;
        }
        ++mutations;
      }
    }
  }
  EXPECT_GE(mutations, quick() ? 180 : 900);
}

// The quantizer: same codes and outliers as the CPU, every element within the
// bound after dequantization, device dequantization equal to the CPU's.
template <class T, class Code>
void quantizer_matches_cpu(size_t n, double eb, int64_t limit, uint32_t seed, bool specials) {
  SCOPED_TRACE(testing::Message() << "T size " << sizeof(T) << " code size " << sizeof(Code) << " n=" << n
                                  << " eb=" << eb << " limit=" << limit << " seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) {
    double v = 10 * g(rng);
    if (i % 997 == 5) v *= 1e7;  // over a small limit
    x[i] = from_double<T>(v);
  }
  if (specials && n > 10) {
    x[1] = from_double<T>(std::numeric_limits<double>::quiet_NaN());
    x[3] = from_double<T>(std::numeric_limits<double>::infinity());
    x[n - 1] = from_double<T>(-std::numeric_limits<double>::infinity());
    x[7] = from_double<T>(eb * 2 * 3.5);  // exactly between two grid points
  }
  const QuantGrid grid = QuantGrid::from_bound(eb);
  std::vector<Code> cq(n);
  std::vector<uint64_t> cout;
  quantize<T, Code>(x.data(), n, grid, limit, cq.data(), &cout);

  auto dx = to_device(x);
  DevBuf dq(n * sizeof(Code)), dcount(8), didx(n * 8 + 8);
  LAUNCH_OK(dev().quantize_async(dx->get(), elem_type_of<T>(), n, eb, limit, dq.get(), code_type<Code>(),
                                 dcount.get<uint64_t>(), didx.get<uint64_t>(), n));
  const auto gq = dq.download<Code>(n);
  const uint64_t gcount = dcount.download<uint64_t>(1)[0];
  ASSERT_EQ(gcount, cout.size());
  ASSERT_TRUE(didx.download<uint64_t>(gcount) == cout) << "outlier indices differ";
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(gq[i], cq[i]) << "code " << i;

  // Dequantize on the device; equal to the CPU's, and within the bound.
  DevBuf dy(n * sizeof(T));
  LAUNCH_OK(dev().dequantize_async(dq.get(), code_type<Code>(), n, eb, dy.get(), elem_type_of<T>()));
  std::vector<T> cy(n);
  dequantize<T, Code>(cq.data(), n, grid, cy.data());
  const auto gy = dy.download<T>(n);
  ASSERT_EQ(0, std::memcmp(gy.data(), cy.data(), n * sizeof(T))) << "dequantized values differ";
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    if (o < cout.size() && cout[o] == i) {
      ++o;
      continue;
    }
    ASSERT_LE(std::fabs(to_double(x[i]) - to_double(gy[i])), eb) << "element " << i;
  }
  // Outliers written back exactly.
  LAUNCH_OK(dev().scatter_outliers_async(dx->get(), elem_type_of<T>(), didx.get<uint64_t>(), dcount.get<uint64_t>(), n,
                                         dy.get()));
  const auto gz = dy.download<T>(n);
  for (uint64_t i : cout) ASSERT_EQ(0, std::memcmp(&gz[i], &x[i], sizeof(T))) << "outlier " << i;
}

template <class T>
void quantizer_all(uint32_t seed) {
  for (size_t n : {size_t(1), size_t(31), size_t(2048), size_t(2049), size_t(100003), size_t(1) << 18}) {
    for (double eb : {1e-3, 0.37, 1e-6}) {
      quantizer_matches_cpu<T, int32_t>(n, eb, default_code_limit<int32_t>(), seed++, true);
      quantizer_matches_cpu<T, int64_t>(n, eb, default_code_limit<int64_t>(), seed++, true);
      quantizer_matches_cpu<T, int32_t>(n, eb, 1000, seed++, false);  // many over the limit
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// The plane checks (block_check_planes) on every predictor, with every kernel
// version: a block whose top plane is empty, and a negative zero in a padding
// lane of the last block, are Corrupt on the CPU and on the device (v2 checks
// Delta1/Delta2 slices in other kernels than the rest; v3 in its tile kernel,
// before the look-back of Delta slices).
TEST(CudaCodec, PlaneChecksOnEveryPredictorAndKernelVersion) {
  SKIP_WITHOUT_GPU();
  const uint32_t n = 1000;  // 32 blocks (16 nibble bytes), the last one with 8 lanes
  const auto q = make_codes<int32_t>(n, Dist::SmallGauss, 77);
  const int before = dev().kernels();
  for (int version : {1, 2, 3}) {
    dev().set_kernels(version);
    ASSERT_EQ(dev().kernels(), version);
    for (int pred : {0, 1, 2, 3}) {
      Status cst;
      const auto good = cpu_encode(q.data(), ElemType::I32, n, pred, 40, 0, max_slice_bytes(ElemType::I32, n), &cst);
      ASSERT_EQ(cst, Status::Ok);
      ASSERT_EQ(good[4], uint8_t(Codec::Block)) << "pred " << pred;
      const uint8_t* nib = good.data() + kHeaderBytes;
      // Where block b's words start: nibbles, no escapes (small widths), words before b.
      std::vector<size_t> start(33);
      start[0] = kHeaderBytes + 16;
      for (int b = 0; b < 32; ++b) {
        const unsigned w = (nib[b / 2] >> (4 * (b % 2))) & 15u;
        ASSERT_LT(w, 15u);
        start[size_t(b) + 1] = start[size_t(b)] + (w ? 4 * (w + 1) : 0);
      }
      ASSERT_EQ(start[32], good.size());
      for (int kind = 0; kind < 2; ++kind) {
        SCOPED_TRACE(testing::Message() << "kernels v" << version << " pred " << pred << " kind " << kind);
        std::vector<uint8_t> bad = good;
        // kind 0: the top plane of block 5 (or the first non-empty one) emptied;
        // kind 1: the sign of lane 31 of the last block (a padding lane).
        int b = kind == 0 ? 5 : 31;
        while (start[size_t(b) + 1] == start[size_t(b)]) b = (b + 1) % 32;
        const size_t words = (start[size_t(b) + 1] - start[size_t(b)]) / 4;
        if (kind == 0)
          std::memset(&bad[start[size_t(b)] + 4 * (words - 1)], 0, 4);
        else
          bad[start[size_t(b)] + 3] |= 0x80;
        std::vector<int32_t> cpu_out(n);
        ASSERT_EQ(decode_slice(bad.data(), bad.size(), ElemType::I32, n, cpu_out.data()), Status::Corrupt);
        auto dsrc = to_device(bad);
        DevBuf dout(n * 4), dstat(4);
        LAUNCH_OK(
            dev().decode_slice_async(dsrc->get<uint8_t>(), bad.size(), ElemType::I32, n, dout.get(), dstat.get<int>()));
        EXPECT_EQ(dstat.download<int>(1)[0], int(Status::Corrupt));
      }
    }
  }
  dev().set_kernels(before);
}

// The fused quantize + encode (quantize_encode_slices_async) against the CPU:
// its slices, sizes and statuses are the CPU's encode_slice of the CPU
// quantizer's codes, its outlier count the CPU's; and the fused decode
// (decode_dequantize_slices_async) of those slices gives the CPU's
// dequantized codes, bit for bit.
template <class T, class Code>
void fused_matches_cpu(size_t n, uint32_t L, int pred, double eb, int64_t limit, bool specials, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "T size " << sizeof(T) << " code size " << sizeof(Code) << " n=" << n << " L=" << L
                                  << " pred=" << pred << " eb=" << eb << " limit=" << limit
                                  << " specials=" << specials);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) {
    // Gaussian, or a smooth field (Delta predictors shrink it), some far out.
    double v = seed % 2 ? 10 * g(rng) : 50 * std::sin(0.001 * double(i)) + 0.01 * g(rng);
    if (i % 997 == 5) v *= 1e7;
    x[i] = from_double<T>(v);
  }
  if (specials && n > 10) {
    x[1] = from_double<T>(std::numeric_limits<double>::quiet_NaN());
    x[3] = from_double<T>(std::numeric_limits<double>::infinity());
    x[n - 1] = from_double<T>(-std::numeric_limits<double>::infinity());
  }
  const ElemType t = elem_type_of<T>(), ct = code_type<Code>();
  std::vector<Code> cq(n);
  std::vector<uint64_t> outl;
  quantize<T, Code>(x.data(), n, QuantGrid::from_bound(eb), limit, cq.data(), &outl);
  const size_t S = (n + L - 1) / L, slot = nc::slice_slot_bytes(ct, L);
  auto dx = to_device(x);
  DevBuf dst(S * slot), dsizes(S * 8), dstat(S * 4), dcount(8, 0x5A);
  LAUNCH_OK(dev().quantize_encode_slices_async(dx->get(), t, n, eb, limit, ct, L, Predictor(pred), 0, 0,
                                               dst.get<uint8_t>(), slot, dsizes.get<uint64_t>(), dstat.get<int>(),
                                               dcount.get<uint64_t>()));
  ASSERT_EQ(dcount.download<uint64_t>(1)[0], outl.size()) << "outlier count";
  if (specials && n > 10) {
    ASSERT_GE(outl.size(), 3u);
  }
  const auto sizes = dsizes.download<uint64_t>(S);
  const auto stats = dstat.download<int>(S);
  const auto bytes = dst.download<uint8_t>(S * slot);
  for (size_t k = 0; k < S; ++k) {
    const uint32_t cnt = uint32_t(std::min<size_t>(L, n - k * L));
    Status cst;
    const auto cpu = cpu_encode(cq.data() + k * L, ct, cnt, pred, 0, 0, slot, &cst);
    ASSERT_EQ(stats[k], int(cst)) << "slice " << k;
    ASSERT_EQ(sizes[k], cpu.size()) << "slice " << k;
    const std::vector<uint8_t> gpu(bytes.begin() + k * slot, bytes.begin() + k * slot + sizes[k]);
    ASSERT_TRUE(gpu == cpu) << "slice " << k << ": " << hex_diff(cpu, gpu);
  }
  // Back to values, in one call (exact lengths).
  DevBuf dy(n * sizeof(T));
  LAUNCH_OK(dev().decode_dequantize_slices_async(dst.get<uint8_t>(), slot, dsizes.get<uint64_t>(), n, L, ct, eb,
                                                 dy.get(), t, dstat.get<int>()));
  for (int st : dstat.download<int>(S)) ASSERT_EQ(st, int(Status::Ok));
  std::vector<T> want(n);
  dequantize<T, Code>(cq.data(), n, QuantGrid::from_bound(eb), want.data());
  const auto got = dy.download<T>(n);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(T))) << "dequantized values differ";
}

template <class T>
void fused_all(uint32_t seed) {
  struct Case {
    size_t n;
    uint32_t L;
  };
  // One slice of one code, one tile, tile edges, several tiles per slice and
  // many slices with a short last one.
  const Case cases[] = {{1, 1}, {33, 33}, {2048, 2048}, {2049, 4096}, {100003, 5000}, {size_t(1) << 18, 65536}};
  for (const Case& c : cases) {
    if (quick() && c.n == (size_t(1) << 18)) continue;
    for (int pred = 0; pred < 3; ++pred) {
      fused_matches_cpu<T, int32_t>(c.n, c.L, pred, 1e-3, default_code_limit<int32_t>(), false, seed++);
      fused_matches_cpu<T, int64_t>(c.n, c.L, pred, 0.37, default_code_limit<int64_t>(), true, seed++);
      fused_matches_cpu<T, int32_t>(c.n, c.L, pred, 0.01, 1000, c.n > 5000, seed++);  // outliers over the limit
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CudaCodec, FusedQuantizeEncodeF32) {
  SKIP_WITHOUT_GPU();
  fused_all<float>(1);
}
TEST(CudaCodec, FusedQuantizeEncodeF64) {
  SKIP_WITHOUT_GPU();
  fused_all<double>(100);
}
TEST(CudaCodec, FusedQuantizeEncodeF16) {
  SKIP_WITHOUT_GPU();
  fused_all<F16>(200);
}
TEST(CudaCodec, FusedQuantizeEncodeBf16) {
  SKIP_WITHOUT_GPU();
  fused_all<Bf16>(300);
}

// The fused decode of slices the CPU wrote (every forced predictor, Raw
// fallbacks): the CPU decoder's codes, dequantized; Lorenzo slices are
// Unsupported there, and decode with decode_slices_async.
TEST(CudaCodec, FusedDecodeOfCpuSlices) {
  SKIP_WITHOUT_GPU();
  const uint32_t n = 10000;
  const double eb = 0.5;
  uint32_t seed = 500;
  for (Dist d : {Dist::SmallGauss, Dist::WideGauss, Dist::Smooth, Dist::FullRange, Dist::Zeros}) {
    const auto q = make_codes<int64_t>(n, d, seed++);
    for (int pred = 0; pred < kNumPredictors; ++pred) {
      SCOPED_TRACE(testing::Message() << "dist=" << dist_name(d) << " pred=" << pred);
      Status cst;
      const auto slice =
          cpu_encode(q.data(), ElemType::I64, n, pred, 100, 1000, max_slice_bytes(ElemType::I64, n), &cst);
      ASSERT_EQ(cst, Status::Ok);
      auto dsrc = to_device(slice);
      DevBuf dy(n * 4), dstat(4);
      LAUNCH_OK(dev().decode_dequantize_slices_async(dsrc->get<uint8_t>(), slice.size(), nullptr, n, n, ElemType::I64,
                                                     eb, dy.get(), ElemType::F32, dstat.get<int>()));
      SliceHeader h;
      ASSERT_EQ(read_header(slice.data(), slice.size(), &h), Status::Ok);
      if (h.codec == Codec::Block && (h.predictor == Predictor::Lorenzo2D || h.predictor == Predictor::Lorenzo3D)) {
        EXPECT_EQ(dstat.download<int>(1)[0], int(Status::Unsupported));
        continue;
      }
      ASSERT_EQ(dstat.download<int>(1)[0], int(Status::Ok));
      std::vector<float> want(n);
      dequantize<float, int64_t>(q.data(), n, QuantGrid::from_bound(eb), want.data());
      ASSERT_EQ(0, std::memcmp(dy.download<float>(n).data(), want.data(), n * 4));
    }
  }
}

TEST(CudaCodec, FusedCallsRejectBadArguments) {
  // Refused on the host, before anything is enqueued (no device needed).
  uint64_t counter = 0;  // never written: every call below is refused first
  EXPECT_EQ(dev().quantize_encode_slices_async(nullptr, ElemType::F32, 10, 0.1, 100, ElemType::I32, 10,
                                               Predictor::Lorenzo2D, 5, 0, nullptr, 64, nullptr, nullptr, &counter),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().quantize_encode_slices_async(nullptr, ElemType::I32, 10, 0.1, 100, ElemType::I32, 10, Predictor::None,
                                               0, 0, nullptr, 64, nullptr, nullptr, &counter),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().quantize_encode_slices_async(nullptr, ElemType::F32, 10, 0.1, 100, ElemType::F32, 10, Predictor::None,
                                               0, 0, nullptr, 64, nullptr, nullptr, &counter),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().quantize_encode_slices_async(nullptr, ElemType::F32, 10, 0.1, 100, ElemType::I32, 10, Predictor::None,
                                               0, 0, nullptr, 64, nullptr, nullptr, nullptr),
            -int(Status::BadHeader));  // null counter
  EXPECT_EQ(dev().quantize_encode_slices_async(nullptr, ElemType::F32, 10, -1.0, 100, ElemType::I32, 10,
                                               Predictor::None, 0, 0, nullptr, 64, nullptr, nullptr, &counter),
            -int(Status::BadHeader));
  EXPECT_EQ(dev().decode_dequantize_slices_async(nullptr, 64, nullptr, 10, 10, ElemType::I32, 0.1, nullptr,
                                                 ElemType::I32, nullptr),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().decode_dequantize_slices_async(nullptr, 64, nullptr, 10, 10, ElemType::F32, 0.1, nullptr,
                                                 ElemType::F32, nullptr),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().decode_dequantize_slices_async(nullptr, 64, nullptr, 10, 0, ElemType::I32, 0.1, nullptr,
                                                 ElemType::F32, nullptr),
            -int(Status::BadHeader));
}

TEST(CudaCodec, QuantizerF32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  quantizer_all<float>(1);
}
TEST(CudaCodec, QuantizerF64MatchesCpu) {
  SKIP_WITHOUT_GPU();
  quantizer_all<double>(1000);
}
TEST(CudaCodec, QuantizerF16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  quantizer_all<F16>(2000);
}
TEST(CudaCodec, QuantizerBf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  quantizer_all<Bf16>(3000);
}

// reserve(n, L) sizes the scratch for every call on up to n codes in slices
// of L: the quantizer, the Block encode and decode of each kernel version,
// the selecting encode (the device path's slice codecs reserve once and must
// not allocate per call).
TEST(CudaCodec, ReserveCoversEveryCall) {
  SKIP_WITHOUT_GPU();
  const size_t n = 20000;
  const uint32_t L = 4096;
  for (int v : {1, 2, 3}) {
    for (ElemType t : {ElemType::I32, ElemType::I64}) {
      SCOPED_TRACE(testing::Message() << "kernels v" << v << (t == ElemType::I64 ? " int64" : " int32"));
      nc::DeviceCodec own;
      own.set_kernels(v);
      ASSERT_EQ(own.reserve(n, L), 0);
      const size_t cap = own.scratch_capacity();
      EXPECT_GT(cap, 0u);
      const size_t es = t == ElemType::I64 ? 8 : 4, slot = max_slice_bytes(t, L), S = (n + L - 1) / L;
      DevBuf dx(n * 4), dq(n * es), dst(S * slot), dsizes(S * 8), dstat(S * 4), dcount(8), dout(n * es);
      CUDA_OK(cudaMemset(dx.get(), 0, n * 4));
      ASSERT_EQ(own.quantize_async(dx.get(), ElemType::F32, n, 1e-3, 1 << 20, dq.get(), t, dcount.get<uint64_t>(),
                                   nullptr, 0),
                0);
      ASSERT_EQ(own.encode_slices_async(dq.get(), t, n, L, Predictor::Delta1, 0, 0, dst.get<uint8_t>(), slot,
                                        dsizes.get<uint64_t>(), dstat.get<int>()),
                0);
      ASSERT_EQ(own.decode_slices_async(dst.get<uint8_t>(), slot, dsizes.get<uint64_t>(), n, L, t, dout.get(),
                                        dstat.get<int>()),
                0);
      EncodeOptions o;
      ASSERT_EQ(own.encode_slices_select_async(dq.get(), t, n, L, o, dst.get<uint8_t>(), slot, dsizes.get<uint64_t>(),
                                               dstat.get<int>()),
                0);
      ASSERT_EQ(own.synchronize(), 0);
      EXPECT_EQ(own.scratch_capacity(), cap) << "a call after reserve() grew the scratch";
    }
  }
}

// One codec, many calls of different sizes, types and predictors in turn:
// its scratch is grown and reused (what a call leaves in it never reaches the
// next call's slices), and the codec's own stream orders the work.
TEST(CudaCodec, OneCodecManyCalls) {
  SKIP_WITHOUT_GPU();
  nc::DeviceCodec own;  // its own stream
  ASSERT_EQ(own.status(), 0);
  ASSERT_EQ(own.reserve(5000, 1000), 0);
  struct Call {
    size_t n;
    uint32_t L;
    int pred;
    bool wide;
    Dist d;
  };
  const Call calls[] = {{4000, 1000, 1, false, Dist::HugeEscapes},
                        {100, 7, 0, true, Dist::Extremes},
                        {20000, 20000, 2, false, Dist::WideGauss},
                        {33, 33, 0, false, Dist::Zeros},
                        {4000, 1000, 3, true, Dist::Smooth}};
  uint32_t seed = 900;
  for (const Call& c : calls) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " L=" << c.L << " pred=" << c.pred << " wide=" << c.wide);
    const ElemType t = c.wide ? ElemType::I64 : ElemType::I32;
    const size_t es = c.wide ? 8 : 4;
    std::vector<uint8_t> q(c.n * es);
    if (c.wide) {
      const auto v = make_codes<int64_t>(c.n, c.d, seed++);
      std::memcpy(q.data(), v.data(), q.size());
    } else {
      const auto v = make_codes<int32_t>(c.n, c.d, seed++);
      std::memcpy(q.data(), v.data(), q.size());
    }
    const size_t S = (c.n + c.L - 1) / c.L, slot = nc::slice_slot_bytes(t, c.L);
    auto dq = to_device(q);
    DevBuf dst(S * slot), dsizes(S * 8), dstat(S * 4), dout(q.size());
    ASSERT_EQ(own.encode_slices_async(dq->get(), t, c.n, c.L, Predictor(c.pred), 16, 256, dst.get<uint8_t>(), slot,
                                      dsizes.get<uint64_t>(), dstat.get<int>()),
              0);
    ASSERT_EQ(own.decode_slices_async(dst.get<uint8_t>(), slot, dsizes.get<uint64_t>(), c.n, c.L, t, dout.get(),
                                      dstat.get<int>()),
              0);
    CUDA_OK(cudaError_t(own.synchronize()));
    const auto sizes = dsizes.download<uint64_t>(S);
    const auto bytes = dst.download<uint8_t>(S * slot);
    for (size_t k = 0; k < S; ++k) {
      const uint32_t cnt = uint32_t(std::min<size_t>(c.L, c.n - k * c.L));
      Status cst;
      const auto cpu = cpu_encode(q.data() + k * c.L * es, t, cnt, c.pred, 16, 256, slot, &cst);
      ASSERT_EQ(cst, Status::Ok);
      const std::vector<uint8_t> gpu(bytes.begin() + k * slot, bytes.begin() + k * slot + sizes[k]);
      ASSERT_TRUE(gpu == cpu) << "slice " << k << ": " << hex_diff(cpu, gpu);
    }
    for (int st : dstat.download<int>(S)) ASSERT_EQ(st, int(Status::Ok));
    ASSERT_TRUE(dout.download<uint8_t>(q.size()) == q);
  }
}

TEST(CudaCodec, HostRejectsBadArguments) {
  // No device needed: these are refused before anything is enqueued.
  EXPECT_EQ(
      dev().encode_slices_async(nullptr, ElemType::F32, 10, 10, Predictor::None, 0, 0, nullptr, 64, nullptr, nullptr),
      -int(Status::Unsupported));
  EXPECT_EQ(
      dev().encode_slices_async(nullptr, ElemType::I32, 10, 0, Predictor::None, 0, 0, nullptr, 64, nullptr, nullptr),
      -int(Status::BadHeader));
  EXPECT_EQ(dev().decode_slices_async(nullptr, 64, nullptr, 10, 10, ElemType::U8, nullptr, nullptr),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().quantize_async(nullptr, ElemType::I32, 10, 0.1, 100, nullptr, ElemType::I32, nullptr, nullptr, 0),
            -int(Status::BadHeader));  // null counter
  EXPECT_EQ(dev().dequantize_async(nullptr, ElemType::I32, 10, -1.0, nullptr, ElemType::F32), -int(Status::BadHeader));
}

#endif  // NCCLZ_WITH_CUDA
