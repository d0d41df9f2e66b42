// The persistent ring all_reduce (ncclz/cuda_persistent.hpp) of N ranks as
// threads of one process on one GPU (each rank its own stream and FIFOs,
// one kernel per call and rank), next to a cudaMemcpy device-to-device of
// one rank's buffer, in one run.
//
//   gpu_persistent_bench [--mib 64] [--ranks 4] [--channels 8] [--slot-kib 1024]
//                        [--slots 4] [--rel 1e-3] [--reps 5] [--warm 2] [--md out.md]
//
// Data: per rank, --mib MiB of float32 ("gaussian" and "smooth",
// bench/gpu_bench_util.cuh, rank r's the elements after rank r-1's),
// quantized on the device (DeviceCodec::quantize_async) to int32 codes on
// the grid of half step rel * (max - min) of rank 0's data. Rows per dataset:
//   coded none / delta1  the codes, Block with that predictor in the FIFOs
//   raw int32            the same codes uncompressed (the slots hold the values)
//   raw float32          the floats themselves summed in float32 (an
//                        uncompressed all_reduce of the original data)
// Time: wall clock from the moment every rank's thread is released (a
// barrier) to the last rank's synchronize(), median of --reps after --warm.
// Bus bandwidth as NCCL reports it: 2 (N - 1) / N * bytes / time. Ratio:
// rank 0's codes in slices of the slot (encode_slices_async with that
// predictor), raw bytes / coded bytes. Checks before timing: every rank's
// result equals the exact wrapping sum of the codes (coded and raw int32),
// or every rank's floats are identical bit for bit (raw float32); a failed
// check exits non-zero. Built with -DNCCLZ_BUILD_GPU_BENCH=ON
// (tools/gpu_session.sh, phase bench); its checks run in the CPU emulator
// (tools/cuda_emu/run.sh ci, 1 MiB; its timings mean nothing there).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_bench_util.cuh"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_persistent.hpp"

using ncclz::codec::ElemType;
using ncclz::codec::Predictor;
namespace nc = ncclz::cuda;

namespace {

// out[i] += x[i] (wrapping int32): the expected sum.
__global__ void add_kernel(int32_t* out, const int32_t* x, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = int32_t(uint32_t(out[i]) + uint32_t(x[i]));
}
// Counts the 4-byte words where a and b differ.
__global__ void diff_kernel(const uint32_t* a, const uint32_t* b, size_t n, unsigned long long* nd) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(nd, 1ull);
}

struct Mode {
  const char* name;
  bool coded;
  ElemType type;
  Predictor pred;
};

struct Row {
  std::string data, mode;
  double ms = 0, ratio = 1;
  bool ok = false;
};

unsigned long long count_diff(const void* a, const void* b, size_t bytes, unsigned long long* d_nd) {
  CK(cudaMemset(d_nd, 0, 8));
  diff_kernel<<<1024, 256>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), bytes / 4, d_nd);
  CK(cudaGetLastError());
  unsigned long long nd = 0;
  CK(cudaMemcpy(&nd, d_nd, 8, cudaMemcpyDeviceToHost));
  return nd;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 64, slot_kib = 1024;
  int N = 4, channels = 8, slots = 4, reps = 5, warm = 2;
  double rel = 1e-3;
  std::string md_path;
  const bool args_ok = BenchArgs()
                           .add("--mib", &mib)
                           .add("--ranks", &N)
                           .add("--channels", &channels)
                           .add("--slot-kib", &slot_kib)
                           .add("--slots", &slots)
                           .add("--rel", &rel)
                           .add("--reps", &reps)
                           .add("--warm", &warm)
                           .add("--md", &md_path)
                           .parse(argc, argv);
  if (!args_ok) return 2;
  N = std::max(1, N);
  channels = std::max(1, channels);
  reps = std::max(1, reps);
  warm = std::max(0, warm);
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  const size_t n = mib * (size_t(1) << 20) / 4, bytes = n * 4, slot = slot_kib * 1024;
  std::printf("device: %s, %d SMs; %d ranks as threads, %d channel(s) each, %zu MiB per rank, slots %d x %zu KiB\n",
              prop.name, prop.multiProcessorCount, N, channels, mib, slots, slot_kib);

  // Per rank: floats, codes, output; the expected sums; scratch.
  std::vector<float*> x(static_cast<size_t>(N), nullptr);
  std::vector<int32_t*> q(static_cast<size_t>(N), nullptr);
  std::vector<void*> y(static_cast<size_t>(N), nullptr);
  int32_t* want = nullptr;
  unsigned* mm = nullptr;
  unsigned long long* nd = nullptr;
  uint64_t* outliers = nullptr;
  for (int r = 0; r < N; ++r) {
    CK(cudaMalloc(&x[size_t(r)], bytes));
    CK(cudaMalloc(&q[size_t(r)], bytes));
    CK(cudaMalloc(&y[size_t(r)], bytes));
  }
  CK(cudaMalloc(&want, bytes));
  CK(cudaMalloc(&mm, 8));
  CK(cudaMalloc(&nd, 8));
  CK(cudaMalloc(&outliers, 8));
  const size_t L = std::max<size_t>(1, (slot - 24) / 4), S = (n + L - 1) / L;
  uint8_t* slices = nullptr;
  uint64_t* sizes = nullptr;
  int* status = nullptr;
  CK(cudaMalloc(&slices, S * slot));
  CK(cudaMalloc(&sizes, S * 8));
  CK(cudaMalloc(&status, S * 4));
  nc::DeviceCodec codec(nullptr);

  // The D2D copy of one rank's buffer.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> tc;
  for (int i = 0; i < warm + reps; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpy(y[0], x[0], bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= warm) tc.push_back(ms);
  }
  std::sort(tc.begin(), tc.end());
  const double copy_ms = tc[tc.size() / 2];
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::printf("cudaMemcpy D2D %zu MiB: %.3f ms = %.0f GB/s\n", mib, copy_ms, bytes / copy_ms / 1e6);

  const Mode modes[] = {{"coded none", true, ElemType::I32, Predictor::None},
                        {"coded delta1", true, ElemType::I32, Predictor::Delta1},
                        {"raw int32", false, ElemType::I32, Predictor::None},
                        {"raw float32", false, ElemType::F32, Predictor::None}};
  std::vector<Row> rows;
  bool all_ok = true;
  for (int kind = 0; kind < 2; ++kind) {
    const char* data = kind == 0 ? "gaussian" : "smooth";
    for (int r = 0; r < N; ++r) {
      gen_kernel<<<4096, 256>>>(x[size_t(r)], n, kind, size_t(r) * n);
      CK(cudaGetLastError());
    }
    const unsigned init[2] = {0xffffffffu, 0u};
    CK(cudaMemcpy(mm, init, 8, cudaMemcpyHostToDevice));
    minmax_kernel<<<4096, 256>>>(x[0], n, mm, mm + 1);
    CK(cudaGetLastError());
    unsigned keys[2];
    CK(cudaMemcpy(keys, mm, 8, cudaMemcpyDeviceToHost));
    const double eb = rel * (double(key_to_float(keys[1])) - double(key_to_float(keys[0])));
    CK(cudaMemset(want, 0, bytes));
    for (int r = 0; r < N; ++r) {
      CL(codec.quantize_async(x[size_t(r)], ElemType::F32, n, eb, int64_t(1) << 24, q[size_t(r)], ElemType::I32,
                              outliers, nullptr, 0));
      add_kernel<<<4096, 256>>>(want, q[size_t(r)], n);
      CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    for (const Mode& m : modes) {
      Row row;
      row.data = data;
      row.mode = m.name;
      if (m.coded) {
        CL(codec.encode_slices_async(q[0], ElemType::I32, n, uint32_t(L), m.pred, 0, 0, slices, slot, sizes, status));
        CK(cudaDeviceSynchronize());
        std::vector<uint64_t> sz(S);
        CK(cudaMemcpy(sz.data(), sizes, S * 8, cudaMemcpyDeviceToHost));
        uint64_t coded = 0;
        for (uint64_t v : sz) coded += v;
        row.ratio = double(bytes) / double(coded);
      }
      nc::RingAbort abort;
      CK(cudaError_t(abort.status()));
      std::vector<std::unique_ptr<nc::PersistentRing>> rings;
      for (int r = 0; r < N; ++r) {
        nc::PersistentRing::Options o;
        o.rank = r;
        o.nranks = N;
        o.channels = channels;
        o.type = m.type;
        o.coded = m.coded;
        o.predictor = m.pred;
        o.slot_bytes = slot;
        o.slots = slots;
        o.timeout_ns = 20'000'000'000ull;
        rings.push_back(std::make_unique<nc::PersistentRing>(o, &abort));
        CL(rings.back()->status());
      }
      for (int r = 0; r < N; ++r) rings[size_t(r)]->connect(rings[size_t((r + 1) % N)]->fifo());
      // One call of every rank at once, timed from the release of the threads.
      auto call = [&]() {
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<int> rc(size_t(N), -1);
        std::vector<std::chrono::steady_clock::time_point> done(static_cast<size_t>(N));
        std::vector<std::thread> ts;
        for (int r = 0; r < N; ++r) {
          ts.emplace_back([&, r] {
            const void* src = m.type == ElemType::F32 ? static_cast<const void*>(x[size_t(r)]) : q[size_t(r)];
            ++ready;
            while (!go.load()) std::this_thread::yield();
            int e = rings[size_t(r)]->all_reduce_async(src, y[size_t(r)], n);
            nc::RingReport rep;
            if (e == 0) e = rings[size_t(r)]->synchronize(&rep);
            if (e != 0)
              std::fprintf(stderr, "rank %d: error %d (ring error %d, codec status %d, peer %d, step %u)\n", r, e,
                           rep.error, rep.codec_status, rep.peer, rep.step);
            rc[size_t(r)] = e;
            done[size_t(r)] = std::chrono::steady_clock::now();
          });
        }
        while (ready.load() < N) std::this_thread::yield();
        const auto t0 = std::chrono::steady_clock::now();
        go = true;
        for (auto& t : ts) t.join();
        for (int e : rc)
          if (e != 0) std::exit(2);
        const auto t1 = *std::max_element(done.begin(), done.end());
        return std::chrono::duration<double, std::milli>(t1 - t0).count();
      };
      call();
      bool ok = true;
      for (int r = 0; r < N; ++r) {
        const unsigned long long d = m.type == ElemType::F32 ? count_diff(y[size_t(r)], y[0], bytes, nd)
                                                             : count_diff(y[size_t(r)], want, bytes, nd);
        if (d)
          std::printf("  rank %d: %llu elements differ from the %s\n", r, d,
                      m.type == ElemType::F32 ? "rank 0's" : "exact sum");
        ok &= d == 0;
      }
      row.ok = ok;
      all_ok &= ok;
      std::vector<double> t;
      for (int i = 0; i < warm; ++i) call();
      for (int i = 0; i < reps; ++i) t.push_back(call());
      std::sort(t.begin(), t.end());
      row.ms = t[t.size() / 2];
      const double busbw = 2.0 * (N - 1) / N * double(bytes) / row.ms / 1e6;
      std::printf("%-8s %-12s ratio %6.2f check %s | all_reduce %.3f ms, bus %.0f GB/s, %.2fx the D2D copy's time\n",
                  data, m.name, row.ratio, ok ? "ok" : "FAILED", row.ms, busbw, row.ms / copy_ms);
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  if (!md_path.empty()) {
    if (FILE* f = std::fopen(md_path.c_str(), "w")) {
      std::fprintf(f,
                   "Persistent ring all_reduce, %s, %d ranks as threads x %d channels, %zu MiB int32/float32 per rank, "
                   "slots %d x %zu KiB, rel %g; D2D copy %.3f ms\n\n",
                   prop.name, N, channels, mib, slots, slot_kib, rel, copy_ms);
      std::fprintf(f, "| data | mode | check | ratio | ms | bus GB/s | / D2D copy |\n|---|---|---|---|---|---|---|\n");
      for (const Row& r : rows)
        std::fprintf(f, "| %s | %s | %s | %.2f | %.3f | %.0f | %.2f |\n", r.data.c_str(), r.mode.c_str(),
                     r.ok ? "ok" : "FAILED", r.ratio, r.ms, 2.0 * (N - 1) / N * double(bytes) / r.ms / 1e6,
                     r.ms / copy_ms);
      std::fclose(f);
    }
  }
  for (int r = 0; r < N; ++r) {
    cudaFree(x[size_t(r)]);
    cudaFree(q[size_t(r)]);
    cudaFree(y[size_t(r)]);
  }
  cudaFree(want);
  cudaFree(slices);
  cudaFree(sizes);
  cudaFree(status);
  cudaFree(mm);
  cudaFree(nd);
  cudaFree(outliers);
  std::printf(all_ok ? "all checks passed\n" : "CHECK FAILED\n");
  return all_ok ? 0 : 1;
}
