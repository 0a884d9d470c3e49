"""A result's drill-down prints the method's own counts from its ledger (``extra["counters"]``: how
many of NS-IR's logic forms fell back to the text, how many DEO decompositions fell back to the
query), so a row whose method degraded says so beside its figures; names are printed as plain
text, and a value that is not a whole number is never printed as a count."""

from __future__ import annotations

from pathlib import Path

from harness.store.results import BenchmarkInfo, MeasureValue
from harness.types import Document, Query
from reports import render_site
from tests.dom import parse
from tests.factories import make_record, make_store

QIDS = ["q1", "q2"]
CRAFTED = "<img src=x onerror=alert(1)>"


def _page(tmp: Path, extra: dict) -> str:
    rec = make_record("nsir", benchmark="b", benchmark_version="bv1", measures={"nDCG@10": MeasureValue(0.5, 2)},
                      per_query={"nDCG@10": {q: 0.5 for q in QIDS}},
                      rankings={q: [("d1", 1.0), ("d2", 0.5)] for q in QIDS}, extra=extra)
    with make_store(tmp, [rec], [BenchmarkInfo("b", "bv1", "constraint", ["nDCG@10"], {"queries": 2})]) as s:
        s.save_benchmark_content("b", "bv1", [Query(q, f"text {q}") for q in QIDS], {q: {"d1": 1} for q in QIDS})
        s.save_documents("bv1", [Document("d1", "one"), Document("d2", "two")])
        render_site(s, tmp / "site", n_resamples=20)
    pages = sorted((tmp / "site" / "retriever" / "nsir").glob("*-seed0.html"))
    assert len(pages) == 1, pages
    return pages[0].read_text(encoding="utf-8")


def test_the_drilldown_prints_the_ledger_counts_as_plain_text(tmp_path: Path) -> None:
    html = _page(tmp_path, {"counters": {"nsir.logic.fallback": 1271, "nsir.candidates": 1980, CRAFTED: 3,
                                         "half": 0.5, "flag": True}})
    dom = parse(html)
    line = dom.find("p", "counters")
    # by name; the float and the bool are left out, never printed as counts
    assert [c.text() for c in line.iter("code")] == [CRAFTED, "nsir.candidates", "nsir.logic.fallback"]
    assert [(s.attrs["data-counter"], s.text()) for s in line.iter("span")] == \
        [(CRAFTED, "3"), ("nsir.candidates", "1,980"), ("nsir.logic.fallback", "1,271")]
    assert not list(dom.iter("img")) and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "half" not in line.text() and "flag" not in line.text()


def test_a_result_without_counts_has_no_such_line(tmp_path: Path) -> None:
    for extra, name in (({}, "none"), ({"counters": "not a mapping"}, "bad")):
        html = _page(tmp_path / name, extra)
        assert not list(parse(html).iter("p", "counters"))
