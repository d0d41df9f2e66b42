// The transport interface the primitives see (gloo's lesson: algorithms know
// only pairs of connections and a store, so transports swap freely).
//
// A connection from rank A to rank B is a FIFO of K slots of `slot_bytes`
// each. The sender acquires the next free slot, writes into it (the codec
// encodes straight into slot memory), and posts it with the number of bytes
// written; the receiver waits for the next posted slot, reads it in place
// (the codec decodes straight from slot memory), and releases it. Slots are
// consumed strictly in order, so a connection behaves like NCCL's head/tail
// FIFO: tail counts posted slots, head counts released ones, and the sender
// may run at most K slots ahead of the receiver.
//
// Every wait takes a deadline and watches an abort flag: a dead or stuck peer
// makes the waiting call throw ncclz::Timeout or ncclz::RemoteError (closed
// connection) instead of hanging, and abort() on the communicator wakes every
// waiter with ncclz::Aborted. The deadline bounds the wait's time WITHOUT
// PROGRESS: the budget it gives (deadline - the time the wait began) starts
// again whenever the awaited counter moves or the transport reports bytes
// moving on the connection (slot_ring.hpp), so a slow link that still moves
// data never times out, and a stuck one does after the budget.
//
// Aborting (Transport::abort): every connection is closed with a note naming
// the rank that aborted and why; a peer waiting on any of them fails at once
// with ncclz::Aborted carrying the note, sets its own AbortFlag and closes its
// own connections with the same note, so the abort reaches every rank of the
// communicator, whatever it waits for (slot_ring.hpp, "Closing with a reason").
//
// Integrity: with checksums on (NCCLZ_CHECKSUM; on by default for sockets)
// every slot carries a CRC-32C from post() to wait(), and a slot that does not
// match is ncclz::CorruptData from wait(), never data; the rank that found it
// then makes every peer's waits fail with CorruptData too (slot_ring.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ncclz {

class Bootstrap;

namespace transport {

/// The pause instructions a wait spins before it polls (Transport::set_wait)
/// where the ranks have a CPU each.
constexpr int kSpinIters = 256;

/// While one lives, the calling thread's waits are short ones: a call's
/// descriptors and the latency algorithm's messages, where a peer is one
/// message behind. Where ranks outnumber CPUs (Transport::set_wait with no
/// pause spin) only these poll before they sleep; a ring step's wait for a
/// busy peer sleeps at once there, leaving the CPU to the ranks that work.
class ShortWaits {
 public:
  ShortWaits();
  ~ShortWaits();
  ShortWaits(const ShortWaits&) = delete;
  ShortWaits& operator=(const ShortWaits&) = delete;
  /// Whether the calling thread is inside one.
  static bool active();
};

using Clock = std::chrono::steady_clock;

/// Shared by all connections of a communicator: set to make every wait throw Aborted.
struct AbortFlag {
  std::atomic<bool> aborted{false};
  std::string reason;  // written before `aborted` is set, never after
  /// Sets the flag with `why` unless it is set already (the first reason
  /// stays); true when this call set it. Thread-safe.
  bool set(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    if (aborted.load(std::memory_order_acquire)) return false;
    reason = why;
    aborted.store(true, std::memory_order_release);
    return true;
  }
  std::mutex mu;
};

/// Where a connection's slots live: one range of host memory holding all of
/// them ({nullptr, 0} where the transport does not say). A rank whose values
/// are on a GPU registers it with CUDA (core::DeviceWork::pin_slots): its
/// copies to and from the slots are then DMA from page-locked memory, and the
/// device can write a slot directly.
struct SlotMemory {
  void* data = nullptr;
  size_t bytes = 0;
};

/// Sending end of a connection.
class SendConn {
 public:
  virtual ~SendConn() = default;
  /// Waits (until `deadline`) for a free slot and returns its memory
  /// (slot_bytes() bytes). Throws Timeout / RemoteError / Aborted. Calling it
  /// again before post() returns the same slot.
  virtual uint8_t* acquire(Clock::time_point deadline) = 0;
  /// Whether acquire() would return a slot at once. Never waits or throws (a
  /// closed connection: acquire() reports it). Connections that cannot fill
  /// up keep the default.
  virtual bool writable() const { return true; }
  /// Publishes the slot acquired last, holding `bytes` (<= slot_bytes()) bytes.
  virtual void post(size_t bytes) = 0;
  /// Waits until every posted slot has been handed to the peer (the socket
  /// transport drains through its proxy thread); then buffers may be reused.
  virtual void flush(Clock::time_point deadline) = 0;
  virtual size_t slot_bytes() const = 0;
  virtual int peer() const = 0;
  /// The memory holding every slot acquire() returns (see SlotMemory).
  virtual SlotMemory slot_memory() const { return {}; }
};

/// A posted slot as the receiver sees it.
struct SlotView {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};

/// Receiving end of a connection.
class RecvConn {
 public:
  virtual ~RecvConn() = default;
  /// Waits (until `deadline`) for the next posted slot. Throws Timeout /
  /// RemoteError / Aborted. Calling it again before release() returns the
  /// same slot. Slots posted before the peer closed are still delivered.
  virtual SlotView wait(Clock::time_point deadline) = 0;
  /// Whether wait() would return a slot at once (one is posted and not yet
  /// released). Never waits or throws: a closed or failed connection is
  /// false here, and wait() reports it.
  virtual bool ready() const = 0;
  /// Frees the slot returned by the last wait() for the sender to reuse.
  virtual void release() = 0;
  virtual size_t slot_bytes() const = 0;
  virtual int peer() const = 0;
  /// The memory holding every slot wait() returns (see SlotMemory).
  virtual SlotMemory slot_memory() const { return {}; }
};

/// One send and one receive connection with a peer, on one channel.
struct PeerLink {
  std::unique_ptr<SendConn> send;
  std::unique_ptr<RecvConn> recv;
};

enum class Kind { InProcess, SharedMemory, Socket };

/// "inproc", "shm" or "socket".
const char* kind_name(Kind k);

struct TransportConfig {
  Kind kind = Kind::Socket;  ///< not read by create_transport (it decides; see `transport`)
  /// "" = automatic (NCCLZ_TRANSPORT when set), or "inproc", "shm", "socket" to
  /// force one; must be the same on every rank.
  std::string transport;
  size_t slot_bytes = 1 << 20;  ///< NCCLZ_SLOT_BYTES
  int nslots = 4;               ///< K, NCCLZ_NSLOTS
  std::string socket_ifname;    ///< NCCLZ_SOCKET_IFNAME
  double throttle_gbps = 0;     ///< NCCLZ_SOCKET_THROTTLE_GBPS (root-less link emulation; 0 = off)
  /// Slot checksums: "" = NCCLZ_CHECKSUM when set, else "auto" (on for
  /// sockets, off for shared memory and in-process); "on" or "off". Must be the
  /// same on every rank.
  std::string checksum;
};

/// Creates the connections of this rank: for each (peer, channel) pair asked
/// for, a PeerLink. Collective over all ranks of the bootstrap (every rank
/// calls it with the same channel count and a symmetric peer set: if A asks
/// for B then B asks for A).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual Kind kind() const = 0;
  /// links[c][i] connects to peers[i] on channel c. Each peer at most once
  /// (InvalidArgument otherwise); this rank itself is allowed (a loopback
  /// link). Each call makes new connections; it ends with a bootstrap barrier.
  /// `slot_bytes`: the slots of these connections (0: the config's); every
  /// rank passes the same.
  virtual std::vector<std::vector<PeerLink>> connect(const std::vector<int>& peers, int nchannels,
                                                     Clock::time_point deadline, size_t slot_bytes = 0) = 0;
  /// Closes every connection made so far (and any made later) with `note`
  /// ("rank R aborted the communicator: why"): peers fail at once with
  /// Aborted(note) and pass it on. Sets the AbortFlag first. The first note
  /// (or corrupt-data notice) wins. Thread-safe; the transport create_transport
  /// returns implements it.
  virtual void abort(const std::string& note) { (void)note; }
  /// How this transport's waits wait before they sleep: `pause_iters` pause
  /// instructions (a few microseconds at most; 0 where ranks outnumber the
  /// CPUs: the awaited rank needs this CPU), then polling for `spin_ns`
  /// nanoseconds, giving the CPU to other ready threads between checks (0:
  /// they sleep then; slot_ring.hpp, "Waiting"). Thread-safe; the transport
  /// create_transport returns implements it.
  virtual void set_wait(int pause_iters, int64_t spin_ns) {
    (void)pause_iters;
    (void)spin_ns;
  }
  /// Whether the slots carry checksums (agreed: the same on every rank); the
  /// transport create_transport returns says.
  virtual bool checksums() const { return false; }
};

/// Picks the transport for this job (all ranks on one host: SharedMemory,
/// ranks in one process: InProcess, else Socket; NCCLZ_TRANSPORT=inproc|shm|socket
/// forces one) and creates it.
std::unique_ptr<Transport> create_transport(Bootstrap& bootstrap, const TransportConfig& cfg,
                                            std::shared_ptr<AbortFlag> abort);

}  // namespace transport
}  // namespace ncclz
