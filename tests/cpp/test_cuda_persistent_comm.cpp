// The persistent ring kernels in the communicator's call path
// (CommConfig::persistent; core/persistent_call.hpp): an all_reduce (sum,
// max or min) of device buffers on every rank, none (float32/float64/int32/
// int64 values) or lossy (int32/int64 codes, each slice's coder chosen by
// the device selector), runs as one kernel per rank, with each FIFO placement
// (NCCLZ_PERSISTENT_FIFOS): device FIFOs written by the kernels (ranks as
// threads: pointers; and, through the test hook
// NCCLZ_TEST_PERSISTENT_AS_PROCESSES, the processes' path: CUDA IPC handles,
// which the emulator maps to the same pointer, and the /dev/shm abort page),
// and host FIFOs with proxy threads over the communicator's own (in-process)
// transport. Its results
// must be the bits of the same call with the opt-in off (the device path),
// the same on every rank, within the bound on every element for lossy,
// over back-to-back calls of different sizes; every other call keeps its
// path; a failure ends the call on every rank and the next communicator
// works.
//
// Built with CUDA (skips without a GPU) and in the CPU emulator
// (ncclz_cuda_emu_comm_tests; tools/cuda_emu/run.sh comm).
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"

using namespace ncclz;
using ncclz_test::DevBuf;
using ncclz_test::from_device;
using ncclz_test::Ranks;

namespace {

size_t esize(DataType t) { return t == DataType::F64 || t == DataType::I64 ? 8 : 4; }

double value_at(DataType t, const std::vector<uint8_t>& b, size_t i) {
  if (t == DataType::F64) {
    double v;
    std::memcpy(&v, b.data() + 8 * i, 8);
    return v;
  }
  if (t == DataType::I32) {
    int32_t v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return double(v);
  }
  if (t == DataType::I64) {
    int64_t v;
    std::memcpy(&v, b.data() + 8 * i, 8);
    return double(v);
  }
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return double(v);
}

/// Rank r's input: a smooth field plus noise (integers of both signs for int32 and int64).
std::vector<uint8_t> input(DataType t, size_t n, int r, unsigned seed) {
  std::mt19937 g(seed * 977u + unsigned(r));
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<uint8_t> b(n * esize(t));
  for (size_t i = 0; i < n; ++i) {
    const double x = std::sin(0.01 * double(i) + r) * (1 + r) + noise(g);
    if (t == DataType::F64) {
      std::memcpy(b.data() + 8 * i, &x, 8);
    } else if (t == DataType::I32) {
      const int32_t v = int32_t(std::lround(x * 1000));
      std::memcpy(b.data() + 4 * i, &v, 4);
    } else if (t == DataType::I64) {
      const int64_t v = std::llround(x * 1e12);
      std::memcpy(b.data() + 8 * i, &v, 8);
    } else {
      const float v = float(x);
      std::memcpy(b.data() + 4 * i, &v, 4);
    }
  }
  return b;
}

struct Result {
  std::vector<uint8_t> out;
  CallStats stats;
  std::string error;
};

/// Slots of 4 KiB (1024 floats a slice), 4 of them, 2 channels; the small
/// calls on the rings too (no latency algorithm); the opt-in as given.
Ranks make_ranks(int n, int persistent) {
  return Ranks(n, [persistent](int, CommConfig& cfg) {
    cfg.slot_bytes = 4096;
    cfg.sparse_slice_bytes = 4096;
    cfg.nslots = 4;
    cfg.nchannels = 2;
    cfg.exact_nchannels = 2;
    cfg.latency_bytes = 0;
    cfg.two_hop_bytes = 0;
    cfg.direct_from_bytes = 0;
    cfg.persistent = persistent;
  });
}

enum class Coll { AllReduce, ReduceScatter };

/// One call on every rank: rank r's buffers on device 0 where on_dev[r], else
/// host memory; in place on the device where in_place.
std::vector<Result> run(Ranks& R, Coll coll, DataType t, RedOp op, const Compression& c, size_t count,
                        const std::vector<std::vector<uint8_t>>& in, const std::vector<bool>& on_dev,
                        bool in_place = false, bool device_per_rank = false) {
  std::vector<Result> res(size_t(R.size()));
  R.run([&](int r, Communicator& comm) {
    const int N = comm.size();
    const size_t es = esize(t), no = coll == Coll::ReduceScatter ? count : count;
    const size_t ni = coll == Coll::ReduceScatter ? count * size_t(N) : count;
    Result& x = res[size_t(r)];
    std::vector<uint8_t> hsend = in[size_t(r)], hrecv(no * es);
    std::unique_ptr<DevBuf> ds, dr;
    const void* send = hsend.data();
    void* recv = hrecv.data();
    if (on_dev[size_t(r)]) {
      const int device = device_per_rank ? r : 0;
      cudaSetDevice(device);
      ds = std::make_unique<DevBuf>(ni * es);
      ncclz_test::to_device(ds->get(), hsend);
      dr = std::make_unique<DevBuf>(no * es);
      send = ds->get();
      recv = in_place ? ds->get() : dr->get();
      set_buffer_device(device);
    }
    try {
      if (coll == Coll::AllReduce) {
        comm.all_reduce(send, recv, count, t, op, c, &x.stats);
      } else {
        comm.reduce_scatter(send, recv, count, t, op, c, &x.stats);
      }
    } catch (const std::exception& e) {
      x.error = e.what();
    }
    set_buffer_device(-1);
    if (on_dev[size_t(r)]) {
      x.out = from_device(recv, no * es);
    } else {
      x.out.assign(static_cast<const uint8_t*>(recv), static_cast<const uint8_t*>(recv) + no * es);
    }
  });
  return res;
}

std::vector<std::vector<uint8_t>> inputs(DataType t, size_t n, int N, unsigned seed) {
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < N; ++r) in.push_back(input(t, n, r, seed));
  return in;
}

/// Where the FIFOs go (the first eligible call reads the environment).
struct Placement {
  const char* fifos;  // NCCLZ_PERSISTENT_FIFOS
  bool as_processes;  // NCCLZ_TEST_PERSISTENT_AS_PROCESSES
  bool device;        // CallStats::persistent_device_fifos expected
  const char* name;
};
const Placement kPlacements[] = {{"auto", false, true, "auto (device FIFOs, threads)"},
                                 {"device", true, true, "device FIFOs, the processes' path"},
                                 {"host", false, false, "host FIFOs and proxies"}};

/// What every persistent call is checked for against the same call with the
/// opt-in off (`off`) and rank 0's result (`first`): both succeeded, only `x`
/// ran on the persistent ring, with the placement's FIFOs, and the outputs
/// are the same bits (callers: ASSERT_NO_FATAL_FAILURE).
void expect_as_opt_out(const Result& x, const Result& off, const Result& first, const Placement& pl) {
  ASSERT_EQ(x.error, "");
  ASSERT_EQ(off.error, "");
  EXPECT_TRUE(x.stats.persistent);
  EXPECT_EQ(x.stats.persistent_device_fifos, pl.device);
  EXPECT_FALSE(off.stats.persistent);
  ASSERT_TRUE(x.out == off.out) << "differs from the call with the opt-in off";
  ASSERT_TRUE(x.out == first.out) << "ranks' results differ";
}

/// The processes' path runs only in the emulator: a real CUDA refuses to
/// open an IPC handle of its own process (tests/python/test_gpu_persistent.py
/// runs it with processes on a GPU).
#if defined(NCCLZ_CUDA_EMULATED)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

/// Sets the placement's variables for a scope.
class PlacementEnv {
 public:
  explicit PlacementEnv(const Placement& p) {
    setenv("NCCLZ_PERSISTENT_FIFOS", p.fifos, 1);
    if (p.as_processes) setenv("NCCLZ_TEST_PERSISTENT_AS_PROCESSES", "1", 1);
  }
  ~PlacementEnv() {
    unsetenv("NCCLZ_PERSISTENT_FIFOS");
    unsetenv("NCCLZ_TEST_PERSISTENT_AS_PROCESSES");
  }
};

#define SKIP_WITHOUT_DEVICE()                                                                                  \
  do {                                                                                                         \
    if (cuda::device_count() == 0) {                                                                           \
      if (ncclz_test::gpu_required()) FAIL() << "NCCLZ_REQUIRE_GPU=1, but " << ncclz_test::no_device_reason(); \
      GTEST_SKIP() << "no CUDA device (" << ncclz_test::no_device_reason() << ")";                             \
    }                                                                                                          \
  } while (0)

}  // namespace

// 2, 3 and 4 ranks, back-to-back calls of different sizes on one pair of
// communicators (1 element, less than a slice, not a multiple of the
// channels, several ring loops; in place once), for each FIFO placement: with
// the opt-in the call ran on the persistent ring with those FIFOs
// (last_stats), its output is the opt-in-off call's bits on every rank, the
// same on all ranks, lossy within the bound on every element; Raw wire bytes
// are the raw bytes, coded ones fewer, and every placement sends the same
// bytes (the same slices).
TEST(CudaPersistentComm, AllReduceMatchesTheDevicePathBitForBit) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<size_t> sizes =
      ncclz_test::quick() ? std::vector<size_t>{1, 700, 5003, 2} : std::vector<size_t>{1, 700, 5003, 2, 33333, 1024};
  for (int N : {2, 3, 4}) {
    Ranks off = make_ranks(N, 0);
    const std::vector<bool> dev(size_t(N), true);
    std::vector<std::vector<Result>> ref;          // the opt-in-off results, case by case
    std::vector<std::vector<uint64_t>> wire_seen;  // the first placement's wire bytes, case by case
    for (const Placement& pl : kPlacements) {
      if (pl.as_processes && !kEmulated) continue;
      PlacementEnv env(pl);
      Ranks on = make_ranks(N, 1);
      int k = 0;
      for (size_t count : sizes) {
        for (DataType t : {DataType::F32, DataType::F64, DataType::I32}) {
          for (bool lossy : {false, true}) {
            if (lossy && t == DataType::I32) continue;
            const bool in_place = ++k % 5 == 0;
            SCOPED_TRACE(std::string(pl.name) + " N=" + std::to_string(N) + " count " + std::to_string(count) +
                         " type " + std::to_string(int(t)) + (lossy ? " lossy" : " none") +
                         (in_place ? " in place" : ""));
            const double E = 1e-3;
            const Compression c = lossy ? Compression::lossy_abs(E) : Compression::none();
            const auto in = inputs(t, count, N, unsigned(count) + 3);
            const auto a = run(on, Coll::AllReduce, t, RedOp::Sum, c, count, in, dev, in_place);
            if (ref.size() < size_t(k))
              ref.push_back(run(off, Coll::AllReduce, t, RedOp::Sum, c, count, in, dev, in_place));
            const auto& b = ref[size_t(k - 1)];
            if (wire_seen.size() < size_t(k)) {
              wire_seen.emplace_back();
              for (int r = 0; r < N; ++r) wire_seen.back().push_back(a[size_t(r)].stats.wire_bytes);
            }
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE("rank " + std::to_string(r));
              const Result& x = a[size_t(r)];
              ASSERT_NO_FATAL_FAILURE(expect_as_opt_out(x, b[size_t(r)], a[0], pl));
              EXPECT_TRUE(x.stats.on_device);
              EXPECT_FALSE(x.stats.exact_fallback);
              EXPECT_EQ(x.stats.wire_bytes, wire_seen[size_t(k - 1)][size_t(r)])
                  << "other slices than " << kPlacements[0].name;
              if (!lossy) {
                EXPECT_EQ(x.stats.wire_bytes, x.stats.raw_bytes);            // Raw slices: the values' bytes
                EXPECT_EQ(x.stats.raw_bytes, b[size_t(r)].stats.raw_bytes);  // the same elements sent
              } else if (count >= 5003) {
                EXPECT_GT(x.stats.ratio, 1.5);  // Coded slices: fewer bytes
              }

              if (count > 1) {
                EXPECT_GT(x.stats.wire_bytes, 0u);
              }
              if (!lossy) continue;
              double worst = 0;
              for (size_t i = 0; i < count; ++i) {
                double sum = 0;
                for (int q = 0; q < N; ++q) sum += value_at(t, in[size_t(q)], i);
                worst = std::max(worst, std::fabs(value_at(t, x.out, i) - sum));
              }
              EXPECT_LE(worst, x.stats.error_bound * (1 + 1e-9)) << "max error " << worst;
              EXPECT_LE(x.stats.error_bound, E * (1 + 1e-12));
            }
          }
        }
      }
    }
  }
}

// The setting: device FIFOs forced where they can be made (ranks as threads
// on one device), host FIFOs forced, and a value that is no setting: that
// fails the call on every rank, promptly (the failing rank's abort reaches
// the others' setup exchange), with the setting named.
TEST(CudaPersistentComm, TheFifoSettingIsAgreedByEveryRank) {
  SKIP_WITHOUT_DEVICE();
  const int N = 3;
  const size_t count = 3001;
  const auto in = inputs(DataType::F32, count, N, 21);
  const std::vector<bool> dev(size_t(N), true);
  for (const char* v : {"device", "host"}) {
    setenv("NCCLZ_PERSISTENT_FIFOS", v, 1);
    Ranks R = make_ranks(N, 1);
    const auto a = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
    unsetenv("NCCLZ_PERSISTENT_FIFOS");
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(a[size_t(r)].error, "") << v;
      EXPECT_EQ(a[size_t(r)].stats.persistent_device_fifos, std::string(v) == "device") << v;
    }
  }
  {
    Ranks R = make_ranks(N, 1);
    const auto t0 = std::chrono::steady_clock::now();
    setenv("NCCLZ_PERSISTENT_FIFOS", "sideways", 1);
    const auto a = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
    unsetenv("NCCLZ_PERSISTENT_FIFOS");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < N; ++r) EXPECT_NE(a[size_t(r)].error, "") << "rank " << r << " did not fail";
    bool named = false;
    for (int r = 0; r < N; ++r) named = named || a[size_t(r)].error.find("NCCLZ_PERSISTENT_FIFOS") != std::string::npos;
    EXPECT_TRUE(named) << a[0].error;
    EXPECT_LT(s, 30.0) << "the failure took the timeout";
  }
}

// Two channels: a call large enough for both (2 x 256 KiB), count not a
// multiple of 2: the channel split is the CPU ring's (the opt-in-off bits).
TEST(CudaPersistentComm, TwoChannelsSplitAsTheRings) {
  SKIP_WITHOUT_DEVICE();
  const int N = 2;
  Ranks on = make_ranks(N, 1), off = make_ranks(N, 0);
  const size_t count = (size_t(512) << 10) / 4 + 3;
  const auto in = inputs(DataType::F32, count, N, 11);
  const std::vector<bool> dev(size_t(N), true);
  const auto a = run(on, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
  const auto b = run(off, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
  for (int r = 0; r < N; ++r) {
    ASSERT_EQ(a[size_t(r)].error, "");
    EXPECT_TRUE(a[size_t(r)].stats.persistent);
    EXPECT_EQ(a[size_t(r)].stats.channels, 2);
    EXPECT_EQ(b[size_t(r)].stats.channels, 2);
    EXPECT_TRUE(a[size_t(r)].out == b[size_t(r)].out) << "rank " << r;
  }
}

// With the opt-in on, calls it does not cover keep their path and their
// results: a host rank among device ranks (lossy and none), reduce_scatter,
// avg, prod, bfloat16-free float types only here (the host call's bits).
TEST(CudaPersistentComm, IneligibleCallsKeepTheirPath) {
  SKIP_WITHOUT_DEVICE();
  const int N = 3;
  Ranks on = make_ranks(N, 1), off = make_ranks(N, 0);
  const size_t count = 3001;
  const auto in = inputs(DataType::F32, count, N, 5);
  const auto in_rs = inputs(DataType::F32, count * N, N, 6);
  const std::vector<bool> mixed{false, true, true}, dev(size_t(N), true);
  struct Case {
    Coll coll;
    RedOp op;
    Compression c;
    std::vector<bool> on_dev;
  };
  const std::vector<Case> cases{{Coll::AllReduce, RedOp::Sum, Compression::lossy_abs(1e-3), mixed},
                                {Coll::AllReduce, RedOp::Sum, Compression::none(), mixed},
                                {Coll::ReduceScatter, RedOp::Sum, Compression::lossy_abs(1e-3), dev},
                                {Coll::AllReduce, RedOp::Avg, Compression::none(), dev},
                                {Coll::AllReduce, RedOp::Prod, Compression::none(), dev}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const auto& x = k.coll == Coll::ReduceScatter ? in_rs : in;
    const auto a = run(on, k.coll, DataType::F32, k.op, k.c, count, x, k.on_dev);
    const auto b = run(off, k.coll, DataType::F32, k.op, k.c, count, x, k.on_dev);
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(b[size_t(r)].error, "");
      ASSERT_EQ(a[size_t(r)].error, "");
      EXPECT_FALSE(a[size_t(r)].stats.persistent);
      EXPECT_TRUE(a[size_t(r)].out == b[size_t(r)].out) << "rank " << r;
    }
  }
  // And an eligible call after them still runs there.
  const auto a = run(on, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
  for (int r = 0; r < N; ++r) EXPECT_TRUE(a[size_t(r)].stats.persistent);
}

// Lossy calls on noise (every slice's best coder Block with no predictor):
// the device selector's slices are the device path's, so the same wire
// bytes as with the opt-in off (3 and 4 ranks: two ranks exchange their own
// slices there), and the same bits; with the ring's old fixed Delta1 they
// would be larger. (On smooth fields the two differ a little: after a
// reduction the kernel keeps the incoming slice's predictor as the CPU ring
// does, the device path samples every predictor again.)
TEST(CudaPersistentComm, LossySelectorSlicesAsTheDevicePath) {
  SKIP_WITHOUT_DEVICE();
  const size_t count = 5003;
  for (int N : {3, 4}) {
    Ranks on = make_ranks(N, 1), off = make_ranks(N, 0);
    const std::vector<bool> dev(size_t(N), true);
    for (DataType t : {DataType::F32, DataType::F64}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " type " + std::to_string(int(t)));
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) {
        std::mt19937 g(unsigned(100 + r));
        std::normal_distribution<double> noise(0, 0.05);
        std::vector<uint8_t> b(count * esize(t));
        for (size_t i = 0; i < count; ++i) {
          const double x = noise(g);
          const float f = float(x);
          if (t == DataType::F64)
            std::memcpy(b.data() + 8 * i, &x, 8);
          else
            std::memcpy(b.data() + 4 * i, &f, 4);
        }
        in.push_back(std::move(b));
      }
      const Compression c = Compression::lossy_abs(1e-3);
      const auto a = run(on, Coll::AllReduce, t, RedOp::Sum, c, count, in, dev);
      const auto b = run(off, Coll::AllReduce, t, RedOp::Sum, c, count, in, dev);
      for (int r = 0; r < N; ++r) {
        ASSERT_EQ(a[size_t(r)].error, "");
        ASSERT_EQ(b[size_t(r)].error, "");
        EXPECT_TRUE(a[size_t(r)].stats.persistent);
        EXPECT_TRUE(a[size_t(r)].out == b[size_t(r)].out) << "rank " << r;
        EXPECT_EQ(a[size_t(r)].stats.wire_bytes, b[size_t(r)].stats.wire_bytes) << "rank " << r;
        EXPECT_GT(a[size_t(r)].stats.ratio, 1.2) << "rank " << r;
      }
    }
  }
}

// Max and min on the persistent ring: none on float32 and float64 (with NaN
// and infinity rows), int32 and int64, lossy on float32 and float64 (their
// int32 / int64 codes: integer max / min), 2-4 ranks, in place once, device
// and host FIFOs: the call ran there and its output is the opt-in-off call's
// bits on every rank; lossy within the bound of the exact max / min.
TEST(CudaPersistentComm, MaxMinMatchTheDevicePathBitForBit) {
  SKIP_WITHOUT_DEVICE();
  const size_t count = 3001;
  for (int N : {2, 3, 4}) {
    Ranks off = make_ranks(N, 0);
    const std::vector<bool> dev(size_t(N), true);
    for (const Placement& pl : kPlacements) {
      if (pl.as_processes) continue;
      PlacementEnv env(pl);
      Ranks on = make_ranks(N, 1);
      int k = 0;
      for (RedOp op : {RedOp::Max, RedOp::Min}) {
        for (DataType t : {DataType::F32, DataType::F64, DataType::I32, DataType::I64}) {
          for (bool lossy : {false, true}) {
            if (lossy && (t == DataType::I32 || t == DataType::I64)) continue;
            const bool in_place = ++k % 4 == 0;
            SCOPED_TRACE(std::string(pl.name) + " N=" + std::to_string(N) + " op " + std::to_string(int(op)) +
                         " type " + std::to_string(int(t)) + (lossy ? " lossy" : " none") +
                         (in_place ? " in place" : ""));
            auto in = inputs(t, count, N, unsigned(k) + 40);
            if (!lossy && (t == DataType::F32 || t == DataType::F64)) {
              // Specials: a NaN on rank 1 (every 11th), +inf on rank 0 (every 13th), -inf on the last (every 17th).
              for (size_t i = 0; i < count; ++i) {
                auto put = [&](int r, double v) {
                  if (t == DataType::F64) {
                    std::memcpy(in[size_t(r)].data() + 8 * i, &v, 8);
                  } else {
                    const float f = float(v);
                    std::memcpy(in[size_t(r)].data() + 4 * i, &f, 4);
                  }
                };
                if (i % 11 == 0) put(1, std::nan(""));
                if (i % 13 == 0) put(0, HUGE_VAL);
                if (i % 17 == 0) put(N - 1, -HUGE_VAL);
              }
            }
            const Compression c = lossy ? Compression::lossy_abs(1e-3) : Compression::none();
            const auto a = run(on, Coll::AllReduce, t, op, c, count, in, dev, in_place);
            const auto b = run(off, Coll::AllReduce, t, op, c, count, in, dev, in_place);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE("rank " + std::to_string(r));
              const Result& x = a[size_t(r)];
              ASSERT_NO_FATAL_FAILURE(expect_as_opt_out(x, b[size_t(r)], a[0], pl));
              if (!lossy) continue;
              double worst = 0;
              for (size_t i = 0; i < count; ++i) {
                double m = value_at(t, in[0], i);
                for (int q = 1; q < N; ++q) {
                  const double v = value_at(t, in[size_t(q)], i);
                  m = op == RedOp::Max ? std::max(m, v) : std::min(m, v);
                }
                worst = std::max(worst, std::fabs(value_at(t, x.out, i) - m));
              }
              EXPECT_LE(worst, x.stats.error_bound * (1 + 1e-9)) << "max error " << worst;
            }
          }
        }
      }
    }
  }
}

namespace {

void fail_and_recover(bool device_fifos) {
  const int N = 3;
  const size_t count = 4000;
  const std::vector<bool> dev(size_t(N), true);
  const auto in = inputs(DataType::F32, count, N, 9);
  const Compression lossy = Compression::lossy_abs(1e-3);
  {
    Ranks R = make_ranks(N, 1);
    auto ok = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, lossy, count, in, dev);  // the ring is made
    for (int r = 0; r < N; ++r) ASSERT_EQ(ok[size_t(r)].error, "");
    for (int r = 0; r < N; ++r) ASSERT_EQ(ok[size_t(r)].stats.persistent_device_fifos, device_fifos);
    setenv("NCCLZ_TEST_OUTLIER", "1", 1);
    const auto t0 = std::chrono::steady_clock::now();
    const auto bad = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, lossy, count, in, dev);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unsetenv("NCCLZ_TEST_OUTLIER");
    for (int r = 0; r < N; ++r) EXPECT_NE(bad[size_t(r)].error, "") << "rank " << r << " did not fail";
    EXPECT_NE(bad[1].error.find("do not fit the lossy grid"), std::string::npos) << bad[1].error;
    EXPECT_LT(s, 30.0) << "the failure took the timeout";
  }
  {
    Ranks R = make_ranks(N, 1);
    auto ok = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
    for (int r = 0; r < N; ++r) ASSERT_EQ(ok[size_t(r)].error, "");
    R.comms[2]->abort("test: rank 2 gives up");
    const auto t0 = std::chrono::steady_clock::now();
    const auto bad = run(R, Coll::AllReduce, DataType::F32, RedOp::Sum, Compression::none(), count, in, dev);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < N; ++r) EXPECT_NE(bad[size_t(r)].error, "") << "rank " << r << " did not fail";
    EXPECT_LT(s, 30.0) << "the failure took the timeout";
  }
  Ranks next = make_ranks(N, 1);
  const auto a = run(next, Coll::AllReduce, DataType::F32, RedOp::Sum, lossy, count, in, dev);
  for (int r = 0; r < N; ++r) {
    ASSERT_EQ(a[size_t(r)].error, "");
    EXPECT_TRUE(a[size_t(r)].stats.persistent);
    EXPECT_TRUE(a[size_t(r)].out == a[0].out);
  }
}

}  // namespace

// Ranks as threads on separate devices (one each; the emulator's
// NCCLZ_EMU_DEVICES, tools/cuda_emu/run.sh comm): device FIFOs through peer
// access (system-scope fences), the opt-in-off call's bits, lossy and none.
TEST(CudaPersistentComm, RanksOnSeparateDevicesUseDeviceFifos) {
  SKIP_WITHOUT_DEVICE();
  const int N = std::min(3, cuda::device_count());
  if (N < 2) GTEST_SKIP() << "one device";
  Ranks on = make_ranks(N, 1), off = make_ranks(N, 0);
  const size_t count = 5003;
  const std::vector<bool> dev(size_t(N), true);
  for (bool lossy : {false, true}) {
    SCOPED_TRACE(lossy ? "lossy" : "none");
    const Compression c = lossy ? Compression::lossy_abs(1e-3) : Compression::none();
    const auto in = inputs(DataType::F32, count, N, 31);
    const auto a = run(on, Coll::AllReduce, DataType::F32, RedOp::Sum, c, count, in, dev, false, true);
    const auto b = run(off, Coll::AllReduce, DataType::F32, RedOp::Sum, c, count, in, dev, false, true);
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(a[size_t(r)].error, "");
      ASSERT_EQ(b[size_t(r)].error, "");
      EXPECT_TRUE(a[size_t(r)].stats.persistent);
      EXPECT_TRUE(a[size_t(r)].stats.persistent_device_fifos);
      EXPECT_TRUE(a[size_t(r)].out == b[size_t(r)].out) << "rank " << r;
    }
  }
}

// A rank that fails in the middle of a persistent call (its quantizer meets
// an outlier the plan ruled out: NCCLZ_TEST_OUTLIER; it raises before its
// codes leave it, while the others' kernels wait for them) ends the call on
// every rank with an error, promptly (not the 60 s timeout); so does a
// communicator aborted between calls. The next communicator works. For each
// FIFO placement: with device FIFOs no proxy carries the abort; the failing
// rank's transport closes its connections with a note, the next rank's
// watching thread sets the group's one abort word, and every kernel stops.
TEST(CudaPersistentComm, AFailureEndsEveryRankAndTheNextCommunicatorWorks) {
  SKIP_WITHOUT_DEVICE();
  for (const Placement& pl : kPlacements) {
    if (pl.as_processes && !kEmulated) continue;
    SCOPED_TRACE(pl.name);
    PlacementEnv env(pl);
    fail_and_recover(pl.device);
  }
}

#endif  // NCCLZ_WITH_CUDA
