// The slot ring every transport is built from, and the SendConn/RecvConn
// that drive it.
//
// One ring is one direction of one connection: K slots of slot_bytes, a
// per-slot byte count, and two 32-bit monotonic counters (they wrap; only
// differences are used), each on its own cache line:
//
//   tail  written by the producer: slots posted so far
//   head  written by the consumer: slots released so far
//
// The producer may fill slot (tail % K) when tail - head < K; the consumer may
// read slot (head % K) when tail - head > 0. The producer writes the slot and
// sizes[slot] and then publishes tail (release); the consumer reads tail
// (acquire) and then the slot. The same layout lives in ordinary memory
// (in-process transport; socket transport, whose proxy thread is the
// consumer of send rings and the producer of receive rings) or in a POSIX
// shared-memory segment (shared-memory transport): all counters are
// address-free std::atomic<uint32_t>.
//
// Waiting: spin kSpinIters pause instructions, then sleep in FUTEX_WAIT on the
// counter being waited for, in slices of at most kWaitSliceMs; the other side
// calls FUTEX_WAKE only when the waiter's "waiting" flag is set (the flag and
// the counter are both seq_cst, so a wake-up cannot be lost). Between slices
// the waiter checks the deadline, the communicator's AbortFlag, the peer's
// "closed" flag and a transport hook (peer process liveness for shared memory,
// proxy errors for sockets).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/transport.hpp"

namespace ncclz::transport {

constexpr uint32_t kRingMagic = 0x475a434e;  // "NCZG"
constexpr uint32_t kRingVersion = 1;
constexpr int kSpinIters = 256;
constexpr int kWaitSliceMs = 20;

struct RingHeader {
  // Producer's cache line.
  alignas(64) std::atomic<uint32_t> tail;
  std::atomic<uint32_t> producer_waiting;  // producer sleeps on `head`
  std::atomic<uint32_t> producer_closed;   // no more posts will come
  // Consumer's cache line.
  alignas(64) std::atomic<uint32_t> head;
  std::atomic<uint32_t> consumer_waiting;  // consumer sleeps on `tail`
  std::atomic<uint32_t> consumer_closed;   // no more releases will come
  // Set once.
  alignas(64) uint32_t magic;
  uint32_t version;
  uint32_t nslots;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t slot_stride;
  uint64_t sizes_offset;
  uint64_t data_offset;
  uint64_t total_bytes;
  // Process identities (shared memory): pid published after its start time.
  std::atomic<int32_t> producer_pid;
  std::atomic<int32_t> consumer_pid;
  uint64_t producer_start;
  uint64_t consumer_start;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "ring counters must be lock-free");

/// Bytes a ring with these parameters needs (header, sizes, page-aligned slots).
size_t ring_bytes(int nslots, size_t slot_bytes);
/// Constructs an empty ring in `mem` (ring_bytes() bytes, 64-byte aligned).
void ring_init(void* mem, int nslots, size_t slot_bytes);
/// Checks a mapped ring's header against what this rank expects; throws RemoteError.
void ring_validate(const void* mem, size_t mapped_bytes, int nslots, size_t slot_bytes, const std::string& who);

/// Process-local view of a ring.
struct RingView {
  RingHeader* hdr = nullptr;
  uint64_t* sizes = nullptr;
  uint8_t* data = nullptr;
  uint32_t nslots = 0;
  size_t slot_bytes = 0;
  size_t stride = 0;
  explicit RingView(void* mem = nullptr);
  uint8_t* slot(uint32_t counter) const { return data + static_cast<size_t>(counter % nslots) * stride; }
};

/// Transport-specific behaviour around a ring end.
class RingHooks {
 public:
  virtual ~RingHooks() = default;
  /// Called after the local end posted (sender) or released (receiver).
  virtual void notify() {}
  /// Called between wait slices; throws RemoteError when the peer is gone.
  virtual void check_peer() {}
  /// Why the other side closed the ring ("" = it just closed): words the
  /// RemoteError when a wait finds the ring closed and nothing to consume.
  virtual std::string closed_reason() { return ""; }
  /// SendConn::flush: default returns at once (the slot is the peer's memory).
  virtual bool flush_waits_for_drain() const { return false; }
};

/// What error messages say about a ring end.
struct ConnLabel {
  const char* transport = "";  // "inproc", "shm", "socket"
  int rank = 0;
  int peer = 0;
  int channel = 0;
  std::string prefix() const;  // "shm transport rank 0 (channel 1, peer rank 2)"
};

/// Futex helpers (shared futexes: they work on private and shared mappings).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void futex_wake(std::atomic<uint32_t>* word);

/// The sending end over a ring (memory kept alive by `owner`).
class RingSendConn final : public SendConn {
 public:
  RingSendConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label, std::shared_ptr<AbortFlag> abort,
               std::unique_ptr<RingHooks> hooks);
  ~RingSendConn() override;
  uint8_t* acquire(Clock::time_point deadline) override;
  void post(size_t bytes) override;
  void flush(Clock::time_point deadline) override;
  size_t slot_bytes() const override { return ring_.slot_bytes; }
  int peer() const override { return label_.peer; }
  const RingView& ring() const { return ring_; }

 private:
  std::shared_ptr<void> owner_;
  RingView ring_;
  ConnLabel label_;
  std::shared_ptr<AbortFlag> abort_;
  std::unique_ptr<RingHooks> hooks_;
  uint32_t tail_ = 0;       // posted so far (local mirror of hdr->tail)
  bool acquired_ = false;   // slot tail_ handed out and not posted yet
};

/// The receiving end over a ring.
class RingRecvConn final : public RecvConn {
 public:
  RingRecvConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label, std::shared_ptr<AbortFlag> abort,
               std::unique_ptr<RingHooks> hooks);
  ~RingRecvConn() override;
  SlotView wait(Clock::time_point deadline) override;
  void release() override;
  size_t slot_bytes() const override { return ring_.slot_bytes; }
  int peer() const override { return label_.peer; }

 private:
  std::shared_ptr<void> owner_;
  RingView ring_;
  ConnLabel label_;
  std::shared_ptr<AbortFlag> abort_;
  std::unique_ptr<RingHooks> hooks_;
  uint32_t head_ = 0;       // released so far (local mirror of hdr->head)
  bool waited_ = false;     // slot head_ handed out and not released yet
  SlotView view_;
};

/// A heap-allocated ring (64-byte aligned, zero-initialized header).
std::shared_ptr<void> make_heap_ring(int nslots, size_t slot_bytes);

/// This process's start time in clock ticks (field 22 of /proc/self/stat).
uint64_t process_start_time(int pid);
/// True when `pid` runs and started at `start` (0: do not compare).
bool process_alive(int pid, uint64_t start);

}  // namespace ncclz::transport
