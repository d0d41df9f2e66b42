// Sparse coder: integer residuals that are mostly zero, coded as the number of
// nonzeros k, the gaps between them and their values. Payload layout and the
// decoder's checks: docs/FORMAT.md, section "Sparse".
//
//   4 bytes   k, u32: nonzero residuals (0..n); k = 0 ends the payload
//   1 byte    gs: gap shift (0..31)
//   1 byte    vs: value shift (0..bits-1)
//   4 bytes   G, u32: bytes of the gap frame
//   ceil(k * (gs + vs) / 8) bytes   low bits: for each nonzero, the low gs bits
//             of its gap, then the low vs bits of its value, LSB first
//   G bytes   gap frame: a Rans payload (I32) of k residuals whose zigzag is
//             gap >> gs (gap = zeros before the nonzero since the previous one)
//   rest      value frame: a Rans payload (of the slice's type) of k residuals
//             whose zigzag is (zigzag(value) - 1) >> vs
//
// Decoding costs O(k) plus one memset of the output; encoding one vectorized
// scan for nonzeros plus O(k). The shifts move the nearly uniform low bits of
// large gaps and values out of the entropy coder (smaller tables, same size).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/block_coder.hpp"
#include "codec/rans_coder.hpp"
#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Bytes before the low-bit stream when k > 0 (k, gs, vs, G).
constexpr size_t kSparseHeadBytes = 10;

/// Encodes r[0..n) into dst; returns payload bytes, or kNoFit (block_coder.hpp)
/// if more than cap. n = 0 gives an empty payload.
template <class Code>
size_t sparse_encode(const Code* r, size_t n, uint8_t* dst, size_t cap);

/// The same payload from the list of the nonzeros of n residuals: k
/// positions, strictly increasing and below n, and their values, none zero
/// (not checked here: encode_slice_nonzeros checks). sparse_encode is the
/// scan for nonzeros followed by this, so both give the same bytes.
template <class Code>
size_t sparse_encode_nonzeros(const uint32_t* pos, const Code* val, size_t k, size_t n, uint8_t* dst, size_t cap);

/// Decodes n residuals from the len-byte payload at src. Never reads past
/// src+len or writes past out+n; any inconsistency gives Status::Corrupt.
template <class Code>
Status sparse_decode(const uint8_t* src, size_t len, size_t n, Code* out);

/// Like sparse_decode, but adds the decoded residuals into out (out[i] +=
/// r[i], wrapping two's-complement) in O(k): no pass over out. The same
/// checks; on Status::Corrupt out may hold some of the additions.
template <class Code>
Status sparse_decode_add(const uint8_t* src, size_t len, size_t n, Code* out);

/// Like sparse_decode, but lists the nonzeros instead of writing n values:
/// their positions to pos and values to val (room for the payload's k, at
/// most n, each), in increasing position; *k their number (0 on an error).
template <class Code>
Status sparse_decode_nonzeros(const uint8_t* src, size_t len, size_t n, uint32_t* pos, Code* val, size_t* k);

/// The nonzeros of the sum of the payload's n residuals and a list of
/// nonzeros (ka positions apos, strictly increasing and below n, values aval),
/// in one pass over both: the sum's nonzeros to pos and val (room for ka plus
/// the payload's k, at most ka + n), in increasing position, *k their number.
/// Sums wrap (two's complement); positions where they are 0 are left out.
/// The decoder's checks; on an error *k is 0.
template <class Code>
Status sparse_decode_merge(const uint8_t* src, size_t len, size_t n, const uint32_t* apos, const Code* aval, size_t ka,
                           uint32_t* pos, Code* val, size_t* k);

/// A frame's fixed bytes in the estimates (bitmap, lengths, states, a typical table).
constexpr double kSparseFrameFixed = 110.0;
/// The estimated bytes of the gap frame for n positions of which a share p is
/// nonzero (independent positions: n * H(p) bits), with its fixed bytes.
NCCLZ_HD double sparse_gap_bytes(size_t n, double p) {
  // Geometric gaps: n * H(p) bits in all; the gap frame's table and fixed fields.
  const double h = p <= 0.0 || p >= 1.0 ? 0.0 : -(p * ::log2(p) + (1.0 - p) * ::log2(1.0 - p));
  return double(n) * h / 8.0 + kSparseFrameFixed;
}

/// Estimated payload bytes for n residuals of a B-bit type from a sample:
/// hist[kRansAlphabet] is the sampled histogram of Rans symbols
/// (rans_symbol_of; hist[0] counts the zeros), sampled_total the sampled
/// residuals and sampled_extra_bits their Rans extra bits. Models the gaps as
/// geometric (independent positions): n * H(p) bits with p the sampled
/// nonzero fraction, plus the values' Rans estimate and the framing.
/// NCCLZ_HD: the selector's rule on the device too (select_rule.hpp).
NCCLZ_HD size_t sparse_estimate_bytes(const uint32_t* hist, uint64_t sampled_total, uint64_t sampled_extra_bits,
                                      size_t n) {
  if (n == 0) return 0;
  if (sampled_total == 0 || hist[0] > sampled_total) return kNoFit;
  const uint64_t c = sampled_total - hist[0];
  if (c == 0) return 4;
  const double p = double(c) / double(sampled_total);
  const double k = p * double(n);
  const double gap = sparse_gap_bytes(n, p);
  uint32_t vh[kRansAlphabet];
  vh[0] = 0;
  for (int s = 1; s < kRansAlphabet; ++s) vh[s] = hist[s];
  const size_t kk = size_t(k + 0.5);
  const size_t value = rans_estimate_bytes(vh, c, sampled_extra_bits, kk > 1 ? kk : 1);
  return kSparseHeadBytes + size_t(gap) + value;
}

/// The encoder's scan for nonzeros: positions of the nonzero values of
/// r[0..n) into pos and the values into val (room for n each), in increasing
/// order; returns their number. sparse_encode uses the best implementation
/// available; all give the same result. (Exposed for tests and benchmarks.)
enum class SparseScan : uint8_t {
  Scalar = 0,  ///< any platform
  Sse2 = 1,    ///< x86-64: compare and movemask, 32 (int32) or 16 (int64) values a step
  Avx2 = 2,    ///< x86-64 with AVX2 (runtime check): 64 or 32 values a step, zero steps skipped
  Avx512 = 3,  ///< x86-64 with AVX-512F (runtime check): as Avx2, nonzeros packed by compress
};
bool sparse_scan_available(SparseScan impl);
template <class Code>
size_t sparse_find_nonzeros(SparseScan impl, const Code* r, size_t n, uint32_t* pos, Code* val);
/// The scan with the best implementation available, also for 16-bit values
/// (int16_t: a portable loop that skips all-zero runs of 64). Room for n
/// entries in pos and val, as above.
template <class Code>
size_t sparse_find_nonzeros(const Code* r, size_t n, uint32_t* pos, Code* val);

}  // namespace ncclz::codec
