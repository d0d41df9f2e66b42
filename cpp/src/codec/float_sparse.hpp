// Lossless Sparse slices of floats (float32, float64, float16, bfloat16): the
// Sparse coder (sparse_coder.hpp) over the values' bit patterns, for slices
// that are mostly zeros. Layout: docs/FORMAT.md, "Sparse".
//
// The payload starts with a form byte:
//   0  the bit patterns themselves, read as signed integers of the type's
//      width (16-bit ones sign-extended to 32 bits for the coder): +0.0 is the
//      only zero, -0.0 a nonzero like any other value;
//   1  a sign plane of ceil(n / 8) bytes (bit i & 7 of byte i / 8 is element
//      i's sign, LSB first), then the Sparse payload of the magnitudes (the
//      patterns with the sign bit cleared): +0.0 and -0.0 are both zeros, for
//      data where zeros carry random signs (a masked gradient g * mask).
// Either way the decoder gives every bit pattern back.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Whether t is one of the float types these slices carry.
bool float_sparse_type(ElemType t);

struct FloatSparseEstimate {
  size_t bytes = 0;       ///< estimated payload bytes of the better form (kNoFit: none sampled)
  int form = 0;           ///< that form
  double zero_share = 0;  ///< sampled share of the values that are zeros in that form
};

/// The two forms' sizes estimated from every `every`-th block of 32 values.
FloatSparseEstimate float_sparse_estimate(const void* x, ElemType t, size_t n, size_t every);

/// Encodes n values in the given form; the payload's bytes, or kNoFit when it
/// would exceed cap.
size_t float_sparse_encode(const void* x, ElemType t, size_t n, int form, uint8_t* dst, size_t cap);

/// Decodes a payload of len bytes into n values at dst; checks every length,
/// position and value width (Status::Corrupt).
Status float_sparse_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* dst);

}  // namespace ncclz::codec
