// create_transport: picks the transport from the bootstrap tables, identically
// on every rank, and checks that the ranks agree.
//
//   all ranks in one process (equal process ids) -> InProcess
//   all ranks on one host (equal host ids)       -> SharedMemory
//   otherwise                                    -> Socket
//
// NCCLZ_TRANSPORT=inproc|shm|socket (or TransportConfig::transport) forces one;
// forcing inproc across processes or shm across hosts is an InvalidArgument.
// One bootstrap allgather carries every rank's forced choice, slot geometry,
// checksum setting and a random nonce: a mismatch is reported by name on every
// rank, and rank 0's nonce makes the key that names this transport's rings and
// segments.
//
// Checksums (NCCLZ_CHECKSUM=auto|on|off): auto is on for sockets (corruption
// that TCP's 16-bit checksum misses is rare but real, and the CRC costs under
// 1% at network speeds) and off for shared memory and in-process rings (there
// nothing crosses a wire, and the CRC's extra passes over every slot cost
// more than 10% of a large call; bench/results/integrity.md). The transport
// that create_transport returns joins every link connect() makes to one
// LinkGroup (slot_ring.hpp), which carries the setting to the ring ends and
// closes them all when the communicator aborts (Transport::abort).
#include <cstring>
#include <sstream>

#include "base/crc32c.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"
#include "transport/transport_impl.hpp"

namespace ncclz::transport {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::InProcess: return "inproc";
    case Kind::SharedMemory: return "shm";
    case Kind::Socket: return "socket";
  }
  return "?";
}

namespace {

// -1: automatic; else a Kind.
int parse_forced(const std::string& s, const char* source) {
  if (s.empty() || s == "auto") return -1;
  if (s == "inproc" || s == "inprocess") return static_cast<int>(Kind::InProcess);
  if (s == "shm") return static_cast<int>(Kind::SharedMemory);
  if (s == "socket" || s == "net" || s == "tcp") return static_cast<int>(Kind::Socket);
  throw InvalidArgument(std::string(source) + "='" + s + "' is not one of auto, inproc, shm, socket");
}

// -1: auto; 0: off; 1: on.
int parse_checksum(const std::string& s, const char* source) {
  if (s.empty() || s == "auto") return -1;
  if (s == "on" || s == "1" || s == "true" || s == "yes") return 1;
  if (s == "off" || s == "0" || s == "false" || s == "no") return 0;
  throw InvalidArgument(std::string(source) + "='" + s + "' is not one of auto, on, off");
}

const char* checksum_name(int c) { return c < 0 ? "auto" : c ? "on" : "off"; }

// The setting auto stands for on each transport (see the top of this file).
bool auto_checksum(Kind k) { return k == Kind::Socket; }

// NCCLZ_TEST_CORRUPT=<rank>:<peer>:<slot>:<bit>[:header] (tests only).
LinkGroup::Fault parse_fault(const std::string& s) {
  LinkGroup::Fault f;
  if (s.empty()) return f;
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  const bool header = parts.size() == 5 && parts[4] == "header";
  if (!(parts.size() == 4 || header)) {
    throw InvalidArgument("NCCLZ_TEST_CORRUPT='" + s + "' is not <rank>:<peer>:<slot>:<bit>[:header]");
  }
  f.rank = int(env::parse_int(parts[0], "NCCLZ_TEST_CORRUPT rank"));
  f.peer = int(env::parse_int(parts[1], "NCCLZ_TEST_CORRUPT peer"));
  f.slot = uint64_t(env::parse_int(parts[2], "NCCLZ_TEST_CORRUPT slot"));
  f.bit = uint64_t(env::parse_int(parts[3], "NCCLZ_TEST_CORRUPT bit"));
  f.header = header;
  return f;
}

struct Agreement {
  int32_t forced;
  int32_t nslots;
  uint64_t slot_bytes;
  double throttle_gbps;
  int32_t checksum;
  int32_t pad;
  char nonce[16];
};

// Joins every ring end that the transport's connect() returns to the group.
class GroupedTransport final : public Transport {
 public:
  GroupedTransport(std::unique_ptr<Transport> inner, std::shared_ptr<LinkGroup> group)
      : inner_(std::move(inner)), group_(std::move(group)) {}
  Kind kind() const override { return inner_->kind(); }
  std::vector<std::vector<PeerLink>> connect(const std::vector<int>& peers, int nchannels, Clock::time_point deadline,
                                             size_t slot_bytes) override {
    auto links = inner_->connect(peers, nchannels, deadline, slot_bytes);
    // Before any end is used: a sender checksums from its first post, and a
    // receiver reads its first slot only after this returns.
    for (auto& channel : links) {
      for (auto& l : channel) {
        join(dynamic_cast<RingEnd*>(l.send.get()));
        join(dynamic_cast<RingEnd*>(l.recv.get()));
      }
    }
    return links;
  }
  void abort(const std::string& note) override { group_->abort(note); }
  void set_wait(int pause_iters, int64_t spin_ns) override { group_->set_wait(pause_iters, spin_ns); }
  bool checksums() const override { return group_->checksum(); }

 private:
  void join(RingEnd* end) {
    if (!end) throw std::logic_error("ncclz transport: a link end that is not a slot ring cannot join its group");
    end->join(group_);
  }
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<LinkGroup> group_;
};

}  // namespace

void check_connect_args(const TransportContext& ctx, const std::vector<int>& peers, int nchannels) {
  const int me = ctx.bootstrap->rank();
  const int n = ctx.bootstrap->size();
  if (nchannels < 1) {
    throw InvalidArgument("transport connect on rank " + std::to_string(me) + ": nchannels must be >= 1, got " +
                          std::to_string(nchannels));
  }
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int p : peers) {
    if (p < 0 || p >= n) {
      throw InvalidArgument("transport connect on rank " + std::to_string(me) + ": peer " + std::to_string(p) +
                            " is outside [0, " + std::to_string(n) + ")");
    }
    if (seen[p]) {
      throw InvalidArgument("transport connect on rank " + std::to_string(me) + ": peer " + std::to_string(p) +
                            " is listed twice; list each peer once (in a 2-rank ring prev == next: use the "
                            "same link for both)");
    }
    seen[p] = true;
  }
}

PeerLink make_self_link(const TransportContext& ctx, int channel, const char* transport, size_t slot_bytes) {
  auto mem = make_heap_ring(ctx.cfg.nslots, slot_bytes);
  ConnLabel label{transport, ctx.bootstrap->rank(), ctx.bootstrap->rank(), channel};
  PeerLink link;
  link.send = std::make_unique<RingSendConn>(mem, mem.get(), label, ctx.abort, nullptr);
  link.recv = std::make_unique<RingRecvConn>(mem, mem.get(), label, ctx.abort, nullptr);
  return link;
}

std::unique_ptr<Transport> create_transport(Bootstrap& bootstrap, const TransportConfig& cfg_in,
                                            std::shared_ptr<AbortFlag> abort) {
  TransportContext ctx;
  ctx.bootstrap = &bootstrap;
  ctx.cfg = cfg_in;
  ctx.abort = abort ? std::move(abort) : std::make_shared<AbortFlag>();
  const int me = bootstrap.rank();
  const int n = bootstrap.size();
  auto& cfg = ctx.cfg;
  if (cfg.nslots < 1 || cfg.nslots > 1024) {
    throw InvalidArgument("transport: nslots (NCCLZ_NSLOTS) must be in [1, 1024], got " + std::to_string(cfg.nslots));
  }
  if (cfg.slot_bytes < 1 || cfg.slot_bytes > (size_t(1) << 31)) {
    throw InvalidArgument("transport: slot_bytes (NCCLZ_SLOT_BYTES) must be in [1, 2 GiB], got " +
                          std::to_string(cfg.slot_bytes));
  }
  if (cfg.throttle_gbps < 0) throw InvalidArgument("transport: throttle_gbps must be >= 0");
  if (cfg.socket_ifname.empty()) cfg.socket_ifname = env::get_string("NCCLZ_SOCKET_IFNAME", "");
  int forced = cfg.transport.empty() ? parse_forced(env::get_string("NCCLZ_TRANSPORT", ""), "NCCLZ_TRANSPORT")
                                     : parse_forced(cfg.transport, "transport");
  const int checksum = cfg.checksum.empty() ? parse_checksum(env::get_string("NCCLZ_CHECKSUM", ""), "NCCLZ_CHECKSUM")
                                            : parse_checksum(cfg.checksum, "checksum");
  const LinkGroup::Fault fault = parse_fault(env::get_string("NCCLZ_TEST_CORRUPT", ""));

  Agreement mine{};
  mine.forced = forced;
  mine.nslots = cfg.nslots;
  mine.slot_bytes = cfg.slot_bytes;
  mine.throttle_gbps = cfg.throttle_gbps;
  mine.checksum = checksum;
  std::string nonce = net::random_hex(8);
  std::memcpy(mine.nonce, nonce.data(), 16);
  std::vector<Agreement> all(static_cast<size_t>(n));
  bootstrap.allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < n; ++r) {
    const Agreement& a = all[r];
    if (a.forced != all[0].forced) {
      auto name = [](int f) { return f < 0 ? std::string("auto") : std::string(kind_name(static_cast<Kind>(f))); };
      throw InvalidArgument("transport: rank 0 asks for transport '" + name(all[0].forced) + "' but rank " +
                            std::to_string(r) + " asks for '" + name(a.forced) +
                            "'; set NCCLZ_TRANSPORT the same way on every rank");
    }
    if (a.nslots != all[0].nslots || a.slot_bytes != all[0].slot_bytes) {
      throw InvalidArgument("transport: rank 0 uses " + std::to_string(all[0].nslots) + " slots of " +
                            std::to_string(all[0].slot_bytes) + " bytes but rank " + std::to_string(r) + " uses " +
                            std::to_string(a.nslots) + " of " + std::to_string(a.slot_bytes) +
                            "; set NCCLZ_NSLOTS / NCCLZ_SLOT_BYTES the same way on every rank");
    }
    if (a.checksum != all[0].checksum) {
      throw InvalidArgument(std::string("transport: rank 0 asks for checksums '") + checksum_name(all[0].checksum) +
                            "' but rank " + std::to_string(r) + " for '" + checksum_name(a.checksum) +
                            "'; set NCCLZ_CHECKSUM the same way on every rank");
    }
  }
  ctx.key = bootstrap.job_key() + "-" + std::string(all[0].nonce, 16);

  bool one_process = true, one_host = true;
  for (int r = 1; r < n; ++r) {
    if (bootstrap.process_id(r) != bootstrap.process_id(0)) one_process = false;
    if (bootstrap.host_id(r) != bootstrap.host_id(0)) one_host = false;
  }
  Kind kind = one_process ? Kind::InProcess : one_host ? Kind::SharedMemory : Kind::Socket;
  if (forced >= 0) {
    Kind f = static_cast<Kind>(forced);
    if (f == Kind::InProcess && !one_process) {
      throw InvalidArgument("transport: NCCLZ_TRANSPORT=inproc but the " + std::to_string(n) +
                            " ranks run in several processes; inproc needs all ranks as threads of one "
                            "process (use shm or socket, or leave NCCLZ_TRANSPORT unset)");
    }
    if (f == Kind::SharedMemory && !one_host) {
      throw InvalidArgument("transport: NCCLZ_TRANSPORT=shm but the " + std::to_string(n) +
                            " ranks run on several hosts; shared memory needs one host (use socket, or "
                            "leave NCCLZ_TRANSPORT unset)");
    }
    kind = f;
  }
  cfg.kind = kind;
  const bool crc = checksum < 0 ? auto_checksum(kind) : checksum == 1;
  cfg.checksum = crc ? "on" : "off";
  ctx.group = std::make_shared<LinkGroup>(me, crc, fault, ctx.abort);
  NCCLZ_INFO(me, "transport: %s (%s), %d slots x %zu bytes, checksums %s%s%s%s", kind_name(kind),
             forced >= 0 ? "forced by NCCLZ_TRANSPORT or the config" : "automatic", cfg.nslots, cfg.slot_bytes,
             crc ? "on (CRC-32C, " : "off", crc ? base::crc32c_impl() : "", crc ? ")" : "",
             cfg.throttle_gbps > 0 && kind == Kind::Socket ? ", throttled" : "");
  std::shared_ptr<LinkGroup> group = ctx.group;
  std::unique_ptr<Transport> t;
  switch (kind) {
    case Kind::InProcess: t = make_inprocess_transport(std::move(ctx)); break;
    case Kind::SharedMemory: t = make_shm_transport(std::move(ctx)); break;
    case Kind::Socket: t = make_socket_transport(std::move(ctx)); break;
  }
  if (!t) throw InvalidArgument("transport: unknown kind");
  return std::make_unique<GroupedTransport>(std::move(t), std::move(group));
}

}  // namespace ncclz::transport
