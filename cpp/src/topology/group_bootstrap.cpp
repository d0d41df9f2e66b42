// A bootstrap over a group of ranks (see group_bootstrap.hpp).
#include "topology/group_bootstrap.hpp"

#include <cstdint>
#include <cstring>

#include "ncclz/error.hpp"

namespace ncclz::topology {
namespace {

// Tags of the group's allgather, inside the group's tag range.
constexpr int kGatherTag = 0x544f0001;  // "TO": members -> member 0
constexpr int kResultTag = 0x544f0002;  // member 0 -> members

}  // namespace

GroupBootstrap::GroupBootstrap(Bootstrap& parent, std::vector<int> members, int group)
    : parent_(parent), members_(std::move(members)), group_(group) {
  me_ = -1;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == parent_.rank()) me_ = int(i);
  }
  if (me_ < 0) {
    throw InvalidArgument("ncclz rank " + std::to_string(parent_.rank()) +
                          ": a host group must include the rank itself");
  }
  key_ = parent_.job_key() + "-host" + std::to_string(group);
}

int GroupBootstrap::global(int r) const {
  if (r < 0 || r >= int(members_.size())) {
    throw InvalidArgument("host group bootstrap: rank " + std::to_string(r) + " is outside [0, " +
                          std::to_string(members_.size()) + ")");
  }
  return members_[size_t(r)];
}

std::string GroupBootstrap::note() const {
  std::string a, b;
  for (size_t i = 0; i < members_.size(); ++i) {
    a += (i ? ", " : "") + std::to_string(i);
    b += (i ? ", " : "") + std::to_string(members_[i]);
  }
  return "(on the links inside host " + std::to_string(group_) + ", whose ranks " + a + " are ranks " + b +
         " of the communicator)";
}

void GroupBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  const size_t n = members_.size();
  auto* out = static_cast<uint8_t*>(all);
  if (me_ == 0) {
    if (bytes) std::memmove(out, mine, bytes);
    for (size_t r = 1; r < n; ++r) recv(int(r), kGatherTag, out + r * bytes, bytes);
    for (size_t r = 1; r < n; ++r) send(int(r), kResultTag, out, n * bytes);
  } else {
    send(0, kGatherTag, mine, bytes);
    recv(0, kResultTag, out, n * bytes);
  }
}

void GroupBootstrap::barrier() {
  uint8_t none = 0;
  std::vector<uint8_t> all(members_.size());
  allgather(&none, 1, all.data());
}

void GroupBootstrap::send(int peer, int tag, const void* data, size_t bytes) {
  parent_.send(global(peer), tag ^ kGroupTagBit, data, bytes);
}

void GroupBootstrap::recv(int peer, int tag, void* data, size_t bytes) {
  parent_.recv(global(peer), tag ^ kGroupTagBit, data, bytes);
}

}  // namespace ncclz::topology
