"""The store rendezvous's wait for rank 0's unique id (python/ncclz/store.py, fetch): it says what
it waits for on stderr after NCCLZ_WAIT_REPORT seconds and again on the bootstrap's schedule, ends
with the value or a TimeoutError naming the key, and works with stores that offer check(), only
wait(keys, timedelta), or neither. In-process stores; no ranks."""

from __future__ import annotations

import datetime
import threading
import time

import ncclz
import pytest
from ncclz import store as st


class DictStore:
    """A store with set and get only (get is called once the key is there, or at once)."""

    def __init__(self):
        self.data = {}
        self.lock = threading.Lock()

    def set(self, key, value):
        with self.lock:
            self.data[key] = value

    def get(self, key):
        with self.lock:
            return self.data[key]


class CheckStore(DictStore):
    def check(self, keys):
        with self.lock:
            return all(k in self.data for k in keys)


class WaitStore(DictStore):
    """Only wait(keys, timedelta), raising on expiry as torch's stores do."""

    def wait(self, keys, timeout):
        end = time.monotonic() + timeout.total_seconds()
        while True:
            with self.lock:
                if all(k in self.data for k in keys):
                    return
            if time.monotonic() >= end:
                raise RuntimeError(f"Wait timeout after {timeout.total_seconds() * 1000:.0f}ms, keys: {keys}")
            time.sleep(0.005)


@pytest.fixture
def reports(monkeypatch):
    """Records the reports fetch() makes (and still writes them); `first` is set at the first one."""
    calls = []
    first = threading.Event()
    real = st._warn

    def warn(rank, text):
        calls.append((rank, text))
        first.set()
        real(rank, text)

    monkeypatch.setattr(st, "_warn", warn)
    monkeypatch.delenv("NCCLZ_DEBUG", raising=False)
    return calls, first


def set_after_first_report(store, key, value, first):
    def run():
        first.wait(10)
        store.set(key, value)

    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("kind", (CheckStore, WaitStore))
def test_a_long_wait_says_what_it_waits_for_then_returns_the_value(monkeypatch, capfd, reports, kind):
    calls, first = reports
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0.1")
    store = kind()
    t = set_after_first_report(store, "ncclz/unique_id/7", b"\x01" * 128, first)
    try:
        value = st.fetch(store, "ncclz/unique_id/7", 30.0, 3)
    finally:
        first.set()
        t.join()
    assert value == b"\x01" * 128
    assert len(calls) >= 1 and all(r == 3 for r, _ in calls)
    err = capfd.readouterr().err
    line = err.splitlines()[0]
    assert line.startswith("ncclz rank 3: WARN store rendezvous: rank 3 has waited"), line
    for part in ("rank 0", kind.__name__, "'ncclz/unique_id/7'", "timeout after 30 s", "NCCLZ_TIMEOUT"):
        assert part in line, (part, line)


@pytest.mark.parametrize("kind", (CheckStore, WaitStore))
def test_a_key_that_never_comes_is_a_timeout_naming_it_after_reports(monkeypatch, capfd, reports, kind):
    calls, _ = reports
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0.05")
    t0 = time.monotonic()
    with pytest.raises(ncclz.TimeoutError) as e:
        st.fetch(kind(), "ncclz/unique_id/0", 0.6, 1)
    assert time.monotonic() - t0 >= 0.6
    assert (
        "rank 1: rank 0 did not publish the ncclz unique id (store key 'ncclz/unique_id/0') within 0.6 s"
        in str(e.value)
    )
    # Reports at 0.05, then after 0.1, 0.2 (0.35 s), 0.4 (0.75 s: past the timeout): at least the first.
    assert 1 <= len(calls) <= 3, calls
    waited = [float(text.split("has waited ")[1].split(" s")[0]) for _, text in calls]
    assert waited == sorted(waited)


def test_reports_off_or_log_level_none_say_nothing(monkeypatch, capfd):
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0")
    with pytest.raises(ncclz.TimeoutError):
        st.fetch(CheckStore(), "k", 0.3, 1)
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0.05")
    monkeypatch.setenv("NCCLZ_DEBUG", "NONE")
    with pytest.raises(ncclz.TimeoutError):
        st.fetch(CheckStore(), "k", 0.3, 1)
    assert capfd.readouterr().err == ""


def test_a_key_present_at_once_reports_nothing(monkeypatch, capfd):
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0.01")
    for kind in (CheckStore, WaitStore, DictStore):
        store = kind()
        store.set("k", "text")  # str values come back as bytes
        assert st.fetch(store, "k", 5.0, 2) == b"text"
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("value", ("-1", "soon", "nan"))
def test_a_malformed_report_interval_is_an_argument_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", value)
    with pytest.raises(ncclz.InvalidArgumentError, match="NCCLZ_WAIT_REPORT"):
        st.fetch(CheckStore(), "k", 1.0, 1)


def test_a_failing_store_is_a_remote_error_not_a_timeout(monkeypatch):
    class Broken(DictStore):
        def wait(self, keys, timeout):
            raise ConnectionResetError("store server went away")

    with pytest.raises(
        ncclz.RemoteError, match="could not read the ncclz unique id .* store server went away"
    ) as e:
        st.fetch(Broken(), "k", 5.0, 1)
    assert not isinstance(e.value, ncclz.TimeoutError)


def test_a_wait_without_a_timeout_argument_still_works():
    class OldWait(DictStore):
        def wait(self, keys, *args):
            if args:
                raise TypeError("wait() takes 2 positional arguments")

    store = OldWait()
    store.set("k", b"v")
    assert st.fetch(store, "k", 1.0, 1) == b"v"


def test_torch_stores_report_and_deliver(monkeypatch, capfd, reports, tmp_path):
    """torch's TCPStore (through a PrefixStore, as under torchrun) and FileStore: polled with check()."""
    dist = pytest.importorskip("torch.distributed")
    calls, first = reports
    monkeypatch.setenv("NCCLZ_WAIT_REPORT", "0.1")
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    for store in (dist.PrefixStore("ncclz", server), dist.FileStore(str(tmp_path / "fs"), 1)):
        calls.clear()
        first.clear()
        t = set_after_first_report(store, "ncclz/unique_id/0", b"\x02" * 128, first)
        try:
            assert st.fetch(store, "ncclz/unique_id/0", 30.0, 1) == b"\x02" * 128
        finally:
            first.set()
            t.join()
        assert calls and type(store).__name__ in calls[0][1]
