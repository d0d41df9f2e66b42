// A direct call's rounds (CallProtocol::direct; the schedules are
// core/direct_schedule.hpp): after the descriptors carried every rank's
// DirectAddresses, this rank runs its schedule's copies straight between its
// buffers and its peers', then one closing round of empty messages:
//   done     this rank reads and writes nothing of its peers' buffers after
//            it: sent to every peer whose buffers it may have touched (the
//            schedule's `waits`)
// A rank returns once every `done` it waits for came: then its buffers have
// been read and written by every peer that touches them, and no peer touches
// them again. Each link carries at most one such message a call, in both
// directions alike on every rank (the schedule and the call's root decide),
// so the links stay in step.
#include <cstring>
#include <exception>
#include <string>

#include "base/trace.hpp"
#include "core/call_protocol.hpp"
#include "ncclz/error.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

uint64_t CallProtocol::direct(const DirectSchedule& s, const algorithms::OneHopPart& part, const Carried& carried,
                              uint64_t seq, CallState& call, const transport::PeerMemory& mem) {
  trace::Scope ev("direct");
  const transport::ShortWaits short_waits;
  const size_t n = size_t(nranks_);
  DirectPeers peers;
  peers.src.assign(n, nullptr);
  peers.dst.assign(n, nullptr);
  peers.mem = &mem;
  for (int j = 0; j < nranks_; ++j) {
    if (j == rank_) continue;
    DirectAddresses a;
    std::memcpy(&a, carried.in[size_t(j)].data, sizeof a);  // its size was checked (run_latency)
    peers.src[size_t(j)] = reinterpret_cast<const uint8_t*>(uintptr_t(a.src));
    peers.dst[size_t(j)] = reinterpret_cast<uint8_t*>(uintptr_t(a.dst));
  }
  release_carried();
  const algorithms::Bytes none{};
  try {
    const uint64_t moved = s.copies(part, peers, direct_in_);
    for (int k = 1; k < nranks_; ++k) {
      const int q = (rank_ + k) % nranks_;
      if (s.waits(part, q, rank_)) post_bytes(q, none, call);
    }
    for (int k = 1; k < nranks_; ++k) {
      const int j = (rank_ + nranks_ - k) % nranks_;
      if (!s.waits(part, rank_, j)) continue;
      wait_bytes(j, 0, "direct round (done)", seq, call);
      peers_.link(j)->recv->release();
    }
    flush_peers(call);
    return moved;
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("latency algorithm, direct: ") + e.what());
    throw;
  }
}

}  // namespace ncclz::core
