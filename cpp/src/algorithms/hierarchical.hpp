// Hierarchical schedules over the primitives (one channel each): N = H*L
// ranks on H hosts of L ranks each. Every function here drives two Prims of
// one channel: `intra`, on the ring of this host's L ranks in local-rank order
// (shared memory or the heap: the raw wire, no coding), and `inter`, on the
// ring of the H ranks that share this rank's local rank, one per host, in host
// order (the network: the call's wire, compressed where the call is). The
// schedules are written down in prose in hierarchical.cpp and in
// docs/ALGORITHMS.md ("Hierarchical collectives").
//
// Buffers hold wire elements of the prims that read them (intra.esize() or
// inter.esize() bytes each: the user type, or lossy codes); a buffer that one
// phase writes and the next reads through another wire is given twice, once
// per element size (`dst` and `mid` of all_reduce: the same elements, as
// values and as codes, which a prims::Stage maps onto each other).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/ring.hpp"
#include "prims/prims.hpp"

namespace ncclz::algorithms {

/// This rank's place in an H x L grid of ranks.
struct HierPos {
  int host = 0, nhosts = 1;   ///< h, H
  int local = 0, nlocal = 1;  ///< l, L
  const int* grid = nullptr;  ///< grid[h * L + l]: the global rank of (h, l)
  int rank(int h, int l) const { return grid[size_t(h) * size_t(nlocal) + size_t(l)]; }
  RingPos intra() const { return {local, nlocal}; }
  RingPos inter() const { return {host, nhosts}; }
};

/// A lossy reduction's host sums on a device rank: quantized between the
/// intra-host phase and the inter-host one (whole, or piece by piece in
/// rounds), and the inter-host result dequantized after it (a host rank does both slice by slice, in the
/// inter-host ring's prims::Stage). `channel`: the prims' channel (its
/// stream). Both throw where they fail (a value that does not fit the grid).
class HostSumCodes {
 public:
  virtual ~HostSumCodes() = default;
  /// n combined values at `values` (intra wire elements) -> codes at `codes` (inter wire elements).
  virtual void quantize(int channel, const void* values, void* codes, size_t n) = 0;
  /// n codes at `codes` -> values at `values`.
  virtual void dequantize(int channel, const void* codes, void* values, size_t n) = 0;
};

/// All-reduce of `count` elements, src -> dst (may alias). Intra-host
/// reduce-scatter into dst, the inter-host all-reduce of this rank's block in
/// place on `mid` (dst itself, or the codes a Stage maps onto dst, or with
/// `q` codes of their own that q makes from dst's block and turns back into
/// it), intra-host all-gather of dst. seg: ring_segment_elems of the prims it
/// is used with.
/// hier_all_reduce_rounds where hier_all_reduce_in_rounds, else
/// hier_all_reduce_ring_rounds where H > 1 and L > 1, else
/// hier_all_reduce_phases (the same result bits).
void hier_all_reduce(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                     void* mid, size_t count, size_t seg_intra, size_t seg_inter, HostSumCodes* q = nullptr);
/// The three phases one after the other.
void hier_all_reduce_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            void* mid, size_t count, size_t seg_intra, size_t seg_inter, HostSumCodes* q = nullptr);
/// Two hosts exchanging codes (pair_exchange_pays on the inter wire, L > 1):
/// the phases in rounds of one inter-host slice, the intra-host work of the
/// rounds before and after a piece done while the piece crosses the network.
bool hier_all_reduce_in_rounds(const HierPos& pos, const prims::Prims& inter);
void hier_all_reduce_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            void* mid, size_t count, size_t seg_intra, HostSumCodes* q = nullptr);
/// Any other H > 1, L > 1: the phases in rounds of one loop of the inter-host
/// ring, the intra-host work of the rounds around it done right after the
/// loop's first send.
void hier_all_reduce_ring_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                 void* dst, void* mid, size_t count, size_t seg_intra, size_t seg_inter,
                                 HostSumCodes* q = nullptr);

/// Reduce-scatter: block j (global rank j's, `count` elements here) of src at
/// element j*stride. Intra-host reduce-scatter of the H blocks of this local
/// rank into `work` (block h at h*stride, values), then the inter-host
/// reduce-scatter of `mid` (work itself, or codes mapped onto it) into
/// `mid_out` (dst, or codes mapped onto it). With `q`: mid holds codes of
/// its own that q makes from work, and q turns mid_out into `dst` (count
/// values) after.
/// hier_reduce_scatter_rounds where two hosts have L > 1 ranks each,
/// hier_reduce_scatter_ring_rounds where more hosts do, else
/// hier_reduce_scatter_phases (the same slots and result bits).
void hier_reduce_scatter(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, size_t stride,
                         void* work, void* mid, void* mid_out, size_t count, size_t seg_intra, size_t seg_inter,
                         void* dst = nullptr, HostSumCodes* q = nullptr);
/// The phases one after the other.
void hier_reduce_scatter_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                size_t stride, void* work, void* mid, void* mid_out, size_t count, size_t seg_intra,
                                size_t seg_inter, void* dst = nullptr, HostSumCodes* q = nullptr);
/// Two hosts (any wire: the inter-host ring of two sends one block and
/// reduces into the other): the phases in rounds of one inter-host slice.
bool hier_reduce_scatter_in_rounds(const HierPos& pos);
void hier_reduce_scatter_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                size_t stride, void* work, void* mid, void* mid_out, size_t count, size_t seg_intra,
                                void* dst = nullptr, HostSumCodes* q = nullptr);
/// Three or more hosts (L > 1): the phases in rounds of one loop of the
/// inter-host ring, the next round's intra-host reduction right after the
/// loop's first send.
void hier_reduce_scatter_ring_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                     size_t stride, void* work, void* mid, void* mid_out, size_t count,
                                     size_t seg_intra, size_t seg_inter, void* dst = nullptr,
                                     HostSumCodes* q = nullptr);

/// All-gather: src (count elements) to block rank() of dst (block j at
/// j*stride); every other block from its owner. Intra-host all-gather,
/// inter-host all-gather of this local rank's blocks, intra-host all-gather
/// of the blocks that came from the other hosts. One wire element size.
/// hier_all_gather_rounds where H > 1 and L > 1, else the phases.
void hier_all_gather(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                     size_t stride, size_t count, size_t seg_intra, size_t seg_inter);
/// The phases one after the other.
void hier_all_gather_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            size_t stride, size_t count, size_t seg_intra, size_t seg_inter);
/// In rounds of one loop of the inter-host ring, the intra-host copies of the
/// rounds around it right after the loop's first send.
void hier_all_gather_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            size_t stride, size_t count, size_t seg_intra, size_t seg_inter);

/// Broadcast from global rank `root`, in place: the chain of the root's local
/// rank across hosts, then on every host the chain from that local rank,
/// interleaved round by round (rounds of `seg` elements) so both pipeline.
void hier_broadcast(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, int root, void* buf, size_t count,
                    size_t seg);

}  // namespace ncclz::algorithms
