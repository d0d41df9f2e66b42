// The call descriptor protocol (the record is core/call_desc.hpp): how a
// rank describes a call, the rounds that exchange descriptors, and the checks
// that turn a bad or mismatched call into the same error on every rank before
// any data moves.
//
// Collectives: every rank sends its descriptor to every other rank over the
// point-to-point links, one message each (one hop), and compares all N
// itself; a call on the latency path carries its data in the same message,
// after the descriptor (algorithms/one_hop.hpp: what each peer gets), so that
// it is one round of messages in all. Every rank sends exactly one message to
// each peer and reads exactly one from each in every round, whatever its call
// was, so the links stay in step after a mismatch. Without point-to-point
// links (NCCLZ_P2P=0) the descriptors go around channel 0's ring instead
// (one raw slot per hop, N-1 hops) and nothing is carried. A second, smaller round
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

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "algorithms/one_hop.hpp"
#include "core/buffer.hpp"
#include "core/call_desc.hpp"
#include "core/call_state.hpp"
#include "core/channels.hpp"
#include "core/collective.hpp"
#include "core/direct_schedule.hpp"
#include "ncclz/policy_hints.hpp"
#include "transport/peer_memory.hpp"

namespace ncclz::core {

/// This rank's descriptor of a call with effective mode m (seq and flags are
/// the caller's). Only a strictly lighter proposal is carried (None <
/// Lossless < lossy), and a codec effort in [0, 1].
CallDesc make_desc(const Collective& cd, DataType t, Mode m, const Compression& c, const PolicyHints* hints);

/// The data a collective carries in its descriptor messages (the latency
/// algorithm): out[q], this rank's bytes for rank q (sent after the
/// descriptor); in[q], filled by exchange(): the bytes rank q sent after its
/// descriptor, read in place in the slot they came in until
/// CallProtocol::release_carried().
struct Carried {
  std::vector<algorithms::Bytes> out, in;
};

/// What a direct call carries after its descriptor to every peer
/// (CallProtocol::direct): where its buffers are, in its own address space
/// (host byte order; readable with transport::PeerMemory).
struct DirectAddresses {
  uint64_t src = 0;
  uint64_t dst = 0;
};

class CallProtocol {
 public:
  /// The most send descriptors of a peer's groups read ahead (a group posts
  /// at most nslots to one peer; more means the links are out of step).
  static constexpr size_t kMaxAhead = 1024;
  CallProtocol(int rank, int nranks, RingChannels& channels, PeerLinks& peers, FailFn fail);

  /// Whether descriptors go one hop over the point-to-point links (and can
  /// carry data); else around the ring.
  bool one_hop() const;
  /// Every rank's descriptor (all[r] is rank r's). With `carry` (needs
  /// one_hop()), this rank's carry->out[q] goes to rank q after its
  /// descriptor, and carry->in[q] is what rank q sent after its own (empty if
  /// nothing): those slots stay held until release_carried().
  std::vector<CallDesc> exchange(const CallDesc& mine, CallState& call, Carried* carry = nullptr);
  /// Releases the slots exchange() kept for carried data (none: nothing).
  void release_carried();
  /// Throws Aborted (or CorruptData) when a peer closed its link to this
  /// rank with a notice without having read this rank's message of the round:
  /// it aborted after it posted its own message but before it had everyone's
  /// (its own call failed, e.g. it timed out waiting for this rank). The
  /// latency algorithm checks it before it uses carried data, so that peers
  /// joining a call late fail too instead of completing it (as on the ring,
  /// which needs every rank after the exchange); a peer that had read this
  /// rank's message and aborted afterwards leaves the call to complete.
  void check_no_notice(const CallDesc& mine);
  /// The rest of a two-hop schedule's first round (algorithms/one_hop.hpp,
  /// two_hop_all_reduce), after exchange() carried every block's piece 0 and
  /// the sizes were checked: pieces 1, 2, ... of block q to rank q, while
  /// this rank's own block is reduced piece by piece as its pieces come in
  /// (piece 0 from `carried`, whose slots it releases; each later piece's
  /// size checked). A failure aborts the communicator. Returns the bytes this
  /// rank sent after the descriptors.
  uint64_t two_hop_first(const algorithms::OneHopPart& part, const Carried& carried, uint64_t seq, CallState& call);
  /// The second round of a two-hop schedule: the pieces of this rank's
  /// reduced block to every peer, and every peer's pieces into this rank's
  /// output, each size checked. A failure aborts the communicator. Returns
  /// the bytes this rank sent.
  uint64_t two_hop_second(const algorithms::OneHopPart& part, uint64_t seq, CallState& call);
  /// A direct call (core/direct_schedule.hpp): the schedule's copies
  /// straight between this rank's buffers and its peers', after exchange()
  /// carried every rank's DirectAddresses to every peer (their slots are
  /// released here), then the closing round of empty messages
  /// (core/direct_call.cpp). A failure aborts the communicator. Returns the
  /// bytes this rank read and wrote of its peers' buffers.
  uint64_t direct(const DirectSchedule& s, const algorithms::OneHopPart& part, const Carried& carried, uint64_t seq,
                  CallState& call, const transport::PeerMemory& mem);
  /// Flushes the point-to-point links this rank sent on (complete only once
  /// the bytes have left the process: the socket proxy may still write them).
  void flush_peers(CallState& call);
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
  /// or a mismatch. Where the peer is a group (kGrouped), its sends'
  /// descriptors may come before what this call waits for, and always before
  /// its data: a send waiting for its answer, or a recv whose sender's
  /// descriptor says kMoreSends, reads them ahead, and later recvs (single or
  /// grouped: p2p_wait) take them from there.
  CallDesc handshake(int peer, bool sending, const CallDesc& mine, const std::string& my_err, CallState& call);
  /// The checks of handshake() on a pair's descriptors, for a group's
  /// phases (core/p2p_group.cpp): throws as handshake does; a collective's
  /// descriptor where a send or recv's was due aborts the communicator.
  void check_p2p(int peer, bool sending, const CallDesc& mine, const std::string& my_err, const CallDesc& theirs) const;
  /// A group's phases: post this rank's descriptor to `peer` / take the next
  /// one from it (one read ahead first, else from the link, its slot
  /// released). Failures abort the communicator.
  void p2p_post(int peer, const CallDesc& mine, CallState& call);
  CallDesc p2p_wait(int peer, CallState& call);
  /// A group's answer to `peer`: posted now where its link has a free slot
  /// and nothing queued, else queued (a link carries the group's send
  /// descriptors and its answers, which may outnumber its slots: a group
  /// that waited for a slot could wait for a peer waiting for it). The
  /// queue goes out as slots free (p2p_wait_any) or with p2p_flush.
  void p2p_answer(int peer, const CallDesc& mine, CallState& call);
  /// Posts what is queued for `peer`, waiting for slots.
  void p2p_flush(int peer, CallState& call);
  /// The next descriptor from whichever of `peers` has one first (returns
  /// that peer): one read ahead, else one posted, else a wait on `first` for
  /// kFirstSlice, then on each in turn for kAnySlice at a time, so that no
  /// peer's message waits long while this rank waits for another's; queued
  /// answers go out meanwhile (every kAnySlice). No message from any of
  /// them for the call's timeout: Timeout. Failures abort the communicator.
  /// (Where every peer is a group, `first` in the calls' order is what the
  /// group waits for next and rarely takes longer than kFirstSlice; a wait
  /// that ends in a slice's timeout costs an exception and may wait on the
  /// wrong peer, which cost small groups of 4 ranks on 2 cores 10-40% with
  /// kAnySlice alone.)
  int p2p_wait_any(const std::vector<int>& peers, int first, CallState& call, CallDesc* d);
  static constexpr std::chrono::milliseconds kFirstSlice{25};
  static constexpr std::chrono::milliseconds kAnySlice{2};

 private:
  std::string me() const;
  std::vector<CallDesc> ring_exchange(const CallDesc& mine, CallState& call);
  /// Posts `b` alone (no descriptor) as the next message to rank q.
  void post_bytes(int q, algorithms::Bytes b, CallState& call);
  /// The next message from rank j, which must hold `want` bytes (else
  /// RemoteError: the links are out of step); its slot stays held.
  algorithms::Bytes wait_bytes(int j, size_t want, const char* round, uint64_t seq, CallState& call);
  /// One message to rank q on its point-to-point link: d, then `extra`.
  void post_desc(int q, const CallDesc& d, algorithms::Bytes extra, CallState& call);
  /// The next message from rank q: its descriptor into *d, and the bytes
  /// after it (in the slot, which stays held: the caller releases it).
  algorithms::Bytes wait_desc(int q, CallDesc* d, CallState& call);
  /// The next message from rank q as a descriptor, its slot released.
  CallDesc next_desc(int q, CallState& call);
  /// Throws RemoteError (and aborts) where a peer group's send descriptor
  /// read ahead waits for a recv and this rank called the collective `mine`.
  void check_nothing_ahead(const CallDesc& mine);
  int rank_, nranks_;
  /// By peer: send descriptors of its groups read off its link ahead of their
  /// recvs (handshake), oldest first; at most nslots.
  std::vector<std::deque<CallDesc>> ahead_;
  /// By peer: a group's answers that found no free slot (p2p_answer).
  std::vector<std::deque<CallDesc>> queued_;
  size_t nqueued_ = 0;
  /// Posts queued answers while their links have free slots; true if any went.
  bool post_queued(CallState& call);
  /// Posts the oldest answer queued for `peer` (waiting for a slot).
  void post_first_queued(int peer, CallState& call);
  Buffer direct_in_;           ///< direct(): the schedules' scratch (the peers' pieces)
  std::vector<uint8_t> held_;  ///< by peer: a slot with carried data is held
  RingChannels& channels_;
  PeerLinks& peers_;
  FailFn fail_;
};

}  // namespace ncclz::core
