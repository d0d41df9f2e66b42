// Finding the topology (see topology.hpp).
#include "topology/topology.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"

namespace ncclz {

std::string Topology::describe() const {
  std::ostringstream s;
  s << nhosts << (nhosts == 1 ? " host" : " hosts");
  if (uniform()) {
    s << " x " << local_size << (local_size == 1 ? " rank" : " ranks");
  } else {
    s << " (uneven: " << local_size << " ranks on this one)";
  }
  s << " (" << source;
  if (!intra_link.empty()) s << "; intra " << intra_link;
  if (!inter_link.empty()) s << "; inter " << inter_link;
  s << ")";
  return s.str();
}

namespace topology {
namespace {

// One rank's override settings, as the allgather carries them.
struct Record {
  char host[64];        // NCCLZ_TOPO_HOST ("" when unset)
  uint64_t list_hash;   // FNV-1a of NCCLZ_TOPO_HOSTS
  uint64_t list_bytes;  // its length (0 when unset)
};
static_assert(sizeof(Record) == 80, "Record has no padding");

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return s.substr(a, b - a);
}

}  // namespace

std::vector<std::string> parse_hosts(const std::string& list, int n) {
  const std::string what = "NCCLZ_TOPO_HOSTS='" + list + "'";
  const std::string t = trim(list);
  const size_t x = t.find_first_of("xX");
  if (x != std::string::npos && t.find(',') == std::string::npos) {
    // HxL: H hosts of L consecutive ranks.
    long hosts = 0, local = 0;
    try {
      size_t used = 0;
      hosts = std::stol(t.substr(0, x), &used);
      if (used != x) throw std::invalid_argument("h");
      const std::string l = t.substr(x + 1);
      local = std::stol(l, &used);
      if (used != l.size()) throw std::invalid_argument("l");
    } catch (const std::exception&) {
      throw InvalidArgument("ncclz: " + what + " is not HxL (hosts x ranks per host, e.g. 2x4) or a list of " +
                            std::to_string(n) + " host ids");
    }
    if (hosts < 1 || local < 1 || (n >= 0 && hosts * local != n)) {
      throw InvalidArgument("ncclz: " + what + " describes " + std::to_string(hosts) + " x " + std::to_string(local) +
                            " ranks but the communicator has " + std::to_string(n));
    }
    if (n < 0) n = int(hosts * local);
    std::vector<std::string> ids(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) ids[size_t(r)] = std::to_string(r / local);
    return ids;
  }
  std::vector<std::string> ids;
  std::string cur;
  for (size_t i = 0; i <= t.size(); ++i) {
    if (i == t.size() || t[i] == ',') {
      const std::string id = trim(cur);
      if (id.empty())
        throw InvalidArgument("ncclz: " + what + " has an empty host id (entry " + std::to_string(ids.size()) + ")");
      ids.push_back(id);
      cur.clear();
    } else {
      cur += t[i];
    }
  }
  if (n >= 0 && int(ids.size()) != n) {
    throw InvalidArgument("ncclz: " + what + " names " + std::to_string(ids.size()) +
                          " hosts but the communicator has " + std::to_string(n) +
                          " ranks: give one host id per rank, in rank order, or HxL");
  }
  return ids;
}

}  // namespace topology

std::vector<std::string> topology_hosts(const std::string& spec, int n) { return topology::parse_hosts(spec, n); }

namespace topology {

Topology from_ids(const std::vector<std::string>& ids, int rank, const std::string& source) {
  Topology t;
  const int n = int(ids.size());
  t.source = source;
  t.host_of.assign(size_t(n), 0);
  t.local_rank_of.assign(size_t(n), 0);
  std::map<std::string, int> index;
  std::vector<int> count;
  for (int r = 0; r < n; ++r) {
    auto it = index.find(ids[size_t(r)]);
    if (it == index.end()) {
      it = index.emplace(ids[size_t(r)], int(count.size())).first;
      count.push_back(0);
    }
    t.host_of[size_t(r)] = it->second;
    t.local_rank_of[size_t(r)] = count[size_t(it->second)]++;
  }
  t.nhosts = int(count.size());
  t.host = t.host_of[size_t(rank)];
  t.local_rank = t.local_rank_of[size_t(rank)];
  t.local_size = count[size_t(t.host)];
  return t;
}

Topology find(Bootstrap& boot, const CommConfig& cfg) {
  const int n = boot.size(), me = boot.rank();
  Record mine{};
  std::strncpy(mine.host, cfg.topo_host.c_str(), sizeof mine.host - 1);
  mine.list_bytes = cfg.topo_hosts.size();
  mine.list_hash = cfg.topo_hosts.empty() ? 0 : fnv1a(cfg.topo_hosts);
  std::vector<Record> all(static_cast<size_t>(n));
  boot.allgather(&mine, sizeof mine, all.data());
  for (auto& r : all) r.host[sizeof r.host - 1] = '\0';

  bool any_list = false, any_host = false;
  for (const Record& r : all) {
    any_list |= r.list_bytes > 0;
    any_host |= r.host[0] != '\0';
  }
  if (any_list) {
    for (int r = 0; r < n; ++r) {
      const Record& a = all[size_t(r)];
      if (a.list_bytes != all[0].list_bytes || a.list_hash != all[0].list_hash) {
        throw InvalidArgument("ncclz: ranks disagree on NCCLZ_TOPO_HOSTS (rank " + std::to_string(r) + "'s " +
                              (a.list_bytes ? "differs from rank 0's" : "is unset") + "; rank " + std::to_string(me) +
                              " has '" + cfg.topo_hosts + "'): set it the same way on every rank, or not at all");
      }
    }
    return from_ids(parse_hosts(cfg.topo_hosts, n), me, "NCCLZ_TOPO_HOSTS");
  }
  std::vector<std::string> ids(static_cast<size_t>(n));
  if (any_host) {
    for (int r = 0; r < n; ++r) {
      if (all[size_t(r)].host[0] == '\0') {
        throw InvalidArgument("ncclz: NCCLZ_TOPO_HOST is set on some ranks but not on rank " + std::to_string(r) +
                              ": set it on every rank (equal ids share a host), or on none");
      }
      ids[size_t(r)] = all[size_t(r)].host;
    }
    return from_ids(ids, me, "NCCLZ_TOPO_HOST");
  }
  for (int r = 0; r < n; ++r) ids[size_t(r)] = boot.host_id(r);
  return from_ids(ids, me, "bootstrap");
}

}  // namespace topology
}  // namespace ncclz
