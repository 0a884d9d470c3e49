"""NNN decoding (non-negative elastic net over frozen dense embeddings) and the MMR baseline.

Both sit on top of :class:`retrievers.dense.DenseIndex`: documents and queries are encoded
by the shared encoder pool (same model, prefixes and cache as ``dense``, so embeddings computed
for one are reused by the other) and L2-normalised.

``nnn-fix`` (docs/methods/nnn.md#nnn-fix) solves, per query q and corpus matrix D (rows = documents)::

    w* = argmin_{w ≥ 0} ½‖Dᵀw − q‖² + λ1‖w‖₁ + (λ2/2)‖w‖²

with :mod:`retrievers.fista`, on ``ctx.device`` (CUDA when present, else CPU).

* ``mode="tol"`` (default): solved to KKT tolerance ``tol`` by the exact working-set solver
  (:func:`retrievers.fista.screened_solve`) — one dense pass (the top-k for the fill and a pool of
  candidates), exact active-set solves on a working set that grows from the KKT violators, and a
  certificate over the whole corpus (a bound from the last pass, else a guard pass; a full-corpus
  solve when the guard keeps firing). The result is the full-corpus minimiser (to ``tol``) for
  every λ1 > 0, not an approximation; ``candidates`` only changes the speed.
* ``mode="iters"``: exactly ``iters`` full-corpus FISTA steps from 0 with step 1/L,
  L = 1.01·(λ_max(DᵀD) + λ2) — the paper's fixed-T protocol (its support is that of the T-th
  iterate).

Ranking (the retrieved top-k): the documents in the support of w*, by coefficient descending
(ties by corpus order); if the support has fewer than k documents the list is filled with the
remaining documents in dense (inner-product) order; a support larger than k is cut at k.
Reported scores are rank-derived, ``k − rank + 1`` (k, k−1, …), so every list is strictly
decreasing and pytrec_eval keeps exactly this order; the coefficients themselves are not scores.

``l1-fix`` fixes λ2 = 0 (pure non-negative lasso); ``l2-fix`` fixes λ1 = 0 (non-negative ridge).
With λ1 = 0 the support is not small (every document with ``D_j·r > 0`` at the optimum joins
it), so screening saves nothing: ``l2-fix`` defaults to the paper's fixed-T protocol
(``mode="iters"``), and in ``mode="tol"`` it runs the full-corpus FISTA to the tolerance instead of
the screened solver.

After each ``search`` the solver statistics (support sizes, guard firings, rounds, iterations,
fallbacks, KKT residual) are in ``retriever.last_stats``.

``mmr`` is Maximal Marginal Relevance (Carbonell & Goldstein 1998) over the dense top
``max(candidates, k)``: greedily pick ``argmax_d λ·s(q,d) − (1−λ)·max_{d'∈S} s(d,d')`` (cosine
similarities; the first pick is the dense top-1), vectorised over queries. Scores are
rank-derived as above. On a pool (``--pool bm25@100``) ``mmr`` is a reranker: the pool is the
candidate set (:meth:`MMR.rerank`).

``nnn-fix``, ``l1-fix`` and ``l2-fix`` have no ``rerank``: their decoding reconstructs the query from
the whole corpus (the support and the KKT certificate are over every document), so there is no
restriction of it to a pool that is still the method — a solve over the pool's documents alone is
another estimator (the query reconstructed from 100 documents instead of the corpus).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from harness.models.resolve import DEFAULT_ENCODER
from harness.protocols import RunContext
from harness.registry import register
from harness.types import Candidate, Corpus, Query, Run
from . import citations

from .dense import DenseIndex
from .fista import ScreeningOptions, Solution, as_tensor, dense_candidates, lipschitz, screened_solve, solve_full

MODES = ("tol", "iters")


@dataclass(frozen=True)
class _EncoderFields:
    model: str = DEFAULT_ENCODER
    query_prefix: str = ""
    doc_prefix: str = ""
    batch_size: int = 64
    max_length: int | None = None

    @property
    def normalize(self) -> bool:
        """NNN and MMR need unit-norm embeddings; not a parameter."""
        return True


@dataclass(frozen=True)
class _SolverFields(_EncoderFields):
    """Solver settings shared by nnn-fix, l1-fix and l2-fix.

    ``mode``: "tol" (solve to KKT residual ``tol``; ``max_iters`` caps the steps of the FISTA
    fallbacks) or "iters" (exactly ``iters`` full-corpus steps). ``candidates``: the dense top-M
    that start the working set in tol mode (any M gives the same answer: violators join it until
    the whole corpus is certified); ``max_rounds``: guard passes before a query falls back to the
    full-corpus solve; ``query_chunk``: queries per batch of the corpus products."""

    mode: str = "tol"
    iters: int = 100
    tol: float = 1e-4
    max_iters: int = 20000
    candidates: int = 32
    max_rounds: int = 8
    query_chunk: int = 128

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.iters < 1 or self.max_iters < 1:
            raise ValueError("iters and max_iters must be ≥ 1")
        if not self.tol > 0:
            raise ValueError("tol must be > 0")
        if self.candidates < 1 or self.query_chunk < 1 or self.max_rounds < 0:
            raise ValueError("candidates, query_chunk ≥ 1; max_rounds ≥ 0")
        for name in ("l1", "l2"):
            v = getattr(self, name, 0.0)
            if not (v >= 0 and np.isfinite(v)):
                raise ValueError(f"{name} must be a finite number ≥ 0, got {v!r}")


@dataclass(frozen=True)
class NNNParams(_SolverFields):
    """``nnn-fix``: λ1 (``l1``) and λ2 (``l2``); paper grid {0.01, 0.03, 0.06, 0.1, 0.3, 0.6, 1.0}."""

    l1: float = 0.1
    l2: float = 0.1


@dataclass(frozen=True)
class L1Params(_SolverFields):
    """``l1-fix``: λ2 = 0."""

    l1: float = 0.1

    @property
    def l2(self) -> float:
        return 0.0


@dataclass(frozen=True)
class L2Params(_SolverFields):
    """``l2-fix``: λ1 = 0; fixed-T protocol by default (see module docstring)."""

    l2: float = 0.1
    mode: str = "iters"

    @property
    def l1(self) -> float:
        return 0.0


def _ranked_lists(qids: Sequence[str], doc_ids: Sequence[str], first: list[np.ndarray],
                  dense_order: np.ndarray, k: int) -> Run:
    """Per query: ``first`` (already ordered), then dense order without repeats, cut at k;
    scores k, k−1, … (strictly decreasing)."""
    run = Run()
    for i, q in enumerate(qids):
        head = [int(j) for j in first[i][:k]]
        seen = set(head)
        for j in dense_order[i]:
            if len(head) >= k:
                break
            j = int(j)
            if j >= 0 and j not in seen:
                head.append(j)
                seen.add(j)
        run[q] = [(doc_ids[j], float(k - r)) for r, j in enumerate(head)]
    return run


def exact_solve(D: torch.Tensor, Q: torch.Tensor, p: Any, k: int) -> Solution:
    """The tol-mode solve of nnn-fix / l1-fix (λ1 > 0) exactly as ``search`` runs it: the
    screened exact solver with the parameters ``p``, whose first corpus pass also returns the
    dense top-k (``Solution.dense_idx``) for the fill. Shared with ``tests/perf/fista.py``."""
    n = D.shape[0]
    options = ScreeningOptions(candidates=min(p.candidates, n), tol=p.tol, max_iters=p.max_iters,
                               max_rounds=p.max_rounds, chunk_size=p.query_chunk)
    return screened_solve(D, Q, float(p.l1), float(p.l2), options, dense_k=min(k, n))


class _EmbeddingRetriever(DenseIndex):
    """Dense encoding + index (faiss, CPU) and the embedding matrix as a tensor on ctx.device."""

    def __init__(self, params: Any = None):
        super().__init__(params or self.Params())  # type: ignore[attr-defined]
        self._D: torch.Tensor | None = None
        self.last_stats: dict[str, Any] = {}

    def result_extra(self) -> dict[str, Any]:
        """The last search's solver statistics (and a trained model's fit statistics), kept with
        the result under ``extra["retriever"]``."""
        import json

        return json.loads(json.dumps(self.last_stats, default=float))

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        super().index(corpus, ctx)
        self._D = as_tensor(self.doc_embeddings, torch.device(ctx.device))

    def _dense_top(self, qe: np.ndarray, depth: int, ctx: RunContext) -> tuple[np.ndarray, np.ndarray]:
        """Dense top-``depth`` (indices, scores), score descending: faiss on CPU, torch on GPU."""
        assert self._D is not None and self._index is not None, "index() must run before search()"
        depth = min(depth, self._D.shape[0])
        if self._D.device.type == "cpu":
            scores, idx = self._index.search(np.ascontiguousarray(qe, dtype=np.float32), depth)
            return idx, scores
        idx, scores = dense_candidates(self._D, as_tensor(qe, self._D.device), depth)
        return idx.cpu().numpy(), scores.cpu().numpy()


class _NNNBase(_EmbeddingRetriever):
    def __init__(self, params: Any = None):
        super().__init__(params)
        self._L: dict[float, float] = {}

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        super().index(corpus, ctx)
        self._L = {}  # step constants belong to the indexed corpus

    def _lipschitz(self) -> float:
        assert self._D is not None
        l2 = float(self.params.l2)
        if l2 not in self._L:
            self._L[l2] = lipschitz(self._D, l2)
        return self._L[l2]

    def _use_screening(self) -> bool:
        return self.params.l1 > 0

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._D is not None, "index() must run before search()"
        p = self.params
        qids = [q.id for q in queries]
        if not queries:
            return Run()
        n = self._D.shape[0]
        qe = self.encode_queries(queries, ctx)
        Q = as_tensor(qe, self._D.device)
        l1, l2 = float(p.l1), float(p.l2)
        if p.mode == "tol" and self._use_screening():
            # the solver's first corpus pass also gives the dense top-k for the fill
            sol = exact_solve(self._D, Q, p, k)
            assert sol.dense_idx is not None
            dense_idx = sol.dense_idx.cpu().numpy()
        else:
            dense_idx, _ = self._dense_top(qe, min(k, n), ctx)
            if p.mode == "iters":
                sol = solve_full(self._D, Q, l1, l2, iters=p.iters, L=self._lipschitz())
            else:
                sol = solve_full(self._D, Q, l1, l2, tol=p.tol, max_iters=p.max_iters, L=self._lipschitz())
        self.last_stats = dict(sol.stats)
        support = [i for i, _ in sol.lists()]
        return _ranked_lists(qids, self._doc_ids, support, dense_idx, min(k, n))


@register("nnn-fix", params=NNNParams, family="decoding", citation=citations.NNN,
          description="NNN decoding: a non-negative elastic net of frozen document embeddings reconstructs the query",
          paper="Non-negative Elastic Net Decoding for Information Retrieval (NNN)")
class NNNFix(_NNNBase):
    """NNN decoding on frozen dense embeddings (λ1, λ2 > 0)."""


@register("l1-fix", params=L1Params, family="decoding", citation=citations.NNN,
          description="NNN decoding with λ2 = 0 (non-negative lasso) on frozen embeddings",
          paper="Non-negative Elastic Net Decoding for Information Retrieval (NNN)")
class L1Fix(_NNNBase):
    """NNN decoding with λ2 = 0 (non-negative lasso)."""


@register("l2-fix", params=L2Params, family="decoding", citation=citations.NNN,
          description="NNN decoding with λ1 = 0 (non-negative ridge) on frozen embeddings",
          paper="Non-negative Elastic Net Decoding for Information Retrieval (NNN)")
class L2Fix(_NNNBase):
    """NNN decoding with λ1 = 0 (non-negative ridge); no screening (the support is not small)."""


# ---------------------------------------------------------------------------------------------
# MMR


@dataclass(frozen=True)
class MMRParams(_EncoderFields):
    lam: float = 0.5
    candidates: int = 100

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {self.lam!r}")
        if self.candidates < 1:
            raise ValueError("candidates must be ≥ 1")


def mmr_select(rel: Any, sim: Any, lam: float, k: int) -> np.ndarray:
    """Greedy MMR order over candidates, vectorised over queries.

    ``rel``: B × C query–candidate similarities; ``sim``: B × C × C candidate–candidate
    similarities; returns B × min(k, C) candidate positions in selection order. Step 1 picks
    ``argmax rel``; step t picks ``argmax_{d∉S} λ·rel_d − (1−λ)·max_{d'∈S} sim(d, d')``. Ties go
    to the lower candidate position (dense order when candidates are in dense order).
    """
    rel_t = torch.as_tensor(np.asarray(rel, dtype=np.float64))
    sim_t = torch.as_tensor(np.asarray(sim, dtype=np.float64))
    B, C = rel_t.shape
    k = min(k, C)
    out = torch.empty(B, k, dtype=torch.long)
    chosen = torch.zeros(B, C, dtype=torch.bool)
    maxsim = torch.zeros(B, C, dtype=torch.float64)
    rows = torch.arange(B)
    for t in range(k):
        score = rel_t.clone() if t == 0 else lam * rel_t - (1.0 - lam) * maxsim
        score[chosen] = -torch.inf
        j = torch.argmax(score, dim=1)  # first maximum on ties
        out[:, t] = j
        chosen[rows, j] = True
        col = sim_t[rows, :, j]
        maxsim = col if t == 0 else torch.maximum(maxsim, col)
    return out.numpy()


@register("mmr", params=MMRParams, family="diversification", citation=citations.MMR,
          description="Maximal marginal relevance re-ranking of the dense top candidates",
          paper="Carbonell & Goldstein, SIGIR 1998")
class MMR(_EmbeddingRetriever):
    """Maximal Marginal Relevance re-ranking of the dense top candidates."""

    # B × C × C similarities computed at a time (float32: 128 MiB), so a deep pool stays in memory
    SIM_BUDGET = 1 << 25

    def select(self, qe: np.ndarray, idx: np.ndarray, rel: np.ndarray | None, k: int) -> np.ndarray:
        """MMR's greedy order over the candidates ``idx`` (B × C corpus rows) of the queries ``qe``:
        the picked rows (B × min(k, C)), in selection order. ``rel``: the query–candidate
        similarities (None: the inner products with ``qe``, computed here); the candidate–candidate
        ones are the embeddings' inner products. Queries go in chunks of at most ``SIM_BUDGET``
        similarities (each query's selection is its own: the chunking changes nothing)."""
        D = np.asarray(self.doc_embeddings)
        B, C = idx.shape
        step = max(1, self.SIM_BUDGET // max(C * C, 1))
        out = []
        for s in range(0, B, step):
            E = D[idx[s:s + step]]  # b × C × d
            r = np.einsum("bcd,bd->bc", E, qe[s:s + step]) if rel is None else rel[s:s + step]
            sim = np.einsum("bcd,bed->bce", E, E)
            order = mmr_select(r, sim, self.params.lam, min(k, C))
            out.append(np.take_along_axis(idx[s:s + step], order, axis=1))
        return np.concatenate(out) if out else np.zeros((0, min(k, C)), dtype=np.int64)

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._D is not None, "index() must run before search()"
        if not queries:
            return Run()
        p = self.params
        qe = np.asarray(self.encode_queries(queries, ctx), dtype=np.float32)
        n = self._D.shape[0]
        depth = min(max(p.candidates, k), n)
        idx, scores = self._dense_top(qe, depth, ctx)
        picked = self.select(qe, idx, scores, min(k, depth))
        self.last_stats = {"candidates": depth, "lam": p.lam}
        return _ranked_lists([q.id for q in queries], self._doc_ids, list(picked), idx, min(k, n))

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: MMR's greedy selection (:func:`mmr_select`, the same λ) with the pool as the
        candidate set, in place of the dense top ``max(candidates, k)`` that ``search`` builds. The
        relevance is MMR's own (the cosine of the query and document embeddings, not the pool's
        scores), the first pick the candidate of highest cosine, and ties go to the earlier pool
        position. Every candidate is ranked (the greedy runs to the pool's end: the pool's size,
        not ``candidates``, is the depth), scored ``C − rank + 1`` as ``search`` scores (C the
        pool's size). What differs from ``search``: the candidates are the pool's documents, not
        the ones nearest the query under the encoder, so a document the encoder would have put in
        the top ``candidates`` but the pool lacks is never picked, and one outside it can be. A
        query without candidates gets an empty ranking."""
        run = Run({q.id: [] for q in queries})
        pools = {q.id: self.candidate_rows(q.id, candidates.get(q.id, ())) for q in queries}
        asked = [q for q in queries if len(pools[q.id][0])]
        if not asked:
            return run
        qe = np.asarray(self.encode_queries(asked, ctx), dtype=np.float32)
        by_size: dict[int, list[int]] = {}  # queries with pools of one size go through the greedy together
        for i, q in enumerate(asked):
            by_size.setdefault(len(pools[q.id][0]), []).append(i)
        for size, members in by_size.items():
            idx = np.stack([pools[asked[i].id][1] for i in members])
            picked = self.select(qe[members], idx, None, size)
            for i, rows in zip(members, picked.tolist()):
                run[asked[i].id] = [(self._doc_ids[j], float(size - r)) for r, j in enumerate(rows)]
        sizes = [len(pools[q.id][0]) for q in queries]
        self.last_stats = {"candidates": "pool", "pool": {"mean": float(np.mean(sizes)), "min": min(sizes),
                                                          "max": max(sizes)}, "lam": self.params.lam}
        return run
