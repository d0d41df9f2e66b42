// Micro-benchmark of the lossless float coders on one core: FloatHuff
// (parallel Huffman sub-streams, the device's coder) beside FloatExp (8-lane
// rANS, the CPU's default) on the same data, float32 and bfloat16 (the
// float32 input rounded to nearest even), and bytes (int8: the input
// quantized by its largest magnitude, round(127 x / max|x|)) with FloatHuff
// beside the byte rANS frame (the CPU's coder for them), in slices of --slice values as the
// send loops code them. Ratio = input bytes / (payloads + a 24-byte header per
// slice); GB/s = input bytes / median time (this thread's CPU time; --wall:
// wall time) of encoding or decoding every slice. Every decode is checked
// bit-exact before anything is timed.
//
//   build: cmake -S bench/cpp -B build-bench -G Ninja && cmake --build build-bench --target float_huff_bench
//   run:   build-bench/float_huff_bench [--runs 7] [--slice 1048576] [--wall] NAME=FILE.npy ...
// The .npy files are float32, C order (bench/data/*.npy, written by bench/data.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "codec/block_coder.hpp"
#include "codec/float_coder.hpp"
#include "codec/float_huff.hpp"
#include "codec/rans_coder.hpp"

using namespace ncclz::codec;
using ncclz_bench::median_seconds;

namespace {

uint16_t bf16_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

struct Coder {
  const char* name;
  size_t (*enc)(const void*, ElemType, size_t, uint8_t*, size_t);
  Status (*dec)(const uint8_t*, size_t, ElemType, size_t, void*);
};

// The byte rANS frame (U8 slices' coder on the CPU) in Coder's shape.
size_t rans_bytes_enc(const void* x, ElemType, size_t n, uint8_t* dst, size_t cap) {
  return rans_encode_bytes(static_cast<const uint8_t*>(x), n, dst, cap);
}
Status rans_bytes_dec(const uint8_t* src, size_t len, ElemType, size_t n, void* out) {
  return rans_decode_bytes(src, len, n, static_cast<uint8_t*>(out));
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 7;
  size_t slice = size_t(1) << 20;
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--slice" && i + 1 < argc) {
      slice = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--wall") {
      ncclz_bench::g_wall = true;
    } else {
      const size_t eq = a.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "usage: float_huff_bench [--runs N] [--slice N] [--wall] NAME=FILE.npy ...\n");
        return 2;
      }
      files.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    }
  }
  const Coder float_coders[] = {{"FloatExp", floatexp_encode, floatexp_decode},
                                {"FloatHuff", floathuff_encode, floathuff_decode}};
  const Coder byte_coders[] = {{"Rans", rans_bytes_enc, rans_bytes_dec},
                               {"FloatHuff", floathuff_encode, floathuff_decode}};
  std::printf("| data | type | values | coder | ratio | encode GB/s | decode GB/s |\n|---|---|---|---|---|---|---|\n");
  int failed = 0;
  for (const auto& [name, path] : files) {
    std::vector<float> x;
    std::vector<int64_t> shape;
    if (!ncclz_bench::load_npy(path, &x, &shape)) {
      std::fprintf(stderr, "cannot read %s (float32 .npy)\n", path.c_str());
      return 2;
    }
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_of(x[i]);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    std::vector<uint8_t> x8(x.size());
    for (size_t i = 0; i < x.size(); ++i) x8[i] = uint8_t(int8_t(std::lround(amax > 0 ? 127.0f * x[i] / amax : 0.0f)));
    for (const ElemType t : {ElemType::BF16, ElemType::F32, ElemType::U8}) {
      const size_t n = x.size(), es = elem_size(t), bytes = n * es;
      const uint8_t* in = t == ElemType::F32  ? reinterpret_cast<const uint8_t*>(x.data())
                          : t == ElemType::U8 ? x8.data()
                                              : reinterpret_cast<const uint8_t*>(xb.data());
      const size_t ns = (n + slice - 1) / slice;
      for (const Coder& c : t == ElemType::U8 ? byte_coders : float_coders) {
        std::vector<std::vector<uint8_t>> out(ns);
        std::vector<size_t> got(ns);
        std::vector<uint8_t> back(bytes);
        size_t total = 0;
        for (size_t s = 0; s < ns; ++s) {
          const size_t m = std::min(slice, n - s * slice);
          out[s].resize(m * es + 4096);
          got[s] = c.enc(in + s * slice * es, t, m, out[s].data(), out[s].size());
          if (got[s] == kNoFit) {
            std::fprintf(stderr, "%s %s: no fit\n", name.c_str(), c.name);
            return 1;
          }
          total += got[s] + kHeaderBytes;
          if (c.dec(out[s].data(), got[s], t, m, back.data() + s * slice * es) != Status::Ok) failed = 1;
        }
        if (std::memcmp(back.data(), in, bytes) != 0) {
          std::fprintf(stderr, "%s %s: round trip differs\n", name.c_str(), c.name);
          failed = 1;
        }
        const double te = median_seconds(runs, [&] {
          for (size_t s = 0; s < ns; ++s) {
            const size_t m = std::min(slice, n - s * slice);
            c.enc(in + s * slice * es, t, m, out[s].data(), out[s].size());
          }
        });
        const double td = median_seconds(runs, [&] {
          for (size_t s = 0; s < ns; ++s) {
            const size_t m = std::min(slice, n - s * slice);
            c.dec(out[s].data(), got[s], t, m, back.data() + s * slice * es);
          }
        });
        std::printf("| %s | %s | %zu | %s | %.4f | %.3f | %.3f |\n", name.c_str(),
                    t == ElemType::F32  ? "f32"
                    : t == ElemType::U8 ? "int8"
                                        : "bf16",
                    n, c.name, double(bytes) / double(total), double(bytes) / te / 1e9, double(bytes) / td / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return failed;
}
