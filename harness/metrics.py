"""Measures (DESIGN.md §5, METHODS.md "Measures").

Names follow ir_measures: ``nDCG@10``, ``MAP@10``, ``R@5``, ``P@1``, ``RR@10`` go through
pytrec_eval; ``V@k``, ``FVR@k``, ``Comp@k`` and ``PairAcc`` are ours, vectorised over a
(queries × depth) matrix.

* The ranking is the order of each run list. pytrec_eval re-sorts by score and breaks ties by
  document id, so it is given rank-derived scores (``depth − rank``): measures never depend on
  how a retriever's raw scores tie. ``PairAcc`` alone compares raw scores, strictly.
* Every judged query is scored; a query missing from the run is an empty ranking (nDCG 0,
  V@k 0, FVR k+1) and their number is reported.
* ``V@k``/``FVR@k`` are averaged over queries with ≥1 violating document, ``Comp@k`` over
  queries with ≥1 relevant document; the count is reported beside each figure.
* ``R``/``MAP``/``P``/``RR``/``Comp`` treat a document as relevant when its grade is at least
  the benchmark's ``relevance_threshold`` (2 on graded constraint sets, so only satisfying
  documents count); ``nDCG`` uses the graded labels as linear gains.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from .types import Judgments, Pair, Run

_MEASURE_RE = re.compile(r"^(nDCG|MAP|R|P|RR|V|FVR|Comp)@(\d+)$|^(PairAcc)$")
_TREC = {"nDCG": "ndcg_cut", "MAP": "map_cut", "R": "recall", "P": "P"}
LOWER_IS_BETTER = {"V"}


@dataclass(frozen=True)
class Measure:
    base: str
    k: int | None = None

    @property
    def name(self) -> str:
        return self.base if self.k is None else f"{self.base}@{self.k}"

    @property
    def higher_is_better(self) -> bool:
        return self.base not in LOWER_IS_BETTER

    def __str__(self) -> str:
        return self.name


def parse_measure(name: str) -> Measure:
    m = _MEASURE_RE.match(name.strip())
    if not m:
        raise ValueError(
            f"unknown measure {name!r}; use nDCG@k, MAP@k, R@k, P@k, RR@k, V@k, FVR@k, Comp@k or PairAcc"
        )
    if m.group(3):
        return Measure("PairAcc")
    k = int(m.group(2))
    if k < 1:
        raise ValueError(f"measure {name!r}: cutoff must be ≥ 1")
    return Measure(m.group(1), k)


def higher_is_better(name: str) -> bool:
    return parse_measure(name).higher_is_better


@dataclass
class Evaluation:
    """Per-query values and means. ``per_query[measure][qid]`` (for PairAcc keys are pair ids)."""

    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    means: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    n_queries: int = 0
    n_missing: int = 0


def _rank_scored(run: Run, qids: Iterable[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for q in qids:
        ranking = run.get(q)
        if ranking:
            depth = len(ranking)
            out[q] = {d: float(depth - i) for i, (d, _) in enumerate(ranking)}
    return out


def _trec_measures(measures: Sequence[Measure], run: Run, judgments: Judgments, threshold: int,
                   qids: list[str]) -> dict[str, dict[str, float]]:
    import pytrec_eval

    trec_names: dict[str, tuple[str, Measure]] = {}
    for m in measures:
        if m.base in _TREC:
            trec_names[f"{_TREC[m.base]}_{m.k}"] = (f"{_TREC[m.base]}.{m.k}", m)
    results: dict[str, dict[str, float]] = {m.name: {} for m in measures if m.base in _TREC or m.base == "RR"}
    if trec_names:
        scored = _rank_scored(run, qids)
        qrels = {q: {d: int(r) for d, r in judgments.relevance[q].items()} for q in qids}
        ev = pytrec_eval.RelevanceEvaluator(qrels, {spec for spec, _ in trec_names.values()},
                                            relevance_level=int(threshold))
        res = ev.evaluate(scored)
        for key, (_, m) in trec_names.items():
            col = results[m.name]
            for q in qids:
                col[q] = float(res[q][key]) if q in res else 0.0
    for m in measures:
        if m.base == "RR":  # reciprocal rank of the first relevant document within the top k
            col = results[m.name]
            for q in qids:
                rel = judgments.relevant(q, threshold)
                col[q] = 0.0
                for i, (d, _) in enumerate(run.get(q, [])[: m.k]):
                    if d in rel:
                        col[q] = 1.0 / (i + 1)
                        break
    return results


def _membership(run: Run, qids: Sequence[str], sets: Mapping[str, Iterable[str]], depth: int) -> np.ndarray:
    """Boolean (queries × depth) matrix: ``M[i, j]`` = rank j+1 of query i is in its set."""
    mat = np.zeros((len(qids), depth), dtype=bool)
    for i, q in enumerate(qids):
        s = sets.get(q)
        if not s:
            continue
        s = s if isinstance(s, (set, frozenset)) else set(s)
        for j, (d, _) in enumerate(run.get(q, [])[:depth]):
            if d in s:
                mat[i, j] = True
    return mat


def violation_at_k(viol: np.ndarray, k: int) -> np.ndarray:
    """``V@k`` per query from a (queries × depth) violating-membership matrix."""
    return viol[:, :k].any(axis=1).astype(float)


def first_violating_rank(viol: np.ndarray, k: int) -> np.ndarray:
    """``FVR@k = min({j ≤ k : r_j ∈ V_q} ∪ {k + 1})`` per query."""
    top = viol[:, :k]
    hit = top.any(axis=1)
    first = top.argmax(axis=1) + 1
    return np.where(hit, first, k + 1).astype(float)


def completeness_at_k(rel: np.ndarray, n_rel: np.ndarray, k: int) -> np.ndarray:
    """``Comp@k = 1[S_q ⊆ top-k]`` (0 when |S_q| > k)."""
    found = rel[:, :k].sum(axis=1)
    return ((found == n_rel) & (n_rel <= k) & (n_rel > 0)).astype(float)


def pair_documents(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    """The documents each pair query is compared on: both documents of its pair."""
    out: dict[str, set[str]] = {}
    for p in pairs:
        out.setdefault(p.q1, set()).update((p.d1, p.d2))
        out.setdefault(p.q2, set()).update((p.d1, p.d2))
    return out


def pair_accuracy(run: Run, pairs: Sequence[Pair],
                  scores: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """NevIR paired accuracy: both queries must score their own document strictly above the
    other one. A query's two scores come from ``scores[q]`` when given (the pair documents scored
    directly, NevIR's protocol, so the figure does not depend on the ranking depth), else from its
    ranking; an absent document scores −∞, so ties and absences are wrong."""

    def score_map(q: str) -> Mapping[str, float]:
        if scores is not None and q in scores:
            return scores[q]
        return {d: float(s) for d, s in run.get(q, [])}

    out: dict[str, float] = {}
    for n, p in enumerate(pairs):
        s1, s2 = score_map(p.q1), score_map(p.q2)
        a = s1.get(p.d1, -math.inf) > s1.get(p.d2, -math.inf)
        b = s2.get(p.d2, -math.inf) > s2.get(p.d1, -math.inf)
        out[p.id or str(n)] = 1.0 if (a and b) else 0.0
    return out


def evaluate(run: Run, judgments: Judgments, measures: Sequence[str | Measure], *,
             relevance_threshold: int = 1, pairs: Sequence[Pair] | None = None,
             query_ids: Sequence[str] | None = None,
             pair_scores: Mapping[str, Mapping[str, float]] | None = None) -> Evaluation:
    """Score ``run`` against ``judgments``. ``query_ids`` defaults to every judged query;
    ``pair_scores`` holds pair documents scored directly (see :func:`pair_accuracy`)."""
    ms = [m if isinstance(m, Measure) else parse_measure(m) for m in measures]
    qids = list(query_ids) if query_ids is not None else list(judgments.relevance)
    ev = Evaluation(n_queries=len(qids), n_missing=sum(1 for q in qids if not run.get(q)))

    for name, col in _trec_measures(ms, run, judgments, relevance_threshold, qids).items():
        ev.per_query[name] = col

    custom = [m for m in ms if m.base in ("V", "FVR", "Comp")]
    if custom:
        depth = max(m.k for m in custom)  # type: ignore[type-var]
        with_viol = [q for q in qids if judgments.violating.get(q)]
        if any(m.base in ("V", "FVR") for m in custom):
            viol = _membership(run, with_viol, judgments.violating, depth)
        rel_sets = {q: judgments.relevant(q, relevance_threshold) for q in qids}
        with_rel = [q for q in qids if rel_sets[q]]
        if any(m.base == "Comp" for m in custom):
            rel = _membership(run, with_rel, rel_sets, depth)
            n_rel = np.array([len(rel_sets[q]) for q in with_rel])
        for m in custom:
            if m.base == "V":
                vals, ids = violation_at_k(viol, m.k), with_viol
            elif m.base == "FVR":
                vals, ids = first_violating_rank(viol, m.k), with_viol
            else:
                vals, ids = completeness_at_k(rel, n_rel, m.k), with_rel
            ev.per_query[m.name] = {q: float(v) for q, v in zip(ids, vals)}

    if any(m.base == "PairAcc" for m in ms):
        if not pairs:
            raise ValueError("PairAcc needs the benchmark's pairs; this benchmark has none")
        ev.per_query["PairAcc"] = pair_accuracy(run, pairs, pair_scores)

    for m in ms:
        col = ev.per_query.get(m.name, {})
        ev.counts[m.name] = len(col)
        ev.means[m.name] = float(np.mean(list(col.values()))) if col else float("nan")
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
