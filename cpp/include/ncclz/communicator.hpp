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
//    share); for avg/max/min and data movement with E.
//  - Compression::lossy_rel(r): E = r * (global max - global min) of the inputs.
//  - prod is not offered in lossy mode. Non-finite inputs come out as an
//    uncompressed float reduction would give them. All ranks' outputs are
//    bit-identical.
// OWNER: runtime-core helper (this header is the contract with the bindings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ncclz/codec/format.hpp"

namespace ncclz {

struct UniqueId;

enum class DataType : uint8_t { F32, F64, F16, BF16, I32, I64, U8 };
enum class RedOp : uint8_t { Sum, Avg, Max, Min, Prod };

struct Compression {
  enum class Mode : uint8_t { None, Lossless, LossyAbs, LossyRel } mode = Mode::None;
  double bound = 0;  ///< E for LossyAbs, r for LossyRel
  /// Optional: force a codec for the wire slices (tests/benchmarks): "" = selector.
  std::string codec;
  /// Messages smaller than this many bytes go uncompressed (0: never skip).
  size_t min_bytes = 0;
  /// The compression policy's proposal: run this call with a lighter mode
  /// (int(Mode::None) or int(Mode::Lossless); -1: no proposal, run `mode`).
  /// Only rank 0's proposal counts: it travels in the call descriptor that
  /// every call exchanges anyway, so all ranks run the same mode with no extra
  /// message. Lighter means None < Lossless < lossy; an exact mode keeps any
  /// lossy bound. A lossy call ignores the proposal when the plain sum in the
  /// element type could exceed the bound (tiny bounds, non-finite inputs).
  int lighter = -1;
  /// The compression policy's codec effort: the selector's margin for the
  /// slow, high-ratio Rans coder over Block/Raw (EncodeOptions::rans_margin;
  /// < 0: the selector's default, 0.15; 1: never Rans, Sparse still allowed).
  /// A higher margin trades ratio for codec time where the codec, not the
  /// link, is the bottleneck. Only rank 0's counts (it travels in the call
  /// descriptor); the slice headers say what each encoder used, so the
  /// result is the same bits whatever the margin.
  double rans_margin = -1;
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

/// Per-call statistics (comm.last_stats in Python).
struct CallStats {
  uint64_t raw_bytes = 0;    ///< bytes this rank would have sent uncompressed
  uint64_t wire_bytes = 0;   ///< bytes this rank actually sent (headers included)
  double ratio = 1;          ///< raw_bytes / wire_bytes
  double encode_s = 0;       ///< time in encoders (all channels summed)
  double decode_s = 0;       ///< time in decoders (all channels summed)
  double quantize_s = 0;     ///< time quantizing/dequantizing at the API layer
  double wait_s = 0;         ///< time blocked waiting for slots
  double wall_s = 0;         ///< wall time of the call
  double error_bound = 0;    ///< the bound E promised for this call (0 for exact modes)
  /// Lossy call that ran exactly instead (non-finite inputs, quantizer outliers,
  /// a bound below the type's own rounding, or a message under min_bytes).
  bool exact_fallback = false;
  /// The mode the call ran with: the requested one, or rank 0's lighter proposal.
  Compression::Mode ran_mode = Compression::Mode::None;
  /// The call ran with rank 0's lighter proposal instead of the requested mode.
  bool lightened = false;
};

struct CommConfig {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string token;           ///< NCCLZ_TOKEN
  double timeout_s = 300;      ///< NCCLZ_TIMEOUT
  std::string transport;       ///< "", "inproc", "shm", "socket" (NCCLZ_TRANSPORT)
  int nchannels = 0;           ///< 0: default (NCCLZ_NCHANNELS)
  size_t slot_bytes = 0;       ///< 0: default (NCCLZ_SLOT_BYTES)
  int nslots = 0;              ///< 0: default (NCCLZ_NSLOTS)
  /// Slot bytes of the slices of mostly-zero lossy sums (their slots carry a
  /// few percent of it); 0: default (NCCLZ_SPARSE_SLICE_BYTES, else 8 MiB). A
  /// value not above slot_bytes gives them the same slices as other calls.
  /// The transport's slots hold the larger of the two.
  size_t sparse_slice_bytes = 0;
  double throttle_gbps = 0;    ///< NCCLZ_SOCKET_THROTTLE_GBPS
  std::string socket_ifname;   ///< NCCLZ_SOCKET_IFNAME
  /// Fills unset fields from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NCCLZ_*).
  static CommConfig from_env();
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  static std::unique_ptr<Communicator> create(const CommConfig& cfg);
  static std::unique_ptr<Communicator> create(const UniqueId& id, int rank, int size, const CommConfig& base = {});

  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// recv may equal send (in place). count elements on every rank.
  virtual void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Compression& c,
                          CallStats* stats = nullptr) = 0;
  /// send holds size()*recv_count elements; rank r gets the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, RedOp op,
                              const Compression& c, CallStats* stats = nullptr) = 0;
  /// recv gets size()*send_count elements, rank r's at offset r*send_count.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DataType t, const Compression& c,
                          CallStats* stats = nullptr) = 0;
  virtual void broadcast(void* buf, size_t count, DataType t, int root, const Compression& c,
                         CallStats* stats = nullptr) = 0;
  virtual void send(const void* buf, size_t count, DataType t, int peer, const Compression& c,
                    CallStats* stats = nullptr) = 0;
  virtual void recv(void* buf, size_t count, DataType t, int peer, const Compression& c,
                    CallStats* stats = nullptr) = 0;
  virtual void barrier() = 0;
  /// Makes every pending and future call on this communicator (and, where the
  /// transport can reach them, on its peers) fail with Aborted. Thread-safe.
  virtual void abort(const std::string& reason = "aborted by user") = 0;
};

}  // namespace ncclz
