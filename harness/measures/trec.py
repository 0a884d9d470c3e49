"""The standard measures: nDCG, MAP, R and P through one batched pytrec_eval call; RR@k (which
pytrec_eval has no cutoff for) from the ranking itself."""

from __future__ import annotations

from typing import ClassVar, Sequence

from .base import EvalInput, Measure, register


class TrecMeasure(Measure):
    """A measure pytrec_eval computes: every such measure of one evaluation shares one call."""

    trec_name: ClassVar[str]

    def compute(self, inp: EvalInput) -> dict[str, float]:
        return self.compute_batch([self], inp)[self.name]

    @classmethod
    def compute_batch(cls, measures: Sequence[Measure], inp: EvalInput) -> dict[str, dict[str, float]]:
        import pytrec_eval

        keys = {f"{m.trec_name}_{m.k}": m for m in measures}  # type: ignore[attr-defined]
        specs = {f"{m.trec_name}.{m.k}" for m in measures}  # type: ignore[attr-defined]
        qrels = {q: {d: int(r) for d, r in inp.judgments.relevance[q].items()} for q in inp.qids}
        res = pytrec_eval.RelevanceEvaluator(qrels, specs, relevance_level=int(inp.threshold)).evaluate(
            inp.rank_scored)
        return {m.name: {q: float(res[q][key]) if q in res else 0.0 for q in inp.qids} for key, m in keys.items()}


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
    description = "share of a query's relevant documents found in the top k"


@register
class Precision(TrecMeasure):
    family = "P"
    trec_name = "P"
    description = "share of the top k that is relevant"


@register
class RR(Measure):
    family = "RR"
    description = "reciprocal rank of the first relevant document within the top k (0 when there is none)"

    def compute(self, inp: EvalInput) -> dict[str, float]:
        out: dict[str, float] = {}
        for q in inp.qids:
            rel = inp.relevant[q]
            out[q] = next((1.0 / (i + 1) for i, (d, _) in enumerate(inp.run.get(q, [])[: self.k]) if d in rel), 0.0)
        return out
