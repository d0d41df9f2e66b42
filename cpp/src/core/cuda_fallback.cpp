// Host-only stand-ins for the CUDA support functions when cuda/ is not built.
#include "ncclz/cuda_support.hpp"

#ifndef NCCLZ_WITH_CUDA
namespace ncclz::cuda {
bool built_with_cuda() { return false; }
int device_count() { return 0; }
}  // namespace ncclz::cuda
#endif
