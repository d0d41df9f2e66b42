// A growable, 8-byte aligned scratch buffer (the runtime's work and slot
// scratch buffers: allocated once, grown on demand, never shrunk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ncclz::core {

struct Buffer {
  std::unique_ptr<uint64_t[]> mem;
  size_t cap = 0;
  /// At least `bytes` bytes; the contents are not kept when it grows.
  void* get(size_t bytes) {
    if (bytes > cap) {
      mem.reset(new uint64_t[(bytes + 7) / 8]);
      cap = (bytes + 7) / 8 * 8;
    }
    return mem.get();
  }
};

}  // namespace ncclz::core
