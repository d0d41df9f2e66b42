// The direct schedules (see direct_schedule.hpp): which peer buffers each
// rank reads and writes, and in what order it reduces.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/direct_schedule.hpp"
#include "transport/peer_memory.hpp"

namespace ncclz::core {
namespace {

using algorithms::Bytes;
using algorithms::OneHopPart;

constexpr size_t kL1Bytes = 4096;  // reductions: the sum so far stays in L1 while every operand passes

bool everyone(const OneHopPart&, int, int) { return true; }

// all_reduce: two_hop_all_reduce's schedule and bits (algorithms/one_hop.hpp).
// Owner r reads each peer's piece of block r into a scratch that stays in
// cache while it is reduced (piece j: rank j's; piece r: its own, kept aside
// where the reduction needs it, in place), and writes the reduced piece,
// still in cache, into every peer's output. In place is safe: block q of any
// rank's buffer is read by its owner q alone, which overwrites a piece of it
// with the result only after it has read that piece; a rank's own block is
// written by it alone.
uint64_t all_reduce_copies(const OneHopPart& given, const DirectPeers& peers, Buffer& scratch) {
  const int N = given.nranks, r = given.rank;
  OneHopPart part = given;
  auto* pieces = static_cast<uint8_t*>(scratch.get(size_t(N) * part.piece_bytes));
  part.scratch = pieces + size_t(r) * part.piece_bytes;
  std::vector<Bytes> in(static_cast<size_t>(N));
  uint64_t moved = 0;
  const size_t own = algorithms::two_hop_pieces(part, r);
  for (size_t k = 0; k < own; ++k) {
    const Bytes mine = algorithms::two_hop_piece(part, part.src, r, k);
    const size_t at = size_t(mine.data - part.src);
    for (int j = 0; j < N; ++j) {
      if (j == r) continue;
      uint8_t* to = pieces + size_t(j) * part.piece_bytes;
      peers.mem->read(j, peers.src[size_t(j)] + at, to, mine.size);
      in[size_t(j)] = {to, mine.size};
    }
    algorithms::two_hop_reduce(part, in.data(), k);
    const Bytes result = algorithms::two_hop_piece(part, part.dst, r, k);
    for (int i = 1; i < N; ++i) {
      const int j = (r + i) % N;  // each peer first for a different owner
      peers.mem->write(j, peers.dst[size_t(j)] + (result.data - part.dst), result.data, result.size);
    }
    moved += 2 * uint64_t(N - 1) * mine.size;
  }
  return moved;
}

// The pieces' size in whole elements (at least one).
size_t piece_of(const OneHopPart& p) { return std::max<size_t>(1, p.piece_bytes / p.esize) * p.esize; }

// reduce_scatter: rank r's block (count elements) of every peer's input, a
// piece at a time: rank r+i's piece read into slot i-1 of the scratch, then
// reduced in the ring's order (direct_schedule.hpp) with this rank's own
// value last, straight into the output. In place (the output is block r of
// the input) the last reduction reads and writes the same element, as the
// ring's last step does; no peer reads block r of this rank's input.
uint64_t reduce_scatter_copies(const OneHopPart& p, const DirectPeers& peers, Buffer& scratch) {
  const int N = p.nranks, r = p.rank;
  const size_t block = p.count * p.esize, per = piece_of(p);
  auto* slots = static_cast<uint8_t*>(scratch.get(size_t(N - 1) * per));
  const uint8_t* own = p.src + size_t(r) * block;
  const size_t sub = std::max<size_t>(1, kL1Bytes / p.esize) * p.esize;
  uint64_t moved = 0;
  for (size_t at = 0; at < block; at += per) {
    const size_t n = std::min(per, block - at);
    for (int i = 1; i < N; ++i) {
      const int j = (r + i) % N;
      peers.mem->read(j, peers.src[size_t(j)] + size_t(r) * block + at, slots + size_t(i - 1) * per, n);
    }
    for (size_t o = 0; o < n; o += sub) {
      const size_t m = std::min(sub, n - o);
      uint8_t* acc = slots + o;  // x_{r+1}, then the sum so far
      for (int i = 2; i < N; ++i) p.reduce(acc, acc, slots + size_t(i - 1) * per + o, m / p.esize);
      p.reduce(p.dst + at + o, acc, own + at + o, m / p.esize);
    }
    moved += uint64_t(N - 1) * n;
  }
  return moved;
}

// all_gather: block j of the output is rank j's input: each rank reads its
// peers' inputs into its own output, starting with rank r+1 (each peer first
// for a different rank). Writing its input into every peer's output instead
// was as fast within the noise (4 ranks, 256 KiB to 64 MiB; bench/results/
// latency.md, "Direct reduce_scatter, all_gather and broadcast"); reading
// keeps every write local and matches the other schedules. In place (the
// input is block r of the output) nobody writes block r but its owner,
// which copies nothing there.
uint64_t all_gather_copies(const OneHopPart& p, const DirectPeers& peers, Buffer&) {
  const int N = p.nranks, r = p.rank;
  const size_t block = p.count * p.esize;
  if (block == 0) return 0;
  for (int i = 1; i < N; ++i) {
    const int j = (r + i) % N;
    peers.mem->read(j, peers.src[size_t(j)], p.dst + size_t(j) * block, block);
  }
  uint8_t* mine = p.dst + size_t(r) * block;
  if (mine != p.src) std::memmove(mine, p.src, block);
  return uint64_t(N - 1) * block;
}

// broadcast: every rank but the root reads the root's buffer into its own.
uint64_t broadcast_copies(const OneHopPart& p, const DirectPeers& peers, Buffer&) {
  const size_t bytes = p.count * p.esize;
  if (p.rank == p.root || bytes == 0) return 0;
  peers.mem->read(p.root, peers.src[size_t(p.root)], p.dst, bytes);
  return bytes;
}

// Only the root's buffer is read by anyone.
bool root_waits(const OneHopPart& p, int waiter, int) { return waiter == p.root; }

}  // namespace

DirectSchedule direct_all_reduce() { return {all_reduce_copies, everyone}; }
DirectSchedule direct_reduce_scatter() { return {reduce_scatter_copies, everyone}; }
DirectSchedule direct_all_gather() { return {all_gather_copies, everyone}; }
DirectSchedule direct_broadcast() { return {broadcast_copies, root_waits}; }

}  // namespace ncclz::core
