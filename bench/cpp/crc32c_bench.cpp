// CRC-32C throughput (base/crc32c.hpp): the version this CPU runs and the
// portable table version, on a buffer that stays in cache (a 1 MiB slot) and
// on one that does not (64 MiB), beside memcpy of the same bytes.
//
//   cmake -S bench/cpp -B build-bench -G Ninja && cmake --build build-bench
//   build-bench/crc32c_bench [--wall] [--best]
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/crc32c.hpp"
#include "bench_timing.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--wall")) ncclz_bench::g_wall = true;
    if (!std::strcmp(argv[i], "--best")) ncclz_bench::g_best = true;
  }
  std::printf("crc32c version on this CPU: %s\n", ncclz::base::crc32c_impl());
  std::printf("%10s %14s %14s %14s\n", "bytes", "crc32c GB/s", "table GB/s", "memcpy GB/s");
  for (size_t n : {size_t(4) << 10, size_t(1) << 20, size_t(64) << 20}) {
    std::vector<uint8_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) a[i] = uint8_t(i * 2654435761u >> 13);
    volatile uint32_t sink = 0;
    const int reps = n >= (size_t(64) << 20) ? 5 : 200;
    const int inner = n <= (size_t(4) << 10) ? 256 : 1;
    auto gbs = [&](double s) { return double(n) * inner / s / 1e9; };
    const double hw = ncclz_bench::median_seconds(reps, [&] {
      for (int k = 0; k < inner; ++k) sink = sink + ncclz::base::crc32c(a.data(), n);
    });
    const double tab = ncclz_bench::median_seconds(reps / 5 + 1, [&] {
      for (int k = 0; k < inner; ++k) sink = sink + ncclz::base::crc32c_portable(a.data(), n);
    });
    const double cp = ncclz_bench::median_seconds(reps, [&] {
      for (int k = 0; k < inner; ++k) std::memcpy(b.data(), a.data(), n);
    });
    std::printf("%10zu %14.2f %14.2f %14.2f\n", n, gbs(hw), gbs(tab), gbs(cp));
  }
  return 0;
}
