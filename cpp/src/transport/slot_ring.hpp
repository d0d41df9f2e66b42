// The slot ring every transport is built from, and the SendConn/RecvConn
// that drive it.
//
// One ring is one direction of one connection: K slots of slot_bytes, a
// per-slot record (bytes posted, their CRC-32C), and two 32-bit monotonic
// counters (they wrap; only differences are used), each on its own cache line:
//
//   tail  written by the producer: slots posted so far
//   head  written by the consumer: slots released so far
//
// The producer may fill slot (tail % K) when tail - head < K; the consumer may
// read slot (head % K) when tail - head > 0. The producer writes the slot and
// meta[slot] and then publishes tail (release); the consumer reads tail
// (acquire) and then the slot. The same layout lives in ordinary memory
// (in-process transport; socket transport, whose proxy thread is the
// consumer of send rings and the producer of receive rings) or in a POSIX
// shared-memory segment (shared-memory transport): all counters are
// address-free std::atomic<uint32_t>.
//
// Waiting: spin the group's pause count (LinkGroup::pause_iters: kSpinIters
// where ranks have a CPU each, none where they outnumber the CPUs), then poll
// for the group's spin budget (LinkGroup::spin_ns) yielding the CPU between
// checks, then sleep in FUTEX_WAIT on the
// counter being waited for, in slices of at most kWaitSliceMs; the other side
// calls FUTEX_WAKE only when the waiter's "waiting" flag is set (the flag and
// the counter are both seq_cst, so a wake-up cannot be lost). Between slices
// the waiter checks the communicator's AbortFlag, the peer's "closed" flag, a
// transport hook (peer process liveness for shared memory, proxy errors for
// sockets), the calling thread's interrupt check (base/interrupt.hpp) and the
// deadline. The deadline bounds the time without progress: the budget it
// gives (deadline - the time the wait began to sleep) starts again whenever
// the awaited counter moves or RingHooks::progress() (the socket proxy's
// bytes moved with that peer) changes, so a flush draining many slots over a
// slow link, one large slot crawling in, or a channel starved by its siblings
// on a shared link never times out while bytes move.
//
// Checksums (NCCLZ_CHECKSUM, agreed at creation; docs/TRANSPORTS.md): where on,
// post() stores the CRC-32C of the posted bytes in meta[slot] and the
// receiver's wait() recomputes it before handing the slot out, so a slot
// corrupted anywhere between the two (shared memory, the socket transport's
// frames and kernels, a NIC, a switch) is CorruptData, never data. The socket
// transport carries the CRC in its frame header (socket_transport.cpp).
//
// Closing with a reason. Each side records why it closed: normally (the end
// was destroyed), because this rank found corrupt data, or because its
// communicator was aborted, with a note naming where or who. A rank that finds
// corrupt data closes every ring end of its transport that way at once
// (LinkGroup::poison), and an aborted communicator closes them all with its
// note (LinkGroup::abort: "rank R aborted the communicator: why"), so that
// its peers, whatever they wait for, fail promptly with CorruptData naming the
// original fault, or Aborted naming the rank that aborted, instead of waiting
// for their deadline; a peer that sees such a close closes its own ends the
// same way (and sets its AbortFlag, for an abort), so the notice spreads to
// every rank that waits. The first reason a transport closes with stays.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace ncclz::transport {

constexpr uint32_t kRingMagic = 0x475a434e;  // "NCZG"
constexpr uint32_t kRingVersion = 3;         // 2: per-slot CRC, close reasons; 3: abort notes

constexpr int kWaitSliceMs = 20;
constexpr size_t kCloseNoteBytes = 448;

/// Why a side closed its ring (RingHeader::{producer,consumer}_why).
enum CloseWhy : uint32_t {
  kClosedNormally = 0,  ///< the end was destroyed (or the socket proxy failed: see RingHooks::closed_reason)
  kClosedCorrupt = 1,   ///< this rank or one it heard from found corrupt data; the note says where
  kClosedAborted = 2,   ///< this rank's communicator was aborted (here or by a peer); the note says who and why
};

/// What the producer records about one posted slot.
struct SlotMeta {
  uint64_t bytes;  ///< bytes posted
  uint32_t crc;    ///< CRC-32C of those bytes (when checksums are on)
  uint32_t reserved;
};

struct RingHeader {
  // Producer's cache line.
  alignas(64) std::atomic<uint32_t> tail;
  std::atomic<uint32_t> producer_waiting;  // producer sleeps on `head`
  std::atomic<uint32_t> producer_closed;   // no more posts will come
  std::atomic<uint32_t> producer_why;      // CloseWhy, stored before producer_closed
  // Consumer's cache line.
  alignas(64) std::atomic<uint32_t> head;
  std::atomic<uint32_t> consumer_waiting;  // consumer sleeps on `tail`
  std::atomic<uint32_t> consumer_closed;   // no more releases will come
  std::atomic<uint32_t> consumer_why;      // CloseWhy, stored before consumer_closed
  // Set once.
  alignas(64) uint32_t magic;
  uint32_t version;
  uint32_t nslots;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t slot_stride;
  uint64_t meta_offset;
  uint64_t data_offset;
  uint64_t total_bytes;
  // Process identities (shared memory): pid published after its start time.
  std::atomic<int32_t> producer_pid;
  std::atomic<int32_t> consumer_pid;
  uint64_t producer_start;
  uint64_t consumer_start;
  // The close notes (NUL-terminated), written before the matching *_why.
  char producer_note[kCloseNoteBytes];
  char consumer_note[kCloseNoteBytes];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "ring counters must be lock-free");

/// Bytes a ring with these parameters needs (header, slot records, page-aligned slots).
size_t ring_bytes(int nslots, size_t slot_bytes);
/// Constructs an empty ring in `mem` (ring_bytes() bytes, 64-byte aligned).
void ring_init(void* mem, int nslots, size_t slot_bytes);
/// Checks a mapped ring's header against what this rank expects; throws RemoteError.
void ring_validate(const void* mem, size_t mapped_bytes, int nslots, size_t slot_bytes, const std::string& who);

/// Process-local view of a ring.
struct RingView {
  RingHeader* hdr = nullptr;
  SlotMeta* meta = nullptr;
  uint8_t* data = nullptr;
  uint32_t nslots = 0;
  size_t slot_bytes = 0;
  size_t stride = 0;
  explicit RingView(void* mem = nullptr);
  uint8_t* slot(uint32_t counter) const { return data + static_cast<size_t>(counter % nslots) * stride; }
  SlotMeta& meta_of(uint32_t counter) const { return meta[counter % nslots]; }
};

/// Closes one side of a ring with a reason: the note, then `why`, then the
/// closed flag (so a reader that sees the flag sees both), and wakes whoever
/// sleeps on the ring. `producer`: the producer's side, else the consumer's.
void ring_close(RingHeader* hdr, bool producer, CloseWhy why, const std::string& note);
/// The close note of side `producer` and its reason (*why): empty, with
/// kClosedNormally, unless it closed with kClosedCorrupt or kClosedAborted.
std::string ring_close_note(const RingHeader* hdr, bool producer, CloseWhy* why);

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
  /// A counter of bytes moved with this end's peer by a transport agent (the
  /// socket proxy: every channel's connection to that peer, both ways): a
  /// change is progress for the wait's timeout even before a whole slot is
  /// in. 0 where slots move whole (memory rings).
  virtual uint64_t progress() const { return 0; }
};

class RingEnd;

/// The fault NCCLZ_TEST_CORRUPT asks for (tests only; rank -1: none).
struct LinkFault {
  int rank = -1, peer = -1;  ///< flip on this rank's links to this peer
  uint64_t slot = 0;         ///< ... in the slot-th post (0-based, all its links to the peer together)
  uint64_t bit = 0;          ///< ... this bit (modulo the bits posted)
  bool header = false;       ///< socket transport: flip a bit of the frame header instead (bit modulo 192)
};

/// What the ring ends of one transport share. create_transport makes one per
/// transport and joins every end that connect() returns to it (so the
/// transports need not thread it through their constructors):
///  - whether slots carry a CRC-32C (the agreed NCCLZ_CHECKSUM);
///  - the live ends, so that poison() and abort() can close all of them, and
///    listeners (the socket proxies) that pass the notice on to their peers;
///  - the communicator's AbortFlag, which abort() sets;
///  - the test-only fault plan of NCCLZ_TEST_CORRUPT (flip one bit of one
///    slot after its checksum was taken: corruption in flight).
class LinkGroup {
 public:
  using Fault = LinkFault;

  LinkGroup(int rank, bool checksum, Fault fault = Fault(), std::shared_ptr<AbortFlag> abort = nullptr);
  int rank() const { return rank_; }
  bool checksum() const { return checksum_; }

  void join(RingEnd* end);
  void leave(RingEnd* end);
  /// Runs `f` on poison() (after the ends are closed); returns an id for remove_listener.
  int add_listener(std::function<void()> f);
  void remove_listener(int id);

  /// Corrupt data: close(kClosedCorrupt, note).
  void poison(const std::string& note) { close(kClosedCorrupt, note); }
  /// The communicator was aborted (here, or by the peer whose note this is):
  /// sets the AbortFlag (unless set), then close(kClosedAborted, note).
  void abort(const std::string& note);
  /// The first call of poison/abort records `why` and `note` and closes every
  /// joined end (and every end that joins later) with them, then runs the
  /// listeners; later calls do nothing.
  void close(CloseWhy why, const std::string& note);
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  /// The first joined end whose other side closed with a notice (corrupt
  /// data or an abort; kClosedNormally: none), its note in *note. A wait on
  /// one link checks it between its sleeps, so that a notice from any peer
  /// ends it, not only one on the link it waits on (the call descriptors
  /// wait on one peer while another may abort).
  CloseWhy peer_notice(std::string* note) const;
  /// How long a wait of these ends polls after its pause spin and before it
  /// sleeps, in nanoseconds (0: it sleeps at once; set by the communicator
  /// from CommConfig::spin_us), and how many pause instructions it spins
  /// before that (Transport::set_wait).
  int64_t spin_ns() const { return spin_ns_.load(std::memory_order_relaxed); }
  int pause_iters() const { return pause_iters_.load(std::memory_order_relaxed); }
  void set_wait(int pause_iters, int64_t spin_ns);
  /// The calling thread's poll budget for its next wait on these ends, at
  /// most spin_ns: poll_done(true) after a poll that saw its data raises it
  /// by spin_ns / 8; poll_done(false), after one that ran out, halves it
  /// (below spin_ns / 64: 0). At 0 every 32nd wait polls for spin_ns / 8
  /// anyway, to notice when polling pays again. Per thread: a channel's
  /// thread whose ring steps wait for busy peers stops polling while the
  /// caller's short waits keep it. set_wait starts every thread afresh.
  /// With no pause spin (ranks outnumber CPUs) only ShortWaits poll.
  int64_t poll_ns();
  void poll_done(bool hit);
  /// The reason and note of the first close (kClosedNormally and "" before).
  CloseWhy why() const { return why_.load(std::memory_order_acquire); }
  std::string note() const;

  /// Test hook: whether the post that is about to go to `peer` (or, with
  /// header, the frame) is the one the fault plan names; counts it.
  bool fault_now(int peer, bool header);
  const Fault& fault() const { return fault_; }

 private:
  const int rank_;
  const bool checksum_;
  const Fault fault_;
  std::atomic<uint64_t> fault_count_{0};
  mutable std::mutex mu_;
  std::vector<RingEnd*> ends_;
  std::vector<std::pair<int, std::function<void()>>> listeners_;
  int next_listener_ = 0;
  std::shared_ptr<AbortFlag> abort_;
  std::atomic<bool> poisoned_{false};
  std::atomic<int64_t> spin_ns_{0};
  std::atomic<int> pause_iters_{kSpinIters};
  std::atomic<uint64_t> wait_epoch_{0};  // which set_wait a thread's budget belongs to
  std::atomic<CloseWhy> why_{kClosedNormally};
  std::string note_;
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

/// What RingSendConn and RingRecvConn have in common: membership of a LinkGroup.
class RingEnd {
 public:
  virtual ~RingEnd() = default;
  /// Joins `group` (once, before the end is used): from then on the end
  /// follows its checksum setting and is closed by its close().
  virtual void join(std::shared_ptr<LinkGroup> group) = 0;
  /// Closes this end's side of the ring with `why` and `note`.
  virtual void close(CloseWhy why, const std::string& note) = 0;
  /// Why the other side closed the ring (kClosedNormally while it is open or
  /// closed normally), with its note in *note otherwise.
  virtual CloseWhy other_side(std::string* note) const = 0;
};

/// The sending end over a ring (memory kept alive by `owner`).
class RingSendConn final : public SendConn, public RingEnd {
 public:
  RingSendConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label, std::shared_ptr<AbortFlag> abort,
               std::unique_ptr<RingHooks> hooks);
  ~RingSendConn() override;
  void join(std::shared_ptr<LinkGroup> group) override;
  void close(CloseWhy why, const std::string& note) override;
  CloseWhy other_side(std::string* note) const override;
  uint8_t* acquire(Clock::time_point deadline) override;
  bool writable() const override {
    return acquired_ || tail_ - ring_.hdr->head.load(std::memory_order_acquire) < ring_.nslots;
  }
  void post(size_t bytes) override;
  void flush(Clock::time_point deadline) override;
  size_t slot_bytes() const override { return ring_.slot_bytes; }
  int peer() const override { return label_.peer; }
  SlotMemory slot_memory() const override { return {ring_.data, ring_.stride * ring_.nslots}; }
  const RingView& ring() const { return ring_; }
  /// Whether the other side released every slot posted so far (the socket
  /// transport's proxy: wrote it to the socket).
  bool consumed() const { return ring_.hdr->head.load(std::memory_order_acquire) == tail_; }

 private:
  std::shared_ptr<void> owner_;
  RingView ring_;
  ConnLabel label_;
  std::shared_ptr<AbortFlag> abort_;
  std::unique_ptr<RingHooks> hooks_;
  std::shared_ptr<LinkGroup> group_;
  bool checksum_ = false;
  uint32_t tail_ = 0;      // posted so far (local mirror of hdr->tail)
  bool acquired_ = false;  // slot tail_ handed out and not posted yet
};

/// The receiving end over a ring.
class RingRecvConn final : public RecvConn, public RingEnd {
 public:
  RingRecvConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label, std::shared_ptr<AbortFlag> abort,
               std::unique_ptr<RingHooks> hooks);
  ~RingRecvConn() override;
  void join(std::shared_ptr<LinkGroup> group) override;
  void close(CloseWhy why, const std::string& note) override;
  CloseWhy other_side(std::string* note) const override;
  SlotView wait(Clock::time_point deadline) override;
  bool ready() const override { return waited_ || ring_.hdr->tail.load(std::memory_order_acquire) != head_; }
  void release() override;
  size_t slot_bytes() const override { return ring_.slot_bytes; }
  int peer() const override { return label_.peer; }
  SlotMemory slot_memory() const override { return {ring_.data, ring_.stride * ring_.nslots}; }

 private:
  std::shared_ptr<void> owner_;
  RingView ring_;
  ConnLabel label_;
  std::shared_ptr<AbortFlag> abort_;
  std::unique_ptr<RingHooks> hooks_;
  std::shared_ptr<LinkGroup> group_;
  bool checksum_ = false;
  uint32_t head_ = 0;    // released so far (local mirror of hdr->head)
  bool waited_ = false;  // slot head_ handed out and not released yet
  SlotView view_;
};

/// A heap-allocated ring (64-byte aligned, zero-initialized header).
std::shared_ptr<void> make_heap_ring(int nslots, size_t slot_bytes);

/// This process's start time in clock ticks (field 22 of /proc/self/stat).
uint64_t process_start_time(int pid);
/// True when `pid` runs and started at `start` (0: do not compare).
bool process_alive(int pid, uint64_t start);

}  // namespace ncclz::transport
