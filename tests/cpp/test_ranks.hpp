// Test helper shared by the GoogleTest files: a world of communicators whose
// ranks are threads of the test (in-process transport).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ncclz/communicator.hpp"
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

}  // namespace ncclz_test
