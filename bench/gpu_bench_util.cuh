// What the GPU benchmarks (gpu_codec_bench.cu, gpu_float_huff_bench.cu,
// gpu_persistent_bench.cu) share: their "--flag value" command lines,
// exiting on a CUDA or codec error with where it happened, the hash their synthetic data is made from (the same on
// every run and device), the datasets of the codec benchmarks and their range.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

/// A benchmark's command line: "--flag value" pairs, each value parsed into
/// the variable registered for its flag; an unknown flag, or one without its
/// value, is an error (parse() says so on stderr and returns false).
class BenchArgs {
 public:
  BenchArgs& add(const char* flag, size_t* v) {
    return put(flag, [v](const char* s) { *v = std::strtoull(s, nullptr, 10); });
  }
  BenchArgs& add(const char* flag, uint32_t* v) {
    return put(flag, [v](const char* s) { *v = uint32_t(std::strtoul(s, nullptr, 10)); });
  }
  BenchArgs& add(const char* flag, int* v) {
    return put(flag, [v](const char* s) { *v = std::atoi(s); });
  }
  BenchArgs& add(const char* flag, double* v) {
    return put(flag, [v](const char* s) { *v = std::atof(s); });
  }
  BenchArgs& add(const char* flag, std::string* v) {
    return put(flag, [v](const char* s) { *v = s; });
  }

  bool parse(int argc, char** argv) const {
    for (int i = 1; i < argc; i += 2) {
      const Flag* f = find(argv[i]);
      if (f == nullptr || i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s %s\n", argv[0], f ? "no value for" : "unknown argument", argv[i]);
        return false;
      }
      f->set(argv[i + 1]);
    }
    return true;
  }

 private:
  struct Flag {
    std::string name;
    std::function<void(const char*)> set;
  };
  std::vector<Flag> flags_;
  BenchArgs& put(const char* flag, std::function<void(const char*)> set) {
    flags_.push_back({flag, std::move(set)});
    return *this;
  }
  const Flag* find(const char* name) const {
    for (const Flag& f : flags_) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
};

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

/// The datasets: x[j] = element first + j of "gaussian" (kind 0: N(0,1),
/// hashed Box-Muller) or "smooth" (kind 1: a sum of slow sines).
__global__ void gen_kernel(float* x, size_t n, int kind, size_t first) {
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += size_t(gridDim.x) * blockDim.x) {
    const size_t i = first + j;
    if (kind == 0) {
      const float u1 = (bench_hash32(2 * i) + 1.0f) * 2.3283064e-10f;  // (0, 1]
      const float u2 = bench_hash32(2 * i + 1) * 2.3283064e-10f;
      x[j] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    } else {
      const double t = double(i);
      x[j] = float(sin(t * 1e-4) + 0.3 * sin(t * 7.3e-3) + 0.05 * cos(t * 0.11));
    }
  }
}

/// Order-preserving keys of the smallest and largest of n finite floats
/// (atomicMin / atomicMax into *lo = ~0u, *hi = 0 set by the caller).
__global__ void minmax_kernel(const float* x, size_t n, unsigned* lo, unsigned* hi) {
  // Order-preserving integer keys of floats (finite data only).
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const unsigned u = __float_as_uint(x[i]);
    const unsigned key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    atomicMin(lo, key);
    atomicMax(hi, key);
  }
}

/// The float of a minmax_kernel key.
inline float key_to_float(unsigned key) {
  const unsigned u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
