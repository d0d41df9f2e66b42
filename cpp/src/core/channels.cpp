// Channel fan-out (see channels.hpp).
#include "core/channels.hpp"

#include <algorithm>
#include <exception>

#include "base/interrupt.hpp"
#include "base/trace.hpp"
#include "base/worker_pool.hpp"
#include "core/codec_choice.hpp"
#include "core/config.hpp"
#include "core/device_work.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

Wire wire_of(ElemType type, prims::WireMode mode, RedOp op, DataType user, const Compression& c) {
  Wire w;
  w.type = type;
  w.mode = mode;
  w.op = op;
  w.raw_esize = dsize(user);
  bool ok = false;
  w.enc.choice = parse_codec(c.codec, &ok);
  w.enc.row = c.row;
  w.enc.plane = c.plane;
  return w;
}

prims::PrimsArgs args_of(const Wire& w, const CallState& call, int rank, int channel, size_t slice_bytes) {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.reduce = w.reduce ? w.reduce : prims::reduce_fn(w.type, w.op);
  a.op = w.op;
  a.int_sum = (w.type == ElemType::I32 || w.type == ElemType::I64) && (w.op == RedOp::Sum || w.op == RedOp::Avg);
  a.enc = w.enc;
  if (call.rans_margin >= 0) a.enc.rans_margin = call.rans_margin;  // rank 0's codec effort
  a.raw_esize = w.raw_esize;
  a.timeout = call.timeout;
  a.rank = rank;
  a.channel = channel;
  a.stage = w.stage;
  a.slice_bytes = slice_bytes;
  return a;
}

/// One lane's prims on the point-to-point links: the connections of the
/// pairs it is given, channel c's scratch and counters; remembers where it
/// sent, to flush those links when the lane is done.
class LanePrims final : public algorithms::PeerPrims {
 public:
  LanePrims(PeerLinks& peers, const prims::PrimsArgs& a, prims::ChannelStats* st, void* scratch)
      : peers_(peers), a_(a), st_(st), scratch_(scratch) {}

  prims::Prims link(int to, int from) override {
    transport::SendConn* s = to >= 0 ? peers_.link(to)->send.get() : nullptr;
    transport::RecvConn* r = from >= 0 ? peers_.link(from)->recv.get() : nullptr;
    if (s) sent_.push_back(s);
    return prims::Prims(s, r, a_, st_, scratch_);
  }
  /// The lane's sends are complete only once their bytes have left this process.
  void flush(Clock::time_point deadline) {
    for (transport::SendConn* s : sent_) s->flush(deadline);
  }

 private:
  PeerLinks& peers_;
  prims::PrimsArgs a_;
  prims::ChannelStats* st_;
  void* scratch_;
  std::vector<transport::SendConn*> sent_;
};

bool is_aborted_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Aborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

Wire native_wire(DataType t, Mode m, RedOp op, const Compression& c) {
  Wire w = wire_of(elem_of(t), m == Mode::None ? prims::WireMode::Raw : prims::WireMode::Coded, op, t, c);
  w.as_wire = reduces_as_wire(t, op);
  w.reduce = prims::reduce_fn(t, op);
  return w;
}

Wire code_wire(DataType t, bool wide, RedOp op, const Compression& c) {
  return wire_of(wide ? ElemType::I64 : ElemType::I32, prims::WireMode::Coded, op == RedOp::Avg ? RedOp::Sum : op, t,
                 c);
}

RingChannels::RingChannels(int rank, int nranks, const CommConfig& cfg, size_t slot_capacity, base::WorkerPool* pool,
                           FailFn fail)
    : rank_(rank),
      nranks_(nranks),
      nslots_(cfg.nslots),
      slot_bytes_(cfg.slot_bytes),
      slot_capacity_(slot_capacity),
      exact_nchannels_(std::max(1, cfg.exact_nchannels)),
      exact_slice_bytes_(cfg.exact_slice_bytes ? cfg.exact_slice_bytes : cfg.slot_bytes),
      pool_(pool),
      fail_(std::move(fail)),
      ch_(size_t(cfg.nchannels)) {
  for (auto& c : ch_) c.scratch.get(slot_capacity_ + 64);
}

void RingChannels::attach(int c, transport::SendConn* send, transport::RecvConn* recv) {
  ch_[size_t(c)].send = send;
  ch_[size_t(c)].recv = recv;
}

int RingChannels::pick(size_t bytes) const {
  const size_t n = bytes / kBytesPerChannel;
  return int(std::max<size_t>(1, std::min<size_t>(ch_.size(), n)));
}

uint8_t* RingChannels::scratch(int c) { return static_cast<uint8_t*>(ch_[size_t(c)].scratch.get(slot_capacity_ + 64)); }

namespace {

/// A device rank's link: its slots registered with CUDA (once per ring; DeviceWork::pin_slots).
void pin_link(DeviceWork* dw, const transport::SendConn* send, const transport::RecvConn* recv) {
  if (send) dw->pin_slots(send->slot_memory());
  if (recv) dw->pin_slots(recv->slot_memory());
}

}  // namespace

prims::Prims device_prims(DeviceWork& dw, int entry, prims::PrimsArgs a, transport::SendConn* send,
                          transport::RecvConn* recv, prims::ChannelStats* st) {
  const size_t es = codec::elem_size(a.type), slice = prims::slice_elems_for(a.slice_bytes, es);
  a.device = dw.slices(entry, a, a.slice_bytes, slice);
  pin_link(&dw, send, recv);
  return prims::Prims(send, recv, a, st, dw.scratch(entry, slice * es));
}

prims::PrimsArgs prims_args(const Wire& w, const CallState& call, int rank, int channel, size_t slot_bytes) {
  return args_of(w, call, rank, channel, slot_of(w.slice_bytes ? w.slice_bytes : slot_bytes));
}

prims::Prims RingChannels::prims(int c, const Wire& w, CallState& call) {
  const prims::PrimsArgs a = args_of(w, call, rank_, c, slot_of(w.slice_bytes ? w.slice_bytes : slot_bytes_));
  Channel& ch = ch_[size_t(c)];
  // A device rank: the slice codec and the scratch slice live on the device.
  if (w.device) return device_prims(*w.device, c, a, ch.send, ch.recv, &call.ch[size_t(c)]);
  return prims::Prims(ch.send, ch.recv, a, &call.ch[size_t(c)], ch.scratch.get(slot_capacity_ + 64));
}

prims::Prims RingChannels::control(prims::ChannelStats* st, Clock::duration timeout) {
  prims::PrimsArgs a;
  a.type = ElemType::U8;
  a.mode = prims::WireMode::Raw;
  a.raw_esize = 1;
  a.timeout = timeout;
  a.rank = rank_;
  a.channel = 0;
  a.slice_bytes = slot_of(slot_bytes_);
  Channel& ch = ch_[0];
  return prims::Prims(ch.send, ch.recv, a, st, ch.scratch.get(slot_capacity_ + 64));
}

void RingChannels::run(int nch, CallState& call, const std::function<void(int)>& fn) {
  call.ch.assign(size_t(nch), prims::ChannelStats{});
  const auto t0 = Clock::now();
  struct Timed {  // however the channels end
    CallState& call;
    Clock::time_point t0;
    ~Timed() { call.schedule_s += seconds(t0, Clock::now()); }
  } timed{call, t0};
  // The timeline (base/trace.hpp): the loops as one event on the calling
  // thread, each channel's part on the channel's own thread id.
  trace::Scope schedule_event("schedule");
  schedule_event.arg("channels", double(nch));
  trace::Recorder* const traced = trace::on() ? trace::current() : nullptr;
  std::vector<std::exception_ptr> errs(static_cast<size_t>(nch));
  auto guarded = [&](int c) {
    trace::Bind bind(traced, 1 + c);
    try {
      trace::Scope channel_event("channel");
      channel_event.arg("channel", double(c));
      fn(c);
      // The call is complete only when its last slots have left this process
      // (the socket proxy may still be writing them): a rank may exit right
      // after the call returns, and its peers must still get every byte.
      trace::Scope flush_event("flush");
      if (ch_[size_t(c)].send) ch_[size_t(c)].send->flush(call.deadline());
    } catch (...) {
      errs[size_t(c)] = std::current_exception();
      std::string what = "failed";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      fail_("channel " + std::to_string(c) + ": " + what);
    }
  };
  // The caller, done with channel 0, still notices its thread's interrupt
  // check while the other channels wait (base/interrupt.hpp).
  std::string interrupted;
  auto idle = [&] {
    if (!interrupted.empty()) return;
    if (const char* why = base::poll_interrupt()) {
      interrupted = why;
      fail_("interrupted (" + interrupted + ")");
    }
  };
  pool_->run(nch, guarded, base::has_interrupt_check() ? std::function<void()>(idle) : nullptr);
  if (!interrupted.empty()) {
    throw Interrupted("ncclz rank " + std::to_string(rank_) + ": interrupted (" + interrupted +
                      ") while waiting for the call's other channels; the communicator was aborted");
  }
  std::exception_ptr first;
  for (auto& e : errs) {
    if (e && !is_aborted_error(e)) {
      first = e;
      break;
    }
  }
  if (!first) {
    for (auto& e : errs) {
      if (e) {
        first = e;
        break;
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

void RingChannels::run_schedule(const Collective& cd, const void* src, void* dst, const Wire& w, int nch,
                                CallState& call) {
  if (cd.peer_schedule) {
    run_peer_schedule(cd, src, dst, w, nch, call);
    return;
  }
  const size_t es = codec::elem_size(w.type);
  call.slice_bytes = w.slice_bytes ? w.slice_bytes : slot_bytes_;
  run(nch, call, [&](int c) {
    const size_t b = cd.split * size_t(c) / size_t(nch), e = cd.split * size_t(c + 1) / size_t(nch);
    prims::Prims p = prims(c, w, call);
    ChannelPart part;
    part.pos = {rank_, nranks_};
    part.src = static_cast<const uint8_t*>(src) + b * es;
    part.dst = static_cast<uint8_t*>(dst) + b * es;
    part.count = e - b;
    part.stride = cd.split;
    part.root = cd.root;
    part.seg = algorithms::ring_segment_elems(p, nslots_);
    cd.schedule(p, part);
    p.settle();
  });
}

void RingChannels::run_peer_schedule(const Collective& cd, const void* src, void* dst, const Wire& w, int nch,
                                     CallState& call) {
  if (nranks_ == 1) {
    call.ch.assign(1, prims::ChannelStats{});
    return;  // nothing leaves this rank: its own block is the routine's copy
  }
  const int lanes = std::max(1, std::min(nch, nranks_ - 1));
  call.slice_bytes = slot_bytes_;
  if (w.device) {
    for (int q = 0; q < nranks_; ++q) {
      if (const transport::PeerLink* l = peers_->link(q)) pin_link(w.device, l->send.get(), l->recv.get());
    }
  }
  run(lanes, call, [&](int c) {
    // The links' slots are the ordinary size (w.slice_bytes, larger slices of
    // mostly-zero sums, are for the rings), and channel -1 names them in errors.
    prims::PrimsArgs a = args_of(w, call, rank_, -1, slot_of(slot_bytes_));
    void* scratch = ch_[size_t(c)].scratch.get(slot_capacity_ + 64);
    if (w.device) {
      // A device rank: the lane's slice codec and scratch slice on the device.
      const size_t slice = prims::slice_elems_for(a.slice_bytes, codec::elem_size(w.type));
      a.device = w.device->slices(c, a, a.slice_bytes, slice);
      scratch = w.device->scratch(c, slice * codec::elem_size(w.type));
    }
    LanePrims links(*peers_, a, &call.ch[size_t(c)], scratch);
    PeerPart part;
    part.lane = {rank_, nranks_, c, lanes};
    part.src = static_cast<const uint8_t*>(src);
    part.dst = static_cast<uint8_t*>(dst);
    part.send = cd.send_blocks;
    part.recv = cd.recv_blocks;
    part.root = cd.root;
    cd.peer_schedule(links, part);
    if (a.device && a.device->synchronize() != codec::Status::Ok) {
      throw Error("ncclz rank " + std::to_string(rank_) + ", lane " + std::to_string(c) +
                  ": the device slice codec's work failed: " + a.device->device_error());
    }
    links.flush(call.deadline());
  });
}

PeerLinks::PeerLinks(int rank, int nranks, size_t slot_bytes)
    : rank_(rank), slot_bytes_(slot_bytes), links_(size_t(nranks), nullptr) {
  scratch_.get(slot_of(slot_bytes_) + 64);
}

size_t PeerLinks::scratch_bytes() const { return slot_of(slot_bytes_) + 64; }

prims::PrimsArgs PeerLinks::args(const Wire& w, CallState& call) const {
  prims::PrimsArgs a;
  a.type = w.type;
  a.mode = w.mode;
  a.enc = w.enc;
  a.raw_esize = w.raw_esize;
  a.stage = w.stage;  // a group's lossy send or recv: each slice quantized / dequantized in the loop
  a.timeout = call.timeout;
  a.rank = rank_;
  a.channel = -1;
  a.slice_bytes = slot_of(slot_bytes_);
  return a;
}

prims::Prims PeerLinks::prims(int peer, bool sending, const Wire& w, CallState& call, prims::ChannelStats* st,
                              void* scratch) {
  transport::PeerLink& l = *links_[size_t(peer)];
  return prims::Prims(sending ? l.send.get() : nullptr, sending ? nullptr : l.recv.get(), args(w, call), st, scratch);
}

prims::Prims PeerLinks::prims(int peer, const Wire& w, CallState& call, prims::ChannelStats* st) {
  const prims::PrimsArgs a = args(w, call);
  transport::PeerLink& l = *links_[size_t(peer)];
  // A device rank: the pair's slice codec and scratch slice on the device
  // (the point-to-point calls' own entry of the DeviceWork).
  if (w.device) return device_prims(*w.device, DeviceWork::kPointToPoint, a, l.send.get(), l.recv.get(), st);
  return prims::Prims(l.send.get(), l.recv.get(), a, st, scratch_.get(slot_of(slot_bytes_) + 64));
}

}  // namespace ncclz::core
