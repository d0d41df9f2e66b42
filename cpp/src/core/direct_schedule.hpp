// Direct schedules: exact collectives among ranks that can reach each other's
// memory (transport/peer_memory.hpp), each byte copied once, straight between
// one rank's buffer and another's, where the slots take two (into the slot,
// out of it). The call descriptor carries where each rank's buffers are
// (DirectAddresses, core/call_protocol.hpp); CallProtocol::direct
// (core/direct_call.cpp) runs a schedule's copies and then its closing round of
// empty messages, after which no rank reads or writes a peer's buffers, so a
// rank returns (and its caller may free or overwrite them) only once every
// peer that touches them is done:
//
//   all_reduce      owner r reads piece k of block r from every peer's input,
//                   reduces it in rank order (two_hop_all_reduce's bits) and
//                   writes it into every peer's output; everyone waits for
//                   everyone
//   reduce_scatter  rank r reads piece k of block r from every peer's input
//                   and reduces it in the ring's order (below), into its own
//                   output; everyone waits for everyone
//   all_gather      rank r reads rank j's input into block j of its own
//                   output; everyone waits for everyone
//   broadcast       every rank reads the root's buffer into its own; the root
//                   waits for every reader, the readers for nobody
//
// reduce_scatter runs where the ring ran (above latency_bytes; core/call.cpp),
// so it reduces as the ring does, element by element the same operations on
// the same operands (algorithms/ring.cpp, ring_reduce_scatter: block q starts
// at rank q+1 and each next rank reduces the incoming sum, operand a, with
// its own value, operand b, ending at rank q):
//   acc = x_{q+1}; acc = reduce(acc, x_{q+i}) for i = 2..N (indices mod N)
// so the bits are the ring's for every type and op, whatever the pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/one_hop.hpp"
#include "core/buffer.hpp"

namespace ncclz::transport {
class PeerMemory;
}

namespace ncclz::core {

/// The peers' buffers of a direct call (src[j], dst[j]: rank j's, in its own
/// address space; this rank's entries unused) and the means to reach them.
struct DirectPeers {
  std::vector<const uint8_t*> src;
  std::vector<uint8_t*> dst;
  const transport::PeerMemory* mem = nullptr;
};

/// This rank's copies and reductions of a direct call (part: its side, as the
/// one-hop schedules see it, with piece_bytes the pieces' size); scratch: a
/// buffer it may size as it needs. Returns the bytes it read and wrote of
/// peers' buffers. Throws where a copy fails (ncclz::RemoteError).
using DirectCopies = uint64_t (*)(const algorithms::OneHopPart& part, const DirectPeers& peers, Buffer& scratch);
/// Whether rank `waiter` waits, in the closing round, for rank `peer`'s
/// message that it is done (peer touches waiter's buffers).
using DirectWaits = bool (*)(const algorithms::OneHopPart& part, int waiter, int peer);

/// A collective's direct schedule (copies null: it has none).
struct DirectSchedule {
  DirectCopies copies = nullptr;
  DirectWaits waits = nullptr;
  explicit operator bool() const { return copies != nullptr; }
};

DirectSchedule direct_all_reduce();
DirectSchedule direct_reduce_scatter();
DirectSchedule direct_all_gather();
DirectSchedule direct_broadcast();

}  // namespace ncclz::core
