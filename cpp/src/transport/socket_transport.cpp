// Socket transport: ranks on different hosts, over TCP.
//
// Connections. Every rank listens on one TCP port, on the address of
// NCCLZ_SOCKET_IFNAME's interface if set, else on the address it advertised
// to the bootstrap; create_transport allgathers these endpoints. In connect()
// each (peer, channel) pair gets ONE full-duplex TCP connection (TCP_NODELAY;
// 4 MiB SO_SNDBUF/SO_RCVBUF when net.core.{w,r}mem_max allow it, else the
// kernel's autotuning): the lower rank connects, the higher one accepts. The
// connector's hello carries the transport key (job key + rank 0's nonce, known
// only to ranks that passed the bootstrap's token check), the connect() call
// number, both ranks and the channel; anything else is refused with a warning
// and the accepting rank keeps waiting until the deadline. The listener lives
// as long as the transport; connect() reads all hellos side by side (step 2),
// so connections idling in its backlog never delay the real ones. A bootstrap
// barrier ends connect().
//
// Data path. Both directions of a connection are slot rings in ordinary
// memory (slot_ring.hpp), so the prims only ever touch slot memory exactly as
// with the other transports. One PROXY THREAD PER connect() CALL (i.e. per
// communicator) serves all of that call's connections with one poll() loop:
//   - send ring: it is the consumer. For each posted slot it writes a 16-byte
//     frame header {u32 'NZSF', u32 slot counter, u64 bytes} followed by the
//     slot's bytes (sendmsg, non-blocking, partial writes resumed), then
//     advances head, which frees the slot for the sender; flush() waits for
//     head == tail, i.e. every posted slot is in the kernel's socket buffer.
//   - receive ring: it is the producer. When a slot is free it reads the next
//     frame header, checks magic, counter and length (a bad frame fails the
//     connection), reads the payload straight into the slot, stores the byte
//     count and advances tail.
// The prims wake the proxy through an eventfd, only when it sleeps in poll()
// (a seq_cst flag, as for the futex waiters); the proxy wakes prims waiters
// through the ring futexes.
//
// Throttle (NCCLZ_SOCKET_THROTTLE_GBPS > 0): a token bucket paces the bytes
// the proxy writes (all its connections together) to emulate a slower link
// on one host, without root or tc. It is emulation only: no added latency,
// no loss, and the receiving side is not limited.
//
// Errors. EOF, a reset, or a corrupt frame marks the connection failed: both
// rings are closed with the reason, so a pending or later wait throws
// RemoteError naming the peer and channel (after consuming what did arrive).
// Shutdown: when both local ends of a connection are destroyed its socket is
// shut down and closed; the proxy thread is stopped and joined when the last
// end goes away, after at most kDrainGrace spent writing still-posted slots.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/crc32c.hpp"
#include "base/log.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"
#include "transport/transport_impl.hpp"

namespace ncclz::transport {
namespace {

constexpr uint32_t kFrameMagic = 0x46535a4e;  // "NZSF"
constexpr uint32_t kHelloMagic = 0x48535a4e;  // "NZSH"
constexpr uint32_t kHelloVersion = 2;         // 2: 24-byte frame headers with CRCs
constexpr uint32_t kFrameData = 0, kFrameNotice = 1;
constexpr size_t kMaxNoticeBytes = 1024;
constexpr int kSocketBuffer = 4 << 20;
constexpr auto kDrainGrace = std::chrono::seconds(1);
constexpr auto kHelloTimeout = std::chrono::seconds(5);
constexpr size_t kMaxPendingHellos = 64;  // connections without a hello yet, beyond the expected ones
constexpr int kIdlePollMs = 100;

struct FrameHeader {
  uint32_t magic;  // kFrameMagic
  uint32_t seq;    // data: the slot counter; notice: 0
  uint32_t bytes;  // bytes after the header
  uint32_t crc;    // data: the slot's CRC-32C (0 with checksums off); notice: the note's
  uint32_t kind;   // kFrameData, kFrameNotice
  uint32_t hcrc;   // CRC-32C of the 20 bytes before (always)
};
static_assert(sizeof(FrameHeader) == 24, "frame header is 24 bytes");

FrameHeader make_frame(uint32_t kind, uint32_t seq, uint32_t bytes, uint32_t crc) {
  FrameHeader h{kFrameMagic, seq, bytes, crc, kind, 0};
  h.hcrc = base::crc32c(&h, offsetof(FrameHeader, hcrc));
  return h;
}

struct Hello {
  uint32_t magic;
  uint32_t version;
  char key[64];
  int32_t gen;
  int32_t src;
  int32_t dst;
  int32_t channel;
};

struct EndpointMsg {
  char host[64];
  int32_t port;
};

// SO_SNDBUF/SO_RCVBUF only when the kernel lets us have the full size: a
// clamped explicit size would be worse than autotuning.
int socket_buffer_bytes() {
  auto read_max = [](const char* path) -> long {
    FILE* f = std::fopen(path, "re");
    if (!f) return 0;
    long v = 0;
    if (std::fscanf(f, "%ld", &v) != 1) v = 0;
    std::fclose(f);
    return v;
  };
  long w = read_max("/proc/sys/net/core/wmem_max"), r = read_max("/proc/sys/net/core/rmem_max");
  return (w >= kSocketBuffer && r >= kSocketBuffer) ? kSocketBuffer : 0;
}

// ---- the proxy ---------------------------------------------------------------

class SocketProxy {
 public:
  struct Conn {
    int peer = 0, channel = 0;
    ConnLabel label;
    net::Fd fd;
    std::shared_ptr<void> send_mem, recv_mem;
    RingView send, recv;  // proxy: consumer of `send`, producer of `recv`
    // Send progress: slots fully written, bytes of the current frame written.
    uint32_t send_done = 0;
    size_t send_off = 0;
    FrameHeader send_hdr{};
    // Receive progress: slots filled, bytes of the current frame read.
    uint32_t recv_done = 0;
    size_t recv_off = 0;
    FrameHeader recv_hdr{};
    bool finished = false;  // socket closed (failed or both ends gone)
    std::atomic<bool> failed{false};
    std::string error;                                             // written before `failed`
    std::atomic<bool> send_end_gone{false}, recv_end_gone{false};  // the local ends were destroyed
    // Corrupt-data notices: the one this proxy sends (kNoticeNone until the
    // group is poisoned), and the one it reads from the peer.
    int notice = kNoticeNone;
    std::string notice_out;  // header + note
    size_t notice_off = 0;
    bool reading_done = false;  // a notice arrived, or the stream cannot be parsed any more
    std::string notice_in;
  };
  static constexpr int kNoticeNone = 0, kNoticePending = 1, kNoticeSent = 2;

  SocketProxy(std::vector<std::unique_ptr<Conn>> conns, double throttle_gbps, int rank,
              std::shared_ptr<LinkGroup> group)
      : conns_(std::move(conns)), rank_(rank), group_(std::move(group)) {
    int e = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e < 0) throw SystemError("socket transport: " + net::errno_text("eventfd", errno));
    efd_.reset(e);
    if (throttle_gbps > 0) {
      rate_ = throttle_gbps * 1e9 / 8;  // bytes per second
      burst_ = std::max(256.0 * 1024, rate_ * 0.002);
      tokens_ = burst_;
      last_refill_ = Clock::now();
    }
    listener_ = group_->add_listener([this] { poke(); });
    thread_ = std::thread([this] {
      try {
        run();
      } catch (const std::exception& e) {  // never terminate the process from the proxy
        for (auto& c : conns_) fail(*c, std::string("proxy thread error: ") + e.what());
      }
    });
  }

  ~SocketProxy() {
    group_->remove_listener(listener_);
    stop_deadline_ = Clock::now() + kDrainGrace;
    stop_.store(true);
    poke();
    thread_.join();
    for (auto& c : conns_) {
      if (c->fd) ::shutdown(c->fd.get(), SHUT_RDWR);
    }
  }

  Conn* conn(size_t i) { return conns_[i].get(); }

  /// Wakes the proxy if it sleeps in poll() (called after posts and releases).
  void wake() {
    if (sleeping_.load(std::memory_order_seq_cst)) poke();
  }

  /// Wakes the proxy unconditionally (a local end went away).
  void poke() {
    uint64_t one = 1;
    ssize_t w = ::write(efd_.get(), &one, sizeof one);
    (void)w;
  }

 private:
  void fail(Conn& c, const std::string& why) {
    if (c.failed.load()) return;
    c.error = "socket connection to peer rank " + std::to_string(c.peer) + " (channel " + std::to_string(c.channel) +
              ") failed: " + why;
    c.failed.store(true, std::memory_order_seq_cst);
    if (!local_gone(c)) NCCLZ_INFO(rank_, "%s", c.error.c_str());
    ring_close(c.send.hdr, false, kClosedNormally, "");
    ring_close(c.recv.hdr, true, kClosedNormally, "");
    finish(c);
  }

  void finish(Conn& c) {
    c.finished = true;
    if (c.fd) {
      ::shutdown(c.fd.get(), SHUT_RDWR);
      c.fd.reset();
    }
  }

  static bool local_gone(const Conn& c) { return c.send_end_gone.load() && c.recv_end_gone.load(); }

  bool send_pending(const Conn& c) const {
    if (c.finished) return false;
    if (c.notice == kNoticePending) return true;
    if (c.notice == kNoticeSent) return false;
    return c.send.hdr->tail.load(std::memory_order_seq_cst) != c.send_done;
  }
  bool recv_room(const Conn& c) const {
    return c.recv_done - c.recv.hdr->head.load(std::memory_order_seq_cst) < c.recv.nslots;
  }
  // Whether the proxy wants bytes from this socket: a frame header may always
  // be read (a corrupt-data notice must get through a full ring), a data
  // frame's payload only into a free slot.
  bool want_read(const Conn& c) const {
    if (c.finished || c.reading_done) return false;
    if (c.recv_off < sizeof(FrameHeader) || c.recv_hdr.kind == kFrameNotice) return true;
    return recv_room(c);
  }

  void refill() {
    auto now = Clock::now();
    tokens_ = std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_refill_).count());
    last_refill_ = now;
  }

  // Bytes the throttle must have before a write of `left` more bytes (no
  // dribbling of tiny writes).
  static double throttle_need(size_t left) { return static_cast<double>(std::min<size_t>(left, 64 << 10)); }

  // The group was poisoned: every connection closes its proxy-side ring ends
  // with the note (local waiters fail with CorruptData) and, after the frame
  // it may be writing, sends the note to its peer instead of further slots.
  void apply_poison() {
    if (poison_applied_ || !group_->poisoned()) return;
    poison_applied_ = true;
    const std::string note = group_->note().substr(0, kMaxNoticeBytes);
    for (auto& cp : conns_) {
      Conn& c = *cp;
      ring_close(c.send.hdr, false, kClosedCorrupt, note);
      ring_close(c.recv.hdr, true, kClosedCorrupt, note);
      if (c.finished) continue;
      FrameHeader h = make_frame(kFrameNotice, 0, uint32_t(note.size()), base::crc32c(note.data(), note.size()));
      c.notice_out.assign(reinterpret_cast<const char*>(&h), sizeof h);
      c.notice_out += note;
      c.notice = kNoticePending;
    }
  }

  // Writes the notice once the current frame (if any) is complete; then no
  // more data goes out on this connection, and its write side is shut down.
  bool progress_notice(Conn& c) {
    if (c.notice != kNoticePending || c.send_off != 0) return false;
    const size_t left = c.notice_out.size() - c.notice_off;
    ssize_t w = ::send(c.fd.get(), c.notice_out.data() + c.notice_off, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      c.notice = kNoticeSent;  // the peer is gone: nothing to tell
      return true;
    }
    c.notice_off += size_t(w);
    if (c.notice_off == c.notice_out.size()) {
      c.notice = kNoticeSent;
      ::shutdown(c.fd.get(), SHUT_WR);
    }
    return true;
  }

  // Writes as much of the posted slots as the socket (and throttle) take; at
  // most one ring's worth per call, so one busy connection cannot starve others.
  bool progress_send(Conn& c) {
    bool progressed = false;
    for (uint32_t round = 0; round < c.send.nslots && send_pending(c); ++round) {
      if (c.notice != kNoticeNone && c.send_off == 0) return progress_notice(c) || progressed;
      const uint32_t idx = c.send_done;
      const SlotMeta& m = c.send.meta_of(idx);
      const uint64_t n = m.bytes;
      if (n > c.send.slot_bytes) {
        fail(c, "the local sender posted " + std::to_string(n) + " bytes into a slot of " +
                    std::to_string(c.send.slot_bytes));
        return true;
      }
      if (c.send_off == 0) {
        c.send_hdr = make_frame(kFrameData, idx, uint32_t(n), m.crc);
        if (group_->fault_now(c.peer, true)) {  // test hook: a bit flipped on the wire
          const uint64_t bit = group_->fault().bit % (8 * sizeof(FrameHeader));
          reinterpret_cast<uint8_t*>(&c.send_hdr)[bit / 8] ^= uint8_t(1u << (bit % 8));
        }
      }
      const size_t total = sizeof(FrameHeader) + n;
      size_t allowed = total - c.send_off;
      if (rate_ > 0) {
        refill();
        if (tokens_ < throttle_need(allowed)) {
          throttle_wait_ = throttle_need(allowed) - tokens_;
          return progressed;
        }
        allowed = std::min(allowed, static_cast<size_t>(tokens_));
      }
      iovec iov[2];
      int cnt = 0;
      size_t left = allowed;
      if (c.send_off < sizeof(FrameHeader)) {
        size_t h = std::min(left, sizeof(FrameHeader) - c.send_off);
        iov[cnt++] = {reinterpret_cast<uint8_t*>(&c.send_hdr) + c.send_off, h};
        left -= h;
      }
      if (left > 0) {
        size_t off = c.send_off > sizeof(FrameHeader) ? c.send_off - sizeof(FrameHeader) : 0;
        iov[cnt++] = {c.send.slot(idx) + off, left};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(cnt);
      ssize_t w = ::sendmsg(c.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return progressed;
        fail(c, errno == EPIPE || errno == ECONNRESET
                    ? "the peer closed the connection (" + net::errno_text("send", errno) + "); it exited or failed"
                    : net::errno_text("send", errno));
        return true;
      }
      progressed = true;
      c.send_off += static_cast<size_t>(w);
      if (rate_ > 0) tokens_ -= static_cast<double>(w);
      if (c.send_off == total) {
        c.send_off = 0;
        c.send_done = idx + 1;
        c.send.hdr->head.store(c.send_done, std::memory_order_seq_cst);
        if (c.send.hdr->producer_waiting.load(std::memory_order_seq_cst)) futex_wake(&c.send.hdr->head);
      }
    }
    return progressed;
  }

  // The frame header just read does not check out: the stream cannot be
  // trusted from here on. Corrupt data: every peer is told.
  void corrupt_header(Conn& c, uint32_t idx, const std::string& what) {
    c.reading_done = true;
    group_->poison("rank " + std::to_string(rank_) + " received a corrupt frame header from rank " +
                   std::to_string(c.peer) + " (socket transport, channel " + std::to_string(c.channel) +
                   ", before slot " + std::to_string(idx) + " of that connection: " + what + ")");
  }

  // Checks a complete header; false when it is corrupt (reported).
  bool check_header(Conn& c, uint32_t idx) {
    const FrameHeader& h = c.recv_hdr;
    if (h.hcrc != base::crc32c(&h, offsetof(FrameHeader, hcrc))) {
      // (The hello checked the versions: a header of this connection that
      // does not match its CRC was damaged on the way.)
      corrupt_header(c, idx, "its CRC-32C does not match");
      return false;
    }
    if (h.magic != kFrameMagic || (h.kind != kFrameData && h.kind != kFrameNotice) ||
        (h.kind == kFrameData && (h.seq != idx || h.bytes > c.recv.slot_bytes)) ||
        (h.kind == kFrameNotice && h.bytes > kMaxNoticeBytes)) {
      fail(c, "unexpected frame (kind " + std::to_string(h.kind) + ", slot " + std::to_string(h.seq) + " expected " +
                  std::to_string(idx) + ", " + std::to_string(h.bytes) + " bytes for slots of " +
                  std::to_string(c.recv.slot_bytes) + "): mismatched ncclz versions or slot sizes?");
      return false;
    }
    return true;
  }

  // Reads frames: data frames into free receive slots, notices into notice_in.
  bool progress_recv(Conn& c) {
    bool progressed = false;
    while (want_read(c)) {
      const uint32_t idx = c.recv_done;
      uint8_t* dst;
      size_t want;
      if (c.recv_off < sizeof(FrameHeader)) {
        dst = reinterpret_cast<uint8_t*>(&c.recv_hdr) + c.recv_off;
        want = sizeof(FrameHeader) - c.recv_off;
      } else if (c.recv_hdr.kind == kFrameNotice) {
        const size_t off = c.recv_off - sizeof(FrameHeader);
        c.notice_in.resize(c.recv_hdr.bytes);
        dst = reinterpret_cast<uint8_t*>(&c.notice_in[0]) + off;
        want = c.recv_hdr.bytes - off;
      } else {
        const size_t off = c.recv_off - sizeof(FrameHeader);
        dst = c.recv.slot(idx) + off;
        want = c.recv_hdr.bytes - off;
      }
      ssize_t r = want ? ::recv(c.fd.get(), dst, want, MSG_DONTWAIT) : 0;
      if (want && r == 0) {
        fail(c, c.recv_off == 0 ? "the peer closed the connection (it exited or destroyed its communicator)"
                                : "the peer closed the connection in the middle of a frame");
        return true;
      }
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return progressed;
        fail(c, errno == ECONNRESET ? "the connection was reset by the peer (it exited or failed)"
                                    : net::errno_text("recv", errno));
        return true;
      }
      progressed = true;
      const size_t before = c.recv_off;
      c.recv_off += static_cast<size_t>(r);
      if (before < sizeof(FrameHeader) && c.recv_off == sizeof(FrameHeader)) {
        // Header just completed: check it before trusting its length, and
        // look again whether there is room for a data frame.
        if (!check_header(c, idx)) return true;
        continue;
      }
      if (c.recv_off < sizeof(FrameHeader) || c.recv_off != sizeof(FrameHeader) + c.recv_hdr.bytes) continue;
      c.recv_off = 0;
      if (c.recv_hdr.kind == kFrameNotice) {
        // The peer found corrupt data: pass its note on (this rank's waiters
        // and its other peers); the peer sends nothing after it.
        c.reading_done = true;
        if (base::crc32c(c.notice_in.data(), c.notice_in.size()) != c.recv_hdr.crc) {
          corrupt_header(c, idx, "a corrupt-data notice whose own CRC-32C does not match");
        } else {
          group_->poison(c.notice_in);
        }
        return true;
      }
      SlotMeta& m = c.recv.meta_of(idx);
      m.bytes = c.recv_hdr.bytes;
      m.crc = c.recv_hdr.crc;
      c.recv_done = idx + 1;
      c.recv.hdr->tail.store(c.recv_done, std::memory_order_seq_cst);
      if (c.recv.hdr->consumer_waiting.load(std::memory_order_seq_cst)) futex_wake(&c.recv.hdr->tail);
    }
    return progressed;
  }

  void run() {
    std::vector<pollfd> pfds;
    std::vector<Conn*> pconn;
    for (;;) {
      // Read before the rings are looked at: the destructor sets stop_ only
      // after every link is gone, so every post precedes it, and a pass that
      // starts stopping sees every posted slot. (Read after the pass, a post
      // made during the pass and the stop right after it could end the proxy
      // with that slot unwritten: a frame lost when a rank destroyed its links
      // right after posting, without flush().)
      const bool stopping = stop_.load();
      apply_poison();
      bool progressed = false;
      bool pending = false;
      throttle_wait_ = 0;
      for (auto& cp : conns_) {
        Conn& c = *cp;
        if (c.finished) continue;
        progressed |= progress_send(c);
        progressed |= progress_recv(c);
        if (c.finished) continue;
        // Both local ends gone and nothing left to write: close the socket.
        // (Ends destroyed during this pass may have poisoned the group just
        // before: their notice must go out first.)
        if (local_gone(c)) apply_poison();
        if (local_gone(c) && !send_pending(c)) {
          finish(c);
          continue;
        }
        pending |= send_pending(c);
      }
      if (stopping && (!pending || Clock::now() >= stop_deadline_)) return;
      if (progressed) continue;

      // Sleep in poll(): announce it first, then look at the rings again, so
      // that a post racing with us either is seen here or pokes the eventfd.
      sleeping_.store(1, std::memory_order_seq_cst);
      pfds.clear();
      pconn.clear();
      pfds.push_back({efd_.get(), POLLIN, 0});
      pconn.push_back(nullptr);
      int timeout = kIdlePollMs;
      for (auto& cp : conns_) {
        Conn& c = *cp;
        if (c.finished) continue;
        short ev = 0;
        if (send_pending(c)) {
          if (rate_ > 0 && throttle_wait_ > 0 && c.notice == kNoticeNone) {
            timeout = std::min(timeout, std::max(1, static_cast<int>(throttle_wait_ / rate_ * 1e3) + 1));
          } else {
            ev |= POLLOUT;
          }
        }
        if (want_read(c)) ev |= POLLIN;
        pfds.push_back({c.fd.get(), ev, 0});
        pconn.push_back(&c);
      }
      if (stop_.load()) timeout = std::min(timeout, 10);
      int rc = ::poll(pfds.data(), pfds.size(), timeout);
      sleeping_.store(0, std::memory_order_relaxed);
      if (rc > 0 && (pfds[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = ::read(efd_.get(), &v, sizeof v);
        (void)r;
      }
      for (size_t i = 1; rc > 0 && i < pfds.size(); ++i) {
        short re = pfds[i].revents;
        if ((re & (POLLERR | POLLHUP | POLLNVAL)) && !(re & POLLIN)) {
          Conn& c = *pconn[i];
          // Read what the peer left first: a notice it sent before closing.
          if (want_read(c)) progress_recv(c);
          if (c.finished) continue;
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          fail(c, err ? net::errno_text("socket", err) : "the peer closed the connection (hang-up)");
        }
      }
    }
  }

  std::vector<std::unique_ptr<Conn>> conns_;
  int rank_;
  std::shared_ptr<LinkGroup> group_;
  int listener_ = -1;
  bool poison_applied_ = false;
  net::Fd efd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Clock::time_point stop_deadline_{};
  std::atomic<uint32_t> sleeping_{0};
  // Throttle (token bucket, bytes).
  double rate_ = 0, burst_ = 0, tokens_ = 0;
  double throttle_wait_ = 0;  // tokens still missing for the next write (0: none)
  Clock::time_point last_refill_{};
};

class SocketHooks final : public RingHooks {
 public:
  SocketHooks(std::shared_ptr<SocketProxy> proxy, SocketProxy::Conn* conn, bool send)
      : proxy_(std::move(proxy)), conn_(conn), send_(send) {}
  // The end this hook belongs to is being destroyed (its ring is closed).
  ~SocketHooks() override {
    (send_ ? conn_->send_end_gone : conn_->recv_end_gone).store(true);
    proxy_->poke();
  }
  void notify() override { proxy_->wake(); }
  std::string closed_reason() override { return conn_->failed.load() ? conn_->error : std::string(); }
  bool flush_waits_for_drain() const override { return send_; }

 private:
  std::shared_ptr<SocketProxy> proxy_;
  SocketProxy::Conn* conn_;
  bool send_;
};

// ---- the transport -------------------------------------------------------------

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(TransportContext ctx) : ctx_(std::move(ctx)) {
    const int me = ctx_.bootstrap->rank();
    bufbytes_ = socket_buffer_bytes();
    std::string host;
    if (!ctx_.cfg.socket_ifname.empty()) {
      auto a = net::interface_address(ctx_.cfg.socket_ifname);
      if (!a) {
        throw InvalidArgument("socket transport rank " + std::to_string(me) + ": NCCLZ_SOCKET_IFNAME='" +
                              ctx_.cfg.socket_ifname + "' matches no interface with an address on this host");
      }
      host = *a;
    } else {
      host = ctx_.bootstrap->advertised_address();
    }
    listen_ = net::listen_tcp(host, 0, bufbytes_);
    EndpointMsg mine{};
    net::Endpoint ep = net::local_endpoint(listen_.get());
    std::strncpy(mine.host, ep.host.c_str(), sizeof mine.host - 1);
    mine.port = ep.port;
    std::vector<EndpointMsg> all(static_cast<size_t>(ctx_.bootstrap->size()));
    ctx_.bootstrap->allgather(&mine, sizeof mine, all.data());
    for (auto& a : all) {
      a.host[sizeof a.host - 1] = '\0';
      endpoints_.push_back(net::Endpoint{a.host, a.port});
    }
    NCCLZ_INFO(me, "socket transport: listening at %s%s", ep.str().c_str(),
               bufbytes_ ? ", 4 MiB socket buffers" : ", kernel-tuned socket buffers");
  }

  Kind kind() const override { return Kind::Socket; }

  std::vector<std::vector<PeerLink>> connect(const std::vector<int>& peers, int nchannels, Clock::time_point deadline,
                                             size_t slot_bytes) override {
    check_connect_args(ctx_, peers, nchannels);
    const size_t sb = slot_bytes ? slot_bytes : ctx_.cfg.slot_bytes;
    const int me = ctx_.bootstrap->rank();
    const int gen = gen_++;
    const size_t np = peers.size();
    // fds[c][i]: the socket to peers[i] on channel c.
    std::vector<std::vector<net::Fd>> fds(static_cast<size_t>(nchannels));
    for (auto& v : fds) v.resize(np);
    auto abort_check = [this] {
      if (ctx_.abort->aborted.load()) {
        throw Aborted("socket transport rank " + std::to_string(ctx_.bootstrap->rank()) +
                      ": aborted while connecting: " + ctx_.abort->reason);
      }
    };
    // 1. Connect to higher ranks and say hello.
    int expected = 0;
    for (int c = 0; c < nchannels; ++c) {
      for (size_t i = 0; i < np; ++i) {
        int p = peers[i];
        if (p == me) continue;
        if (p < me) {
          ++expected;
          continue;
        }
        std::string who = "socket transport rank " + std::to_string(me) + " -> rank " + std::to_string(p) +
                          " (channel " + std::to_string(c) + ")";
        net::Fd fd = net::connect_tcp(endpoints_[p], deadline, abort_check, /*retry_refused=*/true, who, bufbytes_);
        Hello h{};
        h.magic = kHelloMagic;
        h.version = kHelloVersion;
        std::strncpy(h.key, ctx_.key.c_str(), sizeof h.key - 1);
        h.gen = gen;
        h.src = me;
        h.dst = p;
        h.channel = c;
        net::send_all(fd.get(), &h, sizeof h, deadline, abort_check, who);
        fds[c][i] = std::move(fd);
      }
    }
    // 2. Accept the lower ranks' connections. Their hellos are read side by
    // side (one poll() over the listener and every pending connection), so an
    // idle or slow connection never delays a real rank: each has kHelloTimeout
    // from its accept to deliver its hello; at most kMaxPendingHellos (+ the
    // expected connections) wait at once, a new one beyond that closing the
    // oldest that sent nothing, else the oldest; a flood that exhausts this
    // process's descriptors is shed (net::accept_or_shed), never an error.
    struct Pending {
      net::Fd fd;
      net::Endpoint from;
      Clock::time_point until;
      Hello h{};
      size_t got = 0;
    };
    std::vector<Pending> pending;
    const size_t max_pending = kMaxPendingHellos + static_cast<size_t>(expected);
    size_t shed = 0;
    auto refuse = [&](const Pending& p, const std::string& why, bool stranger) {
      if (stranger) {
        NCCLZ_INFO(me, "socket transport: closed connection from %s: %s", p.from.str().c_str(), why.c_str());
      } else {
        NCCLZ_WARN(me, "socket transport: refused connection from %s: %s", p.from.str().c_str(), why.c_str());
      }
    };
    // A complete hello: takes the connection (true) or refuses it.
    auto take = [&](Pending& p) {
      Hello& h = p.h;
      h.key[sizeof h.key - 1] = '\0';
      if (h.magic != kHelloMagic || h.version != kHelloVersion) {
        refuse(p, "bad magic or version", h.magic != kHelloMagic);
        return false;
      }
      if (!net::equal_ct(h.key, std::strlen(h.key), ctx_.key.data(), ctx_.key.size())) {
        refuse(p, "wrong key (not a rank of this job)", false);
        return false;
      }
      int idx = -1;
      for (size_t i = 0; i < np; ++i) {
        if (peers[i] == h.src) idx = static_cast<int>(i);
      }
      if (h.gen != gen || h.dst != me || idx < 0 || h.src >= me || h.channel < 0 || h.channel >= nchannels ||
          fds[static_cast<size_t>(h.channel)][static_cast<size_t>(idx)]) {
        refuse(p,
               "unexpected connection (rank " + std::to_string(h.src) + ", channel " + std::to_string(h.channel) +
                   ", connect call " + std::to_string(h.gen) + ")",
               false);
        return false;
      }
      fds[static_cast<size_t>(h.channel)][static_cast<size_t>(idx)] = std::move(p.fd);
      --expected;
      return true;
    };
    // Makes room for one more: the oldest connection that sent nothing, else the oldest.
    auto evict_one = [&](const char* why) {
      if (pending.empty()) return;
      auto victim = std::find_if(pending.begin(), pending.end(), [](const Pending& p) { return p.got == 0; });
      if (victim == pending.end()) victim = pending.begin();
      refuse(*victim, why, true);
      pending.erase(victim);
    };
    std::vector<pollfd> pfd;
    while (expected > 0) {
      abort_check();
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string missing;
        for (int c = 0; c < nchannels; ++c) {
          for (size_t i = 0; i < np; ++i) {
            if (peers[i] < me && !fds[c][i]) {
              missing += (missing.empty() ? "" : ", ") + std::string("rank ") + std::to_string(peers[i]) + " channel " +
                         std::to_string(c);
            }
          }
        }
        throw Timeout("socket transport rank " + std::to_string(me) + ": timed out waiting for connections from " +
                      missing + " at " + net::local_endpoint(listen_.get()).str() +
                      " (are they running? can they reach this address? check NCCLZ_SOCKET_IFNAME and firewalls)");
      }
      auto wake = std::min(deadline, now + std::chrono::milliseconds(net::kPollSliceMs));
      for (auto it = pending.begin(); it != pending.end();) {
        if (now >= it->until) {
          refuse(*it, "no hello within " + std::to_string(kHelloTimeout.count()) + " s", it->got == 0);
          it = pending.erase(it);
        } else {
          wake = std::min(wake, it->until);
          ++it;
        }
      }
      pfd.assign(1, pollfd{listen_.get(), POLLIN, 0});
      for (const Pending& p : pending) pfd.push_back(pollfd{p.fd.get(), POLLIN, 0});
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      if (::poll(pfd.data(), static_cast<nfds_t>(pfd.size()), static_cast<int>(std::max<int64_t>(0, ms))) < 0) {
        if (errno == EINTR) continue;
        throw SystemError("socket transport rank " + std::to_string(me) + ": " + net::errno_text("poll", errno));
      }
      // Pending connections first, from the back, so that erasing one leaves
      // the poll entries of those not yet looked at in place.
      for (size_t k = pending.size(); k-- > 0;) {
        if (!pfd[k + 1].revents) continue;
        Pending& p = pending[k];
        const ssize_t n = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.h) + p.got, sizeof p.h - p.got, 0);
        if (n > 0) {
          p.got += static_cast<size_t>(n);
          if (p.got < sizeof p.h) continue;
          take(p);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          continue;
        } else {
          refuse(p, n == 0 ? "closed before its hello" : net::errno_text("recv", errno), p.got == 0);
        }
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
      }
      if (!pfd[0].revents) continue;
      for (int i = 0; i < 64; ++i) {  // bounded, so that pending hellos are read between bursts
        net::Fd fd;
        const net::AcceptResult r = net::accept_or_shed(listen_.get(), &fd);
        if (r == net::AcceptResult::Empty) break;
        if (r == net::AcceptResult::Shed) {
          ++shed;
          evict_one("closed to make room (out of file descriptors)");
          continue;
        }
        if (pending.size() >= max_pending) evict_one("closed to make room (too many connections without a hello)");
        net::Endpoint from = net::peer_endpoint(fd.get());
        pending.push_back(Pending{std::move(fd), std::move(from), Clock::now() + kHelloTimeout});
      }
    }
    if (shed > 0) {
      NCCLZ_WARN(me, "socket transport: out of file descriptors while connecting; closed %zu waiting connection(s)",
                 shed);
    }

    // 3. Rings, one proxy for all of them, and the links.
    std::vector<std::unique_ptr<SocketProxy::Conn>> conns;
    std::vector<std::vector<int>> conn_index(static_cast<size_t>(nchannels), std::vector<int>(np, -1));
    for (int c = 0; c < nchannels; ++c) {
      for (size_t i = 0; i < np; ++i) {
        if (peers[i] == me) continue;
        auto cn = std::make_unique<SocketProxy::Conn>();
        cn->peer = peers[i];
        cn->channel = c;
        cn->label = ConnLabel{"socket", me, peers[i], c};
        cn->fd = std::move(fds[c][i]);
        net::set_nodelay(cn->fd.get());
        cn->send_mem = make_heap_ring(ctx_.cfg.nslots, sb);
        cn->recv_mem = make_heap_ring(ctx_.cfg.nslots, sb);
        cn->send = RingView(cn->send_mem.get());
        cn->recv = RingView(cn->recv_mem.get());
        conn_index[c][i] = static_cast<int>(conns.size());
        conns.push_back(std::move(cn));
      }
    }
    std::shared_ptr<SocketProxy> proxy;
    if (!conns.empty()) proxy = std::make_shared<SocketProxy>(std::move(conns), ctx_.cfg.throttle_gbps, me, ctx_.group);
    std::vector<std::vector<PeerLink>> links(static_cast<size_t>(nchannels));
    for (int c = 0; c < nchannels; ++c) {
      for (size_t i = 0; i < np; ++i) {
        if (peers[i] == me) {
          links[c].push_back(make_self_link(ctx_, c, "socket", sb));
          continue;
        }
        SocketProxy::Conn* cn = proxy->conn(static_cast<size_t>(conn_index[c][i]));
        PeerLink link;
        link.send = std::make_unique<RingSendConn>(cn->send_mem, cn->send_mem.get(), cn->label, ctx_.abort,
                                                   std::make_unique<SocketHooks>(proxy, cn, true));
        link.recv = std::make_unique<RingRecvConn>(cn->recv_mem, cn->recv_mem.get(), cn->label, ctx_.abort,
                                                   std::make_unique<SocketHooks>(proxy, cn, false));
        links[c].push_back(std::move(link));
      }
    }
    ctx_.bootstrap->barrier();
    return links;
  }

 private:
  TransportContext ctx_;
  int bufbytes_ = 0;
  net::Fd listen_;
  std::vector<net::Endpoint> endpoints_;
  int gen_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_socket_transport(TransportContext ctx) {
  return std::make_unique<SocketTransport>(std::move(ctx));
}

}  // namespace ncclz::transport
