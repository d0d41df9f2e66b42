"""Progress kept apart from results, for the command-line tools.

Results go to stdout, progress and notes to stderr: a bar on a terminal, plain lines otherwise, so
``tool > results.txt`` captures results only and a log of stderr reads line by line.

When a tool launches its own ranks (``ncclz.run.launch``), rank 0's stderr is a pipe: rank 0 then
writes progress *records* (``RECORD`` lines: done, total, elapsed seconds, text) and the launching
process draws them (:class:`LaunchSinks`), so that the bar and the results, which arrive through
two pipes, never overwrite each other.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import IO

#: Prefix of a progress record line (rank 0 -> its launcher).
RECORD = "ncclz-progress\t"
#: How the launched ranks learn that their launcher draws progress records ("records").
PROGRESS_ENV = "NCCLZ_TOOL_PROGRESS"
MODES = ("bar", "lines", "records", "off")


def default_mode(err: IO[str] | None = None) -> str:
    """"bar" on a terminal, "lines" otherwise."""
    err = err or sys.stderr
    try:
        return "bar" if err.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


class Console:
    """Results to `out`, progress and notes to `err` (mode: "bar", "lines", "records" or "off";
    None: a bar on a terminal, lines otherwise)."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None, mode: str | None = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.mode = mode or default_mode(self.err)
        if self.mode not in MODES:
            raise ValueError(f"progress mode {self.mode!r}; one of {', '.join(MODES)}")
        self._bar = ""  # the bar as drawn, "" when none is on screen
        self._state: tuple | None = None  # (done, total, elapsed, text) of the last progress
        self._t0 = time.monotonic()

    # ---- output -------------------------------------------------------------------------
    def result(self, line: str) -> None:
        """A line of results (stdout)."""
        self._clear()
        self.out.write(line.rstrip("\n") + "\n")
        self.out.flush()
        self._redraw()

    def note(self, line: str) -> None:
        """A line for the user that is not a result (stderr)."""
        self._clear()
        self.err.write(line.rstrip("\n") + "\n")
        self.err.flush()
        self._redraw()

    def progress(self, done: int, total: int, text: str, elapsed: float | None = None) -> None:
        """`done` of `total` items finished; `text`: the item now running."""
        if elapsed is None:
            elapsed = time.monotonic() - self._t0
        self._state = (done, total, elapsed, text)
        if self.mode == "off":
            return
        if self.mode == "records":
            self.err.write(f"{RECORD}{done}\t{total}\t{elapsed:.1f}\t{text}\n")
            self.err.flush()
        elif self.mode == "lines":
            self.err.write(f"[{done + 1}/{total}] {text}  ({elapsed:.0f} s elapsed)\n")
            self.err.flush()
        else:
            self._clear()
            self._redraw()

    def close(self) -> None:
        """Removes the bar (call before exiting)."""
        self._clear()
        self._state = None

    # ---- the bar -------------------------------------------------------------------------
    def _clear(self) -> None:
        if self._bar:
            self.err.write("\r\033[K")
            self.err.flush()
            self._bar = ""

    def _redraw(self) -> None:
        if self.mode != "bar" or self._state is None:
            return
        done, total, elapsed, text = self._state
        width = shutil.get_terminal_size((80, 20)).columns
        cells = 24
        filled = int(cells * done / max(1, total))
        head = f"[{'#' * filled}{'.' * (cells - filled)}] {done}/{total} {elapsed:4.0f}s "
        bar = (head + text)[: max(len(head), width - 1)]
        self.err.write(bar)
        self.err.flush()
        self._bar = bar


class LaunchSinks:
    """The `out` and `err` streams to give ``ncclz.run.launch`` for ranks that write to `console`:
    rank 0's lines lose their ``[rank 0] `` prefix (other ranks' keep theirs), its progress records
    become the console's progress, its stdout the console's results, everything else notes."""

    def __init__(self, console: Console, rank0_tag: str = "[rank 0] "):
        self.console, self.tag = console, rank0_tag
        self.out = _Sink(self, results=True)
        self.err = _Sink(self, results=False)

    def line(self, line: str, results: bool) -> None:
        if line.startswith(self.tag):
            line = line[len(self.tag):]
            if not results and line.startswith(RECORD):
                try:
                    done, total, elapsed, text = line[len(RECORD):].rstrip("\n").split("\t", 3)
                    self.console.progress(int(done), int(total), text, float(elapsed))
                    return
                except ValueError:
                    pass
        if results:
            self.console.result(line)
        else:
            self.console.note(line)


class _Sink:
    def __init__(self, owner: LaunchSinks, results: bool):
        self.owner, self.results, self._part = owner, results, ""

    def write(self, s: str) -> int:
        text = self._part + s
        lines = text.split("\n")
        self._part = lines.pop()
        for ln in lines:
            self.owner.line(ln, self.results)
        return len(s)

    def flush(self) -> None:
        pass
