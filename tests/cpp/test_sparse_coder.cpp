// Sparse coder over mostly-zero integer residuals: docs/FORMAT.md, "Sparse".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/rans_coder.hpp"
#include "codec/slice.hpp"
#include "codec/sparse_coder.hpp"
#include "ncclz/codec/container.hpp"
#include "ncclz/error.hpp"
#include "test_corrupt.hpp"

using namespace ncclz::codec;
using Choice = EncodeOptions::Choice;

namespace {

// n codes, each nonzero with probability `density`, values N(0, sd) rounded
// away from 0 (so the density is exact in expectation).
template <class Code>
std::vector<Code> sparse_codes(size_t n, double density, double sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> d(0.0, sd);
  std::vector<Code> v(n, Code(0));
  for (auto& x : v) {
    if (u(g) >= density) continue;
    const long long c = std::llround(d(g));
    x = Code(c != 0 ? c : (u(g) < 0.5 ? 1 : -1));
  }
  return v;
}

// Extreme values of the type at the nonzero positions.
template <class Code>
std::vector<Code> extreme_codes(size_t n, double density, uint32_t seed) {
  using L = std::numeric_limits<Code>;
  const Code pick[] = {L::min(), L::max(), Code(-1), Code(1), Code(L::min() + 1), Code(L::max() - 1), Code(2)};
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Code> v(n, Code(0));
  for (auto& x : v)
    if (u(g) < density) x = (g() & 1) ? pick[g() % 7] : Code(g());
  return v;
}

template <class Code>
size_t round_trip(const std::vector<Code>& r) {
  const size_t n = r.size();
  std::vector<uint8_t> buf(64 + n * (sizeof(Code) + 4) + 1024);
  const size_t bytes = sparse_encode(r.data(), n, buf.data(), buf.size());
  EXPECT_NE(bytes, kNoFit);
  if (bytes == kNoFit) return 0;
  std::vector<Code> out(n + 1, Code(0x5A));
  EXPECT_EQ(sparse_decode(buf.data(), bytes, n, out.data()), Status::Ok);
  EXPECT_EQ(out.back(), Code(0x5A));  // nothing written past n
  out.pop_back();
  EXPECT_TRUE(out == r);
  // The encoder respects the capacity: one byte less does not fit.
  if (bytes > 0) {
    EXPECT_EQ(sparse_encode(r.data(), n, buf.data(), bytes - 1), kNoFit);
  }
  EXPECT_EQ(sparse_encode(r.data(), n, buf.data(), bytes), bytes);
  return bytes;
}

// sparse_decode_add: out[i] += r[i] (wrapping) at the nonzeros, nothing else
// touched (the other elements keep whatever they held, past n too).
template <class Code>
void decode_add_round_trip(const std::vector<Code>& r, uint32_t seed) {
  using U = std::make_unsigned_t<Code>;
  const size_t n = r.size();
  std::vector<uint8_t> buf(64 + n * (sizeof(Code) + 4) + 1024);
  const size_t bytes = sparse_encode(r.data(), n, buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  std::mt19937_64 g(seed);
  std::vector<Code> base(n + 1);
  for (auto& b : base) b = Code(g());
  std::vector<Code> out = base;
  ASSERT_EQ(sparse_decode_add(buf.data(), bytes, n, out.data()), Status::Ok);
  EXPECT_EQ(out[n], base[n]);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], Code(U(U(base[i]) + U(r[i])))) << "element " << i;
  // Every truncation is Corrupt, as for sparse_decode.
  for (size_t cut : {size_t(0), size_t(3), bytes / 2, bytes - 1}) {
    if (cut >= bytes) continue;
    std::vector<Code> o2 = base;
    EXPECT_EQ(sparse_decode_add(buf.data(), cut, n, o2.data()), Status::Corrupt) << "cut " << cut;
  }
}

template <class Code>
void round_trip_all() {
  const size_t sizes[] = {1, 2, 7, 31, 32, 33, 63, 64, 65, 100, 1000, 4097, 65543, 262144, 300000};
  const double dens[] = {0.0, 0.001, 0.01, 0.02, 0.04, 0.1, 0.3, 0.5, 0.9, 1.0};
  uint32_t seed = 1;
  for (size_t n : sizes) {
    for (double d : dens) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " density=" << d);
      round_trip(sparse_codes<Code>(n, d, 200, seed++));
      round_trip(extreme_codes<Code>(n, d, seed++));
      decode_add_round_trip(sparse_codes<Code>(n, d, 200, seed), seed + 1000);
      decode_add_round_trip(extreme_codes<Code>(n, d, seed), seed + 2000);
    }
    // One nonzero: first, middle, last; and first + last.
    for (size_t at : {size_t(0), n / 2, n - 1}) {
      std::vector<Code> v(n, Code(0));
      v[at] = std::numeric_limits<Code>::min();
      round_trip(v);
      v[at] = 7;
      round_trip(v);
    }
    std::vector<Code> v(n, Code(0));
    v[0] = -3;
    v[n - 1] = std::numeric_limits<Code>::max();
    round_trip(v);
  }
}

}  // namespace

TEST(SparseCoder, RoundTripInt32) { round_trip_all<int32_t>(); }
TEST(SparseCoder, RoundTripInt64) { round_trip_all<int64_t>(); }

TEST(SparseCoder, EmptyAndAllZero) {
  uint8_t buf[16];
  EXPECT_EQ(sparse_encode<int32_t>(nullptr, 0, buf, sizeof buf), 0u);
  EXPECT_EQ(sparse_decode<int32_t>(buf, 0, 0, nullptr), Status::Ok);
  std::vector<int64_t> z(1000, 0), out(1000, 9);
  ASSERT_EQ(sparse_encode(z.data(), z.size(), buf, sizeof buf), 4u);
  EXPECT_EQ(load_u32(buf), 0u);
  EXPECT_EQ(sparse_decode(buf, 4, z.size(), out.data()), Status::Ok);
  EXPECT_TRUE(out == z);
  EXPECT_EQ(sparse_encode(z.data(), z.size(), buf, 3), kNoFit);
}

TEST(SparseCoder, LongGaps) {
  // Gaps above 2^16 and 2^24 (slices may hold up to 2^32 - 1 values).
  const size_t n = (size_t(1) << 24) + 70000;
  std::vector<int32_t> v(n, 0);
  v[3] = 5;
  v[70003] = -9;                         // gap > 2^16
  v[70004 + (size_t(1) << 24) - 5] = 1;  // gap > 2^24 - 6
  v[n - 1] = std::numeric_limits<int32_t>::min();
  round_trip(v);
  std::vector<int32_t> w(n, 0);
  w[n - 1] = 1;  // a single gap of n - 1 > 2^24
  round_trip(w);
  w[0] = 2;
  round_trip(w);
}

TEST(SparseCoder, ShiftsFollowTheData) {
  // Wide Gaussian values and long random gaps: both low-bit shifts in use.
  auto a = sparse_codes<int32_t>(262144, 0.01, 5000, 11);
  std::vector<uint8_t> buf(262144 * 4);
  size_t bytes = sparse_encode(a.data(), a.size(), buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  EXPECT_GT(buf[4], 0);  // gs
  EXPECT_GT(buf[5], 0);  // vs
  // Every gap 96: the gap shift stays 0 (5 raw bits a gap would cost, the
  // frame nothing). Values: 40 % exactly 3, the others in +-[1024, 2048): a
  // shift of 9 (the median bit length, 11, less 2) would cost the 3s 9 raw
  // bits; shift 0 codes them with their symbol.
  std::vector<int32_t> b(262144, 0);
  std::mt19937 rng(4);
  for (size_t i = 0; i < b.size(); i += 97)
    b[i] = rng() % 10 < 4 ? 3 : int32_t(1024 + rng() % 1024) * (rng() % 2 ? 1 : -1);
  bytes = sparse_encode(b.data(), b.size(), buf.data(), buf.size());
  ASSERT_NE(bytes, kNoFit);
  EXPECT_EQ(buf[4], 0);
  EXPECT_EQ(buf[5], 0);
  const size_t k = (b.size() + 96) / 97;
  EXPECT_LT(bytes, k * 8 / 8 + 300);  // measured ~7 bits a value
  round_trip(b);
  // int64 values of ~2^57 at 0.1 %: gs + vs > 57 (the split bit writes and reads).
  auto c = sparse_codes<int64_t>(300000, 0.001, 1e17, 5);
  std::vector<uint8_t> cb(300000 * 9);
  bytes = sparse_encode(c.data(), c.size(), cb.data(), cb.size());
  ASSERT_NE(bytes, kNoFit);
  EXPECT_GT(int(cb[4]) + int(cb[5]), 57);
  round_trip(c);
}

namespace {

template <class Code>
void check_scan(SparseScan impl, const std::vector<Code>& r) {
  std::vector<uint32_t> want_pos, pos(r.size());
  std::vector<Code> want_val, val(r.size());
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i] != 0) {
      want_pos.push_back(uint32_t(i));
      want_val.push_back(r[i]);
    }
  const size_t k = sparse_find_nonzeros(impl, r.data(), r.size(), pos.data(), val.data());
  ASSERT_EQ(k, want_pos.size()) << "impl " << int(impl) << " n " << r.size();
  EXPECT_TRUE(std::equal(want_pos.begin(), want_pos.end(), pos.begin())) << int(impl) << " n " << r.size();
  EXPECT_TRUE(std::equal(want_val.begin(), want_val.end(), val.begin())) << int(impl) << " n " << r.size();
}

}  // namespace

TEST(SparseCoder, EveryScanFindsTheNonzeros) {
  // All lengths 0..299 (every tail of the 16/32/64-value steps), densities
  // from none to all; int64 nonzeros in either 32-bit half.
  std::mt19937 g(3);
  int tested = 0;
  for (SparseScan impl : {SparseScan::Scalar, SparseScan::Sse2, SparseScan::Avx2, SparseScan::Avx512}) {
    if (!sparse_scan_available(impl)) continue;
    ++tested;
    for (size_t n = 0; n < 300; ++n) {
      for (double d : {0.0, 0.01, 0.05, 0.5, 1.0}) {
        std::vector<int32_t> a(n);
        std::vector<int64_t> b(n);
        for (size_t i = 0; i < n; ++i) {
          const bool nz = std::uniform_real_distribution<double>(0, 1)(g) < d;
          a[i] = nz ? int32_t(g() | 1u << (g() % 32)) : 0;
          b[i] = nz ? int64_t(uint64_t(1) << (g() % 64)) : 0;
        }
        check_scan(impl, a);
        check_scan(impl, b);
      }
    }
    check_scan(impl, std::vector<int32_t>{std::numeric_limits<int32_t>::min()});
    check_scan(impl, std::vector<int64_t>{0, std::numeric_limits<int64_t>::min(), 0});
  }
  EXPECT_GE(tested, 1);
}

// ---------------------------------------------------------------- size

TEST(SparseCoder, SmallerThanRansOnSparseCodes) {
  // The benchmark's sparse gradients: 1-4 % nonzero after the sum, values of
  // a few hundred codes.
  for (double d : {0.01, 0.02, 0.04, 0.1}) {
    auto v = sparse_codes<int32_t>(1 << 18, d, 200, uint32_t(d * 1000));
    std::vector<uint8_t> buf(v.size() * 5);
    const size_t s = sparse_encode(v.data(), v.size(), buf.data(), buf.size());
    const size_t r = rans_encode(v.data(), v.size(), buf.data(), buf.size());
    std::printf("density %.2f: sparse %zu bytes, rans %zu bytes (%.3f)\n", d, s, r, double(s) / double(r));
    EXPECT_LT(double(s), 1.02 * double(r)) << d;
  }
}

TEST(SparseCoder, EstimateTracksTheSize) {
  for (double d : {0.005, 0.01, 0.04, 0.1, 0.3}) {
    for (double sd : {3.0, 200.0, 1e6}) {
      auto v = sparse_codes<int32_t>(1 << 18, d, sd, 7);
      uint32_t hist[kRansAlphabet] = {};
      uint64_t extra = 0;
      for (int32_t x : v) {
        uint32_t s, e;
        rans_symbol_of(x, &s, &e);
        ++hist[s];
        extra += e;
      }
      std::vector<uint8_t> buf(v.size() * 5);
      const size_t real = sparse_encode(v.data(), v.size(), buf.data(), buf.size());
      const size_t est = sparse_estimate_bytes(hist, v.size(), extra, v.size());
      EXPECT_NEAR(double(est) / double(real), 1.0, 0.08) << "density " << d << " sd " << sd;
    }
  }
  uint32_t zeros[kRansAlphabet] = {};
  zeros[0] = 100;
  EXPECT_EQ(sparse_estimate_bytes(zeros, 100, 0, 1000), 4u);
  EXPECT_EQ(sparse_estimate_bytes(zeros, 100, 0, 0), 0u);
}

// ---------------------------------------------------------------- decoder checks

namespace {

// A payload assembled by hand from its parts (docs/FORMAT.md, "Sparse").
template <class Code>
std::vector<uint8_t> assemble(uint32_t k, int gs, int vs, const std::vector<uint8_t>& low,
                              const std::vector<int32_t>& gap_res, const std::vector<Code>& val_res) {
  std::vector<uint8_t> g(4096 + 16 * gap_res.size()), v(4096 + 16 * val_res.size());
  const size_t gb = rans_encode(gap_res.data(), gap_res.size(), g.data(), g.size());
  const size_t vb = rans_encode(val_res.data(), val_res.size(), v.data(), v.size());
  std::vector<uint8_t> p(10);
  store_u32(p.data(), k);
  p[4] = uint8_t(gs);
  p[5] = uint8_t(vs);
  store_u32(p.data() + 6, uint32_t(gb));
  p.insert(p.end(), low.begin(), low.end());
  p.insert(p.end(), g.begin(), g.begin() + long(gb));
  p.insert(p.end(), v.begin(), v.begin() + long(vb));
  return p;
}

template <class Code>
Status dec(const std::vector<uint8_t>& p, size_t n) {
  std::vector<Code> out(n);
  return sparse_decode(p.data(), p.size(), n, out.data());
}

template <class Code>
void checks_suite() {
  using U = std::make_unsigned_t<Code>;
  constexpr int B = int(sizeof(Code) * 8);
  // A valid hand-made payload first: gaps 2, 0 and values 5, -1 (z - 1 = 9, 0).
  const auto ok = assemble<Code>(2, 0, 0, {}, {rans_unzigzag<int32_t>(2), 0}, {rans_unzigzag<Code>(U(9)), 0});
  {
    std::vector<Code> out(5);
    ASSERT_EQ(sparse_decode(ok.data(), ok.size(), 5, out.data()), Status::Ok);
    EXPECT_TRUE(out == std::vector<Code>({0, 0, 5, -1, 0}));
  }
  // n = 0 with a nonempty payload; shorter than 4 bytes.
  EXPECT_EQ(sparse_decode<Code>(ok.data(), 1, 0, nullptr), Status::Corrupt);
  EXPECT_EQ(dec<Code>({0, 0, 0}, 5), Status::Corrupt);
  // k = 0 with trailing bytes; k > n.
  EXPECT_EQ(dec<Code>({0, 0, 0, 0}, 5), Status::Ok);
  EXPECT_EQ(dec<Code>({0, 0, 0, 0, 0}, 5), Status::Corrupt);
  EXPECT_EQ(dec<Code>(ok, 1), Status::Corrupt);
  // Truncated anywhere, or a byte too many.
  for (size_t len = 0; len < ok.size(); ++len) {
    std::vector<uint8_t> t(ok.begin(), ok.begin() + long(len));
    EXPECT_EQ(dec<Code>(t, 5), Status::Corrupt) << len;
  }
  auto longer = ok;
  longer.push_back(0);
  EXPECT_EQ(dec<Code>(longer, 5), Status::Corrupt);
  // G larger than the rest; G moved by one (both frames then misparse).
  auto bad = ok;
  store_u32(bad.data() + 6, uint32_t(ok.size()));
  EXPECT_EQ(dec<Code>(bad, 5), Status::Corrupt);
  bad = ok;
  store_u32(bad.data() + 6, load_u32(ok.data() + 6) - 1);
  EXPECT_EQ(dec<Code>(bad, 5), Status::Corrupt);
  // Shifts out of range: gs > 31, vs > bits - 1 (also: the low-bit stream is missing).
  bad = assemble<Code>(2, 32, 0, std::vector<uint8_t>(8), {0, 0}, {0, 0});
  EXPECT_EQ(dec<Code>(bad, 5), Status::Corrupt);
  bad = assemble<Code>(1, 0, B, std::vector<uint8_t>(B / 8), {0}, {0});
  EXPECT_EQ(dec<Code>(bad, 5), Status::Corrupt);
  // The same with legal shifts decodes.
  bad = assemble<Code>(1, 0, B - 1, std::vector<uint8_t>((B - 1 + 7) / 8), {0}, {0});
  EXPECT_EQ(dec<Code>(bad, 5), Status::Ok);
  // Position past the end: gap 5 in a slice of 5.
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 0, {}, {rans_unzigzag<int32_t>(5)}, {0}), 5), Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 0, {}, {rans_unzigzag<int32_t>(4)}, {0}), 5), Status::Ok);
  EXPECT_EQ(dec<Code>(assemble<Code>(2, 0, 0, {}, {rans_unzigzag<int32_t>(3), 1}, {0, 0}), 5), Status::Corrupt);
  // A gap shifted past 2^32 (gs = 31, high part 2): far past any slice.
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 31, 0, {0, 0, 0, 0}, {rans_unzigzag<int32_t>(2)}, {0}), 5), Status::Corrupt);
  // Value z - 1 = 2^bits - 1 (would be zigzag 2^bits: no such value).
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 0, {}, {0}, {rans_unzigzag<Code>(U(~U(0)))}), 5), Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 0, {}, {0}, {rans_unzigzag<Code>(U(~U(0) - 1))}), 5), Status::Ok);
  // A value whose high part overflows the type once shifted (vs = 1, h = 2^(bits-1)).
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 1, {0}, {0}, {rans_unzigzag<Code>(U(U(1) << (B - 1)))}), 5),
            Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 1, {0}, {0}, {rans_unzigzag<Code>(U((U(1) << (B - 1)) - 1))}), 5),
            Status::Ok);
  // The all-ones low bit on top of the largest high part is z - 1 = 2^bits - 1 again.
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 0, 1, {1}, {0}, {rans_unzigzag<Code>(U((U(1) << (B - 1)) - 1))}), 5),
            Status::Corrupt);
  // Padding bits of the low-bit stream must be 0 (3 bits used of 1 byte).
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 1, 2, {0x07}, {0}, {0}), 5), Status::Ok);
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 1, 2, {0x0F}, {0}, {0}), 5), Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(1, 1, 2, {0x80}, {0}, {0}), 5), Status::Corrupt);
  // Frames with the wrong count: the gap frame codes 3 symbols for k = 2.
  // (A frame of one repeated symbol has no words: it decodes for any count.)
  EXPECT_EQ(dec<Code>(assemble<Code>(2, 0, 0, {}, {0, 1, 2}, {0, 0}), 9), Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(2, 0, 0, {}, {0, 1}, {1, 2, 3}), 9), Status::Corrupt);
  EXPECT_EQ(dec<Code>(assemble<Code>(2, 0, 0, {}, {0, 1}, {1, 2}), 9), Status::Ok);
  // Both shifts at their maximum (gs + vs > 57: split bit reads): gaps with
  // low bits 1000 and 1, values with all low bits set but the top one.
  {
    const int vs = B - 1;
    std::vector<uint8_t> low((2 * (31 + vs) + 7) / 8, 0);
    uint64_t bp = 0;
    auto put = [&](uint64_t v, int nb) {
      for (int i = 0; i < nb; ++i, ++bp)
        if ((v >> i) & 1) low[bp / 8] |= uint8_t(1u << (bp % 8));
    };
    const uint64_t glo0 = 1000, glo1 = 1, vlo = (uint64_t(1) << (vs - 1)) - 1;
    put(glo0, 31);
    put(vlo, vs);
    put(glo1, 31);
    put(vlo ^ 5, vs);
    const auto p = assemble<Code>(2, 31, vs, low, {0, 0}, {0, rans_unzigzag<Code>(U(1))});
    std::vector<Code> out(1003);
    ASSERT_EQ(sparse_decode(p.data(), p.size(), out.size(), out.data()), Status::Ok);
    EXPECT_EQ(out[1000], rans_unzigzag<Code>(U(vlo + 1)));
    EXPECT_EQ(out[1002], rans_unzigzag<Code>(U((U(1) << vs | U(vlo ^ 5)) + 1)));
    EXPECT_EQ(out[1001], Code(0));
  }
}

template <class Code>
void fuzz_suite() {
  std::mt19937_64 g(99);
  for (int rep = 0; rep < 6; ++rep) {
    const size_t n = 1 + g() % 5000;
    auto v = sparse_codes<Code>(n, 0.03 * (rep + 1), rep % 2 ? 1e4 : 30, uint32_t(rep));
    std::vector<uint8_t> buf(64 + n * 12);
    const size_t bytes = sparse_encode(v.data(), n, buf.data(), buf.size());
    ASSERT_NE(bytes, kNoFit);
    buf.resize(bytes);
    std::vector<Code> out(n);
    for (int t = 0; t < 3000; ++t) {
      auto m = buf;
      const int flips = 1 + int(g() % 3);
      for (int f = 0; f < flips; ++f) m[g() % m.size()] ^= uint8_t(1u << (g() % 8));
      const Status s = sparse_decode(m.data(), m.size(), n, out.data());
      EXPECT_TRUE(s == Status::Ok || s == Status::Corrupt);
      // Every truncation is rejected.
      const size_t cut = g() % bytes;
      EXPECT_EQ(sparse_decode(buf.data(), cut, n, out.data()), Status::Corrupt);
    }
  }
}

}  // namespace

TEST(SparseCoder, DecoderChecksInt32) { checks_suite<int32_t>(); }
TEST(SparseCoder, DecoderChecksInt64) { checks_suite<int64_t>(); }
TEST(SparseCoder, FuzzInt32) { fuzz_suite<int32_t>(); }
TEST(SparseCoder, FuzzInt64) { fuzz_suite<int64_t>(); }

// ---------------------------------------------------------------- slices and selector

namespace {

template <class Code>
SliceInfo slice_round_trip(const std::vector<Code>& v, const EncodeOptions& opt) {
  const ElemType t = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  std::vector<uint8_t> buf(max_slice_bytes(t, v.size()));
  SliceInfo si;
  EXPECT_EQ(encode_slice(v.data(), t, uint32_t(v.size()), buf.data(), buf.size(), opt, &si), Status::Ok);
  std::vector<Code> out(v.size());
  size_t used = 0;
  EXPECT_EQ(decode_slice(buf.data(), si.bytes, t, uint32_t(v.size()), out.data(), &used), Status::Ok);
  EXPECT_EQ(used, si.bytes);
  EXPECT_TRUE(out == v);
  return si;
}

}  // namespace

TEST(SparseSlice, SelectorPicksSparseOnSparseCodes) {
  for (double d : {0.01, 0.02, 0.03, 0.04}) {
    for (size_t n : {size_t(1) << 18, size_t(100000)}) {
      SCOPED_TRACE(testing::Message() << "density " << d << " n " << n);
      auto v = sparse_codes<int32_t>(n, d, 200, uint32_t(n + d * 100));
      const SliceInfo a = slice_round_trip(v, EncodeOptions{});
      EXPECT_EQ(a.codec, Codec::Sparse);
      EXPECT_EQ(a.predictor, Predictor::None);
      EncodeOptions rans;
      rans.choice = Choice::Rans;
      const SliceInfo r = slice_round_trip(v, rans);
      EXPECT_LT(double(a.bytes), 1.0 * double(r.bytes));
      auto w = sparse_codes<int64_t>(n, d, 3e9, uint32_t(n + d * 100));
      EXPECT_EQ(slice_round_trip(w, EncodeOptions{}).codec, Codec::Sparse);
    }
  }
  // Small slices: the two frames' fixed fields (~150 bytes) make Sparse
  // larger than Rans; the selector keeps Rans where the difference shows.
  auto small = sparse_codes<int32_t>(5000, 0.02, 200, 9);
  const SliceInfo sm = slice_round_trip(small, EncodeOptions{});
  EXPECT_EQ(sm.codec, Codec::Rans);
  // All zero: Sparse (4 bytes of payload).
  std::vector<int32_t> z(1 << 18, 0);
  const SliceInfo s = slice_round_trip(z, EncodeOptions{});
  EXPECT_EQ(s.codec, Codec::Sparse);
  EXPECT_EQ(s.bytes, kHeaderBytes + 4);
}

TEST(SparseSlice, SelectorKeepsDenseChoices) {
  // Dense codes: Gaussian (any width), smooth fields, 50 % and 20 % density.
  std::mt19937_64 g(5);
  for (double sd : {0.7, 3.0, 50.0, 1e5}) {
    auto v = sparse_codes<int32_t>(1 << 18, 1.0, sd, uint32_t(sd * 10));
    EXPECT_NE(slice_round_trip(v, EncodeOptions{}).codec, Codec::Sparse) << sd;
  }
  auto half = sparse_codes<int32_t>(1 << 18, 0.5, 200, 3);
  EXPECT_EQ(slice_round_trip(half, EncodeOptions{}).codec, Codec::Rans);
  // 20 % nonzero: Sparse replaces Rans (smaller, and faster both ways).
  auto fifth = sparse_codes<int32_t>(1 << 18, 0.2, 200, 3);
  EXPECT_EQ(slice_round_trip(fifth, EncodeOptions{}).codec, Codec::Sparse);
  // Nonzeros in whole blocks of 32 (12 % of the blocks, small values): Block
  // is smallest and stays.
  std::vector<int32_t> clustered(1 << 18, 0);
  for (size_t b = 0; b < clustered.size() / 32; ++b)
    if (g() % 100 < 12)
      for (size_t i = 0; i < 32; ++i) clustered[32 * b + i] = int32_t(g() % 7) - 3;
  EXPECT_EQ(slice_round_trip(clustered, EncodeOptions{}).codec, Codec::Block);
  std::vector<int32_t> smooth(1 << 18);
  for (size_t i = 0; i < smooth.size(); ++i)
    smooth[i] = int32_t(std::llround(1000 * std::sin(0.001 * double(i)) + 300 * std::cos(0.0031 * double(i))));
  EXPECT_NE(slice_round_trip(smooth, EncodeOptions{}).codec, Codec::Sparse);
  // Sparse off: sparse_min_zeros above 1.
  EncodeOptions off;
  off.sparse_min_zeros = 2.0;
  auto v = sparse_codes<int32_t>(1 << 18, 0.02, 200, 3);
  EXPECT_EQ(slice_round_trip(v, off).codec, Codec::Rans);
}

TEST(SparseSlice, ForcedWithEveryPredictor) {
  for (size_t n : {size_t(1), size_t(33), size_t(4097), size_t(100003)}) {
    auto v32 = sparse_codes<int32_t>(n, 0.05, 100, uint32_t(n));
    auto v64 = extreme_codes<int64_t>(n, 0.05, uint32_t(n) + 1);
    for (int p = -1; p < kNumPredictors; ++p) {
      EncodeOptions opt;
      opt.choice = Choice::Sparse;
      opt.predictor = p;
      opt.row = 16;
      opt.plane = 256;
      SCOPED_TRACE(testing::Message() << "n=" << n << " pred=" << p);
      const SliceInfo a = slice_round_trip(v32, opt);
      EXPECT_TRUE(a.codec == Codec::Sparse || a.codec == Codec::Raw);
      if (n > 1000) {
        EXPECT_EQ(a.codec, Codec::Sparse);  // (smaller ones: Raw is smaller)
      }
      slice_round_trip(v64, opt);
    }
  }
  // Floats forced to Sparse code their bit patterns (or fall back to Raw);
  // uint8 cannot be Sparse.
  std::vector<float> f(10, 1.0f);
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::F32, 10));
  EncodeOptions opt;
  opt.choice = Choice::Sparse;
  SliceInfo fi;
  EXPECT_EQ(encode_slice(f.data(), ElemType::F32, 10, buf.data(), buf.size(), opt, &fi), Status::Ok);
  std::vector<float> fb(10);
  ASSERT_EQ(decode_slice(buf.data(), fi.bytes, ElemType::F32, 10, fb.data()), Status::Ok);
  EXPECT_EQ(0, std::memcmp(f.data(), fb.data(), sizeof(float) * 10));
  std::vector<uint8_t> u8(10, 0);
  EXPECT_EQ(encode_slice(u8.data(), ElemType::U8, 10, buf.data(), buf.size(), opt), Status::Unsupported);
}

TEST(SparseSlice, HeaderRulesAndForeignTypes) {
  EXPECT_TRUE(codec_accepts(Codec::Sparse, ElemType::I32, Predictor::Lorenzo2D));
  EXPECT_TRUE(codec_accepts(Codec::Sparse, ElemType::I64, Predictor::None));
  EXPECT_TRUE(codec_accepts(Codec::Sparse, ElemType::F32, Predictor::None));  // lossless bit patterns
  EXPECT_TRUE(codec_accepts(Codec::Sparse, ElemType::BF16, Predictor::None));
  EXPECT_FALSE(codec_accepts(Codec::Sparse, ElemType::F32, Predictor::Delta1));
  EXPECT_FALSE(codec_accepts(Codec::Sparse, ElemType::U8, Predictor::None));
  // A Sparse header on a uint8 slice is a bad header; codec 5 is unknown.
  std::vector<int32_t> v(100, 0);
  v[7] = 3;
  EncodeOptions opt;
  opt.choice = Choice::Sparse;
  std::vector<uint8_t> buf(max_slice_bytes(ElemType::I32, 100));
  SliceInfo si;
  ASSERT_EQ(encode_slice(v.data(), ElemType::I32, 100, buf.data(), buf.size(), opt, &si), Status::Ok);
  ASSERT_EQ(buf[4], uint8_t(Codec::Sparse));
  SliceHeader h;
  EXPECT_EQ(read_header(buf.data(), si.bytes, &h), Status::Ok);
  auto b = buf;
  b[5] = uint8_t(ElemType::U8);
  EXPECT_EQ(read_header(b.data(), si.bytes, &h), Status::BadHeader);
  b = buf;
  b[4] = 5;
  EXPECT_EQ(read_header(b.data(), si.bytes, &h), Status::BadHeader);
  std::vector<int64_t> out(100);
  EXPECT_EQ(decode_slice(buf.data(), si.bytes, ElemType::I64, 100, out.data()), Status::TypeMismatch);
}

// ---------------------------------------------------------------- container

TEST(SparseContainer, LossySparseFloatsRoundTripAndInspect) {
  // 99 % zeros, like the benchmark's sparse gradients.
  std::mt19937_64 g(1);
  std::normal_distribution<float> d(0.f, 1e-3f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> x(600000, 0.f);
  for (auto& e : x)
    if (u(g) < 0.01) e = d(g);
  for (Choice c : {Choice::Auto, Choice::Sparse}) {
    EncodeOptions opt;
    opt.choice = c;
    const ByteBuffer blob = compress(x.data(), ElemType::F32, {int64_t(x.size())}, Spec::lossy_rel(1e-3), opt);
    const BlobInfo info = inspect(blob.data(), blob.size());
    EXPECT_EQ(info.by[int(Codec::Sparse)][0].slices, info.slices);
    EXPECT_STREQ(codec_name(Codec::Sparse), "sparse");
    const Decoded back = decompress(blob.data(), blob.size());
    ASSERT_EQ(back.bytes.size(), x.size() * 4);
    const float* y = reinterpret_cast<const float*>(back.bytes.data());
    double maxerr = 0, lo = 0, hi = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      maxerr = std::max(maxerr, std::fabs(double(x[i]) - double(y[i])));
      lo = std::min(lo, double(x[i]));
      hi = std::max(hi, double(x[i]));
    }
    EXPECT_LE(maxerr, 1e-3 * (hi - lo));
    EXPECT_GT(info.ratio, 40.0);
  }
  // Lossless, forced Sparse or chosen, codes the bit patterns: every one back.
  for (Choice c : {Choice::Auto, Choice::Sparse}) {
    EncodeOptions opt;
    opt.choice = c;
    const ByteBuffer blob = compress(x.data(), ElemType::F32, {int64_t(x.size())}, Spec::lossless(), opt);
    const BlobInfo info = inspect(blob.data(), blob.size());
    EXPECT_EQ(info.by[int(Codec::Sparse)][0].slices, info.slices);
    EXPECT_GT(info.ratio, 15.0);
    const Decoded back = decompress(blob.data(), blob.size());
    ASSERT_EQ(back.bytes.size(), x.size() * 4);
    EXPECT_EQ(0, std::memcmp(back.bytes.data(), x.data(), x.size() * 4));
  }
  // uint8 cannot be forced to Sparse.
  EncodeOptions opt;
  opt.choice = Choice::Sparse;
  std::vector<uint8_t> bytes(1000, 0);
  EXPECT_THROW(compress(bytes.data(), ElemType::U8, {1000}, Spec::lossless(), opt), ncclz::InvalidArgument);
}

TEST(SparseContainer, CorruptBlobsAreRejected) {
  std::mt19937_64 g(2);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> x(70000, 0);
  for (auto& e : x)
    if (u(g) < 0.03) e = int32_t(g() % 2001) - 1000;
  EncodeOptions opt;
  opt.choice = Choice::Sparse;
  const ByteBuffer blob = compress(x.data(), ElemType::I32, {int64_t(x.size())}, Spec::lossless(), opt);
  const Decoded ok = decompress(blob.data(), blob.size());
  ASSERT_EQ(ok.bytes.size(), x.size() * 4);
  ASSERT_EQ(0, std::memcmp(ok.bytes.data(), x.data(), x.size() * 4));
  for (int t = 0; t < 3000; ++t) {
    ByteBuffer m = blob;
    m[g() % m.size()] ^= uint8_t(1u << (g() % 8));
    poke(m, "bit flip");
    ByteBuffer cut(blob.begin(), blob.begin() + long(g() % blob.size()));
    poke(cut, "truncated");
  }
}
