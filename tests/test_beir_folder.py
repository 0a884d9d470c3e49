"""BEIR-format folders (``beyondsim run … --benchmark ./DIR`` and ``beir/<name>``): the same
strictness as every other loader — undecodable bytes, non-integer grades, blank texts and empty
files are errors naming file, line and field, raised at load time, so nothing is stored for a
benchmark that did not load — and an unknown ``beir/<name>`` is named as such, with close names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.beir import BeirBenchmark, BeirFolder
from harness.cli import app
from harness.data import DataError, read_json
from harness.store.results import Store

DOCS = [{"_id": "d1", "title": "Cats", "text": "Cats purr."}, {"_id": "d2", "title": "Dogs", "text": "Dogs bark."}]
QUERIES = [{"_id": "q1", "text": "do cats purr"}, {"_id": "q2", "text": "why dogs bark"}]
QRELS = ["q1\td1\t1", "q2\td2\t1"]
HEADER = "query-id\tcorpus-id\tscore"


def folder(root: Path, docs: list | None = None, queries: list | None = None, qrels: list[str] | None = None,
           raw: dict[str, bytes] | None = None) -> Path:
    """A BEIR folder; ``raw`` replaces a file (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``)
    by the given bytes."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    files = {
        "corpus.jsonl": "".join(json.dumps(d) + "\n" for d in (DOCS if docs is None else docs)).encode(),
        "queries.jsonl": "".join(json.dumps(q) + "\n" for q in (QUERIES if queries is None else queries)).encode(),
        "qrels/test.tsv": "\n".join([HEADER, *(QRELS if qrels is None else qrels)]).encode() + b"\n",
    }
    files.update(raw or {})
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


@pytest.mark.parametrize("score, problem", [
    ("inf", "field 'score' must be a whole number, got 'inf'"),
    ("-inf", "field 'score' must be a whole number, got '-inf'"),
    ("nan", "field 'score' must be a whole number, got 'nan'"),
    ("1.5", "field 'score' must be a whole number, got '1.5'"),
])
def test_non_integer_grades_name_file_line_and_field(tmp_path: Path, score: str, problem: str) -> None:
    root = folder(tmp_path / "ds", qrels=["q1\td1\t1", f"q2\td2\t{score}"])
    with pytest.raises(DataError) as e:
        BeirFolder.load(str(root))
    assert str(e.value) == f"{root / 'qrels' / 'test.tsv'}:3: {problem}"


def test_whole_grades_load_as_integers_fractions_do_not(tmp_path: Path) -> None:
    """``2.0`` and ``1e0`` are whole numbers; negative grades load as they are; ``2.5`` is not cut to 2."""
    root = folder(tmp_path / "ds", qrels=["q1\td1\t2.0", "q1\td2\t-1", "q2\td2\t1e0"])
    b = BeirFolder.load(str(root))
    assert b.judgments.relevance == {"q1": {"d1": 2, "d2": -1}, "q2": {"d2": 1}}
    assert all(type(g) is int for docs in b.judgments.relevance.values() for g in docs.values())
    folder(root, qrels=["q1\td1\t2.0", "q2\td2\t2.5"])
    with pytest.raises(DataError, match=r"test\.tsv:3: field 'score' must be a whole number, got '2\.5'"):
        BeirFolder.load(str(root))


@pytest.mark.parametrize("file, line, column", [("corpus.jsonl", 2, 32), ("queries.jsonl", 1, 23),
                                                ("qrels/test.tsv", 3, 4)])
def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path: Path, file: str, line: int, column: int) -> None:
    root = folder(tmp_path / "ds")
    lines = (root / file).read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:column - 1] + b"\xff" + lines[line - 1][column - 1:]
    (root / file).write_bytes(b"\n".join(lines))
    with pytest.raises(DataError) as e:
        BeirFolder.load(str(root))
    assert str(e.value) == f"{root / file}:{line}: not valid UTF-8 (byte 0xff at byte {column} of the line)"


def test_json_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_bytes(b'[\n  "caf\xc3\xa9",\n  "caf\xe9"\n]\n')  # a Latin-1 byte on line 3
    with pytest.raises(DataError, match=r"list\.json:3: not valid UTF-8 \(byte 0xe9 at byte 7 of the line\)"):
        read_json(path)


@pytest.mark.parametrize("change, where, problem", [
    ({"queries": [QUERIES[0], {"_id": "q2", "text": "  "}]}, "queries.jsonl:2", "query 'q2': field 'text' is empty"),
    ({"docs": [DOCS[0], {"_id": "d2", "title": "", "text": " "}]}, "corpus.jsonl:2",
     "document 'd2': fields 'title' and 'text' are both empty"),
    ({"docs": []}, "corpus.jsonl", "no documents found"),
    ({"queries": []}, "queries.jsonl", "no queries found"),
    ({"qrels": []}, "qrels/test.tsv", "no judgments found (no qrels rows)"),
    ({"raw": {"qrels/test.tsv": b""}}, "qrels/test.tsv", "no judgments found (no qrels rows)"),
    ({"qrels": ["q1\td1\t0", "q2\td2\t0"]}, "qrels/test.tsv",
     "no judgment has a grade >= 1: no query has a relevant document"),
])
def test_blank_texts_and_empty_files_are_errors(tmp_path: Path, change: dict, where: str, problem: str) -> None:
    root = folder(tmp_path / "ds", **change)
    with pytest.raises(DataError) as e:
        BeirFolder.load(str(root))
    assert str(e.value) == f"{root}/{where}: {problem}"


def test_a_title_without_text_is_a_document(tmp_path: Path) -> None:
    """BEIR corpora hold title-only documents (an empty abstract): they load; only a document with
    neither is refused."""
    root = folder(tmp_path / "ds", docs=[DOCS[0], {"_id": "d2", "title": "Dogs", "text": ""}])
    d2 = BeirFolder.load(str(root)).corpus.get("d2")
    assert (d2.title, d2.text) == ("Dogs", "")
    folder(root, docs=[DOCS[0], {"_id": "d2", "title": None, "text": ""}])
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: document 'd2': fields 'title' and 'text' are both empty"):
        BeirFolder.load(str(root))


@pytest.mark.parametrize("damage, message", [
    ({"qrels": ["q1\td1\tinf"]}, "qrels/test.tsv:2: field 'score' must be a whole number, got 'inf'"),
    ({"raw": {"qrels/test.tsv": (HEADER + "\n").encode()}}, "qrels/test.tsv: no judgments found (no qrels rows)"),
    ({"queries": [QUERIES[0], {"_id": "q2", "text": ""}]}, "queries.jsonl:2: query 'q2': field 'text' is empty"),
    ({"raw": {name: b"" for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")}},
     "corpus.jsonl: no documents found"),
])
def test_cli_run_on_a_bad_folder_stores_nothing(tmp_path: Path, damage: dict, message: str, no_network) -> None:
    root = folder(tmp_path / "bad-ds", **damage)
    home = tmp_path / "home"
    command = ["run", "bm25", "--benchmark", str(root), "--home", str(home)]
    res = CliRunner().invoke(app, command, catch_exceptions=False)
    assert res.exit_code != 0
    assert res.output.strip().splitlines() == [f"error: {root}/{message}"]
    with Store(home / "results.sqlite") as store:
        assert store.benchmarks() == [] and store.results() == []

    # the same command on the repaired folder runs, scores both queries and stores the benchmark
    folder(root)
    res = CliRunner().invoke(app, command, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    with Store(home / "results.sqlite") as store:
        assert [b.name for b in store.benchmarks()] == [str(root.resolve())]
        (rec,) = store.results()
        assert rec.n_queries == 2 and rec.measures["nDCG@10"].mean == pytest.approx(1.0)


def test_unknown_beir_name_suggests_close_ones(tmp_path: Path) -> None:
    info = BeirBenchmark.info("beir/scifacts")
    assert "scifacts.zip" not in info.source and "ir_datasets id" not in info.source
    assert "'scifacts' is not a BEIR dataset (did you mean 'scifact'" in info.source
    with pytest.raises(LookupError) as e:
        BeirBenchmark.load("beir/scifacts", tmp_path)
    msg = str(e.value)
    assert msg.startswith("unknown BEIR dataset 'scifacts' (benchmark 'beir/scifacts'). Did you mean 'beir/scifact'")
    assert "scifacts.zip" not in msg and "\n" not in msg and str(tmp_path / "beir" / "scifacts") in msg
    with pytest.raises(LookupError, match=r"Did you mean 'beir/nfcorpus:train'\?"):
        BeirBenchmark.load("beir/nfcorpsu:train", tmp_path)
    with pytest.raises(LookupError, match=r"Did you mean 'beir/cqadupstack/android'"):
        BeirBenchmark.load("beir/cqadupstack/andriod", tmp_path)
    # a folder of one's own under beir/<name> is still a benchmark, whatever its name
    folder(tmp_path / "beir" / "scifacts")
    assert len(BeirBenchmark.load("beir/scifacts", tmp_path).queries) == 2
    # a BEIR name keeps its official source when absent
    assert "nfcorpus.zip" in BeirBenchmark.info("beir/nfcorpus").source


def test_cli_names_an_unknown_beir_dataset(tmp_path: Path, no_network) -> None:
    res = CliRunner().invoke(app, ["run", "bm25", "--benchmark", "beir/scifacts", "--data-dir", str(tmp_path),
                                   "--home", str(tmp_path / "home")], catch_exceptions=False)
    assert res.exit_code != 0
    (line,) = res.output.strip().splitlines()
    assert line.startswith("error: unknown BEIR dataset 'scifacts'") and "Did you mean 'beir/scifact'" in line
    assert "scifacts.zip" not in line
