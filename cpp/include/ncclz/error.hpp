// Exceptions thrown by the C++ API. Messages say what failed and what to do.
// The Python bindings translate each to a typed Python exception
// (ncclz.Error, ncclz.InvalidArgumentError, ncclz.CorruptDataError, ...).
#pragma once

#include <stdexcept>
#include <string>

namespace ncclz {

/// Base of every ncclz error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad argument from the caller: dtype, shape, bound, option, ...
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Compressed data that does not decode: truncated, corrupt, wrong version.
class CorruptData : public Error {
 public:
  using Error::Error;
};

/// A peer misbehaved or vanished: timeout, closed connection, mismatched call.
class RemoteError : public Error {
 public:
  using Error::Error;
};

/// A wait ran past its deadline.
class Timeout : public RemoteError {
 public:
  using RemoteError::RemoteError;
};

/// The communicator was aborted (locally or by a peer). A peer's abort names
/// the rank that aborted and why ("rank 2 aborted the communicator: ...").
class Aborted : public RemoteError {
 public:
  using RemoteError::RemoteError;
};

/// A blocked call was interrupted by the calling thread's interrupt check
/// (ncclz::set_interrupt_check; the Python bindings: a signal handler raised,
/// e.g. KeyboardInterrupt on Ctrl-C). The communicator is aborted, so its
/// peers fail with Aborted naming this rank.
class Interrupted : public Error {
 public:
  using Error::Error;
};

/// A system call failed (socket, shared memory, ...).
class SystemError : public Error {
 public:
  using Error::Error;
};

}  // namespace ncclz
