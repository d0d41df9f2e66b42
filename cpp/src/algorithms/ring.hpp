// Ring and chain schedules over the primitives (one channel each).
//
// Every function here runs one channel: the caller has already cut the user's
// buffer into per-channel parts and built a Prims over that channel's ring
// connections (receive from rank-1, send to rank+1, ring order = rank order).
// All buffers hold wire elements (p.esize() bytes each: the user type, or the
// integer codes in lossy mode). The schedules are written down in prose in
// ring.cpp and in docs/ALGORITHMS.md.
#pragma once

#include <cstddef>
#include <functional>

#include "prims/prims.hpp"

namespace ncclz::algorithms {

/// Position of this rank in a ring of `nranks`.
struct RingPos {
  int rank = 0;
  int nranks = 1;
};

/// Elements one ring chunk may hold per loop: K/2 slices (at least one). A
/// ring step sends at most this many slices before it receives, which keeps
/// every ring deadlock-free for K >= 2 slots per connection (K = 1 could
/// deadlock: FORWARD holds its incoming slot while it acquires the outgoing
/// one; docs/ALGORITHMS.md, "Deadlock freedom").
size_t ring_segment_elems(const prims::Prims& p, int nslots);
/// The same for slices of `slice_elems` elements (the persistent ring kernels,
/// which run this schedule on the device: core/persistent_call.cpp).
size_t ring_segment_elems(size_t slice_elems, int nslots);

/// Whether two ranks' all-reduce on this wire exchanges their values instead
/// of running the ring (integer elements, coded: the codes of a sum cost more
/// bits than one rank's; ring.cpp, "Two ranks exchanging coded integers").
bool pair_exchange_pays(const prims::Prims& p);

/// Two ranks' all-reduce by exchange: each sends its own `count` elements and
/// adds the other's into dst (may alias src). Only where pair_exchange_pays:
/// the two ranks must end with the same bits whatever the operands' order.
void pair_all_reduce(prims::Prims& p, const void* src, void* dst, size_t count, size_t seg);

/// Allreduce of `count` elements: src -> dst (may alias). Two ranks on a wire
/// where pair_exchange_pays: pair_all_reduce. `between`, if given, runs once:
/// right after the first send (while that chunk crosses the link, before the
/// first wait for the previous rank's), or at once where nothing is sent (no
/// elements; the exchange of two, which has no such point).
void ring_all_reduce(prims::Prims& p, RingPos pos, const void* src, void* dst, size_t count, size_t seg,
                     const std::function<void()>& between = nullptr);

/// Reduce-scatter: block j of src starts at element j*stride (count elements of
/// it belong to this channel, starting at the block's start); dst gets the
/// reduction of block `pos.rank`'s part. `between` as in ring_all_reduce.
void ring_reduce_scatter(prims::Prims& p, RingPos pos, const void* src, size_t stride, void* dst, size_t count,
                         size_t seg, const std::function<void()>& between = nullptr);

/// Allgather: src (count elements) goes to dst at block pos.rank (block j at
/// element j*stride); every other block comes from its owner.
void ring_all_gather(prims::Prims& p, RingPos pos, const void* src, void* dst, size_t stride, size_t count, size_t seg);

/// Pipelined chain broadcast from `root` along the ring: root sends, the ranks
/// after it receive-and-forward, the rank before the root only receives.
void chain_broadcast(prims::Prims& p, RingPos pos, int root, void* buf, size_t count);

}  // namespace ncclz::algorithms
