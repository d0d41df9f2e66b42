// The slice codec of the send and receive loops (see slice_codec.hpp).
#include "prims/slice_codec.hpp"

#include <cstring>
#include <vector>

namespace ncclz::prims {
namespace {

using codec::Status;

/// Per-thread buffers for the lists the decode side returns (a list decoded
/// from a slice, or the merge of a slice with a local list): the positions
/// and the values, 8-byte aligned for either code type. Never both alive.
struct ListBuffers {
  std::vector<uint32_t> pos;
  std::vector<uint64_t> val;
  void reserve(size_t k) {
    if (pos.size() < k) pos.resize(k);
    if (val.size() < k) val.resize(k);
  }
};
ListBuffers& list_buffers() {
  thread_local ListBuffers b;
  return b;
}

/// The predictor of a coded slice, -1 for Raw or an unreadable header.
int predictor_of(const uint8_t* in, size_t len) {
  codec::SliceHeader h;
  if (codec::read_header(in, len, &h) != Status::Ok || h.codec == codec::Codec::Raw) return -1;
  return int(h.predictor);
}

/// Dense elements from a list: zeros, and the listed values at their positions.
void scatter(const NonzeroList& l, size_t n, size_t esize, uint8_t* dst) {
  std::memset(dst, 0, n * esize);
  const uint8_t* v = static_cast<const uint8_t*>(l.val);
  for (size_t i = 0; i < l.k; ++i) std::memcpy(dst + size_t(l.pos[i]) * esize, v + i * esize, esize);
}

/// A decoder's status, with bytes left after the slice counted as corruption.
Status whole(Status s, size_t used, size_t len) { return s == Status::Ok && used != len ? Status::Corrupt : s; }

}  // namespace

SliceCodec::SliceCodec(codec::ElemType type, WireMode mode, const codec::EncodeOptions& enc, ReduceFn reduce,
                       bool int_sum, size_t slot_bytes, uint8_t* scratch)
    : type_(type),
      mode_(mode),
      enc_(enc),
      reduce_(reduce),
      int_sum_(int_sum),
      slot_bytes_(slot_bytes),
      scratch_(scratch),
      esize_(codec::elem_size(type)),
      lists_out_(mode == WireMode::Coded && codec::is_code_type(type)) {}

size_t SliceCodec::list_max(size_t n, bool reduce) const {
  if (mode_ != WireMode::Coded || (reduce && !int_sum_)) return 0;
  return codec::sparse_list_max(enc_, type_, n);
}

const uint8_t* SliceCodec::raw_in(const uint8_t* in, size_t len, size_t n) const {
  if (len != n * esize_) return nullptr;
  // Typed reductions read the slot in place when it is aligned for the type.
  if (reinterpret_cast<uintptr_t>(in) % esize_ != 0) {
    std::memcpy(scratch_, in, len);
    return scratch_;
  }
  return in;
}

Status SliceCodec::decode(const uint8_t* in, size_t len, size_t n, bool want_list, uint8_t* to,
                          SliceValues* out) const {
  if (mode_ == WireMode::Raw) {
    const uint8_t* p = raw_in(in, len, n);
    if (!p) return Status::CountMismatch;
    if (p != to) std::memcpy(to, p, len);
    *out = SliceValues::of_dense(to);
    return Status::Ok;
  }
  size_t used = 0, nz = 0;
  if (want_list && lists_out_ && codec::sparse_slice_nonzeros(in, len, &nz)) {
    // A Sparse slice of codes: its nonzeros, no dense pass (the stage writes
    // the output from them).
    ListBuffers& b = list_buffers();
    b.reserve(nz);
    size_t k = 0;
    const Status s = codec::decode_slice_nonzeros(in, len, type_, uint32_t(n), b.pos.data(), b.val.data(), &k, &used);
    *out = SliceValues::of_list(NonzeroList{b.pos.data(), b.val.data(), k});
    return whole(s, used, len);
  }
  const Status s = codec::decode_slice(in, len, type_, uint32_t(n), to, &used);
  *out = SliceValues::of_dense(to);
  return whole(s, used, len);
}

Status SliceCodec::reduce(const uint8_t* in, size_t len, size_t n, const SliceValues& local, uint8_t* to,
                          SliceValues* out, const SlotDone& done) const {
  size_t used = 0;
  if (local.is_list) {
    // The list of the sum: at most local.k + the slice's nonzeros.
    size_t theirs = 0;
    if (!int_sum_ || !codec::sparse_slice_nonzeros(in, len, &theirs)) return Status::Unsupported;
    ListBuffers& b = list_buffers();
    b.reserve(local.list.k + theirs);
    size_t k = 0;
    const Status s = codec::decode_slice_merge(in, len, type_, uint32_t(n), local.list.pos, local.list.val,
                                               local.list.k, b.pos.data(), b.val.data(), &k, &used);
    if (s != Status::Ok || used != len) return whole(s, used, len);
    if (k > list_max(n, true)) return Status::Unsupported;  // too dense for a list: the dense way
    *out = SliceValues::of_list(NonzeroList{b.pos.data(), b.val.data(), k});
    return Status::Ok;
  }
  if (mode_ == WireMode::Raw) {
    const uint8_t* inc = raw_in(in, len, n);
    if (!inc) return Status::CountMismatch;
    reduce_(to, inc, local.dense, n);
    *out = SliceValues::of_dense(to);
    return Status::Ok;
  }
  // A partial sum is the same field over more ranks: the predictor the
  // incoming slice was coded with (chosen by the selector on the rank that
  // started the sum) is kept, and the selector only picks the coder, not
  // sampling every predictor again (its cost, ~3% of a 4-rank all-reduce's
  // CPU time, is mostly the predictors). Not from a Raw slice (no choice made).
  const int predictor = predictor_of(in, len);
  Status s;
  if (int_sum_ && codec::slice_adds_sparse(in, len)) {
    // A Sparse slice of an integer sum: its nonzeros are added into a copy
    // of the local values, in time proportional to them (no dense decode,
    // no reduction pass); into the local values themselves where they are
    // writable and no particular place was asked for.
    if (to == scratch_ && local.writable) to = const_cast<uint8_t*>(local.dense);
    if (to != local.dense) std::memmove(to, local.dense, n * esize_);
    s = codec::decode_slice_add(in, len, type_, uint32_t(n), to, &used);
    s = whole(s, used, len);
  } else {
    // The usual slices of a lossy sum (int32 codes, Block or Rans with None,
    // Delta1 or Delta2) are decoded, reconstructed and added in one pass;
    // any other is decoded into the scratch and the slot goes back before
    // the reduction pass.
    s = int_sum_ ? codec::decode_slice_add_to(in, len, type_, uint32_t(n), local.dense, to, &used)
                 : Status::Unsupported;
    if (s != Status::Unsupported) {
      s = whole(s, used, len);
      if (s == Status::Ok) done();
    } else {
      s = codec::decode_slice(in, len, type_, uint32_t(n), scratch_, &used);
      s = whole(s, used, len);
      if (s == Status::Ok) {
        done();
        reduce_(to, scratch_, local.dense, n);
      }
    }
  }
  *out = SliceValues::of_dense(to);
  out->predictor = predictor;
  return s;
}

Status SliceCodec::encode(const SliceValues& v, size_t n, uint8_t* out, size_t* bytes) const {
  *bytes = 0;
  if (mode_ == WireMode::Raw) {
    if (v.is_list) {
      scatter(v.list, n, esize_, out);
    } else if (v.dense != out) {
      std::memcpy(out, v.dense, n * esize_);
    }
    *bytes = n * esize_;
    return Status::Ok;
  }
  codec::SliceInfo info;
  Status s;
  if (v.is_list) {
    s = codec::encode_slice_nonzeros(v.list.pos, v.list.val, v.list.k, type_, uint32_t(n), out, slot_bytes_, &info);
  } else if (v.predictor >= 0 && enc_.predictor < 0) {
    codec::EncodeOptions hint = enc_;
    hint.predictor = v.predictor;
    s = codec::encode_slice(v.dense, type_, uint32_t(n), out, slot_bytes_, hint, &info);
  } else {
    s = codec::encode_slice(v.dense, type_, uint32_t(n), out, slot_bytes_, enc_, &info);
  }
  *bytes = info.bytes;
  return s;
}

}  // namespace ncclz::prims
