"""Training evidence: a small CNN on scikit-learn's digits, on N CPU ranks, with and without ncclz compression.

Run every configuration in one launch (starting torch costs seconds per process)::

    nice -n 10 ncclz-run -n 4 python bench/train/train_digits.py --out bench/train/runs

or one::

    ncclz-run -n 4 python bench/train/train_digits.py --configs ddp:rel1e-3

Each rank joins a gloo process group (env://, the variables ncclz-run or torchrun
set) for DDP's own bookkeeping and makes its ncclz communicator through the
same store (``ncclz.torch.communicator()``). Configurations are
``{ddp,sharded}:{none,lossless,rel1e-3,rel1e-2}`` and ``ddp:rel1e-2+ef`` (error feedback):

- ddp: ``DistributedDataParallel`` + ``ncclz.torch.ddp_hook`` (gradients all-reduced
  through ncclz with the given spec; biases and tensors under 1024 elements exact).
- sharded: plain model + ``ncclz.torch.ShardedOptimizer`` (gradients reduce-scattered
  with the spec, Adam state sharded, parameters all-gathered exactly).

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, 10 classes), pixels / 16,
a fixed stratified 75/25 split (``random_state=0``); each step takes a global batch
of 128 (32 per rank at 4 ranks) from a per-epoch permutation seeded by the epoch.
Model init seed ``--seeds`` (default 0), data order seeded by seed and epoch; Adam, lr 2e-3, cosine decay to 0. Rank 0 writes one JSON per
configuration to ``--out``: per-epoch train loss (mean over ranks), test loss and
accuracy, wire/raw bytes per step (this rank's sends, averaged over steps), time.
``bench/train/report.py`` turns them into bench/results/training.{md,png}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings

import ncclz
import ncclz.torch as nt
import numpy as np
import torch
import torch.distributed as dist

SPECS = {
    "none": None,
    "lossless": ncclz.Lossless(),
    "rel1e-3": ncclz.Lossy(rel=1e-3),
    "rel1e-2": ncclz.Lossy(rel=1e-2),
}
ALL_CONFIGS = [f"{m}:{c}" for m in ("ddp", "sharded") for c in SPECS] + ["ddp:rel1e-2+ef"]


def load_data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr)), (torch.from_numpy(xte), torch.from_numpy(yte))


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),  # 144 weights: small, exact
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),  # 4608: lossy
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 64),  # 32768: lossy
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),  # 640: small, exact
    )


def evaluate(model, data):
    model.eval()
    with torch.no_grad():
        x, y = data
        out = model(x)
        loss = float(torch.nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    model.train()
    return loss, acc


def run_config(
    config: str, comm, train, test, epochs: int, global_batch: int, lr: float, seed: int = 0
) -> dict:
    mode, cname = config.split(":")
    error_feedback = cname.endswith("+ef")  # ddp only: HookState(error_feedback=True)
    spec = SPECS[cname.removesuffix("+ef")]
    if error_feedback and mode != "ddp":
        raise ValueError("+ef (error feedback) is a DDP hook option")
    rank, world = comm.rank, comm.world_size
    per_rank = global_batch // world
    model = make_model(seed)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
        state = nt.HookState(comm, compression=spec, min_elements=1024, error_feedback=error_feedback)
        net.register_comm_hook(state, nt.ddp_hook)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
    elif mode == "sharded":
        net = model
        state = None
        opt = nt.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm, compression=spec, lr=lr)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    xtr, ytr = train
    steps_per_epoch = len(xtr) // global_batch
    total_steps = epochs * steps_per_epoch
    raw = wire = grad_raw = grad_wire = 0
    nsteps = 0
    hist = {"epoch": [], "train_loss": [], "test_loss": [], "test_acc": []}
    t0 = time.perf_counter()
    step = 0
    for epoch in range(epochs):
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(1000 * seed + epoch))
        loss_sum = torch.zeros(1, dtype=torch.float64)
        for s in range(steps_per_epoch):
            idx = perm[s * global_batch + rank * per_rank : s * global_batch + (rank + 1) * per_rank]
            for g in opt.param_groups:  # cosine decay to 0
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            if mode == "ddp":
                st = state.last_step
                raw, wire = raw + st.raw_bytes, wire + st.wire_bytes
                grad_raw, grad_wire = raw, wire
            else:
                ls = opt.last_step
                raw, wire = raw + ls["raw_bytes"], wire + ls["wire_bytes"]
                grad_raw, grad_wire = grad_raw + ls["grad_raw_bytes"], grad_wire + ls["grad_wire_bytes"]
            nsteps += 1
            step += 1
            loss_sum += float(loss.detach())
        comm.all_reduce(loss_sum, op="avg")  # exact; bookkeeping only
        tl, ta = evaluate(model, test)
        hist["epoch"].append(epoch + 1)
        hist["train_loss"].append(float(loss_sum) / steps_per_epoch)
        hist["test_loss"].append(tl)
        hist["test_acc"].append(ta)
    elapsed = time.perf_counter() - t0
    # every rank must hold the same model
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = comm.all_gather(flat)
    max_rank_diff = float((gathered - gathered[0]).abs().max())
    return {
        "config": config,
        "seed": seed,
        "mode": mode,
        "compression": cname,
        "spec": repr(spec),
        "world_size": world,
        "epochs": epochs,
        "steps": nsteps,
        "global_batch": global_batch,
        "lr": lr,
        "raw_bytes_per_step": raw / max(nsteps, 1),
        "wire_bytes_per_step": wire / max(nsteps, 1),
        "grad_raw_bytes_per_step": grad_raw / max(nsteps, 1),
        "grad_wire_bytes_per_step": grad_wire / max(nsteps, 1),
        "final_train_loss": hist["train_loss"][-1],
        "seconds": elapsed,
        "final_test_acc": hist["test_acc"][-1],
        "final_test_loss": hist["test_loss"][-1],
        "max_param_diff_across_ranks": max_rank_diff,
        "history": hist,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS), help="comma list of mode:compression")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seeds", default="0", help="comma list of seeds (model init and data order)")
    ap.add_argument("--out", default="bench/train/runs")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    # DDP's note that conv weight gradients use another stride than the bucket view (harmless here).
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    dist.init_process_group("gloo")  # env:// from ncclz-run / torchrun
    comm = nt.communicator()
    train, test = load_data()
    if comm.world_size > 1 and args.global_batch % comm.world_size:
        raise SystemExit(f"--global-batch {args.global_batch} is not divisible by {comm.world_size} ranks")
    os.makedirs(args.out, exist_ok=True)
    jobs = [(c, int(s)) for s in args.seeds.split(",") for c in args.configs.split(",")]
    for config, seed in jobs:
        res = run_config(config, comm, train, test, args.epochs, args.global_batch, args.lr, seed)
        if comm.rank == 0:
            path = os.path.join(args.out, f"{config.replace(':', '_')}_seed{seed}.json")
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
            print(
                f"{config:18s} seed {seed} acc {res['final_test_acc'] * 100:6.2f}%  loss {res['final_test_loss']:.4f}  "
                f"wire/step {res['wire_bytes_per_step'] / 1e3:8.1f} kB  raw/step {res['raw_bytes_per_step'] / 1e3:8.1f} kB  "
                f"{res['seconds']:6.1f} s  rank diff {res['max_param_diff_across_ranks']:.1e}",
                flush=True,
            )
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
