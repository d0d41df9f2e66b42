// Channel fan-out: a call's schedule over the communicator's parallel rings.
//
// Each channel c has its own ring over ranks 0..N-1 in rank order: a receive
// connection from rank-1 and a send connection to rank+1 (with N == 2 both are
// the one link to the other rank), its own slot scratch, and its own thread
// (channel 0 on the caller's, the others on a persistent worker pool that also
// splits the API layer's element-wise passes). A call with enough data runs
// several rings in parallel, each over a contiguous part of the buffer:
// parallel codec throughput. The number of channels a call uses and every
// chunk boundary depend only on the call's size and user type, never on the
// compression mode, which is what keeps lossless bit-identical to none.
//
// Collectives whose schedule runs on the point-to-point links instead
// (Collective::peer_schedule: all_to_all, gather, scatter) use the same
// threads as lanes: lane c takes every lanes-th pairwise step
// (algorithms/pairwise.hpp) with channel c's slot scratch and counters, and
// flushes the links it sent on.
//
// A failure while data moves (timeout, corrupt slice, a vanished peer) leaves
// the slot FIFOs out of step, so it aborts the communicator: the sibling
// channels wake up with Aborted, and the original error is rethrown.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.hpp"
#include "core/call_state.hpp"
#include "core/collective.hpp"
#include "core/types.hpp"
#include "prims/prims.hpp"
#include "transport/transport.hpp"

namespace ncclz::base {
class WorkerPool;
}  // namespace ncclz::base

namespace ncclz::core {

class DeviceWork;

/// What the prims of one call move: wire type, slot format, reduction, codec.
struct Wire {
  ElemType type = ElemType::U8;
  prims::WireMode mode = prims::WireMode::Raw;
  RedOp op = RedOp::Sum;
  /// The reduction on the host: null for the wire type's (reduce_fn(type,
  /// op)); native_wire sets the user type's own (prims::reduce_fn(DataType,
  /// op)), which differs where reduces_as_wire does not hold.
  prims::ReduceFn reduce = nullptr;
  /// Whether op reduces the user's values as the wire type's op does; where
  /// not, the values are reduced on the host only (device_codes_exact).
  bool as_wire = true;
  size_t raw_esize = 1;  ///< the user's element size (CallStats::raw_bytes)
  codec::EncodeOptions enc;
  prims::Stage* stage = nullptr;  ///< slice-by-slice quantize/dequantize (core::LossyStage)
  size_t slice_bytes = 0;         ///< slot bytes a slice is sized for (0: NCCLZ_SLOT_BYTES)
  /// Non-null: the values are device memory, coded on the device (each
  /// channel's prims get its slice codec and device scratch; rings only).
  DeviceWork* device = nullptr;
};

/// The user's values: raw slots (Mode::None) or slices through the selector.
Wire native_wire(DataType t, Mode m, RedOp op, const Compression& c);
/// The lossy codes (int32, or int64 when wide); a mean sums them.
Wire code_wire(DataType t, bool wide, RedOp op, const Compression& c);

/// The prims arguments of a call moving `w` on channel `channel` (for error
/// messages) of rank `rank`: slices of w.slice_bytes, else of `slot_bytes`;
/// rank 0's codec effort and the call's deadline from `call`.
prims::PrimsArgs prims_args(const Wire& w, const CallState& call, int rank, int channel, size_t slot_bytes);

/// The prims of a device rank on one ring or link: DeviceWork entry
/// `entry`'s slice codec and device scratch slice (a.slice_bytes' slices), the
/// connections' slots registered with CUDA.
prims::Prims device_prims(DeviceWork& dw, int entry, prims::PrimsArgs a, transport::SendConn* send,
                          transport::RecvConn* recv, prims::ChannelStats* st);

/// Aborts the communicator with a reason (CommunicatorImpl::fail).
using FailFn = std::function<void(const std::string&)>;

class PeerLinks;

class RingChannels {
 public:
  /// cfg: the effective configuration; slot_capacity: the bytes of the
  /// transport's ring slots (the larger of the two slice sizes, with header).
  RingChannels(int rank, int nranks, const CommConfig& cfg, size_t slot_capacity, base::WorkerPool* pool, FailFn fail);

  /// Channel c's connections (after Transport::connect).
  void attach(int c, transport::SendConn* send, transport::RecvConn* recv);
  /// The point-to-point links that peer schedules run on.
  void use_peer_links(PeerLinks* peers) { peers_ = peers; }

  int count() const { return int(ch_.size()); }
  /// Channels a call of `bytes` uses: one per kBytesPerChannel, 1..nchannels.
  int pick(size_t bytes) const;
  /// Channels an exact call (none, lossless) of `bytes` uses on the rings:
  /// pick(bytes), at most CommConfig::exact_nchannels (core/config.hpp,
  /// resolve_exact_shape).
  int pick_exact(size_t bytes) const { return std::min(pick(bytes), exact_nchannels_); }
  /// Wire::slice_bytes of exact ring calls: CommConfig::exact_slice_bytes, 0
  /// where that is the slots' own size.
  size_t exact_slice_bytes() const { return exact_slice_bytes_ < slot_bytes_ ? exact_slice_bytes_ : 0; }
  /// Channel c's slot scratch (a slot's bytes and more, 8-byte aligned).
  uint8_t* scratch(int c);
  /// Channel c's send connection (flushed at destruction), nullptr without peers.
  transport::SendConn* send_conn(int c) const { return ch_[size_t(c)].send; }

  /// Prims on channel c moving `w`, counting into call.ch[c].
  prims::Prims prims(int c, const Wire& w, CallState& call);
  /// Raw byte prims on channel 0 for the call descriptor rounds (not counted
  /// in the call's stats: `st`).
  prims::Prims control(prims::ChannelStats* st, Clock::duration timeout);

  /// Runs fn(c) for c = 0..nch-1 on the channels' threads, then flushes each
  /// channel's connection (a call is complete only when its last slots have
  /// left this process). A failure aborts the communicator; the first error
  /// that is not Aborted is rethrown.
  void run(int nch, CallState& call, const std::function<void(int)>& fn);
  /// The collective's schedule on nch channels, from src to dst (wire
  /// elements of w.type): each channel takes its part of every block, or for
  /// a peer schedule, each of min(nch, N-1) lanes its share of the steps.
  void run_schedule(const Collective& cd, const void* src, void* dst, const Wire& w, int nch, CallState& call);

 private:
  void run_peer_schedule(const Collective& cd, const void* src, void* dst, const Wire& w, int nch, CallState& call);

  struct Channel {
    transport::SendConn* send = nullptr;
    transport::RecvConn* recv = nullptr;
    Buffer scratch;
  };
  int rank_, nranks_;
  int nslots_;
  size_t slot_bytes_, slot_capacity_;
  int exact_nchannels_;
  size_t exact_slice_bytes_;
  base::WorkerPool* pool_;
  FailFn fail_;
  std::vector<Channel> ch_;
  PeerLinks* peers_ = nullptr;
};

/// The point-to-point links of send/recv: one to every other rank, with one
/// slot scratch (calls are serialized).
class PeerLinks {
 public:
  PeerLinks(int rank, int nranks, size_t slot_bytes);
  void attach(int peer, transport::PeerLink* link) { links_[size_t(peer)] = link; }
  /// The link to `peer`, nullptr when point-to-point links are off.
  transport::PeerLink* link(int peer) const { return links_[size_t(peer)]; }
  /// Prims on the link to `peer`; w = Wire{} moves raw bytes (the handshake).
  prims::Prims prims(int peer, const Wire& w, CallState& call, prims::ChannelStats* st);
  /// Host prims on one direction of the link to `peer` (its send side, or its
  /// recv side) with a scratch of their own, of at least scratch_bytes():
  /// a group's transfers (core/p2p_group.cpp), several at once.
  prims::Prims prims(int peer, bool sending, const Wire& w, CallState& call, prims::ChannelStats* st, void* scratch);
  size_t scratch_bytes() const;

 private:
  prims::PrimsArgs args(const Wire& w, CallState& call) const;
  int rank_;
  size_t slot_bytes_;
  std::vector<transport::PeerLink*> links_;  // by peer rank
  Buffer scratch_;
};

}  // namespace ncclz::core
