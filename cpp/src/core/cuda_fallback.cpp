// Host-only stand-ins for the CUDA support functions and the device path's
// work object when cuda/ is not built.
#include "core/device_work.hpp"
#include "core/persistent_call.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"

#ifndef NCCLZ_WITH_CUDA
namespace ncclz::cuda {
bool built_with_cuda() { return false; }
int device_count() { return 0; }
int copy_device(void*, const void*, size_t) { return -1; }
}  // namespace ncclz::cuda

namespace ncclz::core {
std::unique_ptr<DeviceWork> DeviceWork::create(int device) {
  throw Error("ncclz: buffers on CUDA device " + std::to_string(device) + ", and this ncclz was built without CUDA");
}
std::unique_ptr<PersistentWork> PersistentWork::create(int, int, int device, const CommConfig&,
                                                       std::vector<transport::ProxyChannel>, bool,
                                                       std::shared_ptr<transport::AbortFlag>) {
  throw Error("ncclz: the persistent ring kernels on CUDA device " + std::to_string(device) +
              ", and this ncclz was built without CUDA");
}
}  // namespace ncclz::core
#endif
