#include "transport/slot_ring.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/crc32c.hpp"
#include "base/interrupt.hpp"
#include "ncclz/error.hpp"

namespace ncclz::transport {

namespace {

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", s);
  return b;
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// What a rank is told to do about corrupt data.
constexpr const char* kCorruptAdvice =
    " The communicator is aborted on every rank; create a new one. Corruption that TCP's checksum misses "
    "comes from faulty NICs, cables, switches or memory: if it repeats between the same hosts, check that "
    "hardware.";

}  // namespace

std::string ConnLabel::prefix() const {
  return std::string(transport) + " transport rank " + std::to_string(rank) + " (channel " + std::to_string(channel) +
         ", peer rank " + std::to_string(peer) + ")";
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

size_t ring_bytes(int nslots, size_t slot_bytes) {
  size_t meta_off = round_up(sizeof(RingHeader), 64);
  size_t data_off = round_up(meta_off + sizeof(SlotMeta) * static_cast<size_t>(nslots), 4096);
  size_t stride = round_up(slot_bytes, 64);
  return data_off + stride * static_cast<size_t>(nslots);
}

void ring_init(void* mem, int nslots, size_t slot_bytes) {
  auto* h = new (mem) RingHeader();
  h->tail.store(0);
  h->producer_waiting.store(0);
  h->producer_closed.store(0);
  h->producer_why.store(kClosedNormally);
  h->head.store(0);
  h->consumer_waiting.store(0);
  h->consumer_closed.store(0);
  h->consumer_why.store(kClosedNormally);
  h->magic = kRingMagic;
  h->version = kRingVersion;
  h->nslots = static_cast<uint32_t>(nslots);
  h->reserved = 0;
  h->slot_bytes = slot_bytes;
  h->slot_stride = round_up(slot_bytes, 64);
  h->meta_offset = round_up(sizeof(RingHeader), 64);
  h->data_offset = round_up(h->meta_offset + sizeof(SlotMeta) * static_cast<size_t>(nslots), 4096);
  h->total_bytes = ring_bytes(nslots, slot_bytes);
  h->producer_pid.store(0);
  h->consumer_pid.store(0);
  h->producer_start = 0;
  h->consumer_start = 0;
  std::memset(h->producer_note, 0, sizeof h->producer_note);
  std::memset(h->consumer_note, 0, sizeof h->consumer_note);
  std::memset(static_cast<uint8_t*>(mem) + h->meta_offset, 0, sizeof(SlotMeta) * static_cast<size_t>(nslots));
}

void ring_close(RingHeader* hdr, bool producer, CloseWhy why, const std::string& note) {
  char* dst = producer ? hdr->producer_note : hdr->consumer_note;
  std::atomic<uint32_t>& w = producer ? hdr->producer_why : hdr->consumer_why;
  std::atomic<uint32_t>& closed = producer ? hdr->producer_closed : hdr->consumer_closed;
  if (why != kClosedNormally && w.load(std::memory_order_acquire) == kClosedNormally) {
    const size_t n = std::min(note.size(), kCloseNoteBytes - 1);
    std::memcpy(dst, note.data(), n);
    dst[n] = '\0';
    w.store(why, std::memory_order_release);
  }
  closed.store(1, std::memory_order_seq_cst);
  futex_wake(producer ? &hdr->tail : &hdr->head);
}

std::string ring_close_note(const RingHeader* hdr, bool producer, CloseWhy* why) {
  const std::atomic<uint32_t>& w = producer ? hdr->producer_why : hdr->consumer_why;
  const uint32_t v = w.load(std::memory_order_acquire);
  *why = (v == kClosedCorrupt || v == kClosedAborted) ? CloseWhy(v) : kClosedNormally;
  if (*why == kClosedNormally) return "";
  const char* src = producer ? hdr->producer_note : hdr->consumer_note;
  return std::string(src, strnlen(src, kCloseNoteBytes));
}

// ---- link group ---------------------------------------------------------------

LinkGroup::LinkGroup(int rank, bool checksum, Fault fault, std::shared_ptr<AbortFlag> abort)
    : rank_(rank), checksum_(checksum), fault_(fault), abort_(std::move(abort)) {}

void LinkGroup::join(RingEnd* end) {
  bool late;
  std::string note;
  CloseWhy why;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ends_.push_back(end);
    late = poisoned_.load();
    note = note_;
    why = why_.load();
  }
  if (late) end->close(why, note);
}

void LinkGroup::leave(RingEnd* end) {
  std::lock_guard<std::mutex> lk(mu_);
  ends_.erase(std::remove(ends_.begin(), ends_.end(), end), ends_.end());
}

int LinkGroup::add_listener(std::function<void()> f) {
  std::lock_guard<std::mutex> lk(mu_);
  listeners_.emplace_back(next_listener_, std::move(f));
  return next_listener_++;
}

void LinkGroup::remove_listener(int id) {
  std::lock_guard<std::mutex> lk(mu_);
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(), [id](const auto& l) { return l.first == id; }),
                   listeners_.end());
}

void LinkGroup::abort(const std::string& note) {
  const std::string n = note.empty() ? "a peer aborted the communicator" : note;
  if (abort_) abort_->set(n);
  close(kClosedAborted, n);
}

void LinkGroup::close(CloseWhy why, const std::string& note) {
  std::lock_guard<std::mutex> lk(mu_);
  if (poisoned_.load()) return;
  note_ = !note.empty()           ? note
          : why == kClosedCorrupt ? "a peer reported corrupt data"
                                  : "a peer aborted the communicator";
  why_.store(why, std::memory_order_release);
  poisoned_.store(true, std::memory_order_release);
  for (RingEnd* e : ends_) e->close(why, note_);
  for (auto& l : listeners_) l.second();
}

CloseWhy LinkGroup::peer_notice(std::string* note) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const RingEnd* e : ends_) {
    const CloseWhy why = e->other_side(note);
    if (why != kClosedNormally) return why;
  }
  return kClosedNormally;
}

std::string LinkGroup::note() const {
  std::lock_guard<std::mutex> lk(mu_);
  return note_;
}

bool LinkGroup::fault_now(int peer, bool header) {
  if (fault_.rank != rank_ || fault_.peer != peer || fault_.header != header) return false;
  return fault_count_.fetch_add(1) == fault_.slot;
}

void ring_validate(const void* mem, size_t mapped_bytes, int nslots, size_t slot_bytes, const std::string& who) {
  if (mapped_bytes < sizeof(RingHeader)) throw RemoteError(who + ": shared ring too small");
  const auto* h = static_cast<const RingHeader*>(mem);
  if (h->magic != kRingMagic || h->version != kRingVersion) {
    throw RemoteError(who + ": shared ring has a bad magic/version (mixed ncclz versions?)");
  }
  if (h->nslots != static_cast<uint32_t>(nslots) || h->slot_bytes != slot_bytes ||
      h->total_bytes != ring_bytes(nslots, slot_bytes) || h->total_bytes > mapped_bytes) {
    throw RemoteError(who + ": the peer made a ring of " + std::to_string(h->nslots) + " x " +
                      std::to_string(h->slot_bytes) + " bytes, this rank expects " + std::to_string(nslots) + " x " +
                      std::to_string(slot_bytes) + " (NCCLZ_NSLOTS / NCCLZ_SLOT_BYTES differ between ranks?)");
  }
}

RingView::RingView(void* mem) {
  if (!mem) return;
  hdr = static_cast<RingHeader*>(mem);
  auto* base = static_cast<uint8_t*>(mem);
  meta = reinterpret_cast<SlotMeta*>(base + hdr->meta_offset);
  data = base + hdr->data_offset;
  nslots = hdr->nslots;
  slot_bytes = hdr->slot_bytes;
  stride = hdr->slot_stride;
}

std::shared_ptr<void> make_heap_ring(int nslots, size_t slot_bytes) {
  size_t n = ring_bytes(nslots, slot_bytes);
  void* p = std::aligned_alloc(4096, round_up(n, 4096));
  if (!p) throw SystemError("cannot allocate a ring of " + std::to_string(n) + " bytes (out of memory)");
  ring_init(p, nslots, slot_bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// ---- waiting ---------------------------------------------------------------

namespace {

std::string fmt_limit(Clock::duration d) { return fmt_s(std::chrono::duration<double>(d).count()); }

}  // namespace

// ---- the waits' poll budget (per thread; LinkGroup::poll_ns) ------------------

namespace {

// Every LinkGroup::set_wait takes a new epoch: a thread's budget belongs to
// one group and epoch, and starts again at spin_ns when either changes.
std::atomic<uint64_t> g_wait_epochs{0};

struct PollBudget {
  const LinkGroup* group = nullptr;
  uint64_t epoch = 0;
  int64_t ns = 0;
  uint32_t probe = 0;
};
thread_local PollBudget t_poll;
thread_local int t_short_waits = 0;

}  // namespace

ShortWaits::ShortWaits() { ++t_short_waits; }
ShortWaits::~ShortWaits() { --t_short_waits; }
bool ShortWaits::active() { return t_short_waits > 0; }

void LinkGroup::set_wait(int pause_iters, int64_t spin_ns) {
  pause_iters_.store(pause_iters, std::memory_order_relaxed);
  spin_ns_.store(spin_ns, std::memory_order_relaxed);
  wait_epoch_.store(g_wait_epochs.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_release);
}

int64_t LinkGroup::poll_ns() {
  if (pause_iters() == 0 && !ShortWaits::active()) return 0;  // ranks outnumber CPUs: short waits only
  const uint64_t epoch = wait_epoch_.load(std::memory_order_acquire);
  PollBudget& b = t_poll;
  if (b.group != this || b.epoch != epoch) b = PollBudget{this, epoch, spin_ns(), 0};
  if (b.ns > 0) return b.ns;
  return (++b.probe & 31) == 0 ? spin_ns() / 8 : 0;
}

void LinkGroup::poll_done(bool hit) {
  PollBudget& b = t_poll;
  if (b.group != this) return;
  const int64_t max = spin_ns();
  int64_t next = hit ? std::min(max, std::max(b.ns, max / 8) + max / 8) : b.ns / 2;
  b.ns = next < max / 64 ? 0 : next;
}

// Waits until ready(*word). `other_producer`: whether the side this end
// waits on is the ring's producer (a receiver waits on the producer, a sender
// on the consumer); its closed flag and reason decide what a close means.
template <class Ready>
static void ring_wait(RingHeader* h, bool other_producer, std::atomic<uint32_t>* word,
                      std::atomic<uint32_t>* waiting_flag, Ready ready, Clock::time_point deadline,
                      const AbortFlag* abort, RingHooks* hooks, LinkGroup* group, const ConnLabel& label,
                      const char* what, const char* closed_msg) {
  const std::atomic<uint32_t>* closed = other_producer ? &h->producer_closed : &h->consumer_closed;
  // The other side closed because corrupt data was found or its communicator
  // was aborted: pass the notice on to this rank's other peers, then fail
  // with it.
  auto throw_if_noted = [&] {
    if (!closed->load(std::memory_order_acquire)) return;
    CloseWhy why;
    const std::string note = ring_close_note(h, other_producer, &why);
    if (why == kClosedCorrupt) {
      if (group) group->poison(note);
      throw CorruptData(label.prefix() + ": the call failed on every rank because " + note + "." + kCorruptAdvice);
    }
    if (why == kClosedAborted) {
      if (group) group->abort(note);
      throw Aborted(label.prefix() + ": aborted while waiting for " + what + ": " + note);
    }
  };
  if (ready(word->load(std::memory_order_acquire))) return;
  // A short pause spin where the ranks have a CPU each (none where they
  // outnumber the CPUs: the rank this one waits for may need this CPU).
  const int pauses = group ? group->pause_iters() : kSpinIters;
  for (int i = 0; i < pauses; ++i) {
    cpu_relax();
    if (ready(word->load(std::memory_order_acquire))) return;
  }
  // Then poll, giving the CPU to whatever else is ready between checks: a
  // short wait then ends without a sleep and a wake-up (a futex round trip is
  // tens of microseconds on a VM, and a rank that sleeps must be woken by the
  // peer it waits for). How long: the group's adaptive budget
  // (LinkGroup::poll_ns), which grows while polls succeed and halves when one
  // runs out: where ranks outnumber CPUs, sched_yield hands the CPU to a ready
  // rank only when the fair scheduler deems this one ahead of it, and on a
  // loaded machine a long poll burns this rank's share of the CPU before the
  // awaited rank runs (bench/results/latency.md).
  // The wait starts here (its poll counts as time without progress): the
  // budget is the caller's whole timeout, as the message reports it.
  const auto start = Clock::now();
  if (const int64_t budget_ns = group ? group->poll_ns() : 0) {
    const auto until = start + std::chrono::nanoseconds(budget_ns);
    do {
      sched_yield();
      if (ready(word->load(std::memory_order_acquire))) {
        group->poll_done(true);
        return;
      }
    } while (Clock::now() < until);
    group->poll_done(false);
  }
  // The budget without progress, and what progress looks like.
  const auto budget = deadline - start;
  uint32_t seen_word = word->load(std::memory_order_acquire);
  uint64_t seen_bytes = hooks ? hooks->progress() : 0;
  auto last_progress = start;
  bool slept = false;
  for (;;) {
    if (abort && abort->aborted.load(std::memory_order_acquire)) {
      throw Aborted(label.prefix() + ": aborted while waiting for " + what + ": " + abort->reason);
    }
    if (closed->load(std::memory_order_acquire)) {
      if (ready(word->load(std::memory_order_acquire))) return;
      throw_if_noted();
      std::string why = hooks ? hooks->closed_reason() : std::string();
      if (!why.empty()) throw RemoteError(label.prefix() + ": " + why + " while this rank waited for " + what);
      throw RemoteError(label.prefix() + ": " + closed_msg + " while this rank waited for " + what);
    }
    if (hooks) {
      // A peer that posted what we wait for and then exited has done its
      // part: deliver what it left before reporting it dead.
      try {
        hooks->check_peer();
      } catch (const RemoteError&) {
        if (ready(word->load(std::memory_order_acquire))) return;
        throw_if_noted();  // a peer that found corrupt data or aborted, and exited
        throw;
      }
    }
    if (slept) {
      if (const char* why = base::poll_interrupt()) {
        throw Interrupted(label.prefix() + ": interrupted (" + why + ") while waiting for " + what);
      }
      // A notice on another of this transport's links (another peer aborted
      // or found corrupt data): pass it on and fail with it, as for this one.
      std::string note;
      const CloseWhy why = group ? group->peer_notice(&note) : kClosedNormally;
      if (why == kClosedCorrupt) {
        group->poison(note);
        throw CorruptData(label.prefix() + ": the call failed on every rank because " + note + "." + kCorruptAdvice);
      }
      if (why == kClosedAborted) {
        group->abort(note);
        throw Aborted(label.prefix() + ": aborted while waiting for " + what + ": " + note);
      }
    }
    auto now = Clock::now();
    const uint32_t w = word->load(std::memory_order_acquire);
    const uint64_t b = hooks ? hooks->progress() : 0;
    if (w != seen_word || b != seen_bytes) {  // progress: the budget starts again
      seen_word = w;
      seen_bytes = b;
      last_progress = now;
      deadline = Clock::time_point::max() - now < budget ? Clock::time_point::max() : now + budget;
    }
    if (now >= deadline) {
      const double idle = std::chrono::duration<double>(now - last_progress).count();
      std::string msg = label.prefix() + ": timed out: no progress for " + fmt_s(idle) + " s (the limit is " +
                        fmt_limit(budget) + " s: NCCLZ_TIMEOUT or the call's timeout) while waiting for " + what;
      if (last_progress != start) {
        msg += " (the wait began " + fmt_s(std::chrono::duration<double>(now - start).count()) + " s ago)";
      }
      msg += "; peer rank " + std::to_string(label.peer) +
             " is stuck, not making the same call, or its link stalled (raise the timeout if it is just slow to "
             "start the call)";
      throw Timeout(msg);
    }
    waiting_flag->store(1, std::memory_order_seq_cst);
    uint32_t v = word->load(std::memory_order_seq_cst);
    if (ready(v)) {
      waiting_flag->store(0, std::memory_order_relaxed);
      return;
    }
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    futex_wait(word, v, static_cast<int>(std::min<long long>(left_ms, kWaitSliceMs)));
    slept = true;
    waiting_flag->store(0, std::memory_order_relaxed);
    if (ready(word->load(std::memory_order_acquire))) return;
  }
}

// ---- sending end -------------------------------------------------------------

RingSendConn::RingSendConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label,
                           std::shared_ptr<AbortFlag> abort, std::unique_ptr<RingHooks> hooks)
    : owner_(std::move(owner)), ring_(ring_mem), label_(label), abort_(std::move(abort)), hooks_(std::move(hooks)) {
  tail_ = ring_.hdr->tail.load(std::memory_order_acquire);
}

RingSendConn::~RingSendConn() {
  if (group_) group_->leave(this);
  ring_close(ring_.hdr, true, kClosedNormally, "");
  if (hooks_) hooks_->notify();
}

void RingSendConn::join(std::shared_ptr<LinkGroup> group) {
  group_ = std::move(group);
  checksum_ = group_->checksum();
  group_->join(this);
}

void RingSendConn::close(CloseWhy why, const std::string& note) {
  ring_close(ring_.hdr, true, why, note);
  if (hooks_) hooks_->notify();
}

CloseWhy RingSendConn::other_side(std::string* note) const {
  if (!ring_.hdr->consumer_closed.load(std::memory_order_acquire)) return kClosedNormally;
  CloseWhy why;
  *note = ring_close_note(ring_.hdr, false, &why);
  return why;
}

uint8_t* RingSendConn::acquire(Clock::time_point deadline) {
  if (!acquired_) {
    const uint32_t k = ring_.nslots;
    const uint32_t t = tail_;
    RingHeader* h = ring_.hdr;
    ring_wait(
        h, false, &h->head, &h->producer_waiting, [t, k](uint32_t head) { return t - head < k; }, deadline,
        abort_.get(), hooks_.get(), group_.get(), label_,
        "a free slot to send into (the receiver has not released its slots)",
        "the receiving side closed the connection");
    acquired_ = true;
  }
  return ring_.slot(tail_);
}

void RingSendConn::post(size_t bytes) {
  if (!acquired_) {
    throw InvalidArgument(label_.prefix() + ": post() without a preceding acquire()");
  }
  if (bytes > ring_.slot_bytes) {
    throw InvalidArgument(label_.prefix() + ": post of " + std::to_string(bytes) + " bytes into a slot of " +
                          std::to_string(ring_.slot_bytes) + " bytes");
  }
  SlotMeta& m = ring_.meta_of(tail_);
  m.bytes = bytes;
  m.crc = checksum_ ? base::crc32c(ring_.slot(tail_), bytes) : 0;
  if (group_ && group_->fault_now(label_.peer, false) && bytes > 0) {  // test hook: corrupt it in flight
    const uint64_t bit = group_->fault().bit % (uint64_t(bytes) * 8);
    ring_.slot(tail_)[bit / 8] ^= uint8_t(1u << (bit % 8));
  }
  ++tail_;
  acquired_ = false;
  RingHeader* h = ring_.hdr;
  h->tail.store(tail_, std::memory_order_seq_cst);
  if (h->consumer_waiting.load(std::memory_order_seq_cst)) futex_wake(&h->tail);
  if (hooks_) hooks_->notify();
}

void RingSendConn::flush(Clock::time_point deadline) {
  if (!hooks_ || !hooks_->flush_waits_for_drain()) {
    if (abort_ && abort_->aborted.load(std::memory_order_acquire)) {
      throw Aborted(label_.prefix() + ": aborted in flush: " + abort_->reason);
    }
    return;
  }
  const uint32_t t = tail_;
  RingHeader* h = ring_.hdr;
  ring_wait(
      h, false, &h->head, &h->producer_waiting, [t](uint32_t head) { return head == t; }, deadline, abort_.get(),
      hooks_.get(), group_.get(), label_, "the posted slots to be written to the network", "the connection failed");
}

// ---- receiving end -----------------------------------------------------------

RingRecvConn::RingRecvConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label,
                           std::shared_ptr<AbortFlag> abort, std::unique_ptr<RingHooks> hooks)
    : owner_(std::move(owner)), ring_(ring_mem), label_(label), abort_(std::move(abort)), hooks_(std::move(hooks)) {
  head_ = ring_.hdr->head.load(std::memory_order_acquire);
}

RingRecvConn::~RingRecvConn() {
  if (group_) group_->leave(this);
  ring_close(ring_.hdr, false, kClosedNormally, "");
  if (hooks_) hooks_->notify();
}

void RingRecvConn::join(std::shared_ptr<LinkGroup> group) {
  group_ = std::move(group);
  checksum_ = group_->checksum();
  group_->join(this);
}

void RingRecvConn::close(CloseWhy why, const std::string& note) {
  ring_close(ring_.hdr, false, why, note);
  if (hooks_) hooks_->notify();
}

CloseWhy RingRecvConn::other_side(std::string* note) const {
  if (!ring_.hdr->producer_closed.load(std::memory_order_acquire)) return kClosedNormally;
  CloseWhy why;
  *note = ring_close_note(ring_.hdr, true, &why);
  return why;
}

SlotView RingRecvConn::wait(Clock::time_point deadline) {
  if (waited_) return view_;
  const uint32_t hd = head_;
  RingHeader* h = ring_.hdr;
  ring_wait(
      h, true, &h->tail, &h->consumer_waiting, [hd](uint32_t tail) { return tail != hd; }, deadline, abort_.get(),
      hooks_.get(), group_.get(), label_, "the next slot from the sender",
      "the sending side closed the connection (it exited or destroyed its communicator)");
  const SlotMeta& m = ring_.meta_of(head_);
  const uint64_t n = m.bytes;
  if (n > ring_.slot_bytes) {
    throw RemoteError(label_.prefix() + ": the sender posted " + std::to_string(n) + " bytes in a slot of " +
                      std::to_string(ring_.slot_bytes) + " bytes (corrupt ring)");
  }
  if (checksum_) {
    const uint32_t got = base::crc32c(ring_.slot(head_), size_t(n));
    if (got != m.crc) {
      // Say where, tell every peer (they fail with this note too), then fail.
      const std::string note = "rank " + std::to_string(label_.rank) + " received corrupt data from rank " +
                               std::to_string(label_.peer) + " (" + label_.transport + " transport, channel " +
                               std::to_string(label_.channel) + ", slot " + std::to_string(head_) +
                               " of that connection, " + std::to_string(n) + " bytes: CRC-32C " + hex32(got) +
                               ", the sender's " + hex32(m.crc) + ")";
      group_->poison(note);
      throw CorruptData(label_.prefix() + ": " + note + "; nothing of it was used." + kCorruptAdvice);
    }
  }
  view_.data = ring_.slot(head_);
  view_.bytes = static_cast<size_t>(n);
  waited_ = true;
  return view_;
}

void RingRecvConn::release() {
  if (!waited_) throw InvalidArgument(label_.prefix() + ": release() without a preceding wait()");
  waited_ = false;
  ++head_;
  RingHeader* h = ring_.hdr;
  h->head.store(head_, std::memory_order_seq_cst);
  if (h->producer_waiting.load(std::memory_order_seq_cst)) futex_wake(&h->head);
  if (hooks_) hooks_->notify();
}

// ---- process liveness --------------------------------------------------------

uint64_t process_start_time(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  // Fields after the command: 3 state, 4 ppid, ... 22 starttime.
  int field = 2;
  for (const char* q = p + 1; *q; ++q) {
    if (*q == ' ') {
      ++field;
      if (field == 22) return std::strtoull(q + 1, nullptr, 10);
    }
  }
  return 0;
}

bool process_alive(int pid, uint64_t start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return errno != ENOENT && errno != ESRCH;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return true;
  char state = p[2];
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  if (start != 0) {
    int field = 2;
    for (const char* q = p + 1; *q; ++q) {
      if (*q == ' ') {
        ++field;
        if (field == 22) return std::strtoull(q + 1, nullptr, 10) == start;
      }
    }
  }
  return true;
}

}  // namespace ncclz::transport
