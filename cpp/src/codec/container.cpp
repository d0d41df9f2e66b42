// Compressed container: layout in docs/FORMAT.md, "Container (blob)".
//
//   offset  size      field
//   0       4         magic 'N' 'C' 'Z' 'B'
//   4       1         version (2; 1 is read too: no field E, shape at 40, no CRC)
//   5       1         mode: 0 lossless, 1 lossy
//   6       1         dtype (ArrayType of the original array: an ElemType, or
//                     8..12, held as the bit patterns of a carrier ElemType)
//   7       1         code type (ElemType the slices carry: dtype, or I32/I64)
//   8       1         ndim (0..32)
//   9       1         bound kind: 0 none (lossless), 1 abs, 2 rel
//   10      1         layout: 0 codes in element order, 1 interp (lossy only)
//   11      1         interp: log2 of the grid factor k (1..6); 0 otherwise
//   12      4         slice length L (elements per slice, >= 1)
//   16      8         requested bound (f64: E or r; 0 lossless)
//   24      8         eb, the absolute bound used (f64; 0 lossless)
//   32      8         number of slices S = ceil(n / L)
//   40      8         E, the bound every element is within (f64: abs, or rel resolved; 0 lossless)
//   48      8*ndim    shape (u64 each)
//   ...               S slices back to back (slice k: elements [kL, min(n, (k+1)L)))
//   ...     8         outlier count m (0 in lossless mode)
//           8         index bytes B
//           B         indices as LEB128 varints of gaps: i0, then i[j] - i[j-1] - 1
//           m*size    raw values of the outliers (dtype)
//   end-4   4         CRC-32C of every byte before it (base/crc32c.hpp)
//   end of blob (no trailing bytes)
//
// All integers little-endian. The CRC is checked before anything else is
// read past the version byte: at a fixed place (the blob's last 4 bytes) over
// a fixed range (all the others), it catches every change of up to 3 bits and
// every burst of up to 32 whatever fields they hit, lengths and counts
// included. (A flipped version byte gives 0, 3 or 6, never 1: a version-2
// blob cannot pass for an unchecked version-1 one by one flipped bit.)
#include "ncclz/codec/container.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <type_traits>

#include "base/crc32c.hpp"
#include "bound/error_budget.hpp"
#include "codec/interp_codec.hpp"
#include "codec/quantizer.hpp"
#include "codec/slice.hpp"
#include "ncclz/error.hpp"

namespace ncclz::codec {
namespace {

constexpr uint32_t kBlobMagic = 0x425A434Eu;  // 'N','C','Z','B'
constexpr uint8_t kBlobVersion = 2;           // what compress() writes
constexpr size_t kFixedHeader = 48;           // version 2 (version 1: 40, without E)
constexpr size_t kFixedHeaderV1 = 40;
constexpr size_t kChecksumBytes = 4;  // version 2: the CRC-32C trailer
constexpr uint64_t kMaxElements = uint64_t(1) << 62;
constexpr int64_t kI32Limit = int64_t(1) << 30;
constexpr int64_t kI64Limit = (int64_t(1) << 51) - 1;
constexpr double kMaxEb = 0x1p1020;                        // keeps step and 1/step finite
constexpr double kMinInterpEb = 0x1p-960;                  // keeps the interp grid's step / 2^6 and its inverse normal
constexpr int64_t kInterpI32Limit = int64_t(1) << 29;      // |q| and |q - prediction| fit int32
constexpr uint64_t kInterpMinElems = 4096;                 // the selector tries the interp layout from this size
constexpr double kInterpMaxBitsPerElem = 10.0;             // ... when the classic blob is at most this dense
constexpr double kInterpMaxBitsPerElem1D = 4.0;            // (1-D arrays: rough data such as gradients are common)
constexpr uint64_t kInterpProbeElems = uint64_t(1) << 16;  // 1-D arrays: first try the interp layout on this much

[[noreturn]] void corrupt(const std::string& what) { throw CorruptData("ncclz.codec: corrupt blob: " + what); }
[[noreturn]] void invalid(const std::string& what) { throw InvalidArgument("ncclz.codec: " + what); }

bool is_float_type(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F64 || t == ElemType::F16 || t == ElemType::BF16;
}

double load_f64(const uint8_t* p) {
  const uint64_t u = load_u64(p);
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
void store_f64(uint8_t* p, double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  store_u64(p, u);
}

/// Calls f(T*) with the value type of a float ElemType.
template <class F>
auto with_float_type(ElemType t, F&& f) {
  switch (t) {
    case ElemType::F32: return f(static_cast<float*>(nullptr));
    case ElemType::F64: return f(static_cast<double*>(nullptr));
    case ElemType::F16: return f(static_cast<F16*>(nullptr));
    case ElemType::BF16: return f(static_cast<Bf16*>(nullptr));
    default: break;
  }
  invalid(std::string("not a float type: ") + elem_type_name(t));
}

/// Slice length and predictor geometry for a shape (see container.hpp).
struct Layout {
  uint32_t slice_elems = kTargetSliceElems;
  uint32_t row = 0, plane = 0;
};

Layout layout_for(const std::vector<int64_t>& shape) {
  Layout l;
  const size_t nd = shape.size();
  const uint64_t row = nd >= 2 ? uint64_t(shape[nd - 1]) : 0;
  const uint64_t plane = nd >= 3 ? row * uint64_t(shape[nd - 2]) : 0;
  auto aligned = [](uint64_t unit) { return uint32_t(std::max<uint64_t>(1, kTargetSliceElems / unit) * unit); };
  if (nd >= 3 && row >= 1 && plane >= 1 && plane <= kMaxAlignedSlice) {
    l.slice_elems = aligned(plane);
    l.row = uint32_t(row);
    l.plane = uint32_t(plane);
  } else if (nd >= 2 && row >= 1 && row <= kMaxAlignedSlice) {
    l.slice_elems = aligned(row);
    l.row = uint32_t(row);
  }
  return l;
}

uint64_t element_count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) invalid("negative dimension in shape");
    if (d != 0 && n > kMaxElements / uint64_t(d)) invalid("array too large");
    n *= uint64_t(d);
  }
  return n;
}

void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(uint8_t(v | 0x80));
    v >>= 7;
  }
  out.push_back(uint8_t(v));
}

// ---------------------------------------------------------------------------
// Parsing: everything decompress() and inspect() rely on is checked here,
// before any output is allocated.
// ---------------------------------------------------------------------------

struct Parsed {
  uint8_t version = kBlobVersion;
  size_t body_len = 0;  // bytes before the checksum trailer (the whole blob in version 1)
  uint32_t crc = 0;     // the trailer (version 2)
  Spec::Mode mode = Spec::Lossless;
  ElemType dtype = ElemType::F32, code_type = ElemType::F32;  // dtype: the array's carrier
  ArrayType array_type = ArrayType::F32;
  uint8_t bound_kind = 0;
  uint8_t layout = 0, log2k = 0;  // 1: interp layout with grid factor 2^log2k
  double bound = 0, eb = 0;
  std::optional<double> error_bound;  // E (version 1 stored it only as `bound` of abs blobs)
  std::vector<int64_t> shape;
  uint64_t n = 0;
  uint32_t slice_elems = 1;
  uint64_t slices = 0;
  std::vector<size_t> slice_offsets;   // offset of each slice in the blob
  std::vector<uint32_t> slice_counts;  // interp layout: elements of each slice
  size_t outlier_offset = 0;           // offset of the outlier section
  uint64_t outliers = 0;
  size_t index_offset = 0, index_bytes = 0, value_offset = 0;
};

/// Reads the shape (ndim u64 at *off, advanced past it) and returns the element count.
uint64_t read_shape(const uint8_t* blob, size_t len, unsigned ndim, size_t* off, std::vector<int64_t>* shape) {
  if (len - *off < size_t(8) * ndim) corrupt("truncated shape");
  shape->resize(ndim);
  uint64_t n = 1;
  for (unsigned i = 0; i < ndim; ++i, *off += 8) {
    const uint64_t d = load_u64(blob + *off);
    if (d > kMaxElements || (d != 0 && n > kMaxElements / d)) corrupt("shape too large");
    (*shape)[i] = int64_t(d);
    n *= d;
  }
  if (n > kMaxElements / 8) corrupt("shape too large");
  return n;
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

[[noreturn]] void checksum_mismatch(const Parsed& p, uint32_t actual) {
  corrupt("checksum mismatch (CRC-32C of its first " + std::to_string(p.body_len) + " bytes is " + hex32(actual) +
          ", the blob says " + hex32(p.crc) +
          "): it changed after compress() wrote it (a damaged file, transfer or memory?)");
}

/// Version 2: throws the checksum mismatch if there is one.
void verify_checksum(const uint8_t* blob, const Parsed& p) {
  if (p.version < 2) return;
  const uint32_t actual = base::crc32c(blob, p.body_len);
  if (actual != p.crc) checksum_mismatch(p, actual);
}

void parse_fields(const uint8_t* blob, size_t len, bool keep_offsets, Parsed& p);

/// Parses and validates a blob. `verify_now`: check the checksum first
/// (inspect); else the caller checks it while decoding (ChecksumCursor). Either
/// way a blob whose fields do not check out reports a checksum mismatch, when
/// there is one, rather than the field that a damage happened to hit.
Parsed parse(const uint8_t* blob, size_t len, bool keep_offsets, bool verify_now) {
  if (blob == nullptr && len != 0) corrupt("null buffer");
  if (len < 5) corrupt("truncated header (" + std::to_string(len) + " bytes)");
  if (load_u32(blob) != kBlobMagic) corrupt("bad magic (not an ncclz.codec blob)");
  Parsed p;
  p.version = blob[4];
  if (p.version != 1 && p.version != 2) {
    corrupt("unsupported version " + std::to_string(blob[4]) + " (this ncclz reads versions 1 and 2; a newer " +
            "ncclz wrote it, or the byte is damaged)");
  }
  const size_t fixed = p.version == 1 ? kFixedHeaderV1 : kFixedHeader;
  if (len < fixed + (p.version == 1 ? 0 : kChecksumBytes))
    corrupt("truncated header (" + std::to_string(len) + " bytes)");
  p.body_len = len;
  if (p.version >= 2) {
    p.body_len = len - kChecksumBytes;
    p.crc = load_u32(blob + p.body_len);
  }
  if (verify_now) verify_checksum(blob, p);
  try {
    parse_fields(blob, p.body_len, keep_offsets, p);
  } catch (const CorruptData&) {
    if (!verify_now) verify_checksum(blob, p);
    throw;
  }
  return p;
}

/// The checksum of a version-2 blob computed while it is decoded, region by
/// region in blob order (each slice right before it is decoded, while its
/// bytes are in cache anyway), instead of in a pass of its own: the same
/// CRC over the same bytes, about 8% less decode time on 32 MiB of Gaussian
/// float32 (bench/results/codec.md).
class ChecksumCursor {
 public:
  ChecksumCursor(const uint8_t* blob, const Parsed& p) : blob_(blob), p_(p) {}
  /// Adds the bytes up to `end` (a slice's end, the blob's end).
  void upto(size_t end) {
    if (p_.version < 2 || end <= done_) return;
    crc_ = base::crc32c(blob_ + done_, end - done_, crc_);
    done_ = end;
  }
  /// Adds the rest and compares; throws the checksum mismatch.
  void finish() {
    upto(p_.body_len);
    if (p_.version >= 2 && crc_ != p_.crc) checksum_mismatch(p_, crc_);
  }
  size_t slice_end(uint64_t k) const { return k + 1 < p_.slices ? p_.slice_offsets[size_t(k + 1)] : p_.outlier_offset; }

 private:
  const uint8_t* blob_;
  const Parsed& p_;
  size_t done_ = 0;
  uint32_t crc_ = 0;
};

void parse_fields(const uint8_t* blob, size_t len, bool keep_offsets, Parsed& p) {
  const size_t fixed = p.version == 1 ? kFixedHeaderV1 : kFixedHeader;
  if (blob[5] > 1) corrupt("bad mode byte");
  p.mode = Spec::Mode(blob[5]);
  if (!is_array_type(blob[6]) || !is_valid_elem_type(blob[7])) corrupt("bad element type");
  if (p.version == 1 && !is_valid_elem_type(blob[6])) corrupt("bad element type for version 1");
  p.array_type = ArrayType(blob[6]);
  p.dtype = carrier_of(p.array_type);
  p.code_type = ElemType(blob[7]);
  const unsigned ndim = blob[8];
  if (ndim > kMaxDims) corrupt("too many dimensions");
  p.bound_kind = blob[9];
  p.layout = blob[10];
  p.log2k = blob[11];
  if (p.layout > 1) corrupt("bad layout byte");
  if (p.layout == 0 && p.log2k != 0) corrupt("grid factor without the interp layout");
  if (p.layout == 1 && (p.mode != Spec::Lossy || p.log2k < 1 || p.log2k > kInterpMaxLog2K))
    corrupt("bad interp layout");
  p.slice_elems = load_u32(blob + 12);
  if (p.slice_elems == 0) corrupt("zero slice length");
  p.bound = load_f64(blob + 16);
  p.eb = load_f64(blob + 24);
  p.slices = load_u64(blob + 32);
  if (p.version >= 2) {
    p.error_bound = load_f64(blob + 40);
  } else if (p.bound_kind != 2) {
    p.error_bound = std::min(p.bound, kMaxEb);  // version 1: abs and lossless stored E as the bound
  }
  if (p.mode == Spec::Lossless) {
    if (p.code_type != p.dtype || p.bound_kind != 0 || p.bound != 0 || p.eb != 0 || p.error_bound != 0.0)
      corrupt("inconsistent lossless header");
  } else {
    if (!is_float_type(p.dtype) || !is_code_type(p.code_type)) corrupt("inconsistent lossy types");
    if (p.bound_kind != 1 && p.bound_kind != 2) corrupt("bad bound kind");
    if (!(std::isfinite(p.bound) && p.bound > 0 && std::isfinite(p.eb) && p.eb > 0 && p.eb <= kMaxEb))
      corrupt("bad error bound");
    if (p.version >= 2) {
      // E: the abs bound (at most kMaxEb), or r * (max - min); the grid's half step is at most E.
      const double e = *p.error_bound;
      if (!(std::isfinite(e) && e > 0 && e <= kMaxEb && p.eb <= e) ||
          (p.bound_kind == 1 && e != std::min(p.bound, kMaxEb)))
        corrupt("bad error bound");
    }
  }
  if (p.layout == 1 && !(p.eb >= kMinInterpEb)) corrupt("error bound too small for the interp layout");
  size_t off = fixed;
  p.n = read_shape(blob, len, ndim, &off, &p.shape);
  // Every slice is at least a header: this bounds the loop by the blob size.
  const uint64_t max_slices = (len - off) / kHeaderBytes;
  const uint64_t want_slices = p.layout == 1 ? interp_slices(std::vector<uint64_t>(p.shape.begin(), p.shape.end()),
                                                             p.slice_elems, max_slices, &p.slice_counts)
                                             : (p.n + p.slice_elems - 1) / p.slice_elems;
  if (p.slices != want_slices) corrupt("slice count does not match shape");
  if (p.slices > max_slices) corrupt("truncated slices");
  if (keep_offsets) p.slice_offsets.reserve(size_t(p.slices));
  for (uint64_t k = 0; k < p.slices; ++k) {
    SliceHeader h;
    const Status s = read_header(blob + off, len - off, &h);
    if (s != Status::Ok) corrupt("slice " + std::to_string(k) + ": " + status_string(s));
    if (h.elem_type != p.code_type) corrupt("slice " + std::to_string(k) + ": element type mismatch");
    const uint64_t want = p.layout == 1 ? uint64_t(p.slice_counts[size_t(k)])
                                        : std::min<uint64_t>(p.slice_elems, p.n - k * p.slice_elems);
    if (h.count != want) corrupt("slice " + std::to_string(k) + ": element count mismatch");
    if (keep_offsets) p.slice_offsets.push_back(off);
    off += kHeaderBytes + h.payload_bytes;
  }
  p.outlier_offset = off;
  if (len - off < 16) corrupt("truncated outlier section");
  p.outliers = load_u64(blob + off);
  const uint64_t ib = load_u64(blob + off + 8);
  off += 16;
  if (p.mode == Spec::Lossless && (p.outliers != 0 || ib != 0)) corrupt("outliers in a lossless blob");
  if (p.outliers > p.n) corrupt("more outliers than elements");
  const size_t rest = len - off;
  if (ib > rest) corrupt("truncated outlier indices");
  const size_t esize = elem_size(p.dtype);
  if (p.outliers > (rest - ib) / esize || (rest - ib) != p.outliers * esize)
    corrupt("outlier section size does not match its count");
  if (p.outliers > ib) corrupt("outlier index stream too short");  // >= 1 byte per index
  p.index_offset = off;
  p.index_bytes = size_t(ib);
  p.value_offset = off + size_t(ib);
}

/// Decodes the outlier indices, checking they are strictly increasing and < n.
template <class F>
void for_each_outlier(const uint8_t* blob, const Parsed& p, F&& f) {
  const uint8_t* s = blob + p.index_offset;
  const uint8_t* end = s + p.index_bytes;
  uint64_t prev = 0;
  for (uint64_t j = 0; j < p.outliers; ++j) {
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
      if (s == end) corrupt("truncated outlier index");
      const uint8_t b = *s++;
      if (shift == 63 && b > 1) corrupt("outlier index overflows");
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) break;
      shift += 7;
      if (shift > 63) corrupt("outlier index overflows");
    }
    const uint64_t idx = j == 0 ? v : prev + 1 + v;
    if (idx < prev || idx >= p.n || (j > 0 && v > p.n)) corrupt("outlier index out of range");
    f(j, idx);
    prev = idx;
  }
  if (s != end) corrupt("outlier index stream has trailing bytes");
}

/// Interp layout: the slices carry the residual stream in visit order
/// (interp_codec.hpp); codes stand for q * step / 2^log2k.
template <class C>
void decode_interp_codes(const uint8_t* blob, const Parsed& p, size_t len, uint8_t* out, ChecksumCursor& sum) {
  const size_t n = size_t(p.n);
  // The residuals go into the output when they fit there (it is overwritten
  // only by the final dequantization), else into a buffer of their own.
  const bool in_out = sizeof(C) <= elem_size(p.dtype) && reinterpret_cast<uintptr_t>(out) % alignof(C) == 0;
  BigArray<C> own(in_out ? 0 : n), q(n);
  C* resid = in_out ? reinterpret_cast<C*>(out) : own.data();
  size_t first = 0;
  for (uint64_t k = 0; k < p.slices; ++k) {
    const size_t off = p.slice_offsets[size_t(k)];
    const uint32_t count = p.slice_counts[size_t(k)];
    if (count > n - first) corrupt("slice lengths exceed the array");  // cannot happen after parse()
    sum.upto(sum.slice_end(k));
    const Status s = decode_slice(blob + off, len - off, p.code_type, count, resid + first);
    if (s != Status::Ok) corrupt("slice " + std::to_string(k) + ": " + status_string(s));
    first += count;
  }
  if (first != n) corrupt("slice lengths do not cover the array");
  interp_reconstruct(resid, std::vector<uint64_t>(p.shape.begin(), p.shape.end()), q.data());
  const QuantGrid g = QuantGrid::from_bound(std::ldexp(p.eb, -int(p.log2k)));
  with_float_type(p.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dequantize(q.data(), n, g, reinterpret_cast<T*>(out));
    return 0;
  });
}

void decode_interp(const uint8_t* blob, const Parsed& p, size_t len, uint8_t* out, ChecksumCursor& sum) {
  if (p.code_type == ElemType::I32)
    decode_interp_codes<int32_t>(blob, p, len, out, sum);
  else
    decode_interp_codes<int64_t>(blob, p, len, out, sum);
}

void decode_slices(const uint8_t* blob, const Parsed& p, size_t len, uint8_t* out, ChecksumCursor& sum) {
  const size_t esize = elem_size(p.dtype);
  if (p.layout == 1) {
    decode_interp(blob, p, len, out, sum);
  } else {
    std::vector<uint8_t> codes;
    if (p.mode == Spec::Lossy) codes.resize(size_t(std::min<uint64_t>(p.n, p.slice_elems)) * elem_size(p.code_type));
    const QuantGrid g = QuantGrid::from_bound(p.eb);
    for (uint64_t k = 0; k < p.slices; ++k) {
      const size_t off = p.slice_offsets[size_t(k)];
      const uint64_t first = k * p.slice_elems;
      const uint32_t count = uint32_t(std::min<uint64_t>(p.slice_elems, p.n - first));
      uint8_t* dst = out + first * esize;
      void* target = p.mode == Spec::Lossy ? static_cast<void*>(codes.data()) : static_cast<void*>(dst);
      sum.upto(sum.slice_end(k));
      const Status s = decode_slice(blob + off, len - off, p.code_type, count, target);
      if (s != Status::Ok) corrupt("slice " + std::to_string(k) + ": " + status_string(s));
      if (p.mode == Spec::Lossy) {
        with_float_type(p.dtype, [&](auto* tag) {
          using T = std::remove_pointer_t<decltype(tag)>;
          T* o = reinterpret_cast<T*>(dst);
          if (p.code_type == ElemType::I32)
            dequantize(reinterpret_cast<const int32_t*>(codes.data()), count, g, o);
          else
            dequantize(reinterpret_cast<const int64_t*>(codes.data()), count, g, o);
          return 0;
        });
      }
    }
  }
  sum.finish();
  const uint8_t* values = blob + p.value_offset;
  for_each_outlier(blob, p,
                   [&](uint64_t j, uint64_t idx) { std::memcpy(out + idx * esize, values + j * esize, esize); });
}

/// Decodes a parsed blob into `out`, checking its checksum on the way; a
/// decoder error of a blob whose checksum does not match reports the mismatch.
void decode_into(const uint8_t* blob, const Parsed& p, uint8_t* out) {
  ChecksumCursor sum(blob, p);
  try {
    decode_slices(blob, p, p.body_len, out, sum);
  } catch (const CorruptData&) {
    verify_checksum(blob, p);
    throw;
  }
}

// ---------------------------------------------------------------------------
// Compression.
// ---------------------------------------------------------------------------

EncodeOptions::Choice checked_choice(const EncodeOptions& opt, ElemType code_type, const Spec& spec,
                                     const std::vector<int64_t>& shape, const Layout& l) {
  using Choice = EncodeOptions::Choice;
  const char* what = spec.mode == Spec::Lossy ? "lossy mode carries integer codes" : "the data are";
  const std::string tname = elem_type_name(code_type);
  switch (opt.choice) {
    case Choice::Auto:
    case Choice::Raw: break;
    case Choice::Block:
      if (!is_code_type(code_type))
        invalid(std::string("codec 'block' codes 32- and 64-bit integers only, and ") + what + " " + tname +
                "; use 'raw', 'rans' (bytes too), 'sparse', 'floatexp' (float32/float16/bfloat16), 'floathuff' "
                "(those and bytes) or codec=None");
      break;
    case Choice::Rans:
      if (!codec_accepts(Codec::Rans, code_type, Predictor::None))
        invalid(std::string("codec 'rans' codes integers and bytes only, and ") + what + " " + tname +
                "; use 'raw', 'sparse', 'floatexp' (float32/float16/bfloat16) or codec=None");
      break;
    case Choice::Sparse:
      if (!codec_accepts(Codec::Sparse, code_type, Predictor::None))
        invalid(std::string("codec 'sparse' codes integers and the bit patterns of floats, and ") + what + " " + tname +
                "; use 'raw' or codec=None");
      break;
    case Choice::FloatExp:
      if (!codec_accepts(Codec::FloatExp, code_type, Predictor::None))
        invalid(std::string("codec 'floatexp' codes float32, float16 and bfloat16 losslessly, and ") + what + " " +
                tname +
                (spec.mode == Spec::Lossy    ? "; use 'block', 'rans', 'sparse', 'raw' or codec=None"
                 : code_type == ElemType::U8 ? "; use 'rans', 'floathuff', 'raw' or codec=None"
                                             : "; use 'raw' or codec=None"));
      break;
    case Choice::FloatHuff:
      if (!codec_accepts(Codec::FloatHuff, code_type, Predictor::None))
        invalid(std::string("codec 'floathuff' codes float32, float16, bfloat16 and bytes losslessly, and ") + what +
                " " + tname +
                (spec.mode == Spec::Lossy ? "; use 'block', 'rans', 'sparse', 'raw' or codec=None"
                                          : "; use 'raw' or codec=None"));
      break;
  }
  if (opt.predictor >= 0) {
    if (opt.predictor >= kNumPredictors) invalid("unknown predictor " + std::to_string(opt.predictor));
    const Predictor p = Predictor(opt.predictor);
    if (p != Predictor::None) {
      if (!is_code_type(code_type))
        invalid(std::string("predictor '") + predictor_name(p) +
                "' applies to integer codes only (lossy mode, or int32/int64 data), not to " + tname);
      if (opt.choice == Choice::Raw || opt.choice == Choice::FloatExp || opt.choice == Choice::FloatHuff)
        invalid(std::string("predictor '") + predictor_name(p) + "' needs codec 'block', 'rans' or 'sparse'");
      if (p == Predictor::Lorenzo2D && !(shape.size() >= 2 && l.row > 1))
        invalid("predictor 'lorenzo2d' needs an array of at least 2 dimensions with rows longer than 1");
      if (p == Predictor::Lorenzo3D && !(shape.size() >= 3 && l.plane > l.row && l.row > 1))
        invalid("predictor 'lorenzo3d' needs an array of at least 3 dimensions (last two longer than 1)");
    }
  }
  return opt.choice;
}

/// Writes the fixed header and shape. `eb`: the grid's half step; `e`: the
/// bound every element is within (both 0 lossless).
void put_header(ByteBuffer& out, const Spec& spec, ArrayType dtype, ElemType code_type,
                const std::vector<int64_t>& shape, uint32_t slice_elems, double eb, double e, uint64_t slices,
                int interp_log2k = 0) {
  out.resize(kFixedHeader + 8 * shape.size());
  uint8_t* h = out.data();
  store_u32(h, kBlobMagic);
  h[4] = kBlobVersion;
  h[5] = uint8_t(spec.mode);
  h[6] = uint8_t(dtype);
  h[7] = uint8_t(code_type);
  h[8] = uint8_t(shape.size());
  h[9] = spec.mode == Spec::Lossless ? 0 : (spec.abs_bound > 0 ? 1 : 2);
  h[10] = interp_log2k > 0 ? 1 : 0;
  h[11] = uint8_t(interp_log2k);
  store_u32(h + 12, slice_elems);
  store_f64(h + 16, spec.mode == Spec::Lossless ? 0.0 : (spec.abs_bound > 0 ? spec.abs_bound : spec.rel_bound));
  store_f64(h + 24, eb);
  store_u64(h + 32, slices);
  store_f64(h + 40, e);
  for (size_t i = 0; i < shape.size(); ++i) store_u64(h + kFixedHeader + 8 * i, uint64_t(shape[i]));
}

/// Appends one encoded slice of `count` values of type t at src.
SliceInfo put_slice(ByteBuffer& out, const void* src, ElemType t, uint32_t count, const EncodeOptions& opt) {
  const size_t at = out.size();
  const size_t cap = max_slice_bytes(t, count);
  out.resize(at + cap);
  SliceInfo info;
  const Status s = encode_slice(src, t, count, out.data() + at, cap, opt, &info);
  if (s != Status::Ok) throw Error(std::string("ncclz.codec: encoding a slice failed: ") + status_string(s));
  out.resize(at + info.bytes);
  return info;
}

void put_outliers(ByteBuffer& out, const std::vector<uint64_t>& idx, const uint8_t* x, size_t esize) {
  std::vector<uint8_t> varints;
  varints.reserve(idx.size() * 2);
  for (size_t j = 0; j < idx.size(); ++j) put_varint(varints, j == 0 ? idx[0] : idx[j] - idx[j - 1] - 1);
  const size_t at = out.size();
  out.resize(at + 16 + varints.size() + idx.size() * esize);
  uint8_t* p = out.data() + at;
  store_u64(p, idx.size());
  store_u64(p + 8, varints.size());
  if (!varints.empty()) std::memcpy(p + 16, varints.data(), varints.size());
  p += 16 + varints.size();
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(p + j * esize, x + idx[j] * esize, esize);
}

/// Appends the CRC-32C of everything before it (the version-2 trailer).
void seal(ByteBuffer& out) {
  const uint32_t crc = base::crc32c(out.data(), out.size());
  const size_t at = out.size();
  out.resize(at + kChecksumBytes);
  store_u32(out.data() + at, crc);
}

/// The encoder reserves the worst case up front (untouched pages cost no
/// memory); give back what a well-compressed blob left unused. Buffers of
/// kMmapOnly bytes or more are always mapped on their own by the C library
/// (glibc's mmap threshold never exceeds 32 MiB on 64-bit), so their unused
/// tail was never touched, holds no memory, and goes back to the kernel with
/// the buffer: shrinking them would only copy the blob into fresh pages
/// (docs/BENCHMARKS.md, "Measurements behind the code").
void release_slack(ByteBuffer& out) {
  constexpr size_t kMmapOnly = size_t(32) << 20;
  if (out.capacity() >= kMmapOnly) return;
  if (out.capacity() > out.size() + out.size() / 4 + 4096) out.shrink_to_fit();
}

template <class T, class Code>
void put_lossy_slices(ByteBuffer& out, const T* x, uint64_t n, const Layout& l, const QuantGrid& g, int64_t limit,
                      const EncodeOptions& opt, std::vector<uint64_t>* outliers, uint64_t* predicted_bytes,
                      uint64_t* probe_slice_bytes) {
  std::vector<Code> codes(size_t(std::min<uint64_t>(n, l.slice_elems)));
  std::vector<uint64_t> local;
  for (uint64_t first = 0; first < n; first += l.slice_elems) {
    const uint32_t count = uint32_t(std::min<uint64_t>(l.slice_elems, n - first));
    local.clear();
    quantize(x + first, count, g, limit, codes.data(), &local);
    for (uint64_t i : local) outliers->push_back(first + i);
    const SliceInfo info = put_slice(out, codes.data(), elem_type_of<Code>(), count, opt);
    if (info.predictor != Predictor::None) *predicted_bytes += info.bytes;
    if (first == (n / l.slice_elems / 2) * l.slice_elems) *probe_slice_bytes = info.bytes;
  }
}

/// Builds a lossy blob in the interp layout (docs/FORMAT.md, "Interp layout").
template <class T, class C>
ByteBuffer interp_blob_codes(const T* x, uint64_t n, const std::vector<int64_t>& shape, const Spec& spec,
                             const QuantGrid& g, double grid_eb, int64_t limit, int log2k, const EncodeOptions& opt) {
  BigArray<C> resid(static_cast<size_t>(n));
  std::vector<uint64_t> outliers;
  interp_quantize(x, std::vector<uint64_t>(shape.begin(), shape.end()), g, log2k, g.eb, limit, resid.data(), &outliers);
  std::sort(outliers.begin(), outliers.end());
  const uint32_t L = kTargetSliceElems;
  std::vector<uint32_t> counts;
  const uint64_t slices = interp_slices(std::vector<uint64_t>(shape.begin(), shape.end()), L, ~uint64_t(0), &counts);
  ByteBuffer out;
  put_header(out, spec, ArrayType(elem_type_of<T>()), elem_type_of<C>(), shape, L, grid_eb, g.eb, slices, log2k);
  size_t first = 0;
  for (uint32_t count : counts) {
    put_slice(out, resid.data() + first, elem_type_of<C>(), count, opt);
    first += count;
  }
  put_outliers(out, outliers, reinterpret_cast<const uint8_t*>(x), sizeof(T));
  return out;
}

template <class T>
ByteBuffer interp_blob(const T* x, uint64_t n, const std::vector<int64_t>& shape, const Spec& spec, const QuantGrid& g,
                       double grid_eb, double max_abs, int log2k, const EncodeOptions& opt) {
  const double inv_d = g.inv_step * double(int64_t(1) << log2k);
  if (max_abs * inv_d + double(int64_t(1) << log2k) + 2 < double(kInterpI32Limit))
    return interp_blob_codes<T, int32_t>(x, n, shape, spec, g, grid_eb, kInterpI32Limit, log2k, opt);
  return interp_blob_codes<T, int64_t>(x, n, shape, spec, g, grid_eb, kI64Limit, log2k, opt);
}

}  // namespace

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::I32: return "int32";
    case ElemType::I64: return "int64";
    case ElemType::F32: return "float32";
    case ElemType::F64: return "float64";
    case ElemType::F16: return "float16";
    case ElemType::BF16: return "bfloat16";
    case ElemType::U8: return "uint8";
  }
  return "unknown";
}

ElemType carrier_of(ArrayType t) {
  switch (t) {
    case ArrayType::I8:
    case ArrayType::F8E4M3:
    case ArrayType::F8E5M2: return ElemType::U8;
    case ArrayType::U32: return ElemType::I32;
    case ArrayType::U64: return ElemType::I64;
    default: return ElemType(t);
  }
}

const char* array_type_name(ArrayType t) {
  switch (t) {
    case ArrayType::I8: return "int8";
    case ArrayType::U32: return "uint32";
    case ArrayType::U64: return "uint64";
    case ArrayType::F8E4M3: return "float8_e4m3fn";
    case ArrayType::F8E5M2: return "float8_e5m2";
    default: return elem_type_name(ElemType(t));
  }
}

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::Raw: return "raw";
    case Codec::Block: return "block";
    case Codec::Rans: return "rans";
    case Codec::FloatExp: return "floatexp";
    case Codec::Sparse: return "sparse";
    case Codec::FloatHuff: return "floathuff";
  }
  return "unknown";
}

const char* predictor_name(Predictor p) {
  switch (p) {
    case Predictor::None: return "none";
    case Predictor::Delta1: return "delta1";
    case Predictor::Delta2: return "delta2";
    case Predictor::Lorenzo2D: return "lorenzo2d";
    case Predictor::Lorenzo3D: return "lorenzo3d";
  }
  return "unknown";
}

ByteBuffer compress(const void* x, ElemType t, const std::vector<int64_t>& shape, const Spec& spec) {
  return compress(x, t, shape, spec, EncodeOptions{});
}

ByteBuffer compress(const void* x, ElemType t, const std::vector<int64_t>& shape, const Spec& spec,
                    const EncodeOptions& options) {
  if (!is_valid_elem_type(uint8_t(t))) invalid("unknown element type");
  return compress(x, ArrayType(t), shape, spec, options);
}

ByteBuffer compress(const void* x, ArrayType as, const std::vector<int64_t>& shape, const Spec& spec,
                    const EncodeOptions& options) {
  if (!is_array_type(uint8_t(as))) invalid("unknown element type");
  const ElemType t = carrier_of(as);
  if (spec.mode == Spec::Lossy && uint8_t(as) != uint8_t(t)) {
    invalid(std::string("lossy mode needs float32, float64, float16 or bfloat16 data, not ") + array_type_name(as) +
            "; use Lossless() (" + array_type_name(as) + " travels as its bit patterns)");
  }
  if (shape.size() > size_t(kMaxDims)) invalid("at most " + std::to_string(kMaxDims) + " dimensions");
  const uint64_t n = element_count(shape);
  if (n > kMaxElements / 8) invalid("array too large");
  if (n > 0 && x == nullptr) invalid("null data pointer");
  if (spec.mode == Spec::Lossy) {
    const bool a = spec.abs_bound != 0, r = spec.rel_bound != 0;
    if (a == r) invalid("Lossy needs exactly one of abs and rel");
    const double b = a ? spec.abs_bound : spec.rel_bound;
    if (!(std::isfinite(b) && b > 0)) invalid("the error bound must be finite and > 0, got " + std::to_string(b));
    if (!is_float_type(t))
      invalid(std::string("lossy mode needs float32, float64, float16 or bfloat16 data, not ") + elem_type_name(t) +
              "; use Lossless() for integer data");
  } else if (spec.mode != Spec::Lossless) {
    invalid("unknown mode");
  }

  if (options.interp > 0) {
    if (spec.mode != Spec::Lossy) invalid("the interp layout applies to lossy mode only");
    if (options.predictor > int(Predictor::Delta2))
      invalid("the interp layout codes a residual stream: predictor must be none, delta1 or delta2");
  }
  if (options.interp_log2k < 1 || options.interp_log2k > kInterpMaxLog2K)
    invalid("interp grid factor must be 2^1 .. 2^" + std::to_string(kInterpMaxLog2K));
  const Layout l = layout_for(shape);
  EncodeOptions opt = options;
  opt.row = l.row;
  opt.plane = l.plane;
  const uint64_t slices = (n + l.slice_elems - 1) / l.slice_elems;
  ByteBuffer out;

  if (spec.mode == Spec::Lossless) {
    checked_choice(opt, t, spec, shape, l);
    put_header(out, spec, as, t, shape, l.slice_elems, 0.0, 0.0, slices);
    out.reserve(out.size() + size_t(slices) * kHeaderBytes + size_t(n) * elem_size(t) + 16);
    const uint8_t* src = static_cast<const uint8_t*>(x);
    for (uint64_t first = 0; first < n; first += l.slice_elems) {
      const uint32_t count = uint32_t(std::min<uint64_t>(l.slice_elems, n - first));
      put_slice(out, src + first * elem_size(t), t, count, opt);
    }
    put_outliers(out, {}, src, elem_size(t));
    seal(out);
    release_slack(out);
    return out;
  }

  with_float_type(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xs = static_cast<const T*>(x);
    double lo = 0, hi = 0;
    const bool any = finite_range(xs, size_t(n), &lo, &hi);
    const double max_abs = any ? std::max(std::fabs(lo), std::fabs(hi)) : 0.0;
    const bool constant = any && lo == hi;
    const double eb = bound::blob_bound(spec.abs_bound, spec.rel_bound, any, lo, hi, kMaxEb);
    // The grid's half step is the bound less half an ulp of T at the largest
    // magnitude a value or its code can have, so that rounding a grid point to
    // T never pushes an element past the bound (elements exactly between two
    // grid points would otherwise become outliers). Where that slack is more
    // than 1/8 of the bound (16-bit types at bounds near their precision) a
    // finer grid would cost more than the few outliers, and a constant array
    // keeps the grid that reproduces it exactly. The quantizer always checks
    // the user's bound; the blob records the grid's half step.
    const double slack = bound::half_ulp_bound(elem_type_of<T>(), max_abs + eb);
    const double grid_eb = (!constant && slack <= 0.125 * eb) ? eb - slack : eb;
    QuantGrid g = QuantGrid::from_bound(grid_eb);
    g.eb = eb;
    const bool narrow = max_abs * g.inv_step < double(kI32Limit);
    const ElemType code_type = narrow ? ElemType::I32 : ElemType::I64;
    checked_choice(opt, code_type, spec, shape, l);
    put_header(out, spec, as, code_type, shape, l.slice_elems, grid_eb, eb, slices);
    out.reserve(out.size() + size_t(slices) * kHeaderBytes + size_t(n) * elem_size(code_type) + 16);
    std::vector<uint64_t> outliers;
    const size_t header_bytes = out.size();
    uint64_t predicted_bytes = 0;    // slices the selector coded with a predictor
    uint64_t probe_slice_bytes = 0;  // the classic middle slice
    if (narrow)
      put_lossy_slices<T, int32_t>(out, xs, n, l, g, kI32Limit, opt, &outliers, &predicted_bytes, &probe_slice_bytes);
    else
      put_lossy_slices<T, int64_t>(out, xs, n, l, g, kI64Limit, opt, &outliers, &predicted_bytes, &probe_slice_bytes);
    const size_t slice_bytes = out.size() - header_bytes;
    put_outliers(out, outliers, static_cast<const uint8_t*>(x), sizeof(T));
    // The interp layout (predictive quantization on a finer grid) wins on
    // smooth data. It is tried only where it may: the selector found most of
    // the codes predictable from their neighbours (noise, where no predictor
    // helps, pays nothing for it), and the classic blob is not near raw.
    const bool defaults = options.choice == EncodeOptions::Choice::Auto && options.predictor < 0;
    const bool try_interp =
        options.interp > 0 ||
        (options.interp < 0 && defaults && n >= kInterpMinElems && 2 * predicted_bytes >= slice_bytes &&
         double(out.size()) * 8.0 <= (shape.size() == 1 ? kInterpMaxBitsPerElem1D : kInterpMaxBitsPerElem) * double(n));
    if (try_interp && grid_eb >= kMinInterpEb) {
      EncodeOptions sopt = options;
      sopt.row = sopt.plane = 0;
      // A long 1-D array (gradients, signals) is probed first: the interp
      // layout on its middle slice against the classic one, so that rough
      // 1-D data do not pay a full second encode.
      bool promising = true;
      if (options.interp < 0 && shape.size() == 1 && n >= 2 * uint64_t(l.slice_elems)) {
        // The first kInterpProbeElems of the middle classic slice, against that slice's share.
        const uint64_t at = (n / l.slice_elems / 2) * l.slice_elems;
        const uint64_t m = std::min<uint64_t>(kInterpProbeElems, l.slice_elems);
        const ByteBuffer probe =
            interp_blob(xs + at, m, {int64_t(m)}, spec, g, grid_eb, max_abs, options.interp_log2k, sopt);
        const double share = double(probe_slice_bytes) * double(m) / double(l.slice_elems);
        promising = double(probe.size()) < 0.9 * (share + double(kFixedHeader + 8 + 16));  // worth a second encode
      }
      if (promising) {
        ByteBuffer alt = interp_blob(xs, n, shape, spec, g, grid_eb, max_abs, options.interp_log2k, sopt);
        if (options.interp > 0 || alt.size() < out.size()) out = std::move(alt);
      }
    }
    return 0;
  });
  seal(out);
  release_slack(out);
  return out;
}

/// The outlier indices checked before anything is allocated or written.
void validate_outliers(const uint8_t* blob, const Parsed& p) {
  try {
    for_each_outlier(blob, p, [](uint64_t, uint64_t) {});
  } catch (const CorruptData&) {
    verify_checksum(blob, p);
    throw;
  }
}

Decoded decompress(const uint8_t* blob, size_t len) {
  const Parsed p = parse(blob, len, true, false);
  validate_outliers(blob, p);
  Decoded d;
  d.type = p.dtype;
  d.array_type = p.array_type;
  d.shape = p.shape;
  d.bytes.resize(size_t(p.n) * elem_size(p.dtype));
  decode_into(blob, p, d.bytes.data());
  return d;
}

ArrayDesc decompress_with(const uint8_t* blob, size_t len, const std::function<void*(size_t)>& alloc) {
  const Parsed p = parse(blob, len, true, false);
  validate_outliers(blob, p);
  ArrayDesc a;
  a.dtype = p.dtype;
  a.array_type = p.array_type;
  a.shape = p.shape;
  a.bytes = size_t(p.n) * elem_size(p.dtype);
  void* out;
  try {
    out = alloc(a.bytes);
  } catch (const std::bad_alloc&) {
    verify_checksum(blob, p);  // a damaged shape asks for too much: that is the damage
    throw;
  }
  if (a.bytes > 0 && out == nullptr) invalid("null output pointer");
  decode_into(blob, p, static_cast<uint8_t*>(out));
  return a;
}

void decompress_into(const uint8_t* blob, size_t len, void* out, size_t out_bytes) {
  const Parsed p = parse(blob, len, true, false);
  const uint64_t need = p.n * elem_size(p.dtype);
  if (out_bytes != need) {
    verify_checksum(blob, p);  // a damaged shape is a damaged blob, not a wrong buffer
    throw InvalidArgument("ncclz.codec: output buffer has " + std::to_string(out_bytes) + " bytes, the array needs " +
                          std::to_string(need));
  }
  if (need > 0 && out == nullptr) invalid("null output pointer");
  validate_outliers(blob, p);
  decode_into(blob, p, static_cast<uint8_t*>(out));
}

ArrayDesc describe_array(const uint8_t* blob, size_t len) {
  if (blob == nullptr && len != 0) corrupt("null buffer");
  if (len < 5) corrupt("truncated header (" + std::to_string(len) + " bytes)");
  if (load_u32(blob) != kBlobMagic) corrupt("bad magic (not an ncclz.codec blob)");
  if (blob[4] != 1 && blob[4] != 2) corrupt("unsupported version " + std::to_string(blob[4]));
  size_t off = blob[4] == 1 ? kFixedHeaderV1 : kFixedHeader;
  if (len < off) corrupt("truncated header (" + std::to_string(len) + " bytes)");
  if (!is_array_type(blob[6]) || (blob[4] == 1 && !is_valid_elem_type(blob[6]))) corrupt("bad element type");
  if (blob[8] > kMaxDims) corrupt("too many dimensions");
  ArrayDesc a;
  a.array_type = ArrayType(blob[6]);
  a.dtype = carrier_of(a.array_type);
  a.bytes = read_shape(blob, len, blob[8], &off, &a.shape) * elem_size(a.dtype);
  return a;
}

BlobInfo inspect(const uint8_t* blob, size_t len) {
  const Parsed p = parse(blob, len, true, true);
  for_each_outlier(blob, p, [](uint64_t, uint64_t) {});
  BlobInfo info;
  info.version = p.version;
  info.mode = p.mode;
  info.dtype = p.dtype;
  info.array_type = p.array_type;
  info.code_type = p.code_type;
  info.shape = p.shape;
  info.bound_kind = p.bound_kind;
  info.bound = p.bound;
  info.error_bound = p.error_bound;
  info.grid_half_step = p.eb;
  info.elements = p.n;
  info.slice_elems = p.slice_elems;
  info.slices = p.slices;
  info.raw_bytes = p.n * elem_size(p.dtype);
  info.compressed_bytes = len;
  info.ratio = len ? double(info.raw_bytes) / double(len) : 0.0;
  info.outliers = p.outliers;
  info.outlier_bytes = p.body_len - p.outlier_offset;
  info.interp = p.layout == 1;
  info.grid_factor = uint32_t(1) << p.log2k;
  for (size_t off : p.slice_offsets) {
    SliceHeader h;
    read_header(blob + off, p.body_len - off, &h);  // validated by parse()
    auto& c = info.by[int(h.codec)][int(h.predictor)];
    ++c.slices;
    c.bytes += kHeaderBytes + h.payload_bytes;
  }
  return info;
}

}  // namespace ncclz::codec
