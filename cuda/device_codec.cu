// The device codec's owner (ncclz/cuda_codec.hpp): its stream and its
// scratch, and what the build and the machine offer (ncclz/cuda_support.hpp).
// The kernels are in quantize_kernels.cu and slice_kernels.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_support.hpp"

namespace ncclz::cuda {

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

int copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return 0;
  return int(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

namespace {
// NCCLZ_DEVICE_CODEC: v1 or v2 selects those slice kernels, cta the CTA slice
// coder's batch form (4), anything else v3.
int kernels_from_env() {
  const char* v = std::getenv("NCCLZ_DEVICE_CODEC");
  if (v != nullptr && std::strcmp(v, "v1") == 0) return 1;
  if (v != nullptr && std::strcmp(v, "v2") == 0) return 2;
  if (v != nullptr && std::strcmp(v, "cta") == 0) return 4;
  return 3;
}
}  // namespace

DeviceCodec::DeviceCodec() : own_stream_(true), kernels_(kernels_from_env()) {
  cudaStream_t s = nullptr;
  status_ = int(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

DeviceCodec::DeviceCodec(void* stream) : stream_(stream), kernels_(kernels_from_env()) {}

DeviceCodec::~DeviceCodec() {
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (scratch_) cudaFreeAsync(scratch_, s);
  if (own_stream_ && status_ == 0) cudaStreamDestroy(s);  // its work completes first
}

int DeviceCodec::reserve(size_t n, uint32_t slice_len) {
  const size_t q = detail::quantize_scratch_bytes(n), s = detail::slice_scratch_bytes(n, slice_len),
               sel = detail::select_scratch_bytes(n, slice_len);
  int err = 0;
  scratch(std::max({q, s, sel}), &err);
  return err;
}

int DeviceCodec::synchronize() {
  if (status_) return status_;
  return int(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

uint8_t* DeviceCodec::scratch(size_t bytes, int* err) {
  *err = status_;
  if (status_) return nullptr;
  *err = detail::grow_on_stream(static_cast<cudaStream_t>(stream_), &scratch_, &scratch_bytes_, bytes);
  return *err ? nullptr : scratch_;
}

}  // namespace ncclz::cuda
