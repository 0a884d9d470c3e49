"""The board ranks rows on equal footing: headline figures average the same benchmarks for every
ranked row, a row that lacks one is shown apart and never above a complete row, smoke slices
(``--max-queries``) never reach an overview table, and a local folder is shown by its folder
name, never by its absolute path."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from harness import registry
from harness.store.results import BenchmarkInfo, MeasureValue, ResultRecord, Store
from reports import compare, render_site
from reports.compare import headline_set, local_display
from tests.dom import parse
from tests.factories import make_record
from tests.test_site import table_rows

SUITES = {"constraint": {"description": "c", "benchmarks": ["b1", "b2", "b3", "b4"], "headline": ["nDCG@10"],
                         "baselines": ["bm25"], "comparator": "dense"}}
QIDS = [f"q{i}" for i in range(12)]


def _record(label: str, bench: str, version: str, values: list[float], seed: int = 0) -> ResultRecord:
    col = dict(zip(QIDS, values))
    mean = float(np.mean(values))
    return make_record(
        label, spec_hash=f"{label}-hash", benchmark=bench, benchmark_version=version, seed=seed,
        harness_version="0.2.0", n_queries=len(values),
        measures={"nDCG@10": MeasureValue(mean, len(values), mean - 0.1, mean + 0.1)},
        per_query={"nDCG@10": col}, rankings={q: [("d1", 1.0)] for q in col})


def _values(level: float) -> list[float]:
    rng = np.random.default_rng(int(level * 1000))
    return list(np.clip(level + rng.normal(0, 0.05, len(QIDS)), 0, 1))


# the field: three rows on b1–b3; "extra" also ran b4 (which nobody else ran); "partial" skipped b3
FIELD = {
    "bm25": {"b1": 0.40, "b2": 0.50, "b3": 0.30},
    "dense": {"b1": 0.50, "b2": 0.60, "b3": 0.40},
    "mine": {"b1": 0.45, "b2": 0.55, "b3": 0.35},
    "extra": {"b1": 0.42, "b2": 0.52, "b3": 0.32, "b4": 0.99},
    "partial": {"b1": 0.90, "b2": 0.95},
}


def build(path: Path, with_slice: bool = False) -> Store:
    s = Store(path)
    for b in ("b1", "b2", "b3", "b4"):
        s.save_benchmark(BenchmarkInfo(b, f"{b}v", "constraint", ["nDCG@10"], {}))
    for label, per in FIELD.items():
        for b, level in per.items():
            s.save(_record(label, b, f"{b}v", _values(level)))
    if with_slice:  # a smoke run of a new method on the first 3 queries of b1, and of bm25
        s.save_benchmark(BenchmarkInfo("b1[:3]", "b1v-3", "constraint", ["nDCG@10"], {}))
        for label, level in (("smoke", 1.0), ("bm25", 0.0)):
            s.save(_record(label, "b1[:3]", "b1v-3", [level] * 3))
    return s


def expected_mean(label: str, benches: list[str]) -> float:
    return float(np.mean([np.mean(_values(FIELD[label][b])) for b in benches]))


@pytest.fixture
def suites(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "suites", lambda: SUITES)


def test_headline_set_maximises_rows_times_benchmarks() -> None:
    order = ["b1", "b2", "b3", "b4"]
    cov = {k: frozenset(v) for k, v in FIELD.items()}
    assert headline_set(cov, order) == frozenset({"b1", "b2", "b3"})  # 4 rows × 3 beats 1 × 4 and 5 × 2
    # two rows on {b1, b2}, one on {b1}: 2 × 2 = 4 > 3 × 1
    assert headline_set({"a": frozenset({"b1", "b2"}), "b": frozenset({"b1", "b2"}), "c": frozenset({"b1"})},
                        order) == frozenset({"b1", "b2"})
    # a tie (2 × 1 = 1 × 2) goes to the larger set
    assert headline_set({"a": frozenset({"b1"}), "b": frozenset({"b1", "b2"})}, order) == frozenset({"b1", "b2"})
    assert headline_set({}, order) == frozenset()


def test_a_row_with_an_extra_benchmark_or_a_missing_one_changes_no_ranking(tmp_path: Path, suites: None) -> None:
    store = build(tmp_path / "r.sqlite")
    (suite,) = compare(store, n_resamples=100).suites
    assert suite.headline_benchmarks == ["b1", "b2", "b3"] and suite.outside_headline == ["b4"]
    ranked = [r.label for r in suite.ranked]
    core = ["b1", "b2", "b3"]
    expect = {label: expected_mean(label, core) for label in ("bm25", "dense", "mine", "extra")}
    assert ranked == sorted(expect, key=expect.get, reverse=True)
    for r in suite.ranked:  # "extra"'s b4 (0.99) is not in its mean: the same benchmarks for all
        assert r.means["nDCG@10"] == pytest.approx(expect[r.label]) and r.counts["nDCG@10"] == 3
    # "partial" has the best per-benchmark figures but lacks b3: apart, after every ranked row, no headline
    (partial,) = suite.apart
    assert partial.label == "partial" and partial.missing == ["b3"] and partial.means["nDCG@10"] is None
    assert suite.rows[-1] is partial
    assert partial.per_benchmark["b1"] == pytest.approx(np.mean(_values(0.90)))

    out = render_site(store, tmp_path / "site", n_resamples=100).parent
    root = parse((out / "index.html").read_text(encoding="utf-8"))
    _, rows = table_rows(root.by_id("overview-constraint"))
    assert [r[0].text().strip() for r in rows] == ranked
    heads, apart = table_rows(root.by_id("overview-constraint-apart"))
    assert [r[0].text().strip() for r in apart] == ["partial"]
    names = [h.text().strip().rstrip("↑↓") for h in heads]
    assert apart[0][names.index("why not ranked")].text().strip() == "not run on b3"
    b4 = next(h for h in heads if h.attrs.get("data-benchmark") == "b4")
    assert "outside" in b4.classes and "not in the headline" in b4.attrs["title"]


def test_a_smoke_slice_beside_full_runs_changes_no_headline(tmp_path: Path, suites: None) -> None:
    full = compare(build(tmp_path / "a.sqlite"), n_resamples=100)
    with_slice = compare(build(tmp_path / "b.sqlite", with_slice=True), n_resamples=100)

    def table(board):
        return [(r.label, r.means["nDCG@10"], r.missing) for r in board.suites[0].rows]

    assert table(with_slice) == table(full)
    assert "smoke" not in {r.label for s in with_slice.suites for r in s.rows}
    assert [b.name for b in with_slice.slices] == ["b1[:3]"]
    assert all(s.name != "other" for s in with_slice.suites)  # not even in the "other" table

    out = render_site(build(tmp_path / "c.sqlite", with_slice=True), tmp_path / "site", n_resamples=100).parent
    index = (out / "index.html").read_text(encoding="utf-8")
    root = parse(index)
    # in no full-set table; ranked only among the slices, in a table of its own labelled as one
    tables = list(root.iter("table"))
    assert all("smoke" not in t.text() for t in tables if not t.attrs.get("id", "").startswith("slices-"))
    sliced = root.by_id("slices-constraint-3")
    assert sliced.attrs["data-slice"] == "3" and "first 3 judged queries" in root.by_id("slices-constraint-3-title").text()
    _, srows = table_rows(sliced)
    smoke = next(r for r in srows if r[0].find("a").text() == "smoke")
    assert "slice run" in smoke[0].text()
    assert {r[0].find("a").text() for r in srows} == {"smoke", "bm25"}  # b1[:3] was not cut from b1v: no row restricted
    assert "first 3 queries · slices table" in index
    page = (out / "bench" / "b1-3.html").read_text(encoding="utf-8")
    assert "A smoke run: results on the first 3 queries of b1" in page


def test_a_slice_table_ranks_stored_slice_rows_beside_the_full_rows_restricted_to_its_queries(tmp_path: Path,
                                                                                             suites: None) -> None:
    """The slice b1[:3] cut from b1's version: "smoke" (stored on it only) is ranked among every full-set row of b1
    restricted to the slice's 3 queries (their mean and interval recomputed from their per-query values), bm25 keeps
    its own stored slice result; the full-set table is unchanged."""
    from harness.core.types import content_hash
    from harness.measures.stats import BOOTSTRAP_RESAMPLES, bootstrap_ci

    s = build(tmp_path / "r.sqlite")
    cut = content_hash(["b1v", "head:3"])  # the version Benchmark.head(3) gives b1's
    s.save_benchmark(BenchmarkInfo("b1[:3]", cut, "constraint", ["nDCG@10"], {}))
    slice_ids = QIDS[:3]
    for label, values in (("smoke", [1.0, 0.9, 0.8]), ("bm25", [0.0, 0.0, 0.0])):  # bm25's own slice run differs
        rec = _record(label, "b1[:3]", cut, values)
        s.save(rec)
    board = compare(s, n_resamples=100)
    (table,) = board.slice_tables
    assert table.size == 3 and [b.name for b in table.comparison.benchmarks] == ["b1[:3]"]
    rows = {r.label: r for r in table.comparison.rows}
    assert set(rows) == set(FIELD) | {"smoke"}
    assert rows["smoke"].means["nDCG@10"] == pytest.approx(0.9) and table.source("smoke", "b1[:3]") == "stored"
    assert rows["bm25"].means["nDCG@10"] == 0.0 and table.source("bm25", "b1[:3]") == "stored"
    for label in ("dense", "mine", "partial"):
        full = _values(FIELD[label]["b1"])
        assert table.source(label, "b1[:3]") == "restricted"
        assert rows[label].means["nDCG@10"] == pytest.approx(np.mean(full[:3]), abs=1e-12)
        g = next(g for sec in table.comparison.benchmarks for g in sec.groups if g.display == label)
        lo, hi = bootstrap_ci(full[:3], n_resamples=BOOTSTRAP_RESAMPLES, seed=0)
        assert (g.records[0].measures["nDCG@10"].ci_low, g.records[0].measures["nDCG@10"].ci_high) == (lo, hi)
        assert table.values(g)["nDCG@10"] == dict(zip(slice_ids, full[:3]))
    assert rows["partial"].complete  # b1[:3] is the whole headline here: "partial" ran b1
    assert [r.label for r in board.suites[0].rows] == [r.label for r in compare(build(tmp_path / "a.sqlite"),
                                                                                 n_resamples=100).suites[0].rows]
    out = render_site(s, tmp_path / "site", n_resamples=100).parent
    root = parse((out / "index.html").read_text(encoding="utf-8"))
    _, shown = table_rows(root.by_id("slices-constraint-3"))
    by = {r[0].find("a").text(): r for r in shown}
    assert "full set" in by["dense"][0].text() and "slice run" in by["smoke"][0].text()
    assert float(by["dense"][5].attrs["data-value"]) == pytest.approx(np.mean(_values(FIELD["dense"]["b1"])[:3]))
    assert "full set" in root.by_id("slices-constraint-3-title").parent.find("p", "slice-sources").text()


def test_a_local_folder_is_named_by_its_folder_never_its_path(tmp_path: Path) -> None:
    folder = tmp_path / "secret-home" / "my-qa-set"
    name = str(folder.resolve())
    assert local_display(name) == "my-qa-set"
    assert local_display(name + ":dev") == "my-qa-set:dev"
    assert local_display(name + "[:5]") == "my-qa-set[:5]"
    s = Store(tmp_path / "r.sqlite")
    s.save_benchmark(BenchmarkInfo(name, "lv", "topical", ["nDCG@10"], {}, f"BEIR-format folder {name} (test split)",
                                   f"local BEIR-format folder {name}", "unknown (local folder)"))
    other = str((tmp_path / "elsewhere" / "my-qa-set").resolve())  # a second folder of the same name
    s.save_benchmark(BenchmarkInfo(other, "lv2", "topical", ["nDCG@10"], {}))
    s.save(_record("bm25", name, "lv", _values(0.5)))
    s.save(_record("bm25", other, "lv2", _values(0.6)))
    board = compare(s, n_resamples=100)
    shown = sorted(b.section.display for b in board.benchmarks)
    assert shown[0].startswith("my-qa-set (") and shown[1].startswith("my-qa-set (") and shown[0] != shown[1]
    out = render_site(s, tmp_path / "site", n_resamples=100).parent
    for page in out.rglob("*"):
        if page.is_file():  # (the per-query files are gzip-compressed)
            data = page.read_bytes()
            text = (gzip.decompress(data) if page.suffix == ".gz" else data).decode("utf-8")
            assert str(tmp_path) not in text and "secret-home" not in text, page
    index = (out / "index.html").read_text(encoding="utf-8")
    assert index.count('class="tag local"') == 2


def test_trust_levels_and_reported_rows_apart(tmp_path: Path, suites: None) -> None:
    """A row computed here is reproduced, an imported one whose measures were recomputed here is
    verified, one imported as figures only is reported: shown apart, never ranked above the others,
    even with the best figures; a reproduction run that matched promotes a verified row."""
    s = build(tmp_path / "r.sqlite")
    for b in ("b1", "b2", "b3"):  # "typed" has the best figures of all, but nobody checked them
        rec = _record("typed", b, f"{b}v", _values(0.99))
        rec.extra = {"origin": {"kind": "import", "source": "typed.jsonl"}}
        s.save(rec)
        rec = _record("checked", b, f"{b}v", _values(0.30))
        rec.extra = {"origin": {"kind": "import", "source": "c.jsonl",
                                "verified": {"benchmark_version": f"{b}v", "measures": ["nDCG@10"]}}}
        s.save(rec)
    (suite,) = compare(s, n_resamples=100).suites
    trust = {r.label: r.trust for r in suite.rows}
    assert trust["bm25"] == "reproduced" and trust["checked"] == "verified" and trust["typed"] == "reported"
    assert "typed" not in [r.label for r in suite.ranked] and "checked" in [r.label for r in suite.ranked]
    assert [r.label for r in suite.apart] == ["typed", "partial"]  # apart: by how many benchmarks they lack
    assert suite.rows.index(next(r for r in suite.rows if r.label == "typed")) > len(suite.ranked) - 1
    # a reproduction run of the shipped matrix that matched every figure of "checked" promotes it;
    # the same rows from a matrix of the user's own (reproduce --expected FILE) do not
    got = float(np.mean(_values(0.30)))  # what the reproduction recomputed: the imported figure
    matrix = [{"spec_hash": "checked-hash", "retriever": "checked", "label": "checked", "benchmark": b,
               "benchmark_version": f"{b}v", "measure": "nDCG@10", "expected": got, "tolerance": 0.01,
               "got": got, "status": "OK", "kind": "reference", "source": "t"} for b in ("b1", "b2", "b3")]
    s.save_reproductions(matrix)
    assert {r.label: r.trust for r in compare(s, n_resamples=100).suites[0].rows}["checked"] == "verified"
    s.save_reproductions(matrix, shipped=True)
    s.save_reproductions([dict(r, status="FAIL") for r in matrix])  # a later custom matrix changes nothing
    board = compare(s, n_resamples=100)
    assert {r.label: r.trust for r in board.suites[0].rows}["checked"] == "reproduced"
    out = render_site(s, tmp_path / "site", n_resamples=100).parent
    root = parse((out / "index.html").read_text(encoding="utf-8"))
    _, apart = table_rows(root.by_id("overview-constraint-apart"))
    typed = next(r for r in apart if r[0].text().strip() == "typed")
    assert typed[4].text().strip() == "reported"  # the cell reads as its level
    # the badge opens what was checked: nothing for "typed"; for "checked", the rows of the shipped
    # matrix's run that recomputed each of its benchmarks
    assert "no figure checked here." in typed[4].find("div", "pop-body").attrs["data-text"].split("\n")
    _, ranked = table_rows(root.by_id("overview-constraint"))
    checked = next(r for r in ranked if r[0].text().strip() == "checked")[4]
    assert checked.text().strip() == "reproduced"
    lines = checked.find("div", "pop-body").attrs["data-text"].split("\n")
    assert lines[0].startswith("reproduced: ") and lines[1] == "figures checked here: nDCG@10."
    assert lines[2].startswith("Recomputed by the shipped reproduction matrix")
    assert lines[3:] == [f"• {b} · nDCG@10: {got:.4f} against {got:.4f} expected, OK" for b in ("b1", "b2", "b3")]
    legend = root.by_id("overview-constraint").parent.parent.text()
    assert "reported" in legend and "imported as figures only" in legend
    page = parse((out / "bench" / "b1.html").read_text(encoding="utf-8"))
    _, rows = table_rows(page.by_id("results"))
    assert rows[-1][0].text().strip().startswith("typed")  # after every checked row
