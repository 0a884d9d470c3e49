"""Dense retrieval: a sentence-transformers encoder and exact inner-product search with faiss
``IndexFlatIP`` over L2-normalised embeddings (cosine similarity).

The encoder comes from the shared pool (local directory, packaged offline model, or hub name);
embeddings are cached on disk by the pool, so a second run re-encodes nothing. Query and document
prefixes are parameters (e.g. BGE's ``"Represent this sentence for searching relevant passages: "``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from harness.encoders import DEFAULT_ENCODER, EncoderPool
from harness.protocols import RunContext
from harness.ranking import run_from_matrix
from harness.registry import register
from harness.types import Corpus, Query, Run


@dataclass(frozen=True)
class DenseParams:
    model: str = DEFAULT_ENCODER
    query_prefix: str = ""
    doc_prefix: str = ""
    normalize: bool = True
    batch_size: int = 64
    max_length: int | None = None


class DenseIndex:
    """The encoder and the exact inner-product index over the corpus that every embedding method
    shares; how queries are ranked is the subclass's (inner product for ``dense``, sparse decoding
    or MMR for the NNN family)."""

    def __init__(self, params: DenseParams | None = None):
        self.params = params or DenseParams()
        self._index = None
        self._doc_ids: list[str] = []
        self.doc_embeddings: np.ndarray | None = None

    def _pool(self, ctx: RunContext) -> EncoderPool:
        if ctx.encoders is None:
            ctx.encoders = EncoderPool(ctx.cache_dir, ctx.device, ctx.progress)
        return ctx.encoders

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        p = self.params
        return self._pool(ctx).encode(p.model, [q.text for q in queries], prefix=p.query_prefix,
                                      normalize=p.normalize, batch_size=p.batch_size,
                                      max_length=p.max_length, description="encoding queries")

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import faiss

        p = self.params
        emb = self._pool(ctx).encode(p.model, corpus.texts(), prefix=p.doc_prefix, normalize=p.normalize,
                                     batch_size=p.batch_size, max_length=p.max_length,
                                     description="encoding documents")
        self.doc_embeddings = np.ascontiguousarray(emb, dtype=np.float32)
        self._index = faiss.IndexFlatIP(self.doc_embeddings.shape[1])
        self._index.add(self.doc_embeddings)
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}


@register("dense", params=DenseParams, family="dense",
          description="A sentence-transformers encoder and exact inner-product search (faiss)",
          reference="Reimers & Gurevych 2019, arXiv:1908.10084")
class DenseRetriever(DenseIndex):
    """Ranks by the inner product of the query embedding (``encode_queries``, which HyDE and DEO
    override) with each document's."""

    def __init__(self, params: DenseParams | None = None):
        super().__init__(params)
        self._searched: dict[str, np.ndarray] = {}  # the query embeddings of the last search

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """Inner products of each query with the documents it names, as ``search`` scores them. A
        query the last search ranked keeps the embedding it was ranked with, so nothing is encoded
        (nor an LLM asked) twice."""
        assert self.doc_embeddings is not None, "index() must run before score()"
        fresh = [q for q in queries if q.id not in self._searched]
        if fresh:
            self._searched.update(zip((q.id for q in fresh), self.encode_queries(fresh, ctx)))
        return {x.id: {d: float(np.dot(self._searched[x.id], self.doc_embeddings[self._rows[d]]))
                       for d in doc_ids.get(x.id, ())} for x in queries}

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._index is not None, "index() must run before search()"
        q = np.ascontiguousarray(self.encode_queries(queries, ctx), dtype=np.float32)
        self._searched = dict(zip((x.id for x in queries), q))
        scores, idx = self._index.search(q, min(k, len(self._doc_ids)))
        return run_from_matrix([x.id for x in queries], self._doc_ids, idx, scores)
