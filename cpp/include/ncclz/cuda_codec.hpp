// Device codec: quantizer, predictors, the Block and Sparse coders and the
// slice selector on a CUDA GPU, producing the same bytes as the CPU codec
// (docs/FORMAT.md). Implemented in cuda/ (device_codec.cu, quantize_kernels.cu,
// slice_kernels.cu, the v3 kernels encode_v3.cu, decode_v3.cu, and the
// selector with the Sparse coder, select_kernels.cu); built only
// with CUDA (NCCLZ_WITH_CUDA). Declared here without CUDA headers.
//
// Checked on a GPU (an NVIDIA H200, bench/results/gpu.md) and in the CPU
// emulator (tools/cuda_emu) on every CI run: tests/cpp/test_cuda_codec.cpp
// compares it with the CPU codec (tools/gpu_session.sh, docs/GPU.md).
//
// Ownership (the cuCollections pattern): a DeviceCodec, a host object, owns
// what the device work needs besides the caller's buffers: the stream (its
// own, or the caller's) and the scratch (per-block widths, offsets and
// statuses, the scans' temporary storage). Its kernels get small by-value
// handles (cuda/slice_batch.cuh) with the geometry and the scratch pointers
// of one call. The slice framing and the Block format are the CPU's own
// NCCLZ_HD functions (cpp/src/codec/slice_frame.hpp, block_frame.hpp).
//
// Conventions for every method:
//  - All pointers named d_* are device memory.
//  - Methods are asynchronous on the codec's stream: they launch kernels and
//    never synchronise with the host. Results (sizes, statuses, counts) are
//    written to device memory; read them after synchronize().
//  - The return value is 0 when everything was enqueued; a positive value is
//    the cudaError_t of the failing CUDA call; a negative value is minus a
//    codec::Status for arguments rejected on the host before anything was
//    enqueued (e.g. -int(Status::Unsupported) for a type the call does not take).
//  - Device statuses are codec::Status values stored as int.
//  - No allocation once the scratch is large enough: reserve() sizes it; a
//    call that needs more grows it (cudaMallocAsync on the stream, the old
//    block freed in stream order), so the first calls of a size allocate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {
struct EncodeOptions;  // codec/slice.hpp (the selecting encodes' options)
}  // namespace ncclz::codec

namespace ncclz::cuda {

/// Slot size that always suffices for a slice of slice_len codes: max_slice_bytes(code_t, slice_len).
inline size_t slice_slot_bytes(codec::ElemType code_t, uint32_t slice_len) {
  return codec::max_slice_bytes(code_t, slice_len);
}

class DeviceCodec {
 public:
  /// On the current device, with a stream of its own (non-blocking),
  /// destroyed with the codec.
  DeviceCodec();
  /// On the current device, its work ordered on the caller's `stream` (a
  /// cudaStream_t; nullptr: the legacy default stream), which it does not own.
  explicit DeviceCodec(void* stream);
  /// Frees the scratch (in stream order) and the codec's own stream.
  ~DeviceCodec();
  DeviceCodec(const DeviceCodec&) = delete;
  DeviceCodec& operator=(const DeviceCodec&) = delete;

  /// 0, or the cudaError_t with which creating the stream failed (every
  /// method then returns it).
  int status() const { return status_; }
  /// The codec's stream (a cudaStream_t).
  void* stream() const { return stream_; }
  /// Waits for the codec's work; returns a cudaError_t.
  int synchronize();
  /// Which slice kernels the codec launches: 3 (the default: tile kernels,
  /// two launches and one scan to encode, two launches to decode;
  /// docs/GPU.md, cuda/encode_v3.cu, cuda/decode_v3.cu; measured faster than
  /// v2 on an H200, bench/results/gpu.md runs 4 and 5), 2 (fused memory
  /// access, tiled predictor inversion) or 1 (the first, correctness-first
  /// kernels), the last two kept for side-by-side measurements; 4: the CTA
  /// slice coder, one kernel per batch with one CTA coding each whole slice
  /// (cuda/cta_slice.cuh: the persistent kernels' coder; the two fused float
  /// calls use it too under this setting). All write the same bytes and
  /// statuses. The initial value comes from NCCLZ_DEVICE_CODEC (v1, v2, v3
  /// or cta, read when the codec is created; unset or anything else: 3).
  int kernels() const { return kernels_; }
  /// Sets kernels() (1, 2, 3 or 4; any other value is ignored). Affects later calls.
  void set_kernels(int v) {
    if (v >= 1 && v <= 4) kernels_ = v;
  }
  /// Sizes the scratch for calls of up to n codes (values, for the
  /// quantizer) in slices of slice_len codes: no such call allocates (the
  /// selecting encodes' included).
  int reserve(size_t n, uint32_t slice_len);
  /// The scratch's bytes now (what reserve() and the calls have grown it to).
  size_t scratch_capacity() const { return scratch_bytes_; }

  // -------------------------------------------------------------------------
  // Quantizer (the CPU rules of cpp/src/codec/quantizer.hpp, element by
  // element: same codes, same outliers).

  /// Quantizes n values of type t (F32, F64, F16, BF16) at d_x onto the grid
  /// of half step eb (QuantGrid::from_bound(eb)) as codes of type code_t (I32
  /// or I64) at d_q. |code| <= limit (clamped to [0, max_code_limit]) as on
  /// the CPU. Outliers (non-finite, over the limit, bound not met after
  /// rounding to t) get code 0 and are not clipped: their number goes to
  /// *d_outlier_count, and if d_outlier_idx is not null their indices,
  /// increasing (the CPU's list), to d_outlier_idx[0 .. min(count, idx_cap)).
  int quantize_async(const void* d_x, codec::ElemType t, size_t n, double eb, int64_t limit, void* d_q,
                     codec::ElemType code_t, uint64_t* d_outlier_count, uint64_t* d_outlier_idx, size_t idx_cap);

  /// quantize_async with the bound checked at check_eb (>= eb) instead of eb:
  /// the grid of half step eb, an element an outlier where |x - its value| >
  /// check_eb after rounding to t. The lossy paths' rule (core::quantize_buf:
  /// the check allows for T's own rounding), for the device path of the
  /// collectives (core/device_work.hpp). No indices. exact_check: the check
  /// in double (codec::QuantGrid::exact_check, bound::LossyPlan's).
  int quantize_checked_async(const void* d_x, codec::ElemType t, size_t n, double eb, double check_eb, int64_t limit,
                             void* d_q, codec::ElemType code_t, uint64_t* d_outlier_count, bool exact_check = false);

  /// out[i] = t(q[i] * 2 eb), rounded once to t (the CPU's dequantize).
  int dequantize_async(const void* d_q, codec::ElemType code_t, size_t n, double eb, void* d_out, codec::ElemType t);

  /// Writes the original values of the outliers back: out[idx[k]] = x[idx[k]]
  /// for k < *d_count (at most idx_cap). Both arrays hold values of type t.
  /// (On the wire the raw outlier values travel separately; this is the local step.)
  int scatter_outliers_async(const void* d_x, codec::ElemType t, const uint64_t* d_idx, const uint64_t* d_count,
                             size_t idx_cap, void* d_out);

  // -------------------------------------------------------------------------
  // Slices (Block codec). A batch is an array of n integer codes cut into
  // slices of slice_len elements (the last one shorter), slice k holding
  // elements [k*slice_len, min(n, (k+1)*slice_len)). Slice k lives in the slot
  // d_buf + k*slot_bytes. S = ceil(n / slice_len) slices; n = 0 is no slice.

  /// Encodes every slice of the codes at d_q with the Block codec after
  /// predictor p, byte-identical to the CPU's
  ///   encode_slice(q_k, code_t, count_k, dst, slot_bytes, opt)
  /// with opt.choice = Block, opt.predictor = p, opt.row = row, opt.plane =
  /// plane: a slice where p does not apply (slice_predictor) uses predictor
  /// None, and a slice whose Block payload would exceed the raw size falls
  /// back to Raw (frame_slice). Writes, per slice, its size in bytes to
  /// d_sizes[k] (0 when it does not fit) and its status (Ok, NoSpace) to
  /// d_status[k].
  int encode_slices_async(const void* d_q, codec::ElemType code_t, size_t n, uint32_t slice_len, codec::Predictor p,
                          uint32_t row, uint32_t plane, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes,
                          int* d_status);

  /// Decodes every slice of a batch laid out as encode_slices_async writes it
  /// (slot k at d_src + k*slot_bytes; slice k's bytes are within the first
  /// d_lens[k] bytes of its slot, or slot_bytes when d_lens is null) into n
  /// codes of type code_t at d_out. Accepts Raw and Block slices with any
  /// predictor (FORMAT.md checks, as decode_slice) and Sparse slices with any
  /// predictor (select_kernels.cu: the CPU decoder's checks and statuses;
  /// one thread per Sparse slice); Rans and FloatExp slices give
  /// Status::Unsupported (no device decoder). Per-slice status to
  /// d_status[k]; after an error that slice's output is unspecified.
  int decode_slices_async(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n, uint32_t slice_len,
                          codec::ElemType code_t, void* d_out, int* d_status);

  /// Fused quantize + encode (the v3 tile kernels, or the CTA coder when kernels() is 4):
  /// the n values of type t (F32, F64, F16, BF16) at d_x quantized as
  /// quantize_async(d_x, t, n, eb, limit, ...) would into codes of type code_t,
  /// and those codes encoded as encode_slices_async(codes, code_t, n,
  /// slice_len, p, row, plane, d_dst, slot_bytes, d_sizes, d_status) would:
  /// the same slices, sizes and statuses, without the codes ever reaching
  /// memory. The number of outliers (values quantize_async reports: non-finite,
  /// over the limit, bound not met; coded as 0 here too) goes to
  /// *d_outlier_count; it is not 0 when some value is not within eb in the
  /// slices: the caller then falls back (quantize_async gives the indices),
  /// as the CPU's lossy path does when any rank has outliers. The Lorenzo
  /// predictors are Unsupported here (quantize_async + encode_slices_async).
  int quantize_encode_slices_async(const void* d_x, codec::ElemType t, size_t n, double eb, int64_t limit,
                                   codec::ElemType code_t, uint32_t slice_len, codec::Predictor p, uint32_t row,
                                   uint32_t plane, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes, int* d_status,
                                   uint64_t* d_outlier_count);

  /// Fused decode + dequantize (the v3 tile kernels, or the CTA coder when kernels() is 4):
  /// decode_slices_async of the batch (same arguments and per-slice
  /// statuses) followed by dequantize_async(codes, code_t, n, eb, d_out, t),
  /// writing the n values of type t (F32, F64, F16, BF16) at d_out without
  /// the codes reaching memory. A Block slice with a Lorenzo predictor gives
  /// Status::Unsupported whatever its payload, as Rans and Sparse slices do
  /// (decode_slices_async + dequantize_async decode the Lorenzo and Sparse ones).
  int decode_dequantize_slices_async(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n,
                                     uint32_t slice_len, codec::ElemType code_t, double eb, void* d_out,
                                     codec::ElemType t, int* d_status);

  /// One slice: encode_slices_async with slice_len = count (d_size, d_status: one each).
  int encode_slice_async(const void* d_q, codec::ElemType code_t, uint32_t count, codec::Predictor p, uint32_t row,
                         uint32_t plane, uint8_t* d_dst, size_t cap, uint64_t* d_size, int* d_status);

  /// One slice of `len` bytes at d_src holding `count` codes of type code_t.
  int decode_slice_async(const uint8_t* d_src, size_t len, codec::ElemType code_t, uint32_t count, void* d_out,
                         int* d_status);

 private:
  /// At least `bytes` of scratch (grown in stream order), or nullptr with *err set.
  uint8_t* scratch(size_t bytes, int* err);
  int quantize_grid_async(const void* d_x, codec::ElemType t, size_t n, double eb, double check_eb, int64_t limit,
                          void* d_q, codec::ElemType code_t, uint64_t* d_outlier_count, uint64_t* d_outlier_idx,
                          size_t idx_cap, bool exact_check = false);
  int encode_batch(const void* d_q, codec::ElemType code_t, size_t n, uint32_t slice_len, uint32_t forced_slices,
                   codec::Predictor p, uint32_t row, uint32_t plane, uint8_t* d_dst, size_t slot_bytes,
                   uint64_t* d_sizes, int* d_status);
  int decode_batch(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n, uint32_t slice_len,
                   uint32_t forced_slices, codec::ElemType code_t, void* d_out, int* d_status);

  void* stream_ = nullptr;
  bool own_stream_ = false;
  int status_ = 0;
  int kernels_ = 3;
  uint8_t* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;

 public:
  // -------------------------------------------------------------------------
  // Selecting encodes (the device selector: cuda/select_kernels.cu, its
  // schedule at the top; docs/GPU.md "Device selector"). Per slice, the CPU
  // selector's rule (codec/select_rule.hpp) on the same sample picks Raw,
  // Block with a predictor, or Sparse, with no host round trip, and records
  // it in the slice header: slice k is byte-identical to the CPU's
  //   encode_slice(q_k, code_t, count_k, dst, slot_bytes, opt')
  // where opt' is opt with allow_rans = false (the device has no Rans coder:
  // where the CPU would pick Rans, the best fast codec). opt.choice: Auto,
  // Raw, Block or Sparse (Rans, FloatExp: -Unsupported); every other field
  // as on the CPU (predictor, row/plane for the Lorenzo candidates, the
  // margins, the sample). Layout, sizes and statuses as encode_slices_async;
  // the slices decode with decode_slices_async (Sparse included) and on the
  // CPU. Scratch: the v3 encoder's plus 4 bytes per code (the Sparse
  // slices' nonzero positions), grown on the first call of a size. Whatever
  // kernels() says, the Block slices are written by the v3 kernels.

  /// Selecting encode of the n codes of type code_t (I32, I64) at d_q.
  int encode_slices_select_async(const void* d_q, codec::ElemType code_t, size_t n, uint32_t slice_len,
                                 const codec::EncodeOptions& opt, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes,
                                 int* d_status);

  /// Fused quantize + selecting encode: the slices of quantize_async(d_x, t,
  /// n, eb, limit, codes, code_t, ...) followed by encode_slices_select_async
  /// of those codes, without the codes reaching memory; the outlier count as
  /// quantize_encode_slices_async. opt.row > 1 (Lorenzo candidates) is
  /// Unsupported here.
  int quantize_encode_slices_select_async(const void* d_x, codec::ElemType t, size_t n, double eb, int64_t limit,
                                          codec::ElemType code_t, uint32_t slice_len, const codec::EncodeOptions& opt,
                                          uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes, int* d_status,
                                          uint64_t* d_outlier_count);
};

// ---------------------------------------------------------------------------
// Reductions of slices on the device (cuda/slice_reduce.cu): the REDUCE step
// of a device rank's send/receive loops (prims::DeviceSliceCodec,
// cpp/src/prims/device_slices.hpp). Same return convention as DeviceCodec's
// methods; asynchronous on `stream` (a cudaStream_t; nullptr: the legacy
// default stream); no allocation.

/// d_out[i] = d_a[i] + d_b[i] for i < n, n codes of type t (I32 or I64) in
/// wrapping two's-complement arithmetic (prims::reduce_fn(t, Sum)'s bits).
/// d_out may be d_a or d_b. Other types: -Status::Unsupported.
int add_codes_async(void* stream, codec::ElemType t, void* d_out, const void* d_a, const void* d_b, size_t n);

/// Element-wise operators of reduce_values_async (ncclz::RedOp's values:
/// Sum, Avg, Max, Min, Prod; Avg reduces as Sum, its division comes after).
enum class ReduceOp : uint8_t { Sum = 0, Avg = 1, Max = 2, Min = 3, Prod = 4 };

/// d_out[i] = d_a[i] op d_b[i] for i < n values of type t, the bits of
/// prims::reduce_fn(t, op) on the host for every input (NaN, infinities and
/// subnormals included): F32 / F64 in their own IEEE arithmetic, F16 / BF16
/// widened exactly to float, combined and rounded once, integers (I32, I64,
/// U8) wrapping; max / min return a NaN operand where there is one. A sum or
/// product of NaNs is a NaN whose payload may differ from the host's (IEEE
/// 754 leaves it open; x86 keeps an operand's, GPUs return a canonical one).
/// a is the incoming operand, b the local one.
/// The REDUCE step of an uncompressed or lossless device rank. d_out may be
/// d_a or d_b. An unknown type or op: -Status::Unsupported.
int reduce_values_async(void* stream, codec::ElemType t, ReduceOp op, void* d_out, const void* d_a, const void* d_b,
                        size_t n);

/// d[i] = d[i] / n for `count` values of type t, prims::divide_in_place's
/// bits (floats divide in their own arithmetic, F16 / BF16 through float,
/// integers truncate toward zero): the avg of an uncompressed device call.
int divide_values_async(void* stream, codec::ElemType t, void* d, size_t count, int n);

/// Copies d_size[0] bytes from d_src to d_dst, a size known only on the
/// device (an encode's output; d_dst: e.g. the device address of a mapped,
/// page-locked host slot), unless *d_status is nonzero or the size exceeds
/// `cap` (then nothing: the caller reads both back and reports it).
int copy_sized_async(void* stream, void* d_dst, const void* d_src, const uint64_t* d_size, const int* d_status,
                     size_t cap);

/// Device scratch bytes decode_reduce_slice_async needs for slices of up to
/// `count` codes (the v3 decoder's per-slice index and per-tile state).
size_t decode_reduce_scratch_bytes(codec::ElemType code_t, uint32_t count);

/// Fused decode and reduction of one slice (the v3 tile decoder whatever a
/// DeviceCodec's kernels() says, writing each decoded code combined with
/// the local one): d_out[i] = code_i op d_local[i] (d_out may be d_local)
/// for the `count` codes of type code_t (I32, I64) of the slice of `len`
/// bytes at d_src; op Sum (or Avg) adds, wrapping, Max and Min keep the
/// larger and the smaller code (prims::reduce_fn(code_t, op)'s bits; Prod:
/// -Status::Unsupported); its status, as decode_slice_async's, to *d_status.
/// Raw and Block slices with the predictors None, Delta1, Delta2; a Lorenzo
/// slice is Status::Unsupported (decode_slice_async + reduce_values_async).
/// d_scratch: decode_reduce_scratch_bytes(code_t, count) bytes of device
/// memory the caller owns (nothing is allocated). After an error d_out is
/// unspecified.
int decode_reduce_slice_async(void* stream, uint8_t* d_scratch, const uint8_t* d_src, size_t len,
                              codec::ElemType code_t, uint32_t count, ReduceOp op, const void* d_local, void* d_out,
                              int* d_status);

}  // namespace ncclz::cuda
