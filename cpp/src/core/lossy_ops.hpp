// The API layer's element-wise work for lossy calls: input statistics, the
// resolved bound, quantization into int32/int64 codes and back, and the
// conversions of the exact path. The error budget itself is lossy_plan.hpp.
// Each pass runs in up to `parts` contiguous parts on the communicator's worker
// pool (the call's channel count), for large buffers; results do not depend on it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/call_desc.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/communicator.hpp"
#include "prims/prims.hpp"

namespace ncclz::base {
class WorkerPool;
}  // namespace ncclz::base

namespace ncclz::core {

using base::WorkerPool;

/// Where a lossy reduction's input is nonzero, listed by the statistics scan
/// when few elements are (sparse gradients, mostly +0.0), so that the call can
/// carry the input as lists of nonzeros and never read it densely again
/// (LossyStage::prepare_nonzeros). The scan covers the input in parts; a part
/// is listed when at most about 1/kMaxDensity of its elements have bits other
/// than those of +0.0: then the positions (from the part's start) and the raw
/// values of those elements are kept in order. Denser parts are not listed
/// (the scan stops listing them after a block or two).
class NonzeroIndex {
 public:
  static constexpr size_t kMaxDensity = 16;
  /// Elements the scan lists at a time (the block stays in L1 between the
  /// statistics and the listing).
  static constexpr size_t kBlock = 4096;

  /// The listed elements of one part that lie in a range.
  struct Span {
    size_t base = 0;  ///< input position of pos[i] == 0
    const uint32_t* pos = nullptr;
    const uint8_t* val = nullptr;  ///< raw values, esize bytes each
    size_t k = 0;
  };

  /// Before a scan of n elements of esize bytes in at most `parts` parts.
  void reset(size_t n, size_t esize, int parts);
  /// The scan of part i = [b, e) of x (after reset): statistics, and the list
  /// when the part is sparse enough.
  DataStats scan_part(DataType t, const void* x, size_t b, size_t e, int i);
  /// Whether every element of [off, off + n) lies in a listed part; if so,
  /// fn(Span) is called for the listed elements in it, part by part in order.
  template <class Fn>
  bool for_each_span(size_t off, size_t n, Fn&& fn) const;
  /// Listed elements in all (for tests and statistics).
  size_t listed() const;
  /// Whether the last scan listed every part.
  bool covers_all() const {
    return for_each_span(0, n_, [](const Span&) {});
  }

 private:
  struct Part {
    size_t begin = 0, end = 0;
    size_t at = 0;     ///< first entry of the part's storage
    size_t count = 0;  ///< listed entries
    bool listed = false;
  };
  std::vector<Part> parts_;
  std::unique_ptr<uint32_t[]> pos_;
  std::unique_ptr<uint8_t[]> val_;
  size_t pos_cap_ = 0, val_bytes_ = 0;  ///< storage
  size_t n_ = 0, es_ = 0;
};

/// Finite min/max/max|x| of x[0..n) and whether any element is non-finite.
/// With an index, also lists the nonzeros of the parts that are mostly zero.
DataStats scan(DataType t, const void* x, size_t n, WorkerPool* pool = nullptr, int parts = 1,
               NonzeroIndex* index = nullptr);
/// Stores s in a descriptor / combines every rank's descriptor statistics.
void put_stats(CallDesc& d, const DataStats& s);
DataStats merge_stats(const std::vector<CallDesc>& all);

/// Quantizes x into q (int32, or int64 when p.wide) on p's grid, checking
/// p.check_eb; returns the number of outliers (their codes are 0).
size_t quantize_buf(DataType t, const LossyPlan& p, const void* x, size_t n, void* q, WorkerPool* pool = nullptr,
                    int parts = 1);
/// out[i] = T(q[i] * step).
void dequantize_buf(DataType t, bool wide, const void* q, size_t n, double step, void* out, WorkerPool* pool = nullptr,
                    int parts = 1);

/// The lossy reductions' quantize and dequantize, run slice by slice inside the
/// send/receive loops (prims::Stage). `codes` (in_count codes) is the wire input
/// the verbs read and `out_codes` their output; prepare(src, n) quantizes the
/// user input elements at src's offset in `codes`, finish(dst, n) writes the
/// output elements at dst's offset in `out_codes` as T(code * out_step). The
/// code buffers themselves are never read or written: they are address ranges.
///
/// The plan makes outliers impossible for finite inputs within the scanned
/// max |x| (lossy_plan.hpp), which is what lets quantization start before every
/// rank has quantized everything. Should one still occur (an input changed
/// between the statistics scan and its use, say), prepare throws rather than
/// send a code that would break the bound.
class LossyStage final : public prims::ListStage {
 public:
  /// `index`: the scan's list of x's nonzeros (or nullptr), for
  /// prepare_nonzeros; `in_place`: out is x (an all_reduce in place), so
  /// output elements that x had +0.0 hold +0.0 already (finish_nonzeros).
  LossyStage(DataType t, const LossyPlan& p, const void* x, const void* codes, void* out, const void* out_codes,
             double out_step, const NonzeroIndex* index = nullptr, bool in_place = false);
  /// Quantizes into one of two per-thread buffers of the stage's, in turn
  /// (Stage::prepare), and returns it (the codes are read right away, and by
  /// a reduction into a slice just sent: Prims::prepared; the verbs may add
  /// into the buffer).
  void* prepare(const void* src, size_t n) override;
  void finish(const void* dst, const void* data, size_t n) override;
  /// Where the index lists all of x's elements in the range: the nonzero
  /// codes, quantized from the listed values alone (x is not read).
  bool prepare_nonzeros(const void* src, size_t n, size_t max_k, prims::NonzeroList* out) override;
  /// Fills the output range with T(0 * step) and writes the nonzeros. In
  /// place, where the index lists the range, only the elements x had other
  /// than +0.0 are cleared (the rest are +0.0 already, which is what code 0
  /// gives): time in proportion to the nonzeros.
  void finish_nonzeros(const void* dst, const prims::NonzeroList& list, size_t n) override;

 private:
  /// Throws the error of an input element that did not fit the grid.
  [[noreturn]] void outliers_found(size_t bad, size_t off) const;

  DataType t_;
  LossyPlan plan_;
  const uint8_t* x_;
  const uint8_t* codes_;
  uint8_t* out_;
  const uint8_t* out_codes_;
  double out_step_;
  size_t es_, cs_;
  const NonzeroIndex* index_;
  bool in_place_;
};

template <class Fn>
bool NonzeroIndex::for_each_span(size_t off, size_t n, Fn&& fn) const {
  if (n == 0) return true;
  const size_t end = off + n;
  for (const Part& p : parts_) {
    if (p.end > off && p.begin < end && !p.listed) return false;
  }
  // Parts tile [0, n_): every element of the range is in a listed part.
  if (end > n_) return false;
  for (const Part& p : parts_) {
    if (!(p.end > off && p.begin < end)) continue;
    const uint32_t* first = pos_.get() + p.at;
    const uint32_t* last = first + p.count;
    const uint32_t lo = uint32_t(std::max(off, p.begin) - p.begin);
    const uint32_t hi = uint32_t(std::min(end, p.end) - p.begin);
    const uint32_t* a = std::lower_bound(first, last, lo);
    const uint32_t* b = std::lower_bound(a, last, hi);
    Span s;
    s.base = p.begin;
    s.pos = a;
    s.val = val_.get() + (p.at + size_t(a - first)) * es_;
    s.k = size_t(b - a);
    fn(s);
  }
  return true;
}

/// Exact path: x -> double, and double / div -> T with one rounding.
void to_f64(DataType t, const void* x, size_t n, double* out, WorkerPool* pool = nullptr, int parts = 1);
/// out[i] = float(x[i]) for a 16-bit float type t (exact); from_f32: out[i] = T(double(in[i]) / div), one
/// rounding (div 1: none).
void to_f32(DataType t, const void* x, size_t n, float* out, WorkerPool* pool = nullptr, int parts = 1);
void from_f32(DataType t, const float* in, size_t n, double div, void* out, WorkerPool* pool = nullptr, int parts = 1);
void from_f64(DataType t, const double* in, size_t n, double div, void* out, WorkerPool* pool = nullptr, int parts = 1);

}  // namespace ncclz::core
