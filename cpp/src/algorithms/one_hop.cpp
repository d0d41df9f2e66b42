// One-hop schedules (see one_hop.hpp; docs/ALGORITHMS.md, "The latency
// algorithm").
#include "algorithms/one_hop.hpp"

#include <algorithm>
#include <cstring>

namespace ncclz::algorithms {
namespace {

constexpr size_t kBlockBytes = 4096;  // reductions: the sum so far stays in L1

size_t bytes_of(const OneHopPart& p) { return p.count * p.esize; }

bool overlaps(const uint8_t* a, const uint8_t* b, size_t n) { return n && a < b + n && b < a + n; }

// dst = x_0 op x_1 op ... op x_{N-1} in rank order (one_hop.hpp), n
// elements: `own` is this rank's x_r, in[j] the others' (their bytes start at
// the block to reduce). An own input that overlaps dst (in place) is copied
// aside first: dst holds partial sums before x_r is read. (Ranks 0 and 1 read
// their own x first, element by element, so own == dst is safe for them.)
void reduce_in_rank_order(const OneHopPart& p, const uint8_t* own, const Bytes* in, uint8_t* dst, size_t n) {
  const size_t b = n * p.esize;
  if (n == 0) return;
  if (overlaps(own, dst, b) && !(own == dst && p.rank < 2)) {
    std::memcpy(p.scratch, own, b);
    own = p.scratch;
  }
  auto x = [&](int j) { return j == p.rank ? own : in[j].data; };
  if (p.nranks == 1) {
    if (dst != own) std::memcpy(dst, own, b);
    return;
  }
  // x_1 op x_0 first, then each x_j into the sum so far; a block of elements
  // at a time, so that the sum so far stays in L1 while every input passes
  // (each element still sees the same operations in the same order).
  const size_t block = std::max<size_t>(1, kBlockBytes / p.esize);
  for (size_t o = 0; o < n; o += block) {
    const size_t m = std::min(block, n - o), at = o * p.esize;
    uint8_t* acc = dst + at;
    p.reduce(acc, x(1) + at, x(0) + at, m);
    for (int j = 2; j < p.nranks; ++j) p.reduce(acc, x(j) + at, acc, m);
  }
}

Bytes whole_input(const OneHopPart& p, int) { return {p.src, bytes_of(p)}; }

void all_reduce_combine(const OneHopPart& p, const Bytes* in) { reduce_in_rank_order(p, p.src, in, p.dst, p.count); }

// Two hops: block q of the message is [count*q/N, count*(q+1)/N), piece k
// of its m elements [m*k/P, m*(k+1)/P) (one_hop.hpp).
size_t block_begin(const OneHopPart& p, int q) { return p.count * size_t(q) / size_t(p.nranks); }
size_t block_elems(const OneHopPart& p, int q) { return block_begin(p, q + 1) - block_begin(p, q); }
// Elements [first, first + n) of piece k of block q.
void piece_range(const OneHopPart& p, int q, size_t k, size_t* first, size_t* n) {
  const size_t m = block_elems(p, q), P = two_hop_pieces(p, q);
  const size_t a = m * k / P, b = m * (k + 1) / P;
  *first = block_begin(p, q) + a;
  *n = b - a;
}

Bytes input_block(const OneHopPart& p, int peer) { return two_hop_piece(p, p.src, peer, 0); }

void reduce_own_block(const OneHopPart& p, const Bytes* in) { two_hop_reduce(p, in, 0); }

Bytes own_result(const OneHopPart& p, int) { return two_hop_piece(p, p.dst, p.rank, 0); }

Bytes block_for(const OneHopPart& p, int peer) { return {p.src + size_t(peer) * bytes_of(p), bytes_of(p)}; }

void reduce_scatter_combine(const OneHopPart& p, const Bytes* in) {
  reduce_in_rank_order(p, p.src + size_t(p.rank) * bytes_of(p), in, p.dst, p.count);
}

Bytes input_to_root(const OneHopPart& p, int peer) { return peer == p.root ? whole_input(p, peer) : Bytes{}; }

void reduce_combine(const OneHopPart& p, const Bytes* in) {
  if (p.rank == p.root) reduce_in_rank_order(p, p.src, in, p.dst, p.count);
}

void all_gather_combine(const OneHopPart& p, const Bytes* in) {
  const size_t b = bytes_of(p);
  if (b == 0) return;
  for (int j = 0; j < p.nranks; ++j) {
    uint8_t* to = p.dst + size_t(j) * b;
    if (j != p.rank) {
      std::memcpy(to, in[j].data, b);
    } else if (to != p.src) {
      std::memmove(to, p.src, b);  // in place (src is block rank of dst): nothing to do
    }
  }
}

Bytes from_root(const OneHopPart& p, int peer) { return p.rank == p.root ? whole_input(p, peer) : Bytes{}; }

void broadcast_combine(const OneHopPart& p, const Bytes* in) {
  if (p.rank != p.root && bytes_of(p)) std::memcpy(p.dst, in[p.root].data, bytes_of(p));
}

}  // namespace

size_t two_hop_pieces(const OneHopPart& p, int q) {
  const size_t m = block_elems(p, q), per = p.piece_bytes / p.esize;
  if (p.piece_bytes == 0 || m <= per) return 1;
  return (m + per - 1) / per;  // so that no piece has more than `per` elements
}

Bytes two_hop_piece(const OneHopPart& p, const uint8_t* base, int q, size_t k) {
  size_t first = 0, n = 0;
  piece_range(p, q, k, &first, &n);
  return {base + first * p.esize, n * p.esize};
}

Bytes two_hop_block(const OneHopPart& p, const uint8_t* base, int q) {
  return {base + block_begin(p, q) * p.esize, block_elems(p, q) * p.esize};
}

void two_hop_reduce(const OneHopPart& p, const Bytes* in, size_t k) {
  size_t first = 0, n = 0;
  piece_range(p, p.rank, k, &first, &n);
  reduce_in_rank_order(p, p.src + first * p.esize, in, p.dst + first * p.esize, n);
}

OneHop one_hop_all_reduce() { return {whole_input, all_reduce_combine, nullptr}; }
OneHop two_hop_all_reduce() { return {input_block, reduce_own_block, own_result}; }
OneHop one_hop_reduce_scatter() { return {block_for, reduce_scatter_combine, nullptr}; }
OneHop one_hop_reduce() { return {input_to_root, reduce_combine, nullptr}; }
OneHop one_hop_all_gather() { return {whole_input, all_gather_combine, nullptr}; }
OneHop one_hop_broadcast() { return {from_root, broadcast_combine, nullptr}; }

size_t expected_bytes(const OneHop& s, const OneHopPart& part, int from, bool second) {
  OneHopPart theirs = part;
  theirs.rank = from;
  return (second ? s.again : s.send)(theirs, part.rank).size;
}

}  // namespace ncclz::algorithms
