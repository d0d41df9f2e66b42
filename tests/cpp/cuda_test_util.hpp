// Test helpers shared by the device tests (test_cuda_codec.cpp,
// test_cuda_select.cpp, test_cuda_prims.cpp): skipping without a device,
// CUDA return codes as assertions, device memory and copies to and from it.
// Built with CUDA and in the CPU emulator (tools/cuda_emu), like those files.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/slice.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"

namespace ncclz_test {

/// An environment switch: set, not empty and not "0".
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 && std::strcmp(v, "0") != 0;
}

/// NCCLZ_REQUIRE_GPU=1 (for runs on the GPU machine): a test that needs a
/// device fails, with the CUDA error, instead of skipping.
inline bool gpu_required() { return env_on("NCCLZ_REQUIRE_GPU"); }

/// NCCLZ_CUDA_TEST_QUICK=1 (set by tools/gpu_session.sh under
/// compute-sanitizer, where every launch is slow): fewer sizes, distributions
/// and mutations.
inline bool quick() { return env_on("NCCLZ_CUDA_TEST_QUICK"); }

/// Why no device is visible: the CUDA error of cudaGetDeviceCount, if any.
inline std::string no_device_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  return e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) : "no CUDA device visible";
}

/// Device memory of exactly `bytes` bytes (so that compute-sanitizer sees any
/// access past the end), filled with a poison byte before the constructor
/// returns (the fill is synchronised, so that work on any stream, blocking or
/// not, sees it). A failed cudaMalloc throws ncclz::Error.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes, int poison = 0xA5) {
    const cudaError_t e = cudaMalloc(&p_, bytes ? bytes : 1);
    if (e != cudaSuccess) throw ncclz::Error(std::string("cudaMalloc: ") + cudaGetErrorString(e));
    cudaMemset(p_, poison, bytes ? bytes : 1);
    cudaStreamSynchronize(nullptr);
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T = uint8_t>
  T* get() const {
    return static_cast<T*>(p_);
  }
  void upload(const void* src, size_t bytes) { cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice); }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    if (count) cudaMemcpy(v.data(), p_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  void* p_ = nullptr;
};

/// A device copy of v.
template <class T>
std::unique_ptr<DevBuf> to_device(const std::vector<T>& v) {
  auto b = std::make_unique<DevBuf>(v.size() * sizeof(T));
  if (!v.empty()) b->upload(v.data(), v.size() * sizeof(T));
  return b;
}

/// The bytes h copied to device memory at d; a failed copy throws ncclz::Error.
/// Element i of a buffer of int32 (es 4: v's low 32 bits, wrapping) or
/// int64 (es 8) codes set to v.
inline void store_code(std::vector<uint8_t>& b, size_t i, size_t es, int64_t v) {
  if (es == 4) {
    const int32_t c = int32_t(uint32_t(uint64_t(v)));
    std::memcpy(&b[i * 4], &c, 4);
  } else {
    std::memcpy(&b[i * 8], &v, 8);
  }
}

inline void to_device(void* d, const std::vector<uint8_t>& h) {
  if (!h.empty() && cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice) != cudaSuccess) throw ncclz::Error("H2D");
}
/// `bytes` bytes of device memory at d; a failed copy throws ncclz::Error.
inline std::vector<uint8_t> from_device(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  if (bytes && cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) throw ncclz::Error("D2H");
  return h;
}

/// The ElemType of a code type (int32_t or int64_t).
template <class Code>
constexpr ncclz::codec::ElemType code_type() {
  return sizeof(Code) == 4 ? ncclz::codec::ElemType::I32 : ncclz::codec::ElemType::I64;
}

}  // namespace ncclz_test

// Skips the test without a CUDA device (fails under NCCLZ_REQUIRE_GPU=1).
#define SKIP_WITHOUT_GPU()                                                                                         \
  do {                                                                                                             \
    if (::ncclz::cuda::device_count() == 0) {                                                                      \
      if (::ncclz_test::gpu_required()) FAIL() << "NCCLZ_REQUIRE_GPU=1, but " << ::ncclz_test::no_device_reason(); \
      GTEST_SKIP() << "no CUDA device: device code not run (" << ::ncclz_test::no_device_reason() << ")";          \
    }                                                                                                              \
  } while (0)

// A CUDA call that must return cudaSuccess.
#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Launch return codes of the device codec: 0 = enqueued; then the legacy
// default stream is synchronised and must be free of errors.
#define LAUNCH_OK(expr)                      \
  do {                                       \
    const int r_ = (expr);                   \
    ASSERT_EQ(r_, 0) << #expr;               \
    CUDA_OK(cudaStreamSynchronize(nullptr)); \
    CUDA_OK(cudaGetLastError());             \
  } while (0)
