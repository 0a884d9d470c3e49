"""Constraint violations: ``V@k`` (is a violating document in the top k?) and ``FVR@k`` (the rank
of the first violating document, k + 1 when none), over queries with a violating document."""

from __future__ import annotations

import numpy as np

from .base import VIOLATING_QUERIES, EvalInput, Measure, register


def violation_at_k(viol: np.ndarray, k: int) -> np.ndarray:
    """``V@k`` per query from a (queries × depth) violating-membership matrix."""
    return viol[:, :k].any(axis=1).astype(float)


def first_violating_rank(viol: np.ndarray, k: int) -> np.ndarray:
    """``FVR@k = min({j ≤ k : r_j ∈ V_q} ∪ {k + 1})`` per query."""
    top = viol[:, :k]
    hit = top.any(axis=1)
    first = top.argmax(axis=1) + 1
    return np.where(hit, first, k + 1).astype(float)


class _Violation(Measure):
    averaged_over = VIOLATING_QUERIES
    needs = frozenset({"violating"})
    uses_rank_matrix = True
    reads_relevance = False

    def compute(self, inp: EvalInput) -> dict[str, float]:
        vals = self.per_query(inp.membership("violating"))
        return dict(zip(inp.with_violating, vals.tolist()))

    def per_query(self, viol: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class V(_Violation):
    family = "V"
    description = "1 when a document that violates the query's constraint is in the top k, else 0 (lower is better)"
    higher_is_better = False

    def per_query(self, viol: np.ndarray) -> np.ndarray:
        return violation_at_k(viol, self.k)  # type: ignore[arg-type]


@register
class FVR(_Violation):
    family = "FVR"
    description = "rank of the first violating document, k + 1 when none is in the top k (higher is better)"
    decimals = 2

    def per_query(self, viol: np.ndarray) -> np.ndarray:
        return first_violating_rank(viol, self.k)  # type: ignore[arg-type]
