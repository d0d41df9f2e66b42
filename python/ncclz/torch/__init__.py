"""PyTorch integration: the ``torch.distributed`` backend "ncclz", a DDP communication hook and a
sharded optimizer over ncclz.

Importing this module registers the backend, so DDP, FSDP2, DTensor and functional collectives run
on ncclz with no other change::

    import torch.distributed as dist, ncclz, ncclz.torch
    dist.init_process_group("ncclz")                       # or pg_options=ncclz.torch.Options(...)

For explicit control over the gradient traffic of a gloo job:

::

    import torch, torch.distributed as dist, ncclz, ncclz.torch

    dist.init_process_group("gloo")                        # DDP's group (ranks, buffers)
    comm = ncclz.torch.communicator()                      # ncclz over the same ranks
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = ncclz.torch.HookState(comm, compression=ncclz.Lossy(rel=1e-3))
    ddp.register_comm_hook(state, ncclz.torch.ddp_hook)    # gradients now go through ncclz

    # or, without DDP, optimizer state sharded over the ranks:
    opt = ncclz.torch.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm,
                                       compression=ncclz.Lossy(rel=1e-3), lr=1e-3)

See docs/PYTORCH.md. Importing this module imports torch; ``import ncclz``
alone does not.
"""

from __future__ import annotations

from typing import Any

try:
    import torch as _torch  # noqa: F401 - fail early with a clear message
except ImportError as _e:  # pragma: no cover - exercised only without torch
    raise ImportError("ncclz.torch needs PyTorch: pip install torch") from _e

from ..errors import InvalidArgumentError
from ._layout import DEFAULT_MIN_ELEMENTS
from .backend import BACKEND, ProcessGroupNCCLZ, Traffic, register
from .ddp_hook import HookState, StepStats, ddp_hook
from .options import Options
from .sharded import ShardedOptimizer

__all__ = [
    "BACKEND",
    "DEFAULT_MIN_ELEMENTS",
    "HookState",
    "Options",
    "ProcessGroupNCCLZ",
    "ShardedOptimizer",
    "StepStats",
    "Traffic",
    "communicator",
    "ddp_hook",
    "register",
    "traffic",
]

register()


def traffic(group: Any = None) -> Traffic:
    """Counters of an ncclz group on this rank (default: the default group): calls, raw and wire
    bytes, compressed calls, largest error bound. ``group.reset_traffic()`` zeroes them."""
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupNCCLZ):
        raise InvalidArgumentError(
            f"ncclz.torch.traffic(): the group is not on the ncclz backend ({type(pg).__name__}); "
            "create it with dist.init_process_group('ncclz') or dist.new_group(backend='ncclz')"
        )
    return pg.traffic()


def communicator(process_group: Any = None, *, prefix: str = "ncclz", **kwargs: Any) -> Any:
    """An ``ncclz.Communicator`` over the ranks of an initialized ``torch.distributed`` group.

    The rendezvous goes through the default group's Store (under a
    ``PrefixStore(prefix)``), so no extra port or environment is needed. Only
    the default (whole-world) group is supported: pass ``None`` or
    ``dist.group.WORLD``. ``kwargs`` go to ``ncclz.Communicator`` (timeout,
    transport, ...). Every rank must call this, in the same order as any other
    communicator creation through that store.
    """
    import torch.distributed as dist

    from ..comm import Communicator

    if not (dist.is_available() and dist.is_initialized()):
        raise InvalidArgumentError(
            "ncclz.torch.communicator() needs torch.distributed initialized "
            "(dist.init_process_group('gloo', ...)); or build ncclz.Communicator / ncclz.init() directly"
        )
    if (
        process_group is not None
        and process_group is not dist.group.WORLD
        and dist.get_world_size(process_group) != dist.get_world_size()
    ):
        raise InvalidArgumentError(
            "ncclz.torch.communicator() supports only the default (whole-world) process group; "
            "for sub-groups create ncclz.Communicator(rank=, world_size=, store=) yourself"
        )
    from torch.distributed.distributed_c10d import _get_default_store

    store = dist.PrefixStore(prefix, _get_default_store())
    return Communicator(rank=dist.get_rank(), world_size=dist.get_world_size(), store=store, **kwargs)
