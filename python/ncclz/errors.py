"""Exceptions raised by ncclz. Every one derives from :class:`ncclz.Error`."""

import builtins


class Error(RuntimeError):
    """Base class of every ncclz error."""


class InvalidArgumentError(Error, ValueError):
    """A bad argument: dtype, shape, device, bound, option."""


class CorruptDataError(Error, ValueError):
    """Compressed data that does not decode: truncated, corrupt or of another format version."""


class RemoteError(Error):
    """A peer misbehaved or vanished: closed connection, mismatched call, refused token."""


class TimeoutError(RemoteError, builtins.TimeoutError):
    """A wait for a peer ran past NCCLZ_TIMEOUT."""


class AbortedError(RemoteError):
    """The communicator was aborted, locally or by a peer."""


class SystemError(Error, OSError):
    """A system call failed (socket, shared memory, ...)."""
