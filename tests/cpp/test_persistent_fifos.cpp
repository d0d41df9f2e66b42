// The host-only pieces of the persistent ring's FIFO placement
// (core/persistent_fifos.hpp), no device needed: the setting's parsing, the
// record exchange around a ring of ranks as threads (every rank gets every
// record, in rank order; a record of the wrong size is an error), and the
// /dev/shm abort page (a word written through one mapping is read through
// another; the name is gone after unlink, the mappings stay).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/persistent_fifos.hpp"
#include "ncclz/error.hpp"
#include "transport/persistent_proxy.hpp"

using namespace ncclz;
using core::AbortPage;
using core::FifoChoice;

namespace {

struct Record {
  int32_t rank;
  uint32_t tag;
  char text[40];
};

}  // namespace

TEST(PersistentFifos, TheSettingParses) {
  unsetenv("NCCLZ_PERSISTENT_FIFOS");
  EXPECT_EQ(core::fifo_choice_from_env(), FifoChoice::Auto);
  for (auto [v, c] : {std::pair{"auto", FifoChoice::Auto}, std::pair{"device", FifoChoice::Device},
                      std::pair{"host", FifoChoice::Host}}) {
    setenv("NCCLZ_PERSISTENT_FIFOS", v, 1);
    EXPECT_EQ(core::fifo_choice_from_env(), c) << v;
    EXPECT_STREQ(core::fifo_choice_name(c), v);
  }
  setenv("NCCLZ_PERSISTENT_FIFOS", "gpu", 1);
  EXPECT_THROW(core::fifo_choice_from_env(), InvalidArgument);
  unsetenv("NCCLZ_PERSISTENT_FIFOS");
}

TEST(PersistentFifos, RingAllgatherGivesEveryRankEveryRecord) {
  for (int N : {2, 3, 5}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    auto links = transport::local_ring_channels(N, 1, 4, 4096);
    std::vector<std::vector<uint8_t>> got(static_cast<size_t>(N));
    std::vector<std::thread> ts;
    for (int r = 0; r < N; ++r) {
      ts.emplace_back([&, r] {
        Record me{r, 0xC0DE0000u + uint32_t(r), {}};
        std::snprintf(me.text, sizeof me.text, "rank %d of %d", r, N);
        got[size_t(r)] = core::ring_allgather(links[size_t(r)][0], &me, sizeof me, r, N,
                                              transport::Clock::now() + std::chrono::seconds(20));
      });
    }
    for (auto& t : ts) t.join();
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(got[size_t(r)].size(), sizeof(Record) * size_t(N));
      for (int q = 0; q < N; ++q) {
        Record x;
        std::memcpy(&x, got[size_t(r)].data() + sizeof(Record) * size_t(q), sizeof x);
        EXPECT_EQ(x.rank, q) << "rank " << r << "'s copy";
        EXPECT_EQ(x.tag, 0xC0DE0000u + uint32_t(q));
        EXPECT_EQ(std::string(x.text), "rank " + std::to_string(q) + " of " + std::to_string(N));
      }
    }
  }
}

// Ranks of different builds (records of different sizes) fail, not misread.
TEST(PersistentFifos, RingAllgatherRefusesARecordOfAnotherSize) {
  auto links = transport::local_ring_channels(2, 1, 4, 4096);
  std::string err[2];
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      const std::vector<uint8_t> me(r == 0 ? 64 : 72, uint8_t(r));
      try {
        core::ring_allgather(links[size_t(r)][0], me.data(), me.size(), r, 2,
                             transport::Clock::now() + std::chrono::seconds(20));
      } catch (const Error& e) {
        err[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_NE(err[0].find("expected 64"), std::string::npos) << err[0];
  EXPECT_NE(err[1].find("expected 72"), std::string::npos) << err[1];
}

TEST(PersistentFifos, AbortPageIsSharedBetweenMappings) {
  AbortPage made = AbortPage::create();
  ASSERT_NE(made.data(), nullptr);
  ASSERT_GE(made.bytes(), sizeof(int));
  EXPECT_EQ(made.name().rfind("/ncclz-abort-", 0), 0u) << made.name();
  EXPECT_EQ(*static_cast<volatile int*>(made.data()), 0);  // a new page: the word is clear
  AbortPage other = AbortPage::open(made.name());
  ASSERT_NE(other.data(), made.data());  // another mapping of the same page
  __atomic_store_n(static_cast<int*>(made.data()), 1, __ATOMIC_SEQ_CST);
  EXPECT_EQ(__atomic_load_n(static_cast<int*>(other.data()), __ATOMIC_SEQ_CST), 1);
  const std::string name = made.name();
  made.unlink();
  EXPECT_THROW(AbortPage::open(name), Error);  // the name is gone ...
  __atomic_store_n(static_cast<int*>(other.data()), 0, __ATOMIC_SEQ_CST);
  EXPECT_EQ(__atomic_load_n(static_cast<int*>(made.data()), __ATOMIC_SEQ_CST), 0);  // ... the mappings stay
}
