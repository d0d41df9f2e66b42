"""A plain FSDP2 (``fully_shard``) script: only the backend name says ncclz.

    ncclz-run -n 4 python examples/fsdp2_backend.py                    # ncclz, lossless (the default)
    ncclz-run -n 4 python examples/fsdp2_backend.py --backend gloo      # the same script on gloo
    NCCLZ_TORCH_COMPRESSION=rel=1e-3 ncclz-run -n 4 python examples/fsdp2_backend.py

FSDP2 all-gathers each layer's parameters before use and reduce-scatters its
gradients (ReduceOp.AVG) after backward; on the "ncclz" backend both run on
ncclz. With a lossy NCCLZ_TORCH_COMPRESSION only the gradient reduce-scatters
are lossy (parameters are gathered exactly; see ncclz.torch.Options).
The default compression policy runs calls under 256 KiB uncompressed (they are
latency-bound; this toy model's are that small); NCCLZ_POLICY=off runs the
requested mode whatever the size.

``--out FILE``: rank 0 saves the final full parameters and the first step's
averaged gradients (what tests compare between backends).
"""

from __future__ import annotations

import argparse
import os

import ncclz.torch  # registers the "ncclz" backend
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    y = (x[:, :10] * 3 + 0.1 * torch.randn(32, 10, generator=g)).argmax(1)
    return x, y


def train(backend: str, steps: int, init_method: str | None = None, verbose: bool = True) -> dict:
    """Trains on this rank; returns rank 0's final parameters and the first step's gradients."""
    dist.init_process_group(backend, init_method=init_method)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))

    torch.manual_seed(0)  # FSDP2 shards the model as given: same initial model on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    first_grads, first_bound = None, 0.0
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if first_grads is None:  # the averaged gradients, gathered from the shards (DTensors)
            first_grads = [p.grad.full_tensor().clone() for p in model.parameters()]
            if dist.get_backend() == "ncclz":  # optional: what ncclz promised for this step's gradients
                first_bound = ncclz.torch.traffic().max_error_bound
        opt.step()
        if verbose and rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"step {step:3d} loss {loss.item():.4f}", flush=True)

    full = [p.full_tensor().detach().clone() for p in model.parameters()]  # DTensor -> whole tensor
    result = {"params": full, "grads": first_grads, "bound": first_bound, "loss": loss.item()}
    if dist.get_backend() == "ncclz" and verbose and rank == 0:
        print(ncclz.torch.traffic(), flush=True)  # calls, raw and wire bytes of this rank
    # Every call of this rank has completed everywhere before the group goes. The barrier's work is
    # kept until the group is gone: PyTorch's gloo can deadlock when a group is destroyed (with the
    # GIL held) while its worker thread drops the last reference to a finished work.
    done = dist.barrier(async_op=True)
    done.wait()
    dist.destroy_process_group()
    del done
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="ncclz")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="", help="rank 0 saves the final parameters and first gradients here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = train(args.backend, args.steps)
    if args.out and int(os.environ.get("RANK", "0")) == 0:
        torch.save(result, args.out)


if __name__ == "__main__":
    main()
