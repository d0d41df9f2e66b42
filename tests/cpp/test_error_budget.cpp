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

namespace {

using ncclz::bound::Accumulation;

TEST(ErrorBudget, AMeanOverAPowerOfTwoRanksDividesExactly) {
  // divide_in_place's quotient by 2^k is exact in T but in its subnormal range
  const DataStats g = span(-3, 3);
  const double A = 3 * (1 + std::ldexp(1.0, -30));
  for (ElemType t : {ElemType::BF16, ElemType::F16, ElemType::F32}) {
    for (int n : {2, 4, 8}) {
      const double sum = (n - 1) * bound::half_ulp_bound(t, n * A);
      EXPECT_EQ(bound::exact_error(t, Combine::Mean, n, g, false), sum / n + bound::half_ulp_bound(t, 0)) << n;
    }
    const double sum3 = 2 * bound::half_ulp_bound(t, 3 * A);
    EXPECT_EQ(bound::exact_error(t, Combine::Mean, 3, g, false), sum3 / 3 + bound::half_ulp_bound(t, A));
  }
}

TEST(ErrorBudget, Float32AccumulationRoundsTheWholeSumOnceToTheType) {
  const DataStats g = span(-1, 4);
  const double R = 3 * 4 * (1 + std::ldexp(1.0, -30)), e32 = 2 * R * std::ldexp(1.0, -24);
  EXPECT_EQ(bound::accumulation_error(ElemType::BF16, Combine::Sum, 3, g, Accumulation::F32),
            e32 + (R + e32) * std::ldexp(1.0, -8));
  EXPECT_EQ(bound::accumulation_error(ElemType::F16, Combine::Mean, 3, g, Accumulation::F32),
            e32 / 3 + R / 3 * std::ldexp(1.0, -53) + R / 3 * std::ldexp(1.0, -11));
  for (Accumulation a : {Accumulation::InT, Accumulation::F64}) {
    EXPECT_EQ(bound::accumulation_error(ElemType::BF16, Combine::Mean, 3, g, a),
              bound::exact_error(ElemType::BF16, Combine::Mean, 3, g, a == Accumulation::F64));
  }
}

// The exact path's choice: the narrowest accumulation that keeps E, else (no
// exact run keeps E) the narrowest within kBestExactSlack of float64's bound.
TEST(ErrorBudget, ExactPathTakesTheNarrowestAccumulationAsGoodAsTheBest) {
  const DataStats g = span(-1, 1);  // rel 1e-3: E = 2e-3, below bf16's rounding of any sum (2^-8 of 2)
  const double E = 2e-3;
  struct Case {
    ElemType t;
    Combine how;
    int n;
    Accumulation want;
  };
  const Case cases[] = {
      // 2 ranks: T's one rounding of the exact sum is float64's (plus nothing)
      {ElemType::BF16, Combine::Sum, 2, Accumulation::InT},
      {ElemType::BF16, Combine::Mean, 2, Accumulation::InT},
      {ElemType::F32, Combine::Sum, 2, Accumulation::InT},  // float32 keeps 2e-3: within E
      // 3, 4, 64 ranks of bf16: float32's N-1 roundings are (N-1) 2^-16 of bf16's one
      {ElemType::BF16, Combine::Sum, 3, Accumulation::F32},
      {ElemType::BF16, Combine::Sum, 4, Accumulation::F32},
      {ElemType::BF16, Combine::Mean, 3, Accumulation::F32},
      {ElemType::BF16, Combine::Mean, 4, Accumulation::F32},
      {ElemType::BF16, Combine::Sum, 64, Accumulation::F32},
      {ElemType::BF16, Combine::Sum, 65, Accumulation::F64},
  };
  for (const Case& c : cases) {
    const auto x = bound::choose_exact(c.t, c.how, c.n, E, g, true);
    const double f64 = bound::accumulation_error(c.t, c.how, c.n, g, Accumulation::F64);
    const std::string what = std::to_string(int(c.t)) + " " + std::to_string(int(c.how)) + " n=" + std::to_string(c.n);
    EXPECT_EQ(int(x.acc), int(c.want)) << what;
    EXPECT_EQ(x.error, bound::accumulation_error(c.t, c.how, c.n, g, x.acc)) << what;
    if (c.t == ElemType::BF16) {
      EXPECT_GT(f64, E) << what;  // no exact run keeps E ...
      EXPECT_FALSE(x.keeps) << what;
      EXPECT_LE(x.error, f64 * bound::kBestExactSlack) << what;                 // ... and this one is as good as any
      EXPECT_FALSE(bound::plan_lossy(c.t, c.how, c.n, E, g).compress) << what;  // nor does quantization
    }
  }
  // f16 at a bound below its rounding (2^-11 of 2): float32 up to 8 ranks
  const double Eh = 4e-4;
  EXPECT_GT(bound::accumulation_error(ElemType::F16, Combine::Mean, 2, g, Accumulation::F64), Eh);
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Sum, 2, Eh, g, true).acc), int(Accumulation::InT));
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Mean, 2, Eh, g, true).acc), int(Accumulation::InT));
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Sum, 3, Eh, g, true).acc), int(Accumulation::F32));
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Sum, 8, Eh, g, true).acc), int(Accumulation::F32));
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Sum, 9, Eh, g, true).acc), int(Accumulation::F64));
  // mostly-zero inputs (f32_ok false): T where it is as good, else float64 (losslessly coded)
  EXPECT_EQ(int(bound::choose_exact(ElemType::BF16, Combine::Sum, 2, E, g, false).acc), int(Accumulation::InT));
  EXPECT_EQ(int(bound::choose_exact(ElemType::BF16, Combine::Sum, 4, E, g, false).acc), int(Accumulation::F64));
  // float64 T: its own sum is float64's
  EXPECT_EQ(int(bound::choose_exact(ElemType::F64, Combine::Sum, 5, 1e-300, g, true).acc), int(Accumulation::InT));
}

TEST(ErrorBudget, ExactPathTakesTheNarrowestAccumulationThatKeepsAKeepableBound) {
  const DataStats g = span(-1, 1);
  auto acc = [&](ElemType t, Combine how, int n, double E, bool f32_ok = true) {
    const auto x = bound::choose_exact(t, how, n, E, g, f32_ok);
    EXPECT_TRUE(x.keeps) << int(t) << " n=" << n << " E=" << E;
    EXPECT_LE(x.error, E);
    return int(x.acc);
  };
  // bf16, 2 ranks: one rounding of 2 is 2^-7; T keeps E from there (the
  // policy's lighter modes want twice that: exact_keeps_bound)
  EXPECT_EQ(acc(ElemType::BF16, Combine::Sum, 2, 0.02), int(Accumulation::InT));
  EXPECT_EQ(acc(ElemType::BF16, Combine::Sum, 2, 0.008), int(Accumulation::InT));
  EXPECT_FALSE(bound::exact_keeps_bound(ElemType::BF16, Combine::Sum, 2, 0.008, g));
  EXPECT_EQ(acc(ElemType::BF16, Combine::Mean, 2, 0.004), int(Accumulation::InT));
  // 4 ranks: float32 keeps E where bf16's three roundings (3 * 2^-6) would not
  EXPECT_EQ(acc(ElemType::BF16, Combine::Sum, 4, 0.03), int(Accumulation::F32));
  EXPECT_EQ(acc(ElemType::BF16, Combine::Mean, 4, 0.006), int(Accumulation::F32));
  EXPECT_EQ(acc(ElemType::F16, Combine::Sum, 4, 3e-3), int(Accumulation::F32));
  // ... mostly zero: float64 (losslessly coded)
  EXPECT_EQ(acc(ElemType::BF16, Combine::Sum, 4, 0.03, false), int(Accumulation::F64));
  // bf16 4 ranks where float32's extra 3 * 2^-22 is what breaks E: float64
  const double f64 = bound::accumulation_error(ElemType::BF16, Combine::Sum, 4, g, Accumulation::F64);
  EXPECT_EQ(acc(ElemType::BF16, Combine::Sum, 4, f64), int(Accumulation::F64));
  // float32 T, 3 ranks: its two roundings of 3 are 3.6e-7, float64's one rounding to float32 1.8e-7
  EXPECT_EQ(acc(ElemType::F32, Combine::Sum, 3, 4e-7), int(Accumulation::InT));
  EXPECT_EQ(acc(ElemType::F32, Combine::Sum, 3, 2.5e-7), int(Accumulation::F64));
  // non-finite inputs, or a sum that may overflow T: float64
  DataStats nf = g;
  nf.nonfinite = true;
  EXPECT_EQ(int(bound::choose_exact(ElemType::BF16, Combine::Sum, 2, 1.0, nf, true).acc), int(Accumulation::F64));
  EXPECT_EQ(int(bound::choose_exact(ElemType::BF16, Combine::Sum, 2, 2e-3, nf, true).acc), int(Accumulation::F64));
  const DataStats big = span(-4e4, 4e4);
  EXPECT_EQ(int(bound::choose_exact(ElemType::F16, Combine::Sum, 2, 1e4, big, true).acc), int(Accumulation::F64));
  // select: one rank's values, exact
  const auto s = bound::choose_exact(ElemType::BF16, Combine::Select, 4, 1e-30, g, true);
  EXPECT_EQ(int(s.acc), int(Accumulation::InT));
  EXPECT_EQ(s.error, 0.0);
}

}  // namespace
