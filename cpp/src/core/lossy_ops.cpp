// The API layer's element-wise work for lossy calls (see lossy_ops.hpp).
#include "core/lossy_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NCCLZ_STREAM_STORES 1
#endif

#include "base/worker_pool.hpp"
#include "codec/cpu_features.hpp"
#include "codec/quantizer.hpp"
#include "codec/sparse_coder.hpp"
#include "core/types.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

template <class Fn>
void with_float_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::F32: fn(float{}); return;
    case DataType::F64: fn(double{}); return;
    case DataType::F16: fn(codec::F16{}); return;
    case DataType::BF16: fn(codec::Bf16{}); return;
    default: throw InvalidArgument("ncclz: lossy compression needs a floating-point type");
  }
}

template <class Fn>
void with_code_type(bool wide, Fn&& fn) {
  if (wide) {
    fn(int64_t{});
  } else {
    fn(int32_t{});
  }
}

/// The statistics of a range from finite_stats' results.
DataStats stats_of(bool any_finite, double lo, double hi, bool nonfinite) {
  DataStats s;
  s.any_finite = any_finite;
  s.nonfinite = nonfinite;
  if (any_finite) {
    s.lo = lo;
    s.hi = hi;
    s.maxabs = std::max(std::fabs(lo), std::fabs(hi));
  }
  return s;
}

/// One pass: finite min/max/max|x| and whether any element is non-finite.
template <class T>
DataStats scan_typed(const T* x, size_t n) {
  double lo = 0, hi = 0;
  bool nonfinite = false;
  const bool any = codec::finite_stats(x, n, &lo, &hi, &nonfinite);
  return stats_of(any, lo, hi, nonfinite);
}

/// memcpy with non-temporal stores where the platform has them (x86-64: SSE2
/// streaming stores, the caller ends with stream_fence): the destination's
/// cache lines are written without being read first.
#if NCCLZ_STREAM_STORES
/// stream_copy with 64-byte non-temporal stores (AVX-512F): one store per cache
/// line where SSE2 takes four (docs/BENCHMARKS.md, "Measurements behind the code").
__attribute__((target("avx512f"))) void stream_copy_avx512(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const size_t head = std::min(bytes, size_t((64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64));
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  }
  std::memcpy(dst + i, src + i, bytes - i);
}
#endif

void stream_copy(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if NCCLZ_STREAM_STORES
  if (codec::cpu_has_avx512f()) {
    stream_copy_avx512(dst, src, bytes);
    return;
  }
  const size_t head = std::min(bytes, size_t((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16));
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16 * j));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16 * j), v);
    }
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}
void stream_fence() {
#if NCCLZ_STREAM_STORES
  _mm_sfence();
#endif
}

/// s combined with the statistics of another range.
void combine(DataStats& s, const DataStats& o) {
  s.nonfinite |= o.nonfinite;
  if (!o.any_finite) return;
  if (!s.any_finite) {
    const bool nf = s.nonfinite;
    s = o;
    s.nonfinite = nf;
    return;
  }
  s.lo = std::min(s.lo, o.lo);
  s.hi = std::max(s.hi, o.hi);
  s.maxabs = std::max(s.maxabs, o.maxabs);
}

}  // namespace

DataStats scan(DataType t, const void* x, size_t n, WorkerPool* pool, int parts, NonzeroIndex* index) {
  std::vector<DataStats> part(size_t(std::max(1, parts)));
  if (index) index->reset(n, dsize(t), parts);
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int i) {
      part[size_t(i)] = index ? index->scan_part(t, x, b, e, i) : scan_typed(static_cast<const T*>(x) + b, e - b);
    });
  });
  DataStats s = part[0];
  for (size_t i = 1; i < part.size(); ++i) combine(s, part[i]);
  return s;
}

void NonzeroIndex::reset(size_t n, size_t esize, int parts) {
  n_ = n;
  es_ = esize;
  parts_.assign(size_t(std::max(1, parts)), Part{});
  // Part i's storage starts at b / kMaxDensity + i * (kBlock + 64) (b its
  // first element): room for (e - b) / kMaxDensity entries and a block more.
  // Allocated without being touched: only what a scan lists is ever written.
  const size_t need = n / kMaxDensity + parts_.size() * (kBlock + 64) + 1;
  if (need > pos_cap_) {
    pos_.reset(new uint32_t[need]);
    pos_cap_ = need;
  }
  if (need * es_ > val_bytes_) {
    val_.reset(new uint8_t[need * es_]);
    val_bytes_ = need * es_;
  }
}

DataStats NonzeroIndex::scan_part(DataType t, const void* x, size_t b, size_t e, int i) {
  Part& p = parts_[size_t(i)];
  p.begin = b;
  p.end = e;
  p.at = b / kMaxDensity + size_t(i) * (kBlock + 64);
  const size_t room = e / kMaxDensity + size_t(i + 1) * (kBlock + 64) - p.at;
  DataStats s;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    using Bits = codec::BitsOf<T>;
    const T* xp = static_cast<const T*>(x) + b;
    const size_t m = e - b;
    uint32_t* pos = pos_.get() + p.at;
    Bits* val = reinterpret_cast<Bits*>(val_.get() + p.at * es_);
    size_t k = 0;
    bool on = m <= size_t(UINT32_MAX);
    size_t at = 0;
    for (; on && at < m; at += kBlock) {
      const size_t len = std::min(kBlock, m - at);
      double lo = 0, hi = 0;
      bool nonfinite = false;
      size_t got = 0;
      const bool any = codec::finite_stats_nonzeros(xp + at, len, &lo, &hi, &nonfinite, pos + k, val + k, &got);
      combine(s, stats_of(any, lo, hi, nonfinite));
      for (size_t j = k; j < k + got; ++j) pos[j] += uint32_t(at);
      k += got;
      // Stop listing when the next block might not fit, or the part is
      // clearly dense (more than a quarter nonzero so far).
      on = k + kBlock <= room && k <= (at + len) / 4 + kBlock;
    }
    if (at < m) combine(s, scan_typed(xp + at, m - at));
    p.listed = on;
    p.count = on ? k : 0;
  });
  return s;
}

size_t NonzeroIndex::listed() const {
  size_t k = 0;
  for (const Part& p : parts_) k += p.count;
  return k;
}

void put_stats(CallDesc& d, const DataStats& s) {
  if (s.any_finite) d.flags |= kAnyFinite;
  if (s.nonfinite) d.flags |= kNonFinite;
  d.lo = s.lo;
  d.hi = s.hi;
  d.maxabs = s.maxabs;
}

DataStats merge_stats(const std::vector<CallDesc>& all) {
  DataStats g;
  for (const CallDesc& d : all) {
    if (d.flags & kNonFinite) g.nonfinite = true;
    if (!(d.flags & kAnyFinite)) continue;
    if (!g.any_finite) {
      g.lo = d.lo;
      g.hi = d.hi;
      g.maxabs = d.maxabs;
      g.any_finite = true;
    } else {
      g.lo = std::min(g.lo, d.lo);
      g.hi = std::max(g.hi, d.hi);
      g.maxabs = std::max(g.maxabs, d.maxabs);
    }
  }
  return g;
}

size_t quantize_buf(DataType t, const LossyPlan& p, const void* x, size_t n, void* q, WorkerPool* pool, int parts) {
  codec::QuantGrid g = codec::QuantGrid::from_bound(p.eb);
  g.eb = p.check_eb;  // the grid is 2*eb; the check allows for T's rounding (lossy_plan.hpp)
  g.exact_check = p.exact_check;
  std::vector<size_t> outliers(size_t(std::max(1, parts)), 0);
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(p.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int i) {
        std::vector<uint64_t> idx;
        outliers[size_t(i)] =
            codec::quantize<T, Code>(static_cast<const T*>(x) + b, e - b, g, p.limit, static_cast<Code*>(q) + b, &idx);
      });
    });
  });
  size_t total = 0;
  for (size_t o : outliers) total += o;
  return total;
}

/// out[i] = T(q[i] * step) (step = 2*eb, or 2*eb/N for avg).
void dequantize_buf(DataType t, bool wide, const void* q, size_t n, double step, void* out, WorkerPool* pool,
                    int parts) {
  const codec::QuantGrid g = codec::QuantGrid::from_bound(step / 2);  // step, 1 / step exactly
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(wide, [&](auto ctag) {
      using Code = decltype(ctag);
      base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
        codec::dequantize<T, Code>(static_cast<const Code*>(q) + b, e - b, g, static_cast<T*>(out) + b);
      });
    });
  });
}

LossyStage::LossyStage(DataType t, const LossyPlan& p, const void* x, const void* codes, void* out,
                       const void* out_codes, double out_step, const NonzeroIndex* index, bool in_place)
    : t_(t),
      plan_(p),
      x_(static_cast<const uint8_t*>(x)),
      codes_(static_cast<const uint8_t*>(codes)),
      out_(static_cast<uint8_t*>(out)),
      out_codes_(static_cast<const uint8_t*>(out_codes)),
      out_step_(out_step),
      es_(dsize(t)),
      cs_(p.wide ? 8 : 4),
      index_(index),
      in_place_(in_place) {}

void LossyStage::outliers_found(size_t bad, size_t off) const {
  throw Error("ncclz: " + std::to_string(bad) + " input element(s) from offset " + std::to_string(off) +
              " do not fit the lossy grid although the call's statistics said they would: was the input "
              "modified during the call?");
}

namespace {
/// A per-thread buffer of at least `bytes`, 8-byte aligned (one per call site).
void* grown(std::vector<uint64_t>& buf, size_t bytes) {
  if (buf.size() * 8 < bytes) buf.resize((bytes + 7) / 8);
  return buf.data();
}
}  // namespace

void* LossyStage::prepare(const void* src, size_t n) {
  // Each slice of the local input is read by the verb that asked, right after
  // this: quantizing into a small per-thread buffer (it stays in cache)
  // instead of the call's code buffer saves writing that buffer out to memory
  // and reading it back (in_count codes a call).
  // Two buffers in turn (the contract of Stage::prepare): a slice sent and
  // then reduced into is quantized once (Prims::prepared).
  thread_local std::vector<uint64_t> bufs[2];
  thread_local unsigned turn = 0;
  turn ^= 1u;
  void* q = grown(bufs[turn], n * cs_);
  const size_t off = size_t(static_cast<const uint8_t*>(src) - codes_) / cs_;
  const size_t bad = quantize_buf(t_, plan_, x_ + off * es_, n, q);
  if (bad) outliers_found(bad, off);
  return q;
}

bool LossyStage::prepare_nonzeros(const void* src, size_t n, size_t max_k, prims::NonzeroList* out) {
  if (!index_) return false;
  const size_t off = size_t(static_cast<const uint8_t*>(src) - codes_) / cs_;
  // Listed elements in the range: at most max_k, else the dense way.
  size_t listed = 0;
  if (!index_->for_each_span(off, n, [&](const NonzeroIndex::Span& s) { listed += s.k; }) || listed > max_k) {
    return false;
  }
  thread_local std::vector<uint32_t> pos;
  thread_local std::vector<uint64_t> val, codes;  // 8-byte aligned for either code type
  if (pos.size() < listed) pos.resize(listed);
  if (val.size() < listed) val.resize(listed);
  if (codes.size() < listed) codes.resize(listed);
  codec::QuantGrid g = codec::QuantGrid::from_bound(plan_.eb);
  g.eb = plan_.check_eb;  // as quantize_buf
  g.exact_check = plan_.exact_check;
  size_t k = 0;
  with_float_type(t_, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(plan_.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      Code* q = reinterpret_cast<Code*>(codes.data());
      Code* v = reinterpret_cast<Code*>(val.data());
      std::vector<uint64_t> bad;
      index_->for_each_span(off, n, [&](const NonzeroIndex::Span& s) {
        // The listed values are contiguous: quantized as one vector (x is not read).
        if (codec::quantize<T, Code>(reinterpret_cast<const T*>(s.val), s.k, g, plan_.limit, q, &bad) > 0) {
          outliers_found(bad.size(), s.base + s.pos[bad[0]]);
        }
        // Elements that quantize to 0 (tiny values, -0.0) are not nonzeros.
        const uint32_t shift = uint32_t(s.base - off);
        for (size_t i = 0; i < s.k; ++i) {
          pos[k] = s.pos[i] + shift;
          v[k] = q[i];
          k += q[i] != 0;
        }
      });
    });
  });
  *out = prims::NonzeroList{pos.data(), val.data(), k};
  return true;
}

void LossyStage::finish_nonzeros(const void* dst, const prims::NonzeroList& list, size_t n) {
  const size_t off = size_t(static_cast<const uint8_t*>(dst) - out_codes_) / cs_;
  const codec::QuantGrid g = codec::QuantGrid::from_bound(out_step_ / 2);
  with_float_type(t_, [&](auto tag) {
    using T = decltype(tag);
    T* out = reinterpret_cast<T*>(out_ + off * es_);
    // What dequantize gives code 0 (+0 for a positive step).
    const T zero = codec::dequantize_one<T>(int32_t(0), g);
    T plus_zero;
    std::memset(&plus_zero, 0, sizeof(T));
    const bool cleared = in_place_ && index_ && std::memcmp(&zero, &plus_zero, sizeof(T)) == 0 &&
                         index_->for_each_span(off, n, [&](const NonzeroIndex::Span& s) {
                           T* o = out + (s.base - off);
                           for (size_t i = 0; i < s.k; ++i) o[s.pos[i]] = zero;
                         });
    with_code_type(plan_.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      const Code* v = static_cast<const Code*>(list.val);
      if (cleared) {
        for (size_t i = 0; i < list.k; ++i) out[list.pos[i]] = codec::dequantize_one<T>(v[i], g);
        return;
      }
      // A block at a time in a buffer that stays in L1 (the list is in
      // increasing position), streamed to the output: its cache lines are
      // written once and never read (a 64 MiB output would not stay in
      // cache anyway).
      constexpr size_t kFillBlock = 2048;
      thread_local std::vector<T> block(kFillBlock);
      size_t i = 0;
      for (size_t b = 0; b < n; b += kFillBlock) {
        const size_t e = std::min(n, b + kFillBlock);
        std::fill(block.begin(), block.begin() + ptrdiff_t(e - b), zero);
        for (; i < list.k && list.pos[i] < e; ++i) block[list.pos[i] - b] = codec::dequantize_one<T>(v[i], g);
        stream_copy(reinterpret_cast<uint8_t*>(out + b), reinterpret_cast<const uint8_t*>(block.data()),
                    (e - b) * sizeof(T));
      }
      stream_fence();
    });
  });
}

void LossyStage::finish(const void* dst, const void* data, size_t n) {
  const size_t off = size_t(static_cast<const uint8_t*>(dst) - out_codes_) / cs_;
  dequantize_buf(t_, plan_.wide, data, n, out_step_, out_ + off * es_);
}

void to_f64(DataType t, const void* x, size_t n, double* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) out[i] = codec::to_double(p[i]);
    });
  });
}

void to_f32(DataType t, const void* x, size_t n, float* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) out[i] = float(codec::to_double(p[i]));
    });
  });
}

void from_f32(DataType t, const float* in, size_t n, double div, void* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) p[i] = codec::from_double<T>(double(in[i]) / div);
    });
  });
}

/// out[i] = T(in[i] / div), one rounding.
void from_f64(DataType t, const double* in, size_t n, double div, void* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    base::parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      if (div == 1) {
        for (size_t i = b; i < e; ++i) p[i] = codec::from_double<T>(in[i]);
      } else {
        for (size_t i = b; i < e; ++i) p[i] = codec::from_double<T>(in[i] / div);
      }
    });
  });
}

}  // namespace ncclz::core
