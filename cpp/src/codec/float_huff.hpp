// Lossless float coder for many parallel coders (FloatHuff, codec 5): the
// split of FloatExp (float_coder.hpp: exponents, sign+mantissa plane), the
// exponents coded with one canonical Huffman table of codes of at most 12 bits
// in independent sub-streams of kFhSubValues values, each padded to 32-bit
// words, so that one GPU thread encodes or decodes each sub-stream. U8 slices
// (uint8, and int8 / float8 as their bytes) are coded the same way with each
// byte as the symbol and no plane: the device's byte coder.
// Payload layout and checks: docs/FORMAT.md, section "FloatHuff".
//
// The table rule and the layout arithmetic are NCCLZ_HD: the CPU coder
// (float_huff.cpp) and the device coder (cuda/float_huff.cu) build the same
// table from the same histogram and write the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

constexpr uint32_t kFhSubValues = 256;  ///< values per sub-stream (the last one: the rest)
constexpr uint32_t kFhGroup = 32;       ///< sub-streams per group (one u32 word offset per group)
constexpr int kFhMaxLen = 12;           ///< longest code; the decoder's table has 2^12 entries
constexpr uint32_t kFhLutSize = 1u << kFhMaxLen;
/// Most words one sub-stream can take (256 codes of 12 bits): its u8 word count never overflows.
constexpr uint32_t kFhMaxSubWords = kFhSubValues * kFhMaxLen / 32;

NCCLZ_HD constexpr bool fh_type(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::U8;
}
/// Symbols: 256 (F32, BF16: 8-bit exponents; U8: the bytes) or 32 (F16: 5 bits).
NCCLZ_HD constexpr uint32_t fh_alphabet(ElemType t) { return t == ElemType::F16 ? 32u : 256u; }
NCCLZ_HD constexpr uint64_t fh_substreams(uint64_t n) { return (n + kFhSubValues - 1) / kFhSubValues; }
NCCLZ_HD constexpr uint64_t fh_groups(uint64_t n) { return (fh_substreams(n) + kFhGroup - 1) / kFhGroup; }
/// Bytes before the code words: the 4-bit code lengths (alphabet / 2), the
/// group offsets (4 per group), the word counts (1 per sub-stream), zero
/// padding to a multiple of 4.
NCCLZ_HD constexpr uint64_t fh_table_bytes(ElemType t) { return fh_alphabet(t) / 2; }
NCCLZ_HD constexpr uint64_t fh_index_bytes(ElemType t, uint64_t n) {
  return (fh_table_bytes(t) + 4 * fh_groups(n) + fh_substreams(n) + 3) / 4 * 4;
}
/// Values of sub-stream k of a slice of n values.
NCCLZ_HD constexpr uint32_t fh_sub_count(uint64_t n, uint64_t k) {
  return uint32_t(n - k * kFhSubValues < kFhSubValues ? n - k * kFhSubValues : kFhSubValues);
}

/// Limits the leaves' depths to kFhMaxLen, on cnt[d] (the number of leaves at
/// depth d, up to maxd): two leaves at depth i leave it; one takes their
/// parent's place at i - 1, the other becomes the sibling of a leaf at the
/// deepest shallower level j that has one (that leaf moves to j + 1). Kraft
/// stays 1. (The CPU's table rule; the device's CTA build runs it too.)
NCCLZ_HD void fh_limit_depths(uint32_t* cnt, uint32_t maxd) {
  for (uint32_t i = maxd; i > uint32_t(kFhMaxLen); --i) {
    while (cnt[i] > 0) {
      uint32_t j = i - 2;
      while (cnt[j] == 0) --j;
      cnt[i] -= 2;
      cnt[i - 1] += 1;
      cnt[j + 1] += 2;
      cnt[j] -= 1;
    }
  }
}

/// The code lengths (0: symbol absent; 1..12) for histogram hist[0..A), A <=
/// 256: Huffman's lengths (two queues: leaves sorted by count then symbol,
/// a leaf taken before an equal internal node), limited to 12 bits by moving
/// the deepest pairs up (JPEG's Annex K.3 rule, which keeps the code complete),
/// then handed out again longest first to the leaves in that same order. One
/// symbol present: length 1 (it is then coded with no bits at all). No symbol:
/// all zero. One thread, no allocation: the device's table builder calls it.
NCCLZ_HD void fh_build_lengths(const uint32_t* hist, uint32_t A, uint8_t* len) {
  uint16_t sym[256];
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) {
    len[s] = 0;
    if (hist[s] == 0) continue;
    // Insertion by (count, symbol): symbols arrive in order, so ties stay in order.
    uint32_t i = m++;
    while (i > 0 && hist[sym[i - 1]] > hist[s]) {
      sym[i] = sym[i - 1];
      --i;
    }
    sym[i] = uint16_t(s);
  }
  if (m == 0) return;
  if (m == 1) {
    len[sym[0]] = 1;
    return;
  }
  // Two-queue Huffman: internal node j has weight iw[j]; parents by index.
  uint64_t iw[255];
  uint8_t leaf_parent[256], int_parent[255];
  uint32_t li = 0, ii = 0, nint = 0;
  for (uint32_t k = 0; k + 1 < m; ++k) {
    uint64_t w = 0;
    for (int pick = 0; pick < 2; ++pick) {
      if (li < m && (ii >= nint || uint64_t(hist[sym[li]]) <= iw[ii])) {
        w += hist[sym[li]];
        leaf_parent[li++] = uint8_t(nint);
      } else {
        w += iw[ii];
        int_parent[ii++] = uint8_t(nint);
      }
    }
    iw[nint++] = w;
  }
  // Depths: the root is the last internal node; parents have higher indices.
  uint8_t depth[255];
  depth[nint - 1] = 0;
  for (uint32_t j = nint - 1; j-- > 0;) depth[j] = uint8_t(depth[int_parent[j]] + 1);
  uint32_t cnt[257] = {};
  uint32_t maxd = 0;
  for (uint32_t i = 0; i < m; ++i) {
    const uint32_t d = depth[leaf_parent[i]] + 1u;
    ++cnt[d];
    if (d > maxd) maxd = d;
  }
  fh_limit_depths(cnt, maxd);
  // Longest codes to the least frequent leaves (sym[] is in that order).
  uint32_t d = maxd < uint32_t(kFhMaxLen) ? maxd : uint32_t(kFhMaxLen);
  for (uint32_t i = 0; i < m; ++i) {
    while (cnt[d] == 0) --d;
    len[sym[i]] = uint8_t(d);
    --cnt[d];
  }
}

/// Canonical codes for lengths len[0..A): shorter codes first, equal lengths
/// by symbol; code[s] holds len[s] bits (the first bit sent is the highest).
/// Returns the Kraft sum in units of 2^-12 (4096: a complete code).
NCCLZ_HD uint32_t fh_canonical_codes(const uint8_t* len, uint32_t A, uint16_t* code) {
  uint32_t cnt[kFhMaxLen + 1] = {};
  for (uint32_t s = 0; s < A; ++s) ++cnt[len[s] <= kFhMaxLen ? len[s] : 0];
  uint32_t next[kFhMaxLen + 1];
  uint32_t c = 0, kraft = 0;
  cnt[0] = 0;
  for (int l = 1; l <= kFhMaxLen; ++l) {
    c = (c + cnt[l - 1]) << 1;
    next[l] = c;
    kraft += cnt[l] << (kFhMaxLen - l);
  }
  for (uint32_t s = 0; s < A; ++s) code[s] = len[s] >= 1 && len[s] <= kFhMaxLen ? uint16_t(next[len[s]]++) : 0;
  return kraft;
}

/// Whether lengths len[0..A) (each already <= 15) form a table the format
/// allows: every length <= 12, and either exactly one symbol, of length 1, or
/// at least two with a Kraft sum of exactly 1 (a complete code).
NCCLZ_HD bool fh_lengths_valid(const uint8_t* len, uint32_t A) {
  uint32_t m = 0, kraft = 0, one = 0;
  for (uint32_t s = 0; s < A; ++s) {
    if (len[s] > kFhMaxLen) return false;
    if (len[s] == 0) continue;
    ++m;
    one = len[s];
    kraft += 1u << (kFhMaxLen - len[s]);
  }
  return m == 1 ? one == 1 : (m >= 2 && kraft == kFhLutSize);
}

/// Bytes of the sign+mantissa plane (floatexp_plane_bytes: FloatExp's
/// layout); U8 has none (the byte is the symbol).
NCCLZ_HD constexpr uint64_t fh_plane_bytes(ElemType t, uint64_t n) {
  return t == ElemType::F32 ? 3 * n : t == ElemType::BF16 ? n : t == ElemType::U8 ? 0 : (11 * n + 7) / 8;
}

/// Sizes of a payload of n values with word total `words` and plane bytes `plane`.
NCCLZ_HD constexpr uint64_t fh_payload_bytes(ElemType t, uint64_t n, uint64_t words, uint64_t plane) {
  return n == 0 ? 0 : fh_index_bytes(t, n) + 4 * words + plane;
}

/// Estimated payload bytes (from every sample_every-th value). kNoFit
/// (block_coder.hpp) if t is not F32, F16, BF16 or U8.
size_t floathuff_estimate_bytes(const void* x, ElemType t, size_t n, uint32_t sample_every);

/// Encodes n values of type t; returns payload bytes, or kNoFit if more than
/// cap (or if t is not F32, F16, BF16 or U8).
size_t floathuff_encode(const void* x, ElemType t, size_t n, uint8_t* dst, size_t cap);

/// Decodes n values of type t, bit-exact; Status::Corrupt on any inconsistency
/// (Status::Unsupported if t is not F32, F16, BF16 or U8).
Status floathuff_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* out);

/// The decoder's ways (tests and benchmarks): Auto, floathuff_decode's (up to
/// three codes a table lookup in large slices of short codes), or Single (one
/// code a lookup everywhere). Same values and statuses.
enum class FhDecodeImpl : uint8_t { Auto, Single };
Status floathuff_decode_with(FhDecodeImpl impl, const uint8_t* src, size_t len, ElemType t, size_t n, void* out);

}  // namespace ncclz::codec
