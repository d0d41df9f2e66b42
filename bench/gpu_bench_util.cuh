// What the GPU benchmarks (gpu_codec_bench.cu, gpu_float_huff_bench.cu)
// share: exiting on a CUDA or codec error with where it happened, and the
// hash their synthetic data is made from (the same on every run and device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

/// A CUDA call that must succeed (else: the call and its error, exit 2).
#define CK(expr)                                                                                  \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)
/// A codec call that must return 0 (else: the call and its value, exit 2).
#define CL(expr)                                                                      \
  do {                                                                                \
    const int r_ = (expr);                                                            \
    if (r_ != 0) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, r_); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

/// 32 well-mixed bits of x (a 64-bit finaliser).
__device__ inline uint32_t bench_hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}
