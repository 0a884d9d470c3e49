"""The diagnostic-set loader: where each set is looked for, the folder format, strictness, and
the released CoDeR files in the shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.beir import BeirFolder
from benchmarks.diagnostics import DiagnosticSet, find_set_files
from harness.data import DataError, MissingDataError
from harness.registry import get_benchmark_loader

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def write_set(folder: Path, which: str = "exclusion", queries: list[dict] | None = None,
              build: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [{"doc_id": "p1", "text": "Insulin lowers glucose."}, {"doc_id": "p2", "text": "Insulin and metformin lower glucose."},
            {"doc_id": "p3", "text": "Diet matters."}]
    queries = queries if queries is not None else [{
        "query_id": "q1", "query": "Find passages about insulin that do not mention metformin.",
        "topical_relevant_doc_ids": ["p1", "p2", "p3"], "constraint_satisfying_doc_ids": ["p1"],
        "constraint_violating_doc_ids": ["p2"], "graded_relevance": {"p1": 2.0, "p2": 0.0, "p3": 1.0},
        "excluded_term": "metformin", "source_doc_id": "d9",
    }]
    (folder / f"corpus_{which}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (folder / f"queries_{which}.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    if build is not None:
        (folder / "build.json").write_text(json.dumps(build), encoding="utf-8")
    return folder


def test_folder_set_loads_with_grades_and_meta(tmp_path: Path) -> None:
    folder = write_set(tmp_path / "x", build={"params": {"source": "beir/scifact (version abc)", "seed": 0}})
    assert find_set_files(folder)[0] == "exclusion"
    b = DiagnosticSet.load_folder(folder)
    assert b.task == "constraint" and b.relevance_threshold == 2
    assert b.judgments.relevance["q1"] == {"p1": 2, "p2": 0, "p3": 1}
    assert b.judgments.violating["q1"] == frozenset({"p2"})
    assert b.queries[0].meta == {"category": "exclusion", "excluded_term": "metformin", "source_doc_id": "d9"}
    assert "built by beyondsim from beir/scifact" in b.description
    assert b.notes["provenance"]["built"]["seed"] == 0
    # a path given to the run resolves to the folder loader, which reads the set as a diagnostic
    loader, name = get_benchmark_loader(str(folder))
    assert loader is BeirFolder and loader.load(name).judgments.violating == b.judgments.violating


@pytest.mark.parametrize("bad, message", [
    ({"constraint_violating_doc_ids": ["p1"]}, "graded_relevance gives it 2, not 0"),
    ({"graded_relevance": {"p1": 2.0, "p2": 0.0, "p3": 3.0}}, "must be 0, 1 or 2"),
    ({"topical_relevant_doc_ids": ["p1", "nope"]}, "names unknown document 'nope'"),
    ({"query": "  "}, "field 'query' is empty"),
])
def test_strict_errors_name_file_line_field(tmp_path: Path, bad: dict, message: str) -> None:
    good = {"query_id": "q1", "query": "q", "topical_relevant_doc_ids": ["p1", "p2"],
            "constraint_satisfying_doc_ids": ["p1"], "constraint_violating_doc_ids": ["p2"],
            "graded_relevance": {"p1": 2.0, "p2": 0.0, "p3": 1.0}}
    folder = write_set(tmp_path / "x", queries=[good, {**good, "query_id": "q2", **bad}])
    with pytest.raises(DataError, match=message) as e:
        DiagnosticSet.load_folder(folder)
    assert e.value.path.endswith("queries_exclusion.jsonl") and e.value.line == 2


def test_lookup_order_data_dir_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    monkeypatch.setenv("BEYONDSIM_HOME", str(home))
    with pytest.raises(MissingDataError, match="build-diagnostics"):
        DiagnosticSet.load("diag/exclusion", data)
    assert DiagnosticSet.missing_files("diag/exclusion", data) == ["diag/exclusion/corpus_exclusion.jsonl",
                                                                   "diag/exclusion/queries_exclusion.jsonl"]
    write_set(home / "diagnostics" / "exclusion", build={"params": {"source": "beir/scifact"}})
    assert DiagnosticSet.locate("diag/exclusion", data)[0] == "built"
    built = DiagnosticSet.load("diag/exclusion", data)
    assert built.name == "diag/exclusion" and built.license == "that of the source corpus"
    assert [p.name for p in DiagnosticSet.files_in_use("diag/exclusion", data)] == [
        "corpus_exclusion.jsonl", "queries_exclusion.jsonl", "build.json"]
    write_set(data / "diag" / "exclusion")  # a set in the data directory takes precedence
    assert DiagnosticSet.locate("diag/exclusion", data) == ("files", data / "diag" / "exclusion")
    with pytest.raises(ValueError, match="unknown diagnostic set"):
        DiagnosticSet.info("diag/sarcasm")


@pytest.mark.skipif(not (DATA / "diag/antonym/queries_antonym.jsonl").exists(), reason="shared data absent")
def test_released_antonym_set() -> None:
    b = DiagnosticSet.load("diag/antonym", DATA)
    # the README counts 89 queries; the released file holds 90 (45 antonym pairs) over 210 passages.
    # The paper's final set (Table 5) is larger: 102 queries over 306 passages.
    assert len(b.queries) == 90 and len(b.corpus) == 210
    assert b.notes["satisfying_pairs"] == 90 and b.notes["violating_pairs"] == 90
    assert b.notes["provenance"]["kind"] == "files"
