// Slice framing, host and device (docs/FORMAT.md, "Slice header"): how an
// encoder turns its coder's output into a slice, and what a decoder checks of a
// slice before it reads the payload. The header's layout and read_header /
// write_header are ncclz/codec/format.hpp; this adds the rules around them
// that the CPU codec (slice.cpp) and the device codec (cuda/slice_kernels.cu)
// must apply alike for their slices to be byte-identical: the predictor a
// slice records and its arguments, the Raw fallback and its room, and the
// type/count/length checks. NCCLZ_HD: compiled by nvcc for the device too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::codec {

/// The predictor a slice of n values gets when p is asked for (a forced
/// predictor): p where it can run on the slice (a known predictor that
/// predictor_fits rows of `row` and planes of `plane` values), else None.
NCCLZ_HD constexpr Predictor slice_predictor(Predictor p, uint32_t row, uint32_t plane, uint64_t n) {
  return uint8_t(p) < kNumPredictors && predictor_fits(p, row, plane, n) ? p : Predictor::None;
}

/// The header's predictor arguments for p on rows of `row` and planes of
/// `plane` values: the row length (Lorenzo2D/3D) and the plane size
/// (Lorenzo3D), else 0.
NCCLZ_HD void slice_predictor_args(Predictor p, uint32_t row, uint32_t plane, uint32_t* a0, uint32_t* a1) {
  *a0 = (p == Predictor::Lorenzo2D || p == Predictor::Lorenzo3D) ? row : 0;
  *a1 = p == Predictor::Lorenzo3D ? plane : 0;
}

/// The most payload a coder may produce for a slice of `count` values of type
/// t in `cap` bytes: the room after the header, and never more than Raw's
/// payload (a coded slice is never larger than the Raw one).
NCCLZ_HD constexpr size_t slice_coder_room(ElemType t, uint64_t count, size_t cap) {
  const size_t raw = size_t(count) * elem_size(t);
  const size_t room = cap < kHeaderBytes ? 0 : cap - kHeaderBytes;
  return room < raw ? room : raw;
}

/// The header of the slice an encoder writes for `count` values of type t in
/// `cap` bytes when its chosen coder c ran after predictor p (arguments a0,
/// a1) and produced `coded` payload bytes: c's slice where c is not Raw, the
/// slice is not empty and coded fits slice_coder_room; else the Raw slice
/// (predictor None: the values' own bytes), the fallback that bounds every
/// slice by max_slice_bytes. Status::NoSpace where not even that fits cap.
/// A coder that did not fit passes coded = ~0 (the coders' kNoFit).
NCCLZ_HD Status frame_slice(ElemType t, uint32_t count, size_t cap, Codec c, Predictor p, uint32_t a0, uint32_t a1,
                            size_t coded, SliceHeader* h) {
  if (cap < kHeaderBytes) return Status::NoSpace;
  h->elem_type = t;
  h->flags = 0;
  h->count = count;
  if (c != Codec::Raw && count > 0 && coded <= slice_coder_room(t, count, cap)) {
    h->codec = c;
    h->predictor = p;
    h->payload_bytes = uint32_t(coded);
    h->pred_arg0 = a0;
    h->pred_arg1 = a1;
    return Status::Ok;
  }
  const size_t raw = size_t(count) * elem_size(t);
  if (raw > cap - kHeaderBytes) return Status::NoSpace;
  h->codec = Codec::Raw;
  h->predictor = Predictor::None;
  h->payload_bytes = uint32_t(raw);
  h->pred_arg0 = 0;
  h->pred_arg1 = 0;
  return Status::Ok;
}

/// A decoder's first step: the header of the slice in `len` bytes at src
/// (read_header's checks), and that it holds `count` values of type t.
NCCLZ_HD Status read_slice_header(const uint8_t* src, size_t len, ElemType t, uint32_t count, SliceHeader* h) {
  const Status s = read_header(src, len, h);
  if (s != Status::Ok) return s;
  if (h->elem_type != t) return Status::TypeMismatch;
  if (h->count != count) return Status::CountMismatch;
  return Status::Ok;
}

/// A Raw slice's payload is exactly its values' bytes.
NCCLZ_HD constexpr bool raw_payload_valid(const SliceHeader& h) {
  return uint64_t(h.payload_bytes) == uint64_t(h.count) * elem_size(h.elem_type);
}

}  // namespace ncclz::codec
