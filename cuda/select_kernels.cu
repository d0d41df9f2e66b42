// The device selector and the device's Sparse slices
// (DeviceCodec::encode_slices_select_async,
// quantize_encode_slices_select_async; the Sparse step of decode_slices_async):
// per slice, the CPU selector's own rule (codec/select_rule.hpp) from the
// same sample, with no host round trip, then each slice written by the coder
// it chose, byte-identical to the CPU's
//   encode_slice(q_k, code_t, count_k, dst, slot_bytes, opt')
// with opt' = opt and opt'.allow_rans = false (the device has no Rans coder).
//
// Schedule of a selecting encode (S slices, all kernels on the codec's stream):
//  SEL      one CTA per slice runs cta_select_slice (cta_select.cuh, the
//           per-slice step the persistent ring kernels call too): for every
//           candidate predictor the sampled blocks' residuals, Block cost and
//           Rans symbols, the rule's choice (codec, predictor) stored per
//           slice in scratch; where codec and predictor are both forced
//           there is no sample (SelectRule::forced)
//  E1, scan, E2   the v3 Block encoder (encode_v3.cu) with the per-slice
//           choice (EncodeParams::sel): a Block slice with its chosen
//           predictor (and the Raw fallback), a Raw slice as Raw; Sparse
//           slices are skipped by E2
//  SPARSE   one CTA per Sparse slice: the CTA lists the positions of the
//           nonzero residuals (a CTA scan per 256 codes, into scratch, 4 bytes
//           a code), then one thread writes the Sparse payload
//           (sparse_device.cuh: the CPU's encode_nonzeros and rANS, step for
//           step) and the header (frame_slice: the Raw fallback, NoSpace);
//           a Raw fallback is copied by the CTA
// The input is read by SEL (the sample only), twice by E1/E2, and once more
// plus O(k) by SPARSE for Sparse slices. Sparse is correctness first: its
// O(k) part runs on one thread per slice (the selector takes Sparse only
// where at least sparse_min_zeros of the sample is zero).
//
// Decode (sparse_decode, after any version's decode kernels, which report a
// Sparse slice as Unsupported): one CTA per slice whose header reads as a
// Sparse slice of the batch's type and count: the CTA zeroes the slice's
// output, then one thread decodes the payload (both Rans frames in lockstep,
// the low bits, the CPU's checks: its status); the CTA undoes Delta1/Delta2
// with block scans carried across chunks of 256 codes (Lorenzo: serially on
// one thread, predict_at as the CPU's reconstruct computes it).
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "codec/select_rule.hpp"
#include "codec/slice.hpp"
#include "codec/slice_frame.hpp"
#include "cta_select.cuh"
#include "ncclz/cuda_codec.hpp"
#include "slice_batch.cuh"
#include "sparse_device.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::EncodeOptions;
using codec::Predictor;
using codec::Status;

// SEL: one CTA per slice (cta_select.cuh); the choice to sel[2k] (Codec), sel[2k + 1] (Predictor).
template <class In>
__global__ void __launch_bounds__(kThreads) sel_kernel(In in, SliceBatchRef r, EncodeOptions opt, uint8_t* sel) {
  __shared__ CtaSelSmem sm;
  const uint32_t k = blockIdx.x;
  const codec::SelectChoice c = cta_select_slice(in, size_t(k) * r.L, r.count(k), opt, sm);
  if (threadIdx.x == 0) {
    sel[2 * k] = uint8_t(c.codec);
    sel[2 * k + 1] = uint8_t(c.predictor);
  }
}

// SPARSE: one CTA per slice that chose Sparse.
template <class In>
__global__ void __launch_bounds__(kThreads)
    sparse_enc_kernel(In in, SliceBatchRef r, EncodeOptions opt, const uint8_t* sel, uint32_t* pos_all,
                      uint8_t* __restrict__ dst, uint64_t* sizes, int* status) {
  using Code = typename In::CodeT;
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ SparseEncShared es;
  __shared__ uint32_t nnz;
  __shared__ int raw;
  const uint32_t k = blockIdx.x;
  if (sel[2 * k] != uint8_t(Codec::Sparse)) return;  // uniform
  const uint32_t cnt = r.count(k);
  const size_t s0 = size_t(k) * r.L;
  const Predictor pe = Predictor(sel[2 * k + 1]);
  uint32_t a0, a1;
  codec::slice_predictor_args(pe, opt.row, opt.plane, &a0, &a1);
  uint32_t* pos = pos_all + s0;
  if (threadIdx.x == 0) nnz = 0;
  __syncthreads();
  for (uint32_t b = 0; b < cnt; b += kThreads) {
    const uint32_t i = b + threadIdx.x;
    const uint32_t nz = i < cnt && residual_at(in, s0, i, pe, a0, a1) != Code(0);
    uint32_t off, agg;
    Scan(scan_tmp).ExclusiveSum(nz, off, agg);
    if (nz) pos[nnz + off] = i;
    __syncthreads();
    if (threadIdx.x == 0) nnz += agg;
    __syncthreads();
  }
  const ElemType ct = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  uint8_t* slot = dst + size_t(k) * r.slot;
  uint8_t* payload = slot + codec::kHeaderBytes;
  if (threadIdx.x == 0) {
    size_t bytes = codec::kNoFit;
    if (r.slot >= codec::kHeaderBytes) {
      const size_t room = codec::slice_coder_room(ct, cnt, r.slot);
      auto res = [&](uint32_t i) { return residual_at(in, s0, i, pe, a0, a1); };
      bytes = dev_sparse_encode<Code>(pos, res, nnz, cnt, payload, room, es);
    }
    codec::SliceHeader h;
    const Status f = codec::frame_slice(ct, cnt, r.slot, Codec::Sparse, pe, a0, a1, bytes, &h);
    if (f == Status::Ok) codec::write_header(slot, h);
    sizes[k] = f == Status::Ok ? codec::kHeaderBytes + h.payload_bytes : 0;
    status[k] = int(f);
    raw = f == Status::Ok && h.codec == Codec::Raw;
  }
  __syncthreads();
  if (raw) {  // the Raw fallback: the codes' own bytes
    int bad = 0;
    for (uint32_t i = threadIdx.x; i < cnt; i += kThreads)
      store_le(payload + size_t(i) * sizeof(Code), in.at(s0 + i, bad));
  }
}

template <class Code>
__global__ void __launch_bounds__(kThreads)
    sparse_dec_kernel(const uint8_t* src, const uint64_t* lens, SliceBatchRef r, Code* out, int* status) {
  using U = codec::UCode<Code>;
  __shared__ DevDecTable tg, tv;
  __shared__ uint32_t plen, pa0, pa1;
  __shared__ uint8_t pred;
  __shared__ int go, ok;
  using ScanU = cub::BlockScan<U, kThreads>;
  __shared__ typename ScanU::TempStorage scan_tmp;
  const uint32_t k = blockIdx.x, cnt = r.count(k);
  const uint8_t* slice = src + size_t(k) * r.slot;
  if (threadIdx.x == 0) {
    size_t len = r.slot;
    if (lens != nullptr && lens[k] < len) len = size_t(lens[k]);
    const ElemType ct = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
    codec::SliceHeader h;
    go = codec::read_slice_header(slice, len, ct, cnt, &h) == Status::Ok && h.codec == Codec::Sparse;
    plen = h.payload_bytes;
    pred = uint8_t(h.predictor);
    pa0 = h.pred_arg0;
    pa1 = h.pred_arg1;
  }
  __syncthreads();
  if (!go) return;  // uniform: not a Sparse slice (the other kernels' status stands)
  Code* o = out + size_t(k) * r.L;
  for (uint32_t i = threadIdx.x; i < cnt; i += kThreads) o[i] = Code(0);
  __syncthreads();
  const Predictor p = Predictor(pred);
  if (threadIdx.x == 0) {
    const Status s = dev_sparse_decode<Code>(slice + codec::kHeaderBytes, plen, cnt, o, &tg, &tv);
    if (s == Status::Ok && p != Predictor::None && p != Predictor::Delta1 && p != Predictor::Delta2) {
      // Lorenzo: serially, as the CPU's reconstruct defines it.
      for (uint32_t i = 0; i < cnt; ++i) o[i] = Code(U(U(o[i]) + codec::predict_at(o, i, p, pa0, pa1)));
    }
    status[k] = int(s);
    ok = s == Status::Ok;
  }
  __syncthreads();
  if (!ok || (p != Predictor::Delta1 && p != Predictor::Delta2)) return;  // uniform
  // Delta1: codes = running sum of the residuals; Delta2: twice, the first
  // over r' with r'[1] = r[1] - r[0] (predict_at predicts q[1] by q[0]).
  // A CTA scan per 256 codes, carried across chunks (RunningPrefix).
  const int passes = p == Predictor::Delta2 ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    RunningPrefix<U> carry{U(0)};
    for (uint32_t b = 0; b < cnt; b += kThreads) {
      const uint32_t i = b + threadIdx.x;
      U v[1] = {i < cnt ? U(o[i]) : U(0)};
      if (passes == 2 && pass == 0 && i == 1) v[0] = U(v[0] - U(o[0]));
      ScanU(scan_tmp).InclusiveSum(v, v, carry);
      if (i < cnt) o[i] = Code(v[0]);
      __syncthreads();  // scan_tmp reused; o[0] read above before thread 0 writes it
    }
  }
}

// The selecting encode's scratch after the v3 encoder's: the choices, and
// room for the positions of one slice's nonzeros per slice.
struct SelectScratch {
  SliceScratch sc;
  size_t sel, pos, bytes;
  static SelectScratch of(const SliceBatchRef& r) {
    SelectScratch s;
    s.sc = SliceScratch::of(r.S, r.nbs);
    ScratchLayout l;
    l.add(s.sc.bytes);
    s.sel = l.add(2 * size_t(r.S));
    s.pos = l.add(4 * size_t(r.S) * r.L);
    s.bytes = l.bytes();
    return s;
  }
};

int check_select_options(const EncodeOptions& opt) {
  using Choice = EncodeOptions::Choice;
  if (opt.predictor >= codec::kNumPredictors) return host_error(Status::BadHeader);
  if (opt.choice == Choice::Rans || opt.choice == Choice::FloatExp) return host_error(Status::Unsupported);
  if (opt.choice != Choice::Auto && opt.choice != Choice::Raw && opt.choice != Choice::Block &&
      opt.choice != Choice::Sparse)
    return host_error(Status::BadHeader);
  return 0;
}

// The value type of a FloatsIn.
template <class T>
constexpr ElemType float_elem() {
  return std::is_same_v<T, float>        ? ElemType::F32
         : std::is_same_v<T, double>     ? ElemType::F64
         : std::is_same_v<T, codec::F16> ? ElemType::F16
                                         : ElemType::BF16;
}
template <class T, class Code>
int encode3_any(const FloatsIn<T, Code>& in, const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc,
                uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status, unsigned long long* outliers,
                cudaStream_t stream) {
  const ElemType ct = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  return encode3_floats(in.x, float_elem<T>(), in.g, in.limit, ct, r, ep, sc, tmp, dst, sizes, status, outliers,
                        stream);
}
template <class Code>
int encode3_any(const CodesIn<Code>& in, const SliceBatchRef& r, const EncodeParams& ep, const SliceScratch& sc,
                uint8_t* tmp, uint8_t* dst, uint64_t* sizes, int* status, unsigned long long*, cudaStream_t stream) {
  const ElemType ct = sizeof(Code) == 4 ? ElemType::I32 : ElemType::I64;
  return encode3_codes(in.q, ct, r, ep, sc, tmp, dst, sizes, status, stream);
}

template <class In>
cudaError_t select_launch(const In& in, const SliceBatchRef& r, const EncodeOptions& opt, const SelectScratch& ss,
                          uint8_t* base, uint8_t* dst, uint64_t* sizes, int* status, unsigned long long* outliers,
                          cudaStream_t stream) {
  uint8_t* sel = base + ss.sel;
  EncodeOptions rule_opt = opt;
  rule_opt.allow_rans = false;  // the device's rule: no Rans coder here
  sel_kernel<In><<<r.S, kThreads, 0, stream>>>(in, r, rule_opt, sel);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  EncodeParams ep{Predictor::None, opt.row, opt.plane};
  ep.sel = sel;
  e = cudaError_t(encode3_any(in, r, ep, ss.sc, base + ss.sc.tmp, dst, sizes, status, outliers, stream));
  if (e != cudaSuccess) return e;
  sparse_enc_kernel<In>
      <<<r.S, kThreads, 0, stream>>>(in, r, opt, sel, reinterpret_cast<uint32_t*>(base + ss.pos), dst, sizes, status);
  return cudaGetLastError();
}

}  // namespace

namespace detail {
size_t select_scratch_bytes(size_t n, uint32_t L) {
  if (n == 0 || L == 0) return 0;
  SliceBatchRef r;
  r.S = uint32_t(std::min<size_t>((n + L - 1) / L, 0x7fffffffu));
  r.L = L;
  r.nbs = uint32_t(codec::block_count(L));
  return SelectScratch::of(r).bytes;
}

int sparse_decode(const uint8_t* src, const uint64_t* lens, ElemType code_t, const SliceBatchRef& r, void* out,
                  int* status, cudaStream_t stream) {
  if (code_t == ElemType::I32)
    sparse_dec_kernel<int32_t><<<r.S, kThreads, 0, stream>>>(src, lens, r, static_cast<int32_t*>(out), status);
  else
    sparse_dec_kernel<int64_t><<<r.S, kThreads, 0, stream>>>(src, lens, r, static_cast<int64_t*>(out), status);
  return int(cudaGetLastError());
}
}  // namespace detail

int DeviceCodec::encode_slices_select_async(const void* d_q, ElemType code_t, size_t n, uint32_t slice_len,
                                            const EncodeOptions& opt, uint8_t* d_dst, size_t slot_bytes,
                                            uint64_t* d_sizes, int* d_status) {
  if (status_) return status_;
  if (const int e = check_select_options(opt)) return e;
  SliceBatchRef r;
  if (const int e = make_batch(code_t, n, slice_len, slot_bytes, 0, &r)) return e;
  if (r.S == 0) return 0;
  const SelectScratch ss = SelectScratch::of(r);
  int err = 0;
  uint8_t* base = scratch(ss.bytes, &err);
  if (!base) return err;
  ss.sc.place(base, &r);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaError_t e = cudaSuccess;
  with_code_type(code_t, [&](auto cv) {
    using Code = decltype(cv);
    e = select_launch(CodesIn<Code>{static_cast<const Code*>(d_q)}, r, opt, ss, base, d_dst, d_sizes, d_status, nullptr,
                      s);
  });
  return int(e);
}

int DeviceCodec::quantize_encode_slices_select_async(const void* d_x, ElemType t, size_t n, double eb, int64_t limit,
                                                     ElemType code_t, uint32_t slice_len, const EncodeOptions& opt,
                                                     uint8_t* d_dst, size_t slot_bytes, uint64_t* d_sizes,
                                                     int* d_status, uint64_t* d_outlier_count) {
  if (status_) return status_;
  if (!fused_bound_ok(eb, d_outlier_count)) return host_error(Status::BadHeader);
  if (const int e = check_select_options(opt)) return e;
  // Lorenzo predicts from codes rows and planes away, which a tile of floats
  // does not hold: quantize_async + encode_slices_select_async for grids.
  if (opt.row > 1) return host_error(Status::Unsupported);
  SliceBatchRef r;
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  int ret = 0;
  if (!fused_batch_start(t, n, code_t, slice_len, slot_bytes, d_outlier_count, s, &r, &ret)) return ret;
  const SelectScratch ss = SelectScratch::of(r);
  int err = 0;
  uint8_t* base = scratch(ss.bytes, &err);
  if (!base) return err;
  ss.sc.place(base, &r);
  auto* outliers = reinterpret_cast<unsigned long long*>(d_outlier_count);
  cudaError_t e = cudaSuccess;
  with_floats_in(d_x, t, codec::QuantGrid::from_bound(eb), limit, code_t, [&](const auto& in) {
    e = select_launch(in, r, opt, ss, base, d_dst, d_sizes, d_status, outliers, s);
  });
  return int(e);
}

}  // namespace ncclz::cuda
