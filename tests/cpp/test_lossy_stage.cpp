// core::LossyStage: the lossy reductions' per-slice quantize / dequantize
// (the collectives' end-to-end checks are in test_collectives.cpp and
// tests/python/test_comm.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/error.hpp"

namespace {

using ncclz::DataType;
using ncclz::core::Combine;
using ncclz::core::DataStats;
using ncclz::core::LossyStage;

DataStats stats_of(const std::vector<float>& x) {
  DataStats s;
  s.any_finite = true;
  s.lo = s.hi = x[0];
  for (float v : x) {
    s.lo = std::fmin(s.lo, v);
    s.hi = std::fmax(s.hi, v);
  }
  s.maxabs = std::fmax(std::fabs(s.lo), std::fabs(s.hi));
  return s;
}

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
  // output [120, 130): the verb writes into the stage's buffer (not the code buffer), finish()
  // dequantizes from it into the output's elements 120..129 only
  auto* w = static_cast<int32_t*>(st.output(codes.data() + 120, 10));
  ASSERT_NE(w, nullptr);
  ASSERT_NE(static_cast<const void*>(w), static_cast<const void*>(q2));  // input and output buffers differ
  for (int k = 0; k < 10; ++k) w[k] = k - 5;  // what a verb would have written
  st.finish(codes.data() + 120, w, 10);
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

}  // namespace
