"""Built-in suites (entry point group ``beyondsim.suites``, name ``builtin``).

A suite is ``{"description", "benchmarks", "retrievers"}``; ``beyondsim run --suite <name>``
runs every retriever on every benchmark of it.
"""

from __future__ import annotations

from typing import Any

_CONSTRAINT = ["nevir", "negconstraint", "diag/antonym"]
_TOPICAL = ["beir/scifact"]
_COMPLETENESS: list[str] = []
_BASELINES = ["bm25", "dense"]


def _union(*groups: list[str]) -> list[str]:
    out: list[str] = []
    for g in groups:
        out += [b for b in g if b not in out]
    return out


SUITES: dict[str, dict[str, Any]] = {
    "demo": {
        "description": "Offline demo: the baselines on every benchmark whose data ships locally (minutes on a CPU).",
        "benchmarks": ["nevir", "negconstraint", "diag/antonym", "beir/scifact"],
        "retrievers": list(_BASELINES),
    },
    "constraint": {
        "description": "Constraint benchmarks: negation, negative constraints and antonym diagnostics.",
        "benchmarks": list(_CONSTRAINT),
        "retrievers": list(_BASELINES),
    },
    "topical": {
        "description": "Topical retrieval (BEIR) to check that constraint-aware methods keep topical quality.",
        "benchmarks": list(_TOPICAL),
        "retrievers": list(_BASELINES),
    },
    "completeness": {
        "description": "Set-completeness benchmarks (none loaded yet).",
        "benchmarks": list(_COMPLETENESS),
        "retrievers": list(_BASELINES),
    },
    "all": {
        "description": "Every built-in benchmark.",
        "benchmarks": _union(_CONSTRAINT, _TOPICAL, _COMPLETENESS),
        "retrievers": list(_BASELINES),
    },
}
