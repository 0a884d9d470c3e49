"""NevIR's paired accuracy ``PairAcc``: a pair counts when each of its two queries scores its own
document strictly above the other one."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from ..core.types import Pair, Run
from .base import PAIRS, EvalInput, Measure, register


def pair_documents(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    """The documents each pair query is compared on: both documents of its pair."""
    out: dict[str, set[str]] = {}
    for p in pairs:
        out.setdefault(p.q1, set()).update((p.d1, p.d2))
        out.setdefault(p.q2, set()).update((p.d1, p.d2))
    return out


def pair_accuracy(run: Run, pairs: Sequence[Pair],
                  scores: Mapping[str, Mapping[str, float]] | None = None, *,
                  ranked_score: Callable[[str, str], float] | None = None) -> dict[str, float]:
    """Per pair: 1 when both queries score their own document strictly above the other one. A
    query's two scores come from ``scores[q]`` when given (the pair documents scored directly,
    NevIR's protocol, so the figure does not depend on the ranking depth), else from its ranking
    (``ranked_score(q, d)`` when given, e.g. :meth:`EvalInput.raw_score`); an absent document scores
    −∞, so ties and absences are wrong."""
    rankings: dict[str, Mapping[str, float]] = {}

    def from_run(q: str, d: str) -> float:
        m = rankings.get(q)
        if m is None:
            m = rankings[q] = {x: float(s) for x, s in run.get(q, [])}
        return m.get(d, -math.inf)

    ranked = ranked_score or from_run

    def either(q: str, d: str) -> float:
        if q in scores:  # type: ignore[operator]
            return scores[q].get(d, -math.inf)  # type: ignore[index]
        return ranked(q, d)

    score = ranked if scores is None else either  # (no wrapper call per score without direct scores)
    return {p.id or str(n): 1.0 if (score(p.q1, p.d1) > score(p.q1, p.d2)
                                    and score(p.q2, p.d2) > score(p.q2, p.d1)) else 0.0
            for n, p in enumerate(pairs)}


@register
class PairAcc(Measure):
    family = "PairAcc"
    description = ("share of query pairs in which each query scores its own document strictly above the "
                   "pair's other document (NevIR)")
    averaged_over = PAIRS
    needs = frozenset({"pairs"})
    has_cutoff = False
    reads_relevance = False
    chance = 0.25
    chance_why = "each query orders its pair's two documents one way or the other with probability 1/2, independently"


    def compute(self, inp: EvalInput) -> dict[str, float]:
        if not inp.pairs:
            raise ValueError("PairAcc needs the benchmark's pairs; this benchmark has none")
        return pair_accuracy(inp.run, inp.pairs, inp.pair_scores, ranked_score=inp.raw_score)
