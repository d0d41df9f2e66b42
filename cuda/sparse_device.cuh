// The Sparse payload (docs/FORMAT.md "Sparse", cpp/src/codec/sparse_coder.hpp)
// and the Rans frames inside it, on the device: the CPU encoder's scalar
// arithmetic step for step (sparse_coder.cpp encode_nonzeros, rans_coder.cpp
// rans_encode / encode_framed / encode_core), so the bytes are the CPU's, and
// the CPU decoder's checks (sparse_decode_impl, decode_framed, decode_core,
// ExtraReader), so every payload gets the CPU's status. Used by
// select_kernels.cu.
//
// Correctness first: one thread of the slice's CTA runs the O(k) part (the
// CTA finds the nonzeros before it, and zeroes the output before decoding);
// the tables live in shared memory (SparseEncShared, SparseDecShared). The
// decoder runs the gap and value frames in lockstep (two tables), so it needs
// no scratch for the decoded streams: the CPU decodes each frame whole first,
// but every failure of either is Status::Corrupt, so the statuses agree.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "codec/block_coder.hpp"
#include "codec/rans_coder.hpp"
#include "codec/sparse_coder.hpp"
#include "device_common.cuh"

namespace ncclz::cuda::detail {

constexpr uint32_t kRansM = 1u << codec::kRansScaleBits;
constexpr uint32_t kRansL = 1u << 16;

struct DevEncSym {
  uint64_t rcp;
  uint32_t xmax;
  uint16_t bias, cmpl;
};

/// One thread's tables for encoding a Sparse payload (shared memory).
struct SparseEncShared {
  uint32_t hist[codec::kRansAlphabet];
  uint32_t freq[codec::kRansAlphabet];
  uint32_t present[codec::kRansAlphabet];
  uint64_t rem[codec::kRansAlphabet];
  uint32_t h0[codec::kRansAlphabet], hs[codec::kRansAlphabet];
  DevEncSym es[codec::kRansAlphabet];
};

__device__ __forceinline__ uint64_t mul_hi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return uint64_t((unsigned __int128)a * b >> 64);
#endif
}
__device__ __forceinline__ int bit_len64(uint64_t x) { return x ? codec::rans_bit_length(x) : 0; }
__device__ __forceinline__ uint64_t low_mask64(int nb) { return nb >= 64 ? ~uint64_t(0) : (uint64_t(1) << nb) - 1; }

/// LSB-first bit writer straight into the payload (bytes written as they fill).
struct DevBitWriter {
  uint8_t* w;
  uint64_t acc = 0;
  uint32_t n = 0;                                 // pending bits, < 8 between calls
  __device__ void put(uint64_t v, uint32_t nb) {  // any nb <= 64
    while (nb > 0) {
      const uint32_t take = nb > 32 ? 32 : nb;
      acc |= (v & low_mask64(int(take))) << n;
      n += take;
      v = take == 64 ? 0 : v >> take;
      nb -= take;
      while (n >= 8) {
        *w++ = uint8_t(acc);
        acc >>= 8;
        n -= 8;
      }
    }
  }
  __device__ void finish() {
    if (n) *w++ = uint8_t(acc);
    n = 0;
  }
};

/// rans_normalize (rans_coder.cpp): the same frequencies (the sort's order is
/// total: remainder down, then symbol up, so any sort gives the same table).
__device__ inline void dev_rans_normalize(SparseEncShared& s) {
  uint32_t nsym = 0;
  uint64_t sum_h = 0;
  for (int k = 0; k < codec::kRansAlphabet; ++k) {
    s.freq[k] = 0;
    if (s.hist[k]) {
      s.present[nsym++] = uint32_t(k);
      sum_h += s.hist[k];
    }
  }
  if (nsym == 0) return;
  if (nsym == 1) {
    s.freq[s.present[0]] = kRansM;
    return;
  }
  const uint64_t avail = kRansM - nsym;
  uint32_t sum = 0;
  for (uint32_t k = 0; k < nsym; ++k) {
    const uint32_t y = s.present[k];
    const uint64_t num = uint64_t(s.hist[y]) * avail;
    s.freq[y] = 1 + uint32_t(num / sum_h);
    s.rem[y] = num % sum_h;
    sum += s.freq[y];
  }
  const uint32_t left = kRansM - sum;
  if (!left) return;
  for (uint32_t a = 1; a < nsym; ++a) {  // insertion sort, remainder down, symbol up
    const uint32_t v = s.present[a];
    uint32_t b = a;
    while (b > 0) {
      const uint32_t u = s.present[b - 1];
      if (s.rem[u] > s.rem[v] || (s.rem[u] == s.rem[v] && u < v)) break;
      s.present[b] = u;
      --b;
    }
    s.present[b] = v;
  }
  for (uint32_t k = 0; k < left; ++k) ++s.freq[s.present[k]];
}

/// A Rans frame of n residuals given as their zigzag values z(i) (rans_encode
/// of the residuals, byte for byte): returns its bytes, or codec::kNoFit.
template <class Z>
__device__ size_t dev_rans_encode(const Z& z, size_t n, uint8_t* dst, size_t cap, SparseEncShared& s) {
  if (n == 0) return 0;
  for (int k = 0; k < codec::kRansAlphabet; ++k) s.hist[k] = 0;
  uint64_t xbits = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t sym, nb;
    uint64_t ev;
    codec::rans_map_zigzag(z(i), &sym, &nb, &ev);
    ++s.hist[sym];
    xbits += nb;
  }
  const size_t xbytes = size_t((xbits + 7) / 8);
  dev_rans_normalize(s);
  size_t tb = codec::kRansBitmapBytes;
  for (int k = 0; k < codec::kRansAlphabet; ++k)
    if (s.freq[k]) tb += (s.freq[k] - 1) < 128 ? 1 : 2;
  const size_t head = tb + codec::kRansFixedBytes;
  if (head > cap || xbytes > cap - head) return codec::kNoFit;
  // The table (write_table).
  for (size_t b = 0; b < codec::kRansBitmapBytes; ++b) dst[b] = 0;
  size_t o = codec::kRansBitmapBytes;
  for (int k = 0; k < codec::kRansAlphabet; ++k) {
    if (!s.freq[k]) continue;
    dst[k >> 3] |= uint8_t(1u << (k & 7));
    const uint32_t v = s.freq[k] - 1;
    if (v < 128) {
      dst[o++] = uint8_t(v);
    } else {
      dst[o++] = uint8_t(0x80 | (v & 0x7F));
      dst[o++] = uint8_t(v >> 7);
    }
  }
  // build_encoder.
  uint32_t cum = 0;
  for (int k = 0; k < codec::kRansAlphabet; ++k) {
    const uint32_t f = s.freq[k];
    DevEncSym& e = s.es[k];
    if (!f) {
      e = DevEncSym{0, 0, 0, 0};
      continue;
    }
    const uint64_t xm = (uint64_t(kRansL >> codec::kRansScaleBits) << 16) * f;
    e.xmax = uint32_t(xm < 0xFFFFFFFFull ? xm : 0xFFFFFFFFull);
    e.cmpl = uint16_t(kRansM - f);
    if (f == 1) {
      e.rcp = ~uint64_t(0);
      e.bias = uint16_t(cum + kRansM - 1);
    } else {
      e.rcp = (~uint64_t(0)) / f + 1;
      e.bias = uint16_t(cum);
    }
    cum += f;
  }
  // The extra bits, LSB first in element order, at dst + head.
  DevBitWriter bw{dst + head};
  for (size_t i = 0; i < n; ++i) {
    uint32_t sym, nb;
    uint64_t ev;
    codec::rans_map_zigzag(z(i), &sym, &nb, &ev);
    if (nb) bw.put(ev, nb);
  }
  bw.finish();
  // encode_core: backwards, 16-bit words downwards from dst + cap, never below data.
  uint8_t* const data = dst + head + xbytes;
  uint8_t* const end = dst + cap;
  uint8_t* p = end;
  uint32_t x[codec::kRansLanes];
  for (int k = 0; k < codec::kRansLanes; ++k) x[k] = kRansL;
  for (size_t i = n; i-- > 0;) {
    uint32_t sym, nb;
    uint64_t ev;
    codec::rans_map_zigzag(z(i), &sym, &nb, &ev);
    const DevEncSym& e = s.es[sym];
    uint32_t& xs = x[i % codec::kRansLanes];
    if (xs >= e.xmax) {
      if (p - data < 2) return codec::kNoFit;
      p -= 2;
      p[0] = uint8_t(xs);
      p[1] = uint8_t(xs >> 8);
      xs >>= 16;
    }
    const uint64_t q = mul_hi64(xs, e.rcp);
    xs = uint32_t(xs + e.bias + uint32_t(q) * e.cmpl);
  }
  const size_t rbytes = size_t(end - p);
  for (size_t b = 0; b < rbytes; ++b) data[b] = p[b];  // data <= p: a forward copy is safe
  codec::store_u32(dst + tb, uint32_t(xbytes));
  codec::store_u32(dst + tb + 4, uint32_t(rbytes));
  for (int k = 0; k < codec::kRansLanes; ++k) codec::store_u32(dst + tb + 8 + 4 * k, x[k]);
  return head + xbytes + rbytes;
}

/// choose_shift (sparse_coder.cpp) over x(i), i < k, with its bit-length
/// histogram lens[0..max_len] of `counted` values.
template <class X>
__device__ int dev_choose_shift(const X& x, size_t k, const uint32_t* lens, int max_len, size_t counted,
                                SparseEncShared& s) {
  int med = max_len;
  uint64_t cum = 0;
  for (int L = 0; L <= max_len; ++L) {
    cum += lens[L];
    if (2 * cum >= counted) {
      med = L;
      break;
    }
  }
  const int sh = med - 2;
  if (sh <= 0) return 0;
  const size_t stride = k / 1024 > 1 ? k / 1024 : 1;  // kShiftSample
  for (int q = 0; q < codec::kRansAlphabet; ++q) s.h0[q] = s.hs[q] = 0;
  uint64_t e0 = 0, es = 0, sampled = 0;
  for (size_t i = 0; i < k; i += stride, ++sampled) {
    uint32_t sym, eb;
    uint64_t ev;
    const uint64_t v = x(i);
    codec::rans_map_zigzag(v, &sym, &eb, &ev);
    ++s.h0[sym];
    e0 += eb;
    codec::rans_map_zigzag(v >> sh, &sym, &eb, &ev);
    ++s.hs[sym];
    es += eb;
  }
  const size_t est0 = codec::rans_estimate_bytes(s.h0, sampled, e0, k);
  const size_t ests = codec::rans_estimate_bytes(s.hs, sampled, es, k) + size_t((uint64_t(k) * uint64_t(sh) + 7) / 8);
  return double(est0) < 0.97 * double(ests) ? 0 : sh;
}

/// The Sparse payload of n residuals with k nonzeros at positions pos[0..k)
/// (increasing) whose values are res(pos[i]) (encode_nonzeros, byte for byte).
template <class Code, class Res>
__device__ size_t dev_sparse_encode(const uint32_t* pos, const Res& res, size_t k, size_t n, uint8_t* dst, size_t cap,
                                    SparseEncShared& s) {
  using U = codec::UCode<Code>;
  constexpr int B = int(sizeof(Code) * 8);
  if (n == 0) return 0;
  if (k == 0) {
    if (cap < 4) return codec::kNoFit;
    codec::store_u32(dst, 0);
    return 4;
  }
  if (cap < codec::kSparseHeadBytes) return codec::kNoFit;
  auto gap = [&](size_t i) -> uint32_t { return i == 0 ? pos[0] : pos[i] - pos[i - 1] - 1; };
  auto val = [&](size_t i) -> U { return U(codec::rans_zigzag(res(pos[i])) - 1); };
  uint32_t glen[33], vlen[65];
  for (int q = 0; q <= 32; ++q) glen[q] = 0;
  for (int q = 0; q <= 64; ++q) vlen[q] = 0;
  const size_t stride = k / 4096 > 1 ? k / 4096 : 1;  // kLengthSample
  size_t counted = 0;
  for (size_t i = 0; i < k; i += stride, ++counted) {
    ++glen[bit_len64(gap(i))];
    ++vlen[bit_len64(uint64_t(val(i)))];
  }
  const int gs = dev_choose_shift([&](size_t i) { return uint64_t(gap(i)); }, k, glen, 32, counted, s);
  const int vs = dev_choose_shift([&](size_t i) { return uint64_t(val(i)); }, k, vlen, B, counted, s);
  const uint64_t low_bits = uint64_t(k) * uint64_t(gs + vs);
  const size_t low_bytes = size_t((low_bits + 7) / 8);
  if (low_bytes > cap - codec::kSparseHeadBytes) return codec::kNoFit;
  if (gs + vs > 0) {
    DevBitWriter bw{dst + codec::kSparseHeadBytes};
    for (size_t i = 0; i < k; ++i) {
      bw.put(gap(i) & low_mask64(gs), uint32_t(gs));
      bw.put(uint64_t(val(i)) & low_mask64(vs), uint32_t(vs));
    }
    bw.finish();
  }
  size_t at = codec::kSparseHeadBytes + low_bytes;
  // The frames' residuals are unzigzag(x >> shift): their zigzag is x >> shift.
  const size_t gbytes = dev_rans_encode([&](size_t i) { return uint64_t(gap(i) >> gs); }, k, dst + at, cap - at, s);
  if (gbytes == codec::kNoFit) return codec::kNoFit;
  at += gbytes;
  const size_t vbytes = dev_rans_encode([&](size_t i) { return uint64_t(U(val(i) >> vs)); }, k, dst + at, cap - at, s);
  if (vbytes == codec::kNoFit) return codec::kNoFit;
  at += vbytes;
  codec::store_u32(dst, uint32_t(k));
  dst[4] = uint8_t(gs);
  dst[5] = uint8_t(vs);
  codec::store_u32(dst + 6, uint32_t(gbytes));
  return at;
}

// ---------------------------------------------------------------- decode

struct DevDecEntry {
  uint16_t freq, bias;
};
/// One frame's decoder table (shared memory).
struct DevDecTable {
  DevDecEntry e[kRansM];
  uint8_t sym[kRansM];
};

/// One Rans frame decoded symbol by symbol (decode_framed + decode_core +
/// the extra-bit reader of rans_decode): open(), then next() n times, then
/// done(); any inconsistency makes ok false.
struct DevFrameDec {
  const uint8_t* p = nullptr;
  const uint8_t* end = nullptr;
  const uint8_t* xb = nullptr;
  size_t xbytes = 0;
  uint64_t xpos = 0;
  uint32_t x[codec::kRansLanes];
  int single = -1;   // the symbol of a single-symbol table
  bool any = false;  // symbols with extra bits
  bool ok = true;
  size_t i = 0;
  DevDecTable* t = nullptr;

  __device__ bool open(const uint8_t* src, size_t len, size_t n, uint32_t max_sym, DevDecTable* table) {
    t = table;
    if (n == 0) return ok = len == 0;
    if (!src) return ok = false;
    // read_table
    uint32_t freq[codec::kRansAlphabet];
    if (len < codec::kRansBitmapBytes) return ok = false;
    size_t o = codec::kRansBitmapBytes;
    uint32_t sum = 0;
    for (uint32_t y = 0; y < uint32_t(codec::kRansAlphabet); ++y) {
      freq[y] = 0;
      if (!((src[y >> 3] >> (y & 7)) & 1)) continue;
      if (y > max_sym || o >= len) return ok = false;
      uint32_t v = src[o++];
      if (v & 0x80) {
        if (o >= len) return ok = false;
        const uint32_t hi = src[o++];
        if (hi == 0 || hi > (kRansM - 1) >> 7) return ok = false;
        v = (v & 0x7F) | (hi << 7);
      }
      freq[y] = v + 1;
      sum += v + 1;
      if (sum > kRansM) return ok = false;
    }
    if (sum != kRansM) return ok = false;
    const size_t tb = o;
    if (len - tb < codec::kRansFixedBytes) return ok = false;
    const uint64_t xlen = codec::load_u32(src + tb);
    const uint64_t rlen = codec::load_u32(src + tb + 4);
    const size_t head = tb + codec::kRansFixedBytes;
    if (rlen & 1) return ok = false;
    if (uint64_t(len - head) != xlen + rlen) return ok = false;
    for (int k = 0; k < codec::kRansLanes; ++k) x[k] = codec::load_u32(src + tb + 8 + 4 * k);
    xb = src + head;
    xbytes = size_t(xlen);
    for (uint32_t y = codec::kRansDirect; y < uint32_t(codec::kRansAlphabet); ++y) any |= freq[y] != 0;
    if (!any && xbytes != 0) return ok = false;
    for (uint32_t y = 0; y < uint32_t(codec::kRansAlphabet); ++y) {
      if (freq[y] == kRansM) {
        if (rlen != 0) return ok = false;
        for (int k = 0; k < codec::kRansLanes; ++k)
          if (x[k] != kRansL) return ok = false;
        single = int(y);
        return true;
      }
      if (freq[y]) break;
    }
    for (int k = 0; k < codec::kRansLanes; ++k)
      if (x[k] < kRansL) return ok = false;
    uint32_t cum = 0;
    for (uint32_t y = 0; y < uint32_t(codec::kRansAlphabet); ++y) {
      const uint32_t f = freq[y];
      for (uint32_t k = 0; k < f; ++k) {
        t->e[cum + k] = DevDecEntry{uint16_t(f), uint16_t(k)};
        t->sym[cum + k] = uint8_t(y);
      }
      cum += f;
    }
    p = src + head + xlen;
    end = p + rlen;
    return true;
  }

  /// ExtraReader::get_any: past the stream's end the bits read as 0.
  __device__ uint64_t extra(uint32_t nb) {
    uint64_t v = 0;
    for (uint32_t b = 0; b < nb; ++b) {
      const uint64_t bp = xpos + b;
      const size_t at = size_t(bp >> 3);
      const uint64_t bit = at < xbytes ? (xb[at] >> (bp & 7)) & 1u : 0;
      v |= bit << b;
    }
    xpos += nb;
    return v;
  }

  /// The next residual's zigzag value.
  __device__ uint64_t next() {
    uint32_t y;
    if (single >= 0) {
      y = uint32_t(single);
    } else {
      uint32_t& xs = x[i % codec::kRansLanes];
      const uint32_t slot = xs & (kRansM - 1);
      const DevDecEntry e = t->e[slot];
      y = t->sym[slot];
      xs = uint32_t(e.freq) * (xs >> codec::kRansScaleBits) + e.bias;
      if (xs < kRansL) {
        if (end - p < 2) {
          ok = false;
        } else {
          xs = (xs << 16) | uint32_t(p[0]) | (uint32_t(p[1]) << 8);
          p += 2;
        }
      }
    }
    ++i;
    if (y < codec::kRansDirect) return y;
    const uint32_t j = y - codec::kRansDirect, L = 8 + j / 2;
    return (uint64_t(2 | (j & 1)) << (L - 2)) | extra(L - 2);
  }

  /// The frame was consumed exactly (decode_core's end checks, ExtraReader::finished).
  __device__ bool done() const {
    if (!ok) return false;
    if (single < 0) {
      if (p != end) return false;
      for (int k = 0; k < codec::kRansLanes; ++k)
        if (x[k] != kRansL) return false;
    }
    if (any) {
      const uint64_t total = uint64_t(xbytes) * 8;
      if (xpos > total || total - xpos >= 8) return false;
      if (xpos != total && (xb[xbytes - 1] >> (xpos & 7)) != 0) return false;
    }
    return true;
  }
};

/// Decodes a Sparse payload of n residuals (sparse_decode's checks and
/// status) into out, which the caller has zeroed. One thread.
template <class Code>
__device__ codec::Status dev_sparse_decode(const uint8_t* src, size_t len, size_t n, Code* out, DevDecTable* tg,
                                           DevDecTable* tv) {
  using U = codec::UCode<Code>;
  using codec::Status;
  constexpr int B = int(sizeof(Code) * 8);
  if (n == 0) return len == 0 ? Status::Ok : Status::Corrupt;
  if (!src || len < 4) return Status::Corrupt;
  const uint32_t k = codec::load_u32(src);
  if (k > n) return Status::Corrupt;
  if (k == 0) return len != 4 ? Status::Corrupt : Status::Ok;
  if (len < codec::kSparseHeadBytes) return Status::Corrupt;
  const int gs = src[4], vs = src[5];
  if (gs > 31 || vs > B - 1) return Status::Corrupt;
  const size_t gbytes = codec::load_u32(src + 6);
  const uint64_t low_bits = uint64_t(k) * uint64_t(gs + vs);
  const uint64_t low_bytes = (low_bits + 7) / 8;
  size_t rest = len - codec::kSparseHeadBytes;
  if (low_bytes > rest) return Status::Corrupt;
  rest -= size_t(low_bytes);
  if (gbytes > rest) return Status::Corrupt;
  const size_t vbytes = rest - gbytes;
  const uint8_t* low = src + codec::kSparseHeadBytes;
  const uint8_t* gframe = low + low_bytes;
  const uint8_t* vframe = gframe + gbytes;
  DevFrameDec g, v;
  if (!g.open(gframe, gbytes, k, codec::rans_max_symbol(32), tg)) return Status::Corrupt;
  if (!v.open(vframe, vbytes, k, codec::rans_max_symbol(B), tv)) return Status::Corrupt;
  if ((low_bits & 7) && (low[low_bytes - 1] >> (low_bits & 7)) != 0) return Status::Corrupt;
  if (gbytes + vbytes < 8) return Status::Corrupt;
  constexpr U kMaxZ = U(~U(0));
  const uint64_t gm = low_mask64(gs);
  uint64_t p = 0, bp = 0;
  bool bad = false;
  for (uint32_t i = 0; i < k && !bad; ++i) {
    // The frames' residuals, as rans_decode gives them (int32 gaps, Code values).
    // The frames' residuals' zigzag values (the CPU zigzags rans_decode's residuals back).
    const uint32_t gz = uint32_t(g.next());
    const U hz = U(v.next());
    uint64_t glo = 0, vlo = 0;
    for (int b = 0; b < gs; ++b, ++bp) glo |= uint64_t((low[bp >> 3] >> (bp & 7)) & 1u) << b;
    for (int b = 0; b < vs; ++b, ++bp) vlo |= uint64_t((low[bp >> 3] >> (bp & 7)) & 1u) << b;
    p += (uint64_t(gz) << gs) | (glo & gm);
    if (p >= n || (vs > 0 && (hz >> (B - vs)) != 0)) {
      bad = true;
      break;
    }
    const U z = U(U(hz << vs) | U(vlo));
    if (z == kMaxZ) {
      bad = true;
      break;
    }
    out[p++] = codec::rans_unzigzag<Code>(U(z + 1));
  }
  // Both frames decoded whole and consumed exactly (the CPU checks them before
  // the scatter; every failure there or here is Corrupt alike).
  if (bad || !g.done() || !v.done()) return Status::Corrupt;
  return Status::Ok;
}

}  // namespace ncclz::cuda::detail
