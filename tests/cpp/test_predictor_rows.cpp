// predict() / reconstruct() / reconstruct_portable() (row loops for
// Lorenzo2D/3D, straight loops for Delta1/2, AVX2 running sums for int32
// reconstruction) against the generic per-element definition predict_at(), over
// many shapes (partial rows and planes, W = 1, P = W), both code types, wide
// values that wrap, in place and out of place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "codec/predictor.hpp"

using namespace ncclz::codec;

namespace {

template <class Code>
std::vector<Code> codes(size_t n, int kind, std::mt19937_64& rng) {
  std::vector<Code> q(n);
  std::normal_distribution<double> g(0, 30);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: q[i] = Code(std::llround(g(rng))); break;                      // small noise
      case 1: q[i] = Code(rng()); break;                                     // full range: wraps
      case 2: q[i] = Code(int64_t(i % 97) * 1000 + int64_t(i / 97)); break;  // smooth ramp
      default: q[i] = (rng() & 1) ? std::numeric_limits<Code>::max() : std::numeric_limits<Code>::min(); break;
    }
  }
  return q;
}

template <class Code>
void check(size_t n, Predictor p, uint32_t W, uint32_t P, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto q = codes<Code>(n, kind, rng);
  std::vector<Code> want(n), r(n, Code(0x5A)), back(n, Code(0x33));
  predict_range(q.data(), 0, n, p, W, P, want.data());
  predict(q.data(), n, p, W, P, r.data());
  ASSERT_EQ(r, want) << "predict p=" << int(p) << " n=" << n << " W=" << W << " P=" << P << " kind=" << kind;
  reconstruct(r.data(), n, p, W, P, back.data());  // out of place
  ASSERT_EQ(back, q) << "reconstruct p=" << int(p) << " n=" << n << " W=" << W << " P=" << P;
  std::vector<Code> port(n, Code(0x11));
  reconstruct_portable(r.data(), n, p, W, P, port.data());  // without the AVX2 row kernels
  ASSERT_EQ(port, q) << "reconstruct_portable p=" << int(p) << " n=" << n << " W=" << W << " P=" << P;
  reconstruct(r.data(), n, p, W, P, r.data());  // in place
  ASSERT_EQ(r, q) << "reconstruct in place p=" << int(p) << " n=" << n << " W=" << W << " P=" << P;
}

template <class Code>
void sweep() {
  uint64_t seed = 1;
  const uint32_t Ws[] = {1, 2, 3, 7, 8, 9, 10, 16, 17, 31, 64, 100};  // rows shorter and longer than a vector
  const size_t extra[] = {0, 1, 5};
  for (int kind = 0; kind < 4; ++kind) {
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(17), size_t(1000)}) {
      check<Code>(n, Predictor::None, 0, 0, kind, seed++);
      check<Code>(n, Predictor::Delta1, 0, 0, kind, seed++);
      check<Code>(n, Predictor::Delta2, 0, 0, kind, seed++);
    }
    for (uint32_t W : Ws) {
      for (size_t rows : {size_t(0), size_t(1), size_t(2), size_t(5)})
        for (size_t e : extra) check<Code>(rows * W + e, Predictor::Lorenzo2D, W, 0, kind, seed++);
      for (uint32_t H : {1u, 2u, 3u, 5u}) {
        const uint32_t P = W * H;
        for (size_t planes : {size_t(0), size_t(1), size_t(2), size_t(4)})
          for (size_t e : {size_t(0), size_t(1), size_t(W), size_t(W + 3)})
            check<Code>(planes * P + e, Predictor::Lorenzo3D, W, P, kind, seed++);
      }
    }
  }
}

}  // namespace

TEST(PredictorRows, MatchesGenericInt32) { sweep<int32_t>(); }
TEST(PredictorRows, MatchesGenericInt64) { sweep<int64_t>(); }
