"""``TR@k``: recall that counts both documents of a contrastive pair as topical (CoDeR's Table 10).

On a constraint benchmark the satisfying and the violating document of a query are both *about*
the query; CoDeR's "Recall@5" on NevIR credits a ranking for finding either. ``TR@k`` is the share
of a query's topical documents — its relevant ones (grade ≥ the benchmark's threshold) and its
violating ones — that the top k holds, over queries with a violating document.
"""

from __future__ import annotations

from .base import VIOLATING_QUERIES, EvalInput, Measure, register


@register
class TR(Measure):
    family = "TR"
    description = ("share of the query's topical documents (relevant or violating: both documents of a pair) "
                   "in the top k")
    averaged_over = VIOLATING_QUERIES
    needs = frozenset({"violating"})
    uses_rank_matrix = True

    def compute(self, inp: EvalInput) -> dict[str, float]:
        out: dict[str, float] = {}
        rel, viol, k = inp.judgments.relevance, inp.judgments.violating, self.k
        for q in inp.with_violating:
            topical = {d for d, g in (rel.get(q) or {}).items() if g >= inp.threshold} | set(viol[q])
            out[q] = sum(1 for r in inp.ranks(q, topical) if r < k) / len(topical)  # type: ignore[operator]
        return out
