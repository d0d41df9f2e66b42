// Schedules over the point-to-point links (one lane each): all-to-all by
// pairwise exchange, gather to a root and scatter from a root.
//
// These collectives move blocks that each have exactly one destination, so
// every block crosses exactly one link: on the direct link from its owner to
// the rank that needs it, encoded once by the owner and decoded once where it
// lands. A relay around the ring would move most blocks several hops (an
// all-to-all block from rank r to r+j crosses j links: (N-1)/2 times the
// bytes of the direct route on average), which is what slow links cannot
// afford. The prose of each schedule is in pairwise.cpp and
// docs/ALGORITHMS.md.
//
// A call's steps are dealt out to `lanes` threads (the call's channels): step
// k (k = 1..N-1) runs on lane (k-1) % lanes, every lane runs its steps in
// increasing k. Different steps use different links, so lanes never share a
// connection. Every rank deals the steps the same way (the lane count depends
// only on the call's size, which every rank agrees on).
//
// A rank's own block never leaves it: the schedules skip it, and the caller
// copies it (core/call.cpp does, in the user's type, in every mode).
#pragma once

#include <cstddef>

#include "prims/prims.hpp"

namespace ncclz::algorithms {

/// Prims over the point-to-point links for one lane: sending to rank `to` and
/// receiving from rank `from` (-1: no connection that way). Both ends of a
/// link slice the same way (the same wire type and slot size).
class PeerPrims {
 public:
  virtual ~PeerPrims() = default;
  virtual prims::Prims link(int to, int from) = 0;
};

/// This lane of a call on N ranks: it runs the steps k with (k-1) % lanes == lane.
struct Lane {
  int rank = 0;
  int nranks = 1;
  int lane = 0;
  int lanes = 1;
};

/// The blocks of an all-to-all buffer: one per rank, in rank order, back to
/// back. Equal blocks of `each` elements, or counts[j] elements for rank j.
struct Blocks {
  const size_t* counts = nullptr;  ///< per rank (nranks entries); nullptr: every block has `each`
  size_t each = 0;
  size_t count(int j) const { return counts ? counts[j] : each; }
  /// Element offset of block j: the sum of the blocks before it.
  size_t offset(int j) const;
};

/// Rank r sends block j of src (wire elements) to rank j and receives rank
/// j's block r into block j of dst, for every j != r (pairwise exchange).
void pairwise_all_to_all(PeerPrims& links, Lane l, const void* src, Blocks send, void* dst, Blocks recv);

/// Every rank but the root sends its `count` elements at src to the root,
/// which receives rank j's into dst at element j*count.
void direct_gather(PeerPrims& links, Lane l, int root, const void* src, size_t count, void* dst);

/// The root sends block j of src (at element j*count) to rank j; every other
/// rank receives its `count` elements into dst.
void direct_scatter(PeerPrims& links, Lane l, int root, const void* src, void* dst, size_t count);

}  // namespace ncclz::algorithms
