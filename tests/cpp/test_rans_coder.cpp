// rANS coder over integer residuals and bytes: docs/FORMAT.md, "Rans".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/predictor.hpp"
#include "codec/rans_coder.hpp"

using namespace ncclz::codec;

namespace {

// CPU time of this thread: speeds stay meaningful on a loaded machine.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

template <class Code>
std::vector<Code> gaussian(size_t n, double sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sd);
  std::vector<Code> v(n);
  for (auto& x : v) x = Code(std::llround(d(g)));
  return v;
}

// Lorenzo-2D residuals of a quantized smooth field (sines plus a little noise).
template <class Code>
std::vector<Code> smooth_residuals(size_t n, uint32_t seed, double eb = 1e-3) {
  const uint32_t W = 512;
  std::mt19937_64 g(seed);
  std::normal_distribution<double> noise(0.0, 2e-3);
  std::vector<Code> q(n), r(n);
  for (size_t i = 0; i < n; ++i) {
    const double x = double(i % W) / W, y = double(i / W) / 256.0;
    const double v = std::sin(6.1 * x + 1.3 * y) + 0.5 * std::cos(9.7 * y - 3.1 * x) + noise(g);
    q[i] = Code(std::llround(v / (2 * eb)));
  }
  predict<Code>(q.data(), n, Predictor::Lorenzo2D, W, 0, r.data());
  return r;
}

template <class Code>
std::vector<Code> full_range(size_t n, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::vector<Code> v(n);
  for (auto& x : v) x = Code(g());
  if (n > 0) v[0] = std::numeric_limits<Code>::min();
  if (n > 1) v[1] = std::numeric_limits<Code>::max();
  if (n > 2) v[2] = Code(-1);
  if (n > 3) v[3] = 0;
  return v;
}

size_t worst_case(size_t n, size_t elem) { return 1024 + n * (elem + 2); }

template <class Code>
size_t round_trip(const std::vector<Code>& r) {
  std::vector<uint8_t> buf(worst_case(r.size(), sizeof(Code)));
  const size_t bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
  EXPECT_NE(bytes, kNoFit);
  if (bytes == kNoFit) return 0;
  std::vector<Code> out(r.size() + 1, Code(0x5A));
  EXPECT_EQ(rans_decode(buf.data(), bytes, r.size(), out.data()), Status::Ok);
  EXPECT_EQ(out.back(), Code(0x5A));  // nothing written past n
  out.pop_back();
  EXPECT_TRUE(out == r);
  return bytes;
}

template <class Code>
void histogram_of(const std::vector<Code>& r, uint32_t* hist, uint64_t* extra) {
  std::fill(hist, hist + kRansAlphabet, 0u);
  *extra = 0;
  for (Code x : r) {
    uint32_t s, e;
    rans_symbol_of(x, &s, &e);
    ++hist[s];
    *extra += e;
  }
}

const size_t kSizes[] = {0, 1, 2, 7, 8, 9, 1000, 65537, (1u << 20) + 3};

}  // namespace

TEST(RansCoder, SymbolMappingExact) {
  uint32_t s, e;
  for (int64_t r = -64; r < 64; ++r) {  // the direct range: |r| < 64
    rans_symbol_of<int64_t>(r, &s, &e);
    EXPECT_EQ(s, uint32_t(r >= 0 ? 2 * r : -2 * r - 1));
    EXPECT_EQ(e, 0u);
  }
  rans_symbol_of<int32_t>(64, &s, &e);  // z = 128: L = 8, next bit 0
  EXPECT_EQ(s, 128u);
  EXPECT_EQ(e, 6u);
  rans_symbol_of<int32_t>(96, &s, &e);  // z = 192: L = 8, next bit 1
  EXPECT_EQ(s, 129u);
  EXPECT_EQ(e, 6u);
  rans_symbol_of<int32_t>(std::numeric_limits<int32_t>::min(), &s, &e);  // z = 2^32-1
  EXPECT_EQ(s, rans_max_symbol(32));
  EXPECT_EQ(e, 30u);
  rans_symbol_of<int64_t>(std::numeric_limits<int64_t>::min(), &s, &e);  // z = 2^64-1
  EXPECT_EQ(s, rans_max_symbol(64));
  EXPECT_EQ(s, 241u);
  EXPECT_EQ(e, 62u);
  rans_symbol_of<int64_t>(std::numeric_limits<int64_t>::max(), &s, &e);  // z = 2^64-2
  EXPECT_EQ(s, 241u);
  // Inverse of the mapping for random values of every bit length.
  std::mt19937_64 g(1);
  for (int k = 0; k < 20000; ++k) {
    const uint64_t z = g() >> (g() % 64);
    uint32_t sym, nb;
    uint64_t v;
    rans_map_zigzag(z, &sym, &nb, &v);
    ASSERT_LT(sym, uint32_t(kRansAlphabet));
    uint64_t back;
    if (sym < kRansDirect) {
      back = sym;
    } else {
      const uint32_t j = sym - kRansDirect, L = 8 + j / 2;
      ASSERT_EQ(nb, L - 2);
      back = (uint64_t(2 | (j & 1)) << (L - 2)) | v;
    }
    ASSERT_EQ(back, z);
  }
}

TEST(RansCoder, NormalizeSumsAndKeepsSymbols) {
  std::mt19937 g(3);
  for (int t = 0; t < 200; ++t) {
    uint32_t hist[kRansAlphabet] = {}, freq[kRansAlphabet];
    const int m = 1 + int(g() % kRansAlphabet);
    uint64_t total = 0;
    for (int k = 0; k < m; ++k) {
      const uint32_t c = (t % 3 == 0) ? 1 : uint32_t(g() % 1000000);
      hist[g() % kRansAlphabet] += c;
    }
    for (uint32_t c : hist) total += c;
    if (!total) continue;
    rans_normalize(hist, total, freq);
    uint32_t sum = 0;
    for (int s = 0; s < kRansAlphabet; ++s) {
      sum += freq[s];
      EXPECT_EQ(freq[s] > 0, hist[s] > 0);
    }
    EXPECT_EQ(sum, 1u << kRansScaleBits);
  }
}

TEST(RansCoder, RoundTripGaussian32) {
  for (size_t n : kSizes)
    for (double sd : {1.0, 10.0, 60.0, 1e3, 1e4}) round_trip(gaussian<int32_t>(n, sd, uint32_t(n + sd)));
}

TEST(RansCoder, RoundTripGaussian64) {
  for (size_t n : kSizes)
    for (double sd : {1.0, 60.0, 1e4, 1e12}) round_trip(gaussian<int64_t>(n, sd, uint32_t(n + sd)));
}

TEST(RansCoder, RoundTripSmoothField) {
  for (size_t n : {size_t(1000), size_t(65537), size_t(1) << 20}) {
    round_trip(smooth_residuals<int32_t>(n, 5));
    round_trip(smooth_residuals<int64_t>(n, 6));
  }
}

TEST(RansCoder, RoundTripConstantAndSingleSymbol) {
  for (size_t n : kSizes) {
    const size_t z32 = round_trip(std::vector<int32_t>(n, 0));
    if (n > 0) {
      EXPECT_LE(z32, 80u);  // a single symbol costs no rANS words
    }
    round_trip(std::vector<int64_t>(n, 0));
    round_trip(std::vector<int32_t>(n, -7));
    round_trip(std::vector<int32_t>(n, std::numeric_limits<int32_t>::min()));  // one bucket, 30 extra bits each
    round_trip(std::vector<int64_t>(n, std::numeric_limits<int64_t>::max()));
  }
}

TEST(RansCoder, RoundTripFullRange) {
  for (size_t n : kSizes) {
    round_trip(full_range<int32_t>(n, 11));
    round_trip(full_range<int64_t>(n, 12));
  }
  // Every bit length, both signs, for both widths.
  std::vector<int64_t> v64;
  std::vector<int32_t> v32;
  for (int b = 0; b < 64; ++b)
    for (int64_t d : {-1, 0, 1}) {
      const uint64_t x = (uint64_t(1) << b) + uint64_t(d);  // wrapping, no signed overflow
      v64.push_back(int64_t(x));
      v64.push_back(int64_t(0 - x));
      v32.push_back(int32_t(uint32_t(x)));
      v32.push_back(int32_t(uint32_t(0 - x)));
    }
  round_trip(v64);
  round_trip(v32);
}

TEST(RansCoder, MixedSparse) {
  // Mostly zeros with rare large outliers (skewed table, freq-1 symbols).
  std::mt19937_64 g(9);
  std::vector<int64_t> v(300001, 0);
  for (auto& x : v)
    if (g() % 1000 == 0) x = int64_t(g());
  round_trip(v);
  std::vector<int32_t> w(300001, 0);
  for (auto& x : w)
    if (g() % 5000 == 0) x = int32_t(g() % 100000) - 50000;
  round_trip(w);
}

TEST(RansCoder, CompressesNearEntropy) {
  // Gaussian std 10: entropy of the rounded Gaussian ~ 5.37 bits.
  const auto r = gaussian<int32_t>(1 << 20, 10.0, 21);
  const size_t bytes = round_trip(r);
  const double bits = 8.0 * double(bytes) / double(r.size());
  const double h = std::log2(10.0 * std::sqrt(2 * M_PI * M_E));
  EXPECT_LT(bits, h + 0.03);
  std::printf("gaussian sd=10: %.4f bits/value (entropy ~%.4f), ratio %.2fx vs int32\n", bits, h, 32.0 / bits);
}

TEST(RansCoder, CapacityIsRespected) {
  const auto r = gaussian<int32_t>(5000, 300.0, 4);
  std::vector<uint8_t> buf(worst_case(r.size(), 4));
  const size_t bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  std::vector<uint8_t> exact(bytes + 64, 0xEE);
  EXPECT_EQ(rans_encode(r.data(), r.size(), exact.data(), bytes), bytes);
  for (size_t k = bytes; k < exact.size(); ++k) ASSERT_EQ(exact[k], 0xEE);  // no write past cap
  EXPECT_TRUE(std::memcmp(exact.data(), buf.data(), bytes) == 0);
  for (size_t cap : {size_t(0), size_t(10), size_t(40), bytes / 2, bytes - 2, bytes - 1}) {
    std::vector<uint8_t> small(cap + 64, 0xEE);
    EXPECT_EQ(rans_encode(r.data(), r.size(), small.data(), cap), kNoFit) << cap;
    for (size_t k = cap; k < small.size(); ++k) ASSERT_EQ(small[k], 0xEE);
  }
}

TEST(RansCoder, EstimateIsAccurate) {
  auto check = [](const auto& r, const char* what) {
    using Code = typename std::decay_t<decltype(r)>::value_type;
    uint32_t hist[kRansAlphabet];
    uint64_t extra;
    histogram_of(r, hist, &extra);
    const size_t est = rans_estimate_bytes(hist, r.size(), extra, r.size());
    std::vector<uint8_t> buf(worst_case(r.size(), sizeof(Code)));
    const size_t real = rans_encode(r.data(), r.size(), buf.data(), buf.size());
    ASSERT_NE(real, kNoFit);
    const double err = std::fabs(double(est) - double(real)) / double(real);
    EXPECT_LT(err, 0.05) << what << " n=" << r.size() << " est=" << est << " real=" << real;
    // Sampled histogram (every 8th value): still close.
    uint32_t hs[kRansAlphabet] = {};
    uint64_t xs = 0, ns = 0;
    for (size_t i = 0; i < r.size(); i += 8) {
      uint32_t s, e;
      rans_symbol_of(r[i], &s, &e);
      ++hs[s];
      xs += e;
      ++ns;
    }
    const size_t est8 = rans_estimate_bytes(hs, ns, xs, r.size());
    EXPECT_LT(std::fabs(double(est8) - double(real)) / double(real), 0.08) << what << " (sampled)";
  };
  for (size_t n : {size_t(65536), size_t(1) << 20}) {
    for (double sd : {1.0, 5.0, 60.0, 1e3, 1e4}) check(gaussian<int32_t>(n, sd, 7), "gaussian32");
    check(gaussian<int64_t>(n, 1e6, 8), "gaussian64");
    check(smooth_residuals<int32_t>(n, 9), "smooth32");
    check(smooth_residuals<int32_t>(n, 9, 1e-5), "smooth32 fine");
    check(smooth_residuals<int64_t>(n, 10), "smooth64");
  }
  uint32_t none[kRansAlphabet] = {};
  EXPECT_EQ(rans_estimate_bytes(none, 0, 0, 0), 0u);
}

TEST(RansCoder, BytesRoundTrip) {
  std::mt19937 g(13);
  for (size_t n : kSizes) {
    std::vector<uint8_t> v(n);
    std::geometric_distribution<int> d(0.3);
    for (auto& x : v) x = uint8_t(120 + std::min(d(g), 100));
    for (int variant = 0; variant < 3; ++variant) {
      if (variant == 1)
        for (auto& x : v) x = uint8_t(g());
      if (variant == 2) std::fill(v.begin(), v.end(), uint8_t(255));
      std::vector<uint8_t> buf(worst_case(n, 1));
      const size_t bytes = rans_encode_bytes(v.data(), n, buf.data(), buf.size());
      ASSERT_NE(bytes, kNoFit);
      std::vector<uint8_t> out(n + 1, 0x77);
      ASSERT_EQ(rans_decode_bytes(buf.data(), bytes, n, out.data()), Status::Ok);
      EXPECT_EQ(out[n], 0x77);
      out.pop_back();
      EXPECT_TRUE(out == v);
    }
  }
}

TEST(RansCoder, WrongCountOrLengthIsCorrupt) {
  const auto r = gaussian<int32_t>(1000, 50.0, 3);
  std::vector<uint8_t> buf(worst_case(r.size(), 4));
  const size_t bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  std::vector<int32_t> out(2000);
  EXPECT_EQ(rans_decode(buf.data(), bytes, 999, out.data()), Status::Corrupt);
  EXPECT_EQ(rans_decode(buf.data(), bytes, 1001, out.data()), Status::Corrupt);
  EXPECT_EQ(rans_decode(buf.data(), bytes + 1, 1000, out.data()), Status::Corrupt);
  EXPECT_EQ(rans_decode<int32_t>(buf.data(), 5, 0, out.data()), Status::Corrupt);
  EXPECT_EQ(rans_decode<int32_t>(buf.data(), 0, 0, out.data()), Status::Ok);
  EXPECT_EQ(rans_decode<int32_t>(buf.data(), 0, 5, out.data()), Status::Corrupt);
  // An int64 payload with 64-bit symbols is not a valid int32 payload.
  const auto big = full_range<int64_t>(100, 2);
  std::vector<uint8_t> b64(worst_case(100, 8));
  const size_t n64 = rans_encode(big.data(), big.size(), b64.data(), b64.size());
  EXPECT_EQ(rans_decode(b64.data(), n64, 100, out.data()), Status::Corrupt);
}

namespace {

// Decodes a damaged payload: must not crash (ASan checks bounds) and must
// either fail or produce n values.
template <class Code>
int decode_damaged(const std::vector<uint8_t>& p, size_t n) {
  std::vector<uint8_t> copy(p);  // exact-size heap block: ASan catches overreads
  std::vector<Code> out(n);
  return rans_decode(copy.data(), copy.size(), n, out.data()) == Status::Ok ? 1 : 0;
}

template <class Code>
void fuzz_payload(const std::vector<Code>& r) {
  std::vector<uint8_t> buf(worst_case(r.size(), sizeof(Code)));
  const size_t bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  buf.resize(bytes);
  for (size_t k = 0; k < bytes; ++k)  // every truncation
    EXPECT_EQ(decode_damaged<Code>(std::vector<uint8_t>(buf.begin(), buf.begin() + k), r.size()), 0) << k;
  int accepted = 0;
  for (size_t k = 0; k < bytes; ++k)  // bit flips at every byte
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> d(buf);
      d[k] ^= uint8_t(1u << bit);
      accepted += decode_damaged<Code>(d, r.size());
    }
  std::printf("bit flips accepted (decoded to other values): %d of %zu\n", accepted, 8 * bytes);
  std::mt19937 g{uint32_t(bytes)};
  for (int t = 0; t < 300; ++t) {  // random bytes, random lengths
    std::vector<uint8_t> d(g() % (bytes + 64));
    for (auto& x : d) x = uint8_t(g());
    if (t % 2 && !d.empty())
      std::memcpy(d.data(), buf.data(), std::min(d.size(), size_t(40)));  // a valid-looking table
    decode_damaged<Code>(d, r.size());
  }
}

}  // namespace

TEST(RansCoder, MalformedPayloads) {
  fuzz_payload(gaussian<int32_t>(300, 40.0, 1));
  fuzz_payload(gaussian<int64_t>(200, 1e5, 2));
  fuzz_payload(full_range<int64_t>(50, 3));
  fuzz_payload(std::vector<int32_t>(100, 0));
}

TEST(RansCoder, TableCorruption) {
  const auto r = gaussian<int32_t>(2000, 3.0, 17);
  std::vector<uint8_t> buf(worst_case(r.size(), 4));
  const size_t bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
  buf.resize(bytes);
  std::vector<int32_t> out(r.size());
  {  // frequencies no longer sum to 2^12
    auto d = buf;
    d[32] = uint8_t(d[32] ^ 0x01);
    EXPECT_EQ(rans_decode(d.data(), d.size(), r.size(), out.data()), Status::Corrupt);
  }
  {  // presence bitmap gains a symbol
    auto d = buf;
    d[31] |= 0x80;
    EXPECT_EQ(rans_decode(d.data(), d.size(), r.size(), out.data()), Status::Corrupt);
  }
  {  // presence bitmap empty
    auto d = buf;
    std::memset(d.data(), 0, 32);
    EXPECT_EQ(rans_decode(d.data(), d.size(), r.size(), out.data()), Status::Corrupt);
  }
  {  // a symbol too large for int32 (rans_max_symbol(32) = 177), valid for int64
    std::vector<uint8_t> d(32, 0);
    d[178 / 8] = uint8_t(1u << (178 % 8));
    d.push_back(0xFF);  // freq - 1 = 4095 as a 2-byte varint
    d.push_back(0x1F);
    auto push32 = [&](uint32_t v) {
      for (int k = 0; k < 4; ++k) d.push_back(uint8_t(v >> (8 * k)));
    };
    push32(20);  // extra bytes: 5 values x 31 bits = 155 bits
    push32(0);   // no rANS words: a single symbol
    for (int k = 0; k < 8; ++k) push32(1u << 16);
    d.resize(d.size() + 20, 0);
    EXPECT_EQ(rans_decode(d.data(), d.size(), 5, out.data()), Status::Corrupt);
    std::vector<int64_t> o64(5);
    ASSERT_EQ(rans_decode(d.data(), d.size(), 5, o64.data()), Status::Ok);
    EXPECT_EQ(o64[4], int64_t(1) << 31);  // z = 2^32
    d[d.size() - 1] = 0x80;               // a padding bit set
    EXPECT_EQ(rans_decode(d.data(), d.size(), 5, o64.data()), Status::Corrupt);
    d[d.size() - 1] = 0;
    d[44] = 0;  // state 0 (at offset 42) becomes 0, below 2^16
    EXPECT_EQ(rans_decode(d.data(), d.size(), 5, o64.data()), Status::Corrupt);
  }
}

TEST(RansCoder, Speed) {
  // One core; 4-byte residuals. Reported, not asserted (machines differ).
  auto bench = [](const std::vector<int32_t>& r, const char* what) {
    std::vector<uint8_t> buf(worst_case(r.size(), 4));
    std::vector<int32_t> out(r.size());
    size_t bytes = 0;
    double te = 1e9, td = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = cpu_seconds();
      bytes = rans_encode(r.data(), r.size(), buf.data(), buf.size());
      const double t1 = cpu_seconds();
      ASSERT_EQ(rans_decode(buf.data(), bytes, r.size(), out.data()), Status::Ok);
      const double t2 = cpu_seconds();
      te = std::min(te, t1 - t0);
      td = std::min(td, t2 - t1);
    }
    const double mb = 4.0 * double(r.size()) / 1e6;
    std::printf("rans %-18s n=%zu ratio %.2fx  encode %.0f MB/s  decode %.0f MB/s\n", what, r.size(),
                4.0 * double(r.size()) / double(bytes), mb / te, mb / td);
  };
  const size_t n = size_t(1) << 20;
  bench(gaussian<int32_t>(n, 3.0, 1), "gaussian sd=3");
  bench(gaussian<int32_t>(n, 30.0, 1), "gaussian sd=30");
  bench(gaussian<int32_t>(n, 60.0, 1), "gaussian sd=60");
  bench(gaussian<int32_t>(n, 1e4, 1), "gaussian sd=1e4");
  bench(smooth_residuals<int32_t>(n, 2), "smooth field");
  bench(gaussian<int32_t>(65536, 30.0, 1), "gaussian sd=30 64K");
}

namespace {
// The residual kinds of the fused paths' tests: without extra bits (narrow
// Gaussian), with them (wide), the full range with INT_MIN, a smooth field's.
std::vector<int32_t> residual_kind(int kind, size_t n, uint32_t seed) {
  switch (kind) {
    case 0: return gaussian<int32_t>(n, 3.0, seed);
    case 1: return gaussian<int32_t>(n, 300.0, seed);
    case 2: return full_range<int32_t>(n, seed);
    default: return smooth_residuals<int32_t>(n, seed);
  }
}
}  // namespace

// rans_decode_add (decode, the Delta predictors' inverse and the add in one
// pass) against its passes one after the other: rans_decode, reconstruct, the
// add. Residuals with and without extra bits (narrow and wide Gaussians, the
// full range with INT_MIN), lengths around the 32-value blocks of the vector
// path, into another buffer and in place.
TEST(RansCoder, DecodeAddMatchesItsPasses) {
  std::mt19937_64 rng(31);
  const size_t lengths[] = {0, 1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 100, 1000, 4133, 65537};
  const Predictor preds[] = {Predictor::None, Predictor::Delta1, Predictor::Delta2};
  for (const size_t n : lengths) {
    for (int kind = 0; kind < 4; ++kind) {
      const auto r = residual_kind(kind, n, uint32_t(rng()));
      std::vector<uint8_t> buf(worst_case(n, 4));
      const size_t len = rans_encode(r.data(), n, buf.data(), buf.size());
      ASSERT_NE(len, kNoFit);
      for (const Predictor p : preds) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " kind=" << kind << " predictor=" << int(p));
        std::vector<int32_t> q(n), local(n), to(n + 1, 0x5A), expect(n);
        reconstruct(r.data(), n, p, 0, 0, q.data());
        for (size_t i = 0; i < n; ++i) {
          local[i] = int32_t(rng());
          expect[i] = int32_t(uint32_t(local[i]) + uint32_t(q[i]));
        }
        ASSERT_EQ(rans_decode_add(buf.data(), len, n, p, local.data(), to.data()), Status::Ok);
        EXPECT_EQ(to.back(), 0x5A);  // nothing past n
        to.pop_back();
        ASSERT_EQ(to, expect);
        ASSERT_EQ(rans_decode_add(buf.data(), len, n, p, local.data(), local.data()), Status::Ok);
        ASSERT_EQ(local, expect);
      }
    }
  }
  std::vector<int32_t> v(64, 1), out(64);
  std::vector<uint8_t> b(worst_case(64, 4));
  const size_t len = rans_encode(v.data(), v.size(), b.data(), b.size());
  EXPECT_EQ(rans_decode_add(b.data(), len, v.size(), Predictor::Lorenzo2D, v.data(), out.data()), Status::Unsupported);
}

// rans_encode_predicted (the Delta residuals formed in the symbol pass)
// against its passes one after the other: predict, then rans_encode. The
// same residual kinds and lengths (around the 8-value groups and the first
// group, whose residuals come from predict_range), the capacity rule.
TEST(RansCoder, EncodePredictedMatchesItsPasses) {
  std::mt19937_64 rng(41);
  const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000, 4133, 65537};
  const Predictor preds[] = {Predictor::None, Predictor::Delta1, Predictor::Delta2};
  for (const size_t n : lengths) {
    for (int kind = 0; kind < 4; ++kind) {
      const auto r = residual_kind(kind, n, uint32_t(rng()));
      for (const Predictor p : preds) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " kind=" << kind << " predictor=" << int(p));
        std::vector<int32_t> q(n), back(n);
        reconstruct(r.data(), n, p, 0, 0, q.data());
        predict(q.data(), n, p, 0, 0, back.data());
        ASSERT_EQ(back, r);
        std::vector<uint8_t> want(worst_case(n, 4)), got(want.size() + 1, 0x5A);
        const size_t len = rans_encode(r.data(), n, want.data(), want.size());
        ASSERT_NE(len, kNoFit);
        ASSERT_EQ(rans_encode_predicted(q.data(), n, p, got.data(), want.size()), len);
        ASSERT_TRUE(std::equal(want.begin(), want.begin() + long(len), got.begin()));
        if (len > 0) {  // one byte short does not fit
          ASSERT_EQ(rans_encode_predicted(q.data(), n, p, got.data(), len - 1), kNoFit);
        }
      }
    }
  }
  std::vector<int32_t> v(64, 1);
  std::vector<uint8_t> b(worst_case(64, 4));
  EXPECT_EQ(rans_encode_predicted(v.data(), v.size(), Predictor::Lorenzo2D, b.data(), b.size()), kNoFit);
}

// rans_decode_add on damaged payloads: Corrupt exactly where rans_decode says
// so, else the sum of what rans_decode gives.
TEST(RansCoder, DecodeAddOfDamagedPayloads) {
  std::mt19937_64 rng(37);
  for (int it = 0; it < 2000; ++it) {
    const size_t n = 1 + rng() % 300;
    const auto r = gaussian<int32_t>(n, it % 2 ? 2.0 : 500.0, uint32_t(rng()));
    const Predictor p = Predictor(rng() % 3);  // None, Delta1, Delta2
    std::vector<uint8_t> buf(worst_case(n, 4));
    size_t len = rans_encode(r.data(), n, buf.data(), buf.size());
    ASSERT_NE(len, kNoFit);
    switch (rng() % 3) {  // flip a bit, cut the end, or add a byte
      case 0: buf[rng() % len] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: len -= 1 + rng() % len; break;
      default: buf[len++] = uint8_t(rng()); break;
    }
    std::vector<int32_t> dec(n), local(n), to(n);
    for (auto& x : local) x = int32_t(rng());
    const Status want = rans_decode(buf.data(), len, n, dec.data());
    ASSERT_EQ(rans_decode_add(buf.data(), len, n, p, local.data(), to.data()), want) << "it=" << it;
    if (want != Status::Ok) continue;
    reconstruct(dec.data(), n, p, 0, 0, dec.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(to[i], int32_t(uint32_t(local[i]) + uint32_t(dec[i]))) << i;
  }
}
