// The emulator's own stream and memory rules (include/cuda_emu.hpp), so that
// a run with NCCLZ_EMU_LAZY / NCCLZ_EMU_POISON is known to defer and to
// poison: each check skips unless its mode is on (run.sh ci and lazy turn
// both on). Built into ncclz_cuda_emu_tests only: on a GPU when work runs is
// the hardware's business.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace {

/// A device int, a page-locked host int, and a stream with the given flags.
struct StreamCase {
  int* dev = nullptr;
  int* host = nullptr;
  cudaStream_t s = nullptr;
  explicit StreamCase(unsigned flags) {
    EXPECT_EQ(cudaMalloc(&dev, sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
    *host = -1;
  }
  ~StreamCase() {
    cudaStreamDestroy(s);
    cudaFreeHost(host);
    cudaFree(dev);
  }
  /// Sets the device int to the byte pattern b and copies it to the host int, both on s.
  void set_and_copy_back(int b) {
    EXPECT_EQ(cudaMemsetAsync(dev, b, sizeof(int), s), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(host, dev, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  }
};

int pattern(int b) {
  int v;
  std::memset(&v, b, sizeof v);
  return v;
}

#define SKIP_UNLESS_LAZY() \
  if (!emu::lazy()) GTEST_SKIP() << "NCCLZ_EMU_LAZY is off: every call has run when it returns"

TEST(CudaEmulator, LazyWorkWaitsForTheStreamsSynchronization) {
  SKIP_UNLESS_LAZY();
  StreamCase t(cudaStreamNonBlocking);
  t.set_and_copy_back(0x11);
  EXPECT_EQ(*t.host, -1) << "the copy ran before anything synchronized";
  ASSERT_EQ(cudaStreamSynchronize(t.s), cudaSuccess);
  EXPECT_EQ(*t.host, pattern(0x11));
}

TEST(CudaEmulator, LazyQueryAnswersNotReadyThenRuns) {
  SKIP_UNLESS_LAZY();
  StreamCase t(cudaStreamNonBlocking);
  EXPECT_EQ(cudaStreamQuery(t.s), cudaSuccess);  // idle
  t.set_and_copy_back(0x22);
  EXPECT_EQ(cudaStreamQuery(t.s), cudaErrorNotReady);
  EXPECT_EQ(*t.host, -1);
  EXPECT_EQ(cudaStreamQuery(t.s), cudaSuccess);
  EXPECT_EQ(*t.host, pattern(0x22));
}

TEST(CudaEmulator, LegacyStreamWaitsForBlockingStreamsOnly) {
  SKIP_UNLESS_LAZY();
  int seen = 0;
  {
    // A blocking stream's work runs before a synchronous copy (the legacy stream) reads its result.
    StreamCase t(cudaStreamDefault);
    ASSERT_EQ(cudaMemsetAsync(t.dev, 0x33, sizeof(int), t.s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&seen, t.dev, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen, pattern(0x33));
  }
  {
    // A non-blocking stream's does not: the copy sees what was there before.
    StreamCase t(cudaStreamNonBlocking);
    ASSERT_EQ(cudaMemset(t.dev, 0x44, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(t.dev, 0x55, sizeof(int), t.s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&seen, t.dev, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen, pattern(0x44));
    ASSERT_EQ(cudaStreamSynchronize(t.s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&seen, t.dev, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen, pattern(0x55));
  }
}

TEST(CudaEmulator, PageableCopiesAreSynchronous) {
  SKIP_UNLESS_LAZY();
  StreamCase t(cudaStreamNonBlocking);
  int pageable = -1;
  ASSERT_EQ(cudaMemsetAsync(t.dev, 0x66, sizeof(int), t.s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&pageable, t.dev, sizeof(int), cudaMemcpyDeviceToHost, t.s), cudaSuccess);
  EXPECT_EQ(pageable, pattern(0x66)) << "a copy to pageable memory returns after it (and the stream's work before it)";
}

TEST(CudaEmulator, PoisonedDeviceMemory) {
  if (!emu::poison()) GTEST_SKIP() << "NCCLZ_EMU_POISON is off: new device memory is zeroed";
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(int)), cudaSuccess);
  int v[64];
  ASSERT_EQ(cudaMemcpy(v, d, sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int x : v) EXPECT_EQ(x, pattern(0xA5));
  ASSERT_EQ(cudaMemset(d, 0x77, sizeof v), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  // A fresh allocation of the same size takes the same place (first fit) and does not hold the
  // freed buffer's values.
  int* e = nullptr;
  ASSERT_EQ(cudaMalloc(&e, 64 * sizeof(int)), cudaSuccess);
  EXPECT_EQ(e, d);
  ASSERT_EQ(cudaMemcpy(v, e, sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int x : v) EXPECT_EQ(x, pattern(0xA5));
  ASSERT_EQ(cudaFree(e), cudaSuccess);
}

}  // namespace
