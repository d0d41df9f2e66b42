// Communicator::split (core/split.hpp): groups by color ranked by key then by
// parent rank, no color, bad colors failing every rank, a host layout cut to
// the members, splits of splits, mismatched calls; ranks as threads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/split.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"

using namespace ncclz;

namespace {

/// Each rank's sum over its new communicator of (its parent rank + 1), by all_reduce.
int64_t group_sum(Communicator& c, int parent_rank) {
  int64_t x = parent_rank + 1, y = 0;
  c.all_reduce(&x, &y, 1, DataType::I64, RedOp::Sum, Compression::none());
  return y;
}

TEST(Split, RanksGoByKeyThenByParentRank) {
  ncclz_test::Ranks w(5);
  std::vector<std::unique_ptr<Communicator>> made(5);
  w.run([&](int r, Communicator& c) {
    // evens ordered backwards (key -r); odds all with key 0 (ties: parent order)
    made[size_t(r)] = c.split(r % 2, r % 2 ? 0 : -r);
  });
  const int want_rank[5] = {2, 0, 1, 1, 0};  // evens: 4 -> 0, 2 -> 1, 0 -> 2; odds: 1 -> 0, 3 -> 1
  for (int r = 0; r < 5; ++r) {
    ASSERT_TRUE(made[size_t(r)]) << r;
    EXPECT_EQ(made[size_t(r)]->size(), r % 2 ? 2 : 3) << r;
    EXPECT_EQ(made[size_t(r)]->rank(), want_rank[r]) << r;
  }
  // The groups run at once, each on its own: sums of their members only.
  std::vector<int64_t> sums(5);
  ncclz_test::run_threads(5, [&](int r) { sums[size_t(r)] = group_sum(*made[size_t(r)], r); });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(sums[size_t(r)], r % 2 ? 2 + 4 : 1 + 3 + 5) << r;
  // The parent goes on.
  w.run([&](int r, Communicator& c) { EXPECT_EQ(group_sum(c, r), 15); });
}

TEST(Split, NoColorJoinsNone) {
  ncclz_test::Ranks w(4);
  std::vector<std::unique_ptr<Communicator>> made(4);
  w.run([&](int r, Communicator& c) { made[size_t(r)] = c.split(r == 2 ? kSplitNoColor : 7, r); });
  EXPECT_FALSE(made[2]);
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(made[size_t(r)]);
    EXPECT_EQ(made[size_t(r)]->size(), 3);
  }
  std::vector<int64_t> sums(4);
  ncclz_test::run_threads(4, [&](int r) {
    if (made[size_t(r)]) sums[size_t(r)] = group_sum(*made[size_t(r)], r);
  });
  EXPECT_EQ(sums[3], 1 + 2 + 4);
}

TEST(Split, ABadColorFailsEveryRankAndKeepsTheParentInStep) {
  ncclz_test::Ranks w(3);
  std::vector<std::string> errs(3);
  std::vector<bool> invalid(3);
  w.run([&](int r, Communicator& c) {
    try {
      c.split(r == 1 ? -5 : 0, 0);
    } catch (const InvalidArgument& e) {
      errs[size_t(r)] = e.what();
      invalid[size_t(r)] = true;
    } catch (const RemoteError& e) {
      errs[size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errs[size_t(r)].find("rank 1 passed color -5"), std::string::npos) << errs[size_t(r)];
    EXPECT_EQ(invalid[size_t(r)], r == 1) << errs[size_t(r)];
  }
  w.run([&](int r, Communicator& c) { EXPECT_EQ(group_sum(c, r), 6); });
}

TEST(Split, AHostListIsCutToTheMembers) {
  ncclz_test::Ranks w(4, [](int, CommConfig& c) { c.topo_hosts = "2x2"; });
  ASSERT_EQ(w.comms[0]->topology().nhosts, 2);
  std::vector<std::unique_ptr<Communicator>> across(4), within(4);
  w.run([&](int r, Communicator& c) {
    across[size_t(r)] = c.split(r % 2, r);  // {0, 2} and {1, 3}: one rank on each host
    within[size_t(r)] = c.split(r / 2, r);  // {0, 1} and {2, 3}: one host each
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(across[size_t(r)]->topology().nhosts, 2) << r;
    EXPECT_EQ(across[size_t(r)]->topology().local_size, 1) << r;
    EXPECT_EQ(within[size_t(r)]->topology().nhosts, 1) << r;
    EXPECT_EQ(within[size_t(r)]->topology().local_size, 2) << r;
  }
}

TEST(Split, SplitsOfSplits) {
  ncclz_test::Ranks w(6);
  std::vector<std::unique_ptr<Communicator>> half(6), quarter(6);
  w.run([&](int r, Communicator& c) { half[size_t(r)] = c.split(r < 3 ? 0 : 1, r); });
  ncclz_test::run_threads(6, [&](int r) {
    Communicator& h = *half[size_t(r)];
    quarter[size_t(r)] = h.split(h.rank() == 0 ? 0 : 1, 0);  // {0}, {1, 2} and {3}, {4, 5}
  });
  std::vector<int64_t> sums(6);
  ncclz_test::run_threads(6, [&](int r) { sums[size_t(r)] = group_sum(*quarter[size_t(r)], r); });
  const int64_t want[6] = {1, 2 + 3, 2 + 3, 4, 5 + 6, 5 + 6};
  for (int r = 0; r < 6; ++r) EXPECT_EQ(sums[size_t(r)], want[r]) << r;
}

TEST(Split, ASplitAgainstAnotherCallFailsEveryRank) {
  ncclz_test::Ranks w(3, [](int, CommConfig& c) { c.timeout_s = 20; });
  std::vector<std::string> errs(3);
  w.run([&](int r, Communicator& c) {
    try {
      if (r == 0) {
        int64_t x = 1, y = 0;
        c.all_reduce(&x, &y, 1, DataType::I64, RedOp::Sum, Compression::none());
      } else {
        c.split(0, 0);
      }
    } catch (const Error& e) {
      errs[size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(errs[size_t(r)].empty()) << "rank " << r << " did not fail";
}

TEST(Split, Plans) {
  // (color, key) of 4 ranks: two colors, keys reversing one group.
  const std::vector<int64_t> ck = {0, 5, 1, 0, 0, 2, 1, 0};
  EXPECT_EQ(core::plan_split(ck, 0).members, (std::vector<int>{2, 0}));
  EXPECT_EQ(core::plan_split(ck, 0).new_rank, 1);
  EXPECT_EQ(core::plan_split(ck, 3).members, (std::vector<int>{1, 3}));
  EXPECT_EQ(core::plan_split(ck, 3).new_rank, 1);
  const std::vector<int64_t> none = {kSplitNoColor, 0, 0, 0};
  EXPECT_TRUE(core::plan_split(none, 0).members.empty());
  EXPECT_EQ(core::plan_split(none, 0).new_rank, -1);
  EXPECT_EQ(core::plan_split(none, 1).members, (std::vector<int>{1}));
  EXPECT_THROW(core::plan_split({0, 0, -2, 0}, 1), InvalidArgument);
  EXPECT_THROW(core::plan_split({0, 0, -2, 0}, 0), RemoteError);
}

}  // namespace
