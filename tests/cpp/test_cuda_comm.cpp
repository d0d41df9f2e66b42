// Device buffers through the communicator (ncclz::set_buffer_device; the
// device path of core/device_work.hpp, core/device_call.hpp): ranks as
// threads over the in-process transport, each rank's buffers in device
// memory or host memory. A lossy all_reduce, reduce_scatter, all_gather or
// broadcast on device buffers quantizes, codes (the device selector in the
// send/receive loops) and dequantizes on the device; the results must be
// the same bits as the same call on host buffers (the same codes, summed in
// the same order), within the bound on every element against a float64
// reference, and the same on every rank. Paths that run on host copies
// (none, one rank, non-finite inputs), a communicator mixing device and
// host ranks, and the errors (collectives that take host buffers only, a
// device that is not there) are checked too.
//
// Built with CUDA (skips without a GPU, fails under NCCLZ_REQUIRE_GPU=1) and
// in the CPU emulator (tools/cuda_emu: ncclz_cuda_emu_comm_tests, with the
// emulator's memory protection: a host access to device memory crashes).
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec/quantizer.hpp"
#include "cuda_comm_calls.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "ncclz/ncclz.h"
#include "test_ranks.hpp"

using namespace ncclz;
using ncclz_test::DevBuf;
using ncclz_test::from_device;
using ncclz_test::gpu_required;
using ncclz_test::no_device_reason;
using ncclz_test::Ranks;
using namespace ncclz_test::comm_calls;

namespace {

/// Rank 0 calls a lossy all_reduce of n floats on device buffers s, d that it
/// says are on device `device` (the others host buffers): refused with an
/// InvalidArgument saying `why` there, a RemoteError on the others; then an
/// uncompressed host call of every rank, whose sum is checked: the
/// communicator works on.
void expect_refused_on_rank0(Communicator& comm, int r, const void* s, void* d, size_t n, int device,
                             const std::string& why) {
  std::vector<float> hs(n, float(r + 1)), hd(n);
  set_buffer_device(r == 0 ? device : -1);
  try {
    comm.all_reduce(r == 0 ? s : hs.data(), r == 0 ? d : hd.data(), n, DataType::F32, RedOp::Sum,
                    Compression::lossy_abs(1e-3));
    ADD_FAILURE() << "rank " << r << ": a call on device " << device << " ran";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(r, 0);
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  } catch (const RemoteError&) {
    EXPECT_NE(r, 0);
  }
  set_buffer_device(-1);
  comm.all_reduce(hs.data(), hd.data(), n, DataType::F32, RedOp::Sum, Compression::none());
  const int N = comm.size();
  for (float v : hd) ASSERT_EQ(v, float(N * (N + 1) / 2));
}

/// n ranks of a communicator of the C API, each created on a thread of its own.
std::vector<ncclzComm_t> c_comms(int n) {
  ncclzUniqueId id;
  EXPECT_EQ(ncclzGetUniqueId(&id), ncclzSuccess);
  std::vector<ncclzComm_t> comms(size_t(n), nullptr);
  ncclz_test::run_threads(n, [&](int r) { EXPECT_EQ(ncclzCommInitRank(&comms[size_t(r)], n, id, r), ncclzSuccess); });
  for (ncclzComm_t c : comms) EXPECT_NE(c, nullptr);
  return comms;
}

}  // namespace

// Every collective, lossy, on 2-4 ranks with all buffers on the device (the
// rings' and the point-to-point links' schedules): on the device
// (CallStats::on_device; a max / min too: the codes' max / min, taken on the
// device), the host call's bits, within E; with the ordinary slices and with
// the larger ones (3 ranks).
TEST(CudaComm, LossyCollectivesOnDeviceMatchTheHostBits) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 3000 : 20000;
  for (int N : {2, 3, 4, -3}) {
    Ranks R = make_ranks(N < 0 ? -N : N, N < 0);
    N = N < 0 ? -N : N;
    for (DataType t : {DataType::F32, DataType::F64, DataType::BF16}) {
      for (Op o : kAllOps) {
        for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min}) {
          if (op != RedOp::Sum && !reduces(o)) continue;
          if (op == RedOp::Min && t != DataType::F32) continue;  // (LossyMaxMinOnDevice: float64 and int64 codes)
          const double E = t == DataType::BF16 ? 0.5 : 1e-3;
          const Compression c = Compression::lossy_abs(E);
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, 7));
          const auto host = run(R, o, t, op, c, count, in, std::vector<bool>(size_t(N), false));
          const auto dev = run(R, o, t, op, c, count, in, std::vector<bool>(size_t(N), true));
          for (int r = 0; r < N; ++r) {
            SCOPED_TRACE(std::string(name(o)) +
                         (op == RedOp::Avg   ? " avg"
                          : op == RedOp::Max ? " max"
                          : op == RedOp::Min ? " min"
                                             : "") +
                         " N=" + std::to_string(N) + " type " + std::to_string(int(t)) + " rank " + std::to_string(r));
            const Result& h = host[size_t(r)];
            const Result& d = dev[size_t(r)];
            ASSERT_EQ(h.error, "");
            ASSERT_EQ(d.error, "");
            EXPECT_FALSE(h.stats.on_device);
            EXPECT_TRUE(d.stats.on_device);
            EXPECT_FALSE(d.stats.exact_fallback);
            if (d.stats.raw_bytes > 0) {
              EXPECT_GT(d.stats.ratio, 1.5);  // (a broadcast's last rank sends nothing)
            }
            if (!has_output(o, r)) continue;
            EXPECT_EQ(d.out, h.out) << "device and host results differ";
            if (o == Op::AllReduce || o == Op::AllGather || o == Op::Broadcast) {
              EXPECT_EQ(d.out, dev[0].out) << "ranks' results differ";
            }
            expect_within_bound(d, o, t, op, count, N, r, in, E);
          }
        }
      }
    }
  }
}

// A communicator whose ranks 0 and 2 hold device buffers and 1 and 3 host
// buffers: every rank the all-host call's bits (CPU ranks code without rANS
// where a rank codes on the device), on the device where the buffers are.
TEST(CudaComm, DeviceAndHostRanksMix) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 4000 : 30000;
  const int N = 4;
  Ranks R = make_ranks(N, true);  // the larger slices: the host ranks take them too
  const std::vector<bool> mixed{true, false, true, false};
  for (Op o : kAllOps) {
    SCOPED_TRACE(name(o));
    const Compression c = Compression::lossy_rel(1e-3);
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 11));
    const auto host = run(R, o, DataType::F32, RedOp::Sum, c, count, in, std::vector<bool>(N, false));
    const auto mix = run(R, o, DataType::F32, RedOp::Sum, c, count, in, mixed);
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(mix[size_t(r)].error, "") << "rank " << r;
      EXPECT_EQ(mix[size_t(r)].stats.on_device, mixed[size_t(r)]) << "rank " << r;
      if (has_output(o, r)) {
        EXPECT_EQ(mix[size_t(r)].out, host[size_t(r)].out) << "rank " << r;
      }
    }
  }
}

// A lossy max / min on the device (the codes' max / min in the send /
// receive loops: fused into the v3 decode, or decode then reduce):
// all_reduce, reduce_scatter and reduce, float32 (int32 codes) and float64
// with a bound small enough that its codes need int64, all ranks on the
// device and device and host ranks mixed: on the device where the buffers
// are, the all-host call's bits, the same on every rank, within the bound
// of the float64 reference on every element.
TEST(CudaComm, LossyMaxMinOnDevice) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 3000 : 20000;
  for (int N : {2, 3, 4}) {
    Ranks R = make_ranks(N, N == 3);
    std::vector<bool> mixed(size_t(N), false);
    for (int r = 0; r < N; r += 2) mixed[size_t(r)] = true;
    for (DataType t : {DataType::F32, DataType::F64}) {
      const double E = t == DataType::F64 ? 1e-10 : 1e-3;
      const Compression c = Compression::lossy_abs(E);
      for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::Reduce}) {
        for (RedOp op : {RedOp::Max, RedOp::Min}) {
          std::vector<std::vector<uint8_t>> in;
          double maxabs = 0;
          for (int r = 0; r < N; ++r) {
            in.push_back(input(t, in_count(o, count, N), r, 41));
            for (size_t i = 0; i < in_count(o, count, N); ++i)
              maxabs = std::max(maxabs, std::fabs(value_at(t, in.back(), i)));
          }
          // Codes of magnitude up to maxabs / (2 eb) >= maxabs / (2 E): beyond int32's for float64 here.
          if (t == DataType::F64) {
            ASSERT_GT(maxabs / (2 * E), 2147483647.0);
          }
          const auto host = run(R, o, t, op, c, count, in, std::vector<bool>(size_t(N), false));
          for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
            const auto dev = run(R, o, t, op, c, count, in, pattern);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE(std::string(name(o)) + (op == RedOp::Max ? " max" : " min") + " N=" + std::to_string(N) +
                           " type " + std::to_string(int(t)) + " rank " + std::to_string(r) +
                           (pattern == mixed ? " (mixed)" : ""));
              const Result& h = host[size_t(r)];
              const Result& d = dev[size_t(r)];
              ASSERT_EQ(h.error, "");
              ASSERT_EQ(d.error, "");
              EXPECT_EQ(d.stats.on_device, bool(pattern[size_t(r)]));
              EXPECT_FALSE(h.stats.exact_fallback);
              EXPECT_FALSE(d.stats.exact_fallback);
              if (!has_output(o, r)) continue;
              EXPECT_EQ(d.out, h.out) << "device and host results differ";
              if (o == Op::AllReduce) {
                EXPECT_EQ(d.out, dev[0].out) << "ranks' results differ";
              }
              expect_within_bound(d, o, t, op, count, N, r, in, E);
              EXPECT_GT(d.stats.error_bound, 0.0);
            }
          }
        }
      }
    }
  }
}

// A lossy max / min whose inputs hold a NaN (rank 2), +inf (rank 0) and
// -inf (rank 1): the exact path (plan: non-finite inputs), on host copies
// of the device buffers as on the host: the all-host call's bits, the NaN
// kept, each infinity where it wins.
TEST(CudaComm, LossyMaxMinOfNonFiniteInputsOnDevice) {
  SKIP_WITHOUT_GPU();
  const size_t count = 2000;
  const int N = 3;
  Ranks R = make_ranks(N);
  for (Op o : {Op::AllReduce, Op::ReduceScatter}) {
    for (RedOp op : {RedOp::Max, RedOp::Min}) {
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 43));
      put_value(DataType::F32, in[2], 5, std::nan(""));
      put_value(DataType::F32, in[0], 7, HUGE_VAL);
      put_value(DataType::F32, in[1], 9, -HUGE_VAL);
      const Compression c = Compression::lossy_abs(1e-3);
      const auto host = run(R, o, DataType::F32, op, c, count, in, std::vector<bool>(size_t(N), false));
      const auto dev = run(R, o, DataType::F32, op, c, count, in, std::vector<bool>(size_t(N), true));
      for (int r = 0; r < N; ++r) {
        SCOPED_TRACE(std::string(name(o)) + (op == RedOp::Max ? " max" : " min") + " rank " + std::to_string(r));
        ASSERT_EQ(dev[size_t(r)].error, "");
        EXPECT_TRUE(dev[size_t(r)].stats.exact_fallback);
        EXPECT_FALSE(dev[size_t(r)].stats.on_device);
        EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out);
        if (o == Op::AllReduce || r == 0) {  // (reduce_scatter: elements 5, 7, 9 are rank 0's)
          EXPECT_TRUE(std::isnan(value_at(DataType::F32, dev[size_t(r)].out, 5)));
          EXPECT_EQ(value_at(DataType::F32, dev[size_t(r)].out, op == RedOp::Max ? 7 : 9),
                    op == RedOp::Max ? HUGE_VAL : -HUGE_VAL);
        }
      }
    }
  }
}

namespace {

/// A trace file base of its own (CommConfig::trace_file) under the test's
/// temporary directory: rank r writes trace_text(base, r) when it closes.
std::string trace_base(const std::string& name) {
  static int serial = 0;
  return ::testing::TempDir() + "ncclz_cuda_comm_" + name + "_" + std::to_string(getpid()) + "_" +
         std::to_string(serial++);
}

/// Rank r's trace file's text (removed once read; "" when there is none).
std::string trace_text(const std::string& base, int r) {
  const std::string path = base + ".rank" + std::to_string(r) + ".json";
  std::ifstream f(path);
  std::ostringstream s;
  if (f) s << f.rdbuf();
  std::remove(path.c_str());
  return s.str();
}

/// How many complete events named `event` a trace holds.
int events_named(const std::string& text, const std::string& event) {
  const std::string key = "{\"name\":\"" + event + "\",\"ph\":\"X\"";
  int n = 0;
  for (size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + 1)) ++n;
  return n;
}

/// Sets an environment variable for a scope (the previous value restored).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

}  // namespace

// The planned device path (issues #15/#21): a compressed lossy call of device
// buffers, alone or with CPU ranks among them, holds no outlier round (the
// plan rules outliers out; core::LossyCall::outlier_round): no rank's trace
// has an "any_outliers" event, while every quantizing rank's has its eager
// "quantize". Every collective, every rank within the bound on every
// element, the all-host call's bits, and the same on every rank where the
// result is shared. The control: where one rank sets
// NCCLZ_PIPELINE_QUANTIZE=0 (CommConfig::pipeline_quantize = 0), every rank
// holds the round in every call, device ranks and CPU ranks alike.
TEST(CudaComm, LossyCallsOnDeviceHoldNoOutlierRound) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 3000 : 20000;
  const int N = 3;
  const std::vector<bool> all_dev(N, true), mixed{true, false, true};
  for (bool eager : {false, true}) {
    for (const auto& pattern : {all_dev, mixed}) {
      SCOPED_TRACE(std::string(pattern == mixed ? "mixed" : "device") + (eager ? ", rank 2 eager" : ""));
      const std::string base = trace_base("rounds");
      int calls = 0;
      {
        Ranks R(N, [&](int r, CommConfig& cfg) {
          cfg.slot_bytes = 4096;
          cfg.sparse_slice_bytes = 16384;
          cfg.trace_file = base;
          if (eager && r == 2) cfg.pipeline_quantize = 0;
        });
        for (Op o : kAllOps) {
          for (DataType t : {DataType::F32, DataType::BF16}) {
            SCOPED_TRACE(std::string(name(o)) + " type " + std::to_string(int(t)));
            const double E = t == DataType::BF16 ? 0.5 : 1e-3;
            const Compression c = Compression::lossy_abs(E);
            std::vector<std::vector<uint8_t>> in;
            for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, 23));
            const auto host = run(R, o, t, RedOp::Sum, c, count, in, std::vector<bool>(N, false));
            const auto dev = run(R, o, t, RedOp::Sum, c, count, in, pattern);
            calls += 2;
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE("rank " + std::to_string(r));
              const Result& d = dev[size_t(r)];
              ASSERT_EQ(host[size_t(r)].error, "");
              ASSERT_EQ(d.error, "");
              EXPECT_EQ(d.stats.on_device, bool(pattern[size_t(r)]));
              EXPECT_FALSE(d.stats.exact_fallback);
              if (!has_output(o, r)) continue;
              EXPECT_EQ(d.out, host[size_t(r)].out) << "device and host results differ";
              if (o == Op::AllReduce || o == Op::AllGather || o == Op::Broadcast) {
                EXPECT_EQ(d.out, dev[0].out) << "ranks' results differ";
              }
              const auto ref = reference(o, t, RedOp::Sum, count, N, r, in);
              size_t over = 0;
              for (size_t i = 0; i < ref.size(); ++i) {
                over += !(std::fabs(value_at(t, d.out, i) - ref[i]) <= d.stats.error_bound * (1 + 1e-9));
              }
              EXPECT_EQ(over, 0u) << "elements beyond the bound " << d.stats.error_bound;
              EXPECT_GT(d.stats.error_bound, 0);
              EXPECT_LE(d.stats.error_bound, E * (1 + 1e-12));
            }
          }
        }
      }  // closed: the traces written
      for (int r = 0; r < N; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + "'s trace");
        const std::string text = trace_text(base, r);
        ASSERT_FALSE(text.empty());
        // Eager: one round in each call that compressed (all of them, on
        // every rank: the host calls' staged path becomes the eager one too).
        EXPECT_EQ(events_named(text, "any_outliers"), eager ? calls : 0);
        EXPECT_GT(events_named(text, "quantize"), 0);
      }
    }
  }
}

// The guard of the planned path: a quantizer that meets a value the plan
// said would fit (NCCLZ_TEST_OUTLIER=1: rank 1's quantizer allows code 0
// only, as an input changed after its statistics would) raises on rank 1,
// naming the elements, before its codes leave it, and the communicator's
// abort fails the call on every other rank (Aborted, naming rank 1): no rank
// returns a result. Rank 1 on the device and on the CPU (a mixed call).
TEST(CudaComm, AnOutlierThePlanRuledOutFailsTheCallOnEveryRank) {
  SKIP_WITHOUT_GPU();
  const size_t count = 3000;
  const int N = 3;
  const ScopedEnv hook("NCCLZ_TEST_OUTLIER", "1");
  for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::Broadcast}) {
    for (const std::vector<bool>& pattern : {std::vector<bool>(N, true), std::vector<bool>{true, false, true}}) {
      SCOPED_TRACE(std::string(name(o)) + (pattern[1] ? ", rank 1 on the device" : ", rank 1 on the CPU"));
      Ranks R = make_ranks(N, true);
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 29));
      const auto res = run(R, o, DataType::F32, RedOp::Sum, Compression::lossy_abs(1e-3), count, in, pattern);
      for (int r = 0; r < N; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const std::string& e = res[size_t(r)].error;
        ASSERT_NE(e, "") << "the call returned";
        if (r == 1) {
          EXPECT_NE(e.find("do not fit the lossy grid"), std::string::npos) << e;
          EXPECT_NE(e.find("communicator aborted"), std::string::npos) << e;
        } else {
          EXPECT_NE(e.find("rank 1 aborted the communicator"), std::string::npos) << e;
        }
      }
    }
  }
}

// One rank per GPU (a framework's LOCAL_RANK, then cudaSetDevice): 4 ranks
// as threads, rank r's buffers on device r % D (D devices, at least 2; the
// emulator makes 4 with NCCLZ_EMU_DEVICES=4), alone and with a host rank
// among them: every collective lossy, lossless and uncompressed on the device
// where the buffers are, with the all-host call's bits. A communicator's
// device calls take one device: a call with buffers on another one is an
// InvalidArgument on that rank and a RemoteError on the others, and the
// communicator works on afterwards.
TEST(CudaComm, RanksOnSeparateDevices) {
  SKIP_WITHOUT_GPU();
  const int D = cuda::device_count();
  if (D < 2) GTEST_SKIP() << "one CUDA device: ranks on separate devices not run (emulator: NCCLZ_EMU_DEVICES=4)";
  // Two channels (the second on a pool thread, not the caller's): 256 KiB
  // of data each at least (core::kBytesPerChannel).
  const size_t count = 140000;
  const int N = 4;
  Ranks R(N, [](int, CommConfig& cfg) {
    cfg.slot_bytes = 4096;
    cfg.sparse_slice_bytes = 16384;
    cfg.nchannels = 2;
    cfg.exact_nchannels = 2;
    // The all-host calls on the rings too (their exact all_reduce would run
    // the direct two hops, summing in rank order, where device buffers keep
    // the ring: test_latency.cpp checks those bits).
    cfg.direct_from_bytes = 0;
  });
  std::vector<int> spread(N), with_host(N);
  for (int r = 0; r < N; ++r) spread[size_t(r)] = with_host[size_t(r)] = r % D;
  with_host[2] = -1;
  const std::vector<int> all_host(N, -1);
  for (const Compression& c : {Compression::lossy_rel(1e-3), Compression::lossless(), Compression::none()}) {
    for (Op o : kAllOps) {
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 19));
      const auto host = run(R, o, DataType::F32, RedOp::Sum, c, count, in, all_host);
      for (const auto& pattern : {spread, with_host}) {
        const auto dev = run(R, o, DataType::F32, RedOp::Sum, c, count, in, pattern);
        for (int r = 0; r < N; ++r) {
          SCOPED_TRACE(std::string(name(o)) + " mode " + std::to_string(int(c.mode)) + " rank " + std::to_string(r) +
                       (pattern == with_host ? " (a host rank among them)" : ""));
          ASSERT_EQ(host[size_t(r)].error, "");
          ASSERT_EQ(dev[size_t(r)].error, "");
          EXPECT_EQ(dev[size_t(r)].stats.on_device, pattern[size_t(r)] >= 0);
          if (o == Op::AllReduce) {
            EXPECT_EQ(dev[size_t(r)].stats.channels, 2);
          }
          if (has_output(o, r)) {
            EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out) << "device and host results differ";
          }
        }
      }
    }
  }
  // Rank 0's communicator took device 0 above: device 1 now is refused.
  R.run([&](int r, Communicator& comm) {
    const size_t n = 256;
    std::unique_ptr<DevBuf> s, d;
    if (r == 0) {
      ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
      s = std::make_unique<DevBuf>(n * 4);
      d = std::make_unique<DevBuf>(n * 4);
    }
    expect_refused_on_rank0(comm, r, s ? s->get() : nullptr, d ? d->get() : nullptr, n, 1,
                            "one device per communicator");
  });
}

// Paths that run on host copies of device buffers: one rank, non-finite inputs (the exact fallback), a lossy call rank
// 0's proposal does not touch. Every one the host call's bits, the output back on the device, on_device false.
// (Uncompressed and lossless float32 calls of several ranks run on the device: *CollectivesOnDevice.)
TEST(CudaComm, HostCopiesForTheOtherPaths) {
  SKIP_WITHOUT_GPU();
  const size_t count = 2000;
  for (int N : {1, 3}) {
    Ranks R = make_ranks(N);
    for (Op o : kAllOps) {
      const bool rooted = o == Op::Broadcast || o == Op::Reduce || o == Op::Gather || o == Op::Scatter;
      if (rooted && N == 1) continue;  // kRoot is rank 1
      for (int k = 0; k < 3; ++k) {
        const Compression c = k == 0   ? Compression::none()
                              : k == 1 ? Compression::lossless()
                                       : Compression::lossy_abs(1e-3);
        std::vector<std::vector<uint8_t>> in;
        for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 3));
        // A NaN in data that moves: the exact fallback (a broadcast's or scatter's root's).
        const bool from_root = o == Op::Broadcast || o == Op::Scatter;
        if (k == 2 && N > 1) put_value(DataType::F32, in[from_root ? kRoot : size_t(N - 1)], 5, std::nan(""));
        const auto host = run(R, o, DataType::F32, RedOp::Sum, c, count, in, std::vector<bool>(size_t(N), false));
        const auto dev = run(R, o, DataType::F32, RedOp::Sum, c, count, in, std::vector<bool>(size_t(N), true));
        for (int r = 0; r < N; ++r) {
          SCOPED_TRACE(std::string(name(o)) + " N=" + std::to_string(N) + " mode " + std::to_string(k) + " rank " +
                       std::to_string(r));
          ASSERT_EQ(dev[size_t(r)].error, "");
          EXPECT_EQ(dev[size_t(r)].stats.on_device, k < 2 && N > 1);
          if (has_output(o, r)) {
            EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out);
          }
          if (k == 2 && N > 1) {
            EXPECT_TRUE(dev[size_t(r)].stats.exact_fallback);
          }
        }
      }
    }
  }
}

// Small exact calls of device buffers take the latency algorithm, as the
// same calls of host buffers do: their data rides with the call descriptor
// from host copies (one hop, or two for a larger all_reduce), so device,
// host and mixed communicators get the same bits (a float sum's order is the
// algorithm's) and no ring steps.
TEST(CudaComm, SmallExactCallsTakeTheLatencyAlgorithm) {
  SKIP_WITHOUT_GPU();
  for (int N : {2, 3, 4}) {
    Ranks R(N, [](int, CommConfig& cfg) {
      cfg.slot_bytes = 65536;
      cfg.latency_bytes = 8192;
      cfg.two_hop_bytes = 32768;
    });
    std::vector<bool> mixed(size_t(N), false);
    mixed[0] = true;
    // One hop (messages of at most 8000 bytes: a reduction's input, an
    // all_gather's output), two hops (an all_reduce of 6000 floats).
    for (size_t count : {size_t(500), size_t(6000)}) {
      for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::Broadcast, Op::Reduce}) {
        if (count > 500 && o != Op::AllReduce) continue;
        for (const Compression& c : {Compression::none(), Compression::lossless()}) {
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) in.push_back(input(DataType::F32, in_count(o, count, N), r, 29));
          const auto host = run(R, o, DataType::F32, RedOp::Sum, c, count, in, std::vector<bool>(size_t(N), false));
          for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
            const auto dev = run(R, o, DataType::F32, RedOp::Sum, c, count, in, pattern);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE(std::string(name(o)) + " N=" + std::to_string(N) + " count " + std::to_string(count) +
                           " mode " + std::to_string(int(c.mode)) + " rank " + std::to_string(r) +
                           (pattern == mixed ? " (mixed)" : ""));
              ASSERT_EQ(dev[size_t(r)].error, "");
              EXPECT_EQ(host[size_t(r)].stats.algorithm, Algorithm::Latency);
              EXPECT_EQ(dev[size_t(r)].stats.algorithm, Algorithm::Latency);
              EXPECT_FALSE(dev[size_t(r)].stats.on_device);
              if (has_output(o, r)) {
                EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out) << "device and host results differ";
              }
            }
          }
        }
      }
    }
  }
}

/// fn(layout, N, ranks, mixed) for the hierarchical layouts 2x2, 2x3 and 3x2
/// (hosts x ranks, from the topology override; two hosts exchange codes, three
/// run their ring): N ranks with 4 KiB slots on the hierarchical schedules at
/// every size; `mixed`: every third rank on the device.
void for_each_layout(const std::function<void(const char*, int, Ranks&, const std::vector<bool>&)>& fn) {
  for (const char* layout : {"2x2", "2x3", "3x2"}) {
    const int N = (layout[0] - '0') * (layout[2] - '0');
    Ranks R(N, [layout](int, CommConfig& cfg) {
      cfg.slot_bytes = 4096;
      cfg.topo_hosts = layout;
      cfg.latency_bytes = 0;  // (the latency algorithm below it)
    });
    std::vector<bool> mixed(size_t(N), false);
    for (int r = 0; r < N; r += 3) mixed[size_t(r)] = true;
    fn(layout, N, R, mixed);
  }
}

/// Exact calls (compression c: none or lossless) of every collective on 2-4
/// ranks, all on the device and device and host ranks mixed, for the types
/// and operators given (skip: the combinations left out): every output the
/// bits of the all-host uncompressed call (and of the all-host call with c);
/// on the device (CallStats::on_device) where the rank's buffers are and
/// coded(t); where `compresses` the ring collectives' device ranks of float32
/// send fewer bytes than raw. Inputs without NaNs (arithmetic on NaNs leaves
/// their payload to the hardware).
void check_exact_on_device(const Compression& c, const std::vector<DataType>& types, const std::vector<RedOp>& ops,
                           unsigned seed, const std::function<bool(DataType)>& coded, bool compresses,
                           const std::function<bool(int, DataType, RedOp)>& skip) {
  const size_t base_count = ncclz_test::quick() ? 3000 : 20000;
  const bool none_mode = c.mode == Compression::Mode::None;
  for (int N : {2, 3, 4}) {
    // Direct off: above latency_bytes host buffers of ranks that reach each
    // other's memory take the direct schedules, whose all_reduce sums in rank
    // order, while device buffers (and so a call with any device rank) run
    // the ring, in the ring's order (20000 float64 with 4 ranks: 160 KB, from
    // direct_from_bytes' 128 KiB); the all-host call compared with is then
    // the one device ranks can match, the ring's.
    Ranks R = make_ranks(N, false, false);
    std::vector<bool> mixed(size_t(N), false);
    for (int r = 0; r < N; r += 2) mixed[size_t(r)] = true;
    for (DataType t : types) {
      // (bytes: as many of them as float32 has bytes, above the latency algorithm's sizes)
      const size_t count = base_count * (esize(t) == 1 ? 4 : 1);
      for (Op o : kAllOps) {
        for (RedOp op : ops) {
          if ((op != RedOp::Sum && !reduces(o)) || skip(N, t, op)) continue;
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, seed));
          const std::vector<bool> all_host(size_t(N), false);
          const auto none = run(R, o, t, op, Compression::none(), count, in, all_host);
          const auto host = none_mode ? none : run(R, o, t, op, c, count, in, all_host);
          for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
            const auto dev = run(R, o, t, op, c, count, in, pattern);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE(std::string(name(o)) + " op " + std::to_string(int(op)) + " N=" + std::to_string(N) +
                           " type " + std::to_string(int(t)) + " rank " + std::to_string(r) +
                           (pattern == mixed ? " (mixed)" : ""));
              ASSERT_EQ(dev[size_t(r)].error, "");
              EXPECT_EQ(dev[size_t(r)].stats.on_device, coded(t) && pattern[size_t(r)]);
              EXPECT_FALSE(host[size_t(r)].stats.on_device);
              if (has_output(o, r)) {
                EXPECT_EQ(host[size_t(r)].out, none[size_t(r)].out) << "the host calls differ";
                EXPECT_EQ(dev[size_t(r)].out, none[size_t(r)].out) << "device and host results differ";
              }
              const bool ring = o == Op::AllReduce || o == Op::ReduceScatter || o == Op::AllGather;
              if (compresses && coded(t) && pattern[size_t(r)] && ring && (t == DataType::F32 || t == DataType::U8)) {
                EXPECT_LT(dev[size_t(r)].stats.wire_bytes, dev[size_t(r)].stats.raw_bytes) << "nothing compressed";
              }
            }
          }
        }
      }
    }
  }
}

// Uncompressed collectives of device buffers: the values stay on the device
// (raw slices between the slots and the device, reduced there in their own
// type), for float and integer types and every operator (avg divided on the
// device).
TEST(CudaComm, UncompressedCollectivesOnDevice) {
  SKIP_WITHOUT_GPU();
  check_exact_on_device(
      Compression::none(), {DataType::F32, DataType::F64, DataType::BF16, DataType::F16, DataType::I32},
      {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Prod}, 13, [](DataType) { return true; }, false,
      [](int, DataType, RedOp) { return false; });
}

// Lossless collectives of device buffers: float32, bfloat16 and float16 are
// coded on the device (FloatHuff slices, Raw where not smaller; every rank
// codes without rANS since one is a device), and so are uint8 and int8 (sum,
// as their bytes: FloatHuff over the bytes); float64 runs on host copies;
// lossless bit-identical to none; the float32 and uint8 slices compress.
TEST(CudaComm, LosslessCollectivesOnDevice) {
  SKIP_WITHOUT_GPU();
  check_exact_on_device(
      Compression::lossless(),
      {DataType::F32, DataType::BF16, DataType::F16, DataType::F64, DataType::U8, DataType::I8},
      {RedOp::Sum, RedOp::Avg, RedOp::Max}, 17, [](DataType t) { return t != DataType::F64; }, true,
      // fewer cases: every operator ran uncompressed; int8's max and avg run
      // on host copies (core::reduces_as_wire)
      [](int N, DataType t, RedOp op) {
        return (op == RedOp::Max && (N == 3 || t == DataType::F16)) || (t == DataType::I8 && op != RedOp::Sum);
      });
}

// float8 device buffers (e4m3fn, e5m2): the collectives that only move
// them (all_gather, broadcast, gather, scatter, all_to_all) run on the
// device as bytes, uncompressed (raw slices) and lossless (FloatHuff over the
// bytes); those that reduce them (all_reduce, reduce_scatter, reduce: float8
// arithmetic) on host copies; every output the all-host call's bits, device
// and host ranks mixed too.
TEST(CudaComm, Float8MovesOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 12000 : 40000;  // bytes: above the latency algorithm's sizes
  for (int N : {2, 3}) {
    Ranks R = make_ranks(N, false, false);
    std::vector<bool> mixed(size_t(N), false);
    mixed[0] = true;
    for (DataType t : {DataType::F8E4M3, DataType::F8E5M2}) {
      for (Op o : kAllOps) {
        std::vector<std::vector<uint8_t>> in;
        for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, 31));
        for (const Compression& c : {Compression::none(), Compression::lossless()}) {
          const auto host = run(R, o, t, RedOp::Sum, c, count, in, std::vector<bool>(size_t(N), false));
          for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
            const auto dev = run(R, o, t, RedOp::Sum, c, count, in, pattern);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE(std::string(name(o)) + " N=" + std::to_string(N) + " type " + std::to_string(int(t)) +
                           (c.mode == Compression::Mode::None ? " none" : " lossless") + " rank " + std::to_string(r) +
                           (pattern == mixed ? " (mixed)" : ""));
              ASSERT_EQ(dev[size_t(r)].error, "");
              EXPECT_EQ(dev[size_t(r)].stats.on_device, pattern[size_t(r)] && !reduces(o));
              if (has_output(o, r)) {
                EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out) << "device and host results differ";
              }
            }
          }
        }
      }
    }
  }
  // The hierarchical schedules too (all_gather and broadcast: moved on both rings).
  for_each_layout([&](const char* layout, int N, Ranks& R, const std::vector<bool>& mixed) {
    for (Op o : {Op::AllGather, Op::Broadcast}) {
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < N; ++r) in.push_back(input(DataType::F8E4M3, in_count(o, count, N), r, 37));
      for (const Compression& c : {Compression::none(), Compression::lossless()}) {
        const auto host = run(R, o, DataType::F8E4M3, RedOp::Sum, c, count, in, std::vector<bool>(size_t(N), false));
        for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
          const auto dev = run(R, o, DataType::F8E4M3, RedOp::Sum, c, count, in, pattern);
          for (int r = 0; r < N; ++r) {
            SCOPED_TRACE(std::string(layout) + " " + name(o) +
                         (c.mode == Compression::Mode::None ? " none" : " lossless") + " rank " + std::to_string(r) +
                         (pattern == mixed ? " (mixed)" : ""));
            ASSERT_EQ(dev[size_t(r)].error, "");
            EXPECT_EQ(dev[size_t(r)].stats.algorithm, Algorithm::Hierarchical);
            EXPECT_EQ(dev[size_t(r)].stats.on_device, bool(pattern[size_t(r)]));
            EXPECT_EQ(dev[size_t(r)].out, host[size_t(r)].out) << "device and host results differ";
          }
        }
      }
    }
  });
}

// The hierarchical schedules with device buffers (hosts from the topology
// override: 2x2 and 2x3), uncompressed and lossless: both rings (raw slices
// inside a host, raw or FloatHuff slices between hosts) on the device
// (CallStats::on_device, algorithm Hierarchical), all ranks on the device
// and device and host ranks mixed; every output the all-host uncompressed
// call's bits (lossless and none alike), for the four hierarchical
// collectives and sum / max, of float32, bfloat16 and uint8 (FloatHuff over
// the bytes between hosts).
TEST(CudaComm, HierarchicalExactCallsOnDevice) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 2400 : 12000;
  for_each_layout([&](const char* layout, int N, Ranks& R, const std::vector<bool>& mixed) {
    for (DataType t : {DataType::F32, DataType::BF16, DataType::U8}) {
      for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::Broadcast}) {
        for (RedOp op : {RedOp::Sum, RedOp::Max}) {
          if (op != RedOp::Sum && !reduces(o)) continue;
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, 29));
          const auto none = run(R, o, t, op, Compression::none(), count, in, std::vector<bool>(size_t(N), false));
          for (const Compression& c : {Compression::none(), Compression::lossless()}) {
            for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
              const auto dev = run(R, o, t, op, c, count, in, pattern);
              for (int r = 0; r < N; ++r) {
                SCOPED_TRACE(std::string(layout) + " " + name(o) + " op " + std::to_string(int(op)) + " type " +
                             std::to_string(int(t)) + (c.mode == Compression::Mode::None ? " none" : " lossless") +
                             " rank " + std::to_string(r) + (pattern == mixed ? " (mixed)" : ""));
                ASSERT_EQ(dev[size_t(r)].error, "");
                EXPECT_EQ(dev[size_t(r)].stats.algorithm, Algorithm::Hierarchical);
                EXPECT_EQ(dev[size_t(r)].stats.on_device, bool(pattern[size_t(r)]));
                EXPECT_EQ(dev[size_t(r)].out, none[size_t(r)].out) << "differs from the host call";
              }
            }
          }
        }
      }
    }
  });
}

// Lossy calls on the hierarchical schedules with device buffers (2x2 and
// 2x3 from the topology override): all_gather and broadcast move codes
// quantized before (raw inside hosts, coded between them), all_reduce and
// reduce_scatter (sum, avg) quantize the host sums whole between the phases
// on each channel's stream (algorithms::HostSumCodes; host ranks do it slice
// by slice in a stage): on the device (algorithm Hierarchical), all ranks
// and mixed with host ranks; every output the all-host call's bits, within
// the bound of the fp64 reference. A max / min the same way: each host's
// exact max / min quantized between the phases, the codes' max / min taken
// on the inter-host ring, on the device.
TEST(CudaComm, HierarchicalLossyCallsOnDevice) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 2400 : 12000;
  for_each_layout([&](const char* layout, int N, Ranks& R, const std::vector<bool>& mixed) {
    for (DataType t : {DataType::F32, DataType::BF16}) {
      const double E = t == DataType::BF16 ? 1.0 : 1e-3;  // (bf16 sums of 3 ranks near 18 round by 0.06 each)
      const Compression c = Compression::lossy_abs(E);
      for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::Broadcast}) {
        for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min}) {
          if (op != RedOp::Sum && !reduces(o)) continue;
          if (op == RedOp::Min && t != DataType::F32) continue;
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < N; ++r) in.push_back(input(t, in_count(o, count, N), r, 31));
          const auto host = run(R, o, t, op, c, count, in, std::vector<bool>(size_t(N), false));
          for (const auto& pattern : {std::vector<bool>(size_t(N), true), mixed}) {
            const auto dev = run(R, o, t, op, c, count, in, pattern);
            for (int r = 0; r < N; ++r) {
              SCOPED_TRACE(std::string(layout) + " " + name(o) + " op " + std::to_string(int(op)) + " type " +
                           std::to_string(int(t)) + " rank " + std::to_string(r) +
                           (pattern == mixed ? " (mixed)" : ""));
              const Result& h = host[size_t(r)];
              const Result& d = dev[size_t(r)];
              ASSERT_EQ(h.error, "");
              ASSERT_EQ(d.error, "");
              EXPECT_EQ(d.stats.algorithm, Algorithm::Hierarchical);
              EXPECT_FALSE(d.stats.exact_fallback);
              EXPECT_EQ(d.stats.on_device, pattern[size_t(r)]);
              EXPECT_EQ(d.out, h.out) << "device and host results differ";
              expect_within_bound(d, o, t, op, count, N, r, in, E);
            }
          }
        }
      }
    }
  });
}

// send / recv with device buffers on either side or both: each side codes on
// the device where its buffers are (lossy: the receiver decodes into device
// codes; uncompressed: raw slices; lossless: FloatHuff slices, which a host
// peer writes too, for float32 and for bytes); the host pair's bits.
TEST(CudaComm, SendRecvWithDeviceBuffers) {
  SKIP_WITHOUT_GPU();
  const size_t count = ncclz_test::quick() ? 5000 : 40000;
  Ranks R = make_ranks(2);
  const std::vector<uint8_t> x = input(DataType::F32, count, 0, 21);
  for (const Compression& c : {Compression::lossy_abs(1e-3), Compression::none(), Compression::lossless()}) {
    std::vector<uint8_t> want;  // the host pair's result
    for (int k = 0; k < 4; ++k) {
      const bool send_dev = k & 1, recv_dev = k & 2;
      SCOPED_TRACE(std::string(c.mode == Compression::Mode::None       ? "none"
                               : c.mode == Compression::Mode::Lossless ? "lossless"
                                                                       : "lossy") +
                   " send on " + (send_dev ? "device" : "host") + ", recv on " + (recv_dev ? "device" : "host"));
      std::vector<uint8_t> got;
      CallStats sent, recvd;
      R.run([&](int r, Communicator& comm) {
        const bool dev = r == 0 ? send_dev : recv_dev;
        std::vector<uint8_t> h = r == 0 ? x : std::vector<uint8_t>(x.size(), 0);
        std::unique_ptr<DevBuf> d;
        void* buf = h.data();
        if (dev) {
          d = std::make_unique<DevBuf>(h.size());
          ncclz_test::to_device(d->get(), h);
          buf = d->get();
          set_buffer_device(0);
        }
        if (r == 0) {
          comm.send(buf, count, DataType::F32, 1, c, &sent);
        } else {
          comm.recv(buf, count, DataType::F32, 0, c, &recvd);
          got = dev ? from_device(buf, h.size()) : h;
        }
        set_buffer_device(-1);
      });
      if (k == 0) want = got;
      EXPECT_EQ(got, want) << "differs from the host pair";
      const bool lossy = c.mode != Compression::Mode::None;
      EXPECT_EQ(sent.on_device, send_dev);
      EXPECT_EQ(recvd.on_device, recv_dev);
      if (c.mode == Compression::Mode::Lossless) {
        EXPECT_LT(sent.wire_bytes, sent.raw_bytes) << "nothing compressed";
      }
      if (lossy) {
        EXPECT_FALSE(recvd.exact_fallback);
        double worst = 0;
        for (size_t i = 0; i < count; ++i)
          worst = std::max(worst, std::fabs(value_at(DataType::F32, got, i) - value_at(DataType::F32, x, i)));
        EXPECT_LE(worst, 1e-3);
      } else {
        EXPECT_EQ(got, x);
      }
    }
  }
  // Lossless bytes (uint8, and float8 as its bytes): FloatHuff over them on
  // whichever side is a device (the host side's CPU coder writes the same),
  // exact, compressed.
  const size_t nb = 4 * count;
  for (DataType t : {DataType::U8, DataType::F8E5M2}) {
    const std::vector<uint8_t> b = input(t, nb, 0, 22);
    for (int k = 0; k < 4; ++k) {
      const bool send_dev = k & 1, recv_dev = k & 2;
      SCOPED_TRACE(std::string(dtype_name(t)) + " lossless, send on " + (send_dev ? "device" : "host") + ", recv on " +
                   (recv_dev ? "device" : "host"));
      std::vector<uint8_t> got;
      CallStats sent, recvd;
      R.run([&](int r, Communicator& comm) {
        const bool dev = r == 0 ? send_dev : recv_dev;
        std::vector<uint8_t> h = r == 0 ? b : std::vector<uint8_t>(nb, 0);
        std::unique_ptr<DevBuf> d;
        void* buf = h.data();
        if (dev) {
          d = std::make_unique<DevBuf>(nb);
          ncclz_test::to_device(d->get(), h);
          buf = d->get();
          set_buffer_device(0);
        }
        if (r == 0) {
          comm.send(buf, nb, t, 1, Compression::lossless(), &sent);
        } else {
          comm.recv(buf, nb, t, 0, Compression::lossless(), &recvd);
          got = dev ? from_device(buf, nb) : h;
        }
        set_buffer_device(-1);
      });
      EXPECT_EQ(got, b);
      EXPECT_EQ(sent.on_device, send_dev);
      EXPECT_EQ(recvd.on_device, recv_dev);
      EXPECT_LT(sent.wire_bytes, sent.raw_bytes) << "nothing compressed";
    }
  }
}

// Device buffers on a device that is not there: InvalidArgument on the rank
// that passed them, RemoteError on the others; the communicator still works
// afterwards.
TEST(CudaComm, DeviceBuffersOnADeviceThatIsNotThere) {
  SKIP_WITHOUT_GPU();
  const int N = 2;
  const size_t count = 256;
  if (cuda::device_count() > 7) GTEST_SKIP() << "device 7 is there";
  Ranks R = make_ranks(N);
  R.run([&](int r, Communicator& comm) {
    DevBuf s(count * 4), d(count * 4);
    expect_refused_on_rank0(comm, r, s.get(), d.get(), count, 7, "device 7");
  });
}

// The C API with device buffers (ncclzSetBufferDevice): a lossy allreduce and
// a broadcast whose root's sendbuff is not its recvbuff, the same results as
// with host buffers.
TEST(CudaComm, CApiTakesDeviceBuffers) {
  SKIP_WITHOUT_GPU();
  const int N = 2;
  const size_t n = 3000;
  const std::vector<ncclzComm_t> comms = c_comms(N);
  std::vector<std::vector<uint8_t>> host(N), dev(N), bhost(N), bdev(N);
  for (bool on_device : {false, true}) {
    ncclz_test::run_threads(N, [&](int r) {
      const std::vector<uint8_t> x = input(DataType::F32, n, r, 31);
      std::vector<uint8_t> y(x.size()), b(x.size(), 0);
      void *send = const_cast<uint8_t*>(x.data()), *recv = y.data(), *bsend = send, *brecv = b.data();
      std::unique_ptr<DevBuf> ds, dr, db;
      if (on_device) {
        ds = std::make_unique<DevBuf>(x.size());
        dr = std::make_unique<DevBuf>(x.size());
        db = std::make_unique<DevBuf>(x.size());
        ncclz_test::to_device(ds->get(), x);
        ncclz_test::to_device(db->get(), b);
        send = bsend = ds->get();
        recv = dr->get();
        brecv = db->get();
        ASSERT_EQ(ncclzSetBufferDevice(0), ncclzSuccess);
      }
      ncclzComm_t c = comms[size_t(r)];
      ASSERT_EQ(ncclzAllReduce(send, recv, n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(1e-3), c), ncclzSuccess)
          << ncclzGetLastError(c);
      ncclzCallStats_t st;
      ASSERT_EQ(ncclzCommGetLastStats(c, &st), ncclzSuccess);
      EXPECT_EQ(st.onDevice, on_device ? 1 : 0) << "rank " << r;
      EXPECT_EQ(st.exactFallback, 0) << "rank " << r;
      ASSERT_EQ(ncclzBroadcast(bsend, brecv, n, ncclzFloat32, 1, ncclzCompressionLossyAbs(1e-3), c), ncclzSuccess)
          << ncclzGetLastError(c);
      ASSERT_EQ(ncclzSetBufferDevice(-1), ncclzSuccess);
      (on_device ? dev : host)[size_t(r)] = on_device ? from_device(recv, x.size()) : y;
      (on_device ? bdev : bhost)[size_t(r)] = on_device ? from_device(brecv, x.size()) : b;
    });
  }
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(dev[size_t(r)], host[size_t(r)]) << "allreduce, rank " << r;
    EXPECT_EQ(bdev[size_t(r)], bhost[size_t(r)]) << "broadcast, rank " << r;
  }
  for (ncclzComm_t c : comms) ncclzCommDestroy(c);
}

// Grouped sends and recvs on device buffers (Communicator::group, core/
// p2p_group.cpp: on host copies): 3 ranks each send to both neighbours and
// receive from both at once, each call's buffer on the device or the host
// (PeerCall::device, or the thread's buffer device with host calls marked
// -1), in every mode: the all-host group's bits on every rank, lossy within
// E of the sender's values, exact otherwise.
TEST(CudaComm, GroupsOfDeviceBuffers) {
  SKIP_WITHOUT_GPU();
  const int N = 3;
  const size_t count = ncclz_test::quick() ? 4000 : 30000;
  Ranks R = make_ranks(N);
  for (const Compression& c : {Compression::lossy_abs(1e-3), Compression::none(), Compression::lossless()}) {
    std::vector<std::vector<uint8_t>> want(2 * N);  // the all-host group's results: (rank, from left / right)
    for (int k = 0; k < 16; k += 5) {               // which of the four calls are on the device: none, 0101, 1010, 1111
      SCOPED_TRACE(std::string(c.mode == Compression::Mode::None       ? "none"
                               : c.mode == Compression::Mode::Lossless ? "lossless"
                                                                       : "lossy") +
                   " placement " + std::to_string(k));
      std::vector<std::vector<uint8_t>> got(2 * N);
      R.run([&](int r, Communicator& comm) {
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<std::vector<uint8_t>> h = {
            input(DataType::F32, count, r, 41), {}, input(DataType::F32, count, r, 43), {}};
        h[1].assign(h[0].size(), 0);
        h[3].assign(h[0].size(), 0);
        const bool thread_device = r % 2 == 1;  // the thread's buffer device, host calls marked -1
        if (thread_device) set_buffer_device(0);
        std::vector<std::unique_ptr<DevBuf>> d(4);
        std::vector<PeerCall> calls(4);
        for (int i = 0; i < 4; ++i) {
          PeerCall& pc = calls[size_t(i)];
          pc.send = i % 2 == 0;
          pc.peer = i == 0 || i == 3 ? right : left;
          pc.count = count;
          pc.type = DataType::F32;
          pc.compression = c;
          pc.buf = h[size_t(i)].data();
          const bool dev = (k >> i) & 1;
          if (dev) {
            d[size_t(i)] = std::make_unique<DevBuf>(h[size_t(i)].size());
            ncclz_test::to_device(d[size_t(i)]->get(), h[size_t(i)]);
            pc.buf = d[size_t(i)]->get();
          }
          pc.device = thread_device ? (dev ? PeerCall::kThreadBufferDevice : -1) : (dev ? 0 : -1);
        }
        CallStats st;
        comm.group(calls, &st);
        set_buffer_device(-1);
        EXPECT_FALSE(st.on_device) << "rank " << r;
        for (int i : {1, 3}) {
          got[size_t(2 * r + i / 2)] =
              d[size_t(i)] ? from_device(d[size_t(i)]->get(), h[size_t(i)].size()) : h[size_t(i)];
        }
        // sends' buffers unchanged
        for (int i : {0, 2}) {
          if (d[size_t(i)]) {
            EXPECT_EQ(from_device(d[size_t(i)]->get(), h[size_t(i)].size()), h[size_t(i)]);
          }
        }
      });
      if (k == 0) want = got;
      for (int r = 0; r < N; ++r) {
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        for (int j = 0; j < 2; ++j) {
          SCOPED_TRACE("rank " + std::to_string(r) + (j == 0 ? ", from the left" : ", from the right"));
          const std::vector<uint8_t>& g = got[size_t(2 * r + j)];
          EXPECT_EQ(g, want[size_t(2 * r + j)]) << "differs from the all-host group";
          const std::vector<uint8_t> sent = input(DataType::F32, count, j == 0 ? left : right, j == 0 ? 41 : 43);
          if (c.mode == Compression::Mode::None || c.mode == Compression::Mode::Lossless) {
            EXPECT_EQ(g, sent);
            continue;
          }
          double worst = 0;
          for (size_t i = 0; i < count; ++i)
            worst = std::max(worst, std::fabs(value_at(DataType::F32, g, i) - value_at(DataType::F32, sent, i)));
          EXPECT_LE(worst, 1e-3);
        }
      }
    }
  }
}

// ncclzGroupStart / ncclzGroupEnd with one thread driving both ranks, each
// call made with the buffer device set just before it (NCCL's one thread
// and several devices): rank 0's allreduce and send/recv on device buffers,
// rank 1's on host buffers, each communicator's calls run on a thread of
// its own at ncclzGroupEnd, each with its own call's device (a queued call
// once ran with that thread's device, -1: device pointers read as host
// memory). The results as the same calls made outside a group.
TEST(CudaComm, CApiGroupKeepsEachCallsBufferDevice) {
  SKIP_WITHOUT_GPU();
  const int N = 2;
  const size_t n = 3000;
  const std::vector<ncclzComm_t> comms = c_comms(N);
  std::vector<std::vector<uint8_t>> x(N), want(N);
  for (int r = 0; r < N; ++r) x[size_t(r)] = input(DataType::F32, n, r, 51);
  // The reference: every rank on host buffers, no group.
  ncclz_test::run_threads(N, [&](int r) {
    std::vector<uint8_t> y(x[0].size());
    ASSERT_EQ(ncclzAllReduce(x[size_t(r)].data(), y.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(1e-3),
                             comms[size_t(r)]),
              ncclzSuccess);
    want[size_t(r)] = y;
  });
  std::vector<std::unique_ptr<DevBuf>> ds, dy, dr;
  for (int r = 0; r < N; ++r) {
    ds.push_back(std::make_unique<DevBuf>(x[0].size()));
    dy.push_back(std::make_unique<DevBuf>(x[0].size()));
    dr.push_back(std::make_unique<DevBuf>(x[0].size()));
    ncclz_test::to_device(ds.back()->get(), x[size_t(r)]);
  }
  std::vector<std::vector<uint8_t>> hy(N, std::vector<uint8_t>(x[0].size())), hr = hy;
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  for (int r = 0; r < N; ++r) {
    const bool dev = r == 0;
    ASSERT_EQ(ncclzSetBufferDevice(dev ? 0 : -1), ncclzSuccess);
    void* s = dev ? ds[size_t(r)]->get() : x[size_t(r)].data();
    void* y = dev ? dy[size_t(r)]->get() : hy[size_t(r)].data();
    void* rv = dev ? dr[size_t(r)]->get() : hr[size_t(r)].data();
    ncclzComm_t c = comms[size_t(r)];
    ASSERT_EQ(ncclzAllReduce(s, y, n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(1e-3), c), ncclzSuccess);
    ASSERT_EQ(ncclzSend(s, n, ncclzFloat32, 1 - r, ncclzCompressionNone(), c), ncclzSuccess);
    ASSERT_EQ(ncclzRecv(rv, n, ncclzFloat32, 1 - r, ncclzCompressionNone(), c), ncclzSuccess);
  }
  ASSERT_EQ(ncclzSetBufferDevice(-1), ncclzSuccess);
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(comms[0]) << " / " << ncclzGetLastError(comms[1]);
  for (int r = 0; r < N; ++r) {
    const bool dev = r == 0;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(dev ? from_device(dy[size_t(r)]->get(), x[0].size()) : hy[size_t(r)], want[size_t(r)]);
    EXPECT_EQ(dev ? from_device(dr[size_t(r)]->get(), x[0].size()) : hr[size_t(r)], x[size_t(1 - r)]);
  }
  ncclzCallStats_t st;
  ASSERT_EQ(ncclzCommGetLastStats(comms[0], &st), ncclzSuccess);
  for (ncclzComm_t c : comms) ncclzCommDestroy(c);
}

#endif  // NCCLZ_WITH_CUDA
