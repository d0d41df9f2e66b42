// The persistent ring kernels in the call path (CommConfig::persistent,
// NCCLZ_PERSISTENT=1; docs/GPU.md, "Persistent ring kernels in the call
// path"): an all_reduce (sum, max or min) whose buffers are device memory
// on every rank runs as ONE kernel per rank (cuda::PersistentRing) instead
// of the device path's per-slice kernels in the host's send/receive loops.
//
// Which calls: all_reduce, op sum, max or min, on the flat ring (not the
// latency algorithm, not hierarchical), every rank's CallDesc::device set,
// 2+ ranks; mode none (Raw ring on float32/float64/int32/int64 values: the
// CPU ring's schedule, slices, channel split and reduction order, so the
// exact calls' bits, NaN and signed zeros included) and lossy coded on the
// device (the device path's quantize, then the Coded ring on its
// int32/int64 codes, each slice's coder chosen on the device by the
// selector (PersistentRing::Shape::select), then its dequantize: integer
// sums, max and min of codes are exact, so the device path's bits; only the
// wire bytes differ). Everything else (avg, prod) takes its usual path. Every input of
// the choice is agreed (the configuration at creation, the exchanged
// descriptors), so every rank takes the same path.
//
// What a rank holds (made once, reused by every call; no allocation per call):
//  - at creation, where the opt-in is set (2+ ranks, 2..64 slots): one
//    connection pair per channel to its ring neighbours on the communicator's
//    own transport (transport::ring_channels; in-process, shared memory or
//    sockets), slots of the exact calls' slice size;
//  - at the first eligible call, on its device: the ring (its FIFOs,
//    scratch, reports), the group's RingAbort and, with host FIFOs, a
//    PersistentProxy driving those connections (2 x channels host threads);
//  - where the FIFOs live, chosen at that first call and agreed by every rank
//    (NCCLZ_PERSISTENT_FIFOS=auto|device|host, default auto): device FIFOs
//    where every rank is on this host and every rank's kernel can reach the
//    next rank's FIFO (ranks as threads: its device pointer, peer access
//    where it is another device; ranks as processes: its CUDA IPC handle),
//    with ONE abort word for the whole group (threads: rank 0's host-mapped
//    word; processes: a /dev/shm page every rank maps and registers), no
//    proxy threads, the connections kept only to watch the previous rank
//    (a close without a goodbye, or with an abort note, sets the abort
//    word); else, or with host, the host FIFOs and proxies above. A rank
//    takes channels x G CTAs either way, plus 2 x channels proxy threads
//    with host FIFOs or one watching thread with device FIFOs.
// Channels: CommConfig::exact_nchannels (a call uses pick_exact(bytes) of
// them); G CTAs per channel: NCCLZ_PERSISTENT_CTAS, else min(4, nslots / 2)
// (fewer where the device cannot hold nranks x channels x G CTAs at once).
//
// Failure: any failure of the ring (a kernel's abort, timeout or codec
// error, a proxy's transport error, a peer gone) aborts the communicator
// (Runtime::fail: its transport closes every connection with a note, the
// peers' proxies fail at once and set their abort words, their kernels stop)
// and throws; a communicator aborted for any other reason closes the
// proxies' connections the same way, which stops this rank's kernel. With
// device FIFOs the same closes reach the neighbours' watching threads,
// which set the group's one abort word; the call thread sets it too when
// its communicator is aborted while its kernel runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/call_desc.hpp"
#include "core/call_state.hpp"
#include "core/collective.hpp"
#include "ncclz/codec/format.hpp"
#include "ncclz/communicator.hpp"
#include "transport/persistent_proxy.hpp"

namespace ncclz::core {

struct Runtime;

/// Whether a communicator with `cfg` of `nranks` ranks makes the persistent
/// ring's connections at creation (the opt-in, 2+ ranks, 2..64 slots).
bool persistent_wanted(const CommConfig& cfg, int nranks);
/// Channels of the persistent ring: the exact calls' most (exact_nchannels).
int persistent_channels(const CommConfig& cfg);
/// Its FIFO slot bytes (and its connections'): a slice of the exact calls
/// plus the header, so that a Raw call slices as the CPU ring's exact call.
size_t persistent_slot_bytes(const CommConfig& cfg);

/// Whether this call runs on the persistent ring (above); `wire` the ring's
/// element (the user's type for none, the codes for lossy), `coded` lossy
/// (the op: cd.op).
bool persistent_eligible(const Runtime& rt, const Collective& cd, const std::vector<CallDesc>& all,
                         codec::ElemType wire, bool coded);

/// The all_reduce of `count` wire elements from src to dst (device memory;
/// in place allowed) on the runtime's persistent ring (made at its first
/// call) over `nch` channels; `raw_esize`: the user's element size (the
/// stats' raw bytes). Fills call.ch (raw and wire bytes), schedule_s,
/// slice_bytes and persistent. A failure aborts the communicator and throws
/// (Aborted where it was aborted already, else Error with the ring's report).
void run_persistent(Runtime& rt, const Collective& cd, codec::ElemType wire, bool coded, const void* src, void* dst,
                    size_t count, int nch, size_t raw_esize, CallState& call);

/// One rank's persistent ring with its abort word and proxy (defined where
/// cuda/ is built, core/persistent_ring_work.cpp; elsewhere create() throws).
class PersistentWork {
 public:
  /// On CUDA device `device`, over `links` (one per channel, from creation).
  /// Collective (every rank at its first eligible call): picks where the
  /// FIFOs live (below), agreed over channel 0's links. one_host: every rank
  /// shares this host (the bootstrap's host ids); comm_abort: the
  /// communicator's abort flag (a device-FIFO call sets the abort word when
  /// it is set).
  static std::unique_ptr<PersistentWork> create(int rank, int nranks, int device, const CommConfig& cfg,
                                                std::vector<transport::ProxyChannel> links, bool one_host,
                                                std::shared_ptr<transport::AbortFlag> comm_abort);
  virtual ~PersistentWork() = default;
  /// Runs one call (see run_persistent; op Sum, Max or Min; coded: the
  /// device selector chooses each slice's coder); throws Error with what
  /// failed (the kernel's report, the proxy's error). expect_recv[c]: the
  /// slices channel c will have received, sent[c] sent, after the call
  /// (since creation).
  virtual void all_reduce(codec::ElemType wire, bool coded, RedOp op, const void* src, void* dst, size_t count, int nch,
                          const std::vector<uint64_t>& expect_recv, const std::vector<uint64_t>& sent) = 0;
  /// Bytes of slices sent so far on channel c.
  virtual uint64_t sent_bytes(int c) const = 0;
  /// Elements per slice of an element of `esize` bytes.
  virtual size_t slice_elems(size_t esize) const = 0;
  virtual int channels() const = 0;
  /// Whether the FIFOs are device memory written by the kernels themselves
  /// (else host memory bridged by proxy threads): CallStats::persistent_device_fifos.
  virtual bool device_fifos() const = 0;
};

/// What rank `rank` of `nranks` sends and receives on one channel's ring
/// all_reduce of `count` elements (algorithms/ring.cpp's loops, chunks of
/// `seg` elements, slices of `slice` elements): elements sent, slices sent
/// and received (a verb of n elements is ceil(n / slice) slices).
struct RingTraffic {
  uint64_t elems_sent = 0, slices_sent = 0, slices_received = 0;
};
RingTraffic ring_traffic(size_t count, int nranks, int rank, size_t seg, size_t slice);

}  // namespace ncclz::core
