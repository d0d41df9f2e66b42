// Multilevel interpolation ("interp") layout of a lossy blob: predictive
// quantization on a fine grid. Layout and arithmetic: docs/FORMAT.md,
// "Interp layout".
//
// The codes q stand for q * d with d = step / k (step = 2 * eb of the blob,
// k = 2^log2k). Elements are visited coarse to fine, level by level, and along
// each dimension within a level (the order below); each is predicted from
// codes already visited by integer cubic (or, near the edges, quadratic,
// linear or copy) interpolation, and the stream holds the residual q - pred in
// visit order. The encoder picks, for each element, a code within the bound of
// x that is close to the prediction (see interp_quantize), so that smooth data
// give residuals that are mostly zero; the decoder only inverts the predictor.
//
// Visit order for an array of dims n_0..n_{D-1} (C order, size-1 dims
// removed): element 0 first (predicted by 0); then for h = 2^(L-1), ..., 2, 1
// (L the smallest integer with 2^L >= max n_e), for each dimension e0 = 0..D-1
// with h < n_e0: every element whose coordinate along e0 is an odd multiple of
// h, whose coordinates along dims before e0 are multiples of h and along dims
// after e0 multiples of 2h, in C order of their coordinates. Its prediction
// along e0 from a = q[t-h], b = q[t+h], A = q[t-3h], D = q[t+3h] (t its
// coordinate, n = n_e0), all arithmetic on int64 wrapping modulo 2^64, ">>" an
// arithmetic shift (floor):
//   t+h >= n                     : a
//   t >= 3h and t+3h < n         : (-A + 9a + 9b - D + 8) >> 4
//   t >= 3h, t+3h >= n           : (-A + 6a + 3b + 4) >> 3
//   t < 3h,  t+3h < n            : (3a + 6b - D + 4) >> 3
//   otherwise                    : (a + b + 1) >> 1
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "codec/quantizer.hpp"

namespace ncclz::codec {

/// An uninitialised array of n values of a trivial type. Large ones are
/// 2 MiB-aligned and advised to use transparent huge pages, which makes
/// touching them for the first time several times cheaper (page faults).
template <class C>
class BigArray {
 public:
  explicit BigArray(size_t n) : n_(n) { p_ = static_cast<C*>(allocate(n * sizeof(C))); }
  ~BigArray() { std::free(p_); }
  BigArray(const BigArray&) = delete;
  BigArray& operator=(const BigArray&) = delete;
  C* data() { return p_; }
  const C* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  static void* allocate(size_t bytes);
  C* p_ = nullptr;
  size_t n_ = 0;
};

/// Largest log2 of the grid factor a blob may carry.
constexpr int kInterpMaxLog2K = 6;

/// Encoder: codes for x[0..n) (n = product of dims) on the grid d =
/// grid.step / 2^log2k, written as residuals in visit order to resid[0..n).
/// `eb` is the bound to keep after rounding to T; |q| <= limit, which must
/// keep 2.25 * limit + 1 within C (2^29 for int32). Elements the bound cannot
/// be met for (non-finite, over the limit) are appended to *outliers (element
/// indices, in visit order). Returns the number of outliers.
template <class T, class C>
size_t interp_quantize(const T* x, const std::vector<uint64_t>& dims, const QuantGrid& grid, int log2k, double eb,
                       int64_t limit, C* resid, std::vector<uint64_t>* outliers);

/// Decoder: codes q[0..n) in element order from residuals resid[0..n) in
/// visit order (any values: arithmetic wraps, the result is truncated to C,
/// nothing is read or written outside the two arrays).
template <class C>
void interp_reconstruct(const C* resid, const std::vector<uint64_t>& dims, C* q);

/// How the residual stream is cut into slices of at most L elements: the
/// passes in visit order (element 0 alone, then each (h, e0) pass) are laid
/// end to end; a new slice starts at a pass boundary when the current one
/// holds at least max(1, L >> 6) residuals, and whenever it is full (L). So
/// levels with different statistics get their own slices (and entropy
/// tables), while tiny coarse passes share one. Returns the number of slices
/// and appends their lengths to *counts (if given), but never more than
/// max_slices of them (complete only when the result is <= max_slices, which
/// the caller checks), so a corrupt shape costs no memory.
uint64_t interp_slices(const std::vector<uint64_t>& dims, uint32_t L, uint64_t max_slices,
                       std::vector<uint32_t>* counts);

}  // namespace ncclz::codec
