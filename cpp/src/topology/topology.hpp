// How a communicator finds its topology (ncclz/topology.hpp) at creation.
//
// Every rank contributes one fixed record to a bootstrap allgather: its
// NCCLZ_TOPO_HOST (CommConfig::topo_host) and a digest of its
// NCCLZ_TOPO_HOSTS (CommConfig::topo_hosts). Then, the same on every rank:
//   - NCCLZ_TOPO_HOSTS set: it must be set alike on every rank; rank r's
//     host is the list's entry r ("0,0,1,1": one id per rank; "HxL": H hosts
//     of L consecutive ranks, H*L = world size);
//   - else NCCLZ_TOPO_HOST set: it must be set on every rank; equal ids are
//     one host;
//   - else the bootstrap's host ids (host name and boot id).
// Hosts are numbered in the order of their lowest rank, local ranks in rank
// order. A mistake (a list of the wrong length, a variable set on some ranks
// only, ranks that disagree) is InvalidArgument on every rank, naming it.
#pragma once

#include <string>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/topology.hpp"

namespace ncclz {
class Bootstrap;
}  // namespace ncclz

namespace ncclz::topology {

/// The hosts of every rank (collective: one bootstrap allgather). The links
/// (intra_link, inter_link) are left to the communicator, which makes them.
Topology find(Bootstrap& boot, const CommConfig& cfg);

/// The topology of `n` ranks whose host ids are `ids` (any strings; equal
/// strings are one host), seen from rank `rank`.
Topology from_ids(const std::vector<std::string>& ids, int rank, const std::string& source);

/// Parses NCCLZ_TOPO_HOSTS for `n` ranks: "a,b,c,..." (n ids) or "HxL"
/// (H*L == n; n < 0: any count). Returns the ids, or throws InvalidArgument
/// saying what is wrong. (ncclz::topology_hosts, public, is this.)
std::vector<std::string> parse_hosts(const std::string& list, int n);

}  // namespace ncclz::topology
