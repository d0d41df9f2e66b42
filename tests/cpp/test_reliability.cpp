// Reliability of the runtime under misuse and faults, ranks as threads over the
// in-process transport: abort() reaches peers blocked in a call, a thread's
// interrupt check stops its blocked call, two threads calling one
// communicator at once is an error on every rank, and a wait times out only
// when nothing moves. (Processes, shared memory and sockets, signals and slow
// links: tests/python/test_faults.py.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"

namespace {

using namespace ncclz;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Comms {
  std::vector<std::unique_ptr<Communicator>> c;

  explicit Comms(int n, double timeout_s, int nchannels = 1) {
    const UniqueId id = Bootstrap::make_unique_id("127.0.0.1", 0);
    c.resize(static_cast<size_t>(n));
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        CommConfig cfg;
        cfg.transport = "inproc";
        cfg.nchannels = nchannels;
        cfg.slot_bytes = 4096;
        cfg.timeout_s = timeout_s;
        c[size_t(r)] = Communicator::create(id, r, n, cfg);
      });
    }
    for (auto& t : th) t.join();
  }
  Communicator& operator[](int r) { return *c[size_t(r)]; }
};

// What one rank's call did.
struct Outcome {
  std::string kind = "returned";
  std::string what;
  double at_s = -1;  // seconds since the test's t0 when it ended
};

template <class F>
Outcome outcome(F&& f, Clock::time_point t0) {
  Outcome o;
  try {
    f();
  } catch (const Interrupted& e) {
    o.kind = "Interrupted";
    o.what = e.what();
  } catch (const Aborted& e) {
    o.kind = "Aborted";
    o.what = e.what();
  } catch (const Timeout& e) {
    o.kind = "Timeout";
    o.what = e.what();
  } catch (const InvalidArgument& e) {
    o.kind = "InvalidArgument";
    o.what = e.what();
  } catch (const Error& e) {
    o.kind = "Error";
    o.what = e.what();
  }
  o.at_s = since(t0);
  return o;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Ranks 1..3 block in an all_reduce that rank 0 never joins; rank 0 aborts.
// Every peer fails with Aborted naming rank 0 and its reason long before the
// 120 s timeout (rank 3 hears of it through rank 2, rank 2 through rank 1:
// the note is passed on), and every later call fails too.
TEST(ReliabilityAbort, ReachesEveryPeerBlockedInACall) {
  const int N = 4;
  Comms w(N, 120);
  std::vector<Outcome> out(static_cast<size_t>(N));
  const auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (int r = 1; r < N; ++r) {
    th.emplace_back([&, r] {
      std::vector<float> a(100000, 1.f), b(a.size());
      out[size_t(r)] = outcome(
          [&] { w[r].all_reduce(a.data(), b.data(), a.size(), DataType::F32, RedOp::Sum, Compression::none()); }, t0);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double abort_at = since(t0);
  w[0].abort("the test stops the job");
  for (auto& t : th) t.join();
  for (int r = 1; r < N; ++r) {
    const Outcome& o = out[size_t(r)];
    EXPECT_EQ(o.kind, "Aborted") << r << ": " << o.what;
    EXPECT_TRUE(has(o.what, "rank 0 aborted the communicator: the test stops the job")) << o.what;
    EXPECT_LT(o.at_s - abort_at, 20.0) << r;  // prompt, not the 120 s timeout
  }
  for (int r = 0; r < N; ++r) EXPECT_THROW(w[r].barrier(), Aborted) << r;
}

// A rank that is not in a call when a peer aborts fails its next call with
// the peer's note.
TEST(ReliabilityAbort, ReachesAnIdlePeerAtItsNextCall) {
  Comms w(2, 120);
  w.c[1]->abort("rank 1 gives up");
  std::vector<float> a(1000, 1.f), b(a.size());
  try {
    w[0].all_reduce(a.data(), b.data(), a.size(), DataType::F32, RedOp::Sum, Compression::none());
    FAIL() << "returned";
  } catch (const Aborted& e) {
    EXPECT_TRUE(has(e.what(), "rank 1 aborted the communicator: rank 1 gives up")) << e.what();
  }
}

// The interrupt check of the calling thread stops its blocked call: the call
// throws Interrupted, the communicator is aborted, and the peer (also blocked)
// fails with Aborted naming the interrupted rank. With several channels the
// caller may wait for its sibling channels rather than a slot: covered too.
TEST(ReliabilityInterrupt, StopsABlockedCallAndAbortsThePeers) {
  for (int nch : {1, 4}) {
    const int N = 3;
    Comms w(N, 120, nch);
    static std::atomic<bool> stop;
    stop = false;
    std::atomic<int> polls{0};
    struct Ctx {
      std::atomic<int>* polls;
    } ctx{&polls};
    std::vector<Outcome> out(static_cast<size_t>(N));
    const auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int r = 1; r < N; ++r) {
      th.emplace_back([&, r] {
        if (r == 1) {
          set_interrupt_check(
              [](void* p) -> const char* {
                static_cast<Ctx*>(p)->polls->fetch_add(1);
                return stop.load() ? "test interrupt" : nullptr;
              },
              &ctx);
        }
        std::vector<float> a(1 << 20, 1.f), b(a.size());  // 4 MiB: every channel has work
        out[size_t(r)] = outcome(
            [&] { w[r].all_reduce(a.data(), b.data(), a.size(), DataType::F32, RedOp::Sum, Compression::none()); }, t0);
        set_interrupt_check(nullptr, nullptr);
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double stop_at = since(t0);
    stop = true;
    for (auto& t : th) t.join();
    EXPECT_GT(polls.load(), 0) << nch;
    EXPECT_EQ(out[1].kind, "Interrupted") << nch << ": " << out[1].what;
    EXPECT_TRUE(has(out[1].what, "test interrupt")) << out[1].what;
    EXPECT_LT(out[1].at_s - stop_at, 10.0);
    EXPECT_EQ(out[2].kind, "Aborted") << out[2].what;
    EXPECT_TRUE(has(out[2].what, "rank 1 aborted the communicator")) << out[2].what;
    EXPECT_THROW(w[1].barrier(), Aborted);
    // rank 0 was idle: its next call (the one the others made) waits for a
    // slot rank 1 never posted and fails with the note
    std::vector<float> a(1 << 20, 1.f), b(a.size());
    const Outcome o0 = outcome(
        [&] { w[0].all_reduce(a.data(), b.data(), a.size(), DataType::F32, RedOp::Sum, Compression::none()); }, t0);
    EXPECT_EQ(o0.kind, "Aborted") << o0.what;
    EXPECT_TRUE(has(o0.what, "rank 1 aborted the communicator")) << o0.what;
  }
}

// Two threads of rank 0 call at once: the second call is refused with an
// error naming both calls, the communicator is aborted, and the other ranks
// fail with Aborted naming the misuse instead of pairing the calls up.
TEST(ReliabilityThreads, ConcurrentCallsAreAnErrorOnEveryRank) {
  Comms w(2, 120);
  const auto t0 = Clock::now();
  Outcome first, second, peer;
  std::thread a([&] {
    std::vector<float> x(100, 1.f), y(x.size());
    first = outcome(
        [&] { w[0].all_reduce(x.data(), y.data(), x.size(), DataType::F32, RedOp::Sum, Compression::none()); }, t0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // thread a is blocked: rank 1 is not in a call
  std::thread b([&] {
    std::vector<double> x(7, 1.0);
    second = outcome([&] { w[0].broadcast(x.data(), x.size(), DataType::F64, 0, Compression::none()); }, t0);
  });
  b.join();
  a.join();
  // Which thread got the lock first depends on scheduling only if the sleep
  // was too short; either way one call is refused naming both.
  const Outcome& refused = first.kind == "InvalidArgument" ? first : second;
  const Outcome& other = first.kind == "InvalidArgument" ? second : first;
  EXPECT_EQ(refused.kind, "InvalidArgument") << first.what << " / " << second.what;
  EXPECT_TRUE(has(refused.what, "two threads called the communicator at once")) << refused.what;
  EXPECT_TRUE(has(refused.what, "all_reduce(count=100, float32)")) << refused.what;
  EXPECT_TRUE(has(refused.what, "broadcast(count=7, float64)")) << refused.what;
  EXPECT_EQ(other.kind, "Aborted") << other.what;
  std::vector<float> x(100, 1.f), y(x.size());
  peer = outcome([&] { w[1].all_reduce(x.data(), y.data(), x.size(), DataType::F32, RedOp::Sum, Compression::none()); },
                 t0);
  EXPECT_EQ(peer.kind, "Aborted") << peer.what;
  EXPECT_TRUE(has(peer.what, "rank 0 aborted the communicator: two threads called")) << peer.what;
}

// The supported pattern: several threads, one call at a time in an order the
// program fixes the same way on every rank (here: turns passed by a counter).
// Every result is exact.
TEST(ReliabilityThreads, ThreadsTakingTurnsInAFixedOrderAreFine) {
  const int N = 2, T = 3, rounds = 20;
  Comms w(N, 60);
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int r = 0; r < N; ++r) {
    auto turn = std::make_shared<std::atomic<int>>(0);
    for (int t = 0; t < T; ++t) {
      th.emplace_back([&, r, t, turn] {
        for (int k = 0; k < rounds; ++k) {
          while (turn->load() != k * T + t) std::this_thread::yield();
          const size_t n = 50 + size_t(t);  // the same shapes would hide a mix-up: the values tell
          std::vector<float> x(n, float(1000 * t + k + r)), y(n);
          w[r].all_reduce(x.data(), y.data(), n, DataType::F32, RedOp::Sum, Compression::none());
          const float want = float(2 * (1000 * t + k) + 1);
          for (float v : y) bad += v != want;
          turn->store(k * T + t + 1);
        }
      });
    }
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// A peer that never joins: the wait times out after the timeout without
// progress, and the message says what was awaited, from whom, and for how
// long nothing moved. (A call much longer than the timeout that keeps moving:
// TransportKinds.FlushCountsProgress and tests/python/test_faults.py.)
TEST(ReliabilityTimeout, AStuckPeerTimesOutNamingItAndTheIdleTime) {
  Comms w(2, 0.5);
  std::vector<float> x(1000, 1.f), y(x.size());
  const auto t0 = Clock::now();
  const Outcome o = outcome(
      [&] { w[1].all_reduce(x.data(), y.data(), x.size(), DataType::F32, RedOp::Sum, Compression::none()); }, t0);
  EXPECT_EQ(o.kind, "Timeout") << o.what;
  EXPECT_TRUE(has(o.what, "no progress for")) << o.what;
  EXPECT_TRUE(has(o.what, "the limit is 0.5 s")) << o.what;
  EXPECT_TRUE(has(o.what, "peer rank 0")) << o.what;
  EXPECT_LT(o.at_s, 30.0);
  EXPECT_THROW(w[1].barrier(), Aborted);
}

}  // namespace
