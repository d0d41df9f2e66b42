// What the call routine (core/call.hpp) does for a call whose buffers are
// CUDA device memory (ncclz::set_buffer_device): which calls may, and the
// host copies of the buffers for every path that does not run on the device
// (core/device_work.hpp says which runs there).
#pragma once

#include <string>
#include <vector>

#include "core/call_desc.hpp"
#include "core/channels.hpp"
#include "core/collective.hpp"
#include "core/runtime.hpp"

namespace ncclz::core {

/// "" where `cd` may run with its buffers (host memory, or device memory of
/// Collective::device: a build with CUDA and that device there, whose
/// DeviceWork it makes), else why not (an argument error: the call fails on
/// every rank). Every collective and send / recv take device buffers.
std::string check_device_call(Runtime& rt, const Collective& cd);

/// Whether any rank of the call codes on a device (CallDesc::device): every
/// rank then writes what a device decodes (EncodeOptions::allow_rans = false).
bool any_device(const std::vector<CallDesc>& all);

/// Whether a device rank codes an exact call's wire `w` on the device: Raw
/// slices (none: any type), and lossless F32 / BF16 / F16 with the codec
/// Auto (allow_rans = false), FloatHuff or Raw: FloatHuff slices or Raw,
/// the device slice codec's coded floats. Anything else (other types
/// lossless, a forced FloatExp / Sparse / rANS codec) runs on host copies.
bool device_codes_exact(const Wire& w);

/// The device's work object of the runtime (made on first use; a device
/// other than the first call's is an InvalidArgument: one device per
/// communicator, as NCCL's).
DeviceWork& device_work(Runtime& rt, int device);

/// Host copies of a device call's buffers, for the paths that run on the
/// host: begin() copies the input to host memory and points the Collective
/// at the copies (the output too); end() copies the output back to the
/// device. A host call, or one that never began, does nothing.
class HostStaging {
 public:
  HostStaging(Runtime& rt, Collective& cd, DataType t) : rt_(rt), cd_(cd), t_(t) {}
  void begin();
  void end();
  /// Whether the call runs on host copies (begin() was called for a device call).
  bool active() const { return active_; }

 private:
  Runtime& rt_;
  Collective& cd_;
  DataType t_;
  bool active_ = false;
  void* dev_out_ = nullptr;  ///< the device output, while the call runs on host copies
};

}  // namespace ncclz::core
