// One element of a reduction on the device as prims::reduce_fn computes it
// on the host (cpp/src/prims/reduce.cpp), same bits for every input: floats
// in their own IEEE arithmetic, max / min keeping a NaN operand (a is the
// incoming operand, b the local one: a NaN a wins, then a NaN b), integers
// (user values and lossy codes) through the unsigned type (sums and products
// wrap), max / min as integers. Shared by the REDUCE kernels
// (slice_reduce.cu) and the persistent ring kernels' Raw steps
// (persistent_ring.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ncclz/cuda_codec.hpp"

namespace ncclz::cuda::detail {

template <class T, ReduceOp Op>
__device__ __forceinline__ T combine(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Avg) return T(U(U(a) + U(b)));
    if constexpr (Op == ReduceOp::Prod) return T(U(uint64_t(U(a)) * uint64_t(U(b))));
    if constexpr (Op == ReduceOp::Max) return a > b ? a : b;
    if constexpr (Op == ReduceOp::Min) return a < b ? a : b;
  } else {
    if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Avg) return a + b;
    if constexpr (Op == ReduceOp::Prod) return a * b;
    if constexpr (Op == ReduceOp::Max) return (a > b || a != a) ? a : b;
    if constexpr (Op == ReduceOp::Min) return (a < b || a != a) ? a : b;
  }
}

}  // namespace ncclz::cuda::detail
