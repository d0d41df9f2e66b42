// Interp layout of lossy blobs (codec/interp_codec.hpp, docs/FORMAT.md "Interp layout"):
//   - interp_quantize / interp_reconstruct: every element visited once, the
//     decoder rebuilds exactly the encoder's codes, every finite element within
//     the bound after rounding to its type, for shapes from 0-d to 5-D (odd
//     sizes, size-1 and size-0 dims, sizes below a level), every float type,
//     every grid factor, smooth and noisy data, NaN/Inf and huge values;
//   - the container: forced and automatic interp layout, inspect(), smaller
//     blobs on smooth data, classic blobs on noise;
//   - corrupt interp blobs (truncations, bit flips, header bytes) throw
//     CorruptData or decode to something; never crash (run under ASan);
//     the decoder accepts any residual values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/interp_codec.hpp"
#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "ncclz/codec/container.hpp"
#include "ncclz/error.hpp"
#include "test_corrupt.hpp"

using namespace ncclz::codec;

namespace {

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

const std::vector<std::vector<int64_t>> kShapes = {{},
                                                   {0},
                                                   {1},
                                                   {2},
                                                   {3},
                                                   {5},
                                                   {8},
                                                   {9},
                                                   {1000},
                                                   {4097},
                                                   {0, 4},
                                                   {4, 0, 3},
                                                   {1, 1},
                                                   {1, 7},
                                                   {7, 1},
                                                   {2, 2},
                                                   {3, 5},
                                                   {17, 33},
                                                   {64, 65},
                                                   {1, 1, 65},
                                                   {64, 1, 3},
                                                   {4, 9, 6},
                                                   {5, 5, 5},
                                                   {16, 16, 16},
                                                   {13, 2, 27},
                                                   {2, 3, 4, 5},
                                                   {3, 1, 4, 1, 5},
                                                   {2, 2, 2, 2, 2}};

enum class Dist { Smooth, Noise, Specials, Huge, Constant };

/// Values as doubles: smooth in every coordinate, noise, or smooth with
/// non-finite and huge values mixed in.
std::vector<double> make_values(const std::vector<int64_t>& shape, Dist dist, uint32_t seed) {
  const size_t n = numel(shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    size_t r = i;
    double s = 0;
    for (size_t e = shape.size(); e-- > 0;) {
      const double c = double(r % size_t(shape[e])) / double(shape[e]);
      r /= size_t(shape[e]);
      s += std::sin(6.0 * c + double(e)) * (1.0 + 0.3 * double(e));
    }
    switch (dist) {
      case Dist::Smooth: v[i] = 3 * s; break;
      case Dist::Noise: v[i] = normal(rng); break;
      case Dist::Constant: v[i] = 1.5; break;
      case Dist::Specials: {
        v[i] = s;
        const uint64_t k = rng() % 16;
        if (k == 0) v[i] = std::numeric_limits<double>::quiet_NaN();
        if (k == 1) v[i] = std::numeric_limits<double>::infinity();
        if (k == 2) v[i] = -std::numeric_limits<double>::infinity();
        break;
      }
      case Dist::Huge: v[i] = (rng() % 8 == 0) ? (rng() % 2 ? 1e30 : -3e29) : s; break;
    }
  }
  return v;
}

template <class T>
T to_type(double d) {
  if constexpr (std::is_same_v<T, float>) {
    return float(d);
  } else if constexpr (std::is_same_v<T, double>) {
    return d;
  } else {
    return from_double<T>(d);
  }
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Encodes with interp_quantize, decodes with interp_reconstruct, checks every element.
template <class T>
void check_direct(const std::vector<int64_t>& shape, Dist dist, int log2k, double eb, uint32_t seed) {
  const size_t n = numel(shape);
  const auto v = make_values(shape, dist, seed);
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = to_type<T>(v[i]);
  const std::vector<uint64_t> dims(shape.begin(), shape.end());
  const QuantGrid g = QuantGrid::from_bound(eb);
  std::vector<int32_t> resid(n, int32_t(0x5A5A5A5A));
  std::vector<uint64_t> outliers;
  const int64_t limit = int64_t(1) << 29;
  const size_t m = interp_quantize(x.data(), dims, g, log2k, eb, limit, resid.data(), &outliers);
  ASSERT_EQ(m, outliers.size());
  std::vector<int32_t> q(n, 0);
  interp_reconstruct(resid.data(), dims, q.data());
  std::vector<bool> is_outlier(n, false);
  for (uint64_t i : outliers) {
    ASSERT_LT(i, n);
    ASSERT_FALSE(is_outlier[size_t(i)]) << "outlier reported twice";
    is_outlier[size_t(i)] = true;
  }
  const double d = g.step / double(int64_t(1) << log2k);
  const std::string what = "ndim " + std::to_string(shape.size()) + " n " + std::to_string(n) + " log2k " +
                           std::to_string(log2k) + " dist " + std::to_string(int(dist));
  for (size_t i = 0; i < n; ++i) {
    const double xv = to_double(x[i]);
    ASSERT_LE(std::llabs(q[i]), limit) << what;
    if (is_outlier[i]) continue;
    ASSERT_TRUE(std::isfinite(xv)) << what << ": non-finite element " << i << " not an outlier";
    const double y = to_double(from_double<T>(double(q[i]) * d));
    ASSERT_LE(std::fabs(xv - y), eb) << what << ": element " << i;
  }
}

template <class T>
void check_direct_all(int& failures_guard) {
  uint32_t seed = 1;
  for (const auto& shape : kShapes)
    for (Dist dist : {Dist::Smooth, Dist::Noise, Dist::Specials, Dist::Huge, Dist::Constant})
      for (int log2k : {1, 3, 6}) {
        check_direct<T>(shape, dist, log2k, 1e-2, seed++);
        if (::testing::Test::HasFatalFailure()) {
          ++failures_guard;
          return;
        }
      }
}

}  // namespace

TEST(Interp, DirectRoundTripEveryTypeShapeAndGrid) {
  int stop = 0;
  check_direct_all<float>(stop);
  if (stop) return;
  check_direct_all<double>(stop);
  if (stop) return;
  check_direct_all<F16>(stop);
  if (stop) return;
  check_direct_all<Bf16>(stop);
}

TEST(Interp, SmoothDataGivesMostlyZeroResiduals) {
  const std::vector<int64_t> shape = {32, 48, 40};
  const auto v = make_values(shape, Dist::Smooth, 1);
  std::vector<float> x(v.begin(), v.end());
  std::vector<int64_t> resid(x.size());  // int64 codes here (int32 in DirectRoundTrip)
  std::vector<uint64_t> outliers;
  interp_quantize(x.data(), {32, 48, 40}, QuantGrid::from_bound(1e-2), 3, 1e-2, int64_t(1) << 29, resid.data(),
                  &outliers);
  size_t zeros = 0;
  for (int64_t r : resid) zeros += r == 0;
  EXPECT_TRUE(outliers.empty());
  EXPECT_GT(double(zeros), 0.8 * double(resid.size()));
}

TEST(Interp, ReconstructAcceptsAnyResiduals) {
  std::mt19937_64 rng(5);
  for (const auto& shape : kShapes) {
    const size_t n = numel(shape);
    std::vector<int64_t> resid(n), q(n, 0);
    for (auto& r : resid) r = int64_t(rng());  // extreme values: arithmetic wraps
    interp_reconstruct(resid.data(), std::vector<uint64_t>(shape.begin(), shape.end()), q.data());
    // Deterministic: the same input gives the same codes.
    std::vector<int64_t> q2(n, 1);
    interp_reconstruct(resid.data(), std::vector<uint64_t>(shape.begin(), shape.end()), q2.data());
    EXPECT_EQ(q, q2);
    std::vector<int32_t> r32(n), q32(n);
    for (auto& r : r32) r = int32_t(uint32_t(rng()));
    interp_reconstruct(r32.data(), std::vector<uint64_t>(shape.begin(), shape.end()), q32.data());
  }
}

namespace {

std::vector<float> smooth_f32(const std::vector<int64_t>& shape, uint32_t seed) {
  const auto v = make_values(shape, Dist::Smooth, seed);
  return std::vector<float>(v.begin(), v.end());
}

template <class T>
void check_container(const std::vector<int64_t>& shape, Dist dist, const Spec& spec, int log2k, uint32_t seed) {
  const size_t n = numel(shape);
  const auto v = make_values(shape, dist, seed);
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = to_type<T>(v[i]);
  EncodeOptions opt;
  opt.interp = 1;
  opt.interp_log2k = log2k;
  const ByteBuffer blob = compress(x.data(), elem_type_of<T>(), shape, spec, opt);
  const BlobInfo info = inspect(blob.data(), blob.size());
  const std::string what = "ndim " + std::to_string(shape.size()) + " n " + std::to_string(n) + " type " +
                           elem_type_name(elem_type_of<T>()) + " dist " + std::to_string(int(dist));
  EXPECT_TRUE(info.interp) << what;
  EXPECT_EQ(info.grid_factor, 1u << log2k) << what;
  const Decoded d = decompress(blob.data(), blob.size());
  ASSERT_EQ(d.shape, shape);
  ASSERT_EQ(d.bytes.size(), n * sizeof(T));
  double E = spec.abs_bound;
  if (E == 0) {
    double lo = INFINITY, hi = -INFINITY;
    for (const T& e : x)
      if (std::isfinite(to_double(e))) lo = std::min(lo, to_double(e)), hi = std::max(hi, to_double(e));
    E = (hi > lo) ? spec.rel_bound * (hi - lo) : 0;
  }
  for (size_t i = 0; i < n; ++i) {
    T y;
    std::memcpy(&y, d.bytes.data() + i * sizeof(T), sizeof(T));
    const double a = to_double(x[i]), b = to_double(y);
    if (!std::isfinite(a)) {
      ASSERT_TRUE(same_bits(x[i], y)) << what << ": non-finite element " << i;
    } else {
      ASSERT_LE(std::fabs(a - b), E) << what << ": element " << i;
    }
  }
}

}  // namespace

TEST(Interp, ContainerForcedRoundTrips) {
  uint32_t seed = 10;
  for (const auto& shape : kShapes) {
    for (Dist dist : {Dist::Smooth, Dist::Noise, Dist::Specials, Dist::Huge}) {
      check_container<float>(shape, dist, Spec::lossy_abs(1e-3), 3, seed++);
      check_container<double>(shape, dist, Spec::lossy_rel(1e-4), 1, seed++);
      check_container<F16>(shape, dist, Spec::lossy_abs(1e-2), 2, seed++);
      check_container<Bf16>(shape, dist, Spec::lossy_rel(1e-2), 6, seed++);
      if (HasFatalFailure()) return;
    }
  }
  // Constant arrays under a rel bound come back exact (eb = |c| / 2 grid).
  check_container<float>({30, 31}, Dist::Constant, Spec::lossy_rel(1e-3), 3, 1);
}

TEST(Interp, ContainerLargeSmoothFieldSeveralSlicesAndInt64Codes) {
  // More than one slice of the residual stream.
  const std::vector<int64_t> shape = {40, 80, 100};
  const auto x = smooth_f32(shape, 3);
  check_container<float>(shape, Dist::Smooth, Spec::lossy_rel(1e-3), 3, 3);
  EncodeOptions opt;
  opt.interp = 1;
  const auto blob = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3), opt);
  EXPECT_GT(inspect(blob.data(), blob.size()).slices, 1u);
  // A tiny bound relative to the values: int64 codes.
  std::vector<double> big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 1e6 + 1e3 * std::sin(double(i) * 0.01);
  const auto b2 = compress(big.data(), ElemType::F64, {5000}, Spec::lossy_abs(1e-6), opt);
  EXPECT_EQ(inspect(b2.data(), b2.size()).code_type, ElemType::I64);
  const Decoded d = decompress(b2.data(), b2.size());
  for (size_t i = 0; i < big.size(); ++i) {
    double y;
    std::memcpy(&y, d.bytes.data() + 8 * i, 8);
    ASSERT_LE(std::fabs(y - big[i]), 1e-6);
  }
}

TEST(Interp, AutoPicksInterpOnSmoothDataOnly) {
  const std::vector<int64_t> shape = {32, 64, 64};
  const auto x = smooth_f32(shape, 4);
  const auto blob = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3));
  EncodeOptions classic;
  classic.interp = 0;
  const auto old = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3), classic);
  EXPECT_TRUE(inspect(blob.data(), blob.size()).interp);
  EXPECT_FALSE(inspect(old.data(), old.size()).interp);
  EXPECT_LT(blob.size() * 2, old.size()) << "interp should at least halve a smooth field's blob";
  // Noise: the classic layout, bit-identical to interp = 0.
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> noise(1 << 16);
  for (float& f : noise) f = normal(rng);
  const auto nb = compress(noise.data(), ElemType::F32, {1 << 16}, Spec::lossy_rel(1e-3));
  const auto nb0 = compress(noise.data(), ElemType::F32, {1 << 16}, Spec::lossy_rel(1e-3), classic);
  EXPECT_FALSE(inspect(nb.data(), nb.size()).interp);
  EXPECT_EQ(nb, nb0);
  // Forced codecs/predictors keep the classic layout unless interp is asked for.
  EncodeOptions forced;
  forced.choice = EncodeOptions::Choice::Rans;
  const auto fb = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3), forced);
  EXPECT_FALSE(inspect(fb.data(), fb.size()).interp);
  forced.interp = 1;
  const auto fi = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3), forced);
  EXPECT_TRUE(inspect(fi.data(), fi.size()).interp);
  EXPECT_EQ(inspect(fi.data(), fi.size()).by[int(Codec::Rans)][int(Predictor::None)].slices +
                inspect(fi.data(), fi.size()).by[int(Codec::Rans)][int(Predictor::Delta1)].slices +
                inspect(fi.data(), fi.size()).by[int(Codec::Rans)][int(Predictor::Delta2)].slices +
                inspect(fi.data(), fi.size()).by[int(Codec::Raw)][int(Predictor::None)].slices,
            inspect(fi.data(), fi.size()).slices);
}

TEST(Interp, AutoProbesLongOneDimensionalArrays) {
  // Long 1-D arrays are probed on a middle piece first: smooth signals still get the interp layout.
  const size_t n = size_t(1) << 20;
  std::vector<float> smooth(n), noise(n);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal(0, 1);
  for (size_t i = 0; i < n; ++i) {
    smooth[i] = float(std::sin(double(i) * 2e-3) + 0.5 * std::cos(double(i) * 7e-3));
    noise[i] = 0.01f * normal(rng) + float(std::sin(double(i) * 1e-5));  // predictable, but noisy
  }
  EncodeOptions classic;
  classic.interp = 0;
  const auto b = compress(smooth.data(), ElemType::F32, {int64_t(n)}, Spec::lossy_rel(1e-3));
  const auto b0 = compress(smooth.data(), ElemType::F32, {int64_t(n)}, Spec::lossy_rel(1e-3), classic);
  EXPECT_TRUE(inspect(b.data(), b.size()).interp);
  EXPECT_LT(b.size() * 2, b0.size());
  const Decoded d = decompress(b.data(), b.size());
  const double E = 1e-3 * 3.0;  // range of the signal is below 3
  for (size_t i = 0; i < n; ++i) {
    float y;
    std::memcpy(&y, d.bytes.data() + 4 * i, 4);
    ASSERT_LE(std::fabs(double(y) - double(smooth[i])), E);
  }
  // Whatever the probe decides, auto is never larger than the classic layout.
  const auto nb = compress(noise.data(), ElemType::F32, {int64_t(n)}, Spec::lossy_rel(1e-4));
  const auto nb0 = compress(noise.data(), ElemType::F32, {int64_t(n)}, Spec::lossy_rel(1e-4), classic);
  EXPECT_LE(nb.size(), nb0.size());
}

TEST(Interp, InvalidOptions) {
  std::vector<float> x(100, 1.f);
  EncodeOptions opt;
  opt.interp = 1;
  EXPECT_THROW(compress(x.data(), ElemType::F32, {100}, Spec::lossless(), opt), ncclz::InvalidArgument);
  opt.predictor = int(Predictor::Lorenzo2D);
  EXPECT_THROW(compress(x.data(), ElemType::F32, {10, 10}, Spec::lossy_abs(1e-3), opt), ncclz::InvalidArgument);
  EncodeOptions k;
  k.interp_log2k = 0;
  EXPECT_THROW(compress(x.data(), ElemType::F32, {100}, Spec::lossy_abs(1e-3), k), ncclz::InvalidArgument);
  k.interp_log2k = kInterpMaxLog2K + 1;
  EXPECT_THROW(compress(x.data(), ElemType::F32, {100}, Spec::lossy_abs(1e-3), k), ncclz::InvalidArgument);
}

namespace {

std::vector<ByteBuffer> interp_blobs() {
  std::vector<ByteBuffer> blobs;
  EncodeOptions opt;
  opt.interp = 1;
  const std::vector<int64_t> s3 = {5, 6, 7};
  const auto x = make_values(s3, Dist::Specials, 2);
  std::vector<float> xf(x.begin(), x.end());
  blobs.push_back(compress(xf.data(), ElemType::F32, s3, Spec::lossy_abs(1e-2), opt));
  blobs.push_back(compress(x.data(), ElemType::F64, s3, Spec::lossy_rel(1e-3), opt));
  opt.choice = EncodeOptions::Choice::Block;
  blobs.push_back(compress(xf.data(), ElemType::F32, {210}, Spec::lossy_abs(1e-3), opt));
  opt.choice = EncodeOptions::Choice::Rans;
  const auto h = make_values({30, 9}, Dist::Huge, 3);
  blobs.push_back(compress(h.data(), ElemType::F64, {30, 9}, Spec::lossy_abs(1e-9), opt));  // int64 codes
  return blobs;
}

}  // namespace

TEST(Interp, CorruptBlobsNeverCrash) {
  std::mt19937_64 rng(77);
  for (const auto& blob : interp_blobs()) {
    ASSERT_TRUE(inspect(blob.data(), blob.size()).interp);
    for (size_t len = 0; len < blob.size(); ++len) {
      ByteBuffer cut(blob.begin(), blob.begin() + ptrdiff_t(len));
      EXPECT_THROW(decompress(cut.data(), cut.size()), ncclz::CorruptData) << "length " << len;
    }
    for (int trial = 0; trial < 3000; ++trial) {
      ByteBuffer b = blob;
      const int flips = 1 + int(rng() % 3);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
      poke(b, "trial " + std::to_string(trial));
    }
    for (size_t i = 0; i < std::min<size_t>(blob.size(), 200) * 8; ++i) {
      ByteBuffer b = blob;
      b[i / 8] ^= uint8_t(1u << (i % 8));
      poke(b, "bit " + std::to_string(i));
    }
    // Random payload bytes after the headers.
    for (int trial = 0; trial < 200; ++trial) {
      ByteBuffer b = blob;
      for (size_t i = 64; i < b.size(); ++i)
        if (rng() % 4 == 0) b[i] = uint8_t(rng());
      poke(b, "random payload");
    }
  }
}

TEST(Interp, SlicesFollowPassesAndCoverTheStream) {
  for (const auto& shape : kShapes) {
    for (uint32_t L : {1u, 2u, 7u, 64u, 4096u, 1u << 18}) {
      const std::vector<uint64_t> dims(shape.begin(), shape.end());
      std::vector<uint32_t> counts;
      const uint64_t s = interp_slices(dims, L, ~uint64_t(0), &counts);
      ASSERT_EQ(s, counts.size());
      uint64_t sum = 0;
      for (uint32_t c : counts) {
        EXPECT_GE(c, 1u);
        EXPECT_LE(c, L);
        sum += c;
      }
      EXPECT_EQ(sum, numel(shape));
      // Over the cap: the full count, at most the cap appended.
      std::vector<uint32_t> some;
      if (s > 0) {
        EXPECT_EQ(interp_slices(dims, L, s - 1, &some), s);
      }
      EXPECT_LE(some.size(), s > 0 ? s - 1 : 0);
    }
  }
  // Level boundaries: 64x256x256 gets separate slices for the big passes.
  std::vector<uint32_t> counts;
  interp_slices({64, 256, 256}, 1u << 18, ~uint64_t(0), &counts);
  EXPECT_EQ(counts.back(), 1u << 18);
  EXPECT_GT(counts.size(), size_t(16));  // more than ceil(n / L): passes split slices
  // A huge corrupt shape: counted without allocating.
  counts.clear();
  EXPECT_GT(interp_slices({uint64_t(1) << 40, uint64_t(1) << 20}, 1, 100, &counts), uint64_t(1) << 59);
  EXPECT_LE(counts.size(), size_t(100));
}

TEST(Interp, LayoutBytesAreChecked) {
  const auto blob = interp_blobs()[0];
  auto expect_corrupt = [&](size_t off, uint8_t v, const char* what) {
    ByteBuffer b = blob;
    b[off] = v;
    b = resealed(b);  // past the checksum: the layout check must refuse it
    EXPECT_THROW(decompress(b.data(), b.size()), ncclz::CorruptData) << what;
  };
  expect_corrupt(10, 2, "layout 2");
  expect_corrupt(10, 0, "grid factor without layout");
  expect_corrupt(11, 0, "interp with k = 1");
  expect_corrupt(11, uint8_t(kInterpMaxLog2K + 1), "k too large");
  // A classic blob with a grid factor.
  std::vector<float> x(100, 2.f);
  auto classic = compress(x.data(), ElemType::F32, {100}, Spec::lossy_abs(0.1));
  ASSERT_FALSE(inspect(classic.data(), classic.size()).interp);
  classic[11] = 3;
  classic = resealed(classic);
  EXPECT_THROW(decompress(classic.data(), classic.size()), ncclz::CorruptData);
}
