// One-hop schedules for small messages: the latency algorithm.
//
// A ring costs 2(N-1) (all_reduce) or N-1 dependent hops, each a wait for the
// previous rank, and the call descriptors cost one more round before them:
// for a small message the hops, not the bytes, are the time. Here every rank
// sends each peer, in one message over the pair's own point-to-point link,
// exactly what that peer needs of its input, and makes its output from what it
// receives: one hop. The message is the call descriptor's own (the data is
// carried after the descriptor, core/call_protocol.hpp), so a small call is a
// single round of messages in all. Price: all_reduce sends (N-1) times the
// message per rank (the ring about twice it); the others send what the ring
// sends. The call routine takes it for exact calls up to
// CommConfig::latency_bytes, and all_reduce's two hops for exact all_reduce
// requests up to CommConfig::two_hop_bytes (docs/ALGORITHMS.md, "The latency
// algorithm").
//
// A schedule is two functions: `send` says which bytes of this rank's input
// go to a peer (none for some), `combine` writes this rank's output from
// what every peer sent (in[j]: rank j's bytes for this rank). No transport
// here: the caller moves the bytes. Every rank can compute what peer j sends
// it by evaluating send with j's position (expected_bytes), so sizes are
// checked before anything is read.
//
//   all_reduce      every peer gets the whole input; output: x_0 op x_1 op ... op x_{N-1}
//   reduce_scatter  peer q gets block q; output: the reduction of block `rank`
//   reduce          the root gets every input; the root's output: the reduction
//   all_gather      every peer gets the input; block j of the output: rank j's input
//   broadcast       the root sends its buffer to every peer
//
// Reductions run in rank order on every rank: acc = x_0, then acc = x_j op acc
// for j = 1..N-1 (prims::ReduceFn's incoming operand a = x_j, local b = the
// sum so far), with this rank's own x_r in its place. Every rank applies the
// same operations to the same operands, so outputs are bit-identical on all
// ranks; both exact modes run this same code on the raw values, so lossless
// is bit-identical to none (not to the ring, which sums in another order:
// data movement, max and min are bit-identical to the ring's too).
// All buffers hold the user's elements (esize bytes each).
#pragma once

#include <cstddef>
#include <cstdint>

#include "prims/reduce.hpp"

namespace ncclz::algorithms {

/// A byte range (empty: nothing).
struct Bytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

/// One rank's side of a one-hop call.
struct OneHopPart {
  int rank = 0;
  int nranks = 1;
  const uint8_t* src = nullptr;  ///< this rank's input (broadcast: the buffer)
  uint8_t* dst = nullptr;        ///< this rank's output (broadcast: the buffer)
  size_t count = 0;              ///< elements per block (all_reduce, reduce, broadcast: the message)
  size_t esize = 1;
  int root = -1;
  prims::ReduceFn reduce = nullptr;  ///< the reductions
  /// The reductions' own input when it overlaps dst: count * esize bytes
  /// (two hops: piece_bytes).
  uint8_t* scratch = nullptr;
  /// Two hops: the most data bytes one message carries (a block larger than
  /// this travels in pieces; two_hop_pieces). 0: a block in one message.
  size_t piece_bytes = 0;
};

/// The bytes of this rank's input that go to `peer` (!= part.rank).
using OneHopSend = Bytes (*)(const OneHopPart& part, int peer);
/// Writes this rank's output from in[j], rank j's bytes for this rank (in[rank] unused).
using OneHopCombine = void (*)(const OneHopPart& part, const Bytes* in);

/// A second round (two-hop schedules): after combine, this rank sends each
/// peer again(part, peer) (its first piece: two_hop_pieces).
using OneHopAgain = Bytes (*)(const OneHopPart& part, int peer);

/// A collective's one-hop schedule (send null: it has none), with a second
/// round where `again` is set.
struct OneHop {
  OneHopSend send = nullptr;
  OneHopCombine combine = nullptr;
  OneHopAgain again = nullptr;
  explicit operator bool() const { return send != nullptr; }
};

OneHop one_hop_all_reduce();
/// all_reduce in two hops, for messages where the one hop's (N-1) copies of
/// the whole message cost more than a second round: rank r sends block q of
/// its input to rank q (with the descriptor), reduces block r in rank order
/// as one_hop_all_reduce does, then sends the result to every peer, which
/// copies it into its output (blocks: [count*q/N, count*(q+1)/N)). Each block
/// is reduced by its owner alone, so outputs are bit-identical on all ranks;
/// bytes per rank: 2(N-1)/N of the message, as the ring.
///
/// In pieces (part.piece_bytes set): block q travels in two_hop_pieces(part,
/// q) messages of at most piece_bytes data bytes, piece k holding elements
/// [m*k/P, m*(k+1)/P) of the block's m (P pieces); send, combine and again
/// give piece 0 (the one that rides with the descriptor), two_hop_piece and
/// two_hop_reduce any piece. Rank r sends the pieces of block q to rank q in
/// the first round and the pieces of its reduced block r to every peer in
/// the second (core/call_protocol.hpp moves them). Each piece is reduced in
/// rank order as a whole block is, so the result does not depend on the
/// pieces: the bits are those of one message per block.
OneHop two_hop_all_reduce();
/// Pieces of block q (>= 1; 1 where piece_bytes is 0 or the block fits it).
size_t two_hop_pieces(const OneHopPart& p, int q);
/// Piece k of block q of `base` (the input or the output).
Bytes two_hop_piece(const OneHopPart& p, const uint8_t* base, int q, size_t k);
/// All of block q of `base` (its pieces together).
Bytes two_hop_block(const OneHopPart& p, const uint8_t* base, int q);
/// Reduces piece k of this rank's block into its output in rank order; in[j]:
/// rank j's piece k (in[rank] unused).
void two_hop_reduce(const OneHopPart& p, const Bytes* in, size_t k);
OneHop one_hop_reduce_scatter();
OneHop one_hop_reduce();
OneHop one_hop_all_gather();
OneHop one_hop_broadcast();

/// The bytes rank `from` sends to `part.rank` under `s` (only its size is
/// meaningful: from's buffers are not this rank's); second: in the second round.
size_t expected_bytes(const OneHop& s, const OneHopPart& part, int from, bool second = false);

}  // namespace ncclz::algorithms
