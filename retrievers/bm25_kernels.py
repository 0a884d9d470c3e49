"""Compiled (numba) BM25 search over a term-major impact index: one call scores a batch of queries
and keeps each query's top k, so no dense score vector or Python loop per query is left.

The index is bm25s's eager one (Lù 2024): for term ``t`` the documents ``indices[indptr[t]:indptr[t+1]]``
(ascending) with their precomputed float32 impacts ``data[...]``. A query's score of a document is
the float32 sum of the impacts of its query terms, added in query-term order, duplicates included:
the same additions, in the same order, as bm25s's own scorer, so scores are bit-identical to it.

Top k: score descending, ties by lower document index, documents scoring ≤ 0 left out (the
contract of :func:`harness.core.topk.topk_indices`).
"""

from __future__ import annotations

import numpy as np
from numba import njit


_BLOCK = 64  # documents per block of the block maxima


@njit(cache=True, fastmath=True, nogil=True)
def _block_max(acc, out, block):  # pragma: no cover - compiled
    # fastmath only lets the maximum vectorise: a maximum is exact in any order (no NaN here)
    n = acc.shape[0]
    for b in range(out.shape[0]):
        m = np.float32(-np.inf)
        for d in range(b * block, min(b * block + block, n)):
            m = max(m, acc[d])
        out[b] = m


@njit(cache=True, nogil=True)
def topk_search(qptr, qterms, qconst, add_const, data, indices, indptr, n_docs, k):  # pragma: no cover - compiled
    """Top-``k`` (indices, scores) of each query: ``qterms[qptr[q]:qptr[q+1]]`` are query ``q``'s
    term ids in query order; with ``add_const`` every document also gets ``qconst[q]`` (BM25L/BM25+'s
    non-occurrence part, added after the sum as bm25s does). Rows are padded with index −1.

    Per query: the impacts are added into a dense float32 accumulator; the maxima of blocks of 64
    documents give a lower bound θ on the k-th best score (k blocks each hold a score ≥ their
    k-th largest maximum); the documents scoring ≥ θ (and > 0) are collected in index order, cut to
    those ≥ their own k-th largest score, and sorted stably by score: score descending, ties by
    lower index."""
    nq = qptr.shape[0] - 1
    out_i = np.full((nq, k), -1, np.int32)
    out_s = np.zeros((nq, k), np.float32)
    acc = np.zeros(n_docs, np.float32)
    nb = (n_docs + _BLOCK - 1) // _BLOCK
    bmax = np.empty(nb, np.float32)
    ci = np.empty(n_docs, np.int32)
    cs = np.empty(n_docs, np.float32)
    for q in range(nq):
        for t in range(qptr[q], qptr[q + 1]):
            a, b = indptr[qterms[t]], indptr[qterms[t] + 1]
            ind, dat = indices[a:b], data[a:b]
            for j in range(b - a):
                acc[ind[j]] += dat[j]
        cq = qconst[q]
        _block_max(acc, bmax, _BLOCK)
        npos = 0
        for b in range(nb):
            if add_const:
                bmax[b] = bmax[b] + cq  # rounding is monotone: still the block's maximum
            if bmax[b] > 0:
                npos += 1
        theta = np.float32(0)
        if npos >= k:
            theta = np.partition(bmax, nb - k)[nb - k]
        c = 0
        for b in range(nb):
            if bmax[b] > 0 and bmax[b] >= theta:
                for d in range(b * _BLOCK, min(b * _BLOCK + _BLOCK, n_docs)):
                    s = acc[d]
                    if add_const:
                        s = s + cq
                    if s > 0 and s >= theta:
                        ci[c] = d
                        cs[c] = s
                        c += 1
        acc[:] = 0
        if c > k:  # keep the scores ≥ the k-th largest (all of its ties), still in index order
            kth = np.partition(cs[:c], c - k)[c - k]
            w = 0
            for u in range(c):
                if cs[u] >= kth:
                    ci[w] = ci[u]
                    cs[w] = cs[u]
                    w += 1
            c = w
        order = np.argsort(-cs[:c], kind="mergesort")  # stable: equal scores stay in index order
        for r in range(min(c, k)):
            out_i[q, r] = ci[order[r]]
            out_s[q, r] = cs[order[r]]
    return out_i, out_s


@njit(cache=True, nogil=True)
def dense_scores(terms, data, indices, indptr, n_docs):  # pragma: no cover - compiled
    """Every document's summed impact for one query's term ids (query order), float32."""
    acc = np.zeros(n_docs, np.float32)
    for t in range(terms.shape[0]):
        term = terms[t]
        for j in range(indptr[term], indptr[term + 1]):
            acc[indices[j]] += data[j]
    return acc
