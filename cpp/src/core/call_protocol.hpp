// The call descriptor protocol (the record is core/call_desc.hpp): how a
// rank describes a call, the rounds that exchange descriptors, and the checks
// that turn a bad or mismatched call into the same error on every rank before
// any data moves.
//
// Collectives: every rank allgathers its descriptor around channel 0's ring
// (one raw slot per hop) and compares all N itself. A second, smaller round
// follows only on the eager lossy path (the quantizer's outliers). all_to_allv
// holds a counts round after a matching descriptor round: every rank
// allgathers its send and receive counts (2N uint64 each, so N^2 numbers
// reach every rank) and checks every pair itself, so a mismatch is the same
// RemoteError on every rank before any data moves. Send/recv:
// the sender posts its descriptor on the pair's link, the receiver answers
// with its own, and each side checks the pair.
//
// A failure of a round while it moves bytes aborts the communicator (the
// FIFOs are out of step); argument errors and mismatches do not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/call_desc.hpp"
#include "core/call_state.hpp"
#include "core/channels.hpp"
#include "core/collective.hpp"
#include "ncclz/policy_hints.hpp"

namespace ncclz::core {

/// This rank's descriptor of a call with effective mode m (seq and flags are
/// the caller's). Only a strictly lighter proposal is carried (None <
/// Lossless < lossy), and a codec effort in [0, 1].
CallDesc make_desc(const Collective& cd, DataType t, Mode m, const Compression& c, const PolicyHints* hints);

class CallProtocol {
 public:
  CallProtocol(int rank, int nranks, RingChannels& channels, PeerLinks& peers, FailFn fail);

  /// Every rank's descriptor (all[r] is rank r's).
  std::vector<CallDesc> exchange(const CallDesc& mine, CallState& call);
  /// Throws InvalidArgument for this rank's own argument error (my_err), else
  /// RemoteError for another rank's, or for calls that do not match.
  void check_all(const std::vector<CallDesc>& all, const std::string& my_err) const;
  /// The eager lossy path's second round: whether any rank's quantizer
  /// reported outliers (mine: this rank's count).
  bool any_outliers(uint64_t seq, size_t mine, CallState& call);
  /// all_to_allv's counts round (after check_all passed, so every rank holds
  /// it): every rank's send_counts and recv_counts (nranks entries each),
  /// matched pairwise. Throws RemoteError on every rank naming the ranks and
  /// counts where rank i's send_counts[j] differs from rank j's
  /// recv_counts[i]; else returns the elements all ranks send together.
  uint64_t exchange_counts(const CallDesc& mine, const size_t* send_counts, const size_t* recv_counts, CallState& call);

  /// Send/recv: exchanges descriptors with `peer` on its link (the sender's
  /// first) and checks the pair; returns the peer's. Throws InvalidArgument
  /// for this rank's own argument error (my_err), RemoteError for the peer's
  /// or a mismatch.
  CallDesc handshake(int peer, bool sending, const CallDesc& mine, const std::string& my_err, CallState& call);

 private:
  std::string me() const;
  int rank_, nranks_;
  RingChannels& channels_;
  PeerLinks& peers_;
  FailFn fail_;
};

}  // namespace ncclz::core
