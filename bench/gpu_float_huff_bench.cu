// Throughput of the device FloatHuff coder (ncclz/cuda_float_huff.hpp) on one
// GPU: lossless encode and decode of Gaussian bf16 and float32 (N(0,1),
// generated on the device) and of int8 bytes (round(6 N(0,1)), the byte
// variant: each byte its own symbol), next to a cudaMemcpy device-to-device of the same
// bytes, in one run; a row per kernel set (FloatHuffCoder::set_kernels: v1,
// v2, v3; v3 encodes with v2's kernels, so its encode row re-times them), each
// checked as below. The issue's target: bf16 Gaussian ratio >= 1.4 at
// >= 0.5 TB/s both ways (docs/GPU.md).
//
//   gpu_float_huff_bench [--mib 256] [--reps 10] [--warm 3] [--kernels all|v1|v2|v3|v2,v3|...] [--md out.md]
//
// --kernels: the kernel sets timed, a comma list (default all: v1, v2, v3; one
// alone, e.g. under ncu; "both" is v1,v2, as before v3).
//
// Throughput = input bytes / median time of the whole call (every kernel,
// CUDA events, after warm-up); memcpy: bytes / time. Before timing, each
// dataset's round trip is checked bit-exact and the device payload compared
// byte for byte with the CPU encoder's (codec/float_huff.hpp); a failure is
// reported and the program exits non-zero. Ratio: input bytes / (payload + a
// slice header). Built with -DNCCLZ_BUILD_GPU_BENCH=ON (tools/gpu_session.sh),
// and in the CPU emulator (tools/cuda_emu/run.sh ci, 1 MiB: checks only).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_huff.hpp"
#include "gpu_bench_util.cuh"
#include "ncclz/cuda_float_huff.hpp"

using ncclz::codec::ElemType;

namespace {

// N(0,1) by Box-Muller over hashed uniforms; bf16: rounded to nearest even;
// U8: round(6 g) clipped to int8's range, as its byte (about 4.6 bits each).
__global__ void gauss_kernel(void* x, size_t n, ElemType t) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u1 = (float(bench_hash32(2 * i) >> 8) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = float(bench_hash32(2 * i + 1) >> 8) * (1.0f / 16777216.0f);
    const float g = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    const uint32_t b = __float_as_uint(g);
    if (t == ElemType::BF16)
      static_cast<uint16_t*>(x)[i] = uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    else if (t == ElemType::U8)
      static_cast<uint8_t*>(x)[i] = uint8_t(int(fminf(127.0f, fmaxf(-128.0f, rintf(6.0f * g)))));
    else
      static_cast<uint32_t*>(x)[i] = b;
  }
}

// Whether --kernels (a comma list of v1, v2, v3; "all"; "both" = v1,v2) names version ver.
bool kernels_selected(const std::string& list, int ver) {
  if (list == "all") return true;
  if (list == "both") return ver <= 2;
  const std::string want = "v" + std::to_string(ver);
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (list.compare(at, comma - at, want) == 0) return true;
    at = comma + 1;
  }
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_ms(int warm, int reps, F&& f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(double(t));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  int reps = 10, warm = 3;
  std::string md_path, kernels = "all";
  const bool args_ok = BenchArgs()
                           .add("--mib", &mib)
                           .add("--reps", &reps)
                           .add("--warm", &warm)
                           .add("--md", &md_path)
                           .add("--kernels", &kernels)
                           .parse(argc, argv);
  if (!args_ok) return 2;
  if (!kernels_selected(kernels, 1) && !kernels_selected(kernels, 2) && !kernels_selected(kernels, 3)) {
    std::fprintf(stderr, "--kernels %s: no kernel set (all, both, or a comma list of v1, v2, v3)\n", kernels.c_str());
    return 2;
  }
  reps = std::max(1, reps);
  warm = std::max(0, warm);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t bytes = mib << 20;
  std::string md =
      "| data | kernels | values | ratio | encode GB/s | decode GB/s | memcpy D2D GB/s | same bytes as CPU |\n"
      "|---|---|---|---|---|---|---|---|\n";
  std::printf("device: %s; %zu MiB per dataset, median of %d after %d warm-up\n", prop.name, mib, reps, warm);
  int failed = 0;
  for (const ElemType t : {ElemType::BF16, ElemType::F32, ElemType::U8}) {
    const char* tname = t == ElemType::BF16 ? "bf16" : t == ElemType::U8 ? "int8" : "f32";
    const size_t n = bytes / ncclz::codec::elem_size(t);
    const size_t cap = bytes + 4096;
    void *x = nullptr, *y = nullptr, *c = nullptr;
    uint8_t* p = nullptr;
    unsigned long long* d_bytes = nullptr;
    int* d_status = nullptr;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMalloc(&p, cap));
    CK(cudaMalloc(&d_bytes, 8));
    CK(cudaMalloc(&d_status, 4));
    gauss_kernel<<<1024, 256>>>(x, n, t);
    CK(cudaGetLastError());
    ncclz::cuda::FloatHuffCoder coder(nullptr);
    CL(coder.reserve(n));
    std::vector<uint8_t> hx(bytes), hy(bytes), cpu(cap);
    CK(cudaMemcpy(hx.data(), x, bytes, cudaMemcpyDeviceToHost));
    const size_t cb = ncclz::codec::floathuff_encode(hx.data(), t, n, cpu.data(), cpu.size());
    const double cpy = time_ms(warm, reps, [&] { CK(cudaMemcpyAsync(c, x, bytes, cudaMemcpyDeviceToDevice)); });
    for (const int ver : {1, 2, 3}) {
      if (!kernels_selected(kernels, ver)) continue;
      coder.set_kernels(ver);
      CK(cudaMemset(y, 0, bytes));
      CL(coder.encode(x, t, n, p, cap, d_bytes));
      unsigned long long pb = 0;
      CK(cudaMemcpy(&pb, d_bytes, 8, cudaMemcpyDeviceToHost));
      if (pb == ~0ull) {
        std::printf("%s v%d: payload does not fit %zu bytes\n", tname, ver, cap);
        return 1;
      }
      CL(coder.decode(p, size_t(pb), t, n, y, d_status));
      int st = -1;
      CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
      // Checks: bit-exact round trip, and the CPU encoder's bytes.
      std::vector<uint8_t> hp(static_cast<size_t>(pb));
      CK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hp.data(), p, size_t(pb), cudaMemcpyDeviceToHost));
      const bool same = cb == size_t(pb) && std::memcmp(cpu.data(), hp.data(), cb) == 0;
      const bool exact = st == 0 && hx == hy;
      if (!same || !exact) {
        std::printf("%s v%d: FAILED: decode status %d, round trip %s, CPU bytes %s\n", tname, ver, st,
                    exact ? "exact" : "DIFFERS", same ? "same" : "DIFFER");
        failed = 1;
      }
      const double enc = time_ms(warm, reps, [&] { CL(coder.encode(x, t, n, p, cap, d_bytes)); });
      const double dec = time_ms(warm, reps, [&] { CL(coder.decode(p, size_t(pb), t, n, y, d_status)); });
      const double ratio = double(bytes) / double(pb + ncclz::codec::kHeaderBytes);
      char row[256];
      std::snprintf(row, sizeof row, "| Gaussian %s | v%d | %zu | %.4f | %.1f | %.1f | %.1f | %s |\n", tname, ver, n,
                    ratio, double(bytes) / enc / 1e6, double(bytes) / dec / 1e6, double(bytes) / cpy / 1e6,
                    same && exact ? "yes (round trip exact)" : "NO");
      md += row;
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(c));
    CK(cudaFree(p));
    CK(cudaFree(d_bytes));
    CK(cudaFree(d_status));
  }
  std::printf("%s", md.c_str());
  if (!md_path.empty()) {
    if (FILE* f = std::fopen(md_path.c_str(), "w")) {
      std::fprintf(f, "device: %s, %zu MiB per dataset\n\n%s", prop.name, mib, md.c_str());
      std::fclose(f);
    }
  }
  return failed;
}
