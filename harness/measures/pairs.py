"""NevIR's paired accuracy ``PairAcc``: a pair counts when each of its two queries scores its own
document strictly above the other one."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..types import Pair, Run
from .base import PAIRS, EvalInput, Measure, register


def pair_documents(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    """The documents each pair query is compared on: both documents of its pair."""
    out: dict[str, set[str]] = {}
    for p in pairs:
        out.setdefault(p.q1, set()).update((p.d1, p.d2))
        out.setdefault(p.q2, set()).update((p.d1, p.d2))
    return out


def pair_accuracy(run: Run, pairs: Sequence[Pair],
                  scores: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """Per pair: 1 when both queries score their own document strictly above the other one. A
    query's two scores come from ``scores[q]`` when given (the pair documents scored directly,
    NevIR's protocol, so the figure does not depend on the ranking depth), else from its ranking;
    an absent document scores −∞, so ties and absences are wrong."""

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


@register
class PairAcc(Measure):
    family = "PairAcc"
    description = ("share of query pairs in which each query scores its own document strictly above the "
                   "pair's other document (NevIR)")
    averaged_over = PAIRS
    needs = frozenset({"pairs"})
    has_cutoff = False

    def compute(self, inp: EvalInput) -> dict[str, float]:
        if not inp.pairs:
            raise ValueError("PairAcc needs the benchmark's pairs; this benchmark has none")
        return pair_accuracy(inp.run, inp.pairs, inp.pair_scores)
