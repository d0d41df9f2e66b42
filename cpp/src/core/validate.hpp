// The argument checks of every call, in one place (the bindings and the C API
// map their arguments and call these through the collectives or
// Communicator::check_call; nothing else checks them).
//
// Each check returns "" or what is wrong, without saying who and in which call:
// the call routine prefixes "ncclz rank R: <call>(...): " and reports it to
// every rank through the call descriptor (core/call_protocol.hpp);
// Communicator::check_call prefixes "<call>: " and raises it on its own.
#pragma once

#include <cstddef>
#include <string>

#include "core/collective.hpp"
#include "core/types.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/policy_hints.hpp"

namespace ncclz::core {

/// The mode a call of `bytes` runs with: lossless messages under min_bytes go
/// uncompressed (lossy ones take the exact path instead: apply_min_bytes).
Mode effective_mode(const Compression& c, size_t bytes);

/// Type, mode, bound, the policy's hints, and the forced codec's name and fit.
std::string check_compression(DataType t, Mode m, const Compression& c, const PolicyHints* hints);
/// The reduction op (prod has no error bound in lossy mode).
std::string check_op(RedOp op, Mode m);
std::string check_root(int root, int nranks);
std::string check_buffers(const void* a, const void* b, size_t count);
/// This rank's buffers: an input where it reads elements, an output where it
/// writes them (root-only buffers are not checked on other ranks).
std::string check_buffers(const Collective& cd);
/// A collective's checks in order: root, the point-to-point links a peer
/// schedule needs (p2p_links: connected at creation), per-peer counts,
/// compression, op, buffers (m: the effective mode).
std::string check_args(const Collective& cd, DataType t, Mode m, const Compression& c, const PolicyHints* hints,
                       int nranks, bool p2p_links = true);
/// Send/recv's peer: another rank, with point-to-point links connected.
std::string check_peer(int peer, int rank, int nranks, bool p2p_links);
/// What only the two arrays of CallArgs tell: same type, counts that fit the
/// collective, no partial overlap (root-only buffers: on the root only).
std::string check_arrays(const CallArgs& a, int rank, int nranks);

/// The collective a call's arguments describe, and (type) the type of the
/// buffer it moves: the builders of core/collective.hpp by kind, nothing
/// checked (send / recv: check_peer first). Throws InvalidArgument for an
/// unknown kind.
Collective desc_of(const CallArgs& a, int rank, int nranks, DataType* type = nullptr);

/// Communicator::check_call: every check above, raised as InvalidArgument
/// "<call>: <what>" without communicating.
void check_call(const CallArgs& a, const PolicyHints* hints, int rank, int nranks, bool p2p_links);

}  // namespace ncclz::core
