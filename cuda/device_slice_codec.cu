// prims::DeviceSliceCodec (cpp/src/prims/device_slices.hpp): the slice codec
// of a rank whose values live in device memory, on the device codec.
//
// Per call, on the codec's stream, in order (slots are host memory, values
// and staging device memory; nothing is allocated here after construction):
//
//   decode  Raw:   slot -> `to` (one H2D copy)                      ; sync
//           Coded: slot -> staging_in (H2D), decode kernels -> `to`,
//                  status -> host word (D2H)                         ; sync
//   reduce  Raw:   slot -> staging_in (H2D), add kernel (`to` = in + local; or
//                  in op local, set_value_reduction)               ; sync
//           Coded: slot -> staging_in (H2D), fused decode-and-reduce
//                  kernels (`to` = decoded + local, or the max / min of
//                  the two codes: set_value_reduction; fused(): the v3
//                  tile decoder with a reducing output) or decode kernels
//                  -> values and the reduce kernel; status (D2H)     ; sync
//   encode  Raw:   values -> slot (D2H)                              ; sync
//           Coded: Block encode kernels -> staging_out;
//                  registered slot (HostPins): copy_sized_async kernel
//                  staging_out -> the slot's device address, size and
//                  status -> host words (D2H)                        ; sync
//                  else: size and status -> host words (D2H)         ; sync
//                  staging_out -> slot, `size` bytes (D2H)           ; sync
//   reduce_encode (a step that reduces and sends: recvReduceSend,
//           recvReduceCopySend): reduce's work, then encode's, then one
//           sync for both (set_fused_step(false): reduce, then encode)
//   copy    D2D copy                                                 ; (ordered, no sync)
//   synchronize                                                      ; sync
//
// Coded floats (lossless F32 / BF16 / F16, and U8's bytes: FloatHuff slices,
// Raw where that is not smaller, as the CPU's encode_slice with allow_rans =
// false): the
// received header is read on the host; a Raw slice's values go straight to
// their place (H2D), a FloatHuff slice is staged and decoded
// (FloatHuffCoder); a reduction decodes into the codec's values and
// reduces them with the local ones in their type (set_value_reduction); an
// encode writes the whole slice into staging_out (FloatHuffCoder::
// encode_slice) and continues as the Block encode does.
//
// The sync at the end of each call is what the slot protocol needs: the step
// releases the received slot right after decode/reduce and posts the
// outgoing one right after encode. The received slot's header is read by the
// host (it is host memory) only to compare the slice's length with the
// slot's (bytes after the slice are Corrupt, as SliceCodec says) and for the
// incoming predictor.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "codec/slice_frame.hpp"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_float_huff.hpp"
#include "ncclz/error.hpp"
#include "prims/device_slices.hpp"

namespace ncclz::prims {

using codec::ElemType;
using codec::Status;

// The codec's device words (d_size) and their page-locked copies (h_size):
// [0] the encoded slice's size, [1] the encoder's status, [2] the decoder's
// status (a fused reduce-and-encode reads all three after one sync).
namespace {
constexpr int kEncStatus = 1, kDecStatus = 2, kWords = 3;
}  // namespace

struct DeviceSliceCodec::Impl {
  explicit Impl(void* stream) : dc(stream) {}
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  /// Waits for the stream's work, then frees (null pointers are no-ops).
  ~Impl() {
    dc.synchronize();
    cudaFree(staging_in);
    cudaFree(staging_out);
    cudaFree(values);
    cudaFree(d_size);
    cudaFreeHost(h_size);
    cudaFree(fuse);
  }
  cuda::DeviceCodec dc;
  std::unique_ptr<cuda::FloatHuffCoder> fh;  ///< Coded floats' coder (on dc's stream)
  uint8_t* staging_in = nullptr;             ///< device: a received slot's bytes
  uint8_t* staging_out = nullptr;            ///< device: an encoded slice
  uint8_t* values = nullptr;                 ///< device: a decoded incoming slice (reductions)
  uint64_t* d_size = nullptr;                ///< device: [0] size, [1] encode status, [2] decode status (kWords)
  uint64_t* h_size = nullptr;                ///< page-locked host: the same, read back
  uint8_t* fuse = nullptr;                   ///< device: decode_reduce_slice_async's scratch (Coded)
};

namespace {

std::string cuda_what(const char* what, int e) {
  return std::string("ncclz device slice codec: ") + what +
         " failed: " + (e > 0 ? cudaGetErrorString(cudaError_t(e)) : "rejected on the host") + " (" +
         std::to_string(e) + ")";
}

}  // namespace

DeviceSliceCodec::DeviceSliceCodec(ElemType type, WireMode mode, const codec::EncodeOptions& enc, bool int_sum,
                                   size_t slot_bytes, size_t slice_elems, void* stream, const HostPins* pins)
    : type_(type),
      mode_(mode),
      enc_(enc),
      int_sum_(int_sum),
      slot_bytes_(slot_bytes),
      slice_elems_(slice_elems),
      esize_(codec::elem_size(type)),
      pins_(pins) {
  using Choice = codec::EncodeOptions::Choice;
  floats_ = mode == WireMode::Coded && !codec::is_code_type(type);
  if (floats_) {
    if (!codec::codec_accepts(codec::Codec::FloatHuff, type, codec::Predictor::None)) {
      throw InvalidArgument(
          "ncclz device slice codec: Coded mode codes integer codes (int32, int64) and, lossless, float32, bfloat16, "
          "float16 and bytes (FloatHuff); not this element type");
    }
    if (enc.choice != Choice::Auto && enc.choice != Choice::FloatHuff && enc.choice != Choice::Raw) {
      throw InvalidArgument(
          "ncclz device slice codec: lossless floats and bytes are coded with FloatHuff (EncodeOptions::choice Auto, "
          "FloatHuff or Raw); not with FloatExp, Sparse or rANS");
    }
    raw_only_ = enc.choice == Choice::Raw;
  } else if (mode == WireMode::Coded) {
    const bool forced_block =
        enc.choice == Choice::Block && enc.predictor >= 0 && enc.predictor <= int(codec::Predictor::Lorenzo3D);
    const bool selects = enc.choice == Choice::Auto || enc.choice == Choice::Raw || enc.choice == Choice::Sparse;
    if (!forced_block && !selects) {
      throw InvalidArgument(
          "ncclz device slice codec: Coded mode codes with the selector (EncodeOptions::choice Auto, Raw or Sparse: "
          "the device selector, without Rans) or the Block codec with a forced predictor (choice = Block, "
          "predictor >= 0); not with rANS or FloatExp");
    }
    selects_ = selects;
  }
  if (int_sum && !codec::is_code_type(type)) {
    throw InvalidArgument("ncclz device slice codec: reductions are wrapping sums of int32 or int64 codes");
  }
  if (slice_elems == 0 || slice_elems > 0xFFFFFFFFu ||
      slot_bytes < codec::max_slice_bytes(type, uint32_t(slice_elems))) {
    throw InvalidArgument("ncclz device slice codec: slots of " + std::to_string(slot_bytes) +
                          " bytes cannot hold slices of " + std::to_string(slice_elems) + " elements");
  }
  d_ = stream ? std::make_unique<Impl>(stream) : std::make_unique<Impl>();
  int e = d_->dc.status();
  if (e == 0 && mode == WireMode::Coded && !floats_) e = d_->dc.reserve(slice_elems, uint32_t(slice_elems));
  if (e == 0 && floats_) {
    d_->fh = std::make_unique<cuda::FloatHuffCoder>(d_->dc.stream());
    e = d_->fh->reserve(slice_elems);
  }
  if (e == 0) e = int(cudaMalloc(reinterpret_cast<void**>(&d_->staging_in), slot_bytes));
  if (e == 0) e = int(cudaMalloc(reinterpret_cast<void**>(&d_->staging_out), slot_bytes));
  if (e == 0) e = int(cudaMalloc(reinterpret_cast<void**>(&d_->values), slice_elems * esize_));
  if (e == 0) e = int(cudaMalloc(reinterpret_cast<void**>(&d_->d_size), kWords * sizeof(uint64_t)));
  if (e == 0) e = int(cudaMallocHost(reinterpret_cast<void**>(&d_->h_size), kWords * sizeof(uint64_t)));
  if (e == 0 && mode == WireMode::Coded && !floats_) {
    e = int(cudaMalloc(reinterpret_cast<void**>(&d_->fuse),
                       cuda::decode_reduce_scratch_bytes(type, uint32_t(slice_elems))));
  }
  fused_ = d_->dc.kernels() == 3;
  if (e == 0) e = d_->dc.synchronize();
  if (e != 0) throw Error(cuda_what("setting up (device memory, stream)", e));  // d_ frees what was allocated
}

DeviceSliceCodec::~DeviceSliceCodec() = default;

void DeviceSliceCodec::set_value_reduction(RedOp op) {
  if (mode_ == WireMode::Coded && !floats_ && op == RedOp::Prod) {
    throw InvalidArgument(
        "ncclz device slice codec: Coded integer codes reduce by sum, max or min (a lossy call offers no prod)");
  }
  value_op_ = int(op);
}

void* DeviceSliceCodec::stream() const { return d_->dc.stream(); }

std::string DeviceSliceCodec::device_error() const {
  if (cuda_error_ == 0) return {};
  const cudaError_t e = cudaError_t(cuda_error_);
  return "CUDA error " + std::to_string(cuda_error_) + " (" + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
}

Status DeviceSliceCodec::fail(int e) {
  note_cuda_error(e);
  return e < 0 ? Status(-e) : Status::Unsupported;
}

void DeviceSliceCodec::note_cuda_error(int e) {
  if (e <= 0) return;
  cuda_error_ = e;
  // The failed call left e as this thread's last error: taken here, so that
  // the next launch of this thread (any stream's, any codec's) that checks
  // cudaGetLastError reports only its own.
  (void)cudaGetLastError();
}

bool DeviceSliceCodec::sync() {
  const int e = d_->dc.synchronize();
  note_cuda_error(e);
  return e == 0;
}

codec::Predictor DeviceSliceCodec::predictor_for(const SliceValues&, size_t) const {
  return codec::Predictor(enc_.predictor);
}

bool DeviceSliceCodec::stage_in(const uint8_t* in, size_t len) {
  const cudaError_t e =
      cudaMemcpyAsync(d_->staging_in, in, len, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream()));
  note_cuda_error(int(e));
  return e == cudaSuccess;
}

int* DeviceSliceCodec::status_word(int i) const { return reinterpret_cast<int*>(d_->d_size + i); }

Status DeviceSliceCodec::decode_staged(const uint8_t* in, size_t len, size_t n, uint8_t* to) {
  codec::SliceHeader h;
  const int r = d_->dc.decode_slice_async(d_->staging_in, len, type_, uint32_t(n), to, status_word(kDecStatus));
  if (const Status s = read_decode_status(r); s != Status::Ok) return s;
  if (!sync()) return Status::Unsupported;
  return decoded(in, len, &h);
}

Status DeviceSliceCodec::read_decode_status(int r) {
  if (r == 0) {
    r = int(cudaMemcpyAsync(d_->h_size + kDecStatus, status_word(kDecStatus), sizeof(int), cudaMemcpyDeviceToHost,
                            static_cast<cudaStream_t>(stream())));
  }
  return r == 0 ? Status::Ok : fail(r);
}

Status DeviceSliceCodec::decoded(const uint8_t* in, size_t len, codec::SliceHeader* h) const {
  int st = 0;
  std::memcpy(&st, d_->h_size + kDecStatus, sizeof st);
  if (Status(st) != Status::Ok) return Status(st);
  // The whole slot is the slice (SliceCodec: bytes after it are Corrupt).
  if (codec::read_header(in, len, h) != Status::Ok || codec::kHeaderBytes + size_t(h->payload_bytes) != len) {
    return Status::Corrupt;
  }
  return Status::Ok;
}

Status DeviceSliceCodec::decode(const uint8_t* in, size_t len, size_t n, uint8_t* to, SliceValues* out) {
  cuda_error_ = 0;
  *out = SliceValues::of_dense(to);
  if (mode_ == WireMode::Raw) {
    if (len != n * esize_) return Status::CountMismatch;
    const cudaError_t e = cudaMemcpyAsync(to, in, len, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream()));
    if (e != cudaSuccess) return fail(int(e));
    return sync() ? Status::Ok : Status::Unsupported;
  }
  if (floats_) {
    codec::SliceHeader h;
    if (const Status s = float_in(in, len, n, to); s != Status::Ok) return s;
    if (!sync()) return Status::Unsupported;
    return decoded(in, len, &h);
  }
  if (len > slot_bytes_) return Status::Corrupt;
  if (!stage_in(in, len)) return Status::Unsupported;
  return decode_staged(in, len, n, to);
}

Status DeviceSliceCodec::float_in(const uint8_t* in, size_t len, size_t n, uint8_t* to) {
  codec::SliceHeader h;
  if (const Status s = codec::read_slice_header(in, len, type_, uint32_t(n), &h); s != Status::Ok) return s;
  if (codec::kHeaderBytes + size_t(h.payload_bytes) != len) return Status::Corrupt;  // bytes after the slice
  const cudaStream_t s = static_cast<cudaStream_t>(stream());
  if (h.codec == codec::Codec::Raw) {
    if (!codec::raw_payload_valid(h)) return Status::Corrupt;
    const int ok = int(Status::Ok);
    std::memcpy(d_->h_size + kDecStatus, &ok, sizeof ok);  // no decoder runs: read back as Ok
    const cudaError_t e = cudaMemcpyAsync(to, in + codec::kHeaderBytes, h.payload_bytes, cudaMemcpyHostToDevice, s);
    return e == cudaSuccess ? Status::Ok : fail(int(e));
  }
  // What a rank coding without rANS sends (allow_rans = false): FloatHuff.
  if (h.codec != codec::Codec::FloatHuff) return Status::Unsupported;
  if (!stage_in(in, len)) return Status::Unsupported;
  return read_decode_status(
      d_->fh->decode(d_->staging_in + codec::kHeaderBytes, h.payload_bytes, type_, n, to, status_word(kDecStatus)));
}

Status DeviceSliceCodec::reduce_async(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                                      SliceValues* out) {
  *out = SliceValues::of_dense(to);
  if (local.is_list || (!int_sum_ && value_op_ < 0)) return Status::Unsupported;
  if (floats_) {
    // Decoded into the codec's values, then incoming op local (SliceCodec's order).
    if (const Status s = float_in(in, len, n, d_->values); s != Status::Ok) return s;
    const int r =
        cuda::reduce_values_async(stream(), type_, cuda::ReduceOp(uint8_t(value_op_)), to, d_->values, local.dense, n);
    return r == 0 ? Status::Ok : fail(r);
  }
  if (mode_ == WireMode::Raw) {
    if (len != n * esize_) return Status::CountMismatch;
    if (!stage_in(in, len)) return Status::Unsupported;
    // incoming op local, as SliceCodec::reduce on the host
    const int r = value_op_ >= 0 ? cuda::reduce_values_async(stream(), type_, cuda::ReduceOp(uint8_t(value_op_)), to,
                                                             d_->staging_in, local.dense, n)
                                 : cuda::add_codes_async(stream(), type_, to, d_->staging_in, local.dense, n);
    return r == 0 ? Status::Ok : fail(r);
  }
  if (len > slot_bytes_) return Status::Corrupt;
  if (!stage_in(in, len)) return Status::Unsupported;
  // Codes: summed (wrapping), or their max / min (set_value_reduction: a
  // lossy max / min; max and min of codes are those of the values they code).
  // Fused (decode_reduce_slice_async: the codes never reach memory) unless
  // the slice's predictor is a Lorenzo one; else decode into the codec's
  // values, then reduce. The reduction is enqueued before the status is read
  // back: on an error the result is unspecified and unused.
  // Only Block slices without a Lorenzo predictor fuse (Raw and Sparse
  // slices, e.g. from the selector, take the two steps).
  const auto op = cuda::ReduceOp(uint8_t(value_op_ >= 0 ? value_op_ : int(RedOp::Sum)));
  codec::SliceHeader h0;
  const bool fusable = codec::read_header(in, len, &h0) == Status::Ok && h0.codec == codec::Codec::Block &&
                       h0.predictor != codec::Predictor::Lorenzo2D && h0.predictor != codec::Predictor::Lorenzo3D;
  int r = 0;
  if (fused_ && fusable) {
    r = cuda::decode_reduce_slice_async(stream(), d_->fuse, d_->staging_in, len, type_, uint32_t(n), op, local.dense,
                                        to, status_word(kDecStatus));
  } else {
    r = d_->dc.decode_slice_async(d_->staging_in, len, type_, uint32_t(n), d_->values, status_word(kDecStatus));
    if (r == 0) r = cuda::reduce_values_async(stream(), type_, op, to, d_->values, local.dense, n);
  }
  return read_decode_status(r);
}

Status DeviceSliceCodec::reduced(const uint8_t* in, size_t len, SliceValues* out) const {
  if (mode_ == WireMode::Raw) return Status::Ok;
  codec::SliceHeader h;
  if (const Status s = decoded(in, len, &h); s != Status::Ok) return s;
  // As SliceCodec: a partial sum keeps its incoming slice's predictor (for a selector).
  if (h.codec != codec::Codec::Raw) out->predictor = int(h.predictor);
  return Status::Ok;
}

Status DeviceSliceCodec::reduce(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                                SliceValues* out) {
  cuda_error_ = 0;
  if (const Status s = reduce_async(in, len, n, local, to, out); s != Status::Ok) return s;
  if (!sync()) return Status::Unsupported;
  return reduced(in, len, out);
}

Status DeviceSliceCodec::encode_async(const SliceValues& v, size_t n, uint8_t* out, void** d_slot) {
  *d_slot = nullptr;
  if (v.is_list) return Status::Unsupported;
  const cudaStream_t s = static_cast<cudaStream_t>(stream());
  if (mode_ == WireMode::Raw) {
    const cudaError_t e = cudaMemcpyAsync(out, v.dense, n * esize_, cudaMemcpyDeviceToHost, s);
    return e == cudaSuccess ? Status::Ok : fail(int(e));
  }
  int* d_status = status_word(kEncStatus);
  int r = 0;
  if (floats_) {
    r = d_->fh->encode_slice(v.dense, type_, n, d_->staging_out, slot_bytes_,
                             reinterpret_cast<unsigned long long*>(d_->d_size), d_status, raw_only_);
  } else if (selects_) {
    // The device selector (one slice): the CPU's choice among Raw, Block x
    // predictor and Sparse, without Rans.
    codec::EncodeOptions o = enc_;
    o.allow_rans = false;
    r = d_->dc.encode_slices_select_async(v.dense, type_, n, uint32_t(n), o, d_->staging_out, slot_bytes_, d_->d_size,
                                          d_status);
  } else {
    r = d_->dc.encode_slice_async(v.dense, type_, uint32_t(n), predictor_for(v, n), enc_.row, enc_.plane,
                                  d_->staging_out, slot_bytes_, d_->d_size, d_status);
  }
  // A registered slot takes the slice from the device (the size is known
  // there only) before the size is read back: one synchronisation.
  *d_slot = pins_ ? pins_->device_pointer(out, slot_bytes_) : nullptr;
  if (r == 0 && *d_slot) r = cuda::copy_sized_async(s, *d_slot, d_->staging_out, d_->d_size, d_status, slot_bytes_);
  if (r == 0) r = int(cudaMemcpyAsync(d_->h_size, d_->d_size, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost, s));
  return r == 0 ? Status::Ok : fail(r);
}

Status DeviceSliceCodec::encoded(size_t n, uint8_t* out, const void* d_slot, size_t* bytes) {
  if (mode_ == WireMode::Raw) {
    *bytes = n * esize_;
    return Status::Ok;
  }
  int st = 0;
  std::memcpy(&st, d_->h_size + kEncStatus, sizeof st);
  if (Status(st) != Status::Ok) return Status(st);
  const size_t size = size_t(d_->h_size[0]);
  if (size == 0 || size > slot_bytes_) return Status::NoSpace;
  if (d_slot == nullptr) {
    // Only the slice's own bytes cross to the host.
    const cudaError_t e =
        cudaMemcpyAsync(out, d_->staging_out, size, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream()));
    if (e != cudaSuccess) return fail(int(e));
    if (!sync()) return Status::Unsupported;
  }
  *bytes = size;
  return Status::Ok;
}

Status DeviceSliceCodec::encode(const SliceValues& v, size_t n, uint8_t* out, size_t* bytes) {
  cuda_error_ = 0;
  *bytes = 0;
  void* d_slot = nullptr;
  if (const Status s = encode_async(v, n, out, &d_slot); s != Status::Ok) return s;
  if (!sync()) return Status::Unsupported;
  return encoded(n, out, d_slot, bytes);
}

void DeviceSliceCodec::reduce_encode(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                                     SliceValues* v, uint8_t* slot, size_t* bytes, Status* reduce_status,
                                     Status* encode_status) {
  if (!fused_step_) {
    DeviceSlices::reduce_encode(in, len, n, local, to, v, slot, bytes, reduce_status, encode_status);
    return;
  }
  cuda_error_ = 0;
  *bytes = 0;
  *encode_status = Status::Unsupported;
  // Both on the stream, one synchronisation: the encoder reads the sum the
  // reduction wrote; a failed decode is reported first (its sum is garbage
  // and what was encoded from it is not posted).
  *reduce_status = reduce_async(in, len, n, local, to, v);
  if (*reduce_status != Status::Ok) return;
  void* d_slot = nullptr;
  const Status es = encode_async(*v, n, slot, &d_slot);
  if (!sync()) {
    *reduce_status = Status::Unsupported;
    return;
  }
  *reduce_status = reduced(in, len, v);
  if (*reduce_status != Status::Ok) return;
  *encode_status = es != Status::Ok ? es : encoded(n, slot, d_slot, bytes);
}

Status DeviceSliceCodec::synchronize() {
  cuda_error_ = 0;
  return sync() ? Status::Ok : Status::Unsupported;
}

Status DeviceSliceCodec::copy(uint8_t* dst, const uint8_t* src, size_t bytes) {
  cuda_error_ = 0;
  if (bytes == 0 || dst == src) return Status::Ok;
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream()));
  return e == cudaSuccess ? Status::Ok : fail(int(e));
}

}  // namespace ncclz::prims
