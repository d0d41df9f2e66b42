// Slice encoder/decoder on the GPU (Block codec + predictors), byte-identical
// to cpp/src/codec/slice.cpp with the codec forced to Block (docs/FORMAT.md,
// "Slice header", "Predictors", "Block").
//
// *** NOT YET RUN ON A GPU. *** Written to be plainly correct, not fast
// (byte-wise stores, several passes); tests/cpp/test_cuda_codec.cpp compares
// it with the CPU codec, docs/GPU.md says how to run that.
//
// A batch is n codes cut into S slices of L codes (the last one shorter);
// slice k is written to / read from its slot, base + k * slot_bytes. Blocks of
// 32 codes are numbered globally, gb = k * nbs + b with nbs = ceil(L / 32);
// blocks past a short last slice's end are inactive (size 0).
//
// Encode
//  E1 width     one warp per block: residuals (predict_at, the CPU's
//               predictor) -> width w; info[gb] = (payload words << 32) | escaped
//  scan         exclusive sum of info over all blocks (one CUB scan); a
//               slice's sums are differences of the scan at its first block
//  E2 slice     one thread per slice: escapes, payload size, Block or the
//               CPU's Raw fallback (Block payload > raw size) or NoSpace;
//               writes the 24-byte header, the size and the status
//  E3 nibbles   one thread per nibble byte: two nibbles, their escape bytes
//  E4 planes    one warp per block: sign word and w bit planes (__ballot_sync)
//  E5 raw       one thread per code of a Raw-fallback slice: the code's bytes
// Decode
//  D1 header    one thread per slice: read_header (the CPU's), type, count,
//               codec; Raw length; Block: nibbles inside the payload
//  D2 nibbles   one thread per block: width or escape flag (info as above);
//               an unused high nibble must be 0
//  scan
//  D3 slice     escapes inside the payload
//  D4 escapes   one thread per block: escape byte 15..bits -> width;
//               words[gb] = payload words of the block
//  scan
//  D5 slice     total length == payload_bytes
//  D6 planes    one warp per block: block_check_planes (the CPU's), lanes'
//               magnitudes and signs -> residuals
//  D7 raw       one thread per code of a Raw slice
//  D8 predict   one CTA per slice: the inverse predictor in place (Delta1,
//               Delta2: block scans; Lorenzo: running sums along x, y, z)
//  D9 status    per-slice statuses to the caller
// Kernels after a failing check skip that slice (its state holds the status).
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "codec/block_coder.hpp"
#include "codec/predictor.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::kBlockLen;
using codec::Predictor;
using codec::Status;
using u64 = unsigned long long;

constexpr int kWarps = kThreads / 32;

/// Geometry of a batch (kernel argument).
struct Batch {
  size_t n = 0;       // codes
  uint32_t L = 1;     // slice length
  uint32_t S = 0;     // slices
  uint32_t nbs = 1;   // blocks per full slice
  size_t slot = 0;    // bytes per slot
  __host__ __device__ uint32_t count(uint32_t k) const { return k + 1 < S ? L : uint32_t(n - size_t(k) * L); }
  __host__ __device__ size_t blocks() const { return size_t(S) * nbs; }
};

/// Per-slice state shared by the kernels of one call.
struct SliceState {
  int status;           // codec::Status
  uint8_t mode;         // encode: 0 Block, 1 Raw, 2 nothing; decode: Codec
  uint8_t pred;         // predictor used / read
  uint32_t a0, a1;      // predictor args
  uint32_t plen;        // decode: payload_bytes
  uint32_t base;        // nibble bytes + escape bytes
  u64 first1, first2;   // scan values at the slice's first block
};

enum : uint8_t { kModeBlock = 0, kModeRaw = 1, kModeNone = 2 };

// The CPU selector's rule for a forced predictor (slice.cpp, predictor_applies):
// a predictor that does not apply to this slice becomes None.
__host__ __device__ Predictor effective_predictor(Predictor p, uint32_t row, uint32_t plane, size_t cnt) {
  return codec::predictor_fits(p, row, plane, cnt) ? p : Predictor::None;
}

__device__ __forceinline__ size_t global_warp() { return (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }
__device__ __forceinline__ size_t global_thread() { return size_t(blockIdx.x) * blockDim.x + threadIdx.x; }

__device__ __forceinline__ uint32_t warp_or(uint32_t x) { return __reduce_or_sync(kFullMask, x); }
__device__ __forceinline__ uint64_t warp_or(uint64_t x) {
  const uint32_t lo = __reduce_or_sync(kFullMask, uint32_t(x));
  const uint32_t hi = __reduce_or_sync(kFullMask, uint32_t(x >> 32));
  return (uint64_t(hi) << 32) | lo;
}

__device__ __forceinline__ u64 pack_info(int words, int escaped) { return (u64(words) << 32) | u64(escaped); }
__device__ __forceinline__ uint32_t info_words(u64 v) { return uint32_t(v >> 32); }
__device__ __forceinline__ uint32_t info_escapes(u64 v) { return uint32_t(v); }

// Residual of local element i of slice codes qk (cnt codes), 0 past the end.
template <class Code>
__device__ __forceinline__ Code residual_at(const Code* qk, uint32_t i, uint32_t cnt, Predictor p, uint32_t a0,
                                            uint32_t a1) {
  using U = codec::UCode<Code>;
  if (i >= cnt) return Code(0);
  return Code(U(qk[i]) - codec::predict_at(qk, i, p, a0, a1));
}

// ---- encode ---------------------------------------------------------------

struct EncodeParams {
  Predictor p;
  uint32_t row, plane;
};

template <class Code>
__global__ void __launch_bounds__(kThreads) enc_width_kernel(const Code* __restrict__ q, Batch bt, EncodeParams ep,
                                                             uint8_t* __restrict__ widths, u64* __restrict__ info) {
  const size_t gb = global_warp();
  if (gb >= bt.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / bt.nbs), b = uint32_t(gb % bt.nbs);
  const uint32_t cnt = bt.count(k);
  const int lane = threadIdx.x & 31;
  if (size_t(b) >= codec::block_count(cnt)) {
    if (lane == 0) {
      widths[gb] = 0;
      info[gb] = 0;
    }
    return;
  }
  const Predictor pe = effective_predictor(ep.p, ep.row, ep.plane, cnt);
  const Code* qk = q + size_t(k) * bt.L;
  const Code v = residual_at(qk, b * kBlockLen + lane, cnt, pe, ep.row, ep.plane);
  const int w = codec::block_bit_width(warp_or(codec::block_magnitude(v)));
  if (lane == 0) {
    widths[gb] = uint8_t(w);
    info[gb] = pack_info(w ? w + 1 : 0, w >= codec::kBlockEscape);
  }
}

template <class Code>
__global__ void enc_slice_kernel(Batch bt, EncodeParams ep, const u64* __restrict__ info,
                                 const u64* __restrict__ scan, uint8_t* __restrict__ dst, SliceState* st,
                                 uint64_t* sizes, int* status) {
  const size_t k = global_thread();
  if (k >= bt.S) return;
  const uint32_t cnt = bt.count(uint32_t(k));
  const size_t nb = codec::block_count(cnt);
  const size_t first = k * bt.nbs;
  const size_t raw = size_t(cnt) * sizeof(Code);
  SliceState s{};
  s.status = int(Status::Ok);
  s.first1 = scan[first];
  if (bt.slot < codec::kHeaderBytes) {
    s.status = int(Status::NoSpace);
    s.mode = kModeNone;
  } else {
    const size_t room = bt.slot - codec::kHeaderBytes;
    bool block = false;
    size_t total = 0;
    const Predictor pe = effective_predictor(ep.p, ep.row, ep.plane, cnt);
    if (cnt > 0) {
      const u64 sum = scan[first + nb - 1] + info[first + nb - 1] - s.first1;
      const size_t nesc = info_escapes(sum);
      s.base = uint32_t(codec::block_nibble_bytes(nb) + nesc);
      total = s.base + 4 * size_t(info_words(sum));
      block = total <= (room < raw ? room : raw);  // the CPU's coder_cap
    }
    codec::SliceHeader h;
    h.elem_type = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
    h.count = cnt;
    if (block) {
      s.mode = kModeBlock;
      s.pred = uint8_t(pe);
      s.a0 = (pe == Predictor::Lorenzo2D || pe == Predictor::Lorenzo3D) ? ep.row : 0;
      s.a1 = pe == Predictor::Lorenzo3D ? ep.plane : 0;
      h.codec = Codec::Block;
      h.predictor = pe;
      h.payload_bytes = uint32_t(total);
      h.pred_arg0 = s.a0;
      h.pred_arg1 = s.a1;
    } else if (raw <= room) {
      s.mode = kModeRaw;
      h.codec = Codec::Raw;
      h.predictor = Predictor::None;
      h.payload_bytes = uint32_t(raw);
    } else {
      s.mode = kModeNone;
      s.status = int(Status::NoSpace);
    }
    if (s.mode != kModeNone) {
      codec::write_header(dst + k * bt.slot, h);
      sizes[k] = codec::kHeaderBytes + h.payload_bytes;
    }
  }
  if (s.mode == kModeNone) sizes[k] = 0;
  status[k] = s.status;
  st[k] = s;
}

// One thread per nibble byte j of slice k (blocks 2j, 2j+1).
__global__ void enc_nibble_kernel(Batch bt, const uint8_t* __restrict__ widths, const u64* __restrict__ scan,
                                  const SliceState* __restrict__ st, uint8_t* __restrict__ dst) {
  const size_t per = codec::block_nibble_bytes(bt.nbs);
  const size_t g = global_thread();
  if (g >= size_t(bt.S) * per) return;
  const uint32_t k = uint32_t(g / per);
  const size_t j = g % per;
  const SliceState s = st[k];
  if (s.mode != kModeBlock) return;
  const size_t nb = codec::block_count(bt.count(k));
  if (2 * j >= nb) return;
  const size_t first = size_t(k) * bt.nbs;
  const size_t nib = codec::block_nibble_bytes(nb);
  uint8_t* payload = dst + size_t(k) * bt.slot + codec::kHeaderBytes;
  const size_t b0 = first + 2 * j;
  const int w0 = widths[b0];
  const int w1 = 2 * j + 1 < nb ? widths[b0 + 1] : 0;
  payload[j] = uint8_t(codec::block_nibble_of(w0) | (codec::block_nibble_of(w1) << 4));
  if (w0 >= codec::kBlockEscape) payload[nib + info_escapes(scan[b0] - s.first1)] = uint8_t(w0);
  if (w1 >= codec::kBlockEscape) payload[nib + info_escapes(scan[b0 + 1] - s.first1)] = uint8_t(w1);
}

template <class Code>
__global__ void __launch_bounds__(kThreads) enc_planes_kernel(const Code* __restrict__ q, Batch bt,
                                                              const uint8_t* __restrict__ widths,
                                                              const u64* __restrict__ scan,
                                                              const SliceState* __restrict__ st,
                                                              uint8_t* __restrict__ dst) {
  using U = codec::UCode<Code>;
  const size_t gb = global_warp();
  if (gb >= bt.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / bt.nbs), b = uint32_t(gb % bt.nbs);
  const SliceState s = st[k];
  if (s.mode != kModeBlock) return;
  const uint32_t cnt = bt.count(k);
  if (size_t(b) >= codec::block_count(cnt)) return;
  const int w = widths[gb];
  if (w == 0) return;
  const int lane = threadIdx.x & 31;
  const Code* qk = q + size_t(k) * bt.L;
  const Code v = residual_at(qk, b * kBlockLen + lane, cnt, Predictor(s.pred), s.a0, s.a1);
  const U mag = codec::block_magnitude(v);
  uint8_t* out = dst + size_t(k) * bt.slot + codec::kHeaderBytes + s.base + 4 * size_t(info_words(scan[gb] - s.first1));
  const uint32_t sign = __ballot_sync(kFullMask, v < 0);
  if (lane == 0) codec::store_u32(out, sign);
  for (int p = 0; p < w; ++p) {  // w is uniform per warp
    const uint32_t plane = __ballot_sync(kFullMask, uint32_t(mag >> p) & 1u);
    if (lane == (p & 31)) codec::store_u32(out + 4 + 4 * p, plane);
  }
}

template <class Code>
__global__ void enc_raw_kernel(const Code* __restrict__ q, Batch bt, const SliceState* __restrict__ st,
                               uint8_t* __restrict__ dst) {
  for (size_t i = global_thread(); i < bt.n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t k = uint32_t(i / bt.L);
    if (st[k].mode != kModeRaw) continue;
    const size_t local = i - size_t(k) * bt.L;
    store_le<Code>(dst + size_t(k) * bt.slot + codec::kHeaderBytes + local * sizeof(Code), q[i]);
  }
}

// ---- decode ---------------------------------------------------------------

template <class Code>
__global__ void dec_header_kernel(const uint8_t* __restrict__ src, const uint64_t* __restrict__ lens, Batch bt,
                                  SliceState* st) {
  const size_t k = global_thread();
  if (k >= bt.S) return;
  const ElemType t = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  const uint32_t cnt = bt.count(uint32_t(k));
  size_t len = bt.slot;
  if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
  SliceState s{};
  codec::SliceHeader h;
  Status r = codec::read_header(src + k * bt.slot, len, &h);
  if (r == Status::Ok && h.elem_type != t) r = Status::TypeMismatch;
  if (r == Status::Ok && h.count != cnt) r = Status::CountMismatch;
  if (r == Status::Ok) {
    s.mode = uint8_t(h.codec);
    s.pred = uint8_t(h.predictor);
    s.a0 = h.pred_arg0;
    s.a1 = h.pred_arg1;
    s.plen = h.payload_bytes;
    if (h.codec == Codec::Raw) {
      if (size_t(h.payload_bytes) != size_t(cnt) * sizeof(Code)) r = Status::Corrupt;
    } else if (h.codec == Codec::Block) {
      if (h.payload_bytes < codec::block_nibble_bytes(codec::block_count(cnt))) r = Status::Corrupt;
    } else {
      r = Status::Unsupported;  // Rans, Sparse: no device decoder yet
    }
  }
  s.status = int(r);
  st[k] = s;
}

__device__ __forceinline__ void set_corrupt(SliceState* s) { atomicExch(&s->status, int(Status::Corrupt)); }

// True when block (k, b) is a live block of an Ok Block slice.
__device__ __forceinline__ bool live_block(const Batch& bt, const SliceState& s, uint32_t k, uint32_t b) {
  return s.status == int(Status::Ok) && s.mode == uint8_t(Codec::Block) &&
         size_t(b) < codec::block_count(bt.count(k));
}

__global__ void dec_nibble_kernel(const uint8_t* __restrict__ src, Batch bt, SliceState* st, uint8_t* widths,
                                  u64* info) {
  const size_t gb = global_thread();
  if (gb >= bt.blocks()) return;
  const uint32_t k = uint32_t(gb / bt.nbs), b = uint32_t(gb % bt.nbs);
  const SliceState s = st[k];
  widths[gb] = 0;
  info[gb] = 0;
  if (!live_block(bt, s, k, b)) return;
  const size_t nb = codec::block_count(bt.count(k));
  const uint8_t* payload = src + size_t(k) * bt.slot + codec::kHeaderBytes;
  const unsigned byte = payload[b / 2];
  const unsigned v = (byte >> (4 * (b & 1))) & 15u;
  if (b == nb - 1 && (nb & 1) && (byte >> 4) != 0) set_corrupt(&st[k]);  // unused nibble
  const bool esc = v == unsigned(codec::kBlockEscape);
  widths[gb] = esc ? 0 : uint8_t(v);
  info[gb] = esc ? pack_info(0, 1) : pack_info(v ? int(v) + 1 : 0, 0);
}

// Per slice: escape bytes must lie inside the payload.
__global__ void dec_escape_total_kernel(Batch bt, const u64* __restrict__ info, const u64* __restrict__ scan,
                                        SliceState* st) {
  const size_t k = global_thread();
  if (k >= bt.S) return;
  SliceState s = st[k];
  const size_t nb = codec::block_count(bt.count(uint32_t(k)));
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block) || nb == 0) return;
  const size_t first = k * bt.nbs;
  s.first1 = scan[first];
  const size_t nesc = info_escapes(scan[first + nb - 1] + info[first + nb - 1] - s.first1);
  const size_t base = codec::block_nibble_bytes(nb) + nesc;
  if (base > s.plen) s.status = int(Status::Corrupt);
  s.base = uint32_t(base);
  st[k] = s;
}

template <class Code>
__global__ void dec_escape_kernel(const uint8_t* __restrict__ src, Batch bt, const u64* __restrict__ info,
                                  const u64* __restrict__ scan, SliceState* st, uint8_t* widths, u64* words) {
  const size_t gb = global_thread();
  if (gb >= bt.blocks()) return;
  const uint32_t k = uint32_t(gb / bt.nbs), b = uint32_t(gb % bt.nbs);
  const SliceState s = st[k];
  words[gb] = 0;
  if (!live_block(bt, s, k, b)) return;
  int w = widths[gb];
  if (info_escapes(info[gb])) {
    const size_t nib = codec::block_nibble_bytes(codec::block_count(bt.count(k)));
    const uint8_t* payload = src + size_t(k) * bt.slot + codec::kHeaderBytes;
    w = payload[nib + info_escapes(scan[gb] - s.first1)];  // inside: base <= plen was checked
    if (w < codec::kBlockEscape || w > codec::block_max_width<Code>()) {
      set_corrupt(&st[k]);
      return;
    }
    widths[gb] = uint8_t(w);
  }
  words[gb] = w ? u64(w + 1) : 0;
}

// Per slice: the payload's length must be exactly what the widths say.
__global__ void dec_length_kernel(Batch bt, const u64* __restrict__ words, const u64* __restrict__ scan,
                                  SliceState* st) {
  const size_t k = global_thread();
  if (k >= bt.S) return;
  SliceState s = st[k];
  const size_t nb = codec::block_count(bt.count(uint32_t(k)));
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block)) return;
  if (nb == 0) {
    if (s.plen != 0) st[k].status = int(Status::Corrupt);
    return;
  }
  const size_t first = k * bt.nbs;
  s.first2 = scan[first];
  const u64 total = s.base + 4 * (scan[first + nb - 1] + words[first + nb - 1] - s.first2);
  if (total != s.plen) s.status = int(Status::Corrupt);
  st[k] = s;
}

template <class Code>
__global__ void __launch_bounds__(kThreads) dec_planes_kernel(const uint8_t* __restrict__ src, Batch bt,
                                                              const uint8_t* __restrict__ widths,
                                                              const u64* __restrict__ scan, SliceState* st,
                                                              Code* __restrict__ out) {
  using U = codec::UCode<Code>;
  const size_t gb = global_warp();
  if (gb >= bt.blocks()) return;  // uniform per warp
  const uint32_t k = uint32_t(gb / bt.nbs), b = uint32_t(gb % bt.nbs);
  const SliceState s = st[k];
  if (!live_block(bt, s, k, b)) return;
  const uint32_t cnt = bt.count(k);
  const int lane = threadIdx.x & 31;
  const uint32_t i = b * kBlockLen + lane;
  Code* ok = out + size_t(k) * bt.L;
  const int w = widths[gb];
  if (w == 0) {
    if (i < cnt) ok[i] = Code(0);
    return;
  }
  const int m = cnt - b * kBlockLen < uint32_t(kBlockLen) ? int(cnt - b * kBlockLen) : kBlockLen;
  const uint8_t* p = src + size_t(k) * bt.slot + codec::kHeaderBytes + s.base + 4 * size_t(scan[gb] - s.first2);
  if (lane == 0 && !codec::block_check_planes<Code>(p, w, m)) set_corrupt(&st[k]);
  const uint32_t sign = codec::load_u32(p);
  U mag = 0;
  for (int q = 0; q < w; ++q) mag |= U((codec::load_u32(p + 4 + 4 * q) >> lane) & 1u) << q;
  if (i < cnt) ok[i] = Code(((sign >> lane) & 1u) ? U(U(0) - mag) : mag);
}

template <class Code>
__global__ void dec_raw_kernel(const uint8_t* __restrict__ src, Batch bt, const SliceState* __restrict__ st,
                               Code* __restrict__ out) {
  for (size_t i = global_thread(); i < bt.n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t k = uint32_t(i / bt.L);
    const SliceState& s = st[k];
    if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Raw)) continue;
    const size_t local = i - size_t(k) * bt.L;
    out[i] = load_le<Code>(src + size_t(k) * bt.slot + codec::kHeaderBytes + local * sizeof(Code));
  }
}

// Running-sum callback for cub::BlockScan across tiles.
template <class U>
struct RunningPrefix {
  U total;
  __device__ U operator()(U aggregate) {
    const U old = total;
    total += aggregate;
    return old;
  }
};

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
__global__ void __launch_bounds__(kThreads) dec_predict_kernel(Batch bt, const SliceState* __restrict__ st,
                                                               Code* __restrict__ out) {
  using U = codec::UCode<Code>;
  const uint32_t k = blockIdx.x;
  const SliceState s = st[k];
  if (s.status != int(Status::Ok) || s.mode != uint8_t(Codec::Block)) return;  // uniform per CTA
  const Predictor p = Predictor(s.pred);
  const size_t cnt = bt.count(k);
  U* x = reinterpret_cast<U*>(out + size_t(k) * bt.L);
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

__global__ void dec_status_kernel(Batch bt, const SliceState* __restrict__ st, int* status) {
  const size_t k = global_thread();
  if (k < bt.S) status[k] = st[k].status;
}

unsigned grid_warps(size_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }
unsigned grid_stride(size_t n) { return unsigned(std::min<size_t>(std::max<size_t>(grid_for(n), 1), 65536)); }

// Host-side checks shared by encode and decode; fills bt.
int make_batch(ElemType code_t, size_t n, uint32_t L, size_t slot, uint32_t forced_S, Batch* bt) {
  if (code_t != ElemType::I32 && code_t != ElemType::I64) return host_error(Status::Unsupported);
  if (L == 0) return host_error(Status::BadHeader);
  bt->n = n;
  bt->L = L;
  bt->slot = slot;
  const size_t S = forced_S ? forced_S : (n + L - 1) / L;
  if (S > 0x7fffffffu) return host_error(Status::Unsupported);
  bt->S = uint32_t(S);
  bt->nbs = uint32_t(codec::block_count(L));
  // info packs per-block payload words (<= 65) and escapes into 32 bits each.
  if (bt->blocks() >= (size_t(1) << 32) / 66) return host_error(Status::Unsupported);
  return 0;
}

template <class Code>
int encode_impl(const Code* q, const Batch& bt, const EncodeParams& ep, uint8_t* dst, uint64_t* sizes, int* status,
                cudaStream_t stream) {
  if (bt.S == 0) return 0;
  const size_t G = bt.blocks();
  Arena a(stream);
  const size_t o_w = a.reserve(G), o_info = a.reserve(G * 8), o_scan = a.reserve(G * 8),
               o_st = a.reserve(bt.S * sizeof(SliceState));
  cudaError_t e = a.allocate();
  if (e != cudaSuccess) return int(e);
  auto* widths = a.at<uint8_t>(o_w);
  auto* info = a.at<u64>(o_info);
  auto* scan = a.at<u64>(o_scan);
  auto* st = a.at<SliceState>(o_st);
  enc_width_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(q, bt, ep, widths, info);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = exclusive_sum_u64(info, scan, G, stream);
  if (e == cudaSuccess) {
    enc_slice_kernel<Code><<<grid_for(bt.S), kThreads, 0, stream>>>(bt, ep, info, scan, dst, st, sizes, status);
    enc_nibble_kernel<<<grid_for(size_t(bt.S) * codec::block_nibble_bytes(bt.nbs)), kThreads, 0, stream>>>(
        bt, widths, scan, st, dst);
    enc_planes_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(q, bt, widths, scan, st, dst);
    if (bt.n) enc_raw_kernel<Code><<<grid_stride(bt.n), kThreads, 0, stream>>>(q, bt, st, dst);
    e = cudaGetLastError();
  }
  const cudaError_t f = a.release();
  return int(e != cudaSuccess ? e : f);
}

template <class Code>
int decode_impl(const uint8_t* src, const uint64_t* lens, const Batch& bt, Code* out, int* status,
                cudaStream_t stream) {
  if (bt.S == 0) return 0;
  const size_t G = bt.blocks();
  Arena a(stream);
  const size_t o_w = a.reserve(G), o_info = a.reserve(G * 8), o_scan = a.reserve(G * 8), o_words = a.reserve(G * 8),
               o_scan2 = a.reserve(G * 8), o_st = a.reserve(bt.S * sizeof(SliceState));
  cudaError_t e = a.allocate();
  if (e != cudaSuccess) return int(e);
  auto* widths = a.at<uint8_t>(o_w);
  auto* info = a.at<u64>(o_info);
  auto* scan = a.at<u64>(o_scan);
  auto* words = a.at<u64>(o_words);
  auto* scan2 = a.at<u64>(o_scan2);
  auto* st = a.at<SliceState>(o_st);
  dec_header_kernel<Code><<<grid_for(bt.S), kThreads, 0, stream>>>(src, lens, bt, st);
  dec_nibble_kernel<<<grid_for(G), kThreads, 0, stream>>>(src, bt, st, widths, info);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = exclusive_sum_u64(info, scan, G, stream);
  if (e == cudaSuccess) {
    dec_escape_total_kernel<<<grid_for(bt.S), kThreads, 0, stream>>>(bt, info, scan, st);
    dec_escape_kernel<Code><<<grid_for(G), kThreads, 0, stream>>>(src, bt, info, scan, st, widths, words);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = exclusive_sum_u64(words, scan2, G, stream);
  if (e == cudaSuccess) {
    dec_length_kernel<<<grid_for(bt.S), kThreads, 0, stream>>>(bt, words, scan2, st);
    dec_planes_kernel<Code><<<grid_warps(G), kThreads, 0, stream>>>(src, bt, widths, scan2, st, out);
    if (bt.n) dec_raw_kernel<Code><<<grid_stride(bt.n), kThreads, 0, stream>>>(src, bt, st, out);
    dec_predict_kernel<Code><<<bt.S, kThreads, 0, stream>>>(bt, st, out);
    dec_status_kernel<<<grid_for(bt.S), kThreads, 0, stream>>>(bt, st, status);
    e = cudaGetLastError();
  }
  const cudaError_t f = a.release();
  return int(e != cudaSuccess ? e : f);
}

int encode_any(const void* q, ElemType code_t, size_t n, uint32_t L, uint32_t forced_S, Predictor p, uint32_t row,
               uint32_t plane, uint8_t* dst, size_t slot, uint64_t* sizes, int* status, void* stream) {
  if (uint8_t(p) >= codec::kNumPredictors) return host_error(Status::BadHeader);
  Batch bt;
  if (const int r = make_batch(code_t, n, L, slot, forced_S, &bt)) return r;
  const EncodeParams ep{p, row, plane};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return code_t == ElemType::I32 ? encode_impl(static_cast<const int32_t*>(q), bt, ep, dst, sizes, status, s)
                                 : encode_impl(static_cast<const int64_t*>(q), bt, ep, dst, sizes, status, s);
}

int decode_any(const uint8_t* src, size_t slot, const uint64_t* lens, size_t n, uint32_t L, uint32_t forced_S,
               ElemType code_t, void* out, int* status, void* stream) {
  Batch bt;
  if (const int r = make_batch(code_t, n, L, slot, forced_S, &bt)) return r;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return code_t == ElemType::I32 ? decode_impl(src, lens, bt, static_cast<int32_t*>(out), status, s)
                                 : decode_impl(src, lens, bt, static_cast<int64_t*>(out), status, s);
}

}  // namespace

int encode_slices_async(const void* d_q, ElemType code_t, size_t n, uint32_t slice_len, Predictor p, uint32_t row,
                        uint32_t plane, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes, int* d_status,
                        void* stream) {
  return encode_any(d_q, code_t, n, slice_len, 0, p, row, plane, d_dst, slot_bytes, d_sizes, d_status, stream);
}

int decode_slices_async(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens, size_t n,
                        uint32_t slice_len, ElemType code_t, void* d_out, int* d_status, void* stream) {
  return decode_any(d_src, slot_bytes, d_lens, n, slice_len, 0, code_t, d_out, d_status, stream);
}

int encode_slice_async(const void* d_q, ElemType code_t, uint32_t count, Predictor p, uint32_t row, uint32_t plane,
                       uint8_t* d_dst, size_t cap, uint64_t* d_size, int* d_status, void* stream) {
  // One slice even when count is 0 (a header-only Raw slice, as on the CPU).
  return encode_any(d_q, code_t, count, count ? count : 1, 1, p, row, plane, d_dst, cap, d_size, d_status, stream);
}

int decode_slice_async(const uint8_t* d_src, size_t len, ElemType code_t, uint32_t count, void* d_out, int* d_status,
                       void* stream) {
  return decode_any(d_src, len, nullptr, count, count ? count : 1, 1, code_t, d_out, d_status, stream);
}

}  // namespace ncclz::cuda
