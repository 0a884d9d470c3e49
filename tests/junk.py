"""Retrievers that retrieve nothing a query asks for, as a hostile or careless submitter would send
them (named ``tests.junk:Class`` on the command line): the leaderboard must never rank one of them
above a real method."""

from __future__ import annotations

import re
from typing import Sequence

from harness.protocols import RunContext
from harness.types import Corpus, Query, Run
from retrievers.dense import DenseRetriever

_WORDS = re.compile(r"\w+")


def _ranked(ids: Sequence[str]) -> list[tuple[str, float]]:
    return [(d, float(len(ids) - r)) for r, d in enumerate(ids)]


class SameList:
    """The same k documents (the corpus's first) for every query."""

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        self.ids = list(corpus.ids)

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        return Run({q.id: _ranked(self.ids[:k]) for q in queries})


class LeastSimilar:
    """The k documents sharing the fewest words with the query (the most off-topic first)."""

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        self.docs = [(d.id, set(_WORDS.findall(f"{d.title} {d.text}".lower()))) for d in corpus]

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        out = Run()
        for q in queries:
            words = set(_WORDS.findall(q.text.lower()))
            order = sorted(range(len(self.docs)), key=lambda i: (len(words & self.docs[i][1]), i))
            out[q.id] = _ranked([self.docs[i][0] for i in order[:k]])
        return out


class Empty:
    """No document for any query."""

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        pass

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        return Run({q.id: [] for q in queries})


class ReversedDense(DenseRetriever):
    """Dense retrieval's whole ranking turned upside down: its least similar documents first."""

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        full = super().search(queries, len(self._doc_ids), ctx)
        return Run({q: [(d, -s) for d, s in reversed(r)][:k] for q, r in full.items()})
