// Micro-benchmark of the Sparse coder against Rans (and Block) on mostly-zero
// int32 codes, one core: encode and decode GB/s of int32 codes (4 bytes per
// element), and the ratio, per slice of 2^18 codes; the selector's choice too
// (encode_slice / decode_slice with choice Auto). The codecs are timed
// alternately (A, B, A, B, ...) and the median (or --best: fastest) round kept.
//
//   build: cmake -S bench/cpp -B build-bench -G Ninja && cmake --build build-bench --target sparse_bench
//   run:   chrt -f 1 taskset -c 0 build-bench/sparse_bench [rounds=15] [--wall] [--best] [n=16777216]
//          build-bench/sparse_bench --blobs FILE.npy ...   (float32 .npy, C order)
//   --blobs: codec::compress blob sizes at rel 1e-2, 1e-3, 1e-4 for sparse_margin 0, 0.05,
//            0.10 (the default), 0.15 and with Sparse off (sparse_min_zeros = 2).
//
// Data ("the benchmark's sparse gradients"): each rank's float32 values are
// N(0, 1e-3) kept with probability `keep` (else 0), as ncclz.tools.bench's
// "sparse" data set (keep = 0.01); quantized as a lossy all_reduce of 4 ranks
// at rel = 1e-3 quantizes them (eb = E / 4, E = 1e-3 * (max - min), code =
// round(x / 2 eb)); the codes of `ranks` ranks summed (what a reduce-scatter
// step or the all-gather carries: 1, 2, 3 or 4 ranks' sums).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "codec/block_coder.hpp"
#include "codec/rans_coder.hpp"
#include "codec/slice.hpp"
#include "codec/sparse_coder.hpp"
#include "ncclz/codec/container.hpp"

using namespace ncclz::codec;
using ncclz_bench::g_best;
using ncclz_bench::g_wall;
using ncclz_bench::load_npy;
using ncclz_bench::now_seconds;

namespace {

constexpr size_t kSlice = size_t(1) << 18;

std::vector<int32_t> make_codes(size_t n, int ranks, double keep, uint64_t seed) {
  // eb from the global range of all 4 ranks' inputs (Gaussian: max - min ~ 2 * 5.3 sigma at 16M values).
  std::vector<std::vector<float>> x(4, std::vector<float>(n, 0.f));
  float lo = 0, hi = 0;
  for (int r = 0; r < 4; ++r) {
    std::mt19937_64 g(seed + uint64_t(r));
    std::normal_distribution<float> d(0.f, 1e-3f);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& e : x[r]) {
      const float v = d(g);
      if (u(g) < keep) e = v;
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
  }
  const double E = 1e-3 * (double(hi) - double(lo)), eb = E / 4, step = 2 * eb;
  std::vector<int32_t> q(n, 0);
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < n; ++i) q[i] += int32_t(std::llround(double(x[r][i]) / step));
  return q;
}

struct Coder {
  const char* name;
  // encode one slice into dst (cap), returns bytes; decode one slice.
  size_t (*enc)(const int32_t*, size_t, uint8_t*, size_t);
  Status (*dec)(const uint8_t*, size_t, size_t, int32_t*);
};

size_t enc_rans(const int32_t* r, size_t n, uint8_t* d, size_t c) { return rans_encode(r, n, d, c); }
Status dec_rans(const uint8_t* s, size_t l, size_t n, int32_t* o) { return rans_decode(s, l, n, o); }
size_t enc_sparse(const int32_t* r, size_t n, uint8_t* d, size_t c) { return sparse_encode(r, n, d, c); }
Status dec_sparse(const uint8_t* s, size_t l, size_t n, int32_t* o) { return sparse_decode(s, l, n, o); }
size_t enc_block(const int32_t* r, size_t n, uint8_t* d, size_t c) { return block_encode(r, n, d, c); }
Status dec_block(const uint8_t* s, size_t l, size_t n, int32_t* o) { return block_decode(s, l, n, o); }
size_t enc_auto(const int32_t* r, size_t n, uint8_t* d, size_t c) {
  SliceInfo info;
  return encode_slice(r, ElemType::I32, uint32_t(n), d, c, EncodeOptions{}, &info) == Status::Ok ? info.bytes : kNoFit;
}
Status dec_auto(const uint8_t* s, size_t l, size_t n, int32_t* o) {
  return decode_slice(s, l, ElemType::I32, uint32_t(n), o);
}

void run(const char* label, const std::vector<int32_t>& q, int rounds) {
  const size_t n = q.size(), ns = (n + kSlice - 1) / kSlice;
  size_t nz = 0;
  for (int32_t v : q) nz += v != 0;
  const Coder coders[] = {{"rans", enc_rans, dec_rans},
                          {"sparse", enc_sparse, dec_sparse},
                          {"block", enc_block, dec_block},
                          {"auto", enc_auto, dec_auto}};
  constexpr int kC = 4;
  std::vector<std::vector<uint8_t>> enc[kC];
  std::vector<size_t> len[kC];
  std::vector<double> te[kC], td[kC];
  std::vector<int32_t> out(n);
  bool ok = true;
  for (int c = 0; c < kC; ++c) {
    enc[c].assign(ns, std::vector<uint8_t>(kHeaderBytes + kSlice * 4 + 4096));
    len[c].assign(ns, 0);
  }
  for (int round = -1; round < rounds; ++round) {  // round -1: warm-up
    for (int c = 0; c < kC; ++c) {
      double a = now_seconds();
      for (size_t s = 0; s < ns; ++s) {
        const size_t o = s * kSlice, m = std::min(kSlice, n - o);
        len[c][s] = coders[c].enc(q.data() + o, m, enc[c][s].data(), enc[c][s].size());
        ok &= len[c][s] != kNoFit;
      }
      double b = now_seconds();
      if (round >= 0) te[c].push_back(b - a);
      a = now_seconds();
      for (size_t s = 0; s < ns; ++s) {
        const size_t o = s * kSlice, m = std::min(kSlice, n - o);
        ok &= coders[c].dec(enc[c][s].data(), len[c][s], m, out.data() + o) == Status::Ok;
      }
      b = now_seconds();
      if (round >= 0) td[c].push_back(b - a);
      if (round == -1) ok &= out == q;
    }
  }
  auto pick = [&](std::vector<double>& t) {
    std::sort(t.begin(), t.end());
    return g_best ? t.front() : t[t.size() / 2];
  };
  const double bytes = double(n) * 4;
  std::printf("%-22s density %6.3f%%  %zu slices of %zu%s\n", label, 100.0 * double(nz) / double(n), ns, kSlice,
              ok ? "" : "  ** ROUND-TRIP FAILURE **");
  for (int c = 0; c < kC; ++c) {
    size_t total = 0;
    for (size_t s = 0; s < ns; ++s) total += len[c][s];
    const double e = pick(te[c]), d = pick(td[c]);
    std::printf(
        "  %-7s ratio %7.2f  bytes %10zu  encode %6.2f GB/s (%5.3f ns/elem)  decode %6.2f GB/s (%5.3f ns/elem)\n",
        coders[c].name, bytes / double(total), total, bytes / e * 1e-9, e / double(n) * 1e9, bytes / d * 1e-9,
        d / double(n) * 1e9);
  }
}

void blobs(const char* path) {
  std::vector<float> x;
  std::vector<int64_t> shape;
  if (!load_npy(path, &x, &shape)) {
    std::printf("cannot read %s (float32 .npy, C order)\n", path);
    return;
  }
  const char* base = std::strrchr(path, '/');
  for (double rel : {1e-2, 1e-3, 1e-4}) {
    std::printf("%-28s rel %.0e  blob bytes:", base ? base + 1 : path, rel);
    for (double m : {0.0, 0.05, 0.10, 0.15}) {
      EncodeOptions o;
      o.sparse_margin = m;
      std::printf("  margin %.2f %9zu", m, compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(rel), o).size());
    }
    EncodeOptions off;
    off.sparse_min_zeros = 2;
    std::printf("  off %9zu\n", compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(rel), off).size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--blobs")) {
    for (int i = 2; i < argc; ++i) blobs(argv[i]);
    return 0;
  }
  int rounds = 15;
  size_t n = size_t(1) << 24;  // 64 MiB of float32: the all-reduce's size
  int a = 1;
  if (a < argc && std::isdigit(static_cast<unsigned char>(argv[a][0]))) rounds = std::atoi(argv[a++]);
  for (; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--wall"))
      g_wall = true;
    else if (!std::strcmp(argv[a], "--best"))
      g_best = true;
    else if (!std::strncmp(argv[a], "n=", 2))
      n = size_t(std::atoll(argv[a] + 2));
  }
  std::printf("Sparse vs Rans/Block/auto on int32 codes, %s of %d alternating rounds, one thread, %s time\n",
              g_best ? "best" : "median", rounds, g_wall ? "wall" : "thread CPU");
  struct Case {
    const char* label;
    int ranks;
    double keep;
  };
  const Case cases[] = {{"sparse, 1 rank", 1, 0.01},       {"sparse, 2 ranks", 2, 0.01},
                        {"sparse, 4 ranks", 4, 0.01},      {"10%: 4 ranks x 2.6%", 4, 0.026},
                        {"20%: 4 ranks x 5.4%", 4, 0.054}, {"30%: 4 ranks x 8.5%", 4, 0.085}};
  for (const Case& c : cases) run(c.label, make_codes(n, c.ranks, c.keep, 1000), rounds);
  return 0;
}
