// Test helper shared by the GoogleTest files: ranks as threads.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace ncclz_test {

/// Runs fn(rank) on n threads; rethrows the first exception (after joining all).
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errs[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errs) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ncclz_test
