"""Sharded optimizer state (ZeRO-1/2 style) with compressed gradient reduce-scatter.

    ncclz-run -n 4 python examples/sharded_train.py
    ncclz-run -n 4 python examples/sharded_train.py --compression none

No DDP: every rank runs the whole model on its own batch; ShardedOptimizer
reduce-scatters the gradients (averaged, compressed), steps only this rank's
quarter of the parameters with Adam (so Adam's moments exist once across the
job), and all-gathers the updated parameters.
"""

import argparse

import ncclz
import ncclz.torch
import torch

SPECS = {
    "none": None,
    "lossless": ncclz.Lossless(),
    "rel1e-3": ncclz.Lossy(rel=1e-3),
    "rel1e-2": ncclz.Lossy(rel=1e-2),
}


def print_policy(comm):
    """What the compression policy (rank 0's, which decides for all) ran, per kind of call, and why."""
    pol = comm.policy
    gbps, source = pol.link_used()  # source: configured, observed, memory (one host over shared memory)
    link = f"{gbps:.3g} Gbit/s ({source})" if gbps else "unknown (no NCCLZ_LINK_GBPS and no uncompressed call "
    link += "" if gbps else ">= 1 MiB to measure it), so every call ran as requested"
    print(f"compression policy: link rate {link}")
    for m in pol.measurements():
        print(f"  {m.collective} {m.dtype} ~{m.class_bytes} B: {m.calls} calls ran {m.mode}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compression", choices=SPECS, default="rel1e-3")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()

    torch.set_num_threads(1)
    comm = ncclz.init()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NCCLZ_TOKEN from ncclz-run
    rank = comm.rank

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = ncclz.torch.ShardedOptimizer(
        model.parameters(),
        torch.optim.Adam,
        comm,
        compression=SPECS[args.compression],  # gradient reduce-scatter of the large 2-D weights
        param_compression=None,  # parameters all-gathered exactly
        lr=1e-3,
    )
    if rank == 0:
        print(opt)

    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(42))
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(32, 64, generator=gen)
        y = (x @ teacher).argmax(1)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            s = opt.last_step
            print(
                f"step {step:4d} loss {loss.item():.4f}  wire {s['wire_bytes']} B of {s['raw_bytes']} B "
                f"(ratio {s['ratio']:.2f})"
            )
    if rank == 0:
        print_policy(comm)
    comm.close()


if __name__ == "__main__":
    main()
