"""Turns bench/train/train_digits.py's JSON files into bench/results/training.md and training.png.

python bench/train/report.py --runs bench/train/runs --command "..."
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
from collections import defaultdict

ORDER = ["none", "lossless", "rel1e-3", "rel1e-2", "rel1e-2+ef"]
LABEL = {
    "none": "none",
    "lossless": "Lossless()",
    "rel1e-3": "Lossy(rel=1e-3)",
    "rel1e-2": "Lossy(rel=1e-2)",
    "rel1e-2+ef": "Lossy(rel=1e-2) + error feedback",
}
MODE_LABEL = {"ddp": "DDP + ddp_hook", "sharded": "ShardedOptimizer"}


def load(runs_dir: str) -> dict:
    by = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        by[(r["mode"], r["compression"])].append(r)
    return by


def plot(by: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = {
        "none": "black",
        "lossless": "tab:blue",
        "rel1e-3": "tab:green",
        "rel1e-2": "tab:red",
        "rel1e-2+ef": "tab:purple",
    }
    styles = {
        "none": "-",
        "lossless": ":",
        "rel1e-3": "--",
        "rel1e-2": "-.",
        "rel1e-2+ef": (0, (5, 1, 1, 1, 1, 1)),
    }
    for ax, mode in zip(axes, ("ddp", "sharded")):
        for c in ORDER:
            runs = by.get((mode, c))
            if not runs:
                continue
            seed0 = min(runs, key=lambda r: r["seed"])
            h = seed0["history"]
            ax.plot(
                h["epoch"], h["train_loss"], linestyle=styles[c], color=colors[c], label=f"{LABEL[c]} train"
            )
            ax.plot(
                h["epoch"],
                h["test_loss"],
                linestyle=styles[c],
                color=colors[c],
                alpha=0.45,
                label=f"{LABEL[c]} test",
            )
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_title(f"{MODE_LABEL[mode]}, 4 CPU ranks (seed 0)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("cross-entropy loss")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("sklearn digits, small CNN: ncclz gradient compression vs none")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(by: dict, command: str) -> str:
    lines = [
        "# Training with ncclz compression: sklearn digits, 4 CPU ranks",
        "",
        "Produced by `bench/train/train_digits.py` and `bench/train/report.py` (rerun to refresh).",
        "",
        "Small CNN (conv 1->16 3x3, conv 16->32 3x3, maxpool, fc 512->64, fc 64->10; 38,570 parameters) on",
        "`sklearn.datasets.load_digits` (1797 8x8 images, 10 classes), fixed stratified 75/25 split",
        "(`random_state=0`, 1347 train / 450 test images, so one test image is 0.22 percentage points).",
        "Global batch 128 (32 per rank), Adam lr 2e-3 with cosine decay, 40 epochs (400 steps).",
        "Only the two large >= 2-D weights (conv2 4,608 and fc1 32,768 elements) are compressed with",
        "the lossy specs; biases and the small first/last layers (< 1024 elements) go exact.",
        "",
        "- **DDP + ddp_hook**: `DistributedDataParallel` (gloo group) with `ncclz.torch.ddp_hook`:",
        "  gradients all-reduced (avg) through ncclz.",
        "- **ShardedOptimizer**: plain model, `ncclz.torch.ShardedOptimizer(torch.optim.Adam)`: gradients",
        "  reduce-scattered (avg) with the spec, Adam state sharded 4 ways, parameters all-gathered exactly",
        "  (so the all-gather, uncompressed, dominates its wire bytes).",
        "",
        "Wire bytes: what one rank sends per training step (ncclz `last_stats.wire_bytes`, headers",
        "included), averaged over all steps; raw = the same without compression.",
        "",
    ]
    seeds = sorted({r["seed"] for runs in by.values() for r in runs})
    lines.append(
        f"Final test accuracy after the last epoch; {len(seeds)} seed(s) ({', '.join(map(str, seeds))}: model"
        " init and data order), mean and per seed. Delta: mean accuracy minus the same mode's uncompressed mean."
    )
    lines.append("")
    lines.append(
        "| mode | compression | test acc (mean) | delta vs none (pp) | per seed | final train loss "
        "| final test loss | wire kB/step | of which gradients | raw kB/step | ratio (gradients) | s/run |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    train_loss = {}
    for mode in ("ddp", "sharded"):
        base = by.get((mode, "none"))
        base_acc = statistics.mean(r["final_test_acc"] for r in base) if base else None
        for c in ORDER:
            runs = by.get((mode, c))
            if not runs:
                continue
            runs = sorted(runs, key=lambda r: r["seed"])

            def mean(key, runs=runs):
                return statistics.mean(r.get(key, float("nan")) for r in runs)

            acc = mean("final_test_acc")
            wire, raw = mean("wire_bytes_per_step"), mean("raw_bytes_per_step")
            gwire, graw = mean("grad_wire_bytes_per_step"), mean("grad_raw_bytes_per_step")
            delta = None if base_acc is None else (acc - base_acc) * 100
            summary[(mode, c)] = (delta, graw / gwire if gwire else float("nan"))
            train_loss[(mode, c)] = mean("final_train_loss")
            per = " / ".join(f"{r['final_test_acc'] * 100:.2f}" for r in runs)
            lines.append(
                f"| {MODE_LABEL[mode]} | `{LABEL[c]}` | {acc * 100:.2f}% | "
                f"{'' if delta is None else f'{delta:+.2f}'} | {per} | {mean('final_train_loss'):.4f} "
                f"| {mean('final_test_loss'):.4f} | {wire / 1e3:.1f} | {gwire / 1e3:.1f} | {raw / 1e3:.1f} "
                f"| {raw / wire:.2f}x ({graw / gwire:.2f}x) | {mean('seconds'):.1f} |"
            )
    lines += ["", "Observations (computed from the runs above):", ""]
    for mode in ("ddp", "sharded"):
        for c in ("rel1e-3", "rel1e-2", "rel1e-2+ef"):
            if (mode, c) in summary and summary[(mode, c)][0] is not None:
                d, gr = summary[(mode, c)]
                verdict = "within" if abs(d) <= 0.5 else "OUTSIDE"
                lines.append(
                    f"- {MODE_LABEL[mode]}, `{LABEL[c]}`: mean test accuracy {d:+.2f} pp vs uncompressed "
                    f"({verdict} 0.5 pp), gradient traffic {gr:.2f}x smaller."
                )
    tl = {c: train_loss.get(("ddp", c)) for c in ORDER}
    if all(tl.get(c) is not None for c in ("none", "rel1e-3", "rel1e-2")):
        lines.append(
            f"- The lossy specs leave a trace in the final train loss (DDP, mean: none {tl['none']:.4f}, "
            f"rel 1e-3 {tl['rel1e-3']:.4f}, rel 1e-2 {tl['rel1e-2']:.4f}"
            + (
                f", rel 1e-2 with error feedback {tl['rel1e-2+ef']:.4f}"
                if tl.get("rel1e-2+ef") is not None
                else ""
            )
            + "); test accuracy on this small problem is saturated near 98% and moves by at most one or two"
            " test images (0.22 pp each)."
        )
    lines += [
        "- `Lossless()` is bit-identical to none (same accuracy and loss in every seed); fp32 gradients",
        "  compress only about 1.1-1.2x losslessly, as expected (exponent bits only).",
        "- ShardedOptimizer's wire bytes include the exact parameter all-gather (half of its traffic);",
        "  its gradient reduce-scatter compresses like the hook's all-reduce.",
        "",
    ]
    diffs = [r["max_param_diff_across_ranks"] for runs in by.values() for r in runs]
    lines += [
        "",
        f"All ranks ended with bit-identical parameters in every run (max difference across ranks: {max(diffs):g}).",
        "",
        "![loss curves](training.png)",
        "",
        "`training.png`: train loss (mean over ranks, per epoch) and test loss, seed 0, both modes.",
        "",
        "Command (2 cores, loaded machine, niced; run time in the table is per configuration):",
        "",
        "```",
        command,
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", default="bench/train/runs")
    ap.add_argument("--md", default="bench/results/training.md")
    ap.add_argument("--png", default="bench/results/training.png")
    ap.add_argument(
        "--command",
        default="nice -n 10 ncclz-run -n 4 python bench/train/train_digits.py --seeds 0,1,2 "
        "--out bench/train/runs && python bench/train/report.py",
    )
    args = ap.parse_args(argv)
    by = load(args.runs)
    if not by:
        raise SystemExit(f"no runs in {args.runs}")
    plot(by, args.png)
    with open(args.md, "w") as f:
        f.write(table(by, args.command))
    print(f"wrote {args.md} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
