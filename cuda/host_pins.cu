// prims::HostPins (cpp/src/prims/host_pins.hpp): host ranges registered with
// CUDA, looked up by the device slice codecs on every encode (a short list:
// two rings per channel and peer, searched under a mutex).
#include <cuda_runtime.h>

#include "base/log.hpp"
#include "prims/host_pins.hpp"

namespace ncclz::prims {

HostPins::~HostPins() {
  for (const Range& r : ranges_) {
    if (r.ours) cudaHostUnregister(reinterpret_cast<void*>(r.lo));
  }
}

bool HostPins::pin(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  std::lock_guard<std::mutex> lk(mu_);
  for (const Range& r : ranges_) {
    if (lo >= r.lo && hi <= r.hi) return r.dev != 0;
  }
  Range r;
  r.lo = lo;
  r.hi = hi;
  // Registered already (another communicator of this process: ranks as
  // threads share their rings)? Asked first, so that no CUDA call fails (a
  // failed call is an error to compute-sanitizer).
  cudaPointerAttributes at{};
  const cudaError_t ae = cudaPointerGetAttributes(&at, p);
  if (ae != cudaSuccess) (void)cudaGetLastError();  // not left for a later launch check to find
  const bool registered = ae == cudaSuccess && at.type == cudaMemoryTypeHost;
  if (enabled_ && !registered) {
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (e == cudaSuccess) {
      r.ours = true;
      void* d = nullptr;
      e = cudaHostGetDevicePointer(&d, p, 0);
      if (e == cudaSuccess) r.dev = reinterpret_cast<uintptr_t>(d);
    }
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
      // Part of it was (see below).
      (void)cudaGetLastError();
    } else if (e != cudaSuccess) {
      // Not fatal: the codecs copy through the driver's staging instead.
      NCCLZ_WARN(-1,
                 "device path: registering %zu bytes of slots with CUDA failed (%s); copies to and from them are "
                 "staged by the driver",
                 bytes, cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
  }
  // A range another owner registered: page-locked already, so copies are DMA;
  // its device address is not used here, since that owner unregisters it when
  // it goes.
  ranges_.push_back(r);  // tried once, whatever came of it
  return r.dev != 0;
}

void* HostPins::device_pointer(const void* p, size_t bytes) const {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  std::lock_guard<std::mutex> lk(mu_);
  for (const Range& r : ranges_) {
    if (lo >= r.lo && hi <= r.hi) return r.dev ? reinterpret_cast<void*>(r.dev + (lo - r.lo)) : nullptr;
  }
  return nullptr;
}

size_t HostPins::pinned_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const Range& r : ranges_) n += r.ours ? r.hi - r.lo : 0;
  return n;
}

}  // namespace ncclz::prims
