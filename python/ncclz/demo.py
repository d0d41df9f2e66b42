"""``ncclz-demo``: compressed all-reduce of a real field across 4 local ranks, on a slow link and on
shared memory.

Four ranks (ncclz-run's machinery) each hold 4 MiB of the NCEP/NCAR reanalysis 500 hPa geopotential
height, the example data the ``eofs`` package ships (its 65 winters tiled along time, each rank
starting at another winter; a smooth synthetic field if eofs or scipy is missing, and the demo says
so). They all-reduce (sum) it requesting each compression mode, twice:

- on a slow link: the socket transport paced to 0.25 Gbit/s per rank (an emulated network, no
  root needed), where compression pays;
- on shared memory (the transport ranks on one host get), as fast as memory, where it does not:
  the policy knows the link is memory there and runs every request uncompressed, exactly
  (``ncclz.policy.memory_link``).

Per requested mode the demo prints what ran and why (the compression policy may run a call
uncompressed or lossless where compressing would not pay; the result then is exact), the ratio,
bytes sent per rank, the largest error against the exact fp64 sum next to the promised bound, the
time and the speed-up over no compression (> 1: faster).

    ncclz-demo                        # both runs (about 15 s)
    ncclz-demo --throttle-gbps 1      # another slow-link rate
    ncclz-demo --plot                 # also writes ncclz-demo.png (needs matplotlib)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

import numpy as np

from . import run as _run

#: The requested modes, in the order of the rows: (label, keyword arguments of the spec or None).
MODES = (("none", None), ("Lossless()", "lossless"), ("Lossy(rel=1e-3)", 1e-3), ("Lossy(rel=1e-4)", 1e-4))
DEFAULT_GBPS = 0.25
DEFAULT_SIZE = 4 << 20
LINKS = ("slow", "fast")


def _spec(kind):
    import ncclz

    if kind is None:
        return None
    if kind == "lossless":
        return ncclz.Lossless()
    return ncclz.Lossy(rel=kind)


def choose_data() -> tuple[str, str]:
    """(data set of ncclz.tools.data, a sentence saying what it is)."""
    from .tools import data

    why = data.unavailable("real")
    if why is None:
        return "real", data.REANALYSIS_NOTE
    return "smooth", ("SYNTHETIC smooth 3-D field (sinusoids and Gaussian bumps), because the real field is not "
                      f"available: {why}")


def ran_label(compression: str, policy: str) -> str:
    """The mode a call ran with, with the codec effort rank 0's policy chose ("lossy/fast")."""
    if compression in ("none", "lossless"):
        return compression
    if policy.startswith("auto: lossy/"):
        return policy.split()[1]
    return "lossy"


def short_reason(policy: str) -> str:
    """The policy's reason without its predictions: "lossy predicted >= 20% faster than none"."""
    if not policy:
        return "no compression requested"
    if policy == "off":
        return "policy off: as requested"
    if "; predicted " in policy:  # "auto: <mode> (<reason>; predicted ...)": rank 0's Choice
        return policy.split(" (", 1)[1].rsplit("; predicted ", 1)[0]
    if policy.startswith("auto: none (") and policy.endswith(")"):  # a rule's Choice predicts nothing
        return policy[len("auto: none ("):-1]
    return policy.removeprefix("auto: ")


def worker(link: str, size: int, repeat: int, out: str) -> int:
    import ncclz

    from .tools import data

    comm = ncclz.init()
    rank, world = comm.rank, comm.world_size
    dataset, _ = choose_data()
    count = max(1, size // 4)
    mine = data.rank_input(dataset, rank, count)
    exact = np.sum([data.rank_input(dataset, r, count).astype(np.float64) for r in range(world)], axis=0)
    rows = []
    x_none = None
    for label, kind in MODES:
        spec = _spec(kind)
        calls = []  # (time, ran, why, wire bytes, ratio) of the timed calls
        x, worst = mine, 0.0
        for i in range(repeat + 1):
            x = mine.copy()
            comm.barrier()
            t0 = time.perf_counter()
            comm.all_reduce(x, compression=spec)
            dt = time.perf_counter() - t0
            st = comm.last_stats
            if i > 0:  # the first call warms up buffers, connections and the policy's calibration
                calls.append((dt, ran_label(st.compression, st.policy), st.policy, int(st.wire_bytes), float(st.ratio)))
                worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - exact))))
        # the slowest rank per call, the largest error of any rank, through the library itself
        t = np.array([c[0] for c in calls], np.float64)
        comm.all_reduce(t, op="max", policy="off")
        err = np.array([worst], np.float64)
        comm.all_reduce(err, op="max", policy="off")
        if spec is None:
            x_none = x
        same = np.array([0.0 if x_none is None or np.array_equal(x, x_none) else 1.0])
        comm.all_reduce(same, op="max", policy="off")
        # the bound the call asked for (a call the policy ran exactly reports its smaller achieved
        # bound as error_bound; every timed call must be within the request)
        bound = float(st.requested_bound or st.error_bound)
        ok = bool(same[0] == 0) if kind == "lossless" else (kind is None or float(err[0]) <= bound)
        ran = [c[1] for c in calls]
        picks = {r: ran.count(r) for r in dict.fromkeys(ran)}
        mode = max(picks, key=picks.get)
        # the row shows the mode most calls ran (rank 0's view; the policy may measure another mode on
        # a call or two): the median of those calls' times, their bytes and rank 0's reason
        mine_calls = [(float(t[i]), *c[1:]) for i, c in enumerate(calls) if c[1] == mode]
        mid = sorted(mine_calls)[(len(mine_calls) - 1) // 2]
        rows.append({"requested": label, "ran": mode, "ran_calls": picks, "why": mine_calls[-1][2],
                     "ratio": mid[4], "raw_bytes": int(st.raw_bytes), "wire_bytes": mid[3],
                     "max_error": float(err[0]), "bound": bound if kind not in (None, "lossless") else None,
                     "time_s": float(statistics.median(c[0] for c in mine_calls)), "times_s": t.tolist(),
                     "ok": ok, "exact_fallback": bool(st.exact_fallback)})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"link": link, "rows": rows, "world": world, "count": count, "dataset": dataset,
                       "transport": os.environ.get("NCCLZ_TRANSPORT") or "auto",
                       "throttle_gbps": os.environ.get("NCCLZ_SOCKET_THROTTLE_GBPS")}, f)
    comm.close()
    return 0 if all(r["ok"] for r in rows) else 1


# ---------------------------------------------------------------------------------------------- output
def link_title(res: dict) -> str:
    if res["throttle_gbps"]:
        return (f"slow link: the socket transport paced to {float(res['throttle_gbps']):g} Gbit/s per rank "
                "(an emulated network)")
    t = res["transport"]
    return "shared memory: the ranks' transport on one host" if t in ("auto", "shm") else f"{t} transport, not paced"


def format_table(res: dict) -> list:
    rows = res["rows"]
    base = rows[0]["time_s"]
    header = (f"  {'requested':<17}{'ran':<12}{'ratio':>7}{'sent/rank':>11}{'max error':>11}{'bound':>10}"
              f"{'time':>11}{'speed-up':>10}  why (rank 0's policy)")
    out = [link_title(res), header]
    for r in rows:
        bound = "-" if r["requested"] == "none" else ("exact" if r["bound"] is None else f"{r['bound']:.3g}")
        ran = r["ran"] + ("*" if len(r["ran_calls"]) > 1 else "")
        note = "" if r["ok"] else ("  DIFFERS FROM none" if r["bound"] is None else "  EXCEEDS THE BOUND")
        out.append(f"  {r['requested']:<17}{ran:<12}{r['ratio']:>6.2f}x{r['wire_bytes'] / 2**20:>7.2f} MiB"
                   f"{r['max_error']:>11.3g}{bound:>10}{r['time_s'] * 1e3:>8.1f} ms{base / r['time_s']:>9.2f}x"
                   f"  {short_reason(r['why'])}{note}")
    mixed = [r for r in rows if len(r["ran_calls"]) > 1]
    for r in mixed:
        calls = ", ".join(f"{k} x{v}" for k, v in r["ran_calls"].items())
        out.append(f"  * {r['requested']}: the policy ran {calls} (it measures a mode it has not timed yet); "
                   f"the row shows the {r['ran']} calls")
    return out


def summary(results: list) -> list:
    """A sentence per run about the Lossy(rel=1e-3) row."""
    out = []
    for res in results:
        best = res["rows"][2]
        sp = res["rows"][0]["time_s"] / best["time_s"]
        where = "on the slow link" if res["throttle_gbps"] else "on shared memory"
        if best["ran"].startswith("lossy"):
            out.append(f"{where}, {best['requested']} finished {sp:.1f}x faster than none, sending {best['ratio']:.1f}x "
                       f"fewer bytes, every element within {best['bound']:.3g} of the exact sum")
        else:
            out.append(f"{where}, the policy ran {best['requested']} as {best['ran']} ({short_reason(best['why'])}): "
                       f"compressing does not pay where the link is as fast as memory")
    return out


def plot(results: list, path: str) -> None:
    from .tools.plot import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.4 * len(results)), squeeze=False)
    for res, (ax_t, ax_r) in zip(results, axes):
        rows = res["rows"]
        names = [r["requested"] for r in rows]
        colors = ["tab:gray" if r["ran"] == "none" else "tab:blue" if r["ran"] == "lossless" else "tab:green"
                  for r in rows]
        bars = ax_t.bar(names, [r["time_s"] * 1e3 for r in rows], color=colors)
        for b, r in zip(bars, rows):
            ax_t.annotate(f"ran {r['ran']}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                          va="bottom", fontsize=8)
        ax_t.set_ylabel("time per call (ms)")
        ax_r.bar(names, [r["ratio"] for r in rows], color=colors)
        ax_r.set_ylabel("ratio (raw / wire bytes)")
        for ax in (ax_t, ax_r):
            ax.set_title(link_title(res).split(":")[0], fontsize=10)
            ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("ncclz-demo: all_reduce of 4 ranks, per requested mode (green: lossy ran, blue: lossless, gray: none)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    from .tools.bench import parse_size

    p = argparse.ArgumentParser(prog="ncclz-demo", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("-n", "--nproc", type=int, default=4, help="ranks (default: %(default)s)")
    p.add_argument("--size", type=parse_size, default=DEFAULT_SIZE, metavar="SIZE",
                   help="bytes per rank, with K/M/G suffixes (default: 4M)")
    p.add_argument("--throttle-gbps", type=float, default=DEFAULT_GBPS, metavar="GBPS",
                   help="the slow link's rate per rank, Gbit/s (default: %(default)g)")
    p.add_argument("--links", default="slow,fast", metavar="LIST",
                   help="which runs, comma-separated: slow (the paced socket transport), fast (--transport) "
                        "(default: %(default)s)")
    p.add_argument("--transport", choices=["auto", "shm", "socket"], default="auto",
                   help="the fast run's transport, not paced (default: auto, shared memory on one host)")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per mode (default: %(default)s)")
    p.add_argument("--plot", nargs="?", const="ncclz-demo.png", default=None, metavar="PATH",
                   help="also write a PNG of time and ratio per mode (needs matplotlib; default PATH: ncclz-demo.png)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON (default: none)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.size, args.repeat, args.out)
    links = [x.strip() for x in args.links.split(",") if x.strip()]
    if not links or any(x not in LINKS for x in links):
        p.error(f"--links takes slow and / or fast, got {args.links!r}")
    if args.nproc < 2:
        p.error("-n must be at least 2 (one rank has nothing to send)")
    if not args.throttle_gbps > 0 or args.repeat < 1 or args.size < 4:
        p.error("--throttle-gbps must be > 0, --repeat >= 1, --size >= 4")
    if args.plot:
        from .tools.plot import PlotUnavailable, check

        try:
            check()
        except PlotUnavailable as e:
            p.error(str(e))
    dataset, note = choose_data()
    t_start = time.monotonic()
    print(f"ncclz demo: all_reduce (sum) of {args.size / 2**20:g} MiB of float32 per rank across {args.nproc} "
          f"local ranks, requesting each compression mode; {args.repeat} timed calls each")
    print(f"data: {note}" + (f"; each rank's {args.size / 2**20:g} MiB tiled along time from its own start winter"
                             if dataset == "real" else ""))
    results = []
    status = 0
    with tempfile.TemporaryDirectory(prefix="ncclz-demo-") as tmp:
        for link in links:
            env = dict(os.environ)
            for k in ("NCCLZ_SOCKET_THROTTLE_GBPS", "NCCLZ_LINK_GBPS", "NCCLZ_POLICY"):
                env.pop(k, None)
            if link == "slow":
                env["NCCLZ_TRANSPORT"] = "socket"
                env["NCCLZ_SOCKET_THROTTLE_GBPS"] = f"{args.throttle_gbps:g}"
            elif args.transport != "auto":
                env["NCCLZ_TRANSPORT"] = args.transport
            else:
                env.pop("NCCLZ_TRANSPORT", None)
            out = os.path.join(tmp, f"{link}.json")
            cmd = [sys.executable, "-m", "ncclz.demo", "--worker", link, "--out", out, "--size", str(args.size),
                   "--repeat", str(args.repeat)]
            print(file=sys.stderr, flush=True)
            print(f"[running the {link} case: {args.nproc} ranks ...]", file=sys.stderr, flush=True)
            rc = _run.launch(cmd, args.nproc, timeout=60, grace=2.0, prefix=True, env=env, deadline=300)
            if not os.path.exists(out):
                print(f"ncclz-demo: the {link} case failed (exit status {rc})", file=sys.stderr)
                return rc or 1
            status = status or rc
            with open(out) as f:
                res = json.load(f)
            results.append(res)
            print()
            for line in format_table(res):
                print(line, flush=True)
    print()
    print("ran: what the compression policy ran for the request (policy=\"off\" would force the request). "
          "max error: of every timed call, against the exact fp64 sum of the float32 inputs (none shows float32 "
          f"rounding; lossless equals none bit for bit). time: median over the {args.repeat} timed calls that ran "
          "the mode shown, slowest rank. speed-up: none's time / the row's time (> 1: faster).")
    for line in summary(results):
        print(f"=> {line}.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": dataset, "note": note, "size": args.size, "results": results}, f, indent=1)
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    print(f"({time.monotonic() - t_start:.0f} s)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
