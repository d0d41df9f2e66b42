// Quantizer: floats onto integer codes on a grid shared by every rank.
//
// A code q stands for the value q * step with step = 2 * eb, computed in
// double and rounded once to the element type T. quantize() picks for each
// finite x the code nearest x / step and then verifies the bound after that
// rounding, |x - T(q * step)| <= eb, fixing q by one step where float rounding
// broke it. Elements that are non-finite, whose code would exceed the code
// limit, or whose bound cannot be met are outliers: their code is 0 and their
// index is reported, so the caller carries them exactly. Nothing is clipped.
// OWNER: quantizer helper. Signatures below are the contract with the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Storage types for 16-bit floats (bit patterns).
struct Bf16 { uint16_t bits; };
struct F16 { uint16_t bits; };

struct QuantGrid {
  double eb = 0;        ///< bound: |x - dequantized| <= eb for every finite non-outlier element
  double step = 0;      ///< 2 * eb
  double inv_step = 0;  ///< 1 / step
  static QuantGrid from_bound(double eb) { return QuantGrid{eb, 2 * eb, 1 / (2 * eb)}; }
};

/// Largest |code| the quantizer emits for a code type (leaves headroom for sums).
template <class Code>
constexpr int64_t default_code_limit();

/// Quantizes x[0..n) into q. Outlier indices are appended to *outliers (their
/// codes are 0). `limit` bounds |q|. Returns the number of outliers.
template <class T, class Code>
size_t quantize(const T* x, size_t n, const QuantGrid& g, int64_t limit, Code* q, std::vector<uint64_t>* outliers);

/// out[i] = T(q[i] * step).
template <class T, class Code>
void dequantize(const Code* q, size_t n, const QuantGrid& g, T* out);

/// Min and max of the finite elements; false when there are none.
template <class T>
bool finite_range(const T* x, size_t n, double* lo, double* hi);

/// Largest |x| over finite elements (0 if none).
template <class T>
double finite_max_abs(const T* x, size_t n);

}  // namespace ncclz::codec
