// Hierarchical links and fan-out (see hier_channels.hpp).
#include "core/hier_channels.hpp"

#include "core/config.hpp"
#include "core/device_work.hpp"
#include "topology/group_bootstrap.hpp"

namespace ncclz::core {

HierChannels::HierChannels(const Topology& topo, int rank, int nchannels, int nslots, size_t slot_bytes,
                           std::string intra_note)
    : rank_(rank),
      nslots_(nslots),
      intra_note_(std::move(intra_note)),
      slot_bytes_(slot_bytes),
      ch_(size_t(nchannels)) {
  const int H = topo.nhosts, L = topo.local_size;
  grid_.assign(size_t(H) * size_t(L), -1);
  for (size_t r = 0; r < topo.host_of.size(); ++r) {
    grid_[size_t(topo.host_of[r]) * size_t(L) + size_t(topo.local_rank_of[r])] = int(r);
  }
  pos_.host = topo.host;
  pos_.nhosts = H;
  pos_.local = topo.local_rank;
  pos_.nlocal = L;
  pos_.grid = grid_.data();
  for (auto& c : ch_) {
    c.scratch[0].get(slot_of(slot_bytes_) + 64);
    c.scratch[1].get(slot_of(slot_bytes_) + 64);
  }
}

void HierChannels::attach_intra(int c, transport::SendConn* send, transport::RecvConn* recv) {
  ch_[size_t(c)].intra_send = send;
  ch_[size_t(c)].intra_recv = recv;
}

void HierChannels::attach_inter(int c, transport::SendConn* send, transport::RecvConn* recv) {
  ch_[size_t(c)].inter_send = send;
  ch_[size_t(c)].inter_recv = recv;
}

void HierChannels::run_schedule(RingChannels& fan, const Collective& cd, const Buffers& b, const Wire& intra,
                                const Wire& inter, int nch, CallState& call) {
  const size_t ei = codec::elem_size(intra.type), ee = codec::elem_size(inter.type);
  call.local_ch.assign(size_t(nch), prims::ChannelStats{});
  call.slice_bytes = inter.slice_bytes ? inter.slice_bytes : slot_bytes_;
  auto off = [](const void* p, size_t elems, size_t es) -> uint8_t* {
    return p ? static_cast<uint8_t*>(const_cast<void*>(p)) + elems * es : nullptr;
  };
  fan.run(nch, call, [&](int c) {
    Channel& ch = ch_[size_t(c)];
    const size_t lo = cd.split * size_t(c) / size_t(nch), hi = cd.split * size_t(c + 1) / size_t(nch);
    const size_t scratch = slot_of(slot_bytes_) + 64;
    const prims::PrimsArgs ai = prims_args(intra, call, rank_, c, slot_bytes_);
    const prims::PrimsArgs ae = prims_args(inter, call, rank_, c, slot_bytes_);
    // A device rank (both wires' values on the device): the two rings' slice
    // codecs are DeviceWork entries c and kSecondRing + c, on one stream.
    prims::Prims pi =
        intra.device
            ? device_prims(*intra.device, c, ai, ch.intra_send, ch.intra_recv, &call.local_ch[size_t(c)])
            : prims::Prims(ch.intra_send, ch.intra_recv, ai, &call.local_ch[size_t(c)], ch.scratch[0].get(scratch));
    prims::Prims pe =
        inter.device ? device_prims(*inter.device, DeviceWork::kSecondRing + c, ae, ch.inter_send, ch.inter_recv,
                                    &call.ch[size_t(c)])
                     : prims::Prims(ch.inter_send, ch.inter_recv, ae, &call.ch[size_t(c)], ch.scratch[1].get(scratch));
    HierPart part;
    part.pos = pos_;
    part.src = off(b.src, lo, ei);
    part.dst = off(b.dst, lo, ei);
    part.work = off(b.work, lo, ei);
    part.mid = off(b.mid, lo, ee);
    part.mid_out = off(b.mid_out, lo, ee);
    part.codes = b.codes;
    part.count = hi - lo;
    part.stride = cd.split;
    part.root = cd.root;
    part.seg_intra = algorithms::ring_segment_elems(pi, nslots_);
    part.seg_inter = algorithms::ring_segment_elems(pe, nslots_);
    part.rounds = cd.hier_rounds;
    auto run = [&] {
      cd.hier(pi, pe, part);
      pi.settle();
      pe.settle();
      // Complete only once the last slots have left this process (as the rings').
      ch.intra_send->flush(call.deadline());
      ch.inter_send->flush(call.deadline());
    };
    if (intra_note_.empty()) {
      run();
    } else {
      // An error that names the host transport's ranks says which ranks those are.
      topology::with_note(intra_note_, run);
    }
  });
}

}  // namespace ncclz::core
