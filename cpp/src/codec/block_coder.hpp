// Block coder: fixed-length blocks of 32 integer residuals (cuSZp's family),
// the CPU drivers (scalar, AVX2) over whole payloads. The payload's layout
// and the per-block functions, shared with the device coder, are
// block_frame.hpp; the format with its decoder checks is docs/FORMAT.md,
// section "Block".
//
// Every valid payload has exactly one decoding and every residual array
// exactly one encoding: the decoder rejects (Status::Corrupt) a total length
// other than the computed one, w above the type's bits, an escape byte
// below 15 (widths < 15 must use the nibble), a nonzero unused nibble, a top
// plane of zero (w not minimal), a sign bit on a zero magnitude, nonzero
// padding lanes, and (w = bits only) a magnitude with the top bit set that is
// not exactly 2^(bits-1) with its sign bit set (the only such value is INT_MIN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "codec/block_frame.hpp"
#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

constexpr size_t kNoFit = ~size_t(0);

/// Exact payload size for r[0..n).
template <class Code>
size_t block_encoded_bytes(const Code* r, size_t n);

/// Encodes r[0..n) into dst; returns payload bytes, or kNoFit if more than cap.
/// Writes only inside dst[0..cap), but may leave scratch bytes in
/// dst[len..cap) (the SIMD path stores whole groups of 8 planes).
template <class Code>
size_t block_encode(const Code* r, size_t n, uint8_t* dst, size_t cap);

/// Decodes n residuals from the len-byte payload at src. Never reads past
/// src+len or writes past out+n; any inconsistency gives Status::Corrupt.
template <class Code>
Status block_decode(const uint8_t* src, size_t len, size_t n, Code* out);

/// The payload block_encode writes for the residuals of predictor p (None,
/// Delta1 or Delta2; predictor.hpp) of the int32 codes q[0..n), without the
/// residuals in memory (the AVX2 path computes them block by block). Same
/// bytes and kNoFit rule as predict() then block_encode(); kNoFit for any
/// other predictor.
size_t block_encode_predicted(const int32_t* q, size_t n, Predictor p, uint8_t* dst, size_t cap);

/// Decodes a payload of n residuals of predictor p (None, Delta1 or Delta2),
/// turns them into codes and adds those to local: to[i] = local[i] + q[i] in
/// wrapping arithmetic (the reduction of integer codes; to may be local). The
/// statuses of block_decode (Unsupported for any other predictor); on an
/// error `to` may hold part of the result.
/// One pass over the data (AVX2): no decoded values in memory.
Status block_decode_add(const uint8_t* src, size_t len, size_t n, Predictor p, const int32_t* local, int32_t* to);

// ---------------------------------------------------------------------------
// Implementation choice (tests and benchmarks). block_encode / block_decode /
// block_encoded_bytes use the best available one; all give identical bytes.

enum class BlockImpl : uint8_t {
  Scalar = 0,  ///< the per-block functions of block_frame.hpp, any platform
  Avx2 = 1,    ///< x86-64 with AVX2 (runtime check)
};

/// Whether this build and this CPU can run `impl`.
bool block_impl_available(BlockImpl impl);

/// The implementation the unsuffixed functions use.
BlockImpl block_best_impl();

template <class Code>
size_t block_encoded_bytes_with(BlockImpl impl, const Code* r, size_t n);
template <class Code>
size_t block_encode_with(BlockImpl impl, const Code* r, size_t n, uint8_t* dst, size_t cap);
template <class Code>
Status block_decode_with(BlockImpl impl, const uint8_t* src, size_t len, size_t n, Code* out);

}  // namespace ncclz::codec
