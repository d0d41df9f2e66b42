// The socket transport's listener under hostile connections
// (cpp/src/transport/socket_transport.cpp, connect() step 2): idle, slow and
// garbage connections waiting in its backlog never delay or fail the real
// ranks' connections, and none of them is held once connect() returns.
// Its listener exists for the transport's lifetime, so such connections can
// pile up at any time before a connect(). Ranks are threads of this process.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"
#include "test_threads.hpp"
#include "transport/transport.hpp"

using namespace ncclz;
using namespace ncclz::transport;

namespace {

Clock::time_point in_s(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// TCP ports this process listens on on 127.0.0.1 or the wildcard (from
// /proc/net/tcp, state 0A, matched to this process's socket inodes).
std::set<int> my_listening_ports() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char buf[64] = {};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
      if (n > 0 && std::strncmp(buf, "socket:[", 8) == 0) inodes.insert(std::string(buf + 8, size_t(n) - 9));
    }
    closedir(d);
  }
  std::set<int> ports;
  std::ifstream f("/proc/self/net/tcp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "0A" || !inodes.count(inode)) continue;
    ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

net::Fd connect_to(int port) {
  net::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  return fd;
}

// How many of fds[first, first + n) the other end has closed (EOF or reset),
// waiting up to 1 s for the FINs to arrive (on loopback they are there at once).
size_t count_closed(const std::vector<net::Fd>& fds, size_t first, size_t n) {
  std::vector<bool> closed(n, false);
  size_t count = 0;
  const auto end = in_s(1.0);
  while (count < n && Clock::now() < end) {
    std::vector<pollfd> p;
    for (size_t i = 0; i < n; ++i) p.push_back(pollfd{fds[first + i].get(), POLLIN, 0});
    if (::poll(p.data(), p.size(), 100) <= 0) continue;
    for (size_t i = 0; i < n; ++i) {
      if (closed[i] || !p[i].revents) continue;
      char buf[256];
      const ssize_t got = ::recv(fds[first + i].get(), buf, sizeof buf, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno == ECONNRESET)) {
        closed[i] = true;
        ++count;
      }
    }
  }
  return count;
}

}  // namespace

TEST(SocketSetupFaults, HostileConnectionsNeverDelayConnect) {
  // Before the ranks' connect(): at each transport listener 100 idle
  // connections (more than the 64 + 2 that may wait at once), 10 that send
  // half a hello and stop, 5 that send a hello's worth of garbage. Both ranks
  // connect 2 channels without waiting for any of them, and move data.
  const UniqueId id = Bootstrap::make_unique_id();
  struct Rank {
    std::shared_ptr<AbortFlag> abort = std::make_shared<AbortFlag>();
    std::unique_ptr<Bootstrap> boot;
    std::unique_ptr<Transport> transport;
    std::vector<std::vector<PeerLink>> links;
  } ranks[2];
  ncclz_test::run_threads(2, [&](int r) { ranks[r].boot = Bootstrap::create(id, r, 2, 10.0); });
  const std::set<int> before = my_listening_ports();
  ncclz_test::run_threads(2, [&](int r) {
    TransportConfig cfg;
    cfg.transport = "socket";
    cfg.slot_bytes = 4096;
    ranks[r].transport = create_transport(*ranks[r].boot, cfg, ranks[r].abort);
  });
  std::vector<int> listeners;
  for (int p : my_listening_ports()) {
    if (!before.count(p)) listeners.push_back(p);
  }
  ASSERT_EQ(listeners.size(), 2u) << "expected the two transports' listeners";

  std::vector<net::Fd> hostile;
  for (int port : listeners) {
    for (int i = 0; i < 100; ++i) hostile.push_back(connect_to(port));
    for (int i = 0; i < 10; ++i) {
      hostile.push_back(connect_to(port));
      const char half[8] = {'N', 'Z', 'S', 'H', 3, 0, 0, 0};
      ASSERT_EQ(::send(hostile.back().get(), half, sizeof half, 0), ssize_t(sizeof half));
    }
    for (int i = 0; i < 5; ++i) {
      hostile.push_back(connect_to(port));
      std::string junk(200, char('a' + i));
      ASSERT_EQ(::send(hostile.back().get(), junk.data(), junk.size(), 0), ssize_t(junk.size()));
    }
  }

  // Read one at a time, each idle connection held the accepting rank for the
  // 5 s hello timeout (the first two alone took this 6 s deadline; the rest
  // were then refused at once). Side by side, none of them is waited for.
  const auto t0 = Clock::now();
  ncclz_test::run_threads(2, [&](int r) { ranks[r].links = ranks[r].transport->connect({1 - r}, 2, in_s(6), 0); });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0) << "connect waited for a hello timeout";
  for (int c = 0; c < 2; ++c) {
    for (int r = 0; r < 2; ++r) {
      SendConn* snd = ranks[r].links[size_t(c)][0].send.get();
      uint8_t* d = snd->acquire(in_s(5));
      for (size_t j = 0; j < 1000; ++j) d[j] = uint8_t(r * 50 + c * 7 + j);
      snd->post(1000);
    }
    for (int r = 0; r < 2; ++r) {
      RecvConn* rcv = ranks[r].links[size_t(c)][0].recv.get();
      const SlotView v = rcv->wait(in_s(5));
      ASSERT_EQ(v.bytes, 1000u);
      for (size_t j = 0; j < 1000; ++j) ASSERT_EQ(v.data[j], uint8_t((1 - r) * 50 + c * 7 + j)) << j;
      rcv->release();
    }
  }
  // Every hostile connection at the accepting rank's listener is closed by
  // the time connect() returns (rank 1 accepts; rank 0 only connects, and its
  // listener's backlog is left as it is, as before).
  const size_t closed[2] = {count_closed(hostile, 0, 115), count_closed(hostile, 115, 115)};
  EXPECT_EQ(std::max(closed[0], closed[1]), 115u) << closed[0] << " and " << closed[1] << " closed";
}
