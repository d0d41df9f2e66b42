// The host proxy of a persistent ring kernel whose FIFOs are in page-locked
// host memory (ncclz/cuda_persistent.hpp, Options::fifo_in_host_memory): it
// carries each of the kernel's slices over an ncclz transport connection to
// the next rank, and each slice of the previous rank into the kernel's
// receive FIFO, for ranks that share no memory (other hosts; any transport).
//
// Per channel, two threads:
//   sender    slice i of the channel's outgoing stream: waits until the
//             outbox's posted[i % K] >= i + 1 (the kernel put it there), takes
//             its size, acquires a transport slot, copies the slice into it,
//             posts it, then stores released[i % K] = i + 1 (the kernel may
//             reuse the outbox slot); after a call's last slice (expect())
//             it flushes the connection (the call's slices leave this
//             process: flushed(), wait_flushed());
//   receiver  slice j of the incoming stream: waits for the transport's next
//             slot, then until the receive FIFO's released[j % K] >= j + 1 - K
//             (the kernel is done with slice j - K; nothing to wait for while
//             j < K), copies the slot into FIFO slot j % K, stores sizes[j %
//             K], then posted[j % K] = j + 1 (release: the bytes and the size
//             before the flag), and releases the transport slot.
// The flags are FifoLayout's, written exactly as a peer kernel would write
// them, so the kernel cannot tell a proxy from a device peer; the transport
// carries the slices in stream order, one slot each (its slots at least the
// FIFO's: start() checks). The kernel's side uses system-scope fences
// (cuda/persistent_ring.cu, "Host FIFOs"); here an acquire load of a flag
// before reading what it announces, a release store after writing it.
//
// Waits. Every wait returns, within kSliceMs, when the proxy is stopped or the
// group's abort word is set. A wait that holds a slice (the sender with an
// outbox slice and no transport slot, the receiver with a transport slot and
// no free FIFO slot) fails after Options::timeout without progress; an idle
// wait (no slice from the kernel or the transport yet: between calls, or a
// slow peer) has no deadline of its own: a waiting kernel's timeout sets the
// abort word, which ends it. Polling the FIFO flags: a short pause spin, then
// yielding the CPU for kYieldUs, then sleeps growing to kMaxSleepUs.
//
// Failure. A thread that fails (a transport error: the peer closed, Timeout,
// Aborted; a slice larger than the FIFO slot) records the error, sets the
// abort word (the kernel's waits end with RingError::Aborted) and exits; a
// thread that sees the abort word set (its kernel failed, or the other
// thread) exits too, and an error it meets after the word was set is not
// recorded (an echo of the first). An exiting thread closes its connection,
// with a note (CloseWhy::kClosedAborted) where it is a ring end: the next
// rank's receiving thread, always waiting on it, fails at once (the previous
// rank's sender when it next needs a slot) and sets that rank's abort word,
// so the abort travels down the ring to every rank, whatever its abort word
// (one per host). Afterwards the connections hold the failed call's slices:
// stop() every proxy, PersistentRing::reset() every ring, clear the abort
// words, then start() each proxy with new connections (it begins at stream
// position zero, as reset() leaves the FIFOs).
//
// A peer that closes its end without a note after sending every slice
// expect() announced (its communicator was destroyed after the last call) is
// not a failure: see expect() and peer_gone().
//
// Stopping, with no call running: request_stop() on every proxy of the
// group (for ranks on separate hosts, a barrier after it), then stop(). A
// thread that was asked to stop ends without error, and closes its
// connections normally; a peer's close it meets then is the expected end,
// not a failure. A proxy that is not stopping treats any close of its peer's
// end as a failure (as above: its abort word set), since its kernel may wait
// for what will never come. A rank takes 2 x channels host threads for its
// proxy, on top of its kernel's channels x G CTAs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.hpp"

namespace ncclz::transport {

/// One channel's connections of a rank in the ring: to the next rank, and
/// from the previous one (in a 2-rank ring both with the same peer; from
/// Transport::connect: links[c][next].send and links[c][prev].recv).
struct ProxyChannel {
  std::unique_ptr<SendConn> send;
  std::unique_ptr<RecvConn> recv;
};

class PersistentProxy {
 public:
  /// The kernel's side, as host addresses (PersistentRing::fifo_host(),
  /// outbox_host(), options(), RingAbort::host_ptr()).
  struct Fifos {
    uint8_t* inbox = nullptr;   ///< the receive FIFOs, channel c at c x FifoLayout::channel_bytes
    uint8_t* outbox = nullptr;  ///< the outgoing FIFOs, the same layout
    int channels = 1;
    int slots = 4;
    size_t slot_bytes = 0;
    int* abort_word = nullptr;  ///< the group's abort word (nonzero: set)
  };
  struct Options {
    int rank = 0;  ///< for messages
    /// A wait that holds a slice fails after this long without progress.
    std::chrono::nanoseconds timeout = std::chrono::seconds(30);
  };

  /// Pause between two looks at the stop flag and the abort word while a
  /// transport wait blocks (its deadline), in milliseconds.
  static constexpr int kSliceMs = 20;
  /// Polling a FIFO flag: yield the CPU between polls for this long, then sleep.
  static constexpr int kYieldUs = 50;
  static constexpr int kMaxSleepUs = 200;

  /// Checks the FIFO description (InvalidArgument); starts nothing.
  PersistentProxy(const Fifos& fifos, const Options& o);
  ~PersistentProxy();
  PersistentProxy(const PersistentProxy&) = delete;
  PersistentProxy& operator=(const PersistentProxy&) = delete;

  /// Takes one ProxyChannel per FIFO channel and starts the threads at
  /// stream position zero (the FIFOs as PersistentRing's constructor or
  /// reset() leaves them). InvalidArgument, nothing started, when a
  /// connection's slots are smaller than the FIFO's, a connection is
  /// missing, the count is not the channels', or the proxy runs.
  void start(std::vector<ProxyChannel> channels);
  /// Asks the threads to end (each within about kSliceMs, closing its
  /// connection normally); returns at once. From then on a connection that
  /// closes is no failure.
  void request_stop();
  /// request_stop(), then waits for the threads; returns error(). Idempotent.
  std::string stop();
  /// The first failure of a thread ("" while none): what, on which rank,
  /// channel and peer, at which slice.
  std::string error() const;
  /// Whether a thread ended on an error or on the abort word (it then closed
  /// its connection; the others follow).
  bool halted() const { return halted_.load(std::memory_order_acquire); }
  /// Slices carried so far on channel c (since start()).
  uint64_t sent(int c) const { return counters_[size_t(c)].sent.load(std::memory_order_acquire); }
  uint64_t received(int c) const { return counters_[size_t(c)].received.load(std::memory_order_acquire); }
  /// Bytes of the slices carried so far on channel c (read after sent(c)).
  uint64_t sent_bytes(int c) const { return counters_[size_t(c)].bytes.load(std::memory_order_relaxed); }
  /// Slices of channel c flushed (Transport's SendConn::flush: they left this
  /// process) so far: the sender flushes after the slice expect() names as
  /// the call's last.
  uint64_t flushed(int c) const { return counters_[size_t(c)].flushed.load(std::memory_order_acquire); }
  /// Waits until flushed(c) >= slices (a call's sends all gone: the
  /// communicator's call end); "" then, else why not: the proxy halted (its
  /// error), was stopped, or timed out.
  std::string wait_flushed(int c, uint64_t slices, std::chrono::nanoseconds timeout);
  /// The slices channel c's stream will have received and sent when the
  /// call now starting ends (since start(); default: unbounded; the sender
  /// flushes after slice `sent`). A peer's end that
  /// closes without a note (its communicator closed, or its process exited)
  /// before that many arrived is a failure as any other close; after, the
  /// peer is done: the receiving thread ends without setting the abort word,
  /// and peer_gone() says so (the caller fails its next call). Call it for
  /// every channel, then read peer_gone(), before each call's kernel.
  void expect(int c, uint64_t received, uint64_t sent) {
    counters_[size_t(c)].expect_sent.store(sent);
    counters_[size_t(c)].expect_recv.store(received);
  }
  /// Whether a receiving thread saw its peer's end close without a note.
  bool peer_gone() const { return peer_gone_.load(); }

 private:
  struct Counters {
    std::atomic<uint64_t> sent{0}, received{0}, bytes{0}, flushed{0};
    std::atomic<uint64_t> expect_recv{~uint64_t(0)}, expect_sent{~uint64_t(0)};
  };
  void send_loop(int c, std::unique_ptr<SendConn> conn);
  void recv_loop(int c, std::unique_ptr<RecvConn> conn);
  /// Until *flag >= want: true; false when stopped or aborted; with
  /// `holding`, throws Timeout after the timeout.
  bool wait_flag(const uint64_t* flag, uint64_t want, bool holding, const char* what, uint64_t slot);
  bool should_end() const;
  void fail(const std::string& msg);
  /// A channel thread's exception at `slice`: recorded as the proxy's failure
  /// (true) unless the proxy was ending anyway (false: a stop or abort's echo).
  bool failed_at(const std::string& where, uint64_t slice, const char* what);
  /// Whether a channel thread that ends (failed: its own failure) closes its
  /// connection as aborted (its failure, or the abort word set); marks the
  /// proxy halted then.
  bool stopping(bool failed);
  /// The note that connection's peer fails with.
  std::string stop_note(bool failed) const;

  Fifos f_;
  Options o_;
  size_t chan_bytes_ = 0, stride_ = 0;
  std::vector<std::thread> threads_;
  std::unique_ptr<Counters[]> counters_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> halted_{false};
  std::atomic<bool> peer_gone_{false};
  mutable std::mutex mu_;
  std::string error_;
};

/// A rank's ProxyChannels from a transport (any kind): Transport::connect
/// with its ring neighbours (the one peer of a 2-rank ring once), channel c's
/// connection to the next rank and from the previous one. Collective: every
/// rank of the transport calls it, with the same channels and slot_bytes
/// (at least the FIFO's). InvalidArgument for fewer than 2 ranks.
std::vector<ProxyChannel> ring_channels(Transport& t, int rank, int nranks, int channels, Clock::time_point deadline,
                                        size_t slot_bytes);

/// Ranks as threads of one process (tests, benchmarks): the connections of
/// a ring of `nranks` ranks, `channels` channels, each link its own
/// in-process slot ring of `slots` x `slot_bytes` (transport/slot_ring.hpp)
/// with a shared AbortFlag per rank. Result [r][c]: rank r's ProxyChannel.
std::vector<std::vector<ProxyChannel>> local_ring_channels(int nranks, int channels, int slots, size_t slot_bytes);

}  // namespace ncclz::transport
