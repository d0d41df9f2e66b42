// Reductions of slices on the device (declared in
// cpp/include/ncclz/cuda_codec.hpp): the REDUCE step of a device rank's
// send/receive loops (prims::DeviceSliceCodec). Integer codes add as
// unsigned values, so sums wrap as prims::reduce_fn's do on the CPU (same
// bits, no undefined behaviour).
//  add_codes_async         one thread per element, grid-stride loop
//  copy_sized_async        a copy whose size is in device memory (an encoded
//                          slice into its mapped host slot): 16-byte loads and
//                          stores where both ends are 16-byte aligned
//  decode_add_slice_async  the v3 tile decoder (decode_v3.cu) with an output
//                          that adds each decoded code to the local one: the
//                          codes never reach memory (2 kernels per slice:
//                          the slice's index, then its tiles)
#include <cuda_runtime.h>

#include <algorithm>

#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;

template <class U>
__global__ void __launch_bounds__(kThreads) add_kernel(U* __restrict__ out, const U* a, const U* b, size_t n) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) out[i] = U(a[i] + b[i]);
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

size_t decode_add_scratch_bytes(codec::ElemType code_t, uint32_t count) {
  detail::SliceBatchRef r;
  const size_t slot = codec::max_slice_bytes(code_t, count ? count : 1);
  if (detail::make_batch(code_t, count ? count : 1, count ? count : 1, slot, 1, &r) != 0) return 0;
  return detail::SliceScratch::of(r.S, r.nbs).bytes;
}

int decode_add_slice_async(void* stream, uint8_t* d_scratch, const uint8_t* d_src, size_t len, codec::ElemType code_t,
                           uint32_t count, const void* d_local, void* d_out, int* d_status) {
  if (!codec::is_code_type(code_t)) return host_error(codec::Status::Unsupported);
  detail::SliceBatchRef r;
  if (const int e = detail::make_batch(code_t, count, count ? count : 1, len, 1, &r)) return e;
  if (r.S == 0) return 0;
  detail::SliceScratch::of(r.S, r.nbs).place(d_scratch, &r);
  return detail::decode3_add(d_src, nullptr, code_t, r, d_local, d_out, d_status, static_cast<cudaStream_t>(stream));
}

}  // namespace ncclz::cuda
