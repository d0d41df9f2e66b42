// Communicator::split (see split.hpp).
#include "core/split.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {

SplitPlan plan_split(const std::vector<int64_t>& color_key, int rank) {
  const int n = int(color_key.size() / 2);
  for (int r = 0; r < n; ++r) {
    const int64_t color = color_key[2 * size_t(r)];
    if (color >= kSplitNoColor) continue;
    const std::string what = "split: rank " + std::to_string(r) + " passed color " + std::to_string(color) +
                             "; a color is >= 0, or kSplitNoColor (-1) for no new communicator (the Python layer "
                             "passes -2 for arguments that failed its own checks, which that rank's error names)";
    if (r == rank) throw InvalidArgument(what);
    throw RemoteError(what);
  }
  SplitPlan p;
  const int64_t mine = color_key[2 * size_t(rank)];
  if (mine == kSplitNoColor) return p;
  for (int r = 0; r < n; ++r) {
    if (color_key[2 * size_t(r)] == mine) p.members.push_back(r);
  }
  std::stable_sort(p.members.begin(), p.members.end(),
                   [&](int a, int b) { return color_key[2 * size_t(a) + 1] < color_key[2 * size_t(b) + 1]; });
  p.new_rank = int(std::find(p.members.begin(), p.members.end(), rank) - p.members.begin());
  return p;
}

namespace {

/// One rank's record in the ids' all_gather: whether it leads a group and made
/// its id (or the error it met making it), and the id.
struct IdRecord {
  uint8_t made = 0;  // 1: id holds a bootstrap id
  UniqueId id{};
  char error[127] = {};
};

}  // namespace

std::unique_ptr<Communicator> split(Communicator& parent, int color, int key, CommConfig base, const Topology& topo,
                                    const std::string& address) {
  const int n = parent.size(), rank = parent.rank();
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * size_t(n));
  parent.all_gather(mine, all.data(), 2, DataType::I64, Compression::none());
  const SplitPlan plan = plan_split(all, rank);
  // Each group's first member makes its id; every rank takes part in the
  // exchange (those without a color too).
  IdRecord rec;
  std::string failed;
  if (!plan.members.empty() && plan.members[0] == rank) {
    try {
      rec.id = Bootstrap::make_unique_id(address, 0);
      rec.made = 1;
    } catch (const std::exception& e) {
      failed = e.what();
      std::strncpy(rec.error, e.what(), sizeof rec.error - 1);
    }
  }
  std::vector<IdRecord> ids(static_cast<size_t>(n));
  parent.all_gather(&rec, ids.data(), sizeof rec, DataType::U8, Compression::none());
  if (plan.members.empty()) return nullptr;
  if (!failed.empty()) throw SystemError("split: making the new communicator's bootstrap id: " + failed);
  const IdRecord& lead = ids[size_t(plan.members[0])];
  if (!lead.made) {
    throw RemoteError("split: rank " + std::to_string(plan.members[0]) +
                      ", the first of this rank's color, could not make the new communicator's id: " +
                      std::string(lead.error, strnlen(lead.error, sizeof lead.error)));
  }
  // The members' part of a job-wide host list (a per-rank NCCLZ_TOPO_HOST
  // holds for the new communicator as it is).
  if (topo.source == "NCCLZ_TOPO_HOSTS") {
    std::string hosts;
    for (int r : plan.members) hosts += (hosts.empty() ? "" : ",") + std::to_string(topo.host_of[size_t(r)]);
    base.topo_hosts = hosts;
  }
  return Communicator::create(lead.id, plan.new_rank, int(plan.members.size()), base);
}

}  // namespace ncclz::core
