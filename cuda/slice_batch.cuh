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
#include "device_common.cuh"

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

struct SliceBatchRef {
  // Geometry.
  size_t n = 0;      ///< codes
  uint32_t L = 1;    ///< slice length
  uint32_t S = 0;    ///< slices
  uint32_t nbs = 1;  ///< blocks per full slice
  size_t slot = 0;   ///< bytes per slot
  // Scratch (per block: G = S * nbs entries; per slice: S).
  uint8_t* widths = nullptr;  ///< block widths
  u64* info = nullptr;        ///< packed (payload words << 32 | escaped) per block
  u64* scan = nullptr;        ///< exclusive scan of info
  u64* words = nullptr;       ///< decode: payload words per block
  u64* scan2 = nullptr;       ///< decode: exclusive scan of words
  SliceState* st = nullptr;   ///< per slice

  __host__ __device__ uint32_t count(uint32_t k) const { return k + 1 < S ? L : uint32_t(n - size_t(k) * L); }
  __host__ __device__ size_t blocks() const { return size_t(S) * nbs; }
};

/// The scratch a batch of S slices of nbs blocks each takes (scans' temporary
/// storage included): its layout's offsets, and the bytes in all.
struct SliceScratch {
  size_t widths, info, scan, words, scan2, st, tmp, tmp_bytes, bytes;
  static SliceScratch of(uint32_t S, uint32_t nbs) {
    const size_t G = size_t(S) * nbs;
    ScratchLayout l;
    SliceScratch s;
    s.widths = l.add(G);
    s.info = l.add(G * 8);
    s.scan = l.add(G * 8);
    s.words = l.add(G * 8);
    s.scan2 = l.add(G * 8);
    s.st = l.add(size_t(S) * sizeof(SliceState));
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
  }
};

}  // namespace ncclz::cuda::detail
