// Quantizer (host). The exact rule is in quantizer.hpp; this file makes the
// common path fast: a branch-free loop over blocks of kBlock elements computes
// every code and ORs a "bound violated" flag, and only a block whose flag is
// set is redone element by element with quantize_one (neighbour codes,
// outliers). Both paths compute the same thing, so results do not depend on
// which one ran.
#include "codec/quantizer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "codec/cpu_features.hpp"
#include "codec/sparse_coder.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#if defined(__FAST_MATH__)
#error "quantizer.cpp relies on IEEE rounding (round_to_integer, the bound check): no -ffast-math"
#endif

namespace ncclz::codec {
namespace {

constexpr size_t kBlock = 256;

std::atomic<bool> g_quantize_portable{false};
[[maybe_unused]] bool quantize_force_portable() { return g_quantize_portable.load(std::memory_order_relaxed); }

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
// AVX-512, AVX2 and baseline clones of the hot loops, chosen at load time. The
// AVX-512 level has FMA: the library is built with -ffp-contract=off (see
// CMakeLists.txt), so no clone fuses the bound check's multiply and subtract.
#define NCCLZ_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define NCCLZ_MULTIVERSION
#endif

/// Largest double <= limit (limit in [0, 2^62]).
double limit_as_double(int64_t limit) {
  double d = double(limit);
  if (int64_t(d) > limit) d = std::nextafter(d, 0.0);
  return d;
}

/// The nearest code for each element; flag[i] = 1 where element i needs the
/// careful path (bound violated after rounding, over the limit, non-finite).
/// Returns whether any flag is set.
/// Code from an integral double: for int64 codes with |r| < 2^51, through the
/// bits of r + 1.5 * 2^52 (AVX2 has no packed double -> int64 conversion).
template <class Code, bool kSmall>
__attribute__((always_inline)) inline Code code_from_double(double r) {
  if constexpr (sizeof(Code) == 8 && kSmall) {
    return Code(int64_t(bits_of(r + 6755399441055744.0)) - int64_t(0x4338000000000000ull));
  } else {
    return Code(r);
  }
}

template <class T, class Code, bool kSmall, bool kExact>
__attribute__((always_inline)) inline bool quantize_block_fast(const T* __restrict x, size_t n, double inv_step,
                                                               double step, double eb, double limd, Code* __restrict q,
                                                               uint8_t* __restrict flag) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double xd = to_double(x[i]);
    const double r = round_to_integer(xd * inv_step);
    const bool in = abs_le(r, limd);
    const double rc = double_of(bits_of(r) & (uint64_t(0) - uint64_t(in)));
    double back = rc * step;  // QuantGrid::exact_check: the check in double
    if constexpr (!kExact) back = to_double(from_double<T>(back));
    const bool ok = in & abs_le(xd - back, eb);
    q[i] = code_from_double<Code, kSmall>(rc);
    flag[i] = uint8_t(!ok);
    bad |= uint32_t(!ok);
  }
  return bad != 0;
}

template <class T, class Code>
NCCLZ_MULTIVERSION size_t quantize_impl(const T* x, size_t n, const QuantGrid& g, int64_t limit, Code* q,
                                        std::vector<uint64_t>* outliers) {
  limit = std::clamp<int64_t>(limit, 0, max_code_limit<Code>());
  const double limd = limit_as_double(limit);
  const bool small = limit < (int64_t(1) << 51);
  size_t count = 0;
  uint8_t flag[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    bool any = false;
    if (g.exact_check) {
      any = small ? quantize_block_fast<T, Code, true, true>(x + b, m, g.inv_step, g.step, g.eb, limd, q + b, flag)
                  : quantize_block_fast<T, Code, false, true>(x + b, m, g.inv_step, g.step, g.eb, limd, q + b, flag);
    } else {
      any = small ? quantize_block_fast<T, Code, true, false>(x + b, m, g.inv_step, g.step, g.eb, limd, q + b, flag)
                  : quantize_block_fast<T, Code, false, false>(x + b, m, g.inv_step, g.step, g.eb, limd, q + b, flag);
    }
    if (!any) continue;
    for (size_t k = 0; k < m; ++k) {
      if (!flag[k]) continue;
      if (!quantize_one(x[b + k], g, limit, q + b + k)) {
        ++count;
        if (outliers) outliers->push_back(uint64_t(b + k));
      }
    }
  }
  return count;
}

template <class T, class Code>
NCCLZ_MULTIVERSION void dequantize_impl(const Code* __restrict q, size_t n, double step, T* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = from_double<T>(double(q[i]) * step);
}

// int64 codes: exact conversion to double through bits for |q| < 2^51 (AVX2
// has no packed int64 -> double conversion); blocks with larger codes (only
// with a limit above 2^51, or sums of codes) take the plain conversion.
template <class T>
NCCLZ_MULTIVERSION void dequantize_i64_impl(const int64_t* __restrict q, size_t n, double step, T* __restrict out) {
  constexpr int64_t kMax = (int64_t(1) << 51) - 1;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    int64_t big = 0;
    for (size_t i = b; i < b + m; ++i) big |= int64_t(q[i] > kMax) | int64_t(q[i] < -kMax);
    if (big) {
      for (size_t i = b; i < b + m; ++i) out[i] = from_double<T>(double(q[i]) * step);
    } else {
      for (size_t i = b; i < b + m; ++i) {
        const double d = double_of(uint64_t(q[i] + int64_t(0x4338000000000000ull))) - 6755399441055744.0;
        out[i] = from_double<T>(d * step);
      }
    }
  }
}

bool is_finite_bits(float x) { return (bits_of(x) & 0x7F800000u) != 0x7F800000u; }
bool is_finite_bits(double x) { return (bits_of(x) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull; }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NCCLZ_QUANT_AVX2 __attribute__((target("avx2")))
// The statistics scan before every lossy call reads the whole input once, so
// it runs at memory speed where it can: min/max with vminps/vmaxps over two
// accumulators and an "exponent all ones" flag; NaN never replaces a minimum or
// maximum (vminps/vmaxps return their second operand when one is NaN). Returns
// false when some element is non-finite: the caller then runs the careful loop,
// which excludes +-Inf from the range (the common case, all finite, pays one
// pass at about twice the careful loop's speed: docs/BENCHMARKS.md,
// "Measurements behind the code").
NCCLZ_QUANT_AVX2 bool all_finite_minmax_avx2(const float* x, size_t n, float* lo, float* hi) {
  __m256 l0 = _mm256_set1_ps(INFINITY), l1 = l0, h0 = _mm256_set1_ps(-INFINITY), h1 = h0;
  const __m256i m = _mm256_set1_epi32(0x7F800000);
  __m256i e = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    l0 = _mm256_min_ps(a, l0);
    l1 = _mm256_min_ps(b, l1);
    h0 = _mm256_max_ps(a, h0);
    h1 = _mm256_max_ps(b, h1);
    const __m256i ea = _mm256_and_si256(_mm256_castps_si256(a), m), eb = _mm256_and_si256(_mm256_castps_si256(b), m);
    e = _mm256_or_si256(e, _mm256_or_si256(_mm256_cmpeq_epi32(ea, m), _mm256_cmpeq_epi32(eb, m)));
  }
  alignas(32) float L[8], H[8];
  _mm256_store_ps(L, _mm256_min_ps(l0, l1));
  _mm256_store_ps(H, _mm256_max_ps(h0, h1));
  bool bad = !_mm256_testz_si256(e, e);
  float l = INFINITY, h = -INFINITY;
  for (int k = 0; k < 8; ++k) {
    l = L[k] < l ? L[k] : l;
    h = H[k] > h ? H[k] : h;
  }
  for (; i < n; ++i) {
    bad |= !is_finite_bits(x[i]);
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  *lo = l;
  *hi = h;
  return !bad;
}
NCCLZ_QUANT_AVX2 bool all_finite_minmax_avx2(const double* x, size_t n, double* lo, double* hi) {
  __m256d l0 = _mm256_set1_pd(INFINITY), l1 = l0, h0 = _mm256_set1_pd(-INFINITY), h1 = h0;
  const __m256i m = _mm256_set1_epi64x(0x7FF0000000000000ll);
  __m256i e = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a = _mm256_loadu_pd(x + i), b = _mm256_loadu_pd(x + i + 4);
    l0 = _mm256_min_pd(a, l0);
    l1 = _mm256_min_pd(b, l1);
    h0 = _mm256_max_pd(a, h0);
    h1 = _mm256_max_pd(b, h1);
    const __m256i ea = _mm256_and_si256(_mm256_castpd_si256(a), m), eb = _mm256_and_si256(_mm256_castpd_si256(b), m);
    e = _mm256_or_si256(e, _mm256_or_si256(_mm256_cmpeq_epi64(ea, m), _mm256_cmpeq_epi64(eb, m)));
  }
  alignas(32) double L[4], H[4];
  _mm256_store_pd(L, _mm256_min_pd(l0, l1));
  _mm256_store_pd(H, _mm256_max_pd(h0, h1));
  bool bad = !_mm256_testz_si256(e, e);
  double l = INFINITY, h = -INFINITY;
  for (int k = 0; k < 4; ++k) {
    l = L[k] < l ? L[k] : l;
    h = H[k] > h ? H[k] : h;
  }
  for (; i < n; ++i) {
    bad |= !is_finite_bits(x[i]);
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  *lo = l;
  *hi = h;
  return !bad;
}
#define NCCLZ_QUANT_HAVE_AVX2 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// float32 -> int32 codes with AVX-512F, the most common lossy call: the same
// per-element computation as quantize_block_fast (so the same codes and the same
// elements sent to quantize_one), 8 elements per vector, written out because the
// compiler's clone of the generic loop spilled most of its registers (~3x slower,
// and ~10 % of a 4-rank all-reduce's CPU time in the network lab).
//   r = round-to-nearest-even(double(x) * inv_step)       vrndscalepd
//   in = |r| <= limit (NaN and inf are not)                on the bit patterns, as abs_le
//   ok = in and |double(x) - double(float(r * step))| <= eb
// An element that is not ok is redone by quantize_one (neighbour codes, outliers).
// (GCC 12's AVX-512 conversion intrinsics start from an "undefined" vector that
// -Wmaybe-uninitialized reports, and _mm512_min_ps/_mm512_max_ps one that
// -Wuninitialized does: known false positives, silenced for this part.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define NCCLZ_QUANT_AVX512 __attribute__((target("avx512f")))
struct QuantConsts512 {
  __m512d inv, step;
  __m512i absm, limb, ebb;
};
// Codes of x[0..8) into q[0..8); returns the mask of the elements that are not ok.
NCCLZ_QUANT_AVX512 __attribute__((always_inline)) inline unsigned quantize8_avx512(const float* x, int32_t* q,
                                                                                   const QuantConsts512& c) {
  const __m512d xd = _mm512_cvtps_pd(_mm256_loadu_ps(x));
  const __m512d r = _mm512_roundscale_pd(_mm512_mul_pd(xd, c.inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask8 in = _mm512_cmple_epi64_mask(_mm512_and_si512(_mm512_castpd_si512(r), c.absm), c.limb);
  const __m512d rc = _mm512_maskz_mov_pd(in, r);
  const __m512d back = _mm512_cvtps_pd(_mm512_cvtpd_ps(_mm512_mul_pd(rc, c.step)));
  const __m512i dev = _mm512_and_si512(_mm512_castpd_si512(_mm512_sub_pd(xd, back)), c.absm);
  const __mmask8 ok = _mm512_mask_cmple_epi64_mask(in, dev, c.ebb);
  // rc is an integer with |rc| <= limit < 2^31: the conversion is exact.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_cvtpd_epi32(rc));
  return unsigned(uint8_t(~ok));
}
NCCLZ_QUANT_AVX512 size_t quantize_f32_i32_avx512(const float* x, size_t n, const QuantGrid& g, int64_t limit,
                                                  int32_t* q, std::vector<uint64_t>* outliers) {
  limit = std::clamp<int64_t>(limit, 0, max_code_limit<int32_t>());
  QuantConsts512 c;
  c.inv = _mm512_set1_pd(g.inv_step);
  c.step = _mm512_set1_pd(g.step);
  c.absm = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll);
  c.limb = _mm512_set1_epi64(int64_t(bits_of(limit_as_double(limit))));
  c.ebb = _mm512_set1_epi64(int64_t(bits_of(g.eb)));
  size_t count = 0;
  // Elements of [base, base + 16) flagged in m (bit k: element base + k), redone by quantize_one.
  auto redo = [&](size_t base, unsigned m) {
    for (; m; m &= m - 1) {
      const size_t i = base + size_t(__builtin_ctz(m));
      if (!quantize_one(x[i], g, limit, q + i)) {
        ++count;
        if (outliers) outliers->push_back(uint64_t(i));
      }
    }
  };
  size_t i = 0;
  const __m512i absf = _mm512_set1_epi32(0x7FFFFFFF);
  for (; i + 16 <= n; i += 16) {
    // Sixteen zeros (either sign) have code 0 and are always ok (r = 0, in,
    // back = 0): one test instead of the conversions, for sparse data.
    if (_mm512_test_epi32_mask(_mm512_loadu_si512(x + i), absf) == 0) {
      _mm512_storeu_si512(q + i, _mm512_setzero_si512());
      continue;
    }
    const unsigned bad = quantize8_avx512(x + i, q + i, c) | (quantize8_avx512(x + i + 8, q + i + 8, c) << 8);
    if (bad) redo(i, bad);
  }
  for (; i + 8 <= n; i += 8) redo(i, quantize8_avx512(x + i, q + i, c));
  if (i < n) redo(i, (1u << (n - i)) - 1);
  return count;
}

// The statistics scan of a lossy sum and the listing of its nonzeros
// (finite_stats_nonzeros) in one pass over float32: min/max and the
// "exponent all ones" flag as all_finite_minmax_avx2, and for each vector the
// positions and bit patterns of its nonzero lanes packed with one compress
// each, stored whole without a branch (a full vector of room: k <= the
// position). Returns false when some element is non-finite (the caller redoes
// the statistics carefully; the list is complete either way).
NCCLZ_QUANT_AVX512 bool minmax_nonzeros_f32_avx512(const float* x, size_t n, float* lo, float* hi, uint32_t* pos,
                                                   int32_t* bits, size_t* kout) {
  __m512 l0 = _mm512_set1_ps(INFINITY), l1 = l0, h0 = _mm512_set1_ps(-INFINITY), h1 = h0;
  const __m512i m = _mm512_set1_epi32(0x7F800000);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 bad = 0;
  size_t i = 0, k = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    l0 = _mm512_min_ps(a, l0);
    l1 = _mm512_min_ps(b, l1);
    h0 = _mm512_max_ps(a, h0);
    h1 = _mm512_max_ps(b, h1);
    const __m512i ai = _mm512_castps_si512(a), bi = _mm512_castps_si512(b);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(ai, m), m) | _mm512_cmpeq_epi32_mask(_mm512_and_si512(bi, m), m);
    const __mmask16 ma = _mm512_test_epi32_mask(ai, ai), mb = _mm512_test_epi32_mask(bi, bi);
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(int32_t(uint32_t(i))), iota);
    _mm512_storeu_si512(pos + k, _mm512_maskz_compress_epi32(ma, at));
    _mm512_storeu_si512(bits + k, _mm512_maskz_compress_epi32(ma, ai));
    k += size_t(__builtin_popcount(ma));
    _mm512_storeu_si512(pos + k, _mm512_maskz_compress_epi32(mb, _mm512_add_epi32(at, _mm512_set1_epi32(16))));
    _mm512_storeu_si512(bits + k, _mm512_maskz_compress_epi32(mb, bi));
    k += size_t(__builtin_popcount(mb));
  }
  alignas(64) float L[16], H[16];
  _mm512_store_ps(L, _mm512_min_ps(l0, l1));
  _mm512_store_ps(H, _mm512_max_ps(h0, h1));
  float l = INFINITY, h = -INFINITY;
  for (int j = 0; j < 16; ++j) {
    l = L[j] < l ? L[j] : l;
    h = H[j] > h ? H[j] : h;
  }
  bool nonfinite = bad != 0;
  for (; i < n; ++i) {
    nonfinite |= !is_finite_bits(x[i]);
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
    const int32_t v = int32_t(bits_of(x[i]));
    pos[k] = uint32_t(i);  // overwritten unless v != 0
    bits[k] = v;
    k += v != 0;
  }
  *lo = l;
  *hi = h;
  *kout = k;
  return !nonfinite;
}
#pragma GCC diagnostic pop
#define NCCLZ_QUANT_HAVE_AVX512 1
#endif

template <class T>
NCCLZ_MULTIVERSION bool finite_range_careful(const T* __restrict x, size_t n, double* lo, double* hi, bool* nonfinite) {
  // T is float or double: comparisons in T are exact. kLanes independent
  // running minima/maxima (no loop-carried chain across lanes) let the
  // compiler keep them in vector registers.
  constexpr int kLanes = 64 / sizeof(T);
  // Non-finite flags as integers of T's width, so they share T's vector lanes.
  using Flag = std::conditional_t<sizeof(T) == 8, int64_t, int32_t>;
  T lv[kLanes], hv[kLanes];
  Flag nf[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    lv[k] = T(INFINITY);
    hv[k] = T(-INFINITY);
    nf[k] = 0;
  }
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const T v = x[i + k];
      const bool f = is_finite_bits(v);
      lv[k] = (f && v < lv[k]) ? v : lv[k];
      hv[k] = (f && v > hv[k]) ? v : hv[k];
      nf[k] |= Flag(!f);
    }
  }
  T l = T(INFINITY), h = T(-INFINITY);
  bool bad = false;
  for (; i < n; ++i) {
    const T v = x[i];
    const bool f = is_finite_bits(v);
    l = (f && v < l) ? v : l;
    h = (f && v > h) ? v : h;
    bad |= !f;
  }
  for (int k = 0; k < kLanes; ++k) {
    l = lv[k] < l ? lv[k] : l;
    h = hv[k] > h ? hv[k] : h;
    bad |= nf[k] != 0;
  }
  if (nonfinite) *nonfinite = bad;
  if (!(l <= h)) return false;
  *lo = double(l);
  *hi = double(h);
  return true;
}

template <class T>
bool finite_range_float(const T* x, size_t n, double* lo, double* hi, bool* nonfinite) {
#if defined(NCCLZ_QUANT_HAVE_AVX2)
  if (n > 0 && cpu_has_avx2()) {
    T l, h;
    if (all_finite_minmax_avx2(x, n, &l, &h)) {
      if (nonfinite) *nonfinite = false;
      *lo = double(l);
      *hi = double(h);
      return true;
    }
  }
#endif
  return finite_range_careful(x, n, lo, hi, nonfinite);
}

template <class T>
bool finite_range_16(const T* x, size_t n, double* lo, double* hi, bool* nonfinite) {
  float l = INFINITY, h = -INFINITY;
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    const float v = float(to_double(x[i]));
    const bool f = is_finite_bits(v);
    l = (f && v < l) ? v : l;
    h = (f && v > h) ? v : h;
    bad |= !f;
  }
  if (nonfinite) *nonfinite = bad;
  if (!(l <= h)) return false;
  *lo = double(l);
  *hi = double(h);
  return true;
}

}  // namespace

bool quantize_set_portable(bool on) { return g_quantize_portable.exchange(on); }

template <class T, class Code>
size_t quantize(const T* x, size_t n, const QuantGrid& g, int64_t limit, Code* q, std::vector<uint64_t>* outliers) {
#if defined(NCCLZ_QUANT_HAVE_AVX512)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Code, int32_t>) {
    // (Its check is float32's rounding; the exact check takes the generic loop.)
    if (cpu_has_avx512f() && !quantize_force_portable() && !g.exact_check) {
      return quantize_f32_i32_avx512(x, n, g, limit, q, outliers);
    }
  }
#endif
  return quantize_impl<T, Code>(x, n, g, limit, q, outliers);
}

template <class T, class Code>
void dequantize(const Code* q, size_t n, const QuantGrid& g, T* out) {
  if constexpr (sizeof(Code) == 8) {
    dequantize_i64_impl<T>(q, n, g.step, out);
  } else {
    dequantize_impl<T, Code>(q, n, g.step, out);
  }
}

template <>
bool finite_stats<float>(const float* x, size_t n, double* lo, double* hi, bool* nonfinite) {
  return finite_range_float(x, n, lo, hi, nonfinite);
}
template <>
bool finite_stats<double>(const double* x, size_t n, double* lo, double* hi, bool* nonfinite) {
  return finite_range_float(x, n, lo, hi, nonfinite);
}
template <>
bool finite_stats<Bf16>(const Bf16* x, size_t n, double* lo, double* hi, bool* nonfinite) {
  return finite_range_16(x, n, lo, hi, nonfinite);
}
template <>
bool finite_stats<F16>(const F16* x, size_t n, double* lo, double* hi, bool* nonfinite) {
  return finite_range_16(x, n, lo, hi, nonfinite);
}

template <class T>
bool finite_stats_nonzeros(const T* x, size_t n, double* lo, double* hi, bool* nonfinite, uint32_t* pos,
                           BitsOf<T>* bits, size_t* k) {
#if defined(NCCLZ_QUANT_HAVE_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    if (n > 0 && cpu_has_avx512f()) {
      float l, h;
      if (minmax_nonzeros_f32_avx512(x, n, &l, &h, pos, bits, k)) {
        if (nonfinite) *nonfinite = false;
        *lo = double(l);
        *hi = double(h);
        return true;
      }
      return finite_range_careful(x, n, lo, hi, nonfinite);
    }
  }
#endif
  const bool any = finite_stats(x, n, lo, hi, nonfinite);
  *k = sparse_find_nonzeros(reinterpret_cast<const BitsOf<T>*>(x), n, pos, bits);
  return any;
}
template bool finite_stats_nonzeros<float>(const float*, size_t, double*, double*, bool*, uint32_t*, int32_t*, size_t*);
template bool finite_stats_nonzeros<double>(const double*, size_t, double*, double*, bool*, uint32_t*, int64_t*,
                                            size_t*);
template bool finite_stats_nonzeros<Bf16>(const Bf16*, size_t, double*, double*, bool*, uint32_t*, int16_t*, size_t*);
template bool finite_stats_nonzeros<F16>(const F16*, size_t, double*, double*, bool*, uint32_t*, int16_t*, size_t*);

template <class T>
bool finite_range(const T* x, size_t n, double* lo, double* hi) {
  return finite_stats(x, n, lo, hi, nullptr);
}
template bool finite_range<float>(const float*, size_t, double*, double*);
template bool finite_range<double>(const double*, size_t, double*, double*);
template bool finite_range<Bf16>(const Bf16*, size_t, double*, double*);
template bool finite_range<F16>(const F16*, size_t, double*, double*);

template <class T>
double finite_max_abs(const T* x, size_t n) {
  double lo = 0, hi = 0;
  if (!finite_range(x, n, &lo, &hi)) return 0;
  return std::max(std::fabs(lo), std::fabs(hi));
}

#define NCCLZ_INSTANTIATE_QUANTIZER(T, Code)                                                                     \
  template size_t quantize<T, Code>(const T*, size_t, const QuantGrid&, int64_t, Code*, std::vector<uint64_t>*); \
  template void dequantize<T, Code>(const Code*, size_t, const QuantGrid&, T*);

NCCLZ_INSTANTIATE_QUANTIZER(float, int32_t)
NCCLZ_INSTANTIATE_QUANTIZER(float, int64_t)
NCCLZ_INSTANTIATE_QUANTIZER(double, int32_t)
NCCLZ_INSTANTIATE_QUANTIZER(double, int64_t)
NCCLZ_INSTANTIATE_QUANTIZER(Bf16, int32_t)
NCCLZ_INSTANTIATE_QUANTIZER(Bf16, int64_t)
NCCLZ_INSTANTIATE_QUANTIZER(F16, int32_t)
NCCLZ_INSTANTIATE_QUANTIZER(F16, int64_t)
#undef NCCLZ_INSTANTIATE_QUANTIZER

template double finite_max_abs<float>(const float*, size_t);
template double finite_max_abs<double>(const double*, size_t);
template double finite_max_abs<Bf16>(const Bf16*, size_t);
template double finite_max_abs<F16>(const F16*, size_t);

}  // namespace ncclz::codec
