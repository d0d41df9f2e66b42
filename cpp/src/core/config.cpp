// Every environment variable the runtime reads, parsed here and nowhere else
// in core/ (docs/ENVIRONMENT.md lists them with their defaults). The transport
// and bootstrap layers read the few of their own (NCCLZ_SOCKET_IFNAME,
// NCCLZ_TRANSPORT) only where a caller leaves them unset, which the
// communicator never does once these have been resolved.
#include "core/config.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "base/env.hpp"
#include "ncclz/error.hpp"

namespace ncclz {
namespace {

constexpr int64_t kMaxSlotBytes = int64_t(1) << 31;

/// The tuning fields: each unset one (0, -1, "") from its variable, when set.
/// A variable set to 0 (or "") counts as unset too: the default.
void read_tuning_env(CommConfig& c) {
  if (c.transport.empty()) c.transport = env::get_string("NCCLZ_TRANSPORT", "");
  if (c.nchannels <= 0) c.nchannels = int(env::get_int("NCCLZ_NCHANNELS", 0, 0, 64));
  if (c.slot_bytes == 0) c.slot_bytes = size_t(env::get_int("NCCLZ_SLOT_BYTES", 0, 0, kMaxSlotBytes));
  if (c.nslots <= 0) c.nslots = int(env::get_int("NCCLZ_NSLOTS", 0, 0, 1024));
  if (c.sparse_slice_bytes == 0) {
    // 0 here is the variable's "off": the ordinary slices (see resolved()).
    const auto v = env::get("NCCLZ_SPARSE_SLICE_BYTES");
    if (v) c.sparse_slice_bytes = size_t(env::get_int("NCCLZ_SPARSE_SLICE_BYTES", 0, 0, kMaxSlotBytes));
    if (v && c.sparse_slice_bytes == 0) c.sparse_slice_bytes = 1;  // not above any slot_bytes: off
  }
  if (c.exact_nchannels <= 0) c.exact_nchannels = int(env::get_int("NCCLZ_EXACT_NCHANNELS", 0, 0, 64));
  if (c.exact_slice_bytes == 0) {
    c.exact_slice_bytes = size_t(env::get_int("NCCLZ_EXACT_SLICE_BYTES", 0, 0, kMaxSlotBytes));
  }
  if (c.throttle_gbps <= 0) c.throttle_gbps = env::get_double("NCCLZ_SOCKET_THROTTLE_GBPS", 0, 0, 1e9);
  if (c.socket_ifname.empty()) c.socket_ifname = env::get_string("NCCLZ_SOCKET_IFNAME", "");
  if (c.pipeline_quantize < 0) c.pipeline_quantize = int(env::get_int("NCCLZ_PIPELINE_QUANTIZE", -1, 0, 1));
  if (c.hier_rounds < 0) c.hier_rounds = int(env::get_int("NCCLZ_HIER_ROUNDS", -1, 0, 1));
  if (c.sparse_input < 0) c.sparse_input = int(env::get_int("NCCLZ_SPARSE_INPUT", -1, 0, 1));
  if (c.persistent < 0) c.persistent = int(env::get_int("NCCLZ_PERSISTENT", -1, 0, 1));
  if (c.p2p < 0 && env::get("NCCLZ_P2P")) c.p2p = env::get_bool("NCCLZ_P2P", true) ? 1 : 0;
  if (c.topo_host.empty()) c.topo_host = env::get_string("NCCLZ_TOPO_HOST", "");
  if (c.topo_hosts.empty()) c.topo_hosts = env::get_string("NCCLZ_TOPO_HOSTS", "");
  if (c.algorithm.empty()) c.algorithm = env::get_string("NCCLZ_ALGO", "");
  if (c.latency_bytes < 0) c.latency_bytes = env::get_int("NCCLZ_LATENCY_BYTES", -1, 0, kMaxSlotBytes);
  if (c.two_hop_bytes < 0) c.two_hop_bytes = env::get_int("NCCLZ_TWO_HOP_BYTES", -1, 0, int64_t(1) << 40);
  if (c.direct_from_bytes < 0) c.direct_from_bytes = env::get_int("NCCLZ_DIRECT_FROM_BYTES", -1, 0, int64_t(1) << 40);
  if (c.spin_us < 0) c.spin_us = int(env::get_int("NCCLZ_SPIN_US", -1, 0, 1000000));
  if (c.trace_file.empty()) c.trace_file = env::get_string("NCCLZ_TRACE_FILE", "");
}

void check_flag(int v, const char* name, const char* var) {
  if (v < -1 || v > 1) {
    throw InvalidArgument(std::string("ncclz: ") + name + " (" + var + ") must be 0, 1 or -1 (the default), got " +
                          std::to_string(v));
  }
}

}  // namespace

namespace core {

int parse_algorithm(const std::string& s, bool* ok) {
  std::string v;
  for (char ch : s) v += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  *ok = true;
  if (v.empty() || v == "auto" || v == "default") return -1;
  if (v == "ring") return int(Algorithm::Ring);
  if (v == "hierarchical" || v == "hier") return int(Algorithm::Hierarchical);
  *ok = false;
  return -1;
}

namespace {

/// This rank's cores: NCCLZ_CORES_PER_RANK, else the CPUs this process may run
/// on divided by `local_size`.
double cores_per_rank(int local_size) {
  double cores = env::get_double("NCCLZ_CORES_PER_RANK", 0, 0, 1e6);
  if (!(cores > 0)) {
    int cpus = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
    if (cpus <= 0) cpus = int(std::thread::hardware_concurrency());
    cores = double(std::max(cpus, 1)) / double(std::max(local_size, 1));
  }
  return cores;
}

}  // namespace

int proposed_channels(int local_size) {
  return std::clamp(int(std::floor(cores_per_rank(local_size))), kMinAutoChannels, kMaxAutoChannels);
}

bool rings_share_cores(int local_size) { return int(std::floor(cores_per_rank(local_size))) < kMinAutoChannels; }

void resolve_exact_shape(CommConfig& cfg, bool auto_channels, bool short_of_cores, bool sockets) {
  const bool one_ring = auto_channels && short_of_cores && !sockets;
  if (cfg.exact_nchannels <= 0) cfg.exact_nchannels = one_ring ? 1 : cfg.nchannels;
  cfg.exact_nchannels = std::clamp(cfg.exact_nchannels, 1, std::max(cfg.nchannels, 1));
  if (cfg.exact_slice_bytes == 0) cfg.exact_slice_bytes = one_ring ? kOneRingSliceBytes : cfg.slot_bytes;
  cfg.exact_slice_bytes = std::min(cfg.exact_slice_bytes, cfg.slot_bytes);
}

void resolve_two_hop(CommConfig& cfg, int nranks, bool sockets, bool hierarchical) {
  if (cfg.two_hop_bytes >= 0) return;
  const int64_t saved_hops = std::max(0, 2 * nranks - 3);  // the ring's 2N-1 (with the descriptor round) less 2
  cfg.two_hop_bytes = sockets || hierarchical ? 0 : saved_hops * int64_t(cfg.slot_bytes / 4);
}

int64_t direct_from(Coll c, int nranks, int64_t direct_from_bytes, bool defaulted) {
  if (direct_from_bytes <= 0 || !defaulted || c == Coll::AllReduce) return direct_from_bytes;
  constexpr int64_t kKiB = 1024;
  if (c == Coll::Broadcast) return 128 * kKiB;
  if (nranks <= 2) return 8192 * kKiB;  // reduce_scatter, all_gather
  return c == Coll::ReduceScatter && nranks >= 4 ? 512 * kKiB : 128 * kKiB;
}

void resolve_direct(CommConfig& cfg, int nranks, bool readable) {
  if (!readable) {
    cfg.direct_from_bytes = 0;
  } else if (cfg.direct_from_bytes < 0) {
    cfg.direct_from_bytes = nranks <= 2 ? int64_t(2) << 20 : nranks == 3 ? int64_t(256) << 10 : int64_t(128) << 10;
  }
}

}  // namespace core

CommConfig CommConfig::defaults() {
  CommConfig c;
  c.nchannels = 0;  // agreed at creation (core::proposed_channels)
  c.slot_bytes = core::kDefaultSlotBytes;
  c.nslots = core::kDefaultSlots;
  c.sparse_slice_bytes = core::kDefaultSparseSliceBytes;
  c.pipeline_quantize = 1;
  c.hier_rounds = 1;
  c.sparse_input = 1;
  c.persistent = 0;
  c.p2p = 1;
  c.algorithm = "auto";
  c.latency_bytes = core::kDefaultLatencyBytes;
  return c;
}

CommConfig CommConfig::from_env() {
  CommConfig c;
  c.rank = int(env::get_int("RANK", c.rank, 0, 1 << 30));
  c.size = int(env::get_int("WORLD_SIZE", c.size, 1, 1 << 30));
  c.master_addr = env::get_string("MASTER_ADDR", c.master_addr);
  c.master_port = int(env::get_int("MASTER_PORT", c.master_port, 0, 65535));
  c.token = env::get_string("NCCLZ_TOKEN", c.token);
  c.timeout_s = env::get_double("NCCLZ_TIMEOUT", c.timeout_s, 1e-3, 1e9);
  return c.resolved();
}

CommConfig CommConfig::resolved() const {
  CommConfig c = *this;
  read_tuning_env(c);
  const CommConfig d = defaults();
  if (c.nchannels < 0) c.nchannels = 0;  // 0: unset, agreed at creation
  if (c.slot_bytes == 0) c.slot_bytes = d.slot_bytes;
  if (c.nslots <= 0) c.nslots = d.nslots;
  if (c.sparse_slice_bytes == 0) c.sparse_slice_bytes = d.sparse_slice_bytes;
  check_flag(c.pipeline_quantize, "pipeline_quantize", "NCCLZ_PIPELINE_QUANTIZE");
  check_flag(c.hier_rounds, "hier_rounds", "NCCLZ_HIER_ROUNDS");
  check_flag(c.sparse_input, "sparse_input", "NCCLZ_SPARSE_INPUT");
  check_flag(c.p2p, "p2p", "NCCLZ_P2P");
  check_flag(c.persistent, "persistent", "NCCLZ_PERSISTENT");
  if (c.pipeline_quantize < 0) c.pipeline_quantize = d.pipeline_quantize;
  if (c.hier_rounds < 0) c.hier_rounds = d.hier_rounds;
  if (c.sparse_input < 0) c.sparse_input = d.sparse_input;
  if (c.p2p < 0) c.p2p = d.p2p;
  if (c.persistent < 0) c.persistent = d.persistent;
  if (c.latency_bytes < 0) c.latency_bytes = d.latency_bytes;
  if (c.two_hop_bytes < -1) c.two_hop_bytes = -1;          // -1: unset, agreed at creation (resolve_two_hop)
  if (c.direct_from_bytes < -1) c.direct_from_bytes = -1;  // -1: unset, agreed at creation (resolve_direct)
  if (c.nchannels > 64) {
    throw InvalidArgument("ncclz: nchannels must be in [1, 64], got " + std::to_string(c.nchannels));
  }
  if (c.nslots < 2) {
    // Forwarding holds its incoming slot while it acquires the outgoing one:
    // with one slot per connection every rank of a ring could wait on the next.
    throw InvalidArgument("ncclz: nslots (NCCLZ_NSLOTS) must be at least 2, got " + std::to_string(c.nslots));
  }
  if (c.slot_bytes < 1024) {
    throw InvalidArgument("ncclz: slot_bytes must be at least 1024, got " + std::to_string(c.slot_bytes));
  }
  if (c.sparse_slice_bytes <= c.slot_bytes) c.sparse_slice_bytes = c.slot_bytes;  // no larger slices
  if (c.exact_nchannels < 0) c.exact_nchannels = 0;                               // 0: unset, agreed at creation
  if (c.exact_nchannels > 64) {
    throw InvalidArgument("ncclz: exact_nchannels (NCCLZ_EXACT_NCHANNELS) must be in [1, 64], got " +
                          std::to_string(c.exact_nchannels));
  }
  if (c.nchannels > 0 && c.exact_nchannels > c.nchannels) c.exact_nchannels = c.nchannels;
  if (c.exact_slice_bytes != 0 && c.exact_slice_bytes < 1024) {
    throw InvalidArgument("ncclz: exact_slice_bytes (NCCLZ_EXACT_SLICE_BYTES) must be at least 1024, got " +
                          std::to_string(c.exact_slice_bytes));
  }
  if (c.exact_slice_bytes > c.slot_bytes) c.exact_slice_bytes = c.slot_bytes;  // a slice fills a slot at most
  // The latency algorithm's message (descriptor and data) fits one slot.
  c.latency_bytes = std::min<int64_t>(c.latency_bytes, int64_t(c.slot_bytes - core::kLatencyHeadroom));
  if (c.algorithm.empty()) c.algorithm = "auto";
  bool known = false;
  const int algo = core::parse_algorithm(c.algorithm, &known);
  if (!known) {
    throw InvalidArgument("ncclz: algorithm (NCCLZ_ALGO) must be auto, ring or hierarchical, got '" + c.algorithm +
                          "'");
  }
  c.algorithm = algo < 0 ? "auto" : algorithm_name(Algorithm(algo));
  if (c.topo_host.size() > core::kMaxTopoHostId) {
    throw InvalidArgument("ncclz: the host id (NCCLZ_TOPO_HOST) may have at most " +
                          std::to_string(core::kMaxTopoHostId) + " characters, got '" + c.topo_host + "'");
  }
  return c;
}

}  // namespace ncclz
