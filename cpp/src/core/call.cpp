// The call routine (see call.hpp).
#include "core/call.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "base/log.hpp"
#include "base/trace.hpp"
#include "core/config.hpp"
#include "core/device_call.hpp"
#include "core/device_work.hpp"
#include "core/hier_call.hpp"
#include "core/lossy_call.hpp"
#include "core/persistent_call.hpp"
#include "core/validate.hpp"
#include "ncclz/error.hpp"
#include "prims/reduce.hpp"

namespace ncclz::core {

CallState CallRoutine::begin(CallStats* stats) const {
  if (rt_.abort->aborted.load()) {
    throw Aborted("ncclz rank " + std::to_string(rt_.rank) + ": the communicator was aborted (" + rt_.abort->reason +
                  "); create a new one");
  }
  CallState c;
  c.out = stats;
  c.timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(rt_.cfg.timeout_s));
  return c;
}

Mode CallRoutine::decide_mode(const std::vector<CallDesc>& all, Mode m, DataType t, Combine how, const Compression& c,
                              CallState& call) const {
  call.ran = m;
  if (all[0].rans_margin) call.rans_margin = double(std::min<int>(all[0].rans_margin, 101) - 1) / 100.0;
  const int p = int(all[0].lighter) - 1;
  if (p < 0 || p >= std::min(int(m), int(Mode::Lossless) + 1)) return m;
  if (is_lossy(m)) {
    const DataStats g = merge_stats(all);
    const double E = resolve_bound(c, g);
    // Taken where the exact sum in T keeps E with half to spare, or where
    // nothing keeps E, neither compression nor any exact run, and the sum in
    // T is as good as the best exact run: there the lossy request's exact
    // path runs the same plain collective (bound::choose_exact). So a lighter
    // mode never gives a result that the request would have bettered.
    const bound::ExactChoice x = bound::choose_exact(elem_of(t), how, rt_.nranks, E, g, true);
    const bool unkeepable_in_t = x.acc == bound::Accumulation::InT && !x.keeps && !lossy_could_keep(t, how, E, g);
    if (!bound::exact_keeps_bound(elem_of(t), how, rt_.nranks, E, g) && !unkeepable_in_t) {
      NCCLZ_TRACE(rt_.rank,
                  "call #%llu: policy proposal %s ignored: the exact sum in the element type may exceed the bound",
                  (unsigned long long)all[0].seq, p == 0 ? "none" : "lossless");
      return m;
    }
    call.requested = E;
    call.bound = bound::exact_error(elem_of(t), how, rt_.nranks, g, false);  // what the exact run in T achieves
  }
  call.ran = Mode(p);
  call.lightened = true;
  NCCLZ_TRACE(rt_.rank, "call #%llu runs %s instead of %s (rank 0's policy)", (unsigned long long)all[0].seq,
              p == 0 ? "none" : "lossless", mode_string(uint8_t(m), 0, "").c_str());
  return call.ran;
}

bool CallRoutine::lossy_could_keep(DataType t, Combine how, double E, const DataStats& g) const {
  if (bound::plan_lossy(elem_of(t), how, rt_.nranks, E, g).compress) return true;
  return rt_.hier && bound::plan_lossy_hier(elem_of(t), how, rt_.topo.nhosts, rt_.topo.local_size, E, g).compress;
}

uint8_t CallRoutine::configured_algorithm() const {
  bool ok = false;
  const int a = parse_algorithm(rt_.cfg.algorithm, &ok);
  return ok && a >= 0 ? uint8_t(a + 1) : 0;
}

bool CallRoutine::carries(const Collective& cd, Mode m, size_t bytes, const PolicyHints* hints) const {
  if (!cd.latency || cd.per_peer() || rt_.cfg.latency_bytes <= 0 || !rt_.protocol.one_hop()) return false;
  const uint64_t latency_bytes = uint64_t(rt_.cfg.latency_bytes);
  // Above latency_bytes, from direct_from_bytes up where the peers' memory
  // is reachable and the collective has a direct schedule
  // (core/direct_schedule.hpp), for any request: only two
  // addresses ride with the descriptor, so a lossy request carries them too,
  // and where rank 0's policy lightens it to an exact mode (which a follower
  // cannot know beforehand) every rank has carried and it runs direct; a
  // lossy call that runs as asked leaves them unused. Host buffers only: a
  // device call's would be staged through host copies, which its own path
  // avoids.
  if (cd.direct && bytes > latency_bytes && cd.device < 0 && direct_size(cd.coll, bytes)) return true;
  const bool exact_expected = !is_lossy(m) || (hints && hints->lighter >= 0);
  if (!exact_expected) return false;
  if (bytes <= latency_bytes) return true;
  // Above it: exact requests of a collective with a two-hop schedule, up to
  // two_hop_bytes (each block in pieces of at most a slot).
  if (is_lossy(m) || !cd.latency_wide) return false;
  return bytes <= uint64_t(std::max<int64_t>(rt_.cfg.two_hop_bytes, 0));
}

bool CallRoutine::direct_size(Coll c, size_t bytes) const {
  const int64_t from = direct_from(c, rt_.nranks, rt_.cfg.direct_from_bytes, rt_.direct_defaulted);
  return rt_.peer_mem && from > 0 && bytes >= uint64_t(from);
}

algorithms::OneHopPart CallRoutine::one_hop_part(const Collective& cd, DataType t) {
  algorithms::OneHopPart p;
  p.rank = rt_.rank;
  p.nranks = rt_.nranks;
  p.src = static_cast<const uint8_t*>(cd.send);
  p.dst = static_cast<uint8_t*>(cd.recv);
  p.count = cd.split;
  p.esize = dsize(t);
  p.root = cd.root;
  if (cd.reduces) p.reduce = prims::reduce_fn(t, cd.op);
  p.scratch = rt_.channels.scratch(0);
  // Two hops: pieces as large as a slot allows beside the descriptor that
  // rides with the first (fewer pieces, fewer wake-ups: 128 KiB pieces were
  // 2-9% slower from 1 to 4 MiB, 4 ranks; bench/results/latency.md).
  p.piece_bytes = rt_.cfg.slot_bytes - kLatencyHeadroom;
  return p;
}

void CallRoutine::run_latency(const Collective& cd, const algorithms::OneHopPart& part, const Carried& carried,
                              const CallDesc& d, bool direct_hops, CallState& call) {
  uint64_t sent = 0;
  for (int q = 0; q < rt_.nranks; ++q) {
    if (q == rt_.rank) continue;
    if (!direct_hops) sent += carried.out[size_t(q)].size;
    const size_t want = direct_hops ? sizeof(DirectAddresses) : algorithms::expected_bytes(cd.latency, part, q);
    if (carried.in[size_t(q)].size != want) {
      const std::string why = "rank " + std::to_string(q) + " sent " + std::to_string(carried.in[size_t(q)].size) +
                              " bytes of data with its descriptor of call #" + std::to_string(d.seq) +
                              " where this rank expected " + std::to_string(want);
      rt_.fail("latency algorithm: " + why);
      throw RemoteError("ncclz rank " + std::to_string(rt_.rank) + ": " + why +
                        " (the point-to-point links are out of step); the communicator was aborted");
    }
  }
  rt_.protocol.check_no_notice(d);
  if (direct_hops) {
    // Straight between the ranks' buffers (its bytes: what this rank read
    // and wrote of its peers').
    sent += rt_.protocol.direct(cd.direct, part, carried, d.seq, call, *rt_.peer_mem);
  } else if (cd.latency.again) {
    // Two hops, each block in pieces of at most a slot (algorithms/one_hop.hpp).
    sent += rt_.protocol.two_hop_first(part, carried, d.seq, call);
    sent += rt_.protocol.two_hop_second(part, d.seq, call);
  } else {
    cd.latency.combine(part, carried.in.data());
    rt_.protocol.release_carried();
  }
  call.ch.assign(1, prims::ChannelStats{});
  call.ch[0].raw_bytes = call.ch[0].wire_bytes = sent;  // raw: the exact modes' values as they are
}

Algorithm CallRoutine::decide_algorithm(const std::vector<CallDesc>& all, const Collective& cd, Mode run) const {
  const CallDesc& rank0 = all[0];
  // Latency: the data is here already (every rank carried it), the call runs
  // exact (a lossy request that rank 0 lightened, where the exact run keeps
  // the bound) and rank 0 named no other algorithm (NCCLZ_ALGO, the policy's
  // or the call's).
  bool carried = !is_lossy(run);
  for (const CallDesc& x : all) carried = carried && (x.flags & kCarried) != 0;
  const uint8_t proposed = rank0.algorithm & kAlgorithmBits;
  if (carried && proposed == 0) return Algorithm::Latency;
  // Hierarchical needs its links (the topology allows it) and a schedule.
  if (!rt_.hier || !cd.hier) return Algorithm::Ring;
  if (proposed == 1 + int(Algorithm::Ring)) return Algorithm::Ring;
  // Proposed, or the default: fewer bytes on the network and, for lossy sums,
  // the bound split among hosts instead of ranks. (The choice never depends
  // on the mode, so none and lossless stay bit-identical.)
  return Algorithm::Hierarchical;
}

bool CallRoutine::premultiplies(const Collective& cd, DataType t, Mode m, int nranks) {
  return cd.op == RedOp::Avg && elem_of(t) == codec::ElemType::F16 && !is_lossy(m) && nranks > 1 && cd.in_count > 0;
}

void CallRoutine::premultiply(Collective& cd, DataType t) {
  trace::Scope event("premultiply");
  const size_t n = cd.in_count, es = dsize(t);
  // Into the output where the call then reduces in place (all_reduce, the
  // root's reduce), else into a scratch copy (the user's input is only read).
  const bool into_output = cd.recv != nullptr && cd.out_count == n;
  if (cd.device >= 0) {  // device buffers: divided on the device (scratch: device buffer 2)
    DeviceWork& dw = device_work(rt_, cd.device);
    void* to = into_output ? cd.recv : dw.codes(2, n * es);
    if (to != cd.send) dw.copy(to, cd.send, n * es);
    dw.divide(elem_of(t), to, n, rt_.nranks);
    cd.send = to;
    return;
  }
  void* to = into_output ? cd.recv : rt_.staging[1].get(n * es + 8);  // staging[1]: unused by host calls
  prims::divide_into(elem_of(t), to, cd.send, n, rt_.nranks);
  cd.send = to;
}

void CallRoutine::collective(const Collective& given, DataType t, const Compression& c, const PolicyHints* hints,
                             CallStats* stats) {
  const std::string refused = std::exchange(refusal_, std::string());  // refuse_next
  // The timeline (base/trace.hpp): this thread is the calls' thread of the
  // communicator's trace, the call one event, its steps events inside it.
  trace::Bind traced(rt_.trace.get(), 0);
  trace::Scope call_event(coll_name(given.coll));
  CallState call = begin(stats);
  // A copy: all_to_allv learns its message size in the counts round (3).
  Collective cd = given;
  // 1. check (a message size known only after the exchange: the requested mode)
  std::optional<trace::Scope> step(std::in_place, "check_describe");
  size_t bytes = cd.message * dsize(t);
  Mode m = cd.per_peer() ? c.mode : effective_mode(c, bytes);
  int nch = rt_.channels.pick(bytes);
  std::string err = refused.empty() ? check_args(cd, t, m, c, hints, rt_.nranks, rt_.cfg.p2p != 0) : refused;
  // Device buffers (core/device_call.hpp): checked here, so that a missing
  // device fails the call on every rank.
  cd.device = refused.empty() ? buffer_device() : -1;
  if (err.empty()) err = check_device_call(rt_, cd);
  // 2. describe
  CallDesc d = make_desc(cd, t, m, c, hints);
  d.seq = rt_.seq++;
  ++rt_.rounds;
  if (!err.empty()) d.flags |= kInvalid;
  if (!refused.empty()) d.mode = kRefusedMode;
  if (cd.device >= 0 && err.empty()) d.device = 1;
  if (!rt_.cfg.pipeline_quantize) d.flags |= kEagerQuantize;
  if (!d.algorithm) d.algorithm = configured_algorithm();
  if (!rt_.cfg.hier_rounds) d.algorithm |= kHierPhases;
  LossyCall lossy(rt_, cd, t, c, nch, call);
  // A device call whose statistics fail on the device (a CUDA error) still
  // takes part in the exchange, marked invalid, so that the other ranks raise
  // instead of waiting for it; this rank then raises the device's error.
  std::exception_ptr describe_failed;
  if (is_lossy(m) && err.empty()) {
    try {
      lossy.describe(d);
    } catch (...) {
      if (cd.device < 0) throw;
      describe_failed = std::current_exception();
      d.flags |= kInvalid;
    }
  }
  // The latency algorithm's data rides with the descriptor (3.). Device
  // buffers of an exact request carry it too, from host copies (a small
  // message: the copies cost less than the ring's steps, and the call gets
  // the bits the same call of host buffers gets).
  HostStaging staging(rt_, cd, t);
  // Float16's average, exact: every rank's input divided by N first (NCCL's
  // premultiplied average). Summing first, as the other types do, overflows
  // float16's range (65504) wherever the partial sums pass it, although the
  // average does not: 4 ranks' values of 20000 summed to inf. The schedules
  // then sum the divided values (from the output array, or from a scratch
  // copy where the output is smaller or absent) and step 7 divides nothing.
  // Every rank decides alike (the op, the type and the requested mode match).
  const bool premultiplied = err.empty() && premultiplies(cd, t, m, rt_.nranks);
  if (premultiplied) premultiply(cd, t);
  const bool carry = err.empty() && (cd.device < 0 || !is_lossy(m)) && carries(cd, m, bytes, hints);
  algorithms::OneHopPart part;
  Carried carried;
  bool direct_hops = false;
  DirectAddresses addresses;
  if (carry) {
    d.flags |= kCarried;
    staging.begin();  // device buffers: host copies (nothing for host buffers)
    // One hop, or two where one would send too much or the message is above
    // latency_bytes (the same choice on every rank of a matching call: the
    // size, N and the agreed latency_bytes decide).
    if (cd.latency_wide && (bytes * size_t(rt_.nranks - 1) > kOneHopBytes || bytes > uint64_t(rt_.cfg.latency_bytes))) {
      cd.latency = cd.latency_wide;
    }
    part = one_hop_part(cd, t);
    carried.out.assign(size_t(rt_.nranks), algorithms::Bytes{});
    // Direct: all_reduce wherever it takes two hops, the others where the
    // ring would run (above latency_bytes: their bits are the ring's).
    direct_hops = cd.direct && direct_size(cd.coll, bytes) &&
                  (cd.latency.again || bytes > uint64_t(std::max<int64_t>(rt_.cfg.latency_bytes, 0)));
    if (direct_hops) {
      // A direct call carries where this rank's buffers are; blocks are read
      // in pieces that stay in cache while they are reduced.
      addresses.src = uint64_t(reinterpret_cast<uintptr_t>(part.src));
      addresses.dst = uint64_t(reinterpret_cast<uintptr_t>(part.dst));
      part.piece_bytes = kDirectPieceBytes;
    }
    for (int q = 0; q < rt_.nranks; ++q) {
      if (q == rt_.rank) continue;
      carried.out[size_t(q)] = direct_hops
                                   ? algorithms::Bytes{reinterpret_cast<const uint8_t*>(&addresses), sizeof addresses}
                                   : cd.latency.send(part, q);
    }
  }
  // 3. exchange (the slots of carried data are held until released, or until
  // this call ends however it ends: the links stay in step)
  step.emplace("exchange");
  const auto all = rt_.protocol.exchange(d, call, carry ? &carried : nullptr);
  struct ReleaseCarried {
    CallProtocol& p;
    ~ReleaseCarried() { p.release_carried(); }
  } release{rt_.protocol};
  if (describe_failed) std::rethrow_exception(describe_failed);
  rt_.protocol.check_all(all, err);
  if (cd.per_peer()) {
    // Per-peer counts: matched pair by pair; the message is the average
    // rank's input, the same on every rank (the mode under min_bytes and the
    // channel count depend on it).
    trace::Scope counts_event("exchange_counts");
    const uint64_t sent = rt_.protocol.exchange_counts(d, cd.send_counts, cd.recv_counts, call);
    cd.message = size_t(sent / uint64_t(rt_.nranks));
    bytes = cd.message * dsize(t);
    m = effective_mode(c, bytes);
    nch = rt_.channels.pick(bytes);
    lossy.use_channels(nch);
  }
  // 4. decide
  step.emplace("decide");
  const Mode run = decide_mode(all, m, t, cd.how, c, call);
  cd.algorithm = call.algorithm = decide_algorithm(all, cd, run);
  for (const CallDesc& x : all) cd.hier_rounds = cd.hier_rounds && !(x.algorithm & kHierPhases);
  step.reset();
  // Device buffers: a lossy call decides in LossyCall::run whether it runs
  // on the device; everything else runs on host copies.
  if (cd.algorithm == Algorithm::Latency) {
    trace::Scope latency_event("latency");
    run_latency(cd, part, carried, d, direct_hops, call);  // 6. (exact modes: the values as they came)
  } else if (is_lossy(run)) {
    rt_.protocol.release_carried();  // a lossy request that runs as asked: carried data not used
    lossy.run(all, staging);         // 5.-6.
  } else if (run == Mode::None && reduces_as_wire(t, cd.op) && persistent_eligible(rt_, cd, all, elem_of(t), false)) {
    // 6. device buffers on every rank: the persistent ring kernels (core/persistent_call.hpp)
    rt_.protocol.release_carried();
    run_persistent(rt_, cd, elem_of(t), false, cd.send, cd.recv, cd.message, rt_.channels.pick_exact(bytes), dsize(t),
                   call);
  } else {
    rt_.protocol.release_carried();  // carried data not used: rank 0 named another algorithm
    // 6. the user's buffers through raw slots (none) or the selector
    // (lossless; a lightened call with the selector's own choice). Where a
    // rank's buffers are on a device, every rank's lossless slices are what
    // the device codes (allow_rans = false: FloatHuff for floats).
    const Compression& wire_c = run == m ? c : Compression{};
    Wire w = native_wire(t, run, cd.op, wire_c);
    if (!cd.reduces) w.as_wire = true;  // moved, never reduced: any type as its wire type's bits (float8 too)
    if (run == Mode::Lossless && any_device(all)) w.enc.allow_rans = false;
    // Device buffers: the values stay on the device, uncompressed (raw slices
    // copied to and from the slots) or lossless (device_codes_exact: FloatHuff
    // slices coded there), reduced there (DeviceSliceCodec::
    // set_value_reduction), on the flat schedules and the hierarchical ones
    // (both rings on the device); every other exact call of device buffers
    // runs on host copies.
    if (cd.device >= 0 && !staging.active() && rt_.nranks > 1 && device_codes_exact(w)) {
      w.device = &device_work(rt_, cd.device);
      call.on_device = true;
    } else {
      staging.begin();
    }
    if (cd.algorithm == Algorithm::Hierarchical) {
      run_hier_values(rt_, cd, t, w, nch, call);
    } else if (cd.peer_schedule) {
      rt_.channels.run_schedule(cd, cd.send, cd.recv, w, nch, call);
    } else {
      // The rings' exact shape (core/config.hpp, resolve_exact_shape): the
      // same for none and lossless, from facts every rank agreed on.
      w.slice_bytes = rt_.channels.exact_slice_bytes();
      rt_.channels.run_schedule(cd, cd.send, cd.recv, w, rt_.channels.pick_exact(bytes), call);
    }
  }
  // 7. this rank's own block (never on the wire, exact in every mode); avg:
  // the sum divided once, the same way on every rank; the stats.
  if (cd.self_count) {
    trace::Scope copy_event("self_copy");
    const size_t es = dsize(t);
    uint8_t* to = static_cast<uint8_t*>(cd.recv) + cd.self_dst * es;
    const uint8_t* from = static_cast<const uint8_t*>(cd.send) + cd.self_src * es;
    if (to != from && cd.device >= 0 && !staging.active()) {
      device_work(rt_, cd.device).copy(to, from, cd.self_count * es);  // device buffers (the device path)
    } else if (to != from) {
      std::memcpy(to, from, cd.self_count * es);  // equal: gather/scatter in place (NCCL's way)
    }
  }
  if (!is_lossy(run) && cd.op == RedOp::Avg && !premultiplied) {
    trace::Scope avg_event("avg");
    if (cd.device >= 0 && !staging.active()) {
      device_work(rt_, cd.device).divide(elem_of(t), cd.recv, cd.out_count, rt_.nranks);
    } else {
      prims::divide_in_place(t, cd.recv, cd.out_count, rt_.nranks);
    }
  }
  staging.end();  // host copies: the output back to the device
  call.finish();
  if (call_event.active()) {
    call_event.arg("bytes", double(bytes))
        .arg("count", double(cd.message))
        .arg("mode", mode_name(m))
        .arg("ran", mode_name(run))
        .arg("algorithm", algorithm_name(call.algorithm))
        .arg("on_device", call.on_device ? 1.0 : 0.0)
        .arg("seq", double(d.seq))
        .arg("fallback", call.fallback ? 1.0 : 0.0);
  }
}

void CallRoutine::point_to_point(const Collective& given, DataType t, const Compression& c, CallStats* stats) {
  const std::string refused = std::exchange(refusal_, std::string());  // refuse_next
  trace::Bind traced(rt_.trace.get(), 0);
  trace::Scope call_event(coll_name(given.coll));
  CallState call = begin(stats);
  Collective cd = given;  // a copy: device buffers may run on host copies (HostStaging)
  const bool sending = cd.coll == Coll::Send;
  const int peer = sending ? cd.peer : cd.root;
  // 1. check: a peer that is no peer fails here alone (there is no link to
  // tell); other argument errors travel in the descriptor.
  const std::string bad_peer = check_peer(peer, rt_.rank, rt_.nranks, rt_.cfg.p2p != 0);
  if (!bad_peer.empty()) {
    throw InvalidArgument("ncclz rank " + std::to_string(rt_.rank) + ": " + (sending ? "send" : "recv") + ": " +
                          bad_peer);
  }
  const size_t bytes = cd.message * dsize(t);
  const Mode m = effective_mode(c, bytes);
  const int nch = rt_.channels.pick(bytes);
  call.ran = m;
  std::string err = refused.empty() ? check_args(cd, t, m, c, nullptr, rt_.nranks) : refused;
  cd.device = refused.empty() ? buffer_device() : -1;
  if (err.empty()) err = check_device_call(rt_, cd);
  // 2. describe; 4.-5. the sender decides and prepares alone
  CallDesc d = make_desc(cd, t, m, c, nullptr);
  d.seq = (sending ? rt_.send_seq : rt_.recv_seq)[size_t(peer)]++;
  ++rt_.rounds;
  if (!err.empty()) d.flags |= kInvalid;
  if (!refused.empty()) d.mode = kRefusedMode;
  if (cd.device >= 0 && err.empty()) d.device = 1;
  LossyCall lossy(rt_, cd, t, c, nch, call);
  if (rt_.short_of_cores) lossy.stage_p2p();  // (host buffers only; the same codes)
  // Device buffers: a lossy send codes on the device (plan_send), a lossy
  // recv decides after the handshake (recv_target); an exact call runs on
  // the device where it codes there (LossyCall::exact_on_device: raw, or
  // lossless floats); everything else runs on host copies.
  HostStaging staging(rt_, cd, t);
  if (sending && is_lossy(m) && err.empty()) {
    lossy.plan_send(d, staging);
  } else if (sending && err.empty() && lossy.exact_on_device(m)) {
    call.on_device = true;
  } else if (sending && err.empty()) {
    staging.begin();
  }
  // 3. exchange with the peer
  call.ch.assign(1, prims::ChannelStats{});
  call.slice_bytes = rt_.cfg.slot_bytes;  // the pair's link: ordinary slices
  std::optional<trace::Scope> handshake_event(std::in_place, "handshake");
  const CallDesc theirs = rt_.protocol.handshake(peer, sending, d, err, call);
  handshake_event.reset();
  // 6. run on the pair's link; 7. finish
  auto step = [&](const char* what, auto&& fn) {
    try {
      fn();
    } catch (const Aborted&) {
      throw;
    } catch (const std::exception& e) {
      rt_.fail(std::string(what) + " failed: " + e.what());
      throw;
    }
  };
  if (sending) {
    step("send", [&] {
      prims::Prims p = rt_.peers.prims(peer, lossy.send_wire(m, theirs), call, &call.ch[0]);
      p.send(lossy.send_data(), cd.count);
      p.settle();
      rt_.peers.link(peer)->send->flush(call.deadline());  // complete only once the bytes have left this process
    });
  } else {
    void* target = lossy.recv_target(theirs, m, staging);
    step("recv", [&] {
      prims::Prims p = rt_.peers.prims(peer, lossy.recv_wire(theirs, m), call, &call.ch[0]);
      p.recv(target, cd.count);
      p.settle();
    });
    lossy.finish_recv(theirs);
  }
  staging.end();
  call.finish();
  if (call_event.active()) {
    call_event.arg("bytes", double(bytes))
        .arg("count", double(cd.message))
        .arg("mode", mode_name(m))
        .arg("peer", double(peer))
        .arg("on_device", call.on_device ? 1.0 : 0.0)
        .arg("seq", double(d.seq))
        .arg("fallback", call.fallback ? 1.0 : 0.0);
  }
}

void CallRoutine::barrier() {
  trace::Bind traced(rt_.trace.get(), 0);
  trace::Scope call_event("barrier");
  CallState call = begin(nullptr);
  CallDesc d;
  d.coll = uint8_t(Coll::Barrier);
  d.seq = rt_.seq++;
  const auto all = rt_.protocol.exchange(d, call);
  rt_.protocol.check_all(all, "");
}

}  // namespace ncclz::core
