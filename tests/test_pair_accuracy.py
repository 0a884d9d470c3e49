"""PairAcc does not depend on the ranking depth: each pair's two documents are scored directly
against each of its queries (NevIR's protocol), by a retriever's ``score`` member, or, for a
retriever without one, from a ranking of the whole corpus."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from harness.protocols import RunContext
from harness.registry import load_benchmark, make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import Store
from harness.types import Corpus, Document, Query
from retrievers.bm25 import BM25Retriever
from retrievers.dense import DenseRetriever

NO_SCORE_MODULE = '''
from retrievers.bm25 import BM25Retriever

class BM25RankOnly:
    """BM25 that can only rank: the runner must fall back to a full-corpus ranking."""

    def __init__(self):
        self._bm25 = BM25Retriever()

    def index(self, corpus, ctx):
        self._bm25.index(corpus, ctx)

    def search(self, queries, k, ctx):
        return self._bm25.search(queries, k, ctx)
'''


@pytest.fixture
def rank_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "rank_only_bm25.py").write_text(NO_SCORE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rank_only_bm25:BM25RankOnly"
    sys.modules.pop("rank_only_bm25", None)


def _pair_acc(tmp_path: Path, data: Path, spec: str, k: int) -> tuple[float, dict[str, float]]:
    store = Store(tmp_path / f"{spec.replace(':', '_')}-{k}.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", data_dir=data, k=k, bootstrap=0), store, log=lambda m: None)
    [out] = runner.run([make_spec(spec)], ["nevir"], [0])
    rec = out.record
    return rec.measures["PairAcc"].mean, rec.per_query["PairAcc"]


def _direct_bm25_pair_acc(data: Path) -> float:
    """The independent formulation: BM25 scores of every document for each query (bm25s over the
    whole corpus, no ranking), then NevIR's strict comparison per pair."""
    bench = load_benchmark("nevir", data)
    bm25 = BM25Retriever()
    bm25.index(bench.corpus, RunContext())
    row = {d: i for i, d in enumerate(bench.corpus.ids)}
    texts = {q.id: q.text for q in bench.eval_queries}
    wins = []
    for p in bench.pairs:
        s1 = bm25.scores(bm25.tokenize([texts[p.q1]])[0])
        s2 = bm25.scores(bm25.tokenize([texts[p.q2]])[0])
        wins.append(s1[row[p.d1]] > s1[row[p.d2]] and s2[row[p.d2]] > s2[row[p.d1]])
    return float(np.mean(wins))


def test_pair_accuracy_is_the_same_at_every_depth_and_equals_direct_scoring(tmp_path: Path, shared_data: Path,
                                                                            rank_only: str) -> None:
    shallow, per_pair_shallow = _pair_acc(tmp_path, shared_data, "bm25", 10)
    deep, per_pair_deep = _pair_acc(tmp_path, shared_data, "bm25", 1000)
    assert per_pair_shallow == per_pair_deep
    assert shallow == deep == pytest.approx(_direct_bm25_pair_acc(shared_data), abs=1e-12)
    # a retriever that can only rank: the runner ranks the whole corpus for the queries whose pair
    # documents fall below the depth, and the figure is the same again
    fallback, per_pair_fallback = _pair_acc(tmp_path, shared_data, rank_only, 10)
    assert per_pair_fallback == per_pair_shallow


def test_dense_score_equals_its_search_scores(ctx: RunContext) -> None:
    corpus = Corpus([Document("a", "Aspirin reduces the risk of heart attack."),
                     Document("b", "Aspirin does not reduce the risk of stroke."),
                     Document("c", "Green tea lowers cholesterol."),
                     Document("d", "Exercise improves heart health.")])
    queries = [Query("q1", "aspirin and heart attack"), Query("q2", "tea")]
    dense = DenseRetriever()
    dense.index(corpus, ctx)
    run = dense.search(queries, 4, ctx)
    direct = dense.score(queries, {"q1": ["d", "b"], "q2": ["c", "a"]}, ctx)
    for q, docs in direct.items():
        ranked = dict(run[q])
        assert set(docs) == ({"d", "b"} if q == "q1" else {"c", "a"})
        for d, s in docs.items():
            assert s == pytest.approx(ranked[d], abs=1e-5)
