// Predictors for integer codes, applied before the Block and Rans coders.
//
// A predictor turns codes q[0..n) into residuals r[0..n) and back, exactly:
// all arithmetic wraps modulo 2^bits of the code type, so any code sequence
// round-trips even when a residual would overflow. Positions whose neighbours
// lie before the start of the slice use the neighbours that exist (a missing
// neighbour counts as 0), so a slice never depends on data outside itself.
//
//   Delta1     r[i] = q[i] - q[i-1]
//   Delta2     r[i] = q[i] - 2 q[i-1] + q[i-2]
//   Lorenzo2D  r[i] = q[i] - q[i-1] - q[i-W] + q[i-W-1]            (W = row length)
//   Lorenzo3D  r[i] = q[i] - q[i-1] - q[i-W] - q[i-P] + q[i-W-1]
//                     + q[i-P-1] + q[i-P-W] - q[i-P-W-1]           (P = plane size)
//
// For the Lorenzo predictors, "i-1" is a neighbour only when i is not the first
// element of a row (i % W != 0), "i-W" only when i is not in the first row of a
// plane ((i % P) >= W, or i >= W in 2D), and "i-P" only when i >= P. A missing
// neighbour contributes 0. So the first row of a 2D slice is predicted by
// Delta1 along the row, and the first element by 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

template <class Code>
using UCode = std::make_unsigned_t<Code>;

/// Prediction of element i from earlier codes (wrapping arithmetic, as unsigned).
template <class Code>
NCCLZ_HD UCode<Code> predict_at(const Code* q, size_t i, Predictor p, uint32_t W, uint32_t P) {
  using U = UCode<Code>;
  auto at = [&](size_t j) -> U { return U(q[j]); };
  switch (p) {
    case Predictor::None: return 0;
    case Predictor::Delta1: return i >= 1 ? at(i - 1) : U(0);
    case Predictor::Delta2:
      if (i >= 2) return U(U(2) * at(i - 1) - at(i - 2));
      return i == 1 ? at(0) : U(0);
    case Predictor::Lorenzo2D: {
      const bool hx = (i % W) != 0, hy = i >= W;
      U s = 0;
      if (hx) s += at(i - 1);
      if (hy) s += at(i - W);
      if (hx && hy) s -= at(i - W - 1);
      return s;
    }
    case Predictor::Lorenzo3D: {
      const size_t ip = i % P;
      const bool hx = (i % W) != 0, hy = ip >= W, hz = i >= P;
      U s = 0;
      if (hx) s += at(i - 1);
      if (hy) s += at(i - W);
      if (hz) s += at(i - P);
      if (hx && hy) s -= at(i - W - 1);
      if (hx && hz) s -= at(i - P - 1);
      if (hy && hz) s -= at(i - P - W);
      if (hx && hy && hz) s += at(i - P - W - 1);
      return s;
    }
  }
  return 0;
}

/// Whether p is one of the predictors the coders fuse with their own passes
/// (block_encode_predicted, block_decode_add, rans_encode_predicted,
/// rans_decode_add): None, Delta1
/// and Delta2, whose residuals depend on the element before or two before.
NCCLZ_HD constexpr bool is_delta_predictor(Predictor p) {
  return p == Predictor::None || p == Predictor::Delta1 || p == Predictor::Delta2;
}

/// Residuals r[first..first+len) of codes q[0..n) (only earlier codes are read).
template <class Code>
NCCLZ_HD void predict_range(const Code* q, size_t first, size_t len, Predictor p, uint32_t W, uint32_t P, Code* r) {
  using U = UCode<Code>;
  for (size_t k = 0; k < len; ++k) {
    const size_t i = first + k;
    r[k] = Code(U(q[i]) - predict_at(q, i, p, W, P));
  }
}

/// All residuals of q[0..n) into r (r must not alias q).
template <class Code>
void predict(const Code* q, size_t n, Predictor p, uint32_t W, uint32_t P, Code* r);

/// Inverse of predict: codes from residuals, in place (q may equal r).
template <class Code>
void reconstruct(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q);

/// reconstruct() without its AVX2 row kernels (tests compare the two).
template <class Code>
void reconstruct_portable(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q);

}  // namespace ncclz::codec
