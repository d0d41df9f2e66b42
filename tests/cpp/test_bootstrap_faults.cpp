// Bootstrap under faults and attacks: wrong tokens, fake rank 0s, duplicate
// ranks, two jobs on one port, idle and flooding connections, ranks that
// leave during the rendezvous, and the progress reports of long waits.
// Ranks are threads of this process over loopback; the protocol is in
// cpp/src/bootstrap/handshake.hpp, the rules in tcp_bootstrap.cpp. Every test
// ends with a correct result or a clear error on every rank; process-level
// faults (kills, stops, descriptor limits) are in tests/python/test_setup_faults.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/handshake.hpp"
#include "bootstrap/job_identity.hpp"
#include "ncclz/error.hpp"
#include "test_threads.hpp"

using namespace ncclz;
namespace bs = ncclz::bootstrap;

namespace {

using Clock = std::chrono::steady_clock;
using ncclz_test::run_threads;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int uid_port(const UniqueId& id) { return (id.bytes[6] << 8) | id.bytes[7]; }

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

// A plain TCP connection to 127.0.0.1:port (-1 when it fails).
int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int port_of(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

bool read_exact(int fd, void* p, size_t n, int timeout_ms = 3000) {
  auto* c = static_cast<uint8_t*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) <= 0) return false;
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Clears the launcher variables that give a job id, so that jobs made here
// are "anonymous" unless a test gives them a token or a job id.
class CleanIdentity : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"NCCLZ_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                          "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "NCCLZ_TOKEN", "NCCLZ_WAIT_REPORT"}) {
      if (const char* x = std::getenv(v)) saved_.emplace_back(v, x);
      unsetenv(v);
    }
  }
  void TearDown() override {
    unsetenv("NCCLZ_WAIT_REPORT");
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

BootstrapConfig port_cfg(int rank, int size, int port, double timeout, const std::string& token = "",
                         const std::string& job_id = "", int generation = -1) {
  BootstrapConfig c;
  c.generation = generation;
  c.rank = rank;
  c.size = size;
  c.master_addr = "127.0.0.1";
  c.master_port = port;
  c.token = token;
  c.job_id = job_id;
  c.timeout_s = timeout;
  return c;
}

// Every rank can still talk to every other (star and point to point).
void exercise(Bootstrap& b) {
  const int me = b.rank(), n = b.size();
  std::vector<int32_t> all(static_cast<size_t>(n));
  int32_t mine = 100 + me;
  b.allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], 100 + r);
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  int32_t v = 7 * me, got = -1;
  b.send(next, 11, &v, sizeof v);
  b.recv(prev, 11, &got, sizeof got);
  EXPECT_EQ(got, 7 * prev);
  b.barrier();
}

// The error (type and text) each rank ended with.
struct Outcome {
  std::string kind;  // "", "Timeout", "Aborted", "RemoteError", "SystemError", "other"
  std::string what;
};

Outcome attempt(const std::function<void()>& fn) {
  try {
    fn();
    return {};
  } catch (const Timeout& e) {
    return {"Timeout", e.what()};
  } catch (const Aborted& e) {
    return {"Aborted", e.what()};
  } catch (const RemoteError& e) {
    return {"RemoteError", e.what()};
  } catch (const SystemError& e) {
    return {"SystemError", e.what()};
  } catch (const std::exception& e) {
    return {"other", e.what()};
  }
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A rendezvous client by hand: hello, the challenge, a proof, the answer.
struct RawRank {
  int fd = -1;
  bs::Hello hello;
  base::Digest hash{}, mac0{};
  uint32_t status = 0;
  std::vector<uint8_t> body;

  ~RawRank() {
    if (fd >= 0) close(fd);
  }
  bool read_reply() {
    uint32_t h[3];
    if (!read_exact(fd, h, sizeof h) || h[0] != bs::kReplyMagic) return false;
    status = h[1];
    body.resize(h[2]);
    return read_exact(fd, body.data(), body.size());
  }
  // Connects and says hello; true when a challenge came back.
  bool start(int port, int rank, int size, const std::string& job_id = "") {
    for (int i = 0; i < 200 && fd < 0; ++i) {
      fd = raw_connect(port);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    hello.rank = rank;
    hello.size = size;
    hello.job_id = job_id;
    hello.nonce = bs::random_nonce();
    auto bytes = bs::frame(bs::kHelloMagic, bs::kVersion, bs::hello_body(hello).b);
    hash = base::sha256(bytes.data(), bytes.size());
    if (write(fd, bytes.data(), bytes.size()) != ssize_t(bytes.size())) return false;
    if (!read_reply() || status != bs::kChallenge) return false;
    std::memcpy(mac0.data(), body.data() + body.size() - 32, 32);
    return true;
  }
  // Sends a proof made with `token` and a listener at port 1 (never used).
  void prove(const std::string& token) {
    bs::Writer info;
    bs::RankInfo me;
    me.host = "127.0.0.1";
    me.port = 1;
    me.host_id = "raw/boot";
    me.process_id = "raw/boot/pid1/x";
    bs::put_info(info, me);
    auto mac = bs::rank_mac(token, hash, mac0, info.b.data(), info.b.size());
    info.raw(mac.data(), mac.size());
    auto bytes = bs::frame(bs::kProofMagic, bs::kProofOk, info.b);
    ssize_t w = write(fd, bytes.data(), bytes.size());
    (void)w;
  }
};

std::string reply_text(const RawRank& r) {
  bs::Reader rd{r.body.data(), r.body.size()};
  return rd.str();
}

}  // namespace

TEST_F(CleanIdentity, WrongTokenIsRefusedAndTheJobGoesOn) {
  const int n = 3;
  UniqueId id = Bootstrap::make_unique_id();
  const int port = uid_port(id);
  Outcome intruder;
  std::thread t([&] { intruder = attempt([&] { Bootstrap::create(port_cfg(1, n, port, 5, "not-the-token")); }); });
  std::thread garbage([&] {
    int fd = raw_connect(port);
    if (fd >= 0) {
      const char* req = "GET / HTTP/1.0\r\n\r\n";
      ssize_t w = write(fd, req, std::strlen(req));
      (void)w;
      char buf[16];
      EXPECT_LE(read(fd, buf, sizeof buf), 0);  // the server closes on us
      close(fd);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  run_threads(n, [&](int r) {
    auto b = Bootstrap::create(id, r, n, 10.0);
    exercise(*b);
  });
  t.join();
  garbage.join();
  EXPECT_EQ(intruder.kind, "RemoteError") << intruder.what;
  EXPECT_TRUE(has(intruder.what, "could not prove that it holds this job's token")) << intruder.what;
}

TEST_F(CleanIdentity, FakeRankZeroLearnsNothing) {
  // A fake rank 0 answers with a challenge it cannot have made. The rank
  // fails at once and sends it nothing derived from the token and none of
  // its addresses: only the hello and a proof-failed notice.
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const std::string token = "the-real-secret-token-0123456789";
  std::vector<uint8_t> seen;
  std::thread fake([&] {
    int c = accept(lfd, nullptr, nullptr);
    uint32_t h[3];
    ASSERT_TRUE(read_exact(c, h, sizeof h));
    std::vector<uint8_t> body(h[2]);
    ASSERT_TRUE(read_exact(c, body.data(), body.size()));
    seen.insert(seen.end(), reinterpret_cast<uint8_t*>(h), reinterpret_cast<uint8_t*>(h) + 12);
    seen.insert(seen.end(), body.begin(), body.end());
    bs::Writer ch;
    bs::Nonce n0 = bs::random_nonce();
    ch.raw(n0.data(), n0.size());
    ch.str("");
    uint8_t bogus[32] = {1, 2, 3};
    ch.raw(bogus, sizeof bogus);
    auto bytes = bs::frame(bs::kReplyMagic, bs::kChallenge, ch.b);
    ASSERT_EQ(write(c, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    uint8_t buf[4096];
    for (;;) {
      pollfd pf{c, POLLIN, 0};
      if (poll(&pf, 1, 3000) <= 0) break;
      ssize_t r = read(c, buf, sizeof buf);
      if (r <= 0) break;
      seen.insert(seen.end(), buf, buf + r);
    }
    close(c);
  });
  auto t0 = Clock::now();
  Outcome o = attempt([&] { Bootstrap::create(port_cfg(1, 2, port, 10, token)); });
  fake.join();
  close(lfd);
  EXPECT_EQ(o.kind, "RemoteError") << o.what;
  EXPECT_TRUE(has(o.what, "could not prove")) << o.what;
  EXPECT_LT(since(t0), 5.0);  // at once, not at the 10 s timeout
  std::string text(seen.begin(), seen.end());
  EXPECT_FALSE(has(text, token));
  EXPECT_FALSE(has(text, "pid"));  // the process id and addresses come only with a proof
  // Hello (12 + body) then Proof status 1 with an empty body.
  uint32_t hello_len;
  std::memcpy(&hello_len, seen.data() + 8, 4);
  ASSERT_EQ(seen.size(), 12 + hello_len + 12);
  uint32_t tail[3];
  std::memcpy(tail, seen.data() + 12 + hello_len, 12);
  EXPECT_EQ(tail[0], bs::kProofMagic);
  EXPECT_EQ(tail[1], uint32_t(bs::kRootProofWrong));
  EXPECT_EQ(tail[2], 0u);
}

TEST_F(CleanIdentity, ForgedProofIsRefused) {
  // A stranger that echoes rank 0's challenge cannot make the proof.
  const int n = 2;
  UniqueId id = Bootstrap::make_unique_id();
  RawRank fake;
  run_threads(n, [&](int r) {
    if (r == 1) {  // the real rank 1 comes after the fake was refused
      ASSERT_TRUE(fake.start(uid_port(id), 1, n));
      fake.prove("guessed-token");
      ASSERT_TRUE(fake.read_reply());
    }
    auto b = Bootstrap::create(id, r, n, 10.0);
    exercise(*b);
  });
  EXPECT_EQ(fake.status, uint32_t(bs::kRefused));
  EXPECT_TRUE(has(reply_text(fake), "token proof is wrong")) << reply_text(fake);
}

TEST_F(CleanIdentity, DuplicateRankStopsEveryRank) {
  // Two processes claim rank 1 (both hold the token) while rank 3 is still
  // to come: nobody may join silently; every rank fails, naming both
  // claimants. (A claim after the job started: LateClaimOfTheSameIdentity.)
  const int n = 4;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<Outcome> out(4);
  auto t0 = Clock::now();
  run_threads(4, [&](int i) {
    int rank = i == 3 ? 1 : i;  // threads 1 and 3 both claim rank 1, after rank 2 joined
    if (i == 1 || i == 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    out[i] = attempt([&] { Bootstrap::create(id, rank, n, 10.0); });
  });
  EXPECT_LT(since(t0), 5.0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].kind, "RemoteError") << i << ": " << out[i].what;
    EXPECT_TRUE(has(out[i].what, "rank 1 is claimed twice")) << i << ": " << out[i].what;
  }
}

TEST_F(CleanIdentity, WorldSizeMismatchStopsEveryRank) {
  const int n = 3;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<Outcome> out(n);
  run_threads(n, [&](int r) {
    if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // after rank 1 joined
    out[r] = attempt([&] { Bootstrap::create(id, r, r == 2 ? 4 : n, 10.0); });
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r].kind, "RemoteError") << r << ": " << out[r].what;
    EXPECT_TRUE(has(out[r].what, "says the job has 4 ranks")) << r << ": " << out[r].what;
  }
}

TEST_F(CleanIdentity, SecondRankZeroStopsBothJobs) {
  // Job A (anonymous: no token, no job id) waits for its rank 2; a rank 0 of
  // job B with the same identity finds the port taken: B's rank 0 says who
  // holds it, and every rank of A stops, naming the conflict.
  const int port = free_port();
  std::vector<Outcome> a(2);
  Outcome b0;
  auto t0 = Clock::now();
  std::thread job_a(
      [&] { run_threads(2, [&](int r) { a[r] = attempt([&] { Bootstrap::create(port_cfg(r, 3, port, 10)); }); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  b0 = attempt([&] { Bootstrap::create(port_cfg(0, 2, port, 10)); });
  job_a.join();
  EXPECT_LT(since(t0), 5.0);
  EXPECT_EQ(b0.kind, "SystemError") << b0.what;
  EXPECT_TRUE(has(b0.what, "Address already in use")) << b0.what;
  EXPECT_TRUE(has(b0.what, "already runs there")) << b0.what;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a[r].kind, "RemoteError") << r << ": " << a[r].what;
    EXPECT_TRUE(has(a[r].what, "started as rank 0")) << r << ": " << a[r].what;
    EXPECT_TRUE(has(a[r].what, "NCCLZ_TOKEN")) << a[r].what;  // the advice for anonymous jobs
  }
}

TEST_F(CleanIdentity, JobsWithTheirOwnIdentityNeverMeet) {
  // Job A runs; job B (another job id, or another token) uses the same port.
  // B's ranks fail at once saying that another job is there; A goes on.
  struct Case {
    std::string token_a, token_b, id_a, id_b, b0_says, b1_says;
  };
  for (const Case& c :
       {Case{"", "", "NCCLZ_JOB_ID=a", "NCCLZ_JOB_ID=b", "its job id is 'NCCLZ_JOB_ID=a'", "belongs to another job"},
        Case{"token-a", "token-b", "", "", "another NCCLZ_TOKEN", "could not prove"}}) {
    const int port = free_port();
    std::vector<std::unique_ptr<Bootstrap>> a(2);
    run_threads(2, [&](int r) { a[r] = Bootstrap::create(port_cfg(r, 2, port, 10, c.token_a, c.id_a)); });
    std::string conflict;
    a[0]->set_conflict_handler([&](const std::string& why) { conflict = why; });
    Outcome b0 = attempt([&] { Bootstrap::create(port_cfg(0, 2, port, 10, c.token_b, c.id_b)); });
    auto t0 = Clock::now();
    Outcome b1 = attempt([&] { Bootstrap::create(port_cfg(1, 2, port, 10, c.token_b, c.id_b)); });
    EXPECT_LT(since(t0), 3.0);
    EXPECT_EQ(b0.kind, "SystemError") << b0.what;
    EXPECT_TRUE(has(b0.what, c.b0_says)) << b0.what;
    EXPECT_EQ(b1.kind, "RemoteError") << b1.what;
    EXPECT_TRUE(has(b1.what, c.b1_says)) << b1.what;
    run_threads(2, [&](int r) { exercise(*a[r]); });
    EXPECT_EQ(conflict, "");
    a[0]->set_conflict_handler(nullptr);
  }
}

TEST_F(CleanIdentity, LateClaimOfTheSameIdentityAbortsTheJob) {
  // Anonymous job A is complete; another process claims its rank 1. It could
  // be A's real rank 1 arriving after an impostor took its place: A must not
  // go on silently. The claimant hears why at once, rank 0's conflict handler
  // runs (the communicator aborts), and A's ranks fail their next setup step.
  const int port = free_port();
  std::vector<std::unique_ptr<Bootstrap>> a(2);
  run_threads(2, [&](int r) { a[r] = Bootstrap::create(port_cfg(r, 2, port, 10)); });
  std::mutex mu;
  std::string conflict;
  a[0]->set_conflict_handler([&](const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    conflict = why;
  });
  // generation 0: a process of its own (this process's next rank 1 would be
  // the job's next communicator, told to wait for rank 0 to make it).
  Outcome late = attempt([&] { Bootstrap::create(port_cfg(1, 2, port, 10, "", "", 0)); });
  EXPECT_EQ(late.kind, "RemoteError") << late.what;
  EXPECT_TRUE(has(late.what, "rank 1 is claimed twice")) << late.what;
  EXPECT_TRUE(has(late.what, "after the job started")) << late.what;
  {
    std::lock_guard<std::mutex> lk(mu);  // the handler ran before the claimant heard
    EXPECT_TRUE(has(conflict, "rank 1 is claimed twice")) << conflict;
  }
  std::vector<Outcome> next(2);
  run_threads(2, [&](int r) { next[r] = attempt([&] { a[r]->barrier(); }); });
  EXPECT_EQ(next[0].kind, "Aborted") << next[0].what;
  EXPECT_EQ(next[1].kind, "RemoteError") << next[1].what;
  EXPECT_TRUE(has(next[1].what, "rank 0 reports that the job failed")) << next[1].what;
  EXPECT_TRUE(has(next[1].what, "claimed twice")) << next[1].what;
  // A handler registered afterwards hears of it at once.
  std::string again;
  a[0]->set_conflict_handler([&](const std::string& why) { again = why; });
  EXPECT_EQ(again, conflict);
  a[0]->set_conflict_handler(nullptr);
}

TEST_F(CleanIdentity, LaterCommunicatorOfThisProcessTakesThePortOver) {
  // Communicators made one after the other on one MASTER_PORT, the first
  // still open: the second rank 0 takes the finished rendezvous's listener.
  const int port = free_port();
  std::vector<std::unique_ptr<Bootstrap>> first(2), second(2);
  run_threads(2, [&](int r) { first[r] = Bootstrap::create(port_cfg(r, 2, port, 10, "tok")); });
  run_threads(2, [&](int r) { second[r] = Bootstrap::create(port_cfg(r, 2, port, 10, "tok")); });
  run_threads(2, [&](int r) {
    exercise(*first[r]);
    exercise(*second[r]);
  });
  EXPECT_NE(first[0]->job_key(), second[0]->job_key());
}

TEST_F(CleanIdentity, RankLeavingDuringTheRendezvousFailsItAtOnce) {
  // Rank 1 joins, then goes away before the table (killed, crashed): the
  // ranks that joined hear it at once, not at the timeout.
  const int n = 4;
  UniqueId id = Bootstrap::make_unique_id();
  std::string token(reinterpret_cast<const char*>(id.bytes + 73), id.bytes[72]);
  auto t0 = Clock::now();
  std::vector<Outcome> out(3);
  run_threads(3, [&](int r) {
    if (r == 1) {  // joins by hand, then leaves
      RawRank raw;
      ASSERT_TRUE(raw.start(uid_port(id), 1, n));
      raw.prove(token);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return;
    }
    out[r] = attempt([&] { Bootstrap::create(id, r, n, 10.0); });
  });
  EXPECT_LT(since(t0), 5.0);
  for (int r : {0, 2}) {
    EXPECT_EQ(out[r].kind, "RemoteError") << r << ": " << out[r].what;
    EXPECT_TRUE(has(out[r].what, "rank 1")) << out[r].what;
    EXPECT_TRUE(has(out[r].what, "disconnected during the rendezvous")) << out[r].what;
  }
}

TEST_F(CleanIdentity, IdleAndSlowConnectionsNeverDelayARealRank) {
  // 60 idle and 20 slow (half a hello) connections to rank 0's port, and 20
  // to every rank's own listener: with a 2 s timeout (under the 3 s a
  // handshake may take) the job still forms and exchanges its messages.
  // (Before handshakes ran side by side, each idle connection held a rank's
  // setup messages for 5 s.)
  const int n = 3;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<int> fds;
  for (int i = 0; i < 60; ++i) fds.push_back(raw_connect(uid_port(id)));
  for (int i = 0; i < 20; ++i) {
    int fd = raw_connect(uid_port(id));
    uint32_t magic = bs::kHelloMagic;
    ssize_t w = write(fd, &magic, 2);
    (void)w;
    fds.push_back(fd);
  }
  std::vector<std::unique_ptr<Bootstrap>> b(n);
  run_threads(n, [&](int r) { b[r] = Bootstrap::create(id, r, n, 2.0); });
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 20; ++i) fds.push_back(raw_connect(port_of(b[r]->listen_endpoint())));
  }
  for (int round = 0; round < 3; ++round) run_threads(n, [&](int r) { exercise(*b[r]); });
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

TEST_F(CleanIdentity, FloodOfConnectionsIsShedAndRealRanksServed) {
  // 1,100 idle connections (more than rank 0 keeps pending): the oldest idle
  // ones are closed and the real ranks still get in.
  const int n = 2;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<int> fds;
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    for (int i = 0; i < 1100 && !stop; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(uid_port(id)));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      fds.push_back(fd);
    }
  });
  std::vector<std::unique_ptr<Bootstrap>> b(n);
  run_threads(n, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    b[r] = Bootstrap::create(id, r, n, 10.0);
  });
  stop = true;
  flood.join();
  run_threads(n, [&](int r) { exercise(*b[r]); });
  for (int fd : fds) close(fd);
}

TEST_F(CleanIdentity, ForgedPointToPointHelloIsRefused) {
  const int n = 2;
  UniqueId id = Bootstrap::make_unique_id();
  std::vector<std::unique_ptr<Bootstrap>> b(n);
  run_threads(n, [&](int r) { b[r] = Bootstrap::create(id, r, n, 10.0); });
  // A hello for rank 1 -> rank 0 with the right job key but a guessed MAC,
  // then a message: rank 0 must not deliver it.
  int fd = raw_connect(port_of(b[0]->listen_endpoint()));
  bs::Writer body;
  body.str(b[0]->job_key());
  body.i32(1);
  body.i32(0);
  bs::Nonce nonce = bs::random_nonce();
  body.raw(nonce.data(), nonce.size());
  uint8_t mac[32] = {9};
  body.raw(mac, sizeof mac);
  auto hello = bs::frame(bs::kPHelloMagic, bs::kVersion, body.b);
  bs::Writer msg;
  msg.u32(bs::kPMsgMagic);
  msg.i32(5);
  msg.u64(4);
  msg.i32(666);
  ASSERT_EQ(write(fd, hello.data(), hello.size()), ssize_t(hello.size()));
  ASSERT_EQ(write(fd, msg.b.data(), msg.b.size()), ssize_t(msg.b.size()));
  char c;
  EXPECT_LE(read(fd, &c, 1), 0);  // closed on us
  close(fd);
  // The real rank 1's message on the same tag arrives, not the forged one.
  int32_t real = 42, got = 0;
  b[1]->send(0, 5, &real, sizeof real);
  b[0]->recv(1, 5, &got, sizeof got);
  EXPECT_EQ(got, 42);
}

TEST_F(CleanIdentity, WaitReportsNameTheMissingRanks) {
  // Rank 2 never comes: within the timeout, rank 0 says which ranks are
  // missing and rank 1 says what it waits for (WARN, NCCLZ_WAIT_REPORT).
  setenv("NCCLZ_WAIT_REPORT", "0.3", 1);
  const int n = 3;
  UniqueId id = Bootstrap::make_unique_id();
  ::testing::internal::CaptureStderr();
  std::vector<Outcome> out(n);
  run_threads(n, [&](int r) {
    if (r == 2) return;
    out[r] = attempt([&] { Bootstrap::create(id, r, n, 1.5); });
  });
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(err, "rank 0 has waited")) << err;
  EXPECT_TRUE(has(err, "missing ranks 2 (joined: 0, 1)")) << err;
  EXPECT_TRUE(has(err, "rank 1 joined rank 0")) << err;
  EXPECT_TRUE(has(err, "waited")) << err;
  // The reports come before the final error.
  EXPECT_EQ(out[0].kind, "Timeout");
  EXPECT_TRUE(has(out[0].what, "missing ranks: 2")) << out[0].what;
}

TEST_F(CleanIdentity, WaitReportsSayNothingAnswersAtMasterPort) {
  // A rank whose MASTER_PORT differs from rank 0's: it says so before the timeout.
  setenv("NCCLZ_WAIT_REPORT", "0.3", 1);
  const int port = free_port();
  ::testing::internal::CaptureStderr();
  Outcome o = attempt([&] { Bootstrap::create(port_cfg(1, 2, port, 1.2)); });
  std::string err = ::testing::internal::GetCapturedStderr();
  const std::string where = "MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(has(err, "rank 1 has waited")) << err;
  EXPECT_TRUE(has(err, where)) << err;
  EXPECT_TRUE(has(err, "Connection refused")) << err;
  EXPECT_TRUE(has(err, "MASTER_ADDR, MASTER_PORT, WORLD_SIZE (here 2) and NCCLZ_TOKEN")) << err;
  EXPECT_EQ(o.kind, "Timeout") << o.what;
  EXPECT_TRUE(has(o.what, "no rank 0 answered at " + where)) << o.what;
}

TEST(BootstrapJobIdentity, FromTheLauncherEnvironment) {
  const char* vars[] = {"NCCLZ_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                        "SLURM_JOB_ID", "SLURM_STEP_ID",       "PBS_JOBID",      "LSB_JOBID"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars) {
    if (const char* x = std::getenv(v)) saved.emplace_back(v, x);
    unsetenv(v);
  }
  EXPECT_EQ(bs::job_id_from_env(), "");
  setenv("TORCHELASTIC_RUN_ID", "none", 1);  // torchrun's default: not an id
  EXPECT_EQ(bs::job_id_from_env(), "");
  setenv("SLURM_JOB_ID", "77", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  EXPECT_EQ(bs::job_id_from_env(), "SLURM_JOB_ID=77/SLURM_STEP_ID=3");
  setenv("TORCHELASTIC_RUN_ID", "run-9", 1);
  EXPECT_EQ(bs::job_id_from_env(), "TORCHELASTIC_RUN_ID=run-9");
  setenv("NCCLZ_JOB_ID", std::string(300, 'x').c_str(), 1);
  std::string long_id = bs::job_id_from_env();
  EXPECT_EQ(long_id.rfind("NCCLZ_JOB_ID=sha256:", 0), 0u) << long_id;
  EXPECT_EQ(bs::job_tag("NCCLZ_JOB_ID=abc").size(), 8u);
  EXPECT_NE(bs::job_tag("NCCLZ_JOB_ID=abc"), bs::job_tag("NCCLZ_JOB_ID=abd"));
  for (const char* v : vars) unsetenv(v);
  for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}
