// The wire codec a call may force by name (Compression::codec): "" or "auto"
// (the selector), "raw", "block", "rans", "sparse", "floatexp" ("float"),
// "floathuff".
#pragma once

#include <string>

#include "codec/slice.hpp"

namespace ncclz::core {

/// The names, as error messages list them.
constexpr const char* kCodecNames = "auto, raw, block, rans, sparse, floatexp, floathuff";

/// The selector choice a name stands for; *ok false for an unknown name (Auto then).
codec::EncodeOptions::Choice parse_codec(const std::string& name, bool* ok);
/// Whether a forced choice can code values of type t (Auto and Raw always can).
bool choice_accepts(codec::EncodeOptions::Choice ch, codec::ElemType t);

}  // namespace ncclz::core
