// The per-tile steps of the device slice coders, shared by the v3 batch
// kernels (encode_v3.cu, decode_v3.cu) and the CTA slice coder (cta_slice.cuh:
// one CTA codes a whole slice, tile after tile): a tile's residuals and block
// widths, the slice's framing from its (words, escapes) totals, a Block tile's
// nibbles, escape bytes and planes staged in shared memory and stored with
// 16-byte stores, and on the decode side the slice header's checks, the
// index of width nibbles and escape bytes, and a Block tile decoded (plane
// checks as warp votes, Delta1/Delta2 inverted by CTA scans from the sums
// of the tiles before it, which the caller provides: decoupled look-back in
// v3, a running sum in the CTA coder). Tile geometry: tile_v3.cuh.
//
// Every function here is called by all kThreads threads of a CTA (barriers
// inside); shared memory is the caller's (EncTileSmem, DecTileSmem), so that
// a kernel that both decodes and encodes can overlay the two.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "codec/slice_frame.hpp"
#include "slice_batch.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda::detail {

__device__ __forceinline__ bool is_lorenzo(codec::Predictor p) {
  return p == codec::Predictor::Lorenzo2D || p == codec::Predictor::Lorenzo3D;
}

// ---------------------------------------------------------------------------
// Encode.

/// Tile c of the slice whose first code is in.at(s0) (cnt codes): the codes
/// into tile[0 .. kTile3) (0 past the slice's end), then this thread's
/// residuals res[j] of elements j * kThreads + threadIdx.x (0 past the end;
/// predictor pe, ep's row and plane for Lorenzo). Returns the outliers this
/// thread met (float input). Ends after a barrier.
template <class In>
__device__ __forceinline__ int load_residuals(const In& in, size_t s0, uint32_t c, uint32_t cnt, codec::Predictor pe,
                                              const EncodeParams& ep, typename In::CodeT* tile,
                                              typename In::CodeT* halo, typename In::CodeT (&res)[kItems3]) {
  using Code = typename In::CodeT;
  const uint32_t b = c * kTile3;
  int bad = 0;
  // Every load issued before the first store to tile (a generic pointer: it
  // may alias the input for all the compiler knows, so each load would wait
  // for the store before it).
  Code codes[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const uint32_t i = b + uint32_t(j) * kThreads + threadIdx.x;
    codes[j] = i < cnt ? in.at(s0 + i, bad) : Code(0);
  }
#pragma unroll
  for (int j = 0; j < kItems3; ++j) tile[uint32_t(j) * kThreads + threadIdx.x] = codes[j];
  if (threadIdx.x < 2) {  // codes b - 2, b - 1 (the previous tile's: its outliers are its own)
    int other = 0;
    halo[threadIdx.x] = c > 0 ? in.at(s0 + b - 2 + threadIdx.x, other) : Code(0);
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const uint32_t e = uint32_t(j) * kThreads + threadIdx.x, i = b + e;
    Code v = Code(0);
    if (i < cnt) {
      if constexpr (In::kHasCodes) {
        if (is_lorenzo(pe)) {
          using U = codec::UCode<Code>;
          const Code* qk = in.q + s0;
          v = Code(U(qk[i]) - codec::predict_at(qk, i, pe, ep.row, ep.plane));
          res[j] = v;
          continue;
        }
      }
      const Code p1 = e >= 1 ? tile[e - 1] : halo[1];
      const Code p2 = e >= 2 ? tile[e - 2] : halo[e];
      v = delta_residual(p2, p1, tile[e], i, pe);
    }
    res[j] = v;
  }
  return bad;
}

template <class Code>
__device__ __forceinline__ int block_width_of(Code v) {
  return codec::block_bit_width(warp_or(codec::block_magnitude(v)));
}

/// This thread's part of its tile's packed (payload words, escapes): the
/// blocks it holds, counted by lane 0 of each warp (0 elsewhere); a
/// cub::BlockReduce sum of it over the CTA is the tile's.
template <class Code>
__device__ __forceinline__ u64 tile_info_part(const Code (&res)[kItems3]) {
  u64 mine = 0;
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const int w = block_width_of(res[j]);
    mine += pack_info(int(codec::block_words(w)), w >= codec::kBlockEscape);
  }
  return (threadIdx.x & 31) == 0 ? mine : u64(0);
}

/// The header of a slice of cnt codes (predictor pe already slice_predictor's)
/// in a slot of `cap` bytes whose blocks total `total` (packed words,
/// escapes): frame_slice for `want` (Block, or Raw), as the CPU's encode_slice.
template <class Code>
__device__ __forceinline__ codec::Status tile_frame(codec::Codec want, uint32_t cnt, size_t cap, codec::Predictor pe,
                                                    const EncodeParams& ep, u64 total, codec::SliceHeader* h) {
  const size_t nb = codec::block_count(cnt);
  const size_t coded = nb ? codec::block_stream_bytes(nb, info_escapes(total), info_words(total)) : ~size_t(0);
  uint32_t a0, a1;
  codec::slice_predictor_args(pe, ep.row, ep.plane, &a0, &a1);
  const codec::ElemType ct = sizeof(Code) == 4 ? codec::ElemType::I32 : codec::ElemType::I64;
  return want == codec::Codec::Raw ? codec::frame_slice(ct, cnt, cap, codec::Codec::Raw, pe, a0, a1, ~size_t(0), h)
                                   : codec::frame_slice(ct, cnt, cap, codec::Codec::Block, pe, a0, a1, coded, h);
}

/// Shared memory of a tile encode (enc_tile_block, and the codes and halo of
/// load_residuals).
template <class Code>
struct EncTileSmem {
  static constexpr uint32_t kMaxWords = kTileBlocks3 * codec::block_words(codec::block_max_width<Code>());
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan_tmp;
  Code tile[kTile3 + 4 / sizeof(Code) + 1];  // the codes (Raw: the staged payload), a padding word
  Code halo[2];
  uint32_t stage[kMaxWords + 1];  // the tile's block words
  uint32_t boff[kTileBlocks3];    // per block: escapes before it << 16 | words before it
  uint8_t wid[kTileBlocks3];
};

/// Writes the tile of residuals res whose first code is code b0 of a Block
/// slice of nb blocks into its payload: the tile's width nibbles (its 64
/// blocks own 32 whole nibble bytes), its escape bytes, and its blocks' sign
/// words and planes (a __ballot_sync per plane) staged in shared memory at
/// offsets from a CTA scan and stored with 16-byte stores. before: the
/// (words, escapes) of the slice's tiles before this one, total: the
/// slice's. Returns the tile's own (words, escapes), packed, in every thread.
template <class Code>
__device__ u64 enc_tile_block(const Code (&res)[kItems3], uint32_t b0, uint32_t nb, u64 before, u64 total,
                              uint8_t* payload, EncTileSmem<Code>& sm) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  int wv[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    wv[j] = block_width_of(res[j]);
    if (lane == 0) sm.wid[j * kWarps3 + warp] = uint8_t(wv[j]);
  }
  __syncthreads();
  uint32_t v = 0;
  if (threadIdx.x < kTileBlocks3) {
    const int w = sm.wid[threadIdx.x];
    v = (uint32_t(w >= codec::kBlockEscape) << 16) | codec::block_words(w);
  }
  uint32_t off, agg;
  Scan(sm.scan_tmp).ExclusiveSum(v, off, agg);
  if (threadIdx.x < kTileBlocks3) sm.boff[threadIdx.x] = off;
  __syncthreads();
  // Nibble bytes (blocks 2j, 2j + 1 of the tile; b0 / 32 is even) and escape bytes.
  const uint32_t gb0 = b0 / codec::kBlockLen;  // the tile's first block in the slice
  if (threadIdx.x < kTileBlocks3 / 2) {
    const uint32_t gb = gb0 + 2 * threadIdx.x;
    if (gb < nb)
      payload[gb / 2] =
          codec::block_nibble_byte(sm.wid[2 * threadIdx.x], gb + 1 < nb ? sm.wid[2 * threadIdx.x + 1] : 0);
  }
  if (threadIdx.x < kTileBlocks3 && sm.wid[threadIdx.x] >= codec::kBlockEscape)
    payload[codec::block_stream_bytes(nb, info_escapes(before) + (off >> 16), 0)] = sm.wid[threadIdx.x];
  // Sign word and planes of every block into the stage: word i of a block by
  // lane i % 32 after the warp's ballot.
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const int w = wv[j];
    if (w == 0) continue;  // uniform per warp
    uint32_t* out = sm.stage + (sm.boff[j * kWarps3 + warp] & 0xffffu);
    const auto mag = codec::block_magnitude(res[j]);
    const uint32_t sign = __ballot_sync(kFullMask, res[j] < 0);
    if (lane == 0) out[0] = sign;
    for (int p = 0; p < w; ++p) {  // w is uniform per warp
      const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> p) & 1u);
      if (lane == ((p + 1) & 31)) out[1 + p] = plane;
    }
  }
  __syncthreads();
  const size_t words_at = codec::block_stream_bytes(nb, info_escapes(total), info_words(before));
  cta_store_bytes(payload + words_at, sm.stage, 4 * (agg & 0xffffu));
  return pack_info(int(agg & 0xffffu), int(agg >> 16));
}

// ---------------------------------------------------------------------------
// Decode.

/// A decoder's view of the slice in `len` bytes at `slice` that should hold
/// cnt codes of type Code: the header's checks (read_slice_header; Raw:
/// raw_payload_valid; Block: room for the width nibbles; Rans, Sparse, ...:
/// Unsupported, no decoder here; values: a Lorenzo slice is Unsupported, its
/// inverse not being fused) and the header's fields in *s (mode, pred, a0,
/// a1, plen). Every thread may call it (the same few loads).
template <class Code>
__device__ __forceinline__ codec::Status read_tile_slice(const uint8_t* slice, size_t len, uint32_t cnt, bool values,
                                                         SliceState* s) {
  const codec::ElemType ct = sizeof(Code) == 4 ? codec::ElemType::I32 : codec::ElemType::I64;
  codec::SliceHeader h;
  codec::Status st = codec::read_slice_header(slice, len, ct, cnt, &h);
  if (st != codec::Status::Ok) return st;
  s->mode = uint8_t(h.codec);
  s->pred = uint8_t(h.predictor);
  s->a0 = h.pred_arg0;
  s->a1 = h.pred_arg1;
  s->plen = h.payload_bytes;
  if (h.codec == codec::Codec::Raw) return codec::raw_payload_valid(h) ? st : codec::Status::Corrupt;
  if (h.codec != codec::Codec::Block) return codec::Status::Unsupported;  // Rans, Sparse: no decoder here
  if (values && is_lorenzo(h.predictor)) return codec::Status::Unsupported;
  if (h.payload_bytes < codec::block_nibble_bytes(codec::block_count(cnt))) return codec::Status::Corrupt;
  return st;
}

constexpr int kIndexItems = 8;  // blocks per thread per round of index_blocks

/// The width nibbles and escape bytes of a Block payload of nb blocks and
/// plen bytes, in rounds of kThreads * kIndexItems blocks (a CTA scan of the
/// escape flags gives each escaped block its escape byte, a second one of
/// the blocks' words the offsets): on_block(b, w) for every block b (w 0
/// for an invalid escape), on_tile(b, words before, escapes before) at every
/// tile's first block; *bad (shared, 0 on entry, after a barrier) set where
/// an escape byte lies outside the payload or is invalid or the unused
/// nibble is not 0. Returns the totals (packed words, escapes) in every thread.
template <class Code, class OnBlock, class OnTile>
__device__ u64 index_blocks(const uint8_t* payload, uint32_t nb, uint32_t plen,
                            typename cub::BlockScan<uint32_t, kThreads>::TempStorage& scan_tmp, int* bad,
                            OnBlock&& on_block, OnTile&& on_tile) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  const size_t nib = codec::block_nibble_bytes(nb);
  uint32_t esc_run = 0, words_run = 0;
  for (uint32_t round = 0; round < nb; round += uint32_t(kThreads) * kIndexItems) {
    const uint32_t b = round + uint32_t(kIndexItems) * threadIdx.x;  // this thread's first block
    unsigned v[kIndexItems];
    uint32_t ne = 0;
#pragma unroll
    for (int i = 0; i < kIndexItems; ++i) {
      v[i] = b + i < nb ? codec::block_nibble_at(payload, b + i) : 0u;
      ne += v[i] == unsigned(codec::kBlockEscape);
    }
    if (b < nb && nb - 1 < b + kIndexItems && !codec::block_unused_nibble_ok(payload, nb)) atomicExch(bad, 1);
    uint32_t eoff, etot;
    Scan(scan_tmp).ExclusiveSum(ne, eoff, etot);
    __syncthreads();  // scan_tmp reused
    uint32_t e = esc_run + eoff, nw = 0;
#pragma unroll
    for (int i = 0; i < kIndexItems; ++i) {
      if (b + i >= nb) break;
      unsigned w = v[i];
      if (w == unsigned(codec::kBlockEscape)) {
        // Escape bytes must lie inside the payload (v1: base <= plen).
        const size_t at = nib + e++;
        w = at < plen ? payload[at] : 0u;
        if (at >= plen || !codec::block_escape_ok<Code>(w)) {
          atomicExch(bad, 1);
          w = 0;
        }
      }
      on_block(b + i, w);
      nw += codec::block_words(int(w));
    }
    uint32_t woff, wtot;
    Scan(scan_tmp).ExclusiveSum(nw, woff, wtot);
    __syncthreads();
    if (b < nb && b % kTileBlocks3 == 0) on_tile(b, words_run + woff, esc_run + eoff);
    esc_run += etot;
    words_run += wtot;
  }
  __syncthreads();
  return pack_info(int(words_run), int(esc_run));
}

/// Where decoded codes go: as they are, or dequantized to T. An Out with
/// kReads reads an operand from memory for each code (read(i)) and writes
/// put_read(i, code, operand); put_items below reads a thread's operands
/// before it writes any.
template <class Code>
struct CodesOut {
  using CodeT = Code;
  static constexpr bool kReads = false;
  Code* out;
  __device__ __forceinline__ void put(size_t i, Code v) const { out[i] = v; }
};
/// Decoded codes combined with a local slice (decode_reduce_slice_async, the
/// reduction step of a device rank): out[i] = code op local[i], op a wrapping
/// sum, or the larger or the smaller code (a lossy max / min: the quantizer
/// is monotone on the grid every rank shares, so the largest value's code is
/// the largest code; prims::reduce_fn's integer max / min on the host, the
/// same bits in either operand order).
template <class Code, CodeOp Op = CodeOp::Sum>
struct ReduceOut {
  using CodeT = Code;
  using U = std::make_unsigned_t<Code>;
  static constexpr bool kReads = true;
  Code* out;
  const Code* local;
  __device__ __forceinline__ Code read(size_t i) const { return local[i]; }
  __device__ __forceinline__ void put_read(size_t i, Code v, Code l) const {
    if constexpr (Op == CodeOp::Sum) out[i] = Code(U(U(v) + U(l)));
    if constexpr (Op == CodeOp::Max) out[i] = v > l ? v : l;
    if constexpr (Op == CodeOp::Min) out[i] = v < l ? v : l;
  }
  __device__ __forceinline__ void put(size_t i, Code v) const { put_read(i, v, local[i]); }
};
/// The sum's (the persistent ring kernels add codes only).
template <class Code>
using AddOut = ReduceOut<Code, CodeOp::Sum>;
template <class T, class Code>
struct ValuesOut {
  using CodeT = Code;
  static constexpr bool kReads = false;
  T* out;
  codec::QuantGrid g;
  __device__ __forceinline__ void put(size_t i, Code v) const { out[i] = codec::dequantize_one<T, Code>(v, g); }
};

/// This thread's codes v[j] of a tile (element e = j * kThreads +
/// threadIdx.x; those with e < m) through o at o0 + e. An Out that reads
/// (ReduceOut) reads all its operands first: a write through out[] may alias a
/// later read of local[] as far as the compiler knows, so reads interleaved
/// with writes would each wait a memory latency for the one before.
template <class Out>
__device__ __forceinline__ void put_items(const Out& o, size_t o0, const typename Out::CodeT (&v)[kItems3],
                                          uint32_t m) {
  using Code = typename Out::CodeT;
  if constexpr (Out::kReads) {
    Code l[kItems3];
#pragma unroll
    for (int j = 0; j < kItems3; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      l[j] = e < m ? o.read(o0 + e) : Code(0);
    }
#pragma unroll
    for (int j = 0; j < kItems3; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      if (e < m) o.put_read(o0 + e, v[j], l[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kItems3; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      if (e < m) o.put(o0 + e, v[j]);
    }
  }
}

/// Shared memory of a tile decode (dec_tile_block).
template <class Code>
struct DecTileSmem {
  using U = codec::UCode<Code>;
  static constexpr uint32_t kMaxWords = kTileBlocks3 * codec::block_words(codec::block_max_width<Code>());
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan32_tmp;
  typename cub::BlockScan<U, kThreads>::TempStorage scanu_tmp;
  typename cub::BlockReduce<U, kThreads>::TempStorage reduce_tmp;
  uint32_t stage[kMaxWords + 1];
  U tile[kTile3];
  uint32_t boff[kTileBlocks3];
  uint8_t wid[kTileBlocks3];
  U before_a, before_m;
};

/// The codes [b0, b0 + m) of a Raw slice's payload to o.put(o0 + e, .): all
/// of a thread's codes read before any is written (put_items).
template <class Out>
__device__ __forceinline__ void dec_tile_raw(const uint8_t* payload, uint32_t b0, uint32_t m, size_t o0, const Out& o) {
  using Code = typename Out::CodeT;
  const uint8_t* in = payload + size_t(b0) * sizeof(Code);
  const bool al = aligned_to(in, sizeof(Code));
  Code v[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
    v[j] = e >= m ? Code(0) : al ? reinterpret_cast<const Code*>(in)[e] : load_le<Code>(in + size_t(e) * sizeof(Code));
  }
  put_items(o, o0, v, m);
}

/// Decodes the tile whose first code is code b0 of a Block slice of cnt
/// codes with predictor p: thread t < kTileBlocks3 passes the width w of the
/// tile's block t (0 past the slice's end); the tile's words start at
/// `words` (inside the payload: the caller checked the length). Each block
/// by its warp (lane l reads bit l of each plane), the plane checks as warp
/// votes (a failure stores Corrupt to *status); then None and Lorenzo give
/// the residuals, Delta1/Delta2 the running sums from the sums of the tiles
/// before it: thread 0 calls prefix(a, m, &pa, &pm) with the tile's own sums
/// (a = sum r', m = sum j r'[j], r' the residuals with r'[1] = r[1] - r[0]
/// under Delta2, j the index in the slice) and gets those of the tiles
/// before it. Output o.put(o0 + e, code) for the tile's codes e < min(cnt -
/// b0, kTile3). Returns the tile's payload words.
template <class Out, class Prefix>
__device__ uint32_t dec_tile_block(int w, const uint8_t* words, uint32_t b0, uint32_t cnt, codec::Predictor p,
                                   size_t o0, const Out& o, int* status, DecTileSmem<typename Out::CodeT>& sm,
                                   Prefix&& prefix) {
  using Code = typename Out::CodeT;
  using U = codec::UCode<Code>;
  using Scan32 = cub::BlockScan<uint32_t, kThreads>;
  using ScanU = cub::BlockScan<U, kThreads>;
  using ReduceU = cub::BlockReduce<U, kThreads>;
  const uint32_t m = cnt - b0 < kTile3 ? cnt - b0 : kTile3;  // codes in the tile
  const uint32_t gb0 = b0 / codec::kBlockLen;
  uint32_t v = 0;
  if (threadIdx.x < kTileBlocks3) {
    sm.wid[threadIdx.x] = uint8_t(w);
    v = codec::block_words(w);
  }
  uint32_t off, agg;
  Scan32(sm.scan32_tmp).ExclusiveSum(v, off, agg);
  if (threadIdx.x < kTileBlocks3) sm.boff[threadIdx.x] = off;
  cta_load_bytes(sm.stage, words, 4 * agg);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  U res[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const int blk = j * kWarps3 + warp, bw_w = sm.wid[blk];
    U x = 0;
    if (bw_w > 0) {  // uniform per warp
      const uint32_t* bw = sm.stage + sm.boff[blk];
      U mag = 0;
      for (int q = 0; q < bw_w; ++q) mag |= U((bw[1 + q] >> lane) & 1u) << q;
      const uint32_t gb = gb0 + uint32_t(blk);
      const uint32_t mm = cnt - gb * codec::kBlockLen < uint32_t(codec::kBlockLen) ? cnt - gb * codec::kBlockLen
                                                                                   : uint32_t(codec::kBlockLen);
      if (warp_planes_bad<Code>(bw[0], mag, bw_w, mm, lane) && lane == 0)
        atomicExch(status, int(codec::Status::Corrupt));
      x = ((bw[0] >> lane) & 1u) ? U(U(0) - mag) : mag;
    }
    res[j] = x;
  }
  if (p != codec::Predictor::Delta1 && p != codec::Predictor::Delta2) {  // None; Lorenzo (codes: inverted after)
    Code codes[kItems3];
#pragma unroll
    for (int j = 0; j < kItems3; ++j) codes[j] = Code(res[j]);
    put_items(o, o0, codes, m);
    return agg;
  }
  // Delta1/Delta2: kItems3 consecutive residuals per thread.
#pragma unroll
  for (int j = 0; j < kItems3; ++j) sm.tile[uint32_t(j) * kThreads + threadIdx.x] = res[j];
  __syncthreads();
  const bool d2 = p == codec::Predictor::Delta2;
  U it[kItems3];
#pragma unroll
  for (int i = 0; i < kItems3; ++i) it[i] = sm.tile[uint32_t(kItems3) * threadIdx.x + i];
  if (d2 && b0 == 0 && threadIdx.x == 0 && cnt >= 2) it[1] = U(it[1] - it[0]);  // r'[1] = r[1] - r[0]
  const uint32_t ib = b0 + uint32_t(kItems3) * threadIdx.x;                     // slice index of it[0]
  U a = 0, mw = 0;
#pragma unroll
  for (int i = 0; i < kItems3; ++i) {
    a = U(a + it[i]);
    mw = U(mw + U(U(ib + uint32_t(i)) * it[i]));
  }
  a = ReduceU(sm.reduce_tmp).Sum(a);
  __syncthreads();                                  // reduce_tmp reused
  mw = d2 ? ReduceU(sm.reduce_tmp).Sum(mw) : U(0);  // uniform per CTA
  if (threadIdx.x == 0) {
    U pa, pm;
    prefix(a, mw, &pa, &pm);
    sm.before_a = pa;
    sm.before_m = pm;
  }
  __syncthreads();
  RunningPrefix<U> first{sm.before_a};
  ScanU(sm.scanu_tmp).InclusiveSum(it, it, first);
  if (d2) {           // uniform per CTA
    __syncthreads();  // scanu_tmp reused
    RunningPrefix<U> second{U(U(b0) * sm.before_a - sm.before_m)};
    ScanU(sm.scanu_tmp).InclusiveSum(it, it, second);
  }
  __syncthreads();  // every thread has read its residuals from tile
#pragma unroll
  for (int i = 0; i < kItems3; ++i) sm.tile[uint32_t(kItems3) * threadIdx.x + i] = it[i];
  __syncthreads();
  Code codes[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) codes[j] = Code(sm.tile[uint32_t(j) * kThreads + threadIdx.x]);
  put_items(o, o0, codes, m);
  return agg;
}

}  // namespace ncclz::cuda::detail
