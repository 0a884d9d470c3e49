"""Dense retrieval: a sentence-transformers encoder and exact inner-product search with faiss
``IndexFlatIP`` over L2-normalised embeddings (cosine similarity), or over raw embeddings
(``normalize=false``: inner product, as Contriever scores).

The encoder comes from the shared pool (local directory, packaged offline model, or hub name);
embeddings are cached on disk by the pool, so a second run re-encodes nothing. Query and document
prefixes are parameters (e.g. BGE's ``"Represent this sentence for searching relevant passages: "``).
``pooling`` picks how token states become one vector: ``auto`` keeps a model's sentence-transformers
config and gives a hub model without one the pooling its model card prescribes
(:func:`harness.models.resolve.resolve_pooling`); ``mean``, ``cls``, ``max`` or ``lasttoken`` override it.
``backend`` says what runs the encoder (:data:`harness.models.onnx.BACKENDS`): ``torch`` (default),
``onnx`` (its transformer exported to ONNX once, cached beside the embeddings, and run by ONNX
Runtime on the CPU: torch's embeddings to rounding) or ``onnx-int8`` (the export's weights quantised
to int8: a different model, whose embeddings and rankings differ); every method whose parameters
extend :class:`DenseParams` takes it. ``contriever`` is ``dense`` with ``facebook/contriever``, mean
pooling and inner product.

On a pool (``beyondsim run dense --pool bm25@100``) ``dense`` is a reranker: :meth:`DenseRetriever.rerank`
scores each query's candidates by the inner product its search uses, so ``dense`` over a BM25 pool is
the classic hybrid. Its subclasses that change only the query embedding (``contriever``, ``hyde``,
``deo``, ``deo-rules``, ``colt``) inherit it. The helpers :func:`distinct` and :func:`follow_below`
and the context :func:`offline_phase` are shared by the rerankers of other modules.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from harness.models.onnx import BACKENDS, DEFAULT_BACKEND
from harness.models.pool import EncoderPool
from harness.models.resolve import DEFAULT_ENCODER, POOLING_CHOICES, card_normalization, resolve_pooling
from harness.protocols import RunContext
from harness.core.topk import run_from_matrix
from harness.registry import added_param, register
from harness.types import Candidate, Corpus, Query, Run
from . import citations


def distinct(candidates: Sequence[Candidate]) -> list[Candidate]:
    """A query's pool candidates in pool order, each document once (its first occurrence): a ranking
    may name a document at most once, whatever the pool holds."""
    seen: set[str] = set()
    out = []
    for c in candidates:
        if c.id not in seen:
            seen.add(c.id)
            out.append(c)
    return out


def follow_below(last: float, scores: Sequence[float]) -> list[float]:
    """The scores of a ranking's tail (the first stage's or the pool's deeper documents, in their
    order) moved to follow a reranked head whose last score is ``last``: shifted so the first is
    ``last − 1``, the gaps between them kept. Scores that would not be finite and non-increasing (a
    pool file's odd values) are made so: the tail then steps down by 1 from the last good score."""
    if not scores:
        return []
    shift = float(scores[0]) - last + 1.0
    out = [float(s) - shift for s in scores]
    prev = last
    for i, s in enumerate(out):
        if not math.isfinite(s) or s > prev:
            out[i] = prev - 1.0
        prev = out[i]
    return out


@contextlib.contextmanager
def offline_phase(ctx: RunContext) -> Iterator[None]:
    """Time work as the ledger's offline ``index`` phase wherever it runs: a retriever that indexes
    a first stage on first use (inside ``search``, an online phase) does it in here, so the ledger
    counts it in ``index`` and not in ``search`` (a phase opened inside another is counted once, in
    itself). Without a ledger, or already in ``index``, it does nothing."""
    ledger = ctx.ledger
    if ledger is None or ledger.current_phase == "index":
        yield
        return
    with ledger.phase("index"):
        yield


@dataclass(frozen=True)
class DenseParams:
    """The encoder of every embedding method: ``model``, the query and document prefixes,
    ``normalize``, ``batch_size``, ``max_length`` and ``backend`` (``torch``; ``onnx``: the same
    embeddings from ONNX Runtime on the CPU; ``onnx-int8``: int8 weights, different embeddings).
    ``backend=torch`` is left out of the spec, so its results keep the keys they had before there
    were backends."""

    model: str = DEFAULT_ENCODER
    query_prefix: str = ""
    doc_prefix: str = ""
    normalize: bool = True
    batch_size: int = 64
    max_length: int | None = None
    backend: str = added_param(DEFAULT_BACKEND, since="0.2.0", choices=BACKENDS)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")


TITLE_JOIN = ". "
"""What joins a document's title and text for the encoder by default (:attr:`harness.types.Document.full_text`)."""
MTEB_TITLE_JOIN = " "
"""MTEB's join (``(title + " " + text).strip()`` in its dense retrieval, and BEIR's): ``title_join=" "``."""


@dataclass(frozen=True)
class PooledDenseParams(DenseParams):
    """:class:`DenseParams` plus the pooling (``auto`` | ``mean`` | ``cls`` | ``max`` | ``lasttoken``)
    and ``title_join``, the text between a document's title and its text in what the encoder reads
    (``". "``, the default: ``Document.full_text``; ``" "``: MTEB's and BEIR's join, so a figure of
    theirs is compared on the same texts; a document without a title is its text either way). At its
    default it is left out of the spec, so results stored before it existed keep their key."""

    pooling: str = "auto"
    title_join: str = added_param(TITLE_JOIN, since="0.2.0")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pooling not in POOLING_CHOICES:
            raise ValueError(f"pooling must be one of {', '.join(POOLING_CHOICES)}, not {self.pooling!r}")
        if not isinstance(self.title_join, str):
            raise ValueError(f"title_join must be a string (\". \" or MTEB's \" \"), not {self.title_join!r}")


class DenseIndex:
    """The encoder and the exact inner-product index over the corpus that every embedding method
    shares; how queries are ranked is the subclass's (inner product for ``dense``, sparse decoding
    or MMR for the NNN family)."""

    def __init__(self, params: DenseParams | None = None):
        self.params = params or DenseParams()
        self._index = None
        self._doc_ids: list[str] = []
        self.doc_embeddings: np.ndarray | None = None
        self._pooling: tuple[str | None] | None = None  # (resolved override,), once known

    def _pool(self, ctx: RunContext) -> EncoderPool:
        if ctx.encoders is None:
            ctx.encoders = EncoderPool(ctx.cache_dir, ctx.device, ctx.progress)
        return ctx.encoders

    @property
    def pooling(self) -> str | None:
        """The pooling the encoder is run with: ``None`` keeps the model's own (params without a
        ``pooling`` field, or ``auto`` on a model with a sentence-transformers config)."""
        if self._pooling is None:
            asked = getattr(self.params, "pooling", None)
            self._pooling = (None if asked is None else resolve_pooling(self.params.model, asked),)
        return self._pooling[0]

    @property
    def backend(self) -> str:
        """What runs the encoder (:data:`harness.models.onnx.BACKENDS`); ``torch`` for params without a
        ``backend`` field."""
        return getattr(self.params, "backend", DEFAULT_BACKEND)

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        p = self.params
        return self._pool(ctx).encode(p.model, [q.text for q in queries], prefix=p.query_prefix,
                                      normalize=p.normalize, batch_size=p.batch_size,
                                      max_length=p.max_length, description="encoding queries",
                                      pooling=self.pooling, backend=self.backend)

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import faiss

        p = self.params
        card = card_normalization(p.model)
        if card is not None and card != p.normalize and getattr(p, "pooling", None) is not None:
            ctx.log(f"note: the model card of {p.model} scores {'cosine' if card else 'inner product'}; "
                    f"this run uses normalize={str(p.normalize).lower()}")
        emb = self._pool(ctx).encode(p.model, self.doc_texts(corpus), prefix=p.doc_prefix, normalize=p.normalize,
                                     batch_size=p.batch_size, max_length=p.max_length,
                                     description="encoding documents", pooling=self.pooling,
                                     backend=self.backend)
        self.doc_embeddings = np.ascontiguousarray(emb, dtype=np.float32)
        self._index = faiss.IndexFlatIP(self.doc_embeddings.shape[1])
        self._index.add(self.doc_embeddings)
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}

    def doc_texts(self, corpus: Corpus) -> list[str]:
        """What the encoder reads of each document: title and text joined by the parameters'
        ``title_join`` (:class:`PooledDenseParams`; ``". "``, ``Document.full_text``, for params
        without one), or the text alone for a document without a title."""
        join = getattr(self.params, "title_join", TITLE_JOIN)
        if join == TITLE_JOIN:
            return corpus.texts()
        return [f"{d.title}{join}{d.text}" if d.title else d.text for d in corpus]

    def candidate_rows(self, qid: str, candidates: Sequence[Candidate]) -> tuple[list[str], np.ndarray]:
        """The ids of a query's pool candidates (:func:`distinct`, pool order) and their rows in the
        indexed corpus; a candidate the index does not hold is an error naming it (the runner
        indexes the whole corpus before it reranks)."""
        assert self.doc_embeddings is not None, "index() must run before rerank()"
        ids = [c.id for c in distinct(candidates)]
        try:
            rows = np.fromiter((self._rows[d] for d in ids), dtype=np.int64, count=len(ids))
        except KeyError as e:
            raise ValueError(f"{type(self).__name__}: candidate {e.args[0]!r} of query {qid!r} is not in the "
                             "indexed corpus (index() must be given the corpus the pool was drawn from)") from None
        return ids, rows


@register("dense", params=PooledDenseParams, family="dense", citation=citations.SBERT,
          description="A sentence-transformers encoder and exact inner-product search (faiss); pooling and "
                      "normalisation selectable",
          paper="Reimers & Gurevych 2019, arXiv:1908.10084")
class DenseRetriever(DenseIndex):
    """Ranks by the inner product of the query embedding (``encode_queries``, which HyDE and DEO
    override) with each document's."""

    def __init__(self, params: DenseParams | None = None):
        super().__init__(params)
        self._searched: dict[str, np.ndarray] = {}  # the query embeddings of the last search

    def result_extra(self) -> dict[str, Any]:
        """The pooling the encoder ran with (what ``auto`` resolved to), the normalisation, and the
        backend when it is not torch."""
        encoder = {"model": self.params.model, "pooling": self.pooling or "model-default",
                   "normalize": self.params.normalize}
        if self.backend != DEFAULT_BACKEND:
            encoder["backend"] = self.backend
        return {"encoder": encoder}

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

    def embed_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        """The query embeddings ``search`` and ``rerank`` rank with (``encode_queries``: HyDE's mean
        with its passages, DEO's optimised vectors, …), kept for ``score``."""
        q = np.ascontiguousarray(self.encode_queries(queries, ctx), dtype=np.float32)
        self._searched = dict(zip((x.id for x in queries), q))
        return q

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._index is not None, "index() must run before search()"
        q = self.embed_queries(queries, ctx)
        scores, idx = self._index.search(q, min(k, len(self._doc_ids)))
        return run_from_matrix([x.id for x in queries], self._doc_ids, idx, scores)

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: each query's candidates ranked by the score ``search`` ranks the corpus by —
        the inner product of the query embedding with the document's (cosine with
        ``normalize=true``) — descending, ties in pool order; every candidate is returned, scored by
        it. It is ``search`` restricted to the pool: the same embeddings (the indexed corpus's rows,
        the same ``encode_queries``), only the documents outside the pool are never ranked. ``dense``
        over a BM25 pool is the classic hybrid.

        The subclasses inherit it with their own query embedding, so each is itself restricted to
        the pool: ``hyde`` ranks by the mean of the query's and its LLM passages' embeddings,
        ``colt`` by its trained tool embeddings, and ``deo`` and ``deo-rules`` by the query
        embedding DEO optimises (their ``encode_queries`` decomposes the query, by the LLM or by the
        rules, and runs the optimisation), so ``deo-rules`` here is DEO restricted to the pool.
        Only the queries that have candidates are encoded (an LLM is asked nothing for the others);
        a query without candidates gets an empty ranking."""
        run = Run({q.id: [] for q in queries})
        pools = {q.id: self.candidate_rows(q.id, candidates.get(q.id, ())) for q in queries}
        asked = [q for q in queries if len(pools[q.id][0])]
        if not asked:
            return run
        assert self.doc_embeddings is not None
        for q, e in zip(asked, self.embed_queries(asked, ctx)):
            ids, rows = pools[q.id]
            scores = self.doc_embeddings[rows] @ e
            order = np.lexsort((np.arange(len(rows)), -scores))
            run[q.id] = [(ids[i], float(scores[i])) for i in order.tolist()]
        return run


CONTRIEVER = "facebook/contriever"


@dataclass(frozen=True)
class ContrieverParams(PooledDenseParams):
    """Contriever as its authors score it: mean pooling over the last hidden states, no
    normalisation, inner product. ``model`` may name a local directory (or another Contriever,
    e.g. ``facebook/contriever-msmarco``)."""

    model: str = CONTRIEVER
    normalize: bool = False
    pooling: str = "mean"


@register("contriever", params=ContrieverParams, family="dense", citation=citations.CONTRIEVER,
          description="Contriever (facebook/contriever, a hub model: online users): mean pooling, inner product, "
                      "no normalisation",
          paper="Izacard et al. 2022, TMLR, arXiv:2112.09118")
class Contriever(DenseRetriever):
    """``dense`` with Contriever's defaults (CoDeR's dense baseline)."""

    def __init__(self, params: ContrieverParams | None = None):
        super().__init__(params or ContrieverParams())
