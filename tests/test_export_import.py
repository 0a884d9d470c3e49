"""`beyondsim export` / `import`: JSON lines round trip, benchmark version checks (against the
store, else the local copy, else accepted unverified with a warning), all-or-nothing imports,
--skip-mismatched, and errors that name the file and line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store import EXPORT_SCHEMA, Store, export_record
from tests.test_cli import make_beir


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input)


def flat(output: str) -> str:
    return " ".join(output.split())


@pytest.fixture
def exported(tmp_path: Path, home: Path) -> tuple[Path, Path]:
    """Two bm25 results (seeds 0 and 1) on a BEIR folder, exported to ``dump.jsonl``."""
    data = make_beir(tmp_path / "tiny-med")
    res = invoke("run", "bm25", "--benchmark", str(data), "--k", "5", "--seeds", "2")
    assert res.exit_code == 0, res.output
    dump = tmp_path / "dump.jsonl"
    res = invoke("export", str(dump))
    assert res.exit_code == 0 and "exported 2 result(s)" in res.output
    return dump, data


def comparable(store: Store) -> list[dict]:
    out = []
    for rec in store.results(full=True):
        d = export_record(rec)
        out.append(d)
    return sorted(out, key=lambda d: d["key"])


def test_round_trip_into_an_empty_store_equals_the_original(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    assert all(d["schema"] == EXPORT_SCHEMA and d["per_query"] and d["rankings"] and d["provenance"] for d in lines)
    other = tmp_path / "other"
    res = invoke("import", str(dump), "--home", str(other))
    assert res.exit_code == 0, res.output
    assert "imported 2 result(s), 0 already present" in res.output and "warning" not in res.output
    with Store(home / "results.sqlite") as a, Store(other / "results.sqlite") as b:
        original, copy = comparable(a), comparable(b)
        assert copy == original  # every field: measures, per-query, rankings, phases, provenance, environment, ...
        assert original[0]["provenance"]["class"] == "retrievers.bm25:BM25Retriever"
        assert [x.__dict__ for x in b.benchmarks()] == [x.__dict__ for x in a.benchmarks()]
    res = invoke("import", str(dump), "--home", str(other))
    assert res.exit_code == 0 and "imported 0 result(s), 2 already present" in res.output
    # from stdin too
    third = tmp_path / "third"
    res = invoke("import", "-", "--home", str(third), input=dump.read_text())
    assert res.exit_code == 0 and "imported 2 result(s)" in res.output


def test_unloadable_benchmark_is_accepted_unverified_with_its_description(exported, tmp_path: Path) -> None:
    dump, data = exported
    shutil.rmtree(data)  # the benchmark can no longer be loaded here, and the new store does not know it
    other = tmp_path / "other"
    res = invoke("import", str(dump), "--home", str(other))
    assert res.exit_code == 0, res.output
    text = flat(res.output)
    assert f"benchmark {data.resolve()} version" in text and "was NOT verified" in text
    assert "imported 2 result(s)" in text
    with Store(other / "results.sqlite") as store:
        [info] = store.benchmarks()
        assert info.name == str(data.resolve()) and info.task == "topical"
    # without the line's benchmark description there is nothing to accept it on
    bare = tmp_path / "bare.jsonl"
    rows = [json.loads(x) for x in dump.read_text().splitlines()]
    for r in rows:
        r.pop("benchmark_info")
    bare.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = invoke("import", str(bare), "--home", str(tmp_path / "third"))
    assert res.exit_code == 2 and "cannot be verified" in flat(res.output)
    assert not (tmp_path / "third" / "results.sqlite").exists()


def _mismatched(dump: Path, target: Path, line: int) -> tuple[str, str]:
    """Copy ``dump`` to ``target`` with result ``line`` (1-based) moved to another benchmark version."""
    rows = [json.loads(x) for x in dump.read_text().splitlines()]
    bad = rows[line - 1]
    old = bad["benchmark_version"]
    bad["benchmark_version"], bad["key"] = "f" * 16, "k" * 24
    bad["benchmark_info"]["version"] = "f" * 16
    target.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return old, bad["benchmark"]


def test_mismatched_version_is_refused_and_nothing_written(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    bad = tmp_path / "bad.jsonl"
    ours, bench = _mismatched(dump, bad, line=2)
    # (a) the store knows the benchmark: its versions decide
    res = invoke("import", str(bad), "--home", str(home))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert f"{bad}:2: result {'k' * 24} (bm25, seed 1) on benchmark {bench} was computed on version {'f' * 16}" in text
    assert f"this store has version(s) {ours}; refusing to mix" in text
    assert "nothing was imported" in text
    with Store(home / "results.sqlite") as store:
        assert len(store.results()) == 2
    # (b) an empty store: the local copy of the benchmark decides; the good line 1 is not written either
    other = tmp_path / "other"
    res = invoke("import", str(bad), "--home", str(other))
    text = flat(res.output)
    assert res.exit_code == 2 and f"{bad}:2:" in text and "the local copy of the benchmark has" in text and ours in text
    assert not (other / "results.sqlite").exists() or Store(other / "results.sqlite").results() == []
    # --skip-mismatched imports the matching result and lists the other
    res = invoke("import", str(bad), "--home", str(other), "--skip-mismatched")
    text = flat(res.output)
    assert res.exit_code == 0, res.output
    assert "imported 1 result(s)" in text and f"skipped 1 mismatched result(s): - {bad}:2:" in text
    with Store(other / "results.sqlite") as store:
        assert [r.seed for r in store.results()] == [0]
        assert [b.version for b in store.benchmarks()] == [ours]


def test_malformed_lines_name_file_and_line(exported, tmp_path: Path) -> None:
    dump, _ = exported
    good = dump.read_text().splitlines()
    cases = {
        "{not json": "invalid JSON",
        json.dumps({"schema": 99}): "unsupported export schema 99",
        json.dumps({**json.loads(good[0]), "measures": {"nDCG@10": {"mean": "high", "n": 3}}}): "measure 'nDCG@10'",
        json.dumps({k: v for k, v in json.loads(good[0]).items() if k != "benchmark_version"}):
            "missing field 'benchmark_version'",
        json.dumps({**json.loads(good[0]), "rankings": {"q1": [["d1"]]}}): "rankings['q1']",
        json.dumps([1, 2]): "expected one JSON object per line",
    }
    other = tmp_path / "other"
    for i, (line, expected) in enumerate(cases.items()):
        path = tmp_path / f"m{i}.jsonl"
        path.write_text(f"{good[0]}\n\n{line}\n{good[1]}\n")  # the blank line still counts
        res = invoke("import", str(path), "--home", str(other))
        text = flat(res.output)
        assert res.exit_code == 2, (line, res.output)
        assert f"{path}:3:" in text and expected in text, (expected, text)
    assert not (other / "results.sqlite").exists()  # all or nothing: line 1 was fine, nothing written
    res = invoke("import", str(tmp_path / "absent.jsonl"), "--home", str(other))
    assert res.exit_code == 2 and "cannot read" in res.output
