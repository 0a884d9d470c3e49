"""The exact solver of the problem restricted to a working set: block principal pivoting
(docs/methods/nnn.md#the-exact-solve, step 2), in Gram form (:func:`active_set_qp`) and in d
dimensions (:func:`active_set_qp_dual`, Woodbury)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

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

    Parameters
    ----------
    G : torch.Tensor, B × w × w
        The working set's Gram block.
    b : torch.Tensor, B × w
        Its dense scores ``D_j·q``.
    l1, l2 : float
        λ1 and λ2.
    valid : torch.Tensor, B × w (bool), optional
        Masks padded columns.
    free : torch.Tensor, B × w (bool), optional
        The starting free set.
    tol : float
        The KKT tolerance (a fixed index is infeasible below −tol/4).
    max_iter, backup : int
        The iteration cap; exchanges without progress before Murty's rule.

    Returns
    -------
    _QPResult
        Per row x (float64), converged, failed (the F-block was not positive definite: λ2 = 0
        with dependent documents), iterations, and the free set reached (a row stopped by
        ``max_iter`` can resume from it; its x is the last F-block solution).
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
        y = torch.bmm(x[:, None, :], H)[:, 0, :] - c  # xᵀH = (Hx)ᵀ (H symmetric): a row times a matrix is
        # several times faster in torch's batched product than a matrix times a column
        infeas = valid & torch.where(F, x < 0, y < -ytol)
        nV = infeas.sum(1)
        F, ninf, p = _exchange(F, infeas, nV, ninf, p, backup)
        fin = (nV == 0) | ~ok | (it == max_iter)
        if bool(fin.any()):
            r = act[fin]
            res.settle(r, fin, x, F, nV, ok, it)
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

    def settle(self, rows: torch.Tensor, fin: torch.Tensor, x: torch.Tensor, F: torch.Tensor, nV: torch.Tensor,
               ok: torch.Tensor, it: int) -> None:
        """Record the problems of the batch that finished this iteration (``fin``) at their ``rows``:
        solution, free set, iteration count, and whether they converged (no infeasible index, a
        finite factorisation) or failed (the factorisation did not)."""
        self.x[rows] = x[fin]
        self.converged[rows] = (nV == 0)[fin] & ok[fin]
        self.failed[rows] = ~ok[fin]
        self.iterations[rows] = it
        self.free[rows] = F[fin]


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

    Parameters
    ----------
    A : torch.Tensor, B × w × d
        The working set's embeddings.
    b : torch.Tensor, B × w
        Their dense scores ``D_j·q``.
    l1, l2 : float
        λ1 and λ2 (> 0).
    valid, free : torch.Tensor, B × w (bool)
        Padding mask and starting free set.
    M : torch.Tensor, B × d × d, optional
        ``λ2 I + A_Fᵀ A_F`` for the starting free set (computed when None).
    tol, max_iter, backup
        As for :func:`active_set_qp`.

    Returns
    -------
    result : _QPResult
        As for :func:`active_set_qp`.
    M : torch.Tensor, B × d × d
        The matrix for the free set each row reached.
    """
    Bn, w, d = A.shape
    dev = A.device
    A = A.double()
    c = torch.where(valid, b.double() - l1, -1.0)
    F = free & valid
    if M is None:
        M = _gram_d(A, F)
        M.diagonal(dim1=1, dim2=2).add_(l2)
    t = torch.bmm(torch.where(F, c, 0.0)[:, None, :], A).transpose(1, 2)  # A_Fᵀ c_F, b × d × 1
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
        Az = torch.bmm(z.transpose(1, 2), A.transpose(1, 2))[:, 0, :]  # (A z)ᵀ as a row: see active_set_qp
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
            t = t + torch.bmm(c.gather(1, pos)[:, None, :], Ss).transpose(1, 2)
        F = Fn
        fin = (nV == 0) | ~ok | (it == max_iter)
        if bool(fin.any()):
            r = act[fin]
            res.settle(r, fin, x, F, nV, ok, it)
            M_out[r] = M[fin]
            keep = ~fin
            if not bool(keep.any()):
                break
            act, F, A, c, valid, ninf, p, M, t = (act[keep], F[keep], A[keep], c[keep], valid[keep], ninf[keep],
                                                  p[keep], M[keep], t[keep])
    return res, M_out
