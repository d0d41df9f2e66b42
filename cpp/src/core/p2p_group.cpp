// Grouped sends and recvs (Communicator::group): the call routine's
// point_to_point steps for several calls at once.
//
// A single send or recv handshakes on its pair's link (CallProtocol::
// handshake: the sender posts its descriptor, the receiver answers with its
// own), then moves its data. Run one after another, calls that depend on each
// other wait forever: in a ring shift every rank's send waits for its
// neighbour's recv, which comes after the neighbour's own send. A group runs
// its calls in phases, every rank the same phases:
//
//   0. prepare  each call alone: its checks, its descriptor (its own sequence
//               number on its pair, as a single call's), a lossy send's plan
//               and codes (into a buffer of its own)
//   1. post     the descriptor of every send, in call order
//   2. handshake until every call has the peer's descriptor: take the next
//               message from whichever peer with something awaited posted
//               first (CallProtocol::p2p_wait_any); a send descriptor goes
//               to the next recv from that peer, which answers it with this
//               rank's descriptor, an answer to the next send to it
//   3. move     the data of every call that matched, all at once: per
//               round, one slice on each pair's outgoing stream, then one
//               slice from each incoming stream (the calls of one pair and
//               direction one after the other, in call order); on this
//               thread, or where the group's bytes take several channels
//               (RingChannels::pick) and it has several streams, on lanes:
//               min(channels, streams) of the channels' threads, stream k
//               on lane k % lanes, each lane in rounds over its own streams
//   4. finish   dequantize what arrived as codes; the stats; the first error
//
// Calls on device buffers (PeerCall::device) run on host copies
// (Runtime::group_host, by position): before phase 0 a send's buffer is
// copied to the host, and after phase 4 a recv's result to its device; a
// device this communicator cannot use refuses the call (InvalidArgument
// here, RemoteError at its peer), as any argument error does.
//
// The handshakes complete once the peers entered their groups: phase 1
// never waits (a group posts at most nslots send descriptors to a peer: its
// link's slots, which earlier calls have freed or will free without this
// group); in phase 2 no rank waits for anything but its peers' posts, and
// it posts (answers) as soon as it reads what it answers, so every message
// a rank waits for is posted. Answers never wait for a slot either: a link
// carries the group's send descriptors and then its answers, more than its
// slots where a pair has several calls both ways, so an answer that finds
// the link full is queued (CallProtocol::p2p_answer) and goes out as the
// peer, which is reading, frees slots. Each direction of a pair carries a
// group's sends' descriptors, then its answers, then its data. (Phase 2
// waits first on the peer of the first call still waiting, in call order:
// where every peer is a group, that is what it needs next. While this loop
// was written, answers that waited for a slot deadlocked a 3-rank group of
// 10 calls in about one run of two: two ranks each blocked posting an
// answer into the other's full link.)
//
// Plain calls made one after another meet a group too (NCCL's ungrouped
// calls against a peer's group). A group's descriptors say kGrouped (and a
// send's kMoreSends where another of its sends to that peer follows it), a
// plain call's do not. A plain send waiting for its answer reads past the
// group's send descriptors and keeps them for its rank's later recvs, and a
// plain recv reads the rest of them before the first one's data
// (CallProtocol::handshake). In phase 2 the group moves a plain call's data
// at once, on this thread: a plain sender's right after answering its
// descriptor (the sender sends nothing else before it), to a plain receiver
// right after its answer (it waits for nothing else); a plain recv's answer
// from a peer whose send descriptor a recv of the group still waits for is
// the answer to the group's next send there (the peer receives first, then
// sends). A plain call's turn may depend on the group's call with another
// peer (a ring whose odd ranks receive, then send, with plain calls, its
// even ranks grouping a send and a recv): the group waits on any peer,
// switching between them every kAnySlice once a wait on the first took
// kFirstSlice, so it serves whichever posts first.
//
// Phase 3 cannot deadlock: take the lowest round any loop (a rank's thread,
// or one of its lanes) is in; a loop in that round never waits to send (the
// loops that receive its streams are in that round or later, so they hold
// at most one of its slices: K >= 2 slots), so it posts the round's slices
// before it waits to receive, and what it waits for comes from loops in that
// round or later, which posted it. Nothing in this needs two ranks to split
// their streams into lanes alike. (The slice of a round is one slot: both
// ends cut the same slices from the same counts.)
#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/trace.hpp"
#include "core/call.hpp"
#include "core/device_call.hpp"
#include "core/device_work.hpp"
#include "core/lossy_call.hpp"
#include "core/validate.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

// One call of the group and everything it runs on.
struct GroupCall {
  GroupCall(Runtime& rt, const PeerCall& pc, int nch)
      : cd(pc.send ? send_desc(pc.buf, pc.count, rt.rank, pc.peer) : recv_desc(pc.buf, pc.count, rt.rank, pc.peer)),
        t(pc.type),
        c(pc.compression),
        state(),
        lossy(rt, cd, t, c, nch, state),
        staging(rt, cd, t) {}
  Collective cd;
  DataType t;
  Compression c;
  CallState state;  // what LossyCall records (fallback, bound, quantize time)
  LossyCall lossy;
  HostStaging staging;
  Mode m = Mode::None;
  CallDesc mine, theirs;
  Buffer* scratch = nullptr;  // the call's slot scratch (Runtime::group_scratch)
  std::string err;            // this rank's argument error (it travels in `mine`)
  std::exception_ptr failed;  // this call's outcome, where it is an error
  bool matched = false;       // the pair agreed: its data moves
  bool mismatched = false;    // the pair's descriptors do not match: the links are out of step
  bool moved = false;         // its data moved during the handshakes (a single call's counterpart)
  bool sending() const { return cd.coll == Coll::Send; }
  int peer() const { return sending() ? cd.peer : cd.root; }
};

// A pair's direction in phase 3: its calls' data, one after the other.
struct Stream {
  std::vector<GroupCall*> calls;
  std::vector<prims::Prims> prims;  // per call
  std::vector<void*> data;          // per call: what goes out / where it arrives
  size_t at = 0, done = 0;          // the call in progress, and its elements moved
  bool finished() const { return at == calls.size(); }
};

// The calling thread's buffer device set to `device` while it lives
// (PeerCall::kThreadBufferDevice: left as it is).
class BufferDeviceScope {
 public:
  explicit BufferDeviceScope(int device) : saved_(buffer_device()) {
    if (device != PeerCall::kThreadBufferDevice) set_buffer_device(device);
  }
  ~BufferDeviceScope() { set_buffer_device(saved_); }
  BufferDeviceScope(const BufferDeviceScope&) = delete;
  BufferDeviceScope& operator=(const BufferDeviceScope&) = delete;

 private:
  int saved_;
};

// A group call's device buffer while the call runs on its host copy.
struct DeviceCopy {
  int device = -1;  // -1: the call is on host memory
  void* buf = nullptr;
  size_t bytes = 0;
};

int device_of(const PeerCall& pc) {
  return pc.device == PeerCall::kThreadBufferDevice ? buffer_device() : std::max(pc.device, -1);
}

}  // namespace

void CallRoutine::group(const std::vector<PeerCall>& given, CallStats* stats) {
  if (given.size() == 1) {
    // A group of one is a plain send or recv (the same messages).
    const PeerCall& pc = given[0];
    const BufferDeviceScope device(pc.device);
    if (!pc.refused.empty()) refuse_next(pc.refused);
    point_to_point(
        pc.send ? send_desc(pc.buf, pc.count, rt_.rank, pc.peer) : recv_desc(pc.buf, pc.count, rt_.rank, pc.peer),
        pc.type, pc.compression, stats);
    return;
  }
  // Device buffers: the calls on host copies (`copies` says where each came from).
  std::vector<PeerCall> staged;
  std::vector<DeviceCopy> copies;
  for (size_t i = 0; i < given.size(); ++i) {
    const PeerCall& pc = given[i];
    const int dev = device_of(pc);
    if (dev < 0 || !pc.refused.empty()) continue;
    if (staged.empty()) {
      staged = given;
      copies.resize(given.size());
      if (rt_.group_host.size() < given.size()) rt_.group_host.resize(given.size());
    }
    PeerCall& h = staged[i];
    Collective probe;
    probe.device = dev;
    h.refused = check_device_call(rt_, probe);
    if (!h.refused.empty()) {
      h.refused = "group call " + std::to_string(i) + " (" + (pc.send ? "send" : "recv") + "): " + h.refused;
      continue;
    }
    const size_t bytes = pc.count * dsize(pc.type);
    h.buf = rt_.group_host[i].get(bytes + 8);
    h.device = -1;
    try {
      if (pc.send && bytes) device_work(rt_, dev).to_host(h.buf, pc.buf, bytes);
    } catch (const std::exception& e) {
      h.refused = std::string("group call ") + std::to_string(i) + " (send): copying its buffer from device " +
                  std::to_string(dev) + " failed: " + e.what();
      continue;
    }
    if (!pc.send) copies[i] = DeviceCopy{dev, pc.buf, bytes};
  }
  const std::vector<PeerCall>& calls = staged.empty() ? given : staged;
  const std::string refused = std::exchange(refusal_, std::string());
  trace::Bind traced(rt_.trace.get(), 0);
  trace::Scope call_event("group");
  CallState call = begin(stats);
  const std::string me = "ncclz rank " + std::to_string(rt_.rank) + ": ";
  if (calls.empty()) {
    call.finish();
    return;
  }
  // Checks that keep the group from starting (the peers' groups then wait
  // for this rank's until their timeout: both ends of a mirrored group fail
  // the same way).
  std::vector<int> sends(size_t(rt_.nranks), 0), recvs(size_t(rt_.nranks), 0);
  for (size_t i = 0; i < calls.size(); ++i) {
    const PeerCall& pc = calls[i];
    const std::string bad = check_peer(pc.peer, rt_.rank, rt_.nranks, rt_.cfg.p2p != 0);
    if (!bad.empty()) {
      throw InvalidArgument(me + "group: call " + std::to_string(i) + " (" + (pc.send ? "send" : "recv") + "): " + bad +
                            "; no call of the group ran");
    }
    int& n = (pc.send ? sends : recvs)[size_t(pc.peer)];
    if (++n > rt_.cfg.nslots) {
      throw InvalidArgument(me + "group: more than " + std::to_string(rt_.cfg.nslots) + " " +
                            (pc.send ? "sends to" : "recvs from") + " rank " + std::to_string(pc.peer) +
                            " in one group (the point-to-point links' slots, NCCLZ_NSLOTS); split the group. No "
                            "call of the group ran");
    }
  }

  // 0. prepare
  std::vector<std::unique_ptr<GroupCall>> group;
  group.reserve(calls.size());
  size_t total_bytes = 0;
  for (const PeerCall& pc : calls) total_bytes += pc.count * dsize(pc.type);
  const int nch = rt_.channels.pick(total_bytes);
  if (rt_.group_codes.size() < calls.size()) {
    rt_.group_codes.resize(calls.size());
    rt_.group_scratch.resize(calls.size());
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const PeerCall& pc = calls[i];
    auto g = std::make_unique<GroupCall>(rt_, pc, nch);
    g->state.timeout = call.timeout;
    g->scratch = &rt_.group_scratch[i];
    g->lossy.use_codes(&rt_.group_codes[i]);
    g->lossy.stage_p2p();
    const size_t bytes = pc.count * dsize(pc.type);
    g->m = effective_mode(pc.compression, bytes);
    const std::string& why = refused.empty() ? pc.refused : refused;
    g->err = why.empty() ? check_args(g->cd, g->t, g->m, g->c, nullptr, rt_.nranks) : why;
    g->mine = make_desc(g->cd, g->t, g->m, g->c, nullptr);
    g->mine.seq = (g->sending() ? rt_.send_seq : rt_.recv_seq)[size_t(g->peer())]++;
    if (!g->err.empty()) g->mine.flags |= kInvalid;
    if (!why.empty()) g->mine.mode = kRefusedMode;
    if (g->sending() && is_lossy(g->m) && g->err.empty() && why.empty()) g->lossy.plan_send(g->mine, g->staging);
    group.push_back(std::move(g));
  }
  ++rt_.rounds;

  // Adds call g to stream s (its prims and data; its stats into st).
  auto open = [&](Stream& s, GroupCall& g, prims::ChannelStats* st) {
    const bool sending = g.sending();
    // (recv_target first: it makes the recv's stage, which recv_wire puts on the wire)
    void* data = sending ? const_cast<void*>(g.lossy.send_data()) : g.lossy.recv_target(g.theirs, g.m, g.staging);
    const Wire w = sending ? g.lossy.send_wire(g.m, g.theirs) : g.lossy.recv_wire(g.theirs, g.m);
    s.calls.push_back(&g);
    s.prims.push_back(rt_.peers.prims(g.peer(), sending, w, g.state, st, g.scratch->get(rt_.peers.scratch_bytes())));
    s.data.push_back(data);
  };
  // One slice of stream s (false once it has nothing left).
  auto step = [](Stream& s, bool sending) {
    while (!s.finished() && s.done == s.calls[s.at]->cd.message) {
      s.prims[s.at].settle();
      ++s.at;
      s.done = 0;
    }
    if (s.finished()) return false;
    prims::Prims& p = s.prims[s.at];
    const size_t n = std::min(p.slice_elems(), s.calls[s.at]->cd.message - s.done);
    uint8_t* at = static_cast<uint8_t*>(s.data[s.at]) + s.done * p.esize();
    if (sending) {
      p.send(at, n);
    } else {
      p.recv(at, n);
    }
    s.done += n;
    return true;
  };

  // 1.-2. the handshakes
  auto check = [&](GroupCall& g) {
    try {
      rt_.protocol.check_p2p(g.peer(), g.sending(), g.mine, g.err, g.theirs);
      g.matched = true;
    } catch (const InvalidArgument&) {
      g.failed = std::current_exception();
    } catch (const RemoteError&) {
      g.failed = std::current_exception();
      // The peer's invalid arguments keep the pair in step; anything else does not.
      g.mismatched = !(g.theirs.flags & kInvalid);
    }
  };
  // A single call's counterpart (its descriptor without kGrouped): its data
  // moves at once, on this thread (a plain sender sends right after its
  // answer, a plain receiver waits for the data before anything else).
  prims::ChannelStats at_once_stats;
  bool any_at_once = false;
  std::optional<transport::ShortWaits> short_waits;  // the handshakes' waits (not the data's)
  auto move_at_once = [&](GroupCall& g) {
    if (!g.matched || (g.theirs.flags & kGrouped)) return;
    rt_.protocol.p2p_flush(g.peer(), call);  // (its answer first, where it waits in the queue)
    short_waits.reset();
    try {
      Stream s;
      open(s, g, &at_once_stats);
      while (step(s, g.sending())) {
      }
      if (g.sending()) rt_.peers.link(g.peer())->send->flush(call.deadline());
    } catch (const Aborted&) {
      throw;
    } catch (const std::exception& e) {
      rt_.fail(std::string("grouped send/recv failed: ") + e.what());
      throw;
    }
    short_waits.emplace();
    g.moved = true;
    any_at_once = true;
  };
  // What the handshakes wait for, per peer in call order: the recvs' send
  // descriptors and the sends' answers.
  struct Awaited {
    std::deque<GroupCall*> recvs, sends;
  };
  std::vector<Awaited> awaited(size_t(rt_.nranks));
  size_t left = 0;
  for (auto& g : group) {
    Awaited& a = awaited[size_t(g->peer())];
    (g->sending() ? a.sends : a.recvs).push_back(g.get());
    ++left;
  }
  // The next message from q: a plain recv's answer goes to the group's next
  // send to q (the peer receives first, then sends); anything else goes to
  // the next recv from q while one waits (a send descriptor, or a mismatch),
  // then to the next send.
  auto take = [&](int q, const CallDesc& d) {
    Awaited& a = awaited[size_t(q)];
    const bool plain_answer = d.coll == uint8_t(Coll::Recv) && !(d.flags & kGrouped);
    GroupCall* g = nullptr;
    if (!a.recvs.empty() && !(plain_answer && !a.sends.empty())) {
      g = a.recvs.front();
      a.recvs.pop_front();
      g->theirs = d;
      rt_.protocol.p2p_answer(q, g->mine, call);
    } else {
      g = a.sends.front();
      a.sends.pop_front();
      g->theirs = d;
    }
    --left;
    check(*g);
    move_at_once(*g);
  };
  {
    short_waits.emplace();
    trace::Scope handshake_event("handshake");
    for (size_t i = 0; i < group.size(); ++i) {
      GroupCall& g = *group[i];
      g.mine.flags |= kGrouped;
      if (!g.sending()) continue;
      for (size_t j = i + 1; j < group.size(); ++j) {
        if (group[j]->sending() && group[j]->peer() == g.peer()) g.mine.flags |= kMoreSends;
      }
      rt_.protocol.p2p_post(g.peer(), g.mine, call);
    }
    std::vector<int> peers;
    while (left > 0) {
      // Wait on every peer with something awaited, first on the peer of the
      // first recv still waiting (else of the first send), in call order.
      peers.clear();
      int first = -1;
      for (bool recvs : {true, false}) {
        for (auto& g : group) {
          const Awaited& a = awaited[size_t(g->peer())];
          if (g->sending() == recvs || (recvs ? a.recvs : a.sends).empty()) continue;
          if (first < 0) first = g->peer();
          if (std::find(peers.begin(), peers.end(), g->peer()) == peers.end()) peers.push_back(g->peer());
        }
      }
      CallDesc d;
      const int q = rt_.protocol.p2p_wait_any(peers, first, call, &d);
      take(q, d);
    }
    // The answers still queued (their peers, which wait for them, free the slots).
    for (int q = 0; q < rt_.nranks; ++q) rt_.protocol.p2p_flush(q, call);
    short_waits.reset();
  }
  for (auto& g : group) {
    if (!g->mismatched) continue;
    std::string why;
    try {
      std::rethrow_exception(g->failed);
    } catch (const std::exception& e) {
      why = e.what();
    }
    rt_.fail("grouped send/recv did not match: " + why);
    throw RemoteError(why +
                      ". In a group, the point-to-point links are then out of step: the communicator was "
                      "aborted");
  }

  // 3. move
  std::vector<Stream> out(size_t(rt_.nranks)), in(size_t(rt_.nranks));
  size_t nstreams = 0;
  for (auto& g : group) {
    if (!g->matched || g->moved) continue;
    Stream& s = (g->sending() ? out : in)[size_t(g->peer())];
    if (s.calls.empty()) ++nstreams;
    s.calls.push_back(g.get());
  }
  // Each stream's counts (RingChannels::run sets call.ch to the lanes'; the
  // streams' go there after the data moved).
  std::vector<prims::ChannelStats> stream_stats(std::max<size_t>(nstreams, 1));
  std::vector<std::pair<Stream*, bool>> streams;  // (stream, sending), in lane order
  for (auto* dir : {&out, &in}) {
    for (int q = 0; q < rt_.nranks; ++q) {
      Stream& s = (*dir)[size_t(q)];
      if (s.calls.empty()) continue;
      prims::ChannelStats* st = &stream_stats[streams.size()];
      streams.emplace_back(&s, dir == &out);
      const std::vector<GroupCall*> calls_of = std::exchange(s.calls, {});
      for (GroupCall* g : calls_of) open(s, *g, st);
    }
  }
  // The rounds of one loop over the streams k = lane, lane + lanes, ...
  // (sends before recvs: `streams` lists the outgoing ones first).
  auto rounds = [&](size_t lane, size_t lanes) {
    for (bool busy = true; busy;) {
      busy = false;
      for (size_t k = lane; k < streams.size(); k += lanes) busy = step(*streams[k].first, streams[k].second) || busy;
    }
  };
  const size_t lanes = std::min(streams.size(), size_t(nch));
  const auto t_move = Clock::now();
  try {
    trace::Scope move_event("move");
    if (lanes > 1) {
      move_event.arg("lanes", double(lanes));
      rt_.channels.run(int(lanes), call, [&](int c) { rounds(size_t(c), lanes); });
    } else {
      rounds(0, 1);
    }
    for (int q = 0; q < rt_.nranks; ++q) {
      if (!out[size_t(q)].calls.empty()) rt_.peers.link(q)->send->flush(call.deadline());
    }
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    rt_.fail(std::string("grouped send/recv failed: ") + e.what());
    throw;
  }
  if (any_at_once) stream_stats.push_back(at_once_stats);
  call.ch = std::move(stream_stats);
  call.slice_bytes = rt_.cfg.slot_bytes;
  call.schedule_s = seconds(t_move, Clock::now());

  // 4. finish
  std::exception_ptr first;
  for (size_t i = 0; i < group.size(); ++i) {
    GroupCall* g = group[i].get();
    if (g->matched && !g->sending()) g->lossy.finish_recv(g->theirs);
    g->staging.end();
    if (!copies.empty() && copies[i].device >= 0 && g->matched && !g->failed && copies[i].bytes) {
      try {
        device_work(rt_, copies[i].device).to_device(copies[i].buf, calls[i].buf, copies[i].bytes);
      } catch (const std::exception&) {
        g->failed = std::current_exception();
      }
    }
    call.quantize_s += g->state.quantize_s;
    call.fallback = call.fallback || g->state.fallback;
    call.bound = std::max(call.bound, g->state.bound);
    call.requested = std::max(call.requested, g->state.requested);
    if (g->m != Mode::None) call.ran = g->m;
    if (!first && g->failed) first = g->failed;
  }
  call.finish();
  if (call_event.active()) {
    call_event.arg("calls", double(calls.size())).arg("bytes", double(total_bytes));
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace ncclz::core
