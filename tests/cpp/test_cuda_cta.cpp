// The CTA slice coder (cuda/cta_slice.cuh) in its batch form
// (DeviceCodec::set_kernels(4), cuda/cta_codec.cu): slices byte-identical to
// the CPU's encode_slice (Block, predictor forced) and to the v3 kernels', the
// same decode statuses for corrupt slices, and the fused float calls under
// this setting. The whole CudaCodec suite also runs with
// NCCLZ_DEVICE_CODEC=cta in the emulator's ci set (tools/cuda_emu/run.sh).
// Built with CUDA and in the CPU emulator, like test_cuda_codec.cpp.
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

// Codes of a few kinds: narrow Gaussian, wide Gaussian, escapes (widths >= 15
// in every third block), full range (the Raw fallback), a smooth field.
template <class Code>
std::vector<Code> codes(size_t n, int kind, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<Code> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: v[i] = Code(std::llround(3 * g(rng))); break;
      case 1: v[i] = Code(std::llround(1e4 * g(rng))); break;
      case 2:
        v[i] = (i / 32) % 3 == 1 ? Code(std::llround(double(std::numeric_limits<Code>::max() / 4) * std::tanh(g(rng))))
                                 : Code(std::llround(5 * g(rng)));
        break;
      case 3: v[i] = Code(rng()); break;
      default: v[i] = Code(std::llround(1000 * std::sin(0.01 * double(i))));
    }
  }
  return v;
}
constexpr int kKinds = 5;

struct Batch {
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> sizes;
  std::vector<int> status;
};

// A batch encoded by `codec` with kernels v.
Batch encode_with(nc::DeviceCodec& codec, int v, const void* dq, ElemType t, size_t n, uint32_t L, Predictor p,
                  uint32_t row, size_t slot) {
  codec.set_kernels(v);
  const size_t S = (n + L - 1) / L;
  DevBuf dst(S * slot, 0), sizes(S * 8), status(S * 4);
  Batch b;
  const int rc = codec.encode_slices_async(dq, t, n, L, p, row, 0, dst.get<uint8_t>(), slot, sizes.get<uint64_t>(),
                                           status.get<int>());
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(codec.synchronize(), 0);
  b.bytes = dst.download<uint8_t>(S * slot);
  b.sizes = sizes.download<uint64_t>(S);
  b.status = status.download<int>(S);
  return b;
}

// Every slice of an n-code batch in slices of L: the CTA coder's bytes equal
// the CPU's encode_slice and v3's, and decode back (CTA decoder) to the codes.
template <class Code>
void batch_matches(size_t n, uint32_t L, int kind, Predictor p, uint32_t row, size_t slot = 0) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " L=" << L << " kind=" << kind << " pred=" << int(p)
                                  << " code bytes=" << sizeof(Code));
  const ElemType t = code_type<Code>();
  if (slot == 0) slot = max_slice_bytes(t, L);
  const auto q = codes<Code>(n, kind, uint32_t(n + L + kind));
  auto dq = to_device(q);
  nc::DeviceCodec codec(nullptr);
  const Batch cta = encode_with(codec, 4, dq->get(), t, n, L, p, row, slot);
  const Batch v3 = encode_with(codec, 3, dq->get(), t, n, L, p, row, slot);
  const size_t S = (n + L - 1) / L;
  EncodeOptions opt;
  opt.choice = EncodeOptions::Choice::Block;
  opt.predictor = int(p);
  opt.row = row;
  for (size_t k = 0; k < S; ++k) {
    const uint32_t cnt = uint32_t(std::min<size_t>(L, n - k * L));
    std::vector<uint8_t> cpu(slot);
    SliceInfo info;
    const Status cst = encode_slice(q.data() + k * L, t, cnt, cpu.data(), slot, opt, &info);
    ASSERT_EQ(cta.status[k], int(cst)) << "slice " << k;
    ASSERT_EQ(v3.status[k], int(cst)) << "slice " << k;
    const size_t bytes = cst == Status::Ok ? info.bytes : 0;
    ASSERT_EQ(cta.sizes[k], bytes) << "slice " << k;
    ASSERT_EQ(0, std::memcmp(cta.bytes.data() + k * slot, cpu.data(), bytes))
        << "slice " << k << " differs from the CPU";
    ASSERT_EQ(0, std::memcmp(cta.bytes.data() + k * slot, v3.bytes.data() + k * slot, bytes)) << "slice " << k;
  }
  if (std::count(cta.status.begin(), cta.status.end(), int(Status::Ok)) != int(S)) return;  // NoSpace: no decode
  codec.set_kernels(4);
  auto src = to_device(cta.bytes);
  auto lens = to_device(cta.sizes);
  DevBuf out(n * sizeof(Code)), status(S * 4);
  ASSERT_EQ(codec.decode_slices_async(src->get<uint8_t>(), slot, lens->get<uint64_t>(), n, L, t, out.get(),
                                      status.get<int>()),
            0);
  ASSERT_EQ(codec.synchronize(), 0);
  for (int s : status.download<int>(S)) ASSERT_EQ(s, int(Status::Ok));
  ASSERT_TRUE(out.download<Code>(n) == q) << "the CTA decoder's codes differ";
}

TEST(CudaCta, SlicesMatchCpuAndV3) {
  SKIP_WITHOUT_GPU();
  // Short last slices, slices of one tile, part of one, several with a short
  // last tile; every kind, every predictor.
  const std::pair<size_t, uint32_t> shapes[] = {{1, 1}, {70, 33}, {5000, 2048}, {20000, 6000}, {9000, 8192}};
  for (const auto& [n, L] : shapes) {
    for (int kind = 0; kind < kKinds; ++kind) {
      for (Predictor p : {Predictor::None, Predictor::Delta1, Predictor::Delta2, Predictor::Lorenzo2D}) {
        if (quick() && kind != 2 && p == Predictor::Lorenzo2D) continue;
        batch_matches<int32_t>(n, L, kind, p, 40);
        if (HasFatalFailure()) return;
        batch_matches<int64_t>(n, L, kind, p, 40);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaCta, SmallSlotsGiveNoSpaceAsTheCpu) {
  SKIP_WITHOUT_GPU();
  // Slots smaller than a Raw slice: Block where it fits, else NoSpace.
  for (size_t slot : {size_t(10), size_t(24), size_t(200), size_t(2000)}) {
    batch_matches<int32_t>(3000, 1000, 0, Predictor::Delta1, 0, slot);
    if (HasFatalFailure()) return;
    batch_matches<int64_t>(3000, 1000, 3, Predictor::None, 0, slot);
    if (HasFatalFailure()) return;
  }
}

// Corrupt slices: the CTA decoder's status is the CPU decoder's.
TEST(CudaCta, CorruptSlicesGiveTheCpuStatus) {
  SKIP_WITHOUT_GPU();
  nc::DeviceCodec codec(nullptr);
  codec.set_kernels(4);
  std::mt19937 rng(11);
  int bad_seen = 0;
  for (int kind : {0, 2, 4}) {
    for (Predictor p : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
      const uint32_t n = 5000;  // three tiles
      const auto q = codes<int32_t>(n, kind, uint32_t(kind) * 7 + uint32_t(p));
      std::vector<uint8_t> good(max_slice_bytes(ElemType::I32, n));
      EncodeOptions opt;
      opt.choice = EncodeOptions::Choice::Block;
      opt.predictor = int(p);
      SliceInfo info;
      ASSERT_EQ(encode_slice(q.data(), ElemType::I32, n, good.data(), good.size(), opt, &info), Status::Ok);
      good.resize(info.bytes);
      for (int trial = 0; trial < (quick() ? 10 : 40); ++trial) {
        std::vector<uint8_t> bad = good;
        size_t len = bad.size();
        switch (trial % 4) {
          case 0: len = rng() % bad.size(); break;
          case 1: bad[kHeaderBytes + rng() % (bad.size() - kHeaderBytes)] ^= uint8_t(1u << (rng() % 8)); break;
          case 2: bad[kHeaderBytes + rng() % 64] = uint8_t(rng()); break;  // width nibbles
          case 3: bad[bad.size() - 1 - rng() % 16] ^= 0x80; break;         // the last block's planes
        }
        std::vector<int32_t> cpu_out(n);
        const Status want = decode_slice(bad.data(), len, ElemType::I32, n, cpu_out.data());
        bad_seen += want != Status::Ok;
        auto src = to_device(bad);
        DevBuf out(n * 4), status(4);
        ASSERT_EQ(codec.decode_slice_async(src->get<uint8_t>(), len, ElemType::I32, n, out.get(), status.get<int>()),
                  0);
        ASSERT_EQ(codec.synchronize(), 0);
        ASSERT_EQ(status.download<int>(1)[0], int(want))
            << "kind " << kind << " pred " << int(p) << " trial " << trial << ": cpu " << status_string(want);
        if (want == Status::Ok) {
          ASSERT_TRUE(out.download<int32_t>(n) == cpu_out);
        }
      }
    }
  }
  EXPECT_GT(bad_seen, 10);  // the mutations did reach the checks
}

// The fused float calls under set_kernels(4): the slices and outlier counts
// of v3's fused calls, and the decode to values equal to v3's.
TEST(CudaCta, FusedFloatCallsMatchV3) {
  SKIP_WITHOUT_GPU();
  const size_t n = 30000;
  const uint32_t L = 7000;
  const double eb = 1e-3;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g(0, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(std::sin(1e-3 * double(i)) + (i % 3 == 0 ? 0.01 * g(rng) : 0.0));
  x[123] = std::numeric_limits<float>::infinity();  // an outlier
  auto dx = to_device(x);
  const size_t S = (n + L - 1) / L;
  for (ElemType ct : {ElemType::I32, ElemType::I64}) {
    const size_t slot = max_slice_bytes(ct, L);
    std::vector<uint8_t> bytes[2];
    std::vector<float> values[2];
    uint64_t outliers[2];
    for (int i = 0; i < 2; ++i) {
      nc::DeviceCodec codec(nullptr);
      codec.set_kernels(i == 0 ? 4 : 3);
      DevBuf dst(S * slot, 0), sizes(S * 8), status(S * 4), cnt(8), out(n * 4);
      ASSERT_EQ(codec.quantize_encode_slices_async(dx->get(), ElemType::F32, n, eb, 1 << 20, ct, L, Predictor::Delta1,
                                                   0, 0, dst.get<uint8_t>(), slot, sizes.get<uint64_t>(),
                                                   status.get<int>(), cnt.get<uint64_t>()),
                0);
      ASSERT_EQ(codec.decode_dequantize_slices_async(dst.get<uint8_t>(), slot, sizes.get<uint64_t>(), n, L, ct, eb,
                                                     out.get(), ElemType::F32, status.get<int>()),
                0);
      ASSERT_EQ(codec.synchronize(), 0);
      for (int s : status.download<int>(S)) ASSERT_EQ(s, int(Status::Ok));
      bytes[i] = dst.download<uint8_t>(S * slot);
      values[i] = out.download<float>(n);
      outliers[i] = cnt.download<uint64_t>(1)[0];
    }
    EXPECT_EQ(outliers[0], 1u);
    EXPECT_EQ(outliers[0], outliers[1]);
    ASSERT_TRUE(bytes[0] == bytes[1]) << "CTA and v3 fused slices differ";
    ASSERT_EQ(0, std::memcmp(values[0].data(), values[1].data(), n * 4)) << "CTA and v3 fused values differ";
    for (size_t i = 0; i < n; ++i) {
      if (i != 123) {
        ASSERT_LE(std::fabs(double(values[0][i]) - double(x[i])), eb * 1.0001) << i;
      }
    }
  }
}

}  // namespace

#endif  // NCCLZ_WITH_CUDA
