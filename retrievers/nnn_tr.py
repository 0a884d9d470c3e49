"""``nnn-tr``: NNN decoding with a model trained through unrolled FISTA (docs/methods/nnn.md#nnn-tr).

Two variants (param ``variant``; the solver's own ``mode`` param — "tol"/"iters" — is inherited
from ``nnn-fix`` and means the decoding solver, hence the different name):

``variant="paper"`` (default) — the paper's NNN-Tr
-------------------------------------------------
* Query encoder fine-tuned: a trainable copy of the shared sentence-transformers model (the
  pool's model is never modified), AdamW at ``encoder_lr`` = 2e-5, weight decay 0.01. Query
  embeddings come from the model's own modules (token embeddings → mean pooling → normalise),
  exactly as ``SentenceTransformer.encode`` — and hence the shared pool — computes them.
* Corpus encoder frozen: documents are encoded once by the shared pool (same model, prefixes and
  cache as ``dense``/``nnn-fix``) and passed through a corpus adapter::

      d' = normalize(d + σ(a)·MLP(d)),   MLP = Linear(d, 768) → GELU → Linear(768, d),   a₀ = −5

  so training starts at the frozen model up to ‖d' − d‖ ≤ 2σ(−5)‖MLP(d)‖ (σ(−5) ≈ 0.0067).
  The adapter (MLP and a) is trained with AdamW at ``adapter_lr`` (default 1e-3, not the
  encoder's 2e-5 — see "Derived / deviations"); weight decay 0.01 on the MLP, none on the scalar
  gate a.
* At search time queries are encoded by the fine-tuned model directly (no embedding cache: the
  pool keys its cache by the frozen model's fingerprint) and the corpus is the adapted frozen
  embeddings; decoding is :class:`retrievers.nnn.NNNFix`'s solver on them (screened exact solve
  by default; every ``nnn-fix`` solver parameter is available). The faiss index (dense
  candidates for screening and the dense fill order) is built on the adapted embeddings too.

``variant="query-adapter"`` — frozen encoder, adapter on the query side (faster)
--------------------------------------------------------------------------------
Documents and queries are encoded by the frozen shared encoder; queries pass through
``q = normalize(q₀ + α·MLP(q₀))`` (same MLP shape, α a learnable scalar initialised to 0, so
before training it ranks exactly as ``nnn-fix`` with the same λ1, λ2). D and L stay fixed and the
training queries' embeddings are computed once, so training is cheap on CPU. AdamW at
``adapter_lr`` (1e-3), weight decay 0.01 on all adapter weights. Not the paper's model; kept for
comparison and speed.

Training (``fit``, both variants)
---------------------------------
For a batch of ``train_batch_size`` (64) training queries, ``unroll`` (T = 50) FISTA steps from
x₀ = z₀ = 0 with step 1/L, L = ``lipschitz(D, λ2)`` = 1.01·(λ_max(DᵀD) + λ2), are unrolled in
torch over the full training corpus, keeping the autograd graph (``unrolled_fista`` is
differentiable in D and Q). In the paper variant D = adapter(D₀) changes with every step, so L is
recomputed each step from the detached adapted D (exact eigvalsh of the d × d Gram matrix; no
gradient flows through L); gradients reach the encoder through Q and the adapter through D. The
loss is NNN-Tr's completeness loss (docs/methods/nnn.md#nnn-tr), with smooth max/min as
softmax-weighted means::

    smax_τ(v) = Σ_j softmax(v/τ)_j · v_j,     smin_τ(v) = Σ_j softmax(−v/τ)_j · v_j
    loss(q)   = ReLU(m + γ·smax_τ(x_{S^c}) − smin_τ(x_S))

with x the T-th iterate, S the query's relevant documents (judgment ≥ the benchmark's relevance
threshold) and S^c the other documents; γ = 1.5, τ = 0.1, margin m = 0.05 (ours, see
:func:`completeness_loss`); averaged over the batch. Queries without a relevant document in the
corpus are skipped. Mini-batches are shuffled per epoch; adapter initialisation, dropout and
shuffling are seeded by ``ctx.seed``. The unroll count ``unroll`` is separate from ``iters``
(the decoding iterations of the solver's fixed-T mode).

Validation and early stopping (``self.history``, ``self.fit_stats``): when the runner hands over
a validation split (``ctx.validation``, the benchmark's ``:dev``), all (or ``max_train_queries``)
training queries are trained on and validation decodes the dev queries against the dev split's
own corpus (its frozen embeddings, through the current adapter, with the current encoder) —
``fit_stats["validation"] = "dev"``. Otherwise a seeded 10 % of the training queries (at least
one) is held out and decoded against the training corpus — ``"holdout"``. Validation Comp@5 is
measured once before training and after every epoch with the retriever's own decoding; the state
with the best validation Comp@5 is kept (the untrained state counts, so training never makes
validation worse); training stops when Comp@5 has not strictly improved for ``patience`` (3)
epochs, after ``epochs`` epochs at most, or when every training solution of an epoch is all-zero
(the paper's degenerate-solution rule). ``self.history`` holds one entry per epoch: ``{"epoch",
"train_loss", "val_comp5", "zero_frac"}`` plus the adapter's gate — ``"sigma_a"`` and
``"doc_shift"`` (mean ‖d' − d‖ over the training corpus) for the paper variant, ``"alpha"`` for the
query adapter (``zero_frac``: share of all-zero training solutions; epoch 0 is the untrained
state). After ``fit``, ``last_stats`` holds the fit
statistics (variant, validation source, best epoch and Comp@5, epochs run, query counts, gate);
after a ``search`` they are under ``last_stats["fit"]`` beside the solver statistics.

Derived / deviations from the paper's recipe
--------------------------------------------
* [derived] the margin m = 0.05 in the loss (without it the all-zero solution is a minimiser).
* [derived] d' is re-normalised to unit length (NNN decodes over unit-norm embeddings).
* [derived] the corpus adapter learns at ``adapter_lr`` = 1e-3, not the encoder's 2e-5. Measured
  on NumpyBank (λ1 0.03, λ2 0.1, seed 0, dev validation): at 2e-5 the adapter does not move in
  3 epochs (mean ‖d' − d‖ stays at its initial 0.0032, σ(a) unchanged to 4 digits), at 1e-3 it
  does (‖d' − d‖ 0.003 → 0.09 after 3 epochs, 0.16 after 10; σ(a) only 0.0067 → 0.0070: the MLP
  grows, not the gate). Validation Comp@5 after epochs 1–3 was the same within noise (0.243 /
  0.253 / 0.283 at 1e-3, 0.246 / 0.258 / 0.283 at 2e-5): the encoder carries the gains there.
* [derived] ``epochs`` (10) bounds training; the recipe gives only early stopping (patience 3).
  ``max_train_queries`` / ``max_val_queries`` cap the work on CPU (seeded samples).
* L is taken from the detached D (a step size, not a path for gradients); no weight decay on the
  gate a (decay would pull it towards 0, i.e. σ(a) towards ½).
* The "query-adapter" variant is not in the paper.

Cost on CPU (2 cores, MiniLM-L6): a paper-variant step (64 queries, encoder forward + backward,
T = 50) took ≈ 3.5 s on an idle machine and 10–16 s under load; a full ToolLens epoch (13.5k
queries) ≈ 12 min, so on CPU cap it with ``epochs`` / ``max_train_queries``. The query-adapter
variant trains NumpyBank's 10 epochs in ≈ 20 s (embedding cache warm).

Caveat: the hinge loss without margin is 0 at x = 0, and an adapter can reach that degenerate
minimiser by turning queries away from every document; keeping the best validation state
protects the result, and ``zero_frac`` in the history shows a collapse.

Nothing is written to disk apart from the shared encoder pool's embedding cache (frozen model
only); the fine-tuned encoder and the adapters live in memory.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from harness.protocols import RunContext
from harness.registry import register
from harness.types import Benchmark, Corpus, Query, Run
from . import citations

from .fista import _SMALL_WORK, _cpu_threads, as_tensor, lipschitz
from .nnn import NNNFix, NNNParams

VARIANTS = ("paper", "query-adapter")
VAL_FRACTION = 0.1
HIDDEN = 768
GATE_INIT = -5.0  # a in d + σ(a)·MLP(d): σ(−5) ≈ 0.0067, so training starts near the frozen model


@dataclass(frozen=True)
class NNNTrParams(NNNParams):
    """``nnn-tr``: the ``nnn-fix`` fields (λ1 ``l1``, λ2 ``l2`` and the solver settings used for
    decoding — ``mode`` is the *solver* mode, "tol" or "iters") plus the training settings.

    ``variant``: "paper" (fine-tuned query encoder + corpus-side adapter, docs/methods/nnn.md#nnn-tr) or
    "query-adapter" (frozen encoder, residual adapter on the query embedding; faster).
    ``unroll``: FISTA steps unrolled in training (T = 50 in the paper's recipe). ``epochs``: at most this
    many epochs (early stopping usually ends sooner). ``encoder_lr``: AdamW rate of the query
    encoder (paper variant); ``adapter_lr``: AdamW rate of the adapter (either variant).
    ``max_train_queries`` / ``max_val_queries``: use at most this many training / validation
    queries (seeded sample; None = all)."""

    variant: str = "paper"
    unroll: int = 50
    epochs: int = 10
    train_batch_size: int = 64
    encoder_lr: float = 2e-5
    adapter_lr: float = 1e-3
    weight_decay: float = 0.01
    gamma: float = 1.5
    tau: float = 0.1
    margin: float = 0.05
    patience: int = 3
    max_train_queries: int | None = None
    max_val_queries: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.unroll < 1 or self.epochs < 0 or self.train_batch_size < 1 or self.patience < 1:
            raise ValueError("unroll ≥ 1, epochs ≥ 0, train_batch_size ≥ 1, patience ≥ 1")
        if not (self.adapter_lr > 0 and self.encoder_lr > 0 and self.weight_decay >= 0
                and self.tau > 0 and self.gamma > 0 and self.margin >= 0):
            raise ValueError("adapter_lr, encoder_lr, tau, gamma must be > 0; weight_decay, margin ≥ 0")
        if self.max_train_queries is not None and self.max_train_queries < 2:
            raise ValueError("max_train_queries must be ≥ 2 (or None)")
        if self.max_val_queries is not None and self.max_val_queries < 1:
            raise ValueError("max_val_queries must be ≥ 1 (or None)")


def _mlp(dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class QueryAdapter(nn.Module):
    """``q = normalize(q₀ + α·MLP(q₀))`` with α initialised to 0 (identity on unit vectors)."""

    def __init__(self, dim: int, hidden: int = HIDDEN):
        super().__init__()
        self.mlp = _mlp(dim, hidden)
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, q0: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(q0 + self.alpha * self.mlp(q0), dim=-1)


class CorpusAdapter(nn.Module):
    """``d' = normalize(d + σ(a)·MLP(d))`` with the gate ``a`` initialised to −5
    (docs/methods/nnn.md#nnn-tr)."""

    def __init__(self, dim: int, hidden: int = HIDDEN, gate_init: float = GATE_INIT):
        super().__init__()
        self.mlp = _mlp(dim, hidden)
        self.a = nn.Parameter(torch.tensor(float(gate_init)))

    def residual(self, d: torch.Tensor) -> torch.Tensor:
        """``d + σ(a)·MLP(d)`` before normalisation."""
        return d + torch.sigmoid(self.a) * self.mlp(d)

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.residual(d), dim=-1)


def unrolled_fista(D: torch.Tensor, Q: torch.Tensor, l1: float, l2: float, L: float, iters: int) -> torch.Tensor:
    """``iters`` FISTA steps from 0 for ``min_{x≥0} ½‖Dᵀx − q‖² + λ1Σx + (λ2/2)‖x‖²`` per row of
    ``Q`` (B × d; D is n × d), step 1/L, differentiable in D and Q (no in-place updates).
    Returns the last iterate X (B × n)."""
    B, n = Q.shape[0], D.shape[0]
    b = (Q @ D.T - l1) / L
    x = torch.zeros(B, n, dtype=Q.dtype, device=Q.device)
    z, theta = x, 1.0
    for _ in range(iters):
        x_new = torch.relu((1.0 - l2 / L) * z - ((z @ D) @ D.T) / L + b)
        theta_new = (1.0 + math.sqrt(1.0 + 4.0 * theta * theta)) / 2.0
        z = x_new + ((theta - 1.0) / theta_new) * (x_new - x)
        x, theta = x_new, theta_new
    return x


def completeness_loss(X: torch.Tensor, pos: torch.Tensor, gamma: float, tau: float,
                      margin: float = 0.0) -> torch.Tensor:
    """Per-row ``ReLU(m + γ·smax_τ(x_{S^c}) − smin_τ(x_S))`` (softmax-weighted max/min); ``pos`` is a
    boolean B × n mask of S (every row needs at least one True and one False).

    The margin ``m`` is ours: without it (m = 0) the all-zero solution has zero loss, and
    training drives queries away from every document (measured on NumpyBank: validation Comp@5
    falls to 0 at τ = 0.01; at τ = 0.1 the loss is ~1e-5 and nothing is learned). With m = 0.05
    the relevant coefficients must exceed the largest irrelevant one by a margin."""
    neg_inf = torch.finfo(X.dtype).min
    w_neg = torch.softmax(torch.where(pos, neg_inf, X / tau), dim=1)
    w_pos = torch.softmax(torch.where(pos, -X / tau, neg_inf), dim=1)
    smax = (w_neg * X).sum(1)
    smin = (w_pos * X).sum(1)
    return torch.relu(margin + gamma * smax - smin)


class _ValSet(NamedTuple):
    """Validation queries, their relevant sets, and the frozen embeddings of their corpus."""

    queries: list[Query]
    rel: list[set[str]]
    frozen: np.ndarray
    doc_ids: list[str]


def _usable(bench: Benchmark, pos_index: dict[str, int]) -> tuple[list[Query], list[list[int]]]:
    """Queries with at least one relevant document in the corpus and at least one other document;
    with the corpus rows of their relevant documents."""
    n = len(pos_index)
    out_q, out_rel = [], []
    for q in bench.eval_queries:
        rel = sorted(pos_index[d] for d in bench.judgments.relevant(q.id, bench.relevance_threshold)
                     if d in pos_index)
        if rel and len(rel) < n:
            out_q.append(q)
            out_rel.append(rel)
    return out_q, out_rel


def _same_corpus(a: Corpus, b: Corpus) -> bool:
    return len(a) == len(b) and all(x.id == y.id and x.full_text == y.full_text for x, y in zip(a, b))


@register("nnn-tr", params=NNNTrParams, family="decoding", citation=citations.NNN,
          description="NNN decoding with a query encoder and corpus adapter trained through unrolled FISTA",
          paper="Non-negative Elastic Net Decoding for Information Retrieval (NNN)",
          trains_on="the benchmark's train split, early-stopped on its dev split")
class NNNTr(NNNFix):
    """NNN decoding with a trained model: fine-tuned query encoder + corpus adapter ("paper") or a
    query adapter on the frozen encoder ("query-adapter"); trained by ``fit``."""

    def __init__(self, params: NNNTrParams | None = None):
        super().__init__(params or NNNTrParams())
        self.adapter: QueryAdapter | None = None        # query-adapter variant
        self.doc_adapter: CorpusAdapter | None = None   # paper variant
        self.query_encoder: Any = None                  # paper variant: fine-tuned SentenceTransformer
        self.history: list[dict[str, Any]] = []
        self.fit_stats: dict[str, Any] = {}
        self._frozen_docs: np.ndarray | None = None
        self._lipschitz_frozen = 0.0  # query-adapter variant: L of the fixed training corpus

    # -- model construction ----------------------------------------------------------------------

    def init_adapter(self, dim: int, seed: int, device: str | torch.device = "cpu") -> QueryAdapter:
        """Query-adapter variant: a fresh adapter (α = 0, MLP weights drawn with ``seed``)."""
        torch.manual_seed(seed)
        self.adapter = QueryAdapter(dim).to(torch.device(device))
        return self.adapter

    def init_paper(self, ctx: RunContext, dim: int, seed: int) -> tuple[Any, CorpusAdapter]:
        """Paper variant: a trainable copy of the shared query encoder (the pool's model is left
        untouched) and a fresh corpus adapter (a = −5, MLP weights drawn with ``seed``), both on
        ``ctx.device``."""
        p = self.params
        device = torch.device(ctx.device)
        base = self._pool(ctx).model(p.model, p.max_length)
        self.query_encoder = copy.deepcopy(base).to(device)
        for prm in self.query_encoder.parameters():
            prm.requires_grad_(True)
        torch.manual_seed(seed)
        self.doc_adapter = CorpusAdapter(dim).to(device)
        return self.query_encoder, self.doc_adapter

    # -- inference -------------------------------------------------------------------------------

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        super().index(corpus, ctx)  # frozen embeddings (shared pool and cache)
        assert self.doc_embeddings is not None
        self._frozen_docs = self.doc_embeddings
        if self.doc_adapter is not None:
            self._install_docs(self._frozen_docs, corpus.ids, ctx)

    def _install_docs(self, frozen: np.ndarray, doc_ids: list[str], ctx: RunContext) -> None:
        """Make ``frozen`` (passed through the corpus adapter, when there is one) the decoded
        corpus: embedding matrix, faiss index (dense candidates and fill order), step constants."""
        import faiss

        device = torch.device(ctx.device)
        D = as_tensor(frozen, device)
        if self.doc_adapter is not None:
            with torch.no_grad():
                D = self.doc_adapter(D).contiguous()
        emb = np.ascontiguousarray(D.cpu().numpy(), dtype=np.float32)
        self.doc_embeddings = emb
        self._index = faiss.IndexFlatIP(emb.shape[1])
        self._index.add(emb)
        self._doc_ids = list(doc_ids)
        self._D = D
        self._L = {}

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        p = self.params
        if self.query_encoder is not None:
            # the fine-tuned model, directly (no cache: the pool caches by the frozen weights)
            return np.asarray(self.query_encoder.encode(
                [p.query_prefix + q.text for q in queries], batch_size=p.batch_size, convert_to_numpy=True,
                normalize_embeddings=True, show_progress_bar=False), dtype=np.float32)
        q0 = super().encode_queries(queries, ctx)
        if self.adapter is None:
            return q0
        dev = next(self.adapter.parameters()).device
        with torch.no_grad():
            q = self.adapter(as_tensor(q0, dev))
        return q.cpu().numpy().astype(np.float32)

    def result_extra(self) -> dict[str, Any]:
        """Solver and fit statistics plus the per-epoch history (train loss, validation Comp@5, gate)."""
        out = super().result_extra()
        out["history"] = [dict(h) for h in self.history]
        return out

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        run = super().search(queries, k, ctx)
        if self.fit_stats:
            self.last_stats["fit"] = dict(self.fit_stats)
        return run

    # -- training --------------------------------------------------------------------------------

    def _encode_train(self, texts: Sequence[str], device: torch.device, train: bool = True) -> torch.Tensor:
        """Unit-norm query embeddings from the trainable encoder, with the autograd graph; the
        same modules (pooling, normalisation) as ``SentenceTransformer.encode``. ``train``: dropout
        on (training) or off (evaluating a loss)."""
        from sentence_transformers.util import batch_to_device

        enc = self.query_encoder
        enc.train(train)
        feats = enc.preprocess(list(texts)) if hasattr(enc, "preprocess") else enc.tokenize(list(texts))
        out = enc(batch_to_device(feats, device))["sentence_embedding"]
        return nn.functional.normalize(out, dim=-1)

    def batch_loss(self, batch: Any, pos: torch.Tensor, D0: torch.Tensor,
                   train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean completeness loss of one batch and the unrolled solutions X (B × n).

        ``batch``: query texts with their prefix (paper variant) or frozen query embeddings
        (query-adapter variant); ``pos``: B × n relevance mask; ``D0``: the frozen corpus
        embeddings (n × d). Paper: D = CorpusAdapter(D0) (differentiable), L from the detached D;
        ``train=False`` turns the encoder's dropout off.
        """
        p: NNNTrParams = self.params
        l1, l2 = float(p.l1), float(p.l2)
        if p.variant == "paper":
            assert self.query_encoder is not None and self.doc_adapter is not None
            Q = self._encode_train(batch, D0.device, train)
            D = self.doc_adapter(D0)
            L = lipschitz(D.detach(), l2)
        else:
            assert self.adapter is not None
            Q, D = self.adapter(batch), D0
            L = self._lipschitz_frozen
        n, dim = D.shape
        # small blocks run single-threaded on CPU (see retrievers.fista._small_ops)
        threads = 1 if Q.shape[0] * n * dim < _SMALL_WORK else torch.get_num_threads()
        with _cpu_threads(D0.device, threads):
            X = unrolled_fista(D, Q, l1, l2, L, p.unroll)
            loss = completeness_loss(X, pos, p.gamma, p.tau, p.margin).mean()
        return loss, X

    def make_optimizer(self) -> torch.optim.Optimizer:
        """AdamW: encoder at ``encoder_lr``, adapter at ``adapter_lr``; weight decay on all weights
        except the paper adapter's scalar gate a (decay would pull σ(a) towards ½)."""
        p: NNNTrParams = self.params
        if p.variant == "paper":
            assert self.query_encoder is not None and self.doc_adapter is not None
            groups = [
                {"params": [q for q in self.query_encoder.parameters() if q.requires_grad], "lr": p.encoder_lr},
                {"params": list(self.doc_adapter.mlp.parameters()), "lr": p.adapter_lr},
                {"params": [self.doc_adapter.a], "lr": p.adapter_lr, "weight_decay": 0.0},
            ]
            return torch.optim.AdamW(groups, lr=p.adapter_lr, weight_decay=p.weight_decay)
        assert self.adapter is not None
        return torch.optim.AdamW(self.adapter.parameters(), lr=p.adapter_lr, weight_decay=p.weight_decay)

    def train_step(self, batch: Any, pos: torch.Tensor, D0: torch.Tensor,
                   opt: torch.optim.Optimizer) -> tuple[float, int]:
        """One optimiser step; returns (batch loss before the step, all-zero solutions)."""
        loss, X = self.batch_loss(batch, pos, D0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach()), int((X.detach().amax(dim=1) <= 0).sum())

    def _state(self) -> dict[str, Any]:
        if self.params.variant == "paper":
            return {"encoder": copy.deepcopy(self.query_encoder.state_dict()),
                    "doc_adapter": copy.deepcopy(self.doc_adapter.state_dict())}
        return {"adapter": copy.deepcopy(self.adapter.state_dict())}

    def _load_state(self, state: dict[str, Any]) -> None:
        if self.params.variant == "paper":
            self.query_encoder.load_state_dict(state["encoder"])
            self.doc_adapter.load_state_dict(state["doc_adapter"])
            self.query_encoder.eval()
            self.doc_adapter.eval()
        else:
            self.adapter.load_state_dict(state["adapter"])
            self.adapter.eval()

    def fit(self, benchmark: Benchmark, ctx: RunContext) -> None:
        p: NNNTrParams = self.params
        device = torch.device(ctx.device)
        rng = np.random.default_rng(ctx.seed)
        self.history, self.fit_stats = [], {}
        self.adapter = self.doc_adapter = self.query_encoder = None

        self.index(benchmark.corpus, ctx)  # frozen embeddings of the training corpus
        assert self._frozen_docs is not None
        train_frozen, train_ids = self._frozen_docs, list(self._doc_ids)
        D0 = as_tensor(train_frozen, device)
        n, dim = D0.shape
        pos_index = {doc_id: j for j, doc_id in enumerate(train_ids)}
        queries, rels = _usable(benchmark, pos_index)
        if len(queries) < 2:
            raise ValueError(f"nnn-tr: {benchmark.name} has fewer than 2 usable training queries")
        order = rng.permutation(len(queries))
        if p.max_train_queries is not None:
            order = order[:p.max_train_queries]

        val_bench = ctx.validation
        if val_bench is not None:
            source = "dev"
            tr_idx = order
            if _same_corpus(val_bench.corpus, benchmark.corpus):
                val_frozen, val_ids = train_frozen, train_ids
            else:
                self.index(val_bench.corpus, ctx)
                val_frozen, val_ids = self._frozen_docs, list(self._doc_ids)
            vq, vr = _usable(val_bench, {d: j for j, d in enumerate(val_ids)})
            if not vq:
                raise ValueError(f"nnn-tr: validation split {val_bench.name} has no usable query")
            vsel = np.arange(len(vq))
            if p.max_val_queries is not None and len(vq) > p.max_val_queries:
                vsel = np.sort(np.random.default_rng(ctx.seed + 1).permutation(len(vq))[:p.max_val_queries])
            val = _ValSet([vq[i] for i in vsel], [{val_ids[j] for j in vr[i]} for i in vsel], val_frozen, val_ids)
        else:
            source = "holdout"
            n_val = max(1, int(round(VAL_FRACTION * len(order))))
            val_idx, tr_idx = order[:n_val], order[n_val:]
            if p.max_val_queries is not None:
                val_idx = val_idx[:p.max_val_queries]
            val = _ValSet([queries[i] for i in val_idx], [{train_ids[j] for j in rels[i]} for i in val_idx],
                          train_frozen, train_ids)
        if len(tr_idx) < 1:
            raise ValueError(f"nnn-tr: no training query left in {benchmark.name}")

        pos_np = np.zeros((len(tr_idx), n), dtype=bool)
        for r, i in enumerate(tr_idx):
            pos_np[r, rels[i]] = True
        pos_all = torch.as_tensor(pos_np, device=device)
        if p.variant == "paper":
            self.init_paper(ctx, dim, ctx.seed)
            inputs: Any = [p.query_prefix + queries[i].text for i in tr_idx]
        else:
            inputs = as_tensor(super().encode_queries([queries[i] for i in tr_idx], ctx), device)
            self.init_adapter(dim, ctx.seed, device)
            self._lipschitz_frozen = lipschitz(D0, float(p.l2))
        opt = self.make_optimizer()
        gen = torch.Generator().manual_seed(ctx.seed)

        best = self._validate(val, ctx)  # the untrained state is a candidate
        best_state, best_epoch = self._state(), 0
        self.history.append({"epoch": 0, "train_loss": None, "val_comp5": best, **self._gate(D0)})
        stale = 0
        for epoch in range(1, p.epochs + 1):
            perm = torch.randperm(len(tr_idx), generator=gen)
            total, count, zeros = 0.0, 0, 0
            for s in range(0, len(tr_idx), p.train_batch_size):
                bi = perm[s:s + p.train_batch_size]
                batch = [inputs[int(i)] for i in bi] if p.variant == "paper" else inputs[bi.to(device)]
                loss, z = self.train_step(batch, pos_all[bi.to(device)], D0, opt)
                total += loss * len(bi)
                zeros += z
                count += len(bi)
            comp5 = self._validate(val, ctx)
            zero_frac = zeros / max(count, 1)
            self.history.append({"epoch": epoch, "train_loss": total / max(count, 1), "val_comp5": comp5,
                                 "zero_frac": zero_frac, **self._gate(D0)})
            if comp5 > best:
                best, best_state, best_epoch, stale = comp5, self._state(), epoch, 0
            else:
                stale += 1
                if stale >= p.patience:
                    break
            if zero_frac >= 1.0:  # every training solution was all-zero: degenerate, stop
                break
        self._load_state(best_state)
        self._install_docs(train_frozen, train_ids, ctx)  # leave the training corpus indexed
        self.fit_stats = {"variant": p.variant, "validation": source, "best_val_comp5": best,
                          "best_epoch": best_epoch, "epochs_run": len(self.history) - 1,
                          "train_queries": int(len(tr_idx)), "val_queries": len(val.queries),
                          "unroll": p.unroll, **self._gate(D0)}
        self.last_stats = dict(self.fit_stats)

    def _gate(self, D0: torch.Tensor | None = None) -> dict[str, float]:
        """The adapter's mixing weight (σ(a) for the paper variant, α otherwise) and, for the
        paper variant given the frozen corpus D0, ``doc_shift``: mean ‖d' − d‖ over the corpus."""
        if self.doc_adapter is not None:
            out = {"sigma_a": float(torch.sigmoid(self.doc_adapter.a.detach()))}
            if D0 is not None:
                with torch.no_grad():
                    out["doc_shift"] = float((self.doc_adapter(D0) - D0).norm(dim=1).mean())
            return out
        if self.adapter is not None:
            return {"alpha": float(self.adapter.alpha.detach())}
        return {}

    def _validate(self, val: _ValSet, ctx: RunContext) -> float:
        """Comp@5 of the current model on the validation queries, decoded against their corpus."""
        if self.query_encoder is not None:
            self.query_encoder.eval()
        if self.doc_adapter is not None:
            self.doc_adapter.eval()
        if self.adapter is not None:
            self.adapter.eval()
        self._install_docs(val.frozen, val.doc_ids, ctx)
        run: Run = self.search(val.queries, 5, ctx)
        hits = [bool(r) and len(r) <= 5 and r <= {d for d, _ in run.get(q.id, [])}
                for q, r in zip(val.queries, val.rel)]
        if self.adapter is not None:
            self.adapter.train()
        if self.doc_adapter is not None:
            self.doc_adapter.train()
        return float(np.mean(hits)) if hits else 0.0
