// Schedules over the point-to-point links (see pairwise.hpp; docs/ALGORITHMS.md
// has the same text).
#include "algorithms/pairwise.hpp"

#include <algorithm>
#include <cstdint>

namespace ncclz::algorithms {
namespace {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline const uint8_t* at(const void* p, size_t elem, size_t es) { return static_cast<const uint8_t*>(p) + elem * es; }
inline uint8_t* at(void* p, size_t elem, size_t es) { return static_cast<uint8_t*>(p) + elem * es; }

// One step of a pairwise exchange: n_out elements from src go out on p's send
// connection while n_in elements arrive on its receive connection into dst,
// one slice at a time in turn (send a slice, receive a slice, ...; the longer
// side finishes alone). Both ends of each link cut the same slices from the
// same count. Alternating is what keeps a step deadlock-free with blocks of
// any size: a rank blocked sending to r+k waits for r+k to receive, and r+k,
// if it is blocked too, is blocked sending to r+2k with at most one slice more
// sent than received; around the cycle of the step's links that would need
// more slots in flight than the K >= 2 slots of each link hold (the argument
// of docs/ALGORITHMS.md, "Deadlock freedom").
void exchange(prims::Prims& p, const uint8_t* src, size_t n_out, uint8_t* dst, size_t n_in) {
  const size_t slice = p.slice_elems(), es = p.esize();
  size_t o = 0, i = 0;
  while (o < n_out || i < n_in) {
    if (o < n_out) {
      const size_t n = std::min(slice, n_out - o);
      p.send(src + o * es, n);
      o += n;
    }
    if (i < n_in) {
      const size_t n = std::min(slice, n_in - i);
      p.recv(dst + i * es, n);
      i += n;
    }
  }
}

}  // namespace

size_t Blocks::offset(int j) const {
  if (!counts) return size_t(j) * each;
  size_t o = 0;
  for (int i = 0; i < j; ++i) o += counts[i];
  return o;
}

// All-to-all by pairwise exchange (one lane).
//
// N-1 steps; in step k (k = 1..N-1) rank r sends its block for rank r+k
// straight to r+k and receives rank (r-k)'s block for it straight from r-k
// (indices mod N), the two directions interleaved slice by slice (exchange()
// above). Every rank runs the same step at the same time in the same
// direction, so each link of a step carries one block and the step's links
// form cycles r -> r+k -> r+2k -> ...: every rank sends and receives at once,
// with no rank's link idle while another's is busy (with blocks of equal size).
// Each block crosses one link: a rank sends (N-1)/N of its input and receives
// (N-1)/N of its output, the least any schedule can, over its own links only.
// Lossless and lossy blocks are encoded once by their owner (send) and decoded
// once by their receiver (recv); nobody relays anything. Uneven blocks
// (all_to_allv) and empty ones take the same steps; a step whose blocks are
// both empty sends nothing.
//
// Steps on different lanes run concurrently over different links; on one lane
// they run in increasing k. A lane that reached step k' > k while rank r+k'
// still works on an earlier step only fills that link's slots; the ranks on
// the lowest step anywhere depend only on each other (their partners in that
// step are on it too or have finished it), and within a step the exchange
// cannot deadlock, so the call always progresses.
void pairwise_all_to_all(PeerPrims& links, Lane l, const void* src, Blocks send, void* dst, Blocks recv) {
  const int N = l.nranks, r = l.rank;
  for (int k = 1 + l.lane; k < N; k += l.lanes) {
    const int to = mod(r + k, N), from = mod(r - k, N);
    const size_t n_out = send.count(to), n_in = recv.count(from);
    if (n_out == 0 && n_in == 0) continue;
    prims::Prims p = links.link(n_out ? to : -1, n_in ? from : -1);
    const size_t es = p.esize();
    exchange(p, at(src, send.offset(to), es), n_out, at(dst, recv.offset(from), es), n_in);
  }
}

// Gather to the root (one lane).
//
// Step k (k = 1..N-1) is the pair root+k -> root: rank root+k sends its block
// on its direct link to the root, which receives it into block root+k of its
// output. The non-root ranks each have one step (on lane (k-1) % lanes); the
// root runs all N-1, its lanes in parallel. Each block is encoded once by its
// owner and decoded once by the root. The root's incoming bytes, (N-1)/N of
// its output, bound every gather; no block crosses a second link. The root's
// own block is the caller's copy.
void direct_gather(PeerPrims& links, Lane l, int root, const void* src, size_t count, void* dst) {
  const int N = l.nranks;
  if (count == 0) return;
  for (int k = 1 + l.lane; k < N; k += l.lanes) {
    const int peer = mod(root + k, N);
    if (l.rank == root) {
      prims::Prims p = links.link(-1, peer);
      p.recv(at(dst, size_t(peer) * count, p.esize()), count);
    } else if (l.rank == peer) {
      prims::Prims p = links.link(root, -1);
      p.send(src, count);
    }
  }
}

// Scatter from the root (one lane).
//
// Step k (k = 1..N-1) is the pair root -> root+k: the root sends block root+k
// of its input on its direct link to rank root+k, which receives it into its
// output. The mirror of the gather: the root's lanes encode in parallel, each
// block encoded once by the root and decoded once by its rank.
void direct_scatter(PeerPrims& links, Lane l, int root, const void* src, void* dst, size_t count) {
  const int N = l.nranks;
  if (count == 0) return;
  for (int k = 1 + l.lane; k < N; k += l.lanes) {
    const int peer = mod(root + k, N);
    if (l.rank == root) {
      prims::Prims p = links.link(peer, -1);
      p.send(at(src, size_t(peer) * count, p.esize()), count);
    } else if (l.rank == peer) {
      prims::Prims p = links.link(-1, root);
      p.recv(dst, count);
    }
  }
}

}  // namespace ncclz::algorithms
