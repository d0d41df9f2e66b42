// Lossless float coder (FloatExp): docs/FORMAT.md, "FloatExp".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_coder.hpp"
#include "codec/rans_coder.hpp"

using namespace ncclz::codec;

namespace {

// CPU time of this thread: speeds stay meaningful on a loaded machine.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

uint16_t to_bf16(float f) {  // round to nearest even (NaN kept quiet)
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

uint16_t to_f16(float f) {  // truncating conversion, good enough for test data
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int e = int((b >> 23) & 0xFF) - 127 + 15;
  const uint32_t m = b & 0x7FFFFFu;
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    return uint16_t(sign | ((m | 0x800000u) >> (14 - e)));
  }
  if (e >= 31) return uint16_t(sign | 0x7C00u);
  return uint16_t(sign | (uint32_t(e) << 10) | (m >> 13));
}

// n values of type t as raw bytes: Gaussian with the given std.
std::vector<uint8_t> gaussian_bytes(ElemType t, size_t n, double sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, float(sd));
  std::vector<uint8_t> v(n * elem_size(t));
  for (size_t i = 0; i < n; ++i) {
    const float f = d(g);
    if (t == ElemType::F32) std::memcpy(&v[4 * i], &f, 4);
    if (t == ElemType::BF16) {
      const uint16_t h = to_bf16(f);
      std::memcpy(&v[2 * i], &h, 2);
    }
    if (t == ElemType::F16) {
      const uint16_t h = to_f16(f);
      std::memcpy(&v[2 * i], &h, 2);
    }
  }
  return v;
}

std::vector<uint8_t> random_bits(ElemType t, size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n * elem_size(t));
  for (auto& x : v) x = uint8_t(g());
  return v;
}

size_t round_trip(const std::vector<uint8_t>& v, ElemType t) {
  const size_t n = v.size() / elem_size(t);
  std::vector<uint8_t> buf(1024 + 2 * v.size());
  const size_t bytes = floatexp_encode(v.data(), t, n, buf.data(), buf.size());
  EXPECT_NE(bytes, kNoFit);
  if (bytes == kNoFit) return 0;
  std::vector<uint8_t> out(v.size() + 4, 0xA5);
  EXPECT_EQ(floatexp_decode(buf.data(), bytes, t, n, out.data()), Status::Ok);
  for (size_t k = v.size(); k < out.size(); ++k) EXPECT_EQ(out[k], 0xA5);
  out.resize(v.size());
  EXPECT_TRUE(out == v);
  return bytes;
}

const ElemType kTypes[] = {ElemType::F32, ElemType::BF16, ElemType::F16};
const size_t kSizes[] = {0, 1, 2, 7, 8, 9, 15, 17, 1000, 65537, (1u << 20) + 3};

}  // namespace

TEST(FloatCoder, RoundTripGaussian) {
  for (ElemType t : kTypes)
    for (size_t n : kSizes)
      for (double sd : {1e-3, 1.0, 1e3}) round_trip(gaussian_bytes(t, n, sd, uint32_t(n)), t);
}

TEST(FloatCoder, RoundTripRandomBits) {
  for (ElemType t : kTypes)
    for (size_t n : kSizes) round_trip(random_bits(t, n, uint32_t(n + 1)), t);
}

TEST(FloatCoder, EveryBitClass) {
  // +-0, denormals, normals, +-Inf, quiet and signalling NaNs with payloads.
  const uint32_t f32[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3F800000u,
                          0xBF800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                          0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu, 0xFFFFFFFFu, 0x7FFFFFFFu};
  std::vector<uint8_t> v(sizeof(f32));
  std::memcpy(v.data(), f32, sizeof(f32));
  round_trip(v, ElemType::F32);
  // Every 16-bit pattern, for both 16-bit types.
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t k = 0; k < 65536; ++k) {
    all[2 * k] = uint8_t(k);
    all[2 * k + 1] = uint8_t(k >> 8);
  }
  round_trip(all, ElemType::BF16);
  round_trip(all, ElemType::F16);
  // Every f32 exponent with edge mantissas and both signs.
  std::vector<uint8_t> ex;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0u, 1u, 0x400000u, 0x7FFFFFu})
      for (uint32_t s : {0u, 1u}) {
        const uint32_t b = (s << 31) | (e << 23) | m;
        for (int k = 0; k < 4; ++k) ex.push_back(uint8_t(b >> (8 * k)));
      }
  round_trip(ex, ElemType::F32);
}

TEST(FloatCoder, Ratios) {
  const size_t n = size_t(1) << 20;
  for (ElemType t : kTypes) {
    const auto v = gaussian_bytes(t, n, 0.02, 3);
    const size_t bytes = round_trip(v, t);
    const double ratio = double(v.size()) / double(bytes);
    std::printf("floatexp %s gaussian: ratio %.3fx\n",
                t == ElemType::F32 ? "f32 " : (t == ElemType::BF16 ? "bf16" : "f16 "), ratio);
    if (t == ElemType::BF16) {
      EXPECT_GT(ratio, 1.42);
      EXPECT_LT(ratio, 1.56);
    }
    if (t == ElemType::F32) {
      EXPECT_GT(ratio, 1.14);
      EXPECT_LT(ratio, 1.22);
    }
    if (t == ElemType::F16) {
      EXPECT_GT(ratio, 1.10);
    }
  }
}

TEST(FloatCoder, EstimateIsAccurate) {
  for (ElemType t : kTypes)
    for (size_t n : {size_t(65536), size_t(1) << 20}) {
      const auto v = gaussian_bytes(t, n, 1.0, 5);
      std::vector<uint8_t> buf(1024 + 2 * v.size());
      const size_t real = floatexp_encode(v.data(), t, n, buf.data(), buf.size());
      for (uint32_t every : {1u, 8u, 64u}) {
        const size_t est = floatexp_estimate_bytes(v.data(), t, n, every);
        EXPECT_LT(std::fabs(double(est) - double(real)) / double(real), 0.02) << every << " " << est << " " << real;
      }
    }
  EXPECT_EQ(floatexp_estimate_bytes(nullptr, ElemType::I32, 10, 1), kNoFit);
  EXPECT_EQ(floatexp_estimate_bytes(nullptr, ElemType::F32, 0, 1), 0u);
}

TEST(FloatCoder, CapacityAndTypes) {
  const auto v = gaussian_bytes(ElemType::BF16, 3000, 1.0, 9);
  std::vector<uint8_t> buf(1024 + 2 * v.size());
  const size_t bytes = floatexp_encode(v.data(), ElemType::BF16, 3000, buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  std::vector<uint8_t> exact(bytes + 32, 0xEE);
  EXPECT_EQ(floatexp_encode(v.data(), ElemType::BF16, 3000, exact.data(), bytes), bytes);
  EXPECT_TRUE(std::memcmp(exact.data(), buf.data(), bytes) == 0);
  for (size_t k = bytes; k < exact.size(); ++k) ASSERT_EQ(exact[k], 0xEE);
  for (size_t cap : {size_t(0), size_t(3), size_t(3000), bytes - 1}) {
    std::vector<uint8_t> small(cap + 32, 0xEE);
    EXPECT_EQ(floatexp_encode(v.data(), ElemType::BF16, 3000, small.data(), cap), kNoFit);
    for (size_t k = cap; k < small.size(); ++k) ASSERT_EQ(small[k], 0xEE);
  }
  EXPECT_EQ(floatexp_encode(v.data(), ElemType::I32, 10, buf.data(), buf.size()), kNoFit);
  EXPECT_EQ(floatexp_encode(v.data(), ElemType::F64, 10, buf.data(), buf.size()), kNoFit);
  std::vector<uint8_t> out(v.size());
  EXPECT_EQ(floatexp_decode(buf.data(), bytes, ElemType::I64, 10, out.data()), Status::Unsupported);
  EXPECT_EQ(floatexp_decode(buf.data(), bytes, ElemType::BF16, 2999, out.data()), Status::Corrupt);
  EXPECT_EQ(floatexp_decode(buf.data(), bytes - 1, ElemType::BF16, 3000, out.data()), Status::Corrupt);
  EXPECT_EQ(floatexp_decode(buf.data(), 0, ElemType::BF16, 0, out.data()), Status::Ok);
}

TEST(FloatCoder, F16ExponentAbove31IsCorrupt) {
  // A payload whose byte stream carries exponent 32 is not an f16 payload.
  std::vector<uint8_t> e(9, 31);
  e[4] = 32;
  std::vector<uint8_t> buf(512, 0);
  const size_t eb = rans_encode_bytes(e.data(), e.size(), buf.data() + 4, 400);
  ASSERT_NE(eb, kNoFit);
  store_u32(buf.data(), uint32_t(eb));
  const size_t len = 4 + eb + floatexp_plane_bytes(ElemType::F16, 9);
  std::vector<uint8_t> out(18);
  EXPECT_EQ(floatexp_decode(buf.data(), len, ElemType::F16, 9, out.data()), Status::Corrupt);
  e[4] = 31;
  const size_t eb2 = rans_encode_bytes(e.data(), e.size(), buf.data() + 4, 400);
  ASSERT_NE(eb2, kNoFit);
  store_u32(buf.data(), uint32_t(eb2));
  const size_t len2 = 4 + eb2 + floatexp_plane_bytes(ElemType::F16, 9);
  std::memset(buf.data() + 4 + eb2, 0, 13);
  EXPECT_EQ(floatexp_decode(buf.data(), len2, ElemType::F16, 9, out.data()), Status::Ok);
  buf[len2 - 1] = 0x80;  // a padding bit of the plane (9 x 11 bits = 99 of 104)
  EXPECT_EQ(floatexp_decode(buf.data(), len2, ElemType::F16, 9, out.data()), Status::Corrupt);
}

namespace {

int decode_damaged(const std::vector<uint8_t>& p, ElemType t, size_t n) {
  std::vector<uint8_t> copy(p);
  std::vector<uint8_t> out(n * elem_size(t));
  return floatexp_decode(copy.data(), copy.size(), t, n, out.data()) == Status::Ok ? 1 : 0;
}

}  // namespace

TEST(FloatCoder, MalformedPayloads) {
  for (ElemType t : kTypes) {
    const size_t n = 77;
    const auto v = gaussian_bytes(t, n, 1.0, 4);
    std::vector<uint8_t> buf(1024 + 2 * v.size());
    const size_t bytes = floatexp_encode(v.data(), t, n, buf.data(), buf.size());
    ASSERT_NE(bytes, kNoFit);
    buf.resize(bytes);
    for (size_t k = 0; k < bytes; ++k)
      EXPECT_EQ(decode_damaged(std::vector<uint8_t>(buf.begin(), buf.begin() + k), t, n), 0) << k;
    for (size_t k = 0; k < bytes; ++k)
      for (int bit = 0; bit < 8; ++bit) {
        auto d = buf;
        d[k] ^= uint8_t(1u << bit);
        decode_damaged(d, t, n);  // error or some values; never a crash
      }
    std::mt19937 g{uint32_t(bytes)};
    for (int r = 0; r < 200; ++r) {
      std::vector<uint8_t> d(g() % (bytes + 32));
      for (auto& x : d) x = uint8_t(g());
      if (r % 2 && d.size() >= 8) std::memcpy(d.data(), buf.data(), 8);
      decode_damaged(d, t, n);
    }
  }
}

// The split's bytes against docs/FORMAT.md's table, written out value by value
// here, for every length around the vector loops' steps (8 float32, 32 and 16
// bfloat16 values), random bit patterns; and the join of random exponent and
// plane bytes back to the values those bytes define. Guards the vector paths'
// byte order, and that none writes outside its buffers.
TEST(FloatCoder, SplitAndJoinFollowTheFormat) {
  std::mt19937_64 g(77);
  for (ElemType t : {ElemType::F32, ElemType::BF16}) {
    const bool f32 = t == ElemType::F32;
    const size_t vb = f32 ? 4 : 2, pb = f32 ? 3 : 1;
    for (size_t n = 0; n < 140; n += (n < 70 ? 1 : 7)) {
      std::vector<uint8_t> x(n * vb);
      for (auto& b : x) b = uint8_t(g());
      std::vector<uint8_t> e(n + 64, 0xEE), plane(n * pb + 64, 0xEE);
      floatexp_split(x.data(), t, n, e.data(), plane.data());
      for (size_t i = 0; i < n; ++i) {
        uint32_t b = 0;
        for (size_t k = 0; k < vb; ++k) b |= uint32_t(x[vb * i + k]) << (8 * k);
        const uint32_t sign = b >> (8 * vb - 1);
        const uint32_t want_e = f32 ? (b >> 23) & 0xFF : (b >> 7) & 0xFF;
        const uint32_t want_p = f32 ? (sign << 23) | (b & 0x7FFFFF) : (sign << 7) | (b & 0x7F);
        ASSERT_EQ(e[i], want_e) << "n " << n << " i " << i;
        uint32_t p = 0;
        for (size_t k = 0; k < pb; ++k) p |= uint32_t(plane[pb * i + k]) << (8 * k);
        ASSERT_EQ(p, want_p) << "n " << n << " i " << i;
      }
      for (size_t k = n; k < e.size(); ++k) ASSERT_EQ(e[k], 0xEE) << "exponent bytes past n " << n;
      for (size_t k = n * pb; k < plane.size(); ++k) ASSERT_EQ(plane[k], 0xEE) << "plane bytes past n " << n;
      // Join: random exponents and planes to values, then split back to the same bytes.
      for (size_t i = 0; i < n; ++i) e[i] = uint8_t(g());
      for (size_t k = 0; k < n * pb; ++k) plane[k] = uint8_t(g());
      std::vector<uint8_t> y(n * vb + 64, 0xEE);
      ASSERT_TRUE(floatexp_join(e.data(), plane.data(), t, n, y.data()));
      for (size_t k = n * vb; k < y.size(); ++k) ASSERT_EQ(y[k], 0xEE) << "values past n " << n;
      for (size_t i = 0; i < n; ++i) {
        uint32_t p = 0, b = 0;
        for (size_t k = 0; k < pb; ++k) p |= uint32_t(plane[pb * i + k]) << (8 * k);
        for (size_t k = 0; k < vb; ++k) b |= uint32_t(y[vb * i + k]) << (8 * k);
        const uint32_t want = f32 ? ((p >> 23) << 31) | (uint32_t(e[i]) << 23) | (p & 0x7FFFFF)
                                  : ((p >> 7) << 15) | (uint32_t(e[i]) << 7) | (p & 0x7F);
        ASSERT_EQ(b, want) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(FloatCoder, Speed) {
  const size_t n = size_t(1) << 20;
  for (ElemType t : kTypes) {
    const auto v = gaussian_bytes(t, n, 1.0, 6);
    std::vector<uint8_t> buf(1024 + 2 * v.size()), out(v.size());
    size_t bytes = 0;
    double te = 1e9, td = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = cpu_seconds();
      bytes = floatexp_encode(v.data(), t, n, buf.data(), buf.size());
      const double t1 = cpu_seconds();
      ASSERT_EQ(floatexp_decode(buf.data(), bytes, t, n, out.data()), Status::Ok);
      const double t2 = cpu_seconds();
      te = std::min(te, t1 - t0);
      td = std::min(td, t2 - t1);
    }
    const double mb = double(v.size()) / 1e6;
    std::printf("floatexp %s n=%zu ratio %.3fx  encode %.0f MB/s  decode %.0f MB/s\n",
                t == ElemType::F32 ? "f32 " : (t == ElemType::BF16 ? "bf16" : "f16 "), n,
                double(v.size()) / double(bytes), mb / te, mb / td);
  }
}
