// v3 slice encoder (DeviceCodec::set_kernels(3), NCCLZ_DEVICE_CODEC=v3) and
// the fused float encoder (DeviceCodec::quantize_encode_slices_async): the
// same bytes, sizes and statuses as v1/v2 and the CPU's encode_slice with
// the codec forced to Block, built from the same framing functions
// (codec/slice_frame.hpp, codec/block_frame.hpp).
//
// Schedule: two kernels and one scan per batch, all in tiles of kTile3 codes
// (tile_v3.cuh; T = S * tiles_per_slice(L) CTAs, tile t = k * tps + c is
// tile c of slice k):
//  E1 sums     per tile: the codes (read, or quantized from floats), their
//              residuals (None/Delta1/Delta2 from the tile in shared memory
//              and the two codes before it; Lorenzo, codes only, by
//              predict_at on the codes in global memory), each block's width
//              by a warp OR (__reduce_or_sync), and the tile's payload words
//              and escapes, packed, to info[t]; float input also adds its
//              outliers to the caller's counter
//  scan        exclusive sum of info over the T tiles (CUB): a tile's words and
//              escapes before it in its slice are scan[t] - scan[first tile],
//              the slice's totals those of its last tile plus its info
//  E2 write    per tile, the same codes and residuals again, then: the
//              slice's framing from the totals (frame_slice: Block, the Raw
//              fallback, NoSpace), computed alike by every tile of the slice,
//              tile 0 writing the header, size and status; Block: the tile's
//              width nibbles (its 64 blocks own 32 whole nibble bytes), its
//              escape bytes, and its blocks' sign words and planes (a
//              __ballot_sync per plane) staged in shared memory at offsets
//              from a CTA scan, then stored with 16-byte stores
//              (cta_store_bytes); Raw: the tile's codes, the same way
// So the input is read twice (E1, E2) and the slices written once; no
// per-block scratch (v1/v2 write and re-read widths, offsets and scans per
// block of 32). The codes of a float input never reach memory.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "codec/slice_frame.hpp"
#include "cta_slice.cuh"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"
#include "tile_coder.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::Predictor;
using codec::Status;

template <class In>
__global__ void __launch_bounds__(kThreads)
    enc3_sum_kernel(In in, SliceBatchRef r, EncodeParams ep, uint32_t tps, unsigned long long* outliers) {
  using Code = typename In::CodeT;
  using Reduce = cub::BlockReduce<u64, kThreads>;
  using ReduceBad = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ typename ReduceBad::TempStorage tmp_bad;
  __shared__ Code tile[kTile3];
  __shared__ Code halo[2];
  const uint32_t t = blockIdx.x, k = t / tps, c = t - k * tps, cnt = r.count(k);
  if (size_t(c) * kTile3 >= cnt) {  // past the slice's end (uniform per CTA)
    if (threadIdx.x == 0) r.info[t] = 0;
    return;
  }
  const Predictor pe = ep.sel ? Predictor(ep.sel[2 * k + 1]) : codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
  Code res[kItems3];
  [[maybe_unused]] const int bad = load_residuals(in, size_t(k) * r.L, c, cnt, pe, ep, tile, halo, res);
  const u64 mine = tile_info_part(res);
  const u64 sum = Reduce(tmp).Sum(mine);
  if (threadIdx.x == 0) r.info[t] = sum;
  if constexpr (!In::kHasCodes) {
    const int nbad = ReduceBad(tmp_bad).Sum(bad);
    if (threadIdx.x == 0 && nbad) atomicAdd(outliers, (unsigned long long)nbad);
  }
}

template <class In>
__global__ void __launch_bounds__(kThreads) enc3_write_kernel(In in, SliceBatchRef r, EncodeParams ep, uint32_t tps,
                                                              uint8_t* __restrict__ dst, uint64_t* sizes, int* status) {
  using Code = typename In::CodeT;
  __shared__ EncTileSmem<Code> sm;
  const uint32_t t = blockIdx.x, k = t / tps, c = t - k * tps, cnt = r.count(k);
  const uint32_t b0 = c * kTile3;
  if (c > 0 && b0 >= cnt) return;  // past the slice's end; tile 0 always frames its slice (uniform)
  // The selector's choice (select_kernels.cu), else Block: Sparse slices are written there.
  const Codec want = ep.sel ? Codec(ep.sel[2 * k]) : Codec::Block;
  if (want == Codec::Sparse) return;  // uniform
  // The slice, framed from the tile sums exactly as v1's slice kernel does.
  const size_t first = size_t(k) * tps;
  const u64 before = r.scan[t] - r.scan[first];
  const u64 total = r.scan[first + tps - 1] + r.info[first + tps - 1] - r.scan[first];
  const Predictor pe = ep.sel ? Predictor(ep.sel[2 * k + 1]) : codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
  codec::SliceHeader h;
  const Status f = tile_frame<Code>(want, cnt, r.slot, pe, ep, total, &h);
  uint8_t* slot = dst + size_t(k) * r.slot;
  if (c == 0 && threadIdx.x == 0) {
    if (f == Status::Ok) codec::write_header(slot, h);
    sizes[k] = f == Status::Ok ? codec::kHeaderBytes + h.payload_bytes : 0;
    status[k] = int(f);
  }
  if (f != Status::Ok || cnt == 0) return;  // NoSpace, or a header-only slice (uniform)
  Code res[kItems3];
  load_residuals(in, size_t(k) * r.L, c, cnt, pe, ep, sm.tile, sm.halo, res);
  uint8_t* payload = slot + codec::kHeaderBytes;
  if (h.codec == Codec::Raw) {  // the codes' own bytes (little-endian, as in shared memory)
    const uint32_t m = cnt - b0 < kTile3 ? cnt - b0 : kTile3;
    cta_store_bytes(payload + size_t(b0) * sizeof(Code), reinterpret_cast<const uint32_t*>(sm.tile),
                    m * uint32_t(sizeof(Code)));
    return;
  }
  enc_tile_block(res, b0, uint32_t(codec::block_count(cnt)), before, total, payload, sm);
}

template <class In>
cudaError_t encode3_launch(const In& in, const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc,
                           uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status, unsigned long long* outliers,
                           cudaStream_t stream) {
  const uint32_t tps = tiles_per_slice(r.L), T = r.S * tps;
  enc3_sum_kernel<In><<<T, kThreads, 0, stream>>>(in, r, ep, tps, outliers);
  cudaError_t e = cudaGetLastError();
  // Tiles <= blocks: the scratch's per-block arrays and scan storage suffice.
  if (e == cudaSuccess) e = exclusive_sum_u64(r.info, r.scan, T, tmp, sc.tmp_bytes, stream);
  if (e != cudaSuccess) return e;
  enc3_write_kernel<In><<<T, kThreads, 0, stream>>>(in, r, ep, tps, dst, sizes, status);
  return cudaGetLastError();
}

}  // namespace

namespace detail {
int encode3_codes(const void* q, ElemType code_t, const SliceBatchRef& r, const EncodeParams& ep,
                  const SliceScratch& sc, uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status,
                  cudaStream_t stream) {
  if (code_t == ElemType::I32)
    return int(encode3_launch(CodesIn<int32_t>{static_cast<const int32_t*>(q)}, r, ep, sc, tmp, dst, sizes, status,
                              nullptr, stream));
  return int(encode3_launch(CodesIn<int64_t>{static_cast<const int64_t*>(q)}, r, ep, sc, tmp, dst, sizes, status,
                            nullptr, stream));
}
int encode3_floats(const void* x, ElemType t, const codec::QuantGrid& g, int64_t limit, ElemType code_t,
                   const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc, uint8_t* tmp, uint8_t* dst,
                   uint64_t* sizes, int* status, unsigned long long* outliers, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  with_floats_in(x, t, g, limit, code_t,
                 [&](const auto& in) { e = encode3_launch(in, r, ep, sc, tmp, dst, sizes, status, outliers, stream); });
  return int(e);
}
}  // namespace detail

int DeviceCodec::quantize_encode_slices_async(const void* d_x, ElemType t, size_t n, double eb, int64_t limit,
                                              ElemType code_t, uint32_t slice_len, Predictor p, uint32_t row,
                                              uint32_t plane, uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes,
                                              int* d_status, uint64_t* d_outlier_count) {
  if (status_) return status_;
  if (!fused_bound_ok(eb, d_outlier_count) || uint8_t(p) >= codec::kNumPredictors) return host_error(Status::BadHeader);
  // Lorenzo predicts from codes rows and planes away, which a tile of floats
  // does not hold: quantize_async + encode_slices_async for those.
  if (p == Predictor::Lorenzo2D || p == Predictor::Lorenzo3D) return host_error(Status::Unsupported);
  SliceBatchRef r;
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  int ret = 0;
  if (!fused_batch_start(t, n, code_t, slice_len, slot_bytes, d_outlier_count, s, &r, &ret)) return ret;
  const SliceScratch sc = SliceScratch::of(r.S, r.nbs);
  int err = 0;
  uint8_t* base = scratch(sc.bytes, &err);
  if (!base) return err;
  sc.place(base, &r);
  const EncodeParams ep{p, row, plane};
  auto* outliers = reinterpret_cast<unsigned long long*>(d_outlier_count);
  cudaError_t e = cudaSuccess;
  if (kernels_ == 4)  // the CTA slice coder (cta_codec.cu)
    return encode_cta_floats(d_x, t, codec::QuantGrid::from_bound(eb), limit, code_t, r, ep, d_dst, d_sizes, d_status,
                             outliers, s);
  with_floats_in(d_x, t, codec::QuantGrid::from_bound(eb), limit, code_t, [&](const auto& in) {
    e = encode3_launch(in, r, ep, sc, base + sc.tmp, d_dst, d_sizes, d_status, outliers, s);
  });
  return int(e);
}

}  // namespace ncclz::cuda
