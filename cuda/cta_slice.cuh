// The CTA slice coder: ONE CTA encodes, or decodes, one whole slice, tile
// after tile (the building block of the persistent collective kernels, which
// code a slice per ring step inside one long-running CTA, and of the
// one-kernel-per-batch form, DeviceCodec::set_kernels(4), NCCLZ_DEVICE_CODEC=cta:
// cuda/cta_codec.cu). Same bytes and statuses as the CPU's encode_slice with
// the codec forced to Block (and as v1, v2, v3), by construction: the tile
// steps are v3's (tile_coder.cuh), the framing the CPU's frame_slice.
//
// Encode (cta_encode_slice), two passes over the slice's tiles of kTile3 codes:
//   1. each tile's codes (read, or quantized from floats by quantize_one),
//      residuals (None/Delta1/Delta2 from the tile and the two codes before
//      it; Lorenzo, codes only, by predict_at) and block widths; the slice's
//      payload words and escapes summed (a CTA reduction per tile), the
//      outliers counted;
//   2. the framing from those totals (frame_slice: Block, the Raw fallback,
//      NoSpace), thread 0 writing the header; then per tile the residuals
//      again and the tile's nibbles, escape bytes and planes staged in shared
//      memory and stored with 16-byte stores (enc_tile_block), the words and
//      escapes of the tiles before it a running sum in the CTA; Raw: the
//      codes' bytes, the same way.
// Decode (cta_decode_slice): the header's checks (read_tile_slice); a Block
// slice's width nibbles and escape bytes indexed once (index_blocks: the
// escape and length checks, where the block words start); then per tile the
// tile's widths (nibbles, and escape bytes at a running count), its words
// into shared memory, its blocks decoded with the plane checks as warp
// votes, Delta1/Delta2 inverted from the running sums of the tiles before
// it, and the codes written through the caller's output (codes, values
// dequantized, or codes added into an accumulator: tile_coder.cuh's Outs).
// The statuses are the CPU decoder's (Lorenzo residuals are left for the
// caller to invert; a Lorenzo slice is Unsupported when values are asked for).
//
// Shared memory: CtaEncSmem / CtaDecSmem (about 17 KiB for int32 codes and
// 34 KiB for int64, each), the caller's; a kernel that decodes and encodes
// overlays them (a union). No global scratch, no barrier across CTAs.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "codec/slice_frame.hpp"
#include "slice_batch.cuh"
#include "tile_coder.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda::detail {

template <class Code>
struct CtaEncSmem {
  EncTileSmem<Code> t;
  typename cub::BlockReduce<u64, kThreads>::TempStorage reduce;
  typename cub::BlockReduce<int, kThreads>::TempStorage reduce_bad;
  u64 total;
};

/// What cta_encode_slice did: the slice's status (Ok or NoSpace) and bytes
/// (header included; 0 for NoSpace) in every thread, the outliers of a float
/// input in thread 0.
struct CtaEncoded {
  codec::Status status;
  uint64_t bytes;
  int outliers;
};

/// One CTA encodes the cnt codes in.at(s0 ..) as a slice of codec `want`
/// (Block; Raw writes the Raw slice) with predictor pe (slice_predictor's
/// already; ep's row and plane for Lorenzo) into `slot` (cap bytes): the
/// bytes of the CPU's encode_slice with that choice and predictor.
template <class In>
__device__ CtaEncoded cta_encode_slice(const In& in, size_t s0, uint32_t cnt, codec::Codec want, codec::Predictor pe,
                                       const EncodeParams& ep, uint8_t* slot, size_t cap,
                                       CtaEncSmem<typename In::CodeT>& sm) {
  using Code = typename In::CodeT;
  using Reduce = cub::BlockReduce<u64, kThreads>;
  using ReduceBad = cub::BlockReduce<int, kThreads>;
  const uint32_t tiles = tiles_per_slice(cnt);
  if (threadIdx.x == 0) sm.total = 0;
  int bad = 0;
  for (uint32_t c = 0; c < tiles; ++c) {  // pass 1: the slice's words and escapes (load_residuals: a barrier first)
    Code res[kItems3];
    bad += load_residuals(in, s0, c, cnt, pe, ep, sm.t.tile, sm.t.halo, res);
    const u64 sum = Reduce(sm.reduce).Sum(tile_info_part(res));
    if (threadIdx.x == 0) sm.total += sum;
  }
  CtaEncoded out{codec::Status::Ok, 0, 0};
  if constexpr (!In::kHasCodes) out.outliers = ReduceBad(sm.reduce_bad).Sum(bad);
  __syncthreads();
  const u64 total = sm.total;
  codec::SliceHeader h;
  out.status = tile_frame<Code>(want, cnt, cap, pe, ep, total, &h);
  if (out.status != codec::Status::Ok) return out;  // NoSpace (uniform)
  out.bytes = codec::kHeaderBytes + h.payload_bytes;
  if (threadIdx.x == 0) codec::write_header(slot, h);
  uint8_t* payload = slot + codec::kHeaderBytes;
  const uint32_t nb = uint32_t(codec::block_count(cnt));
  u64 before = 0;
  for (uint32_t c = 0; c < tiles; ++c) {  // pass 2: the payload
    Code res[kItems3];
    load_residuals(in, s0, c, cnt, pe, ep, sm.t.tile, sm.t.halo, res);
    const uint32_t b0 = c * kTile3;
    if (h.codec == codec::Codec::Raw) {  // uniform
      const uint32_t m = cnt - b0 < kTile3 ? cnt - b0 : kTile3;
      cta_store_bytes(payload + size_t(b0) * sizeof(Code), reinterpret_cast<const uint32_t*>(sm.t.tile),
                      m * uint32_t(sizeof(Code)));
    } else {
      before += enc_tile_block(res, b0, nb, before, total, payload, sm.t);
    }
    __syncthreads();  // the stage and the tile are rewritten next
  }
  return out;
}

template <class Code>
struct CtaDecSmem {
  DecTileSmem<Code> t;
  int bad;
  int status;
};

/// One CTA decodes the slice in the `len` bytes at `slice`, which should hold
/// cnt codes of type Out::CodeT, to o.put(o0 + i, code i): Raw and Block
/// slices with any predictor (Lorenzo: the residuals, for the caller to
/// invert; values = true: a Lorenzo slice is Unsupported), the CPU decoder's
/// checks and statuses (returned in every thread; after an error the output
/// is unspecified). *state (thread 0; may be null): the header's fields.
template <class Out>
__device__ codec::Status cta_decode_slice(const uint8_t* slice, size_t len, uint32_t cnt, bool values, size_t o0,
                                          const Out& o, CtaDecSmem<typename Out::CodeT>& sm, SliceState* state) {
  using Code = typename Out::CodeT;
  using U = codec::UCode<Code>;
  using Scan32 = cub::BlockScan<uint32_t, kThreads>;
  SliceState s{};
  codec::Status st = read_tile_slice<Code>(slice, len, cnt, values, &s);
  if (threadIdx.x == 0) {
    sm.bad = 0;
    sm.status = int(codec::Status::Ok);
  }
  __syncthreads();
  const uint8_t* payload = slice + codec::kHeaderBytes;
  const uint32_t nb = uint32_t(codec::block_count(cnt)), tiles = tiles_per_slice(cnt);
  const bool block = st == codec::Status::Ok && s.mode == uint8_t(codec::Codec::Block);
  if (block) {  // uniform
    const u64 tot = index_blocks<Code>(
        payload, nb, s.plen, sm.t.scan32_tmp, &sm.bad, [](uint32_t, unsigned) {}, [](uint32_t, uint32_t, uint32_t) {});
    if (sm.bad) st = codec::Status::Corrupt;
    if (st == codec::Status::Ok && codec::block_stream_bytes(nb, info_escapes(tot), info_words(tot)) != s.plen)
      st = codec::Status::Corrupt;
    s.nesc = info_escapes(tot);
    s.base = uint32_t(codec::block_nibble_bytes(nb) + s.nesc);
  }
  if (st == codec::Status::Ok && !block) {  // Raw
    for (uint32_t c = 0; c < tiles; ++c) {
      const uint32_t b0 = c * kTile3;
      dec_tile_raw(payload, b0, cnt - b0 < kTile3 ? cnt - b0 : kTile3, o0 + b0, o);
    }
  } else if (st == codec::Status::Ok) {
    const size_t nib = codec::block_nibble_bytes(nb);
    uint32_t esc_before = 0, words_before = 0;
    U run_a = 0, run_m = 0;  // thread 0's: the sums of the tiles before
    for (uint32_t c = 0; c < tiles; ++c) {
      const uint32_t b0 = c * kTile3, gb = b0 / codec::kBlockLen + threadIdx.x;
      const unsigned v = threadIdx.x < kTileBlocks3 && gb < nb ? codec::block_nibble_at(payload, gb) : 0u;
      const uint32_t escaped = v == unsigned(codec::kBlockEscape);
      uint32_t eoff, etot;
      Scan32(sm.t.scan32_tmp).ExclusiveSum(escaped, eoff, etot);
      // index_blocks checked every escape byte: inside the payload and valid.
      const int w = escaped ? int(payload[nib + esc_before + eoff]) : int(v);
      esc_before += etot;
      __syncthreads();  // scan32_tmp reused
      words_before += dec_tile_block(w, payload + s.base + 4 * size_t(words_before), b0, cnt, codec::Predictor(s.pred),
                                     o0 + b0, o, &sm.status, sm.t, [&](U a, U m, U* pa, U* pm) {
                                       *pa = run_a;
                                       *pm = run_m;
                                       run_a = U(run_a + a);
                                       run_m = U(run_m + m);
                                     });
      __syncthreads();  // the stage and the tile are rewritten next
    }
    st = codec::Status(sm.status);
  }
  if (state != nullptr && threadIdx.x == 0) {
    s.status = int(st);
    *state = s;
  }
  return st;
}

/// The batch forms (cta_codec.cu): one CTA per slice of a placed batch
/// (DeviceCodec::set_kernels(4)). Encode of codes at q, or of floats of type
/// t quantized on grid g (codes clamped to `limit`, outliers added to
/// *outliers); decode to codes (t = code_t; Lorenzo inverted after, by v1's
/// per-slice kernel) or values of a float type t (dequantize_one on the grid
/// of half step eb). 0 or a cudaError_t.
int encode_cta_codes(const void* q, codec::ElemType code_t, const SliceBatchRef& r, const EncodeParams& ep,
                     uint8_t* dst, uint64_t* sizes, int* status, cudaStream_t stream);
int encode_cta_floats(const void* x, codec::ElemType t, const codec::QuantGrid& g, int64_t limit,
                      codec::ElemType code_t, const SliceBatchRef& r, const EncodeParams& ep, uint8_t* dst,
                      uint64_t* sizes, int* status, unsigned long long* outliers, cudaStream_t stream);
int decode_cta(const uint8_t* src, const uint64_t* lens, codec::ElemType code_t, const SliceBatchRef& r, void* out,
               codec::ElemType t, double eb, int* status, cudaStream_t stream);

}  // namespace ncclz::cuda::detail
