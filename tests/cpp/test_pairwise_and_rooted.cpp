// all_to_all, all_to_allv (pairwise exchange over the point-to-point links),
// reduce (chain to the root), gather and scatter (the root's direct links):
// ranks as threads over the in-process transport. docs/ALGORITHMS.md has the
// schedules; ARCHITECTURE.md the error contract.
//
// Every output element is compared with the exact answer from all ranks'
// inputs: data movement bit for bit in none and lossless modes (and for a
// rank's own block in every mode), within the bound E in lossy mode (abs, and
// rel of the inputs' range: every rank's, the root's alone for scatter);
// reductions against a long double reference (within E lossy, lossless the
// same bits as none). Outputs a call must not write (the root-only ones
// elsewhere) keep their sentinel bytes. Bad arguments and mismatched calls
// raise on every rank, before any data moves, and leave the communicator
// usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/quantizer.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "ncclz/unique_id.hpp"
#include "test_ranks.hpp"
#include "test_values.hpp"

using namespace ncclz;

namespace {

// ---- ranks as threads -------------------------------------------------------------------------

/// n ranks with two channels each (the helper's small slots); tweak as Ranks'.
struct Ranks : ncclz_test::Ranks {
  explicit Ranks(int n, const std::function<void(int, CommConfig&)>& tweak = nullptr)
      : ncclz_test::Ranks(n, tweak, 2) {}
};

/// Shared worlds for the sweeps.
Ranks& world(int n) {
  static std::unique_ptr<Ranks> w[9];
  if (!w[n]) w[n] = std::make_unique<Ranks>(n);
  return *w[n];
}

// ---- typed values ------------------------------------------------------------------------------

const DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                           DataType::I32, DataType::I64, DataType::U8};
const RedOp kOps[] = {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod};

bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}
const char* name(DataType t) { return dtype_name(t); }

using Bytes = std::vector<uint8_t>;

double get(DataType t, const Bytes& b, size_t i) { return ncclz_test::value_at(t, b.data(), i); }

void set(DataType t, Bytes& b, size_t i, double v) { ncclz_test::store_value(t, b.data(), i, v); }

/// Rank r's input of n elements: a smooth field plus a little noise (floats:
/// the wire codec finds something), small integers otherwise.
Bytes make_input(DataType t, size_t n, int r, uint64_t salt = 0) {
  Bytes b(n * dtype_size(t));
  std::mt19937_64 rng(uint64_t(r) * 7919 + n * 31 + uint64_t(t) * 1000003 + salt);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> ui(-40, 40);
  for (size_t i = 0; i < n; ++i) {
    if (is_float(t)) {
      set(t, b, i, 2.0 * std::sin(0.002 * double(i) + r) + 0.01 * u(rng) + 0.25 * r);
    } else if (t == DataType::U8) {
      set(t, b, i, double(ui(rng) + 50));
    } else {
      set(t, b, i, double(ui(rng)));
    }
  }
  return b;
}

/// An output buffer full of sentinel bytes (every element must be written, or
/// left alone where the call does not write it).
Bytes sentinel(DataType t, size_t n) { return Bytes(n * dtype_size(t), 0xA5); }

double lossy_bound(DataType t) {
  switch (t) {
    case DataType::F32: return 1e-3;
    case DataType::F64: return 1e-6;
    case DataType::F16: return 0.05;
    case DataType::BF16: return 0.3;
    default: return 0;
  }
}

/// The compressions a sweep runs for type t: none, lossless, and for floats
/// lossy abs and rel.
std::vector<Compression> modes(DataType t) {
  std::vector<Compression> m = {Compression::none(), Compression::lossless()};
  if (is_float(t)) {
    m.push_back(Compression::lossy_abs(lossy_bound(t)));
    m.push_back(Compression::lossy_rel(t == DataType::F16 || t == DataType::BF16 ? 1e-2 : 1e-4));
  }
  return m;
}

bool lossy(const Compression& c) {
  return c.mode == Compression::Mode::LossyAbs || c.mode == Compression::Mode::LossyRel;
}

const char* mode_of(const Compression& c) { return mode_name(c.mode); }

/// E of a lossy call over the given inputs (first `n[k]` elements of each).
double bound_over(const Compression& c, DataType t, const std::vector<const Bytes*>& in) {
  if (c.mode == Compression::Mode::LossyAbs) return c.bound;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Bytes* b : in) {
    for (size_t i = 0; i < b->size() / dtype_size(t); ++i) {
      const double v = get(t, *b, i);
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  return hi > lo ? c.bound * (hi - lo) : 0;
}

/// out[at .. at+n) against src[from .. from+n): the same bits (exact), or
/// within E of each finite element and the same non-finite values.
void expect_moved(DataType t, const Bytes& out, size_t at, const Bytes& src, size_t from, size_t n, bool exact,
                  double E, const std::string& what) {
  const size_t es = dtype_size(t);
  if (exact) {
    ASSERT_EQ(0, std::memcmp(out.data() + at * es, src.data() + from * es, n * es)) << what;
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const double want = get(t, src, from + i), got = get(t, out, at + i);
    if (!std::isfinite(want)) {
      ASSERT_TRUE((std::isnan(want) && std::isnan(got)) || want == got) << what << " element " << i;
      continue;
    }
    ASSERT_LE(std::fabs(got - want), E) << what << " element " << i << ": got " << got << ", sent " << want;
  }
}

// ---- all_to_all and all_to_allv ----------------------------------------------------------------

/// counts[i][j]: what rank i sends to rank j.
using Matrix = std::vector<std::vector<size_t>>;

Matrix equal_counts(int N, size_t count) { return Matrix(size_t(N), std::vector<size_t>(size_t(N), count)); }

/// Uneven blocks with empty ones among them: a rank that sends nothing, one
/// that receives nothing from rank 0, sizes from 1 to several slices.
Matrix uneven_counts(int N, uint32_t seed) {
  std::mt19937 rng(seed * 131u + uint32_t(N));
  const size_t sizes[] = {0, 0, 1, 3, 257, 700, 2049};
  Matrix m(size_t(N), std::vector<size_t>(static_cast<size_t>(N)));
  for (auto& row : m) {
    for (auto& v : row) v = sizes[rng() % 7];
  }
  if (N > 2) {
    for (auto& v : m[size_t(N - 1)]) v = 0;  // the last rank sends nothing at all
    m[0][1] = 0;
  }
  return m;
}

struct A2A {
  std::vector<Bytes> in, out;
  std::vector<CallStats> st;
};

/// One all_to_all (equal blocks, v = false) or all_to_allv on every rank of w.
A2A run_a2a(Ranks& w, DataType t, const Matrix& m, const Compression& c, bool v, uint64_t salt = 0) {
  const int N = w.size();
  A2A a;
  a.in.resize(size_t(N));
  a.out.resize(size_t(N));
  a.st.resize(size_t(N));
  for (int r = 0; r < N; ++r) {
    size_t sent = 0, received = 0;
    for (int j = 0; j < N; ++j) {
      sent += m[size_t(r)][size_t(j)];
      received += m[size_t(j)][size_t(r)];
    }
    a.in[size_t(r)] = make_input(t, sent, r, salt);
    a.out[size_t(r)] = sentinel(t, received);
  }
  w.run([&](int r, Communicator& comm) {
    std::vector<size_t> sc(static_cast<size_t>(N)), rc(static_cast<size_t>(N));
    for (int j = 0; j < N; ++j) {
      sc[size_t(j)] = m[size_t(r)][size_t(j)];
      rc[size_t(j)] = m[size_t(j)][size_t(r)];
    }
    if (v) {
      comm.all_to_allv(a.in[size_t(r)].data(), sc.data(), a.out[size_t(r)].data(), rc.data(), t, c, &a.st[size_t(r)]);
    } else {
      comm.all_to_all(a.in[size_t(r)].data(), a.out[size_t(r)].data(), m[0][0], t, c, &a.st[size_t(r)]);
    }
  });
  return a;
}

/// Every rank's block j is rank j's block for it: exact, or within E (own block exact).
// The call reports the bound it asked for and the bound its result meets: E
// where it ran compressed; where it ran exactly, what the exact path achieves
// (0 where data only moves; a sum's rounding otherwise, checked per element by
// the callers against E).
void expect_bounds(const CallStats& s, double E, bool moves_only, const std::string& what) {
  EXPECT_NEAR(s.requested_bound, E, E * 1e-12) << what;
  if (!s.exact_fallback) {
    EXPECT_NEAR(s.error_bound, E, E * 1e-12) << what;
  } else if (moves_only) {
    EXPECT_EQ(s.error_bound, 0.0) << what;
  }
}

void check_a2a(const A2A& a, DataType t, const Matrix& m, const Compression& c, const std::string& what) {
  const int N = int(m.size());
  std::vector<const Bytes*> ins;
  for (const auto& b : a.in) ins.push_back(&b);
  const double E = lossy(c) ? bound_over(c, t, ins) : 0;
  for (int r = 0; r < N; ++r) {
    size_t at = 0;
    for (int j = 0; j < N; ++j) {
      size_t from = 0;
      for (int k = 0; k < r; ++k) from += m[size_t(j)][size_t(k)];
      const size_t n = m[size_t(j)][size_t(r)];
      expect_moved(t, a.out[size_t(r)], at, a.in[size_t(j)], from, n, !lossy(c) || j == r, E,
                   what + " rank " + std::to_string(r) + " block from " + std::to_string(j));
      at += n;
    }
    if (lossy(c)) {
      expect_bounds(a.st[size_t(r)], E, true, what);
      // (rel on one element is E = 0, and rel 1e-2 of bfloat16 falls below its rounding: exact)
      if (E > 0 && (c.mode == Compression::Mode::LossyAbs || t == DataType::F32 || t == DataType::F64)) {
        EXPECT_FALSE(a.st[size_t(r)].exact_fallback) << what;
      }
    }
  }
}

class AllToAllWorlds : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllWorlds, EveryTypeModeAndCount) {
  const int N = GetParam();
  Ranks& w = world(N);
  for (size_t count : {size_t(0), size_t(1), size_t(37), size_t(1500)}) {
    const Matrix m = equal_counts(N, count);
    for (DataType t : kTypes) {
      const std::string what = "N=" + std::to_string(N) + " count=" + std::to_string(count) + " " + name(t);
      const A2A none = run_a2a(w, t, m, Compression::none(), false);
      check_a2a(none, t, m, Compression::none(), what + " none");
      for (const Compression& c : modes(t)) {
        if (c.mode == Compression::Mode::None) continue;
        const A2A got = run_a2a(w, t, m, c, false);
        check_a2a(got, t, m, c, what + " " + mode_of(c));
        if (c.mode == Compression::Mode::Lossless) {
          for (int r = 0; r < N; ++r) ASSERT_EQ(got.out[size_t(r)], none.out[size_t(r)]) << what << " lossless";
        }
      }
    }
  }
}

TEST_P(AllToAllWorlds, UnevenAndEmptyBlocks) {
  const int N = GetParam();
  Ranks& w = world(N);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Matrix m = uneven_counts(N, seed);
    for (DataType t : {DataType::F32, DataType::F64, DataType::BF16, DataType::F16, DataType::I32, DataType::U8}) {
      const std::string what = "v N=" + std::to_string(N) + " seed=" + std::to_string(seed) + " " + name(t);
      const A2A none = run_a2a(w, t, m, Compression::none(), true, seed);
      check_a2a(none, t, m, Compression::none(), what + " none");
      for (const Compression& c : modes(t)) {
        if (c.mode == Compression::Mode::None) continue;
        const A2A got = run_a2a(w, t, m, c, true, seed);
        check_a2a(got, t, m, c, what + " " + mode_of(c));
        if (c.mode == Compression::Mode::Lossless) {
          for (int r = 0; r < N; ++r) ASSERT_EQ(got.out[size_t(r)], none.out[size_t(r)]) << what << " lossless";
        }
      }
    }
  }
  // Every block empty: nothing moves, nothing fails.
  const A2A empty = run_a2a(w, DataType::F32, equal_counts(N, 0), Compression::lossy_rel(1e-3), true);
  for (const auto& o : empty.out) EXPECT_TRUE(o.empty());
}

INSTANTIATE_TEST_SUITE_P(Pairwise, AllToAllWorlds, ::testing::Values(1, 2, 3, 4, 5));

TEST(AllToAll, LossyMovesFewerBytesThanNone) {
  // Smooth data: the lossy codes compress well; lossless of floats somewhat.
  for (int N : {2, 4}) {
    Ranks w(N, [](int, CommConfig& c) { c.slot_bytes = 64 << 10; });
    const Matrix m = equal_counts(N, 50000);
    const A2A none = run_a2a(w, DataType::F32, m, Compression::none(), false);
    const A2A lossy = run_a2a(w, DataType::F32, m, Compression::lossy_rel(1e-3), false);
    check_a2a(lossy, DataType::F32, m, Compression::lossy_rel(1e-3), "N=" + std::to_string(N));
    for (int r = 0; r < N; ++r) {
      // each rank sends its N-1 other blocks once, over one link each
      EXPECT_EQ(none.st[size_t(r)].raw_bytes, uint64_t(N - 1) * 50000 * 4);
      EXPECT_EQ(none.st[size_t(r)].wire_bytes, none.st[size_t(r)].raw_bytes);
      EXPECT_EQ(lossy.st[size_t(r)].raw_bytes, none.st[size_t(r)].raw_bytes);
      EXPECT_LT(lossy.st[size_t(r)].wire_bytes * 3, none.st[size_t(r)].wire_bytes) << "N=" << N << " rank " << r;
    }
  }
}

TEST(AllToAll, UnevenTotalsAgreeOnTheModeAndChannels) {
  // Rank 0 sends 3 elements in all, rank 1 90000: each alone would put the
  // call on either side of min_bytes (lossless under it runs none) and pick
  // another channel count. The message size comes from every rank's counts
  // (the counts round), so both run the same mode on the same lanes.
  Ranks w(2, [](int, CommConfig& c) { c.slot_bytes = 64 << 10; });
  const Matrix m = {{1, 2}, {45000, 45000}};
  for (size_t min_bytes : {size_t(0), size_t(100000), size_t(1) << 30}) {
    Compression c = Compression::lossless();
    c.min_bytes = min_bytes;
    const A2A a = run_a2a(w, DataType::F32, m, c, true);
    check_a2a(a, DataType::F32, m, c, "min_bytes=" + std::to_string(min_bytes));
    // the average input is 45001.5 elements, 180006 bytes
    const auto want = min_bytes > 180006 ? Compression::Mode::None : Compression::Mode::Lossless;
    for (const auto& st : a.st) EXPECT_EQ(st.ran_mode, want) << min_bytes;
  }
}

TEST(AllToAll, NonFiniteInputsTakeTheExactPath) {
  Ranks& w = world(3);
  Matrix m = uneven_counts(3, 7);
  m[0][2] = 300;  // rank 0 sends something, with its non-finite values in it
  for (DataType t : {DataType::F32, DataType::BF16}) {
    A2A none = run_a2a(w, t, m, Compression::none(), true, 11);
    // the same inputs with a NaN and an Inf in rank 0's input
    A2A got;
    got.in = none.in;
    if (got.in[0].size() >= 2 * dtype_size(t)) {
      set(t, got.in[0], 0, std::nan(""));
      set(t, got.in[0], got.in[0].size() / dtype_size(t) - 1, INFINITY);
    }
    const int N = 3;
    got.out.resize(3);
    got.st.resize(3);
    for (int r = 0; r < N; ++r) got.out[size_t(r)] = sentinel(t, none.out[size_t(r)].size() / dtype_size(t));
    w.run([&](int r, Communicator& comm) {
      std::vector<size_t> sc(3), rc(3);
      for (int j = 0; j < N; ++j) {
        sc[size_t(j)] = m[size_t(r)][size_t(j)];
        rc[size_t(j)] = m[size_t(j)][size_t(r)];
      }
      comm.all_to_allv(got.in[size_t(r)].data(), sc.data(), got.out[size_t(r)].data(), rc.data(), t,
                       Compression::lossy_abs(lossy_bound(t)), &got.st[size_t(r)]);
    });
    check_a2a(got, t, m, Compression::none(), std::string("non-finite ") + name(t));  // exact
    for (const auto& s : got.st) EXPECT_TRUE(s.exact_fallback);
  }
}

TEST(AllToAll, LanesAndTwoSlotsPerLink) {
  // Four channels (lanes) over five ranks and the smallest FIFO (K = 2):
  // uneven blocks of many slices each, every lane busy.
  Ranks w(5, [](int, CommConfig& c) {
    c.nchannels = 4;
    c.nslots = 2;
  });
  Matrix m(5, std::vector<size_t>(5));
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) m[size_t(i)][size_t(j)] = size_t(20000 + 3000 * ((i * 7 + j * 3) % 5));
  }
  for (const Compression& c : {Compression::none(), Compression::lossy_rel(1e-4)}) {
    const A2A a = run_a2a(w, DataType::F32, m, c, true);
    check_a2a(a, DataType::F32, m, c, std::string("lanes ") + mode_of(c));
  }
}

// ---- reduce ------------------------------------------------------------------------------------

/// Rooted calls' outputs: out[r] for every rank (sentinels where not written).
struct Rooted {
  std::vector<Bytes> in, out;
  std::vector<CallStats> st;
};

Rooted run_reduce(Ranks& w, DataType t, RedOp op, size_t count, int root, const Compression& c, bool in_place,
                  uint64_t salt = 0) {
  const int N = w.size();
  Rooted o;
  for (int r = 0; r < N; ++r) {
    o.in.push_back(make_input(t, count, r, salt));
    o.out.push_back(sentinel(t, count));
  }
  o.st.resize(size_t(N));
  w.run([&](int r, Communicator& comm) {
    const size_t i = size_t(r);
    if (in_place && r == root) {
      o.out[i] = o.in[i];
      comm.reduce(o.out[i].data(), o.out[i].data(), count, t, op, root, c, &o.st[i]);
    } else {
      // other ranks: no output buffer at all every other rank (it is not used there)
      void* out = r != root && r % 2 ? nullptr : o.out[i].data();
      comm.reduce(o.in[i].data(), out, count, t, op, root, c, &o.st[i]);
    }
  });
  return o;
}

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
    case RedOp::Max: return std::max(a, b);
    case RedOp::Min: return std::min(a, b);
  }
  return 0;
}

using ncclz_test::unit_roundoff;

/// The root's output against the reduction of every rank's input: integers
/// exactly (wrapping), floats within E (lossy) or the plain float
/// reduction's rounding (none, lossless).
void check_reduce(const Rooted& o, DataType t, RedOp op, int root, const Compression& c, const std::string& what) {
  const int N = int(o.in.size());
  const size_t count = o.in[0].size() / dtype_size(t);
  std::vector<const Bytes*> ins;
  for (const auto& b : o.in) ins.push_back(&b);
  const double E = lossy(c) ? bound_over(c, t, ins) : 0;
  const Bytes& out = o.out[size_t(root)];
  for (size_t i = 0; i < count; ++i) {
    if (!is_float(t)) {
      auto as_int = [&](const Bytes& b) {
        const double v = get(t, b, i);
        return int64_t(v);
      };
      int64_t acc = as_int(o.in[0]);
      for (int k = 1; k < N; ++k) acc = int_reduce(t, op, acc, as_int(o.in[size_t(k)]));
      if (op == RedOp::Avg) acc /= N;
      if (t == DataType::I64) {
        int64_t got;
        std::memcpy(&got, out.data() + i * 8, 8);
        ASSERT_EQ(got, acc) << what << " element " << i;
      } else {
        ASSERT_EQ(int64_t(get(t, out, i)), acc) << what << " element " << i;
      }
      continue;
    }
    long double ref = get(t, o.in[0], i), mag = std::fabs(ref);
    for (int k = 1; k < N; ++k) {
      const long double v = get(t, o.in[size_t(k)], i);
      mag += std::fabs(v);
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
      mag /= N;
    }
    const double err = double(std::fabs((long double)get(t, out, i) - ref));
    if (lossy(c)) {
      ASSERT_LE(err, E) << what << " element " << i;
    } else {
      const double tol = (op == RedOp::Prod ? double(std::fabs(ref)) : double(mag)) * unit_roundoff(t) * (N + 2) +
                         N * std::ldexp(1.0, -24);
      ASSERT_LE(err, tol) << what << " element " << i;
    }
  }
  // Other ranks' outputs are not written.
  for (int r = 0; r < N; ++r) {
    if (r != root) {
      ASSERT_EQ(o.out[size_t(r)], sentinel(t, count)) << what << " rank " << r << " output was written";
    }
  }
  if (lossy(c)) {
    for (const auto& s : o.st) expect_bounds(s, E, false, what);
  }
}

class ReduceWorlds : public ::testing::TestWithParam<int> {};

TEST_P(ReduceWorlds, EveryTypeOpModeAndRoot) {
  const int N = GetParam();
  Ranks& w = world(N);
  std::vector<int> roots = {0, N - 1, N / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  for (int root : roots) {
    for (size_t count : {size_t(1), size_t(1001)}) {
      for (DataType t : kTypes) {
        for (RedOp op : kOps) {
          const std::string what = "N=" + std::to_string(N) + " root=" + std::to_string(root) +
                                   " count=" + std::to_string(count) + " " + name(t) + " " + op_name(op);
          const Rooted none = run_reduce(w, t, op, count, root, Compression::none(), false);
          check_reduce(none, t, op, root, Compression::none(), what + " none");
          for (const Compression& c : modes(t)) {
            if (c.mode == Compression::Mode::None || (lossy(c) && op == RedOp::Prod)) continue;
            const bool in_place = count == 1001 && op == RedOp::Sum;
            const Rooted got = run_reduce(w, t, op, count, root, c, in_place);
            check_reduce(got, t, op, root, c, what + " " + mode_of(c) + (in_place ? " in place" : ""));
            if (c.mode == Compression::Mode::Lossless) {
              ASSERT_EQ(got.out[size_t(root)], none.out[size_t(root)]) << what << " lossless differs from none";
            }
          }
        }
      }
    }
  }
  // count 0: nothing moves
  const Rooted empty = run_reduce(w, DataType::F32, RedOp::Sum, 0, 0, Compression::lossy_abs(1e-3), false);
  for (const auto& s : empty.st) EXPECT_EQ(s.wire_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Chain, ReduceWorlds, ::testing::Values(1, 2, 3, 4));

TEST(Reduce, LossyMovesFewerBytesAndEveryLinkCarriesTheMessageOnce) {
  Ranks w(4, [](int, CommConfig& c) { c.slot_bytes = 64 << 10; });
  const size_t count = 200000;
  const Rooted none = run_reduce(w, DataType::F32, RedOp::Sum, count, 2, Compression::none(), false);
  const Compression c = Compression::lossy_rel(1e-3);
  const Rooted got = run_reduce(w, DataType::F32, RedOp::Sum, count, 2, c, false);
  check_reduce(got, DataType::F32, RedOp::Sum, 2, c, "big");
  for (int r = 0; r < 4; ++r) {
    // the chain root+1 -> ... -> root-1 -> root: every rank but the root sends the message once
    EXPECT_EQ(none.st[size_t(r)].wire_bytes, r == 2 ? 0u : uint64_t(count) * 4) << r;
    if (r != 2) {
      EXPECT_LT(got.st[size_t(r)].wire_bytes * 2, none.st[size_t(r)].wire_bytes) << r;
    }
  }
}

// ---- gather and scatter ------------------------------------------------------------------------

Rooted run_gather(Ranks& w, DataType t, size_t count, int root, const Compression& c, uint64_t salt = 0) {
  const int N = w.size();
  Rooted o;
  for (int r = 0; r < N; ++r) {
    o.in.push_back(make_input(t, count, r, salt));
    o.out.push_back(sentinel(t, count * size_t(N)));
  }
  o.st.resize(size_t(N));
  w.run([&](int r, Communicator& comm) {
    void* out = r != root && r % 2 ? nullptr : o.out[size_t(r)].data();
    comm.gather(o.in[size_t(r)].data(), out, count, t, root, c, &o.st[size_t(r)]);
  });
  return o;
}

void check_gather(const Rooted& o, DataType t, int root, const Compression& c, const std::string& what) {
  const int N = int(o.in.size());
  const size_t count = o.in[0].size() / dtype_size(t);
  std::vector<const Bytes*> ins;
  for (const auto& b : o.in) ins.push_back(&b);
  const double E = lossy(c) ? bound_over(c, t, ins) : 0;
  for (int j = 0; j < N; ++j) {
    expect_moved(t, o.out[size_t(root)], size_t(j) * count, o.in[size_t(j)], 0, count, !lossy(c) || j == root, E,
                 what + " block of rank " + std::to_string(j));
  }
  for (int r = 0; r < N; ++r) {
    if (r != root) {
      ASSERT_EQ(o.out[size_t(r)], sentinel(t, count * size_t(N))) << what << " rank " << r << " output was written";
    }
    if (lossy(c)) {
      expect_bounds(o.st[size_t(r)], E, true, what);
    }
  }
}

Rooted run_scatter(Ranks& w, DataType t, size_t count, int root, const Compression& c, uint64_t salt = 0) {
  const int N = w.size();
  Rooted o;
  for (int r = 0; r < N; ++r) {
    o.in.push_back(make_input(t, count * size_t(N), r, salt));
    o.out.push_back(sentinel(t, count));
  }
  o.st.resize(size_t(N));
  w.run([&](int r, Communicator& comm) {
    const void* in = r != root && r % 2 ? nullptr : o.in[size_t(r)].data();
    comm.scatter(in, o.out[size_t(r)].data(), count, t, root, c, &o.st[size_t(r)]);
  });
  return o;
}

void check_scatter(const Rooted& o, DataType t, int root, const Compression& c, const std::string& what) {
  const int N = int(o.in.size());
  const size_t count = o.out[0].size() / dtype_size(t);
  // rel: the range of the root's input alone (the only input that moves)
  const double E = lossy(c) ? bound_over(c, t, {&o.in[size_t(root)]}) : 0;
  for (int r = 0; r < N; ++r) {
    expect_moved(t, o.out[size_t(r)], 0, o.in[size_t(root)], size_t(r) * count, count, !lossy(c) || r == root, E,
                 what + " rank " + std::to_string(r));
    if (lossy(c)) {
      expect_bounds(o.st[size_t(r)], E, true, what);
    }
  }
}

class GatherScatterWorlds : public ::testing::TestWithParam<int> {};

TEST_P(GatherScatterWorlds, EveryTypeModeCountAndRoot) {
  const int N = GetParam();
  Ranks& w = world(N);
  for (int root = 0; root < N; ++root) {
    for (size_t count : {size_t(0), size_t(1), size_t(1001)}) {
      for (DataType t : kTypes) {
        const std::string what = "N=" + std::to_string(N) + " root=" + std::to_string(root) +
                                 " count=" + std::to_string(count) + " " + name(t);
        const Rooted gnone = run_gather(w, t, count, root, Compression::none());
        const Rooted snone = run_scatter(w, t, count, root, Compression::none());
        for (const Compression& c : modes(t)) {
          const Rooted g = run_gather(w, t, count, root, c);
          check_gather(g, t, root, c, what + " gather " + mode_of(c));
          const Rooted s = run_scatter(w, t, count, root, c);
          check_scatter(s, t, root, c, what + " scatter " + mode_of(c));
          if (c.mode == Compression::Mode::Lossless) {
            ASSERT_EQ(g.out[size_t(root)], gnone.out[size_t(root)]) << what << " gather lossless";
            for (int r = 0; r < N; ++r) ASSERT_EQ(s.out[size_t(r)], snone.out[size_t(r)]) << what << " scatter";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Direct, GatherScatterWorlds, ::testing::Values(1, 2, 3, 4));

TEST(GatherScatter, InPlaceTheWayNcclDoesIt) {
  // gather: the root's input is its block of the output; scatter: the root's
  // output is its block of the input. Lossless and lossy alike.
  const int N = 3, root = 1;
  Ranks& w = world(N);
  const size_t count = 700;
  for (const Compression& c : {Compression::lossless(), Compression::lossy_abs(1e-3)}) {
    std::vector<std::vector<float>> buf(N), ref(N);
    w.run([&](int r, Communicator& comm) {
      auto& b = buf[size_t(r)];
      b.assign(count * N, -1.f);
      for (size_t i = 0; i < count; ++i) b[size_t(r) * count * (r == root) + i] = float(r) + 0.001f * float(i);
      float* mine = r == root ? b.data() + size_t(root) * count : b.data();
      comm.gather(mine, b.data(), count, DataType::F32, root, c);
    });
    for (int j = 0; j < N; ++j) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_NEAR(buf[root][size_t(j) * count + i], float(j) + 0.001f * float(i), 1e-3) << j << " " << i;
      }
    }
    w.run([&](int r, Communicator& comm) {
      auto& b = ref[size_t(r)];
      b.assign(count * N, -1.f);
      if (r == root) {
        for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * float(i);
      }
      float* mine = r == root ? b.data() + size_t(root) * count : b.data();
      comm.scatter(b.data(), mine, count, DataType::F32, root, c);
    });
    for (int r = 0; r < N; ++r) {
      const float* got = r == root ? ref[size_t(r)].data() + size_t(root) * count : ref[size_t(r)].data();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_NEAR(got[i], 0.01f * float(size_t(r) * count + i), 1e-3) << r << " " << i;
      }
    }
  }
}

TEST(GatherScatter, LossyMovesFewerBytesThanNone) {
  const int N = 4;
  Ranks w(N, [](int, CommConfig& c) { c.slot_bytes = 64 << 10; });
  const size_t count = 100000;
  const Compression c = Compression::lossy_rel(1e-3);
  const Rooted gn = run_gather(w, DataType::F32, count, 1, Compression::none());
  const Rooted gl = run_gather(w, DataType::F32, count, 1, c);
  check_gather(gl, DataType::F32, 1, c, "gather");
  const Rooted sn = run_scatter(w, DataType::F32, count, 1, Compression::none());
  const Rooted sl = run_scatter(w, DataType::F32, count, 1, c);
  check_scatter(sl, DataType::F32, 1, c, "scatter");
  for (int r = 0; r < N; ++r) {
    // gather: each non-root rank sends its block once; scatter: the root sends N-1 blocks
    EXPECT_EQ(gn.st[size_t(r)].wire_bytes, r == 1 ? 0u : uint64_t(count) * 4);
    EXPECT_EQ(sn.st[size_t(r)].wire_bytes, r == 1 ? uint64_t(N - 1) * count * 4 : 0u);
    EXPECT_LE(gl.st[size_t(r)].wire_bytes * 3, gn.st[size_t(r)].wire_bytes);
    EXPECT_LE(sl.st[size_t(r)].wire_bytes * 3, sn.st[size_t(r)].wire_bytes);
  }
}

// ---- the lossy paths ---------------------------------------------------------------------------

TEST(PairwiseAndRootedLossy, StagedAndEagerPathsGiveTheSameBits) {
  // rank 0's NCCLZ_PIPELINE_QUANTIZE=0 decides for every rank: the eager path
  // (whole-buffer quantize, outlier round, whole-buffer dequantize) gives the
  // codes the staged one gives, so the same bits and the same wire bytes.
  const Compression c = Compression::lossy_rel(1e-4);
  for (int N : {2, 3, 4}) {
    Ranks staged(N);
    Ranks eager(N, [](int r, CommConfig& cfg) {
      if (r == 0) cfg.pipeline_quantize = 0;
    });
    const std::string what = "N=" + std::to_string(N);
    const Matrix m = uneven_counts(N, 5);
    const A2A a1 = run_a2a(staged, DataType::F32, m, c, true), a2 = run_a2a(eager, DataType::F32, m, c, true);
    check_a2a(a2, DataType::F32, m, c, what + " eager all_to_allv");
    const Rooted r1 = run_reduce(staged, DataType::F32, RedOp::Avg, 3001, 1, c, false);
    const Rooted r2 = run_reduce(eager, DataType::F32, RedOp::Avg, 3001, 1, c, false);
    check_reduce(r2, DataType::F32, RedOp::Avg, 1, c, what + " eager reduce");
    const Rooted g1 = run_gather(staged, DataType::F32, 3001, N - 1, c);
    const Rooted g2 = run_gather(eager, DataType::F32, 3001, N - 1, c);
    check_gather(g2, DataType::F32, N - 1, c, what + " eager gather");
    const Rooted s1 = run_scatter(staged, DataType::F32, 3001, 0, c);
    const Rooted s2 = run_scatter(eager, DataType::F32, 3001, 0, c);
    check_scatter(s2, DataType::F32, 0, c, what + " eager scatter");
    for (int r = 0; r < N; ++r) {
      const size_t i = size_t(r);
      EXPECT_EQ(a1.out[i], a2.out[i]) << what << " all_to_allv rank " << r;
      EXPECT_EQ(r1.out[i], r2.out[i]) << what << " reduce rank " << r;
      EXPECT_EQ(g1.out[i], g2.out[i]) << what << " gather rank " << r;
      EXPECT_EQ(s1.out[i], s2.out[i]) << what << " scatter rank " << r;
      EXPECT_EQ(a1.st[i].wire_bytes, a2.st[i].wire_bytes) << what << " all_to_allv rank " << r;
      EXPECT_EQ(r1.st[i].wire_bytes, r2.st[i].wire_bytes) << what << " reduce rank " << r;
      EXPECT_EQ(g1.st[i].wire_bytes, g2.st[i].wire_bytes) << what << " gather rank " << r;
      EXPECT_EQ(s1.st[i].wire_bytes, s2.st[i].wire_bytes) << what << " scatter rank " << r;
    }
  }
}

// ---- errors ------------------------------------------------------------------------------------

/// Runs fn on every rank; returns each rank's exception message with a tag
/// ("invalid: ...", "remote: ...", "ok").
std::vector<std::string> outcomes(Ranks& w, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::string> got(size_t(w.size()));
  w.run([&](int r, Communicator& comm) {
    try {
      fn(r, comm);
      got[size_t(r)] = "ok";
    } catch (const InvalidArgument& e) {
      got[size_t(r)] = std::string("invalid: ") + e.what();
    } catch (const RemoteError& e) {
      got[size_t(r)] = std::string("remote: ") + e.what();
    }
  });
  return got;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The communicator still works: an all_to_all of a few elements.
void expect_usable(Ranks& w) {
  const A2A a = run_a2a(w, DataType::I32, equal_counts(w.size(), 3), Compression::none(), false);
  check_a2a(a, DataType::I32, equal_counts(w.size(), 3), Compression::none(), "after the error");
}

TEST(AllToAllErrors, MismatchedCountsRaiseOnEveryRankBeforeDataMoves) {
  Ranks w(3);
  Matrix m = uneven_counts(3, 9);
  m[0][2] = 5;
  std::vector<float> in(20000, 1.f), out(20000, -1.f);
  const auto got = outcomes(w, [&](int r, Communicator& comm) {
    std::vector<size_t> sc(3), rc(3);
    for (int j = 0; j < 3; ++j) {
      sc[size_t(j)] = m[size_t(r)][size_t(j)];
      rc[size_t(j)] = m[size_t(j)][size_t(r)];
    }
    if (r == 2) rc[0] = 7;  // rank 2 expects 7 elements from rank 0, which sends 5
    comm.all_to_allv(in.data(), sc.data(), out.data(), rc.data(), DataType::F32, Compression::lossy_rel(1e-3));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "remote: ncclz rank " + std::to_string(r) + ": mismatched counts in all_to_allv"))
        << got[size_t(r)];
    EXPECT_TRUE(has(got[size_t(r)],
                    "rank 0 sends 5 elements to rank 2 (its send_counts[2]) but rank 2 expects 7 "
                    "from rank 0 (its recv_counts[0])"))
        << got[size_t(r)];
  }
  expect_usable(w);
}

TEST(AllToAllErrors, BadArgumentsFailOnEveryRank) {
  Ranks w(3);
  std::vector<int32_t> in(30, 1), out(30, 0);
  std::vector<float> fin(30, 1.f), fout(30);
  // lossy on integers: every rank's own argument error
  auto got = outcomes(w, [&](int, Communicator& comm) {
    comm.all_to_all(in.data(), out.data(), 10, DataType::I32, Compression::lossy_abs(1e-3));
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "needs a floating-point type, got int32")) << g;
  // one rank's null counts: InvalidArgument there, RemoteError elsewhere
  got = outcomes(w, [&](int r, Communicator& comm) {
    const size_t c[3] = {10, 10, 10};
    comm.all_to_allv(fin.data(), r == 1 ? nullptr : c, fout.data(), c, DataType::F32, Compression::none());
  });
  EXPECT_TRUE(has(got[1], "invalid: ") && has(got[1], "null send_counts or recv_counts")) << got[1];
  EXPECT_TRUE(has(got[0], "remote: ") && has(got[0], "rank 1 called call #")) << got[0];
  EXPECT_TRUE(has(got[2], "remote: ")) << got[2];
  // counts that differ: a mismatched call
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_to_all(fin.data(), fout.data(), r == 2 ? 9 : 10, DataType::F32, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "remote: ") && has(g, "mismatched calls")) << g;
  // in place: refused (the pairwise steps would receive into blocks still to be sent)
  got = outcomes(w, [&](int, Communicator& comm) {
    comm.all_to_all(fin.data(), fin.data(), 10, DataType::F32, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "all_to_all needs separate arrays")) << g;
  // all_to_all on one rank, all_gather on the others
  got = outcomes(w, [&](int r, Communicator& comm) {
    if (r == 0) {
      comm.all_to_all(fin.data(), fout.data(), 10, DataType::F32, Compression::none());
    } else {
      comm.all_gather(fin.data(), fout.data(), 10, DataType::F32, Compression::none());
    }
  });
  for (const auto& g : got) {
    EXPECT_TRUE(has(g, "remote: ") && has(g, "all_to_all(count=10") && has(g, "all_gather(send_count=10")) << g;
  }
  expect_usable(w);
}

TEST(AllToAllErrors, WithoutPointToPointLinksTheyAreInvalid) {
  Ranks w(2, [](int, CommConfig& c) { c.p2p = 0; });
  std::vector<float> in(20, 1.f), out(20);
  auto got = outcomes(w, [&](int, Communicator& comm) {
    comm.all_to_all(in.data(), out.data(), 10, DataType::F32, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "NCCLZ_P2P=0")) << g;
  got = outcomes(w, [&](int, Communicator& comm) {
    comm.gather(in.data(), out.data(), 10, DataType::F32, 0, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "gather runs on the point-to-point links")) << g;
  // reduce is a ring schedule: it needs no point-to-point links
  const auto ok = outcomes(w, [&](int, Communicator& comm) {
    comm.reduce(in.data(), out.data(), 20, DataType::F32, RedOp::Max, 1, Compression::lossless());
  });
  for (const auto& g : ok) EXPECT_EQ(g, "ok");
}

TEST(RootedErrors, BadRootsOpsAndMismatchesRaiseOnEveryRank) {
  Ranks w(3);
  std::vector<float> in(30, 1.f), out(90);
  std::vector<int64_t> iin(30, 2), iout(30);
  auto got = outcomes(w, [&](int, Communicator& comm) {
    comm.reduce(in.data(), out.data(), 30, DataType::F32, RedOp::Sum, 3, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "root 3 is not a rank")) << g;
  got = outcomes(w, [&](int, Communicator& comm) {
    comm.scatter(in.data(), out.data(), 10, DataType::F32, -1, Compression::none());
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "root -1 is not a rank")) << g;
  got = outcomes(w, [&](int, Communicator& comm) {
    comm.reduce(in.data(), out.data(), 30, DataType::F32, RedOp::Prod, 0, Compression::lossy_abs(1e-3));
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "prod is not offered in lossy mode")) << g;
  got = outcomes(w, [&](int, Communicator& comm) {
    comm.gather(iin.data(), iout.data(), 10, DataType::I64, 0, Compression::lossy_rel(1e-3));
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "invalid: ") && has(g, "needs a floating-point type, got int64")) << g;
  // the ranks disagree on the root
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.gather(in.data(), out.data(), 10, DataType::F32, r == 1 ? 1 : 0, Compression::none());
  });
  for (const auto& g : got) {
    EXPECT_TRUE(has(g, "remote: ") && has(g, "mismatched calls") && has(g, "gather(send_count=10, float32, root=1"))
        << g;
  }
  // reduce on one rank, all_reduce on the others
  got = outcomes(w, [&](int r, Communicator& comm) {
    if (r == 2) {
      comm.reduce(in.data(), out.data(), 30, DataType::F32, RedOp::Sum, 0, Compression::none());
    } else {
      comm.all_reduce(in.data(), out.data(), 30, DataType::F32, RedOp::Sum, Compression::none());
    }
  });
  for (const auto& g : got) EXPECT_TRUE(has(g, "remote: ") && has(g, "reduce(count=30, float32, sum, root=0")) << g;
  // the root without an output buffer
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.gather(in.data(), r == 0 ? nullptr : out.data(), 10, DataType::F32, 0, Compression::none());
  });
  EXPECT_TRUE(has(got[0], "invalid: ") && has(got[0], "null output buffer with 30 elements")) << got[0];
  EXPECT_TRUE(has(got[1], "remote: ")) << got[1];
  expect_usable(w);
}

}  // namespace
