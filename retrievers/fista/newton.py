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
   r_full, where all were last evaluated; the largest ``_LOOK``·max(grow, |S|) of them). When
   none of them is left, the growth ends on an evaluation of every member that can be active at
   the final r (those within nrm·‖r − r_full‖ of λ1 at r_full) if the bound of step 2 holds at r;
   a violator found there resumes the growth. If the bound does not hold, the next pass
   evaluates every document anyway, so the members are left to it: this moves work, not the
   answer.
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
and factorised in its own precision (LAPACK's potrf; the systems by two triangular solves);
while at most 16 rows have changed since the last factorisation the Newton system is solved by
conjugate gradients on M preconditioned by the old factor. Products with the documents are
float32 unless their error could reach a fifth of the tolerance (:func:`_float_floor`), or the
gradient stops falling on a fixed active set; then float64 (the working set's rows are kept in
both precisions as it grows).

Threads: every step of a query is its own (its candidates, working sets, M and steps), and its
kernels are small (d × d factorisations, products with a few hundred rows), so they run on one
thread each (:func:`.problem._one_thread`) and, when the caller has T > 1 intra-op threads, T
queries run side by side in a pool of T threads (:class:`_Workers`); only the passes use T
threads for one product. The answers do not depend on T.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import torch

from ._blas import potrf_upper, symv_upper, syrk_upper, trsv_upper
from .problem import _pools, _sparsify, _wide_count

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

    def add(self, other: "NewtonStats") -> None:
        """Add another's counts (and working sets) to these."""
        for f in fields(self):
            if f.name == "working_sets":
                self.working_sets.extend(other.working_sets)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class _Hessian:
    """``M = λ2 I + D_SᵀD_S`` (its upper triangle only, updated in place by symmetric rank-k
    updates: half a product's work) for a set S of documents, and a Cholesky factor of M as it was
    at the last factorisation (``stale``: rows changed since); float32 unless λ2 < 0.01 (or a
    float32 factor fails), where M's condition number can outgrow float32.

    No kernel holds the interpreter lock (:mod:`._blas`: scipy's BLAS and LAPACK without its f2py
    wrappers, which hold it), so the queries of :class:`_Workers` work on their matrices side by
    side.
    """

    def __init__(self, d: int, l2: float, stats: NewtonStats, spare: list[np.ndarray] | None = None):
        self.l2, self.d = l2, d
        self.single = l2 >= 1e-2
        self.spare = spare if spare is not None else []  # matrices of finished queries, to reuse
        self.M = self._identity()
        self.factor: Any = None  # the upper Cholesky factor U of M (M = UᵀU), Fortran order
        self.stale = 0
        self.stats = stats

    @property
    def dtype(self) -> Any:
        return _F32 if self.single else np.float64

    def _matrix(self, dt: Any) -> np.ndarray:
        """A d × d matrix of ``dt`` in Fortran order (its values undefined): a spare one when one
        is at hand."""
        for k in range(len(self.spare) - 1, -1, -1):
            if self.spare[k].dtype == dt:
                return self.spare.pop(k)
        return np.empty((self.d, self.d), dtype=dt, order="F")

    def _identity(self) -> np.ndarray:
        """λ2 I in M's precision."""
        M = self._matrix(self.dtype)
        M.fill(0.0)
        np.fill_diagonal(M, self.l2)
        return M

    def _update(self, rows: np.ndarray, sign: float) -> None:
        syrk_upper(self.M, rows if rows.dtype == self.M.dtype else rows.astype(self.M.dtype), sign)

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
        """M z (float64; the product in M's precision)."""
        return symv_upper(self.M, z).astype(np.float64, copy=False)

    def _cholesky(self) -> bool:
        """U from M's upper triangle into the factor's buffer; whether M was positive definite."""
        if self.factor is None or self.factor.dtype != self.M.dtype:
            self.factor = self._matrix(self.M.dtype)
        if potrf_upper(self.M, self.factor):
            return True
        self.factor = None
        return False

    def _factorise(self) -> None:
        """The upper Cholesky factor U of M (M = UᵀU) by LAPACK's potrf (M is not changed)."""
        self.stats.factorisations += 1
        self.stale = 0
        if self.single:
            if self._cholesky():
                return
            self.single = False  # from here in float64 (a failure there: the caller rebuilds M)
            self.M = self.M.astype(np.float64, order="F")
        if not self._cholesky():
            raise np.linalg.LinAlgError("M is not positive definite")

    def release(self) -> None:
        """Hand M and the factor's buffer to the spare matrices (the query is done)."""
        self.spare.append(self.M)
        if self.factor is not None:
            self.spare.append(self.factor)
            self.factor = None

    def _apply(self, g: np.ndarray) -> np.ndarray:
        """``(UᵀU)⁻¹ g`` by two triangular solves (float64 result)."""
        U = self.factor
        return trsv_upper(U, trsv_upper(U, g, True), False).astype(np.float64, copy=False)

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
                S: np.ndarray, H: _Hessian, max_steps: int = 60,
                DW64: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray, bool]:
    """Semi-smooth Newton on ``f_W`` (module docstring) from ``r`` until ``‖∇f_W‖ ≤ gtol``, or
    ``max_steps`` steps.

    ``DW`` (w × d, float32) are the working set's rows; ``S`` (w, bool) marks the rows that ``H.M``
    holds. The products with DW are float32 unless that float error could reach a fifth of
    ``gtol`` (:func:`_float_floor`), or the gradient stops falling on a fixed active set; then
    float64 (``DW64``: those rows in float64, when the caller keeps them). Returns (r, the active
    mask at r, ``a = D_W r − λ1``, ‖∇f_W(r)‖, the rows ``H.M`` holds now, whether
    ‖∇f_W(r)‖ ≤ gtol)."""
    Dp = DW
    if _float_floor(len(DW), math.sqrt(float(r @ r)), l2) > 0.2 * gtol:
        Dp = DW64 if DW64 is not None else DW.astype(np.float64)
    last, still = math.inf, False
    a_next = None  # D_W r − λ1 at the new r, from the line search (float64 products only)
    for step in range(max_steps + 1):
        if a_next is not None and Dp.dtype == np.float64:
            a = a_next
        else:
            a = (Dp @ r.astype(Dp.dtype, copy=False)).astype(np.float64, copy=False) - l1
        act = a > 0
        a_act = np.where(act, a, 0.0)
        g = r - q + (Dp.T @ a_act.astype(Dp.dtype, copy=False)).astype(np.float64, copy=False) / l2
        gn = math.sqrt(float(g @ g))
        if gn <= gtol or step == max_steps:
            return r, act, a, gn, S, gn <= gtol
        if still and gn > 0.5 * last and Dp.dtype == _F32:  # float32's floor: exact products from here
            Dp = DW64 if DW64 is not None else DW.astype(np.float64)
            a_next = None
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
        c = (Dp @ delta.astype(Dp.dtype, copy=False)).astype(np.float64, copy=False)
        e = r - q
        f0 = 0.5 * float(e @ e) + float(a_act @ a_act) / (2 * l2)
        slope = float(g @ delta)
        t = 1.0
        while t > 1e-10:
            et = e + t * delta
            a_next = a + t * c
            at = np.maximum(a_next, 0.0)
            if 0.5 * float(et @ et) + float(at @ at) / (2 * l2) <= f0 + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            a_next = None
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
# all of them were last evaluated) are not evaluated again while the working set grows; the
# growth ends on an evaluation of every member that can be active (or on a pass), so this only
# moves work, never the answer
_REACH = 0.1
# and at most this many times max(grow, |S|) of them, the largest by their last values
_LOOK = 8


class _Worker:
    """What one thread of the Newton half works with: its row buffers, its membership marks, the
    matrices of finished queries to reuse, and its own counts (added to the caller's at the end)."""

    def __init__(self, Dn: np.ndarray):
        self.ws = _Rows(Dn)
        self.mark = np.zeros(Dn.shape[0], dtype=bool)
        self.spare: list[np.ndarray] = []
        self.stats = NewtonStats()

    def member(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Which entries of ``a`` are in ``b`` (document indices)."""
        self.mark[b] = True
        out = self.mark[a]
        self.mark[b] = False
        return out

    def adopt(self, H: _Hessian) -> _Hessian:
        """H (from a query another worker started) counted and recycled by this worker."""
        H.stats, H.spare = self.stats, self.spare
        return H


class _Workers:
    """The threads the Newton half's queries are shared among. Each query's work is its own (its
    candidates, working sets, matrix M and steps: single-threaded BLAS calls, see
    :func:`.problem._one_thread`), so with T threads (the caller's intra-op count) T queries run
    side by side; the answers are the same for every T. One thread: all in the calling one."""

    def __init__(self, Dn: np.ndarray, threads: int):
        self.Dn = Dn
        self.local = threading.local()
        self.made: list[_Worker] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None

    def get(self) -> _Worker:
        wk = getattr(self.local, "worker", None)
        if wk is None:
            if self.pool is not None:  # a thread of the pool: its OpenMP pools on one thread too
                _pools().limit(limits=1, user_api="openmp")
            wk = self.local.worker = _Worker(self.Dn)
            with self.lock:
                self.made.append(wk)
        return wk

    def map(self, fn: Callable[[Any, _Worker], Any], items: list[Any]) -> list[Any]:
        """``fn(item, worker)`` for every item, in the items' order."""
        if self.pool is None or len(items) < 2:
            return [fn(x, self.get()) for x in items]
        return list(self.pool.map(lambda x: fn(x, self.get()), items))

    def close(self, stats: NewtonStats) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        for wk in self.made:
            stats.add(wk.stats)


_Done = tuple[int, np.ndarray, np.ndarray]  # (query row, documents, coefficients)
# (query row, r, the documents H holds, H, the candidates it was last solved on)
_Pending = tuple[int, np.ndarray, np.ndarray, _Hessian, np.ndarray]


class _Solver:
    """Steps 1–3 of the module docstring for one query at a time (read-only state shared by the
    workers)."""

    def __init__(self, Dn: np.ndarray, Q64: np.ndarray, l1: float, l2: float, *, inner: float, ok: float,
                 nrm: float, grow: int, widen: float, band_max: int, rough: int):
        self.Dn, self.Q64, self.l1, self.l2 = Dn, Q64, l1, l2
        self.inner, self.ok, self.nrm = inner, ok, nrm
        self.grow, self.widen, self.band_max, self.rough = grow, widen, band_max, rough

    def evaluate(self, wk: _Worker, DC: np.ndarray, r: np.ndarray) -> np.ndarray:
        wk.stats.evaluated += len(DC)
        return (DC @ r.astype(_F32)).astype(np.float64) - self.l1

    def grown(self, wk: _Worker, i: int, DC: np.ndarray, e: np.ndarray, r: np.ndarray, S: np.ndarray,
              H: _Hessian | None, certifiable: Callable[[np.ndarray], bool]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, _Hessian, bool] | None:
        """f minimised over the candidates (their rows ``DC``, by and large value first; ``e = DC r
        − λ1``; ``S`` marks the members that H holds) from r: the working set grows from S by the
        violators among them, largest first, at most max(grow, |S|) a round, until none is left.
        While it grows, only the members that could have come within ``_REACH``·nrm·‖r − r_full‖
        of λ1 are evaluated again. At its end, when ``certifiable(r)`` (the bound off the
        candidates could certify r), every member that can be active at r (those within
        nrm·‖r − r_full‖ of λ1 at r_full, by Cauchy–Schwarz) is evaluated, and any violator found
        resumes the growth; otherwise the query's next pass evaluates them all. Returns (r', the
        members active at r' (positions in DC), their ``D_j·r' − λ1``, the members H holds, H,
        whether no member outside the working set is active at r'), or None when a solve does not
        converge."""
        l1, l2, nrm, grow, st = self.l1, self.l2, self.nrm, self.grow, wk.stats
        d = DC.shape[1]
        if H is None:
            H = _Hessian(d, l2, st, wk.spare)
            H.rebuild(DC[S])
        inW = S.copy()
        # the working set's rows as a growing block (members in the order they joined), and in float64
        order = np.flatnonzero(S)
        block = wk.ws.space("W", len(DC))
        block64 = wk.ws.space("W", len(DC), dtype=np.float64)
        block[:len(order)] = DC[order]
        block64[:len(order)] = block[:len(order)]
        e_full, r_full, fresh = e, r, True  # all members' values at r_full; fresh: e is e_full
        first, conv = True, False
        act = a = np.zeros(0)
        while True:
            if not first:
                reach = _REACH * nrm * math.sqrt(float((r - r_full) @ (r - r_full)))
                live = np.flatnonzero((e_full > -reach) & ~inW)
                m = _LOOK * max(grow, int(S.sum()))
                if len(live) > m:  # the largest by their last values
                    live = np.sort(live[np.argpartition(-e_full[live], m - 1)[:m]])
                if 2 * len(live) >= len(DC):
                    e = e_full = self.evaluate(wk, DC, r)
                    r_full, fresh = r, True
                else:
                    e = np.full(len(DC), -np.inf)
                    p = int(live[-1]) + 1 if len(live) else 0
                    if p <= 2 * len(live):  # by and large a prefix: read it in place
                        e[:p] = self.evaluate(wk, DC[:p], r)
                    else:
                        e[live] = self.evaluate(wk, DC[live], r)
                    fresh = False
            viol = np.flatnonzero((e > 0) & ~inW)
            if len(viol) == 0 and conv:
                if fresh:
                    return r, order[act], a[act], S, H, True
                if not certifiable(r):
                    return r, order[act], a[act], S, H, False
                # the end of the growth: every member that can be active at r (Cauchy–Schwarz from r_full)
                reach = nrm * math.sqrt(float((r - r_full) @ (r - r_full))) * (1 + 1e-6) + 1e-12
                need = np.flatnonzero((e_full > -reach) & ~inW)
                if 2 * len(need) >= len(DC):
                    e = e_full = self.evaluate(wk, DC, r)
                    r_full, fresh = r, True
                else:
                    e = np.full(len(DC), -np.inf)
                    e[need] = self.evaluate(wk, DC[need], r)
                viol = np.flatnonzero((e > 0) & ~inW)
                if len(viol) == 0:
                    return r, order[act], a[act], S, H, True
            k = max(grow, int(S.sum()))
            if len(viol) > k:
                viol = viol[np.argpartition(-e[viol], k - 1)[:k]]
            inW[viol] = True
            w0, w1 = len(order), len(order) + len(viol)
            block[w0:w1] = DC[viol]
            block64[w0:w1] = block[w0:w1]
            order = np.concatenate([order, viol])
            st.working_sets.append(len(order))
            # while violators are being added a round takes a few steps; the last one converges
            r, act, a, _, Sw, conv = minimise_on(block[:w1], self.Q64[i], r, l1, l2, self.inner, S[order], H,
                                                 max_steps=self.rough if len(viol) else 60, DW64=block64[:w1])
            if not conv and not len(viol):
                return None
            S = np.zeros(len(DC), dtype=bool)
            S[order[Sw]] = True
            first = False

    def first(self, h: HandOff, wk: _Worker) -> tuple[str, Any]:
        """A handed-over query on the documents it was solving on (and the guard's band), certified
        by its own bound when that suffices: ("done", _Done), ("pend", _Pending) or ("fail", row)."""
        C = np.union1d(h.W, h.held)
        DC = wk.ws.take("C", C)
        e = self.evaluate(wk, DC, h.r)
        if len(h.band):  # the guard's band, value descending, after the documents it was solving on
            C = np.concatenate([C, h.band])
            DC = wk.ws.take("C", h.band, len(DC))
            e = np.concatenate([e, h.e])
        elif len(C) > 64:  # value descending (the growth evaluates a prefix)
            o = np.argsort(-e)
            C, e = C[o], e[o]
            DC = np.take(DC, o, axis=0, out=wk.ws.space("T", len(C))[:len(C)], mode="clip")
        nrm, ok = self.nrm, self.ok

        def bound(r: np.ndarray) -> bool:
            moved = h.ro - r
            return h.thr + nrm * math.sqrt(float(moved @ moved)) <= ok

        out = self.grown(wk, h.row, DC, e, h.r, wk.member(C, h.held), None, bound)
        if out is None:
            return "fail", h.row  # left for the fallback
        r, act, a, S, H, full = out
        if full and bound(r):
            wk.stats.by_bound += 1
            H.release()
            return "done", (h.row, C[act], a / self.l2)
        return "pend", (h.row, r, C[S], H, C)

    def after_pass(self, item: tuple[_Pending, np.ndarray], wk: _Worker) -> tuple[str, Any, bool]:
        """A pending query after a pass at its r (``v = D r``, every document): certified by the
        exact gradient, else solved on the documents near λ1 and certified by the pass's bound, else
        pending for the next pass. The third value: whether the pass found active documents
        outside the candidates the query was last solved on."""
        (i, r, held, H, cand), v = item
        H = wk.adopt(H)
        l1, l2, nrm, ok, n = self.l1, self.l2, self.nrm, self.ok, len(v)
        act = np.flatnonzero(v > l1)
        Da = wk.ws.take("C", act)  # the first rows of the candidates'
        if _float_floor(len(act), math.sqrt(float(r @ r)), l2) > 0.2 * self.inner:  # exact products
            Da64 = wk.ws.space("C", len(act), dtype=np.float64)[:len(act)]
            np.copyto(Da64, Da)
            a_act = Da64 @ r - l1
            on = a_act > 0
            g = r - self.Q64[i] + Da64.T @ np.where(on, a_act, 0.0) / l2
            fin, fin_a = act[on], a_act[on]
        else:
            a_act = v[act].astype(np.float64) - l1
            g = r - self.Q64[i] + (Da.T @ a_act.astype(_F32)).astype(np.float64) / l2
            fin, fin_a = act, a_act
        gn = math.sqrt(float(g @ g))
        outside = not bool(wk.member(act, cand).all())
        if gn <= self.inner:
            wk.stats.by_pass += 1
            H.release()
            return "done", (i, fin, fin_a / l2), outside
        # candidates: the actives, then the documents within widen·‖∇f‖ below λ1 (at most
        # band_max, value descending), then the rest of the support
        extra = np.flatnonzero((v > l1 - self.widen * gn) & (v <= l1))
        if len(extra) > self.band_max:
            extra = extra[np.argpartition(-v[extra], self.band_max - 1)[:self.band_max]]
        extra = extra[np.argsort(-v[extra])]
        seen = np.concatenate([act, extra])
        rest = held[~wk.member(held, seen)]
        C = np.concatenate([seen, rest])
        wk.ws.take("C", extra, len(act))
        DC = wk.ws.take("C", rest, len(seen))
        off = v.copy()
        off[C] = -np.inf
        edge = float(off.max()) if len(C) < n else -math.inf

        def bound(r2: np.ndarray) -> bool:
            moved = r2 - r
            return edge + nrm * math.sqrt(float(moved @ moved)) <= ok

        out = self.grown(wk, i, DC, v[C].astype(np.float64) - l1, r, wk.member(C, held), H, bound)
        if out is None:
            return "fail", i, outside
        r2, actC, a, S, H, full = out
        if full and bound(r2):
            wk.stats.by_bound += 1
            H.release()
            return "done", (i, C[actC], a / l2), outside
        return "pend", (i, r2, C[S], H, C), outside


def newton_rounds(D: torch.Tensor, Q: torch.Tensor, queries: list[HandOff], l1: float, l2: float, *, tol: float,
                  gtol: float, nrm: float, corpus: Any, max_rounds: int, grow: int, widen: float, band_max: int,
                  rough: int, stats: NewtonStats, guards: torch.Tensor,
                  fired: torch.Tensor) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], list[int]]:
    """Steps 1–3 of the module docstring for the handed-over ``queries``, shared among the
    caller's threads (:class:`_Workers`). Returns the finished pieces (query rows, indices,
    values) and the rows left for the full-corpus fallback."""
    Dn = D.numpy()
    sv = _Solver(Dn, Q.numpy().astype(np.float64), l1, l2, inner=0.5 * tol / max(nrm, 1e-30),  # ‖∇f‖ goal: tol/2
                 ok=l1 + 0.5 * gtol, nrm=nrm, grow=grow, widen=widen, band_max=band_max, rough=rough)
    stats.queries += len(queries)
    stats.from_guard += sum(1 for h in queries if len(h.band))
    done: list[_Done] = []
    workers = _Workers(Dn, min(_wide_count(D.device), max(len(queries), 1)))
    try:
        pend: list[_Pending] = []
        for kind, out in workers.map(sv.first, queries):
            if kind == "done":
                done.append(out)
            elif kind == "pend":
                pend.append(out)
        # then passes: the exact gradient over the corpus certifies; else the candidates are the
        # documents within widen·‖∇f‖ of λ1 (and those H holds), and the pass's bound may certify
        for _ in range(max_rounds):
            if not pend:
                break
            nxt: list[_Pending] = []
            for s in range(0, len(pend), corpus.chunk):
                part = pend[s:s + corpus.chunk]
                V = corpus.product(torch.from_numpy(np.stack([p[1] for p in part]).astype(_F32))).numpy()
                rows = [p[0] for p in part]
                first = [int(guards[i]) == 0 for i in rows]
                guards[rows] += 1
                results = workers.map(sv.after_pass, [(p, V[k]) for k, p in enumerate(part)])
                for k, (kind, out, outside) in enumerate(results):
                    if first[k] and outside:
                        fired[rows[k]] = True  # the query's first pass found documents outside its support
                    if kind == "done":
                        done.append(out)
                    elif kind == "pend":
                        nxt.append(out)
            pend = nxt
    finally:
        workers.close(stats)
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
