// Lossless float coder (F32, F16, BF16): exponents rANS-coded, sign and mantissa raw.
// Payload layout: docs/FORMAT.md, section "FloatExp".
// OWNER: entropy-coder helper. Signatures below are the contract with slice.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Estimated payload bytes (from every sample_every-th element).
size_t floatexp_estimate_bytes(const void* x, ElemType t, size_t n, uint32_t sample_every);

/// Encodes n floats of type t; returns payload bytes, or kNoFit if more than cap.
size_t floatexp_encode(const void* x, ElemType t, size_t n, uint8_t* dst, size_t cap);

/// Decodes n floats of type t, bit-exact; Status::Corrupt on any inconsistency.
Status floatexp_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* out);

}  // namespace ncclz::codec
