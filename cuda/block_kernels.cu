// Block coder on the GPU: the same payload as cpp/src/codec/block_coder.cpp,
// byte for byte (docs/FORMAT.md, "Block").
//
// *** NOT YET RUN ON A GPU. *** This file compiles for sm_80/sm_90, but no
// test has executed it: it is written to be simple and plainly correct, not
// fast. Check it against the CPU coder on a GPU before relying on it.
//
// Schedule (one warp per block of 32 residuals, lane i owns residual i):
//  encode  1. width pass: each warp ORs its lanes' magnitudes (__reduce_or_sync),
//             lane 0 writes the width byte dst[blk] and the payload size.
//          2. exclusive scan of the payload sizes (CUB) -> payload offsets;
//             a one-thread kernel adds the last size: the total.
//          3. encode pass (skipped when nb + total > cap): each warp writes its
//             sign word (__ballot_sync of r < 0, lane 0) and its w planes
//             (plane b = __ballot_sync of bit b of |r|, stored by lane b % 32)
//             at dst + nb + offset. Words are stored byte by byte: offsets are
//             not 4-byte aligned.
//  decode  1. size pass: one thread per width byte, payload size, flags w > bits.
//          2. scan as above; a one-thread kernel checks nb + total == len.
//          3. decode pass (skipped once the status is Corrupt): each lane reads
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
__global__ void encode_width_kernel(const Code* r, size_t n, size_t nb, uint8_t* widths,
                                    unsigned long long* sizes) {
  const size_t blk = global_warp();
  if (blk >= nb) return;  // uniform per warp
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const Code v = i < n ? r[i] : Code(0);
  const int w = codec::block_bit_width(warp_or(codec::block_magnitude(v)));
  if (lane == 0) {
    widths[blk] = uint8_t(w);
    sizes[blk] = codec::block_payload_bytes(w);
  }
}

// *total = offsets[nb-1] + sizes[nb-1] (payload bytes after the width bytes).
__global__ void total_kernel(const unsigned long long* offsets, const unsigned long long* sizes, size_t nb,
                             unsigned long long* total) {
  *total = offsets[nb - 1] + sizes[nb - 1];
}

template <class Code>
__global__ void encode_planes_kernel(const Code* r, size_t n, size_t nb, size_t cap, const unsigned long long* offsets,
                                     const unsigned long long* total, uint8_t* dst, size_t* bytes) {
  const size_t all = nb + *total;
  const size_t blk = global_warp();
  if (blk == 0 && threadIdx.x == 0) *bytes = all <= cap ? all : codec::kNoFit;
  if (all > cap || blk >= nb) return;  // uniform per warp
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const Code v = i < n ? r[i] : Code(0);
  const UCode<Code> mag = codec::block_magnitude(v);
  const int w = dst[blk];  // written by encode_width_kernel; the same for the whole warp
  if (w == 0) return;
  uint8_t* out = dst + nb + offsets[blk];
  const uint32_t sign = __ballot_sync(kFullMask, v < 0);
  if (lane == 0) codec::store_u32(out, sign);
  for (int b = 0; b < w; ++b) {
    const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> b) & 1u);
    if (lane == (b & 31)) codec::store_u32(out + 4 + 4 * b, plane);
  }
}

// ---- decode ---------------------------------------------------------------

template <class Code>
__global__ void decode_size_kernel(const uint8_t* src, size_t nb, unsigned long long* sizes, int* status) {
  const size_t blk = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= nb) return;
  const int w = src[blk];
  if (w > codec::block_max_width<Code>()) {
    atomicExch(status, int(codec::Status::Corrupt));
    sizes[blk] = 0;
    return;
  }
  sizes[blk] = codec::block_payload_bytes(w);
}

__global__ void check_total_kernel(const unsigned long long* offsets, const unsigned long long* sizes, size_t nb,
                                   size_t len, int* status) {
  if (nb + offsets[nb - 1] + sizes[nb - 1] != len) *status = int(codec::Status::Corrupt);
}

template <class Code>
__global__ void decode_planes_kernel(const uint8_t* src, size_t n, size_t nb, const unsigned long long* offsets,
                                     Code* out, int* status) {
  if (*status != int(codec::Status::Ok)) return;  // lengths not consistent: read nothing
  const size_t blk = global_warp();
  if (blk >= nb) return;
  const int lane = threadIdx.x & 31;
  const size_t i = blk * kBlockLen + lane;
  const int m = n - blk * kBlockLen < size_t(kBlockLen) ? int(n - blk * kBlockLen) : kBlockLen;
  const int w = src[blk];
  if (w == 0) {
    if (i < n) out[i] = Code(0);
    return;
  }
  const uint8_t* p = src + nb + offsets[blk];
  if (lane == 0 && !codec::block_check_planes<Code>(p, w, m)) atomicExch(status, int(codec::Status::Corrupt));
  const uint32_t sign = codec::load_u32(p);
  UCode<Code> mag = 0;
  for (int b = 0; b < w; ++b) mag |= UCode<Code>((codec::load_u32(p + 4 + 4 * b) >> lane) & 1u) << b;
  if (i < n) out[i] = Code(((sign >> lane) & 1u) ? UCode<Code>(UCode<Code>(0) - mag) : mag);
}

__global__ void set_size_kernel(size_t* p, size_t v) { *p = v; }
__global__ void set_int_kernel(int* p, int v) { *p = v; }

unsigned grid_for_warps(size_t warps) { return unsigned((warps + kWarpsPerCta - 1) / kWarpsPerCta); }

// Temporary arrays of one call: sizes, offsets, total, and CUB's scratch.
struct Scratch {
  unsigned long long* sizes = nullptr;
  unsigned long long* offsets = nullptr;
  unsigned long long* total = nullptr;
  void* cub = nullptr;
  size_t cub_bytes = 0;
};

cudaError_t scan_sizes(size_t nb, Scratch* s, cudaStream_t stream) {
  cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, s->cub_bytes, s->sizes, s->offsets, (long long)nb, stream);
  if (e != cudaSuccess) return e;
  e = cudaMallocAsync(&s->cub, s->cub_bytes, stream);
  if (e != cudaSuccess) return e;
  return cub::DeviceScan::ExclusiveSum(s->cub, s->cub_bytes, s->sizes, s->offsets, (long long)nb, stream);
}

cudaError_t alloc_scratch(size_t nb, Scratch* s, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, (2 * nb + 1) * sizeof(unsigned long long), stream);
  if (e != cudaSuccess) return e;
  s->sizes = static_cast<unsigned long long*>(p);
  s->offsets = s->sizes + nb;
  s->total = s->offsets + nb;
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
  if (nb == 0 || nb > cap) {
    set_size_kernel<<<1, 1, 0, stream>>>(d_bytes, nb == 0 ? size_t(0) : codec::kNoFit);
    return int(cudaGetLastError());
  }
  Scratch s;
  cudaError_t e = alloc_scratch(nb, &s, stream);
  if (e == cudaSuccess) {
    encode_width_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_r, n, nb, d_dst, s.sizes);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = scan_sizes(nb, &s, stream);
  if (e == cudaSuccess) {
    total_kernel<<<1, 1, 0, stream>>>(s.offsets, s.sizes, nb, s.total);
    encode_planes_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_r, n, nb, cap, s.offsets, s.total,
                                                                             d_dst, d_bytes);
    e = cudaGetLastError();
  }
  const cudaError_t f = free_scratch(&s, stream);
  return int(e != cudaSuccess ? e : f);
}

template <class Code>
int block_decode_async(const uint8_t* d_src, size_t len, size_t n, Code* d_out, int* d_status, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const size_t nb = codec::block_count(n);
  if (nb == 0 || len < nb) {
    const bool ok = nb == 0 && len == 0;
    set_int_kernel<<<1, 1, 0, stream>>>(d_status, int(ok ? codec::Status::Ok : codec::Status::Corrupt));
    return int(cudaGetLastError());
  }
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(int), stream);  // Status::Ok
  Scratch s;
  if (e == cudaSuccess) e = alloc_scratch(nb, &s, stream);
  if (e == cudaSuccess) {
    decode_size_kernel<Code><<<unsigned((nb + kThreads - 1) / kThreads), kThreads, 0, stream>>>(d_src, nb, s.sizes,
                                                                                              d_status);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = scan_sizes(nb, &s, stream);
  if (e == cudaSuccess) {
    check_total_kernel<<<1, 1, 0, stream>>>(s.offsets, s.sizes, nb, len, d_status);
    decode_planes_kernel<Code><<<grid_for_warps(nb), kThreads, 0, stream>>>(d_src, n, nb, s.offsets, d_out, d_status);
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
