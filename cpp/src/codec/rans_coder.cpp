// rANS entropy coder: static per-slice table, 8 interleaved 32-bit states,
// 16-bit renormalization. Payload layout and the decoder's checks:
// docs/FORMAT.md, "Rans".
#include "codec/rans_coder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/predictor.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codec/delta_avx2.hpp"
#define NCCLZ_RANS_X86 1
#else
#define NCCLZ_RANS_X86 0
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ncclz codecs load and store little-endian words with memcpy: little-endian hosts only"
#endif

namespace ncclz::codec {
namespace {

constexpr uint32_t kM = 1u << kRansScaleBits;  // frequency total
constexpr uint32_t kL = 1u << 16;              // lower bound of a normalized state
constexpr size_t kBitmapBytes = kRansBitmapBytes;
constexpr size_t kFixedBytes = kRansFixedBytes;  // two lengths + the states
constexpr int kHistTables = 8;                   // histogram sub-tables (no store-to-load chain on repeated symbols)

// ---------------------------------------------------------------- scratch
// Per-thread scratch buffers (symbols, extra bits), grown on demand.
struct Scratch {
  std::vector<uint8_t> syms;
  std::vector<uint8_t> bits;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
uint8_t* grow(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n) v.resize(std::max(n, v.size() + v.size() / 2));
  return v.data();
}

inline void store16(uint8_t* p, uint32_t v) {
  const uint16_t w = uint16_t(v);
  std::memcpy(p, &w, 2);  // little-endian host (x86-64, aarch64)
}
inline uint32_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;  // little-endian host (x86-64, aarch64)
}
inline uint64_t load64_raw(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian host (x86-64, aarch64)
}
inline void store64_raw(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// ---------------------------------------------------------------- table
size_t table_bytes(const uint32_t* freq) {
  size_t b = kBitmapBytes;
  for (int s = 0; s < kRansAlphabet; ++s)
    if (freq[s]) b += (freq[s] - 1) < 128 ? 1 : 2;
  return b;
}

size_t write_table(const uint32_t* freq, uint8_t* dst) {
  std::memset(dst, 0, kBitmapBytes);
  size_t o = kBitmapBytes;
  for (int s = 0; s < kRansAlphabet; ++s) {
    if (!freq[s]) continue;
    dst[s >> 3] |= uint8_t(1u << (s & 7));
    const uint32_t v = freq[s] - 1;
    if (v < 128) {
      dst[o++] = uint8_t(v);
    } else {
      dst[o++] = uint8_t(0x80 | (v & 0x7F));
      dst[o++] = uint8_t(v >> 7);
    }
  }
  return o;
}

// Reads and validates a table: canonical varints, every symbol <= max_sym,
// frequencies summing to exactly kM. *used = bytes read.
bool read_table(const uint8_t* src, size_t len, uint32_t max_sym, uint32_t* freq, size_t* used) {
  if (len < kBitmapBytes) return false;
  size_t o = kBitmapBytes;
  uint32_t sum = 0;
  for (uint32_t s = 0; s < uint32_t(kRansAlphabet); ++s) {
    freq[s] = 0;
    if (!((src[s >> 3] >> (s & 7)) & 1)) continue;
    if (s > max_sym || o >= len) return false;
    uint32_t v = src[o++];
    if (v & 0x80) {
      if (o >= len) return false;
      const uint32_t hi = src[o++];
      if (hi == 0 || hi > (kM - 1) >> 7) return false;
      v = (v & 0x7F) | (hi << 7);
    }
    freq[s] = v + 1;
    sum += v + 1;
    if (sum > kM) return false;
  }
  if (sum != kM) return false;
  *used = o;
  return true;
}

// ---------------------------------------------------------------- coder tables
struct EncSym {
  uint64_t rcp;   // ceil(2^64 / freq) (freq >= 2), 2^64-1 for freq 1
  uint32_t xmax;  // renormalize (emit 16 bits) when x >= xmax: 2^20 * freq (2^32 - 1 for freq 4096,
                  // a single-symbol table whose states stay at kL)
  uint16_t bias;  // cum (freq >= 2), cum + kM - 1 (freq 1): at most 2 * kM
  uint16_t cmpl;  // kM - freq
};
static_assert(sizeof(EncSym) == 16, "one 16-byte entry per symbol");

// x' = (x / f) * kM + x % f + cum, computed as x + bias + q * cmpl with
// q = floor(x * rcp / 2^64) (exact for x < 2^32, f <= 2^12). For f = 1, q = x - 1.
void build_encoder(const uint32_t* freq, EncSym* es) {
  uint32_t cum = 0;
  for (int s = 0; s < kRansAlphabet; ++s) {
    const uint32_t f = freq[s];
    EncSym& e = es[s];
    if (!f) {
      e = EncSym{0, 0, 0, 0};
      continue;
    }
    e.xmax = uint32_t(std::min<uint64_t>((uint64_t(kL >> kRansScaleBits) << 16) * f, 0xFFFFFFFFu));
    e.cmpl = uint16_t(kM - f);
    if (f == 1) {
      e.rcp = ~uint64_t(0);
      e.bias = uint16_t(cum + kM - 1);
    } else {
      e.rcp = (~uint64_t(0)) / f + 1;
      e.bias = uint16_t(cum);
    }
    cum += f;
  }
}

// Decoder table: for each slot, its symbol's freq and slot - cum, and one byte:
// the symbol itself (DecBytes::Symbols), or (DecBytes::Values, integer
// residuals) the residual of a direct symbol as an int8 (-64..63) and s - 64
// (mod 256) for a symbol s >= 128: bit 7 of (byte + 64) is then set exactly for
// the symbols that carry extra bits, and byte + 64 (mod 256) gives the symbol back.
struct DecEntry {
  uint16_t freq;  // 1..4096
  uint16_t bias;  // slot - cum(s)
};
struct DecTable {
  DecEntry e[kM];
  uint8_t sym[kM];
};
enum class DecBytes { Symbols, Values };

inline uint8_t value_byte(uint32_t s) { return s < kRansDirect ? uint8_t(rans_unzigzag<int32_t>(s)) : uint8_t(s - 64); }
inline bool value_needs_bits(uint8_t b) { return uint8_t(b + 64) >= kRansDirect; }
inline uint32_t value_symbol(uint8_t b) { return uint8_t(b + 64); }

// If x < lo: x = t and returns 1, else returns 0; branch-free (a cmov on
// x86-64: compilers turn a plain ternary here into a branch that mispredicts).
inline size_t renorm_select(uint32_t* x, uint32_t t, uint32_t lo) {
#if defined(__x86_64__) && defined(__GNUC__)
  size_t c;
  asm("cmpl %[lo], %[x]\n\t"
      "cmovb %[t], %[x]\n\t"
      "sbb %[c], %[c]"
      : [x] "+r"(*x), [c] "=r"(c)
      : [t] "r"(t), [lo] "ir"(lo)
      : "cc");
  return c & 1;
#else
  const uint32_t below = uint32_t(*x < lo);
  const uint32_t m = 0u - below;
  *x = (t & m) | (*x & ~m);
  return below;
#endif
}
// If x < kL: x = t and ++*q (the next word is consumed); branch-free.
inline void renorm_advance(uint32_t* x, uint32_t t, size_t* q) {
#if defined(__x86_64__) && defined(__GNUC__)
  asm("cmpl %[lo], %[x]\n\t"
      "cmovb %[t], %[x]\n\t"
      "adcq $0, %[q]"
      : [x] "+r"(*x), [q] "+r"(*q)
      : [t] "r"(t), [lo] "i"(kL)
      : "cc");
#else
  *q += renorm_select(x, t, kL);
#endif
}

void build_decoder(const uint32_t* freq, DecBytes bytes, DecTable* t) {
  uint32_t cum = 0;
  for (uint32_t s = 0; s < uint32_t(kRansAlphabet); ++s) {
    const uint32_t f = freq[s];
    if (!f) continue;
    DecEntry* e = t->e + cum;
    for (uint32_t k = 0; k < f; ++k) e[k] = DecEntry{uint16_t(f), uint16_t(k)};
    std::memset(t->sym + cum, bytes == DecBytes::Values ? value_byte(s) : uint8_t(s), f);
    cum += f;
  }
}

// ---------------------------------------------------------------- core encode
// One symbol with its lane's state x, the word (if any) written below *p, never
// below limit. False if it does not fit.
inline bool put_checked(uint32_t& xs, const EncSym& e, uint8_t*& p, const uint8_t* limit) {
  if (xs >= e.xmax) {
    if (p - limit < 2) return false;
    p -= 2;
    store16(p, xs);
    xs >>= 16;
  }
  const uint64_t q = uint64_t((unsigned __int128)xs * e.rcp >> 64);
  xs = uint32_t(xs + e.bias + uint32_t(q) * e.cmpl);
  return true;
}

// Encodes syms[0..n) backwards, writing 16-bit words downwards from `end`, never
// below `limit`. Returns the first byte of the stream, or nullptr if it does not fit.
uint8_t* encode_core(const uint8_t* syms, size_t n, const EncSym* es, uint8_t* limit, uint8_t* end, uint32_t* state) {
  uint32_t x[kRansLanes];
  for (int k = 0; k < kRansLanes; ++k) x[k] = kL;
  uint8_t* p = end;
  // Branch-free step: the word is always stored, the pointer moves only on
  // renormalization (the caller guarantees 2 writable bytes below p).
  auto put_fast = [&](uint32_t& xs, const EncSym& e) {
    // Arithmetic select (GCC turns a ternary back into a branch that mispredicts).
    const uint32_t renorm = uint32_t(xs >= e.xmax);
    store16(p - 2, xs);
    p -= renorm << 1;
    xs >>= renorm << 4;
    const uint64_t q = uint64_t((unsigned __int128)xs * e.rcp >> 64);
    xs = uint32_t(xs + e.bias + uint32_t(q) * e.cmpl);
  };
  size_t i = n;
  while (i % kRansLanes) {
    --i;
    if (!put_checked(x[i % kRansLanes], es[syms[i]], p, limit)) return nullptr;
  }
  while (i) {
    i -= kRansLanes;
    const uint8_t* s = syms + i;
    if (p - limit >= 2 * kRansLanes) {
      put_fast(x[7], es[s[7]]);
      put_fast(x[6], es[s[6]]);
      put_fast(x[5], es[s[5]]);
      put_fast(x[4], es[s[4]]);
      put_fast(x[3], es[s[3]]);
      put_fast(x[2], es[s[2]]);
      put_fast(x[1], es[s[1]]);
      put_fast(x[0], es[s[0]]);
    } else {
      for (int k = kRansLanes - 1; k >= 0; --k)
        if (!put_checked(x[k], es[s[k]], p, limit)) return nullptr;
    }
  }
  for (int k = 0; k < kRansLanes; ++k) state[k] = x[k];
  return p;
}

#if NCCLZ_RANS_X86
#define NCCLZ_RANS_AVX2 __attribute__((target("avx2")))
#define NCCLZ_RANS_AVX2_BMI2 __attribute__((target("avx2,bmi,bmi2")))

// For each 8-bit mask of renormalizing lanes, a byte shuffle that moves the
// 16-bit words of those lanes, in lane order, to the top of a 16-byte vector
// (the encoder stores the vector so that its top ends at the write position).
struct CompactLut {
  alignas(16) uint8_t m[256][16];
  CompactLut() {
    for (int mask = 0; mask < 256; ++mask) {
      const int c = __builtin_popcount(unsigned(mask));
      int o = 16 - 2 * c;
      for (int b = 0; b < 16; ++b) m[mask][b] = 0x80;
      for (int k = 0; k < 8; ++k)
        if (mask & (1 << k)) {
          m[mask][o++] = uint8_t(2 * k);
          m[mask][o++] = uint8_t(2 * k + 1);
        }
    }
  }
};
const CompactLut& compact_lut() {
  static const CompactLut lut;
  return lut;
}

// The table entries of lanes k and k + 4 in one register.
__attribute__((target("avx2"), always_inline)) inline __m256i enc_pair(const EncSym* es, const uint8_t* s, int k) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(es + s[k]))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(es + s[k + 4])), 1);
}

// floor(x * rcp / 2^64) per lane (x < 2^32, rcp = rcp_hi * 2^32 + rcp_lo) =
// floor((x * rcp_hi + floor(x * rcp_lo / 2^32)) / 2^32), from 32x32->64 products.
__attribute__((target("avx2"), always_inline)) inline __m256i mulhi_rcp(__m256i x, __m256i rcp_lo, __m256i rcp_hi) {
  const __m256i xo = _mm256_srli_epi64(x, 32);
  const __m256i qe = _mm256_srli_epi64(
      _mm256_add_epi64(_mm256_mul_epu32(x, rcp_hi), _mm256_srli_epi64(_mm256_mul_epu32(x, rcp_lo), 32)), 32);
  const __m256i qo = _mm256_add_epi64(_mm256_mul_epu32(xo, _mm256_srli_epi64(rcp_hi, 32)),
                                      _mm256_srli_epi64(_mm256_mul_epu32(xo, _mm256_srli_epi64(rcp_lo, 32)), 32));
  return _mm256_blend_epi32(qe, qo, 0xAA);  // odd lanes: high halves of qo
}

// AVX2 encoder: the 8 states in one register, one group of 8 symbols per step.
// Same arithmetic as put_fast (q = high half of x * rcp from two 32x32->64
// products), same words in the same order: byte-identical to encode_core.
NCCLZ_RANS_AVX2 uint8_t* encode_core_avx2(const uint8_t* syms, size_t n, const EncSym* es, uint8_t* limit, uint8_t* end,
                                          uint32_t* state) {
  const CompactLut& lut = compact_lut();
  uint32_t x[kRansLanes];
  for (int k = 0; k < kRansLanes; ++k) x[k] = kL;
  uint8_t* p = end;
  size_t i = n;
  while (i % kRansLanes) {
    --i;
    if (!put_checked(x[i % kRansLanes], es[syms[i]], p, limit)) return nullptr;
  }
  __m256i X = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  while (i) {
    i -= kRansLanes;
    const uint8_t* s = syms + i;
    if (p - limit < 16) {  // near the start of the buffer: checked scalar steps
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(x), X);
      for (int k = kRansLanes - 1; k >= 0; --k)
        if (!put_checked(x[k], es[s[k]], p, limit)) return nullptr;
      X = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      continue;
    }
    // Entries of lanes k and k+4 in one register, then a 4x4 transpose per
    // 128-bit half: rcp_lo, rcp_hi, xmax, bias | cmpl << 16, lanes 0..7.
    const __m256i e0 = enc_pair(es, s, 0), e1 = enc_pair(es, s, 1), e2 = enc_pair(es, s, 2), e3 = enc_pair(es, s, 3);
    const __m256i t0 = _mm256_unpacklo_epi32(e0, e1), t1 = _mm256_unpackhi_epi32(e0, e1);
    const __m256i t2 = _mm256_unpacklo_epi32(e2, e3), t3 = _mm256_unpackhi_epi32(e2, e3);
    const __m256i rcp_lo = _mm256_unpacklo_epi64(t0, t2), rcp_hi = _mm256_unpackhi_epi64(t0, t2);
    const __m256i xmax = _mm256_unpacklo_epi64(t1, t3), bc = _mm256_unpackhi_epi64(t1, t3);
    // Renormalization: lanes with x >= xmax emit x mod 2^16 and shift.
    const __m256i ge = _mm256_cmpeq_epi32(_mm256_max_epu32(X, xmax), X);
    const unsigned mask = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(ge)));
    const __m256i w32 = _mm256_and_si256(X, lo16);
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(w32, w32), 0x08);  // w0..w7 in the low half
    const __m128i words =
        _mm_shuffle_epi8(_mm256_castsi256_si128(w16), _mm_load_si128(reinterpret_cast<const __m128i*>(lut.m[mask])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p - 16), words);
    p -= 2 * __builtin_popcount(mask);
    // q = floor(x * rcp / 2^64) per lane, for both x and x >> 16 (the state after
    // renormalization), chosen after: the multiplies do not wait for the
    // renormalization test (a shorter chain per group).
    const __m256i XS = _mm256_srli_epi32(X, 16);
    const __m256i q = _mm256_blendv_epi8(mulhi_rcp(X, rcp_lo, rcp_hi), mulhi_rcp(XS, rcp_lo, rcp_hi), ge);
    X = _mm256_blendv_epi8(X, XS, ge);
    // x' = x + bias + q * cmpl
    const __m256i bias = _mm256_and_si256(bc, lo16), cmpl = _mm256_srli_epi32(bc, 16);
    X = _mm256_add_epi32(_mm256_add_epi32(X, bias), _mm256_mullo_epi32(q, cmpl));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state), X);
  return p;
}

bool rans_cpu_has_avx2() {
  // (BMI2 too: the decoder's AVX2 pass uses it; every AVX2 x86-64 CPU in use has both.)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
  return has;
}
#else
bool rans_cpu_has_avx2() { return false; }
#endif  // NCCLZ_RANS_X86

// ---------------------------------------------------------------- core decode
// The end of a decoding step, branch-free: x += bias, then if x < kL,
// x = (x << 16) | (word q) and ++q. The word at q is always read (the caller
// guarantees that it lies inside the stream).
inline void add_renorm(uint32_t* x, uint32_t bias, const uint8_t* base, size_t* q) {
#if defined(__x86_64__) && defined(__GNUC__)
  // In assembly for two reasons (the step is limited by instructions per
  // cycle and by the latency of the state chain): the word is read by the
  // `or` itself, and the add stays a 2-operand add (the compiler's 3-operand
  // lea took a zero displacement with some base registers, a slower lea).
  uint32_t t;
  asm("addl %[b], %[x]\n\t"
      "movl %[x], %[t]\n\t"
      "shll $16, %[t]\n\t"
      "orw %[w], %w[t]\n\t"
      "cmpl %[lo], %[x]\n\t"
      "cmovb %[t], %[x]\n\t"
      "adcq $0, %[q]"
      : [x] "+r"(*x), [q] "+r"(*q), [t] "=&r"(t)
      : [b] "r"(bias), [w] "m"(*reinterpret_cast<const uint16_t*>(base + 2 * *q)), [lo] "i"(kL)
      : "cc");
#else
  *x += bias;
  renorm_advance(x, (*x << 16) | load16(base + 2 * *q), q);
#endif
}

// One decoding step of state X, writing the slot's table byte to O.
#define NCCLZ_RANS_DEC_STEP(X, O)                      \
  do {                                                 \
    const uint32_t slot_ = (X) & (kM - 1);             \
    const DecEntry e_ = dt.e[slot_];                   \
    (O) = dt.sym[slot_];                               \
    (X) = uint32_t(e_.freq) * ((X) >> kRansScaleBits); \
    add_renorm(&(X), e_.bias, base, &q);               \
  } while (0)

// Decodes n symbols (their table bytes) from the word stream [p, end) with the
// given initial states; requires that the stream is consumed exactly and every
// state ends at kL.
bool decode_core(const uint8_t* p, const uint8_t* end, const uint32_t* state, const DecTable& dt, size_t n,
                 uint8_t* out) {
  for (int k = 0; k < kRansLanes; ++k)
    if (state[k] < kL) return false;
  // The 8 states in named locals (an array ends up on the stack).
  uint32_t x0 = state[0], x1 = state[1], x2 = state[2], x3 = state[3];
  uint32_t x4 = state[4], x5 = state[5], x6 = state[6], x7 = state[7];
  const uint8_t* const base = p;
  size_t q = 0;                                  // read position, in words from base
  const size_t q_last = size_t(end - base) / 2;  // words in the stream
  size_t i = 0;
  // Fast path: a group of 8 symbols reads at most 8 words, so g groups with
  // 8 * g words left need no bounds check.
  for (;;) {
    const size_t g = std::min((n - i) / kRansLanes, (q_last - q) / kRansLanes);
    if (!g) break;
    uint8_t* o = out + i;
    uint8_t* const o_end = o + kRansLanes * g;
    do {
      NCCLZ_RANS_DEC_STEP(x0, o[0]);
      NCCLZ_RANS_DEC_STEP(x1, o[1]);
      NCCLZ_RANS_DEC_STEP(x2, o[2]);
      NCCLZ_RANS_DEC_STEP(x3, o[3]);
      NCCLZ_RANS_DEC_STEP(x4, o[4]);
      NCCLZ_RANS_DEC_STEP(x5, o[5]);
      NCCLZ_RANS_DEC_STEP(x6, o[6]);
      NCCLZ_RANS_DEC_STEP(x7, o[7]);
      o += kRansLanes;
    } while (o != o_end);
    i += kRansLanes * g;
  }
  // The rest, checked symbol by symbol.
  uint32_t x[kRansLanes] = {x0, x1, x2, x3, x4, x5, x6, x7};
  p = base + 2 * q;
  for (; i < n; ++i) {
    uint32_t& xs = x[i % kRansLanes];
    const uint32_t slot = xs & (kM - 1);
    const DecEntry e = dt.e[slot];
    out[i] = dt.sym[slot];
    xs = uint32_t(e.freq) * (xs >> kRansScaleBits) + e.bias;
    if (xs < kL) {
      if (end - p < 2) return false;
      xs = (xs << 16) | load16(p);
      p += 2;
    }
  }
  if (p != end) return false;
  for (int k = 0; k < kRansLanes; ++k)
    if (x[k] != kL) return false;
  return true;
}
#undef NCCLZ_RANS_DEC_STEP

// ---------------------------------------------------------------- framing
// Writes table, lengths, states, the extra-bit stream and the rANS stream.
// syms/hist describe the symbols; xb/xbytes the (already packed) extra bits.
size_t encode_framed(RansImpl impl, const uint8_t* syms, size_t n, const uint32_t* hist, const uint8_t* xb,
                     size_t xbytes, uint8_t* dst, size_t cap) {
  uint32_t freq[kRansAlphabet];
  rans_normalize(hist, n, freq);
  const size_t tb = table_bytes(freq);
  const size_t head = tb + kFixedBytes;
  if (head > cap || xbytes > cap - head) return kNoFit;
  write_table(freq, dst);
  EncSym es[kRansAlphabet];
  build_encoder(freq, es);
  uint8_t* const data = dst + head + xbytes;  // start of the rANS stream
  uint32_t state[kRansLanes];
  uint8_t* p;
#if NCCLZ_RANS_X86
  if (impl == RansImpl::Avx2 && rans_cpu_has_avx2())
    p = encode_core_avx2(syms, n, es, data, dst + cap, state);
  else
#endif
    p = encode_core(syms, n, es, data, dst + cap, state);
  (void)impl;
  if (!p) return kNoFit;
  const size_t rbytes = size_t((dst + cap) - p);
  if (rbytes > 0xFFFFFFFFu || xbytes > 0xFFFFFFFFu) return kNoFit;
  std::memmove(data, p, rbytes);
  if (xbytes) std::memcpy(dst + head, xb, xbytes);
  store_u32(dst + tb, uint32_t(xbytes));
  store_u32(dst + tb + 4, uint32_t(rbytes));
  for (int k = 0; k < kRansLanes; ++k) store_u32(dst + tb + 8 + 4 * k, state[k]);
  return head + xbytes + rbytes;
}

// Parses the frame and decodes the n symbols into syms (their table bytes,
// see DecBytes). On success the extra-bit stream is [*xb, *xb + *xbytes) and
// freq holds the table.
bool decode_framed(const uint8_t* src, size_t len, size_t n, uint32_t max_sym, DecBytes bytes, uint8_t* syms,
                   uint32_t* freq, const uint8_t** xb, size_t* xbytes) {
  size_t tb = 0;
  if (!read_table(src, len, max_sym, freq, &tb)) return false;
  if (len - tb < kFixedBytes) return false;
  const uint64_t xlen = load_u32(src + tb);
  const uint64_t rlen = load_u32(src + tb + 4);
  const size_t head = tb + kFixedBytes;
  if (rlen & 1) return false;
  if (uint64_t(len - head) != xlen + rlen) return false;
  uint32_t state[kRansLanes];
  for (int k = 0; k < kRansLanes; ++k) state[k] = load_u32(src + tb + 8 + 4 * k);
  *xb = src + head;
  *xbytes = size_t(xlen);
  // A single symbol (freq kM) maps every state to itself and never renormalizes:
  // decode_core would accept exactly the frames with all states kL and no words.
  for (uint32_t s = 0; s < uint32_t(kRansAlphabet); ++s) {
    if (freq[s] == kM) {
      if (rlen != 0) return false;
      for (int k = 0; k < kRansLanes; ++k)
        if (state[k] != kL) return false;
      std::memset(syms, bytes == DecBytes::Values ? value_byte(s) : uint8_t(s), n);
      return true;
    }
    if (freq[s]) break;  // the first present symbol has freq < kM: not a single-symbol table
  }
  thread_local DecTable tls_table;
  DecTable* dt = &tls_table;
#if defined(__GNUC__)
  // An opaque pointer: addressed as the thread_local itself, every table load
  // in the decode loop took a %fs segment prefix (slower: docs/BENCHMARKS.md,
  // "Measurements behind the code").
  asm("" : "+r"(dt));
#endif
  build_decoder(freq, bytes, dt);
  const uint8_t* r = src + head + xlen;
  return decode_core(r, r + rlen, state, *dt, n, syms);
}

// ---------------------------------------------------------------- extra bits
// LSB-first bit writer into a buffer with at least 8 bytes of slack.
struct BitWriter {
  uint8_t* w;
  uint64_t acc = 0;
  uint32_t n = 0;                      // pending bits in acc, < 8 between calls
  void put(uint64_t v, uint32_t nb) {  // nb <= 56
    acc |= v << n;
    n += nb;
    store64_raw(w, acc);
    const uint32_t adv = n >> 3;
    w += adv;
    acc >>= adv * 8;  // adv <= 7
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
  uint8_t* finish() {
    if (n) {
      *w++ = uint8_t(acc);
    }
    return w;
  }
};

// Reader of the extra-bit stream [p, p + bytes) by bit position (no carried
// state besides the position, so consecutive reads do not wait on each
// other's refills); never reads outside the stream: past its end it reads 0
// bits, and finished() then fails.
struct ExtraReader {
  const uint8_t* p;
  size_t bytes;
  size_t fast_end;   // reads at byte offsets below this load 8 bytes at once
  uint64_t pos = 0;  // bits consumed (at most 62 per value: no overflow)
  ExtraReader(const uint8_t* src, size_t n) : p(src), bytes(n), fast_end(n >= 8 ? n - 7 : 0) {}
  uint64_t get(uint32_t nb) {  // nb <= 56
    const size_t at = size_t(pos >> 3);
    const uint64_t w = at < fast_end ? load64_raw(p + at) : tail(p, bytes, at);
    const uint64_t v = (w >> (pos & 7)) & ((uint64_t(1) << nb) - 1);
    pos += nb;
    return v;
  }
  uint64_t get_any(uint32_t nb) {  // nb <= 64
    if (nb > 56) {
      const uint64_t lo = get(32);
      return lo | (get(nb - 32) << 32);
    }
    return get(nb);
  }
  // The bytes [at, at + 8) of [p, p + bytes) that exist (near the end of the
  // stream, or past it). By value, so that the reader's fields stay in registers.
  __attribute__((noinline)) static uint64_t tail(const uint8_t* p, size_t bytes, size_t at) {
    uint64_t w = 0;
    for (size_t k = 0; k < 8 && at + k < bytes; ++k) w |= uint64_t(p[at + k]) << (8 * k);
    return w;
  }
  // Every value's bits were there, no whole byte is left over, and the padding bits are 0.
  bool finished() const {
    const uint64_t total = uint64_t(bytes) * 8;
    if (pos > total || total - pos >= 8) return false;
    return pos == total || (p[bytes - 1] >> (pos & 7)) == 0;
  }
};

template <class Code>
constexpr uint32_t code_bits() {
  return uint32_t(sizeof(Code) * 8);
}

// Branch-free symbol of a zigzag value (see rans_coder.hpp).
inline void map_fast(uint64_t z, uint32_t* sym, uint32_t* nb) {
  // For z < 128 the bucket is computed on z | 4 (so that L >= 3) and discarded.
  const uint64_t zb = z | 4;
  const int L = rans_bit_length(zb);
  const uint32_t bucket = kRansDirect + 2 * uint32_t(L - 8) + uint32_t((zb >> (L - 2)) & 1);
  // Select with a mask: a branch here mispredicts on every mix of direct and bucket values.
  const uint32_t big = uint32_t(0) - uint32_t(z >= kRansDirect);
  *sym = (uint32_t(z) & ~big) | (bucket & big);
  *nb = uint32_t(L - 2) & big;
}

// A group of 8 zigzag values of which at least one is not direct: symbols of
// all 8 into s8, extra bits of the others (in element order) into bw.
template <class U>
inline void map_mixed_group(const U* z, uint8_t* s8, BitWriter& bw) {
  unsigned big = 0;
  for (int k = 0; k < 8; ++k) {
    s8[k] = uint8_t(z[k]);  // right for the direct ones
    big |= unsigned(z[k] >= kRansDirect) << k;
  }
  while (big) {
    const int k = __builtin_ctz(big);
    big &= big - 1;
    uint32_t sy, nb;
    map_fast(z[k], &sy, &nb);
    s8[k] = uint8_t(sy);
    const uint64_t v = uint64_t(z[k]) & ((uint64_t(1) << nb) - 1);
    if (sizeof(U) * 8 > 56 + 2)
      bw.put_any(v, nb);
    else
      bw.put(v, nb);
  }
}

#if NCCLZ_RANS_X86
// Where map_groups_avx2 takes each group of 8 int32 residuals from: the given
// residuals, or the Delta residuals of codes q formed in registers (the first
// group, whose residuals have fewer neighbours, through predict_range).
struct GivenGroups {
  const int32_t* r;
  NCCLZ_DELTA_AVX2_INLINE __m256i operator()(size_t i) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + i));
  }
};
template <int Order>
struct DeltaGroups {
  const int32_t* q;
  NCCLZ_DELTA_AVX2_INLINE __m256i operator()(size_t i) const {
    if (i == 0) {
      alignas(32) int32_t buf[8];
      predict_range(q, 0, 8, Order == 1 ? Predictor::Delta1 : Predictor::Delta2, 0, 0, buf);
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
    }
    return delta_regs<Order>(q + i);
  }
};

// The symbol pass for int32 in groups of 8 residuals (group(i): residuals
// i..i+8): zigzag, a test for "all direct" and the symbol bytes in a few
// vector instructions; returns the elements done (a multiple of 8). Same
// symbols, histogram and extra bits as the scalar loop.
template <class Groups>
NCCLZ_RANS_AVX2 size_t map_groups_avx2(Groups group, size_t n, uint8_t* syms, BitWriter& bw,
                                       uint32_t (*h)[kRansAlphabet]) {
  const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                             0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
  const __m256i not_direct = _mm256_set1_epi32(~int32_t(kRansDirect - 1));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = group(i);
    const __m256i z = _mm256_xor_si256(_mm256_slli_epi32(v, 1), _mm256_srai_epi32(v, 31));
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(z, low_bytes), gather);
    const uint64_t u = uint64_t(_mm_cvtsi128_si64(_mm256_castsi256_si128(b)));
    std::memcpy(syms + i, &u, 8);
    if (!_mm256_testz_si256(z, not_direct)) {
      alignas(32) uint32_t zz[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(zz), z);
      map_mixed_group(zz, syms + i, bw);
      for (int k = 0; k < 8; ++k) ++h[k][syms[i + k]];
      continue;
    }
    // The counts from the symbols in a register: reading them back byte by byte
    // from the store above waits on store forwarding (2.5x slower, measured).
    for (int k = 0; k < 8; ++k) ++h[k][(u >> (8 * k)) & 0xFF];
  }
  return i;
}
#endif

// ---------------------------------------------------------------- residuals from value bytes
// The decoder's second pass: value bytes (DecBytes::Values) to residuals; the
// symbols with extra bits get theirs from the stream, in element order.
template <class Code>
struct BucketTable {
  using U = std::make_unsigned_t<Code>;
  U base[kRansAlphabet] = {};  // z without its extra bits
  uint8_t nbits[kRansAlphabet] = {};
  BucketTable() {
    for (uint32_t s = kRansDirect; s <= rans_max_symbol(int(code_bits<Code>())); ++s) {
      const uint32_t j = s - kRansDirect, L = 8 + j / 2;
      base[s] = U(U(2 | (j & 1)) << (L - 2));
      nbits[s] = uint8_t(L - 2);
    }
  }
};
template <class Code>
const BucketTable<Code>& bucket_table() {
  static const BucketTable<Code> t;
  return t;
}

template <class Code>
inline Code bucket_value(uint8_t b, ExtraReader& xr, const BucketTable<Code>& bt) {
  using U = std::make_unsigned_t<Code>;
  const uint32_t s = value_symbol(b);  // <= rans_max_symbol (read_table's check)
  const uint64_t extra = code_bits<Code>() > 56 + 2 ? xr.get_any(bt.nbits[s]) : xr.get(bt.nbits[s]);
  return rans_unzigzag<Code>(U(bt.base[s] | U(extra)));
}

// Value bytes b[i..n) to out[i..n). b may be the last n bytes of out itself
// (each step reads its bytes before it writes, and writes only below the bytes
// still unread). any: the table has symbols with extra bits.
template <class Code>
void widen_portable(const uint8_t* b, size_t i, size_t n, Code* out, bool any, ExtraReader& xr_io) {
  const BucketTable<Code>& bt = bucket_table<Code>();
  ExtraReader xr = xr_io;  // a local copy stays in registers (out's stores could alias xr_io)
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full, kHigh = 0x8080808080808080ull, k64 = 0x4040404040404040ull;
  for (; i + 8 <= n; i += 8) {
    const uint64_t u = load64_raw(b + i);
    Code v[8];
    for (int k = 0; k < 8; ++k) v[k] = Code(int8_t(uint8_t(u >> (8 * k))));
    if (any) {
      // Bit 7 of each byte of u + 64 (bytewise, no carries between bytes).
      uint64_t big = (((u & kLow7) + k64) ^ u) & kHigh;
      while (big) {
        const int k = __builtin_ctzll(big) >> 3;
        big &= big - 1;
        v[k] = bucket_value<Code>(uint8_t(u >> (8 * k)), xr, bt);
      }
    }
    std::memcpy(out + i, v, sizeof(v));
  }
  for (; i < n; ++i) {
    const uint8_t c = b[i];
    out[i] = any && value_needs_bits(c) ? bucket_value<Code>(c, xr, bt) : Code(int8_t(c));
  }
  xr_io = xr;
}

#if NCCLZ_RANS_X86
// widen_portable in blocks of 32 with AVX2; returns the elements done (a multiple of 32).
template <class Code>
NCCLZ_RANS_AVX2_BMI2 size_t widen_avx2(const uint8_t* b, size_t n, Code* out, bool any, ExtraReader& xr_io) {
  const BucketTable<Code>& bt = bucket_table<Code>();
  ExtraReader xr = xr_io;  // a local copy stays in registers (out's stores could alias xr_io)
  const __m256i k64 = _mm256_set1_epi8(64);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    __m256i* o = reinterpret_cast<__m256i*>(out + i);
    if constexpr (sizeof(Code) == 4) {
      _mm256_storeu_si256(o + 0, _mm256_cvtepi8_epi32(lo));
      _mm256_storeu_si256(o + 1, _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
      _mm256_storeu_si256(o + 2, _mm256_cvtepi8_epi32(hi));
      _mm256_storeu_si256(o + 3, _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
    } else {
      _mm256_storeu_si256(o + 0, _mm256_cvtepi8_epi64(lo));
      _mm256_storeu_si256(o + 1, _mm256_cvtepi8_epi64(_mm_srli_si128(lo, 4)));
      _mm256_storeu_si256(o + 2, _mm256_cvtepi8_epi64(_mm_srli_si128(lo, 8)));
      _mm256_storeu_si256(o + 3, _mm256_cvtepi8_epi64(_mm_srli_si128(lo, 12)));
      _mm256_storeu_si256(o + 4, _mm256_cvtepi8_epi64(hi));
      _mm256_storeu_si256(o + 5, _mm256_cvtepi8_epi64(_mm_srli_si128(hi, 4)));
      _mm256_storeu_si256(o + 6, _mm256_cvtepi8_epi64(_mm_srli_si128(hi, 8)));
      _mm256_storeu_si256(o + 7, _mm256_cvtepi8_epi64(_mm_srli_si128(hi, 12)));
    }
    if (any) {
      uint32_t big = uint32_t(_mm256_movemask_epi8(_mm256_add_epi8(v, k64)));
      if (big) {
        alignas(32) uint8_t blk[32];  // the bytes (b may lie under what was just written)
        _mm256_store_si256(reinterpret_cast<__m256i*>(blk), v);
        do {
          const int k = __builtin_ctz(big);
          big &= big - 1;
          out[i + size_t(k)] = bucket_value<Code>(blk[k], xr, bt);
        } while (big);
      }
    }
  }
  xr_io = xr;
  return i;
}

// rans_decode_add's pass 2 with AVX2, in blocks of 32 (widen_avx2's): each
// block's residuals (extra bits patched in) become codes (delta_avx2.hpp) and
// are added to local into to. Returns the elements done (a multiple of 32)
// and, in *e and *q, Delta2's e and the code of the last of them.
template <int Order>
NCCLZ_RANS_AVX2_BMI2 size_t widen_add_avx2(const uint8_t* b, size_t n, bool any, ExtraReader& xr_io,
                                           const int32_t* local, int32_t* to, uint32_t* e, uint32_t* q) {
  const BucketTable<int32_t>& bt = bucket_table<int32_t>();
  ExtraReader xr = xr_io;
  const __m256i k64 = _mm256_set1_epi8(64);
  __m256i ce = _mm256_setzero_si256(), cq = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    __m256i r[4] = {_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)),
                    _mm256_cvtepi8_epi32(hi), _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))};
    if (any) {
      uint32_t big = uint32_t(_mm256_movemask_epi8(_mm256_add_epi8(v, k64)));
      if (big) {
        alignas(32) int32_t blk[32];
        for (int t = 0; t < 4; ++t) _mm256_store_si256(reinterpret_cast<__m256i*>(blk + 8 * t), r[t]);
        do {
          const int k = __builtin_ctz(big);
          big &= big - 1;
          blk[k] = bucket_value<int32_t>(b[i + size_t(k)], xr, bt);
        } while (big);
        for (int t = 0; t < 4; ++t) r[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 8 * t));
      }
    }
    if (i == 0) r[0] = first_delta_regs<Order>(r[0]);
    for (int t = 0; t < 4; ++t) {
      const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(local + i + 8 * t));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i + 8 * t),
                          _mm256_add_epi32(delta_unpredict8<Order>(r[t], ce, cq), l));
    }
  }
  *e = uint32_t(_mm256_cvtsi256_si32(ce));
  *q = uint32_t(_mm256_cvtsi256_si32(cq));
  xr_io = xr;
  return i;
}
#endif

// The decoders' first pass: the symbols' value bytes of n codes of `bits`
// bits into vb (DecBytes::Values), whether any symbol has extra bits, and the
// reader of those bits. False where the payload is corrupt.
bool decode_values(const uint8_t* src, size_t len, size_t n, int bits, uint8_t* vb, bool* any, ExtraReader* xr) {
  uint32_t freq[kRansAlphabet];
  const uint8_t* xb = nullptr;
  size_t xbytes = 0;
  if (!decode_framed(src, len, n, rans_max_symbol(bits), DecBytes::Values, vb, freq, &xb, &xbytes)) return false;
  *any = false;
  for (uint32_t s = kRansDirect; s < uint32_t(kRansAlphabet); ++s) *any |= freq[s] != 0;
  if (!*any && xbytes != 0) return false;
  *xr = ExtraReader(xb, xbytes);
  return true;
}

}  // namespace

// ================================================================ public

void rans_normalize(const uint32_t* hist, uint64_t total, uint32_t* freq) {
  uint32_t present[kRansAlphabet];
  uint64_t rem[kRansAlphabet];
  uint32_t nsym = 0;
  uint64_t sum_h = 0;
  for (int s = 0; s < kRansAlphabet; ++s) {
    freq[s] = 0;
    if (hist[s]) {
      present[nsym++] = uint32_t(s);
      sum_h += hist[s];
    }
  }
  (void)total;  // the histogram's own sum is authoritative
  if (nsym == 0) return;
  if (nsym == 1) {
    freq[present[0]] = kM;
    return;
  }
  // Every present symbol gets 1; the other kM - nsym slots are shared in
  // proportion to the counts (floor), the remainder going to the largest
  // fractional parts (ties: lower symbol first).
  const uint64_t avail = kM - nsym;
  uint32_t sum = 0;
  for (uint32_t k = 0; k < nsym; ++k) {
    const uint32_t s = present[k];
    const uint64_t num = uint64_t(hist[s]) * avail;
    freq[s] = 1 + uint32_t(num / sum_h);
    rem[s] = num % sum_h;
    sum += freq[s];
  }
  uint32_t left = kM - sum;
  if (left) {
    std::sort(present, present + nsym,
              [&](uint32_t a, uint32_t b) { return rem[a] != rem[b] ? rem[a] > rem[b] : a < b; });
    for (uint32_t k = 0; k < left; ++k) ++freq[present[k]];
  }
}

bool rans_impl_available(RansImpl impl) {
  switch (impl) {
    case RansImpl::Scalar: return true;
    case RansImpl::Avx2: return rans_cpu_has_avx2();
  }
  return false;
}

RansImpl rans_best_impl() { return rans_cpu_has_avx2() ? RansImpl::Avx2 : RansImpl::Scalar; }

template <class Code>
size_t rans_encode(const Code* r, size_t n, uint8_t* dst, size_t cap) {
  return rans_encode_with(rans_best_impl(), r, n, dst, cap);
}

// The encoder's symbol pass and framing: symbols, histogram and the extra
// bits (LSB first in element order) of residuals given in order, then
// encode_framed. Elements one(i, r) at a time or groups(r, i, end) from
// an array; the AVX2 pass (map_groups_avx2) writes into syms, bw and h too.
template <class Code>
struct SymbolPass {
  using U = std::make_unsigned_t<Code>;
  Scratch& sc = scratch();
  uint8_t* syms;
  uint8_t* xbuf;
  BitWriter bw;
  uint32_t h[kHistTables][kRansAlphabet] = {};

  explicit SymbolPass(size_t n) : syms(grow(sc.syms, n)), xbuf(grow(sc.bits, sizeof(Code) * n + 16)), bw{xbuf} {}

  void one(size_t i, Code r) {
    const uint64_t z = uint64_t(rans_zigzag(r));
    uint32_t s, nb;
    map_fast(z, &s, &nb);
    syms[i] = uint8_t(s);
    ++h[0][s];
    const uint64_t v = z & ((uint64_t(1) << nb) - 1);
    if (code_bits<Code>() > 56 + 2)
      bw.put_any(v, nb);
    else
      bw.put(v, nb);
  }

  /// Residuals i..end, r[k] the residual of element k.
  void groups(const Code* r, size_t i, size_t end) {
    for (; i + kHistTables <= end; i += kHistTables) {
      // Groups of 8: when all are direct (z < 128) there are no extra bits and
      // the symbol is z itself (smooth fields: nearly every group).
      U z[kHistTables];
      U any = 0;
      for (int k = 0; k < kHistTables; ++k) {
        z[k] = rans_zigzag(r[i + k]);
        any |= z[k];
      }
      if (any < kRansDirect) {
        for (int k = 0; k < kHistTables; ++k) {
          syms[i + k] = uint8_t(z[k]);
          ++h[k][z[k]];
        }
      } else {
        map_mixed_group(z, syms + i, bw);
        for (int k = 0; k < kHistTables; ++k) ++h[k][syms[i + k]];
      }
    }
    for (; i < end; ++i) one(i, r[i]);
  }

  size_t finish(RansImpl impl, size_t n, uint8_t* dst, size_t cap) {
    const size_t xbytes = size_t(bw.finish() - xbuf);
    uint32_t hist[kRansAlphabet];
    for (int k = 0; k < kRansAlphabet; ++k) {
      uint32_t t = 0;
      for (int j = 0; j < kHistTables; ++j) t += h[j][k];
      hist[k] = t;
    }
    const uint8_t* xb = xbytes ? xbuf : nullptr;
    return encode_framed(impl, syms, n, hist, xb, xbytes, dst, cap);
  }
};

template <class Code>
size_t rans_encode_with(RansImpl impl, const Code* r, size_t n, uint8_t* dst, size_t cap) {
  if (n == 0) return 0;
  SymbolPass<Code> sp(n);
  size_t i = 0;
#if NCCLZ_RANS_X86
  if constexpr (sizeof(Code) == 4)
    if (impl == RansImpl::Avx2 && rans_cpu_has_avx2()) i = map_groups_avx2(GivenGroups{r}, n, sp.syms, sp.bw, sp.h);
#endif
  sp.groups(r, i, n);
  return sp.finish(impl, n, dst, cap);
}

size_t rans_encode_predicted(const int32_t* q, size_t n, Predictor p, uint8_t* dst, size_t cap) {
  if (!is_delta_predictor(p)) return kNoFit;  // (not offered)
  if (p == Predictor::None) return rans_encode(q, n, dst, cap);
  if (n == 0) return 0;
#if NCCLZ_RANS_X86
  if (rans_cpu_has_avx2()) {
    SymbolPass<int32_t> sp(n);
    const size_t i = p == Predictor::Delta1 ? map_groups_avx2(DeltaGroups<1>{q}, n, sp.syms, sp.bw, sp.h)
                                            : map_groups_avx2(DeltaGroups<2>{q}, n, sp.syms, sp.bw, sp.h);
    int32_t tail[8];  // the last n % 8 residuals
    predict_range(q, i, n - i, p, 0, 0, tail);
    for (size_t k = i; k < n; ++k) sp.one(k, tail[k - i]);
    return sp.finish(RansImpl::Avx2, n, dst, cap);
  }
#endif
  thread_local std::vector<int32_t> r;
  if (r.size() < n) r.resize(n);
  predict(q, n, p, 0, 0, r.data());
  return rans_encode(r.data(), n, dst, cap);
}

template <class Code>
Status rans_decode(const uint8_t* src, size_t len, size_t n, Code* out) {
  return rans_decode_with(rans_best_impl(), src, len, n, out);
}

template <class Code>
Status rans_decode_with(RansImpl impl, const uint8_t* src, size_t len, size_t n, Code* out) {
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || !out) return Status::Corrupt;
  // Pass 1: the symbols' value bytes into the last n bytes of out; pass 2
  // widens them in place, front to back, with the extra bits.
  uint8_t* const vb = reinterpret_cast<uint8_t*>(out) + (sizeof(Code) - 1) * n;
  bool any = false;
  ExtraReader xr(nullptr, 0);
  if (!decode_values(src, len, n, int(code_bits<Code>()), vb, &any, &xr)) return Status::Corrupt;
  size_t i = 0;
#if NCCLZ_RANS_X86
  if (impl == RansImpl::Avx2 && rans_cpu_has_avx2()) i = widen_avx2(vb, n, out, any, xr);
#endif
  (void)impl;
  widen_portable(vb, i, n, out, any, xr);
  if (any && !xr.finished()) return Status::Corrupt;
  return Status::Ok;
}

Status rans_decode_add(const uint8_t* src, size_t len, size_t n, Predictor p, const int32_t* local, int32_t* to) {
  if (!is_delta_predictor(p)) return Status::Unsupported;
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || !local || !to) return Status::Corrupt;
  // Pass 1 as rans_decode's, into a buffer of this thread's (to may be local,
  // whose values the sums still need); pass 2 widens, turns residuals into
  // codes and adds.
  thread_local std::vector<uint8_t> values;
  if (values.size() < n) values.resize(n);
  uint8_t* const vb = values.data();
  bool any = false;
  ExtraReader xr(nullptr, 0);
  if (!decode_values(src, len, n, 32, vb, &any, &xr)) return Status::Corrupt;
  size_t i = 0;
  uint32_t e = 0, a = 0;  // Delta2's e[i-1], the code q[i-1] (wrapping)
#if NCCLZ_RANS_X86
  if (rans_cpu_has_avx2()) {
    switch (p) {
      case Predictor::None: i = widen_add_avx2<0>(vb, n, any, xr, local, to, &e, &a); break;
      case Predictor::Delta1: i = widen_add_avx2<1>(vb, n, any, xr, local, to, &e, &a); break;
      default: i = widen_add_avx2<2>(vb, n, any, xr, local, to, &e, &a); break;
    }
  }
#endif
  const BucketTable<int32_t>& bt = bucket_table<int32_t>();
  for (; i < n; ++i) {
    const uint8_t c = vb[i];
    const uint32_t r = uint32_t(any && value_needs_bits(c) ? bucket_value<int32_t>(c, xr, bt) : int32_t(int8_t(c)));
    if (p == Predictor::None) {
      a = r;
    } else if (i == 0) {
      a = r;  // q[0] = r[0]; e starts at 0, so that e[1] = r[1]
    } else if (p == Predictor::Delta1) {
      a += r;
    } else {
      e += r;
      a += e;
    }
    to[i] = int32_t(uint32_t(local[i]) + a);
  }
  if (any && !xr.finished()) return Status::Corrupt;
  return Status::Ok;
}

void byte_histogram(const uint8_t* s, size_t n, uint32_t* hist) {
  // Four sub-tables: a run of one symbol (exponents, mostly) does not make each
  // count wait on the store of the one before it.
  uint32_t h[4][kRansAlphabet] = {};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++h[0][s[i]];
    ++h[1][s[i + 1]];
    ++h[2][s[i + 2]];
    ++h[3][s[i + 3]];
  }
  for (; i < n; ++i) ++h[0][s[i]];
  for (int k = 0; k < kRansAlphabet; ++k) hist[k] = h[0][k] + h[1][k] + h[2][k] + h[3][k];
}

size_t rans_encode_bytes(const uint8_t* sym, size_t n, uint8_t* dst, size_t cap) {
  return rans_encode_bytes_with(rans_best_impl(), sym, n, dst, cap);
}

size_t rans_encode_bytes_with(RansImpl impl, const uint8_t* sym, size_t n, uint8_t* dst, size_t cap) {
  if (n == 0) return 0;
  uint32_t hist[kRansAlphabet];
  byte_histogram(sym, n, hist);
  return encode_framed(impl, sym, n, hist, nullptr, 0, dst, cap);
}

Status rans_decode_bytes(const uint8_t* src, size_t len, size_t n, uint8_t* out) {
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || !out) return Status::Corrupt;
  uint32_t freq[kRansAlphabet];
  const uint8_t* xb = nullptr;
  size_t xbytes = 0;
  if (!decode_framed(src, len, n, kRansAlphabet - 1, DecBytes::Symbols, out, freq, &xb, &xbytes))
    return Status::Corrupt;
  if (xbytes != 0) return Status::Corrupt;
  return Status::Ok;
}

template size_t rans_encode<int32_t>(const int32_t*, size_t, uint8_t*, size_t);
template size_t rans_encode<int64_t>(const int64_t*, size_t, uint8_t*, size_t);
template size_t rans_encode_with<int32_t>(RansImpl, const int32_t*, size_t, uint8_t*, size_t);
template size_t rans_encode_with<int64_t>(RansImpl, const int64_t*, size_t, uint8_t*, size_t);
template Status rans_decode<int32_t>(const uint8_t*, size_t, size_t, int32_t*);
template Status rans_decode<int64_t>(const uint8_t*, size_t, size_t, int64_t*);
template Status rans_decode_with<int32_t>(RansImpl, const uint8_t*, size_t, size_t, int32_t*);
template Status rans_decode_with<int64_t>(RansImpl, const uint8_t*, size_t, size_t, int64_t*);

}  // namespace ncclz::codec
