// The slice kernels' handle (the cuCollections "ref"): what one call's kernels
// need, passed to them by value. The DeviceCodec (ncclz/cuda_codec.hpp) owns
// the memory the pointers point into (its scratch); the handle owns nothing.
//
// A batch is n codes cut into S slices of L codes (the last one shorter);
// slice k is written to / read from its slot, base + k * slot bytes. Blocks of
// 32 codes are numbered globally, gb = k * nbs + b with nbs = ceil(L / 32);
// blocks past a short last slice's end are inactive.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/block_frame.hpp"
#include "codec/predictor.hpp"
#include "device_common.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda::detail {

using u64 = unsigned long long;

/// Per-slice state shared by the kernels of one call.
struct SliceState {
  int status;          // codec::Status
  uint8_t mode;        // encode: kModeBlock, kModeRaw, kModeNone; decode: the slice's Codec
  uint8_t pred;        // predictor used / read
  uint32_t a0, a1;     // predictor args
  uint32_t plen;       // decode: payload_bytes
  uint32_t nesc;       // escape bytes of the slice's Block payload
  uint32_t base;       // block_stream_bytes(nb, nesc, 0): where the block words start
  u64 first1, first2;  // scan values at the slice's first block
};

enum : uint8_t { kModeBlock = 0, kModeRaw = 1, kModeNone = 2 };

/// What the encoder is asked for: the predictor and the grid it may need.
/// sel (the v3 encoder only; select_kernels.cu): per slice k, the selector's
/// codec sel[2k] and predictor sel[2k + 1], which replace p: a Block slice
/// with that predictor, a Raw slice as Raw, a Sparse slice left alone.
struct EncodeParams {
  codec::Predictor p;
  uint32_t row, plane;
  const uint8_t* sel = nullptr;
};

/// A block's (or a run of blocks') payload words and escaped widths, packed
/// into one scannable value: words in the high 32 bits, escapes in the low.
__device__ __forceinline__ u64 pack_info(int words, int escaped) { return (u64(words) << 32) | u64(escaped); }
__device__ __forceinline__ uint32_t info_words(u64 v) { return uint32_t(v >> 32); }
__device__ __forceinline__ uint32_t info_escapes(u64 v) { return uint32_t(v); }

__device__ __forceinline__ uint32_t warp_or(uint32_t x) { return __reduce_or_sync(kFullMask, x); }
__device__ __forceinline__ uint64_t warp_or(uint64_t x) {
  const uint32_t lo = __reduce_or_sync(kFullMask, uint32_t(x));
  const uint32_t hi = __reduce_or_sync(kFullMask, uint32_t(x >> 32));
  return (uint64_t(hi) << 32) | lo;
}

/// block_check_planes as warp votes, for a block whose lane `lane` decoded
/// magnitude `mag` (w >= 1 planes, m real lanes, sign word `sign`): whether
/// the block is inconsistent (plane w-1 empty; a sign on a zero magnitude;
/// bits in padding lanes; at full width the top bit on anything but INT_MIN,
/// sign set and no other bit). Uniform per warp; every lane must call it.
template <class Code>
__device__ __forceinline__ bool warp_planes_bad(uint32_t sign, codec::UCode<Code> mag, int w, uint32_t m, int lane) {
  using U = codec::UCode<Code>;
  constexpr int kBits = codec::block_max_width<Code>();
  const bool neg = (sign >> lane) & 1u;
  bool bad = ((warp_or(mag) >> (w - 1)) & 1u) == 0;
  bad |= __ballot_sync(kFullMask, (neg && mag == 0) || (uint32_t(lane) >= m && mag != 0)) != 0;
  if (w == kBits)  // uniform per warp
    bad |= __ballot_sync(kFullMask, ((mag >> (kBits - 1)) & 1u) && (!neg || U(mag << 1) != 0)) != 0;
  return bad;
}

__device__ __forceinline__ bool aligned_to(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

/// A v3 decode tile's running sums for the Delta1/Delta2 inverse, published
/// to the tiles after it in its slice (decoupled look-back, decode_v3.cu):
/// flag 0 nothing yet, 1 the tile's own sums (agg), 2 also the inclusive
/// ones (incl: every tile of the slice up to this one). a: sum of the
/// residuals r' (Delta2: r'[1] = r[1] - r[0]), m: sum of j * r'[j] (j the
/// index in the slice), both wrapping.
struct TileLook {
  u64 agg_a, agg_m, incl_a, incl_m;
  unsigned flag;
};

struct SliceBatchRef {
  // Geometry.
  size_t n = 0;      ///< codes
  uint32_t L = 1;    ///< slice length
  uint32_t S = 0;    ///< slices
  uint32_t nbs = 1;  ///< blocks per full slice
  size_t slot = 0;   ///< bytes per slot
  // Scratch (per block: G = S * nbs entries; per slice: S).
  uint8_t* widths = nullptr;   ///< block widths
  u64* info = nullptr;         ///< packed (payload words << 32 | escaped) per block
  u64* scan = nullptr;         ///< exclusive scan of info
  u64* words = nullptr;        ///< decode: payload words per block
  u64* scan2 = nullptr;        ///< decode: exclusive scan of words
  SliceState* st = nullptr;    ///< per slice
  TileLook* look = nullptr;    ///< v3 decode: per tile (T = S * tiles_per_slice(L) entries)
  unsigned* ticket = nullptr;  ///< v3 decode: the next tile to start

  __host__ __device__ uint32_t count(uint32_t k) const { return k + 1 < S ? L : uint32_t(n - size_t(k) * L); }
  __host__ __device__ size_t blocks() const { return size_t(S) * nbs; }
};

/// The handle's geometry for n codes of type code_t in slices of L codes in
/// slots of `slot` bytes (forced_S: that many slices, for one-slice calls):
/// 0, or minus the Status for arguments the kernels cannot take
/// (slice_kernels.cu; shared by every kernel version).
int make_batch(codec::ElemType code_t, size_t n, uint32_t L, size_t slot, uint32_t forced_S, SliceBatchRef* r);

/// The arguments every fused quantize + encode call checks first (minus
/// BadHeader where false): a finite positive error bound and somewhere to
/// count the outliers.
inline bool fused_bound_ok(double eb, const uint64_t* d_outlier_count) {
  return eb > 0 && eb < 1e300 && d_outlier_count != nullptr;
}

/// What the fused quantize + encode calls (DeviceCodec::
/// quantize_encode_slices_async, encode_v3.cu, and
/// quantize_encode_slices_select_async, select_kernels.cu) do after their
/// own argument checks: refuse input that is not a quantizer float type,
/// make the batch's geometry in *r (make_batch) and zero the outlier count on
/// stream s. True: go on to place the scratch and launch; false: the call
/// returns *ret (minus a Status, a cudaError_t, or 0 for a batch of no
/// slices, whose outlier count is then 0).
inline bool fused_batch_start(codec::ElemType t, size_t n, codec::ElemType code_t, uint32_t slice_len,
                              size_t slot_bytes, uint64_t* d_outlier_count, cudaStream_t s, SliceBatchRef* r,
                              int* ret) {
  if (t != codec::ElemType::F32 && t != codec::ElemType::F64 && t != codec::ElemType::F16 &&
      t != codec::ElemType::BF16) {
    *ret = host_error(codec::Status::Unsupported);
    return false;
  }
  if (const int e = make_batch(code_t, n, slice_len, slot_bytes, 0, r)) {
    *ret = e;
    return false;
  }
  const cudaError_t e = cudaMemsetAsync(d_outlier_count, 0, sizeof(uint64_t), s);
  *ret = int(e);
  return e == cudaSuccess && r->S != 0;
}

struct SliceScratch;

/// The v3 kernels (encode_v3.cu, decode_v3.cu) on a placed batch: encode of
/// codes at q; decode to codes (t = code_t) or, fused with dequantize_one on
/// the grid of half step eb, to values of a float type t. 0 or a cudaError_t.
int encode3_codes(const void* q, codec::ElemType code_t, const SliceBatchRef& r, const EncodeParams& ep,
                  const SliceScratch& sc, uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status,
                  cudaStream_t stream);
/// The same from floats of type t quantized on the fly (quantize_one on grid
/// g, codes clamped to `limit`, outliers added to *outliers).
int encode3_floats(const void* x, codec::ElemType t, const codec::QuantGrid& g, int64_t limit, codec::ElemType code_t,
                   const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc, uint8_t* tmp, uint8_t* dst,
                   uint64_t* sizes, int* status, unsigned long long* outliers, cudaStream_t stream);
/// Sparse slices of a decoded batch (select_kernels.cu): each slot whose
/// header reads as a Sparse slice of code_t is decoded into out, its status
/// replacing the Unsupported of the other decode kernels. 0 or a cudaError_t.
int sparse_decode(const uint8_t* src, const uint64_t* lens, codec::ElemType code_t, const SliceBatchRef& r, void* out,
                  int* status, cudaStream_t stream);
/// v1's per-slice inverse of the Lorenzo predictors on decoded residuals
/// (slice_kernels.cu; the other slices are left alone). 0 or a cudaError_t.
int lorenzo_inverse(const SliceBatchRef& r, codec::ElemType code_t, void* out, cudaStream_t stream);
int decode3(const uint8_t* src, const uint64_t* lens, codec::ElemType code_t, const SliceBatchRef& r, void* out,
            codec::ElemType t, double eb, int* status, cudaStream_t stream);
/// How a fused decode combines each decoded code with the local one
/// (tile_coder.cuh, ReduceOut): a wrapping sum, the larger, the smaller.
enum class CodeOp { Sum, Max, Min };
/// decode3 to codes fused with a reduction: out[i] = code op local[i] (out
/// may be local); a Lorenzo slice is Unsupported (decode_v3.cu).
int decode3_reduce(const uint8_t* src, const uint64_t* lens, codec::ElemType code_t, const SliceBatchRef& r, CodeOp op,
                   const void* local, void* out, int* status, cudaStream_t stream);

/// The scratch a batch of S slices of nbs blocks each takes (scans' temporary
/// storage included): its layout's offsets, and the bytes in all.
struct SliceScratch {
  size_t widths, info, scan, words, scan2, st, look, ticket, tmp, tmp_bytes, bytes;
  static SliceScratch of(uint32_t S, uint32_t nbs) {
    const size_t G = size_t(S) * nbs;
    const size_t T = size_t(S) * ((nbs + kTileBlocks3 - 1) / kTileBlocks3);  // v3 tiles
    ScratchLayout l;
    SliceScratch s;
    s.widths = l.add(G);
    s.info = l.add(G * 8);
    s.scan = l.add(G * 8);
    s.words = l.add(G * 8);
    s.scan2 = l.add(G * 8);
    s.st = l.add(size_t(S) * sizeof(SliceState));
    s.look = l.add(T * sizeof(TileLook));
    s.ticket = l.add(sizeof(unsigned));
    s.tmp_bytes = exclusive_sum_bytes(G);
    s.tmp = l.add(s.tmp_bytes);
    s.bytes = l.bytes();
    return s;
  }
  /// The handle's scratch pointers at `base`.
  void place(uint8_t* base, SliceBatchRef* r) const {
    r->widths = ScratchLayout::at<uint8_t>(base, widths);
    r->info = ScratchLayout::at<u64>(base, info);
    r->scan = ScratchLayout::at<u64>(base, scan);
    r->words = ScratchLayout::at<u64>(base, words);
    r->scan2 = ScratchLayout::at<u64>(base, scan2);
    r->st = ScratchLayout::at<SliceState>(base, st);
    r->look = ScratchLayout::at<TileLook>(base, look);
    r->ticket = ScratchLayout::at<unsigned>(base, ticket);
  }
};

}  // namespace ncclz::cuda::detail
