// The Delta predictors with AVX2, 8 int32 codes at a time, for the coders
// that form residuals as they encode (block_encode_predicted,
// rans_encode_predicted: delta_regs) and turn residuals into codes as they
// decode (block_decode_add, rans_decode_add): running sums with a carry,
// wrapping as predictor.hpp's arithmetic does. Delta1: q = running sum of r. Delta2: e = running sum of
// r, q = running sum of e, where the slice's first register enters with lane
// 1 replaced by r[1] - r[0] (first_delta_regs) so that e[1] = r[1], as
// predictor.hpp's r[1] = q[1] - q[0] asks. Include only where <immintrin.h>
// is available (x86-64); the functions carry their own target attribute.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ncclz::codec {

#define NCCLZ_DELTA_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

/// Residuals of the 8 codes at q (Order 1: q[i] - q[i-1]; 2: q[i] - 2 q[i-1] +
/// q[i-2]), predictor.hpp's away from a slice's start; reads q[-Order..8).
template <int Order>
NCCLZ_DELTA_AVX2_INLINE __m256i delta_regs(const int32_t* q) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q - 1));
  if constexpr (Order == 1) {
    return _mm256_sub_epi32(a, b);
  } else {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q - 2));
    return _mm256_sub_epi32(_mm256_sub_epi32(a, b), _mm256_sub_epi32(b, c));
  }
}

/// Running sums of 8 lanes (lane i: v[0] + ... + v[i]).
NCCLZ_DELTA_AVX2_INLINE __m256i delta_scan8(__m256i v) {
  v = _mm256_add_epi32(v, _mm256_slli_si256(v, 4));
  v = _mm256_add_epi32(v, _mm256_slli_si256(v, 8));                       // within each 128-bit half
  const __m256i top = _mm256_shuffle_epi32(v, 0xFF);                      // each half's last sum
  return _mm256_add_epi32(v, _mm256_permute2x128_si256(top, top, 0x08));  // the low half's into the high
}

/// Codes from the next 8 residuals, in order, for Order 0 (None), 1 or 2. ce:
/// Delta2's e[i-1] and cq: the last code, each broadcast (both 0 at the start).
template <int Order>
NCCLZ_DELTA_AVX2_INLINE __m256i delta_unpredict8(__m256i v, __m256i& ce, __m256i& cq) {
  if constexpr (Order == 0) {
    return v;
  } else {
    const __m256i last = _mm256_set1_epi32(7);
    if constexpr (Order == 2) {
      v = _mm256_add_epi32(delta_scan8(v), ce);
      ce = _mm256_permutevar8x32_epi32(v, last);
    }
    const __m256i s = _mm256_add_epi32(delta_scan8(v), cq);
    cq = _mm256_permutevar8x32_epi32(s, last);
    return s;
  }
}

/// The slice's first 8 residuals as delta_unpredict8 takes them: for Delta2,
/// lane 1 becomes r[1] - r[0].
template <int Order>
NCCLZ_DELTA_AVX2_INLINE __m256i first_delta_regs(__m256i v0) {
  if constexpr (Order != 2) {
    return v0;
  } else {
    const __m256i lane1 = _mm256_setr_epi32(0, -1, 0, 0, 0, 0, 0, 0);
    return _mm256_sub_epi32(v0, _mm256_and_si256(_mm256_slli_si256(v0, 4), lane1));
  }
}

}  // namespace ncclz::codec
