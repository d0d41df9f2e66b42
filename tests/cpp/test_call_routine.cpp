// The call routine (core/call.hpp) as every collective sees it, ranks as
// threads over the in-process transport: the lossy paths for every collective
// (staged, eager, exact: bound on every element, the same bits on every rank
// and on every path), the policy's hints, the configuration in effect, and
// Communicator::check_call. The per-collective sweeps are test_collectives.cpp.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "ncclz/unique_id.hpp"
#include "test_ranks.hpp"

using namespace ncclz;

namespace {

using Mode = Compression::Mode;

using ncclz_test::Ranks;

std::vector<float> input(size_t n, int r, bool with_nan = false) {
  std::vector<float> x(n);
  std::mt19937 rng(uint32_t(1234 + r));
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t i = 0; i < n; ++i) x[i] = 3.0f * std::sin(0.003f * float(i) + float(r)) + 0.1f * u(rng);
  if (with_nan && n > 7) x[7] = r == 0 ? NAN : INFINITY;
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// One call of every collective with one Compression on every rank of `w`:
/// outputs (all_reduce, reduce_scatter, all_gather, broadcast) and stats.
struct Outputs {
  std::vector<std::vector<std::vector<float>>> out;  // [collective][rank]
  std::vector<std::vector<CallStats>> st;            // [collective][rank]
};

const char* kColl[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};

Outputs run_every_collective(Ranks& w, size_t n, const Compression& c, bool with_nan = false) {
  const int N = w.size();
  Outputs o;
  o.out.assign(4, std::vector<std::vector<float>>(size_t(N)));
  o.st.assign(4, std::vector<CallStats>(size_t(N)));
  w.run([&](int r, Communicator& comm) {
    const auto x = input(n * size_t(N), r, with_nan);
    auto& ar = o.out[0][size_t(r)];
    ar.assign(x.size(), -7.f);
    comm.all_reduce(x.data(), ar.data(), x.size(), DataType::F32, RedOp::Sum, c, &o.st[0][size_t(r)]);
    auto& rs = o.out[1][size_t(r)];
    rs.assign(n, -7.f);
    comm.reduce_scatter(x.data(), rs.data(), n, DataType::F32, RedOp::Avg, c, &o.st[1][size_t(r)]);
    auto& ag = o.out[2][size_t(r)];
    ag.assign(n * size_t(N), -7.f);
    comm.all_gather(x.data(), ag.data(), n, DataType::F32, c, &o.st[2][size_t(r)]);
    auto& bc = o.out[3][size_t(r)];
    bc = r == N - 1 ? x : std::vector<float>(x.size(), -7.f);
    comm.broadcast(bc.data(), bc.size(), DataType::F32, N - 1, c, &o.st[3][size_t(r)]);
  });
  return o;
}

/// Every element within E of the fp64 reference, and every rank's output the same bits.
void check_every_collective(const Outputs& o, int N, size_t n, double E, const std::string& what) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < N; ++r) in.push_back(input(n * size_t(N), r));
  for (int k = 0; k < 4; ++k) {
    if (k == 1) continue;  // reduce_scatter: every rank its own block
    for (int r = 1; r < N; ++r) {
      ASSERT_TRUE(same_bits(o.out[size_t(k)][0], o.out[size_t(k)][size_t(r)]))
          << what << " " << kColl[k] << " rank " << r;
    }
  }
  for (size_t i = 0; i < n * size_t(N); ++i) {
    double sum = 0;
    for (int r = 0; r < N; ++r) sum += in[size_t(r)][i];
    ASSERT_LE(std::fabs(o.out[0][0][i] - sum), E) << what << " all_reduce element " << i;
    ASSERT_LE(std::fabs(o.out[3][0][i] - in[size_t(N - 1)][i]), E) << what << " broadcast element " << i;
  }
  for (int r = 0; r < N; ++r) {
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int k = 0; k < N; ++k) sum += in[size_t(k)][size_t(r) * n + i];
      ASSERT_LE(std::fabs(o.out[1][size_t(r)][i] - sum / N), E) << what << " reduce_scatter rank " << r << " " << i;
      ASSERT_LE(std::fabs(o.out[2][0][size_t(r) * n + i] - in[size_t(r)][i]), E) << what << " all_gather " << i;
    }
  }
}

// ---- the lossy paths, for every collective ------------------------------------------------

TEST(CallRoutineLossy, StagedAndEagerPathsGiveTheSameBitsOnEveryCollective) {
  // Several slices per channel (1 KiB slices, 2 channels) and a ragged tail.
  const size_t n = 70001;
  const double E = 1e-3;
  for (int N : {2, 3, 4}) {
    Ranks staged(N);
    // rank 0's setting decides for every rank (the others keep the default)
    Ranks eager(N, [](int r, CommConfig& c) {
      if (r == 0) c.pipeline_quantize = 0;
    });
    const Outputs a = run_every_collective(staged, n, Compression::lossy_abs(E));
    const Outputs b = run_every_collective(eager, n, Compression::lossy_abs(E));
    const std::string what = "N=" + std::to_string(N);
    check_every_collective(a, N, n, E, what + " staged");
    check_every_collective(b, N, n, E, what + " eager");
    for (int k = 0; k < 4; ++k) {
      for (int r = 0; r < N; ++r) {
        EXPECT_TRUE(same_bits(a.out[size_t(k)][size_t(r)], b.out[size_t(k)][size_t(r)]))
            << what << " " << kColl[k] << " rank " << r;
        EXPECT_FALSE(a.st[size_t(k)][size_t(r)].exact_fallback) << what << " " << kColl[k];
        EXPECT_EQ(a.st[size_t(k)][size_t(r)].error_bound, E) << what << " " << kColl[k];
        // the same codes through the same encoder: the same wire bytes
        EXPECT_EQ(a.st[size_t(k)][size_t(r)].wire_bytes, b.st[size_t(k)][size_t(r)].wire_bytes)
            << what << " " << kColl[k] << " rank " << r;
        const CallStats& st = a.st[size_t(k)][size_t(r)];
        if (st.raw_bytes > 0) {
          EXPECT_LT(st.wire_bytes, st.raw_bytes) << what << " " << kColl[k];
        }
      }
    }
  }
}

TEST(CallRoutineLossy, NonFiniteInputsTakeTheExactPathOnEveryCollective) {
  const size_t n = 5000;
  const int N = 3;
  Ranks w(N);
  const Outputs o = run_every_collective(w, n, Compression::lossy_rel(1e-3), /*with_nan=*/true);
  std::vector<std::vector<float>> in;
  for (int r = 0; r < N; ++r) in.push_back(input(n * N, r, true));
  for (int k = 0; k < 4; ++k) {
    for (int r = 0; r < N; ++r) {
      EXPECT_TRUE(o.st[size_t(k)][size_t(r)].exact_fallback) << kColl[k] << " rank " << r;
      if (k != 1) {  // reduce_scatter: every rank its own block
        EXPECT_TRUE(same_bits(o.out[size_t(k)][0], o.out[size_t(k)][size_t(r)])) << kColl[k] << " " << r;
      }
    }
  }
  // select returns one rank's values exactly, non-finite ones included
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(0, std::memcmp(o.out[2][0].data() + size_t(r) * n, in[size_t(r)].data(), n * sizeof(float))) << r;
  }
  EXPECT_TRUE(same_bits(o.out[3][0], in[N - 1]));
  // sums: the float64 sum rounded once; NaN + Inf = NaN
  EXPECT_TRUE(std::isnan(o.out[0][0][7]));
  for (size_t i = 8; i < n * N; i += 997) {
    double sum = 0;
    for (int r = 0; r < N; ++r) sum += in[size_t(r)][i];
    EXPECT_EQ(o.out[0][0][i], float(sum)) << i;
  }
}

TEST(CallRoutineLossy, LossyBroadcastGivesTheRootTheValuesTheOthersGet) {
  // The root's own output is written from the codes it sent (the chain's
  // first copySend), in place: every rank, the root included, the same bits.
  const size_t n = 12345;
  Ranks w(4);
  std::vector<std::vector<float>> buf(4);
  const auto src = input(n, 42);
  w.run([&](int r, Communicator& comm) {
    buf[size_t(r)] = r == 2 ? src : std::vector<float>(n, 0.f);
    comm.broadcast(buf[size_t(r)].data(), n, DataType::F32, 2, Compression::lossy_abs(1e-2));
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(same_bits(buf[0], buf[size_t(r)])) << r;
  EXPECT_FALSE(same_bits(buf[2], src));  // quantized, not the input
  for (size_t i = 0; i < n; ++i) ASSERT_LE(std::fabs(buf[2][i] - src[i]), 1e-2) << i;
}

TEST(CallRoutineLossy, ExactFallbackReportsTheBoundItAchieves) {
  // A bound below float32's rounding of the sum: the call runs exactly
  // (float64 accumulation, rounded once) and reports what that achieves, not
  // the E it could not promise; every element is within the reported bound.
  const int N = 3;
  const size_t n = 5000;
  Ranks w(N);
  std::vector<std::vector<float>> in(static_cast<size_t>(N)), out(static_cast<size_t>(N), std::vector<float>(n));
  std::vector<CallStats> st(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) in[size_t(r)] = input(n, 7 + r);
  for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
    w.run([&](int r, Communicator& comm) {
      comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), n, DataType::F32, op, Compression::lossy_abs(1e-12),
                      &st[size_t(r)]);
    });
    double maxabs = 0;
    for (const auto& v : in) {
      for (float x : v) maxabs = std::max(maxabs, double(std::fabs(x)));
    }
    for (int r = 0; r < N; ++r) {
      const CallStats& s = st[size_t(r)];
      EXPECT_TRUE(s.exact_fallback) << r;
      EXPECT_EQ(s.requested_bound, 1e-12) << r;
      EXPECT_GT(s.error_bound, 1e-12) << r;  // float32's rounding, not the request
      // no looser than a few float32 half-ulps of the largest possible sum
      EXPECT_LE(s.error_bound, 4 * N * maxabs * std::ldexp(1.0, -24)) << r;
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (int q = 0; q < N; ++q) exact += double(in[size_t(q)][i]);
        if (op == RedOp::Avg) exact /= N;
        worst = std::max(worst, std::fabs(double(out[size_t(r)][i]) - exact));
      }
      EXPECT_LE(worst, s.error_bound) << r;
    }
  }
  // a copy (all_gather) that runs exactly achieves 0
  w.run([&](int r, Communicator& comm) {
    std::vector<float> y(n * N);
    comm.all_gather(in[size_t(r)].data(), y.data(), n, DataType::F32, Compression::lossy_abs(1e-12), &st[size_t(r)]);
  });
  for (const auto& s : st) {
    EXPECT_EQ(s.error_bound, 0.0);
    EXPECT_EQ(s.requested_bound, 1e-12);
  }
}

// ---- the policy's hints ---------------------------------------------------------------------

TEST(CallRoutineHints, OnlyRankZerosProposalCountsAndEveryRankRunsIt) {
  const int N = 3;
  Ranks w(N);
  const size_t n = 3000;
  auto run = [&](const std::function<const PolicyHints*(int)>& hints_of, const Compression& c, bool gather) {
    std::vector<CallStats> st(static_cast<size_t>(N));
    w.run([&](int r, Communicator& comm) {
      const auto x = input(gather ? n : n * N, r);
      std::vector<float> y(n * N);
      if (gather) {
        comm.all_gather(x.data(), y.data(), n, DataType::F32, c, &st[size_t(r)], hints_of(r));
      } else {
        comm.all_reduce(x.data(), y.data(), x.size(), DataType::F32, RedOp::Sum, c, &st[size_t(r)], hints_of(r));
      }
    });
    return st;
  };
  PolicyHints none;
  none.lighter = int(Mode::None);
  // rank 0 proposes none for a lossless call: every rank runs none
  auto st = run([&](int r) { return r == 0 ? &none : nullptr; }, Compression::lossless(), false);
  for (const auto& s : st) {
    EXPECT_TRUE(s.lightened);
    EXPECT_EQ(s.ran_mode, Mode::None);
    EXPECT_EQ(s.raw_bytes, s.wire_bytes);  // raw slots
  }
  // another rank's proposal is not rank 0's: ignored
  st = run([&](int r) { return r == 1 ? &none : nullptr; }, Compression::lossless(), false);
  for (const auto& s : st) {
    EXPECT_FALSE(s.lightened);
    EXPECT_EQ(s.ran_mode, Mode::Lossless);
  }
  // data movement keeps any bound exactly: taken; the achieved bound is 0, E
  // is reported as the request
  st = run([&](int r) { return r == 0 ? &none : nullptr; }, Compression::lossy_abs(1e-9), true);
  for (const auto& s : st) {
    EXPECT_TRUE(s.lightened);
    EXPECT_EQ(s.error_bound, 0.0);
    EXPECT_EQ(s.requested_bound, 1e-9);
  }
  // a float32 sum of values up to ~3 may round by far more than 1e-9: not taken
  st = run([&](int r) { return r == 0 ? &none : nullptr; }, Compression::lossy_abs(1e-9), false);
  for (const auto& s : st) {
    EXPECT_FALSE(s.lightened);
    EXPECT_EQ(s.ran_mode, Mode::LossyAbs);
    EXPECT_TRUE(s.exact_fallback);  // 1e-9 is below float32's rounding: the exact path
  }
  // the codec effort: rank 0's margin 1 (never Rans) changes every rank's bytes, not their bits
  PolicyHints fast;
  fast.rans_margin = 1.0;
  std::vector<std::vector<float>> outs[2];
  std::vector<CallStats> sts[2];
  for (int k = 0; k < 2; ++k) {
    outs[k].assign(size_t(N), std::vector<float>(n * N));
    sts[k].assign(size_t(N), CallStats{});
    w.run([&](int r, Communicator& comm) {
      std::vector<float> x(n * N);
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(1e-4 * double(i)) * 100 + r);  // smooth: Rans
      comm.all_reduce(x.data(), outs[k][size_t(r)].data(), x.size(), DataType::F32, RedOp::Sum,
                      Compression::lossy_abs(1e-4), &sts[k][size_t(r)], k == 1 && r == 0 ? &fast : nullptr);
    });
  }
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(same_bits(outs[0][size_t(r)], outs[1][size_t(r)])) << r;
    EXPECT_NE(sts[0][size_t(r)].wire_bytes, sts[1][size_t(r)].wire_bytes) << r;
  }
}

TEST(CallRoutineHints, AnUnkeepableBoundTakesTheProposalWhereTheExactPathRunsThePlainSum) {
  // 1e-9 is below float32's rounding of any sum of values up to ~3.1: nothing
  // keeps it. On 2 ranks the plain float32 sum (one rounding of the exact
  // sum) is as good as any exact run, and the request's exact path runs it
  // (bound::choose_exact): rank 0's "none" gives the same bits and bound, so
  // it is taken. On 3 ranks two float32 roundings are not as good as
  // float64's one: not taken (OnlyRankZerosProposalCounts... above).
  Ranks w(2);
  const size_t n = 4000;
  PolicyHints none;
  none.lighter = int(Mode::None);
  std::vector<std::vector<float>> out[2];
  std::vector<CallStats> st[2];
  for (int k = 0; k < 2; ++k) {
    out[k].assign(2, std::vector<float>(n));
    st[k].assign(2, CallStats{});
    w.run([&](int r, Communicator& comm) {
      const auto x = input(n, r);
      comm.all_reduce(x.data(), out[k][size_t(r)].data(), n, DataType::F32, RedOp::Sum, Compression::lossy_abs(1e-9),
                      &st[k][size_t(r)], k == 1 && r == 0 ? &none : nullptr);
    });
  }
  for (int r = 0; r < 2; ++r) {
    const CallStats& asked = st[0][size_t(r)];
    const CallStats& lighter = st[1][size_t(r)];
    EXPECT_TRUE(asked.exact_fallback);  // the request alone: its exact path, in float32
    EXPECT_EQ(asked.wire_bytes, asked.raw_bytes);
    EXPECT_TRUE(lighter.lightened) << r;
    EXPECT_EQ(lighter.ran_mode, Mode::None);
    EXPECT_FALSE(lighter.exact_fallback);
    EXPECT_EQ(lighter.requested_bound, 1e-9);
    EXPECT_EQ(lighter.error_bound, asked.error_bound);  // one float32 rounding of the sum, above 1e-9
    EXPECT_GT(lighter.error_bound, 1e-9);
    EXPECT_TRUE(same_bits(out[0][size_t(r)], out[1][size_t(r)])) << r;
  }
  const auto x0 = input(n, 0), x1 = input(n, 1);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_LE(std::fabs(double(out[1][0][i]) - (double(x0[i]) + double(x1[i]))), st[1][0].error_bound) << i;
  }
  // 5e-7: the float32 sum's one rounding (<= 3.7e-7) keeps it, but not with
  // half of it to spare (the policy's margin): not taken, although the
  // request's exact path then runs the plain sum too
  w.run([&](int r, Communicator& comm) {
    const auto x = input(n, r);
    comm.all_reduce(x.data(), out[1][size_t(r)].data(), n, DataType::F32, RedOp::Sum, Compression::lossy_abs(5e-7),
                    &st[1][size_t(r)], r == 0 ? &none : nullptr);
  });
  for (int r = 0; r < 2; ++r) {
    const CallStats& s = st[1][size_t(r)];
    EXPECT_FALSE(s.lightened) << r;
    EXPECT_TRUE(s.exact_fallback) << r;
    EXPECT_EQ(s.wire_bytes, s.raw_bytes) << r;  // in float32 itself: within E
    EXPECT_LE(s.error_bound, 5e-7) << r;
    EXPECT_TRUE(same_bits(out[0][size_t(r)], out[1][size_t(r)])) << r;
  }
}

TEST(CallRoutineHints, BadHintsAreTheProposingRanksArgumentError) {
  Ranks w(2);
  std::vector<float> x(100, 1.f), y(100);
  PolicyHints bad;
  bad.rans_margin = 1.5;
  w.run([&](int r, Communicator& comm) {
    try {
      comm.all_reduce(x.data(), y.data(), 100, DataType::F32, RedOp::Sum, Compression::lossless(), nullptr,
                      r == 1 ? &bad : nullptr);
      ADD_FAILURE() << "rank " << r << ": no error";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(r, 1);
      EXPECT_NE(std::string(e.what()).find("rans_margin"), std::string::npos) << e.what();
    } catch (const RemoteError& e) {
      EXPECT_EQ(r, 0) << e.what();
    }
  });
  bad = PolicyHints{};
  bad.lighter = 5;
  EXPECT_THROW(w.comms[0]->check_call(CallArgs{}, &bad), InvalidArgument);
  w.run([](int, Communicator& comm) { comm.barrier(); });  // still usable
}

// ---- configuration ------------------------------------------------------------------------

/// Sets (or with nullptr unsets) a variable for a scope, then puts the old value back.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (v) {
      setenv(n, v, 1);
    } else {
      unsetenv(n);
    }
  }
  ~ScopedEnv() {
    if (had) {
      setenv(name.c_str(), old.c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
};

/// The runtime's tuning variables unset for a scope (a developer's environment may set them).
struct CleanEnv {
  ScopedEnv vars[10] = {{"NCCLZ_NCHANNELS", nullptr},
                        {"NCCLZ_SLOT_BYTES", nullptr},
                        {"NCCLZ_NSLOTS", nullptr},
                        {"NCCLZ_SPARSE_SLICE_BYTES", nullptr},
                        {"NCCLZ_PIPELINE_QUANTIZE", nullptr},
                        {"NCCLZ_HIER_ROUNDS", nullptr},
                        {"NCCLZ_SPARSE_INPUT", nullptr},
                        {"NCCLZ_P2P", nullptr},
                        {"NCCLZ_TRANSPORT", nullptr},
                        {"NCCLZ_SOCKET_THROTTLE_GBPS", nullptr}};
};

TEST(CallRoutineConfig, DefaultsEnvironmentAndExplicitSettings) {
  const CleanEnv clean;
  const CommConfig d = CommConfig::defaults();
  EXPECT_EQ(d.nchannels, 0);  // unset: the ranks agree on it at creation (ProposedChannels)
  EXPECT_EQ(d.slot_bytes, size_t(1) << 20);
  EXPECT_EQ(d.nslots, 4);
  EXPECT_EQ(d.sparse_slice_bytes, size_t(8) << 20);
  EXPECT_EQ(d.pipeline_quantize, 1);
  EXPECT_EQ(d.hier_rounds, 1);
  EXPECT_EQ(d.sparse_input, 1);
  EXPECT_EQ(d.p2p, 1);
  EXPECT_EQ(d.timeout_s, 300);
  {
    ScopedEnv a("NCCLZ_NCHANNELS", "3"), b("NCCLZ_PIPELINE_QUANTIZE", "0"), c("NCCLZ_SLOT_BYTES", "64K"),
        e("NCCLZ_SPARSE_SLICE_BYTES", "0"), f("NCCLZ_P2P", "off"), g("NCCLZ_HIER_ROUNDS", "0");
    const CommConfig r = CommConfig{}.resolved();
    EXPECT_EQ(r.nchannels, 3);
    EXPECT_EQ(r.pipeline_quantize, 0);
    EXPECT_EQ(r.hier_rounds, 0);
    EXPECT_EQ(r.slot_bytes, size_t(64) << 10);
    EXPECT_EQ(r.sparse_slice_bytes, r.slot_bytes);  // 0: no larger slices
    EXPECT_EQ(r.p2p, 0);
    EXPECT_EQ(r.nslots, 4);
    CommConfig x;
    x.nchannels = 5;  // explicit settings win over the environment
    EXPECT_EQ(x.resolved().nchannels, 5);
    EXPECT_EQ(CommConfig::from_env().nchannels, 3);
  }
  {
    ScopedEnv a("NCCLZ_SPARSE_INPUT", "2");
    EXPECT_THROW(CommConfig{}.resolved(), InvalidArgument);
  }
  CommConfig bad;
  bad.slot_bytes = 512;
  try {
    bad.resolved();
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("slot_bytes must be at least 1024"), std::string::npos) << e.what();
  }
  bad = CommConfig{};
  bad.nslots = 1;
  EXPECT_THROW(bad.resolved(), InvalidArgument);
  bad = CommConfig{};
  bad.pipeline_quantize = 7;
  EXPECT_THROW(bad.resolved(), InvalidArgument);
  bad = CommConfig{};
  bad.hier_rounds = 2;
  EXPECT_THROW(bad.resolved(), InvalidArgument);
}

TEST(CallRoutineConfig, ProposedChannels) {
  {
    ScopedEnv a("NCCLZ_CORES_PER_RANK", "5.5");
    EXPECT_EQ(core::proposed_channels(1), 5);
    EXPECT_EQ(core::proposed_channels(64), 5);  // the variable is per rank already
  }
  {
    ScopedEnv a("NCCLZ_CORES_PER_RANK", "0.25");
    EXPECT_EQ(core::proposed_channels(1), core::kMinAutoChannels);
  }
  {
    ScopedEnv a("NCCLZ_CORES_PER_RANK", "1000");
    EXPECT_EQ(core::proposed_channels(1), core::kMaxAutoChannels);
  }
  ScopedEnv unset("NCCLZ_CORES_PER_RANK", nullptr);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cpus = CPU_COUNT(&set);
  for (int local : {1, 2, 3, 16}) {
    EXPECT_EQ(core::proposed_channels(local), std::clamp(cpus / local, core::kMinAutoChannels, core::kMaxAutoChannels))
        << local << " ranks on the host";
  }
}

TEST(CallRoutineConfig, TheCommunicatorReportsWhatItUses) {
  const CleanEnv clean;
  Ranks w(2, [](int, CommConfig& c) {
    c.nchannels = 3;
    c.token = "secret";
  });
  for (int r = 0; r < 2; ++r) {
    const CommConfig& c = w.comms[size_t(r)]->config();
    EXPECT_EQ(c.rank, r);
    EXPECT_EQ(c.size, 2);
    EXPECT_EQ(c.transport, "inproc");
    EXPECT_EQ(c.nchannels, 3);
    EXPECT_EQ(c.slot_bytes, 1024u);
    EXPECT_EQ(c.sparse_slice_bytes, 4096u);
    EXPECT_EQ(c.nslots, 4);
    EXPECT_EQ(c.pipeline_quantize, 1);
    EXPECT_EQ(c.p2p, 1);
    EXPECT_EQ(c.timeout_s, 60);
    EXPECT_EQ(c.token, "");
  }
}

// ---- check_call -----------------------------------------------------------------------------

std::string check_error(Communicator& comm, const CallArgs& a) {
  try {
    comm.check_call(a);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(CallRoutineCheckCall, WhatOnlyBothArraysTellAndEverythingTheCallChecks) {
  Ranks w(2);
  Communicator& comm = *w.comms[0];
  std::vector<float> x(100), y(100), z(200);
  CallArgs a;
  a.kind = CallKind::AllReduce;
  a.send = x.data();
  a.send_count = 100;
  a.recv = y.data();
  a.recv_count = 100;
  EXPECT_EQ(check_error(comm, a), "");
  a.recv = x.data();
  EXPECT_EQ(check_error(comm, a), "");  // exactly in place
  a.recv = x.data() + 1;
  EXPECT_NE(check_error(comm, a).find("all_reduce: input and output buffers overlap"), std::string::npos);
  a.recv = y.data();
  a.recv_count = 99;
  EXPECT_EQ(check_error(comm, a), "all_reduce: output has 99 elements, expected 100");
  a.recv_count = 100;
  a.recv_type = DataType::F64;
  EXPECT_EQ(check_error(comm, a), "all_reduce: input dtype float32 differs from output dtype float64");
  a.recv_type = DataType::F32;
  a.compression = Compression::lossy_abs(1e-3);
  a.op = RedOp::Prod;
  EXPECT_NE(check_error(comm, a).find("all_reduce: prod is not offered in lossy mode"), std::string::npos);
  a.op = RedOp::Sum;
  a.send_type = a.recv_type = DataType::I32;
  EXPECT_NE(check_error(comm, a).find("needs a floating-point type, got int32"), std::string::npos);

  CallArgs rs;
  rs.kind = CallKind::ReduceScatter;
  rs.send = z.data();
  rs.send_count = 200;
  rs.recv = y.data();
  rs.recv_count = 100;
  EXPECT_EQ(check_error(comm, rs), "");
  rs.recv_count = 99;
  EXPECT_EQ(check_error(comm, rs), "reduce_scatter: input (world_size * output count) has 200 elements, expected 198");
  CallArgs ag = rs;
  ag.kind = CallKind::AllGather;
  ag.send = y.data();
  ag.send_count = 100;
  ag.recv = z.data();
  ag.recv_count = 200;
  EXPECT_EQ(check_error(comm, ag), "");
  ag.recv = y.data() + 50;
  ag.recv_count = 200;
  EXPECT_EQ(check_error(comm, ag), "all_gather: input and output buffers overlap; use separate arrays");

  CallArgs b;
  b.kind = CallKind::Broadcast;
  b.recv = y.data();
  b.recv_count = 100;
  b.root = 2;
  EXPECT_EQ(check_error(comm, b), "broadcast: root 2 is not a rank of this communicator (size 2)");
  b.root = 1;
  b.compression.codec = "zstd";
  b.compression.mode = Mode::Lossless;
  EXPECT_NE(check_error(comm, b).find("broadcast: unknown codec 'zstd'"), std::string::npos);

  CallArgs s;
  s.kind = CallKind::Send;
  s.send = y.data();
  s.send_count = 100;
  s.root = 0;
  EXPECT_EQ(check_error(comm, s), "send: peer 0 must be another rank of this communicator (0..1, not 0)");
  s.root = 1;
  EXPECT_EQ(check_error(comm, s), "");
  s.send = nullptr;
  EXPECT_EQ(check_error(comm, s), "send: null buffer with count > 0");
}

TEST(CallRoutineCheckCall, RootedAndAllToAllArrays) {
  // rank 0 of 2: the root's buffers are checked on the root only
  Ranks w(2);
  Communicator& comm = *w.comms[0];
  std::vector<float> x(100), y(100), z(200);
  CallArgs g;
  g.kind = CallKind::Gather;
  g.send = y.data();
  g.send_count = 100;
  g.recv = z.data();
  g.recv_count = 200;
  EXPECT_EQ(check_error(comm, g), "");
  g.recv_count = 100;
  EXPECT_EQ(check_error(comm, g),
            "gather: the root's output (world_size * input count) has 100 elements, expected 200");
  g.root = 1;  // not the root: its output is not used, whatever it is
  EXPECT_EQ(check_error(comm, g), "");
  g.root = 2;
  EXPECT_EQ(check_error(comm, g), "gather: root 2 is not a rank of this communicator (size 2)");

  CallArgs sc;
  sc.kind = CallKind::Scatter;
  sc.send = z.data();
  sc.send_count = 199;
  sc.recv = x.data();
  sc.recv_count = 100;
  EXPECT_EQ(check_error(comm, sc),
            "scatter: the root's input (world_size * output count) has 199 elements, expected 200");
  sc.send = nullptr;
  sc.send_count = 0;
  sc.root = 1;
  EXPECT_EQ(check_error(comm, sc), "");

  CallArgs rd;
  rd.kind = CallKind::Reduce;
  rd.send = x.data();
  rd.send_count = 100;
  rd.recv = x.data();
  rd.recv_count = 100;
  EXPECT_EQ(check_error(comm, rd), "");  // in place on the root
  rd.recv = x.data() + 1;
  EXPECT_NE(check_error(comm, rd).find("reduce: input and output buffers overlap"), std::string::npos);
  rd.recv = nullptr;
  rd.recv_count = 0;
  EXPECT_EQ(check_error(comm, rd), "reduce: the root's output has 0 elements, expected 100");
  rd.root = 1;
  EXPECT_EQ(check_error(comm, rd), "");  // not the root: no output needed
  rd.op = RedOp::Prod;
  rd.compression = Compression::lossy_rel(1e-3);
  EXPECT_NE(check_error(comm, rd).find("reduce: prod is not offered in lossy mode"), std::string::npos);

  CallArgs a;
  a.kind = CallKind::AllToAll;
  a.send = z.data();
  a.send_count = 199;
  a.recv = z.data();
  a.recv_count = 199;
  EXPECT_EQ(check_error(comm, a),
            "all_to_all: input has 199 elements, not a multiple of the world size 2 (block j of input goes to rank j)");
  a.send_count = a.recv_count = 200;
  EXPECT_EQ(check_error(comm, a), "all_to_all: input and output buffers overlap; use separate arrays");
  a.send = x.data();
  a.send_count = 100;
  a.recv_count = 100;
  a.recv = y.data();
  EXPECT_EQ(check_error(comm, a), "");
  a.recv_count = 98;
  EXPECT_EQ(check_error(comm, a), "all_to_all: output has 98 elements, expected 100");

  CallArgs v = a;
  v.kind = CallKind::AllToAllv;
  v.recv_count = 100;
  const size_t sc2[2] = {30, 70}, rc2[2] = {60, 40}, bad[2] = {60, 41};
  v.send_counts = sc2;
  v.recv_counts = rc2;
  EXPECT_EQ(check_error(comm, v), "");
  v.recv_counts = bad;
  EXPECT_EQ(check_error(comm, v), "all_to_allv: output has 100 elements but recv_counts add up to 101");
  v.recv_counts = nullptr;
  EXPECT_EQ(check_error(comm, v), "all_to_allv: null send_counts or recv_counts (they need one entry per rank)");
  v.recv_counts = rc2;
  v.send_count = 99;
  EXPECT_EQ(check_error(comm, v), "all_to_allv: input has 99 elements but send_counts add up to 100");
  v.send_count = 100;
  v.send_type = v.recv_type = DataType::I32;
  v.compression = Compression::lossy_abs(0.5);
  EXPECT_NE(check_error(comm, v).find("all_to_allv: lossy compression needs a floating-point type, got int32"),
            std::string::npos);
}

}  // namespace
