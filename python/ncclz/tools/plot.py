"""matplotlib for the tools' ``--plot``: an optional dependency, asked for before any work is done."""

from __future__ import annotations

import importlib.util


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (the message says how to get it)."""


MESSAGE = ("--plot needs matplotlib, which is not installed here: pip install matplotlib "
           "(it is in ncclz's 'bench' extra)")


def check() -> None:
    """Raises PlotUnavailable when matplotlib cannot be imported (cheap: does not import it)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(MESSAGE)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    check()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
