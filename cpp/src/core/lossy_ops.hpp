// The API layer's element-wise work for lossy calls: input statistics, the
// resolved bound, quantization into int32/int64 codes and back, and the
// conversions of the exact path. The error budget itself is lossy_plan.hpp.
// Each pass runs in up to `parts` contiguous parts on the communicator's worker
// pool (the call's channel count), for large buffers; results do not depend on it.
#pragma once

#include <cstddef>
#include <vector>

#include "core/call_desc.hpp"
#include "core/lossy_plan.hpp"
#include "ncclz/communicator.hpp"
#include "prims/prims.hpp"

namespace ncclz::core {

class WorkerPool;

/// Finite min/max/max|x| of x[0..n) and whether any element is non-finite.
DataStats scan(DataType t, const void* x, size_t n, WorkerPool* pool = nullptr, int parts = 1);
/// Stores s in a descriptor / combines every rank's descriptor statistics.
void put_stats(CallDesc& d, const DataStats& s);
DataStats merge_stats(const std::vector<CallDesc>& all);

/// E of the call: the abs bound, or r * (max - min) of the finite inputs.
double resolve_bound(const Compression& c, const DataStats& g);
/// Lossy messages under c.min_bytes run on the exact path.
void apply_min_bytes(LossyPlan& p, const Compression& c, size_t bytes);

/// Quantizes x into q (int32, or int64 when p.wide) on p's grid, checking
/// p.check_eb; returns the number of outliers (their codes are 0).
size_t quantize_buf(DataType t, const LossyPlan& p, const void* x, size_t n, void* q, WorkerPool* pool = nullptr,
                    int parts = 1);
/// out[i] = T(q[i] * step).
void dequantize_buf(DataType t, bool wide, const void* q, size_t n, double step, void* out,
                    WorkerPool* pool = nullptr, int parts = 1);

/// The lossy reductions' quantize and dequantize, run slice by slice inside the
/// send/receive loops (prims::Stage). `codes` (in_count codes) is the wire input
/// the verbs read and `out_codes` their output; prepare(src, n) quantizes the
/// user input elements at src's offset in `codes`, finish(dst, n) writes the
/// output elements at dst's offset in `out_codes` as T(code * out_step).
///
/// The plan makes outliers impossible for finite inputs within the scanned
/// max |x| (lossy_plan.hpp), which is what lets quantization start before every
/// rank has quantized everything. Should one still occur (an input changed
/// between the statistics scan and its use, say), prepare throws rather than
/// send a code that would break the bound.
class LossyStage final : public prims::Stage {
 public:
  LossyStage(DataType t, const LossyPlan& p, const void* x, const void* codes, void* out, const void* out_codes,
             double out_step);
  /// Quantizes into a per-thread buffer of the stage's and returns it (the
  /// wire buffer at src is not written: the codes are read once, right away).
  const void* prepare(const void* src, size_t n) override;
  /// The verbs may add into that buffer (it is rewritten by the next prepare).
  bool prepared_writable() const override { return true; }
  /// The output codes go to a second per-thread buffer, dequantized by
  /// finish() straight from it: the call's output code buffer is not written.
  void* output(void* dst, size_t n) override;
  void finish(const void* dst, const void* data, size_t n) override;
  /// A Sparse slice (no predictor) is dequantized straight from its nonzero
  /// list: the output range is filled with T(0 * step) and the nonzeros
  /// written, no code buffer in between. Other slices: declined.
  codec::Status finish_slice(const void* dst, const uint8_t* slice, size_t len, size_t n) override;

 private:
  DataType t_;
  LossyPlan plan_;
  const uint8_t* x_;
  const uint8_t* codes_;
  uint8_t* out_;
  const uint8_t* out_codes_;
  double out_step_;
  size_t es_, cs_;
};

/// Exact path: x -> double, and double / div -> T with one rounding.
void to_f64(DataType t, const void* x, size_t n, double* out, WorkerPool* pool = nullptr, int parts = 1);
void from_f64(DataType t, const double* in, size_t n, double div, void* out, WorkerPool* pool = nullptr, int parts = 1);

}  // namespace ncclz::core
