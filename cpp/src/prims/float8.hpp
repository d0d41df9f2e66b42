// The two 8-bit float formats of NCCL (ncclFloat8e4m3, ncclFloat8e5m2), as
// the OCP 8-bit float specification defines them and ml_dtypes implements
// them (float8_e4m3fn, float8_e5m2):
//
//   e4m3fn  sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
//           S.1111.111 is NaN; largest finite 448; subnormals 2^-9 apart
//   e5m2    sign, 5 exponent bits (bias 15), 2 mantissa bits; IEEE-like:
//           S.11111.00 is +-inf, S.11111.xx NaN; largest finite 57344
//
// Widening is exact; narrowing rounds to nearest, ties to even, and does not
// saturate: a value beyond the largest finite one after rounding becomes
// NaN (e4m3fn, which has no infinity) or +-inf (e5m2), as a float16
// reduction overflows to inf, so an overflow is never a silently clipped
// number. (NCCL's device code saturates to the largest finite value
// instead; torch's cast does for e4m3fn.)
#pragma once

#include <cmath>
#include <cstdint>

namespace ncclz::prims {

template <int ExpBits, int ManBits, bool HasInf>
struct Float8Format {
  static constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  static constexpr uint8_t kExpMask = uint8_t((1 << ExpBits) - 1);
  static constexpr uint8_t kManMask = uint8_t((1 << ManBits) - 1);
  /// The largest finite value's code (e4m3fn: S.1111.110; e5m2: S.11110.11).
  static constexpr uint8_t kMaxFinite = HasInf ? uint8_t(((kExpMask - 1) << ManBits) | kManMask) : uint8_t(0x7E);
  static constexpr uint8_t kNaN = HasInf ? uint8_t((kExpMask << ManBits) | (1 << (ManBits - 1))) : uint8_t(0x7F);
  static constexpr uint8_t kInf = uint8_t(kExpMask << ManBits);  // e5m2 only

  static float widen(uint8_t c) {
    const bool neg = (c & 0x80) != 0;
    const int e = (c >> ManBits) & kExpMask;
    const int m = c & kManMask;
    float v;
    if (!HasInf && e == kExpMask && m == kManMask) {
      v = NAN;
    } else if (HasInf && e == kExpMask) {
      v = m ? NAN : INFINITY;
    } else if (e == 0) {
      v = std::ldexp(float(m), 1 - kBias - ManBits);
    } else {
      v = std::ldexp(float(m | (1 << ManBits)), e - kBias - ManBits);
    }
    return neg ? -v : v;
  }

  static uint8_t narrow(float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    if (std::isnan(x)) return uint8_t(sign | kNaN);
    const double a = std::fabs(double(x));
    if (std::isinf(a)) return uint8_t(sign | (HasInf ? kInf : kNaN));
    const double min_normal = std::ldexp(1.0, 1 - kBias);
    unsigned code;
    if (a < min_normal) {
      // subnormal (rounding up to 2^ManBits is the smallest normal's code)
      code = unsigned(std::nearbyint(std::ldexp(a, kBias - 1 + ManBits)));
    } else {
      int k = 0;
      std::frexp(a, &k);  // a = f * 2^k, f in [0.5, 1)
      const int E = k - 1;
      double m = std::nearbyint((std::ldexp(a, -E) - 1.0) * (1 << ManBits));
      int biased = E + kBias;
      if (m >= double(1 << ManBits)) {
        m = 0;
        ++biased;
      }
      if (biased > int(kExpMask)) return uint8_t(sign | (HasInf ? kInf : kNaN));
      code = (unsigned(biased) << ManBits) | unsigned(m);
    }
    if (code > kMaxFinite) return uint8_t(sign | (HasInf ? kInf : kNaN));
    return uint8_t(sign | code);
  }
};

using F8E4M3 = Float8Format<4, 3, false>;
using F8E5M2 = Float8Format<5, 2, true>;

}  // namespace ncclz::prims
