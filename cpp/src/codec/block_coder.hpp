// Block coder: fixed-length blocks of 32 integer residuals (cuSZp's family).
// Payload layout: docs/FORMAT.md, section "Block".
// OWNER: block-coder helper. Signatures below are the contract with slice.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

constexpr size_t kNoFit = ~size_t(0);
constexpr int kBlockLen = 32;

/// Payload bytes one block of m <= 32 residuals costs (host and device).
template <class Code>
NCCLZ_HD size_t block_cost_bytes(const Code* r, int m);

/// Exact payload size for r[0..n).
template <class Code>
size_t block_encoded_bytes(const Code* r, size_t n);

/// Encodes r[0..n) into dst; returns payload bytes, or kNoFit if more than cap.
template <class Code>
size_t block_encode(const Code* r, size_t n, uint8_t* dst, size_t cap);

/// Decodes n residuals from the len-byte payload at src. Never reads past
/// src+len or writes past out+n; any inconsistency gives Status::Corrupt.
template <class Code>
Status block_decode(const uint8_t* src, size_t len, size_t n, Code* out);

}  // namespace ncclz::codec
