"""beyondsim engine: types, registry, runner, measures, ledger, store, CLI.

``harness.evaluate(run, benchmark_or_qrels, measures)`` scores rankings computed anywhere (a run
file's path, a Run or a ``{qid: {doc: score}}`` mapping) the way ``beyondsim evaluate`` does
(:func:`harness.run.scoring.evaluate`); it is looked up on first use, so importing ``harness``
stays light and the package itself imports no layer.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# public entry points: name → the module of the layer that defines it (imported on first use)
PUBLIC = {"evaluate": "harness.run.scoring"}


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        return getattr(importlib.import_module(PUBLIC[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *PUBLIC])
