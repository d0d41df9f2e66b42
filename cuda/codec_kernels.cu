// Device build of the shared codec logic: the slice header, the predictors and
// the per-block coding functions compile here with the same sources the CPU
// uses, so that a slice encoded on one side decodes on the other. The kernels
// of the GPU path (issue: GPU path) grow from this file.
#include <cuda_runtime.h>

#include "codec/predictor.hpp"
#include "ncclz/codec/format.hpp"
#include "ncclz/cuda_support.hpp"

namespace ncclz::cuda {
namespace {

// Residuals of one slice of codes, one element per thread.
template <class Code>
__global__ void predict_kernel(const Code* q, size_t n, codec::Predictor p, uint32_t W, uint32_t P, Code* r) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) codec::predict_range(q, i, 1, p, W, P, r + i);
}

// Parses a slice header on the device; writes the status.
__global__ void read_header_kernel(const uint8_t* src, size_t len, int* status) {
  codec::SliceHeader h;
  *status = int(codec::read_header(src, len, &h));
}

template __global__ void predict_kernel<int32_t>(const int32_t*, size_t, codec::Predictor, uint32_t, uint32_t, int32_t*);
template __global__ void predict_kernel<int64_t>(const int64_t*, size_t, codec::Predictor, uint32_t, uint32_t, int64_t*);

}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  // No driver or no device: report 0 and clear the sticky error state.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace ncclz::cuda
