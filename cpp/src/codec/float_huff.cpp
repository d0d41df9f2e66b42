// Lossless float coder with parallel Huffman sub-streams (FloatHuff). Layout:
// docs/FORMAT.md, "FloatHuff"; the table rule is float_huff.hpp's.
#include "codec/float_huff.hpp"

#include <cstring>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_coder.hpp"
#include "codec/rans_coder.hpp"
#include "codec/thread_buffer.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ncclz codecs load and store little-endian words with memcpy: little-endian hosts only"
#endif

namespace ncclz::codec {
namespace {

struct ExpTag {};
uint8_t* exp_scratch(size_t n) { return thread_buffer<uint8_t, ExpTag>(n); }
// The multi-symbol table (build_lut3): 16 KiB a thread, kept.
std::vector<uint32_t>& lut3_scratch() {
  thread_local std::vector<uint32_t> t(kFhLutSize);
  return t;
}

inline uint32_t ld32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void st32(void* p, uint32_t v) { std::memcpy(p, &v, 4); }

inline uint32_t exponent_at(const uint8_t* x, ElemType t, size_t i) {
  if (t == ElemType::U8) return x[i];
  uint32_t b;
  if (t == ElemType::F32) {
    std::memcpy(&b, x + 4 * i, 4);
    return (b >> 23) & 0xFF;
  }
  uint16_t h;
  std::memcpy(&h, x + 2 * i, 2);
  return t == ElemType::BF16 ? (h >> 7) & 0xFFu : (h >> 10) & 0x1Fu;
}

// Decoder table: entry = symbol << 4 | code length, for every 12-bit window.
void build_lut(const uint8_t* len, const uint16_t* code, uint32_t A, uint16_t* lut) {
  for (uint32_t s = 0; s < A; ++s) {
    const uint32_t l = len[s];
    if (l == 0) continue;
    const uint32_t first = uint32_t(code[s]) << (kFhMaxLen - l), span = 1u << (kFhMaxLen - l);
    for (uint32_t i = 0; i < span; ++i) lut[first + i] = uint16_t(s << 4 | l);
  }
}

// Sub-streams the CPU decoder interleaves (independent dependency chains).
constexpr int kLanes = 4;

// One sub-stream's reader: a 64-bit window, its first bit the highest. Past
// the sub-stream's last word it shifts in zeros; `used` counts the bits the
// codes took, which the caller checks against the words it had.
struct Reader {
  const uint8_t* p;
  uint32_t left;  // words not yet loaded
  int nb;         // valid bits in buf
  uint64_t buf;
  uint32_t used;

  void init(const uint8_t* words, uint32_t nwords) {
    p = words;
    left = nwords;
    nb = 0;
    buf = 0;
    used = 0;
  }
  // At least 33 bits in the window afterwards: two codes of up to 12 bits.
  inline void refill() {
    if (nb <= 32) {
      uint32_t w = 0;
      if (left) {
        w = ld32(p);
        p += 4;
        --left;
      }
      buf |= uint64_t(w) << (32 - nb);
      nb += 32;
    }
  }
  inline uint32_t next(const uint16_t* lut) {
    refill();
    return take(lut);
  }
  inline uint32_t take(const uint16_t* lut) {
    const uint32_t e = lut[buf >> (64 - kFhMaxLen)];
    skip(e & 15);
    return e >> 4;
  }
  // Drops the window's first l bits (l <= 12, after refill()).
  inline void skip(uint32_t l) {
    buf <<= l;
    nb -= int(l);
    used += l;
  }
};

// The multi-symbol table (large slices): for every 12-bit window, the up to
// three whole codes it begins with: their symbols in bytes 0..2, their total
// bits in bits 24..27, how many in bits 28..29 (at least one: a code has at
// most 12 bits). From the single-symbol table (build_lut).
constexpr size_t kMultiMin = 65536;  // values from which a slice's decode builds it
constexpr uint64_t kMultiBits = 6;   // and codes of at most this many bits on average (longer: a code a lookup)
void build_lut3(const uint16_t* lut, uint32_t* lut3) {
  for (uint32_t w = 0; w < kFhLutSize; ++w) {
    uint32_t used = 0, syms = 0, k = 0;
    for (; k < 3; ++k) {
      const uint32_t e = lut[(w << used) & (kFhLutSize - 1)];
      if (used + (e & 15) > uint32_t(kFhMaxLen)) break;  // runs past the window
      syms |= (e >> 4) << (8 * k);
      used += e & 15;
    }
    lut3[w] = syms | used << 24 | k << 28;
  }
}

// A sub-stream decoded with `used` bits from `words` words at w: the codes
// end in the last word, and that word's bits after them are zero.
inline bool sub_end_ok(const uint8_t* w, uint32_t words, uint32_t used) {
  if (used > 32 * words || 32 * words - used >= 32) return words == 0 && used == 0;
  const uint32_t rem = 32 * words - used;
  return rem == 0 || (ld32(w + 4 * (words - 1)) & ((1u << rem) - 1)) == 0;
}

// Appends codes MSB-first to 32-bit words.
struct Writer {
  uint8_t* p;
  uint64_t acc = 0;  // pending bits, lowest `nb` bits
  int nb = 0;
  inline void put(uint32_t code, uint32_t l) {
    acc = (acc << l) | code;
    nb += int(l);
    if (nb >= 32) {
      nb -= 32;
      st32(p, uint32_t(acc >> nb));
      p += 4;
    }
  }
  // Two codes at once (at most 24 bits: 55 pending at most, one word out).
  inline void put2(uint32_t c1, uint32_t l1, uint32_t c2, uint32_t l2) {
    acc = (acc << (l1 + l2)) | (uint64_t(c1) << l2) | c2;
    nb += int(l1 + l2);
    if (nb >= 32) {
      nb -= 32;
      st32(p, uint32_t(acc >> nb));
      p += 4;
    }
  }
  inline void flush() {
    if (nb > 0) {
      st32(p, uint32_t(acc << (32 - nb)));
      p += 4;
      nb = 0;
    }
  }
};

}  // namespace

size_t floathuff_estimate_bytes(const void* x, ElemType t, size_t n, uint32_t sample_every) {
  if (!fh_type(t)) return kNoFit;
  if (n == 0) return 0;
  if (sample_every == 0) sample_every = 1;
  const uint8_t* p = static_cast<const uint8_t*>(x);
  const uint32_t A = fh_alphabet(t);
  uint32_t hist[256] = {};
  uint64_t total = 0;
  for (size_t i = 0; i < n; i += sample_every) {
    ++hist[exponent_at(p, t, i)];
    ++total;
  }
  uint8_t len[256];
  fh_build_lengths(hist, A, len);
  uint64_t bits = 0;
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) {
    bits += uint64_t(hist[s]) * len[s];
    m += len[s] != 0;
  }
  if (m == 1) bits = 0;
  // Scaled to n values, plus half a word of padding per sub-stream.
  const uint64_t code_bits = uint64_t(double(bits) * double(n) / double(total)) + 16 * fh_substreams(n);
  const uint64_t words = (code_bits + 31) / 32;
  return size_t(fh_payload_bytes(t, n, words, fh_plane_bytes(t, n)));
}

size_t floathuff_encode(const void* x, ElemType t, size_t n, uint8_t* dst, size_t cap) {
  if (!fh_type(t)) return kNoFit;
  if (n == 0) return 0;
  const size_t plane = size_t(fh_plane_bytes(t, n));
  const size_t index = size_t(fh_index_bytes(t, n));
  if (cap < index + plane) return kNoFit;
  const uint32_t A = fh_alphabet(t);
  // The symbols: the exponents (split from their planes), or U8's bytes as
  // they are. The plane goes at the end of the capacity first, behind the
  // words once their length is known.
  uint8_t* tmp_plane = dst + cap - plane;
  const uint8_t* e = static_cast<const uint8_t*>(x);
  if (t != ElemType::U8) {
    uint8_t* split = exp_scratch(n);
    floatexp_split(x, t, n, split, tmp_plane);
    e = split;
  }
  uint32_t hist[256];
  byte_histogram(e, n, hist);
  uint8_t len[256];
  uint16_t code[256];
  fh_build_lengths(hist, A, len);
  fh_canonical_codes(len, A, code);
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) m += len[s] != 0;
  const bool coded = m > 1;  // one symbol: no bits at all

  // The index: lengths, group offsets, word counts.
  const uint64_t S = fh_substreams(n), G = fh_groups(n);
  uint8_t* tab = dst;
  uint8_t* bases = dst + fh_table_bytes(t);
  uint8_t* counts = bases + 4 * G;
  for (uint32_t s = 0; s < A; s += 2) tab[s / 2] = uint8_t(len[s] | (len[s + 1] << 4));
  // The code words and their counts, in one pass where the histogram's total
  // code bits show that they fit (a sub-stream pads at most 31 bits); else
  // the exact size is counted first (it decides whether the payload fits).
  uint64_t total_bits = 0;
  if (coded)
    for (uint32_t s = 0; s < A; ++s) total_bits += uint64_t(hist[s]) * len[s];
  const uint64_t room = uint64_t(cap) - index - plane;
  if (coded && 4 * ((total_bits + 31 * S) / 32) > room) {
    uint64_t need = 0;
    for (uint64_t k = 0; k < S; ++k) {
      const uint8_t* ek = e + k * kFhSubValues;
      const uint32_t c = fh_sub_count(n, k);
      uint32_t bits = 0;
      for (uint32_t i = 0; i < c; ++i) bits += len[ek[i]];
      need += (bits + 31) / 32;
    }
    if (4 * need > room) return kNoFit;
  }
  uint32_t cl[256];  // code << 4 | length
  for (uint32_t s = 0; s < 256; ++s) cl[s] = s < A ? uint32_t(code[s]) << 4 | len[s] : 0;
  uint64_t words = 0;
  Writer w{dst + index};
  for (uint64_t k = 0; k < S; ++k) {
    if (k % kFhGroup == 0) {
      if (words > 0xFFFFFFFFu) return kNoFit;
      store_u32(bases + 4 * (k / kFhGroup), uint32_t(words));
    }
    const uint8_t* first = w.p;
    if (coded) {
      const uint8_t* ek = e + k * kFhSubValues;
      const uint32_t c = fh_sub_count(n, k);
      uint32_t i = 0;
      for (; i + 1 < c; i += 2) {
        const uint32_t a = cl[ek[i]], b = cl[ek[i + 1]];
        w.put2(a >> 4, a & 15, b >> 4, b & 15);
      }
      if (i < c) w.put(cl[ek[i]] >> 4, cl[ek[i]] & 15);
      w.flush();
    }
    counts[k] = uint8_t((w.p - first) / 4);
    words += counts[k];
  }
  for (uint8_t* z = counts + S; z < dst + index; ++z) *z = 0;
  if (plane) std::memmove(dst + index + 4 * words, tmp_plane, plane);
  return size_t(index + 4 * words + plane);
}

Status floathuff_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* out) {
  return floathuff_decode_with(FhDecodeImpl::Auto, src, len, t, n, out);
}

Status floathuff_decode_with(FhDecodeImpl impl, const uint8_t* src, size_t len, ElemType t, size_t n, void* out) {
  if (!fh_type(t)) return Status::Unsupported;
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || !out) return Status::Corrupt;
  const size_t plane = size_t(fh_plane_bytes(t, n));
  const uint64_t index = fh_index_bytes(t, n);
  if (uint64_t(len) < index + plane || (len - index - plane) % 4 != 0) return Status::Corrupt;
  const uint64_t words = (len - index - plane) / 4;
  const uint32_t A = fh_alphabet(t);
  uint8_t ln[256];
  for (uint32_t s = 0; s < A; s += 2) {
    ln[s] = src[s / 2] & 15;
    ln[s + 1] = src[s / 2] >> 4;
  }
  if (!fh_lengths_valid(ln, A)) return Status::Corrupt;
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) m += ln[s] != 0;

  // The index must add up: group g's offset is the sum of the counts before
  // it, the counts sum to the words, and the padding after the counts is zero.
  const uint64_t S = fh_substreams(n), G = fh_groups(n);
  const uint8_t* bases = src + fh_table_bytes(t);
  const uint8_t* counts = bases + 4 * G;
  uint64_t sum = 0;
  for (uint64_t k = 0; k < S; ++k) {
    if (k % kFhGroup == 0 && load_u32(bases + 4 * (k / kFhGroup)) != sum) return Status::Corrupt;
    if (counts[k] > kFhMaxSubWords) return Status::Corrupt;
    sum += counts[k];
  }
  if (sum != words) return Status::Corrupt;
  for (const uint8_t* z = counts + S; z < src + index; ++z)
    if (*z) return Status::Corrupt;

  // U8's symbols are its values: decoded in place.
  uint8_t* e = t == ElemType::U8 ? static_cast<uint8_t*>(out) : exp_scratch(n);
  const uint8_t* wbase = src + index;
  if (m == 1) {
    if (words != 0) return Status::Corrupt;
    uint32_t sym = 0;
    while (ln[sym] == 0) ++sym;
    std::memset(e, int(sym), n);
  } else {
    uint16_t code[256];
    uint16_t lut[kFhLutSize];
    fh_canonical_codes(ln, A, code);
    build_lut(ln, code, A, lut);
    // kLanes sub-streams at a time (independent dependency chains), two
    // lookups per refill, then the rest one by one. Large slices of short
    // codes look up to three codes at a time (build_lut3) while every lane
    // has room for two such lookups' 4-byte stores, then finish each lane one
    // code at a time.
    const uint64_t full = n / kFhSubValues;
    const bool multi =
        impl == FhDecodeImpl::Auto && n >= kMultiMin && 32 * words <= kMultiBits * n;  // short codes: several a lookup
    std::vector<uint32_t>& lut3 = lut3_scratch();
    if (multi) build_lut3(lut, lut3.data());
    uint64_t k = 0, off = 0;
    Reader r[kLanes];
    for (; k + kLanes <= full; k += kLanes) {
      uint64_t o = off;
      for (int j = 0; j < kLanes; ++j) {
        r[j].init(wbase + 4 * o, counts[k + j]);
        o += counts[k + j];
      }
      uint8_t* ek = e + k * kFhSubValues;
      if (multi) {
        uint32_t done[kLanes] = {};
        auto room = [&] {
          bool all = true;
          for (int j = 0; j < kLanes; ++j) all &= done[j] + 8 <= kFhSubValues;
          return all;
        };
        while (room()) {
          for (int j = 0; j < kLanes; ++j) r[j].refill();
          for (int step = 0; step < 2; ++step) {
            for (int j = 0; j < kLanes; ++j) {
              const uint32_t x = lut3[r[j].buf >> (64 - kFhMaxLen)];
              std::memcpy(ek + j * kFhSubValues + done[j], &x, 4);  // bytes 0..2, and one that later codes overwrite
              r[j].skip((x >> 24) & 15);
              done[j] += x >> 28;
            }
          }
        }
        for (int j = 0; j < kLanes; ++j)
          for (uint32_t i = done[j]; i < kFhSubValues; ++i) ek[j * kFhSubValues + i] = uint8_t(r[j].next(lut));
      } else {
        for (uint32_t i = 0; i < kFhSubValues; i += 2) {
          for (int j = 0; j < kLanes; ++j) r[j].refill();
          for (int j = 0; j < kLanes; ++j) ek[j * kFhSubValues + i] = uint8_t(r[j].take(lut));
          for (int j = 0; j < kLanes; ++j) ek[j * kFhSubValues + i + 1] = uint8_t(r[j].take(lut));
        }
      }
      for (int j = 0; j < kLanes; ++j) {
        if (!sub_end_ok(wbase + 4 * off, counts[k + j], r[j].used)) return Status::Corrupt;
        off += counts[k + j];
      }
    }
    for (; k < S; ++k) {
      r[0].init(wbase + 4 * off, counts[k]);
      uint8_t* ek = e + k * kFhSubValues;
      const uint32_t c = fh_sub_count(n, k);
      for (uint32_t i = 0; i < c; ++i) ek[i] = uint8_t(r[0].next(lut));
      if (!sub_end_ok(wbase + 4 * off, counts[k], r[0].used)) return Status::Corrupt;
      off += counts[k];
    }
  }
  if (t == ElemType::U8) return Status::Ok;
  return floatexp_join(e, wbase + 4 * words, t, n, out) ? Status::Ok : Status::Corrupt;
}

}  // namespace ncclz::codec
