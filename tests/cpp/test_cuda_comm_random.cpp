// Random calls with device buffers: the communicator's device path against
// its host path, call by call. Each case draws the ranks (2-4, flat or two
// hosts of two from the topology override), the communicator's settings
// (slot and slice sizes, one or two channels, pipelined quantization or not,
// hierarchical rounds or phases, sparse inputs as lists or dense, the
// persistent ring kernels, the latency algorithm or not), the collective,
// data type, operator, mode (none, lossless, lossy abs or rel, sometimes a
// combination the call refuses), count (0, a few, a slot's or slice's worth
// and its neighbours, up to 150000), the inputs' shape (smooth, zeros, a
// constant, sparse, large, tiny, noise) and which ranks hold device buffers
// (all, or some); communicators of the same settings are made once and serve
// every case that draws them. It runs the call with every rank on host
// buffers, then with that placement, and checks: the same error on every
// rank (or none), the host call's bits on every rank that has an output, the
// same output on every rank of an all_reduce / all_gather / broadcast, a
// lossy result within the bound it reports (and that bound within the
// requested one when the call was compressed) on every element against the
// float64 reference.
//
// NCCLZ_RANDOM_CALLS (default 100, 160 with NCCLZ_CUDA_TEST_QUICK=0) cases
// from NCCLZ_RANDOM_SEED (default 1); a failure names its case's seed, which
// NCCLZ_RANDOM_SEED=<seed> NCCLZ_RANDOM_CALLS=1 runs alone.
// Built with CUDA (skips without a GPU, fails under NCCLZ_REQUIRE_GPU=1) and
// in the CPU emulator (tools/cuda_emu: ncclz_cuda_emu_comm_tests).
#if defined(NCCLZ_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_comm_calls.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/communicator.hpp"

using namespace ncclz;
using namespace ncclz_test::comm_calls;
using ncclz_test::Ranks;

namespace {

/// The inputs' shapes a case draws from.
enum class Shape { Smooth, Zeros, Constant, Sparse, Large, Tiny, Noise };
const char* shape_name(Shape s) {
  static const char* const names[] = {"smooth", "zeros", "constant", "sparse", "large", "tiny", "noise"};
  return names[int(s)];
}

/// One random call: what it runs on how many ranks, and where their buffers are.
struct Case {
  unsigned seed = 0;
  int nranks = 2;
  bool two_hosts = false;  ///< "2x2" from the topology override: the hierarchical schedules
  size_t slot_bytes = 4096, slice_bytes = 4096;
  int nchannels = 1, pipeline_quantize = 1, hier_rounds = 1, sparse_input = 1, persistent = 0;
  bool latency = true;  ///< the latency algorithm for small exact calls (else latency_bytes 0)
  Op o = Op::AllReduce;
  DataType t = DataType::F32;
  RedOp op = RedOp::Sum;
  Compression c;
  size_t count = 0;
  Shape shape = Shape::Smooth;
  std::vector<bool> device;  ///< rank r's buffers on device 0, else in host memory

  /// The communicator's settings besides the sizes (its key among the worlds too).
  std::string settings() const {
    return "channels " + std::to_string(nchannels) + " pipeline_quantize " + std::to_string(pipeline_quantize) +
           " hier_rounds " + std::to_string(hier_rounds) + " sparse_input " + std::to_string(sparse_input) +
           " persistent " + std::to_string(persistent) + (latency ? "" : " latency_bytes 0");
  }
  bool lossy() const { return c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel; }
  std::string describe() const {
    std::ostringstream s;
    s << "NCCLZ_RANDOM_SEED=" << seed << ": " << name(o) << " " << dtype_name(t) << " " << op_name(op) << " "
      << mode_name(c.mode);
    if (lossy()) s << " " << c.bound;
    s << ", count " << count << ", " << shape_name(shape) << " inputs, " << nranks << " ranks"
      << (two_hosts ? " (2x2)" : "") << ", slots " << slot_bytes << ", slices " << slice_bytes << ", " << settings()
      << ", buffers:";
    for (bool d : device) s << (d ? " device" : " host");
    return s.str();
  }
};

/// The scale of a shape's values (the smooth field's is about 1 + rank).
double scale_of(Shape s, DataType t) {
  if (s == Shape::Large) return t == DataType::F16 ? 1e3 : t == DataType::I32 ? 1e3 : 1e6;
  if (s == Shape::Tiny) return 1e-6;
  return 1;
}

Case draw(unsigned seed) {
  std::mt19937 g(seed);
  auto pick = [&](int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(g)); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; };
  Case x;
  x.seed = seed;
  x.two_hosts = chance(0.25);
  x.nranks = x.two_hosts ? 4 : 2 + pick(3);
  x.slot_bytes = chance(0.7) ? 4096 : 65536;
  x.slice_bytes = chance(0.5) ? x.slot_bytes : 4 * x.slot_bytes;
  x.nchannels = chance(0.2) ? 2 : 1;
  x.pipeline_quantize = chance(0.8);
  x.hier_rounds = chance(0.8);
  x.sparse_input = chance(0.8);
  x.persistent = chance(0.15);
  x.latency = chance(0.8);
  x.o = kAllOps[pick(8)];
  if (std::mt19937(seed * 5u + 2u)() % 8 == 0) x.o = Op::RingShift;  // (its own generator: other draws unchanged)
  static const DataType types[] = {DataType::F32, DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                                   DataType::I32, DataType::I8,  DataType::U32, DataType::U64};
  x.t = types[pick(chance(0.8) ? 6 : 9)];
  if (x.t == DataType::I8) {  // half of int8's draws take a float8 type, a quarter uint8 (their own generator)
    const unsigned f8 = std::mt19937(seed * 3u + 1u)() % 4;
    if (f8 < 2) x.t = f8 ? DataType::F8E5M2 : DataType::F8E4M3;
    if (f8 == 2) x.t = DataType::U8;
  }
  x.shape = Shape(pick(7));
  // The mode: a lossy bound from a tenth to a ten-thousandth of the data's
  // scale (or of its range), sometimes a combination the call refuses
  // (lossy integers, a lossy product).
  const int m = pick(10);
  const bool is_float = x.t == DataType::F32 || x.t == DataType::F64 || x.t == DataType::BF16 || x.t == DataType::F16;
  if (m < 2) {
    x.c = Compression::none();
  } else if (m < 4) {
    x.c = Compression::lossless();
  } else if (m < 7 && (is_float || chance(0.1))) {
    x.c = Compression::lossy_abs(scale_of(x.shape, x.t) * std::pow(10.0, -1 - pick(4)));
  } else if (is_float || chance(0.1)) {
    x.c = Compression::lossy_rel(std::pow(10.0, -1 - pick(4)));
  }
  static const RedOp ops[] = {RedOp::Sum, RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod};
  do {
    x.op = ops[pick(6)];
  } while ((x.op == RedOp::Prod && x.lossy() && chance(0.9)) ||
           (x.op == RedOp::Prod && !is_float));  // (products of integers overflow)
  if (!reduces(x.o)) x.op = RedOp::Sum;
  // The count: none, a few, one slot's or slice's worth and its neighbours, or anything up to 6000.
  const size_t es = esize(x.t);
  const int k = pick(20);
  if (k == 0) {
    x.count = 0;
  } else if (k < 4) {
    x.count = 1 + size_t(pick(8));
  } else if (k < 7) {
    x.count = std::max<size_t>(1, (k == 4 ? x.slot_bytes : x.slice_bytes) / es + size_t(pick(3)) - 1);
  } else if (k < 9) {  // (two channels take 256 KiB each at least: core::kBytesPerChannel)
    x.count = 20000 + size_t(pick(130000));
  } else {
    x.count = size_t(std::exp(std::uniform_real_distribution<double>(0, std::log(6000.0))(g)));
  }
  x.device.assign(size_t(x.nranks), true);
  if (chance(0.4)) {
    for (int r = 0; r < x.nranks; ++r) x.device[size_t(r)] = chance(0.5);
    x.device[size_t(pick(x.nranks))] = true;
  }
  return x;
}

/// Rank r's input of n elements in the case's shape.
std::vector<uint8_t> shaped_input(const Case& x, size_t n, int r) {
  std::vector<uint8_t> b = input(x.t, n, r, x.seed);  // the smooth field
  std::mt19937 g(x.seed * 7919u + unsigned(r));
  std::normal_distribution<double> normal(0, 1 + r);
  const double s = scale_of(x.shape, x.t);
  for (size_t i = 0; i < n; ++i) {
    switch (x.shape) {
      case Shape::Smooth: break;
      case Shape::Zeros: put_value(x.t, b, i, 0); break;
      case Shape::Constant: put_value(x.t, b, i, 0.25 * (r + 1)); break;
      case Shape::Sparse: put_value(x.t, b, i, g() % 20 == 0 ? normal(g) : 0.0); break;
      case Shape::Noise: put_value(x.t, b, i, normal(g)); break;
      case Shape::Large:
      case Shape::Tiny: put_value(x.t, b, i, s * std::sin(0.01 * double(i) + r) * (1 + r)); break;
    }
  }
  return b;
}

//// The communicators a case runs on, made once for each layout and sizes and
/// kept (the same communicator serves many calls, as a job's does). Direct
/// schedules off: host buffers would take them above direct_from_bytes and
/// sum in rank order, where device buffers keep the ring.
Ranks& world_for(std::map<std::string, std::unique_ptr<Ranks>>& worlds, const Case& x) {
  const std::string key = std::to_string(x.nranks) + (x.two_hosts ? "h" : "f") + std::to_string(x.slot_bytes) + "/" +
                          std::to_string(x.slice_bytes) + x.settings();
  auto& w = worlds[key];
  if (!w) {
    w = std::make_unique<Ranks>(x.nranks, [&x](int, CommConfig& cfg) {
      cfg.slot_bytes = x.slot_bytes;
      cfg.sparse_slice_bytes = x.slice_bytes;
      cfg.direct_from_bytes = 0;
      cfg.nchannels = x.nchannels;
      cfg.exact_nchannels = x.nchannels;
      cfg.pipeline_quantize = x.pipeline_quantize;
      cfg.hier_rounds = x.hier_rounds;
      cfg.sparse_input = x.sparse_input;
      cfg.persistent = x.persistent;
      if (!x.latency) cfg.latency_bytes = 0;
      if (x.two_hosts) cfg.topo_hosts = "2x2";
    });
  }
  return *w;
}

/// Every check of one case's results (see the file's comment).
void check(const Case& x, const std::vector<std::vector<uint8_t>>& in, const std::vector<Result>& host,
           const std::vector<Result>& dev) {
  const int N = x.nranks;
  for (int r = 0; r < N; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Result& h = host[size_t(r)];
    const Result& d = dev[size_t(r)];
    EXPECT_EQ(d.error, h.error) << "device and host calls end differently";
    if (!h.error.empty() || !d.error.empty()) continue;
    EXPECT_TRUE(x.device[size_t(r)] || !d.stats.on_device) << "a rank with host buffers reports on_device";
    EXPECT_EQ(d.stats.exact_fallback, h.stats.exact_fallback);
    if (!has_output(x.o, r)) continue;
    EXPECT_EQ(d.out, h.out) << "device and host results differ";
    if (x.o == Op::AllReduce || x.o == Op::AllGather || x.o == Op::Broadcast) {
      EXPECT_EQ(d.out, dev[0].out) << "ranks' results differ";
    }
    if (!x.lossy()) continue;
    const auto ref = reference(x.o, x.t, x.op, x.count, N, r, in);
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::fabs(value_at(x.t, d.out, i) - ref[i]);
      if (!(e <= worst)) worst = e, at = i;  // (a NaN or an infinity is the worst)
    }
    EXPECT_LE(worst, d.stats.error_bound * (1 + 1e-9))
        << "element " << at << ": " << value_at(x.t, d.out, at) << " against " << (ref.empty() ? 0.0 : ref[at]);
    if (!d.stats.exact_fallback) {
      EXPECT_LE(d.stats.error_bound, d.stats.requested_bound * (1 + 1e-12));
    }
  }
}

size_t env_size(const char* name, size_t otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : otherwise;
}

}  // namespace

TEST(CudaCommRandom, CallsMatchTheHostPath) {
  SKIP_WITHOUT_GPU();
  const size_t first = env_size("NCCLZ_RANDOM_SEED", 1);
  const size_t ncases = env_size("NCCLZ_RANDOM_CALLS", ncclz_test::quick() ? 100 : 160);
  std::map<std::string, std::unique_ptr<Ranks>> worlds;
  size_t ran = 0, on_device = 0, refused = 0, fallback = 0, float8 = 0, uint8 = 0, groups = 0;
  for (size_t k = 0; k < ncases && !HasFailure(); ++k) {  // (the first failing case ends the run)
    const Case x = draw(unsigned(first + k));
    SCOPED_TRACE(x.describe());
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < x.nranks; ++r) in.push_back(shaped_input(x, in_count(x.o, x.count, x.nranks), r));
    Ranks& R = world_for(worlds, x);
    const auto host = run(R, x.o, x.t, x.op, x.c, x.count, in, std::vector<bool>(size_t(x.nranks), false));
    const auto dev = run(R, x.o, x.t, x.op, x.c, x.count, in, x.device);
    check(x, in, host, dev);
    ++ran;
    refused += !host[0].error.empty();
    on_device += std::any_of(dev.begin(), dev.end(), [](const Result& d) { return d.stats.on_device; });
    fallback += host[0].error.empty() && x.lossy() && host[0].stats.exact_fallback;
    float8 += x.t == DataType::F8E4M3 || x.t == DataType::F8E5M2;
    uint8 += x.t == DataType::U8;
    groups += x.o == Op::RingShift;
  }
  std::printf(
      "%zu random calls from seed %zu: %zu on the device on some rank, %zu refused, %zu lossy ones exact, %zu of "
      "float8, %zu of uint8, %zu grouped ring shifts\n",
      ran, first, on_device, refused, fallback, float8, uint8, groups);
}

#endif  // NCCLZ_WITH_CUDA
