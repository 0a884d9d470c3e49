"""``Sat@k``: is the query satisfied in the top k — a satisfying document there, and no violating
document ranked above it?

Why it heads the constraint table: ``V@k`` and ``FVR@k`` count violations only, so a ranking that
retrieves nothing about the query (random documents, the same list for every query, the most
off-topic documents, an empty ranking) has none and would win on them; ``PairAcc`` is won by
chance-level guessing where every real method is below 0.25. ``Sat@k`` credits a query only
when the ranking does what the query asks: the first satisfying document (grade ≥ the
benchmark's relevance threshold) is within the top k and no document that violates the query's
constraint comes before it. A random ranking of a corpus of N documents scores about k/N on a
query with one satisfying document; no ranking can score without retrieving what satisfies the
query. On a benchmark without violating documents it is the success rate (a relevant document
in the top k).

Per query it is 0 or 1, so like every measure it has bootstrap CIs and paired tests; it is
averaged over the queries with a relevant document (a query nothing can satisfy is not scored).
"""

from __future__ import annotations

import numpy as np

from .base import RELEVANT_QUERIES, EvalInput, Measure, register


def satisfied_at_k(rel: np.ndarray, first_violating: np.ndarray, k: int) -> np.ndarray:
    """``Sat@k`` per query from a (queries × depth) relevant-membership matrix and each query's
    0-based rank of its first violating document (≥ depth, e.g. the depth, when none is ranked):
    1 when the first relevant document is at a rank < k and < the first violating rank."""
    top = rel[:, :k]
    hit = top.any(axis=1)
    first = top.argmax(axis=1)
    return (hit & (first < first_violating)).astype(float)


@register
class Sat(Measure):
    family = "Sat"
    description = ("1 when a satisfying document is in the top k and no violating document is ranked above "
                   "it, else 0 (needs relevance: a ranking that retrieves nothing the query asks for scores 0)")
    averaged_over = RELEVANT_QUERIES
    uses_rank_matrix = True

    def compute(self, inp: EvalInput) -> dict[str, float]:
        rel = inp.membership("relevant")
        viol = inp.membership("violating")
        width = rel.shape[1]
        first_v = np.full(len(inp.with_relevant), width, dtype=np.int64)
        vrow = {q: i for i, q in enumerate(inp.with_violating)}
        if viol.size:
            any_v = viol.any(axis=1)
            fv = np.where(any_v, viol.argmax(axis=1), width)
            for i, q in enumerate(inp.with_relevant):
                j = vrow.get(q)
                if j is not None:
                    first_v[i] = fv[j]
        vals = satisfied_at_k(rel, first_v, self.k)  # type: ignore[arg-type]
        return dict(zip(inp.with_relevant, vals.tolist()))
