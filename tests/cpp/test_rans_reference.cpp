// rans_encode / rans_encode_bytes against a plain reference encoder written
// from docs/FORMAT.md "Rans" (sections 1-5: mapping, frame, streams, extra
// bits, normalization), byte for byte, over many sizes, seeds and mixtures
// (groups of 8 that are all direct next to groups with extra bits, extreme
// residuals, int32 and int64), and the decoder's round trip of each. The fast
// paths (groups of 8, any SIMD) must all produce these bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/rans_coder.hpp"

using namespace ncclz::codec;

namespace {

void put_u32(std::vector<uint8_t>& d, uint32_t v) {
  for (int k = 0; k < 4; ++k) d.push_back(uint8_t(v >> (8 * k)));
}

// syms[i], and for integer residuals the extra bits (value, count) of each.
std::vector<uint8_t> ref_frame(const std::vector<uint8_t>& syms, const std::vector<uint64_t>& xv,
                               const std::vector<uint32_t>& xn) {
  const size_t n = syms.size();
  if (n == 0) return {};
  uint32_t hist[kRansAlphabet] = {}, freq[kRansAlphabet], cum[kRansAlphabet + 1];
  for (uint8_t s : syms) ++hist[s];
  rans_normalize(hist, n, freq);
  cum[0] = 0;
  for (int s = 0; s < kRansAlphabet; ++s) cum[s + 1] = cum[s] + freq[s];
  std::vector<uint8_t> d(32, 0);
  for (int s = 0; s < kRansAlphabet; ++s) {
    if (!freq[s]) continue;
    d[s >> 3] |= uint8_t(1u << (s & 7));
    const uint32_t v = freq[s] - 1;
    if (v < 128) {
      d.push_back(uint8_t(v));
    } else {
      d.push_back(uint8_t(0x80 | (v & 0x7F)));
      d.push_back(uint8_t(v >> 7));
    }
  }
  // Extra bits, LSB first, bit by bit.
  std::vector<uint8_t> xb;
  uint64_t nbits = 0;
  for (size_t i = 0; i < xv.size(); ++i)
    for (uint32_t b = 0; b < xn[i]; ++b, ++nbits) {
      if (nbits % 8 == 0) xb.push_back(0);
      if ((xv[i] >> b) & 1) xb.back() |= uint8_t(1u << (nbits % 8));
    }
  // rANS, with plain division.
  uint64_t x[8];
  for (auto& s : x) s = 1u << 16;
  std::vector<uint16_t> words;
  for (size_t i = n; i-- > 0;) {
    uint64_t& s = x[i % 8];
    const uint32_t f = freq[syms[i]];
    if (s >= (uint64_t(1) << 20) * f) {
      words.push_back(uint16_t(s & 0xFFFF));
      s >>= 16;
    }
    s = (s / f) * 4096 + s % f + cum[syms[i]];
    EXPECT_LT(s, uint64_t(1) << 32);
  }
  put_u32(d, uint32_t(xb.size()));
  put_u32(d, uint32_t(2 * words.size()));
  for (auto s : x) put_u32(d, uint32_t(s));
  d.insert(d.end(), xb.begin(), xb.end());
  for (size_t k = words.size(); k-- > 0;) {
    d.push_back(uint8_t(words[k]));
    d.push_back(uint8_t(words[k] >> 8));
  }
  return d;
}

template <class Code>
std::vector<uint8_t> ref_encode(const std::vector<Code>& r) {
  std::vector<uint8_t> syms;
  std::vector<uint64_t> xv;
  std::vector<uint32_t> xn;
  for (Code v : r) {
    using U = std::make_unsigned_t<Code>;
    const U u = U(v);
    const uint64_t z = uint64_t(U(U(u << 1) ^ U(U(0) - (u >> (sizeof(Code) * 8 - 1)))));
    uint32_t s, nb = 0;
    uint64_t ev = 0;
    if (z < 128) {
      s = uint32_t(z);
    } else {
      int L = 64;
      while (!((z >> (L - 1)) & 1)) --L;
      s = 128 + 2 * uint32_t(L - 8) + uint32_t((z >> (L - 2)) & 1);
      nb = uint32_t(L - 2);
      ev = z & ((uint64_t(1) << nb) - 1);
    }
    syms.push_back(uint8_t(s));
    xv.push_back(ev);
    xn.push_back(nb);
  }
  return ref_frame(syms, xv, xn);
}

const RansImpl kImpls[] = {RansImpl::Scalar, RansImpl::Avx2};

// Residual generators: `kind` picks the mixture.
template <class Code>
std::vector<Code> residuals(size_t n, int kind, std::mt19937_64& g) {
  std::vector<Code> v(n);
  std::normal_distribution<double> small(0, 2), mid(0, 60), big(0, 1e6);
  for (size_t i = 0; i < n; ++i) {
    Code x = 0;
    switch (kind) {
      case 0: x = Code(std::llround(small(g))); break;                       // all direct
      case 1: x = Code(std::llround(mid(g))); break;                         // ~70% direct
      case 2: x = (g() % 50 == 0) ? Code(std::llround(big(g))) : Code(std::llround(small(g))); break;  // rare big
      case 3: x = ((i / 8) % 3 == 1) ? Code(std::llround(mid(g)) + 200) : Code(g() % 5); break;        // whole groups
      case 4: x = Code(g()); break;                                          // full range
      case 5: {                                                              // extremes
        const Code e[] = {std::numeric_limits<Code>::min(), std::numeric_limits<Code>::max(), Code(-1), Code(0),
                          Code(63), Code(-64), Code(64), Code(-65)};
        x = e[g() % 8];
        break;
      }
      case 6: x = Code(7); break;                                            // a single symbol
      default: x = (g() % 8 == 0) ? Code(-64 - int64_t(g() % 1000)) : Code(0); break;  // one bucket per group
    }
    v[i] = x;
  }
  return v;
}

template <class Code>
void check_kind(int kind) {
  std::mt19937_64 g(1000 + kind + 17 * sizeof(Code));
  const size_t sizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1000, 4099, 65536 + 5};
  for (size_t n : sizes)
    for (int rep = 0; rep < (n < 100 ? 6 : 2); ++rep) {
      const auto r = residuals<Code>(n, kind, g);
      const auto want = ref_encode(r);
      for (RansImpl impl : kImpls) {  // every implementation: the reference's bytes
        if (!rans_impl_available(impl)) continue;
        std::vector<uint8_t> b(want.size() + 64 + n * 10);
        const size_t nb = rans_encode_with(impl, r.data(), n, b.data(), b.size());
        ASSERT_NE(nb, kNoFit);
        b.resize(nb);
        ASSERT_EQ(b, want) << "impl " << int(impl) << " kind " << kind << " n " << n << " rep " << rep << " bytes "
                           << sizeof(Code);
        // Capacity one byte short of the payload: kNoFit, never a write past cap.
        std::vector<uint8_t> tight(nb + 16, 0xEE);
        EXPECT_EQ(rans_encode_with(impl, r.data(), n, tight.data(), nb - 1), kNoFit);
        for (size_t k = nb - 1; k < tight.size(); ++k) ASSERT_EQ(tight[k], 0xEE) << k;
      }
      std::vector<uint8_t> buf(want.size() + 64 + n * 10);
      const size_t bytes = rans_encode(r.data(), n, buf.data(), buf.size());
      ASSERT_NE(bytes, kNoFit);
      buf.resize(bytes);
      ASSERT_EQ(buf, want);
      std::vector<uint8_t> exact(buf);  // exact-size block: ASan catches overreads
      std::vector<Code> out(n + 1, Code(0x5A));
      ASSERT_EQ(rans_decode(exact.data(), exact.size(), n, out.data()), Status::Ok);
      EXPECT_EQ(out[n], Code(0x5A));
      out.pop_back();
      ASSERT_EQ(out, r) << "kind " << kind << " n " << n;
      // One byte short, and one byte more, are corrupt.
      std::vector<uint8_t> shorter(buf.begin(), buf.end() - 1);
      EXPECT_EQ(rans_decode(shorter.data(), shorter.size(), n, out.data()), Status::Corrupt);
      std::vector<uint8_t> longer(buf);
      longer.push_back(0);
      EXPECT_EQ(rans_decode(longer.data(), longer.size(), n, out.data()), Status::Corrupt);
    }
}

}  // namespace

TEST(RansReference, Int32MatchesReference) {
  for (int kind = 0; kind < 8; ++kind) check_kind<int32_t>(kind);
}

TEST(RansReference, Int64MatchesReference) {
  for (int kind = 0; kind < 8; ++kind) check_kind<int64_t>(kind);
}

TEST(RansReference, Avx2IsAvailableOnThisMachine) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this CPU";
  EXPECT_TRUE(rans_impl_available(RansImpl::Avx2));  // else the comparisons above test only the scalar path
  EXPECT_EQ(rans_best_impl(), RansImpl::Avx2);
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

// Many random lengths and capacities around the exact size, both paths.
TEST(RansReference, CapacitySweepSameBytes) {
  std::mt19937_64 g(77);
  for (int t = 0; t < 300; ++t) {
    const size_t n = 1 + g() % 3000;
    const auto r = residuals<int32_t>(n, int(g() % 8), g);
    const auto want = ref_encode(r);
    const size_t cap = want.size() - std::min<size_t>(want.size(), g() % 40) + g() % 40;
    for (RansImpl impl : kImpls) {
      if (!rans_impl_available(impl)) continue;
      std::vector<uint8_t> b(cap + 32, 0xEE);
      const size_t nb = rans_encode_with(impl, r.data(), n, b.data(), cap);
      for (size_t k = cap; k < b.size(); ++k) ASSERT_EQ(b[k], 0xEE);
      if (cap < want.size()) {
        ASSERT_EQ(nb, kNoFit) << "cap " << cap << " need " << want.size();
      } else {
        ASSERT_EQ(nb, want.size());
        ASSERT_TRUE(std::equal(want.begin(), want.end(), b.begin()));
      }
    }
  }
}

TEST(RansReference, BytesMatchReference) {
  std::mt19937_64 g(5);
  for (size_t n : {size_t(1), size_t(8), size_t(9), size_t(1000), size_t(70001)})
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<uint8_t> s(n);
      for (auto& x : s)
        x = kind == 0 ? uint8_t(g()) : kind == 1 ? uint8_t(120 + g() % 16) : kind == 2 ? uint8_t(200) : uint8_t(g() % 3 ? 127 : g());
      const auto want = ref_frame(s, {}, {});
      std::vector<uint8_t> buf(want.size() + 64 + 2 * n);
      const size_t bytes = rans_encode_bytes(s.data(), n, buf.data(), buf.size());
      ASSERT_NE(bytes, kNoFit);
      buf.resize(bytes);
      ASSERT_EQ(buf, want) << "n " << n << " kind " << kind;
      for (RansImpl impl : kImpls) {
        if (!rans_impl_available(impl)) continue;
        std::vector<uint8_t> b(want.size() + 64 + 2 * n);
        const size_t nb = rans_encode_bytes_with(impl, s.data(), n, b.data(), b.size());
        ASSERT_NE(nb, kNoFit);
        b.resize(nb);
        ASSERT_EQ(b, want) << "impl " << int(impl) << " n " << n << " kind " << kind;
      }
      std::vector<uint8_t> out(n);
      ASSERT_EQ(rans_decode_bytes(buf.data(), buf.size(), n, out.data()), Status::Ok);
      ASSERT_EQ(out, s);
    }
}
