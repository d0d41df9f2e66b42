// Lossless float coder with parallel Huffman sub-streams (FloatHuff):
// docs/FORMAT.md, "FloatHuff".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_coder.hpp"
#include "codec/float_huff.hpp"
#include "codec/slice.hpp"

using namespace ncclz::codec;

namespace {

const ElemType kTypes[] = {ElemType::F32, ElemType::BF16, ElemType::F16};

uint16_t bf16_of(float f) {  // nearest even; NaN stays a quiet NaN
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

uint16_t f16_of(float f) {  // truncating, denormals included; enough for test data
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u, m = b & 0x7FFFFFu;
  const int e = int((b >> 23) & 0xFF) - 112;
  if (e <= 0) return e < -10 ? uint16_t(sign) : uint16_t(sign | ((m | 0x800000u) >> (14 - e)));
  if (e >= 31) return uint16_t(sign | 0x7C00u);
  return uint16_t(sign | (uint32_t(e) << 10) | (m >> 13));
}

void put(std::vector<uint8_t>& v, ElemType t, size_t i, float f) {
  if (t == ElemType::F32) {
    std::memcpy(&v[4 * i], &f, 4);
  } else {
    const uint16_t h = t == ElemType::BF16 ? bf16_of(f) : f16_of(f);
    std::memcpy(&v[2 * i], &h, 2);
  }
}

std::vector<uint8_t> gaussian(ElemType t, size_t n, float sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<uint8_t> v(n * elem_size(t));
  for (size_t i = 0; i < n; ++i) put(v, t, i, d(g));
  return v;
}

std::vector<uint8_t> random_bytes(ElemType t, size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n * elem_size(t));
  for (auto& x : v) x = uint8_t(g());
  return v;
}

std::vector<uint8_t> encode(const std::vector<uint8_t>& v, ElemType t) {
  std::vector<uint8_t> buf(4096 + 2 * v.size());
  const size_t bytes = floathuff_encode(v.data(), t, v.size() / elem_size(t), buf.data(), buf.size());
  EXPECT_NE(bytes, kNoFit);
  buf.resize(bytes == kNoFit ? 0 : bytes);
  return buf;
}

// Encodes, checks the size against the layout, decodes bit-exact; returns the payload bytes.
size_t round_trip(const std::vector<uint8_t>& v, ElemType t) {
  const size_t n = v.size() / elem_size(t);
  const std::vector<uint8_t> p = encode(v, t);
  if (n == 0) {
    EXPECT_EQ(p.size(), 0u);
  } else {
    EXPECT_GE(p.size(), fh_index_bytes(t, n) + fh_plane_bytes(t, n));
    EXPECT_EQ((p.size() - fh_index_bytes(t, n) - fh_plane_bytes(t, n)) % 4, 0u);
  }
  std::vector<uint8_t> out(v.size() + 8, 0xA5);
  EXPECT_EQ(floathuff_decode(p.data(), p.size(), t, n, out.data()), Status::Ok) << "n=" << n;
  EXPECT_EQ(std::memcmp(out.data(), v.data(), v.size()), 0) << "n=" << n << " type " << int(t);
  for (size_t i = v.size(); i < out.size(); ++i) EXPECT_EQ(out[i], 0xA5) << "wrote past the end, n=" << n;
  return p.size();
}

const size_t kSizes[] = {0, 1, 2, 255, 256, 257, 1023, 8191, 8192, 8193, 100000, (1u << 20) + 3};

uint32_t kraft(const uint8_t* len, uint32_t A) {
  uint32_t k = 0;
  for (uint32_t s = 0; s < A; ++s)
    if (len[s]) k += 1u << (kFhMaxLen - len[s]);
  return k;
}

}  // namespace

TEST(FloatHuff, RoundTripGaussianAndRandom) {
  for (ElemType t : kTypes) {
    for (size_t n : kSizes) {
      round_trip(gaussian(t, n, 1e-2f, uint32_t(n) + 1), t);
      round_trip(random_bytes(t, n, uint32_t(n) + 7), t);
    }
  }
}

TEST(FloatHuff, SpecialValues) {
  // +-0, denormals (smallest and largest), +-Inf, NaNs with payloads, extremes.
  const uint32_t f32[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u, 0xFF800000u,
                          0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7F7FFFFFu, 0x00800000u, 0x3F800000u};
  const uint16_t h16[] = {0x0000u, 0x8000u, 0x0001u, 0x83FFu, 0x7C00u, 0xFC00u,
                          0x7E00u, 0x7C01u, 0xFFFFu, 0x7BFFu, 0x0400u, 0x3C00u};
  const uint16_t b16[] = {0x0000u, 0x8000u, 0x0001u, 0x807Fu, 0x7F80u, 0xFF80u,
                          0x7FC0u, 0x7F81u, 0xFFFFu, 0x7F7Fu, 0x0080u, 0x3F80u};
  for (ElemType t : kTypes) {
    for (size_t n : {size_t(12), size_t(3001)}) {
      std::vector<uint8_t> v(n * elem_size(t));
      for (size_t i = 0; i < n; ++i) {
        if (t == ElemType::F32) std::memcpy(&v[4 * i], &f32[i % 12], 4);
        if (t == ElemType::F16) std::memcpy(&v[2 * i], &h16[i % 12], 2);
        if (t == ElemType::BF16) std::memcpy(&v[2 * i], &b16[i % 12], 2);
      }
      round_trip(v, t);
    }
  }
}

TEST(FloatHuff, SingleSymbolHasNoCodeWords) {
  for (ElemType t : kTypes) {
    for (size_t n : {size_t(1), size_t(256), size_t(70000)}) {
      for (float f : {0.0f, 1.0f, -3.0f}) {
        std::vector<uint8_t> v(n * elem_size(t));
        for (size_t i = 0; i < n; ++i) put(v, t, i, i % 2 ? f : -f);  // one exponent, both signs
        const size_t bytes = round_trip(v, t);
        EXPECT_EQ(bytes, fh_index_bytes(t, n) + floatexp_plane_bytes(t, n)) << "n=" << n << " f=" << f;
      }
    }
  }
}

TEST(FloatHuff, TableIsLimitedCompleteAndDeterministic) {
  // Fibonacci counts: unlimited Huffman would go ~40 deep.
  uint32_t hist[256] = {};
  uint32_t a = 1, b = 1;
  for (int s = 0; s < 45; ++s) {
    hist[s * 5] = a;
    const uint32_t c = a + b;
    a = b;
    b = c;
  }
  uint8_t len[256], len2[256];
  fh_build_lengths(hist, 256, len);
  fh_build_lengths(hist, 256, len2);
  EXPECT_EQ(std::memcmp(len, len2, 256), 0);
  EXPECT_EQ(kraft(len, 256), kFhLutSize);
  EXPECT_TRUE(fh_lengths_valid(len, 256));
  for (int s = 0; s < 256; ++s) {
    EXPECT_LE(len[s], kFhMaxLen);
    EXPECT_EQ(len[s] != 0, hist[s] != 0) << s;
  }
  // More frequent symbols never get longer codes.
  for (int s = 0; s < 256; ++s)
    for (int r = 0; r < 256; ++r)
      if (hist[s] && hist[r] && hist[s] > hist[r]) {
        EXPECT_LE(len[s], len[r]) << s << " " << r;
      }
  // Every symbol present, equal counts: 8 bits each.
  for (auto& h : hist) h = 7;
  fh_build_lengths(hist, 256, len);
  for (int s = 0; s < 256; ++s) EXPECT_EQ(len[s], 8);
  // Two symbols: one bit each; 32 (F16) equal: 5 bits each.
  uint32_t two[32] = {};
  two[3] = 1000000;
  two[30] = 1;
  fh_build_lengths(two, 32, len);
  EXPECT_EQ(len[3], 1);
  EXPECT_EQ(len[30], 1);
  // Random histograms: complete, limited, and no worse than a flat code.
  std::mt19937 g(5);
  for (int rep = 0; rep < 200; ++rep) {
    uint32_t h[256] = {};
    const int A = rep % 2 ? 256 : 32;
    for (int s = 0; s < A; ++s) h[s] = g() % 3 == 0 ? 0 : (g() >> (g() % 31));
    fh_build_lengths(h, uint32_t(A), len);
    uint32_t m = 0;
    for (int s = 0; s < A; ++s) m += h[s] != 0;
    if (m >= 2) {
      EXPECT_EQ(kraft(len, uint32_t(A)), kFhLutSize);
    }
    EXPECT_TRUE(m == 0 || fh_lengths_valid(len, uint32_t(A)));
  }
}

TEST(FloatHuff, GaussianBf16Ratio) {
  // A property of this data (fixed seed): 2^20 Gaussian bf16 values code to
  // at most 1/1.45 of their bytes (sign+mantissa 8 bits, exponents ~2.7 bits).
  const size_t n = size_t(1) << 20;
  for (float sd : {1.0f, 1e-3f}) {
    const auto v = gaussian(ElemType::BF16, n, sd, 11);
    const size_t huff = round_trip(v, ElemType::BF16);
    std::vector<uint8_t> buf(2 * v.size());
    const size_t fe = floatexp_encode(v.data(), ElemType::BF16, n, buf.data(), buf.size());
    const double ratio = double(v.size()) / double(kHeaderBytes + huff);
    EXPECT_GE(ratio, 1.45) << "sd " << sd;
    std::printf("bf16 Gaussian sd %g: FloatHuff ratio %.4f, FloatExp %.4f\n", double(sd), ratio,
                double(v.size()) / double(kHeaderBytes + fe));
    // Within 2% of the rANS coder on the same data.
    EXPECT_LE(double(huff), 1.02 * double(fe)) << "sd " << sd;
    // The estimate (every 8th value) within 2%.
    const size_t est = floathuff_estimate_bytes(v.data(), ElemType::BF16, n, 8);
    EXPECT_NEAR(double(est), double(huff), 0.02 * double(huff));
  }
}

TEST(FloatHuff, CapacityAndTypes) {
  const auto v = gaussian(ElemType::F32, 1000, 1.0f, 3);
  const std::vector<uint8_t> p = encode(v, ElemType::F32);
  std::vector<uint8_t> buf(p.size());
  EXPECT_EQ(floathuff_encode(v.data(), ElemType::F32, 1000, buf.data(), p.size()), p.size());
  EXPECT_EQ(buf, p);
  for (size_t cap : {size_t(0), size_t(10), p.size() - 1}) {
    EXPECT_EQ(floathuff_encode(v.data(), ElemType::F32, 1000, buf.data(), cap), kNoFit) << cap;
  }
  EXPECT_EQ(floathuff_encode(v.data(), ElemType::I32, 1000, buf.data(), buf.size()), kNoFit);
  EXPECT_EQ(floathuff_encode(v.data(), ElemType::F64, 250, buf.data(), buf.size()), kNoFit);
  EXPECT_EQ(floathuff_decode(p.data(), p.size(), ElemType::I32, 1000, buf.data()), Status::Unsupported);
  EXPECT_EQ(floathuff_estimate_bytes(v.data(), ElemType::I64, 500, 1), kNoFit);
  EXPECT_EQ(floathuff_decode(p.data(), 1, ElemType::F32, 0, buf.data()), Status::Corrupt);
}

namespace {
// A damaged payload must decode to Corrupt, or to Ok (any values): never crash
// or read outside it (the copy is exactly its size, for ASan).
Status decode_copy(const std::vector<uint8_t>& p, size_t len, ElemType t, size_t n) {
  std::vector<uint8_t> in(p.begin(), p.begin() + ptrdiff_t(len));
  std::vector<uint8_t> out(n * elem_size(t));
  return floathuff_decode(in.data(), in.size(), t, n, out.data());
}

// Every truncation of payload p (of n values of type t) is Corrupt; of 3000
// random byte flips, returns how many decode Ok and how many are Corrupt
// (nothing else).
std::pair<int, int> flips_ok_corrupt(const std::vector<uint8_t>& p, ElemType t, size_t n) {
  for (size_t len = 0; len < p.size(); ++len) EXPECT_EQ(decode_copy(p, len, t, n), Status::Corrupt) << len;
  std::mt19937 g(9);
  int corrupt = 0, ok = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    std::vector<uint8_t> d = p;
    const size_t at = g() % d.size();
    d[at] = uint8_t(d[at] ^ (1u + g() % 255u));
    const Status s = decode_copy(d, d.size(), t, n);
    EXPECT_TRUE(s == Status::Ok || s == Status::Corrupt);
    (s == Status::Ok ? ok : corrupt) += 1;
  }
  return {ok, corrupt};
}
}  // namespace

TEST(FloatHuff, TruncationAndFlips) {
  for (ElemType t : kTypes) {
    const size_t n = 700;
    const auto v = gaussian(t, n, 1e-2f, 21);
    const auto [ok, corrupt] = flips_ok_corrupt(encode(v, t), t, n);
    EXPECT_GT(corrupt, 0);
    EXPECT_GT(ok, 0);  // the plane's bytes are raw: flips there decode to other values
  }
}

TEST(FloatHuff, MalformedPayloads) {
  const ElemType t = ElemType::F32;
  const size_t n = 1300;  // 6 sub-streams, 1 group, 2 bytes of index padding
  const auto v = gaussian(t, n, 1.0f, 33);
  const std::vector<uint8_t> p = encode(v, t);
  const size_t tab = fh_table_bytes(t), idx = fh_index_bytes(t, n);
  std::vector<uint8_t> out(n * 4);
  auto corrupt = [&](std::vector<uint8_t> d, const char* what) {
    EXPECT_EQ(floathuff_decode(d.data(), d.size(), t, n, out.data()), Status::Corrupt) << what;
  };
  ASSERT_EQ(floathuff_decode(p.data(), p.size(), t, n, out.data()), Status::Ok);
  {  // a length above 12
    auto d = p;
    for (size_t i = 0; i < tab; ++i)
      if (d[i] & 15) {
        d[i] = uint8_t((d[i] & 0xF0) | 13);
        break;
      }
    corrupt(d, "length 13");
  }
  {  // an incomplete code: one more symbol of length 12... over-full; drop one: under-full
    auto d = p;
    for (size_t i = 0; i < tab; ++i)
      if (d[i] == 0) {
        d[i] = 12;
        break;
      }
    corrupt(d, "Kraft sum above 1");
    d = p;
    for (size_t i = 0; i < tab; ++i)
      if (d[i] & 15) {
        d[i] = uint8_t(d[i] & 0xF0);
        break;
      }
    corrupt(d, "Kraft sum below 1");
  }
  {  // the group offset of group 0 must be 0
    auto d = p;
    d[tab] = 1;
    corrupt(d, "group offset");
  }
  {  // word counts that do not add up to the words
    auto d = p;
    d[tab + 4] = uint8_t(d[tab + 4] + 1);
    corrupt(d, "count +1");
    d = p;
    d[tab + 4] = uint8_t(d[tab + 4] - 1);
    d[tab + 5] = uint8_t(d[tab + 5] + 1);
    corrupt(d, "counts moved");
  }
  {  // index padding
    auto d = p;
    ASSERT_GT(idx, tab + 4 + 4);
    d[idx - 1] = 1;
    corrupt(d, "index padding");
  }
  {  // padding bits after the last code of sub-stream 0
    auto d = p;
    const size_t w0 = d[tab + 4];
    uint32_t last;
    std::memcpy(&last, &d[idx + 4 * (w0 - 1)], 4);
    // Find the stream's used bits by setting the lowest bit: Ok only if no padding.
    last |= 1u;
    std::memcpy(&d[idx + 4 * (w0 - 1)], &last, 4);
    const Status s = floathuff_decode(d.data(), d.size(), t, n, out.data());
    if (s == Status::Ok) {
      EXPECT_NE(std::memcmp(out.data(), v.data(), out.size()), 0);
    }
    // A zero word appended to sub-stream 0 (counts and words one more): overrun of padding.
    d = p;
    d.insert(d.begin() + ptrdiff_t(idx + 4 * w0), 4, 0);
    d[tab + 4] = uint8_t(w0 + 1);
    corrupt(d, "a whole word of padding");
  }
  {  // one symbol present must have no words
    std::vector<uint8_t> z(n * 4, 0);
    auto d = encode(z, t);
    ASSERT_EQ(floathuff_decode(d.data(), d.size(), t, n, out.data()), Status::Ok);
    d[tab + 4] = 1;
    d.insert(d.begin() + ptrdiff_t(idx), 4, 0);
    corrupt(d, "single symbol with a word");
    d = encode(z, t);
    d[0] = 2;  // the one symbol with length 2
    corrupt(d, "single symbol of length 2");
    d[0] = 0;
    corrupt(d, "no symbol");
  }
}

TEST(FloatHuff, PaddingBitsMustBeZero) {
  // Sub-streams whose codes do not fill their last word: set each padding bit in turn.
  const ElemType t = ElemType::BF16;
  const size_t n = 256;
  const auto v = gaussian(t, n, 1.0f, 44);
  const std::vector<uint8_t> p = encode(v, t);
  const size_t idx = fh_index_bytes(t, n), words = (p.size() - idx - n) / 4;
  uint8_t len[256];
  uint32_t bits = 0;
  for (uint32_t s = 0; s < 256; s += 2) {
    len[s] = p[s / 2] & 15;
    len[s + 1] = p[s / 2] >> 4;
  }
  for (size_t i = 0; i < n; ++i) bits += len[((uint32_t(v[2 * i]) | uint32_t(v[2 * i + 1]) << 8) >> 7) & 0xFF];
  ASSERT_EQ(words, (bits + 31) / 32);
  const uint32_t pad = uint32_t(32 * words - bits);
  std::vector<uint8_t> out(2 * n);
  for (uint32_t b = 0; b < pad; ++b) {
    auto d = p;
    uint32_t w;
    std::memcpy(&w, &d[idx + 4 * (words - 1)], 4);
    w |= 1u << b;
    std::memcpy(&d[idx + 4 * (words - 1)], &w, 4);
    EXPECT_EQ(floathuff_decode(d.data(), d.size(), t, n, out.data()), Status::Corrupt) << "padding bit " << b;
  }
}

TEST(FloatHuff, SliceForcedDecodesEverywhere) {
  using Choice = EncodeOptions::Choice;
  for (ElemType t : kTypes) {
    const uint32_t n = 5000;
    const auto v = gaussian(t, n, 1e-2f, 55);
    std::vector<uint8_t> slice(max_slice_bytes(t, n));
    EncodeOptions opt;
    opt.choice = Choice::FloatHuff;
    SliceInfo info;
    ASSERT_EQ(encode_slice(v.data(), t, n, slice.data(), slice.size(), opt, &info), Status::Ok);
    EXPECT_EQ(info.codec, Codec::FloatHuff);
    std::vector<uint8_t> out(v.size());
    size_t used = 0;
    ASSERT_EQ(decode_slice(slice.data(), info.bytes, t, n, out.data(), &used), Status::Ok);
    EXPECT_EQ(used, info.bytes);
    EXPECT_EQ(out, v);
    // The selector keeps FloatExp for these.
    EXPECT_EQ(encode_slice(v.data(), t, n, slice.data(), slice.size(), EncodeOptions{}, &info), Status::Ok);
    EXPECT_EQ(info.codec, Codec::FloatExp);
  }
  EncodeOptions opt;
  opt.choice = Choice::FloatHuff;
  std::vector<int32_t> q(100, 1);
  std::vector<uint8_t> slice(1024);
  EXPECT_EQ(encode_slice(q.data(), ElemType::I32, 100, slice.data(), slice.size(), opt, nullptr), Status::Unsupported);
  // Random bits do not compress: the Raw fallback.
  const auto r = random_bytes(ElemType::F32, 1000, 3);
  SliceInfo info;
  ASSERT_EQ(encode_slice(r.data(), ElemType::F32, 1000, slice.data(), 0, opt, &info), Status::NoSpace);
  std::vector<uint8_t> big(max_slice_bytes(ElemType::F32, 1000));
  ASSERT_EQ(encode_slice(r.data(), ElemType::F32, 1000, big.data(), big.size(), opt, &info), Status::Ok);
  EXPECT_EQ(info.codec, Codec::Raw);
}

// allow_rans = false (a call with a device rank): the selector's lossless
// float slices are FloatHuff (the bytes of the forced codec), Raw where not
// smaller, never FloatExp or Sparse (both rANS); float64 is not FloatHuff's.
TEST(FloatHuff, SelectorWithoutRansPicksIt) {
  EncodeOptions no_rans;
  no_rans.allow_rans = false;
  EncodeOptions forced;
  forced.choice = EncodeOptions::Choice::FloatHuff;
  for (ElemType t : kTypes) {
    const uint32_t n = 5000;
    for (int kind = 0; kind < 3; ++kind) {  // Gaussian, zeros (Sparse's case with rANS allowed), random bits
      const auto v = kind == 0   ? gaussian(t, n, 1e-2f, 56)
                     : kind == 1 ? std::vector<uint8_t>(n * elem_size(t), 0)
                                 : random_bytes(t, n, 9);
      std::vector<uint8_t> a(max_slice_bytes(t, n)), b(a.size());
      SliceInfo ia, ib;
      ASSERT_EQ(encode_slice(v.data(), t, n, a.data(), a.size(), no_rans, &ia), Status::Ok);
      ASSERT_EQ(encode_slice(v.data(), t, n, b.data(), b.size(), forced, &ib), Status::Ok);
      EXPECT_TRUE(ia.codec == Codec::FloatHuff || ia.codec == Codec::Raw) << int(ia.codec);
      ASSERT_EQ(ia.bytes, ib.bytes);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), ia.bytes), 0);
      if (kind == 0) {
        EXPECT_EQ(ia.codec, Codec::FloatHuff);
      }
      if (kind != 1) continue;
      SliceInfo with_rans;
      ASSERT_EQ(encode_slice(v.data(), t, n, a.data(), a.size(), EncodeOptions{}, &with_rans), Status::Ok);
      EXPECT_EQ(with_rans.codec, Codec::Sparse) << "zeros: the test does not test Sparse's exclusion";
    }
  }
  std::vector<double> d(1000, 0.5);
  std::vector<uint8_t> slice(max_slice_bytes(ElemType::F64, 1000));
  SliceInfo info;
  ASSERT_EQ(encode_slice(d.data(), ElemType::F64, 1000, slice.data(), slice.size(), no_rans, &info), Status::Ok);
  EXPECT_NE(info.codec, Codec::FloatHuff);
}

namespace {
// Bytes of a Gaussian of standard deviation sd (rounded, as int8 two's complement).
std::vector<uint8_t> gaussian_bytes(size_t n, double sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sd);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(std::lround(std::fmin(127.0, std::fmax(-128.0, d(g)))) & 0xFF);
  return v;
}
double entropy_bits(const std::vector<uint8_t>& v) {
  double h[256] = {}, e = 0;
  for (uint8_t b : v) h[b] += 1;
  for (double c : h)
    if (c > 0) e -= c * std::log2(c / double(v.size()));
  return e;
}
}  // namespace

// U8 (uint8, and int8 / float8 as their bytes): each byte is a symbol, there
// is no plane. Round trips over the sizes; the code words take between the
// bytes' entropy and one bit a byte more (Huffman's bounds, plus each
// sub-stream's padding); one symbol costs the index alone; a damaged payload
// decodes to an error or other bytes, never out of bounds.
TEST(FloatHuff, BytesAreTheirOwnSymbols) {
  const ElemType t = ElemType::U8;
  EXPECT_EQ(fh_plane_bytes(t, 1000), 0u);
  EXPECT_EQ(fh_alphabet(t), 256u);
  for (size_t n : kSizes) {
    round_trip(gaussian_bytes(n, 6.0, uint32_t(n) + 3), t);
    round_trip(random_bytes(t, n, uint32_t(n) + 5), t);
    std::vector<uint8_t> cycle(n);
    for (size_t i = 0; i < n; ++i) cycle[i] = uint8_t(i * 7);
    round_trip(cycle, t);
  }
  for (double sd : {0.7, 6.0, 40.0}) {
    const size_t n = (size_t(1) << 20) + 5;
    const auto v = gaussian_bytes(n, sd, 77);
    const size_t bytes = round_trip(v, t);
    const double code_bits = 8.0 * double(bytes - fh_index_bytes(t, n));
    const double h = entropy_bits(v), pad = 32.0 * double(fh_substreams(n));
    EXPECT_GE(code_bits, h) << "sd " << sd;
    EXPECT_LE(code_bits, h + double(n) + pad) << "sd " << sd;
    const size_t est = floathuff_estimate_bytes(v.data(), t, n, 8);
    EXPECT_NEAR(double(est), double(bytes), 0.02 * double(bytes)) << "sd " << sd;
    std::printf("bytes sd %g: entropy %.3f bits, FloatHuff %.3f bits a byte\n", sd, h / double(n),
                code_bits / double(n));
  }
  for (size_t n : {size_t(1), size_t(256), size_t(70000)}) {
    const std::vector<uint8_t> same(n, 0xC3);
    EXPECT_EQ(round_trip(same, t), fh_index_bytes(t, n)) << n;
  }
  const size_t n = 700;
  const auto v = gaussian_bytes(n, 6.0, 21);
  EXPECT_GT(flips_ok_corrupt(encode(v, t), t, n).second, 0);
}

// Byte slices: the selector takes Rans with rANS allowed, FloatHuff (the
// forced codec's bytes) without it, Raw where FloatHuff is not smaller.
TEST(FloatHuff, ByteSlicesWithoutRans) {
  EncodeOptions no_rans;
  no_rans.allow_rans = false;
  EncodeOptions forced;
  forced.choice = EncodeOptions::Choice::FloatHuff;
  const ElemType t = ElemType::U8;
  for (uint32_t n : {1u, 40u, 300u, 5000u, 70001u}) {
    for (int kind = 0; kind < 3; ++kind) {  // Gaussian bytes, zeros, random bytes
      const auto v = kind == 0   ? gaussian_bytes(n, 6.0, n)
                     : kind == 1 ? std::vector<uint8_t>(n, 0)
                                 : random_bytes(t, n, n + 1);
      std::vector<uint8_t> a(max_slice_bytes(t, n)), b(a.size()), out(n);
      SliceInfo ia, ib;
      ASSERT_EQ(encode_slice(v.data(), t, n, a.data(), a.size(), no_rans, &ia), Status::Ok);
      ASSERT_EQ(encode_slice(v.data(), t, n, b.data(), b.size(), forced, &ib), Status::Ok);
      ASSERT_EQ(ia.bytes, ib.bytes);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), ia.bytes), 0);
      if (kind == 2 || n < 300) {  // random bytes; or the 136-byte index at least as big as the bytes
        EXPECT_EQ(ia.codec, Codec::Raw) << n << " " << kind;
      } else if (n >= 5000 || kind == 1) {
        EXPECT_EQ(ia.codec, Codec::FloatHuff) << n << " " << kind;
      }
      size_t used = 0;
      ASSERT_EQ(decode_slice(a.data(), ia.bytes, t, n, out.data(), &used), Status::Ok);
      EXPECT_EQ(used, ia.bytes);
      EXPECT_EQ(out, v);
      if (kind == 0 && n >= 5000) {
        SliceInfo with_rans;
        ASSERT_EQ(encode_slice(v.data(), t, n, a.data(), a.size(), EncodeOptions{}, &with_rans), Status::Ok);
        EXPECT_EQ(with_rans.codec, Codec::Rans);
      }
    }
  }
}

// The decoder's two ways (FhDecodeImpl: up to three codes a lookup in large
// slices of short codes, or one): the same values and the same status on
// intact payloads and on damaged ones (truncated, bytes flipped anywhere:
// the index, the words, the plane), for floats and bytes, sizes around the
// multi-symbol threshold and with a short last sub-stream.
TEST(FloatHuff, MultiSymbolDecodeAsSingle) {
  std::mt19937 g(31);
  int multi_ok = 0, damaged_ok = 0, damaged_corrupt = 0;
  for (size_t n : {size_t(65535), size_t(65536), size_t(100003), size_t(1) << 20}) {
    for (int kind = 0; kind < 3; ++kind) {
      const ElemType t = kind == 0 ? ElemType::BF16 : kind == 1 ? ElemType::F32 : ElemType::U8;
      const auto v = kind == 2 ? gaussian_bytes(n, 6.0, uint32_t(n)) : gaussian(t, n, 1e-2f, uint32_t(n) + 5);
      const std::vector<uint8_t> p = encode(v, t);
      auto both = [&](const std::vector<uint8_t>& d, size_t len) {
        std::vector<uint8_t> a(n * elem_size(t), 0x11), b(n * elem_size(t), 0x22);
        const Status sa = floathuff_decode_with(FhDecodeImpl::Auto, d.data(), len, t, n, a.data());
        const Status sb = floathuff_decode_with(FhDecodeImpl::Single, d.data(), len, t, n, b.data());
        EXPECT_EQ(sa, sb) << "n " << n << " type " << int(t) << " len " << len;
        if (sa == Status::Ok && sb == Status::Ok) {
          EXPECT_EQ(a, b) << "n " << n << " type " << int(t);
        }
        return sa;
      };
      ASSERT_EQ(both(p, p.size()), Status::Ok);
      multi_ok += 32 * (p.size() - fh_index_bytes(t, n) - fh_plane_bytes(t, n)) / 4 <= 6 * n;
      for (size_t len : {p.size() - 1, p.size() - 4, p.size() / 2}) both(p, len);
      for (int rep = 0; rep < 60; ++rep) {
        std::vector<uint8_t> d = p;
        const size_t at = g() % d.size();
        d[at] = uint8_t(d[at] ^ (1u + g() % 255u));
        (both(d, d.size()) == Status::Ok ? damaged_ok : damaged_corrupt) += 1;
      }
    }
  }
  EXPECT_GE(multi_ok, 6) << "the sizes above the threshold take the multi-symbol way";
  EXPECT_GT(damaged_ok, 0);
  EXPECT_GT(damaged_corrupt, 0);
}
