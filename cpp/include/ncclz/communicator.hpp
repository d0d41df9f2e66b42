// C++ API of the collective runtime. The C API (ncclz.h) and the Python
// Communicator are thin layers over this.
//
// Compression contract (../shared/design/ARCHITECTURE.md):
//  - Compression::none(): the plain collective.
//  - Compression::lossless(): bit-identical to none (floats through the
//    lossless float coder, reduced in floating point after decoding in the
//    same order as the uncompressed path).
//  - Compression::lossy_abs(E): every finite element of the result is within
//    E of the exact result computed in fp64 from all ranks' inputs. For sum
//    over N ranks each rank quantizes with E/N (minus the final rounding's
//    share); for avg/max/min and data movement with E. A hierarchical call
//    (H hosts of L ranks, ncclz/topology.hpp) combines each host's values
//    exactly and quantizes the host's sum once, with E/H (minus its float
//    rounding's share; bound/error_budget.hpp).
//  - Compression::lossy_rel(r): E = r * (global max - global min) of the inputs.
//  - prod is not offered in lossy mode. Non-finite inputs come out as an
//    uncompressed float reduction would give them. All ranks' outputs are
//    bit-identical.
//  - avg, exact (none, lossless): the sum divided by N once, in T; float16
//    divides every input by N first instead (NCCL's premultiplied average:
//    partial sums of float16 values overflow its 65504 where the average
//    does not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ncclz/codec/format.hpp"
#include "ncclz/topology.hpp"
#include "ncclz/unique_id.hpp"

namespace ncclz {

struct PolicyHints;  // ncclz/policy_hints.hpp (internal: the compression policy's proposal)

/// I8, U32 and U64 travel and are coded as their same-width types (U8, I32,
/// I64: the same bits); only their max, min and avg differ, which the
/// reductions apply in the type itself (prims/reduce.hpp). F8E4M3 and F8E5M2
/// (the OCP 8-bit floats e4m3fn and e5m2, NCCL's ncclFloat8e4m3 / e5m2)
/// travel as bytes and reduce in their own arithmetic (prims/float8.hpp:
/// widened to float, rounded to nearest even, overflow to NaN / inf); exact
/// modes only.
enum class DataType : uint8_t { F32, F64, F16, BF16, I32, I64, U8, I8, U32, U64, F8E4M3, F8E5M2 };
enum class RedOp : uint8_t { Sum, Avg, Max, Min, Prod };

/// "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "uint32", "uint64",
/// "float8_e4m3fn", "float8_e5m2" ("?" outside the enum).
const char* dtype_name(DataType t);
/// Bytes per element (0 outside the enum).
size_t dtype_size(DataType t);
/// "sum", "avg", "max", "min", "prod" ("?" outside the enum).
const char* op_name(RedOp op);

struct Compression {
  enum class Mode : uint8_t { None, Lossless, LossyAbs, LossyRel } mode = Mode::None;
  double bound = 0;  ///< E for LossyAbs, r for LossyRel
  /// Optional: force a codec for the wire slices (tests/benchmarks): "" = selector.
  std::string codec;
  /// Messages smaller than this many bytes go uncompressed (0: never skip).
  size_t min_bytes = 0;
  /// Optional layout hint for the wire codec: the array's last dimension
  /// (row) and the product of its last two (plane), 0 when it has fewer.
  /// With them the selector may pick the 2-D/3-D Lorenzo predictors; the
  /// slice header carries what the encoder used, so ranks need not agree.
  uint32_t row = 0, plane = 0;
  static Compression none() { return {}; }
  static Compression lossless() { return {Mode::Lossless, 0, "", 0}; }
  static Compression lossy_abs(double e) { return {Mode::LossyAbs, e, "", 0}; }
  static Compression lossy_rel(double r) { return {Mode::LossyRel, r, "", 0}; }
};

/// "none", "lossless", "lossy_abs", "lossy_rel" ("?" outside the enum).
const char* mode_name(Compression::Mode m);

/// The algorithm of a collective call (docs/ALGORITHMS.md): the flat ring over
/// all ranks, hierarchical (exact inside each host, the ring between hosts
/// among the ranks of the same local rank; Topology::hierarchical()), or the
/// latency algorithm of small exact calls (one hop: every rank sends each peer
/// what it needs over the point-to-point links, in the call descriptor's own
/// message; CommConfig::latency_bytes). The runtime picks Latency by itself;
/// proposals (PolicyHints, NCCLZ_ALGO) name Ring or Hierarchical.
enum class Algorithm : uint8_t { Ring, Hierarchical, Latency };
/// "ring", "hierarchical", "latency" ("?" outside the enum).
const char* algorithm_name(Algorithm a);

/// Per-call statistics (comm.last_stats in Python).
struct CallStats {
  uint64_t raw_bytes = 0;   ///< bytes this rank would have sent uncompressed
  uint64_t wire_bytes = 0;  ///< bytes this rank actually sent (headers included)
  double ratio = 1;         ///< raw_bytes / wire_bytes
  double encode_s = 0;      ///< time in encoders (all channels summed)
  double decode_s = 0;      ///< time in decoders (all channels summed)
  double quantize_s = 0;    ///< time quantizing/dequantizing at the API layer
  double wait_s = 0;        ///< time blocked waiting for slots
  double wall_s = 0;        ///< wall time of the call
  /// The bound the result meets, max |out - exact| over the finite elements
  /// (0 for exact modes): E for a compressed lossy call; where a lossy call
  /// ran exactly (exact_fallback), what that path achieves (0 for a copy or
  /// select; for a sum or mean the rounding of the accumulation it took, in
  /// T, float32 or float64, the narrowest that keeps E, or where none can, the
  /// narrowest about as good as float64: docs/ALGORITHMS.md "The exact path";
  /// it may exceed a requested E below the type's own rounding).
  double error_bound = 0;
  double requested_bound = 0;  ///< the bound E the call asked for (0 for exact modes)
  /// Lossy call that ran exactly instead (non-finite inputs, quantizer outliers,
  /// a bound below the type's own rounding, or a message under min_bytes).
  bool exact_fallback = false;
  /// The call ran on the persistent ring kernels (CommConfig::persistent):
  /// one kernel per rank; wire_bytes are the bytes of the slices it sent.
  bool persistent = false;
  /// ... with its FIFOs in device memory, written by the kernels themselves
  /// (ranks on one host; NCCLZ_PERSISTENT_FIFOS); false: host FIFOs bridged
  /// by proxy threads over the communicator's transport.
  bool persistent_device_fifos = false;
  /// The mode the call ran with: the requested one, or rank 0's lighter proposal.
  Compression::Mode ran_mode = Compression::Mode::None;
  /// The call ran with rank 0's lighter proposal instead of the requested mode.
  bool lightened = false;
  /// The algorithm the call ran (send/recv: Ring, their own link). A
  /// hierarchical call counts its inter-host phase in raw_bytes, wire_bytes and
  /// ratio (the links that compress) and its intra-host phases in local_bytes.
  Algorithm algorithm = Algorithm::Ring;
  /// Hierarchical calls: bytes this rank sent to ranks on its own host
  /// (uncompressed, not in raw_bytes / wire_bytes); 0 for ring calls.
  uint64_t local_bytes = 0;
  /// The call's buffers were device memory and its values stayed there
  /// (set_buffer_device), on the flat or hierarchical schedules of several
  /// ranks: a lossy call quantized, coded and dequantized on the device, a
  /// lossless float32 / bfloat16 / float16 one coded FloatHuff slices there,
  /// an uncompressed one moved and reduced raw slices there; false where it
  /// ran on host copies (lossless of other types, the exact fallback, the
  /// latency algorithm, one rank) or on host buffers.
  bool on_device = false;
  /// The rings (point-to-point lanes, for all_to_all, gather and scatter)
  /// the call's data moved on; 1 for send/recv and the latency algorithm.
  int channels = 0;
  /// The data bytes each slice of the call was sized for (its slots held a
  /// slice each); 0 for the latency algorithm (one message per peer).
  uint64_t slice_bytes = 0;
  /// Wall time of the call's schedules (the channels' loops, from their start
  /// to the last slot leaving this process); wall_s less this is what the call
  /// spent before and after them: checks, the descriptor exchange, statistics,
  /// quantizing, the outlier round, dequantizing, device syncs. 0 where no
  /// channel loop ran (the latency algorithm, send / recv).
  double schedule_s = 0;
};

/// Communicator settings. Every NCCLZ_* variable the runtime reads is parsed in
/// one place (cpp/src/core/config.cpp; docs/ENVIRONMENT.md lists them):
///  - the rendezvous fields (rank .. timeout_s) are read by from_env() only;
///  - the tuning fields (transport .. p2p) left unset (0, -1 or "") take the
///    environment's value when creating a communicator, else their default:
///    explicit settings win over the environment, which wins over defaults.
/// Communicator::config() reports what a communicator actually uses.
struct CommConfig {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string token;       ///< NCCLZ_TOKEN
  double timeout_s = 300;  ///< NCCLZ_TIMEOUT
  std::string transport;   ///< "", "inproc", "shm", "socket" (NCCLZ_TRANSPORT; "": automatic)
  int nchannels = 0;       ///< parallel rings (NCCLZ_NCHANNELS); 0: a core each, 2..8, agreed at creation
  size_t slot_bytes = 0;   ///< data bytes of a slice, one per slot (NCCLZ_SLOT_BYTES, default 1 MiB, >= 1024)
  int nslots = 0;          ///< slots per connection (NCCLZ_NSLOTS, default 4, >= 2)
  /// Slot bytes of the slices of mostly-zero lossy sums (their slots carry a
  /// few percent of it; NCCLZ_SPARSE_SLICE_BYTES, default 8 MiB). A value not
  /// above slot_bytes gives them the same slices as other calls (and is
  /// reported as slot_bytes). The transport's slots hold the larger of the two.
  size_t sparse_slice_bytes = 0;
  /// The most rings an exact ring call (none, lossless) runs on
  /// (NCCLZ_EXACT_NCHANNELS); 0: agreed at creation: 1 where nchannels is
  /// unset, some rank has fewer cores than two rings need (its share of its
  /// host; NCCLZ_CORES_PER_RANK) and the transport is not sockets, else
  /// nchannels. At most nchannels.
  int exact_nchannels = 0;
  /// Data bytes of the slices of exact ring calls (NCCLZ_EXACT_SLICE_BYTES,
  /// >= 1024); 0: agreed at creation: 128 KiB where exact calls run one ring
  /// by the rule above, else slot_bytes. At most slot_bytes (larger values
  /// are lowered to it); the slots stay slot_bytes.
  size_t exact_slice_bytes = 0;
  double throttle_gbps = 0;   ///< NCCLZ_SOCKET_THROTTLE_GBPS (0: no throttle)
  std::string socket_ifname;  ///< NCCLZ_SOCKET_IFNAME
  /// Lossy reductions quantize slice by slice inside the ring loops (1) or the
  /// whole input before them (0); -1: NCCLZ_PIPELINE_QUANTIZE, default 1.
  /// Rank 0's setting decides for every rank (the results are the same bits).
  int pipeline_quantize = -1;
  /// Hierarchical all_reduce, reduce_scatter and all_gather: in rounds, the
  /// intra-host phases overlapping the transfers between hosts
  /// (1), or the phases one after the other (0, for comparison); -1:
  /// NCCLZ_HIER_ROUNDS, default 1. Any rank's 0 holds for every rank (the
  /// results are the same bits).
  int hier_rounds = -1;
  /// Lossy sums carry mostly-zero inputs as lists of nonzeros (1) or densely
  /// (0); -1: NCCLZ_SPARSE_INPUT, default 1. Per rank (same bits either way).
  int sparse_input = -1;
  /// all_reduce (sum) calls whose buffers are device memory on every rank
  /// run on the persistent ring kernels (1: one kernel per call and rank,
  /// host-mapped FIFOs and proxy threads over this transport; docs/GPU.md,
  /// "Persistent ring kernels in the call path") or on the device path's
  /// per-slice kernels (0); -1: NCCLZ_PERSISTENT, default 0. Every rank must
  /// have the same (checked at creation).
  int persistent = -1;
  /// Point-to-point links for send/recv, connected at creation (1) or not
  /// (0); -1: NCCLZ_P2P, default 1.
  int p2p = -1;
  /// The topology override (ncclz/topology.hpp): this rank's host id
  /// (NCCLZ_TOPO_HOST), or every rank's ("0,0,1,1" or "2x2"; NCCLZ_TOPO_HOSTS).
  std::string topo_host, topo_hosts;
  /// The collectives' algorithm: "" (NCCLZ_ALGO, default "auto": the latency
  /// algorithm for small exact calls (latency_bytes), else hierarchical where
  /// the topology allows it, else the ring), "auto", "ring", "hierarchical"
  /// (these two: for every size). Rank 0's setting decides for every rank (it
  /// travels in the call descriptor), unless the policy's hints name one.
  std::string algorithm;
  /// Exact calls (none, lossless) of all_reduce, reduce_scatter, reduce,
  /// all_gather and broadcast whose message has at most this many bytes run
  /// the latency algorithm where the algorithm is auto (needs the
  /// point-to-point links); 0: never. -1: NCCLZ_LATENCY_BYTES, default 64 KiB.
  /// At most slot_bytes - 128 (larger values are lowered to it). Every rank
  /// must have the same (checked at creation).
  int64_t latency_bytes = -1;
  /// Exact (none, lossless) all_reduce calls above latency_bytes and up to
  /// this many bytes run the latency algorithm too, in two hops with each
  /// rank's block carried in pieces of at most a slot (docs/ALGORITHMS.md,
  /// "The latency algorithm"); needs latency_bytes > 0. -1:
  /// NCCLZ_TWO_HOP_BYTES, else agreed at creation: (2 nranks - 3) x
  /// slot_bytes / 4 where the transport is not sockets and the topology is
  /// flat (one host, or one rank per host), else 0 (off). Every rank must have the same (checked at
  /// creation); Communicator::config() reports the value taken.
  int64_t two_hop_bytes = -1;
  /// Exact all_reduce calls of at least this many bytes (and above
  /// latency_bytes, or whose one hop would send too much) run the latency
  /// algorithm's two hops direct, whatever their size, where every rank can
  /// reach every other's memory (ranks on one host: cross-memory attach
  /// between processes, memcpy between threads; transport/peer_memory.hpp):
  /// each rank reads its block of every peer's input straight from the
  /// peer's buffer and writes the result straight into every peer's output,
  /// one copy where the slots take two (docs/ALGORITHMS.md, "Direct two
  /// hops"). Calls of device buffers take it only up to two_hop_bytes. -1:
  /// NCCLZ_DIRECT_FROM_BYTES, else agreed at creation where all ranks share a
  /// host, the topology is flat, the slots carry no checksums and the probe
  /// found every peer reachable:
  /// 2 MiB with 2 ranks, 256 KiB with 3, 128 KiB with more (core::resolve_direct),
  /// else 0. 0: off. Every rank must have the same (checked at creation);
  /// Communicator::config() reports the value taken. Exact reduce_scatter,
  /// all_gather and broadcast above latency_bytes run direct too
  /// (core/direct_schedule.hpp): from this size where it is set, else from
  /// their own measured sizes (core::direct_from); 0 turns them off too.
  int64_t direct_from_bytes = -1;
  /// The most microseconds a wait for a slot polls, giving the CPU to other
  /// ready threads between checks, before it sleeps in the kernel (the
  /// budget adapts below it: it halves when polls run out; docs/TRANSPORTS.md,
  /// "Waiting"). -1: NCCLZ_SPIN_US, else automatic: 20 where the ranks on
  /// this machine have a CPU each (at most as many as the CPUs this process
  /// may run on), 200 where they outnumber them. 0: no polling. Per rank;
  /// Communicator::config() reports the value chosen.
  int spin_us = -1;
  /// A timeline trace of this communicator's calls (base/trace.hpp): "" (the
  /// default, from NCCLZ_TRACE_FILE when set): none, nothing recorded; else
  /// each rank writes `<trace_file>.rank<R>.json` (Chrome trace-event JSON:
  /// chrome://tracing, ui.perfetto.dev) when the communicator is destroyed,
  /// or at a clean exit of the process while it is alive. A later
  /// communicator of the same rank and path in the same process writes
  /// `<trace_file>.rank<R>.<k>.json`, k = 1, 2, ... (docs/GPU.md, "Timeline").
  std::string trace_file;

  /// Every field from the environment (RANK, WORLD_SIZE, MASTER_ADDR,
  /// MASTER_PORT, NCCLZ_*), defaults for the variables that are unset:
  /// resolved(). Throws InvalidArgument for a malformed or out-of-range value.
  static CommConfig from_env();
  /// The built-in defaults of every field, the environment ignored.
  static CommConfig defaults();
  /// This configuration with every unset tuning field taken from the
  /// environment, else its default, and checked (InvalidArgument naming the
  /// field or variable): what a communicator created with it uses, before
  /// the transport's own choices (Communicator::config() has those).
  CommConfig resolved() const;
};

/// The collectives, for CallArgs and check_call.
enum class CallKind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Send,
  Recv,
  AllToAll,
  AllToAllv,
  Reduce,
  Gather,
  Scatter
};

/// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv",
/// "all_to_all", "all_to_allv", "reduce", "gather", "scatter".
const char* call_name(CallKind k);

/// One call's arguments as a caller holding typed arrays has them (the Python
/// bindings, framework glue): each buffer with its own element count and
/// type. Broadcast and recv use the recv buffer, send the send buffer. Where
/// a buffer is used on the root only (reduce and gather: recv; scatter:
/// send), other ranks' is not checked.
struct CallArgs {
  CallKind kind = CallKind::AllReduce;
  const void* send = nullptr;
  size_t send_count = 0;
  DataType send_type = DataType::F32;
  const void* recv = nullptr;
  size_t recv_count = 0;
  DataType recv_type = DataType::F32;
  RedOp op = RedOp::Sum;  ///< all_reduce, reduce_scatter, reduce
  int root = 0;           ///< broadcast, reduce, gather, scatter: the root; send/recv: the peer
  Compression compression;
  /// all_to_allv: elements to / from each rank (size() entries each).
  const size_t* send_counts = nullptr;
  const size_t* recv_counts = nullptr;
};

/// One send or recv of a group (Communicator::group).
struct PeerCall {
  bool send = true;     ///< a send of buf's elements to peer, else a recv from peer into buf
  void* buf = nullptr;  ///< send: read, never written; recv: written
  size_t count = 0;
  DataType type = DataType::F32;
  int peer = 0;
  Compression compression;
  /// Where buf is: a CUDA device (its buffer device, as set_buffer_device
  /// says for single calls), -1 host memory, or kThreadBufferDevice (the
  /// default): the calling thread's buffer device.
  static constexpr int kThreadBufferDevice = -2;
  int device = kThreadBufferDevice;
  /// Non-empty: this call takes part refused, with this reason, as
  /// Communicator::refuse does for a single call (for bindings that refuse
  /// arguments themselves): InvalidArgument here, RemoteError at the peer.
  std::string refused;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  /// Rendezvous at cfg.master_addr:master_port (rank 0 listens there).
  static std::unique_ptr<Communicator> create(const CommConfig& cfg);
  /// Rendezvous through a UniqueId made by make_unique_id() in rank 0's process.
  static std::unique_ptr<Communicator> create(const UniqueId& id, int rank, int size, const CommConfig& base = {});

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The configuration in effect: every default resolved, the transport that
  /// was chosen ("inproc", "shm" or "socket"), sparse_slice_bytes as the calls
  /// use it (slot_bytes where larger slices are off, e.g. on shared memory).
  /// The token is not reported ("").
  virtual const CommConfig& config() const = 0;
  /// Which ranks share a host, as found at creation (ncclz/topology.hpp).
  virtual const Topology& topology() const = 0;

  /// Checks a call's arguments without communicating: what the call itself
  /// checks (type, op, compression, root or peer, buffers) and what only a
  /// caller with both arrays can tell (same type, counts that fit the
  /// collective, no partial overlap: all_reduce may be exactly in place).
  /// Throws InvalidArgument "<call>: <what is wrong and what to do>". For
  /// callers that hold typed arrays (the bindings); such a caller then calls
  /// refuse() below before raising, so the ranks stay in step. The calls
  /// below fail on every rank by themselves (a rank with invalid arguments
  /// raises InvalidArgument, the others RemoteError).
  virtual void check_call(const CallArgs& args, const PolicyHints* hints = nullptr) const = 0;
  /// Takes part in the call `args` names (its kind, and its root, or its peer
  /// for send / recv; buffers, counts and types unused) as this rank's refused
  /// call: the descriptor exchange with the call marked invalid, so that the
  /// other ranks' call raises RemoteError naming this rank and every rank's
  /// next call meets the others' next call. For a caller that refuses
  /// arguments itself (check_call above, or checks of its own) and whose
  /// program goes on making calls: without it, this rank's next call would
  /// meet the others' refused one. Returns once the others took part (blocks
  /// until they make their call, or the timeout); a send / recv whose peer
  /// is no peer returns at once (there is no link). Throws what the exchange
  /// throws (a timeout, an abort), never InvalidArgument.
  virtual void refuse(const CallArgs& args, const std::string& why) = 0;
  /// The descriptor rounds this rank took part in so far (every collective
  /// and send / recv that reached the exchange, refused ones too): a caller
  /// tells from it whether a call that raised took part.
  virtual uint64_t rounds() const = 0;

  // The collectives. `hints` is the compression policy's proposal for the call
  // (internal, see ncclz/policy_hints.hpp): only rank 0's counts.

  /// recv may equal send (in place). count elements on every rank.
  virtual void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Compression& c,
                          CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// send holds size()*recv_count elements; rank r gets the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, RedOp op,
                              const Compression& c, CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// recv gets size()*send_count elements, rank r's at offset r*send_count.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DataType t, const Compression& c,
                          CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  virtual void broadcast(void* buf, size_t count, DataType t, int root, const Compression& c,
                         CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// The reduction of every rank's send (count elements) goes to the root's
  /// recv; recv is not used on other ranks (may be null there) and may equal
  /// send on the root (in place). Lossy: the bound of all_reduce with the same op.
  virtual void reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root, const Compression& c,
                      CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// Every rank's send (send_count elements) goes to the root's recv at
  /// offset rank*send_count (size()*send_count elements; not used elsewhere).
  /// In place on the root: send = recv + root*send_count.
  virtual void gather(const void* send, void* recv, size_t send_count, DataType t, int root, const Compression& c,
                      CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// Block j of the root's send (size()*recv_count elements; not used
  /// elsewhere) goes to rank j's recv (recv_count elements). Lossy: the
  /// relative bound is the root's range, as for broadcast. In place on the
  /// root: recv = send + root*recv_count.
  virtual void scatter(const void* send, void* recv, size_t recv_count, DataType t, int root, const Compression& c,
                       CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// Block j of send (count elements, at offset j*count) goes to rank j, and
  /// rank j's block for this rank arrives at offset j*count of recv: send and
  /// recv hold size()*count elements each (separate arrays). Blocks cross one
  /// link each (pairwise exchange over the point-to-point links: NCCLZ_P2P=0
  /// makes it InvalidArgument); a rank's own block is copied exactly.
  virtual void all_to_all(const void* send, void* recv, size_t count, DataType t, const Compression& c,
                          CallStats* stats = nullptr, const PolicyHints* hints = nullptr) = 0;
  /// all_to_all with per-peer counts: send_counts[j] elements to rank j and
  /// recv_counts[j] from rank j (size() entries each; zeros allowed), blocks
  /// back to back in rank order. Rank i's send_counts[j] must equal rank j's
  /// recv_counts[i]: the ranks compare them before any data moves, and a
  /// mismatch raises RemoteError on every rank naming the ranks and counts.
  virtual void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                           DataType t, const Compression& c, CallStats* stats = nullptr,
                           const PolicyHints* hints = nullptr) = 0;
  /// Point to point: the pair exchanges descriptors on its own link and runs
  /// the requested mode (the sender's lossy plan travels with its data).
  virtual void send(const void* buf, size_t count, DataType t, int peer, const Compression& c,
                    CallStats* stats = nullptr) = 0;
  virtual void recv(void* buf, size_t count, DataType t, int peer, const Compression& c,
                    CallStats* stats = nullptr) = 0;
  /// Grouped point-to-point calls (NCCL's ncclGroupStart / ncclGroupEnd
  /// around sends and recvs): the sends and recvs of `calls` run together, so
  /// that exchanges which would wait for each other as single calls (a ring
  /// shift, a halo exchange, both directions of one pair) complete. Each call
  /// matches the peer's next send or recv with this rank as it would alone
  /// (same count, type and compression; lossy sends plan alone). Between two
  /// ranks, where either has several calls with the other in its group (or
  /// calls both ways), the other must make the same calls with it in a group
  /// too (the order of sends and of recvs kept); a single call with a peer
  /// meets a plain send or recv there. At most CommConfig::nslots sends to
  /// and nslots recvs from one peer per group. Calls on device buffers
  /// (PeerCall::device) run on host copies: a send's buffer is copied to the
  /// host before the group starts, a recv's result to its device after the
  /// group's data moved. Returns when every call is complete; throws
  /// the first call's error after the others ran (an argument error
  /// InvalidArgument, the peer's RemoteError), and calls that do not match
  /// abort the communicator. stats: the group's bytes together.
  virtual void group(const std::vector<PeerCall>& calls, CallStats* stats = nullptr) = 0;
  virtual void barrier() = 0;
  /// Makes every pending and future call on this communicator (and, where the
  /// transport can reach them, on its peers) fail with Aborted. Thread-safe.
  virtual void abort(const std::string& reason = "aborted by user") = 0;
  /// A new communicator of the ranks that pass the same color (NCCL's
  /// ncclCommSplit, MPI_Comm_split): a collective call of every rank of this
  /// one, ordered with its other calls. The new ranks go by key, then by rank
  /// here. kSplitNoColor: this rank joins none (returns nullptr). `config`:
  /// the new communicator's settings (null: the ones this communicator was
  /// created with; a NCCLZ_TOPO_HOSTS layout is cut to its members' part).
  /// A color below kSplitNoColor on any rank fails the call on every rank
  /// (InvalidArgument there, RemoteError naming it elsewhere). The new
  /// communicators' creation waits for all their members, as creation does.
  virtual std::unique_ptr<Communicator> split(int color, int key, const CommConfig* config = nullptr) = 0;
};

/// Communicator::split's color for "no new communicator" (NCCL_SPLIT_NOCOLOR).
constexpr int kSplitNoColor = -1;

/// Where the buffers of the calls this thread makes live from now on: -1,
/// host memory (the default), or the ordinal of a CUDA device whose memory
/// they are (as cudaSetDevice, per thread). Every collective and send / recv
/// take device buffers: lossy calls quantize, code and dequantize on the
/// device (only coded slices cross to the host), every other path runs on
/// host copies (docs/GPU.md, "Device buffers"). The caller's work that writes the
/// input must be complete when the call starts; the output is complete when
/// it returns. One device per communicator. The Python layer sets it for
/// CUDA arrays.
void set_buffer_device(int device);
int buffer_device();

/// An interrupt check for blocking calls made by the calling thread: while a
/// call of this thread waits (for a peer's slot, for its own channels), it
/// runs `check(ctx)` every 50 ms or so; a non-null answer (why, e.g.
/// "KeyboardInterrupt") makes the call abort the communicator (its peers get
/// Aborted naming this rank) and throw Interrupted. nullptr removes the check.
/// The Python bindings install one that runs the interpreter's signal handlers,
/// so Ctrl-C interrupts a blocked call. Per thread; not called concurrently.
using InterruptCheck = const char* (*)(void* ctx);
void set_interrupt_check(InterruptCheck check, void* ctx);

}  // namespace ncclz
