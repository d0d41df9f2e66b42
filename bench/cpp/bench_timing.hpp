// Timing helpers shared by the C++ micro-benchmarks.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace ncclz_bench {

/// Wall time instead of this thread's CPU time (--wall).
inline bool g_wall = false;
/// The fastest run instead of the median (--best; a noisy shared machine).
inline bool g_best = false;

/// This thread's CPU time (not counting time other processes take), or wall time with g_wall.
inline double now_seconds() {
  if (g_wall) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Median (or, with g_best, fastest) of `runs` timed calls of f after one warm-up call.
template <class F>
double median_seconds(int runs, F&& f) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < runs; ++i) {
    const double a = now_seconds();
    f();
    t.push_back(now_seconds() - a);
  }
  std::sort(t.begin(), t.end());
  return g_best ? t.front() : t[t.size() / 2];
}

}  // namespace ncclz_bench
