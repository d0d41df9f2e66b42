"""A call that one rank refuses before it is queued still takes part in the call, as refused.

A c10d op of the ncclz backend checks its arguments in the caller's thread (one tensor per process,
dtypes, sizes, the root's lists, split sizes) and only then queues the call on the worker that runs it.
Where only this rank refuses, the other ranks are already making the call. If this rank simply raised,
their call would meet this rank's *next* call: a mismatch error at best, and where the two look alike
(a loop's all_reduce of one size) another call's data, silently; every later call would stay out of
step. So an op that raises before it queued anything queues a refusal in its place, in order, on the
worker that would have run the call: the runtime's ``Communicator::refuse`` takes part in the call's
descriptor exchange marked invalid. The other ranks' call then raises ``RemoteError`` naming this rank
(their group fails, as for any ``RemoteError``); where every rank refused alike (the same bad dtype
everywhere) every rank raises its own error and the group goes on.

Nothing is queued where there is nobody to tell: a send or recv whose peer is not another rank of the
group, a recv from any source (its sender is unknown), a group already shut down or failed.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

_queued = threading.local()


def count_queued() -> None:
    """Called by the group each time this thread queues a job (the op then took part in its call)."""
    _queued.n = getattr(_queued, "n", 0) + 1


def _queued_so_far() -> int:
    return getattr(_queued, "n", 0)


def _opts_root(args: tuple, kwargs: dict, size: int) -> int:
    """The root of a rooted op's ``opts`` (c10d passes it last), where it names a rank; else 0 (the
    refusal's root only names the call in the others' error)."""
    opts = kwargs.get("opts", args[-1] if args else None)
    try:
        root = int(opts.rootRank)
    except (AttributeError, TypeError, ValueError):
        return 0
    return root if 0 <= root < size else 0


def _peer(args: tuple, kwargs: dict, rank: int, size: int, name: str) -> int | None:
    """The peer of a send (dst) or recv (src), where it is another rank of the group."""
    peer = kwargs.get(name, args[1] if len(args) > 1 else None)
    try:
        peer = int(peer)
    except (TypeError, ValueError):
        return None
    return peer if 0 <= peer < size and peer != rank else None


def joins(kind: str, shape: str = "collective") -> Any:
    """Decorates an op of the process group that makes the runtime call ``kind`` ("all_reduce", ...,
    "send", "recv"); ``shape``: "collective", "rooted" (the root from ``opts``) or "p2p" (the peer
    from the op's second argument). An error the op raises before it queued its job is raised after a
    refusal was queued in the job's place (the group's ``_join_refused``)."""

    def wrap(op: Any) -> Any:
        @functools.wraps(op)
        def refusable(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = _queued_so_far()
            try:
                return op(self, *args, **kwargs)
            except Exception as e:
                if _queued_so_far() == before:
                    if shape == "p2p":
                        peer = _peer(
                            args, kwargs, self._rank_, self._size_, "dst" if kind == "send" else "src"
                        )
                        if peer is not None:
                            self._join_refused(kind, peer, e)
                    else:
                        root = _opts_root(args, kwargs, self._size_) if shape == "rooted" else 0
                        self._join_refused(kind, root, e)
                raise

        return refusable

    return wrap
