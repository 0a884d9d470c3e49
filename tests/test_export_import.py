"""`beyondsim export` / `import`: JSON lines round trip (results and the drill-down content:
query texts, judgments, top-10 document snippets), benchmark version checks (against the store,
else the local copy, else accepted unverified with a warning), all-or-nothing imports,
--skip-mismatched, older exports without content lines, and errors that name the file and line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store import CONTENT_DEPTH, CONTENT_KIND, EXPORT_SCHEMA, Store, export_record
from reports.site import render_site
from tests.test_cli import DOCS, QUERIES, make_beir


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


def rows_of(dump: Path) -> list[dict]:
    return [json.loads(x) for x in dump.read_text().splitlines()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def comparable(store: Store) -> list[dict]:
    out = []
    for rec in store.results(full=True):
        d = export_record(rec)
        out.append(d)
    return sorted(out, key=lambda d: d["key"])


def test_round_trip_into_an_empty_store_equals_the_original(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    lines = rows_of(dump)
    assert [d.get("kind") for d in lines] == [CONTENT_KIND, None, None]  # content before the first result
    assert all(d["schema"] == EXPORT_SCHEMA for d in lines)
    assert all(d["per_query"] and d["rankings"] and d["provenance"] for d in lines[1:])
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
    rows = rows_of(dump)
    for r in rows:
        r.pop("benchmark_info", None)
    write_rows(bare, rows)
    res = invoke("import", str(bare), "--home", str(tmp_path / "third"))
    text = flat(res.output)
    assert res.exit_code == 2 and "cannot be verified" in text
    assert f"{bare}:1: drill-down content of benchmark {data.resolve()} version" in text  # refused with them
    assert not (tmp_path / "third" / "results.sqlite").exists()


def _mismatched(dump: Path, target: Path, line: int) -> tuple[str, str]:
    """Copy ``dump`` to ``target`` with result ``line`` (1-based) moved to another benchmark version."""
    rows = rows_of(dump)
    bad = rows[line - 1]
    old = bad["benchmark_version"]
    bad["benchmark_version"], bad["key"] = "f" * 16, "k" * 24
    bad["benchmark_info"]["version"] = "f" * 16
    target.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return old, bad["benchmark"]


def test_mismatched_version_is_refused_and_nothing_written(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    bad = tmp_path / "bad.jsonl"
    ours, bench = _mismatched(dump, bad, line=3)
    # (a) the store knows the benchmark: its versions decide
    res = invoke("import", str(bad), "--home", str(home))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert f"{bad}:3: result {'k' * 24} (bm25, seed 1) on benchmark {bench} was computed on version {'f' * 16}" in text
    assert f"this store has version(s) {ours}; refusing to mix" in text
    assert "nothing was imported" in text
    with Store(home / "results.sqlite") as store:
        assert len(store.results()) == 2
    # (b) an empty store: the local copy of the benchmark decides; the good line 1 is not written either
    other = tmp_path / "other"
    res = invoke("import", str(bad), "--home", str(other))
    text = flat(res.output)
    assert res.exit_code == 2 and f"{bad}:3:" in text and "the local copy of the benchmark has" in text and ours in text
    assert not (other / "results.sqlite").exists() or Store(other / "results.sqlite").results() == []
    # --skip-mismatched imports the matching result and lists the other
    res = invoke("import", str(bad), "--home", str(other), "--skip-mismatched")
    text = flat(res.output)
    assert res.exit_code == 0, res.output
    assert "imported 1 result(s)" in text and f"skipped 1 mismatched result(s): - {bad}:3:" in text
    with Store(other / "results.sqlite") as store:
        assert [r.seed for r in store.results()] == [0]
        assert [b.version for b in store.benchmarks()] == [ours]


def test_malformed_lines_name_file_and_line(exported, tmp_path: Path) -> None:
    dump, _ = exported
    good = [x for x in dump.read_text().splitlines() if "kind" not in json.loads(x)]  # the result lines
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


def drilldown_page(store_path: Path, out: Path) -> str:
    with Store(store_path) as store:
        render_site(store, out, n_resamples=200)
    pages = sorted((out / "retriever" / "bm25").glob("*-seed0.html"))
    assert len(pages) == 1, pages
    return pages[0].read_text(encoding="utf-8")


def test_drilldown_content_round_trip(exported, home: Path, tmp_path: Path) -> None:
    dump, _ = exported
    with Store(home / "results.sqlite") as a:
        [version] = {r.benchmark_version for r in a.results()}
        a.save_documents(version, [("zz", "Not ranked", "a document in no stored top 10")])
        top = {d for r in a.results(full=True) for ranking in r.rankings.values() for d, _ in ranking[:CONTENT_DEPTH]}
    dump = tmp_path / "dump2.jsonl"
    assert invoke("export", str(dump)).exit_code == 0
    [content] = [d for d in rows_of(dump) if d.get("kind") == CONTENT_KIND]
    assert content["benchmark_version"] == version
    assert {d["docid"] for d in content["documents"]} == top and "zz" not in top  # only the exported top 10s
    other = tmp_path / "other"
    res = invoke("import", str(dump), "--home", str(other))
    assert res.exit_code == 0, res.output
    assert "imported 2 result(s)" in flat(res.output) and f"{len(top)} document snippet(s) added" in flat(res.output)
    with Store(home / "results.sqlite") as a, Store(other / "results.sqlite") as b:
        assert b.queries_of(version) == a.queries_of(version) and len(a.queries_of(version)) == 3
        assert b.qrels_of(version) == a.qrels_of(version) and a.qrels_of(version)[0]
        assert b.documents_of(version) == a.documents_of(version, top)
    page = drilldown_page(other / "results.sqlite", tmp_path / "site")
    assert QUERIES["q1"] in page and DOCS["d1"] in page and "✓ satisfying" in page
    assert "not in this store" not in page
    # importing again adds nothing and keeps the content as it is
    res = invoke("import", str(dump), "--home", str(other))
    assert res.exit_code == 0 and "2 already present" in res.output and "0 document snippet(s) added" in flat(res.output)
    with Store(other / "results.sqlite") as b:
        assert len(b.queries_of(version)) == 3 and set(b.documents_of(version)) == top


def test_old_export_without_content_still_imports(exported, tmp_path: Path) -> None:
    dump, _ = exported
    rows = [dict(r, schema=1) for r in rows_of(dump) if "kind" not in r]
    old = write_rows(tmp_path / "old.jsonl", rows)
    other = tmp_path / "other"
    res = invoke("import", str(old), "--home", str(other))
    assert res.exit_code == 0, res.output
    assert "imported 2 result(s), 0 already present" in res.output and "drill-down" not in res.output
    with Store(other / "results.sqlite") as b:
        version = b.results()[0].benchmark_version
        assert b.queries_of(version) == [] and b.documents_of(version) == {}
    page = drilldown_page(other / "results.sqlite", tmp_path / "site")
    assert "not in this store" in page and QUERIES["q1"] not in page  # ids only, as before
    # a schema-1 line cannot be a content line
    content = next(r for r in rows_of(dump) if r.get("kind") == CONTENT_KIND)
    bad = write_rows(tmp_path / "bad.jsonl", [dict(content, schema=1)] + rows)
    res = invoke("import", str(bad), "--home", str(tmp_path / "third"))
    assert res.exit_code == 2 and f"{bad}:1:" in flat(res.output) and "unknown field(s)" in flat(res.output)


def test_malformed_content_lines_name_file_and_line(exported, tmp_path: Path) -> None:
    dump, _ = exported
    content, *results = rows_of(dump)
    assert content["kind"] == CONTENT_KIND
    q0, r0, d0 = content["queries"][0], content["qrels"][0], content["documents"][0]
    cases = {
        "queries": ({**content, "queries": {"q1": "text"}}, "field 'queries' must be list"),
        "qrel grade": ({**content, "qrels": [{**r0, "grade": "high"}]}, "qrels[0]: field 'grade' must be int or null"),
        "violating": ({**content, "qrels": [{**r0, "violating": 1}]}, "qrels[0]: field 'violating' must be bool"),
        "query text": ({**content, "queries": [{k: v for k, v in q0.items() if k != "text"}]},
                       "queries[0]: missing field 'text'"),
        "duplicate": ({**content, "queries": [q0, q0]}, "queries[1]: duplicate qid"),
        "document": ({**content, "documents": [{**d0, "body": "x"}]}, "documents[0]: unknown field(s) body"),
        "version": ({k: v for k, v in content.items() if k != "benchmark_version"},
                    "missing field 'benchmark_version'"),
        "extra": ({**content, "stats": {}}, "unknown field(s) stats"),
        "kind": ({**content, "kind": "sweep"}, "unknown line kind 'sweep'"),
    }
    other = tmp_path / "other"
    for name, (row, expected) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.jsonl"
        path.write_text(f"{json.dumps(results[0])}\n\n{json.dumps(row)}\n{json.dumps(results[1])}\n")
        res = invoke("import", str(path), "--home", str(other))
        text = flat(res.output)
        assert res.exit_code == 2, (name, res.output)
        assert f"{path}:3:" in text and expected in text, (name, expected, text)
        if name not in ("kind",):
            assert "malformed benchmark content line" in text, text
    assert not (other / "results.sqlite").exists()  # all or nothing


def test_content_of_a_mismatched_version_is_refused(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    rows = rows_of(dump)
    ours = rows[0]["benchmark_version"]
    bad = write_rows(tmp_path / "bad.jsonl", [dict(rows[0], benchmark_version="f" * 16)] + rows[1:])
    # an empty store: the local copy decides; nothing at all is written
    other = tmp_path / "other"
    res = invoke("import", str(bad), "--home", str(other))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert (f"{bad}:1: drill-down content of benchmark {data.resolve()} is of version {'f' * 16}, but the local "
            f"copy of the benchmark has version(s) {ours}; refusing to mix") in text
    assert "0 of 2 result(s)" not in text and "1 of 1 benchmark content line(s)" in text
    assert "nothing was imported" in text
    assert not (other / "results.sqlite").exists()
    # a store that knows the benchmark: its versions decide, and it is left as it was
    res = invoke("import", str(bad), "--home", str(home))
    assert res.exit_code == 2 and f"{bad}:1:" in flat(res.output) and "this store has version(s)" in flat(res.output)
    with Store(home / "results.sqlite") as store:
        assert len(store.results()) == 2 and store.queries_of("f" * 16) == []
    # --skip-mismatched: the content line goes with the results of its version
    moved = [dict(r, benchmark_version="f" * 16) for r in rows]
    for r in moved[1:]:
        r["key"] = r["key"][::-1]
        r["benchmark_info"] = dict(r["benchmark_info"], version="f" * 16)
    both = write_rows(tmp_path / "both.jsonl", rows + moved)
    res = invoke("import", str(both), "--home", str(other), "--skip-mismatched")
    text = flat(res.output)
    assert res.exit_code == 0, res.output
    assert "imported 2 result(s)" in text
    assert (f"skipped 2 mismatched result(s) and 1 mismatched benchmark content line(s): - {both}:4: drill-down "
            f"content") in text and f"{both}:5: result" in text and f"{both}:6: result" in text
    with Store(other / "results.sqlite") as store:
        assert {r.benchmark_version for r in store.results()} == {ours}
        assert len(store.queries_of(ours)) == 3 and store.queries_of("f" * 16) == []
        assert store.documents_of("f" * 16) == {}
