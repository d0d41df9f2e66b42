// The persistent kernels' host proxy (transport/persistent_proxy.hpp) without
// a GPU or the emulator: host threads play the kernels, writing and reading
// their FIFOs (ncclz::cuda::FifoLayout, in ordinary memory) exactly as
// cuda/persistent_ring.cu does, and the proxies carry the slices over
// in-process slot rings. Checked: every slice arrives once, in order, with
// its size and bytes, on every channel, over calls back to back, with
// transport slots larger than the FIFO's and fewer, and over the socket and
// shared-memory transports (ring_channels: the connections a communicator's
// transport makes); a connection that closes mid-stream makes every rank's
// abort word set and every proxy stop with an error; a transport slot
// smaller than the FIFO's is refused. The kernels themselves through the
// proxy: test_cuda_persistent.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/error.hpp"
#include "test_dying_send.hpp"
#include "test_threads.hpp"
#include "transport/persistent_proxy.hpp"

using namespace ncclz;
using ncclz::cuda::FifoLayout;
using transport::PersistentProxy;

namespace {

/// One rank's FIFOs (receive and outbox) and abort word, in host memory.
struct FakeRank {
  int channels, slots;
  size_t slot_bytes, chan_bytes;
  std::vector<uint64_t> inbox, outbox;  // 8-byte aligned; FifoLayout's offsets are multiples of 16
  int abort_word = 0;
  FakeRank(int ch, int k, size_t sb)
      : channels(ch),
        slots(k),
        slot_bytes(sb),
        chan_bytes(FifoLayout::channel_bytes(sb, k)),
        inbox(size_t(ch) * chan_bytes / 8 + 2, 0),
        outbox(size_t(ch) * chan_bytes / 8 + 2, 0) {}
  PersistentProxy::Fifos fifos() {
    PersistentProxy::Fifos f;
    f.inbox = reinterpret_cast<uint8_t*>(inbox.data());
    f.outbox = reinterpret_cast<uint8_t*>(outbox.data());
    f.channels = channels;
    f.slots = slots;
    f.slot_bytes = slot_bytes;
    f.abort_word = &abort_word;
    return f;
  }
};

uint64_t* word(std::vector<uint64_t>& fifo, size_t chan_bytes, int ch, size_t at, uint64_t k) {
  return reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(fifo.data()) + size_t(ch) * chan_bytes + at) + k;
}
uint8_t* slot(std::vector<uint64_t>& fifo, const FakeRank& r, int ch, uint64_t k) {
  return reinterpret_cast<uint8_t*>(fifo.data()) + size_t(ch) * r.chan_bytes + FifoLayout::kSlotsAt +
         k * FifoLayout::slot_stride(r.slot_bytes);
}

/// The bytes of slice s of rank r's stream on channel c: its length varies
/// from 0 to the whole slot.
std::vector<uint8_t> slice_bytes(int r, int c, uint64_t s, size_t slot_bytes) {
  std::vector<uint8_t> b((s * 37 + size_t(r) * 11 + size_t(c)) % (slot_bytes + 1));
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7 + s * 13 + size_t(r) * 29 + size_t(c) * 3);
  return b;
}

/// Waits as the kernel does (polling a flag, the abort word between polls):
/// false when the abort word is set or after 20 s.
bool kernel_wait(const uint64_t* flag, uint64_t want, const int* abort_word) {
  const auto t0 = std::chrono::steady_clock::now();
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < want) {
    if (__atomic_load_n(abort_word, __ATOMIC_ACQUIRE)) return false;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return false;
    std::this_thread::yield();
  }
  return true;
}

/// A kernel's channel: slices [from, to) of its stream, each step sending
/// slice s into the outbox, then receiving the previous rank's slice s from
/// the receive FIFO and checking it. "" or what went wrong.
std::string fake_kernel(FakeRank& me, int rank, int prev, int c, uint64_t from, uint64_t to) {
  const uint64_t K = uint64_t(me.slots);
  for (uint64_t s = from; s < to; ++s) {
    const uint64_t k = s % K;
    if (s >= K &&
        !kernel_wait(word(me.outbox, me.chan_bytes, c, FifoLayout::kReleasedAt, k), s + 1 - K, &me.abort_word))
      return "aborted sending slice " + std::to_string(s);
    const std::vector<uint8_t> b = slice_bytes(rank, c, s, me.slot_bytes);
    if (!b.empty()) std::memcpy(slot(me.outbox, me, c, k), b.data(), b.size());
    *word(me.outbox, me.chan_bytes, c, FifoLayout::kSizesAt, k) = b.size();
    __atomic_store_n(word(me.outbox, me.chan_bytes, c, FifoLayout::kPostedAt, k), s + 1, __ATOMIC_RELEASE);
    if (!kernel_wait(word(me.inbox, me.chan_bytes, c, FifoLayout::kPostedAt, k), s + 1, &me.abort_word))
      return "aborted receiving slice " + std::to_string(s);
    const std::vector<uint8_t> want = slice_bytes(prev, c, s, me.slot_bytes);
    const uint64_t n = *word(me.inbox, me.chan_bytes, c, FifoLayout::kSizesAt, k);
    if (n != want.size() || (n && std::memcmp(slot(me.inbox, me, c, k), want.data(), n) != 0))
      return "slice " + std::to_string(s) + " of channel " + std::to_string(c) + " differs (" + std::to_string(n) +
             " bytes, want " + std::to_string(want.size()) + ")";
    __atomic_store_n(word(me.inbox, me.chan_bytes, c, FifoLayout::kReleasedAt, k), s + 1, __ATOMIC_RELEASE);
  }
  return "";
}

struct Ring {
  int N, channels;
  std::vector<std::unique_ptr<FakeRank>> ranks;
  std::vector<std::unique_ptr<PersistentProxy>> proxies;
  Ring(int n, int ch, int k, size_t sb, int tslots, size_t tslot)
      : Ring(n, ch, k, sb, transport::local_ring_channels(n, ch, tslots, tslot)) {}
  Ring(int n, int ch, int k, size_t sb, std::vector<std::vector<transport::ProxyChannel>> links) : N(n), channels(ch) {
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<FakeRank>(ch, k, sb));
      PersistentProxy::Options o;
      o.rank = r;
      o.timeout = std::chrono::seconds(20);
      proxies.push_back(std::make_unique<PersistentProxy>(ranks.back()->fifos(), o));
    }
    for (int r = 0; r < n; ++r) proxies[size_t(r)]->start(std::move(links[size_t(r)]));
  }
  /// Every rank's and channel's kernel over slices [from, to): their errors.
  std::vector<std::string> run(uint64_t from, uint64_t to) {
    std::vector<std::string> err(size_t(N * channels));
    std::vector<std::thread> ts;
    for (int r = 0; r < N; ++r) {
      for (int c = 0; c < channels; ++c) {
        ts.emplace_back([&, r, c] {
          err[size_t(r * channels + c)] = fake_kernel(*ranks[size_t(r)], r, (r + N - 1) % N, c, from, to);
        });
      }
    }
    for (auto& t : ts) t.join();
    return err;
  }
  ~Ring() {
    for (auto& p : proxies) p->request_stop();
    for (auto& p : proxies) p->stop();
  }
};

TEST(PersistentProxy, CarriesEverySliceInOrder) {
  struct Shape {
    int N, channels, K;
    size_t slot;
    int tslots;
    size_t tslot;
  };
  for (const Shape& sh : {Shape{2, 1, 4, 256, 3, 256}, Shape{3, 2, 2, 100, 2, 4096}, Shape{4, 2, 8, 64, 1, 64}}) {
    SCOPED_TRACE(std::to_string(sh.N) + " ranks, " + std::to_string(sh.channels) + " channels, K " +
                 std::to_string(sh.K) + ", transport " + std::to_string(sh.tslots) + " x " + std::to_string(sh.tslot));
    Ring ring(sh.N, sh.channels, sh.K, sh.slot, sh.tslots, sh.tslot);
    for (uint64_t call = 0; call < 3; ++call) {  // calls back to back: the streams go on
      const auto err = ring.run(call * 150, (call + 1) * 150);
      for (const std::string& e : err) ASSERT_EQ(e, "") << "call " << call;
    }
    for (int r = 0; r < sh.N; ++r) {
      EXPECT_EQ(ring.proxies[size_t(r)]->error(), "");
      EXPECT_FALSE(ring.proxies[size_t(r)]->halted());
      EXPECT_EQ(ring.ranks[size_t(r)]->abort_word, 0);
      for (int c = 0; c < sh.channels; ++c) {  // the counters move just after the flags the kernels saw
        const PersistentProxy& p = *ring.proxies[size_t(r)];
        const auto t0 = std::chrono::steady_clock::now();
        while ((p.sent(c) < 450 || p.received(c) < 450) &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
          std::this_thread::yield();
        EXPECT_EQ(p.sent(c), 450u);
        EXPECT_EQ(p.received(c), 450u);
      }
    }
  }
}

// The same over the transports that connect ranks without shared memory
// (sockets, with their proxy thread and checksums) and processes on one host
// (shared memory), as a communicator's transport makes them (ring_channels,
// every rank's bootstrap and transport: ranks as threads here).
TEST(PersistentProxy, CarriesSlicesOverSocketAndShmTransports) {
  for (const char* kind : {"socket", "shm"}) {
    for (int N : {2, 3}) {
      SCOPED_TRACE(std::string(kind) + ", " + std::to_string(N) + " ranks");
      const int C = 2, K = 4;
      const size_t slot = 512;
      const UniqueId id = Bootstrap::make_unique_id();
      std::vector<std::unique_ptr<Bootstrap>> boots(static_cast<size_t>(N));
      std::vector<std::unique_ptr<transport::Transport>> ts(static_cast<size_t>(N));
      std::vector<std::vector<transport::ProxyChannel>> links(static_cast<size_t>(N));
      ncclz_test::run_threads(N, [&](int r) {
        boots[size_t(r)] = Bootstrap::create(id, r, N, 10.0);
        transport::TransportConfig cfg;
        cfg.transport = kind;
        cfg.nslots = 3;
        ts[size_t(r)] = transport::create_transport(*boots[size_t(r)], cfg, nullptr);
        links[size_t(r)] =
            transport::ring_channels(*ts[size_t(r)], r, N, C, transport::Clock::now() + std::chrono::seconds(10), slot);
      });
      {
        Ring ring(N, C, K, slot, std::move(links));
        for (uint64_t call = 0; call < 2; ++call) {
          const auto err = ring.run(call * 200, (call + 1) * 200);
          for (const std::string& e : err) ASSERT_EQ(e, "") << "call " << call;
        }
        for (int r = 0; r < N; ++r) EXPECT_EQ(ring.proxies[size_t(r)]->error(), "");
      }  // the proxies stopped (request_stop on all first) before the transports go
      ncclz_test::run_threads(N, [&](int r) { ts[size_t(r)].reset(); });
    }
  }
}

using ncclz_test::DyingSend;

// Rank 2's connection to rank 3 (channel 1) dies after 5 slices: every
// rank's abort word is set (its own proxy's doing, after the closed
// connections reached it), every kernel stops, every proxy reports.
TEST(PersistentProxy, ClosedConnectionAbortsEveryRank) {
  const int N = 4, C = 2, K = 4;
  auto links = transport::local_ring_channels(N, C, 2, 128);
  links[2][1].send = std::make_unique<DyingSend>(std::move(links[2][1].send), 5);
  std::vector<std::unique_ptr<FakeRank>> ranks;
  std::vector<std::unique_ptr<PersistentProxy>> proxies;
  for (int r = 0; r < N; ++r) {
    ranks.push_back(std::make_unique<FakeRank>(C, K, 128));
    PersistentProxy::Options o;
    o.rank = r;
    proxies.push_back(std::make_unique<PersistentProxy>(ranks.back()->fifos(), o));
  }
  for (int r = 0; r < N; ++r) proxies[size_t(r)]->start(std::move(links[size_t(r)]));
  std::vector<std::string> err(size_t(N * C));
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c)
      ts.emplace_back(
          [&, r, c] { err[size_t(r * C + c)] = fake_kernel(*ranks[size_t(r)], r, (r + N - 1) % N, c, 0, 1000); });
  for (auto& t : ts) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));  // the kernels' own limit is 20 s
  for (int r = 0; r < N; ++r) {
    EXPECT_NE(__atomic_load_n(&ranks[size_t(r)]->abort_word, __ATOMIC_ACQUIRE), 0) << "rank " << r;
    for (int c = 0; c < C; ++c)
      EXPECT_NE(err[size_t(r * C + c)].find("aborted"), std::string::npos) << err[size_t(r * C + c)];
    const std::string e = proxies[size_t(r)]->stop();
    EXPECT_NE(e, "") << "rank " << r;
    EXPECT_TRUE(proxies[size_t(r)]->halted());
    if (r == 2) {
      EXPECT_NE(e.find("test: the connection closed"), std::string::npos) << e;
    }
  }
}

TEST(PersistentProxy, RefusesWhatCannotWork) {
  FakeRank rank(1, 4, 256);
  PersistentProxy proxy(rank.fifos(), {});
  auto small = transport::local_ring_channels(2, 1, 2, 255);
  try {
    proxy.start(std::move(small[0]));
    ADD_FAILURE() << "transport slots of 255 bytes for a FIFO slot of 256 were taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("slots hold 255 bytes, the FIFO's 256"), std::string::npos) << e.what();
  }
  std::vector<transport::ProxyChannel> none(1);
  EXPECT_THROW(proxy.start(std::move(none)), InvalidArgument);  // no connections
  EXPECT_EQ(proxy.stop(), "");
  PersistentProxy::Fifos f = rank.fifos();
  f.slots = 1;
  EXPECT_THROW({ PersistentProxy p(f, {}); }, InvalidArgument);
  f = rank.fifos();
  f.abort_word = nullptr;
  EXPECT_THROW({ PersistentProxy p(f, {}); }, InvalidArgument);
}

}  // namespace
