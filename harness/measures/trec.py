"""The standard measures: nDCG, MAP, R and P through one batched pytrec_eval call; RR@k (which
pytrec_eval has no cutoff for) from the shared rank lookups."""

from __future__ import annotations

from bisect import bisect_left
from itertools import chain, repeat
from operator import itemgetter
from typing import ClassVar, Sequence

import numpy as np

from .base import EvalInput, Measure, register


class TrecMeasure(Measure):
    """A measure pytrec_eval computes: every such measure of one evaluation shares one call (see
    :func:`trec_input` for the rankings it is given)."""

    trec_name: ClassVar[str]
    # whether the measure reads where the relevant documents of the top k are (nDCG, MAP), or
    # only how many there are (R, P)
    positional: ClassVar[bool] = True
    uses_rank_matrix = True

    def compute(self, inp: EvalInput) -> dict[str, float]:
        return self.compute_batch([self], inp)[self.name]

    @classmethod
    def compute_batch(cls, measures: Sequence[Measure], inp: EvalInput) -> dict[str, dict[str, float]]:
        import pytrec_eval

        trec = [m for m in measures if isinstance(m, TrecMeasure)]
        cutoffs: dict[str, set[int]] = {}
        for m in trec:
            cutoffs.setdefault(m.trec_name, set()).add(m.k)  # type: ignore[arg-type]
        specs = {f"{name}.{','.join(map(str, sorted(ks)))}" for name, ks in cutoffs.items()}
        rel = inp.judgments.relevance
        qrels = {q: rel[q] for q in inp.qids}
        try:
            evaluator = pytrec_eval.RelevanceEvaluator(qrels, specs, relevance_level=int(inp.threshold))
        except TypeError:  # grades that are not Python ints (numpy integers, whole floats)
            qrels = {q: {d: int(r) for d, r in rel[q].items()} for q in inp.qids}
            evaluator = pytrec_eval.RelevanceEvaluator(qrels, specs, relevance_level=int(inp.threshold))
        res = evaluator.evaluate(trec_input(inp, trec))
        keys = {m.name: f"{m.trec_name}_{m.k}" for m in trec}
        zero = dict.fromkeys(keys.values(), 0.0)  # a query left out of the input (see trec_input)
        rows = list(map(res.get, inp.qids, repeat(zero)))
        return {name: dict(zip(inp.qids, map(itemgetter(key), rows))) for name, key in keys.items()}


def trec_input(inp: EvalInput, measures: Sequence[TrecMeasure]) -> dict[str, dict[str, float]]:
    """The run as pytrec_eval needs it for ``measures``: a shorter ranking per query with the same
    values of those measures as the query's whole ranking (tested against pytrec_eval on whole
    rankings), built from the ranks :attr:`EvalInput.found` already holds.

    What the measures read of a ranking: an unjudged document counts as non-relevant whatever its
    id, and a document below every cutoff not at all; nDCG@k and MAP@k read the ranks of the
    judged documents in the top k, R@k and P@k only which judged documents are in the top k. So,
    with K the deepest cutoff and L the deepest one below it (K itself where a positional measure
    has cutoff K): the judged documents of the top L keep their ranks, the unjudged ones above
    them get placeholder ids (no judged document of the evaluation has one), and the judged
    documents ranked L..K−1 follow from rank L on, in order (they stay below every cutoff ≤ L and
    within K). Scores are rank-derived and distinct, so pytrec_eval's re-sort by score (ties by
    document id) cannot reorder them; a query with no judged document in its top K is left out
    (pytrec_eval gives it 0, as it does here)."""
    deepest = max(m.k for m in measures)  # type: ignore[type-var]
    head = deepest if any(m.positional and m.k == deepest for m in measures) else max(
        (m.k for m in measures if m.k != deepest), default=0)  # type: ignore[type-var]
    rel = inp.judgments.relevance
    ids = "\n".join(chain.from_iterable(rel.get(q) or () for q in inp.qids))
    mark = "\x1f"
    while mark in ids:  # (anywhere, not only at the start of an id: a longer mark than needed is harmless)
        mark += "\x1f"
    names: list[str] = []
    filled: dict[int, dict[str, float]] = {}  # n → placeholders at ranks 0..n−1, scored n..1
    out: dict[str, dict[str, float]] = {}
    for q, hits in inp.judged_hits.items():
        if not hits or hits[0][0] >= deepest:
            continue
        if hits[-1][0] < head:
            top, tail = hits, []
        else:
            split = bisect_left(hits, (head,))
            top = hits[:split]
            tail = [d for p, d in hits[split:] if p < deepest]
        n = head if tail else top[-1][0] + 1
        base = filled.get(n)
        if base is None:
            names.extend(f"{mark}{i}" for i in range(len(names), n))
            base = filled[n] = dict(zip(names[:n], map(float, range(n, 0, -1))))
        scored = base.copy()
        for p, d in top:
            del scored[names[p]]
            scored[d] = float(n - p)
        for i, d in enumerate(tail):
            scored[d] = float(-i)
        out[q] = scored
    return out


@register
class NDCG(TrecMeasure):
    family = "nDCG"
    trec_name = "ndcg_cut"
    description = "normalised discounted cumulative gain of the top k, with the graded labels as linear gains"


@register
class MAP(TrecMeasure):
    family = "MAP"
    trec_name = "map_cut"
    description = "mean average precision of the top k"


@register
class Recall(TrecMeasure):
    family = "R"
    trec_name = "recall"
    positional = False
    description = "share of a query's relevant documents found in the top k"


@register
class Precision(TrecMeasure):
    family = "P"
    trec_name = "P"
    positional = False
    description = "share of the top k that is relevant"


@register
class RR(Measure):
    family = "RR"
    description = "reciprocal rank of the first relevant document within the top k (0 when there is none)"

    uses_rank_matrix = True

    def compute(self, inp: EvalInput) -> dict[str, float]:
        top = inp.membership("relevant")[:, : self.k]
        first = np.where(top.any(axis=1), 1.0 / (top.argmax(axis=1) + 1), 0.0)
        out = dict.fromkeys(inp.qids, 0.0)  # no relevant document: 0
        out.update(zip(inp.with_relevant, first.tolist()))
        return out
