"""Confidence intervals and significance tests over per-query values
(docs/design/measures.md#intervals-and-significance)."""

from __future__ import annotations

from typing import Hashable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)

BOOTSTRAP_RESAMPLES = 1000
"""The resamples of a stored mean's bootstrap interval (``beyondsim run``'s default; ``verify``
recomputes an interval with as many)."""


def bootstrap_ci(values: Sequence[float], *, n_resamples: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean. Empty input gives (nan, nan)."""
    return bootstrap_cis({0: values}, n_resamples=n_resamples, alpha=alpha, seed=seed)[0]


def resamples(n: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """The bootstrap's resamples of ``n`` values, as (resamples × n) index matrices, in chunks of at
    most 2,000,000 indices: ``default_rng(seed).integers(0, n, size=(chunk, n))`` chunk after
    chunk, so a given (n, seed) always gets the same resamples, whatever the values."""
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, chunk):
        yield rng.integers(0, n, size=(min(chunk, n_resamples - start), n))


def bootstrap_cis(columns: Mapping[K, Sequence[float]], *, n_resamples: int = 1000, alpha: float = 0.05,
                  seed: int = 0) -> dict[K, tuple[float, float]]:
    """Percentile bootstrap CI of the mean of each column (a result's per-query values of each
    measure). The columns of one length share one draw of resamples (:func:`resamples` from
    ``seed``), and each column's resample means are taken from it: the same numbers as one
    :func:`bootstrap_ci` per column with that seed — which draws the same resamples for every
    column of a length — at the cost of one draw per length instead of one per column. A column
    of one value, or of equal values, gives (mean, mean); an empty one (nan, nan)."""
    out: dict[K, tuple[float, float]] = {}
    by_size: dict[int, list[tuple[K, np.ndarray]]] = {}
    for key, values in columns.items():
        x = np.asarray(values, dtype=float)
        if x.size == 0:
            out[key] = (float("nan"), float("nan"))
        elif x.size == 1 or np.all(x == x[0]):
            out[key] = (float(x.mean()), float(x.mean()))
        else:
            by_size.setdefault(x.size, []).append((key, x))
    for n, items in by_size.items():
        means = np.empty((len(items), n_resamples))
        start = 0
        for idx in resamples(n, n_resamples, seed):
            for j, (_, x) in enumerate(items):
                means[j, start:start + len(idx)] = x[idx].mean(axis=1)
            start += len(idx)
        lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=1)
        for j, (key, _) in enumerate(items):
            out[key] = (float(lo[j]), float(hi[j]))
    return {key: out[key] for key in columns}


def paired_randomization_test(a: Mapping[str, float], b: Mapping[str, float], *,
                              n_resamples: int = 10000, seed: int = 0) -> float:
    """Two-sided paired randomisation (sign-flip) test of mean(a − b) over shared keys."""
    keys = sorted(set(a) & set(b))
    if not keys:
        return float("nan")
    d = np.array([a[k] - b[k] for k in keys], dtype=float)
    observed = abs(d.mean())
    if np.all(d == 0):
        return 1.0
    rng = np.random.default_rng(seed)
    count = 0
    chunk = max(1, 2_000_000 // d.size)
    for start in range(0, n_resamples, chunk):
        n = min(chunk, n_resamples - start)
        signs = rng.choice((-1.0, 1.0), size=(n, d.size))
        count += int(np.sum(np.abs((signs * d).mean(axis=1)) >= observed - 1e-12))
    return (count + 1) / (n_resamples + 1)


def paired_randomization_tests(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], *,
                               n_resamples: int = 10000, seed: int = 0) -> list[float]:
    """:func:`paired_randomization_test` of every ``(a, b)`` pair, the same p-values, faster.

    Pairs over the same set of shared keys use the same sign draws (the single test draws them
    from ``seed`` in the same order whatever the values), so one matrix product per key set
    replaces one pass per pair: a leaderboard's hundreds of tests over one benchmark's queries
    cost about as much as a few.
    """
    out = [float("nan")] * len(pairs)
    by_keys: dict[tuple[str, ...], list[tuple[int, np.ndarray]]] = {}
    for j, (a, b) in enumerate(pairs):
        keys = tuple(sorted(set(a) & set(b)))
        if not keys:
            continue
        d = np.array([a[k] - b[k] for k in keys], dtype=float)
        if np.all(d == 0):
            out[j] = 1.0
            continue
        by_keys.setdefault(keys, []).append((j, d))
    for keys, items in by_keys.items():
        n = len(keys)
        D = np.stack([d for _, d in items], axis=1)  # n × m
        observed = np.abs(D.mean(axis=0))
        counts = np.zeros(D.shape[1], dtype=np.int64)
        rng = np.random.default_rng(seed)
        chunk = max(1, 2_000_000 // n)
        for start in range(0, n_resamples, chunk):
            c = min(chunk, n_resamples - start)
            signs = rng.choice((-1.0, 1.0), size=(c, n))
            counts += np.sum(np.abs(signs @ D / n) >= observed - 1e-12, axis=0)
        for (j, _), cnt in zip(items, counts):
            out[j] = (int(cnt) + 1) / (n_resamples + 1)
    return out


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values (NaNs pass through)."""
    items = sorted(((p, k) for k, p in pvalues.items() if p == p), key=lambda t: t[0])
    m = len(items)
    out = {k: float("nan") for k, p in pvalues.items() if p != p}
    running = 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out
