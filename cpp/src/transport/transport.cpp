// create_transport: picks the transport from the bootstrap tables, identically
// on every rank, and checks that the ranks agree.
//
//   all ranks in one process (equal process ids) -> InProcess
//   all ranks on one host (equal host ids)       -> SharedMemory
//   otherwise                                    -> Socket
//
// NCCLZ_TRANSPORT=inproc|shm|socket (or TransportConfig::transport) forces one;
// forcing inproc across processes or shm across hosts is an InvalidArgument.
// One bootstrap allgather carries every rank's forced choice, slot geometry and
// a random nonce: a mismatch is reported by name on every rank, and rank 0's
// nonce makes the key that names this transport's rings and segments.
#include <cstring>

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

struct Agreement {
  int32_t forced;
  int32_t nslots;
  uint64_t slot_bytes;
  double throttle_gbps;
  char nonce[16];
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

  Agreement mine{};
  mine.forced = forced;
  mine.nslots = cfg.nslots;
  mine.slot_bytes = cfg.slot_bytes;
  mine.throttle_gbps = cfg.throttle_gbps;
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
  NCCLZ_INFO(me, "transport: %s (%s), %d slots x %zu bytes%s", kind_name(kind),
             forced >= 0 ? "forced by NCCLZ_TRANSPORT or the config" : "automatic", cfg.nslots, cfg.slot_bytes,
             cfg.throttle_gbps > 0 && kind == Kind::Socket ? ", throttled" : "");
  switch (kind) {
    case Kind::InProcess: return make_inprocess_transport(std::move(ctx));
    case Kind::SharedMemory: return make_shm_transport(std::move(ctx));
    case Kind::Socket: return make_socket_transport(std::move(ctx));
  }
  throw InvalidArgument("transport: unknown kind");
}

}  // namespace ncclz::transport
