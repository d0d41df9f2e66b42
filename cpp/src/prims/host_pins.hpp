// Host memory registered with CUDA for a device rank's slice codecs: the
// transport's slots (transport::SlotMemory), page-locked and mapped once per
// communicator, so that
//   - every copy between a slot and device memory is DMA from page-locked
//     memory (an unregistered slot's copy is staged by the driver through a
//     bounce buffer, with a CPU copy and a synchronous wait), and
//   - a coded encode writes the slice straight into the slot from the device
//     (cuda::copy_sized_async: the size is known on the device only), one
//     stream synchronisation per encode instead of two.
// Registration is best effort: where it fails (a CUDA error, NCCLZ_DEVICE_PIN=0)
// the range stays ordinary memory and the codecs take the copies that work on
// any host memory. Every range is unregistered when the object goes, which must
// be before the memory is freed (core::Runtime declares the transports' links
// before its DeviceWork, which owns this object).
//
// Defined in cuda/host_pins.cu (built with CUDA or in the emulator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ncclz::prims {

class HostPins {
 public:
  /// `enabled` false: pin() registers nothing (NCCLZ_DEVICE_PIN=0).
  explicit HostPins(bool enabled) : enabled_(enabled) {}
  ~HostPins();
  HostPins(const HostPins&) = delete;
  HostPins& operator=(const HostPins&) = delete;

  /// Registers [p, p + bytes) (page-locked, mapped, portable) unless a range
  /// holding it is registered or was tried. Thread-safe. Returns whether it is
  /// registered now.
  bool pin(void* p, size_t bytes);
  /// The device address of host bytes [p, p + bytes) where they lie inside one
  /// registered range, else nullptr. Thread-safe.
  void* device_pointer(const void* p, size_t bytes) const;
  /// Bytes registered (for logs and tests).
  size_t pinned_bytes() const;

 private:
  struct Range {
    uintptr_t lo = 0, hi = 0;  ///< [lo, hi) host addresses
    uintptr_t dev = 0;         ///< device address of lo (0: registration failed, not mapped)
    bool ours = false;         ///< registered by this object: unregistered by it
  };
  bool enabled_;
  mutable std::mutex mu_;
  std::vector<Range> ranges_;
};

}  // namespace ncclz::prims
