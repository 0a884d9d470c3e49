"""``Comp@k``: does the top k hold every document the query needs (NNN's completeness)?"""

from __future__ import annotations

import numpy as np

from .base import RELEVANT_QUERIES, EvalInput, Measure, register


def completeness_at_k(rel: np.ndarray, n_rel: np.ndarray, k: int) -> np.ndarray:
    """``Comp@k = 1[S_q ⊆ top-k]`` (0 when |S_q| > k) from a (queries × depth) relevant-membership matrix."""
    found = rel[:, :k].sum(axis=1)
    return ((found == n_rel) & (n_rel <= k) & (n_rel > 0)).astype(float)


@register
class Comp(Measure):
    family = "Comp"
    description = "1 when the top k holds every relevant document of the query (its whole set), else 0"
    averaged_over = RELEVANT_QUERIES
    uses_rank_matrix = True

    def compute(self, inp: EvalInput) -> dict[str, float]:
        n_rel = np.fromiter(map(inp.n_relevant.__getitem__, inp.with_relevant), dtype=np.int64,
                            count=len(inp.with_relevant))
        vals = completeness_at_k(inp.membership("relevant"), n_rel, self.k)  # type: ignore[arg-type]
        return dict(zip(inp.with_relevant, vals.tolist()))
