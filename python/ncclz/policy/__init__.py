"""The compression policy: when (not) to compress a collective call.

``compression=`` is a request with a guarantee: the policy may run a call that asks for
``Lossy(...)`` as lossless or uncompressed, and one that asks for ``Lossless()`` uncompressed, where
its cost model predicts that compressing would not pay; the result is then exact, so it keeps any
requested bound. It is the Communicator's default (``policy="auto"``); docs/PYTHON_API.md describes
what a user sees, docs/BENCHMARKS.md the model.

The package, bottom up:

- :mod:`.modes`: the modes (none, lossless, lossy and its codec efforts) and their names;
- :mod:`.model`: the cost model (predicted time per mode);
- :mod:`.calibration`: codec ratio and speed on a sample of the caller's data, on this machine;
- :mod:`.history`: measured wall times of earlier calls per size class and mode;
- :mod:`.memory_link`: the link of ranks on one host joined by memory: why host calls run none there
  by rule (:meth:`Policy.exact_on_memory`), and the rate the model takes for it;
- :mod:`.decision`: :class:`Policy`, which puts them together and chooses (:class:`Choice`);
- :mod:`.runtime`: :class:`CommPolicy`, the narrow contract ``ncclz.comm`` depends on
  (``choose(call) -> Decision``, ``record(decision, stats)``): who decides (rank 0), "auto" / "off".

It depends on ``ncclz.codec``, ``ncclz.spec`` and ``ncclz.errors`` only; ``ncclz.comm`` depends on it,
``ncclz.tools`` (benchmarks, CLIs) on both. ``python -m ncclz.tools.policy`` prints decision tables.
"""

from .calibration import Calibration, Calibrator, reduction_terms
from .decision import Choice, Policy
from .history import History, Measurement
from .model import COLLECTIVES, CostModel
from .modes import DENSE_MARGIN, EFFORTS, FAST_MARGIN, MID_MARGIN, MODES, effort_of_margin
from .runtime import POLICIES, Call, CommPolicy, Decision, Setting, resolve_setting

__all__ = [
    "COLLECTIVES",
    "DENSE_MARGIN",
    "EFFORTS",
    "FAST_MARGIN",
    "MID_MARGIN",
    "MODES",
    "POLICIES",
    "Calibration",
    "Calibrator",
    "Call",
    "Choice",
    "CommPolicy",
    "CostModel",
    "Decision",
    "History",
    "Measurement",
    "Policy",
    "Setting",
    "effort_of_margin",
    "reduction_terms",
    "resolve_setting",
]
