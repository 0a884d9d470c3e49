"""The corpus-sized products of the exact solve: the dense top-P of the queries (the first pass)
and the guard pass over the residuals, chunk by chunk into one reused buffer."""

from __future__ import annotations

import contextlib
import math
import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

from .problem import _SMALL_WORK, _all_threads

def _topk_rows(V: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``K`` (values, indices) of every row of ``V`` (b × n, unit column stride), value
    descending. Two stages: the maximum of each block of ``bs`` columns, the K blocks with the
    largest maxima, then the top-K of their entries (the K largest entries of a row lie in the K
    blocks with the largest maxima). Same values as ``torch.topk(V, K)``, several times faster
    for K in the hundreds; which of several tied entries is kept may differ."""
    b, n = V.shape
    K = min(K, n)
    bs = 1 << max(0, int(round(math.log2(max(n / max(K, 1), 1.0) ** 0.5))))
    if bs < 4 or V.stride(1) != 1 or n < 8 * K:
        return torch.topk(V, K, dim=1)
    nb = n // bs
    bm = V.as_strided((b, nb, bs), (V.stride(0), bs, 1)).amax(2)
    if nb * bs < n:
        bm = torch.cat([bm, V[:, nb * bs:].amax(1, keepdim=True)], 1)
    kb = min(K, bm.shape[1])
    bi = torch.topk(bm, kb, dim=1).indices
    cols = (bi[:, :, None] * bs + torch.arange(bs, device=V.device)).reshape(b, kb * bs)
    inside = cols < n
    cols = torch.where(inside, cols, 0)
    vals = torch.where(inside, V.gather(1, cols), -math.inf)
    v, j = torch.topk(vals, K, dim=1)
    return v, cols.gather(1, j)


# from this many queries faiss's blocked BLAS search is faster than its sequential one (n = 100k,
# d = 384, one thread: 2.2 against 6.7 ms a query at 16 queries, 0.88 against 6.4 at 200)
FAISS_BLAS_FROM = 8
_FAISS_SETTING = threading.Lock()


@contextmanager
def faiss_blas(nq: int) -> Iterator[None]:
    """faiss's exhaustive search takes its BLAS path for ``nq`` ≥ ``FAISS_BLAS_FROM`` queries
    inside the block. (faiss takes it only when queries × d reach its
    ``distance_compute_blas_threshold``, 128,000 in faiss 1.15: 334 queries at d = 384; below
    that it searches query by query, about 7× slower a query at 100k documents.) The threshold is
    faiss's process-wide setting: it is restored on leaving, and blocks of several threads run
    one at a time (so none restores another's value)."""
    import faiss

    if nq < FAISS_BLAS_FROM:
        yield
        return
    with _FAISS_SETTING:
        old = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = 0
        try:
            yield
        finally:
            faiss.cvar.distance_compute_blas_threshold = old


class _Corpus:
    """The corpus-sized products of the exact solve (the dense top-P of the queries, the guard on
    the residuals), written chunk by chunk into one reused buffer: fresh multi-megabyte
    allocations are page-faulted in on every use, which costs as much as the product on CPU.

    On CPU the products go through numpy's BLAS (``"numpy"``) or torch's (``"torch"``); inside a
    solve (:func:`.problem._one_thread`) the products of at least ``_SMALL_WORK`` multiply-adds a
    chunk and the dense top-P run with the threads the pools had before it
    (:func:`.problem._all_threads`), everything else (the reductions over the products' rows
    included: they are bound by memory, not arithmetic) on one. The dense top-P on CPU
    is faiss's exhaustive inner-product search when ``cpu_topk == "faiss"``, on its BLAS path
    (:func:`faiss_blas`; its blocked product and heap beat a full product plus a top-k: the top-100
    of 200 queries × 100k documents on one thread 0.88 against 1.3 ms a query), else the product
    and :func:`_topk_rows`."""

    def __init__(self, D: torch.Tensor, chunk: int, cpu_blas: str, cpu_topk: str = "faiss"):
        if cpu_blas not in ("numpy", "torch"):
            raise ValueError(f"cpu_blas must be 'numpy' or 'torch', got {cpu_blas!r}")
        if cpu_topk not in ("faiss", "blas"):
            raise ValueError(f"cpu_topk must be 'faiss' or 'blas', got {cpu_topk!r}")
        self.D, self.chunk = D, chunk
        n, d = D.shape
        self.big = chunk * n * d >= _SMALL_WORK
        self.Dnp = D.numpy() if D.device.type == "cpu" and cpu_blas == "numpy" and self.big else None
        self.faiss = D.device.type == "cpu" and cpu_topk == "faiss"
        self.buf: torch.Tensor | None = None
        self.rows = 0  # query rows multiplied with the corpus (both kinds of pass)

    def product(self, A: torch.Tensor) -> torch.Tensor:
        """A @ Dᵀ (A: b × d, b ≤ chunk) into the reused buffer."""
        n = self.D.shape[0]
        if self.buf is None:
            self.buf = torch.empty(self.chunk, n, device=self.D.device)
        out = self.buf[:A.shape[0]]
        self.rows += A.shape[0]
        with self.wide():
            if self.Dnp is not None:
                np.matmul(A.contiguous().numpy(), self.Dnp.T, out=out.numpy())
                return out
            return torch.mm(A, self.D.T, out=out)

    def wide(self) -> contextlib.AbstractContextManager:
        """The threads of a corpus-sized block (see the class docstring)."""
        return _all_threads(self.D.device) if self.big or self.faiss else contextlib.nullcontext()

    def top(self, Q: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense top-K (scores, indices) of each query, score descending."""
        if self.faiss:
            import faiss

            self.rows += Q.shape[0]
            with faiss_blas(Q.shape[0]), self.wide():
                v, i = faiss.knn(np.ascontiguousarray(Q.numpy()), self.D.numpy(), min(K, self.D.shape[0]),
                                 metric=faiss.METRIC_INNER_PRODUCT)
            return torch.from_numpy(v), torch.from_numpy(i)
        vals, idx = [], []
        for s in range(0, Q.shape[0], self.chunk):
            v, i = _topk_rows(self.product(Q[s:s + self.chunk]), K)
            vals.append(v)
            idx.append(i)
        return torch.cat(vals), torch.cat(idx)

    def guard(self, R: torch.Tensor, W: torch.Tensor, thr: float, K: int,
              K_max: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For residuals R (b × d) and working sets W (b × w; every listed document is excluded):
        the largest ``D_j·r`` outside W per row, and for the rows where it exceeds ``thr`` the
        band: the top values and documents outside W, value descending (padded with −inf, 0),
        and the band's last value, which bounds every document outside W and the band. A row's
        band holds its v violators and K more documents below them (at most ``K_max``)."""
        b, dev = R.shape[0], R.device
        n = self.D.shape[0]
        mx = torch.empty(b, device=dev)
        last = torch.full((b,), math.inf, device=dev)
        parts: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for s in range(0, b, self.chunk):
            V = self.product(R[s:s + self.chunk])
            V.scatter_(1, W[s:s + self.chunk], -math.inf)
            m = V.amax(1)
            mx[s:s + self.chunk] = m
            bad = (m > thr).nonzero()[:, 0]
            if bad.numel():
                Vb = V if bad.numel() == V.shape[0] else V[bad]
                # wide enough for the row with the most violators: its v and K more (at most K_max)
                if Vb.device.type == "cpu":
                    over = int(np.count_nonzero(Vb.numpy() > thr, axis=1).max())
                else:
                    over = int((Vb > thr).sum(1).max())
                k = min(over + K, K_max, n)
                v, i = _topk_rows(Vb, k) if 32 * k < n else torch.topk(Vb, k, dim=1)
                width = ((v > thr).sum(1) + K).clamp(max=v.shape[1])
                pos = torch.arange(v.shape[1], device=dev)[None, :]
                last[s + bad] = v.gather(1, (width - 1)[:, None])[:, 0]
                v = torch.where(pos < width[:, None], v, -math.inf)
                parts.append((s, bad, v, i))
        Kw = max([p[2].shape[1] for p in parts], default=1)
        vals = torch.full((b, Kw), -math.inf, device=dev)
        idx = torch.zeros(b, Kw, dtype=torch.long, device=dev)
        for s, bad, v, i in parts:
            vals[s + bad, :v.shape[1]], idx[s + bad, :i.shape[1]] = v, i
        return mx, vals, idx, last
