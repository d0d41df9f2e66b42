// Helpers shared by the device codec's .cu files (not a public header).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "ncclz/codec/format.hpp"

namespace ncclz::cuda::detail {

constexpr int kThreads = 256;  // threads per CTA of every codec kernel
constexpr unsigned kFullMask = 0xffffffffu;

/// Return value for arguments rejected on the host: minus a codec::Status.
inline int host_error(codec::Status s) { return -int(s); }

inline unsigned grid_for(size_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

/// Stream-ordered temporary memory: one cudaMallocAsync per call, carved into
/// aligned pieces; freed (stream-ordered) by release().
class Arena {
 public:
  explicit Arena(cudaStream_t s) : stream_(s) {}
  ~Arena() { release(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// Adds a piece of `bytes` to the layout (before allocate()); returns its offset.
  size_t reserve(size_t bytes) {
    const size_t off = size_;
    size_ += (bytes + 255) & ~size_t(255);
    return off;
  }
  cudaError_t allocate() {
    if (size_ == 0) return cudaSuccess;
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, size_, stream_);
    base_ = static_cast<uint8_t*>(p);
    return e;
  }
  template <class T>
  T* at(size_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }
  cudaError_t release() {
    cudaError_t e = cudaSuccess;
    if (base_) e = cudaFreeAsync(base_, stream_);
    base_ = nullptr;
    return e;
  }

 private:
  cudaStream_t stream_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

/// Exclusive sum of n uint64 values (CUB), with its scratch from cudaMallocAsync.
inline cudaError_t exclusive_sum_u64(const unsigned long long* in, unsigned long long* out, size_t n,
                                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  size_t bytes = 0;
  cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, (long long)n, stream);
  if (e != cudaSuccess) return e;
  void* tmp = nullptr;
  e = cudaMallocAsync(&tmp, bytes, stream);
  if (e != cudaSuccess) return e;
  e = cub::DeviceScan::ExclusiveSum(tmp, bytes, in, out, (long long)n, stream);
  const cudaError_t f = cudaFreeAsync(tmp, stream);
  return e != cudaSuccess ? e : f;
}

/// Stores/loads a little-endian value of `bytes` bytes at an unaligned address.
template <class Code>
__device__ __forceinline__ void store_le(uint8_t* p, Code v) {
  using U = std::make_unsigned_t<Code>;
  const U u = U(v);
#pragma unroll
  for (int b = 0; b < int(sizeof(Code)); ++b) p[b] = uint8_t(u >> (8 * b));
}
template <class Code>
__device__ __forceinline__ Code load_le(const uint8_t* p) {
  using U = std::make_unsigned_t<Code>;
  U u = 0;
#pragma unroll
  for (int b = 0; b < int(sizeof(Code)); ++b) u |= U(p[b]) << (8 * b);
  return Code(u);
}

}  // namespace ncclz::cuda::detail
