#include "codec/interp_codec.hpp"

#include <algorithm>
#include <cmath>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ncclz::codec {

template <class C>
void* BigArray<C>::allocate(size_t bytes) {
  constexpr size_t kHuge = size_t(1) << 21;
  if (bytes == 0) return nullptr;
  if (bytes < kHuge) {
    void* p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}
template class BigArray<int32_t>;
template class BigArray<int64_t>;

namespace {

using U64 = uint64_t;

/// Prediction of the element at i whose coordinate along the pass dimension
/// is t (n elements along it, hs = h * its stride). See interp_codec.hpp.
template <class C>
inline int64_t predict(const C* q, size_t i, U64 t, U64 h, U64 n, size_t hs) {
  const U64 a = U64(q[i - hs]);
  if (t + h >= n) return int64_t(a);
  const U64 b = U64(q[i + hs]);
  const bool has_lo = t >= 3 * h, has_hi = t + 3 * h < n;
  if (has_lo && has_hi) {
    const U64 A = U64(q[i - 3 * hs]), D = U64(q[i + 3 * hs]);
    return int64_t(U64(9) * (a + b) - A - D + 8) >> 4;
  }
  if (has_lo) {
    const U64 A = U64(q[i - 3 * hs]);
    return int64_t(U64(6) * a + U64(3) * b - A + 4) >> 3;
  }
  if (has_hi) {
    const U64 D = U64(q[i + 3 * hs]);
    return int64_t(U64(3) * a + U64(6) * b - D + 4) >> 3;
  }
  return int64_t(a + b + 1) >> 1;
}

/// Visits every element once in the interp order; q[i] = op(i, prediction,
/// coarse) where coarse says the level's stride h is >= 4 (element 0 counts
/// as coarse).
template <class C, class Op>
void traverse(const std::vector<uint64_t>& dims_in, C* q, Op&& op) {
  std::vector<U64> dims;
  U64 n = 1;
  for (U64 d : dims_in) {
    n *= d;
    if (d != 1) dims.push_back(d);
  }
  if (n == 0) return;
  q[0] = C(op(size_t(0), int64_t(0), true));
  const size_t D = dims.size();
  if (D == 0) return;
  std::vector<U64> stride(D);
  U64 maxd = 0;
  for (size_t e = D; e-- > 0;) {
    stride[e] = e + 1 == D ? 1 : stride[e + 1] * dims[e + 1];
    maxd = std::max(maxd, dims[e]);
  }
  int L = 0;
  while ((U64(1) << L) < maxd) ++L;
  std::vector<U64> cnt(D), step(D), off0(D), idx(D);
  for (int l = L - 1; l >= 0; --l) {
    const U64 h = U64(1) << l;
    const bool coarse = h >= 4;
    for (size_t e0 = 0; e0 < D; ++e0) {
      const U64 n0 = dims[e0];
      if (h >= n0) continue;
      for (size_t e = 0; e < D; ++e) {
        const U64 s = e < e0 ? h : 2 * h;
        off0[e] = e == e0 ? h * stride[e] : 0;
        cnt[e] = e == e0 ? (n0 + h - 1) / (2 * h) : (dims[e] + s - 1) / s;
        step[e] = (e == e0 ? 2 * h : s) * stride[e];
      }
      const size_t hs = size_t(h * stride[e0]);
      const size_t last = D - 1;
      std::fill(idx.begin(), idx.end(), 0);
      for (;;) {
        size_t base = 0;
        for (size_t e = 0; e < last; ++e) base += size_t(off0[e] + idx[e] * step[e]);
        base += size_t(off0[last]);
        const size_t inner = size_t(cnt[last]), istep = size_t(step[last]);
        if (e0 == last) {
          U64 t = h;
          for (size_t j = 0; j < inner; ++j, t += 2 * h) {
            const size_t i = base + j * istep;
            q[i] = C(op(i, predict(q, i, t, h, n0, hs), coarse));
          }
        } else {
          const U64 t = h + 2 * h * idx[e0];
          for (size_t j = 0; j < inner; ++j) {
            const size_t i = base + j * istep;
            q[i] = C(op(i, predict(q, i, t, h, n0, hs), coarse));
          }
        }
        // Odometer over dims 0..last-1.
        size_t e = last;
        while (e > 0) {
          --e;
          if (++idx[e] < cnt[e]) break;
          idx[e] = 0;
          if (e == 0) goto pass_done;
        }
        if (last == 0) break;
      }
    pass_done:;
    }
  }
}

}  // namespace

uint64_t interp_slices(const std::vector<uint64_t>& dims_in, uint32_t L, uint64_t max_slices,
                       std::vector<uint32_t>* counts) {
  std::vector<U64> dims;
  U64 n = 1;
  for (U64 d : dims_in) {
    n = d == 0 ? 0 : n * d;
    if (d == 0) break;
    if (d != 1) dims.push_back(d);
  }
  if (n == 0 || L == 0) return 0;
  const U64 lmax = L, lmin = std::max<U64>(1, L >> 6);
  uint64_t slices = 0;
  U64 cur = 0;
  auto emit = [&](U64 len, U64 times) {
    if (counts && slices + times <= max_slices)
      for (U64 j = 0; j < times; ++j) counts->push_back(uint32_t(len));
    slices += times;
  };
  auto add_pass = [&](U64 s) {
    if (cur >= lmin) {
      emit(cur, 1);
      cur = 0;
    }
    const U64 total = cur + s;
    if (total > lmax) {
      const U64 full = (total - 1) / lmax;  // leaves 1..L in the current slice
      emit(lmax, full);
      cur = total - full * lmax;
    } else {
      cur = total;
    }
  };
  add_pass(1);  // element 0
  const size_t D = dims.size();
  U64 maxd = 0;
  for (U64 d : dims) maxd = std::max(maxd, d);
  int levels = 0;
  while ((U64(1) << levels) < maxd) ++levels;
  for (int l = levels - 1; l >= 0; --l) {
    const U64 h = U64(1) << l;
    for (size_t e0 = 0; e0 < D; ++e0) {
      if (h >= dims[e0]) continue;
      U64 size = 1;
      for (size_t e = 0; e < D; ++e) {
        const U64 s = e < e0 ? h : 2 * h;
        size *= e == e0 ? (dims[e] + h - 1) / (2 * h) : (dims[e] + s - 1) / s;
      }
      add_pass(size);
    }
  }
  if (cur > 0) emit(cur, 1);
  return slices;
}

template <class T, class C>
size_t interp_quantize(const T* x, const std::vector<uint64_t>& dims, const QuantGrid& grid, int log2k, double eb,
                       int64_t limit, C* resid, std::vector<uint64_t>* outliers) {
  U64 n = 1;
  for (U64 d : dims) n *= d;
  BigArray<C> q(static_cast<size_t>(n));
  const int64_t k = int64_t(1) << log2k;
  const double d = grid.step / double(k);  // exact: k is a power of two
  const double inv_d = grid.inv_step * double(k);
  const int64_t st_fine = k, st_coarse = k >= 2 ? k / 2 : k;
  const double inv_fine = inv_d / double(st_fine), inv_coarse = inv_d / double(st_coarse);
  const double lim = double(limit);
  size_t pos = 0, count = 0;
  auto ok = [&](double xv, int64_t c) {
    return c >= -limit && c <= limit && abs_of(xv - to_double(from_double<T>(double(c) * d))) <= eb;
  };
  traverse(dims, q.data(), [&](size_t i, int64_t p, bool coarse) -> int64_t {
    const int64_t st = coarse ? st_coarse : st_fine;
    const double xv = to_double(x[i]);
    int64_t c = 0;
    bool good = false;
    if (std::isfinite(xv)) {
      // The code nearest x on the grid of step st*d through the prediction:
      // zero residual when the prediction is within half that step of x.
      const double r = round_to_integer((xv - double(p) * d) * (coarse ? inv_coarse : inv_fine));
      const double cd = double(p) + r * double(st);
      if (std::fabs(cd) <= lim) {
        c = p + int64_t(r) * st;
        good = ok(xv, c);
      }
      if (!good) {  // float rounding at the edge: the nearest fine-grid codes
        const double v = round_to_integer(xv * inv_d);
        if (std::fabs(v) <= lim + 1) {
          const int64_t c0 = int64_t(v);
          for (int64_t cand : {c0, c0 - 1, c0 + 1})
            if (ok(xv, cand)) {
              c = cand;
              good = true;
              break;
            }
        }
      }
    }
    if (!good) {
      outliers->push_back(i);
      ++count;
      c = std::clamp<int64_t>(p, -limit, limit);
    }
    resid[pos++] = C(int64_t(U64(c) - U64(p)));
    return c;
  });
  return count;
}

template <class C>
void interp_reconstruct(const C* resid, const std::vector<uint64_t>& dims, C* q) {
  size_t pos = 0;
  traverse(dims, q, [&](size_t, int64_t p, bool) -> int64_t { return int64_t(U64(p) + U64(int64_t(resid[pos++]))); });
}

#define NCCLZ_INTERP_Q(T, C)                                                                                   \
  template size_t interp_quantize<T, C>(const T*, const std::vector<uint64_t>&, const QuantGrid&, int, double, \
                                        int64_t, C*, std::vector<uint64_t>*);
NCCLZ_INTERP_Q(float, int32_t)
NCCLZ_INTERP_Q(double, int32_t)
NCCLZ_INTERP_Q(F16, int32_t)
NCCLZ_INTERP_Q(Bf16, int32_t)
NCCLZ_INTERP_Q(float, int64_t)
NCCLZ_INTERP_Q(double, int64_t)
NCCLZ_INTERP_Q(F16, int64_t)
NCCLZ_INTERP_Q(Bf16, int64_t)
#undef NCCLZ_INTERP_Q
template void interp_reconstruct<int32_t>(const int32_t*, const std::vector<uint64_t>&, int32_t*);
template void interp_reconstruct<int64_t>(const int64_t*, const std::vector<uint64_t>&, int64_t*);

}  // namespace ncclz::codec
