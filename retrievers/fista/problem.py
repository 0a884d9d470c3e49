"""The problem behind every solver of :mod:`retrievers.fista`: the tensors' form, the step
constant, the objective, the KKT residual, and the sparse :class:`Solution` (the notation is in
docs/methods/nnn.md#notation)."""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch

_BIG = 1e4  # magnitude used to pin padded coordinates at zero
_SMALL_WORK = 1 << 28  # B·n·d below which one CPU thread runs a full-corpus block (see _small_ops)


def as_tensor(x: Any, device: str | torch.device | None = None) -> torch.Tensor:
    """float32, contiguous torch tensor on ``device``.

    Parameters
    ----------
    x : array-like or torch.Tensor
        The values (a read-only numpy array is copied).
    device : str or torch.device, optional
        Where the tensor goes (default: where ``x`` already is / CPU).

    Returns
    -------
    torch.Tensor
        float32, contiguous.
    """
    if isinstance(x, torch.Tensor):
        t = x
    else:
        arr = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        if not arr.flags.writeable:  # e.g. a read-only memory-mapped embedding cache
            arr = arr.copy()
        t = torch.from_numpy(arr)
    if device is not None:
        t = t.to(device)
    return t.to(torch.float32).contiguous()


@contextlib.contextmanager
def _cpu_threads(device: torch.device, n: int):
    """Run a block with ``n`` intra-op CPU threads, restoring the previous count; no-op off CPU."""
    if device.type != "cpu" or n == torch.get_num_threads():
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


# the pools of the process (threadpoolctl's controller), found on first use
_POOLS: Any = None
# per Python thread: the thread counts saved by the outermost :func:`_one_thread` block, or None
_SAVED = threading.local()


def _pools() -> Any:
    """threadpoolctl's controller of the BLAS and OpenMP pools loaded in the process (numpy's and
    scipy's OpenBLAS, faiss's OpenBLAS and OpenMP, torch's OpenMP), built once: faiss and scipy's
    LAPACK are loaded first so their pools are among them."""
    global _POOLS
    if _POOLS is None:
        import faiss  # noqa: F401
        import scipy.linalg  # noqa: F401
        from threadpoolctl import ThreadpoolController

        _POOLS = ThreadpoolController()
    return _POOLS


def thread_counts() -> dict[str, int]:
    """The thread count of every pool the solver uses, by library file (and ``"torch"``: torch's
    intra-op count)."""
    out = {lib["filepath"]: int(lib["num_threads"]) for lib in _pools().info() if lib["num_threads"]}
    out["torch"] = torch.get_num_threads()
    return out


@contextlib.contextmanager
def _one_thread(device: torch.device) -> Iterator[None]:
    """Run a solve with every pool at one thread on CPU: torch's intra-op pool and each BLAS and
    OpenMP pool of the process (:func:`_pools`). The solve's kernels are small (d × d
    factorisations, products with a few hundred rows) and come from three libraries (torch,
    numpy, scipy) with pools of their own; with two or more threads each small call waits for its
    workers, and the workers of one pool, which spin a while after each call, take the cores
    another pool's call is waiting for (measured on 2 cores: 8 s with one thread, 21 s with two).
    The corpus-sized products run inside :func:`_all_threads` with the counts the pools had on
    entry; on leaving, every pool gets its count back. A block nested in another, or off CPU,
    changes nothing."""
    if device.type != "cpu" or getattr(_SAVED, "counts", None) is not None:
        yield
        return
    ctl = _pools()
    saved = {lib["filepath"]: int(lib["num_threads"]) for lib in ctl.info() if lib["num_threads"]}
    _SAVED.counts = (saved, torch.get_num_threads())
    try:
        with ctl.limit(limits=1), _cpu_threads(device, 1):
            yield
    finally:
        _SAVED.counts = None


@contextlib.contextmanager
def _all_threads(device: torch.device) -> Iterator[None]:
    """Inside :func:`_one_thread`: run a corpus-sized block (a product with the whole corpus, the
    dense top-P by faiss) with the thread counts the pools had before the solve; elsewhere a
    no-op."""
    counts = getattr(_SAVED, "counts", None)
    if device.type != "cpu" or counts is None:
        yield
        return
    saved, n = counts
    with _pools().limit(limits=saved), _cpu_threads(device, n):
        yield


def _wide_count(device: torch.device) -> int:
    """Inside :func:`_one_thread` on CPU: the intra-op thread count torch had before it (the
    caller's); elsewhere 1."""
    counts = getattr(_SAVED, "counts", None)
    return counts[1] if device.type == "cpu" and counts is not None else 1


def _small_ops(device: torch.device) -> contextlib.AbstractContextManager:
    """Run a block of many small tensor operations single-threaded on CPU.

    The Gram-form solves and the bookkeeping around them are long sequences of tiny operations
    (B × w × w with w ≈ 32, index/gather on B × M); intra-op threading buys nothing there and, on
    a busy machine, every parallel region can wait a scheduler slice for its second thread
    (measured: 12 ms instead of 0.03 ms per step). Large products re-enable all threads with
    :func:`_cpu_threads`. CUDA is unaffected."""
    return _cpu_threads(device, 1)


# ---------------------------------------------------------------------------------------------
# Problem quantities


def lipschitz(D: torch.Tensor, l2: float = 0.0, margin: float = 1.01, *, chunk: int = 65536,
              power_iters: int = 500) -> float:
    """Step constant ``margin·(λ_max(DᵀD) + λ2)`` for the full-corpus problem (L).

    d ≤ 1024: exact ``eigvalsh`` of the d × d matrix ``DᵀD`` (accumulated over row chunks in
    float64). Larger d: power iteration on ``DᵀD`` until the estimate changes by < 1e-7
    (relative); power iteration approaches λ_max from below, which the margin covers.

    Parameters
    ----------
    D : torch.Tensor, n × d
        The documents, one per row.
    l2 : float
        λ2.
    margin : float
        Factor above the exact constant (1.01).
    chunk : int
        Rows of D per product when accumulating ``DᵀD``.
    power_iters : int
        Cap on power iterations (d > 1024).

    Returns
    -------
    float
        L.
    """
    D = as_tensor(D)
    n, d = D.shape
    if d <= 1024:
        gram = torch.zeros(d, d, dtype=torch.float64, device=D.device)
        for s in range(0, n, chunk):
            blk = D[s:s + chunk]
            gram += (blk.T @ blk).double()
        with _small_ops(D.device):
            lam = float(torch.linalg.eigvalsh(gram)[-1])
    else:
        g = torch.Generator(device="cpu").manual_seed(0)
        v = torch.randn(d, generator=g).to(D.device)
        v /= v.norm()
        lam = 0.0
        for _ in range(power_iters):
            w = (v @ D.T) @ D
            new = float(w.norm())
            v = w / max(new, 1e-30)
            if abs(new - lam) <= 1e-7 * max(new, 1e-30):
                lam = new
                break
            lam = new
    return margin * (lam + l2)


def objective(D: torch.Tensor, Q: torch.Tensor, X: torch.Tensor, l1: float, l2: float) -> torch.Tensor:
    """Per-query objective ``½‖Dᵀx − q‖² + λ1·Σx + (λ2/2)‖x‖²``, in float64.

    Parameters
    ----------
    D, Q : torch.Tensor
        The documents (n × d) and the queries (B × d), one per row.
    X : torch.Tensor, B × n
        Dense coefficients, one row per query.
    l1, l2 : float
        λ1 and λ2.

    Returns
    -------
    torch.Tensor, B
        The objective of each query (float64).
    """
    D, Q, X = D.double(), Q.double(), X.double()
    R = X @ D - Q
    return 0.5 * (R * R).sum(1) + l1 * X.sum(1) + 0.5 * l2 * (X * X).sum(1)


def _kkt_from_grad(g: torch.Tensor, X: torch.Tensor, l1: float) -> torch.Tensor:
    """max_j of |g_j − λ1| where x_j > 0, (g_j − λ1)₊ where x_j = 0, and −x_j where x_j < 0."""
    dev = g - l1
    res = torch.where(X > 0, dev.abs(), dev.clamp_min(0.0))
    res = torch.maximum(res, (-X).clamp_min(0.0))
    return res.amax(dim=1) if res.shape[1] else torch.zeros(res.shape[0], device=res.device)


def kkt_residual(D: Any, Q: Any, X: Any, l1: float, l2: float, *, chunk: int = 256) -> torch.Tensor:
    """Largest KKT violation per query for a dense solution; 0 at the optimum.

    With r = q − Dᵀx and g_j = D_j·r − λ2·x_j: ``|g_j − λ1|`` for x_j > 0, ``max(0, g_j − λ1)``
    for x_j = 0 (and −x_j if x_j < 0). Computed in chunks of queries.

    Parameters
    ----------
    D, Q : array-like
        The documents (n × d) and the queries (B × d), one per row.
    X : array-like, B × n
        Dense coefficients, one row per query.
    l1, l2 : float
        λ1 and λ2.
    chunk : int
        Queries per product.

    Returns
    -------
    torch.Tensor, B
        The largest violation of each query.
    """
    D, Q, X = as_tensor(D), as_tensor(Q), as_tensor(X)
    out = []
    for s in range(0, Q.shape[0], chunk):
        x, q = X[s:s + chunk], Q[s:s + chunk]
        r = q - x @ D
        g = r @ D.T - l2 * x
        out.append(_kkt_from_grad(g, x, l1))
    return torch.cat(out) if out else torch.zeros(0)


# ---------------------------------------------------------------------------------------------
# Solutions


@dataclass
class Solution:
    """Sparse per-query solutions: ``indices``/``values`` are B × K (K = largest support),
    sorted by value descending (ties by lower document index); padding is index −1, value 0."""

    indices: torch.Tensor
    values: torch.Tensor
    n: int
    stats: dict[str, Any] = field(default_factory=dict)
    dense_idx: torch.Tensor | None = None  # dense top-k (B × k), when the solver computed it
    dense_scores: torch.Tensor | None = None

    @property
    def support_sizes(self) -> torch.Tensor:
        return (self.indices >= 0).sum(1)

    def to_dense(self) -> torch.Tensor:
        B = self.indices.shape[0]
        X = torch.zeros(B, self.n, dtype=torch.float32, device=self.values.device)
        m = self.indices >= 0
        rows = torch.arange(B, device=X.device)[:, None].expand_as(self.indices)
        X[rows[m], self.indices[m]] = self.values[m]
        return X

    def lists(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (document indices, coefficients), coefficient descending."""
        idx, val = self.indices.cpu().numpy(), self.values.cpu().numpy()
        out = []
        for i in range(idx.shape[0]):
            m = idx[i] >= 0
            out.append((idx[i][m], val[i][m]))
        return out

    def kkt(self, D: Any, Q: Any, l1: float, l2: float, *, chunk: int = 128) -> torch.Tensor:
        """Full-corpus KKT residual per query (as :func:`kkt_residual`), from the sparse form in
        chunks of queries: one product with D per chunk into a reused buffer."""
        D = as_tensor(D)
        Q = as_tensor(Q, D.device)
        B, n = Q.shape[0], D.shape[0]
        idx, val = self.indices.to(D.device), self.values.to(D.device)
        buf = torch.empty(min(chunk, max(B, 1)), n, device=D.device)
        out = []
        for s in range(0, B, chunk):
            i, v = idx[s:s + chunk], val[s:s + chunk]
            b = i.shape[0]
            m = i >= 0
            i0 = torch.where(m, i, 0)
            v0 = torch.where(m, v, 0.0)
            r = Q[s:s + chunk] - torch.bmm(v0[:, None, :], D[i0])[:, 0, :]
            g = torch.mm(r, D.T, out=buf[:b])
            res = torch.zeros(b, device=D.device)
            if i.shape[1]:
                on = (g.gather(1, i0) - l2 * v0 - l1).abs()
                res = torch.where(m, on, 0.0).amax(1)
                res = torch.maximum(res, torch.where(m, -v0, 0.0).amax(1))  # negativity
                rr, kk = m.nonzero(as_tuple=True)
                g[rr, i[rr, kk]] = -math.inf  # off-support condition only
            out.append(torch.maximum(res, (g.amax(1) - l1).clamp_min(0.0)))
        return torch.cat(out) if out else torch.zeros(0)


def _sparsify(X: torch.Tensor, cols: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) of the positive entries of each row of X, value desc, ties by index.

    ``cols`` (B × M) maps X's columns to corpus indices (Gram form); None means identity."""
    B = X.shape[0]
    nnz = (X > 0).sum(1)
    K = int(nnz.max()) if B else 0
    if K == 0:
        return (torch.full((B, 0), -1, dtype=torch.long, device=X.device),
                torch.zeros(B, 0, dtype=torch.float32, device=X.device))
    vals, order = torch.topk(X, K, dim=1)  # the K largest: every positive entry
    idx = order if cols is None else cols.gather(1, order)
    perm = _sort_pairs(vals, idx)  # value desc, ties by lower corpus index
    vals, idx = vals.gather(1, perm), idx.gather(1, perm)
    m = vals > 0
    idx = torch.where(m, idx, torch.full_like(idx, -1))
    vals = torch.where(m, vals, torch.zeros_like(vals))
    return idx, vals


def _sort_pairs(vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Permutation ordering each row by value desc, then index asc (zeros/pads last)."""
    # sort by index first (stable), then by value desc (stable) -> lexicographic
    p1 = torch.sort(torch.where(vals > 0, idx, torch.full_like(idx, torch.iinfo(torch.long).max)),
                    dim=1, stable=True).indices
    v1 = vals.gather(1, p1)
    p2 = torch.sort(v1, dim=1, descending=True, stable=True).indices
    return p1.gather(1, p2)


def _cat_padded(parts: list[tuple[torch.Tensor, torch.Tensor]], B: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    K = max([p[0].shape[1] for p in parts], default=0)
    idx = torch.full((B, K), -1, dtype=torch.long, device=device)
    val = torch.zeros(B, K, dtype=torch.float32, device=device)
    s = 0
    for i, v in parts:
        m = i.shape[0]
        idx[s:s + m, :i.shape[1]] = i
        val[s:s + m, :v.shape[1]] = v
        s += m
    return idx, val
