// Slice format shared by every codec, on the host and on the device.
//
// A slice is the unit the codec encodes: a run of `count` elements of one
// element type, coded by one codec after one predictor. On the wire it is a
// 24-byte header followed by `payload_bytes` bytes of payload; the whole
// layout (every codec's payload too) is written down in docs/FORMAT.md.
//
//   offset size field
//   0      4    magic 'N' 'C' 'Z' '1' (the '1' is the format version)
//   4      1    codec           (Codec)
//   5      1    elem_type       (ElemType of the decoded values)
//   6      1    predictor       (Predictor applied before the codec)
//   7      1    flags           (must be 0 in version 1)
//   8      4    count           (elements in the slice)
//   12     4    payload_bytes   (bytes after the header)
//   16     4    pred_arg0       (Lorenzo2D/3D: row length; else 0)
//   20     4    pred_arg1       (Lorenzo3D: plane size in elements; else 0)
//
// All integers are little-endian. Decoders never trust a header: read_header
// checks every field, and each codec checks every length it reads.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define NCCLZ_HD __host__ __device__ __forceinline__
#else
#define NCCLZ_HD inline
#endif

namespace ncclz::codec {

/// Element type of a slice's decoded values (and of user buffers).
enum class ElemType : uint8_t {
  I32 = 1,
  I64 = 2,
  F32 = 3,
  F64 = 4,
  F16 = 5,
  BF16 = 6,
  U8 = 7,
};

NCCLZ_HD constexpr size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::I32: return 4;
    case ElemType::I64: return 8;
    case ElemType::F32: return 4;
    case ElemType::F64: return 8;
    case ElemType::F16: return 2;
    case ElemType::BF16: return 2;
    case ElemType::U8: return 1;
  }
  return 0;
}

NCCLZ_HD constexpr bool is_valid_elem_type(uint8_t t) { return t >= 1 && t <= 7; }
NCCLZ_HD constexpr bool is_code_type(ElemType t) { return t == ElemType::I32 || t == ElemType::I64; }

/// Codec applied to a slice's (predicted) values.
enum class Codec : uint8_t {
  Raw = 0,       ///< the values' bytes, any type
  Block = 1,     ///< fixed-length blocks of 32 integer codes, zero blocks ~1 byte (I32, I64)
  Rans = 2,      ///< rANS entropy coder over integer residuals (I32, I64)
  FloatExp = 3,  ///< lossless float: exponents rANS-coded, sign+mantissa raw (F32, F16, BF16)
  Sparse = 4,  ///< mostly-zero integer residuals (I32, I64) or float bit patterns (F32, F64, F16, BF16; no predictor):
               ///< nonzero count, gaps and values
  FloatHuff = 5,  ///< lossless float: exponents in parallel Huffman sub-streams, sign+mantissa raw (F32, F16, BF16; U8:
                  ///< the bytes)
};
constexpr int kNumCodecs = 6;

/// Predictor applied to integer codes before Block, Rans or Sparse (wrapping arithmetic).
enum class Predictor : uint8_t {
  None = 0,
  Delta1 = 1,     ///< r[i] = q[i] - q[i-1]
  Delta2 = 2,     ///< r[i] = q[i] - 2 q[i-1] + q[i-2]
  Lorenzo2D = 3,  ///< 2D Lorenzo with row length pred_arg0 (rows of the contiguous axis)
  Lorenzo3D = 4,  ///< 3D Lorenzo with row length pred_arg0 and plane size pred_arg1
};
constexpr int kNumPredictors = 5;

/// Whether predictor p can run on a slice of n values with rows of `row` values
/// and planes of `plane` values: the Lorenzo predictors need more than one row
/// (2D) or plane (3D), and planes of whole rows; the others always can. The
/// host selector and the device encoder use this one rule.
NCCLZ_HD constexpr bool predictor_fits(Predictor p, uint64_t row, uint64_t plane, uint64_t n) {
  switch (p) {
    case Predictor::Lorenzo2D: return row > 1 && n > row;
    case Predictor::Lorenzo3D: return row > 1 && plane > row && plane % row == 0 && n > plane;
    default: return true;
  }
}

enum class Status : int {
  Ok = 0,
  Truncated,      ///< buffer shorter than the header or payload says
  BadMagic,       ///< not a slice, or another format version
  BadHeader,      ///< unknown codec/type/predictor, nonzero flags, bad predictor args
  TypeMismatch,   ///< slice type differs from what the caller expects
  CountMismatch,  ///< slice count differs from the caller's buffer
  Corrupt,        ///< payload inconsistent with itself
  NoSpace,        ///< encoder output would not fit the given capacity
  Unsupported,    ///< codec not defined for this element type
};

NCCLZ_HD constexpr const char* status_string(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::Truncated: return "truncated slice";
    case Status::BadMagic: return "bad magic (not an ncclz slice, or another format version)";
    case Status::BadHeader: return "bad slice header";
    case Status::TypeMismatch: return "slice element type differs from the expected type";
    case Status::CountMismatch: return "slice element count differs from the expected count";
    case Status::Corrupt: return "corrupt slice payload";
    case Status::NoSpace: return "output buffer too small";
    case Status::Unsupported: return "codec not supported for this element type";
  }
  return "unknown status";
}

constexpr uint32_t kSliceMagic = 0x315A434Eu;  // bytes 'N','C','Z','1'
constexpr size_t kHeaderBytes = 24;

struct SliceHeader {
  Codec codec = Codec::Raw;
  ElemType elem_type = ElemType::F32;
  Predictor predictor = Predictor::None;
  uint8_t flags = 0;
  uint32_t count = 0;
  uint32_t payload_bytes = 0;
  uint32_t pred_arg0 = 0;
  uint32_t pred_arg1 = 0;
};

NCCLZ_HD void store_u32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}
NCCLZ_HD uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
NCCLZ_HD void store_u64(uint8_t* p, uint64_t v) {
  store_u32(p, uint32_t(v));
  store_u32(p + 4, uint32_t(v >> 32));
}
NCCLZ_HD uint64_t load_u64(const uint8_t* p) { return uint64_t(load_u32(p)) | (uint64_t(load_u32(p + 4)) << 32); }

NCCLZ_HD void write_header(uint8_t* dst, const SliceHeader& h) {
  store_u32(dst, kSliceMagic);
  dst[4] = uint8_t(h.codec);
  dst[5] = uint8_t(h.elem_type);
  dst[6] = uint8_t(h.predictor);
  dst[7] = h.flags;
  store_u32(dst + 8, h.count);
  store_u32(dst + 12, h.payload_bytes);
  store_u32(dst + 16, h.pred_arg0);
  store_u32(dst + 20, h.pred_arg1);
}

/// Whether `codec` may carry values of type `t` with predictor `p`.
NCCLZ_HD constexpr bool codec_accepts(Codec c, ElemType t, Predictor p) {
  switch (c) {
    case Codec::Raw: return p == Predictor::None;
    case Codec::Block: return is_code_type(t);
    case Codec::Rans:
      // U8: the bytes themselves as symbols (no predictor).
      return is_code_type(t) || (t == ElemType::U8 && p == Predictor::None);
    case Codec::Sparse:
      // Float types: their bit patterns, lossless (no predictor).
      return is_code_type(t) || (p == Predictor::None && (t == ElemType::F32 || t == ElemType::F64 ||
                                                          t == ElemType::F16 || t == ElemType::BF16));
    case Codec::FloatExp:
      return p == Predictor::None && (t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16);
    case Codec::FloatHuff:
      // U8: the bytes themselves as symbols (the device's byte coder).
      return p == Predictor::None &&
             (t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::U8);
  }
  return false;
}

/// Checks the predictor arguments against the slice's count: Lorenzo2D needs a
/// row length >= 1; Lorenzo3D a row length >= 1 and a plane size that is a
/// multiple of it. Others need both arguments zero.
NCCLZ_HD constexpr bool predictor_args_valid(Predictor p, uint32_t a0, uint32_t a1) {
  switch (p) {
    case Predictor::None:
    case Predictor::Delta1:
    case Predictor::Delta2: return a0 == 0 && a1 == 0;
    case Predictor::Lorenzo2D: return a0 >= 1 && a1 == 0;
    case Predictor::Lorenzo3D: return a0 >= 1 && a1 >= a0 && a1 % a0 == 0;
  }
  return false;
}

/// Parses and validates a header from `len` bytes at `src`. On Ok, the whole
/// slice (header + payload) lies within `len` bytes.
NCCLZ_HD Status read_header(const uint8_t* src, size_t len, SliceHeader* out) {
  if (len < kHeaderBytes) return Status::Truncated;
  if (load_u32(src) != kSliceMagic) return Status::BadMagic;
  const uint8_t c = src[4], t = src[5], p = src[6], f = src[7];
  if (c >= kNumCodecs || !is_valid_elem_type(t) || p >= kNumPredictors || f != 0) return Status::BadHeader;
  SliceHeader h;
  h.codec = Codec(c);
  h.elem_type = ElemType(t);
  h.predictor = Predictor(p);
  h.flags = f;
  h.count = load_u32(src + 8);
  h.payload_bytes = load_u32(src + 12);
  h.pred_arg0 = load_u32(src + 16);
  h.pred_arg1 = load_u32(src + 20);
  if (!codec_accepts(h.codec, h.elem_type, h.predictor)) return Status::BadHeader;
  if (!predictor_args_valid(h.predictor, h.pred_arg0, h.pred_arg1)) return Status::BadHeader;
  if (uint64_t(h.payload_bytes) > uint64_t(len - kHeaderBytes)) return Status::Truncated;
  *out = h;
  return Status::Ok;
}

/// Worst-case encoded size (header + RAW payload) of `count` elements of type t:
/// the encoder falls back to RAW whenever a codec would exceed it.
NCCLZ_HD constexpr size_t max_slice_bytes(ElemType t, size_t count) { return kHeaderBytes + count * elem_size(t); }

}  // namespace ncclz::codec
