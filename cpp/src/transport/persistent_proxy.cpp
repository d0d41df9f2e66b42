// The host proxy of a persistent ring kernel (persistent_proxy.hpp says what
// each thread does, in which order, and how it fails).
#include "transport/persistent_proxy.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "ncclz/cuda_persistent.hpp"
#include "ncclz/error.hpp"
#include "transport/slot_ring.hpp"

namespace ncclz::transport {
namespace {

using cuda::FifoLayout;

// The FIFO words the kernel reads or writes: atomic accesses (the kernel's
// are volatile, with system-scope fences).
uint64_t load_acquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void store_release(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
void store_relaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

inline void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One channel's FIFO (FifoLayout) at its host address.
struct FifoView {
  uint64_t* posted;
  uint64_t* released;
  uint64_t* sizes;
  uint8_t* slots;
  explicit FifoView(uint8_t* base)
      : posted(reinterpret_cast<uint64_t*>(base + FifoLayout::kPostedAt)),
        released(reinterpret_cast<uint64_t*>(base + FifoLayout::kReleasedAt)),
        sizes(reinterpret_cast<uint64_t*>(base + FifoLayout::kSizesAt)),
        slots(base + FifoLayout::kSlotsAt) {}
};

// Closes a connection end on the way out: with a note where it is a ring
// end (the peer fails with Aborted naming it), then destroys it.
template <class Conn>
void close_conn(std::unique_ptr<Conn>& conn, bool aborted, const std::string& note) {
  if (!conn) return;
  if (aborted) {
    if (auto* end = dynamic_cast<RingEnd*>(conn.get())) end->close(kClosedAborted, note);
  }
  conn.reset();
}

}  // namespace

PersistentProxy::PersistentProxy(const Fifos& fifos, const Options& o) : f_(fifos), o_(o) {
  if (!f_.inbox || !f_.outbox || !f_.abort_word || f_.channels < 1 || f_.slots < 2 ||
      f_.slots > FifoLayout::kMaxSlots || f_.slot_bytes == 0) {
    throw InvalidArgument("persistent proxy of rank " + std::to_string(o_.rank) +
                          ": needs the host addresses of the receive FIFO, the outbox and the abort word (a "
                          "PersistentRing made with fifo_in_host_memory), 1+ channels and 2.." +
                          std::to_string(FifoLayout::kMaxSlots) + " slots");
  }
  chan_bytes_ = FifoLayout::channel_bytes(f_.slot_bytes, f_.slots);
  stride_ = FifoLayout::slot_stride(f_.slot_bytes);
  counters_ = std::make_unique<Counters[]>(size_t(f_.channels));
}

PersistentProxy::~PersistentProxy() { stop(); }

void PersistentProxy::start(std::vector<ProxyChannel> channels) {
  const std::string who = "persistent proxy of rank " + std::to_string(o_.rank);
  if (!threads_.empty()) throw InvalidArgument(who + ": start() while running; stop() it first");
  if (channels.size() != size_t(f_.channels)) {
    throw InvalidArgument(who + ": " + std::to_string(channels.size()) + " channel connections for a ring of " +
                          std::to_string(f_.channels) + " channels");
  }
  for (size_t c = 0; c < channels.size(); ++c) {
    const ProxyChannel& ch = channels[c];
    if (!ch.send || !ch.recv) throw InvalidArgument(who + ": channel " + std::to_string(c) + " lacks a connection");
    const size_t got = std::min(ch.send->slot_bytes(), ch.recv->slot_bytes());
    if (got < f_.slot_bytes) {
      throw InvalidArgument(
          who + ", channel " + std::to_string(c) + ": the transport's slots hold " + std::to_string(got) +
          " bytes, the FIFO's " + std::to_string(f_.slot_bytes) +
          " (a slice must fit one transport slot): connect with slot_bytes >= " + std::to_string(f_.slot_bytes));
    }
  }
  stop_.store(false);
  halted_.store(false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    error_.clear();
  }
  for (int c = 0; c < f_.channels; ++c) {
    counters_[size_t(c)].sent.store(0);
    counters_[size_t(c)].received.store(0);
    counters_[size_t(c)].bytes.store(0);
    counters_[size_t(c)].flushed.store(0);
    counters_[size_t(c)].expect_recv.store(~uint64_t(0));
    counters_[size_t(c)].expect_sent.store(~uint64_t(0));
  }
  peer_gone_.store(false);
  for (int c = 0; c < f_.channels; ++c) {
    ProxyChannel& ch = channels[size_t(c)];
    threads_.emplace_back([this, c, conn = std::move(ch.send)]() mutable { send_loop(c, std::move(conn)); });
    threads_.emplace_back([this, c, conn = std::move(ch.recv)]() mutable { recv_loop(c, std::move(conn)); });
  }
}

void PersistentProxy::request_stop() { stop_.store(true, std::memory_order_release); }

std::string PersistentProxy::stop() {
  request_stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  return error();
}

std::string PersistentProxy::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

bool PersistentProxy::should_end() const {
  return stop_.load(std::memory_order_acquire) || __atomic_load_n(f_.abort_word, __ATOMIC_ACQUIRE) != 0;
}

void PersistentProxy::fail(const std::string& msg) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_.empty()) error_ = msg;
  }
  __atomic_store_n(f_.abort_word, 1, __ATOMIC_SEQ_CST);  // the kernel's waits end (RingError::Aborted)
  halted_.store(true, std::memory_order_release);
}

bool PersistentProxy::wait_flag(const uint64_t* flag, uint64_t want, bool holding, const char* what, uint64_t slot) {
  for (int i = 0; i < 64; ++i) {  // the kernel is usually a step ahead or behind: a short spin
    if (load_acquire(flag) >= want) return true;
    pause_cpu();
  }
  const auto t0 = Clock::now();
  const auto yield_until = t0 + std::chrono::microseconds(kYieldUs);
  int sleep_us = 1;
  for (;;) {
    if (load_acquire(flag) >= want) return true;
    if (should_end()) return false;
    const auto now = Clock::now();
    if (holding && now - t0 > o_.timeout) {
      throw Timeout("timed out: no progress for " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count()) +
                    " ms while waiting for " + what + " " + std::to_string(slot));
    }
    if (now < yield_until) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(2 * sleep_us, int(kMaxSleepUs));
    }
  }
}

std::string PersistentProxy::wait_flushed(int c, uint64_t slices, std::chrono::nanoseconds timeout) {
  const auto t0 = Clock::now();
  int sleep_us = 1;
  for (;;) {
    if (flushed(c) >= slices) return "";
    if (halted()) {
      const std::string e = error();
      return e.empty() ? "persistent proxy of rank " + std::to_string(o_.rank) + " stopped (the abort word was set)"
                       : e;
    }
    if (stop_.load(std::memory_order_acquire))
      return "persistent proxy of rank " + std::to_string(o_.rank) + " stopped";
    if (Clock::now() - t0 > timeout) {
      return "persistent proxy of rank " + std::to_string(o_.rank) + ", channel " + std::to_string(c) +
             ": timed out waiting for slice " + std::to_string(slices) + " to leave (" + std::to_string(flushed(c)) +
             " have)";
    }
    if (Clock::now() - t0 < std::chrono::microseconds(kYieldUs)) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(2 * sleep_us, int(kMaxSleepUs));
    }
  }
}

bool PersistentProxy::failed_at(const std::string& where, uint64_t slice, const char* what) {
  // After request_stop() a peer's close is the expected end; after the abort
  // word was set (by the kernel, or the other thread) an error is its echo.
  if (should_end()) return false;
  fail(where + ", slice " + std::to_string(slice) + " of the channel's stream: " + what);
  return true;
}

bool PersistentProxy::stopping(bool failed) {
  const bool aborted = failed || __atomic_load_n(f_.abort_word, __ATOMIC_ACQUIRE) != 0;
  if (aborted) halted_.store(true, std::memory_order_release);
  return aborted;
}

std::string PersistentProxy::stop_note(bool failed) const {
  return "rank " + std::to_string(o_.rank) + "'s persistent ring stopped (" +
         (failed ? error() : std::string("its kernel or proxy failed, or the call was aborted")) + ")";
}

void PersistentProxy::send_loop(int c, std::unique_ptr<SendConn> conn) {
  const FifoView out(f_.outbox + size_t(c) * chan_bytes_);
  const uint64_t K = uint64_t(f_.slots);
  const std::string where = "persistent proxy of rank " + std::to_string(o_.rank) + ", channel " + std::to_string(c) +
                            ", sending to rank " + std::to_string(conn->peer());
  uint64_t i = 0;
  bool failed = false;
  try {
    for (;; ++i) {
      const uint64_t k = i % K;
      // Idle until the kernel posts slice i (no deadline: between calls).
      if (!wait_flag(&out.posted[k], i + 1, false, "", k)) break;
      const uint64_t n = __atomic_load_n(&out.sizes[k], __ATOMIC_RELAXED);  // ordered by the acquire of posted
      if (n > f_.slot_bytes) {
        throw CorruptData("the kernel posted " + std::to_string(n) + " bytes in a FIFO slot of " +
                          std::to_string(f_.slot_bytes));
      }
      // Holding slice i: a transport slot, in slices of kSliceMs (stop, abort) up to the timeout.
      const auto t0 = Clock::now();
      uint8_t* dst = nullptr;
      while (dst == nullptr) {
        if (should_end()) break;
        const auto now = Clock::now();
        const auto limit = t0 + o_.timeout;
        try {
          dst = conn->acquire(std::min(limit, now + std::chrono::milliseconds(kSliceMs)));
        } catch (const Timeout&) {
          if (Clock::now() >= limit) throw;
        }
      }
      if (dst == nullptr) break;
      std::memcpy(dst, out.slots + k * stride_, size_t(n));
      conn->post(size_t(n));
      store_release(&out.released[k], i + 1);  // the kernel may refill the outbox slot
      counters_[size_t(c)].bytes.fetch_add(n, std::memory_order_relaxed);
      counters_[size_t(c)].sent.store(i + 1, std::memory_order_release);
      // A call's last slice (expect()): the call's slices leave this process
      // (a socket's own thread may still hold them), so that a rank whose
      // call is done may exit (wait_flushed).
      if (i + 1 == counters_[size_t(c)].expect_sent.load()) {
        conn->flush(Clock::now() + o_.timeout);
        counters_[size_t(c)].flushed.store(i + 1, std::memory_order_release);
      }
    }
  } catch (const std::exception& e) {
    failed = failed_at(where, i, e.what());
  }
  const bool aborted = stopping(failed);
  close_conn(conn, aborted, stop_note(failed));
}

void PersistentProxy::recv_loop(int c, std::unique_ptr<RecvConn> conn) {
  const FifoView in(f_.inbox + size_t(c) * chan_bytes_);
  const uint64_t K = uint64_t(f_.slots);
  const std::string where = "persistent proxy of rank " + std::to_string(o_.rank) + ", channel " + std::to_string(c) +
                            ", receiving from rank " + std::to_string(conn->peer());
  uint64_t j = 0;
  bool failed = false;
  try {
    for (;; ++j) {
      const uint64_t k = j % K;
      // Idle until the peer sends slice j, in slices of kSliceMs (stop, abort).
      SlotView v;
      bool got = false;
      while (!got) {
        if (should_end()) break;
        try {
          v = conn->wait(Clock::now() + std::chrono::milliseconds(kSliceMs));
          got = true;
        } catch (const Timeout&) {
        } catch (const Aborted&) {
          throw;  // a close with a note: always a failure
        } catch (const RemoteError&) {
          // The peer's end closed without a note. Where every slice expected
          // so far arrived, the peer is done (its communicator closed): this
          // thread ends without setting the abort word (the kernel of a call
          // still finishing here needs nothing more from it), and the next
          // call fails on peer_gone(). Expected or not is decided against
          // expect()'s counts (set before peer_gone() is read: seq_cst both).
          peer_gone_.store(true);
          if (j < counters_[size_t(c)].expect_recv.load()) throw;
          break;
        }
      }
      if (!got) break;
      if (v.bytes > f_.slot_bytes) {
        throw CorruptData("the peer sent " + std::to_string(v.bytes) + " bytes for a FIFO slot of " +
                          std::to_string(f_.slot_bytes) + " (do both rings have the same slot size?)");
      }
      // Holding it: until the kernel is done with slice j - K.
      if (j >= K && !wait_flag(&in.released[k], j + 1 - K, true, "the kernel to release the FIFO's slot", k)) break;
      std::memcpy(in.slots + k * stride_, v.data, v.bytes);
      store_relaxed(&in.sizes[k], uint64_t(v.bytes));
      store_release(&in.posted[k], j + 1);  // the bytes and the size before the flag
      conn->release();
      counters_[size_t(c)].received.store(j + 1, std::memory_order_release);
    }
  } catch (const std::exception& e) {
    failed = failed_at(where, j, e.what());
  }
  const bool aborted = stopping(failed);
  close_conn(conn, aborted, stop_note(failed));
}

std::vector<ProxyChannel> ring_channels(Transport& t, int rank, int nranks, int channels, Clock::time_point deadline,
                                        size_t slot_bytes) {
  if (nranks < 2 || rank < 0 || rank >= nranks) {
    throw InvalidArgument("persistent proxy connections of rank " + std::to_string(rank) + " in a ring of " +
                          std::to_string(nranks) + ": a ring to connect needs 2+ ranks");
  }
  const int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
  std::vector<int> peers{next};
  if (prev != next) peers.push_back(prev);
  auto links = t.connect(peers, channels, deadline, slot_bytes);
  std::vector<ProxyChannel> out(static_cast<size_t>(channels));
  for (int c = 0; c < channels; ++c) {
    std::vector<PeerLink>& l = links[size_t(c)];
    out[size_t(c)].send = std::move(l[0].send);
    out[size_t(c)].recv = std::move(l[prev == next ? 0 : 1].recv);
  }
  return out;
}

std::vector<std::vector<ProxyChannel>> local_ring_channels(int nranks, int channels, int slots, size_t slot_bytes) {
  std::vector<std::vector<ProxyChannel>> out(static_cast<size_t>(nranks));
  std::vector<std::shared_ptr<AbortFlag>> flags;
  for (int r = 0; r < nranks; ++r) {
    out[size_t(r)].resize(size_t(channels));
    flags.push_back(std::make_shared<AbortFlag>());
  }
  for (int r = 0; r < nranks; ++r) {
    const int next = (r + 1) % nranks;
    for (int c = 0; c < channels; ++c) {
      auto mem = make_heap_ring(slots, slot_bytes);
      out[size_t(r)][size_t(c)].send =
          std::make_unique<RingSendConn>(mem, mem.get(), ConnLabel{"inproc", r, next, c}, flags[size_t(r)], nullptr);
      out[size_t(next)][size_t(c)].recv =
          std::make_unique<RingRecvConn>(mem, mem.get(), ConnLabel{"inproc", next, r, c}, flags[size_t(next)], nullptr);
    }
  }
  return out;
}

}  // namespace ncclz::transport
