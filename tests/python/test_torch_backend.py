"""The torch.distributed backend "ncclz" (ncclz.torch.backend) on 2 and 3 CPU processes.

Each test starts WORLD processes of this very file (``python test_torch_backend.py
worker SCENARIO RANK WORLD DIR``) with a subprocess timeout; they meet through a
FileStore in DIR. Every rank builds every rank's input from seeds, so it checks
its own results against the fp64 reference: integers and data movement exactly,
float sums and averages to float rounding of the ring's addition order, lossy
calls within the bound E the call reported, on every element. Ranks write the
digests of their results to DIR/rank<R>.json and the test checks that all ranks
agree bit for bit. A failed check raises, which exits non-zero.

The scenarios: every collective, dtype and op the backend offers (plus the calls
it refuses), lossy and error-feedback groups, DDP and FSDP2 through the examples
against gloo (bit-identical at 2 ranks for none and lossless: one addition per
element, so the order cannot differ; within the promised bound for lossy),
bad configuration at init, a dead peer, and exit without destroy_process_group.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
ncclz = pytest.importorskip("ncclz")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER_TIMEOUT_S = 240  # per scenario; "train" (8 short trainings, 2 ranks) gets more on a loaded machine


def _timeout(scenario: str) -> int:
    return 3 * WORKER_TIMEOUT_S if scenario == "train" else WORKER_TIMEOUT_S


# ------------------------------------------------------------------ worker side
def _digest(t) -> str:
    t = t.detach().contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()[:16]


def _inputs(world: int, shape, dtype, seed: int):
    """Every rank's input (each rank can compute all of them)."""
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(100 * seed + r)
        if dtype == torch.bool:
            out.append(torch.rand(shape, generator=g) < 0.3)
        elif dtype.is_complex:
            out.append(torch.randn(shape, generator=g, dtype=dtype))
        elif dtype.is_floating_point:
            v = torch.randn(shape, generator=g, dtype=torch.float64) * 3 + r
            out.append(v.to(dtype))
        elif dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
            out.append(torch.randint(0, 40, shape, generator=g).to(dtype))
        else:
            out.append(torch.randint(-50, 50, shape, generator=g).to(dtype))
    return out


def _reference(inputs, op: str):
    if inputs[0].dtype == torch.bool:
        x = torch.stack(inputs)
        return x.any(0) if op in ("sum", "max") else x.all(0)
    x = torch.stack([t.to(torch.complex128 if t.dtype.is_complex else torch.float64) for t in inputs])
    if op == "sum":
        return x.sum(0)
    if op == "avg":
        return x.sum(0) / len(inputs)
    if op == "max":
        return x.max(0).values
    if op == "min":
        return x.min(0).values
    if op == "prod":
        return x.prod(0)
    raise ValueError(op)


def _close_to(got, ref, world: int, what: str, bound: float = 0.0, inputs=None):
    """Integers exactly; floats to ``bound`` plus the rounding of the ring's additions (relative to the
    sum of the inputs' magnitudes when ``inputs`` are given: sums may cancel)."""
    if got.dtype == torch.bool or not (got.dtype.is_floating_point or got.dtype.is_complex):
        assert torch.equal(got, ref.to(got.dtype)), f"{what}: {got} != {ref}"
        return
    eps = torch.finfo(got.real.dtype if got.dtype.is_complex else got.dtype).eps
    scale = ref.abs().double()
    if inputs is not None:
        scale = torch.stack([t.abs().double() for t in inputs]).sum(0).reshape(ref.shape)
    tol = bound + (world + 1) * eps * scale + 1e-300
    err = (got.to(ref.dtype) - ref).abs()
    assert bool((err <= tol).all()), f"{what}: max error {err.max().item():.3g} > tolerance ({bound=:.3g})"


def _ops(rank: int, world: int, out: dict) -> None:
    """Every collective, dtype and op, on the world group and on a subgroup."""
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    pg = dist.group.WORLD
    assert dist.get_backend() == "ncclz" and pg.name() == "ncclz" and pg.size() == world and pg.rank() == rank
    assert pg.group_name == "0" and pg.group_desc == "default_pg", (pg.group_name, pg.group_desc)
    ops = {
        "sum": ReduceOp.SUM,
        "avg": ReduceOp.AVG,
        "max": ReduceOp.MAX,
        "min": ReduceOp.MIN,
        "prod": ReduceOp.PRODUCT,
    }
    dtypes = [
        torch.float32,
        torch.float64,
        torch.bfloat16,
        torch.float16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.bool,
        torch.complex64,
    ]
    seed = 0
    for dt in dtypes:
        for name, op in ops.items():
            if dt == torch.bool and name in ("avg",):
                continue
            if not (dt.is_floating_point or dt.is_complex) and name == "avg":
                continue
            if dt.is_complex and name in ("max", "min", "prod"):
                continue
            if name == "prod" and dt in (torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
                                         torch.uint16):
                continue  # overflows the small types; covered by the wider ones
            seed += 1
            xs = _inputs(world, (7, 33), dt, seed)
            if name == "prod" and not dt.is_floating_point:
                xs = [(t.to(torch.int64) % 3 + 1).to(dt) for t in xs]
            x = xs[rank].clone()
            dist.all_reduce(x, op=op)
            _close_to(
                x,
                _reference(xs, name),
                world,
                f"all_reduce {name} {dt}",
                inputs=xs if name in ("sum", "avg") else None,
            )
            out[f"ar/{dt}/{name}"] = _digest(x)

    # unsigned tensors near the top: MAX and MIN in their own order (a signed compare would pick 1)
    signed = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
    for dt, sdt in signed.items():
        t = torch.full((3,), -(2 ** (torch.iinfo(sdt).bits - 1)), dtype=sdt).view(dt)  # the top bit only
        mine = t if rank == 0 else torch.ones(3, dtype=dt)
        for op, want in ((ReduceOp.MAX, t), (ReduceOp.MIN, torch.ones(3, dtype=dt))):
            x = mine.clone()
            dist.all_reduce(x, op=op)
            assert torch.equal(x, want), f"all_reduce {op} {dt} near the top: {x}"
        x = mine.clone()
        dist.all_reduce(x)
        assert torch.equal(x.view(sdt), t.view(sdt) + (world - 1)), f"all_reduce sum {dt} near the top: {x}"

    # the 8-bit floats, reduced in their own arithmetic: small integers (exact partial sums), overflow
    for dt, top in ((torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0)):
        xs = [torch.arange(-2, 3, dtype=torch.float32).repeat(7).roll(q).to(dt) for q in range(world)]
        for name in ("sum", "max", "min"):
            x = xs[rank].clone()
            dist.all_reduce(x, op=ops[name])
            want = _reference(xs, name).to(dt)
            assert x.dtype == dt and torch.equal(x.view(torch.uint8), want.view(torch.uint8)), f"{name} {dt}: {x}"
        x = torch.full((4,), top).to(dt)
        dist.all_reduce(x)
        o = x.float()
        assert bool((o.isnan() if dt == torch.float8_e4m3fn else o.isinf()).all()), f"overflow {dt}: {o}"
        outs = [torch.empty_like(xs[0]) for _ in range(world)]
        dist.all_gather(outs, xs[rank])
        assert all(torch.equal(o.view(torch.uint8), e.view(torch.uint8)) for o, e in zip(outs, xs)), f"gather {dt}"

    # PREMUL_SUM (its factor, a number or a tensor) and non-contiguous tensors
    xs = _inputs(world, (64, 40), torch.float32, 99)
    for factor in (0.25, torch.tensor(1.5)):
        x = xs[rank].clone()
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
        f = float(factor)
        _close_to(
            x, _reference([t * f for t in xs], "sum"), world, f"premul_sum {f}", inputs=[t * f for t in xs]
        )
    x = xs[rank].clone()
    view = x.t()  # non-contiguous
    dist.all_reduce(view)
    _close_to(
        view,
        _reference([t.t() for t in xs], "sum"),
        world,
        "all_reduce non-contiguous",
        inputs=[t.t() for t in xs],
    )

    # all_gather: list, uneven list, single (also in place, the way FSDP2 calls it), coalesced
    for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.int16, torch.complex64):
        xs = _inputs(world, (5, 6), dt, 7)
        outs = [torch.empty_like(xs[0]) for _ in range(world)]
        dist.all_gather(outs, xs[rank])
        assert all(torch.equal(o, e) for o, e in zip(outs, xs)), f"all_gather {dt}"
        flat = torch.empty(world * 5, 6, dtype=dt)
        dist.all_gather_into_tensor(flat, xs[rank])
        assert torch.equal(flat, torch.cat(xs)), f"all_gather_single {dt}"
        inplace = torch.zeros(world * 30, dtype=dt)
        mine = inplace[rank * 30 : (rank + 1) * 30]
        mine.copy_(xs[rank].reshape(-1))
        dist.all_gather_into_tensor(inplace, mine)
        assert torch.equal(inplace, torch.cat([t.reshape(-1) for t in xs])), f"all_gather in place {dt}"
    uneven = [torch.arange(r + 2, dtype=torch.float32) * (r + 1) for r in range(world)]
    outs = [torch.empty(r + 2) for r in range(world)]
    dist.all_gather(outs, uneven[rank])
    assert all(torch.equal(o, e) for o, e in zip(outs, uneven)), "all_gather of uneven sizes"
    ins = [torch.full((3,), float(rank)), torch.full((2, 2), 10.0 + rank)]
    lists = [[torch.empty(3), torch.empty(2, 2)] for _ in range(world)]
    dist.all_gather_coalesced(lists, ins)
    for r in range(world):
        assert torch.equal(lists[r][0], torch.full((3,), float(r))) and torch.equal(
            lists[r][1], torch.full((2, 2), 10.0 + r)
        )
    pg = dist.group.WORLD
    a, b = torch.empty(world * 4), torch.empty(world * 2, dtype=torch.int32)
    pg.all_gather_single_coalesced(
        [a, b], [torch.full((4,), float(rank)), torch.full((2,), rank, dtype=torch.int32)]
    ).wait()
    assert torch.equal(a, torch.arange(world).repeat_interleave(4).float()), "all_gather_single_coalesced"
    assert torch.equal(b, torch.arange(world, dtype=torch.int32).repeat_interleave(2)), (
        "all_gather_single_coalesced int"
    )

    # reduce_scatter: list, single, uneven list, coalesced, in place
    for dt, name in (
        (torch.float32, "sum"),
        (torch.float64, "avg"),
        (torch.int64, "max"),
        (torch.bfloat16, "sum"),
        (torch.complex64, "sum"),  # staged as (real, imaginary) pairs: the result written back as complex
        (torch.int8, "sum"),  # staged in int32, cast back
    ):
        xs = _inputs(world, (world * 4, 3), dt, 11)
        ref = _reference(xs, name)
        o = torch.empty(4, 3, dtype=dt)
        dist.reduce_scatter_tensor(o, xs[rank].clone(), op=ops[name])
        _close_to(
            o,
            ref[rank * 4 : (rank + 1) * 4],
            world,
            f"reduce_scatter_single {name} {dt}",
            inputs=[t[rank * 4 : (rank + 1) * 4] for t in xs],
        )
        o2 = torch.empty(4, 3, dtype=dt)
        dist.reduce_scatter(o2, list(xs[rank].clone().chunk(world)), op=ops[name])
        assert torch.equal(o, o2), f"reduce_scatter list {dt}"
        inp = xs[rank].clone()
        before = inp.clone()
        mine = inp[rank * 4 : (rank + 1) * 4]  # output inside the input
        dist.reduce_scatter_tensor(mine, inp, op=ops[name])
        assert torch.equal(mine, o), f"reduce_scatter in place {dt}"
        assert torch.equal(inp[: rank * 4], before[: rank * 4]), "reduce_scatter wrote outside its output"
    parts = [torch.full((r + 1,), float(rank + 1)) for r in range(world)]
    o = torch.empty(rank + 1)
    dist.reduce_scatter(o, parts)
    assert torch.equal(o, torch.full((rank + 1,), float(sum(range(1, world + 1))))), "reduce_scatter uneven"
    xs = _inputs(world, (world * 8,), torch.float32, 12)
    outs = [torch.empty(8), torch.empty(8)]
    pg.reduce_scatter_single_coalesced(
        outs, [xs[rank].clone(), xs[rank] * 2], dist.ReduceScatterOptions()
    ).wait()
    ref = _reference(xs, "sum")[rank * 8 : (rank + 1) * 8]
    mine = [t[rank * 8 : (rank + 1) * 8] for t in xs]
    _close_to(outs[0], ref, world, "reduce_scatter_single_coalesced", inputs=mine)
    _close_to(outs[1], 2 * ref, world, "reduce_scatter_single_coalesced x2", inputs=[2 * t for t in mine])

    # all_reduce_coalesced (torch wants one dtype; the backend makes one call per dtype and compression)
    ts = [torch.full((5,), float(rank)), torch.full((3, 1), 2.0 * rank), torch.full((2, 2), 1.0)]
    dist.all_reduce_coalesced(ts)
    s = float(sum(range(world)))
    assert torch.equal(ts[0], torch.full((5,), s)) and torch.equal(ts[1], torch.full((3, 1), 2 * s))
    assert torch.equal(ts[2], torch.full((2, 2), float(world))), "all_reduce_coalesced"
    ts = [torch.full((3,), rank, dtype=torch.int8), torch.full((4,), 100, dtype=torch.int8)]
    dist.all_reduce_coalesced(ts)
    assert torch.equal(ts[0], torch.full((3,), int(s), dtype=torch.int8)), "all_reduce_coalesced int8"
    assert torch.equal(ts[1], torch.full((4,), 100 * world, dtype=torch.int64).to(torch.int8)), "int8 wraps"

    # broadcast from every root, of several dtypes, non-contiguous too
    for root in range(world):
        for dt in (torch.float32, torch.int8, torch.bool, torch.complex64):
            xs = _inputs(world, (6, 5), dt, 20 + root)
            x = xs[rank].clone()
            dist.broadcast(x, src=root)
            assert torch.equal(x, xs[root]), f"broadcast root {root} {dt}"
        base = torch.full((4, 6), float(rank))
        dist.broadcast(base[:, ::2], src=root)
        assert torch.equal(base[:, ::2], torch.full((4, 3), float(root))) and torch.equal(
            base[:, 1::2], torch.full((4, 3), float(rank))
        ), "broadcast non-contiguous"

    # point to point: a ring both ways in one batch, and a pair exchanging in the same order
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    send_n, send_p = torch.full((1000,), float(rank)), torch.full((10,), rank * 10.0)
    recv_p, recv_n = torch.empty(1000), torch.empty(10)
    reqs = dist.batch_isend_irecv(
        [
            dist.P2POp(dist.irecv, recv_p, prv),
            dist.P2POp(dist.irecv, recv_n, nxt),
            dist.P2POp(dist.isend, send_n, nxt),
            dist.P2POp(dist.isend, send_p, prv),
        ]
    )
    for q in reqs:
        q.wait()
    assert torch.equal(recv_p, torch.full((1000,), float(prv))) and torch.equal(
        recv_n, torch.full((10,), nxt * 10.0)
    )
    if rank < 2:
        peer = 1 - rank
        got = torch.empty(3, dtype=torch.int16)
        s_req = dist.isend(torch.full((3,), rank + 7, dtype=torch.int16), peer)  # both send first
        dist.recv(got, peer)
        s_req.wait()
        assert torch.equal(got, torch.full((3,), peer + 7, dtype=torch.int16)), "isend/recv pair"
    try:
        dist.recv(torch.empty(1))
    except ncclz.InvalidArgumentError as e:
        assert "any source" in str(e)
    else:
        raise AssertionError("recv from any source did not raise")

    # async: several calls in flight, futures with values, then-callbacks, is_completed
    xs = [torch.full((20000,), float(rank + i)) for i in range(6)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    chained = works[-1].get_future().then(lambda f: f.value()[0] * 2)
    for i, w in enumerate(works):
        assert w.wait() and w.is_completed()
        assert torch.equal(
            w.get_future().value()[0], torch.full((20000,), float(sum(r + i for r in range(world))))
        )
    assert torch.equal(chained.wait(), xs[-1] * 2)
    dist.barrier()

    # functional collectives and DTensor (they find the group by name)
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    y = funcol.all_reduce(torch.full((4,), float(rank)), "sum", dist.group.WORLD)
    assert torch.equal(y.wait() if hasattr(y, "wait") else y, torch.full((4,), s)), "funcol all_reduce"
    from torch.distributed.tensor import distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(world * 6 * 4, dtype=torch.float32).reshape(world * 6, 4)
    d = DTensor.from_local(full[rank * 6 : (rank + 1) * 6].clone(), mesh, [Shard(0)])
    assert torch.equal(d.full_tensor(), full), "DTensor full_tensor"
    # distribute_tensor scatters rank 0's tensor
    src = full.clone() if rank == 0 else torch.zeros_like(full)
    dd = distribute_tensor(src, mesh, [Shard(0)])
    assert torch.equal(dd.to_local(), full[rank * 6 : (rank + 1) * 6]), "distribute_tensor (scatter)"
    r = d.redistribute(mesh, [Shard(1)]) if world <= 4 else d
    assert torch.equal(r.full_tensor(), full), "DTensor redistribute"

    # a subgroup [1, 2, ...] (rank 0 is not a member): its own communicator
    sub_ranks = list(range(1, world))
    sub = dist.new_group(sub_ranks, backend="ncclz")
    if rank in sub_ranks:
        x = torch.full((3,), float(rank))
        dist.all_reduce(x, group=sub)
        assert torch.equal(x, torch.full((3,), float(sum(sub_ranks)))), "subgroup all_reduce"
        assert dist.get_world_size(sub) == len(sub_ranks) and sub.rank() == rank - 1
    dist.barrier()

    # a failed call (mismatched sizes) reaches every rank's Work and Future as an ncclz error
    bad = dist.new_group(backend="ncclz")
    w = dist.all_reduce(torch.ones(10 + rank), group=bad, async_op=True)
    try:
        w.wait()
    except ncclz.RemoteError as e:
        assert w.is_completed() and not w.is_success() and isinstance(w.exception(), ncclz.RemoteError), e
        out["mismatch"] = type(e).__name__
    else:
        raise AssertionError("mismatched all_reduce did not raise")
    try:
        w.get_future().wait()
    except ncclz.RemoteError:
        pass
    else:
        raise AssertionError("the future did not carry the error")
    x = torch.full((2,), 1.0)
    dist.all_reduce(x)  # the world group is unaffected
    assert torch.equal(x, torch.full((2,), float(world)))

    # Work.wait(timeout) that runs out: ncclz.TimeoutError, and the group's communicator is aborted,
    # so the peers that join the call late fail at once instead of completing half a collective
    slow = dist.new_group(backend="ncclz")
    if rank == 0:
        w = dist.all_reduce(torch.ones(1000), group=slow, async_op=True)
        t0 = time.monotonic()
        try:
            w.wait(datetime.timedelta(seconds=1))
        except ncclz.TimeoutError as e:
            assert "did not complete within 1 s" in str(e) and time.monotonic() - t0 < 10, e
        else:
            raise AssertionError("wait(timeout) did not time out")
    dist.barrier()
    if rank != 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1000), group=slow)
        except ncclz.RemoteError as e:
            out["late_peer"] = type(e).__name__
            assert time.monotonic() - t0 < 30, e
        else:
            raise AssertionError("a peer of an aborted call completed it")
    dist.barrier()


def _send_rows(i: int, j: int) -> int:
    """Rows rank i sends to rank j in the uneven all-to-all tests (zero for some pairs)."""
    return (i + 2 * j) % 4


def _a2a_input(rank: int, world: int, dtype, cols: int = 3):
    """Rank ``rank``'s uneven all-to-all input: block j has _send_rows(rank, j) rows; every element
    names its sender, receiver, row and column."""
    blocks = []
    for j in range(world):
        n = _send_rows(rank, j)
        v = torch.arange(n * cols, dtype=torch.float64).reshape(n, cols) + 1000 * rank + 100 * j
        blocks.append(v)
    x = torch.cat(blocks)
    if dtype == torch.bool:
        return (x.long() % 3 == 0).reshape(-1, cols)
    return x.to(dtype)


def _a2a_expected(rank: int, world: int, dtype, cols: int = 3):
    """What rank ``rank`` receives: block j of rank j's input, in rank order."""
    parts = []
    for j in range(world):
        x = _a2a_input(j, world, dtype, cols)
        start = sum(_send_rows(j, k) for k in range(rank))
        parts.append(x[start : start + _send_rows(j, rank)])
    return torch.cat(parts)


def _rooted(rank: int, world: int, out: dict) -> None:
    """reduce, gather, scatter, all_to_all (equal and uneven) in none / lossless / lossy groups, and
    the argument errors: on the rank that sees them a clear error, on the others a fast RemoteError."""
    import ncclz.torch as nt
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    ops = {
        "sum": ReduceOp.SUM,
        "avg": ReduceOp.AVG,
        "max": ReduceOp.MAX,
        "min": ReduceOp.MIN,
        "prod": ReduceOp.PRODUCT,
    }
    exact = dist.new_group(backend="ncclz", pg_options=nt.Options(compression=None))
    lossless = dist.new_group(
        backend="ncclz", pg_options=nt.Options(compression=ncclz.Lossless(), min_elements=1, policy="off")
    )
    seed = 300
    for gname, g in (("none", exact), ("lossless", lossless)):
        # reduce: every root, ops and dtypes; non-roots' tensors are only read
        for root in range(world):
            for dt, name in (
                (torch.float32, "sum"),
                (torch.float64, "avg"),
                (torch.int64, "max"),
                (torch.int32, "prod"),
                (torch.int8, "sum"),
                (torch.bool, "sum"),
                (torch.complex64, "sum"),
                (torch.bfloat16, "min"),
            ):
                seed += 1
                xs = _inputs(world, (9, 17), dt, seed)
                if name == "prod":
                    xs = [(t.to(torch.int64) % 3 + 1).to(dt) for t in xs]
                x, before = xs[rank].clone(), xs[rank].clone()
                w = dist.reduce(x, dst=root, op=ops[name], group=g, async_op=True)
                w.wait()
                if rank == root:
                    ref = _reference(xs, name)
                    _close_to(
                        x,
                        ref,
                        world,
                        f"{gname} reduce {name} {dt} root {root}",
                        0.0,
                        xs if name in ("sum", "avg") else None,
                    )
                    out[f"{gname}/reduce/{dt}/{name}/{root}"] = _digest(x)
                    assert torch.equal(w.get_future().value()[0], x)
                else:
                    assert torch.equal(x, before), f"reduce changed a non-root's tensor ({dt} {name})"
        xs = _inputs(world, (40, 8), torch.float32, 350)
        x, before = xs[rank].clone(), xs[rank].clone()
        dist.reduce(x, dst=1, op=dist._make_nccl_premul_sum(0.5), group=g)
        if rank == 1:
            half = [t * 0.5 for t in xs]
            _close_to(x, _reference(half, "sum"), world, "reduce premul_sum", 0.0, half)
        else:
            assert torch.equal(x, before), "reduce premul_sum changed a non-root's tensor"
        base = xs[rank].clone()
        dist.reduce(base.t(), dst=0, group=g)  # non-contiguous
        if rank == 0:
            _close_to(base, _reference(xs, "sum"), world, "reduce non-contiguous", 0.0, xs)

        # gather and scatter: every root, several dtypes (bytes, float pairs), in place on the root
        for root in range(world):
            for dt in (torch.float32, torch.int16, torch.bool, torch.complex64, torch.float16):
                seed += 1
                xs = _inputs(world, (4, 5), dt, seed)
                gl = [torch.empty_like(xs[0]) for _ in range(world)] if rank == root else None
                dist.gather(xs[rank], gl, dst=root, group=g)
                if rank == root:
                    assert all(torch.equal(a, b) for a, b in zip(gl, xs)), f"{gname} gather {dt} root {root}"
                o = torch.full_like(xs[0], 7) if dt != torch.bool else torch.zeros_like(xs[0])
                dist.scatter(o, xs if rank == root else None, src=root, group=g)
                assert torch.equal(o, xs[rank]), f"{gname} scatter {dt} root {root}"
            gl = [torch.zeros(6) for _ in range(world)]
            mine = torch.full((6,), float(rank))
            if rank == root:
                gl[root] = mine  # in place: the root's input is its own entry of the list
            dist.gather(mine, gl if rank == root else None, dst=root, group=g)
            if rank == root:
                assert all(torch.equal(gl[r], torch.full((6,), float(r))) for r in range(world)), (
                    "gather in place"
                )
        o = torch.empty(3, 4)[:, ::2]  # non-contiguous output
        dist.scatter(
            o, [torch.full((3, 2), float(r)) for r in range(world)] if rank == 0 else None, src=0, group=g
        )
        assert torch.equal(o, torch.full((3, 2), float(rank))), "scatter into a non-contiguous tensor"

        # all_to_all_single: equal blocks, uneven splits (some empty), several dtypes, non-contiguous input
        for dt in (torch.float32, torch.int64, torch.bool, torch.complex64, torch.bfloat16):
            x = (torch.arange(world * 2 * 3, dtype=torch.float64).reshape(world * 2, 3) + 100 * rank).to(dt)
            o = torch.empty_like(x)
            dist.all_to_all_single(o, x, group=g)
            want = torch.cat(
                [
                    (torch.arange(world * 2 * 3, dtype=torch.float64).reshape(world * 2, 3) + 100 * j).to(dt)[
                        rank * 2 : rank * 2 + 2
                    ]
                    for j in range(world)
                ]
            )
            assert torch.equal(o, want), f"{gname} all_to_all_single equal {dt}"
            x = _a2a_input(rank, world, dt)
            want = _a2a_expected(rank, world, dt)
            o = torch.empty_like(want)
            dist.all_to_all_single(
                o,
                x,
                output_split_sizes=[_send_rows(j, rank) for j in range(world)],
                input_split_sizes=[_send_rows(rank, j) for j in range(world)],
                group=g,
            )
            assert torch.equal(o, want), f"{gname} all_to_all_single uneven {dt}"
            out[f"{gname}/a2a/{dt}"] = _digest(o)
        xt = (
            _a2a_input(rank, world, torch.float32, cols=4).t().contiguous().t()
        )  # column-major: non-contiguous
        want = _a2a_expected(rank, world, torch.float32, cols=4)
        o = torch.empty_like(want)
        dist.all_to_all_single(
            o,
            xt,
            output_split_sizes=[_send_rows(j, rank) for j in range(world)],
            input_split_sizes=[_send_rows(rank, j) for j in range(world)],
            group=g,
        )
        assert torch.equal(o, want), "all_to_all_single of a non-contiguous input"
        # all_to_all (lists): uneven sizes and shapes, then equal
        ins = [torch.full((_send_rows(rank, j) + 1, 2), float(10 * rank + j)) for j in range(world)]
        outs = [torch.empty(_send_rows(j, rank) + 1, 2) for j in range(world)]
        dist.all_to_all(outs, ins, group=g)
        assert all(
            torch.equal(outs[j], torch.full_like(outs[j], float(10 * j + rank))) for j in range(world)
        ), "all_to_all lists"
        ins = [torch.full((5,), rank * 10 + j, dtype=torch.int32) for j in range(world)]
        outs = [torch.empty(5, dtype=torch.int32) for _ in range(world)]
        dist.all_to_all(outs, ins, group=g)
        assert all(
            torch.equal(outs[j], torch.full((5,), j * 10 + rank, dtype=torch.int32)) for j in range(world)
        )

    # lossy: every element within the E each call reported; own blocks exact
    opts = nt.Options(
        compression=ncclz.Lossy(rel=1e-3),
        min_elements=1500,
        policy="off",
        lossy_collectives=("reduce", "gather", "scatter", "all_to_all"),
    )
    lg = dist.new_group(backend="ncclz", pg_options=opts)

    def stat(w):
        w.wait()
        (st,) = w.stats
        assert st.compression.startswith("lossy") and st.error_bound > 0, st
        return st.error_bound

    xs = _inputs(world, (64, 128), torch.float32, 400)
    for name in ("sum", "avg"):
        x = xs[rank].clone()
        e = stat(dist.reduce(x, dst=2, op=ops[name], group=lg, async_op=True))
        if rank == 2:
            _close_to(x, _reference(xs, name), world, f"lossy reduce {name}", e, xs)
            out[f"lossy/reduce/{name}"] = _digest(x)
    gl = [torch.empty(64, 128) for _ in range(world)] if rank == 0 else None
    e = stat(dist.gather(xs[rank], gl, dst=0, group=lg, async_op=True))
    if rank == 0:
        assert torch.equal(gl[0], xs[0]), "lossy gather: the root's own block is exact"
        for r in range(world):
            _close_to(gl[r], xs[r].double(), world, f"lossy gather block {r}", e)
        out["lossy/gather"] = _digest(torch.stack(gl))
    o = torch.empty(64, 128)
    e = stat(dist.scatter(o, xs if rank == 1 else None, src=1, group=lg, async_op=True))
    if rank == 1:
        assert torch.equal(o, xs[1]), "lossy scatter: the root's own block is exact"
    _close_to(o, xs[rank].double(), world, "lossy scatter", e)
    x = _inputs(world, (world * 32, 128), torch.float32, 401)[rank]
    o = torch.empty_like(x)
    e = stat(dist.all_to_all_single(o, x, group=lg, async_op=True))
    all_x = _inputs(world, (world * 32, 128), torch.float32, 401)
    want = torch.cat([all_x[j][rank * 32 : (rank + 1) * 32] for j in range(world)])
    assert torch.equal(o[rank * 32 : (rank + 1) * 32], want[rank * 32 : (rank + 1) * 32]), "own block exact"
    _close_to(o, want.double(), world, "lossy all_to_all_single", e)
    # uneven: this rank's input may be under min_elements while the average is over it: every rank
    # still runs the same mode (the backend compares the average)
    cols = 64
    x = _a2a_input(rank, world, torch.float32, cols=cols).repeat(8, 1)
    sends = [8 * _send_rows(rank, j) for j in range(world)]
    recvs = [8 * _send_rows(j, rank) for j in range(world)]
    o = torch.empty(sum(recvs), cols)
    w = dist.all_to_all_single(
        o, x, output_split_sizes=recvs, input_split_sizes=sends, group=lg, async_op=True
    )
    e = stat(w)
    out["lossy/a2av/mode"] = w.stats[0].compression
    for j, blk in enumerate(o.split(recvs)):
        src_x = _a2a_input(j, world, torch.float32, cols=cols).repeat(8, 1)
        start = sum(8 * _send_rows(j, k) for k in range(rank))
        _close_to(blk, src_x[start : start + recvs[j]].double(), world, f"lossy a2av from {j}", e)
    # default lossy_collectives: reduce is lossy, gather stays exact
    dg = dist.new_group(
        backend="ncclz",
        pg_options=nt.Options(compression=ncclz.Lossy(rel=1e-3), min_elements=1024, policy="off"),
    )
    x = xs[rank].clone()
    stat(dist.reduce(x, dst=0, group=dg, async_op=True))
    gl = [torch.empty(64, 128) for _ in range(world)] if rank == 0 else None
    w = dist.gather(xs[rank], gl, dst=0, group=dg, async_op=True)
    w.wait()
    assert w.stats[0].error_bound == 0 and not w.stats[0].compression.startswith("lossy"), w.stats
    if rank == 0:
        assert all(torch.equal(a, b) for a, b in zip(gl, xs)), "gather in a lossy group is exact by default"

    # errors every rank sees alike: every rank raises, and the group still works afterwards
    for what, call in (
        (
            "not divisible",
            lambda: dist.all_to_all_single(torch.empty(world + 1), torch.ones(world + 1), group=exact),
        ),
        (
            "splits sum",
            lambda: dist.all_to_all_single(
                torch.empty(4), torch.ones(4), [1] * world, [2] * world, group=exact
            ),
        ),
        (
            "row size",
            lambda: dist.all_to_all_single(torch.empty(world, 2), torch.ones(world, 3), group=exact),
        ),
    ):
        try:
            call()
        except ncclz.InvalidArgumentError as e:
            assert f"rank {rank}" in str(e) and (
                "split" in str(e)
                or "element" in str(e)
                or "divide" in str(e)
                or "dtype" in str(e)
                or "float" in str(e)
                or "tensors" in str(e)
            ), (what, str(e))
            out[f"err/{what}"] = "ncclz"
        else:
            raise AssertionError(f"{what}: no error")
        x = torch.ones(3)
        dist.all_reduce(x, group=exact)
        assert torch.equal(x, torch.full((3,), float(world))), f"{what}: the group broke"

    # an error only one rank sees: a clear error there, RemoteError on the others at once (no wait
    # for the group's timeout), the group failed
    cases = {
        "gather_list": lambda g: dist.gather(
            torch.ones(4),
            [torch.empty(4), torch.empty(5), torch.empty(4)][:world] if rank == 0 else None,
            0,
            group=g,
        ),
        "scatter_list": lambda g: dist.scatter(
            torch.empty(4),
            [torch.ones(4)] * (world - 1) + [torch.ones(5)] if rank == 0 else None,
            0,
            group=g,
        ),
        "splits": lambda g: dist.all_to_all_single(
            torch.empty(world),
            torch.ones(world),
            None,
            [2] + [0] * (world - 1) if rank == 1 else None,
            group=g,
        ),
        "mismatched_splits": lambda g: dist.all_to_all_single(
            torch.empty(world + (rank == 2)),
            torch.ones(world),
            [1] * (world - 1) + [1 + (rank == 2)],
            None,
            group=g,
        ),
    }
    for what, call in cases.items():
        g = dist.new_group(backend="ncclz", pg_options=nt.Options(compression=None))
        t0 = time.monotonic()
        try:
            call(g)
        except ncclz.InvalidArgumentError as e:
            msg = f"InvalidArgumentError: {e}"
        except ncclz.RemoteError as e:
            msg = f"RemoteError: {e}"
        else:
            raise AssertionError(f"{what}: no error on rank {rank}")
        took = time.monotonic() - t0
        assert took < 20, f"{what}: {took:.1f} s"
        bad_rank = {"gather_list": 0, "scatter_list": 0, "splits": 1}.get(what)
        if bad_rank == rank:
            assert msg.startswith("InvalidArgumentError") and f"rank {rank}" in msg and "cancelled" in msg, (
                msg
            )
        elif bad_rank is not None:
            assert msg.startswith("RemoteError") and f"rank {bad_rank}" in msg, msg
        else:  # counts that disagree between ranks: the runtime names them on every rank
            assert msg.startswith("RemoteError") and "mismatched counts" in msg, msg
        out[f"err1/{what}/{rank}"] = msg[:200]
        try:
            dist.all_reduce(torch.ones(2), group=g)
        except (ncclz.AbortedError, ncclz.RemoteError):
            pass
        else:
            raise AssertionError(f"{what}: the group still ran calls after the cancelled one")
    dist.barrier()


def _local_refusals(rank: int, world: int, out: dict) -> None:
    """An op that only rank 1 refuses before it is queued (a dtype the op does not reduce, an output of
    the wrong size, a tensor list of the wrong length) takes part in the others' call as refused: they
    raise RemoteError naming rank 1 at once. Before, their call met rank 1's next call (here one alike:
    another call's data, silently) and every later call stayed out of step."""
    import ncclz.torch as nt
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    n = 1002  # divisible by 3

    def val(k: int) -> torch.Tensor:  # call k's input on this rank: the results differ call by call
        return torch.full((n,), float(100 * k + rank + 1))

    def odd(k: int) -> bool:  # rank 1's first call is refused there
        return k == 0 and rank == 1

    def bad(t: torch.Tensor, k: int) -> torch.Tensor:  # an integer tensor: no AVG for it
        return t.to(torch.int32) if odd(k) else t

    root2 = dist.BroadcastOptions()
    root2.rootRank = 2
    avg = dist.AllreduceCoalescedOptions()
    avg.reduceOp = ReduceOp.AVG
    cases = {  # call(g, k): this rank's call k of the case
        "all_reduce": lambda g, k: dist.all_reduce(bad(val(k), k), op=ReduceOp.AVG, group=g),
        "reduce": lambda g, k: dist.reduce(bad(val(k), k), dst=2, op=ReduceOp.AVG, group=g),
        "all_gather_into_tensor": lambda g, k: dist.all_gather_into_tensor(
            torch.empty(world * n + odd(k)), val(k), group=g
        ),
        "reduce_scatter_tensor": lambda g, k: dist.reduce_scatter_tensor(
            torch.empty(n // world + odd(k)), val(k), group=g
        ),
        "broadcast": lambda g, k: g.broadcast([val(k)] * (1 + odd(k)), root2).wait(),
        "all_reduce_coalesced": lambda g, k: g.allreduce_coalesced([val(k), bad(val(k), k)], avg).wait(),
        "all_gather_list": lambda g, k: dist.all_gather(
            [torch.empty(n) for _ in range(world + odd(k))], val(k), group=g
        ),
        "reduce_scatter_list": lambda g, k: dist.reduce_scatter(
            torch.empty(n), [val(k) for _ in range(world - odd(k))], group=g
        ),
        "all_to_all_list": lambda g, k: dist.all_to_all(
            [torch.empty(n) for _ in range(world + odd(k))], [val(k)] * world, group=g
        ),
        "gather_list_on_root": lambda g, k: dist.gather(
            val(k), [torch.empty(n) for _ in range(world + odd(k))] if rank == 1 else None, dst=1, group=g
        ),
        "send_recv": lambda g, k: (
            g.send([val(k)] * (1 + odd(k)), 0, 0).wait()
            if rank == 1
            else g.recv([torch.empty(n)], 1, 0).wait()
            if rank == 0
            else None
        ),
    }
    for what, call in cases.items():
        g = dist.new_group(
            backend="ncclz", pg_options=nt.Options(compression=None), timeout=datetime.timedelta(seconds=20)
        )
        told = what != "send_recv" or rank == 0  # the ranks whose call meets rank 1's
        t0 = time.monotonic()
        try:
            call(g, 0)
        except ncclz.InvalidArgumentError as e:
            msg = f"InvalidArgumentError: {e}"
        except ncclz.RemoteError as e:
            msg = f"RemoteError: {e}"
        else:
            msg = None
        took = time.monotonic() - t0
        assert took < 15, f"{what}: {took:.1f} s on rank {rank}"
        if rank == 1:
            assert msg is not None and msg.startswith("InvalidArgumentError"), (what, msg)
        elif told:
            assert msg is not None and msg.startswith("RemoteError") and "rank 1" in msg, (what, rank, msg)
        if what == "send_recv" and rank == 0:  # who is who in the group, before the pair link's numbers
            assert "rank 0 receiving from rank 1" in msg, msg
        out[f"local/{what}/{rank}"] = (msg or "")[:160]
        # the next call: the group failed on the others, so no rank's call completes (before, the
        # others' next call waited for a call rank 1 had already made)
        try:
            call(g, 1)
        except ncclz.Error:
            continue
        assert not told and rank != 1, f"{what}: rank {rank}'s next call completed after the refused one"
    dist.barrier()


def _callbacks(rank: int, world: int, out: dict) -> None:
    """Calls made inside ``then`` callbacks, which torch runs on the thread that completed the Work
    (the group's worker): a synchronous call there, a chain of them, and DDP with PowerSGD's hook (its
    callbacks wait for the all_reduces they start) against the same training on gloo. Before, a
    callback's call was queued behind the job that ran the callback: a hang."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    x, y, z = torch.ones(4), torch.ones(4) * (rank + 1), torch.ones(4)

    def sync_inside(f):
        dist.all_reduce(y)  # waits for its Work inside the callback
        return y

    def chained(f):
        return dist.all_reduce(z, async_op=True).get_future().wait()[0]

    later = torch.full((4,), 10.0)
    fut = dist.all_reduce(x, async_op=True).get_future().then(sync_inside).then(chained)
    dist.all_reduce(later)  # issued after the first: runs after the callbacks' calls on every rank
    assert fut.wait().tolist() == [float(world)] * 4
    assert y.tolist() == [float(sum(range(1, world + 1)))] * 4 and later.tolist() == [10.0 * world] * 4
    # a callback that waits for a call issued after the one it follows (queued behind it): the
    # queued calls run in order, up to that one
    a, c = torch.ones(3), torch.ones(3) * 2
    wa = dist.all_reduce(a, async_op=True)
    wc = dist.all_reduce(c, async_op=True)
    both = wa.get_future().then(lambda f: (wc.wait(), f.value()[0] + c)[1])
    assert both.wait().tolist() == [3.0 * world] * 3
    # ... and for its Future (the same, through the Future the Work gives)
    d, e = torch.ones(3), torch.ones(3) * 3
    wd = dist.all_reduce(d, async_op=True)
    we = dist.all_reduce(e, async_op=True)
    both = wd.get_future().then(lambda f: f.value()[0] + we.get_future().wait()[0])
    assert both.wait().tolist() == [4.0 * world] * 3
    out["callbacks"] = "ok"

    gloo = dist.new_group(backend="gloo")
    params = {}
    for name, group in (("gloo", gloo), ("ncclz", None)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
        state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                   use_error_feedback=True, warm_start=True, random_seed=1)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(5):  # 2 plain all_reduce steps, then PowerSGD's
            opt.zero_grad()
            loss = ddp(torch.randn(16, 32, generator=g)).pow(2).mean()
            loss.backward()
            opt.step()
        params[name] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(params["gloo"], params["ncclz"]):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()
    out["powersgd"] = _digest(torch.cat([p.reshape(-1) for p in params["ncclz"]]))


def _anysource_timeouts(rank: int, world: int, out: dict) -> None:
    """recv without src (Options(any_source=True)), its refusal without the option, and c10d's
    per-call timeout (opts.timeout)."""
    import ncclz.torch as nt
    import torch.distributed as dist

    try:
        dist.recv(torch.empty(2))
    except ncclz.InvalidArgumentError as e:
        assert "any_source=True" in str(e), e
    else:
        raise AssertionError("recv from any source without the option did not raise")

    g = dist.new_group(backend="ncclz", pg_options=nt.Options(any_source=True))
    # every rank sends two messages to every other rank (sync recv and irecv take them in turn)
    sends = []
    for dst in range(world):
        if dst != rank:
            for k in range(2):
                sends.append(dist.isend(torch.full((5,), 10.0 * rank + k), dst, group=g))
    got = []
    for i in range(2 * (world - 1)):
        t = torch.empty(5)
        if i % 2 == 0:
            src = dist.recv(t, group=g)
        else:
            w = dist.irecv(t, group=g)
            w.wait()
            src = dist.get_global_rank(g, w._source_rank())
        assert src != rank and 0 <= src < world, src
        got.append((src, t[0].item()))
        assert torch.equal(t, torch.full((5,), t[0].item())), t
    for q in sends:
        q.wait()
    # each sender's two messages arrive, in its order
    for src in range(world):
        if src != rank:
            vals = [v for s_, v in got if s_ == src]
            assert vals == [10.0 * src, 10.0 * src + 1], (src, got)
    # a recv with src and one without, mixed: each takes its own message (after a barrier: a recv
    # without src may take any rank's next message, also one sent after this rank's previous phase)
    dist.barrier()
    if rank == 0:
        dist.send(torch.full((3,), 1.0), 1, group=g)
        dist.send(torch.full((3,), 2.0), 1, group=g)
    elif rank == 1:
        a, b = torch.empty(3), torch.empty(3)
        dist.recv(a, 0, group=g)
        assert (
            dist.recv(b, group=g) == 0
            and torch.equal(a, torch.full((3,), 1.0))
            and torch.equal(b, torch.full((3,), 2.0))
        ), (a, b)
    dist.barrier()

    # per-call timeout (c10d's opts.timeout): not reached, then reached on rank 0 alone
    pg = dist.new_group(backend="ncclz")
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=60)
    x = torch.ones(10)
    pg.allreduce([x], opts).wait()
    assert torch.equal(x, torch.full((10,), float(world)))
    dist.barrier()
    if rank == 0:
        opts.timeout = datetime.timedelta(seconds=1)
        t0 = time.monotonic()
        w = pg.allreduce([torch.ones(10)], opts)
        try:
            w.wait()
        except ncclz.TimeoutError as e:
            assert "within its timeout of 1 s" in str(e), e
            out["timeout_s"] = time.monotonic() - t0
        else:
            raise AssertionError("the per-call timeout did not fire")
        assert out["timeout_s"] < 15, out
    dist.barrier()
    if rank != 0:
        try:
            dist.all_reduce(torch.ones(10), group=pg)
        except ncclz.RemoteError:
            pass
        else:
            raise AssertionError("a peer of a timed-out call completed it")
    dist.barrier()


def _lossy(rank: int, world: int, out: dict) -> None:
    """Lossy groups: every element within the E each call reported; what stays exact stays exact."""
    import ncclz.torch as nt
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    for kind, spec in (("rel", ncclz.Lossy(rel=1e-3)), ("abs", ncclz.Lossy(abs=1e-2))):
        g = dist.new_group(
            backend="ncclz", pg_options=nt.Options(compression=spec, min_elements=1024, policy="off")
        )
        for name, op in (("sum", ReduceOp.SUM), ("avg", ReduceOp.AVG)):
            xs = _inputs(world, (128, 256), torch.float32, 40)
            x = xs[rank].clone()
            w = dist.all_reduce(x, op=op, group=g, async_op=True)
            w.wait()
            (st,) = w.stats
            assert st.compression.startswith("lossy") and st.error_bound > 0 and st.ratio > 1.5, st
            if kind == "abs":
                assert st.error_bound == pytest.approx(1e-2)
            _close_to(x, _reference(xs, name), world, f"lossy {kind} all_reduce {name}", st.error_bound, xs)
            out[f"lossy/{kind}/{name}"] = _digest(x)
        xs = _inputs(world, (world * 64, 128), torch.float32, 41)
        o = torch.empty(64, 128)
        f = 1.0 / world
        w = dist.reduce_scatter_tensor(o, xs[rank], op=dist._make_nccl_premul_sum(f), group=g, async_op=True)
        w.wait()
        (st,) = w.stats
        assert st.compression.startswith("lossy"), st
        ref = _reference([t * f for t in xs], "sum")[rank * 64 : (rank + 1) * 64]
        _close_to(
            o,
            ref,
            world,
            f"lossy {kind} reduce_scatter premul",
            st.error_bound,
            [t[rank * 64 : (rank + 1) * 64] * f for t in xs],
        )

        # exact in a lossy group: all-gathers (parameters), small tensors, integers, MAX
        def exact_calls(g=g):
            yield (
                "ag",
                dist.all_gather_into_tensor(
                    torch.empty(world * 4096), torch.randn(4096), group=g, async_op=True
                ),
            )
            yield "small", dist.all_reduce(torch.randn(100), group=g, async_op=True)
            yield "int", dist.all_reduce(torch.ones(5000, dtype=torch.int64), group=g, async_op=True)
            yield "max", dist.all_reduce(torch.randn(5000), op=ReduceOp.MAX, group=g, async_op=True)

        for what, w in exact_calls():
            w.wait()
            assert all(s.error_bound == 0 and not s.compression.startswith("lossy") for s in w.stats), (
                what,
                w.stats,
            )
        tr = g.traffic()
        assert tr.compressed_calls >= 3 and tr.wire_bytes < tr.raw_bytes and tr.max_error_bound > 0, tr

    # lossless: bit-identical to none
    g0 = dist.new_group(backend="ncclz", pg_options=nt.Options(compression=None))
    g1 = dist.new_group(backend="ncclz", pg_options=nt.Options(compression=ncclz.Lossless(), policy="off"))
    xs = _inputs(world, (256, 256), torch.float32, 42)
    a, b = xs[rank].clone(), xs[rank].clone()
    dist.all_reduce(a, group=g0)
    w = dist.all_reduce(b, group=g1, async_op=True)
    w.wait()
    assert torch.equal(a, b) and w.stats[0].compression == "lossless", w.stats

    # the 8-bit floats in a lossless group's dtypes: every bit as uncompressed (on one host this size
    # moves raw on the latency or direct path; over a link its bytes take Rans: bench/results/byte_types.md)
    g8 = dist.new_group(
        backend="ncclz",
        pg_options=nt.Options(
            compression=ncclz.Lossless(), dtypes=(torch.float8_e5m2,), min_elements=1024, policy="off"
        ),
    )
    xs = [t.to(torch.float8_e5m2) for t in _inputs(world, (64, 1024), torch.float32, 44)]
    outs = [torch.empty_like(xs[0]) for _ in range(world)]
    w = dist.all_gather(outs, xs[rank], group=g8, async_op=True)
    w.wait()
    assert all(torch.equal(o.view(torch.uint8), x.view(torch.uint8)) for o, x in zip(outs, xs))
    assert all(s.compression == "lossless" for s in w.stats), w.stats

    # error feedback: the residual of step t is added to the same call of step t+1
    ge = dist.new_group(
        backend="ncclz",
        pg_options=nt.Options(
            compression=ncclz.Lossy(abs=0.05), min_elements=1024, error_feedback=True, policy="off"
        ),
    )
    p = torch.nn.Parameter(torch.zeros(4096))
    opt = torch.optim.SGD([p], lr=0.0)
    g_local = (
        _inputs(world, (4096,), torch.float32, 43)[rank] * 0.01
    )  # below the grid step: plain rounding loses it
    total = torch.zeros(4096, dtype=torch.float64)
    steps = 40
    for _ in range(steps):
        x = g_local.clone()
        dist.all_reduce(x, op=ReduceOp.AVG, group=ge)
        total += x.double()
        opt.step()  # ends the error-feedback round
    exact = _reference(_inputs(world, (4096,), torch.float32, 43), "avg") * 0.01
    drift = (total / steps - exact).abs().max().item()
    # without feedback every step would make the same error (up to E = 0.05); with it the mean converges
    assert drift < 0.05 / 4, f"error feedback: mean error {drift:.3g} does not shrink below E/4"
    out["ef_drift"] = drift


def _train(rank: int, world: int, out: dict, tmp: str) -> None:
    """The DDP and FSDP2 examples on gloo and on ncclz (none, lossless, rel 1e-3), in these processes."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import ddp_backend
    import fsdp2_backend

    runs = 0
    for ex_name, ex in (("ddp", ddp_backend), ("fsdp2", fsdp2_backend)):
        results = {}
        for mode in ("gloo", "none", "lossless", "rel=1e-3"):
            os.environ["NCCLZ_TORCH_COMPRESSION"] = "none" if mode == "gloo" else mode
            runs += 1
            init = f"file://{tmp}/init_{runs}?rank={rank}&world_size={world}"
            results[mode] = ex.train(
                "gloo" if mode == "gloo" else "ncclz", 4, init_method=init, verbose=False
            )
        ref = results["gloo"]
        for mode in ("none", "lossless"):
            r = results[mode]
            assert all(torch.equal(a, b) for a, b in zip(ref["params"], r["params"])), (
                f"{ex_name} {mode}: params"
            )
            assert all(torch.equal(a, b) for a, b in zip(ref["grads"], r["grads"])), (
                f"{ex_name} {mode}: grads"
            )
        lossy = results["rel=1e-3"]
        bound = lossy["bound"]
        assert bound > 0, f"{ex_name}: no lossy call in the first step"
        compressed = 0
        for a, b in zip(ref["grads"], lossy["grads"]):
            # gloo's average is the exact average rounded once; ncclz's is within E of the exact one
            tol = bound * (1 + 1e-6) + 2 * torch.finfo(torch.float32).eps * a.abs()
            err = (a - b).abs()
            assert bool((err <= tol).all()), (
                f"{ex_name} lossy: max error {err.max().item():.3g} > E {bound:.3g}"
            )
            compressed += int(not torch.equal(a, b))
        assert compressed >= 1, f"{ex_name}: lossy mode changed no gradient (was it compressed?)"
        assert abs(lossy["loss"] - ref["loss"]) < 0.05, (ex_name, lossy["loss"], ref["loss"])
        out[f"{ex_name}_bound"] = bound


def _bad_options(rank: int, world: int, out: dict) -> None:
    """Bad or mismatched pg_options fail on every rank at group creation, with a reason, fast."""
    import ncclz.torch as nt
    import torch.distributed as dist

    cases = {
        "unknown": [{"compresion": None} if r == 1 else None for r in range(world)],
        "mismatch": [nt.Options(min_elements=1) if r == world - 1 else nt.Options() for r in range(world)],
        "lossy_ints": [{"compression": ncclz.Lossy(rel=1e-3), "dtypes": (torch.int32,)}] * world,
        "foreign": [object()] * world,
    }
    for name, per_rank in cases.items():
        t0 = time.monotonic()
        try:
            dist.new_group(backend="ncclz", pg_options=per_rank[rank])
        except ncclz.InvalidArgumentError as e:
            msg = str(e)
        else:
            raise AssertionError(f"{name}: new_group did not raise on rank {rank}")
        out[name] = msg
        assert time.monotonic() - t0 < 30, f"{name}: took {time.monotonic() - t0:.1f} s"
        if name == "unknown":
            assert ("compresion" in msg) if rank == 1 else ("rank(s) [1]" in msg), msg
        elif name == "mismatch":
            assert f"[{world - 1}]" in msg or "rank(s) [" in msg, msg
            assert "min_elements" in msg, msg
        elif name == "lossy_ints":
            assert "integer-only" in msg, msg
        else:
            assert "ncclz.torch.Options" in msg, msg
    x = torch.ones(3)
    dist.all_reduce(x)  # the world group still works
    assert torch.equal(x, torch.full((3,), float(world)))


def _dead_peer(rank: int, world: int, out: dict) -> None:
    """A rank dies: the others' calls fail with an ncclz error (no hang), and shutdown returns."""
    import torch.distributed as dist

    x = torch.ones(1000)
    dist.all_reduce(x)
    if rank == world - 1:
        os._exit(3)  # no cleanup at all
    t0 = time.monotonic()
    try:
        for _ in range(50):
            dist.all_reduce(torch.ones(1 << 16))
    except ncclz.RemoteError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    else:
        raise AssertionError("all_reduce with a dead peer did not fail")
    out["seconds"] = time.monotonic() - t0
    dist.destroy_process_group()


def _exit_pending(rank: int, world: int, out: dict, tmp: str) -> None:
    """Exit with calls in flight and no destroy_process_group: no hang, no crash."""
    import torch.distributed as dist

    for _ in range(4):
        dist.all_reduce(torch.ones(1 << 18), async_op=True)
    # every rank has issued its calls before any leaves (a rank that leaves aborts its groups, so the
    # others' calls may then fail: that is delivered to their Works, which nobody waits for here)
    open(os.path.join(tmp, f"issued{rank}"), "w").close()
    while not all(os.path.exists(os.path.join(tmp, f"issued{r}")) for r in range(world)):
        time.sleep(0.01)


def _job_topology(rank: int, world: int, out: dict) -> None:
    """NCCLZ_TOPO_HOSTS=2x2 describes the job: groups of some ranks and point-to-point pairs get their
    part of it (before, their communicators raised: "describes 2 x 2 ranks but the communicator has 2")."""
    import torch.distributed as dist

    pg = dist.distributed_c10d._get_default_group()  # the ProcessGroupNCCLZ itself (extended API)
    out["world"] = list(pg._comm.topology.host_of)
    for ranks in ([0, 2], [1, 0], [1, 2, 3]):
        g = dist.new_group(ranks=ranks, backend="ncclz")
        if rank in ranks:
            x = torch.full((1000,), float(rank + 1))
            dist.all_reduce(x, group=g)
            assert torch.equal(x, torch.full((1000,), float(sum(r + 1 for r in ranks)))), ranks
            out[f"group{ranks}"] = list(g._comm.topology.host_of)
    for peer in (rank ^ 1, rank ^ 2):  # pairs on one host ((0, 1), (2, 3)), then across hosts ((0, 2), (1, 3))
        x, y = torch.full((4097,), float(rank)), torch.empty(4097)
        if rank < peer:
            dist.send(x, peer)
            dist.recv(y, peer)
        else:
            dist.recv(y, peer)
            dist.send(x, peer)
        assert torch.equal(y, torch.full((4097,), float(peer))), f"send/recv with {peer}"


SCENARIOS = {
    "job_topology": _job_topology,
    "ops": _ops,
    "lossy": _lossy,
    "rooted": _rooted,
    "anysource_timeouts": _anysource_timeouts,
    "local_refusals": _local_refusals,
    "callbacks": _callbacks,
    "train": _train,
    "bad_options": _bad_options,
    "dead_peer": _dead_peer,
    "exit_pending": _exit_pending,
}


def _worker(scenario: str, rank: int, world: int, tmp: str) -> None:
    import ncclz.torch  # noqa: F401 - registers the backend
    import torch.distributed as dist

    torch.set_num_threads(1)
    import faulthandler

    faulthandler.dump_traceback_later(_timeout(scenario) - 30, exit=True)  # a hang shows where it is
    out: dict = {}
    if scenario == "train":
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
        SCENARIOS[scenario](rank, world, out, tmp)
    elif scenario == "exit_pending":
        dist.init_process_group("ncclz", init_method=f"file://{tmp}/init", rank=rank, world_size=world)
        SCENARIOS[scenario](rank, world, out, tmp)
    else:
        dist.init_process_group("ncclz", init_method=f"file://{tmp}/init", rank=rank, world_size=world)
        SCENARIOS[scenario](rank, world, out)
        if dist.is_initialized():
            dist.destroy_process_group()
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


# ------------------------------------------------------------------ test side
def _run(scenario: str, world: int, tmp_path, env=None, expect_rc=None) -> list:
    e = dict(os.environ, NCCLZ_TIMEOUT="60", OMP_NUM_THREADS="1")
    e.pop("NCCLZ_TORCH_COMPRESSION", None)
    e.update(env or {})
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", scenario, str(r), str(world), str(tmp_path)],
            env=e,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    outputs = []
    deadline = time.monotonic() + _timeout(scenario)
    for p in procs:
        try:
            o, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{scenario}: a rank hung past {_timeout(scenario)} s")
        outputs.append(o)
    for r, p in enumerate(procs):
        want = 0 if expect_rc is None else expect_rc.get(r, 0)
        assert p.returncode == want, f"{scenario} rank {r} exited {p.returncode}:\n{outputs[r][-6000:]}"
    return outputs


def _results(tmp_path, ranks) -> list:
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in ranks]


def test_collectives_dtypes_ops_and_refusals(tmp_path):
    _run("ops", 3, tmp_path)
    res = _results(tmp_path, range(3))
    assert res[1]["late_peer"] and res[2]["late_peer"], "the late peers did not fail"
    shared = [{k: v for k, v in r.items() if k != "late_peer"} for r in res]
    assert len(shared[0]) > 40 and all(r == shared[0] for r in shared), "ranks disagree on some result"


def test_groups_and_pairs_take_their_part_of_the_jobs_topology(tmp_path):
    _run("job_topology", 4, tmp_path, env={"NCCLZ_TOPO_HOSTS": "2x2"})
    res = _results(tmp_path, range(4))
    assert all(r["world"] == [0, 0, 1, 1] for r in res)
    assert res[0]["group[0, 2]"] == [0, 1] and res[1]["group[1, 0]"] == [0, 0]  # hosts numbered by lowest rank
    assert res[3]["group[1, 2, 3]"] == [0, 1, 1]


def test_reduce_gather_scatter_all_to_all(tmp_path):
    _run("rooted", 3, tmp_path)
    res = _results(tmp_path, range(3))
    assert res[0]["lossy/a2av/mode"].startswith("lossy")
    assert all(r["lossy/a2av/mode"] == res[0]["lossy/a2av/mode"] for r in res)
    # results each rank holds for everyone agree bit for bit
    for key in ("none/a2a/torch.float32", "lossless/a2a/torch.complex64"):
        assert key in res[0]
    # the uneven lossy all-to-all: rank totals differ around min_elements, the mode is the same
    sends = [sum(8 * _send_rows(i, j) * 64 for j in range(3)) for i in range(3)]
    assert min(sends) < 1500 <= sum(sends) // 3, sends


def test_a_call_only_one_rank_refuses_fails_the_others_at_once(tmp_path):
    outs = _run("local_refusals", 3, tmp_path)
    res = _results(tmp_path, range(3))
    assert all(len(r) == 11 for r in res), res
    # failed groups leave nothing alive at exit (before: "nanobind: leaked instance ... Communicator")
    assert not any("leaked" in o for o in outs), [o[-2000:] for o in outs if "leaked" in o]


def test_a_failed_work_frees_what_its_job_held():
    """A Work whose job raised gives its Future the error without the job's traceback: the Future
    holds it in C++, where Python's collector cannot see it, so a traceback there kept the job's
    frames (its group, communicators) alive until exit. Same type, message and attributes."""
    import gc
    import weakref

    from ncclz.torch._work import Work, Worker

    class Held:
        pass

    held = Held()
    ref = weakref.ref(held)

    def job(w, h=held):  # h: what the job's frame holds
        err = ncclz.RemoteError("rank 2 failed")
        err.rank = 2
        raise err

    worker = Worker("test-worker")
    w = worker.submit(job, Work("all_reduce", []))
    with pytest.raises(ncclz.RemoteError, match="rank 2 failed"):
        w.wait()
    with pytest.raises(ncclz.RemoteError, match="rank 2 failed") as got:
        w.get_future().wait()
    assert got.value.rank == 2 and type(got.value) is ncclz.RemoteError
    worker.close("test over")
    del held, job, w, got
    gc.collect()
    assert ref() is None, "the failed job's frame is still alive"


def test_calls_inside_future_callbacks_and_powersgd(tmp_path):
    _run("callbacks", 3, tmp_path)
    res = _results(tmp_path, range(3))
    assert all(r["callbacks"] == "ok" for r in res)
    assert len({r["powersgd"] for r in res}) == 1, "ranks ended with different parameters"


def test_recv_from_any_source_and_per_call_timeouts(tmp_path):
    _run("anysource_timeouts", 3, tmp_path)
    assert 0.9 < _results(tmp_path, [0])[0]["timeout_s"] < 15


def test_lossy_groups_bound_every_element(tmp_path):
    _run("lossy", 3, tmp_path)
    res = _results(tmp_path, range(3))
    digests = [{k: v for k, v in r.items() if k.startswith("lossy/")} for r in res]
    assert digests[0] and all(d == digests[0] for d in digests), "lossy results differ across ranks"


def test_ddp_and_fsdp2_examples_match_gloo(tmp_path):
    # policy off: the examples' calls run the modes they ask for (the default policy runs their small,
    # latency-bound buckets uncompressed)
    _run("train", 2, tmp_path, env={"NCCLZ_POLICY": "off"})
    res = _results(tmp_path, range(2))
    assert res[0]["ddp_bound"] > 0 and res[0]["fsdp2_bound"] > 0


def test_bad_options_fail_on_every_rank_at_init(tmp_path):
    _run("bad_options", 3, tmp_path)


def test_dead_peer_fails_calls_instead_of_hanging(tmp_path):
    _run("dead_peer", 3, tmp_path, env={"NCCLZ_TIMEOUT": "30"}, expect_rc={2: 3})
    for r in _results(tmp_path, range(2)):
        assert r["seconds"] < 40, r


def test_exit_with_calls_in_flight_and_no_destroy(tmp_path):
    outs = _run("exit_pending", 2, tmp_path)
    for o in outs:
        assert "Traceback" not in o and "terminate" not in o and "Fatal" not in o, o[-3000:]


def test_options_validation():
    import ncclz.torch as nt

    assert nt.Options().compression == ncclz.Lossless()
    with pytest.raises(ncclz.InvalidArgumentError, match="integer-only"):
        nt.Options(compression=ncclz.Lossy(rel=1e-3), dtypes=(torch.int64,))
    with pytest.raises(ncclz.InvalidArgumentError, match="floating-point"):
        nt.Options(compression=ncclz.Lossy(rel=1e-3), dtypes=(torch.float32, torch.int64))
    with pytest.raises(ncclz.InvalidArgumentError, match="error_feedback"):
        nt.Options(error_feedback=True)
    with pytest.raises(ncclz.InvalidArgumentError, match="exact_compression"):
        nt.Options(exact_compression=ncclz.Lossy(rel=1e-3))
    with pytest.raises(ncclz.InvalidArgumentError, match="unknown collective"):
        nt.Options(lossy_collectives=("all_reduce", "alltoall"))
    with pytest.raises(ncclz.InvalidArgumentError, match="cannot compress"):
        nt.Options(dtypes=(torch.int16,))  # reduced in int32, not compressed
    assert nt.Options(dtypes=(torch.int8, torch.uint32)).dtypes == (torch.int8, torch.uint32)
    f8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    assert nt.Options(dtypes=f8).dtypes == f8  # lossless: their bytes compress
    with pytest.raises(ncclz.InvalidArgumentError, match="torch.float8_e5m2.*lossy needs"):
        nt.Options(compression=ncclz.Lossy(rel=1e-3), dtypes=(torch.float32, torch.float8_e5m2))
    with pytest.raises(ncclz.InvalidArgumentError, match="strings"):
        nt.Options(compression="lossless")
    with pytest.raises(ncclz.InvalidArgumentError, match="unknown option"):
        nt.Options.coerce({"compresion": None})
    with pytest.raises(ncclz.InvalidArgumentError, match="ncclz.torch.Options"):
        nt.Options.coerce(42)
    assert nt.Options.coerce({"min_elements": 5}).min_elements == 5
    a, b = nt.Options(), nt.Options(min_elements=1)
    assert a.fingerprint() == nt.Options().fingerprint() != b.fingerprint()
    from ncclz.torch.options import parse_spec

    assert parse_spec("rel=1e-3") == ncclz.Lossy(rel=1e-3) and parse_spec("abs:0.5") == ncclz.Lossy(abs=0.5)
    assert parse_spec("none") is None and parse_spec("lossless") == ncclz.Lossless()
    with pytest.raises(ncclz.InvalidArgumentError, match="NCCLZ_TORCH_COMPRESSION"):
        parse_spec("fast")
    # the per-tensor rule
    o = nt.Options(compression=ncclz.Lossy(rel=1e-3), min_elements=100)
    big, small = torch.zeros(200), torch.zeros(10)
    assert o.spec_for("all_reduce", big, True) == ncclz.Lossy(rel=1e-3)
    assert o.spec_for("all_reduce", big, False) is None  # MAX, PRODUCT: exact
    assert o.spec_for("all_gather", big, False) is None  # parameters: exact by default
    assert o.spec_for("all_reduce", small, True) is None
    assert o.spec_for("all_reduce", big.long(), True) is None
    assert nt.Options(min_elements=100).spec_for("broadcast", big, False) == ncclz.Lossless()
    assert o.spec_for("reduce", big, True) == ncclz.Lossy(rel=1e-3)  # reduce is a gradient reduction
    for coll in ("gather", "scatter", "all_to_all"):  # data movement: exact unless named
        assert o.spec_for(coll, big, False) is None
    o2 = nt.Options(compression=ncclz.Lossy(rel=1e-3), min_elements=100, lossy_collectives=("all_to_all",))
    assert o2.spec_for("all_to_all", big, False) == ncclz.Lossy(rel=1e-3)
    assert (
        o2.spec_for("all_reduce", big, True) is None
        and o2.spec_for_count("all_to_all", torch.float32, 99, False) is None
    )


def test_other_devices_are_refused_clearly():
    from ncclz.torch import _tensors

    with pytest.raises(ncclz.InvalidArgumentError, match="CPU and CUDA tensors"):
        _tensors.check_tensor(torch.ones(4, device="meta"), "all_reduce")
    with pytest.raises(ncclz.InvalidArgumentError, match="one device"):
        _tensors.same_device([torch.ones(1), torch.ones(1, device="meta")], "all_gather")


def test_registered_on_import():
    import ncclz.torch  # noqa: F401
    import torch.distributed as dist

    assert "ncclz" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["ncclz"] == ["cpu", "cuda"]
    assert dist.Backend("ncclz") == "ncclz"


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
