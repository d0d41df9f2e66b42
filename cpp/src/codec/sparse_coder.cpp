// Sparse coder: k, gaps and values of the nonzero residuals, each stream coded
// by the Rans coder (its public functions), the nearly uniform low bits of
// large gaps and values kept raw. Layout and decoder checks: docs/FORMAT.md,
// section "Sparse".
#include "codec/sparse_coder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/cpu_features.hpp"
#include "codec/rans_coder.hpp"
#include "codec/thread_buffer.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NCCLZ_SPARSE_X86 1
#else
#define NCCLZ_SPARSE_X86 0
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ncclz codecs load and store little-endian words with memcpy: little-endian hosts only"
#endif

namespace ncclz::codec {
namespace {

// ---------------------------------------------------------------- scratch
// Per-thread buffers, one per (element type, use), grown on demand (the send
// loops call the coder per slice).
enum Use { kPos, kNzVal, kGap, kVal, kGapRes, kValRes, kBits };
template <int kUse>
struct UseTag {};
template <class T, int kUse>
T* scratch(size_t n) {
  return thread_buffer<T, UseTag<kUse>>(n);
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian host
}
inline void store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

inline int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }
inline uint64_t low_mask(int nb) { return nb >= 64 ? ~uint64_t(0) : (uint64_t(1) << nb) - 1; }

template <class Code>
constexpr int code_bits() {
  return int(sizeof(Code) * 8);
}

// ---------------------------------------------------------------- nonzero scan
// The scans write the positions of the nonzeros to pos and their values to
// val (both with room for n), and return their number.
template <class Code>
size_t scan_scalar(const Code* r, size_t i, size_t n, uint32_t* pos, Code* val, size_t k) {
  for (; i < n; ++i) {
    pos[k] = uint32_t(i);  // branch-free: the slots are overwritten unless r[i] != 0
    val[k] = r[i];
    k += r[i] != 0;
  }
  return k;
}

// The set bits of m are the nonzeros among r[base..base+64).
template <class Code>
inline size_t emit_mask(uint64_t m, const Code* r, size_t base, uint32_t* pos, Code* val, size_t k) {
  while (m) {
    const size_t i = base + size_t(__builtin_ctzll(m));
    pos[k] = uint32_t(i);
    val[k++] = r[i];  // in L1: the scan just loaded it
    m &= m - 1;
  }
  return k;
}

#if NCCLZ_SPARSE_X86
// SSE2 (every x86-64): a 32-bit mask of the nonzero lanes of 32 int32 values.
inline uint32_t nonzero_mask32_sse2(const int32_t* r) {
  const __m128i z = _mm_setzero_si128();
  const __m128i* p = reinterpret_cast<const __m128i*>(r);
  uint32_t m = 0;
  for (int h = 0; h < 2; ++h) {
    const __m128i c0 = _mm_cmpeq_epi32(_mm_loadu_si128(p + 4 * h + 0), z);
    const __m128i c1 = _mm_cmpeq_epi32(_mm_loadu_si128(p + 4 * h + 1), z);
    const __m128i c2 = _mm_cmpeq_epi32(_mm_loadu_si128(p + 4 * h + 2), z);
    const __m128i c3 = _mm_cmpeq_epi32(_mm_loadu_si128(p + 4 * h + 3), z);
    const __m128i b = _mm_packs_epi16(_mm_packs_epi32(c0, c1), _mm_packs_epi32(c2, c3));
    m |= uint32_t(_mm_movemask_epi8(b)) << (16 * h);
  }
  return ~m;
}
// 16 int64 values -> 16-bit mask.
inline uint32_t nonzero_mask16_sse2(const int64_t* r) {
  const __m128i z = _mm_setzero_si128();
  const __m128i* p = reinterpret_cast<const __m128i*>(r);
  uint32_t m = 0;
  for (int j = 0; j < 8; ++j) {
    const __m128i c = _mm_cmpeq_epi32(_mm_loadu_si128(p + j), z);
    const __m128i both = _mm_and_si128(c, _mm_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1)));
    m |= uint32_t(_mm_movemask_pd(_mm_castsi128_pd(both))) << (2 * j);
  }
  return ~m & 0xFFFFu;
}

#define NCCLZ_SPARSE_AVX2 __attribute__((target("avx2")))
// AVX2: 64 int32 (or 32 int64) values per step, all-zero steps skipped with one test.
NCCLZ_SPARSE_AVX2 size_t scan_avx2_i32(const int32_t* r, size_t n, uint32_t* pos, int32_t* val) {
  size_t k = 0, i = 0;
  const __m256i z = _mm256_setzero_si256();
  for (; i + 64 <= n; i += 64) {
    const __m256i* p = reinterpret_cast<const __m256i*>(r + i);
    __m256i v[8];
    for (int j = 0; j < 8; ++j) v[j] = _mm256_loadu_si256(p + j);
    const __m256i o = _mm256_or_si256(_mm256_or_si256(_mm256_or_si256(v[0], v[1]), _mm256_or_si256(v[2], v[3])),
                                      _mm256_or_si256(_mm256_or_si256(v[4], v[5]), _mm256_or_si256(v[6], v[7])));
    if (_mm256_testz_si256(o, o)) continue;
    uint64_t m = 0;
    for (int j = 0; j < 8; ++j)
      m |= uint64_t(uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v[j], z))))) << (8 * j);
    k = emit_mask(~m, r, i, pos, val, k);
  }
  return scan_scalar(r, i, n, pos, val, k);
}
NCCLZ_SPARSE_AVX2 size_t scan_avx2_i64(const int64_t* r, size_t n, uint32_t* pos, int64_t* val) {
  size_t k = 0, i = 0;
  const __m256i z = _mm256_setzero_si256();
  for (; i + 32 <= n; i += 32) {
    const __m256i* p = reinterpret_cast<const __m256i*>(r + i);
    __m256i v[8];
    for (int j = 0; j < 8; ++j) v[j] = _mm256_loadu_si256(p + j);
    const __m256i o = _mm256_or_si256(_mm256_or_si256(_mm256_or_si256(v[0], v[1]), _mm256_or_si256(v[2], v[3])),
                                      _mm256_or_si256(_mm256_or_si256(v[4], v[5]), _mm256_or_si256(v[6], v[7])));
    if (_mm256_testz_si256(o, o)) continue;
    uint32_t m = 0;
    for (int j = 0; j < 8; ++j)
      m |= uint32_t(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(v[j], z)))) << (4 * j);
    k = emit_mask(~m, r, i, pos, val, k);
  }
  return scan_scalar(r, i, n, pos, val, k);
}

// AVX-512F: 64 int32 (or 32 int64) values per step, all-zero steps skipped;
// each vector's nonzero values and their positions are packed with one
// compress each and stored whole (a full vector of room: k <= the position).
// (GCC 12's AVX-512 cast intrinsics start from an "undefined" vector that
// -Wmaybe-uninitialized reports: a known false positive, silenced here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NCCLZ_SPARSE_AVX512 __attribute__((target("avx512f")))
NCCLZ_SPARSE_AVX512 size_t scan_avx512_i32(const int32_t* r, size_t n, uint32_t* pos, int32_t* val) {
  size_t k = 0, i = 0;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 64 <= n; i += 64) {
    __m512i v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm512_loadu_si512(r + i + 16 * j);
    const __m512i o = _mm512_or_si512(_mm512_or_si512(v[0], v[1]), _mm512_or_si512(v[2], v[3]));
    if (_mm512_test_epi32_mask(o, o) == 0) continue;
    for (int j = 0; j < 4; ++j) {  // no test per vector: it would be mispredicted half the time
      const __mmask16 m = _mm512_test_epi32_mask(v[j], v[j]);
      const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(int32_t(uint32_t(i + 16 * size_t(j)))), iota);
      _mm512_storeu_si512(pos + k, _mm512_maskz_compress_epi32(m, idx));
      _mm512_storeu_si512(val + k, _mm512_maskz_compress_epi32(m, v[j]));
      k += size_t(__builtin_popcount(m));
    }
  }
  return scan_scalar(r, i, n, pos, val, k);
}
NCCLZ_SPARSE_AVX512 size_t scan_avx512_i64(const int64_t* r, size_t n, uint32_t* pos, int64_t* val) {
  size_t k = 0, i = 0;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0);
  for (; i + 32 <= n; i += 32) {
    __m512i v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm512_loadu_si512(r + i + 8 * j);
    const __m512i o = _mm512_or_si512(_mm512_or_si512(v[0], v[1]), _mm512_or_si512(v[2], v[3]));
    if (_mm512_test_epi64_mask(o, o) == 0) continue;
    for (int j = 0; j < 4; ++j) {
      const __mmask8 m = _mm512_test_epi64_mask(v[j], v[j]);
      const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(int32_t(uint32_t(i + 8 * size_t(j)))), iota);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pos + k),
                          _mm512_castsi512_si256(_mm512_maskz_compress_epi32(__mmask16(m), idx)));
      _mm512_storeu_si512(val + k, _mm512_maskz_compress_epi64(m, v[j]));
      k += size_t(__builtin_popcount(m));
    }
  }
  return scan_scalar(r, i, n, pos, val, k);
}
#pragma GCC diagnostic pop
#endif

// ---------------------------------------------------------------- low-bit stream
// LSB-first bit writer into a buffer with 8 bytes of slack.
struct BitWriter {
  uint8_t* w;
  uint64_t acc = 0;
  uint32_t n = 0;                      // pending bits in acc, < 8 between calls
  void put(uint64_t v, uint32_t nb) {  // nb <= 56, v < 2^nb
    acc |= v << n;
    n += nb;
    store64(w, acc);
    const uint32_t adv = n >> 3;
    w += adv;
    acc = adv == 8 ? 0 : acc >> (adv * 8);
    n &= 7;
  }
  void put_any(uint64_t v, uint32_t nb) {  // nb <= 64
    if (nb > 56) {
      put(v & 0xFFFFFFFFu, 32);
      put(v >> 32, nb - 32);
    } else {
      put(v, nb);
    }
  }
  void finish() {
    if (n) *w++ = uint8_t(acc);
  }
};

// Reads nb <= 57 bits at bit position bp of a stream that is followed by at
// least 8 readable bytes (the caller checks that).
inline uint64_t get_bits(const uint8_t* s, uint64_t bp, int nb) {
  return (load64(s + (bp >> 3)) >> (bp & 7)) & low_mask(nb);
}
inline uint64_t get_bits_any(const uint8_t* s, uint64_t bp, int nb) {  // nb <= 64
  if (nb <= 57) return get_bits(s, bp, nb);
  return get_bits(s, bp, 32) | (get_bits(s, bp + 32, nb - 32) << 32);
}

// ---------------------------------------------------------------- shift choice
// At most this many values (evenly strided) decide a stream's shift.
constexpr size_t kShiftSample = 1024;
// At most about this many values (evenly strided) give the bit-length
// histograms whose median the shift starts from.
constexpr size_t kLengthSample = 4096;

// Smallest L with at least half the values of bit length <= L.
int median_bit_length(const uint32_t* lens, int max_len, size_t k) {
  uint64_t cum = 0;
  for (int L = 0; L <= max_len; ++L) {
    cum += lens[L];
    if (2 * cum >= k) return L;
  }
  return max_len;
}

// The shift for a stream: 0 (every bit through the entropy coder) or two below
// the median bit length (the low bits of a smooth distribution are nearly
// uniform; the table shrinks), the shift unless shift 0 is estimated clearly
// smaller on a sample of at most kShiftSample values: a spiky distribution
// (few distinct large values) keeps shift 0.
template <class U>
int choose_shift(const U* x, size_t k, const uint32_t* lens, int max_len, size_t counted) {
  const int s = median_bit_length(lens, max_len, counted) - 2;
  if (s <= 0) return 0;
  // Estimated bytes of the frame of x >> t plus the k*t raw bits, t = 0 and s.
  const size_t stride = std::max<size_t>(1, k / kShiftSample);
  uint32_t h0[kRansAlphabet] = {}, hs[kRansAlphabet] = {};
  uint64_t e0 = 0, es = 0, sampled = 0;
  for (size_t i = 0; i < k; i += stride, ++sampled) {
    uint32_t sym, eb;
    uint64_t ev;
    rans_map_zigzag(uint64_t(x[i]), &sym, &eb, &ev);
    ++h0[sym];
    e0 += eb;
    rans_map_zigzag(uint64_t(x[i] >> s), &sym, &eb, &ev);
    ++hs[sym];
    es += eb;
  }
  const size_t est0 = rans_estimate_bytes(h0, sampled, e0, k);
  const size_t ests = rans_estimate_bytes(hs, sampled, es, k) + size_t((uint64_t(k) * uint64_t(s) + 7) / 8);
  // The sample misses rare symbols, more of them with shift 0: keep the shift
  // unless shift 0 is clearly smaller (a spiky distribution: by far).
  return double(est0) < 0.97 * double(ests) ? 0 : s;
}

// Any width (the 16-bit floats' bit patterns): runs of 64 that are all zero
// are skipped after one OR over them (the compiler vectorizes it).
template <class Code>
size_t scan_runs(const Code* r, size_t n, uint32_t* pos, Code* val) {
  size_t k = 0, i = 0;
  for (; i + 64 <= n; i += 64) {
    Code any = 0;
    for (int j = 0; j < 64; ++j) any |= r[i + size_t(j)];
    if (any != 0) k = scan_scalar(r, i, i + 64, pos, val, k);
  }
  return scan_scalar(r, i, n, pos, val, k);
}

template <class Code>
size_t find_nonzeros(SparseScan impl, const Code* r, size_t n, uint32_t* pos, Code* val) {
  if constexpr (sizeof(Code) == 2) {
    return impl == SparseScan::Scalar ? scan_scalar(r, 0, n, pos, val, 0) : scan_runs(r, n, pos, val);
  } else {
#if NCCLZ_SPARSE_X86
    if (impl == SparseScan::Avx512 && cpu_has_avx512f()) {
      if constexpr (sizeof(Code) == 4)
        return scan_avx512_i32(r, n, pos, val);
      else
        return scan_avx512_i64(r, n, pos, val);
    }
    if (impl == SparseScan::Avx2 && cpu_has_avx2()) {
      if constexpr (sizeof(Code) == 4)
        return scan_avx2_i32(r, n, pos, val);
      else
        return scan_avx2_i64(r, n, pos, val);
    }
    if (impl != SparseScan::Scalar) {
      size_t k = 0, i = 0;
      if constexpr (sizeof(Code) == 4) {
        for (; i + 32 <= n; i += 32) k = emit_mask(nonzero_mask32_sse2(r + i), r, i, pos, val, k);
      } else {
        for (; i + 16 <= n; i += 16) k = emit_mask(nonzero_mask16_sse2(r + i), r, i, pos, val, k);
      }
      return scan_scalar(r, i, n, pos, val, k);
    }
#else
    (void)impl;
#endif
    return scan_scalar(r, 0, n, pos, val, 0);
  }
}

SparseScan best_scan() {
#if NCCLZ_SPARSE_X86
  return cpu_has_avx512f() ? SparseScan::Avx512 : cpu_has_avx2() ? SparseScan::Avx2 : SparseScan::Sse2;
#else
  return SparseScan::Scalar;
#endif
}

}  // namespace

// ---------------------------------------------------------------- public

bool sparse_scan_available(SparseScan impl) {
  switch (impl) {
    case SparseScan::Scalar: return true;
    case SparseScan::Sse2: return NCCLZ_SPARSE_X86 != 0;
    case SparseScan::Avx2:
#if NCCLZ_SPARSE_X86
      return cpu_has_avx2();
#else
      return false;
#endif
    case SparseScan::Avx512:
#if NCCLZ_SPARSE_X86
      return cpu_has_avx512f();
#else
      return false;
#endif
  }
  return false;
}

template <class Code>
size_t sparse_find_nonzeros(SparseScan impl, const Code* r, size_t n, uint32_t* pos, Code* val) {
  return find_nonzeros(impl, r, n, pos, val);
}

template <class Code>
size_t sparse_find_nonzeros(const Code* r, size_t n, uint32_t* pos, Code* val) {
  return find_nonzeros(best_scan(), r, n, pos, val);
}

namespace {

// The payload from the nonzeros' positions and values. The gaps are written to
// gap[0..k), which may be pos itself (each position is read before its gap is
// written there).
template <class Code>
size_t encode_nonzeros(const uint32_t* pos, const Code* nz, size_t k, size_t n, uint32_t* gap, uint8_t* dst,
                       size_t cap) {
  using U = std::make_unsigned_t<Code>;
  constexpr int B = code_bits<Code>();
  if (n == 0) return 0;
  if (k == 0) {
    if (cap < 4) return kNoFit;
    store_u32(dst, 0);
    return 4;
  }
  if (cap < kSparseHeadBytes) return kNoFit;

  // Gaps and values zigzag(v) - 1 (gap[0] counts from position 0).
  U* val = scratch<U, kVal>(k);
  uint32_t prev = pos[0];
  gap[0] = prev;
  val[0] = U(rans_zigzag(nz[0]) - 1);
  for (size_t i = 1; i < k; ++i) {
    const uint32_t p = pos[i];
    gap[i] = p - prev - 1;
    prev = p;
    val[i] = U(rans_zigzag(nz[i]) - 1);
  }
  // The histograms of their bit lengths (for the shifts) from an evenly
  // strided sample: a bin increment per element was a third of the encoder's
  // time (consecutive elements mostly hit the same bin).
  uint32_t glen[33] = {}, vlen[65] = {};
  const size_t stride = std::max<size_t>(1, k / kLengthSample);
  size_t sampled = 0;
  for (size_t i = 0; i < k; i += stride, ++sampled) {
    ++glen[bit_length(gap[i])];
    ++vlen[bit_length(val[i])];
  }
  const int gs = choose_shift(gap, k, glen, 32, sampled);
  const int vs = choose_shift(val, k, vlen, B, sampled);

  // Low bits, and the residuals of the two frames.
  const uint64_t low_bits = uint64_t(k) * uint64_t(gs + vs);
  const size_t low_bytes = size_t((low_bits + 7) / 8);
  if (low_bytes > cap - kSparseHeadBytes) return kNoFit;
  int32_t* gres = scratch<int32_t, kGapRes>(k);
  Code* vres = scratch<Code, kValRes>(k);
  if (gs + vs == 0) {
    for (size_t i = 0; i < k; ++i) {
      gres[i] = rans_unzigzag<int32_t>(gap[i]);
      vres[i] = rans_unzigzag<Code>(val[i]);
    }
  } else {
    uint8_t* bits = scratch<uint8_t, kBits>(low_bytes + 16);
    BitWriter bw{bits};
    const uint64_t gm = low_mask(gs), vm = low_mask(vs);
    for (size_t i = 0; i < k; ++i) {
      gres[i] = rans_unzigzag<int32_t>(uint32_t(gap[i] >> gs));
      vres[i] = rans_unzigzag<Code>(U(val[i] >> vs));
      if (gs + vs <= 56) {
        bw.put((uint64_t(val[i]) & vm) << gs | (gap[i] & gm), uint32_t(gs + vs));
      } else {
        bw.put(gap[i] & gm, uint32_t(gs));
        bw.put_any(uint64_t(val[i]) & vm, uint32_t(vs));
      }
    }
    bw.finish();
    std::memcpy(dst + kSparseHeadBytes, bits, low_bytes);
  }
  size_t at = kSparseHeadBytes + low_bytes;
  const size_t gbytes = rans_encode(gres, k, dst + at, cap - at);
  if (gbytes == kNoFit) return kNoFit;
  at += gbytes;
  const size_t vbytes = rans_encode(vres, k, dst + at, cap - at);
  if (vbytes == kNoFit) return kNoFit;
  at += vbytes;
  store_u32(dst, uint32_t(k));
  dst[4] = uint8_t(gs);
  dst[5] = uint8_t(vs);
  store_u32(dst + 6, uint32_t(gbytes));
  return at;
}

}  // namespace

template <class Code>
size_t sparse_encode(const Code* r, size_t n, uint8_t* dst, size_t cap) {
  if (n == 0) return 0;
  uint32_t* pos = scratch<uint32_t, kPos>(n);
  Code* nz = scratch<Code, kNzVal>(n);
  const size_t k = find_nonzeros(best_scan(), r, n, pos, nz);
  return encode_nonzeros(pos, nz, k, n, pos, dst, cap);
}

template <class Code>
size_t sparse_encode_nonzeros(const uint32_t* pos, const Code* val, size_t k, size_t n, uint8_t* dst, size_t cap) {
  return encode_nonzeros(pos, val, k, n, k ? scratch<uint32_t, kGap>(k) : nullptr, dst, cap);
}

namespace {

// Where the decoder puts the nonzeros: kSet out[p] = v (out zeroed first),
// kAdd out[p] += v wrapping, kList the i-th nonzero to pos[i], val[i], kMerge
// the nonzeros of their sum with a list (MergeSink).
enum class Put { kSet, kAdd, kList, kMerge };

template <Put kPut, class Code>
struct Sink {
  Code* out;
  uint32_t* pos;
  size_t i = 0;
  void operator()(uint64_t p, Code v) {
    using U = std::make_unsigned_t<Code>;
    if constexpr (kPut == Put::kAdd) {
      out[p] = Code(U(U(out[p]) + U(v)));
    } else if constexpr (kPut == Put::kSet) {
      out[p] = v;
    } else {
      pos[i] = uint32_t(p);
      out[i++] = v;
    }
  }
};

// The decoded nonzeros (increasing positions) merged with the list a: the
// sum's nonzeros go to pos/out in order; finish() appends what is left of a.
template <class Code>
struct MergeSink {
  using U = std::make_unsigned_t<Code>;
  Code* out;
  uint32_t* pos;
  const uint32_t* apos;
  const Code* aval;
  size_t ka;
  size_t ia = 0, i = 0;
  void operator()(uint64_t p, Code v) {
    while (ia < ka && apos[ia] < p) {
      pos[i] = apos[ia];
      out[i++] = aval[ia++];
    }
    if (ia < ka && apos[ia] == p) {
      v = Code(U(U(v) + U(aval[ia++])));
      if (v == 0) return;
    }
    pos[i] = uint32_t(p);
    out[i++] = v;
  }
  void finish() {
    for (; ia < ka; ++ia) {
      pos[i] = apos[ia];
      out[i++] = aval[ia];
    }
  }
};

template <Put kPut, class Code, class S>
Status sparse_decode_impl(const uint8_t* src, size_t len, size_t n, S& put) {
  using U = std::make_unsigned_t<Code>;
  constexpr bool kZeroFirst = kPut == Put::kSet;
  Code* out = put.out;
  constexpr int B = code_bits<Code>();
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || len < 4) return Status::Corrupt;
  const uint32_t k = load_u32(src);
  if (k > n) return Status::Corrupt;
  // The lists' buffers may be empty (null) when there is nothing to list.
  if (!out && (k > 0 || kZeroFirst)) return Status::Corrupt;
  if (k == 0) {
    if (len != 4) return Status::Corrupt;
    if constexpr (kZeroFirst) std::memset(out, 0, n * sizeof(Code));
    return Status::Ok;
  }
  if (len < kSparseHeadBytes) return Status::Corrupt;
  const int gs = src[4], vs = src[5];
  if (gs > 31 || vs > B - 1) return Status::Corrupt;
  const size_t gbytes = load_u32(src + 6);
  const uint64_t low_bits = uint64_t(k) * uint64_t(gs + vs);
  const uint64_t low_bytes = (low_bits + 7) / 8;
  size_t rest = len - kSparseHeadBytes;
  if (low_bytes > rest) return Status::Corrupt;
  rest -= size_t(low_bytes);
  if (gbytes > rest) return Status::Corrupt;
  const size_t vbytes = rest - gbytes;
  const uint8_t* low = src + kSparseHeadBytes;
  const uint8_t* gframe = low + low_bytes;
  const uint8_t* vframe = gframe + gbytes;

  int32_t* gres = scratch<int32_t, kGapRes>(k);
  Code* vres = scratch<Code, kValRes>(k);
  if (rans_decode(gframe, gbytes, k, gres) != Status::Ok) return Status::Corrupt;
  if (rans_decode(vframe, vbytes, k, vres) != Status::Ok) return Status::Corrupt;
  // The padding bits of the last low-bit byte are 0.
  if ((low_bits & 7) && (low[low_bytes - 1] >> (low_bits & 7)) != 0) return Status::Corrupt;
  // Bit reads load 8 bytes at a time: the two frames (each at least 72 bytes,
  // else they did not decode) follow the low-bit stream inside the payload.
  if (gbytes + vbytes < 8) return Status::Corrupt;

  if constexpr (kZeroFirst) std::memset(out, 0, n * sizeof(Code));
  constexpr U kMaxZ = U(~U(0));
  uint64_t p = 0;  // candidate position: one past the previous nonzero
  if (gs + vs == 0) {
    for (size_t i = 0; i < k; ++i) {
      p += uint32_t(rans_zigzag(gres[i]));
      const U z = rans_zigzag(vres[i]);
      if (p >= n || z == kMaxZ) return Status::Corrupt;
      put(p++, rans_unzigzag<Code>(U(z + 1)));
    }
    return Status::Ok;
  }
  const uint64_t gm = low_mask(gs);
  const int t = gs + vs;
  uint64_t bp = 0;
  for (size_t i = 0; i < k; ++i) {
    uint64_t glo, vlo;
    if (t <= 57) {
      const uint64_t w = get_bits(low, bp, t);
      glo = w & gm;
      vlo = w >> gs;
    } else {
      glo = get_bits(low, bp, gs);
      vlo = get_bits_any(low, bp + uint64_t(gs), vs);
    }
    bp += uint64_t(t);
    p += (uint64_t(uint32_t(rans_zigzag(gres[i]))) << gs) | glo;
    const U h = rans_zigzag(vres[i]);
    if (p >= n || (vs > 0 && (h >> (B - vs)) != 0)) return Status::Corrupt;
    const U z = U(U(h << vs) | U(vlo));
    if (z == kMaxZ) return Status::Corrupt;
    put(p++, rans_unzigzag<Code>(U(z + 1)));
  }
  return Status::Ok;
}

}  // namespace

template <class Code>
Status sparse_decode(const uint8_t* src, size_t len, size_t n, Code* out) {
  Sink<Put::kSet, Code> put{out, nullptr};
  return sparse_decode_impl<Put::kSet, Code>(src, len, n, put);
}

template <class Code>
Status sparse_decode_add(const uint8_t* src, size_t len, size_t n, Code* out) {
  Sink<Put::kAdd, Code> put{out, nullptr};
  return sparse_decode_impl<Put::kAdd, Code>(src, len, n, put);
}

template <class Code>
Status sparse_decode_nonzeros(const uint8_t* src, size_t len, size_t n, uint32_t* pos, Code* val, size_t* k) {
  Sink<Put::kList, Code> put{val, pos};
  const Status s = sparse_decode_impl<Put::kList, Code>(src, len, n, put);
  *k = s == Status::Ok ? put.i : 0;
  return s;
}

template <class Code>
Status sparse_decode_merge(const uint8_t* src, size_t len, size_t n, const uint32_t* apos, const Code* aval, size_t ka,
                           uint32_t* pos, Code* val, size_t* k) {
  MergeSink<Code> put{val, pos, apos, aval, ka};
  if (ka > 0 && (!val || !pos)) {
    *k = 0;
    return Status::Corrupt;
  }
  const Status s = sparse_decode_impl<Put::kMerge, Code>(src, len, n, put);
  if (s == Status::Ok) put.finish();
  *k = s == Status::Ok ? put.i : 0;
  return s;
}

template size_t sparse_encode<int32_t>(const int32_t*, size_t, uint8_t*, size_t);
template size_t sparse_encode<int64_t>(const int64_t*, size_t, uint8_t*, size_t);
template Status sparse_decode<int32_t>(const uint8_t*, size_t, size_t, int32_t*);
template Status sparse_decode<int64_t>(const uint8_t*, size_t, size_t, int64_t*);
template Status sparse_decode_add<int32_t>(const uint8_t*, size_t, size_t, int32_t*);
template Status sparse_decode_add<int64_t>(const uint8_t*, size_t, size_t, int64_t*);
template Status sparse_decode_nonzeros<int32_t>(const uint8_t*, size_t, size_t, uint32_t*, int32_t*, size_t*);
template Status sparse_decode_nonzeros<int64_t>(const uint8_t*, size_t, size_t, uint32_t*, int64_t*, size_t*);
template size_t sparse_find_nonzeros<int32_t>(SparseScan, const int32_t*, size_t, uint32_t*, int32_t*);
template size_t sparse_find_nonzeros<int64_t>(SparseScan, const int64_t*, size_t, uint32_t*, int64_t*);
template size_t sparse_find_nonzeros<int16_t>(SparseScan, const int16_t*, size_t, uint32_t*, int16_t*);
template size_t sparse_find_nonzeros<int16_t>(const int16_t*, size_t, uint32_t*, int16_t*);
template size_t sparse_find_nonzeros<int32_t>(const int32_t*, size_t, uint32_t*, int32_t*);
template size_t sparse_find_nonzeros<int64_t>(const int64_t*, size_t, uint32_t*, int64_t*);
template size_t sparse_encode_nonzeros<int32_t>(const uint32_t*, const int32_t*, size_t, size_t, uint8_t*, size_t);
template size_t sparse_encode_nonzeros<int64_t>(const uint32_t*, const int64_t*, size_t, size_t, uint8_t*, size_t);
template Status sparse_decode_merge<int32_t>(const uint8_t*, size_t, size_t, const uint32_t*, const int32_t*, size_t,
                                             uint32_t*, int32_t*, size_t*);
template Status sparse_decode_merge<int64_t>(const uint8_t*, size_t, size_t, const uint32_t*, const int64_t*, size_t,
                                             uint32_t*, int64_t*, size_t*);

}  // namespace ncclz::codec
