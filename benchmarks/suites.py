"""Built-in suites (entry point group ``beyondsim.suites``, name ``builtin``).

A suite is ``{"description", "benchmarks", "retrievers"}``; ``beyondsim run --suite <name>``
runs every retriever on every benchmark of it. Benchmarks of a suite whose files are absent are
skipped with a note (``--online`` fetches what has an online source); a benchmark named with
``--benchmark`` must be present.

A suite the leaderboard shows as a table of its own also declares:

* ``headline``: the measures of that table, averaged over the suite's benchmarks (the first orders
  the rows);
* ``baselines``: the retrievers whose best row every row of the suite's benchmarks is tested
  against (‡ on the benchmark pages);
* ``reference``: the retriever whose best row is the other reference (†).
"""

from __future__ import annotations

from typing import Any

_CONSTRAINT = ["nevir", "excluir", "negconstraint", "diag/antonym", "diag/negation", "diag/exclusion"]
_TOPICAL = ["beir/scifact", "beir/nfcorpus", "beir/scidocs", "beir/arguana", "beir/fiqa", "beir/cqadupstack/android"]
_COMPLETENESS = ["toollens", "toolbank/numpy", "toolbank/pandas", "toolbank/aws", "multihop-rag"]
_BASELINES = ["bm25", "dense"]
# what the leaderboard tests every row of a shown suite's benchmarks against (see above)
_COMPARED_WITH = ["bm25", "dense", "hyde", "mmr"]
_REFERENCE = "dense"


def _union(*groups: list[str]) -> list[str]:
    out: list[str] = []
    for g in groups:
        out += [b for b in g if b not in out]
    return out


SUITES: dict[str, dict[str, Any]] = {
    "demo": {
        "description": "Offline demo: the baselines on every benchmark whose data ships locally (minutes on a CPU).",
        "benchmarks": ["nevir", "negconstraint", "diag/antonym", "diag/negation", "beir/scifact"],
        "retrievers": list(_BASELINES),
    },
    "constraint": {
        "description": "Constraint benchmarks: negation, exclusion, negative constraints and the three CoDeR diagnostics.",
        "benchmarks": list(_CONSTRAINT),
        "retrievers": list(_BASELINES),
        "headline": ["V@2", "FVR@10", "PairAcc", "nDCG@10"],
        "baselines": list(_COMPARED_WITH),
        "reference": _REFERENCE,
    },
    "topical": {
        "description": "Topical retrieval (the papers' BEIR sets) to check that constraint-aware methods keep topical quality.",
        "benchmarks": list(_TOPICAL),
        "retrievers": list(_BASELINES),
        "headline": ["nDCG@10", "MAP@10"],
        "baselines": list(_COMPARED_WITH),
        "reference": _REFERENCE,
    },
    "completeness": {
        "description": "Set completeness: tool retrieval (ToolLens, ToolBank) and multi-hop evidence (MultiHop-RAG).",
        "benchmarks": list(_COMPLETENESS),
        "retrievers": list(_BASELINES),
        "headline": ["Comp@5", "R@5"],
        "baselines": list(_COMPARED_WITH),
        "reference": _REFERENCE,
    },
    "all": {
        "description": "Every built-in benchmark.",
        "benchmarks": _union(_CONSTRAINT, _TOPICAL, _COMPLETENESS),
        "retrievers": list(_BASELINES),
    },
}
