// The Block format's framing, host and device (docs/FORMAT.md, "Block"): the
// layout of a Block payload and the per-block coding, written once as
// NCCLZ_HD functions. The CPU coder (block_coder.cpp, scalar and AVX2 paths)
// and the device coder (cuda/slice_kernels.cu) both build on these, so a
// slice encoded on either side is byte-identical by construction, and decodes
// with the same checks on the other.
//
// Payload of n residuals, nb = block_count(n) blocks of kBlockLen:
//
//   block_nibble_bytes(nb)   width nibbles: block k's nibble is
//                            block_nibble_at(payload, k); an unused high
//                            nibble (nb odd) is 0 (block_unused_nibble_ok).
//                            Nibble v < kBlockEscape: width w = v; v =
//                            kBlockEscape: w is the block's escape byte
//   E escape bytes           w (15..bits, block_escape_ok) of each escaped
//                            block, in block order
//   per block, w > 0         its block_words(w) little-endian u32 words: sign
//                            word, then w bit planes (block_encode_one)
//
// so payload_bytes = block_stream_bytes(nb, E, sum of the blocks' words).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

constexpr int kBlockLen = 32;

/// Bits of the code type (32 or 64): the largest valid width.
template <class Code>
NCCLZ_HD constexpr int block_max_width() {
  return int(sizeof(Code) * 8);
}

/// Number of blocks of n residuals: ceil(n / 32), without overflow.
NCCLZ_HD constexpr size_t block_count(size_t n) { return n / kBlockLen + (n % kBlockLen != 0); }

/// Nibble value meaning "the width is in the escape stream"; widths below it
/// are stored in the nibble itself.
constexpr int kBlockEscape = 15;

/// Bytes of the width nibbles of nb blocks: ceil(nb / 2).
NCCLZ_HD constexpr size_t block_nibble_bytes(size_t nb) { return nb / 2 + (nb & 1); }

/// The nibble that stores width w (0..14 as is, 15 for an escaped width).
NCCLZ_HD constexpr unsigned block_nibble_of(int w) { return w < kBlockEscape ? unsigned(w) : unsigned(kBlockEscape); }

/// Sign word and planes of a block of width w: 0 or 4*(w+1) bytes.
NCCLZ_HD constexpr size_t block_payload_bytes(int w) { return w ? size_t(4) * size_t(w + 1) : 0; }

/// Half-bytes a block of width w costs in total: its nibble, its escape byte
/// (w >= 15) and its payload.
NCCLZ_HD constexpr size_t block_cost_halfbytes_from_width(int w) {
  return 1 + (w >= kBlockEscape ? 2 : 0) + 2 * block_payload_bytes(w);
}

/// Largest payload (sign word + planes) of one block of this type.
template <class Code>
NCCLZ_HD constexpr size_t block_max_payload() {
  return block_payload_bytes(block_max_width<Code>());
}

/// |v| as the unsigned type (INT_MIN gives 2^(bits-1)).
template <class Code>
NCCLZ_HD std::make_unsigned_t<Code> block_magnitude(Code v) {
  using U = std::make_unsigned_t<Code>;
  const U s = U(U(0) - U(v < 0));  // all ones for a negative v; branch-free
  return U((U(v) ^ s) - s);
}

/// Number of significant bits of x (0 for x = 0).
NCCLZ_HD int block_bit_width(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return 32 - __clz(int(x));
#else
  return x ? 32 - __builtin_clz(x) : 0;
#endif
}
NCCLZ_HD int block_bit_width(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll((long long)x);
#else
  return x ? 64 - __builtin_clzll(x) : 0;
#endif
}

/// Width w of the block r[0..m) (m <= 32; missing lanes count as zero).
template <class Code>
NCCLZ_HD int block_width(const Code* r, int m) {
  std::make_unsigned_t<Code> acc = 0;
  for (int i = 0; i < m; ++i) acc |= block_magnitude(r[i]);
  return block_bit_width(acc);
}

/// Half-bytes one block of m <= 32 residuals costs: the payload of n
/// residuals is ceil(sum over blocks / 2) bytes (the selector's estimate).
template <class Code>
NCCLZ_HD size_t block_cost_halfbytes(const Code* r, int m) {
  return block_cost_halfbytes_from_width(block_width(r, m));
}

/// Bytes one block of m <= 32 residuals costs, rounded up (its width nibble
/// counts as a whole byte); block_cost_halfbytes is exact.
template <class Code>
NCCLZ_HD size_t block_cost_bytes(const Code* r, int m) {
  return (block_cost_halfbytes(r, m) + 1) / 2;
}

/// Transposes an 8x8 bit matrix held in a u64 (bit 8*row + col <-> bit 8*col + row).
NCCLZ_HD uint64_t block_transpose8x8(uint64_t x) {
  uint64_t t;
  t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x ^= t ^ (t << 28);
  return x;
}

/// Encodes the block r[0..m) (m <= 32, missing lanes are zero residuals):
/// writes its sign word and planes (block_payload_bytes(w) bytes, nothing for
/// a zero block) to dst and returns w, the block's width.
template <class Code>
NCCLZ_HD int block_encode_one(const Code* r, int m, uint8_t* dst) {
  using U = std::make_unsigned_t<Code>;
  U mag[kBlockLen];
  U acc = 0;
  uint32_t sign = 0;
  for (int i = 0; i < kBlockLen; ++i) {
    const Code v = i < m ? r[i] : Code(0);
    mag[i] = block_magnitude(v);
    acc |= mag[i];
    sign |= uint32_t(v < 0) << i;
  }
  const int w = block_bit_width(acc);
  if (w == 0) return 0;
  store_u32(dst, sign);
  uint8_t* planes = dst + 4;
  // Planes 8k..8k+7 from byte k of the magnitudes, 8 lanes at a time: an
  // 8x8 bit transpose turns (lane, bit) into (bit, lane).
  for (int k = 0; 8 * k < w; ++k) {
    uint64_t x[4];
    for (int j = 0; j < 4; ++j) {
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(mag[8 * j + i] >> (8 * k))) << (8 * i);
      x[j] = block_transpose8x8(v);  // byte b = plane 8k+b of lanes 8j..8j+7
    }
    const int np = w - 8 * k < 8 ? w - 8 * k : 8;
    for (int b = 0; b < np; ++b) {
      const int sh = 8 * b;
      const uint32_t word = uint32_t(uint8_t(x[0] >> sh)) | (uint32_t(uint8_t(x[1] >> sh)) << 8) |
                            (uint32_t(uint8_t(x[2] >> sh)) << 16) | (uint32_t(uint8_t(x[3] >> sh)) << 24);
      store_u32(planes + 4 * (8 * k + b), word);
    }
  }
  return w;
}

/// Checks the sign word and planes of a block of width w (1..bits) whose
/// first m lanes are real (m <= 32): w minimal, no sign bit on a zero
/// magnitude, zero padding lanes, and for w = bits only INT_MIN may use the
/// top bit. Reads block_payload_bytes(w) bytes at src.
template <class Code>
NCCLZ_HD bool block_check_planes(const uint8_t* src, int w, int m) {
  constexpr int kBits = block_max_width<Code>();
  const uint32_t sign = load_u32(src);
  uint32_t low = 0;  // OR of planes 0..w-2
  for (int b = 0; b + 1 < w; ++b) low |= load_u32(src + 4 + 4 * b);
  const uint32_t top = load_u32(src + 4 * w);
  if (top == 0) return false;                                     // w is not the block's width
  if (sign & ~(low | top)) return false;                          // negative zero
  if (m < kBlockLen && ((low | top) >> m) != 0) return false;     // padding lanes
  if (w == kBits && ((top & ~sign) | (top & low))) return false;  // only INT_MIN has the top bit
  return true;
}

/// Decodes one block of width w (0..bits) from the block_payload_bytes(w)
/// bytes at src into out[0..m) (m <= 32). Returns false if the block is
/// inconsistent (see block_check_planes); out may then be partly written.
template <class Code>
NCCLZ_HD bool block_decode_one(const uint8_t* src, int w, int m, Code* out) {
  using U = std::make_unsigned_t<Code>;
  if (w < 0 || w > block_max_width<Code>()) return false;
  if (w == 0) {
    for (int i = 0; i < m; ++i) out[i] = 0;
    return true;
  }
  if (!block_check_planes<Code>(src, w, m)) return false;
  const uint32_t sign = load_u32(src);
  const uint8_t* planes = src + 4;
  U mag[kBlockLen];
  for (int i = 0; i < kBlockLen; ++i) mag[i] = 0;
  for (int k = 0; 8 * k < w; ++k) {
    const int np = w - 8 * k < 8 ? w - 8 * k : 8;
    uint64_t x[4] = {0, 0, 0, 0};  // x[j] byte b = plane 8k+b of lanes 8j..8j+7
    for (int b = 0; b < np; ++b) {
      const uint32_t word = load_u32(planes + 4 * (8 * k + b));
      for (int j = 0; j < 4; ++j) x[j] |= uint64_t(uint8_t(word >> (8 * j))) << (8 * b);
    }
    for (int j = 0; j < 4; ++j) {
      const uint64_t t = block_transpose8x8(x[j]);  // byte i = bits 8k.. of lane 8j+i
      for (int i = 0; i < 8; ++i) mag[8 * j + i] |= U(uint8_t(t >> (8 * i))) << (8 * k);
    }
  }
  for (int i = 0; i < m; ++i) {
    const U s = U(U(0) - U((sign >> i) & 1u));  // all ones for a negative lane
    out[i] = Code(U((mag[i] ^ s) - s));
  }
  return true;
}

// ---------------------------------------------------------------------------
// The stream of blocks: nibbles, escape bytes, payload offsets.

/// Sign and plane words of a block of width w: 0, or w + 1.
NCCLZ_HD constexpr uint32_t block_words(int w) { return w ? uint32_t(w + 1) : 0u; }

/// Payload bytes of nb blocks of which `escapes` are escaped and whose words
/// add up to `words`.
NCCLZ_HD constexpr size_t block_stream_bytes(size_t nb, size_t escapes, size_t words) {
  return block_nibble_bytes(nb) + escapes + 4 * words;
}

/// The nibble of block b in the width nibbles at p (low nibble for even b).
NCCLZ_HD unsigned block_nibble_at(const uint8_t* p, size_t b) { return (unsigned(p[b >> 1]) >> (4 * (b & 1))) & 15u; }

/// The nibble byte of blocks 2j (width w0) and 2j + 1 (width w1; 0 when
/// block 2j is the last one: the unused high nibble is 0).
NCCLZ_HD uint8_t block_nibble_byte(int w0, int w1) { return uint8_t(block_nibble_of(w0) | (block_nibble_of(w1) << 4)); }

/// Payload words of the block whose nibble is v, for v < kBlockEscape (0 for
/// an escaped block: its width is in the escape bytes).
NCCLZ_HD constexpr uint32_t block_nibble_words(unsigned v) {
  return v < unsigned(kBlockEscape) ? block_words(int(v)) : 0u;
}

/// Whether the width nibbles at p of nb blocks end properly: with nb odd, the
/// unused high nibble of the last nibble byte is 0.
NCCLZ_HD bool block_unused_nibble_ok(const uint8_t* p, size_t nb) {
  return !(nb & 1) || (p[block_nibble_bytes(nb) - 1] >> 4) == 0;
}

/// Whether an escape byte is a valid width for Code: 15..bits (smaller
/// widths must use the nibble).
template <class Code>
NCCLZ_HD constexpr bool block_escape_ok(unsigned w) {
  return w >= unsigned(kBlockEscape) && w <= unsigned(block_max_width<Code>());
}

}  // namespace ncclz::codec
