// Compressed container: docs/FORMAT.md, "Container (blob)".
//   - round trips: lossless bit-exact (NaN payloads, -0.0), lossy within the
//     bound on every finite element, non-finite bit-exact; every dtype, shapes
//     from 0-d to 3-D, several slices, forced codecs and predictors,
//   - NCCL's other types (int8, uint32, uint64, float8) lossless as the bit
//     patterns of a carrier type,
//   - inspect() reports what is in the blob (E next to the grid's half step),
//   - every single-bit flip of a blob of every codec, layout, mode and dtype
//     is CorruptData (the CRC-32C trailer), never other values,
//   - version-1 blobs (no checksum) written by the previous code still decode
//     to the same values,
//   - crafted blobs (every truncation, random bit flips resealed with a valid
//     checksum, trailing bytes) throw CorruptData or decode to something; they
//     never crash (run under ASan).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "ncclz/codec/container.hpp"
#include "ncclz/error.hpp"
#include "test_corrupt.hpp"

using namespace ncclz::codec;
using Choice = EncodeOptions::Choice;

namespace {

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

/// Bytes of n elements of type t: a smooth field with noise, plus (if asked)
/// NaN with payloads, +-inf and -0.0 sprinkled in.
ByteBuffer make_bytes(ElemType t, size_t n, uint32_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 0.01);
  ByteBuffer out(n * elem_size(t));
  for (size_t i = 0; i < n; ++i) {
    double v = 10 * std::sin(double(i) * 0.003) + std::cos(double(i) * 0.05) + noise(rng);
    uint8_t* p = out.data() + i * elem_size(t);
    const uint64_t r = rng() % 64;
    switch (t) {
      case ElemType::F32: {
        float f = float(v);
        if (specials && r == 0) f = float_of(0x7FC00000u | uint32_t(rng() % 0x3FFFFF));  // NaN payload
        if (specials && r == 1) f = float_of(0xFF800001u);                               // signalling NaN
        if (specials && r == 2) f = -std::numeric_limits<float>::infinity();
        if (specials && r == 3) f = -0.0f;
        std::memcpy(p, &f, 4);
        break;
      }
      case ElemType::F64: {
        double d = v;
        if (specials && r == 0) d = double_of(0x7FF8000000000000ull | (rng() >> 14));
        if (specials && r == 1) d = std::numeric_limits<double>::infinity();
        if (specials && r == 3) d = -0.0;
        std::memcpy(p, &d, 8);
        break;
      }
      case ElemType::F16: {
        uint16_t h = double_to_f16(v);
        if (specials && r == 0) h = uint16_t(0x7C01 | (rng() % 0x3FF));
        if (specials && r == 1) h = 0xFC00;
        if (specials && r == 3) h = 0x8000;
        std::memcpy(p, &h, 2);
        break;
      }
      case ElemType::BF16: {
        uint16_t b = double_to_bf16(v);
        if (specials && r == 0) b = uint16_t(0xFF81 | (rng() % 0x7F));
        if (specials && r == 1) b = 0x7F80;
        if (specials && r == 3) b = 0x8000;
        std::memcpy(p, &b, 2);
        break;
      }
      case ElemType::I32: {
        const int32_t q = int32_t(uint32_t(int32_t(v * 1000)) + (r == 0 ? 0x80000000u : 0u));
        std::memcpy(p, &q, 4);
        break;
      }
      case ElemType::I64: {
        const int64_t q = int64_t(uint64_t(int64_t(v * 1e6)) + (r == 0 ? 0x7FFFFFFFFFFFFFFFull : 0ull));
        std::memcpy(p, &q, 8);
        break;
      }
      case ElemType::U8: *p = uint8_t(int(v * 10) & 0xFF); break;
    }
  }
  return out;
}

double value_at(ElemType t, const uint8_t* bytes, size_t i) {
  const uint8_t* p = bytes + i * elem_size(t);
  switch (t) {
    case ElemType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ElemType::F64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case ElemType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_float(h);
    }
    case ElemType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16_to_float(b);
    }
    default: return 0;
  }
}

const ElemType kFloatTypes[] = {ElemType::F32, ElemType::F64, ElemType::F16, ElemType::BF16};
const ElemType kAllTypes[] = {ElemType::F32, ElemType::F64, ElemType::F16, ElemType::BF16,
                              ElemType::I32, ElemType::I64, ElemType::U8};
const std::vector<std::vector<int64_t>> kShapes = {
    {}, {0}, {1}, {7}, {1000}, {3, 5, 7}, {0, 4}, {300001}, {513, 1025}, {40, 70, 101}, {2, 3, 4, 5, 6},
};

void expect_lossy_ok(ElemType t, const ByteBuffer& x, const Decoded& d, double eb, const std::string& what) {
  const size_t n = x.size() / elem_size(t), es = elem_size(t);
  ASSERT_EQ(d.bytes.size(), x.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    const double a = value_at(t, x.data(), i), b = value_at(t, d.bytes.data(), i);
    if (!std::isfinite(a)) {
      if (std::memcmp(x.data() + i * es, d.bytes.data() + i * es, es) != 0) {
        ADD_FAILURE() << what << ": non-finite element " << i << " not bit-exact";
        ++bad;
      }
    } else if (!(std::fabs((long double)a - (long double)b) <= (long double)eb)) {
      ADD_FAILURE() << what << ": element " << i << " x=" << a << " y=" << b << " eb=" << eb;
      ++bad;
    }
  }
}

}  // namespace

TEST(Container, LosslessRoundTripEveryTypeAndShape) {
  uint32_t seed = 1;
  for (ElemType t : kAllTypes) {
    for (const auto& shape : kShapes) {
      const auto x = make_bytes(t, numel(shape), seed++, true);
      const auto blob = compress(x.data(), t, shape, Spec::lossless());
      const Decoded d = decompress(blob.data(), blob.size());
      const std::string what = std::string(elem_type_name(t)) + " ndim " + std::to_string(shape.size());
      EXPECT_EQ(d.type, t) << what;
      EXPECT_EQ(d.shape, shape) << what;
      ASSERT_EQ(d.bytes, x) << what;  // bit-exact
      ByteBuffer into(x.size());
      decompress_into(blob.data(), blob.size(), into.data(), into.size());
      EXPECT_EQ(into, x) << what;
      const BlobInfo info = inspect(blob.data(), blob.size());
      EXPECT_EQ(info.mode, Spec::Lossless);
      EXPECT_EQ(info.elements, numel(shape));
      EXPECT_EQ(info.compressed_bytes, blob.size());
      EXPECT_EQ(info.outliers, 0u);
    }
  }
}

// NCCL's other types (int8, uint32, uint64, the two float8s) travel
// lossless as the bit patterns of a carrier type of their size; the blob's
// dtype byte names them, and decompress, describe_array and inspect report
// both. Lossy is refused for them, and a header whose dtype does not fit
// its carrier is corrupt.
TEST(Container, NcclsOtherTypesTravelAsTheirBitPatterns) {
  const ArrayType extra[] = {ArrayType::I8, ArrayType::U32, ArrayType::U64, ArrayType::F8E4M3, ArrayType::F8E5M2};
  std::mt19937 rng(7);
  for (ArrayType at : extra) {
    const ElemType carrier = carrier_of(at);
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{}, {0}, {5}, {300001}, {64, 33}}) {
      const size_t n = numel(shape), esize = elem_size(carrier);
      ByteBuffer x(n * esize);
      for (size_t i = 0; i < n; ++i) {  // small values, every 7th element all noise
        for (size_t b = 0; b < esize; ++b) x[i * esize + b] = uint8_t(i % 7 == 0 ? rng() : b == 0 ? i % 5 : 0);
      }
      const std::string what = std::string(array_type_name(at)) + " ndim " + std::to_string(shape.size());
      const ByteBuffer blob = compress(x.data(), at, shape, Spec::lossless(), EncodeOptions{});
      EXPECT_EQ(blob[6], uint8_t(at)) << what;
      const Decoded d = decompress(blob.data(), blob.size());
      EXPECT_EQ(d.array_type, at) << what;
      EXPECT_EQ(d.type, carrier) << what;
      EXPECT_EQ(d.shape, shape) << what;
      ASSERT_EQ(d.bytes, x) << what;
      const ArrayDesc a = describe_array(blob.data(), blob.size());
      EXPECT_EQ(a.array_type, at) << what;
      EXPECT_EQ(a.bytes, x.size()) << what;
      const BlobInfo info = inspect(blob.data(), blob.size());
      EXPECT_EQ(info.array_type, at) << what;
      EXPECT_EQ(info.code_type, carrier) << what;
      if (n > 1000) {
        EXPECT_LT(blob.size(), x.size() * 3 / 4) << what << ": small values compress";
      }
    }
    uint8_t one[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    try {
      compress(one, at, {1}, Spec::lossy_abs(0.5), EncodeOptions{});
      ADD_FAILURE() << array_type_name(at) << ": lossy taken";
    } catch (const ncclz::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(array_type_name(at)), std::string::npos) << e.what();
    }
    EncodeOptions floatexp;
    floatexp.choice = EncodeOptions::Choice::FloatExp;
    EXPECT_THROW(compress(one, at, {1}, Spec::lossless(), floatexp), ncclz::InvalidArgument) << array_type_name(at);
  }
  EXPECT_STREQ(array_type_name(ArrayType::F32), "float32");
  EXPECT_EQ(carrier_of(ArrayType::BF16), ElemType::BF16);
  // A dtype byte that does not fit the blob is corrupt.
  std::vector<uint32_t> u(1000, 7);
  const ByteBuffer ublob = compress(u.data(), ArrayType::U32, {1000}, Spec::lossless(), EncodeOptions{});
  std::vector<float> f(1000, 1.5f);
  const ByteBuffer fblob = compress(f.data(), ElemType::F32, {1000}, Spec::lossy_abs(0.01));
  for (auto [b, dtype, what] :
       {std::tuple{ublob, uint8_t(ArrayType::F32), "uint32 blob as float32"},
        std::tuple{ublob, uint8_t(ArrayType::U64), "uint32 blob as uint64"}, std::tuple{ublob, uint8_t(13), "dtype 13"},
        std::tuple{fblob, uint8_t(ArrayType::U32), "lossy float32 blob as uint32"}}) {
    ByteBuffer m = b;
    m[6] = dtype;
    m = resealed(m);
    EXPECT_THROW(decompress(m.data(), m.size()), ncclz::CorruptData) << what;
    EXPECT_THROW(inspect(m.data(), m.size()), ncclz::CorruptData) << what;
  }
  ByteBuffer as_int32 = ublob;  // the same bits read as int32: not corrupt, another type
  as_int32[6] = uint8_t(ArrayType::I32);
  as_int32 = resealed(as_int32);
  EXPECT_EQ(decompress(as_int32.data(), as_int32.size()).array_type, ArrayType::I32);
}

TEST(Container, LossyAbsBoundEveryFloatType) {
  uint32_t seed = 100;
  for (ElemType t : kFloatTypes) {
    for (double eb : {1e-1, 1e-3, 1e-5}) {
      for (const auto& shape : kShapes) {
        const auto x = make_bytes(t, numel(shape), seed++, true);
        const auto blob = compress(x.data(), t, shape, Spec::lossy_abs(eb));
        const Decoded d = decompress(blob.data(), blob.size());
        const std::string what =
            std::string(elem_type_name(t)) + " eb " + std::to_string(eb) + " ndim " + std::to_string(shape.size());
        EXPECT_EQ(d.type, t);
        EXPECT_EQ(d.shape, shape);
        expect_lossy_ok(t, x, d, eb, what);
        const BlobInfo info = inspect(blob.data(), blob.size());
        // E is the bound asked for; the grid's half step is E less at most 1/8 of it (FORMAT.md, lossy mode).
        EXPECT_EQ(info.version, 2);
        EXPECT_EQ(info.error_bound, eb);
        EXPECT_LE(info.grid_half_step, eb);
        EXPECT_GE(info.grid_half_step, 0.875 * eb);
        EXPECT_EQ(info.bound_kind, 1);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(Container, LossyRelBound) {
  for (ElemType t : kFloatTypes) {
    const std::vector<int64_t> shape = {100, 300};
    const auto x = make_bytes(t, numel(shape), 7, true);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < numel(shape); ++i) {
      const double v = value_at(t, x.data(), i);
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    const double r = 1e-3;
    const auto blob = compress(x.data(), t, shape, Spec::lossy_rel(r));
    const BlobInfo info = inspect(blob.data(), blob.size());
    // E = r * (max - min), resolved and stored; the grid's half step below it.
    ASSERT_TRUE(info.error_bound.has_value());
    EXPECT_DOUBLE_EQ(*info.error_bound, r * (hi - lo));
    EXPECT_LE(info.grid_half_step, *info.error_bound);
    EXPECT_GE(info.grid_half_step, 0.875 * r * (hi - lo));
    EXPECT_EQ(info.bound_kind, 2);
    EXPECT_EQ(info.bound, r);
    EXPECT_GT(info.ratio, 1.5) << elem_type_name(t);
    expect_lossy_ok(t, x, decompress(blob.data(), blob.size()), r * (hi - lo), elem_type_name(t));
  }
}

TEST(Container, RelBoundConstantAndNonFiniteArrays) {
  // max == min: the promise r * 0 = 0 means exact.
  for (float c : {0.f, -0.f, 3.25f, -1e-30f, 1e38f}) {
    std::vector<float> x(1000, c);
    const auto blob = compress(x.data(), ElemType::F32, {1000}, Spec::lossy_rel(1e-2));
    const Decoded d = decompress(blob.data(), blob.size());
    for (size_t i = 0; i < x.size(); ++i) {
      float y;
      std::memcpy(&y, d.bytes.data() + 4 * i, 4);
      ASSERT_EQ(y, c);
    }
  }
  // E: |c| / 2 (1 for 0), the grid that reproduces c exactly (container.hpp).
  for (float c : {0.f, 3.25f}) {
    std::vector<float> x(10, c);
    const auto blob = compress(x.data(), ElemType::F32, {10}, Spec::lossy_rel(1e-2));
    EXPECT_EQ(inspect(blob.data(), blob.size()).error_bound, c != 0 ? double(c) / 2 : 1.0);
  }
  // No finite values at all: all carried exactly.
  std::vector<float> x = {NAN, INFINITY, -INFINITY, float_of(0x7FA00001u)};
  const auto blob = compress(x.data(), ElemType::F32, {4}, Spec::lossy_rel(1e-2));
  const Decoded d = decompress(blob.data(), blob.size());
  EXPECT_EQ(std::memcmp(d.bytes.data(), x.data(), 16), 0);
  EXPECT_EQ(inspect(blob.data(), blob.size()).outliers, 4u);
}

TEST(Container, LossyHugeValuesUseInt64CodesOrOutliers) {
  // max|x| / step beyond 2^30: int64 codes; beyond 2^51: outliers (exact).
  std::vector<double> x = {1e12, -3e12, 0.5, 1e20, -1e300, 42.0};
  const double eb = 1e-3;
  const auto blob = compress(x.data(), ElemType::F64, {int64_t(x.size())}, Spec::lossy_abs(eb));
  const BlobInfo info = inspect(blob.data(), blob.size());
  EXPECT_EQ(info.code_type, ElemType::I64);
  EXPECT_EQ(info.outliers, 2u);
  const Decoded d = decompress(blob.data(), blob.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(value_at(ElemType::F64, d.bytes.data(), i) - x[i]), eb);
  EXPECT_EQ(value_at(ElemType::F64, d.bytes.data(), 4), -1e300);
  // float32 near FLT_MAX with a large bound: all within the bound.
  std::vector<float> f = {3.4e38f, -3.4e38f, 1.f, 0.f};
  const auto b2 = compress(f.data(), ElemType::F32, {4}, Spec::lossy_abs(1e30));
  expect_lossy_ok(ElemType::F32, ByteBuffer((uint8_t*)f.data(), (uint8_t*)f.data() + 16),
                  decompress(b2.data(), b2.size()), 1e30, "near FLT_MAX");
  // A bound larger than any finite double is clamped to a usable one.
  const auto b3 = compress(f.data(), ElemType::F32, {4}, Spec::lossy_abs(1e308));
  expect_lossy_ok(ElemType::F32, ByteBuffer((uint8_t*)f.data(), (uint8_t*)f.data() + 16),
                  decompress(b3.data(), b3.size()), 1e308, "huge bound");
}

TEST(Container, ForcedCodecsAndPredictors) {
  const std::vector<int64_t> shape = {20, 30, 40};
  const auto x = make_bytes(ElemType::F32, numel(shape), 3, false);
  struct Force {
    Choice c;
    int p;
  };
  const Force forces[] = {{Choice::Raw, -1},  {Choice::Block, -1},  {Choice::Rans, -1}, {Choice::Block, 1},
                          {Choice::Rans, 2},  {Choice::Block, 3},   {Choice::Rans, 4},  {Choice::Auto, 4},
                          {Choice::Block, 0}, {Choice::Sparse, -1}, {Choice::Sparse, 1}};
  for (const Force& f : forces) {
    EncodeOptions opt;
    opt.choice = f.c;
    opt.predictor = f.p;
    const auto blob = compress(x.data(), ElemType::F32, shape, Spec::lossy_abs(1e-3), opt);
    const BlobInfo info = inspect(blob.data(), blob.size());
    const std::string what = "choice " + std::to_string(int(f.c)) + " predictor " + std::to_string(f.p);
    expect_lossy_ok(ElemType::F32, x, decompress(blob.data(), blob.size()), 1e-3, what);
    uint64_t slices = 0;
    for (int c = 0; c < kNumCodecs; ++c)
      for (int p = 0; p < kNumPredictors; ++p) {
        slices += info.by[c][p].slices;
        if (info.by[c][p].slices == 0) continue;
        if (f.c == Choice::Raw) {
          EXPECT_EQ(c, int(Codec::Raw)) << what;
        }
        if (f.c == Choice::Block) {
          EXPECT_TRUE(c == int(Codec::Block) || c == int(Codec::Raw)) << what;
        }
        if (f.c == Choice::Rans) {
          EXPECT_TRUE(c == int(Codec::Rans) || c == int(Codec::Raw)) << what;
        }
        if (f.c == Choice::Sparse) {
          EXPECT_TRUE(c == int(Codec::Sparse) || c == int(Codec::Raw)) << what;
        }
        if (f.p >= 0 && c != int(Codec::Raw)) {
          EXPECT_EQ(p, f.p) << what;
        }
      }
    EXPECT_EQ(slices, info.slices);
  }
  // Lossless floats with FloatExp and Raw.
  for (Choice c : {Choice::FloatExp, Choice::Raw}) {
    EncodeOptions opt;
    opt.choice = c;
    const auto blob = compress(x.data(), ElemType::F32, shape, Spec::lossless(), opt);
    EXPECT_EQ(decompress(blob.data(), blob.size()).bytes, x);
  }
  // Lossless integers with Block, Rans and Sparse and predictors.
  const auto xi = make_bytes(ElemType::I32, numel(shape), 4, false);
  for (Choice c : {Choice::Block, Choice::Rans, Choice::Sparse}) {
    for (int p = 0; p < kNumPredictors; ++p) {
      EncodeOptions opt;
      opt.choice = c;
      opt.predictor = p;
      const auto blob = compress(xi.data(), ElemType::I32, shape, Spec::lossless(), opt);
      EXPECT_EQ(decompress(blob.data(), blob.size()).bytes, xi);
    }
  }
}

TEST(Container, SmoothFieldCompresses) {
  const std::vector<int64_t> shape = {64, 64, 64};
  std::vector<float> x(numel(shape));
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = double(i % 64), b = double((i / 64) % 64), c = double(i / 4096);
    x[i] = float(std::sin(a * 0.1) * std::cos(b * 0.07) + 0.01 * c);
  }
  const auto blob = compress(x.data(), ElemType::F32, shape, Spec::lossy_rel(1e-3));
  const BlobInfo info = inspect(blob.data(), blob.size());
  EXPECT_GT(info.ratio, 4.0);
  EXPECT_EQ(info.slice_elems % 4096, 0u);  // slices hold whole planes
}

TEST(Container, InvalidArguments) {
  std::vector<float> x(10, 1.f);
  std::vector<int32_t> xi(10, 1);
  auto expect_invalid = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << ": no exception";
    } catch (const ncclz::InvalidArgument&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": wrong exception " << e.what();
    }
  };
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(0)); }, "abs 0");
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(-1)); }, "abs < 0");
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(NAN)); }, "abs nan");
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_rel(INFINITY)); }, "rel inf");
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec{Spec::Lossy, 1, 1}); }, "both");
  expect_invalid([&] { compress(xi.data(), ElemType::I32, {10}, Spec::lossy_abs(1)); }, "lossy int");
  expect_invalid([&] { compress(x.data(), ElemType::F32, {-1}, Spec::lossless()); }, "negative dim");
  EncodeOptions opt;
  opt.choice = Choice::FloatExp;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(1), opt); }, "floatexp lossy");
  expect_invalid([&] { compress(xi.data(), ElemType::I32, {10}, Spec::lossless(), opt); }, "floatexp int");
  opt.choice = Choice::Block;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossless(), opt); }, "block float");
  opt.choice = Choice::Auto;
  opt.predictor = 3;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(1), opt); }, "lorenzo2d 1-D");
  opt.predictor = 4;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {2, 5}, Spec::lossy_abs(1), opt); }, "lorenzo3d 2-D");
  opt.predictor = 1;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossless(), opt); }, "predictor on floats");
  opt.choice = Choice::Raw;
  expect_invalid([&] { compress(x.data(), ElemType::F32, {10}, Spec::lossy_abs(1), opt); }, "predictor + raw");
  const auto blob = compress(x.data(), ElemType::F32, {10}, Spec::lossless());
  ByteBuffer small(39);
  expect_invalid([&] { decompress_into(blob.data(), blob.size(), small.data(), small.size()); }, "into size");
}

namespace {

std::vector<ByteBuffer> small_blobs() {
  std::vector<ByteBuffer> blobs;
  const std::vector<int64_t> shape = {5, 13};
  const auto xf = make_bytes(ElemType::F32, 65, 11, true);
  blobs.push_back(compress(xf.data(), ElemType::F32, shape, Spec::lossless()));
  blobs.push_back(compress(xf.data(), ElemType::F32, shape, Spec::lossy_abs(1e-2)));
  const auto xb = make_bytes(ElemType::BF16, 65, 12, true);
  blobs.push_back(compress(xb.data(), ElemType::BF16, shape, Spec::lossy_rel(1e-3)));
  const auto xi = make_bytes(ElemType::I64, 65, 13, false);
  for (Choice c : {Choice::Block, Choice::Rans, Choice::Sparse}) {
    EncodeOptions opt;
    opt.choice = c;
    blobs.push_back(compress(xi.data(), ElemType::I64, shape, Spec::lossless(), opt));
    blobs.push_back(compress(xf.data(), ElemType::F32, shape, Spec::lossy_abs(1e-3), opt));
  }
  EncodeOptions fe;
  fe.choice = Choice::FloatExp;
  blobs.push_back(compress(xb.data(), ElemType::BF16, shape, Spec::lossless(), fe));
  return blobs;
}

}  // namespace

TEST(Container, EveryTruncationIsCorrupt) {
  for (const auto& blob : small_blobs()) {
    for (size_t len = 0; len < blob.size(); ++len) {
      ByteBuffer cut(blob.begin(), blob.begin() + ptrdiff_t(len));
      EXPECT_THROW(decompress(cut.data(), cut.size()), ncclz::CorruptData) << "length " << len;
      EXPECT_THROW(inspect(cut.data(), cut.size()), ncclz::CorruptData) << "length " << len;
    }
    ByteBuffer longer = blob;
    longer.push_back(0);
    EXPECT_THROW(decompress(longer.data(), longer.size()), ncclz::CorruptData);
  }
}

// Every bit of blobs of every codec, layout (classic, interp), mode (lossless,
// lossy abs and rel) and dtype, flipped one at a time: always CorruptData,
// never other values (the CRC-32C trailer; before it, 69-96% of such flips
// decoded silently).
TEST(Container, EverySingleBitFlipIsCorrupt) {
  std::vector<ByteBuffer> blobs = small_blobs();
  const std::vector<int64_t> shape = {3, 7};
  for (ElemType t : kAllTypes) {
    const auto x = make_bytes(t, 21, 40 + uint32_t(t), true);
    blobs.push_back(compress(x.data(), t, shape, Spec::lossless()));
    EncodeOptions raw;
    raw.choice = Choice::Raw;
    blobs.push_back(compress(x.data(), t, shape, Spec::lossless(), raw));
    if (t == ElemType::F32 || t == ElemType::F64 || t == ElemType::F16 || t == ElemType::BF16) {
      blobs.push_back(compress(x.data(), t, shape, Spec::lossy_abs(1e-2)));
      blobs.push_back(compress(x.data(), t, shape, Spec::lossy_rel(1e-3), raw));
      EncodeOptions interp;
      interp.interp = 1;
      blobs.push_back(compress(x.data(), t, shape, Spec::lossy_rel(1e-2), interp));
    }
  }
  size_t flips = 0;
  for (const auto& blob : blobs) {
    ASSERT_EQ(blob[4], 2);
    for (size_t i = 0; i < blob.size() * 8; ++i) {
      ByteBuffer b = blob;
      b[i / 8] ^= uint8_t(1u << (i % 8));
      EXPECT_THROW(decompress(b.data(), b.size()), ncclz::CorruptData) << "bit " << i << " of " << blob.size();
      EXPECT_THROW(inspect(b.data(), b.size()), ncclz::CorruptData) << "bit " << i;
      ++flips;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(flips, size_t(50000));
}

// Version-1 blobs (before checksums) still decode, to the values the code
// that wrote them decoded them to (more in tests/python/data/blobs_v1).
TEST(Container, Version1BlobsStillDecode) {
  struct Vector {
    const char* blob;
    const char* values;
    ElemType type;
    std::vector<int64_t> shape;
    uint8_t bound_kind;
  };
  const Vector vectors[] = {
      {"4e435a420101030101020000000004007b14ae47e17a843fccc26cdfc544ae3f01000000000000000c000000000000004e435a"
       "31010100000c00000019000000000000000000000005c0010000840c0000480000004800000094080000ce0d00000100000000"
       "0000000100000000000000050000c07f",
       "000000002f26f23fd52d3d40407a26402f26723f0000c07f407a26c0d52d3dc02f26f2bf0000000049a40040d52d3d40",
       ElemType::F32,
       {12},
       2},
      {"4e435a4201000202010000000000040000000000000000000000000000000000010000000000000008000000000000004e435a"
       "3100020000080000004000000000000000000000000500000000000000fdffffffffffffff0000000000010000070000000000"
       "0000070000000000000007000000000000000000000000000000ffffffffffffffff0000000000000000000000000000000"
       "0",
       "0500000000000000fdffffffffffffff00000000000100000700000000000000070000000000000007000000000000000000"
       "000000000000ffffffffffffffff",
       ElemType::I64,
       {8},
       0},
      {"4e435a42010104010201010300000400fca9f1d24d62503ffba7f1d24d62503f0100000000000000040000000000000004000000"
       "000000004e435a3101010000100000003100000000000000000000000b3055000000000000000000000000000034260000f27700"
       "0082280000062a0000c80800007020000088800000c200000000000000000000000000000000000000",
       "0000000000000000fa11ae47e17a743ffadc4f8d976e923ffa11ae47e17aa43ffadc4f8d976eb23f073c355eba49bc3f4af553e3a"
       "59bc43fc8ae9defa7c6cb3f5a1604560e2dd23f39d4a3703d0ad73f571fdbf97e6adc3f83eda7c64b37e13ffa11ae47e17ae43fb9"
       "eed24d6210e83f1792438b6ce7eb3f16fcffffffffef3f",
       ElemType::F64,
       {4, 4},
       1},
  };
  auto unhex = [](const char* h) {
    ByteBuffer b;
    for (size_t i = 0; h[i] && h[i + 1]; i += 2) b.push_back(uint8_t(std::stoi(std::string(h + i, 2), nullptr, 16)));
    return b;
  };
  for (const auto& v : vectors) {
    const ByteBuffer blob = unhex(v.blob), want = unhex(v.values);
    ASSERT_EQ(blob[4], 1);
    const Decoded d = decompress(blob.data(), blob.size());
    EXPECT_EQ(d.type, v.type);
    EXPECT_EQ(d.shape, v.shape);
    ASSERT_EQ(d.bytes.size(), want.size());
    EXPECT_EQ(std::memcmp(d.bytes.data(), want.data(), want.size()), 0) << elem_type_name(v.type);
    const BlobInfo info = inspect(blob.data(), blob.size());
    EXPECT_EQ(info.version, 1);
    EXPECT_EQ(info.bound_kind, v.bound_kind);
    // Version 1 stored E only as an abs blob's bound.
    EXPECT_EQ(info.error_bound.has_value(), v.bound_kind != 2);
    if (v.bound_kind == 1) {
      EXPECT_EQ(*info.error_bound, info.bound);
    }
    ByteBuffer out(want.size());
    decompress_into(blob.data(), blob.size(), out.data(), out.size());
    EXPECT_EQ(out, want);
  }
}

// decompress_with asks for memory once, after the headers checked out: a
// damaged header never allocates; a damaged payload is found (by its checksum)
// after the allocation, and the memory stays the caller's.
TEST(Container, DecompressWithAllocatesOnceAfterTheChecks) {
  const auto x = make_bytes(ElemType::F32, 3000, 5, false);
  const auto blob = compress(x.data(), ElemType::F32, {30, 100}, Spec::lossy_abs(1e-3));
  std::vector<uint8_t> mem;
  int calls = 0;
  auto alloc = [&](size_t n) {
    ++calls;
    mem.resize(n);
    return static_cast<void*>(mem.data());
  };
  const ArrayDesc a = decompress_with(blob.data(), blob.size(), alloc);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(a.dtype, ElemType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{30, 100}));
  ASSERT_EQ(a.bytes, x.size());
  const Decoded d = decompress(blob.data(), blob.size());
  EXPECT_EQ(std::memcmp(mem.data(), d.bytes.data(), a.bytes), 0);
  for (size_t bit : {size_t(48 * 8 + 3), size_t(55 * 8 + 6), (blob.size() - 40) * 8}) {  // shape, shape, payload
    ByteBuffer b = blob;
    b[bit / 8] ^= uint8_t(1u << (bit % 8));
    calls = 0;
    try {
      decompress_with(b.data(), b.size(), alloc);
      ADD_FAILURE() << "bit " << bit << " decoded";
    } catch (const ncclz::CorruptData& e) {
      EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
    }
    EXPECT_EQ(calls, bit < 56 * 8 ? 0 : 1) << "bit " << bit;
  }
}

TEST(Container, RandomBitFlipsNeverCrash) {
  std::mt19937_64 rng(2024);
  for (const auto& blob : small_blobs()) {
    for (int trial = 0; trial < 3000; ++trial) {
      ByteBuffer b = blob;
      const int flips = 1 + int(rng() % 3);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
      poke(b, "trial " + std::to_string(trial));
    }
    // Every single bit of the headers.
    for (size_t i = 0; i < std::min<size_t>(blob.size(), 200) * 8; ++i) {
      ByteBuffer b = blob;
      b[i / 8] ^= uint8_t(1u << (i % 8));
      poke(b, "bit " + std::to_string(i));
    }
  }
  // Garbage of every small length.
  for (size_t len = 0; len < 300; ++len) {
    ByteBuffer g(len);
    for (auto& c : g) c = uint8_t(rng());
    if (len >= 4) std::memcpy(g.data(), "NCZB", 4);
    poke(g, "garbage");
  }
}

// Each field check on its own: the blob is changed and resealed (a valid
// checksum over the crafted bytes), so only the field check can refuse it.
TEST(Container, HeaderFieldsAreChecked) {
  std::vector<float> x(100, 2.f);
  const auto blob = compress(x.data(), ElemType::F32, {100}, Spec::lossless());
  auto mutate = [&](size_t off, uint8_t v) {
    ByteBuffer b = blob;
    b[off] = v;
    return resealed(b);
  };
  auto expect_corrupt = [](const ByteBuffer& b, const char* what) {
    EXPECT_THROW(decompress(b.data(), b.size()), ncclz::CorruptData) << what;
    EXPECT_THROW(inspect(b.data(), b.size()), ncclz::CorruptData) << what;
  };
  {
    const ByteBuffer ok = resealed(blob);
    EXPECT_EQ(ok, blob);
    EXPECT_NO_THROW(decompress(ok.data(), ok.size()));
  }
  expect_corrupt(mutate(0, 'X'), "magic");
  expect_corrupt(mutate(4, 3), "version");
  expect_corrupt(mutate(4, 0), "version 0");
  expect_corrupt(mutate(5, 7), "mode");
  expect_corrupt(mutate(6, 0), "dtype");
  expect_corrupt(mutate(7, uint8_t(ElemType::I32)), "code type");
  expect_corrupt(mutate(8, 33), "ndim");
  expect_corrupt(mutate(10, 1), "reserved");
  expect_corrupt(mutate(41, 1), "lossless with an error bound");
  expect_corrupt(mutate(48, 101), "shape");
  expect_corrupt(mutate(55, 0x40), "huge shape");
  ByteBuffer zero_slice = blob;
  store_u32(zero_slice.data() + 12, 0);
  expect_corrupt(resealed(zero_slice), "slice length 0");
  // Lossy: E must be the abs bound, and at least the grid's half step.
  const auto lossy = compress(x.data(), ElemType::F32, {100}, Spec::lossy_abs(0.25));
  auto with_e = [&](double e) {
    ByteBuffer b = lossy;
    uint64_t u;
    std::memcpy(&u, &e, 8);
    store_u64(b.data() + 40, u);
    return resealed(b);
  };
  EXPECT_NO_THROW(decompress(with_e(0.25).data(), lossy.size()));
  expect_corrupt(with_e(0.5), "E differs from the abs bound");
  expect_corrupt(with_e(0.0), "E zero");
  expect_corrupt(with_e(NAN), "E NaN");
  const auto rel = compress(x.data(), ElemType::F32, {100}, Spec::lossy_rel(0.25));  // constant: E = 1
  ByteBuffer small_e = rel;
  const double tiny = 1e-9;
  uint64_t u;
  std::memcpy(&u, &tiny, 8);
  store_u64(small_e.data() + 40, u);
  expect_corrupt(resealed(small_e), "E below the grid's half step");
  // Not resealed: the checksum refuses it, saying so.
  ByteBuffer changed = blob;
  changed[60] ^= 1;
  try {
    decompress(changed.data(), changed.size());
    ADD_FAILURE() << "a changed blob decoded";
  } catch (const ncclz::CorruptData& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
}
