"""Multi-process tests of all_to_all (equal blocks and uneven splits), reduce, gather and scatter:
real ranks over shared memory and sockets (tests/python/_collective_scenarios.py scenario_pairwise_rooted*).

Each rank checks every element itself (fp64 reference; the bound in lossy mode; the same bits for
data movement in none / lossless and for a rank's own block in every mode; lossless the same bits as
none); here we check that every rank finished, and the wire bytes lossy mode saves.
"""

from __future__ import annotations

import pytest
from test_comm import run_ranks


@pytest.mark.parametrize("transport,n", [("shm", 2), ("shm", 3), ("shm", 4), ("socket", 2), ("socket", 3),
                                         ("socket", 4)])
def test_every_mode_dtype_root_and_split(tmp_path, transport, n):
    # policy off: every call runs the mode it asks for (the default policy runs these small,
    # latency-bound messages uncompressed)
    ranks = run_ranks(tmp_path, "pairwise_rooted", n, transport, env={"NCCLZ_POLICY": "off"}, timeout=300)
    ranks.assert_ok()
    for rank, res in enumerate(ranks.results):
        assert res["checks"] > 100, res["checks"]
        # smooth data: lossy moves far fewer bytes than none, lossless somewhat fewer
        for coll in ("all_to_all", "gather", "reduce"):
            none = res[f"wire/{coll}/none"]
            if coll == "gather" and rank == 0 or coll == "reduce" and rank == n - 1:
                assert none == 0, (coll, rank, none)  # the root sends nothing
                continue
            assert none > 0, (coll, rank)
            # (the reduce's partial sums add the ranks' noise: measured 2.9x at 4 ranks, abs 0.01)
            factor = 2 if coll == "reduce" else 3
            for mode in ("rel0.001", "abs0.01"):
                assert res[f"wire/{coll}/{mode}"] * factor < none, (coll, rank, mode, res[f"wire/{coll}/{mode}"], none)
            assert res[f"wire/{coll}/lossless"] < none, (coll, rank)


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_errors_raise_on_every_rank_and_leave_the_communicator_usable(tmp_path, transport):
    n = 3
    ranks = run_ranks(tmp_path, "pairwise_rooted_errors", n, transport, timeout=120)
    ranks.assert_ok()
    for rank, res in enumerate(ranks.results):
        e = res["errors"]
        for name in ("bad_root_reduce", "bad_root_gather", "bad_root_scatter"):
            assert e[name].startswith("InvalidArgumentError") and "is not a rank" in e[name], e[name]
        assert "needs a floating-point type, got int32" in e["lossy_int_a2a"]
        assert "needs a floating-point type, got int64" in e["lossy_int_gather"]
        assert "prod is not offered in lossy mode" in e["lossy_prod_reduce"]
        assert "divisible by the world size" in e["a2a_indivisible"]
        assert "send_counts add up to 13 rows but the input" in e["a2a_counts_sum"]
        assert "one non-negative count per rank" in e["a2a_counts_len"]
        assert "one non-negative count per rank" in e["a2a_counts_negative"]
        assert "recv_counts= needs send_counts= too" in e["a2a_recv_only"]
        assert "all_to_all out has 24 elements" in e["a2a_bad_out"]
        assert "divisible by the world size" in e["scatter_root_indivisible"]
        # root-only buffers: the rank with the bad one raises, the others RemoteError naming it
        if rank == 0:
            assert "gather out has 15 elements (shape (3, 5)), expected shape (3, 12, 3)" in e["gather_bad_out"]
            assert "reduce out has 5 elements" in e["reduce_bad_out"]
            assert e["scatter_no_out"].startswith("RemoteError") and "invalid arguments" in e["scatter_no_out"]
        else:
            assert "is not the root (0): pass out=" in e["scatter_no_out"]
            for name in ("gather_bad_out", "reduce_bad_out"):
                assert e[name].startswith("RemoteError") and "rank 0 called" in e[name], e[name]
        m = e["counts_mismatch"]
        assert m.startswith("RemoteError") and "mismatched counts in all_to_allv" in m, m
        assert "rank 0 sends 9 elements to rank 1 (its send_counts[1]) but rank 1 expects 6 from rank 0" in m, m
        for name in ("roots_differ", "calls_differ", "dtypes_differ"):
            assert e[name].startswith("RemoteError") and "mismatched calls" in e[name], e[name]
        assert "reduce(count=36, float32, sum, root=2" in e["roots_differ"]
        assert "all_to_all(count=12, float32, none)" in e["calls_differ"]
        assert "gather(send_count=36, float32, root=0, none)" in e["calls_differ"]
