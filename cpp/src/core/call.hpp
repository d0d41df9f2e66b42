// The call routine: the one body behind every call, as the prims' step
// routine is behind every verb. For a collective (core/collective.hpp says
// what it is):
//
//   1. check     this rank's arguments (core/validate.hpp); an error does not
//                stop the call here but travels in the descriptor, so that
//                every rank fails it (InvalidArgument here, RemoteError there)
//   2. describe  the call descriptor (core/call_protocol.hpp), with the
//                policy's hints, and for lossy modes this rank's input
//                statistics (core/lossy_call.hpp)
//   3. exchange  every rank's descriptor: mismatched or invalid calls raise
//                on every rank before any data is used. A small exact call
//                (at most CommConfig::latency_bytes, with a one-hop schedule;
//                an all_reduce up to two_hop_bytes) carries its data in the
//                same message, after the descriptor: the latency algorithm is
//                then one round in all (two for all_reduce's two hops, whose
//                larger blocks follow in pieces once the call matched). From
//                direct_from_bytes up, where the peers' memory is reachable,
//                all_reduce, reduce_scatter, all_gather and broadcast carry
//                where their buffers are instead (core/direct_schedule.hpp)
//   4. decide    the mode every rank runs: rank 0's lighter proposal where it
//                keeps the bound (bound::exact_keeps_bound), or where nothing
//                keeps it and the request's exact path would run the same
//                plain collective (bound::choose_exact), else the request;
//                and the algorithm (Collective::algorithm): the latency
//                algorithm where every rank carried its data and rank 0
//                names no algorithm; else rank 0's proposal or setting where
//                the topology allows it, else the default (hierarchical
//                where there are several hosts with the same number L > 1 of
//                ranks each, else the ring)
//   5. prepare   lossy: the plan from the global statistics, then quantize
//                (staged or eager) or take the exact path
//   6. run       the collective's schedule on the channels (core/channels.hpp):
//                on the rings (exact calls in the exact shape agreed at
//                creation, core/config.hpp: resolve_exact_shape; compressed
//                calls on nchannels rings of slot-sized slices), or on the
//                point-to-point links (lanes); the
//                latency algorithm combines the data that came in step 3
//                (algorithms/one_hop.hpp), on the calling thread
//   7. finish    dequantize / divide (avg), this rank's own block (copied,
//                exact, in every mode), and the CallStats
//
// all_to_allv adds a counts round to 3 (every rank's per-peer counts, matched
// pairwise; the message size, hence the mode under min_bytes and the channel
// count, follows from them).
//
// Send and recv take the same steps on their own link: the pair exchanges
// descriptors (3) after the sender alone has decided and prepared its lossy
// plan (4, 5), which its descriptor carries to the receiver.
//
// Calls must not overlap on one communicator (the communicator serializes
// them); a failure while data moves aborts it (core/channels.hpp).
#pragma once

#include "algorithms/one_hop.hpp"
#include "core/call_protocol.hpp"
#include "core/call_state.hpp"
#include "core/collective.hpp"
#include "core/runtime.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/policy_hints.hpp"

namespace ncclz::core {

class CallRoutine {
 public:
  explicit CallRoutine(Runtime& rt) : rt_(rt) {}

  /// all_reduce, reduce_scatter, all_gather, broadcast, reduce, gather,
  /// scatter, all_to_all, all_to_allv.
  void collective(const Collective& cd, DataType t, const Compression& c, const PolicyHints* hints, CallStats* stats);
  /// send, recv.
  void point_to_point(const Collective& cd, DataType t, const Compression& c, CallStats* stats);
  /// Grouped sends and recvs (Communicator::group; core/p2p_group.cpp).
  void group(const std::vector<PeerCall>& calls, CallStats* stats);
  /// The next collective or point_to_point call is refused with `why` (its
  /// arguments unchecked, its buffers untouched): it takes part in the
  /// descriptor exchange marked invalid and throws InvalidArgument(why), the
  /// other ranks RemoteError (Communicator::refuse).
  void refuse_next(std::string why) { refusal_ = std::move(why); }
  void barrier();

 private:
  /// Float16's exact average: each rank's input divided by N before the sum
  /// (see collective()); premultiply points cd.send at the divided values.
  static bool premultiplies(const Collective& cd, DataType t, Mode m, int nranks);
  void premultiply(Collective& cd, DataType t);
  /// A new call: Aborted if the communicator was aborted; the deadline.
  CallState begin(CallStats* stats) const;
  /// Step 4: the mode every rank runs the call with (see above); records the
  /// outcome and rank 0's codec effort in `call`.
  Mode decide_mode(const std::vector<CallDesc>& all, Mode m, DataType t, Combine how, const Compression& c,
                   CallState& call) const;
  /// Whether the lossy plan (flat, or hierarchical where the topology has
  /// it) would compress with bound E: then it keeps E.
  bool lossy_could_keep(DataType t, Combine how, double E, const DataStats& g) const;
  /// Step 4: the algorithm every rank runs the call with (see above); `run`:
  /// the mode decided (the latency algorithm runs exact modes only).
  Algorithm decide_algorithm(const std::vector<CallDesc>& all, const Collective& cd, Mode run) const;
  /// Step 3: whether this rank's descriptor carries its data (the latency
  /// algorithm): a call of at most latency_bytes with a one-hop schedule, on
  /// point-to-point links, that is exact, or lossy with this rank's hints
  /// expecting rank 0 to run it exact (`hints->lighter`: the policy proposes
  /// none for small messages, and the ranks that follow rank 0 pass the same
  /// expectation). Matching exact calls carry on every rank (latency_bytes
  /// and the links are agreed at creation); a lossy one runs the latency
  /// algorithm only where every rank carried and the exact run keeps the
  /// bound (4.), else its carried data goes unused.
  bool carries(const Collective& cd, Mode m, size_t bytes, const PolicyHints* hints) const;
  /// This rank's side of `cd` under its one-hop schedule.
  algorithms::OneHopPart one_hop_part(const Collective& cd, DataType t);
  /// Step 6 of the latency algorithm: checks the sizes that came, combines
  /// them into the output, releases their slots.
  /// With direct_hops: the collective's direct schedule between the ranks'
  /// buffers (CallProtocol::direct).
  void run_latency(const Collective& cd, const algorithms::OneHopPart& part, const Carried& carried, const CallDesc& d,
                   bool direct_hops, CallState& call);
  /// Whether a `bytes` message of collective `c` may run direct (the peers'
  /// memory reachable, the message at least core::direct_from's size: the
  /// same on every rank of a matching call, whatever its buffers).
  bool direct_size(Coll c, size_t bytes) const;
  /// What this rank proposes in its descriptor when the hints name none:
  /// CommConfig::algorithm (NCCLZ_ALGO), 1 + int(Algorithm), 0 for auto.
  uint8_t configured_algorithm() const;

  Runtime& rt_;
  std::string refusal_;  ///< refuse_next's reason, taken by the next call
};

}  // namespace ncclz::core
