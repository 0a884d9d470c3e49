"""The Newton half of the exact solve (retrievers/fista/newton.py) against independent solvers:
the working-set minimiser of f against L-BFGS-B on the primal, the Newton systems against a
direct solve, and whole solves that hand every query over against the full-corpus minimiser, with
each way a query can end (the handed-over set's bound, a pass's gradient, a pass's bound, the
fallback)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrievers.fista import kkt_residual, screened_solve, solve_full
from retrievers.fista.newton import NewtonStats, _Hessian, minimise_on
from tests.test_fista import assert_same_solution, clustered, coordinate_descent, f_np, lbfgsb


def small(n: int = 60, d: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    D, Q = clustered(n, d, 1, seed, per=6)
    return D.numpy(), Q[0].double().numpy()


@pytest.mark.parametrize("l1,l2", [(0.01, 0.1), (0.05, 1.0), (0.02, 0.01)])
def test_minimiser_on_a_working_set_is_the_primal_minimiser(l1: float, l2: float) -> None:
    """x(r) = (D r − λ1)₊/λ2 at the r found by semi-smooth Newton equals the primal minimiser
    found by coordinate descent (float64; L-BFGS-B stalls at λ2 = 0.01 here), from a cold start
    (r = q, nothing in M) and from a warm one."""
    D, q = small()
    ref = coordinate_descent(D.astype(np.float64), q, l1, l2, sweeps=20000)
    for start in ("cold", "warm"):
        stats = NewtonStats()
        H = _Hessian(D.shape[1], l2, stats)
        S = np.zeros(len(D), dtype=bool)
        r0 = q.copy()
        if start == "warm":  # a nearby point and the Hessian of its active set
            r0 = q - 0.9 * (D.T.astype(np.float64) @ ref)
            S = (D @ r0.astype(np.float32)) - l1 > 0
            H.rebuild(D[S])
        r, act, a, gn, held, conv = minimise_on(D, q, r0, l1, l2, 1e-9, S, H)
        assert conv and gn <= 1e-9
        x = np.where(act, a, 0.0) / l2
        np.testing.assert_allclose(x, ref, atol=1e-8)
        assert f_np(D.astype(np.float64), q, x, l1, l2) <= f_np(D.astype(np.float64), q, ref, l1, l2) + 1e-10
        # the residual of x is r up to the gradient
        assert np.abs(q - D.T.astype(np.float64) @ x - r).max() < 1e-8
        assert stats.newton >= 1 and stats.factorisations >= 1
        # H holds exactly the rows marked: M = λ2 I + D_Sᵀ D_S
        Dh = D[held].astype(np.float64)
        np.testing.assert_allclose(H.full, l2 * np.eye(D.shape[1]) + Dh.T @ Dh, atol=1e-4)


def test_newton_systems_by_conjugate_gradients_equal_a_direct_solve() -> None:
    """After a few rows change, M⁻¹g is found by conjugate gradients preconditioned by the old
    factor (no new factorisation) to its relative tolerance; after many, by a new factor."""
    rng = np.random.default_rng(0)
    d, l2 = 24, 0.1
    rows = rng.standard_normal((80, d)).astype(np.float32)
    stats = NewtonStats()
    H = _Hessian(d, l2, stats)
    H.rebuild(rows[:50])
    g = rng.standard_normal(d)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(H.full, g), rtol=1e-4)
    assert stats.factorisations == 1
    H.change(rows[50:53], rows[:2])  # five rows: conjugate gradients on the old factor
    z = H.solve(g, rtol=1e-8)
    assert stats.factorisations == 1 and stats.cg >= 1
    want = np.linalg.solve(H.full, g)
    assert np.linalg.norm(H.full @ z - g) <= 1e-6 * np.linalg.norm(g)
    np.testing.assert_allclose(z, want, rtol=1e-4, atol=1e-6)
    H.change(rows[53:80], np.zeros((0, d), np.float32))  # 27 more: a new factorisation
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(H.full, g), rtol=1e-4)
    assert stats.factorisations == 2


@pytest.mark.parametrize("l1,l2", [(0.01, 0.1), (0.03, 1.0), (0.01, 0.01), (0.01, 0.005)])
def test_every_query_handed_over_equals_the_full_corpus_minimiser(l1: float, l2: float) -> None:
    """newton_above = 0: every query goes to the Newton half at its first working-set solve. The
    answers equal full-corpus FISTA's and L-BFGS-B's, pass the whole-corpus KKT certificate, and
    every query ends by a certificate (no fallback). (λ2 = 0.005: M and its factor in float64.)"""
    D, Q = clustered(1500, 16, 6, 4, per=30)
    tol = 1e-6
    sol = screened_solve(D, Q, l1, l2, tol=tol, newton_above=0)
    st = sol.stats
    assert st["newton_queries"] == 6 and st["fallback"] == 0
    assert st["newton_by_bound"] + st["newton_by_pass"] == 6
    assert st["support_max"] > 16  # more than d
    assert float(sol.kkt(D, Q, l1, l2).max()) < 2 * tol
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2 * tol
    assert_same_solution(sol, solve_full(D, Q, l1, l2, tol=tol), atol=2e-4)
    X = sol.to_dense().double().numpy()
    ref = lbfgsb(D.double().numpy(), Q[0].double().numpy(), l1, l2)
    np.testing.assert_allclose(X[0], ref, atol=1e-4)
    # the same answer as the active-set solve alone
    assert_same_solution(sol, screened_solve(D, Q, l1, l2, tol=tol, newton=False), atol=2e-4)


def test_a_handed_over_query_is_certified_by_its_own_bound() -> None:
    """A pool that holds the whole support: the handed-over query is solved on its pool and the
    pool's bound (every other document's dense score) certifies it without a pass."""
    D, Q = clustered(2000, 32, 8, 0)
    l1, l2 = 0.6, 0.1
    sol = screened_solve(D, Q, l1, l2, tol=1e-6, pool=600, newton_above=0)
    st = sol.stats
    assert st["newton_queries"] == 8 and st["newton_by_bound"] == 8 and st["corpus_passes"] == 1.0
    assert st["certified_by_bound"] == 8
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2e-6
    assert torch.equal(sol.indices, screened_solve(D, Q, l1, l2, tol=1e-6, pool=600, newton=False).indices)


def test_handed_over_queries_left_without_passes_fall_back() -> None:
    """max_rounds = 0: a handed-over query its own bound cannot certify gets no pass and is
    solved by full-corpus FISTA; the answer is the same."""
    D, Q = clustered(1500, 16, 6, 4, per=30)
    l1, l2, tol = 0.01, 0.1, 1e-6
    sol = screened_solve(D, Q, l1, l2, tol=tol, newton_above=0, max_rounds=0)
    st = sol.stats
    assert st["newton_queries"] == 6 and st["fallback"] == 6 - st["newton_by_bound"] > 0
    assert float(sol.kkt(D, Q, l1, l2).max()) < 2 * tol


def test_lasso_and_large_supports_stay_in_the_active_set_solve() -> None:
    """λ2 = 0 (l1-fix) has no strongly convex f: nothing is handed over; neither is a query
    whose free set stays below newton_above."""
    D, Q = clustered(1500, 16, 6, 4, per=30)
    assert screened_solve(D, Q, 0.01, 0.0, tol=1e-6).stats["newton_queries"] == 0
    assert screened_solve(D, Q, 0.01, 0.1, tol=1e-6, newton_above=10**6).stats["newton_queries"] == 0


@pytest.mark.parametrize("l1,l2", [(0.01, 0.1), (0.03, 1.0)])
def test_queries_handed_over_by_a_guard_pass_equal_the_full_corpus_minimiser(l1: float, l2: float) -> None:
    """Working sets of four, so every first solve stays below newton_above = 8 and is certified
    only by a guard pass; the pass finds more violators than newton_above and hands each query
    over with its band (the violators, value descending, and the band's last value as the bound
    on every other document). The answers equal full-corpus FISTA's and pass the certificate."""
    D, Q = clustered(1500, 16, 6, 4, per=30)
    tol = 1e-6
    sol = screened_solve(D, Q, l1, l2, tol=tol, candidates=4, pool=4, newton_above=8)
    st = sol.stats
    assert st["newton_from_guard"] == st["newton_queries"] == 6 and st["fallback"] == 0
    assert st["support_max"] > 16
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2 * tol
    assert_same_solution(sol, solve_full(D, Q, l1, l2, tol=tol), atol=2e-4)



@pytest.mark.parametrize("l1,l2", [(0.01, 0.1), (0.03, 1.0)])
def test_queries_shared_among_threads_equal_the_one_thread_solve(l1: float, l2: float) -> None:
    """With three threads the handed-over queries are solved side by side (each on one BLAS
    thread); the answers are those of the one-thread solve: the same supports, coefficients and
    ranking, the same certificates, and the same Newton counts."""
    import threading

    from retrievers.fista import newton as newton_mod

    D, Q = clustered(1500, 16, 9, 4, per=30)
    tol = 1e-6
    used: set[int] = set()
    minimise = newton_mod.minimise_on

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        used.add(threading.get_ident())
        return minimise(*a, **k)

    prev = torch.get_num_threads()
    mp = pytest.MonkeyPatch()
    mp.setattr(newton_mod, "minimise_on", spy)
    try:
        torch.set_num_threads(1)
        one = screened_solve(D, Q, l1, l2, tol=tol, newton_above=0)
        assert len(used) == 1
        used.clear()
        torch.set_num_threads(3)
        three = screened_solve(D, Q, l1, l2, tol=tol, newton_above=0)
        assert len(used) > 1  # the queries went to more than one thread
    finally:
        mp.undo()
        torch.set_num_threads(prev)
    assert one.stats["newton_queries"] == three.stats["newton_queries"] == 9
    for key in ("newton_steps", "newton_factorisations", "newton_by_pass", "newton_by_bound", "corpus_passes"):
        assert one.stats[key] == three.stats[key], key
    assert torch.equal(one.indices, three.indices)  # the same supports in the same (ranking) order
    torch.testing.assert_close(one.values, three.values, atol=1e-6, rtol=0)
    assert float(three.kkt(D, Q, l1, l2).max()) < 2 * tol
    assert_same_solution(three, solve_full(D, Q, l1, l2, tol=tol), atol=2e-4)
