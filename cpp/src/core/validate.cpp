// The argument checks (see validate.hpp).
#include "core/validate.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "core/call_desc.hpp"
#include "core/codec_choice.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {

Mode effective_mode(const Compression& c, size_t bytes) {
  if (c.mode == Mode::Lossless && c.min_bytes && bytes < c.min_bytes) return Mode::None;
  return c.mode;
}

std::string check_compression(DataType t, Mode m, const Compression& c, const PolicyHints* hints) {
  if (!valid_dtype(uint8_t(t))) return "unknown data type " + std::to_string(int(t));
  if (uint8_t(m) > uint8_t(Mode::LossyRel)) return "unknown compression mode " + std::to_string(int(m));
  if (is_lossy(m)) {
    if (is_float8(t)) {
      return std::string("lossy compression takes float32, float64, float16 and bfloat16, not ") + dtype_name(t) +
             " (its own rounding is coarser than most bounds: use lossless compression or none)";
    }
    if (!is_float(t)) {
      return std::string("lossy compression needs a floating-point type, got ") + dtype_name(t) +
             " (use lossless compression or none for integers)";
    }
    if (!(c.bound > 0) || !std::isfinite(c.bound)) {
      std::ostringstream s;
      s << "the lossy error bound must be positive and finite, got " << c.bound;
      return s.str();
    }
  }
  if (hints) {
    if (hints->lighter < -1 || hints->lighter > int(Mode::Lossless)) {
      return "the policy's lighter mode must be -1 (none proposed), 0 (none) or 1 (lossless), got " +
             std::to_string(hints->lighter);
    }
    if (!(hints->rans_margin < 0) && !(hints->rans_margin <= 1)) {
      std::ostringstream s;
      s << "the policy's rans_margin must be < 0 (the selector's default) or in [0, 1], got " << hints->rans_margin;
      return s.str();
    }
    if (hints->algorithm < -1 || hints->algorithm > int(Algorithm::Hierarchical)) {
      return "the policy's algorithm must be -1 (none proposed), 0 (ring) or 1 (hierarchical), got " +
             std::to_string(hints->algorithm);
    }
  }
  if (c.codec.size() >= sizeof(CallDesc::codec)) return "codec name '" + c.codec + "' is too long";
  bool ok = false;
  const auto ch = parse_codec(c.codec, &ok);
  if (!ok) return "unknown codec '" + c.codec + "' (" + kCodecNames + ")";
  if (m == Mode::Lossless && !choice_accepts(ch, elem_of(t))) {
    return "codec '" + c.codec + "' does not accept " + dtype_name(t) + " values in lossless mode";
  }
  if (is_lossy(m) && !choice_accepts(ch, ElemType::I32)) {
    return "codec '" + c.codec + "' does not accept the integer codes of lossy mode";
  }
  return "";
}

std::string check_op(RedOp op, Mode m) {
  if (!valid_op(uint8_t(op))) return "unknown reduction op " + std::to_string(int(op));
  if (is_lossy(m) && op == RedOp::Prod) {
    return "prod is not offered in lossy mode (its error would not be bounded; use lossless or none)";
  }
  return "";
}

std::string check_root(int root, int nranks) {
  if (root < 0 || root >= nranks) {
    return "root " + std::to_string(root) + " is not a rank of this communicator (size " + std::to_string(nranks) + ")";
  }
  return "";
}

std::string check_buffers(const void* a, const void* b, size_t count) {
  if (count > 0 && (!a || !b)) return "null buffer with count > 0";
  return "";
}

std::string check_buffers(const Collective& cd) {
  if (cd.in_count > 0 && !cd.send) return "null input buffer with " + std::to_string(cd.in_count) + " elements to read";
  if (cd.out_count > 0 && !cd.recv) {
    return "null output buffer with " + std::to_string(cd.out_count) + " elements to write";
  }
  return "";
}

std::string check_args(const Collective& cd, DataType t, Mode m, const Compression& c, const PolicyHints* hints,
                       int nranks, bool p2p_links) {
  std::string err;
  if (cd.rooted()) err = check_root(cd.root, nranks);
  if (err.empty() && cd.peer_schedule && nranks > 1 && !p2p_links) {
    err = std::string(coll_name(cd.coll)) +
          " runs on the point-to-point links, which are off (NCCLZ_P2P=0 at communicator creation); create the "
          "communicator with NCCLZ_P2P=1 (the default)";
  }
  if (err.empty() && cd.per_peer() && (!cd.send_counts || !cd.recv_counts)) {
    err = "null send_counts or recv_counts (they need one entry per rank)";
  }
  if (err.empty()) err = check_compression(t, m, c, hints);
  if (err.empty() && cd.reduces) err = check_op(cd.op, m);
  if (err.empty()) {
    // Send and recv are described with one buffer in both fields (count
    // elements): their null check is the count's.
    err = cd.p2p() ? check_buffers(cd.send, cd.recv, cd.count) : check_buffers(cd);
  }
  if (err.empty() && (cd.coll == Coll::AllToAll || cd.coll == Coll::AllToAllv)) {
    // The pairwise steps receive into blocks that later steps still send from.
    const size_t es = dtype_size(t);
    const auto x = reinterpret_cast<uintptr_t>(cd.send), y = reinterpret_cast<uintptr_t>(cd.recv);
    const size_t in = cd.in_count * es, out = cd.out_count * es;
    if (in && out && x < y + out && y < x + in) {
      err = "input and output buffers overlap; all_to_all needs separate arrays";
    }
  }
  return err;
}

std::string check_peer(int peer, int rank, int nranks, bool p2p_links) {
  if (peer < 0 || peer >= nranks || peer == rank) {
    return "peer " + std::to_string(peer) + " must be another rank of this communicator (0.." +
           std::to_string(nranks - 1) + ", not " + std::to_string(rank) + ")";
  }
  if (!p2p_links) return "point-to-point links are off (NCCLZ_P2P=0 at communicator creation)";
  return "";
}

std::string check_arrays(const CallArgs& a, int rank, int nranks) {
  const bool root = rank == a.root;
  // Calls with two arrays here: both used on every rank, or on the root only.
  bool two = a.kind == CallKind::AllReduce || a.kind == CallKind::ReduceScatter || a.kind == CallKind::AllGather ||
             a.kind == CallKind::AllToAll || a.kind == CallKind::AllToAllv;
  if (a.kind == CallKind::Reduce || a.kind == CallKind::Gather || a.kind == CallKind::Scatter) two = root;
  if (!two) return "";
  if (a.send_type != a.recv_type) {
    return std::string("input dtype ") + dtype_name(a.send_type) + " differs from output dtype " +
           dtype_name(a.recv_type);
  }
  const size_t n = size_t(nranks);
  size_t got = a.recv_count, want = a.send_count;
  std::string what = "output";
  if (a.kind == CallKind::ReduceScatter || a.kind == CallKind::Scatter) {
    got = a.send_count;
    want = a.recv_count * n;
    what = a.kind == CallKind::Scatter ? "the root's input (world_size * output count)"
                                       : "input (world_size * output count)";
  } else if (a.kind == CallKind::AllGather || a.kind == CallKind::Gather) {
    want = a.send_count * n;
    what = a.kind == CallKind::Gather ? "the root's output (world_size * input count)"
                                      : "output (world_size * input count)";
  } else if (a.kind == CallKind::Reduce) {
    what = "the root's output";
  } else if (a.kind == CallKind::AllToAll && a.send_count % n != 0) {
    std::ostringstream s;
    s << "input has " << a.send_count << " elements, not a multiple of the world size " << n
      << " (block j of input goes to rank j)";
    return s.str();
  } else if (a.kind == CallKind::AllToAllv) {
    if (!a.send_counts || !a.recv_counts) return "null send_counts or recv_counts (they need one entry per rank)";
    size_t sent = 0, received = 0;
    for (size_t j = 0; j < n; ++j) {
      sent += a.send_counts[j];
      received += a.recv_counts[j];
    }
    if (sent != a.send_count || received != a.recv_count) {
      std::ostringstream s;
      if (sent != a.send_count) {
        s << "input has " << a.send_count << " elements but send_counts add up to " << sent;
      } else {
        s << "output has " << a.recv_count << " elements but recv_counts add up to " << received;
      }
      return s.str();
    }
    got = want = 0;
  }
  if (got != want) {
    std::ostringstream s;
    s << what << " has " << got << " elements, expected " << want;
    return s.str();
  }
  // Partial overlap is never meaningful; exact aliasing only where the call
  // documents in-place use (all_reduce, reduce).
  const size_t es = dtype_size(a.send_type);
  const size_t in_bytes = a.send_count * es, out_bytes = a.recv_count * es;
  const auto x = reinterpret_cast<uintptr_t>(a.send), y = reinterpret_cast<uintptr_t>(a.recv);
  const bool overlap = in_bytes > 0 && out_bytes > 0 && x < y + out_bytes && y < x + in_bytes;
  const bool in_place = a.kind == CallKind::AllReduce || a.kind == CallKind::Reduce;
  if (overlap && !(in_place && x == y && in_bytes == out_bytes)) {
    return std::string("input and output buffers overlap; use separate arrays") +
           (in_place ? " (or exactly the same array, in place)" : "");
  }
  return "";
}

Collective desc_of(const CallArgs& a, int rank, int nranks, DataType* type) {
  DataType t = a.send_type;
  Collective cd;
  switch (a.kind) {
    case CallKind::AllReduce: cd = all_reduce_desc(a.send, const_cast<void*>(a.recv), a.send_count, a.op); break;
    case CallKind::ReduceScatter:
      cd = reduce_scatter_desc(a.send, const_cast<void*>(a.recv), a.recv_count, a.op, nranks);
      break;
    case CallKind::AllGather: cd = all_gather_desc(a.send, const_cast<void*>(a.recv), a.send_count, nranks); break;
    case CallKind::Broadcast:
      t = a.recv_type;
      cd = broadcast_desc(const_cast<void*>(a.recv), a.recv_count, a.root, rank);
      break;
    case CallKind::Send: cd = send_desc(a.send, a.send_count, rank, a.root); break;
    case CallKind::Recv:
      t = a.recv_type;
      cd = recv_desc(const_cast<void*>(a.recv), a.recv_count, rank, a.root);
      break;
    case CallKind::AllToAll:
      cd = all_to_all_desc(a.send, const_cast<void*>(a.recv), a.send_count / size_t(nranks), rank, nranks);
      break;
    case CallKind::AllToAllv:
      cd = all_to_allv_desc(a.send, a.send_counts, const_cast<void*>(a.recv), a.recv_counts, rank, nranks);
      break;
    case CallKind::Reduce: cd = reduce_desc(a.send, const_cast<void*>(a.recv), a.send_count, a.op, a.root, rank); break;
    case CallKind::Gather:
      cd = gather_desc(a.send, const_cast<void*>(a.recv), a.send_count, a.root, rank, nranks);
      break;
    case CallKind::Scatter:
      t = a.recv_type;
      cd = scatter_desc(a.send, const_cast<void*>(a.recv), a.recv_count, a.root, rank, nranks);
      break;
    default: throw InvalidArgument(std::string("unknown call kind ") + std::to_string(int(a.kind)));
  }
  if (type) *type = t;
  return cd;
}

void check_call(const CallArgs& a, const PolicyHints* hints, int rank, int nranks, bool p2p_links) {
  auto raise = [&](const std::string& err) {
    if (!err.empty()) throw InvalidArgument(std::string(call_name(a.kind)) + ": " + err);
  };
  raise(check_arrays(a, rank, nranks));
  if (a.kind == CallKind::Send || a.kind == CallKind::Recv) raise(check_peer(a.root, rank, nranks, p2p_links));
  DataType t = a.send_type;
  const Collective cd = desc_of(a, rank, nranks, &t);
  // all_to_allv's message size is known after the counts round: its requested mode is checked.
  const Mode m = cd.per_peer() ? a.compression.mode : effective_mode(a.compression, cd.message * dsize(t));
  raise(check_args(cd, t, m, a.compression, cd.p2p() ? nullptr : hints, nranks, p2p_links));
}

}  // namespace ncclz::core
