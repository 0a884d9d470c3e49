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
* ``comparator``: the retriever whose best row is the other row every row is tested against (†;
  a suite from another package that still declares it under its former name ``reference`` is read
  the same way);
* ``relevance``: the measure of topical quality that a row must beat chance on to be ranked (a
  row whose mean is not above the chance row's upper 95% bound on it is listed apart as below
  chance on relevance), and the y axis of the suite's trade-off plot;
* ``chance``: the retriever whose row is the chance level (shown in every table and plot, never
  ranked);
* ``tradeoff``: a violation measure and a topical one: the suite's scatter of the one against the
  other, with the Pareto frontier and chance marked (and the same on each benchmark page);
* ``cost_table``: the paper's efficiency table whose settings are the suite's benchmarks
  (``beyondsim audit --view paper`` and the efficiency page aggregate each method over them).

Why the constraint table is ordered by ``Sat@10`` and not by ``V@2``: V@k and FVR@k count
violations only, so a ranking that retrieves nothing (random documents, an empty ranking) has no
violation and would head the table; ``Sat@k`` credits a query only when a satisfying document is
in the top k with no violating document above it (see :mod:`harness.measures.satisfied`).
"""

from __future__ import annotations

from typing import Any

_CONSTRAINT = ["nevir", "excluir", "negconstraint", "diag/antonym", "diag/negation", "diag/exclusion"]
_TOPICAL = ["beir/scifact", "beir/nfcorpus", "beir/scidocs", "beir/arguana", "beir/fiqa", "beir/cqadupstack/android"]
# LIMIT (Weller et al. 2025): every pair of its 46 people must be retrievable together; limit-small is
# on disk, the full limit (50k documents) comes from the hub with --online
_COMPLETENESS = ["toollens", "toolbank/numpy", "toolbank/pandas", "toolbank/aws", "multihop-rag", "limit-small", "limit"]
_BASELINES = ["bm25", "dense"]
# the chance level: run with every suite, shown in every table and plot, never ranked
_CHANCE = "random"
_RUN = [*_BASELINES, _CHANCE]
# what the leaderboard tests every row of a shown suite's benchmarks against (see above)
_COMPARED_WITH = ["bm25", "dense", "hyde", "mmr"]
_COMPARATOR = "dense"


def _union(*groups: list[str]) -> list[str]:
    out: list[str] = []
    for g in groups:
        out += [b for b in g if b not in out]
    return out


SUITES: dict[str, dict[str, Any]] = {
    "demo": {
        "description": "Offline demo: the baselines on both task families, constraints (NevIR and two CoDeR "
                       "diagnostics) and complete sets (ToolBank NumPy and LIMIT-small), about 5 minutes on 2 cores.",
        # one corpus-heavy benchmark (NevIR) and small ones: SciFact (topical, 5k abstracts) and NegConstraint
        # are most of the encoding time and sit in `reproduce --quick` and the topical suite instead
        "benchmarks": ["nevir", "diag/antonym", "diag/negation", "toolbank/numpy", "limit-small"],
        "retrievers": list(_RUN),
    },
    "constraint": {
        "description": "Constraint benchmarks: negation, exclusion, negative constraints and the three CoDeR diagnostics.",
        "benchmarks": list(_CONSTRAINT),
        "retrievers": list(_RUN),
        "headline": ["Sat@10", "V@2", "FVR@10", "PairAcc", "nDCG@10"],
        "baselines": list(_COMPARED_WITH),
        "comparator": _COMPARATOR,
        "relevance": "nDCG@10",
        "chance": _CHANCE,
        "tradeoff": ["V@2", "nDCG@10"],
        # its six benchmarks are the settings of CoDeR's efficiency table: `beyondsim audit --view paper`
        "cost_table": "CoDeR Table 4",
    },
    "topical": {
        "description": "Topical retrieval (the papers' BEIR sets) to check that constraint-aware methods keep topical quality.",
        "benchmarks": list(_TOPICAL),
        "retrievers": list(_RUN),
        "headline": ["nDCG@10", "MAP@10"],
        "baselines": list(_COMPARED_WITH),
        "comparator": _COMPARATOR,
        "relevance": "nDCG@10",
        "chance": _CHANCE,
    },
    "completeness": {
        "description": "Set completeness: tool retrieval (ToolLens, ToolBank), multi-hop evidence (MultiHop-RAG) and "
                       "LIMIT's pairs of people (every pair must be retrievable together).",
        "benchmarks": list(_COMPLETENESS),
        "retrievers": list(_RUN),
        "headline": ["Comp@5", "R@5"],
        "baselines": list(_COMPARED_WITH),
        "comparator": _COMPARATOR,
        "relevance": "R@5",
        "chance": _CHANCE,
    },
    "all": {
        "description": "Every built-in benchmark.",
        "benchmarks": _union(_CONSTRAINT, _TOPICAL, _COMPLETENESS),
        "retrievers": list(_RUN),
    },
}
