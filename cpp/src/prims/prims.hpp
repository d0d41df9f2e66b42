// Primitives: the send/receive loops with the codec inside them.
//
// A Prims object drives one rank's side of one channel: a receive connection
// from the previous rank and a send connection to the next one (either may be
// absent). Every verb is a one-line use of a single generic step routine,
// step<Flags>, which handles one slice (at most slice_elems() elements):
//
//   1. RECV:    wait for the next incoming slot;
//   2. decode:  the slice codec turns the slot into values: the slice's own
//               (recv) or the slice's op the local slice's (REDUCE), read
//               straight from slot memory; the slot is released as soon as
//               it is read (a slice decoded into the scratch: before the
//               reduction pass);
//   3. SEND:    acquire the next outgoing slot, the slice codec encodes the
//               values straight into it (capacity slot_bytes >=
//               max_slice_bytes, so the encoder's RAW fallback always fits),
//               post it with its size;
//   4. COPY:    the values are the output: written to the output buffer, or
//               handed to the Stage (Stage::finish, ListStage::finish_nonzeros).
// The codec (SliceCodec, slice_codec.hpp) is called at exactly these two
// points, decode and encode; everything about slice bytes (wire mode,
// selector options, the fused Sparse paths of integer sums, lists of
// nonzeros, predictor reuse) is behind it. Values travel between the points
// as SliceValues: dense wire elements, or a list of nonzero codes.
// Mode none (WireMode::Raw) reductions that send acquire the outgoing slot
// before decoding: the slot bytes are the values, so the sum is written
// straight into it (memcpy speed, no extra pass).
// FORWARD (recvCopySend) copies the received slot's bytes into the outgoing
// slot unchanged (no re-encoding, the allgather phase's rule) and the slice is
// decoded once, for the output.
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
// Local values: the verbs that read the local input get, per slice, the
// Stage's prepared copy (Stage::prepare: the lossy reductions quantize it
// there), or the input itself without a stage; where the stage is a
// ListStage that holds the slice as the list of its nonzero codes (a
// mostly-zero lossy input) and the codec lets it travel as one
// (SliceCodec::list_max), the list. A list is sent as a Sparse slice, merged
// with a received Sparse slice into the list of the sum, and written out from
// the list; any other received slice, or a sum too dense for a list, makes
// the step take the dense values (Stage::prepare) instead. Same result bits.
//
// Buffers passed to the verbs hold wire elements (the integer codes in lossy
// mode; with a stage they are only address ranges the stage maps to its own
// arrays). A verb of n elements runs ceil(n / slice_elems()) steps; the two
// ends of a connection compute the same slicing from the same n. Overlap comes
// from the FIFO: while slice k sits in a slot being drained (socket proxy) or
// read (peer), slice k+1 is already being encoded into the next slot.
//
// Device ranks (PrimsArgs::device, prims/device_slices.hpp): the values live
// in device memory (src, dst and the scratch are device pointers) and the
// three codec calls and the output copy go to the DeviceSlices object
// instead; slot bytes stay in host memory and are the same bytes a CPU rank
// with the same options sends, so CPU and device ranks mix in one ring. No
// Stage there (the caller quantizes on the device before the verbs), and
// Raw reductions add into device memory, not into the outgoing slot (one
// device-to-host copy then, the slot acquired after the incoming one is
// released). A CPU rank takes the same code with one predictable branch per
// codec call.
//
// FORWARD and the Raw reductions hold their incoming slot while acquiring the
// outgoing one, so rings need K >= 2 slots (docs/ALGORITHMS.md, "Deadlock
// freedom").
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/slice.hpp"
#include "prims/device_slices.hpp"
#include "prims/reduce.hpp"
#include "prims/slice_codec.hpp"
#include "transport/transport.hpp"

namespace ncclz::prims {

/// Per-channel counters, summed into CallStats by the communicator.
struct ChannelStats {
  double encode_s = 0;      ///< in encode_slice
  double decode_s = 0;      ///< in the codec's decode side (decode, reduction, decode-add, merge, lists)
  double stage_s = 0;       ///< in the Stage (pipelined quantize / dequantize, lists)
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

/// Per-slice work around the wire buffers, run by the verbs inside their
/// send/receive loops: the lossy reductions quantize each slice of the local
/// input just before it is first read and dequantize each slice of the
/// result as soon as it is final, so that this element-wise work overlaps
/// the transfers instead of preceding and following them. Ranges are in the
/// wire buffers the verbs were given; a Stage maps them to its own arrays
/// (the verbs then never write their wire output buffer).
class Stage {
 public:
  virtual ~Stage() = default;
  /// The verb is about to read [src, src + n) of the local input. Returns
  /// those n elements in a buffer of the stage's that the verb may overwrite
  /// (a reduction may leave its result there), valid until the calling
  /// thread's second prepare() after this one (two buffers in turn: a slice
  /// sent and then reduced into is prepared once, Prims::prepared).
  virtual void* prepare(const void* src, size_t n) = 0;
  /// Output elements [dst, dst + n) are final; their values are at `data`
  /// (valid during the call only).
  virtual void finish(const void* dst, const void* data, size_t n) = 0;
};

/// A Stage that may hold slices of the local input as lists of their nonzero
/// codes (a mostly-zero input) and writes outputs from such lists; the Prims
/// finds it behind PrimsArgs::stage (dynamic_cast, once).
class ListStage : public Stage {
 public:
  /// Like prepare(), for a slice the stage holds as the list of its nonzero
  /// codes: true with that list in *out (at most max_k entries, valid until
  /// the calling thread's next prepare or prepare_nonzeros); false: the verb
  /// calls prepare().
  virtual bool prepare_nonzeros(const void* src, size_t n, size_t max_k, NonzeroList* out) = 0;
  /// Output elements [dst, dst + n) are final and their codes are 0 but for
  /// the list's: finish() from a list.
  virtual void finish_nonzeros(const void* dst, const NonzeroList& list, size_t n) = 0;
};

struct PrimsArgs {
  codec::ElemType type = codec::ElemType::U8;  ///< wire element type
  WireMode mode = WireMode::Raw;
  ReduceFn reduce = nullptr;  ///< needed by the REDUCE verbs
  /// `reduce` is wrapping integer addition (I32/I64, Sum): the fused Sparse
  /// paths of SliceCodec::reduce apply. Same result bits.
  bool int_sum = false;
  /// The operator `reduce` applies (a device rank's Raw reductions of values
  /// take it: DeviceSliceCodec::set_value_reduction).
  RedOp op = RedOp::Sum;
  codec::EncodeOptions enc;  ///< Coded mode
  size_t raw_esize = 1;      ///< user element size (for raw_bytes)
  /// Each wait's limit without progress (every wait gets now + timeout; see
  /// transport.hpp); zero: every wait gets the fixed `deadline` instead.
  transport::Clock::duration timeout{};
  transport::Clock::time_point deadline;
  int rank = 0;            ///< for error messages
  int channel = 0;         ///< for error messages
  Stage* stage = nullptr;  ///< see Stage (and ListStage); nullptr: the buffers are used as they are
  /// The slot bytes a slice is sized for (slice_elems_for(slice_bytes, esize)
  /// elements); 0, or more than the connection's slots: the slots' own. Both
  /// ends of a connection must use the same.
  size_t slice_bytes = 0;
  /// Non-null: a device rank (see above). The Prims does not own it; it must
  /// code `type` in `mode`, and `stage` must be null.
  DeviceSlices* device = nullptr;
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
  int channel() const { return a_.channel; }
  /// Whether a stage prepares the local input (PrimsArgs::stage).
  bool staged() const { return a_.stage != nullptr; }
  /// The wire's element type and mode (PrimsArgs): what a schedule may rely on.
  codec::ElemType type() const { return a_.type; }
  WireMode mode() const { return a_.mode; }

  void send(const void* src, size_t n);
  void copySend(const void* src, void* dst, size_t n);
  void recv(void* dst, size_t n);
  void recvReduceSend(const void* src, size_t n);
  void recvReduceCopy(const void* src, void* dst, size_t n);
  void recvReduceCopySend(const void* src, void* dst, size_t n);
  void recvCopySend(void* dst, size_t n);

  /// A device rank: waits until its slice codec's work (the COPY verbs'
  /// output copies are not waited for by the verbs) is complete, so that
  /// another stream or the host may read the outputs; throws Error with the
  /// CUDA error. Nothing to do for a host rank. The end of a schedule.
  void settle();

 private:
  static constexpr unsigned kRecv = 1, kReduce = 2, kCopy = 4, kSend = 8, kForward = 16;

  template <unsigned F>
  void run(const void* src, void* dst, size_t n);
  /// One slice of n elements: `local` the local values (verbs that read the
  /// input; src their position in it), dst the output position (COPY verbs).
  /// Returns the slice's final values (for COPY).
  template <unsigned F>
  SliceValues step(const SliceValues& local, const uint8_t* src, uint8_t* dst, size_t n);
  /// The local values of [src, src + n): the stage's list of the slice's
  /// nonzeros where it has one and the codec lets it travel as one (reduce:
  /// for a reduction), else prepared().
  SliceValues local_values(const uint8_t* src, size_t n, bool reduce);
  /// The stage's prepared copy of [src, src + n), or src itself without a
  /// stage. `reduce`: for a reduction (which may write into the copy), which
  /// takes the copy a verb that only reads prepared of the same range, if the
  /// stage has not reused its buffer since (kept_), instead of preparing it
  /// again: the exchange of two ranks sends a slice, then adds the other
  /// rank's into it (algorithms/ring.cpp, pair_all_reduce).
  SliceValues prepared(const uint8_t* src, size_t n, bool reduce = false);
  /// Where a reduction leaves its values: the outgoing slot (Raw: `out`), the
  /// output (COPY without a stage: `dst`), else the scratch (device ranks: the
  /// output or the scratch, never a slot) (SliceCodec::reduce
  /// may add into a writable local slice instead).
  uint8_t* reduce_to(uint8_t* out, uint8_t* dst) const;
  /// The COPY verbs' output of a slice's final values: to dst, or to the stage.
  void output(const SliceValues& v, uint8_t* dst, size_t n);

  /// The deadline of a wait starting now (PrimsArgs::timeout, else deadline).
  transport::Clock::time_point wait_deadline() const {
    return a_.timeout > transport::Clock::duration::zero() ? transport::Clock::now() + a_.timeout : a_.deadline;
  }
  transport::SlotView wait_in();
  /// Frees the incoming slot unless it was freed already (SlotDone).
  void release_in();
  uint8_t* acquire_out();
  void post_out(size_t bytes, size_t n);
  /// The codec's decode side, timed and checked: the slice's values (into
  /// dst without a stage), or the slice's op the local values (a list that
  /// cannot take the slice falls back to prepared()).
  SliceValues decode(const transport::SlotView& in, size_t n, uint8_t* dst);
  SliceValues reduce(const transport::SlotView& in, size_t n, const SliceValues& local, const uint8_t* src,
                     uint8_t* out, uint8_t* dst);
  /// The codec's encode side, timed and checked; returns the slot's bytes.
  size_t encode(const SliceValues& v, size_t n, uint8_t* out);
  /// Throws CorruptData naming rank, channel and peer unless s is Ok.
  void check_decoded(const transport::SlotView& in, size_t n, codec::Status s) const;
  /// Throws the encode failure s (Ok: nothing).
  void check_encoded(const SliceValues& v, size_t n, codec::Status s) const;
  /// A device rank's reduction and encoding of one slice into `out`
  /// (DeviceSlices::reduce_encode), *bytes encoded; throws as reduce() and
  /// encode() do.
  SliceValues reduce_encode(const transport::SlotView& in, size_t n, const SliceValues& local, uint8_t* dst,
                            uint8_t* out, size_t* bytes);

  transport::SendConn* send_;
  transport::RecvConn* recv_;
  PrimsArgs a_;
  ChannelStats* st_;
  uint8_t* scratch_;
  size_t esize_;
  size_t slot_bytes_;
  size_t slice_;
  SliceCodec codec_;
  DeviceSlices* dev_ = nullptr;      ///< a_.device: values in device memory
  ListStage* list_stage_ = nullptr;  ///< a_.stage as a ListStage, if it is one
  bool in_held_ = false;             ///< an incoming slot is waited for and not yet released
  /// A stage's copies prepared for verbs that only read them (send,
  /// copySend: encoding and output leave them unchanged), each valid while
  /// fewer than two prepares followed it (Stage::prepare; counted here, as
  /// this is the only Prims with a stage on its thread while it runs).
  struct Kept {
    const uint8_t* src = nullptr;
    size_t n = 0;
    void* copy = nullptr;
    uint64_t at = 0;  ///< prepares_ right after its prepare
  };
  Kept kept_[2];
  uint64_t prepares_ = 0;
};

}  // namespace ncclz::prims
