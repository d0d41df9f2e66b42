// rANS entropy coder over integer residuals, and over bytes (float exponents).
// Payload layout: docs/FORMAT.md, section "Rans".
// OWNER: entropy-coder helper. Signatures below are the contract with slice.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Symbol alphabet used for integer residuals (bounded, every int64 maps).
constexpr int kRansAlphabet = 256;

/// Maps a residual to its symbol and the number of raw extra bits it carries.
template <class Code>
NCCLZ_HD void rans_symbol_of(Code r, uint32_t* sym, uint32_t* extra_bits);

/// Estimated payload bytes for n residuals whose sampled symbol histogram is
/// hist[kRansAlphabet] (sampled_total symbols, sampled_extra_bits extra bits).
size_t rans_estimate_bytes(const uint32_t* hist, uint64_t sampled_total, uint64_t sampled_extra_bits, size_t n);

/// Encodes r[0..n); returns payload bytes, or kNoFit (block_coder.hpp) if more than cap.
template <class Code>
size_t rans_encode(const Code* r, size_t n, uint8_t* dst, size_t cap);

/// Decodes n residuals; never reads or writes out of bounds; Status::Corrupt on inconsistency.
template <class Code>
Status rans_decode(const uint8_t* src, size_t len, size_t n, Code* out);

/// Byte-alphabet rANS (used by the float coder for exponent streams).
size_t rans_encode_bytes(const uint8_t* sym, size_t n, uint8_t* dst, size_t cap);
Status rans_decode_bytes(const uint8_t* src, size_t len, size_t n, uint8_t* out);

}  // namespace ncclz::codec
