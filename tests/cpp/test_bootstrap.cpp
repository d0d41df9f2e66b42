// Bootstrap tests: ranks are threads of this process (each with its own
// TcpBootstrap over loopback), rendezvous through a UniqueId made with port 0
// (no fixed ports, no collisions). See cpp/src/bootstrap/tcp_bootstrap.cpp for
// the protocol these tests exercise; wrong tokens, duplicate ranks, two jobs
// on one port and hostile connections are in test_bootstrap_faults.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"
#include "test_threads.hpp"

using namespace ncclz;

namespace {

using Clock = std::chrono::steady_clock;

using ncclz_test::run_threads;

// A free TCP port on loopback (bind port 0, read it, close).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct Item {
  int32_t rank;
  int32_t square;
  char text[24];
};

void exercise(Bootstrap& b) {
  const int me = b.rank(), n = b.size();
  // allgather
  Item mine{me, me * me, {}};
  std::snprintf(mine.text, sizeof mine.text, "rank-%d", me);
  std::vector<Item> all(static_cast<size_t>(n));
  b.allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[r].rank, r);
    EXPECT_EQ(all[r].square, r * r);
    EXPECT_EQ(std::string(all[r].text), "rank-" + std::to_string(r));
  }
  // Tables: every rank is in this process on this host.
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(b.host_id(r), b.host_id(0));
    EXPECT_EQ(b.process_id(r), b.process_id(0));
  }
  EXPECT_FALSE(b.job_key().empty());
  b.barrier();
  // Point to point around the ring, two tags sent in one order and received in
  // the other (tags keep streams apart), plus a message to itself.
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<uint8_t> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(me));
  int32_t a = 1000 + me, c = 2000 + me;
  b.send(next, /*tag=*/2, &c, sizeof c);
  b.send(next, /*tag=*/1, &a, sizeof a);
  b.send(next, /*tag=*/3, big.data(), big.size());
  int32_t ra = 0, rc = 0;
  b.recv(prev, 1, &ra, sizeof ra);
  b.recv(prev, 2, &rc, sizeof rc);
  EXPECT_EQ(ra, 1000 + prev);
  EXPECT_EQ(rc, 2000 + prev);
  std::vector<uint8_t> rbig(big.size());
  b.recv(prev, 3, rbig.data(), rbig.size());
  for (size_t i = 0; i < rbig.size(); i += 997) {
    EXPECT_EQ(rbig[i], static_cast<uint8_t>(i * 7 + static_cast<size_t>(prev)));
  }
  int32_t self = 77 + me, rself = 0;
  b.send(me, 9, &self, sizeof self);
  b.recv(me, 9, &rself, sizeof rself);
  EXPECT_EQ(rself, 77 + me);
  b.barrier();
  // The job key is the same everywhere.
  char key[64] = {0};
  std::strncpy(key, b.job_key().c_str(), sizeof key - 1);
  std::vector<char> keys(64 * static_cast<size_t>(n));
  b.allgather(key, sizeof key, keys.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(std::string(&keys[64 * static_cast<size_t>(r)]), b.job_key());
}

class BootstrapSizes : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(BootstrapSizes, AllgatherBarrierP2p) {
  const int n = GetParam();
  UniqueId id = Bootstrap::make_unique_id();
  run_threads(n, [&](int r) {
    auto b = Bootstrap::create(id, r, n, 10.0);
    EXPECT_EQ(b->rank(), r);
    EXPECT_EQ(b->size(), n);
    exercise(*b);
  });
}

INSTANTIATE_TEST_SUITE_P(Bootstrap, BootstrapSizes, ::testing::Values(1, 2, 3, 8));

TEST(Bootstrap, MasterPortAndLateRoot) {
  // Config-based rendezvous (MASTER_ADDR/MASTER_PORT style); rank 0 starts
  // 300 ms after the others, who keep retrying.
  const int n = 3;
  const int port = free_port();
  run_threads(n, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    BootstrapConfig cfg;
    cfg.rank = r;
    cfg.size = n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.token = "secret";
    cfg.timeout_s = 10;
    auto b = Bootstrap::create(cfg);
    exercise(*b);
  });
}

TEST(Bootstrap, MissingRankTimesOutNamingIt) {
  const int n = 4;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<std::string> msgs(n);
  std::vector<int> timeouts(n, 0);
  auto t0 = Clock::now();
  run_threads(n, [&](int r) {
    if (r == 2) return;  // never arrives
    try {
      auto b = Bootstrap::create(id, r, n, 0.6);
    } catch (const Timeout& e) {
      timeouts[r] = 1;
      msgs[r] = e.what();
    }
  });
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(secs, 4.0);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(timeouts[r], 1) << "rank " << r;
    EXPECT_NE(msgs[r].find("missing ranks: 2"), std::string::npos) << msgs[r];
  }
}

TEST(Bootstrap, AbortWakesPendingRecv) {
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<std::unique_ptr<Bootstrap>> bs(2);
  run_threads(2, [&](int r) { bs[r] = Bootstrap::create(id, r, 2, 10.0); });
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bs[0]->abort("test abort");
  });
  auto t0 = Clock::now();
  int32_t x;
  try {
    bs[0]->recv(1, 5, &x, sizeof x);
    ADD_FAILURE() << "recv returned";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos);
  }
  aborter.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_THROW(bs[0]->barrier(), Aborted);
}

TEST(Bootstrap, PeerGoneGivesRemoteError) {
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<std::unique_ptr<Bootstrap>> bs(3);
  run_threads(3, [&](int r) { bs[r] = Bootstrap::create(id, r, 3, 10.0); });
  // Rank 2 sends one message to rank 0, then exits.
  int32_t v = 5;
  bs[2]->send(0, 1, &v, sizeof v);
  bs[2].reset();
  auto t0 = Clock::now();
  int32_t got = 0;
  bs[0]->recv(2, 1, &got, sizeof got);  // already sent: still delivered
  EXPECT_EQ(got, 5);
  try {
    bs[0]->recv(2, 1, &got, sizeof got);
    ADD_FAILURE() << "recv from a gone peer returned";
  } catch (const Timeout&) {
    ADD_FAILURE() << "expected RemoteError, got Timeout";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  // A collective with a missing member fails naming it.
  std::thread t1([&] {
    try {
      bs[1]->barrier();
    } catch (const RemoteError&) {
    }
  });
  try {
    bs[0]->barrier();
    ADD_FAILURE() << "barrier returned";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  bs[0].reset();  // unblocks rank 1
  t1.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
}

TEST(Bootstrap, SingleRankJobsShareAPort) {
  BootstrapConfig cfg;
  cfg.master_port = free_port();
  cfg.timeout_s = 2;
  auto a = Bootstrap::create(cfg);
  auto b = Bootstrap::create(cfg);  // no "address in use": a job of one does not listen there
  exercise(*a);
  exercise(*b);
  EXPECT_NE(a->job_key(), b->job_key());
}

TEST(Bootstrap, InvalidArguments) {
  UniqueId bad{};
  EXPECT_THROW(Bootstrap::create(bad, 0, 2, 1.0), InvalidArgument);
  UniqueId id = Bootstrap::make_unique_id();
  EXPECT_THROW(Bootstrap::create(id, 2, 2, 1.0), InvalidArgument);
  EXPECT_THROW(Bootstrap::create(id, -1, 2, 1.0), InvalidArgument);
  auto b = Bootstrap::create(id, 0, 1, 1.0);
  int32_t x = 0;
  EXPECT_THROW(b->send(1, 0, &x, sizeof x), InvalidArgument);
}
