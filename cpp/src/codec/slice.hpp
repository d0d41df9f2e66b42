// Slice encoder and decoder: the selector, the predictors and the coders
// behind one call each. This is what the send and receive loops call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// What the encoder may do with a slice.
struct EncodeOptions {
  /// Force a codec (tests, benchmarks); Auto lets the selector choose.
  /// FloatHuff: chosen only with allow_rans = false (FloatExp, or Rans for
  /// bytes, is smaller on the CPU); forced, it codes lossless F32/F16/BF16
  /// and U8 as the device coder does.
  enum class Choice : uint8_t { Auto, Raw, Block, Rans, FloatExp, Sparse, FloatHuff } choice = Choice::Auto;
  /// Force a predictor for Block/Rans (-1: the selector chooses).
  int predictor = -1;
  /// Row length and plane size of the data, if known (0: unknown). They enable
  /// the Lorenzo2D/3D candidates.
  uint32_t row = 0, plane = 0;
  /// The Rans coder is chosen only when its estimated size is below
  /// (1 - rans_margin) times the best fast codec's (Block or Raw): it encodes
  /// several times slower than Block, so by default it must save at least 15%.
  /// 0 picks the smallest estimate; 1 never picks Rans.
  double rans_margin = 0.15;
  /// The Sparse coder (time in proportion to the nonzeros) is a candidate
  /// when at least sparse_min_zeros of the sampled residuals are zero: it
  /// then replaces Rans unless Rans is estimated smaller by more than
  /// sparse_margin (Sparse encodes at least as fast and decodes faster). From
  /// sparse_fast_zeros on it is about as fast as Block and competes with the
  /// fast codecs without rans_margin. sparse_min_zeros above 1: never Sparse
  /// (unless forced). (Sparse's estimate runs above Rans's even where Sparse
  /// is smaller: Rans's leaves out its 12-bit table's loss on rare symbols.
  /// Why 0.10: docs/BENCHMARKS.md, "Measurements behind the code".)
  double sparse_min_zeros = 0.7;
  double sparse_fast_zeros = 0.9;
  double sparse_margin = 0.10;
  /// The selector samples every `sample_every`-th block of 32 values, and at
  /// most `max_sample_blocks` blocks per slice (0: no cap).
  uint32_t sample_every = 8;
  uint32_t max_sample_blocks = 128;
  /// Container only (codec::compress, lossy): the interp layout (docs/FORMAT.md).
  /// -1: tried where it may win and kept if smaller; 0: never; 1: always
  /// (unless the bound is below 2^-960).
  int interp = -1;
  /// log2 of its grid factor k (1..6): codes on a grid k times finer than 2 eb.
  int interp_log2k = 3;
  /// false: the selector never picks Rans (where it would, the best fast
  /// codec instead; Sparse is chosen as with true). The device codec's
  /// selecting encode always applies the rule so (it has no Rans encoder):
  /// encode_slice with allow_rans = false writes the same bytes
  /// (codec/select_rule.hpp, docs/GPU.md "Device selector"). Lossless F32,
  /// F16 and BF16 slices (choice Auto) are then FloatHuff (Raw where that is
  /// not smaller), the device's lossless float coder, instead of FloatExp or
  /// Sparse (both code with rANS): sample-free, as the device writes them;
  /// U8 slices FloatHuff over their bytes instead of Rans, the same way.
  bool allow_rans = true;
};

/// What the selector saw and chose (for stats and tests).
struct SliceInfo {
  Codec codec = Codec::Raw;
  Predictor predictor = Predictor::None;
  size_t bytes = 0;  ///< header + payload
};

/// Encodes `count` values of type t at `src` into dst (capacity `cap`, at
/// least max_slice_bytes(t, count) guarantees success). Returns the slice's
/// size in bytes, or 0 with Status::NoSpace if it does not fit.
Status encode_slice(const void* src, ElemType t, uint32_t count, uint8_t* dst, size_t cap, const EncodeOptions& opt,
                    SliceInfo* info = nullptr);

/// Decodes one slice from `len` bytes at src into `count` values of type t at
/// dst. Checks everything: type, count, and every length inside the payload.
/// On success *consumed (if given) is the slice's size in bytes.
Status decode_slice(const uint8_t* src, size_t len, ElemType t, uint32_t count, void* dst, size_t* consumed = nullptr);

/// Decodes one slice like decode_slice and adds it into dst: dst[i] += v[i] in
/// wrapping two's-complement arithmetic (the reduction of integer codes). Code
/// types (I32, I64) only, else Status::Unsupported. A Sparse slice without a
/// predictor is added in time proportional to its nonzeros (no pass over
/// dst); any other slice is decoded into a buffer of the caller's thread first.
/// On an error dst may hold part of the additions.
Status decode_slice_add(const uint8_t* src, size_t len, ElemType t, uint32_t count, void* dst,
                        size_t* consumed = nullptr);

/// decode_slice and an add in one pass, into a buffer of its own: to[i] =
/// local[i] + v[i] in wrapping arithmetic (to may be local), for the slices
/// that have such a pass: I32 codes coded Block or Rans with predictor None,
/// Delta1 or Delta2 (the usual slices of a lossy sum: block_decode_add,
/// rans_decode_add; no decoded values in memory). Any other slice: Status::Unsupported with nothing
/// written (decode it, then add). On an error `to` may hold part of the result.
Status decode_slice_add_to(const uint8_t* src, size_t len, ElemType t, uint32_t count, const void* local, void* to,
                           size_t* consumed = nullptr);

/// Whether decode_slice_add adds this slice without a pass over dst (a
/// Sparse slice without a predictor); false for anything unreadable.
bool slice_adds_sparse(const uint8_t* src, size_t len);
/// The number of nonzeros such a slice lists (its payload's first field,
/// clamped to the slice's count: the decoders check it); false for any other
/// slice.
bool sparse_slice_nonzeros(const uint8_t* src, size_t len, size_t* k);

/// The nonzeros of a Sparse slice without a predictor (slice_adds_sparse):
/// positions to pos and values (of code type t) to val, room for the slice's
/// nonzeros (sparse_slice_nonzeros; at most count) each,
/// in increasing position; *k their number. Any other slice:
/// Status::Unsupported. The checks of decode_slice; *consumed as there.
Status decode_slice_nonzeros(const uint8_t* src, size_t len, ElemType t, uint32_t count, uint32_t* pos, void* val,
                             size_t* k, size_t* consumed = nullptr);

/// The most nonzeros a slice of n codes of type t may have for a Sparse slice
/// without a predictor of its nonzeros (encode_slice_nonzeros) to stand in
/// for the selector's choice under `opt`: n where Sparse is forced, else
/// n * (1 - sparse_fast_zeros), where the selector takes Sparse as a fast
/// codec; 0 where the options rule that out (another forced codec or
/// predictor, Sparse disabled) or t is not a code type. A caller that holds
/// slices as lists of nonzeros (the primitives' mostly-zero sums) keeps them
/// as lists up to this size.
size_t sparse_list_max(const EncodeOptions& opt, ElemType t, size_t n);

/// A Sparse slice without a predictor of `count` codes of type t (I32, I64,
/// else Status::Unsupported) given as their nonzeros: k positions, strictly
/// increasing and below count, and their values, none zero (else
/// Status::Corrupt). A caller that has the nonzeros already (a mostly-zero
/// input, kept as a list) skips the selector and the scan for them. Where
/// Sparse would be larger than Raw, the slice is Raw (written from the list),
/// as encode_slice would; Status::NoSpace where even that does not fit.
Status encode_slice_nonzeros(const uint32_t* pos, const void* val, size_t k, ElemType t, uint32_t count, uint8_t* dst,
                             size_t cap, SliceInfo* info = nullptr);

/// The nonzeros of the sum of a Sparse slice without a predictor
/// (slice_adds_sparse) and a list of ka nonzeros (apos strictly increasing
/// and below count, aval of code type t), in one pass: to pos and val (room
/// for ka plus the slice's nonzeros each: sparse_slice_nonzeros, at most
/// count), in increasing position, *k their number. Sums wrap;
/// positions where they are 0 are left out. Any other slice:
/// Status::Unsupported. The checks of decode_slice; *consumed as there.
Status decode_slice_merge(const uint8_t* src, size_t len, ElemType t, uint32_t count, const uint32_t* apos,
                          const void* aval, size_t ka, uint32_t* pos, void* val, size_t* k, size_t* consumed = nullptr);

}  // namespace ncclz::codec
