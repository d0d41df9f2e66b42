"""Training evidence for the torch.distributed backend "ncclz": DDP and FSDP2, gloo vs ncclz.

The model, data and schedule of train_digits.py (small CNN, scikit-learn's digits,
global batch 128, Adam 2e-3 with cosine decay), trained with plain DDP or plain
FSDP2 (``fully_shard`` per conv/linear layer), once per configuration, where
only the backend and its ``pg_options`` change::

    nice -n 10 ncclz-run -n 4 python bench/train/train_backend.py --seeds 0,1,2 --out bench/train/runs_backend
    NCCLZ_TRANSPORT=socket NCCLZ_SOCKET_THROTTLE_GBPS=1 ncclz-run -n 4 python bench/train/train_backend.py \\
        --timing --out bench/train/runs_backend
    python bench/train/report_backend.py

Configurations ``{ddp,fsdp2}:{gloo,none,lossless,rel1e-3,rel1e-2}``: gloo is
``init_process_group("gloo")``; the others ``init_process_group("ncclz",
pg_options=ncclz.torch.Options(compression=..., min_elements=1024,
policy="off"))`` (the requested mode always runs; tensors under 1024 elements
exact, as in train_digits.py's hook runs). On the backend the compression
applies per collective call: a DDP bucket (here the whole model, one bucket) is
compressed as one tensor, biases included; FSDP2 reduce-scatters each layer's
flat gradient (conv2 and fc1 lossy, the small conv1 and fc2 exact) and
all-gathers parameters exactly.

Rank 0 writes one JSON per configuration and seed: per-epoch train loss (mean
over ranks), test loss and accuracy, ncclz wire and raw bytes per step (this
rank's sends, from ``ncclz.torch.traffic()``). ``--timing`` instead times
``--timing-steps`` steps per configuration after 5 warm-up steps (median of
the per-step wall times, max over ranks) and writes ``timing_<link>_hidden<H>.json``
(``--hidden H`` widens the fc layer so that gradients outweigh compute);
run it with the socket transport throttled to emulate a slow link (gloo's own
TCP is not throttled: its row is for reference only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

import ncclz
import ncclz.torch as nt
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import evaluate, load_data, make_model


def make_wide_model(seed: int, hidden: int) -> torch.nn.Module:
    """train_digits' CNN with a ``hidden``-wide fully connected layer (for --timing: more traffic)."""
    if hidden == 64:
        return make_model(seed)
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


SPECS = {
    "none": None,
    "lossless": ncclz.Lossless(),
    "rel1e-3": ncclz.Lossy(rel=1e-3),
    "rel1e-2": ncclz.Lossy(rel=1e-2),
}
_HELD: list = []  # see the end of run_config
ALL_CONFIGS = [f"{m}:{c}" for m in ("ddp", "fsdp2") for c in ("gloo", *SPECS)]


def _init(cname: str, init_file: str, rank: int, world: int) -> None:
    url = f"file://{init_file}"
    if cname == "gloo":
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world)
    else:
        opts = nt.Options(compression=SPECS[cname], min_elements=1024, policy="off")
        dist.init_process_group("ncclz", init_method=url, rank=rank, world_size=world, pg_options=opts)


def _wrap(mode: str, model: torch.nn.Module, world: int):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full_params(mode: str, model: torch.nn.Module) -> torch.Tensor:
    ps = [p.full_tensor() if mode == "fsdp2" else p for p in model.parameters()]
    return torch.cat([p.detach().reshape(-1) for p in ps])


def run_config(config, init_file, rank, world, train, test, args, seed, timing=False) -> dict:
    mode, cname = config.split(":")
    _init(cname, init_file, rank, world)
    model = make_wide_model(seed, args.hidden)
    net = _wrap(mode, model, world)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    xtr, ytr = train
    per_rank = args.global_batch // world
    steps_per_epoch = len(xtr) // args.global_batch
    epochs = 1 if timing else args.epochs
    total_steps = epochs * steps_per_epoch
    ncclz_pg = cname != "gloo"
    if ncclz_pg:
        dist.distributed_c10d._get_default_group().reset_traffic()
    hist = {"epoch": [], "train_loss": [], "test_loss": [], "test_acc": []}
    step_times = []
    step = 0
    t0 = time.perf_counter()
    for epoch in range(epochs):
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(1000 * seed + epoch))
        loss_sum = torch.zeros(1, dtype=torch.float64)
        nsteps = (args.timing_steps + 5) if timing else steps_per_epoch
        for s in range(nsteps):
            b = s % steps_per_epoch
            idx = perm[
                b * args.global_batch + rank * per_rank : b * args.global_batch + (rank + 1) * per_rank
            ]
            for g in opt.param_groups:  # cosine decay to 0
                g["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            ts = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            step_times.append(time.perf_counter() - ts)
            step += 1
            loss_sum += float(loss.detach())
        if timing:
            break
        dist.all_reduce(loss_sum)  # float64 sum: exact on every backend (bookkeeping)
        tl, ta = evaluate(model, test)
        hist["epoch"].append(epoch + 1)
        hist["train_loss"].append(float(loss_sum) / world / steps_per_epoch)
        hist["test_loss"].append(tl)
        hist["test_acc"].append(ta)
    elapsed = time.perf_counter() - t0
    traffic = nt.traffic() if ncclz_pg else None
    flat = _full_params(mode, model)
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    max_rank_diff = max(float((g - gathered[0]).abs().max()) for g in gathered)
    times = torch.tensor([statistics.median(step_times[5:]) if timing else 0.0])
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    # gloo's worker threads may still drop the last works' tensors; freeing a tensor that has a Python
    # object needs the GIL, which the main thread holds while it destroys gloo's group (joining those
    # threads): torch 2.13 deadlocks there (seen once in 20 runs). Keeping the tensors alive avoids it.
    _HELD.append((times, gathered, flat, loss_sum))
    dist.barrier()
    dist.destroy_process_group()
    res = {
        "config": config,
        "seed": seed,
        "mode": mode,
        "compression": cname,
        "world_size": world,
        "steps": step,
        "epochs": epochs,
        "global_batch": args.global_batch,
        "lr": args.lr,
        "seconds": elapsed,
        "max_param_diff_across_ranks": max_rank_diff,
    }
    if ncclz_pg:
        res.update(
            wire_bytes_per_step=traffic.wire_bytes / max(step, 1),
            raw_bytes_per_step=traffic.raw_bytes / max(step, 1),
            max_error_bound=traffic.max_error_bound,
        )
    if timing:
        res.update(
            step_time_s=float(times[0]),
            timed_steps=len(step_times) - 5,
            hidden=args.hidden,
            parameters=sum(p.numel() for p in make_wide_model(seed, args.hidden).parameters()),
        )
    else:
        res.update(
            final_train_loss=hist["train_loss"][-1],
            final_test_loss=hist["test_loss"][-1],
            final_test_acc=hist["test_acc"][-1],
            history=hist,
        )
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS), help="comma list of mode:compression")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seeds", default="0", help="comma list of seeds (model init and data order)")
    ap.add_argument("--timing", action="store_true", help="time steps instead of training to the end")
    ap.add_argument("--timing-steps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=64, help="width of the fc layer (64: train_digits' model)")
    ap.add_argument("--out", default="bench/train/runs_backend")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} is not divisible by {world} ranks")
    train, test = load_data()
    os.makedirs(args.out, exist_ok=True)
    tag = os.environ.get("MASTER_PORT", "0")
    link = os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS", "") or "unthrottled"
    jobs = [(c, int(s)) for s in args.seeds.split(",") for c in args.configs.split(",")]
    timings = []
    for i, (config, seed) in enumerate(jobs):
        init_file = f"/tmp/ncclz_train_backend_{tag}_{i}"
        res = run_config(config, init_file, rank, world, train, test, args, seed, timing=args.timing)
        if rank != 0:
            continue
        try:
            os.remove(init_file)
        except OSError:
            pass
        wire = res.get("wire_bytes_per_step")
        wire_s = f"wire/step {wire / 1e3:7.1f} kB" if wire is not None else "wire/step      n/a"
        if args.timing:
            res["link_gbps"] = link
            timings.append(res)
            print(f"{config:16s} step {res['step_time_s'] * 1e3:8.1f} ms  {wire_s}  link {link}", flush=True)
            continue
        path = os.path.join(args.out, f"{config.replace(':', '_')}_seed{seed}.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
        print(
            f"{config:16s} seed {seed} acc {res['final_test_acc'] * 100:6.2f}%  loss {res['final_test_loss']:.4f}  "
            f"{wire_s}  {res['seconds']:6.1f} s  rank diff {res['max_param_diff_across_ranks']:.1e}",
            flush=True,
        )
    if args.timing and rank == 0:
        with open(os.path.join(args.out, f"timing_{link}_hidden{args.hidden}.json"), "w") as f:
            json.dump(timings, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
