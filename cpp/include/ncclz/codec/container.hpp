// Compressed container ("blob"): a whole array, compressed, self-describing.
//
// This is what ncclz.codec.compress() returns: one buffer holding the mode,
// dtype, shape and error bound, the array's slices coded one by one by the
// slice codec (encode_slice: the selector picks a codec and predictor per
// slice), in lossy mode the elements the quantizer could not carry
// (non-finite values, codes over the limit) stored raw, and a CRC-32C of all
// of it. The byte layout is written down in docs/FORMAT.md, "Container
// (blob)". compress() writes version 2; decompress() and inspect() read
// versions 1 (no checksum, no stored E) and 2.
//
// Guarantees:
//   - Lossy(abs=E): every finite element of decompress(compress(x)) is within
//     E of x (checked after rounding to the element type); non-finite
//     elements come back bit-exact.
//   - Lossy(rel=r): the same with E = r * (max - min) over the finite
//     elements. When max == min (all finite values equal c) E would be 0:
//     the container then uses eb = |c| / 2 (eb = 1 if c == 0), which maps c
//     exactly onto code +-1 (or 0), so c comes back exact. With no finite
//     values at all eb = 1 (every element is carried raw).
//   - Lossless: bit-exact (NaN payloads and -0.0 included).
//   - decompress() and inspect() first check the blob's CRC-32C (version 2),
//     so any change of up to 3 bits (and any burst of up to 32) raises
//     ncclz::CorruptData instead of decoding to other values; then every
//     length, count and index they read: a truncated or crafted blob raises
//     CorruptData, never an out-of-bounds access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// Allocator that leaves new bytes uninitialised (resize() does not zero-fill),
/// so building a blob or a decoded array costs no extra pass over memory.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Bytes of a blob or of a decoded array.
using ByteBuffer = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

struct EncodeOptions;  // codec/slice.hpp

/// What to promise about the reconstruction.
struct Spec {
  enum Mode : uint8_t { Lossless = 0, Lossy = 1 };
  Mode mode = Lossless;
  double abs_bound = 0;  ///< Lossy: absolute bound E (> 0), or 0 when rel_bound is used
  double rel_bound = 0;  ///< Lossy: relative bound r (> 0): E = r * (max - min), or 0

  static Spec lossless() { return Spec{}; }
  static Spec lossy_abs(double e) { return Spec{Lossy, e, 0}; }
  static Spec lossy_rel(double r) { return Spec{Lossy, 0, r}; }
};

/// Number of elements per slice the container aims for. The actual slice
/// length is a multiple of the row (2-D) or plane (3-D and more) length when
/// those are at most kMaxAlignedSlice, so that Lorenzo predictors line up.
constexpr uint32_t kTargetSliceElems = uint32_t(1) << 18;
constexpr uint32_t kMaxAlignedSlice = uint32_t(1) << 24;
constexpr int kMaxDims = 32;

/// The element type of the array a blob holds: one of ElemType's seven
/// (the same values), or one of NCCL's other types, which a blob holds
/// losslessly as the bit patterns of a carrier ElemType of the same size
/// (carrier_of; docs/FORMAT.md, "Container (blob)").
enum class ArrayType : uint8_t {
  I32 = uint8_t(ElemType::I32),
  I64 = uint8_t(ElemType::I64),
  F32 = uint8_t(ElemType::F32),
  F64 = uint8_t(ElemType::F64),
  F16 = uint8_t(ElemType::F16),
  BF16 = uint8_t(ElemType::BF16),
  U8 = uint8_t(ElemType::U8),
  I8 = 8,       ///< as U8
  U32 = 9,      ///< as I32
  U64 = 10,     ///< as I64
  F8E4M3 = 11,  ///< float8_e4m3fn, as U8
  F8E5M2 = 12,  ///< float8_e5m2, as U8
};
constexpr bool is_array_type(uint8_t t) { return t >= 1 && t <= 12; }
/// The ElemType an array type's elements are coded as (the type itself
/// where it is an ElemType).
ElemType carrier_of(ArrayType t);
/// "int8", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", or
/// elem_type_name's.
const char* array_type_name(ArrayType t);

/// A decompressed array.
struct Decoded {
  ElemType type = ElemType::F32;  ///< the elements' carrier type (array_type's, or array_type itself)
  ArrayType array_type = ArrayType::F32;
  std::vector<int64_t> shape;
  ByteBuffer bytes;  ///< C-contiguous elements
};

/// What inspect() reports about a blob (read from headers only; payloads are
/// not decoded).
struct BlobInfo {
  uint8_t version = 2;  ///< format version (1: no checksum, no stored error bound)
  Spec::Mode mode = Spec::Lossless;
  ElemType dtype = ElemType::F32;         ///< the original array's type, or its carrier (array_type)
  ArrayType array_type = ArrayType::F32;  ///< type of the original array
  ElemType code_type = ElemType::F32;     ///< type the slices carry (dtype, or I32/I64 codes)
  std::vector<int64_t> shape;
  uint8_t bound_kind = 0;  ///< 0 none (lossless), 1 abs, 2 rel
  double bound = 0;        ///< the bound as requested: E for abs, r for rel (0 lossless)
  /// E, what every finite element is guaranteed within: the abs bound, or
  /// r * (max - min) resolved for rel (0 lossless). Version-1 rel blobs did
  /// not store it: nullopt.
  std::optional<double> error_bound;
  /// Half the quantization grid's step (0 lossless): E less at most E/8, so
  /// that rounding a grid point to the dtype never crosses E (docs/FORMAT.md).
  double grid_half_step = 0;
  uint64_t elements = 0;
  uint32_t slice_elems = 0;
  uint64_t slices = 0;
  uint64_t raw_bytes = 0;         ///< elements * element size of dtype
  uint64_t compressed_bytes = 0;  ///< the blob's size
  double ratio = 0;               ///< raw / compressed
  uint64_t outliers = 0;
  uint64_t outlier_bytes = 0;  ///< size of the outlier section
  bool interp = false;         ///< interp layout (slices carry interpolation residuals in visit order)
  uint32_t grid_factor = 1;    ///< interp: codes on a grid of step 2 eb / grid_factor
  struct Count {
    uint64_t slices = 0;
    uint64_t bytes = 0;  ///< headers + payloads
  };
  Count by[kNumCodecs][kNumPredictors];  ///< per codec, per predictor
};

/// Compresses a C-contiguous array of `shape` (any number of dimensions up
/// to kMaxDims, 0-d included) at x. Lossy needs a float type (F32, F64, F16,
/// BF16); Lossless takes every ElemType. `opt` may force a codec or predictor
/// (its row/plane are filled in from the shape). Throws InvalidArgument for a
/// bad spec, shape, type or a forced codec that cannot carry the data.
ByteBuffer compress(const void* x, ElemType t, const std::vector<int64_t>& shape, const Spec& spec,
                    const EncodeOptions& opt);
/// The same with the selector choosing everything.
ByteBuffer compress(const void* x, ElemType t, const std::vector<int64_t>& shape, const Spec& spec);
/// An array of any ArrayType: the types beyond ElemType's take Lossless
/// only (their bit patterns, as their carrier's); the others as above.
ByteBuffer compress(const void* x, ArrayType t, const std::vector<int64_t>& shape, const Spec& spec,
                    const EncodeOptions& opt);

/// The array a blob holds, from its fixed header only (magic, version, dtype
/// and shape are checked; the checksum and everything else are checked by
/// decompress and decompress_into): what to allocate before decompress_into().
struct ArrayDesc {
  ElemType dtype = ElemType::F32;  ///< the elements' carrier type
  ArrayType array_type = ArrayType::F32;
  std::vector<int64_t> shape;
  size_t bytes = 0;  ///< elements * element size
};
ArrayDesc describe_array(const uint8_t* blob, size_t len);

/// Decompresses a blob. Throws CorruptData for anything malformed, damaged
/// (checksum) or truncated; the checksum is checked while the slices are
/// decoded, each right before its decode (its bytes then in cache anyway).
Decoded decompress(const uint8_t* blob, size_t len);

/// Decompresses into memory from alloc(bytes), called once, after the blob's
/// headers were checked (the checksum is checked while decoding); `alloc`
/// may throw, and the memory is the caller's also when decoding then throws.
/// Returns the array's dtype, shape and size.
ArrayDesc decompress_with(const uint8_t* blob, size_t len, const std::function<void*(size_t)>& alloc);

/// Decompresses into caller memory of exactly `out_bytes` bytes (throws
/// InvalidArgument if that is not the array's size; see inspect()).
void decompress_into(const uint8_t* blob, size_t len, void* out, size_t out_bytes);

/// Reads a blob's headers (the checksum, every slice header and the outlier
/// section are validated; payloads are not decoded). Throws CorruptData for
/// anything malformed.
BlobInfo inspect(const uint8_t* blob, size_t len);

/// Lower-case names used by the Python API and in messages.
const char* elem_type_name(ElemType t);   ///< "float32", "bfloat16", "int32", ...
const char* codec_name(Codec c);          ///< "raw", "block", "rans", "floatexp", "sparse"
const char* predictor_name(Predictor p);  ///< "none", "delta1", "delta2", "lorenzo2d", "lorenzo3d"

}  // namespace ncclz::codec
