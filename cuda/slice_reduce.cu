// Reductions of slices on the device (declared in
// cpp/include/ncclz/cuda_codec.hpp): the REDUCE step of a device rank's
// send/receive loops (prims::DeviceSliceCodec). Integer codes add as
// unsigned values, so sums wrap as prims::reduce_fn's do on the CPU (same
// bits, no undefined behaviour).
//  add_codes_async         one thread per element, grid-stride loop
//  reduce_values_async     the same loop for every wire type and operator,
//                          with the host's arithmetic (cpp/src/prims/reduce.cpp)
//  divide_values_async     the avg's division, as prims::divide_in_place
//  copy_sized_async        a copy whose size is in device memory (an encoded
//                          slice into its mapped host slot): 16-byte loads and
//                          stores where both ends are 16-byte aligned
//  decode_reduce_slice_async  the v3 tile decoder (decode_v3.cu) with an
//                          output that adds each decoded code to the local
//                          one, or keeps the larger or the smaller of the two
//                          (a lossy max / min): the codes never reach memory
//                          (2 kernels per slice: the slice's index, then its
//                          tiles)
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "codec/quantizer.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"
#include "reduce_op.cuh"
#include "slice_batch.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;

template <class U>
__global__ void __launch_bounds__(kThreads) add_kernel(U* __restrict__ out, const U* a, const U* b, size_t n) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) out[i] = U(a[i] + b[i]);
}

// One element of a reduction: combine (reduce_op.cuh), the host's arithmetic.

// The wire type's element: T the stored type, `kind` how it combines.
enum class Kind { Float, Int, F16, BF16 };

template <class T, Kind K, ReduceOp Op>
__global__ void __launch_bounds__(kThreads) reduce_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    if constexpr (K == Kind::Float || K == Kind::Int) {
      out[i] = combine<T, Op>(a[i], b[i]);
    } else if constexpr (K == Kind::F16) {
      out[i] = codec::float_to_f16(combine<float, Op>(codec::f16_to_float(a[i]), codec::f16_to_float(b[i])));
    } else {
      out[i] = codec::float_to_bf16(combine<float, Op>(codec::bf16_to_float(a[i]), codec::bf16_to_float(b[i])));
    }
  }
}

template <class T, Kind K>
int launch_reduce(cudaStream_t s, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  const unsigned grid = unsigned(std::min<size_t>(grid_for(n), 4096));
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: reduce_kernel<T, K, ReduceOp::Sum><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    case ReduceOp::Prod: reduce_kernel<T, K, ReduceOp::Prod><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    case ReduceOp::Max: reduce_kernel<T, K, ReduceOp::Max><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    case ReduceOp::Min: reduce_kernel<T, K, ReduceOp::Min><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    default: return host_error(codec::Status::Unsupported);
  }
  return int(cudaGetLastError());
}

template <class T, Kind K>
__global__ void __launch_bounds__(kThreads) divide_kernel(T* d, size_t count, int n) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < count; i += stride) {
    if constexpr (K == Kind::Float) {
      d[i] = T(d[i] / T(n));
    } else if constexpr (K == Kind::Int) {  // in a wide type, as prims::divide_in_place (T(n) wraps for uint8)
      using W = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
      d[i] = T(W(d[i]) / W(n));
    } else if constexpr (K == Kind::F16) {
      d[i] = codec::float_to_f16(codec::f16_to_float(d[i]) / float(n));
    } else {
      d[i] = codec::float_to_bf16(codec::bf16_to_float(d[i]) / float(n));
    }
  }
}

template <class T, Kind K>
int launch_divide(cudaStream_t s, void* d, size_t count, int n) {
  const unsigned grid = unsigned(std::min<size_t>(grid_for(count), 4096));
  divide_kernel<T, K><<<grid, kThreads, 0, s>>>(static_cast<T*>(d), count, n);
  return int(cudaGetLastError());
}

__global__ void __launch_bounds__(kThreads)
    copy_sized_kernel(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, const uint64_t* size,
                      const int* status, size_t cap) {
  if (*status != 0 || *size > cap) return;
  const size_t n = size_t(*size);
  const size_t stride = size_t(gridDim.x) * kThreads;
  const size_t first = size_t(blockIdx.x) * kThreads + threadIdx.x;
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t n16 = n / 16;
    auto* d = reinterpret_cast<uint4*>(dst);
    const auto* s = reinterpret_cast<const uint4*>(src);
    for (size_t i = first; i < n16; i += stride) d[i] = s[i];
    done = n16 * 16;
  }
  for (size_t i = done + first; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

int copy_sized_async(void* stream, void* d_dst, const void* d_src, const uint64_t* d_size, const int* d_status,
                     size_t cap) {
  if (cap == 0) return 0;
  // Enough CTAs for PCIe's bandwidth on a few MiB; the size is not known here.
  const unsigned grid = unsigned(std::min<size_t>(grid_for((cap + 15) / 16), 264));
  copy_sized_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint8_t*>(d_dst), static_cast<const uint8_t*>(d_src), d_size, d_status, cap);
  return int(cudaGetLastError());
}

int add_codes_async(void* stream, codec::ElemType t, void* d_out, const void* d_a, const void* d_b, size_t n) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (t != codec::ElemType::I32 && t != codec::ElemType::I64) return host_error(codec::Status::Unsupported);
  if (n == 0) return 0;
  const unsigned grid = unsigned(std::min<size_t>(grid_for(n), 4096));
  if (t == codec::ElemType::I32) {
    add_kernel<uint32_t><<<grid, kThreads, 0, s>>>(static_cast<uint32_t*>(d_out), static_cast<const uint32_t*>(d_a),
                                                   static_cast<const uint32_t*>(d_b), n);
  } else {
    add_kernel<uint64_t><<<grid, kThreads, 0, s>>>(static_cast<uint64_t*>(d_out), static_cast<const uint64_t*>(d_a),
                                                   static_cast<const uint64_t*>(d_b), n);
  }
  return int(cudaGetLastError());
}

int reduce_values_async(void* stream, codec::ElemType t, ReduceOp op, void* d_out, const void* d_a, const void* d_b,
                        size_t n) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (uint8_t(op) > uint8_t(ReduceOp::Prod)) return host_error(codec::Status::Unsupported);
  if (n == 0) return 0;
  using codec::ElemType;
  switch (t) {
    case ElemType::F32: return launch_reduce<float, Kind::Float>(s, op, d_out, d_a, d_b, n);
    case ElemType::F64: return launch_reduce<double, Kind::Float>(s, op, d_out, d_a, d_b, n);
    case ElemType::F16: return launch_reduce<uint16_t, Kind::F16>(s, op, d_out, d_a, d_b, n);
    case ElemType::BF16: return launch_reduce<uint16_t, Kind::BF16>(s, op, d_out, d_a, d_b, n);
    case ElemType::I32: return launch_reduce<int32_t, Kind::Int>(s, op, d_out, d_a, d_b, n);
    case ElemType::I64: return launch_reduce<int64_t, Kind::Int>(s, op, d_out, d_a, d_b, n);
    case ElemType::U8: return launch_reduce<uint8_t, Kind::Int>(s, op, d_out, d_a, d_b, n);
  }
  return host_error(codec::Status::Unsupported);
}

int divide_values_async(void* stream, codec::ElemType t, void* d, size_t count, int n) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (n == 0) return host_error(codec::Status::Unsupported);
  if (count == 0) return 0;
  using codec::ElemType;
  switch (t) {
    case ElemType::F32: return launch_divide<float, Kind::Float>(s, d, count, n);
    case ElemType::F64: return launch_divide<double, Kind::Float>(s, d, count, n);
    case ElemType::F16: return launch_divide<uint16_t, Kind::F16>(s, d, count, n);
    case ElemType::BF16: return launch_divide<uint16_t, Kind::BF16>(s, d, count, n);
    case ElemType::I32: return launch_divide<int32_t, Kind::Int>(s, d, count, n);
    case ElemType::I64: return launch_divide<int64_t, Kind::Int>(s, d, count, n);
    case ElemType::U8: return launch_divide<uint8_t, Kind::Int>(s, d, count, n);
  }
  return host_error(codec::Status::Unsupported);
}

size_t decode_reduce_scratch_bytes(codec::ElemType code_t, uint32_t count) {
  detail::SliceBatchRef r;
  const size_t slot = codec::max_slice_bytes(code_t, count ? count : 1);
  if (detail::make_batch(code_t, count ? count : 1, count ? count : 1, slot, 1, &r) != 0) return 0;
  return detail::SliceScratch::of(r.S, r.nbs).bytes;
}

int decode_reduce_slice_async(void* stream, uint8_t* d_scratch, const uint8_t* d_src, size_t len,
                              codec::ElemType code_t, uint32_t count, ReduceOp op, const void* d_local, void* d_out,
                              int* d_status) {
  if (!codec::is_code_type(code_t)) return host_error(codec::Status::Unsupported);
  detail::CodeOp cop = detail::CodeOp::Sum;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
    case ReduceOp::Max: cop = detail::CodeOp::Max; break;
    case ReduceOp::Min: cop = detail::CodeOp::Min; break;
    default: return host_error(codec::Status::Unsupported);
  }
  detail::SliceBatchRef r;
  if (const int e = detail::make_batch(code_t, count, count ? count : 1, len, 1, &r)) return e;
  if (r.S == 0) return 0;
  detail::SliceScratch::of(r.S, r.nbs).place(d_scratch, &r);
  return detail::decode3_reduce(d_src, nullptr, code_t, r, cop, d_local, d_out, d_status,
                                static_cast<cudaStream_t>(stream));
}

}  // namespace ncclz::cuda
