"""Batched solver for the non-negative elastic net behind NNN decoding (the NNN paper, "Non-negative
Elastic Net Decoding for Information Retrieval", eq. (1); notation table below).

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

For λ2 > 0 on CPU a query whose free set outgrows ``newton_above`` is finished instead by a
semi-smooth Newton method in d dimensions (:mod:`retrievers.fista.newton`), with its own
working sets, passes and certificate (the same KKT tolerance over the whole corpus).

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

Notation
--------
The paper writes the problem for one query with D as the d × n matrix of document columns; the
code keeps one document per *row* of ``D`` (n × d) and one query per row of ``Q`` (B × d), so the
paper's ``D w`` is the code's ``x @ D`` (``X @ D`` for a batch).

=============================  ====================================  =====================================
paper / this docstring         code                                  where
=============================  ====================================  =====================================
q (query embedding)            ``Q`` (B × d), ``q`` (one row)         every solver
D (d × n, unit columns)        ``D`` (n × d, unit rows)               every solver
w ≥ 0 (the coefficients)       ``X`` (B × n dense), ``Solution``      :mod:`.problem`
λ1 (the ℓ1 weight)             ``l1``                                 every solver
λ2 (the ℓ2 weight)             ``l2``                                 every solver
objective (1):                 :func:`objective` (float64)            :mod:`.problem`
½‖Dw − q‖² + λ1‖w‖₁ + λ2/2‖w‖²
L (Lipschitz constant)         :func:`lipschitz`, ``L``, ``L_full``   :mod:`.problem`, :mod:`.core`
FISTA iterate x_t, z_t, θ_t     ``X``, ``Z``, ``theta``                :func:`.core._fista_core`
(eq. (5))
r = q − Dw (the residual)      ``R`` (b × d), ``r``                   :mod:`.screening`
KKT (A): g_j = λ1 on w_j > 0   :func:`kkt_residual`,                  :mod:`.problem`
KKT (B): g_j ≤ λ1 on w_j = 0   ``Solution.kkt``, ``_kkt_from_grad``
(g_j = D_jᵀr − λ2 w_j)
tolerance ε on the KKT         ``tol`` (``guard_tol`` off W)          :class:`ScreeningOptions`
residual
support A (the retrieved set)  ``X > 0``, ``Solution.indices``        :mod:`.problem`
G_AA (Gram block), b = D_S q   ``G``, ``b`` / ``bW``                  :mod:`.core`, :mod:`.active_set`
H = G + λ2 I, c = b − λ1       ``H``, ``c``                           :func:`active_set_qp`
free set F (active set)        ``F``, ``free``                        :mod:`.active_set`
working set W                  ``_Stage.W`` (``Wv``: not padding)     :mod:`.screening`
check set C                    ``_Stage.C`` (``Cv``), values ``gC``   :mod:`.screening`
                               at reference residual ``Rc``
bound thr on D_jᵀr_o off C     ``_Stage.thr`` at ``_Stage.Ro``        :mod:`.screening`
λ1 + ε (the violation level)   ``_Exact.thr_ok``                      :mod:`.screening`
M, P, K (candidates, pool,     ``candidates``, ``pool``, ``band``     :class:`ScreeningOptions`
band)
d × d matrix λ2 I + D_Fᵀ D_F   ``Mf`` / ``M``                         :func:`active_set_qp_dual`
=============================  ====================================  =====================================

Layout
------
* :mod:`retrievers.fista.problem` — tensors, :func:`lipschitz`, :func:`objective`,
  :func:`kkt_residual`, :class:`Solution`.
* :mod:`retrievers.fista.core` — FISTA: :func:`fista`, :func:`gram_fista`, :func:`solve_full`,
  :func:`dense_candidates`.
* :mod:`retrievers.fista.active_set` — the exact QP on a working set: :func:`active_set_qp`,
  :func:`active_set_qp_dual`.
* :mod:`retrievers.fista.passes` — the corpus-sized products (dense top-P, guard pass).
* :mod:`retrievers.fista.screening` — working sets, check sets, certificate:
  :class:`ScreeningOptions`, :func:`screened_solve`.
* :mod:`retrievers.fista.newton` — the large-support half for λ2 > 0 on CPU: semi-smooth Newton
  on the dual in d dimensions, :func:`~retrievers.fista.newton.newton_rounds`.
"""

from __future__ import annotations

from .active_set import active_set_qp, active_set_qp_dual
from .core import dense_candidates, fista, gram_fista, solve_full
from .passes import _topk_rows  # noqa: F401
from .problem import _SMALL_WORK, Solution, _cpu_threads, as_tensor, kkt_residual, lipschitz, objective  # noqa: F401
from .screening import ScreeningOptions, _pair_dots, screened_solve  # noqa: F401

__all__ = [
    "ScreeningOptions",
    "Solution",
    "active_set_qp",
    "active_set_qp_dual",
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
# not public, re-exported for the callers that import them from here: _SMALL_WORK and _cpu_threads
# (retrievers.nnn_tr, retrievers.colt_train), _pair_dots and _topk_rows (tests/test_fista.py)
