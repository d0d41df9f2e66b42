// Collectives over the in-process transport, ranks as threads: the schedules of
// docs/ALGORITHMS.md and the error-bound contract of ARCHITECTURE.md.
//
// Every check compares against a reference computed from all ranks' inputs
// (long double for float sums): lossy results within the promised bound E on
// every finite element, lossless bit-identical to none, outputs bit-identical
// across ranks, integer results exact (wrapping like the library).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/worker_pool.hpp"
#include "bootstrap/bootstrap.hpp"
#include "codec/quantizer.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"
#include "test_values.hpp"

using namespace ncclz;

namespace {

// ---- a world of ranks as threads --------------------------------------------------

struct World {
  int n = 0;
  std::vector<std::unique_ptr<Communicator>> comms;

  /// sparse_slice_bytes 0: four slots' worth (small, as the slots of the
  /// sweeps are: mostly-zero sums then take several slices too).
  World(int nranks, size_t slot_bytes, int nslots = 4, int nchannels = 2, double timeout_s = 60,
        size_t sparse_slice_bytes = 0)
      : n(nranks) {
    const UniqueId id = Bootstrap::make_unique_id("127.0.0.1", 0);
    comms.resize(static_cast<size_t>(n));
    std::vector<std::thread> th;
    std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        try {
          CommConfig cfg;
          cfg.transport = "inproc";
          cfg.nchannels = nchannels;
          cfg.slot_bytes = slot_bytes;
          cfg.nslots = nslots;
          cfg.timeout_s = timeout_s;
          cfg.direct_from_bytes = 0;  // the rings, also for large exact all_reduce (test_latency.cpp: direct)
          cfg.sparse_slice_bytes = sparse_slice_bytes ? sparse_slice_bytes : 4 * slot_bytes;
          comms[size_t(r)] = Communicator::create(id, r, n, cfg);
        } catch (...) {
          errs[size_t(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : th) t.join();
    for (auto& e : errs) {
      if (e) std::rethrow_exception(e);
    }
  }

  /// Runs fn(rank, comm) on every rank concurrently; rethrows the first failure.
  void run(const std::function<void(int, Communicator&)>& fn) {
    std::vector<std::thread> th;
    std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        try {
          fn(r, *comms[size_t(r)]);
        } catch (...) {
          errs[size_t(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : th) t.join();
    for (auto& e : errs) {
      if (e) std::rethrow_exception(e);
    }
  }
};

/// Worlds shared by the sweeps (small slots so that slicing and ring loops happen).
World& world(int n) {
  static std::map<int, std::unique_ptr<World>> worlds;
  auto& w = worlds[n];
  if (!w) w = std::make_unique<World>(n, 1024);
  return *w;
}

/// NCCLZ_TEST_CODEC=raw|block|... forces the wire codec of the sweeps (to tell a
/// codec problem from a schedule problem); unset: the selector.
Compression with_test_codec(Compression c) {
  if (const char* e = std::getenv("NCCLZ_TEST_CODEC")) {
    if (c.mode != Compression::Mode::None) c.codec = e;
  }
  return c;
}
Compression lossy_abs(double e) { return with_test_codec(Compression::lossy_abs(e)); }
Compression lossy_rel(double r) { return with_test_codec(Compression::lossy_rel(r)); }
Compression lossless() { return with_test_codec(Compression::lossless()); }

// ---- typed values -------------------------------------------------------------------

size_t dsize(DataType t) { return ncclz::dtype_size(t); }
bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}
const char* name(DataType t) {
  static const char* n[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "i8", "u32", "u64"};
  return n[int(t)];
}
const char* name(RedOp o) {
  static const char* n[] = {"sum", "avg", "max", "min", "prod"};
  return n[int(o)];
}

double get(DataType t, const std::vector<uint8_t>& b, size_t i) { return ncclz_test::value_at(t, b.data(), i); }

int64_t get_int(DataType t, const std::vector<uint8_t>& b, size_t i) {
  const uint8_t* p = b.data() + i * dsize(t);
  if (t == DataType::I32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (t == DataType::I64) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  return p[0];
}

void set(DataType t, std::vector<uint8_t>& b, size_t i, double v) { ncclz_test::store_value(t, b.data(), i, v); }

/// Deterministic inputs of rank r: floats in [-1, 1] (a smooth part plus noise,
/// so that codecs have something to find), integers small (prod stays in range
/// only modulo 2^k, which the reference reproduces).
std::vector<uint8_t> make_input(DataType t, size_t n, int r, uint64_t salt = 0) {
  std::vector<uint8_t> b(n * dsize(t) + 1);
  std::mt19937_64 rng(uint64_t(r) * 7919 + n * 31 + uint64_t(t) * 1000003 + salt);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> ui(-50, 50);
  for (size_t i = 0; i < n; ++i) {
    if (is_float(t)) {
      set(t, b, i, 0.7 * std::sin(0.01 * double(i) + r) + 0.3 * u(rng));
    } else if (t == DataType::U8) {
      set(t, b, i, double(ui(rng) + 50));
    } else {
      set(t, b, i, double(ui(rng)));
    }
  }
  return b;
}

using ncclz_test::unit_roundoff;

/// A bound E that the lossy path can honour for inputs in [-1, 1] on up to 8 ranks.
double lossy_bound(DataType t) {
  switch (t) {
    case DataType::F32: return 1e-3;
    case DataType::F64: return 1e-6;
    case DataType::F16: return 0.05;
    case DataType::BF16: return 0.3;
    default: return 0;
  }
}

/// Integer reduction with the library's wrapping semantics.
int64_t int_reduce(DataType t, RedOp op, int64_t a, int64_t b) {
  auto wrap = [&](uint64_t v) -> int64_t {
    if (t == DataType::I32) return int64_t(int32_t(uint32_t(v)));
    if (t == DataType::U8) return int64_t(uint8_t(v));
    return int64_t(v);
  };
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return wrap(uint64_t(a) + uint64_t(b));
    case RedOp::Prod: return wrap(uint64_t(a) * uint64_t(b));
    case RedOp::Max: return a > b ? a : b;
    case RedOp::Min: return a < b ? a : b;
  }
  return 0;
}

/// Checks element i of `out` against the reduction of inputs[k][off + i].
/// mode: 0 none/lossless (float tolerance of the plain float reduction), 1 lossy (bound E).
void check_reduced(DataType t, RedOp op, int N, const std::vector<std::vector<uint8_t>>& in, size_t off,
                   const std::vector<uint8_t>& out, size_t count, bool lossy, double E, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    const double got = get(t, out, i);
    if (!is_float(t)) {
      int64_t acc = get_int(t, in[0], off + i);
      for (int k = 1; k < N; ++k) acc = int_reduce(t, op, acc, get_int(t, in[size_t(k)], off + i));
      if (op == RedOp::Avg) acc = int64_t(acc / N);
      ASSERT_EQ(get_int(t, out, i), acc) << what << " element " << i;
      continue;
    }
    long double ref = get(t, in[0], off + i), sumabs = std::fabs(ref);
    for (int k = 1; k < N; ++k) {
      const long double v = get(t, in[size_t(k)], off + i);
      sumabs += std::fabs(v);
      switch (op) {
        case RedOp::Sum:
        case RedOp::Avg: ref += v; break;
        case RedOp::Prod: ref *= v; break;
        case RedOp::Max: ref = std::max(ref, v); break;
        case RedOp::Min: ref = std::min(ref, v); break;
      }
    }
    if (op == RedOp::Avg) {
      ref /= N;
      sumabs /= N;
    }
    const double err = double(std::fabs((long double)got - ref));
    if (lossy) {
      ASSERT_LE(err, E) << what << " element " << i << " got " << got << " exact " << double(ref);
    } else {
      const double u = unit_roundoff(t);
      const double tiny = t == DataType::F16    ? std::ldexp(1.0, -24)
                          : t == DataType::BF16 ? std::ldexp(1.0, -133)
                                                : 1e-300;
      const double tol = (op == RedOp::Prod ? double(std::fabs(ref)) : double(sumabs)) * u * (N + 2) + N * tiny;
      ASSERT_LE(err, tol) << what << " element " << i << " got " << got << " exact " << double(ref);
    }
  }
}

void expect_same_bytes(const std::vector<std::vector<uint8_t>>& outs, size_t bytes, const std::string& what) {
  for (size_t r = 1; r < outs.size(); ++r) {
    ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[r].data(), bytes))
        << what << ": rank " << r << " differs from rank 0";
  }
}

const DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                           DataType::I32, DataType::I64, DataType::U8};
const RedOp kOps[] = {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod};
const int kWorlds[] = {1, 2, 3, 4, 7, 8};
const size_t kCounts[] = {0, 1, 31, 33, 1001};

// ---- allreduce ------------------------------------------------------------------------

/// Runs one allreduce on every rank; returns every rank's output.
std::vector<std::vector<uint8_t>> run_all_reduce(World& w, DataType t, RedOp op, size_t count, const Compression& c,
                                                 const std::vector<std::vector<uint8_t>>& in,
                                                 std::vector<CallStats>* stats = nullptr, bool in_place = false) {
  std::vector<std::vector<uint8_t>> out(size_t(w.n), std::vector<uint8_t>(count * dsize(t) + 1, 0xAB));
  std::vector<CallStats> st(size_t(w.n));
  w.run([&](int r, Communicator& comm) {
    if (in_place) {
      out[size_t(r)] = in[size_t(r)];
      comm.all_reduce(out[size_t(r)].data(), out[size_t(r)].data(), count, t, op, c, &st[size_t(r)]);
    } else {
      comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), count, t, op, c, &st[size_t(r)]);
    }
  });
  if (stats) *stats = st;
  return out;
}

class CollectiveAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveAllReduce, EveryTypeOpModeAndCount) {
  const int N = GetParam();
  World& w = world(N);
  for (size_t count : kCounts) {
    for (DataType t : kTypes) {
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(make_input(t, count, r));
      for (RedOp op : kOps) {
        const std::string what =
            "N=" + std::to_string(N) + " count=" + std::to_string(count) + " " + name(t) + " " + name(op);
        const auto none = run_all_reduce(w, t, op, count, Compression::none(), in);
        check_reduced(t, op, N, in, 0, none[0], count, false, 0, what + " none");
        expect_same_bytes(none, count * dsize(t), what + " none");
        const auto ll = run_all_reduce(w, t, op, count, lossless(), in, nullptr, count == 33);
        for (int r = 0; r < N; ++r) {
          ASSERT_EQ(0, std::memcmp(none[0].data(), ll[size_t(r)].data(), count * dsize(t)))
              << what << " lossless differs from none on rank " << r;
        }
        if (is_float(t) && op != RedOp::Prod) {
          const double E = lossy_bound(t);
          std::vector<CallStats> st;
          const auto lossy = run_all_reduce(w, t, op, count, lossy_abs(E), in, &st, count == 31);
          check_reduced(t, op, N, in, 0, lossy[0], count, true, E, what + " lossy");
          expect_same_bytes(lossy, count * dsize(t), what + " lossy");
          EXPECT_EQ(st[0].error_bound, E);
          EXPECT_FALSE(st[0].exact_fallback) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CollectiveWorlds, CollectiveAllReduce, ::testing::ValuesIn(kWorlds));

TEST(CollectiveAllReduceBig, MillionPlusOddEveryMode) {
  // 2 channels, 64 KiB slots: many slices per chunk, several ring loops.
  for (int N : {3, 4}) {
    World w(N, 64 << 10);
    const size_t count = (size_t(1) << 20) + 7;
    const DataType t = DataType::F32;
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < N; ++r) in.push_back(make_input(t, count, r));
    std::vector<CallStats> st;
    const auto none = run_all_reduce(w, t, RedOp::Sum, count, Compression::none(), in, &st);
    check_reduced(t, RedOp::Sum, N, in, 0, none[0], count, false, 0, "big none");
    EXPECT_EQ(st[0].raw_bytes, st[0].wire_bytes);
    const double expect_raw = 2.0 * (N - 1) / N * double(count) * 4;
    EXPECT_NEAR(double(st[0].raw_bytes), expect_raw, expect_raw * 0.01);
    const auto ll = run_all_reduce(w, t, RedOp::Sum, count, lossless(), in, &st);
    for (int r = 0; r < N; ++r) ASSERT_EQ(0, std::memcmp(none[0].data(), ll[size_t(r)].data(), count * 4));
    const double E = 1e-4;
    const auto lossy = run_all_reduce(w, t, RedOp::Sum, count, lossy_abs(E), in, &st);
    check_reduced(t, RedOp::Sum, N, in, 0, lossy[0], count, true, E, "big lossy");
    expect_same_bytes(lossy, count * 4, "big lossy");
    EXPECT_FALSE(st[0].exact_fallback);
    if (!std::getenv("NCCLZ_TEST_CODEC")) {
      EXPECT_GT(st[0].ratio, 1.2) << "lossy codes of smooth data should compress";
    }
    std::printf(
        "[ info ] N=%d allreduce %zu f32 lossy(1e-4): ratio %.2f wall %.3fs encode %.3fs decode %.3fs "
        "quantize %.3fs wait %.3fs\n",
        N, count, st[0].ratio, st[0].wall_s, st[0].encode_s, st[0].decode_s, st[0].quantize_s, st[0].wait_s);
  }
}

TEST(CollectiveAllReduce, TwoSlotsPerConnection) {
  // K = 2, the smallest FIFO: chunks of one slice; forwarding holds its
  // incoming slot while it acquires the outgoing one, which needs K >= 2.
  World w(3, 1024, 2, 2);
  const size_t count = 5000;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 3; ++r) in.push_back(make_input(DataType::F32, count, r));
  const auto out = run_all_reduce(w, DataType::F32, RedOp::Sum, count, lossy_abs(1e-3), in);
  check_reduced(DataType::F32, RedOp::Sum, 3, in, 0, out[0], count, true, 1e-3, "K=2");
  const auto out2 = run_all_reduce(w, DataType::F32, RedOp::Max, count, Compression::none(), in);
  check_reduced(DataType::F32, RedOp::Max, 3, in, 0, out2[0], count, false, 0, "K=2 none");
}

TEST(CollectiveAllReduce, LosslessMostlyZeroFloats) {
  // Lossless sums of mostly-zero floats (sparse gradients): the slices go as
  // Sparse lists of bit patterns; the result is the uncompressed sum, bit for
  // bit, at a small fraction of its wire bytes.
  for (int N : {2, 4}) {
    World w(N, 64 << 10);
    for (DataType t : {DataType::F32, DataType::BF16, DataType::F64}) {
      const size_t count = 300007, es = dsize(t);
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) {
        auto x = make_input(t, count, r);
        std::mt19937 rng(uint32_t(77 + r));
        for (size_t i = 0; i < count; ++i) {
          if (rng() % 100 != 0) std::memset(x.data() + i * es, 0, es);  // 99% +0.0
        }
        in.push_back(std::move(x));
      }
      std::vector<CallStats> st;
      const auto none = run_all_reduce(w, t, RedOp::Sum, count, Compression::none(), in, &st);
      const uint64_t raw = st[0].wire_bytes;
      const auto ll = run_all_reduce(w, t, RedOp::Sum, count, Compression::lossless(), in, &st);
      for (int r = 0; r < N; ++r) {
        ASSERT_EQ(0, std::memcmp(none[0].data(), ll[size_t(r)].data(), count * es)) << "N=" << N << " rank " << r;
        EXPECT_LT(st[size_t(r)].wire_bytes * 8, raw) << "N=" << N << " type " << int(t);
      }
    }
  }
}

TEST(CollectiveAllReduce, OneSlotIsRejected) { EXPECT_THROW(World(2, 1024, 1, 1), InvalidArgument); }

TEST(CollectiveAllReduce, PowerOfTwoSlotsCarryWholeSlices) {
  // A slice holds slot_bytes of data (the slot has room for the slice header
  // on top), so calls of power-of-two sizes split into whole slices: twice the
  // elements, exactly twice the slices. All-zero inputs make every full slice
  // of a mode the same bytes, so the wire bytes count the slices. (With the
  // header taken out of the slot, each chunk ended in a short extra slice and
  // the 2x call sent 33 slices per step where the 1x sent 17.)
  for (int N : {2, 4}) {
    World w(N, 4096, 4, 2);
    for (const Compression& c : {Compression::lossless(), Compression::lossy_abs(1e-3)}) {
      std::vector<uint64_t> wire;
      for (size_t count : {size_t(N) * 2 * 16384, size_t(N) * 4 * 16384}) {
        std::vector<std::vector<uint8_t>> in(size_t(N), std::vector<uint8_t>(count * 4, 0));
        std::vector<CallStats> st;
        const auto out = run_all_reduce(w, DataType::F32, RedOp::Sum, count, c, in, &st);
        for (int r = 0; r < N; ++r) ASSERT_EQ(out[size_t(r)], std::vector<uint8_t>(out[0])) << r;
        ASSERT_EQ(0, std::memcmp(out[0].data(), in[0].data(), count * 4));
        for (int r = 1; r < N; ++r) EXPECT_EQ(st[size_t(r)].wire_bytes, st[0].wire_bytes);
        wire.push_back(st[0].wire_bytes);
      }
      EXPECT_EQ(wire[1], 2 * wire[0]) << "N=" << N << " mode " << int(c.mode);
    }
  }
}

TEST(CollectiveAllReduce, RelativeBound) {
  for (int N : {2, 5}) {
    std::unique_ptr<World> own;
    if (N != 2) own = std::make_unique<World>(N, 2048);
    World& w = N == 2 ? world(2) : *own;
    for (DataType t : {DataType::F32, DataType::F64, DataType::F16}) {
      const size_t count = 777;
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) {
        in.push_back(make_input(t, count, r, 99));
        const double shift = t == DataType::F16 ? 0 : 3;
        for (size_t i = 0; i < count; ++i) set(t, in.back(), i, get(t, in.back(), i) * 10 + shift);
      }
      double lo = 1e300, hi = -1e300;
      for (auto& b : in) {
        for (size_t i = 0; i < count; ++i) {
          lo = std::min(lo, get(t, b, i));
          hi = std::max(hi, get(t, b, i));
        }
      }
      const double rel = t == DataType::F16 ? 1e-2 : 1e-4;
      const double E = rel * (hi - lo);
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max}) {
        std::vector<CallStats> st;
        const auto out = run_all_reduce(w, t, op, count, lossy_rel(rel), in, &st);
        EXPECT_NEAR(st[0].error_bound, E, E * 1e-12);
        check_reduced(t, op, N, in, 0, out[0], count, true, E, std::string("rel ") + name(t) + " " + name(op));
        expect_same_bytes(out, count * dsize(t), "rel");
      }
    }
  }
}

TEST(CollectiveAllReduce, NonFiniteInputsComeOutLikeTheFloatReduction) {
  World& w = world(4);
  const size_t count = 100;
  for (DataType t : {DataType::F32, DataType::F16, DataType::BF16}) {
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < 4; ++r) in.push_back(make_input(t, count, r, 5));
    const double inf = std::numeric_limits<double>::infinity();
    set(t, in[1], 10, std::nan(""));  // NaN anywhere -> NaN
    set(t, in[2], 20, inf);           // +inf + finite -> +inf
    set(t, in[0], 30, inf);           // +inf + -inf -> NaN
    set(t, in[3], 30, -inf);
    set(t, in[2], 40, -inf);
    for (RedOp op : {RedOp::Sum, RedOp::Max, RedOp::Min, RedOp::Avg}) {
      const std::string what = std::string("nonfinite ") + name(t) + " " + name(op);
      const auto none = run_all_reduce(w, t, op, count, Compression::none(), in);
      const auto ll = run_all_reduce(w, t, op, count, lossless(), in);
      for (int r = 0; r < 4; ++r) {
        ASSERT_EQ(0, std::memcmp(none[0].data(), ll[size_t(r)].data(), count * dsize(t))) << what << " lossless";
      }
      std::vector<CallStats> st;
      const double E = lossy_bound(t);
      const auto lossy = run_all_reduce(w, t, op, count, lossy_abs(E), in, &st);
      expect_same_bytes(lossy, count * dsize(t), what);
      for (size_t i : {size_t(10), size_t(20), size_t(30), size_t(40)}) {
        const double a = get(t, none[0], i), b = get(t, lossy[0], i);
        EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << what << " element " << i << ": " << a << " vs " << b;
      }
      // Everything else stays within E.
      for (size_t i = 0; i < count; ++i) {
        if (i == 10 || i == 20 || i == 30 || i == 40) continue;
        const std::vector<uint8_t> one(lossy[0].begin() + long(i * dsize(t)), lossy[0].end());
        check_reduced(t, op, 4, in, i, one, 1, true, E, what);
      }
      EXPECT_TRUE(st[0].exact_fallback);
    }
  }
}

TEST(CollectiveAllReduce, BoundBelowTheTypesRoundingRunsExactly) {
  // E far below half an ulp of the f16 result: no method can promise it; the
  // call runs exactly (fp64 accumulation, one rounding) and says so.
  World& w = world(3);
  const size_t count = 64;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 3; ++r) in.push_back(make_input(DataType::F16, count, r));
  std::vector<CallStats> st;
  const auto out = run_all_reduce(w, DataType::F16, RedOp::Sum, count, lossy_abs(1e-6), in, &st);
  EXPECT_TRUE(st[0].exact_fallback);
  for (size_t i = 0; i < count; ++i) {
    long double ref = 0;
    for (int r = 0; r < 3; ++r) ref += get(DataType::F16, in[size_t(r)], i);
    const double got = get(DataType::F16, out[0], i);
    EXPECT_LE(std::fabs(double(got - ref)), std::fabs(double(ref)) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25));
  }
}

codec::ElemType elem_of(DataType t) {
  return t == DataType::BF16 ? codec::ElemType::BF16 : t == DataType::F16 ? codec::ElemType::F16 : codec::ElemType::F32;
}

/// Every rank's input statistics as the exchange merges them (max |x|).
bound::DataStats stats_of(DataType t, const std::vector<std::vector<uint8_t>>& in, size_t count) {
  bound::DataStats g;
  g.any_finite = true;
  for (const auto& x : in) {
    for (size_t i = 0; i < count; ++i) g.maxabs = std::max(g.maxabs, std::fabs(get(t, x, i)));
  }
  return g;
}

/// Checks every element of every rank against the fp64 sum (or mean) of the
/// inputs, within `bound`; the ranks' outputs are the same bits.
void expect_within(DataType t, RedOp op, const std::vector<std::vector<uint8_t>>& in,
                   const std::vector<std::vector<uint8_t>>& out, size_t count, double bound, const std::string& what) {
  const int N = int(in.size());
  expect_same_bytes(out, count * dsize(t), what);
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;  // exact in double: N 16-bit values
    for (int r = 0; r < N; ++r) exact += get(t, in[size_t(r)], i);
    if (op == RedOp::Avg) exact /= N;
    worst = std::max(worst, std::fabs(get(t, out[0], i) - exact));
  }
  EXPECT_LE(worst, bound) << what;
}

TEST(CollectiveAllReduce, ExactPathBelowTheTypesRoundingMovesNoWiderValuesThanItNeeds) {
  // rel 1e-3 of bf16 values in [-1, 1] (E ~ 2e-3), rel 1e-4 of float16 ones:
  // below the type's own rounding of any sum or mean (2^-8, 2^-11 of it), so
  // neither quantization nor any exact run keeps E. The exact path then takes
  // the narrowest accumulation as good as float64's (bound::choose_exact): on
  // 2 ranks the type itself (one rounding of the exact sum, the uncompressed
  // call's bytes and bits), on 3 and 4 float32 (twice the bytes), not float64
  // (4x); every element within the bound it reports.
  for (int N : {2, 3, 4}) {
    World& w = world(N);
    const size_t count = 3001;
    for (DataType t : {DataType::BF16, DataType::F16}) {
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(make_input(t, count, r, 17));
      const bound::DataStats g = stats_of(t, in, count);
      const double rel = t == DataType::BF16 ? 1e-3 : 1e-4;
      for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
        const std::string what = std::string("n=") + std::to_string(N) + " " + name(t) + " " + name(op);
        const bound::Combine how = op == RedOp::Avg ? bound::Combine::Mean : bound::Combine::Sum;
        std::vector<CallStats> none_st, st;
        const auto none = run_all_reduce(w, t, op, count, Compression::none(), in, &none_st);
        const auto out = run_all_reduce(w, t, op, count, lossy_rel(rel), in, &st);
        const double f64 = bound::exact_error(elem_of(t), how, N, g, true);
        for (int r = 0; r < N; ++r) {
          const CallStats& s = st[size_t(r)];
          ASSERT_TRUE(s.exact_fallback) << what;
          ASSERT_GT(f64, s.requested_bound) << what;                       // no exact run keeps E
          EXPECT_LE(s.error_bound, f64 * bound::kBestExactSlack) << what;  // and this one is as good as any
          EXPECT_EQ(s.raw_bytes, none_st[size_t(r)].raw_bytes) << what;
          if (N == 2) {
            EXPECT_EQ(s.wire_bytes, none_st[size_t(r)].wire_bytes) << what << " rank " << r;
          } else {
            EXPECT_GT(s.wire_bytes, none_st[size_t(r)].wire_bytes) << what << " rank " << r;      // float32 ...
            EXPECT_LE(s.wire_bytes, 2 * none_st[size_t(r)].wire_bytes) << what << " rank " << r;  // ... not float64
          }
        }
        expect_within(t, op, in, out, count, st[0].error_bound, what);
        if (N == 2) {
          // one rounding of the exact sum either way (a mean's halving is exact)
          for (int r = 0; r < N; ++r) {
            ASSERT_EQ(0, std::memcmp(none[size_t(r)].data(), out[size_t(r)].data(), count * dsize(t))) << what;
          }
        }
      }
    }
  }
}

TEST(CollectiveAllReduce, ExactPathKeepsABoundThatItCanKeep) {
  // E that an exact run keeps and quantization does not (a narrow window for
  // 16-bit floats, whose quantizer needs only about the result's rounding):
  // the narrowest accumulation that keeps it. bf16 on 4 ranks: three bf16
  // roundings of the sum (3 * 2^-6 at |x| <= 1) do not keep E just above
  // float32's bound, float32's do (twice the bytes); an E between float64's
  // bound and float32's only float64 keeps (4x). 2 ranks: bf16's own one
  // rounding keeps E just above it (without the half to spare that the
  // policy asks): the type itself, the uncompressed call's bytes and bits.
  World& w = world(4);
  const size_t count = 3001;
  const DataType t = DataType::BF16;
  using bound::Accumulation;
  using bound::Combine;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 4; ++r) in.push_back(make_input(t, count, r, 23));
  const bound::DataStats g = stats_of(t, in, count);
  const double f64 = bound::accumulation_error(elem_of(t), Combine::Sum, 4, g, Accumulation::F64);
  const double f32 = bound::accumulation_error(elem_of(t), Combine::Sum, 4, g, Accumulation::F32);
  ASSERT_LT(f64, f32);
  struct Case {
    double E;
    uint64_t wire_per_raw;
  };
  for (const Case& c : {Case{f32 * (1 + 1.0 / 256), 2}, Case{(f64 + f32) / 2, 4}}) {
    const std::string what = "E=" + std::to_string(c.E);
    ASSERT_FALSE(bound::plan_lossy(elem_of(t), Combine::Sum, 4, c.E, g).compress) << what;
    std::vector<CallStats> none_st, st;
    run_all_reduce(w, t, RedOp::Sum, count, Compression::none(), in, &none_st);
    const auto out = run_all_reduce(w, t, RedOp::Sum, count, lossy_abs(c.E), in, &st);
    for (int r = 0; r < 4; ++r) {
      const CallStats& s = st[size_t(r)];
      ASSERT_TRUE(s.exact_fallback) << what;
      EXPECT_LE(s.error_bound, c.E) << what;
      EXPECT_EQ(s.wire_bytes, c.wire_per_raw * none_st[size_t(r)].wire_bytes) << what << " rank " << r;
    }
    expect_within(t, RedOp::Sum, in, out, count, st[0].error_bound, what);
  }
  World& w2 = world(2);
  const std::vector<std::vector<uint8_t>> in2(in.begin(), in.begin() + 2);
  const bound::DataStats g2 = stats_of(t, in2, count);
  const double E2 = bound::accumulation_error(elem_of(t), Combine::Sum, 2, g2, Accumulation::InT) * (1 + 1.0 / 256);
  ASSERT_FALSE(bound::plan_lossy(elem_of(t), Combine::Sum, 2, E2, g2).compress);
  ASSERT_FALSE(bound::exact_keeps_bound(elem_of(t), Combine::Sum, 2, E2, g2));  // not with half to spare
  std::vector<CallStats> none_st, st;
  const auto none = run_all_reduce(w2, t, RedOp::Sum, count, Compression::none(), in2, &none_st);
  const auto out = run_all_reduce(w2, t, RedOp::Sum, count, lossy_abs(E2), in2, &st);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[size_t(r)].exact_fallback);
    EXPECT_LE(st[size_t(r)].error_bound, E2);
    EXPECT_EQ(st[size_t(r)].wire_bytes, none_st[size_t(r)].wire_bytes);
    ASSERT_EQ(0, std::memcmp(none[size_t(r)].data(), out[size_t(r)].data(), count * dsize(t)));
  }
}

TEST(CollectiveAllReduce, ExactFallbackOfMostlyZeroInputsIsCompressed) {
  // At 1e-9 no exact run keeps the bound: on 4 ranks the exact path carries
  // fp64 partial sums (4x the bytes of a 16-bit input), on 2 the type's own
  // (one rounding of the exact sum). Where every rank's input is mostly
  // zeros its slices go lossless (Sparse over the bit patterns), so the
  // fallback moves far fewer bytes than even an uncompressed call, with the
  // same result: the exact sum, rounded once.
  for (int N : {2, 4}) {
    World w(N, 64 << 10);
    for (DataType t : {DataType::BF16, DataType::F16}) {
      const size_t count = 200003, es = dsize(t);
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) {
        auto x = make_input(t, count, r);
        std::mt19937 rng(uint32_t(91 + r));
        for (size_t i = 0; i < count; ++i) {
          if (rng() % 100 != 0) std::memset(x.data() + i * es, 0, es);
        }
        in.push_back(std::move(x));
      }
      std::vector<CallStats> st;
      run_all_reduce(w, t, RedOp::Sum, count, Compression::none(), in, &st);
      const uint64_t none_wire = st[0].wire_bytes;
      const auto out = run_all_reduce(w, t, RedOp::Sum, count, lossy_abs(1e-9), in, &st);
      ASSERT_TRUE(st[0].exact_fallback);
      EXPECT_LT(st[0].wire_bytes * 4, none_wire) << int(t) << " n=" << N;
      for (size_t i = 0; i < count; ++i) {
        double exact = 0;  // exact in double: 16-bit values
        for (int r = 0; r < N; ++r) exact += get(t, in[size_t(r)], i);
        uint16_t want = 0;  // rounded once, from the double
        if (t == DataType::BF16) {
          const codec::Bf16 v = codec::from_double<codec::Bf16>(exact);
          std::memcpy(&want, &v, 2);
        } else {
          const codec::F16 v = codec::from_double<codec::F16>(exact);
          std::memcpy(&want, &v, 2);
        }
        ASSERT_EQ(0, std::memcmp(out[0].data() + i * es, &want, es)) << int(t) << " n=" << N << " element " << i;
      }
      for (int r = 1; r < N; ++r) ASSERT_EQ(0, std::memcmp(out[0].data(), out[size_t(r)].data(), count * es));
    }
  }
}

TEST(CollectiveAllReduce, LargeMagnitudesUseWideCodes) {
  // max|x| / eb beyond int32 for a sum: int64 codes, bound still met.
  World& w = world(4);
  const size_t count = 300;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 4; ++r) {
    in.push_back(make_input(DataType::F64, count, r));
    for (size_t i = 0; i < count; ++i) set(DataType::F64, in.back(), i, get(DataType::F64, in.back(), i) * 1e6);
  }
  const double E = 1e-5;
  std::vector<CallStats> st;
  const auto out = run_all_reduce(w, DataType::F64, RedOp::Sum, count, lossy_abs(E), in, &st);
  EXPECT_FALSE(st[0].exact_fallback);
  check_reduced(DataType::F64, RedOp::Sum, 4, in, 0, out[0], count, true, E, "wide codes");
}

TEST(CollectiveAllReduce, TightBoundsOnWideRangesStayWithinE) {
  // Magnitudes from 1e-3 to 1e3 and bounds a few half-ulps of the largest
  // possible result: the rounding terms of the budget (lossy_plan.hpp) matter.
  World& w = world(7);
  const size_t count = 2000;
  for (DataType t : {DataType::F32, DataType::F64, DataType::F16, DataType::BF16}) {
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < 7; ++r) {
      in.push_back(make_input(t, count, r, 77));
      std::mt19937 rng(unsigned(r) + 1);
      for (size_t i = 0; i < count; ++i) {
        const double scale = std::pow(10.0, double(int(rng() % 7)) - 3.0) * (t == DataType::F16 ? 0.05 : 1.0);
        set(t, in.back(), i, get(t, in.back(), i) * scale);
      }
    }
    double A = 0;
    for (auto& b : in) {
      for (size_t i = 0; i < count; ++i) A = std::max(A, std::fabs(get(t, b, i)));
    }
    const double hu = 7 * A * unit_roundoff(t);  // half an ulp of the largest possible sum
    for (double k : {2.0, 4.0, 64.0}) {
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max}) {
        const double E = k * hu;
        std::vector<CallStats> st;
        const auto out = run_all_reduce(w, t, op, count, lossy_abs(E), in, &st);
        check_reduced(t, op, 7, in, 0, out[0], count, true, E,
                      std::string("tight ") + name(t) + " " + name(op) + " k=" + std::to_string(k));
        expect_same_bytes(out, count * dsize(t), "tight");
        if (k == 64.0) {
          EXPECT_FALSE(st[0].exact_fallback) << name(t) << " " << name(op);
        }
      }
    }
  }
}

// float16 / bfloat16 near their resolution: the quantizer checks codes in
// double (LossyPlan::exact_check), so only the one final rounding of T is in
// the budget and bounds that used to run exactly (bf16 at rel 1e-2 on 2 and 4
// ranks; f16 at rel 1e-3 on 2) compress, within E on every element.
TEST(CollectiveAllReduce, SixteenBitFloatsCompressNearTheirResolution) {
  struct Case {
    DataType t;
    int N;
    double rel;
  };
  for (const Case c : {Case{DataType::BF16, 2, 1e-2}, Case{DataType::BF16, 4, 1e-2}, Case{DataType::F16, 2, 1e-3}}) {
    std::unique_ptr<World> own;
    if (c.N != 2) own = std::make_unique<World>(c.N, 2048);
    World& w = c.N == 2 ? world(2) : *own;
    const size_t count = 3000;
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < c.N; ++r) {
      in.push_back(make_input(c.t, count, r, 5));
      // A smooth field with a little noise (gradient-like magnitudes).
      for (size_t i = 0; i < count; ++i) {
        set(c.t, in.back(), i, std::sin(0.01 * double(i) + r) + 0.05 * get(c.t, in.back(), i));
      }
    }
    double lo = 1e300, hi = -1e300;
    for (auto& b : in) {
      for (size_t i = 0; i < count; ++i) {
        lo = std::min(lo, get(c.t, b, i));
        hi = std::max(hi, get(c.t, b, i));
      }
    }
    const double E = c.rel * (hi - lo);
    for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
      const std::string what = std::string(name(c.t)) + " " + name(op) + " on " + std::to_string(c.N) + " ranks";
      std::vector<CallStats> st;
      const auto out = run_all_reduce(w, c.t, op, count, lossy_rel(c.rel), in, &st);
      EXPECT_FALSE(st[0].exact_fallback) << what;
      EXPECT_GT(st[0].ratio, 1.5) << what;
      check_reduced(c.t, op, c.N, in, 0, out[0], count, true, E, what);
      expect_same_bytes(out, count * dsize(c.t), what);
    }
  }
}

// ---- mostly-zero inputs ---------------------------------------------------------------

/// Rank r's input: `density` of the elements drawn from [-1, 1], the rest +0.0,
/// with a -0.0 and a value far below the grid step among the zeros (listed by
/// the scan, code 0: the output there must be +0.0 like the dense path's).
std::vector<uint8_t> sparse_input(DataType t, size_t n, int r, double density) {
  std::vector<uint8_t> b(n * dsize(t) + 1, 0);
  std::mt19937_64 rng(uint64_t(r) * 104729 + n + uint64_t(t) * 31);
  std::uniform_real_distribution<double> u(-1, 1), p(0, 1);
  for (size_t i = 0; i < n; ++i)
    if (p(rng) < density) set(t, b, i, u(rng));
  if (n > 10) {
    set(t, b, size_t(r) % n, -0.0);
    set(t, b, (size_t(r) + 5) % n, t == DataType::F64 ? 1e-200 : 1e-6);
  }
  return b;
}

// Lossy sums of mostly-zero inputs take the list path (the scan lists the
// nonzeros, the steps carry lists, the results are written from lists) and,
// when every rank's input is listed, the larger slices. The result bits are
// those of the dense path (a forced codec other than Sparse turns lists off),
// within E, identical on every rank; in place and out of place; with a dense
// rank among sparse ones (no larger slices then), an all-zero rank, and a
// dense run inside a listed input (its slices refuse the list: the dense
// step, and lists again downstream); on 2 to 9 ranks.
TEST(CollectiveSparseInput, SameBitsAsTheDensePath) {
  for (int N : {2, 3, 4, 9}) {
    std::unique_ptr<World> own;
    if (N == 9) own = std::make_unique<World>(N, 1024);
    World& w = N == 9 ? *own : world(N);
    for (DataType t : {DataType::F32, DataType::F64, DataType::F16, DataType::BF16}) {
      for (size_t count : {size_t(1), size_t(33), size_t(5000), size_t(20011)}) {
        if (N == 9 && count < 20011) continue;
        for (int mix = 0; mix < 4; ++mix) {
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) {
            if (mix == 1 && r == N - 1) {
              in.push_back(make_input(t, count, r));  // one dense rank
            } else if (mix == 2 && r == 0) {
              in.push_back(std::vector<uint8_t>(count * dsize(t) + 1, 0));  // all +0.0
            } else {
              in.push_back(sparse_input(t, count, r, N == 9 ? 0.002 : 0.01));
              if (mix == 3 && r == 1 && count > 10000) {
                const auto dense = make_input(t, count, r);  // a dense run of 600 in a listed input
                std::memcpy(in.back().data() + 3000 * dsize(t), dense.data() + 3000 * dsize(t), 600 * dsize(t));
              }
            }
          }
          const double E = lossy_bound(t);
          for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
            for (bool in_place : {false, true}) {
              const std::string what = "N=" + std::to_string(N) + " " + name(t) + " count=" + std::to_string(count) +
                                       " mix=" + std::to_string(mix) + " " + name(op) + (in_place ? " in place" : "");
              Compression dense = Compression::lossy_abs(E);
              dense.codec = "rans";
              std::vector<CallStats> st;
              const auto got = run_all_reduce(w, t, op, count, lossy_abs(E), in, &st, in_place);
              const auto want = run_all_reduce(w, t, op, count, dense, in, nullptr, in_place);
              check_reduced(t, op, N, in, 0, got[0], count, true, E, what);
              expect_same_bytes(got, count * dsize(t), what);
              ASSERT_EQ(0, std::memcmp(got[0].data(), want[0].data(), count * dsize(t))) << what;
              EXPECT_FALSE(st[0].exact_fallback) << what;
              if (!std::getenv("NCCLZ_TEST_CODEC") && count == 20011 && mix == 0 && N <= 4) {
                // ~10 nonzeros a slice at this size: the slices' fixed bytes weigh, more so
                // against 2-byte raw elements
                EXPECT_GT(st[0].ratio, dsize(t) >= 4 ? 8.0 : 4.0) << what;
              }
            }
          }
        }
      }
    }
  }
}

TEST(CollectiveSparseInput, ReduceScatterAndForcedSparse) {
  World& w = world(3);
  const size_t rc = 7001;
  const DataType t = DataType::F32;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 3; ++r) in.push_back(sparse_input(t, 3 * rc, r, 0.02));
  Compression sparse = Compression::lossy_abs(1e-3), dense = Compression::lossy_abs(1e-3);
  sparse.codec = "sparse";
  dense.codec = "block";
  std::vector<std::vector<uint8_t>> out[3];
  int k = 0;
  for (const Compression& c : {lossy_abs(1e-3), sparse, dense}) {
    out[k].assign(3, std::vector<uint8_t>(rc * 4 + 1, 0xCD));
    w.run([&](int r, Communicator& comm) {
      comm.reduce_scatter(in[size_t(r)].data(), out[k][size_t(r)].data(), rc, t, RedOp::Sum, c);
    });
    for (int r = 0; r < 3; ++r) {
      check_reduced(t, RedOp::Sum, 3, in, size_t(r) * rc, out[k][size_t(r)], rc, true, 1e-3,
                    "sparse RS rank " + std::to_string(r));
    }
    ++k;
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[0][size_t(r)], out[2][size_t(r)]) << r;
    EXPECT_EQ(out[1][size_t(r)], out[2][size_t(r)]) << r;
  }
}

TEST(CollectiveSparseInput, LargerSlicesAreAgreedOrRefused) {
  // Slicing must match on both ends of every connection: ranks that disagree
  // on the larger slices fail at creation, clearly, on every rank.
  const auto errs = ncclz_test::creation_errors(2, [](int r, CommConfig& cfg) {
    cfg.slot_bytes = 4096;
    cfg.sparse_slice_bytes = r == 0 ? 16384 : 32768;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errs[size_t(r)].find("NCCLZ_SPARSE_SLICE_BYTES"), std::string::npos) << r << ": " << errs[size_t(r)];
  }
}

TEST(CollectiveWorkerPool, RunsEveryPartOncePerJob) {
  base::WorkerPool pool(3);
  std::vector<std::atomic<int>> hits(4);
  for (int job = 0; job < 500; ++job) {
    const int n = 1 + job % 4;
    pool.run(n, [&](int i) { hits[size_t(i)]++; });
  }
  EXPECT_EQ(hits[0].load(), 500);
  EXPECT_EQ(hits[1].load(), 375);
  EXPECT_EQ(hits[2].load(), 250);
  EXPECT_EQ(hits[3].load(), 125);
  std::vector<int> v(1 << 20, 1);
  std::atomic<long> sum{0};
  base::parallel_for(&pool, 4, v.size(), [&](size_t b, size_t e, int) {
    long s = 0;
    for (size_t i = b; i < e; ++i) s += v[i];
    sum += s;
  });
  EXPECT_EQ(sum.load(), long(v.size()));
}

TEST(CollectiveLossyPlan, BudgetAndCodeWidth) {
  using core::Combine;
  core::DataStats g;
  g.any_finite = true;
  g.lo = -1;
  g.hi = 1;
  g.maxabs = 1;
  // f32 sum over 8 ranks: the budget adds up to at most E.
  auto p = core::plan_lossy(codec::ElemType::F32, Combine::Sum, 8, 1e-3, g);
  ASSERT_TRUE(p.compress);
  EXPECT_FALSE(p.wide);
  const double u = std::ldexp(1.0, -24), R = 8 * (1 + 1e-3) + 1e-3;
  const double delta = 2 * (1 + 1e-3) * u + 3 * (1 + 1e-3) * std::ldexp(1.0, -50);
  EXPECT_LE(8 * (p.eb + delta) + R * u + R * std::ldexp(1.0, -50), 1e-3);
  EXPECT_GT(p.eb, 0.99e-3 / 8);
  EXPECT_GT(p.check_eb, p.eb);
  EXPECT_LE(int64_t(8) * p.limit, int64_t(2147483647));
  // Values far above the bound: int64 codes.
  g.maxabs = 1e6;
  p = core::plan_lossy(codec::ElemType::F64, Combine::Sum, 4, 1e-5, g);
  ASSERT_TRUE(p.compress);
  EXPECT_TRUE(p.wide);
  // Too far even for int64, a bound below f16's own rounding, non-finite inputs,
  // a zero bound: the exact path.
  EXPECT_FALSE(core::plan_lossy(codec::ElemType::F64, Combine::Sum, 4, 1e-15, g).compress);
  g.maxabs = 1;
  EXPECT_FALSE(core::plan_lossy(codec::ElemType::F16, Combine::Sum, 8, 1e-3, g).compress);
  EXPECT_TRUE(core::plan_lossy(codec::ElemType::F16, Combine::Select, 8, 1e-2, g).compress);
  // 16-bit floats check their codes in double (only the final rounding of T in
  // the budget); the others after rounding to T.
  p = core::plan_lossy(codec::ElemType::BF16, Combine::Sum, 2, 0.02, g);
  ASSERT_TRUE(p.compress);
  EXPECT_TRUE(p.exact_check);
  const double R2 = (2 * (1 + 0.02) + 0.02) * (1 + std::ldexp(1.0, -30)), hu_r = R2 * std::ldexp(1.0, -8);
  EXPECT_LE(2 * (p.eb + 3 * (1 + 0.02) * std::ldexp(1.0, -50)) + hu_r + R2 * std::ldexp(1.0, -50), 0.02 * (1 + 1e-14));
  EXPECT_GT(p.eb, 0.99 * (0.02 - hu_r) / 2);
  EXPECT_LT(p.check_eb - p.eb, 1e-12);
  EXPECT_FALSE(core::plan_lossy(codec::ElemType::F32, Combine::Sum, 2, 0.02, g).exact_check);
  EXPECT_FALSE(core::plan_lossy(codec::ElemType::F32, Combine::Sum, 2, 0, g).compress);
  g.nonfinite = true;
  EXPECT_FALSE(core::plan_lossy(codec::ElemType::F32, Combine::Sum, 2, 1, g).compress);
}

// ---- reduce-scatter -----------------------------------------------------------------

TEST(CollectiveReduceScatter, TypesOpsModesWorlds) {
  for (int N : kWorlds) {
    World& w = world(N);
    for (size_t rc : {size_t(0), size_t(1), size_t(33), size_t(700)}) {
      for (DataType t : {DataType::F32, DataType::F16, DataType::BF16, DataType::F64, DataType::I32, DataType::U8}) {
        std::vector<std::vector<uint8_t>> in;
        for (int r = 0; r < N; ++r) in.push_back(make_input(t, rc * size_t(N), r));
        for (RedOp op : kOps) {
          const std::string what =
              "RS N=" + std::to_string(N) + " rc=" + std::to_string(rc) + " " + name(t) + " " + name(op);
          std::vector<Compression> modes = {Compression::none(), lossless()};
          if (is_float(t) && op != RedOp::Prod) modes.push_back(lossy_abs(lossy_bound(t)));
          std::vector<std::vector<uint8_t>> first;
          for (const Compression& c : modes) {
            std::vector<std::vector<uint8_t>> out(static_cast<size_t>(N), std::vector<uint8_t>(rc * dsize(t) + 1));
            std::vector<CallStats> st(static_cast<size_t>(N));
            w.run([&](int r, Communicator& comm) {
              comm.reduce_scatter(in[size_t(r)].data(), out[size_t(r)].data(), rc, t, op, c, &st[size_t(r)]);
            });
            const bool lossy = c.mode == Compression::Mode::LossyAbs;
            for (int r = 0; r < N; ++r) {
              check_reduced(t, op, N, in, size_t(r) * rc, out[size_t(r)], rc, lossy, c.bound,
                            what + " rank " + std::to_string(r));
            }
            if (c.mode == Compression::Mode::None) first = out;
            if (c.mode == Compression::Mode::Lossless) {
              for (int r = 0; r < N; ++r) {
                ASSERT_EQ(0, std::memcmp(first[size_t(r)].data(), out[size_t(r)].data(), rc * dsize(t))) << what;
              }
            }
            if (lossy) {
              EXPECT_FALSE(st[0].exact_fallback) << what;
            }
          }
        }
      }
    }
  }
}

TEST(CollectiveReduceScatter, InPlaceAndAllGatherInPlace) {
  // NCCL's in-place layouts: recv = send + rank*recv_count (reduce-scatter),
  // send = recv + rank*send_count (allgather).
  World& w = world(3);
  const size_t rc = 1000;
  for (const Compression& c : {Compression::none(), lossless()}) {
    std::vector<std::vector<float>> buf(3), orig(3);
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < 3 * rc; ++i) buf[size_t(r)].push_back(float(i % 97) * 0.25f + float(r));
      orig[size_t(r)] = buf[size_t(r)];
    }
    w.run([&](int r, Communicator& comm) {
      float* b = buf[size_t(r)].data();
      comm.reduce_scatter(b, b + size_t(r) * rc, rc, DataType::F32, RedOp::Sum, c);
    });
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < rc; ++i) {
        const size_t j = size_t(r) * rc + i;
        ASSERT_EQ(buf[size_t(r)][j], orig[0][j] + orig[1][j] + orig[2][j]);
      }
    }
    w.run([&](int r, Communicator& comm) {
      float* b = buf[size_t(r)].data();
      comm.all_gather(b + size_t(r) * rc, b, rc, DataType::F32, c);
    });
    for (int r = 0; r < 3; ++r) ASSERT_EQ(buf[size_t(r)], buf[0]);
  }
}

TEST(CollectiveAllReduce, LossyUnderMinBytesRunsExactly) {
  World& w = world(2);
  std::vector<std::vector<uint8_t>> in = {make_input(DataType::F32, 100, 0), make_input(DataType::F32, 100, 1)};
  Compression c = lossy_abs(1e-3);
  c.min_bytes = 1 << 20;
  std::vector<CallStats> st;
  const auto out = run_all_reduce(w, DataType::F32, RedOp::Sum, 100, c, in, &st);
  EXPECT_TRUE(st[0].exact_fallback);
  check_reduced(DataType::F32, RedOp::Sum, 2, in, 0, out[0], 100, true, 1e-3, "min_bytes");
  Compression l = lossless();
  l.min_bytes = 1 << 20;
  run_all_reduce(w, DataType::F32, RedOp::Sum, 100, l, in, &st);
  EXPECT_EQ(st[0].raw_bytes, st[0].wire_bytes);  // ran as none: raw slots
}

// ---- allgather ------------------------------------------------------------------------

TEST(CollectiveAllGather, TypesModesWorlds) {
  for (int N : kWorlds) {
    World& w = world(N);
    for (size_t sc : {size_t(0), size_t(1), size_t(31), size_t(900)}) {
      for (DataType t : kTypes) {
        std::vector<std::vector<uint8_t>> in;
        for (int r = 0; r < N; ++r) in.push_back(make_input(t, sc, r));
        std::vector<Compression> modes = {Compression::none(), lossless()};
        if (is_float(t)) modes.push_back(lossy_abs(lossy_bound(t) / 8));
        for (const Compression& c : modes) {
          const std::string what = "AG N=" + std::to_string(N) + " sc=" + std::to_string(sc) + " " + name(t) +
                                   " mode " + std::to_string(int(c.mode));
          std::vector<std::vector<uint8_t>> out(static_cast<size_t>(N),
                                                std::vector<uint8_t>(sc * size_t(N) * dsize(t) + 1));
          w.run([&](int r, Communicator& comm) {
            comm.all_gather(in[size_t(r)].data(), out[size_t(r)].data(), sc, t, c);
          });
          expect_same_bytes(out, sc * size_t(N) * dsize(t), what);
          for (int k = 0; k < N; ++k) {
            for (size_t i = 0; i < sc; ++i) {
              const double want = get(t, in[size_t(k)], i), got = get(t, out[0], size_t(k) * sc + i);
              if (c.mode == Compression::Mode::LossyAbs) {
                ASSERT_LE(std::fabs(got - want), c.bound) << what;
              } else {
                ASSERT_EQ(0, std::memcmp(in[size_t(k)].data() + i * dsize(t),
                                         out[0].data() + (size_t(k) * sc + i) * dsize(t), dsize(t)))
                    << what;
              }
            }
          }
        }
      }
    }
  }
}

// ---- broadcast ------------------------------------------------------------------------

TEST(CollectiveBroadcast, RootsTypesModesWorlds) {
  for (int N : kWorlds) {
    World& w = world(N);
    for (size_t count : {size_t(0), size_t(1), size_t(33), size_t(3001)}) {
      for (DataType t : {DataType::F32, DataType::BF16, DataType::F64, DataType::I64, DataType::U8}) {
        for (int root : {0, N - 1, N / 2}) {
          const auto src = make_input(t, count, 100 + root);
          std::vector<Compression> modes = {Compression::none(), lossless()};
          if (is_float(t)) modes.push_back(lossy_rel(1e-3));
          for (const Compression& c : modes) {
            const std::string what = "BC N=" + std::to_string(N) + " count=" + std::to_string(count) + " " + name(t) +
                                     " root " + std::to_string(root) + " mode " + std::to_string(int(c.mode));
            std::vector<std::vector<uint8_t>> buf(static_cast<size_t>(N));
            for (int r = 0; r < N; ++r) buf[size_t(r)] = r == root ? src : make_input(t, count, 555 + r);
            std::vector<CallStats> st(static_cast<size_t>(N));
            w.run([&](int r, Communicator& comm) {
              comm.broadcast(buf[size_t(r)].data(), count, t, root, c, &st[size_t(r)]);
            });
            expect_same_bytes(buf, count * dsize(t), what);
            if (c.mode == Compression::Mode::LossyRel) {
              for (size_t i = 0; i < count; ++i) {
                ASSERT_LE(std::fabs(get(t, buf[0], i) - get(t, src, i)), st[size_t(root)].error_bound) << what;
              }
            } else {
              ASSERT_EQ(0, std::memcmp(buf[0].data(), src.data(), count * dsize(t))) << what;
            }
          }
        }
      }
    }
  }
}

// ---- send / recv ----------------------------------------------------------------------

TEST(CollectiveSendRecv, AllPairsAndModes) {
  for (int N : {2, 3, 4}) {
    World& w = world(N);
    for (size_t count : {size_t(0), size_t(1), size_t(4097)}) {
      for (const Compression& c : {Compression::none(), lossless(), lossy_abs(1e-3)}) {
        // Rank 0 sends to everyone (in rank order); everyone sends back.
        std::vector<std::vector<uint8_t>> got(static_cast<size_t>(N));
        std::vector<uint8_t> back0;
        const DataType t = DataType::F32;
        w.run([&](int r, Communicator& comm) {
          if (r == 0) {
            for (int p = 1; p < N; ++p) {
              const auto data = make_input(t, count, 10 * p);
              comm.send(data.data(), count, t, p, c);
            }
            for (int p = 1; p < N; ++p) {
              std::vector<uint8_t> b(count * 4 + 1);
              comm.recv(b.data(), count, t, p, c);
              const auto want = make_input(t, count, 20 * p);
              for (size_t i = 0; i < count; ++i) {
                const double tol = c.mode == Compression::Mode::LossyAbs ? c.bound : 0;
                ASSERT_LE(std::fabs(get(t, b, i) - get(t, want, i)), tol);
              }
            }
          } else {
            std::vector<uint8_t> b(count * 4 + 1);
            comm.recv(b.data(), count, t, 0, c);
            const auto want = make_input(t, count, 10 * r);
            for (size_t i = 0; i < count; ++i) {
              const double tol = c.mode == Compression::Mode::LossyAbs ? c.bound : 0;
              ASSERT_LE(std::fabs(get(t, b, i) - get(t, want, i)), tol);
            }
            const auto data = make_input(t, count, 20 * r);
            comm.send(data.data(), count, t, 0, c);
          }
        });
      }
    }
  }
}

// A lossy send or recv quantizes its whole buffer before the transfer where
// the rank has cores to spare (on the pool), and slice by slice in the
// link's loop where it has fewer than two (Runtime::short_of_cores,
// NCCLZ_CORES_PER_RANK here): the same codes, so the same bits, both ways.
TEST(CollectiveSendRecv, LossyBitsAlikeWhetherQuantizedBeforeOrInTheLoop) {
  const size_t count = 20011;  // many 1 KiB slots
  const auto x = make_input(DataType::F32, count, 7), z = make_input(DataType::F32, count, 8);
  std::vector<std::vector<uint8_t>> got;  // per cores setting: what rank 1, then rank 0, received
  for (const char* cores : {"8", "0.5"}) {
    setenv("NCCLZ_CORES_PER_RANK", cores, 1);
    ncclz_test::Ranks w(2);
    unsetenv("NCCLZ_CORES_PER_RANK");
    std::vector<std::vector<uint8_t>> at(4, std::vector<uint8_t>(count * 4));  // [mode * 2 + receiver]
    w.run([&](int r, Communicator& comm) {
      int k = 0;
      for (const Compression& c : {lossy_abs(1e-3), Compression::lossy_rel(1e-4)}) {
        if (r == 0) {
          comm.send(x.data(), count, DataType::F32, 1, c);
          comm.recv(at[size_t(k)].data(), count, DataType::F32, 1, c);
        } else {
          comm.recv(at[size_t(k + 1)].data(), count, DataType::F32, 0, c);
          comm.send(z.data(), count, DataType::F32, 0, c);
        }
        k += 2;
      }
    });
    for (size_t i = 0; i < count; ++i) {
      ASSERT_LE(std::fabs(get(DataType::F32, at[1], i) - get(DataType::F32, x, i)), 1e-3 * 1.000001) << cores;
      ASSERT_LE(std::fabs(get(DataType::F32, at[0], i) - get(DataType::F32, z, i)), 1e-3 * 1.000001) << cores;
    }
    got.insert(got.end(), at.begin(), at.end());
  }
  for (size_t k = 4; k < got.size(); ++k) EXPECT_EQ(got[k], got[k % 4]) << "setting " << k / 4 << ", buffer " << k % 4;
}

TEST(CollectiveSendRecv, BadPeerIsInvalidArgument) {
  World& w = world(2);
  float x = 1;
  w.run([&](int r, Communicator& comm) {
    EXPECT_THROW(comm.send(&x, 1, DataType::F32, r, Compression::none()), InvalidArgument);
    EXPECT_THROW(comm.send(&x, 1, DataType::F32, 2, Compression::none()), InvalidArgument);
    EXPECT_THROW(comm.recv(&x, 1, DataType::F32, -1, Compression::none()), InvalidArgument);
  });
}

TEST(CollectiveSendRecv, MismatchedCountsFailOnBothSides) {
  World& w = world(2);
  std::vector<float> b(100, 1.0f);
  std::atomic<int> remote{0};
  w.run([&](int r, Communicator& comm) {
    try {
      if (r == 0) {
        comm.send(b.data(), 100, DataType::F32, 1, Compression::none());
      } else {
        comm.recv(b.data(), 99, DataType::F32, 0, Compression::none());
      }
    } catch (const RemoteError& e) {
      ++remote;
      EXPECT_NE(std::string(e.what()).find("count"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(remote.load(), 2);
  // The link is still in step.
  w.run([&](int r, Communicator& comm) {
    if (r == 0) comm.send(b.data(), 100, DataType::F32, 1, Compression::none());
    if (r == 1) comm.recv(b.data(), 100, DataType::F32, 0, Compression::none());
  });
}

// ---- barrier, mismatches, bad arguments, abort ---------------------------------------

TEST(CollectiveBarrier, Works) {
  for (int N : {1, 3, 8}) {
    World& w = world(N);
    std::atomic<int> arrived{0};
    w.run([&](int r, Communicator& comm) {
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++arrived;
      comm.barrier();
      EXPECT_EQ(arrived.load(), N);
    });
  }
}

TEST(CollectiveMismatch, DetectedOnEveryRankWithoutHanging) {
  World& w = world(3);
  std::vector<float> a(64, 1.0f), b(64);
  std::vector<std::string> msgs(3);
  w.run([&](int r, Communicator& comm) {
    try {
      if (r == 2) {
        comm.all_reduce(a.data(), b.data(), 60, DataType::F32, RedOp::Sum, Compression::none());
      } else {
        comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
      }
      ADD_FAILURE() << "rank " << r << " did not detect the mismatch";
    } catch (const RemoteError& e) {
      msgs[size_t(r)] = e.what();
    }
  });
  for (auto& m : msgs) {
    EXPECT_NE(m.find("rank 0 called"), std::string::npos) << m;
    EXPECT_NE(m.find("all_reduce(count=64, float32, sum, none)"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 2 called"), std::string::npos) << m;
    EXPECT_NE(m.find("count=60"), std::string::npos) << m;
  }
  // Different collectives.
  w.run([&](int r, Communicator& comm) {
    if (r == 1) {
      EXPECT_THROW(comm.broadcast(a.data(), 64, DataType::F32, 0, Compression::none()), RemoteError);
    } else {
      EXPECT_THROW(comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none()),
                   RemoteError);
    }
  });
  // Different compression.
  w.run([&](int r, Communicator& comm) {
    const Compression c = r == 0 ? lossy_abs(1e-3) : lossless();
    EXPECT_THROW(comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, c), RemoteError);
  });
  // The communicator is still usable (each rank its own output: the latency
  // algorithm sums in the output, and ranks here are threads).
  std::vector<std::vector<float>> outs(3, std::vector<float>(64));
  w.run([&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), outs[size_t(r)].data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    EXPECT_EQ(outs[size_t(r)][5], 3.0f);
  });
}

TEST(CollectiveArguments, InvalidOnEveryRankOrRemoteOnTheOthers) {
  World& w = world(3);
  std::vector<uint8_t> a(256), b(256);
  w.run([&](int, Communicator& comm) {
    EXPECT_THROW(comm.all_reduce(a.data(), b.data(), 8, DataType::I32, RedOp::Sum, lossy_abs(1)), InvalidArgument);
    EXPECT_THROW(comm.all_reduce(a.data(), b.data(), 8, DataType::F32, RedOp::Prod, lossy_abs(1)), InvalidArgument);
    EXPECT_THROW(comm.reduce_scatter(a.data(), b.data(), 8, DataType::U8, RedOp::Sum, lossy_rel(0.1)), InvalidArgument);
    EXPECT_THROW(comm.all_reduce(a.data(), b.data(), 8, DataType::F32, RedOp::Sum, lossy_abs(-1)), InvalidArgument);
    EXPECT_THROW(comm.broadcast(a.data(), 8, DataType::F32, 3, Compression::none()), InvalidArgument);
    EXPECT_THROW(comm.broadcast(a.data(), 8, DataType::F32, -1, Compression::none()), InvalidArgument);
    Compression bad = lossless();
    bad.codec = "zstd";
    EXPECT_THROW(comm.all_gather(a.data(), b.data(), 8, DataType::F32, bad), InvalidArgument);
    EXPECT_THROW(comm.all_reduce(nullptr, b.data(), 8, DataType::F32, RedOp::Sum, Compression::none()),
                 InvalidArgument);
  });
  // Only rank 1's arguments are bad: it gets InvalidArgument, the others RemoteError.
  w.run([&](int r, Communicator& comm) {
    const int root = r == 1 ? 7 : 0;
    if (r == 1) {
      EXPECT_THROW(comm.broadcast(a.data(), 8, DataType::F32, root, Compression::none()), InvalidArgument);
    } else {
      EXPECT_THROW(comm.broadcast(a.data(), 8, DataType::F32, root, Compression::none()), RemoteError);
    }
  });
  w.run([&](int, Communicator& comm) { comm.barrier(); });
}

// Communicator::refuse: rank 2 refuses a call the others make (as a caller
// with checks of its own does): it returns normally, the others raise
// RemoteError naming it, rounds() counts the round, and the next calls meet:
// their sums are right (before, rank 2's next call met the others' refused
// one). A send refused with a peer that is no peer returns at once.
static void refuse_call(Communicator& comm, CallKind kind, int root, const std::string& why,
                        const size_t* send_counts = nullptr) {
  CallArgs args;
  args.kind = kind;
  args.root = root;
  args.send_counts = send_counts;
  comm.refuse(args, why);
}

TEST(CollectiveArguments, ARefusedCallKeepsTheRanksInStep) {
  World& w = world(3);
  w.run([&](int r, Communicator& comm) {
    const uint64_t before = comm.rounds();
    std::vector<float> a(100, float(r + 1)), b(100);
    if (r == 2) {
      refuse_call(comm, CallKind::AllReduce, 0, "the caller's own check");
      refuse_call(comm, CallKind::Send, 9, "no such peer");
    } else {
      try {
        comm.all_reduce(a.data(), b.data(), 100, DataType::F32, RedOp::Sum, Compression::none());
        ADD_FAILURE() << "rank " << r << ": the call returned";
      } catch (const RemoteError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("invalid arguments"), std::string::npos) << e.what();
        // the refusal's count and type are unknown: the message says so instead of "count=0, float32"
        EXPECT_NE(std::string(e.what()).find("all_reduce(refused before the call"), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(comm.rounds(), before + 1);
    for (int k = 1; k <= 3; ++k) {
      std::fill(a.begin(), a.end(), float(10 * k + r));
      comm.all_reduce(a.data(), b.data(), 100, DataType::F32, RedOp::Sum, Compression::none());
      EXPECT_EQ(b[0], float(30 * k + 3)) << "rank " << r << ", call " << k;
    }
    EXPECT_EQ(comm.rounds(), before + 4);
    // A refused all_to_allv's count arrays are not read (a bad pointer here),
    // and a refused broadcast names its root in the others' message.
    std::vector<float> c(3 * 100), d(3 * 100);
    if (r == 0) {
      refuse_call(comm, CallKind::AllToAllv, 0, "split sizes", reinterpret_cast<const size_t*>(uintptr_t(8)));
    } else {
      EXPECT_THROW(comm.all_to_all(c.data(), d.data(), 100, DataType::F32, Compression::none()), RemoteError);
    }
    if (r == 1) {
      refuse_call(comm, CallKind::Broadcast, 2, "");
    } else {
      try {
        comm.broadcast(a.data(), 100, DataType::F32, 2, Compression::none());
        ADD_FAILURE() << "rank " << r << ": the broadcast returned";
      } catch (const RemoteError& e) {
        EXPECT_NE(std::string(e.what()).find("broadcast(root=2, refused before the call"), std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(comm.rounds(), before + 6);
  });
}

TEST(CollectiveAbort, WakesBlockedCallsAndSticks) {
  World w(3, 4096);
  std::vector<float> a(1000, 1.0f), b(1000);
  std::atomic<int> aborted{0};
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    w.comms[1]->abort("test abort");
    w.comms[2]->abort("test abort");
  });
  // Ranks 1 and 2 enter an allreduce that rank 0 never joins.
  w.run([&](int r, Communicator& comm) {
    if (r == 0) return;
    try {
      comm.all_reduce(a.data(), b.data(), 1000, DataType::F32, RedOp::Sum, Compression::none());
    } catch (const Aborted&) {
      ++aborted;
    }
  });
  killer.join();
  EXPECT_EQ(aborted.load(), 2);
  EXPECT_THROW(w.comms[1]->barrier(), Aborted);
}

TEST(CollectiveTimeout, AMissingRankIsATimeoutNotAHang) {
  World w(2, 4096, 4, 2, 0.5);
  std::vector<float> a(100, 1.0f), b(100);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(w.comms[1]->all_reduce(a.data(), b.data(), 100, DataType::F32, RedOp::Sum, Compression::none()),
               Timeout);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_THROW(w.comms[1]->barrier(), Aborted);  // the FIFOs are out of step: the communicator is done
}

TEST(CollectiveStats, CountBytesAndTime) {
  World& w = world(2);
  const size_t count = 10000;
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < 2; ++r) {
    in.push_back(std::vector<uint8_t>(count * 4, 0));  // zeros: very compressible
  }
  std::vector<CallStats> st;
  run_all_reduce(w, DataType::F32, RedOp::Sum, count, Compression::none(), in, &st);
  EXPECT_EQ(st[0].raw_bytes, st[0].wire_bytes);
  EXPECT_EQ(st[0].raw_bytes, uint64_t(count * 4));  // 2(N-1)/N of the buffer with N = 2
  EXPECT_GT(st[0].wall_s, 0);
  run_all_reduce(w, DataType::F32, RedOp::Sum, count, lossy_abs(1e-3), in, &st);
  EXPECT_EQ(st[0].raw_bytes, uint64_t(count * 4));
  if (!std::getenv("NCCLZ_TEST_CODEC")) {
    EXPECT_GT(st[0].ratio, 5);
  }
  EXPECT_GT(st[0].encode_s, 0);
  EXPECT_GT(st[0].decode_s, 0);
  EXPECT_GT(st[0].quantize_s, 0);
}

}  // namespace
