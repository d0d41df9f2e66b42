// The collective descriptions and their schedules (see collective.hpp; the
// schedules themselves are algorithms/ring.hpp, hierarchical.hpp, chain_reduce.hpp and
// pairwise.hpp).
#include "core/collective.hpp"

#include "algorithms/chain_reduce.hpp"

namespace ncclz::core {
namespace {

void all_reduce_schedule(prims::Prims& p, const ChannelPart& c) {
  algorithms::ring_all_reduce(p, c.pos, c.src, c.dst, c.count, c.seg);
}

void reduce_scatter_schedule(prims::Prims& p, const ChannelPart& c) {
  algorithms::ring_reduce_scatter(p, c.pos, c.src, c.stride, c.dst, c.count, c.seg);
}

void all_gather_schedule(prims::Prims& p, const ChannelPart& c) {
  algorithms::ring_all_gather(p, c.pos, c.src, c.dst, c.stride, c.count, c.seg);
}

void broadcast_schedule(prims::Prims& p, const ChannelPart& c) {
  algorithms::chain_broadcast(p, c.pos, c.root, c.dst, c.count);
}

void hier_all_reduce_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  if (c.rounds) {
    algorithms::hier_all_reduce(intra, inter, c.pos, c.src, c.dst, c.mid, c.count, c.seg_intra, c.seg_inter, c.codes);
  } else {
    algorithms::hier_all_reduce_phases(intra, inter, c.pos, c.src, c.dst, c.mid, c.count, c.seg_intra, c.seg_inter,
                                       c.codes);
  }
}

void hier_reduce_scatter_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  if (c.rounds) {
    algorithms::hier_reduce_scatter(intra, inter, c.pos, c.src, c.stride, c.work, c.mid, c.mid_out, c.count,
                                    c.seg_intra, c.seg_inter, c.dst, c.codes);
  } else {
    algorithms::hier_reduce_scatter_phases(intra, inter, c.pos, c.src, c.stride, c.work, c.mid, c.mid_out, c.count,
                                           c.seg_intra, c.seg_inter, c.dst, c.codes);
  }
}

void hier_all_gather_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  if (c.rounds) {
    algorithms::hier_all_gather(intra, inter, c.pos, c.src, c.dst, c.stride, c.count, c.seg_intra, c.seg_inter);
  } else {
    algorithms::hier_all_gather_phases(intra, inter, c.pos, c.src, c.dst, c.stride, c.count, c.seg_intra, c.seg_inter);
  }
}

void hier_broadcast_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  algorithms::hier_broadcast(intra, inter, c.pos, c.root, c.dst, c.count, c.seg_inter);
}

void reduce_schedule(prims::Prims& p, const ChannelPart& c) {
  algorithms::chain_reduce(p, c.pos, c.root, c.src, c.dst, c.count);
}

void all_to_all_schedule(algorithms::PeerPrims& links, const PeerPart& c) {
  algorithms::pairwise_all_to_all(links, c.lane, c.src, c.send, c.dst, c.recv);
}

void gather_schedule(algorithms::PeerPrims& links, const PeerPart& c) {
  algorithms::direct_gather(links, c.lane, c.root, c.src, c.send.each, c.dst);
}

void scatter_schedule(algorithms::PeerPrims& links, const PeerPart& c) {
  algorithms::direct_scatter(links, c.lane, c.root, c.src, c.dst, c.recv.each);
}

size_t total(const size_t* counts, int nranks) {
  size_t n = 0;
  if (counts) {
    for (int j = 0; j < nranks; ++j) n += counts[j];
  }
  return n;
}

}  // namespace

Combine combine_of(RedOp op) {
  return op == RedOp::Sum ? Combine::Sum : op == RedOp::Avg ? Combine::Mean : Combine::Select;
}

Collective all_reduce_desc(const void* send, void* recv, size_t count, RedOp op) {
  Collective c;
  c.coll = Coll::AllReduce;
  c.send = send;
  c.recv = recv;
  c.count = c.in_count = c.out_count = c.message = c.split = count;
  c.reduces = true;
  c.op = op;
  c.how = combine_of(op);
  c.codes_in_place = true;
  c.schedule = all_reduce_schedule;
  c.hier = hier_all_reduce_schedule;
  c.latency = algorithms::one_hop_all_reduce();
  c.latency_wide = algorithms::two_hop_all_reduce();
  c.direct = direct_all_reduce();
  return c;
}

Collective reduce_scatter_desc(const void* send, void* recv, size_t recv_count, RedOp op, int nranks) {
  Collective c;
  c.coll = Coll::ReduceScatter;
  c.send = send;
  c.recv = recv;
  c.count = c.out_count = c.split = recv_count;
  c.in_count = c.message = recv_count * size_t(nranks);
  c.reduces = true;
  c.op = op;
  c.how = combine_of(op);
  c.schedule = reduce_scatter_schedule;
  c.hier = hier_reduce_scatter_schedule;
  c.latency = algorithms::one_hop_reduce_scatter();
  c.direct = direct_reduce_scatter();
  return c;
}

Collective all_gather_desc(const void* send, void* recv, size_t send_count, int nranks) {
  Collective c;
  c.coll = Coll::AllGather;
  c.send = send;
  c.recv = recv;
  c.count = c.in_count = c.split = send_count;
  c.out_count = c.message = send_count * size_t(nranks);
  c.schedule = all_gather_schedule;
  c.hier = hier_all_gather_schedule;
  c.latency = algorithms::one_hop_all_gather();
  c.direct = direct_all_gather();
  return c;
}

Collective broadcast_desc(void* buf, size_t count, int root, int rank) {
  Collective c;
  c.coll = Coll::Broadcast;
  c.send = buf;
  c.recv = buf;
  c.count = c.in_count = c.out_count = c.message = c.split = count;
  c.root = root;
  c.input_here = rank == root;
  c.codes_in_place = true;
  c.schedule = broadcast_schedule;
  c.hier = hier_broadcast_schedule;
  c.latency = algorithms::one_hop_broadcast();
  c.direct = direct_broadcast();
  return c;
}

Collective send_desc(const void* buf, size_t count, int rank, int peer) {
  Collective c;
  c.coll = Coll::Send;
  c.send = buf;
  c.recv = const_cast<void*>(buf);  // not written: only for the null-buffer check
  c.count = c.in_count = c.message = count;
  c.root = rank;
  c.peer = peer;
  return c;
}

Collective recv_desc(void* buf, size_t count, int rank, int peer) {
  Collective c;
  c.coll = Coll::Recv;
  c.send = buf;  // not read: only for the null-buffer check
  c.recv = buf;
  c.count = c.out_count = c.message = count;
  c.root = peer;
  c.peer = rank;
  c.input_here = false;
  return c;
}

Collective all_to_all_desc(const void* send, void* recv, size_t count, int rank, int nranks) {
  Collective c;
  c.coll = Coll::AllToAll;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.in_count = c.out_count = c.message = count * size_t(nranks);
  c.peer_schedule = all_to_all_schedule;
  c.send_blocks.each = c.recv_blocks.each = count;
  c.self_count = count;
  c.self_src = c.self_dst = count * size_t(rank);
  return c;
}

Collective all_to_allv_desc(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                            int rank, int nranks) {
  Collective c;
  c.coll = Coll::AllToAllv;
  c.send = send;
  c.recv = recv;
  c.send_counts = send_counts;
  c.recv_counts = recv_counts;
  c.in_count = c.count = total(send_counts, nranks);
  c.out_count = total(recv_counts, nranks);
  c.message = c.in_count;  // until the counts round gives every rank's
  c.peer_schedule = all_to_all_schedule;
  c.send_blocks.counts = send_counts;
  c.recv_blocks.counts = recv_counts;
  if (send_counts && recv_counts) {
    // The counts round requires send_counts[rank] == recv_counts[rank].
    c.self_count = send_counts[rank];
    c.self_src = c.send_blocks.offset(rank);
    c.self_dst = c.recv_blocks.offset(rank);
  }
  return c;
}

Collective reduce_desc(const void* send, void* recv, size_t count, RedOp op, int root, int rank) {
  Collective c;
  c.coll = Coll::Reduce;
  c.send = send;
  c.recv = recv;
  c.count = c.in_count = c.message = c.split = count;
  c.out_count = rank == root ? count : 0;
  c.reduces = true;
  c.op = op;
  c.how = combine_of(op);
  c.root = root;
  c.schedule = reduce_schedule;
  c.latency = algorithms::one_hop_reduce();
  return c;
}

Collective gather_desc(const void* send, void* recv, size_t send_count, int root, int rank, int nranks) {
  Collective c;
  c.coll = Coll::Gather;
  c.send = send;
  c.recv = recv;
  c.count = c.in_count = send_count;
  c.message = send_count * size_t(nranks);
  c.out_count = rank == root ? c.message : 0;
  c.root = root;
  c.peer_schedule = gather_schedule;
  c.send_blocks.each = c.recv_blocks.each = send_count;
  if (rank == root) {
    c.self_count = send_count;
    c.self_dst = send_count * size_t(rank);
  }
  return c;
}

Collective scatter_desc(const void* send, void* recv, size_t recv_count, int root, int rank, int nranks) {
  Collective c;
  c.coll = Coll::Scatter;
  c.send = send;
  c.recv = recv;
  c.count = c.out_count = recv_count;
  c.message = recv_count * size_t(nranks);
  c.in_count = rank == root ? c.message : 0;
  c.root = root;
  c.input_here = rank == root;
  c.peer_schedule = scatter_schedule;
  c.send_blocks.each = c.recv_blocks.each = recv_count;
  if (rank == root) {
    c.self_count = recv_count;
    c.self_src = recv_count * size_t(rank);
  }
  return c;
}

}  // namespace ncclz::core
