// NCCL's other integer types, int8, uint32 and uint64: they travel and are
// coded as the type of their width the library had (uint8, int32, int64: the
// same bits), and are reduced in their own order and division. Every reducing
// collective, op, exact mode and schedule (ring, latency, direct two hops,
// hierarchical) against a reference computed in the type itself, on values
// whose top bits are set (where a signed and an unsigned order disagree).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"
#include "test_schedules.hpp"

using namespace ncclz;

namespace {

const RedOp kOps[] = {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min, RedOp::Prod};

/// What a reduction of the values of every rank gives in T: wrapping sum and
/// product, T's own order, the wrapped sum divided by n (toward zero).
template <class T>
T reference(const std::vector<std::vector<T>>& in, size_t i, RedOp op) {
  using U = std::make_unsigned_t<T>;
  U acc = U(in[0][i]);
  T best = in[0][i];
  for (size_t r = 1; r < in.size(); ++r) {
    const T v = in[r][i];
    if (op == RedOp::Sum || op == RedOp::Avg) acc = U(acc + U(v));
    if (op == RedOp::Prod) acc = U(uint64_t(acc) * uint64_t(U(v)));
    if (op == RedOp::Max) best = v > best ? v : best;
    if (op == RedOp::Min) best = v < best ? v : best;
  }
  if (op == RedOp::Max || op == RedOp::Min) return best;
  if (op == RedOp::Avg) {
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    return T(W(T(acc)) / W(in.size()));
  }
  return T(acc);
}

/// Full-range values (a third of them near the type's top, a third small).
template <class T>
std::vector<T> inputs(size_t n, int rank, uint64_t salt) {
  std::mt19937_64 rng(uint64_t(rank) * 1000003 + salt);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x = rng();
    const int kind = int(x % 3);
    v[i] = kind == 0 ? T(x >> 8) : kind == 1 ? T(~T(0) - T((x >> 8) % 7)) : T((x >> 8) % 9);
  }
  return v;
}

template <class T>
constexpr DataType type_of() {
  if constexpr (std::is_same_v<T, int8_t>) return DataType::I8;
  if constexpr (std::is_same_v<T, uint32_t>) return DataType::U32;
  return DataType::U64;
}

template <class T>
void check_reductions(const ncclz_test::Schedule& shape, size_t count) {
  const DataType t = type_of<T>();
  ncclz_test::Ranks w(shape.nranks, shape.tweak);
  const int n = w.size();
  const std::string where = std::string(shape.name) + " " + dtype_name(t) + " count " + std::to_string(count);
  const size_t N = size_t(n);
  std::vector<std::vector<T>> in(N), ar(N), rs(N), red(N);
  for (RedOp op : kOps) {
    for (const Compression& c : {Compression::none(), Compression::lossless()}) {
      for (int r = 0; r < n; ++r) in[size_t(r)] = inputs<T>(count * size_t(n), r, count + uint64_t(op));
      const int root = int(op) % n;
      w.run([&](int r, Communicator& comm) {
        const auto& x = in[size_t(r)];
        ar[size_t(r)].assign(x.size(), T(0));
        rs[size_t(r)].assign(count, T(0));
        red[size_t(r)].assign(x.size(), T(0));
        CallStats st;
        comm.all_reduce(x.data(), ar[size_t(r)].data(), x.size(), t, op, c, &st);
        EXPECT_EQ(st.algorithm, count < 100 ? shape.small : shape.large) << where;
        comm.reduce_scatter(x.data(), rs[size_t(r)].data(), count, t, op, c);
        comm.reduce(x.data(), red[size_t(r)].data(), x.size(), t, op, root, c);
      });
      const std::string what = where + " " + op_name(op) + " " + mode_name(c.mode);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count * size_t(n); ++i) {
          const T want = reference(in, i, op);
          ASSERT_EQ(ar[size_t(r)][i], want) << what << ": all_reduce, rank " << r << ", element " << i;
          if (r == root) {
            ASSERT_EQ(red[size_t(r)][i], want) << what << ": reduce, element " << i;
          }
        }
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(rs[size_t(r)][i], reference(in, size_t(r) * count + i, op))
              << what << ": reduce_scatter, rank " << r << ", element " << i;
        }
      }
    }
  }
}

template <class T>
void check_all_shapes() {
  for (const ncclz_test::Schedule& s : ncclz_test::kSchedules) {
    check_reductions<T>(s, 5);    // the latency algorithm's size where it is on
    check_reductions<T>(s, 700);  // many slices (1 KiB slots)
  }
}

TEST(IntTypes, Int8ReducesInItsOwnOrder) { check_all_shapes<int8_t>(); }
TEST(IntTypes, Uint32ReducesInItsOwnOrder) { check_all_shapes<uint32_t>(); }
TEST(IntTypes, Uint64ReducesInItsOwnOrder) { check_all_shapes<uint64_t>(); }

// The reference's own check: the orders disagree on these values (a defect that
// reduced them as their wire type would fail above).
TEST(IntTypes, TheReferenceTellsTheOrdersApart) {
  const std::vector<std::vector<uint32_t>> u = {{0x80000000u}, {1u}};
  EXPECT_EQ(reference(u, 0, RedOp::Max), 0x80000000u);
  EXPECT_EQ(reference(u, 0, RedOp::Avg), 0x40000000u);
  const std::vector<std::vector<int8_t>> s = {{int8_t(-100)}, {int8_t(20)}};
  EXPECT_EQ(reference(s, 0, RedOp::Max), int8_t(20));
  EXPECT_EQ(reference(s, 0, RedOp::Avg), int8_t(-40));
}

// The moving collectives carry their bits unchanged (their wire type's path).
TEST(IntTypes, MovingCollectivesCarryTheBits) {
  ncclz_test::Ranks w(3);
  const size_t count = 300;
  std::vector<std::vector<uint64_t>> in(3), gathered(3), bcast(3), got(3);
  for (int r = 0; r < 3; ++r) in[size_t(r)] = inputs<uint64_t>(count, r, 77);
  for (const Compression& c : {Compression::none(), Compression::lossless()}) {
    w.run([&](int r, Communicator& comm) {
      gathered[size_t(r)].assign(3 * count, 0);
      bcast[size_t(r)] = in[size_t(r)];
      got[size_t(r)].assign(count, 0);
      comm.all_gather(in[size_t(r)].data(), gathered[size_t(r)].data(), count, DataType::U64, c);
      comm.broadcast(bcast[size_t(r)].data(), count, DataType::U64, 1, c);
      if (r == 0) comm.send(in[0].data(), count, DataType::U64, 2, c);
      if (r == 2) comm.recv(got[2].data(), count, DataType::U64, 0, c);
    });
    for (int r = 0; r < 3; ++r) {
      for (int q = 0; q < 3; ++q) {
        EXPECT_EQ(0, std::memcmp(gathered[size_t(r)].data() + size_t(q) * count, in[size_t(q)].data(), count * 8));
      }
      EXPECT_EQ(bcast[size_t(r)], in[1]);
    }
    EXPECT_EQ(got[2], in[0]);
  }
}

TEST(IntTypes, LossyModesAreRefusedOnEveryRank) {
  ncclz_test::Ranks w(2);
  std::vector<std::string> errs(2);
  w.run([&](int r, Communicator& comm) {
    std::vector<uint32_t> x(10, 1), y(10);
    try {
      comm.all_reduce(x.data(), y.data(), 10, DataType::U32, RedOp::Sum, Compression::lossy_rel(1e-3));
    } catch (const InvalidArgument& e) {
      errs[size_t(r)] = e.what();
    }
  });
  for (const std::string& e : errs) EXPECT_NE(e.find("floating-point type, got uint32"), std::string::npos) << e;
}

TEST(IntTypes, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DataType::I8), "int8");
  EXPECT_STREQ(dtype_name(DataType::U32), "uint32");
  EXPECT_STREQ(dtype_name(DataType::U64), "uint64");
  EXPECT_EQ(dtype_size(DataType::I8), 1u);
  EXPECT_EQ(dtype_size(DataType::U32), 4u);
  EXPECT_EQ(dtype_size(DataType::U64), 8u);
  EXPECT_STREQ(dtype_name(DataType::F8E4M3), "float8_e4m3fn");
  EXPECT_STREQ(dtype_name(DataType::F8E5M2), "float8_e5m2");
  EXPECT_EQ(dtype_size(DataType::F8E5M2), 1u);
  EXPECT_STREQ(dtype_name(DataType(12)), "?");
  EXPECT_EQ(dtype_size(DataType(12)), 0u);
}

}  // namespace
