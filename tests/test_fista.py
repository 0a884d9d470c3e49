"""The non-negative elastic-net solver against independent solvers (scipy NNLS, L-BFGS-B, a
hand-written coordinate descent), its KKT certificate, the active-set solves (Gram and d-space
forms), and the exact working-set solve + whole-corpus certificate against the full-corpus solve,
from small supports to supports larger than the dimension (λ1 = 0.01)."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize, nnls

from retrievers.fista import (
    ScreeningOptions,
    Solution,
    _pair_dots,
    _topk_rows,
    active_set_qp,
    active_set_qp_dual,
    fista,
    gram_fista,
    kkt_residual,
    lipschitz,
    objective,
    screened_solve,
    solve_full,
)


def one_blas_thread() -> contextlib.AbstractContextManager:
    """scipy's tiny BLAS calls are far slower multi-threaded on a busy machine."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(1)


def unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def problem(n: int, d: int, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm documents; each query is a noisy sum of three documents (non-trivial supports)."""
    rng = np.random.default_rng(seed)
    D = unit_rows(rng.standard_normal((n, d)))
    pick = rng.integers(0, n, size=(b, 3))
    Q = unit_rows(D[pick].sum(1) + 0.3 * rng.standard_normal((b, d)))
    return D, Q


def f_np(D: np.ndarray, q: np.ndarray, x: np.ndarray, l1: float, l2: float) -> float:
    r = D.T @ x - q
    return 0.5 * r @ r + l1 * x.sum() + 0.5 * l2 * x @ x


def coordinate_descent(D: np.ndarray, q: np.ndarray, l1: float, l2: float, sweeps: int = 4000) -> np.ndarray:
    """Cyclic coordinate descent for the non-negative elastic net, in float64."""
    G = D @ D.T
    b = D @ q
    x = np.zeros(D.shape[0])
    g = b.copy()  # b − G x
    for _ in range(sweeps):
        delta = 0.0
        for j in range(x.size):
            new = max(0.0, (g[j] + G[j, j] * x[j] - l1) / (G[j, j] + l2))
            if new != x[j]:
                g -= G[:, j] * (new - x[j])
                delta = max(delta, abs(new - x[j]))
                x[j] = new
        if delta < 1e-13:
            break
    return x


@pytest.mark.parametrize("n,d,l2,seed", [(40, 15, 0.1, 0), (60, 20, 0.5, 1), (30, 12, 1.0, 2)])
def test_l1_zero_matches_scipy_nnls(n: int, d: int, l2: float, seed: int) -> None:
    D, Q = problem(n, d, 3, seed)
    X, st = fista(D, Q, 0.0, l2, tol=1e-6)
    assert bool(st["converged"].all())
    A = np.vstack([D.T, np.sqrt(l2) * np.eye(n)])  # [Dᵀ; √λ2 I] x ≈ [q; 0]
    for i, q in enumerate(Q):
        with one_blas_thread():
            ref, _ = nnls(A, np.concatenate([q, np.zeros(n)]))
        x = X[i].double().numpy()
        np.testing.assert_allclose(x, ref, atol=1e-4)
        assert abs(f_np(D, q, x, 0.0, l2) - f_np(D, q, ref, 0.0, l2)) < 1e-7


def test_unregularised_nnls_objective_matches() -> None:
    """λ1 = λ2 = 0 with n > d: the minimiser need not be unique, the minimum is."""
    D, Q = problem(45, 16, 3, 3)
    X, _ = fista(D, Q, 0.0, 0.0, tol=1e-6)
    for i, q in enumerate(Q):
        ref, _ = nnls(D.T, q)
        assert abs(f_np(D, q, X[i].double().numpy(), 0, 0) - f_np(D, q, ref, 0, 0)) < 1e-7


@pytest.mark.parametrize("n,d,l1,l2,seed", [
    (40, 15, 0.1, 0.1, 0),
    (50, 12, 0.05, 0.0, 1),   # non-negative lasso
    (30, 20, 0.3, 0.6, 2),
    (60, 10, 0.01, 0.03, 3),
    (45, 18, 0.3, 0.0, 4),
])
def test_l1_matches_coordinate_descent_and_lbfgsb(n: int, d: int, l1: float, l2: float, seed: int) -> None:
    D, Q = problem(n, d, 3, seed)
    X, st = fista(D, Q, l1, l2, tol=1e-6)
    assert bool(st["converged"].all())
    for i, q in enumerate(Q):
        x = X[i].double().numpy()
        assert 0 < (x > 0).sum() < n  # a non-trivial support
        cd = coordinate_descent(D, q, l1, l2)
        np.testing.assert_allclose(x, cd, atol=1e-4)
        assert f_np(D, q, x, l1, l2) <= f_np(D, q, cd, l1, l2) + 1e-7
        assert set(np.flatnonzero(x > 1e-6)) == set(np.flatnonzero(cd > 1e-6))
    # second reference on the first query: on x ≥ 0 the λ1 term is linear, so the objective is
    # smooth and L-BFGS-B with bounds applies
    q = Q[0]
    with one_blas_thread():
        lb = minimize(lambda z: f_np(D, q, z, l1, l2), np.zeros(n), jac=lambda z: D @ (D.T @ z - q) + l1 + l2 * z,
                      method="L-BFGS-B", bounds=[(0, None)] * n,
                      options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 5000}).x
    np.testing.assert_allclose(X[0].double().numpy(), lb, atol=1e-4)
    assert f_np(D, q, X[0].double().numpy(), l1, l2) <= f_np(D, q, lb, l1, l2) + 1e-7
    torch.testing.assert_close(objective(torch.tensor(D), torch.tensor(Q), X, l1, l2).float(),
                               torch.tensor([f_np(D, q, X[i].double().numpy(), l1, l2) for i, q in enumerate(Q)]).float())


@pytest.mark.parametrize("n,d,l1,l2,seed", [(40, 15, 0.1, 0.1, 0), (30, 20, 0.3, 0.6, 2), (60, 10, 0.01, 0.03, 3)])
def test_matches_sklearn_positive_elastic_net(n: int, d: int, l1: float, l2: float, seed: int) -> None:
    """sklearn's ElasticNet(positive=True) as an independent reference. sklearn minimises, for a
    design matrix A (n_samples × n_features) and target y,

        1/(2·n_samples)·‖y − A w‖² + α·ρ·‖w‖₁ + α·(1 − ρ)/2·‖w‖²   (ρ = l1_ratio).

    Ours, ½‖Dᵀx − q‖² + λ1·Σx + (λ2/2)‖x‖², is that problem with A = Dᵀ (d samples, n features),
    y = q and w = x once divided by d (a positive factor keeps the minimiser):
    α·ρ = λ1/d and α·(1 − ρ) = λ2/d, i.e. α = (λ1 + λ2)/d and ρ = λ1/(λ1 + λ2). No intercept."""
    from sklearn.linear_model import ElasticNet

    D, Q = problem(n, d, 3, seed)
    D, Q = D.astype(np.float32).astype(np.float64), Q.astype(np.float32).astype(np.float64)  # the solver's inputs
    alpha, rho = (l1 + l2) / d, l1 / (l1 + l2)
    X, st = fista(D, Q, l1, l2, tol=1e-6)
    scr = screened_solve(D, Q, l1, l2, candidates=8, tol=1e-6).to_dense()
    assert bool(st["converged"].all())
    for i, q in enumerate(Q):
        with one_blas_thread():
            ref = ElasticNet(alpha=alpha, l1_ratio=rho, positive=True, fit_intercept=False, tol=1e-14,
                             max_iter=200_000).fit(D.T, q).coef_
        assert 0 < (ref > 0).sum() < n  # a non-trivial support
        for x in (X[i].double().numpy(), scr[i].double().numpy()):
            np.testing.assert_allclose(x, ref, atol=1e-5)  # ε = 1e-6 on the KKT residual, float32
            assert set(np.flatnonzero(x > 0)) == set(np.flatnonzero(ref > 0))
            assert abs(f_np(D, q, x, l1, l2) - f_np(D, q, ref, l1, l2)) < 1e-9


def test_screening_options_object_and_keywords_agree() -> None:
    """The knobs travel as one frozen ScreeningOptions; keywords override it field by field."""
    D, Q = problem(300, 12, 6, 7)
    opts = ScreeningOptions(candidates=5, tol=1e-6, band=16)
    a = screened_solve(D, Q, 0.05, 0.1, opts)
    b = screened_solve(D, Q, 0.05, 0.1, candidates=5, tol=1e-6, band=16)
    c = screened_solve(D, Q, 0.05, 0.1, ScreeningOptions(candidates=200), candidates=5, tol=1e-6, band=16)
    for other in (b, c):
        assert torch.equal(a.indices, other.indices) and torch.equal(a.values, other.values)
        assert a.stats == other.stats
    assert a.stats["candidates"] == 5 and a.stats["band"] == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.tol = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        screened_solve(D, Q, 0.05, 0.1, candidate=5)  # a misspelt knob is refused


def test_kkt_holds_at_solution_and_detects_non_solutions() -> None:
    D, Q = problem(50, 16, 4, 5)
    l1, l2 = 0.1, 0.1
    X, st = fista(D, Q, l1, l2, tol=1e-5)
    res = kkt_residual(D, Q, X, l1, l2)
    assert float(res.max()) < 1e-5
    torch.testing.assert_close(res, st["residual"])
    bumped = X.clone()
    bumped[:, 0] += 0.05
    assert float(kkt_residual(D, Q, bumped, l1, l2).min()) > 1e-3
    assert float(kkt_residual(D, Q, torch.zeros_like(X), l1, l2).min()) > 1e-3
    # hand check of the definition on one query: g = D r − λ2 x; = λ1 on the support, ≤ λ1 off it
    x = X[0].double().numpy()
    g = D @ (Q[0] - D.T @ x) - l2 * x
    on = x > 0
    assert np.abs(g[on] - l1).max() < 1e-5 and (g[~on] <= l1 + 1e-5).all()


def test_iters_mode_is_the_fixed_T_protocol() -> None:
    D, Q = problem(80, 16, 3, 6)
    l1, l2 = 0.05, 0.1
    L = lipschitz(D, l2)
    assert L == pytest.approx(1.01 * (np.linalg.eigvalsh(D.T @ D)[-1] + l2), rel=1e-5)
    X1, _ = fista(D, Q, l1, l2, iters=1, L=L)
    expected = np.maximum(Q @ D.T - l1, 0) / L  # x₁: thresholded dense scoring
    np.testing.assert_allclose(X1.numpy(), expected, atol=1e-6)
    X3, st3 = fista(D, Q, l1, l2, iters=3, L=L)
    Xc, stc = fista(D, Q, l1, l2, tol=1e-6, L=L)
    assert (st3["iterations"] == 3).all()
    assert float((X3 - Xc).abs().max()) > 1e-2           # T = 3 is far from the minimiser …
    assert float(st3["residual"].min()) > 1e-2
    assert bool((objective(torch.tensor(D), torch.tensor(Q), X3, l1, l2)
                 > objective(torch.tensor(D), torch.tensor(Q), Xc, l1, l2) + 1e-4).all())
    X500, _ = fista(D, Q, l1, l2, iters=2000, L=L)        # … which plain FISTA approaches with T
    assert float((X500 - Xc).abs().max()) < 1e-3


def test_gram_form_equals_factor_form() -> None:
    D, Q = problem(40, 12, 3, 7)
    Dt, Qt = torch.tensor(D, dtype=torch.float32), torch.tensor(Q, dtype=torch.float32)
    G = (Dt @ Dt.T).expand(3, 40, 40).contiguous()
    b = Qt @ Dt.T
    Xg, st = gram_fista(G, b, 0.1, 0.2, tol=1e-6)
    Xf, _ = fista(D, Q, 0.1, 0.2, tol=1e-6)
    torch.testing.assert_close(Xg, Xf, atol=1e-5, rtol=0)
    # a masked (padded) candidate stays at zero and changes nothing
    valid = torch.ones(3, 40, dtype=torch.bool)
    valid[:, 5] = False
    Xm, _ = gram_fista(G, b, 0.1, 0.2, tol=1e-6, valid=valid)
    assert float(Xm[:, 5].abs().max()) == 0.0
    Xr, _ = fista(np.delete(D, 5, 0), Q, 0.1, 0.2, tol=1e-6)
    torch.testing.assert_close(torch.cat([Xm[:, :5], Xm[:, 6:]], 1), Xr, atol=1e-5, rtol=0)


def clustered(n: int, d: int, b: int, seed: int, per: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(max(1, n // per), d, generator=g), dim=1)
    lab = torch.randint(0, centres.shape[0], (n,), generator=g)
    D = torch.nn.functional.normalize(centres[lab] + 0.5 * torch.randn(n, d, generator=g) / d ** 0.5, dim=1)
    pick = torch.randint(0, n, (b, 3), generator=g)
    Q = torch.nn.functional.normalize(D[pick].sum(1) + 0.05 * torch.randn(b, d, generator=g), dim=1)
    return D, Q


def assert_same_solution(a: Solution, b: Solution, atol: float = 1e-4) -> None:
    """Same support and values within atol. A document sitting exactly on the KKT boundary
    (g_j = λ1) may carry a coefficient of ~1e-7 in one float32 solution and 0 in the other; both
    are optimal to the tolerance, so supports are compared above 1e-5."""
    A, B = a.to_dense(), b.to_dense()
    mismatch = (A > 0) != (B > 0)
    assert float(torch.where(mismatch, torch.maximum(A, B), 0.0).max()) < 1e-5, "different supports"
    assert int(mismatch.sum()) <= 1
    assert float((A - B).abs().max()) < atol


@pytest.mark.parametrize("candidates,chunk", [(8, 7), (3, 5), (8, 64)])
def test_screened_guard_fires_and_matches_full_solve(candidates: int, chunk: int) -> None:
    D, Q = clustered(600, 16, 24, 0)
    l1, l2, tol = 0.2, 0.1, 1e-6  # supports of 7–17 documents: more than the candidates
    full = solve_full(D, Q, l1, l2, tol=tol)
    scr = screened_solve(D, Q, l1, l2, candidates=candidates, tol=tol, chunk_size=chunk)
    assert scr.stats["guard_fired"] >= 1 and scr.stats["rounds_max"] >= 1
    assert scr.stats["fallback"] == 0
    assert_same_solution(scr, full)
    assert float(scr.kkt(D, Q, l1, l2).max()) < 2 * tol


def test_screened_guard_on_constructed_crowding() -> None:
    """Ten near-copies of document a crowd the dense top-5 of q = a + 0.6·b; b must enter the
    support, and only the whole-corpus guard can find it."""
    d = 8
    g = torch.Generator().manual_seed(1)
    a, b = torch.eye(d)[0], torch.eye(d)[1]
    dups = torch.nn.functional.normalize(a + 0.05 * torch.randn(10, d, generator=g), dim=1)
    others = torch.nn.functional.normalize(torch.randn(30, d, generator=g), dim=1)
    others[:, :2] = -others[:, :2].abs()  # unrelated documents point away from q
    others = torch.nn.functional.normalize(others, dim=1)
    D = torch.cat([dups, b[None], others])
    Q = torch.nn.functional.normalize((a + 0.6 * b)[None], dim=1)
    l1, l2 = 0.05, 0.05
    top5 = torch.topk(Q @ D.T, 5).indices
    assert 10 not in top5.tolist()  # b is outside the candidates
    scr = screened_solve(D, Q, l1, l2, candidates=5, tol=1e-6)
    full = solve_full(D, Q, l1, l2, tol=1e-6)
    assert scr.stats["guard_fired"] == 1
    assert 10 in scr.lists()[0][0].tolist()
    assert_same_solution(scr, full)


def test_screened_without_guard_firing_and_fallback() -> None:
    D, Q = clustered(600, 16, 24, 0)
    l1, l2, tol = 0.2, 0.1, 1e-6
    full = solve_full(D, Q, l1, l2, tol=tol)
    wide = screened_solve(D, Q, l1, l2, candidates=200, tol=tol)
    assert wide.stats["guard_fired"] == 0 and wide.stats["fallback"] == 0
    assert_same_solution(wide, full)
    # candidates given from outside (e.g. a faiss top-M) give the same answer
    cand = torch.topk(Q @ D.T, 200, dim=1).indices.numpy()
    assert_same_solution(screened_solve(D, Q, l1, l2, candidates=200, cand_idx=cand, tol=tol), full)
    # no guard rounds allowed: every query the guard flags is solved on the full corpus instead
    fb = screened_solve(D, Q, l1, l2, candidates=3, max_rounds=0, tol=tol)
    assert fb.stats["fallback"] == fb.stats["guard_fired"] >= 1
    assert_same_solution(fb, full)


def test_cpu_blas_paths_agree() -> None:
    """Large enough for the corpus-sized products to leave the single-thread path: numpy's and
    torch's BLAS give the same solutions."""
    D, Q = clustered(20000, 128, 128, 3, per=50)
    a = screened_solve(D, Q, 0.2, 0.1, candidates=8, cpu_blas="numpy")
    b = screened_solve(D, Q, 0.2, 0.1, candidates=8, cpu_blas="torch")
    assert a.stats["guard_fired"] == b.stats["guard_fired"] >= 1
    assert_same_solution(a, b, atol=1e-5)
    assert float(a.kkt(D, Q, 0.2, 0.1).max()) < 1e-4
    with pytest.raises(ValueError):
        screened_solve(D[:10], Q[:2], 0.1, 0.1, cpu_blas="mkl")


def test_solution_container_and_determinism() -> None:
    D, Q = clustered(300, 12, 6, 2)
    s1 = screened_solve(D, Q, 0.05, 0.1, candidates=20)
    s2 = screened_solve(D, Q, 0.05, 0.1, candidates=20)
    assert torch.equal(s1.indices, s2.indices) and torch.equal(s1.values, s2.values)
    for idx, val in s1.lists():
        assert (np.diff(val) <= 0).all() and (val > 0).all() and len(set(idx.tolist())) == len(idx)
    dense = s1.to_dense()
    assert dense.shape == (6, 300) and torch.equal((dense > 0).sum(1), s1.support_sizes)
    torch.testing.assert_close(s1.kkt(D, Q, 0.05, 0.1, chunk=4), kkt_residual(D, Q, dense, 0.05, 0.1),
                               atol=1e-6, rtol=0)
    with pytest.raises(ValueError):
        fista(D, Q, 0.1, 0.1)  # neither iters nor tol


# ---------------------------------------------------------------------------------------------
# the exact solve for every λ: block principal pivoting, the certificate, large supports


def test_topk_rows_matches_torch_topk() -> None:
    """The two-stage top-K (block maxima, then the best blocks) gives torch.topk's values, with
    ties, −inf entries (as the guard writes them) and a partial last block."""
    g = torch.Generator().manual_seed(0)
    for b, n, K in [(5, 10000, 50), (3, 100003, 300), (2, 50000, 7), (4, 1000, 500)]:
        V = torch.randn(b, n, generator=g)
        V[:, ::97] = 2.5  # many ties, some of them in the top-K
        V[0, :5000] = -math.inf
        v, i = _topk_rows(V, K)
        assert torch.equal(v, torch.topk(V, K, dim=1).values)
        assert torch.equal(V.gather(1, i), v)
        assert all(len(set(r.tolist())) == K for r in i)


def kkt_norm(H: torch.Tensor, c: torch.Tensor, x: torch.Tensor) -> float:
    """The norm of the KKT residual of ``min_{x≥0} ½xᵀHx − cᵀx`` at x: the gradient on the support,
    its negative part off it."""
    y = H @ x - c
    return float(torch.where(x > 0, y, y.clamp_max(0.0)).norm())


@pytest.mark.parametrize("l1,l2", [(0.1, 0.1), (0.01, 0.01), (0.01, 1.0), (0.05, 0.3)])
def test_active_set_forms_match_coordinate_descent(l1: float, l2: float) -> None:
    """Block principal pivoting, in Gram form and in d dimensions, against coordinate descent;
    λ1 = 0.01 with λ2 = 1 gives supports larger than d.

    The solver is held to the reference on float64 data. On the float32 data it is given in use,
    its answer moves with the rounding of G and b, by at most ‖ΔH x₃₂ − Δc‖ / λmin(H) (H is
    strongly convex with modulus λmin(H) ≥ λ2, so the minimiser is Lipschitz in the data); the
    test computes that bound from the rounding actually present, rather than a fixed atol that
    one BLAS's float32 Gram meets and another's misses at λ2 = 0.01."""
    D, Q = clustered(60, 8, 3, 5, per=10)
    D64, Q64 = D.double(), Q.double()
    G = (D @ D.T).expand(3, 60, 60).contiguous()
    A = D.expand(3, 60, 8).contiguous()
    b = Q @ D.T
    G64, b64 = (D64 @ D64.T).expand(3, 60, 60).contiguous(), Q64 @ D64.T
    valid = torch.ones(3, 60, dtype=torch.bool)
    res64 = active_set_qp(G64, b64, l1, l2, valid=valid, tol=1e-10)
    dual64, M = active_set_qp_dual(A, b64, l1, l2, valid=valid, free=b64 > l1, tol=1e-10)
    res = active_set_qp(G, b, l1, l2, valid=valid, tol=1e-8)
    dual, _ = active_set_qp_dual(A, b, l1, l2, valid=valid, free=b > l1, tol=1e-8)
    assert all(bool(r.converged.all()) for r in (res64, dual64, res, dual))
    H64 = G64[0] + l2 * torch.eye(60, dtype=torch.float64)
    mu = float(torch.linalg.eigvalsh(H64)[0])
    assert mu >= l2 * (1 - 1e-12)
    sizes = []
    for i in range(3):
        cd = coordinate_descent(D64.numpy(), Q64[i].numpy(), l1, l2)
        np.testing.assert_allclose(res64.x[i].numpy(), cd, atol=2e-8, rtol=0)
        np.testing.assert_allclose(dual64.x[i].numpy(), cd, atol=2e-8, rtol=0)
        assert set(np.flatnonzero(res64.x[i].numpy() > 0)) == set(np.flatnonzero(cd > 1e-9))
        sizes.append(int((cd > 0).sum()))
        # float32 data: within the perturbation bound of the rounding it carries, plus each
        # solution's own KKT residual (the problem it solves exactly differs from its data by that)
        x64 = res64.x[i]
        for x32, H32 in ((res.x[i], G[i].double()), (dual.x[i], G64[i])):
            H32 = H32 + l2 * torch.eye(60, dtype=torch.float64)
            shift = (H32 - H64) @ x32 - (b[i].double() - b64[i])
            bound = (float(shift.norm()) + kkt_norm(H32, b[i].double() - l1, x32)
                     + kkt_norm(H64, b64[i] - l1, x64)) / mu
            assert float((x32 - x64).norm()) <= 1.001 * bound
        # the d × d matrix returned is λ2 I + D_Fᵀ D_F for the free set reached
        DF = D64[dual64.free[i]]
        torch.testing.assert_close(M[i], l2 * torch.eye(8, dtype=torch.float64) + DF.T @ DF, atol=1e-9, rtol=0)
    if (l1, l2) == (0.01, 1.0):
        assert min(sizes) > 8  # supports wider than the dimension
    # warm start from the optimal support: one iteration confirms it
    warm = active_set_qp(G, b, l1, l2, valid=valid, free=res.x > 0, tol=1e-8)
    assert warm.iterations.tolist() == [1, 1, 1]
    torch.testing.assert_close(warm.x, res.x, atol=1e-12, rtol=0)
    # a padded column stays at 0 and changes nothing else
    valid2 = valid.clone()
    valid2[:, 7] = False
    pad = active_set_qp(G, b, l1, l2, valid=valid2, tol=1e-8)
    keep = [j for j in range(60) if j != 7]
    assert float(pad.x[:, 7].abs().max()) == 0.0
    sub = active_set_qp(G[:, keep][:, :, keep].contiguous(), b[:, keep], l1, l2, tol=1e-8)
    torch.testing.assert_close(pad.x[:, keep], sub.x, atol=1e-10, rtol=0)


def test_active_set_reports_a_singular_block() -> None:
    """λ2 = 0 with more free documents than dimensions: the F-block is singular, flagged as
    failed (the exact solve then uses FISTA on that working set)."""
    D, Q = clustered(40, 6, 2, 1, per=10)
    G = (D @ D.T).expand(2, 40, 40).contiguous()
    res = active_set_qp(G, Q @ D.T, 0.0, 0.0, free=torch.ones(2, 40, dtype=torch.bool))
    assert bool(res.failed.all()) and not bool(res.converged.any())
    sol = screened_solve(D, Q, 0.01, 0.0, candidates=40, tol=1e-6)
    assert sol.stats["fista_rows"] >= 1 and sol.stats["fallback"] == 0
    assert float(sol.kkt(D, Q, 0.01, 0.0).max()) < 2e-6


def lbfgsb(D: np.ndarray, q: np.ndarray, l1: float, l2: float) -> np.ndarray:
    """An independent minimiser: on x ≥ 0 the λ1 term is linear, so the objective is smooth and
    L-BFGS-B with bounds applies (float64, whole corpus)."""
    n = D.shape[0]
    with one_blas_thread():
        return minimize(lambda z: f_np(D, q, z, l1, l2), np.zeros(n), jac=lambda z: D @ (D.T @ z - q) + l1 + l2 * z,
                        method="L-BFGS-B", bounds=[(0, None)] * n,
                        options={"ftol": 1e-16, "gtol": 1e-11, "maxiter": 50000, "maxcor": 30}).x


@pytest.mark.parametrize("l2,dual_above,newton", [(0.1, None, True), (1.0, None, True), (0.01, None, True),
                                                  (0.1, None, False), (0.1, 10**6, False), (0.01, None, False)])
def test_exact_small_l1_equals_full_corpus_minimiser(l2: float, dual_above: int | None, newton: bool) -> None:
    """λ1 = 0.01, the paper grid's smallest: supports of tens to hundreds of documents, beyond
    the 32 candidates and the dimension, mostly outside the dense top ranks. The exact solve
    (queries with large free sets finished by the Newton half by default; without it, the
    active-set solve in its d-space form, or in Gram form with dual_above = 10⁶) equals the
    full-corpus minimiser found independently by L-BFGS-B and passes the whole-corpus KKT
    certificate, without falling back to full-corpus FISTA."""
    D, Q = clustered(1500, 16, 6, 4, per=30)
    l1, tol = 0.01, 1e-6
    sol = screened_solve(D, Q, l1, l2, tol=tol, dual_above=dual_above, newton=newton)
    st = sol.stats
    assert st["fallback"] == 0 and st["guard_fired"] >= 1
    assert (st["newton_queries"] > 0) == newton
    assert (st["dspace_solves"] > 0) == (dual_above is None and not newton)
    if l2 >= 0.1:
        assert st["support_mean"] > 32 and st["support_max"] > 16  # more than M and d
    assert float(sol.kkt(D, Q, l1, l2).max()) < 2 * tol
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2 * tol
    X = sol.to_dense().double().numpy()
    Dn = D.double().numpy()
    for i, q in enumerate(Q.double().numpy()):
        ref = lbfgsb(Dn, q, l1, l2)
        assert f_np(Dn, q, X[i], l1, l2) <= f_np(Dn, q, ref, l1, l2) + 1e-9
        np.testing.assert_allclose(X[i], ref, atol=1e-4)
        assert set(np.flatnonzero(X[i] > 1e-4)) <= set(np.flatnonzero(ref > 0))
        assert set(np.flatnonzero(ref > 1e-4)) <= set(np.flatnonzero(X[i] > 0))


@pytest.mark.parametrize("case,l1,l2", [((600, 16, 24, 0), 0.2, 0.1), ((300, 12, 6, 2), 0.05, 0.1),
                                        ((600, 16, 8, 0), 0.06, 0.1), ((600, 16, 8, 0), 0.03, 0.3),
                                        ((600, 16, 8, 0), 0.1, 1.0), ((600, 16, 8, 0), 0.3, 0.01)])
def test_exact_ranking_equals_the_minimisers(case: tuple[int, int, int, int], l1: float, l2: float) -> None:
    """The ranking nnn-fix takes from a solution (support by coefficient, descending) is the
    minimiser's (L-BFGS-B on the whole corpus): identical on the cases of the screened tests
    above (the first two), and on grid points with larger supports identical up to coefficients
    that tie within the tolerance."""
    D, Q = clustered(*case)
    sol = screened_solve(D, Q, l1, l2, tol=1e-6)
    Dn = D.double().numpy()
    for (idx, _), q in zip(sol.lists(), Q.double().numpy()):
        ref = lbfgsb(Dn, q, l1, l2)
        want = [int(j) for j in np.lexsort((np.arange(ref.size), -ref)) if ref[j] > 1e-4]
        got = [int(j) for j in idx if ref[j] > 1e-4]
        assert set(idx.tolist()) >= set(want) and all(ref[j] <= 1e-4 for j in idx if j not in want)
        if case[2] > 8:  # the existing cases: the same ranking
            assert got == want
        else:
            assert all(ref[a] >= ref[b] - 2e-5 for a, b in zip(got, got[1:]))


def test_certified_from_the_bound_without_a_guard_pass() -> None:
    """Large λ1: the solution on the pool certifies itself — every document outside the pool
    has D_j·q ≤ the pool's last score, so D_j·r ≤ that score + ‖r − q‖ ≤ λ1 — after the dense
    pass alone. The independent dense KKT residual proves it optimal."""
    D, Q = clustered(2000, 32, 8, 0)
    l1, l2 = 0.6, 0.1
    sol = screened_solve(D, Q, l1, l2, tol=1e-6, pool=400)
    assert sol.stats["certified_by_bound"] == 8 and sol.stats["corpus_passes"] == 1.0
    assert int(sol.support_sizes.min()) >= 1
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2e-6
    # given candidates with the bound on everything else behave the same
    top = torch.topk(Q @ D.T, 400, dim=1)
    given = screened_solve(D, Q, l1, l2, tol=1e-6, cand_idx=top.indices, cand_bound=top.values[:, -1])
    assert given.stats["certified_by_bound"] == 8 and given.stats["corpus_passes"] == 0.0
    assert torch.equal(given.indices, sol.indices)
    # without the bound a guard pass certifies the same answer
    nob = screened_solve(D, Q, l1, l2, tol=1e-6, cand_idx=top.indices)
    assert nob.stats["certified_by_bound"] == 0 and nob.stats["corpus_passes"] == 1.0
    assert torch.equal(nob.indices, sol.indices)


def test_band_certifies_after_one_guard_pass() -> None:
    """λ1 = 0.03 on the perf script's clustered data: the first guard pass finds violators for
    every query; with a band of 800 documents below the violators most of them are then
    certified from that pass's band and bound, without a second pass; the answer is the
    minimiser (dense KKT residual; L-BFGS-B on one query)."""
    from tests.perf.fista import make_data

    D, Q = make_data(10000, 384, 16, 0, torch.device("cpu"))
    l1, l2 = 0.03, 0.1
    sol = screened_solve(D, Q, l1, l2, tol=1e-6, band=800)
    st = sol.stats
    assert st["guard_fired"] >= 12 and st["certified_by_bound"] >= 8
    assert st["corpus_passes"] < 2.5 and st["fallback"] == 0
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2e-6
    ref = lbfgsb(D.double().numpy(), Q[0].double().numpy(), l1, l2)
    np.testing.assert_allclose(sol.to_dense()[0].double().numpy(), ref, atol=1e-4)


@pytest.mark.parametrize("l1,d,gram", [(0.1, 64, True), (0.01, 64, False), (0.01, 16, False)])
def test_support_solve_recovers_the_minimiser_from_its_support(l1: float, d: int, gram: bool) -> None:
    """The perf script's floor (``support_solve``): with the active set fixed at the solver's
    supports, its residuals equal the minimiser's ``q − Dᵀx``, and ``x_S = (D_S r − λ1)/λ2`` its
    coefficients — in the Gram form (λ1 = 0.1: every |S| ≤ d) and in the d-space form (λ1 =
    0.01, where supports of 100–200 outgrow d); the residuals pass the whole-corpus KKT
    conditions (no document outside S above λ1 + tol). Shared among three threads it returns the
    same residuals in the same order."""
    from tests.perf.fista import make_data, support_solve

    D, Q = make_data(4000, d, 12, 2, torch.device("cpu"))
    l2, tol = 0.1, 1e-6
    sol = screened_solve(D, Q, l1, l2, tol=tol)
    Dn, Qn = D.numpy(), Q.numpy()
    lists = sol.lists()
    sizes = [len(idx) for idx, _ in lists]
    assert (max(sizes) <= d) == gram, sizes  # the form the case is for
    R = support_solve(Dn, Qn, [idx for idx, _ in lists], l1, l2)
    shared = support_solve(Dn, Qn, [idx for idx, _ in lists], l1, l2, threads=3)
    for a, b in zip(R, shared):  # the queries shared among threads: the same residuals, in order
        np.testing.assert_array_equal(a, b)
    D64 = Dn.astype(np.float64)
    for q, (idx, val), r in zip(Qn.astype(np.float64), lists, R):
        own = q - val.astype(np.float64) @ D64[idx]
        np.testing.assert_allclose(r, own, atol=2e-5)
        np.testing.assert_allclose((D64[idx] @ r - l1) / l2, val, atol=2e-4)
        off = np.delete(D64 @ r, idx)
        assert off.max() <= l1 + 1e-4


@pytest.mark.parametrize("l1,l2,chunk", [(0.01, 0.1, 3), (0.03, 0.3, 2)])
def test_bands_of_different_widths_bound_their_own_rows(l1: float, l2: float, chunk: int) -> None:
    """The band after a guard pass grows with the violators of its chunk of queries, so rows of
    different chunks carry bands of different widths; each row's bound is its own band's last
    value (the padding of a narrower band bounds nothing). Small chunks and bands make the widths
    differ; the answer passes the dense KKT check."""
    from tests.perf.fista import make_data

    D, Q = make_data(5000, 64, 12, 1, torch.device("cpu"))
    sol = screened_solve(D, Q, l1, l2, tol=1e-6, chunk_size=chunk, band=8, band_max=4096)
    assert sol.stats["guard_fired"] >= 6 and sol.stats["fallback"] == 0
    assert float(kkt_residual(D, Q, sol.to_dense(), l1, l2).max()) < 2e-6


def test_dense_top_k_comes_with_the_solution() -> None:
    D, Q = clustered(5000, 16, 6, 3)
    sol = screened_solve(D, Q, 0.1, 0.1, dense_k=40)
    ref = torch.topk(Q @ D.T, 40, dim=1)
    assert sol.dense_idx is not None and sol.dense_scores is not None
    torch.testing.assert_close(sol.dense_scores, ref.values, atol=1e-6, rtol=0)
    torch.testing.assert_close((Q[:, None, :] * D[sol.dense_idx]).sum(2), sol.dense_scores, atol=1e-6, rtol=0)
    assert screened_solve(D, Q, 0.1, 0.1).dense_idx is None


@pytest.mark.parametrize("block", [1 << 16, 3])
def test_pair_dots_equal_the_gathered_products(block: int) -> None:
    """The check set's exact values: D[docs[i]] · R[rows[i]] for (row, member) pairs in row order,
    some rows without a pair, computed per row in blocks, against the products written out."""
    g = torch.Generator().manual_seed(0)
    D = torch.randn(50, 8, generator=g)
    R = torch.randn(5, 8, generator=g)
    rows = torch.tensor([0, 0, 0, 2, 2, 4, 4, 4, 4, 4, 4, 4])
    docs = torch.randint(0, 50, (rows.numel(),), generator=g)
    want = (D[docs] * R[rows]).sum(1)
    torch.testing.assert_close(_pair_dots(D, docs, R, rows, block=block), want)
    assert _pair_dots(D, docs[:0], R, rows[:0]).shape == (0,)
