// Bindings of the compressed container (ncclz::codec::compress/decompress/
// inspect). Thin: the Python wrappers in python/ncclz/codec.py give them their
// public names and signatures. Arrays come in as DLPack/buffer-protocol
// arrays without implicit conversion (.noconvert()): dtype, device and
// strides are checked here, and the error says what to do. The C++ work runs
// without the GIL. Blobs are returned as NumPy uint8 arrays that own the C++
// vectors (no copy); decoded arrays as NumPy uint8 arrays over memory from
// OutputPool (below).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "codec/slice.hpp"
#include "ncclz/codec/container.hpp"
#include "ncclz/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace cz = ncclz::codec;

namespace {

using Bytes = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;

const char* kSupported =
    "float32, float64, float16, bfloat16, int32, int64, uint8, and lossless int8, uint32, uint64, float8_e4m3fn, "
    "float8_e5m2";

std::string dtype_name(const nb::dlpack::dtype& dt) {
  std::string base;
  switch (nb::dlpack::dtype_code(dt.code)) {
    case nb::dlpack::dtype_code::Int: base = "int"; break;
    case nb::dlpack::dtype_code::UInt: base = "uint"; break;
    case nb::dlpack::dtype_code::Float: base = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: base = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: base = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: base = "dtype-code-" + std::to_string(int(dt.code)) + "-"; break;
  }
  std::string s = base + std::to_string(int(dt.bits));
  if (dt.lanes != 1) s += "x" + std::to_string(int(dt.lanes));
  return s;
}

cz::ElemType elem_type_of(const nb::dlpack::dtype& dt) {
  using C = nb::dlpack::dtype_code;
  const C code = C(dt.code);
  if (dt.lanes == 1) {
    if (code == C::Float && dt.bits == 32) {
      return cz::ElemType::F32;
    } else if (code == C::Float && dt.bits == 64) {
      return cz::ElemType::F64;
    } else if (code == C::Float && dt.bits == 16) {
      return cz::ElemType::F16;
    } else if (code == C::Bfloat && dt.bits == 16) {
      return cz::ElemType::BF16;
    } else if (code == C::Int && dt.bits == 32) {
      return cz::ElemType::I32;
    } else if (code == C::Int && dt.bits == 64) {
      return cz::ElemType::I64;
    } else if (code == C::UInt && dt.bits == 8) {
      return cz::ElemType::U8;
    }
  }
  throw ncclz::InvalidArgument("ncclz.codec: unsupported dtype " + dtype_name(dt) + "; supported: " + kSupported);
}

/// The array type of `dt`, or `as_type` (an ArrayType value, 0: none) of
/// an unsigned integer view of the same element size (the Python layer's
/// view of bfloat16 and float8 arrays, whose dtypes DLPack may not carry).
cz::ArrayType array_type_of(const nb::dlpack::dtype& dt, int as_type) {
  using C = nb::dlpack::dtype_code;
  using A = cz::ArrayType;
  const C code = C(dt.code);
  if (dt.lanes == 1) {
    if (as_type != 0) {
      if (cz::is_array_type(uint8_t(as_type)) && code == C::UInt &&
          size_t(dt.bits) == 8 * cz::elem_size(cz::carrier_of(A(as_type)))) {
        return A(as_type);
      }
    } else if (code == C::Int && dt.bits == 8) {
      return A::I8;
    } else if (code == C::UInt && dt.bits == 32) {
      return A::U32;
    } else if (code == C::UInt && dt.bits == 64) {
      return A::U64;
    } else {
      return cz::ArrayType(elem_type_of(dt));
    }
  }
  throw ncclz::InvalidArgument("ncclz.codec: unsupported dtype " + dtype_name(dt) + "; supported: " + kSupported);
}

/// Shape of a CPU, C-contiguous array (strides count elements).
std::vector<int64_t> checked_shape(const nb::ndarray<nb::ro>& x) {
  if (x.device_type() != nb::device::cpu::value)
    throw ncclz::InvalidArgument(
        "ncclz.codec: GPU arrays are not yet supported by the codec API; copy the array to the host first "
        "(e.g. x.cpu() or cupy.asnumpy(x))");
  const size_t nd = x.ndim();
  std::vector<int64_t> shape(nd);
  bool empty = false;
  for (size_t i = 0; i < nd; ++i) {
    shape[i] = int64_t(x.shape(i));
    empty |= shape[i] == 0;
  }
  if (!empty && x.stride_ptr() != nullptr) {
    int64_t expect = 1;
    for (size_t i = nd; i-- > 0;) {
      if (shape[i] != 1 && x.stride(i) != expect)
        throw ncclz::InvalidArgument(
            "ncclz.codec: the array is not C-contiguous; make it contiguous, e.g. np.ascontiguousarray(x) / "
            "x.contiguous()");
      expect *= shape[i];
    }
  }
  return shape;
}

cz::EncodeOptions::Choice choice_of(int codec) {
  using Ch = cz::EncodeOptions::Choice;
  switch (codec) {
    case 0: return Ch::Auto;
    case 1: return Ch::Raw;
    case 2: return Ch::Block;
    case 3: return Ch::Rans;
    case 4: return Ch::FloatExp;
    case 5: return Ch::Sparse;
    case 6: return Ch::FloatHuff;
  }
  throw ncclz::InvalidArgument("ncclz.codec: unknown codec id " + std::to_string(codec));
}

/// A NumPy uint8 array that takes over `v` (no copy).
Bytes to_numpy(cz::ByteBuffer&& v) {
  if (v.capacity() == 0) v.reserve(1);  // a non-null data pointer, also when empty
  auto* owned = new cz::ByteBuffer(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<cz::ByteBuffer*>(p); });
  return Bytes(owned->data(), {owned->size()}, owner);
}

// Memory for decompress(blob) without out=: why it is pooled.
//
// A fresh output costs a first-touch page fault per page, and the kernel
// zeroes each page before the decoder overwrites it: for 32 MiB of Gaussian
// float32 (rel 1e-3) that made decompress(blob) 2.6-2.8 GB/s against 5.3 into
// a reused out= (the faults land between the decoder's passes, each zeroing
// 2 MiB of cache). Arrays of 32 MiB and more are mapped afresh by malloc on
// every call (glibc never keeps them), so a loop of decompress(blob) pays the
// faults every time. The pool keeps the memory of the last kKeep decoded
// arrays of at least kMinBytes after Python frees them (at most kMaxBytes in
// all) and hands it to the next decode of a similar size: a new array object
// each call, never memory a live array uses, and in a loop as fast as out=.
// Kept blocks are marked MADV_FREE, so the kernel may take their pages back
// under memory pressure (then the next use faults again, as without the pool).
// Blocks are 2 MiB-aligned mappings marked MADV_HUGEPAGE (like NumPy's large
// arrays), so they fault and map in huge pages.
class OutputPool {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;
  static constexpr size_t kKeep = 2;
  static constexpr size_t kMaxBytes = size_t(1) << 30;
  static constexpr size_t kAlign = size_t(2) << 20;

  struct Block {
    void* p = nullptr;
    size_t bytes = 0;  // mapped (pooled) or allocated (small) size
  };

  /// Leaked on purpose: arrays may be freed after static destructors ran.
  static OutputPool& get() {
    static OutputPool* pool = new OutputPool();
    return *pool;
  }

  /// Memory for n > 0 bytes.
  Block take(size_t n) {
    if (n < kMinBytes) {
      void* p = std::malloc(n);
      if (!p) throw std::bad_alloc();
      return {p, n};
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      // The smallest kept block that fits without wasting more than a quarter.
      size_t best = kept_.size();
      for (size_t i = 0; i < kept_.size(); ++i) {
        const size_t b = kept_[i].bytes;
        if (b >= n && b <= n + n / 4 + kAlign && (best == kept_.size() || b < kept_[best].bytes)) best = i;
      }
      if (best < kept_.size()) {
        Block blk = kept_[best];
        kept_.erase(kept_.begin() + ptrdiff_t(best));
        kept_bytes_ -= blk.bytes;
        return blk;
      }
    }
    return map(n);
  }

  /// Returns the memory of a freed array.
  void give(Block b) {
    if (b.bytes < kMinBytes) {
      std::free(b.p);
      return;
    }
    if (b.bytes > kMaxBytes) {
      munmap(b.p, b.bytes);
      return;
    }
    madvise(b.p, b.bytes, MADV_FREE);  // may fail on old kernels: then the pages simply stay
    std::vector<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu_);
      kept_.push_back(b);
      kept_bytes_ += b.bytes;
      while (kept_.size() > kKeep || kept_bytes_ > kMaxBytes) {  // the oldest go
        kept_bytes_ -= kept_.front().bytes;
        drop.push_back(kept_.front());
        kept_.erase(kept_.begin());
      }
    }
    for (const Block& d : drop) munmap(d.p, d.bytes);
  }

 private:
  static Block map(size_t n) {
    const size_t bytes = (n + kAlign - 1) / kAlign * kAlign;
    void* raw = mmap(nullptr, bytes + kAlign, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    // Keep the 2 MiB-aligned part, give back the rest.
    const uintptr_t a = reinterpret_cast<uintptr_t>(raw), start = (a + kAlign - 1) / kAlign * kAlign;
    if (start > a) munmap(raw, start - a);
    if (start + bytes < a + bytes + kAlign) munmap(reinterpret_cast<void*>(start + bytes), a + kAlign - start);
    void* p = reinterpret_cast<void*>(start);
    madvise(p, bytes, MADV_HUGEPAGE);
    return {p, bytes};
  }

  std::mutex mu_;
  std::vector<Block> kept_;  // oldest first
  size_t kept_bytes_ = 0;
};

/// A NumPy uint8 array of n bytes over pooled memory, freed back to the pool.
Bytes pooled_array(OutputPool::Block b, size_t n) {
  auto* owned = new OutputPool::Block(b);
  nb::capsule owner(owned, [](void* p) noexcept {
    auto* blk = static_cast<OutputPool::Block*>(p);
    OutputPool::get().give(*blk);
    delete blk;
  });
  return Bytes(b.p, {n}, owner);
}

const uint8_t* blob_data(const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
  return static_cast<const uint8_t*>(blob.data());
}

nb::dict info_to_dict(const cz::BlobInfo& info) {
  nb::dict d;
  d["version"] = int(info.version);
  d["checksum"] = info.version >= 2 ? nb::object(nb::str("crc32c")) : nb::none();
  d["mode"] = info.mode == cz::Spec::Lossy ? "lossy" : "lossless";
  d["dtype"] = cz::array_type_name(info.array_type);
  d["code_dtype"] = cz::elem_type_name(info.code_type);
  nb::list shape;
  for (int64_t s : info.shape) shape.append(s);
  d["shape"] = nb::tuple(shape);
  d["bound_kind"] = info.bound_kind == 1   ? nb::object(nb::str("abs"))
                    : info.bound_kind == 2 ? nb::object(nb::str("rel"))
                                           : nb::none();
  d["bound"] = info.bound;
  d["error_bound"] = info.error_bound ? nb::object(nb::float_(*info.error_bound)) : nb::none();
  d["grid_half_step"] = info.grid_half_step;
  d["elements"] = info.elements;
  d["slice_elements"] = info.slice_elems;
  d["slices"] = info.slices;
  d["raw_bytes"] = info.raw_bytes;
  d["compressed_bytes"] = info.compressed_bytes;
  d["ratio"] = info.ratio;
  d["outliers"] = info.outliers;
  d["outlier_bytes"] = info.outlier_bytes;
  d["layout"] = info.interp ? "interp" : "classic";
  d["grid_factor"] = info.grid_factor;
  nb::dict codecs;
  for (int c = 0; c < cz::kNumCodecs; ++c) {
    for (int p = 0; p < cz::kNumPredictors; ++p) {
      const auto& n = info.by[c][p];
      if (n.slices == 0) continue;
      nb::dict e;
      e["slices"] = n.slices;
      e["bytes"] = n.bytes;
      const std::string key = std::string(cz::codec_name(cz::Codec(c))) +
                              (p ? std::string("+") + cz::predictor_name(cz::Predictor(p)) : std::string());
      codecs[key.c_str()] = e;
    }
  }
  d["codecs"] = codecs;
  return d;
}

}  // namespace

void register_codec(nb::module_& m) {
  m.def(
      "codec_compress",
      [](const nb::ndarray<nb::ro>& x, bool lossy, double abs_bound, double rel_bound, int codec, int predictor,
         int as_type, int interp, double rans_margin) {
        const cz::ArrayType t = array_type_of(x.dtype(), as_type);
        const std::vector<int64_t> shape = checked_shape(x);
        cz::Spec spec = lossy ? cz::Spec{cz::Spec::Lossy, abs_bound, rel_bound} : cz::Spec::lossless();
        cz::EncodeOptions opt;
        opt.choice = choice_of(codec);
        opt.predictor = predictor;
        opt.interp = interp;
        if (rans_margin >= 0) opt.rans_margin = rans_margin;
        cz::ByteBuffer blob;
        {
          nb::gil_scoped_release release;
          blob = cz::compress(x.data(), t, shape, spec, opt);
        }
        return to_numpy(std::move(blob));
      },
      "x"_a.noconvert(), "lossy"_a, "abs_bound"_a, "rel_bound"_a, "codec"_a, "predictor"_a, "as_type"_a,
      "interp"_a = -1, "rans_margin"_a = -1.0,
      "Compresses a CPU, C-contiguous array into a blob (NumPy uint8). Use ncclz.codec.compress.");

  m.def(
      "codec_decompress",
      [](const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
        cz::ArrayDesc a;
        OutputPool::Block b;
        {
          nb::gil_scoped_release release;
          try {
            a = cz::decompress_with(blob_data(blob), blob.size(), [&](size_t n) {
              b = OutputPool::get().take(n ? n : 1);
              return b.p;
            });
          } catch (...) {
            if (b.p) OutputPool::get().give(b);
            throw;
          }
        }
        nb::list shape;
        for (int64_t s : a.shape) shape.append(s);
        return nb::make_tuple(pooled_array(b, a.bytes), cz::array_type_name(a.array_type), nb::tuple(shape));
      },
      "blob"_a.noconvert(),
      "Decompresses a blob into a new array: (uint8 bytes, dtype name, shape). Use ncclz.codec.decompress.");

  m.def(
      "codec_array",
      [](const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
        const cz::ArrayDesc a = cz::describe_array(blob_data(blob), blob.size());
        nb::list shape;
        for (int64_t s : a.shape) shape.append(s);
        return nb::make_tuple(cz::array_type_name(a.array_type), nb::tuple(shape));
      },
      "blob"_a.noconvert(),
      "(dtype name, shape) of a blob's array, from its fixed header. Use ncclz.codec.decompress(out=).");

  m.def(
      "codec_decompress_into",
      [](const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob,
         const nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& out) {
        nb::gil_scoped_release release;
        cz::decompress_into(blob_data(blob), blob.size(), out.data(), out.size());
      },
      "blob"_a.noconvert(), "out"_a.noconvert(),
      "Decompresses a blob into a preallocated byte view of the output. Use ncclz.codec.decompress(out=).");

  m.def(
      "codec_inspect",
      [](const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
        cz::BlobInfo info;
        {
          nb::gil_scoped_release release;
          info = cz::inspect(blob_data(blob), blob.size());
        }
        return info_to_dict(info);
      },
      "blob"_a.noconvert(), "Describes a blob (headers only). Use ncclz.codec.inspect.");
}
