// Primitives: the send/receive loops with the codec inside them.
//
// A Prims object drives one rank's side of one channel: a receive connection
// from the previous rank and a send connection to the next one (either may be
// absent). Every verb is a one-line use of a single generic step routine,
// step<Flags>, which handles one slice (at most slice_elems() elements):
//
//   1. RECV:    wait for the next incoming slot;
//   2. decode:  the slot's slice, straight from slot memory (Coded), or use the
//               slot's bytes in place (Raw);
//   3. REDUCE:  combine it with the local input (incoming op local);
//   4. COPY:    store the result into the output buffer;
//   5. SEND:    acquire the next outgoing slot, encode the result straight into
//               it (capacity slot_bytes >= max_slice_bytes, so the encoder's RAW
//               fallback always fits), post it with its size;
//   6. release the incoming slot (Coded mode frees it right after decoding;
//      Raw mode reads it in place until the result is written).
// Coded integer sums fuse 2 and 3 for Sparse slices (mostly-zero data): the
// local slice is copied to the result and the slice's nonzeros are added to
// it (PrimsArgs::int_sum). Where the stage holds the local slice as a list of
// its nonzeros (Stage::prepare_nonzeros: a mostly-zero lossy input), the
// steps never make it dense: send encodes the list as a Sparse slice, a
// reduction merges a received Sparse slice's nonzeros with it into the list of
// the sum, which is encoded the same way and, for a COPY verb, handed to
// Stage::finish_nonzeros. Any other received slice, or a sum with more than
// (1 - sparse_fast_zeros) nonzeros, takes the dense step (the selector's
// choice for such a slice would not be Sparse either). Same result bits.
// FORWARD (recvCopySend) skips 2-5: the received slot's bytes are copied into
// the outgoing slot unchanged (no re-encoding, the allgather phase's rule) and
// the slice is decoded once into the output.
//
//   verb                 flags                     used by
//   send                 SEND                      first step of every ring
//   copySend             COPY|SEND                 allgather: own chunk
//   recv                 RECV|COPY                 last step of every ring
//   recvReduceSend       RECV|REDUCE|SEND          reduce-scatter middle steps
//   recvReduceCopy       RECV|REDUCE|COPY          reduce-scatter last step
//   recvReduceCopySend   RECV|REDUCE|COPY|SEND     allreduce: owner's final chunk
//   recvCopySend         RECV|COPY|SEND|FORWARD    allgather phase, broadcast relay
//
// Wire modes:
//  - Raw:   a slot holds the slice's raw elements, no header (mode "none":
//           memcpy speed; reductions read the slot in place and write the
//           outgoing slot directly).
//  - Coded: a slot holds exactly one slice in the slice format
//           (docs/FORMAT.md), produced by codec::encode_slice (the selector
//           picks the codec) and checked by codec::decode_slice.
//
// Buffers passed to the verbs hold wire elements (the integer codes in lossy
// mode). A verb of n elements runs ceil(n / slice_elems()) steps; the two ends
// of a connection compute the same slicing from the same n. Overlap comes from
// the FIFO: while slice k sits in a slot being drained (socket proxy) or read
// (peer), slice k+1 is already being encoded into the next slot.
//
// FORWARD and the Raw reductions hold their incoming slot while acquiring the
// outgoing one, so rings need K >= 2 slots (docs/ALGORITHMS.md, "Deadlock
// freedom").
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/slice.hpp"
#include "prims/reduce.hpp"
#include "transport/transport.hpp"

namespace ncclz::prims {

enum class WireMode : uint8_t { Raw, Coded };

/// Per-channel counters, summed into CallStats by the communicator.
struct ChannelStats {
  double encode_s = 0;      ///< in encode_slice
  double decode_s = 0;      ///< in decode_slice, and Stage::finish_slice (decoding into the output)
  double stage_s = 0;       ///< in Stage::prepare / finish (pipelined quantize / dequantize)
  double wait_s = 0;        ///< blocked in acquire() / wait()
  uint64_t raw_bytes = 0;   ///< elements sent * user element size
  uint64_t wire_bytes = 0;  ///< bytes posted
  void add(const ChannelStats& o) {
    encode_s += o.encode_s;
    decode_s += o.decode_s;
    stage_s += o.stage_s;
    wait_s += o.wait_s;
    raw_bytes += o.raw_bytes;
    wire_bytes += o.wire_bytes;
  }
};

/// The nonzero codes of a slice (all others are 0): k positions from the
/// slice's start, strictly increasing, and their values (wire codes).
struct NonzeroList {
  const uint32_t* pos = nullptr;
  const void* val = nullptr;
  size_t k = 0;
};

/// Optional per-slice work around the wire buffers, run by the verbs inside
/// their send/receive loops: the lossy reductions quantize each slice of the
/// local input just before it is first read and dequantize each slice of the
/// result as soon as it is final, so that this element-wise work overlaps the
/// transfers instead of preceding and following them. Ranges are in the wire
/// buffers the verbs were given; a Stage maps them to its own arrays.
class Stage {
 public:
  virtual ~Stage() = default;
  /// The verb is about to read [src, src + n) of the local input. Returns
  /// where to read those n elements from: src, or a buffer of the stage's
  /// that stays valid until the calling thread's next prepare().
  virtual const void* prepare(const void* src, size_t n) = 0;
  /// Whether a buffer prepare() returns (other than src) is the stage's
  /// scratch that the verb may overwrite before the thread's next prepare():
  /// a reduction then adds into it in place.
  virtual bool prepared_writable() const { return false; }
  /// A COPY verb is about to write [dst, dst + n) of the output. Returns where
  /// the verb writes those n elements instead: dst, or a buffer of the
  /// stage's valid until the calling thread's next output().
  virtual void* output(void* dst, size_t n) {
    (void)n;
    return dst;
  }
  /// Output elements [dst, dst + n) are final; their values are at `data`
  /// (what output(dst, n) returned).
  virtual void finish(const void* dst, const void* data, size_t n) = 0;
  /// Output elements [dst, dst + n) are final and are the values of the
  /// received coded slice at `slice` (len bytes): the stage may produce its
  /// outputs from the slice directly (Status::Ok: the whole slice was read,
  /// finish() is not called), decline (Status::Unsupported: the verb decodes
  /// and calls finish()), or report that the slice does not decode.
  virtual codec::Status finish_slice(const void* dst, const uint8_t* slice, size_t len, size_t n) {
    (void)dst, (void)slice, (void)len, (void)n;
    return codec::Status::Unsupported;
  }
  /// Like prepare(), for a stage that may hold the slice as the list of its
  /// nonzero codes (a mostly-zero input): true with that list in *out (valid
  /// until the calling thread's next prepare or prepare_nonzeros) when it has
  /// it, with at most max_k entries; false: the verb calls prepare().
  virtual bool prepare_nonzeros(const void* src, size_t n, size_t max_k, NonzeroList* out) {
    (void)src, (void)n, (void)max_k, (void)out;
    return false;
  }
  /// Output elements [dst, dst + n) are final and their codes are 0 but for
  /// the list's: true if the stage wrote its outputs from the list (finish()
  /// is not called), false to have the verb write the codes to output(dst, n)
  /// and call finish().
  virtual bool finish_nonzeros(const void* dst, const NonzeroList& list, size_t n) {
    (void)dst, (void)list, (void)n;
    return false;
  }
};

struct PrimsArgs {
  codec::ElemType type = codec::ElemType::U8;  ///< wire element type
  WireMode mode = WireMode::Raw;
  ReduceFn reduce = nullptr;                   ///< needed by the REDUCE verbs
  /// `reduce` is wrapping integer addition (I32/I64, Sum): a Coded reduction
  /// adds an incoming Sparse slice into a copy of the local slice in time
  /// proportional to its nonzeros (codec::decode_slice_add) instead of
  /// decoding it densely and reducing. Same result bits.
  bool int_sum = false;
  codec::EncodeOptions enc;                    ///< Coded mode
  size_t raw_esize = 1;                        ///< user element size (for raw_bytes)
  transport::Clock::time_point deadline;
  int rank = 0;     ///< for error messages
  int channel = 0;  ///< for error messages
  Stage* stage = nullptr;  ///< see Stage; nullptr: the buffers are used as they are
  /// The slot bytes a slice is sized for (slice_elems_for(slice_bytes, esize)
  /// elements); 0, or more than the connection's slots: the slots' own. Both
  /// ends of a connection must use the same.
  size_t slice_bytes = 0;
};

/// Elements per slice for slots of `slot_bytes` and wire elements of `esize`
/// bytes: (slot_bytes - kHeaderBytes) / esize, in every mode, so that the
/// slicing (and so the ring's chunk geometry) does not depend on the mode.
size_t slice_elems_for(size_t slot_bytes, size_t esize);

class Prims {
 public:
  /// `scratch` holds at least slice_elems * esize bytes, 8-byte aligned.
  Prims(transport::SendConn* send, transport::RecvConn* recv, const PrimsArgs& args, ChannelStats* stats,
        void* scratch);

  size_t slice_elems() const { return slice_; }
  size_t esize() const { return esize_; }

  void send(const void* src, size_t n);
  void copySend(const void* src, void* dst, size_t n);
  void recv(void* dst, size_t n);
  void recvReduceSend(const void* src, size_t n);
  void recvReduceCopy(const void* src, void* dst, size_t n);
  void recvReduceCopySend(const void* src, void* dst, size_t n);
  void recvCopySend(void* dst, size_t n);

 private:
  static constexpr unsigned kRecv = 1, kReduce = 2, kCopy = 4, kSend = 8, kForward = 16;

  template <unsigned F>
  void run(const void* src, void* dst, size_t n);
  /// src_scratch: src is the stage's scratch (Stage::prepared_writable);
  /// final_dst: the stage's output position of a COPY verb (else nullptr).
  /// Returns whether the stage finished the slice itself (finish_slice).
  template <unsigned F>
  bool step(const uint8_t* src, uint8_t* dst, size_t n, bool src_scratch, const uint8_t* final_dst);
  /// The step for a local slice the stage holds as a list of nonzeros; src is
  /// its position in the wire input (for the dense step, when that is taken).
  template <unsigned F>
  bool step_nonzeros(const NonzeroList& mine, const uint8_t* src, uint8_t* dst, size_t n, const uint8_t* final_dst);
  /// Most nonzeros of an n-element slice that goes out as a list (0: lists are off).
  size_t list_max(size_t n) const;
  size_t encode_nonzeros(const NonzeroList& l, size_t n, uint8_t* out);
  /// The final codes of a COPY verb as a list: Stage::finish_nonzeros, or
  /// written densely to dst for finish(). Returns whether the stage took them.
  bool finish_nonzeros(const NonzeroList& l, uint8_t* dst, size_t n, const uint8_t* final_dst);
  /// Offers a received slice to Stage::finish_slice; true if it took it.
  bool finish_slice(const transport::SlotView& in, const uint8_t* final_dst, size_t n);

  transport::SlotView wait_in();
  uint8_t* acquire_out();
  void post_out(size_t bytes, size_t n);
  void decode(const transport::SlotView& in, void* dst, size_t n);
  /// acc[i] += the slice's values (Coded integer sums, see PrimsArgs::int_sum).
  void decode_add(const transport::SlotView& in, void* acc, size_t n);
  /// Throws CorruptData unless the slice decoded to exactly its own bytes.
  void check_decoded(const transport::SlotView& in, size_t n, codec::Status s, size_t used);
  /// predictor >= 0: the selector considers only that predictor (unless
  /// PrimsArgs::enc forces one already).
  size_t encode(const void* src, size_t n, uint8_t* out, int predictor = -1);
  /// The predictor of a coded slice, -1 for Raw.
  int incoming_predictor(const transport::SlotView& in) const;
  const uint8_t* raw_in(const transport::SlotView& in, size_t n);

  transport::SendConn* send_;
  transport::RecvConn* recv_;
  PrimsArgs a_;
  ChannelStats* st_;
  uint8_t* scratch_;
  size_t esize_;
  size_t slot_bytes_;
  size_t slice_;
  bool lists_ = false;  ///< the encoder options allow a list's Sparse slice (Coded codes)
};

}  // namespace ncclz::prims
