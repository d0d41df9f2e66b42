// Block coder: docs/FORMAT.md, "Block".
//
// Every encoding is checked against a bit-by-bit oracle written here from the
// format text, for every available implementation (scalar, AVX2), and every
// decoding must be exact. Malformed payloads (truncated, extended, random,
// bit-flipped, hand-made inconsistencies) must give Status::Corrupt or, since
// the format is canonical, decode to values that re-encode to the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/predictor.hpp"

using namespace ncclz::codec;

namespace {

std::vector<BlockImpl> impls() {
  std::vector<BlockImpl> v{BlockImpl::Scalar};
  if (block_impl_available(BlockImpl::Avx2)) v.push_back(BlockImpl::Avx2);
  return v;
}

const char* impl_name(BlockImpl i) { return i == BlockImpl::Scalar ? "scalar" : "avx2"; }

// The format, bit by bit.
template <class Code>
std::vector<uint8_t> oracle_encode(const std::vector<Code>& r) {
  using U = std::make_unsigned_t<Code>;
  const size_t n = r.size(), nb = (n + 31) / 32;
  std::vector<uint8_t> out((nb + 1) / 2, 0);  // width nibbles
  std::vector<uint8_t> esc, body;             // escape bytes, block payloads
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) body.push_back(uint8_t(v >> (8 * i)));
  };
  for (size_t b = 0; b < nb; ++b) {
    U mag[32] = {};
    uint32_t sign = 0;
    U all = 0;
    for (size_t i = 0; i < 32; ++i) {
      const size_t k = b * 32 + i;
      if (k >= n) break;
      const Code v = r[k];
      mag[i] = v < 0 ? U(U(0) - U(v)) : U(v);
      if (v < 0) sign |= 1u << i;
      all |= mag[i];
    }
    int w = 0;
    while (w < int(sizeof(Code) * 8) && (all >> w) != 0) ++w;
    out[b / 2] |= uint8_t((w < 15 ? w : 15) << (b % 2 ? 4 : 0));
    if (w >= 15) esc.push_back(uint8_t(w));
    if (!w) continue;
    put32(sign);
    for (int p = 0; p < w; ++p) {
      uint32_t word = 0;
      for (int i = 0; i < 32; ++i) word |= uint32_t((mag[i] >> p) & 1) << i;
      put32(word);
    }
  }
  out.insert(out.end(), esc.begin(), esc.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Exactly-sized heap copies so that AddressSanitizer sees any overrun.
std::unique_ptr<uint8_t[]> heap_copy(const uint8_t* p, size_t len) {
  std::unique_ptr<uint8_t[]> b(new uint8_t[len ? len : 1]);
  if (len) std::memcpy(b.get(), p, len);
  return b;
}

template <class Code>
std::vector<uint8_t> encode_with(BlockImpl impl, const std::vector<Code>& r) {
  // Worst case: every block escaped at full width, plus the nibbles.
  std::vector<uint8_t> buf(block_nibble_bytes(block_count(r.size())) +
                           block_count(r.size()) * (1 + block_max_payload<Code>()));
  const size_t len = block_encode_with(impl, r.data(), r.size(), buf.data(), buf.size());
  EXPECT_NE(len, kNoFit);
  buf.resize(len == kNoFit ? 0 : len);
  return buf;
}

template <class Code>
Status decode_with(BlockImpl impl, const uint8_t* p, size_t len, size_t n, std::vector<Code>* out) {
  auto src = heap_copy(p, len);
  std::unique_ptr<Code[]> dst(new Code[n ? n : 1]);
  const Status s = block_decode_with(impl, src.get(), len, n, dst.get());
  out->assign(dst.get(), dst.get() + n);
  return s;
}

// Encode with every implementation, compare with the oracle, decode back.
template <class Code>
void check_round_trip(const std::vector<Code>& r) {
  const std::vector<uint8_t> want = oracle_encode(r);
  for (BlockImpl impl : impls()) {
    SCOPED_TRACE(impl_name(impl));
    EXPECT_EQ(block_encoded_bytes_with(impl, r.data(), r.size()), want.size());
    const std::vector<uint8_t> got = encode_with(impl, r);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_TRUE(got == want) << "bytes differ from the oracle, n=" << r.size();
    for (BlockImpl dimpl : impls()) {
      std::vector<Code> back;
      ASSERT_EQ(decode_with(dimpl, got.data(), got.size(), r.size(), &back), Status::Ok) << impl_name(dimpl);
      ASSERT_TRUE(back == r) << "round trip differs, decoder " << impl_name(dimpl);
    }
  }
  EXPECT_EQ(block_encoded_bytes(r.data(), r.size()), want.size());
}

enum class Dist { Zeros, Gauss1, Gauss50, Gauss1e4, Gauss1e9, Full, Sparse, Extremes, MixedWidths };

template <class Code>
std::vector<Code> make(Dist d, size_t n, uint64_t seed) {
  using L = std::numeric_limits<Code>;
  std::mt19937_64 rng(seed);
  std::vector<Code> v(n);
  auto gauss = [&](double s) {
    std::normal_distribution<double> g(0.0, s);
    const double lim = double(L::max());
    for (auto& x : v) x = Code(std::clamp(std::round(g(rng)), -lim, lim));
  };
  switch (d) {
    case Dist::Zeros: break;
    case Dist::Gauss1: gauss(1); break;
    case Dist::Gauss50: gauss(50); break;
    case Dist::Gauss1e4: gauss(1e4); break;
    case Dist::Gauss1e9: gauss(1e9); break;
    case Dist::Full:
      for (auto& x : v) x = Code(rng());
      break;
    case Dist::Sparse:
      for (auto& x : v)
        if (rng() % 100 == 0) x = Code(int64_t(rng() % 2001) - 1000);
      break;
    case Dist::Extremes: {
      const Code e[] = {L::min(), L::max(), Code(L::min() + 1), Code(-1), Code(0), Code(1)};
      for (auto& x : v) x = e[rng() % 6];
      break;
    }
    case Dist::MixedWidths:
      // Each block gets its own width 0..bits, so every width is exercised.
      for (size_t b = 0; b < n; b += 32) {
        const int w = int(rng() % (sizeof(Code) * 8 + 1));
        for (size_t i = b; i < std::min(n, b + 32); ++i) {
          const uint64_t m = w == 64 ? ~0ull : ((1ull << w) - 1);
          v[i] = Code(rng() & m);
          if (rng() & 1) v[i] = Code(0 - std::make_unsigned_t<Code>(v[i]));
        }
      }
      break;
  }
  return v;
}

const Dist kAllDists[] = {Dist::Zeros, Dist::Gauss1, Dist::Gauss50,  Dist::Gauss1e4,   Dist::Gauss1e9,
                          Dist::Full,  Dist::Sparse, Dist::Extremes, Dist::MixedWidths};

template <class Code>
void round_trip_all() {
  const size_t sizes[] = {0, 1, 2, 31, 32, 33, 63, 64, 65, 100, 1000, 4097};
  uint64_t seed = 1;
  for (Dist d : kAllDists)
    for (size_t n : sizes) {
      SCOPED_TRACE(testing::Message() << "dist " << int(d) << " n " << n);
      check_round_trip(make<Code>(d, n, seed++));
    }
  for (Dist d : {Dist::Gauss50, Dist::Sparse, Dist::MixedWidths}) {
    SCOPED_TRACE(testing::Message() << "dist " << int(d) << " large");
    check_round_trip(make<Code>(d, (1u << 20) + 13, seed++));
  }
}

}  // namespace

TEST(BlockCoder, RoundTripInt32) { round_trip_all<int32_t>(); }
TEST(BlockCoder, RoundTripInt64) { round_trip_all<int64_t>(); }

TEST(BlockCoder, ExactSizeFormula) {
  // One block of each width: half a byte for the nibble, one escape byte if
  // w >= 15, 4*(w+1) payload bytes if w > 0; a one-block slice rounds the
  // nibble up to a byte.
  auto half = [](int w) { return size_t(1 + (w >= 15 ? 2 : 0) + (w ? 8 * (w + 1) : 0)); };
  auto one = [](int w) { return size_t(1 + (w >= 15 ? 1 : 0) + (w ? 4 * (w + 1) : 0)); };
  for (int w = 0; w <= 32; ++w) {
    std::vector<int32_t> r(32, 0);
    if (w) r[5] = int32_t(w == 32 ? std::numeric_limits<int32_t>::min() : int32_t((1u << (w - 1))));
    EXPECT_EQ(block_cost_halfbytes(r.data(), 32), half(w)) << w;
    EXPECT_EQ(block_cost_bytes(r.data(), 32), one(w)) << w;
    EXPECT_EQ(block_width(r.data(), 32), w);
    for (BlockImpl impl : impls()) EXPECT_EQ(block_encoded_bytes_with(impl, r.data(), r.size()), one(w));
    // Two blocks of width w: one nibble byte.
    std::vector<int32_t> r2(r);
    r2.insert(r2.end(), r.begin(), r.end());
    for (BlockImpl impl : impls()) EXPECT_EQ(block_encoded_bytes_with(impl, r2.data(), r2.size()), 2 * one(w) - 1);
  }
  for (int w = 0; w <= 64; ++w) {
    std::vector<int64_t> r(32, 0);
    if (w) r[31] = w == 64 ? std::numeric_limits<int64_t>::min() : -int64_t(1ull << (w - 1));
    EXPECT_EQ(block_cost_halfbytes(r.data(), 32), half(w)) << w;
    EXPECT_EQ(block_cost_bytes(r.data(), 32), one(w)) << w;
    for (BlockImpl impl : impls()) EXPECT_EQ(block_encoded_bytes_with(impl, r.data(), r.size()), one(w));
  }
  // Zeros: 1000 -> 32 blocks, 16 nibble bytes; 33 -> 2 blocks, 1 byte; 65 -> 3 blocks, 2 bytes.
  std::vector<int32_t> z(1000, 0);
  EXPECT_EQ(block_encoded_bytes(z.data(), z.size()), 16u);
  EXPECT_EQ(block_encoded_bytes(z.data(), 33), 1u);
  EXPECT_EQ(block_encoded_bytes(z.data(), 65), 2u);
  EXPECT_EQ(block_encoded_bytes(z.data(), 1), 1u);
  EXPECT_EQ(block_encoded_bytes(z.data(), 0), 0u);
  // The general formula: ceil(nb/2) + (escaped blocks) + sum of 4*(w+1).
  std::mt19937_64 rng(3);
  for (int it = 0; it < 50; ++it) {
    const size_t n = rng() % 3000;
    std::vector<int64_t> r(n);
    size_t want = (block_count(n) + 1) / 2;
    for (size_t b = 0; b < n; b += 32) {
      const int w = int(rng() % 65);
      for (size_t i = b; i < std::min(n, b + 32); ++i) r[i] = 0;
      if (w) r[b] = w == 64 ? std::numeric_limits<int64_t>::min() : int64_t(1ull << (w - 1));
      want += (w >= 15) + (w ? 4 * (w + 1) : 0);
    }
    for (BlockImpl impl : impls()) EXPECT_EQ(block_encoded_bytes_with(impl, r.data(), n), want);
  }
}

TEST(BlockCoder, HandMadeLayout) {
  // 34 residuals: block 0 = {3, -1, 0 x 29, 5}, block 1 = {0, 0} (zero block).
  std::vector<int32_t> r(34, 0);
  r[0] = 3;
  r[1] = -1;
  r[31] = 5;
  // Width nibbles 3 (low), 0 (high): byte 0x03; no escapes. Block 0: sign = bit 1;
  // magnitudes 3 (lane 0), 1 (lane 1), 5 (lane 31).
  // plane 0: lanes 0, 1, 31 -> 0x80000003; plane 1: lane 0 -> 0x00000001; plane 2: lane 31 -> 0x80000000.
  const std::vector<uint8_t> want = {0x03,  // nibbles

                                     0x02, 0x00, 0x00, 0x00,   // sign
                                     0x03, 0x00, 0x00, 0x80,   // plane 0
                                     0x01, 0x00, 0x00, 0x00,   // plane 1
                                     0x00, 0x00, 0x00, 0x80};  // plane 2
  EXPECT_EQ(oracle_encode(r), want);
  for (BlockImpl impl : impls()) {
    EXPECT_EQ(encode_with(impl, r), want) << impl_name(impl);
    std::vector<int32_t> back;
    EXPECT_EQ(decode_with(impl, want.data(), want.size(), r.size(), &back), Status::Ok);
    EXPECT_EQ(back, r);
  }
  // INT_MIN: magnitude 2^31, w = 32 (escaped: nibble 15, escape byte 32), only plane 31 set.
  std::vector<int32_t> m(1, std::numeric_limits<int32_t>::min());
  for (BlockImpl impl : impls()) {
    const std::vector<uint8_t> got = encode_with(impl, m);
    ASSERT_EQ(got.size(), 2u + 4 * 33);
    EXPECT_EQ(got[0], 0x0F);
    EXPECT_EQ(got[1], 32);
    EXPECT_EQ(load_u32(&got[2]), 1u);  // sign
    for (int b = 0; b < 31; ++b) EXPECT_EQ(load_u32(&got[6 + 4 * b]), 0u);
    EXPECT_EQ(load_u32(&got[6 + 4 * 31]), 1u);
  }
  // int64: -2 in lane 0 of a one-element slice: w = 2, sign 1, planes 0 and 1.
  std::vector<int64_t> s(1, -2);
  const std::vector<uint8_t> want64 = {0x02, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
  for (BlockImpl impl : impls()) EXPECT_EQ(encode_with(impl, s), want64);
  // Escapes in block order: widths 16, 2, 20, 0, 14 -> nibbles 0x2F, 0x0F, 0x0E; escapes 16, 20.
  std::vector<int32_t> e(5 * 32, 0);
  e[0] = 1 << 15;           // w = 16
  e[32 + 7] = -3;           // w = 2
  e[64 + 31] = -(1 << 19);  // w = 20
  e[128 + 1] = 1 << 13;     // w = 14
  const std::vector<uint8_t> head = {0x2F, 0x0F, 0x0E, 16, 20};
  const size_t esize = 3 + 2 + 4 * (17 + 3 + 21 + 15);
  for (BlockImpl impl : impls()) {
    const std::vector<uint8_t> got = encode_with(impl, e);
    ASSERT_EQ(got.size(), esize) << impl_name(impl);
    EXPECT_TRUE(std::equal(head.begin(), head.end(), got.begin())) << impl_name(impl);
    EXPECT_EQ(load_u32(&got[5]), 0u);                // block 0 sign
    EXPECT_EQ(load_u32(&got[5 + 4 + 4 * 15]), 1u);   // block 0 plane 15: lane 0
    EXPECT_EQ(load_u32(&got[5 + 4 * 17]), 1u << 7);  // block 1 sign: lane 7
    EXPECT_EQ(got, oracle_encode(e));
    std::vector<int32_t> back;
    EXPECT_EQ(decode_with(impl, got.data(), got.size(), e.size(), &back), Status::Ok);
    EXPECT_EQ(back, e);
  }
}

TEST(BlockCoder, CapacityIsRespected) {
  for (Dist d : {Dist::Gauss50, Dist::MixedWidths, Dist::Zeros}) {
    const auto r = make<int32_t>(d, 200, 7);
    const auto want = oracle_encode(r);
    for (BlockImpl impl : impls()) {
      for (size_t cap = 0; cap <= want.size() + 1; ++cap) {
        std::unique_ptr<uint8_t[]> buf(new uint8_t[cap ? cap : 1]);
        const size_t len = block_encode_with(impl, r.data(), r.size(), buf.get(), cap);
        if (cap < want.size()) {
          EXPECT_EQ(len, kNoFit) << cap;
        } else {
          ASSERT_EQ(len, want.size());
          EXPECT_EQ(0, std::memcmp(buf.get(), want.data(), len));
        }
      }
    }
    const auto r64 = make<int64_t>(d, 70, 9);
    const auto want64 = oracle_encode(r64);
    for (BlockImpl impl : impls())
      for (size_t cap = 0; cap <= want64.size(); ++cap) {
        std::unique_ptr<uint8_t[]> buf(new uint8_t[cap ? cap : 1]);
        const size_t len = block_encode_with(impl, r64.data(), r64.size(), buf.get(), cap);
        EXPECT_EQ(len, cap < want64.size() ? kNoFit : want64.size());
      }
  }
}

namespace {

// A decoder may accept a payload only if it is the encoding of what it decoded.
template <class Code>
void expect_corrupt_or_canonical(const std::vector<uint8_t>& p, size_t n) {
  for (BlockImpl impl : impls()) {
    std::vector<Code> back;
    const Status s = decode_with(impl, p.data(), p.size(), n, &back);
    if (s == Status::Ok) {
      ASSERT_EQ(oracle_encode(back), p) << impl_name(impl) << ": accepted a non-canonical payload";
    } else {
      ASSERT_EQ(s, Status::Corrupt);
    }
  }
}

template <class Code>
void malformed_suite() {
  for (Dist d : {Dist::Gauss50, Dist::Extremes, Dist::MixedWidths, Dist::Sparse}) {
    for (size_t n : {size_t(1), size_t(31), size_t(45), size_t(96)}) {
      const auto r = make<Code>(d, n, 100 + n);
      const auto good = oracle_encode(r);
      // Truncation at every length, and one byte too many.
      for (size_t len = 0; len < good.size(); ++len)
        for (BlockImpl impl : impls()) {
          std::vector<Code> back;
          EXPECT_EQ(decode_with(impl, good.data(), len, n, &back), Status::Corrupt) << len;
        }
      auto longer = good;
      longer.push_back(0);
      for (BlockImpl impl : impls()) {
        std::vector<Code> back;
        EXPECT_EQ(decode_with(impl, longer.data(), longer.size(), n, &back), Status::Corrupt);
      }
      // Wrong n. One more block can be valid when nb is odd: the unused
      // nibble 0 then reads as a zero block (a canonical encoding of r plus
      // 32 zeros); otherwise the lengths disagree.
      expect_corrupt_or_canonical<Code>(good, n + 32);
      expect_corrupt_or_canonical<Code>(good, n + 64);
      if (block_count(n) % 2 == 0)
        for (BlockImpl impl : impls()) {
          std::vector<Code> back;
          EXPECT_EQ(decode_with(impl, good.data(), good.size(), n + 32, &back), Status::Corrupt);
        }
      // Every single-bit flip.
      for (size_t bit = 0; bit < good.size() * 8; ++bit) {
        auto f = good;
        f[bit / 8] ^= uint8_t(1u << (bit % 8));
        expect_corrupt_or_canonical<Code>(f, n);
      }
    }
  }
  // Random bytes with plausible widths and lengths.
  std::mt19937_64 rng(42);
  for (int it = 0; it < 3000; ++it) {
    const size_t n = rng() % 100;
    const size_t nb = block_count(n);
    std::vector<uint8_t> p((nb + 1) / 2, 0), esc;
    size_t total = p.size();
    for (size_t b = 0; b < nb; ++b) {
      const int w = int(rng() % 4 == 0 ? rng() % 256 : rng() % (sizeof(Code) * 8 + 1));
      p[b / 2] |= uint8_t((w < 15 ? w : 15) << (b % 2 ? 4 : 0));
      if (w >= 15) esc.push_back(uint8_t(rng() % 8 == 0 ? rng() % 15 : w));  // sometimes a bad escape
      total += (w >= 15) + block_payload_bytes(std::min<int>(w, 64));
    }
    if ((nb & 1) && rng() % 8 == 0) p.back() |= uint8_t(1 + rng() % 15) << 4;  // unused nibble
    p.insert(p.end(), esc.begin(), esc.end());
    if (rng() % 3 == 0) total = total + 4 >= 8 ? total + rng() % 9 - 4 : total + rng() % 5;
    while (p.size() < total) p.push_back(uint8_t(rng() % 3 ? 0 : rng()));
    p.resize(total);
    expect_corrupt_or_canonical<Code>(p, n);
  }
  // Pure random bytes.
  for (int it = 0; it < 2000; ++it) {
    const size_t n = rng() % 200;
    std::vector<uint8_t> p(rng() % 300);
    for (auto& b : p) b = uint8_t(rng());
    expect_corrupt_or_canonical<Code>(p, n);
  }
}

}  // namespace

TEST(BlockCoder, MalformedInt32) { malformed_suite<int32_t>(); }
TEST(BlockCoder, MalformedInt64) { malformed_suite<int64_t>(); }

TEST(BlockCoder, HandMadeInconsistencies) {
  auto dec = [&](const std::vector<uint8_t>& p, size_t n) {
    Status last = Status::Ok;
    for (BlockImpl impl : impls()) {
      std::vector<int32_t> back;
      const Status s = decode_with(impl, p.data(), p.size(), n, &back);
      if (impl != BlockImpl::Scalar) {
        EXPECT_EQ(s, last);
      }
      last = s;
    }
    return last;
  };
  auto block = [](uint8_t w, uint32_t sign, std::vector<uint32_t> planes) {
    std::vector<uint8_t> p{uint8_t(w < 15 ? w : 15)};
    if (w >= 15) p.push_back(w);
    auto put = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) p.push_back(uint8_t(v >> (8 * i)));
    };
    put(sign);
    for (uint32_t v : planes) put(v);
    return p;
  };
  // Valid: one block {1, 0 x 31}.
  EXPECT_EQ(dec(block(1, 0, {1}), 32), Status::Ok);
  // w = 33 for int32 (with a matching length): corrupt.
  EXPECT_EQ(dec(block(33, 0, std::vector<uint32_t>(33, 1)), 32), Status::Corrupt);
  // w larger than needed (top plane zero).
  EXPECT_EQ(dec(block(2, 0, {1, 0}), 32), Status::Corrupt);
  // Negative zero: sign bit on a zero magnitude.
  EXPECT_EQ(dec(block(1, 2, {1}), 32), Status::Corrupt);
  // Padding lanes: n = 5, lane 5 nonzero (in a plane, then only in the sign).
  EXPECT_EQ(dec(block(1, 0, {1u | (1u << 5)}), 5), Status::Corrupt);
  EXPECT_EQ(dec(block(1, 1u << 5, {1u | (1u << 5)}), 5), Status::Corrupt);
  EXPECT_EQ(dec(block(1, 0, {1u | (1u << 4)}), 5), Status::Ok);
  // w = 32: +2^31 is not an int32; INT_MIN with extra low bits neither.
  std::vector<uint32_t> pl(32, 0);
  pl[31] = 1;
  EXPECT_EQ(dec(block(32, 1, pl), 32), Status::Ok);  // INT_MIN
  EXPECT_EQ(dec(block(32, 0, pl), 32), Status::Corrupt);
  pl[0] = 1;
  EXPECT_EQ(dec(block(32, 1, pl), 32), Status::Corrupt);
  // Zero-length slice: only an empty payload.
  EXPECT_EQ(dec({}, 0), Status::Ok);
  EXPECT_EQ(dec({0}, 0), Status::Corrupt);
  // Unused high nibble (nb odd) must be zero.
  EXPECT_EQ(dec({0x00}, 32), Status::Ok);
  EXPECT_EQ(dec({0x10}, 32), Status::Corrupt);
  EXPECT_EQ(dec({0x00}, 33), Status::Ok);  // two zero blocks: both nibbles used
  auto b1 = block(1, 0, {1});
  EXPECT_EQ(dec(b1, 5), Status::Ok);
  auto b2 = b1;  // high nibble 2 for a block that does not exist (length matching it)
  b2[0] |= 0x20;
  b2.resize(b2.size() + 12, 0);
  b2[b2.size() - 4] = 1;  // its top plane: lane 0
  EXPECT_EQ(dec(b2, 5), Status::Corrupt);
  EXPECT_EQ(dec(b2, 33), Status::Ok);  // with two blocks it is valid
  auto b3 = b1;                        // high nibble 15 with an escape byte where none can be
  b3[0] |= 0xF0;
  b3.insert(b3.begin() + 1, 15);
  b3.resize(b3.size() + 4 * 16, 0);
  b3[b3.size() - 4] = 1;
  EXPECT_EQ(dec(b3, 5), Status::Corrupt);
  EXPECT_EQ(dec(b3, 33), Status::Ok);
  // Escape below 15 (with a matching length): not canonical.
  for (int w : {0, 1, 14}) {
    std::vector<uint8_t> p{0x0F, uint8_t(w)};
    p.resize(2 + (w ? 4 * (w + 1) : 0), 0);
    if (w) p[2 + 4 * w] = 1;  // top plane set: a valid block otherwise
    EXPECT_EQ(dec(p, 32), Status::Corrupt) << w;
  }
  {  // The same block with nibble 14 is valid; with escape 15 its length is wrong.
    std::vector<uint32_t> pl14(14, 0);
    pl14[13] = 1;
    EXPECT_EQ(dec(block(14, 0, pl14), 32), Status::Ok);
    std::vector<uint32_t> pl15(15, 0);
    pl15[14] = 1;
    EXPECT_EQ(dec(block(15, 0, pl15), 32), Status::Ok);
  }
  // Truncated escape stream: nibbles say 2 escapes, 0 or 1 present.
  EXPECT_EQ(dec({0xFF}, 64), Status::Corrupt);
  EXPECT_EQ(dec({0xFF, 15}, 64), Status::Corrupt);
  EXPECT_EQ(dec({0x0F}, 32), Status::Corrupt);
  // Escape byte too large for int64 too (nibble 15, escape 65).
  std::vector<uint8_t> p65(2 + 4 * 66, 0);
  p65[0] = 0x0F;
  p65[1] = 65;
  std::vector<int64_t> back;
  for (BlockImpl impl : impls()) EXPECT_EQ(decode_with(impl, p65.data(), p65.size(), 1, &back), Status::Corrupt);
}

TEST(BlockCoder, ScalarAndSimdIdentical) {
  if (!block_impl_available(BlockImpl::Avx2)) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937_64 rng(5);
  for (int it = 0; it < 200; ++it) {
    const size_t n = rng() % 5000;
    const Dist d = kAllDists[rng() % (sizeof(kAllDists) / sizeof(kAllDists[0]))];
    const auto r32 = make<int32_t>(d, n, rng());
    EXPECT_EQ(encode_with(BlockImpl::Scalar, r32), encode_with(BlockImpl::Avx2, r32));
    EXPECT_EQ(block_encoded_bytes_with(BlockImpl::Scalar, r32.data(), n),
              block_encoded_bytes_with(BlockImpl::Avx2, r32.data(), n));
    const auto r64 = make<int64_t>(d, n, rng());
    EXPECT_EQ(encode_with(BlockImpl::Scalar, r64), encode_with(BlockImpl::Avx2, r64));
    EXPECT_EQ(block_encoded_bytes_with(BlockImpl::Scalar, r64.data(), n),
              block_encoded_bytes_with(BlockImpl::Avx2, r64.data(), n));
  }
}

TEST(BlockCoder, PerBlockFunctions) {
  // block_encode_one / block_decode_one on partial blocks, as device code uses them.
  std::mt19937_64 rng(11);
  for (int it = 0; it < 2000; ++it) {
    const int m = 1 + int(rng() % 32);
    const auto r = make<int64_t>(Dist::MixedWidths, size_t(m), rng());
    uint8_t buf[block_max_payload<int64_t>()];
    const int w = block_encode_one(r.data(), m, buf);
    EXPECT_EQ(w, block_width(r.data(), m));
    int64_t back[32];
    ASSERT_TRUE(block_decode_one(buf, w, m, back));
    for (int i = 0; i < m; ++i) ASSERT_EQ(back[i], r[size_t(i)]);
  }
  EXPECT_EQ(block_transpose8x8(block_transpose8x8(0x0123456789ABCDEFull)), 0x0123456789ABCDEFull);
  EXPECT_EQ(block_transpose8x8(0xFFull), 0x0101010101010101ull);  // row 0 -> column 0
}

// block_encode_predicted and block_decode_add (the Block coder fused with the
// Delta predictors) against their passes one after the other: predict then
// block_encode, block_decode then reconstruct then the add. The codes are made
// from every residual distribution (reconstruct of make()'s values), so the
// residuals include INT_MIN, every width and escaped blocks; lengths around the
// block and register edges.
TEST(BlockCoder, FusedPredictorsMatchTheirPasses) {
  std::mt19937_64 rng(23);
  const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 95, 96, 97, 1000, 4113};
  const Predictor preds[] = {Predictor::None, Predictor::Delta1, Predictor::Delta2};
  for (const size_t n : lengths) {
    for (const Dist d : kAllDists) {
      for (const Predictor p : preds) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " dist=" << int(d) << " predictor=" << int(p));
        const auto resid = make<int32_t>(d, n, rng());
        std::vector<int32_t> q(n), r(n);
        reconstruct(resid.data(), n, p, 0, 0, q.data());
        predict(q.data(), n, p, 0, 0, r.data());
        ASSERT_EQ(r, resid);
        const size_t cap = block_count(n) * (block_max_payload<int32_t>() + 2) + 8;
        std::vector<uint8_t> want(cap), got(cap);
        const size_t len = block_encode(r.data(), n, want.data(), cap);
        ASSERT_NE(len, kNoFit);
        ASSERT_EQ(block_encode_predicted(q.data(), n, p, got.data(), cap), len);
        ASSERT_TRUE(std::equal(want.begin(), want.begin() + long(len), got.begin()));
        if (len > 0) {  // the capacity rule: one byte short does not fit
          ASSERT_EQ(block_encode_predicted(q.data(), n, p, got.data(), len - 1), kNoFit);
        }
        // Into another buffer, and in place.
        std::vector<int32_t> local(n), to(n, 7), expect(n);
        for (size_t i = 0; i < n; ++i) {
          local[i] = int32_t(rng());
          expect[i] = int32_t(uint32_t(local[i]) + uint32_t(q[i]));
        }
        ASSERT_EQ(block_decode_add(want.data(), len, n, p, local.data(), to.data()), Status::Ok);
        ASSERT_EQ(to, expect);
        ASSERT_EQ(block_decode_add(want.data(), len, n, p, local.data(), local.data()), Status::Ok);
        ASSERT_EQ(local, expect);
      }
    }
  }
}

// block_decode_add on damaged payloads: Corrupt exactly where block_decode
// says so, else the sum of what block_decode gives (the format is canonical,
// so damaged bytes either fail or are another valid payload).
TEST(BlockCoder, FusedDecodeOfDamagedPayloads) {
  std::mt19937_64 rng(29);
  for (int it = 0; it < 3000; ++it) {
    const size_t n = rng() % 300;
    const Dist d = kAllDists[rng() % (sizeof(kAllDists) / sizeof(kAllDists[0]))];
    const Predictor p = Predictor(rng() % 3);  // None, Delta1, Delta2
    const auto r = make<int32_t>(d, n, rng());
    std::vector<uint8_t> buf(block_count(n) * (block_max_payload<int32_t>() + 2) + 8);
    size_t len = block_encode(r.data(), n, buf.data(), buf.size());
    ASSERT_NE(len, kNoFit);
    switch (rng() % 3) {  // flip a bit, cut the end, or add a byte
      case 0:
        if (len) buf[rng() % len] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:
        if (len) len -= 1 + rng() % len;
        break;
      default: buf[len++] = uint8_t(rng()); break;
    }
    std::vector<int32_t> dec(n), local(n), to(n);
    for (auto& x : local) x = int32_t(rng());
    const Status want = block_decode(buf.data(), len, n, dec.data());
    ASSERT_EQ(block_decode_add(buf.data(), len, n, p, local.data(), to.data()), want) << "it=" << it;
    if (want != Status::Ok) continue;
    reconstruct(dec.data(), n, p, 0, 0, dec.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(to[i], int32_t(uint32_t(local[i]) + uint32_t(dec[i]))) << i;
  }
  // The predictors it does not fuse.
  std::vector<int32_t> v(64, 1), out(64);
  std::vector<uint8_t> b(600);
  const size_t len = block_encode(v.data(), v.size(), b.data(), b.size());
  EXPECT_EQ(block_decode_add(b.data(), len, v.size(), Predictor::Lorenzo2D, v.data(), out.data()), Status::Unsupported);
  EXPECT_EQ(block_encode_predicted(v.data(), v.size(), Predictor::Lorenzo2D, b.data(), b.size()), kNoFit);
}
