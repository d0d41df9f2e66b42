// The slice codec of a rank whose values live in device memory: the
// interface through which the step routine (prims.hpp) decodes, reduces and
// encodes slices on a GPU, and its implementation on the device codec
// (DeviceSliceCodec, cuda/device_slice_codec.cu; built only with CUDA or in
// the CPU emulator, tools/cuda_emu).
//
// A Prims whose PrimsArgs::device is set calls these three methods at its
// codec points instead of SliceCodec's (same contract, same wire bytes):
//
//   memory   received and outgoing slot bytes: host memory (the transport's
//            slots; page-locked and mapped where registered, HostPins:
//            then copies are DMA and a coded encode writes its slice into
//            the slot from the device; pageable otherwise: every copy is a
//            cudaMemcpyAsync, correct either way);
//            values (the verbs' src and dst, the Prims scratch, `to`,
//            `local`, SliceValues::dense): device memory; the codec's own
//            staging: device memory it owns (nothing is allocated per call).
//   stream   every copy and kernel goes on the codec's stream (its own, or
//            the caller's, e.g. the framework's current stream), in order.
//   sync     each call returns only after its work on the stream finished
//            (one cudaStreamSynchronize per call; two for a coded encode
//            into an unregistered slot: the slice's size is read back
//            before its bytes are copied):
//            the step then releases the received slot and posts the
//            outgoing one, so a slot's bytes are never read or written by
//            the device after the peer may reuse them.
//
// So only the slices' bytes cross PCIe (coded bytes in Coded mode). What is
// not there yet (docs/GPU.md, "Where the device codec goes next"): lists of
// nonzeros (no Stage on a device rank), decoding from a mapped slot
// directly (one DMA copy into staging instead), overlap of the next slice's
// coding with the current slot's transfer inside one rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/slice.hpp"
#include "ncclz/communicator.hpp"
#include "prims/host_pins.hpp"
#include "prims/slice_codec.hpp"

namespace ncclz::prims {

/// SliceCodec's three calls (and the COPY verbs' output copy) on values in
/// device memory; see the file comment for the memory, stream and sync rules.
class DeviceSlices {
 public:
  virtual ~DeviceSlices() = default;
  virtual WireMode mode() const = 0;
  /// SliceCodec::decode (no lists): the received slot `in` (len bytes, host
  /// memory) into `to` (n elements, device memory).
  virtual codec::Status decode(const uint8_t* in, size_t len, size_t n, uint8_t* to, SliceValues* out) = 0;
  /// SliceCodec::reduce for a dense local slice: `to` = incoming + local
  /// (n elements, device memory; `to` may be local.dense).
  virtual codec::Status reduce(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                               SliceValues* out) = 0;
  /// SliceCodec::encode of dense device values into the slot `out` (host memory).
  virtual codec::Status encode(const SliceValues& v, size_t n, uint8_t* out, size_t* bytes) = 0;
  /// bytes from src to dst, both device memory (the COPY verbs' output);
  /// ordered on the stream, not waited for (synchronize() waits).
  virtual codec::Status copy(uint8_t* dst, const uint8_t* src, size_t bytes) = 0;
  /// Waits for every call's work on the stream (the copies included): the
  /// end of a schedule, whose outputs another stream or the host reads next.
  virtual codec::Status synchronize() = 0;
  /// reduce() into `to`, then encode() of the sum into `slot`, for a step
  /// that reduces and sends: *reduce_status is reduce's status, and
  /// *encode_status encode's where the reduction succeeded. An
  /// implementation may run both before one synchronisation (the received
  /// slot is read and the outgoing one written when it returns).
  virtual void reduce_encode(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                             SliceValues* v, uint8_t* slot, size_t* bytes, codec::Status* reduce_status,
                             codec::Status* encode_status) {
    *bytes = 0;
    *encode_status = codec::Status::Unsupported;
    *reduce_status = reduce(in, len, n, local, to, v);
    if (*reduce_status == codec::Status::Ok) *encode_status = encode(*v, n, slot, bytes);
  }
  /// The CUDA error the last failed call failed with ("" where it failed on
  /// the data): the step then reports a device failure, not a corrupt slice.
  virtual std::string device_error() const { return {}; }
};

/// DeviceSlices on the device codec (cpp/include/ncclz/cuda_codec.hpp).
/// Defined only where cuda/ is built (NCCLZ_WITH_CUDA: the ncclz_cuda
/// library, or the emulator's); declared everywhere.
///
/// Wire modes: Raw (a slot is the elements' bytes: any element type to move,
/// reductions for I32/I64 sums), Coded for lossless F32/BF16/F16 values
/// and U8 bytes (FloatHuff slices, Raw where not smaller: codec::encode_slice with
/// allow_rans = false and choice Auto; enc.choice FloatHuff the same, Raw
/// only Raw slices; reductions with set_value_reduction), and Coded for
/// integer codes (I32/I64, the lossy path's wire type), either with the device selector (enc.choice
/// Auto, Raw or Sparse: per slice the CPU selector's rule picks Raw, Block
/// with a predictor, or Sparse, never Rans; byte-identical to
/// codec::encode_slice with the same options and allow_rans = false) or with
/// enc.choice == Block and enc.predictor forced (byte-identical to
/// codec::encode_slice with that forced choice). It decodes Raw, Block and
/// Sparse slices with any predictor (what any rank that codes without Rans
/// sends). Reductions: wrapping integer sums (int_sum), or any element
/// type's reduction with an operator in Raw mode, the max / min of Coded
/// integer codes (a lossy max / min), or Coded floats' (set_value_reduction).
///
/// Owns a DeviceCodec (on `stream`, a cudaStream_t, or a stream of its own
/// when null) reserved for slices of slice_elems, two device staging slots
/// of slot_bytes (received bytes, encoded bytes), a device slice of values
/// (the decoded incoming slice of a reduction), a device word for the size
/// and status, and page-locked host words they are read back into: all
/// allocated here, none per call. One object per Prims, used by its thread.
/// `pins` (may be null; outlives the codec): the registered slots, looked up
/// per encode.
class DeviceSliceCodec final : public DeviceSlices {
 public:
  /// Throws InvalidArgument for a configuration it does not code (and says
  /// which), Error for a CUDA failure (with the CUDA error).
  DeviceSliceCodec(codec::ElemType type, WireMode mode, const codec::EncodeOptions& enc, bool int_sum,
                   size_t slot_bytes, size_t slice_elems, void* stream = nullptr, const HostPins* pins = nullptr);
  ~DeviceSliceCodec() override;
  DeviceSliceCodec(const DeviceSliceCodec&) = delete;
  DeviceSliceCodec& operator=(const DeviceSliceCodec&) = delete;

  WireMode mode() const override { return mode_; }
  codec::Status decode(const uint8_t* in, size_t len, size_t n, uint8_t* to, SliceValues* out) override;
  codec::Status reduce(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                       SliceValues* out) override;
  codec::Status encode(const SliceValues& v, size_t n, uint8_t* out, size_t* bytes) override;
  codec::Status copy(uint8_t* dst, const uint8_t* src, size_t bytes) override;
  codec::Status synchronize() override;
  /// Reduce's and encode's work on the stream, then one synchronisation
  /// (unless set_fused_step(false)).
  void reduce_encode(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to, SliceValues* v,
                     uint8_t* slot, size_t* bytes, codec::Status* reduce_status, codec::Status* encode_status) override;

  /// Reductions with `op` instead of wrapping integer sums only, with
  /// prims::reduce_fn(type, op)'s bits on the host: Raw slices and Coded
  /// floats in the values' own arithmetic (but for the payload of a NaN an
  /// operation on NaNs makes: cuda::reduce_values_async), an uncompressed or
  /// lossless device rank's REDUCE step; Coded integer codes by Max or Min
  /// (fused into the decode where fused(): cuda::decode_reduce_slice_async),
  /// a lossy max / min's (the quantizer is monotone, so the largest code is
  /// the largest value's). Throws InvalidArgument for Prod of Coded codes.
  void set_value_reduction(RedOp op);

  /// The CUDA error (a cudaError_t) the last call failed with, 0 if none: a
  /// call that fails in CUDA returns Status::Unsupported and sets it.
  int cuda_error() const { return cuda_error_; }
  /// "CUDA error N (name: text)" for cuda_error(), "" for 0.
  std::string device_error() const override;
  /// The codec's stream (a cudaStream_t).
  void* stream() const;
  /// Whether reduce() decodes and reduces in one pass (cuda::decode_reduce_slice_async,
  /// the v3 tile decoder) rather than decode kernels and a reduce kernel. The
  /// initial value: the DeviceCodec's kernels() == 3 (NCCLZ_DEVICE_CODEC=v3),
  /// so that the default follows the kernels a GPU run has proven. Same bits.
  bool fused() const { return fused_; }
  void set_fused(bool on) { fused_ = on; }
  /// Whether reduce_encode() synchronises once for both (the default) or
  /// runs reduce() and encode() (NCCLZ_DEVICE_FUSED_STEP=0, an A/B switch).
  bool fused_step() const { return fused_step_; }
  void set_fused_step(bool on) { fused_step_ = on; }

 private:
  /// The predictor slice values are Block-coded with. The seam for the
  /// device selector (issue 15): today the forced enc.predictor, as the CPU
  /// uses it when forced; a selector would choose here per slice (and the
  /// CPU-side reuse of an incoming partial sum's predictor, v.predictor).
  codec::Predictor predictor_for(const SliceValues& v, size_t n) const;
  /// The received slot's bytes in device staging; false on a CUDA error.
  bool stage_in(const uint8_t* in, size_t len);
  /// Decodes the staged slice (len bytes, n elements) into `to` and reads
  /// the status back (syncs): the decoder's status, Corrupt for bytes after
  /// the slice, Unsupported on a CUDA error.
  codec::Status decode_staged(const uint8_t* in, size_t len, size_t n, uint8_t* to);
  /// After a decode's launch (r: its return value): enqueues the read-back
  /// of the decoder's status (Ok, or the failure).
  codec::Status read_decode_status(int r);
  /// After the sync: the decoder's status, and whether the slice fills the
  /// slot (Corrupt otherwise); the header in *h.
  codec::Status decoded(const uint8_t* in, size_t len, codec::SliceHeader* h) const;
  /// reduce()'s work enqueued (no sync); Ok, or why it could not be.
  codec::Status reduce_async(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                             SliceValues* out);
  /// reduce()'s end after the sync (statuses; the incoming predictor).
  codec::Status reduced(const uint8_t* in, size_t len, SliceValues* out) const;
  /// encode()'s work enqueued (no sync): *d_slot is the registered slot's
  /// device address the slice was copied to, or null (copied after the sync).
  codec::Status encode_async(const SliceValues& v, size_t n, uint8_t* out, void** d_slot);
  /// encode()'s end after the sync: statuses, size, and the slice's copy
  /// into an unregistered slot (a second sync).
  codec::Status encoded(size_t n, uint8_t* out, const void* d_slot, size_t* bytes);
  /// Coded floats: the received slot's values (a Raw slice's bytes, or the
  /// FloatHuff payload decoded) to `to`, enqueued; the host-side header
  /// checks' status, or Ok (the decoder's status is read back as decode's).
  codec::Status float_in(const uint8_t* in, size_t len, size_t n, uint8_t* to);
  /// Device status word i (kEncStatus, kDecStatus in the .cu file).
  int* status_word(int i) const;
  codec::Status fail(int cuda_error);
  /// Records a CUDA error (> 0) and clears it as the thread's last error.
  void note_cuda_error(int e);
  bool sync();

  struct Impl;
  std::unique_ptr<Impl> d_;
  codec::ElemType type_;
  WireMode mode_;
  codec::EncodeOptions enc_;
  bool int_sum_;
  int value_op_ = -1;  ///< set_value_reduction's operator (a RedOp), -1: none
  size_t slot_bytes_;
  size_t slice_elems_;
  size_t esize_;
  int cuda_error_ = 0;
  bool fused_ = false;
  bool fused_step_ = true;
  bool selects_ = false;   ///< encode() runs the device selector (enc.choice Auto, Raw or Sparse)
  bool floats_ = false;    ///< Coded floats (and bytes): FloatHuff slices (lossless F32, BF16, F16, U8)
  bool raw_only_ = false;  ///< Coded floats with enc.choice Raw: Raw slices only
  const HostPins* pins_ = nullptr;
};

}  // namespace ncclz::prims
