"""DDP training with gradients averaged through ncclz (compressed), on CPU ranks.

    ncclz-run -n 4 python examples/ddp_train.py                 # or: torchrun --nproc_per_node 4 examples/ddp_train.py
    ncclz-run -n 4 python examples/ddp_train.py --compression none

DDP keeps its gloo process group (parameter broadcast at start, buffers);
ncclz.torch.ddp_hook does the gradient averaging through an ncclz communicator
made over the same ranks through the same store.
"""

import argparse

import ncclz
import ncclz.torch
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

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
    ap.add_argument("--error-feedback", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the launcher
    comm = ncclz.torch.communicator()
    rank = dist.get_rank()

    torch.manual_seed(0)  # same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = DDP(model)
    state = ncclz.torch.HookState(
        comm,
        compression=SPECS[args.compression],
        min_elements=1024,  # smaller tensors and biases go exact
        error_feedback=args.error_feedback,
    )
    ddp.register_comm_hook(state, ncclz.torch.ddp_hook)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)

    # a synthetic linear-teacher task; each rank draws its own batches
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(42))
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(32, 64, generator=gen)
        y = (x @ teacher).argmax(1)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        if step == args.steps - 1:
            with state.disable():  # per-step opt-out: the last step averages exactly
                loss.backward()
        else:
            loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            s = state.last_step
            print(
                f"step {step:4d} loss {loss.item():.4f}  wire {s.wire_bytes} B of {s.raw_bytes} B "
                f"(ratio {s.ratio:.2f}), max error bound {s.max_error_bound:.2e}"
            )

    if rank == 0:
        t = state.totals
        print(
            f"total: {t.wire_bytes / 1e6:.2f} MB sent instead of {t.raw_bytes / 1e6:.2f} MB ({t.ratio:.2f}x)"
        )
        print_policy(comm)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
