// bound/error_budget: the bound formulas shared by the collectives and the
// standalone codec (the end-to-end bound checks are in test_collectives.cpp,
// test_container.cpp and tests/python).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bound/error_budget.hpp"

namespace {

using ncclz::bound::Combine;
using ncclz::bound::DataStats;
using ncclz::codec::ElemType;
namespace bound = ncclz::bound;

DataStats span(double lo, double hi) {
  DataStats s;
  s.any_finite = true;
  s.lo = lo;
  s.hi = hi;
  s.maxabs = std::max(std::fabs(lo), std::fabs(hi));
  return s;
}

TEST(ErrorBudget, HalfUlpIsHalfAnUlpOfEachTypeAndNeverBelowHalfItsSmallestSubnormal) {
  struct T {
    ElemType t;
    int mant;
    double tiny;
  };
  for (const T& k : {T{ElemType::F32, 24, std::ldexp(1.0, -149)}, T{ElemType::F64, 53, std::ldexp(1.0, -1074)},
                     T{ElemType::F16, 11, std::ldexp(1.0, -24)}, T{ElemType::BF16, 8, std::ldexp(1.0, -133)}}) {
    for (double v : {0.0, 1.0, -3.5, 1e-3, 12345.678, 1e30}) {
      EXPECT_EQ(bound::half_ulp_bound(k.t, v), std::max(std::ldexp(std::fabs(v), -k.mant), k.tiny / 2))
          << int(k.t) << " " << v;
    }
  }
  EXPECT_EQ(bound::largest_finite(ElemType::F16), 65504.0);
  EXPECT_EQ(bound::largest_finite(ElemType::I32), 0.0);
}

TEST(ErrorBudget, RelativeBoundIsRTimesTheSpan) {
  EXPECT_EQ(bound::relative_bound(1e-3, -2.0, 6.0), 1e-3 * 8.0);
  EXPECT_EQ(bound::relative_bound(0.5, 3.0, 3.0), 0.0);
  EXPECT_TRUE(std::isinf(bound::relative_bound(1.0, -1e308, 1e308)));
}

TEST(ErrorBudget, BlobBoundGivesEveryArrayAGrid) {
  const double big = 0x1p1020;
  EXPECT_EQ(bound::blob_bound(0.25, 0, true, -1, 1, big), 0.25);        // abs wins
  EXPECT_EQ(bound::blob_bound(0, 1e-2, true, -1, 3, big), 1e-2 * 4);    // rel * span
  EXPECT_EQ(bound::blob_bound(0, 1e-2, false, 0, 0, big), 1.0);         // no finite value
  EXPECT_EQ(bound::blob_bound(0, 1e-2, true, -6, -6, big), 3.0);        // constant: |lo| / 2
  EXPECT_EQ(bound::blob_bound(0, 1e-2, true, 0, 0, big), 1.0);          // zeros
  EXPECT_EQ(bound::blob_bound(0, 0.5, true, -1e308, 1e308, big), big);  // the span overflowed, then capped
  EXPECT_EQ(bound::blob_bound(0, 0.5, true, -1e308, 1e308, INFINITY), 1e308);
  EXPECT_EQ(bound::blob_bound(0, 1e-300, true, 0, 1e-300, big), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(bound::blob_bound(1e300, 0, true, 0, 1, 1.0), 1.0);  // at most max_eb
}

TEST(ErrorBudget, ExactKeepsBoundOnlyWithHalfTheBoundToSpare) {
  // select is exact in any type
  EXPECT_TRUE(bound::exact_keeps_bound(ElemType::F16, Combine::Select, 8, 1e-30, span(-6e4, 6e4)));
  // a float32 sum of 3 ranks of values up to 30 rounds by up to 2 half-ulps of 90 (~1e-5)
  const double hu = bound::half_ulp_bound(ElemType::F32, 90 * (1 + std::ldexp(1.0, -30)));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F32, Combine::Sum, 3, 1e-5, span(-30, 30)));
  EXPECT_TRUE(bound::exact_keeps_bound(ElemType::F32, Combine::Sum, 3, 4 * hu, span(-30, 30)));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F32, Combine::Sum, 3, 4 * hu * 0.999, span(-30, 30)));
  // the mean divides the sum's error by N and adds one rounding
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F32, Combine::Sum, 3, 1.2e-5, span(-30, 30)));
  EXPECT_TRUE(bound::exact_keeps_bound(ElemType::F32, Combine::Mean, 3, 1.2e-5, span(-30, 30)));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F32, Combine::Mean, 3, 1e-5, span(-30, 30)));
  // non-finite inputs, a bound that is not positive and finite, a sum that may overflow: never
  DataStats nf = span(-1, 1);
  nf.nonfinite = true;
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F64, Combine::Sum, 2, 1.0, nf));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F64, Combine::Sum, 2, 0.0, span(-1, 1)));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F64, Combine::Sum, 2, INFINITY, span(-1, 1)));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::F16, Combine::Sum, 4, 1e6, span(-2e4, 2e4)));
}

}  // namespace
