// Test helper shared by the GoogleTest files: element i of a byte buffer of
// DataType t, as a double (16-bit floats widened exactly).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "codec/quantizer.hpp"
#include "ncclz/communicator.hpp"
#include "prims/float8.hpp"

namespace ncclz_test {

inline double value_at(ncclz::DataType t, const uint8_t* base, size_t i) {
  using ncclz::DataType;
  const uint8_t* p = base + i * ncclz::dtype_size(t);
  switch (t) {
    case DataType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DataType::F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return ncclz::codec::f16_to_float(v);
    }
    case DataType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return ncclz::codec::bf16_to_float(v);
    }
    case DataType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return double(v);
    }
    case DataType::U8: return p[0];
    case DataType::I8: return double(int8_t(p[0]));
    case DataType::U32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::U64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return double(v);
    }
    case DataType::F8E4M3: return ncclz::prims::F8E4M3::widen(p[0]);
    case DataType::F8E5M2: return ncclz::prims::F8E5M2::widen(p[0]);
  }
  return 0;
}

/// Stores v as element i of a byte buffer of DataType t (rounded to t once;
/// integers truncated).
inline void store_value(ncclz::DataType t, uint8_t* base, size_t i, double v) {
  using ncclz::DataType;
  uint8_t* p = base + i * ncclz::dtype_size(t);
  switch (t) {
    case DataType::F32: {
      const float f = float(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DataType::F64: std::memcpy(p, &v, 8); return;
    case DataType::F16: {
      const uint16_t h = ncclz::codec::float_to_f16(float(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::BF16: {
      const uint16_t h = ncclz::codec::float_to_bf16(float(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::I32: {
      const int32_t x = int32_t(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DataType::I64: {
      const int64_t x = int64_t(v);
      std::memcpy(p, &x, 8);
      return;
    }
    case DataType::U8: p[0] = uint8_t(int(v)); return;
    case DataType::I8: p[0] = uint8_t(int8_t(int(v))); return;
    case DataType::F8E4M3: p[0] = ncclz::prims::F8E4M3::narrow(float(v)); return;
    case DataType::F8E5M2: p[0] = ncclz::prims::F8E5M2::narrow(float(v)); return;
    case DataType::U32: {
      const uint32_t x = uint32_t(int64_t(v));
      std::memcpy(p, &x, 4);
      return;
    }
    case DataType::U64: {
      const uint64_t x = uint64_t(int64_t(v));
      std::memcpy(p, &x, 8);
      return;
    }
  }
}

/// The float types' unit roundoff (half an ulp of 1); 0 for integers.
inline double unit_roundoff(ncclz::DataType t) {
  using ncclz::DataType;
  switch (t) {
    case DataType::F32: return std::ldexp(1.0, -24);
    case DataType::F64: return std::ldexp(1.0, -53);
    case DataType::F16: return std::ldexp(1.0, -11);
    case DataType::BF16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}

}  // namespace ncclz_test
