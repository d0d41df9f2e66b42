// TCP bootstrap: rendezvous at rank 0, a star for small collectives, and
// lazily opened point-to-point connections for tagged messages.
//
// Wire protocol (all integers little-endian as laid out by this host; every
// message is length-prefixed and every length is checked before use):
//
//   rank r -> rank 0 (rendezvous, on the connection to master_addr:port)
//     Hello  u32 'NCZB' | u32 version | u32 body_len | body
//            body = i32 rank | i32 size | str token | str host | u32 port |
//                   str host_id | str process_id          (str = u32 len + bytes)
//   rank 0 -> rank r
//     Reply  u32 'NCZR' | u32 status (0 ok, 1 refused, 2 timed out) | u32 body_len | body
//            ok:    str job_key | u32 n | n x (str host | u32 port | str host_id | str process_id)
//            error: str message (only sent to peers whose token was right)
//   star collectives (same connection, in call order)
//     Frame  u32 'NCZC' | u32 seq | u64 len | bytes
//   rank a -> rank b point to point (connection opened lazily by a to b's listener)
//     PHello u32 'NCZP' | u32 version | u32 body_len | str token | str job_key | i32 src | i32 dst
//     PMsg   u32 'NCZM' | i32 tag | u64 len | bytes
//
// Refusals (bad magic/version, wrong token, rank out of range, duplicate rank,
// size mismatch, no hello within kHelloTimeout) close the connection and log
// "refused connection from ADDR: REASON"; rank 0 keeps waiting for the real
// peers until the deadline, then fails with a Timeout naming the missing ranks.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <poll.h>
#include <sys/socket.h>

#include "bootstrap/bootstrap.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"

namespace ncclz {
namespace {

using net::Clock;
using net::Endpoint;
using net::Fd;

constexpr uint32_t kHelloMagic = 0x425a434e;   // "NCZB"
constexpr uint32_t kReplyMagic = 0x525a434e;   // "NCZR"
constexpr uint32_t kFrameMagic = 0x435a434e;   // "NCZC"
constexpr uint32_t kPHelloMagic = 0x505a434e;  // "NCZP"
constexpr uint32_t kPMsgMagic = 0x4d5a434e;    // "NCZM"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxHelloBody = 64 * 1024;
constexpr uint64_t kMaxMessage = uint64_t(1) << 32;  // sanity bound for bootstrap payloads
constexpr auto kHelloTimeout = std::chrono::seconds(5);
constexpr uint32_t kStatusOk = 0, kStatusRefused = 1, kStatusTimeout = 2;  // Reply status

// ---- little serialization helpers ------------------------------------------

struct Writer {
  std::vector<uint8_t> b;
  void u32(uint32_t v) { raw(&v, 4); }
  void i32(int32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
};

// Bounds-checked reader: a malformed message is an error, never an overrun.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t off = 0;
  bool ok = true;
  void raw(void* out, size_t k) {
    if (!ok || n - off < k) {
      ok = false;
      std::memset(out, 0, k);
      return;
    }
    std::memcpy(out, p + off, k);
    off += k;
  }
  uint32_t u32() {
    uint32_t v;
    raw(&v, 4);
    return v;
  }
  int32_t i32() {
    int32_t v;
    raw(&v, 4);
    return v;
  }
  std::string str() {
    uint32_t len = u32();
    if (!ok || n - off < len) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p + off), len);
    off += len;
    return s;
  }
};

struct RankInfo {
  std::string host;
  int port = 0;
  std::string host_id;
  std::string process_id;
};

void put_info(Writer& w, const RankInfo& r) {
  w.str(r.host);
  w.u32(static_cast<uint32_t>(r.port));
  w.str(r.host_id);
  w.str(r.process_id);
}

RankInfo get_info(Reader& rd) {
  RankInfo r;
  r.host = rd.str();
  r.port = static_cast<int>(rd.u32());
  r.host_id = rd.str();
  r.process_id = rd.str();
  return r;
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

std::mutex g_uid_mu;
std::map<std::string, Fd>& uid_registry() {  // key: "host:port/token"
  static std::map<std::string, Fd> m;
  return m;
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

// ---- the bootstrap -----------------------------------------------------------

class TcpBootstrap final : public Bootstrap {
 public:
  explicit TcpBootstrap(const BootstrapConfig& cfg, Fd root_listen = Fd()) : cfg_(cfg) {
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
    table_.resize(static_cast<size_t>(cfg_.size));
    in_.resize(static_cast<size_t>(cfg_.size));
    closed_.resize(static_cast<size_t>(cfg_.size));
    out_.resize(static_cast<size_t>(cfg_.size));
    star_.resize(static_cast<size_t>(cfg_.size));
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    if (cfg_.rank == 0) {
      rendezvous_root(std::move(root_listen), deadline);
    } else {
      rendezvous_peer(deadline);
    }
    NCCLZ_INFO(cfg_.rank, "bootstrap: %d ranks connected, job %s, listening at %s", cfg_.size,
               job_key_.c_str(), Endpoint{table_[cfg_.rank].host, table_[cfg_.rank].port}.str().c_str());
  }

  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  const std::string& host_id(int r) const override { return table_.at(check_rank(r, "host_id")).host_id; }
  const std::string& process_id(int r) const override {
    return table_.at(check_rank(r, "process_id")).process_id;
  }
  const std::string& job_key() const override { return job_key_; }
  std::string advertised_address() const override { return table_[cfg_.rank].host; }
  double timeout_s() const override { return cfg_.timeout_s; }

  void allgather(const void* mine, size_t bytes, void* all) override {
    std::lock_guard<std::mutex> lk(star_mu_);
    check_abort();
    uint32_t seq = ++star_seq_;
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    auto* out = static_cast<uint8_t*>(all);
    const int n = cfg_.size;
    if (cfg_.rank == 0) {
      if (bytes) std::memmove(out, mine, bytes);
      for (int r = 1; r < n; ++r) {
        read_frame(star_[r].get(), seq, out + static_cast<size_t>(r) * bytes, bytes, deadline,
                   who("allgather", r, "<-"));
      }
      for (int r = 1; r < n; ++r) {
        write_frame(star_[r].get(), seq, out, bytes * static_cast<size_t>(n), deadline, who("allgather", r, "->"));
      }
    } else {
      std::vector<uint8_t> copy(static_cast<const uint8_t*>(mine), static_cast<const uint8_t*>(mine) + bytes);
      write_frame(star_[0].get(), seq, copy.data(), bytes, deadline, who("allgather", 0, "->"));
      // Rank 0 answers only when every rank has contributed: allow it the
      // whole timeout plus a grace, so rank 0's own timeout message wins.
      read_frame(star_[0].get(), seq, out, bytes * static_cast<size_t>(n), deadline + grace(),
                 who("allgather", 0, "<-"));
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
      std::lock_guard<std::mutex> lk(in_mu_);
      const auto* p = static_cast<const uint8_t*>(data);
      queues_[{peer, tag}].emplace_back(p, p + bytes);
      return;
    }
    std::lock_guard<std::mutex> lk(out_mu_);
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
    std::string w = who("send", peer, "->");
    if (!out_[peer]) {
      Endpoint ep{table_[peer].host, table_[peer].port};
      Fd fd = net::connect_tcp(ep, deadline, abort_fn(), /*retry_refused=*/true, w);
      Writer body;
      body.str(cfg_.token);
      body.str(job_key_);
      body.i32(cfg_.rank);
      body.i32(peer);
      Writer h;
      h.u32(kPHelloMagic);
      h.u32(kVersion);
      h.u32(static_cast<uint32_t>(body.b.size()));
      h.raw(body.b.data(), body.b.size());
      net::send_all(fd.get(), h.b.data(), h.b.size(), deadline, abort_fn(), w);
      out_[peer] = std::move(fd);
    }
    Writer m;
    m.u32(kPMsgMagic);
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
    std::lock_guard<std::mutex> lk(in_mu_);
    auto deadline = Clock::now() + to_dur(cfg_.timeout_s);
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
        throw InvalidArgument("bootstrap rank " + std::to_string(cfg_.rank) +
                              ": recv from itself with tag " + std::to_string(tag) + " but nothing was sent");
      }
      if (Clock::now() >= deadline) {
        throw Timeout("bootstrap rank " + std::to_string(cfg_.rank) + ": timed out after " +
                      fmt_s(cfg_.timeout_s) + " s waiting for a message from rank " + std::to_string(peer) +
                      " (tag " + std::to_string(tag) +
                      "); is that rank alive and running the same setup? (NCCLZ_TIMEOUT)");
      }
      if (!in_[peer] && !closed_[peer].empty()) {
        throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": waiting for a message from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) +
                          ") but its connection is closed: " + closed_[peer]);
      }
      pump_incoming(peer, deadline);
    }
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lk(abort_mu_);
      if (aborted_.load()) return;
      abort_reason_ = reason;
    }
    aborted_.store(true);
  }

 private:
  static std::chrono::nanoseconds to_dur(double s) {
    return std::chrono::nanoseconds(static_cast<int64_t>(std::min(s, 1e8) * 1e9));
  }
  std::chrono::nanoseconds grace() const { return to_dur(std::min(cfg_.timeout_s, 2.0)); }
  static std::string fmt_s(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
  }

  int check_rank(int r, const char* what) const {
    if (r < 0 || r >= cfg_.size) {
      throw InvalidArgument(std::string("bootstrap ") + what + ": rank " + std::to_string(r) +
                            " is outside [0, " + std::to_string(cfg_.size) + ")");
    }
    return r;
  }

  void check_abort() const {
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lk(abort_mu_);
      throw Aborted("bootstrap rank " + std::to_string(cfg_.rank) + " aborted: " + abort_reason_);
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

  // -- rendezvous, rank 0 side --------------------------------------------------

  struct Pending {
    Fd fd;
    Endpoint from;
    std::vector<uint8_t> buf;
    Clock::time_point hello_deadline;
  };

  void refuse(Pending& p, const std::string& reason, bool tell) {
    NCCLZ_WARN(0, "bootstrap: refused connection from %s: %s", p.from.str().c_str(), reason.c_str());
    if (tell) {
      Writer body;
      body.str("rank 0 refused this rank: " + reason);
      send_reply(p.fd.get(), kStatusRefused, body, Clock::now() + std::chrono::milliseconds(200), "refusal");
    }
    p.fd.reset();
  }

  void send_reply(int fd, uint32_t status, const Writer& body, Clock::time_point deadline,
                  const std::string& w) {
    Writer h;
    h.u32(kReplyMagic);
    h.u32(status);
    h.u32(static_cast<uint32_t>(body.b.size()));
    h.raw(body.b.data(), body.b.size());
    try {
      net::send_all(fd, h.b.data(), h.b.size(), deadline, abort_fn(), w);
    } catch (const Aborted&) {
      throw;
    } catch (const Error& e) {
      if (status == kStatusOk) throw;  // a failed table send is fatal; a failed error report is not
    }
  }

  // Parses a complete hello. Returns "" when accepted (and fills rank/info).
  std::string check_hello(const std::vector<uint8_t>& buf, int* rank, RankInfo* info, bool* tell) {
    *tell = false;
    Reader rd{buf.data() + 12, buf.size() - 12};
    int r = rd.i32();
    int size = rd.i32();
    std::string token = rd.str();
    RankInfo in = get_info(rd);
    if (!rd.ok || rd.off != rd.n) return "malformed hello";
    if (!net::equal_ct(token.data(), token.size(), cfg_.token.data(), cfg_.token.size())) {
      return "wrong token";
    }
    *tell = true;  // the peer proved it belongs to the job: it may learn why
    if (size != cfg_.size) {
      return "rank " + std::to_string(r) + " says the job has " + std::to_string(size) + " ranks, rank 0 says " +
             std::to_string(cfg_.size);
    }
    if (r <= 0 || r >= cfg_.size) {
      return "rank " + std::to_string(r) + " out of range [1, " + std::to_string(cfg_.size) + ")";
    }
    if (star_[r]) return "duplicate rank " + std::to_string(r) + " (already connected)";
    if (in.port <= 0 || in.port > 65535) return "invalid listening port";
    *rank = r;
    *info = std::move(in);
    return "";
  }

  void rendezvous_root(Fd listen, Clock::time_point deadline) {
    // A job of one needs no rendezvous port (several may run side by side).
    if (!listen && cfg_.size > 1) listen = net::listen_tcp(cfg_.master_addr, cfg_.master_port);
    Endpoint master = listen ? net::local_endpoint(listen.get()) : Endpoint{"127.0.0.1", 0};
    std::vector<Pending> pending;
    int arrived = 1;
    std::string seen_addr;  // my address as a peer reached it
    while (arrived < cfg_.size) {
      check_abort();
      auto now = Clock::now();
      if (now >= deadline) {
        std::vector<int> missing;
        for (int r = 1; r < cfg_.size; ++r) {
          if (!star_[r]) missing.push_back(r);
        }
        std::string msg = "bootstrap: rank 0 timed out after " + fmt_s(cfg_.timeout_s) + " s waiting for " +
                          std::to_string(missing.size()) + " of " + std::to_string(cfg_.size) +
                          " ranks to connect to " + master.str() + "; missing ranks: " + ranks_text(missing) +
                          ". Check that they were started, with the same MASTER_ADDR/MASTER_PORT (or "
                          "UniqueId), token and world size, and can reach this address (NCCLZ_TIMEOUT, "
                          "NCCLZ_SOCKET_IFNAME)";
        Writer body;
        body.str(msg);
        for (int r = 1; r < cfg_.size; ++r) {
          if (star_[r]) {
            send_reply(star_[r].get(), kStatusTimeout, body, Clock::now() + std::chrono::milliseconds(200),
                       "timeout report");
          }
        }
        throw Timeout(msg);
      }
      std::vector<pollfd> pfds;
      pfds.push_back({listen.get(), POLLIN, 0});
      for (auto& p : pending) pfds.push_back({p.fd.get(), POLLIN, 0});
      ::poll(pfds.data(), pfds.size(), net::kPollSliceMs);
      if (pfds[0].revents & POLLIN) {
        for (;;) {
          Fd c = net::accept_tcp(listen.get(), Clock::now(), nullptr);
          if (!c) break;
          Pending p;
          p.from = net::peer_endpoint(c.get());
          p.fd = std::move(c);
          p.hello_deadline = Clock::now() + kHelloTimeout;
          pending.push_back(std::move(p));
        }
      }
      now = Clock::now();
      for (auto& p : pending) {
        // Read what is there (non-blocking).
        for (;;) {
          size_t need = 12;
          if (p.buf.size() >= 12) {
            uint32_t magic, version, body_len;
            std::memcpy(&magic, p.buf.data(), 4);
            std::memcpy(&version, p.buf.data() + 4, 4);
            std::memcpy(&body_len, p.buf.data() + 8, 4);
            if (magic != kHelloMagic) {
              refuse(p, "bad magic (not an ncclz bootstrap peer)", false);
              break;
            }
            if (version != kVersion) {
              refuse(p, "protocol version " + std::to_string(version) + ", expected " + std::to_string(kVersion) +
                            " (mixed ncclz versions?)", false);
              break;
            }
            if (body_len > kMaxHelloBody) {
              refuse(p, "hello too large", false);
              break;
            }
            need = 12 + body_len;
          }
          if (p.buf.size() == need && need > 12) {
            int r = -1;
            RankInfo info;
            bool tell = false;
            std::string why = check_hello(p.buf, &r, &info, &tell);
            if (!why.empty()) {
              refuse(p, why, tell);
            } else {
              if (seen_addr.empty()) seen_addr = net::local_endpoint(p.fd.get()).host;
              table_[r] = std::move(info);
              star_[r] = std::move(p.fd);
              ++arrived;
              NCCLZ_TRACE(0, "bootstrap: rank %d connected from %s (%d/%d)", r, p.from.str().c_str(), arrived,
                          cfg_.size);
            }
            break;
          }
          size_t old = p.buf.size();
          p.buf.resize(need);
          ssize_t got = ::recv(p.fd.get(), p.buf.data() + old, need - old, 0);
          if (got > 0) {
            p.buf.resize(old + static_cast<size_t>(got));
            continue;
          }
          p.buf.resize(old);
          if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            NCCLZ_INFO(0, "bootstrap: connection from %s closed before its hello", p.from.str().c_str());
            p.fd.reset();
          }
          break;
        }
        if (p.fd && now >= p.hello_deadline) refuse(p, "no complete hello within 5 s", false);
      }
      pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return !p.fd; }),
                    pending.end());
    }
    pending.clear();  // late or extra connections: closed
    // Everyone is in. My own listener for point-to-point messages.
    std::string host = net::is_wildcard(master.host) ? (seen_addr.empty() ? "127.0.0.1" : seen_addr) : master.host;
    host = pick_address(host);
    listen_ = net::listen_tcp(host, 0);
    table_[0] = my_info(listen_);
    job_key_ = "j" + net::random_hex(8);
    Writer body;
    body.str(job_key_);
    body.u32(static_cast<uint32_t>(cfg_.size));
    for (auto& r : table_) put_info(body, r);
    for (int r = 1; r < cfg_.size; ++r) {
      send_reply(star_[r].get(), kStatusOk, body, deadline + grace(), who("rendezvous", r, "->"));
    }
  }

  // -- rendezvous, rank r > 0 side --------------------------------------------

  void rendezvous_peer(Clock::time_point deadline) {
    std::string w = who("rendezvous", 0, "->");
    Endpoint master{cfg_.master_addr, cfg_.master_port};
    Fd fd = net::connect_tcp(master, deadline, abort_fn(), /*retry_refused=*/true, w);
    listen_ = net::listen_tcp(pick_address(net::local_endpoint(fd.get()).host), 0);
    RankInfo me = my_info(listen_);
    Writer body;
    body.i32(cfg_.rank);
    body.i32(cfg_.size);
    body.str(cfg_.token);
    put_info(body, me);
    Writer h;
    h.u32(kHelloMagic);
    h.u32(kVersion);
    h.u32(static_cast<uint32_t>(body.b.size()));
    h.raw(body.b.data(), body.b.size());
    net::send_all(fd.get(), h.b.data(), h.b.size(), deadline, abort_fn(), w);

    std::string wr = who("rendezvous", 0, "<-");
    uint32_t hdr[3];
    try {
      net::recv_all(fd.get(), hdr, sizeof hdr, deadline + grace(), abort_fn(), wr);
    } catch (const Timeout&) {
      throw Timeout("bootstrap: rank " + std::to_string(cfg_.rank) + " timed out after " + fmt_s(cfg_.timeout_s) +
                    " s waiting for rank 0 at " + master.str() +
                    " to send the rank table (some other ranks are probably missing; rank 0's error names "
                    "them; NCCLZ_TIMEOUT)");
    } catch (const Aborted&) {
      throw;
    } catch (const RemoteError&) {
      throw RemoteError("bootstrap: rank 0 at " + master.str() + " closed the connection of rank " +
                        std::to_string(cfg_.rank) +
                        " without an answer: it refused this rank (wrong token, or another job listens at "
                        "that address) or it failed; see rank 0's log");
    }
    if (hdr[0] != kReplyMagic || hdr[2] > (64u << 20)) {
      throw RemoteError("bootstrap: rank " + std::to_string(cfg_.rank) + ": the server at " + master.str() +
                        " is not an ncclz rank 0 (bad reply)");
    }
    std::vector<uint8_t> rb(hdr[2]);
    net::recv_all(fd.get(), rb.data(), rb.size(), deadline + grace(), abort_fn(), wr);
    Reader rd{rb.data(), rb.size()};
    if (hdr[1] != kStatusOk) {
      std::string msg = rd.str();
      if (hdr[1] == kStatusTimeout) {
        throw Timeout(msg + " (reported by rank 0 to rank " + std::to_string(cfg_.rank) + ")");
      }
      throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": " + msg);
    }
    job_key_ = rd.str();
    uint32_t n = rd.u32();
    if (n != static_cast<uint32_t>(cfg_.size)) rd.ok = false;
    for (uint32_t r = 0; r < n && rd.ok; ++r) table_[r] = get_info(rd);
    if (!rd.ok) {
      throw RemoteError("bootstrap rank " + std::to_string(cfg_.rank) + ": malformed rank table from rank 0");
    }
    star_[0] = std::move(fd);
  }

  // -- star frames -------------------------------------------------------------

  void write_frame(int fd, uint32_t seq, const void* data, size_t bytes, Clock::time_point deadline,
                   const std::string& w) {
    Writer h;
    h.u32(kFrameMagic);
    h.u32(seq);
    h.u64(bytes);
    net::send_all(fd, h.b.data(), h.b.size(), deadline, abort_fn(), w);
    net::send_all(fd, data, bytes, deadline, abort_fn(), w);
  }

  void read_frame(int fd, uint32_t seq, void* data, size_t bytes, Clock::time_point deadline,
                  const std::string& w) {
    uint8_t h[16];
    net::recv_all(fd, h, sizeof h, deadline, abort_fn(), w);
    uint32_t magic, s;
    uint64_t len;
    std::memcpy(&magic, h, 4);
    std::memcpy(&s, h + 4, 4);
    std::memcpy(&len, h + 8, 8);
    if (magic != kFrameMagic || s != seq || len != bytes) {
      throw RemoteError(w + ": mismatched bootstrap collective (call #" + std::to_string(seq) + " with " +
                        std::to_string(bytes) + " bytes here, peer sent call #" + std::to_string(s) + " with " +
                        std::to_string(len) +
                        " bytes): the ranks do not call the same setup sequence (same version/config everywhere?)");
    }
    net::recv_all(fd, data, bytes, deadline, abort_fn(), w);
  }

  // -- point to point, receiving side ----------------------------------------

  // Waits (one poll slice) for anything on the listener or the incoming
  // connections, accepts/validates new ones and queues complete messages.
  void pump_incoming(int want, Clock::time_point deadline) {
    std::vector<pollfd> pfds;
    std::vector<int> who_idx;
    pfds.push_back({listen_.get(), POLLIN, 0});
    who_idx.push_back(-1);
    for (int r = 0; r < cfg_.size; ++r) {
      if (in_[r]) {
        pfds.push_back({in_[r].get(), POLLIN, 0});
        who_idx.push_back(r);
      }
    }
    ::poll(pfds.data(), pfds.size(), net::kPollSliceMs);
    for (size_t i = 1; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = who_idx[i];
      std::string w = who("recv", r, "<-");
      uint8_t h[16];
      try {
        net::recv_all(in_[r].get(), h, sizeof h, deadline, abort_fn(), w);
        uint32_t magic;
        int32_t tag;
        uint64_t len;
        std::memcpy(&magic, h, 4);
        std::memcpy(&tag, h + 4, 4);
        std::memcpy(&len, h + 8, 8);
        if (magic != kPMsgMagic || len > kMaxMessage) {
          throw RemoteError(w + ": corrupt bootstrap message (bad magic or length)");
        }
        std::vector<uint8_t> msg(len);
        net::recv_all(in_[r].get(), msg.data(), len, deadline, abort_fn(), w);
        queues_[{r, tag}].push_back(std::move(msg));
      } catch (const Aborted&) {
        throw;
      } catch (const RemoteError& e) {
        // A peer that is done and went away is fine unless we wait for it.
        in_[r].reset();
        closed_[r] = e.what();
        if (r == want) throw;
      }
    }
    if (pfds[0].revents & POLLIN) accept_incoming();
  }

  void accept_incoming() {
    for (;;) {
      Fd c = net::accept_tcp(listen_.get(), Clock::now(), nullptr);
      if (!c) return;
      Endpoint from = net::peer_endpoint(c.get());
      auto refuse_p2p = [&](const std::string& why) {
        NCCLZ_WARN(cfg_.rank, "bootstrap: refused connection from %s: %s", from.str().c_str(), why.c_str());
      };
      try {
        auto dl = Clock::now() + kHelloTimeout;
        uint32_t h[3];
        net::recv_all(c.get(), h, sizeof h, dl, abort_fn(), "bootstrap hello from " + from.str());
        if (h[0] != kPHelloMagic || h[1] != kVersion || h[2] > kMaxHelloBody) {
          refuse_p2p("bad magic or version");
          continue;
        }
        std::vector<uint8_t> b(h[2]);
        net::recv_all(c.get(), b.data(), b.size(), dl, abort_fn(), "bootstrap hello from " + from.str());
        Reader rd{b.data(), b.size()};
        std::string token = rd.str();
        std::string key = rd.str();
        int src = rd.i32();
        int dst = rd.i32();
        if (!rd.ok || rd.off != rd.n) {
          refuse_p2p("malformed hello");
          continue;
        }
        if (!net::equal_ct(token.data(), token.size(), cfg_.token.data(), cfg_.token.size())) {
          refuse_p2p("wrong token");
          continue;
        }
        if (key != job_key_ || dst != cfg_.rank || src < 0 || src >= cfg_.size || src == cfg_.rank) {
          refuse_p2p("wrong job, rank or destination");
          continue;
        }
        if (in_[src]) {
          refuse_p2p("duplicate connection from rank " + std::to_string(src));
          continue;
        }
        in_[src] = std::move(c);
        closed_[src].clear();
      } catch (const Aborted&) {
        throw;
      } catch (const Error& e) {
        refuse_p2p(e.what());
      }
    }
  }

  BootstrapConfig cfg_;
  std::string ifname_addr_;
  std::string job_key_;
  std::vector<RankInfo> table_;
  Fd listen_;               // my point-to-point listener
  std::vector<Fd> star_;    // rank 0: one per rank; others: star_[0] to rank 0
  std::vector<Fd> in_;      // accepted point-to-point connections, by source rank
  std::vector<Fd> out_;     // my point-to-point connections, by destination rank
  std::vector<std::string> closed_;  // why an incoming connection closed, by source rank
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;  // (src, tag)
  std::mutex star_mu_, in_mu_, out_mu_;
  uint32_t star_seq_ = 0;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace

std::unique_ptr<Bootstrap> Bootstrap::create(const BootstrapConfig& cfg) {
  return std::make_unique<TcpBootstrap>(cfg);
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
  return std::make_unique<TcpBootstrap>(cfg, std::move(listen));
}

}  // namespace ncclz
