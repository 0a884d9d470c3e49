"""`beyondsim reproduce`: the matrix of expected figures is read strictly, recomputed once per
(configuration, benchmark, seed), compared (OK / OKish / FAIL), saved to the store and shown on
the site; a reference row that moved fails the command, a published one never does. The slow
test runs the shipped matrix's --quick rows on the real data: that is what gates CI."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.registry import load_benchmark, make_spec, reference_files
from harness.record.bundle import bundle_rows
from harness.record.matrix import DIRECTION, PUBLISHED, REFERENCE, MatrixError, load_matrix, read_matrix, select
from harness.record.reproduce import (FAIL, OK, OKISH, SKIP, claim_holds, paired_difference, reproduce,
                                      shipped_matrix, status_of)
from harness.run.runner import Settings
from harness.store.results import Store
from harness.store.trust import reproduced_keys
from tests.conftest import SHARED_DATA
from tests.test_submit import make_constraint_set

MEASURES = ("V@2", "FVR@10", "nDCG@10")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-query constraint set (one satisfying and one violating document per query)."""
    return make_constraint_set(tmp_path_factory.mktemp("data") / "tiny-constraint")


@pytest.fixture
def bench(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tiny set as a short relative path (the printed table keeps one line per row)."""
    monkeypatch.chdir(tiny.parent)
    return f"./{tiny.name}"


def toml_value(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def toml_table(header: str, **f: object) -> str:
    return f"[[{header}]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in f.items()) + "\n"


def condition(row: dict) -> dict:
    """A flat row (one figure: measure, expected, kind, source, …) as a condition with one score."""
    c = {k: v for k, v in row.items() if k not in ("measure", "expected", "kind", "source")}
    return {**c, "scores": {row["measure"]: row["expected"]}} if "measure" in row else c


def matrix_text(rows: list[dict]) -> str:
    """Flat rows as a matrix file: a reference row is a [[condition]] (with its source), a paper's
    row (source "<paper>, <table>") a condition of that paper's table; one score each."""
    text = "".join(toml_table("condition", **condition(r), source=r["source"]) for r in rows
                   if r.get("kind") == "reference")
    papers: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        if r.get("kind") != "reference":
            paper, _, table = r["source"].rpartition(", ")
            papers.setdefault(paper, {}).setdefault(table, []).append(r)
    for paper, tables in papers.items():
        text += toml_table("paper", name=paper)
        for table, these in tables.items():
            text += toml_table("paper.table", name=table)
            text += "".join(toml_table("paper.table.condition", kind=r["kind"], **condition(r)) for r in these)
    return text


def base_rows(bench: str, values: dict[tuple[str, str], float] | None = None, tol: float = 1e-6) -> list[dict]:
    """bm25 (defaults) and bm25 with k1 = 0.5 on the tiny set, three measures each."""
    rows = []
    for params in ({}, {"k1": 0.5}):
        for m in MEASURES:
            key = ("k1" if params else "default", m)
            rows.append({"retriever": "bm25", **({"params": params} if params else {}), "benchmark": bench,
                         "measure": m, "expected": (values or {}).get(key, 0.0), "tolerance": tol,
                         "kind": "reference", "source": "reference run (test)", "reason": "measured by the test",
                         "quick": m != "nDCG@10"})
    return rows


def write_matrix(path: Path, rows: list[dict]) -> Path:
    path.write_text(matrix_text(rows), encoding="utf-8")
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, ["reproduce", *args], catch_exceptions=False)


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the printed tables, as cells (the box characters split them); only the
    table test reads them: the others read ``--format json``."""
    return [[c.strip() for c in line.strip()[1:-1].split("│")] for line in output.splitlines()
            if line.strip().startswith("│") and line.strip().endswith("│") and "retriever" not in line]


def matrix(*args: str) -> tuple[int, dict, str]:
    """``reproduce --format json ARGS``: the exit code, the document on stdout, and stderr (the
    notes and the verdict)."""
    res = CliRunner().invoke(app, ["reproduce", "--format", "json", *args], catch_exceptions=False)
    return res.exit_code, (json.loads(res.stdout) if res.stdout.strip() else {}), res.stderr


@pytest.fixture(scope="module")
def measured(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], float]:
    """The figures of a first reproduce run (placeholders expected), each checked against an ordinary
    `beyondsim run` of the same configuration: the matrix recomputes what `run` computes."""
    tmp = tmp_path_factory.mktemp("first")
    rows = read_matrix(write_matrix(tmp / "m.toml", base_rows(str(tiny), tol=10.0)))
    settings = Settings(home=tmp / "home", device="cpu")
    outcomes = reproduce(rows, settings, log=lambda m: None)
    assert [o.status for o in outcomes] == [OKISH] * 6, [(o.status, o.note) for o in outcomes]
    got = {("k1" if o.row.spec.params["k1"] == 0.5 else "default", o.row.measure): o.got for o in outcomes}
    runner = CliRunner()
    for label, option, params in (("default", [], {}), ("k1", ["-p", "bm25.k1=0.5"], {"k1": 0.5})):
        res = runner.invoke(app, ["run", "bm25", "-b", str(tiny), *option, "--home", str(tmp / "plain")])
        assert res.exit_code == 0, res.output
        with Store(tmp / "plain" / "results.sqlite") as store:
            rec = next(r for r in store.results() if r.spec_hash == make_spec("bm25", params).hash)
        for m in MEASURES:
            assert got[(label, m)] == pytest.approx(rec.measures[m].mean, abs=1e-12), (label, m)
    # the figures are real and not all alike: V@2 is a share of queries, FVR@10 a rank in 1..11
    assert all(0.0 <= got[(lab, "V@2")] <= 1.0 for lab in ("default", "k1"))
    assert all(1.0 <= got[(lab, "FVR@10")] <= 11.0 for lab in ("default", "k1"))
    assert all(0.0 < got[(lab, "nDCG@10")] <= 1.0 for lab in ("default", "k1"))
    return got


def test_first_run_values_reproduce_ok_and_exit_0(bench: str, measured, tmp_path: Path, home: Path) -> None:
    m = write_matrix(tmp_path / "expected.toml", base_rows(bench, measured))
    res = invoke("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert res.exit_code == 0, res.output
    rows = table_rows(res.output)
    assert len(rows) == 6 and {r[7] for r in rows} == {OK}, res.output
    assert "reproduced — reference rows: 6 OK, 0 OKish, 0 FAIL" in res.output.replace("\n", " ")
    # the diff column is the difference, printed as zero
    assert {r[5] for r in rows} == {"+0.000000"}
    # the same matrix as data: the figures as numbers, the verdict in the summary and on stderr
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert code == 0 and [r["status"] for r in doc["rows"]] == [OK] * 6, err
    assert [r["row"] for r in doc["rows"]] == [1, 2, 3, 4, 5, 6] and {r["diff"] for r in doc["rows"]} == {0.0}
    assert [r["got"] for r in doc["rows"]] == [measured[(lab, me)] for lab in ("default", "k1") for me in MEASURES]
    assert [r["measure"] for r in doc["rows"]] == [*MEASURES, *MEASURES] and {r["retriever"] for r in doc["rows"]} >= {"bm25"}
    assert doc["shipped"] is False and doc["pools"] == [] and doc["summary"]["failed"] is False
    assert doc["summary"]["counts"] == {"reference": {OK: 6, OKISH: 0, FAIL: 0, SKIP: 0}}
    assert "reproduced — reference rows: 6 OK" in err and "reproduced" not in json.dumps(doc["rows"])


def test_a_changed_expected_value_fails_the_row_and_the_command(bench: str, measured, tmp_path: Path,
                                                                home: Path) -> None:
    changed = dict(measured)
    changed[("default", "nDCG@10")] += 0.01  # beyond the 1e-6 tolerance
    m = write_matrix(tmp_path / "expected.toml", base_rows(bench, changed))
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert code == 1, err
    failed = [r for r in doc["rows"] if r["status"] == FAIL]
    assert len(failed) == 1 and failed[0]["measure"] == "nDCG@10" and failed[0]["row"] == 3, doc
    assert failed[0]["diff"] == pytest.approx(-0.01, abs=1e-12)  # got − expected
    assert sum(r["status"] == OK for r in doc["rows"]) == 5
    assert doc["summary"]["failed"] is True and "FAIL: a reference row did not reproduce" in err


def test_a_change_within_tolerance_is_okish_and_exit_0(bench: str, measured, tmp_path: Path, home: Path) -> None:
    rows = base_rows(bench, measured, tol=0.01)
    rows[0]["expected"] = measured[("default", "V@2")] + 0.005  # inside 0.01, outside 1e-4
    rows[1]["expected"] = measured[("default", "FVR@10")] + 0.00005  # inside 1e-4: still equal
    m = write_matrix(tmp_path / "expected.toml", rows)
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert code == 0, err
    assert [r["status"] for r in doc["rows"]] == [OKISH, OK, OK, OK, OK, OK], doc


def test_a_published_row_that_fails_leaves_the_exit_code_0(tiny: Path, bench: str, measured, tmp_path: Path,
                                                            home: Path) -> None:
    rows = base_rows(bench, measured)
    rows.append({"retriever": "bm25", "benchmark": bench, "measure": "nDCG@10",
                 "expected": measured[("default", "nDCG@10")] - 0.2, "tolerance": 0.01, "kind": "published",
                 "source": "A paper, Table 9", "reason": "the paper's figure"})
    m = write_matrix(tmp_path / "expected.toml", rows)
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert code == 0, err
    last = doc["rows"][-1]
    assert (last["status"], last["kind"], last["source"]) == (FAIL, "published", "A paper, Table 9"), doc
    assert last["diff"] == pytest.approx(0.2, abs=1e-12)
    assert "published rows: 0 OK, 0 OKish, 1 FAIL" in err.replace("\n", " ")
    # and it is stored beside the reference row of the same measure, without costing it its trust
    with Store(home / "results.sqlite") as store:
        stored = store.reproductions()
    assert len(stored) == 7 and sum(r["kind"] == "published" for r in stored) == 1
    version = load_benchmark(str(tiny), tiny.parent).version
    assert (make_spec("bm25").hash, version) in reproduced_keys(stored)


def test_the_matrix_is_stored_and_shown_on_the_site(tiny: Path, bench: str, measured, tmp_path: Path,
                                                     home: Path) -> None:
    from reports import render_site

    changed = dict(measured)
    changed[("k1", "V@2")] += 0.5
    rows = base_rows(bench, changed)
    rows[0]["source"] = "reference run <script>alert(1)</script>"
    m = write_matrix(tmp_path / "expected.toml", rows)
    assert invoke("--expected", str(m), "--home", str(home), "--device", "cpu").exit_code == 1
    loaded = load_benchmark(str(tiny), tiny.parent)
    with Store(home / "results.sqlite") as store:
        stored = store.reproductions()
        site = tmp_path / "site"
        render_site(store, site)
    assert len(stored) == 6
    k1 = make_spec("bm25", {"k1": 0.5}).hash
    assert {(r["spec_hash"], r["benchmark"], r["benchmark_version"]) for r in stored} == {
        (make_spec("bm25").hash, loaded.name, loaded.version), (k1, loaded.name, loaded.version)}
    row = next(r for r in stored if r["spec_hash"] == k1 and r["measure"] == "V@2")
    assert row["status"] == FAIL and row["got"] == pytest.approx(measured[("k1", "V@2")], abs=1e-12)
    assert row["expected"] == pytest.approx(measured[("k1", "V@2")] + 0.5)
    assert reproduced_keys(stored) == {(make_spec("bm25").hash, loaded.version)}  # the failed one is not reproduced

    page = (site / "reproduction.html").read_text(encoding="utf-8")
    body = re.findall(r'<tr data-status="(\w+)" data-kind="(\w+)">', page)
    assert sorted(body) == sorted([(OK, "reference")] * 5 + [(FAIL, "reference")])
    assert 'class="status status-fail">FAIL</td>' in page
    assert f'data-value="{(measured[("k1", "V@2")] - changed[("k1", "V@2")])!r}"' in page  # the diff, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert 'href="reproduction.html">Reproduction</a>' in (site / "index.html").read_text(encoding="utf-8")


def test_no_reproduction_run_no_page_and_no_link(tiny: Path, tmp_path: Path, home: Path) -> None:
    from reports import render_site

    assert CliRunner().invoke(app, ["run", "bm25", "-b", str(tiny)]).exit_code == 0
    with Store(home / "results.sqlite") as store:
        render_site(store, tmp_path / "site")
    assert not (tmp_path / "site" / "reproduction.html").exists()
    assert "reproduction.html" not in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_only_selects_rows(bench: str, measured, tmp_path: Path, home: Path) -> None:
    m = write_matrix(tmp_path / "expected.toml", base_rows(bench, measured))
    every = read_matrix(m)
    assert [r.measure for r in select(every, only=["V@*"])] == ["V@2", "V@2"]
    assert [r.index for r in select(every, only=[f"bm25:{bench}:nDCG@10"])] == [3, 6]
    assert len(select(every, only=[bench])) == 6 and select(every, only=["dense"]) == []
    assert [r.index for r in select(every, quick=True)] == [1, 2, 4, 5]
    assert [r.index for r in load_matrix(m, quick=True, only=["FVR@*"])] == [2, 5]
    code, doc, err = matrix("--expected", str(m), "--only", "FVR@10", "--home", str(home), "--device", "cpu")
    assert code == 0, err
    assert [(r["row"], r["measure"], r["status"]) for r in doc["rows"]] == [(2, "FVR@10", OK), (5, "FVR@10", OK)]
    res = invoke("--expected", str(m), "--only", "no-such:*", "--home", str(home))
    assert res.exit_code == 2 and "no row is selected by --only 'no-such:*'" in res.output


def test_a_measure_the_benchmark_cannot_give_fails_its_row_only(bench: str, measured, tmp_path: Path,
                                                                home: Path) -> None:
    rows = base_rows(bench, measured)
    rows.append({**rows[0], "measure": "PairAcc", "expected": 0.5})
    m = write_matrix(tmp_path / "expected.toml", rows)
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert code == 1
    assert [r["status"] for r in doc["rows"]] == [OK] * 6 + [FAIL]
    assert doc["rows"][-1]["got"] is None and "PairAcc cannot be computed" in doc["rows"][-1]["note"]
    assert "row 7 (bm25:" in err and "PairAcc cannot be computed" in err


def test_csv_writes_the_rows_as_a_spreadsheet_reads_them(bench: str, measured, tmp_path: Path, home: Path) -> None:
    import csv
    import io

    rows = base_rows(bench, measured)
    rows[0]["source"] = "=HYPERLINK(\"http://x\")"  # a formula a spreadsheet would run
    rows.append({**rows[1], "measure": "PairAcc", "expected": 0.5})
    m = write_matrix(tmp_path / "expected.toml", rows)
    res = CliRunner().invoke(app, ["reproduce", "--format", "csv", "--expected", str(m), "--home", str(home),
                                   "--device", "cpu"], catch_exceptions=False)
    assert res.exit_code == 1, res.stderr
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["status"] for r in table] == [OK] * 6 + [FAIL] and [r["row"] for r in table] == [str(i) for i in range(1, 8)]
    assert [float(r["got"]) for r in table[:6]] == [measured[(lab, me)] for lab in ("default", "k1") for me in MEASURES]
    assert table[6]["got"] == "" and table[6]["diff"] == "" and "PairAcc cannot be computed" in table[6]["note"]
    assert table[0]["source"] == "'=HYPERLINK(\"http://x\")"
    assert "FAIL: a reference row did not reproduce" in res.stderr and "FAIL" not in res.stdout.split("\n")[0]
    bad = CliRunner().invoke(app, ["reproduce", "--format", "xml", "--expected", str(m), "--home", str(home)])
    assert bad.exit_code == 2 and "--format must be one of table, json, csv (got " in bad.output


def test_rows_on_a_benchmark_not_on_disk_are_skipped(tmp_path: Path, home: Path) -> None:
    m = write_matrix(tmp_path / "expected.toml", [{
        "retriever": "bm25", "benchmark": "nevir", "measure": "V@2", "expected": 0.5, "tolerance": 0.0,
        "kind": "reference", "source": "reference run", "reason": "r"}])
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--data-dir", str(tmp_path / "empty"))
    assert code == 0, err
    assert [r["status"] for r in doc["rows"]] == [SKIP] and doc["summary"]["skipped_benchmarks"] == ["nevir"]
    assert "nothing compared" in err and "skipped (not on disk): nevir" in err
    with Store(home / "results.sqlite") as store:
        assert store.reproductions() == []


def test_a_slice_row_scores_the_first_n_judged_queries(tiny: Path, tmp_path: Path) -> None:
    """A row on ``NAME[:N]`` recomputes the slice the reference plan runs (``max_queries``): its
    figures are the means of the whole run's per-query figures over the first N judged queries,
    and the whole set and its slice in one matrix are run apart (the runner keeps them apart)."""
    whole = [{**r, "benchmark": str(tiny), "tolerance": 20.0} for r in base_rows(str(tiny)) if "params" not in r]
    part = [{**r, "benchmark": f"{tiny}[:2]"} for r in whole]
    rows = read_matrix(write_matrix(tmp_path / "m.toml", part + whole))  # the slice first: not cut from a cached whole
    outcomes = reproduce(rows, Settings(home=tmp_path / "home", device="cpu"), log=lambda m: None)
    assert all(o.got is not None for o in outcomes), [(o.status, o.note) for o in outcomes]
    names = {o.benchmark_name for o in outcomes}
    assert len(names) == 2 and any(n.endswith("[:2]") for n in names), names
    with Store(tmp_path / "home" / "reproduce" / "results.sqlite") as store:
        recs = {r.benchmark: r for r in store.results()}
        per_query = {n: store.per_query(r.id) for n, r in recs.items()}
    whole_name = next(n for n in recs if not n.endswith("]"))
    full, head = recs[whole_name], recs[whole_name + "[:2]"]
    first = [q.id for q in load_benchmark(str(tiny), tiny.parent).head(2).eval_queries]
    assert len(first) == 2 and full.n_queries == 4 and head.n_queries == 2
    got = {(o.row.benchmark, o.row.measure): o.got for o in outcomes}
    for m in MEASURES:
        col = per_query[whole_name][m]
        assert got[(f"{tiny}[:2]", m)] == pytest.approx(sum(col[q] for q in first) / 2, abs=1e-12), m
        assert got[(str(tiny), m)] == pytest.approx(sum(col.values()) / len(col), abs=1e-12), m
    # the tiny set's first two queries do not average like all four on every measure
    assert any(got[(f"{tiny}[:2]", m)] != pytest.approx(got[(str(tiny), m)]) for m in MEASURES)


GOOD = {"retriever": "bm25", "benchmark": "nevir", "tolerance": 0.001, "source": "reference run", "reason": "r",
        "scores": {"V@2": 0.5}}
PAPER = {"kind": "published", "retriever": "bm25", "benchmark": "nevir", "tolerance": 0.001, "reason": "r",
         "scores": {"V@2": 0.5}}


@pytest.mark.parametrize("change, field, message", [
    ({"scores": {"V@2": "high"}}, "scores.V@2", "a score is a number or a table { expected = …, tolerance = … }, "
                                                "not 'high'"),
    ({"scores": {"V@2": float("nan")}}, "scores.V@2.expected", "Input should be a finite number, not nan"),
    ({"scores": {"V@2": {"expected": 0.5, "tol": 1}}}, "scores.V@2.tol", "unknown field; the fields are expected, "
                                                                         "tolerance, reason, quick"),
    ({"scores": {"V@2": {"expected": 0.5, "tolerance": -1}}}, "scores.V@2.tolerance", "greater than or equal to 0"),
    ({"scores": {}}, "scores", "at least 1 item"),
    ({"scores": {"V@2": 0.5, "V@2 ": 0.6}}, "scores", "'V@2' and 'V@2 ' are one measure, V@2"),
    ({"tolerance": -0.1}, "tolerance", "Input should be greater than or equal to 0, not -0.1"),
    ({"tolerance": "wide"}, "tolerance", "Input should be a valid number, not 'wide'"),
    ({"scores": {"ndcg@10": 0.5}}, "scores.ndcg@10", "unknown measure 'ndcg@10'"),
    ({"params": {"k3": 1}}, "params", "unknown parameter(s) k3"),
    ({"benchmark": "nevr"}, "benchmark", "unknown benchmark 'nevr'"),
    ({"benchmark": "nevir[:0]"}, "benchmark", "a slice [:N] needs N ≥ 1, not 'nevir[:0]'"),
    ({"benchmark": "nevr[:25]"}, "benchmark", "unknown benchmark 'nevr'"),
    ({"quick": "yes"}, "quick", "Input should be a valid boolean, not 'yes'"),
    ({"seed": -1}, "seed", "Input should be greater than or equal to 0, not -1"),
    ({"source": " "}, "source", "String should have at least 1 character"),
    ({"colour": "red"}, "colour", "unknown field; the fields are retriever, params, benchmark, seed"),
    ({"kind": "reference"}, "kind", "unknown field"),
    ({"reason": None}, "reason", "missing"),
])
def test_a_malformed_condition_is_a_one_line_error(change: dict, field: str, message: str, tmp_path: Path) -> None:
    bad = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = tmp_path / "expected.toml"
    path.write_text(toml_table("condition", **GOOD) + toml_table("condition", **bad), encoding="utf-8")
    with pytest.raises(MatrixError) as e:
        read_matrix(path)
    where = f"condition 2 ({bad['retriever']} on {bad['benchmark']})"
    assert str(e.value).startswith(f"{path}: {where}: {field}: "), str(e.value)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    res = invoke("--expected", str(path))
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"error: {e.value}"]


def test_an_unknown_retriever_names_the_condition_by_what_it_says(tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    path.write_text(toml_table("condition", **{**GOOD, "retriever": "bm26"}), encoding="utf-8")
    with pytest.raises(MatrixError, match=re.escape(f"{path}: condition 1 (bm26 on nevir): retriever: unknown "
                                                    "retriever 'bm26'. Did you mean 'bm25'")):
        read_matrix(path)


def paper_text(*conditions: dict, table: str = "Table 3", paper: str = "P (arXiv:1)") -> str:
    return (toml_table("paper", name=paper) + toml_table("paper.table", name=table)
            + "".join(toml_table("paper.table.condition", **c) for c in conditions))


def test_a_papers_condition_gives_a_row_per_score_with_its_own_overrides(tmp_path: Path) -> None:
    """The nested shape: paper → table → condition, the configuration and protocol once, a score
    that says so overriding the condition's tolerance, reason or quick flag."""
    path = tmp_path / "expected.toml"
    path.write_text(paper_text({**PAPER, "params": {"k1": 0.5}, "seed": 2,
                                "scores": {"V@2": 0.4, "FVR@10": {"expected": 3, "tolerance": 0.1, "quick": True,
                                                                  "reason": "FVR's own"}}},
                               {**PAPER, "kind": "direction", "baseline": {"retriever": "random"}, "claim": "better",
                                "scores": {"V@2": -0.1}},
                               paper="NNN (elastic-net decoding, notes.txt)"), encoding="utf-8")
    rows = read_matrix(path, first=5)
    assert [(r.index, r.measure, r.expected, r.tolerance, r.reason, r.quick, r.kind) for r in rows] == [
        (5, "V@2", 0.4, 0.001, "r", False, PUBLISHED), (6, "FVR@10", 3.0, 0.1, "FVR's own", True, PUBLISHED),
        (7, "V@2", -0.1, 0.001, "r", False, DIRECTION)]
    assert {r.source for r in rows} == {"NNN (elastic-net decoding, notes.txt), Table 3"}
    assert {(r.paper, r.table) for r in rows} == {("NNN (elastic-net decoding, notes.txt)", "Table 3")}
    assert rows[0].spec == rows[1].spec == make_spec("bm25", {"k1": 0.5}) and {r.seed for r in rows[:2]} == {2}
    assert rows[2].baseline == make_spec("random") and rows[2].claim == "better" and rows[0].baseline is None


@pytest.mark.parametrize("text, where, message", [
    (paper_text({**PAPER, "kind": "paper"}), "paper 'P (arXiv:1)', table 'Table 3', condition 1 (bm25 on nevir): kind",
     "Input should be 'published' or 'direction', not 'paper'"),
    (paper_text({**PAPER, "source": "x"}), "paper 'P (arXiv:1)', table 'Table 3', condition 1 (bm25 on nevir): source",
     "unknown field"),
    (paper_text(PAPER, table="Table 3, left"), "paper 'P (arXiv:1)', table 'Table 3, left': name",
     "a table's name has no ', '"),
    (paper_text(PAPER) + toml_table("paper.table", name="Table 3") + toml_table("paper.table.condition", **PAPER),
     "paper 'P (arXiv:1)': table", "two tables named 'Table 3'"),
    (toml_table("paper", name="P") + toml_table("paper.table", name="T"), "paper 'P', table 'T': condition",
     "missing"),
    (toml_table("paper", title="P") + toml_table("paper.table", name="T") + toml_table("paper.table.condition", **PAPER),
     "paper 1: name", "missing"),
])
def test_a_malformed_paper_is_a_one_line_error_naming_paper_table_and_condition(text: str, where: str, message: str,
                                                                                 tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MatrixError) as e:
        read_matrix(path)
    assert str(e.value).startswith(f"{path}: {where}: ") and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_file_level_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    row = toml_table("condition", **GOOD)
    for text, message in ((row + "tolerance = 1\n[[condition\n", "not valid TOML"),
                          ('title = "x"\n' + row, "unknown top-level key 'title'"),
                          ("[[row]]\nretriever = 'bm25'\n", "a [[row]] of the old flat form is a condition with one score"),
                          ("", "no [[paper]] or [[condition]] tables"),
                          (row + row, "condition 2, V@2: measure: bm25:nevir:V@2 (reference, reference run) is "
                                      "already condition 1, V@2")):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(MatrixError, match=re.escape(message)) as e:
            read_matrix(path)
        assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    with pytest.raises(MatrixError, match=re.escape(f"{tmp_path / 'none.toml'}: no such file")):
        read_matrix(tmp_path / "none.toml")


def test_status_boundaries() -> None:
    assert status_of(0.5, 0.5, 0.0) == OK
    assert status_of(0.50005, 0.5, 0.01) == OK  # within 1e-4
    assert status_of(0.50005, 0.5, 1e-6) == FAIL  # a tolerance below 1e-4 is the limit of equality too
    assert status_of(0.51, 0.5, 0.01) == OKISH  # on the tolerance (0.51 − 0.5 is 0.010000000000000009)
    assert status_of(0.5101, 0.5, 0.01) == FAIL
    assert status_of(None, 0.5, 1.0) == FAIL and status_of(float("nan"), 0.5, 1.0) == FAIL


def test_a_store_keyed_the_old_way_takes_a_published_row_beside_a_reference_one(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with Store(path):
        pass
    db = sqlite3.connect(path)  # the reproductions table as first released: no kind/source in its key
    db.execute("DROP TABLE reproductions")
    db.execute("CREATE TABLE reproductions (run_id TEXT NOT NULL, created_at TEXT NOT NULL, spec_hash TEXT NOT NULL,"
               " retriever TEXT NOT NULL, label TEXT NOT NULL, benchmark TEXT NOT NULL, benchmark_version TEXT NOT"
               " NULL, measure TEXT NOT NULL, expected REAL NOT NULL, tolerance REAL NOT NULL, got REAL, status TEXT"
               " NOT NULL, kind TEXT NOT NULL, source TEXT NOT NULL,"
               " PRIMARY KEY (run_id, spec_hash, benchmark, measure))")
    db.execute("INSERT INTO reproductions VALUES ('20000101T000000.000000', 't', 'h', 'x', 'x', 'b', 'v', 'V@2',"
               " 0.5, 0.0, 0.5, 'OK', 'reference', 'reference run')")
    db.commit()
    db.close()
    row = {"spec_hash": "h", "retriever": "x", "label": "x", "benchmark": "b", "benchmark_version": "v",
           "measure": "V@2", "expected": 0.5, "tolerance": 0.0, "got": 0.5, "status": OK}
    with Store(path) as store:
        assert store.reproductions(latest=False)[0]["run_id"] == "20000101T000000.000000"  # kept
        store.save_reproductions([{**row, "kind": "reference", "source": "reference run"},
                                  {**row, "expected": 0.7, "status": FAIL, "kind": "published", "source": "P, T1"}])
        latest = store.reproductions()
    assert sorted((r["kind"], r["status"]) for r in latest) == [("published", FAIL), ("reference", OK)]
    assert reproduced_keys(latest) == {("h", "v")}


@pytest.mark.slow
def test_reproduce_quick_on_the_real_data(tmp_path: Path, share_embeddings) -> None:
    """What gates CI: the shipped matrix's quick rows recomputed on the real data all reproduce
    (NegConstraint's MiniLM embeddings may come from another slow test's run)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    started = time.monotonic()
    home = share_embeddings(tmp_path / "home")
    code, doc, err = matrix("--quick", "--data-dir", str(SHARED_DATA), "--home", str(home), "--device", "cpu")
    assert code == 0, err
    rows, pools = doc["rows"], doc["pools"]
    assert doc["shipped"] is True and len(rows) == len(shipped_matrix(reference_files(), quick=True))
    assert {r["status"] for r in rows} <= {OK, OKISH}, [r for r in rows if r["status"] not in (OK, OKISH)]
    # every pinned pool recomputed (to float rounding)
    assert pools and {p["status"] for p in pools} <= {OK, OKISH}, pools
    print(f"reproduce --quick: {len(rows)} rows in {time.monotonic() - started:.0f} s")


def test_ray_option_builds_the_runner_through_the_ray_factory(bench: str, measured, tmp_path: Path, home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`reproduce --ray ADDRESS` hands every job to the runner `run --ray` uses (tests/test_ray.py runs
    that one on a real cluster); here the factory is watched and builds a local runner."""
    import harness.cli.cmd_reference as cmd_reference
    from harness.run.runner import Runner

    seen: list[object] = []

    def factory(settings, store, progress, log, ray=None):  # type: ignore[no-untyped-def]
        seen.append(ray)
        return Runner(settings, store, progress, log=log)

    monkeypatch.setattr(cmd_reference, "make_runner", factory)
    m = write_matrix(tmp_path / "expected.toml", base_rows(bench, measured))
    code, doc, err = matrix("--expected", str(m), "--home", str(home), "--device", "cpu", "--ray", "10.0.0.1:6379")
    assert code == 0, err
    assert seen == ["10.0.0.1:6379"] and [r["status"] for r in doc["rows"]] == [OK] * 6
    res = invoke("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert res.exit_code == 0 and seen == ["10.0.0.1:6379", None]


# ---------------------------------------------------------------------------------------------
# the shipped matrix: reference rows derived from the bundle, the papers' rows written by hand


def test_the_shipped_matrix_derives_its_reference_rows_from_the_bundle() -> None:
    files = reference_files()
    derived = bundle_rows(files["plan"], files["bundle"])
    assert derived and all(r.kind == REFERENCE and r.source.startswith("reference bundle ") for r in derived)
    # expected.toml holds no reference row: every reference figure comes from the bundle
    written = read_matrix(files["expected"])
    assert written and {r.kind for r in written} == {PUBLISHED, DIRECTION}
    rows = shipped_matrix(files)
    assert len(rows) == len(derived) + len(written) and len({r.index for r in rows}) == len(rows)
    quick = shipped_matrix(files, quick=True)
    assert quick and all(r.kind == REFERENCE for r in quick)
    assert {r.retriever for r in quick} == {"bm25", "dense", "deo-rules", "nnn-fix", "mmr", "random"}
    assert {r.benchmark for r in quick} == {"diag/antonym", "diag/negation", "negconstraint"}
    # tolerance and reason come once per configuration of the plan (FVR scaled where it says so)
    seq = [r for r in derived if r.label == "coder-seq" and r.benchmark == "nevir"]
    assert {r.measure: r.tolerance for r in seq} == {"Sat@10": 0.02, "PairAcc": 0.02, "V@1": 0.02, "V@2": 0.02,
                                                      "FVR@10": pytest.approx(0.2), "nDCG@10": 0.02, "TR@5": 0.02}
    assert all("trained here on a CPU" in r.reason for r in seq)
    bm25 = {r.measure: r.expected for r in derived if r.label == "bm25" and r.benchmark == "diag/antonym"}
    assert bm25 == {"Sat@10": pytest.approx(0.92222222), "V@2": pytest.approx(0.88888889),
                    "FVR@10": pytest.approx(2.05555556), "nDCG@10": pytest.approx(0.8661685)}
    published = [r for r in rows if r.kind == PUBLISHED]
    assert len(published) >= 13 and all(("Table" in r.table and r.paper) or r.peer for r in published)
    assert {r.benchmark for r in published} >= {"nevir:coder", "excluir:coder", "diag/antonym", "beir/scifact"}
    coder = [r for r in published if r.paper.startswith("CoDeR")]
    assert all(r.spec.params["tokenizer"] == "coder" and r.spec.params["fields"] == "text" for r in coder)
    assert all(r.baseline is not None and r.claim for r in rows if r.kind == DIRECTION)


def test_derived_rows_follow_a_rebuilt_bundle(tiny: Path, tmp_path: Path) -> None:
    """A bundle rebuilt with one more configuration gives that configuration's rows, with the plan's
    tolerance and reason, and nothing copied by hand; a result of a configuration the plan lacks, or
    of another seed, gives none."""
    from harness.record.bundle import write_bundle
    from harness.run.runner import Runner

    name = load_benchmark(str(tiny), tiny.parent).name
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[matrix]\nquick_benchmarks = ["{name}"]\n[matrix.measures]\n"{name}" = ["V@2", "FVR@10"]\n'
                    '[[config]]\nretriever = "bm25"\ntolerance = 0.001\nreason = "exact"\nquick = true\n'
                    '[[config]]\nretriever = "bm25"\nlabel = "bm25 k1"\nparams = { k1 = 0.5 }\n'
                    'tolerance = 0.01\nreason = "looser"\nscale_fvr = true\n', encoding="utf-8")
    bundle = tmp_path / "bundle.jsonl.gz"
    settings = Settings(home=tmp_path / "home", device="cpu", extra_measures=("V@2", "FVR@10"))
    with Store(tmp_path / "build.sqlite") as store:
        with Runner(settings, store, None, log=lambda m: None) as runner:
            runner.run([make_spec("bm25")], [str(tiny)], [0, 1])
        write_bundle(store, bundle)
        first = bundle_rows(plan, bundle)
        rec = next(r for r in store.results() if r.seed == 0)
        assert [(r.label, r.measure) for r in first] == [("bm25", "V@2"), ("bm25", "FVR@10")]
        assert [r.expected for r in first] == [round(rec.measures[m].mean, 8) for m in ("V@2", "FVR@10")]
        assert all(r.tolerance == 0.001 and r.reason.endswith("tolerance: exact") and r.quick for r in first)
        with Runner(settings, store, None, log=lambda m: None) as runner:
            runner.run([make_spec("bm25", {"k1": 0.5}, label="bm25 k1"), make_spec("bm25", {"k1": 0.9})],
                       [str(tiny)], [0])
        write_bundle(store, bundle)
    again = bundle_rows(plan, bundle)
    assert [(r.label, r.measure, r.tolerance, r.quick) for r in again] == [
        ("bm25", "V@2", 0.001, True), ("bm25", "FVR@10", 0.001, True),
        ("bm25 k1", "V@2", 0.01, False), ("bm25 k1", "FVR@10", pytest.approx(0.1), False)]
    assert all(r.source == again[0].source != first[0].source for r in again)  # the new bundle's id


def test_paired_difference_and_claims_by_hand() -> None:
    a = {"q1": 1.0, "q2": 0.0, "q3": 1.0, "q4": 1.0, "only-a": 5.0}
    b = {"q1": 0.0, "q2": 0.0, "q3": 0.0, "q4": 1.0, "only-b": 5.0}
    diff, (lo, hi), n = paired_difference(a, b, n_resamples=2000)
    assert n == 4 and diff == pytest.approx(0.5)  # (1 + 0 + 1 + 0) / 4 over the shared queries
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    assert paired_difference(a, b) == paired_difference(a, b)  # seeded
    assert claim_holds("better", (0.1, 0.3), True, 0) and not claim_holds("better", (-0.1, 0.3), True, 0)
    assert claim_holds("better", (-0.3, -0.1), False, 0)  # V@k: lower is better
    assert not claim_holds("better", (0.1, 0.3), False, 0)
    assert claim_holds("same", (-0.02, 0.01), True, 0.03) and not claim_holds("same", (-0.05, 0.01), True, 0.03)
    assert not claim_holds("better", (float("nan"), float("nan")), True, 0)


def test_direction_rows_are_checked_by_sign_and_one_that_does_not_hold_fails(bench: str, tmp_path: Path,
                                                                            home: Path) -> None:
    common = {"benchmark": bench, "measure": "nDCG@10", "tolerance": 0.0, "kind": "direction",
              "source": "A paper, Table 4", "reason": "the paper's claim"}
    rows = [
        # the same configuration is not better than itself: the interval is [0, 0]
        {"retriever": "bm25", **common, "expected": 0.05, "baseline": {"retriever": "bm25"}, "claim": "better"},
        # nor worse: within ±0 of itself
        {"retriever": "bm25", **common, "expected": 0.0, "baseline": {"retriever": "bm25"}, "claim": "same",
         "source": "A paper, Table 5"},
    ]
    m = write_matrix(tmp_path / "expected.toml", rows)
    outcomes = reproduce(read_matrix(m), Settings(home=home, device="cpu"), log=lambda x: None)
    assert [o.status for o in outcomes] == [FAIL, OK]
    assert outcomes[0].got == 0.0 and outcomes[0].interval == (0.0, 0.0)
    assert "does not hold here" in outcomes[0].note and "holds" in outcomes[1].note
    res = invoke("--expected", str(m), "--home", str(home), "--device", "cpu")
    assert res.exit_code == 0, res.output  # a paper's claim never gates the command
    assert "direction rows: 1 OK, 0 OKish, 1 FAIL" in res.output.replace("\n", " ")
    with Store(home / "results.sqlite") as store:
        assert sorted(r["source"] for r in store.reproductions()) == ["A paper, Table 4; against bm25",
                                                                      "A paper, Table 5; against bm25"]


@pytest.mark.parametrize("change, field, message", [
    ({"claim": "better"}, "claim", "only a direction condition has one, not a published one"),
    ({"kind": "direction"}, "baseline", "missing (a direction condition names its baseline"),
    ({"kind": "direction", "baseline": {"retriever": "bm25"}, "claim": "worse"}, "claim",
     "Input should be 'better' or 'same', not 'worse'"),
    ({"kind": "direction", "baseline": {"retriever": "bm26"}, "claim": "better"}, "baseline.retriever",
     "unknown retriever"),
    ({"kind": "direction", "baseline": {"retriever": "bm25", "params": {"k3": 1}}, "claim": "better"},
     "baseline.params", "unknown parameter(s) k3"),
    ({"kind": "direction", "baseline": {"name": "bm25"}, "claim": "better"}, "baseline.retriever", "missing"),
])
def test_a_malformed_direction_is_a_one_line_error(change: dict, field: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    path.write_text(paper_text(PAPER, {**PAPER, **change}), encoding="utf-8")
    with pytest.raises(MatrixError) as e:
        read_matrix(path)
    where = "paper 'P (arXiv:1)', table 'Table 3', condition 2 (bm25 on nevir)"
    assert str(e.value).startswith(f"{path}: {where}: {field}: ") and message in str(e.value), str(e.value)


def test_the_page_groups_the_papers_rows_by_paper_and_table_with_their_reasons() -> None:
    from reports.pages.reproduction import papers

    def r(kind: str, source: str, measure: str = "V@2") -> dict:
        return {"kind": kind, "source": source, "label": "bm25", "benchmark": "nevir:coder", "measure": measure,
                "status": OK}

    rows = [r("reference", "reference bundle x"), r("published", "P (arXiv:1), Table 3"),
            r("published", "P (arXiv:1), Table 1", "nDCG@10"), r("published", "P (arXiv:1), Table 3", "V@3"),
            r("direction", "Q (arXiv:2), Table 2; against dense")]
    groups = papers(rows, {("bm25", "nevir:coder", "V@2", "P (arXiv:1), Table 3"): "kept every passage"})
    assert [(g["paper"], g["table"], [x["measure"] for x in g["rows"]]) for g in groups] == [
        ("P (arXiv:1)", "Table 3", ["V@2", "V@3"]), ("P (arXiv:1)", "Table 1", ["nDCG@10"]),
        ("Q (arXiv:2)", "Table 2", ["V@2"])]
    assert groups[0]["rows"][0]["reason"] == "kept every passage" and groups[0]["rows"][1]["reason"] == ""
    assert groups[2]["rows"][0]["against"] == "dense"
