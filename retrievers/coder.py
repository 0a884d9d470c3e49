"""CoDeR: a topical encoder ``E_T`` and a trained constraint-compatibility encoder ``E_C``,
composed by the two published policies (CoDeR §4, appendix F; docs/methods/coder.md).

``coder-seq``
    Candidates ``C_T(q)``: the ``depth`` (100) documents nearest to the query under ``E_T``.
    Keep every candidate with ``s_C ≥ τ`` and rank the kept ones by ``α·s_T + (1−α)·s_C``.
    ``fill`` says what happens to the others:

    * ``"topical"`` (default): they follow the kept ones in topical order (``s_T`` ↓), so the
      filter only demotes and a ranking is never empty — when nothing reaches ``τ`` it is the
      topical ranking. This is what the authors' code does (``nice-hku-coder/CoDeR``,
      ``experiments/eval_retrieval_metrics.py``), which goes on past ``C_T(q)`` through the rest
      of the corpus in topical order; here the list ends with the ``depth`` candidates;
    * ``"none"``: they are dropped (Eq. 7 read literally); a ``τ`` above every score empties the ranking.

    ``τ`` is an absolute threshold on the compatibility encoder's score scale (the paper's
    defaults were set on its encoder trained from bge-large-en-v1.5). ``tau`` sets it;
    ``tau_quantile=q`` calibrates it to this encoder instead: ``τ`` is the ``q``-quantile of
    ``s_C`` over the topical candidates of the queries of ``<benchmark>:dev``, else
    ``<benchmark>:train``, else — when the benchmark has neither — of the evaluated queries
    themselves. Only query and document texts are read, never a judgment; ``q`` is about the
    share of candidates the filter demotes. The result says which ``τ`` was used and where it
    came from (``extra.retriever.tau_source``).

``coder-union``
    Pool ``C_U = C_T ∪ C_C`` (``C_C``: the ``depth`` nearest under ``E_C``). Inside the pool rank by
    ``s_T`` and by ``s_C`` (ranks ``ρ_T``, ``ρ_C``, 1 = best; ties by the other score, then by pool
    order) and use ``s̃ = 1/ρ``. Keep the documents whose ``s̃_C`` reaches a query-relative
    threshold ``γ_q``; rank them by ``α·s̃_T + (1−α)·s̃_C``; when nothing passes, rank the whole
    pool. **[derived]** ``γ_q`` is a percentile of ``s̃_C`` over the pool, and the paper does not fix
    which way ``p`` reads, so ``direction`` says:

    * ``"drop"`` (default; docs/methods/coder.md#coder-union): ``γ_q`` = the ``p``-quantile —
      ``p`` is the share of the pool filtered out (``p = 0.1`` keeps ~90 %, ``p = 0.8`` ~20 %);
    * ``"keep"``: ``γ_q`` = the ``(1−p)``-quantile — ``p`` is the share kept.

Both policies break ties in the fused score by ``s_C``, then ``s_T``, then candidate order, and
emit strictly decreasing scores (pytrec_eval would otherwise re-sort ties by document id).

Defaults by task family (the paper's): ``topical`` (BEIR-style; also used for ``completeness``)
Seq α = 0.5, τ = 0.9 and Union α = 0.8, p = 0.8; ``constraint`` Seq α = 0.2, τ = 0.3 and Union
α = 0.3, p = 0.1. Leave ``alpha``/``tau``/``percentile`` unset to get them. The result keeps
(``extra.retriever``) the resolved values, where the filter value came from (``tau_source`` /
``percentile_source``: a parameter, the paper's default for a task family and the scale it
assumes, or a calibration), and per query how many candidates the filter kept (mean, min, max)
and for how many queries it kept none. A run whose filter keeps nothing for some queries says so
in its log.

``coder-compat``
    The compatibility encoder alone: the whole corpus ranked by ``s_C`` (the paper's Table 10
    middle row, "the trained constraint encoder"). It takes the encoder parameters below and
    trains or reuses the same artifact as the two policies.

The compatibility encoder (``compat_model``):

* ``"auto"`` (default) — the artifact that :mod:`retrievers.coder_train` trains from
  ``compat_base`` (default: the topical ``model``) with the paper's recipe; trained on first use
  (timed as the run's ``fit`` phase) and reused from ``$BEYONDSIM_HOME/models/coder/`` after that.
  ``train_seed`` (default: 42 + the run's seed — 42 is the authors' seed, and ``--seeds 10``
  averages ten trained encoders as the paper does) and ``compat_pooling`` belong to its recipe;
* a directory written by ``beyondsim train coder`` (it carries ``coder_card.json``);
* any other encoder name or directory — an *untrained* compatibility encoder (the paper's Table 8
  Group 2 ablation: e.g. ``compat_model=all-MiniLM-L6-v2``).

A trained encoder's card lists the benchmark splits, ids and text digests it was trained on; the
runner refuses to score it on anything that shares them (:mod:`harness.core.leakage`).

After evaluation the retriever records the score separation of CoDeR's Fig. 9 for the reports
(``extra.analysis.score_separation``): for every query with a satisfying and a violating
document, ``s_C(q, d+) − s_C(q, d−)`` (means over each set) under the compatibility encoder and,
for a trained one, under its untrained base, with the raw satisfying and violating scores.
CoDeR makes no LLM call.

On a pool (``beyondsim run coder-seq --pool bm25@100``) ``coder-seq`` and ``coder-union`` are rerankers:
the pool's documents take the place of their corpus-wide candidates, scored by their own encoders
(:meth:`CoderSeq.rerank`, :meth:`CoderUnion.rerank` say what changes). ``coder-compat`` has no
``rerank``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness.data import DataError, default_data_dir
from harness.models.pool import EncoderPool
from harness.models.resolve import DEFAULT_ENCODER
from harness.core.leakage import TrainingData
from harness.protocols import RunContext
from harness.core.topk import run_from_matrix
from harness.registry import load_benchmark, register
from harness.types import Benchmark, Candidate, Corpus, Query, Run
from . import citations

from .coder_train import CoderTrainConfig, artifact_dir, read_card, summarise_card, train_coder
from .dense import distinct

# (alpha, tau) for Seq and (alpha, percentile) for Union, by task family
SEQ_DEFAULTS = {"constraint": (0.2, 0.3), "topical": (0.5, 0.9)}
UNION_DEFAULTS = {"constraint": (0.3, 0.1), "topical": (0.8, 0.8)}
DIRECTIONS = ("drop", "keep")
FILLS = ("topical", "none")


def strictly_decreasing(scores: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The scores of a ranked list, lowered where needed so each is at least ``eps`` below the one
    before (the order is already decided; this only keeps evaluators from re-sorting ties)."""
    out = np.asarray(scores, dtype=np.float64).copy()
    for i in range(1, len(out)):
        if out[i] > out[i - 1] - eps:
            out[i] = out[i - 1] - eps
    return out


def _order(fused: np.ndarray, s_c: np.ndarray, s_t: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``idx`` sorted by fused ↓, then s_C ↓, then s_T ↓, then position ↑."""
    return idx[np.lexsort((idx, -s_t[idx], -s_c[idx], -fused[idx]))]


def seq_policy(s_t: np.ndarray, s_c: np.ndarray, alpha: float, tau: float, k: int,
               fill: str = "topical") -> tuple[np.ndarray, np.ndarray, int]:
    """CoDeR-Seq over one query's candidates (in topical order). Returns the positions of the ranked
    candidates, their scores and how many passed the filter.

    The kept candidates (``s_C ≥ τ``) come first by the fused score. With ``fill="topical"`` the
    others follow by ``s_T`` ↓ (ties by ``s_C`` ↓, then position), scored by their ``s_T`` shifted
    to sit just below the last kept one (unshifted when none is kept); ``fill="none"`` drops them."""
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, not {fill!r}")
    s_t, s_c = np.asarray(s_t, dtype=np.float64), np.asarray(s_c, dtype=np.float64)
    fused = alpha * s_t + (1.0 - alpha) * s_c
    keep = s_c >= tau
    kept = _order(fused, s_c, s_t, np.flatnonzero(keep))[:k]
    scores = fused[kept]
    ranked = kept
    if fill == "topical" and len(kept) < k:
        rest = np.flatnonzero(~keep)
        rest = rest[np.lexsort((rest, -s_c[rest], -s_t[rest]))][:k - len(kept)]
        tail = s_t[rest]
        if len(kept) and len(rest):
            tail = tail - tail[0] + scores[-1] - 1e-6
        ranked, scores = np.concatenate([kept, rest]), np.concatenate([scores, tail])
    return ranked, strictly_decreasing(scores), int(keep.sum())


def reciprocal_ranks(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """``1/ρ`` where ρ is the rank by ``primary`` ↓ (ties by ``secondary`` ↓, then position)."""
    n = len(primary)
    order = np.lexsort((np.arange(n), -secondary, -primary))
    rank = np.empty(n, dtype=np.float64)
    rank[order] = np.arange(1, n + 1)
    return 1.0 / rank


def union_threshold(rc: np.ndarray, p: float, direction: str) -> float:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    return float(np.quantile(rc, p if direction == "drop" else 1.0 - p))


def union_policy(s_t: np.ndarray, s_c: np.ndarray, alpha: float, p: float, k: int,
                 direction: str = "drop") -> tuple[np.ndarray, np.ndarray, int]:
    """CoDeR-Union over one query's pool. Returns ranked pool positions, scores and how many passed
    the filter (0 means the whole pool was ranked)."""
    s_t, s_c = np.asarray(s_t, dtype=np.float64), np.asarray(s_c, dtype=np.float64)
    rt, rc = reciprocal_ranks(s_t, s_c), reciprocal_ranks(s_c, s_t)
    gamma = union_threshold(rc, p, direction)
    keep = rc >= gamma - 1e-12
    passed = int(keep.sum())
    if not passed:
        keep[:] = True
    fused = alpha * rt + (1.0 - alpha) * rc
    ranked = _order(fused, s_c, s_t, np.flatnonzero(keep))[:k]
    return ranked, strictly_decreasing(fused[ranked]), passed


# one query's candidates (corpus rows) with their topical and compatibility scores
Scored = tuple[np.ndarray, np.ndarray, np.ndarray]


def candidate_scores(qt: np.ndarray, qc: np.ndarray, dt: np.ndarray, dc: np.ndarray, index_t: Any,
                     index_c: Any, depth: int) -> list[Scored]:
    """Per query: the ``depth`` nearest documents under ``E_T`` (then, with ``index_c``, those of
    ``E_C`` not already among them) and their ``s_T`` and ``s_C``."""
    depth = min(depth, len(dt))
    _, cand_t = index_t.search(qt, depth)
    cand_c = index_c.search(qc, depth)[1] if index_c is not None else None
    out = []
    for i in range(len(qt)):
        cand = cand_t[i][cand_t[i] >= 0]
        if cand_c is not None:
            extra = cand_c[i][cand_c[i] >= 0]
            cand = np.concatenate([cand, extra[~np.isin(extra, cand)]])
        out.append((cand, dt[cand] @ qt[i], dc[cand] @ qc[i]))
    return out


def pool_scores(qt: np.ndarray, qc: np.ndarray, dt: np.ndarray, dc: np.ndarray,
                pools: Sequence[np.ndarray]) -> list[Scored]:
    """Per query: its pool's documents (corpus rows) in topical order — ``s_T`` ↓, ties in pool
    order — with their ``s_T`` and ``s_C``, computed as :func:`candidate_scores` computes them: what
    the policies take, with the pool in place of the topical (and compatibility) top ``depth``."""
    out = []
    for i, rows in enumerate(pools):
        rows = np.asarray(rows, dtype=np.int64)
        s_t = dt[rows] @ qt[i]
        order = np.lexsort((np.arange(len(rows)), -s_t))
        cand = rows[order]
        out.append((cand, s_t[order], dc[cand] @ qc[i]))
    return out


def spread(counts: Sequence[int]) -> dict[str, float]:
    """Mean, min and max of per-query counts."""
    if not counts:
        return {"mean": 0.0, "min": 0, "max": 0}
    return {"mean": round(float(np.mean(counts)), 3), "min": int(min(counts)), "max": int(max(counts))}


def describe_source(source: dict[str, Any]) -> str:
    """One line for a ``*_source`` record."""
    if source.get("from") == "paper default":
        return f"the paper's default for {source['task_family']} tasks, assuming {source['scale']}"
    if source.get("from") == "calibrated":
        own = "" if source["held_out"] else " (the evaluated queries, without their judgments)"
        return f"the {source['quantile']:g}-quantile of s_C over the topical candidates of {source['split']}{own}"
    return "set by parameter"


def calibration_splits(name: str) -> list[str]:
    """The splits a calibration may read for benchmark ``name``, in order: ``:dev``, then ``:train``
    (never ``name`` itself; a ``[:N]`` query slice counts as its benchmark)."""
    base = re.sub(r"\[:\d+\]$", "", name)
    root = base.split(":", 1)[0]
    return [f"{root}:{split}" for split in ("dev", "train") if root and f"{root}:{split}" != base]


@dataclass(frozen=True)
class CompatParams:
    """The compatibility encoder ``E_C`` and how it is used to encode (every CoDeR configuration)."""
    model: str = DEFAULT_ENCODER  # topical encoder E_T; the base the auto-trained E_C starts from
    query_prefix: str = ""  # E_T's query prefix (BGE: "Represent this sentence for searching relevant passages: ")
    compat_model: str = "auto"  # "auto" | a `beyondsim train coder` directory | any encoder (untrained)
    compat_base: str | None = None  # base of the auto-trained encoder (default: model)
    compat_pooling: str | None = "mean"  # pooling of the auto-trained encoder
    compat_query_prefix: str | None = None  # None: the card's training prefix (else query_prefix)
    train_seed: int | None = None  # auto training seed (None: 42 + the run's seed; 42 is the authors')
    batch_size: int = 64
    max_length: int | None = None


@dataclass(frozen=True)
class CoderParams(CompatParams):
    doc_prefix: str = ""
    pooling: str | None = None  # E_T pooling override (the paper: mean); None keeps the model's
    depth: int = 100
    alpha: float | None = None  # None: the task family's default


@dataclass(frozen=True)
class CoderSeqParams(CoderParams):
    tau: float | None = None  # None: the task family's default, or the calibrated value
    tau_quantile: float | None = None  # calibrate τ: this quantile of s_C over the topical candidates
    fill: str = "topical"  # "topical" (the authors' code): the others follow in topical order | "none": dropped


@dataclass(frozen=True)
class CoderUnionParams(CoderParams):
    percentile: float | None = None
    direction: str = "drop"  # "drop": p = share filtered out; "keep": p = share kept


class _CompatEncoder:
    """What every CoDeR configuration shares: resolving (and for ``auto``, training) the
    compatibility encoder, encoding with it, the training data it declares, and Fig. 9's score
    separation after evaluation."""

    def __init__(self, params: CompatParams):
        self.params = params
        self.compat_name = ""
        self.card: dict[str, Any] | None = None
        self.trained_here = False

    def train_config(self, ctx: RunContext) -> CoderTrainConfig:
        p = self.params
        return CoderTrainConfig(base_model=p.compat_base or p.model, pooling=p.compat_pooling,
                                query_prefix=p.query_prefix if p.compat_query_prefix is None else p.compat_query_prefix,
                                seed=42 + ctx.seed if p.train_seed is None else p.train_seed)

    def prepare(self, ctx: RunContext) -> None:
        """Resolve (and for ``auto``, train on first use) the compatibility encoder."""
        p = self.params
        if p.compat_model == "auto":
            data_dir = default_data_dir(ctx.data_dir)
            cfg = self.train_config(ctx)
            home = Path(ctx.cache_dir).parent
            path = artifact_dir(home, cfg)
            card = read_card(path)
            self.trained_here = card is None
            if card is None:
                train_coder(cfg, home=home, data_dir=data_dir, device=ctx.device, progress=ctx.progress,
                            load_benchmark=lambda n: load_benchmark(n, data_dir, ctx.online), log=ctx.log,
                            out_dir=path)
                card = read_card(path)
            elif ctx.ledger is not None and card is not None:  # trained before: charged what training cost
                ctx.ledger.reuse("trained encoder", card.get("wall_s"), card.get("cpu_s"))
            self.compat_name, self.card = str(path), card
        else:
            d = Path(p.compat_model).expanduser()
            self.card = read_card(d) if d.is_dir() else None
            self.compat_name = str(d.resolve()) if d.is_dir() else p.compat_model

    def training_data(self, ctx: RunContext) -> TrainingData | None:
        if self.card is None:
            return None
        return TrainingData.from_dict(self.card.get("training_data", {}))

    @property
    def compat_prefix(self) -> str:
        if self.card is not None:
            return str(self.card.get("query_prefix", ""))
        p = self.params
        return p.query_prefix if p.compat_query_prefix is None else p.compat_query_prefix

    def _pool(self, ctx: RunContext) -> EncoderPool:
        if ctx.encoders is None:
            ctx.encoders = EncoderPool(ctx.cache_dir, ctx.device, ctx.progress)
        return ctx.encoders

    def _encode_as(self, ctx: RunContext, which: str, name: str, prefix: str, pooling: str | None,
                   texts: list[str], query: bool) -> np.ndarray:
        p = self.params
        emb = self._pool(ctx).encode(name, texts, prefix=prefix, normalize=True, batch_size=p.batch_size,
                                     max_length=p.max_length, pooling=pooling,
                                     description=f"encoding {'queries' if query else 'documents'} (E_{which})")
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _encode_c(self, ctx: RunContext, texts: list[str], query: bool) -> np.ndarray:
        return self._encode_as(ctx, "C", self.compat_name, self.compat_prefix if query else "", None, texts, query)

    def compat_extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.compat_name, "trained": self.card is not None,
                               "trained_in_this_run": self.trained_here, "query_prefix": self.compat_prefix}
        if self.card is not None:
            out["card"] = summarise_card(self.card)
        return out

    def analyse(self, benchmark: Benchmark, ctx: RunContext) -> dict[str, Any]:
        sep = {"compat": score_separation(self._pool(ctx), self.compat_name, self.compat_prefix, benchmark,
                                          batch_size=self.params.batch_size)}
        if self.card is not None:
            sep["base"] = score_separation(self._pool(ctx), str(self.card["base_model"]), self.compat_prefix,
                                           benchmark, pooling=self.card.get("pooling"),
                                           batch_size=self.params.batch_size)
            sep["base"]["model"] = self.card["base_model"]
        sep["compat"]["model"] = self.compat_name
        return {"score_separation": sep} if sep["compat"]["queries"] else {}


class _Coder(_CompatEncoder):
    policy = ""
    defaults: dict[str, tuple[float, float]] = {}  # task family -> (alpha, filter value)
    filter_param = ""  # the params field holding the filter value (tau / percentile)
    option = ""  # the policy's other field, kept with the result (fill / direction)
    default_scale = ""  # the score scale the task-family defaults assume, kept with the result
    params: CoderParams

    def __init__(self, params: CoderParams):
        super().__init__(params)
        if params.depth < 1:
            raise ValueError("depth must be ≥ 1")
        if params.alpha is not None and not 0.0 <= params.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {params.alpha}")
        self.alpha = params.alpha
        self.filter_value = getattr(params, self.filter_param)
        self.filter_source: dict[str, Any] = {}
        self._doc_ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._dt: np.ndarray | None = None
        self._dc: np.ndarray | None = None
        self._it = None
        self._ic = None
        self.stats: dict[str, Any] = {}

    def _encode(self, ctx: RunContext, which: str, texts: list[str], query: bool) -> np.ndarray:
        if which == "C":
            return self._encode_c(ctx, texts, query)
        p = self.params
        return self._encode_as(ctx, "T", p.model, p.query_prefix if query else p.doc_prefix, p.pooling, texts, query)

    # --- protocol ----------------------------------------------------------------------------
    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import faiss

        if not self.compat_name:
            self.prepare(ctx)
        texts = corpus.texts()
        self._dt = self._encode(ctx, "T", texts, query=False)
        self._dc = self._encode(ctx, "C", texts, query=False)
        self._it = faiss.IndexFlatIP(self._dt.shape[1])
        self._it.add(self._dt)
        if self.policy == "union":
            self._ic = faiss.IndexFlatIP(self._dc.shape[1])
            self._ic.add(self._dc)
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}

    def _encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> tuple[np.ndarray, np.ndarray]:
        qtexts = [q.text for q in queries]
        return self._encode(ctx, "T", qtexts, query=True), self._encode(ctx, "C", qtexts, query=True)

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._it is not None and self._dt is not None and self._dc is not None, "index() must run first"
        qt, qc = self._encode_queries(queries, ctx)
        scored = candidate_scores(qt, qc, self._dt, self._dc, self._it, self._ic, self.params.depth)
        return self._rank(queries, scored, k, ctx)

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: the policy with the pool's documents in place of the corpus-wide candidates.
        ``s_T`` and ``s_C`` are recomputed with this method's own encoders (the pool's scores are
        not used), the candidates put in topical order (``s_T`` ↓, ties in pool order) as ``search``
        lists them, and τ, α (and a calibrated τ) resolved as in ``search`` — a ``tau_quantile``
        without a held-out split is read over the pool's candidates. Every candidate is ranked
        (``fill="none"`` for Seq and the percentile filter for Union drop some, as they do in
        ``search``); ``depth`` is not used, the pool's size takes its place. A query without
        candidates gets an empty ranking. The subclasses say what this changes against ``search``."""
        assert self._dt is not None and self._dc is not None, "index() must run first"
        run = Run({q.id: [] for q in queries})
        pools: dict[str, np.ndarray] = {}
        for q in queries:
            ids = [c.id for c in distinct(candidates.get(q.id, ()))]
            missing = [d for d in ids if d not in self._rows]
            if missing:
                raise ValueError(f"coder-{self.policy}: candidate {missing[0]!r} of query {q.id!r} is not in the "
                                 "indexed corpus (index() must be given the corpus the pool was drawn from)")
            pools[q.id] = np.array([self._rows[d] for d in ids], dtype=np.int64)
        asked = [q for q in queries if len(pools[q.id])]
        if asked:
            qt, qc = self._encode_queries(asked, ctx)
            scored = pool_scores(qt, qc, self._dt, self._dc, [pools[q.id] for q in asked])
            run.update(self._rank(asked, scored, None, ctx))
        return run

    def _rank(self, queries: Sequence[Query], scored: list[Scored], k: int | None, ctx: RunContext) -> Run:
        """The policy over each query's scored candidates, cut at ``k`` (None: every candidate),
        with the filter resolved for this run and its statistics recorded."""
        p = self.params
        family = "constraint" if ctx.task == "constraint" else "topical"
        self.alpha = alpha = self.defaults[family][0] if p.alpha is None else p.alpha
        filt, self.filter_source = self.resolve_filter(family, queries, scored, ctx)
        self.filter_value = filt
        run = Run()
        kept: list[int] = []
        short = 0
        for q, (cand, s_t, s_c) in zip(queries, scored):
            depth = len(cand) if k is None else k
            ranked, scores, n_kept = self._policy(s_t, s_c, alpha, filt, depth)
            run[q.id] = [(self._doc_ids[cand[j]], float(s)) for j, s in zip(ranked, scores)]
            kept.append(n_kept)
            short += len(run[q.id]) < (len(cand) if k is None else min(k, len(self._doc_ids)))
        none_kept = sum(1 for x in kept if x == 0)
        self.stats = {"queries": len(queries), "pool": spread([len(c) for c, _, _ in scored]), "kept": spread(kept),
                      "none_kept": none_kept, "short_rankings": short}
        if k is None:
            self.stats["candidates"] = "pool"
        if none_kept:
            if ctx.ledger is not None:
                ctx.ledger.count(f"coder.{self.policy}.none_kept", none_kept)
            ctx.log(f"coder-{self.policy}: {self.filter_param} = {filt:g} ({describe_source(self.filter_source)}) "
                    f"kept no candidate for {none_kept:,} of {len(queries):,} queries; {self.none_kept_note()}")
        return run

    def resolve_filter(self, family: str, queries: Sequence[Query], scored: list[Scored],
                       ctx: RunContext) -> tuple[float, dict[str, Any]]:
        """The filter value for this run and where it came from."""
        given = getattr(self.params, self.filter_param)
        if given is not None:
            return float(given), {"from": "parameter"}
        return self.defaults[family][1], {"from": "paper default", "task_family": family,
                                          "scale": self.default_scale}

    def none_kept_note(self) -> str:
        """What a query whose candidates all fail the filter gets."""
        return "the whole pool was ranked for them"

    def _policy(self, s_t: np.ndarray, s_c: np.ndarray, alpha: float, filt: float, k: int):  # pragma: no cover
        raise NotImplementedError

    # --- what is kept with the result --------------------------------------------------------
    def result_extra(self) -> dict[str, Any]:
        p = self.params
        out: dict[str, Any] = {"policy": self.policy, "alpha": self.alpha, "depth": p.depth,
                               "compat": self.compat_extra(), "search": self.stats}
        out[self.filter_param] = self.filter_value
        out[f"{self.filter_param}_source"] = self.filter_source
        out[self.option] = getattr(p, self.option)
        return out


def score_separation(pool: EncoderPool, model: str, prefix: str, bench: Benchmark, *, pooling: str | None = None,
                     batch_size: int = 64, digits: int = 5) -> dict[str, Any]:
    """Fig. 9's data: per query with satisfying and violating documents, the margin
    mean s(q, d+) − mean s(q, d−) under ``model``, and the raw satisfying/violating scores."""
    qs = [q for q in bench.eval_queries if bench.judgments.violating.get(q.id)]
    rows = []
    for q in qs:
        sat = [d for d in bench.judgments.relevant(q.id, bench.relevance_threshold)
               if d in bench.corpus and d not in bench.judgments.violating[q.id]]
        viol = [d for d in bench.judgments.violating[q.id] if d in bench.corpus]
        if sat and viol:
            rows.append((q, sorted(sat), sorted(viol)))
    if not rows:
        return {"queries": 0}
    docs = sorted({d for _, s, v in rows for d in s + v})
    drow = {d: i for i, d in enumerate(docs)}
    de = pool.encode(model, [bench.corpus.get(d).full_text for d in docs], prefix="", normalize=True,
                     batch_size=batch_size, pooling=pooling, description="encoding documents (separation)")
    qe = pool.encode(model, [q.text for q, _, _ in rows], prefix=prefix, normalize=True, batch_size=batch_size,
                     pooling=pooling, description="encoding queries (separation)")
    margins: dict[str, float] = {}
    sat_scores: list[float] = []
    viol_scores: list[float] = []
    for i, (q, sat, viol) in enumerate(rows):
        ss = de[[drow[d] for d in sat]] @ qe[i]
        vs = de[[drow[d] for d in viol]] @ qe[i]
        margins[q.id] = round(float(ss.mean() - vs.mean()), digits)
        sat_scores += [round(float(x), digits) for x in ss]
        viol_scores += [round(float(x), digits) for x in vs]
    m = np.array(list(margins.values()))
    return {"queries": len(rows), "margin_mean": float(m.mean()), "margin_median": float(np.median(m)),
            "positive_share": float((m > 0).mean()), "margins": margins, "satisfying": sat_scores,
            "violating": viol_scores}


# what the three CoDeR configurations register alike
CODER_REGISTRATION: dict[str, Any] = dict(
    family="compatibility", citation=citations.CODER, paper="Yin, Tang & Du 2026, arXiv:2606.13204",
    trains_on="WordNet antonym/synonym triplets, then NevIR and ExcluIR train queries", trainer="coder",
    artifact_param="compat_model")


@register("coder-seq", params=CoderSeqParams,
          description="CoDeR-Seq: topical candidates a trained compatibility encoder scores ≥ τ first, by fused score",
          **CODER_REGISTRATION)
class CoderSeq(_Coder):
    policy, defaults, filter_param, option = "seq", SEQ_DEFAULTS, "tau", "fill"
    default_scale = "the cosine scale of the paper's compatibility encoder (trained from bge-large-en-v1.5)"

    def __init__(self, params: CoderSeqParams | None = None):
        super().__init__(params or CoderSeqParams())
        p = self.params
        if p.fill not in FILLS:
            raise ValueError(f"fill must be one of {FILLS}, not {p.fill!r}")
        if p.tau_quantile is not None:
            if p.tau is not None:
                raise ValueError("give tau or tau_quantile, not both")
            if not 0.0 <= p.tau_quantile <= 1.0:
                raise ValueError(f"tau_quantile must be in [0, 1], got {p.tau_quantile}")
        self._calibration: dict[str, Any] | None = None

    def prepare(self, ctx: RunContext) -> None:
        """Resolve the compatibility encoder; with ``tau_quantile``, score a calibration split."""
        super().prepare(ctx)
        if self.params.tau_quantile is not None:
            self._calibration = self.calibration_scores(ctx)

    def calibration_scores(self, ctx: RunContext) -> dict[str, Any] | None:
        """``s_C`` over the topical candidates of the first of :func:`calibration_splits` that
        loads (queries and texts only), or ``None`` when there is none."""
        import faiss

        data_dir = default_data_dir(ctx.data_dir)
        for name in calibration_splits(ctx.benchmark_name):
            try:
                bench = load_benchmark(name, data_dir, ctx.online)
            except DataError:
                raise  # a split that exists but is broken is an error, not an absence
            except (LookupError, FileNotFoundError, ValueError):
                continue
            queries = bench.eval_queries
            if bench.name != name or not queries:  # a loader that has no such split and gave another
                continue
            texts = bench.corpus.texts()
            dt, dc = self._encode(ctx, "T", texts, query=False), self._encode(ctx, "C", texts, query=False)
            index_t = faiss.IndexFlatIP(dt.shape[1])
            index_t.add(dt)
            qtexts = [q.text for q in queries]
            scored = candidate_scores(self._encode(ctx, "T", qtexts, query=True),
                                      self._encode(ctx, "C", qtexts, query=True), dt, dc, index_t, None,
                                      self.params.depth)
            return {"split": name, "query_ids": frozenset(q.id for q in queries),
                    "scores": np.concatenate([s_c for _, _, s_c in scored])}
        return None

    def resolve_filter(self, family: str, queries: Sequence[Query], scored: list[Scored],
                       ctx: RunContext) -> tuple[float, dict[str, Any]]:
        q = self.params.tau_quantile
        if q is None:
            tau, source = super().resolve_filter(family, queries, scored, ctx)
            return tau, {**source, "encoder": self.compat_name}
        cal, note = self._calibration, {}
        if cal is not None and not cal["query_ids"].isdisjoint(x.id for x in queries):
            note = {"not_used": f"{cal['split']} shares queries with the evaluated split"}
            cal = None
        if cal is not None:
            split, held_out, n, scores = cal["split"], True, len(cal["query_ids"]), cal["scores"]
        else:  # no held-out split: the evaluated queries themselves, read without their judgments
            split, held_out = ctx.benchmark_name or "the evaluated queries", False
            n, scores = len(queries), np.concatenate([s_c for _, _, s_c in scored])
        return float(np.quantile(scores, q)), {"from": "calibrated", "quantile": q, "split": split,
                                               "held_out": held_out, "queries": n, "scores": int(len(scores)),
                                               "encoder": self.compat_name, **note}

    def none_kept_note(self) -> str:
        note = ("their rankings are empty (fill='none')" if self.params.fill == "none"
                else "their rankings are the topical order")
        if self.filter_source.get("from") == "paper default":
            note += "; set tau or tau_quantile for this encoder's scale"
        return note

    def _policy(self, s_t, s_c, alpha, filt, k):
        return seq_policy(s_t, s_c, alpha, filt, k, self.params.fill)

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: CoDeR-Seq with the pool's documents as ``C_T(q)``, in place of the top
        ``depth`` under ``E_T``: those with ``s_C ≥ τ`` first by the fused score, then (``fill``
        ``"topical"``) the others in topical order, every score recomputed with ``E_T`` and ``E_C``.
        Given the ``dense`` top ``depth`` of the same topical encoder (``dense`` with its defaults and
        ``coder-seq``'s ``model``) it is ``search`` exactly: the same ranking, ids, order and scores,
        cut at any k ≤ ``depth``. On another pool (``bm25@100``) only the candidate set differs: a
        document of ``C_T(q)`` the pool lacks is never ranked, a pool document outside ``C_T(q)`` is,
        and the list ends with the pool (as ``search``'s ends with ``C_T(q)``)."""
        return super().rerank(queries, candidates, ctx)


@register("coder-union", params=CoderUnionParams,
          description="CoDeR-Union: topical and compatibility candidates pooled, filtered by percentile, fused by rank",
          **CODER_REGISTRATION)
class CoderUnion(_Coder):
    policy, defaults, filter_param, option = "union", UNION_DEFAULTS, "percentile", "direction"
    default_scale = "a share of each query's pool (reciprocal ranks), independent of the encoders' score scale"

    def __init__(self, params: CoderUnionParams | None = None):
        super().__init__(params or CoderUnionParams())
        if self.params.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {self.params.direction!r}")
        if self.params.percentile is not None and not 0.0 <= self.params.percentile <= 1.0:
            raise ValueError(f"percentile must be in [0, 1], got {self.params.percentile}")

    def _policy(self, s_t, s_c, alpha, filt, k):
        return union_policy(s_t, s_c, alpha, filt, k, self.params.direction)

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: CoDeR-Union with both candidate lists restricted to the pool. The pool takes
        the place of ``C_T`` (the topical top ``depth``), and ``C_C`` restricted to the pool is part
        of it, so the pool is the whole union ``C_U``: reciprocal ranks under ``s_T`` and ``s_C``, the
        percentile threshold ``γ_q`` and the fused score are computed over the pool's documents, as
        ``search`` computes them over ``C_T ∪ C_C``. What this changes against the full method:
        ``C_C`` — the documents the compatibility encoder ranks high over the whole corpus, which
        Union adds to the topical ones — contributes only the documents the pool already holds
        (the compatibility index is not searched), and the ranks and ``γ_q`` are over the pool's
        size instead of ``|C_T ∪ C_C|`` (between ``depth`` and ``2·depth``). So even on the ``dense``
        top ``depth`` of the same topical encoder the ranking differs from ``search`` whenever
        ``C_C`` brings a document from outside ``C_T``; the candidates that do not pass ``γ_q`` are
        dropped, as in ``search``."""
        return super().rerank(queries, candidates, ctx)


@register("coder-compat", params=CompatParams,
          description="CoDeR's trained compatibility encoder alone, as a dense retriever (the paper's Table 10 ablation)",
          **CODER_REGISTRATION)
class CoderCompat(_CompatEncoder):
    """The whole corpus ranked by ``s_C`` alone (exact inner product of normalised embeddings):
    what the compatibility encoder does without a topical encoder beside it. With the same
    ``model``/``compat_*``/``train_seed`` it uses the very artifact ``coder-seq`` and
    ``coder-union`` train, so the three compare on one encoder per seed."""

    def __init__(self, params: CompatParams | None = None):
        super().__init__(params or CompatParams())
        self._doc_ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._dc: np.ndarray | None = None
        self._index = None
        self._searched: dict[str, np.ndarray] = {}  # the query embeddings of the last search

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import faiss

        if not self.compat_name:
            self.prepare(ctx)
        self._dc = self._encode_c(ctx, corpus.texts(), query=False)
        self._index = faiss.IndexFlatIP(self._dc.shape[1])
        self._index.add(self._dc)
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        assert self._index is not None, "index() must run first"
        qc = self._encode_c(ctx, [q.text for q in queries], query=True)
        self._searched = dict(zip((q.id for q in queries), qc))
        scores, rows = self._index.search(qc, min(k, len(self._doc_ids)))
        return run_from_matrix([q.id for q in queries], self._doc_ids, rows, scores)

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """``s_C`` of each query with the documents it names, as ``search`` scores them."""
        assert self._dc is not None, "index() must run before score()"
        fresh = [q for q in queries if q.id not in self._searched]
        if fresh:
            self._searched.update(zip((q.id for q in fresh), self._encode_c(ctx, [q.text for q in fresh], query=True)))
        return {q.id: {d: float(np.dot(self._searched[q.id], self._dc[self._rows[d]])) for d in doc_ids.get(q.id, ())}
                for q in queries}

    def result_extra(self) -> dict[str, Any]:
        return {"compat": self.compat_extra()}
