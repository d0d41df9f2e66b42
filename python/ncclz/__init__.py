"""ncclz: compression-enabled collective communication for GPUs and CPUs."""

from . import _core, codec, comm, errors
from ._async import Work
from .comm import CallStats, Communicator, Topology, init
from .errors import (
    AbortedError,
    CorruptDataError,
    Error,
    InvalidArgumentError,
    RemoteError,
    SystemError,
    TimeoutError,
)
from .spec import Lossless, Lossy

__version__ = "0.1.0"

__all__ = [
    "AbortedError",
    "CallStats",
    "Communicator",
    "CorruptDataError",
    "Error",
    "InvalidArgumentError",
    "Lossless",
    "Lossy",
    "RemoteError",
    "SystemError",
    "TimeoutError",
    "Topology",
    "Work",
    "built_with_cuda",
    "codec",
    "comm",
    "cuda_device_count",
    "errors",
    "init",
]


def built_with_cuda() -> bool:
    """True when the installed package contains the CUDA code."""
    return bool(_core.built_with_cuda())


def cuda_device_count() -> int:
    """Number of visible CUDA devices (0 on a machine without GPU or driver)."""
    return int(_core.cuda_device_count())
