// rANS entropy coder over integer residuals, and over bytes (float exponents).
// Payload layout: docs/FORMAT.md, section "Rans".
// Symbol mapping of a residual r of a B-bit code type (B = 32 or 64):
//
//   z = zigzag(r) = (r << 1) ^ (r >> (B-1))          as a B-bit unsigned
//   z < 128   ->  symbol z, no extra bits             (the "direct" range)
//   z >= 128  ->  L = bit length of z (8 <= L <= B)
//                 symbol = 128 + 2*(L-8) + bit (L-2) of z   (the bit below the top one)
//                 extra  = the low L-2 bits of z, written raw (L-2 bits)
//
// So int32 residuals use symbols 0..177, int64 residuals 0..241, and every
// value (z up to 2^64-1) is representable. Inverse:
//   z = ((2 | (j & 1)) << (L-2)) | extra   with j = symbol-128, L = 8 + j/2.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Symbol alphabet used for integer residuals (bounded, every int64 maps).
constexpr int kRansAlphabet = 256;

/// Residuals whose zigzag value is below this are coded as the symbol itself.
constexpr uint32_t kRansDirect = 128;

/// Frequencies are normalized to a total of 2^kRansScaleBits.
constexpr int kRansScaleBits = 12;

/// Number of interleaved rANS states.
constexpr int kRansLanes = 8;

/// Largest symbol an integer residual of a B-bit code type maps to.
NCCLZ_HD constexpr uint32_t rans_max_symbol(int bits) { return kRansDirect + 2 * uint32_t(bits - 8) + 1; }

/// Bit length of a nonzero 64-bit value (host and device).
NCCLZ_HD int rans_bit_length(uint64_t z) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll((long long)z);
#else
  return 64 - __builtin_clzll(z);
#endif
}

/// Zigzag of a residual: sign into the lowest bit, as an unsigned of the same width.
template <class Code>
NCCLZ_HD std::make_unsigned_t<Code> rans_zigzag(Code r) {
  using U = std::make_unsigned_t<Code>;
  constexpr int B = int(sizeof(Code) * 8);
  const U u = U(r);
  return U(U(u << 1) ^ U(U(0) - (u >> (B - 1))));
}

/// Inverse of rans_zigzag.
template <class Code>
NCCLZ_HD Code rans_unzigzag(std::make_unsigned_t<Code> z) {
  using U = std::make_unsigned_t<Code>;
  return Code(U((z >> 1) ^ U(U(0) - (z & 1))));
}

/// Maps a zigzag value to its symbol, the number of raw extra bits, and their value.
NCCLZ_HD void rans_map_zigzag(uint64_t z, uint32_t* sym, uint32_t* extra_bits, uint64_t* extra_value) {
  if (z < kRansDirect) {
    *sym = uint32_t(z);
    *extra_bits = 0;
    *extra_value = 0;
    return;
  }
  const int L = rans_bit_length(z);
  *sym = kRansDirect + 2 * uint32_t(L - 8) + uint32_t((z >> (L - 2)) & 1);
  *extra_bits = uint32_t(L - 2);
  *extra_value = z & ((uint64_t(1) << (L - 2)) - 1);
}

/// Maps a residual to its symbol and the number of raw extra bits it carries.
template <class Code>
NCCLZ_HD void rans_symbol_of(Code r, uint32_t* sym, uint32_t* extra_bits) {
  uint64_t v;
  rans_map_zigzag(uint64_t(rans_zigzag(r)), sym, extra_bits, &v);
}

/// A frame's table bitmap (one bit per symbol) and its fixed fields (the
/// two lengths and the 8 states): docs/FORMAT.md, "Rans".
constexpr size_t kRansBitmapBytes = kRansAlphabet / 8;
constexpr size_t kRansFixedBytes = 8 + 4 * size_t(kRansLanes);

/// Estimated payload bytes for n residuals whose sampled symbol histogram is
/// hist[kRansAlphabet] (sampled_total symbols, sampled_extra_bits extra bits):
/// the sample's Shannon entropy (the encoder's normalized table codes within
/// a fraction of a percent of it for slices of useful size), plus the extra
/// bits scaled to n, plus the table (bitmap + about 1.5 bytes a symbol),
/// lengths and states. NCCLZ_HD: the slice selector's rule (select_rule.hpp)
/// and the Sparse coder's shift choice run it on the device too, where log2
/// is CUDA's (within 1 ulp of the host's; docs/GPU.md, "Device selector").
NCCLZ_HD size_t rans_estimate_bytes(const uint32_t* hist, uint64_t sampled_total, uint64_t sampled_extra_bits,
                                    size_t n) {
  if (n == 0) return 0;
  uint64_t sum_h = 0;
  uint32_t present = 0;
  for (int s = 0; s < kRansAlphabet; ++s) {
    sum_h += hist[s];
    present += hist[s] != 0;
  }
  if (sum_h == 0) return kRansBitmapBytes + kRansFixedBytes + n;  // nothing sampled: a guess
  double bits = 0;
  const double log_total = ::log2(double(sum_h));
  for (int s = 0; s < kRansAlphabet; ++s)
    if (hist[s]) bits += double(hist[s]) * (log_total - ::log2(double(hist[s])));
  const double per_sym = bits / double(sum_h);
  const double scale = double(n) / double(sampled_total ? sampled_total : sum_h);
  const double payload = (double(n) * per_sym + double(sampled_extra_bits) * scale) / 8.0;
  return kRansBitmapBytes + size_t(1.5 * present) + kRansFixedBytes + size_t(payload + 1.0);
}

/// Encodes r[0..n); returns payload bytes, or kNoFit (block_coder.hpp) if more than cap.
template <class Code>
size_t rans_encode(const Code* r, size_t n, uint8_t* dst, size_t cap);

/// The payload rans_encode writes for the residuals of predictor p (None,
/// Delta1 or Delta2; predictor.hpp) of the int32 codes q[0..n), without the
/// residuals in memory (the AVX2 symbol pass forms them 8 at a time). Same
/// bytes and kNoFit rule as predict() then rans_encode(); kNoFit for any other
/// predictor.
size_t rans_encode_predicted(const int32_t* q, size_t n, Predictor p, uint8_t* dst, size_t cap);

/// Decodes n residuals; never reads or writes out of bounds; Status::Corrupt on inconsistency
/// (out's contents are then unspecified). out must not overlap src: the symbol pass already
/// writes into out (its last n bytes) while it reads src.
template <class Code>
Status rans_decode(const uint8_t* src, size_t len, size_t n, Code* out);

/// Decodes a payload of n int32 residuals of predictor p (None, Delta1 or
/// Delta2; predictor.hpp), turns them into codes and adds those to local:
/// to[i] = local[i] + q[i] in wrapping arithmetic (the reduction of integer
/// codes; to may be local). The statuses of rans_decode (Unsupported for any
/// other predictor); on an error `to` may hold part of the result. The
/// residuals are never in memory (rans_decode's second pass does it all).
Status rans_decode_add(const uint8_t* src, size_t len, size_t n, Predictor p, const int32_t* local, int32_t* to);

/// hist[0..256) = how often each byte value occurs in s[0..n).
void byte_histogram(const uint8_t* s, size_t n, uint32_t* hist);

/// Byte-alphabet rANS (used by the float coder for exponent streams).
size_t rans_encode_bytes(const uint8_t* sym, size_t n, uint8_t* dst, size_t cap);
Status rans_decode_bytes(const uint8_t* src, size_t len, size_t n, uint8_t* out);

/// Implementation choice (tests and benchmarks). rans_encode / rans_encode_bytes
/// / rans_decode use the best available one; all give identical bytes (and
/// identical decoded values and accept/reject decisions).
enum class RansImpl : uint8_t {
  Scalar = 0,  ///< any platform
  Avx2 = 1,    ///< x86-64 with AVX2 (runtime check): the 8 states in one register
};
bool rans_impl_available(RansImpl impl);
RansImpl rans_best_impl();
template <class Code>
size_t rans_encode_with(RansImpl impl, const Code* r, size_t n, uint8_t* dst, size_t cap);
size_t rans_encode_bytes_with(RansImpl impl, const uint8_t* sym, size_t n, uint8_t* dst, size_t cap);
template <class Code>
Status rans_decode_with(RansImpl impl, const uint8_t* src, size_t len, size_t n, Code* out);

/// Normalizes a histogram (total > 0) to frequencies summing to 2^kRansScaleBits,
/// every symbol with a nonzero count getting at least 1 (the encoder's table).
void rans_normalize(const uint32_t* hist, uint64_t total, uint32_t* freq);

}  // namespace ncclz::codec
