"""Runner behaviour: user retrievers by module:Class, protocol validation, the optional members
called through their protocols, LLM use from the declared metadata, train-split isolation, atomic
results, and the real BM25 figure on SciFact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.registry import make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import Store
from tests.test_cli import make_beir

USER_MODULE = '''
from dataclasses import dataclass
from harness.types import Run

@dataclass(frozen=True)
class EchoParams:
    boost: float = 1.0

class Echo:
    """Ranks documents by how many query characters they share (a deterministic toy)."""
    Params = EchoParams
    fitted_on = []

    def __init__(self, params=None):
        self.params = params or EchoParams()

    def fit(self, benchmark, ctx):
        Echo.fitted_on.append((benchmark.name, sorted(q.id for q in benchmark.eval_queries)))

    def index(self, corpus, ctx):
        self.docs = [(d.id, set(d.text.lower())) for d in corpus]

    def search(self, queries, k, ctx):
        run = Run()
        for q in queries:
            s = sorted(((len(set(q.text.lower()) & chars) * self.params.boost, -i, d)
                        for i, (d, chars) in enumerate(self.docs)), reverse=True)[:k]
            run[q.id] = [(d, float(v)) for v, _, d in s]
        return run

class Full(Echo):
    """Every optional member, each called by the runner through its protocol."""
    calls = []

    def prepare(self, ctx):
        Full.calls.append("prepare")

    def training_data(self, ctx):
        Full.calls.append("training_data")
        return None

    def result_extra(self):
        return {"fitted": len(Echo.fitted_on)}

    def analyse(self, benchmark, ctx):
        return {"analysed": benchmark.name}

class Broken:
    def index(self, corpus, ctx):
        pass

class EchoPlain(Echo):
    """Echo's rankings as a plain dict of lists of (doc_id, score) pairs (what MTEB and ranx take)."""
    def search(self, queries, k, ctx):
        return {q: [(d, s) for d, s in r] for q, r in Echo.search(self, queries, k, ctx).items()}

class EchoScores(Echo):
    """Echo's rankings as a plain {query_id: {doc_id: score}} mapping (ties stay in the mapping's order)."""
    def search(self, queries, k, ctx):
        return {q: dict(r) for q, r in Echo.search(self, queries, k, ctx).items()}

class BadReturn(Echo):
    """Returns whatever ``bad`` is set to."""
    bad = None

    def search(self, queries, k, ctx):
        return BadReturn.bad

class Silent:
    """Keeps no document for any query (a filter that drops every candidate)."""
    def index(self, corpus, ctx):
        pass

    def search(self, queries, k, ctx):
        return Run({q.id: [] for q in queries})
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "userpkg_echo.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userpkg_echo"
    sys.modules.pop("userpkg_echo", None)


def with_train_split(root: Path) -> Path:
    with open(root / "queries.jsonl", "a") as f:
        f.write(json.dumps({"_id": "t1", "text": "aspirin stroke children"}) + "\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nt1\td2\t1\n")
    return root


def test_user_class_trains_on_train_split_only(tmp_path: Path, user_module: str) -> None:
    data = with_train_split(make_beir(tmp_path / "ds"))
    store = Store(tmp_path / "h" / "results.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5), store, log=lambda m: None)
    spec = make_spec(f"{user_module}:Echo", {"boost": "2.0"})
    assert spec.params == {"boost": 2.0}
    [out] = runner.run([spec], [str(data)], [0])
    mod = sys.modules[user_module]
    assert mod.Echo.fitted_on == [(f"{data.resolve()}:train", ["t1"])]  # never the scored queries
    rec = store.get(out.key, full=True)
    assert rec.n_queries == 3 and rec.provenance["class"] == f"{user_module}:Echo"
    assert rec.phases["fit"]["items"] == 1


def test_optional_members_are_called_through_their_protocols(tmp_path: Path, user_module: str) -> None:
    data = with_train_split(make_beir(tmp_path / "ds"))
    store = Store(tmp_path / "h" / "results.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=0), store, log=lambda m: None)
    [out] = runner.run([make_spec(f"{user_module}:Full")], [str(data)], [0])
    mod = sys.modules[user_module]
    assert mod.Full.calls == ["prepare", "training_data"] and len(mod.Echo.fitted_on) == 1
    rec = store.get(out.key, full=True)
    assert rec.extra["retriever"] == {"fitted": 1} and rec.extra["analysis"] == {"analysed": str(data.resolve())}
    assert "fit" in rec.phases  # prepare and fit are timed as the fit phase


def test_llm_use_is_read_from_the_declared_metadata(tmp_path: Path) -> None:
    runner = Runner(Settings(home=tmp_path, k=5), Store(tmp_path / "s.sqlite"), log=lambda m: None)
    assert runner.uses_llm(make_spec("hyde")) and runner.uses_llm(make_spec("deo"))
    assert not runner.uses_llm(make_spec("deo", {"decomposer": "rules"}))
    assert not runner.uses_llm(make_spec("deo-rules")) and not runner.uses_llm(make_spec("bm25"))


def test_protocol_checked_before_any_work(tmp_path: Path, user_module: str) -> None:
    store = Store(tmp_path / "results.sqlite")
    runner = Runner(Settings(home=tmp_path, k=5), store, log=lambda m: None)
    with pytest.raises(TypeError, match=r"missing: search"):
        runner.run([make_spec(f"{user_module}:Broken")], ["no-such-benchmark-is-loaded"], [0])


def test_failed_search_leaves_no_partial_result(tmp_path: Path, user_module: str, monkeypatch) -> None:
    data = with_train_split(make_beir(tmp_path / "ds"))
    store = Store(tmp_path / "h" / "results.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5), store, log=lambda m: None)
    mod = __import__(user_module)
    monkeypatch.setattr(mod.Echo, "search", lambda self, q, k, ctx: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        runner.run([make_spec(f"{user_module}:Echo")], [str(data)], [0])
    assert store.results() == []


def test_bm25_scifact_ndcg_in_known_range(tmp_path: Path, shared_data: Path) -> None:
    store = Store(tmp_path / "results.sqlite")
    runner = Runner(Settings(home=tmp_path, data_dir=shared_data, bootstrap=200), store, log=lambda m: None)
    [out] = runner.run([make_spec("bm25")], ["beir/scifact"], [0])
    ndcg = out.record.measures["nDCG@10"].mean
    assert 0.65 <= ndcg <= 0.69, ndcg  # BM25 on SciFact: ~0.665 (BEIR, Pyserini)
    assert out.record.n_queries == 300


def test_empty_rankings_are_warned_about_and_counted(tmp_path: Path, user_module: str) -> None:
    data = make_beir(tmp_path / "tiny")
    logged: list[str] = []
    store = Store(tmp_path / "s.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=0), store, log=logged.append)
    [out] = runner.run([make_spec(f"{user_module}:Silent")], [str(data)], [0])
    assert out.record.extra["empty_rankings"] == 3
    assert out.record.measures["nDCG@10"].mean == 0.0
    assert any("empty ranking for 3 of 3 queries" in m for m in logged), logged
    logged.clear()
    [out] = runner.run([make_spec("bm25")], [str(data)], [0])
    assert "empty_rankings" not in out.record.extra
    assert not any("empty ranking" in m for m in logged)


def test_a_requested_measure_the_benchmark_cannot_support_is_an_error(tmp_path: Path) -> None:
    data = make_beir(tmp_path / "tiny")  # topical: no violating documents, no pairs
    store = Store(tmp_path / "s.sqlite")
    for m, why in (("V@2", "no violating documents"), ("PairAcc", "no query pairs")):
        runner = Runner(Settings(home=tmp_path / "h", k=5, extra_measures=(m,)), store, log=lambda m: None)
        with pytest.raises(ValueError, match=f"measure {m} cannot be computed on .*tiny: it has {why}"):
            runner.run([make_spec("bm25")], [str(data)], [0])
    assert store.results() == []
    # the task's own measures that do not apply are simply not computed
    [out] = Runner(Settings(home=tmp_path / "h", k=5), store, log=lambda m: None).run([make_spec("bm25")], [str(data)], [0])
    assert "V@2" not in out.record.measures and "nDCG@10" in out.record.measures


def test_a_result_stored_meanwhile_by_another_run_is_skipped(tmp_path: Path, monkeypatch) -> None:
    """The race of two runs on one home: both saw no result, one stored it first; the other keeps
    the stored result and says so instead of failing."""
    data = make_beir(tmp_path / "tiny")
    logged: list[str] = []
    store = Store(tmp_path / "s.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=0), store, log=logged.append)
    [first] = runner.run([make_spec("bm25")], [str(data)], [0])
    monkeypatch.setattr(Store, "has", lambda self, key: False)  # the check ran before the other run saved
    [second] = runner.run([make_spec("bm25")], [str(data)], [0])
    assert (first.status, second.status) == ("done", "skipped")
    assert second.record.id == first.record.id or second.record.key == first.record.key
    assert len(store.results()) == 1
    assert any("stored meanwhile by another run" in m for m in logged)


def test_a_ranking_with_an_infinite_score_is_refused_right_after_search() -> None:
    from harness.types import Run, RunError

    with pytest.raises(RunError, match="score inf at rank 1"):
        Run({"q": [("d1", float("inf")), ("d2", 1.0)]}).validate()


def test_a_plain_mapping_from_search_scores_the_same_as_a_run(tmp_path: Path, user_module: str) -> None:
    data = with_train_split(make_beir(tmp_path / "tiny"))
    store = Store(tmp_path / "s.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=100), store, log=lambda m: None)
    outs = runner.run([make_spec(f"{user_module}:{c}") for c in ("Echo", "EchoPlain", "EchoScores")], [str(data)], [0])
    assert [o.status for o in outs] == ["done"] * 3
    ref, *others = (store.get(o.key, full=True) for o in outs)
    for rec in others:
        assert rec.measures == ref.measures and rec.per_query == ref.per_query
        assert rec.rankings == ref.rankings


@pytest.mark.parametrize("bad, says", [
    ([("d1", 1.0)], "returned list [('d1', 1.0)]"),
    (None, "returned None"),
    ({"q1": "d1"}, "ranking of query 'q1' is str 'd1'"),
    ({"q1": [("d1", "high")]}, "has score str 'high'"),
    ({"q1": [(1, 0.5)]}, "has document id int 1 at rank 1"),
    ({1: [("d1", 0.5)]}, "key int 1 is not a query id"),
])
def test_anything_else_from_search_is_refused_in_one_line(tmp_path: Path, user_module: str, bad, says) -> None:
    from harness.core.errors import UserError
    from harness.types import RunError

    data = with_train_split(make_beir(tmp_path / "tiny"))
    store = Store(tmp_path / "s.sqlite")
    __import__(user_module).BadReturn.bad = bad
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=0), store, log=lambda m: None)
    with pytest.raises(RunError) as got:
        runner.run([make_spec(f"{user_module}:BadReturn")], [str(data)], [0])
    message = str(got.value)
    assert isinstance(got.value, UserError) and "\n" not in message
    assert message.startswith(f"retriever '{user_module}:BadReturn': search returned") and says in message, message
    assert store.results() == []


def test_a_mapping_of_scores_per_query_is_ranked_by_score() -> None:
    from harness.types import Run, as_run

    got = as_run({"q": {"d1": 0.2, "d2": np.float32(0.5), "d3": 0.2, "d4": 1}})
    assert type(got) is Run and got == {"q": [("d4", 1.0), ("d2", 0.5), ("d1", 0.2), ("d3", 0.2)]}
    assert all(type(s) is float for _, s in got["q"])
