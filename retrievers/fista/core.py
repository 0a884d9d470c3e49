"""FISTA (docs/methods/nnn.md#the-iteration, docs/methods/nnn.md#modes): the two forms of the
operator (full corpus, Gram block of a candidate set), the support polish, the accelerated loop,
and the public full-corpus solvers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .problem import (_BIG, _SMALL_WORK, Solution, _all_threads, _cat_padded, _kkt_from_grad, _small_ops, _sparsify,
                      as_tensor, lipschitz)

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
    """Full-corpus FISTA for one block of queries.

    ``iters=T``: exactly T plain FISTA steps from 0 (paper protocol). ``tol=ε``: until the KKT
    residual is < ε (polish + restart, see docs/methods/nnn.md#modes) or ``max_iters``. Memory is
    about four B × n float32 buffers; :func:`solve_full` chunks the queries for large corpora.

    Parameters
    ----------
    D, Q : array-like
        The documents (n × d) and the queries (B × d), one per row.
    l1, l2 : float
        λ1 and λ2.
    iters, tol : int or None, float or None
        Exactly one: T iterations, or the KKT tolerance ε.
    max_iters, check_every : int
        Tol mode: the iteration cap and how often the residual is checked (and supports polished).
    L : float, optional
        The step constant (:func:`lipschitz` when None).
    X0 : torch.Tensor, B × n, optional
        Warm start (default 0).
    polish, polish_cap : bool, int
        Whether stable supports of at most ``polish_cap`` documents are solved exactly.
    restart : bool
        Adaptive restart (tol mode only).
    device : str or torch.device, optional
        Where to compute (default: where D is).

    Returns
    -------
    X : torch.Tensor, B × n
        The dense solution.
    stats : dict
        ``iterations``, ``converged``, ``residual`` (per query) and ``L``.
    """
    _check_mode(iters, tol)
    D = as_tensor(D, device)
    Q = as_tensor(Q, D.device)
    if L is None:
        L = lipschitz(D, l2)
    small = Q.shape[0] * D.shape[0] * D.shape[1] < _SMALL_WORK
    with _small_ops(D.device) if small else _all_threads(D.device):
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

    Step 1/L per query with L an upper bound on λ_max(G) + λ2.

    Parameters
    ----------
    G : torch.Tensor, B × M × M
        The candidates' block of D Dᵀ.
    b : torch.Tensor, B × M
        Their dense scores ``D_j·q``.
    l1, l2 : float
        λ1 and λ2.
    valid : torch.Tensor, B × M (bool), optional
        Masks padded candidates (kept at 0).
    iters, tol, max_iters, check_every, X0, polish, polish_cap, restart
        As for :func:`fista`.

    Returns
    -------
    X : torch.Tensor, B × M
        The solution.
    stats : dict
        ``iterations``, ``converged``, ``residual`` (per row).
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
    """Full-corpus FISTA over all queries in chunks (≈ ``memory_budget`` bytes of B × n buffers).

    Parameters
    ----------
    D, Q, l1, l2, iters, tol, max_iters, check_every, L, polish, restart
        As for :func:`fista`.
    memory_budget : int
        Bytes of B × n buffers per chunk of queries.
    chunk_size : int, optional
        Queries per chunk (overrides ``memory_budget``).

    Returns
    -------
    Solution
        The support of the final iterate; ``stats``: mode, queries, iterations_mean/max,
        converged, kkt_max, support_mean, L.
    """
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


def dense_candidates(D: Any, Q: Any, M: int, *, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-M documents by inner product per query, score descending. Which of several documents
    tied at the cut-off is kept is up to ``torch.topk``; the screened solve does not depend on it
    (the guard checks every excluded document).

    Parameters
    ----------
    D, Q : array-like
        The documents (n × d) and the queries (B × d), one per row.
    M : int
        How many (at most n).
    chunk : int
        Queries per product.

    Returns
    -------
    idx : torch.Tensor, B × M
        Document indices.
    scores : torch.Tensor, B × M
        Their inner products.
    """
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
