"""The BLAS and LAPACK kernels of the Newton half that release the interpreter lock
(retrievers/fista/_blas.py) against numpy's dense formulation, in both precisions, and their
checks of what they are given."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from retrievers.fista import _blas


def spd(d: int, k: int, dtype: type, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((k, d)).astype(dtype)
    return R, 0.1 * np.eye(d) + R.astype(np.float64).T @ R.astype(np.float64)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_kernels_equal_the_dense_formulation(dtype: type, tol: float) -> None:
    d = 48
    R, want = spd(d, 70, dtype)
    M = np.asfortranarray(0.1 * np.eye(d, dtype=dtype))
    M[np.tril_indices(d, -1)] = 7.0  # the lower triangle is never read nor written
    _blas.syrk_upper(M, R[:50], 1.0)
    _blas.syrk_upper(M, R[50:], 1.0)
    _blas.syrk_upper(M, R[60:], -1.0)  # rows leaving again
    _blas.syrk_upper(M, R[60:], 1.0)
    scale = np.abs(want).max()
    assert np.abs(np.triu(M) - np.triu(want)).max() <= tol * scale
    assert np.all(M[np.tril_indices(d, -1)] == 7.0)
    U = np.empty_like(M, order="F")
    assert _blas.potrf_upper(M, U)
    Ut = np.triu(U).astype(np.float64)
    assert np.abs(Ut.T @ Ut - want).max() <= 10 * tol * scale
    np.testing.assert_allclose(Ut, np.linalg.cholesky(want).T, rtol=0, atol=100 * tol * np.abs(Ut).max())
    x = np.random.default_rng(1).standard_normal(d)
    y = _blas.trsv_upper(U, x, transpose=True)  # U⁻ᵀx
    z = _blas.trsv_upper(U, y, transpose=False)  # U⁻¹U⁻ᵀx = M⁻¹x
    assert y.dtype == dtype and z.dtype == dtype
    np.testing.assert_allclose(Ut.T @ y, x, atol=50 * tol * np.abs(x).max())
    np.testing.assert_allclose(z, np.linalg.solve(want, x), rtol=1e-3 if dtype == np.float32 else 1e-10)
    np.testing.assert_allclose(_blas.symv_upper(M, x), want @ x, rtol=0, atol=tol * scale * np.abs(x).sum())


def test_a_matrix_that_is_not_positive_definite_is_reported() -> None:
    M = np.asfortranarray(np.diag([1.0, -1.0, 2.0]))
    assert not _blas.potrf_upper(M, np.empty_like(M, order="F"))


def test_bad_arguments_raise_before_any_call() -> None:
    M = np.zeros((4, 4), dtype=np.float32)  # C order
    with pytest.raises(ValueError, match="Fortran order"):
        _blas.syrk_upper(M, np.ones((2, 4), np.float32), 1.0)
    F = np.asfortranarray(M)
    with pytest.raises(ValueError, match="rows must be"):
        _blas.syrk_upper(F, np.ones((2, 4), np.float64), 1.0)
    with pytest.raises(ValueError, match="rows must be"):
        _blas.syrk_upper(F, np.ones((2, 5), np.float32), 1.0)
    with pytest.raises(ValueError, match="float32 or float64"):
        _blas.trsv_upper(np.asfortranarray(np.eye(4, dtype=np.int64)), np.ones(4), False)
    with pytest.raises(ValueError, match="4 entries"):
        _blas.symv_upper(F, np.ones(5))
    with pytest.raises(ValueError, match="shape and dtype"):
        _blas.potrf_upper(F, np.asfortranarray(np.zeros((4, 4))))
    F.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        _blas.syrk_upper(F, np.ones((2, 4), np.float32), 1.0)


def test_the_kernels_are_foreign_calls_that_release_the_lock() -> None:
    """ctypes releases the interpreter lock around a CFUNCTYPE call (not a PYFUNCTYPE one)."""
    for name in ("syrk", "trsv", "symv", "potrf"):
        for dt in (np.float32, np.float64):
            fn = _blas._func(name, np.dtype(dt))
            assert not fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI
