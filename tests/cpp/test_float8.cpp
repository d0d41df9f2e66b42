// NCCL's 8-bit floats (float8 e4m3fn and e5m2): the conversions against a
// brute-force nearest-value search and ml_dtypes' known values; every
// reducing collective, op, exact mode and schedule (ring, latency, direct,
// hierarchical) on values whose partial sums are exact in the type (so any
// reduction order gives the reference); overflow to NaN / inf; data movement
// keeps every byte (NaN payloads too); lossy modes refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "prims/float8.hpp"
#include "test_ranks.hpp"
#include "test_schedules.hpp"

using namespace ncclz;
using prims::F8E4M3;
using prims::F8E5M2;

namespace {

// The code nearest x among the finite codes, ties to the even code; -1 where
// x lies beyond the largest finite value by half a step or more (an overflow:
// the step of the largest value's binade).
template <class F>
int nearest_code(float x, float max_finite, float top_step) {
  if (std::fabs(x) >= max_finite + top_step / 2 &&
      !(std::fabs(x) == max_finite + top_step / 2 && (F::kMaxFinite & 1) == 0)) {
    return -1;
  }
  int best = -1;
  double best_d = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const float v = F::widen(uint8_t(c));
    if (!std::isfinite(v) || (v == 0 && std::signbit(v) != std::signbit(x))) continue;
    const double d = std::fabs(double(v) - double(x));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

template <class F>
void check_format(float max_finite, float top_step, uint8_t overflow_code) {
  for (int c = 0; c < 256; ++c) {
    const float v = F::widen(uint8_t(c));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(F::widen(F::narrow(v)))) << c;
    } else {
      EXPECT_EQ(F::narrow(v), uint8_t(c)) << "code " << c << " = " << v;
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-22, 17);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1.0f : 1.0f);
    if (i % 7 == 0) x = std::round(x * 64) / 64;  // grid points and midpoints too
    const int want = nearest_code<F>(x, max_finite, top_step);
    const uint8_t got = F::narrow(x);
    if (want < 0) {
      EXPECT_EQ(got & 0x7F, overflow_code) << x;
    } else {
      EXPECT_EQ(got, uint8_t(want)) << x;
    }
  }
}

}  // namespace

TEST(Float8, ConversionsMatchTheNearestValue) {
  check_format<F8E4M3>(448.0f, 32.0f, 0x7F);
  check_format<F8E5M2>(57344.0f, 8192.0f, 0x7C);
  // ml_dtypes' casts of the same values (float8_e4m3fn, float8_e5m2)
  EXPECT_EQ(F8E4M3::narrow(448), 0x7E);
  EXPECT_EQ(F8E4M3::narrow(464), 0x7E);  // the midpoint to 480 (no such value) rounds to even
  EXPECT_EQ(F8E4M3::narrow(480), 0x7F);
  EXPECT_EQ(F8E4M3::narrow(INFINITY), 0x7F);
  EXPECT_EQ(F8E4M3::narrow(-1000), 0xFF);
  EXPECT_EQ(F8E4M3::narrow(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(F8E4M3::narrow(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(F8E5M2::narrow(57344), 0x7B);
  EXPECT_EQ(F8E5M2::narrow(61440), 0x7C);
  EXPECT_EQ(F8E5M2::narrow(-INFINITY), 0xFC);
  EXPECT_EQ(F8E5M2::narrow(std::ldexp(1.5f, -10)), 22);
  EXPECT_EQ(F8E5M2::narrow(std::ldexp(1.0f, -10)), 20);
  EXPECT_EQ(F8E5M2::narrow(std::ldexp(1.0f, -17)), 0);
  EXPECT_TRUE(std::isnan(F8E5M2::widen(F8E5M2::narrow(NAN))));
}

namespace {

const RedOp kOps[] = {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod};

template <class F>
std::vector<uint8_t> inputs(size_t n, int rank, RedOp op) {
  // Sums of up to 4 values in {-2..2} and products of {+-0.5, +-1, +-2}
  // stay exact in both formats; max and min take any value.
  std::mt19937 rng(unsigned(rank * 131 + int(op)));
  std::vector<uint8_t> v(n);
  const float prod_vals[] = {-2, -1, -0.5f, 0.5f, 1, 2};
  for (size_t i = 0; i < n; ++i) {
    float x;
    if (op == RedOp::Prod) {
      x = prod_vals[rng() % 6];
    } else if (op == RedOp::Max || op == RedOp::Min) {
      x = F::widen(uint8_t(rng() % 256));
      if (std::isnan(x)) x = 3.5f;  // NaN below
    } else {
      x = float(int(rng() % 5) - 2);
    }
    v[i] = F::narrow(x);
  }
  if (n > 3 && (op == RedOp::Max || op == RedOp::Min) && rank == 1) v[3] = F::narrow(NAN);
  return v;
}

template <class F>
float reference(const std::vector<std::vector<uint8_t>>& in, size_t i, RedOp op) {
  float acc = F::widen(in[0][i]);
  for (size_t r = 1; r < in.size(); ++r) {
    const float v = F::widen(in[r][i]);
    if (op == RedOp::Sum || op == RedOp::Avg) acc += v;
    if (op == RedOp::Prod) acc *= v;
    if (op == RedOp::Max) acc = (acc > v || acc != acc) ? acc : v;
    if (op == RedOp::Min) acc = (acc < v || acc != acc) ? acc : v;
  }
  if (op == RedOp::Avg) acc = F::widen(F::narrow(acc)) / float(in.size());
  return F::widen(F::narrow(acc));
}

template <class F>
void check_reductions(DataType t, const ncclz_test::Schedule& shape, size_t count) {
  ncclz_test::Ranks w(shape.nranks, shape.tweak);
  const size_t N = size_t(w.size());
  const std::string where = std::string(shape.name) + " " + dtype_name(t) + " count " + std::to_string(count);
  std::vector<std::vector<uint8_t>> in(N), ar(N), rs(N);
  for (RedOp op : kOps) {
    for (const Compression& c : {Compression::none(), Compression::lossless()}) {
      for (size_t r = 0; r < N; ++r) in[r] = inputs<F>(count * N, int(r), op);
      w.run([&](int r, Communicator& comm) {
        ar[size_t(r)].assign(count * N, 0xAA);
        rs[size_t(r)].assign(count, 0xAA);
        comm.all_reduce(in[size_t(r)].data(), ar[size_t(r)].data(), count * N, t, op, c);
        comm.reduce_scatter(in[size_t(r)].data(), rs[size_t(r)].data(), count, t, op, c);
      });
      const std::string what = where + " " + op_name(op) + " " + mode_name(c.mode);
      size_t bad = 0;
      for (size_t r = 0; r < N; ++r) {
        EXPECT_EQ(ar[r], ar[0]) << what << ": rank " << r << " differs from rank 0";
        for (size_t i = 0; i < count * N && bad < 3; ++i) {
          const float want = reference<F>(in, i, op), got = F::widen(ar[r][i]);
          if (!(got == want || (std::isnan(got) && std::isnan(want)))) {
            ++bad;
            ADD_FAILURE() << what << " all_reduce rank " << r << " element " << i << ": " << got << " vs " << want;
          }
        }
        for (size_t i = 0; i < count && bad < 3; ++i) {
          const float want = reference<F>(in, r * count + i, op), got = F::widen(rs[r][i]);
          if (!(got == want || (std::isnan(got) && std::isnan(want)))) {
            ++bad;
            ADD_FAILURE() << what << " reduce_scatter rank " << r << " element " << i << ": " << got << " vs " << want;
          }
        }
      }
    }
  }
}

}  // namespace

TEST(Float8, EveryReductionOnEverySchedule) {
  for (const ncclz_test::Schedule& s : ncclz_test::kSchedules) {
    for (size_t count : {size_t(5), size_t(3001)}) {
      check_reductions<F8E4M3>(DataType::F8E4M3, s, count);
      check_reductions<F8E5M2>(DataType::F8E5M2, s, count);
    }
  }
}

TEST(Float8, OverflowGivesNaNOrInfNeverAClippedValue) {
  ncclz_test::Ranks w(2);
  std::vector<uint8_t> e4(2), e5(2);
  w.run([&](int r, Communicator& comm) {
    uint8_t a = F8E4M3::narrow(448), b = F8E5M2::narrow(57344);
    comm.all_reduce(&a, &e4[size_t(r)], 1, DataType::F8E4M3, RedOp::Sum, Compression::none());
    comm.all_reduce(&b, &e5[size_t(r)], 1, DataType::F8E5M2, RedOp::Sum, Compression::none());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::isnan(F8E4M3::widen(e4[size_t(r)]))) << int(e4[size_t(r)]);
    EXPECT_EQ(F8E5M2::widen(e5[size_t(r)]), INFINITY) << int(e5[size_t(r)]);
  }
}

TEST(Float8, DataMovementKeepsEveryByteAndLossyIsRefused) {
  ncclz_test::Ranks w(3);
  std::vector<std::vector<uint8_t>> got(3);
  std::vector<std::string> errs(3);
  w.run([&](int r, Communicator& comm) {
    std::vector<uint8_t> x(256);
    for (int i = 0; i < 256; ++i) x[size_t(i)] = uint8_t(i + r);  // every code, NaNs included
    got[size_t(r)].assign(3 * 256, 0);
    comm.all_gather(x.data(), got[size_t(r)].data(), 256, DataType::F8E4M3, Compression::lossless());
    try {
      comm.all_reduce(x.data(), x.data(), 256, DataType::F8E5M2, RedOp::Sum, Compression::lossy_abs(0.1));
    } catch (const InvalidArgument& e) {
      errs[size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    for (int q = 0; q < 3; ++q) {
      for (int i = 0; i < 256; ++i) ASSERT_EQ(got[size_t(r)][size_t(q * 256 + i)], uint8_t(i + q));
    }
    EXPECT_NE(errs[size_t(r)].find("lossy compression takes float32"), std::string::npos) << errs[size_t(r)];
  }
}
