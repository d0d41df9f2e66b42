// Shared-memory transport under process faults (cpp/src/transport/shm_transport.cpp):
// a peer that dies right after setup is noticed at the first wait (its pid
// was gone at the first liveness check, and used to be never checked again),
// and a peer killed at any moment of setup leaves no segment in /dev/shm once
// the survivor has failed. Rank 1 is a forked child; rank 0 is this process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"
#include "transport/transport.hpp"

using namespace ncclz;
using namespace ncclz::transport;

namespace {

Clock::time_point in_s(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Names in /dev/shm that start with `prefix`.
std::vector<std::string> shm_names(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  }
  closedir(d);
  return out;
}

struct Rank {
  std::shared_ptr<AbortFlag> abort = std::make_shared<AbortFlag>();
  std::unique_ptr<Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::vector<std::vector<PeerLink>> links;
};

void setup(Rank& me, const UniqueId& id, int rank, int nchannels, double timeout) {
  me.boot = Bootstrap::create(id, rank, 2, timeout);
  TransportConfig cfg;
  cfg.transport = "shm";
  cfg.slot_bytes = 64 << 10;
  me.transport = create_transport(*me.boot, cfg, me.abort);
  me.links = me.transport->connect({1 - rank}, nchannels, in_s(timeout));
}

}  // namespace

TEST(ShmFaults, PeerDeadBeforeTheFirstWaitIsNoticed) {
  // The child sets up and exits at once (no destructors, as a crash); rank 0
  // starts waiting only after the child's pid is gone.
  UniqueId id = Bootstrap::make_unique_id();
  pid_t pid = fork();
  if (pid == 0) {
    try {
      Rank me;
      setup(me, id, 1, 1, 10);
      _exit(0);  // with the rings open, as a crash would
    } catch (...) {
    }
    _exit(3);
  }
  ASSERT_GT(pid, 0);
  Rank me;
  setup(me, id, 0, 1, 10);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto t0 = Clock::now();
  std::string msg;
  try {
    me.links[0][0].recv->wait(in_s(20));
    ADD_FAILURE() << "wait returned";
  } catch (const Timeout& e) {
    ADD_FAILURE() << "Timeout instead of RemoteError: " << e.what();
  } catch (const RemoteError& e) {
    msg = e.what();
  }
  EXPECT_LT(since(t0), 2.0);
  EXPECT_NE(msg.find("peer rank 1 (pid " + std::to_string(pid) + ") died"), std::string::npos) << msg;
}

TEST(ShmFaults, PeerKilledDuringSetupLeavesNothingInDevShm) {
  // The child kills itself (SIGKILL: no cleanup of its own) at a random
  // moment of the transport's setup: before, during or after it creates and
  // opens its 8 channels' segments. (Kills during the rendezvous are in
  // tests/python/test_setup_faults.py.) Rank 0 ends with the setup done or an error within
  // its 5 s timeout, and no segment of the job is left in /dev/shm.
  std::mt19937 rng(1234);
  int failed = 0, succeeded = 0;
  for (int trial = 0; trial < 20; ++trial) {
    UniqueId id = Bootstrap::make_unique_id();
    const int delay_us = std::uniform_int_distribution<int>(0, 4000)(rng);
    pid_t pid = fork();
    if (pid == 0) {
      try {
        Rank me;
        me.boot = Bootstrap::create(id, 1, 2, 5);
        std::thread killer([delay_us] {
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
          kill(getpid(), SIGKILL);
        });
        killer.detach();
        TransportConfig cfg;
        cfg.transport = "shm";
        cfg.slot_bytes = 64 << 10;
        me.transport = create_transport(*me.boot, cfg, me.abort);
        me.links = me.transport->connect({0}, 8, in_s(5));
        std::this_thread::sleep_for(std::chrono::seconds(5));
      } catch (...) {
      }
      _exit(0);
    }
    ASSERT_GT(pid, 0);
    std::string key, error;
    auto t0 = Clock::now();
    try {
      Rank me;
      me.boot = Bootstrap::create(id, 0, 2, 5);
      key = me.boot->job_key();
      TransportConfig cfg;
      cfg.transport = "shm";
      cfg.slot_bytes = 64 << 10;
      me.transport = create_transport(*me.boot, cfg, me.abort);
      me.links = me.transport->connect({1}, 8, in_s(5));
      ++succeeded;
      // The child died after setup: the next wait says so.
      try {
        me.links[0][0].recv->wait(in_s(5));
        ADD_FAILURE() << "wait returned";
      } catch (const RemoteError& e) {
        error = e.what();
      }
    } catch (const RemoteError& e) {
      ++failed;
      error = e.what();
    } catch (const SystemError& e) {
      ADD_FAILURE() << e.what();
    }
    // The death is noticed (a closed connection, a dead pid), not waited out.
    EXPECT_LT(since(t0), 4.0) << "trial " << trial << " (kill after " << delay_us << " us): " << error;
    int status = 0;
    waitpid(pid, &status, 0);
    if (!key.empty()) {
      EXPECT_EQ(shm_names("ncclz-" + key).size(), 0u) << "trial " << trial << " (kill after " << delay_us << " us)";
    }
  }
  // Both outcomes happen across the trials (the kill lands inside and after setup).
  EXPECT_GT(failed + succeeded, 0);
}

namespace {

// The setup message of shm_transport.cpp (step 2 of its setup), as a peer sends it.
struct FakeSetupMsg {
  uint32_t ok;
  uint32_t nchannels;
  uint64_t shm_dev;
  char error[240];
};
static_assert(sizeof(FakeSetupMsg) == 256);
constexpr int kFirstConnectTag = 0x53480000;  // kShmTagBase + connect call 0

// Rank 0 connects for real; rank 1 (a thread) says its rings are ready
// without any being there, as a peer whose setup failed (and removed its
// names) right after it said so. Returns rank 0's error.
template <class E>
std::string connect_to_a_peer_without_rings(uint64_t peer_shm_dev) {
  UniqueId id = Bootstrap::make_unique_id();
  std::string error;
  std::thread peer([&] {
    Rank me;
    me.boot = Bootstrap::create(id, 1, 2, 10);
    TransportConfig cfg;
    cfg.transport = "shm";
    me.transport = create_transport(*me.boot, cfg, me.abort);
    FakeSetupMsg m{};
    m.ok = 1;
    m.nchannels = 1;
    m.shm_dev = peer_shm_dev;
    me.boot->send(0, kFirstConnectTag, &m, sizeof m);
    me.boot->recv(0, kFirstConnectTag, &m, sizeof m);  // rank 0's rings: never opened
    me.boot->barrier();                                // rank 0 has failed by now
  });
  {
    Rank me;
    me.boot = Bootstrap::create(id, 0, 2, 10);
    TransportConfig cfg;
    cfg.transport = "shm";
    me.transport = create_transport(*me.boot, cfg, me.abort);
    try {
      me.links = me.transport->connect({1}, 1, in_s(10));
      ADD_FAILURE() << "connect succeeded";
    } catch (const E& e) {
      error = e.what();
    }
    // What rank 0 created for rank 1 is gone with its failed connect.
    EXPECT_EQ(shm_names("ncclz-" + me.boot->job_key()).size(), 0u);
    me.boot->barrier();
  }
  peer.join();
  return error;
}

uint64_t dev_shm_dev() {
  struct stat st{};
  EXPECT_EQ(stat("/dev/shm", &st), 0);
  return static_cast<uint64_t>(st.st_dev);
}

}  // namespace

TEST(ShmFaults, PeerWhoseSetupFailedAfterAnnouncingItsRingsIsARemoteError) {
  // Same /dev/shm, name gone: the peer failed (its connect() removes what it
  // created) or died and a survivor cleaned up. This rank is not at fault.
  std::string msg = connect_to_a_peer_without_rings<RemoteError>(dev_shm_dev());
  EXPECT_NE(msg.find("peer rank 1 created its shared memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 failed or was killed during setup"), std::string::npos) << msg;
}

TEST(ShmFaults, PeerWithAnotherDevShmIsASystemErrorWithAHint) {
  // Another /dev/shm (containers without a shared one): a configuration error here.
  std::string msg = connect_to_a_peer_without_rings<SystemError>(dev_shm_dev() + 1);
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NCCLZ_TRANSPORT=socket"), std::string::npos) << msg;
}
