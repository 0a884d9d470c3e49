"""``nnn-tr``: NNN decoding with a query adapter trained through unrolled FISTA.

Model
-----
Documents are encoded by the frozen shared encoder (same pool, prefixes and cache as ``dense`` and
``nnn-fix``); queries are encoded by the same frozen encoder (``q₀``, unit norm) and then passed
through a trainable residual adapter::

    q = normalize(q₀ + α·MLP(q₀)),   MLP = Linear(d, 768) → GELU → Linear(768, d)

with α a learnable scalar initialised to 0, so before training ``nnn-tr`` ranks exactly as
``nnn-fix`` with the same λ1, λ2 (q = q₀). Decoding is :class:`retrievers.nnn.NNNFix` on the
adapted query embeddings (screened exact solve by default; every ``nnn-fix`` solver parameter is
available).

Deviation from METHODS.md / the paper: there the query encoder is fine-tuned and the adapter sits
on the frozen corpus encoder's output (``d + σ(a)·MLP(d)``). Here the encoder stays frozen and the
adapter acts on the query embedding, which keeps the corpus matrix D — and with it the step
constant L — fixed during training and makes training feasible on CPU (the query embeddings of
the training split are computed once). Encoder fine-tuning is not implemented.

Training (``fit``)
------------------
For a batch of training queries, ``iters`` FISTA steps from x₀ = z₀ = 0 with step 1/L,
L = ``lipschitz(D, λ2)`` (METHODS.md, NNN section), are unrolled in torch over the full training
corpus, keeping the autograd graph, and the loss is the completeness loss of METHODS.md
(marked there as derived; its smooth max/min are implemented as softmax-weighted means)::

    smax_τ(v) = Σ_j softmax(v/τ)_j · v_j,     smin_τ(v) = Σ_j softmax(−v/τ)_j · v_j
    loss(q)   = ReLU(γ·smax_τ(x_{S^c}) − smin_τ(x_S))

with x the T-th iterate, S the query's relevant documents (judgment ≥ the benchmark's relevance
threshold) and S^c the other documents; γ = 1.5, τ = 0.1; averaged over the batch. Queries
without a relevant document in the corpus are skipped. AdamW (``adapter_lr``,
``weight_decay``), mini-batches of ``batch_size`` shuffled per epoch; adapter initialisation and
shuffling are seeded by ``ctx.seed``.

Validation and early stopping: a seeded 10 % of the training queries (at least one) is held out
and never trained on; after each epoch (and once before training) they are decoded with the
retriever's own NNN decoding on the training corpus and Comp@5 is measured. The adapter state
with the best validation Comp@5 is kept (the untrained state counts, so training never makes
validation worse); training stops when Comp@5 has not strictly improved for ``patience`` epochs.
Training also stops when every training solution of an epoch is all-zero (the paper's
degenerate-solution rule). ``self.history`` holds one entry per epoch: ``{"epoch", "train_loss",
"val_comp5", "zero_frac"}`` (``zero_frac``: share of all-zero training solutions; epoch 0 is the
untrained state, with only ``val_comp5``).

Caveat: the hinge loss is 0 at x = 0 (both smooth max and min vanish), so it has a degenerate
minimiser that an adapter can reach by turning queries away from every document (observed with
small τ or large learning rates: validation Comp@5 falls while the loss goes to 0). Keeping the
best validation state protects the result; ``zero_frac`` in the history shows the collapse.

Nothing is written to disk apart from the shared encoder pool's embedding cache.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from harness.protocols import RunContext
from harness.registry import register
from harness.types import Benchmark, Query, Run

from .fista import _SMALL_WORK, _cpu_threads, as_tensor, lipschitz
from .nnn import NNNFix, NNNParams

VAL_FRACTION = 0.1
HIDDEN = 768


@dataclass(frozen=True)
class NNNTrParams(NNNParams):
    """``nnn-tr``: the ``nnn-fix`` fields (λ1 ``l1``, λ2 ``l2``, solver settings for decoding; note
    ``iters`` is also the number of unrolled FISTA steps in training) plus the training settings.
    ``max_train_queries``: use at most this many training queries (seeded sample; None = all)."""

    iters: int = 20
    epochs: int = 5
    train_batch_size: int = 64
    adapter_lr: float = 1e-3
    weight_decay: float = 0.01
    gamma: float = 1.5
    tau: float = 0.1
    patience: int = 3
    max_train_queries: int | None = None
    margin: float = 0.05

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs < 0 or self.train_batch_size < 1 or self.patience < 1:
            raise ValueError("epochs ≥ 0, train_batch_size ≥ 1, patience ≥ 1")
        if not (self.adapter_lr > 0 and self.weight_decay >= 0 and self.tau > 0 and self.gamma > 0):
            raise ValueError("adapter_lr, tau, gamma must be > 0 and weight_decay ≥ 0")
        if self.max_train_queries is not None and self.max_train_queries < 2:
            raise ValueError("max_train_queries must be ≥ 2 (or None)")


class QueryAdapter(nn.Module):
    """``q = normalize(q₀ + α·MLP(q₀))`` with α initialised to 0 (identity on unit vectors)."""

    def __init__(self, dim: int, hidden: int = HIDDEN):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, q0: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(q0 + self.alpha * self.mlp(q0), dim=-1)


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


@register("nnn-tr", params=NNNTrParams)
class NNNTr(NNNFix):
    """NNN decoding on adapted query embeddings; the adapter is trained by ``fit``."""

    def __init__(self, params: NNNTrParams | None = None):
        super().__init__(params or NNNTrParams())
        self.adapter: QueryAdapter | None = None
        self.history: list[dict[str, Any]] = []

    # -- inference -----------------------------------------------------------------------------

    def init_adapter(self, dim: int, seed: int, device: str | torch.device = "cpu") -> QueryAdapter:
        """A fresh adapter (α = 0, MLP weights drawn with ``seed``) on ``device``."""
        torch.manual_seed(seed)
        self.adapter = QueryAdapter(dim).to(torch.device(device))
        return self.adapter

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        q0 = super().encode_queries(queries, ctx)
        if self.adapter is None:
            return q0
        dev = next(self.adapter.parameters()).device
        with torch.no_grad():
            q = self.adapter(as_tensor(q0, dev))
        return q.cpu().numpy().astype(np.float32)

    # -- training ------------------------------------------------------------------------------

    def fit(self, benchmark: Benchmark, ctx: RunContext) -> None:
        p: NNNTrParams = self.params
        device = torch.device(ctx.device)
        rng = np.random.default_rng(ctx.seed)
        self.history = []

        self.index(benchmark.corpus, ctx)  # D (frozen) on the training corpus
        assert self._D is not None
        D = self._D
        n, dim = D.shape
        pos_index = {doc_id: j for j, doc_id in enumerate(self._doc_ids)}

        queries, masks = [], []
        for q in benchmark.eval_queries:
            rel = [pos_index[d] for d in benchmark.judgments.relevant(q.id, benchmark.relevance_threshold)
                   if d in pos_index]
            if rel and len(rel) < n:
                m = np.zeros(n, dtype=bool)
                m[rel] = True
                queries.append(q)
                masks.append(m)
        if len(queries) < 2:
            raise ValueError(f"nnn-tr: {benchmark.name} has fewer than 2 usable training queries")
        order = rng.permutation(len(queries))
        if p.max_train_queries is not None:
            order = order[:p.max_train_queries]
        n_val = max(1, int(round(VAL_FRACTION * len(order))))
        val_idx, tr_idx = order[:n_val], order[n_val:]
        val_queries = [queries[i] for i in val_idx]
        val_rel = [{self._doc_ids[j] for j in np.flatnonzero(masks[i])} for i in val_idx]

        self.adapter = None
        q0_all = as_tensor(super().encode_queries([queries[i] for i in tr_idx], ctx), device)
        pos_all = torch.as_tensor(np.stack([masks[i] for i in tr_idx]), device=device)
        adapter = self.init_adapter(dim, ctx.seed, device)
        opt = torch.optim.AdamW(adapter.parameters(), lr=p.adapter_lr, weight_decay=p.weight_decay)
        L = lipschitz(D, float(p.l2))
        gen = torch.Generator().manual_seed(ctx.seed)

        best = self._val_comp5(val_queries, val_rel, ctx)
        best_state = copy.deepcopy(adapter.state_dict())
        self.history.append({"epoch": 0, "train_loss": None, "val_comp5": best})
        stale = 0
        for epoch in range(1, p.epochs + 1):
            adapter.train()
            perm = torch.randperm(len(tr_idx), generator=gen).to(device)
            total, count, zeros = 0.0, 0, 0
            for s in range(0, len(tr_idx), p.train_batch_size):
                bi = perm[s:s + p.train_batch_size]
                # small blocks run single-threaded on CPU (see retrievers.fista._small_ops)
                threads = 1 if len(bi) * n * dim < _SMALL_WORK else torch.get_num_threads()
                with _cpu_threads(device, threads):
                    X = unrolled_fista(D, adapter(q0_all[bi]), float(p.l1), float(p.l2), L, p.iters)
                    loss = completeness_loss(X, pos_all[bi], p.gamma, p.tau, p.margin).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                total += float(loss.detach()) * len(bi)
                zeros += int((X.detach().amax(dim=1) <= 0).sum())
                count += len(bi)
            adapter.eval()
            comp5 = self._val_comp5(val_queries, val_rel, ctx)
            zero_frac = zeros / max(count, 1)
            self.history.append({"epoch": epoch, "train_loss": total / max(count, 1), "val_comp5": comp5,
                                 "zero_frac": zero_frac})
            if comp5 > best:
                best, best_state, stale = comp5, copy.deepcopy(adapter.state_dict()), 0
            else:
                stale += 1
                if stale >= p.patience:
                    break
            if zero_frac >= 1.0:  # every training solution was all-zero: degenerate, stop
                break
        adapter.load_state_dict(best_state)
        adapter.eval()
        self.last_stats = {"best_val_comp5": best, "train_queries": len(tr_idx), "val_queries": n_val}

    def _val_comp5(self, queries: list[Query], rel: list[set[str]], ctx: RunContext) -> float:
        run: Run = self.search(queries, 5, ctx)
        hits = [bool(r) and len(r) <= 5 and r <= {d for d, _ in run.get(q.id, [])} for q, r in zip(queries, rel)]
        return float(np.mean(hits)) if hits else 0.0
