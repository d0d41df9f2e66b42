// Per-thread scratch buffers for the coders (the send loops call them per
// slice, so their buffers are kept and grown, never freed between calls).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ncclz::codec {

/// At least n T's for one use on this thread; Tag is a type of the caller's
/// (from its own anonymous namespace), so that different uses never share a
/// buffer. Grows by half again at least, and keeps its contents' capacity.
template <class T, class Tag>
T* thread_buffer(size_t n) {
  thread_local std::vector<T> v;
  if (v.size() < n) v.resize(std::max(n, v.size() + v.size() / 2));
  return v.data();
}

}  // namespace ncclz::codec
