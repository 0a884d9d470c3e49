"""Constraint benchmarks of your own: one hand-made hotel set written in the three accepted forms
(BEIR qrels with negative grades, BEIR qrels plus a ``violating`` file, the diagnostic layout) loads
as a constraint benchmark, scores V@k from its violating documents, accepts ``-m V@2``, and is
validated by ``beyondsim data check``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.beir import BeirBenchmark, BeirFolder
from harness.cli import app
from harness.data import DataError
from harness.measures import evaluate
from harness.store.results import Store
from harness.types import Run

HOTELS = {
    "h1": ("Harbour Inn", "Quiet rooms with a heated pool and sea views."),
    "h2": ("Station Lodge", "Pool hotel right beside the noisy train station."),
    "h3": ("Garden House", "Quiet family rooms, free parking, no pool and no sea views."),
}
QUERIES = {
    "q1": "hotel with a pool that is not noisy",
    "q2": "quiet rooms without a pool",
    "q3": "quiet hotel with sea views and free parking",
}
SATISFYING = {"q1": "h1", "q2": "h3", "q3": "h3"}
VIOLATING = {"q1": "h2", "q2": "h1", "q3": "h2"}


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def beir_base(root: Path) -> Path:
    write(root / "corpus.jsonl", [json.dumps({"_id": d, "title": t, "text": x}) for d, (t, x) in HOTELS.items()])
    write(root / "queries.jsonl", [json.dumps({"_id": q, "text": t}) for q, t in QUERIES.items()])
    return root


def negative_grades(root: Path) -> Path:
    """Violating hotels as qrels grade -1."""
    beir_base(root)
    write(root / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore",
                                        *(f"{q}\t{d}\t1" for q, d in SATISFYING.items()),
                                        *(f"{q}\t{d}\t-1" for q, d in VIOLATING.items())])
    return root


def violating_file(root: Path) -> Path:
    """Violating hotels listed in ``qrels/test.violating.tsv``; 3 lines per file."""
    beir_base(root)
    write(root / "qrels" / "test.tsv", [f"{q}\t{d}\t1" for q, d in SATISFYING.items()])
    write(root / "qrels" / "test.violating.tsv", [f"{q}\t{d}" for q, d in VIOLATING.items()])
    return root


def diagnostic(root: Path) -> Path:
    """The diagnostic layout: grade 2 satisfies, 0 violates; 3 lines per file."""
    write(root / "corpus_hotels.jsonl", [json.dumps({"doc_id": d, "text": f"{t}. {x}"}) for d, (t, x) in HOTELS.items()])
    write(root / "queries_hotels.jsonl", [json.dumps({
        "query_id": q, "query": text, "topical_relevant_doc_ids": [], "constraint_satisfying_doc_ids": [SATISFYING[q]],
        "constraint_violating_doc_ids": [VIOLATING[q]], "graded_relevance": {SATISFYING[q]: 2, VIOLATING[q]: 0},
    }) for q, text in QUERIES.items()])
    return root


def topical(root: Path) -> Path:
    beir_base(root)
    write(root / "qrels" / "test.tsv", [f"{q}\t{d}\t1" for q, d in SATISFYING.items()])
    return root


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def v_at_k_by_hand(rankings: dict[str, list[tuple[str, float]]], k: int) -> float:
    hits = [any(d == VIOLATING[q] for d, _ in rankings.get(q, [])[:k]) for q in VIOLATING]
    return sum(hits) / len(hits)


@pytest.mark.parametrize("layout", [negative_grades, violating_file, diagnostic])
def test_each_layout_is_a_constraint_benchmark_scored_from_its_violating_hotels(
        layout, tmp_path: Path, home: Path) -> None:
    root = layout(tmp_path / "hotels")
    b = BeirFolder.load(str(root))
    assert b.task == "constraint" and "V@2" in b.default_measures
    assert b.judgments.violating == {q: frozenset({d}) for q, d in VIOLATING.items()}
    assert "constraint" in b.description

    res = invoke("run", "bm25", "-b", str(root), "-m", "V@2", "--k", "3")
    assert res.exit_code == 0, res.output
    [rec] = Store(home / "results.sqlite").results()
    rankings = Store(home / "results.sqlite").rankings(rec.id)
    assert [d for d, _ in rankings["q1"]][:2] == ["h2", "h1"]  # "pool", "noisy": the violating hotel first
    assert rec.measures["V@2"].n == 3
    assert rec.measures["V@2"].mean == pytest.approx(v_at_k_by_hand(rankings, 2))
    assert rec.measures["V@1"].mean == pytest.approx(v_at_k_by_hand(rankings, 1))
    assert v_at_k_by_hand(rankings, 2) == pytest.approx(2 / 3)  # q3's violating hotel ranks last


def test_negative_grades_and_the_violating_file_are_the_same_benchmark(tmp_path: Path) -> None:
    """A pair in the violating file counts as graded -1, so both forms get one version; pytrec_eval
    sees -1 as judged non-relevant, so nDCG comes from the positive grades alone."""
    a = BeirFolder.load(str(negative_grades(tmp_path / "a")))
    b = BeirFolder.load(str(violating_file(tmp_path / "b")))
    assert a.judgments == b.judgments and a.version == b.version
    run = Run({"q1": [("h2", 3.0), ("h1", 2.0), ("h3", 1.0)]})
    ev = evaluate(run, a.judgments, ["nDCG@10", "V@1"], query_ids=["q1"])
    assert ev.means["nDCG@10"] == pytest.approx(1 / math.log2(3))  # h1 at rank 2; h2's -1 adds no (negative) gain
    assert ev.means["V@1"] == 1.0


def test_violating_marks_change_the_version_and_unlock_v_at_2(tmp_path: Path, home: Path) -> None:
    root = topical(tmp_path / "hotels")
    before = BeirFolder.load(str(root))
    assert before.task == "topical"
    res = CliRunner().invoke(app, ["run", "bm25", "-b", str(root), "-m", "V@2", "--k", "3"])
    assert res.exit_code == 2
    assert f"measure V@2 cannot be computed on {root.resolve()}: it has no violating documents" in res.output

    write(root / "qrels" / "test.violating.tsv", ["q1\th2"])
    after = BeirFolder.load(str(root))
    assert after.task == "constraint" and after.version != before.version
    assert after.judgments.violating == {"q1": frozenset({"h2"})}
    assert after.judgments.relevance["q1"] == {"h1": 1, "h2": -1}
    res = invoke("run", "bm25", "-b", str(root), "-m", "V@2", "--k", "3")
    assert res.exit_code == 0, res.output
    [rec] = Store(home / "results.sqlite").results()
    assert rec.benchmark_version == after.version and rec.measures["V@2"].mean == 1.0  # h2 ranks first for q1


def test_a_diagnostic_folder_without_violating_documents_is_topical(tmp_path: Path) -> None:
    root = diagnostic(tmp_path / "hotels")
    queries = root / "queries_hotels.jsonl"
    rows = [json.loads(line) for line in queries.read_text(encoding="utf-8").splitlines()]
    write(queries, [json.dumps({**r, "constraint_violating_doc_ids": []}) for r in rows])
    b = BeirFolder.load(str(root))
    assert b.task == "topical" and not any(m.startswith(("V@", "FVR@")) for m in b.default_measures)
    assert "no violating documents, so the task is topical" in b.description


@pytest.mark.parametrize("lines, line, problem", [
    (["q1\th9"], 1, "field 'corpus-id': unknown document 'h9'"),
    (["query-id\tcorpus-id", "q1\th2", "q7\th2"], 3, "field 'query-id': unknown query 'q7'"),
    (["q1\th2", "q1\th1"], 2, "field 'corpus-id': document 'h1' is marked violating for query 'q1', but "),
    (["q1\th2\t1"], 1, "expected 2 tab-separated fields (query-id, corpus-id), got 3"),
])
def test_a_bad_violating_file_names_file_line_and_field(tmp_path: Path, lines: list[str], line: int,
                                                         problem: str) -> None:
    root = topical(tmp_path / "hotels")
    path = root / "qrels" / "test.violating.tsv"
    write(path, lines)
    with pytest.raises(DataError) as e:
        BeirFolder.load(str(root))
    assert str(e.value).startswith(f"{path}:{line}: {problem}")


def test_beir_datasets_keep_trec_negative_grades_as_non_relevant(tmp_path: Path) -> None:
    """In BEIR's own datasets -2 is TREC's "junk" (Touché): not relevant, not a constraint violation;
    the same files as a dataset of your own under beir/<name> mark violating documents."""
    negative_grades(tmp_path / "beir" / "webis-touche2020")
    negative_grades(tmp_path / "beir" / "my-hotels")
    official = BeirBenchmark.load("beir/webis-touche2020", tmp_path)
    assert official.task == "topical" and official.judgments.violating == {}
    assert official.judgments.relevance["q1"] == {"h1": 1, "h2": -1}
    own = BeirBenchmark.load("beir/my-hotels", tmp_path)
    assert own.task == "constraint" and own.judgments.violating["q1"] == frozenset({"h2"})


@pytest.mark.parametrize("layout, shown", [
    (negative_grades, "BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv"),
    (violating_file, "BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv, qrels/test.violating.tsv"),
    (diagnostic, "diagnostic layout: corpus_hotels.jsonl, queries_hotels.jsonl"),
])
def test_data_check_states_layout_counts_task_and_measures(layout, shown: str, tmp_path: Path) -> None:
    root = layout(tmp_path / "hotels")
    res = invoke("data", "check", str(root))
    assert res.exit_code == 0, res.output
    lines = dict(line.split(":", 1) for line in res.output.splitlines())
    assert lines["layout"].strip() == shown
    assert lines["counts"].strip() == "documents 3, queries 3 (judged 3), judged pairs 6, violating pairs 3"
    assert lines["task"].strip().startswith("constraint (queries with a violating document: 3, so V@k and FVR@k")
    assert lines["measures"].strip().startswith("Sat@10, V@2, V@10, FVR@10, nDCG@10")
    assert lines["name"].strip().startswith(f"{root.resolve()} (version ")
    assert "warning" not in lines


def test_data_check_on_a_topical_folder_and_on_a_broken_one(tmp_path: Path) -> None:
    root = topical(tmp_path / "hotels")
    res = invoke("data", "check", str(root))
    assert res.exit_code == 0
    assert "task:     topical (no violating documents, so V@k and FVR@k do not apply" in res.output
    assert "V@" not in res.output.split("measures:")[1].splitlines()[0]

    write(root / "qrels" / "test.violating.tsv", ["q1\th2"])
    res = invoke("data", "check", str(root))
    assert res.exit_code == 0 and "task:     constraint (queries with a violating document: 1" in res.output
    assert ("warning:  judged queries without a violating document: 2 of 3 ('q2', 'q3'); V@k and FVR@k are "
            "averaged over the other 1") in res.output

    write(root / "qrels" / "test.violating.tsv", ["q1\th2", "q2\th3"])  # h3 satisfies q2
    res = invoke("data", "check", str(root))
    assert res.exit_code == 1
    assert (f"problem:  {root / 'qrels' / 'test.violating.tsv'}:2: field 'corpus-id': document 'h3' is marked "
            "violating for query 'q2'") in res.output

    res = invoke("data", "check", str(tmp_path / "nowhere"))
    assert res.exit_code == 1 and "not a folder" in res.output
