// Reading a peer rank's memory (see peer_memory.hpp).
#include "transport/peer_memory.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"
#include "net/socket_util.hpp"

namespace ncclz::transport {
namespace {

// What each rank publishes in the probe's first round.
struct Published {
  int64_t pid = 0;
  uint64_t word_address = 0;  // the address of its random word
  uint64_t word = 0;          // the word's value
  int64_t want = 0;
};

// One system call; it may copy less than asked (it stops at a page it cannot
// pin): PeerMemory::copy loops on what is left.
ssize_t copy_once(pid_t pid, const void* remote, void* local, size_t n, bool write) {
  iovec here{local, n};
  iovec there{const_cast<void*>(remote), n};
  return write ? process_vm_writev(pid, &here, 1, &there, 1, 0) : process_vm_readv(pid, &here, 1, &there, 1, 0);
}

}  // namespace

std::unique_ptr<PeerMemory> PeerMemory::probe(Bootstrap& boot, bool want) {
  auto pm = std::unique_ptr<PeerMemory>(new PeerMemory());
  const int n = boot.size();
  pm->rank_ = boot.rank();
  pm->ranks_.resize(size_t(n));
  // The word lives on the heap for the probe's two rounds: every peer reads
  // it between them.
  // Where the Linux Security Module Yama restricts ptrace to descendants
  // (ptrace_scope 1, Ubuntu's default), ranks started side by side by a
  // launcher could not reach each other: this process lets any process of
  // its user attach, as Open MPI's shared-memory transport does for its
  // cross-memory attach. Without Yama the call fails (EINVAL), harmlessly.
  if (want) {
#ifdef PR_SET_PTRACER
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  }
  auto word = std::make_unique<uint64_t>(0);
  net::random_bytes(word.get(), sizeof *word);
  Published mine;
  mine.pid = int64_t(getpid());
  mine.word_address = uint64_t(reinterpret_cast<uintptr_t>(word.get()));
  mine.word = *word;
  mine.want = want ? 1 : 0;
  std::vector<Published> all(static_cast<size_t>(n));
  boot.allgather(&mine, sizeof mine, all.data());

  int64_t ok = 1;
  std::string why;
  for (int r = 0; r < n; ++r) {
    Rank& k = pm->ranks_[size_t(r)];
    k.pid = all[size_t(r)].pid;
    k.same_process = boot.process_id(r) == boot.process_id(pm->rank_);
    if (!all[size_t(r)].want) {
      ok = 0;
      if (why.empty()) why = "rank " + std::to_string(r) + " does not use it";
    }
    if (r == pm->rank_ || !ok) continue;
    uint64_t got = 0;
    const void* at = reinterpret_cast<const void*>(uintptr_t(all[size_t(r)].word_address));
    bool read_ok = true;
    int err = 0;
    if (k.same_process) {
      std::memcpy(&got, at, sizeof got);
    } else {
      read_ok = copy_once(pid_t(k.pid), at, &got, sizeof got, false) == ssize_t(sizeof got);
      err = errno;
      // written back unchanged: the peer's word is what every reader expects
      if (read_ok && got == all[size_t(r)].word) {
        read_ok = copy_once(pid_t(k.pid), at, &got, sizeof got, true) == ssize_t(sizeof got);
        err = errno;
      }
    }
    if (!read_ok || got != all[size_t(r)].word) {
      ok = 0;
      why = "rank " + std::to_string(pm->rank_) + " cannot read rank " + std::to_string(r) + "'s memory (" +
            (read_ok ? std::string("another process has its process id") : std::string(std::strerror(err))) + ")";
    }
  }
  struct Result {
    int64_t ok = 0;
    char why[120] = {};
  } res;
  res.ok = ok;
  std::strncpy(res.why, why.c_str(), sizeof res.why - 1);
  std::vector<Result> results(static_cast<size_t>(n));
  boot.allgather(&res, sizeof res, results.data());
  pm->usable_ = true;
  for (const Result& r : results) {
    if (r.ok) continue;
    pm->usable_ = false;
    if (pm->why_not_.empty()) pm->why_not_ = std::string(r.why, strnlen(r.why, sizeof r.why));
  }
  return pm;
}

void PeerMemory::read(int peer, const void* remote, void* local, size_t n) const {
  copy(peer, const_cast<void*>(remote), local, n, false);
}

void PeerMemory::write(int peer, void* remote, const void* local, size_t n) const {
  copy(peer, remote, const_cast<void*>(local), n, true);
}

void PeerMemory::copy(int peer, void* remote, void* local, size_t n, bool write) const {
  const Rank& k = ranks_.at(size_t(peer));
  if (k.same_process) {
    if (n) std::memmove(write ? remote : local, write ? local : remote, n);
    return;
  }
  auto* here = static_cast<uint8_t*>(local);
  auto* there = static_cast<uint8_t*>(remote);
  while (n > 0) {
    const ssize_t moved = copy_once(pid_t(k.pid), there, here, n, write);
    if (moved <= 0) {
      const int err = moved < 0 ? errno : EFAULT;
      if (err == EINTR) continue;
      throw RemoteError("ncclz rank " + std::to_string(rank_) + ": " + (write ? "writing" : "reading") + " rank " +
                        std::to_string(peer) + "'s memory failed (" + std::strerror(err) + "; process " +
                        std::to_string(k.pid) + "): it exited, or its buffer is not mapped");
    }
    here += moved;
    there += moved;
    n -= size_t(moved);
  }
}

}  // namespace ncclz::transport
