// The error budget (the derivations are in error_budget.hpp).
#include "bound/error_budget.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ncclz::bound {
namespace {

double smallest_subnormal(codec::ElemType t) {
  switch (t) {
    case codec::ElemType::F32: return std::ldexp(1.0, -149);
    case codec::ElemType::F64: return std::numeric_limits<double>::denorm_min();
    case codec::ElemType::F16: return std::ldexp(1.0, -24);
    case codec::ElemType::BF16: return std::ldexp(1.0, -133);
    default: return 0;
  }
}

}  // namespace

double largest_finite(codec::ElemType t) {
  switch (t) {
    case codec::ElemType::F32: return double(std::numeric_limits<float>::max());
    case codec::ElemType::F64: return std::numeric_limits<double>::max();
    case codec::ElemType::F16: return 65504.0;
    case codec::ElemType::BF16: return 3.3895313892515355e38;
    default: return 0;
  }
}

double unit_roundoff(codec::ElemType t) {
  switch (t) {
    case codec::ElemType::F32: return std::ldexp(1.0, -24);
    case codec::ElemType::F64: return std::ldexp(1.0, -53);
    case codec::ElemType::F16: return std::ldexp(1.0, -11);
    case codec::ElemType::BF16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}

double half_ulp_bound(codec::ElemType t, double v) {
  return std::max(std::fabs(v) * unit_roundoff(t), smallest_subnormal(t) / 2);
}

double relative_bound(double r, double lo, double hi) { return r * (hi - lo); }

namespace {

/// The plan's code type and the quantizer's limit: int32 when n_add codes of
/// magnitude m add up below 2^31 - 1, else int64 below 2^62; false (why_not
/// set) when neither holds.
bool choose_code_width(LossyPlan& p, double m, double n_add) {
  const int64_t lim32 = int64_t(2147483647.0 / n_add);
  const int64_t lim64 = int64_t(std::ldexp(1.0, 62) / n_add);
  if (m <= double(lim32)) {
    p.wide = false;
    p.limit = lim32;
  } else if (m <= double(lim64) * 0.999) {
    p.wide = true;
    p.limit = lim64;
  } else {
    p.why_not = "the codes would not fit 64 bits";
    return false;
  }
  return true;
}

}  // namespace

LossyPlan plan_lossy(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g) {
  LossyPlan p;
  p.E = E;
  if (!(E > 0) || !std::isfinite(E)) {
    p.why_not = "the error bound is zero (constant or empty data in rel mode)";
    return p;
  }
  if (g.nonfinite) {
    p.why_not = "non-finite inputs";
    return p;
  }
  const double N = double(nranks);
  const double A = g.maxabs;
  const double tiny = std::ldexp(1.0, -50);
  // 16-bit floats: the quantizer's check in double (see the header).
  const bool exact_check = t == codec::ElemType::F16 || t == codec::ElemType::BF16;
  const double check_rounding = exact_check ? 0.0 : half_ulp_bound(t, A + E);
  const double delta = 2 * check_rounding + 3 * (A + E) * tiny;
  const double R = (how == Combine::Sum ? N * (A + E) + E : A + 2 * E) * (1 + std::ldexp(1.0, -30));
  if (!(R < largest_finite(t))) {
    p.why_not = "the result may overflow the element type";
    return p;
  }
  const double avail = E - half_ulp_bound(t, R) - R * tiny;
  const double eb = how == Combine::Sum ? avail / N - delta : avail - delta;
  if (!(eb > 1e-300)) {
    p.why_not = "the bound is below the element type's own rounding";
    return p;
  }
  const double m = A / (2 * eb) + 2;  // largest |code| any rank emits
  const double n_add = how == Combine::Sum ? N : 1;
  if (!choose_code_width(p, m, n_add)) return p;
  p.eb = eb;
  p.check_eb = eb + check_rounding + 2 * (A + E) * tiny;
  p.exact_check = exact_check;
  p.compress = true;
  return p;
}

LossyPlan plan_lossy_hier(codec::ElemType t, Combine how, int nhosts, int local_size, double E, const DataStats& g) {
  LossyPlan p;
  p.E = E;
  if (!(E > 0) || !std::isfinite(E)) {
    p.why_not = "the error bound is zero (constant or empty data in rel mode)";
    return p;
  }
  if (g.nonfinite) {
    p.why_not = "non-finite inputs";
    return p;
  }
  const double H = double(nhosts), L = double(local_size);
  const double A = g.maxabs;
  const double tiny = std::ldexp(1.0, -50);
  const double u = unit_roundoff(t), d = smallest_subnormal(t);
  const bool half = t == codec::ElemType::F16 || t == codec::ElemType::BF16;
  const bool sums = how != Combine::Select;
  // The host's combined value: its bound M and its rounding eps (see the header).
  double M = A, eps = 0;
  if (sums) {
    const double gr = half ? (1 + u) * (1 + std::ldexp(1.0, -24)) : 1 + u;
    M = L * A * std::pow(gr, L) + L * d;
    const double e_add = half_ulp_bound(t, M * (1 + std::ldexp(1.0, -23))) + (half ? std::ldexp(M, -24) : 0.0);
    eps = (L - 1) * e_add;
  }
  const double V = how == Combine::Mean ? L * E : E;
  const double delta = 2 * half_ulp_bound(t, M + V) + 3 * (M + V) * tiny;
  const double inflate = 1 + std::ldexp(1.0, -30);
  const double R = how == Combine::Sum    ? H * (M + V + delta) * inflate + E
                   : how == Combine::Mean ? (M + V + delta) / L * inflate + E
                                          : (A + 2 * E) * inflate;
  if (!(R < largest_finite(t)) || !(M < largest_finite(t))) {
    p.why_not = "the result may overflow the element type";
    return p;
  }
  const double avail = E - half_ulp_bound(t, R) - R * tiny;
  const double eb = how == Combine::Sum    ? avail / H - delta - eps
                    : how == Combine::Mean ? avail * L - delta - eps
                                           : avail - delta;
  if (!(eb > 1e-300) || !(eb <= V)) {
    p.why_not = "the bound is below the element type's own rounding";
    return p;
  }
  const double m = M / (2 * eb) + 2;  // largest |code| any host emits
  const double n_add = sums ? H : 1;
  if (!choose_code_width(p, m, n_add)) return p;
  p.eb = eb;
  p.check_eb = eb + half_ulp_bound(t, M + V) + 2 * (M + V) * tiny;
  p.compress = true;
  return p;
}

bool exact_keeps_bound(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g) {
  if (how == Combine::Select) return true;
  if (g.nonfinite || !(E > 0) || !std::isfinite(E)) return false;
  const double R = double(nranks) * g.maxabs * (1 + std::ldexp(1.0, -30));
  if (!(R < largest_finite(t))) return false;
  return exact_error(t, how, nranks, g, false) <= 0.5 * E;
}

double exact_error(codec::ElemType t, Combine how, int nranks, const DataStats& g, bool in_f64) {
  if (how == Combine::Select || nranks <= 1) return 0;
  const double N = double(nranks);
  const double A = g.maxabs * (1 + std::ldexp(1.0, -30));
  const double R = N * A;
  if (!in_f64) {
    const double err = (N - 1) * half_ulp_bound(t, R);
    if (how != Combine::Mean) return err;
    const bool exact_division = (nranks & (nranks - 1)) == 0 && nranks <= (1 << 16);
    return err / N + (exact_division ? smallest_subnormal(t) / 2 : half_ulp_bound(t, A));
  }
  const double u64 = std::ldexp(1.0, -53);
  const double acc = (N - 1) * R * u64;
  return how == Combine::Mean ? acc / N + A * u64 + half_ulp_bound(t, A) : acc + half_ulp_bound(t, R);
}

double accumulation_error(codec::ElemType t, Combine how, int nranks, const DataStats& g, Accumulation acc) {
  if (acc != Accumulation::F32) return exact_error(t, how, nranks, g, acc == Accumulation::F64);
  if (how == Combine::Select || nranks <= 1) return 0;
  const double N = double(nranks);
  const double A = g.maxabs * (1 + std::ldexp(1.0, -30));
  const double R = N * A;
  const double e32 = (N - 1) * half_ulp_bound(codec::ElemType::F32, R);
  if (how == Combine::Mean) return e32 / N + A * std::ldexp(1.0, -53) + half_ulp_bound(t, A);
  return e32 + half_ulp_bound(t, R + e32);
}

ExactChoice choose_exact(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g, bool f32_ok) {
  auto choice = [&](Accumulation acc) {
    ExactChoice c;
    c.acc = acc;
    c.error = accumulation_error(t, how, nranks, g, acc);
    c.keeps = c.error <= E;
    return c;
  };
  if (how == Combine::Select) return choice(Accumulation::InT);
  const ExactChoice f64 = choice(Accumulation::F64);
  const double R = double(nranks) * g.maxabs * (1 + std::ldexp(1.0, -30));
  if (g.nonfinite || !(R < largest_finite(t))) return f64;
  // Within E, or where not even float64 is, as good as float64.
  const double target = f64.keeps ? E : f64.error * kBestExactSlack;
  const ExactChoice in_t = choice(Accumulation::InT);
  if (in_t.error <= target) return in_t;
  const bool half = t == codec::ElemType::F16 || t == codec::ElemType::BF16;
  if (half && f32_ok) {
    const ExactChoice f32 = choice(Accumulation::F32);
    if (f32.error <= target) return f32;
  }
  return f64;
}

double blob_bound(double abs_bound, double rel_bound, bool any_finite, double lo, double hi, double max_eb) {
  double eb;
  if (abs_bound > 0) {
    eb = abs_bound;
  } else if (!any_finite) {
    eb = 1;
  } else if (lo == hi) {
    eb = lo != 0 ? std::fabs(lo) / 2 : 1.0;
  } else {
    eb = relative_bound(rel_bound, lo, hi);
    if (!std::isfinite(eb)) eb = rel_bound * hi - rel_bound * lo;   // hi - lo overflowed
    if (!(eb > 0)) eb = std::numeric_limits<double>::denorm_min();  // underflowed: tightest bound
  }
  return std::min(eb, max_eb);
}

}  // namespace ncclz::bound
