// What the build and the machine offer for the GPU path. Safe to call on a
// machine with no GPU or driver: nothing here initialises CUDA at load time.
#pragma once

#include <cstddef>

namespace ncclz::cuda {

/// True when the library was built with the CUDA code in cuda/.
bool built_with_cuda();

/// Number of visible CUDA devices (0 without a driver or GPU, or without CUDA support).
int device_count();

/// Copies bytes between two buffers of the current CUDA device (synchronous);
/// 0, or the cudaError_t (-1 without CUDA support).
int copy_device(void* dst, const void* src, size_t bytes);

}  // namespace ncclz::cuda
