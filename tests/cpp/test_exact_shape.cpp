// The exact calls' ring shape (core/config.hpp, resolve_exact_shape): how the
// rule resolves, that every rank of a communicator agrees on it, and that the
// calls it shapes keep their promises: none and lossless bit-identical, the
// same bits on every rank, order-free reductions identical to the old shape,
// float sums within the float rounding of the fp64 reference, lossy calls
// within their bound on every element. Sizes straddle the slice, chunk and
// channel boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"

using namespace ncclz;
using ncclz_test::creation_errors;
using ncclz_test::Ranks;

namespace {

/// Sets (or with nullptr unsets) a variable for a scope, then puts the old value back.
struct EnvFor {
  std::string name, old;
  bool had;
  EnvFor(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (v) {
      setenv(n, v, 1);
    } else {
      unsetenv(n);
    }
  }
  ~EnvFor() {
    if (had) {
      setenv(name.c_str(), old.c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
};

/// The shape's variables unset (a developer's environment may set them).
struct ShapeEnv {
  EnvFor a{"NCCLZ_NCHANNELS", nullptr}, b{"NCCLZ_EXACT_NCHANNELS", nullptr}, c{"NCCLZ_EXACT_SLICE_BYTES", nullptr},
      d{"NCCLZ_SLOT_BYTES", nullptr}, e{"NCCLZ_LATENCY_BYTES", nullptr};
  EnvFor cores;
  explicit ShapeEnv(const char* cores_per_rank) : cores("NCCLZ_CORES_PER_RANK", cores_per_rank) {}
};

CommConfig with_channels(int nchannels, size_t slot) {
  CommConfig c;
  c.nchannels = nchannels;
  c.slot_bytes = slot;
  return c;
}

}  // namespace

TEST(ExactShape, TheRuleResolves) {
  // Auto channels and some rank short of cores: one ring of 128 KiB slices.
  CommConfig c = with_channels(2, size_t(1) << 20);
  core::resolve_exact_shape(c, true, true, false);
  EXPECT_EQ(c.exact_nchannels, 1);
  EXPECT_EQ(c.exact_slice_bytes, core::kOneRingSliceBytes);
  // Cores enough: today's shape.
  c = with_channels(4, size_t(1) << 20);
  core::resolve_exact_shape(c, true, false, false);
  EXPECT_EQ(c.exact_nchannels, 4);
  EXPECT_EQ(c.exact_slice_bytes, size_t(1) << 20);
  // A channel count the user set: kept for exact calls too.
  c = with_channels(2, size_t(1) << 20);
  core::resolve_exact_shape(c, false, true, false);
  EXPECT_EQ(c.exact_nchannels, 2);
  EXPECT_EQ(c.exact_slice_bytes, size_t(1) << 20);
  // Sockets: today's shape.
  c = with_channels(2, size_t(1) << 20);
  core::resolve_exact_shape(c, true, true, true);
  EXPECT_EQ(c.exact_nchannels, 2);
  EXPECT_EQ(c.exact_slice_bytes, size_t(1) << 20);
  // Slots smaller than the one ring's slices: the slots' size.
  c = with_channels(2, 4096);
  core::resolve_exact_shape(c, true, true, false);
  EXPECT_EQ(c.exact_nchannels, 1);
  EXPECT_EQ(c.exact_slice_bytes, 4096u);
  // Set values win, within [1, nchannels] and at most slot_bytes.
  c = with_channels(3, 65536);
  c.exact_nchannels = 2;
  c.exact_slice_bytes = 8192;
  core::resolve_exact_shape(c, true, true, false);
  EXPECT_EQ(c.exact_nchannels, 2);
  EXPECT_EQ(c.exact_slice_bytes, 8192u);
  c = with_channels(3, 65536);
  c.exact_nchannels = 9;
  c.exact_slice_bytes = 1 << 20;
  core::resolve_exact_shape(c, false, false, false);
  EXPECT_EQ(c.exact_nchannels, 3);
  EXPECT_EQ(c.exact_slice_bytes, 65536u);
}

TEST(ExactShape, SettingsAreCheckedAndLowered) {
  const ShapeEnv env(nullptr);
  CommConfig c;
  c.slot_bytes = 65536;
  c.exact_slice_bytes = 1 << 20;
  c.nchannels = 2;
  c.exact_nchannels = 5;
  const CommConfig r = c.resolved();
  EXPECT_EQ(r.exact_slice_bytes, 65536u);  // a slice fills a slot at most
  EXPECT_EQ(r.exact_nchannels, 2);         // no more rings than there are
  CommConfig bad;
  bad.exact_slice_bytes = 512;
  EXPECT_THROW(bad.resolved(), InvalidArgument);
  bad = CommConfig{};
  bad.exact_nchannels = 65;
  EXPECT_THROW(bad.resolved(), InvalidArgument);
  const EnvFor v("NCCLZ_EXACT_SLICE_BYTES", "256K"), n("NCCLZ_EXACT_NCHANNELS", "1");
  const CommConfig e = CommConfig{}.resolved();
  EXPECT_EQ(e.exact_slice_bytes, size_t(256) << 10);
  EXPECT_EQ(e.exact_nchannels, 1);
  EXPECT_EQ(CommConfig::defaults().exact_slice_bytes, 0u);  // unset: agreed at creation
}

TEST(ExactShape, ShortOfCoresMeansFewerThanTwoRings) {
  {
    const EnvFor a("NCCLZ_CORES_PER_RANK", "1.9");
    EXPECT_TRUE(core::rings_share_cores(1));
  }
  {
    const EnvFor a("NCCLZ_CORES_PER_RANK", "0.5");
    EXPECT_TRUE(core::rings_share_cores(1));
  }
  {
    const EnvFor a("NCCLZ_CORES_PER_RANK", "2");
    EXPECT_FALSE(core::rings_share_cores(64));  // the variable is per rank already
  }
}

TEST(ExactShape, TheCommunicatorAgreesAndReportsIt) {
  {
    const ShapeEnv env("0.5");
    Ranks w(3, [](int, CommConfig& c) {
      c.slot_bytes = size_t(1) << 20;
      c.nchannels = 0;
    });
    for (int r = 0; r < 3; ++r) {
      const CommConfig& c = w.comms[size_t(r)]->config();
      EXPECT_EQ(c.nchannels, core::kMinAutoChannels) << r;
      EXPECT_EQ(c.exact_nchannels, 1) << r;
      EXPECT_EQ(c.exact_slice_bytes, core::kOneRingSliceBytes) << r;
    }
  }
  {
    const ShapeEnv env("4");
    Ranks w(2, [](int, CommConfig& c) {
      c.slot_bytes = size_t(1) << 20;
      c.nchannels = 0;
    });
    for (int r = 0; r < 2; ++r) {
      const CommConfig& c = w.comms[size_t(r)]->config();
      EXPECT_EQ(c.nchannels, 4) << r;
      EXPECT_EQ(c.exact_nchannels, 4) << r;
      EXPECT_EQ(c.exact_slice_bytes, size_t(1) << 20) << r;
    }
  }
}

TEST(ExactShape, RanksThatDisagreeFailAtCreation) {
  // Slicing must match on both ends of every connection: a setting made on
  // one rank only fails the communicator on every rank, naming the variable.
  const ShapeEnv env(nullptr);
  for (int which = 0; which < 2; ++which) {
    const auto errs = creation_errors(2, [&](int r, CommConfig& cfg) {
      cfg.slot_bytes = 65536;
      if (r == 1 && which == 0) cfg.exact_slice_bytes = 8192;
      if (r == 1 && which == 1) cfg.exact_nchannels = 1;
    });
    const char* var = which == 0 ? "NCCLZ_EXACT_SLICE_BYTES" : "NCCLZ_EXACT_NCHANNELS";
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(errs[size_t(r)].find(var), std::string::npos) << r << ": " << errs[size_t(r)];
      EXPECT_NE(errs[size_t(r)].find("unset"), std::string::npos) << r << ": " << errs[size_t(r)];
    }
  }
}

namespace {

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast };

/// One call on every rank of `w`: each rank's output bytes and CallStats.
struct Outcome {
  std::vector<std::vector<uint8_t>> out;
  std::vector<CallStats> st;
};

Outcome run_call(Ranks& w, Coll k, size_t count, DataType t, RedOp op, const Compression& c,
                 const std::vector<std::vector<uint8_t>>& in) {
  const int n = w.size();
  const size_t es = dtype_size(t);
  Outcome o;
  o.out.assign(size_t(n), {});
  o.st.assign(size_t(n), {});
  w.run([&](int r, Communicator& comm) {
    std::vector<uint8_t>& out = o.out[size_t(r)];
    CallStats* st = &o.st[size_t(r)];
    switch (k) {
      case Coll::AllReduce:
        out.assign(count * es, 0);
        comm.all_reduce(in[size_t(r)].data(), out.data(), count, t, op, c, st);
        break;
      case Coll::ReduceScatter:
        out.assign(count * es, 0);
        comm.reduce_scatter(in[size_t(r)].data(), out.data(), count, t, op, c, st);
        break;
      case Coll::AllGather:
        out.assign(count * es * size_t(n), 0);
        comm.all_gather(in[size_t(r)].data(), out.data(), count, t, c, st);
        break;
      case Coll::Broadcast:
        out = in[size_t(r)];
        out.resize(count * es);
        comm.broadcast(out.data(), count, t, 1 % n, c, st);
        break;
    }
  });
  return o;
}

/// Rank r's input: `elems` elements of a smooth field with noise (floats) or
/// small integers, seeded by rank and size.
std::vector<uint8_t> make_input(DataType t, size_t elems, int r, uint32_t seed) {
  std::mt19937 g(seed * 977u + uint32_t(r) * 131u + uint32_t(elems));
  std::normal_distribution<double> noise(0, 1);
  std::vector<uint8_t> b(elems * dtype_size(t));
  for (size_t i = 0; i < elems; ++i) {
    const double v = 10 * std::sin(0.001 * double(i) + r) + 0.1 * noise(g);
    if (t == DataType::F32) {
      const float f = float(v);
      std::memcpy(&b[i * 4], &f, 4);
    } else {
      const int32_t x = int32_t(std::lround(v * 100));
      std::memcpy(&b[i * 4], &x, 4);
    }
  }
  return b;
}

float f32_at(const std::vector<uint8_t>& b, size_t i) {
  float f;
  std::memcpy(&f, &b[i * 4], 4);
  return f;
}

}  // namespace

TEST(ExactShape, NoneAndLosslessAgreeEverywhereAroundTheBoundaries) {
  // One ring of 1 KiB slices in 4 KiB slots (the one-ring shape, scaled down)
  // beside the old shape (3 rings of slot-sized slices): float sums within the
  // float rounding of the fp64 reference, none and lossless bit-identical and
  // the same on every rank; max and int32 sums (order-free) identical to the
  // old shape. Counts straddle the latency algorithm's limit, a slice (256
  // floats), a ring chunk (2 slices), a loop (N chunks) and the channel pick.
  const ShapeEnv env("0.5");
  for (int n : {2, 3, 4}) {
    auto shape = [](size_t slice, int exact_ch) {
      return [=](int, CommConfig& c) {
        c.slot_bytes = 4096;
        c.nchannels = 3;
        c.exact_nchannels = exact_ch;
        c.exact_slice_bytes = slice;
        c.two_hop_bytes = 0;  // the rings at every size above latency_bytes (test_latency.cpp: the two hops)
        c.direct_from_bytes = 0;
      };
    };
    Ranks one(n, shape(1024, 1)), old(n, shape(4096, 3));
    const size_t loop = size_t(n) * 512;
    std::vector<size_t> counts = {1000,     1023,           1024,  1025,  loop - 1, loop,
                                  loop + 1, 3 * loop + 257, 65535, 65537, 131073};
    for (size_t count : counts) {
      for (Coll k : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast}) {
        const size_t in_elems = k == Coll::ReduceScatter ? count * size_t(n) : count;
        for (DataType t : {DataType::F32, DataType::I32}) {
          for (RedOp op : {RedOp::Sum, RedOp::Max}) {
            if ((k == Coll::AllGather || k == Coll::Broadcast) && op == RedOp::Max) continue;
            std::vector<std::vector<uint8_t>> in;
            for (int r = 0; r < n; ++r) in.push_back(make_input(t, in_elems, r, uint32_t(count)));
            const std::string what = "n=" + std::to_string(n) + " count=" + std::to_string(count) +
                                     " coll=" + std::to_string(int(k)) + " t=" + dtype_name(t) +
                                     " op=" + std::to_string(int(op));
            const Outcome none = run_call(one, k, count, t, op, Compression::none(), in);
            const Outcome lossless = run_call(one, k, count, t, op, Compression::lossless(), in);
            const Outcome before = run_call(old, k, count, t, op, Compression::none(), in);
            for (int r = 0; r < n; ++r) {
              ASSERT_EQ(none.out[size_t(r)], lossless.out[size_t(r)]) << what << " rank " << r;
              if (k != Coll::ReduceScatter) {
                ASSERT_EQ(none.out[size_t(r)], none.out[0]) << what << " rank " << r;
              }
              const bool order_free =
                  t == DataType::I32 || op == RedOp::Max || k == Coll::AllGather || k == Coll::Broadcast;
              if (order_free) {
                ASSERT_EQ(none.out[size_t(r)], before.out[size_t(r)]) << what << " rank " << r;
              }
              if (count * 4 > 3968) {  // above the latency algorithm's limit (slot_bytes - 128): the ring
                EXPECT_EQ(none.st[size_t(r)].channels, 1) << what;
                EXPECT_EQ(none.st[size_t(r)].slice_bytes, 1024u) << what;
                EXPECT_EQ(lossless.st[size_t(r)].channels, 1) << what;
                EXPECT_EQ(before.st[size_t(r)].slice_bytes, 4096u) << what;
              }
            }
            if (t != DataType::F32 || op != RedOp::Sum || k == Coll::AllGather || k == Coll::Broadcast) continue;
            // Float sums: every element within the float rounding of the fp64 sum.
            for (int r = 0; r < n; ++r) {
              const size_t base = k == Coll::ReduceScatter ? size_t(r) * count : 0;
              for (size_t i = 0; i < count; ++i) {
                double exact = 0, mag = 0;
                for (int q = 0; q < n; ++q) {
                  exact += double(f32_at(in[size_t(q)], base + i));
                  mag += std::fabs(double(f32_at(in[size_t(q)], base + i)));
                }
                const double got = double(f32_at(none.out[size_t(r)], i));
                ASSERT_LE(std::fabs(got - exact), mag * n * 1.2e-7) << what << " rank " << r << " element " << i;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ExactShape, LossyCallsKeepTheirShapeAndBound) {
  // Compressed calls run the communicator's rings with slot-sized slices
  // whatever the exact shape, and meet their bound on every element.
  const ShapeEnv env("0.5");
  const int n = 4;
  Ranks w(n, [](int, CommConfig& c) {
    c.slot_bytes = 4096;
    c.nchannels = 2;
    c.exact_nchannels = 1;
    c.exact_slice_bytes = 1024;
  });
  for (size_t count : {size_t(1025), size_t(65537), size_t(200003)}) {
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < n; ++r) in.push_back(make_input(DataType::F32, count, r, 7));
    double lo = 1e300, hi = -1e300;
    for (const auto& b : in) {
      for (size_t i = 0; i < count; ++i) {
        lo = std::min(lo, double(f32_at(b, i)));
        hi = std::max(hi, double(f32_at(b, i)));
      }
    }
    const double E = 1e-3 * (hi - lo);
    const Outcome o = run_call(w, Coll::AllReduce, count, DataType::F32, RedOp::Sum, Compression::lossy_rel(1e-3), in);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(o.out[size_t(r)], o.out[0]) << count << " rank " << r;
      EXPECT_EQ(o.st[size_t(r)].slice_bytes, 4096u) << count;
      EXPECT_EQ(o.st[size_t(r)].channels, count * 4 >= 2 * (size_t(256) << 10) ? 2 : 1) << count;
    }
    for (size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (int q = 0; q < n; ++q) exact += double(f32_at(in[size_t(q)], i));
      ASSERT_LE(std::fabs(double(f32_at(o.out[0], i)) - exact), E) << count << " element " << i;
    }
  }
}
