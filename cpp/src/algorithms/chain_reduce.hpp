// Reduce to a root along the ring (one channel): a pipelined chain, the
// mirror of chain_broadcast (ring.hpp). The schedule is written down in
// chain_reduce.cpp and docs/ALGORITHMS.md.
#pragma once

#include <cstddef>

#include "algorithms/ring.hpp"
#include "prims/prims.hpp"

namespace ncclz::algorithms {

/// Reduces `count` elements of every rank's src into the root's dst (src and
/// dst may alias on the root; dst is not touched elsewhere).
void chain_reduce(prims::Prims& p, RingPos pos, int root, const void* src, void* dst, size_t count);

}  // namespace ncclz::algorithms
