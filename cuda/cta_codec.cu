// The CTA slice coder's batch form (DeviceCodec::set_kernels(4),
// NCCLZ_DEVICE_CODEC=cta): ONE kernel per batch, one CTA per slice, each
// running cta_encode_slice / cta_decode_slice (cta_slice.cuh) on its slice;
// no global scratch but the per-slice state that v1's Lorenzo inverse reads.
// Same bytes and statuses as v1, v2, v3 and the CPU. The per-slice work is
// serial across the slice's tiles, so a batch of few slices leaves most of
// the GPU idle: this form is for timing the coder a persistent kernel runs
// per ring step (bench/gpu_codec_bench.cu's "cta" row), not a faster batch
// codec.
#include <cuda_runtime.h>

#include "cta_slice.cuh"
#include "ncclz/cuda_codec.hpp"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::Predictor;
using codec::Status;

template <class In>
__global__ void __launch_bounds__(kThreads) cta_enc_kernel(In in, SliceBatchRef r, EncodeParams ep, uint8_t* dst,
                                                           uint64_t* sizes, int* status, unsigned long long* outliers) {
  using Code = typename In::CodeT;
  __shared__ CtaEncSmem<Code> sm;
  const uint32_t k = blockIdx.x, cnt = r.count(k);
  const Predictor pe = codec::slice_predictor(ep.p, ep.row, ep.plane, cnt);
  const CtaEncoded e =
      cta_encode_slice(in, size_t(k) * r.L, cnt, Codec::Block, pe, ep, dst + size_t(k) * r.slot, r.slot, sm);
  if (threadIdx.x == 0) {
    sizes[k] = e.bytes;
    status[k] = int(e.status);
    if constexpr (!In::kHasCodes) {
      if (e.outliers) atomicAdd(outliers, (unsigned long long)e.outliers);
    }
  }
}

template <class Out>
__global__ void __launch_bounds__(kThreads)
    cta_dec_kernel(const uint8_t* __restrict__ src, const uint64_t* __restrict__ lens, SliceBatchRef r, bool values,
                   Out o, int* status) {
  using Code = typename Out::CodeT;
  __shared__ CtaDecSmem<Code> sm;
  const uint32_t k = blockIdx.x;
  size_t len = r.slot;
  if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
  const Status st =
      cta_decode_slice(src + size_t(k) * r.slot, len, r.count(k), values, size_t(k) * r.L, o, sm, &r.st[k]);
  if (threadIdx.x == 0) status[k] = int(st);
}

template <class In>
cudaError_t encode_cta_launch(const In& in, const SliceBatchRef& r, const EncodeParams& ep, uint8_t* dst,
                              uint64_t* sizes, int* status, unsigned long long* outliers, cudaStream_t stream) {
  cta_enc_kernel<In><<<r.S, kThreads, 0, stream>>>(in, r, ep, dst, sizes, status, outliers);
  return cudaGetLastError();
}

}  // namespace

namespace detail {
int encode_cta_codes(const void* q, ElemType code_t, const SliceBatchRef& r, const EncodeParams& ep, uint8_t* dst,
                     uint64_t* sizes, int* status, cudaStream_t stream) {
  if (code_t == ElemType::I32)
    return int(encode_cta_launch(CodesIn<int32_t>{static_cast<const int32_t*>(q)}, r, ep, dst, sizes, status, nullptr,
                                 stream));
  return int(
      encode_cta_launch(CodesIn<int64_t>{static_cast<const int64_t*>(q)}, r, ep, dst, sizes, status, nullptr, stream));
}

int encode_cta_floats(const void* x, ElemType t, const codec::QuantGrid& g, int64_t limit, ElemType code_t,
                      const SliceBatchRef& r, const EncodeParams& ep, uint8_t* dst, uint64_t* sizes, int* status,
                      unsigned long long* outliers, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  with_floats_in(x, t, g, limit, code_t,
                 [&](const auto& in) { e = encode_cta_launch(in, r, ep, dst, sizes, status, outliers, stream); });
  return int(e);
}

int decode_cta(const uint8_t* src, const uint64_t* lens, ElemType code_t, const SliceBatchRef& r, void* out, ElemType t,
               double eb, int* status, cudaStream_t stream) {
  const bool values = t != code_t;
  cudaError_t e = cudaSuccess;
  with_code_type(code_t, [&](auto cv) {
    using Code = decltype(cv);
    if (!values) {
      cta_dec_kernel<CodesOut<Code>>
          <<<r.S, kThreads, 0, stream>>>(src, lens, r, false, CodesOut<Code>{static_cast<Code*>(out)}, status);
      e = cudaGetLastError();
      if (e == cudaSuccess) e = cudaError_t(lorenzo_inverse(r, code_t, out, stream));
      return;
    }
    with_float_type(t, [&](auto tv) {
      using T = decltype(tv);
      using O = ValuesOut<T, Code>;
      cta_dec_kernel<O><<<r.S, kThreads, 0, stream>>>(
          src, lens, r, true, O{static_cast<T*>(out), codec::QuantGrid::from_bound(eb)}, status);
      e = cudaGetLastError();
    });
  });
  return int(e);
}
}  // namespace detail

}  // namespace ncclz::cuda
