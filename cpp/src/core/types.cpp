// Names and sizes of the public enums (ncclz/communicator.hpp).
#include "core/types.hpp"

namespace ncclz {

const char* dtype_name(DataType t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int32",         "int64",
                                "uint8",   "int8",    "uint32",  "uint64",   "float8_e4m3fn", "float8_e5m2"};
  return core::valid_dtype(uint8_t(t)) ? names[uint8_t(t)] : "?";
}

size_t dtype_size(DataType t) { return core::valid_dtype(uint8_t(t)) ? codec::elem_size(core::elem_of(t)) : 0; }

const char* op_name(RedOp op) {
  static const char* names[] = {"sum", "avg", "max", "min", "prod"};
  return core::valid_op(uint8_t(op)) ? names[uint8_t(op)] : "?";
}

const char* mode_name(Compression::Mode m) {
  switch (m) {
    case Compression::Mode::None: return "none";
    case Compression::Mode::Lossless: return "lossless";
    case Compression::Mode::LossyAbs: return "lossy_abs";
    case Compression::Mode::LossyRel: return "lossy_rel";
  }
  return "?";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Hierarchical: return "hierarchical";
    case Algorithm::Latency: return "latency";
  }
  return "?";
}

const char* call_name(CallKind k) {
  switch (k) {
    case CallKind::AllReduce: return "all_reduce";
    case CallKind::ReduceScatter: return "reduce_scatter";
    case CallKind::AllGather: return "all_gather";
    case CallKind::Broadcast: return "broadcast";
    case CallKind::Send: return "send";
    case CallKind::Recv: return "recv";
    case CallKind::AllToAll: return "all_to_all";
    case CallKind::AllToAllv: return "all_to_allv";
    case CallKind::Reduce: return "reduce";
    case CallKind::Gather: return "gather";
    case CallKind::Scatter: return "scatter";
  }
  return "?";
}

}  // namespace ncclz
