// TCP bootstrap: rendezvous at rank 0, a star for small collectives, lazily
// opened point-to-point connections for tagged messages, and a service thread
// per bootstrap that serves the listeners. The messages and their
// authentication are in bootstrap/handshake.hpp, the job identity in
// bootstrap/job_identity.hpp.
//
// Service thread (rank 0: from before its rendezvous; other ranks: once they
// hold the table; none in a job of one rank). One poll loop serves
//   - rank 0's rendezvous listener, for the bootstrap's lifetime,
//   - this rank's point-to-point listener and the connections it accepted,
// with these rules against idle, slow or hostile connections:
//   - every handshake runs side by side with the others (non-blocking, state
//     kept per connection) and must be complete within kHandshakeTimeout of
//     its accept, else the connection is closed;
//   - at most max_pending(size) handshakes per listener are pending; a new
//     connection beyond that closes the oldest idle one (one that sent
//     nothing), else the oldest;
//   - the soft RLIMIT_NOFILE is raised to the hard limit once per process, and
//     when descriptors still run out a waiting connection is accepted into a
//     reserve descriptor and closed (net::accept_or_shed) and idle handshakes
//     are closed: never an error, real ranks keep being served;
//   - shed connections are reported as one rate-limited WARN line.
// Accepted point-to-point connections are read as their bytes come, into
// per-(source, tag) queues that recv() waits on.
//
// Rank 0's rendezvous (handle_root_proof): a proven claim of rank r joins when
// the rank is free and the world size agrees; when every rank is in, rank 0
// opens its point-to-point listener and sends each rank the table (with its
// MAC). A proven claim of a taken rank, of rank 0, or with another world size
// means two processes of one identity claim this job: before the table went
// out, every joined rank and the claimant get a Conflict reply naming both
// and the rendezvous fails; afterwards the claimant gets it, and the job is
// aborted through the conflict handler (the communicator's abort). Ranks of
// another identity (the token proof failed, or another job id) are refused
// with a reply that says so, and logged; the job goes on.
//
// A rank 0 that cannot bind its port (EADDRINUSE) first asks this process's
// own bootstraps (a communicator still open on that port hands its listener
// over once its rendezvous is complete), then probes the port with a
// handshake, so that its error says who is there: a program that is not
// ncclz, an ncclz job of another identity, or one of this identity (which
// then stops too).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/env.hpp"
#include "base/log.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/handshake.hpp"
#include "bootstrap/job_identity.hpp"
#include "bootstrap/wait_report.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"

namespace ncclz {
namespace {

using bootstrap::Digest;
using bootstrap::Hello;
using bootstrap::Nonce;
using bootstrap::RankInfo;
using bootstrap::Reader;
using bootstrap::WaitReport;
using bootstrap::Writer;
using net::Clock;
using net::Endpoint;
using net::Fd;
namespace bs = bootstrap;

constexpr auto kHandshakeTimeout = std::chrono::seconds(3);
constexpr uint64_t kMaxMessage = uint64_t(1) << 32;  // sanity bound for bootstrap payloads
constexpr uint32_t kMaxReply = 64u << 20;            // the table of a very large job
constexpr int kServicePollMs = 100;
constexpr auto kShedReportPeriod = std::chrono::seconds(10);
constexpr auto kGoneGrace = std::chrono::milliseconds(200);

size_t max_pending(int size) { return 128 + static_cast<size_t>(size); }

std::chrono::nanoseconds to_dur(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(std::min(s, 1e8) * 1e9));
}

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", s);
  return b;
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string this_host_id() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  return std::string(h) + "/" + boot;
}

// Random per-process nonce: two processes with the same pid (pid namespaces,
// reuse) still get different process ids. Re-drawn in a forked child.
std::string this_process_id() {
  static std::mutex mu;
  static pid_t nonce_pid = -1;
  static std::string nonce;
  std::lock_guard<std::mutex> lk(mu);
  if (nonce_pid != getpid()) {
    nonce = net::random_hex(8);
    nonce_pid = getpid();
  }
  return this_host_id() + "/pid" + std::to_string(getpid()) + "/" + nonce;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    if (i == 16 && ranks.size() > 17) {
      s += "... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    s += std::to_string(ranks[i]);
  }
  return s;
}

// Sends what the socket takes right now; true when all of it went. Replies to
// strangers never wait: a peer that does not read loses its reply.
bool send_now(int fd, const std::vector<uint8_t>& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

// ---- UniqueId: the listening sockets made by make_unique_id ------------------
//
// Layout of UniqueId::bytes:
//   [0..3] magic "NCZU" | [4] version | [5] host length | [6..7] port (big endian)
//   [8..71] host (numeric address text) | [72] token length | [73..127] token
constexpr uint32_t kUidMagic = 0x555a434e;  // "NCZU"

struct ParsedId {
  std::string host;
  int port = 0;
  std::string token;
};

ParsedId parse_id(const UniqueId& id) {
  uint32_t magic;
  std::memcpy(&magic, id.bytes, 4);
  if (magic != kUidMagic || id.bytes[4] != 1 || id.bytes[5] > 64 || id.bytes[72] > 55) {
    throw InvalidArgument(
        "invalid ncclz UniqueId (bad magic, version or lengths): pass the bytes made by "
        "make_unique_id() on the rank-0 process unchanged to every rank");
  }
  ParsedId p;
  p.host.assign(reinterpret_cast<const char*>(id.bytes + 8), id.bytes[5]);
  p.port = (id.bytes[6] << 8) | id.bytes[7];
  p.token.assign(reinterpret_cast<const char*>(id.bytes + 73), id.bytes[72]);
  return p;
}

// The registries below are never destroyed: a bootstrap destroyed during
// static destruction (a communicator kept in a static) still finds them.
std::mutex g_uid_mu;
std::map<std::string, Fd>& uid_registry() {  // key: "host:port/token"
  static auto* m = new std::map<std::string, Fd>;
  return *m;
}

// Rendezvous generations of this process, by "master_addr:port#rank".
int next_generation(const std::string& key) {
  static std::mutex mu;
  static auto* counts = new std::map<std::string, int>;
  std::lock_guard<std::mutex> lk(mu);
  return (*counts)[key]++;
}

class TcpBootstrap;
// Rank-0 rendezvous listeners of this process, by "master_addr:port" as
// configured, for the hand-over to a later rank 0 on the same port.
std::mutex g_root_mu;
std::map<std::string, TcpBootstrap*>& root_registry() {
  static auto* m = new std::map<std::string, TcpBootstrap*>;
  return *m;
}

// ---- the bootstrap -----------------------------------------------------------

class TcpBootstrap final : public Bootstrap {
  struct Handshake;

 public:
  /// What release_root_listener hands over.
  struct Handover {
    Fd fd;
    std::vector<Handshake> pending;
  };
  TcpBootstrap(const BootstrapConfig& cfg, Fd root_listen, bool from_uid) : cfg_(cfg), from_uid_(from_uid) {
    if (cfg_.size < 1) throw InvalidArgument("bootstrap: size must be >= 1, got " + std::to_string(cfg_.size));
    if (cfg_.rank < 0 || cfg_.rank >= cfg_.size) {
      throw InvalidArgument("bootstrap: rank " + std::to_string(cfg_.rank) + " is outside [0, " +
                            std::to_string(cfg_.size) + ")");
    }
    if (!(cfg_.timeout_s > 0)) throw InvalidArgument("bootstrap: timeout_s must be > 0");
    if (cfg_.token.empty()) cfg_.token = env::get_string("NCCLZ_TOKEN", "");
    if (cfg_.socket_ifname.empty()) cfg_.socket_ifname = env::get_string("NCCLZ_SOCKET_IFNAME", "");
    if (!cfg_.socket_ifname.empty()) {
      auto a = net::interface_address(cfg_.socket_ifname);
      if (!a) {
        throw InvalidArgument("bootstrap rank " + std::to_string(cfg_.rank) + ": NCCLZ_SOCKET_IFNAME='" +
                              cfg_.socket_ifname + "' matches no interface with an address on this host");
      }
      ifname_addr_ = *a;
    }
    env_job_id_ = bs::job_id_from_env();
    if (cfg_.check_job_id) job_id_ = cfg_.job_id.empty() ? env_job_id_ : cfg_.job_id;
    if (job_id_.size() > bs::kMaxJobId) job_id_ = job_id_.substr(0, bs::kMaxJobId);
    where_ = from_uid_ ? std::string("the UniqueId's address ") : std::string("MASTER_ADDR:MASTER_PORT ");
    where_ += Endpoint{cfg_.master_addr, cfg_.master_port}.str();
    const size_t n = static_cast<size_t>(cfg_.size);
    table_.resize(n);
    closed_.resize(n);
    in_open_.resize(n);
    star_gone_at_.resize(n);
    out_.resize(n);
    star_.resize(n);
    in_.resize(n);
    net::raise_fd_limit();
    if (cfg_.size > 1) {
      generation_ =
          cfg_.generation >= 0
              ? static_cast<uint32_t>(cfg_.generation)
              : static_cast<uint32_t>(next_generation(cfg_.master_addr + ":" + std::to_string(cfg_.master_port) + "#" +
                                                      std::to_string(cfg_.rank)));
    }
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    try {
      if (cfg_.rank == 0) {
        rendezvous_root(std::move(root_listen), deadline);
      } else {
        rendezvous_peer(deadline);
        p2p_ready_.store(true);
        start_service();
      }
    } catch (...) {
      unregister_root();
      service_.stop();
      throw;
    }
    NCCLZ_INFO(cfg_.rank, "bootstrap: %d ranks connected, job %s, listening at %s", cfg_.size, job_key_.c_str(),
               Endpoint{table_[cfg_.rank].host, table_[cfg_.rank].port}.str().c_str());
  }

  ~TcpBootstrap() override {
    unregister_root();
    service_.stop();
    if (cfg_.rank == 0 && aborted_.load()) {
      std::lock_guard<std::mutex> lk(star_mu_);
      tell_star_failure(abort_reason());
    }
  }

  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  const std::string& host_id(int r) const override { return table_.at(check_rank(r, "host_id")).host_id; }
  const std::string& process_id(int r) const override { return table_.at(check_rank(r, "process_id")).process_id; }
  const std::string& job_key() const override { return job_key_; }
  std::string advertised_address() const override { return table_[cfg_.rank].host; }
  std::string listen_endpoint() const override {
    return Endpoint{table_[cfg_.rank].host, table_[cfg_.rank].port}.str();
  }
  double timeout_s() const override { return cfg_.timeout_s; }

  void allgather(const void* mine, size_t bytes, void* all) override {
    std::lock_guard<std::mutex> lk(star_mu_);
    uint32_t seq = ++star_seq_;
    auto* out = static_cast<uint8_t*>(all);
    const int n = cfg_.size;
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    WaitReport report;
    if (cfg_.rank == 0) {
      try {
        check_abort();
        if (bytes) std::memmove(out, mine, bytes);
        for (int r = 1; r < n; ++r) {
          auto waiting = [&, r] {
            check_abort();
            if (report.due()) {
              NCCLZ_WARN(0,
                         "bootstrap: rank 0 has waited %.0f s in setup step #%u for rank %d (the ranks before it "
                         "are in); is rank %d alive and running the same setup? (timeout after %s s, "
                         "NCCLZ_TIMEOUT)",
                         report.waited(), seq, r, r, fmt_s(cfg_.timeout_s).c_str());
            }
          };
          read_frame(star_[r].get(), seq, out + static_cast<size_t>(r) * bytes, bytes, deadline,
                     who("allgather", r, "<-"), waiting);
        }
        for (int r = 1; r < n; ++r) {
          write_frame(star_[r].get(), seq, out, bytes * static_cast<size_t>(n), deadline, who("allgather", r, "->"));
        }
      } catch (const Error& e) {
        tell_star_failure(e.what());
        throw;
      }
    } else {
      check_abort();
      auto waiting = [&] {
        check_abort();
        if (report.due()) {
          NCCLZ_WARN(cfg_.rank,
                     "bootstrap: rank %d has waited %.0f s for rank 0 to finish setup step #%u (it waits for the "
                     "slowest rank; its log names it; timeout after %s s, NCCLZ_TIMEOUT)",
                     cfg_.rank, report.waited(), seq, fmt_s(cfg_.timeout_s).c_str());
        }
      };
      std::vector<uint8_t> copy(static_cast<const uint8_t*>(mine), static_cast<const uint8_t*>(mine) + bytes);
      write_frame(star_[0].get(), seq, copy.data(), bytes, deadline, who("allgather", 0, "->"));
      // Rank 0 answers only when every rank has contributed: allow it the
      // whole timeout plus a grace, so rank 0's own timeout message wins.
      read_frame(star_[0].get(), seq, out, bytes * static_cast<size_t>(n), deadline + grace(),
                 who("allgather", 0, "<-"), waiting);
    }
  }

  void barrier() override {
    uint8_t none = 0;
    std::vector<uint8_t> all(static_cast<size_t>(cfg_.size));
    allgather(&none, 1, all.data());
  }

  void send(int peer, int tag, const void* data, size_t bytes) override {
    check_rank(peer, "send");
    check_abort();
    if (peer == cfg_.rank) {
      const auto* p = static_cast<const uint8_t*>(data);
      std::lock_guard<std::mutex> lk(mu_);
      queues_[{peer, tag}].emplace_back(p, p + bytes);
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lk(out_mu_);
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    std::string w = who("send", peer, "->");
    if (!out_[peer]) {
      Endpoint ep{table_[peer].host, table_[peer].port};
      // The peer's listener exists from before the table went out until its
      // bootstrap is destroyed: a refused connection means the peer is gone.
      Fd fd;
      try {
        fd = net::connect_tcp(ep, deadline, abort_fn(), /*retry_refused=*/false, w);
      } catch (const Timeout&) {
        throw;
      } catch (const RemoteError& e) {
        throw RemoteError(std::string(e.what()) + ": rank " + std::to_string(peer) +
                          "'s bootstrap no longer listens there (it exited or failed; see its log)");
      }
      Nonce nonce = bs::random_nonce();
      Digest mac = bs::p2p_mac(cfg_.token, job_key_, cfg_.rank, peer, nonce);
      Writer body;
      body.str(job_key_);
      body.i32(cfg_.rank);
      body.i32(peer);
      body.raw(nonce.data(), nonce.size());
      body.raw(mac.data(), mac.size());
      auto hello = bs::frame(bs::kPHelloMagic, bs::kVersion, body.b);
      net::send_all(fd.get(), hello.data(), hello.size(), deadline, abort_fn(), w);
      out_[peer] = std::move(fd);
    }
    Writer m;
    m.u32(bs::kPMsgMagic);
    m.i32(tag);
    m.u64(bytes);
    try {
      net::send_all(out_[peer].get(), m.b.data(), m.b.size(), deadline, abort_fn(), w);
      net::send_all(out_[peer].get(), data, bytes, deadline, abort_fn(), w);
    } catch (...) {
      out_[peer].reset();  // the stream is out of sync now
      throw;
    }
  }

  void recv(int peer, int tag, void* data, size_t bytes) override {
    check_rank(peer, "recv");
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    WaitReport report;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      check_abort();
      auto it = queues_.find({peer, tag});
      if (it != queues_.end() && !it->second.empty()) {
        std::vector<uint8_t> msg = std::move(it->second.front());
        it->second.pop_front();
        if (msg.size() != bytes) {
          throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": message from rank " +
                            std::to_string(peer) + " with tag " + std::to_string(tag) + " has " +
                            std::to_string(msg.size()) + " bytes but " + std::to_string(bytes) +
                            " were expected (the ranks disagree about the setup: same version and "
                            "configuration everywhere?)");
        }
        if (bytes) std::memcpy(data, msg.data(), bytes);
        return;
      }
      if (peer == cfg_.rank) {
        throw InvalidArgument("bootstrap rank " + std::to_string(cfg_.rank) + ": recv from itself with tag " +
                              std::to_string(tag) + " but nothing was sent");
      }
      if (!closed_[peer].empty()) {
        throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": waiting for a message from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) +
                          ") but its connection is closed: " + closed_[peer]);
      }
      auto now = Clock::now();
      // The peer (or rank 0) left: its star connection closed, and no
      // point-to-point connection from it is open (a grace lets one that
      // raced the close deliver first).
      const int via = cfg_.rank == 0 ? peer : 0;
      const auto gone = star_gone_at_[via];
      if (gone != Clock::time_point{} && !in_open_[peer] && now >= gone + kGoneGrace) {
        std::string why = via == 0
                              ? "rank 0 left the job (its connection closed)" + rank0_failure_note(lk)
                              : "rank " + std::to_string(peer) + " disconnected (it exited or was killed; see its log)";
        throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": waiting for a message from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) + "): " + why);
      }
      if (now >= deadline) {
        throw Timeout("bootstrap rank " + std::to_string(cfg_.rank) + ": timed out after " + fmt_s(cfg_.timeout_s) +
                      " s waiting for a message from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) +
                      "); is that rank alive and running the same setup? (NCCLZ_TIMEOUT)");
      }
      if (report.due(now)) {
        NCCLZ_WARN(cfg_.rank,
                   "bootstrap: rank %d has waited %.0f s for a setup message from rank %d (tag %d); is rank %d "
                   "alive and at the same setup step? (timeout after %s s, NCCLZ_TIMEOUT)",
                   cfg_.rank, report.waited(now), peer, tag, peer, fmt_s(cfg_.timeout_s).c_str());
      }
      auto until = std::min(deadline, report.next());
      if (gone != Clock::time_point{} && !in_open_[peer]) until = std::min(until, gone + kGoneGrace);
      cv_.wait_until(lk, until);
    }
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lk(abort_mu_);
      if (aborted_.load()) return;
      abort_reason_ = reason;
      aborted_.store(true);
    }
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }

  void set_conflict_handler(std::function<void(const std::string&)> fn) override {
    std::lock_guard<std::mutex> lk(conflict_mu_);
    conflict_fn_ = std::move(fn);
    if (conflict_fn_ && !conflict_.empty()) conflict_fn_(conflict_);
  }

  /// Another rank 0 of this process with the same identity wants the
  /// rendezvous port: hands the listener over once this rendezvous is
  /// complete (else an empty Fd).
  /// Handshakes in progress on it come along (same token and job id, so the
  /// new owner can finish them).
  Handover release_root_listener(const std::string& token, const std::string& job_id);

 private:
  // ---- small helpers ---------------------------------------------------------

  std::chrono::nanoseconds grace() const { return to_dur(std::min(cfg_.timeout_s, 2.0)); }

  void unregister_root() {
    std::lock_guard<std::mutex> lk(g_root_mu);
    auto it = root_registry().find(root_key_);
    if (it != root_registry().end() && it->second == this) root_registry().erase(it);
  }

  int check_rank(int r, const char* what) const {
    if (r < 0 || r >= cfg_.size) {
      throw InvalidArgument(std::string("bootstrap ") + what + ": rank " + std::to_string(r) + " is outside [0, " +
                            std::to_string(cfg_.size) + ")");
    }
    return r;
  }

  std::string abort_reason() const {
    std::lock_guard<std::mutex> lk(abort_mu_);
    return abort_reason_;
  }

  void check_abort() const {
    if (aborted_.load()) {
      throw Aborted("bootstrap rank " + std::to_string(cfg_.rank) + " aborted: " + abort_reason());
    }
  }
  net::AbortCheck abort_fn() const {
    return [this] { check_abort(); };
  }

  std::string who(const char* op, int peer, const char* dir) const {
    return "bootstrap " + std::string(op) + " rank " + std::to_string(cfg_.rank) + " " + dir + " rank " +
           std::to_string(peer);
  }

  // Which address do I advertise? NCCLZ_SOCKET_IFNAME's, else `fallback`.
  std::string pick_address(const std::string& fallback) const {
    if (!ifname_addr_.empty()) return ifname_addr_;
    return fallback;
  }

  RankInfo my_info(const Fd& listen) const {
    RankInfo me;
    Endpoint ep = net::local_endpoint(listen.get());
    me.host = ep.host;
    me.port = ep.port;
    me.host_id = this_host_id();
    me.process_id = this_process_id();
    return me;
  }

  bool anonymous() const { return cfg_.token.empty() && job_id_.empty(); }

  std::string identity_text() const {
    if (from_uid_) return "the UniqueId's token";
    std::string s = cfg_.token.empty() ? "no NCCLZ_TOKEN" : "an NCCLZ_TOKEN";
    s += job_id_.empty() ? " and no launcher job id" : " and job id " + job_id_;
    return s;
  }

  std::string conflict_advice() const {
    std::string s = " Two jobs use one rendezvous address (" + where_ +
                    "; give each job its own port: ncclz-run picks a free one), or RANK / WORLD_SIZE are set wrongly. "
                    "The job stops on every rank: ranks of one job could have joined the other.";
    if (anonymous()) {
      s += " This job has no NCCLZ_TOKEN and no launcher job id, so another job's ranks look like its own: set "
           "NCCLZ_TOKEN or NCCLZ_JOB_ID, or start it with ncclz-run, torchrun, srun or mpirun.";
    }
    return s;
  }

  // ---- star frames -----------------------------------------------------------

  void write_frame(int fd, uint32_t seq, const void* data, size_t bytes, Clock::time_point deadline,
                   const std::string& w) {
    Writer h;
    h.u32(bs::kFrameMagic);
    h.u32(seq);
    h.u64(bytes);
    net::send_all(fd, h.b.data(), h.b.size(), deadline, abort_fn(), w);
    net::send_all(fd, data, bytes, deadline, abort_fn(), w);
  }

  void read_frame(int fd, uint32_t seq, void* data, size_t bytes, Clock::time_point deadline, const std::string& w,
                  const net::AbortCheck& waiting) {
    uint8_t h[16];
    net::recv_all(fd, h, sizeof h, deadline, waiting, w);
    uint32_t magic, s;
    uint64_t len;
    std::memcpy(&magic, h, 4);
    std::memcpy(&s, h + 4, 4);
    std::memcpy(&len, h + 8, 8);
    if (magic == bs::kErrorMagic && len <= 65536) {
      std::string msg(len, '\0');
      net::recv_all(fd, msg.data(), len, Clock::now() + std::chrono::seconds(1), nullptr, w);
      throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": rank 0 reports that the job failed: " + msg);
    }
    if (magic != bs::kFrameMagic || s != seq || len != bytes) {
      throw RemoteError(w + ": mismatched bootstrap collective (call #" + std::to_string(seq) + " with " +
                        std::to_string(bytes) + " bytes here, peer sent call #" + std::to_string(s) + " with " +
                        std::to_string(len) +
                        " bytes): the ranks do not call the same setup sequence (same version/config everywhere?)");
    }
    net::recv_all(fd, data, bytes, deadline, waiting, w);
  }

  // Why rank 0 left, when it said so on the star connection (an Error frame
  // waits there): " (rank 0 reported: ...)", else "". Caller holds mu_ (as lk).
  std::string rank0_failure_note(std::unique_lock<std::mutex>& lk) {
    lk.unlock();
    std::string note;
    {
      std::unique_lock<std::mutex> sl(star_mu_, std::try_to_lock);
      if (sl.owns_lock() && star_[0]) {
        uint8_t h[16];
        if (::recv(star_[0].get(), h, sizeof h, MSG_PEEK | MSG_DONTWAIT) == ssize_t(sizeof h)) {
          uint32_t magic;
          uint64_t len;
          std::memcpy(&magic, h, 4);
          std::memcpy(&len, h + 8, 8);
          std::vector<uint8_t> all(16 + std::min<uint64_t>(len, 65536));
          if (magic == bs::kErrorMagic && len <= 65536 &&
              ::recv(star_[0].get(), all.data(), all.size(), MSG_PEEK | MSG_DONTWAIT) == ssize_t(all.size())) {
            note = " (rank 0 reported: " + std::string(all.begin() + 16, all.end()) + ")";
          }
        }
      }
    }
    lk.lock();
    return note;
  }

  // Rank 0: tells every other rank, once, why the job failed (star Error
  // frames; best effort, short deadline). Caller holds star_mu_.
  void tell_star_failure(const std::string& why) {
    if (star_failure_told_ || cfg_.rank != 0) return;
    star_failure_told_ = true;
    std::string msg = why.substr(0, 65536);
    Writer h;
    h.u32(bs::kErrorMagic);
    h.u32(0);
    h.u64(msg.size());
    h.raw(msg.data(), msg.size());
    for (int r = 1; r < cfg_.size; ++r) {
      if (star_[r]) send_now(star_[r].get(), h.b);
    }
  }

  // ---- rendezvous, rank r > 0 side ----------------------------------------

  void rendezvous_peer(Clock::time_point deadline) {
    const std::string w = who("rendezvous", 0, "->");
    const Endpoint master{cfg_.master_addr, cfg_.master_port};
    const std::string check = "check MASTER_ADDR, MASTER_PORT, WORLD_SIZE (here " + std::to_string(cfg_.size) +
                              ") and NCCLZ_TOKEN on every rank";
    WaitReport report;
    std::string last_error = "no attempt yet";
    auto backoff = std::chrono::milliseconds(20);
    auto not_yet_backoff = std::chrono::milliseconds(5);
    for (int attempt = 0;; ++attempt) {
      // 1. Connect (rank 0 may start later: refused connections are retried).
      auto connecting = [&] {
        check_abort();
        if (report.due()) {
          NCCLZ_WARN(cfg_.rank,
                     "bootstrap: rank %d has waited %.0f s for rank 0 at %s (%s): is rank 0 running, with this "
                     "address? %s (timeout after %s s, NCCLZ_TIMEOUT)",
                     cfg_.rank, report.waited(), where_.c_str(), last_error.c_str(), check.c_str(),
                     fmt_s(cfg_.timeout_s).c_str());
        }
      };
      Fd fd;
      try {
        fd = net::connect_tcp(master, deadline, connecting, /*retry_refused=*/true, w, 0, &last_error);
      } catch (const Timeout&) {
        throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                      " s: no rank 0 answered at " + where_ + " (last error: " + last_error +
                      "). Is rank 0 running and reachable at that address? " + check +
                      " (NCCLZ_SOCKET_IFNAME, firewalls, NCCLZ_TIMEOUT)");
      }
      if (!listen_) listen_ = net::listen_tcp(pick_address(net::local_endpoint(fd.get()).host), 0);

      // 2. Hello; rank 0's challenge must prove that it holds the token.
      Hello hello;
      hello.rank = cfg_.rank;
      hello.size = cfg_.size;
      hello.generation = generation_;
      hello.job_id = job_id_;
      hello.nonce = bs::random_nonce();
      auto hello_bytes = bs::frame(bs::kHelloMagic, bs::kVersion, bs::hello_body(hello).b);
      const Digest hello_hash = base::sha256(hello_bytes.data(), hello_bytes.size());
      last_error = "connected, but nothing answered";
      auto answering = [&] {
        check_abort();
        if (report.due()) {
          NCCLZ_WARN(cfg_.rank,
                     "bootstrap: rank %d has waited %.0f s for rank 0 at %s, which accepts connections but does "
                     "not answer (stopped? overloaded? not an ncclz rank 0?). %s (timeout after %s s)",
                     cfg_.rank, report.waited(), where_.c_str(), check.c_str(), fmt_s(cfg_.timeout_s).c_str());
        }
      };
      uint32_t status = 0;
      std::vector<uint8_t> body;
      try {
        net::send_all(fd.get(), hello_bytes.data(), hello_bytes.size(), deadline, abort_fn(), w);
        status = read_reply(fd.get(), deadline, answering, &body);
      } catch (const Timeout&) {
        throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                      " s: the process at " + where_ +
                      " accepted the connection but never answered the hello (a stopped or overloaded rank 0, "
                      "or not an ncclz rank 0). " +
                      check);
      } catch (const Aborted&) {
        throw;
      } catch (const RemoteError& e) {
        // Closed before any answer: rank 0 shed this connection (flooded) or
        // is restarting. Try again, with backoff, until the deadline.
        last_error = "rank 0 closed the connection before answering";
        NCCLZ_INFO(cfg_.rank, "bootstrap: %s (%s); retrying (attempt %d)", last_error.c_str(), e.what(), attempt + 1);
        if (Clock::now() + backoff >= deadline) {
          throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                        " s: the process at " + where_ +
                        " keeps closing connections before answering (not an ncclz rank 0, or overloaded). " + check);
        }
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
        continue;
      }
      if (status != bs::kChallenge) refused_by_root(status, body, master);
      Reader rd{body.data(), body.size()};
      Nonce nonce0;
      rd.raw(nonce0.data(), nonce0.size());
      std::string job_id0 = rd.str(bs::kMaxJobId);
      Digest mac0;
      rd.raw(mac0.data(), mac0.size());
      if (!rd.done()) not_ncclz(master, "malformed challenge");
      if (cfg_.check_job_id && job_id0 != job_id_) {
        send_now(fd.get(), bs::frame(bs::kProofMagic, bs::kJobIdDiffers, {}));
        throw RemoteError("bootstrap: rank " + std::to_string(cfg_.rank) + ": the rank 0 at " + where_ +
                          " belongs to another job: its job id is '" + job_id0 + "', this rank's is '" + job_id_ +
                          "'. Two jobs use this port (give each its own MASTER_PORT), or the ranks were started by "
                          "different launchers (set NCCLZ_JOB_ID to one value on every rank)");
      }
      if (!bs::mac_equal(mac0.data(), bs::root_mac(cfg_.token, hello_hash, nonce0, job_id0))) {
        send_now(fd.get(), bs::frame(bs::kProofMagic, bs::kRootProofWrong, {}));
        throw RemoteError("bootstrap: rank " + std::to_string(cfg_.rank) + ": the rank 0 at " + where_ +
                          " could not prove that it holds this job's token: it belongs to another job (two jobs on "
                          "one port? give each its own MASTER_PORT), or NCCLZ_TOKEN differs between the ranks (this "
                          "rank has " +
                          std::string(cfg_.token.empty() ? "none" : "one") +
                          "). This rank sent it nothing derived from the token");
      }

      // 3. Proof, then the table (after every rank is in).
      Writer info;
      bs::put_info(info, my_info(listen_));
      Digest macr = bs::rank_mac(cfg_.token, hello_hash, mac0, info.b.data(), info.b.size());
      info.raw(macr.data(), macr.size());
      auto waiting_table = [&] {
        check_abort();
        if (report.due()) {
          NCCLZ_WARN(cfg_.rank,
                     "bootstrap: rank %d joined rank 0 at %s and has waited %.0f s for the address table: rank 0 "
                     "still waits for other ranks (its log names them; are they started, with WORLD_SIZE=%d and "
                     "the same MASTER_ADDR/MASTER_PORT?) (timeout after %s s)",
                     cfg_.rank, where_.c_str(), report.waited(), cfg_.size, fmt_s(cfg_.timeout_s).c_str());
        }
      };
      try {
        auto proof = bs::frame(bs::kProofMagic, bs::kProofOk, info.b);
        net::send_all(fd.get(), proof.data(), proof.size(), deadline, abort_fn(), w);
        status = read_reply(fd.get(), deadline + grace(), waiting_table, &body);
      } catch (const Timeout&) {
        throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                      " s waiting for rank 0 at " + where_ +
                      " to send the rank table (some other ranks are probably missing; rank 0's error names "
                      "them; NCCLZ_TIMEOUT)");
      } catch (const Aborted&) {
        throw;
      } catch (const RemoteError&) {
        throw RemoteError("bootstrap: rank 0 at " + where_ + " closed the connection of rank " +
                          std::to_string(cfg_.rank) +
                          " after accepting it, without sending the table: it failed; see its log");
      }
      if (status == bs::kNotYet) {
        // Rank 0 still serves this job's previous communicator here: wait
        // for it to create this one.
        Reader nr{body.data(), body.size()};
        last_error = nr.str(65536);
        if (Clock::now() + not_yet_backoff >= deadline) {
          throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                        " s: " + last_error + " (did rank 0 create as many communicators on this port as this rank?)");
        }
        std::this_thread::sleep_for(not_yet_backoff);
        not_yet_backoff = std::min(not_yet_backoff * 2, std::chrono::milliseconds(100));
        continue;
      }
      if (status != bs::kTable) refused_by_root(status, body, master);
      if (body.size() < bs::kMacBytes ||
          !bs::mac_equal(body.data() + body.size() - bs::kMacBytes,
                         bs::table_mac(cfg_.token, hello_hash, mac0, body.data(), body.size() - bs::kMacBytes))) {
        throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": the rank table from " + where_ +
                          " does not carry this job's MAC (corrupted or forged)");
      }
      Reader tr{body.data(), body.size() - bs::kMacBytes};
      job_key_ = tr.str(64);
      uint32_t n = tr.u32();
      if (n != static_cast<uint32_t>(cfg_.size)) tr.ok = false;
      for (uint32_t r = 0; r < n && tr.ok; ++r) table_[r] = bs::get_info(tr);
      if (!tr.done()) {
        throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": malformed rank table from rank 0");
      }
      star_[0] = std::move(fd);
      return;
    }
  }

  // Reads one Reply (magic, status, body) from rank 0.
  uint32_t read_reply(int fd, Clock::time_point deadline, const net::AbortCheck& waiting, std::vector<uint8_t>* body) {
    const std::string w = who("rendezvous", 0, "<-");
    uint32_t hdr[3];
    net::recv_all(fd, hdr, sizeof hdr, deadline, waiting, w);
    if (hdr[0] != bs::kReplyMagic || hdr[2] > kMaxReply) {
      not_ncclz(Endpoint{cfg_.master_addr, cfg_.master_port}, "bad reply");
    }
    body->resize(hdr[2]);
    net::recv_all(fd, body->data(), body->size(), deadline, waiting, w);
    return hdr[1];
  }

  [[noreturn]] void not_ncclz(const Endpoint& master, const char* what) const {
    throw RemoteError("bootstrap: rank " + std::to_string(cfg_.rank) + ": the server at " + master.str() +
                      " is not an ncclz rank 0 of this version (" + what + "); check MASTER_ADDR / MASTER_PORT");
  }

  [[noreturn]] void refused_by_root(uint32_t status, const std::vector<uint8_t>& body, const Endpoint& master) const {
    Reader rd{body.data(), body.size()};
    std::string msg = rd.str(1 << 20);
    if (!rd.ok) not_ncclz(master, "malformed reply");
    std::string tail = " (reported by rank 0 at " + master.str() + " to rank " + std::to_string(cfg_.rank) + ")";
    if (status == bs::kTimedOut) throw Timeout(msg + tail);
    if (status == bs::kRefused || status == bs::kConflict) throw RemoteError(msg + tail);
    not_ncclz(master, "unknown reply status");
  }

  // ---- rendezvous, rank 0 side ----------------------------------------------

  void rendezvous_root(Fd listen, Clock::time_point deadline) {
    root_key_ = cfg_.master_addr + ":" + std::to_string(cfg_.master_port);
    if (cfg_.size == 1) {
      // A job of one needs no rendezvous port (several may run side by side).
      listen_ = net::listen_tcp(pick_address("127.0.0.1"), 0);
      table_[0] = my_info(listen_);
      job_key_ = "j" + bs::job_tag(env_job_id_) + net::random_hex(4);
      root_.complete = true;
      return;
    }
    if (!listen) listen = bind_root();
    root_.at = net::local_endpoint(listen.get());
    root_.listen = std::move(listen);
    root_.serving = true;
    root_.joined.resize(static_cast<size_t>(cfg_.size));
    root_.info.resize(static_cast<size_t>(cfg_.size));
    root_.from.resize(static_cast<size_t>(cfg_.size));
    root_.hello_hash.resize(static_cast<size_t>(cfg_.size));
    root_.mac0.resize(static_cast<size_t>(cfg_.size));
    root_.deadline = deadline;
    {
      std::lock_guard<std::mutex> lk(g_root_mu);
      root_registry()[root_key_] = this;
    }
    start_service();
    WaitReport report;
    std::unique_lock<std::mutex> lk(mu_);
    while (!root_.complete && root_.failure.empty()) {
      auto now = Clock::now();
      if (now >= deadline) {
        std::vector<int> missing;
        for (int r = 1; r < cfg_.size; ++r) {
          if (!root_.joined[r]) missing.push_back(r);
        }
        std::string msg = "bootstrap: rank 0 timed out after " + fmt_s(cfg_.timeout_s) + " s waiting for " +
                          std::to_string(missing.size()) + " of " + std::to_string(cfg_.size) +
                          " ranks to connect to " + where_ + "; missing ranks: " + ranks_text(missing) +
                          ". Check that they were started, with the same MASTER_ADDR/MASTER_PORT (or "
                          "UniqueId), token and world size, and can reach this address (NCCLZ_TIMEOUT, "
                          "NCCLZ_SOCKET_IFNAME)" +
                          refusals_text();
        fail_rendezvous(msg, bs::kTimedOut);
        cv_.wait_for(lk, std::chrono::milliseconds(500), [&] { return root_.handshakes == 0; });
        throw Timeout(msg);
      }
      if (report.due(now)) {
        std::vector<int> missing, joined{0};
        for (int r = 1; r < cfg_.size; ++r) (root_.joined[r] ? joined : missing).push_back(r);
        NCCLZ_WARN(0,
                   "bootstrap: rank 0 has waited %.0f s for %zu of %d ranks to connect to %s: missing ranks %s "
                   "(joined: %s). Check that they run with the same MASTER_ADDR and MASTER_PORT, WORLD_SIZE=%d "
                   "and NCCLZ_TOKEN, and can reach this address%s (timeout after %s s, NCCLZ_TIMEOUT)",
                   report.waited(now), missing.size(), cfg_.size, where_.c_str(), ranks_text(missing).c_str(),
                   ranks_text(joined).c_str(), cfg_.size, refusals_text().c_str(), fmt_s(cfg_.timeout_s).c_str());
      }
      cv_.wait_until(lk, std::min({deadline, report.next(), now + std::chrono::milliseconds(kServicePollMs)}));
    }
    if (!root_.failure.empty()) {
      // Let handshakes in flight hear why (the service thread answers them
      // with the failure) before this rank 0 goes away.
      cv_.wait_for(lk, std::chrono::milliseconds(500), [&] { return root_.handshakes == 0; });
      if (root_.failure_status == bs::kTimedOut) throw Timeout(root_.failure);
      if (root_.failure_is_system) throw SystemError(root_.failure);
      throw RemoteError(root_.failure);
    }
  }

  std::string refusals_text() const {  // caller holds mu_ (or owns root_)
    if (root_.refused == 0) return "";
    std::string s = ". Refused so far: " + std::to_string(root_.refused) + " connection" +
                    (root_.refused == 1 ? "" : "s") + " (last: " + root_.last_refusal + ")";
    return s;
  }

  // The rendezvous failed: every joined rank hears why; no claim succeeds
  // from now on. Caller holds mu_.
  void fail_rendezvous(const std::string& msg, uint32_t status, bool system = false) {
    if (!root_.failure.empty()) return;
    root_.failure = msg;
    root_.failure_status = status;
    root_.failure_is_system = system;
    Writer body;
    body.str(msg);
    auto reply = bs::frame(bs::kReplyMagic, status, body.b);
    for (auto& fd : root_.joined) {
      if (fd) send_now(fd.get(), reply);
      fd.reset();
    }
    cv_.notify_all();
  }

  // EADDRINUSE on the rendezvous port: take it over from this process's own
  // finished rendezvous, or find out who holds it and say so.
  Fd bind_root() {
    int err = 0;
    try {
      return net::listen_tcp(cfg_.master_addr, cfg_.master_port, 0, 1024, &err);
    } catch (const SystemError& e) {
      if (err != EADDRINUSE) throw;
      {
        std::lock_guard<std::mutex> lk(g_root_mu);
        auto it = root_registry().find(root_key_);
        if (it != root_registry().end() && it->second != this) {
          Handover got = it->second->release_root_listener(cfg_.token, job_id_);
          if (got.fd) {
            NCCLZ_INFO(0, "bootstrap: took the rendezvous port %s over from this process's previous communicator",
                       root_key_.c_str());
            root_registry().erase(it);
            std::lock_guard<std::mutex> lk2(mu_);
            inherited_ = std::move(got.pending);
            return std::move(got.fd);
          }
          // Still in its rendezvous, or another identity: as if it were
          // another process (the probe below tells which).
        }
      }
      throw SystemError("bootstrap: rank 0 cannot listen on " + where_ + ": bind: Address already in use; " +
                        probe_port_owner() +
                        ". Give each job its own MASTER_PORT (ncclz-run picks a free one), or use make_unique_id / a "
                        "store");
    }
  }

  // A handshake with whatever holds the port, as a rank 0 of this identity.
  std::string probe_port_owner() {
    const Endpoint ep{cfg_.master_addr, cfg_.master_port};
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    Fd fd;
    try {
      fd = net::connect_tcp(ep, deadline, nullptr, /*retry_refused=*/false, "probe");
    } catch (const Error&) {
      return "and nothing accepts connections there (a socket that listens elsewhere or does not accept)";
    }
    Hello hello;
    hello.rank = 0;
    hello.size = cfg_.size;
    hello.generation = generation_;
    hello.job_id = job_id_;
    hello.nonce = bs::random_nonce();
    auto hello_bytes = bs::frame(bs::kHelloMagic, bs::kVersion, bs::hello_body(hello).b);
    const Digest hello_hash = base::sha256(hello_bytes.data(), hello_bytes.size());
    uint32_t hdr[3];
    std::vector<uint8_t> body;
    try {
      net::send_all(fd.get(), hello_bytes.data(), hello_bytes.size(), deadline, nullptr, "probe");
      net::recv_all(fd.get(), hdr, sizeof hdr, deadline, nullptr, "probe");
      if (hdr[0] != bs::kReplyMagic || hdr[2] > 65536) return "another program (not an ncclz rank 0) listens there";
      body.resize(hdr[2]);
      net::recv_all(fd.get(), body.data(), body.size(), deadline, nullptr, "probe");
    } catch (const Error&) {
      return "the process listening there does not answer an ncclz hello within 2 s (another program, or a stopped "
             "process)";
    }
    Reader rd{body.data(), body.size()};
    if (hdr[1] != bs::kChallenge) {
      std::string msg = rd.str(65536);
      return "an ncclz rank 0 listens there and answered: " + msg;
    }
    Nonce nonce0;
    rd.raw(nonce0.data(), nonce0.size());
    std::string job_id0 = rd.str(bs::kMaxJobId);
    Digest mac0;
    rd.raw(mac0.data(), mac0.size());
    if (!rd.done()) return "an ncclz rank 0 of another version listens there";
    if (cfg_.check_job_id && job_id0 != job_id_) {
      send_now(fd.get(), bs::frame(bs::kProofMagic, bs::kJobIdDiffers, {}));
      return "the rank 0 of another ncclz job listens there (its job id is '" + job_id0 + "', this one's is '" +
             job_id_ + "')";
    }
    if (!bs::mac_equal(mac0.data(), bs::root_mac(cfg_.token, hello_hash, nonce0, job_id0))) {
      send_now(fd.get(), bs::frame(bs::kProofMagic, bs::kRootProofWrong, {}));
      return "the rank 0 of another ncclz job (another NCCLZ_TOKEN) listens there";
    }
    Writer info;
    RankInfo me;
    me.host = "-";
    me.host_id = this_host_id();
    me.process_id = this_process_id();
    bs::put_info(info, me);
    Digest macr = bs::rank_mac(cfg_.token, hello_hash, mac0, info.b.data(), info.b.size());
    info.raw(macr.data(), macr.size());
    std::string answer;
    try {
      auto proof = bs::frame(bs::kProofMagic, bs::kProofOk, info.b);
      net::send_all(fd.get(), proof.data(), proof.size(), deadline, nullptr, "probe");
      net::recv_all(fd.get(), hdr, sizeof hdr, deadline, nullptr, "probe");
      if (hdr[0] == bs::kReplyMagic && hdr[2] <= 65536) {
        body.resize(hdr[2]);
        net::recv_all(fd.get(), body.data(), body.size(), deadline, nullptr, "probe");
        Reader ar{body.data(), body.size()};
        answer = ar.str(65536);
      }
    } catch (const Error&) {
    }
    return "a rank 0 with this job's identity (" + identity_text() + ") already runs there" +
           (answer.empty() ? std::string() : " and stops now too: " + answer);
  }

  // ---- the service thread ----------------------------------------------------

  struct Handshake {
    bool root = false;        // rendezvous (else point to point)
    bool want_proof = false;  // rendezvous: the challenge went out
    Fd fd;
    Endpoint from;
    std::vector<uint8_t> buf;
    size_t need = 12;
    bool have_header = false;  // buf holds a whole header; need covers the body
    bool got_bytes = false;
    Clock::time_point deadline;
    Hello hello;
    Digest hello_hash{};
    Digest mac0{};
  };

  struct InConn {
    Fd fd;
    uint8_t hdr[16];
    size_t hdr_got = 0;
    int32_t tag = 0;
    std::vector<uint8_t> body;
    size_t body_got = 0;
    bool in_body = false;
  };

  // Rank 0's rendezvous state (guarded by mu_; the listener and the pending
  // handshakes belong to the service thread).
  struct RootState {
    Fd listen;
    Endpoint at;
    bool serving = false;  // this bootstrap serves the listener
    bool complete = false;
    bool release = false;  // hand the listener over (release_root_listener)
    Fd released;
    std::vector<Handshake> released_pending;
    std::string failure;
    uint32_t failure_status = 0;
    bool failure_is_system = false;
    Clock::time_point deadline;
    int arrived = 1;
    std::vector<Fd> joined;
    std::vector<RankInfo> info;
    std::vector<Endpoint> from;
    std::vector<Digest> hello_hash, mac0;
    std::string seen_addr;
    size_t refused = 0;
    std::string last_refusal;
    size_t handshakes = 0;  // rendezvous handshakes in progress (that sent something)
  };

  // Owns the thread and its wake-up pipe; the last member, so it stops first.
  class Service {
   public:
    ~Service() { stop(); }
    void start(std::function<void()> loop) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) throw SystemError(net::errno_text("pipe2", errno));
      wake_r_.reset(p[0]);
      wake_w_.reset(p[1]);
      thread_ = std::thread(std::move(loop));
    }
    void wake() {
      if (!wake_w_) return;
      char c = 1;
      ssize_t r = ::write(wake_w_.get(), &c, 1);
      (void)r;
    }
    void stop() {
      stop_.store(true);
      wake();
      if (thread_.joinable()) thread_.join();
    }
    bool running() const { return thread_.joinable() && !stop_.load(); }
    bool stopping() const { return stop_.load(); }
    int wake_fd() const { return wake_r_.get(); }

   private:
    Fd wake_r_, wake_w_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
  };

  void start_service() {
    if (cfg_.size == 1) return;
    service_.start([this] { service_loop(); });
  }

  void service_loop() {
    Clock::time_point next_shed_report{};
    while (!service_.stopping()) {
      try {
        service_round(&next_shed_report);
      } catch (const std::exception& e) {
        // Never let the thread die: a failure here is one connection's.
        NCCLZ_WARN(cfg_.rank, "bootstrap: service thread: %s", e.what());
      }
    }
  }

  void service_round(Clock::time_point* next_shed_report) {
    // Which listeners are served now, and which joined ranks still wait for
    // the table (one that disconnects fails the rendezvous at once).
    int root_fd = -1;
    std::vector<std::pair<int, int>> joined;  // (rank, fd)
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (root_.release) {
        root_.release = false;
        root_.serving = false;
        root_.released = std::move(root_.listen);
        for (auto& h : pending_) {
          if (h.root) root_.released_pending.push_back(std::move(h));
        }
        pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Handshake& h) { return !h.fd; }),
                       pending_.end());
        cv_.notify_all();
      }
      if (!inherited_.empty()) {
        for (auto& h : inherited_) pending_.push_back(std::move(h));
        inherited_.clear();
      }
      if (root_.serving) root_fd = root_.listen.get();
      if (root_.serving && !root_.complete && root_.failure.empty()) {
        for (int r = 1; r < cfg_.size; ++r) {
          if (root_.joined[r]) joined.emplace_back(r, root_.joined[r].get());
        }
      }
    }
    const int p2p_fd = p2p_ready_.load() ? listen_.get() : -1;
    std::vector<pollfd> pfds;
    pfds.push_back({service_.wake_fd(), POLLIN, 0});
    const size_t i_root = pfds.size();
    if (root_fd >= 0) pfds.push_back({root_fd, POLLIN, 0});
    const size_t i_p2p = pfds.size();
    if (p2p_fd >= 0) pfds.push_back({p2p_fd, POLLIN, 0});
    const size_t i_pending = pfds.size();
    auto now = Clock::now();
    auto next = now + std::chrono::milliseconds(kServicePollMs);
    for (auto& h : pending_) {
      pfds.push_back({h.fd.get(), POLLIN, 0});
      next = std::min(next, h.deadline);
    }
    const size_t i_joined = pfds.size();
    for (auto& j : joined) pfds.push_back({j.second, POLLIN, 0});
    // Star connections: only their end is watched (caller threads read them).
    const size_t i_star = pfds.size();
    std::vector<int> star_rank;
    if (p2p_fd >= 0) {
      std::lock_guard<std::mutex> lk(mu_);
      for (int r = 0; r < cfg_.size; ++r) {
        if (star_[r] && (cfg_.rank == 0) == (r != 0) && star_gone_at_[r] == Clock::time_point{}) {
          pfds.push_back({star_[r].get(), POLLRDHUP, 0});
          star_rank.push_back(r);
        }
      }
    }
    const size_t i_in = pfds.size();
    std::vector<int> in_rank;
    for (int r = 0; r < cfg_.size; ++r) {
      if (in_[r].fd) {
        pfds.push_back({in_[r].fd.get(), POLLIN, 0});
        in_rank.push_back(r);
      }
    }
    int ms = static_cast<int>(
        std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
    ::poll(pfds.data(), pfds.size(), std::min(ms, kServicePollMs));
    if (pfds[0].revents & POLLIN) {
      char drain[64];
      while (::read(service_.wake_fd(), drain, sizeof drain) > 0) {
      }
    }
    if (service_.stopping()) return;
    // Handshakes in progress (before accepting more, so that indices hold).
    for (size_t k = 0; k < pending_.size(); ++k) {
      if (pfds[i_pending + k].revents & (POLLIN | POLLHUP | POLLERR)) advance(pending_[k]);
    }
    for (size_t k = 0; k < in_rank.size(); ++k) {
      if (pfds[i_in + k].revents & (POLLIN | POLLHUP | POLLERR)) read_incoming(in_rank[k]);
    }
    for (size_t k = 0; k < joined.size(); ++k) {
      if (pfds[i_joined + k].revents) check_joined(joined[k].first, joined[k].second);
    }
    for (size_t k = 0; k < star_rank.size(); ++k) {
      if (pfds[i_star + k].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        std::lock_guard<std::mutex> lk(mu_);
        star_gone_at_[star_rank[k]] = Clock::now();
        cv_.notify_all();
      }
    }
    now = Clock::now();
    for (auto& h : pending_) {
      if (h.fd && now >= h.deadline) {
        note_refusal(h, "no complete handshake within " + std::to_string(kHandshakeTimeout.count()) + " s", false);
      }
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Handshake& h) { return !h.fd; }),
                   pending_.end());
    if (root_fd >= 0 && (pfds[i_root].revents & POLLIN)) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!root_.serving) root_fd = -1;  // handed over during the poll
    }
    if (root_fd >= 0 && (pfds[i_root].revents & POLLIN)) accept_all(root_fd, true);
    if (p2p_fd >= 0 && (pfds[i_p2p].revents & POLLIN)) accept_all(p2p_fd, false);
    {
      size_t busy = 0;
      for (auto& h : pending_) busy += h.root && h.got_bytes ? 1 : 0;
      std::lock_guard<std::mutex> lk(mu_);
      root_.handshakes = busy;
      cv_.notify_all();
    }
    if (shed_ > 0 && Clock::now() >= *next_shed_report) {
      NCCLZ_WARN(cfg_.rank,
                 "bootstrap: closed %zu idle or excess connections to this rank's listeners (%s); real ranks are "
                 "still served (at most %zu handshakes pending per listener, %d s each)",
                 shed_, shed_why_.c_str(), max_pending(cfg_.size), static_cast<int>(kHandshakeTimeout.count()));
      shed_ = 0;
      *next_shed_report = Clock::now() + kShedReportPeriod;
    }
  }

  void note_shed(const std::string& why) {
    ++shed_;
    shed_why_ = why;
  }

  void accept_all(int lfd, bool root) {
    for (int k = 0; k < 256; ++k) {
      Fd c;
      auto r = net::accept_or_shed(lfd, &c);
      if (r == net::AcceptResult::Empty) return;
      if (r == net::AcceptResult::Shed) {
        // Out of descriptors: make room by closing idle handshakes.
        long limit = net::raise_fd_limit();
        note_shed("out of file descriptors, limit " + std::to_string(limit));
        size_t idle = 0;
        for (auto& h : pending_) idle += h.got_bytes ? 0 : 1;
        size_t drop = std::max<size_t>(1, idle / 4);
        for (auto& h : pending_) {
          if (drop == 0) break;
          if (h.fd && !h.got_bytes) {
            h.fd.reset();
            note_shed("out of file descriptors, limit " + std::to_string(limit));
            --drop;
          }
        }
        pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Handshake& h) { return !h.fd; }),
                       pending_.end());
        continue;
      }
      size_t same = 0;
      for (auto& h : pending_) same += h.root == root ? 1 : 0;
      if (same >= max_pending(cfg_.size)) {
        // Full: close the oldest idle handshake of this listener, else the oldest.
        auto victim = pending_.end();
        for (auto it = pending_.begin(); it != pending_.end(); ++it) {
          if (it->root != root) continue;
          if (victim == pending_.end()) victim = it;
          if (!it->got_bytes) {
            victim = it;
            break;
          }
        }
        if (victim != pending_.end()) pending_.erase(victim);
        note_shed("more than " + std::to_string(max_pending(cfg_.size)) + " pending connections");
      }
      Handshake h;
      h.root = root;
      h.from = net::peer_endpoint(c.get());
      h.fd = std::move(c);
      h.deadline = Clock::now() + kHandshakeTimeout;
      pending_.push_back(std::move(h));
      advance(pending_.back());  // a real rank's hello is often there already
    }
  }

  // Logs a refused connection (WARN for ncclz peers, INFO for strangers) and
  // closes it; rank 0 counts them for its progress reports.
  void note_refusal(Handshake& h, const std::string& why, bool warn) {
    std::string text = "refused connection from " + h.from.str() + ": " + why;
    if (warn) {
      NCCLZ_WARN(cfg_.rank, "bootstrap: %s", text.c_str());
    } else {
      NCCLZ_INFO(cfg_.rank, "bootstrap: %s", text.c_str());
    }
    if (h.root) {
      std::lock_guard<std::mutex> lk(mu_);
      ++root_.refused;
      root_.last_refusal = h.from.str() + ": " + why;
    }
    h.fd.reset();
  }

  // Reads what a handshake connection has (non-blocking); false when it
  // closed (then it is closed here too).
  bool fill(Handshake& h) {
    while (h.buf.size() < h.need) {
      size_t old = h.buf.size();
      h.buf.resize(h.need);
      ssize_t got = ::recv(h.fd.get(), h.buf.data() + old, h.need - old, 0);
      if (got > 0) {
        h.buf.resize(old + static_cast<size_t>(got));
        h.got_bytes = true;
        continue;
      }
      h.buf.resize(old);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
      NCCLZ_INFO(cfg_.rank, "bootstrap: connection from %s closed during its handshake", h.from.str().c_str());
      h.fd.reset();
      return false;
    }
    return true;
  }

  void advance(Handshake& h) {
    for (;;) {
      if (!h.fd || !fill(h) || h.buf.size() < h.need) return;
      uint32_t magic, word, len;
      std::memcpy(&magic, h.buf.data(), 4);
      std::memcpy(&word, h.buf.data() + 4, 4);
      std::memcpy(&len, h.buf.data() + 8, 4);
      if (!h.have_header) {
        h.have_header = true;
        const uint32_t want = !h.root ? bs::kPHelloMagic : h.want_proof ? bs::kProofMagic : bs::kHelloMagic;
        if (magic != want) return note_refusal(h, "bad magic (not an ncclz bootstrap peer)", false);
        if (!h.want_proof && word != bs::kVersion) {
          return note_refusal(h,
                              "protocol version " + std::to_string(word) + ", expected " +
                                  std::to_string(bs::kVersion) + " (mixed ncclz versions?)",
                              true);
        }
        if (len > bs::kMaxHandshakeBody) return note_refusal(h, "handshake too large", false);
        h.need = 12 + len;
        continue;  // a body of 0 bytes is complete at once
      }
      if (!h.root) return handle_p2p_hello(h);
      if (!h.want_proof) {
        handle_root_hello(h);
        continue;  // the proof may be there already
      }
      return handle_root_proof(h, word);
    }
  }

  void handle_root_hello(Handshake& h) {
    if (!bs::parse_hello(h.buf.data() + 12, h.buf.size() - 12, &h.hello)) {
      return note_refusal(h, "malformed hello", false);
    }
    h.hello_hash = base::sha256(h.buf.data(), h.buf.size());
    Nonce nonce0 = bs::random_nonce();
    h.mac0 = bs::root_mac(cfg_.token, h.hello_hash, nonce0, job_id_);
    Writer body;
    body.raw(nonce0.data(), nonce0.size());
    body.str(job_id_);
    body.raw(h.mac0.data(), h.mac0.size());
    if (!send_now(h.fd.get(), bs::frame(bs::kReplyMagic, bs::kChallenge, body.b))) {
      return note_refusal(h, "could not send the challenge", false);
    }
    h.want_proof = true;
    h.buf.clear();
    h.need = 12;
    h.have_header = false;
  }

  void reply(Handshake& h, uint32_t status, const std::string& msg) {
    Writer body;
    body.str(msg);
    send_now(h.fd.get(), bs::frame(bs::kReplyMagic, status, body.b));
  }

  void handle_root_proof(Handshake& h, uint32_t status) {
    const std::string claim = "rank " + std::to_string(h.hello.rank) + " from " + h.from.str();
    if (status == bs::kRootProofWrong) {
      return note_refusal(h,
                          claim +
                              " does not hold this job's token (rank 0's proof did not check out there): another "
                              "job uses this port, or NCCLZ_TOKEN differs between the ranks",
                          true);
    }
    if (status == bs::kJobIdDiffers) {
      return note_refusal(
          h, claim + " belongs to another job (job id '" + h.hello.job_id + "', this job's is '" + job_id_ + "')",
          true);
    }
    const size_t n = h.buf.size() - 12;
    if (status != bs::kProofOk || n < bs::kMacBytes) return note_refusal(h, "malformed proof", false);
    const uint8_t* info_bytes = h.buf.data() + 12;
    const size_t info_len = n - bs::kMacBytes;
    if (!bs::mac_equal(info_bytes + info_len, bs::rank_mac(cfg_.token, h.hello_hash, h.mac0, info_bytes, info_len))) {
      reply(h, bs::kRefused,
            "rank 0 at " + where_ +
                " refused this rank: its token proof is wrong (another job uses this port, or "
                "NCCLZ_TOKEN differs between the ranks)");
      return note_refusal(h, claim + ": wrong token proof (another job, or NCCLZ_TOKEN differs)", true);
    }
    Reader rd{info_bytes, info_len};
    RankInfo info = bs::get_info(rd);
    if (!rd.done()) return note_refusal(h, "malformed proof", false);
    if (cfg_.check_job_id && h.hello.job_id != job_id_) {
      reply(h, bs::kRefused,
            "rank 0 at " + where_ + " belongs to another job (job id '" + job_id_ + "', this rank's '" +
                h.hello.job_id + "')");
      return note_refusal(h, claim + " belongs to another job (job id '" + h.hello.job_id + "')", true);
    }
    // A proven member of this job's identity.
    const std::string who_claims = h.from.str() + " (" + info.describe() + ")";
    const int r = h.hello.rank;
    std::unique_lock<std::mutex> lk(mu_);
    if (!root_.failure.empty()) {
      std::string msg = root_.failure;
      uint32_t st = root_.failure_status == bs::kTimedOut ? bs::kTimedOut : bs::kRefused;
      lk.unlock();
      reply(h, st, msg);
      h.fd.reset();
      return;
    }
    if (root_.complete && r != 0 && h.hello.generation > generation_) {
      // The job's next communicator on this port, before rank 0 made it.
      lk.unlock();
      reply(h, bs::kNotYet,
            "rank 0 at " + where_ + " still serves this job's communicator #" + std::to_string(generation_ + 1) +
                " on this port; this rank's is #" + std::to_string(h.hello.generation + 1));
      h.fd.reset();
      return;
    }
    std::string conflict;
    if (r == 0) {
      conflict = "another process, " + who_claims + ", started as rank 0 of a job with this identity (" +
                 identity_text() + ") and found this port taken";
    } else if (h.hello.size != cfg_.size) {
      conflict = "rank " + std::to_string(r) + " from " + who_claims + " says the job has " +
                 std::to_string(h.hello.size) + " ranks (WORLD_SIZE), rank 0 says " + std::to_string(cfg_.size);
    } else if (r < 0 || r >= cfg_.size) {
      conflict = "a process from " + who_claims + " claims rank " + std::to_string(r) + " of a " +
                 std::to_string(cfg_.size) + "-rank job";
    } else if (root_.complete || root_.joined[r]) {
      conflict = "rank " + std::to_string(r) + " is claimed twice: by " + root_.from[r].str() + " (" +
                 root_.info[r].describe() + ")" + (root_.complete ? ", which joined the job," : "") + " and by " +
                 who_claims + (root_.complete ? " after the job started" : "");
    }
    if (!conflict.empty()) {
      const std::string msg = "bootstrap: rank 0 at " + where_ + ": " + conflict + "." + conflict_advice();
      if (!root_.complete) {
        reply(h, bs::kConflict, msg);
        h.fd.reset();
        NCCLZ_WARN(0, "%s", msg.c_str());
        fail_rendezvous(msg, bs::kConflict);
        return;
      }
      lk.unlock();
      raise_conflict(msg);  // first: the job is aborted before the claimant hears of it
      reply(h, bs::kConflict, msg);
      h.fd.reset();
      return;
    }
    if (info.port <= 0 || info.port > 65535) {
      lk.unlock();
      return note_refusal(h, claim + ": invalid listening port", true);
    }
    if (root_.seen_addr.empty()) root_.seen_addr = net::local_endpoint(h.fd.get()).host;
    root_.info[r] = std::move(info);
    root_.from[r] = h.from;
    root_.hello_hash[r] = h.hello_hash;
    root_.mac0[r] = h.mac0;
    root_.joined[r] = std::move(h.fd);
    ++root_.arrived;
    NCCLZ_TRACE(0, "bootstrap: rank %d connected from %s (%d/%d)", r, h.from.str().c_str(), root_.arrived, cfg_.size);
    if (root_.arrived == cfg_.size) complete_rendezvous();
  }

  // A joined rank sends nothing until it has the table: end of stream or
  // data means it left (killed, failed) or broke the protocol, and the job
  // cannot start.
  void check_joined(int r, int fd) {
    std::lock_guard<std::mutex> lk(mu_);
    if (root_.complete || !root_.failure.empty() || root_.joined[r].get() != fd) return;
    char c;
    ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    std::string msg = "bootstrap: rank 0 at " + where_ + ": rank " + std::to_string(r) + " (from " +
                      root_.from[r].str() + ", " + root_.info[r].describe() + ") " +
                      (k > 0 ? "sent data before the table (a protocol error)"
                             : "disconnected during the rendezvous (it exited or was killed; see its log)") +
                      "; the job cannot start";
    NCCLZ_WARN(0, "%s", msg.c_str());
    root_.joined[r].reset();
    fail_rendezvous(msg, bs::kRefused);
  }

  // Every rank is in: open rank 0's point-to-point listener and send the
  // table. Service thread, mu_ held.
  void complete_rendezvous() {
    try {
      std::string host =
          net::is_wildcard(root_.at.host) ? (root_.seen_addr.empty() ? "127.0.0.1" : root_.seen_addr) : root_.at.host;
      listen_ = net::listen_tcp(pick_address(host), 0);
      table_[0] = my_info(listen_);
      for (int r = 1; r < cfg_.size; ++r) table_[r] = root_.info[r];
      job_key_ = "j" + bs::job_tag(env_job_id_) + net::random_hex(4);
      Writer table;
      table.str(job_key_);
      table.u32(static_cast<uint32_t>(cfg_.size));
      for (auto& info : table_) bs::put_info(table, info);
      for (int r = 1; r < cfg_.size; ++r) {
        Writer body;
        body.raw(table.b.data(), table.b.size());
        Digest mac = bs::table_mac(cfg_.token, root_.hello_hash[r], root_.mac0[r], table.b.data(), table.b.size());
        body.raw(mac.data(), mac.size());
        auto bytes = bs::frame(bs::kReplyMagic, bs::kTable, body.b);
        net::send_all(root_.joined[r].get(), bytes.data(), bytes.size(), root_.deadline + grace(), abort_fn(),
                      who("rendezvous", r, "->"));
      }
    } catch (const Error& e) {
      fail_rendezvous(std::string("bootstrap: rank 0 could not complete the rendezvous: ") + e.what(), bs::kRefused,
                      dynamic_cast<const SystemError*>(&e) != nullptr);
      return;
    }
    for (int r = 1; r < cfg_.size; ++r) star_[r] = std::move(root_.joined[r]);
    root_.complete = true;
    p2p_ready_.store(true);
    cv_.notify_all();
  }

  void raise_conflict(const std::string& msg) {
    NCCLZ_WARN(0, "%s", msg.c_str());
    abort(msg);
    std::lock_guard<std::mutex> lk(conflict_mu_);
    if (!conflict_.empty()) return;
    conflict_ = msg;
    if (conflict_fn_) conflict_fn_(msg);
  }

  void handle_p2p_hello(Handshake& h) {
    Reader rd{h.buf.data() + 12, h.buf.size() - 12};
    std::string key = rd.str(64);
    int src = rd.i32();
    int dst = rd.i32();
    Nonce nonce;
    rd.raw(nonce.data(), nonce.size());
    uint8_t mac[bs::kMacBytes];
    rd.raw(mac, sizeof mac);
    if (!rd.done()) return note_refusal(h, "malformed hello", false);
    if (key != job_key_ || dst != cfg_.rank || src < 0 || src >= cfg_.size || src == cfg_.rank) {
      return note_refusal(h, "wrong job, rank or destination", true);
    }
    if (!bs::mac_equal(mac, bs::p2p_mac(cfg_.token, key, src, dst, nonce))) {
      return note_refusal(h, "wrong token proof for rank " + std::to_string(src), true);
    }
    if (!seen_nonces_.insert(nonce).second) return note_refusal(h, "replayed hello", true);
    if (in_[src].fd) return note_refusal(h, "duplicate connection from rank " + std::to_string(src), true);
    in_[src] = InConn();
    in_[src].fd = std::move(h.fd);
    std::lock_guard<std::mutex> lk(mu_);
    closed_[src].clear();
    in_open_[src] = 1;
  }

  void read_incoming(int src) {
    InConn& c = in_[src];
    auto close_with = [&](const std::string& why) {
      c.fd.reset();
      std::lock_guard<std::mutex> lk(mu_);
      closed_[src] = why;
      in_open_[src] = 0;
      cv_.notify_all();
    };
    for (int round = 0; round < 64; ++round) {
      uint8_t* dst;
      size_t want;
      if (!c.in_body) {
        dst = c.hdr + c.hdr_got;
        want = sizeof c.hdr - c.hdr_got;
      } else {
        dst = c.body.data() + c.body_got;
        want = c.body.size() - c.body_got;
      }
      ssize_t got = want ? ::recv(c.fd.get(), dst, want, 0) : 0;
      if (want && got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        return close_with(
            got == 0
                ? "the connection from rank " + std::to_string(src) + " closed (it exited or failed; see its log)"
                : "the connection from rank " + std::to_string(src) + " failed: " + net::errno_text("recv", errno));
      }
      if (!c.in_body) {
        c.hdr_got += static_cast<size_t>(got);
        if (c.hdr_got < sizeof c.hdr) continue;
        uint32_t magic;
        uint64_t len;
        std::memcpy(&magic, c.hdr, 4);
        std::memcpy(&c.tag, c.hdr + 4, 4);
        std::memcpy(&len, c.hdr + 8, 8);
        if (magic != bs::kPMsgMagic || len > kMaxMessage) {
          return close_with("corrupt bootstrap message from rank " + std::to_string(src) + " (bad magic or length)");
        }
        c.body.assign(len, 0);
        c.body_got = 0;
        c.in_body = true;
      } else {
        c.body_got += static_cast<size_t>(got);
      }
      if (c.in_body && c.body_got == c.body.size()) {
        std::lock_guard<std::mutex> lk(mu_);
        queues_[{src, c.tag}].push_back(std::move(c.body));
        cv_.notify_all();
        c.body = {};
        c.in_body = false;
        c.hdr_got = 0;
      }
    }
  }

  // ---- members -----------------------------------------------------------------

  BootstrapConfig cfg_;
  bool from_uid_ = false;
  std::string ifname_addr_;
  std::string env_job_id_;  // the launcher's job id (names shm segments through the job key)
  std::string job_id_;      // the one checked ("" when not checked or none)
  std::string where_;       // "MASTER_ADDR:MASTER_PORT 1.2.3.4:29500" (for messages)
  std::string root_key_;
  uint32_t generation_ = 0;

  // Set by the rendezvous, read-only afterwards.
  std::string job_key_;
  std::vector<RankInfo> table_;
  Fd listen_;  // my point-to-point listener
  std::atomic<bool> p2p_ready_{false};

  // Caller threads.
  std::vector<Fd> star_;  // rank 0: one per rank; others: star_[0] to rank 0
  std::vector<Fd> out_;   // my point-to-point connections, by destination rank
  std::mutex star_mu_, out_mu_;
  uint32_t star_seq_ = 0;
  bool star_failure_told_ = false;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;

  std::mutex conflict_mu_;
  std::function<void(const std::string&)> conflict_fn_;
  std::string conflict_;

  // Shared with the service thread.
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;  // (src, tag)
  std::vector<std::string> closed_;              // why an incoming connection closed, by source rank
  std::vector<char> in_open_;                    // an incoming connection from the rank is open
  std::vector<Clock::time_point> star_gone_at_;  // when its star connection closed ({} = open)
  RootState root_;

  // The service thread's own.
  std::vector<Handshake> pending_;
  std::vector<Handshake> inherited_;  // handed over with the rendezvous listener (under mu_)
  std::vector<InConn> in_;            // accepted point-to-point connections, by source rank
  std::set<Nonce> seen_nonces_;
  size_t shed_ = 0;
  std::string shed_why_;

  Service service_;  // last: stopped (joined) before anything above is destroyed
};

TcpBootstrap::Handover TcpBootstrap::release_root_listener(const std::string& token, const std::string& job_id) {
  Handover out;
  if (token != cfg_.token || job_id != job_id_) return out;
  std::unique_lock<std::mutex> lk(mu_);
  if (!root_.serving || !root_.complete || !service_.running()) return out;
  root_.release = true;
  service_.wake();
  cv_.wait_for(lk, std::chrono::seconds(2), [&] { return !root_.serving; });
  out.fd = std::move(root_.released);
  out.pending = std::move(root_.released_pending);
  root_.released_pending.clear();
  return out;
}

}  // namespace

std::unique_ptr<Bootstrap> Bootstrap::create(const BootstrapConfig& cfg) {
  return std::make_unique<TcpBootstrap>(cfg, Fd(), /*from_uid=*/false);
}

UniqueId Bootstrap::make_unique_id(const std::string& addr, int port) {
  std::string host = addr;
  if (host.empty()) {
    std::string ifname = env::get_string("NCCLZ_SOCKET_IFNAME", "");
    if (!ifname.empty()) {
      auto a = net::interface_address(ifname);
      if (!a) {
        throw InvalidArgument("make_unique_id: NCCLZ_SOCKET_IFNAME='" + ifname +
                              "' matches no interface with an address on this host");
      }
      host = *a;
    } else {
      host = "127.0.0.1";  // single-host default; multi-host jobs pass addr or set NCCLZ_SOCKET_IFNAME
    }
  }
  if (port < 0 || port > 65535) throw InvalidArgument("make_unique_id: port " + std::to_string(port) + " out of range");
  Fd fd = net::listen_tcp(host, port);
  Endpoint ep = net::local_endpoint(fd.get());
  if (net::is_wildcard(ep.host)) {
    throw InvalidArgument("make_unique_id: '" + host +
                          "' is a wildcard address that peers cannot connect to; pass this host's address");
  }
  if (ep.host.size() > 64) throw InvalidArgument("make_unique_id: address too long");
  std::string token = net::random_hex(24);
  UniqueId id{};
  std::memcpy(id.bytes, &kUidMagic, 4);
  id.bytes[4] = 1;
  id.bytes[5] = static_cast<uint8_t>(ep.host.size());
  id.bytes[6] = static_cast<uint8_t>(ep.port >> 8);
  id.bytes[7] = static_cast<uint8_t>(ep.port & 0xff);
  std::memcpy(id.bytes + 8, ep.host.data(), ep.host.size());
  id.bytes[72] = static_cast<uint8_t>(token.size());
  std::memcpy(id.bytes + 73, token.data(), token.size());
  std::lock_guard<std::mutex> lk(g_uid_mu);
  uid_registry()[ep.str() + "/" + token] = std::move(fd);
  return id;
}

std::unique_ptr<Bootstrap> Bootstrap::create(const UniqueId& id, int rank, int size, double timeout_s) {
  ParsedId p = parse_id(id);
  BootstrapConfig cfg;
  cfg.rank = rank;
  cfg.size = size;
  cfg.master_addr = p.host;
  cfg.master_port = p.port;
  cfg.token = p.token;
  cfg.timeout_s = timeout_s;
  cfg.check_job_id = false;
  Fd listen;
  if (rank == 0) {
    std::lock_guard<std::mutex> lk(g_uid_mu);
    auto it = uid_registry().find(Endpoint{p.host, p.port}.str() + "/" + p.token);
    if (it != uid_registry().end()) {
      listen = std::move(it->second);
      uid_registry().erase(it);
    }
    // Not found: made by another process (or used twice); listen afresh.
    if (!listen && size > 1) {
      try {
        listen = net::listen_tcp(p.host, p.port);
      } catch (const SystemError& e) {
        throw SystemError(std::string(e.what()) +
                          ". Rank 0 must run in the process that called make_unique_id() (which keeps that "
                          "port open), or that process must have exited");
      }
    }
  }
  return std::make_unique<TcpBootstrap>(cfg, std::move(listen), /*from_uid=*/true);
}

}  // namespace ncclz
