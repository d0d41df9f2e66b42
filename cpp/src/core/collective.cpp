// The collective descriptions and their schedules (see collective.hpp; the
// schedules themselves are algorithms/ring.hpp and algorithms/hierarchical.hpp).
#include "core/collective.hpp"

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
  algorithms::hier_all_reduce(intra, inter, c.pos, c.src, c.dst, c.mid, c.count, c.seg_intra, c.seg_inter);
}

void hier_reduce_scatter_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  algorithms::hier_reduce_scatter(intra, inter, c.pos, c.src, c.stride, c.work, c.mid, c.mid_out, c.count, c.seg_intra,
                                  c.seg_inter);
}

void hier_all_gather_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  algorithms::hier_all_gather(intra, inter, c.pos, c.src, c.dst, c.stride, c.count, c.seg_intra, c.seg_inter);
}

void hier_broadcast_schedule(prims::Prims& intra, prims::Prims& inter, const HierPart& c) {
  algorithms::hier_broadcast(intra, inter, c.pos, c.root, c.dst, c.count, c.seg_inter);
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

}  // namespace ncclz::core
