// Slice encoder/decoder and the codec selector.
//
// The selector looks at a sample of the slice (every `sample_every`-th block
// of 32 values) and, for each predictor that applies, computes two cheap
// statistics of the sampled residuals: the Block coder's exact cost of those
// blocks, and the histogram of rANS symbols. From them it estimates the size
// of every (codec, predictor) candidate for the whole slice, and picks the
// smallest fast one (Block or Raw); Rans wins only if its estimate is smaller
// than that by more than `rans_margin`, because it is several times slower.
// Where the sample is mostly zeros (`sparse_min_zeros`) the Sparse coder is a
// candidate too, estimated from the same histogram: it costs time in
// proportion to the nonzeros, so it takes Rans's place unless Rans is smaller
// than it by more than `sparse_margin`, and from `sparse_fast_zeros` on it
// competes with Block and Raw without `rans_margin`.
// The rule for codes (estimates and choice) is select_rule.hpp, NCCLZ_HD and
// shared with the device's selecting encode (EncodeOptions::allow_rans =
// false there: no Rans); this file gathers the sample's statistics.
// Floats in lossless mode choose between FloatExp and Raw the same way
// (FloatHuff, the device's lossless float coder, when forced, and with
// allow_rans = false: what a device rank writes and reads); bytes between
// Rans and Raw (FloatHuff over the bytes with allow_rans = false). The
// encoder falls back to Raw whenever the chosen coder's output would be larger
// than Raw, so a slice never exceeds max_slice_bytes().
#include "codec/slice.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_coder.hpp"
#include "codec/float_huff.hpp"
#include "codec/float_sparse.hpp"
#include "codec/predictor.hpp"
#include "codec/rans_coder.hpp"
#include "codec/select_rule.hpp"
#include "codec/slice_frame.hpp"
#include "codec/sparse_coder.hpp"

namespace ncclz::codec {
namespace {

using Choice = EncodeOptions::Choice;

// Grows a per-thread scratch buffer (the send loops call this per slice).
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(std::max(bytes, buf.size() * 2));
  return buf.data();
}

void predictor_args(Predictor p, const EncodeOptions& opt, uint32_t* a0, uint32_t* a1) {
  slice_predictor_args(p, opt.row, opt.plane, a0, a1);
}

struct Candidate {
  Codec codec = Codec::Raw;
  Predictor predictor = Predictor::None;
  size_t est = 0;
  int form = 0;  ///< Sparse on floats: float_sparse.hpp's form
};

// Residuals of one sampled block (off, m) for predictor p. The common
// predictors get straight loops; the Lorenzo ones use the generic form.
template <class Code>
void sample_residuals(const Code* q, size_t off, int m, Predictor p, uint32_t a0, uint32_t a1, Code* r) {
  using U = UCode<Code>;
  if (off < 2 || !is_delta_predictor(p)) {
    predict_range(q, off, size_t(m), p, a0, a1, r);
    return;
  }
  const Code* x = q + off;
  switch (p) {
    case Predictor::None:
      for (int k = 0; k < m; ++k) r[k] = x[k];
      break;
    case Predictor::Delta1:
      for (int k = 0; k < m; ++k) r[k] = Code(U(x[k]) - U(x[k - 1]));
      break;
    default:
      for (int k = 0; k < m; ++k) r[k] = Code(U(x[k]) - U(2) * U(x[k - 1]) + U(x[k - 2]));
      break;
  }
}

// Every how many blocks of 32 the selector samples a slice of n values.
size_t sample_stride(size_t n, const EncodeOptions& opt) { return select_sample_stride(n, opt); }

// Chooses codec and predictor for integer codes q[0..n): the statistics of
// the sample here, the rule itself in select_rule.hpp (shared with the device).
template <class Code>
Candidate select_for_codes(const Code* q, size_t n, const EncodeOptions& opt) {
  SelectRule rule(opt, n, sizeof(Code));
  SelectChoice forced;
  if (rule.forced(opt, &forced)) return Candidate{forced.codec, forced.predictor, forced.est};
  const bool want_block = SelectRule::wants_block(opt);
  const bool want_rans = SelectRule::wants_hist(opt);
  // Sample blocks spread evenly over the slice: every `sample_every`-th, and
  // at most `max_sample_blocks` of them.
  const size_t nblocks = rule.nblocks;
  const size_t every = sample_stride(n, opt);

  for (int pi = 0; pi < kNumPredictors; ++pi) {
    if (!rule.applies(pi, opt)) continue;
    const Predictor p = Predictor(pi);
    uint32_t a0, a1;
    predictor_args(p, opt, &a0, &a1);
    SampleStats st;
    st.zero();
    Code r[kBlockLen];
    for (size_t b = 0; b < nblocks; b += every) {
      const size_t off = b * kBlockLen;
      const int m = int(std::min<size_t>(kBlockLen, n - off));
      sample_residuals(q, off, m, p, a0, a1, r);
      if (want_block) st.block_cost += block_cost_halfbytes(r, m);
      if (want_rans) {
        Code any = 0;
        for (int k = 0; k < m; ++k) any |= r[k];
        if (any == 0) {
          st.hist[0] += uint32_t(m);  // an all-zero block (sparse data: most of them)
        } else {
          for (int k = 0; k < m; ++k) {
            uint32_t s, e;
            rans_symbol_of(r[k], &s, &e);
            ++st.hist[s];
            st.extra_bits += e;
          }
        }
      }
      st.sampled += size_t(m);
      ++st.sampled_blocks;
    }
    rule.add(p, st, opt);
  }
  const SelectChoice c = rule.finish(opt);
  return Candidate{c.codec, c.predictor, c.est};
}

// The slices that decode_slice_add_to decodes and adds in one pass.
bool decodes_added(ElemType t, const SliceHeader& h) {
  return t == ElemType::I32 && (h.codec == Codec::Block || h.codec == Codec::Rans) && is_delta_predictor(h.predictor);
}

template <class Code>
size_t encode_codes(const Code* q, size_t n, const Candidate& c, const EncodeOptions& opt, uint8_t* dst, size_t cap) {
  uint32_t a0, a1;
  predictor_args(c.predictor, opt, &a0, &a1);
  if constexpr (sizeof(Code) == 4) {
    // The common lossy slices: their residuals never in memory.
    if (is_delta_predictor(c.predictor)) {
      if (c.codec == Codec::Block) return block_encode_predicted(q, n, c.predictor, dst, cap);
      if (c.codec == Codec::Rans) return rans_encode_predicted(q, n, c.predictor, dst, cap);
    }
  }
  const Code* r = q;
  if (c.predictor != Predictor::None) {
    Code* tmp = reinterpret_cast<Code*>(scratch(n * sizeof(Code)));
    predict(q, n, c.predictor, a0, a1, tmp);
    r = tmp;
  }
  switch (c.codec) {
    case Codec::Block: return block_encode(r, n, dst, cap);
    case Codec::Sparse: return sparse_encode(r, n, dst, cap);
    default: return rans_encode(r, n, dst, cap);
  }
}

// Codec for a float slice in lossless mode: FloatExp (exponents coded, signs
// and mantissas raw), Sparse over the bit patterns where the sample is mostly
// zeros (float_sparse.hpp; FloatExp keeps 3/4 of an all-zero float32 slice),
// or Raw.
Candidate select_for_floats(const void* src, ElemType t, size_t n, const EncodeOptions& opt) {
  Candidate c{Codec::Raw, Predictor::None, n * elem_size(t)};
  FloatSparseEstimate sp;
  sp.bytes = kNoFit;
  if (opt.choice == Choice::Auto || opt.choice == Choice::Sparse) {
    sp = float_sparse_estimate(src, t, n, sample_stride(n, opt));
  }
  if (opt.choice == Choice::Sparse) return Candidate{Codec::Sparse, Predictor::None, 0, sp.form};
  // FloatHuff when forced, and for the types it codes where Rans (FloatExp's
  // exponent coder, Sparse's) is ruled out: the device's rule, no sample
  // (frame_slice falls back to Raw where it is not smaller). Otherwise the
  // selector keeps FloatExp, smaller on the CPU.
  if (opt.choice == Choice::FloatHuff ||
      (opt.choice == Choice::Auto && !opt.allow_rans && codec_accepts(Codec::FloatHuff, t, Predictor::None))) {
    return Candidate{Codec::FloatHuff, Predictor::None, 0};
  }
  if (codec_accepts(Codec::FloatExp, t, Predictor::None) &&
      (opt.choice == Choice::Auto || opt.choice == Choice::FloatExp)) {
    const size_t est = floatexp_estimate_bytes(src, t, n, std::max<uint32_t>(1, opt.sample_every));
    if (opt.choice == Choice::FloatExp || est < c.est) c = {Codec::FloatExp, Predictor::None, est};
  }
  if (opt.choice == Choice::Auto && sp.bytes != kNoFit && sp.zero_share >= opt.sparse_min_zeros && sp.bytes < c.est) {
    c = {Codec::Sparse, Predictor::None, sp.bytes, sp.form};
  }
  return c;
}

// Codec for a byte slice (uint8 data, and the types that travel as their
// bytes: int8, the 8-bit floats): Rans over the bytes themselves where its
// estimate from a sample of kBlockLen-byte blocks beats Raw by rans_margin,
// as for codes, else Raw. No predictor (byte data rarely has one). Where
// Rans is ruled out (allow_rans = false: a device rank codes), FloatHuff
// over the bytes, as for floats: the device's rule, no sample (frame_slice
// falls back to Raw where it is not smaller).
Candidate select_for_bytes(const uint8_t* s, size_t n, const EncodeOptions& opt) {
  const Candidate raw{Codec::Raw, Predictor::None, n};
  if (opt.choice == Choice::Rans) return Candidate{Codec::Rans, Predictor::None, 0};
  if (opt.choice == Choice::FloatHuff || (opt.choice == Choice::Auto && !opt.allow_rans)) {
    return Candidate{Codec::FloatHuff, Predictor::None, 0};
  }
  if (opt.choice != Choice::Auto || n < kBlockLen) return raw;
  uint32_t hist[kRansAlphabet] = {};
  uint64_t sampled = 0;
  const size_t every = sample_stride(n, opt), nblocks = (n + kBlockLen - 1) / kBlockLen;
  for (size_t b = 0; b < nblocks; b += every) {
    const size_t off = b * kBlockLen, m = std::min<size_t>(kBlockLen, n - off);
    for (size_t k = 0; k < m; ++k) ++hist[s[off + k]];
    sampled += m;
  }
  const size_t est = rans_estimate_bytes(hist, sampled, 0, n);
  return double(est) < (1.0 - opt.rans_margin) * double(n) ? Candidate{Codec::Rans, Predictor::None, est} : raw;
}

template <class Code>
Status decode_codes(const SliceHeader& h, const uint8_t* payload, size_t plen, uint32_t count, Code* q) {
  Status s;
  switch (h.codec) {
    case Codec::Block: s = block_decode(payload, plen, count, q); break;
    case Codec::Sparse: s = sparse_decode(payload, plen, count, q); break;
    default: s = rans_decode(payload, plen, count, q); break;
  }
  if (s == Status::Ok) reconstruct(q, count, h.predictor, h.pred_arg0, h.pred_arg1, q);
  return s;
}

Status fail(Status s, SliceInfo* info) {
  if (info) *info = SliceInfo{};
  return s;
}

}  // namespace

Status encode_slice(const void* src, ElemType t, uint32_t count, uint8_t* dst, size_t cap, const EncodeOptions& opt,
                    SliceInfo* info) {
  if (cap < kHeaderBytes) return fail(Status::NoSpace, info);
  uint8_t* payload = dst + kHeaderBytes;

  Candidate c;  // Raw unless something better applies
  if (opt.choice == Choice::FloatExp && !codec_accepts(Codec::FloatExp, t, Predictor::None))
    return fail(Status::Unsupported, info);
  if (opt.choice == Choice::FloatHuff && !codec_accepts(Codec::FloatHuff, t, Predictor::None))
    return fail(Status::Unsupported, info);
  if (opt.choice == Choice::Block && !is_code_type(t)) return fail(Status::Unsupported, info);
  if (opt.choice == Choice::Rans && !codec_accepts(Codec::Rans, t, Predictor::None))
    return fail(Status::Unsupported, info);
  if (opt.choice == Choice::Sparse && !codec_accepts(Codec::Sparse, t, Predictor::None))
    return fail(Status::Unsupported, info);
  if (opt.choice != Choice::Raw && count > 0) {
    if (t == ElemType::I32) {
      c = select_for_codes(static_cast<const int32_t*>(src), count, opt);
    } else if (t == ElemType::I64) {
      c = select_for_codes(static_cast<const int64_t*>(src), count, opt);
    } else if (float_sparse_type(t)) {
      c = select_for_floats(src, t, count, opt);
    } else if (t == ElemType::U8) {
      c = select_for_bytes(static_cast<const uint8_t*>(src), count, opt);
    }
  }

  size_t bytes = kNoFit;
  if (c.codec != Codec::Raw) {
    // Never let a coder produce more than Raw would (slice_coder_room).
    const size_t coder_cap = slice_coder_room(t, count, cap);
    if (c.codec == Codec::FloatExp) {
      bytes = floatexp_encode(src, t, count, payload, coder_cap);
    } else if (c.codec == Codec::FloatHuff) {
      bytes = floathuff_encode(src, t, count, payload, coder_cap);
    } else if (t == ElemType::U8) {
      bytes = rans_encode_bytes(static_cast<const uint8_t*>(src), count, payload, coder_cap);
    } else if (!is_code_type(t)) {
      bytes = float_sparse_encode(src, t, count, c.form, payload, coder_cap);
    } else if (t == ElemType::I32) {
      bytes = encode_codes(static_cast<const int32_t*>(src), count, c, opt, payload, coder_cap);
    } else {
      bytes = encode_codes(static_cast<const int64_t*>(src), count, c, opt, payload, coder_cap);
    }
  }
  // The slice: the coder's, or Raw where it did not fit (also a forced codec:
  // Raw bounds the worst case).
  uint32_t a0, a1;
  predictor_args(c.predictor, opt, &a0, &a1);
  SliceHeader h;
  const Status s = frame_slice(t, count, cap, c.codec, c.predictor, a0, a1, bytes, &h);
  if (s != Status::Ok) return fail(s, info);
  if (h.codec == Codec::Raw && h.payload_bytes) std::memcpy(payload, src, h.payload_bytes);
  write_header(dst, h);
  if (info) *info = SliceInfo{h.codec, h.predictor, kHeaderBytes + h.payload_bytes};
  return Status::Ok;
}

Status decode_slice(const uint8_t* src, size_t len, ElemType t, uint32_t count, void* dst, size_t* consumed) {
  SliceHeader h;
  Status s = read_slice_header(src, len, t, count, &h);
  if (s != Status::Ok) return s;
  const uint8_t* payload = src + kHeaderBytes;
  const size_t plen = h.payload_bytes;
  switch (h.codec) {
    case Codec::Raw:
      if (!raw_payload_valid(h)) return Status::Corrupt;
      if (plen) std::memcpy(dst, payload, plen);
      break;
    case Codec::Block:
    case Codec::Rans:
    case Codec::Sparse:
      if (t == ElemType::U8) {
        s = rans_decode_bytes(payload, plen, count, static_cast<uint8_t*>(dst));
      } else if (!is_code_type(t)) {
        s = float_sparse_decode(payload, plen, t, count, dst);
      } else if (t == ElemType::I32) {
        s = decode_codes(h, payload, plen, count, static_cast<int32_t*>(dst));
      } else {
        s = decode_codes(h, payload, plen, count, static_cast<int64_t*>(dst));
      }
      break;
    case Codec::FloatExp: s = floatexp_decode(payload, plen, t, count, dst); break;
    case Codec::FloatHuff: s = floathuff_decode(payload, plen, t, count, dst); break;
  }
  if (s == Status::Ok && consumed) *consumed = kHeaderBytes + plen;
  return s;
}

namespace {
template <class Code>
void add_codes(Code* dst, const Code* v, size_t n) {
  using U = std::make_unsigned_t<Code>;
  for (size_t i = 0; i < n; ++i) dst[i] = Code(U(U(dst[i]) + U(v[i])));
}
}  // namespace

namespace {
// decode_slice_add_to's pass, once the header h (decodes_added) is read.
Status decode_added(const SliceHeader& h, const uint8_t* src, uint32_t count, const void* local, void* to,
                    size_t* consumed) {
  const auto* l = static_cast<const int32_t*>(local);
  auto* o = static_cast<int32_t*>(to);
  const uint8_t* payload = src + kHeaderBytes;
  const Status d = h.codec == Codec::Block ? block_decode_add(payload, h.payload_bytes, count, h.predictor, l, o)
                                           : rans_decode_add(payload, h.payload_bytes, count, h.predictor, l, o);
  if (d == Status::Ok && consumed) *consumed = kHeaderBytes + h.payload_bytes;
  return d;
}
}  // namespace

Status decode_slice_add_to(const uint8_t* src, size_t len, ElemType t, uint32_t count, const void* local, void* to,
                           size_t* consumed) {
  if (t != ElemType::I32) return Status::Unsupported;
  SliceHeader h;
  const Status s = read_slice_header(src, len, t, count, &h);
  if (s != Status::Ok) return s;
  if (!decodes_added(t, h)) return Status::Unsupported;
  return decode_added(h, src, count, local, to, consumed);
}

Status decode_slice_add(const uint8_t* src, size_t len, ElemType t, uint32_t count, void* dst, size_t* consumed) {
  if (!is_code_type(t)) return Status::Unsupported;
  SliceHeader h;
  Status s = read_slice_header(src, len, t, count, &h);
  if (s != Status::Ok) return s;
  if (decodes_added(t, h)) return decode_added(h, src, count, dst, dst, consumed);
  if (h.codec == Codec::Sparse && h.predictor == Predictor::None) {
    const uint8_t* payload = src + kHeaderBytes;
    s = t == ElemType::I32 ? sparse_decode_add(payload, h.payload_bytes, count, static_cast<int32_t*>(dst))
                           : sparse_decode_add(payload, h.payload_bytes, count, static_cast<int64_t*>(dst));
    if (s == Status::Ok && consumed) *consumed = kHeaderBytes + h.payload_bytes;
    return s;
  }
  thread_local std::vector<uint64_t> tmp;  // 8-byte aligned for either code type
  if (tmp.size() < count) tmp.resize(std::max<size_t>(count, tmp.size() * 2));
  s = decode_slice(src, len, t, count, tmp.data(), consumed);
  if (s != Status::Ok) return s;
  if (t == ElemType::I32) {
    add_codes(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t*>(tmp.data()), count);
  } else {
    add_codes(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t*>(tmp.data()), count);
  }
  return Status::Ok;
}

bool slice_adds_sparse(const uint8_t* src, size_t len) {
  SliceHeader h;
  return read_header(src, len, &h) == Status::Ok && h.codec == Codec::Sparse && h.predictor == Predictor::None &&
         is_code_type(h.elem_type);
}

bool sparse_slice_nonzeros(const uint8_t* src, size_t len, size_t* k) {
  SliceHeader h;
  if (read_header(src, len, &h) != Status::Ok || h.codec != Codec::Sparse || h.predictor != Predictor::None ||
      !is_code_type(h.elem_type)) {
    return false;
  }
  *k = h.payload_bytes >= 4 ? size_t(load_u32(src + kHeaderBytes)) : 0;
  if (*k > h.count) *k = h.count;  // a corrupt count: the decoder refuses the slice
  return true;
}

namespace {
// The header of a slice that decode_slice_nonzeros / decode_slice_merge read.
Status sparse_slice_header(const uint8_t* src, size_t len, ElemType t, uint32_t count, SliceHeader* h) {
  if (!is_code_type(t)) return Status::Unsupported;
  const Status s = read_slice_header(src, len, t, count, h);
  if (s != Status::Ok) return s;
  if (h->codec != Codec::Sparse || h->predictor != Predictor::None) return Status::Unsupported;
  return Status::Ok;
}

template <class Code>
bool is_nonzero_list(const uint32_t* pos, const Code* val, size_t k, uint32_t count) {
  bool ok = true;
  uint64_t next = 0;  // smallest position allowed
  for (size_t i = 0; i < k; ++i) {
    ok &= uint64_t(pos[i]) >= next && val[i] != 0;
    next = uint64_t(pos[i]) + 1;
  }
  return ok && next <= count;
}

template <class Code>
void scatter(const uint32_t* pos, const Code* val, size_t k, uint32_t count, uint8_t* dst) {
  std::memset(dst, 0, size_t(count) * sizeof(Code));
  for (size_t i = 0; i < k; ++i) std::memcpy(dst + size_t(pos[i]) * sizeof(Code), &val[i], sizeof(Code));
}
}  // namespace

Status decode_slice_nonzeros(const uint8_t* src, size_t len, ElemType t, uint32_t count, uint32_t* pos, void* val,
                             size_t* k, size_t* consumed) {
  *k = 0;
  SliceHeader h;
  Status s = sparse_slice_header(src, len, t, count, &h);
  if (s != Status::Ok) return s;
  const uint8_t* payload = src + kHeaderBytes;
  s = t == ElemType::I32 ? sparse_decode_nonzeros(payload, h.payload_bytes, count, pos, static_cast<int32_t*>(val), k)
                         : sparse_decode_nonzeros(payload, h.payload_bytes, count, pos, static_cast<int64_t*>(val), k);
  if (s == Status::Ok && consumed) *consumed = kHeaderBytes + h.payload_bytes;
  return s;
}

Status decode_slice_merge(const uint8_t* src, size_t len, ElemType t, uint32_t count, const uint32_t* apos,
                          const void* aval, size_t ka, uint32_t* pos, void* val, size_t* k, size_t* consumed) {
  *k = 0;
  SliceHeader h;
  Status s = sparse_slice_header(src, len, t, count, &h);
  if (s != Status::Ok) return s;
  const uint8_t* payload = src + kHeaderBytes;
  if (t == ElemType::I32) {
    s = sparse_decode_merge(payload, h.payload_bytes, count, apos, static_cast<const int32_t*>(aval), ka, pos,
                            static_cast<int32_t*>(val), k);
  } else {
    s = sparse_decode_merge(payload, h.payload_bytes, count, apos, static_cast<const int64_t*>(aval), ka, pos,
                            static_cast<int64_t*>(val), k);
  }
  if (s == Status::Ok && consumed) *consumed = kHeaderBytes + h.payload_bytes;
  return s;
}

size_t sparse_list_max(const EncodeOptions& opt, ElemType t, size_t n) {
  if (!is_code_type(t)) return 0;
  if (opt.predictor >= 0 && opt.predictor != int(Predictor::None)) return 0;
  if (opt.choice == Choice::Sparse) return n;
  if (opt.choice != Choice::Auto || opt.sparse_min_zeros > 1 || opt.sparse_fast_zeros >= 1) return 0;
  return size_t(double(n) * (1.0 - opt.sparse_fast_zeros));
}

Status encode_slice_nonzeros(const uint32_t* pos, const void* val, size_t k, ElemType t, uint32_t count, uint8_t* dst,
                             size_t cap, SliceInfo* info) {
  if (!is_code_type(t)) return fail(Status::Unsupported, info);
  const bool wide = t == ElemType::I64;
  const bool ok = wide ? is_nonzero_list(pos, static_cast<const int64_t*>(val), k, count)
                       : is_nonzero_list(pos, static_cast<const int32_t*>(val), k, count);
  if (!ok) return fail(Status::Corrupt, info);
  if (cap < kHeaderBytes) return fail(Status::NoSpace, info);
  uint8_t* payload = dst + kHeaderBytes;
  // Never more than Raw would take (slice_coder_room); an empty slice is Raw.
  const size_t coder_cap = slice_coder_room(t, count, cap);
  const size_t bytes =
      count == 0 ? kNoFit
      : wide     ? sparse_encode_nonzeros(pos, static_cast<const int64_t*>(val), k, count, payload, coder_cap)
                 : sparse_encode_nonzeros(pos, static_cast<const int32_t*>(val), k, count, payload, coder_cap);
  SliceHeader h;
  const Status s = frame_slice(t, count, cap, Codec::Sparse, Predictor::None, 0, 0, bytes, &h);
  if (s != Status::Ok) return fail(s, info);
  if (h.codec == Codec::Raw) {
    if (wide) {
      scatter(pos, static_cast<const int64_t*>(val), k, count, payload);
    } else {
      scatter(pos, static_cast<const int32_t*>(val), k, count, payload);
    }
  }
  write_header(dst, h);
  if (info) *info = SliceInfo{h.codec, Predictor::None, kHeaderBytes + h.payload_bytes};
  return Status::Ok;
}

}  // namespace ncclz::codec
