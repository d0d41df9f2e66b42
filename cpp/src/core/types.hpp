// Small helpers over the public enums (DataType, RedOp, Compression::Mode)
// shared by the runtime's files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ncclz/codec/format.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {

using codec::ElemType;
using Mode = Compression::Mode;

inline ElemType elem_of(DataType t) {
  switch (t) {
    case DataType::F32: return ElemType::F32;
    case DataType::F64: return ElemType::F64;
    case DataType::F16: return ElemType::F16;
    case DataType::BF16: return ElemType::BF16;
    case DataType::I32: return ElemType::I32;
    case DataType::I64: return ElemType::I64;
    case DataType::U8: return ElemType::U8;
  }
  throw InvalidArgument("ncclz: unknown data type " + std::to_string(int(t)));
}

inline bool valid_dtype(uint8_t t) { return t <= uint8_t(DataType::U8); }
inline bool valid_op(uint8_t o) { return o <= uint8_t(RedOp::Prod); }
inline bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}
inline size_t dsize(DataType t) { return dtype_size(t); }
inline bool is_lossy(Mode m) { return m == Mode::LossyAbs || m == Mode::LossyRel; }

}  // namespace ncclz::core
