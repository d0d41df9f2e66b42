// Lossless float coder (FloatExp). Layout: docs/FORMAT.md, "FloatExp".
#include "codec/float_coder.hpp"

#include <cstring>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/cpu_features.hpp"
#include "codec/rans_coder.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NCCLZ_FLOAT_X86 1
#define NCCLZ_FLOAT_AVX2 __attribute__((target("avx2")))
#else
#define NCCLZ_FLOAT_X86 0
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ncclz codecs load and store little-endian words with memcpy: little-endian hosts only"
#endif

namespace ncclz::codec {
namespace {

bool is_float_type(ElemType t) { return t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16; }

uint8_t* exp_scratch(size_t n) {
  thread_local std::vector<uint8_t> v;
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline uint32_t ld32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void st32(void* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline uint16_t ld16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void st16(void* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline uint64_t ld64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void st64(void* p, uint64_t v) { std::memcpy(p, &v, 8); }

#if NCCLZ_FLOAT_X86
// The split and join with AVX2, 8 float32 or 32 bfloat16 values per step (16
// for the bfloat16 join): the same bytes as the loops below, which call them
// first (VECTOR_PREFIX) and finish from the value they return. Every load and
// store stays inside its buffer's n values.
NCCLZ_FLOAT_AVX2 size_t split_f32_avx2(const uint8_t* x, size_t n, uint8_t* e, uint8_t* plane) {
  const __m256i sign = _mm256_set1_epi32(0x800000), mant = _mm256_set1_epi32(0x7FFFFF);
  // Per 128-bit half: the 3 low bytes of each value (12 bytes), then its exponent bytes.
  const __m256i three = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                                         0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i first = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                         0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i pack24 = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);  // 24 plane bytes first
  const __m256i pack8 = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);   // 8 exponent bytes first
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 4 * i));
    const __m256i sm = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(b, 8), sign), _mm256_and_si256(b, mant));
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(sm, three), pack24);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(plane + 3 * i), _mm256_castsi256_si128(p));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(plane + 3 * i + 16), _mm256_extracti128_si256(p, 1));
    const __m256i ex = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(_mm256_srli_epi32(b, 23), first), pack8);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(e + i), _mm256_castsi256_si128(ex));
  }
  return i;
}
NCCLZ_FLOAT_AVX2 size_t join_f32_avx2(const uint8_t* e, const uint8_t* plane, size_t n, uint8_t* x) {
  const __m256i sign = _mm256_set1_epi32(0x800000), mant = _mm256_set1_epi32(0x7FFFFF);
  const __m256i spread = _mm256_setr_epi32(0, 1, 2, 2, 3, 4, 5, 5);  // 12 plane bytes per half
  const __m256i four = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,  //
                                        0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(plane + 3 * i));
    const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(plane + 3 * i + 16));
    const __m256i p = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const __m256i sm = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(p, spread), four);
    const __m256i ex = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + i)));
    const __m256i v =
        _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(sm, sign), 8), _mm256_slli_epi32(ex, 23)),
                        _mm256_and_si256(sm, mant));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 4 * i), v);
  }
  return i;
}
NCCLZ_FLOAT_AVX2 size_t split_bf16_avx2(const uint8_t* x, size_t n, uint8_t* e, uint8_t* plane) {
  const __m256i low8 = _mm256_set1_epi16(0xFF), sign = _mm256_set1_epi16(0x80), mant = _mm256_set1_epi16(0x7F);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2 * i));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2 * i + 32));
    // packus works per 128-bit half: the 64-bit quarters come out in the order 0, 2, 1, 3.
    const __m256i ex = _mm256_packus_epi16(_mm256_and_si256(_mm256_srli_epi16(b0, 7), low8),
                                           _mm256_and_si256(_mm256_srli_epi16(b1, 7), low8));
    const __m256i p0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b0, 8), sign), _mm256_and_si256(b0, mant));
    const __m256i p1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 8), sign), _mm256_and_si256(b1, mant));
    const __m256i p = _mm256_packus_epi16(p0, p1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(e + i), _mm256_permute4x64_epi64(ex, 0xD8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(plane + i), _mm256_permute4x64_epi64(p, 0xD8));
  }
  return i;
}
NCCLZ_FLOAT_AVX2 size_t join_bf16_avx2(const uint8_t* e, const uint8_t* plane, size_t n, uint8_t* x) {
  const __m256i sign = _mm256_set1_epi16(0x80), mant = _mm256_set1_epi16(0x7F);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i ex = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + i)));
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(plane + i)));
    const __m256i v =
        _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(sm, sign), 8), _mm256_slli_epi16(ex, 7)),
                        _mm256_and_si256(sm, mant));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 2 * i), v);
  }
  return i;
}
#define VECTOR_PREFIX(call) (cpu_has_avx2() ? (call) : size_t(0))
#else
#define VECTOR_PREFIX(call) size_t(0)
#endif

// ---- F32: exponent = bits 30..23; plane value = sign << 23 | mantissa (3 bytes LE).
void split_f32(const uint8_t* x, size_t n, uint8_t* e, uint8_t* plane) {
  for (size_t i = VECTOR_PREFIX(split_f32_avx2(x, n, e, plane)); i < n; ++i) {
    const uint32_t b = ld32(x + 4 * i);
    e[i] = uint8_t(b >> 23);
    const uint32_t sm = ((b >> 8) & 0x800000u) | (b & 0x7FFFFFu);
    if (i + 1 < n) {
      st32(plane + 3 * i, sm);  // the 4th byte is overwritten by the next value
    } else {
      plane[3 * i] = uint8_t(sm);
      plane[3 * i + 1] = uint8_t(sm >> 8);
      plane[3 * i + 2] = uint8_t(sm >> 16);
    }
  }
}
void join_f32(const uint8_t* e, const uint8_t* plane, size_t n, uint8_t* x) {
  for (size_t i = VECTOR_PREFIX(join_f32_avx2(e, plane, n, x)); i < n; ++i) {
    uint32_t sm;
    if (i + 1 < n)
      sm = ld32(plane + 3 * i) & 0xFFFFFFu;
    else
      sm = uint32_t(plane[3 * i]) | (uint32_t(plane[3 * i + 1]) << 8) | (uint32_t(plane[3 * i + 2]) << 16);
    st32(x + 4 * i, ((sm & 0x800000u) << 8) | (uint32_t(e[i]) << 23) | (sm & 0x7FFFFFu));
  }
}

// ---- BF16: exponent = bits 14..7; plane byte = sign << 7 | mantissa.
void split_bf16(const uint8_t* x, size_t n, uint8_t* e, uint8_t* plane) {
  for (size_t i = VECTOR_PREFIX(split_bf16_avx2(x, n, e, plane)); i < n; ++i) {
    const uint32_t b = ld16(x + 2 * i);
    e[i] = uint8_t(b >> 7);
    plane[i] = uint8_t(((b >> 8) & 0x80u) | (b & 0x7Fu));
  }
}
void join_bf16(const uint8_t* e, const uint8_t* plane, size_t n, uint8_t* x) {
  for (size_t i = VECTOR_PREFIX(join_bf16_avx2(e, plane, n, x)); i < n; ++i) {
    const uint32_t sm = plane[i];
    st16(x + 2 * i, uint16_t(((sm & 0x80u) << 8) | (uint32_t(e[i]) << 7) | (sm & 0x7Fu)));
  }
}

// ---- F16: exponent = bits 14..10; plane value = sign << 10 | mantissa, 11 bits,
// LSB-first: value i occupies plane bits [11 i, 11 i + 11). Groups of 8 values = 11 bytes.
inline uint32_t f16_sm(uint32_t b) { return ((b >> 5) & 0x400u) | (b & 0x3FFu); }
inline void pack8_f16(const uint32_t* v, uint8_t* out11) {
  const uint64_t lo = uint64_t(v[0]) | (uint64_t(v[1]) << 11) | (uint64_t(v[2]) << 22) | (uint64_t(v[3]) << 33) |
                      (uint64_t(v[4]) << 44) | (uint64_t(v[5]) << 55);
  const uint32_t hi = (v[5] >> 9) | (v[6] << 2) | (v[7] << 13);
  st64(out11, lo);
  out11[8] = uint8_t(hi);
  out11[9] = uint8_t(hi >> 8);
  out11[10] = uint8_t(hi >> 16);
}
inline void unpack8_f16(const uint8_t* in11, uint32_t* v) {
  const uint64_t lo = ld64(in11);
  const uint32_t hi = uint32_t(in11[8]) | (uint32_t(in11[9]) << 8) | (uint32_t(in11[10]) << 16);
  v[0] = uint32_t(lo) & 0x7FF;
  v[1] = uint32_t(lo >> 11) & 0x7FF;
  v[2] = uint32_t(lo >> 22) & 0x7FF;
  v[3] = uint32_t(lo >> 33) & 0x7FF;
  v[4] = uint32_t(lo >> 44) & 0x7FF;
  v[5] = (uint32_t(lo >> 55) | (hi << 9)) & 0x7FF;
  v[6] = (hi >> 2) & 0x7FF;
  v[7] = (hi >> 13) & 0x7FF;
}
void split_f16(const uint8_t* x, size_t n, uint8_t* e, uint8_t* plane) {
  size_t i = 0;
  uint32_t v[8];
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const uint32_t b = ld16(x + 2 * (i + k));
      e[i + k] = uint8_t((b >> 10) & 0x1F);
      v[k] = f16_sm(b);
    }
    pack8_f16(v, plane + i / 8 * 11);
  }
  if (i < n) {
    const size_t m = n - i;
    for (size_t k = 0; k < 8; ++k) {
      const uint32_t b = k < m ? ld16(x + 2 * (i + k)) : 0;
      if (k < m) e[i + k] = uint8_t((b >> 10) & 0x1F);
      v[k] = f16_sm(b);
    }
    uint8_t tmp[11];
    pack8_f16(v, tmp);
    std::memcpy(plane + i / 8 * 11, tmp, (11 * m + 7) / 8);
  }
}
// Returns false if a padding bit of the last byte is set or an exponent exceeds 31.
bool join_f16(const uint8_t* e, const uint8_t* plane, size_t n, uint8_t* x) {
  size_t i = 0;
  uint32_t v[8];
  uint32_t bad = 0;
  for (; i + 8 <= n; i += 8) {
    unpack8_f16(plane + i / 8 * 11, v);
    for (int k = 0; k < 8; ++k) {
      const uint32_t ex = e[i + k];
      bad |= ex;
      st16(x + 2 * (i + k), uint16_t(((v[k] & 0x400u) << 5) | (ex << 10) | (v[k] & 0x3FFu)));
    }
  }
  if (i < n) {
    const size_t m = n - i;
    uint8_t tmp[11] = {};
    std::memcpy(tmp, plane + i / 8 * 11, (11 * m + 7) / 8);
    unpack8_f16(tmp, v);
    for (size_t k = m; k < 8; ++k)
      if (v[k]) return false;  // padding must be zero
    for (size_t k = 0; k < m; ++k) {
      const uint32_t ex = e[i + k];
      bad |= ex;
      st16(x + 2 * (i + k), uint16_t(((v[k] & 0x400u) << 5) | (ex << 10) | (v[k] & 0x3FFu)));
    }
  }
  return (bad >> 5) == 0;
}

inline uint32_t exponent_at(const uint8_t* x, ElemType t, size_t i) {
  switch (t) {
    case ElemType::F32: return (ld32(x + 4 * i) >> 23) & 0xFF;
    case ElemType::BF16: return (ld16(x + 2 * i) >> 7) & 0xFF;
    default: return (ld16(x + 2 * i) >> 10) & 0x1F;
  }
}

}  // namespace

size_t floatexp_plane_bytes(ElemType t, size_t n) {
  switch (t) {
    case ElemType::F32: return 3 * n;
    case ElemType::BF16: return n;
    case ElemType::F16: return (11 * n + 7) / 8;
    default: return 0;
  }
}

void floatexp_split(const void* x, ElemType t, size_t n, uint8_t* e, uint8_t* plane) {
  const uint8_t* src = static_cast<const uint8_t*>(x);
  switch (t) {
    case ElemType::F32: split_f32(src, n, e, plane); break;
    case ElemType::BF16: split_bf16(src, n, e, plane); break;
    default: split_f16(src, n, e, plane); break;
  }
}

bool floatexp_join(const uint8_t* e, const uint8_t* plane, ElemType t, size_t n, void* out) {
  uint8_t* dst = static_cast<uint8_t*>(out);
  switch (t) {
    case ElemType::F32: join_f32(e, plane, n, dst); return true;
    case ElemType::BF16: join_bf16(e, plane, n, dst); return true;
    default: return join_f16(e, plane, n, dst);
  }
}

size_t floatexp_estimate_bytes(const void* x, ElemType t, size_t n, uint32_t sample_every) {
  if (!is_float_type(t)) return kNoFit;
  if (n == 0) return 0;
  if (sample_every == 0) sample_every = 1;
  const uint8_t* p = static_cast<const uint8_t*>(x);
  uint32_t hist[kRansAlphabet] = {};
  uint64_t total = 0;
  for (size_t i = 0; i < n; i += sample_every) {
    ++hist[exponent_at(p, t, i)];
    ++total;
  }
  return 4 + rans_estimate_bytes(hist, total, 0, n) + floatexp_plane_bytes(t, n);
}

size_t floatexp_encode(const void* x, ElemType t, size_t n, uint8_t* dst, size_t cap) {
  if (!is_float_type(t)) return kNoFit;
  if (n == 0) return 0;
  const size_t plane = floatexp_plane_bytes(t, n);
  if (cap < 4 + plane) return kNoFit;
  const uint8_t* src = static_cast<const uint8_t*>(x);
  uint8_t* e = exp_scratch(n);
  // The plane goes at the end of the usable capacity first, then moves behind
  // the exponent stream once that stream's length is known.
  uint8_t* tmp_plane = dst + cap - plane;
  floatexp_split(src, t, n, e, tmp_plane);
  const size_t eb = rans_encode_bytes(e, n, dst + 4, cap - 4 - plane);
  if (eb == kNoFit || eb > 0xFFFFFFFFu) return kNoFit;
  store_u32(dst, uint32_t(eb));
  std::memmove(dst + 4 + eb, tmp_plane, plane);
  return 4 + eb + plane;
}

Status floatexp_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* out) {
  if (!is_float_type(t)) return Status::Unsupported;
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || !out || len < 4) return Status::Corrupt;
  const uint64_t eb = load_u32(src);
  const size_t plane = floatexp_plane_bytes(t, n);
  if (uint64_t(len) - 4 < eb || uint64_t(len) - 4 - eb != plane) return Status::Corrupt;
  uint8_t* e = exp_scratch(n);
  const Status s = rans_decode_bytes(src + 4, size_t(eb), n, e);
  if (s != Status::Ok) return Status::Corrupt;
  const uint8_t* pl = src + 4 + eb;
  return floatexp_join(e, pl, t, n, out) ? Status::Ok : Status::Corrupt;
}

}  // namespace ncclz::codec
