// Ring schedules (see ring.hpp; docs/ALGORITHMS.md has the same text with
// pictures).
#include "algorithms/ring.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ncclz::algorithms {
namespace {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline const uint8_t* at(const void* p, size_t elem, size_t es) { return static_cast<const uint8_t*>(p) + elem * es; }
inline uint8_t* at(void* p, size_t elem, size_t es) { return static_cast<uint8_t*>(p) + elem * es; }

}  // namespace

size_t ring_segment_elems(size_t slice_elems, int nslots) { return size_t(std::max(1, nslots / 2)) * slice_elems; }

size_t ring_segment_elems(const prims::Prims& p, int nslots) { return ring_segment_elems(p.slice_elems(), nslots); }

// Two ranks exchanging coded integers (pair_all_reduce in ring.hpp).
//
// The ring of two ranks sends chunk r-1 of its own values, then chunk r's sum
// (the all-gather half): half of what each rank sends is a sum of both ranks'
// values. Here each rank sends its own values of every element and adds the
// other's into its output: the same number of elements on the wire, none of
// them a sum. Lossy codes of a sum spread over about twice the range of one
// rank's (correlated inputs such as gradients: one more bit per code; about
// half a bit for independent ones), so the coded bytes shrink (2 hosts x 2
// ranks, the CNN gradients at rel 1e-3: 4.80 -> 4.30 bits per value, ratio
// 6.66 -> 7.44, on the hierarchical call's inter-host wire).
//
// Only for integer elements on a coded wire: integer sums (wrapping), maxima
// and minima do not depend on the operands' order, so both ranks end with the
// same bits, the bits of the ring (a float sum would too, but not a NaN's
// payload, and a raw wire gains nothing).
//
// In pieces of seg elements (at most K/2 slices; one slice where a stage
// quantizes the input as it is read: the Prims then keeps the slice it sent
// for the reduction, Prims::prepared, instead of quantizing it again): piece
// i+1 is sent before piece i is received, so at most two pieces (K slices)
// are in flight in each direction, both ranks send before they receive, and
// neither waits on a slot the other can only free after its own receive (the
// ring's argument, docs/ALGORITHMS.md "Deadlock freedom"). Every piece of the
// input is read twice (sent, then added to), and its output written after
// both reads: safe in place. Both ends cut the same slices whatever their
// pieces (seg is a whole number of slices), so a staged rank and an unstaged
// one (a device rank) meet: each has at most K slices unreceived when it
// sends, which is all the argument needs.
bool pair_exchange_pays(const prims::Prims& p) {
  return p.mode() == prims::WireMode::Coded && (p.type() == codec::ElemType::I32 || p.type() == codec::ElemType::I64);
}

void pair_all_reduce(prims::Prims& p, const void* src, void* dst, size_t count, size_t seg) {
  const size_t es = p.esize();
  const size_t piece = p.staged() ? std::min(seg, p.slice_elems()) : seg;
  size_t prev = 0, prev_n = 0;
  for (size_t base = 0; base < count; base += piece) {
    const size_t n = std::min(piece, count - base);
    p.send(at(src, base, es), n);
    if (prev_n) p.recvReduceCopy(at(src, prev, es), at(dst, prev, es), prev_n);
    prev = base;
    prev_n = n;
  }
  if (prev_n) p.recvReduceCopy(at(src, prev, es), at(dst, prev, es), prev_n);
}

// Ring allreduce (NCCL's ring schedule, one channel).
//
// The channel's `count` elements are processed in loops of N*seg elements
// (seg = ring_segment_elems: a chunk of at most K/2 slices). In a loop whose
// remaining length is `rem`, chunk j (j = 0..N-1) is the range
// [j*c, min((j+1)*c, rem)) with c = ceil(rem/N): the last chunks of the final
// loop may be short or empty, and every rank computes the same ranges, so both
// ends of each connection agree on every slice. Rank r (N ranks, indices mod N):
//
//   send               (chunk r-1)          own input starts its trip
//   recvReduceSend     (chunk r-j), j=2..N-1  partial sum + own input, pass on
//   recvReduceCopySend (chunk r)            chunk r is complete: store, pass on
//   recvCopySend       (chunk r-j), j=1..N-2  allgather: forward unchanged, store
//   recv               (chunk r+1)          the last complete chunk
//
// 2(N-1) sends and receives per loop. The complete chunk is encoded once by its
// owner (recvReduceCopySend) and then travels compressed: each other rank
// forwards the bytes it received and decodes them once into its output. So
// every rank ends with the owner's bits: outputs are bit-identical. Chunk r-1
// is the first one sent: element-wise, the sum over ranks always starts at the
// chunk owner's successor and proceeds in ring order, whatever the mode, so
// lossless is bit-identical to none. In place (src == dst) is safe: a chunk's
// output is written only after its input was last read in the same loop.
void ring_all_reduce(prims::Prims& p, RingPos pos, const void* src, void* dst, size_t count, size_t seg,
                     const std::function<void()>& between) {
  const int N = pos.nranks, r = pos.rank;
  const size_t es = p.esize();
  if (N == 1 || count == 0 || (N == 2 && pair_exchange_pays(p))) {
    if (between) between();
    if (N == 1 && dst != src && count) std::memmove(dst, src, count * es);
    if (N == 2 && count) pair_all_reduce(p, src, dst, count, seg);
    return;
  }
  const size_t loop = seg * size_t(N);
  for (size_t base = 0; base < count; base += loop) {
    const size_t rem = std::min(loop, count - base);
    const size_t c = (rem + size_t(N) - 1) / size_t(N);
    size_t n = 0;
    auto chunk = [&](int j) {  // element offset of chunk j; its length in n
      const size_t o = std::min(size_t(j) * c, rem);
      n = std::min(c, rem - o);
      return base + o;
    };
    size_t o = chunk(mod(r - 1, N));
    p.send(at(src, o, es), n);
    if (between && base == 0) between();
    for (int j = 2; j < N; ++j) {
      o = chunk(mod(r - j, N));
      p.recvReduceSend(at(src, o, es), n);
    }
    o = chunk(r);
    p.recvReduceCopySend(at(src, o, es), at(dst, o, es), n);
    for (int j = 1; j < N - 1; ++j) {
      o = chunk(mod(r - j, N));
      p.recvCopySend(at(dst, o, es), n);
    }
    o = chunk(mod(r + 1, N));
    p.recv(at(dst, o, es), n);
  }
}

// Ring reduce-scatter (one channel).
//
// Block j of the input (j = 0..N-1, at element j*stride) is reduced into rank
// j's output. This channel owns `count` elements of each block (the caller
// offset src and dst to the channel's part). In loops of seg elements, rank r:
//
//   send            (block r-1)           own input starts its trip
//   recvReduceSend  (block r-j), j=2..N-1   partial sum + own input, pass on
//   recvReduceCopy  (block r)             complete: store into the output
//
// N-1 sends and receives per loop; the first burst is one chunk (<= K/2 slices).
void ring_reduce_scatter(prims::Prims& p, RingPos pos, const void* src, size_t stride, void* dst, size_t count,
                         size_t seg, const std::function<void()>& between) {
  const int N = pos.nranks, r = pos.rank;
  const size_t es = p.esize();
  if (N == 1 || count == 0) {
    if (between) between();
    if (dst != src && count) std::memmove(dst, src, count * es);
    return;
  }
  for (size_t base = 0; base < count; base += seg) {
    const size_t n = std::min(seg, count - base);
    p.send(at(src, size_t(mod(r - 1, N)) * stride + base, es), n);
    if (between && base == 0) between();
    for (int j = 2; j < N; ++j) p.recvReduceSend(at(src, size_t(mod(r - j, N)) * stride + base, es), n);
    p.recvReduceCopy(at(src, size_t(r) * stride + base, es), at(dst, base, es), n);
  }
}

// Ring allgather (one channel).
//
// Rank r's input (count elements here) goes to block r of every output (block j
// at element j*stride). In loops of seg elements, rank r:
//
//   copySend      (own input -> block r)  encode once, store own copy
//   recvCopySend  (block r-j), j=1..N-2     forward the bytes unchanged, decode once
//   recv          (block r+1)           the last block arrives
//
// A block is encoded once by its owner and forwarded compressed around the ring.
void ring_all_gather(prims::Prims& p, RingPos pos, const void* src, void* dst, size_t stride, size_t count,
                     size_t seg) {
  const int N = pos.nranks, r = pos.rank;
  const size_t es = p.esize();
  if (N == 1) {
    if (dst != src && count) std::memmove(dst, src, count * es);
    return;
  }
  for (size_t base = 0; base < count; base += seg) {
    const size_t n = std::min(seg, count - base);
    p.copySend(at(src, base, es), at(dst, size_t(r) * stride + base, es), n);
    for (int j = 1; j < N - 1; ++j) p.recvCopySend(at(dst, size_t(mod(r - j, N)) * stride + base, es), n);
    p.recv(at(dst, size_t(mod(r + 1, N)) * stride + base, es), n);
  }
}

// Chain broadcast (one channel).
//
// The chain follows the ring starting at the root: root -> root+1 -> ... ->
// root-1. Rank at chain position k = (rank - root) mod N:
//
//   k == 0       copySend(buf, buf)  encode every slice once
//   0 < k < N-1  recvCopySend(buf)   forward the bytes unchanged, decode once
//   k == N-1     recv(buf)
//
// The root's slices pass through COPY onto themselves: a no-op for plain
// buffers, and where a prims::Stage quantizes the input (lossy mode) the root
// writes its output from the codes it sent, as every other rank does, so all
// ranks end bit-identical. The slot FIFO pipelines the chain: the root runs up
// to K slices ahead, and a slice is forwarded as soon as it arrives, so the
// time is about (count/slice + N - 2) slice times rather than N-1
// whole-message times.
void chain_broadcast(prims::Prims& p, RingPos pos, int root, void* buf, size_t count) {
  const int N = pos.nranks;
  if (N == 1 || count == 0) return;
  const int k = mod(pos.rank - root, N);
  if (k == 0) {
    p.copySend(buf, buf, count);
  } else if (k < N - 1) {
    p.recvCopySend(buf, count);
  } else {
    p.recv(buf, count);
  }
}

}  // namespace ncclz::algorithms
