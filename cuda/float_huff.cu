// FloatHuff on the device (ncclz/cuda_float_huff.hpp; format: docs/FORMAT.md
// "FloatHuff"; the table rule and layout arithmetic: codec/float_huff.hpp,
// shared with the CPU coder). Byte-identical to the CPU encoder. U8 goes
// through the same kernels with each byte its own "exponent" and no plane
// (the plane helpers do nothing for it).
//
// v1 (FloatHuffCoder::set_kernels(1)): a CTA covers kCtaSubs sub-streams
// (kCtaValues values): it loads its values with coalesced loads, keeps their
// exponents in shared memory (each sub-stream's 256 bytes at a stride of 260,
// so that the 32 threads of a warp reading byte i of their own sub-streams hit
// 32 different banks), and each thread codes or decodes one sub-stream from
// there.
//
// v3 (FloatHuffCoder::set_kernels(3)): v2's encode; the decode of section
// "v3 decode" below (several symbols per lookup, a warp per group).
//
// v2 (the default): the encode's kernels take 8 consecutive values per thread
// (load8: one or two 16-byte loads), so a warp holds one sub-stream's 256
// values: the count is a warp sum of the lanes' code bits, and the write
// kernel scans the lanes' bits, ORs each lane's codes into the warp's words in
// shared memory and stores them coalesced. The histogram gives each lane of a
// warp its own counter per symbol (h[32 s + lane]: no two lanes of a warp add
// to one address, and they hit 32 different banks). The table is built by one
// CTA of 256 threads in shared memory (build_table_cta: the CPU's rule, step
// by step the same lengths and codes). Grids hold a few CTAs per SM and loop.
// The decode keeps v1's plan (one thread per sub-stream, the exponents staged
// in shared memory) but its CTAs loop over chunks of 128 sub-streams, building
// the table once (two levels, 3 KiB: six CTAs fit an H100/H200 SM, five with
// v1's 8 KiB table); the reader loads its words three refills ahead, and the
// plane and values move in 4- and 16-byte accesses (a thread loads 4 groups of
// 8 values' plane bytes before it stores any).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "codec/float_huff.hpp"
#include "codec/slice_frame.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_float_huff.hpp"

namespace ncclz::cuda {
namespace {

using codec::ElemType;
using codec::Status;
using detail::ScratchLayout;

constexpr int kCtaSubs = 128;  // threads (sub-streams) per CTA; a multiple of kFhGroup
constexpr uint32_t kStride = codec::kFhSubValues + 4;
constexpr uint32_t kCtaValues = kCtaSubs * codec::kFhSubValues;
constexpr unsigned long long kNoFitBytes = ~0ull;
static_assert(kCtaSubs % codec::kFhGroup == 0, "a CTA holds whole groups");

// What the table kernel leaves for the others.
struct EncState {
  uint32_t hist[256];
  uint8_t len[256];
  uint16_t code[256];
  int coded;  // more than one symbol: code words; else none
  int fits;   // the payload fits cap (the index kernel's verdict)
  unsigned long long words;
};

__device__ __forceinline__ uint32_t bits_of(const void* x, ElemType t, size_t i) {
  return t == ElemType::F32  ? static_cast<const uint32_t*>(x)[i]
         : t == ElemType::U8 ? uint32_t(static_cast<const uint8_t*>(x)[i])
                             : uint32_t(static_cast<const uint16_t*>(x)[i]);
}
// The symbol of a value's bits: its exponent field; U8: the byte.
__device__ __forceinline__ uint32_t exponent_of(uint32_t b, ElemType t) {
  return t == ElemType::F32    ? (b >> 23) & 0xFFu
         : t == ElemType::BF16 ? (b >> 7) & 0xFFu
         : t == ElemType::U8   ? b & 0xFFu
                               : (b >> 10) & 0x1Fu;
}
// Shared-memory slot of value j of a CTA.
__device__ __forceinline__ uint32_t slot(uint32_t j) {
  return (j / codec::kFhSubValues) * kStride + j % codec::kFhSubValues;
}

// The CTA's exponents into e[] (values past n: nothing).
__device__ void load_exponents(const void* x, ElemType t, size_t n, size_t base, uint8_t* e) {
  for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
    const size_t i = base + j;
    if (i < n) e[slot(j)] = uint8_t(exponent_of(bits_of(x, t, i), t));
  }
}

__global__ void fh_hist_kernel(const void* x, ElemType t, size_t n, EncState* st) {
  __shared__ uint32_t h[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) h[s] = 0;
  __syncthreads();
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
    const size_t i = base + j;
    if (i < n) atomicAdd(&h[exponent_of(bits_of(x, t, i), t)], 1u);
  }
  __syncthreads();
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x)
    if (h[s]) atomicAdd(&st->hist[s], h[s]);
}

// The code lengths and codes of histogram hist[0..A) (the CPU's rule), one
// thread; returns whether more than one symbol is present.
__device__ bool build_table(const uint32_t* hist, uint32_t A, uint8_t* len, uint16_t* code) {
  codec::fh_build_lengths(hist, A, len);
  codec::fh_canonical_codes(len, A, code);
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) m += len[s] != 0;
  return m > 1;
}

// One thread: the table, and the payload's table of 4-bit lengths.
__global__ void fh_table_kernel(ElemType t, EncState* st, uint8_t* out) {
  const uint32_t A = codec::fh_alphabet(t);
  st->coded = build_table(st->hist, A, st->len, st->code);
  for (uint32_t s = 0; s < A; s += 2) out[s / 2] = uint8_t(st->len[s] | (st->len[s + 1] << 4));
}

// v2: the same rule with the CTA's 256 threads (one per symbol) and every
// working array in shared memory (one thread running fh_build_lengths keeps
// its arrays in local memory: tens of microseconds). Each step gives what
// fh_build_lengths and fh_canonical_codes give:
//  - the sort by (count, symbol) by ranking: a used symbol's position is the
//    number of used symbols with a smaller key count << 8 | symbol;
//  - the two-queue merge (at most 255 steps) by one thread, the heads of both
//    queues in registers (~0: an empty queue; weights stay below 2^40);
//  - the internal nodes' depths by pointer jumping (each node adds its
//    ancestor's distance and jumps to the ancestor's ancestor until every node
//    points at the root), then the leaves' depth counts by atomics;
//  - the length limit by one thread (the same loop on the same counts);
//  - the lengths: sorted position i takes the length d whose range of
//    positions (longest first, cnt[d] each) holds i, as the CPU's hand-out;
//  - the canonical codes: next[len] plus the number of smaller symbols of the
//    same length (warp ballots per length, then the warps before).
constexpr uint32_t kTableThreads = 256;  // fh_table_v2_kernel's CTA: one thread per symbol
constexpr unsigned long long kNoWeight = ~0ull;

struct TableShared {
  unsigned long long key[256];                              // count << 8 | symbol; kNoWeight: absent
  unsigned long long iw[256];                               // internal nodes' weights
  uint32_t w[256];                                          // leaf weights in sorted order
  uint32_t cnt[257];                                        // leaves per depth
  uint32_t wcnt[kTableThreads / 32][codec::kFhMaxLen + 1];  // symbols per warp and length
  uint32_t next[codec::kFhMaxLen + 1];                      // first canonical code per length
  uint32_t maxd;
  uint8_t sym[256];          // symbol at sorted position
  uint8_t leaf_parent[256];  // by sorted position
  uint8_t int_parent[256];
  uint8_t up[256];    // pointer jumping: an ancestor of each internal node
  uint8_t dist[256];  // its distance
};

// hist, len, code: shared; blockDim.x == kTableThreads; all threads call it.
// Returns whether more than one symbol is present (the same in every thread).
__device__ bool build_table_cta(const uint32_t* hist, uint32_t A, uint8_t* len, uint16_t* code, TableShared& sh) {
  const uint32_t t = threadIdx.x, lane = t % 32, warp = t / 32;
  const uint32_t c = t < A ? hist[t] : 0;
  const unsigned long long mine = c ? (static_cast<unsigned long long>(c) << 8) | t : kNoWeight;
  sh.key[t] = mine;
  sh.cnt[t] = 0;
  if (t == 0) {
    sh.cnt[256] = 0;
    sh.maxd = 0;
  }
  len[t] = 0;
  const uint32_t m = uint32_t(__syncthreads_count(c != 0));
  if (c) {
    uint32_t pos = 0;
    for (uint32_t u = 0; u < A; ++u) pos += sh.key[u] < mine;
    sh.sym[pos] = uint8_t(t);
    sh.w[pos] = c;
  }
  __syncthreads();
  if (m >= 2) {
    const uint32_t nint = m - 1, root = m - 2;
    if (t == 0) {
      uint32_t li = 0, ii = 0;
      unsigned long long lw = sh.w[0], nw = kNoWeight;  // the queues' heads
      for (uint32_t k = 0; k < nint; ++k) {
        unsigned long long sum = 0;
        for (int pick = 0; pick < 2; ++pick) {
          if (lw <= nw) {  // a leaf before an equal internal node; an empty queue never wins
            sum += lw;
            sh.leaf_parent[li++] = uint8_t(k);
            lw = li < m ? sh.w[li] : kNoWeight;
          } else {
            sum += nw;
            sh.int_parent[ii++] = uint8_t(k);
            nw = ii < k ? sh.iw[ii] : kNoWeight;
          }
        }
        sh.iw[k] = sum;
        if (ii == k) nw = sum;
      }
    }
    __syncthreads();
    uint32_t up = t, dist = 0;
    if (t < nint && t != root) {
      up = sh.int_parent[t];
      dist = 1;
    }
    sh.up[t] = uint8_t(up);
    sh.dist[t] = uint8_t(dist);
    // Until every node points at the root (depths < 255: at most 8 rounds).
    while (__syncthreads_count(up != root && t < nint)) {
      const uint32_t aup = sh.up[up], adist = sh.dist[up];
      __syncthreads();
      if (t < nint) {
        up = aup;
        dist += adist;
        sh.up[t] = uint8_t(up);
        sh.dist[t] = uint8_t(dist);
      }
    }
    if (t < m) {
      const uint32_t d = sh.dist[sh.leaf_parent[t]] + 1u;
      atomicAdd(&sh.cnt[d], 1u);
      atomicMax(&sh.maxd, d);
    }
    __syncthreads();
    const uint32_t maxd = sh.maxd;
    if (t == 0) codec::fh_limit_depths(sh.cnt, maxd);
    __syncthreads();
    if (t < m) {
      uint32_t d = maxd < uint32_t(codec::kFhMaxLen) ? maxd : uint32_t(codec::kFhMaxLen);
      for (uint32_t before = sh.cnt[d]; before <= t;) before += sh.cnt[--d];
      len[sh.sym[t]] = uint8_t(d);
    }
  } else if (m == 1 && t == 0) {
    len[sh.sym[0]] = 1;
  }
  __syncthreads();
  const uint32_t L = len[t];
  uint32_t rank = 0;
  for (uint32_t l = 1; l <= uint32_t(codec::kFhMaxLen); ++l) {
    const unsigned b = __ballot_sync(0xffffffffu, L == l);
    if (L == l) rank = uint32_t(__popc(b & ((1u << lane) - 1u)));
    if (lane == 0) sh.wcnt[warp][l] = uint32_t(__popc(b));
  }
  __syncthreads();
  if (t == 0) {
    uint32_t next = 0, prev = 0;
    for (uint32_t l = 1; l <= uint32_t(codec::kFhMaxLen); ++l) {
      next = (next + prev) << 1;
      sh.next[l] = next;
      prev = 0;
      for (uint32_t w = 0; w < kTableThreads / 32; ++w) prev += sh.wcnt[w][l];
    }
  }
  __syncthreads();
  if (L) {
    for (uint32_t w = 0; w < warp; ++w) rank += sh.wcnt[w][L];
    code[t] = uint16_t(sh.next[L] + rank);
  } else {
    code[t] = 0;
  }
  return m > 1;
}

// v2's table kernel (kTableThreads threads): build_table_cta on the histogram
// in shared memory, the lengths and codes copied out by the CTA's threads.
__global__ void __launch_bounds__(kTableThreads) fh_table_v2_kernel(ElemType t, EncState* st, uint8_t* out) {
  __shared__ uint32_t hist[256];
  __shared__ uint8_t len[256];
  __shared__ uint16_t code[256];
  __shared__ TableShared sh;
  const uint32_t A = codec::fh_alphabet(t);
  hist[threadIdx.x] = threadIdx.x < A ? st->hist[threadIdx.x] : 0;
  __syncthreads();
  const bool coded = build_table_cta(hist, A, len, code, sh);
  __syncthreads();
  if (threadIdx.x < A) {
    st->len[threadIdx.x] = len[threadIdx.x];
    st->code[threadIdx.x] = code[threadIdx.x];
  }
  if (threadIdx.x < A / 2) out[threadIdx.x] = uint8_t(len[2 * threadIdx.x] | (len[2 * threadIdx.x + 1] << 4));
  if (threadIdx.x == 0) st->coded = coded;
}

// Each thread: its sub-stream's word count, into the payload's u8 counts and
// the scan's input.
__global__ void fh_count_kernel(const void* x, ElemType t, size_t n, const EncState* st, uint8_t* counts,
                                unsigned long long* words) {
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t len[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) len[s] = st->len[s];
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  load_exponents(x, t, n, base, e);
  __syncthreads();
  const uint64_t k = uint64_t(blockIdx.x) * kCtaSubs + threadIdx.x;
  if (k >= codec::fh_substreams(n)) return;
  uint32_t bits = 0;
  if (st->coded) {
    const uint32_t c = codec::fh_sub_count(n, k);
    const uint8_t* ek = e + threadIdx.x * kStride;
    for (uint32_t i = 0; i < c; ++i) bits += len[ek[i]];
  }
  const uint32_t w = (bits + 31) / 32;
  counts[k] = uint8_t(w);
  words[k] = w;
}

// The group offsets, the index padding, the total and whether it fits.
__global__ void fh_index_kernel(ElemType t, size_t n, size_t cap, const unsigned long long* words,
                                const unsigned long long* offsets, EncState* st, uint8_t* out,
                                unsigned long long* d_bytes) {
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t g = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < G) codec::store_u32(out + codec::fh_table_bytes(t) + 4 * g, uint32_t(offsets[g * codec::kFhGroup]));
  if (g == 0) {
    const unsigned long long total = offsets[S - 1] + words[S - 1];
    for (uint64_t z = codec::fh_table_bytes(t) + 4 * G + S; z < codec::fh_index_bytes(t, n); ++z) out[z] = 0;
    const unsigned long long bytes = codec::fh_payload_bytes(t, n, total, codec::fh_plane_bytes(t, n));
    const bool fits = total <= 0xFFFFFFFFull && bytes <= cap;
    st->fits = fits;
    st->words = total;
    *d_bytes = fits ? bytes : kNoFitBytes;
  }
}

// F16 plane: 8 values of 11 bits in 11 bytes, LSB-first (FloatExp's packing).
__device__ __forceinline__ uint32_t f16_sm(uint32_t b) { return ((b >> 5) & 0x400u) | (b & 0x3FFu); }
// The plane bytes of F16 values b[0..m) (m <= 8) at p: (11 m + 7) / 8 bytes.
__device__ __forceinline__ void store_f16_plane8(uint8_t* p, const uint32_t* b, uint32_t m) {
  uint64_t acc = 0;  // 88 bits: the low 64 here, the high 24 in hi
  uint32_t hi = 0;
  for (uint32_t k = 0; k < m; ++k) {
    const uint64_t v = f16_sm(b[k]);
    const uint32_t at = 11 * k;
    if (at < 64) acc |= v << at;
    if (at + 11 > 64) hi |= at >= 64 ? uint32_t(v << (at - 64)) : uint32_t(v >> (64 - at));
  }
  const uint32_t nbytes = (11 * m + 7) / 8;
  for (uint32_t q = 0; q < nbytes; ++q) p[q] = uint8_t(q < 8 ? acc >> (8 * q) : hi >> (8 * (q - 8)));
}

// The plane bytes of the CTA's values, then each thread's code words.
__global__ void fh_write_kernel(const void* x, ElemType t, size_t n, const EncState* st,
                                const unsigned long long* offsets, uint8_t* out) {
  if (!st->fits) return;
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t len[256];
  __shared__ uint16_t code[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) {
    len[s] = st->len[s];
    code[s] = st->code[s];
  }
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  const uint64_t index = codec::fh_index_bytes(t, n);
  uint8_t* plane = out + index + 4 * st->words;
  if (t == ElemType::F16) {
    for (uint32_t j8 = threadIdx.x; j8 < kCtaValues / 8; j8 += blockDim.x) {
      const size_t i0 = base + 8 * size_t(j8);
      if (i0 >= n) break;
      const uint32_t m = n - i0 < 8 ? uint32_t(n - i0) : 8u;
      uint32_t b[8];
      for (uint32_t k = 0; k < m; ++k) {
        b[k] = bits_of(x, t, i0 + k);
        e[slot(8 * j8 + k)] = uint8_t(exponent_of(b[k], t));
      }
      store_f16_plane8(plane + i0 / 8 * 11, b, m);
    }
  } else {
    for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
      const size_t i = base + j;
      if (i >= n) break;
      const uint32_t b = bits_of(x, t, i);
      e[slot(j)] = uint8_t(exponent_of(b, t));
      if (t == ElemType::F32) {
        const uint32_t sm = ((b >> 8) & 0x800000u) | (b & 0x7FFFFFu);
        plane[3 * i] = uint8_t(sm);
        plane[3 * i + 1] = uint8_t(sm >> 8);
        plane[3 * i + 2] = uint8_t(sm >> 16);
      } else if (t == ElemType::BF16) {
        plane[i] = uint8_t(((b >> 8) & 0x80u) | (b & 0x7Fu));
      }  // U8: no plane
    }
  }
  __syncthreads();
  const uint64_t k = uint64_t(blockIdx.x) * kCtaSubs + threadIdx.x;
  if (!st->coded || k >= codec::fh_substreams(n)) return;
  // Codes MSB-first into 32-bit words (the format's bit order).
  uint32_t* w = reinterpret_cast<uint32_t*>(out + index) + offsets[k];
  const uint32_t c = codec::fh_sub_count(n, k);
  const uint8_t* ek = e + threadIdx.x * kStride;
  uint64_t acc = 0;
  int nb = 0;
  for (uint32_t i = 0; i < c; ++i) {
    const uint32_t s = ek[i], l = len[s];
    acc = (acc << l) | code[s];
    nb += int(l);
    if (nb >= 32) {
      nb -= 32;
      *w++ = uint32_t(acc >> nb);
    }
  }
  if (nb > 0) *w = uint32_t(acc << (32 - nb));
}

// The 11-bit plane entries of F16 values 0..m) (m <= 8) at p into v[0..8);
// false if the last byte's padding bits (entries m.. of the group) are not zero.
__device__ __forceinline__ bool load_f16_plane8(const uint8_t* p, uint32_t m, uint32_t* v) {
  uint64_t lo = 0;
  uint32_t hi = 0;
  for (uint32_t q = 0; q < (11 * m + 7) / 8; ++q) {
    if (q < 8)
      lo |= uint64_t(p[q]) << (8 * q);
    else
      hi |= uint32_t(p[q]) << (8 * (q - 8));
  }
  bool ok = true;
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t at = 11 * k;
    uint32_t x = at < 64 ? uint32_t(lo >> at) : 0u;
    if (at + 11 > 64) x |= at >= 64 ? hi >> (at - 64) : hi << (64 - at);
    v[k] = x & 0x7FFu;
    if (k >= m && v[k]) ok = false;
  }
  return ok;
}
__device__ __forceinline__ uint16_t f16_value(uint32_t v, uint32_t ex) {
  return uint16_t(((v & 0x400u) << 5) | (ex << 10) | (v & 0x3FFu));
}

// The value of plane entry sm (sign and mantissa) with exponent ex (U8: the
// byte ex).
__device__ __forceinline__ uint32_t value_of(uint32_t sm, uint32_t ex, ElemType t) {
  return t == ElemType::F32    ? ((sm & 0x800000u) << 8) | (ex << 23) | (sm & 0x7FFFFFu)
         : t == ElemType::BF16 ? ((sm & 0x80u) << 8) | (ex << 7) | (sm & 0x7Fu)
         : t == ElemType::U8   ? ex
                               : f16_value(sm, ex);
}

// The decoder's tables: an entry s << 4 | length for the code at the top of
// the 64-bit window `buf`. FullLut (v1): one entry per 12-bit window.
// SplitLut (v2, 3 KiB of shared memory instead of 8): one per 10-bit window
// for the codes of up to 10 bits (entry 0 where the code is longer), and the
// 12-bit windows from `base` on (the codes of 11 and 12 bits, the last in
// canonical order: at most 256 symbols of 2 windows or 1, so 512 entries).
struct FullLut {
  const uint16_t* t;
  __device__ __forceinline__ uint32_t operator()(uint64_t buf) const { return t[buf >> (64 - codec::kFhMaxLen)]; }
};
constexpr int kLut1Bits = 10;
constexpr uint32_t kLut2Size = 512;
struct SplitLut {
  const uint16_t* t1;
  const uint16_t* t2;
  uint32_t base;
  __device__ __forceinline__ uint32_t operator()(uint64_t buf) const {
    const uint32_t e = t1[buf >> (64 - kLut1Bits)];
    return (e & 15) != 0 ? e : t2[uint32_t(buf >> (64 - codec::kFhMaxLen)) - base];
  }
};

// A sub-stream reader as the CPU's: a 64-bit window, zeros past the last
// word. kAhead words (v2: 3) are loaded ahead of the window: a word is loaded
// kAhead refills before the window takes it, so that its latency overlaps the
// decoding of the codes before it (0, v1: loaded when taken).
template <int kAhead>
struct DevReader {
  const uint32_t* p;
  uint32_t left;
  int nb = 0;
  uint64_t buf = 0;
  uint32_t used = 0;
  uint32_t q[kAhead > 0 ? kAhead : 1] = {};
  __device__ DevReader(const uint32_t* w, uint32_t c) : p(w), left(c) {
#pragma unroll
    for (int i = 0; i < kAhead; ++i) q[i] = take();
  }
  __device__ __forceinline__ uint32_t take() {
    uint32_t w = 0;
    if (left) {
      w = *p++;
      --left;
    }
    return w;
  }
  // At least 33 bits in buf (a word taken where 32 or fewer are left).
  __device__ __forceinline__ void refill() {
    if (nb <= 32) {
      uint32_t w;
      if constexpr (kAhead > 0) {
        w = q[0];
#pragma unroll
        for (int i = 0; i + 1 < kAhead; ++i) q[i] = q[i + 1];
        q[kAhead - 1] = take();
      } else {
        w = take();
      }
      buf |= uint64_t(w) << (32 - nb);
      nb += 32;
    }
  }
  // Drops the window's first l bits (l <= 12, after refill()).
  __device__ __forceinline__ void skip(uint32_t l) {
    buf <<= l;
    nb -= int(l);
    used += l;
  }
  template <class Lut>
  __device__ __forceinline__ uint32_t next(const Lut& lut) {
    refill();
    const uint32_t e = lut(buf);
    skip(e & 15);
    return e >> 4;
  }
};

// Thread tid of a CTA whose sub-streams begin at k0 (cnt[]: their word
// counts; c = cnt[tid]): checks its part of the index and decodes sub-stream
// k0 + tid's exponents into ek. False where the payload is corrupt.
//
// The index: each group's offset is its predecessor's plus that group's
// counts (the last group ends at the payload's words), group 0 starts at 0;
// the first thread of each group checks its group.
template <int kAhead, class Lut>
__device__ bool decode_substream(const uint8_t* in, ElemType t, size_t n, unsigned long long words, uint64_t k0,
                                 const uint32_t* cnt, bool coded, uint32_t single, const Lut& lut, uint8_t* ek) {
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint8_t* bases = in + codec::fh_table_bytes(t);
  const uint32_t tid = threadIdx.x, c = cnt[tid];
  const uint64_t k = k0 + tid;
  if (k >= S) return true;
  const uint32_t g0 = tid - tid % codec::kFhGroup;
  bool ok = c <= codec::kFhMaxSubWords && (coded || c == 0);
  const uint64_t g = k / codec::kFhGroup;
  const uint64_t gb = codec::load_u32(bases + 4 * g);
  uint64_t start = gb;
  for (uint32_t j = g0; j < tid; ++j) start += cnt[j];
  if (tid == g0) {
    uint64_t sum = 0;
    for (uint32_t j = g0; j < g0 + codec::kFhGroup; ++j) sum += cnt[j];
    const uint64_t next = g + 1 < G ? codec::load_u32(bases + 4 * (g + 1)) : words;
    if ((g == 0 && gb != 0) || gb + sum != next) ok = false;
  }
  // Never read outside the words, whatever another CTA finds.
  if (start + c > words) ok = false;
  if (!ok) return false;
  const uint32_t nv = codec::fh_sub_count(n, k);
  if (!coded) {
    for (uint32_t i = 0; i < nv; ++i) ek[i] = uint8_t(single);
    return true;
  }
  const uint32_t* w = reinterpret_cast<const uint32_t*>(in + codec::fh_index_bytes(t, n)) + start;
  DevReader<kAhead> r(w, c);
  for (uint32_t i = 0; i < nv; ++i) ek[i] = uint8_t(r.next(lut));
  // The codes end in the last word; its bits after them are zero.
  const uint32_t have = 32 * c;
  if (r.used > have || have - r.used >= 32) return c == 0 && r.used == 0;
  return have == r.used || (w[c - 1] & ((1u << (have - r.used)) - 1)) == 0;
}

// One thread: the decoder's view of the lengths ln[0..A): *bad = 1 where the
// format does not allow them, *coded whether more than one symbol is present,
// *single the (last) present symbol, code[] the canonical codes.
__device__ void check_table(const uint8_t* ln, uint32_t A, uint16_t* code, int* bad, int* coded, int* single) {
  uint32_t m = 0, sym = 0;
  for (uint32_t s = 0; s < A; ++s)
    if (ln[s]) {
      ++m;
      sym = s;
    }
  if (!codec::fh_lengths_valid(ln, A)) *bad = 1;
  *coded = m > 1;
  *single = int(sym);
  codec::fh_canonical_codes(ln, A, code);
}

__global__ void fh_decode_kernel(const uint8_t* in, ElemType t, size_t n, unsigned long long words, void* outv,
                                 int* status) {
  __shared__ uint16_t lut[codec::kFhLutSize];
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t ln[256];
  __shared__ uint16_t code[256];
  __shared__ uint32_t cnt[kCtaSubs];
  __shared__ int bad, coded, single;
  const uint32_t A = codec::fh_alphabet(t);
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t index = codec::fh_index_bytes(t, n);
  const uint8_t* counts = in + codec::fh_table_bytes(t) + 4 * G;
  const uint32_t tid = threadIdx.x;
  if (tid == 0) {
    bad = 0;
    for (uint32_t s = 0; s < A; s += 2) {
      ln[s] = in[s / 2] & 15;
      ln[s + 1] = in[s / 2] >> 4;
    }
    check_table(ln, A, code, &bad, &coded, &single);
    // The index padding (CTA 0 checks it).
    if (blockIdx.x == 0)
      for (uint64_t z = codec::fh_table_bytes(t) + 4 * G + S; z < index; ++z)
        if (in[z]) bad = 1;
  }
  const uint64_t k0 = uint64_t(blockIdx.x) * kCtaSubs;
  cnt[tid] = k0 + tid < S ? counts[k0 + tid] : 0u;
  __syncthreads();
  if (bad) {
    if (tid == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  if (coded) {
    for (uint32_t s = tid; s < A; s += blockDim.x) {
      const uint32_t l = ln[s];
      if (l == 0) continue;
      const uint32_t first = uint32_t(code[s]) << (codec::kFhMaxLen - l), span = 1u << (codec::kFhMaxLen - l);
      for (uint32_t i = 0; i < span; ++i) lut[first + i] = uint16_t(s << 4 | l);
    }
  }
  __syncthreads();
  if (!decode_substream<0>(in, t, n, words, k0, cnt, coded, uint32_t(single), FullLut{lut}, e + tid * kStride))
    atomicExch(&bad, 1);
  __syncthreads();
  if (bad) {
    if (tid == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  // The values: exponents from shared memory, sign+mantissa from the plane.
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  const uint8_t* plane = in + index + 4 * words;
  if (t == ElemType::F16) {
    uint16_t* out = static_cast<uint16_t*>(outv);
    for (uint32_t j8 = tid; j8 < kCtaValues / 8; j8 += blockDim.x) {
      const size_t i0 = base + 8 * size_t(j8);
      if (i0 >= n) break;
      const uint32_t m = n - i0 < 8 ? uint32_t(n - i0) : 8u;
      uint32_t v[8];
      if (!load_f16_plane8(plane + i0 / 8 * 11, m, v)) atomicExch(status, int(Status::Corrupt));
      for (uint32_t k8 = 0; k8 < m; ++k8) out[i0 + k8] = f16_value(v[k8], e[slot(8 * j8 + k8)]);
    }
  } else {
    for (uint32_t j = tid; j < kCtaValues; j += blockDim.x) {
      const size_t i = base + j;
      if (i >= n) break;
      const uint32_t ex = e[slot(j)];
      if (t == ElemType::F32) {
        const uint32_t sm =
            uint32_t(plane[3 * i]) | (uint32_t(plane[3 * i + 1]) << 8) | (uint32_t(plane[3 * i + 2]) << 16);
        static_cast<uint32_t*>(outv)[i] = value_of(sm, ex, t);
      } else if (t == ElemType::U8) {
        static_cast<uint8_t*>(outv)[i] = uint8_t(ex);
      } else {
        static_cast<uint16_t*>(outv)[i] = uint16_t(value_of(plane[i], ex, t));
      }
    }
  }
}

// ---- v2 ----------------------------------------------------------------------

constexpr int kDecodeCtasPerSm = 6;  // v2 decode: 128 threads of at most 80 registers, < 38 KiB of shared memory
constexpr int kReadAhead = 3;        // words the v2 decoder's reader loads ahead (DevReader)
constexpr uint32_t kValueBatch = 4;  // groups of 8 values whose plane bytes a v2 decode thread loads before storing
static_assert(kCtaValues / 8 % (kValueBatch * kCtaSubs) == 0, "the value loop has no tail");

template <ElemType T>
using Bits = std::conditional_t<T == ElemType::F32, uint32_t, std::conditional_t<T == ElemType::U8, uint8_t, uint16_t>>;
constexpr uint32_t kLaneValues = codec::kFhSubValues / 32;  // a warp per sub-stream: 8 values a lane
static_assert(kLaneValues == 8, "load8 gives a lane 8 values");

// The bits of values i0 .. i0 + 7 into b (those at n or past it: 0); returns
// how many are below n. One 16-byte load (two for F32; one 8-byte load for
// U8) where x is so aligned and all 8 are below n (i0 is a multiple of 8);
// else value by value.
template <ElemType T>
__device__ __forceinline__ uint32_t load8(const void* xv, size_t n, size_t i0, uint32_t (&b)[8]) {
  const Bits<T>* x = static_cast<const Bits<T>*>(xv);
  if constexpr (T == ElemType::U8) {
    if (i0 + 8 <= n && (reinterpret_cast<uintptr_t>(x) & 7) == 0) {
      const uint2 a = *reinterpret_cast<const uint2*>(x + i0);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        b[k] = (a.x >> (8 * k)) & 0xFFu;
        b[4 + k] = (a.y >> (8 * k)) & 0xFFu;
      }
      return 8;
    }
  } else if (i0 + 8 <= n && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const uint4* q = reinterpret_cast<const uint4*>(x + i0);
    if constexpr (T == ElemType::F32) {
      const uint4 a = q[0], c = q[1];
      const uint32_t w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
      for (int k = 0; k < 8; ++k) b[k] = w[k];
    } else {
      const uint4 a = q[0];
      const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        b[2 * k] = w[k] & 0xFFFFu;
        b[2 * k + 1] = w[k] >> 16;
      }
    }
    return 8;
  }
  const uint32_t m = i0 >= n ? 0u : n - i0 < 8 ? uint32_t(n - i0) : 8u;
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) b[k] = k < m ? uint32_t(x[i0 + k]) : 0u;
  return m;
}

// The eight values v (m of them valid) to out[i0 ..]: one or two 16-byte
// stores (U8: one 8-byte store) where aligned and m = 8, else value by value.
template <ElemType T>
__device__ __forceinline__ void store8(void* outv, size_t i0, const uint32_t (&v)[8], uint32_t m) {
  Bits<T>* out = static_cast<Bits<T>*>(outv);
  if constexpr (T == ElemType::U8) {
    if (m == 8 && (reinterpret_cast<uintptr_t>(out) & 7) == 0) {
      *reinterpret_cast<uint2*>(out + i0) =
          uint2{v[0] | v[1] << 8 | v[2] << 16 | v[3] << 24, v[4] | v[5] << 8 | v[6] << 16 | v[7] << 24};
      return;
    }
  } else if (m == 8 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
    uint4* q = reinterpret_cast<uint4*>(out + i0);
    if constexpr (T == ElemType::F32) {
      q[0] = uint4{v[0], v[1], v[2], v[3]};
      q[1] = uint4{v[4], v[5], v[6], v[7]};
    } else {
      q[0] = uint4{v[0] | v[1] << 16, v[2] | v[3] << 16, v[4] | v[5] << 16, v[6] | v[7] << 16};
    }
    return;
  }
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k)
    if (k < m) out[i0 + k] = Bits<T>(v[k]);
}

// Plane entries (sign and mantissa) of F32 and BF16 bits.
template <ElemType T>
__device__ __forceinline__ uint32_t plane_entry(uint32_t b) {
  return T == ElemType::F32 ? ((b >> 8) & 0x800000u) | (b & 0x7FFFFFu) : ((b >> 8) & 0x80u) | (b & 0x7Fu);
}

// The plane bytes of values i0 .. i0 + m - 1 (b: their bits, m <= 8, i0 a
// multiple of 8; the plane 4-byte aligned): 4-byte stores where m = 8.
template <ElemType T>
__device__ __forceinline__ void store_plane8(uint8_t* plane, size_t i0, const uint32_t (&b)[8], uint32_t m) {
  if constexpr (T == ElemType::U8) {
    (void)plane, (void)i0, (void)b, (void)m;  // no plane
  } else if constexpr (T == ElemType::F16) {
    if (m) store_f16_plane8(plane + i0 / 8 * 11, b, m);
  } else {
    constexpr uint32_t E = T == ElemType::F32 ? 3 : 1;  // bytes per entry
    uint32_t p[2 * E] = {};                             // the 8 E bytes, little-endian
#pragma unroll
    for (uint32_t k = 0; k < 8; ++k) {
      const uint32_t v = plane_entry<T>(b[k]), at = 8 * E * k;  // bit offset
      p[at / 32] |= v << (at % 32);
      if (at % 32 + 8 * E > 32) p[at / 32 + 1] |= v >> (32 - at % 32);
    }
    if (m == 8) {
      uint32_t* q = reinterpret_cast<uint32_t*>(plane + E * i0);
#pragma unroll
      for (uint32_t j = 0; j < 2 * E; ++j) q[j] = p[j];
    } else {
#pragma unroll
      for (uint32_t j = 0; j < 8 * E; ++j)
        if (j < E * m) plane[E * i0 + j] = uint8_t(p[j / 4] >> (8 * (j % 4)));
    }
  }
}

// The reverse, in two steps. load_plane_raw: the plane bytes of values i0 ..
// i0 + m - 1 as loaded (F32, BF16: 2 E little-endian words; F16: the 8
// entries); false where an F16 group's padding bits are set. raw_entry: entry
// k of them. load_plane8: both.
template <ElemType T>
constexpr uint32_t kRawWords = T == ElemType::F16   ? 8
                               : T == ElemType::F32 ? 6
                               : T == ElemType::U8  ? 1
                                                    : 2;
template <ElemType T>
__device__ __forceinline__ bool load_plane_raw(const uint8_t* plane, size_t i0, uint32_t m,
                                               uint32_t (&p)[kRawWords<T>]) {
  if constexpr (T == ElemType::U8) {
    (void)plane, (void)i0, (void)m;
    p[0] = 0;  // no plane
    return true;
  } else if constexpr (T == ElemType::F16) {
    return load_f16_plane8(plane + i0 / 8 * 11, m, p);
  } else {
    constexpr uint32_t E = T == ElemType::F32 ? 3 : 1;
    if (m == 8) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(plane + E * i0);
#pragma unroll
      for (uint32_t j = 0; j < 2 * E; ++j) p[j] = q[j];
    } else {
#pragma unroll
      for (uint32_t j = 0; j < 2 * E; ++j) p[j] = 0;
#pragma unroll
      for (uint32_t j = 0; j < 8 * E; ++j)
        if (j < E * m) p[j / 4] |= uint32_t(plane[E * i0 + j]) << (8 * (j % 4));
    }
    return true;
  }
}
template <ElemType T>
__device__ __forceinline__ uint32_t raw_entry(const uint32_t (&p)[kRawWords<T>], uint32_t k) {
  if constexpr (T == ElemType::U8) {
    (void)p, (void)k;
    return 0;
  } else if constexpr (T == ElemType::F16) {
    return p[k];
  } else {
    constexpr uint32_t E = T == ElemType::F32 ? 3 : 1;
    constexpr uint32_t mask = (1u << (8 * E)) - 1;
    const uint32_t at = 8 * E * k;
    uint32_t x = p[at / 32] >> (at % 32);
    if (at % 32 + 8 * E > 32) x |= p[at / 32 + 1] << (32 - at % 32);
    return x & mask;
  }
}
template <ElemType T>
__device__ __forceinline__ bool load_plane8(const uint8_t* plane, size_t i0, uint32_t m, uint32_t (&v)[8]) {
  uint32_t p[kRawWords<T>];
  const bool ok = load_plane_raw<T>(plane, i0, m, p);
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) v[k] = raw_entry<T>(p, k);
  return ok;
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, d);
  return v;
#else
  return __reduce_add_sync(detail::kFullMask, v);
#endif
}

__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t v, uint32_t lane) {
#pragma unroll
  for (uint32_t d = 1; d < 32; d <<= 1) {
    const uint32_t u = __shfl_up_sync(detail::kFullMask, v, d);
    if (lane >= d) v += u;
  }
  return v;
}

// The grid's warps take a sub-stream each in turn: warp w of the grid takes
// w, w + warps, w + 2 warps, ... (the same k in every lane of a warp).
__device__ __forceinline__ uint64_t first_substream() { return (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }
__device__ __forceinline__ uint64_t grid_warps() { return uint64_t(gridDim.x) * blockDim.x / 32; }

// The histogram: lane l of every warp adds to h[32 s + l], so a warp's 32
// atomics go to 32 addresses in 32 banks (no serialisation on a few popular
// exponents); the block's sums go to st->hist.
template <ElemType T>
__global__ void __launch_bounds__(detail::kThreads) fh_hist_v2_kernel(const void* x, size_t n, EncState* st) {
  constexpr uint32_t A = codec::fh_alphabet(T);
  __shared__ uint32_t h[A * 32];
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t i = threadIdx.x; i < A * 32; i += blockDim.x) h[i] = 0;
  __syncthreads();
  // Two groups of 8 values a thread at a time, both loaded before either is
  // counted (more bytes in flight); a group at n or past it has m = 0.
  const size_t n8 = (n + 7) / 8, step = size_t(gridDim.x) * blockDim.x;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n8; j += 2 * step) {
    uint32_t b[2][8], m[2];
    m[0] = load8<T>(x, n, 8 * j, b[0]);
    m[1] = load8<T>(x, n, 8 * (j + step), b[1]);
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u)
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k)
        if (k < m[u]) atomicAdd(&h[32 * exponent_of(b[u][k], T) + lane], 1u);
  }
  __syncthreads();
  // Thread s sums symbol s's 32 counters, starting at lane s % 32 (banks differ across the warp).
  for (uint32_t s = threadIdx.x; s < A; s += blockDim.x) {
    uint32_t sum = 0;
    for (uint32_t l = 0; l < 32; ++l) sum += h[32 * s + (l + s) % 32];
    if (sum) atomicAdd(&st->hist[s], sum);
  }
}

// Each warp: a sub-stream's word count (a warp sum of its lanes' code bits).
template <ElemType T>
__global__ void __launch_bounds__(detail::kThreads)
    fh_count_v2_kernel(const void* x, size_t n, const EncState* st, uint8_t* counts, unsigned long long* words) {
  __shared__ uint8_t len[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) len[s] = st->len[s];
  __syncthreads();
  const bool coded = st->coded;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t S = codec::fh_substreams(n);
  for (uint64_t k = first_substream(); k < S; k += grid_warps()) {
    uint32_t bits = 0;
    if (coded) {
      uint32_t b[8];
      const uint32_t m = load8<T>(x, n, k * codec::kFhSubValues + 8 * lane, b);
#pragma unroll
      for (uint32_t i = 0; i < 8; ++i)
        if (i < m) bits += len[exponent_of(b[i], T)];
      bits = warp_sum(bits);
    }
    if (lane == 0) {
      const uint32_t w = (bits + 31) / 32;
      counts[k] = uint8_t(w);
      words[k] = w;
    }
  }
}

// ORs the nb (1..48) low bits of v, highest first, into words w (MSB-first)
// from bit `at` on. Shared atomics: neighbouring lanes share boundary words.
__device__ __forceinline__ void or_bits(uint32_t* w, uint32_t at, uint64_t v, uint32_t nb) {
  if (nb == 0) return;
  const uint64_t a = v << (64 - nb);  // left-aligned
  const uint32_t q = at / 32, r = at % 32, end = at + nb;
  atomicOr(&w[q], uint32_t(a >> (32 + r)));
  if (end > 32 * (q + 1)) atomicOr(&w[q + 1], uint32_t(a >> r));
  if (end > 32 * (q + 2)) atomicOr(&w[q + 2], uint32_t(a) << (32 - r));  // here r > 16
}

// Each warp: a sub-stream's plane bytes and code words. Lane l codes values
// 8l .. 8l + 7 (two groups of four codes, at most 48 bits each); a warp scan
// of the lanes' bits places them in the warp's words in shared memory, which
// the warp then stores contiguously.
template <ElemType T>
__global__ void __launch_bounds__(detail::kThreads)
    fh_write_v2_kernel(const void* x, size_t n, const EncState* st, const unsigned long long* offsets, uint8_t* out) {
  if (!st->fits) return;
  __shared__ uint32_t cl[256];  // code << 4 | length
  __shared__ uint32_t wbuf[detail::kThreads / 32][codec::kFhMaxSubWords];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) cl[s] = uint32_t(st->code[s]) << 4 | st->len[s];
  const uint32_t lane = threadIdx.x % 32;
  uint32_t* wb = wbuf[threadIdx.x / 32];
  for (uint32_t j = lane; j < codec::kFhMaxSubWords; j += 32) wb[j] = 0;
  __syncthreads();
  const bool coded = st->coded;
  const uint64_t index = codec::fh_index_bytes(T, n);
  uint8_t* plane = out + index + 4 * st->words;
  uint32_t* words = reinterpret_cast<uint32_t*>(out + index);
  const uint64_t S = codec::fh_substreams(n);
  for (uint64_t k = first_substream(); k < S; k += grid_warps()) {
    const size_t i0 = k * codec::kFhSubValues + 8 * lane;
    uint32_t b[8];
    const uint32_t m = load8<T>(x, n, i0, b);
    store_plane8<T>(plane, i0, b, m);
    if (!coded) continue;
    uint64_t acc[2] = {0, 0};
    uint32_t nb[2] = {0, 0};
#pragma unroll
    for (uint32_t i = 0; i < 8; ++i) {
      if (i < m) {
        const uint32_t c = cl[exponent_of(b[i], T)], l = c & 15;
        acc[i / 4] = (acc[i / 4] << l) | (c >> 4);
        nb[i / 4] += l;
      }
    }
    const uint32_t mine = nb[0] + nb[1], incl = warp_inclusive_sum(mine, lane);
    or_bits(wb, incl - mine, acc[0], nb[0]);
    or_bits(wb, incl - mine + nb[0], acc[1], nb[1]);
    const uint32_t nw = (__shfl_sync(detail::kFullMask, incl, 31) + 31) / 32;
    __syncwarp();
    uint32_t* dst = words + offsets[k];
    for (uint32_t j = lane; j < nw; j += 32) {
      dst[j] = wb[j];
      wb[j] = 0;
    }
    __syncwarp();
  }
}

// v1's decode in CTAs that loop over chunks of kCtaSubs sub-streams: the
// table is read by A / 2 threads, checked by one and spread over all threads
// into the lookup tables (SplitLut: 3 KiB, so that kDecodeCtasPerSm CTAs fit
// an SM) once per CTA; DevReader<kReadAhead> reads ahead; the values move 8
// at a time (load_plane8, store8).
template <ElemType T>
__global__ void __launch_bounds__(kCtaSubs, kDecodeCtasPerSm)
    fh_decode_v2_kernel(const uint8_t* in, size_t n, unsigned long long words, void* outv, int* status) {
  constexpr uint32_t A = codec::fh_alphabet(T);
  __shared__ uint16_t lut1[1u << kLut1Bits], lut2[kLut2Size];  // SplitLut's tables
  __shared__ uint32_t base;
  __shared__ uint32_t e32[kCtaSubs * kStride / 4];  // the exponents (slot()), 4-byte aligned
  __shared__ uint8_t ln[256];
  __shared__ uint16_t code[256];
  __shared__ uint32_t cnt[kCtaSubs];
  __shared__ int bad, coded, single;
  uint8_t* e = reinterpret_cast<uint8_t*>(e32);
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t index = codec::fh_index_bytes(T, n);
  const uint8_t* counts = in + codec::fh_table_bytes(T) + 4 * G;
  const uint32_t tid = threadIdx.x;
  for (uint32_t s = tid; s < A / 2; s += blockDim.x) {
    const uint32_t b = in[s];
    ln[2 * s] = uint8_t(b & 15);
    ln[2 * s + 1] = uint8_t(b >> 4);
  }
  if (tid == 0) bad = 0;
  __syncthreads();
  if (tid == 0) {
    check_table(ln, A, code, &bad, &coded, &single);
  }
  // The index padding (CTA 0 checks it).
  if (blockIdx.x == 0)
    for (uint64_t z = codec::fh_table_bytes(T) + 4 * G + S + tid; z < index; z += blockDim.x)
      if (in[z]) atomicExch(&bad, 1);
  __syncthreads();
  if (bad) {
    if (tid == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  // SplitLut: the codes of up to kLut1Bits bits spread over lut1, the longer
  // ones (windows from `base` on, a multiple of 4: the shorter codes before
  // them fill whole 10-bit windows) in lut2, their 10-bit windows marked 0.
  if (coded) {
    if (tid == 0) {
      uint32_t b = codec::kFhLutSize;  // 4096 less the long codes' windows
      for (uint32_t s = 0; s < A; ++s)
        if (ln[s] > kLut1Bits) b -= 1u << (codec::kFhMaxLen - ln[s]);
      base = b;
    }
    __syncthreads();
    for (uint32_t i = (base >> 2) + tid; i < (1u << kLut1Bits); i += blockDim.x) lut1[i] = 0;
    for (uint32_t s = 0; s < A; ++s) {
      const uint32_t l = ln[s];
      if (l == 0) continue;
      const uint32_t first = uint32_t(code[s]) << (codec::kFhMaxLen - l), span = 1u << (codec::kFhMaxLen - l);
      if (l <= kLut1Bits) {
        for (uint32_t i = tid; i < span / 4; i += blockDim.x) lut1[first / 4 + i] = uint16_t(s << 4 | l);
      } else {
        for (uint32_t i = tid; i < span; i += blockDim.x) lut2[first - base + i] = uint16_t(s << 4 | l);
      }
    }
  }
  const uint8_t* plane = in + index + 4 * words;
  for (uint64_t k0 = uint64_t(blockIdx.x) * kCtaSubs; k0 < S; k0 += uint64_t(gridDim.x) * kCtaSubs) {
    const uint32_t c = k0 + tid < S ? counts[k0 + tid] : 0u;
    __syncthreads();  // the table is built; the previous chunk's exponents are used
    cnt[tid] = c;
    __syncthreads();
    if (!decode_substream<kReadAhead>(in, T, n, words, k0, cnt, coded, uint32_t(single), SplitLut{lut1, lut2, base},
                                      e + tid * kStride))
      atomicExch(&bad, 1);
    __syncthreads();
    if (bad) {
      if (tid == 0) atomicExch(status, int(Status::Corrupt));
      return;
    }
    // The values: kValueBatch groups of 8 per thread at a time, every
    // group's plane bytes loaded before any value is stored (the stores
    // might alias the plane for the compiler, which would then wait for each
    // load in turn).
    const size_t base = size_t(k0) * codec::kFhSubValues;
    for (uint32_t j0 = tid; j0 < kCtaValues / 8; j0 += kValueBatch * kCtaSubs) {
      uint32_t v[kValueBatch][8] = {}, m[kValueBatch];
#pragma unroll
      for (uint32_t u = 0; u < kValueBatch; ++u) {
        const size_t i0 = base + 8 * size_t(j0 + u * kCtaSubs);
        m[u] = i0 >= n ? 0u : n - i0 < 8 ? uint32_t(n - i0) : 8u;
        if (m[u] && !load_plane8<T>(plane, i0, m[u], v[u])) atomicExch(status, int(Status::Corrupt));
      }
#pragma unroll
      for (uint32_t u = 0; u < kValueBatch; ++u) {
        const uint32_t j8 = j0 + u * kCtaSubs;
        // The 8 exponents: two 4-byte shared loads (slot(8 j8) is a multiple of 4).
        const uint32_t* ep = reinterpret_cast<const uint32_t*>(e + slot(8 * j8));
        const uint32_t ex[2] = {ep[0], ep[1]};
#pragma unroll
        for (uint32_t k = 0; k < 8; ++k) v[u][k] = value_of(v[u][k], (ex[k / 4] >> (8 * (k % 4))) & 0xFFu, T);
        store8<T>(outv, base + 8 * size_t(j8), v[u], m[u]);
      }
    }
  }
}

// ---- v3 decode ---------------------------------------------------------------
//
// v3 = v2's encode kernels and this decode. Why v2's decode is slow (run 10,
// H200, 256 MiB Gaussian bf16: 408 GB/s; ncu: 37% of SM throughput): a thread
// decodes its sub-stream one symbol per table lookup, so each value costs a
// serial chain (refill test, shared-memory load, 64-bit shift) and a byte
// store; before decoding, one thread per CTA checks the table and computes the
// canonical codes (about a thousand dependent steps) and the lookup table is
// filled symbol by symbol; and the CTA's 128 threads meet at a barrier per
// chunk of 128 sub-streams, each chunk waiting for its slowest sub-stream.
//
// v3, with the same bytes in and out:
// - Several symbols per lookup. The table has one 32-bit entry per 12-bit
//   window (4096 entries, 16 KiB of shared memory): the up to kV3MaxSyms whole
//   codes the window begins with (their symbols in bytes 0..2, zero beyond
//   them), their total bits (bits 24..27) and their number (bits 28..29). The
//   first code always fits (codes have at most 12 bits). Near a sub-stream's
//   end, where an entry holds more symbols than are left, the first symbol
//   alone is taken, with its length from the lengths' table.
// - The table built by the CTA's 256 threads at once (one per symbol): the
//   format's checks by barrier counts and a shared Kraft sum; canonical order
//   by warp ballots per length (a symbol's rank among those of its length);
//   then each thread fills 16 entries, finding each code's length by
//   comparing the window with the 11 boundaries between the lengths' ranges
//   of windows (kept in registers) and its symbol from the canonical order.
// - A warp per group of 32 sub-streams (the index's unit), a lane per
//   sub-stream: the group's offsets and counts are checked and its starts
//   found with a warp scan; no CTA barrier after the table, so the warps of a
//   CTA go at their own pace. Grids of a few CTAs per SM loop over the groups.
// - Windows of kV3Window values: a lane decodes its next 64 exponents into its
//   row of the warp's shared staging (a 4-byte store per 4 exponents: the
//   decoded bytes gather in a 64-bit register), then the warp writes the
//   group's 32 x 64 values merged with the plane, 8 per lane at a time (a
//   16-byte store for bf16: each warp store covers 4 whole 128-byte lines;
//   bf16 values merged two at a time by a byte permute, bf16_pair), plane
//   bytes loaded for 4 groups of 8 before any store. Rows are 17 words
//   (odd), so the 32 lanes' stores at the same position hit 32 banks.
// Shared memory: 17 KiB of table, 17 KiB of staging (8 warps); 3 CTAs an SM
// (the register limit) leave over 100 KiB to L1, which holds the code words
// each lane reads 4 bytes at a time, 3 words ahead (DevReader). Staging the
// group's words in shared memory with coalesced loads would spare L1 the
// lanes' scattered loads but needs up to 12 KiB a warp (96 words a
// sub-stream) beyond the 48 KiB of static shared memory.
// ptxas (nvcc 13.0, -Xptxas -v; registers F32 / BF16 / F16): sm_90 80 / 80 /
// 76, sm_80 80 / 72 / 72; 34,836 bytes of shared memory, no spills, no stack
// (v2's decode: sm_90 72 / 71 / 80 registers, 37,648 bytes).
//
// PREDICTION, NOT A MEASUREMENT (nothing of v3 has run on a GPU): on 256 MiB
// of Gaussian bf16 an exponent costs 2.6 bits, so a lookup decodes 2.9 of
// them (counted on the CPU for 2^20 N(0,1) bf16 values with Huffman lengths:
// 88 lookups a sub-stream instead of v2's 256) at an estimated ~25
// instructions each (not read from SASS: no disassembler here); with the
// value writes, ~400k warp instructions an SM (132 SMs), ~50 us if issued at
// the full rate, against ~110 us of memory traffic (0.43 GB read and written
// at the D2D copy's ~4 TB/s). We expect the decode at 0.8-1.5 TB/s of output
// (v2: 0.41), below the copy; if short of that, bound by the lanes' serial
// chains (a shared load and 64-bit shifts a lookup), the table's bank
// conflicts (32 lanes, random windows) or L1 (the code words). The table
// costs each CTA ~1000 instructions a thread, once: small slices gain most
// against v2's one-thread table check.
constexpr uint32_t kV3Threads = 256;  // threads per v3 decode CTA (one per symbol for the table)
constexpr uint32_t kV3Warps = kV3Threads / 32;
constexpr int kV3CtasPerSm = 3;                 // at most 85 registers a thread
constexpr uint32_t kV3Window = 64;              // exponents a lane decodes between two value writes
constexpr uint32_t kV3Row = kV3Window / 4 + 1;  // words of a lane's staging row (odd: 32 banks)
constexpr uint32_t kV3MaxSyms = 3;              // symbols per table entry (3 bytes of 32 bits)
constexpr uint32_t kV3Items = kV3Window / 8;    // groups of 8 values a lane writes per window
static_assert(codec::kFhGroup == 32, "a warp decodes one group, a lane per sub-stream");
static_assert(codec::kFhSubValues % kV3Window == 0 && kV3Window % 8 == 0, "windows of whole groups of 8");
// Groups of 8 values whose plane a v3 lane loads before it stores any (F16's
// raw plane is 8 registers a group, BF16's 2, F32's 6: 4 F16 groups spill).
template <ElemType T>
constexpr uint32_t kV3Batch = T == ElemType::F16 ? 2 : kValueBatch;
static_assert(kV3Items % kV3Batch<ElemType::F16> == 0 && kV3Items % kV3Batch<ElemType::F32> == 0,
              "the window's items in whole batches");
static_assert(kV3Threads == 256, "the table build gives a thread to each of 256 symbols");

// A table entry: symbols syms (k of them, in bytes 0..k-1) of `bits` bits in all.
__device__ __forceinline__ uint32_t v3_entry(uint32_t syms, uint32_t bits, uint32_t k) {
  return syms | bits << 24 | k << 28;
}

struct V3Table {
  uint32_t lut[codec::kFhLutSize];                // v3_entry per 12-bit window
  uint32_t wcnt[kV3Warps][codec::kFhMaxLen + 1];  // symbols per warp and length
  uint32_t lstart[codec::kFhMaxLen + 2];          // first window of the codes of length l; [13]: 4096
  uint32_t soff[codec::kFhMaxLen + 1];  // symbols of shorter codes (canonical position of the first of length l)
  uint32_t kraft;                       // sum of 2^(12 - len) over lengths 1..12
  uint32_t single;                      // the last present symbol
  uint8_t ln[256];                      // the code lengths (0 past the alphabet)
  uint8_t sorted[256];                  // symbols in canonical order
};

// All kV3Threads threads: the lengths at `in` (A / 2 bytes) into tb, checked
// as the CPU's fh_lengths_valid; then, with two or more symbols, the lookup
// table. Returns 0 for a table the format does not allow, 1 for one symbol
// (tb.single; nothing is coded), 2 for a coded table (the same in every thread).
__device__ int v3_build_table(const uint8_t* in, uint32_t A, V3Table& tb) {
  constexpr uint32_t M = codec::kFhMaxLen;
  const uint32_t t = threadIdx.x, lane = t % 32, warp = t / 32;
  const uint32_t L = t < A ? (uint32_t(in[t / 2]) >> (4 * (t % 2))) & 15u : 0u;
  tb.ln[t] = uint8_t(L);
  if (t == 0) {
    tb.kraft = 0;
    tb.single = 0;
  }
  const int m = __syncthreads_count(L != 0);  // also orders the zeroing before the atomics
  const int over = __syncthreads_count(L > M);
  if (L != 0 && L <= M) {
    atomicAdd(&tb.kraft, 1u << (M - L));
    atomicMax(&tb.single, t);
  }
  __syncthreads();
  const uint32_t kraft = tb.kraft;
  const bool valid = over == 0 && (m == 1 ? kraft == codec::kFhLutSize / 2 : m >= 2 && kraft == codec::kFhLutSize);
  if (!valid) return 0;
  if (m == 1) return 1;
  // Canonical order: by length, then by symbol.
  uint32_t rank = 0;
  for (uint32_t l = 1; l <= M; ++l) {
    const unsigned b = __ballot_sync(detail::kFullMask, L == l);
    if (L == l) rank = uint32_t(__popc(b & ((1u << lane) - 1u)));
    if (lane == 0) tb.wcnt[warp][l] = uint32_t(__popc(b));
  }
  __syncthreads();
  if (t == 0) {
    uint32_t start = 0, off = 0;
    for (uint32_t l = 1; l <= M; ++l) {
      uint32_t c = 0;
      for (uint32_t w = 0; w < kV3Warps; ++w) c += tb.wcnt[w][l];
      tb.lstart[l] = start;
      tb.soff[l] = off;
      start += c << (M - l);
      off += c;
    }
    tb.lstart[M + 1] = start;
  }
  __syncthreads();
  if (L != 0) {
    for (uint32_t w = 0; w < warp; ++w) rank += tb.wcnt[w][L];
    tb.sorted[tb.soff[L] + rank] = uint8_t(t);
  }
  __syncthreads();
  // A window's first code has length 1 + the number of lengths l <= 11 whose
  // windows end at or before it (lstart[l + 1] <= window).
  uint32_t ends[M - 1];
#pragma unroll
  for (uint32_t j = 0; j < M - 1; ++j) ends[j] = tb.lstart[j + 2];
  for (uint32_t i = t; i < codec::kFhLutSize; i += kV3Threads) {
    uint32_t used = 0, syms = 0, k = 0;
#pragma unroll
    for (uint32_t j = 0; j < kV3MaxSyms; ++j) {
      const uint32_t win = (i << used) & (codec::kFhLutSize - 1);  // zeros after the window's bits
      uint32_t l = 1;
#pragma unroll
      for (uint32_t q = 0; q < M - 1; ++q) l += win >= ends[q];
      if (used + l > M) break;  // the code runs past the window
      syms |= uint32_t(tb.sorted[tb.soff[l] + ((win - tb.lstart[l]) >> (M - l))]) << (8 * j);
      used += l;
      ++k;
    }
    tb.lut[i] = v3_entry(syms, used, k);
  }
  __syncthreads();
  return 2;
}

// Two BF16 values from plane bytes p and exponents ex (4 values a word each,
// the first in the low byte): byte_perm with selector sel (0x5140: values 0
// and 1 of the four; 0x7362: 2 and 3) puts each value's exponent above its
// plane byte (e << 8 | s << 7 | m, the first value in the low half); then the
// exponent moves down a bit and the sign up to bit 15. Five instructions for
// two values.
__device__ __forceinline__ uint32_t bf16_pair(uint32_t p, uint32_t ex, uint32_t sel) {
  const uint32_t x = __byte_perm(p, ex, sel);
  return ((x >> 1) & 0x7F807F80u) | (x & 0x007F007Fu) | ((x << 8) & 0x80008000u);
}

// Decodes a FloatHuff payload (kV3Threads threads a CTA; see above). Warp w of
// the grid takes groups w, w + warps, ...; each window: the lanes decode,
// __syncwarp, the warp writes the values, __syncwarp.
template <ElemType T>
__global__ void __launch_bounds__(kV3Threads, kV3CtasPerSm)
    fh_decode_v3_kernel(const uint8_t* in, size_t n, unsigned long long words, void* outv, int* status) {
  constexpr uint32_t A = codec::fh_alphabet(T);
  __shared__ V3Table tb;
  __shared__ uint32_t stage[kV3Warps][32 * kV3Row];
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t index = codec::fh_index_bytes(T, n);
  const int kind = v3_build_table(in, A, tb);
  if (kind == 0) {
    if (threadIdx.x == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  // The index padding (CTA 0 checks it).
  if (blockIdx.x == 0)
    for (uint64_t z = codec::fh_table_bytes(T) + 4 * G + S + threadIdx.x; z < index; z += kV3Threads)
      if (in[z]) atomicExch(status, int(Status::Corrupt));
  const bool coded = kind == 2;
  const uint32_t single = tb.single * 0x01010101u;  // four copies of the one symbol
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t* const rows = stage[warp];
  uint32_t* const row = rows + lane * kV3Row;
  const uint8_t* bases = in + codec::fh_table_bytes(T);
  const uint8_t* counts = bases + 4 * G;
  const uint32_t* code_words = reinterpret_cast<const uint32_t*>(in + index);
  const uint8_t* plane = in + index + 4 * words;
  const bool out16 = (reinterpret_cast<uintptr_t>(outv) & 15) == 0;  // 16-byte stores of 8 BF16 values
  for (uint64_t g = uint64_t(blockIdx.x) * kV3Warps + warp; g < G; g += uint64_t(gridDim.x) * kV3Warps) {
    // The group's index: the counts' warp scan gives each lane its start.
    const uint64_t k = g * 32 + lane;
    const uint32_t c = k < S ? counts[k] : 0u;
    const uint32_t incl = warp_inclusive_sum(c, lane);
    const uint64_t gb = codec::load_u32(bases + 4 * g);
    const uint64_t start = gb + incl - c;
    // Never read outside the words, whatever another warp finds.
    bool ok = c <= codec::kFhMaxSubWords && (coded || c == 0) && start + c <= words;
    if (lane == 31) {
      const uint64_t next = g + 1 < G ? codec::load_u32(bases + 4 * (g + 1)) : words;
      if ((g == 0 && gb != 0) || gb + incl != next) ok = false;
    }
    if (__ballot_sync(detail::kFullMask, !ok) != 0) {
      if (lane == 0) atomicExch(status, int(Status::Corrupt));
      break;
    }
    const uint32_t nv = k < S ? codec::fh_sub_count(n, k) : 0u;
    DevReader<kReadAhead> r(code_words + start, c);
    uint64_t acc = 0;   // decoded exponents not yet staged, the first in the low byte
    uint32_t cnt = 0;   // how many (at most 6)
    uint32_t done = 0;  // exponents decoded (staged or in acc)
    const size_t group_first = size_t(g) * 32 * codec::kFhSubValues;  // the group's first value
    for (uint32_t w0 = 0; w0 < codec::kFhSubValues; w0 += kV3Window) {
      // The lane's exponents w0 .. w0 + kV3Window - 1 into its row; a lookup
      // may decode up to 2 past the window (kept in acc for the next one).
      const uint32_t end = nv < w0 + kV3Window ? nv : w0 + kV3Window;
      if (!coded) {
#pragma unroll
        for (uint32_t j = 0; j < kV3Window / 4; ++j) row[j] = single;
      } else {
        while (done < end) {
          r.refill();
          uint32_t e = tb.lut[uint32_t(r.buf >> (64 - codec::kFhMaxLen))];
          uint32_t kk = e >> 28;
          if (kk > nv - done) {  // fewer left than the entry holds: its first symbol alone
            const uint32_t s = e & 0xFFu;
            e = v3_entry(s, tb.ln[s], 1);
            kk = 1;
          }
          r.skip((e >> 24) & 15u);
          acc |= uint64_t(e & 0xFFFFFFu) << (8 * cnt);
          cnt += kk;
          done += kk;
          if (cnt >= 4) {  // the 4 exponents from done - cnt on (a multiple of 4, in this window)
            row[(done - cnt - w0) / 4] = uint32_t(acc);
            acc >>= 32;
            cnt -= 4;
          }
        }
        if (cnt > 0 && done == nv && nv == end) {  // the sub-stream's last 1-3 exponents, in this window
          row[(done - cnt - w0) / 4] = uint32_t(acc);
          cnt = 0;
        }
      }
      __syncwarp();
      // The group's values w0 .. w0 + kV3Window - 1 of each sub-stream: item
      // j = 32 b + lane is sub-stream j / 8's group of 8 values j % 8.
#pragma unroll 1
      for (uint32_t b0 = 0; b0 < kV3Items; b0 += kV3Batch<T>) {
        uint32_t p[kV3Batch<T>][kRawWords<T>] = {}, m[kV3Batch<T>];  // the plane as loaded (BF16: 2 words)
#pragma unroll
        for (uint32_t u = 0; u < kV3Batch<T>; ++u) {
          const uint32_t j = (b0 + u) * 32 + lane;
          const size_t i0 = group_first + size_t(j / 8) * codec::kFhSubValues + w0 + 8 * (j % 8);
          m[u] = i0 >= n ? 0u : n - i0 < 8 ? uint32_t(n - i0) : 8u;
          if (m[u] && !load_plane_raw<T>(plane, i0, m[u], p[u])) atomicExch(status, int(Status::Corrupt));
        }
#pragma unroll
        for (uint32_t u = 0; u < kV3Batch<T>; ++u) {
          if (m[u] == 0) continue;
          const uint32_t j = (b0 + u) * 32 + lane;
          const uint32_t* ep = rows + (j / 8) * kV3Row + 2 * (j % 8);
          const uint32_t ex[2] = {ep[0], ep[1]};
          const size_t i0 = group_first + size_t(j / 8) * codec::kFhSubValues + w0 + 8 * (j % 8);
          if constexpr (T == ElemType::BF16) {
            if (m[u] == 8 && out16) {
              *reinterpret_cast<uint4*>(static_cast<uint16_t*>(outv) + i0) =
                  uint4{bf16_pair(p[u][0], ex[0], 0x5140u), bf16_pair(p[u][0], ex[0], 0x7362u),
                        bf16_pair(p[u][1], ex[1], 0x5140u), bf16_pair(p[u][1], ex[1], 0x7362u)};
              continue;
            }
          }
          uint32_t v[8];
#pragma unroll
          for (uint32_t q = 0; q < 8; ++q)
            v[q] = value_of(raw_entry<T>(p[u], q), (ex[q / 4] >> (8 * (q % 4))) & 0xFFu, T);
          store8<T>(outv, i0, v, m[u]);
        }
      }
      __syncwarp();  // the rows are read before the next window overwrites them
    }
    // Each sub-stream's codes end in its last word, the bits after them zero.
    if (coded && k < S) {
      const uint32_t have = 32 * c;
      if (r.used > have || have - r.used >= 32)
        ok = c == 0 && r.used == 0;
      else
        ok = have == r.used || (code_words[start + c - 1] & ((1u << (have - r.used)) - 1u)) == 0;
    }
    if (__ballot_sync(detail::kFullMask, !ok) != 0) {
      if (lane == 0) atomicExch(status, int(Status::Corrupt));
      break;
    }
  }
}

// The slice around the payload encode() left at slice + kHeaderBytes (its
// size in *coded): frame_slice's verdict, computed alike by every CTA; CTA 0
// writes the header, size and status; a Raw slice's values are copied by all.
__global__ void fh_frame_kernel(const void* x, ElemType t, uint32_t n, size_t cap, const unsigned long long* coded,
                                uint8_t* slice, unsigned long long* d_bytes, int* status) {
  codec::SliceHeader h;
  const Status st =
      codec::frame_slice(t, n, cap, codec::Codec::FloatHuff, codec::Predictor::None, 0, 0, size_t(*coded), &h);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *status = int(st);
    *d_bytes = st == Status::Ok ? codec::kHeaderBytes + h.payload_bytes : 0ull;
    if (st == Status::Ok) codec::write_header(slice, h);
  }
  if (st != Status::Ok || h.codec != codec::Codec::Raw) return;
  const uint8_t* src = static_cast<const uint8_t*>(x);
  uint8_t* dst = slice + codec::kHeaderBytes;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < h.payload_bytes;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void fh_set_kernel(int* status, int v, unsigned long long* bytes, unsigned long long b) {
  if (status) *status = v;
  if (bytes) *bytes = b;
}

}  // namespace

namespace {
// NCCLZ_FLOATHUFF_KERNELS: v1 or v3 select those kernels, anything else v2.
int kernels_from_env() {
  const char* v = std::getenv("NCCLZ_FLOATHUFF_KERNELS");
  if (v != nullptr && std::strcmp(v, "v1") == 0) return 1;
  return v != nullptr && std::strcmp(v, "v3") == 0 ? 3 : 2;
}

// Calls f(std::integral_constant<ElemType, t>) for t in F32, BF16, F16, U8.
template <class F>
void with_fh_type(ElemType t, F&& f) {
  if (t == ElemType::F32) f(std::integral_constant<ElemType, ElemType::F32>{});
  if (t == ElemType::BF16) f(std::integral_constant<ElemType, ElemType::BF16>{});
  if (t == ElemType::F16) f(std::integral_constant<ElemType, ElemType::F16>{});
  if (t == ElemType::U8) f(std::integral_constant<ElemType, ElemType::U8>{});
}

// A grid of `want` CTAs of `threads`, at most as many as are resident at once
// (v2's kernels loop over their work).
template <class K>
unsigned resident_grid(K kernel, int threads, int sms, size_t want) {
  int per_sm = 2;
#ifndef NCCLZ_CUDA_EMULATED
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1)
    per_sm = 1;
#else
  (void)kernel;
  (void)threads;
#endif
  return unsigned(std::max<size_t>(1, std::min<size_t>(want, size_t(sms) * size_t(per_sm))));
}
}  // namespace

FloatHuffCoder::FloatHuffCoder(void* stream) : stream_(stream), kernels_(kernels_from_env()) {}

int FloatHuffCoder::sms() {
  if (sms_ == 0) {
    int dev = 0, v = 0;
    sms_ = cudaGetDevice(&dev) == cudaSuccess &&
                   cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0
               ? v
               : 1;
  }
  return sms_;
}

FloatHuffCoder::~FloatHuffCoder() {
  if (scratch_) cudaFreeAsync(scratch_, static_cast<cudaStream_t>(stream_));
}

int FloatHuffCoder::synchronize() { return int(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_))); }

uint8_t* FloatHuffCoder::scratch(size_t bytes, int* err) {
  *err = detail::grow_on_stream(static_cast<cudaStream_t>(stream_), &scratch_, &scratch_bytes_, bytes);
  return *err ? nullptr : scratch_;
}

namespace {
// The encode's scratch: the state, the counts, their offsets, the scan's
// storage; encode_slice's payload size.
struct EncLayout {
  ScratchLayout l;
  size_t st, words, offsets, tmp, tmp_bytes, coded;
  explicit EncLayout(size_t n) {
    const size_t S = size_t(codec::fh_substreams(n));
    st = l.add(sizeof(EncState));
    words = l.add(S * 8);
    offsets = l.add(S * 8);
    tmp_bytes = detail::exclusive_sum_bytes(S);
    tmp = l.add(tmp_bytes);
    coded = l.add(8);
  }
};
}  // namespace

int FloatHuffCoder::reserve(size_t n) {
  int err = 0;
  scratch(EncLayout(n).l.bytes(), &err);
  return err;
}

int FloatHuffCoder::encode(const void* d_x, ElemType t, size_t n, uint8_t* d_out, size_t cap,
                           unsigned long long* d_bytes) {
  if (!codec::fh_type(t) || (reinterpret_cast<uintptr_t>(d_out) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (n == 0 || cap < codec::fh_index_bytes(t, n) + codec::fh_plane_bytes(t, n)) {
    fh_set_kernel<<<1, 1, 0, s>>>(nullptr, 0, d_bytes, n == 0 ? 0ull : kNoFitBytes);
    return int(cudaGetLastError());
  }
  const EncLayout L(n);
  int err = 0;
  uint8_t* base = scratch(L.l.bytes(), &err);
  if (err) return err;
  EncState* st = ScratchLayout::at<EncState>(base, L.st);
  auto* words = ScratchLayout::at<unsigned long long>(base, L.words);
  auto* offsets = ScratchLayout::at<unsigned long long>(base, L.offsets);
  const size_t S = size_t(codec::fh_substreams(n)), G = size_t(codec::fh_groups(n));
  const unsigned ctas = unsigned((S + kCtaSubs - 1) / kCtaSubs);
  cudaError_t e = cudaMemsetAsync(st->hist, 0, sizeof(st->hist), s);
  if (e != cudaSuccess) return int(e);
  uint8_t* counts = d_out + codec::fh_table_bytes(t) + 4 * G;
  const int T = detail::kThreads, W = T / 32;  // v2: threads per CTA, warps (sub-streams at a time) per CTA
  if (kernels_ == 1) {
    fh_hist_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st);
    fh_table_kernel<<<1, 1, 0, s>>>(t, st, d_out);
    fh_count_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st, counts, words);
  } else {
    with_fh_type(t, [&](auto type) {
      constexpr ElemType kT = decltype(type)::value;
      const unsigned hist = resident_grid(fh_hist_v2_kernel<kT>, T, sms(), (n + 16 * size_t(T) - 1) / (16 * size_t(T)));
      fh_hist_v2_kernel<kT><<<hist, T, 0, s>>>(d_x, n, st);
      fh_table_v2_kernel<<<1, kTableThreads, 0, s>>>(t, st, d_out);
      const unsigned count = resident_grid(fh_count_v2_kernel<kT>, T, sms(), (S + W - 1) / W);
      fh_count_v2_kernel<kT><<<count, T, 0, s>>>(d_x, n, st, counts, words);
    });
  }
  e = detail::exclusive_sum_u64(words, offsets, S, base + L.tmp, L.tmp_bytes, s);
  if (e != cudaSuccess) return int(e);
  fh_index_kernel<<<detail::grid_for(G), detail::kThreads, 0, s>>>(t, n, cap, words, offsets, st, d_out, d_bytes);
  if (kernels_ == 1) {
    fh_write_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st, offsets, d_out);
  } else {
    with_fh_type(t, [&](auto type) {
      constexpr ElemType kT = decltype(type)::value;
      const unsigned write = resident_grid(fh_write_v2_kernel<kT>, T, sms(), (S + W - 1) / W);
      fh_write_v2_kernel<kT><<<write, T, 0, s>>>(d_x, n, st, offsets, d_out);
    });
  }
  return int(cudaGetLastError());
}

int FloatHuffCoder::encode_slice(const void* d_x, ElemType t, size_t n, uint8_t* d_slice, size_t cap,
                                 unsigned long long* d_bytes, int* d_status, bool raw_only) {
  if (!codec::fh_type(t) || n > 0xFFFFFFFFu || (reinterpret_cast<uintptr_t>(d_slice) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  // The payload's size goes to a word of the scratch (grown here, so that
  // encode() does not move it).
  const EncLayout L(n);
  int err = 0;
  uint8_t* base = scratch(L.l.bytes(), &err);
  if (err) return err;
  auto* coded = ScratchLayout::at<unsigned long long>(base, L.coded);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const size_t room = codec::slice_coder_room(t, n, cap);
  if (raw_only || cap < codec::kHeaderBytes) {
    fh_set_kernel<<<1, 1, 0, s>>>(nullptr, 0, coded, kNoFitBytes);
    err = int(cudaGetLastError());
  } else {
    err = encode(d_x, t, n, d_slice + codec::kHeaderBytes, room, coded);
  }
  if (err) return err;
  const size_t raw = n * codec::elem_size(t);
  const unsigned ctas = unsigned(std::min<size_t>(1024, std::max<size_t>(1, (raw + 4095) / 4096)));
  fh_frame_kernel<<<ctas, detail::kThreads, 0, s>>>(d_x, t, uint32_t(n), cap, coded, d_slice, d_bytes, d_status);
  return int(cudaGetLastError());
}

int FloatHuffCoder::decode(const uint8_t* d_in, size_t len, ElemType t, size_t n, void* d_out, int* d_status) {
  if (!codec::fh_type(t) || (reinterpret_cast<uintptr_t>(d_in) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // The payload's size against n (as the CPU decoder's first check).
  const uint64_t fixed = codec::fh_index_bytes(t, n) + codec::fh_plane_bytes(t, n);
  if (n == 0 || len < fixed || (len - fixed) % 4 != 0) {
    const Status st = n == 0 && len == 0 ? Status::Ok : Status::Corrupt;
    fh_set_kernel<<<1, 1, 0, s>>>(d_status, int(st), nullptr, 0);
    return int(cudaGetLastError());
  }
  const size_t S = size_t(codec::fh_substreams(n));
  const unsigned ctas = unsigned((S + kCtaSubs - 1) / kCtaSubs);
  fh_set_kernel<<<1, 1, 0, s>>>(d_status, int(Status::Ok), nullptr, 0);
  if (kernels_ == 1) {
    fh_decode_kernel<<<ctas, kCtaSubs, 0, s>>>(d_in, t, n, (len - fixed) / 4, d_out, d_status);
  } else if (kernels_ == 3) {
    const size_t groups = size_t(codec::fh_groups(n));
    with_fh_type(t, [&](auto type) {
      constexpr ElemType kT = decltype(type)::value;
      const unsigned grid =
          resident_grid(fh_decode_v3_kernel<kT>, kV3Threads, sms(), (groups + kV3Warps - 1) / kV3Warps);
      fh_decode_v3_kernel<kT><<<grid, kV3Threads, 0, s>>>(d_in, n, (len - fixed) / 4, d_out, d_status);
    });
  } else {
    with_fh_type(t, [&](auto type) {
      constexpr ElemType kT = decltype(type)::value;
      const unsigned grid = resident_grid(fh_decode_v2_kernel<kT>, kCtaSubs, sms(), ctas);
      fh_decode_v2_kernel<kT><<<grid, kCtaSubs, 0, s>>>(d_in, n, (len - fixed) / 4, d_out, d_status);
    });
  }
  return int(cudaGetLastError());
}

}  // namespace ncclz::cuda
