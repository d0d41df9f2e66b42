// The API layer's element-wise work for lossy calls (see lossy_ops.hpp).
#include "core/lossy_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "core/types.hpp"
#include "core/worker_pool.hpp"
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

/// One pass: finite min/max/max|x| and whether any element is non-finite.
template <class T>
DataStats scan_typed(const T* x, size_t n) {
  DataStats s;
  double lo = 0, hi = 0;
  bool nonfinite = false;
  s.any_finite = codec::finite_stats(x, n, &lo, &hi, &nonfinite);
  s.nonfinite = nonfinite;
  if (s.any_finite) {
    s.lo = lo;
    s.hi = hi;
    s.maxabs = std::max(std::fabs(lo), std::fabs(hi));
  }
  return s;
}

}  // namespace

DataStats scan(DataType t, const void* x, size_t n, WorkerPool* pool, int parts) {
  std::vector<DataStats> part(size_t(std::max(1, parts)));
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(pool, parts, n, [&](size_t b, size_t e, int i) {
      part[size_t(i)] = scan_typed(static_cast<const T*>(x) + b, e - b);
    });
  });
  DataStats s = part[0];
  for (size_t i = 1; i < part.size(); ++i) {
    const DataStats& o = part[i];
    s.nonfinite |= o.nonfinite;
    if (!o.any_finite) continue;
    if (!s.any_finite) {
      const bool nf = s.nonfinite;
      s = o;
      s.nonfinite = nf;
      continue;
    }
    s.lo = std::min(s.lo, o.lo);
    s.hi = std::max(s.hi, o.hi);
    s.maxabs = std::max(s.maxabs, o.maxabs);
  }
  return s;
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

/// Lossy messages under min_bytes run exactly (the plan says so).
void apply_min_bytes(LossyPlan& p, const Compression& c, size_t bytes) {
  if (p.compress && c.min_bytes && bytes < c.min_bytes) {
    p.compress = false;
    p.why_not = "message smaller than min_bytes";
  }
}

double resolve_bound(const Compression& c, const DataStats& g) {
  if (c.mode == Mode::LossyAbs) return c.bound;
  return g.any_finite ? c.bound * (g.hi - g.lo) : 0.0;
}

size_t quantize_buf(DataType t, const LossyPlan& p, const void* x, size_t n, void* q, WorkerPool* pool, int parts) {
  codec::QuantGrid g = codec::QuantGrid::from_bound(p.eb);
  g.eb = p.check_eb;  // the grid is 2*eb; the check allows for T's rounding (lossy_plan.hpp)
  std::vector<size_t> outliers(size_t(std::max(1, parts)), 0);
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(p.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      parallel_for(pool, parts, n, [&](size_t b, size_t e, int i) {
        std::vector<uint64_t> idx;
        outliers[size_t(i)] = codec::quantize<T, Code>(static_cast<const T*>(x) + b, e - b, g, p.limit,
                                                       static_cast<Code*>(q) + b, &idx);
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
  codec::QuantGrid g;
  g.step = step;
  g.eb = step / 2;
  g.inv_step = 1 / step;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_code_type(wide, [&](auto ctag) {
      using Code = decltype(ctag);
      parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
        codec::dequantize<T, Code>(static_cast<const Code*>(q) + b, e - b, g, static_cast<T*>(out) + b);
      });
    });
  });
}

LossyStage::LossyStage(DataType t, const LossyPlan& p, const void* x, const void* codes, void* out,
                       const void* out_codes, double out_step)
    : t_(t),
      plan_(p),
      x_(static_cast<const uint8_t*>(x)),
      codes_(static_cast<const uint8_t*>(codes)),
      out_(static_cast<uint8_t*>(out)),
      out_codes_(static_cast<const uint8_t*>(out_codes)),
      out_step_(out_step),
      es_(dsize(t)),
      cs_(p.wide ? 8 : 4) {}

namespace {
/// A per-thread buffer of at least `bytes`, 8-byte aligned (one per call site).
void* grown(std::vector<uint64_t>& buf, size_t bytes) {
  if (buf.size() * 8 < bytes) buf.resize((bytes + 7) / 8);
  return buf.data();
}
}  // namespace

const void* LossyStage::prepare(const void* src, size_t n) {
  // Each slice of the local input is read once, by the verb that asked, right
  // after this: quantizing into a small per-thread buffer (it stays in cache)
  // instead of the call's code buffer saves writing that buffer out to memory
  // and reading it back (in_count codes a call). The verbs write their outputs
  // to the code buffers as before (finish() reads out_codes).
  thread_local std::vector<uint64_t> buf;
  void* q = grown(buf, n * cs_);
  const size_t off = size_t(static_cast<const uint8_t*>(src) - codes_) / cs_;
  const size_t bad = quantize_buf(t_, plan_, x_ + off * es_, n, q);
  if (bad) {
    throw Error("ncclz: " + std::to_string(bad) + " input element(s) from offset " + std::to_string(off) +
                " do not fit the lossy grid although the call's statistics said they would: was the input "
                "modified during the call?");
  }
  return q;
}

void* LossyStage::output(void* dst, size_t n) {
  (void)dst;
  thread_local std::vector<uint64_t> buf;
  return grown(buf, n * cs_);
}

void LossyStage::finish(const void* dst, const void* data, size_t n) {
  const size_t off = size_t(static_cast<const uint8_t*>(dst) - out_codes_) / cs_;
  dequantize_buf(t_, plan_.wide, data, n, out_step_, out_ + off * es_);
}

codec::Status LossyStage::finish_slice(const void* dst, const uint8_t* slice, size_t len, size_t n) {
  if (!codec::slice_adds_sparse(slice, len)) return codec::Status::Unsupported;
  thread_local std::vector<uint32_t> pos;
  thread_local std::vector<uint64_t> val;  // 8-byte aligned for either code type
  if (pos.size() < n) pos.resize(n);
  if (val.size() < n) val.resize(n);
  const codec::ElemType ct = plan_.wide ? codec::ElemType::I64 : codec::ElemType::I32;
  size_t k = 0, used = 0;
  const codec::Status s = codec::decode_slice_nonzeros(slice, len, ct, uint32_t(n), pos.data(), val.data(), &k, &used);
  if (s != codec::Status::Ok) return s;
  if (used != len) return codec::Status::Corrupt;
  const size_t off = size_t(static_cast<const uint8_t*>(dst) - out_codes_) / cs_;
  codec::QuantGrid g;
  g.step = out_step_;
  g.eb = out_step_ / 2;
  g.inv_step = 1 / out_step_;
  with_float_type(t_, [&](auto tag) {
    using T = decltype(tag);
    T* out = reinterpret_cast<T*>(out_ + off * es_);
    // What dequantize gives code 0 (+0 for a positive step).
    std::fill(out, out + n, codec::dequantize_one<T>(int32_t(0), g));
    with_code_type(plan_.wide, [&](auto ctag) {
      using Code = decltype(ctag);
      const Code* v = reinterpret_cast<const Code*>(val.data());
      for (size_t i = 0; i < k; ++i) out[pos[i]] = codec::dequantize_one<T>(v[i], g);
    });
  });
  return codec::Status::Ok;
}

void to_f64(DataType t, const void* x, size_t n, double* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) out[i] = codec::to_double(p[i]);
    });
  });
}

/// out[i] = T(in[i] / div), one rounding.
void from_f64(DataType t, const double* in, size_t n, double div, void* out, WorkerPool* pool, int parts) {
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    parallel_for(pool, parts, n, [&](size_t b, size_t e, int) {
      if (div == 1) {
        for (size_t i = b; i < e; ++i) p[i] = codec::from_double<T>(in[i]);
      } else {
        for (size_t i = b; i < e; ++i) p[i] = codec::from_double<T>(in[i] / div);
      }
    });
  });
}

}  // namespace ncclz::core
