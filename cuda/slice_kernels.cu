// Slice encoder/decoder on the GPU (Block codec + predictors), byte-identical
// to cpp/src/codec/slice.cpp with the codec forced to Block (docs/FORMAT.md,
// "Slice header", "Predictors", "Block"): the slice framing and the Block
// layout are the CPU's own functions (codec/slice_frame.hpp,
// codec/block_frame.hpp), called here per slice and per block.
//
// Two sets of kernels here write the same bytes (DeviceCodec::set_kernels,
// NCCLZ_DEVICE_CODEC): v1, described next, written to be plainly correct
// (byte-wise stores, per-slice scans; it passed tests/cpp/test_cuda_codec.cpp
// on an H200, GPU run 1), and v2 ("v2 kernels" below), which replaces the
// kernels that touch the data. The third, v3 (tiles, two launches each way),
// is encode_v3.cu and decode_v3.cu; DeviceCodec::encode_batch/decode_batch
// below hand it the batch. docs/GPU.md compares them.
//
// The kernels of one call share a SliceBatchRef (slice_batch.cuh), by value:
// the batch's geometry and the DeviceCodec's scratch for it.
//
// v1 encode
//  E1 width     one warp per block: residuals (predict_at, the CPU's
//               predictor) -> width w; info[gb] = (block_words(w) << 32) | escaped
//  scan         exclusive sum of info over all blocks (one CUB scan); a
//               slice's sums are differences of the scan at its first block
//  E2 slice     one thread per slice: escapes, payload size
//               (block_stream_bytes), frame_slice (Block, or the CPU's Raw
//               fallback, or NoSpace); writes the 24-byte header, the size
//               and the status
//  E3 nibbles   one thread per nibble byte: block_nibble_byte, escape bytes
//  E4 planes    one warp per block: sign word and w bit planes (__ballot_sync)
//               at block_stream_bytes(nb, nesc, words before the block)
//  E5 raw       one thread per code of a Raw-fallback slice: the code's bytes
// v1 decode
//  D1 header    one thread per slice: read_slice_header (the CPU's: header,
//               type, count), raw_payload_valid; Block: nibbles inside the payload
//  D2 nibbles   one thread per block: block_nibble_at -> width or escape flag
//               (info as above); block_unused_nibble_ok
//  scan
//  D3 slice     escapes inside the payload
//  D4 escapes   one thread per block: block_escape_ok -> width;
//               words[gb] = block_words(w)
//  scan
//  D5 slice     total length (block_stream_bytes) == payload_bytes
//  D6 planes    one warp per block: block_check_planes (the CPU's), lanes'
//               magnitudes and signs -> residuals
//  D7 raw       one thread per code of a Raw slice
//  D8 predict   one CTA per slice: the inverse predictor in place (Delta1,
//               Delta2: block scans; Lorenzo: running sums along x, y, z)
//  D9 status    per-slice statuses to the caller
// Kernels after a failing check skip that slice (its state holds the status).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "codec/block_frame.hpp"
#include "codec/predictor.hpp"
#include "codec/slice_frame.hpp"
#include "cta_slice.cuh"
#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::kBlockLen;
using codec::Predictor;
using codec::Status;

constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ size_t global_warp() { return (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }
__device__ __forceinline__ size_t global_thread() { return size_t(blockIdx.x) * blockDim.x + threadIdx.x; }

// Residual of local element i of slice codes qk (cnt codes), 0 past the end.
template <class Code>
__device__ __forceinline__ Code residual_at(const Code* qk, uint32_t i, uint32_t cnt, Predictor p, uint32_t a0,
                                            uint32_t a1) {
  using U = codec::UCode<Code>;
  if (i >= cnt) return Code(0);
  return Code(U(qk[i]) - codec::predict_at(qk, i, p, a0, a1));
}

// ---- encode ---------------------------------------------------------------

template <class Code>
__global__ void __launch_bounds__(kThreads)
    enc_width_kernel(const Code* __restrict__ q, SliceBatchRef r, EncodeParams ep) {
  const size_t gb = global_warp();
  if (gb >= r.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / r.nbs), b = uint32_t(gb % r.nbs);
  const uint32_t cnt = r.count(k);
  const int lane = threadIdx.x & 31;
  if (size_t(b) >= codec::block_count(cnt)) {
    if (lane == 0) {
      r.widths[gb] = 0;
      r.info[gb] = 0;
    }
    return;
  }
  const Predictor pe = codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
  const Code* qk = q + size_t(k) * r.L;
  const Code v = residual_at(qk, b * kBlockLen + lane, cnt, pe, ep.row, ep.plane);
  const int w = codec::block_bit_width(warp_or(codec::block_magnitude(v)));
  if (lane == 0) {
    r.widths[gb] = uint8_t(w);
    r.info[gb] = pack_info(codec::block_words(w), w >= codec::kBlockEscape);
  }
}

template <class Code>
__global__ void enc_slice_kernel(SliceBatchRef r, EncodeParams ep, uint8_t* __restrict__ dst, uint64_t* sizes,
                                 int* status) {
  const size_t k = global_thread();
  if (k >= r.S) return;
  const uint32_t cnt = r.count(uint32_t(k));
  const size_t nb = codec::block_count(cnt);
  const size_t first = k * r.nbs;
  SliceState s{};
  s.first1 = r.scan[first];
  // The Block payload's size, from the blocks' words and escapes.
  size_t coded = ~size_t(0);
  if (nb > 0) {
    const u64 sum = r.scan[first + nb - 1] + r.info[first + nb - 1] - s.first1;
    s.nesc = info_escapes(sum);
    s.base = uint32_t(codec::block_stream_bytes(nb, s.nesc, 0));
    coded = codec::block_stream_bytes(nb, s.nesc, info_words(sum));
  }
  // The slice, framed as on the CPU: Block, or the Raw fallback, or NoSpace.
  const Predictor pe = codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
  uint32_t a0, a1;
  codec::slice_predictor_args(pe, ep.row, ep.plane, &a0, &a1);
  codec::SliceHeader h;
  const ElemType t = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  const Status f = codec::frame_slice(t, cnt, r.slot, Codec::Block, pe, a0, a1, coded, &h);
  s.status = int(f);
  if (f == Status::Ok) {
    s.mode = h.codec == Codec::Block ? kModeBlock : kModeRaw;
    s.pred = uint8_t(h.predictor);
    s.a0 = h.pred_arg0;
    s.a1 = h.pred_arg1;
    codec::write_header(dst + k * r.slot, h);
    sizes[k] = codec::kHeaderBytes + h.payload_bytes;
  } else {
    s.mode = kModeNone;
    sizes[k] = 0;
  }
  status[k] = s.status;
  r.st[k] = s;
}

// One thread per nibble byte j of slice k (blocks 2j, 2j+1).
__global__ void enc_nibble_kernel(SliceBatchRef r, uint8_t* __restrict__ dst) {
  const size_t per = codec::block_nibble_bytes(r.nbs);
  const size_t g = global_thread();
  if (g >= size_t(r.S) * per) return;
  const uint32_t k = uint32_t(g / per);
  const size_t j = g % per;
  const SliceState s = r.st[k];
  if (s.mode != kModeBlock) return;
  const size_t nb = codec::block_count(r.count(k));
  if (2 * j >= nb) return;
  const size_t first = size_t(k) * r.nbs;
  uint8_t* payload = dst + size_t(k) * r.slot + codec::kHeaderBytes;
  const size_t b0 = first + 2 * j;
  const int w0 = r.widths[b0];
  const int w1 = 2 * j + 1 < nb ? r.widths[b0 + 1] : 0;
  payload[j] = codec::block_nibble_byte(w0, w1);
  // Escape bytes: after the nibbles, in block order.
  if (w0 >= codec::kBlockEscape)
    payload[codec::block_stream_bytes(nb, info_escapes(r.scan[b0] - s.first1), 0)] = uint8_t(w0);
  if (w1 >= codec::kBlockEscape)
    payload[codec::block_stream_bytes(nb, info_escapes(r.scan[b0 + 1] - s.first1), 0)] = uint8_t(w1);
}

template <class Code>
__global__ void __launch_bounds__(kThreads)
    enc_planes_kernel(const Code* __restrict__ q, SliceBatchRef r, uint8_t* __restrict__ dst) {
  using U = codec::UCode<Code>;
  const size_t gb = global_warp();
  if (gb >= r.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / r.nbs), b = uint32_t(gb % r.nbs);
  const SliceState s = r.st[k];
  if (s.mode != kModeBlock) return;
  const uint32_t cnt = r.count(k);
  const size_t nb = codec::block_count(cnt);
  if (size_t(b) >= nb) return;
  const int w = r.widths[gb];
  if (w == 0) return;
  const int lane = threadIdx.x & 31;
  const Code* qk = q + size_t(k) * r.L;
  const Code v = residual_at(qk, b * kBlockLen + lane, cnt, Predictor(s.pred), s.a0, s.a1);
  const U mag = codec::block_magnitude(v);
  // The block's words follow those of the blocks before it.
  uint8_t* out = dst + size_t(k) * r.slot + codec::kHeaderBytes +
                 codec::block_stream_bytes(nb, s.nesc, info_words(r.scan[gb] - s.first1));
  const uint32_t sign = __ballot_sync(kFullMask, v < 0);
  if (lane == 0) codec::store_u32(out, sign);
  for (int p = 0; p < w; ++p) {  // w is uniform per warp
    const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> p) & 1u);
    if (lane == (p & 31)) codec::store_u32(out + 4 + 4 * p, plane);
  }
}

template <class Code>
__global__ void enc_raw_kernel(const Code* __restrict__ q, SliceBatchRef r, uint8_t* __restrict__ dst) {
  for (size_t i = global_thread(); i < r.n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t k = uint32_t(i / r.L);
    if (r.st[k].mode != kModeRaw) continue;
    const size_t local = i - size_t(k) * r.L;
    store_le<Code>(dst + size_t(k) * r.slot + codec::kHeaderBytes + local * sizeof(Code), q[i]);
  }
}

// ---- decode ---------------------------------------------------------------

template <class Code>
__global__ void dec_header_kernel(const uint8_t* __restrict__ src, const uint64_t* __restrict__ lens, SliceBatchRef r) {
  const size_t k = global_thread();
  if (k >= r.S) return;
  const ElemType t = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  const uint32_t cnt = r.count(uint32_t(k));
  size_t len = r.slot;
  if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
  SliceState s{};
  codec::SliceHeader h;
  Status st = codec::read_slice_header(src + k * r.slot, len, t, cnt, &h);
  if (st == Status::Ok) {
    s.mode = uint8_t(h.codec);
    s.pred = uint8_t(h.predictor);
    s.a0 = h.pred_arg0;
    s.a1 = h.pred_arg1;
    s.plen = h.payload_bytes;
    if (h.codec == Codec::Raw) {
      if (!codec::raw_payload_valid(h)) st = Status::Corrupt;
    } else if (h.codec == Codec::Block) {
      if (h.payload_bytes < codec::block_nibble_bytes(codec::block_count(cnt))) st = Status::Corrupt;
    } else {
      st = Status::Unsupported;  // Rans, Sparse: no device decoder yet
    }
  }
  s.status = int(st);
  r.st[k] = s;
}

__device__ __forceinline__ void set_corrupt(SliceState* s) { atomicExch(&s->status, int(Status::Corrupt)); }

// True when block (k, b) is a live block of an Ok Block slice.
__device__ __forceinline__ bool live_block(const SliceBatchRef& r, const SliceState& s, uint32_t k, uint32_t b) {
  return s.status == int(Status::Ok) && s.mode == uint8_t(Codec::Block) && size_t(b) < codec::block_count(r.count(k));
}

__global__ void dec_nibble_kernel(const uint8_t* __restrict__ src, SliceBatchRef r) {
  const size_t gb = global_thread();
  if (gb >= r.blocks()) return;
  const uint32_t k = uint32_t(gb / r.nbs), b = uint32_t(gb % r.nbs);
  const SliceState s = r.st[k];
  r.widths[gb] = 0;
  r.info[gb] = 0;
  if (!live_block(r, s, k, b)) return;
  const size_t nb = codec::block_count(r.count(k));
  const uint8_t* payload = src + size_t(k) * r.slot + codec::kHeaderBytes;
  const unsigned v = codec::block_nibble_at(payload, b);
  if (b == nb - 1 && !codec::block_unused_nibble_ok(payload, nb)) set_corrupt(&r.st[k]);
  const bool esc = v == unsigned(codec::kBlockEscape);
  r.widths[gb] = esc ? 0 : uint8_t(v);
  r.info[gb] = esc ? pack_info(0, 1) : pack_info(codec::block_nibble_words(v), 0);
}

// Per slice: escape bytes must lie inside the payload.
__global__ void dec_escape_total_kernel(SliceBatchRef r) {
  const size_t k = global_thread();
  if (k >= r.S) return;
  SliceState s = r.st[k];
  const size_t nb = codec::block_count(r.count(uint32_t(k)));
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block) || nb == 0) return;
  const size_t first = k * r.nbs;
  s.first1 = r.scan[first];
  s.nesc = info_escapes(r.scan[first + nb - 1] + r.info[first + nb - 1] - s.first1);
  const size_t base = codec::block_stream_bytes(nb, s.nesc, 0);
  if (base > s.plen) s.status = int(Status::Corrupt);
  s.base = uint32_t(base);
  r.st[k] = s;
}

template <class Code>
__global__ void dec_escape_kernel(const uint8_t* __restrict__ src, SliceBatchRef r) {
  const size_t gb = global_thread();
  if (gb >= r.blocks()) return;
  const uint32_t k = uint32_t(gb / r.nbs), b = uint32_t(gb % r.nbs);
  const SliceState s = r.st[k];
  r.words[gb] = 0;
  if (!live_block(r, s, k, b)) return;
  int w = r.widths[gb];
  if (info_escapes(r.info[gb])) {
    const size_t nb = codec::block_count(r.count(k));
    const uint8_t* payload = src + size_t(k) * r.slot + codec::kHeaderBytes;
    // Inside: base <= plen was checked.
    w = payload[codec::block_stream_bytes(nb, info_escapes(r.scan[gb] - s.first1), 0)];
    if (!codec::block_escape_ok<Code>(unsigned(w))) {
      set_corrupt(&r.st[k]);
      return;
    }
    r.widths[gb] = uint8_t(w);
  }
  r.words[gb] = codec::block_words(w);
}

// Per slice: the payload's length must be exactly what the widths say.
__global__ void dec_length_kernel(SliceBatchRef r) {
  const size_t k = global_thread();
  if (k >= r.S) return;
  SliceState s = r.st[k];
  const size_t nb = codec::block_count(r.count(uint32_t(k)));
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block)) return;
  if (nb == 0) {
    if (s.plen != 0) r.st[k].status = int(Status::Corrupt);
    return;
  }
  const size_t first = k * r.nbs;
  s.first2 = r.scan2[first];
  const u64 total = codec::block_stream_bytes(nb, s.nesc, r.scan2[first + nb - 1] + r.words[first + nb - 1] - s.first2);
  if (total != s.plen) s.status = int(Status::Corrupt);
  r.st[k] = s;
}

template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec_planes_kernel(const uint8_t* __restrict__ src, SliceBatchRef r, Code* __restrict__ out) {
  using U = codec::UCode<Code>;
  const size_t gb = global_warp();
  if (gb >= r.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / r.nbs), b = uint32_t(gb % r.nbs);
  const SliceState s = r.st[k];
  if (!live_block(r, s, k, b)) return;
  const uint32_t cnt = r.count(k);
  const int lane = threadIdx.x & 31;
  const uint32_t i = b * kBlockLen + lane;
  Code* ok = out + size_t(k) * r.L;
  const int w = r.widths[gb];
  if (w == 0) {
    if (i < cnt) ok[i] = Code(0);
    return;
  }
  const int m = cnt - b * kBlockLen < uint32_t(kBlockLen) ? int(cnt - b * kBlockLen) : kBlockLen;
  const uint8_t* p = src + size_t(k) * r.slot + codec::kHeaderBytes +
                     codec::block_stream_bytes(codec::block_count(cnt), s.nesc, r.scan2[gb] - s.first2);
  if (lane == 0 && !codec::block_check_planes<Code>(p, w, m)) set_corrupt(&r.st[k]);
  const uint32_t sign = codec::load_u32(p);
  U mag = 0;
  for (int q = 0; q < w; ++q) mag |= U((codec::load_u32(p + 4 + 4 * q) >> lane) & 1u) << q;
  if (i < cnt) ok[i] = Code(((sign >> lane) & 1u) ? U(U(0) - mag) : mag);
}

template <class Code>
__global__ void dec_raw_kernel(const uint8_t* __restrict__ src, SliceBatchRef r, Code* __restrict__ out) {
  for (size_t i = global_thread(); i < r.n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t k = uint32_t(i / r.L);
    const SliceState& s = r.st[k];
    if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Raw)) continue;
    const size_t local = i - size_t(k) * r.L;
    out[i] = load_le<Code>(src + size_t(k) * r.slot + codec::kHeaderBytes + local * sizeof(Code));
  }
}

constexpr int kScanItems = 8;

// In-place inclusive prefix sum of x[0..cnt) (wrapping) by one CTA. With
// zero_first, element 0 counts as 0 and is then set to its original value
// (the first step of the Delta2 inverse).
template <class U>
__device__ void cta_prefix_sum(U* x, size_t cnt, bool zero_first) {
  using Scan = cub::BlockScan<U, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  RunningPrefix<U> prefix{U(0)};
  constexpr size_t kTileElems = size_t(kThreads) * kScanItems;
  for (size_t base = 0; base < cnt; base += kTileElems) {
    U v[kScanItems];
    U first_orig = 0;
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const size_t i = base + size_t(threadIdx.x) * kScanItems + j;
      v[j] = i < cnt ? x[i] : U(0);
      if (i == 0) {
        first_orig = v[j];
        if (zero_first) v[j] = 0;
      }
    }
    Scan(tmp).InclusiveSum(v, v, prefix);
    __syncthreads();  // tmp reused next tile
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const size_t i = base + size_t(threadIdx.x) * kScanItems + j;
      if (i < cnt) x[i] = (i == 0 && zero_first) ? first_orig : v[j];
    }
  }
  __syncthreads();  // global writes visible to the whole CTA
}

// In-place inverse predictor of one slice per CTA. Delta1/Delta2: block-wide
// scans. Lorenzo: the residual operator is (1 - shift_x)(1 - shift_y)
// [(1 - shift_z)] with missing neighbours 0, so its inverse is running sums
// along x (each row), then y (each column of each plane), then z (through
// the planes); each pass is parallel over the other axes. Correct but slow
// for narrow rows (one thread walks a whole row); not tuned.
template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec_predict_kernel(SliceBatchRef r, Code* __restrict__ out, bool lorenzo_only) {
  using U = codec::UCode<Code>;
  const uint32_t k = blockIdx.x;
  const SliceState s = r.st[k];
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block)) return;  // uniform per CTA
  const Predictor p = Predictor(s.pred);
  if (lorenzo_only && p != Predictor::Lorenzo2D && p != Predictor::Lorenzo3D) return;  // v2: Delta1/2 done
  const size_t cnt = r.count(k);
  U* x = reinterpret_cast<U*>(out + size_t(k) * r.L);
  switch (p) {
    case Predictor::None: return;
    case Predictor::Delta1: cta_prefix_sum(x, cnt, false); return;
    case Predictor::Delta2:
      cta_prefix_sum(x, cnt, true);
      cta_prefix_sum(x, cnt, false);
      return;
    case Predictor::Lorenzo2D:
    case Predictor::Lorenzo3D: {
      // read_header checked W >= 1, and for 3D P >= W with P % W == 0; both
      // may exceed cnt (a valid header of a small slice).
      const size_t W = s.a0;
      const size_t P = p == Predictor::Lorenzo3D ? size_t(s.a1) : 0;
      // x: along each row.
      const size_t rows = (cnt + W - 1) / W;
      for (size_t r = threadIdx.x; r < rows; r += blockDim.x) {
        U acc = 0;
        const size_t end = cnt < (r + 1) * W ? cnt : (r + 1) * W;
        for (size_t i = r * W; i < end; ++i) x[i] = acc += x[i];
      }
      __syncthreads();
      // y: down each column of each plane (2D: one plane holding every row).
      const size_t wc = W < cnt ? W : cnt;  // columns that exist
      const size_t rows_per_plane = P ? P / W : rows;
      const size_t planes = P ? (cnt + P - 1) / P : 1;
      const size_t plane_stride = P ? P : rows * W;
      for (size_t c = threadIdx.x; c < planes * wc; c += blockDim.x) {
        const size_t start = (c / wc) * plane_stride + c % wc;
        U acc = 0;
        for (size_t y = 0; y < rows_per_plane; ++y) {
          const size_t i = start + y * W;
          if (i >= cnt) break;
          x[i] = acc += x[i];
        }
      }
      __syncthreads();
      if (P) {  // z: through the planes
        const size_t pc = P < cnt ? P : cnt;
        for (size_t c = threadIdx.x; c < pc; c += blockDim.x) {
          U acc = 0;
          for (size_t i = c; i < cnt; i += P) x[i] = acc += x[i];
        }
      }
      return;
    }
  }
}

// ---- v2 kernels -------------------------------------------------------------
// NCCLZ_DEVICE_CODEC=v2 (the default; DeviceCodec::set_kernels). Same bytes
// and statuses as the v1 kernels above, which stay for side-by-side runs
// (bench/gpu_codec_bench.cu). What differs is how they touch memory:
//  - 32-bit block and slice arithmetic (blocks() < 2^32, make_batch), where
//    v1 divides 64-bit values per thread;
//  - encode: a block's payload words stored by the lanes of its warp, one
//    4-byte store per word and lane (coalesced: a block's words are
//    contiguous), instead of one lane storing byte by byte; where a slice's
//    words are not 4-byte aligned (odd nibble bytes, escapes) the same lanes
//    fall back to byte stores;
//  - decode in tiles of kTile codes (64 blocks), a CTA each: the tile's
//    payload words (contiguous) copied into shared memory in one coalesced
//    round, its blocks decoded from there by the warps, the plane checks
//    (block_check_planes) as warp votes on the decoded magnitudes, the codes
//    written coalesced; v1 has a warp per block read every plane word byte by
//    byte, and one lane re-read them for the checks;
//  - the inverse Delta1/Delta2 predictor in the same tiles, over the whole
//    batch: tile sums (decoding the tile), one scan of them, then each tile
//    decoded again and scanned from its prefix, so that every SM works on it
//    and the codes are written once (v1: one CTA walks each slice, in place,
//    after the planes kernel wrote it). Delta2's second running sum reads
//    and writes the codes once more. Lorenzo slices keep v1's per-slice kernel;
//  - Raw slices copied by CTAs that each own a chunk of one slice and skip
//    it as a whole when the slice is not Raw (v1: every element of the batch
//    looks up its slice).
// Encode: width, scan, slice, nibbles, planes, raw. Decode: header, nibbles,
// scan, escapes, scan, length (v1's), raw, tile sums (Delta slices), scan,
// tile decode (every Block slice; Delta: first running sum), scan, tile scan
// (Delta2's second sum), Lorenzo, status.

constexpr uint32_t kTile = uint32_t(kThreads) * kScanItems;  // elements per scan tile
constexpr uint32_t kCopyChunk = uint32_t(kThreads) * 16;     // elements per Raw-copy CTA

// The encode kernels give each warp kWarpBlocks consecutive blocks and load
// all their residuals first: that many independent loads in flight per warp
// (one block per warp leaves the warp waiting on one load at a time).
constexpr int kWarpBlocks = 8;

template <class Code>
__global__ void __launch_bounds__(kThreads)
    enc2_width_kernel(const Code* __restrict__ q, SliceBatchRef r, EncodeParams ep) {
  const size_t g0 = global_warp() * kWarpBlocks;
  const int lane = threadIdx.x & 31;
  Code v[kWarpBlocks];
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j) {  // uniform per warp
    v[j] = Code(0);
    if (g0 + j >= r.blocks()) continue;
    const uint32_t gb = uint32_t(g0 + j), k = gb / r.nbs, b = gb - k * r.nbs;
    const uint32_t cnt = r.count(k);
    if (b >= uint32_t(codec::block_count(cnt))) continue;  // past the slice's end: width 0
    const Predictor pe = codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
    v[j] = residual_at(q + size_t(k) * r.L, b * kBlockLen + lane, cnt, pe, ep.row, ep.plane);
  }
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j) {
    if (g0 + j >= r.blocks()) break;  // uniform per warp
    const int w = codec::block_bit_width(warp_or(codec::block_magnitude(v[j])));
    if (lane == 0) {
      r.widths[g0 + j] = uint8_t(w);
      r.info[g0 + j] = pack_info(codec::block_words(w), w >= codec::kBlockEscape);
    }
  }
}

// Word j of a block (0: sign, 1 + p: plane p) is stored by lane j % 32 of
// its warp, all lanes at once.
template <class Code>
__global__ void __launch_bounds__(kThreads)
    enc2_planes_kernel(const Code* __restrict__ q, SliceBatchRef r, uint8_t* __restrict__ dst) {
  using U = codec::UCode<Code>;
  constexpr int kRounds = (codec::block_max_width<Code>() + 1 + 31) / 32;
  const size_t g0 = global_warp() * kWarpBlocks;
  const int lane = threadIdx.x & 31;
  Code v[kWarpBlocks];
  int wv[kWarpBlocks];
  uint8_t* outv[kWarpBlocks];
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j) {  // uniform per warp
    v[j] = Code(0);
    wv[j] = 0;
    outv[j] = nullptr;
    if (g0 + j >= r.blocks()) continue;
    const uint32_t gb = uint32_t(g0 + j), k = gb / r.nbs, b = gb - k * r.nbs;
    const SliceState s = r.st[k];
    if (s.mode != kModeBlock) continue;
    const uint32_t cnt = r.count(k);
    const size_t nb = codec::block_count(cnt);
    if (size_t(b) >= nb) continue;
    wv[j] = r.widths[gb];
    if (wv[j] == 0) continue;
    v[j] = residual_at(q + size_t(k) * r.L, b * kBlockLen + lane, cnt, Predictor(s.pred), s.a0, s.a1);
    outv[j] = dst + size_t(k) * r.slot + codec::kHeaderBytes +
              codec::block_stream_bytes(nb, s.nesc, info_words(r.scan[gb] - s.first1));
  }
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j) {
    const int w = wv[j];
    if (w == 0) continue;  // uniform per warp
    const U mag = codec::block_magnitude(v[j]);
    uint32_t word[kRounds];
#pragma unroll
    for (int t = 0; t < kRounds; ++t) word[t] = 0;
    const uint32_t sign = __ballot_sync(kFullMask, v[j] < 0);
    if (lane == 0) word[0] = sign;
    for (int p = 0; p < w; ++p) {  // w is uniform per warp
      const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> p) & 1u);
      const int i = p + 1;
#pragma unroll
      for (int t = 0; t < kRounds; ++t)
        if ((i >> 5) == t && (i & 31) == lane) word[t] = plane;
    }
    uint8_t* out = outv[j];
    const bool al = aligned_to(out, 4);
#pragma unroll
    for (int t = 0; t < kRounds; ++t) {
      const int i = 32 * t + lane;
      if (i < w + 1) {
        if (al)
          reinterpret_cast<uint32_t*>(out)[i] = word[t];
        else
          codec::store_u32(out + 4 * i, word[t]);
      }
    }
  }
}

// CTA c of slice k (kCopyChunk codes each): slice k's codes as they are, if
// the slice is Raw.
template <class Code>
__device__ void enc2_raw_unit(const Code* __restrict__ q, const SliceBatchRef& r, uint8_t* __restrict__ dst,
                              uint32_t cps, uint32_t id) {
  const uint32_t k = id / cps, c = id - k * cps;
  if (r.st[k].mode != kModeRaw) return;  // uniform per CTA
  const size_t cnt = r.count(k), end = std::min<size_t>(cnt, size_t(c + 1) * kCopyChunk);
  const Code* qk = q + size_t(k) * r.L;
  uint8_t* out = dst + size_t(k) * r.slot + codec::kHeaderBytes;
  const bool al = aligned_to(out, sizeof(Code));
  for (size_t i = size_t(c) * kCopyChunk + threadIdx.x; i < end; i += kThreads) {
    if (al)
      reinterpret_cast<Code*>(out)[i] = qk[i];
    else
      store_le<Code>(out + i * sizeof(Code), qk[i]);
  }
}

// The residual of lane `lane` from its block's sign word and its magnitude
// (w >= 1 planes, m real lanes); with `check`, block_check_planes lane by lane
// (plane w-1 not empty; no sign on a zero magnitude; nothing in padding lanes;
// at full width only INT_MIN, sign set and no other bit, has the top bit): a
// failure marks the slice (*st) Corrupt. Uniform per warp.
template <class Code>
__device__ __forceinline__ codec::UCode<Code> dec2_finish(uint32_t sign, codec::UCode<Code> mag, int w, uint32_t m,
                                                          int lane, bool check, SliceState* st) {
  using U = codec::UCode<Code>;
  const bool neg = (sign >> lane) & 1u;
  if (check && warp_planes_bad<Code>(sign, mag, w, m, lane) && lane == 0) set_corrupt(st);  // uniform per warp
  return neg ? U(U(0) - mag) : mag;
}

// Whether a slice uses Delta1/Delta2 (checked by dec2_tile_sum_kernel).
__device__ __forceinline__ bool delta_slice(const SliceState& s) {
  return Predictor(s.pred) == Predictor::Delta1 || Predictor(s.pred) == Predictor::Delta2;
}

// Tile c of slice k (state s, cnt codes) decoded from the payload into
// tile[0..kTile), 0 past the slice's end. The tile's blocks' words are
// contiguous in the payload: the CTA first copies them into shared memory
// (coalesced, 4-byte loads where the slice's words are aligned), with the
// blocks' widths and word offsets; then warp j decodes blocks j, j + kWarps,
// ... from there. Ends with a __syncthreads.
template <class U>
__device__ void dec2_decode_tile(const uint8_t* __restrict__ src, const SliceBatchRef& r, const SliceState& s,
                                 uint32_t k, uint32_t c, uint32_t cnt, bool check, U* tile) {
  using Code = std::make_signed_t<U>;
  constexpr uint32_t kTileBlocks = kTile / kBlockLen;
  constexpr uint32_t kMaxWords = kTileBlocks * codec::block_words(codec::block_max_width<Code>());
  __shared__ uint32_t words[kMaxWords];
  __shared__ uint32_t off[kTileBlocks];
  __shared__ uint8_t wid[kTileBlocks];
  const uint32_t nb = uint32_t(codec::block_count(cnt)), b0 = c * kTileBlocks;
  const uint32_t nt = b0 < nb ? (nb - b0 < kTileBlocks ? nb - b0 : kTileBlocks) : 0;  // blocks in the tile
  const size_t gb0 = size_t(k) * r.nbs + b0;
  const u64 first = nt ? r.scan2[gb0] : 0;
  if (threadIdx.x < nt) {
    off[threadIdx.x] = uint32_t(r.scan2[gb0 + threadIdx.x] - first);
    wid[threadIdx.x] = r.widths[gb0 + threadIdx.x];
  }
  // <= kMaxWords: every width was checked (<= bits) before.
  const uint32_t total = nt ? uint32_t(r.scan2[gb0 + nt - 1] + r.words[gb0 + nt - 1] - first) : 0;
  const uint8_t* p =
      src + size_t(k) * r.slot + codec::kHeaderBytes + codec::block_stream_bytes(nb, s.nesc, first - s.first2);
  if (aligned_to(p, 4)) {  // uniform per CTA
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);
    for (uint32_t j = threadIdx.x; j < total; j += kThreads) words[j] = pw[j];
  } else {
    for (uint32_t j = threadIdx.x; j < total; j += kThreads) words[j] = codec::load_u32(p + 4 * size_t(j));
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  for (uint32_t j = warp; j < kTileBlocks; j += kWarps) {  // uniform per warp
    U v = 0;
    const int w = j < nt ? wid[j] : 0;
    if (w > 0) {
      const uint32_t* bw = words + off[j];
      U mag = 0;
      for (int q = 0; q < w; ++q) mag |= U((bw[1 + q] >> lane) & 1u) << q;
      const uint32_t b = b0 + j;
      const uint32_t m = cnt - b * kBlockLen < uint32_t(kBlockLen) ? cnt - b * kBlockLen : uint32_t(kBlockLen);
      v = dec2_finish<Code>(bw[0], mag, w, m, lane, check, &r.st[k]);
    }
    tile[j * kBlockLen + lane] = v;
  }
  __syncthreads();
}

template <class Code>
__device__ void dec2_raw_unit(const uint8_t* __restrict__ src, const SliceBatchRef& r, Code* __restrict__ out,
                              uint32_t cps, uint32_t id) {
  const uint32_t k = id / cps, c = id - k * cps;
  const SliceState& s = r.st[k];
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Raw)) return;  // uniform per CTA
  const size_t cnt = r.count(k), end = std::min<size_t>(cnt, size_t(c + 1) * kCopyChunk);
  const uint8_t* in = src + size_t(k) * r.slot + codec::kHeaderBytes;
  Code* ok = out + size_t(k) * r.L;
  const bool al = aligned_to(in, sizeof(Code));
  for (size_t i = size_t(c) * kCopyChunk + threadIdx.x; i < end; i += kThreads)
    ok[i] = al ? reinterpret_cast<const Code*>(in)[i] : load_le<Code>(in + i * sizeof(Code));
}

// The running sums that invert Delta1 and Delta2 (dec_predict_kernel's
// cta_prefix_sum calls): pass 0 is the first sum (Delta1, and Delta2 with
// its first element counted as 0 and then restored), pass 1 Delta2's second.
__device__ __forceinline__ bool scan_pass_applies(const SliceState& s, int pass) {
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block)) return false;
  const Predictor p = Predictor(s.pred);
  return p == Predictor::Delta2 || (pass == 0 && p == Predictor::Delta1);
}

// Tile t = k * tps + c (kTile codes of slice k from c * kTile): info[t] = the
// sum of its codes for pass 0 (0 where pass 0 does not apply).
template <class Code>
__device__ void dec2_tile_sum_unit(const uint8_t* __restrict__ src, const SliceBatchRef& r, uint32_t tps, uint32_t t) {
  using U = codec::UCode<Code>;
  using Reduce = cub::BlockReduce<u64, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ U tile[kTile];
  const uint32_t k = t / tps, c = t - k * tps;
  const SliceState s = r.st[k];
  if (!scan_pass_applies(s, 0)) {  // uniform per CTA
    if (threadIdx.x == 0) r.info[t] = 0;
    return;
  }
  const bool zero_first = Predictor(s.pred) == Predictor::Delta2;
  const uint32_t cnt = r.count(k);
  dec2_decode_tile(src, r, s, k, c, cnt, true, tile);
  U acc = 0;
#pragma unroll
  for (int j = 0; j < kScanItems; ++j) {
    const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
    if (!(zero_first && c == 0 && e == 0)) acc = U(acc + tile[e]);  // 0 past the end
  }
  const u64 sum = Reduce(tmp).Sum(u64(acc));  // wraps: its low bits are U's sum
  if (threadIdx.x == 0) r.info[t] = sum;
}

// Tile t's running sum for pass `pass`, in place, from its prefix (scan[t] -
// scan[k * tps]: the exclusive scan of the tile sums, relative to the
// slice's first tile; exact in wrapping arithmetic). Pass 0 also writes
// info[t] = the sum of its output where pass 1 follows (Delta2), else 0.
template <class Code>
__device__ void dec2_tile_scan_unit(const uint8_t* __restrict__ src, Code* __restrict__ x, const SliceBatchRef& r,
                                    uint32_t tps, int pass, uint32_t t) {
  using U = codec::UCode<Code>;
  using Scan = cub::BlockScan<U, kThreads>;
  using Reduce = cub::BlockReduce<u64, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ typename Reduce::TempStorage reduce_tmp;
  __shared__ U tile[kTile];
  const uint32_t k = t / tps, c = t - k * tps;
  const SliceState s = r.st[k];
  const bool delta2 = Predictor(s.pred) == Predictor::Delta2;
  const bool scan = scan_pass_applies(s, pass);
  // Pass 0 decodes every Block slice; pass 1 only Delta2's.
  const bool block = s.status == int(Status::Ok) && s.mode == uint8_t(Codec::Block);
  if (pass == 0 ? !block : !scan) {  // uniform per CTA
    if (pass == 0 && threadIdx.x == 0) r.info[t] = 0;
    return;
  }
  const bool zero_first = pass == 0 && delta2;
  const size_t cnt = r.count(k), base = size_t(c) * kTile;
  U* xk = reinterpret_cast<U*>(x + size_t(k) * r.L);
  // Into shared memory: pass 0 decodes the tile's residuals from the payload
  // (for Delta slices dec2_tile_sum_kernel checked them, the others are
  // checked here), pass 1 loads pass 0's output (coalesced); then
  // kScanItems consecutive codes per thread.
  if (pass == 0) {
    dec2_decode_tile(src, r, s, k, c, uint32_t(cnt), !delta_slice(s), tile);
    if (!scan) {  // None, Lorenzo (its own kernel follows): the residuals as they are
#pragma unroll
      for (int j = 0; j < kScanItems; ++j) {
        const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
        if (base + e < cnt) xk[base + e] = tile[e];
      }
      if (threadIdx.x == 0) r.info[t] = 0;
      return;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      tile[e] = base + e < cnt ? xk[base + e] : U(0);
    }
    __syncthreads();
  }
  U v[kScanItems];
  U first_orig = 0;
#pragma unroll
  for (int j = 0; j < kScanItems; ++j) {
    const uint32_t e = threadIdx.x * kScanItems + j;
    v[j] = tile[e];
    if (zero_first && base + e == 0) {
      first_orig = v[j];
      v[j] = 0;
    }
  }
  RunningPrefix<U> prefix{U(r.scan[t] - r.scan[size_t(k) * tps])};
  Scan(scan_tmp).InclusiveSum(v, v, prefix);
  __syncthreads();  // every thread has read its codes from tile
#pragma unroll
  for (int j = 0; j < kScanItems; ++j) {
    const uint32_t e = threadIdx.x * kScanItems + j;
    tile[e] = (zero_first && base + e == 0) ? first_orig : v[j];
  }
  __syncthreads();
  U acc = 0;
#pragma unroll
  for (int j = 0; j < kScanItems; ++j) {
    const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
    if (base + e < cnt) {
      xk[base + e] = tile[e];
      acc = U(acc + tile[e]);
    }
  }
  if (pass == 0) {
    u64 sum = 0;
    if (delta2) sum = Reduce(reduce_tmp).Sum(u64(acc));  // uniform per CTA
    if (threadIdx.x == 0) r.info[t] = sum;
  }
}

// The v2 kernels that work in units (a Raw-copy chunk, a scan tile) loop over
// them, at most kMaxUnitGrid CTAs: most units of a batch whose slices are
// not Raw (or not Delta) return at once, and empty CTAs still cost launches.
constexpr uint32_t kMaxUnitGrid = 8192;

template <class Code>
__global__ void __launch_bounds__(kThreads)
    enc2_raw_kernel(const Code* __restrict__ q, SliceBatchRef r, uint8_t* __restrict__ dst, uint32_t cps) {
  for (uint32_t id = blockIdx.x; id < r.S * cps; id += gridDim.x) enc2_raw_unit(q, r, dst, cps, id);
}

template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec2_raw_kernel(const uint8_t* __restrict__ src, SliceBatchRef r, Code* __restrict__ out, uint32_t cps) {
  for (uint32_t id = blockIdx.x; id < r.S * cps; id += gridDim.x) dec2_raw_unit(src, r, out, cps, id);
}

template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec2_tile_sum_kernel(const uint8_t* __restrict__ src, SliceBatchRef r, uint32_t tps) {
  for (uint32_t t = blockIdx.x; t < r.S * tps; t += gridDim.x) {
    if (t != blockIdx.x) __syncthreads();  // shared memory reused (uniform per CTA)
    dec2_tile_sum_unit<Code>(src, r, tps, t);
  }
}

template <class Code>
__global__ void __launch_bounds__(kThreads) dec2_tile_scan_kernel(const uint8_t* __restrict__ src, Code* __restrict__ x,
                                                                  SliceBatchRef r, uint32_t tps, int pass) {
  for (uint32_t t = blockIdx.x; t < r.S * tps; t += gridDim.x) {
    if (t != blockIdx.x) __syncthreads();  // shared memory reused (uniform per CTA)
    dec2_tile_scan_unit(src, x, r, tps, pass, t);
  }
}

__global__ void dec_status_kernel(SliceBatchRef r, int* status) {
  const size_t k = global_thread();
  if (k < r.S) status[k] = r.st[k].status;
}

unsigned grid_warps(size_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }
// CTAs of kCopyChunk codes per slice of L codes.
uint32_t copy_chunks(uint32_t L) { return uint32_t((size_t(L) + kCopyChunk - 1) / kCopyChunk); }
unsigned grid_stride(size_t n) { return unsigned(std::min<size_t>(std::max<size_t>(grid_for(n), 1), 65536)); }

template <class Code>
cudaError_t encode_launch(const Code* q, const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc,
                          uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status, int kernels, cudaStream_t stream) {
  const size_t G = r.blocks();
  if (kernels == 2)
    enc2_width_kernel<Code><<<grid_warps((G + kWarpBlocks - 1) / kWarpBlocks), kThreads, 0, stream>>>(q, r, ep);
  else
    enc_width_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(q, r, ep);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = exclusive_sum_u64(r.info, r.scan, G, tmp, sc.tmp_bytes, stream);
  if (e != cudaSuccess) return e;
  enc_slice_kernel<Code><<<grid_for(r.S), kThreads, 0, stream>>>(r, ep, dst, sizes, status);
  enc_nibble_kernel<<<grid_for(size_t(r.S) * codec::block_nibble_bytes(r.nbs)), kThreads, 0, stream>>>(r, dst);
  if (kernels == 2) {
    enc2_planes_kernel<Code><<<grid_warps((G + kWarpBlocks - 1) / kWarpBlocks), kThreads, 0, stream>>>(q, r, dst);
    const uint32_t cps = copy_chunks(r.L);
    if (r.n) enc2_raw_kernel<Code><<<std::min(r.S * cps, kMaxUnitGrid), kThreads, 0, stream>>>(q, r, dst, cps);
  } else {
    enc_planes_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(q, r, dst);
    if (r.n) enc_raw_kernel<Code><<<grid_stride(r.n), kThreads, 0, stream>>>(q, r, dst);
  }
  return cudaGetLastError();
}

template <class Code>
cudaError_t decode_launch(const uint8_t* src, const uint64_t* lens, const SliceBatchRef& r, const SliceScratch& sc,
                          uint8_t* tmp, Code* out, int* status, int kernels, cudaStream_t stream) {
  const size_t G = r.blocks();
  dec_header_kernel<Code><<<grid_for(r.S), kThreads, 0, stream>>>(src, lens, r);
  dec_nibble_kernel<<<grid_for(G), kThreads, 0, stream>>>(src, r);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = exclusive_sum_u64(r.info, r.scan, G, tmp, sc.tmp_bytes, stream);
  if (e != cudaSuccess) return e;
  dec_escape_total_kernel<<<grid_for(r.S), kThreads, 0, stream>>>(r);
  dec_escape_kernel<Code><<<grid_for(G), kThreads, 0, stream>>>(src, r);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = exclusive_sum_u64(r.words, r.scan2, G, tmp, sc.tmp_bytes, stream);
  if (e != cudaSuccess) return e;
  dec_length_kernel<<<grid_for(r.S), kThreads, 0, stream>>>(r);
  if (kernels == 2) {
    const uint32_t cps = copy_chunks(r.L);
    if (r.n) dec2_raw_kernel<Code><<<std::min(r.S * cps, kMaxUnitGrid), kThreads, 0, stream>>>(src, r, out, cps);
    // Block slices in tiles; info and scan are free again (tiles <= blocks:
    // the scans' temporary storage suffices).
    const uint32_t tps = uint32_t((size_t(r.L) + kTile - 1) / kTile), T = r.S * tps;
    const uint32_t grid = std::min(T, kMaxUnitGrid);
    dec2_tile_sum_kernel<Code><<<grid, kThreads, 0, stream>>>(src, r, tps);
    for (int pass = 0; pass < 2; ++pass) {
      e = cudaGetLastError();
      if (e == cudaSuccess) e = exclusive_sum_u64(r.info, r.scan, T, tmp, sc.tmp_bytes, stream);
      if (e != cudaSuccess) return e;
      dec2_tile_scan_kernel<Code><<<grid, kThreads, 0, stream>>>(src, out, r, tps, pass);
    }
    dec_predict_kernel<Code><<<r.S, kThreads, 0, stream>>>(r, out, true);
  } else {
    dec_planes_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(src, r, out);
    if (r.n) dec_raw_kernel<Code><<<grid_stride(r.n), kThreads, 0, stream>>>(src, r, out);
    dec_predict_kernel<Code><<<r.S, kThreads, 0, stream>>>(r, out, false);
  }
  dec_status_kernel<<<grid_for(r.S), kThreads, 0, stream>>>(r, status);
  return cudaGetLastError();
}

}  // namespace

namespace detail {
int make_batch(ElemType code_t, size_t n, uint32_t L, size_t slot, uint32_t forced_S, SliceBatchRef* r) {
  if (code_t != ElemType::I32 && code_t != ElemType::I64) return host_error(Status::Unsupported);
  if (L == 0) return host_error(Status::BadHeader);
  r->n = n;
  r->L = L;
  r->slot = slot;
  const size_t S = forced_S ? forced_S : (n + L - 1) / L;
  if (S > 0x7fffffffu) return host_error(Status::Unsupported);
  r->S = uint32_t(S);
  r->nbs = uint32_t(codec::block_count(L));
  // info packs per-block payload words (<= 65) and escapes into 32 bits each.
  if (r->blocks() >= (size_t(1) << 32) / 66) return host_error(Status::Unsupported);
  return 0;
}

int lorenzo_inverse(const SliceBatchRef& r, ElemType code_t, void* out, cudaStream_t stream) {
  if (code_t == ElemType::I32)
    dec_predict_kernel<int32_t><<<r.S, kThreads, 0, stream>>>(r, static_cast<int32_t*>(out), true);
  else
    dec_predict_kernel<int64_t><<<r.S, kThreads, 0, stream>>>(r, static_cast<int64_t*>(out), true);
  return int(cudaGetLastError());
}

size_t slice_scratch_bytes(size_t n, uint32_t L) {
  if (n == 0 || L == 0) return 0;
  const size_t S = (n + L - 1) / L;
  return SliceScratch::of(uint32_t(std::min<size_t>(S, 0x7fffffffu)), uint32_t(codec::block_count(L))).bytes;
}
}  // namespace detail

int DeviceCodec::encode_batch(const void* d_q, ElemType code_t, size_t n, uint32_t slice_len, uint32_t forced_slices,
                              Predictor p, uint32_t row, uint32_t plane, uint8_t* d_dst, size_t slot_bytes,
                              uint64_t* d_sizes, int* d_status) {
  if (uint8_t(p) >= codec::kNumPredictors) return host_error(Status::BadHeader);
  SliceBatchRef r;
  if (const int e = detail::make_batch(code_t, n, slice_len, slot_bytes, forced_slices, &r)) return e;
  if (r.S == 0) return 0;
  const SliceScratch sc = SliceScratch::of(r.S, r.nbs);
  int err = 0;
  uint8_t* base = scratch(sc.bytes, &err);
  if (!base) return err;
  sc.place(base, &r);
  const EncodeParams ep{p, row, plane};
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (kernels_ == 3) return detail::encode3_codes(d_q, code_t, r, ep, sc, base + sc.tmp, d_dst, d_sizes, d_status, s);
  if (kernels_ == 4) return detail::encode_cta_codes(d_q, code_t, r, ep, d_dst, d_sizes, d_status, s);
  return int(code_t == ElemType::I32 ? encode_launch(static_cast<const int32_t*>(d_q), r, ep, sc, base + sc.tmp, d_dst,
                                                     d_sizes, d_status, kernels_, s)
                                     : encode_launch(static_cast<const int64_t*>(d_q), r, ep, sc, base + sc.tmp, d_dst,
                                                     d_sizes, d_status, kernels_, s));
}

int DeviceCodec::decode_batch(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n,
                              uint32_t slice_len, uint32_t forced_slices, ElemType code_t, void* d_out, int* d_status) {
  SliceBatchRef r;
  if (const int e = detail::make_batch(code_t, n, slice_len, slot_bytes, forced_slices, &r)) return e;
  if (r.S == 0) return 0;
  const SliceScratch sc = SliceScratch::of(r.S, r.nbs);
  int err = 0;
  uint8_t* base = scratch(sc.bytes, &err);
  if (!base) return err;
  sc.place(base, &r);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  int e = 0;
  if (kernels_ == 3)
    e = detail::decode3(d_src, d_lens, code_t, r, d_out, code_t, 0, d_status, s);
  else if (kernels_ == 4)
    e = detail::decode_cta(d_src, d_lens, code_t, r, d_out, code_t, 0, d_status, s);
  else
    e = int(
        code_t == ElemType::I32
            ? decode_launch(d_src, d_lens, r, sc, base + sc.tmp, static_cast<int32_t*>(d_out), d_status, kernels_, s)
            : decode_launch(d_src, d_lens, r, sc, base + sc.tmp, static_cast<int64_t*>(d_out), d_status, kernels_, s));
  // Sparse slices (reported Unsupported above) are decoded after (select_kernels.cu).
  if (e == 0) e = detail::sparse_decode(d_src, d_lens, code_t, r, d_out, d_status, s);
  return e;
}

int DeviceCodec::encode_slices_async(const void* d_q, ElemType code_t, size_t n, uint32_t slice_len, Predictor p,
                                     uint32_t row, uint32_t plane, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes,
                                     int* d_status) {
  return encode_batch(d_q, code_t, n, slice_len, 0, p, row, plane, d_dst, slot_bytes, d_sizes, d_status);
}

int DeviceCodec::decode_slices_async(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n,
                                     uint32_t slice_len, ElemType code_t, void* d_out, int* d_status) {
  return decode_batch(d_src, slot_bytes, d_lens, n, slice_len, 0, code_t, d_out, d_status);
}

int DeviceCodec::encode_slice_async(const void* d_q, ElemType code_t, uint32_t count, Predictor p, uint32_t row,
                                    uint32_t plane, uint8_t* d_dst, size_t cap, uint64_t* d_size, int* d_status) {
  // One slice even when count is 0 (a header-only Raw slice, as on the CPU).
  return encode_batch(d_q, code_t, count, count ? count : 1, 1, p, row, plane, d_dst, cap, d_size, d_status);
}

int DeviceCodec::decode_slice_async(const uint8_t* d_src, size_t len, ElemType code_t, uint32_t count, void* d_out,
                                    int* d_status) {
  return decode_batch(d_src, len, nullptr, count, count ? count : 1, 1, code_t, d_out, d_status);
}

}  // namespace ncclz::cuda
