// Where the persistent ring's FIFOs live, and how the ranks agree on it
// (core/persistent_call.hpp; the choice itself is made in
// core/persistent_ring_work.cpp). Host-only pieces, no CUDA:
//  - the setting (NCCLZ_PERSISTENT_FIFOS=auto|device|host);
//  - ring_allgather: a fixed-size record of every rank, passed around the
//    ring over channel 0's connections before the proxies or the watching
//    thread take them (N - 1 hops of one slot each);
//  - AbortPage: one page of /dev/shm that every rank's process maps, the
//    group's abort word at its start (ranks as processes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/persistent_proxy.hpp"

namespace ncclz::core {

/// NCCLZ_PERSISTENT_FIFOS: auto (device FIFOs where every rank can use them,
/// else host ones), device (device FIFOs or an error on every rank), host.
/// Each rank reads its own; any rank's host makes every rank's host, any
/// rank's device makes the call fail where device FIFOs cannot be made.
enum class FifoChoice : int32_t { Auto = 0, Device = 1, Host = 2 };
FifoChoice fifo_choice_from_env();
const char* fifo_choice_name(FifoChoice c);

/// Every rank's `bytes`-byte record (rank r's at r * bytes of the result):
/// rank r sends its own to r + 1, then forwards what it received, N - 1
/// times. Collective over the ring; the connections' slots must hold a
/// record. Throws what the transport throws (Timeout at the deadline).
std::vector<uint8_t> ring_allgather(transport::ProxyChannel& ch, const void* mine, size_t bytes, int rank, int nranks,
                                    transport::Clock::time_point deadline);

/// One page of shared memory (/dev/shm) mapped in this process.
class AbortPage {
 public:
  /// Creates a new segment with a name of its own (rank 0; name()), zeroed.
  /// Throws Error where the system refuses.
  static AbortPage create();
  /// Maps the segment another process created.
  static AbortPage open(const std::string& name);
  AbortPage() = default;
  AbortPage(AbortPage&& o) noexcept { *this = std::move(o); }
  AbortPage& operator=(AbortPage&& o) noexcept;
  ~AbortPage();
  /// Removes the name (the creator, once every rank has mapped it; the
  /// mappings stay).
  void unlink();
  void* data() const { return map_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  void drop();  // unmaps (and unlinks where still linked)
  void* map_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;  // this process created it and has not unlinked it
};

}  // namespace ncclz::core
