// Predictors: straight per-row loops for the Lorenzo predictors (AVX2 and
// baseline clones on GCC/x86-64), the generic per-element form (predict_at)
// otherwise. Definitions: predictor.hpp and docs/FORMAT.md, "Predictors".
#include "codec/predictor.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codec/delta_avx2.hpp"
#endif

namespace ncclz::codec {
namespace {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
// AVX2 and baseline clones of the row loops, chosen at load time.
#define NCCLZ_PRED_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define NCCLZ_PRED_MULTIVERSION
#endif

// Row kernels on unsigned codes (wrapping arithmetic). `a` is the current row
// (m elements), `u` the row above (a - W), `b` the same row one plane back
// (a - P), `bu` the row above that (a - P - W); rows are at least m apart, so
// the pointers never overlap within a row. j = 0 has no left neighbour.
template <class U>
inline void row_delta(const U* __restrict a, size_t m, U* __restrict d) {  // first row of the slice
  d[0] = a[0];
  for (size_t j = 1; j < m; ++j) d[j] = U(a[j] - a[j - 1]);
}
template <class U>
inline void row_l2(const U* __restrict a, const U* __restrict u, size_t m, U* __restrict d) {
  d[0] = U(a[0] - u[0]);
  for (size_t j = 1; j < m; ++j) d[j] = U(a[j] - a[j - 1] - u[j] + u[j - 1]);
}
template <class U>
inline void row_l3(const U* __restrict a, const U* __restrict u, const U* __restrict b, const U* __restrict bu,
                   size_t m, U* __restrict d) {
  d[0] = U(a[0] - u[0] - b[0] + bu[0]);
  for (size_t j = 1; j < m; ++j) d[j] = U(a[j] - a[j - 1] - u[j] + u[j - 1] - b[j] + b[j - 1] + bu[j] - bu[j - 1]);
}

// Lorenzo2D residuals of n codes (rows of W); r does not alias q.
template <class U>
NCCLZ_PRED_MULTIVERSION void lorenzo2d_predict(const U* __restrict q, size_t n, size_t W, U* __restrict r) {
  if (!n) return;
  row_delta(q, std::min(W, n), r);
  for (size_t o = W; o < n; o += W) row_l2(q + o, q + o - W, std::min(W, n - o), r + o);
}

// Lorenzo3D residuals (rows of W, planes of P, P a multiple of W); r does not alias q.
template <class U>
NCCLZ_PRED_MULTIVERSION void lorenzo3d_predict(const U* __restrict q, size_t n, size_t W, size_t P, U* __restrict r) {
  if (!n) return;
  row_delta(q, std::min(W, n), r);
  for (size_t o = W; o < std::min(P, n); o += W) row_l2(q + o, q + o - W, std::min(W, n - o), r + o);
  for (size_t po = P; po < n; po += P) {
    // First row of a plane: neighbours i-1, i-P, i-P-1 (a 2D Lorenzo against the plane behind).
    row_l2(q + po, q + po - P, std::min(W, n - po), r + po);
    for (size_t o = po + W; o < std::min(po + P, n); o += W)
      row_l3(q + o, q + o - W, q + o - P, q + o - P - W, std::min(W, n - o), r + o);
  }
}

// Reconstruction, in place (q holds the residuals on entry). Each row first
// gets t[j] = r[j] + (the prediction's terms from earlier rows), vectorizable,
// then the left-neighbour recurrence q[j] = t[j] + q[j-1] - (its upper terms,
// already in t): a running sum along the row.
template <class U>
inline void prefix_row(U* d, size_t m) {
  U acc = d[0];
  for (size_t j = 1; j < m; ++j) {
    acc = U(acc + d[j]);
    d[j] = acc;
  }
}
template <class U>
inline void unrow_l2(U* __restrict d, const U* __restrict u, size_t m) {
  d[0] = U(d[0] + u[0]);
  for (size_t j = 1; j < m; ++j) d[j] = U(d[j] + u[j] - u[j - 1]);
  prefix_row(d, m);
}
template <class U>
inline void unrow_l3(U* __restrict d, const U* __restrict u, const U* __restrict b, const U* __restrict bu, size_t m) {
  d[0] = U(d[0] + u[0] + b[0] - bu[0]);
  for (size_t j = 1; j < m; ++j) d[j] = U(d[j] + u[j] - u[j - 1] + b[j] - b[j - 1] - bu[j] + bu[j - 1]);
  prefix_row(d, m);
}

template <class U>
NCCLZ_PRED_MULTIVERSION void lorenzo2d_reconstruct(U* q, size_t n, size_t W) {
  if (!n) return;
  prefix_row(q, std::min(W, n));
  for (size_t o = W; o < n; o += W) unrow_l2(q + o, q + o - W, std::min(W, n - o));
}

template <class U>
NCCLZ_PRED_MULTIVERSION void lorenzo3d_reconstruct(U* q, size_t n, size_t W, size_t P) {
  if (!n) return;
  prefix_row(q, std::min(W, n));
  for (size_t o = W; o < std::min(P, n); o += W) unrow_l2(q + o, q + o - W, std::min(W, n - o));
  for (size_t po = P; po < n; po += P) {
    unrow_l2(q + po, q + po - P, std::min(W, n - po));
    for (size_t o = po + W; o < std::min(po + P, n); o += W)
      unrow_l3(q + o, q + o - W, q + o - P, q + o - P - W, std::min(W, n - o));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define NCCLZ_PRED_X86 1
#define NCCLZ_PRED_AVX2 __attribute__((target("avx2")))
#define NCCLZ_PRED_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

// Inclusive running sum of the 8 lanes (delta_avx2.hpp).
NCCLZ_PRED_AVX2_INLINE __m256i scan8(__m256i v) { return delta_scan8(v); }

NCCLZ_PRED_AVX2_INLINE __m256i ld(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// One row of a uint32 reconstruction (the int32 kernels of unrow_l2 / unrow_l3
// / prefix_row, same results): K = 0 no rows above, 1 the row u, 3 the rows
// u, b and bu. t[j] in vectors of 8, then their running sum plus the carry.
// The carry advances by the block's total (a broadcast of the block's own
// running sum, off the loop-carried chain): one add per block on the chain
// instead of add + cross-lane permute.
template <int K>
NCCLZ_PRED_AVX2_INLINE void unrow_avx2(uint32_t* d, const uint32_t* u, const uint32_t* b, const uint32_t* bu,
                                       size_t m) {
  uint32_t acc = d[0];
  if (K >= 1) acc += u[0];
  if (K == 3) acc += b[0] - bu[0];
  d[0] = acc;
  __m256i carry = _mm256_set1_epi32(int(acc));
  const __m256i last = _mm256_set1_epi32(7);
  size_t j = 1;
  for (; j + 8 <= m; j += 8) {
    __m256i t = ld(d + j);
    if (K >= 1) t = _mm256_add_epi32(t, _mm256_sub_epi32(ld(u + j), ld(u + j - 1)));
    if (K == 3) {
      t = _mm256_add_epi32(t, _mm256_sub_epi32(ld(b + j), ld(b + j - 1)));
      t = _mm256_sub_epi32(t, _mm256_sub_epi32(ld(bu + j), ld(bu + j - 1)));
    }
    const __m256i s = scan8(t);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j), _mm256_add_epi32(s, carry));
    carry = _mm256_add_epi32(carry, _mm256_permutevar8x32_epi32(s, last));
  }
  if (j > 1) acc = d[j - 1];
  for (; j < m; ++j) {
    uint32_t t = d[j];
    if (K >= 1) t += u[j] - u[j - 1];
    if (K == 3) t += b[j] - b[j - 1] - bu[j] + bu[j - 1];
    acc += t;
    d[j] = acc;
  }
}

// lorenzo2d_reconstruct (P = 0) and lorenzo3d_reconstruct for uint32 codes.
NCCLZ_PRED_AVX2 void lorenzo_reconstruct_avx2(uint32_t* q, size_t n, size_t W, size_t P) {
  if (!n) return;
  const size_t first = P ? std::min(P, n) : n;  // the first plane (2D: everything)
  unrow_avx2<0>(q, nullptr, nullptr, nullptr, std::min(W, n));
  for (size_t o = W; o < first; o += W) unrow_avx2<1>(q + o, q + o - W, nullptr, nullptr, std::min(W, n - o));
  if (!P) return;
  for (size_t po = P; po < n; po += P) {
    unrow_avx2<1>(q + po, q + po - P, nullptr, nullptr, std::min(W, n - po));
    for (size_t o = po + W; o < std::min(po + P, n); o += W)
      unrow_avx2<3>(q + o, q + o - W, q + o - P, q + o - P - W, std::min(W, n - o));
  }
}

// Delta1 (order 1) and Delta2 (order 2) reconstruction of uint32 codes in
// place: one or two running sums (Delta2: e[i] = q[i] - q[i-1] is the running
// sum of r[1..i], q the running sum of e after q[0]). Each carry advances by
// its block's total (off the loop-carried chain, as in unrow_avx2).
template <int Order>
NCCLZ_PRED_AVX2 void delta_reconstruct_avx2(uint32_t* q, size_t n) {
  if (n < 2) return;  // q[0] = r[0]
  const __m256i last = _mm256_set1_epi32(7);
  __m256i ce = _mm256_setzero_si256();        // Delta2: e[i-1]
  __m256i cq = _mm256_set1_epi32(int(q[0]));  // q[i-1]
  size_t i = 1;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i));
    if (Order == 2) {
      const __m256i s = scan8(v);
      v = _mm256_add_epi32(s, ce);
      ce = _mm256_add_epi32(ce, _mm256_permutevar8x32_epi32(s, last));
    }
    const __m256i s = scan8(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_add_epi32(s, cq));
    cq = _mm256_add_epi32(cq, _mm256_permutevar8x32_epi32(s, last));
  }
  uint32_t e = uint32_t(_mm256_cvtsi256_si32(ce)), a = uint32_t(_mm256_cvtsi256_si32(cq));
  for (; i < n; ++i) {
    uint32_t d = q[i];
    if (Order == 2) d = e = e + d;
    q[i] = a = a + d;
  }
}

bool pred_cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#else
#define NCCLZ_PRED_X86 0
#endif

// The row kernels need W >= 1 and P a multiple of W (what read_header and the
// selector guarantee); anything else takes the generic per-element form.
bool rows_ok(Predictor p, uint32_t W, uint32_t P) {
  if (p == Predictor::Lorenzo2D) return W >= 1;
  return W >= 1 && P >= W && P % W == 0;
}

}  // namespace

template <class Code>
void predict(const Code* q, size_t n, Predictor p, uint32_t W, uint32_t P, Code* r) {
  using U = UCode<Code>;
  switch (p) {
    case Predictor::None:
      for (size_t i = 0; i < n; ++i) r[i] = q[i];
      return;
    case Predictor::Delta1:
      if (n) r[0] = q[0];
      for (size_t i = 1; i < n; ++i) r[i] = Code(U(q[i]) - U(q[i - 1]));
      return;
    case Predictor::Delta2:
      predict_range(q, 0, n < 2 ? n : 2, p, W, P, r);
      for (size_t i = 2; i < n; ++i) r[i] = Code(U(q[i]) - U(2) * U(q[i - 1]) + U(q[i - 2]));
      return;
    case Predictor::Lorenzo2D:
      if (!rows_ok(p, W, P)) break;
      lorenzo2d_predict(reinterpret_cast<const U*>(q), n, W, reinterpret_cast<U*>(r));
      return;
    case Predictor::Lorenzo3D:
      if (!rows_ok(p, W, P)) break;
      lorenzo3d_predict(reinterpret_cast<const U*>(q), n, W, P, reinterpret_cast<U*>(r));
      return;
    default: break;
  }
  predict_range(q, 0, n, p, W, P, r);
}

template <class Code>
void reconstruct_impl(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q, bool simd) {
  using U = UCode<Code>;
  switch (p) {
    case Predictor::None:
      if (q != r)
        for (size_t i = 0; i < n; ++i) q[i] = r[i];
      return;
    case Predictor::Delta1: {
#if NCCLZ_PRED_X86
      if constexpr (sizeof(Code) == 4) {
        if (simd && pred_cpu_has_avx2()) {
          if (q != r && n) std::memcpy(q, r, n * sizeof(Code));
          delta_reconstruct_avx2<1>(reinterpret_cast<uint32_t*>(q), n);
          return;
        }
      }
#endif
      U acc = 0;
      for (size_t i = 0; i < n; ++i) {
        acc += U(r[i]);
        q[i] = Code(acc);
      }
      return;
    }
    case Predictor::Delta2: {
#if NCCLZ_PRED_X86
      if constexpr (sizeof(Code) == 4) {
        if (simd && pred_cpu_has_avx2()) {
          if (q != r && n) std::memcpy(q, r, n * sizeof(Code));
          delta_reconstruct_avx2<2>(reinterpret_cast<uint32_t*>(q), n);
          return;
        }
      }
#endif
      U a = 0, b = 0;  // q[i-1], q[i-2]
      size_t i = 0;
      for (; i < n && i < 2; ++i) {  // r[0] = q[0], r[1] = q[1] - q[0]
        const U v = U(U(r[i]) + a);
        q[i] = Code(v);
        b = a;
        a = v;
      }
      for (; i < n; ++i) {
        const U v = U(U(r[i]) + U(2) * a - b);
        q[i] = Code(v);
        b = a;
        a = v;
      }
      return;
    }
    case Predictor::Lorenzo2D:
    case Predictor::Lorenzo3D:
      if (!rows_ok(p, W, P)) break;
      if (q != r && n) std::memcpy(q, r, n * sizeof(Code));
#if NCCLZ_PRED_X86
      if constexpr (sizeof(Code) == 4) {
        if (simd && pred_cpu_has_avx2()) {
          lorenzo_reconstruct_avx2(reinterpret_cast<uint32_t*>(q), n, W, p == Predictor::Lorenzo3D ? P : 0);
          return;
        }
      }
#endif
      (void)simd;
      if (p == Predictor::Lorenzo2D)
        lorenzo2d_reconstruct(reinterpret_cast<U*>(q), n, W);
      else
        lorenzo3d_reconstruct(reinterpret_cast<U*>(q), n, W, P);
      return;
    default: break;
  }
  // Generic form: q[i] depends only on q[j < i], which are final when element i is reached.
  for (size_t i = 0; i < n; ++i) q[i] = Code(U(r[i]) + predict_at(q, i, p, W, P));
}

template <class Code>
void reconstruct(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q) {
  reconstruct_impl(r, n, p, W, P, q, true);
}

template <class Code>
void reconstruct_portable(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q) {
  reconstruct_impl(r, n, p, W, P, q, false);
}

template void predict<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void predict<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);
template void reconstruct<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void reconstruct<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);
template void reconstruct_portable<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void reconstruct_portable<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);

}  // namespace ncclz::codec
