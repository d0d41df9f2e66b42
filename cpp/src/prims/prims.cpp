// The generic step routine behind every primitive (see prims.hpp).
#include "prims/prims.hpp"

#include <chrono>
#include <cstring>
#include <string>

#include "ncclz/error.hpp"

namespace ncclz::prims {
namespace {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

size_t slice_elems_for(size_t slot_bytes, size_t esize) {
  if (esize == 0 || slot_bytes <= codec::kHeaderBytes + esize) return 1;
  size_t n = (slot_bytes - codec::kHeaderBytes) / esize;
  if (n > 0xFFFFFFFFu) n = 0xFFFFFFFFu;  // the slice header counts in 32 bits
  return n;
}

Prims::Prims(transport::SendConn* send, transport::RecvConn* recv, const PrimsArgs& args, ChannelStats* stats,
             void* scratch)
    : send_(send), recv_(recv), a_(args), st_(stats), scratch_(static_cast<uint8_t*>(scratch)) {
  esize_ = codec::elem_size(a_.type);
  slot_bytes_ = send_ ? send_->slot_bytes() : (recv_ ? recv_->slot_bytes() : 0);
  slice_ = slice_elems_for(a_.slice_bytes && a_.slice_bytes < slot_bytes_ ? a_.slice_bytes : slot_bytes_, esize_);
  // A list goes out as a Sparse slice without a predictor: only where the
  // selector could choose that too.
  using Choice = codec::EncodeOptions::Choice;
  const codec::EncodeOptions& e = a_.enc;
  const bool codes = a_.type == codec::ElemType::I32 || a_.type == codec::ElemType::I64;
  lists_ = a_.stage && a_.mode == WireMode::Coded && codes &&
           (e.choice == Choice::Sparse ||
            (e.choice == Choice::Auto && e.sparse_min_zeros <= 1 && e.sparse_fast_zeros < 1)) &&
           (e.predictor < 0 || e.predictor == int(codec::Predictor::None));
}

size_t Prims::list_max(size_t n) const {
  if (!lists_) return 0;
  if (a_.enc.choice == codec::EncodeOptions::Choice::Sparse) return n;
  return size_t(double(n) * (1.0 - a_.enc.sparse_fast_zeros));
}

transport::SlotView Prims::wait_in() {
  const auto t0 = Clock::now();
  transport::SlotView v = recv_->wait(a_.deadline);
  st_->wait_s += seconds_since(t0);
  return v;
}

uint8_t* Prims::acquire_out() {
  const auto t0 = Clock::now();
  uint8_t* p = send_->acquire(a_.deadline);
  st_->wait_s += seconds_since(t0);
  return p;
}

void Prims::post_out(size_t bytes, size_t n) {
  send_->post(bytes);
  st_->wire_bytes += bytes;
  st_->raw_bytes += uint64_t(n) * a_.raw_esize;
}

void Prims::decode(const transport::SlotView& in, void* dst, size_t n) {
  if (a_.mode == WireMode::Raw) {
    std::memcpy(dst, raw_in(in, n), n * esize_);
    return;
  }
  const auto t0 = Clock::now();
  size_t used = 0;
  const codec::Status s = codec::decode_slice(in.data, in.bytes, a_.type, uint32_t(n), dst, &used);
  st_->decode_s += seconds_since(t0);
  check_decoded(in, n, s, used);
}

void Prims::decode_add(const transport::SlotView& in, void* acc, size_t n) {
  const auto t0 = Clock::now();
  size_t used = 0;
  const codec::Status s = codec::decode_slice_add(in.data, in.bytes, a_.type, uint32_t(n), acc, &used);
  st_->decode_s += seconds_since(t0);
  check_decoded(in, n, s, used);
}

void Prims::check_decoded(const transport::SlotView& in, size_t n, codec::Status s, size_t used) {
  if (s != codec::Status::Ok || used != in.bytes) {
    throw CorruptData("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                      ": the slice received from rank " + std::to_string(recv_->peer()) + " (" +
                      std::to_string(in.bytes) + " bytes, expected " + std::to_string(n) + " elements of " +
                      std::to_string(esize_) + " bytes) does not decode: " +
                      (s != codec::Status::Ok ? codec::status_string(s) : "trailing bytes after the slice") +
                      ". The peers disagree on the call or the data was corrupted in transit.");
  }
}

const uint8_t* Prims::raw_in(const transport::SlotView& in, size_t n) {
  if (in.bytes != n * esize_) {
    throw CorruptData("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                      ": received " + std::to_string(in.bytes) + " bytes from rank " + std::to_string(recv_->peer()) +
                      " where " + std::to_string(n * esize_) + " were expected (uncompressed slice)");
  }
  // Typed reductions read the slot in place when it is aligned for the type.
  if (reinterpret_cast<uintptr_t>(in.data) % esize_ != 0) {
    std::memcpy(scratch_, in.data, in.bytes);
    return scratch_;
  }
  return in.data;
}

size_t Prims::encode(const void* src, size_t n, uint8_t* out, int predictor) {
  if (a_.mode == WireMode::Raw) {
    std::memcpy(out, src, n * esize_);
    return n * esize_;
  }
  const auto t0 = Clock::now();
  codec::SliceInfo info;
  codec::EncodeOptions hint;
  const codec::EncodeOptions* opt = &a_.enc;
  if (predictor >= 0 && a_.enc.predictor < 0) {
    hint = a_.enc;
    hint.predictor = predictor;
    opt = &hint;
  }
  const codec::Status s = codec::encode_slice(src, a_.type, uint32_t(n), out, slot_bytes_, *opt, &info);
  st_->encode_s += seconds_since(t0);
  if (s != codec::Status::Ok) {
    throw Error("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                ": encoding a slice of " + std::to_string(n) + " elements for rank " + std::to_string(send_->peer()) +
                " failed: " + codec::status_string(s) +
                " (a forced codec that does not accept this element type?)");
  }
  return info.bytes;
}

int Prims::incoming_predictor(const transport::SlotView& in) const {
  codec::SliceHeader h;
  if (codec::read_header(in.data, in.bytes, &h) != codec::Status::Ok) return -1;  // decode() already checked it
  if (h.codec == codec::Codec::Raw) return -1;
  return int(h.predictor);
}

size_t Prims::encode_nonzeros(const NonzeroList& l, size_t n, uint8_t* out) {
  const auto t0 = Clock::now();
  codec::SliceInfo info;
  const codec::Status s =
      codec::encode_slice_nonzeros(l.pos, l.val, l.k, a_.type, uint32_t(n), out, slot_bytes_, &info);
  st_->encode_s += seconds_since(t0);
  if (s != codec::Status::Ok) {
    throw Error("ncclz rank " + std::to_string(a_.rank) + ", channel " + std::to_string(a_.channel) +
                ": encoding a list of " + std::to_string(l.k) + " nonzeros of a " + std::to_string(n) +
                "-element slice for rank " + std::to_string(send_->peer()) + " failed: " + codec::status_string(s));
  }
  return info.bytes;
}

bool Prims::finish_nonzeros(const NonzeroList& l, uint8_t* dst, size_t n, const uint8_t* final_dst) {
  const auto t0 = Clock::now();
  bool done = final_dst && a_.stage->finish_nonzeros(final_dst, l, n);
  if (!done) {
    std::memset(dst, 0, n * esize_);
    const uint8_t* v = static_cast<const uint8_t*>(l.val);
    for (size_t i = 0; i < l.k; ++i) std::memcpy(dst + size_t(l.pos[i]) * esize_, v + i * esize_, esize_);
  }
  st_->stage_s += seconds_since(t0);
  return done;
}

bool Prims::finish_slice(const transport::SlotView& in, const uint8_t* final_dst, size_t n) {
  if (!final_dst || a_.mode != WireMode::Coded) return false;
  const auto t0 = Clock::now();
  const codec::Status s = a_.stage->finish_slice(final_dst, in.data, in.bytes, n);
  st_->decode_s += seconds_since(t0);  // the slice is decoded there (straight into the output)
  if (s == codec::Status::Unsupported) return false;
  check_decoded(in, n, s, in.bytes);
  return true;
}

template <unsigned F>
bool Prims::step(const uint8_t* src, uint8_t* dst, size_t n, bool src_scratch, const uint8_t* final_dst) {
  constexpr bool kR = F & kRecv, kRed = F & kReduce, kC = F & kCopy, kS = F & kSend, kFwd = F & kForward;
  const size_t bytes = n * esize_;

  if constexpr (kFwd) {
    // recvCopySend: forward the received bytes unchanged, decode once.
    const transport::SlotView in = wait_in();
    if (in.bytes > slot_bytes_) throw CorruptData("ncclz: oversized slot from rank " + std::to_string(recv_->peer()));
    uint8_t* out = acquire_out();
    std::memcpy(out, in.data, in.bytes);
    post_out(in.bytes, n);
    const bool done = finish_slice(in, final_dst, n);
    if (!done) decode(in, dst, n);
    recv_->release();
    return done;
  } else if constexpr (!kR) {
    // send / copySend: the local input goes out.
    if constexpr (kC) {
      if (dst != src) std::memcpy(dst, src, bytes);
    }
    uint8_t* out = acquire_out();
    const size_t w = encode(src, n, out);
    post_out(w, n);
  } else if constexpr (!kRed) {
    // recv (COPY only: the prims never need a plain recvSend).
    static_assert(!kS, "recvSend without FORWARD is not a verb");
    const transport::SlotView in = wait_in();
    const bool done = finish_slice(in, final_dst, n);
    if (!done) decode(in, dst, n);
    recv_->release();
    return done;
  } else {
    const transport::SlotView in = wait_in();
    if (a_.mode == WireMode::Raw) {
      const uint8_t* inc = raw_in(in, n);
      if constexpr (kS) {
        // Reduce straight into the outgoing slot, copy to the output from there.
        uint8_t* out = acquire_out();
        a_.reduce(out, inc, src, n);
        if constexpr (kC) std::memcpy(dst, out, bytes);
        post_out(bytes, n);
      } else {
        a_.reduce(dst, inc, src, n);
      }
      recv_->release();
      return false;
    }
    // Coded: decode into scratch, free the slot, reduce, encode. A Sparse
    // slice of an integer sum is added to a copy of the local slice instead,
    // in time proportional to its nonzeros (no dense decode, no reduce pass).
    uint8_t* acc = kC ? dst : scratch_;
    const bool add_sparse = a_.int_sum && codec::slice_adds_sparse(in.data, in.bytes);
    if (add_sparse) {
      // Into the stage's quantized slice itself where allowed (no copy).
      if (!kC && src_scratch) acc = const_cast<uint8_t*>(src);
      if (acc != src) std::memmove(acc, src, bytes);
      decode_add(in, acc, n);
    } else {
      decode(in, scratch_, n);
    }
    // A partial sum is the same field over more ranks: the predictor the
    // incoming slice was coded with (chosen by the selector on the rank that
    // started the sum) is kept, and the selector only picks the coder, not
    // sampling every predictor again (its cost, ~3% of a 4-rank all-reduce's
    // CPU time, is mostly the predictors). Not from a Raw slice (no choice made).
    int predictor = -1;
    if constexpr (kS) predictor = incoming_predictor(in);
    recv_->release();
    if (!add_sparse) a_.reduce(acc, scratch_, src, n);
    if constexpr (kS) {
      uint8_t* out = acquire_out();
      const size_t w = encode(acc, n, out, predictor);
      post_out(w, n);
    }
  }
  return false;
}

template <unsigned F>
bool Prims::step_nonzeros(const NonzeroList& mine, const uint8_t* src, uint8_t* dst, size_t n,
                          const uint8_t* final_dst) {
  constexpr bool kR = F & kRecv, kC = F & kCopy, kS = F & kSend;
  if constexpr (!kR) {
    static_assert(!kC, "copySend does not read a stage's list");
    uint8_t* out = acquire_out();
    post_out(encode_nonzeros(mine, n, out), n);
    return false;
  } else {
    const transport::SlotView in = wait_in();
    size_t theirs = 0;
    if (codec::sparse_slice_nonzeros(in.data, in.bytes, &theirs)) {
      // The sum's nonzeros: at most mine.k + the slice's.
      thread_local std::vector<uint32_t> pos;
      thread_local std::vector<uint64_t> val;  // 8-byte aligned for either code type
      if (pos.size() < mine.k + theirs) pos.resize(mine.k + theirs);
      if (val.size() < mine.k + theirs) val.resize(mine.k + theirs);
      const auto t0 = Clock::now();
      size_t k = 0, used = 0;
      const codec::Status s = codec::decode_slice_merge(in.data, in.bytes, a_.type, uint32_t(n), mine.pos, mine.val,
                                                        mine.k, pos.data(), val.data(), &k, &used);
      st_->decode_s += seconds_since(t0);
      check_decoded(in, n, s, used);
      if (k <= list_max(n)) {
        recv_->release();
        const NonzeroList sum{pos.data(), val.data(), k};
        if constexpr (kS) {
          uint8_t* out = acquire_out();
          post_out(encode_nonzeros(sum, n, out), n);
        }
        if constexpr (kC) return finish_nonzeros(sum, dst, n, final_dst);
        return false;
      }
    }
    // Not a Sparse slice, or a sum too dense for one: the dense step, on the
    // local slice's codes (the slot is still unreleased: the step reads it).
    const auto t0 = Clock::now();
    const uint8_t* q = static_cast<const uint8_t*>(a_.stage->prepare(src, n));
    st_->stage_s += seconds_since(t0);
    return step<F>(q, dst, n, q != src && a_.stage->prepared_writable(), final_dst);
  }
}

template <unsigned F>
void Prims::run(const void* src, void* dst, size_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  // Verbs that read the local input: every one but the receive-only ones.
  constexpr bool kReadsSrc = (F & kReduce) || !(F & kRecv);
  constexpr bool kFinal = F & kCopy;
  // Verbs that can take the local slice as a list of nonzeros: send and the
  // reductions (integer sums only) without FORWARD.
  constexpr bool kLists = kReadsSrc && !(F & kForward) && !((F & kCopy) && !(F & kRecv));
  const bool lists = kLists && (!(F & kReduce) || a_.int_sum);
  for (size_t off = 0; off < n; off += slice_) {
    const size_t k = n - off < slice_ ? n - off : slice_;
    const uint8_t* sp = s ? s + off * esize_ : nullptr;
    uint8_t* dp = d ? d + off * esize_ : nullptr;
    uint8_t* wp = dp;  // where the verb writes
    if (a_.stage && kFinal) wp = static_cast<uint8_t*>(a_.stage->output(dp, k));
    const uint8_t* final_dst = a_.stage && kFinal ? dp : nullptr;
    NonzeroList mine;
    const size_t max_k = lists ? list_max(k) : 0;
    bool got = false;
    if (max_k > 0) {
      const auto t0 = Clock::now();
      got = a_.stage->prepare_nonzeros(sp, k, max_k, &mine);
      st_->stage_s += seconds_since(t0);
    }
    bool done = false;
    if constexpr (kLists) {
      if (got) done = step_nonzeros<F>(mine, sp, wp, k, final_dst);
    }
    if (!got) {
      bool scratch = false;
      if (a_.stage && kReadsSrc) {
        const auto t0 = Clock::now();
        const uint8_t* p = static_cast<const uint8_t*>(a_.stage->prepare(sp, k));
        st_->stage_s += seconds_since(t0);
        scratch = p != sp && a_.stage->prepared_writable();
        sp = p;
      }
      done = step<F>(sp, wp, k, scratch, final_dst);
    }
    if (final_dst && !done) {
      const auto t0 = Clock::now();
      a_.stage->finish(dp, wp, k);
      st_->stage_s += seconds_since(t0);
    }
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
