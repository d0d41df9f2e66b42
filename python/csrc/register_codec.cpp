// Bindings of the compressed container (ncclz::codec::compress/decompress/
// inspect). Thin: the Python wrappers in python/ncclz/codec.py give them their
// public names and signatures. Arrays come in as DLPack/buffer-protocol
// arrays without implicit conversion (.noconvert()): dtype, device and
// strides are checked here, and the error says what to do. The C++ work runs
// without the GIL. Blobs and decoded bytes are returned as NumPy uint8 arrays
// that own the C++ vectors (no copy).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
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

const char* kSupported = "float32, float64, float16, bfloat16, int32, int64, uint8";

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

cz::ElemType elem_type_of(const nb::dlpack::dtype& dt, bool as_bfloat16) {
  using C = nb::dlpack::dtype_code;
  const C code = C(dt.code);
  if (dt.lanes == 1) {
    if (as_bfloat16) {
      if (code == C::UInt && dt.bits == 16) return cz::ElemType::BF16;
    } else if (code == C::Float && dt.bits == 32) {
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

const uint8_t* blob_data(const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
  return static_cast<const uint8_t*>(blob.data());
}

nb::dict info_to_dict(const cz::BlobInfo& info) {
  nb::dict d;
  d["version"] = int(info.version);
  d["checksum"] = info.version >= 2 ? nb::object(nb::str("crc32c")) : nb::none();
  d["mode"] = info.mode == cz::Spec::Lossy ? "lossy" : "lossless";
  d["dtype"] = cz::elem_type_name(info.dtype);
  d["code_dtype"] = cz::elem_type_name(info.code_type);
  nb::list shape;
  for (int64_t s : info.shape) shape.append(s);
  d["shape"] = nb::tuple(shape);
  d["bound_kind"] = info.bound_kind == 1 ? nb::object(nb::str("abs"))
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
         bool as_bfloat16, int interp, double rans_margin) {
        const cz::ElemType t = elem_type_of(x.dtype(), as_bfloat16);
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
      "x"_a.noconvert(), "lossy"_a, "abs_bound"_a, "rel_bound"_a, "codec"_a, "predictor"_a, "as_bfloat16"_a, "interp"_a = -1,
      "rans_margin"_a = -1.0,
      "Compresses a CPU, C-contiguous array into a blob (NumPy uint8). Use ncclz.codec.compress.");

  m.def(
      "codec_decompress",
      [](const nb::ndarray<nb::ro, uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& blob) {
        cz::Decoded d;
        {
          nb::gil_scoped_release release;
          d = cz::decompress(blob_data(blob), blob.size());
        }
        nb::list shape;
        for (int64_t s : d.shape) shape.append(s);
        const char* name = cz::elem_type_name(d.type);
        return nb::make_tuple(to_numpy(std::move(d.bytes)), name, nb::tuple(shape));
      },
      "blob"_a.noconvert(),
      "Decompresses a blob: (uint8 bytes, dtype name, shape). Use ncclz.codec.decompress.");

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
