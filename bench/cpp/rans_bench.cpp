// Micro-benchmark of the Rans path on one core: the whole lossy call
// (codec::compress / decompress_into of float32 data, selector's choice or a
// forced codec+predictor) and its pieces on the integer codes of each slice
// (predict, rans_encode, rans_decode, reconstruct), in GB/s of float32 input
// (4 bytes per element), median of several runs, this thread's CPU time.
//
//   build: cmake -S bench/cpp -B build-bench -G Ninja && cmake --build build-bench
//   run:   build-bench/rans_bench [runs=9] [--wall] [--best] FILE.npy[:rel[:choice]] ...
//          choice: auto (default), lossless (FloatExp), rans, rans+lorenzo2d, rans+lorenzo3d, rans+delta1, block, ...
// The .npy files are float32, C order (bench/data/*.npy, written by bench/data.py).
// (bench/data.py caches gaussian and smooth3d as .npy; for the reanalysis field:
//  python -c "import sys; sys.path.insert(0, 'bench'); import data, numpy as np;
//             np.save('bench/data/reanalysis_65x29x49.npy', data.load('reanalysis'))")
// Uses only the public codec API plus predict/reconstruct/rans_encode/rans_decode,
// so the same source builds against older trees (before/after comparisons).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "codec/predictor.hpp"
#include "codec/quantizer.hpp"
#include "codec/rans_coder.hpp"
#include "codec/slice.hpp"
#include "ncclz/codec/container.hpp"

using namespace ncclz::codec;

namespace {

using ncclz_bench::g_best;
using ncclz_bench::g_wall;
using ncclz_bench::load_npy;
using ncclz_bench::median_seconds;
using ncclz_bench::now_seconds;

bool parse_choice(const std::string& s, EncodeOptions* opt) {
  const size_t plus = s.find('+');
  const std::string c = s.substr(0, plus), p = plus == std::string::npos ? "" : s.substr(plus + 1);
  using C = EncodeOptions::Choice;
  if (c == "auto" || c == "lossless")
    opt->choice = C::Auto;
  else if (c == "rans")
    opt->choice = C::Rans;
  else if (c == "block")
    opt->choice = C::Block;
  else
    return false;
  const char* names[] = {"none", "delta1", "delta2", "lorenzo2d", "lorenzo3d"};
  if (!p.empty()) {
    opt->predictor = -2;
    for (int i = 0; i < 5; ++i)
      if (p == names[i]) opt->predictor = i;
    if (opt->predictor == -2) return false;
  }
  return true;
}

void run_one(const std::string& spec, int runs) {
  std::string path = spec, choice = "auto";
  double rel = 1e-3;
  const size_t c1 = spec.find(':');
  if (c1 != std::string::npos) {
    path = spec.substr(0, c1);
    const size_t c2 = spec.find(':', c1 + 1);
    rel = std::atof(spec.substr(c1 + 1, c2 - c1 - 1).c_str());
    if (c2 != std::string::npos) choice = spec.substr(c2 + 1);
  }
  std::vector<float> x;
  std::vector<int64_t> shape;
  if (!load_npy(path, &x, &shape)) {
    std::printf("cannot read %s (float32 .npy)\n", path.c_str());
    return;
  }
  EncodeOptions opt;
  if (!parse_choice(choice, &opt)) {
    std::printf("bad choice %s\n", choice.c_str());
    return;
  }
  const size_t n = x.size(), fbytes = n * 4;
  const bool lossless = choice == "lossless";
  const Spec sp = lossless ? Spec::lossless() : Spec::lossy_rel(rel);
  ByteBuffer blob;
  const double te = median_seconds(runs, [&] { blob = compress(x.data(), ElemType::F32, shape, sp, opt); });
  std::vector<float> back(n);
  const double td = median_seconds(runs, [&] { decompress_into(blob.data(), blob.size(), back.data(), fbytes); });
  const BlobInfo info = inspect(blob.data(), blob.size());
  std::string picked;
  const char* cn[] = {"raw", "block", "rans", "floatexp"};
  const char* pn[] = {"", "+delta1", "+delta2", "+lorenzo2d", "+lorenzo3d"};
  for (int c = 0; c < kNumCodecs; ++c)
    for (int p = 0; p < kNumPredictors; ++p)
      if (info.by[c][p].slices) picked += std::string(cn[c]) + pn[p] + "x" + std::to_string(info.by[c][p].slices) + " ";
  double maxerr = 0;
  for (size_t i = 0; i < n; ++i) maxerr = std::max(maxerr, std::fabs(double(x[i]) - double(back[i])));
  const char* base = std::strrchr(path.c_str(), '/');
  std::printf("%-28s rel %.0e %-15s ratio %8.4f  whole: enc %6.3f dec %6.3f GB/s  %s %.4f  [%s]\n",
              base ? base + 1 : path.c_str(), lossless ? 0.0 : rel, choice.c_str(),
              double(fbytes) / double(blob.size()), double(fbytes) / te * 1e-9, double(fbytes) / td * 1e-9,
              lossless ? "maxerr" : "maxerr/eb", lossless ? maxerr : maxerr / info.grid_half_step, picked.c_str());

  // Pieces on int32 codes, per slice of info.slice_elems elements, with the
  // predictor the selector used most (or None).
  int best_p = 0;
  uint64_t best_s = 0;
  for (int p = 0; p < kNumPredictors; ++p)
    if (info.by[int(Codec::Rans)][p].slices > best_s) best_s = info.by[int(Codec::Rans)][p].slices, best_p = p;
  if (!best_s || lossless) return;  // no Rans slice: no breakdown
  const QuantGrid g = QuantGrid::from_bound(info.grid_half_step);
  std::vector<int32_t> q(n), r(n), q2(n);
  std::vector<uint64_t> outl;
  quantize(x.data(), n, g, default_code_limit<int32_t>(), q.data(), &outl);
  const uint32_t W = uint32_t(shape.back());
  const uint32_t P = shape.size() >= 2 ? uint32_t(shape[shape.size() - 1] * shape[shape.size() - 2]) : W;
  const Predictor pr = Predictor(best_p);
  const size_t S = info.slice_elems;
  const size_t ns = (n + S - 1) / S;
  std::vector<std::vector<uint8_t>> enc(ns, std::vector<uint8_t>(S * 8 + 1024));
  std::vector<size_t> len(ns);
  auto each = [&](auto&& f) {
    for (size_t s = 0; s < ns; ++s) f(s, s * S, std::min(S, n - s * S));
  };
  const double tp = median_seconds(
      runs, [&] { each([&](size_t, size_t o, size_t m) { predict(q.data() + o, m, pr, W, P, r.data() + o); }); });
  const double tre = median_seconds(runs, [&] {
    each([&](size_t s, size_t o, size_t m) { len[s] = rans_encode(r.data() + o, m, enc[s].data(), enc[s].size()); });
  });
  double tre_scalar = 0;
#if NCCLZ_BENCH_HAS_RANS_IMPL
  {  // the portable encoder, for comparison (the same bytes)
    std::vector<uint8_t> tmp(S * 8 + 1024);
    tre_scalar = median_seconds(runs, [&] {
      each([&](size_t, size_t o, size_t m) {
        rans_encode_with(RansImpl::Scalar, r.data() + o, m, tmp.data(), tmp.size());
      });
    });
  }
#endif
  bool ok = true;
  const double trd = median_seconds(runs, [&] {
    each([&](size_t s, size_t o, size_t m) {
      ok &= rans_decode(enc[s].data(), len[s], m, q2.data() + o) == Status::Ok;
    });
  });
  const double trc = median_seconds(
      runs, [&] { each([&](size_t, size_t o, size_t m) { reconstruct(q2.data() + o, m, pr, W, P, q2.data() + o); }); });
  // q2 now holds reconstruct(decode(...)) applied (runs + 1) times; redo once for the check.
  each([&](size_t s, size_t o, size_t m) {
    ok &= rans_decode(enc[s].data(), len[s], m, q2.data() + o) == Status::Ok;
    reconstruct(q2.data() + o, m, pr, W, P, q2.data() + o);
  });
  ok &= q2 == q;
  size_t total = 0;
  for (size_t s = 0; s < ns; ++s) total += len[s];
  std::printf(
      "%-28s   pieces (%s, %zu slices): predict %6.3f  rans_enc %6.3f  rans_dec %6.3f  reconstruct %6.3f GB/s"
      "  rans bytes %zu %s\n",
      "", pn[best_p][0] ? pn[best_p] + 1 : "none", ns, double(fbytes) / tp * 1e-9, double(fbytes) / tre * 1e-9,
      double(fbytes) / trd * 1e-9, double(fbytes) / trc * 1e-9, total, ok ? "ok" : "MISMATCH");
  if (tre_scalar > 0)
    std::printf("%-28s   rans_enc with RansImpl::Scalar %6.3f GB/s\n", "", double(fbytes) / tre_scalar * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 9;
  int a = 1;
  if (a < argc && std::isdigit(static_cast<unsigned char>(argv[a][0]))) runs = std::atoi(argv[a++]);
  for (; a < argc && argv[a][0] == '-'; ++a) {
    if (!std::strcmp(argv[a], "--wall")) g_wall = true;
    if (!std::strcmp(argv[a], "--best")) g_best = true;
  }
  std::printf("Rans path, %s of %d runs, one thread, %s time; GB/s of float32 input\n", g_best ? "best" : "median",
              runs, g_wall ? "wall" : "thread CPU");
  for (; a < argc; ++a) run_one(argv[a], runs);
  return 0;
}
