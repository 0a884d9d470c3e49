"""The corpus-sized passes of the exact solve (retrievers/fista/passes.py) against direct
computations: the guard's band and the dense top-k on faiss's BLAS path."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from retrievers.fista.passes import FAISS_BLAS_FROM, _Corpus, faiss_blas
from tests.test_fista import clustered


def test_the_guard_band_holds_every_violator_and_k_more() -> None:
    """_Corpus.guard against a direct computation: per row the largest value outside W, and for
    rows above thr the top v + K values outside W (v: its violators; at most K_max), value
    descending, with the band's last value; rows below thr get no band."""
    D, Q = clustered(3000, 16, 5, 1, per=40)
    R = Q.clone()
    R[4] *= 0.01  # a row with no violator
    W = torch.arange(5)[:, None] * 7 + torch.arange(3)[None, :]
    V = (R @ D.T).numpy()
    for K, K_max, thr in ((10, 64, 0.3), (10, 5000, 0.3), (50, 100, 0.1)):
        mx, vals, idx, last = _Corpus(D, 5, "numpy").guard(R, W, thr, K, K_max)
        for b in range(5):
            v = V[b].copy()
            v[W[b].numpy()] = -np.inf
            assert float(mx[b]) == pytest.approx(v.max(), abs=1e-6)
            if v.max() <= thr:
                assert not bool(torch.isfinite(vals[b]).any())
                continue
            width = min(int((v > thr).sum()) + K, K_max, len(v))
            want = np.sort(v)[::-1][:width]
            got = vals[b][torch.isfinite(vals[b])].numpy()
            np.testing.assert_allclose(got, want, atol=1e-6)
            np.testing.assert_allclose(v[idx[b][:width].numpy()], want, atol=1e-6)
            assert float(last[b]) == pytest.approx(want[-1], abs=1e-6)


def test_the_dense_pass_takes_faiss_blas_path_and_restores_faiss_setting() -> None:
    """Inside faiss_blas faiss's BLAS threshold is 0 (from FAISS_BLAS_FROM queries; below, it is
    left alone), outside it is faiss's own again, also after an error; the dense top-k is the
    direct computation's."""
    old = faiss.cvar.distance_compute_blas_threshold
    with faiss_blas(FAISS_BLAS_FROM):
        assert faiss.cvar.distance_compute_blas_threshold == 0
    with faiss_blas(FAISS_BLAS_FROM - 1):
        assert faiss.cvar.distance_compute_blas_threshold == old
    with pytest.raises(RuntimeError), faiss_blas(100):
        raise RuntimeError("inside")
    assert faiss.cvar.distance_compute_blas_threshold == old
    D, Q = clustered(2000, 16, 20, 2, per=20)
    v, i = _Corpus(D, 8, "numpy", "faiss").top(Q, 15)
    want = torch.topk(Q @ D.T, 15, dim=1)
    torch.testing.assert_close(v, want.values, atol=1e-5, rtol=0)
    torch.testing.assert_close((Q[:, None, :] * D[i]).sum(-1), want.values, atol=1e-5, rtol=0)
    assert faiss.cvar.distance_compute_blas_threshold == old


def test_faiss_setting_survives_blocks_of_several_threads() -> None:
    """Blocks entered from several threads at once run one at a time: when all have left, faiss's
    own threshold is back (none restores the 0 another set)."""
    import threading
    import time

    old = faiss.cvar.distance_compute_blas_threshold
    seen: list[int] = []

    def work() -> None:
        with faiss_blas(100):
            seen.append(faiss.cvar.distance_compute_blas_threshold)
            time.sleep(0.01)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [0] * 6
    assert faiss.cvar.distance_compute_blas_threshold == old


def _blas_counts() -> dict[str, int]:
    from retrievers.fista.problem import thread_counts

    return {k: v for k, v in thread_counts().items() if "openblas" in k}


def test_a_solve_runs_every_pool_on_one_thread_and_restores_the_counts() -> None:
    """Inside a solve on CPU torch's pool and every BLAS and OpenMP pool of the process run one
    thread; a corpus-sized block (the dense top-P by faiss) gets the counts from before the solve;
    afterwards, and after an error inside, every pool has its count back."""
    from threadpoolctl import ThreadpoolController

    from retrievers.fista import screened_solve
    from retrievers.fista import newton as newton_mod
    from retrievers.fista.problem import _all_threads, _one_thread, thread_counts

    cpu = torch.device("cpu")
    prev_torch = torch.get_num_threads()
    with ThreadpoolController().limit(limits=3):
        torch.set_num_threads(3)
        try:
            before = thread_counts()
            assert set(before.values()) == {3} and len(before) >= 4  # torch, numpy's, scipy's and faiss's pools
            with _one_thread(cpu):
                assert set(thread_counts().values()) == {1}
                with _all_threads(cpu):
                    assert thread_counts() == before
                assert set(thread_counts().values()) == {1}
                with _one_thread(cpu):  # nested: changes nothing
                    assert set(thread_counts().values()) == {1}
            assert thread_counts() == before
            with pytest.raises(RuntimeError), _one_thread(cpu):
                raise RuntimeError("inside")
            assert thread_counts() == before
            with _all_threads(cpu):  # outside a solve: a no-op
                assert thread_counts() == before

            # a whole solve: the dense pass wide, the Newton half's solves on one BLAS thread
            seen: dict[str, list[dict[str, int]]] = {"top": [], "newton": []}
            knn, minimise = faiss.knn, newton_mod.minimise_on

            def spy_knn(*a, **k):  # type: ignore[no-untyped-def]
                seen["top"].append(thread_counts())
                return knn(*a, **k)

            def spy_minimise(*a, **k):  # type: ignore[no-untyped-def]
                if not seen["newton"]:
                    seen["newton"].append(_blas_counts())
                return minimise(*a, **k)

            D, Q = clustered(1500, 16, 6, 4, per=30)
            mp = pytest.MonkeyPatch()
            mp.setattr(faiss, "knn", spy_knn)
            mp.setattr(newton_mod, "minimise_on", spy_minimise)
            try:
                sol = screened_solve(D, Q, 0.01, 0.1, tol=1e-6, newton_above=0)
            finally:
                mp.undo()
            assert sol.stats["newton_queries"] == 6
            assert seen["top"] == [before]
            assert seen["newton"] and set(seen["newton"][0].values()) == {1}
            assert thread_counts() == before
        finally:
            torch.set_num_threads(prev_torch)
