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
  /// bytes from src to dst, both device memory (the COPY verbs' output).
  virtual codec::Status copy(uint8_t* dst, const uint8_t* src, size_t bytes) = 0;
  /// The CUDA error the last failed call failed with ("" where it failed on
  /// the data): the step then reports a device failure, not a corrupt slice.
  virtual std::string device_error() const { return {}; }
};

/// DeviceSlices on the device codec (cpp/include/ncclz/cuda_codec.hpp).
/// Defined only where cuda/ is built (NCCLZ_WITH_CUDA: the ncclz_cuda
/// library, or the emulator's); declared everywhere.
///
/// Wire modes: Raw (a slot is the elements' bytes: any element type to move,
/// reductions for I32/I64 sums) and Coded for integer codes (I32/I64, the
/// lossy path's wire type), either with the device selector (enc.choice
/// Auto, Raw or Sparse: per slice the CPU selector's rule picks Raw, Block
/// with a predictor, or Sparse, never Rans; byte-identical to
/// codec::encode_slice with the same options and allow_rans = false) or with
/// enc.choice == Block and enc.predictor forced (byte-identical to
/// codec::encode_slice with that forced choice). It decodes Raw, Block and
/// Sparse slices with any predictor (what any rank that codes without Rans
/// sends). Reductions: wrapping integer sums (int_sum) only.
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

  /// The CUDA error (a cudaError_t) the last call failed with, 0 if none: a
  /// call that fails in CUDA returns Status::Unsupported and sets it.
  int cuda_error() const { return cuda_error_; }
  /// "CUDA error N (name: text)" for cuda_error(), "" for 0.
  std::string device_error() const override;
  /// The codec's stream (a cudaStream_t).
  void* stream() const;
  /// Whether reduce() decodes and adds in one pass (cuda::decode_add_slice_async,
  /// the v3 tile decoder) rather than decode kernels and an add kernel. The
  /// initial value: the DeviceCodec's kernels() == 3 (NCCLZ_DEVICE_CODEC=v3),
  /// so that the default follows the kernels a GPU run has proven. Same bits.
  bool fused() const { return fused_; }
  void set_fused(bool on) { fused_ = on; }

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
  /// After a decode's launch (r: its return value): reads the device status
  /// back (syncs) and checks that the slice fills the slot; the header in *h.
  codec::Status finish_decode(int r, const uint8_t* in, size_t len, codec::SliceHeader* h);
  codec::Status fail(int cuda_error);
  bool sync();

  struct Impl;
  std::unique_ptr<Impl> d_;
  codec::ElemType type_;
  WireMode mode_;
  codec::EncodeOptions enc_;
  bool int_sum_;
  size_t slot_bytes_;
  size_t slice_elems_;
  size_t esize_;
  int cuda_error_ = 0;
  bool fused_ = false;
  bool selects_ = false;  ///< encode() runs the device selector (enc.choice Auto, Raw or Sparse)
  const HostPins* pins_ = nullptr;
};

}  // namespace ncclz::prims
