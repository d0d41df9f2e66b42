// Predictors: straight per-row loops for the Lorenzo predictors (AVX2 and
// baseline clones on GCC/x86-64), the generic per-element form (predict_at)
// otherwise. Definitions: predictor.hpp and docs/FORMAT.md, "Predictors".
#include "codec/predictor.hpp"

#include <algorithm>
#include <cstring>

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
void reconstruct(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q) {
  using U = UCode<Code>;
  switch (p) {
    case Predictor::None:
      if (q != r)
        for (size_t i = 0; i < n; ++i) q[i] = r[i];
      return;
    case Predictor::Delta1: {
      U acc = 0;
      for (size_t i = 0; i < n; ++i) {
        acc += U(r[i]);
        q[i] = Code(acc);
      }
      return;
    }
    case Predictor::Delta2: {
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

template void predict<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void predict<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);
template void reconstruct<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void reconstruct<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);

}  // namespace ncclz::codec
