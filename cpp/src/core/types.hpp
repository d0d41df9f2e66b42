// Small helpers over the public enums (DataType, RedOp, Compression::Mode)
// shared by the runtime's files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ncclz/codec/format.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "prims/reduce.hpp"

namespace ncclz::core {

using codec::ElemType;
using Mode = Compression::Mode;

inline bool valid_dtype(uint8_t t) { return t <= uint8_t(DataType::F8E5M2); }
/// The wire's element type: what a value of t travels and is coded as (I8,
/// U32 and U64 as the signed or unsigned type of their width, the same bits).
inline ElemType elem_of(DataType t) {
  if (!valid_dtype(uint8_t(t))) throw InvalidArgument("ncclz: unknown data type " + std::to_string(int(t)));
  return prims::wire_type(t);
}
/// The 8-bit floats (bytes on the wire, float arithmetic of their own).
inline bool is_float8(DataType t) { return t == DataType::F8E4M3 || t == DataType::F8E5M2; }
/// Whether op on t is its wire type's op (elem_of): everywhere but the max,
/// min and avg of I8, U32 and U64, whose order or division differs, and every
/// op of the 8-bit floats. Where it is not, the values are reduced on the host
/// (prims::reduce_fn(DataType, op)), never by the device kernels, which know
/// the wire types only.
inline bool reduces_as_wire(DataType t, RedOp op) {
  if (is_float8(t)) return false;
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
