// Block coder drivers: the scalar path (the per-block functions of
// block_coder.hpp) and an AVX2 path for x86-64, chosen at run time. Both
// write the same bytes (tests/cpp/test_block_coder.cpp checks it).
//
// Encoder: one pass. Width nibbles go to dst[0..ceil(nb/2)), payloads are
// appended from dst+ceil(nb/2). A block is written straight to dst while at
// least a worst-case block payload of room is left, else through a small
// buffer and a check. Escape bytes (w >= 15) are collected aside; if there
// are any, the payloads are moved up at the end to make room for them (a
// memmove, only for slices with wide blocks; a width pre-pass instead would
// re-read the whole input and cost ~35% of encode speed on narrow data).
// Decoder: a first pass over the nibbles and escape bytes checks every width
// and that the total length is exactly len; the block pass then stays inside
// src+len by construction and checks each block's planes.
//
// AVX2, int32, one block of 32 residuals = 4 registers of 8 lanes:
//  encode: abs + OR-reduce -> w; the sign word is movemask of the residuals
//          packed to bytes (signed saturation keeps the sign). For each byte
//          k of the magnitudes (k < ceil(w/8)): pack byte k of the 32 lanes
//          into one register in lane order; an 8x8 bit transpose in each
//          qword (lanes 8j..8j+7) turns it into bytes "plane b of 8 lanes",
//          and a dword permute + byte shuffle gather plane words 8k..8k+7,
//          stored with one 32-byte store. Planes at or above w are zero and
//          lie past the block: the next block overwrites them, and the caller
//          guarantees room (a worst-case block) for the spill.
//  decode: for planes 8k..8k+7, one masked load of up to 8 plane words, a
//          byte shuffle so that qword j holds byte j of each plane (= lanes
//          8j..8j+7), then an 8x8 bit transpose in each qword gives byte k of
//          the 32 magnitudes in lane order; widen, shift, OR, apply signs.
// int64 blocks whose width is at most 31 go through the int32 kernels (their
// values fit in int32 and the bytes are identical); wider ones use scalar.
//
// Fused with the Delta predictors (int32 codes; block_encode_predicted,
// block_decode_add): the encoder takes codes and forms each block's residuals
// in registers, the decoder turns each block's residuals into codes and adds
// them to another buffer as it stores, so a lossy sum's slice is coded and
// reduced without residuals or decoded values in memory (the passes of
// predict, reconstruct and the reduction; same bytes, same results).
#include "codec/block_coder.hpp"

#include <cstring>
#include <vector>

#include "codec/cpu_features.hpp"
#include "codec/predictor.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#include "codec/delta_avx2.hpp"
#define NCCLZ_BLOCK_X86 1
#else
#define NCCLZ_BLOCK_X86 0
#endif

namespace ncclz::codec {
namespace {

// ---- shared: widths -------------------------------------------------------

// Encoder: block k's nibble goes to dst[k/2] as soon as its width is known
// (an odd k ORs its high nibble into the byte its even neighbour wrote, so an
// unused last high nibble stays 0); escape bytes (w >= 15) are collected aside.
inline void put_nibble(uint8_t* dst, size_t blk, int w, std::vector<uint8_t>* esc) {
  const uint8_t v = uint8_t(block_nibble_of(w));
  if (blk & 1) {
    dst[blk >> 1] = uint8_t(dst[blk >> 1] | (v << 4));
  } else {
    dst[blk >> 1] = v;
  }
  if (w >= kBlockEscape) esc->push_back(uint8_t(w));
}

// The payloads were written to dst[nib..pos) before the number of escape
// bytes was known: move them up to make room for the escape bytes and put
// those in. Returns the total size, or kNoFit if it exceeds cap. Costs
// nothing when no block is escaped (the common case: w <= 14).
inline size_t put_escapes(uint8_t* dst, size_t nib, size_t pos, size_t cap, const std::vector<uint8_t>& esc) {
  if (esc.empty()) return pos;
  if (esc.size() > cap - pos) return kNoFit;
  std::memmove(dst + nib + esc.size(), dst + nib, pos - nib);
  std::memcpy(dst + nib, esc.data(), esc.size());
  return pos + esc.size();
}

// Half-bytes to bytes: an odd count has one unused high nibble.
inline size_t halfbytes_to_bytes(size_t half) { return half / 2 + (half & 1); }

// Payload bytes of the block whose nibble is v, for v != 15 (0 for v = 15).
constexpr unsigned nibble_payload(unsigned v) { return 4 * block_nibble_words(v); }

// For each nibble byte: payload bytes of its non-escaped blocks (<= 120) and
// its number of escaped blocks (0..2).
struct NibbleTable {
  uint8_t pay[256];
  uint8_t esc[256];
};
constexpr NibbleTable make_nibble_table() {
  NibbleTable t{};
  for (unsigned b = 0; b < 256; ++b) {
    t.pay[b] = uint8_t(nibble_payload(b & 15u) + nibble_payload(b >> 4));
    t.esc[b] = uint8_t(((b & 15u) == 15u) + ((b >> 4) == 15u));
  }
  return t;
}
constexpr NibbleTable kNibbleTable = make_nibble_table();

// Decoder pass 1: checks the width nibbles (an unused one must be 0), the
// escape bytes (15..bits each, all inside len) and that the payload is exactly
// len bytes; sets *base to where the block payloads start.
template <class Code>
bool check_widths(const uint8_t* src, size_t len, size_t nb, size_t* base) {
  const size_t nib = block_nibble_bytes(nb);
  if (len < nib) return false;
  size_t nesc = 0, total = 0;
  for (size_t i = 0; i < nib; ++i) {
    nesc += kNibbleTable.esc[src[i]];
    total += kNibbleTable.pay[src[i]];
  }
  if (!block_unused_nibble_ok(src, nb)) return false;
  if (nesc > len - nib) return false;  // escape stream truncated
  unsigned bad = 0;
  for (size_t e = 0; e < nesc; ++e) {
    const unsigned w = src[nib + e];
    bad |= unsigned(!block_escape_ok<Code>(w));
    total += block_payload_bytes(int(w));
  }
  *base = nib + nesc;
  return !bad && total == len - *base;
}

// Reads the widths of a checked payload in block order.
struct WidthReader {
  const uint8_t* nib;
  const uint8_t* esc;
  WidthReader(const uint8_t* src, size_t nb) : nib(src), esc(src + block_nibble_bytes(nb)) {}
  int next(size_t blk) {
    const unsigned v = block_nibble_at(nib, blk);
    return v == unsigned(kBlockEscape) ? int(*esc++) : int(v);
  }
};

// ---- scalar ---------------------------------------------------------------

template <class Code>
size_t encoded_bytes_scalar(const Code* r, size_t n) {
  size_t half = 0;
  for (size_t i = 0; i < n; i += kBlockLen) {
    const int m = n - i < size_t(kBlockLen) ? int(n - i) : kBlockLen;
    half += block_cost_halfbytes(r + i, m);
  }
  return halfbytes_to_bytes(half);
}

// Encodes one block's payload at dst+pos and sets *w; returns the new pos or
// kNoFit. `enc(block, m, out) -> w` encodes into a buffer of at least
// block_max_payload<Code>() bytes.
template <class Code, class EncodeFn>
inline size_t put_block(const Code* r, int m, uint8_t* dst, size_t pos, size_t cap, int* w, EncodeFn enc) {
  constexpr size_t kMax = block_max_payload<Code>();
  if (cap - pos >= kMax) {
    *w = enc(r, m, dst + pos);
    return pos + block_payload_bytes(*w);
  }
  uint8_t tmp[kMax];
  *w = enc(r, m, tmp);
  const size_t pb = block_payload_bytes(*w);
  if (pb > cap - pos) return kNoFit;
  std::memcpy(dst + pos, tmp, pb);
  return pos + pb;
}

template <class Code>
size_t encode_scalar(const Code* r, size_t n, uint8_t* dst, size_t cap) {
  const size_t nb = block_count(n);
  const size_t nib = block_nibble_bytes(nb);
  if (nib > cap) return kNoFit;
  std::vector<uint8_t> esc;
  size_t pos = nib;
  auto enc = [](const Code* b, int m, uint8_t* out) { return block_encode_one(b, m, out); };
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t i = blk * kBlockLen;
    const int m = n - i < size_t(kBlockLen) ? int(n - i) : kBlockLen;
    int w = 0;
    pos = put_block(r + i, m, dst, pos, cap, &w, enc);
    if (pos == kNoFit) return kNoFit;
    put_nibble(dst, blk, w, &esc);
  }
  return put_escapes(dst, nib, pos, cap, esc);
}

template <class Code>
Status decode_scalar(const uint8_t* src, size_t len, size_t n, Code* out) {
  const size_t nb = block_count(n);
  size_t base = 0;
  if (!check_widths<Code>(src, len, nb, &base)) return Status::Corrupt;
  WidthReader wr(src, nb);
  const uint8_t* p = src + base;
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t i = blk * kBlockLen;
    const int m = n - i < size_t(kBlockLen) ? int(n - i) : kBlockLen;
    const int w = wr.next(blk);
    if (!block_decode_one(p, w, m, out + i)) return Status::Corrupt;
    p += block_payload_bytes(w);
  }
  return Status::Ok;
}

// ---- AVX2 -----------------------------------------------------------------
#if NCCLZ_BLOCK_X86
#define NCCLZ_AVX2 __attribute__((target("avx2")))
#define NCCLZ_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

NCCLZ_AVX2_INLINE uint32_t hor_or(__m256i v) {
  __m128i x = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_or_si128(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_or_si128(x, _mm_shuffle_epi32(x, 0xB1));
  return uint32_t(_mm_cvtsi128_si32(x));
}

// Packs the 32 int32 lanes of (a,b,c,d) into 32 bytes in lane order, with
// unsigned saturation (Unsigned: values 0..255 kept) or signed saturation
// (!Unsigned: the sign of each lane kept in the byte's top bit).
template <bool Unsigned>
NCCLZ_AVX2_INLINE __m256i pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i x = Unsigned ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Bit transpose of the 8x8 matrix in each qword (see block_transpose8x8).
NCCLZ_AVX2_INLINE __m256i transpose8x8_x4(__m256i x) {
  __m256i t;
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 7)), _mm256_set1_epi64x(0x00AA00AA00AA00AAll));
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 7)));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 14)), _mm256_set1_epi64x(0x0000CCCC0000CCCCll));
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 14)));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 28)), _mm256_set1_epi64x(0x00000000F0F0F0F0ll));
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 28)));
  return x;
}

// The 4x4 byte transpose inside each 128-bit half (its own inverse): byte
// 4j+b <- byte 4b+j.
NCCLZ_AVX2_INLINE __m256i shuffle_4x4(__m256i x) {
  const __m256i shuf = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm256_shuffle_epi8(x, shuf);
}

// Writes 8 plane words (32 bytes) to planes: word j = bit j of the 32 bytes of
// x (byte i = lane i). Planes above the block's width come out zero; they lie
// past the block and the next block (or nothing) overwrites them, so the
// caller must have 32 bytes of room.
NCCLZ_AVX2_INLINE void put_planes8(__m256i x, uint8_t* planes) {
  // qword j = lanes 8j..8j+7; after the transpose its byte b = plane b of them.
  const __m256i t = transpose8x8_x4(x);
  // dword order (q0.lo, q1.lo, q2.lo, q3.lo | q0.hi, ...): then byte b of the
  // 4 qwords of each half meet in dword b.
  const __m256i u = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes), shuffle_4x4(u));
}

// Encodes 32 int32 residuals held in 4 registers; out needs room for the
// largest payload (132 bytes) whatever w is. Returns w.
NCCLZ_AVX2_INLINE int enc_regs_avx2(__m256i v0, __m256i v1, __m256i v2, __m256i v3, uint8_t* out) {
  const __m256i a0 = _mm256_abs_epi32(v0), a1 = _mm256_abs_epi32(v1);
  const __m256i a2 = _mm256_abs_epi32(v2), a3 = _mm256_abs_epi32(v3);
  const uint32_t acc = hor_or(_mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3)));
  if (acc == 0) return 0;
  const int w = 32 - __builtin_clz(acc);  // acc != 0
  const uint32_t sign = uint32_t(_mm256_movemask_epi8(pack_bytes<false>(v0, v1, v2, v3)));
  std::memcpy(out, &sign, 4);
  uint8_t* planes = out + 4;
  if (w <= 8) {
    put_planes8(pack_bytes<true>(a0, a1, a2, a3), planes);
    return w;
  }
  const __m256i ff = _mm256_set1_epi32(0xFF);
  for (int k = 0; 8 * k < w; ++k) {
    const __m128i sh = _mm_cvtsi32_si128(8 * k);
    const __m256i b0 = _mm256_and_si256(_mm256_srl_epi32(a0, sh), ff);
    const __m256i b1 = _mm256_and_si256(_mm256_srl_epi32(a1, sh), ff);
    const __m256i b2 = _mm256_and_si256(_mm256_srl_epi32(a2, sh), ff);
    const __m256i b3 = _mm256_and_si256(_mm256_srl_epi32(a3, sh), ff);
    put_planes8(pack_bytes<true>(b0, b1, b2, b3), planes + 32 * k);
  }
  return w;
}

NCCLZ_AVX2_INLINE int enc_block_i32_avx2(const int32_t* r, uint8_t* out) {
  const __m256i* p = reinterpret_cast<const __m256i*>(r);
  return enc_regs_avx2(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1), _mm256_loadu_si256(p + 2),
                       _mm256_loadu_si256(p + 3), out);
}

// Low dwords of the 8 int64 lanes of (a, b), in order.
NCCLZ_AVX2_INLINE __m256i narrow64(__m256i a, __m256i b) {
  const __m256 x = _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_permute4x64_epi64(_mm256_castps_si256(x), _MM_SHUFFLE(3, 1, 2, 0));
}

NCCLZ_AVX2_INLINE __m256i abs64(__m256i v) {
  const __m256i s = _mm256_cmpgt_epi64(_mm256_setzero_si256(), v);
  return _mm256_sub_epi64(_mm256_xor_si256(v, s), s);
}

NCCLZ_AVX2_INLINE int enc_block_i64_avx2(const int64_t* r, uint8_t* out) {
  const __m256i* p = reinterpret_cast<const __m256i*>(r);
  __m256i v[8];
  __m256i acc = _mm256_setzero_si256();
  for (int t = 0; t < 8; ++t) {
    v[t] = _mm256_loadu_si256(p + t);
    acc = _mm256_or_si256(acc, abs64(v[t]));
  }
  // Any magnitude >= 2^31 (INT64_MIN's magnitude has bit 63 set)?
  const __m256i hi = _mm256_andnot_si256(_mm256_set1_epi64x(0x7FFFFFFF), acc);
  if (!_mm256_testz_si256(hi, hi)) return block_encode_one(r, kBlockLen, out);
  return enc_regs_avx2(narrow64(v[0], v[1]), narrow64(v[2], v[3]), narrow64(v[4], v[5]), narrow64(v[6], v[7]), out);
}

alignas(32) const int32_t kLoadMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Byte k of the 32 magnitudes (lane order) from np (1..8) plane words at p.
// Reads only the np words (masked load).
NCCLZ_AVX2_INLINE __m256i get_plane_bytes(const uint8_t* p, int np) {
  const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLoadMask + 8 - np));
  const __m256i d = _mm256_maskload_epi32(reinterpret_cast<const int*>(p), mask);
  // In each 128-bit half (4 plane words), gather byte j of each word into dword j.
  const __m256i g = shuffle_4x4(d);
  // qword j = byte j of planes 0..3 (low half) then of planes 4..7 (high half).
  const __m256i q = _mm256_permutevar8x32_epi32(g, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return transpose8x8_x4(q);
}

NCCLZ_AVX2_INLINE __m256i apply_sign(__m256i mag, __m256i sign, __m256i bits) {
  const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(sign, bits), bits);
  return _mm256_sub_epi32(_mm256_xor_si256(mag, neg), neg);
}

// Decodes a block of width w (1..32) at src into 4 registers of int32 (the
// int64 path comes here only for w <= 31). Returns false if the top plane is
// zero or a zero magnitude has its sign bit; the caller checks padding lanes
// and, for w = 32, the INT_MIN rule (block_check_planes).
NCCLZ_AVX2_INLINE bool dec_regs_avx2(const uint8_t* src, int w, __m256i out[4]) {
  const uint8_t* planes = src + 4;
  __m256i m0, m1, m2, m3;
  {
    const __m256i x = get_plane_bytes(planes, w < 8 ? w : 8);
    m0 = _mm256_cvtepu8_epi32(_mm256_castsi256_si128(x));
    m1 = _mm256_cvtepu8_epi32(_mm_srli_si128(_mm256_castsi256_si128(x), 8));
    const __m128i h = _mm256_extracti128_si256(x, 1);
    m2 = _mm256_cvtepu8_epi32(h);
    m3 = _mm256_cvtepu8_epi32(_mm_srli_si128(h, 8));
  }
  for (int k = 1; 8 * k < w; ++k) {
    const int np = w - 8 * k < 8 ? w - 8 * k : 8;
    const __m256i x = get_plane_bytes(planes + 32 * k, np);
    const __m128i sh = _mm_cvtsi32_si128(8 * k);
    const __m128i l = _mm256_castsi256_si128(x), h = _mm256_extracti128_si256(x, 1);
    m0 = _mm256_or_si256(m0, _mm256_sll_epi32(_mm256_cvtepu8_epi32(l), sh));
    m1 = _mm256_or_si256(m1, _mm256_sll_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(l, 8)), sh));
    m2 = _mm256_or_si256(m2, _mm256_sll_epi32(_mm256_cvtepu8_epi32(h), sh));
    m3 = _mm256_or_si256(m3, _mm256_sll_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(h, 8)), sh));
  }
  int32_t sign;
  std::memcpy(&sign, src, 4);
  const __m256i s = _mm256_set1_epi32(sign);
  // Lane i of register t is negative when sign bit 8t+i is set: -m = (m ^ -1) + 1.
  const __m256i b0 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i b1 = _mm256_slli_epi32(b0, 8), b2 = _mm256_slli_epi32(b0, 16), b3 = _mm256_slli_epi32(b0, 24);
  out[0] = apply_sign(m0, s, b0);
  out[1] = apply_sign(m1, s, b1);
  out[2] = apply_sign(m2, s, b2);
  out[3] = apply_sign(m3, s, b3);
  // Magnitudes are below 2^w by construction: the top plane is nonzero iff
  // their OR reaches bit w-1. A negative zero is a sign bit on a zero lane.
  const uint32_t acc = hor_or(_mm256_or_si256(_mm256_or_si256(m0, m1), _mm256_or_si256(m2, m3)));
  const __m256i z = _mm256_setzero_si256();
  const __m256i nz0 = _mm256_and_si256(_mm256_cmpeq_epi32(m0, z), _mm256_and_si256(s, b0));
  const __m256i nz1 = _mm256_and_si256(_mm256_cmpeq_epi32(m1, z), _mm256_and_si256(s, b1));
  const __m256i nz2 = _mm256_and_si256(_mm256_cmpeq_epi32(m2, z), _mm256_and_si256(s, b2));
  const __m256i nz3 = _mm256_and_si256(_mm256_cmpeq_epi32(m3, z), _mm256_and_si256(s, b3));
  const __m256i nz = _mm256_or_si256(_mm256_or_si256(nz0, nz1), _mm256_or_si256(nz2, nz3));
  return ((acc >> (w - 1)) != 0) & (_mm256_testz_si256(nz, nz) != 0);
}

// One block (m <= 32 lanes) for put_block.
template <class Code>
struct EncBlockAvx2 {
  NCCLZ_AVX2 int operator()(const Code* b, int m, uint8_t* out) const {
    if (m < kBlockLen) return block_encode_one(b, m, out);
    if constexpr (sizeof(Code) == 4) {
      return enc_block_i32_avx2(b, out);
    } else {
      return enc_block_i64_avx2(b, out);
    }
  }
};

// Width of the full block at r (32 residuals).
template <class Code>
NCCLZ_AVX2_INLINE int width_full_avx2(const Code* r) {
  const __m256i* p = reinterpret_cast<const __m256i*>(r);
  if constexpr (sizeof(Code) == 4) {
    const __m256i a = _mm256_or_si256(
        _mm256_or_si256(_mm256_abs_epi32(_mm256_loadu_si256(p)), _mm256_abs_epi32(_mm256_loadu_si256(p + 1))),
        _mm256_or_si256(_mm256_abs_epi32(_mm256_loadu_si256(p + 2)), _mm256_abs_epi32(_mm256_loadu_si256(p + 3))));
    return block_bit_width(hor_or(a));
  } else {
    __m256i acc = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) acc = _mm256_or_si256(acc, abs64(_mm256_loadu_si256(p + t)));
    __m128i x = _mm_or_si128(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    x = _mm_or_si128(x, _mm_unpackhi_epi64(x, x));
    return block_bit_width(uint64_t(_mm_cvtsi128_si64(x)));
  }
}

template <class Code>
NCCLZ_AVX2 size_t encoded_bytes_avx2(const Code* r, size_t n) {
  const size_t full = n / kBlockLen;
  size_t half = 0;
  for (size_t blk = 0; blk < full; ++blk) half += block_cost_halfbytes_from_width(width_full_avx2(r + blk * kBlockLen));
  if (n % kBlockLen) half += block_cost_halfbytes(r + full * kBlockLen, int(n % kBlockLen));
  return halfbytes_to_bytes(half);
}

// The encoder's loop over blocks. full(blk, out) -> w encodes full block blk
// at out, where a worst-case block's room is left; part(blk, m, buf) -> the
// m residuals of block blk (any block; buf: room for 32) for the checked path.
template <class Code, class Full, class Part>
NCCLZ_AVX2_INLINE size_t encode_blocks_avx2(size_t n, uint8_t* dst, size_t cap, const Full& full_block,
                                            const Part& part_block) {
  const size_t nb = block_count(n);
  const size_t nib = block_nibble_bytes(nb);
  if (nib > cap) return kNoFit;
  std::vector<uint8_t> esc;
  size_t pos = nib;
  constexpr size_t kMax = block_max_payload<Code>();
  const size_t full = n / kBlockLen;
  size_t blk = 0;
  // Fast loop: room for a worst-case block.
  for (; blk < full && cap - pos >= kMax; ++blk) {
    const int w = full_block(blk, dst + pos);
    pos += block_payload_bytes(w);
    put_nibble(dst, blk, w, &esc);
  }
  const EncBlockAvx2<Code> enc;
  alignas(32) Code buf[kBlockLen];
  for (; blk < nb; ++blk) {
    const size_t i = blk * kBlockLen;
    const int m = n - i < size_t(kBlockLen) ? int(n - i) : kBlockLen;
    int w = 0;
    pos = put_block(part_block(blk, m, buf), m, dst, pos, cap, &w, enc);
    if (pos == kNoFit) return kNoFit;
    put_nibble(dst, blk, w, &esc);
  }
  return put_escapes(dst, nib, pos, cap, esc);
}

// The residuals as they are.
template <class Code>
struct GivenBlocks {
  const Code* r;
  NCCLZ_AVX2_INLINE int operator()(size_t blk, uint8_t* out) const {
    if constexpr (sizeof(Code) == 4) {
      return enc_block_i32_avx2(r + blk * kBlockLen, out);
    } else {
      return enc_block_i64_avx2(r + blk * kBlockLen, out);
    }
  }
  NCCLZ_AVX2_INLINE const Code* operator()(size_t blk, int, Code*) const { return r + blk * kBlockLen; }
};

template <class Code>
NCCLZ_AVX2 size_t encode_avx2(const Code* r, size_t n, uint8_t* dst, size_t cap) {
  const GivenBlocks<Code> g{r};
  return encode_blocks_avx2<Code>(n, dst, cap, g, g);
}

template <class Code>
NCCLZ_AVX2 Status decode_avx2(const uint8_t* src, size_t len, size_t n, Code* out) {
  const size_t nb = block_count(n);
  size_t base = 0;
  if (!check_widths<Code>(src, len, nb, &base)) return Status::Corrupt;
  WidthReader wr(src, nb);
  const size_t full = n / kBlockLen;
  const uint8_t* p = src + base;
  for (size_t blk = 0; blk < full; ++blk) {
    const int w = wr.next(blk);
    Code* o = out + blk * kBlockLen;
    __m256i* op = reinterpret_cast<__m256i*>(o);
    if (w == 0) {
      const __m256i z = _mm256_setzero_si256();
      for (int t = 0; t < int(sizeof(Code)); ++t) _mm256_storeu_si256(op + t, z);
      continue;
    }
    if (w < 32 || sizeof(Code) == 4) {
      __m256i v[4];
      if (!dec_regs_avx2(p, w, v)) return Status::Corrupt;
      if (sizeof(Code) == 4 && w == 32 && !block_check_planes<Code>(p, w, kBlockLen)) return Status::Corrupt;
      if constexpr (sizeof(Code) == 4) {
        for (int t = 0; t < 4; ++t) _mm256_storeu_si256(op + t, v[t]);
      } else {
        for (int t = 0; t < 4; ++t) {
          _mm256_storeu_si256(op + 2 * t, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v[t])));
          _mm256_storeu_si256(op + 2 * t + 1, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v[t], 1)));
        }
      }
    } else if (!block_decode_one(p, w, kBlockLen, o)) {
      return Status::Corrupt;
    }
    p += block_payload_bytes(w);
  }
  if (full < nb) {
    const int w = wr.next(full);
    if (!block_decode_one(p, w, int(n - full * kBlockLen), out + full * kBlockLen)) return Status::Corrupt;
  }
  return Status::Ok;
}

// ---- AVX2, fused with a Delta predictor (int32 codes) ----------------------
// block_encode_predicted / block_decode_add: the residuals of Delta1 / Delta2
// (predictor.hpp) exist only in registers. Encode: block 0 and the last
// partial block through predict_range and a small buffer, every other block's
// residuals from unaligned loads of q at i, i-1 (and i-2). Decode: each
// block's 32 residuals (registers, or a buffer for the partial last block and
// the scalar widths) are turned into codes by running sums with a carry
// (Delta1: one scan; Delta2: two, the first starting from r[1] - r[0] so that
// e[1] = r[1]), added to local and stored into to.

NCCLZ_AVX2_INLINE __m256i ld8(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
NCCLZ_AVX2_INLINE void st8(int32_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// The Delta residuals of codes q, block by block: block 0 (its first
// residuals have fewer neighbours) and the checked path through predict_range.
template <int Order>
struct DeltaBlocks {
  static constexpr Predictor kPred = Order == 1 ? Predictor::Delta1 : Predictor::Delta2;
  const int32_t* q;
  NCCLZ_AVX2_INLINE int operator()(size_t blk, uint8_t* out) const {
    if (blk == 0) {
      alignas(32) int32_t buf[kBlockLen];
      predict_range(q, 0, kBlockLen, kPred, 0, 0, buf);
      return enc_block_i32_avx2(buf, out);
    }
    const int32_t* b = q + blk * kBlockLen;
    return enc_regs_avx2(delta_regs<Order>(b), delta_regs<Order>(b + 8), delta_regs<Order>(b + 16),
                         delta_regs<Order>(b + 24), out);
  }
  NCCLZ_AVX2_INLINE const int32_t* operator()(size_t blk, int m, int32_t* buf) const {
    predict_range(q, blk * kBlockLen, size_t(m), kPred, 0, 0, buf);
    return buf;
  }
};

template <int Order>
NCCLZ_AVX2 size_t encode_predicted_avx2(const int32_t* q, size_t n, uint8_t* dst, size_t cap) {
  const DeltaBlocks<Order> d{q};
  return encode_blocks_avx2<int32_t>(n, dst, cap, d, d);
}

template <int Order>
NCCLZ_AVX2 Status decode_add_avx2(const uint8_t* src, size_t len, size_t n, const int32_t* local, int32_t* to) {
  const size_t nb = block_count(n);
  size_t base = 0;
  if (!check_widths<int32_t>(src, len, nb, &base)) return Status::Corrupt;
  WidthReader wr(src, nb);
  const size_t full = n / kBlockLen;
  const uint8_t* p = src + base;
  __m256i ce = _mm256_setzero_si256(), cq = _mm256_setzero_si256();
  __m256i v[4];
  for (size_t blk = 0; blk < full; ++blk) {
    const int w = wr.next(blk);
    if (w == 0) {
      v[0] = v[1] = v[2] = v[3] = _mm256_setzero_si256();
    } else {
      if (!dec_regs_avx2(p, w, v)) return Status::Corrupt;
      if (w == 32 && !block_check_planes<int32_t>(p, w, kBlockLen)) return Status::Corrupt;
      p += block_payload_bytes(w);
    }
    if (blk == 0) v[0] = first_delta_regs<Order>(v[0]);
    const size_t i = blk * kBlockLen;
    for (int t = 0; t < 4; ++t)
      st8(to + i + 8 * t, _mm256_add_epi32(delta_unpredict8<Order>(v[t], ce, cq), ld8(local + i + 8 * t)));
  }
  if (full < nb) {
    const size_t i = full * kBlockLen;
    const int m = int(n - i);
    alignas(32) int32_t buf[kBlockLen] = {};
    if (!block_decode_one(p, wr.next(full), m, buf)) return Status::Corrupt;
    for (int t = 0; t < 4; ++t) {
      v[t] = ld8(buf + 8 * t);
      if (t == 0 && full == 0) v[0] = first_delta_regs<Order>(v[0]);
      st8(buf + 8 * t, delta_unpredict8<Order>(v[t], ce, cq));
    }
    for (int k = 0; k < m; ++k) to[i + k] = int32_t(uint32_t(local[i + k]) + uint32_t(buf[k]));
  }
  return Status::Ok;
}

#endif  // NCCLZ_BLOCK_X86

}  // namespace

bool block_impl_available(BlockImpl impl) {
  switch (impl) {
    case BlockImpl::Scalar: return true;
    case BlockImpl::Avx2: return cpu_has_avx2();
  }
  return false;
}

BlockImpl block_best_impl() { return cpu_has_avx2() ? BlockImpl::Avx2 : BlockImpl::Scalar; }

template <class Code>
size_t block_encoded_bytes_with(BlockImpl impl, const Code* r, size_t n) {
#if NCCLZ_BLOCK_X86
  if (impl == BlockImpl::Avx2 && cpu_has_avx2()) return encoded_bytes_avx2(r, n);
#endif
  (void)impl;
  return encoded_bytes_scalar(r, n);
}

template <class Code>
size_t block_encode_with(BlockImpl impl, const Code* r, size_t n, uint8_t* dst, size_t cap) {
#if NCCLZ_BLOCK_X86
  if (impl == BlockImpl::Avx2 && cpu_has_avx2()) return encode_avx2(r, n, dst, cap);
#endif
  (void)impl;
  return encode_scalar(r, n, dst, cap);
}

template <class Code>
Status block_decode_with(BlockImpl impl, const uint8_t* src, size_t len, size_t n, Code* out) {
#if NCCLZ_BLOCK_X86
  if (impl == BlockImpl::Avx2 && cpu_has_avx2()) return decode_avx2(src, len, n, out);
#endif
  (void)impl;
  return decode_scalar(src, len, n, out);
}

template <class Code>
size_t block_encoded_bytes(const Code* r, size_t n) {
  return block_encoded_bytes_with(block_best_impl(), r, n);
}

template <class Code>
size_t block_encode(const Code* r, size_t n, uint8_t* dst, size_t cap) {
  return block_encode_with(block_best_impl(), r, n, dst, cap);
}

template <class Code>
Status block_decode(const uint8_t* src, size_t len, size_t n, Code* out) {
  return block_decode_with(block_best_impl(), src, len, n, out);
}

size_t block_encode_predicted(const int32_t* q, size_t n, Predictor p, uint8_t* dst, size_t cap) {
  if (!is_delta_predictor(p)) return kNoFit;  // (not offered)
  if (p == Predictor::None) return block_encode(q, n, dst, cap);
#if NCCLZ_BLOCK_X86
  if (cpu_has_avx2()) {
    if (p == Predictor::Delta1) return encode_predicted_avx2<1>(q, n, dst, cap);
    if (p == Predictor::Delta2) return encode_predicted_avx2<2>(q, n, dst, cap);
  }
#endif
  thread_local std::vector<int32_t> r;
  if (r.size() < n) r.resize(n);
  predict(q, n, p, 0, 0, r.data());
  return block_encode(r.data(), n, dst, cap);
}

Status block_decode_add(const uint8_t* src, size_t len, size_t n, Predictor p, const int32_t* local, int32_t* to) {
  if (!is_delta_predictor(p)) return Status::Unsupported;
#if NCCLZ_BLOCK_X86
  if (cpu_has_avx2()) {
    switch (p) {
      case Predictor::None: return decode_add_avx2<0>(src, len, n, local, to);
      case Predictor::Delta1: return decode_add_avx2<1>(src, len, n, local, to);
      case Predictor::Delta2: return decode_add_avx2<2>(src, len, n, local, to);
      default: break;
    }
  }
#endif
  thread_local std::vector<int32_t> q;
  if (q.size() < n) q.resize(n);
  const Status s = block_decode(src, len, n, q.data());
  if (s != Status::Ok) return s;
  reconstruct(q.data(), n, p, 0, 0, q.data());
  for (size_t i = 0; i < n; ++i) to[i] = int32_t(uint32_t(local[i]) + uint32_t(q[i]));
  return Status::Ok;
}

#define NCCLZ_BLOCK_INSTANTIATE(Code)                                                        \
  template size_t block_encoded_bytes<Code>(const Code*, size_t);                            \
  template size_t block_encode<Code>(const Code*, size_t, uint8_t*, size_t);                 \
  template Status block_decode<Code>(const uint8_t*, size_t, size_t, Code*);                 \
  template size_t block_encoded_bytes_with<Code>(BlockImpl, const Code*, size_t);            \
  template size_t block_encode_with<Code>(BlockImpl, const Code*, size_t, uint8_t*, size_t); \
  template Status block_decode_with<Code>(BlockImpl, const uint8_t*, size_t, size_t, Code*);

NCCLZ_BLOCK_INSTANTIATE(int32_t)
NCCLZ_BLOCK_INSTANTIATE(int64_t)

}  // namespace ncclz::codec
