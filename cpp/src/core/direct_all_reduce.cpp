// Direct two hops: an exact all_reduce among ranks that can reach each
// other's memory (transport/peer_memory.hpp), declared in call_protocol.hpp.
//
// The schedule is two_hop_all_reduce's (algorithms/one_hop.hpp): rank r owns
// block r, reduces it over every rank's input in rank order, and every rank's
// output gets every owner's result, so the bits are those of the two hops
// through the slots. What changes is who copies: the owner reads each peer's
// piece of its block straight from the peer's input (into a scratch that
// stays in cache while it is reduced) and writes the reduced piece, still in
// cache, straight into every peer's output. One copy per byte each way, where
// the slots take two (into the slot, out of it), and one round of empty
// messages after the descriptors instead of a second round of data:
//   written  rank r has reduced block r and written it into every peer's
//            output: it reads and writes nothing of its peers' buffers after.
// A rank returns once every peer's `written` came: then its input has been
// read and its output filled, and no peer touches either again.
//
// In place (src == dst) is safe: block q of any rank's input is read by its
// owner q alone, which overwrites a piece of it (with the result) only after
// it has read that piece; a rank's own block is written by it alone (the
// reduction keeps its own input aside where needed, one_hop.cpp).
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/trace.hpp"
#include "core/call_protocol.hpp"
#include "ncclz/error.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

uint64_t CallProtocol::direct_all_reduce(const algorithms::OneHopPart& given, const Carried& carried, uint64_t seq,
                                         CallState& call, const transport::PeerMemory& mem) {
  trace::Scope ev("direct");
  const transport::ShortWaits short_waits;
  const size_t n = size_t(nranks_);
  std::vector<const uint8_t*> src(n, nullptr);
  std::vector<uint8_t*> dst(n, nullptr);
  for (int j = 0; j < nranks_; ++j) {
    if (j == rank_) continue;
    DirectAddresses a;
    std::memcpy(&a, carried.in[size_t(j)].data, sizeof a);  // its size was checked (run_latency)
    src[size_t(j)] = reinterpret_cast<const uint8_t*>(uintptr_t(a.src));
    dst[size_t(j)] = reinterpret_cast<uint8_t*>(uintptr_t(a.dst));
  }
  release_carried();
  const algorithms::Bytes none{};
  // Piece j: rank j's piece of this rank's block; piece `rank`: this rank's
  // own where the reduction needs it aside (in place; one_hop.cpp).
  algorithms::OneHopPart part = given;
  auto* pieces = static_cast<uint8_t*>(direct_in_.get(n * part.piece_bytes));
  part.scratch = pieces + size_t(rank_) * part.piece_bytes;
  std::vector<algorithms::Bytes> in(n);
  uint64_t moved = 0;
  try {
    // This rank's block of every input, piece by piece: read, reduced, and
    // written into every peer's output while it is in cache.
    const size_t own = algorithms::two_hop_pieces(part, rank_);
    for (size_t k = 0; k < own; ++k) {
      const algorithms::Bytes mine = algorithms::two_hop_piece(part, part.src, rank_, k);
      const size_t at = size_t(mine.data - part.src);
      for (int j = 0; j < nranks_; ++j) {
        if (j == rank_) continue;
        uint8_t* to = pieces + size_t(j) * part.piece_bytes;
        mem.read(j, src[size_t(j)] + at, to, mine.size);
        in[size_t(j)] = {to, mine.size};
      }
      algorithms::two_hop_reduce(part, in.data(), k);
      const algorithms::Bytes result = algorithms::two_hop_piece(part, part.dst, rank_, k);
      for (int i = 1; i < nranks_; ++i) {
        const int j = (rank_ + i) % nranks_;  // each peer first for a different owner
        mem.write(j, dst[size_t(j)] + (result.data - part.dst), result.data, result.size);
      }
      moved += 2 * uint64_t(nranks_ - 1) * mine.size;
    }
    for (int k = 1; k < nranks_; ++k) post_bytes((rank_ + k) % nranks_, none, call);
    for (int k = 1; k < nranks_; ++k) {
      const int j = (rank_ + nranks_ - k) % nranks_;
      wait_bytes(j, 0, "direct round (written)", seq, call);
      peers_.link(j)->recv->release();
    }
    flush_peers(call);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("latency algorithm, direct two hops: ") + e.what());
    throw;
  }
  return moved;
}

}  // namespace ncclz::core
