// Waiting on the device for another kernel (a persistent collective kernel
// waiting on its peer's FIFO flags): the pause inside a spin loop, a clock
// for deadlines, and the loads and stores of flags that another kernel (or
// the host) writes. On a GPU: __nanosleep, %globaltimer, volatile accesses
// with a fence of the scope the flag needs (device scope for memory of this
// GPU, system scope for host memory); in the CPU emulator (tools/cuda_emu)
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

/// Polls of a flag before a waiting thread starts pausing between polls: a
/// GPU thread spinning on one L2 line costs its SM little and sees a post at
/// once; after that (a long wait) it sleeps between polls.
constexpr uint32_t kBusyPolls = 2048;

/// The pause before poll number `polls` (0-based) of a flag: none for the
/// first kBusyPolls, then spin_pause. The emulator always pauses (its
/// threads are coroutines of one host thread, so a waiting one must yield).
__device__ __forceinline__ void poll_pause(uint32_t polls) {
#if defined(NCCLZ_CUDA_EMULATED)
  (void)polls;
  spin_pause();
#else
  if (polls >= kBusyPolls) spin_pause();
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
/// A volatile store of a flag (after one of the fences below).
__device__ __forceinline__ void store_volatile(uint64_t* p, uint64_t v) {
  *reinterpret_cast<volatile uint64_t*>(p) = v;
}

/// The fence between a CTA's writes (ordered before it by a __syncthreads)
/// and the flag that announces them, or between a flag seen and the reads it
/// allows: device scope where every reader and writer is on this GPU (its
/// memory, its kernels), system scope where the host or a peer device takes
/// part (host-mapped memory; far slower: it waits for the PCIe writes).
__device__ __forceinline__ void flag_fence(bool system) {
  if (system)
    __threadfence_system();
  else
    __threadfence();
}

}  // namespace ncclz::cuda::detail
