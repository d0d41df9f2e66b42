"""Sharded optimizer state (ZeRO stage 1/2 style) over ncclz collectives.

Every rank holds the whole model, but only 1/world of the optimizer state::

    opt = ncclz.torch.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm,
                                       compression=ncclz.Lossy(rel=1e-3), lr=1e-3)
    loss.backward()          # plain model (no DDP): local gradients
    opt.step()               # reduce-scatter (avg) -> step the shard -> all-gather
    opt.zero_grad()

One ``step()``:

1. The parameters are split into a *lossy* group (tensors with >=
   ``min_elements`` elements and >= 2 dimensions) and an *exact* group (the
   rest), the rule of the DDP hook (:mod:`ncclz.torch._layout`). Each group is
   flattened in parameter order and zero-padded to a multiple of the world size
   ``W``; rank r owns elements ``[r*S, (r+1)*S)``, ``S = padded / W``.
2. The gradients of each group are averaged with ``reduce_scatter(op="avg")``
   (the lossy group with ``compression``, the exact group with
   ``exact_compression``): rank r receives only its shard of the average.
3. The wrapped optimizer (built on this rank with the shards as its only
   parameters) steps them: its state (Adam moments, momentum) exists once, spread
   over the ranks. The shards are fp32/fp64 master copies kept on their owner.
4. ``all_gather`` (with ``param_compression``, default exact) brings every
   shard to every rank, which copies the result into the model parameters.
   All ranks then hold identical parameters (lossy gathers included: every
   rank, the owner too, takes the gathered values).

Bounds: with ``compression=Lossy(abs=E)`` every element of the averaged
gradient shard is within E of the exact average (rel: E = r * (max - min) of
the lossy gradients over all ranks); for SGD without momentum a parameter
then differs from the exact step by at most ``lr * E``.

Limits: one param group (the wrapped optimizer's hyper-parameters apply to
all shards), all parameters on one device (the CPU or one CUDA device) and of
one floating dtype. The parameters must start equal on all ranks
(``broadcast_initial=True``, the default, copies rank 0's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable

import torch

from ..errors import InvalidArgumentError
from ..spec import Lossless
from . import _layout

__all__ = ["ShardedOptimizer"]

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class _Group:
    """One flat, padded, sharded group of parameters."""

    def __init__(self, params: list, world: int, rank: int, lossy: bool, master_dtype: torch.dtype):
        self.params = params
        self.lossy = lossy
        self.total = sum(int(p.numel()) for p in params)
        self.shard = -(-self.total // world) if self.total else 0
        self.padded = self.shard * world
        self.start = rank * self.shard
        self.dtype = params[0].dtype
        self.device = params[0].device  # CUDA parameters: shards, masters and optimizer state stay there
        flat = self.flatten([p.detach() for p in params])
        self.master = torch.nn.Parameter(
            flat[self.start : self.start + self.shard].to(master_dtype).clone(), requires_grad=True
        )

    def flatten(self, tensors: list) -> torch.Tensor:
        out = torch.zeros(self.padded, dtype=self.dtype, device=self.device)
        pos = 0
        for p, t in zip(self.params, tensors):
            n = int(p.numel())
            if t is not None:
                out[pos : pos + n].copy_(t.reshape(-1))
            pos += n
        return out

    def unflatten_into(self, flat: torch.Tensor) -> None:
        pos = 0
        with torch.no_grad():
            for p in self.params:
                n = int(p.numel())
                p.copy_(flat[pos : pos + n].view_as(p))
                pos += n


class ShardedOptimizer:
    """Wraps ``optimizer_class`` so each rank keeps and steps 1/world of the optimizer state.

    params: the model's parameters (same order on every rank).
    optimizer_class: e.g. ``torch.optim.Adam``; built here on this rank's shards
        with ``**optimizer_kwargs``.
    comm: an ``ncclz.Communicator`` over the training ranks.
    compression: spec for the gradient reduce-scatter of the large >= 2-D
        tensors (``None``, ``Lossless()``, ``Lossy(abs=|rel=)``).
    exact_compression: spec for the small and 1-D tensors (``None`` or ``Lossless()``).
    param_compression: spec for the parameter all-gather (default ``None``:
        parameters travel exactly; a lossy spec bounds each parameter's error by E).
    min_elements, compress_1d: the split rule (as in :class:`HookState`).
    master_dtype: dtype of the owned shards and the optimizer state (default:
        float32 for 16-bit parameters, else the parameters' dtype).
    broadcast_initial: copy rank 0's parameters to all ranks first (default True).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        optimizer_class: Callable[..., torch.optim.Optimizer],
        comm: Any,
        compression: Any = None,
        *,
        exact_compression: Any = None,
        param_compression: Any = None,
        min_elements: int = _layout.DEFAULT_MIN_ELEMENTS,
        compress_1d: bool = False,
        master_dtype: torch.dtype | None = None,
        broadcast_initial: bool = True,
        **optimizer_kwargs: Any,
    ):
        if not (callable(getattr(comm, "reduce_scatter", None)) and hasattr(comm, "world_size")):
            raise InvalidArgumentError(
                f"ShardedOptimizer needs an ncclz.Communicator as comm, got {type(comm).__name__}"
            )
        if not callable(optimizer_class):
            raise InvalidArgumentError(
                f"optimizer_class must be an optimizer class such as torch.optim.SGD, got {optimizer_class!r}"
            )
        if isinstance(params, torch.Tensor):
            raise InvalidArgumentError(
                "params must be an iterable of parameters (model.parameters()), not a single tensor"
            )
        params = list(params)
        if params and isinstance(params[0], dict):
            raise InvalidArgumentError(
                "ShardedOptimizer takes one parameter group: pass model.parameters(), not a list of group dicts"
            )
        params = [p for p in params if p.requires_grad]
        if not params:
            raise InvalidArgumentError("ShardedOptimizer got no parameters that require grad")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise InvalidArgumentError(
                f"ShardedOptimizer needs all parameters of one dtype, got {sorted(str(d) for d in dtypes)}"
            )
        dtype = params[0].dtype
        if dtype not in _FLOAT_DTYPES:
            raise InvalidArgumentError(f"ShardedOptimizer needs floating-point parameters, got {dtype}")
        devices = {p.device for p in params}
        if len(devices) != 1 or next(iter(devices)).type not in ("cpu", "cuda"):
            raise InvalidArgumentError(
                "ShardedOptimizer needs all parameters on one device, the CPU or one CUDA device; got "
                f"{', '.join(sorted(str(d) for d in devices))}"
            )
        self.comm = comm
        self.compression = _layout.check_spec(compression, "ShardedOptimizer compression")
        self.exact_compression = _layout.check_spec(exact_compression, "ShardedOptimizer exact_compression")
        if _layout.is_lossy(self.exact_compression):
            raise InvalidArgumentError(
                "ShardedOptimizer exact_compression must be None or ncclz.Lossless(); put the lossy spec in compression="
            )
        self.param_compression = _layout.check_spec(param_compression, "ShardedOptimizer param_compression")
        self.min_elements = _layout.check_min_elements(min_elements)
        self.compress_1d = bool(compress_1d)
        if master_dtype is None:
            master_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        self.master_dtype = master_dtype
        world, rank = int(comm.world_size), int(comm.rank)
        self.world_size, self.rank = world, rank

        if broadcast_initial:
            with torch.no_grad():
                flat = torch.cat([p.detach().reshape(-1) for p in params])
                comm.broadcast(flat, root=0)
                pos = 0
                for p in params:
                    n = p.numel()
                    p.copy_(flat[pos : pos + n].view_as(p))
                    pos += n

        lossy_params = [
            p
            for p in params
            if _layout.compressible(tuple(p.shape), p.numel(), self.min_elements, self.compress_1d)
        ]
        lossy_ids = {id(p) for p in lossy_params}
        exact_params = [p for p in params if id(p) not in lossy_ids]
        self.params = params
        self.groups = [
            _Group(ps, world, rank, lossy, master_dtype)
            for ps, lossy in ((lossy_params, True), (exact_params, False))
            if ps
        ]
        self.optimizer = optimizer_class([g.master for g in self.groups], **optimizer_kwargs)
        self.last_step: dict = {}
        self.steps = 0

    # torch.optim.Optimizer look-alikes ------------------------------------------------
    @property
    def param_groups(self) -> list:
        """The wrapped optimizer's groups (for learning-rate schedules)."""
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (save one file per rank)."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "optimizer": self.optimizer.state_dict(),
            "masters": [g.master.detach().clone() for g in self.groups],
        }

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("world_size") != self.world_size or sd.get("rank") != self.rank:
            raise InvalidArgumentError(
                f"ShardedOptimizer.load_state_dict: the state is rank {sd.get('rank')} of {sd.get('world_size')}, "
                f"this is rank {self.rank} of {self.world_size}"
            )
        self.optimizer.load_state_dict(sd["optimizer"])
        with torch.no_grad():
            for g, m in zip(self.groups, sd["masters"]):
                g.master.copy_(m)
        self._gather_params()

    def _spec(self, group: _Group, enabled: bool) -> Any:
        if not enabled:
            return None
        if group.lossy:
            return self.compression
        exact = self.exact_compression
        if isinstance(self.compression, Lossless) and exact is None:
            exact = self.compression
        return exact

    def _gather_params(self) -> None:
        for g in self.groups:
            spec = self.param_compression
            if _layout.is_lossy(spec) and not g.lossy:
                spec = None  # small and 1-D parameters stay exact
            shard = g.master.detach().to(g.dtype)
            gathered = self.comm.all_gather(shard, compression=spec)
            self._count("param")
            g.unflatten_into(gathered.reshape(-1))

    def _count(self, kind: str) -> None:
        st = self.comm.last_stats
        if st is None:
            return
        s = self.last_step
        s["calls"] = s.get("calls", 0) + 1
        s["raw_bytes"] = s.get("raw_bytes", 0) + st.raw_bytes
        s["wire_bytes"] = s.get("wire_bytes", 0) + st.wire_bytes
        s[f"{kind}_raw_bytes"] = s.get(f"{kind}_raw_bytes", 0) + st.raw_bytes
        s[f"{kind}_wire_bytes"] = s.get(f"{kind}_wire_bytes", 0) + st.wire_bytes
        s["max_error_bound"] = max(s.get("max_error_bound", 0.0), st.error_bound)

    def step(self, closure: Callable[[], Any] | None = None, compress: bool = True) -> Any:
        """Reduce-scatters the gradients, steps this rank's shards, all-gathers the parameters.

        ``self.last_step`` then holds this rank's traffic: ``calls``, ``raw_bytes``,
        ``wire_bytes``, ``ratio``, ``max_error_bound``, and the same bytes split into
        ``grad_*`` (reduce-scatter) and ``param_*`` (all-gather).

        ``compress=False`` runs this step exactly (a per-call opt-out).
        Parameters without a gradient count as zero gradients (all ranks must agree).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.last_step = {}
        for g in self.groups:
            grads = [p.grad for p in g.params]
            flat = g.flatten(grads)
            spec = self._spec(g, compress)
            shard = self.comm.reduce_scatter(flat, op="avg", compression=spec)
            self._count("grad")
            g.master.grad = shard.to(self.master_dtype)
        self.optimizer.step()
        if self.param_compression is not None and not compress:
            saved, self.param_compression = self.param_compression, None
            try:
                self._gather_params()
            finally:
                self.param_compression = saved
        else:
            self._gather_params()
        self.steps += 1
        raw, wire = self.last_step.get("raw_bytes", 0), self.last_step.get("wire_bytes", 0)
        self.last_step["ratio"] = raw / wire if wire else 1.0
        return loss

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{'lossy' if g.lossy else 'exact'} {g.total} -> shard {g.shard}" for g in self.groups
        )
        return (
            f"<ncclz.torch.ShardedOptimizer rank {self.rank}/{self.world_size} "
            f"{type(self.optimizer).__name__} compression={self.compression!r} ({sizes})>"
        )
