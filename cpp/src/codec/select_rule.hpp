// The slice selector's decision rule for integer codes, host and device
// (NCCLZ_HD): from per-predictor statistics of a sample of the slice, the
// codec and predictor encode_slice uses (slice.cpp) and the device's
// selecting encode (cuda/select_kernels.cu) uses alike, so that their slices
// are byte-identical. What is sampled and how it is estimated:
//
//  - the sample: every stride-th block of 32 codes, blocks 0, s, 2s, ... of
//    the slice (select_sample_stride: opt.sample_every, raised so that at most
//    opt.max_sample_blocks blocks are taken); a block shorter than 32 at the
//    slice's end counts with its real length;
//  - per predictor that applies (None, Delta1, Delta2; Lorenzo2D/3D where
//    opt.row / opt.plane make them fit), over the sampled blocks' residuals:
//    the Block coder's exact cost in half bytes (block_cost_halfbytes), the
//    histogram of Rans symbols (rans_symbol_of; symbol 0 counts the zeros)
//    and their extra bits, the residuals and the blocks sampled
//    (SampleStats);
//  - estimates for the whole slice: Block = cost scaled by blocks / sampled
//    blocks; Rans = rans_estimate_bytes; Sparse = sparse_estimate_bytes, a
//    candidate only where the sampled zeros reach opt.sparse_min_zeros (or
//    Sparse is forced);
//  - the choice (SelectRule::finish): the smallest fast candidate (Block or
//    Raw) unless Sparse or Rans wins by the margins of EncodeOptions (its
//    comments say which).
//
// The device has no Rans encoder: with opt.allow_rans = false the rule never
// returns Rans (where it would, the best fast candidate instead); everything
// else is unchanged, Sparse included (its test against Rans's estimate
// stays). The device always applies the rule so; the CPU does when asked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/block_frame.hpp"
#include "codec/rans_coder.hpp"
#include "codec/slice.hpp"
#include "codec/slice_frame.hpp"
#include "codec/sparse_coder.hpp"
#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// A (codec, predictor) and its estimated payload bytes.
struct SelectChoice {
  Codec codec = Codec::Raw;
  Predictor predictor = Predictor::None;
  size_t est = 0;
};

/// What the selector gathers from the sampled residuals of one predictor.
/// Trivial (no initializers: the device keeps one in shared memory); zero()
/// it before counting.
struct SampleStats {
  uint64_t block_cost;           ///< sum of block_cost_halfbytes over the sampled blocks
  uint64_t sampled;              ///< residuals sampled
  uint64_t extra_bits;           ///< their Rans extra bits
  uint64_t sampled_blocks;       ///< blocks sampled
  uint32_t hist[kRansAlphabet];  ///< Rans symbols of the sampled residuals
  NCCLZ_HD void zero() {
    block_cost = sampled = extra_bits = sampled_blocks = 0;
    for (uint32_t& h : hist) h = 0;
  }
};

/// Every how many blocks of 32 the selector samples a slice of n values.
NCCLZ_HD size_t select_sample_stride(size_t n, const EncodeOptions& opt) {
  const size_t nblocks = (n + kBlockLen - 1) / kBlockLen;
  size_t every = opt.sample_every > 1 ? opt.sample_every : 1;
  if (opt.max_sample_blocks > 0) {
    const size_t cap = (nblocks + opt.max_sample_blocks - 1) / opt.max_sample_blocks;
    if (cap > every) every = cap;
  }
  return every;
}

/// The rule over one slice of n codes of `code_bytes` bytes each: start it,
/// add() the statistics of every predictor that applies() in increasing
/// predictor order, then finish(). forced() first: where codec and predictor
/// are both forced there is nothing to sample.
struct SelectRule {
  using Choice = EncodeOptions::Choice;
  SelectChoice best_fast, best_rans, best_sparse;
  bool sparse_fast = false;  ///< best_sparse's residuals are mostly zero: about as fast as Block
  size_t n = 0, nblocks = 0;

  NCCLZ_HD SelectRule(const EncodeOptions& opt, size_t count, size_t code_bytes) : n(count) {
    constexpr size_t kNone = ~size_t(0);
    nblocks = (n + kBlockLen - 1) / kBlockLen;
    // A forced Block starts from an infinite estimate so that some Block candidate wins.
    best_fast = opt.choice == Choice::Block ? SelectChoice{Codec::Block, Predictor::None, kNone}
                                            : SelectChoice{Codec::Raw, Predictor::None, n * code_bytes};
    best_rans = SelectChoice{Codec::Rans, Predictor::None, kNone};
    best_sparse = SelectChoice{Codec::Sparse, Predictor::None, kNone};
  }

  /// Codec and predictor both forced, Raw forced, or an empty slice: the
  /// choice, without a sample. The predictor, where it cannot run on this slice, becomes None
  /// (slice_predictor).
  NCCLZ_HD bool forced(const EncodeOptions& opt, SelectChoice* c) const {
    if (n == 0) {
      *c = SelectChoice{Codec::Raw, Predictor::None, 0};
      return true;
    }
    if (opt.choice == Choice::Raw) {  // (encode_slice does not even ask)
      *c = SelectChoice{Codec::Raw, Predictor::None, 0};
      return true;
    }
    if (opt.choice == Choice::Auto || opt.predictor < 0) return false;
    *c = SelectChoice{opt.choice == Choice::Block  ? Codec::Block
                      : opt.choice == Choice::Rans ? Codec::Rans
                                                   : Codec::Sparse,
                      slice_predictor(Predictor(opt.predictor), opt.row, opt.plane, n), 0};
    return true;
  }

  /// Whether predictor pi is a candidate (asked for, and fits the slice).
  NCCLZ_HD bool applies(int pi, const EncodeOptions& opt) const {
    if (opt.predictor >= 0 && opt.predictor != pi) return false;
    return pi < kNumPredictors && predictor_fits(Predictor(pi), opt.row, opt.plane, n);
  }

  /// Which statistics the choice reads (the others may be left at 0).
  NCCLZ_HD static bool wants_block(const EncodeOptions& opt) {
    return opt.choice == Choice::Auto || opt.choice == Choice::Block;
  }
  NCCLZ_HD static bool wants_sparse(const EncodeOptions& opt) {
    return opt.choice == Choice::Auto || opt.choice == Choice::Sparse;
  }
  /// The Rans symbol histogram also gives the Sparse estimate (symbol 0 counts the zeros).
  NCCLZ_HD static bool wants_hist(const EncodeOptions& opt) {
    return opt.choice == Choice::Auto || opt.choice == Choice::Rans || wants_sparse(opt);
  }

  /// Whether the choice reads nothing but the Block costs (finish() returns
  /// best_fast whatever the histograms say): Block forced, or Auto with Rans
  /// ruled out (allow_rans = false) and Sparse never a candidate
  /// (sparse_min_zeros above 1). A sampler may then skip the Rans symbols
  /// and call add_block() alone (add() skips the Rans estimate itself).
  NCCLZ_HD static bool only_fast(const EncodeOptions& opt) {
    return opt.choice == Choice::Block || (opt.choice == Choice::Auto && !opt.allow_rans && opt.sparse_min_zeros > 1.0);
  }

  /// The estimates of predictor p from its sample: add_block, add_entropy.
  NCCLZ_HD void add(Predictor p, const SampleStats& s, const EncodeOptions& opt) {
    add_block(p, s, opt);
    add_entropy(p, s, opt);
  }
  /// The Block estimate (all that only_fast options read).
  NCCLZ_HD void add_block(Predictor p, const SampleStats& s, const EncodeOptions& opt) {
    if (s.sampled == 0) return;
    if (wants_block(opt)) {
      const size_t est = size_t(double(s.block_cost) * double(nblocks) / double(s.sampled_blocks) / 2.0);
      if (est < best_fast.est) best_fast = SelectChoice{Codec::Block, p, est};
    }
  }
  /// The Rans and Sparse estimates.
  NCCLZ_HD void add_entropy(Predictor p, const SampleStats& s, const EncodeOptions& opt) {
    if (s.sampled == 0) return;
    if (wants_hist(opt) && !only_fast(opt)) {  // (only_fast: finish() would not read it)
      const size_t est = rans_estimate_bytes(s.hist, s.sampled, s.extra_bits, n);
      if (est < best_rans.est) best_rans = SelectChoice{Codec::Rans, p, est};
    }
    // Sparse only where the sample is mostly zeros (else it is no faster than
    // Rans and no smaller), or when forced.
    const double zeros = double(s.hist[0]) / double(s.sampled);
    if (wants_sparse(opt) && (opt.choice == Choice::Sparse || zeros >= opt.sparse_min_zeros)) {
      const size_t est = sparse_estimate_bytes(s.hist, s.sampled, s.extra_bits, n);
      if (est < best_sparse.est) {
        best_sparse = SelectChoice{Codec::Sparse, p, est};
        sparse_fast = zeros >= opt.sparse_fast_zeros;
      }
    }
  }

  /// The choice once every candidate predictor was added.
  NCCLZ_HD SelectChoice finish(const EncodeOptions& opt) const {
    if (opt.choice == Choice::Rans) return best_rans;
    if (opt.choice == Choice::Block) return best_fast;
    if (opt.choice == Choice::Sparse) return best_sparse;
    // Sparse decodes in O(nonzeros) and encodes in one scan plus O(nonzeros):
    // it takes the place of Rans unless Rans beats it by sparse_margin, and
    // where the residuals are mostly zeros it competes with the fast codecs as
    // it is.
    SelectChoice entropy = best_rans;
    if (best_sparse.est != ~size_t(0) && double(best_rans.est) >= (1.0 - opt.sparse_margin) * double(best_sparse.est)) {
      entropy = best_sparse;
      if (sparse_fast && best_sparse.est < best_fast.est) return best_sparse;
    }
    if (double(entropy.est) < (1.0 - opt.rans_margin) * double(best_fast.est)) {
      if (entropy.codec == Codec::Rans && !opt.allow_rans) return best_fast;
      return entropy;
    }
    return best_fast;
  }
};

/// The selector among the fast coders alone, for a device coder with
/// neither Rans nor Sparse (the CTA slice coder of the persistent ring
/// kernels, cuda/persistent_ring.cu): Auto over Block with None, Delta1 or
/// Delta2 (row = plane = 0: no Lorenzo) and the Raw fallback;
/// allow_rans = false, sparse_min_zeros = 2 (above 1: Sparse is never a
/// candidate), the sampling as EncodeOptions' defaults. encode_slice with
/// these options writes what that coder writes (SelectRule::only_fast holds).
NCCLZ_HD EncodeOptions fast_select_options() {
  EncodeOptions o;
  o.choice = EncodeOptions::Choice::Auto;
  o.predictor = -1;
  o.row = o.plane = 0;
  o.allow_rans = false;
  o.sparse_min_zeros = 2.0;
  return o;
}

}  // namespace ncclz::codec
