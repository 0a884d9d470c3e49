"""`beyondsim export` / `import`: JSON lines round trip (results and the drill-down content:
query texts, judgments, top-10 document snippets), benchmark version checks (against the store,
else the local copy, else accepted unverified with a warning), all-or-nothing imports,
--skip-mismatched, older exports without content lines, and errors that name the file and line.
One schema for every line: all lines are checked before anything is written, every problem is
listed with file, line and field; no NaN or infinity either way; a results file is data, so a
retriever given as module:Class is refused and never imported."""

from __future__ import annotations

import importlib
import json
import math
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.exchange import CONTENT_KIND, EXPORT_SCHEMA, export_record
from harness.store.results import CONTENT_DEPTH, MeasureValue, Store, result_key
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
        # each imported result says where it came from (and is "reported": nothing was recomputed)
        for d in copy:
            assert d["extra"].pop("origin") == {"kind": "import", "source": str(dump)}
            assert d["extra"].pop("rankings_cut_at") == d["k"]  # the export says its rankings are whole
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


def _mismatched(dump: Path, target: Path, line: int) -> tuple[str, str, str]:
    """Copy ``dump`` to ``target`` with result ``line`` (1-based) moved to another benchmark version;
    returns its old version, its benchmark and the key an import derives for it."""
    rows = rows_of(dump)
    bad = rows[line - 1]
    old = bad["benchmark_version"]
    bad["benchmark_version"], bad["key"] = "f" * 16, "k" * 24  # the key a file gives is never used
    bad["benchmark_info"]["version"] = "f" * 16
    target.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return old, bad["benchmark"], result_key(bad["spec_hash"], "f" * 16, bad["seed"], bad["k"], bad["harness_version"])


def test_mismatched_version_is_refused_and_nothing_written(exported, home: Path, tmp_path: Path) -> None:
    dump, data = exported
    bad = tmp_path / "bad.jsonl"
    ours, bench, key = _mismatched(dump, bad, line=3)
    # (a) the store knows the benchmark: its versions decide
    res = invoke("import", str(bad), "--home", str(home))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert f"{bad}:3: result {key} (bm25, seed 1) on benchmark {bench} was computed on version {'f' * 16}" in text
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
        json.dumps({**json.loads(good[0]), "measures": {"nDCG@10": {"mean": "high", "n": 3}}}):
            "measures['nDCG@10']['mean']: Input should be a valid number, got 'high'",
        json.dumps({k: v for k, v in json.loads(good[0]).items() if k != "benchmark_version"}):
            "benchmark_version: missing field",
        json.dumps({**json.loads(good[0]), "rankings": {"q1": [["d1"]]}}): "rankings['q1'][0][1]: missing value",
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
    """The drill-down page of the bm25 result and the data files it draws from, as one text."""
    from reports.pages.drilldown import page_data

    with Store(store_path) as store:
        render_site(store, out, n_resamples=200)
    pages = sorted((out / "retriever" / "bm25").glob("*-seed0.html"))
    assert len(pages) == 1, pages
    data = page_data(out, str(pages[0].relative_to(out)))
    return pages[0].read_text(encoding="utf-8") + json.dumps(data, ensure_ascii=False)


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
    assert res.exit_code == 2 and f"{bad}:1: schema: unsupported export schema 1 (expected 2)" in flat(res.output)


def test_malformed_content_lines_name_file_and_line(exported, tmp_path: Path) -> None:
    dump, _ = exported
    content, *results = rows_of(dump)
    assert content["kind"] == CONTENT_KIND
    q0, r0, d0 = content["queries"][0], content["qrels"][0], content["documents"][0]
    cases = {
        "queries": ({**content, "queries": {"q1": "text"}}, "queries: Input should be a valid array"),
        "qrel grade": ({**content, "qrels": [{**r0, "grade": "high"}]},
                       "qrels[0]['grade']: Input should be a valid integer, got 'high'"),
        "violating": ({**content, "qrels": [{**r0, "violating": 1}]},
                      "qrels[0]['violating']: Input should be a valid boolean, got 1"),
        "query text": ({**content, "queries": [{k: v for k, v in q0.items() if k != "text"}]},
                       "queries[0]['text']: missing field"),
        "duplicate": ({**content, "queries": [q0, q0]}, f"queries: [1] repeats the qid {q0['qid']!r} of [0]"),
        "document": ({**content, "documents": [{**d0, "body": "x"}]}, "documents[0]['body']: unknown field"),
        "version": ({k: v for k, v in content.items() if k != "benchmark_version"}, "benchmark_version: missing field"),
        "extra": ({**content, "stats": {}}, "stats: unknown field"),
        "kind": ({**content, "kind": "sweep"}, "kind: unknown line kind 'sweep'"),
    }
    other = tmp_path / "other"
    for name, (row, expected) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.jsonl"
        path.write_text(f"{json.dumps(results[0])}\n\n{json.dumps(row)}\n{json.dumps(results[1])}\n")
        res = invoke("import", str(path), "--home", str(other))
        text = flat(res.output)
        assert res.exit_code == 2, (name, res.output)
        assert f"{path}:3:" in text and expected in text, (name, expected, text)
        assert f"cannot import {path}: 1 problem(s); nothing was imported" in text, text  # only the bad field
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


# -- one schema, all or nothing ------------------------------------------------------------------


def test_a_nan_after_a_good_line_refuses_the_file_and_writes_nothing(exported, home: Path, tmp_path: Path) -> None:
    """The reported crash: a NaN per-query value on line 3 used to stop the import with a database
    error after line 2 was stored."""
    dump, _ = exported
    content, r0, r1 = rows_of(dump)
    q = next(iter(r1["per_query"]["nDCG@10"]))
    r1["per_query"]["nDCG@10"][q] = float("nan")  # json.dumps writes it as NaN
    path = write_rows(tmp_path / "nan.jsonl", [content, r0, r1])
    other = tmp_path / "other"
    res = invoke("import", str(path), "--home", str(other))
    assert res.exit_code == 2, res.output
    assert f"{path}:3: per_query['nDCG@10'][{q!r}]: NaN is not allowed (only finite numbers)" in flat(res.output)
    assert "nothing was imported" in flat(res.output)
    assert not (other / "results.sqlite").exists()


def test_every_bad_value_is_listed_with_file_line_and_field(exported, home: Path, tmp_path: Path) -> None:
    dump, _ = exported
    content, r0, r1 = rows_of(dump)
    q = next(iter(r1["per_query"]["nDCG@10"]))
    search = r1["phases"]["search"]
    nd = r1["measures"]["nDCG@10"]
    bad = [  # (line, the problem reported for it)
        (dict(r1, phases={**r1["phases"], "search": {**search, "wall_s": float("nan")}}),
         "phases['search']['wall_s']: NaN is not allowed (only finite numbers)"),
        (dict(r1, seed=2**63),
         "seed: Input should be less than or equal to 9223372036854775807, got 9223372036854775808"),
        (dict(r1, n_queries="3"), "n_queries: Input should be a valid integer, got '3'"),
        (dict(r1, measures={"nDCG@10": {**nd, "mean": float("inf")}}),
         "measures['nDCG@10']['mean']: Infinity is not allowed (only finite numbers)"),
        (dict(r1, rankings={q: [["d1", "0.5"]]}), f"rankings[{q!r}][0][1]: Input should be a valid number, got '0.5'"),
        (dict(r1, extra={"x": [1, float("-inf")]}),
         "extra: -Infinity at ['x'][1] is not allowed (only finite numbers)"),
        (dict(r1, benchmark_version=""), "benchmark_version: String should have at least 1 character"),
        (dict(r1, llm_calls=[{"model": "m", "prompt_tokens": 2**64, "completion_tokens": 1, "latency_s": 0.1,
                              "cached": False}]), "llm_calls[0]['prompt_tokens']: Input should be less than or equal"),
        (dict(r1, label=1), "label: Input should be a valid string, got 1"),
        (dict(r1, surprise=True), "surprise: unknown field"),
    ]
    path = write_rows(tmp_path / "bad.jsonl", [content, r0] + [row for row, _ in bad])
    with Store(home / "results.sqlite") as store:
        before = comparable(store)
    res = invoke("import", str(path), "--home", str(home))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert f"cannot import {path}: {len(bad)} problem(s); nothing was imported" in text
    for lineno, (_, problem) in enumerate(bad, 3):
        assert f"{path}:{lineno}: {problem}" in text, (problem, text)
    with Store(home / "results.sqlite") as store:
        assert comparable(store) == before  # the good lines 1 and 2 were not written either


def test_problems_beyond_the_first_twenty_are_counted(exported, tmp_path: Path) -> None:
    dump, _ = exported
    _, r0, _ = rows_of(dump)
    path = write_rows(tmp_path / "many.jsonl", [dict(r0, seed=-1.5)] * 25)
    res = invoke("import", str(path), "--home", str(tmp_path / "other"))
    text = flat(res.output)
    assert res.exit_code == 2 and "25 problem(s)" in text
    assert f"{path}:20: seed:" in text and f"{path}:21: seed:" not in text and "... and 5 more problem(s)" in text


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"{name} written into a JSON line")


def test_export_writes_no_nan_or_infinity(exported, home: Path, tmp_path: Path) -> None:
    """A store written before finite numbers were enforced (an older import kept Infinity): an
    undefined mean or bound is exported as null, a value that has no null meaning refuses the
    export, which then writes nothing."""
    dump, _ = exported
    with sqlite3.connect(home / "results.sqlite") as db:
        db.execute("UPDATE measures SET mean = ?, ci_low = ? WHERE measure = 'nDCG@10'", (math.inf, -math.inf))
    out = tmp_path / "out.jsonl"
    res = invoke("export", str(out))
    assert res.exit_code == 0, res.output
    rows = [json.loads(x, parse_constant=_refuse_constant) for x in out.read_text().splitlines()]
    assert [r["measures"]["nDCG@10"]["mean"] for r in rows[1:]] == [None, None]
    assert [r["measures"]["nDCG@10"]["ci_low"] for r in rows[1:]] == [None, None]
    other = tmp_path / "other"
    assert invoke("import", str(out), "--home", str(other)).exit_code == 0
    with Store(other / "results.sqlite") as store:
        assert {r.measures["nDCG@10"].mean for r in store.results()} == {None}
    with sqlite3.connect(home / "results.sqlite") as db:
        rid, key, qid = db.execute(
            "SELECT r.id, r.key, q.qid FROM results r JOIN query_measures q ON q.result_id = r.id"
            " WHERE q.measure = 'nDCG@10' ORDER BY r.seed, q.qid").fetchone()
        db.execute("UPDATE query_measures SET value = ? WHERE result_id = ? AND qid = ? AND measure = 'nDCG@10'",
                   (math.inf, rid, qid))
    refused = tmp_path / "refused.jsonl"
    res = invoke("export", str(refused))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert "cannot export: 1 problem(s); nothing was written" in text
    assert f"result {key} (bm25 on " in text and f"per_query['nDCG@10'][{qid!r}]: Infinity is not allowed" in text
    assert not refused.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    res = invoke("export", "-")
    assert res.exit_code == 2 and res.stdout == ""


def test_the_store_keeps_only_finite_numbers(tmp_path: Path) -> None:
    from tests.test_store_concurrency import version

    with Store(tmp_path / "results.sqlite") as store:
        cases = {
            "per_query": (lambda r: r.per_query["nDCG@10"].update(q1=math.nan),
                          "per-query nDCG@10 of query 'q1' is nan"),
            "inf per_query": (lambda r: r.per_query["nDCG@10"].update(q2=math.inf), "query 'q2' is inf"),
            "score": (lambda r: r.rankings.update(q1=[("d1", -math.inf)]), "score of 'd1' for query 'q1' is -inf"),
            "phase": (lambda r: r.phases["search"].update(cpu_s=math.nan), "phase search cpu_s is nan"),
            "extra": (lambda r: r.extra.update(x=[math.nan]), "extra holds a NaN or infinite number"),
        }
        for name, (spoil, message) in cases.items():
            rec = version(1)
            spoil(rec)
            with pytest.raises(ValueError, match=re.escape(message)):
                store.save(rec)
            assert store.results() == [], name
        rec = version(1)
        rec.measures["nDCG@10"] = MeasureValue(math.nan, 0, math.inf, -math.inf)  # no query to average over
        assert store.save(rec) is True
        assert store.get(rec.key).measures["nDCG@10"] == MeasureValue(None, 0, None, None)


MARKER_MODULE = "beyondsim_marker_probe"


def test_a_module_class_retriever_in_a_results_file_is_refused_and_never_imported(
        exported, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump, _ = exported
    marker = tmp_path / "imported.marker"
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / f"{MARKER_MODULE}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n\nclass Evil:\n    pass\n")
    monkeypatch.syspath_prepend(str(mods))
    name = f"{MARKER_MODULE}:Evil"
    content, r0, r1 = rows_of(dump)
    evil = dict(r1, key="e" * 24, retriever=name, label=name, spec={**r1["spec"], "retriever": name},
                provenance={**r1["provenance"], "class": name})
    path = write_rows(tmp_path / "evil.jsonl", [content, r0, evil])
    with Store(home / "results.sqlite") as store:
        before = comparable(store)
    res = invoke("import", str(path), "--home", str(home))
    text = flat(res.output)
    assert res.exit_code == 2, res.output
    assert (f"{path}:3: retriever: {name!r} names a retriever class by module path (module:Class); a results file is "
            "data and nothing in it is ever imported") in text
    assert f"{path}:3: spec['retriever']: {name!r}" in text
    with Store(home / "results.sqlite") as store:
        assert comparable(store) == before
    # a store that holds such a result (run here with `run MODULE:Class`): every reader shows it as text
    from harness.store.exchange import ImportedLine, read_export

    [_, ok] = read_export([json.dumps(r1)] * 2, "x")
    assert isinstance(ok, ImportedLine)
    rec = ok.record
    rec.key, rec.retriever, rec.label, rec.spec = "f" * 24, name, name, {**rec.spec, "retriever": name}
    with Store(home / "results.sqlite") as store:
        assert store.save(rec)
    assert invoke("leaderboard", "--out", str(tmp_path / "site")).exit_code == 0
    assert invoke("audit", "--format", "json").exit_code == 0
    res = invoke("export", str(tmp_path / "all.jsonl"))  # no import would take it: the export says so
    assert res.exit_code == 2 and f"result {'f' * 24} ({name} on" in flat(res.output)
    assert invoke("export", str(tmp_path / "bm25.jsonl"), "-r", "bm25").exit_code == 0
    assert not marker.exists() and MARKER_MODULE not in sys.modules
    importlib.import_module(MARKER_MODULE)  # the probe works: an import would have left the marker
    assert marker.exists()
    del sys.modules[MARKER_MODULE]
