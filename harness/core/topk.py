"""Deterministic top-k selection and Run construction shared by retrievers."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .types import Run


def topk_indices(scores: np.ndarray, k: int, *, drop_nonpositive: bool = False) -> np.ndarray:
    """Indices of the ``k`` highest scores: score descending, ties by lower index.

    Exact for ties at the cut-off (an ``argpartition`` alone would pick arbitrary tie members).
    With ``drop_nonpositive`` documents scoring ≤ 0 are left out (BM25: no query term matched).
    """
    scores = np.asarray(scores)
    n = scores.shape[0]
    if drop_nonpositive:
        cand = np.flatnonzero(scores > 0)
    else:
        cand = np.arange(n)
    if cand.size > k:
        part = cand[np.argpartition(-scores[cand], k - 1)[:k]]
        kth = scores[part].min()
        cand = np.concatenate([cand[scores[cand] > kth], cand[scores[cand] == kth]])
    order = np.lexsort((cand, -scores[cand]))
    return cand[order][:k]


def run_from_matrix(qids: Sequence[str], doc_ids: Sequence[str], idx: np.ndarray, scores: np.ndarray) -> Run:
    """Build a Run from (queries × k) index and score matrices; index −1 marks an empty slot."""
    run = Run()
    idx = np.asarray(idx)
    valid = idx >= 0
    n = valid.sum(axis=1)
    prefix = bool((valid == (np.arange(idx.shape[1]) < n[:, None])).all())
    get = doc_ids.__getitem__
    for q, c, ir, sr in zip(qids, n.tolist(), idx.tolist(), np.asarray(scores, dtype=np.float64).tolist()):
        if prefix:  # the usual case: empty slots, if any, end the row
            run[q] = list(zip(map(get, ir[:c]), sr[:c]))
        else:
            run[q] = [(doc_ids[j], s) for j, s in zip(ir, sr) if j >= 0]
    return run
