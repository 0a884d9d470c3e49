"""nnn-fix / l1-fix / l2-fix / mmr on a tiny corpus with the packaged MiniLM model (offline), and
the MMR selection rule hand-checked on fixed embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import nnls

from harness.models.pool import EncoderPool
from harness.protocols import RunContext
from harness.registry import instantiate, make_spec
from harness.types import Corpus, Query
from tests.factories import make_corpus
from retrievers.dense import DenseParams, DenseRetriever
from retrievers.nnn import MMR, L1Fix, L2Fix, MMRParams, NNNFix, NNNParams, mmr_select

DOCS = [
    "The cat sat on the mat with another cat.",
    "Dogs and cats are not the same animals.",
    "A dog barked at the mailman all morning long.",
    "Cats purr; dogs bark; birds sing in the morning.",
    "Nothing here matches anything at all.",
    "Group a pandas dataframe by a column and sum.",
    "Reshape a numpy array into a matrix.",
    "Plot a histogram with matplotlib.",
    "Read a CSV file into a pandas dataframe.",
    "Compute the mean of a numpy array.",
]
QUERIES = [
    Query("pets", "a cat on a mat and a barking dog"),
    Query("numpy", "reshape a numpy array and plot a histogram of it"),
    Query("pandas", "load a csv with pandas and group it"),
]



@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus(DOCS)


def cd_solve(D: np.ndarray, q: np.ndarray, l1: float, l2: float) -> np.ndarray:
    """Coordinate descent for the non-negative elastic net (independent of retrievers.fista)."""
    G, b, x = D @ D.T, D @ q, np.zeros(D.shape[0])
    for _ in range(5000):
        delta = 0.0
        for j in range(x.size):
            new = max(0.0, (b[j] - G[j] @ x + G[j, j] * x[j] - l1) / (G[j, j] + l2))
            delta, x[j] = max(delta, abs(new - x[j])), new
        if delta < 1e-13:
            break
    return x


def expected_ranking(x: np.ndarray, dense: np.ndarray, k: int) -> list[str]:
    supp = [j for j in np.lexsort((np.arange(x.size), -x)) if x[j] > 1e-6]
    rest = [j for j in np.lexsort((np.arange(dense.size), -dense)) if j not in supp]
    return [f"d{j}" for j in (supp + rest)[:k]]


def embeddings(r, ctx: RunContext) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(r.doc_embeddings, dtype=np.float64), np.asarray(r.encode_queries(QUERIES, ctx), dtype=np.float64)


def check_run(run, corpus: Corpus, k: int) -> None:
    run.validate(corpus)
    for ranking in run.values():
        assert len(ranking) == k
        scores = [s for _, s in ranking]
        assert all(a > b for a, b in zip(scores, scores[1:]))  # strictly decreasing


@pytest.mark.parametrize("l1,l2", [(0.05, 0.1), (0.1, 0.3)])
def test_nnn_fix_support_first_then_dense(l1: float, l2: float, ctx: RunContext, corpus: Corpus, no_network) -> None:
    r = NNNFix(NNNParams(l1=l1, l2=l2, tol=1e-6))
    r.index(corpus, ctx)
    assert r._D is not None and r._D.device.type == "cpu"  # ctx.device picks the device
    k = 6
    run = r.search(QUERIES, k, ctx)
    check_run(run, corpus, k)
    D, Qe = embeddings(r, ctx)
    sizes = []
    for i, q in enumerate(QUERIES):
        x = cd_solve(D, Qe[i], l1, l2)
        sizes.append(int((x > 1e-6).sum()))
        assert [d for d, _ in run[q.id]] == expected_ranking(x, D @ Qe[i], k)
    assert max(sizes) >= 2 and min(sizes) < k  # both the support order and the dense fill are exercised
    st = r.last_stats
    assert st["queries"] == 3 and st["fallback"] == 0 and st["support_mean"] == pytest.approx(np.mean(sizes))
    assert no_network == []


def test_nnn_fix_iters_mode(ctx: RunContext, corpus: Corpus) -> None:
    dense = DenseRetriever(DenseParams())
    dense.index(corpus, ctx)
    want = dense.search(QUERIES, 5, ctx)
    # one FISTA step is thresholded dense scoring: the ranking is the dense ranking
    r1 = NNNFix(NNNParams(mode="iters", iters=1))
    r1.index(corpus, ctx)
    run1 = r1.search(QUERIES, 5, ctx)
    check_run(run1, corpus, 5)
    assert {q: [d for d, _ in v] for q, v in run1.items()} == {q: [d for d, _ in v] for q, v in want.items()}
    # many steps reach the minimiser that tol mode certifies
    it = NNNFix(NNNParams(mode="iters", iters=3000))
    tol = NNNFix(NNNParams(tol=1e-6))
    for r in (it, tol):
        r.index(corpus, ctx)
    assert it.search(QUERIES, 5, ctx) == tol.search(QUERIES, 5, ctx)
    assert it.last_stats["mode"] == "iters" and it.last_stats["iterations_max"] == 3000


def test_l1_and_l2_variants(ctx: RunContext, corpus: Corpus) -> None:
    spec = make_spec("l1-fix", {"l1": "0.05"})
    r = instantiate(spec)
    assert isinstance(r, L1Fix) and r.params.l2 == 0.0 and "l2" not in spec.params
    with pytest.raises(ValueError):
        make_spec("l1-fix", {"l2": 0.3})
    with pytest.raises(ValueError):
        make_spec("nnn-fix", {"mode": "exact"})
    r.index(corpus, ctx)
    run = r.search(QUERIES, 4, ctx)
    check_run(run, corpus, 4)
    D, Qe = embeddings(r, ctx)
    for i, q in enumerate(QUERIES):
        assert [d for d, _ in run[q.id]] == expected_ranking(cd_solve(D, Qe[i], 0.05, 0.0), D @ Qe[i], 4)

    l2 = instantiate(make_spec("l2-fix", {"l2": 0.3, "mode": "tol", "tol": 1e-6}))
    assert isinstance(l2, L2Fix) and l2.params.l1 == 0.0
    assert L2Fix().params.mode == "iters"  # the fixed-T protocol by default
    l2.index(corpus, ctx)
    run = l2.search(QUERIES, 4, ctx)
    check_run(run, corpus, 4)
    n = D.shape[0]
    A = np.vstack([D.T, np.sqrt(0.3) * np.eye(n)])
    for i, q in enumerate(QUERIES):
        x, _ = nnls(A, np.concatenate([Qe[i], np.zeros(n)]))  # non-negative ridge
        assert [d for d, _ in run[q.id]] == expected_ranking(x, D @ Qe[i], 4)
    assert "fallback" not in l2.last_stats  # full-corpus solve, no screening


def test_mmr_select_hand_checked() -> None:
    """Four documents: d0 and d1 near-duplicates. λ=0.5: after d0, d1 scores
    0.5·0.85 − 0.5·0.95 = −0.05, d2 0.25 − 0.05 = 0.20, d3 0.15 − 0.10 = 0.05 → d2; then
    d1 −0.05 vs d3 0.15 − 0.15 = 0 → d3; then d1. λ=0.7: d1 0.31 < d2 0.32 → d2; then d1 0.31 >
    d3 0.12 → d1; then d3. λ=1: dense order."""
    rel = np.array([[0.9, 0.85, 0.5, 0.3]])
    sim = np.array([[[1.0, 0.95, 0.1, 0.2],
                     [0.95, 1.0, 0.15, 0.1],
                     [0.1, 0.15, 1.0, 0.3],
                     [0.2, 0.1, 0.3, 1.0]]])
    assert mmr_select(rel, sim, 0.5, 4).tolist() == [[0, 2, 3, 1]]
    assert mmr_select(rel, sim, 0.7, 4).tolist() == [[0, 2, 1, 3]]
    assert mmr_select(rel, sim, 1.0, 4).tolist() == [[0, 1, 2, 3]]
    assert mmr_select(rel, sim, 0.5, 2).tolist() == [[0, 2]]
    # vectorised over queries: two queries at once give the per-query answers
    both = mmr_select(np.vstack([rel, rel[:, ::-1]]), np.concatenate([sim, sim[:, ::-1, ::-1]]), 0.5, 4)
    assert both[0].tolist() == [0, 2, 3, 1] and both[1].tolist() == [3 - j for j in [0, 2, 3, 1]]


def test_mmr_retriever(ctx: RunContext, corpus: Corpus) -> None:
    dense = DenseRetriever(DenseParams())
    dense.index(corpus, ctx)
    want = dense.search(QUERIES, 6, ctx)
    m1 = MMR(MMRParams(lam=1.0))
    m1.index(corpus, ctx)
    run1 = m1.search(QUERIES, 6, ctx)
    check_run(run1, corpus, 6)
    assert {q: [d for d, _ in v] for q, v in run1.items()} == {q: [d for d, _ in v] for q, v in want.items()}
    m = MMR(MMRParams(lam=0.5, candidates=8))
    m.index(corpus, ctx)
    run = m.search(QUERIES, 6, ctx)
    check_run(run, corpus, 6)
    D, Qe = embeddings(m, ctx)
    for i, q in enumerate(QUERIES):
        s = D @ Qe[i]
        top = np.lexsort((np.arange(s.size), -s))[:8]
        order = mmr_select(s[top][None], (D[top] @ D[top].T)[None], 0.5, 6)[0]
        assert [d for d, _ in run[q.id]] == [f"d{top[j]}" for j in order]
        assert run[q.id][0][0] == want[q.id][0][0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(pool: EncoderPool, corpus: Corpus) -> None:  # pragma: no cover - needs a GPU
    cpu = RunContext(device="cpu", encoders=pool, cache_dir=pool.cache_dir)
    gpu = RunContext(device="cuda", encoders=pool, cache_dir=pool.cache_dir)
    a, b = NNNFix(NNNParams(tol=1e-6)), NNNFix(NNNParams(tol=1e-6))
    a.index(corpus, cpu)
    b.index(corpus, gpu)
    assert b._D.device.type == "cuda"
    assert [d for d, _ in a.search(QUERIES, 5, cpu)["numpy"]] == [d for d, _ in b.search(QUERIES, 5, gpu)["numpy"]]
