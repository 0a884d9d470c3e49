"""BM25 over ``bm25s`` (sparse-matrix scoring, not per-document Python loops).

Tokenisation: lowercase, ``\\w\\w+`` tokens, English stopwords removed; Snowball stemming
(PyStemmer) when ``stemmer`` is set. ``method`` picks the bm25s variant; the default ``lucene``
is ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` times
``tf / (tf + k1·(1 − b + b·|d|/avgdl))`` (Lucene ≥ 8 drops the constant ``k1+1``) summed over query tokens (the test suite checks
this against a hand computation). Documents matching no query token are not returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from harness.protocols import RunContext
from harness.ranking import topk_indices
from harness.registry import register
from harness.types import Corpus, Query, Run

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str | None = None  # e.g. "english" (Snowball via PyStemmer)
    stopwords: str | None = "en"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError("need k1 ≥ 0 and 0 ≤ b ≤ 1")


@register("bm25", params=BM25Params, family="lexical",
          description="BM25 over bm25s (Lucene variant by default), English stopwords, optional stemming",
          reference="Robertson & Zaragoza 2009; bm25s: Lù 2024, arXiv:2407.03618")
class BM25Retriever:
    def __init__(self, params: BM25Params | None = None):
        self.params = params or BM25Params()
        self._model = None
        self._doc_ids: list[str] = []
        self._stemmer = None
        if self.params.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.params.stemmer)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(list(texts), lower=True, stopwords=self.params.stopwords or [],
                              stemmer=self._stemmer, return_ids=False, show_progress=False)

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import bm25s

        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}
        tokens = self.tokenize(corpus.texts())
        self._model = bm25s.BM25(k1=self.params.k1, b=self.params.b, method=self.params.method)
        self._model.index(tokens, show_progress=False)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        assert self._model is not None, "index() must run before search()"
        ids = self._model.get_tokens_ids(query_tokens)
        if not ids:
            return np.zeros(len(self._doc_ids), dtype=np.float32)
        return self._model.get_scores_from_ids(ids)

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """The BM25 score of each query for the documents it names (0 where no term matches)."""
        out: dict[str, dict[str, float]] = {}
        for q, toks in zip(queries, self.tokenize([q.text for q in queries])):
            s = self.scores(toks)
            out[q.id] = {d: float(s[self._rows[d]]) for d in doc_ids.get(q.id, ())}
        return out

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        run = Run()
        tokens = self.tokenize([q.text for q in queries])
        with ctx.progress.track(len(queries), "bm25 search") as advance:
            for q, toks in zip(queries, tokens):
                s = self.scores(toks)
                idx = topk_indices(s, k, drop_nonpositive=True)
                run[q.id] = [(self._doc_ids[j], float(s[j])) for j in idx]
                advance(1)
        return run
