// The mostly-zero input path of lossy sums, layer by layer: the statistics scan
// that lists an input's nonzeros (codec::finite_stats_nonzeros,
// core::NonzeroIndex), the stage that quantizes a slice from that list and
// writes results from lists (core::LossyStage::prepare_nonzeros /
// finish_nonzeros), the coder entry points that take and give lists
// (sparse_encode_nonzeros, sparse_decode_merge, encode_slice_nonzeros,
// decode_slice_merge) and the prims steps that carry lists (the slice
// codec's list paths, prims::SliceCodec, with a prims::ListStage). Each is checked against the dense path it replaces:
// the same codes, the same bytes or the same result bits. The collectives end
// to end: test_collectives.cpp (SparseInput*) and tests/python/test_comm.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/worker_pool.hpp"
#include "codec/block_coder.hpp"
#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "codec/sparse_coder.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/error.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_fifo.hpp"
#include "test_stats.hpp"

using namespace ncclz;
using codec::ElemType;
using codec::Status;
using ncclz_test::FakeRecv;
using ncclz_test::FakeSend;
using ncclz_test::Fifo;
using ncclz_test::stats_of;

namespace {

// n codes, each nonzero with probability `density` (values in [-300, 300]
// without 0, a few at the type's extremes so that sums wrap).
template <class Code>
std::vector<Code> sparse_codes(size_t n, double density, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Code> v(n, Code(0));
  for (auto& x : v) {
    if (u(g) >= density) continue;
    if (g() % 50 == 0) {
      x = (g() & 1) ? std::numeric_limits<Code>::max() : std::numeric_limits<Code>::min();
    } else {
      const int64_t c = int64_t(g() % 600) - 300;
      x = Code(c >= 0 ? c + 1 : c);
    }
  }
  return v;
}

template <class Code>
void list_of(const std::vector<Code>& d, std::vector<uint32_t>* pos, std::vector<Code>* val) {
  pos->clear();
  val->clear();
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] != 0) {
      pos->push_back(uint32_t(i));
      val->push_back(d[i]);
    }
  }
}

template <class Code>
Code wrap_add(Code a, Code b) {
  using U = std::make_unsigned_t<Code>;
  return Code(U(U(a) + U(b)));
}

constexpr ElemType code_type(size_t bytes) { return bytes == 4 ? ElemType::I32 : ElemType::I64; }

// ---------------------------------------------------------------- coder

template <class Code>
void check_encode_from_list() {
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(1000), size_t(70001)}) {
    for (double d : {0.0, 0.003, 0.02, 0.1, 0.6}) {
      SCOPED_TRACE(testing::Message() << "bytes " << sizeof(Code) << " n " << n << " density " << d);
      const auto r = sparse_codes<Code>(n, d, uint32_t(n * 7 + size_t(d * 1000)));
      std::vector<uint32_t> pos;
      std::vector<Code> val;
      list_of(r, &pos, &val);
      std::vector<uint8_t> a(64 + n * 16), b(64 + n * 16);
      const size_t ka = codec::sparse_encode(r.data(), n, a.data(), a.size());
      const size_t kb = codec::sparse_encode_nonzeros(pos.data(), val.data(), pos.size(), n, b.data(), b.size());
      ASSERT_EQ(ka, kb);
      if (ka != codec::kNoFit) {
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), ka));  // the same payload
      }
      if (kb != codec::kNoFit && kb > 0) {
        EXPECT_EQ(codec::sparse_encode_nonzeros(pos.data(), val.data(), pos.size(), n, b.data(), kb - 1),
                  codec::kNoFit);
      }
    }
  }
}

TEST(SparseInputCoder, EncodingAListGivesTheScansBytes) {
  check_encode_from_list<int32_t>();
  check_encode_from_list<int64_t>();
}

template <class Code>
void check_decode_merge() {
  const size_t n = 20011;
  for (double da : {0.0, 0.01, 0.2}) {
    for (double db : {0.0, 0.01, 0.05}) {
      SCOPED_TRACE(testing::Message() << "bytes " << sizeof(Code) << " list " << da << " slice " << db);
      auto a = sparse_codes<Code>(n, da, 11);
      const auto b = sparse_codes<Code>(n, db, 12);
      // Cancellations (a + b == 0 must leave the list) and collisions.
      for (size_t i = 0; i < n; i += 97) {
        if (b[i] != 0) a[i] = Code(-b[i]);
      }
      for (size_t i = 5; i < n; i += 89) {
        if (b[i] != 0) a[i] = Code(3);
      }
      std::vector<uint32_t> apos, want_pos;
      std::vector<Code> aval, want_val;
      list_of(a, &apos, &aval);
      std::vector<Code> sum(n);
      for (size_t i = 0; i < n; ++i) sum[i] = wrap_add(a[i], b[i]);
      list_of(sum, &want_pos, &want_val);
      std::vector<uint8_t> buf(64 + n * 16);
      const size_t bytes = codec::sparse_encode(b.data(), n, buf.data(), buf.size());
      ASSERT_NE(bytes, codec::kNoFit);
      std::vector<uint32_t> pos(apos.size() + n, 7);
      std::vector<Code> val(apos.size() + n, 7);
      size_t k = 99;
      ASSERT_EQ(codec::sparse_decode_merge(buf.data(), bytes, n, apos.data(), aval.data(), apos.size(), pos.data(),
                                           val.data(), &k),
                Status::Ok);
      ASSERT_EQ(k, want_pos.size());
      EXPECT_TRUE(std::equal(want_pos.begin(), want_pos.end(), pos.begin()));
      EXPECT_TRUE(std::equal(want_val.begin(), want_val.end(), val.begin()));
      // A truncated payload is an error, with no list.
      if (bytes > 4) {
        EXPECT_NE(codec::sparse_decode_merge(buf.data(), bytes - 3, n, apos.data(), aval.data(), apos.size(),
                                             pos.data(), val.data(), &k),
                  Status::Ok);
        EXPECT_EQ(k, 0u);
      }
    }
  }
}

TEST(SparseInputCoder, DecodeMergeIsTheSumsNonzeros) {
  check_decode_merge<int32_t>();
  check_decode_merge<int64_t>();
}

TEST(SparseInputCoder, SixteenBitScanFindsTheNonzeros) {
  std::mt19937 g(5);
  for (size_t n = 0; n < 300; ++n) {
    for (double d : {0.0, 0.01, 0.3, 1.0}) {
      std::vector<int16_t> r(n);
      for (auto& x : r) x = std::uniform_real_distribution<double>(0, 1)(g) < d ? int16_t(g() | 1) : int16_t(0);
      if (n > 3 && d > 0) r[n - 1] = std::numeric_limits<int16_t>::min();  // the sign bit alone (-0.0 in f16)
      std::vector<uint32_t> want_pos, pos(n + 1), pos2(n + 1);
      std::vector<int16_t> want_val, val(n + 1), val2(n + 1);
      list_of(r, &want_pos, &want_val);
      const size_t k = codec::sparse_find_nonzeros(r.data(), n, pos.data(), val.data());
      const size_t k2 = codec::sparse_find_nonzeros(codec::SparseScan::Scalar, r.data(), n, pos2.data(), val2.data());
      ASSERT_EQ(k, want_pos.size()) << n;
      ASSERT_EQ(k2, want_pos.size()) << n;
      EXPECT_TRUE(std::equal(want_pos.begin(), want_pos.end(), pos.begin()));
      EXPECT_TRUE(std::equal(want_val.begin(), want_val.end(), val.begin()));
      EXPECT_TRUE(std::equal(want_pos.begin(), want_pos.end(), pos2.begin()));
    }
  }
}

// ---------------------------------------------------------------- slices

template <class Code>
void check_slice_from_list() {
  const ElemType t = code_type(sizeof(Code));
  for (uint32_t n : {1u, 100u, 5000u}) {
    for (double d : {0.0, 0.02, 1.0}) {
      SCOPED_TRACE(testing::Message() << "bytes " << sizeof(Code) << " n " << n << " density " << d);
      auto r = sparse_codes<Code>(n, d, n + 3);
      std::mt19937_64 g(n);
      if (d >= 1.0) {  // full-width random values everywhere: Sparse is larger than Raw
        for (auto& v : r) v = v ? Code(g() | 1) : Code(0);
      }
      std::vector<uint32_t> pos;
      std::vector<Code> val;
      list_of(r, &pos, &val);
      std::vector<uint8_t> buf(codec::max_slice_bytes(t, n));
      codec::SliceInfo si;
      ASSERT_EQ(codec::encode_slice_nonzeros(pos.data(), val.data(), pos.size(), t, n, buf.data(), buf.size(), &si),
                Status::Ok);
      // Sparse, or Raw where Sparse is larger (random values everywhere).
      EXPECT_TRUE(si.codec == codec::Codec::Sparse || si.codec == codec::Codec::Raw);
      if (d >= 1.0) {
        EXPECT_EQ(si.codec, codec::Codec::Raw);
      }
      if (d <= 0.02) {
        EXPECT_EQ(si.codec, codec::Codec::Sparse);
      }
      std::vector<Code> back(n, Code(5));
      size_t used = 0;
      ASSERT_EQ(codec::decode_slice(buf.data(), si.bytes, t, n, back.data(), &used), Status::Ok);
      EXPECT_EQ(used, si.bytes);
      EXPECT_TRUE(back == r);
      if (si.codec == codec::Codec::Sparse) {
        // The merge entry point takes it; an empty list merged gives the list back.
        std::vector<uint32_t> mp(n);
        std::vector<Code> mv(n);
        size_t k = 0;
        ASSERT_EQ(codec::decode_slice_merge(buf.data(), si.bytes, t, n, nullptr, nullptr, 0, mp.data(), mv.data(), &k),
                  Status::Ok);
        ASSERT_EQ(k, pos.size());
        EXPECT_TRUE(std::equal(pos.begin(), pos.end(), mp.begin()));
        EXPECT_EQ(
            codec::decode_slice_merge(buf.data(), si.bytes, t, n + 1, nullptr, nullptr, 0, mp.data(), mv.data(), &k),
            Status::CountMismatch);
      } else {
        size_t k = 0;
        std::vector<uint32_t> mp(n);
        std::vector<Code> mv(n);
        EXPECT_EQ(codec::decode_slice_merge(buf.data(), si.bytes, t, n, nullptr, nullptr, 0, mp.data(), mv.data(), &k),
                  Status::Unsupported);
      }
    }
  }
}

TEST(SparseInputSlice, EncodeFromAListDecodesToTheCodes) {
  check_slice_from_list<int32_t>();
  check_slice_from_list<int64_t>();
}

TEST(SparseInputSlice, BadListsAndTypesAreRefused) {
  std::vector<uint8_t> buf(4096);
  const int32_t v[3] = {1, 2, 3};
  const uint32_t unsorted[3] = {5, 4, 9}, dup[3] = {1, 1, 2}, beyond[3] = {1, 2, 100}, ok[3] = {0, 50, 99};
  const int32_t zero[3] = {1, 0, 3};
  EXPECT_EQ(codec::encode_slice_nonzeros(unsorted, v, 3, ElemType::I32, 100, buf.data(), buf.size()), Status::Corrupt);
  EXPECT_EQ(codec::encode_slice_nonzeros(dup, v, 3, ElemType::I32, 100, buf.data(), buf.size()), Status::Corrupt);
  EXPECT_EQ(codec::encode_slice_nonzeros(beyond, v, 3, ElemType::I32, 100, buf.data(), buf.size()), Status::Corrupt);
  EXPECT_EQ(codec::encode_slice_nonzeros(ok, zero, 3, ElemType::I32, 100, buf.data(), buf.size()), Status::Corrupt);
  EXPECT_EQ(codec::encode_slice_nonzeros(ok, v, 3, ElemType::F32, 100, buf.data(), buf.size()), Status::Unsupported);
  EXPECT_EQ(codec::encode_slice_nonzeros(ok, v, 3, ElemType::I32, 100, buf.data(), 8), Status::NoSpace);
  codec::SliceInfo si;
  ASSERT_EQ(codec::encode_slice_nonzeros(ok, v, 3, ElemType::I32, 100, buf.data(), buf.size(), &si), Status::Ok);
  size_t k = 0;
  std::vector<uint32_t> p(200);
  std::vector<int64_t> q(200);
  EXPECT_EQ(
      codec::decode_slice_merge(buf.data(), si.bytes, ElemType::I64, 100, nullptr, nullptr, 0, p.data(), q.data(), &k),
      Status::TypeMismatch);
  // A slice without nonzeros lists nothing: no room needed for it.
  ASSERT_EQ(codec::encode_slice_nonzeros(nullptr, nullptr, 0, ElemType::I32, 100, buf.data(), buf.size(), &si),
            Status::Ok);
  ASSERT_EQ(si.codec, codec::Codec::Sparse);
  size_t nz = 99;
  ASSERT_TRUE(codec::sparse_slice_nonzeros(buf.data(), si.bytes, &nz));
  EXPECT_EQ(nz, 0u);
  k = 99;
  EXPECT_EQ(
      codec::decode_slice_merge(buf.data(), si.bytes, ElemType::I32, 100, nullptr, nullptr, 0, nullptr, nullptr, &k),
      Status::Ok);
  EXPECT_EQ(k, 0u);
  EXPECT_EQ(codec::decode_slice_nonzeros(buf.data(), si.bytes, ElemType::I32, 100, nullptr, nullptr, &k), Status::Ok);
  EXPECT_EQ(k, 0u);
  // An empty slice is Raw, as encode_slice makes it.
  ASSERT_EQ(codec::encode_slice_nonzeros(nullptr, nullptr, 0, ElemType::I32, 0, buf.data(), buf.size(), &si),
            Status::Ok);
  EXPECT_EQ(si.codec, codec::Codec::Raw);
}

// ---------------------------------------------------------------- statistics scan

// finite_stats_nonzeros: finite_stats' answer and the elements whose bits are
// not all zero, for every length (vector body and tails), with -0.0, tiny
// values and non-finite ones at moving positions.
template <class T>
void check_stats_nonzeros(uint32_t seed) {
  using Bits = codec::BitsOf<T>;
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0, 10);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 80; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (size_t n : lengths) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<T> x(n, codec::from_double<T>(0.0));
      for (size_t i = 0; i < n; ++i) {
        if (g() % 7 == 0) x[i] = codec::from_double<T>(nd(g));
      }
      if (n > 0) {
        const size_t at = (size_t(variant) * 13 + 5) % n;
        if (variant == 1) x[at] = codec::from_double<T>(-0.0);
        if (variant == 2) x[at] = codec::from_double<T>(std::numeric_limits<double>::infinity());
        if (variant == 3) x[at] = codec::from_double<T>(std::numeric_limits<double>::quiet_NaN());
      }
      SCOPED_TRACE(testing::Message() << "esize " << sizeof(T) << " n " << n << " variant " << variant);
      double lo = 0, hi = 0, rlo = 0, rhi = 0;
      bool nf = false, rnf = false;
      const bool rany = codec::finite_stats(x.data(), n, &rlo, &rhi, &rnf);
      std::vector<uint32_t> pos(n + 1);
      std::vector<Bits> bits(n + 1);
      size_t k = 12345;
      const bool any = codec::finite_stats_nonzeros(x.data(), n, &lo, &hi, &nf, pos.data(), bits.data(), &k);
      ASSERT_EQ(any, rany);
      ASSERT_EQ(nf, rnf);
      if (any) {
        EXPECT_EQ(lo, rlo);
        EXPECT_EQ(hi, rhi);
      }
      size_t want = 0;
      for (size_t i = 0; i < n; ++i) {
        Bits b;
        std::memcpy(&b, &x[i], sizeof b);
        if (b == 0) continue;
        ASSERT_LT(want, k);
        EXPECT_EQ(pos[want], i);
        EXPECT_EQ(bits[want], b);
        ++want;
      }
      EXPECT_EQ(k, want);
    }
  }
}

TEST(SparseInputScan, StatsAndNonzerosInOnePass) {
  check_stats_nonzeros<float>(1);
  check_stats_nonzeros<double>(2);
  check_stats_nonzeros<codec::Bf16>(3);
  check_stats_nonzeros<codec::F16>(4);
}

// A float32 input: `density` of the elements nonzero (N(0, 1)), the rest +0.0.
std::vector<float> sparse_floats(size_t n, double density, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(n, 0.f);
  for (auto& v : x)
    if (u(g) < density) v = nd(g);
  return x;
}

TEST(SparseInputScan, IndexListsMostlyZeroPartsOnly) {
  // Two parts on a pool: the first mostly zero, the second dense; the
  // statistics are those of the plain scan either way.
  const size_t n = 600000;
  auto x = sparse_floats(n, 0.01, 3);
  for (size_t i = n / 2 + 1000; i < n; ++i) x[i] = float(i % 17) - 8.5f;
  base::WorkerPool pool(1);
  core::NonzeroIndex index;
  const core::DataStats plain = core::scan(DataType::F32, x.data(), n, &pool, 2);
  const core::DataStats s = core::scan(DataType::F32, x.data(), n, &pool, 2, &index);
  EXPECT_EQ(s.lo, plain.lo);
  EXPECT_EQ(s.hi, plain.hi);
  EXPECT_EQ(s.maxabs, plain.maxabs);
  EXPECT_FALSE(index.covers_all());
  size_t first_half = 0;
  for (size_t i = 0; i < n / 2; ++i) first_half += x[i] != 0.f;
  EXPECT_EQ(index.listed(), first_half);
  // Spans of a range in the listed part: exactly its nonzeros, in order.
  std::vector<size_t> got;
  ASSERT_TRUE(index.for_each_span(1000, 50000, [&](const core::NonzeroIndex::Span& sp) {
    for (size_t i = 0; i < sp.k; ++i) {
      float v;
      std::memcpy(&v, sp.val + i * 4, 4);
      EXPECT_EQ(v, x[sp.base + sp.pos[i]]);
      got.push_back(sp.base + sp.pos[i]);
    }
  }));
  std::vector<size_t> want;
  for (size_t i = 1000; i < 51000; ++i)
    if (x[i] != 0.f) want.push_back(i);
  EXPECT_EQ(got, want);
  // A range that reaches into the dense part: not listed.
  EXPECT_FALSE(index.for_each_span(n / 2 - 10, 20, [](const core::NonzeroIndex::Span&) {}));
  // The whole input mostly zero: listed everywhere, across the part boundary too.
  const auto y = sparse_floats(n, 0.02, 4);
  core::scan(DataType::F32, y.data(), n, &pool, 2, &index);
  EXPECT_TRUE(index.covers_all());
  size_t k = 0, nz = 0;
  for (float v : y) nz += v != 0.f;
  ASSERT_TRUE(index.for_each_span(0, n, [&](const core::NonzeroIndex::Span& sp) { k += sp.k; }));
  EXPECT_EQ(k, nz);
}

// ---------------------------------------------------------------- stage

TEST(SparseInputStage, ListsAreTheDenseCodesNonzeros) {
  const size_t n = 300000;
  auto x = sparse_floats(n, 0.01, 9);
  // -0.0 and values below half a step: listed by the scan, code 0, so not in the lists.
  x[10] = -0.0f;
  x[11] = 1e-12f;
  x[12] = -1e-12f;
  base::WorkerPool pool(1);
  core::NonzeroIndex index;
  const core::DataStats st = core::scan(DataType::F32, x.data(), n, &pool, 2, &index);
  ASSERT_TRUE(index.covers_all());
  for (bool wide : {false, true}) {
    SCOPED_TRACE(testing::Message() << "wide " << wide);
    auto plan = core::plan_lossy(ElemType::F32, core::Combine::Sum, 4, 1e-3 * (st.hi - st.lo), st);
    ASSERT_TRUE(plan.compress);
    plan.wide = wide;
    if (wide) plan.limit = int64_t(1) << 40;
    const size_t cs = wide ? 8 : 4;
    std::vector<uint64_t> codes(n);  // only an address range
    const uint8_t* cb = reinterpret_cast<const uint8_t*>(codes.data());
    std::vector<float> out(n);
    core::LossyStage stage(DataType::F32, plan, x.data(), codes.data(), out.data(), codes.data(), 2 * plan.eb, &index,
                           false);
    for (size_t off : {size_t(0), size_t(149990), size_t(299000)}) {
      const size_t m = std::min<size_t>(20000, n - off);
      prims::NonzeroList l;
      ASSERT_TRUE(stage.prepare_nonzeros(cb + off * cs, m, m, &l));
      std::vector<int64_t> from_list(m, 0);
      for (size_t i = 0; i < l.k; ++i) {
        ASSERT_LT(l.pos[i], m);
        if (i) {
          ASSERT_LT(l.pos[i - 1], l.pos[i]);
        }
        from_list[l.pos[i]] = wide ? static_cast<const int64_t*>(l.val)[i] : static_cast<const int32_t*>(l.val)[i];
        ASSERT_NE(from_list[l.pos[i]], 0);
      }
      const void* dense = stage.prepare(cb + off * cs, m);
      for (size_t i = 0; i < m; ++i) {
        const int64_t c = wide ? static_cast<const int64_t*>(dense)[i] : static_cast<const int32_t*>(dense)[i];
        ASSERT_EQ(c, from_list[i]) << off + i;
      }
      // More nonzeros than asked for: the dense way.
      if (l.k > 1) {
        EXPECT_FALSE(stage.prepare_nonzeros(cb + off * cs, m, l.k / 2, &l));
      }
    }
  }
  // No index: always the dense way.
  auto plan = core::plan_lossy(ElemType::F32, core::Combine::Sum, 4, 1e-3, st);
  std::vector<uint32_t> codes(n);
  std::vector<float> out(n);
  core::LossyStage plain(DataType::F32, plan, x.data(), codes.data(), out.data(), codes.data(), 2 * plan.eb);
  prims::NonzeroList l;
  EXPECT_FALSE(plain.prepare_nonzeros(codes.data(), 100, 100, &l));
}

// The listed values are what the list path quantizes (x is not read again):
// values that do not fit the call's grid throw, as prepare() does for x.
TEST(SparseInputStage, ListedValuesBeyondTheGridThrow) {
  std::vector<float> x(5000, 0.f);
  x[100] = 1.f;
  x[4000] = -2.f;
  core::NonzeroIndex index;
  const core::DataStats st = core::scan(DataType::F32, x.data(), x.size(), nullptr, 1, &index);
  ASSERT_TRUE(index.covers_all());
  auto plan = core::plan_lossy(ElemType::F32, core::Combine::Sum, 2, 1e-6, st);
  ASSERT_TRUE(plan.compress);
  std::vector<int32_t> codes(x.size());
  std::vector<float> out(x.size());
  core::LossyStage stage(DataType::F32, plan, x.data(), codes.data(), out.data(), codes.data(), 2 * plan.eb, &index);
  prims::NonzeroList l;
  EXPECT_TRUE(stage.prepare_nonzeros(codes.data(), 5000, 5000, &l));
  EXPECT_EQ(l.k, 2u);
  // A plan whose codes cannot reach the listed values.
  auto tight = core::plan_lossy(ElemType::F32, core::Combine::Sum, 2, 1e-3, stats_of({0.f, 0.5f}));
  ASSERT_TRUE(tight.compress);
  tight.limit = 100;  // codes of 1 and -2 are beyond it
  core::LossyStage other(DataType::F32, tight, x.data(), codes.data(), out.data(), codes.data(), 2 * tight.eb, &index);
  EXPECT_THROW(other.prepare_nonzeros(codes.data(), 5000, 5000, &l), Error);
}

// finish_nonzeros writes what finish() writes from the dense codes: out of
// place over the whole range; in place only where x was not +0.0 (the rest
// holds +0.0 already), which gives the same bits.
template <class T>
void check_finish_nonzeros(DataType dt, ElemType et, double E) {
  const size_t n = 50000;
  std::mt19937_64 g(21);
  std::vector<T> x(n, codec::from_double<T>(0.0));
  for (size_t i = 0; i < n; ++i)
    if (g() % 60 == 0) x[i] = codec::from_double<T>(double(int64_t(g() % 2001) - 1000) / 64);
  x[3] = codec::from_double<T>(-0.0);
  core::NonzeroIndex index;
  const core::DataStats st = core::scan(dt, x.data(), n, nullptr, 1, &index);
  ASSERT_TRUE(index.covers_all());
  const auto plan = core::plan_lossy(et, core::Combine::Sum, 3, E, st);
  ASSERT_TRUE(plan.compress);
  ASSERT_FALSE(plan.wide);
  const double step = 2 * plan.eb;
  // The final codes of [off, off + m): a sum's nonzeros, elsewhere than x's too.
  const size_t off = 777, m = 30000;
  const auto c = sparse_codes<int32_t>(m, 0.03, 5);
  std::vector<int32_t> small(m);
  for (size_t i = 0; i < m; ++i) {  // no extreme codes: they would not dequantize within T's range
    const bool extreme = c[i] == std::numeric_limits<int32_t>::max() || c[i] == std::numeric_limits<int32_t>::min();
    small[i] = extreme ? 7 : c[i];
  }
  std::vector<uint32_t> pos;
  std::vector<int32_t> val;
  list_of(small, &pos, &val);
  const prims::NonzeroList l{pos.data(), val.data(), pos.size()};
  std::vector<int32_t> codes(n);
  const uint8_t* cb = reinterpret_cast<const uint8_t*>(codes.data());
  // Reference: finish() from the dense codes, out of place into a copy of x.
  std::vector<T> want = x;
  core::LossyStage ref(dt, plan, x.data(), codes.data(), want.data(), codes.data(), step);
  ref.finish(cb + off * 4, small.data(), m);
  // Out of place, into garbage.
  std::vector<T> got(n);
  std::memcpy(got.data(), x.data(), n * sizeof(T));
  core::LossyStage oop(dt, plan, x.data(), codes.data(), got.data(), codes.data(), step, &index, false);
  oop.finish_nonzeros(cb + off * 4, l, m);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(T)));
  // In place: out is x itself.
  std::vector<T> inplace = x;
  core::NonzeroIndex index2;
  core::scan(dt, inplace.data(), n, nullptr, 1, &index2);
  core::LossyStage ip(dt, plan, inplace.data(), codes.data(), inplace.data(), codes.data(), step, &index2, true);
  ip.finish_nonzeros(cb + off * 4, l, m);
  EXPECT_EQ(0, std::memcmp(inplace.data(), want.data(), n * sizeof(T)));
}

TEST(SparseInputStage, FinishFromAListIsFinishFromTheCodes) {
  check_finish_nonzeros<float>(DataType::F32, ElemType::F32, 0.01);
  check_finish_nonzeros<double>(DataType::F64, ElemType::F64, 0.01);
  check_finish_nonzeros<codec::Bf16>(DataType::BF16, ElemType::BF16, 2.0);
  check_finish_nonzeros<codec::F16>(DataType::F16, ElemType::F16, 2.0);
}

// ---------------------------------------------------------------- prims

// A stage over int32 "inputs" that are codes already: prepare() copies the
// slice, prepare_nonzeros() lists it (when `lists`), finish() and
// finish_nonzeros() write the final codes to the verbs' dst addresses.
struct CodeStage : prims::ListStage {
  bool lists = true;
  std::vector<int32_t> buf;
  std::vector<uint32_t> lp;
  std::vector<int32_t> lv;
  int listed = 0, finished_from_lists = 0;
  void* prepare(const void* src, size_t n) override {
    buf.assign(static_cast<const int32_t*>(src), static_cast<const int32_t*>(src) + n);
    return buf.data();
  }
  bool prepare_nonzeros(const void* src, size_t n, size_t max_k, prims::NonzeroList* out) override {
    if (!lists) return false;
    const int32_t* s = static_cast<const int32_t*>(src);
    lp.clear();
    lv.clear();
    for (size_t i = 0; i < n; ++i) {
      if (s[i] != 0) {
        lp.push_back(uint32_t(i));
        lv.push_back(s[i]);
      }
    }
    if (lp.size() > max_k) return false;
    ++listed;
    *out = prims::NonzeroList{lp.data(), lv.data(), lp.size()};
    return true;
  }
  void finish(const void* dst, const void* data, size_t n) override {
    std::memcpy(const_cast<void*>(dst), data, n * 4);
  }
  void finish_nonzeros(const void* dst, const prims::NonzeroList& l, size_t n) override {
    ++finished_from_lists;
    int32_t* d = static_cast<int32_t*>(const_cast<void*>(dst));
    std::fill(d, d + n, 0);
    for (size_t i = 0; i < l.k; ++i) d[l.pos[i]] = static_cast<const int32_t*>(l.val)[i];
  }
};

// The same without the list side: a plain Stage (lists are then off).
struct DenseCodeStage : prims::Stage {
  CodeStage inner;
  void* prepare(const void* src, size_t n) override { return inner.prepare(src, n); }
  void finish(const void* dst, const void* data, size_t n) override { inner.finish(dst, data, n); }
};

prims::PrimsArgs code_args() {
  prims::PrimsArgs a;
  a.type = ElemType::I32;
  a.mode = prims::WireMode::Coded;
  a.reduce = prims::reduce_fn(ElemType::I32, RedOp::Sum);
  a.int_sum = true;
  a.raw_esize = 4;
  a.deadline = transport::Clock::now() + std::chrono::seconds(60);
  return a;
}

// a -> b -> c: a sends its codes, b adds its own (recvReduceCopySend: the
// sum goes on and into b's output), c receives. With and without lists at a
// and b (b with a plain Stage: lists off), with a's slices forced Block (b
// cannot merge them: the dense step), with b's sum too dense for a list, and
// with c writing its output through a ListStage (Sparse slices decode to
// lists): c and b always end with the exact sums.
TEST(SparseInputPrims, ListStepsGiveTheDenseStepsSums) {
  const size_t n = 9001;
  const auto x = sparse_codes<int32_t>(n, 0.01, 31);
  const auto y_sparse = sparse_codes<int32_t>(n, 0.01, 32);
  const auto y_dense = sparse_codes<int32_t>(n, 0.5, 33);
  struct Case {
    bool lists_a, lists_b, plain_b, block_a, dense_b, stage_c;
  };
  const Case cases[] = {{false, false, false, false, false, false}, {true, true, false, false, false, false},
                        {true, true, true, false, false, false},    {true, false, false, false, false, true},
                        {false, true, false, false, false, true},   {false, true, false, true, false, true},
                        {true, true, false, false, true, false},    {true, true, false, false, false, true}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(testing::Message() << "lists a " << cs.lists_a << " b " << cs.lists_b << " b plain " << cs.plain_b
                                    << " block a " << cs.block_a << " dense b " << cs.dense_b << " stage c "
                                    << cs.stage_c);
    const auto& y = cs.dense_b ? y_dense : y_sparse;
    std::vector<int32_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = wrap_add(x[i], y[i]);
    Fifo ab(4096, 3), bc(4096, 3);
    FakeSend a_s(&ab), b_s(&bc);
    FakeRecv b_r(&ab), c_r(&bc);
    CodeStage sa, sb, sc;
    DenseCodeStage sb_plain;
    sa.lists = cs.lists_a;
    sb.lists = cs.lists_b;
    std::vector<int32_t> b_out(n, -1), got(n, -1);
    prims::ChannelStats st[3];
    std::vector<uint64_t> scr[3] = {std::vector<uint64_t>(600), std::vector<uint64_t>(600), std::vector<uint64_t>(600)};
    std::thread ta([&] {
      auto a = code_args();
      if (cs.block_a) a.enc.choice = codec::EncodeOptions::Choice::Block;
      a.stage = &sa;
      prims::Prims p(&a_s, nullptr, a, &st[0], scr[0].data());
      p.send(x.data(), n);
    });
    std::thread tb([&] {
      auto a = code_args();
      a.stage = cs.plain_b ? static_cast<prims::Stage*>(&sb_plain) : &sb;
      prims::Prims p(&b_s, &b_r, a, &st[1], scr[1].data());
      p.recvReduceCopySend(y.data(), b_out.data(), n);
    });
    auto c_args = code_args();
    if (cs.stage_c) c_args.stage = &sc;
    prims::Prims p(nullptr, &c_r, c_args, &st[2], scr[2].data());
    p.recv(got.data(), n);
    ta.join();
    tb.join();
    EXPECT_EQ(got, want);
    EXPECT_EQ(b_out, want);
    // Which path ran: a lists only when its encoder may send Sparse.
    EXPECT_EQ(sa.listed > 0, cs.lists_a && !cs.block_a);
    if (cs.lists_b && !cs.plain_b && !cs.block_a && !cs.dense_b) {
      EXPECT_GT(sb.finished_from_lists, 0);
    }
    if (cs.plain_b || cs.dense_b || cs.block_a) {
      EXPECT_EQ(sb.finished_from_lists, 0);
    }
    EXPECT_EQ(sb_plain.inner.listed + sb_plain.inner.finished_from_lists, 0);
    if (cs.lists_a && !cs.block_a) {
      for (const auto& s : ab.log) EXPECT_TRUE(codec::slice_adds_sparse(s.data(), s.size()));
    }
    // c: every Sparse slice it received went to its output as a list.
    int sparse_to_c = 0;
    for (const auto& s : bc.log) sparse_to_c += codec::slice_adds_sparse(s.data(), s.size());
    EXPECT_EQ(sc.finished_from_lists, cs.stage_c ? sparse_to_c : 0);
    if (cs.stage_c && !cs.dense_b) {
      EXPECT_GT(sparse_to_c, 0);
    }
  }
}

}  // namespace
