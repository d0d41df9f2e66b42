// Shared-memory transport: ranks are processes on one host.
//
// Each direction of each (peer, channel) connection is one slot ring
// (slot_ring.hpp) in its own POSIX shared-memory segment, named
//   /ncclz-<job key>-<transport nonce>-g<connect call>-<src>-<dst>-c<channel>
// Setup (inside connect(), collective):
//   1. the receiving rank creates the segment (O_EXCL, 0600), reserves its
//      pages with posix_fallocate (a full /dev/shm is an error now, not a
//      SIGBUS later) and initializes the ring, recording its pid and start time;
//   2. it tells the sender through a bootstrap message (or tells it that
//      creation failed, so the sender fails fast too);
//   3. the sender maps the segment, records its pid and start time, and
//      unlinks the name at once: from then on nothing is left in /dev/shm,
//      even if both processes crash. (The receiver also unlinks on
//      destruction, for a sender that never came.) A name the receiver
//      announced but that is gone when the sender opens it, with both on one
//      /dev/shm (the message carries its st_dev), was removed by the
//      receiver's failed connect(): a RemoteError naming it; on another
//      /dev/shm (containers) a SystemError that says so;
//   4. a bootstrap allgather of every rank's process identity (pid, start
//      time, pid namespace) ends connect(), so no rank tears its rings down
//      before all are mapped, and every ring knows its peer process from the
//      start.
// A connect() that fails on this rank (a peer died or failed, a timeout)
// unlinks every segment name of that call between this rank and its peers,
// in both directions: the ones a dead peer created for this rank to open are
// gone too, so a rank killed at any moment of setup leaves nothing in
// /dev/shm once the survivors have failed. (Names start with the job key,
// whose head is the launcher's job tag: ncclz-run removes what ranks it had
// to SIGKILL left behind.)
// Waiting is the ring's spin-then-futex; while waiting, every ~100 ms a rank
// checks that the peer process still runs (/proc/<pid>/stat: present, not a
// zombie, same start time), so a killed peer is reported in ~0.1 s as
// RemoteError("... peer rank R (pid P) died ...") instead of at the deadline,
// also when it died before the first call. A peer in another pid namespace
// (its pid means nothing here) is not watched: the deadline bounds the wait.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"
#include "transport/transport_impl.hpp"

namespace ncclz::transport {
namespace {

constexpr int kShmTagBase = 0x53480000;  // "SH" + connect call
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

// A mapped segment; unmapped (and, for the creator, unlinked) on destruction.
struct ShmSegment {
  void* mem = nullptr;
  size_t bytes = 0;
  std::string name;
  bool unlink_on_close = false;
  ShmSegment() = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment() {
    if (mem) munmap(mem, bytes);
    if (unlink_on_close) shm_unlink(name.c_str());  // ENOENT when the sender already did
  }
};

// Who a rank's process is, exchanged at the end of connect().
struct ProcessIdentity {
  int32_t pid;
  uint32_t pad;
  uint64_t start;      // /proc/<pid>/stat start time (clock ticks since boot)
  uint64_t pidns_ino;  // /proc/self/ns/pid: pids compare only within one namespace
  uint64_t pidns_dev;
};

ProcessIdentity my_identity(int pid, uint64_t start) {
  ProcessIdentity id{};
  id.pid = pid;
  id.start = start;
  struct stat st{};
  if (stat("/proc/self/ns/pid", &st) == 0) {
    id.pidns_ino = st.st_ino;
    id.pidns_dev = st.st_dev;
  }
  return id;
}

// Can this rank watch the peer's pid? Same pid namespace (or, where the
// namespace cannot be read, the pid is visible with the same start time).
bool watchable(const ProcessIdentity& me, const ProcessIdentity& peer) {
  if (peer.pid <= 0 || peer.start == 0) return false;
  if (me.pidns_ino != 0 && peer.pidns_ino != 0) {
    return me.pidns_ino == peer.pidns_ino && me.pidns_dev == peer.pidns_dev;
  }
  return process_start_time(peer.pid) == peer.start;
}

// Liveness of the process at the other end of a ring, known from connect().
class ShmHooks final : public RingHooks {
 public:
  ShmHooks(const ProcessIdentity& peer, bool watch, ConnLabel label)
      : label_(label), pid_(peer.pid), start_(peer.start), watch_(watch) {}
  void check_peer() override {
    auto now = Clock::now();
    if (now < next_check_) return;
    next_check_ = now + kLivenessPeriod;
    if (watch_ && !process_alive(pid_, start_)) {
      throw RemoteError(label_.prefix() + ": peer rank " + std::to_string(label_.peer) + " (pid " +
                        std::to_string(pid_) +
                        ") died while this rank waited for it; see that rank's log and exit status (killed, "
                        "out of memory, crashed?)");
    }
  }

 private:
  ConnLabel label_;
  Clock::time_point next_check_{};
  int pid_ = 0;
  uint64_t start_ = 0;
  bool watch_ = false;
};

struct SetupMsg {
  uint32_t ok;  // 1: segments created
  uint32_t nchannels;
  uint64_t shm_dev;  // st_dev of the creator's /dev/shm (0: unknown), to explain a name the sender cannot open
  char error[240];   // why not, when ok == 0
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(TransportContext ctx) : ctx_(std::move(ctx)) {
    my_pid_ = getpid();
    my_start_ = process_start_time(my_pid_);
    me_id_ = my_identity(my_pid_, my_start_);
    struct stat st{};
    if (stat("/dev/shm", &st) == 0) shm_dev_ = static_cast<uint64_t>(st.st_dev);
  }
  Kind kind() const override { return Kind::SharedMemory; }

  std::vector<std::vector<PeerLink>> connect(const std::vector<int>& peers, int nchannels,
                                             Clock::time_point /*deadline*/, size_t slot_bytes) override {
    check_connect_args(ctx_, peers, nchannels);
    const int gen = gen_++;
    try {
      return connect_rings(peers, nchannels, gen, slot_bytes ? slot_bytes : ctx_.cfg.slot_bytes);
    } catch (...) {
      // Whatever this call created or was to open between this rank and its
      // peers goes, so that nothing stays in /dev/shm (ENOENT: not there).
      const int me = ctx_.bootstrap->rank();
      for (int c = 0; c < nchannels; ++c) {
        for (int p : peers) {
          if (p == me) continue;
          shm_unlink(name(gen, me, p, c).c_str());
          shm_unlink(name(gen, p, me, c).c_str());
        }
      }
      throw;
    }
  }

 private:
  std::vector<std::vector<PeerLink>> connect_rings(const std::vector<int>& peers, int nchannels, int gen, size_t sb) {
    const int me = ctx_.bootstrap->rank();
    const int tag = kShmTagBase + (gen & 0xffff);
    const size_t nb = ring_bytes(ctx_.cfg.nslots, sb);
    const size_t np = peers.size();
    // recv_seg[c][i]: the ring peers[i] sends into on channel c.
    using Segments = std::vector<std::vector<std::shared_ptr<ShmSegment>>>;
    Segments recv_seg(nchannels, std::vector<std::shared_ptr<ShmSegment>>(np));
    Segments send_seg(nchannels, std::vector<std::shared_ptr<ShmSegment>>(np));

    // 1. Create my receive rings; 2. tell each sender how it went.
    std::string failure;
    try {
      for (int c = 0; c < nchannels; ++c) {
        for (size_t i = 0; i < np; ++i) {
          if (peers[i] == me) continue;
          recv_seg[c][i] = create_segment(name(gen, peers[i], me, c), nb, sb);
          auto* h = static_cast<RingHeader*>(recv_seg[c][i]->mem);
          h->consumer_start = my_start_;
          h->consumer_pid.store(my_pid_, std::memory_order_release);
        }
      }
    } catch (const Error& e) {
      failure = e.what();
    }
    for (size_t i = 0; i < np; ++i) {
      if (peers[i] == me) continue;
      SetupMsg m{};
      m.ok = failure.empty() ? 1 : 0;
      m.nchannels = static_cast<uint32_t>(nchannels);
      m.shm_dev = shm_dev_;
      std::strncpy(m.error, failure.c_str(), sizeof m.error - 1);
      ctx_.bootstrap->send(peers[i], tag, &m, sizeof m);
    }
    if (!failure.empty()) throw SystemError(failure);

    // 3. Map the rings I send into, record my identity, unlink the names.
    for (size_t i = 0; i < np; ++i) {
      if (peers[i] == me) continue;
      SetupMsg m{};
      ctx_.bootstrap->recv(peers[i], tag, &m, sizeof m);
      m.error[sizeof m.error - 1] = '\0';
      if (!m.ok) {
        throw RemoteError("shm transport rank " + std::to_string(me) + ": peer rank " + std::to_string(peers[i]) +
                          " could not create its shared-memory rings: " + m.error);
      }
      if (m.nchannels != static_cast<uint32_t>(nchannels)) {
        throw RemoteError("shm transport rank " + std::to_string(me) + ": peer rank " + std::to_string(peers[i]) +
                          " connects " + std::to_string(m.nchannels) + " channels, this rank " +
                          std::to_string(nchannels));
      }
      for (int c = 0; c < nchannels; ++c) {
        ConnLabel label{"shm", me, peers[i], c};
        send_seg[c][i] = open_segment(name(gen, me, peers[i], c), label, sb, m.shm_dev);
        auto* h = static_cast<RingHeader*>(send_seg[c][i]->mem);
        h->producer_start = my_start_;
        h->producer_pid.store(my_pid_, std::memory_order_release);
      }
    }

    // 4. All rings are mapped (and their names unlinked) before anyone
    // returns and might tear its end down again; every rank learns which
    // processes to watch.
    std::vector<ProcessIdentity> who(static_cast<size_t>(ctx_.bootstrap->size()));
    ctx_.bootstrap->allgather(&me_id_, sizeof me_id_, who.data());

    std::vector<std::vector<PeerLink>> links(static_cast<size_t>(nchannels));
    for (int c = 0; c < nchannels; ++c) {
      for (size_t i = 0; i < np; ++i) {
        if (peers[i] == me) {
          links[c].push_back(make_self_link(ctx_, c, "shm", sb));
          continue;
        }
        ConnLabel label{"shm", me, peers[i], c};
        const ProcessIdentity& peer = who[static_cast<size_t>(peers[i])];
        const bool watch = watchable(me_id_, peer);
        if (!watch && c == 0) {
          NCCLZ_INFO(me,
                     "%s: peer pid %d is in another pid namespace; its liveness is not checked (the deadline "
                     "bounds waits for it)",
                     label.prefix().c_str(), peer.pid);
        }
        auto* sh = static_cast<RingHeader*>(send_seg[c][i]->mem);
        auto* rh = static_cast<RingHeader*>(recv_seg[c][i]->mem);
        PeerLink link;
        link.send = std::make_unique<RingSendConn>(send_seg[c][i], sh, label, ctx_.abort,
                                                   std::make_unique<ShmHooks>(peer, watch, label));
        link.recv = std::make_unique<RingRecvConn>(recv_seg[c][i], rh, label, ctx_.abort,
                                                   std::make_unique<ShmHooks>(peer, watch, label));
        links[c].push_back(std::move(link));
      }
    }
    return links;
  }

  std::string name(int gen, int src, int dst, int ch) const {
    return "/ncclz-" + ctx_.key + "-g" + std::to_string(gen) + "-" + std::to_string(src) + "-" + std::to_string(dst) +
           "-c" + std::to_string(ch);
  }

  std::string who() const { return "shm transport rank " + std::to_string(ctx_.bootstrap->rank()); }

  std::shared_ptr<ShmSegment> create_segment(const std::string& nm, size_t bytes, size_t slot_bytes) {
    auto seg = std::make_shared<ShmSegment>();
    seg->name = nm;
    int fd = shm_open(nm.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      throw SystemError(who() + ": cannot create shared memory " + nm + ": " + net::errno_text("shm_open", errno) +
                        " (is /dev/shm mounted and writable?)");
    }
    seg->unlink_on_close = true;
    net::Fd f(fd);
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      throw SystemError(who() + ": cannot reserve " + std::to_string(bytes >> 10) + " KiB of shared memory for " + nm +
                        ": " + net::errno_text("posix_fallocate", rc) +
                        " (/dev/shm is too small: enlarge it, e.g. docker --shm-size, or lower NCCLZ_SLOT_BYTES / "
                        "NCCLZ_NSLOTS / NCCLZ_NCHANNELS, or use NCCLZ_TRANSPORT=socket)");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw SystemError(who() + ": " + net::errno_text("mmap", errno) + " of " + nm);
    seg->mem = p;
    seg->bytes = bytes;
    ring_init(p, ctx_.cfg.nslots, slot_bytes);
    return seg;
  }

  // `peer_shm_dev`: the st_dev of the creator's /dev/shm. A name it created
  // that is missing here while both see the same /dev/shm was removed by the
  // creator's failed connect() (or by a survivor, after the creator died):
  // the peer's failure, not this rank's.
  std::shared_ptr<ShmSegment> open_segment(const std::string& nm, const ConnLabel& label, size_t slot_bytes,
                                           uint64_t peer_shm_dev) {
    auto seg = std::make_shared<ShmSegment>();
    seg->name = nm;
    int fd = shm_open(nm.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT && peer_shm_dev != 0 && peer_shm_dev == shm_dev_) {
      throw RemoteError(label.prefix() + ": peer rank " + std::to_string(label.peer) +
                        " created its shared memory for this rank, but the name was removed before this rank opened "
                        "it: rank " +
                        std::to_string(label.peer) +
                        " failed or was killed during setup (its own error or exit status says why)");
    }
    if (fd < 0) {
      throw SystemError(label.prefix() + ": cannot open the peer's shared memory " + nm + ": " +
                        net::errno_text("shm_open", errno) +
                        " (different /dev/shm, e.g. containers without a shared IPC namespace? use "
                        "NCCLZ_TRANSPORT=socket)");
    }
    net::Fd f(fd);
    shm_unlink(nm.c_str());  // both ends have it now: nothing can leak from here on
    struct stat st{};
    if (fstat(fd, &st) != 0) throw SystemError(label.prefix() + ": " + net::errno_text("fstat", errno));
    size_t bytes = static_cast<size_t>(st.st_size);
    if (bytes < sizeof(RingHeader)) throw RemoteError(label.prefix() + ": the peer's shared memory is truncated");
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw SystemError(label.prefix() + ": " + net::errno_text("mmap", errno) + " of " + nm);
    seg->mem = p;
    seg->bytes = bytes;
    ring_validate(p, bytes, ctx_.cfg.nslots, slot_bytes, label.prefix());
    return seg;
  }

  TransportContext ctx_;
  int gen_ = 0;
  int my_pid_ = 0;
  uint64_t my_start_ = 0;
  ProcessIdentity me_id_{};
  uint64_t shm_dev_ = 0;  // st_dev of /dev/shm here (0: unknown)
};

}  // namespace

std::unique_ptr<Transport> make_shm_transport(TransportContext ctx) {
  return std::make_unique<ShmTransport>(std::move(ctx));
}

}  // namespace ncclz::transport
