"""Batched solver for the non-negative elastic net behind NNN decoding (the NNN paper, "Non-negative
Elastic Net Decoding for Information Retrieval", eq. (1)): for queries ``Q`` (B × d) and a corpus
``D`` (n × d, unit rows) it finds, per query, ``argmin_{x ≥ 0} ½‖Dᵀx − q‖² + λ1·Σ_j x_j +
(λ2/2)‖x‖²`` in float32 torch on the tensors' device, by FISTA for a fixed number of iterations
or to a KKT tolerance (:func:`fista`, :func:`solve_full`), or by working sets grown from KKT
violators with a certificate over the whole corpus (:func:`screened_solve`). The iteration, the
modes, the KKT conditions, the exact solve, the notation (the paper's symbols against the code's
names) and the modules are described in docs/methods/nnn.md#the-solver.
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
