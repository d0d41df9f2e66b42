// Waiting on the device for another kernel (a persistent collective kernel
// waiting on its peer's FIFO counters): the pause inside a spin loop, a
// clock for deadlines, and the loads and stores of counters that another
// kernel (or the host) writes. On a GPU: __nanosleep, %globaltimer, volatile
// accesses with __threadfence_system; in the CPU emulator (tools/cuda_emu)
// the pause yields the waiting coroutine and, after the round, the host
// thread, so a rank's kernel waiting on another rank's (another host
// thread's) makes progress there too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ncclz::cuda::detail {

/// One pause of a spin-wait loop (about 100 ns on a GPU).
__device__ __forceinline__ void spin_pause() {
#if defined(NCCLZ_CUDA_EMULATED) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700)
  __nanosleep(100);
#endif
}

/// Nanoseconds of a clock common to every SM (%globaltimer; the emulator:
/// CLOCK_MONOTONIC), for deadlines.
__device__ __forceinline__ uint64_t global_ns() {
#if defined(NCCLZ_CUDA_EMULATED)
  return emu::now_ns();
#elif defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return 0;
#endif
}

/// A counter written by another kernel or the host, read afresh.
__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) {
  return *reinterpret_cast<const volatile uint64_t*>(p);
}
__device__ __forceinline__ int load_volatile(const int* p) { return *reinterpret_cast<const volatile int*>(p); }
/// Publishes v at p after every earlier write of this thread (the data a
/// counter announces) is visible system-wide: a fence, then a volatile store.
__device__ __forceinline__ void store_release(uint64_t* p, uint64_t v) {
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(p) = v;
}

}  // namespace ncclz::cuda::detail
