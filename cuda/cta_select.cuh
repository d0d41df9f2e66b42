// The device selector's per-slice step: ONE CTA chooses one slice's codec
// and predictor by the CPU selector's own rule (codec/select_rule.hpp) from
// the same sample, so that the slice it then writes is the CPU's
// encode_slice with the same EncodeOptions, byte for byte. Called by the
// batch selector (select_kernels.cu, SEL: one CTA per slice) and inside the
// persistent ring kernels (persistent_ring.cu: a CTA selects each slice it
// sends, then codes it with the CTA slice coder), with no host round trip.
//
// The sample: blocks 0, s, 2s, ... of 32 codes (s = select_sample_stride),
// one block per warp at a time; per candidate predictor (None, Delta1,
// Delta2; Lorenzo2D/3D where opt.row / opt.plane make them fit, codes
// only) each sampled block's residuals, its Block cost (a warp OR of the
// magnitudes), and, where the rule reads them (SelectRule::only_fast says
// when it does not), its Rans symbols (a shared histogram) and extra bits;
// thread 0 sums them into SampleStats and feeds SelectRule::add, then
// finish() gives the choice. Where codec and predictor are both forced there
// is no sample (SelectRule::forced). Cost: one extra read of the sampled
// blocks (a 1/s share of the slice, at most opt.max_sample_blocks blocks)
// per candidate predictor; shared memory: CtaSelSmem (about 7 KiB).
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "codec/select_rule.hpp"
#include "codec/slice.hpp"
#include "slice_batch.cuh"
#include "tile_coder.cuh"
#include "tile_v3.cuh"

namespace ncclz::cuda::detail {

/// The residual of slice element i (slice start s0) under predictor p (args a0, a1).
template <class In>
__device__ __forceinline__ typename In::CodeT residual_at(const In& in, size_t s0, uint32_t i, codec::Predictor p,
                                                          uint32_t a0, uint32_t a1) {
  using Code = typename In::CodeT;
  using U = codec::UCode<Code>;
  int bad = 0;  // outliers are counted by the Block encoder's pass
  if constexpr (In::kHasCodes) {
    if (is_lorenzo(p)) {
      const Code* qk = in.q + s0;
      return Code(U(qk[i]) - codec::predict_at(qk, i, p, a0, a1));
    }
  }
  const Code cur = in.at(s0 + i, bad);
  const Code p1 = i >= 1 && p != codec::Predictor::None ? in.at(s0 + i - 1, bad) : Code(0);
  const Code p2 = i >= 2 && p == codec::Predictor::Delta2 ? in.at(s0 + i - 2, bad) : Code(0);
  return delta_residual(p2, p1, cur, i, p);
}

/// The selector's shared memory (the caller's: a kernel that also codes
/// overlays it with the coder's in a union, so trivial).
struct CtaSelSmem {
  codec::SampleStats st;
  unsigned long long red[3][kThreads];
  alignas(codec::SelectRule) unsigned char rule[sizeof(codec::SelectRule)];  // thread 0's SelectRule
  uint32_t applies;                                                          // bit pi: predictor pi is a candidate
  codec::Codec codec;                                                        // the choice
  codec::Predictor predictor;
  int forced;
};

/// Thread 0's steps of the rule, out of line: their doubles and estimates
/// take registers of their own, not the sampling loop's.
inline __device__ __noinline__ void cta_select_add(codec::SelectRule* rule, codec::Predictor p,
                                                   const codec::SampleStats& st, const codec::EncodeOptions& opt) {
  rule->add(p, st, opt);
}
inline __device__ __noinline__ void cta_select_finish(const codec::SelectRule* rule, const codec::EncodeOptions& opt,
                                                      CtaSelSmem& sm) {
  const codec::SelectChoice c = rule->finish(opt);
  sm.codec = c.codec;
  sm.predictor = c.predictor;
}

/// One CTA (all kThreads threads) chooses the codec and predictor of the cnt
/// codes in.at(s0 ..) as the CPU's encode_slice with `opt` does (opt as the
/// CPU's; the device has no Rans coder, so the caller passes allow_rans =
/// false, and a caller without a Sparse coder rules Sparse out too:
/// codec::fast_select_options). The choice in every thread; barriers at
/// entry and exit (the shared memory may be in use by the caller before and
/// after). kFastOnly: the caller's options satisfy SelectRule::only_fast
/// (no Rans symbols sampled, only the Block estimates added: the entropy
/// estimates' code, which spills at a persistent kernel's 128 registers,
/// is not even compiled in). Not inlined: the sampling loop gets its
/// registers without the caller's (a persistent CTA's step) live around it.
template <class In, bool kFastOnly = false>
__device__ __noinline__ codec::SelectChoice cta_select_slice(const In& in, size_t s0, uint32_t cnt,
                                                             const codec::EncodeOptions& opt, CtaSelSmem& sm) {
  using Code = typename In::CodeT;
  using codec::Predictor;
  __syncthreads();
  auto* rule = reinterpret_cast<codec::SelectRule*>(sm.rule);  // thread 0's alone
  if (threadIdx.x == 0) {
    new (sm.rule) codec::SelectRule(opt, cnt, sizeof(Code));
    codec::SelectChoice c;
    sm.forced = rule->forced(opt, &c);
    sm.codec = c.codec;
    sm.predictor = c.predictor;
    uint32_t mask = 0;
    for (int pi = 0; pi < codec::kNumPredictors; ++pi) mask |= rule->applies(pi, opt) ? 1u << pi : 0u;
    sm.applies = mask;
  }
  __syncthreads();
  if (!sm.forced) {  // uniform
    const size_t every = codec::select_sample_stride(cnt, opt);
    const size_t sampled_blocks = (codec::block_count(cnt) + every - 1) / every;
    const bool hist = !kFastOnly && !codec::SelectRule::only_fast(opt);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    for (int pi = 0; pi < codec::kNumPredictors; ++pi) {
      if (!((sm.applies >> pi) & 1u)) continue;  // uniform
      const Predictor p = Predictor(pi);
      if constexpr (!In::kHasCodes) {
        if (is_lorenzo(p)) continue;  // the fused call refuses grids (host check)
      }
      uint32_t a0, a1;
      codec::slice_predictor_args(p, opt.row, opt.plane, &a0, &a1);
      for (int s = threadIdx.x; s < codec::kRansAlphabet; s += kThreads) sm.st.hist[s] = 0;  // (read, unused, if !hist)
      __syncthreads();
      unsigned long long cost = 0, extra = 0, sampled = 0;
      for (size_t j = size_t(warp); j < sampled_blocks; j += kWarps3) {  // uniform per warp
        const size_t off = j * every * codec::kBlockLen;
        const uint32_t m = uint32_t(cnt - off < codec::kBlockLen ? cnt - off : codec::kBlockLen);
        const uint32_t i = uint32_t(off) + uint32_t(lane);
        const Code v = uint32_t(lane) < m ? residual_at(in, s0, i, p, a0, a1) : Code(0);
        const int w = block_width_of(v);
        if (lane == 0) {
          cost += codec::block_cost_halfbytes_from_width(w);
          sampled += m;
        }
        if (hist && uint32_t(lane) < m) {
          uint32_t sym, eb;
          codec::rans_symbol_of(v, &sym, &eb);
          atomicAdd(&sm.st.hist[sym], 1u);
          extra += eb;
        }
      }
      sm.red[0][threadIdx.x] = cost;
      sm.red[1][threadIdx.x] = extra;
      sm.red[2][threadIdx.x] = sampled;
      __syncthreads();
      if (threadIdx.x == 0) {
        sm.st.block_cost = sm.st.extra_bits = sm.st.sampled = 0;
        for (int t = 0; t < kThreads; ++t) {
          sm.st.block_cost += sm.red[0][t];
          sm.st.extra_bits += sm.red[1][t];
          sm.st.sampled += sm.red[2][t];
        }
        sm.st.sampled_blocks = sampled_blocks;
        if constexpr (kFastOnly)
          rule->add_block(p, sm.st, opt);
        else
          cta_select_add(rule, p, sm.st, opt);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) cta_select_finish(rule, opt, sm);
    __syncthreads();
  }
  const codec::SelectChoice c{sm.codec, sm.predictor, 0};
  __syncthreads();  // every thread has it: the caller may reuse the shared memory
  return c;
}

}  // namespace ncclz::cuda::detail
