// The bookkeeping of one call in flight: its timeout, the counters of the
// channels it runs on, what it ran with, and the CallStats it reports.
#pragma once

#include <chrono>
#include <vector>

#include "ncclz/communicator.hpp"
#include "prims/prims.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

using Clock = transport::Clock;

inline double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct CallState {
  Clock::time_point t0 = Clock::now();
  /// The longest any wait of the call may go without progress (NCCLZ_TIMEOUT):
  /// every wait's deadline is its start plus this (transport.hpp).
  Clock::duration timeout{};
  std::vector<prims::ChannelStats> ch;  ///< per channel (send/recv: the one link)
  /// Hierarchical calls: per channel, the intra-host links (ch: the inter-host ones).
  std::vector<prims::ChannelStats> local_ch;
  Algorithm algorithm = Algorithm::Ring;            ///< the algorithm the call ran
  double quantize_s = 0;                            ///< API-layer passes: statistics, quantize, dequantize
  double bound = 0;                                 ///< the bound the result meets (CallStats::error_bound)
  double requested = 0;                             ///< E asked for (CallStats::requested_bound)
  bool fallback = false;                            ///< a lossy call that ran exactly
  bool on_device = false;                           ///< coded on the device (CallStats::on_device)
  bool persistent = false;                          ///< on the persistent ring kernels (CallStats::persistent)
  bool persistent_device_fifos = false;             ///< ... with device FIFOs (CallStats::persistent_device_fifos)
  Compression::Mode ran = Compression::Mode::None;  ///< the mode the call ran with
  bool lightened = false;                           ///< rank 0's lighter proposal was taken
  double rans_margin = -1;  ///< rank 0's codec effort (EncodeOptions::rans_margin; < 0: default)
  size_t slice_bytes = 0;   ///< the data bytes the call's slices were sized for (CallStats::slice_bytes)
  double schedule_s = 0;    ///< wall time of the channels' loops (CallStats::schedule_s)
  CallStats* out = nullptr;

  /// A deadline for one wait starting now.
  Clock::time_point deadline() const { return Clock::now() + timeout; }

  /// Writes the CallStats (if asked for): the channels' counters summed.
  void finish() {
    if (!out) return;
    prims::ChannelStats s, local;
    for (const auto& c : ch) s.add(c);
    for (const auto& c : local_ch) local.add(c);
    CallStats r;
    r.raw_bytes = s.raw_bytes;
    r.wire_bytes = s.wire_bytes;
    r.ratio = s.wire_bytes ? double(s.raw_bytes) / double(s.wire_bytes) : 1.0;
    r.encode_s = s.encode_s + local.encode_s;
    r.decode_s = s.decode_s + local.decode_s;
    r.quantize_s = quantize_s + s.stage_s + local.stage_s;
    r.wait_s = s.wait_s + local.wait_s;
    r.wall_s = seconds(t0, Clock::now());
    r.error_bound = bound;
    r.requested_bound = requested;
    r.exact_fallback = fallback;
    r.on_device = on_device;
    r.persistent = persistent;
    r.persistent_device_fifos = persistent_device_fifos;
    r.ran_mode = ran;
    r.lightened = lightened;
    r.algorithm = algorithm;
    r.local_bytes = local.wire_bytes;
    r.channels = int(ch.size());
    r.slice_bytes = slice_bytes;
    r.schedule_s = schedule_s;
    *out = r;
  }
};

}  // namespace ncclz::core
