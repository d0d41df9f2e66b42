// The call descriptor protocol (see call_protocol.hpp).
#include "core/call_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "ncclz/error.hpp"
#include "transport/slot_ring.hpp"

namespace ncclz::core {

CallDesc make_desc(const Collective& cd, DataType t, Mode m, const Compression& c, const PolicyHints* hints) {
  CallDesc d;
  d.coll = uint8_t(cd.coll);
  d.count = cd.count;
  d.dtype = uint8_t(t);
  d.op = uint8_t(cd.op);
  d.root = cd.root;
  d.peer = cd.peer;
  d.mode = uint8_t(m);
  d.bound = (is_lossy(m) ? c.bound : 0.0);
  if (m != Mode::None) std::memcpy(d.codec, c.codec.data(), std::min(c.codec.size(), sizeof d.codec - 1));
  if (hints) {
    const int lighter = hints->lighter;
    if (lighter >= 0 && lighter < std::min(int(m), int(Mode::Lossless) + 1)) d.lighter = uint8_t(lighter + 1);
    const double margin = hints->rans_margin;
    if (margin >= 0 && margin <= 1) d.rans_margin = uint8_t(std::lround(margin * 100) + 1);
    if (hints->algorithm >= 0 && hints->algorithm <= int(Algorithm::Hierarchical)) {
      d.algorithm = uint8_t(hints->algorithm + 1);
    }
  }
  return d;
}

CallProtocol::CallProtocol(int rank, int nranks, RingChannels& channels, PeerLinks& peers, FailFn fail)
    : rank_(rank),
      nranks_(nranks),
      ahead_(size_t(nranks)),
      queued_(size_t(nranks)),
      held_(size_t(nranks), 0),
      channels_(channels),
      peers_(peers),
      fail_(std::move(fail)) {}

std::string CallProtocol::me() const { return "ncclz rank " + std::to_string(rank_) + ": "; }

bool CallProtocol::one_hop() const { return nranks_ > 1 && peers_.link((rank_ + 1) % nranks_) != nullptr; }

// One hop (call_protocol.hpp): send this rank's message to every peer first
// (rank+1, rank+2, ...), then read one from every peer (rank-1, rank-2, ...).
// Sending never waits for a receive: a link holds at most this round's
// message and the previous round's (its receiver releases that one before its
// call returns), and K >= 2.
std::vector<CallDesc> CallProtocol::exchange(const CallDesc& mine, CallState& call, Carried* carry) {
  const transport::ShortWaits short_waits;
  check_nothing_ahead(mine);
  if (!one_hop()) return ring_exchange(mine, call);
  const size_t N = size_t(nranks_);
  std::vector<CallDesc> all(N);
  all[size_t(rank_)] = mine;
  if (carry) carry->in.assign(N, algorithms::Bytes{});
  try {
    for (int k = 1; k < nranks_; ++k) {
      const int q = (rank_ + k) % nranks_;
      post_desc(q, mine, carry ? carry->out[size_t(q)] : algorithms::Bytes{}, call);
    }
    for (int k = 1; k < nranks_; ++k) {
      const int q = (rank_ + nranks_ - k) % nranks_;
      const algorithms::Bytes extra = wait_desc(q, &all[size_t(q)], call);
      if (carry && extra.size) {
        carry->in[size_t(q)] = extra;
        held_[size_t(q)] = 1;
      } else {
        peers_.link(q)->recv->release();
      }
    }
    // A rank may leave right after a barrier: its messages must have left it.
    flush_peers(call);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("call descriptor exchange failed: ") + e.what());
    throw;
  }
  // A send or recv here is another kind of message on the same links (its
  // data follows): they are out of step for good.
  for (size_t q = 0; q < N; ++q) {
    const Coll c = Coll(all[q].coll);
    if (q != size_t(rank_) && (c == Coll::Send || c == Coll::Recv)) {
      const std::string why = "rank " + std::to_string(q) + " called " + describe(all[q]) + " where this rank called " +
                              describe(mine) + " (call #" + std::to_string(mine.seq) + ")";
      fail_("mismatched calls: " + why);
      throw RemoteError(me() + "mismatched calls: " + why +
                        ". Every rank must make the same collective calls in the same order, and each send must "
                        "meet its recv; the point-to-point links are out of step, so the communicator was aborted");
    }
  }
  return all;
}

void CallProtocol::post_desc(int q, const CallDesc& d, algorithms::Bytes extra, CallState& call) {
  transport::SendConn* s = peers_.link(q)->send.get();
  uint8_t* slot = s->acquire(call.deadline());
  std::memcpy(slot, &d, sizeof d);
  if (extra.size) std::memcpy(slot + sizeof d, extra.data, extra.size);
  s->post(sizeof d + extra.size);
}

algorithms::Bytes CallProtocol::wait_desc(int q, CallDesc* d, CallState& call) {
  transport::RecvConn* r = peers_.link(q)->recv.get();
  const transport::SlotView v = r->wait(call.deadline());
  if (v.bytes < sizeof(CallDesc)) {
    r->release();
    throw RemoteError(me() + "rank " + std::to_string(q) + " sent a message of " + std::to_string(v.bytes) +
                      " bytes where this rank expected a call descriptor (" + std::to_string(sizeof(CallDesc)) +
                      " bytes or more): the point-to-point links are out of step");
  }
  std::memcpy(d, v.data, sizeof(CallDesc));
  return {v.data + sizeof(CallDesc), v.bytes - sizeof(CallDesc)};
}

void CallProtocol::post_bytes(int q, algorithms::Bytes b, CallState& call) {
  transport::SendConn* c = peers_.link(q)->send.get();
  uint8_t* slot = c->acquire(call.deadline());
  if (b.size) std::memcpy(slot, b.data, b.size);
  c->post(b.size);
}

algorithms::Bytes CallProtocol::wait_bytes(int j, size_t want, const char* round, uint64_t seq, CallState& call) {
  transport::RecvConn* c = peers_.link(j)->recv.get();
  const transport::SlotView v = c->wait(call.deadline());
  if (v.bytes != want) {
    c->release();
    throw RemoteError(me() + "rank " + std::to_string(j) + " sent " + std::to_string(v.bytes) + " bytes in the " +
                      round + " of call #" + std::to_string(seq) + " where this rank expected " + std::to_string(want) +
                      ": the point-to-point links are out of step");
  }
  return {v.data, v.bytes};
}

// Step s posts piece s of every peer's block (s >= 1), then reduces piece
// s - 1 of this rank's own: a rank is never more than one piece ahead of what
// it has released, so with K >= 2 slots per link every wait is for a peer's
// earlier step (no cycle), and pieces travel while the previous one is reduced.
uint64_t CallProtocol::two_hop_first(const algorithms::OneHopPart& part, const Carried& carried, uint64_t seq,
                                     CallState& call) {
  const transport::ShortWaits short_waits;
  const size_t own = algorithms::two_hop_pieces(part, rank_);
  size_t most = own;
  for (int q = 0; q < nranks_; ++q) most = std::max(most, algorithms::two_hop_pieces(part, q));
  uint64_t sent = 0;
  std::vector<algorithms::Bytes> in(static_cast<size_t>(nranks_));
  try {
    for (size_t s = 0; s <= most; ++s) {
      for (int k = 1; k < nranks_ && s >= 1; ++k) {
        const int q = (rank_ + k) % nranks_;
        if (s >= algorithms::two_hop_pieces(part, q)) continue;
        const algorithms::Bytes b = algorithms::two_hop_piece(part, part.src, q, s);
        post_bytes(q, b, call);
        sent += b.size;
      }
      if (s == 0 || s > own) continue;
      const size_t piece = s - 1;
      if (piece == 0) {
        algorithms::two_hop_reduce(part, carried.in.data(), 0);
        release_carried();
        continue;
      }
      const size_t want = algorithms::two_hop_piece(part, part.src, rank_, piece).size;
      for (int k = 1; k < nranks_; ++k) {
        const int j = (rank_ + nranks_ - k) % nranks_;
        in[size_t(j)] = wait_bytes(j, want, "first round", seq, call);
      }
      algorithms::two_hop_reduce(part, in.data(), piece);
      for (int k = 1; k < nranks_; ++k) peers_.link((rank_ + k) % nranks_)->recv->release();
    }
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("latency algorithm, first round: ") + e.what());
    throw;
  }
  return sent;
}

// Step s posts piece s of this rank's result to every peer, then copies
// piece s of every peer's result as it comes (each released at once).
uint64_t CallProtocol::two_hop_second(const algorithms::OneHopPart& part, uint64_t seq, CallState& call) {
  const transport::ShortWaits short_waits;
  const size_t own = algorithms::two_hop_pieces(part, rank_);
  size_t most = own;
  for (int q = 0; q < nranks_; ++q) most = std::max(most, algorithms::two_hop_pieces(part, q));
  uint64_t sent = 0;
  try {
    for (size_t s = 0; s < most; ++s) {
      if (s < own) {
        const algorithms::Bytes b = algorithms::two_hop_piece(part, part.dst, rank_, s);
        for (int k = 1; k < nranks_; ++k) post_bytes((rank_ + k) % nranks_, b, call);
        sent += b.size * uint64_t(nranks_ - 1);
      }
      for (int k = 1; k < nranks_; ++k) {
        const int j = (rank_ + nranks_ - k) % nranks_;
        if (s >= algorithms::two_hop_pieces(part, j)) continue;
        const algorithms::Bytes to = algorithms::two_hop_piece(part, part.dst, j, s);
        const algorithms::Bytes got = wait_bytes(j, to.size, "second round", seq, call);
        if (got.size) std::memcpy(const_cast<uint8_t*>(to.data), got.data, got.size);
        peers_.link(j)->recv->release();
      }
    }
    flush_peers(call);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("latency algorithm, second round: ") + e.what());
    throw;
  }
  return sent;
}

void CallProtocol::check_no_notice(const CallDesc& mine) {
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    const auto* end = dynamic_cast<const transport::RingEnd*>(peers_.link(q)->recv.get());
    std::string note;
    const transport::CloseWhy why = end ? end->other_side(&note) : transport::kClosedNormally;
    if (why == transport::kClosedNormally) continue;
    // It read this rank's message before it closed: it had its part of the
    // call (and maybe finished it) when it aborted; the data stands.
    const auto* out = dynamic_cast<const transport::RingSendConn*>(peers_.link(q)->send.get());
    if (out && out->consumed()) continue;
    fail_("a peer's notice during " + describe(mine) + ": " + note);
    const std::string what = me() + describe(mine) + " (call #" + std::to_string(mine.seq) + "): " + note;
    if (why == transport::kClosedCorrupt) throw CorruptData(what);
    throw Aborted(what);
  }
}

void CallProtocol::release_carried() {
  for (int q = 0; q < nranks_; ++q) {
    if (!held_[size_t(q)]) continue;
    held_[size_t(q)] = 0;
    peers_.link(q)->recv->release();
  }
}

void CallProtocol::flush_peers(CallState& call) {
  for (int q = 0; q < nranks_; ++q) {
    if (q != rank_) peers_.link(q)->send->flush(call.deadline());
  }
}

std::vector<CallDesc> CallProtocol::ring_exchange(const CallDesc& mine, CallState& call) {
  std::vector<CallDesc> all(static_cast<size_t>(nranks_));
  if (nranks_ == 1) {
    all[0] = mine;
    return all;
  }
  prims::ChannelStats st;  // control traffic is not counted in the call's stats
  try {
    prims::Prims p = channels_.control(&st, call.timeout);
    algorithms::ring_all_gather(p, {rank_, nranks_}, &mine, all.data(), sizeof(CallDesc), sizeof(CallDesc),
                                sizeof(CallDesc));
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("call descriptor exchange failed: ") + e.what());
    throw;
  }
  return all;
}

void CallProtocol::check_all(const std::vector<CallDesc>& all, const std::string& my_err) const {
  if (!my_err.empty()) {
    throw InvalidArgument(me() + describe(all[size_t(rank_)]) + ": " + my_err);
  }
  for (int r = 0; r < nranks_; ++r) {
    if (all[size_t(r)].flags & kInvalid) {
      throw RemoteError(me() + "rank " + std::to_string(r) + " called call #" + std::to_string(all[size_t(r)].seq) +
                        " " + describe(all[size_t(r)]) +
                        " with invalid arguments (it raised InvalidArgument); the call was cancelled on every rank");
    }
  }
  for (int r = 1; r < nranks_; ++r) {
    if (!same_call(all[0], all[size_t(r)])) {
      throw RemoteError(me() + "mismatched calls: rank 0 called call #" + std::to_string(all[0].seq) + " " +
                        describe(all[0]) + " but rank " + std::to_string(r) + " called call #" +
                        std::to_string(all[size_t(r)].seq) + " " + describe(all[size_t(r)]) +
                        ". Every rank must make the same collective calls in the same order (same count, type, "
                        "op, root and compression); the call was cancelled on every rank");
    }
  }
}

bool CallProtocol::any_outliers(uint64_t seq, size_t mine, CallState& call) {
  CallDesc d;
  d.coll = uint8_t(Coll::Outliers);
  d.seq = seq;
  if (mine) d.flags |= kOutliers;
  const auto all = exchange(d, call);
  bool any = false;
  for (const auto& x : all) {
    if (x.coll != d.coll || x.seq != seq) {
      fail_("lossy outlier round out of step");
      throw RemoteError(me() + "the lossy outlier round of call #" + std::to_string(seq) +
                        " is out of step with another rank");
    }
    any |= (x.flags & kOutliers) != 0;
  }
  return any;
}

uint64_t CallProtocol::exchange_counts(const CallDesc& mine, const size_t* send_counts, const size_t* recv_counts,
                                       CallState& call) {
  const transport::ShortWaits short_waits;
  // Rank r's record: its call's sequence number, then send_counts[0..N), then
  // recv_counts[0..N).
  const size_t N = size_t(nranks_), rec = 2 * N + 1;
  std::vector<uint64_t> own(rec), all(rec * N);
  own[0] = mine.seq;
  for (size_t j = 0; j < N; ++j) {
    own[1 + j] = send_counts[j];
    own[1 + N + j] = recv_counts[j];
  }
  if (nranks_ == 1) {
    all = own;
  } else {
    prims::ChannelStats st;  // control traffic
    try {
      prims::Prims p = channels_.control(&st, call.timeout);
      const size_t bytes = rec * sizeof(uint64_t);
      // Chunks of one slice: each ring step sends at most one slot before it
      // receives (deadlock-free for any K >= 2), however large N makes a record.
      algorithms::ring_all_gather(p, {rank_, nranks_}, own.data(), all.data(), bytes, bytes, p.slice_elems());
    } catch (const Aborted&) {
      throw;
    } catch (const std::exception& e) {
      fail_(std::string("all_to_allv counts exchange failed: ") + e.what());
      throw;
    }
  }
  auto sent = [&](size_t i, size_t j) { return all[i * rec + 1 + j]; };
  auto expected = [&](size_t j, size_t i) { return all[j * rec + 1 + N + i]; };
  uint64_t total = 0;
  std::string bad;
  size_t nbad = 0;
  for (size_t i = 0; i < N; ++i) {
    if (all[i * rec] != mine.seq) {
      fail_("all_to_allv counts round out of step");
      throw RemoteError(me() + "the counts round of all_to_allv call #" + std::to_string(mine.seq) +
                        " is out of step with rank " + std::to_string(i));
    }
    for (size_t j = 0; j < N; ++j) {
      total += sent(i, j);
      if (sent(i, j) == expected(j, i)) continue;
      if (++nbad <= 4) {
        bad += (bad.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + " sends " +
               std::to_string(sent(i, j)) + " elements to rank " + std::to_string(j) + " (its send_counts[" +
               std::to_string(j) + "]) but rank " + std::to_string(j) + " expects " + std::to_string(expected(j, i)) +
               " from rank " + std::to_string(i) + " (its recv_counts[" + std::to_string(i) + "])";
      }
    }
  }
  if (nbad) {
    throw RemoteError(me() + "mismatched counts in all_to_allv call #" + std::to_string(mine.seq) + ": " + bad +
                      (nbad > 4 ? "; and " + std::to_string(nbad - 4) + " more pairs" : std::string()) +
                      ". Every rank's send_counts[j] must equal rank j's recv_counts for it; the call was cancelled "
                      "on every rank");
  }
  return total;
}

void CallProtocol::check_p2p(int peer, bool sending, const CallDesc& mine, const std::string& my_err,
                             const CallDesc& theirs) const {
  const std::string p = std::to_string(peer), r = std::to_string(rank_);
  if (theirs.coll != uint8_t(Coll::Send) && theirs.coll != uint8_t(Coll::Recv)) {
    // A collective's descriptor (and maybe its data) where this rank's
    // send/recv expected the pair's: the links are out of step for good.
    const std::string why = "rank " + p + " called " + describe(theirs) + " where this rank called " + describe(mine);
    fail_("mismatched calls: " + why);
    throw RemoteError(me() + "mismatched calls: " + why +
                      ". Every rank must make the same collective calls in the same order, and each send must meet "
                      "its recv; the point-to-point links are out of step, so the communicator was aborted");
  }
  if (!my_err.empty()) throw InvalidArgument(me() + describe(mine) + ": " + my_err);
  if (theirs.flags & kInvalid) {
    throw RemoteError(me() + describe(mine) + ": the " + (sending ? "receiving" : "sending") + " rank " + p +
                      " called " + describe(theirs) + " with invalid arguments; the transfer was cancelled");
  }
  const CallDesc& s = sending ? mine : theirs;
  const CallDesc& rv = sending ? theirs : mine;
  std::string why;
  if (sending && (theirs.coll != uint8_t(Coll::Recv) || theirs.root != rank_)) {
    why = "it is not a matching recv";
  } else if (!sending && (theirs.coll != uint8_t(Coll::Send) || theirs.peer != rank_)) {
    why = "it is not a matching send";
  } else {
    why = p2p_mismatch(s, rv);
  }
  if (!why.empty()) {
    throw RemoteError(me() + "mismatched send/recv: rank " + (sending ? r : p) + " called " + describe(s) +
                      " but rank " + (sending ? p : r) + " called " + describe(rv) + " (" + why +
                      "); the transfer was cancelled on both ranks");
  }
}

void CallProtocol::p2p_post(int peer, const CallDesc& mine, CallState& call) {
  try {
    post_desc(peer, mine, {}, call);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("grouped send/recv: descriptor to rank ") + std::to_string(peer) + " failed: " + e.what());
    throw;
  }
}

CallDesc CallProtocol::p2p_wait(int peer, CallState& call) {
  std::deque<CallDesc>& ahead = ahead_[size_t(peer)];
  if (!ahead.empty()) {
    const CallDesc d = ahead.front();
    ahead.pop_front();
    return d;
  }
  try {
    return next_desc(peer, call);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string("grouped send/recv: descriptor from rank ") + std::to_string(peer) + " failed: " + e.what());
    throw;
  }
}

void CallProtocol::p2p_answer(int peer, const CallDesc& mine, CallState& call) {
  std::deque<CallDesc>& q = queued_[size_t(peer)];
  if (q.empty() && peers_.link(peer)->send->writable()) {
    p2p_post(peer, mine, call);
    return;
  }
  q.push_back(mine);
  ++nqueued_;
}

void CallProtocol::post_first_queued(int peer, CallState& call) {
  std::deque<CallDesc>& q = queued_[size_t(peer)];
  p2p_post(peer, q.front(), call);
  q.pop_front();
  --nqueued_;
}

void CallProtocol::p2p_flush(int peer, CallState& call) {
  while (!queued_[size_t(peer)].empty()) post_first_queued(peer, call);
}

bool CallProtocol::post_queued(CallState& call) {
  bool any = false;
  for (int p = 0; p < nranks_ && nqueued_ > 0; ++p) {
    for (; !queued_[size_t(p)].empty() && peers_.link(p)->send->writable(); any = true) post_first_queued(p, call);
  }
  return any;
}

int CallProtocol::p2p_wait_any(const std::vector<int>& peers, int first, CallState& call, CallDesc* d) {
  for (int q : peers) {
    if ((peers.size() == 1 && nqueued_ == 0) || !ahead_[size_t(q)].empty()) {
      *d = p2p_wait(q, call);
      return q;
    }
  }
  auto start = Clock::now();
  size_t at = size_t(std::find(peers.begin(), peers.end(), first) - peers.begin()) % peers.size();
  bool long_slice = true;  // the first wait, on `first`: what a group of groups waits for next
  for (;;) {
    if (nqueued_ > 0 && post_queued(call)) start = Clock::now();  // (progress)
    for (int q : peers) {
      if (peers_.link(q)->recv->ready()) {
        *d = p2p_wait(q, call);
        return q;
      }
    }
    const int q = peers[at];
    const auto now = Clock::now();
    if (now - start >= call.timeout) {
      std::string who;
      for (int p : peers) who += (who.empty() ? "" : ", ") + std::to_string(p);
      auto secs = [](Clock::duration t) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3g", std::chrono::duration<double>(t).count());
        return std::string(b);
      };
      const std::string why = "timed out: no progress for " + secs(now - start) + " s (the limit is " +
                              secs(call.timeout) +
                              " s: NCCLZ_TIMEOUT or the call's timeout) while this rank's group waited for a "
                              "send/recv descriptor from any of ranks " +
                              who + "; they are stuck, not making matching calls, or their links stalled";
      fail_("grouped send/recv: " + why);
      throw Timeout(me() + "grouped send/recv: " + why);
    }
    try {
      const auto slice = long_slice && nqueued_ == 0 ? kFirstSlice : kAnySlice;
      peers_.link(q)->recv->wait(std::min(now + slice, start + call.timeout));
    } catch (const Timeout&) {
      at = (at + 1) % peers.size();  // nothing from q within the slice: wait on the next one
      long_slice = false;
      continue;
    } catch (const Aborted&) {
      throw;
    } catch (const std::exception& e) {
      fail_(std::string("grouped send/recv: descriptor from rank ") + std::to_string(q) + " failed: " + e.what());
      throw;
    }
    *d = p2p_wait(q, call);  // (the slot the wait returned)
    return q;
  }
}

CallDesc CallProtocol::next_desc(int q, CallState& call) {
  CallDesc d;
  wait_desc(q, &d, call);  // (a collective's carried data, if any, is not looked at)
  peers_.link(q)->recv->release();
  return d;
}

void CallProtocol::check_nothing_ahead(const CallDesc& mine) {
  for (int q = 0; q < nranks_; ++q) {
    if (ahead_[size_t(q)].empty()) continue;
    const std::string why = "rank " + std::to_string(q) + " called " + describe(ahead_[size_t(q)].front()) +
                            " in a group, which waits for its recv, where this rank called " + describe(mine);
    fail_("mismatched calls: " + why);
    throw RemoteError(me() + "mismatched calls: " + why +
                      ". Each send must meet its recv before the ranks' next collective; the point-to-point links "
                      "are out of step, so the communicator was aborted");
  }
}

// A group's send descriptors come before anything else of it on the link:
// kMoreSends says another follows. A single send waiting for its answer
// reads past them (the group answers while it waits for its own sends'
// answers); a single recv reads the rest of them before the data of the
// first. Both keep them for the recvs that follow (p2p_wait). A plain send's
// descriptor where a send's answer was due is a mismatch, as before: two
// plain sends to each other.
CallDesc CallProtocol::handshake(int peer, bool sending, const CallDesc& mine, const std::string& my_err,
                                 CallState& call) {
  const transport::ShortWaits short_waits;
  std::deque<CallDesc>& ahead = ahead_[size_t(peer)];
  auto grouped_send = [](const CallDesc& d) { return d.coll == uint8_t(Coll::Send) && (d.flags & kGrouped) != 0; };
  auto out_of_step = [&] {
    return RemoteError(me() + "rank " + std::to_string(peer) + " posted more than " + std::to_string(kMaxAhead) +
                       " grouped send descriptors ahead of their recvs: the point-to-point links are out of step");
  };
  CallDesc theirs;
  try {
    if (sending) {
      post_desc(peer, mine, {}, call);
      for (theirs = next_desc(peer, call); grouped_send(theirs); theirs = next_desc(peer, call)) {
        if (ahead.size() >= kMaxAhead) throw out_of_step();
        ahead.push_back(theirs);
      }
    } else {
      if (ahead.empty()) {
        theirs = next_desc(peer, call);
      } else {
        theirs = ahead.front();
        ahead.pop_front();
      }
      const CallDesc* last = ahead.empty() ? &theirs : &ahead.back();
      while (grouped_send(*last) && (last->flags & kMoreSends)) {
        if (ahead.size() >= kMaxAhead) throw out_of_step();
        ahead.push_back(next_desc(peer, call));
        last = &ahead.back();
      }
      post_desc(peer, mine, {}, call);
    }
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    fail_(std::string(sending ? "send" : "recv") + " handshake failed: " + e.what());
    throw;
  }
  check_p2p(peer, sending, mine, my_err, theirs);
  return theirs;
}

}  // namespace ncclz::core
