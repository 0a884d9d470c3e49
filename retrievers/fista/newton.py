"""The large-support half of the exact solve for λ2 > 0 on CPU (docs/methods/nnn.md#the-exact-solve,
docs/methods/nnn.md#the-solver): a semi-smooth Newton method on the problem's dual in d
dimensions, with working sets grown from violators and a whole-corpus certificate.

For λ2 > 0 the minimiser's coefficients are ``x_j = (D_j·r − λ1)₊ / λ2`` where r = q − Dᵀx is the
residual at the minimiser, and that residual is the unique minimiser of the 1-strongly convex,
piecewise quadratic function of r ∈ R^d::

    f(r) = ½‖r − q‖² + Σ_j (D_j·r − λ1)₊² / (2λ2),      ∇f(r) = r − q + D_Sᵀ(D_S r − λ1)/λ2

with S = {j : D_j·r > λ1}. A point r gives the primal point x(r) above, whose residual is
``r − ∇f(r)``, so the KKT residual of x(r) is at most ``max_j‖D_j‖·‖∇f(r)‖`` when every j with
D_j·r > λ1 is counted in ∇f. The work is to find r with a small gradient; the certificate is
that gradient computed over the whole corpus (one pass), or over a candidate set C plus a bound
showing that no document outside C is active.

A query arrives from the active-set solve (:mod:`.screening`) with its residual r, its support,
the documents it was solving on and the bound ``D_j·r_o ≤ thr`` on every other document: either
once its free set outgrows ``newton_above`` (the documents: its working and check set, the first
C), or from a guard pass whose violators and support together outnumber ``newton_above`` (then C
is also the pass's band: the violators and the documents below them, with their values at r from
the pass, and thr is the band's last value). Then:

1. **Grow on C.** The working set W starts as the support; the violators among C (members with
   ``D_j·r > λ1`` outside W) join it, largest first, at most max(``grow``, |S|) a round, and f
   restricted to W is minimised from the current r — ``rough`` Newton steps while violators are
   still joining, to ``‖∇f_W‖ ≤ tol/2`` once none is left. After a round only the members that
   could have come near λ1 are evaluated again (those within ``_REACH``·nrm·‖r − r_full‖ of it at
   r_full, where all were last evaluated; the largest ``_LOOK``·max(grow, |S|) of them); the
   growth ends on an evaluation of all of C at the final r, so this moves work, not the answer.
2. **Bound.** ``thr + max‖D_j‖·‖r − r_o‖ ≤ λ1 + ε/2`` (Cauchy–Schwarz) proves that no document
   outside C is active at r: the query is done, x(r) over W is the answer.
3. **Pass.** Otherwise a pass at r gives ``v = D r`` for every document and so the exact gradient
   (float64 products for the active documents where float32's error could matter). If
   ``‖∇f(r)‖ ≤ tol/2`` the query is done. Else the next C is the documents with
   ``v_j > λ1 − widen·‖∇f(r)‖`` (the actives and at most ``band_max`` more) and the support,
   the bound is the largest v outside C at r_o = r, and steps 1–3 repeat (at most
   ``max_rounds`` passes, then the full-corpus fallback of :mod:`.screening`).

Semi-smooth Newton on W: at r, S = {j ∈ W : D_j·r > λ1}, the generalised Hessian is
``(λ2 I + D_SᵀD_S)/λ2``, the step ``Δ = −λ2 (λ2 I + D_SᵀD_S)⁻¹ ∇f_W(r)``, then Armijo
backtracking on f_W (f_W(r + tΔ) for any t from ``D_W r`` and ``D_W Δ``). The d × d matrix
``M = λ2 I + D_SᵀD_S`` (its upper triangle; float32, float64 when λ2 < 0.01) is updated by
symmetric rank-k updates of the rows that enter or leave S (rebuilt when more change than S holds)
and factorised in its own precision; while at most 16 rows have changed since the last
factorisation the Newton system is solved by conjugate gradients on M preconditioned by the old
factor. Products with the documents are float32 unless their error could reach a fifth of the
tolerance (:func:`_float_floor`), or the gradient stops falling on a fixed active set; then
float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
import torch
from scipy.linalg.blas import dsymv as _dsymv
from scipy.linalg.blas import dsyrk as _dsyrk
from scipy.linalg.blas import ssyrk as _ssyrk

from .problem import _sparsify

_F32 = np.float32


@dataclass
class NewtonStats:
    """What the Newton half did (summed over its queries)."""

    queries: int = 0  # queries handed over
    from_guard: int = 0  # of them, handed over by a guard pass with its band
    newton: int = 0  # Newton steps
    factorisations: int = 0  # Cholesky factorisations of M
    cg: int = 0  # conjugate-gradient steps (Newton systems solved with an older factor)
    rows: int = 0  # document rows added to or removed from M
    by_pass: int = 0  # queries certified by a pass's whole-corpus gradient
    by_bound: int = 0  # queries certified by the bound after a working-set solve
    evaluated: int = 0  # candidate rows evaluated (D_j·r) while working sets grow
    working_sets: list[int] = field(default_factory=list)


class _Hessian:
    """``M = λ2 I + D_SᵀD_S`` (its upper triangle only, updated in place by symmetric rank-k
    updates: half a product's work) for a set S of documents, and a Cholesky factor of M as it was
    at the last factorisation (``stale``: rows changed since); float32 unless λ2 < 0.01 (or a
    float32 factor fails), where M's condition number can outgrow float32."""

    def __init__(self, d: int, l2: float, stats: NewtonStats, spare: list[np.ndarray] | None = None):
        self.l2, self.d = l2, d
        self.single = l2 >= 1e-2
        self.spare = spare if spare is not None else []  # matrices of finished queries, to reuse
        self.M = self._identity()
        self.factor: Any = None
        self.stale = 0
        self.stats = stats

    @property
    def dtype(self) -> Any:
        return _F32 if self.single else np.float64

    def _identity(self) -> np.ndarray:
        """λ2 I in M's precision, in a spare matrix when one is at hand."""
        dt = self.dtype
        if self.spare and self.spare[-1].dtype == dt:
            M = self.spare.pop()
            M.fill(0.0)
        else:
            M = np.zeros((self.d, self.d), dtype=dt, order="F")
        np.fill_diagonal(M, self.l2)
        return M

    def _update(self, rows: np.ndarray, sign: float) -> None:
        if self.single:
            self.M = _ssyrk(sign, rows.T, beta=1.0, c=self.M, trans=0, overwrite_c=1)
        else:
            self.M = _dsyrk(sign, rows.T.astype(np.float64), beta=1.0, c=self.M, trans=0, overwrite_c=1)

    @property
    def full(self) -> np.ndarray:
        """M with both triangles (float64)."""
        M = self.M.astype(np.float64)
        return np.triu(M) + np.triu(M, 1).T

    def change(self, add: np.ndarray, remove: np.ndarray) -> None:
        """Rows ``add`` join S and rows ``remove`` leave it (each k × d, float32)."""
        k = len(add) + len(remove)
        if k == 0:
            return
        if len(add):
            self._update(add, 1.0)
        if len(remove):
            self._update(remove, -1.0)
        self.stale += k
        self.stats.rows += k

    def rebuild(self, rows: np.ndarray) -> None:
        """M for S = ``rows`` from scratch."""
        if self.M.dtype == self.dtype:  # its own array, reset
            self.spare.append(self.M)
        self.M = self._identity()
        if len(rows):
            self._update(rows, 1.0)
            self.stats.rows += len(rows)
        self.stale = self.d + 1  # forces a factorisation

    def times(self, z: np.ndarray) -> np.ndarray:
        """M z (float64)."""
        return _dsymv(1.0, self.M.astype(np.float64, copy=False), z)

    def _factorise(self) -> None:
        self.stats.factorisations += 1
        self.stale = 0
        if self.single:
            try:
                self.factor = sla.cho_factor(self.M, lower=False, check_finite=False)
                return
            except np.linalg.LinAlgError:  # from here in float64 (a failure there: the caller rebuilds M)
                self.single = False
                self.M = self.M.astype(np.float64)
        self.factor = sla.cho_factor(self.M, lower=False, check_finite=False)

    def _apply(self, g: np.ndarray) -> np.ndarray:
        dt = self.factor[0].dtype
        return sla.cho_solve(self.factor, g.astype(dt), check_finite=False).astype(np.float64)

    def solve(self, g: np.ndarray, cg_above: int = 16, rtol: float = 5e-2) -> np.ndarray:
        """``M⁻¹ g``, approximately: by the last factor when M has not changed since, by conjugate
        gradients on M preconditioned by that factor when at most ``cg_above`` rows have changed
        (to a relative residual ``rtol``; M − M_old has rank at most the rows changed, so CG needs
        at most that many steps plus one in exact arithmetic), else by a new factorisation. (An
        inexact Newton direction: the line search and the exact gradient keep the method right.)"""
        if self.factor is None or self.stale > cg_above:
            self._factorise()
            return self._apply(g)
        z = self._apply(g)
        if self.stale == 0:
            return z
        res = g - self.times(z)
        p = self._apply(res)
        zr = float(res @ p)
        goal = rtol * math.sqrt(float(g @ g))
        for _ in range(2 * self.stale + 2):
            if math.sqrt(float(res @ res)) <= goal or zr <= 0:
                return z
            Ap = self.times(p)
            alpha = zr / float(p @ Ap)
            z += alpha * p
            res -= alpha * Ap
            pr = self._apply(res)
            zr_new = float(res @ pr)
            p = pr + (zr_new / zr) * p
            zr = zr_new
            self.stats.cg += 1
        self._factorise()
        return self._apply(g)


def _float_floor(w: int, r_norm: float, l2: float) -> float:
    """About how far a float32 ∇f over w active rows is from the exact one: each ``D_j·r`` is off by
    ~√d·ε‖r‖, and ∇f sums w of those errors divided by λ2 (√w of them in effect)."""
    return 4e-7 * math.sqrt(max(w, 1)) * r_norm / l2


def minimise_on(DW: np.ndarray, q: np.ndarray, r: np.ndarray, l1: float, l2: float, gtol: float,
                S: np.ndarray, H: _Hessian, max_steps: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray, float,
                                                                          np.ndarray, bool]:
    """Semi-smooth Newton on ``f_W`` (module docstring) from ``r`` until ``‖∇f_W‖ ≤ gtol``, or
    ``max_steps`` steps.

    ``DW`` (w × d, float32) are the working set's rows; ``S`` (w, bool) marks the rows that ``H.M``
    holds. The products with DW are float32 unless that float error could reach a fifth of
    ``gtol`` (:func:`_float_floor`), or the gradient stops falling on a fixed active set; then
    float64. Returns (r, the active mask at r, ``a = D_W r − λ1``, ‖∇f_W(r)‖, the rows ``H.M``
    holds now, whether ‖∇f_W(r)‖ ≤ gtol)."""
    Dp = DW
    if _float_floor(len(DW), math.sqrt(float(r @ r)), l2) > 0.2 * gtol:
        Dp = DW.astype(np.float64)
    last, still = math.inf, False
    for step in range(max_steps + 1):
        a = (Dp @ r.astype(Dp.dtype)).astype(np.float64) - l1
        act = a > 0
        a_act = np.where(act, a, 0.0)
        g = r - q + (Dp.T @ a_act.astype(Dp.dtype)).astype(np.float64) / l2
        gn = math.sqrt(float(g @ g))
        if gn <= gtol or step == max_steps:
            return r, act, a, gn, S, gn <= gtol
        if still and gn > 0.5 * last and Dp.dtype == _F32:  # float32's floor: exact products from here
            Dp = DW.astype(np.float64)
            continue
        enter, leave = act & ~S, S & ~act
        ne, nl = int(enter.sum()), int(leave.sum())
        still, last = ne + nl == 0, gn
        if ne + nl > int(act.sum()):
            H.rebuild(DW[act])
        else:
            H.change(DW[enter], DW[leave])
        S = act
        try:
            delta = -l2 * H.solve(g)
        except np.linalg.LinAlgError:  # M drifted from its rows (float sums): from scratch, float64
            H.single = False
            H.rebuild(DW[act])
            delta = -l2 * H.solve(g)
        c = (Dp @ delta.astype(Dp.dtype)).astype(np.float64)
        e = r - q
        f0 = 0.5 * float(e @ e) + float(a_act @ a_act) / (2 * l2)
        slope = float(g @ delta)
        t = 1.0
        while t > 1e-10:
            et = e + t * delta
            at = np.maximum(a + t * c, 0.0)
            if 0.5 * float(et @ et) + float(at @ at) / (2 * l2) <= f0 + 1e-4 * t * slope:
                break
            t *= 0.5
        r = r + t * delta
        H.stats.newton += 1
    raise AssertionError("unreachable")


@dataclass
class HandOff:
    """A query handed over by the active-set solve: its residual ``r``, the documents it was
    solving on (``W``), those in its current support (``held``), the bound ``thr`` on ``D_j·ro``
    for every document outside W and ``band``, and documents whose values ``e = D_j·r − λ1`` are
    known already (``band``: from the guard pass at r, value descending)."""

    row: int
    r: np.ndarray
    W: np.ndarray
    held: np.ndarray
    thr: float
    ro: np.ndarray
    band: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    e: np.ndarray = field(default_factory=lambda: np.zeros(0))


class _Rows:
    """Document rows gathered into buffers that are reused from query to query (a fresh
    multi-megabyte array is page-faulted in on every use, which on CPU costs as much as the
    products with it: :class:`.passes._Corpus`)."""

    def __init__(self, Dn: np.ndarray):
        self.Dn = Dn
        self.bufs: dict[tuple[str, Any], np.ndarray] = {}

    def space(self, name: str, rows: int, keep: int = 0, dtype: Any = _F32) -> np.ndarray:
        """At least ``rows`` rows of buffer ``name`` (its first ``keep`` rows kept when it grows)."""
        buf = self.bufs.get((name, dtype))
        if buf is None or len(buf) < rows:
            new = np.empty((max(rows, 2 * len(buf) if buf is not None else rows), self.Dn.shape[1]), dtype)
            if buf is not None and keep:
                new[:keep] = buf[:keep]
            self.bufs[(name, dtype)] = buf = new
        return buf

    def take(self, name: str, idx: np.ndarray, start: int = 0) -> np.ndarray:
        """The corpus rows ``idx`` written after the first ``start`` rows of buffer ``name``;
        returns its first ``start + len(idx)`` rows."""
        end = start + len(idx)
        buf = self.space(name, end, keep=start)
        np.take(self.Dn, idx, axis=0, out=buf[start:end], mode="clip")
        return buf[:end]


# members of the candidates below λ1 by more than this share of nrm·‖r − r_full‖ (r_full: where
# all of them were last evaluated) are not evaluated again while the working set grows; a full
# evaluation ends the growth, so this only moves work, never the answer
_REACH = 0.1
# and at most this many times max(grow, |S|) of them, the largest by their last values
_LOOK = 8


def newton_rounds(D: torch.Tensor, Q: torch.Tensor, queries: list[HandOff], l1: float, l2: float, *, tol: float,
                  gtol: float, nrm: float, corpus: Any, max_rounds: int, grow: int, widen: float, band_max: int,
                  rough: int, stats: NewtonStats, guards: torch.Tensor, fired: torch.Tensor) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                                                                     list[int]]:
    """Steps 1–4 of the module docstring for the handed-over ``queries``. Returns the finished
    pieces (query rows, indices, values) and the rows left for the full-corpus fallback."""
    Dn = D.numpy()
    n, d = Dn.shape
    inner = 0.5 * tol / max(nrm, 1e-30)  # ‖∇f‖ goal: its KKT share is tol/2
    ok = l1 + 0.5 * gtol  # the bound's goal off the candidates
    Q64 = Q.numpy().astype(np.float64)
    stats.queries += len(queries)
    stats.from_guard += sum(1 for h in queries if len(h.band))
    done: list[tuple[int, np.ndarray, np.ndarray]] = []
    ws = _Rows(Dn)
    spare: list[np.ndarray] = []
    mark = np.zeros(n, dtype=bool)

    def member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Which entries of ``a`` are in ``b`` (document indices)."""
        mark[b] = True
        out = mark[a]
        mark[b] = False
        return out

    def evaluate(DC: np.ndarray, r: np.ndarray) -> np.ndarray:
        stats.evaluated += len(DC)
        return (DC @ r.astype(_F32)).astype(np.float64) - l1

    def grown(i: int, DC: np.ndarray, e: np.ndarray, r: np.ndarray, S: np.ndarray,
              H: _Hessian | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, _Hessian] | None:
        """f minimised over the candidates (their rows ``DC``, by and large value first; ``e = DC r
        − λ1``; ``S`` marks the members that H holds) from r: the working set grows from S by the
        violators among them, largest first, at most max(grow, |S|) a round, until none is left.
        While it grows, only the members that could have come within ``_REACH``·nrm·‖r − r_full‖
        of λ1 are evaluated again; it ends on an evaluation of all of them. Returns (r', the
        members active at r' (positions in DC), their ``D_j·r' − λ1``, the members H holds, H), or
        None when a solve does not converge."""
        if H is None:
            H = _Hessian(d, l2, stats, spare)
            H.rebuild(DC[S])
        inW = S.copy()
        # the working set's rows as a growing block (members in the order they joined)
        order = np.flatnonzero(S)
        block = ws.space("W", len(DC))
        block[:len(order)] = DC[order]
        e_full, r_full, fresh = e, r, True  # all members' values at r_full; fresh: e is e_full
        first, conv = True, False
        while True:
            if not first:
                reach = _REACH * nrm * math.sqrt(float((r - r_full) @ (r - r_full)))
                live = np.flatnonzero((e_full > -reach) & ~inW)
                m = _LOOK * max(grow, int(S.sum()))
                if len(live) > m:  # the largest by their last values
                    live = np.sort(live[np.argpartition(-e_full[live], m - 1)[:m]])
                if 2 * len(live) >= len(DC):
                    e = e_full = evaluate(DC, r)
                    r_full, fresh = r, True
                else:
                    e = np.full(len(DC), -np.inf)
                    p = int(live[-1]) + 1 if len(live) else 0
                    if p <= 2 * len(live):  # by and large a prefix: read it in place
                        e[:p] = evaluate(DC[:p], r)
                    else:
                        e[live] = evaluate(DC[live], r)
                    fresh = False
            viol = np.flatnonzero((e > 0) & ~inW)
            if len(viol) == 0 and conv:
                if not fresh:  # the end of the growth: every member at r
                    e = e_full = evaluate(DC, r)
                    r_full, fresh = r, True
                    viol = np.flatnonzero((e > 0) & ~inW)
                if len(viol) == 0:
                    return r, order[act], a[act], S, H
            k = max(grow, int(S.sum()))
            if len(viol) > k:
                viol = viol[np.argpartition(-e[viol], k - 1)[:k]]
            inW[viol] = True
            block[len(order):len(order) + len(viol)] = DC[viol]
            order = np.concatenate([order, viol])
            stats.working_sets.append(len(order))
            # while violators are being added a round takes a few steps; the last one converges
            r, act, a, _, Sw, conv = minimise_on(block[:len(order)], Q64[i], r, l1, l2, inner, S[order], H,
                                                 max_steps=rough if len(viol) else 60)
            if not conv and not len(viol):
                return None
            S = np.zeros(len(DC), dtype=bool)
            S[order[Sw]] = True
            first = False

    pend: list[tuple[int, np.ndarray, np.ndarray, _Hessian]] = []
    for h in queries:  # first on the documents each query was solving on, certified by its own bound
        C = np.union1d(h.W, h.held)
        DC = ws.take("C", C)
        e = evaluate(DC, h.r)
        if len(h.band):  # the guard's band, value descending, after the documents it was solving on
            C = np.concatenate([C, h.band])
            DC = ws.take("C", h.band, len(DC))
            e = np.concatenate([e, h.e])
        elif len(C) > 64:  # value descending (the growth evaluates a prefix)
            o = np.argsort(-e)
            C, e = C[o], e[o]
            DC = np.take(DC, o, axis=0, out=ws.space("T", len(C))[:len(C)], mode="clip")
        out = grown(h.row, DC, e, h.r, member(C, h.held), None)
        if out is None:
            continue  # left for the fallback
        r, act, a, S, H = out
        moved = h.ro - r
        if h.thr + nrm * math.sqrt(float(moved @ moved)) <= ok:
            stats.by_bound += 1
            done.append((h.row, C[act], a / l2))
            spare.append(H.M)
        else:
            pend.append((h.row, r, C[S], H))
    # then passes: the exact gradient over the corpus certifies; else the candidates are the
    # documents within widen·‖∇f‖ of λ1 (and those H holds), and the pass's bound may certify
    for _ in range(max_rounds):
        if not pend:
            break
        nxt: list[tuple[int, np.ndarray, np.ndarray, _Hessian]] = []
        for s in range(0, len(pend), corpus.chunk):
            part = pend[s:s + corpus.chunk]
            V = corpus.product(torch.from_numpy(np.stack([p[1] for p in part]).astype(_F32))).numpy()
            first = {p[0] for p in part if int(guards[p[0]]) == 0}
            guards[[p[0] for p in part]] += 1
            for k, (i, r, held, H) in enumerate(part):
                v = V[k]
                act = np.flatnonzero(v > l1)
                Da = ws.take("C", act)  # the first rows of the candidates'
                if _float_floor(len(act), math.sqrt(float(r @ r)), l2) > 0.2 * inner:  # exact products
                    Da64 = ws.space("C", len(act), dtype=np.float64)[:len(act)]
                    np.copyto(Da64, Da)
                    a_act = Da64 @ r - l1
                    on = a_act > 0
                    g = r - Q64[i] + Da64.T @ np.where(on, a_act, 0.0) / l2
                    fin, fin_a = act[on], a_act[on]
                else:
                    a_act = v[act].astype(np.float64) - l1
                    g = r - Q64[i] + (Da.T @ a_act.astype(_F32)).astype(np.float64) / l2
                    fin, fin_a = act, a_act
                gn = math.sqrt(float(g @ g))
                if i in first and not member(act, held).all():
                    fired[i] = True  # the query's first pass found documents outside its support
                if gn <= inner:
                    stats.by_pass += 1
                    done.append((i, fin, fin_a / l2))
                    spare.append(H.M)
                    continue
                # candidates: the actives, then the documents within widen·‖∇f‖ below λ1 (at most
                # band_max, value descending), then the rest of the support
                extra = np.flatnonzero((v > l1 - widen * gn) & (v <= l1))
                if len(extra) > band_max:
                    extra = extra[np.argpartition(-v[extra], band_max - 1)[:band_max]]
                extra = extra[np.argsort(-v[extra])]
                seen = np.concatenate([act, extra])
                rest = held[~member(held, seen)]
                C = np.concatenate([seen, rest])
                ws.take("C", extra, len(act))
                DC = ws.take("C", rest, len(seen))
                out = grown(i, DC, v[C].astype(np.float64) - l1, r, member(C, held), H)
                if out is None:
                    continue
                r2, actC, a, S, H = out
                off = v.copy()
                off[C] = -np.inf
                edge = float(off.max()) if len(C) < n else -math.inf
                moved = r2 - r
                if edge + nrm * math.sqrt(float(moved @ moved)) <= ok:
                    stats.by_bound += 1
                    done.append((i, C[actC], a / l2))
                    spare.append(H.M)
                else:
                    nxt.append((i, r2, C[S], H))
        pend = nxt
    failed = sorted({h.row for h in queries} - {t[0] for t in done})
    if not done:
        return [], failed
    # one piece: the supports side by side (padding: value 0), listed as the solver lists them
    K = max(len(t[1]) for t in done)
    cols = np.zeros((len(done), K), dtype=np.int64)
    vals = np.zeros((len(done), K), dtype=_F32)
    for k, (_, idx, val) in enumerate(done):
        cols[k, :len(idx)], vals[k, :len(val)] = idx, val
    return [(torch.tensor([t[0] for t in done]), *_sparsify(torch.from_numpy(vals), torch.from_numpy(cols)))], failed
