"""A plain DistributedDataParallel script: only the backend name says ncclz.

    ncclz-run -n 4 python examples/ddp_backend.py                      # ncclz, lossless (the default)
    ncclz-run -n 4 python examples/ddp_backend.py --backend gloo        # the same script on gloo
    NCCLZ_TORCH_COMPRESSION=rel=1e-3 ncclz-run -n 4 python examples/ddp_backend.py
    torchrun --nproc_per_node 4 examples/ddp_backend.py

``import ncclz.torch`` registers the backend; ``init_process_group("ncclz")``
does the rest: DDP's parameter broadcast, its bookkeeping and the gradient
all-reduces run on ncclz. The compression comes from ``pg_options``
(``ncclz.torch.Options``) or, as here, from NCCLZ_TORCH_COMPRESSION (none,
lossless, rel=R, abs=E), so the script does not change between modes.
The default compression policy runs calls under 256 KiB uncompressed (they are
latency-bound; this toy model's buckets are that small); NCCLZ_POLICY=off runs
the requested mode whatever the size.

``--out FILE``: rank 0 saves the final parameters and the first step's
averaged gradients (what tests compare between backends).
"""

from __future__ import annotations

import argparse
import gc
import os

import ncclz.torch  # registers the "ncclz" backend
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    y = (x[:, :10] * 3 + 0.1 * torch.randn(32, 10, generator=g)).argmax(1)
    return x, y


def train(backend: str, steps: int, init_method: str | None = None, verbose: bool = True) -> dict:
    """Trains on this rank; returns rank 0's final parameters and the first step's gradients."""
    dist.init_process_group(backend, init_method=init_method)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, ...
    rank = dist.get_rank()

    torch.manual_seed(rank)  # different on every rank: DDP broadcasts rank 0's parameters
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = DDP(model, bucket_cap_mb=0.1)  # several buckets, so communication overlaps backward
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    first_grads, first_bound = None, 0.0
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        if first_grads is None:
            first_grads = [p.grad.clone() for p in model.parameters()]
            if dist.get_backend() == "ncclz":  # optional: what ncclz promised for this step's gradients
                first_bound = ncclz.torch.traffic().max_error_bound
        opt.step()
        if verbose and rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"step {step:3d} loss {loss.item():.4f}", flush=True)

    result = {
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": first_grads,
        "bound": first_bound,
        "loss": loss.item(),
    }
    if dist.get_backend() == "ncclz" and verbose and rank == 0:
        print(ncclz.torch.traffic(), flush=True)  # calls, raw and wire bytes of this rank
    # Every call of this rank has completed everywhere before the group goes. The barrier's work is
    # kept until the group is gone: PyTorch's gloo can deadlock when a group is destroyed (with the
    # GIL held) while its worker thread drops the last reference to a finished work.
    done = dist.barrier(async_op=True)
    done.wait()
    del ddp, opt  # DDP's reducer holds the group: let it go first, so the group ends right here
    gc.collect()
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
