// Chain reduce (see chain_reduce.hpp).
#include "algorithms/chain_reduce.hpp"

#include <cstring>

namespace ncclz::algorithms {

// Chain reduce to the root (one channel).
//
// The chain follows the ring and ends at the root: root+1 -> root+2 -> ... ->
// root-1 -> root. Rank at chain position k = (rank - root - 1) mod N:
//
//   k == 0       send(src)                 its input starts the partial sum
//   0 < k < N-1  recvReduceSend(src)       partial + own input, pass on
//   k == N-1     recvReduceCopy(src, dst)  the root adds its input last: done
//
// Pipelined slice by slice through the FIFOs like the chain broadcast: a
// slice is reduced and passed on as soon as it arrives, so the time is about
// (count/slice + N - 2) slice times, and every link carries the message once.
// That beats a reduce-scatter followed by a gather to the root on bandwidth
// (the chain's busiest link carries S bytes; reduce-scatter plus gather put
// 2(N-1)/N * S through the root's link) at the cost of N-1 hops of latency,
// which is the broadcast's trade too. In lossy mode the chain adds integer
// codes (exact, as the ring all-reduce does), every partial sum is encoded
// once by the rank that made it and decoded once by the next, and only the
// root dequantizes. Element-wise the sum always starts at root+1 and
// proceeds in chain order (`incoming op local`), whatever the mode, so
// lossless is bit-identical to none. The chain is acyclic: it cannot
// deadlock. On the root src may be dst (in place): each slice is read before
// it is written.
void chain_reduce(prims::Prims& p, RingPos pos, int root, const void* src, void* dst, size_t count) {
  const int N = pos.nranks;
  if (count == 0) return;
  if (N == 1) {
    if (dst != src) std::memmove(dst, src, count * p.esize());
    return;
  }
  const int k = ((pos.rank - root - 1) % N + N) % N;
  if (k == 0) {
    p.send(src, count);
  } else if (k < N - 1) {
    p.recvReduceSend(src, count);
  } else {
    p.recvReduceCopy(src, dst, count);
  }
}

}  // namespace ncclz::algorithms
