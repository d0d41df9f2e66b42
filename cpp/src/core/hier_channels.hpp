// The hierarchical links of a communicator, and a hierarchical call's fan-out
// over them (the counterpart of core/channels.hpp's rings).
//
// Where the topology allows hierarchical collectives (Topology::hierarchical:
// several hosts, the same number L > 1 of ranks on each), every channel c has
// two more rings besides its flat one, connected at creation
// (core/communicator.cpp):
//   intra  the L ranks of this host in local-rank order: shared memory (or the
//          heap for threads; sockets only where the host's ranks do not share
//          a machine), raw slots;
//   inter  the H ranks with this rank's local rank, one per host, in host
//          order: the communicator's transport (sockets between machines).
// A hierarchical call runs its schedule (Collective::hier) on each channel's
// thread with both rings' prims: the intra one counting into
// CallState::local_ch, the inter one into CallState::ch, so CallStats' ratio
// is the inter-host links' (the ones that compress). Channel c takes the same
// part of the buffers as in a ring call. Slot memory: two more rings of
// nchannels x 2 peers x K slots per rank and direction.
#pragma once

#include <cstddef>
#include <vector>

#include "core/buffer.hpp"
#include "core/call_state.hpp"
#include "core/channels.hpp"
#include "core/collective.hpp"
#include "ncclz/topology.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

class HierChannels {
 public:
  /// slot_bytes: the data bytes of a slice (NCCLZ_SLOT_BYTES; the slots hold
  /// the header on top).
  /// intra_note: appended to the errors of the intra-host rings where their
  /// transport names the host's ranks, not the communicator's ("" otherwise).
  HierChannels(const Topology& topo, int rank, int nchannels, int nslots, size_t slot_bytes,
               std::string intra_note = "");

  void attach_intra(int c, transport::SendConn* send, transport::RecvConn* recv);
  void attach_inter(int c, transport::SendConn* send, transport::RecvConn* recv);
  /// This rank's place in the H x L grid.
  const algorithms::HierPos& pos() const { return pos_; }
  /// Channel c's send connections (flushed at destruction).
  transport::SendConn* intra_send(int c) const { return ch_[size_t(c)].intra_send; }
  transport::SendConn* inter_send(int c) const { return ch_[size_t(c)].inter_send; }
  int count() const { return int(ch_.size()); }

  /// A hierarchical call's whole buffers; run_schedule offsets each to the
  /// channel's part in its own element size (src, dst, work: the intra wire's;
  /// mid, mid_out: the inter wire's).
  struct Buffers {
    const void* src = nullptr;
    void* dst = nullptr;
    void* work = nullptr;
    void* mid = nullptr;
    void* mid_out = nullptr;
    /// A device rank's lossy reduction: its host sums' codes (HierPart::codes).
    algorithms::HostSumCodes* codes = nullptr;
  };
  /// Runs cd.hier on nch channels (the threads of `fan`, which aborts the
  /// communicator on a failure) and flushes both rings' connections.
  void run_schedule(RingChannels& fan, const Collective& cd, const Buffers& b, const Wire& intra, const Wire& inter,
                    int nch, CallState& call);

 private:
  struct Channel {
    transport::SendConn* intra_send = nullptr;
    transport::RecvConn* intra_recv = nullptr;
    transport::SendConn* inter_send = nullptr;
    transport::RecvConn* inter_recv = nullptr;
    Buffer scratch[2];
  };
  int rank_;
  int nslots_;
  std::string intra_note_;
  size_t slot_bytes_;
  std::vector<int> grid_;  // grid_[h * L + l]: the global rank of (h, l)
  algorithms::HierPos pos_;
  std::vector<Channel> ch_;
};

}  // namespace ncclz::core
