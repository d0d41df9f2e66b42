// Slice encoder/decoder and selector (cpp/src/codec/slice.cpp, docs/FORMAT.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "codec/float_huff.hpp"
#include "codec/slice.hpp"
#include "codec/sparse_coder.hpp"

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
  if (!v.empty()) {
    ASSERT_EQ(0, std::memcmp(v.data(), out.data(), v.size() * sizeof(T)));  // no null memcmp
  }
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
      // Into another buffer in one pass: exactly the int32 Block and Rans slices
      // with None, Delta1 or Delta2; every other slice refused with nothing written.
      const bool fused =
          t == ElemType::I32 && (si.codec == Codec::Block || si.codec == Codec::Rans) &&
          (si.predictor == Predictor::None || si.predictor == Predictor::Delta1 || si.predictor == Predictor::Delta2);
      std::vector<Code> to(v.size() + 1, Code(0x33));
      used = 0;
      EXPECT_EQ(decode_slice_add_to(buf.data(), si.bytes, t, uint32_t(v.size()), base.data(), to.data(), &used),
                fused ? Status::Ok : Status::Unsupported);
      EXPECT_EQ(to.back(), Code(0x33));
      if (fused) {
        EXPECT_EQ(used, si.bytes);
        for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(to[i], acc[i]) << "element " << i;
      } else {
        EXPECT_EQ(std::count(to.begin(), to.end(), Code(0x33)), ptrdiff_t(to.size()));
      }
      // Wrong type or count: refused like decode_slice.
      const ElemType other = t == ElemType::I32 ? ElemType::I64 : ElemType::I32;
      EXPECT_EQ(decode_slice_add(buf.data(), si.bytes, other, uint32_t(v.size()), acc.data()), Status::TypeMismatch);
      EXPECT_EQ(decode_slice_add(buf.data(), si.bytes, t, uint32_t(v.size() + 1), acc.data()), Status::CountMismatch);
      if (fused) {
        EXPECT_EQ(decode_slice_add_to(buf.data(), si.bytes, t, uint32_t(v.size() + 1), base.data(), to.data()),
                  Status::CountMismatch);
        EXPECT_EQ(decode_slice_add_to(buf.data(), si.bytes - 1, t, uint32_t(v.size()), base.data(), to.data()),
                  decode_slice(buf.data(), si.bytes - 1, t, uint32_t(v.size()), to.data()));
        EXPECT_NE(decode_slice_add_to(buf.data(), si.bytes - 1, t, uint32_t(v.size()), base.data(), to.data()),
                  Status::Ok);
      }
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

// Byte slices (uint8, and int8 and the 8-bit floats, which travel as their
// bytes) take Rans over the bytes where their entropy is low enough, Raw
// where it is not; without rANS (what a device rank codes) FloatHuff over
// the bytes, Raw where that is not smaller; forced Rans round trips whatever
// the bytes; a damaged payload is an error.
TEST(Slice, BytesTakeRansWhereItPays) {
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0, 1);
  std::vector<uint8_t> skewed(100000), uniform(100000);
  for (auto& b : skewed) b = uint8_t(std::clamp(std::lround(g(rng) * 6), -120L, 120L) & 0xff);  // ~4.6 bits
  for (auto& b : uniform) b = uint8_t(rng());
  SliceInfo info;
  round_trip(skewed, ElemType::U8, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::Rans);
  EXPECT_LT(info.bytes, skewed.size() * 5 / 8) << "about 4.6 bits a byte";
  round_trip(uniform, ElemType::U8, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::Raw);
  EncodeOptions no_rans;
  no_rans.allow_rans = false;
  round_trip(skewed, ElemType::U8, no_rans, &info);
  EXPECT_EQ(info.codec, Codec::FloatHuff);
  EXPECT_LT(info.bytes, skewed.size() * 5 / 8) << "Huffman codes of about 4.7 bits a byte";
  round_trip(uniform, ElemType::U8, no_rans, &info);
  EXPECT_EQ(info.codec, Codec::Raw) << "FloatHuff not smaller: Raw";
  const std::vector<uint8_t> seven(7, 9);  // one symbol: no code words, an index of 136 bytes > 7
  round_trip(seven, ElemType::U8, no_rans, &info);
  EXPECT_EQ(info.codec, Codec::Raw);
  const std::vector<uint8_t> same(5000, 9);
  round_trip(same, ElemType::U8, no_rans, &info);
  EXPECT_EQ(info.codec, Codec::FloatHuff);
  EXPECT_EQ(info.bytes, kHeaderBytes + fh_index_bytes(ElemType::U8, same.size())) << "one symbol: the index alone";
  EncodeOptions rans;
  rans.choice = Choice::Rans;
  for (const auto* v : {&skewed, &uniform}) {
    round_trip(*v, ElemType::U8, rans, &info);
    EXPECT_LE(info.bytes, max_slice_bytes(ElemType::U8, v->size()));
  }
  const std::vector<uint8_t> few(7, 9);  // below one sampled block: Raw
  round_trip(few, ElemType::U8, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::Raw);
  for (Choice c : {Choice::Block, Choice::Sparse, Choice::FloatExp}) {
    EncodeOptions o;
    o.choice = c;
    std::vector<uint8_t> buf(max_slice_bytes(ElemType::U8, skewed.size()));
    EXPECT_EQ(encode_slice(skewed.data(), ElemType::U8, uint32_t(skewed.size()), buf.data(), buf.size(), o, nullptr),
              Status::Unsupported);
  }
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::U8, skewed.size()));
  ASSERT_EQ(encode_slice(skewed.data(), ElemType::U8, uint32_t(skewed.size()), buf.data(), buf.size(), EncodeOptions{},
                         &info),
            Status::Ok);
  std::vector<uint8_t> out(skewed.size());
  size_t bad = 0;
  for (size_t at : {size_t(kHeaderBytes) + 3, info.bytes / 2, info.bytes - 2}) {
    std::vector<uint8_t> b(buf.begin(), buf.begin() + long(info.bytes));
    b[at] ^= 0x5a;
    size_t used = 0;
    const Status s = decode_slice(b.data(), b.size(), ElemType::U8, uint32_t(skewed.size()), out.data(), &used);
    bad += s != Status::Ok || out != skewed;
  }
  EXPECT_EQ(bad, 3u) << "a damaged payload decodes, without a crash, to an error or other bytes";
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

namespace {

// n values of an element width W (uint16/32/64 bit patterns): zeros except a
// `keep` share at random positions, which hold random bit patterns and every
// special one of the width (-0.0, infinities, NaN payloads, subnormals, the
// all-ones pattern). Zeros are +0.0, or with `signed_zeros` +0.0 or -0.0 at
// random (a masked gradient g * mask).
template <class W>
std::vector<W> mostly_zero_bits(size_t n, double keep, uint32_t seed, bool signed_zeros = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  constexpr int B = int(sizeof(W) * 8);
  const W sign = W(W(1) << (B - 1));
  const std::vector<W> special = {sign, W(~W(0)), W(sign - 1), W(1), W(sign | 1), W(W(~W(0)) >> 1)};
  std::vector<W> v(n, 0);
  size_t s = 0;
  for (auto& x : v) {
    if (u(rng) >= keep) {
      if (signed_zeros && (rng() & 1)) x = sign;
      continue;
    }
    x = s < special.size() ? special[s++] : W(rng());
    if (W(x & W(~sign)) == 0) x = 1;
  }
  return v;
}

// The form byte of a float Sparse slice (the payload's first byte).
int float_sparse_form(const std::vector<uint8_t>& enc) { return enc[kHeaderBytes]; }

template <class W>
void check_mostly_zero_floats(ElemType t) {
  for (bool signed_zeros : {false, true}) {
    for (size_t n : {size_t(1), size_t(31), size_t(4097), size_t(100003)}) {
      for (double keep : {0.0, 0.001, 0.01, 0.1}) {
        const auto v = mostly_zero_bits<W>(n, keep, uint32_t(n * 7 + size_t(keep * 1000)), signed_zeros);
        size_t nz = 0;
        for (W x : v) nz += W(x & W(~(W(1) << (sizeof(W) * 8 - 1)))) != 0;
        SliceInfo auto_info, exp_info;
        round_trip(v, t, EncodeOptions{}, &auto_info);
        EncodeOptions sp;
        sp.choice = Choice::Sparse;
        SliceInfo sp_info;
        round_trip(v, t, sp, &sp_info);  // forced: Sparse, or Raw where that is smaller
        EXPECT_TRUE(sp_info.codec == Codec::Sparse || sp_info.codec == Codec::Raw);
        if (n < 4097) continue;
        // Mostly zeros: the selector takes Sparse, at a fraction of the raw size;
        // zeros of both signs cost a sign bit per value (form 1).
        const std::string what =
            "type " + std::to_string(int(t)) + " keep " + std::to_string(keep) + (signed_zeros ? " signed zeros" : "");
        const size_t raw = n * sizeof(W);
        EXPECT_EQ(auto_info.codec, Codec::Sparse) << what;
        std::vector<uint8_t> enc(max_slice_bytes(t, n));
        ASSERT_EQ(encode_slice(v.data(), t, uint32_t(n), enc.data(), enc.size(), {}, &auto_info), Status::Ok);
        EXPECT_EQ(float_sparse_form(enc), signed_zeros ? 1 : 0) << what;
        const size_t plane = signed_zeros ? (n + 7) / 8 : 0;
        EXPECT_LT(auto_info.bytes, kHeaderBytes + 256 + plane + nz * (sizeof(W) + 2)) << what;
        EXPECT_LT(auto_info.bytes * (signed_zeros ? 3 : 5), raw) << what;
        if (t != ElemType::F64) {
          EncodeOptions fe;
          fe.choice = Choice::FloatExp;
          round_trip(v, t, fe, &exp_info);
          EXPECT_LT(auto_info.bytes, exp_info.bytes) << what;
        }
      }
    }
  }
}

// A float Sparse payload crafted from a form byte, an optional sign plane and
// the Sparse payload of the given (position, value) list over n values.
template <class Code>
std::vector<uint8_t> crafted(ElemType t, size_t n, int form, const std::vector<uint8_t>& plane,
                             const std::vector<uint32_t>& pos, const std::vector<Code>& val) {
  std::vector<uint8_t> payload(1, uint8_t(form));
  payload.insert(payload.end(), plane.begin(), plane.end());
  std::vector<uint8_t> sp(64 + n * 16);
  const size_t b = sparse_encode_nonzeros(pos.data(), val.data(), pos.size(), n, sp.data(), sp.size());
  payload.insert(payload.end(), sp.begin(), sp.begin() + ptrdiff_t(b));
  SliceHeader h;
  h.codec = Codec::Sparse;
  h.elem_type = t;
  h.count = uint32_t(n);
  h.payload_bytes = uint32_t(payload.size());
  std::vector<uint8_t> slice(kHeaderBytes + payload.size());
  write_header(slice.data(), h);
  std::memcpy(slice.data() + kHeaderBytes, payload.data(), payload.size());
  return slice;
}

}  // namespace

TEST(Slice, MostlyZeroFloatsTakeSparseBitExact) {
  // Lossless floats that are mostly zeros: the Sparse coder over their bit
  // patterns, every pattern back exactly (FloatExp kept 3/4 of an all-zero
  // float32 slice: it codes signs and mantissas raw).
  check_mostly_zero_floats<uint32_t>(ElemType::F32);
  check_mostly_zero_floats<uint64_t>(ElemType::F64);
  check_mostly_zero_floats<uint16_t>(ElemType::F16);
  check_mostly_zero_floats<uint16_t>(ElemType::BF16);
  // Dense floats keep FloatExp (float32) and Raw (float64).
  std::vector<float> dense(5000, 1.5f);
  SliceInfo info;
  round_trip(dense, ElemType::F32, EncodeOptions{}, &info);
  EXPECT_EQ(info.codec, Codec::FloatExp);
  // A float Sparse slice is not one that decode_slice_add or the lists take.
  const auto v = mostly_zero_bits<uint32_t>(4096, 0.01, 3);
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::F32, v.size()));
  ASSERT_EQ(encode_slice(v.data(), ElemType::F32, 4096, buf.data(), buf.size(), {}, &info), Status::Ok);
  ASSERT_EQ(info.codec, Codec::Sparse);
  EXPECT_FALSE(slice_adds_sparse(buf.data(), info.bytes));
  size_t k = 0;
  EXPECT_FALSE(sparse_slice_nonzeros(buf.data(), info.bytes, &k));
  std::vector<uint32_t> acc(4096);
  EXPECT_EQ(decode_slice_add(buf.data(), info.bytes, ElemType::F32, 4096, acc.data()), Status::Unsupported);
}

TEST(Slice, FloatSparseSlicesAreChecked) {
  const size_t n = 4096;
  std::vector<uint16_t> o16(n);
  std::vector<uint32_t> o32(n);
  auto dec16 = [&](const std::vector<uint8_t>& s, ElemType t) {
    return decode_slice(s.data(), s.size(), t, n, o16.data());
  };
  auto dec32 = [&](const std::vector<uint8_t>& s) {
    return decode_slice(s.data(), s.size(), ElemType::F32, n, o32.data());
  };
  const std::vector<uint8_t> plane((n + 7) / 8, 0);
  // Well-formed ones decode to the patterns.
  ASSERT_EQ(dec16(crafted<int32_t>(ElemType::BF16, n, 0, {}, {10, 4000}, {7, -5}), ElemType::BF16), Status::Ok);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(o16[i], i == 10 ? 7 : i == 4000 ? 0xFFFB : 0) << i;
  std::vector<uint8_t> signs = plane;
  signs[0] = 0x81;  // elements 0 and 7 negative
  ASSERT_EQ(dec32(crafted<int32_t>(ElemType::F32, n, 1, signs, {7, 9}, {0x3F800000, 1})), Status::Ok);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(o32[i], i == 0 ? 0x80000000u : i == 7 ? 0xBF800000u : i == 9 ? 1u : 0u) << i;
  // Values that are not 16-bit patterns, magnitudes with a sign bit, unknown
  // forms, set padding bits, a missing plane: corrupt.
  for (ElemType t : {ElemType::BF16, ElemType::F16}) {
    EXPECT_EQ(dec16(crafted<int32_t>(t, n, 0, {}, {10}, {70000}), t), Status::Corrupt);
    EXPECT_EQ(dec16(crafted<int32_t>(t, n, 0, {}, {10}, {-32769}), t), Status::Corrupt);
    EXPECT_EQ(dec16(crafted<int32_t>(t, n, 1, plane, {10}, {0x8000}), t), Status::Corrupt);
    EXPECT_EQ(dec16(crafted<int32_t>(t, n, 1, plane, {10}, {-1}), t), Status::Corrupt);
  }
  EXPECT_EQ(dec32(crafted<int32_t>(ElemType::F32, n, 1, plane, {3}, {-7})), Status::Corrupt);
  EXPECT_EQ(dec32(crafted<int32_t>(ElemType::F32, n, 2, {}, {3}, {7})), Status::Corrupt);
  EXPECT_EQ(dec32(crafted<int32_t>(ElemType::F32, n, 1, {}, {3}, {7})), Status::Corrupt);
  std::vector<uint16_t> o(4093);
  std::vector<uint8_t> pad((4093 + 7) / 8, 0);
  pad.back() = 0x80;  // beyond element 4092
  const auto bad_pad = crafted<int32_t>(ElemType::BF16, 4093, 1, pad, {3}, {7});
  EXPECT_EQ(decode_slice(bad_pad.data(), bad_pad.size(), ElemType::BF16, 4093, o.data()), Status::Corrupt);
  // A float Sparse header with a predictor is not a slice.
  auto with_pred = crafted<int32_t>(ElemType::F32, n, 0, {}, {3}, {7});
  SliceHeader h;
  ASSERT_EQ(read_header(with_pred.data(), with_pred.size(), &h), Status::Ok);
  h.predictor = Predictor::Delta1;
  write_header(with_pred.data(), h);
  EXPECT_EQ(dec32(with_pred), Status::BadHeader);
  // Flipped bits and cuts of real float Sparse slices never crash and never pass short.
  std::mt19937 rng(4);
  SliceInfo info;
  for (ElemType t : {ElemType::F32, ElemType::F64, ElemType::BF16}) {
    for (bool signed_zeros : {false, true}) {
      const size_t m = 20000, es = elem_size(t);
      std::vector<uint8_t> x(m * es, 0);
      for (size_t i = 0; i < m; ++i) {
        if (i % 37 == 0) x[i * es + es - 2] = uint8_t(1 + rng() % 255);
        if (signed_zeros && (rng() & 1)) x[i * es + es - 1] = 0x80;
      }
      std::vector<uint8_t> enc(max_slice_bytes(t, m)), out(m * es);
      ASSERT_EQ(encode_slice(x.data(), t, uint32_t(m), enc.data(), enc.size(), {}, &info), Status::Ok);
      ASSERT_EQ(info.codec, Codec::Sparse);
      ASSERT_EQ(float_sparse_form(enc), signed_zeros ? 1 : 0);
      for (int it = 0; it < 1000; ++it) {
        auto b = std::vector<uint8_t>(enc.begin(), enc.begin() + ptrdiff_t(info.bytes));
        for (int f = 0; f < 1 + int(rng() % 3); ++f) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
        (void)decode_slice(b.data(), b.size(), t, uint32_t(m), out.data());
      }
      for (size_t len = 0; len < info.bytes; len += 1 + info.bytes / 200)
        EXPECT_NE(decode_slice(enc.data(), len, t, uint32_t(m), out.data()), Status::Ok);
    }
  }
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
