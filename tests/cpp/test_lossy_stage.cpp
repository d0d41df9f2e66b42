// core::LossyStage: the lossy reductions' per-slice quantize / dequantize
// (the collectives' end-to-end checks are in test_collectives.cpp and
// tests/python/test_comm.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/slice.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/error.hpp"
#include "prims/slice_codec.hpp"
#include "test_stats.hpp"

namespace {

using ncclz::DataType;
using ncclz::core::Combine;
using ncclz::core::LossyStage;
using ncclz_test::stats_of;

TEST(LossyStage, QuantizesAndDequantizesTheRangesItIsGiven) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.01 * double(i)) * 100.0);
  const auto plan = ncclz::core::plan_lossy(ncclz::codec::ElemType::F32, Combine::Sum, 4, 0.5, stats_of(x));
  ASSERT_TRUE(plan.compress);
  ASSERT_FALSE(plan.wide);
  std::vector<int32_t> codes(x.size(), 12345);
  std::vector<float> out(x.size(), -1.f);
  LossyStage st(DataType::F32, plan, x.data(), codes.data(), out.data(), codes.data(), 2 * plan.eb);
  // [100, 150) of the input, quantized into the stage's buffer: the code buffer is not written
  const auto* q = static_cast<const int32_t*>(st.prepare(codes.data() + 100, 50));
  ASSERT_NE(q, nullptr);
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 12345) << i;
  for (size_t k = 0; k < 50; ++k) {
    EXPECT_LE(std::fabs(double(q[k]) * 2 * plan.eb - double(x[100 + k])), plan.check_eb) << k;
  }
  // another range on the same thread: the same buffer, refilled
  const auto* q2 = static_cast<const int32_t*>(st.prepare(codes.data() + 500, 40));
  for (size_t k = 0; k < 40; ++k) {
    EXPECT_LE(std::fabs(double(q2[k]) * 2 * plan.eb - double(x[500 + k])), plan.check_eb) << k;
  }
  // output [120, 130): finish() dequantizes the verb's values (wherever they are) into the
  // output's elements 120..129 only; the code buffer is not written
  std::vector<int32_t> w(10);
  for (int k = 0; k < 10; ++k) w[size_t(k)] = k - 5;  // what a verb would have computed
  st.finish(codes.data() + 120, w.data(), 10);
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 12345) << i;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i < 120 || i >= 130) {
      EXPECT_EQ(out[i], -1.f) << i;
    } else {
      EXPECT_EQ(out[i], float(double(int(i) - 125) * 2 * plan.eb)) << i;
    }
  }
}

TEST(LossyStage, AnInputBeyondTheScannedRangeThrowsInsteadOfBreakingTheBound) {
  std::vector<float> x(64, 1.f);
  const auto plan = ncclz::core::plan_lossy(ncclz::codec::ElemType::F32, Combine::Sum, 2, 1e-6, stats_of(x));
  ASSERT_TRUE(plan.compress);
  x[40] = 1e30f;  // changed after the scan: no int32 code reaches it
  std::vector<int32_t> codes(x.size());
  std::vector<float> out(x.size());
  LossyStage st(DataType::F32, plan, x.data(), codes.data(), out.data(), codes.data(), 2 * plan.eb);
  EXPECT_NO_THROW(st.prepare(codes.data(), 32));
  EXPECT_THROW(st.prepare(codes.data() + 32, 32), ncclz::Error);
}

// The output of a received Sparse slice: the slice codec gives its nonzeros
// as a list (SliceCodec::decode with lists), the stage dequantizes straight
// from them (finish_nonzeros): bit for bit what decoding the slice densely
// and finish() give, for float32/float64 outputs and int32/int64 codes, and
// only in the slice's range. Other slices decode densely; broken ones are
// reported, the output untouched.
template <class T>
void check_finish_from_slice(DataType dt, bool wide) {
  SCOPED_TRACE(testing::Message() << "esize " << sizeof(T) << " wide " << wide);
  const size_t n = 3000, off = 200, total = 4000;
  std::vector<float> x(64, 1.f);
  x[1] = -3.f;
  auto plan = ncclz::core::plan_lossy(ncclz::codec::ElemType::F32, Combine::Sum, 4, 1e-3, stats_of(x));
  ASSERT_TRUE(plan.compress);
  plan.wide = wide;
  const double step = 2 * plan.eb / 3;  // an avg-like step: not a power of two
  const auto ct = wide ? ncclz::codec::ElemType::I64 : ncclz::codec::ElemType::I32;
  const size_t cs = wide ? 8 : 4;
  std::vector<int64_t> c(n, 0);
  for (size_t i = 0; i < n; ++i)
    if ((i * 2654435761u) % 97 < 2) c[i] = int64_t((i * 7919) % 1001) - 500;
  if (wide) c[5] = int64_t(1) << 40;
  std::vector<uint8_t> codes(n * cs);
  for (size_t i = 0; i < n; ++i) {
    if (wide) {
      std::memcpy(&codes[i * 8], &c[i], 8);
    } else {
      const int32_t v = int32_t(c[i]);
      std::memcpy(&codes[i * 4], &v, 4);
    }
  }
  auto slice_of = [&](ncclz::codec::EncodeOptions::Choice ch) {
    ncclz::codec::EncodeOptions opt;
    opt.choice = ch;
    opt.predictor = int(ncclz::codec::Predictor::None);
    std::vector<uint8_t> buf(ncclz::codec::max_slice_bytes(ct, n));
    ncclz::codec::SliceInfo si;
    EXPECT_EQ(ncclz::codec::encode_slice(codes.data(), ct, uint32_t(n), buf.data(), buf.size(), opt, &si),
              ncclz::codec::Status::Ok);
    buf.resize(si.bytes);
    return buf;
  };
  const auto sparse = slice_of(ncclz::codec::EncodeOptions::Choice::Sparse);
  const auto block = slice_of(ncclz::codec::EncodeOptions::Choice::Block);
  std::vector<uint64_t> scratch(n);
  const ncclz::prims::SliceCodec sc(ct, ncclz::prims::WireMode::Coded, {}, nullptr, true,
                                    ncclz::codec::max_slice_bytes(ct, n), reinterpret_cast<uint8_t*>(scratch.data()));
  std::vector<uint64_t> out_codes(total);  // only an address range for the stage
  const uint8_t* oc = reinterpret_cast<const uint8_t*>(out_codes.data());
  std::vector<T> got(total, T(-1)), want(total, T(-1));
  LossyStage a(dt, plan, x.data(), out_codes.data(), got.data(), oc, step);
  LossyStage b(dt, plan, x.data(), out_codes.data(), want.data(), oc, step);
  ncclz::prims::SliceValues v;
  ASSERT_EQ(sc.decode(sparse.data(), sparse.size(), n, true, nullptr, &v), ncclz::codec::Status::Ok);
  ASSERT_TRUE(v.is_list);
  a.finish_nonzeros(oc + off * cs, v.list, n);
  std::vector<uint64_t> dec(n);
  ASSERT_EQ(ncclz::codec::decode_slice(sparse.data(), sparse.size(), ct, uint32_t(n), dec.data()),
            ncclz::codec::Status::Ok);
  b.finish(oc + off * cs, dec.data(), n);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), total * sizeof(T)));
  EXPECT_EQ(got[off - 1], T(-1));
  EXPECT_EQ(got[off + n], T(-1));
  EXPECT_EQ(got[off + 5], T(double(c[5]) * step));
  // A Block slice: dense, into the buffer given. Refused: truncated, wrong count.
  std::vector<uint64_t> dense(n);
  ASSERT_EQ(sc.decode(block.data(), block.size(), n, true, reinterpret_cast<uint8_t*>(dense.data()), &v),
            ncclz::codec::Status::Ok);
  EXPECT_FALSE(v.is_list);
  EXPECT_EQ(0, std::memcmp(dense.data(), dec.data(), n * cs));
  EXPECT_NE(sc.decode(sparse.data(), sparse.size() - 1, n, true, nullptr, &v), ncclz::codec::Status::Ok);
  EXPECT_EQ(sc.decode(sparse.data(), sparse.size(), n + 1, true, nullptr, &v), ncclz::codec::Status::CountMismatch);
  std::vector<uint8_t> longer = sparse;
  longer.push_back(0);
  EXPECT_EQ(sc.decode(longer.data(), longer.size(), n, true, nullptr, &v), ncclz::codec::Status::Corrupt);
}

TEST(LossyStage, FinishFromASparseSliceIsFinishFromItsDecodedCodes) {
  check_finish_from_slice<float>(DataType::F32, false);
  check_finish_from_slice<float>(DataType::F32, true);
  check_finish_from_slice<double>(DataType::F64, false);
  check_finish_from_slice<double>(DataType::F64, true);
}

}  // namespace
