// Call descriptors: how they are printed and compared (see call_desc.hpp).
#include "core/call_desc.hpp"

#include <cstring>
#include <sstream>

#include "core/types.hpp"

namespace ncclz::core {

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "all_reduce";
    case Coll::ReduceScatter: return "reduce_scatter";
    case Coll::AllGather: return "all_gather";
    case Coll::Broadcast: return "broadcast";
    case Coll::Send: return "send";
    case Coll::Recv: return "recv";
    case Coll::Barrier: return "barrier";
    case Coll::Outliers: return "(lossy outlier round)";
    case Coll::AllToAll: return "all_to_all";
    case Coll::AllToAllv: return "all_to_allv";
    case Coll::Reduce: return "reduce";
    case Coll::Gather: return "gather";
    case Coll::Scatter: return "scatter";
  }
  return "?";
}

std::string mode_string(uint8_t mode, double bound, const char* codec) {
  std::ostringstream s;
  switch (Mode(mode)) {
    case Mode::None: s << "none"; break;
    case Mode::Lossless: s << "lossless"; break;
    case Mode::LossyAbs: s << "lossy_abs(" << bound << ")"; break;
    case Mode::LossyRel: s << "lossy_rel(" << bound << ")"; break;
    default: s << "mode " << int(mode);
  }
  if (codec && codec[0]) s << ", codec=" << std::string(codec, strnlen(codec, sizeof(CallDesc::codec)));
  return s.str();
}

namespace {

// "root=R" of a rooted collective, "peer=P" of a send or recv, else "".
std::string target_of(const CallDesc& d, Coll c) {
  if (c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter) {
    return "root=" + std::to_string(d.root);
  }
  if (c == Coll::Send) return "peer=" + std::to_string(d.peer);
  if (c == Coll::Recv) return "peer=" + std::to_string(d.root);
  return "";
}

}  // namespace

std::string describe(const CallDesc& d) {
  std::ostringstream s;
  const Coll c = Coll(d.coll);
  s << coll_name(c) << "(";
  if (c == Coll::Barrier) return s.str() + ")";
  const std::string target = target_of(d, c);
  if (d.mode == kRefusedMode) {
    // Communicator::refuse: only the kind and the root or peer are known.
    if (!target.empty()) s << target << ", ";
    return s.str() + "refused before the call: its arguments failed that rank's own checks)";
  }
  s << (c == Coll::ReduceScatter || c == Coll::Scatter ? "recv_count="
        : c == Coll::AllGather || c == Coll::Gather    ? "send_count="
        : c == Coll::AllToAllv                         ? "send_total="
                                                       : "count=")
    << d.count << ", " << dtype_name(DataType(d.dtype));
  if (c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce) s << ", " << op_name(RedOp(d.op));
  if (!target.empty()) s << ", " << target;
  s << ", " << mode_string(d.mode, d.bound, d.codec) << ")";
  return s.str();
}

bool same_call(const CallDesc& a, const CallDesc& b) {
  // all_to_allv's ranks send different totals: the counts round matches them pair by pair.
  const bool counts_match = a.count == b.count || (a.coll == b.coll && Coll(a.coll) == Coll::AllToAllv);
  return a.seq == b.seq && a.coll == b.coll && counts_match && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.mode == b.mode && std::memcmp(&a.bound, &b.bound, sizeof(double)) == 0 &&
         std::memcmp(a.codec, b.codec, sizeof a.codec) == 0;
}

std::string p2p_mismatch(const CallDesc& s, const CallDesc& r) {
  if (s.seq != r.seq) return "they are at different send/recv counts between the two ranks";
  if (s.count != r.count) return "the counts differ";
  if (s.dtype != r.dtype) return "the data types differ";
  if (s.mode != r.mode || std::memcmp(&s.bound, &r.bound, sizeof(double)) != 0 ||
      std::memcmp(s.codec, r.codec, sizeof s.codec) != 0) {
    return "the compression settings differ";
  }
  return "";
}

}  // namespace ncclz::core
