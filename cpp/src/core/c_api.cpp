// The C API (ncclz.h) over the C++ Communicator: argument translation and
// exception-to-result-code mapping. Nothing here throws.
#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "base/env.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "ncclz/ncclz.h"
#include "ncclz/unique_id.hpp"

struct ncclzComm {
  std::unique_ptr<ncclz::Communicator> impl;
  ncclz::CallStats last;
  /// Made by ncclzCommInitRank / ncclzCommInitFromEnv inside a group: created
  /// at the group's end (its calls queued in the group run after that).
  bool pending = false;
  std::string creation_failed;  ///< why that creation failed
};

namespace {

thread_local std::string g_last_error;

ncclzResult_t fail(ncclzResult_t r, const char* what) {
  g_last_error = what ? what : "";
  return r;
}

// Runs fn, mapping every exception to a result code (and the message).
template <class Fn>
ncclzResult_t guarded(Fn&& fn) {
  try {
    fn();
    return ncclzSuccess;
  } catch (const ncclz::InvalidArgument& e) {
    return fail(ncclzInvalidArgument, e.what());
  } catch (const ncclz::Aborted& e) {
    return fail(ncclzAborted, e.what());
  } catch (const ncclz::Timeout& e) {
    return fail(ncclzTimeout, e.what());
  } catch (const ncclz::RemoteError& e) {
    return fail(ncclzRemoteError, e.what());
  } catch (const ncclz::CorruptData& e) {
    return fail(ncclzCorruptData, e.what());
  } catch (const ncclz::SystemError& e) {
    return fail(ncclzSystemError, e.what());
  } catch (const std::bad_alloc&) {
    return fail(ncclzSystemError, "out of memory");
  } catch (const std::exception& e) {
    return fail(ncclzInternalError, e.what());
  } catch (...) {
    return fail(ncclzInternalError, "unknown error");
  }
}

bool to_dtype(ncclzDataType_t t, ncclz::DataType* out) {
  switch (t) {
    case ncclzFloat32: *out = ncclz::DataType::F32; return true;
    case ncclzFloat64: *out = ncclz::DataType::F64; return true;
    case ncclzFloat16: *out = ncclz::DataType::F16; return true;
    case ncclzBfloat16: *out = ncclz::DataType::BF16; return true;
    case ncclzInt32: *out = ncclz::DataType::I32; return true;
    case ncclzInt64: *out = ncclz::DataType::I64; return true;
    case ncclzUint8: *out = ncclz::DataType::U8; return true;
    case ncclzInt8: *out = ncclz::DataType::I8; return true;
    case ncclzUint32: *out = ncclz::DataType::U32; return true;
    case ncclzUint64: *out = ncclz::DataType::U64; return true;
    case ncclzFloat8e4m3: *out = ncclz::DataType::F8E4M3; return true;
    case ncclzFloat8e5m2: *out = ncclz::DataType::F8E5M2; return true;
    default: return false;
  }
}

bool to_op(ncclzRedOp_t o, ncclz::RedOp* out) {
  switch (o) {
    case ncclzSum: *out = ncclz::RedOp::Sum; return true;
    case ncclzProd: *out = ncclz::RedOp::Prod; return true;
    case ncclzMax: *out = ncclz::RedOp::Max; return true;
    case ncclzMin: *out = ncclz::RedOp::Min; return true;
    case ncclzAvg: *out = ncclz::RedOp::Avg; return true;
    default: return false;
  }
}

ncclz::Compression to_compression(const ncclzCompression_t& c) {
  ncclz::Compression r;
  switch (c.mode) {
    case ncclzCompressNone: r.mode = ncclz::Compression::Mode::None; break;
    case ncclzCompressLossless: r.mode = ncclz::Compression::Mode::Lossless; break;
    case ncclzCompressLossyAbs: r.mode = ncclz::Compression::Mode::LossyAbs; break;
    case ncclzCompressLossyRel: r.mode = ncclz::Compression::Mode::LossyRel; break;
    default: throw ncclz::InvalidArgument("ncclz: unknown compression mode " + std::to_string(int(c.mode)));
  }
  r.bound = c.bound;
  r.codec = c.codec ? c.codec : "";
  r.min_bytes = c.minBytes;
  return r;
}

ncclz::DataType dtype_or_throw(ncclzDataType_t t) {
  ncclz::DataType d;
  if (!to_dtype(t, &d)) throw ncclz::InvalidArgument("ncclz: unknown data type " + std::to_string(int(t)));
  return d;
}

ncclz::RedOp op_or_throw(ncclzRedOp_t o) {
  ncclz::RedOp r;
  if (!to_op(o, &r)) throw ncclz::InvalidArgument("ncclz: unknown reduction op " + std::to_string(int(o)));
  return r;
}

ncclz::Communicator& comm_or_throw(ncclzComm_t comm) {
  if (comm && !comm->impl && !comm->creation_failed.empty()) {
    throw ncclz::InvalidArgument("ncclz: this communicator was not created (at ncclzGroupEnd): " +
                                 comm->creation_failed);
  }
  if (comm && comm->pending) {
    throw ncclz::InvalidArgument("ncclz: this communicator is created at the end of the open group (ncclzGroupEnd)");
  }
  if (!comm || !comm->impl) throw ncclz::InvalidArgument("ncclz: null or destroyed communicator");
  return *comm->impl;
}

// Runs what a data call does before it reaches the communicator (converting
// its type, op and compression; broadcast's copy on the root). Where that
// fails, this rank still takes part in the call as refused
// (Communicator::refuse: `kind` and `root`, or the peer), as a call the
// runtime refuses does: the other ranks' call then fails naming this rank
// instead of meeting this rank's next call (another call's data, where the
// two look alike). The error returned is this rank's own.
template <class Prepare>
void preparing(ncclz::Communicator& c, ncclz::CallKind kind, int root, Prepare&& prepare) {
  try {
    prepare();
  } catch (const std::exception& e) {
    ncclz::CallArgs a;
    a.kind = kind;
    a.root = root;
    try {
      c.refuse(a, e.what());
    } catch (const std::exception&) {
      // The refusal's own failure (a timeout, an abort) shows on the next call.
    }
    throw;
  }
}

// A data call's type, op and compression, converted (see preparing()).
struct Converted {
  ncclz::DataType type = ncclz::DataType::F32;
  ncclz::RedOp op = ncclz::RedOp::Sum;
  ncclz::Compression compression;
};

Converted convert(ncclz::Communicator& c, ncclz::CallKind kind, int root, ncclzDataType_t t, ncclzCompression_t z,
                  const ncclzRedOp_t* op = nullptr) {
  Converted v;
  preparing(c, kind, root, [&] {
    v.type = dtype_or_throw(t);
    if (op) v.op = op_or_throw(*op);
    v.compression = to_compression(z);
  });
  return v;
}

// ---- groups (ncclzGroupStart / ncclzGroupEnd) ----
// The calls a thread makes between them are queued (sends and recvs with
// their arguments converted, a refused one marked so) and run at the
// outermost ncclzGroupEnd: each communicator's calls in order, a run of sends
// and recvs as one Communicator::group, several communicators each on a
// thread of its own (one thread driving several ranks, as NCCL allows).

struct Queued {
  ncclzComm_t comm = nullptr;
  bool creates = false;  // the communicator's creation (ncclzCommInitRank / InitFromEnv in the group)
  bool p2p = false;
  ncclz::PeerCall call;       // p2p
  std::function<void()> run;  // a collective or barrier
  int device = -1;            // the thread's buffer device when the call was made (ncclzSetBufferDevice)
};

thread_local int g_group_depth = 0;
thread_local std::vector<Queued> g_queued;

// A communicator a call may be queued for: made, or made at the group's end.
void queueable_or_throw(ncclzComm_t comm) {
  if (!comm || !comm->pending) comm_or_throw(comm);
}

// Whether this thread's open group holds calls of `comm`.
bool queued_for(ncclzComm_t comm) {
  return std::any_of(g_queued.begin(), g_queued.end(), [&](const Queued& q) { return q.comm == comm; });
}

template <class Fn>
ncclzResult_t call_or_queue(ncclzComm_t comm, Fn fn) {
  if (g_group_depth == 0) return guarded(fn);
  return guarded([&] {
    queueable_or_throw(comm);
    Queued q;
    q.comm = comm;
    q.run = std::move(fn);
    q.device = ncclz::buffer_device();
    g_queued.push_back(std::move(q));
  });
}

// Inside guarded(): a send or recv of a group, queued. An argument this API
// cannot take is this call's error now, and the call is queued refused so
// that the group still meets the peer's.
void queue_p2p(ncclzComm_t comm, bool send, void* buf, size_t count, ncclzDataType_t t, int peer,
               ncclzCompression_t z) {
  queueable_or_throw(comm);
  Queued q;
  q.comm = comm;
  q.p2p = true;
  q.call.send = send;
  q.call.buf = buf;
  q.call.count = count;
  q.call.peer = peer;
  q.call.device = q.device = ncclz::buffer_device();
  std::string refused;
  try {
    q.call.type = dtype_or_throw(t);
    q.call.compression = to_compression(z);
  } catch (const std::exception& e) {
    refused = e.what();
    q.call.refused = refused;
  }
  g_queued.push_back(std::move(q));
  if (!refused.empty()) throw ncclz::InvalidArgument(refused);
}

// A new communicator (ncclzCommInitRank, ncclzCommInitFromEnv): made now, or
// inside a group a handle whose creation runs at the group's end, each
// communicator's on a thread of its own, so one thread can create several
// ranks of one communicator (NCCL's ncclGroupStart / ncclCommInitRank for
// each device / ncclGroupEnd). Calls queued for it in the group run after.
ncclzComm_t create_or_queue(std::function<std::unique_ptr<ncclz::Communicator>()> make) {
  auto c = std::make_unique<ncclzComm>();
  if (g_group_depth == 0) {
    c->impl = make();
    return c.release();
  }
  c->pending = true;
  Queued q;
  q.comm = c.get();
  q.creates = true;
  q.device = ncclz::buffer_device();
  q.run = [comm = c.get(), make = std::move(make)] { comm->impl = make(); };
  g_queued.push_back(std::move(q));
  return c.release();
}

// ncclzCommSplit's work: *newcomm the new communicator, or left NULL where
// this rank has no color. A rank with nowhere to put the new communicator
// still takes part (the others' split must complete), in none of the new ones.
void split_into(ncclzComm_t comm, int color, int key, ncclzComm_t* newcomm) {
  if (!newcomm) {
    comm_or_throw(comm).split(ncclz::kSplitNoColor, key);
    throw ncclz::InvalidArgument("ncclzCommSplit: null newcomm (this rank joined no new communicator)");
  }
  auto made = comm_or_throw(comm).split(color, key);
  if (made) {
    auto c = std::make_unique<ncclzComm>();
    c->impl = std::move(made);
    *newcomm = c.release();
  }
}

// One communicator's queued calls, in order; the first error's code, its
// message in *msg.
ncclzResult_t run_queued(ncclzComm_t comm, const std::vector<Queued>& all, std::string* msg) {
  ncclzResult_t first = ncclzSuccess;
  auto note = [&](ncclzResult_t r) {
    if (r != ncclzSuccess && first == ncclzSuccess) {
      first = r;
      *msg = g_last_error;
    }
  };
  std::vector<ncclz::PeerCall> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    note(guarded([&] { comm_or_throw(comm).group(batch, &comm->last); }));
    batch.clear();
  };
  // Each call runs with the buffer device it was made with (a thread of its
  // own, or the caller's restored after): NCCL's one thread driving several
  // devices sets the device before each call of the group.
  const int caller_device = ncclz::buffer_device();
  for (const Queued& q : all) {
    if (q.comm != comm) continue;
    if (q.creates) {
      const ncclzResult_t r = guarded(q.run);
      if (r != ncclzSuccess) comm->creation_failed = g_last_error;
      comm->pending = false;
      note(r);
      continue;
    }
    if (q.p2p) {
      batch.push_back(q.call);  // (PeerCall::device: each call's own)
      continue;
    }
    flush();
    ncclz::set_buffer_device(q.device);
    note(guarded(q.run));
    ncclz::set_buffer_device(caller_device);
  }
  flush();
  return first;
}
}  // namespace

extern "C" {

ncclzResult_t ncclzGetUniqueId(ncclzUniqueId* uniqueId) {
  return guarded([&] {
    if (!uniqueId) throw ncclz::InvalidArgument("ncclzGetUniqueId: null uniqueId");
    static_assert(sizeof(ncclz::UniqueId) == sizeof(ncclzUniqueId), "unique id sizes agree");
    const ncclz::UniqueId id = ncclz::make_unique_id();
    std::memcpy(uniqueId->internal, id.bytes, sizeof id.bytes);
  });
}

ncclzResult_t ncclzGetVersion(int* version) {
  return guarded([&] {
    if (!version) throw ncclz::InvalidArgument("ncclzGetVersion: null version");
    *version = NCCLZ_VERSION_CODE;
  });
}

ncclzResult_t ncclzCommInitRank(ncclzComm_t* comm, int nranks, ncclzUniqueId commId, int rank) {
  return guarded([&] {
    if (!comm) throw ncclz::InvalidArgument("ncclzCommInitRank: null comm");
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks) {
      throw ncclz::InvalidArgument("ncclzCommInitRank: rank " + std::to_string(rank) + " is not in [0, " +
                                   std::to_string(nranks) + ")");
    }
    ncclz::UniqueId id;
    std::memcpy(id.bytes, commId.internal, sizeof id.bytes);
    const ncclz::CommConfig cfg = ncclz::CommConfig::from_env();
    *comm = create_or_queue([=] { return ncclz::Communicator::create(id, rank, nranks, cfg); });
  });
}

ncclzResult_t ncclzCommInitFromEnv(ncclzComm_t* comm) {
  return guarded([&] {
    if (!comm) throw ncclz::InvalidArgument("ncclzCommInitFromEnv: null comm");
    *comm = nullptr;
    // No defaults: a program started without its launcher would otherwise run
    // as N independent one-rank jobs, silently (docs/ENVIRONMENT.md).
    if (!ncclz::env::get("RANK") || !ncclz::env::get("WORLD_SIZE")) {
      throw ncclz::InvalidArgument(
          "ncclzCommInitFromEnv: RANK and WORLD_SIZE must be set (ncclz-run, torchrun and mpirun wrappers set "
          "them); or use ncclzCommInitRank");
    }
    const ncclz::CommConfig cfg = ncclz::CommConfig::from_env();
    *comm = create_or_queue([=] { return ncclz::Communicator::create(cfg); });
  });
}

ncclzResult_t ncclzCommSplit(ncclzComm_t comm, int color, int key, ncclzComm_t* newcomm) {
  if (g_group_depth > 0) {
    // In a group: at its end, in order with the parent's other queued calls
    // (several parents' splits at once: one thread driving several ranks);
    // *newcomm is written then (NULL for no color, as outside a group).
    return guarded([&] {
      queueable_or_throw(comm);
      if (newcomm) *newcomm = nullptr;
      Queued q;
      q.comm = comm;
      q.device = ncclz::buffer_device();
      q.run = [comm, color, key, newcomm] { split_into(comm, color, key, newcomm); };
      g_queued.push_back(std::move(q));
    });
  }
  return guarded([&] {
    if (newcomm) *newcomm = nullptr;
    split_into(comm, color, key, newcomm);
  });
}

ncclzResult_t ncclzCommDestroy(ncclzComm_t comm) {
  return guarded([&] {
    if (comm && queued_for(comm)) {
      throw ncclz::InvalidArgument(
          "ncclzCommDestroy: this thread's open group (ncclzGroupStart) holds calls of the communicator; end the "
          "group first (or ncclzCommAbort, which cancels them)");
    }
    delete comm;
  });
}

ncclzResult_t ncclzCommAbort(ncclzComm_t comm) {
  return guarded([&] {
    // The calls this thread queued for it in an open group are cancelled (they would name a freed handle).
    g_queued.erase(std::remove_if(g_queued.begin(), g_queued.end(), [&](const Queued& q) { return q.comm == comm; }),
                   g_queued.end());
    if (comm && comm->impl) comm->impl->abort("aborted by ncclzCommAbort");
    delete comm;
  });
}

ncclzResult_t ncclzCommCount(const ncclzComm_t comm, int* count) {
  return guarded([&] {
    if (!count) throw ncclz::InvalidArgument("ncclzCommCount: null count");
    *count = comm_or_throw(comm).size();
  });
}

ncclzResult_t ncclzCommUserRank(const ncclzComm_t comm, int* rank) {
  return guarded([&] {
    if (!rank) throw ncclz::InvalidArgument("ncclzCommUserRank: null rank");
    *rank = comm_or_throw(comm).rank();
  });
}

ncclzResult_t ncclzAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype,
                             ncclzRedOp_t op, ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::AllReduce, 0, datatype, compression, &op);
    c.all_reduce(sendbuff, recvbuff, count, v.type, v.op, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclzDataType_t datatype,
                                 ncclzRedOp_t op, ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::ReduceScatter, 0, datatype, compression, &op);
    c.reduce_scatter(sendbuff, recvbuff, recvcount, v.type, v.op, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclzDataType_t datatype,
                             ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::AllGather, 0, datatype, compression);
    c.all_gather(sendbuff, recvbuff, sendcount, v.type, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype, int root,
                             ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::Broadcast, root, datatype, compression);
    if (c.rank() == root && sendbuff && recvbuff && sendbuff != recvbuff && count) {
      preparing(c, ncclz::CallKind::Broadcast, root, [&] {
        const size_t bytes = count * ncclz::dtype_size(v.type);
        if (ncclz::buffer_device() >= 0) {  // device buffers (ncclzSetBufferDevice)
          if (const int e = ncclz::cuda::copy_device(recvbuff, sendbuff, bytes)) {
            throw ncclz::Error(
                "ncclzBroadcast: copying the root's sendbuff to its recvbuff on the device failed (CUDA "
                "error " +
                std::to_string(e) + ")");
          }
        } else {
          std::memmove(recvbuff, sendbuff, bytes);
        }
      });
    }
    c.broadcast(recvbuff, count, v.type, root, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzReduce(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype, ncclzRedOp_t op,
                          int root, ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::Reduce, root, datatype, compression, &op);
    c.reduce(sendbuff, recvbuff, count, v.type, v.op, root, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclzDataType_t datatype, int root,
                          ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::Gather, root, datatype, compression);
    c.gather(sendbuff, recvbuff, sendcount, v.type, root, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclzDataType_t datatype, int root,
                           ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::Scatter, root, datatype, compression);
    c.scatter(sendbuff, recvbuff, recvcount, v.type, root, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzAllToAll(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype,
                            ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::AllToAll, 0, datatype, compression);
    c.all_to_all(sendbuff, recvbuff, count, v.type, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzAllToAllv(const void* sendbuff, const size_t* sendcounts, void* recvbuff, const size_t* recvcounts,
                             ncclzDataType_t datatype, ncclzCompression_t compression, ncclzComm_t comm) {
  return call_or_queue(comm, [=] {
    ncclz::Communicator& c = comm_or_throw(comm);
    const Converted v = convert(c, ncclz::CallKind::AllToAllv, 0, datatype, compression);
    c.all_to_allv(sendbuff, sendcounts, recvbuff, recvcounts, v.type, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzSend(const void* sendbuff, size_t count, ncclzDataType_t datatype, int peer,
                        ncclzCompression_t compression, ncclzComm_t comm) {
  return guarded([&] {
    ncclz::Communicator& c = comm_or_throw(comm);
    if (g_group_depth > 0)
      return queue_p2p(comm, true, const_cast<void*>(sendbuff), count, datatype, peer, compression);
    const Converted v = convert(c, ncclz::CallKind::Send, peer, datatype, compression);
    c.send(sendbuff, count, v.type, peer, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzRecv(void* recvbuff, size_t count, ncclzDataType_t datatype, int peer,
                        ncclzCompression_t compression, ncclzComm_t comm) {
  return guarded([&] {
    ncclz::Communicator& c = comm_or_throw(comm);
    if (g_group_depth > 0) return queue_p2p(comm, false, recvbuff, count, datatype, peer, compression);
    const Converted v = convert(c, ncclz::CallKind::Recv, peer, datatype, compression);
    c.recv(recvbuff, count, v.type, peer, v.compression, &comm->last);
  });
}

ncclzResult_t ncclzGroupStart(void) {
  ++g_group_depth;
  return ncclzSuccess;
}

ncclzResult_t ncclzGroupEnd(void) {
  if (g_group_depth == 0) return fail(ncclzInvalidArgument, "ncclzGroupEnd: no group is open (ncclzGroupStart)");
  if (--g_group_depth > 0) return ncclzSuccess;
  const std::vector<Queued> queued = std::move(g_queued);
  g_queued.clear();
  std::vector<ncclzComm_t> comms;
  for (const Queued& q : queued) {
    if (std::find(comms.begin(), comms.end(), q.comm) == comms.end()) comms.push_back(q.comm);
  }
  std::vector<ncclzResult_t> results(comms.size(), ncclzSuccess);
  std::vector<std::string> messages(comms.size());
  if (comms.size() == 1) {
    results[0] = run_queued(comms[0], queued, &messages[0]);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = run_queued(comms[i], queued, &messages[i]); });
    }
    for (std::thread& t : threads) t.join();
  }
  for (size_t i = 0; i < comms.size(); ++i) {
    if (results[i] != ncclzSuccess) return fail(results[i], messages[i].c_str());
  }
  return ncclzSuccess;
}

ncclzResult_t ncclzSetBufferDevice(int device) {
  return guarded([&] {
    if (device >= 0 && !ncclz::cuda::built_with_cuda()) {
      throw ncclz::InvalidArgument("ncclzSetBufferDevice(" + std::to_string(device) +
                                   "): this ncclz was built without CUDA; its calls take host buffers");
    }
    ncclz::set_buffer_device(device);
  });
}

ncclzResult_t ncclzBarrier(ncclzComm_t comm) {
  return call_or_queue(comm, [=] { comm_or_throw(comm).barrier(); });
}

ncclzResult_t ncclzCommGetLastStats(const ncclzComm_t comm, ncclzCallStats_t* stats) {
  return guarded([&] {
    comm_or_throw(comm);
    if (!stats) throw ncclz::InvalidArgument("ncclzCommGetLastStats: null stats");
    const ncclz::CallStats& s = comm->last;
    stats->rawBytes = s.raw_bytes;
    stats->wireBytes = s.wire_bytes;
    stats->ratio = s.ratio;
    stats->encodeSeconds = s.encode_s;
    stats->decodeSeconds = s.decode_s;
    stats->quantizeSeconds = s.quantize_s;
    stats->waitSeconds = s.wait_s;
    stats->wallSeconds = s.wall_s;
    stats->errorBound = s.error_bound;
    stats->exactFallback = s.exact_fallback ? 1 : 0;
    stats->onDevice = s.on_device ? 1 : 0;
    stats->channels = s.channels;
    stats->sliceBytes = s.slice_bytes;
  });
}

const char* ncclzGetErrorString(ncclzResult_t result) {
  switch (result) {
    case ncclzSuccess: return "no error";
    case ncclzInvalidArgument: return "invalid argument";
    case ncclzRemoteError: return "remote process error or mismatched call";
    case ncclzTimeout: return "timeout";
    case ncclzAborted: return "communicator aborted";
    case ncclzCorruptData: return "corrupt compressed data";
    case ncclzSystemError: return "system error";
    case ncclzInternalError: return "internal error";
    default: return "unknown result code";
  }
}

const char* ncclzGetLastError(ncclzComm_t comm) {
  (void)comm;
  return g_last_error.c_str();
}

}  // extern "C"
