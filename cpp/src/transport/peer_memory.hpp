// Reading and writing another rank's memory directly, for ranks on one host:
// one copy between a peer's buffer and this rank's, where the slot transports
// take two (into a slot, out of it). Ranks that are processes copy with
// Linux's cross-memory attach (process_vm_readv / process_vm_writev: the
// kernel copies between the two address spaces, pinning the peer's pages for
// the copy); ranks that are threads of one process copy with memcpy. The direct schedules
// (core/direct_schedule.hpp) are its users.
//
// Whether it works is found once, when the communicator is made, and agreed:
// every rank publishes its process id and the address of a word holding a
// random number of its own, reads every peer's word and writes it back
// unchanged, and the probe passes only where each read returned the peer's
// number and each write succeeded (a process id shared by two
// processes in different PID namespaces reads another process's word, or
// none, and fails the check). Cross-memory attach needs the right to trace
// the peer: the same user; under Yama's ptrace_scope 1 (descendants only)
// each rank that wants it first lets any process of its user attach
// (PR_SET_PTRACER_ANY, as Open MPI does), scope 2 or 3 forbids it; a
// container's seccomp profile may forbid the calls. Where any rank
// cannot reach any peer, no rank uses it (PeerMemory::usable() is false on
// every rank), and the slot transports carry everything as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ncclz {

class Bootstrap;

namespace transport {

class PeerMemory {
 public:
  /// Collective over the bootstrap's ranks (two allgathers): the probe
  /// above. `want` false on a rank (NCCLZ_DIRECT_FROM_BYTES=0, or ranks on several
  /// hosts) makes it unusable on every rank.
  static std::unique_ptr<PeerMemory> probe(Bootstrap& boot, bool want);

  /// Whether every rank can read every peer (the same on every rank).
  bool usable() const { return usable_; }
  /// Why not, where not usable ("" where it is).
  const std::string& why_not() const { return why_not_; }

  /// Copies `n` bytes at `remote` (an address in rank `peer`'s memory) to
  /// `local`. Throws ncclz::RemoteError naming the peer and the system's
  /// error where the read fails (the peer exited, or the range is not mapped
  /// there). Thread-safe.
  void read(int peer, const void* remote, void* local, size_t n) const;
  /// Copies `n` bytes at `local` to `remote` in rank `peer`'s memory; fails
  /// as read() does.
  void write(int peer, void* remote, const void* local, size_t n) const;

 private:
  struct Rank {
    int64_t pid = 0;
    bool same_process = false;
  };
  void copy(int peer, void* remote, void* local, size_t n, bool write) const;
  int rank_ = 0;
  bool usable_ = false;
  std::string why_not_;
  std::vector<Rank> ranks_;
};

}  // namespace transport
}  // namespace ncclz
