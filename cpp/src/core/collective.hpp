// The collective descriptions: what the call routine (core/call.hpp) needs to
// know about each collective, so that it is written once for all of them.
//
// A description says what the call descriptor carries (the collective, its
// count, op and root), what this rank reads and writes, how the ranks' values
// combine (sum, mean, or select: max/min and data movement return one rank's
// value), whose input the lossy statistics and quantization come from, and
// the schedule that runs on each channel. From those the routine derives every
// path: the message size that picks the mode and the channel count, the
// checks, the error budget (bound::Combine), the lists of nonzeros (sums
// only), the exact path (for sum/mean the narrowest accumulation that keeps
// the bound, bound::choose_exact; the plain collective for select), the code
// buffers.
//
// Adding a collective is a description here plus its schedule (a function
// over one channel's prims on the rings, or over one lane's prims on the
// point-to-point links; algorithms/): docs/ALGORITHMS.md, "The call routine".
//
// Two generalisations serve the collectives whose blocks have one
// destination each (all_to_all, gather, scatter): a rank's own block never
// leaves it (`self_*`: the routine copies it, in the user's type, in every
// mode), and all_to_allv's per-peer counts (`send_counts`, `recv_counts`),
// which the routine matches pairwise across ranks after the descriptor
// exchange, where it also learns the call's message size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/hierarchical.hpp"
#include "algorithms/one_hop.hpp"
#include "algorithms/pairwise.hpp"
#include "algorithms/ring.hpp"
#include "core/call_desc.hpp"
#include "core/direct_schedule.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/communicator.hpp"
#include "prims/prims.hpp"

namespace ncclz::core {

/// One channel's share of a call, as a schedule sees it: the channel's part of
/// the buffers (already offset to it), `count` elements per block, blocks
/// `stride` elements apart (reduce-scatter's input, all-gather's output).
struct ChannelPart {
  algorithms::RingPos pos;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  size_t count = 0;
  size_t stride = 0;
  int root = -1;
  size_t seg = 0;  ///< ring chunk elements (algorithms::ring_segment_elems)
};

/// The algorithm of a collective on one channel.
using ChannelSchedule = void (*)(prims::Prims& p, const ChannelPart& part);

/// One channel's share of a hierarchical call (core/hier_channels.hpp), each
/// buffer offset to the channel's part in its own element size: src, dst and
/// work in the intra-host wire's elements (the user's values), mid and
/// mid_out in the inter-host wire's (the values, or a lossy call's codes,
/// mapped onto dst / work by a prims::Stage).
struct HierPart {
  algorithms::HierPos pos;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint8_t* work = nullptr;     ///< reduce_scatter: the host's sums (H blocks, `stride` apart)
  uint8_t* mid = nullptr;      ///< the inter-host phase's input (all_reduce: in place)
  uint8_t* mid_out = nullptr;  ///< reduce_scatter: the inter-host phase's output
  size_t count = 0;
  size_t stride = 0;
  int root = -1;
  size_t seg_intra = 0, seg_inter = 0;  ///< ring chunk elements of each ring
  bool rounds = true;                   ///< Collective::hier_rounds
  /// A device rank's lossy reduction: its host sums' codes (see
  /// algorithms::HostSumCodes); null otherwise.
  algorithms::HostSumCodes* codes = nullptr;
};

/// A hierarchical algorithm on one channel: the intra-host ring's prims and
/// the inter-host ring's.
using HierSchedule = void (*)(prims::Prims& intra, prims::Prims& inter, const HierPart& part);
/// One lane's share of a call on the point-to-point links, as a peer schedule
/// sees it: the whole wire buffers, with the blocks of the input and output
/// (all_to_all; gather and scatter: equal blocks of `each`).
struct PeerPart {
  algorithms::Lane lane;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  algorithms::Blocks send, recv;
  int root = -1;
};

/// The algorithm of a collective over the point-to-point links, one lane.
using PeerSchedule = void (*)(algorithms::PeerPrims& links, const PeerPart& part);

struct Collective {
  Coll coll = Coll::AllReduce;
  const void* send = nullptr;  ///< this rank's input (broadcast: the buffer)
  void* recv = nullptr;        ///< this rank's output (broadcast: the buffer)
  size_t count = 0;            ///< what the call descriptor carries (count, recv_count or send_count)
  size_t in_count = 0;         ///< input elements of this rank
  size_t out_count = 0;        ///< output elements of this rank
  /// Elements of the whole message, the same on every rank: the mode
  /// (Compression::min_bytes), the channel count and the lossy min_bytes
  /// check depend on it (reductions: the input; all_gather: the output).
  size_t message = 0;
  bool reduces = false;  ///< takes an op (all_reduce, reduce_scatter, reduce)
  RedOp op = RedOp::Sum;
  Combine how = Combine::Select;
  int root = -1;  ///< broadcast, reduce, gather, scatter: the root; send: this rank; recv: the sender
  int peer = -1;  ///< send: the receiver; recv: this rank
  /// This rank's input takes part in the statistics and is quantized (every
  /// rank, or the root alone for a broadcast).
  bool input_here = true;
  /// The code output is the code input: all_reduce (the ring works in place
  /// on its codes) and broadcast (one buffer).
  bool codes_in_place = false;
  /// The ring schedule; nullptr for send/recv (their own link, core/call.hpp)
  /// and for the collectives on the point-to-point links.
  ChannelSchedule schedule = nullptr;
  /// Elements split over the channels (per block): channel c of n takes
  /// [split*c/n, split*(c+1)/n) of every block.
  size_t split = 0;
  /// The hierarchical schedule (algorithms/hierarchical.hpp); nullptr where
  /// the collective has none.
  HierSchedule hier = nullptr;
  /// The latency algorithm's one-hop schedule (algorithms/one_hop.hpp):
  /// small exact calls carry their data in the descriptor message. Empty
  /// where the collective has none. `latency_wide`, where set, replaces it
  /// where one hop would send more than kOneHopBytes per rank or the message
  /// is above latency_bytes (all_reduce's two hops: fewer bytes for a second
  /// round, up to CommConfig::two_hop_bytes; core/call.cpp).
  algorithms::OneHop latency, latency_wide;
  /// The direct schedule (core/direct_schedule.hpp): exact calls above
  /// latency_bytes (all_reduce: wherever it takes two hops) from
  /// direct_from_bytes up, where the peers' memory is reachable; empty where
  /// the collective has none.
  DirectSchedule direct;
  /// The algorithm this call runs: chosen per call by the call routine from
  /// rank 0's proposal and the topology (core/call.hpp, step 4).
  Algorithm algorithm = Algorithm::Ring;
  /// A hierarchical all_reduce, reduce_scatter or all_gather runs in rounds
  /// (algorithms::hier_all_reduce, hier_reduce_scatter, hier_all_gather):
  /// false where a rank asked for the phases one after the other (CallDesc's
  /// kHierPhases).
  bool hier_rounds = true;
  /// The schedule on the point-to-point links instead of the rings
  /// (all_to_all, gather, scatter): the call's channels become lanes that
  /// take the pairwise steps (algorithms/pairwise.hpp).
  PeerSchedule peer_schedule = nullptr;
  /// The blocks of the input and output for a peer schedule (element counts).
  algorithms::Blocks send_blocks, recv_blocks;
  /// all_to_allv: the elements this rank sends to / receives from each rank
  /// (nranks entries each); nullptr otherwise. The routine exchanges them after
  /// the descriptors and matches them pairwise (core/call_protocol.hpp), which
  /// also gives `message` (every rank's input elements, averaged).
  const size_t* send_counts = nullptr;
  const size_t* recv_counts = nullptr;
  /// This rank's own block, which no schedule moves: self_count elements from
  /// send at self_src to recv at self_dst, copied by the routine in the user's
  /// type after the schedule, in every mode (exact: within any lossy bound).
  size_t self_count = 0, self_src = 0, self_dst = 0;
  /// The CUDA device whose memory send and recv are (ncclz::set_buffer_device),
  /// -1 for host memory: core/device_call.hpp, core/device_work.hpp.
  int device = -1;

  bool p2p() const { return coll == Coll::Send || coll == Coll::Recv; }
  /// The call's message size is known only after the counts round (all_to_allv).
  bool per_peer() const { return coll == Coll::AllToAllv; }
  /// Takes a root (checked against the communicator's size).
  bool rooted() const {
    return coll == Coll::Broadcast || coll == Coll::Reduce || coll == Coll::Gather || coll == Coll::Scatter;
  }
  /// Lossy ranks add codes (the lists of nonzeros and the float64 exact path apply).
  bool sums() const { return how == Combine::Sum || how == Combine::Mean; }
};

Combine combine_of(RedOp op);

Collective all_reduce_desc(const void* send, void* recv, size_t count, RedOp op);
Collective reduce_scatter_desc(const void* send, void* recv, size_t recv_count, RedOp op, int nranks);
Collective all_gather_desc(const void* send, void* recv, size_t send_count, int nranks);
Collective broadcast_desc(void* buf, size_t count, int root, int rank);
Collective send_desc(const void* buf, size_t count, int rank, int peer);
Collective recv_desc(void* buf, size_t count, int rank, int peer);
/// Block j of send (count elements) goes to rank j; block j of recv comes from rank j.
Collective all_to_all_desc(const void* send, void* recv, size_t count, int rank, int nranks);
/// Like all_to_all with per-peer counts: send_counts[j] elements to rank j,
/// recv_counts[j] from rank j, blocks back to back in rank order.
Collective all_to_allv_desc(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                            int rank, int nranks);
/// The reduction of every rank's send goes to the root's recv (recv is not
/// used on other ranks; send may be recv on the root).
Collective reduce_desc(const void* send, void* recv, size_t count, RedOp op, int root, int rank);
/// Rank j's send_count elements go to the root's recv at j*send_count.
Collective gather_desc(const void* send, void* recv, size_t send_count, int root, int rank, int nranks);
/// Block j of the root's send (recv_count elements each) goes to rank j's recv.
Collective scatter_desc(const void* send, void* recv, size_t recv_count, int root, int rank, int nranks);

}  // namespace ncclz::core
