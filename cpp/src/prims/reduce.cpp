// Element-wise reductions (see reduce.hpp). Plain loops over restrict-free
// pointers (out may alias an input); the compiler vectorizes the 32/64-bit ones.
#include "prims/reduce.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "codec/quantizer.hpp"
#include "prims/float8.hpp"

namespace ncclz::prims {
namespace {

using codec::Bf16;
using codec::ElemType;
using codec::F16;

struct OpSum {};
struct OpProd {};
struct OpMax {};
struct OpMin {};

// Integer arithmetic through the unsigned type: wraps instead of overflowing.
template <class T, class Op>
inline T apply_int(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_same_v<Op, OpSum>) return T(U(a) + U(b));
  if constexpr (std::is_same_v<Op, OpProd>) return T(U(uint64_t(U(a)) * uint64_t(U(b))));
  if constexpr (std::is_same_v<Op, OpMax>) return a > b ? a : b;
  if constexpr (std::is_same_v<Op, OpMin>) return a < b ? a : b;
}

// Float arithmetic; max/min return a NaN operand if there is one.
template <class T, class Op>
inline T apply_float(T a, T b) {
  if constexpr (std::is_same_v<Op, OpSum>) return a + b;
  if constexpr (std::is_same_v<Op, OpProd>) return a * b;
  if constexpr (std::is_same_v<Op, OpMax>) return (a > b || a != a) ? a : b;
  if constexpr (std::is_same_v<Op, OpMin>) return (a < b || a != a) ? a : b;
}

template <class T, class Op>
void reduce_loop(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if constexpr (std::is_floating_point_v<T>) {
    for (size_t i = 0; i < n; ++i) o[i] = apply_float<T, Op>(x[i], y[i]);
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = apply_int<T, Op>(x[i], y[i]);
  }
}

// 16-bit floats: widen exactly, combine in float, round once.
template <class H, class Op>
void reduce_loop16(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<H, F16>) {
      o[i] = codec::float_to_f16(apply_float<float, Op>(codec::f16_to_float(x[i]), codec::f16_to_float(y[i])));
    } else {
      o[i] = codec::float_to_bf16(apply_float<float, Op>(codec::bf16_to_float(x[i]), codec::bf16_to_float(y[i])));
    }
  }
}

// 8-bit floats: widen exactly, combine in float (exact for sum, product, max
// and min of two of them), round once (prims/float8.hpp).
template <class F, class Op>
void reduce_loop8(void* out, const void* a, const void* b, size_t n) {
  uint8_t* o = static_cast<uint8_t*>(out);
  const uint8_t* x = static_cast<const uint8_t*>(a);
  const uint8_t* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = F::narrow(apply_float<float, Op>(F::widen(x[i]), F::widen(y[i])));
}

template <class F>
ReduceFn float8_fn(RedOp op) {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return &reduce_loop8<F, OpSum>;
    case RedOp::Prod: return &reduce_loop8<F, OpProd>;
    case RedOp::Max: return &reduce_loop8<F, OpMax>;
    case RedOp::Min: return &reduce_loop8<F, OpMin>;
  }
  return nullptr;
}

template <class F>
void divide_loop8(void* buf, size_t count, int n) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  const float d = float(n);
  for (size_t i = 0; i < count; ++i) p[i] = F::narrow(F::widen(p[i]) / d);
}

template <class Op>
ReduceFn for_type(ElemType t) {
  switch (t) {
    case ElemType::F32: return &reduce_loop<float, Op>;
    case ElemType::F64: return &reduce_loop<double, Op>;
    case ElemType::F16: return &reduce_loop16<F16, Op>;
    case ElemType::BF16: return &reduce_loop16<Bf16, Op>;
    case ElemType::I32: return &reduce_loop<int32_t, Op>;
    case ElemType::I64: return &reduce_loop<int64_t, Op>;
    case ElemType::U8: return &reduce_loop<uint8_t, Op>;
  }
  return nullptr;
}

template <class T>
void divide_loop(void* dst, const void* src, size_t count, int n) {
  T* p = static_cast<T*>(dst);
  const T* q = static_cast<const T*>(src);
  if constexpr (std::is_floating_point_v<T>) {
    const T d = T(n);
    for (size_t i = 0; i < count; ++i) p[i] = q[i] / d;
  } else {
    // In the widest type of T's signedness: T(n) would wrap for 8-bit types
    // from 128 or 256 ranks.
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    const W d = W(n);
    for (size_t i = 0; i < count; ++i) p[i] = T(W(q[i]) / d);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_loop16(void* dst, const void* src, size_t count, int n) {
  uint16_t* p = static_cast<uint16_t*>(dst);
  const uint16_t* q = static_cast<const uint16_t*>(src);
  const float d = float(n);
  for (size_t i = 0; i < count; ++i) p[i] = Narrow(Widen(q[i]) / d);
}

}  // namespace

ReduceFn reduce_fn(ElemType t, RedOp op) {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return for_type<OpSum>(t);
    case RedOp::Prod: return for_type<OpProd>(t);
    case RedOp::Max: return for_type<OpMax>(t);
    case RedOp::Min: return for_type<OpMin>(t);
  }
  return nullptr;
}

void divide_in_place(ElemType t, void* buf, size_t count, int n) { divide_into(t, buf, buf, count, n); }

namespace {

// The types that travel as another of their width (core::elem_of): max and
// min in their own order (their sum and product wrap to the wire type's bits).
template <class T>
ReduceFn own_order(bool max) {
  return max ? &reduce_loop<T, OpMax> : &reduce_loop<T, OpMin>;
}

}  // namespace

ElemType wire_type(DataType t) {
  switch (t) {
    case DataType::F32: return ElemType::F32;
    case DataType::F64: return ElemType::F64;
    case DataType::F16: return ElemType::F16;
    case DataType::BF16: return ElemType::BF16;
    case DataType::I32:
    case DataType::U32: return ElemType::I32;
    case DataType::I64:
    case DataType::U64: return ElemType::I64;
    case DataType::U8:
    case DataType::I8:
    case DataType::F8E4M3:
    case DataType::F8E5M2: break;
  }
  return ElemType::U8;
}

ReduceFn reduce_fn(DataType t, RedOp op) {
  if (t == DataType::F8E4M3) return float8_fn<F8E4M3>(op);
  if (t == DataType::F8E5M2) return float8_fn<F8E5M2>(op);
  if (op == RedOp::Max || op == RedOp::Min) {
    const bool max = op == RedOp::Max;
    if (t == DataType::I8) return own_order<int8_t>(max);
    if (t == DataType::U32) return own_order<uint32_t>(max);
    if (t == DataType::U64) return own_order<uint64_t>(max);
  }
  return reduce_fn(wire_type(t), op);
}

void divide_in_place(DataType t, void* buf, size_t count, int n) {
  switch (t) {
    case DataType::I8: return divide_loop<int8_t>(buf, buf, count, n);
    case DataType::U32: return divide_loop<uint32_t>(buf, buf, count, n);
    case DataType::U64: return divide_loop<uint64_t>(buf, buf, count, n);
    case DataType::F8E4M3: return divide_loop8<F8E4M3>(buf, count, n);
    case DataType::F8E5M2: return divide_loop8<F8E5M2>(buf, count, n);
    default: return divide_in_place(wire_type(t), buf, count, n);
  }
}

void divide_into(ElemType t, void* dst, const void* src, size_t count, int n) {
  switch (t) {
    case ElemType::F32: return divide_loop<float>(dst, src, count, n);
    case ElemType::F64: return divide_loop<double>(dst, src, count, n);
    case ElemType::I32: return divide_loop<int32_t>(dst, src, count, n);
    case ElemType::I64: return divide_loop<int64_t>(dst, src, count, n);
    case ElemType::U8: return divide_loop<uint8_t>(dst, src, count, n);
    case ElemType::F16: return divide_loop16<codec::f16_to_float, codec::float_to_f16>(dst, src, count, n);
    case ElemType::BF16: return divide_loop16<codec::bf16_to_float, codec::float_to_bf16>(dst, src, count, n);
  }
}

}  // namespace ncclz::prims
