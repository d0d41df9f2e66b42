"""docs/ENVIRONMENT.md against the code: every variable the code reads is in the table, and
the defaults the table gives are the runtime's own (CommConfig.defaults())."""

from __future__ import annotations

import re
from pathlib import Path

import ncclz
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ENVIRONMENT.md"


def _table() -> dict:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*`([A-Z][A-Z0-9_]*)`\s*\|\s*([^|]*?)\s*\|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    assert m, f"not a size: {text!r}"
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


@pytest.mark.skipif(not DOC.exists(), reason="needs the repository's docs/ (not an installed copy)")
def test_every_variable_the_code_reads_is_documented():
    # A variable the code reads is named by a string literal of its own ("NCCLZ_X" or 'NCCLZ_X'):
    # getenv / env::get_* in C++, os.environ / _env in Python. (Macros are never quoted.)
    used = set()
    for d, pattern in (
        (ROOT / "cpp", "*.[ch]pp"),
        (ROOT / "python" / "ncclz", "*.py"),
        (ROOT / "cuda", "*.c*"),
    ):
        for f in d.rglob(pattern):
            used |= set(re.findall(r"[\"'](NCCLZ_[A-Z0-9_]*[A-Z0-9])[\"']", f.read_text(errors="replace")))
    assert "NCCLZ_TIMEOUT" in used and "NCCLZ_NSLOTS" in used  # the scan finds what it should
    missing = sorted(used - set(_table()))
    assert not missing, f"read by the code but not in docs/ENVIRONMENT.md: {missing}"


@pytest.mark.skipif(not DOC.exists(), reason="needs the repository's docs/ (not an installed copy)")
def test_documented_defaults_are_the_runtimes():
    t = _table()
    d = ncclz._core.comm.CommConfig.defaults()
    assert float(t["NCCLZ_TIMEOUT"]) == d.timeout_s
    assert t["NCCLZ_TRANSPORT"] == "auto" and d.transport == ""
    assert t["NCCLZ_SOCKET_IFNAME"] == '""' and d.socket_ifname == ""
    assert float(t["NCCLZ_SOCKET_THROTTLE_GBPS"]) == d.throttle_gbps
    assert t["NCCLZ_NCHANNELS"] == "a core each, 2-8" and d.nchannels == 0  # 0: agreed at creation
    assert _size(t["NCCLZ_SLOT_BYTES"]) == d.slot_bytes
    assert int(t["NCCLZ_NSLOTS"]) == d.nslots
    assert int(t["NCCLZ_PIPELINE_QUANTIZE"]) == d.pipeline_quantize
    assert int(t["NCCLZ_HIER_ROUNDS"]) == d.hier_rounds
    assert int(t["NCCLZ_SPARSE_INPUT"]) == d.sparse_input
    assert int(t["NCCLZ_PERSISTENT"]) == d.persistent
    assert _size(t["NCCLZ_SPARSE_SLICE_BYTES"]) == d.sparse_slice_bytes
    assert int(t["NCCLZ_P2P"]) == d.p2p
    assert _size(t["NCCLZ_LATENCY_BYTES"]) == d.latency_bytes
    assert t["NCCLZ_TWO_HOP_BYTES"] == "(2N-3) x `NCCLZ_SLOT_BYTES` / 4 or 0"
    assert d.two_hop_bytes == -1  # agreed at creation
    assert t["NCCLZ_DIRECT_FROM_BYTES"] == "2 MiB, 256 KiB or 128 KiB, or 0"
    assert d.direct_from_bytes == -1  # agreed at creation
    assert t["NCCLZ_TOKEN"] == '""' and d.token == ""
    assert t["MASTER_ADDR"] == d.master_addr
    assert int(t["MASTER_PORT"]) == d.master_port
