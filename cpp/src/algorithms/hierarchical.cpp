// Hierarchical schedules (see hierarchical.hpp; docs/ALGORITHMS.md has the
// same text). N = H*L ranks: rank (h, l) is local rank l of host h. Two rings
// per channel: the intra-host ring of the L ranks of host h (local rank order)
// and the inter-host ring of the H ranks (., l) (host order). Each phase below
// is a ring schedule of ring.cpp over one of them, with blocks that may have
// different lengths and need not be contiguous: block j is [off(j), off(j) +
// len(j)) and both ends of every link compute the same ranges, so a piece that
// is empty on one end is empty on the other (the prims then do nothing).
//
// Deadlock freedom: every phase is a ring schedule (a rank sends at most one
// piece of <= K/2 slices before it receives; docs/ALGORITHMS.md), the phases
// of a channel run in the same order on every rank, and the two rings use
// connections of their own. A rank waits in a phase only on ranks that take
// part in it; each of those reaches it, since what it waits on in earlier
// phases was posted by ranks that left those phases (a rank leaves a phase
// only once all its sends of that phase are in slots). So every phase ends.
#include "algorithms/hierarchical.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>

namespace ncclz::algorithms {
namespace {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline const uint8_t* at(const void* p, size_t elem, size_t es) { return static_cast<const uint8_t*>(p) + elem * es; }
inline uint8_t* at(void* p, size_t elem, size_t es) { return static_cast<uint8_t*>(p) + elem * es; }

// Ring reduce-scatter over blocks of any length and place (ring_reduce_scatter
// of ring.cpp, with block j at src[off(j)], len(j) elements): this rank's
// block, reduced over the ring, goes to dst. In loops of seg elements of every
// block, rank r: send (block r-1), recvReduceSend (block r-j, j = 2..N-1),
// recvReduceCopy (block r) -> dst.
template <class Off, class Len>
void reduce_scatter_blocks(prims::Prims& p, RingPos pos, const void* src, Off off, Len len, void* dst, size_t seg) {
  const int N = pos.nranks, r = pos.rank;
  const size_t es = p.esize();
  if (N == 1) {
    if (len(r) && dst != at(src, off(r), es)) std::memmove(dst, at(src, off(r), es), len(r) * es);
    return;
  }
  size_t longest = 0;
  for (int j = 0; j < N; ++j) longest = std::max(longest, len(j));
  for (size_t base = 0; base < longest; base += seg) {
    auto n = [&](int j) { return base < len(j) ? std::min(seg, len(j) - base) : size_t(0); };
    auto in = [&](int j) { return at(src, off(j) + base, es); };
    int j = mod(r - 1, N);
    p.send(in(j), n(j));
    for (int k = 2; k < N; ++k) {
      j = mod(r - k, N);
      p.recvReduceSend(in(j), n(j));
    }
    p.recvReduceCopy(in(r), at(dst, base, es), n(r));
  }
}

// Ring all-gather over blocks of any length and place (ring_all_gather of
// ring.cpp): `own` (len(r) elements) goes to dst[off(r)] of every rank. In
// loops of seg elements: copySend (own -> block r), recvCopySend (block r-j,
// j = 1..N-2: forwarded unchanged, decoded once), recv (block r+1).
// `between`, if given, runs once: after the first copySend, or at once where
// nothing is sent.
template <class Off, class Len>
void all_gather_blocks(prims::Prims& p, RingPos pos, const void* own, void* dst, Off off, Len len, size_t seg,
                       const std::function<void()>& between = nullptr) {
  const int N = pos.nranks, r = pos.rank;
  const size_t es = p.esize();
  size_t longest = 0;
  for (int j = 0; j < N; ++j) longest = std::max(longest, len(j));
  if (N == 1 || longest == 0) {
    if (between) between();
    if (N == 1 && len(r) && own != at(dst, off(r), es)) std::memmove(at(dst, off(r), es), own, len(r) * es);
    return;
  }
  for (size_t base = 0; base < longest; base += seg) {
    auto n = [&](int j) { return base < len(j) ? std::min(seg, len(j) - base) : size_t(0); };
    auto out = [&](int j) { return at(dst, off(j) + base, es); };
    p.copySend(at(own, base, es), out(r), n(r));
    if (between && base == 0) between();
    for (int k = 1; k < N - 1; ++k) {
      const int j = mod(r - k, N);
      p.recvCopySend(out(j), n(j));
    }
    const int j = mod(r + 1, N);
    p.recv(out(j), n(j));
  }
}

// The pieces of a round: elements [base, base + piece) of every block (off,
// len), clipped to the block (empty where the block is shorter).
template <class Off, class Len>
struct Round {
  Off off;
  Len len;
  size_t base, piece;
  size_t at(int j) const { return off(j) + base; }
  size_t n(int j) const { return base < len(j) ? std::min(piece, len(j) - base) : size_t(0); }
  /// at and n as the blocks' offsets and lengths of the ring schedules above.
  auto offsets() const {
    return [this](int j) { return at(j); };
  }
  auto lengths() const {
    return [this](int j) { return n(j); };
  }
};

}  // namespace

bool hier_all_reduce_in_rounds(const HierPos& pos, const prims::Prims& inter) {
  return pos.nhosts == 2 && pos.nlocal > 1 && pair_exchange_pays(inter);
}

// Hierarchical all-reduce in rounds (two hosts exchanging codes; see
// hier_all_reduce below for the phases). Each block is cut into pieces of one
// inter-host slice (the same cut on every rank: the slice size is the call's),
// piece i of every block making round i. Rank (h, l), round i:
//
//   A(i)   intra reduce-scatter of round i: piece i of block l of the host's
//          sum -> dst                                     (exact, raw slots)
//   S(i)   send piece i of block l to the other host      (its codes; a lossy
//          call's stage quantizes the host sum as it reads it)
//   R(i-1) receive the other host's piece i-1 and add it  (the exchange; the
//          stage dequantizes the final piece into dst)
//   C(i-1) intra all-gather of round i-1                  (raw slots)
//
// then R and C of the last round. So while piece i crosses the network, this
// rank reduces round i+1 and distributes round i-1 inside the host: the
// intra-host phases hide behind the link instead of adding to it (NCCL's
// pipelining of a node's reduction with the network). The slots and result
// bits are the phases' (pair_all_reduce's pieces and slices, the same
// element-wise reductions in the same order).
//
// Deadlock freedom: each ring's operations are in the same order on every
// rank that uses it (the intra ring: A(0), A(1), C(0), A(2), C(1), ...; the
// inter pair: pair_all_reduce's, piece i+1 sent before piece i is received,
// at most two pieces of one slice in flight). A rank waits in A(i) or C(i-1)
// on its host's ranks in the same operation, in R(i-1) on S(i-1) of the other
// host, which that rank posted before anything it does after it; every wait
// is on an operation no later in this order than the waiter's, so the
// earliest unfinished one can always proceed.
//
// A device rank (q) quantizes and dequantizes its pieces on its stream as
// they go, with the same rounds as a host rank: ranks of both kinds may share
// a host.
void hier_all_reduce_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            void* mid, size_t count, size_t seg_intra, HostSumCodes* q) {
  const int L = pos.nlocal, l = pos.local;
  const size_t es = intra.esize(), ms = inter.esize();
  auto off = [&](int j) { return count * size_t(j) / size_t(L); };
  auto len = [&](int j) { return off(j + 1) - off(j); };
  const size_t piece = inter.slice_elems();
  const size_t longest = len(L - 1);  // blocks differ by at most one element, the last the longest
  using R = Round<decltype(off), decltype(len)>;
  auto gather = [&](const R& r) {
    const auto o = r.offsets();
    const auto n = r.lengths();
    if (q && n(l)) q->dequantize(inter.channel(), at(mid, o(l), ms), at(dst, o(l), es), n(l));
    all_gather_blocks(intra, pos.intra(), at(dst, o(l), es), dst, o, n, seg_intra);
  };
  size_t prev = 0;
  bool pending = false;
  for (size_t base = 0; base < longest; base += piece) {
    const R r{off, len, base, piece};
    const auto o = r.offsets();
    const auto n = r.lengths();
    reduce_scatter_blocks(intra, pos.intra(), src, o, n, at(dst, o(l), es), seg_intra);
    if (q && n(l)) q->quantize(intra.channel(), at(dst, o(l), es), at(mid, o(l), ms), n(l));
    inter.send(at(mid, o(l), ms), n(l));
    if (pending) {
      const R p{off, len, prev, piece};
      inter.recvReduceCopy(at(mid, p.at(l), ms), at(mid, p.at(l), ms), p.n(l));
      gather(p);
    }
    prev = base;
    pending = true;
  }
  if (pending) {
    const R p{off, len, prev, piece};
    inter.recvReduceCopy(at(mid, p.at(l), ms), at(mid, p.at(l), ms), p.n(l));
    gather(p);
  }
}

// Hierarchical all-reduce (one channel; count elements, L ranks per host).
//
// The count is cut into L blocks, block j = [count*j/L, count*(j+1)/L): local
// rank l owns block l. Rank (h, l):
//
//   A  intra-host reduce-scatter   block l of the host's sum -> dst   (exact:
//                                  raw slots, reduced in the user type)
//   B  inter-host all-reduce       block l over the H hosts, in place on mid
//                                  (the ring all-reduce of ring.cpp among the
//                                  ranks (., l); the compressed wire: a lossy
//                                  call quantizes the host's sum here, so the
//                                  bound is split among H hosts, not N ranks)
//   C  intra-host all-gather       every block -> dst (raw slots)
//
// Each host sends 2(H-1)/H of the message over its network link (L rings of
// 1/L each), against 2(N-1)/N for the flat ring; 2(L-1) + 2(H-1) ring steps.
// Every rank of a host ends with the bits of the block owners, who all got the
// inter-host ring's bits: outputs are bit-identical on every rank. In place is
// safe: A reads block j of src before any rank writes it (only this rank's
// block l is written in A, after its last read), B and C touch dst only.
void hier_all_reduce_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            void* mid, size_t count, size_t seg_intra, size_t seg_inter, HostSumCodes* q) {
  const int L = pos.nlocal, l = pos.local;
  const size_t es = intra.esize(), ms = inter.esize();
  auto off = [&](int j) { return count * size_t(j) / size_t(L); };
  auto len = [&](int j) { return off(j + 1) - off(j); };
  reduce_scatter_blocks(intra, pos.intra(), src, off, len, at(dst, off(l), es), seg_intra);
  if (q) q->quantize(intra.channel(), at(dst, off(l), es), at(mid, off(l), ms), len(l));
  ring_all_reduce(inter, pos.inter(), at(mid, off(l), ms), at(mid, off(l), ms), len(l), seg_inter);
  if (q) q->dequantize(inter.channel(), at(mid, off(l), ms), at(dst, off(l), es), len(l));
  all_gather_blocks(intra, pos.intra(), at(dst, off(l), es), dst, off, len, seg_intra);
}

// Hierarchical all-reduce in rounds around the inter-host ring (any H, any
// wire; the exchange of two hosts has hier_all_reduce_rounds). A round is one
// loop of the inter-host ring: piece i of every block, H chunks of seg_inter
// elements (the pieces cut from the longest block, clipped to each: every
// rank of a host cuts the same). Rank (h, l):
//
//   A(0)
//   round i: the inter-host all-reduce of piece i of block l, and right after
//            its first send (ring_all_reduce's `between`): C(i-1), A(i+1)
//   C(last)
//
// So the intra-host work of the rounds around round i runs while round i's
// first chunk crosses the network, before the first wait on the previous
// host. The inter ring's operations are ring_all_reduce's loops, one per
// round, in the same order on every rank of the ring; the intra ring's are
// A(0), A(1), C(0), A(2), C(1), ..., the same on every rank of the host
// (`between` runs once per round whatever the rank's piece holds). A wait in
// A(i+1) or C(i-1) is on the host's ranks at the same point of round i, which
// they reach after their first send of it: no cycle, as in the phases. Same
// slots and bits as the phases: their ring cuts block l into the same loops
// (H x seg_inter elements from its start), each chunked alike.
void hier_all_reduce_ring_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                 void* dst, void* mid, size_t count, size_t seg_intra, size_t seg_inter,
                                 HostSumCodes* q) {
  const int L = pos.nlocal, l = pos.local;
  const size_t es = intra.esize(), ms = inter.esize();
  auto off = [&](int j) { return count * size_t(j) / size_t(L); };
  auto len = [&](int j) { return off(j + 1) - off(j); };
  const size_t piece = seg_inter * size_t(pos.nhosts);
  const size_t longest = len(L - 1);
  using R = Round<decltype(off), decltype(len)>;
  auto reduce = [&](size_t base) {
    const R r{off, len, base, piece};
    const auto o = r.offsets();
    const auto n = r.lengths();
    reduce_scatter_blocks(intra, pos.intra(), src, o, n, at(dst, o(l), es), seg_intra);
    if (q && n(l)) q->quantize(intra.channel(), at(dst, o(l), es), at(mid, o(l), ms), n(l));
  };
  auto gather = [&](size_t base) {
    const R r{off, len, base, piece};
    const auto o = r.offsets();
    const auto n = r.lengths();
    if (q && n(l)) q->dequantize(inter.channel(), at(mid, o(l), ms), at(dst, o(l), es), n(l));
    all_gather_blocks(intra, pos.intra(), at(dst, o(l), es), dst, o, n, seg_intra);
  };
  if (longest == 0) return;
  reduce(0);
  size_t last = 0;
  for (size_t base = 0; base < longest; base += piece) {
    const R r{off, len, base, piece};
    const std::function<void()> between = [&] {
      if (base > 0) gather(base - piece);
      if (base + piece < longest) reduce(base + piece);
    };
    ring_all_reduce(inter, pos.inter(), at(mid, r.at(l), ms), at(mid, r.at(l), ms), r.n(l), seg_inter, between);
    last = base;
  }
  gather(last);
}

void hier_all_reduce(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                     void* mid, size_t count, size_t seg_intra, size_t seg_inter, HostSumCodes* q) {
  if (hier_all_reduce_in_rounds(pos, inter)) {
    hier_all_reduce_rounds(intra, inter, pos, src, dst, mid, count, seg_intra, q);
  } else if (pos.nhosts > 1 && pos.nlocal > 1) {
    hier_all_reduce_ring_rounds(intra, inter, pos, src, dst, mid, count, seg_intra, seg_inter, q);
  } else {
    hier_all_reduce_phases(intra, inter, pos, src, dst, mid, count, seg_intra, seg_inter, q);
  }
}

// Hierarchical reduce-scatter (one channel; block j of the input belongs to
// global rank j, `count` elements of it here, at j*stride).
//
//   A  intra-host reduce-scatter, once per host g = h, h+1, ..., h+H-1: the
//      blocks of the ranks (g, 0..L-1); local rank l keeps the host's sum of
//      block (g, l) in work[g*stride]  (exact, raw slots)
//   B  inter-host reduce-scatter of work among the ranks (., l): rank (h, l)
//      gets block (h, l) summed over all hosts -> mid_out (compressed wire;
//      a lossy call quantizes the hosts' sums here)
//
// Each host sends (H-1)/H of the message over its network link.
void hier_reduce_scatter_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                size_t stride, void* work, void* mid, void* mid_out, size_t count, size_t seg_intra,
                                size_t seg_inter, void* dst, HostSumCodes* q) {
  const int H = pos.nhosts, h = pos.host;
  const size_t es = intra.esize(), ms = inter.esize();
  for (int k = 0; k < H; ++k) {
    const int g = mod(h + k, H);
    auto off = [&](int j) { return size_t(pos.rank(g, j)) * stride; };
    auto len = [&](int) { return count; };
    reduce_scatter_blocks(intra, pos.intra(), src, off, len, at(work, size_t(g) * stride, es), seg_intra);
  }
  if (q) {
    for (int g = 0; g < H; ++g)
      q->quantize(intra.channel(), at(work, size_t(g) * stride, es), at(mid, size_t(g) * stride, ms), count);
  }
  ring_reduce_scatter(inter, pos.inter(), mid, stride, mid_out, count, seg_inter);
  if (q) q->dequantize(inter.channel(), mid_out, dst, count);
}

bool hier_reduce_scatter_in_rounds(const HierPos& pos) { return pos.nhosts == 2 && pos.nlocal > 1; }

// Hierarchical reduce-scatter of two hosts in rounds (see hier_reduce_scatter
// for the phases). The inter-host ring of two sends the other host's block and
// reduces the other host's sum of this rank's block into its own, in slices
// whatever the pieces; here each piece is one slice, piece i of the blocks
// making round i. Rank (h, l), other host o = 1 - h, round i:
//
//   A_o(i)    intra reduce-scatter of piece i of host o's blocks: the host's
//             sum of block (o, l) -> work[o]               (exact, raw slots)
//   S(i)      send it to rank (o, l)                       (quantized as read)
//   A_h(i-1)  intra reduce-scatter of piece i-1 of host h's blocks -> work[h]
//   R(i-1)    receive rank (o, l)'s piece i-1 of block (h, l) and reduce it
//             with work[h]'s into the output           (dequantized as final)
//
// then A_h and R of the last round: while a piece crosses the network, this
// rank reduces the next pieces inside its host. Deadlock freedom as for
// hier_all_reduce_rounds: the intra ring's operations (A_o(0), A_o(1),
// A_h(0), A_o(2), A_h(1), ...) and the inter pair's (a piece sent before the
// one before it is received, at most two pieces of one slice in flight) are in
// the same order on every rank that uses them.
void hier_reduce_scatter_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                size_t stride, void* work, void* mid, void* mid_out, size_t count, size_t seg_intra,
                                void* dst, HostSumCodes* q) {
  const int h = pos.host, o = 1 - h;
  const size_t es = intra.esize(), ms = inter.esize();
  const size_t piece = inter.slice_elems();
  // Piece [base, base + n) of host g's blocks reduced inside the host into
  // work[g] (and quantized into mid[g] by a device rank).
  auto host_sum = [&](int g, size_t base, size_t n) {
    auto off = [&](int j) { return size_t(pos.rank(g, j)) * stride + base; };
    auto len = [&](int) { return n; };
    uint8_t* w = at(work, size_t(g) * stride + base, es);
    reduce_scatter_blocks(intra, pos.intra(), src, off, len, w, seg_intra);
    if (q) q->quantize(intra.channel(), w, at(mid, size_t(g) * stride + base, ms), n);
  };
  auto finish = [&](size_t base, size_t n) {
    host_sum(h, base, n);
    inter.recvReduceCopy(at(mid, size_t(h) * stride + base, ms), at(mid_out, base, ms), n);
    if (q) q->dequantize(inter.channel(), at(mid_out, base, ms), at(dst, base, es), n);
  };
  size_t prev = 0, prev_n = 0;
  for (size_t base = 0; base < count; base += piece) {
    const size_t n = std::min(piece, count - base);
    host_sum(o, base, n);
    inter.send(at(mid, size_t(o) * stride + base, ms), n);
    if (prev_n) finish(prev, prev_n);
    prev = base;
    prev_n = n;
  }
  if (prev_n) finish(prev, prev_n);
}

// Hierarchical reduce-scatter in rounds around the inter-host ring (three or
// more hosts; two have hier_reduce_scatter_rounds). A round is one loop of the
// inter-host ring: piece i (seg_inter elements) of every block. Rank (h, l):
//
//   A(0)     intra reduce-scatter of piece 0 of every host's blocks (the
//            phases' order of hosts: h, h+1, ...) -> work
//   round i: the inter-host reduce-scatter of piece i, and right after its
//            first send (ring_reduce_scatter's `between`): A(i+1)
//
// The same intra operations in the same order on every rank of a host, one
// `between` per round; the same inter loops as the phases' ring (it loops by
// seg_inter from the blocks' start): same slots and bits, deadlock-free as
// hier_all_reduce_ring_rounds.
void hier_reduce_scatter_ring_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src,
                                     size_t stride, void* work, void* mid, void* mid_out, size_t count,
                                     size_t seg_intra, size_t seg_inter, void* dst, HostSumCodes* q) {
  const int H = pos.nhosts, h = pos.host;
  const size_t es = intra.esize(), ms = inter.esize();
  auto reduce = [&](size_t base) {
    const size_t n = std::min(seg_inter, count - base);
    for (int k = 0; k < H; ++k) {
      const int g = mod(h + k, H);
      auto off = [&](int j) { return size_t(pos.rank(g, j)) * stride + base; };
      auto len = [&](int) { return n; };
      uint8_t* w = at(work, size_t(g) * stride + base, es);
      reduce_scatter_blocks(intra, pos.intra(), src, off, len, w, seg_intra);
      if (q) q->quantize(intra.channel(), w, at(mid, size_t(g) * stride + base, ms), n);
    }
  };
  if (count == 0) return;
  reduce(0);
  for (size_t base = 0; base < count; base += seg_inter) {
    const size_t n = std::min(seg_inter, count - base);
    const std::function<void()> between = [&] {
      if (base + seg_inter < count) reduce(base + seg_inter);
    };
    ring_reduce_scatter(inter, pos.inter(), at(mid, base, ms), stride, at(mid_out, base, ms), n, seg_inter, between);
    if (q) q->dequantize(inter.channel(), at(mid_out, base, ms), at(dst, base, es), n);
  }
}

void hier_reduce_scatter(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, size_t stride,
                         void* work, void* mid, void* mid_out, size_t count, size_t seg_intra, size_t seg_inter,
                         void* dst, HostSumCodes* q) {
  if (hier_reduce_scatter_in_rounds(pos)) {
    hier_reduce_scatter_rounds(intra, inter, pos, src, stride, work, mid, mid_out, count, seg_intra, dst, q);
  } else if (pos.nhosts > 1 && pos.nlocal > 1) {
    hier_reduce_scatter_ring_rounds(intra, inter, pos, src, stride, work, mid, mid_out, count, seg_intra, seg_inter,
                                    dst, q);
  } else {
    hier_reduce_scatter_phases(intra, inter, pos, src, stride, work, mid, mid_out, count, seg_intra, seg_inter, dst, q);
  }
}

// Hierarchical all-gather (one channel; rank j's block at j*stride of dst,
// `count` elements of it here).
//
//   A  intra-host all-gather: the blocks of the ranks (h, 0..L-1)
//   B  inter-host all-gather among the ranks (., l): the blocks (0..H-1, l)
//      (compressed wire: each block encoded once by its owner, forwarded as is)
//   C  intra-host all-gather, once per other host g = h+1, ..., h+H-1: the
//      blocks (g, 0..L-1), each from the local rank that got it in B
//
// One element type throughout (the user's, or the codes of a lossy call,
// quantized once by their owner before the call and dequantized after it).
void hier_all_gather_phases(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            size_t stride, size_t count, size_t seg_intra, size_t seg_inter) {
  const int H = pos.nhosts, h = pos.host, l = pos.local;
  const size_t es = intra.esize();
  auto len = [&](int) { return count; };
  auto on_host = [&](int g) { return [&pos, g, stride](int j) { return size_t(pos.rank(g, j)) * stride; }; };
  all_gather_blocks(intra, pos.intra(), src, dst, on_host(h), len, seg_intra);
  auto of_local = [&](int g) { return size_t(pos.rank(g, l)) * stride; };
  all_gather_blocks(inter, pos.inter(), at(dst, of_local(h), es), dst, of_local, len, seg_inter);
  for (int k = 1; k < H; ++k) {
    const int g = mod(h + k, H);
    all_gather_blocks(intra, pos.intra(), at(dst, of_local(g), es), dst, on_host(g), len, seg_intra);
  }
}

// Hierarchical all-gather in rounds (H > 1, L > 1): a round is one loop of the
// inter-host ring, piece i (seg_inter elements) of every block. Rank (h, l):
//
//   A(0)      intra all-gather of piece 0 of the host's blocks (h, 0..L-1)
//   round i:  the inter-host all-gather of piece i of the blocks (., l), and
//             right after its first send (all_gather_blocks' `between`):
//             C(i-1), the intra all-gather of piece i-1 of every other host's
//             blocks, then A(i+1)
//   C(last)
//
// So the intra-host copies hide behind the pieces crossing the network. The
// same intra operations in the same order on every rank of a host, one
// `between` per round, the inter ring's loops the phases' (it loops by
// seg_inter from the blocks' start): same slots and bits, deadlock-free as
// hier_all_reduce_ring_rounds.
void hier_all_gather_rounds(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                            size_t stride, size_t count, size_t seg_intra, size_t seg_inter) {
  const int H = pos.nhosts, h = pos.host, l = pos.local;
  const size_t es = intra.esize();
  auto on_host = [&](int g, size_t base) {
    return [&pos, g, stride, base](int j) { return size_t(pos.rank(g, j)) * stride + base; };
  };
  auto of_local = [&](int g) { return size_t(pos.rank(g, l)) * stride; };
  auto piece = [&](size_t base) { return std::min(seg_inter, count - base); };
  auto gather_host = [&](size_t base) {  // A: this host's blocks, from src
    const size_t n = piece(base);
    all_gather_blocks(intra, pos.intra(), at(src, base, es), dst, on_host(h, base), [n](int) { return n; }, seg_intra);
  };
  auto spread = [&](size_t base) {  // C: every other host's blocks, from the local rank that got each
    const size_t n = piece(base);
    for (int k = 1; k < H; ++k) {
      const int g = mod(h + k, H);
      all_gather_blocks(
          intra, pos.intra(), at(dst, of_local(g) + base, es), dst, on_host(g, base), [n](int) { return n; },
          seg_intra);
    }
  };
  if (count == 0) return;
  gather_host(0);
  size_t last = 0;
  for (size_t base = 0; base < count; base += seg_inter) {
    const size_t n = piece(base);
    const std::function<void()> between = [&] {
      if (base > 0) spread(base - seg_inter);
      if (base + seg_inter < count) gather_host(base + seg_inter);
    };
    auto off = [&](int g) { return of_local(g) + base; };
    all_gather_blocks(
        inter, pos.inter(), at(dst, of_local(h) + base, es), dst, off, [n](int) { return n; }, seg_inter, between);
    last = base;
  }
  spread(last);
}

void hier_all_gather(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, const void* src, void* dst,
                     size_t stride, size_t count, size_t seg_intra, size_t seg_inter) {
  if (pos.nhosts > 1 && pos.nlocal > 1) {
    hier_all_gather_rounds(intra, inter, pos, src, dst, stride, count, seg_intra, seg_inter);
  } else {
    hier_all_gather_phases(intra, inter, pos, src, dst, stride, count, seg_intra, seg_inter);
  }
}

// Hierarchical broadcast (one channel) from root (hr, lr), in place.
//
// Two chains, interleaved round by round (seg elements a round):
//   inter  the ranks (., lr) from host hr on: position k = h - hr (mod H):
//          k == 0 copySend, 0 < k < H-1 recvCopySend, k == H-1 recv
//   intra  on every host, from local rank lr: position k = l - lr (mod L):
//          k == 0 copySend, 0 < k < L-1 recvCopySend, k == L-1 recv
// A rank (h, lr) takes part in both: each round it first passes the round on
// along the inter chain, then starts it down its host's chain. Neither chain
// has a cycle and each has its own connections, so the rounds pipeline
// through both: about (count/slice + H + L) slice times.
void hier_broadcast(prims::Prims& intra, prims::Prims& inter, const HierPos& pos, int root, void* buf, size_t count,
                    size_t seg) {
  const int H = pos.nhosts, L = pos.nlocal;
  int hr = 0, lr = 0;
  for (int g = 0; g < H; ++g) {
    for (int j = 0; j < L; ++j) {
      if (pos.rank(g, j) == root) hr = g, lr = j;
    }
  }
  const size_t es = intra.esize();
  const int ki = mod(pos.host - hr, H), kl = mod(pos.local - lr, L);
  auto chain = [](prims::Prims& p, int k, int n, uint8_t* b, size_t m) {
    if (n == 1 || m == 0) return;
    if (k == 0) {
      p.copySend(b, b, m);
    } else if (k < n - 1) {
      p.recvCopySend(b, m);
    } else {
      p.recv(b, m);
    }
  };
  for (size_t base = 0; base < count; base += seg) {
    const size_t m = std::min(seg, count - base);
    uint8_t* b = at(buf, base, es);
    if (kl == 0) chain(inter, ki, H, b, m);
    chain(intra, kl, L, b, m);
  }
}

}  // namespace ncclz::algorithms
