// CRC-32C (see crc32c.hpp).
//
// Both versions work on the CRC register r = ~crc and advance it by the
// reflected polynomial; one byte step is r = (r >> 8) ^ T[(r ^ byte) & 0xff].
// The register update is linear over GF(2) in (register, data) together, so
// for parts B and C of length L each:
//
//   update(r, A || B || C) = Z(Z(update(r, A)) ^ update(0, B)) ^ update(0, C)
//
// where Z(x) = update(x, L zero bytes) is linear in x alone: a 32x32 bit
// matrix, applied as four 256-entry tables (one per byte of x). The hardware
// version runs the three updates as independent `crc32` streams (the
// instruction has a latency of 3 cycles and a throughput of one per cycle, so
// one stream alone would use a third of it) and combines them this way, with
// tables for two block lengths: kLongBlock for the bulk, kShortBlock for the
// rest; what is left then goes 8 bytes at a time.
#include "base/crc32c.hpp"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define NCCLZ_CRC32C_SSE42 1
#endif

namespace ncclz::base {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected 0x1EDC6F41
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

struct Tables {
  uint32_t slice[8][256];  // slicing-by-8: slice[k][b] = register after b then k zero bytes
  uint32_t shift_long[4][256];
  uint32_t shift_short[4][256];

  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t r = b;
      for (int i = 0; i < 8; ++i) r = (r >> 1) ^ (kPoly & (0u - (r & 1u)));
      slice[0][b] = r;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t b = 0; b < 256; ++b) slice[k][b] = (slice[k - 1][b] >> 8) ^ slice[0][slice[k - 1][b] & 0xff];
    }
    make_shift(kLongBlock, shift_long);
    make_shift(kShortBlock, shift_short);
  }

  // t[k][b] = Z_len(b << 8k): Z on each of the 32 unit vectors, then by linearity.
  void make_shift(size_t len, uint32_t (&t)[4][256]) const {
    uint32_t unit[32];
    for (int i = 0; i < 32; ++i) {
      uint32_t r = uint32_t(1) << i;
      for (size_t j = 0; j < len; ++j) r = (r >> 8) ^ slice[0][r & 0xff];
      unit[i] = r;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= unit[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

inline uint32_t shift(const uint32_t (&t)[4][256], uint32_t r) {
  return t[0][r & 0xff] ^ t[1][(r >> 8) & 0xff] ^ t[2][(r >> 16) & 0xff] ^ t[3][r >> 24];
}

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

uint32_t update_portable(uint32_t r, const uint8_t* p, size_t n) {
  const Tables& t = tables();
  while (n >= 8) {
    const uint64_t w = load_le64(p) ^ r;
    r = t.slice[7][w & 0xff] ^ t.slice[6][(w >> 8) & 0xff] ^ t.slice[5][(w >> 16) & 0xff] ^
        t.slice[4][(w >> 24) & 0xff] ^ t.slice[3][(w >> 32) & 0xff] ^ t.slice[2][(w >> 40) & 0xff] ^
        t.slice[1][(w >> 48) & 0xff] ^ t.slice[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) r = (r >> 8) ^ t.slice[0][(r ^ *p++) & 0xff];
  return r;
}

#if defined(NCCLZ_CRC32C_SSE42)

// Three interleaved streams over blocks of `len` bytes, while 3 * len are left.
__attribute__((target("sse4.2"))) uint64_t interleaved_sse42(uint64_t r, const uint8_t*& p, size_t& n, size_t len,
                                                             const uint32_t (&z)[4][256]) {
  while (n >= 3 * len) {
    uint64_t a = r, b = 0, c = 0;
    const uint8_t* end = p + len;
    do {
      a = _mm_crc32_u64(a, load_le64(p));
      b = _mm_crc32_u64(b, load_le64(p + len));
      c = _mm_crc32_u64(c, load_le64(p + 2 * len));
      p += 8;
    } while (p != end);
    r = shift(z, shift(z, uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(c);
    p += 2 * len;
    n -= 3 * len;
  }
  return r;
}

__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t r32, const uint8_t* p, size_t n) {
  const Tables& t = tables();
  uint64_t r = r32;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    r = _mm_crc32_u8(uint32_t(r), *p++);
    --n;
  }
  r = interleaved_sse42(r, p, n, kLongBlock, t.shift_long);
  r = interleaved_sse42(r, p, n, kShortBlock, t.shift_short);
  while (n >= 8) {
    r = _mm_crc32_u64(r, load_le64(p));
    p += 8;
    n -= 8;
  }
  while (n--) r = _mm_crc32_u8(uint32_t(r), *p++);
  return uint32_t(r);
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#else

bool cpu_has_sse42() { return false; }

#endif

}  // namespace

uint32_t crc32c_portable(const void* p, size_t n, uint32_t crc) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(p), n);
}

uint32_t crc32c(const void* p, size_t n, uint32_t crc) {
#if defined(NCCLZ_CRC32C_SSE42)
  if (cpu_has_sse42()) return ~update_sse42(~crc, static_cast<const uint8_t*>(p), n);
#endif
  return crc32c_portable(p, n, crc);
}

const char* crc32c_impl() { return cpu_has_sse42() ? "sse4.2" : "table"; }

}  // namespace ncclz::base
