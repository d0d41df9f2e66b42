// The topology a communicator found at creation: which ranks share a host
// (and so a fast local link: shared memory between processes, or the heap
// between threads) and which link joins the hosts. Hierarchical collectives
// (docs/ALGORITHMS.md, "Hierarchical collectives") run on it: exact
// reductions inside a host, the compressed ring between hosts.
//
// Hosts come from the bootstrap (the host name and boot id each rank
// reported), unless the environment says otherwise, NCCL style:
//   NCCLZ_TOPO_HOST=<id>        this rank's host id (set on every rank; equal
//                               ids are one host; the network lab sets the
//                               namespace's index)
//   NCCLZ_TOPO_HOSTS=<list>     every rank's host id in rank order
//                               ("0,0,1,1"), or HxL (H hosts of L
//                               consecutive ranks: "2x2"); the same on every rank
// (CommConfig::topo_host / topo_hosts override the variables). Hosts are
// numbered in the order of their lowest rank; local ranks in rank order.
#pragma once

#include <string>
#include <vector>

namespace ncclz {

struct Topology {
  int nhosts = 1;
  int host = 0;                    ///< this rank's host (0..nhosts-1)
  int local_rank = 0;              ///< this rank's index among its host's ranks
  int local_size = 1;              ///< ranks on this rank's host
  std::vector<int> host_of;        ///< the host of every rank
  std::vector<int> local_rank_of;  ///< the local rank of every rank
  /// The links inside a host and between hosts: "shm", "inproc" or "socket"
  /// ("" where there are none: one rank per host, or one host).
  std::string intra_link, inter_link;
  /// Where the hosts came from: "bootstrap" (host names), "NCCLZ_TOPO_HOST",
  /// "NCCLZ_TOPO_HOSTS" (or the CommConfig field of the same meaning).
  std::string source = "bootstrap";

  /// Every host has the same number of ranks.
  bool uniform() const {
    std::vector<int> n(size_t(nhosts), 0);
    for (int h : host_of) ++n[size_t(h)];
    for (int k : n) {
      if (k != n[0]) return false;
    }
    return true;
  }
  /// Hierarchical collectives apply: several hosts, several ranks on each,
  /// the same number on every host.
  bool hierarchical() const { return nhosts > 1 && local_size > 1 && uniform(); }
  /// The rank with local rank `local` on host `h` (-1 if there is none).
  int rank_of(int h, int local) const {
    for (size_t r = 0; r < host_of.size(); ++r) {
      if (host_of[r] == h && local_rank_of[r] == local) return int(r);
    }
    return -1;
  }
  /// "2 hosts x 2 ranks (NCCLZ_TOPO_HOSTS; intra shm, inter socket)".
  std::string describe() const;
};

/// Every rank's host id as NCCLZ_TOPO_HOSTS ("0,0,1,1" or "HxL") gives them
/// to a communicator of `n` ranks (n < 0: as many as it describes); throws
/// InvalidArgument saying what is wrong. A framework that makes communicators
/// of some of a job's ranks gives each its members' part of the job's list
/// (CommConfig::topo_hosts; the torch backend's groups and pairs do).
std::vector<std::string> topology_hosts(const std::string& spec, int n = -1);

}  // namespace ncclz
