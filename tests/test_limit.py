"""LIMIT (``limit-small``, ``limit``): the loader on the real files of ``../shared/data`` (counts,
pairs, a stable content version, the manifest), strictness on small fixtures in the official
MTEB-style JSON lines (every bad input names file, line and field), the online path with a fake
``datasets`` module, the registry and the completeness suite, and ``bm25`` and ``dense`` through the
runner with the paper's R@2, R@10 and R@100 (bm25's recomputed with pytrec_eval from its rankings)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from benchmarks.limit import CITATION, FILES, PAPER_URL, VARIANTS, Limit
from harness.data import DataError, MissingDataError
from harness.registry import RegistryError, get_benchmark_loader, load_benchmark, make_spec, suites

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SMALL = DATA / "limit" / "limit-small"
REAL = pytest.mark.skipif(not all((SMALL / f).is_file() for f in FILES),
                          reason=f"LIMIT-small not found at {SMALL}")
# the content version of the released LIMIT-small (google-deepmind/limit data/limit-small/): a change
# of the loader that changes what loads changes it
SMALL_VERSION = "338c874d985df192"
PAPER_MEASURES = ("R@2", "R@10", "R@100")


# ---------------------------------------------------------------------------------------------
# the real files


@REAL
def test_limit_small_loads_from_the_real_files() -> None:
    b = Limit.load("limit-small", DATA)
    assert b.name == "limit-small" and b.task == "completeness" and b.relevance_threshold == 1
    assert b.stats() == {"queries": 1000, "judged_queries": 1000, "documents": 46, "judged_pairs": 2000,
                         "violating_pairs": 0, "pairs": 0}
    assert b.version == SMALL_VERSION
    assert Limit.load("limit-small", DATA).version == b.version  # stable across loads
    assert set(PAPER_MEASURES) <= set(b.default_measures) and "Comp@2" in b.default_measures
    # every query needs exactly two people, each person is some query's, and the pairs are distinct
    rel = b.judgments.relevance
    assert all(sorted(g.values()) == [1, 1] for g in rel.values())
    assert {q.meta["set_size"] for q in b.queries} == {"2"}
    assert {d for g in rel.values() for d in g} == set(b.corpus.ids)
    assert len({tuple(sorted(g)) for g in rel.values()}) == 1000
    first = b.queries[0]
    assert (first.id, first.text) == ("query_0", "Who likes Joshua Trees?")
    assert set(rel["query_0"]) == {"Geneva Durben", "Dorathea Bastress"}
    geneva = b.corpus.get("Geneva Durben")
    assert geneva.title == "" and geneva.text.startswith("Geneva Durben likes Quokkas, River Otters")
    assert all("Joshua Trees" in b.corpus.get(d).text for d in rel["query_0"])
    # what LIMIT tests, where it comes from, its license and citation
    assert PAPER_URL in b.description and "Who likes X?" in b.description
    assert "google-deepmind/limit" in b.source and "orionweller/LIMIT-small" in b.source
    assert b.license.startswith("CC BY 4.0")
    assert b.notes["citation"] == CITATION and "arXiv:2508.21038" in CITATION
    assert b.notes["distinct_relevant_sets"] == 1000 and b.notes["items_per_query"] == {"min": 2, "max": 2,
                                                                                         "mean": 2.0}


@REAL
def test_limit_small_is_registered_and_in_the_manifest() -> None:
    from harness.data.manifest import load_expected

    loader, name = get_benchmark_loader("limit-small")
    assert loader is Limit and name == "limit-small"
    assert load_benchmark("limit-small:test", DATA).name == "limit-small"  # the one split, by its name too
    entry = load_expected()["limit-small"]
    assert sorted(entry["files"]) == [f"limit/limit-small/{f}" for f in sorted(FILES)]
    assert entry["version"] == SMALL_VERSION
    assert entry["counts"]["documents"] == 46 and entry["counts"]["judged_pairs"] == 2000
    assert "limit-small" in suites()["completeness"]["benchmarks"]


def test_names_files_and_the_full_set_not_on_disk(tmp_path: Path) -> None:
    small, full = Limit.info("limit-small"), Limit.info("limit")
    assert small.files == [f"limit/limit-small/{f}" for f in FILES]
    assert full.files == [f"limit/limit/{f}" for f in FILES] and full.subdir == "limit/limit"
    assert Limit.variants() == ["limit-small", "limit"]
    assert "orionweller/LIMIT " in full.source + " " and VARIANTS["limit"].revision[:7] in full.source
    for bad in ("limit-tiny", "limit:train", "limit-small:dev"):
        with pytest.raises(RegistryError, match="use 'limit-small' or 'limit'"):
            Limit.info(bad)
    with pytest.raises(MissingDataError) as e:
        Limit.load("limit", tmp_path)
    msg = str(e.value)
    assert "limit/limit/qrels.jsonl" in msg and "orionweller/LIMIT" in msg and "--online" in msg


# ---------------------------------------------------------------------------------------------
# strictness on fixtures in the official layout

DOCS = [{"_id": "Ann", "title": "", "text": "Ann likes Tapirs, Limes."},
        {"_id": "Bob", "title": "", "text": "Bob likes Limes, Chairs."},
        {"_id": "Cy", "title": "", "text": "Cy likes Tapirs, Chairs."}]
QUERIES = [{"_id": "q0", "text": "Who likes Tapirs?"}, {"_id": "q1", "text": "Who likes Limes?"},
           {"_id": "q2", "text": "Who likes Chairs?"}]
QRELS = [{"query-id": "q0", "corpus-id": "Ann", "score": 1}, {"query-id": "q0", "corpus-id": "Cy", "score": 1},
         {"query-id": "q1", "corpus-id": "Ann", "score": 1}, {"query-id": "q1", "corpus-id": "Bob", "score": 1},
         {"query-id": "q2", "corpus-id": "Bob", "score": 1}, {"query-id": "q2", "corpus-id": "Cy", "score": 1}]


def write_limit(data_dir: Path, corpus: list[Any] = DOCS, queries: list[Any] = QUERIES, qrels: list[Any] = QRELS,
                folder: str = "limit-small") -> Path:
    root = data_dir / "limit" / folder
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels.jsonl", qrels)):
        (root / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                                 encoding="utf-8")
    return root


def test_a_folder_in_the_official_layout_loads(tmp_path: Path) -> None:
    write_limit(tmp_path)
    b = Limit.load("limit-small", tmp_path)
    assert b.stats()["documents"] == 3 and b.stats()["judged_pairs"] == 6
    assert b.judgments.relevance["q1"] == {"Ann": 1, "Bob": 1}
    # the full set reads the same layout from its own folder
    write_limit(tmp_path, folder="limit")
    assert Limit.load("limit", tmp_path).version == b.version
    # a score written 1.0 or "1" is the same grade, so the same version
    write_limit(tmp_path, qrels=[{**r, "score": 1.0 if i % 2 else "1"} for i, r in enumerate(QRELS)])
    assert Limit.load("limit-small", tmp_path).version == b.version
    # a query the qrels do not judge loads but is not kept (BEIR's convention; LIMIT judges all)
    write_limit(tmp_path, queries=[*QUERIES, {"_id": "q3", "text": "Who likes Kites?"}])
    again = Limit.load("limit-small", tmp_path)
    assert len(again.queries) == 3 and again.notes["queries_in_source"] == 4


@pytest.mark.parametrize("file, rows, line, problem", [
    ("qrels.jsonl", [*QRELS[:2], {"query-id": "q1", "corpus-id": "Dee", "score": 1}], 3,
     "qrel of query 'q1' names unknown document 'Dee'"),
    ("qrels.jsonl", [*QRELS[:3], {"query-id": "q9", "corpus-id": "Ann", "score": 1}], 4, "unknown query 'q9'"),
    ("qrels.jsonl", [QRELS[0], {"query-id": "q0", "corpus-id": "Cy"}], 2, "missing field 'score'"),
    ("qrels.jsonl", [QRELS[0], {"query-id": "q0", "corpus-id": "Cy", "score": 0.5}], 2,
     "field 'score' must be a whole number, got '0.5'"),
    ("qrels.jsonl", [QRELS[0], {"query-id": "q0", "corpus-id": "Cy", "score": True}], 2,
     "field 'score' must be a whole number, got True"),
    ("qrels.jsonl", [QRELS[0], {"query-id": "q0", "corpus_id": "Cy", "score": 1}], 2, "missing field 'corpus-id'"),
    ("qrels.jsonl", [QRELS[0], {"query-id": " ", "corpus-id": "Cy", "score": 1}], 2, "field 'query-id' is empty"),
    ("qrels.jsonl", [QRELS[0], "query-id\tcorpus-id\tscore"], 2, "invalid JSON"),
    ("corpus.jsonl", [*DOCS, {"_id": "Ann", "title": "", "text": "Ann again."}], 4, "duplicate document id 'Ann'"),
    ("corpus.jsonl", [DOCS[0], {"_id": "Bob", "title": ""}], 2, "missing field 'text'"),
    ("corpus.jsonl", [DOCS[0], {"_id": "Bob", "title": "", "text": " "}], 2,
     "fields 'title' and 'text' are both empty"),
    ("queries.jsonl", [QUERIES[0], {"_id": "q1", "text": 7.5}], 2, "field 'text' must be str, got float"),
    ("queries.jsonl", [QUERIES[0], ["q1", "Who likes Limes?"]], 2, "expected a JSON object, got list"),
])
def test_bad_input_names_file_line_and_field(tmp_path: Path, file: str, rows: list[Any], line: int,
                                             problem: str) -> None:
    root = write_limit(tmp_path, **{{"qrels.jsonl": "qrels", "corpus.jsonl": "corpus",
                                     "queries.jsonl": "queries"}[file]: rows})
    with pytest.raises(DataError) as e:
        Limit.load("limit-small", tmp_path)
    assert (Path(e.value.path), e.value.line) == (root / file, line), str(e.value)
    assert problem in e.value.problem, str(e.value)
    assert str(e.value).startswith(f"{root / file}:{line}: ")


def test_qrels_without_a_relevant_document_are_refused(tmp_path: Path) -> None:
    root = write_limit(tmp_path, qrels=[{**r, "score": 0} for r in QRELS])
    with pytest.raises(DataError, match="no judgment has a grade >= 1") as e:
        Limit.load("limit-small", tmp_path)
    assert Path(e.value.path) == root / "qrels.jsonl"


def test_online_reads_the_pinned_hub_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    parts = {"corpus": DOCS, "queries": QUERIES, "default": QRELS}

    def load_dataset(path: str, config: str, split: str, revision: str) -> list[dict[str, Any]]:
        calls.append((path, config, split, revision))
        return [dict(r) for r in parts[config]]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    b = Limit.load("limit-small", tmp_path, online=True)
    rev = VARIANTS["limit-small"].revision
    assert calls == [("orionweller/LIMIT-small", "corpus", "corpus", rev),
                     ("orionweller/LIMIT-small", "queries", "queries", rev),
                     ("orionweller/LIMIT-small", "default", "test", rev)]
    assert b.notes["online_source"] == f"hf:orionweller/LIMIT-small@{rev}" and rev in b.source
    write_limit(tmp_path)
    assert Limit.load("limit-small", tmp_path).version == b.version  # the hub and a folder: one version
    # a bad hub row is named by its config, split and row
    parts["default"] = [QRELS[0], {"query-id": "q0", "corpus-id": "Zed", "score": 1}]
    with pytest.raises(DataError) as e:
        Limit.load("limit", tmp_path, online=True)
    assert e.value.path == f"hf:orionweller/LIMIT@{VARIANTS['limit'].revision[:7]}[default/test]"
    assert e.value.line == 2 and "unknown document 'Zed'" in e.value.problem


# ---------------------------------------------------------------------------------------------
# bm25 and dense through the runner, with the paper's measures


def _run(tmp_path: Path, retriever: str) -> Any:
    from harness.run.runner import Runner, Settings
    from harness.store.results import Store

    store = Store(tmp_path / "results.sqlite")
    runner = Runner(Settings(home=tmp_path / "home", data_dir=DATA, bootstrap=0, device="cpu"), store,
                    log=lambda m: None)
    [out] = runner.run([make_spec(retriever)], ["limit-small"], [0])
    return out.record


@REAL
def test_bm25_on_limit_small_with_the_papers_recall_checked_by_pytrec_eval(tmp_path: Path) -> None:
    import pytrec_eval

    rec = _run(tmp_path, "bm25")
    got = {m: rec.measures[m].mean for m in (*PAPER_MEASURES, "R@20", "Comp@2", "Comp@10", "nDCG@10")}
    # BM25 is near perfect on LIMIT: the query names the attribute the two documents list
    assert got == pytest.approx({"R@2": 0.991, "R@10": 1.0, "R@100": 1.0, "R@20": 1.0, "Comp@2": 0.983,
                                 "Comp@10": 1.0, "nDCG@10": 0.99707}, abs=1e-5)
    assert rec.n_queries == 1000
    bench = Limit.load("limit-small", DATA)
    assert all(len(r) == 46 for r in rec.rankings.values())  # every document names "likes": all are ranked
    # pytrec_eval on the stored rankings in their order (scores falling with the rank: trec_eval itself
    # breaks a tie of scores by document id, bm25 by corpus order)
    run = {q: {d: float(len(ranking) - i) for i, (d, _) in enumerate(ranking)} for q, ranking in rec.rankings.items()}
    ev = pytrec_eval.RelevanceEvaluator(bench.judgments.relevance, {"recall.2,10,100", "ndcg_cut.10"})
    res = ev.evaluate(run)
    assert len(res) == 1000
    for ours, theirs in (("R@2", "recall_2"), ("R@10", "recall_10"), ("R@100", "recall_100"),
                         ("nDCG@10", "ndcg_cut_10")):
        assert rec.measures[ours].mean == pytest.approx(sum(r[theirs] for r in res.values()) / len(res), abs=1e-9)
        assert rec.per_query[ours] == pytest.approx({q: r[theirs] for q, r in res.items()}, abs=1e-9)
    # with bm25's own scores trec_eval's tie order moves R@2 by one document: a tie at rank 2
    by_score = ev.evaluate({q: {d: float(s) for d, s in ranking} for q, ranking in rec.rankings.items()})
    moved = [q for q in res if by_score[q]["recall_2"] != res[q]["recall_2"]]
    assert len(moved) == 1 and rec.rankings[moved[0]][1][1] == rec.rankings[moved[0]][2][1]


@REAL
def test_dense_on_limit_small_fails_as_the_paper_says(tmp_path: Path) -> None:
    rec = _run(tmp_path, "dense")
    got = {m: rec.measures[m].mean for m in (*PAPER_MEASURES, "Comp@2", "nDCG@10")}
    # all-MiniLM-L6-v2 (384 dimensions) on the 46 documents: far from BM25, as LIMIT means it to be
    assert got == pytest.approx({"R@2": 0.162, "R@10": 0.4805, "R@100": 1.0, "Comp@2": 0.023,
                                 "nDCG@10": 0.3138}, abs=0.003)
    assert got["R@2"] < 0.2 and got["Comp@2"] < 0.05
