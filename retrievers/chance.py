"""Chance level: a retriever that ignores the query.

``random`` ranks the whole corpus in a seeded random order per query, so every figure it gets is
what a ranking that reads nothing of the query gets on that benchmark: the leaderboard shows its
row as the chance level of each table and plot (never ranked), and a row whose topical quality
is not above it is listed apart as below chance on relevance.

Each query's order is a permutation drawn from ``numpy.random.default_rng((seed, h(query id)))``
(``h``: the first 8 bytes of the id's SHA-256), so it does not depend on which other queries are
searched with it, on ``k``, or on the batch order; :meth:`RandomRetriever.score` returns the same
per-document scores as the ranking, so PairAcc compares what the ranking ranks (expected value
0.25 on NevIR: each query orders its pair's two documents at random).
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

import numpy as np

from harness.protocols import RunContext
from harness.registry import register
from harness.types import Corpus, Query, Run


def _query_key(qid: str) -> int:
    return int.from_bytes(hashlib.sha256(qid.encode("utf-8")).digest()[:8], "little")


@register("random", family="chance",
          description="Chance level: a seeded random ranking of the corpus per query (ignores the query)",
          paper="none: the chance level every method must beat (a uniformly random permutation per query)")
class RandomRetriever:
    """Chance level: a seeded random ranking of the corpus per query (ignores the query)."""

    def __init__(self, params: object | None = None):
        self.params = params
        self._ids: list[str] = []
        self._row: dict[str, int] = {}

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        self._ids = list(corpus.ids)
        self._row = {d: i for i, d in enumerate(self._ids)}

    def _scores(self, qid: str, seed: int) -> np.ndarray:
        """One uniform score per corpus document, in corpus order, for query ``qid``."""
        return np.random.default_rng((seed & 0xFFFFFFFFFFFFFFFF, _query_key(qid))).random(len(self._ids))

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        n = min(k, len(self._ids))
        run = Run()
        for q in queries:
            s = self._scores(q.id, ctx.seed)
            top = np.argpartition(-s, n - 1)[:n] if 0 < n < len(s) else np.arange(len(s))
            top = top[np.argsort(-s[top], kind="stable")][:n]
            run[q.id] = [(self._ids[i], float(s[i])) for i in top]
        return run

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for q in queries:
            wanted = doc_ids.get(q.id, ())
            if not wanted:
                continue
            s = self._scores(q.id, ctx.seed)
            out[q.id] = {d: float(s[self._row[d]]) for d in wanted if d in self._row}
        return out
