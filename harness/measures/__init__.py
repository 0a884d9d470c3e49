"""Measures as values (docs/design/measures.md; the list: docs/reference/measures.md).

Names follow ir_measures: ``parse_measure("nDCG@10")`` is ``NDCG(cutoff=10)``. Each family is one
class in one module of this package — the standard ones (``nDCG``, ``MAP``, ``R``, ``P``, ``RR``)
in :mod:`.trec`, ours in :mod:`.completeness` (``Comp@k``), :mod:`.violation` (``V@k``,
``FVR@k``), :mod:`.satisfied` (``Sat@k``, the constraint table's headline) and :mod:`.pairs`
(``PairAcc``) — carrying its direction, what it is averaged over,
what a benchmark needs for it and its display precision; the runner's defaults, the CLI's
formatting and the pages' column order and precision all read them from here. Adding a measure
is one module with a ``@register``-ed class, imported below.

* The ranking is the order of each run list. pytrec_eval re-sorts by score and breaks ties by
  document id, so it is given rank-derived scores (``depth − rank``): measures never depend on
  how a retriever's raw scores tie. ``PairAcc`` alone compares raw scores, strictly.
* Every judged query is scored; a query missing from the run is an empty ranking (nDCG 0,
  V@k 0, FVR k+1) and their number is reported.
* ``V@k``/``FVR@k`` are averaged over queries with ≥1 violating document, ``Comp@k`` over
  queries with ≥1 relevant document; the count is reported beside each figure.
* ``R``/``MAP``/``P``/``RR``/``Comp`` treat a document as relevant when its grade is at least
  the benchmark's ``relevance_threshold`` (2 on graded constraint sets, so only satisfying
  documents count); ``nDCG`` uses the graded labels as linear gains. A measure that names its own
  level, ir_measures-style (``nDCG(rel=1)@10``, ``R(rel=2)@100``), is scored at that level and
  stored under that name; the plain name always means the benchmark's own threshold
  (docs/design/measures.md#relevance-thresholds). ``V``, ``FVR`` and ``PairAcc`` read no grades
  and take no ``rel``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..core.types import Judgments, Pair, Run
from .base import (ALL_QUERIES, PAIRS, RELEVANT_QUERIES, VIOLATING_QUERIES, EvalInput, Measure, MeasureError,
                   families, mean, parse_measure, register, sort_key)
# the families, in the order the pages show them
from .trec import MAP, NDCG, RR, Precision, Recall, TrecMeasure  # noqa: E402
from .completeness import Comp, completeness_at_k  # noqa: E402
from .violation import FVR, V, first_violating_rank, violation_at_k  # noqa: E402
from .satisfied import Sat, satisfied_at_k  # noqa: E402
from .pairs import PairAcc, pair_accuracy, pair_documents  # noqa: E402
from .topical import TR  # noqa: E402

# The measures every result of a task family gets (besides its benchmark's own defaults).
TASK_DEFAULTS: dict[str, tuple[str, ...]] = {
    "constraint": ("Sat@1", "Sat@10") + tuple(f"V@{k}" for k in range(1, 11)) + (
        "FVR@10", "nDCG@10", "MAP@10", "R@1", "R@5", "R@10", "R@100"),
    "topical": ("nDCG@10", "MAP@10", "R@10", "R@100", "P@1", "RR@10"),
    "completeness": ("Comp@3", "Comp@5", "Comp@10", "R@3", "R@5", "R@10", "nDCG@10"),
}


def higher_is_better(name: str) -> bool:
    return parse_measure(name).higher_is_better


def format_value(name: str, value: float | None) -> str:
    """``value`` at the precision of measure ``name`` (3 decimals for a name that is no measure)."""
    try:
        return parse_measure(name).format(value)
    except ValueError:
        return "–" if value is None or value != value else f"{value:.3f}"


@dataclass
class Evaluation:
    """Per-query values and means. ``per_query[measure][qid]`` (for PairAcc keys are pair ids)."""

    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    means: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    n_queries: int = 0
    n_missing: int = 0


def _batch_owner(m: Measure) -> type:
    """The class whose ``compute_batch`` serves ``m``: measures with the same owner share one call."""
    return next(c for c in type(m).__mro__ if "compute_batch" in vars(c))


def evaluate(run: Run, judgments: Judgments, measures: Sequence[str | Measure], *,
             relevance_threshold: int = 1, pairs: Sequence[Pair] | None = None,
             query_ids: Sequence[str] | None = None,
             pair_scores: Mapping[str, Mapping[str, float]] | None = None) -> Evaluation:
    """Score ``run`` against ``judgments``. ``query_ids`` defaults to every judged query;
    ``pair_scores`` holds pair documents scored directly (see :func:`pair_accuracy`)."""
    ms = [parse_measure(m) for m in measures]
    qids = list(query_ids) if query_ids is not None else list(judgments.relevance)
    ev = Evaluation(n_queries=len(qids), n_missing=len(qids) - sum(map(bool, map(run.get, qids))))
    by_threshold: dict[int, list[Measure]] = {}  # one input per relevance threshold (rel= in a name)
    for m in dict.fromkeys(ms):
        by_threshold.setdefault(m.threshold(relevance_threshold), []).append(m)
    for threshold, of_threshold in by_threshold.items():
        depth = max((m.k or 0 for m in of_threshold if m.uses_rank_matrix), default=0)
        inp = EvalInput(run, judgments, qids, threshold, pairs, pair_scores, depth)
        groups: dict[type, list[Measure]] = {}
        for m in of_threshold:
            groups.setdefault(_batch_owner(m), []).append(m)
        for owner, group in groups.items():
            ev.per_query.update(owner.compute_batch(group, inp))  # type: ignore[attr-defined]
    for m in ms:
        col = ev.per_query.get(m.name, {})
        ev.counts[m.name] = len(col)
        # (the same pairwise sum as np.mean of a list, without the list)
        ev.means[m.name] = float(np.fromiter(col.values(), float, len(col)).mean()) if col else float("nan")
    return ev


@dataclass(frozen=True)
class GroupValue:
    mean: float
    n: int


def group_by(per_query: Mapping[str, Mapping[str, float]], groups: Mapping[str, str],
             measures: Sequence[str] | None = None) -> dict[str, dict[str, GroupValue]]:
    """Per-group means of per-query values: ``{measure: {group: GroupValue(mean, n)}}``.

    ``groups`` maps a query id to its group (a query metadata value, e.g. NegConstraint's
    category); queries without a group are left out, and each mean is over the queries of the
    group that the measure scored (V@k only counts queries with a violating document, as in
    :func:`evaluate`). Groups are ordered by name.
    """
    out: dict[str, dict[str, GroupValue]] = {}
    for m in (measures if measures is not None else list(per_query)):
        col = per_query.get(m, {})
        buckets: dict[str, list[float]] = {}
        for qid, v in col.items():
            g = groups.get(qid)
            if g is not None:
                buckets.setdefault(g, []).append(float(v))
        out[m] = {g: GroupValue(float(np.mean(vals)), len(vals)) for g, vals in sorted(buckets.items())}
    return out


__all__ = [
    "ALL_QUERIES", "PAIRS", "RELEVANT_QUERIES", "VIOLATING_QUERIES", "TASK_DEFAULTS", "EvalInput", "Evaluation",
    "GroupValue", "Measure", "MeasureError", "TR", "Comp", "FVR", "MAP", "NDCG", "PairAcc", "Precision", "RR", "Recall", "Sat",
    "TrecMeasure", "V", "completeness_at_k", "evaluate", "families", "first_violating_rank", "format_value", "group_by",
    "higher_is_better", "pair_accuracy", "pair_documents", "parse_measure", "register", "satisfied_at_k",
    "sort_key", "violation_at_k",
]
