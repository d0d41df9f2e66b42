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
#include "cta_slice.cuh"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"
#include "tile_coder.cuh"
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

template <class Code>
__global__ void __launch_bounds__(kThreads)
    dec3_index_kernel(const uint8_t* __restrict__ src, const uint64_t* __restrict__ lens, SliceBatchRef r, uint32_t tps,
                      bool values, int* status) {
  __shared__ typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan_tmp;
  __shared__ int bad;
  const uint32_t k = blockIdx.x;
  if (k == 0 && threadIdx.x == 0) *r.ticket = 0;
  for (uint32_t c = threadIdx.x; c < tps; c += kThreads) r.look[size_t(k) * tps + c].flag = 0;
  if (threadIdx.x == 0) bad = 0;
  const uint32_t cnt = r.count(k);
  size_t len = r.slot;
  if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
  const uint8_t* slice = src + size_t(k) * r.slot;
  SliceState s{};
  Status st = read_tile_slice<Code>(slice, len, cnt, values, &s);
  const uint32_t nb = uint32_t(codec::block_count(cnt));
  __syncthreads();
  if (st == Status::Ok && s.mode == uint8_t(Codec::Block)) {  // uniform per CTA
    const size_t first_block = size_t(k) * r.nbs;
    const u64 tot = index_blocks<Code>(
        slice + codec::kHeaderBytes, nb, s.plen, scan_tmp, &bad,
        [&](uint32_t b, unsigned w) { r.widths[first_block + b] = uint8_t(w); },
        [&](uint32_t b, uint32_t words, uint32_t esc) {
          r.info[size_t(k) * tps + b / kTileBlocks3] = (u64(words) << 32) | u64(esc);
        });
    if (bad) st = Status::Corrupt;
    if (st == Status::Ok && codec::block_stream_bytes(nb, info_escapes(tot), info_words(tot)) != s.plen)
      st = Status::Corrupt;
    s.nesc = info_escapes(tot);
    s.base = uint32_t(codec::block_nibble_bytes(nb) + s.nesc);
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
  __shared__ DecTileSmem<Code> sm;
  __shared__ unsigned ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(r.ticket, 1u);
  __syncthreads();
  const uint32_t t = ticket, k = t / tps, c = t - k * tps, cnt = r.count(k), b0 = c * kTile3;
  if (b0 >= cnt) return;  // past the slice's end (uniform per CTA, as every return below)
  const SliceState s = r.st[k];
  if (s.status != int(Status::Ok)) return;
  const size_t o0 = size_t(k) * r.L + b0;  // the tile's first output element
  const uint8_t* payload = src + size_t(k) * r.slot + codec::kHeaderBytes;
  if (s.mode == uint8_t(Codec::Raw)) {
    dec_tile_raw(payload, b0, cnt - b0 < kTile3 ? cnt - b0 : kTile3, o0, o);
    return;
  }
  // Block: the tile's widths (D1) and words (inside the payload: D1 checked
  // the length against the widths).
  const uint32_t nb = uint32_t(codec::block_count(cnt)), gb = b0 / kBlockLen + threadIdx.x;
  const int w = threadIdx.x < kTileBlocks3 && gb < nb ? r.widths[size_t(k) * r.nbs + gb] : 0;
  const uint8_t* words = payload + s.base + 4 * size_t(info_words(r.info[size_t(k) * tps + c]));
  dec_tile_block(w, words, b0, cnt, Predictor(s.pred), o0, o, &status[k], sm,
                 [&](U a, U m, U* pa, U* pm) { look_back<U>(r.look + size_t(k) * tps, c, a, m, pa, pm); });
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
int decode3_reduce(const uint8_t* src, const uint64_t* lens, ElemType code_t, const SliceBatchRef& r, CodeOp op,
                   const void* local, void* out, int* status, cudaStream_t stream) {
  const uint32_t tps = tiles_per_slice(r.L);
  cudaError_t e = cudaSuccess;
  const bool typed = with_code_type(code_t, [&](auto cv) {
    using Code = decltype(cv);
    // values = true: a Lorenzo slice is Unsupported here (its inverse is not fused).
    dec3_index_kernel<Code><<<r.S, kThreads, 0, stream>>>(src, lens, r, tps, true, status);
    e = cudaGetLastError();
    if (e != cudaSuccess) return;
    auto* o = static_cast<Code*>(out);
    const auto* l = static_cast<const Code*>(local);
    switch (op) {
      case CodeOp::Sum: e = decode3_tiles(src, r, tps, ReduceOut<Code, CodeOp::Sum>{o, l}, status, stream); break;
      case CodeOp::Max: e = decode3_tiles(src, r, tps, ReduceOut<Code, CodeOp::Max>{o, l}, status, stream); break;
      case CodeOp::Min: e = decode3_tiles(src, r, tps, ReduceOut<Code, CodeOp::Min>{o, l}, status, stream); break;
    }
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
  if (kernels_ == 4)  // the CTA slice coder (cta_codec.cu)
    return decode_cta(d_src, d_lens, code_t, r, d_out, t, eb, d_status, static_cast<cudaStream_t>(stream_));
  return decode3(d_src, d_lens, code_t, r, d_out, t, eb, d_status, static_cast<cudaStream_t>(stream_));
}

}  // namespace ncclz::cuda
