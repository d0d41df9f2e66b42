// The device side of calls whose buffers are CUDA device memory (issue 15's
// first device path): what the call routine does on the GPU instead of the
// host for such a call, one object per communicator (Runtime::device_work,
// made by the first device call).
//
// A device call (ncclz::set_buffer_device, the Python layer for CUDA arrays)
// of a collective in a lossy mode runs like this on a rank whose buffers are
// on the device:
//
//   describe  the input's statistics (finite min / max / max|x|, non-finite)
//             by a reduction kernel, read back: the descriptor's, as the
//             host scan's (the same numbers: min and max are exact)
//   prepare   the plan from every rank's statistics (the host's code), then
//             the whole input quantized on the device into device codes
//             (the CPU's quantize_one per element: the same codes and
//             outliers), the outlier count read back with the wait the
//             channels' encodes need anyway. The plan rules outliers out, so
//             there is no round: a rank whose count is not 0 raises and
//             aborts the communicator before its codes leave it
//             (core::LossyCall::settle_outliers); only where a rank set
//             NCCLZ_PIPELINE_QUANTIZE=0 do the ranks agree on the counts in
//             a second round (the exact path after outliers)
//   run       the schedule on the device codes (the rings' or the
//             point-to-point links' lanes): each channel's (lane's) prims
//             code slices with a prims::DeviceSliceCodec (quantized codes
//             never leave the GPU; only slice bytes cross PCIe to and from
//             the transport's slots) and a device scratch slice
//   finish    the output codes dequantized on the device into the output,
//             and a rank's own block (all_to_all, gather, scatter) copied on
//             the device, exact, as on the host
//
// Everything else a device call may take (none or lossless, a small call
// rank 0 runs exact, the exact fallback after the outlier round, the hierarchical
// algorithm, one rank) runs on host copies of the buffers (HostStaging,
// below): correct everywhere, not fast.
//
// Memory: the codes, the channels' scratch slices and the slice codecs are
// device memory this object owns, grown on demand, never per call once a
// size was seen. The transport's slots a device call uses are registered
// with CUDA once (pin_slots, prims::HostPins: DMA copies, and encodes write
// slices into them from the device) and unregistered when this object goes
// (before the links: core::Runtime's member order); NCCLZ_DEVICE_PIN=0 leaves
// them pageable. Streams: each slice codec has its own stream, this object
// one more; every method returns after its work finished (the call is
// synchronous, as every ncclz call): the caller orders its own work before
// the call (the Python layer synchronises the framework's current stream).
//
// Defined in cuda/device_work.cu where cuda/ is built; elsewhere create()
// throws (core/cuda_fallback.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "bound/error_budget.hpp"
#include "codec/slice.hpp"
#include "ncclz/codec/format.hpp"
#include "prims/device_slices.hpp"
#include "prims/prims.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

class DeviceWork {
 public:
  /// On CUDA device `device` (the calling thread's current device is set to
  /// it for the object's calls). Throws Error (built without CUDA, no such
  /// device, a CUDA failure: with the CUDA error).
  static std::unique_ptr<DeviceWork> create(int device);
  /// The slice codec and scratch entry of send / recv (channels and lanes
  /// take 0 .. nchannels - 1; calls do not overlap on a communicator).
  static constexpr int kPointToPoint = 63;
  /// Channel c's second ring (a hierarchical call's inter-host prims; the
  /// intra-host ones take entry c) takes entry kSecondRing + c. Every entry
  /// of channel c codes on channel c's stream, so its two rings' work is in
  /// order (entry kPointToPoint has a stream of its own).
  static constexpr int kSecondRing = 64;
  virtual ~DeviceWork() = default;

  virtual int device() const = 0;
  /// Statistics of n values of type t (F32, F64, F16, BF16) at d_x.
  virtual bound::DataStats scan(codec::ElemType t, const void* d_x, size_t n) = 0;
  /// Quantizes n values of type t at d_x into codes (I32, or I64 when wide) at
  /// d_q on the grid of half step eb, checked against check_eb, |code| <=
  /// limit (core::quantize_buf's rule); returns the number of outliers.
  virtual size_t quantize(codec::ElemType t, double eb, double check_eb, int64_t limit, bool wide, const void* d_x,
                          size_t n, void* d_q, bool exact_check = false) = 0;
  /// out[i] = T(q[i] * step), n codes (I32, or I64 when wide) into values of type t.
  virtual void dequantize(codec::ElemType t, bool wide, const void* d_q, size_t n, double step, void* d_out) = 0;
  /// quantize() and dequantize() on entry c's channel's stream, in order with
  /// its slice codecs' work, from the channel's own thread (channels at the
  /// same time): a hierarchical lossy reduction's host sums
  /// (algorithms::HostSumCodes). Each waits for its work.
  virtual size_t quantize_on(int c, codec::ElemType t, double eb, double check_eb, int64_t limit, bool wide,
                             const void* d_x, size_t n, void* d_q, bool exact_check) = 0;
  virtual void dequantize_on(int c, codec::ElemType t, bool wide, const void* d_q, size_t n, double step,
                             void* d_out) = 0;
  /// Device buffer i (0, 1, 2) of at least `bytes` bytes (contents not kept when it grows): 0 and 1
  /// for codes and the hierarchical calls' work, 2 for an exact float16 average's divided input
  /// (core/call.cpp, premultiply).
  virtual void* codes(int i, size_t bytes) = 0;
  /// Copies between host and device memory.
  virtual void to_host(void* h, const void* d, size_t bytes) = 0;
  virtual void to_device(void* d, const void* h, size_t bytes) = 0;
  /// Copies bytes between device buffers.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// d[i] = d[i] / n for `count` values of type t (prims::divide_in_place's
  /// arithmetic: the avg of an uncompressed call).
  virtual void divide(codec::ElemType t, void* d, size_t count, int n) = 0;
  /// Entry c's slice codec for prims moving `a.type` in `a.mode` with
  /// a.enc (the slice codec is made again when these or the slot size
  /// change; on the entry's channel's stream), and its device scratch slice
  /// (slice_elems elements). Entries: channels 0 .. kSecondRing - 1 (and
  /// kPointToPoint), kSecondRing + c.
  virtual prims::DeviceSlices* slices(int c, const prims::PrimsArgs& a, size_t slot_bytes, size_t slice_elems) = 0;
  virtual void* scratch(int c, size_t bytes) = 0;
  /// Registers a connection's slots with CUDA (once per range; best effort:
  /// where it fails the copies stay staged by the driver). Thread-safe.
  virtual void pin_slots(const transport::SlotMemory& m) = 0;
  /// Bytes of slots registered so far.
  virtual size_t pinned_bytes() const = 0;
};

/// The calling thread's buffer device for the calls it makes (-1: host
/// memory, the default). Set by ncclz::set_buffer_device.
int buffer_device();

}  // namespace ncclz::core
