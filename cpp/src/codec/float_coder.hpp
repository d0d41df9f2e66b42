// Lossless float coder (F32, F16, BF16): exponents rANS-coded, sign and mantissa raw.
// Payload layout: docs/FORMAT.md, section "FloatExp".
//   type  exponent bits  sign+mantissa plane
//   F32   8  (bits 30..23) 24 bits/value, 3 bytes LE: mantissa in bits 0..22, sign in bit 23
//   BF16  8  (bits 14..7)   8 bits/value, 1 byte:    mantissa in bits 0..6,  sign in bit 7
//   F16   5  (bits 14..10) 11 bits/value, LSB-first bit-packed: mantissa bits 0..9, sign bit 10
//
// Payload: u32 exponent-stream bytes E, then E bytes of byte-rANS payload
// (rans_encode_bytes over the n exponents), then the sign+mantissa plane.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Bytes of the raw sign+mantissa plane for n values of type t (0 if t is not F32/F16/BF16).
size_t floatexp_plane_bytes(ElemType t, size_t n);

/// The split every lossless float codec shares (FloatExp, FloatHuff): the n
/// values' exponent fields into e[0..n) and their sign+mantissa plane
/// (floatexp_plane_bytes(t, n) bytes, the layout above) into `plane`. t: F32, F16 or BF16.
void floatexp_split(const void* x, ElemType t, size_t n, uint8_t* e, uint8_t* plane);

/// The inverse of floatexp_split; false if the F16 plane's padding bits are
/// not zero or an F16 exponent exceeds 31 (out then holds garbage).
bool floatexp_join(const uint8_t* e, const uint8_t* plane, ElemType t, size_t n, void* out);

/// Estimated payload bytes (from every sample_every-th element). kNoFit
/// (block_coder.hpp) if t is not F32, F16 or BF16.
size_t floatexp_estimate_bytes(const void* x, ElemType t, size_t n, uint32_t sample_every);

/// Encodes n floats of type t; returns payload bytes, or kNoFit if more than cap
/// (or if t is not F32, F16 or BF16).
size_t floatexp_encode(const void* x, ElemType t, size_t n, uint8_t* dst, size_t cap);

/// Decodes n floats of type t, bit-exact; Status::Corrupt on any inconsistency
/// (Status::Unsupported if t is not F32, F16 or BF16).
Status floatexp_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* out);

}  // namespace ncclz::codec
