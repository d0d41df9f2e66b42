// The generic step routine behind every primitive (see prims.hpp).
#include "prims/prims.hpp"

#include <chrono>
#include <cstring>
#include <string>

#include "base/trace.hpp"
#include "ncclz/error.hpp"

namespace ncclz::prims {
namespace {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

size_t slice_elems_for(size_t slot_bytes, size_t esize) {
  if (esize == 0 || slot_bytes <= codec::kHeaderBytes + esize) return 1;
  size_t n = (slot_bytes - codec::kHeaderBytes) / esize;
  if (n > 0xFFFFFFFFu) n = 0xFFFFFFFFu;  // the slice header counts in 32 bits
  return n;
}

Prims::Prims(transport::SendConn* send, transport::RecvConn* recv, const PrimsArgs& args, ChannelStats* stats,
             void* scratch)
    : send_(send),
      recv_(recv),
      a_(args),
      st_(stats),
      scratch_(static_cast<uint8_t*>(scratch)),
      esize_(codec::elem_size(args.type)),
      slot_bytes_(send ? send->slot_bytes() : (recv ? recv->slot_bytes() : 0)),
      slice_(
          slice_elems_for(args.slice_bytes && args.slice_bytes < slot_bytes_ ? args.slice_bytes : slot_bytes_, esize_)),
      codec_(args.type, args.mode, args.enc, args.reduce, args.int_sum, slot_bytes_, scratch_),
      dev_(args.device),
      list_stage_(dynamic_cast<ListStage*>(args.stage)) {
  if (dev_ && (args.stage || dev_->mode() != args.mode)) {
    throw InvalidArgument("ncclz rank " + std::to_string(args.rank) +
                          ": a device rank's primitives take no Stage and the device codec's wire mode");
  }
}

// The timeline (base/trace.hpp): each wait, codec pass, copy and post below
// is one event on the channel's thread when a trace records.

transport::SlotView Prims::wait_in() {
  trace::Scope ev("wait_in");
  const auto t0 = Clock::now();
  transport::SlotView v = recv_->wait(wait_deadline());
  st_->wait_s += seconds_since(t0);
  if (ev.active()) ev.arg("bytes", double(v.bytes)).arg("peer", double(recv_->peer()));
  in_held_ = true;
  return v;
}

void Prims::release_in() {
  if (!in_held_) return;
  in_held_ = false;
  recv_->release();
}

uint8_t* Prims::acquire_out() {
  trace::Scope ev("acquire_out");
  if (ev.active()) ev.arg("peer", double(send_->peer()));
  const auto t0 = Clock::now();
  uint8_t* p = send_->acquire(wait_deadline());
  st_->wait_s += seconds_since(t0);
  return p;
}

void Prims::post_out(size_t bytes, size_t n) {
  trace::Scope ev("post_out");
  ev.arg("bytes", double(bytes)).arg("elems", double(n));
  send_->post(bytes);
  st_->wire_bytes += bytes;
  st_->raw_bytes += uint64_t(n) * a_.raw_esize;
}

void Prims::check_decoded(const transport::SlotView& in, size_t n, codec::Status s) const {
  if (s == codec::Status::Ok) return;
  const std::string where = "ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel);
  if (dev_) {
    const std::string e = dev_->device_error();
    if (!e.empty()) {
      throw Error(where + ": the device slice codec failed on the slice received from rank " +
                  std::to_string(recv_->peer()) + " (" + std::to_string(in.bytes) + " bytes, " + std::to_string(n) +
                  " elements): " + e);
    }
  }
  if (codec_.mode() == WireMode::Raw) {
    throw CorruptData(where + ": received " + std::to_string(in.bytes) + " bytes from rank " +
                      std::to_string(recv_->peer()) + " where " + std::to_string(n * esize_) +
                      " were expected (uncompressed slice)");
  }
  throw CorruptData(where + ": the slice received from rank " + std::to_string(recv_->peer()) + " (" +
                    std::to_string(in.bytes) + " bytes, expected " + std::to_string(n) + " elements of " +
                    std::to_string(esize_) + " bytes) does not decode: " + codec::status_string(s) +
                    ". The peers disagree on the call or the data was corrupted in transit.");
}

SliceValues Prims::prepared(const uint8_t* src, size_t n, bool reduce) {
  if (!a_.stage) return SliceValues::of_dense(src);
  if (reduce) {
    for (Kept& k : kept_) {
      if (k.copy && k.src == src && k.n == n && prepares_ - k.at < 2) {
        void* copy = k.copy;
        k = Kept{};  // the reduction may write into it
        return SliceValues::of_dense(copy, true);
      }
    }
  }
  trace::Scope ev("stage_prepare");
  ev.arg("elems", double(n));
  const auto t0 = Clock::now();
  void* p = a_.stage->prepare(src, n);
  st_->stage_s += seconds_since(t0);
  ++prepares_;
  if (!reduce) {
    Kept& older = kept_[0].at <= kept_[1].at ? kept_[0] : kept_[1];
    older = Kept{src, n, p, prepares_};
  }
  return SliceValues::of_dense(p, true);
}

SliceValues Prims::local_values(const uint8_t* src, size_t n, bool reduce) {
  const size_t max_k = list_stage_ ? codec_.list_max(n, reduce) : 0;
  if (max_k > 0) {
    trace::Scope ev("stage_prepare");
    ev.arg("elems", double(n)).arg("list", 1.0);
    const auto t0 = Clock::now();
    NonzeroList l;
    const bool got = list_stage_->prepare_nonzeros(src, n, max_k, &l);
    st_->stage_s += seconds_since(t0);
    if (got) return SliceValues::of_list(l);
  }
  return prepared(src, n, reduce);
}

uint8_t* Prims::reduce_to(uint8_t* out, uint8_t* dst) const {
  if (out) return out;               // Raw: the outgoing slot
  if (dst && !a_.stage) return dst;  // COPY: the output itself
  return scratch_;                   // anywhere (the codec may use a writable local slice)
}

SliceValues Prims::decode(const transport::SlotView& in, size_t n, uint8_t* dst) {
  trace::Scope ev("decode");
  ev.arg("bytes", double(in.bytes)).arg("elems", double(n));
  const auto t0 = Clock::now();
  SliceValues v;
  uint8_t* to = dst && !a_.stage ? dst : scratch_;
  const codec::Status s = dev_ ? dev_->decode(in.data, in.bytes, n, to, &v)
                               : codec_.decode(in.data, in.bytes, n, list_stage_ != nullptr, to, &v);
  st_->decode_s += seconds_since(t0);
  check_decoded(in, n, s);
  return v;
}

SliceValues Prims::reduce(const transport::SlotView& in, size_t n, const SliceValues& local, const uint8_t* src,
                          uint8_t* out, uint8_t* dst) {
  trace::Scope ev("reduce");
  ev.arg("bytes", double(in.bytes)).arg("elems", double(n));
  auto t0 = Clock::now();
  SliceValues v;
  // The slot goes back as soon as the codec has read it (before a reduction pass).
  const SlotDone done{[](void* p) { static_cast<Prims*>(p)->release_in(); }, this};
  if (dev_) {
    const codec::Status s = dev_->reduce(in.data, in.bytes, n, local, reduce_to(out, dst), &v);
    st_->decode_s += seconds_since(t0);
    check_decoded(in, n, s);
    return v;
  }
  codec::Status s = codec_.reduce(in.data, in.bytes, n, local, reduce_to(out, dst), &v, done);
  if (s == codec::Status::Unsupported && local.is_list) {
    // Not a Sparse slice, or a sum too dense for a list: the dense way, on
    // the local slice's codes (the slot is still unreleased).
    st_->decode_s += seconds_since(t0);
    const SliceValues dense = prepared(src, n, true);
    t0 = Clock::now();
    s = codec_.reduce(in.data, in.bytes, n, dense, reduce_to(out, dst), &v, done);
  }
  st_->decode_s += seconds_since(t0);
  check_decoded(in, n, s);
  return v;
}

size_t Prims::encode(const SliceValues& v, size_t n, uint8_t* out) {
  trace::Scope ev("encode");
  const auto t0 = Clock::now();
  size_t bytes = 0;
  const codec::Status s = dev_ ? dev_->encode(v, n, out, &bytes) : codec_.encode(v, n, out, &bytes);
  st_->encode_s += seconds_since(t0);
  ev.arg("elems", double(n)).arg("bytes", double(bytes));
  check_encoded(v, n, s);
  return bytes;
}

void Prims::check_encoded(const SliceValues& v, size_t n, codec::Status s) const {
  if (s == codec::Status::Ok) return;
  const std::string what =
      v.is_list ? "a list of " + std::to_string(v.list.k) + " nonzeros of a " + std::to_string(n) + "-element slice"
                : "a slice of " + std::to_string(n) + " elements";
  throw Error("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) + ": encoding " +
              what + " for rank " + std::to_string(send_->peer()) + " failed" +
              // A CUDA error is the cause where there is one (its status is only the codec's summary of it).
              (dev_ && !dev_->device_error().empty()
                   ? " on the device: " + dev_->device_error()
                   : std::string(": ") + codec::status_string(s) +
                         " (a forced codec that does not accept this element type?)"));
}

SliceValues Prims::reduce_encode(const transport::SlotView& in, size_t n, const SliceValues& local, uint8_t* dst,
                                 uint8_t* out, size_t* bytes) {
  trace::Scope ev("reduce_encode");
  ev.arg("in_bytes", double(in.bytes)).arg("elems", double(n));
  const auto t0 = Clock::now();
  SliceValues v;
  codec::Status rs = codec::Status::Ok, es = codec::Status::Ok;
  dev_->reduce_encode(in.data, in.bytes, n, local, reduce_to(nullptr, dst), &v, out, bytes, &rs, &es);
  st_->encode_s += seconds_since(t0);  // the reduction's share too: they end in one sync
  check_decoded(in, n, rs);
  check_encoded(v, n, es);
  return v;
}

void Prims::settle() {
  trace::Scope ev("settle");
  if (dev_ && dev_->synchronize() != codec::Status::Ok) {
    throw Error("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                ": the device slice codec's work failed: " + dev_->device_error());
  }
}

void Prims::output(const SliceValues& v, uint8_t* dst, size_t n) {
  if (!a_.stage) {
    if (v.dense == dst) return;
    trace::Scope ev("output");
    ev.arg("bytes", double(n * esize_)).arg("on_device", dev_ ? 1.0 : 0.0);
    if (!dev_) {
      std::memcpy(dst, v.dense, n * esize_);
    } else if (dev_->copy(dst, v.dense, n * esize_) != codec::Status::Ok) {
      throw Error("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                  ": copying a slice of " + std::to_string(n) +
                  " elements to the output on the device failed: " + dev_->device_error());
    }
    return;
  }
  trace::Scope ev("stage_finish");
  ev.arg("elems", double(n));
  const auto t0 = Clock::now();
  if (v.is_list) {
    list_stage_->finish_nonzeros(dst, v.list, n);  // lists only ever come from a ListStage
  } else {
    a_.stage->finish(dst, v.dense, n);
  }
  st_->stage_s += seconds_since(t0);
}

template <unsigned F>
SliceValues Prims::step(const SliceValues& local, const uint8_t* src, uint8_t* dst, size_t n) {
  constexpr bool kR = F & kRecv, kRed = F & kReduce, kC = F & kCopy, kS = F & kSend, kFwd = F & kForward;
  static_assert(kR || !kRed, "a reduction receives");
  static_assert(!kR || kRed || kC, "recvSend without FORWARD is not a verb");
  static_assert(!kFwd || (kR && kC && kS && !kRed), "FORWARD is recvCopySend");
  uint8_t* out = nullptr;
  SliceValues v = local;
  if constexpr (kR) {
    const transport::SlotView in = wait_in();
    if constexpr (kFwd) {
      // The received bytes go on unchanged; the slice is decoded once, for the output.
      if (in.bytes > slot_bytes_) throw CorruptData("ncclz: oversized slot from rank " + std::to_string(recv_->peer()));
      out = acquire_out();
      {
        trace::Scope ev("forward_copy");
        ev.arg("bytes", double(in.bytes));
        std::memcpy(out, in.data, in.bytes);
      }
      post_out(in.bytes, n);
      v = decode(in, n, dst);
    } else if constexpr (kRed && kS) {
      if (dev_) {
        // A device rank reduces and encodes before one sync (DeviceSlices::reduce_encode).
        out = acquire_out();
        size_t bytes = 0;
        v = reduce_encode(in, n, local, kC ? dst : nullptr, out, &bytes);
        release_in();
        post_out(bytes, n);
        return v;
      }
      // Mode none: the values are the slot bytes, so the sum goes straight into the outgoing slot.
      if (codec_.mode() == WireMode::Raw) out = acquire_out();
      v = reduce(in, n, local, src, out, kC ? dst : nullptr);
    } else if constexpr (kRed) {
      v = reduce(in, n, local, src, out, kC ? dst : nullptr);
    } else {
      v = decode(in, n, dst);
    }
    release_in();
  }
  if constexpr (kS && !kFwd) {
    if (!out) out = acquire_out();
    const size_t bytes = encode(v, n, out);
    if (kC && !v.is_list && v.dense == out) {
      // The output is copied out of the slot before it is posted.
      uint8_t* keep = a_.stage ? scratch_ : dst;
      trace::Scope ev("output");
      ev.arg("bytes", double(n * esize_)).arg("from_slot", 1.0);
      std::memcpy(keep, out, n * esize_);
      v.dense = keep;
    }
    post_out(bytes, n);
  }
  return v;
}

template <unsigned F>
void Prims::run(const void* src, void* dst, size_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  // Verbs that read the local input: every one but the receive-only ones;
  // of those, send and the reductions may take it as a list (not copySend:
  // its output is the input itself).
  constexpr bool kReadsSrc = (F & kReduce) || !(F & kRecv);
  constexpr bool kLists = kReadsSrc && !((F & kCopy) && !(F & kRecv));
  for (size_t off = 0; off < n; off += slice_) {
    const size_t k = n - off < slice_ ? n - off : slice_;
    const uint8_t* sp = s ? s + off * esize_ : nullptr;
    uint8_t* dp = d ? d + off * esize_ : nullptr;
    SliceValues local;
    if constexpr (kLists) {
      local = local_values(sp, k, F & kReduce);
    } else if constexpr (kReadsSrc) {
      local = prepared(sp, k);
    }
    const SliceValues v = step<F>(local, sp, dp, k);
    if constexpr ((F & kCopy) != 0) output(v, dp, k);
  }
}

void Prims::send(const void* src, size_t n) { run<kSend>(src, nullptr, n); }
void Prims::copySend(const void* src, void* dst, size_t n) { run<kCopy | kSend>(src, dst, n); }
void Prims::recv(void* dst, size_t n) { run<kRecv | kCopy>(nullptr, dst, n); }
void Prims::recvReduceSend(const void* src, size_t n) { run<kRecv | kReduce | kSend>(src, nullptr, n); }
void Prims::recvReduceCopy(const void* src, void* dst, size_t n) { run<kRecv | kReduce | kCopy>(src, dst, n); }
void Prims::recvReduceCopySend(const void* src, void* dst, size_t n) {
  run<kRecv | kReduce | kCopy | kSend>(src, dst, n);
}
void Prims::recvCopySend(void* dst, size_t n) { run<kRecv | kCopy | kSend | kForward>(nullptr, dst, n); }

}  // namespace ncclz::prims
