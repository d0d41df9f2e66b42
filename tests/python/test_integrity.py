"""End-to-end integrity of the collectives: a slot corrupted in flight is an error on every rank.

The transport's test hook NCCLZ_TEST_CORRUPT=<rank>:<peer>:<slot>:<bit>[:header] flips one bit of
one slot after its CRC-32C was taken (or of a socket frame header): what a NIC, cable or switch
fault that TCP's checksum misses does. Each rank (tests/python/_integrity_worker.py) runs one call
and checks any result it gets against the exact reference; here we check that every rank raised
CorruptDataError, the finder naming the sender, channel and slot, the others naming the finder,
that no rank returned (let alone a wrong result), and that the communicator is aborted after. (A rank whose own part of the call was complete before
the notice reached it returns a correct result and raises at its next call: the late-slot test.)
docs/TRANSPORTS.md, "Checksums", says what each rank sees.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import ncclz
import pytest

WORKER = Path(__file__).with_name("_integrity_worker.py")

pytestmark = pytest.mark.skipif(
    not hasattr(ncclz._core, "comm"), reason="ncclz._core was built without the collective runtime bindings"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp_path, transport, verb, mode, fault, n=3, checksum=None, timeout=90.0):
    """Runs the worker on n ranks (processes, or threads for inproc); returns (results, log)."""
    out = tmp_path / f"{transport}-{verb}-{mode}"
    out.mkdir()
    env = dict(os.environ)
    env.update(NCCLZ_TEST_CORRUPT=fault, NCCLZ_TIMEOUT="60", NCCLZ_POLICY="off", PYTHONUNBUFFERED="1")
    env.pop("NCCLZ_CHECKSUM", None)
    if checksum:
        env["NCCLZ_CHECKSUM"] = checksum
    if transport == "inproc":
        cmds = [([sys.executable, str(WORKER), str(out), verb, mode, "--threads", str(n)], env)]
    else:
        port, token = free_port(), secrets.token_hex(8)
        cmds = []
        for r in range(n):
            e = dict(
                env,
                RANK=str(r),
                WORLD_SIZE=str(n),
                LOCAL_RANK=str(r),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                NCCLZ_TOKEN=token,
                NCCLZ_TRANSPORT=transport,
            )
            cmds.append(([sys.executable, str(WORKER), str(out), verb, mode], e))
    procs = [
        subprocess.Popen(c, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for c, e in cmds
    ]
    deadline = time.monotonic() + timeout
    logs = []
    for p in procs:
        try:
            logs.append(
                p.communicate(timeout=max(0.1, deadline - time.monotonic()))[0].decode(errors="replace")
            )
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.send_signal(signal.SIGKILL)
            pytest.fail(f"{transport} {verb} {mode}: ranks did not finish in {timeout:g} s")
    log = "\n".join(
        f"--- process {i} (exit {p.returncode}) ---\n{t[-3000:]}" for i, (p, t) in enumerate(zip(procs, logs))
    )
    results = []
    for r in range(n):
        f = out / f"rank{r}.json"
        assert f.exists(), f"rank {r} wrote no result\n{log}"
        results.append(json.loads(f.read_text()))
    return results, log


def assert_no_wrong_result(results, log, finder, sender, must_raise):
    """The finder and every rank in must_raise raise CorruptDataError in the call; any other rank
    either does too or returns a correct result and raises CorruptDataError at its next call."""
    for res in results:
        r = res["rank"]
        if r == finder:
            assert res["call"] == "CorruptDataError", f"{res}\n{log}"
            assert f"rank {finder} received corrupt data from rank {sender}" in res["message"], res
        elif res["call"] == "returned":
            assert r not in must_raise, f"rank {r} returned (correct: {res['correct']})\n{log}"
            assert res["correct"], f"rank {r} returned a wrong result: {res}\n{log}"
            assert res["second"] == "CorruptDataError", res
            continue
        else:
            assert res["call"] == "CorruptDataError", f"rank {r}: {res}\n{log}"
            assert (
                f"the call failed on every rank because rank {finder} received corrupt" in res["message"]
            ), res
        assert res["second"] == "AbortedError", res


# Rank 0's second post to rank 1: the first after the call descriptor (one, on the pair's
# point-to-point link), so every rank's result depends on it.
@pytest.mark.parametrize("mode", ["none", "lossless", "lossy"])
@pytest.mark.parametrize("transport,checksum", [("socket", None), ("shm", "on"), ("inproc", "on")])
def test_corrupt_slot_fails_every_rank(tmp_path, transport, checksum, mode):
    results, log = run(tmp_path, transport, "all_reduce", mode, "0:1:1:12345", checksum=checksum)
    assert_no_wrong_result(results, log, finder=1, sender=0, must_raise={0, 1, 2})
    finder = results[1]["message"]
    assert f"({transport} transport, channel " in finder and ", slot " in finder and "CRC-32C" in finder, (
        finder
    )


# A later slot: a rank whose own part of the call was complete before the notice reached it may
# return, but only a correct result (every slot it read passed its check), and its next call raises.
@pytest.mark.parametrize("slot", [3, 4, 6, 8])  # 8: the call's last post to rank 1
def test_corrupt_late_slot_never_gives_a_wrong_result(tmp_path, slot):
    results, log = run(tmp_path, "shm", "all_reduce", "lossy", f"0:1:{slot}:4242", checksum="on")
    assert_no_wrong_result(results, log, finder=1, sender=0, must_raise={1})


# Ranks 1 and 2 need what rank 0 sent through rank 1; rank 0 (the broadcast's root, the sender of
# the ring shift, the owner of the corrupted all-gather chunk) may have finished its part.
@pytest.mark.parametrize("verb", ["all_gather", "broadcast", "sendrecv"])
def test_corrupt_slot_fails_every_verb(tmp_path, verb):
    results, log = run(tmp_path, "socket", verb, "lossy" if verb == "all_gather" else "none", "0:1:2:999")
    assert_no_wrong_result(results, log, finder=1, sender=0, must_raise={1, 2})


def test_corrupt_frame_header_fails_every_rank(tmp_path):
    results, log = run(tmp_path, "socket", "all_reduce", "lossless", "2:0:4:77:header")
    for res in results:
        assert res["call"] == "CorruptDataError", f"{res}\n{log}"
        assert "rank 0 received a corrupt frame header from rank 2" in res["message"], res


def test_checksum_setting_must_agree(tmp_path):
    port = free_port()
    procs = []
    for r in range(2):
        e = dict(
            os.environ,
            RANK=str(r),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NCCLZ_TOKEN="t",
            NCCLZ_TRANSPORT="socket",
            NCCLZ_TIMEOUT="20",
            NCCLZ_CHECKSUM="on" if r == 0 else "off",
        )
        code = "import ncclz\ntry:\n    ncclz.init()\nexcept ncclz.InvalidArgumentError as e:\n    print(e)\n"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    for p in procs:
        text = p.communicate(timeout=60)[0].decode()
        assert p.returncode == 0 and "set NCCLZ_CHECKSUM the same way on every rank" in text, text
