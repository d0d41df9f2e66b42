// Test helper shared by the GoogleTest files: element i of a byte buffer of
// DataType t, as a double (16-bit floats widened exactly).
#pragma once

#include <cstdint>
#include <cstring>

#include "codec/quantizer.hpp"
#include "ncclz/communicator.hpp"

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
  }
  return 0;
}

}  // namespace ncclz_test
