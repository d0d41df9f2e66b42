// Codec names (see codec_choice.hpp).
#include "core/codec_choice.hpp"

namespace ncclz::core {

codec::EncodeOptions::Choice parse_codec(const std::string& s, bool* ok) {
  using C = codec::EncodeOptions::Choice;
  *ok = true;
  if (s.empty() || s == "auto") return C::Auto;
  if (s == "raw") return C::Raw;
  if (s == "block") return C::Block;
  if (s == "rans") return C::Rans;
  if (s == "floatexp" || s == "float") return C::FloatExp;
  if (s == "sparse") return C::Sparse;
  if (s == "floathuff") return C::FloatHuff;
  *ok = false;
  return C::Auto;
}

bool choice_accepts(codec::EncodeOptions::Choice ch, codec::ElemType t) {
  using C = codec::EncodeOptions::Choice;
  switch (ch) {
    case C::Auto:
    case C::Raw: return true;
    case C::Block: return codec::codec_accepts(codec::Codec::Block, t, codec::Predictor::None);
    case C::Rans: return codec::codec_accepts(codec::Codec::Rans, t, codec::Predictor::None);
    case C::FloatExp: return codec::codec_accepts(codec::Codec::FloatExp, t, codec::Predictor::None);
    case C::Sparse: return codec::codec_accepts(codec::Codec::Sparse, t, codec::Predictor::None);
    case C::FloatHuff: return codec::codec_accepts(codec::Codec::FloatHuff, t, codec::Predictor::None);
  }
  return false;
}

}  // namespace ncclz::core
