// Topology and hierarchical collectives, ranks as threads over the in-process
// transport, hosts made with the topology override (CommConfig::topo_hosts,
// NCCLZ_TOPO_HOSTS): docs/ALGORITHMS.md, "Topology" and "Hierarchical
// collectives".
//
// Every collective in every mode on 2x2, 2x3 and 4x2 layouts (and one whose
// hosts are not contiguous in rank order), against the exact fp64 result on
// every element: lossy results within the promised bound E (whose budget is
// now split among hosts, bound::plan_lossy_hier), none within the float
// rounding of the plain reduction, outputs bit-identical on every rank,
// lossless bit-identical to none, and the algorithm reported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bound/error_budget.hpp"
#include "codec/quantizer.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "test_values.hpp"
#include "topology/topology.hpp"

using namespace ncclz;

namespace {

// ---- ranks as threads, hosts from the override --------------------------------------

struct World {
  int n = 0;
  std::vector<std::unique_ptr<Communicator>> comms;

  /// topo_hosts: every rank's host ("2x2", "a,b,a,b"); per_rank: NCCLZ_TOPO_HOST
  /// of each rank instead (when not empty).
  /// tweak: changes rank r's configuration before its creation.
  World(int nranks, const std::string& topo_hosts, const std::vector<std::string>& per_rank = {},
        size_t slot_bytes = 1024, int nchannels = 2, const std::string& transport = "inproc",
        const std::function<void(int, CommConfig&)>& tweak = nullptr)
      : n(nranks) {
    const UniqueId id = Bootstrap::make_unique_id("127.0.0.1", 0);
    comms.resize(size_t(n));
    run_each([&](int r) {
      CommConfig cfg;
      cfg.transport = transport;
      cfg.nchannels = nchannels;
      cfg.slot_bytes = slot_bytes;
      cfg.nslots = 4;
      cfg.timeout_s = 60;
      cfg.topo_hosts = topo_hosts;
      cfg.latency_bytes = 0;  // the hierarchical schedules at every size (test_latency.cpp has the latency algorithm)
      if (!per_rank.empty()) cfg.topo_host = per_rank[size_t(r)];
      if (tweak) tweak(r, cfg);
      comms[size_t(r)] = Communicator::create(id, r, n, cfg);
    });
  }

  void run_each(const std::function<void(int)>& fn) {
    std::vector<std::thread> th;
    std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        try {
          fn(r);
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
  void run(const std::function<void(int, Communicator&)>& fn) {
    run_each([&](int r) { fn(r, *comms[size_t(r)]); });
  }
};

/// `layout` may end with "/socket": the communicator's transport is then
/// sockets, and each host's ranks get a transport of their own (in-process).
World& world(const std::string& spec) {
  static std::map<std::string, std::unique_ptr<World>> worlds;
  const size_t slash = spec.find('/');
  const std::string layout = spec.substr(0, slash);
  const std::string transport = slash == std::string::npos ? "inproc" : spec.substr(slash + 1);
  auto& w = worlds[spec];
  if (!w) {
    const size_t x = layout.find('x');
    int n = 0;
    if (x != std::string::npos && layout.find(',') == std::string::npos) {
      n = std::stoi(layout.substr(0, x)) * std::stoi(layout.substr(x + 1));
    } else {
      n = 1 + int(std::count(layout.begin(), layout.end(), ','));
    }
    w = std::make_unique<World>(n, layout, std::vector<std::string>{}, 1024, 2, transport);
  }
  return *w;
}

// ---- typed values ---------------------------------------------------------------------

size_t dsize(DataType t) { return dtype_size(t); }
bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}

double get(DataType t, const std::vector<uint8_t>& b, size_t i) { return ncclz_test::value_at(t, b.data(), i); }

void set(DataType t, std::vector<uint8_t>& b, size_t i, double v) { ncclz_test::store_value(t, b.data(), i, v); }

/// Rank r's input: a smooth part plus noise in about [-1, 1] (floats), small integers.
std::vector<uint8_t> input(DataType t, size_t n, int r, uint64_t salt = 0) {
  std::vector<uint8_t> b(n * dsize(t) + 1);
  std::mt19937_64 rng(uint64_t(r) * 7919 + n * 31 + uint64_t(t) * 1000003 + salt);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> ui(-50, 50);
  for (size_t i = 0; i < n; ++i) {
    set(t, b, i, is_float(t) ? 0.7 * std::sin(0.01 * double(i) + r) + 0.3 * u(rng) : double(ui(rng)));
  }
  return b;
}

using ncclz_test::unit_roundoff;

/// A bound E the lossy path honours for these inputs on up to 8 ranks.
double lossy_bound(DataType t) {
  switch (t) {
    case DataType::F32: return 1e-3;
    case DataType::F64: return 1e-6;
    case DataType::F16: return 0.05;
    case DataType::BF16: return 0.3;
    default: return 0;
  }
}

/// Element i of `out` against the reduction of every rank's input at off + i:
/// lossy within E, exact modes within the plain float reduction's rounding,
/// integers exactly.
void check_reduced(DataType t, RedOp op, const std::vector<std::vector<uint8_t>>& in, size_t off,
                   const std::vector<uint8_t>& out, size_t count, bool lossy, double E, const std::string& what) {
  const int N = int(in.size());
  for (size_t i = 0; i < count; ++i) {
    long double ref = get(t, in[0], off + i), sumabs = std::fabs(ref);
    for (int k = 1; k < N; ++k) {
      const long double v = get(t, in[size_t(k)], off + i);
      sumabs += std::fabs(v);
      if (op == RedOp::Max) {
        ref = std::max(ref, v);
      } else if (op == RedOp::Min) {
        ref = std::min(ref, v);
      } else {
        ref += v;
      }
    }
    if (op == RedOp::Avg) {
      ref /= N;
      sumabs /= N;
      if (!is_float(t)) ref = (long double)(int64_t(ref * N) / N);
    }
    const double got = get(t, out, i);
    const double err = double(std::fabs((long double)got - ref));
    double tol = 0;
    if (lossy) {
      tol = E;
    } else if (is_float(t)) {
      tol = double(sumabs) * unit_roundoff(t) * (N + 2) + N * 1e-7 * (t == DataType::F16 ? 1 : 0);
    }
    ASSERT_LE(err, tol) << what << " element " << i << " got " << got << " exact " << double(ref);
  }
}

void expect_same(const std::vector<std::vector<uint8_t>>& outs, size_t bytes, const std::string& what) {
  for (size_t r = 1; r < outs.size(); ++r) {
    ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[r].data(), bytes))
        << what << ": rank " << r << " differs from rank 0";
  }
}

std::string mode_label(const Compression& c) {
  return std::string(mode_name(c.mode)) + (c.bound > 0 ? "(" + std::to_string(c.bound) + ")" : "");
}

/// The compressions of a sweep: none, lossless, and for floats lossy abs and rel.
std::vector<Compression> modes_of(DataType t) {
  std::vector<Compression> m = {Compression::none(), Compression::lossless()};
  if (is_float(t)) {
    m.push_back(Compression::lossy_abs(lossy_bound(t)));
    m.push_back(Compression::lossy_rel(lossy_bound(t) / 4));
  }
  return m;
}

const DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16, DataType::I32};
const size_t kCounts[] = {0, 1, 7, 1203};

/// A lossy call of 32/64-bit floats with data ran compressed (its bound is
/// far above the type's rounding): the checks above then tested the
/// hierarchical lossy path, not the exact fallback.
void expect_compressed(DataType t, const Compression& c, size_t count, const CallStats& st, const std::string& what) {
  const bool lossy = c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
  if (lossy && count > 1 && (t == DataType::F32 || t == DataType::F64)) {
    ASSERT_FALSE(st.exact_fallback) << what;
    ASSERT_EQ(st.algorithm, Algorithm::Hierarchical) << what;
  }
}

/// rel mode's E: r * (max - min) over every rank's input (the first `count` elements).
double resolve(const Compression& c, DataType t, const std::vector<std::vector<uint8_t>>& in, size_t count) {
  if (c.mode == Compression::Mode::LossyAbs) return c.bound;
  double lo = 1e300, hi = -1e300;
  for (const auto& b : in) {
    for (size_t i = 0; i < count; ++i) {
      lo = std::min(lo, get(t, b, i));
      hi = std::max(hi, get(t, b, i));
    }
  }
  return count ? c.bound * (hi - lo) : 0;
}

// ---- the sweeps -------------------------------------------------------------------------

/// all_reduce of every type, op and mode on `layout`, checked as described above.
void sweep_all_reduce(const std::string& layout) {
  World& w = world(layout);
  const int N = w.n;
  for (DataType t : kTypes) {
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min}) {
      for (size_t count : kCounts) {
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(N));
        for (int r = 0; r < N; ++r) in[size_t(r)] = input(t, count, r);
        std::vector<std::vector<uint8_t>> none;
        for (const Compression& c : modes_of(t)) {
          const bool lossy = c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
          std::vector<std::vector<uint8_t>> out(size_t(N), std::vector<uint8_t>(count * dsize(t) + 1));
          std::vector<CallStats> st(static_cast<size_t>(N));
          w.run([&](int r, Communicator& comm) {
            comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), count, t, op, c, &st[size_t(r)]);
          });
          const std::string what = layout + " all_reduce " + dtype_name(t) + " " + op_name(op) + " " + mode_label(c) +
                                   " count " + std::to_string(count);
          if (!st[0].exact_fallback) {
            for (const CallStats& s : st) ASSERT_EQ(s.algorithm, Algorithm::Hierarchical) << what;
          }
          expect_compressed(t, c, count, st[0], what);
          expect_same(out, count * dsize(t), what);
          check_reduced(t, op, in, 0, out[0], count, lossy, lossy ? st[0].error_bound : 0, what);
          if (lossy) {
            ASSERT_DOUBLE_EQ(st[0].requested_bound, resolve(c, t, in, count)) << what;
          }
          if (c.mode == Compression::Mode::None) none = out;
          if (c.mode == Compression::Mode::Lossless) {
            ASSERT_EQ(0, std::memcmp(none[0].data(), out[0].data(), count * dsize(t))) << what << ": lossless != none";
          }
        }
      }
    }
  }
}

void sweep_reduce_scatter(const std::string& layout) {
  World& w = world(layout);
  const int N = w.n;
  for (DataType t : kTypes) {
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max}) {
      for (size_t count : kCounts) {
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(N));
        for (int r = 0; r < N; ++r) in[size_t(r)] = input(t, count * size_t(N), r);
        std::vector<std::vector<uint8_t>> none;
        for (const Compression& c : modes_of(t)) {
          const bool lossy = c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
          std::vector<std::vector<uint8_t>> out(size_t(N), std::vector<uint8_t>(count * dsize(t) + 1));
          std::vector<CallStats> st(static_cast<size_t>(N));
          w.run([&](int r, Communicator& comm) {
            comm.reduce_scatter(in[size_t(r)].data(), out[size_t(r)].data(), count, t, op, c, &st[size_t(r)]);
          });
          const std::string what = layout + " reduce_scatter " + dtype_name(t) + " " + op_name(op) + " " +
                                   mode_label(c) + " recv_count " + std::to_string(count);
          if (!st[0].exact_fallback) {
            ASSERT_EQ(st[0].algorithm, Algorithm::Hierarchical) << what;
          }
          expect_compressed(t, c, count, st[0], what);
          for (int r = 0; r < N; ++r) {
            check_reduced(t, op, in, size_t(r) * count, out[size_t(r)], count, lossy, st[0].error_bound,
                          what + " rank " + std::to_string(r));
          }
          if (c.mode == Compression::Mode::None) none = out;
          if (c.mode == Compression::Mode::Lossless) {
            for (int r = 0; r < N; ++r) {
              ASSERT_EQ(0, std::memcmp(none[size_t(r)].data(), out[size_t(r)].data(), count * dsize(t)))
                  << what << ": lossless != none on rank " << r;
            }
          }
        }
      }
    }
  }
}

void sweep_all_gather(const std::string& layout) {
  World& w = world(layout);
  const int N = w.n;
  for (DataType t : kTypes) {
    for (size_t count : kCounts) {
      std::vector<std::vector<uint8_t>> in(static_cast<size_t>(N));
      for (int r = 0; r < N; ++r) in[size_t(r)] = input(t, count, r, 5);
      for (const Compression& c : modes_of(t)) {
        const bool lossy = c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
        std::vector<std::vector<uint8_t>> out(size_t(N), std::vector<uint8_t>(count * size_t(N) * dsize(t) + 1));
        std::vector<CallStats> st(static_cast<size_t>(N));
        w.run([&](int r, Communicator& comm) {
          comm.all_gather(in[size_t(r)].data(), out[size_t(r)].data(), count, t, c, &st[size_t(r)]);
        });
        const std::string what =
            layout + " all_gather " + dtype_name(t) + " " + mode_label(c) + " send_count " + std::to_string(count);
        if (!st[0].exact_fallback) {
          ASSERT_EQ(st[0].algorithm, Algorithm::Hierarchical) << what;
        }
        expect_compressed(t, c, count, st[0], what);
        expect_same(out, count * size_t(N) * dsize(t), what);
        for (int j = 0; j < N; ++j) {
          for (size_t i = 0; i < count; ++i) {
            const double got = get(t, out[0], size_t(j) * count + i), ref = get(t, in[size_t(j)], i);
            if (lossy) {
              ASSERT_LE(std::fabs(got - ref), st[0].error_bound) << what << " block " << j << " element " << i;
            } else {
              ASSERT_EQ(0, std::memcmp(out[0].data() + (size_t(j) * count + i) * dsize(t),
                                       in[size_t(j)].data() + i * dsize(t), dsize(t)))
                  << what << " block " << j << " element " << i;
            }
          }
        }
      }
    }
  }
}

void sweep_broadcast(const std::string& layout) {
  World& w = world(layout);
  const int N = w.n;
  for (DataType t : {DataType::F32, DataType::BF16, DataType::I32}) {
    for (int root : {0, N - 1, N / 2 + 1 < N ? N / 2 + 1 : 0}) {
      for (size_t count : kCounts) {
        const std::vector<uint8_t> src = input(t, count, root, 9);
        for (const Compression& c : modes_of(t)) {
          const bool lossy = c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
          std::vector<std::vector<uint8_t>> buf(size_t(N), std::vector<uint8_t>(count * dsize(t) + 1, 0));
          buf[size_t(root)] = src;
          std::vector<CallStats> st(static_cast<size_t>(N));
          w.run([&](int r, Communicator& comm) {
            comm.broadcast(buf[size_t(r)].data(), count, t, root, c, &st[size_t(r)]);
          });
          const std::string what = layout + " broadcast " + dtype_name(t) + " root " + std::to_string(root) + " " +
                                   mode_label(c) + " count " + std::to_string(count);
          if (!st[0].exact_fallback) {
            ASSERT_EQ(st[0].algorithm, Algorithm::Hierarchical) << what;
          }
          expect_compressed(t, c, count, st[0], what);
          expect_same(buf, count * dsize(t), what);
          for (size_t i = 0; i < count; ++i) {
            if (lossy) {
              ASSERT_LE(std::fabs(get(t, buf[0], i) - get(t, src, i)), st[0].error_bound) << what << " element " << i;
            } else {
              ASSERT_EQ(0, std::memcmp(buf[0].data() + i * dsize(t), src.data() + i * dsize(t), dsize(t)))
                  << what << " element " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace

// ---- topology -------------------------------------------------------------------------

TEST(Topology, HostListsParse) {
  EXPECT_EQ(topology::parse_hosts("2x3", 6), (std::vector<std::string>{"0", "0", "0", "1", "1", "1"}));
  EXPECT_EQ(topology::parse_hosts(" a, b,a ,b", 4), (std::vector<std::string>{"a", "b", "a", "b"}));
  EXPECT_THROW(topology::parse_hosts("2x3", 4), InvalidArgument);     // 6 ranks described
  EXPECT_THROW(topology::parse_hosts("0,0,1", 4), InvalidArgument);   // too short
  EXPECT_THROW(topology::parse_hosts("0,,1,1", 4), InvalidArgument);  // empty id
  EXPECT_THROW(topology::parse_hosts("2xx2", 4), InvalidArgument);    // not HxL
  EXPECT_THROW(topology::parse_hosts("0x4", 4), InvalidArgument);     // no hosts
  // Any count (n < 0; the public ncclz::topology_hosts, which the torch backend's groups use).
  EXPECT_EQ(ncclz::topology_hosts("2x2"), (std::vector<std::string>{"0", "0", "1", "1"}));
  EXPECT_EQ(ncclz::topology_hosts("x, y"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ncclz::topology_hosts("3x1", 3), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_THROW(ncclz::topology_hosts("0x4"), InvalidArgument);
  EXPECT_THROW(ncclz::topology_hosts("a,"), InvalidArgument);
  try {
    topology::parse_hosts("0,0,1", 4);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("NCCLZ_TOPO_HOSTS"), std::string::npos) << e.what();
  }
}

TEST(Topology, HostsNumberedByTheirLowestRank) {
  const Topology t = topology::from_ids({"b", "a", "b", "c", "a", "c"}, 4, "test");
  EXPECT_EQ(t.nhosts, 3);
  EXPECT_EQ(t.host_of, (std::vector<int>{0, 1, 0, 2, 1, 2}));
  EXPECT_EQ(t.local_rank_of, (std::vector<int>{0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_size, 2);
  EXPECT_TRUE(t.uniform());
  EXPECT_TRUE(t.hierarchical());
  EXPECT_EQ(t.rank_of(2, 1), 5);
  EXPECT_FALSE(topology::from_ids({"a", "a", "b"}, 0, "test").hierarchical());  // uneven
  EXPECT_FALSE(topology::from_ids({"a", "b", "c"}, 0, "test").hierarchical());  // one rank per host
  EXPECT_FALSE(topology::from_ids({"a", "a", "a"}, 0, "test").hierarchical());  // one host
}

TEST(Topology, OverrideIsReported) {
  World& w = world("2x3");
  w.run([&](int r, Communicator& comm) {
    const Topology& t = comm.topology();
    EXPECT_EQ(t.nhosts, 2);
    EXPECT_EQ(t.local_size, 3);
    EXPECT_EQ(t.host, r / 3);
    EXPECT_EQ(t.local_rank, r % 3);
    EXPECT_EQ(t.source, "NCCLZ_TOPO_HOSTS");
    EXPECT_EQ(t.intra_link, "inproc");
    EXPECT_EQ(t.inter_link, "inproc");
    EXPECT_TRUE(t.hierarchical());
  });
}

// Sockets between hosts: each host's ranks connect among themselves through a
// transport of their own over a bootstrap of the host's ranks
// (topology/group_bootstrap.hpp).
TEST(Topology, HostTransportOfItsOwn) {
  World& w = world("2x2/socket");
  w.run([&](int, Communicator& comm) {
    EXPECT_EQ(comm.topology().intra_link, "inproc");
    EXPECT_EQ(comm.topology().inter_link, "socket");
  });
}

TEST(Topology, PerRankHostIds) {
  World w(4, "", {"left", "right", "left", "right"});
  w.run([&](int r, Communicator& comm) {
    const Topology& t = comm.topology();
    EXPECT_EQ(t.source, "NCCLZ_TOPO_HOST");
    EXPECT_EQ(t.host, r % 2);
    EXPECT_EQ(t.local_rank, r / 2);
  });
  // Without an override the threads share one host: the ring only.
  World one(3, "");
  one.run([&](int, Communicator& comm) {
    EXPECT_EQ(comm.topology().nhosts, 1);
    EXPECT_EQ(comm.topology().source, "bootstrap");
    EXPECT_FALSE(comm.topology().hierarchical());
    std::vector<float> x(10, 1.0f);
    CallStats st;
    comm.all_reduce(x.data(), x.data(), x.size(), DataType::F32, RedOp::Sum, Compression::none(), &st);
    EXPECT_EQ(st.algorithm, Algorithm::Ring);
    EXPECT_EQ(x[0], 3.0f);
  });
}

TEST(Topology, OverrideOnSomeRanksOnlyFailsEverywhere) {
  std::vector<std::string> errs(3);
  const UniqueId id = Bootstrap::make_unique_id("127.0.0.1", 0);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      CommConfig cfg;
      cfg.transport = "inproc";
      cfg.timeout_s = 20;
      if (r != 1) cfg.topo_host = "h" + std::to_string(r);
      try {
        Communicator::create(id, r, 3, cfg);
      } catch (const InvalidArgument& e) {
        errs[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_NE(errs[size_t(r)].find("not on rank 1"), std::string::npos) << errs[size_t(r)];
}

// ---- hierarchical collectives -----------------------------------------------------------

TEST(Hierarchical, AllReduce2x2) { sweep_all_reduce("2x2"); }
TEST(Hierarchical, AllReduce2x3) { sweep_all_reduce("2x3"); }
TEST(Hierarchical, AllReduce4x2) { sweep_all_reduce("4x2"); }
TEST(Hierarchical, AllReduceHostsNotContiguous) { sweep_all_reduce("a,b,a,b,c,c"); }
TEST(Hierarchical, AllReduceSocketsBetweenHosts) { sweep_all_reduce("2x2/socket"); }
TEST(Hierarchical, ReduceScatter2x2) { sweep_reduce_scatter("2x2"); }
TEST(Hierarchical, ReduceScatter2x3) { sweep_reduce_scatter("2x3"); }
TEST(Hierarchical, ReduceScatter4x2) { sweep_reduce_scatter("4x2"); }
TEST(Hierarchical, ReduceScatterHostsNotContiguous) { sweep_reduce_scatter("a,b,a,b,c,c"); }
TEST(Hierarchical, ReduceScatterSocketsBetweenHosts) { sweep_reduce_scatter("2x3/socket"); }
TEST(Hierarchical, AllGather2x2) { sweep_all_gather("2x2"); }
TEST(Hierarchical, AllGather2x3) { sweep_all_gather("2x3"); }
TEST(Hierarchical, AllGather4x2) { sweep_all_gather("4x2"); }
TEST(Hierarchical, AllGatherHostsNotContiguous) { sweep_all_gather("a,b,a,b,c,c"); }
TEST(Hierarchical, AllGatherSocketsBetweenHosts) { sweep_all_gather("2x2/socket"); }
TEST(Hierarchical, Broadcast2x2) { sweep_broadcast("2x2"); }
TEST(Hierarchical, Broadcast2x3) { sweep_broadcast("2x3"); }
TEST(Hierarchical, Broadcast4x2) { sweep_broadcast("4x2"); }
TEST(Hierarchical, BroadcastHostsNotContiguous) { sweep_broadcast("a,b,a,b,c,c"); }
TEST(Hierarchical, BroadcastSocketsBetweenHosts) { sweep_broadcast("2x2/socket"); }

// The lossy sum's margin: the hierarchical plan quantizes with about E/H where
// the ring uses E/N, and its calls ship fewer bytes for the same bound.
TEST(Hierarchical, LossySumBoundSplitAmongHosts) {
  bound::DataStats g;
  g.any_finite = true;
  g.lo = -1;
  g.hi = 1;
  g.maxabs = 1;
  const double E = 1e-3;
  const auto ring = bound::plan_lossy(codec::ElemType::F32, bound::Combine::Sum, 8, E, g);
  const auto hier = bound::plan_lossy_hier(codec::ElemType::F32, bound::Combine::Sum, 4, 2, E, g);
  ASSERT_TRUE(ring.compress && hier.compress);
  EXPECT_NEAR(ring.eb, E / 8, E / 8 * 1e-2);
  EXPECT_NEAR(hier.eb, E / 4, E / 4 * 1e-2);
  // A mean's host sums are divided by N: their grid may be L times E.
  const auto mean = bound::plan_lossy_hier(codec::ElemType::F32, bound::Combine::Mean, 4, 2, E, g);
  EXPECT_NEAR(mean.eb, 2 * E, 2 * E * 1e-2);
  // With one rank per host it is the ring's budget over the hosts.
  const auto flat = bound::plan_lossy_hier(codec::ElemType::F32, bound::Combine::Sum, 8, 1, E, g);
  EXPECT_NEAR(flat.eb, ring.eb, ring.eb * 1e-6);
  // The host's float sum is in the budget: bf16's own rounding leaves less
  // room inside a host of 4 than a host of 2.
  const auto b2 = bound::plan_lossy_hier(codec::ElemType::BF16, bound::Combine::Sum, 2, 2, 0.3, g);
  const auto b4 = bound::plan_lossy_hier(codec::ElemType::BF16, bound::Combine::Sum, 2, 4, 0.3, g);
  ASSERT_TRUE(b2.compress && b4.compress);
  EXPECT_LT(b4.eb, b2.eb);
  EXPECT_LT(b2.eb, 0.3 / 2);

  World& w = world("4x2");
  const size_t count = 20000;
  std::vector<std::vector<uint8_t>> in(8);
  for (int r = 0; r < 8; ++r) in[size_t(r)] = input(DataType::F32, count, r, 77);
  std::vector<std::vector<uint8_t>> out(8, std::vector<uint8_t>(count * 4));
  std::vector<CallStats> hs(8), rs(8);
  PolicyHints ring_hint;
  ring_hint.algorithm = int(Algorithm::Ring);
  w.run([&](int r, Communicator& comm) {
    comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), count, DataType::F32, RedOp::Sum,
                    Compression::lossy_abs(E), &hs[size_t(r)]);
    comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), count, DataType::F32, RedOp::Sum,
                    Compression::lossy_abs(E), &rs[size_t(r)], &ring_hint);
  });
  EXPECT_EQ(hs[0].algorithm, Algorithm::Hierarchical);
  EXPECT_EQ(rs[0].algorithm, Algorithm::Ring);
  EXPECT_EQ(rs[0].local_bytes, 0u);
  uint64_t hier_wire = 0, ring_wire = 0;
  for (int r = 0; r < 8; ++r) {
    hier_wire += hs[size_t(r)].wire_bytes;
    ring_wire += rs[size_t(r)].wire_bytes;
    EXPECT_GT(hs[size_t(r)].local_bytes, 0u);
  }
  // Codes one bit shorter (E/4 instead of E/8) on half the payload (the
  // inter-host rings carry 2(H-1)/H of 1/L of the message per rank).
  EXPECT_LT(double(hier_wire), 0.5 * double(ring_wire));
  EXPECT_GT(hs[0].ratio, rs[0].ratio);
}

// all_reduce, reduce_scatter and all_gather run in rounds on any layout
// (algorithms/hierarchical.cpp: hier_all_reduce_rounds, two hosts exchanging
// codes, hier_all_reduce_ring_rounds elsewhere; hier_reduce_scatter_rounds,
// two hosts, hier_reduce_scatter_ring_rounds; hier_all_gather_rounds;
// test_hier_rounds.cpp has the schedules themselves): the same bits and wire bytes as the phases one after the
// other, which any one rank's hier_rounds = 0 asks of every rank (were it its
// own only, the ranks' intra-host rings would carry other pieces: wrong sums
// or a timeout).
TEST(Hierarchical, InRoundsAsThePhases) {
  for (const std::string layout : {"2x2", "2x3", "3x2", "4x2"}) {
    const int N = std::stoi(layout.substr(0, 1)) * std::stoi(layout.substr(2));
    World& rounds = world(layout);
    World phased(N, layout, {}, 1024, 2, "inproc", [N](int r, CommConfig& cfg) {
      cfg.timeout_s = 20;
      if (r == N - 1) cfg.hier_rounds = 0;
    });
    for (const char* coll : {"all_reduce", "reduce_scatter", "all_gather"}) {
      const bool rs = coll[0] == 'r', ag = coll[4] == 'g';
      for (const DataType t : {DataType::F32, DataType::F64, DataType::BF16, DataType::I32}) {
        for (const Compression& c :
             {Compression::lossy_abs(lossy_bound(t)), Compression::lossless(), Compression::none()}) {
          const bool lossy = c.mode == Compression::Mode::LossyAbs;
          if (t == DataType::I32 && lossy) continue;
          const size_t count = rs || ag ? 1501 : 5003;  // many slices of 1 KiB per block
          const size_t in_count = rs ? count * size_t(N) : count, out_count = ag ? count * size_t(N) : count;
          std::vector<std::vector<uint8_t>> in(static_cast<size_t>(N));
          for (int r = 0; r < N; ++r) in[size_t(r)] = input(t, in_count, r, 31);
          std::vector<std::vector<uint8_t>> a(size_t(N), std::vector<uint8_t>(out_count * dsize(t))), b = a;
          std::vector<CallStats> sa(static_cast<size_t>(N)), sb(static_cast<size_t>(N));
          auto call = [&](Communicator& comm, int r, std::vector<std::vector<uint8_t>>& out, CallStats* st) {
            if (rs) {
              comm.reduce_scatter(in[size_t(r)].data(), out[size_t(r)].data(), count, t, RedOp::Sum, c, st);
            } else if (ag) {
              comm.all_gather(in[size_t(r)].data(), out[size_t(r)].data(), count, t, c, st);
            } else {
              comm.all_reduce(in[size_t(r)].data(), out[size_t(r)].data(), count, t, RedOp::Sum, c, st);
            }
          };
          rounds.run([&](int r, Communicator& comm) { call(comm, r, a, &sa[size_t(r)]); });
          phased.run([&](int r, Communicator& comm) { call(comm, r, b, &sb[size_t(r)]); });
          const std::string what = layout + " " + coll + " " + dtype_name(t) + " " + mode_label(c);
          if (!rs) expect_same(a, out_count * dsize(t), what);
          for (int r = 0; r < N; ++r) {
            if (ag) {
              for (int j = 0; j < N; ++j) {
                for (size_t i = 0; i < count; ++i) {
                  const double err = std::fabs(get(t, a[size_t(r)], size_t(j) * count + i) - get(t, in[size_t(j)], i));
                  ASSERT_LE(err, lossy ? sa[0].error_bound : 0.0) << what << " rank " << r << " block " << j;
                }
              }
            } else {
              check_reduced(t, RedOp::Sum, in, rs ? size_t(r) * count : 0, a[size_t(r)], count, lossy,
                            lossy ? sa[0].error_bound : 0, what + " rank " + std::to_string(r));
            }
            ASSERT_EQ(sa[size_t(r)].algorithm, Algorithm::Hierarchical) << what;
            ASSERT_EQ(a[size_t(r)], b[size_t(r)]) << what << " rank " << r;
            EXPECT_EQ(sa[size_t(r)].wire_bytes, sb[size_t(r)].wire_bytes) << what << " rank " << r;
          }
        }
      }
    }
  }
}

// Rank 0 decides the algorithm: its hint (or NCCLZ_ALGO) applies to every rank,
// whatever the others propose, and one host or one rank per host runs the ring.
TEST(Hierarchical, RankZeroChoosesTheAlgorithm) {
  World& w = world("2x2");
  std::vector<float> x(100);
  std::vector<CallStats> st(4);
  w.run([&](int r, Communicator& comm) {
    std::vector<float> v(100, float(r));
    PolicyHints h;
    h.algorithm = r == 0 ? int(Algorithm::Ring) : int(Algorithm::Hierarchical);
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::F32, RedOp::Sum, Compression::none(), &st[size_t(r)], &h);
    EXPECT_EQ(v[0], 6.0f);
  });
  for (const auto& s : st) EXPECT_EQ(s.algorithm, Algorithm::Ring);
  w.run([&](int r, Communicator& comm) {
    std::vector<float> v(100, float(r));
    PolicyHints h;
    h.algorithm = r == 0 ? int(Algorithm::Hierarchical) : int(Algorithm::Ring);
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::F32, RedOp::Sum, Compression::none(), &st[size_t(r)], &h);
  });
  for (const auto& s : st) EXPECT_EQ(s.algorithm, Algorithm::Hierarchical);
  // A bad proposal is rank 0's argument error, cancelled everywhere.
  std::vector<std::string> errs(4);
  w.run([&](int r, Communicator& comm) {
    std::vector<float> v(10, 1.0f);
    PolicyHints h;
    h.algorithm = r == 0 ? 7 : -1;
    try {
      comm.all_reduce(v.data(), v.data(), v.size(), DataType::F32, RedOp::Sum, Compression::none(), nullptr, &h);
    } catch (const Error& e) {
      errs[size_t(r)] = std::string(r == 0 ? "InvalidArgument: " : "") + e.what();
    }
  });
  EXPECT_NE(errs[0].find("algorithm"), std::string::npos) << errs[0];
  for (int r = 1; r < 4; ++r)
    EXPECT_NE(errs[size_t(r)].find("invalid arguments"), std::string::npos) << errs[size_t(r)];
}

// Mismatched calls still raise on every rank before any data moves, and the
// communicator stays usable.
TEST(Hierarchical, MismatchRaisesEverywhere) {
  World& w = world("2x2");
  std::vector<int> raised(4, 0);
  w.run([&](int r, Communicator& comm) {
    std::vector<float> v(64, 1.0f);
    try {
      comm.all_reduce(v.data(), v.data(), r == 3 ? 60 : 64, DataType::F32, RedOp::Sum, Compression::lossy_rel(1e-3));
    } catch (const RemoteError&) {
      raised[size_t(r)] = 1;
    }
    comm.all_reduce(v.data(), v.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    EXPECT_EQ(v[0], 4.0f);
  });
  EXPECT_EQ(raised, (std::vector<int>{1, 1, 1, 1}));
}
