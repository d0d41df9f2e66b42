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

/// The wire's element type: what a value of t travels and is coded as (I8,
/// U32 and U64 as the signed or unsigned type of their width, the same bits).
inline ElemType elem_of(DataType t) {
  switch (t) {
    case DataType::F32: return ElemType::F32;
    case DataType::F64: return ElemType::F64;
    case DataType::F16: return ElemType::F16;
    case DataType::BF16: return ElemType::BF16;
    case DataType::I32: return ElemType::I32;
    case DataType::I64: return ElemType::I64;
    case DataType::U8:
    case DataType::I8: return ElemType::U8;
    case DataType::U32: return ElemType::I32;
    case DataType::U64: return ElemType::I64;
  }
  throw InvalidArgument("ncclz: unknown data type " + std::to_string(int(t)));
}

inline bool valid_dtype(uint8_t t) { return t <= uint8_t(DataType::U64); }
/// Whether op on t is its wire type's op (elem_of): everywhere but the max,
/// min and avg of I8, U32 and U64, whose order or division differs. Where it
/// is not, the values are reduced on the host (prims::reduce_fn(DataType, op)),
/// never by the device kernels, which know the wire types only.
inline bool reduces_as_wire(DataType t, RedOp op) {
  const bool own = t != DataType::I8 && t != DataType::U32 && t != DataType::U64;
  return own || op == RedOp::Sum || op == RedOp::Prod;
}
inline bool valid_op(uint8_t o) { return o <= uint8_t(RedOp::Prod); }
inline bool is_float(DataType t) {
  return t == DataType::F32 || t == DataType::F64 || t == DataType::F16 || t == DataType::BF16;
}
inline size_t dsize(DataType t) { return dtype_size(t); }
inline bool is_lossy(Mode m) { return m == Mode::LossyAbs || m == Mode::LossyRel; }

}  // namespace ncclz::core
