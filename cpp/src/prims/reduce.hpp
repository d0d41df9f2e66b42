// Element-wise reductions the primitives apply to slices: out[i] = a[i] op b[i].
//
// The wire element type decides the arithmetic:
//  - F32/F64: native IEEE arithmetic; max/min propagate NaN (a NaN on any rank
//    gives NaN, as an overflow detector needs).
//  - F16/BF16: each operand is widened to float exactly, combined in float and
//    rounded once back to the 16-bit type (the "uncompressed float reduction"
//    of these types; lossless mode runs the very same code, so it is
//    bit-identical to no compression).
//  - I32/I64/U8 (user integers and the lossy mode's integer codes): wrapping
//    two's-complement arithmetic (no undefined behaviour on overflow; the
//    lossy mode chooses its code width so that sums never wrap).
// `a` is the incoming (received) operand and `b` the local one; the order is
// the same in every mode so that lossless stays bit-identical to none.
#pragma once

#include <cstddef>

#include "ncclz/codec/format.hpp"
#include "ncclz/communicator.hpp"

namespace ncclz::prims {

/// out[i] = a[i] op b[i] for i < n. out may alias a or b (element-wise).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

/// The reduction for wire type t and op (Avg reduces as Sum; the division is
/// applied by the caller once at the end). Returns nullptr for Avg/Prod
/// combinations that do not exist (none do today: all are defined).
ReduceFn reduce_fn(codec::ElemType t, RedOp op);

/// The element type a value of t travels and is coded as (core::elem_of):
/// t's own, or for I8, U32 and U64 the one of their width the wire has (U8,
/// I32, I64: the same bits). U8 outside the enum.
codec::ElemType wire_type(DataType t);

/// The reduction of a user's values of type t (the latency and direct
/// schedules, raw and lossless slices): reduce_fn(core's wire type of t, op)
/// except for the max and min of int8, uint32 and uint64, compared in their
/// own order (sum and prod wrap to the same bits as their wire type's).
ReduceFn reduce_fn(DataType t, RedOp op);

/// buf[i] = buf[i] / n in type t (the Avg post-op: floats divide in their own
/// arithmetic, 16-bit floats through float, integers truncate toward zero).
void divide_in_place(codec::ElemType t, void* buf, size_t count, int n);
/// dst[i] = src[i] / n, the same arithmetic (dst may be src): float16's
/// average divides each input first (core/call.cpp, "premultiplied").
void divide_into(codec::ElemType t, void* dst, const void* src, size_t count, int n);
/// The Avg post-op on a user's values of type t (int8, uint32 and uint64
/// divide in their own type: truncation toward zero, unsigned or signed).
void divide_in_place(DataType t, void* buf, size_t count, int n);

}  // namespace ncclz::prims
