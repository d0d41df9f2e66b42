// Block coder on the GPU: the same payload as cpp/src/codec/block_coder.cpp,
// byte for byte (docs/FORMAT.md, "Block").
//
// *** NOT YET RUN ON A GPU. *** This file compiles for sm_80/sm_90, but no
// test has executed it: it is written to be simple and plainly correct, not
// fast. Check it against the CPU coder on a GPU before relying on it.
//
// Layout reminder: ceil(nb/2) width-nibble bytes, then one escape byte per
// block with w >= 15 (nibble 15), in block order, then the block payloads.
//
// Schedule (one warp per block of 32 residuals, lane i owns residual i):
//  encode  1. width pass: each warp ORs its lanes' magnitudes (__reduce_or_sync),
//             lane 0 writes the width to a scratch array widths[blk], the
//             payload size and the escape flag (w >= 15).
//          2. exclusive scans (CUB) of the payload sizes -> payload offsets and
//             of the escape flags -> escape slots; a one-thread kernel sums
//             the totals: base = ceil(nb/2) + escapes, all = base + payload.
//          3. pack pass (skipped when all > cap): one thread per nibble byte
//             packs the two widths' nibbles and writes their escape bytes at
//             dst + ceil(nb/2) + slot.
//          4. encode pass (skipped when all > cap): each warp writes its
//             sign word (__ballot_sync of r < 0, lane 0) and its w planes
//             (plane b = __ballot_sync of bit b of |r|, stored by lane b % 32)
//             at dst + base + offset. Words are stored byte by byte: offsets are
//             not 4-byte aligned.
//  decode  (the host checks len >= ceil(nb/2) first)
//          1. nibble pass: one thread per block reads its nibble: escape flag,
//             width and payload size for v < 15; the thread of the last block
//             flags Corrupt if the unused high nibble (nb odd) is nonzero.
//          2. scan of the escape flags -> escape slots; a one-thread kernel
//             sums the escapes (base = ceil(nb/2) + escapes).
//          3. escape pass: each escaped block checks base <= len, reads its
//             escape byte, flags Corrupt unless 15 <= w <= bits, and sets its
//             width and payload size.
//          4. scan of the sizes; a one-thread kernel checks base + total == len.
//          5. decode pass (skipped once the status is Corrupt): each lane reads
//             the sign word and the w planes of its block and assembles its
//             magnitude; lane 0 checks the planes with block_check_planes (the
//             CPU's check) and flags Corrupt.
// Temporary arrays come from cudaMallocAsync on the caller's stream.
#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>
#include <type_traits>

#include "codec/block_coder.hpp"
#include "ncclz/codec/format.hpp"

namespace ncclz::cuda {
namespace {

using codec::kBlockLen;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kThreads = 256;                  // 8 warps per CTA
constexpr int kWarpsPerCta = kThreads / 32;

template <class Code>
using UCode = std::make_unsigned_t<Code>;

__device__ __forceinline__ uint32_t warp_or(uint32_t x) { return __reduce_or_sync(kFullMask, x); }
__device__ __forceinline__ uint64_t warp_or(uint64_t x) {
  const uint32_t lo = __reduce_or_sync(kFullMask, uint32_t(x));
  const uint32_t hi = __reduce_or_sync(kFullMask, uint32_t(x >> 32));
  return (uint64_t(hi) << 32) | lo;
}

// Index of this thread's warp in the grid (one warp per block of 32 residuals).
__device__ __forceinline__ size_t global_warp() {
  return (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}

// ---- encode ---------------------------------------------------------------

template <class Code>
__global__ void encode_width_kernel(const Code* r, size_t n, size_t nb, uint8_t* widths, unsigned long long* sizes,
                                    unsigned long long* escs) {
  const size_t blk = global_warp();
  if (blk >= nb) return;  // uniform per warp
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const Code v = i < n ? r[i] : Code(0);
  const int w = codec::block_bit_width(warp_or(codec::block_magnitude(v)));
  if (lane == 0) {
    widths[blk] = uint8_t(w);
    sizes[blk] = codec::block_payload_bytes(w);
    escs[blk] = w >= codec::kBlockEscape ? 1ull : 0ull;
  }
}

// totals[0] = escape bytes, totals[1] = base (nibbles + escapes),
// totals[2] = base + payload bytes (the whole payload).
__global__ void totals_kernel(const unsigned long long* offsets, const unsigned long long* sizes,
                              const unsigned long long* esc_offsets, const unsigned long long* escs, size_t nb,
                              unsigned long long* totals) {
  const unsigned long long nesc = esc_offsets[nb - 1] + escs[nb - 1];
  totals[0] = nesc;
  totals[1] = codec::block_nibble_bytes(nb) + nesc;
  totals[2] = totals[1] + offsets[nb - 1] + sizes[nb - 1];
}

// One thread per nibble byte j: blocks 2j and 2j+1.
__global__ void pack_widths_kernel(const uint8_t* widths, const unsigned long long* esc_offsets, size_t nb, size_t cap,
                                   const unsigned long long* totals, uint8_t* dst, size_t* bytes) {
  const size_t all = totals[2];
  const size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j == 0) *bytes = all <= cap ? all : codec::kNoFit;
  if (all > cap || 2 * j >= nb) return;
  const size_t nib = codec::block_nibble_bytes(nb);
  const int w0 = widths[2 * j];
  const int w1 = 2 * j + 1 < nb ? widths[2 * j + 1] : 0;
  dst[j] = uint8_t(codec::block_nibble_of(w0) | (codec::block_nibble_of(w1) << 4));
  if (w0 >= codec::kBlockEscape) dst[nib + esc_offsets[2 * j]] = uint8_t(w0);
  if (w1 >= codec::kBlockEscape) dst[nib + esc_offsets[2 * j + 1]] = uint8_t(w1);
}

template <class Code>
__global__ void encode_planes_kernel(const Code* r, size_t n, size_t nb, size_t cap, const uint8_t* widths,
                                     const unsigned long long* offsets, const unsigned long long* totals,
                                     uint8_t* dst) {
  const size_t all = totals[2];
  const size_t blk = global_warp();
  if (all > cap || blk >= nb) return;  // uniform per warp
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const Code v = i < n ? r[i] : Code(0);
  const UCode<Code> mag = codec::block_magnitude(v);
  const int w = widths[blk];  // written by encode_width_kernel; the same for the whole warp
  if (w == 0) return;
  uint8_t* out = dst + totals[1] + offsets[blk];
  const uint32_t sign = __ballot_sync(kFullMask, v < 0);
  if (lane == 0) codec::store_u32(out, sign);
  for (int b = 0; b < w; ++b) {
    const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> b) & 1u);
    if (lane == (b & 31)) codec::store_u32(out + 4 + 4 * b, plane);
  }
}

// ---- decode ---------------------------------------------------------------

// One thread per block: its nibble. Escaped blocks get their width later.
__global__ void decode_nibble_kernel(const uint8_t* src, size_t nb, uint8_t* widths, unsigned long long* sizes,
                                     unsigned long long* escs, int* status) {
  const size_t blk = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= nb) return;
  const unsigned byte = src[blk / 2];
  const unsigned v = (byte >> (4 * (blk & 1))) & 15u;
  if (blk == nb - 1 && (nb & 1) && (byte >> 4) != 0) atomicExch(status, int(codec::Status::Corrupt));
  const bool esc = v == unsigned(codec::kBlockEscape);
  escs[blk] = esc ? 1ull : 0ull;
  widths[blk] = esc ? uint8_t(0) : uint8_t(v);
  sizes[blk] = esc ? 0ull : codec::block_payload_bytes(int(v));
}

// totals[0] = escape bytes, totals[1] = base (nibbles + escapes).
__global__ void escape_total_kernel(const unsigned long long* esc_offsets, const unsigned long long* escs, size_t nb,
                                    unsigned long long* totals) {
  const unsigned long long nesc = esc_offsets[nb - 1] + escs[nb - 1];
  totals[0] = nesc;
  totals[1] = codec::block_nibble_bytes(nb) + nesc;
}

// One thread per block: an escaped block reads and checks its escape byte.
template <class Code>
__global__ void decode_escape_kernel(const uint8_t* src, size_t len, size_t nb, const unsigned long long* escs,
                                     const unsigned long long* esc_offsets, const unsigned long long* totals,
                                     uint8_t* widths, unsigned long long* sizes, int* status) {
  const size_t blk = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= nb || !escs[blk]) return;
  if (totals[1] > len) {  // escape stream truncated: read nothing
    atomicExch(status, int(codec::Status::Corrupt));
    return;
  }
  const int w = src[codec::block_nibble_bytes(nb) + esc_offsets[blk]];
  if (w < codec::kBlockEscape || w > codec::block_max_width<Code>()) {
    atomicExch(status, int(codec::Status::Corrupt));
    return;  // its size stays 0; the status is already Corrupt
  }
  widths[blk] = uint8_t(w);
  sizes[blk] = codec::block_payload_bytes(w);
}

__global__ void check_total_kernel(const unsigned long long* offsets, const unsigned long long* sizes, size_t nb,
                                   size_t len, const unsigned long long* totals, int* status) {
  if (totals[1] + offsets[nb - 1] + sizes[nb - 1] != len) *status = int(codec::Status::Corrupt);
}

template <class Code>
__global__ void decode_planes_kernel(const uint8_t* src, size_t n, size_t nb, const uint8_t* widths,
                                     const unsigned long long* offsets, const unsigned long long* totals, Code* out,
                                     int* status) {
  if (*status != int(codec::Status::Ok)) return;  // lengths not consistent: read nothing
  const size_t blk = global_warp();
  if (blk >= nb) return;
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const int m = n - blk * kBlockLen < size_t(kBlockLen) ? int(n - blk * kBlockLen) : kBlockLen;
  const int w = widths[blk];
  if (w == 0) {
    if (i < n) out[i] = Code(0);
    return;
  }
  const uint8_t* p = src + totals[1] + offsets[blk];
  if (lane == 0 && !codec::block_check_planes<Code>(p, w, m)) atomicExch(status, int(codec::Status::Corrupt));
  const uint32_t sign = codec::load_u32(p);
  UCode<Code> mag = 0;
  for (int b = 0; b < w; ++b) mag |= UCode<Code>((codec::load_u32(p + 4 + 4 * b) >> lane) & 1u) << b;
  if (i < n) out[i] = Code(((sign >> lane) & 1u) ? UCode<Code>(UCode<Code>(0) - mag) : mag);
}

__global__ void set_size_kernel(size_t* p, size_t v) { *p = v; }
__global__ void set_int_kernel(int* p, int v) { *p = v; }

unsigned grid_for_warps(size_t warps) { return unsigned((warps + kWarpsPerCta - 1) / kWarpsPerCta); }

unsigned grid_for_threads(size_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

// Temporary arrays of one call: per-block sizes, offsets, escape flags and
// escape slots, 3 totals, per-block widths, and CUB's scratch.
struct Scratch {
  unsigned long long* sizes = nullptr;
  unsigned long long* offsets = nullptr;
  unsigned long long* escs = nullptr;
  unsigned long long* esc_offsets = nullptr;
  unsigned long long* totals = nullptr;
  uint8_t* widths = nullptr;
  void* cub = nullptr;
  size_t cub_bytes = 0;
};

// Exclusive sum of nb values in -> out; CUB's scratch is allocated on first use
// (the same size for every scan of nb unsigned long longs).
cudaError_t scan(const unsigned long long* in, unsigned long long* out, size_t nb, Scratch* s, cudaStream_t stream) {
  cudaError_t e;
  if (!s->cub) {
    e = cub::DeviceScan::ExclusiveSum(nullptr, s->cub_bytes, in, out, (long long)nb, stream);
    if (e != cudaSuccess) return e;
    e = cudaMallocAsync(&s->cub, s->cub_bytes, stream);
    if (e != cudaSuccess) return e;
  }
  return cub::DeviceScan::ExclusiveSum(s->cub, s->cub_bytes, in, out, (long long)nb, stream);
}

cudaError_t alloc_scratch(size_t nb, Scratch* s, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, (4 * nb + 3) * sizeof(unsigned long long) + nb, stream);
  if (e != cudaSuccess) return e;
  s->sizes = static_cast<unsigned long long*>(p);
  s->offsets = s->sizes + nb;
  s->escs = s->offsets + nb;
  s->esc_offsets = s->escs + nb;
  s->totals = s->esc_offsets + nb;
  s->widths = reinterpret_cast<uint8_t*>(s->totals + 3);
  return cudaSuccess;
}

cudaError_t free_scratch(Scratch* s, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  if (s->cub) e = cudaFreeAsync(s->cub, stream);
  if (s->sizes) {
    const cudaError_t f = cudaFreeAsync(s->sizes, stream);
    if (e == cudaSuccess) e = f;
  }
  return e;
}

}  // namespace

template <class Code>
int block_encode_async(const Code* d_r, size_t n, uint8_t* d_dst, size_t cap, size_t* d_bytes, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const size_t nb = codec::block_count(n);
  if (nb == 0 || codec::block_nibble_bytes(nb) > cap) {
    set_size_kernel<<<1, 1, 0, stream>>>(d_bytes, nb == 0 ? size_t(0) : codec::kNoFit);
    return int(cudaGetLastError());
  }
  Scratch s;
  cudaError_t e = alloc_scratch(nb, &s, stream);
  if (e == cudaSuccess) {
    encode_width_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_r, n, nb, s.widths, s.sizes, s.escs);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = scan(s.sizes, s.offsets, nb, &s, stream);
  if (e == cudaSuccess) e = scan(s.escs, s.esc_offsets, nb, &s, stream);
  if (e == cudaSuccess) {
    totals_kernel<<<1, 1, 0, stream>>>(s.offsets, s.sizes, s.esc_offsets, s.escs, nb, s.totals);
    pack_widths_kernel<<<grid_for_threads(codec::block_nibble_bytes(nb)), kThreads, 0, stream>>>(
        s.widths, s.esc_offsets, nb, cap, s.totals, d_dst, d_bytes);
    encode_planes_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_r, n, nb, cap, s.widths, s.offsets,
                                                                             s.totals, d_dst);
    e = cudaGetLastError();
  }
  const cudaError_t f = free_scratch(&s, stream);
  return int(e != cudaSuccess ? e : f);
}

template <class Code>
int block_decode_async(const uint8_t* d_src, size_t len, size_t n, Code* d_out, int* d_status, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const size_t nb = codec::block_count(n);
  if (nb == 0 || len < codec::block_nibble_bytes(nb)) {
    const bool ok = nb == 0 && len == 0;
    set_int_kernel<<<1, 1, 0, stream>>>(d_status, int(ok ? codec::Status::Ok : codec::Status::Corrupt));
    return int(cudaGetLastError());
  }
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(int), stream);  // Status::Ok
  Scratch s;
  if (e == cudaSuccess) e = alloc_scratch(nb, &s, stream);
  if (e == cudaSuccess) {
    decode_nibble_kernel<<<grid_for_threads(nb), kThreads, 0, stream>>>(d_src, nb, s.widths, s.sizes, s.escs,
                                                                        d_status);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = scan(s.escs, s.esc_offsets, nb, &s, stream);
  if (e == cudaSuccess) {
    escape_total_kernel<<<1, 1, 0, stream>>>(s.esc_offsets, s.escs, nb, s.totals);
    decode_escape_kernel<Code><<<grid_for_threads(nb), kThreads, 0, stream>>>(
        d_src, len, nb, s.escs, s.esc_offsets, s.totals, s.widths, s.sizes, d_status);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = scan(s.sizes, s.offsets, nb, &s, stream);
  if (e == cudaSuccess) {
    check_total_kernel<<<1, 1, 0, stream>>>(s.offsets, s.sizes, nb, len, s.totals, d_status);
    decode_planes_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_src, n, nb, s.widths, s.offsets,
                                                                             s.totals, d_out, d_status);
    e = cudaGetLastError();
  }
  const cudaError_t f = free_scratch(&s, stream);
  return int(e != cudaSuccess ? e : f);
}

template int block_encode_async<int32_t>(const int32_t*, size_t, uint8_t*, size_t, size_t*, void*);
template int block_encode_async<int64_t>(const int64_t*, size_t, uint8_t*, size_t, size_t*, void*);
template int block_decode_async<int32_t>(const uint8_t*, size_t, size_t, int32_t*, int*, void*);
template int block_decode_async<int64_t>(const uint8_t*, size_t, size_t, int64_t*, int*, void*);

}  // namespace ncclz::cuda
