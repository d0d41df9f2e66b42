// Quantizer: floats onto integer codes on a grid shared by every rank.
//
// A code q stands for the value q * step with step = 2 * eb, computed in
// double and rounded once to the element type T. quantize() picks for each
// finite x the code nearest x / step and then verifies the bound after that
// rounding, |x - T(q * step)| <= eb, fixing q by one step where float rounding
// broke it. Elements that are non-finite, whose code would exceed the code
// limit, or whose bound cannot be met are outliers: their code is 0 and their
// index is reported, so the caller carries them exactly. Nothing is clipped.
//
// Exactly (the same arithmetic on the host and on the device):
//   v  = double(x) * inv_step                       (one rounding)
//   q0 = v rounded to the nearest integer, ties to even
//   for q in (q0, q0 - 1, q0 + 1), the first with |q| <= limit and
//       |double(x) - double(T(double(q) * step))| <= eb     is the code;
//   none: outlier.
// T(d) rounds a double to T to nearest, ties to even (bf16/f16 in a single
// rounding, subnormals included). The check is evaluated in double; for an
// accepted code x and T(q*step) are within a factor two of each other (or one
// is zero), so the subtraction is exact and the check is the true bound.
//
// Code limits (|q| <= limit): the collectives add codes of many ranks, so the
// defaults leave headroom for sums:
//   int32: 2^20 = 1048576. A sum of up to 2047 such codes fits in int32
//          (2047 * 2^20 < 2^31). A runtime with more ranks passes its own
//          limit, (2^31 - 1) / nranks.
//   int64: 2^50. A sum of up to 8191 codes fits in int64, and every code is
//          exactly representable in double, so dequantization rounds once.
// Limits passed in are clamped to [0, max_code_limit<Code>()] (2^31 - 1 for
// int32, 2^62 for int64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Storage types for 16-bit floats (bit patterns).
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

struct QuantGrid {
  double eb = 0;        ///< bound: |x - dequantized| <= eb for every finite non-outlier element
  double step = 0;      ///< 2 * eb
  double inv_step = 0;  ///< 1 / step
  /// The check's reconstruction: false (the codec's rule): the code's value
  /// rounded to T, T(fl(q * step)), what a decompressed element is; true (the
  /// collectives' rule for 16-bit floats, bound::LossyPlan::exact_check):
  /// fl(q * step) in double, what the codes add up to before the one final
  /// rounding, so the check costs no rounding of T (2^-9 of a value in bf16).
  bool exact_check = false;
  NCCLZ_HD static QuantGrid from_bound(double eb) { return QuantGrid{eb, 2 * eb, 1 / (2 * eb), false}; }
};

/// Largest |code| the quantizer emits for a code type (leaves headroom for sums).
template <class Code>
constexpr int64_t default_code_limit();
template <>
constexpr int64_t default_code_limit<int32_t>() {
  return int64_t(1) << 20;
}
template <>
constexpr int64_t default_code_limit<int64_t>() {
  return int64_t(1) << 50;
}

/// Largest limit quantize() honours for a code type (larger ones are clamped).
template <class Code>
constexpr int64_t max_code_limit();
template <>
constexpr int64_t max_code_limit<int32_t>() {
  return 2147483647;
}
template <>
constexpr int64_t max_code_limit<int64_t>() {
  return int64_t(1) << 62;
}

/// Quantizes x[0..n) into q. Outlier indices are appended to *outliers (their
/// codes are 0). `limit` bounds |q|. Returns the number of outliers.
template <class T, class Code>
size_t quantize(const T* x, size_t n, const QuantGrid& g, int64_t limit, Code* q, std::vector<uint64_t>* outliers);

/// For tests: true makes quantize() skip its hand-written vector path
/// (float32 -> int32 with AVX-512) and run the portable loop, so both can be
/// checked on one machine. Returns the previous setting. Process-wide.
bool quantize_set_portable(bool on);

/// out[i] = T(q[i] * step).
template <class T, class Code>
void dequantize(const Code* q, size_t n, const QuantGrid& g, T* out);

/// Min and max of the finite elements; false when there are none.
template <class T>
bool finite_range(const T* x, size_t n, double* lo, double* hi);

/// finite_range, and whether any element is non-finite (*nonfinite, when given).
template <class T>
bool finite_stats(const T* x, size_t n, double* lo, double* hi, bool* nonfinite);

/// The integer type of an element's bit pattern.
template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 2, int16_t, std::conditional_t<sizeof(T) == 4, int32_t, int64_t>>;

/// finite_stats, and the elements whose bits are not all zero (all but +0.0):
/// their positions to pos and bit patterns to bits (room for n each), in
/// increasing position, *k their number (what sparse_find_nonzeros gives for
/// the bit patterns). One pass over x where a vector path exists (float32
/// with AVX-512), else the two scans one after the other.
template <class T>
bool finite_stats_nonzeros(const T* x, size_t n, double* lo, double* hi, bool* nonfinite, uint32_t* pos,
                           BitsOf<T>* bits, size_t* k);

/// Largest |x| over finite elements (0 if none).
template <class T>
double finite_max_abs(const T* x, size_t n);

// ---------------------------------------------------------------------------
// Element-wise building blocks, identical on the host and on the device.
// ---------------------------------------------------------------------------

NCCLZ_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
NCCLZ_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
NCCLZ_HD uint64_t bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return uint64_t(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}
NCCLZ_HD double double_of(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)u);
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

/// |d| (clears the sign bit).
NCCLZ_HD double abs_of(double d) { return double_of(bits_of(d) & 0x7FFFFFFFFFFFFFFFull); }

/// |a| <= b for b >= 0 not NaN; false when a is NaN. Compared as integers (the
/// bit patterns of non-negative doubles are ordered like their values), which
/// keeps loops free of floating-point compares that the compiler will not
/// if-convert under -ftrapping-math, so they vectorize.
NCCLZ_HD bool abs_le(double a, double b) { return int64_t(bits_of(a) & 0x7FFFFFFFFFFFFFFFull) <= int64_t(bits_of(b)); }

/// bf16 -> float: exact.
NCCLZ_HD float bf16_to_float(uint16_t b) { return float_of(uint32_t(b) << 16); }

/// float -> bf16, round to nearest even; NaN stays NaN (quieted, sign kept).
NCCLZ_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// f16 -> float: exact (subnormals, inf, NaN payloads kept). Branch-free.
NCCLZ_HD float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  const uint32_t normal = ((e + 112u) << 23) | (m << 13);
  const uint32_t special = 0x7F800000u | (m << 13);
  const uint32_t sub = bits_of(float(m) * 5.9604644775390625e-8f);  // m * 2^-24, exact
  // Selected with masks (see round_to_integer for why).
  const uint32_t is_sub = 0u - uint32_t(e == 0), is_special = 0u - uint32_t(e == 0x1Fu);
  const uint32_t mag = (sub & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
  return float_of(sign | mag);
}

/// float -> f16, round to nearest even (subnormals, overflow to inf, NaN quieted).
/// Branch-free so that loops over it vectorize.
NCCLZ_HD uint16_t float_to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normal f16 (a >= 2^-14): rebias the exponent, round the mantissa to 10 bits.
  const uint32_t r = a - (112u << 23);
  const uint32_t normal = (r + 0xFFFu + ((r >> 13) & 1u)) >> 13;
  // Subnormal f16 (a < 2^-14): k = |f| * 2^24 (exact) rounded to nearest even
  // by adding 2^23 in float, where the spacing of floats is 1.
  const uint32_t sub = bits_of(float_of(a) * 16777216.0f + 8388608.0f) - 0x4B000000u;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu);
  // Selected with masks (see round_to_integer for why).
  const uint32_t is_nan = 0u - uint32_t(a > 0x7F800000u);
  const uint32_t is_inf = (0u - uint32_t(a >= 0x477FF000u)) & ~is_nan;  // >= 65520 (and inf) rounds to inf
  const uint32_t is_normal = (0u - uint32_t(a >= 0x38800000u)) & ~(is_nan | is_inf);
  const uint32_t is_sub = ~(is_nan | is_inf | is_normal);
  const uint32_t mag = (nan & is_nan) | (0x7C00u & is_inf) | (normal & is_normal) | (sub & is_sub);
  return uint16_t(sign | mag);
}

/// double -> float rounded to odd (truncate, then set the last bit if inexact).
/// Rounding that to a format with at most 22 mantissa bits and no wider
/// exponent range gives the correctly rounded (nearest even) double result.
NCCLZ_HD float double_to_float_odd(double d) {
  const float f = float(d);
  const double back = double(f);
  const uint32_t u = bits_of(f);
  const uint64_t bd = bits_of(d), bb = bits_of(back);
  const bool is_nan = (bd & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
  const bool inexact = (bb != bd) & !is_nan;
  // One step down in magnitude where f was rounded away from zero (|back| > |d|).
  const uint32_t toward_zero = u - uint32_t((bb & 0x7FFFFFFFFFFFFFFFull) > (bd & 0x7FFFFFFFFFFFFFFFull));
  return float_of(inexact ? (toward_zero | 1u) : u);
}

NCCLZ_HD uint16_t double_to_bf16(double d) { return float_to_bf16(double_to_float_odd(d)); }
NCCLZ_HD uint16_t double_to_f16(double d) { return float_to_f16(double_to_float_odd(d)); }

/// The value of an element as double (exact for every type).
NCCLZ_HD double to_double(float x) { return double(x); }
NCCLZ_HD double to_double(double x) { return x; }
NCCLZ_HD double to_double(Bf16 x) { return double(bf16_to_float(x.bits)); }
NCCLZ_HD double to_double(F16 x) { return double(f16_to_float(x.bits)); }

/// A double rounded to T (nearest even, one rounding).
template <class T>
NCCLZ_HD T from_double(double d);
template <>
NCCLZ_HD float from_double<float>(double d) {
  return float(d);
}
template <>
NCCLZ_HD double from_double<double>(double d) {
  return d;
}
template <>
NCCLZ_HD Bf16 from_double<Bf16>(double d) {
  return Bf16{double_to_bf16(d)};
}
template <>
NCCLZ_HD F16 from_double<F16>(double d) {
  return F16{double_to_f16(d)};
}

/// ElemType of a value type.
template <class T>
constexpr ElemType elem_type_of();
template <>
constexpr ElemType elem_type_of<float>() {
  return ElemType::F32;
}
template <>
constexpr ElemType elem_type_of<double>() {
  return ElemType::F64;
}
template <>
constexpr ElemType elem_type_of<Bf16>() {
  return ElemType::BF16;
}
template <>
constexpr ElemType elem_type_of<F16>() {
  return ElemType::F16;
}
template <>
constexpr ElemType elem_type_of<int32_t>() {
  return ElemType::I32;
}
template <>
constexpr ElemType elem_type_of<int64_t>() {
  return ElemType::I64;
}

/// v rounded to the nearest integer, ties to even; NaN and inf pass through.
NCCLZ_HD double round_to_integer(double v) {
#if defined(__CUDA_ARCH__)
  return rint(v);
#else
  // |v| + 2^52 lies in [2^52, 2^53), where doubles are the integers: the
  // addition rounds |v| to nearest even. From 2^52 on every double is an integer.
  // Both are computed and selected as bit patterns, so loops over this stay
  // branch-free (the compiler will not if-convert a select between
  // floating-point computations under -ftrapping-math).
  const uint64_t bv = bits_of(v);
  const uint64_t ba = bv & 0x7FFFFFFFFFFFFFFFull;
  const double t = (double_of(ba) + 4503599627370496.0) - 4503599627370496.0;
  const uint64_t small = uint64_t(0) - uint64_t(ba < 0x4330000000000000ull);  // |v| < 2^52: all ones
  const uint64_t br = (bits_of(t) & small) | (ba & ~small);
  return double_of(br | (bv & 0x8000000000000000ull));
#endif
}

/// Whether code c reconstructs x within the bound (QuantGrid::exact_check: in
/// double, else after rounding to T).
template <class T>
NCCLZ_HD bool code_fits(double xd, int64_t c, const QuantGrid& g) {
  const double v = double(c) * g.step;
  return abs_le(xd - (g.exact_check ? v : to_double(from_double<T>(v))), g.eb);
}

/// T(q * step).
template <class T, class Code>
NCCLZ_HD T dequantize_one(Code q, const QuantGrid& g) {
  return from_double<T>(double(q) * g.step);
}

/// Quantizes one element (the reference the vector loop agrees with). Returns
/// false for an outlier (then *q = 0). `limit` must be in [0, max_code_limit<Code>()].
template <class T, class Code>
NCCLZ_HD bool quantize_one(T x, const QuantGrid& g, int64_t limit, Code* q) {
  *q = 0;
  const double xd = to_double(x);
  const double r = round_to_integer(xd * g.inv_step);
  if (!abs_le(r, double(limit) + 2.0)) return false;  // also NaN, inf
  const int64_t c = int64_t(r);
  const int64_t cand[3] = {c, c - 1, c + 1};
  for (int k = 0; k < 3; ++k) {
    const int64_t cc = cand[k];
    if (cc > limit || cc < -limit) continue;
    if (code_fits<T>(xd, cc, g)) {
      *q = Code(cc);
      return true;
    }
  }
  return false;
}

}  // namespace ncclz::codec
