// Communicator::split (NCCL's ncclCommSplit, MPI_Comm_split): every rank of a
// communicator names a color and a key; the ranks of one color form a new
// communicator, ranked by (key, their rank in the parent). The parent's
// all_gather carries the colors and keys, then each group's first rank's
// bootstrap id (made at the address its parent bootstrap advertised); each
// member then creates the new communicator from that id, with the parent's
// requested settings and, where the parent's hosts came from NCCLZ_TOPO_HOSTS,
// its members' part of that list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ncclz/communicator.hpp"

namespace ncclz::core {

/// Where one rank goes: its group's ranks in the parent (in their new order),
/// its new rank (-1 without a color).
struct SplitPlan {
  std::vector<int> members;
  int new_rank = -1;
};

/// The plan of `rank` from every rank's (color, key), as the all_gather gives
/// them (2 entries per rank). Throws InvalidArgument where `rank` passed a
/// color that is none (below kSplitNoColor), RemoteError where another rank
/// did (naming it): every rank throws, none waits.
SplitPlan plan_split(const std::vector<int64_t>& color_key, int rank);

/// The split itself, on `parent` (see the file comment). `base`: the settings
/// of the new communicators (the parent's requested ones); `topo`: the
/// parent's topology; `address`: where this rank's bootstrap id listens if it
/// leads a group. Returns nullptr for kSplitNoColor.
std::unique_ptr<Communicator> split(Communicator& parent, int color, int key, CommConfig base, const Topology& topo,
                                    const std::string& address);

}  // namespace ncclz::core
