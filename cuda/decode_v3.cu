// v3 slice decoder (DeviceCodec::set_kernels(3), NCCLZ_DEVICE_CODEC=v3) and
// the fused decoder to float values (DeviceCodec::decode_dequantize_slices_async):
// the statuses of v1/v2 (the CPU decoder's checks, from the same NCCLZ_HD
// functions: read_slice_header, raw_payload_valid, block_unused_nibble_ok,
// block_escape_ok, block_stream_bytes, block_check_planes as warp votes).
//
// Schedule: two kernels per batch (a third, v1's per-slice Lorenzo inverse,
// when codes are asked for):
//  D1 index    one CTA per slice: the header and its checks; for a Block
//              slice its width nibbles and escape bytes in rounds of 2,048
//              blocks (8 per thread): a CTA scan of the escape flags gives
//              each escaped block its escape byte, a second one of the
//              blocks' words the offsets; each block's width to widths[],
//              each tile's words and escapes before it to info[t]; the
//              payload length check. Statuses to the caller's array and to
//              the slice's state; the tiles' look-back flags cleared
//  D2 tiles    one CTA per tile of kTile3 codes, in the order of a ticket
//              (atomicAdd: a tile only ever waits on tiles that started
//              before it): the tile's block words, contiguous in the payload,
//              copied into shared memory (aligned 4-byte loads, funnel-shifted
//              where the words are not aligned), each block decoded by its
//              warp (lane l reads bit l of each plane) with the plane checks
//              as warp votes (a failure stores Corrupt into the slice's
//              status), then per predictor:
//                None, Lorenzo: the residuals written out (Lorenzo: codes only;
//                  D3 follows; to floats such a slice is Unsupported);
//                Delta1: the tile's sum published, the sum of the tiles
//                  before it in its slice found by decoupled look-back, and
//                  the tile's running sum from there (CTA scan);
//                Delta2: the same with two sums per tile, a = sum r' and
//                  m = sum j r'[j] (r' = the residuals with r'[1] = r[1] -
//                  r[0], j the index in the slice; then the codes are the
//                  running sum of the running sum of r'), and two CTA scans
//                  from d_in = a_before and x_in = b a_before - m_before (b
//                  the tile's first index)
//              and the codes, or dequantize_one of them, stored coalesced.
//              Raw slices are copied (and dequantized) by their tiles.
//  D3 Lorenzo  v1's per-slice inverse (slice_kernels.cu), codes only
// The payload is read once (the index reads the nibbles and escape bytes
// again, 1/64 of a slice), the output written once, and the scratch is per
// tile (v2 writes and scans per-block arrays, four passes).
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "codec/slice_frame.hpp"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"
#include "tile_v3.cuh"

#if defined(NCCLZ_CUDA_EMULATED)
#include <cstdlib>
#endif

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::kBlockLen;
using codec::Predictor;
using codec::Status;

// Where decoded codes go: as they are, or dequantized to T.
template <class Code>
struct CodesOut {
  using CodeT = Code;
  Code* out;
  __device__ __forceinline__ void put(size_t i, Code v) const { out[i] = v; }
};
// Decoded codes added into a local slice, wrapping (decode_add_slice_async,
// the reduction step of a device rank): out[i] = code + local[i].
template <class Code>
struct AddOut {
  using CodeT = Code;
  using U = std::make_unsigned_t<Code>;
  Code* out;
  const Code* local;
  __device__ __forceinline__ void put(size_t i, Code v) const { out[i] = Code(U(U(v) + U(local[i]))); }
};
template <class T, class Code>
struct ValuesOut {
  using CodeT = Code;
  T* out;
  codec::QuantGrid g;
  __device__ __forceinline__ void put(size_t i, Code v) const { out[i] = codec::dequantize_one<T, Code>(v, g); }
};

constexpr int kIndexItems = 8;  // blocks per thread per round of D1

template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec3_index_kernel(const uint8_t* __restrict__ src, const uint64_t* __restrict__ lens, SliceBatchRef r, uint32_t tps,
                      bool values, int* status) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int bad;
  const uint32_t k = blockIdx.x;
  if (k == 0 && threadIdx.x == 0) *r.ticket = 0;
  for (uint32_t c = threadIdx.x; c < tps; c += kThreads) r.look[size_t(k) * tps + c].flag = 0;
  if (threadIdx.x == 0) bad = 0;
  // The header, as dec_header_kernel (every thread: the same few loads).
  const ElemType ct = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  const uint32_t cnt = r.count(k);
  size_t len = r.slot;
  if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
  const uint8_t* slice = src + size_t(k) * r.slot;
  SliceState s{};
  codec::SliceHeader h;
  Status st = codec::read_slice_header(slice, len, ct, cnt, &h);
  const uint32_t nb = uint32_t(codec::block_count(cnt));
  if (st == Status::Ok) {
    s.mode = uint8_t(h.codec);
    s.pred = uint8_t(h.predictor);
    s.a0 = h.pred_arg0;
    s.a1 = h.pred_arg1;
    s.plen = h.payload_bytes;
    if (h.codec == Codec::Raw) {
      if (!codec::raw_payload_valid(h)) st = Status::Corrupt;
    } else if (h.codec == Codec::Block) {
      // Values out: Lorenzo's inverse is not fused (D3 runs on codes only), so
      // such a slice is Unsupported whatever its payload, as a Rans slice is.
      if (values && (h.predictor == Predictor::Lorenzo2D || h.predictor == Predictor::Lorenzo3D))
        st = Status::Unsupported;
      else if (h.payload_bytes < codec::block_nibble_bytes(nb))
        st = Status::Corrupt;
    } else {
      st = Status::Unsupported;  // Rans, Sparse: no device decoder yet
    }
  }
  __syncthreads();
  if (st == Status::Ok && h.codec == Codec::Block) {  // uniform per CTA
    const uint8_t* payload = slice + codec::kHeaderBytes;
    const size_t nib = codec::block_nibble_bytes(nb);
    const size_t first_block = size_t(k) * r.nbs;
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
      if (b < nb && nb - 1 < b + kIndexItems && !codec::block_unused_nibble_ok(payload, nb)) atomicExch(&bad, 1);
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
          w = at < s.plen ? payload[at] : 0u;
          if (at >= s.plen || !codec::block_escape_ok<Code>(w)) {
            atomicExch(&bad, 1);
            w = 0;
          }
        }
        r.widths[first_block + b + i] = uint8_t(w);
        nw += codec::block_words(int(w));
      }
      uint32_t woff, wtot;
      Scan(scan_tmp).ExclusiveSum(nw, woff, wtot);
      __syncthreads();
      if (b < nb && b % kTileBlocks3 == 0)  // a tile starts here: its words and escapes before it
        r.info[size_t(k) * tps + b / kTileBlocks3] = (u64(words_run + woff) << 32) | u64(esc_run + eoff);
      esc_run += etot;
      words_run += wtot;
    }
    __syncthreads();
    if (bad) st = Status::Corrupt;
    if (st == Status::Ok && codec::block_stream_bytes(nb, esc_run, words_run) != s.plen) st = Status::Corrupt;
    s.nesc = esc_run;
    s.base = uint32_t(nib + esc_run);
  }
  if (threadIdx.x == 0) {
    s.status = int(st);
    r.st[k] = s;
    status[k] = int(st);
  }
}

// The sums of the tiles before tile c of a slice (look-back over the tiles'
// published sums L[0 .. c)), after publishing this tile's own (a, m); then
// this tile's inclusive sums. One thread.
template <class U>
__device__ void look_back(TileLook* L, uint32_t c, U a, U m, U* pa, U* pm) {
  U sa = 0, sm = 0;
  if (c > 0) {
    L[c].agg_a = a;
    L[c].agg_m = m;
    __threadfence();
    *reinterpret_cast<volatile unsigned*>(&L[c].flag) = 1u;
    for (uint32_t q = c - 1;; --q) {
      const volatile TileLook* lq = &L[q];
      unsigned f;
      while ((f = lq->flag) == 0u) {
#if defined(NCCLZ_CUDA_EMULATED)
        std::abort();  // tiles run in ticket order there: a predecessor that has not published is a bug
#endif
      }
      __threadfence();
      if (f == 2u) {
        sa = U(sa + U(lq->incl_a));
        sm = U(sm + U(lq->incl_m));
        break;
      }
      sa = U(sa + U(lq->agg_a));
      sm = U(sm + U(lq->agg_m));
    }
  }
  L[c].incl_a = U(sa + a);
  L[c].incl_m = U(sm + m);
  __threadfence();
  *reinterpret_cast<volatile unsigned*>(&L[c].flag) = 2u;
  *pa = sa;
  *pm = sm;
}

template <class Out>
__global__ void __launch_bounds__(kThreads)
    dec3_tile_kernel(const uint8_t* __restrict__ src, SliceBatchRef r, uint32_t tps, Out o, int* status) {
  using Code = typename Out::CodeT;
  using U = codec::UCode<Code>;
  constexpr uint32_t kMaxWords = kTileBlocks3 * codec::block_words(codec::block_max_width<Code>());
  using Scan32 = cub::BlockScan<uint32_t, kThreads>;
  using ScanU = cub::BlockScan<U, kThreads>;
  using ReduceU = cub::BlockReduce<U, kThreads>;
  __shared__ typename Scan32::TempStorage scan32_tmp;
  __shared__ typename ScanU::TempStorage scanu_tmp;
  __shared__ typename ReduceU::TempStorage reduce_tmp;
  __shared__ uint32_t stage[kMaxWords + 1];
  __shared__ U tile[kTile3];
  __shared__ uint32_t boff[kTileBlocks3];
  __shared__ uint8_t wid[kTileBlocks3];
  __shared__ unsigned ticket;
  __shared__ U before_a, before_m;
  if (threadIdx.x == 0) ticket = atomicAdd(r.ticket, 1u);
  __syncthreads();
  const uint32_t t = ticket, k = t / tps, c = t - k * tps, cnt = r.count(k), b0 = c * kTile3;
  if (b0 >= cnt) return;  // past the slice's end (uniform per CTA, as every return below)
  const SliceState s = r.st[k];
  if (s.status != int(Status::Ok)) return;
  const uint32_t m = cnt - b0 < kTile3 ? cnt - b0 : kTile3;  // codes in the tile
  const size_t o0 = size_t(k) * r.L + b0;                    // its first output element
  const uint8_t* payload = src + size_t(k) * r.slot + codec::kHeaderBytes;
  if (s.mode == uint8_t(Codec::Raw)) {
    const uint8_t* in = payload + size_t(b0) * sizeof(Code);
    const bool al = aligned_to(in, sizeof(Code));
#pragma unroll
    for (int j = 0; j < kItems3; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      if (e < m)
        o.put(o0 + e, al ? reinterpret_cast<const Code*>(in)[e] : load_le<Code>(in + size_t(e) * sizeof(Code)));
    }
    return;
  }
  // Block: the tile's widths (D1), its blocks' word offsets, its words.
  const uint32_t nb = uint32_t(codec::block_count(cnt)), gb0 = b0 / kBlockLen;
  uint32_t v = 0;
  if (threadIdx.x < kTileBlocks3) {
    const uint32_t gb = gb0 + threadIdx.x;
    const int w = gb < nb ? r.widths[size_t(k) * r.nbs + gb] : 0;
    wid[threadIdx.x] = uint8_t(w);
    v = codec::block_words(w);
  }
  uint32_t off, agg;
  Scan32(scan32_tmp).ExclusiveSum(v, off, agg);
  if (threadIdx.x < kTileBlocks3) boff[threadIdx.x] = off;
  // Inside the payload: D1 checked the length against the widths.
  cta_load_bytes(stage, payload + s.base + 4 * size_t(info_words(r.info[size_t(k) * tps + c])), 4 * agg);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  U res[kItems3];
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const int blk = j * kWarps3 + warp, w = wid[blk];
    U x = 0;
    if (w > 0) {  // uniform per warp
      const uint32_t* bw = stage + boff[blk];
      U mag = 0;
      for (int q = 0; q < w; ++q) mag |= U((bw[1 + q] >> lane) & 1u) << q;
      const uint32_t gb = gb0 + uint32_t(blk);
      const uint32_t mm = cnt - gb * kBlockLen < uint32_t(kBlockLen) ? cnt - gb * kBlockLen : uint32_t(kBlockLen);
      if (warp_planes_bad<Code>(bw[0], mag, w, mm, lane) && lane == 0) atomicExch(&status[k], int(Status::Corrupt));
      x = ((bw[0] >> lane) & 1u) ? U(U(0) - mag) : mag;
    }
    res[j] = x;
  }
  const Predictor p = Predictor(s.pred);
  if (p != Predictor::Delta1 && p != Predictor::Delta2) {  // None; Lorenzo (codes: D3 follows)
#pragma unroll
    for (int j = 0; j < kItems3; ++j) {
      const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
      if (e < m) o.put(o0 + e, Code(res[j]));
    }
    return;
  }
  // Delta1/Delta2: kItems3 consecutive residuals per thread.
#pragma unroll
  for (int j = 0; j < kItems3; ++j) tile[uint32_t(j) * kThreads + threadIdx.x] = res[j];
  __syncthreads();
  const bool d2 = p == Predictor::Delta2;
  U it[kItems3];
#pragma unroll
  for (int i = 0; i < kItems3; ++i) it[i] = tile[uint32_t(kItems3) * threadIdx.x + i];
  if (d2 && c == 0 && threadIdx.x == 0 && cnt >= 2) it[1] = U(it[1] - it[0]);  // r'[1] = r[1] - r[0]
  const uint32_t ib = b0 + uint32_t(kItems3) * threadIdx.x;                    // slice index of it[0]
  U a = 0, mw = 0;
#pragma unroll
  for (int i = 0; i < kItems3; ++i) {
    a = U(a + it[i]);
    mw = U(mw + U(U(ib + uint32_t(i)) * it[i]));
  }
  a = ReduceU(reduce_tmp).Sum(a);
  __syncthreads();                               // reduce_tmp reused
  mw = d2 ? ReduceU(reduce_tmp).Sum(mw) : U(0);  // uniform per CTA
  if (threadIdx.x == 0) {
    U pa, pm;
    look_back<U>(r.look + size_t(k) * tps, c, a, mw, &pa, &pm);
    before_a = pa;
    before_m = pm;
  }
  __syncthreads();
  RunningPrefix<U> first{before_a};
  ScanU(scanu_tmp).InclusiveSum(it, it, first);
  if (d2) {           // uniform per CTA
    __syncthreads();  // scanu_tmp reused
    RunningPrefix<U> second{U(U(b0) * before_a - before_m)};
    ScanU(scanu_tmp).InclusiveSum(it, it, second);
  }
  __syncthreads();  // every thread has read its residuals from tile
#pragma unroll
  for (int i = 0; i < kItems3; ++i) tile[uint32_t(kItems3) * threadIdx.x + i] = it[i];
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems3; ++j) {
    const uint32_t e = uint32_t(j) * kThreads + threadIdx.x;
    if (e < m) o.put(o0 + e, Code(tile[e]));
  }
}

template <class Out>
cudaError_t decode3_tiles(const uint8_t* src, const SliceBatchRef& r, uint32_t tps, const Out& o, int* status,
                          cudaStream_t stream) {
  dec3_tile_kernel<Out><<<r.S * tps, kThreads, 0, stream>>>(src, r, tps, o, status);
  return cudaGetLastError();
}

}  // namespace

namespace detail {
int decode3(const uint8_t* src, const uint64_t* lens, ElemType code_t, const SliceBatchRef& r, void* out, ElemType t,
            double eb, int* status, cudaStream_t stream) {
  const uint32_t tps = tiles_per_slice(r.L);
  const bool values = t != code_t;
  cudaError_t e = cudaSuccess;
  with_code_type(code_t, [&](auto cv) {
    using Code = decltype(cv);
    dec3_index_kernel<Code><<<r.S, kThreads, 0, stream>>>(src, lens, r, tps, values, status);
    e = cudaGetLastError();
    if (e != cudaSuccess) return;
    if (!values) {
      e = decode3_tiles(src, r, tps, CodesOut<Code>{static_cast<Code*>(out)}, status, stream);
      if (e == cudaSuccess) e = cudaError_t(lorenzo_inverse(r, code_t, out, stream));
      return;
    }
    with_float_type(t, [&](auto tv) {
      using T = decltype(tv);
      e = decode3_tiles(src, r, tps, ValuesOut<T, Code>{static_cast<T*>(out), codec::QuantGrid::from_bound(eb)}, status,
                        stream);
    });
  });
  return int(e);
}
int decode3_add(const uint8_t* src, const uint64_t* lens, ElemType code_t, const SliceBatchRef& r, const void* local,
                void* out, int* status, cudaStream_t stream) {
  const uint32_t tps = tiles_per_slice(r.L);
  cudaError_t e = cudaSuccess;
  const bool typed = with_code_type(code_t, [&](auto cv) {
    using Code = decltype(cv);
    // values = true: a Lorenzo slice is Unsupported here (its inverse is not fused).
    dec3_index_kernel<Code><<<r.S, kThreads, 0, stream>>>(src, lens, r, tps, true, status);
    e = cudaGetLastError();
    if (e == cudaSuccess)
      e = decode3_tiles(src, r, tps, AddOut<Code>{static_cast<Code*>(out), static_cast<const Code*>(local)}, status,
                        stream);
  });
  return typed ? int(e) : host_error(Status::Unsupported);
}
}  // namespace detail

int DeviceCodec::decode_dequantize_slices_async(const uint8_t* d_src, size_t slot_bytes, const uint64_t* d_lens,
                                                size_t n, uint32_t slice_len, ElemType code_t, double eb, void* d_out,
                                                ElemType t, int* d_status) {
  if (status_) return status_;
  if (!(eb > 0) || !(eb < 1e300)) return host_error(Status::BadHeader);
  if (t != ElemType::F32 && t != ElemType::F64 && t != ElemType::F16 && t != ElemType::BF16)
    return host_error(Status::Unsupported);
  SliceBatchRef r;
  if (const int e = make_batch(code_t, n, slice_len, slot_bytes, 0, &r)) return e;
  if (r.S == 0) return 0;
  const SliceScratch sc = SliceScratch::of(r.S, r.nbs);
  int err = 0;
  uint8_t* base = scratch(sc.bytes, &err);
  if (!base) return err;
  sc.place(base, &r);
  return decode3(d_src, d_lens, code_t, r, d_out, t, eb, d_status, static_cast<cudaStream_t>(stream_));
}

}  // namespace ncclz::cuda
