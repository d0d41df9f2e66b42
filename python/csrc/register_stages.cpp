// ncclz._core.stages: the lossy call's per-slice CPU stages, one at a time on the calling thread,
// for the scale model's calibration (bench/scale_model.py `calibrate`). Each function runs the
// runtime's own routine on a whole buffer, slice by slice where the call works slice by slice:
//
//   scan       core::scan, the statistics pass of every lossy call (with the nonzero index a sum
//              keeps, as LossyCall::describe does)
//   prepare    core::LossyStage::prepare: each slice quantized into the stage's per-thread buffer
//              (the staged path's quantize, read by the encode right after)
//   finish     core::LossyStage::finish: each slice of codes dequantized into the output
//   quantize   core::quantize_buf / dequantize_buf on the whole buffer (the eager path)
//   dequantize
//   encode     prims::SliceCodec::encode with the codes wire's options (core::code_wire), each slice
//              with the predictor hint a partial sum carries (-1: the selector samples them all)
//   reduce     prims::SliceCodec::reduce: a received slice decoded and added to the local codes
//   decode     prims::SliceCodec::decode: a received slice decoded (the all-gather's forward)
//
// Only int32 codes of float32 data (what the calibration times). Not a user API.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "codec/slice_frame.hpp"
#include "core/channels.hpp"
#include "core/config.hpp"
#include "core/lossy_ops.hpp"
#include "ncclz/error.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "prims/slice_codec.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ncclz::DataType;
namespace core = ncclz::core;
namespace prims = ncclz::prims;
namespace cz = ncclz::codec;

using F32In = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F32Out = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I32In = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I32Out = nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I64In = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I8In = nb::ndarray<const int8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using U8In = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// A plan that quantizes float32 into int32 codes at half step eb. Its check
/// allows 1/64 of eb for float32's rounding of the grid points, where the
/// call's plan counts that rounding exactly (lossy_plan.hpp): the same work,
/// for bounds above 64 ulps of the data (the calibration's are far above).
core::LossyPlan plan_of(double eb) {
  core::LossyPlan p;
  p.compress = true;
  p.E = p.eb = eb;
  p.check_eb = eb * (1 + 1.0 / 64);
  p.limit = std::numeric_limits<int32_t>::max() / 2;
  return p;
}

/// The slot one slice of `slice` int32 codes travels in (NCCLZ_SLOT_BYTES plus the slice header).
size_t slot_for(size_t slice) { return core::slot_of(slice * sizeof(int32_t)); }

void need(bool ok, const char* what) {
  if (!ok) throw ncclz::InvalidArgument(std::string("ncclz._core.stages: ") + what);
}

/// The slice codec of a rank's ring on the codes wire (a sum), with its scratch.
struct Codec {
  explicit Codec(size_t slice)
      : scratch(slot_for(slice) + 64),
        wire(core::code_wire(DataType::F32, false, ncclz::RedOp::Sum, ncclz::Compression{})),
        codec(wire.type, wire.mode, wire.enc, prims::reduce_fn(wire.type, wire.op), true, slot_for(slice),
              scratch.data()) {}
  std::vector<uint8_t> scratch;
  core::Wire wire;
  prims::SliceCodec codec;
};

/// A NumPy array that owns `v`'s elements.
template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> numpy_of(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* q) noexcept { delete static_cast<std::vector<T>*>(q); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

}  // namespace

void register_stages(nb::module_& m) {
  nb::module_ s = m.def_submodule("stages", "The lossy call's per-slice CPU stages, for calibration (not a user API)");

  s.def(
      "slice_elems", [](size_t slot_bytes) { return prims::slice_elems_for(core::slot_of(slot_bytes), 4); },
      "slot_bytes"_a, "int32 codes per slice of a NCCLZ_SLOT_BYTES slot (the prims' slice).");

  s.def(
      "scan",
      [](const F32In& x, bool sums) {
        core::NonzeroIndex index;
        core::DataStats st;
        {
          nb::gil_scoped_release release;
          st = core::scan(DataType::F32, x.data(), x.shape(0), nullptr, 1, sums ? &index : nullptr);
        }
        return nb::make_tuple(st.lo, st.hi);
      },
      "x"_a, "sums"_a, "The statistics scan on one thread: (min, max); sums: keeping the nonzero index.");

  s.def(
      "prepare",
      [](const F32In& x, double eb, size_t slice) {
        need(slice > 0, "slice must be > 0");
        const size_t n = x.shape(0);
        // The stage's code buffer is only an address range (prepare reads x and
        // writes its own buffer): x's, whose elements have the codes' size.
        const auto* codes = reinterpret_cast<const uint8_t*>(x.data());
        core::LossyStage stage(DataType::F32, plan_of(eb), x.data(), codes, nullptr, codes, 2 * eb);
        nb::gil_scoped_release release;
        for (size_t b = 0; b < n; b += slice) stage.prepare(codes + b * 4, std::min(slice, n - b));
      },
      "x"_a, "eb"_a, "slice"_a, "LossyStage::prepare of every slice (quantized into the stage's per-thread buffer).");

  s.def(
      "finish",
      [](const I32In& codes, double step, F32Out& out, size_t slice) {
        need(slice > 0 && out.shape(0) == codes.shape(0), "slice must be > 0, out as long as codes");
        const size_t n = codes.shape(0);
        core::LossyStage stage(DataType::F32, plan_of(step / 2), nullptr, codes.data(), out.data(), codes.data(), step);
        nb::gil_scoped_release release;
        for (size_t b = 0; b < n; b += slice) stage.finish(codes.data() + b, codes.data() + b, std::min(slice, n - b));
      },
      "codes"_a, "step"_a, "out"_a.noconvert(), "slice"_a, "LossyStage::finish of every slice (dequantized into out).");

  s.def(
      "quantize",
      [](const F32In& x, double eb, I32Out& out) {
        need(out.shape(0) == x.shape(0), "out must be as long as x");
        size_t bad = 0;
        {
          nb::gil_scoped_release release;
          bad = core::quantize_buf(DataType::F32, plan_of(eb), x.data(), x.shape(0), out.data());
        }
        return bad;
      },
      "x"_a, "eb"_a, "out"_a.noconvert(), "quantize_buf on the whole buffer, one thread (the eager path): outliers.");

  s.def(
      "dequantize",
      [](const I32In& codes, double step, F32Out& out) {
        need(out.shape(0) == codes.shape(0), "out must be as long as codes");
        nb::gil_scoped_release release;
        core::dequantize_buf(DataType::F32, false, codes.data(), codes.shape(0), step, out.data());
      },
      "codes"_a, "step"_a, "out"_a.noconvert(), "dequantize_buf on the whole buffer, one thread (the eager path).");

  s.def(
      "encode",
      [](const I32In& codes, size_t slice, std::optional<I8In> hints) {
        need(slice > 0, "slice must be > 0");
        const size_t n = codes.shape(0), slices = (n + slice - 1) / slice, slot = slot_for(slice);
        need(!hints || size_t(hints->shape(0)) == slices, "one hint per slice");
        Codec c(slice);
        std::vector<uint8_t> blob(slices * slot);
        std::vector<int64_t> sizes(slices);
        std::vector<int8_t> predictors(slices);
        {
          nb::gil_scoped_release release;
          for (size_t i = 0; i < slices; ++i) {
            prims::SliceValues v = prims::SliceValues::of_dense(codes.data() + i * slice);
            v.predictor = hints ? hints->data()[i] : -1;
            size_t bytes = 0;
            const size_t k = std::min(slice, n - i * slice);
            need(c.codec.encode(v, k, blob.data() + i * slot, &bytes) == cz::Status::Ok, "encode failed");
            sizes[i] = int64_t(bytes);
            cz::SliceHeader h;
            predictors[i] =
                cz::read_header(blob.data() + i * slot, bytes, &h) == cz::Status::Ok && h.codec != cz::Codec::Raw
                    ? int8_t(h.predictor)
                    : int8_t(-1);
          }
        }
        return nb::make_tuple(numpy_of(std::move(blob)), numpy_of(std::move(sizes)), numpy_of(std::move(predictors)));
      },
      "codes"_a, "slice"_a, "hints"_a = nb::none(),
      "SliceCodec::encode of every slice: (slots, each slot_bytes(slice) apart; bytes per slice; the "
      "predictor each slice was coded with, -1 for Raw). hints: per slice, the predictor a partial sum "
      "keeps (-1: none; None: none for every slice).");

  auto each_slot = [](const U8In& slots, const I64In& sizes, size_t n, size_t slice, auto&& fn) {
    need(slice > 0 && sizes.shape(0) == (n + slice - 1) / slice, "one size per slice of n");
    const size_t slot = slot_for(slice);
    need(slots.shape(0) >= sizes.shape(0) * slot, "slots shorter than the slices");
    Codec c(slice);
    nb::gil_scoped_release release;
    for (size_t i = 0; i < size_t(sizes.shape(0)); ++i) {
      const size_t len = size_t(sizes.data()[i]);
      need(len <= slot, "a slice larger than its slot");
      fn(c.codec, slots.data() + i * slot, len, i * slice, std::min(slice, n - i * slice));
    }
  };

  s.def(
      "reduce",
      [each_slot](const U8In& slots, const I64In& sizes, const I32In& local, I32Out& out, size_t slice) {
        need(out.shape(0) == local.shape(0), "out must be as long as local");
        each_slot(slots, sizes, local.shape(0), slice,
                  [&](const prims::SliceCodec& c, const uint8_t* in, size_t len, size_t at, size_t k) {
                    prims::SliceValues v;
                    const auto local_v = prims::SliceValues::of_dense(local.data() + at);
                    const prims::SlotDone done{[](void*) {}, nullptr};
                    const cz::Status st =
                        c.reduce(in, len, k, local_v, reinterpret_cast<uint8_t*>(out.data() + at), &v, done);
                    need(st == cz::Status::Ok, "reduce failed");
                    if (v.dense != reinterpret_cast<const uint8_t*>(out.data() + at)) {
                      std::memcpy(out.data() + at, v.dense, k * 4);
                    }
                  });
      },
      "slots"_a, "sizes"_a, "local"_a, "out"_a.noconvert(), "slice"_a,
      "SliceCodec::reduce of every slice with the local codes: their sums in out.");

  s.def(
      "decode",
      [each_slot](const U8In& slots, const I64In& sizes, I32Out& out, size_t slice) {
        each_slot(slots, sizes, out.shape(0), slice,
                  [&](const prims::SliceCodec& c, const uint8_t* in, size_t len, size_t at, size_t k) {
                    prims::SliceValues v;
                    auto* to = reinterpret_cast<uint8_t*>(out.data() + at);
                    need(c.decode(in, len, k, false, to, &v) == cz::Status::Ok, "decode failed");
                    if (v.dense != to) std::memcpy(to, v.dense, k * 4);
                  });
      },
      "slots"_a, "sizes"_a, "out"_a.noconvert(), "slice"_a, "SliceCodec::decode of every slice into out.");
}
