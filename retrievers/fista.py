"""Batched solver for the non-negative elastic net behind NNN decoding (METHODS.md, NNN section).

For a batch of queries ``Q`` (B × d) and a dictionary ``D`` (n × d, one row per document, rows
L2-normalised) it solves, independently for every query ``q``::

    min_{x ≥ 0}  ½‖Dᵀx − q‖² + λ1·Σ_j x_j + (λ2/2)‖x‖²          (x ∈ Rⁿ, one weight per document)

with FISTA written as matrix–matrix products in float32 torch on the tensors' device (CUDA when
the caller puts them there, CPU otherwise). Row layouts are used throughout (``X @ D`` with X of
shape B × n), which torch's CPU BLAS runs several times faster than column layouts.

Iteration (x₀ = z₀ = 0, θ₀ = 1; the λ1 and λ2 terms are folded into a precomputed constant and
the step, so one iteration is two matrix products, one fused ``addmm`` and a clamp)::

    x_{t+1} = max(0, (1 − λ2/L)·z_t − ((z_t D) Dᵀ)/L + (q Dᵀ − λ1)/L)
    θ_{t+1} = (1 + √(1 + 4θ_t²))/2,   z_{t+1} = x_{t+1} + ((θ_t − 1)/θ_{t+1})(x_{t+1} − x_t)

``L = 1.01·(λ_max(DᵀD) + λ2)``: ``eigvalsh`` of the d × d matrix ``DᵀD`` when d ≤ 1024, power
iteration otherwise. ``x₁ = max(0, Dq − λ1)/L`` is thresholded dense scoring.

Modes
-----
* ``iters=T`` — exactly T iterations (the paper's protocol), no restarts, no early exit.
* ``tol=ε`` — iterate until the KKT residual (see :func:`kkt_residual`) is below ε, with a cap
  on iterations. Every ``check_every`` iterations the support of the iterate is *polished*: the
  stationarity equations are solved exactly on that support, ``(G_AA + λ2 I) x_A = b_A − λ1``
  (a small Cholesky solve in float64); the polished point is kept only if it is non-negative and
  passes the KKT test, so tol mode ends on a certified solution. Tol mode also uses the
  gradient-based adaptive restart of O'Donoghue & Candès (reset θ when the momentum points
  uphill); neither changes the minimiser, only how fast it is reached.

KKT conditions (the problem is convex; with λ2 > 0 strongly convex, so the minimiser is unique):
with r = q − Dᵀx and g_j = D_j·r − λ2·x_j, optimality is ``g_j = λ1`` where x_j > 0 and
``g_j ≤ λ1`` where x_j = 0. :func:`kkt_residual` returns the largest violation per query.

Exact solve (:func:`screened_solve`)
------------------------------------
Per query a working set W of documents is solved exactly and grown from KKT violators, and the
answer carries a certificate over the whole corpus:

1. One dense pass: the top-P documents by ``D_j·q`` (the pool). W is the top M, the check set C
   the rest of the pool, and every other document has ``D_j·q ≤ thr``, the P-th score.
2. The problem restricted to W is solved exactly by block principal pivoting
   (:func:`active_set_qp`: one linear solve on the free set per iteration, warm-started from the
   previous free set): in Gram form while the free set is at most d documents, in d dimensions
   (Woodbury, :func:`active_set_qp_dual`) once it is larger (or W is wider than 4d), so an
   iteration costs at most one d × d Cholesky however many documents the support holds. Below
   that the F-block Cholesky of the Gram form is the cheaper one: 100 queries at n = 10k,
   λ1 = 0.01 (support ≈ 210, working sets up to ~500), one thread: 7.8 CPU s against 10.6 when
   the switch followed W's width (> d) and 12.6 when it was W > d/2.
3. The check: for the residual r, every member of C whose value at its reference residual plus
   ``‖r − r_ref‖`` could exceed λ1 + ε is evaluated exactly; violators (``D_j·r > λ1 + ε``)
   join W, largest first, at most max(``grow``, support size) per round (Celer's doubling), and
   step 2 repeats.
4. The certificate: W satisfies the KKT conditions (step 2), C is checked exactly or bounded,
   and every other document has ``D_j·r ≤ thr + ‖r − r_o‖·max_j‖D_j‖`` (Cauchy–Schwarz from the
   pass at ``r_o``). When that bound is ≤ λ1 + ε the query is certified without another pass.
   Otherwise a guard pass computes ``D r`` over the whole corpus: without a violator the query is
   certified exactly; else the band (the top values outside W: twice the violators plus K) is the
   new C, its last value the new thr, ``r_o = r``, and steps 2–4 repeat. After ``max_rounds``
   guard passes a query is solved by full-corpus FISTA.

The answer is the full-corpus minimiser to the tolerance whatever M, P or K are; they only move
cost between the passes, the checks and the solves. Small supports cost two passes (dense,
guard), or one when the bound certifies; a support the pool does not cover costs one or two
more guard passes and solves that grow with it (see ``tests/perf/fista.py``).

A tol-mode answer is ε-optimal: coefficients agree with the exact minimiser to about ε divided
by the smallest eigenvalue of ``G_AA + λ2 I``, and a document whose exact coefficient is of
order ε may be in or out of the support. Use a smaller ``tol`` when that matters.

On CPU, long runs of tiny operations (the working-set solves, the bookkeeping) run on one thread
and only the corpus-sized products use all of them (see :func:`_small_ops`). Everything is
deterministic for a fixed device and thread count.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

__all__ = [
    "Solution",
    "as_tensor",
    "dense_candidates",
    "fista",
    "gram_fista",
    "kkt_residual",
    "lipschitz",
    "objective",
    "screened_solve",
    "solve_full",
]

_BIG = 1e4  # magnitude used to pin padded coordinates at zero
_SMALL_WORK = 1 << 28  # B·n·d below which one CPU thread runs a full-corpus block (see _small_ops)


def as_tensor(x: Any, device: str | torch.device | None = None) -> torch.Tensor:
    """float32, contiguous torch tensor on ``device`` (default: where ``x`` already is / CPU)."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        arr = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        if not arr.flags.writeable:  # e.g. a read-only memory-mapped embedding cache
            arr = arr.copy()
        t = torch.from_numpy(arr)
    if device is not None:
        t = t.to(device)
    return t.to(torch.float32).contiguous()


@contextlib.contextmanager
def _cpu_threads(device: torch.device, n: int):
    """Run a block with ``n`` intra-op CPU threads, restoring the previous count; no-op off CPU."""
    if device.type != "cpu" or n == torch.get_num_threads():
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def _small_ops(device: torch.device) -> contextlib.AbstractContextManager:
    """Run a block of many small tensor operations single-threaded on CPU.

    The Gram-form solves and the bookkeeping around them are long sequences of tiny operations
    (B × w × w with w ≈ 32, index/gather on B × M); intra-op threading buys nothing there and, on
    a busy machine, every parallel region can wait a scheduler slice for its second thread
    (measured: 12 ms instead of 0.03 ms per step). Large products re-enable all threads with
    :func:`_cpu_threads`. CUDA is unaffected."""
    return _cpu_threads(device, 1)


# ---------------------------------------------------------------------------------------------
# Problem quantities


def lipschitz(D: torch.Tensor, l2: float = 0.0, margin: float = 1.01, *, chunk: int = 65536,
              power_iters: int = 500) -> float:
    """Step constant ``margin·(λ_max(DᵀD) + λ2)`` for the full-corpus problem.

    d ≤ 1024: exact ``eigvalsh`` of the d × d matrix ``DᵀD`` (accumulated over row chunks in
    float64). Larger d: power iteration on ``DᵀD`` until the estimate changes by < 1e-7
    (relative); power iteration approaches λ_max from below, which the margin covers.
    """
    D = as_tensor(D)
    n, d = D.shape
    if d <= 1024:
        gram = torch.zeros(d, d, dtype=torch.float64, device=D.device)
        for s in range(0, n, chunk):
            blk = D[s:s + chunk]
            gram += (blk.T @ blk).double()
        with _small_ops(D.device):
            lam = float(torch.linalg.eigvalsh(gram)[-1])
    else:
        g = torch.Generator(device="cpu").manual_seed(0)
        v = torch.randn(d, generator=g).to(D.device)
        v /= v.norm()
        lam = 0.0
        for _ in range(power_iters):
            w = (v @ D.T) @ D
            new = float(w.norm())
            v = w / max(new, 1e-30)
            if abs(new - lam) <= 1e-7 * max(new, 1e-30):
                lam = new
                break
            lam = new
    return margin * (lam + l2)


def objective(D: torch.Tensor, Q: torch.Tensor, X: torch.Tensor, l1: float, l2: float) -> torch.Tensor:
    """Per-query objective ``½‖Dᵀx − q‖² + λ1·Σx + (λ2/2)‖x‖²`` (X dense, B × n), in float64."""
    D, Q, X = D.double(), Q.double(), X.double()
    R = X @ D - Q
    return 0.5 * (R * R).sum(1) + l1 * X.sum(1) + 0.5 * l2 * (X * X).sum(1)


def _kkt_from_grad(g: torch.Tensor, X: torch.Tensor, l1: float) -> torch.Tensor:
    """max_j of |g_j − λ1| where x_j > 0, (g_j − λ1)₊ where x_j = 0, and −x_j where x_j < 0."""
    dev = g - l1
    res = torch.where(X > 0, dev.abs(), dev.clamp_min(0.0))
    res = torch.maximum(res, (-X).clamp_min(0.0))
    return res.amax(dim=1) if res.shape[1] else torch.zeros(res.shape[0], device=res.device)


def kkt_residual(D: Any, Q: Any, X: Any, l1: float, l2: float, *, chunk: int = 256) -> torch.Tensor:
    """Largest KKT violation per query for a dense solution ``X`` (B × n); 0 at the optimum.

    With r = q − Dᵀx and g_j = D_j·r − λ2·x_j: ``|g_j − λ1|`` for x_j > 0, ``max(0, g_j − λ1)``
    for x_j = 0 (and −x_j if x_j < 0). Computed in chunks of queries.
    """
    D, Q, X = as_tensor(D), as_tensor(Q), as_tensor(X)
    out = []
    for s in range(0, Q.shape[0], chunk):
        x, q = X[s:s + chunk], Q[s:s + chunk]
        r = q - x @ D
        g = r @ D.T - l2 * x
        out.append(_kkt_from_grad(g, x, l1))
    return torch.cat(out) if out else torch.zeros(0)


# ---------------------------------------------------------------------------------------------
# Solutions


@dataclass
class Solution:
    """Sparse per-query solutions: ``indices``/``values`` are B × K (K = largest support),
    sorted by value descending (ties by lower document index); padding is index −1, value 0."""

    indices: torch.Tensor
    values: torch.Tensor
    n: int
    stats: dict[str, Any] = field(default_factory=dict)
    dense_idx: torch.Tensor | None = None  # dense top-k (B × k), when the solver computed it
    dense_scores: torch.Tensor | None = None

    @property
    def support_sizes(self) -> torch.Tensor:
        return (self.indices >= 0).sum(1)

    def to_dense(self) -> torch.Tensor:
        B = self.indices.shape[0]
        X = torch.zeros(B, self.n, dtype=torch.float32, device=self.values.device)
        m = self.indices >= 0
        rows = torch.arange(B, device=X.device)[:, None].expand_as(self.indices)
        X[rows[m], self.indices[m]] = self.values[m]
        return X

    def lists(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (document indices, coefficients), coefficient descending."""
        idx, val = self.indices.cpu().numpy(), self.values.cpu().numpy()
        out = []
        for i in range(idx.shape[0]):
            m = idx[i] >= 0
            out.append((idx[i][m], val[i][m]))
        return out

    def kkt(self, D: Any, Q: Any, l1: float, l2: float, *, chunk: int = 128) -> torch.Tensor:
        """Full-corpus KKT residual per query (as :func:`kkt_residual`), from the sparse form in
        chunks of queries: one product with D per chunk into a reused buffer."""
        D = as_tensor(D)
        Q = as_tensor(Q, D.device)
        B, n = Q.shape[0], D.shape[0]
        idx, val = self.indices.to(D.device), self.values.to(D.device)
        buf = torch.empty(min(chunk, max(B, 1)), n, device=D.device)
        out = []
        for s in range(0, B, chunk):
            i, v = idx[s:s + chunk], val[s:s + chunk]
            b = i.shape[0]
            m = i >= 0
            i0 = torch.where(m, i, 0)
            v0 = torch.where(m, v, 0.0)
            r = Q[s:s + chunk] - torch.bmm(v0[:, None, :], D[i0])[:, 0, :]
            g = torch.mm(r, D.T, out=buf[:b])
            res = torch.zeros(b, device=D.device)
            if i.shape[1]:
                on = (g.gather(1, i0) - l2 * v0 - l1).abs()
                res = torch.where(m, on, 0.0).amax(1)
                res = torch.maximum(res, torch.where(m, -v0, 0.0).amax(1))  # negativity
                rr, kk = m.nonzero(as_tuple=True)
                g[rr, i[rr, kk]] = -math.inf  # off-support condition only
            out.append(torch.maximum(res, (g.amax(1) - l1).clamp_min(0.0)))
        return torch.cat(out) if out else torch.zeros(0)


def _sparsify(X: torch.Tensor, cols: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) of the positive entries of each row of X, value desc, ties by index.

    ``cols`` (B × M) maps X's columns to corpus indices (Gram form); None means identity."""
    B = X.shape[0]
    nnz = (X > 0).sum(1)
    K = int(nnz.max()) if B else 0
    if K == 0:
        return (torch.full((B, 0), -1, dtype=torch.long, device=X.device),
                torch.zeros(B, 0, dtype=torch.float32, device=X.device))
    vals, order = torch.topk(X, K, dim=1)  # the K largest: every positive entry
    idx = order if cols is None else cols.gather(1, order)
    perm = _sort_pairs(vals, idx)  # value desc, ties by lower corpus index
    vals, idx = vals.gather(1, perm), idx.gather(1, perm)
    m = vals > 0
    idx = torch.where(m, idx, torch.full_like(idx, -1))
    vals = torch.where(m, vals, torch.zeros_like(vals))
    return idx, vals


def _sort_pairs(vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Permutation ordering each row by value desc, then index asc (zeros/pads last)."""
    # sort by index first (stable), then by value desc (stable) -> lexicographic
    p1 = torch.sort(torch.where(vals > 0, idx, torch.full_like(idx, torch.iinfo(torch.long).max)),
                    dim=1, stable=True).indices
    v1 = vals.gather(1, p1)
    p2 = torch.sort(v1, dim=1, descending=True, stable=True).indices
    return p1.gather(1, p2)


# ---------------------------------------------------------------------------------------------
# Operators: the two forms of the same problem


class _FactorOp:
    """Full-corpus form: products with D (n × d)."""

    def __init__(self, D: torch.Tensor, Q: torch.Tensor, l1: float, l2: float, L: float):
        self.D, self.Q, self.l1, self.l2, self.L = D, Q, l1, l2, L
        # C = (Q Dᵀ − λ1)/L, the constant part of the fused update
        self.C = torch.mm(Q, D.T)
        self.C.sub_(l1).div_(L)
        self.decay = 1.0 - l2 / L

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.C.shape)  # type: ignore[return-value]

    def step(self, Z: torch.Tensor, out: torch.Tensor) -> None:
        P = torch.mm(Z, self.D)
        torch.addmm(self.C, P, self.D.T, alpha=-1.0 / self.L, out=out)
        out.add_(Z, alpha=self.decay).clamp_(min=0.0)

    def grad(self, X: torch.Tensor) -> torch.Tensor:
        """g = D r − λ2 x (B × n)."""
        R = self.Q - torch.mm(X, self.D)
        g = torch.mm(R, self.D.T)
        return g.sub_(X, alpha=self.l2) if self.l2 else g

    def sub_system(self, rows: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(G_AA, b_A) for the given rows and column sets idx (len(rows) × K)."""
        DA = self.D[idx]  # R × K × d
        G = torch.bmm(DA, DA.transpose(1, 2))
        b = self.C[rows].gather(1, idx) * self.L + self.l1
        return G, b

    def select(self, rows: torch.Tensor) -> None:
        self.Q, self.C = self.Q[rows], self.C[rows]


class _GramOp:
    """Candidate form: per-query Gram block G (B × M × M), b = D_S q (B × M), per-query L."""

    def __init__(self, G: torch.Tensor, b: torch.Tensor, valid: torch.Tensor, l1: float, l2: float):
        self.l1, self.l2 = l1, l2
        if not bool(valid.all()):
            G = G * (valid[:, :, None] & valid[:, None, :])
        # Upper bound on λ_max(G): min(Frobenius norm, largest absolute row sum) — any L ≥ the
        # Lipschitz constant is a valid FISTA step, and this one needs no eigen-decomposition.
        lam = torch.minimum(torch.linalg.matrix_norm(G), G.abs().sum(2).amax(1))
        self.L = ((lam + l2) * (1 + 1e-4)).clamp_min(1e-6)[:, None]  # B × 1
        self.Gs = G.div_(self.L[:, :, None])  # G / L, in place (callers pass a fresh tensor)
        self.b = torch.where(valid, b, torch.full_like(b, -_BIG))
        self.C = (self.b - l1) / self.L
        self.decay = 1.0 - l2 / self.L

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.C.shape)  # type: ignore[return-value]

    def step(self, Z: torch.Tensor, out: torch.Tensor) -> None:
        torch.baddbmm(self.C[:, None, :], Z[:, None, :], self.Gs, alpha=-1.0, out=out[:, None, :])
        out.addcmul_(Z, self.decay).clamp_(min=0.0)

    def grad(self, X: torch.Tensor) -> torch.Tensor:
        GX = torch.bmm(X[:, None, :], self.Gs)[:, 0, :] * self.L
        g = self.b - GX
        return g.sub_(X, alpha=self.l2) if self.l2 else g

    def sub_system(self, rows: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        R, K = idx.shape
        Gs = self.Gs[rows]
        rowsel = Gs.gather(1, idx[:, :, None].expand(R, K, Gs.shape[2]))
        G = rowsel.gather(2, idx[:, None, :].expand(R, K, K)) * self.L[rows][:, :, None]
        return G, self.b[rows].gather(1, idx)

    def select(self, rows: torch.Tensor) -> None:
        self.Gs, self.b, self.C = self.Gs[rows], self.b[rows], self.C[rows]
        self.L, self.decay = self.L[rows], self.decay[rows]


def _polish(op: _FactorOp | _GramOp, X: torch.Tensor, rows: torch.Tensor, l1: float, l2: float,
            cap: int) -> torch.Tensor:
    """Solve the stationarity equations ``(G_AA + λ2 I) x_A = b_A − λ1`` on the support A of each
    of the given rows of X (float64 Cholesky). Returns X with those rows replaced where the solve
    succeeded with a strictly positive x_A; other rows are left as they were."""
    if rows.numel() == 0:
        return X
    Xr = X[rows]
    mask = Xr > 0
    cnt = mask.sum(1)
    sel = (cnt > 0) & (cnt <= cap)
    if not bool(sel.any()):
        return X
    rows, Xr, mask, cnt = rows[sel], Xr[sel], mask[sel], cnt[sel]
    K = int(cnt.max())
    # support columns first (stable: column order), padded with each row's first support column
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :K]
    valid = torch.arange(K, device=X.device)[None, :] < cnt[:, None]
    idx = torch.where(valid, order, order[:, :1])
    G, b = op.sub_system(rows, idx)
    vv = valid[:, :, None] & valid[:, None, :]
    A = torch.where(vv, G.double(), 0.0)
    A.diagonal(dim1=1, dim2=2).add_(torch.where(valid, float(l2), 1.0).double())
    rhs = torch.where(valid, b.double() - l1, 0.0)
    with _small_ops(X.device):
        Lc, info = torch.linalg.cholesky_ex(A)
        sol = torch.cholesky_solve(rhs[:, :, None], Lc)[:, :, 0]
    ok = (info == 0) & torch.isfinite(sol).all(1) & torch.where(valid, sol > 0, True).all(1)
    if not bool(ok.any()):
        return X
    rows, idx, sol, valid = rows[ok], idx[ok], sol[ok], valid[ok]
    Xp = torch.zeros(rows.numel(), X.shape[1], dtype=X.dtype, device=X.device)
    Xp.scatter_add_(1, idx, torch.where(valid, sol, 0.0).to(X.dtype))  # pads add 0
    X = X.clone()
    X[rows] = Xp
    return X


@dataclass
class _CoreResult:
    X: torch.Tensor
    iters: torch.Tensor  # per row
    converged: torch.Tensor
    residual: torch.Tensor


def _fista_core(op: _FactorOp | _GramOp, l1: float, l2: float, *, X0: torch.Tensor | None,
                iters: int | None, tol: float | None, max_iters: int, check_every: int,
                polish: bool, polish_cap: int, restart: bool) -> _CoreResult:
    B, n = op.shape
    dev = op.C.device
    X = torch.zeros(B, n, device=dev) if X0 is None else X0.clone()
    Z = X.clone()
    Xn = torch.empty_like(X)
    theta = torch.ones(B, 1, device=dev)
    if iters is not None:  # fixed-T protocol
        for _ in range(iters):
            op.step(Z, Xn)
            th_n = (1 + torch.sqrt(1 + 4 * theta * theta)) / 2
            beta = (theta - 1) / th_n
            torch.sub(Xn, X, out=Z)
            Z.mul_(beta).add_(Xn)
            X, Xn, theta = Xn, X, th_n
        res = _kkt_from_grad(op.grad(X), X, l1)
        conv = res < tol if tol is not None else torch.zeros(B, dtype=torch.bool, device=dev)
        return _CoreResult(X, torch.full((B,), iters, dtype=torch.long, device=dev), conv, res)

    assert tol is not None
    out_X = torch.zeros(B, n, device=dev)
    out_it = torch.zeros(B, dtype=torch.long, device=dev)
    out_conv = torch.zeros(B, dtype=torch.bool, device=dev)
    out_res = torch.full((B,), math.inf, device=dev)
    active = torch.arange(B, device=dev)
    t = 0
    check_now = X0 is not None  # a warm start may already be optimal
    prev = torch.zeros_like(X, dtype=torch.bool) if X0 is None else None
    T1 = torch.empty_like(X) if restart else None
    while active.numel():
        if not check_now:
            op.step(Z, Xn)
            th_n = (1 + torch.sqrt(1 + 4 * theta * theta)) / 2
            beta = (theta - 1) / th_n
            if T1 is not None:
                torch.sub(Z, Xn, out=T1)
            torch.sub(Xn, X, out=Z)  # Z now holds the step x_{t+1} − x_t
            if T1 is not None:  # restart where (z_t − x_{t+1})·(x_{t+1} − x_t) > 0
                up = T1.mul_(Z).sum(1, keepdim=True) > 0
                th_n = torch.where(up, torch.ones_like(th_n), th_n)
                beta = torch.where(up, torch.zeros_like(beta), beta)
            Z.mul_(beta).add_(Xn)
            X, Xn, theta = Xn, X, th_n
            t += 1
        last = t >= max_iters
        if check_now or t % check_every == 0 or last:
            check_now = False
            cand = X
            if polish:
                supp = X > 0
                # polish only rows whose support has not changed since the last check
                stable = torch.ones(supp.shape[0], dtype=torch.bool, device=dev) if prev is None \
                    else (supp == prev).all(1)
                prev = supp
                cand = _polish(op, X, stable.nonzero()[:, 0], l1, l2, polish_cap)
            res = _kkt_from_grad(op.grad(cand), cand, l1)
            done = res < tol
            fin = done | last
            if fin.any():
                rows = active[fin]
                out_X[rows] = cand[fin]
                out_it[rows] = t
                out_conv[rows] = done[fin]
                out_res[rows] = res[fin]
                keep = ~fin
                if not keep.any():
                    break
                active = active[keep]
                op.select(keep.nonzero()[:, 0])
                X, Z, theta = X[keep], Z[keep], theta[keep]
                if prev is not None:
                    prev = prev[keep]
                Xn = torch.empty_like(X)
                T1 = torch.empty_like(X) if restart else None
            if last:
                break
    return _CoreResult(out_X, out_it, out_conv, out_res)


# ---------------------------------------------------------------------------------------------
# Public solvers


def _check_mode(iters: int | None, tol: float | None) -> None:
    if (iters is None) == (tol is None):
        raise ValueError("give exactly one of iters=T (fixed iterations) or tol=ε (KKT tolerance)")


def fista(D: Any, Q: Any, l1: float, l2: float, *, iters: int | None = None, tol: float | None = None,
          max_iters: int = 20000, check_every: int = 10, L: float | None = None,
          X0: torch.Tensor | None = None, polish: bool = True, polish_cap: int = 256,
          restart: bool = True, device: str | torch.device | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Full-corpus FISTA for one block of queries; returns the dense B × n solution and stats.

    ``iters=T``: exactly T plain FISTA steps from 0 (paper protocol). ``tol=ε``: until the KKT
    residual is < ε (polish + restart, see module docstring) or ``max_iters``. Memory is about
    four B × n float32 buffers; :func:`solve_full` chunks the queries for large corpora.
    """
    _check_mode(iters, tol)
    D = as_tensor(D, device)
    Q = as_tensor(Q, D.device)
    if L is None:
        L = lipschitz(D, l2)
    small = Q.shape[0] * D.shape[0] * D.shape[1] < _SMALL_WORK
    with _small_ops(D.device) if small else contextlib.nullcontext():
        op = _FactorOp(D, Q, l1, l2, L)
        r = _fista_core(op, l1, l2, X0=None if X0 is None else as_tensor(X0, D.device), iters=iters, tol=tol,
                        max_iters=max_iters, check_every=check_every, polish=polish, polish_cap=polish_cap,
                        restart=restart if iters is None else False)
    stats = {"iterations": r.iters.cpu(), "converged": r.converged.cpu(), "residual": r.residual.cpu(), "L": L}
    return r.X, stats


def gram_fista(G: torch.Tensor, b: torch.Tensor, l1: float, l2: float, *, valid: torch.Tensor | None = None,
               iters: int | None = None, tol: float | None = None, max_iters: int = 20000,
               check_every: int = 10, X0: torch.Tensor | None = None, polish: bool = True,
               polish_cap: int = 256, restart: bool = True) -> tuple[torch.Tensor, dict[str, Any]]:
    """FISTA in Gram form: ``min_{x≥0} ½xᵀGx − bᵀx + λ1Σx + (λ2/2)‖x‖²`` per batch row.

    G: B × M × M (the candidates' block of D Dᵀ), b: B × M (their dense scores), ``valid`` masks
    padded candidates (kept at 0). Step 1/L per query with L an upper bound on λ_max(G) + λ2.
    """
    _check_mode(iters, tol)
    if valid is None:
        valid = torch.ones(b.shape, dtype=torch.bool, device=b.device)
    with _small_ops(b.device):
        op = _GramOp(G.clone(), b, valid, l1, l2)
        r = _fista_core(op, l1, l2, X0=X0, iters=iters, tol=tol, max_iters=max_iters, check_every=check_every,
                        polish=polish, polish_cap=polish_cap, restart=restart if iters is None else False)
    return r.X, {"iterations": r.iters, "converged": r.converged, "residual": r.residual}


def _query_chunk(n: int, budget_bytes: int, buffers: int = 5) -> int:
    return max(1, int(budget_bytes // (buffers * 4 * max(n, 1))))


def solve_full(D: Any, Q: Any, l1: float, l2: float, *, iters: int | None = None, tol: float | None = None,
               max_iters: int = 20000, check_every: int = 10, L: float | None = None,
               polish: bool = True, restart: bool = True, memory_budget: int = 2 << 30,
               chunk_size: int | None = None) -> Solution:
    """Full-corpus FISTA over all queries in chunks (≈ ``memory_budget`` bytes of B × n buffers);
    returns a sparse :class:`Solution` (the support of the final iterate)."""
    _check_mode(iters, tol)
    D = as_tensor(D)
    Q = as_tensor(Q, D.device)
    B, n = Q.shape[0], D.shape[0]
    if L is None:
        L = lipschitz(D, l2)
    bc = chunk_size or _query_chunk(n, memory_budget)
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    its, conv, res = [], [], []
    for s in range(0, B, bc):
        X, st = fista(D, Q[s:s + bc], l1, l2, iters=iters, tol=tol, max_iters=max_iters,
                      check_every=check_every, L=L, polish=polish, restart=restart)
        parts.append(_sparsify(X))
        its.append(st["iterations"])
        conv.append(st["converged"])
        res.append(st["residual"])
        del X
    idx, val = _cat_padded(parts, B, D.device)
    it = torch.cat(its) if its else torch.zeros(0)
    sol = Solution(idx, val, n)
    sol.stats = {
        "mode": "iters" if iters is not None else "tol",
        "queries": B,
        "iterations_mean": float(it.float().mean()) if B else 0.0,
        "iterations_max": int(it.max()) if B else 0,
        "converged": int(torch.cat(conv).sum()) if B else 0,
        "kkt_max": float(torch.cat(res).max()) if B else 0.0,
        "support_mean": float(sol.support_sizes.float().mean()) if B else 0.0,
        "L": L,
    }
    return sol


def _cat_padded(parts: list[tuple[torch.Tensor, torch.Tensor]], B: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    K = max([p[0].shape[1] for p in parts], default=0)
    idx = torch.full((B, K), -1, dtype=torch.long, device=device)
    val = torch.zeros(B, K, dtype=torch.float32, device=device)
    s = 0
    for i, v in parts:
        m = i.shape[0]
        idx[s:s + m, :i.shape[1]] = i
        val[s:s + m, :v.shape[1]] = v
        s += m
    return idx, val


def dense_candidates(D: Any, Q: Any, M: int, *, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-M documents by inner product per query, score descending: (idx, scores). Which of
    several documents tied at the cut-off is kept is up to ``torch.topk``; the screened solve
    does not depend on it (the guard checks every excluded document)."""
    D = as_tensor(D)
    Q = as_tensor(Q, D.device)
    M = min(M, D.shape[0])
    idx, sc = [], []
    for s in range(0, Q.shape[0], chunk):
        S = Q[s:s + chunk] @ D.T
        v, i = torch.topk(S, M, dim=1, sorted=True)
        idx.append(i)
        sc.append(v)
    return torch.cat(idx), torch.cat(sc)


# ---------------------------------------------------------------------------------------------
# The exact solve: working sets, active-set solves, a whole-corpus certificate


def _topk_rows(V: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``K`` (values, indices) of every row of ``V`` (b × n, unit column stride), value
    descending. Two stages: the maximum of each block of ``bs`` columns, the K blocks with the
    largest maxima, then the top-K of their entries (the K largest entries of a row lie in the K
    blocks with the largest maxima). Same values as ``torch.topk(V, K)``, several times faster
    for K in the hundreds; which of several tied entries is kept may differ."""
    b, n = V.shape
    K = min(K, n)
    bs = 1 << max(0, int(round(math.log2(max(n / max(K, 1), 1.0) ** 0.5))))
    if bs < 4 or V.stride(1) != 1 or n < 8 * K:
        return torch.topk(V, K, dim=1)
    nb = n // bs
    bm = V.as_strided((b, nb, bs), (V.stride(0), bs, 1)).amax(2)
    if nb * bs < n:
        bm = torch.cat([bm, V[:, nb * bs:].amax(1, keepdim=True)], 1)
    kb = min(K, bm.shape[1])
    bi = torch.topk(bm, kb, dim=1).indices
    cols = (bi[:, :, None] * bs + torch.arange(bs, device=V.device)).reshape(b, kb * bs)
    inside = cols < n
    cols = torch.where(inside, cols, 0)
    vals = torch.where(inside, V.gather(1, cols), -math.inf)
    v, j = torch.topk(vals, K, dim=1)
    return v, cols.gather(1, j)


class _Corpus:
    """The corpus-sized products of the exact solve (the dense top-P of the queries, the guard on
    the residuals), written chunk by chunk into one reused buffer: fresh multi-megabyte
    allocations are page-faulted in on every use, which costs as much as the product on CPU.

    On CPU the products go through numpy's BLAS (``"numpy"``) or torch's (``"torch"``); the
    reductions after them run single-threaded (see :func:`_small_ops`). The dense top-P on CPU
    is faiss's exhaustive inner-product search when ``cpu_topk == "faiss"`` (its blocked product
    and heap beat a full product plus a top-k on an idle machine: 0.75 s against 1.27 s for the
    top-500 of 1000 queries × 100k documents), else the product and :func:`_topk_rows`."""

    def __init__(self, D: torch.Tensor, chunk: int, cpu_blas: str, cpu_topk: str = "faiss"):
        if cpu_blas not in ("numpy", "torch"):
            raise ValueError(f"cpu_blas must be 'numpy' or 'torch', got {cpu_blas!r}")
        if cpu_topk not in ("faiss", "blas"):
            raise ValueError(f"cpu_topk must be 'faiss' or 'blas', got {cpu_topk!r}")
        self.D, self.chunk = D, chunk
        n, d = D.shape
        big = chunk * n * d >= _SMALL_WORK
        self.nthreads = torch.get_num_threads() if big else 1
        self.Dnp = D.numpy() if D.device.type == "cpu" and cpu_blas == "numpy" and big else None
        self.faiss = D.device.type == "cpu" and cpu_topk == "faiss"
        self.buf: torch.Tensor | None = None
        self.rows = 0  # query rows multiplied with the corpus (both kinds of pass)

    def product(self, A: torch.Tensor) -> torch.Tensor:
        """A @ Dᵀ (A: b × d, b ≤ chunk) into the reused buffer."""
        n = self.D.shape[0]
        if self.buf is None:
            self.buf = torch.empty(self.chunk, n, device=self.D.device)
        out = self.buf[:A.shape[0]]
        self.rows += A.shape[0]
        if self.Dnp is not None:
            np.matmul(A.contiguous().numpy(), self.Dnp.T, out=out.numpy())
            return out
        with _cpu_threads(self.D.device, self.nthreads):
            return torch.mm(A, self.D.T, out=out)

    def top(self, Q: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense top-K (scores, indices) of each query, score descending."""
        if self.faiss:
            import faiss

            self.rows += Q.shape[0]
            v, i = faiss.knn(np.ascontiguousarray(Q.numpy()), self.D.numpy(), min(K, self.D.shape[0]),
                             metric=faiss.METRIC_INNER_PRODUCT)
            return torch.from_numpy(v), torch.from_numpy(i)
        vals, idx = [], []
        for s in range(0, Q.shape[0], self.chunk):
            v, i = _topk_rows(self.product(Q[s:s + self.chunk]), K)
            vals.append(v)
            idx.append(i)
        return torch.cat(vals), torch.cat(idx)

    def guard(self, R: torch.Tensor, W: torch.Tensor, thr: float, K: int,
              K_max: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For residuals R (b × d) and working sets W (b × w; every listed document is excluded):
        the largest ``D_j·r`` outside W per row, and for the rows where it exceeds ``thr`` the
        band: the top values and documents outside W, value descending (padded with −inf, 0),
        and the band's last value, which bounds every document outside W and the band. A row's
        band holds its v violators and K more documents below them (at most ``K_max``)."""
        b, dev = R.shape[0], R.device
        n = self.D.shape[0]
        mx = torch.empty(b, device=dev)
        last = torch.full((b,), math.inf, device=dev)
        parts: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for s in range(0, b, self.chunk):
            V = self.product(R[s:s + self.chunk])
            V.scatter_(1, W[s:s + self.chunk], -math.inf)
            m = V.amax(1)
            mx[s:s + self.chunk] = m
            bad = (m > thr).nonzero()[:, 0]
            if bad.numel():
                Vb = V if bad.numel() == V.shape[0] else V[bad]
                # the top K first; rows whose K are all violators look further (4K, ..., K_max)
                k = min(K, n)
                v, i = _topk_rows(Vb, k)
                while k < min(K_max, n):
                    full = v[:, -1] > thr
                    if not bool(full.any()):
                        break
                    k = min(4 * k, K_max, n)
                    v, i = _topk_rows(Vb, k)
                width = ((v > thr).sum(1) + K).clamp(max=v.shape[1])
                pos = torch.arange(v.shape[1], device=dev)[None, :]
                last[s + bad] = v.gather(1, (width - 1)[:, None])[:, 0]
                v = torch.where(pos < width[:, None], v, -math.inf)
                parts.append((s, bad, v, i))
        Kw = max([p[2].shape[1] for p in parts], default=1)
        vals = torch.full((b, Kw), -math.inf, device=dev)
        idx = torch.zeros(b, Kw, dtype=torch.long, device=dev)
        for s, bad, v, i in parts:
            vals[s + bad, :v.shape[1]], idx[s + bad, :i.shape[1]] = v, i
        return mx, vals, idx, last


def active_set_qp(G: torch.Tensor, b: torch.Tensor, l1: float, l2: float, *, valid: torch.Tensor | None = None,
                  free: torch.Tensor | None = None, tol: float = 1e-4, max_iter: int = 60,
                  backup: int = 3) -> "_QPResult":
    """``min_{x≥0} ½xᵀ(G + λ2 I)x − (b − λ1)ᵀx`` per batch row by block principal pivoting
    (Júdice & Pires 1994; Kim & Park 2011), in float64.

    With H = G + λ2 I and c = b − λ1, the optimum is the F-block solution ``H_FF x_F = c_F``,
    x = 0 elsewhere, for the free set F at which x_F ≥ 0 and y = Hx − c ≥ 0 off F (exactly the
    KKT conditions of the problem). Each iteration solves on the current F (one Cholesky per row)
    and exchanges every infeasible index: a free one with x_j < 0, a fixed one with
    y_j < −tol/4. When the number of infeasible indices has not decreased for ``backup``
    iterations, a row exchanges only its infeasible index of highest position (Murty's rule),
    which makes the method finite for positive-definite H. ``free`` is the starting F (a warm
    start: the previous support), default ``c > 0``. ``valid`` masks padded columns (kept at 0).

    Returns a :class:`_QPResult`: per row x (float64), converged, failed (the F-block was not
    positive definite: λ2 = 0 with dependent documents), iterations, and the free set reached (a
    row stopped by ``max_iter`` can resume from it; its x is the last F-block solution).
    """
    Bn, w = b.shape
    dev = b.device
    if valid is None:
        valid = torch.ones(Bn, w, dtype=torch.bool, device=dev)
    H = torch.where(valid[:, :, None] & valid[:, None, :], G.double(), 0.0)
    H.diagonal(dim1=1, dim2=2).add_(torch.where(valid, float(l2), 1.0).double())
    c = torch.where(valid, b.double() - l1, -1.0)
    F = (c > 0) if free is None else (free & valid)
    ytol = 0.25 * tol
    res = _QPResult(torch.zeros(Bn, w, dtype=torch.float64, device=dev), torch.zeros(Bn, dtype=torch.bool, device=dev),
                    torch.zeros(Bn, dtype=torch.bool, device=dev),
                    torch.full((Bn,), max_iter, dtype=torch.long, device=dev), F.clone())
    act = torch.arange(Bn, device=dev)
    ninf = torch.full((Bn,), w + 1, dtype=torch.long, device=dev)
    p = torch.full((Bn,), backup, dtype=torch.long, device=dev)
    flat = H.reshape(Bn, w * w)
    for it in range(1, max_iter + 1):
        k = F.sum(1)
        K = int(k.max())
        x = torch.zeros(act.numel(), w, dtype=torch.float64, device=dev)
        ok = torch.ones(act.numel(), dtype=torch.bool, device=dev)
        if K > 0:
            # the F-block, F's columns first (stable), padded with identity rows
            order = torch.sort((~F).to(torch.int8), dim=1, stable=True).indices[:, :K]
            inF = torch.arange(K, device=dev)[None, :] < k[:, None]
            Hs = flat.gather(1, (order[:, :, None] * w + order[:, None, :]).reshape(-1, K * K)).reshape(-1, K, K)
            Hs.masked_fill_(~(inF[:, :, None] & inF[:, None, :]), 0.0)
            Hs.diagonal(dim1=1, dim2=2).add_((~inF).double())
            Lc, info = torch.linalg.cholesky_ex(Hs)
            xs = torch.cholesky_solve(torch.where(inF, c.gather(1, order), 0.0)[:, :, None], Lc)[:, :, 0]
            ok = (info == 0) & torch.isfinite(xs).all(1)
            x.scatter_add_(1, order, torch.where(inF & ok[:, None], xs, 0.0))
        y = torch.bmm(H, x[:, :, None])[:, :, 0] - c
        infeas = valid & torch.where(F, x < 0, y < -ytol)
        nV = infeas.sum(1)
        F, ninf, p = _exchange(F, infeas, nV, ninf, p, backup)
        fin = (nV == 0) | ~ok | (it == max_iter)
        if bool(fin.any()):
            r = act[fin]
            res.x[r] = x[fin]
            res.converged[r] = (nV == 0)[fin] & ok[fin]
            res.failed[r] = ~ok[fin]
            res.iterations[r] = it
            res.free[r] = F[fin]
            keep = ~fin
            if not bool(keep.any()):
                break
            act, F, H, c, valid = act[keep], F[keep], H[keep], c[keep], valid[keep]
            ninf, p = ninf[keep], p[keep]
            flat = H.reshape(act.numel(), w * w)
    return res


@dataclass
class _QPResult:
    x: torch.Tensor
    converged: torch.Tensor
    failed: torch.Tensor
    iterations: torch.Tensor
    free: torch.Tensor


def _exchange(F: torch.Tensor, infeas: torch.Tensor, nV: torch.Tensor, ninf: torch.Tensor, p: torch.Tensor,
              backup: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One exchange of block principal pivoting (see :func:`active_set_qp`): every infeasible
    index, or only the one of highest position once ``backup`` exchanges have not reduced their
    number. Returns the new (F, ninf, p)."""
    col = torch.arange(F.shape[1], device=F.device)
    better = nV < ninf
    full = better | (p > 0)
    ninf = torch.where(better, nV, ninf)
    p = torch.where(better, backup, (p - 1).clamp_min(0))
    last = torch.where(infeas, col[None, :], -1).amax(1)
    return F ^ torch.where(full[:, None], infeas, col[None, :] == last[:, None]), ninf, p


def _gather_rows(A: torch.Tensor, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows of A (b × w × d) selected by ``sel`` (b × w), members first: (rows b × K × d,
    their positions b × K, valid b × K)."""
    k = sel.sum(1)
    K = max(int(k.max()) if sel.shape[0] else 0, 1)
    order = torch.sort((~sel).to(torch.int8), dim=1, stable=True).indices[:, :K]
    on = torch.arange(K, device=A.device)[None, :] < k[:, None]
    return A.gather(1, order[:, :, None].expand(-1, K, A.shape[2])), order, on


def _gram_d(A: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Σ_{j∈sel} a_j a_jᵀ (d × d per row) for the rows a_j of A (b × w × d) selected by ``sel``."""
    S, _, on = _gather_rows(A, sel)
    S = S * on[:, :, None].to(S.dtype)
    return torch.bmm(S.transpose(1, 2), S)


def active_set_qp_dual(A: torch.Tensor, b: torch.Tensor, l1: float, l2: float, *, valid: torch.Tensor,
                       free: torch.Tensor, M: torch.Tensor | None = None, tol: float = 1e-4, max_iter: int = 60,
                       backup: int = 3) -> tuple[_QPResult, torch.Tensor]:
    """The block principal pivoting of :func:`active_set_qp` for G = A Aᵀ (A: b × w × d, the
    working set's embeddings) and λ2 > 0, with every F-block solve done in d dimensions
    (Woodbury): ``z = (λ2 I + A_Fᵀ A_F)⁻¹ A_Fᵀ c_F``, ``x_F = (c_F − A_F z)/λ2``; then
    ``A_Fᵀ x_F = z``, so ``y = Hx − c = A z + λ2 x − c`` and one product with A per iteration
    gives both x and y. The d × d matrix and ``A_Fᵀ c_F`` are updated from the exchanged rows
    only, so an iteration costs one d × d Cholesky and one pass over A however large the
    working set and the support are. Computed in float64 (A is converted unless it already is).

    ``M`` is ``λ2 I + A_Fᵀ A_F`` for the starting free set (computed when None). Returns the
    result and the matrix for the free set it reached."""
    Bn, w, d = A.shape
    dev = A.device
    A = A.double()
    c = torch.where(valid, b.double() - l1, -1.0)
    F = free & valid
    if M is None:
        M = _gram_d(A, F)
        M.diagonal(dim1=1, dim2=2).add_(l2)
    t = torch.bmm(A.transpose(1, 2), torch.where(F, c, 0.0)[:, :, None])  # A_Fᵀ c_F, b × d × 1
    ytol = 0.25 * tol
    res = _QPResult(torch.zeros(Bn, w, dtype=torch.float64, device=dev), torch.zeros(Bn, dtype=torch.bool, device=dev),
                    torch.zeros(Bn, dtype=torch.bool, device=dev),
                    torch.full((Bn,), max_iter, dtype=torch.long, device=dev), F.clone())
    M_out = M.clone()
    act = torch.arange(Bn, device=dev)
    ninf = torch.full((Bn,), w + 1, dtype=torch.long, device=dev)
    p = torch.full((Bn,), backup, dtype=torch.long, device=dev)
    for it in range(1, max_iter + 1):
        Lc, info = torch.linalg.cholesky_ex(M)
        z = torch.cholesky_solve(t, Lc)
        Az = torch.bmm(A, z)[:, :, 0]
        x = torch.where(F, (c - Az) / l2, 0.0)
        ok = (info == 0) & torch.isfinite(x).all(1)
        y = torch.where(F, 0.0, Az - c)  # on F, y = Az + λ2 x − c = 0 by construction
        infeas = valid & torch.where(F, x < 0, y < -ytol)
        nV = infeas.sum(1)
        Fn, ninf, p = _exchange(F, infeas, nV, ninf, p, backup)
        ch = Fn ^ F
        if bool(ch.any()):  # rank updates by the exchanged rows: +a aᵀ joining F, −a aᵀ leaving
            S, pos, on = _gather_rows(A, ch)
            sgn = torch.where(on, torch.where(Fn.gather(1, pos), 1.0, -1.0), 0.0).double()
            Ss = S * sgn[:, :, None]
            M = M + torch.bmm(Ss.transpose(1, 2), S)
            t = t + torch.bmm(Ss.transpose(1, 2), c.gather(1, pos)[:, :, None])
        F = Fn
        fin = (nV == 0) | ~ok | (it == max_iter)
        if bool(fin.any()):
            r = act[fin]
            res.x[r] = x[fin]
            res.converged[r] = (nV == 0)[fin] & ok[fin]
            res.failed[r] = ~ok[fin]
            res.iterations[r] = it
            res.free[r] = F[fin]
            M_out[r] = M[fin]
            keep = ~fin
            if not bool(keep.any()):
                break
            act, F, A, c, valid, ninf, p, M, t = (act[keep], F[keep], A[keep], c[keep], valid[keep], ninf[keep],
                                                  p[keep], M[keep], t[keep])
    return res, M_out


@dataclass
class _Stage:
    """Queries solved in lock-step on their working sets (see :func:`screened_solve`): per row
    the working set W with its Gram block (or, once :meth:`wants_dual`, the
    d × d matrix ``λ2 I + D_Fᵀ D_F`` of the free set instead), the check set C with the values
    ``D_j·r`` at a reference residual ``Rc``, and the bound ``thr`` on ``D_j·Ro`` for every other
    document."""

    rows: torch.Tensor  # b: the queries' positions
    q: torch.Tensor  # b × d
    W: torch.Tensor  # b × w (pads repeat a member, Wv False)
    Wv: torch.Tensor
    X: torch.Tensor  # b × w
    DW: torch.Tensor  # b × w × d
    G: torch.Tensor  # b × w × w (b × 0 × 0 in d-space form)
    Mf: torch.Tensor  # b × d × d, float64 (b × 0 × 0 in Gram form)
    bW: torch.Tensor  # b × w, D_W q
    C: torch.Tensor  # b × c
    Cv: torch.Tensor
    gC: torch.Tensor  # b × c, D_C Rc
    Rc: torch.Tensor  # b × d
    thr: torch.Tensor  # b
    Ro: torch.Tensor  # b × d
    F: torch.Tensor  # b × w, the active-set solver's free set (kept between its calls)

    @staticmethod
    def build(D: torch.Tensor, rows: torch.Tensor, q: torch.Tensor, W: torch.Tensor, Wv: torch.Tensor,
              X: torch.Tensor, C: torch.Tensor, Cv: torch.Tensor, gC: torch.Tensor, Rc: torch.Tensor,
              thr: torch.Tensor, Ro: torch.Tensor, l1: float, l2: float, dual_above: int) -> "_Stage":
        W = torch.where(Wv, W, W[:, :1])
        DW = D[W]
        bW = torch.bmm(DW, q[:, :, None])[:, :, 0]
        # the check set with its members first, as wide as the widest row's
        k = max(int(Cv.sum(1).max()) if C.shape[1] else 0, 1)
        if C.shape[1] == 0:
            C = W[:, :1]
            Cv = torch.zeros_like(C, dtype=torch.bool)
            gC = torch.full(C.shape, -math.inf, device=q.device)
        elif k < C.shape[1] or not bool(Cv.all()):
            order = torch.sort((~Cv).to(torch.int8), dim=1, stable=True).indices[:, :k]
            C, Cv, gC = C.gather(1, order), Cv.gather(1, order), gC.gather(1, order)
        F = torch.where((X > 0).any(1, keepdim=True), X > 0, bW > l1) & Wv  # warm start, else c = b − λ1 > 0
        empty = torch.zeros(W.shape[0], 0, 0, device=q.device)
        st = _Stage(rows, q, W, Wv, X, DW, empty, empty.double(), bW, C, Cv, gC, Rc, thr, Ro, F)
        if st.wants_dual(l2, dual_above):
            st.to_dual(l2)
        else:
            st.G = torch.bmm(DW, DW.transpose(1, 2))
        return st

    def wants_dual(self, l2: float, dual_above: int) -> bool:
        """Whether the d-space form is the cheaper one (λ2 > 0 only): once a free set is larger
        than ``dual_above`` (d by default: its Gram-form Cholesky would be larger than the d × d
        one), or a working set is more than 4 × ``dual_above`` wide (its Gram block then costs more
        memory and products than the d × d matrix)."""
        if l2 <= 0 or self.dual:
            return False
        free = (self.F & self.Wv).sum(1)
        return self.W.shape[1] > 4 * dual_above or (free.numel() > 0 and int(free.max()) > dual_above)

    @property
    def dual(self) -> bool:
        return self.Mf.shape[1] > 0

    def to_dual(self, l2: float) -> None:
        """Switch to the d-space form: the embeddings in float64, the d × d matrix of the free
        set instead of the Gram block."""
        self.DW = self.DW.double()
        self.Mf = _gram_d(self.DW, self.F & self.Wv)
        self.Mf.diagonal(dim1=1, dim2=2).add_(l2)
        self.G = torch.zeros(self.W.shape[0], 0, 0, device=self.q.device)

    def keep(self, m: torch.Tensor) -> "_Stage":
        return _Stage(*(getattr(self, f.name)[m] for f in fields(self)))

    def compact(self) -> None:
        """Drop the padding columns of the working sets (members first, as wide as the widest
        row); the Gram block and the embeddings follow."""
        k = max(int(self.Wv.sum(1).max()), 1)
        if k >= self.W.shape[1] and bool(self.Wv.all()):
            return
        order = torch.sort((~self.Wv).to(torch.int8), dim=1, stable=True).indices[:, :k]
        for name in ("W", "Wv", "X", "bW", "F"):
            setattr(self, name, getattr(self, name).gather(1, order))
        self.W = torch.where(self.Wv, self.W, self.W[:, :1])
        self.DW = self.DW.gather(1, order[:, :, None].expand(-1, k, self.DW.shape[2]))
        if not self.dual:
            G = self.G.gather(1, order[:, :, None].expand(-1, k, self.G.shape[2]))
            self.G = G.gather(2, order[:, None, :].expand(-1, k, k))

    def grow(self, D: torch.Tensor, N: torch.Tensor, Nv: torch.Tensor, l2: float, dual_above: int) -> None:
        """Append documents N (b × a, valid where Nv) to the working sets, extending the Gram
        blocks by their cross products only (they join outside the free set, so the d-space
        matrix does not change)."""
        N = torch.where(Nv, N, self.W[:, :1])
        DN = D[N].to(self.DW.dtype)
        if not self.dual:
            cross = torch.bmm(self.DW, DN.transpose(1, 2))  # b × w × a
            GN = torch.bmm(DN, DN.transpose(1, 2))
            self.G = torch.cat([torch.cat([self.G, cross], 2), torch.cat([cross.transpose(1, 2), GN], 2)], 1)
        self.bW = torch.cat([self.bW, torch.bmm(DN, self.q.to(DN.dtype)[:, :, None])[:, :, 0].to(self.bW.dtype)], 1)
        self.DW = torch.cat([self.DW, DN], 1)
        self.W = torch.cat([self.W, N], 1)
        self.Wv = torch.cat([self.Wv, Nv], 1)
        self.X = torch.cat([self.X, torch.zeros(N.shape, device=self.X.device)], 1)
        self.F = torch.cat([self.F, torch.zeros_like(Nv)], 1)
        if self.wants_dual(l2, dual_above):
            self.to_dual(l2)

    def nbytes_per_row(self, extra: int = 0) -> int:
        w, d, c = self.W.shape[1] + extra, self.q.shape[1], self.C.shape[1]
        if self.dual:
            return 32 * d * d + 24 * w * d + 4 * c * d
        return 28 * w * w + 4 * w * d + 4 * c * d


class _Exact:
    """State and steps of :func:`screened_solve` (one instance per call)."""

    def __init__(self, D: torch.Tensor, Q: torch.Tensor, l1: float, l2: float, *, tol: float, gtol: float,
                 corpus: _Corpus, nrm: float, band: int, grow: int, max_add: int | None, max_inner: int,
                 memory_budget: int, core_kw: dict[str, Any], qp_iters: int = 3, qp_budget: int = 200,
                 dual_above: int | None = None, band_max: int = 8192, group: int = 64):
        self.D, self.Q, self.l1, self.l2, self.tol = D, Q, l1, l2, tol
        self.thr_ok = l1 + gtol
        self.corpus, self.nrm, self.band, self.grow_min = corpus, nrm, band, grow
        self.max_add, self.max_inner, self.budget, self.core_kw = max_add, max_inner, memory_budget, core_kw
        self.qp_iters, self.qp_budget = qp_iters, qp_budget
        self.dual_above = dual_above if dual_above is not None else D.shape[1]
        self.band_max = band_max
        self.group = group
        B = Q.shape[0]
        self.pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.parked: list[tuple[torch.Tensor, ...]] = []  # (rows, W, Wv, X, R): waiting for a guard pass
        self.failed: list[torch.Tensor] = []
        self.guards = torch.zeros(B, dtype=torch.long)
        self.fired = torch.zeros(B, dtype=torch.bool)
        self.solves = torch.zeros(B, dtype=torch.long)
        self.iters = torch.zeros(B, dtype=torch.long)
        self.by_bound = torch.zeros(B, dtype=torch.bool)
        self.fista_rows = 0
        self.dual_solves = 0

    # -- a few active-set iterations per row of the stage ---------------------------------
    def solve(self, st: _Stage) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs up to ``qp_iters`` active-set iterations per row from its free set; returns
        (converged, failed). A row that has used ``qp_budget`` iterations without converging,
        or whose F-block is not positive definite, is solved by Gram-form FISTA + polish."""
        if st.dual:
            self.dual_solves += st.rows.numel()
            res, st.Mf = active_set_qp_dual(st.DW, st.bW, self.l1, self.l2, valid=st.Wv, free=st.F, M=st.Mf,
                                            tol=self.tol, max_iter=self.qp_iters)
        else:
            res = active_set_qp(st.G, st.bW, self.l1, self.l2, valid=st.Wv, free=st.F, tol=self.tol,
                                max_iter=self.qp_iters)
        X = torch.where(st.Wv, res.x.float(), 0.0)
        rc = st.rows.cpu()
        self.iters[rc] += res.iterations.cpu()
        self.solves[rc] += 1
        st.F = res.free
        conv = res.converged.clone()
        hard = res.failed | (~conv & (self.iters[rc] >= self.qp_budget).to(conv.device))
        failed = torch.zeros_like(conv)
        if st.dual:  # (λ2 > 0: only a row out of iterations) solved on the full corpus instead
            failed = hard
        elif bool(hard.any()):  # not positive definite (λ2 = 0) or slow: FISTA + polish
            bad = hard.nonzero()[:, 0]
            self.fista_rows += bad.numel()
            op = _GramOp(st.G[bad].clone(), st.bW[bad], st.Wv[bad], self.l1, self.l2)
            r = _fista_core(op, self.l1, self.l2, X0=st.X[bad].clamp_min(0.0), **self.core_kw)
            X[bad] = torch.where(st.Wv[bad], r.X, 0.0)
            conv[bad] = r.converged
            failed[bad] = ~r.converged
            st.F[bad] = X[bad] > 0
            self.iters[rc[bad.cpu()]] += r.iters.cpu()
        st.X = X
        return conv, failed

    # -- the lock-step loop: solve, check, grow ----------------------------------------------
    def run(self, st: _Stage) -> None:
        D, thr_ok, nrm = self.D, self.thr_ok, self.nrm
        for it in range(self.max_inner):
            b = st.rows.numel()
            if b == 0:
                return
            if b > self.group or (b > 1 and b * st.nbytes_per_row(extra=max(self.grow_min, 16)) > self.budget):
                # groups of queries with working sets of similar width, so little is padding
                order = torch.sort(st.Wv.sum(1), stable=True).indices
                g = min(self.group, max(1, b // 2)) if b <= self.group else self.group
                for s in range(0, b, g):
                    self.run(st.keep(order[s:s + g]))
                return
            if it:
                st.compact()
                if st.wants_dual(self.l2, self.dual_above):  # a free set grew past d
                    st.to_dual(self.l2)
            conv, failed = self.solve(st)
            if bool(failed.any()):
                self.failed.append(st.rows[failed])
                st, conv = st.keep(~failed), conv[~failed]
                if st.rows.numel() == 0:
                    return
            # the residual (of the clamped iterate where the solve has not converged yet)
            R = st.q - torch.bmm(st.X.clamp_min(0.0).to(st.DW.dtype)[:, None, :], st.DW)[:, 0, :].float()
            # exact values on the check set where the bound from its reference does not suffice;
            # a row where that is at least half its members re-evaluates them all (new reference)
            moved = nrm * torch.linalg.vector_norm(R - st.Rc, dim=1)
            need = st.Cv & (st.gC + moved[:, None] > thr_ok)
            renew = 2 * need.sum(1) >= st.Cv.sum(1)
            sel = torch.where(renew[:, None], st.Cv, need)
            gv = torch.full(st.gC.shape, -math.inf, device=R.device)
            ri, ci = sel.nonzero(as_tuple=True)
            if ri.numel():  # only the selected (row, member) pairs: no padding is gathered
                gv[ri, ci] = _pair_dots(D, st.C[ri, ci], R, ri)
            if bool(renew.any()):
                st.gC = torch.where(renew[:, None], gv, st.gC)
                st.Rc = torch.where(renew[:, None], R, st.Rc)
            viol = sel & (gv > thr_ok)
            hv = viol.any(1)
            far = st.thr + nrm * torch.linalg.vector_norm(R - st.Ro, dim=1)
            cert = conv & ~hv & (far <= thr_ok)
            if bool(cert.any()):
                self.by_bound[st.rows[cert].cpu()] = True
                self.pieces.append((st.rows[cert], *_sparsify(st.X[cert], st.W[cert])))
            last = it == self.max_inner - 1
            park = conv & ~hv & ~cert
            if last:
                park = conv & ~cert  # out of inner rounds: the guard decides
                if bool((~conv).any()):
                    self.failed.append(st.rows[~conv])
            if bool(park.any()):
                self.parked.append((st.rows[park], st.W[park], st.Wv[park], st.X[park], R[park]))
            go = hv | ~conv
            if last or not bool(go.any()):
                return
            st = st.keep(go)
            viol, gv, hv = viol[go], gv[go], hv[go]
            if bool(hv.any()):
                N, Nv, pos = self._additions(viol, gv, st.C, st.X)
                st.Cv = st.Cv.clone()
                st.Cv.scatter_(1, pos, st.Cv.gather(1, pos) & ~Nv)
                st.grow(D, N, Nv, self.l2, self.dual_above)

    def _additions(self, viol: torch.Tensor, vals: torch.Tensor, cand: torch.Tensor,
                   X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The violators to add per row, largest value first: at most max(grow, current support)
        (and ``max_add``) per row. Returns (documents, valid, positions in ``cand``)."""
        nv = viol.sum(1)
        cap = torch.clamp((X > 0).sum(1), min=self.grow_min)
        if self.max_add is not None:
            cap = cap.clamp(max=self.max_add)
        take = torch.minimum(nv, cap)
        a = max(int(take.max()), 1)
        tv, pos = torch.topk(torch.where(viol, vals, -math.inf), min(a, vals.shape[1]), dim=1)
        Nv = (torch.arange(pos.shape[1], device=pos.device)[None, :] < take[:, None]) & (tv > self.thr_ok)
        return cand.gather(1, pos), Nv, pos

    # -- a guard pass for every parked row ---------------------------------------------------
    def guard_round(self, last: bool) -> None:
        parked, self.parked = self.parked, []
        w = max(p[1].shape[1] for p in parked)
        dev = self.D.device

        def pad(t: torch.Tensor, fill: Any) -> torch.Tensor:
            extra = w - t.shape[1]
            if extra == 0:
                return t
            return torch.cat([t, torch.full((t.shape[0], extra), fill, dtype=t.dtype, device=dev)], 1)

        rows = torch.cat([p[0] for p in parked])
        Wv = torch.cat([pad(p[2], False) for p in parked])
        W = torch.cat([pad(p[1], 0) for p in parked])
        W = torch.where(Wv, W, W[:, :1])
        X = torch.cat([pad(p[3], 0.0) for p in parked])
        R = torch.cat([p[4] for p in parked])
        rc = rows.cpu()
        first = self.guards[rc] == 0
        self.guards[rc] += 1
        mx, bv, bi, last_v = self.corpus.guard(R, W, self.thr_ok, self.band, self.band_max)
        bad = mx > self.thr_ok
        self.fired[rc[first & bad.cpu()]] = True
        if bool((~bad).any()):
            self.pieces.append((rows[~bad], *_sparsify(X[~bad], W[~bad])))
        if not bool(bad.any()):
            return
        if last:  # out of guard rounds: these are solved on the full corpus
            self.failed.append(rows[bad])
            return
        rows, W, Wv, X, R, bv, bi = rows[bad], W[bad], Wv[bad], X[bad], R[bad], bv[bad], bi[bad]
        thr = last_v[bad]  # each row's own band end (bands of different chunks differ in width)
        viol = bv > self.thr_ok
        N, Nv, pos = self._additions(viol, bv, bi, X)
        Cv = torch.isfinite(bv)
        Cv.scatter_(1, pos, Cv.gather(1, pos) & ~Nv)
        W2 = torch.cat([W, torch.where(Nv, N, W[:, :1])], 1)
        Wv2 = torch.cat([Wv, Nv], 1)
        X2 = torch.cat([X, torch.zeros(N.shape, device=dev)], 1)
        w2, d = W2.shape[1] + self.grow_min, self.D.shape[1]
        per = (32 * d * d + 24 * w2 * d if self.l2 > 0 and w2 > 4 * self.dual_above else 28 * w2 * w2 + 4 * w2 * d)
        per += 4 * bi.shape[1] * d
        cs = max(1, min(rows.numel(), self.budget // per))
        for s in range(0, rows.numel(), cs):
            sl = slice(s, s + cs)
            st = _Stage.build(self.D, rows[sl], self.Q[rows[sl]], W2[sl], Wv2[sl], X2[sl], bi[sl], Cv[sl],
                              bv[sl], R[sl], thr[sl], R[sl], self.l1, self.l2, self.dual_above)
            self.run(st)


def _pair_dots(D: torch.Tensor, docs: torch.Tensor, R: torch.Tensor, rows: torch.Tensor,
               block: int = 1 << 16) -> torch.Tensor:
    """``D[docs[i]] · R[rows[i]]`` for every i (``rows`` non-decreasing, as ``nonzero`` lists
    them): each row's documents as one matrix-vector product, so neither the gathered rows of R
    nor their elementwise products are written out; blocks of at most ``block`` pairs."""
    out = torch.empty(docs.shape[0], dtype=R.dtype, device=R.device)
    counts = torch.bincount(rows, minlength=R.shape[0]).tolist()
    start = 0
    for r, c in enumerate(counts):
        for s in range(start, start + c, block):
            e = min(s + block, start + c)
            torch.mv(D[docs[s:e]].to(R.dtype), R[r], out=out[s:e])
        start += c
    return out


def _default_pool(n: int, M: int) -> int:
    return min(n, max(M, min(1024, n // 1000)))


def _default_band(n: int) -> int:
    return min(n, max(32, min(4096, n // 200)))


def screened_solve(D: Any, Q: Any, l1: float, l2: float, *, candidates: int = 32, pool: int | None = None,
                   band: int | None = None, band_max: int = 8192, cand_idx: Any = None, cand_bound: Any = None, dense_k: int = 0,
                   tol: float = 1e-4, max_iters: int = 20000, check_every: int = 10, max_rounds: int = 8,
                   max_add: int | None = None, grow: int = 16, guard_tol: float | None = None,
                   chunk_size: int = 128, L_full: float | None = None, polish: bool = True,
                   cpu_blas: str = "numpy", cpu_topk: str = "faiss", max_inner: int = 50, memory_budget: int = 512 << 20,
                   row_norm: float | None = None, qp_iters: int = 3, dual_above: int | None = None) -> Solution:
    """Exact solve (KKT residual < ``tol`` over the whole corpus) by working sets grown from the
KKT violators, an exact active-set solve on them, and a whole-corpus certificate (module
docstring, "Exact solve").

* ``candidates`` (M): the dense top-M start the working set. ``pool`` (P, default n/1000 within
  [M, 1024]): the dense top-P are checked exactly before any guard pass, and the P-th dense
  score bounds every other document. ``band`` (K, default n/200 within [32, 4096]) and
  ``band_max``: after a guard pass a query with v violators keeps the top min(v + K, band_max)
  values outside its working set for exact checks; the last of them bounds the rest.
* ``cand_idx``: candidates given instead of the dense pass (at least M per query; the first M
  start the working set, the others are checked); ``cand_bound`` (one per query), when given,
  must bound ``D_j·q`` for every document not in ``cand_idx`` (e.g. the last score of an exact
  faiss top-m), else the first certificate needs a guard pass.
* ``dense_k``: also return the dense top-k of the dense pass in ``Solution.dense_idx`` /
  ``dense_scores`` (score descending), for a ranking's fill.
* ``grow`` / ``max_add``: the violators added per query and round are at most max(grow, support
  size) (and at most ``max_add``). ``max_rounds``: guard passes before a query falls back to
  full-corpus FISTA (:func:`solve_full`, tol mode; ``L_full`` is its step constant, computed when
  None). ``max_inner``: working-set rounds between passes. ``qp_iters``: active-set iterations per
  round (a round's solve resumes from the free set it reached). ``dual_above``: free-set size
  above which the solve works in d dimensions (default d; also once a working set is wider than
  4 × ``dual_above``; λ2 > 0 only). With λ2 = 0 a working
  set whose free block is singular is solved by Gram-form FISTA + polish instead
  (``max_iters``, ``check_every``, ``polish``).
* ``guard_tol``: the tolerance of the off-working-set conditions (default ``tol``).
* ``chunk_size``: queries per dense/guard product; ``memory_budget``: bytes of per-query solver
  state per batch of queries solved together (a batch whose working sets outgrow it is split).
* ``cpu_blas``: on CPU the guard's corpus products go through numpy's BLAS (``"numpy"``, OpenBLAS
  in the numpy wheels) or torch's (``"torch"``); same float32 inner products. (On the 2-core AMD
  EPYC machine this was developed on, torch's MKL sgemm took ~1.5× as long as OpenBLAS for this
  shape.) ``cpu_topk``: the dense top-P on CPU by faiss (``"faiss"``, its exhaustive search) or
  by that product and a top-k (``"blas"``); the same documents up to ties.
* ``row_norm``: the largest document norm (computed when None), used by the bounds.

``stats``: support_mean/max, corpus_passes (per query, the dense pass included), guard_fired
(queries whose first guard pass found violators), certified_by_bound (queries certified from a
pass's bound without a further pass), rounds_max/rounds_hist (guard passes per query; the last bin
counts fallbacks), fallback, solves_mean/max (working-set rounds per query), iterations_mean/max
(active-set iterations, plus FISTA iterations where used), fista_rows (query solves done by the
Gram-form FISTA instead), dspace_solves (query solves done in d dimensions).
"""
    D = as_tensor(D)
    Q = as_tensor(Q, D.device)
    B, n = Q.shape[0], D.shape[0]
    dev = D.device
    M = min(candidates, n)
    P = min(n, max(M, pool if pool is not None else _default_pool(n, M)))
    K = band if band is not None else _default_band(n)
    gtol = tol if guard_tol is None else guard_tol
    corpus = _Corpus(D, min(chunk_size, max(B, 1)), cpu_blas, cpu_topk)
    if row_norm is None:
        row_norm = max((float(torch.linalg.vector_norm(D[s:s + 65536], dim=1).max()) for s in range(0, n, 65536)),
                       default=0.0)
    core_kw = dict(iters=None, tol=tol, max_iters=max_iters, check_every=check_every, polish=polish,
                   polish_cap=256, restart=True)
    ex = _Exact(D, Q, l1, l2, tol=tol, gtol=gtol, corpus=corpus, nrm=row_norm, band=K, grow=grow,
                max_add=max_add, max_inner=max_inner, memory_budget=memory_budget, core_kw=core_kw,
                qp_iters=qp_iters, dual_above=dual_above, band_max=band_max)
    if cand_idx is not None:
        cand_all = cand_idx if isinstance(cand_idx, torch.Tensor) else torch.as_tensor(np.asarray(cand_idx))
        cand_all = cand_all.to(dev, torch.long)
        if cand_all.ndim != 2 or cand_all.shape[0] != B or cand_all.shape[1] < M or bool((cand_all < 0).any()):
            raise ValueError(f"cand_idx must hold at least {M} valid document indices per query")
        bound_all = None if cand_bound is None else as_tensor(cand_bound, dev).reshape(B)
    dense: list[tuple[torch.Tensor, torch.Tensor]] = []
    with _small_ops(dev):
        # the first pass, chunk by chunk: dense top-P (or the given candidates); then the
        # working-set solves on them, all queries together (split by memory); what the bound
        # cannot certify waits for a guard pass
        firsts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        step = B if corpus.faiss else chunk_size  # faiss blocks the queries itself
        for s in range(0, B, max(step, 1)):
            q = Q[s:s + step]
            if cand_idx is None:
                sv, si = corpus.top(q, max(P, dense_k))
                if dense_k:
                    dense.append((si[:, :dense_k], sv[:, :dense_k]))
                sv, si = sv[:, :P], si[:, :P]
                thr = sv[:, -1].clone() if P < n else torch.full((q.shape[0],), -math.inf, device=dev)
            else:
                si = cand_all[s:s + step]
                sv = torch.bmm(D[si], q[:, :, None])[:, :, 0]
                thr = (bound_all[s:s + step].clone() if bound_all is not None
                       else torch.full((q.shape[0],), math.inf, device=dev))
            firsts.append((si, sv, thr))
        if B:
            si = torch.cat([f[0] for f in firsts])
            sv = torch.cat([f[1] for f in firsts])
            thr = torch.cat([f[2] for f in firsts])
            W = si[:, :M]
            st = _Stage.build(D, torch.arange(B, device=dev), Q, W, torch.ones_like(W, dtype=torch.bool),
                              torch.zeros(W.shape, device=dev), si[:, M:],
                              torch.ones(si[:, M:].shape, dtype=torch.bool, device=dev), sv[:, M:], Q, thr, Q,
                              l1, l2, ex.dual_above)
            ex.run(st)
        for rnd in range(max_rounds + 1):
            if not ex.parked:
                break
            ex.guard_round(last=rnd == max_rounds)
    fallback = torch.cat(ex.failed) if ex.failed else torch.zeros(0, dtype=torch.long, device=dev)
    if fallback.numel():
        full = solve_full(D, Q[fallback], l1, l2, tol=tol, max_iters=max_iters, check_every=check_every, L=L_full)
        ex.pieces.append((fallback, full.indices, full.values))
    Kw = max([p[1].shape[1] for p in ex.pieces], default=0)
    idx = torch.full((B, Kw), -1, dtype=torch.long, device=dev)
    val = torch.zeros(B, Kw, dtype=torch.float32, device=dev)
    for rws, i, v in ex.pieces:
        idx[rws, :i.shape[1]] = i
        val[rws, :v.shape[1]] = v
    sol = Solution(idx, val, n)
    if dense:
        sol.dense_idx = torch.cat([d[0] for d in dense])
        sol.dense_scores = torch.cat([d[1] for d in dense])
    sizes = sol.support_sizes.float()
    rounds = ex.guards.clone()
    rounds[fallback.cpu()] = max_rounds + 1
    nfb = int(fallback.numel())
    sol.stats = {
        "mode": "tol",
        "queries": B,
        "candidates": M,
        "pool": P,
        "band": K,
        "support_mean": float(sizes.mean()) if B else 0.0,
        "support_max": int(sizes.max()) if B else 0,
        "corpus_passes": corpus.rows / B if B else 0.0,
        "guard_fired": int(ex.fired.sum()),
        "certified_by_bound": int(ex.by_bound.sum()),
        "rounds_max": int(rounds.max()) if B else 0,
        "rounds_hist": torch.bincount(rounds, minlength=max_rounds + 2).tolist() if B else [],
        "fallback": nfb,
        "solves_mean": float(ex.solves.float().mean()) if B else 0.0,
        "solves_max": int(ex.solves.max()) if B else 0,
        "iterations_mean": float(ex.iters.float().mean()) if B else 0.0,
        "iterations_max": int(ex.iters.max()) if B else 0,
        "fista_rows": ex.fista_rows,
        "dspace_solves": ex.dual_solves,
    }
    return sol
