"""The few BLAS and LAPACK kernels of the Newton half (:mod:`.newton`), called without the
interpreter lock.

scipy's f2py wrappers (``scipy.linalg.blas.ssyrk``, ``scipy.linalg.lapack.spotrf`` and the like)
hold the lock for the whole call, so threads running them take turns: two threads each
factorising d × d matrices took as long as one doing both. The same routines of scipy's BLAS and
LAPACK are reached here through the function pointers that ``scipy.linalg.cython_blas`` and
``scipy.linalg.cython_lapack`` export (scipy's public Cython interface) and called by ctypes,
which releases the lock for a foreign call: the same arithmetic, 1.8–1.9× the throughput with two
threads. (torch's Cholesky releases the lock too but took 1.3× as long as this one at d = 384.)
Every array is checked before a call (dtype, order, shape), since the routines trust what they
are given.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

_INT = ctypes.POINTER(ctypes.c_int)
_CHAR = ctypes.c_char_p
_PTR = ctypes.c_void_p
# argument types of each routine, in the reference BLAS / LAPACK order (all by reference)
_SIGNATURES = {
    "syrk": (_CHAR, _CHAR, _INT, _INT, _PTR, _PTR, _INT, _PTR, _PTR, _INT),
    "trsv": (_CHAR, _CHAR, _CHAR, _INT, _PTR, _INT, _PTR, _INT),
    "symv": (_CHAR, _INT, _PTR, _PTR, _INT, _PTR, _INT, _PTR, _PTR, _INT),
    "potrf": (_CHAR, _INT, _PTR, _INT, _INT),
}
_FUNCS: dict[str, Callable[..., None]] = {}
_INTS: dict[int, Any] = {}
_SCALARS: dict[tuple[str, float], Any] = {}


def _func(name: str, dtype: np.dtype) -> Callable[..., None]:
    """The routine ``s<name>`` / ``d<name>`` of scipy's BLAS or LAPACK as a ctypes function."""
    full = ("s" if dtype == np.float32 else "d") + name
    fn = _FUNCS.get(full)
    if fn is None:
        if name == "potrf":
            from scipy.linalg import cython_lapack as lib
        else:
            from scipy.linalg import cython_blas as lib
        capsule = lib.__pyx_capi__[full]
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
        get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        fn = _FUNCS[full] = ctypes.CFUNCTYPE(None, *_SIGNATURES[name])(get_ptr(capsule, get_name(capsule)))
    return fn


def _int(v: int) -> Any:
    """A reference to a constant int (cached: d and 1 are passed on every call)."""
    ref = _INTS.get(v)
    if ref is None:
        ref = _INTS[v] = ctypes.byref(ctypes.c_int(v))
    return ref


def _scalar(v: float, dtype: np.dtype) -> Any:
    key = (dtype.char, v)
    ref = _SCALARS.get(key)
    if ref is None:
        ref = _SCALARS[key] = ctypes.byref((ctypes.c_float if dtype == np.float32 else ctypes.c_double)(v))
    return ref


def _square(M: np.ndarray, writeable: bool = False) -> int:
    """d for a square float32/float64 matrix in Fortran order (else ValueError)."""
    if M.ndim != 2 or M.shape[0] != M.shape[1] or not M.flags.f_contiguous or (writeable and not M.flags.writeable):
        raise ValueError(f"expected a{' writeable' if writeable else ''} square matrix in Fortran order")
    if M.dtype not in (np.float32, np.float64):
        raise ValueError(f"expected float32 or float64, got {M.dtype}")
    return M.shape[0]


def _vector(x: np.ndarray, d: int, dtype: np.dtype) -> np.ndarray:
    """A new contiguous copy of ``x`` (d entries) in ``dtype``."""
    y = np.array(x, dtype=dtype, copy=True).reshape(-1)
    if y.shape[0] != d:
        raise ValueError(f"expected a vector of {d} entries, got {y.shape[0]}")
    return y


def syrk_upper(M: np.ndarray, rows: np.ndarray, alpha: float) -> None:
    """``M ← M + alpha·rowsᵀ rows`` on M's upper triangle, in place (M: d × d, Fortran order;
    rows: k × d in M's dtype)."""
    d = _square(M, writeable=True)
    if rows.ndim != 2 or rows.shape[1] != d or rows.dtype != M.dtype:
        raise ValueError(f"rows must be k × {d} in {M.dtype}")
    k = rows.shape[0]
    if k == 0:
        return
    rows = np.ascontiguousarray(rows)
    # in Fortran's view rows is the d × k matrix A = rowsᵀ: C ← alpha·A·Aᵀ + C
    _func("syrk", M.dtype)(b"U", b"N", _int(d), _int(k), _scalar(alpha, M.dtype), rows.ctypes.data, _int(d),
                           _scalar(1.0, M.dtype), M.ctypes.data, _int(d))


def potrf_upper(M: np.ndarray, out: np.ndarray) -> bool:
    """The upper Cholesky factor U of M (M = UᵀU, from M's upper triangle) written to ``out``
    (d × d, Fortran order, M's dtype; its lower triangle is left as M's); whether M is positive
    definite."""
    d = _square(M)
    if _square(out, writeable=True) != d or out.dtype != M.dtype:
        raise ValueError("out must be a matrix of M's shape and dtype")
    np.copyto(out, M)
    info = ctypes.c_int(0)
    _func("potrf", M.dtype)(b"U", _int(d), out.ctypes.data, _int(d), ctypes.byref(info))
    return info.value == 0


def trsv_upper(U: np.ndarray, x: np.ndarray, transpose: bool) -> np.ndarray:
    """``U⁻¹x`` (or ``U⁻ᵀx``) for the upper triangle of U (d × d, Fortran order), as a new array
    of U's dtype."""
    d = _square(U)
    y = _vector(x, d, U.dtype)
    _func("trsv", U.dtype)(b"U", b"T" if transpose else b"N", b"N", _int(d), U.ctypes.data, _int(d), y.ctypes.data,
                           _int(1))
    return y


def symv_upper(M: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``M z`` from M's upper triangle (d × d, Fortran order), as a new array of M's dtype."""
    d = _square(M)
    x = _vector(z, d, M.dtype)
    y = np.zeros(d, dtype=M.dtype)
    _func("symv", M.dtype)(b"U", _int(d), _scalar(1.0, M.dtype), M.ctypes.data, _int(d), x.ctypes.data, _int(1),
                           _scalar(0.0, M.dtype), y.ctypes.data, _int(1))
    return y
