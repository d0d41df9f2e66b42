// The slice codec of the send and receive loops: the one object through which
// the step routine (prims.hpp) turns received slot bytes into values and
// values into slot bytes.
//
// A step has two codec points and calls one method at each:
//
//   decode side   decode(in)          the received slice's values (recv, and
//                                     the decode-once of FORWARD)
//                 reduce(in, local)   the received slice's values op the local
//                                     slice's (the REDUCE verbs)
//   encode side   encode(values)      the outgoing slot's bytes (SEND)
//
// Values travel between the two points as SliceValues: n dense wire elements,
// or, for a mostly-zero slice of integer codes, the list of its nonzeros.
// Behind these three calls sit every codec decision the loops make: the wire
// mode (Raw: a slot is the raw elements; Coded: one slice in the slice format,
// docs/FORMAT.md), the selector's options (codec::EncodeOptions), the fused
// paths of integer sums (a received Sparse slice is added into the local
// values in time proportional to its nonzeros, or merged with a local list
// into the list of the sum), which slices may travel as lists (list_max),
// and the predictor a partial sum is re-encoded with (the one its incoming
// slice was coded with). Same bytes and result bits as decoding, reducing
// and selecting afresh.
//
// The object is set up once per Prims and used by that Prims' thread only.
// Results it returns as lists point into per-thread buffers of the codec's,
// valid until the thread's next decode or reduce. A device implementation of
// the same three calls (one kernel per call, on device buffers) is the shape
// the GPU path grows into (docs/GPU.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/slice.hpp"
#include "prims/reduce.hpp"

namespace ncclz::prims {

enum class WireMode : uint8_t { Raw, Coded };

/// The nonzero codes of a slice (all others are 0): k positions from the
/// slice's start, strictly increasing, and their values (wire codes).
struct NonzeroList {
  const uint32_t* pos = nullptr;
  const void* val = nullptr;
  size_t k = 0;
};

/// A slice's values on their way through a step.
struct SliceValues {
  const uint8_t* dense = nullptr;  ///< n wire elements (when !is_list)
  NonzeroList list;                ///< the nonzero codes (when is_list)
  bool is_list = false;
  /// `dense` is a buffer the codec may overwrite (a stage's prepared copy of
  /// the local input): a reduction may leave its result there.
  bool writable = false;
  /// The predictor the values arrived coded with (-1: none): re-encoding a
  /// partial sum keeps it (see SliceCodec::reduce).
  int predictor = -1;

  static SliceValues of_dense(const void* p, bool writable = false) {
    SliceValues v;
    v.dense = static_cast<const uint8_t*>(p);
    v.writable = writable;
    return v;
  }
  static SliceValues of_list(const NonzeroList& l) {
    SliceValues v;
    v.list = l;
    v.is_list = true;
    return v;
  }
};

/// What the decode side calls once it has read the last byte of the received
/// slot, so that the slot goes back to the peer before a reduction pass that
/// no longer needs it (the step releases it itself otherwise).
struct SlotDone {
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
  void operator()() const {
    if (fn) fn(arg);
  }
};

class SliceCodec {
 public:
  /// type: the wire element type; reduce: the REDUCE verbs' operation
  /// (`incoming op local`); int_sum: it is wrapping integer addition (the
  /// fused Sparse paths); slot_bytes: the outgoing slots' capacity (at least
  /// max_slice_bytes of a slice); scratch: slice-sized, 8-byte aligned, the
  /// decode side's buffer (a `to` argument may be it).
  SliceCodec(codec::ElemType type, WireMode mode, const codec::EncodeOptions& enc, ReduceFn reduce, bool int_sum,
             size_t slot_bytes, uint8_t* scratch);

  WireMode mode() const { return mode_; }
  const codec::EncodeOptions& options() const { return enc_; }

  /// The most nonzeros an n-element slice may have to travel as a list: its
  /// Sparse slice is then what the selector would send for it as well
  /// (codec::sparse_list_max). For a reduction (reduce: true) only where the
  /// reduction is an integer sum (lists merge by addition). 0: lists are off.
  size_t list_max(size_t n, bool reduce) const;
  /// Whether decode() can give a received slice as a list (Coded codes).
  bool decodes_lists() const { return lists_out_; }

  /// The values of the received slice `in` (len bytes) of n elements: into
  /// `to` (n elements), or, with want_list and a Sparse slice of codes, as
  /// the list of its nonzeros. Any error is the decoder's Status (Raw mode:
  /// CountMismatch for a slot of the wrong size; Corrupt for bytes after the
  /// slice).
  codec::Status decode(const uint8_t* in, size_t len, size_t n, bool want_list, uint8_t* to, SliceValues* out) const;

  /// The received slice's values op `local`'s, into `to` (n elements: the
  /// output, Raw mode's outgoing slot, or the scratch where no particular
  /// place is needed). A Sparse slice of an integer sum is added into a copy
  /// of the local values at `to` instead of being decoded (into the local
  /// values themselves, no copy, where `to` is the scratch and they are
  /// writable: out->dense says where); a list `local` gives the list of the sum (merged with the
  /// slice's nonzeros), or Status::Unsupported where the slice is not Sparse
  /// or the sum has more than list_max(n) nonzeros: call again with the local
  /// values dense (the slice is not consumed). Dense results carry the
  /// incoming slice's predictor (out->predictor) for their re-encoding.
  /// `done` is called where the slot's bytes are read before the reduction
  /// pass (a slice decoded densely into the scratch), on success only.
  codec::Status reduce(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to, SliceValues* out,
                       const SlotDone& done = {}) const;

  /// Encodes v (n elements) into `out` (slot_bytes of room): the selector's
  /// choice for dense values (restricted to v.predictor where that is set and
  /// no predictor is forced), a Sparse slice for a list (Raw where that is
  /// smaller); Raw mode: the elements themselves (nothing to copy when
  /// v.dense is `out`). *bytes: the slot's size.
  codec::Status encode(const SliceValues& v, size_t n, uint8_t* out, size_t* bytes) const;

 private:
  /// The received slot's elements in Raw mode, aligned for the type (the
  /// slot itself, or a copy in scratch); nullptr if the size is wrong.
  const uint8_t* raw_in(const uint8_t* in, size_t len, size_t n) const;

  codec::ElemType type_;
  WireMode mode_;
  codec::EncodeOptions enc_;
  ReduceFn reduce_;
  bool int_sum_;
  size_t slot_bytes_;
  uint8_t* scratch_;
  size_t esize_;
  bool lists_out_ = false;  ///< Coded codes: decode() may give lists
};

}  // namespace ncclz::prims
