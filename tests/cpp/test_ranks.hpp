// Test helper shared by the GoogleTest files: a world of communicators whose
// ranks are threads of the test (in-process transport).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "ncclz/unique_id.hpp"
#include "test_threads.hpp"

namespace ncclz_test {

/// n ranks over the in-process transport. Small slots (1 KiB, sparse slices
/// 4 KiB), so that messages take many slices; nchannels > 0 fixes the channel
/// count; tweak(rank, cfg) adjusts a rank's configuration last.
struct Ranks {
  std::vector<std::unique_ptr<ncclz::Communicator>> comms;
  explicit Ranks(int n, const std::function<void(int, ncclz::CommConfig&)>& tweak = nullptr, int nchannels = 0) {
    const ncclz::UniqueId id = ncclz::make_unique_id("127.0.0.1", 0);
    comms.resize(size_t(n));
    run_threads(n, [&](int r) {
      ncclz::CommConfig cfg;
      cfg.transport = "inproc";
      cfg.slot_bytes = 1024;
      cfg.sparse_slice_bytes = 4096;
      if (nchannels > 0) cfg.nchannels = nchannels;
      cfg.timeout_s = 60;
      if (tweak) tweak(r, cfg);
      comms[size_t(r)] = ncclz::Communicator::create(id, r, n, cfg);
    });
  }
  int size() const { return int(comms.size()); }
  /// fn(rank, its communicator) on every rank's thread.
  void run(const std::function<void(int, ncclz::Communicator&)>& fn) {
    run_threads(size(), [&](int r) { fn(r, *comms[size_t(r)]); });
  }
};

/// Creates n communicators over the in-process transport (tweak(rank, cfg)
/// sets what differs) where creation is expected to fail: each rank's
/// InvalidArgument message ("" where that rank's creation succeeded).
inline std::vector<std::string> creation_errors(int n, const std::function<void(int, ncclz::CommConfig&)>& tweak) {
  const ncclz::UniqueId id = ncclz::make_unique_id("127.0.0.1", 0);
  std::vector<std::string> errs(static_cast<size_t>(n));
  run_threads(n, [&](int r) {
    try {
      ncclz::CommConfig cfg;
      cfg.transport = "inproc";
      cfg.timeout_s = 20;
      tweak(r, cfg);
      ncclz::Communicator::create(id, r, n, cfg);
    } catch (const ncclz::InvalidArgument& e) {
      errs[size_t(r)] = e.what();
    }
  });
  return errs;
}

}  // namespace ncclz_test
