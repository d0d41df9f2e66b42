// Micro-benchmark of the Block coder on one core: encode, exact size and
// decode throughput in GB/s of residual input (4 or 8 bytes per residual),
// median of several runs, for each implementation and a few distributions.
//
//   build: cmake -S bench/cpp -B build-bench && cmake --build build-bench
//   run:   build-bench/block_bench [MiB=32] [runs=9] [--wall]
// Times are this thread's CPU time unless --wall is given.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "bench_timing.hpp"
#include "codec/block_coder.hpp"

using namespace ncclz::codec;

namespace {

// Timed in this thread's CPU time: on a shared machine wall time mostly
// measures the other processes (the median of wall times is printed with --wall).
using ncclz_bench::g_wall;
using ncclz_bench::median_seconds;
using ncclz_bench::now_seconds;

template <class Code>
std::vector<Code> make(const char* dist, size_t n) {
  std::mt19937_64 rng(1);
  std::vector<Code> v(n);
  if (!std::strcmp(dist, "gauss50") || !std::strcmp(dist, "gauss1") || !std::strcmp(dist, "gauss5000")) {
    const double s = !std::strcmp(dist, "gauss1") ? 1 : !std::strcmp(dist, "gauss50") ? 50 : 5000;
    std::normal_distribution<double> g(0, s);
    for (auto& x : v) x = Code(std::lround(g(rng)));
  } else if (!std::strcmp(dist, "zeros")) {
  } else if (!std::strcmp(dist, "sparse1pct")) {
    // 1% nonzero residuals (gauss 50): most blocks are still nonzero.
    std::normal_distribution<double> g(0, 50);
    for (auto& x : v)
      if (rng() % 100 == 0) x = Code(std::lround(g(rng)));
  } else if (!std::strcmp(dist, "zeroblocks90")) {
    // 90% of the blocks all zero, the rest gauss 50 (sparse gradients).
    std::normal_distribution<double> g(0, 50);
    for (size_t b = 0; b < n; b += 32)
      if (rng() % 10 == 0)
        for (size_t i = b; i < std::min(n, b + 32); ++i) v[i] = Code(std::lround(g(rng)));
  }
  return v;
}

template <class Code>
void bench(const char* dist, size_t bytes, int runs) {
  const size_t n = bytes / sizeof(Code);
  const auto r = make<Code>(dist, n);
  std::vector<uint8_t> enc(block_count(n) * (1 + block_max_payload<Code>()));
  std::vector<Code> back(n);
  for (BlockImpl impl : {BlockImpl::Scalar, BlockImpl::Avx2}) {
    if (!block_impl_available(impl)) continue;
    size_t len = 0;
    const double te = median_seconds(runs, [&] { len = block_encode_with(impl, r.data(), n, enc.data(), enc.size()); });
    size_t sz = 0;
    const double ts = median_seconds(runs, [&] { sz = block_encoded_bytes_with(impl, r.data(), n); });
    Status st = Status::Ok;
    const double td = median_seconds(runs, [&] { st = block_decode_with(impl, enc.data(), len, n, back.data()); });
    const bool ok = st == Status::Ok && sz == len && back == r;
    std::printf("%-6s %-13s %-6s ratio %6.2f  encode %6.2f GB/s  size %6.2f GB/s  decode %6.2f GB/s  %s\n",
                sizeof(Code) == 4 ? "int32" : "int64", dist, impl == BlockImpl::Scalar ? "scalar" : "avx2",
                double(n * sizeof(Code)) / double(len), double(n * sizeof(Code)) / te * 1e-9,
                double(n * sizeof(Code)) / ts * 1e-9, double(n * sizeof(Code)) / td * 1e-9, ok ? "ok" : "MISMATCH");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 32;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 9;
  g_wall = argc > 3 && !std::strcmp(argv[3], "--wall");
  const size_t bytes = mib << 20;
  std::printf("Block coder, %zu MiB of residuals, median of %d runs, one thread, %s time\n", mib, runs,
              g_wall ? "wall" : "thread CPU");
  for (const char* d : {"gauss50", "gauss1", "gauss5000", "zeros", "zeroblocks90", "sparse1pct"})
    bench<int32_t>(d, bytes, runs);
  for (const char* d : {"gauss50", "zeros"}) bench<int64_t>(d, bytes, runs);
  return 0;
}
