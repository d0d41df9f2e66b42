// Helpers shared by the device codec's .cu files (not a public header).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "codec/quantizer.hpp"
#include "ncclz/codec/format.hpp"

namespace ncclz::cuda::detail {

constexpr int kThreads = 256;  // threads per CTA of every codec kernel
constexpr unsigned kFullMask = 0xffffffffu;

/// Return value for arguments rejected on the host: minus a codec::Status.
inline int host_error(codec::Status s) { return -int(s); }

inline unsigned grid_for(size_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

/// A device buffer of a codec (*buf, *cap bytes) grown to at least `bytes`,
/// stream-ordered on s: work already enqueued on the old block finishes
/// before it is freed, the new one is usable by what is enqueued next; the
/// contents are not kept. Returns 0 or the CUDA error (then *buf is null).
inline int grow_on_stream(cudaStream_t s, uint8_t** buf, size_t* cap, size_t bytes) {
  if (bytes <= *cap) return 0;
  if (*buf) {
    const cudaError_t e = cudaFreeAsync(*buf, s);
    *buf = nullptr;
    *cap = 0;
    if (e != cudaSuccess) return int(e);
  }
  void* p = nullptr;
  if (const cudaError_t e = cudaMallocAsync(&p, bytes, s); e != cudaSuccess) return int(e);
  *buf = static_cast<uint8_t*>(p);
  *cap = bytes;
  return 0;
}

/// The layout of one call's scratch: pieces added one after the other
/// (256-byte aligned), then placed at the codec's scratch (DeviceCodec::scratch).
class ScratchLayout {
 public:
  /// Adds a piece of `bytes`; returns its offset.
  size_t add(size_t bytes) {
    const size_t off = size_;
    size_ += (bytes + 255) & ~size_t(255);
    return off;
  }
  size_t bytes() const { return size_; }
  template <class T>
  static T* at(uint8_t* base, size_t off) {
    return reinterpret_cast<T*>(base + off);
  }

 private:
  size_t size_ = 0;
};

/// Temporary storage bytes exclusive_sum_u64 needs for n values.
inline size_t exclusive_sum_bytes(size_t n) {
  size_t bytes = 0;
  if (n)
    cub::DeviceScan::ExclusiveSum(nullptr, bytes, (const unsigned long long*)nullptr, (unsigned long long*)nullptr,
                                  (long long)n);
  return bytes;
}

/// Exclusive sum of n uint64 values (CUB) with `tmp` (exclusive_sum_bytes(n)).
inline cudaError_t exclusive_sum_u64(const unsigned long long* in, unsigned long long* out, size_t n, void* tmp,
                                     size_t tmp_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, in, out, (long long)n, stream);
}

/// Scratch bytes of the quantizer for n values (quantize_kernels.cu) and of
/// a slice batch of n codes in slices of L (slice_kernels.cu), for
/// DeviceCodec::reserve.
size_t quantize_scratch_bytes(size_t n);
size_t slice_scratch_bytes(size_t n, uint32_t L);
size_t select_scratch_bytes(size_t n, uint32_t L);

// Calls f(T{}) for the value type of t (F32, F64, F16, BF16: the quantizer's
// types, codec/quantizer.hpp); false for others.
template <class F>
bool with_float_type(codec::ElemType t, F&& f) {
  switch (t) {
    case codec::ElemType::F32: f(float{}); return true;
    case codec::ElemType::F64: f(double{}); return true;
    case codec::ElemType::F16: f(codec::F16{}); return true;
    case codec::ElemType::BF16: f(codec::Bf16{}); return true;
    default: return false;
  }
}
// Calls f(Code{}) for the code type t (I32, I64); false for others.
template <class F>
bool with_code_type(codec::ElemType t, F&& f) {
  switch (t) {
    case codec::ElemType::I32: f(int32_t{}); return true;
    case codec::ElemType::I64: f(int64_t{}); return true;
    default: return false;
  }
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
