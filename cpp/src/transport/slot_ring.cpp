#include "transport/slot_ring.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

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

}  // namespace

std::string ConnLabel::prefix() const {
  return std::string(transport) + " transport rank " + std::to_string(rank) + " (channel " +
         std::to_string(channel) + ", peer rank " + std::to_string(peer) + ")";
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

size_t ring_bytes(int nslots, size_t slot_bytes) {
  size_t sizes_off = round_up(sizeof(RingHeader), 64);
  size_t data_off = round_up(sizes_off + sizeof(uint64_t) * static_cast<size_t>(nslots), 4096);
  size_t stride = round_up(slot_bytes, 64);
  return data_off + stride * static_cast<size_t>(nslots);
}

void ring_init(void* mem, int nslots, size_t slot_bytes) {
  auto* h = new (mem) RingHeader();
  h->tail.store(0);
  h->producer_waiting.store(0);
  h->producer_closed.store(0);
  h->head.store(0);
  h->consumer_waiting.store(0);
  h->consumer_closed.store(0);
  h->magic = kRingMagic;
  h->version = kRingVersion;
  h->nslots = static_cast<uint32_t>(nslots);
  h->reserved = 0;
  h->slot_bytes = slot_bytes;
  h->slot_stride = round_up(slot_bytes, 64);
  h->sizes_offset = round_up(sizeof(RingHeader), 64);
  h->data_offset = round_up(h->sizes_offset + sizeof(uint64_t) * static_cast<size_t>(nslots), 4096);
  h->total_bytes = ring_bytes(nslots, slot_bytes);
  h->producer_pid.store(0);
  h->consumer_pid.store(0);
  h->producer_start = 0;
  h->consumer_start = 0;
  std::memset(static_cast<uint8_t*>(mem) + h->sizes_offset, 0, sizeof(uint64_t) * static_cast<size_t>(nslots));
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
  sizes = reinterpret_cast<uint64_t*>(base + hdr->sizes_offset);
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

template <class Ready>
static void ring_wait(std::atomic<uint32_t>* word, std::atomic<uint32_t>* waiting_flag,
                      const std::atomic<uint32_t>* closed, Ready ready, Clock::time_point deadline,
                      const AbortFlag* abort, RingHooks* hooks, const ConnLabel& label, const char* what,
                      const char* closed_msg) {
  for (int i = 0; i < kSpinIters; ++i) {
    if (ready(word->load(std::memory_order_acquire))) return;
    cpu_relax();
  }
  const auto start = Clock::now();
  for (;;) {
    if (abort && abort->aborted.load(std::memory_order_acquire)) {
      throw Aborted(label.prefix() + ": aborted while waiting for " + what + ": " + abort->reason);
    }
    if (closed->load(std::memory_order_acquire)) {
      if (ready(word->load(std::memory_order_acquire))) return;
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
        throw;
      }
    }
    auto now = Clock::now();
    if (now >= deadline) {
      throw Timeout(label.prefix() + ": timed out after " +
                    fmt_s(std::chrono::duration<double>(now - start).count()) + " s waiting for " + what +
                    " (peer rank " + std::to_string(label.peer) +
                    " is stuck, slower, or not running the same collective; raise NCCLZ_TIMEOUT if it is just slow)");
    }
    waiting_flag->store(1, std::memory_order_seq_cst);
    uint32_t v = word->load(std::memory_order_seq_cst);
    if (ready(v)) {
      waiting_flag->store(0, std::memory_order_relaxed);
      return;
    }
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    futex_wait(word, v, static_cast<int>(std::min<long long>(left_ms, kWaitSliceMs)));
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
  ring_.hdr->producer_closed.store(1, std::memory_order_seq_cst);
  futex_wake(&ring_.hdr->tail);
  if (hooks_) hooks_->notify();
}

uint8_t* RingSendConn::acquire(Clock::time_point deadline) {
  if (!acquired_) {
    const uint32_t k = ring_.nslots;
    const uint32_t t = tail_;
    RingHeader* h = ring_.hdr;
    ring_wait(&h->head, &h->producer_waiting, &h->consumer_closed,
              [t, k](uint32_t head) { return t - head < k; }, deadline, abort_.get(), hooks_.get(), label_,
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
  ring_.sizes[tail_ % ring_.nslots] = bytes;
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
  ring_wait(&h->head, &h->producer_waiting, &h->consumer_closed, [t](uint32_t head) { return head == t; }, deadline,
            abort_.get(), hooks_.get(), label_, "the posted slots to be written to the network",
            "the connection failed");
}

// ---- receiving end -----------------------------------------------------------

RingRecvConn::RingRecvConn(std::shared_ptr<void> owner, void* ring_mem, ConnLabel label,
                           std::shared_ptr<AbortFlag> abort, std::unique_ptr<RingHooks> hooks)
    : owner_(std::move(owner)), ring_(ring_mem), label_(label), abort_(std::move(abort)), hooks_(std::move(hooks)) {
  head_ = ring_.hdr->head.load(std::memory_order_acquire);
}

RingRecvConn::~RingRecvConn() {
  ring_.hdr->consumer_closed.store(1, std::memory_order_seq_cst);
  futex_wake(&ring_.hdr->head);
  if (hooks_) hooks_->notify();
}

SlotView RingRecvConn::wait(Clock::time_point deadline) {
  if (waited_) return view_;
  const uint32_t hd = head_;
  RingHeader* h = ring_.hdr;
  ring_wait(&h->tail, &h->consumer_waiting, &h->producer_closed, [hd](uint32_t tail) { return tail != hd; },
            deadline, abort_.get(), hooks_.get(), label_, "the next slot from the sender",
            "the sending side closed the connection (it exited or destroyed its communicator)");
  uint64_t n = ring_.sizes[head_ % ring_.nslots];
  if (n > ring_.slot_bytes) {
    throw RemoteError(label_.prefix() + ": the sender posted " + std::to_string(n) + " bytes in a slot of " +
                      std::to_string(ring_.slot_bytes) + " bytes (corrupt ring)");
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
