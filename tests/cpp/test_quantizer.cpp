// Quantizer: the rule in cpp/src/codec/quantizer.hpp, checked as properties.
//   - every non-outlier element is within eb of x after rounding to its type,
//   - |code| <= limit, outliers have code 0 and are reported in order,
//   - an element is an outlier only when it must be: non-finite, over the
//     limit, or none of the nearest code and its two neighbours meets the bound
//     (nothing is clipped),
//   - the vector loop agrees with quantize_one/dequantize_one element by element,
//   - bf16/f16 conversions round to nearest even, subnormals, inf and NaN included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/quantizer.hpp"

using namespace ncclz::codec;

namespace {

// ---- element types as test parameters -------------------------------------

template <class T>
T make(double v);
template <>
float make<float>(double v) {
  return float(v);
}
template <>
double make<double>(double v) {
  return v;
}
template <>
Bf16 make<Bf16>(double v) {
  return Bf16{double_to_bf16(v)};
}
template <>
F16 make<F16>(double v) {
  return F16{double_to_f16(v)};
}

template <class T>
const char* tname();
template <>
const char* tname<float>() {
  return "float32";
}
template <>
const char* tname<double>() {
  return "float64";
}
template <>
const char* tname<Bf16>() {
  return "bfloat16";
}
template <>
const char* tname<F16>() {
  return "float16";
}

template <class T>
double max_finite();
template <>
double max_finite<float>() {
  return FLT_MAX;
}
template <>
double max_finite<double>() {
  return DBL_MAX;
}
template <>
double max_finite<Bf16>() {
  return to_double(Bf16{0x7F7F});
}
template <>
double max_finite<F16>() {
  return 65504.0;
}

template <class T>
double min_subnormal();
template <>
double min_subnormal<float>() {
  return std::numeric_limits<float>::denorm_min();
}
template <>
double min_subnormal<double>() {
  return std::numeric_limits<double>::denorm_min();
}
template <>
double min_subnormal<Bf16>() {
  return to_double(Bf16{0x0001});
}
template <>
double min_subnormal<F16>() {
  return to_double(F16{0x0001});
}

/// The spacing of T's values at x (an upper bound; exact for normal x).
template <class T>
double ulp_at(double x) {
  const int mant = std::is_same_v<T, float> ? 24 : std::is_same_v<T, double> ? 53 : std::is_same_v<T, Bf16> ? 8 : 11;
  int e;
  std::frexp(x == 0 ? 1.0 : x, &e);
  return std::max(std::ldexp(1.0, e - mant), min_subnormal<T>());
}

// ---- data sets --------------------------------------------------------------

enum class Dist {
  Gaussian,
  Uniform,
  Smooth,
  Sparse,
  ZeroRuns,
  Constant,
  Denormal,
  Huge,
  NonFinite,
  Midpoints,
  CoarseUlp
};
const Dist kDists[] = {Dist::Gaussian, Dist::Uniform, Dist::Smooth,    Dist::Sparse,    Dist::ZeroRuns, Dist::Constant,
                       Dist::Denormal, Dist::Huge,    Dist::NonFinite, Dist::Midpoints, Dist::CoarseUlp};
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::Gaussian: return "gaussian";
    case Dist::Uniform: return "uniform";
    case Dist::Smooth: return "smooth";
    case Dist::Sparse: return "sparse";
    case Dist::ZeroRuns: return "zero-runs";
    case Dist::Constant: return "constant";
    case Dist::Denormal: return "denormal";
    case Dist::Huge: return "huge";
    case Dist::NonFinite: return "nonfinite";
    case Dist::Midpoints: return "midpoints";
    case Dist::CoarseUlp: return "coarse-ulp";
  }
  return "?";
}

/// Values of type T (as doubles) for a distribution, scaled around the bound
/// eb where that matters.
template <class T>
std::vector<T> make_data(Dist d, size_t n, double eb, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uni(-1, 1);
  std::vector<T> x(n);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (size_t i = 0; i < n; ++i) {
    double v = 0;
    switch (d) {
      case Dist::Gaussian: v = normal(rng) * 1000 * eb; break;
      case Dist::Uniform: v = uni(rng) * 1e4 * eb; break;
      case Dist::Smooth: v = 300 * eb * std::sin(double(i) * 0.01) + 50 * eb * std::cos(double(i) * 0.173); break;
      case Dist::Sparse: v = (rng() % 50 == 0) ? normal(rng) * 100 * eb : 0.0; break;
      case Dist::ZeroRuns: {
        // Runs of +0.0 and -0.0 (whole 16-element groups and parts of them)
        // between short stretches of values, some near the grid's midpoints.
        const size_t phase = (i / 24) % 3;
        if (phase == 0)
          v = (rng() % 2) ? -0.0 : 0.0;
        else if (phase == 1)
          v = (rng() % 4 == 0) ? (double(int64_t(rng() % 41) - 20) + 0.5) * 2 * eb : -0.0;
        else
          v = normal(rng) * 10 * eb;
        break;
      }
      case Dist::Constant: v = 12.345 * eb + 1; break;
      case Dist::Denormal: v = double(int64_t(rng() % 2001) - 1000) * min_subnormal<T>(); break;
      case Dist::Huge: v = uni(rng) * max_finite<T>(); break;
      case Dist::NonFinite: {
        const uint64_t r = rng() % 8;
        v = r == 0 ? nan : r == 1 ? inf : r == 2 ? -inf : r == 3 ? -nan : normal(rng) * 100 * eb;
        break;
      }
      case Dist::Midpoints: {
        // x at (k + 1/2) * step, nudged by a few ulps either way: naive
        // rounding of x/step lands on the wrong side, or both neighbours are
        // at eb before rounding to T.
        const double step = 2 * eb;
        const double k = double(int64_t(rng() % 20001) - 10000);
        const double mid = (k + 0.5) * step;
        const double nudge = double(int64_t(rng() % 7) - 3) * ulp_at<T>(mid);
        v = mid + nudge;
        break;
      }
      case Dist::CoarseUlp: {
        // Magnitudes where T's spacing is between step/4 and 4*step: the
        // rounding of q*step to T can move it past eb.
        const double step = 2 * eb;
        const int mant = std::is_same_v<T, float>    ? 24
                         : std::is_same_v<T, double> ? 53
                         : std::is_same_v<T, Bf16>   ? 8
                                                     : 11;
        const double base = std::ldexp(step, mant - 1 + int(rng() % 5) - 2);
        v = (rng() % 2 ? 1 : -1) * base * (1 + uni(rng) * 0.5 + 0.5);
        break;
      }
    }
    x[i] = make<T>(v);
  }
  return x;
}

// ---- the property check -------------------------------------------------------

template <class T, class Code>
void check_quantizer(const std::vector<T>& x, double eb, int64_t limit, const std::string& what) {
  const size_t n = x.size();
  const QuantGrid g = QuantGrid::from_bound(eb);
  std::vector<Code> q(n, Code(12345));
  std::vector<uint64_t> outl;
  const size_t count = quantize(x.data(), n, g, limit, q.data(), &outl);
  ASSERT_EQ(count, outl.size()) << what;
  ASSERT_TRUE(std::is_sorted(outl.begin(), outl.end())) << what;
  std::vector<T> y(n);
  dequantize(q.data(), n, g, y.data());
  std::vector<char> is_out(n, 0);
  for (uint64_t i : outl) {
    ASSERT_LT(i, n) << what;
    is_out[i] = 1;
  }
  size_t failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    const double xd = to_double(x[i]);
    // The scalar reference agrees with the vector loop.
    Code qr;
    const bool ok = quantize_one(x[i], g, limit, &qr);
    if (ok == bool(is_out[i]) || qr != q[i]) {
      ADD_FAILURE() << what << ": element " << i << " x=" << xd << " vector q=" << q[i] << " out=" << int(is_out[i])
                    << " scalar q=" << qr << " ok=" << ok;
      ++failures;
      continue;
    }
    if (is_out[i]) {
      EXPECT_EQ(q[i], 0) << what;
      // Outliers only where they must be: nothing is clipped.
      if (std::isfinite(xd)) {
        const double r = round_to_integer(xd * g.inv_step);
        if (std::fabs(r) <= double(limit) - 2) {
          for (double c = r - 1; c <= r + 1; c += 1) {
            const long double back = to_double(from_double<T>(c * g.step));
            if (std::fabs(double(xd - back)) <= eb && std::fabs((long double)xd - back) <= (long double)eb) {
              ADD_FAILURE() << what << ": element " << i << " x=" << xd << " is an outlier but code " << c
                            << " meets the bound";
              ++failures;
            }
          }
        }
      }
      continue;
    }
    // The bound, in extended precision, after rounding to T.
    const long double err = std::fabs((long double)xd - (long double)to_double(y[i]));
    if (!(err <= (long double)eb) || std::llabs(int64_t(q[i])) > limit) {
      ADD_FAILURE() << what << ": element " << i << " x=" << xd << " y=" << to_double(y[i]) << " err=" << double(err)
                    << " eb=" << eb << " q=" << q[i];
      ++failures;
    }
    // dequantize agrees with dequantize_one.
    const T y1 = dequantize_one<T>(q[i], g);
    EXPECT_EQ(std::memcmp(&y1, &y[i], sizeof(T)), 0) << what;
  }
}

template <class T, class Code>
void run_properties() {
  const double ebs[] = {1e-3, 0.1, 0.3, 1.0 / 3.0, 7.5, 1e-6};
  for (Dist d : kDists) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      const double eb = ebs[(seed - 1) % 6];
      const size_t n = 3001 + seed * 97;  // odd sizes: partial blocks
      const auto x = make_data<T>(d, n, eb, seed * 7919u + uint32_t(d));
      const std::string what = std::string(tname<T>()) + "/" + (sizeof(Code) == 4 ? "i32" : "i64") + "/" +
                               dist_name(d) + " seed " + std::to_string(seed) + " eb " + std::to_string(eb);
      check_quantizer<T, Code>(x, eb, default_code_limit<Code>(), what);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace

TEST(Quantizer, PropertiesFloat32Int32) { run_properties<float, int32_t>(); }
// The same properties with the hand-written vector path turned off (float32 ->
// int32 has one on AVX-512 machines; elsewhere both runs take the portable loop).
TEST(Quantizer, PropertiesFloat32Int32Portable) {
  const bool was = quantize_set_portable(true);
  run_properties<float, int32_t>();
  quantize_set_portable(was);
}

// The vector path and the portable loop give the same codes and the same
// outliers, element by element, for every data set, bound and code limit
// (small limits make many elements go over; n covers every tail length).
TEST(Quantizer, VectorPathMatchesPortableFloat32Int32) {
  const double ebs[] = {1e-3, 0.5, 1.0 / 3.0, 1e-6};
  const int64_t limits[] = {0, 1, 7, 100, default_code_limit<int32_t>(), max_code_limit<int32_t>(), int64_t(1) << 40};
  int checked = 0;
  for (Dist d : kDists) {
    for (size_t k = 0; k < 4; ++k) {
      const double eb = ebs[k];
      const size_t n = 4093 + 5 * k + size_t(d);  // tails of 0..15 elements after the 16-element groups
      const auto x = make_data<float>(d, n, eb, uint32_t(977 * k + 31 * int(d) + 5));
      for (int64_t limit : limits) {
        const QuantGrid g = QuantGrid::from_bound(eb);
        std::vector<int32_t> qv(n, 111), qp(n, 222);
        std::vector<uint64_t> ov, op;
        const size_t cv = quantize(x.data(), n, g, limit, qv.data(), &ov);
        const bool was = quantize_set_portable(true);
        const size_t cp = quantize(x.data(), n, g, limit, qp.data(), &op);
        quantize_set_portable(was);
        const std::string what =
            std::string(dist_name(d)) + " eb " + std::to_string(eb) + " limit " + std::to_string(limit);
        ASSERT_EQ(cv, cp) << what;
        ASSERT_EQ(ov, op) << what;
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(qv[i], qp[i]) << what << " element " << i << " x=" << x[i];
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, int(std::size(kDists)) * 4 * int(std::size(limits)));
}
// QuantGrid::exact_check (the collectives' rule for 16-bit floats): every code
// that is not an outlier has an exact value within eb of x (no rounding of T in
// the check), outliers only where no code does, and the block loop gives
// quantize_one's codes element by element; float32 through the generic loop
// (its vector path has the rounded check).
template <class T>
void check_exact_grid() {
  const double ebs[] = {1e-3, 0.05, 1.0 / 3.0};
  for (Dist d : kDists) {
    for (size_t k = 0; k < 3; ++k) {
      const size_t n = 2500 + 7 * k;
      const auto x = make_data<T>(d, n, ebs[k], uint32_t(31 * k + int(d) + 3));
      double A = 0;
      for (const T& v : x) A = std::isfinite(to_double(v)) ? std::max(A, std::fabs(to_double(v))) : A;
      QuantGrid g = QuantGrid::from_bound(ebs[k]);
      g.eb = ebs[k] + 2 * (A + ebs[k]) * std::ldexp(1.0, -50);  // bound::plan_lossy's check_eb with exact_check
      g.exact_check = true;
      const int64_t limit = 1000;
      std::vector<int32_t> q(n);
      std::vector<uint64_t> out;
      const size_t bad = quantize(x.data(), n, g, limit, q.data(), &out);
      EXPECT_EQ(bad, out.size());
      size_t next = 0;
      for (size_t i = 0; i < n; ++i) {
        const double xd = to_double(x[i]);
        int32_t one = 0;
        const bool ok = quantize_one(x[i], g, limit, &one);
        ASSERT_EQ(q[i], one) << tname<T>() << " element " << i;
        const bool listed = next < out.size() && out[next] == i;
        if (listed) ++next;
        ASSERT_EQ(!ok, listed) << tname<T>() << " element " << i;
        if (ok) {
          const long double err = std::fabs((long double)xd - (long double)q[i] * (long double)g.step);
          // delta = 3(A+E)2^-50 over eb (error_budget.hpp)
          ASSERT_LE(err, (long double)ebs[k] + 3 * (long double)(A + ebs[k]) * std::ldexp(1.0L, -50))
              << tname<T>() << " element " << i << " x=" << xd;
        } else if (std::isfinite(xd) && std::fabs(xd * g.inv_step) < double(limit) - 2) {
          ADD_FAILURE() << tname<T>() << " element " << i << " x=" << xd << " is an outlier within the limit";
        }
      }
    }
  }
}

TEST(Quantizer, ExactCheckBoundsTheCodesExactValue) {
  check_exact_grid<Bf16>();
  check_exact_grid<F16>();
  check_exact_grid<float>();
}

TEST(Quantizer, PropertiesFloat32Int64) { run_properties<float, int64_t>(); }
TEST(Quantizer, PropertiesFloat64Int32) { run_properties<double, int32_t>(); }
TEST(Quantizer, PropertiesFloat64Int64) { run_properties<double, int64_t>(); }
TEST(Quantizer, PropertiesBf16Int32) { run_properties<Bf16, int32_t>(); }
TEST(Quantizer, PropertiesBf16Int64) { run_properties<Bf16, int64_t>(); }
TEST(Quantizer, PropertiesF16Int32) { run_properties<F16, int32_t>(); }
TEST(Quantizer, PropertiesF16Int64) { run_properties<F16, int64_t>(); }

TEST(Quantizer, NaiveRoundingBreaksTheBoundButQuantizeDoesNot) {
  // float32, eb = 0.3 (not a power of two), x where float spacing (0.5 at
  // [4096, 8192)... scaled) is comparable to the step: rounding q*step to
  // float moves it by up to half a float ulp. Count the elements where the
  // naive code (nearest q, no verification) breaks the bound: the test data
  // must contain some, and quantize must carry them (neighbour or outlier).
  const double eb = 0.3;
  const QuantGrid g = QuantGrid::from_bound(eb);
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i) x.push_back(float(1 << 22) + float(i) * 0.5f);  // ulp 0.5
  size_t naive_bad = 0;
  for (float v : x) {
    const double q = std::nearbyint(double(v) * g.inv_step);
    if (std::fabs(double(v) - double(float(q * g.step))) > eb) ++naive_bad;
  }
  EXPECT_GT(naive_bad, 100u);
  check_quantizer<float, int64_t>(std::vector<float>(x), eb, default_code_limit<int64_t>(), "float ulp 0.5, eb 0.3");
  std::vector<int64_t> q(x.size());
  std::vector<uint64_t> outl;
  quantize(x.data(), x.size(), g, default_code_limit<int64_t>(), q.data(), &outl);
  EXPECT_GT(outl.size(), 0u);         // these have no code that meets the bound
  EXPECT_LE(outl.size(), naive_bad);  // and nothing else is an outlier
}

TEST(Quantizer, NeighbourCodeFixesRounding) {
  // bf16 / f16: the nearest code's value rounds to a 16-bit float more than
  // eb away, while a neighbouring code's value rounds to within eb.
  struct Case {
    double x, eb;
    int64_t nearest;
  };
  {
    const Case c{127.5, 0.88013038432121737, 72};
    const QuantGrid g = QuantGrid::from_bound(c.eb);
    const Bf16 x = make<Bf16>(c.x);
    ASSERT_EQ(round_to_integer(c.x * g.inv_step), double(c.nearest));
    EXPECT_FALSE(code_fits<Bf16>(c.x, c.nearest, g));
    int32_t q = 0;
    std::vector<uint64_t> outl;
    EXPECT_EQ(quantize(&x, 1, g, default_code_limit<int32_t>(), &q, &outl), 0u);
    EXPECT_TRUE(q == c.nearest - 1 || q == c.nearest + 1);
    EXPECT_LE(std::fabs(c.x - to_double(dequantize_one<Bf16>(q, g))), c.eb);
  }
  {
    const Case c{2.833984375, 0.94459363847829891, 2};
    const QuantGrid g = QuantGrid::from_bound(c.eb);
    const F16 x = make<F16>(c.x);
    ASSERT_EQ(to_double(x), c.x);
    EXPECT_FALSE(code_fits<F16>(c.x, c.nearest, g));
    int64_t q = 0;
    EXPECT_EQ(quantize(&x, 1, g, default_code_limit<int64_t>(), &q, nullptr), 0u);
    EXPECT_NE(q, c.nearest);
    EXPECT_LE(std::fabs(c.x - to_double(dequantize_one<F16>(q, g))), c.eb);
  }
}

TEST(Quantizer, LimitMakesOutliersNeverClips) {
  const double eb = 0.5;  // step 1
  const QuantGrid g = QuantGrid::from_bound(eb);
  std::vector<float> x = {0.f, 100.f, -100.f, 101.f, -101.f, 100.4f, 1e30f, -1e30f, 99.6f};
  std::vector<int32_t> q(x.size());
  std::vector<uint64_t> outl;
  // 99.6 -> 100 and 100.4 -> 100 fit; 101 is over the limit and its neighbour
  // 100 is 1 away, beyond eb = 0.5: an outlier, not clipped to 100.
  EXPECT_EQ(quantize(x.data(), x.size(), g, 100, q.data(), &outl), 4u);
  EXPECT_EQ(outl, (std::vector<uint64_t>{3, 4, 6, 7}));
  EXPECT_EQ(q[1], 100);
  EXPECT_EQ(q[2], -100);
  EXPECT_EQ(q[5], 100);
  EXPECT_EQ(q[8], 100);
  for (uint64_t i : outl) EXPECT_EQ(q[i], 0);
}

TEST(Quantizer, NonFiniteAreOutliers) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1.f, std::nanf(""), inf, -inf, -std::nanf("")};
  std::vector<int32_t> q(x.size(), 7);
  std::vector<uint64_t> outl;
  EXPECT_EQ(quantize(x.data(), x.size(), QuantGrid::from_bound(0.01), default_code_limit<int32_t>(), q.data(), &outl),
            4u);
  EXPECT_EQ(outl, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(q[0], 50);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(q[i], 0);
}

TEST(Quantizer, CodeLimits) {
  EXPECT_EQ(default_code_limit<int32_t>(), 1 << 20);
  EXPECT_LT(2047 * default_code_limit<int32_t>(), int64_t(1) << 31);
  EXPECT_EQ(default_code_limit<int64_t>(), int64_t(1) << 50);
  // Limits beyond the type are clamped, not trusted.
  std::vector<double> x = {3e9, -3e9};
  std::vector<int32_t> q(2);
  std::vector<uint64_t> outl;
  EXPECT_EQ(quantize(x.data(), 2, QuantGrid::from_bound(0.5), int64_t(1) << 40, q.data(), &outl), 2u);
  std::vector<int64_t> q64(2);
  EXPECT_EQ(quantize(x.data(), 2, QuantGrid::from_bound(0.5), int64_t(1) << 40, q64.data(), nullptr), 0u);
  EXPECT_EQ(q64[0], 3000000000LL);
  EXPECT_EQ(q64[1], -3000000000LL);
}

TEST(Quantizer, LargeInt64Codes) {
  // Codes above 2^51 take the exact (non-magic) conversion paths.
  const double eb = 0.5;
  std::vector<double> x = {std::ldexp(1.0, 53), -std::ldexp(1.0, 55) + 4096, std::ldexp(1.0, 60), 3.0};
  std::vector<int64_t> q(x.size());
  EXPECT_EQ(quantize(x.data(), x.size(), QuantGrid::from_bound(eb), int64_t(1) << 62, q.data(), nullptr), 0u);
  EXPECT_EQ(q[0], int64_t(1) << 53);
  EXPECT_EQ(q[2], int64_t(1) << 60);
  std::vector<double> y(x.size());
  dequantize(q.data(), q.size(), QuantGrid::from_bound(eb), y.data());
  EXPECT_EQ(y, x);
}

TEST(Quantizer, FiniteRange) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {std::nanf(""), 3.f, -inf, -2.f, inf, 7.f};
  double lo, hi;
  ASSERT_TRUE(finite_range(x.data(), x.size(), &lo, &hi));
  EXPECT_EQ(lo, -2.0);
  EXPECT_EQ(hi, 7.0);
  EXPECT_EQ(finite_max_abs(x.data(), x.size()), 7.0);
  std::vector<float> none = {std::nanf(""), inf};
  EXPECT_FALSE(finite_range(none.data(), none.size(), &lo, &hi));
  EXPECT_FALSE(finite_range(none.data(), 0, &lo, &hi));
  EXPECT_EQ(finite_max_abs(none.data(), none.size()), 0.0);
  std::vector<Bf16> b = {Bf16{0x7F80}, Bf16{0xC000}, Bf16{0x3F80}};  // inf, -2, 1
  ASSERT_TRUE(finite_range(b.data(), b.size(), &lo, &hi));
  EXPECT_EQ(lo, -2.0);
  EXPECT_EQ(hi, 1.0);
  std::vector<F16> h = {F16{0x7E00}, F16{0x0001}, F16{0xFC00}};  // nan, min subnormal, -inf
  EXPECT_EQ(finite_max_abs(h.data(), h.size()), std::ldexp(1.0, -24));
}

// finite_stats takes a vector fast path when every element is finite and the
// careful loop otherwise: both must give the plain definition's answer, for
// every length (vector body and tail) and a non-finite value at any position.
template <class T>
void check_finite_stats_against_reference(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 100.0);
  const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity()};
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(1000003);
  for (size_t n : lengths) {
    std::vector<T> x(n);
    for (auto& v : x) v = T(nd(rng));
    // -1: all finite; otherwise one special value at a position that moves over the vector body and the tail
    for (int pos = -1; pos < int(std::min<size_t>(n, 40)); ++pos) {
      std::vector<T> y = x;
      const size_t at = pos < 0 ? 0 : (n > 40 ? size_t(pos) * (n / 40) + size_t(pos % 3) : size_t(pos));
      if (pos >= 0) y[std::min(at, n - 1)] = specials[size_t(pos) % 3];
      double lo = 7, hi = 7, rlo = INFINITY, rhi = -INFINITY;
      bool nf = false, rnf = false;
      for (T v : y) {
        if (!std::isfinite(v)) {
          rnf = true;
          continue;
        }
        rlo = std::min(rlo, double(v));
        rhi = std::max(rhi, double(v));
      }
      const bool any = finite_stats(y.data(), n, &lo, &hi, &nf);
      SCOPED_TRACE("n=" + std::to_string(n) + " pos=" + std::to_string(pos));
      ASSERT_EQ(any, rlo <= rhi);
      ASSERT_EQ(nf, rnf);
      if (any) {
        ASSERT_EQ(lo, rlo);
        ASSERT_EQ(hi, rhi);
      }
    }
  }
}

TEST(Quantizer, FiniteStatsMatchesReferenceFloat) { check_finite_stats_against_reference<float>(11); }
TEST(Quantizer, FiniteStatsMatchesReferenceDouble) { check_finite_stats_against_reference<double>(12); }

// ---- 16-bit float conversions ---------------------------------------------------

namespace {

/// All finite non-negative values of a 16-bit format, ascending, with their
/// bits; a final "infinity" entry at the first power of two past the maximum.
struct Table {
  std::vector<double> v;
  std::vector<uint16_t> bits;
};

template <class T>
Table make_table() {
  Table t;
  for (uint32_t b = 0; b < 0x8000; ++b) {
    const double d = to_double(T{uint16_t(b)});
    if (!std::isfinite(d)) break;
    t.v.push_back(d);
    t.bits.push_back(uint16_t(b));
  }
  const uint16_t inf_bits = std::is_same_v<T, Bf16> ? 0x7F80 : 0x7C00;
  t.v.push_back(std::is_same_v<T, Bf16> ? std::ldexp(1.0, 128) : 65536.0);
  t.bits.push_back(inf_bits);
  return t;
}

/// Nearest-even rounding of a finite double by search (the reference).
uint16_t reference_round(const Table& t, double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (a >= t.v.back()) return sign | t.bits.back();
  const size_t hi = size_t(std::lower_bound(t.v.begin(), t.v.end(), a) - t.v.begin());
  if (t.v[hi] == a) return sign | t.bits[hi];
  const size_t lo = hi - 1;
  const long double dl = (long double)a - t.v[lo], dh = (long double)t.v[hi] - a;
  if (dl < dh) return sign | t.bits[lo];
  if (dh < dl) return sign | t.bits[hi];
  return sign | ((t.bits[lo] & 1) ? t.bits[hi] : t.bits[lo]);
}

template <class T>
void check_conversions() {
  const Table t = make_table<T>();
  const bool bf = std::is_same_v<T, Bf16>;
  // Every 16-bit pattern survives 16 -> float -> 16 (NaNs stay NaN).
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf ? bf16_to_float(uint16_t(b)) : f16_to_float(uint16_t(b));
    const uint16_t back = bf ? float_to_bf16(f) : float_to_f16(f);
    const uint16_t back_d = bf ? double_to_bf16(double(f)) : double_to_f16(double(f));
    const bool is_nan = std::isnan(f);
    if (is_nan) {
      ASSERT_TRUE(std::isnan(bf ? bf16_to_float(back) : f16_to_float(back))) << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << b;
    } else {
      ASSERT_EQ(back, b) << "bits " << b;
      ASSERT_EQ(back_d, b) << "bits " << b;
    }
  }
  // Random floats and doubles over the whole range, and near midpoints.
  std::mt19937_64 rng(99);
  for (int i = 0; i < 400000; ++i) {
    double d;
    switch (i % 4) {
      case 0: d = double(float_of(uint32_t(rng()))); break;  // any float
      case 1: {                                              // any double in a useful exponent range
        d = std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng), int(rng() % 300) - 150);
        if (rng() % 2) d = -d;
        break;
      }
      default: {  // a midpoint of two neighbours, plus or minus a tiny amount
        const size_t k = size_t(rng() % (t.v.size() - 2));
        const double mid = (t.v[k] + t.v[k + 1]) / 2;
        const int r = int(rng() % 5);
        d = r == 0   ? mid
            : r == 1 ? std::nextafter(mid, 0.0)
            : r == 2 ? std::nextafter(mid, 1e300)
            : r == 3 ? mid + mid * 1e-12
                     : mid - mid * 1e-12;
        if (rng() % 2) d = -d;
      }
    }
    if (!std::isfinite(d)) continue;
    const uint16_t want = reference_round(t, d);
    const uint16_t got_d = bf ? double_to_bf16(d) : double_to_f16(d);
    ASSERT_EQ(got_d, want) << "double " << d;
    const float f = float(d);
    if (double(f) == d) {
      const uint16_t got_f = bf ? float_to_bf16(f) : float_to_f16(f);
      ASSERT_EQ(got_f, want) << "float " << f;
    }
  }
  // Double rounding trap: just above a midpoint by less than a float ulp.
  // float(d) lands exactly on the midpoint, and ties-to-even would go down.
  for (size_t k = 0; k + 1 < t.v.size() - 1; k += 97) {
    const double mid = (t.v[k] + t.v[k + 1]) / 2;
    if (!(mid > 0)) continue;
    const double d = mid + mid * 0x1p-40;
    ASSERT_EQ(bf ? double_to_bf16(d) : double_to_f16(d), t.bits[k + 1]) << "just above midpoint " << mid;
    const double e = mid - mid * 0x1p-40;
    ASSERT_EQ(bf ? double_to_bf16(e) : double_to_f16(e), t.bits[k]) << "just below midpoint " << mid;
  }
  // Special values.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(bf ? double_to_bf16(inf) : double_to_f16(inf), bf ? 0x7F80 : 0x7C00);
  EXPECT_EQ(bf ? double_to_bf16(-inf) : double_to_f16(-inf), bf ? 0xFF80 : 0xFC00);
  EXPECT_EQ(bf ? double_to_bf16(-0.0) : double_to_f16(-0.0), 0x8000);
  EXPECT_EQ(bf ? double_to_bf16(1e300) : double_to_f16(1e300), bf ? 0x7F80 : 0x7C00);
  EXPECT_EQ(bf ? double_to_bf16(1e-300) : double_to_f16(1e-300), 0);
  const uint16_t n = bf ? double_to_bf16(std::nan("")) : double_to_f16(std::nan(""));
  EXPECT_TRUE(std::isnan(bf ? bf16_to_float(n) : f16_to_float(n)));
}

}  // namespace

TEST(Quantizer, Bf16Conversions) { check_conversions<Bf16>(); }
TEST(Quantizer, F16Conversions) { check_conversions<F16>(); }

TEST(Quantizer, F16Specifics) {
  EXPECT_EQ(float_to_f16(65504.f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.f), 0x7C00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.f, -25)), 0x0000);      // tie to even (0)
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)), 0x0001);     // above the tie
  EXPECT_EQ(float_to_f16(std::ldexp(3.f, -25)), 0x0002);      // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(f16_to_float(0x03FF), std::ldexp(1023.f, -24));
  EXPECT_EQ(f16_to_float(0x3C00), 1.f);
  EXPECT_EQ(f16_to_float(0xC000), -2.f);
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
  EXPECT_EQ(bits_of(f16_to_float(0x7E01)), 0x7FC02000u);    // NaN payload kept
  EXPECT_EQ(float_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie to even, down
  EXPECT_EQ(float_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie to even, up
  EXPECT_EQ(float_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16(float_of(0x00000001u)), 0x0000);
  EXPECT_EQ(float_to_bf16(float_of(0x00008000u)), 0x0000);  // tie, even
  EXPECT_EQ(float_to_bf16(float_of(0x00018000u)), 0x0002);
}

TEST(Quantizer, RoundToInteger) {
  EXPECT_EQ(round_to_integer(0.5), 0.0);
  EXPECT_EQ(round_to_integer(1.5), 2.0);
  EXPECT_EQ(round_to_integer(2.5), 2.0);
  EXPECT_EQ(round_to_integer(-2.5), -2.0);
  EXPECT_EQ(round_to_integer(-0.4), 0.0);
  EXPECT_EQ(round_to_integer(4503599627370495.5), 4503599627370496.0);
  EXPECT_EQ(round_to_integer(2251799813685248.5), 2251799813685248.0);
  EXPECT_EQ(round_to_integer(1e300), 1e300);
  EXPECT_TRUE(std::isnan(round_to_integer(std::nan(""))));
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    const double v = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng), int(rng() % 70) - 5);
    ASSERT_EQ(round_to_integer(v), std::nearbyint(v)) << v;
  }
}

TEST(Quantizer, Speed) {
  // Prints throughput (no threshold: machines and load vary). Target on one
  // core: quantize float32 -> int32 >= 3 GB/s, dequantize >= 4 GB/s.
  const size_t n = size_t(1) << 22;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(n), y(n);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> q(n);
  std::vector<uint64_t> outl;
  const QuantGrid g = QuantGrid::from_bound(1e-3);
  auto best_of = [](int reps, auto&& f) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double tq = best_of(5, [&] {
    outl.clear();
    quantize(x.data(), n, g, default_code_limit<int32_t>(), q.data(), &outl);
  });
  const bool was = quantize_set_portable(true);
  const double tp = best_of(5, [&] {
    outl.clear();
    quantize(x.data(), n, g, default_code_limit<int32_t>(), q.data(), &outl);
  });
  quantize_set_portable(was);
  const double td = best_of(5, [&] { dequantize(q.data(), n, g, y.data()); });
  std::printf(
      "[ speed    ] quantize f32->i32 %.2f GB/s (portable loop %.2f GB/s), dequantize i32->f32 %.2f GB/s "
      "(of float32 data)\n",
      double(n * 4) / tq / 1e9, double(n * 4) / tp / 1e9, double(n * 4) / td / 1e9);
  for (size_t i = 0; i < n; i += 4099) ASSERT_LE(std::fabs(double(x[i]) - double(y[i])), 1e-3);
}
