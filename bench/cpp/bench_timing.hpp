// Timing helpers and the .npy reader shared by the C++ micro-benchmarks.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
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

/// Minimal .npy reader: float32 ('<f4'), C order, header version 1 or 2.
inline bool load_npy(const std::string& path, std::vector<float>* x, std::vector<int64_t>* shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  char magic[8];
  f.read(magic, 8);
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) return false;
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h;
    f.read(reinterpret_cast<char*>(&h), 2);
    hlen = h;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string hdr(hlen, ' ');
  f.read(&hdr[0], hlen);
  if (hdr.find("'<f4'") == std::string::npos || hdr.find("'fortran_order': False") == std::string::npos) return false;
  const size_t a = hdr.find("'shape': (") + 10, b = hdr.find(')', a);
  shape->clear();
  size_t n = 1;
  for (size_t p = a; p < b;) {
    const size_t c = std::min(hdr.find(',', p), b);
    const std::string tok = hdr.substr(p, c - p);
    if (tok.find_first_of("0123456789") != std::string::npos) {
      shape->push_back(std::atoll(tok.c_str()));
      n *= size_t(shape->back());
    }
    p = c + 1;
  }
  x->resize(n);
  f.read(reinterpret_cast<char*>(x->data()), std::streamsize(n * 4));
  return bool(f);
}

}  // namespace ncclz_bench
