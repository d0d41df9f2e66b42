// Slice encoder/decoder and selector (cpp/src/codec/slice.cpp, docs/FORMAT.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "codec/slice.hpp"

using namespace ncclz::codec;
using Choice = EncodeOptions::Choice;

namespace {

template <class Code>
std::vector<Code> gaussian_codes(size_t n, double sd, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, sd);
  std::vector<Code> v(n);
  for (auto& x : v) x = Code(std::llround(d(rng)));
  return v;
}

// Codes of a smooth 3D field (nz x ny x nx), quantized with step `step`.
std::vector<int32_t> smooth_codes(size_t nz, size_t ny, size_t nx, double step) {
  std::vector<int32_t> v(nz * ny * nx);
  for (size_t z = 0; z < nz; ++z)
    for (size_t y = 0; y < ny; ++y)
      for (size_t x = 0; x < nx; ++x) {
        const double f = std::sin(0.05 * x) * std::cos(0.07 * y) + 0.5 * std::sin(0.03 * z + 0.02 * x);
        v[(z * ny + y) * nx + x] = int32_t(std::llround(f / step));
      }
  return v;
}

template <class T>
void round_trip(const std::vector<T>& v, ElemType t, const EncodeOptions& opt, SliceInfo* info = nullptr) {
  std::vector<uint8_t> buf(max_slice_bytes(t, v.size()));
  SliceInfo si;
  ASSERT_EQ(encode_slice(v.data(), t, uint32_t(v.size()), buf.data(), buf.size(), opt, &si), Status::Ok);
  ASSERT_LE(si.bytes, buf.size());
  std::vector<T> out(v.size());
  size_t used = 0;
  ASSERT_EQ(decode_slice(buf.data(), si.bytes, t, uint32_t(v.size()), out.data(), &used), Status::Ok);
  EXPECT_EQ(used, si.bytes);
  if (!v.empty()) ASSERT_EQ(0, std::memcmp(v.data(), out.data(), v.size() * sizeof(T)));  // no null memcmp
  if (info) *info = si;
}

}  // namespace

TEST(Slice, EveryForcedCodecAndPredictorRoundTrips) {
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(33), size_t(4097), size_t(100003)}) {
    auto v32 = gaussian_codes<int32_t>(n, 40, uint32_t(n));
    auto v64 = gaussian_codes<int64_t>(n, 3e12, uint32_t(n) + 1);
    for (Choice c : {Choice::Auto, Choice::Raw, Choice::Block, Choice::Rans, Choice::Sparse}) {
      for (int p = -1; p < kNumPredictors; ++p) {
        EncodeOptions opt;
        opt.choice = c;
        opt.predictor = p;
        opt.row = 16;
        opt.plane = 256;
        SCOPED_TRACE(testing::Message() << "n=" << n << " choice=" << int(c) << " pred=" << p);
        round_trip(v32, ElemType::I32, opt);
        round_trip(v64, ElemType::I64, opt);
      }
    }
  }
}

namespace {

// decode_slice_add over every forced codec and predictor: dst ends as its old
// values plus the slice's, wrapping; slice_adds_sparse says which are added
// without a pass over dst (Sparse, no predictor: also checked to leave every
// element at a zero of the slice untouched, whatever it held).
template <class Code>
void check_decode_add(const std::vector<Code>& v, ElemType t, uint32_t seed) {
  using U = std::make_unsigned_t<Code>;
  std::mt19937_64 rng(seed);
  std::vector<Code> base(v.size());
  for (auto& b : base) b = (rng() % 3 == 0) ? std::numeric_limits<Code>::max() - Code(rng() % 4) : Code(rng());
  for (Choice c : {Choice::Raw, Choice::Block, Choice::Rans, Choice::Sparse}) {
    for (int p = -1; p < kNumPredictors; ++p) {
      EncodeOptions opt;
      opt.choice = c;
      opt.predictor = p;
      opt.row = 16;
      opt.plane = 256;
      SCOPED_TRACE(testing::Message() << "n=" << v.size() << " choice=" << int(c) << " pred=" << p);
      std::vector<uint8_t> buf(max_slice_bytes(t, v.size()));
      SliceInfo si;
      ASSERT_EQ(encode_slice(v.data(), t, uint32_t(v.size()), buf.data(), buf.size(), opt, &si), Status::Ok);
      std::vector<Code> acc = base;
      acc.push_back(Code(0x5A));
      size_t used = 0;
      ASSERT_EQ(decode_slice_add(buf.data(), si.bytes, t, uint32_t(v.size()), acc.data(), &used), Status::Ok);
      EXPECT_EQ(used, si.bytes);
      EXPECT_EQ(acc.back(), Code(0x5A));  // nothing past count
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(acc[i], Code(U(U(base[i]) + U(v[i])))) << "element " << i;
      const bool sparse = si.codec == Codec::Sparse && si.predictor == Predictor::None;
      EXPECT_EQ(slice_adds_sparse(buf.data(), si.bytes), sparse);
      // Wrong type or count: refused like decode_slice.
      const ElemType other = t == ElemType::I32 ? ElemType::I64 : ElemType::I32;
      EXPECT_EQ(decode_slice_add(buf.data(), si.bytes, other, uint32_t(v.size()), acc.data()), Status::TypeMismatch);
      EXPECT_EQ(decode_slice_add(buf.data(), si.bytes, t, uint32_t(v.size() + 1), acc.data()), Status::CountMismatch);
    }
  }
}

}  // namespace

TEST(Slice, DecodeAddAddsEveryCodecsValues) {
  for (size_t n : {size_t(1), size_t(33), size_t(4097), size_t(70001)}) {
    for (double density : {0.0, 0.01, 0.05, 0.5}) {
      std::mt19937_64 rng(n * 7 + size_t(density * 100));
      std::vector<int32_t> v32(n);
      std::vector<int64_t> v64(n);
      for (size_t i = 0; i < n; ++i) {
        const bool nz = double(rng() % 10000) < density * 10000;
        v32[i] = nz ? int32_t(rng() % 2001) - 1000 : 0;
        v64[i] = nz ? (rng() % 7 == 0 ? int64_t(rng()) : int64_t(rng() % 2001) - 1000) : 0;
      }
      if (n > 10) v32[n / 2] = std::numeric_limits<int32_t>::min();  // wraps when added
      check_decode_add(v32, ElemType::I32, uint32_t(n));
      check_decode_add(v64, ElemType::I64, uint32_t(n) + 1);
    }
  }
  // Floats are not codes: refused.
  std::vector<float> f(10, 1.0f), acc(10, 0.0f);
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::F32, 10));
  SliceInfo si;
  ASSERT_EQ(encode_slice(f.data(), ElemType::F32, 10, buf.data(), buf.size(), EncodeOptions{}, &si), Status::Ok);
  EXPECT_EQ(decode_slice_add(buf.data(), si.bytes, ElemType::F32, 10, acc.data()), Status::Unsupported);
  EXPECT_FALSE(slice_adds_sparse(buf.data(), si.bytes));
  EXPECT_FALSE(slice_adds_sparse(buf.data(), 3));  // no header
}

TEST(Slice, SelectorPrefersBlockOnGaussianAndPredictionOnSmooth) {
  EncodeOptions opt;
  SliceInfo info;
  auto g = gaussian_codes<int32_t>(1 << 18, 50, 3);
  round_trip(g, ElemType::I32, opt, &info);
  EXPECT_EQ(info.predictor, Predictor::None);
  EXPECT_NE(info.codec, Codec::Raw);
  EXPECT_LT(info.bytes, g.size() * 4 / 3);

  auto s = smooth_codes(16, 64, 128, 2e-3);
  opt.row = 128;
  opt.plane = 64 * 128;
  round_trip(s, ElemType::I32, opt, &info);
  EXPECT_NE(info.predictor, Predictor::None);
  EXPECT_LT(info.bytes * 8, s.size() * 4);  // better than 8x on a smooth field
}

TEST(Slice, ZeroSliceIsTiny) {
  std::vector<int32_t> z(1 << 16, 0);
  SliceInfo info;
  round_trip(z, ElemType::I32, EncodeOptions{}, &info);
  EXPECT_LE(info.bytes, kHeaderBytes + z.size() / 32 + 64);
}

TEST(Slice, IncompressibleFallsBackToRaw) {
  std::mt19937 rng(1);
  std::vector<int32_t> v(5000);
  for (auto& x : v) x = int32_t(rng());
  for (Choice c : {Choice::Auto, Choice::Block, Choice::Rans, Choice::Sparse}) {
    EncodeOptions opt;
    opt.choice = c;
    SliceInfo info;
    round_trip(v, ElemType::I32, opt, &info);
    EXPECT_LE(info.bytes, max_slice_bytes(ElemType::I32, v.size()));
  }
}

TEST(Slice, FloatsLosslessBitExact) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> f(70001);
  for (auto& x : f) x = d(rng);
  f[3] = NAN;
  f[4] = -INFINITY;
  f[5] = -0.0f;
  f[6] = 1e-42f;
  SliceInfo info;
  round_trip(f, ElemType::F32, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::FloatExp);
  EXPECT_LT(info.bytes, f.size() * 4);
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < h.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &f[i], 4);
    h[i] = uint16_t(b >> 16);  // bfloat16 bits
  }
  round_trip(h, ElemType::BF16, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::FloatExp);
  std::vector<double> d64(1000, 1.5);
  round_trip(d64, ElemType::F64, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::Raw);
}

TEST(Slice, DecoderChecksTypeCountAndCapacity) {
  auto v = gaussian_codes<int32_t>(1000, 10, 9);
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::I32, v.size()));
  SliceInfo info;
  ASSERT_EQ(encode_slice(v.data(), ElemType::I32, 1000, buf.data(), buf.size(), {}, &info), Status::Ok);
  std::vector<int64_t> out(1000);
  EXPECT_EQ(decode_slice(buf.data(), info.bytes, ElemType::I64, 1000, out.data()), Status::TypeMismatch);
  EXPECT_EQ(decode_slice(buf.data(), info.bytes, ElemType::I32, 999, out.data()), Status::CountMismatch);
  EXPECT_EQ(decode_slice(buf.data(), info.bytes - 1, ElemType::I32, 1000, out.data()), Status::Truncated);
  // Encoder refuses a buffer smaller than the header, and one too small for Raw when Raw is needed.
  EXPECT_EQ(encode_slice(v.data(), ElemType::I32, 1000, buf.data(), 10, {}, &info), Status::NoSpace);
  EncodeOptions raw;
  raw.choice = Choice::Raw;
  EXPECT_EQ(encode_slice(v.data(), ElemType::I32, 1000, buf.data(), 100, raw, &info), Status::NoSpace);
  EncodeOptions fe;
  fe.choice = Choice::FloatExp;
  EXPECT_EQ(encode_slice(v.data(), ElemType::I32, 1000, buf.data(), buf.size(), fe, &info), Status::Unsupported);
}

TEST(Slice, CorruptSlicesNeverCrash) {
  auto v = smooth_codes(4, 16, 64, 1e-2);
  std::mt19937 rng(11);
  std::vector<int32_t> out(v.size());
  for (Choice c : {Choice::Raw, Choice::Block, Choice::Rans, Choice::Sparse}) {
    for (int p : {0, 1, 3}) {
      EncodeOptions opt;
      opt.choice = c;
      opt.predictor = c == Choice::Raw ? 0 : p;
      opt.row = 64;
      std::vector<uint8_t> buf(max_slice_bytes(ElemType::I32, v.size()));
      SliceInfo info;
      ASSERT_EQ(encode_slice(v.data(), ElemType::I32, uint32_t(v.size()), buf.data(), buf.size(), opt, &info),
                Status::Ok);
      for (int it = 0; it < 2000; ++it) {
        auto b = std::vector<uint8_t>(buf.begin(), buf.begin() + info.bytes);
        const int flips = 1 + int(rng() % 4);
        for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
        (void)decode_slice(b.data(), b.size(), ElemType::I32, uint32_t(v.size()), out.data());
      }
      for (size_t len = 0; len < info.bytes; len += 1 + info.bytes / 300)
        EXPECT_NE(decode_slice(buf.data(), len, ElemType::I32, uint32_t(v.size()), out.data()), Status::Ok);
    }
  }
}
