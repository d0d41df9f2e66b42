// Quantizer on the GPU (DeviceCodec's quantize/dequantize): the CPU's rules (cpp/src/codec/quantizer.hpp), one
// element per thread through the same NCCLZ_HD function quantize_one, so
// codes and outliers are those of the CPU. This file is compiled with
// --fmad=false (cuda/CMakeLists.txt): a fused multiply-add in the bound check
// or in q * step would round differently from the CPU.
//
// Run on an NVIDIA H200: tests/cpp/test_cuda_codec.cpp pass there (bench/results/gpu.md).
//
// Outlier indices come out in increasing order without a flag array:
//  1. quantize: tiles of kTile elements, one CTA each; codes stored, and the
//     tile's outlier count to tile_count[tile] (block reduction).
//  2. exclusive scan of the tile counts -> tile offsets; the total to the
//     caller's counter.
//  3. gather (only when the caller wants indices): a tile with outliers
//     re-evaluates its elements and writes the indices of its outliers at its
//     offset, in order (block scans). Tiles without outliers return at once,
//     so data without outliers costs one read of the tile counts.
// The tile counts, offsets and the scan's storage are the DeviceCodec's scratch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "codec/quantizer.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::ElemType;
using codec::QuantGrid;
using codec::Status;

constexpr int kItems = 8;  // elements per thread per tile
constexpr size_t kTile = size_t(kThreads) * kItems;

template <class T, class Code>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* __restrict__ x, size_t n, QuantGrid g, int64_t limit, Code* __restrict__ q,
                    unsigned long long* __restrict__ tile_count) {
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const size_t base = size_t(blockIdx.x) * kTile;
  int bad = 0;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const size_t i = base + size_t(k) * kThreads + threadIdx.x;
    if (i < n) {
      Code c;
      bad += !codec::quantize_one<T, Code>(x[i], g, limit, &c);
      q[i] = c;
    }
  }
  const int total = Reduce(tmp).Sum(bad);
  if (threadIdx.x == 0) tile_count[blockIdx.x] = (unsigned long long)total;
}

__global__ void outlier_total_kernel(const unsigned long long* tile_count, const unsigned long long* tile_off,
                                     size_t tiles, uint64_t* count) {
  *count = tile_off[tiles - 1] + tile_count[tiles - 1];
}

template <class T, class Code>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const T* __restrict__ x, size_t n, QuantGrid g, int64_t limit, const unsigned long long* tile_count,
                  const unsigned long long* tile_off, uint64_t* idx, size_t cap) {
  if (tile_count[blockIdx.x] == 0) return;  // uniform per CTA
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const size_t base = size_t(blockIdx.x) * kTile;
  unsigned long long pos = tile_off[blockIdx.x];
  for (int k = 0; k < kItems; ++k) {
    const size_t i = base + size_t(k) * kThreads + threadIdx.x;
    int flag = 0;
    if (i < n) {
      Code c;
      flag = !codec::quantize_one<T, Code>(x[i], g, limit, &c);
    }
    int rank = 0, sum = 0;
    Scan(tmp).ExclusiveSum(flag, rank, sum);
    if (flag && pos + rank < cap) idx[pos + rank] = i;
    pos += sum;
    __syncthreads();  // tmp is reused
  }
}

template <class T, class Code>
__global__ void dequantize_kernel(const Code* __restrict__ q, size_t n, QuantGrid g, T* __restrict__ out) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = codec::dequantize_one<T, Code>(q[i], g);
}

template <class T>
__global__ void scatter_kernel(const T* __restrict__ x, const uint64_t* __restrict__ idx, const uint64_t* count,
                               size_t cap, T* __restrict__ out) {
  const size_t m = *count < cap ? size_t(*count) : cap;
  for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < m; k += size_t(gridDim.x) * blockDim.x)
    out[idx[k]] = x[idx[k]];
}

unsigned stride_grid(size_t n) { return unsigned(std::min<size_t>(grid_for(n), 65536)); }

}  // namespace

namespace detail {
size_t quantize_scratch_bytes(size_t n) {
  if (n == 0) return 0;
  const size_t tiles = (n + kTile - 1) / kTile;
  ScratchLayout l;
  l.add(tiles * 8);
  l.add(tiles * 8);
  l.add(exclusive_sum_bytes(tiles));
  return l.bytes();
}
}  // namespace detail

int DeviceCodec::quantize_async(const void* d_x, ElemType t, size_t n, double eb, int64_t limit, void* d_q,
                                ElemType code_t, uint64_t* d_outlier_count, uint64_t* d_outlier_idx, size_t idx_cap) {
  return quantize_grid_async(d_x, t, n, eb, eb, limit, d_q, code_t, d_outlier_count, d_outlier_idx, idx_cap);
}

int DeviceCodec::quantize_checked_async(const void* d_x, ElemType t, size_t n, double eb, double check_eb,
                                        int64_t limit, void* d_q, ElemType code_t, uint64_t* d_outlier_count,
                                        bool exact_check) {
  return quantize_grid_async(d_x, t, n, eb, check_eb, limit, d_q, code_t, d_outlier_count, nullptr, 0, exact_check);
}

int DeviceCodec::quantize_grid_async(const void* d_x, ElemType t, size_t n, double eb, double check_eb, int64_t limit,
                                     void* d_q, ElemType code_t, uint64_t* d_outlier_count, uint64_t* d_outlier_idx,
                                     size_t idx_cap, bool exact_check) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (status_) return status_;
  if (!(eb > 0) || !(eb < 1e300) || !(check_eb >= eb) || !(check_eb < 1e300) || d_outlier_count == nullptr) {
    return host_error(Status::BadHeader);
  }
  QuantGrid g = QuantGrid::from_bound(eb);
  g.eb = check_eb;  // the grid is 2*eb; the check (core::quantize_buf's rule)
  g.exact_check = exact_check;
  if (n == 0) {
    return int(cudaMemsetAsync(d_outlier_count, 0, sizeof(uint64_t), stream));
  }
  const size_t tiles = (n + kTile - 1) / kTile;
  if (tiles > 0x7fffffffu) return host_error(Status::Unsupported);
  // Scratch: per-tile outlier counts, their offsets, the scan's storage.
  ScratchLayout l;
  const size_t o_cnt = l.add(tiles * 8), o_off = l.add(tiles * 8);
  const size_t tmp_bytes = exclusive_sum_bytes(tiles);
  const size_t o_tmp = l.add(tmp_bytes);
  int err = 0;
  uint8_t* base = scratch(l.bytes(), &err);
  if (!base) return err;
  auto* cnt = ScratchLayout::at<unsigned long long>(base, o_cnt);
  auto* off = ScratchLayout::at<unsigned long long>(base, o_off);
  cudaError_t e = cudaSuccess;
  bool type_ok = false;
  with_float_type(t, [&](auto tv) {
    using T = decltype(tv);
    with_code_type(code_t, [&](auto cv) {
      using Code = decltype(cv);
      type_ok = true;
      const int64_t lim = std::clamp<int64_t>(limit, 0, codec::max_code_limit<Code>());
      quantize_kernel<T, Code><<<unsigned(tiles), kThreads, 0, stream>>>(static_cast<const T*>(d_x), n, g, lim,
                                                                         static_cast<Code*>(d_q), cnt);
      e = cudaGetLastError();
      if (e == cudaSuccess) e = exclusive_sum_u64(cnt, off, tiles, base + o_tmp, tmp_bytes, stream);
      if (e == cudaSuccess) {
        outlier_total_kernel<<<1, 1, 0, stream>>>(cnt, off, tiles, d_outlier_count);
        e = cudaGetLastError();
      }
      if (e == cudaSuccess && d_outlier_idx != nullptr && idx_cap > 0) {
        gather_kernel<T, Code><<<unsigned(tiles), kThreads, 0, stream>>>(static_cast<const T*>(d_x), n, g, lim, cnt,
                                                                         off, d_outlier_idx, idx_cap);
        e = cudaGetLastError();
      }
    });
  });
  if (!type_ok) return host_error(Status::Unsupported);
  return int(e);
}

int DeviceCodec::dequantize_async(const void* d_q, ElemType code_t, size_t n, double eb, void* d_out, ElemType t) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (status_) return status_;
  if (!(eb > 0) || !(eb < 1e300)) return host_error(Status::BadHeader);
  const QuantGrid g = QuantGrid::from_bound(eb);
  bool type_ok = false;
  cudaError_t e = cudaSuccess;
  with_float_type(t, [&](auto tv) {
    using T = decltype(tv);
    with_code_type(code_t, [&](auto cv) {
      using Code = decltype(cv);
      type_ok = true;
      if (n == 0) return;
      dequantize_kernel<T, Code>
          <<<stride_grid(n), kThreads, 0, stream>>>(static_cast<const Code*>(d_q), n, g, static_cast<T*>(d_out));
      e = cudaGetLastError();
    });
  });
  if (!type_ok) return host_error(Status::Unsupported);
  return int(e);
}

int DeviceCodec::scatter_outliers_async(const void* d_x, ElemType t, const uint64_t* d_idx, const uint64_t* d_count,
                                        size_t idx_cap, void* d_out) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (status_) return status_;
  cudaError_t e = cudaSuccess;
  const bool ok = with_float_type(t, [&](auto tv) {
    using T = decltype(tv);
    if (idx_cap == 0) return;
    scatter_kernel<T><<<stride_grid(idx_cap), kThreads, 0, stream>>>(static_cast<const T*>(d_x), d_idx, d_count,
                                                                     idx_cap, static_cast<T*>(d_out));
    e = cudaGetLastError();
  });
  if (!ok) return host_error(Status::Unsupported);
  return int(e);
}

}  // namespace ncclz::cuda
