// The call descriptor: what a rank is about to do, exchanged before each call.
//
// Before every collective the ranks allgather one fixed-size CallDesc: one hop
// over the point-to-point links (a small exact call's data follows it in the
// same message), or around the ring on channel 0 without those links. Each rank then compares all N
// descriptors itself, so a mismatch (another collective, count, type, op, root,
// compression, or a skipped call: the sequence number) raises RemoteError on
// every rank with the same message, before any data moved and without hanging.
// A rank whose own arguments are invalid still takes part in the exchange with
// the kInvalid flag set: it throws InvalidArgument and the others RemoteError.
// Lossy calls carry their data statistics in the same record (min, max, max|x|,
// non-finite flag), so the exchange doubles as the small pre-reduction that
// fixes eb and the code width. The collectives then quantize slice by slice
// inside their loops (the plan rules outliers out); only when rank 0 asks for
// the eager path (kEagerQuantize) do they quantize everything
// first and hold a second, smaller round that reports quantizer outliers. The
// same record carries the compression policy's proposal (PolicyHints: a
// lighter mode, a codec effort); every rank adopts rank 0's, so the policy's
// decision costs no extra message. Send/recv exchange descriptors pairwise on
// their own link (sender's first, then the receiver's answer). The rounds
// themselves are core/call_protocol.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ncclz::core {

enum class Coll : uint8_t {
  AllReduce = 1,
  ReduceScatter = 2,
  AllGather = 3,
  Broadcast = 4,
  Send = 5,
  Recv = 6,
  Barrier = 7,
  Outliers = 8,  ///< second round of a lossy call
  AllToAll = 9,
  AllToAllv = 10,  ///< count: this rank's elements sent (not matched; the counts round matches the pairs)
  Reduce = 11,
  Gather = 12,
  Scatter = 13,
};

enum DescFlags : uint8_t {
  kInvalid = 1,    ///< this rank's arguments are invalid (it throws InvalidArgument)
  kAnyFinite = 2,  ///< lo/hi/maxabs are meaningful
  kNonFinite = 4,  ///< some input is NaN or +-Inf
  kOutliers = 8,   ///< the quantizer reported outliers (second round)
  kCompress = 16,  ///< send/recv: the sender's data travels as codes with eb
  kWide = 32,      ///< send/recv: int64 codes
  /// Lossy collectives: quantize the whole input before the transfers and
  /// hold the outlier round (NCCLZ_PIPELINE_QUANTIZE=0). Any rank's flag
  /// counts for every rank (each sees every descriptor), so every rank takes
  /// the same path whatever its environment says.
  kEagerQuantize = 64,
  /// This rank's data for the receiving peer follows the descriptor in the
  /// same message (the latency algorithm, core/call_protocol.hpp): the call is
  /// exact, has a one-hop schedule and at most CommConfig::latency_bytes.
  /// Matching calls set it on every rank alike; not part of the match.
  kCarried = 128,
  /// Send/recv descriptors (the two bits above, which only collectives use):
  /// kGrouped, posted by a group of two or more calls (core/p2p_group.cpp:
  /// it posts all its sends' descriptors before it waits for anything,
  /// answers its peers' sends as they come, and moves the data of a single
  /// call's counterpart at once); kMoreSends, a group's send descriptor that
  /// another of the same group's sends to the same peer follows on the link
  /// before anything else. A single send or recv meeting a group reads ahead
  /// over them (CallProtocol::handshake).
  kGrouped = 64,
  kMoreSends = 128,
};

struct CallDesc {
  uint64_t seq = 0;
  uint64_t count = 0;
  double bound = 0;  ///< E (abs) or r (rel)
  double lo = 0;     ///< lossy statistics of this rank's input
  double hi = 0;
  double maxabs = 0;
  double eb = 0;      ///< send/recv lossy: the sender's quantizer bound
  double E = 0;       ///< send/recv lossy: the sender's resolved bound
  int32_t root = -1;  ///< broadcast, reduce, gather, scatter root; send: the sender; recv: the expected sender
  int32_t peer = -1;  ///< send: the destination; recv: the receiver
  uint8_t coll = 0, dtype = 0, op = 0, mode = 0;
  uint8_t flags = 0;
  /// The compression policy's proposal (PolicyHints::lighter + 1; 0: none).
  /// Only rank 0's is used: every rank runs the call with all[0].lighter.
  /// Not part of the match (ranks may propose differently).
  uint8_t lighter = 0;
  /// Rank 0's codec effort: round(100 * PolicyHints::rans_margin) + 1, 0 for
  /// the selector's default. Every rank encodes with all[0]'s; not part of
  /// the match.
  uint8_t rans_margin = 0;
  /// Lossy sums: this rank's nonzero inputs in 1/1024ths of its elements,
  /// rounded up (1..255), when its statistics scan listed them all
  /// (core::NonzeroIndex); 0 when it did not. Every rank sees every rank's:
  /// mostly-zero calls run with larger slices (core/lossy_call.hpp).
  /// Not part of the match.
  uint8_t density = 0;
  char codec[14] = {};  ///< forced codec name ("" = selector)
  /// 1: this rank's buffers are device memory and its lossy calls code on the
  /// device (core/device_work.hpp). Where any rank's is 1, every rank takes
  /// the eager lossy path and codes without Rans, which the device does not
  /// decode (core/lossy_call.cpp). Not part of the match.
  uint8_t device = 0;
  /// Rank 0's algorithm: 1 + int(Algorithm) (PolicyHints::algorithm, else
  /// CommConfig::algorithm / NCCLZ_ALGO), 0 for the default, in the bits of
  /// kAlgorithmBits. Every rank runs all[0]'s where the topology allows it
  /// (core/call.hpp, step 4); not part of the match. kHierPhases: this rank
  /// asks for the hierarchical collectives' phases one after the other
  /// (CommConfig::hier_rounds 0); any rank's counts for every rank.
  uint8_t algorithm = 0;
};
/// CallDesc::mode of a call refused before it reached the runtime
/// (Communicator::refuse, always with kInvalid): its count, type and
/// compression are unknown, and describe() says so instead of printing zeros.
constexpr uint8_t kRefusedMode = 0xff;
constexpr uint8_t kAlgorithmBits = 0x7f;
constexpr uint8_t kHierPhases = 0x80;
static_assert(sizeof(CallDesc) == 96, "CallDesc has no padding holes");

const char* coll_name(Coll c);
std::string mode_string(uint8_t mode, double bound, const char* codec);
/// "all_reduce(count=64, float32, sum, lossy_abs(0.001))"
std::string describe(const CallDesc& d);
/// Whether two ranks' descriptors describe the same collective call.
bool same_call(const CallDesc& a, const CallDesc& b);
/// Why a send (s) and a recv (r) descriptor do not match ("" if they do).
std::string p2p_mismatch(const CallDesc& s, const CallDesc& r);

}  // namespace ncclz::core
