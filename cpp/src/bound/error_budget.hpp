// Every error-bound computation of ncclz, in one place: the collectives' lossy
// budget (from the promised bound E to the quantizer's bound eb and the code
// width), whether the exact run in the element type keeps a bound (the
// policy's proposals), relative bounds, and the standalone codec's bound and
// grid (codec::compress). Below both the codec and the runtime: it depends on
// nothing but the element types.
//
// Notation: N ranks, A = the largest finite |x| over the inputs that take part,
// T the user's float type with unit roundoff u (2^-24 f32, 2^-53 f64, 2^-11
// f16, 2^-8 bf16) and smallest subnormal d; hu(v) = max(u*v, d/2) bounds half
// an ulp of T at any |value| <= v.
//
// Each rank quantizes on the grid q * step, step = 2*eb. The quantizer picks
// the nearest code and then checks |x - T(fl(q*step))| <= eb_check after T's
// rounding; with eb_check = eb + hu(A+E) + 2(A+E)*2^-50 the nearest code always
// passes (its exact distance is <= eb, rounding adds <= hu), so rounding of
// the grid points never turns ordinary values into outliers. The exact value
// of the code then differs from x by at most eb_check + hu(A+E) + (A+E)*2^-50:
//   delta = 2*hu(A + E) + 3*(A + E) * 2^-50  (over eb).
// The collective adds/selects codes exactly (integers), and the result is
// dequantized once: out = T(fl(Q * step)) (sum), T(fl(Q * fl(step/N))) (avg),
// T(fl(Q * step)) (max/min/data movement). That last step costs at most
// hu(R) + R * 2^-50, where R bounds |result|. So:
//
//   sum:      |out - sum x| <= N*(eb + delta) + hu(R) + R*2^-50,  R = N*(A+E) + E
//             => eb = (E - hu(R) - R*2^-50) / N - delta
//   avg, max/min, allgather, broadcast, send/recv:
//             |out - exact| <= eb + delta + hu(R) + R*2^-50,       R = A + 2E
//             => eb = E - hu(R) - R*2^-50 - delta
//
// (R is inflated by 2^-30 relative so that hu covers the rounded values too.)
// Codes: |q| <= A/step + 2. For a sum of N codes the code type must hold
// N*(A/step + 2): int32 when that is below 2^31 - 1, else int64 below 2^62
// (the quantizer's limit is set to (2^31-1)/N or 2^62/N, so the sum can never
// wrap). When eb <= 0 (E below what T's own rounding allows), the codes would
// not fit int64, or R overflows T, compression is off for the call: it runs
// exactly instead (see Communicator), which is the best any method can do.
#pragma once

#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::bound {

/// How the collective combines the ranks' values.
enum class Combine : uint8_t {
  Sum,     ///< codes of N ranks add up
  Mean,    ///< sum, then divided by N at dequantization
  Select,  ///< max/min, or data movement: the result is one rank's value
};

/// Statistics of the inputs over all ranks taking part.
struct DataStats {
  bool any_finite = false;
  bool nonfinite = false;  ///< some input is NaN or +-Inf
  double lo = 0, hi = 0;   ///< finite min / max
  double maxabs = 0;       ///< finite max |x|
};

struct LossyPlan {
  bool compress = false;     ///< false: the call runs exactly (uncompressed)
  const char* why_not = "";  ///< reason when !compress
  double E = 0;              ///< the bound promised for the call
  double eb = 0;             ///< half the grid step (step = 2*eb)
  double check_eb = 0;       ///< the bound the quantizer checks after rounding
  bool wide = false;         ///< int64 codes (else int32)
  int64_t limit = 0;         ///< |code| limit passed to the quantizer
};

/// Unit roundoff and half-ulp bound of a float type (see above).
double unit_roundoff(codec::ElemType t);
double half_ulp_bound(codec::ElemType t, double v);
/// The largest finite value of a float type (0 for integer types).
double largest_finite(codec::ElemType t);

/// The absolute bound of a relative bound r over data whose finite values span
/// [lo, hi]: r * (hi - lo) (+inf if that overflows, 0 for a constant span).
double relative_bound(double r, double lo, double hi);

/// The plan for a lossy call with bound E (already resolved from rel mode).
LossyPlan plan_lossy(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g);

/// Whether the plain collective in the element type keeps |out - exact| <= E,
/// with half of E to spare: then an exact mode (none, lossless) may run a call
/// that asked for the lossy bound E (the compression policy's proposal).
/// Select (max/min, data movement) returns one rank's value exactly. A ring
/// sum adds N-1 times in T, each partial sum bounded by N*A, so it is off by at
/// most (N-1) half-ulps of N*A; a mean adds one rounding of the division.
bool exact_keeps_bound(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g);

/// Whether a ring sum of a 16-bit float type t accumulated in float32 and
/// rounded once to t keeps E: N-1 float32 roundings of partial sums bounded by
/// N*A, plus one half-ulp of t at N*A (t to float32 is exact). The exact
/// path's middle way, half the bytes of float64.
bool f32_sum_keeps_bound(codec::ElemType t, int nranks, double E, const DataStats& g);

/// The standalone codec's bound for one blob (codec::compress): abs_bound when
/// it is > 0, else rel_bound * (hi - lo) of the finite values (any_finite:
/// whether there are any). Degenerate spans still get a grid: no finite value
/// gives 1, a constant |lo| / 2 (1 for zeros: the grid then reproduces the
/// constant exactly), a span whose width overflows rel * hi - rel * lo, one
/// whose bound underflows the smallest double. At most max_eb.
double blob_bound(double abs_bound, double rel_bound, bool any_finite, double lo, double hi, double max_eb);

}  // namespace ncclz::bound
