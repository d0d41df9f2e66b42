// Persistent collective kernels (issue 21): ONE kernel per call and rank
// runs the whole ring all_reduce on the device, a few CTAs per channel, the
// send loop encoding each slice straight into the next rank's FIFO slot with
// the CTA slice coder (cuda/cta_slice.cuh) and the receive loop waiting on
// the slot's flags, decoding, reducing and re-encoding. Implemented in
// cuda/persistent_ring.cu (the schedule and the handshake are written at its
// top; the FIFO's bytes at FifoLayout below); built only with CUDA
// (NCCLZ_WITH_CUDA). Declared here without CUDA headers. docs/GPU.md,
// "Persistent ring kernels", says how ranks sharing a GPU make progress.
//
// Where the FIFOs live (Options::fifo_in_host_memory):
//  - device memory (the default): the kernel writes straight into the next
//    rank's FIFO (connect()). One device allocation per rank (all its
//    channels), its layout fixed by (channels, slots, slot bytes) alone and
//    holding no pointer: ranks as threads of one process pass its device
//    pointer (peer access enabled where the next rank is on another device),
//    ranks as processes on one host its CUDA IPC handle (export_fifo,
//    open_fifo).
//  - page-locked host memory mapped for the device: the rank's receive FIFO
//    and an outgoing one (its "outbox", the same FifoLayout), for ranks that
//    share no memory (other hosts): the kernel posts into its outbox and a
//    host proxy (transport/persistent_proxy.hpp) carries each slice over an
//    ncclz transport connection into the next rank's receive FIFO.
//
// Schedule and bytes: the CPU ring's (algorithms/ring.cpp, ring_all_reduce:
// loops of N chunks of at most slots/2 slices, chunk r-1 sent first; the
// allgather phase forwards slice bytes unchanged), with the CPU's slicing
// (prims::slice_elems_for(slot_bytes, element size) elements a slice) and,
// in Coded mode, the CPU's slices: encode_slice with the Block codec and the
// predictor forced (the Raw fallback where Block is larger), or, with
// Shape::select, with codec::fast_select_options() (the CPU's selector
// among Block with None / Delta1 / Delta2 and Raw, run per slice on the
// device by the sending CTA: cuda/cta_select.cuh). So the results are the
// CPU ring's bit for bit (its reduction: Shape::op), identical on every
// rank, and independent of how many CTAs share a channel; every slot holds
// the bytes the CPU ring's would (a persistent rank stays byte-compatible
// with CPU ranks). Two ranks of codes: the CPU exchanges the ranks' own
// slices instead (algorithms/ring.cpp, pair_all_reduce) while the kernel
// runs the ring: the same results, other slices.
//
// Conventions as DeviceCodec's (ncclz/cuda_codec.hpp): device pointers d_*,
// asynchronous on the ring's stream, 0 / a cudaError_t / minus a
// codec::Status for arguments refused on the host; no allocation per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ncclz/codec/format.hpp"
#include "ncclz/cuda_codec.hpp"

namespace ncclz::cuda {

/// The FIFO of one channel (device memory owned by the receiver; channel c of
/// a ring at c * channel_bytes). Slice i of the channel's stream (the i-th
/// slice the sender sends on it, counted over the ring's calls since the last
/// reset) goes to slot i % K; a slot's two flags only grow:
///   posted[k]   = i + 1 once slice i is in slot k and sizes[k] holds its bytes (the sender writes)
///   released[k] = i + 1 once the receiver is done with slice i (the receiver writes)
/// so the sender of slice i waits for released[i % K] >= i + 1 - K (slice
/// i - K gone; nothing to wait for while i < K), the receiver for posted[i %
/// K] >= i + 1. Per-slot flags, not one head and tail counter, so that the
/// CTAs sharing a channel post and release their slices out of order.
/// Nothing in it is a pointer (a later version maps it into another process).
/// In host memory (Options::fifo_in_host_memory) the same bytes; the host
/// proxy then plays the other side of each FIFO: it writes released[] of the
/// outbox and sizes[], the slot and posted[] of the receive FIFO, in the
/// order above (a slot's bytes and size before its posted flag).
struct FifoLayout {
  static constexpr int kMaxSlots = 64;
  static constexpr size_t kPostedAt = 0;      ///< u64 posted[kMaxSlots]
  static constexpr size_t kReleasedAt = 512;  ///< u64 released[kMaxSlots] (its own cache lines)
  static constexpr size_t kSizesAt = 1024;    ///< u64 sizes[kMaxSlots]: bytes of the slice in each slot
  static constexpr size_t kSlotsAt = 1536;    ///< then K slots of slot_stride bytes
  static constexpr size_t slot_stride(size_t slot_bytes) { return (slot_bytes + 15) & ~size_t(15); }
  static constexpr size_t channel_bytes(size_t slot_bytes, int slots) {
    return kSlotsAt + size_t(slots) * slot_stride(slot_bytes);
  }
};

/// How a persistent call ended (RingReport::error).
enum class RingError : int {
  None = 0,
  Aborted = 1,   ///< the group's abort word was set (by the host, or by a failing peer kernel)
  TimedOut = 2,  ///< a wait made no progress for Options::timeout_ns
  Codec = 3,     ///< a slice did not decode (or encode): codec_status says why
};

/// What one CTA of a call reports (page-locked host memory the
/// kernel writes; read after synchronize()).
struct RingReport {
  int error = 0;         ///< RingError
  int codec_status = 0;  ///< RingError::Codec: the codec::Status
  int peer = -1;         ///< the rank waited on (Aborted, TimedOut) or whose slice failed (Codec)
  uint32_t step = 0;     ///< the channel's ring step (0-based, counting every slice's send/receive) it stopped at
};

/// The abort word of a group of ranks: page-locked host memory mapped for the
/// device. The host sets it to stop every waiting kernel of the group; a
/// kernel that fails sets it so that its peers stop too instead of waiting
/// for their deadline. Clear it (and reset() every ring) before the next call.
class RingAbort {
 public:
  /// device: set on the calling thread first (-1: its current one).
  explicit RingAbort(int device = -1);
  /// A word in memory this object does not own: `bytes` bytes of a page-aligned
  /// host mapping at `map` (a /dev/shm segment that every rank's process maps,
  /// so that one word stops the kernels of all of them), the word at its
  /// start, registered with CUDA (cudaHostRegister, mapped) here and
  /// unregistered on destruction; the mapping itself stays the caller's.
  RingAbort(void* map, size_t bytes, int device);
  ~RingAbort();
  RingAbort(const RingAbort&) = delete;
  RingAbort& operator=(const RingAbort&) = delete;
  int status() const { return status_; }  ///< 0, or the cudaError_t of the allocation
  void set();
  void clear();
  bool is_set() const;
  int* device_ptr() const { return dev_; }  ///< the word as the kernels see it
  /// The word as host threads see it (a proxy: PersistentProxy::Fifos):
  /// read and written with atomic builtins, nonzero = set.
  int* host_ptr() const { return host_; }

 private:
  int* host_ = nullptr;
  int* dev_ = nullptr;
  int status_ = 0;
  bool registered_ = false;  // the second form: unregister, do not free
};

/// One rank's side of a ring of persistent kernels.
class PersistentRing {
 public:
  struct Options {
    int rank = 0;
    int nranks = 1;
    int channels = 1;  ///< channel c reduces the c-th of `channels` contiguous parts as a ring of its own
    /// CTAs sharing a channel's ring (1..32): CTA g of G runs the channel's
    /// ring steps g, g + G, g + 2G, ... (each step one slice), so a channel
    /// keeps up to G slices in flight; the results do not depend on G. The
    /// kernel has channels x G CTAs.
    int ctas_per_channel = 1;
    /// The wire element: Coded mode: I32 or I64 codes (wrapping sums); Raw
    /// mode: F32, F64, I32 or I64 values summed in their type (uncompressed
    /// calls; the slot bytes are the values).
    codec::ElemType type = codec::ElemType::I32;
    bool coded = true;
    codec::Predictor predictor = codec::Predictor::None;  ///< Coded: None, Delta1 or Delta2
    /// Coded: each slice's codec and predictor chosen on the device (Shape::select) instead of `predictor`.
    bool select = false;
    ReduceOp op = ReduceOp::Sum;              ///< Sum, Max or Min (Shape::op)
    size_t slot_bytes = size_t(1) << 20;      ///< per FIFO slot (a slice and its header)
    int slots = 4;                            ///< per FIFO (2..64); chunks of slots/2 slices
    uint64_t timeout_ns = 30'000'000'000ull;  ///< a wait without progress fails after this
    /// For A/B timing only: the first version's per-slice code (Raw values
    /// moved one 4- or 8-byte element per thread at a time, system-scope
    /// fences, a 100 ns sleep and an abort-word read on every poll, a
    /// separate wait for the incoming and the outgoing slot). Same results.
    bool first_version_slices = false;
    /// The receive FIFO and an outbox (both FifoLayout, channels x
    /// channel_bytes) in page-locked host memory mapped for the device,
    /// instead of device memory: the kernel sends into its outbox, a
    /// PersistentProxy (transport/persistent_proxy.hpp) drains it into a
    /// transport connection and fills the receive FIFO from the previous
    /// rank's; connect() is not used. The kernel's flag fences are then
    /// system-scope (cuda/persistent_ring.cu, "Handshake"). Same bytes.
    bool fifo_in_host_memory = false;
    /// Device FIFOs that a kernel outside this GPU's scope writes or reads
    /// (the next rank's FIFO on another device, or this one's written by
    /// another device): system-scope flag fences, as for host FIFOs
    /// (cuda/persistent_ring.cu, "Handshake"). Same bytes.
    bool system_fences = false;
    /// The CUDA device of the ring (-1: the constructing thread's current
    /// one): set on the calling thread before each of the ring's CUDA calls,
    /// so any thread may drive it (the communicator's call thread).
    int device = -1;
  };

  /// What one call runs, where it differs from the Options' type, mode,
  /// predictor, selection, op and channel count (all_reduce_async's second form): one ring
  /// (its FIFOs, streams and proxies) serves calls of every wire element and
  /// mode. Slices are slice_elems_for(slot_bytes, the call's element size)
  /// elements; a channel count below Options::channels leaves the other
  /// channels' FIFOs and stream positions as they are (every rank must use
  /// the same count in the same call).
  struct Shape {
    codec::ElemType type = codec::ElemType::I32;
    bool coded = true;
    codec::Predictor predictor = codec::Predictor::None;
    int channels = 1;  ///< 1..Options::channels
    /// Coded mode: the sending CTA chooses each slice's codec and predictor
    /// (`predictor` unused) by the CPU selector's rule with
    /// codec::fast_select_options() (cpp/src/codec/select_rule.hpp: Block
    /// with None, Delta1 or Delta2, or Raw; no Rans, no Sparse, no Lorenzo),
    /// from its sample of the slice (cuda/cta_select.cuh: one extra read of
    /// a few of its blocks), so each slot holds encode_slice's bytes with
    /// those options; a reduction's result keeps the incoming slice's
    /// predictor where that slice is not Raw (options.predictor = it: Block
    /// with it or Raw), as the CPU ring's SliceCodec does. Raw mode: no
    /// effect (the slot bytes are the values).
    bool select = false;
    /// The reduction, prims::reduce_fn(type, op)'s bits: Sum (codes and
    /// integers wrap), Max or Min (floats: a NaN operand wins, as
    /// reduce_values_async documents; codes: integer max / min, which for a
    /// lossy max / min is the code of the largest / smallest value). Avg and
    /// Prod: Unsupported.
    ReduceOp op = ReduceOp::Sum;
  };

  /// status() of a ring whose shape cannot run: the group's CTAs (nranks x
  /// channels x ctas_per_channel, every rank on this device) exceed what the
  /// device holds at once (the kernel's occupancy per SM x the SMs). They
  /// wait on each other, so all must be resident: such a call would hang.
  static constexpr int kNotResident = 2000;

  /// Checks that the group's CTAs can all be resident (else status()
  /// kNotResident), then allocates this rank's FIFOs (device memory, zeroed),
  /// its scratch and its reports. stream: a cudaStream_t, or nullptr for a
  /// stream of its own (non-blocking; ranks as threads must not share one).
  /// abort: the group's.
  PersistentRing(const Options& o, RingAbort* abort, void* stream = nullptr);
  ~PersistentRing();
  PersistentRing(const PersistentRing&) = delete;
  PersistentRing& operator=(const PersistentRing&) = delete;

  /// 0, or the error with which construction failed (minus a codec::Status
  /// for options it refuses; every call then returns it).
  int status() const { return status_; }
  /// A status, an all_reduce_async or synchronize result in words (the
  /// CUDA error's string, the codec status, the RingError, kNotResident).
  static std::string describe(int rc);
  /// This rank's receive FIFOs as the device sees them: the previous rank sends there.
  void* fifo() const { return fifo_; }
  /// The next rank's fifo() (device FIFOs only): its pointer where it is
  /// device memory of this process (ranks as threads; another device's needs
  /// enable_peer_access first), or what open_fifo() returned for its handle
  /// (ranks as processes).
  void connect(void* next_fifo) { next_ = next_fifo; }

  /// CUDA IPC of the device FIFOs (ranks as processes on one host): a
  /// cudaIpcMemHandle_t's bytes.
  static constexpr size_t kIpcHandleBytes = 64;
  /// This rank's FIFO allocation's handle into `handle` (kIpcHandleBytes);
  /// 0 or a cudaError_t (BadHeader for host FIFOs).
  int export_fifo(void* handle) const;
  /// Maps another process's exported FIFO on `device` (peer access enabled
  /// lazily where it is another GPU); *fifo then goes to connect(). Undo with
  /// close_fifo() once no kernel of this rank runs.
  static int open_fifo(const void* handle, int device, void** fifo);
  static int close_fifo(void* fifo, int device);
  /// Lets `device`'s kernels reach `peer`'s memory (ranks as threads on
  /// several devices): *can says whether they can; 0 or a cudaError_t (an
  /// already enabled peer is no error).
  static int enable_peer_access(int device, int peer, bool* can);
  /// Whether the last call's kernel is still running: 0 done, 1 running, else
  /// a cudaError_t (a host thread polls it to set the abort word when its
  /// communicator aborts; synchronize() then reads the reports).
  int query() const;
  /// The bytes of the slices channel c has sent since construction or reset()
  /// (the kernel counts them; read between calls): 0 or a cudaError_t.
  int sent_bytes(int c, uint64_t* bytes) const;
  /// Before the first call: system-scope fences (Options::system_fences) once
  /// the neighbours are known, and the group's abort word where it is
  /// chosen after the ring is made (ranks agreeing on one shared word).
  void set_system_fences(bool on) { o_.system_fences = on; }
  void use_abort(RingAbort* abort) { abort_ = abort; }
  /// With fifo_in_host_memory: the host addresses of the receive FIFOs and of
  /// the outbox (for the proxy); nullptr otherwise.
  void* fifo_host() const { return fifo_host_; }
  void* outbox_host() const { return outbox_host_; }
  const Options& options() const { return o_; }
  /// Elements per slice of the Options' type: prims::slice_elems_for(slot_bytes, element size).
  size_t slice_elems() const { return slice_; }
  /// The same for an element of `esize` bytes (a Shape's type).
  size_t slice_elems_for(size_t esize) const;
  /// CTAs of this kind of kernel the device holds at once (occupancy per SM x
  /// SMs; 0 when the options were refused before it was asked).
  int max_resident_ctas() const { return max_resident_; }

  /// All-reduce (the Options' op: sum, max or min) of count elements at d_src into d_dst on every rank (in
  /// place allowed), one kernel on the ring's stream. Every rank of the ring
  /// must make the same call (count, in order); their kernels wait on each
  /// other through the FIFOs, so all must be able to run at once (docs/GPU.md).
  /// Channel c of C reduces elements [count * c / C, count * (c + 1) / C)
  /// (the communicator's split: core::RingChannels::run_schedule).
  int all_reduce_async(const void* d_src, void* d_dst, size_t count);
  /// The same with a call's own Shape (checked: Unsupported for a type,
  /// predictor or op the kernel has not, BadHeader for a channel count out of
  /// range, kNotResident where that kernel's CTAs cannot all be resident).
  int all_reduce_async(const void* d_src, void* d_dst, size_t count, const Shape& s);
  /// Waits for the ring's stream; returns a cudaError_t, or, if the call
  /// failed on the device, 1000 + the RingError of the first CTA that
  /// failed (its report in *rep when rep is not null; RingError::None there
  /// when the call succeeded).
  int synchronize(RingReport* rep = nullptr);
  /// After a failed call: the FIFO flags and the channels' stream positions back to zero (every rank of the
  /// group, with no kernel running, before the abort word is cleared; with
  /// host FIFOs also the outbox, with the proxy stopped: it starts again
  /// from position zero, PersistentProxy::start).
  int reset();
  void* stream() const { return stream_; }

 private:
  Options o_;
  RingAbort* abort_;
  void* stream_ = nullptr;
  bool own_stream_ = false;
  int status_ = 0;
  size_t slice_ = 1;
  int max_resident_ = 0;
  size_t fifo_bytes_ = 0;
  void* fifo_ = nullptr;
  void* next_ = nullptr;
  void* outbox_ = nullptr;     // host FIFOs: the outbox as the device sees it
  void* fifo_host_ = nullptr;  // host FIFOs: the host addresses
  void* outbox_host_ = nullptr;
  void* scratch_ = nullptr;
  uint64_t* state_ = nullptr;  // per channel: the stream positions a call starts from (persistent_ring.cu)
  RingReport* rep_host_ = nullptr;
  RingReport* rep_dev_ = nullptr;
  int last_ctas_ = 0;  // the CTAs of the last call (their reports are the ones synchronize() reads)
};

}  // namespace ncclz::cuda
