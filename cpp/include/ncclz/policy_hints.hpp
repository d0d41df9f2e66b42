// Internal: the compression policy's proposal for one call (python/ncclz's
// policy decides it on rank 0). Not part of the stable API: its fields follow
// the policy. The user's request stays in Compression; these hints only ask
// for a cheaper way to honour it.
//
// Only rank 0's hints count: they travel in the call descriptor that every
// call exchanges anyway, so every rank runs the same mode and codec effort
// with no extra message, and ranks may pass different hints (or none).
#pragma once

namespace ncclz {

struct PolicyHints {
  /// Run the call with this lighter mode: int(Compression::Mode::None) or
  /// int(Compression::Mode::Lossless); -1: no proposal, run the requested
  /// mode. Lighter means None < Lossless < lossy, and only a strictly lighter
  /// mode is taken. An exact mode keeps any lossy bound, except where the
  /// plain sum in the element type could exceed it (tiny bounds, non-finite
  /// inputs: bound::exact_keeps_bound): then the lossy call runs as asked,
  /// unless nothing could keep the bound and its exact path would run the
  /// same plain sum (bound::choose_exact: e.g. bfloat16 on 2 ranks).
  int lighter = -1;
  /// The codec effort: the selector's margin for the slow, high-ratio Rans
  /// coder over Block/Raw (codec::EncodeOptions::rans_margin; < 0: the
  /// selector's default; 1: never Rans, Sparse still allowed). A higher margin
  /// trades ratio for codec time where the codec, not the link, is the
  /// bottleneck. The slice headers say what each encoder used, so the result
  /// is the same bits whatever the margin.
  double rans_margin = -1;
  /// The algorithm: int(Algorithm::Ring) or int(Algorithm::Hierarchical);
  /// -1: none proposed (CommConfig::algorithm, NCCLZ_ALGO, else the default:
  /// hierarchical where the topology allows it). A hierarchical proposal
  /// where the topology does not allow it runs the ring. Any algorithm keeps
  /// the requested bound (each has its own error budget); none and lossless
  /// are bit-identical to each other under the same algorithm.
  int algorithm = -1;
};

}  // namespace ncclz
