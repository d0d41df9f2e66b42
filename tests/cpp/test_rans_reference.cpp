// rans_encode / rans_encode_bytes against a plain reference encoder written
// from docs/FORMAT.md "Rans" (sections 1-5: mapping, frame, streams, extra
// bits, normalization), byte for byte, over many sizes, seeds and mixtures
// (groups of 8 that are all direct next to groups with extra bits, extreme
// residuals, int32 and int64), and the decoder's round trip of each. The fast
// paths (groups of 8, any SIMD) must all produce these bytes.
//
// The decoders (every RansImpl, rans_decode_bytes) against a plain reference
// decoder written from the same sections: the same accept/reject decision and
// the same values, on valid payloads (lengths 1..300000, ragged tails, every
// predictor's residuals) and on damaged ones (bit flips, truncations, changed
// lengths, states and words), with exact-size buffers (ASan) and guarded outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/predictor.hpp"
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

// Reference decoder (docs/FORMAT.md "Rans" sections 2-4), symbol by symbol with
// a linear search of the table and a bit-by-bit extra-bit reader. bytes_variant:
// the FloatExp exponent frame (every symbol 0..255, never extra bits). Returns
// false where the format says Corrupt; else the values (zigzag values z, or the
// symbols for the byte variant) in *z.
bool ref_decode_z(const std::vector<uint8_t>& d, size_t n, uint32_t max_sym, bool bytes_variant,
                  std::vector<uint64_t>* z) {
  z->assign(n, 0);
  if (n == 0) return d.empty();
  size_t o = 32;
  if (d.size() < o) return false;
  uint32_t freq[256] = {}, cum[257] = {};
  uint32_t sum = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    if (!((d[s >> 3] >> (s & 7)) & 1)) continue;
    if (s > max_sym || o >= d.size()) return false;
    uint32_t v = d[o++];
    if (v >= 128) {
      if (o >= d.size()) return false;
      const uint32_t hi = d[o++];
      if (hi < 1 || hi > 31) return false;  // canonical: values 128..4095
      v = (v & 127) | (hi << 7);
    }
    freq[s] = v + 1;
    sum += v + 1;
  }
  if (sum != 4096) return false;
  for (int s = 0; s < 256; ++s) cum[s + 1] = cum[s] + freq[s];
  auto u32 = [&](size_t at) {
    return uint32_t(d[at]) | uint32_t(d[at + 1]) << 8 | uint32_t(d[at + 2]) << 16 | uint32_t(d[at + 3]) << 24;
  };
  if (d.size() - o < 40) return false;
  const uint64_t xbytes = u32(o), rbytes = u32(o + 4);
  uint64_t x[8];
  for (int k = 0; k < 8; ++k) x[k] = u32(o + 8 + 4 * k);
  o += 40;
  if (rbytes % 2 || uint64_t(d.size() - o) != xbytes + rbytes) return false;
  const size_t xs = o, ws = o + size_t(xbytes), we = ws + size_t(rbytes);
  for (int k = 0; k < 8; ++k)
    if (x[k] < (1u << 16)) return false;
  std::vector<uint32_t> syms(n);
  size_t w = ws;
  for (size_t i = 0; i < n; ++i) {
    uint64_t& st = x[i % 8];
    const uint32_t slot = uint32_t(st % 4096);
    uint32_t s = 0;
    while (!(cum[s] <= slot && slot < cum[s] + freq[s])) ++s;
    syms[i] = s;
    st = freq[s] * (st >> 12) + slot - cum[s];
    if (st < (1u << 16)) {
      if (we - w < 2) return false;
      st = (st << 16) | uint32_t(d[w]) | uint32_t(d[w + 1]) << 8;
      w += 2;
    }
  }
  if (w != we) return false;
  for (int k = 0; k < 8; ++k)
    if (x[k] != (1u << 16)) return false;
  bool any_big = false;
  for (uint32_t s = 128; s < 256; ++s) any_big |= !bytes_variant && freq[s] != 0;
  if (!any_big && xbytes != 0) return false;
  uint64_t bit = 0;  // extra bits, LSB first, one at a time
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = syms[i];
    if (bytes_variant || s < 128) {
      (*z)[i] = s;
      continue;
    }
    const uint32_t j = s - 128, L = 8 + j / 2;
    uint64_t e = 0;
    for (uint32_t b = 0; b < L - 2; ++b, ++bit) {
      if (bit >= 8 * xbytes) return false;
      e |= uint64_t((d[xs + bit / 8] >> (bit % 8)) & 1) << b;
    }
    (*z)[i] = (uint64_t(2 | (j & 1)) << (L - 2)) | e;
  }
  if (8 * xbytes - bit >= 8) return false;  // a whole byte left over
  for (; bit < 8 * xbytes; ++bit)
    if ((d[xs + bit / 8] >> (bit % 8)) & 1) return false;  // padding bits are 0
  return true;
}

template <class Code>
bool ref_decode(const std::vector<uint8_t>& d, size_t n, std::vector<Code>* out) {
  std::vector<uint64_t> z;
  const bool ok = ref_decode_z(d, n, rans_max_symbol(int(sizeof(Code) * 8)), false, &z);
  out->resize(n);
  using U = std::make_unsigned_t<Code>;
  for (size_t i = 0; i < n; ++i) (*out)[i] = Code(U((U(z[i]) >> 1) ^ (U(0) - (U(z[i]) & 1))));
  return ok;
}

// Every decoder implementation against the reference on payload d (valid or
// not): same decision, same values when valid; never a write past n values.
template <class Code>
void expect_decoders_match(const std::vector<uint8_t>& d, size_t n, const std::string& what) {
  std::vector<Code> want;
  const bool ok = ref_decode(d, n, &want);
  for (RansImpl impl : kImpls) {
    if (!rans_impl_available(impl)) continue;
    std::vector<uint8_t> exact(d);             // exact-size block: ASan catches overreads
    std::vector<Code> out(n + 4, Code(0x5A));  // guard values after n
    const Status s = rans_decode_with(impl, exact.empty() ? nullptr : exact.data(), exact.size(), n, out.data());
    ASSERT_EQ(s == Status::Ok, ok) << what << " impl " << int(impl) << " n " << n << " bytes " << sizeof(Code);
    for (size_t k = n; k < n + 4; ++k) ASSERT_EQ(out[k], Code(0x5A)) << what << ": write past the end";
    ASSERT_TRUE(exact == d) << what << ": the input was modified";
    if (ok) {
      out.resize(n);
      ASSERT_TRUE(out == want) << what << " impl " << int(impl) << ": values differ from the reference";
    }
  }
}

// Damaged copies of a valid payload, each checked against the reference.
template <class Code>
void fuzz_against_reference(const std::vector<uint8_t>& good, size_t n, std::mt19937_64& g, int tries,
                            const std::string& what) {
  const size_t len = good.size();
  for (int t = 0; t < tries; ++t) {
    std::vector<uint8_t> d(good);
    const int kind = int(g() % 6);
    switch (kind) {
      case 0: d[g() % len] ^= uint8_t(1u << (g() % 8)); break;                     // one bit anywhere
      case 1: d.resize(g() % len); break;                                          // truncated
      case 2: d[len - 1 - g() % std::min<size_t>(len, 64)] = uint8_t(g()); break;  // near the end (words)
      case 3: {                                                                    // the states or lengths
        const size_t from = std::min<size_t>(len - 1, 32 + g() % 64);
        d[from + g() % std::max<size_t>(1, std::min<size_t>(48, len - from))] ^= uint8_t(1u << (g() % 8));
        break;
      }
      case 4: d.push_back(uint8_t(g())); break;  // one byte more
      default:                                   // a few random bytes
        for (int k = 0; k < 3; ++k) d[g() % len] = uint8_t(g());
        break;
    }
    expect_decoders_match<Code>(d, n, what + " damage " + std::to_string(kind));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Residual generators: `kind` picks the mixture.
template <class Code>
std::vector<Code> residuals(size_t n, int kind, std::mt19937_64& g) {
  std::vector<Code> v(n);
  std::normal_distribution<double> small(0, 2), mid(0, 60), big(0, 1e6);
  for (size_t i = 0; i < n; ++i) {
    Code x = 0;
    switch (kind) {
      case 0: x = Code(std::llround(small(g))); break;                                                 // all direct
      case 1: x = Code(std::llround(mid(g))); break;                                                   // ~70% direct
      case 2: x = (g() % 50 == 0) ? Code(std::llround(big(g))) : Code(std::llround(small(g))); break;  // rare big
      case 3: x = ((i / 8) % 3 == 1) ? Code(std::llround(mid(g)) + 200) : Code(g() % 5); break;        // whole groups
      case 4: x = Code(g()); break;                                                                    // full range
      case 5: {                                                                                        // extremes
        const Code e[] = {std::numeric_limits<Code>::min(),
                          std::numeric_limits<Code>::max(),
                          Code(-1),
                          Code(0),
                          Code(63),
                          Code(-64),
                          Code(64),
                          Code(-65)};
        x = e[g() % 8];
        break;
      }
      case 6: x = Code(7); break;                                                      // a single symbol
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
      expect_decoders_match<Code>(buf, n, "kind " + std::to_string(kind));
      if (n <= 4099) fuzz_against_reference<Code>(buf, n, g, n < 100 ? 40 : 15, "kind " + std::to_string(kind));
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
        x = kind == 0   ? uint8_t(g())
            : kind == 1 ? uint8_t(120 + g() % 16)
            : kind == 2 ? uint8_t(200)
                        : uint8_t(g() % 3 ? 127 : g());
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

// Long slices and every ragged tail length against the reference decoder.
TEST(RansReference, DecodersMatchReferenceLongAndRagged) {
  std::mt19937_64 g(4242);
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 40; ++n) sizes.push_back(n);
  for (size_t n : {255, 256, 257, 1023, 65535, 65536 + 7, 262144, 262144 + 3, 300000}) sizes.push_back(n);
  for (size_t n : sizes)
    for (int kind : {0, 1, 2, 3, 5, 7}) {
      if (n > 1000 && (kind == 3 || kind == 5)) continue;
      const auto r = residuals<int32_t>(n, kind, g);
      std::vector<uint8_t> buf(64 + 600 + n * 10);
      buf.resize(rans_encode(r.data(), n, buf.data(), buf.size()));
      std::vector<int32_t> back;
      ASSERT_TRUE(ref_decode(buf, n, &back));
      ASSERT_TRUE(back == r) << "reference round trip n " << n << " kind " << kind;
      expect_decoders_match<int32_t>(buf, n, "n " + std::to_string(n) + " kind " + std::to_string(kind));
      if (n > 1000) fuzz_against_reference<int32_t>(buf, n, g, 6, "long n " + std::to_string(n));
    }
  for (size_t n : {size_t(1), size_t(33), size_t(65536 + 7), size_t(300000)})
    for (int kind : {1, 2, 4}) {
      const auto r = residuals<int64_t>(n, kind, g);
      std::vector<uint8_t> buf(64 + 600 + n * 10);
      buf.resize(rans_encode(r.data(), n, buf.data(), buf.size()));
      expect_decoders_match<int64_t>(buf, n, "int64 n " + std::to_string(n) + " kind " + std::to_string(kind));
    }
}

// The residuals every predictor makes of a smooth 3-D field (plus noise and a
// few spikes): decoders against the reference, then the codes back.
TEST(RansReference, DecodersMatchReferenceEveryPredictor) {
  std::mt19937_64 g(99);
  std::normal_distribution<double> noise(0, 1.5);
  const uint32_t W = 61, H = 37;
  const uint32_t P = W * H;
  const size_t n = size_t(P) * 5 + 3 * W + 11;  // ragged: partial plane and row
  std::vector<int32_t> q(n);
  for (size_t i = 0; i < n; ++i) {
    const double x = double(i % W), y = double((i / W) % H), z = double(i / P);
    q[i] = int32_t(std::llround(2000 * std::sin(0.05 * x + 0.03 * y) * std::cos(0.2 * z) + 30 * y + noise(g)));
    if (g() % 5000 == 0) q[i] += int32_t(g() % 2000000) - 1000000;
  }
  for (Predictor p :
       {Predictor::None, Predictor::Delta1, Predictor::Delta2, Predictor::Lorenzo2D, Predictor::Lorenzo3D}) {
    std::vector<int32_t> r(n);
    predict(q.data(), n, p, W, P, r.data());
    std::vector<uint8_t> buf(64 + 600 + n * 10);
    buf.resize(rans_encode(r.data(), n, buf.data(), buf.size()));
    expect_decoders_match<int32_t>(buf, n, "predictor " + std::to_string(int(p)));
    for (RansImpl impl : kImpls) {
      if (!rans_impl_available(impl)) continue;
      std::vector<int32_t> back(n);
      ASSERT_EQ(rans_decode_with(impl, buf.data(), buf.size(), n, back.data()), Status::Ok);
      reconstruct(back.data(), n, p, W, P, back.data());
      ASSERT_TRUE(back == q) << "predictor " << int(p) << " impl " << int(impl);
    }
    fuzz_against_reference<int32_t>(buf, n, g, 8, "predictor " + std::to_string(int(p)));
  }
}

// Single-symbol tables (the decoder's shortcut): only all states at 2^16 and
// no words are valid.
TEST(RansReference, SingleSymbolFramesLikeReference) {
  for (size_t n : {size_t(1), size_t(8), size_t(13), size_t(5000)})
    for (int32_t v : {0, 5, -64, 1000}) {
      const std::vector<int32_t> r(n, v);
      std::vector<uint8_t> buf(64 + 600 + n * 10);
      buf.resize(rans_encode(r.data(), n, buf.data(), buf.size()));
      expect_decoders_match<int32_t>(buf, n, "single");
      const size_t tb = 32 + 2;  // bitmap + one frequency (4095: 2 bytes)
      // The frame holds its header and all 8 states (the bytes changed
      // below); .at() keeps every index checked (and provably in bounds for
      // GCC 13's -Wstringop-overflow, which cannot see rans_encode's size).
      ASSERT_GE(buf.size(), tb + 8 + 4 * 8) << "n " << n << " v " << v;
      ASSERT_EQ(buf.at(32), 0xFF);
      for (size_t k = 0; k < 8; ++k) {  // a state other than 2^16
        auto d = buf;
        d.at(tb + 8 + 4 * k) ^= 1;
        expect_decoders_match<int32_t>(d, n, "single, state " + std::to_string(k));
        d = buf;
        d.at(tb + 8 + 4 * k + 3) = 1;
        expect_decoders_match<int32_t>(d, n, "single, big state " + std::to_string(k));
      }
      auto d = buf;  // a word that nothing consumes
      d.at(tb + 4) = 2;
      d.push_back(0);
      d.push_back(0);
      expect_decoders_match<int32_t>(d, n, "single, extra word");
    }
}

// The byte variant (FloatExp exponents) against the reference, valid and damaged.
TEST(RansReference, ByteDecoderMatchesReference) {
  std::mt19937_64 g(6);
  for (size_t n : {size_t(1), size_t(9), size_t(1000), size_t(70001)})
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<uint8_t> s(n);
      for (auto& x : s)
        x = kind == 0   ? uint8_t(g())
            : kind == 1 ? uint8_t(120 + g() % 16)
            : kind == 2 ? uint8_t(200)
                        : uint8_t(g() % 3 ? 127 : g());
      std::vector<uint8_t> buf(64 + 600 + 2 * n);
      buf.resize(rans_encode_bytes(s.data(), n, buf.data(), buf.size()));
      for (int t = 0; t < 60; ++t) {
        std::vector<uint8_t> d(buf);
        if (t) {
          if (t % 3 == 0)
            d.resize(g() % d.size());
          else
            d[g() % d.size()] ^= uint8_t(1u << (g() % 8));
        }
        std::vector<uint64_t> want;
        const bool ok = ref_decode_z(d, n, 255, true, &want);
        std::vector<uint8_t> out(n + 4, 0xA5);
        const Status st = rans_decode_bytes(d.data(), d.size(), n, out.data());
        ASSERT_EQ(st == Status::Ok, ok) << "n " << n << " kind " << kind << " t " << t;
        for (size_t k = n; k < n + 4; ++k) ASSERT_EQ(out[k], 0xA5);
        if (ok) {
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], want[i]) << i;
        }
      }
    }
}
