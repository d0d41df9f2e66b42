// What the v3 slice kernels (encode_v3.cu, decode_v3.cu) share: the tile
// geometry, where a tile's codes come from (codes, or floats quantized on
// the fly), and the CTA-wide copies between shared memory and a slot at any
// byte alignment. The schedule itself is written down in encode_v3.cu and
// decode_v3.cu; docs/GPU.md summarises it.
//
// A tile is kTile3 consecutive codes of one slice (kTileBlocks3 blocks of 32),
// one CTA of kThreads threads. Thread t holds elements e = j * kThreads + t,
// j < kItems3 (coalesced loads), so lane l of warp w holds lane l of block
// j * kWarps3 + w: every warp owns whole blocks and votes on them directly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "codec/block_frame.hpp"
#include "codec/predictor.hpp"
#include "codec/quantizer.hpp"
#include "device_common.cuh"

namespace ncclz::cuda::detail {

constexpr uint32_t kTile3 = 2048;                                       // codes per tile
constexpr int kItems3 = int(kTile3) / kThreads;                         // codes per thread
constexpr int kWarps3 = kThreads / 32;                                  // warps per CTA
constexpr uint32_t kTileBlocks3 = kTile3 / uint32_t(codec::kBlockLen);  // blocks per tile
static_assert(kItems3 * kWarps3 == int(kTileBlocks3), "a warp's lanes hold whole blocks");

/// Tiles of one slot's slice of L codes (the last slice's tail tiles are empty).
__host__ __device__ inline uint32_t tiles_per_slice(uint32_t L) { return uint32_t((size_t(L) + kTile3 - 1) / kTile3); }

/// Running-sum callback for cub::BlockScan across tiles (v2, v3).
template <class U>
struct RunningPrefix {
  U total;
  __device__ U operator()(U aggregate) {
    const U old = total;
    total += aggregate;
    return old;
  }
};

/// Codes read as they are (encode_slices_async).
template <class Code>
struct CodesIn {
  using CodeT = Code;
  static constexpr bool kHasCodes = true;
  const Code* q;
  __device__ __forceinline__ Code at(size_t i, int&) const { return q[i]; }
};

/// Codes made from floats by the CPU's quantize_one (quantize_encode_slices_async):
/// an outlier counts in `bad` and is coded as 0, as quantize_async does.
template <class T, class Code>
struct FloatsIn {
  using CodeT = Code;
  static constexpr bool kHasCodes = false;
  const T* x;
  codec::QuantGrid g;
  int64_t limit;
  __device__ __forceinline__ Code at(size_t i, int& bad) const {
    Code c;
    bad += !codec::quantize_one<T, Code>(x[i], g, limit, &c);
    return c;
  }
};

/// Calls f(FloatsIn<T, Code>) for the floats at x of type t (F32, F64, F16,
/// BF16) quantized on grid g to codes of type code_t (I32, I64), with
/// |code| <= limit clamped to [0, max_code_limit<Code>]: how the fused
/// quantize + encode calls read their input. Other types: f is not called.
template <class F>
void with_floats_in(const void* x, codec::ElemType t, const codec::QuantGrid& g, int64_t limit, codec::ElemType code_t,
                    F&& f) {
  with_float_type(t, [&](auto tv) {
    using T = decltype(tv);
    with_code_type(code_t, [&](auto cv) {
      using Code = decltype(cv);
      const int64_t lim = limit < 0 ? 0 : limit > codec::max_code_limit<Code>() ? codec::max_code_limit<Code>() : limit;
      f(FloatsIn<T, Code>{static_cast<const T*>(x), g, lim});
    });
  });
}

/// Residual of code `cur` at slice index i for None, Delta1 or Delta2, given
/// the two codes before it (p1 at i - 1, p2 at i - 2; unused where i < 2):
/// predict_at itself, on a window of at most three codes.
template <class Code>
__device__ __forceinline__ Code delta_residual(Code p2, Code p1, Code cur, uint32_t i, codec::Predictor p) {
  using U = codec::UCode<Code>;
  if (i >= 2) {
    const Code w[3] = {p2, p1, cur};
    return Code(U(cur) - codec::predict_at(w, 2, p, 0, 0));
  }
  if (i == 1) {
    const Code w[2] = {p1, cur};
    return Code(U(cur) - codec::predict_at(w, 1, p, 0, 0));
  }
  return Code(U(cur) - codec::predict_at(&cur, 0, p, 0, 0));
}

/// The low 32 bits of (hi:lo) >> sh, sh < 32.
__device__ __forceinline__ uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t sh) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, sh);
#else
  return sh ? (lo >> sh) | (hi << (32 - sh)) : lo;
#endif
}

/// Byte o and the 4 bytes from o of a little-endian byte stream held in u32 words.
__device__ __forceinline__ uint32_t stage_byte(const uint32_t* s, uint32_t o) {
  return (s[o >> 2] >> (8 * (o & 3))) & 0xffu;
}
__device__ __forceinline__ uint32_t stage_word(const uint32_t* s, uint32_t o) {
  const uint32_t w = o >> 2, sh = 8 * (o & 3);
  return sh ? funnel_r(s[w], s[w + 1], sh) : s[w];
}

/// The CTA stores bytes [0, len) of the stream in shared memory `s` at g (any
/// alignment): 16-byte stores over the 16-byte-aligned part of [g, g + len),
/// byte stores for the (< 16-byte) head and tail. `s` must have one word
/// past the stream's last (partly used) one readable. No barrier inside.
__device__ __forceinline__ void cta_store_bytes(uint8_t* g, const uint32_t* s, uint32_t len) {
  const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(g) & 15u);
  const uint32_t head = (mis ? 16 - mis : 0) < len ? (mis ? 16 - mis : 0) : len;
  const uint32_t chunks = (len - head) >> 4;
  const uint32_t tail = head + (chunks << 4);
  for (uint32_t i = threadIdx.x; i < head; i += kThreads) g[i] = uint8_t(stage_byte(s, i));
  for (uint32_t i = tail + threadIdx.x; i < len; i += kThreads) g[i] = uint8_t(stage_byte(s, i));
  for (uint32_t c = threadIdx.x; c < chunks; c += kThreads) {
    const uint32_t o = head + (c << 4);
    uint4 v;
    v.x = stage_word(s, o);
    v.y = stage_word(s, o + 4);
    v.z = stage_word(s, o + 8);
    v.w = stage_word(s, o + 12);
    *reinterpret_cast<uint4*>(g + o) = v;
  }
}

/// The CTA loads bytes [g, g + len) into the stream `s` (shared; words
/// 0 .. ceil(len / 4)): word j from the one or two aligned 4-byte words of
/// g + 4j, funnel-shifted; bytes past g + len are never read (the last
/// words, where an aligned word would cross that end, byte by byte). Bytes
/// before g back to the 4-byte boundary are read (they belong to the same
/// slot: the header precedes every payload). No barrier inside.
__device__ __forceinline__ void cta_load_bytes(uint32_t* s, const uint8_t* g, uint32_t len) {
  const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(g) & 3u), sh = 8 * mis;
  const uint32_t* a = reinterpret_cast<const uint32_t*>(g - mis);
  const uint32_t words = (len + 3) / 4;
  // Word j reads aligned words j and (when misaligned) j + 1: bytes up to
  // 4j + 8 - mis of g; whole words while that is <= len.
  const uint32_t fast = mis ? (len + mis >= 8 ? (len + mis - 8) / 4 + 1 : 0) : len / 4;
  for (uint32_t j = threadIdx.x; j < words; j += kThreads) {
    if (j < fast) {
      s[j] = mis ? funnel_r(a[j], a[j + 1], sh) : a[j];
    } else {
      uint32_t v = 0;
      for (uint32_t b = 0; b < 4 && 4 * j + b < len; ++b) v |= uint32_t(g[4 * j + b]) << (8 * b);
      s[j] = v;
    }
  }
}

}  // namespace ncclz::cuda::detail
