// Lossless Sparse slices of floats: see float_sparse.hpp and docs/FORMAT.md.
#include "codec/float_sparse.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "codec/block_coder.hpp"
#include "codec/sparse_coder.hpp"
#include "codec/thread_buffer.hpp"

namespace ncclz::codec {
namespace {

// Per-thread buffers, one per use (the send loops call the coder per slice).
enum Use { kPos, kWide, kNarrow };
template <int kUse>
struct UseTag {};
template <class T, int kUse>
T* scratch(size_t n) {
  return thread_buffer<T, UseTag<kUse>>(n);
}

template <class Bits>
constexpr int width() {
  return int(sizeof(Bits) * 8);
}
template <class Bits>
constexpr Bits sign_bit() {
  return Bits(Bits(1) << (width<Bits>() - 1));
}
// The integers the Sparse coder takes for values of Bits' width.
template <class Bits>
using Wide = std::conditional_t<sizeof(Bits) == 8, int64_t, int32_t>;

constexpr size_t kSampleBlock = 32;

// Sampled values whose pattern is 0 (+0.0), and whose magnitude is 0 (+-0.0).
template <class Bits>
void sample_zeros(const Bits* x, size_t n, size_t every, uint64_t* plus, uint64_t* mag, uint64_t* sampled) {
  const size_t nblocks = (n + kSampleBlock - 1) / kSampleBlock;
  uint64_t p = 0, z = 0, m = 0;
  for (size_t b = 0; b < nblocks; b += every) {
    const size_t off = b * kSampleBlock, e = std::min(n, off + kSampleBlock);
    for (size_t i = off; i < e; ++i) {
      p += x[i] == 0;
      z += Bits(x[i] & Bits(~sign_bit<Bits>())) == 0;
    }
    m += e - off;
  }
  *plus = p;
  *mag = z;
  *sampled = m;
}

// A form's payload: the gaps at the geometric entropy of a share p of
// nonzeros, each value at `value_bits` (float bit patterns are close to
// incompressible), the two rANS frames' fixed bytes, and `extra` bytes.
size_t estimate_form(size_t n, double p, int value_bits, size_t extra) {
  if (p <= 0) return 1 + extra + 4;  // the count alone
  return 1 + extra + kSparseHeadBytes +
         size_t(sparse_gap_bytes(n, p) + p * double(n) * double(value_bits) / 8.0 + kSparseFrameFixed);
}

template <class Bits>
size_t encode_typed(const Bits* x, size_t n, int form, uint8_t* dst, size_t cap) {
  using W = Wide<Bits>;
  if (cap < 1) return kNoFit;
  dst[0] = uint8_t(form);
  size_t at = 1;
  uint32_t* pos = scratch<uint32_t, kPos>(n);
  W* val = scratch<W, kWide>(n);
  size_t k = 0;
  if (form == 0) {
    if constexpr (sizeof(Bits) == 2) {
      int16_t* narrow = scratch<int16_t, kNarrow>(n);
      k = sparse_find_nonzeros(reinterpret_cast<const int16_t*>(x), n, pos, narrow);
      for (size_t i = 0; i < k; ++i) val[i] = W(narrow[i]);  // sign-extended
    } else {
      k = sparse_find_nonzeros(reinterpret_cast<const W*>(x), n, pos, val);
    }
  } else {
    const size_t plane = (n + 7) / 8;
    if (cap - at < plane) return kNoFit;
    uint8_t* sp = dst + at;
    constexpr Bits kMag = Bits(~sign_bit<Bits>());
    constexpr int kShift = width<Bits>() - 1;
    // Eight values per plane byte, built in a register.
    for (size_t b = 0; b < plane; ++b) {
      const size_t i0 = 8 * b, e = std::min(n, i0 + 8);
      uint8_t byte = 0;
      for (size_t i = i0; i < e; ++i) {
        const Bits v = x[i];
        byte = uint8_t(byte | (uint8_t(v >> kShift) << (i - i0)));
        const Bits m = Bits(v & kMag);
        pos[k] = uint32_t(i);  // overwritten unless m != 0
        val[k] = W(m);         // below 2^(width - 1): non-negative
        k += m != 0;
      }
      sp[b] = byte;
    }
    at += plane;
  }
  const size_t b = sparse_encode_nonzeros(pos, val, k, n, dst + at, cap - at);
  return b == kNoFit ? kNoFit : at + b;
}

template <class Bits>
Status decode_typed(const uint8_t* src, size_t len, size_t n, Bits* out) {
  using W = Wide<Bits>;
  if (len < 1 || src[0] > 1) return Status::Corrupt;
  const int form = src[0];
  size_t at = 1;
  const uint8_t* sp = nullptr;
  if (form == 1) {
    const size_t plane = (n + 7) / 8;
    if (len - at < plane) return Status::Corrupt;
    sp = src + at;
    if ((n & 7) && (sp[plane - 1] >> (n & 7)) != 0) return Status::Corrupt;  // padding bits are 0
    at += plane;
  }
  if constexpr (sizeof(Bits) == 2) {
    uint32_t* pos = scratch<uint32_t, kPos>(n);
    W* val = scratch<W, kWide>(n);
    size_t k = 0;
    const Status s = sparse_decode_nonzeros(src + at, len - at, n, pos, val, &k);
    if (s != Status::Ok) return s;
    const W lo = form == 0 ? W(-32768) : W(1), hi = form == 0 ? W(32767) : W(0x7FFF);
    bool fits = true;
    for (size_t i = 0; i < k; ++i) fits &= val[i] >= lo && val[i] <= hi;
    if (!fits) return Status::Corrupt;  // not a 16-bit pattern (form 1: with its sign bit clear)
    std::memset(out, 0, n * sizeof(Bits));
    for (size_t i = 0; i < k; ++i) out[pos[i]] = Bits(val[i]);
  } else {
    const Status s = sparse_decode(src + at, len - at, n, reinterpret_cast<W*>(out));
    if (s != Status::Ok) return s;
  }
  if (form == 1) {
    // The signs in, in the same pass checking that no magnitude had one.
    constexpr int kShift = width<Bits>() - 1;
    Bits any = 0;
    for (size_t i = 0; i < n; ++i) {
      any |= out[i];
      out[i] = Bits(out[i] | (Bits((sp[i >> 3] >> (i & 7)) & 1) << kShift));
    }
    if (any & sign_bit<Bits>()) return Status::Corrupt;  // a magnitude with its sign bit set
  }
  return Status::Ok;
}

}  // namespace

bool float_sparse_type(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F64 || t == ElemType::F16 || t == ElemType::BF16;
}

FloatSparseEstimate float_sparse_estimate(const void* x, ElemType t, size_t n, size_t every) {
  FloatSparseEstimate e;
  e.bytes = kNoFit;
  if (!float_sparse_type(t) || n == 0) return e;
  every = std::max<size_t>(1, every);
  uint64_t plus = 0, mag = 0, m = 0;
  switch (elem_size(t)) {
    case 2: sample_zeros(static_cast<const uint16_t*>(x), n, every, &plus, &mag, &m); break;
    case 4: sample_zeros(static_cast<const uint32_t*>(x), n, every, &plus, &mag, &m); break;
    default: sample_zeros(static_cast<const uint64_t*>(x), n, every, &plus, &mag, &m); break;
  }
  if (m == 0) return e;
  const int bits = int(elem_size(t) * 8);
  const size_t e0 = estimate_form(n, 1.0 - double(plus) / double(m), bits, 0);
  const size_t e1 = estimate_form(n, 1.0 - double(mag) / double(m), bits - 1, (n + 7) / 8);
  if (e1 < e0) {
    e.bytes = e1;
    e.form = 1;
    e.zero_share = double(mag) / double(m);
  } else {
    e.bytes = e0;
    e.form = 0;
    e.zero_share = double(plus) / double(m);
  }
  return e;
}

size_t float_sparse_encode(const void* x, ElemType t, size_t n, int form, uint8_t* dst, size_t cap) {
  if (!float_sparse_type(t) || (form != 0 && form != 1)) return kNoFit;
  switch (elem_size(t)) {
    case 2: return encode_typed(static_cast<const uint16_t*>(x), n, form, dst, cap);
    case 4: return encode_typed(static_cast<const uint32_t*>(x), n, form, dst, cap);
    default: return encode_typed(static_cast<const uint64_t*>(x), n, form, dst, cap);
  }
}

Status float_sparse_decode(const uint8_t* src, size_t len, ElemType t, size_t n, void* dst) {
  if (!float_sparse_type(t)) return Status::Unsupported;
  switch (elem_size(t)) {
    case 2: return decode_typed(src, len, n, static_cast<uint16_t*>(dst));
    case 4: return decode_typed(src, len, n, static_cast<uint32_t*>(dst));
    default: return decode_typed(src, len, n, static_cast<uint64_t*>(dst));
  }
}

}  // namespace ncclz::codec
