"""The exact solve (docs/methods/nnn.md#the-exact-solve): working sets grown from the KKT
violators, the active-set solves on them, the check set, the guard passes and the whole-corpus
certificate; :class:`ScreeningOptions` holds the knobs of :func:`screened_solve`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from .active_set import _gram_d, active_set_qp, active_set_qp_dual
from .core import _fista_core, _GramOp, solve_full
from .newton import HandOff, NewtonStats, newton_rounds
from .passes import _Corpus
from .problem import Solution, _one_thread, _sparsify, as_tensor

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
        bW = torch.bmm(q[:, None, :], DW.transpose(1, 2))[:, 0, :]  # as a row (faster in bmm)
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
        self.bW = torch.cat([self.bW, torch.bmm(self.q.to(DN.dtype)[:, None, :], DN.transpose(1, 2))[:, 0, :].to(self.bW.dtype)], 1)
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
                 dual_above: int | None = None, band_max: int = 8192, group: int = 64,
                 newton_above: int | None = None):
        self.D, self.Q, self.l1, self.l2, self.tol = D, Q, l1, l2, tol
        self.thr_ok = l1 + gtol
        self.corpus, self.nrm, self.band, self.grow_min = corpus, nrm, band, grow
        self.max_add, self.max_inner, self.budget, self.core_kw = max_add, max_inner, memory_budget, core_kw
        self.qp_iters, self.qp_budget = qp_iters, qp_budget
        self.dual_above = dual_above if dual_above is not None else D.shape[1]
        # the Newton half (λ2 > 0, CPU): queries whose free sets outgrow `newton_above` go there, and
        # the active-set solve never switches to its own d-space form
        self.newton_above = newton_above if l2 > 0 and D.device.type == "cpu" else None
        if self.newton_above is not None:
            self.dual_above = 1 << 40
        self.handoff: list[HandOff] = []
        self.newton_stats = NewtonStats()
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
            if self.newton_above is not None:
                big = (((st.F & st.Wv).sum(1) > self.newton_above) | (st.Wv.sum(1) > 4 * self.newton_above))
                if bool(big.any()):
                    self._hand_off(st.keep(big))
                    st = st.keep(~big)
                    if st.rows.numel() == 0:
                        return
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

    def _hand_off(self, st: _Stage) -> None:
        """Queue the stage's rows for the Newton half (:mod:`.newton`) with their residuals, the
        documents they were solving on (working and check set), their supports and bounds."""
        X = torch.where(st.Wv, st.X.clamp_min(0.0), 0.0)
        R = st.q.double() - torch.bmm(X.double()[:, None, :], st.DW.double())[:, 0, :]
        for k in range(st.rows.numel()):
            W = torch.cat([st.W[k][st.Wv[k]], st.C[k][st.Cv[k]]])
            held = st.W[k][(X[k] > 0) & st.Wv[k]]
            self.handoff.append(HandOff(int(st.rows[k]), R[k].numpy(), W.numpy(), held.numpy(), float(st.thr[k]),
                                        st.Ro[k].double().numpy()))

    def _hand_off_band(self, rows: torch.Tensor, W: torch.Tensor, Wv: torch.Tensor, X: torch.Tensor, R: torch.Tensor,
                       bv: torch.Tensor, bi: torch.Tensor, thr: torch.Tensor) -> None:
        """Queue rows of a guard pass for the Newton half: their residuals R (the point of the
        pass), working sets, supports, and the pass's band (its values at R: the violators and the
        documents below them) with its last value, which bounds every other document."""
        Rd = R.double()
        for k in range(rows.numel()):
            m = int(torch.isfinite(bv[k]).sum())
            t = float(thr[k])
            self.handoff.append(HandOff(int(rows[k]), Rd[k].numpy(), W[k][Wv[k]].numpy(),
                                        W[k][(X[k] > 0) & Wv[k]].numpy(), t, Rd[k].numpy(),
                                        bi[k][:m].numpy(), bv[k][:m].double().numpy() - self.l1))

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
        if self.newton_above is not None:  # support and violators beyond newton_above: Newton's from here
            big = viol.sum(1) + ((X > 0) & Wv).sum(1) > self.newton_above
            if bool(big.any()):
                self._hand_off_band(rows[big], W[big], Wv[big], X[big], R[big], bv[big], bi[big], thr[big])
                keep = ~big
                rows, W, Wv, X, R, bv, bi, thr, viol = (t[keep] for t in (rows, W, Wv, X, R, bv, bi, thr, viol))
                if rows.numel() == 0:
                    return
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


@dataclass(frozen=True)
class ScreeningOptions:
    """The knobs of :func:`screened_solve`. None of them changes the answer (the full-corpus
    minimiser to ``tol``); they move cost between the corpus passes, the checks and the solves.

    Attributes
    ----------
    candidates : int
        M: the dense top-M start the working set.
    pool : int or None
        P (default n/1000 within [M, 1024]): the dense top-P are checked exactly before any guard
        pass, and the P-th dense score bounds every other document.
    band, band_max : int or None, int
        K (default n/200 within [32, 4096]): after a guard pass a query with v violators keeps the
        top min(v + K, ``band_max``) values outside its working set for exact checks; the last of
        them bounds the rest.
    tol : float
        ε: the KKT tolerance of the answer.
    guard_tol : float or None
        The tolerance of the off-working-set conditions (default ``tol``).
    max_iters, check_every, polish : int, int, bool
        Gram-form FISTA (λ2 = 0 with a singular free block) and the full-corpus fallback: the
        iteration cap, how often the KKT residual is checked, whether supports are polished.
    max_rounds : int
        Guard passes before a query falls back to full-corpus FISTA (:func:`solve_full`).
    max_add, grow : int or None, int
        The violators added per query and round are at most max(``grow``, support size) (and at
        most ``max_add``).
    max_inner : int
        Working-set rounds between corpus passes.
    qp_iters : int
        Active-set iterations per round (a round's solve resumes from the free set it reached).
    newton_above : int or None
        λ2 > 0 on CPU: a query whose free set outgrows this (default 64, or d/2 when smaller),
        whose working set is more than 4 × this wide, or whose violators at a guard pass and
        support together outnumber it, is finished by the Newton half
        (:mod:`retrievers.fista.newton`); 0 hands over every query that reaches a working-set
        solve, and ``newton=False`` keeps them all in the active-set solve.
    newton, newton_widen, newton_band, newton_rough : bool, float, int, int
        Whether the Newton half is used; after one of its passes at r its candidates are the
        active documents, at most ``newton_band`` more with ``D_j·r > λ1 − newton_widen·‖∇f(r)‖``,
        and its support; Newton steps per round while violators still join its working set.
    dual_above : int or None
        Free-set size above which the solve works in d dimensions (default d; also once a working
        set is wider than 4 × ``dual_above``; λ2 > 0 only).
    chunk_size : int
        Queries per dense/guard product.
    memory_budget : int
        Bytes of per-query solver state per batch of queries solved together (a batch whose
        working sets outgrow it is split).
    cpu_blas : {"numpy", "torch"}
        On CPU the guard's corpus products go through numpy's BLAS (OpenBLAS in the numpy wheels)
        or torch's; same float32 inner products. (On the 2-core AMD EPYC machine this was
        developed on, torch's MKL sgemm took ~1.5× as long as OpenBLAS for this shape.)
    cpu_topk : {"faiss", "blas"}
        The dense top-P on CPU by faiss (its exhaustive search) or by that product and a top-k;
        the same documents up to ties.
    """

    candidates: int = 32
    pool: int | None = None
    band: int | None = None
    band_max: int = 8192
    tol: float = 1e-4
    guard_tol: float | None = None
    max_iters: int = 20000
    check_every: int = 10
    polish: bool = True
    max_rounds: int = 8
    max_add: int | None = None
    grow: int = 16
    max_inner: int = 50
    qp_iters: int = 3
    newton: bool = True
    newton_above: int | None = None
    newton_widen: float = 0.3
    newton_band: int = 1024
    newton_rough: int = 1
    dual_above: int | None = None
    chunk_size: int = 128
    memory_budget: int = 512 << 20
    cpu_blas: str = "numpy"
    cpu_topk: str = "faiss"


def screened_solve(D: Any, Q: Any, l1: float, l2: float, options: ScreeningOptions | None = None, *,
                   cand_idx: Any = None, cand_bound: Any = None, dense_k: int = 0, L_full: float | None = None,
                   row_norm: float | None = None, **knobs: Any) -> Solution:
    """Exact solve (KKT residual < ``tol`` over the whole corpus) by working sets grown from the
    KKT violators, an exact active-set solve on them, and a whole-corpus certificate
    (docs/methods/nnn.md#the-exact-solve).

    Parameters
    ----------
    D, Q : array-like
        The documents (n × d) and the queries (B × d), one per row.
    l1, l2 : float
        λ1 and λ2 of the objective.
    options : ScreeningOptions, optional
        The knobs (default ``ScreeningOptions()``).
    cand_idx : array-like, B × m, optional
        Candidates given instead of the dense pass (m ≥ M per query; the first M start the working
        set, the others are checked).
    cand_bound : array-like, B, optional
        With ``cand_idx``: a bound on ``D_j·q`` for every document not in ``cand_idx`` (e.g. the
        last score of an exact faiss top-m), else the first certificate needs a guard pass.
    dense_k : int
        Also return the dense top-k of the dense pass in ``Solution.dense_idx`` /
        ``dense_scores`` (score descending), for a ranking's fill.
    L_full : float, optional
        The step constant of the full-corpus fallback (computed when needed and None).
    row_norm : float, optional
        The largest document norm, used by the bounds (computed when None).
    **knobs
        Fields of :class:`ScreeningOptions` given as keywords (``candidates=8, tol=1e-6``); they
        override ``options``. An unknown name raises ``TypeError``.

    Returns
    -------
    Solution
        The per-query supports and coefficients. ``stats``: support_mean/max, corpus_passes (per
        query, the dense pass included), guard_fired (queries whose first guard pass found
        violators), certified_by_bound (queries certified from a pass's bound without a further
        pass), rounds_max/rounds_hist (guard passes per query; the last bin counts fallbacks),
        fallback, solves_mean/max (working-set rounds per query), iterations_mean/max
        (active-set iterations, plus FISTA iterations where used), fista_rows (query solves done
        by the Gram-form FISTA instead), dspace_solves (query solves done in d dimensions),
        newton_* (:class:`retrievers.fista.newton.NewtonStats`: queries handed over, of them by a
        guard pass, Newton steps, factorisations, conjugate-gradient steps, rows through M, queries
        certified by a bound or by a pass, candidate rows evaluated, mean working set).
    """
    opt = replace(options or ScreeningOptions(), **knobs) if knobs else (options or ScreeningOptions())
    D = as_tensor(D)
    Q = as_tensor(Q, D.device)
    B, n = Q.shape[0], D.shape[0]
    dev = D.device
    M = min(opt.candidates, n)
    P = min(n, max(M, opt.pool if opt.pool is not None else _default_pool(n, M)))
    K = opt.band if opt.band is not None else _default_band(n)
    corpus = _Corpus(D, min(opt.chunk_size, max(B, 1)), opt.cpu_blas, opt.cpu_topk)
    if row_norm is None:
        row_norm = max((float(torch.linalg.vector_norm(D[s:s + 65536], dim=1).max()) for s in range(0, n, 65536)),
                       default=0.0)
    core_kw = dict(iters=None, tol=opt.tol, max_iters=opt.max_iters, check_every=opt.check_every, polish=opt.polish,
                   polish_cap=256, restart=True)
    ex = _Exact(D, Q, l1, l2, tol=opt.tol, gtol=opt.tol if opt.guard_tol is None else opt.guard_tol, corpus=corpus,
                nrm=row_norm, band=K, grow=opt.grow, max_add=opt.max_add, max_inner=opt.max_inner,
                memory_budget=opt.memory_budget, core_kw=core_kw, qp_iters=opt.qp_iters, dual_above=opt.dual_above,
                band_max=opt.band_max,
                newton_above=None if not opt.newton else (opt.newton_above if opt.newton_above is not None
                                                           else max(1, min(64, D.shape[1] // 2))))
    given = None if cand_idx is None else _given_candidates(cand_idx, cand_bound, B, M, dev)
    with _one_thread(dev):
        # the first pass, chunk by chunk: dense top-P (or the given candidates); then the
        # working-set solves on them, all queries together (split by memory); what the bound
        # cannot certify waits for a guard pass
        firsts, dense = _first_pass(D, Q, corpus, given, M, P, dense_k, opt.chunk_size)
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
        for rnd in range(opt.max_rounds + 1):
            if not ex.parked:
                break
            ex.guard_round(last=rnd == opt.max_rounds)
        if ex.handoff:
            pieces, left = newton_rounds(D, Q, ex.handoff, l1, l2, tol=opt.tol,
                                         gtol=opt.tol if opt.guard_tol is None else opt.guard_tol, nrm=row_norm,
                                         corpus=corpus, max_rounds=opt.max_rounds, grow=opt.grow, widen=opt.newton_widen,
                                         band_max=opt.newton_band, rough=opt.newton_rough, stats=ex.newton_stats,
                                         guards=ex.guards, fired=ex.fired)
            ex.pieces += pieces
            if left:
                ex.failed.append(torch.tensor(left, dtype=torch.long, device=dev))
    fallback = torch.cat(ex.failed) if ex.failed else torch.zeros(0, dtype=torch.long, device=dev)
    if fallback.numel():
        full = solve_full(D, Q[fallback], l1, l2, tol=opt.tol, max_iters=opt.max_iters, check_every=opt.check_every,
                          L=L_full)
        ex.pieces.append((fallback, full.indices, full.values))
    sol = _assemble(ex.pieces, B, n, dev)
    if dense:
        sol.dense_idx = torch.cat([d[0] for d in dense])
        sol.dense_scores = torch.cat([d[1] for d in dense])
    sol.stats = _stats(sol, ex, corpus, fallback, M, P, K, opt.max_rounds)
    return sol


def _given_candidates(cand_idx: Any, cand_bound: Any, B: int, M: int,
                      dev: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The candidates given to :func:`screened_solve` as a B × m long tensor (checked: at least
    M valid document indices per query), and their bound (one per query) when given."""
    cand_all = cand_idx if isinstance(cand_idx, torch.Tensor) else torch.as_tensor(np.asarray(cand_idx))
    cand_all = cand_all.to(dev, torch.long)
    if cand_all.ndim != 2 or cand_all.shape[0] != B or cand_all.shape[1] < M or bool((cand_all < 0).any()):
        raise ValueError(f"cand_idx must hold at least {M} valid document indices per query")
    bound_all = None if cand_bound is None else as_tensor(cand_bound, dev).reshape(B)
    return cand_all, bound_all


def _first_pass(D: torch.Tensor, Q: torch.Tensor, corpus: _Corpus,
                given: tuple[torch.Tensor, torch.Tensor | None] | None, M: int, P: int, dense_k: int,
                chunk_size: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                                          list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per chunk of queries: (candidates, their scores ``D_j·q``, the bound on every other
    document), from the dense top-P or from the given candidates; and the dense top-``dense_k``
    (documents, scores) per chunk when asked for."""
    B, n, dev = Q.shape[0], D.shape[0], D.device
    firsts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    dense: list[tuple[torch.Tensor, torch.Tensor]] = []
    step = B if corpus.faiss else chunk_size  # faiss blocks the queries itself
    for s in range(0, B, max(step, 1)):
        q = Q[s:s + step]
        if given is None:
            sv, si = corpus.top(q, max(P, dense_k))
            if dense_k:
                dense.append((si[:, :dense_k], sv[:, :dense_k]))
            sv, si = sv[:, :P], si[:, :P]
            thr = sv[:, -1].clone() if P < n else torch.full((q.shape[0],), -math.inf, device=dev)
        else:
            cand_all, bound_all = given
            si = cand_all[s:s + step]
            sv = torch.bmm(q[:, None, :], D[si].transpose(1, 2))[:, 0, :]
            thr = (bound_all[s:s + step].clone() if bound_all is not None
                   else torch.full((q.shape[0],), math.inf, device=dev))
        firsts.append((si, sv, thr))
    return firsts, dense


def _assemble(pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], B: int, n: int,
              dev: torch.device) -> Solution:
    """One :class:`Solution` from the (query rows, indices, values) pieces the solve finished."""
    Kw = max([p[1].shape[1] for p in pieces], default=0)
    idx = torch.full((B, Kw), -1, dtype=torch.long, device=dev)
    val = torch.zeros(B, Kw, dtype=torch.float32, device=dev)
    for rws, i, v in pieces:
        idx[rws, :i.shape[1]] = i
        val[rws, :v.shape[1]] = v
    return Solution(idx, val, n)


def _stats(sol: Solution, ex: _Exact, corpus: _Corpus, fallback: torch.Tensor, M: int, P: int, K: int,
           max_rounds: int) -> dict[str, Any]:
    """The ``stats`` of :func:`screened_solve` (listed in its docstring)."""
    B = sol.indices.shape[0]
    sizes = sol.support_sizes.float()
    rounds = ex.guards.clone()
    rounds[fallback.cpu()] = max_rounds + 1
    return {
        "mode": "tol",
        "queries": B,
        "candidates": M,
        "pool": P,
        "band": K,
        "support_mean": float(sizes.mean()) if B else 0.0,
        "support_max": int(sizes.max()) if B else 0,
        "corpus_passes": corpus.rows / B if B else 0.0,
        "guard_fired": int(ex.fired.sum()),
        "certified_by_bound": int(ex.by_bound.sum()) + ex.newton_stats.by_bound,
        "rounds_max": int(rounds.max()) if B else 0,
        "rounds_hist": torch.bincount(rounds, minlength=max_rounds + 2).tolist() if B else [],
        "fallback": int(fallback.numel()),
        "solves_mean": float(ex.solves.float().mean()) if B else 0.0,
        "solves_max": int(ex.solves.max()) if B else 0,
        "iterations_mean": float(ex.iters.float().mean()) if B else 0.0,
        "iterations_max": int(ex.iters.max()) if B else 0,
        "fista_rows": ex.fista_rows,
        "dspace_solves": ex.dual_solves,
        "newton_queries": ex.newton_stats.queries,
        "newton_from_guard": ex.newton_stats.from_guard,
        "newton_steps": ex.newton_stats.newton,
        "newton_factorisations": ex.newton_stats.factorisations,
        "newton_cg": ex.newton_stats.cg,
        "newton_rows": ex.newton_stats.rows,
        "newton_by_bound": ex.newton_stats.by_bound,
        "newton_by_pass": ex.newton_stats.by_pass,
        "newton_evaluated": ex.newton_stats.evaluated,
        "newton_working_set_mean": (float(np.mean(ex.newton_stats.working_sets))
                                    if ex.newton_stats.working_sets else 0.0),
    }
