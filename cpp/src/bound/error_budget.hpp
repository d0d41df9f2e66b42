// Every error-bound computation of ncclz, in one place: the collectives' lossy
// budget (from the promised bound E to the quantizer's bound eb and the code
// width), whether the exact run in the element type keeps a bound (the
// policy's proposals), the exact path's accumulation and its bound, relative
// bounds, and the standalone codec's bound and grid (codec::compress). Below
// both the codec and the runtime: it depends on nothing but the element types.
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
// For float16 and bfloat16 (unit roundoff 2^-11, 2^-8) those two roundings of
// T would take most of any bound near T's resolution, so there the quantizer
// checks the code's value in double instead (LossyPlan::exact_check,
// codec::QuantGrid::exact_check): |x - fl(q*step)| <= eb_check with
// eb_check = eb + 2(A+E)*2^-50 (fl(q*step) is within (A+E)*2^-53 of q*step,
// so the nearest code still always passes), and the code's exact value is
// within eb_check + (A+E)*2^-50 of x:
//   delta = 3*(A + E) * 2^-50  (16-bit floats, flat collectives).
// (The hierarchical budget below keeps the rounded check: its hosts' partial
// sums are values of T.)
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
// exactly instead (choose_exact below), which is the best any method can do.
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
  /// The quantizer checks the codes' values in double, not rounded to T
  /// (codec::QuantGrid::exact_check): plan_lossy's choice for float16 and
  /// bfloat16, where T's rounding in the check would cost two roundings of T
  /// per rank (delta) of the budget.
  bool exact_check = false;
  bool wide = false;  ///< int64 codes (else int32)
  int64_t limit = 0;  ///< |code| limit passed to the quantizer
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

/// The plan of a hierarchical call (docs/ALGORITHMS.md, "Hierarchical
/// collectives"): H hosts of L ranks; inside each host the ranks' values are
/// combined exactly in T (raw slots, no quantization), and only the host's
/// combined value p_h is quantized, once, for the compressed ring between
/// hosts. So a sum's quantization error is paid H times, not N = H*L times.
/// The host's sum itself is rounded in T, and that rounding is in the budget:
///
///   partial sums: P_1 = x, P_k = fl(P_{k-1} + x_k) (ring order), |x| <= A.
///     |fl(s)| <= |s| g + d/2 with g = 1 + u (f32, f64: one rounding) or
///     g = (1 + u)(1 + 2^-24) (f16, bf16: the sum is taken in float, then
///     rounded to T: two roundings), so by induction
///     |P_k| <= k A g^(k-1) + (k-1) d/2 <= M := L A g^L + L d.
///   each of the L-1 additions errs by at most e_add = hu(M') + (f16/bf16:
///     2^-24 M) with M' = M (1 + 2^-23) (the float sum before its rounding to
///     T is within 2^-24 of the exact one); together
///     |p_h - sum_l x_{h,l}| <= eps := (L-1) e_add.
///   the quantizer sees |p_h| <= M in place of A: its code is within
///     eb + delta of p_h, delta = 2 hu(M + V) + 3 (M + V) 2^-50, V >= eb
///     (V = E for sum and select, L*E for mean).
///
///   sum:  |out - sum x| <= H (eps + eb + delta) + hu(R) + R 2^-50,
///         R = H (M + V + delta)(1 + 2^-30) + E
///         => eb = (E - hu(R) - R 2^-50) / H - delta - eps
///   mean: the sum of codes is divided by N once, at dequantization:
///         |out - mean x| <= H (eps + eb + delta) / N + hu(R) + R 2^-50,
///         R = (M + V + delta) / L (1 + 2^-30) + E
///         => eb = (E - hu(R) - R 2^-50) * L - delta - eps
///   select (max/min, and the data movement of all_gather, broadcast): the
///         host's max/min is one of its values, exact (eps = 0, M = A): the
///         flat ring's budget, eb = E - hu(R) - R 2^-50 - delta, R = A + 2E.
///
/// Codes: |q| <= M/step + 2, H of them add up (select: 1). With L = 1 this is
/// the flat ring's budget over H ranks (up to the slightly larger R).
LossyPlan plan_lossy_hier(codec::ElemType t, Combine how, int nhosts, int local_size, double E, const DataStats& g);

/// Whether the plain collective in the element type keeps |out - exact| <= E,
/// with half of E to spare: then an exact mode (none, lossless) may run a call
/// that asked for the lossy bound E (the compression policy's proposal).
/// Select (max/min, data movement) returns one rank's value exactly. A ring
/// sum adds N-1 times in T, each partial sum bounded by N*A, so it is off by at
/// most (N-1) half-ulps of N*A; a mean adds one rounding of the division. The
/// hierarchical sum adds L-1 times inside a host and H-1 times between hosts
/// (L-1 + H-1 <= N-1), every partial sum again within N*A: the same bound.
bool exact_keeps_bound(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g);

/// The bound on |out - exact| (the exact result in fp64, every finite element)
/// that an exact run of a lossy call achieves, as CallStats::error_bound
/// reports it. Select: 0 (one rank's value). Sums and means, R = N*A:
///  - in T (in_f64 false; the policy's lighter mode, the plain collective):
///    (N-1) * hu(R); a mean / N, plus hu(A) for its division, or d/2 where N
///    is a power of two up to 2^16: divide_in_place divides in T (float for
///    16-bit floats, which holds the quotient exactly), so the quotient is
///    exact but in T's subnormal range;
///  - accumulated in float64 and rounded to T once (in_f64): (N-1) * R *
///    2^-53 + hu(R), a mean (N-1) * R * 2^-53 / N + A * 2^-53 + hu(A).
/// One rank: 0. (R and A are inflated by 2^-30 relative, as above.)
double exact_error(codec::ElemType t, Combine how, int nranks, const DataStats& g, bool in_f64);

/// How the exact path accumulates a sum or mean (LossyCall::run_exact).
enum class Accumulation : uint8_t {
  InT,  ///< the plain collective in T: the uncompressed call's bytes
  F32,  ///< in float32, rounded once to T (float16/bfloat16 only: twice T's bytes)
  F64,  ///< in float64, rounded once to T (4x a 16-bit T's bytes, 2x float32's)
};

/// The bound of an exact sum or mean accumulated in acc, as exact_error: InT
/// and F64 are exact_error's; F32 (16-bit T, which float32 holds exactly):
/// e32 = (N-1) * hu_f32(R) for the N-1 float32 additions, then one rounding to
/// T of a value within R + e32: a sum e32 + hu(R + e32); a mean divides the
/// float32 sum in float64 and rounds once: e32 / N + A * 2^-53 + hu(A).
double accumulation_error(codec::ElemType t, Combine how, int nranks, const DataStats& g, Accumulation acc);

/// The tolerance of choose_exact's last step: an accumulation whose bound is
/// within this factor of float64's counts as the best an exact run achieves.
inline constexpr double kBestExactSlack = 1.0 + 1.0 / 1024;

struct ExactChoice {
  Accumulation acc = Accumulation::F64;
  double error = 0;    ///< accumulation_error of acc (CallStats::error_bound)
  bool keeps = false;  ///< error <= E
};

/// The exact path's accumulation of a sum or mean and the bound it achieves,
/// the same on every rank (it reads only the exchanged statistics): the
/// narrowest of T, float32 (16-bit T only) and float64 whose bound is within
/// E, or, where not even float64's is (E below what any exact run promises:
/// float64's bound is mostly the one rounding of the result to T; for
/// float32 and 16-bit T the lossy plan cannot keep such an E either: its own
/// final rounding hu(R), R = N(A+E)+E, is larger), within
/// kBestExactSlack of float64's, the best an exact run achieves. So:
///  - T where its N-1 roundings keep E (the uncompressed call's bytes), and
///    where E is out of reach, T where its roundings cost no more than
///    float64's: a sum or a mean on 2 ranks (one rounding of the exact sum,
///    as float64's; a mean's division by 2 is exact), any float64 T;
///  - else float32 for float16/bfloat16 (twice T's bytes); out of reach, its
///    N-1 float32 roundings add (N-1) 2^-16 (bf16) or (N-1) 2^-13 (f16) of
///    T's one rounding: up to 64 or 8 ranks. f32_ok false skips it: the exact
///    path's mostly-zero inputs, whose float64 values go losslessly coded;
///  - else float64, rounded once to T.
/// Non-finite inputs, or a result that may overflow T: float64.
/// (exact_keeps_bound, the policy's test for its lighter modes, asks T for
/// half of E to spare; a call whose T sum keeps E only without it still runs
/// the plain collective here.)
ExactChoice choose_exact(codec::ElemType t, Combine how, int nranks, double E, const DataStats& g, bool f32_ok);

/// The standalone codec's bound for one blob (codec::compress): abs_bound when
/// it is > 0, else rel_bound * (hi - lo) of the finite values (any_finite:
/// whether there are any). Degenerate spans still get a grid: no finite value
/// gives 1, a constant |lo| / 2 (1 for zeros: the grid then reproduces the
/// constant exactly), a span whose width overflows rel * hi - rel * lo, one
/// whose bound underflows the smallest double. At most max_eb.
double blob_bound(double abs_bound, double rel_bound, bool any_finite, double lo, double hi, double max_eb);

}  // namespace ncclz::bound
