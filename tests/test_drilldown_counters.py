"""A result's drill-down prints the method's own counts from its ledger (``extra["counters"]``: how
many of NS-IR's logic forms fell back to the text, how many DEO decompositions fell back to the
query), so a row whose method degraded says so beside its figures; names are printed as plain
text, and a value that is not a whole number is never printed as a count."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from harness.store.results import BenchmarkInfo, MeasureValue
from harness.types import Document, Query
from reports import render_site
from tests.factories import make_record, make_store

QIDS = ["q1", "q2"]
CRAFTED = "<img src=x onerror=alert(1)>"


class _Counters(HTMLParser):
    """The ``(name, value)`` pairs of ``p.counters``: each ``code`` then its ``span[data-counter]``."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # > 0 inside p.counters
        self.tag = ""
        self.names: list[str] = []
        self.values: list[tuple[str, str]] = []
        self.imgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.imgs += 1
        if tag == "p" and "counters" in (a.get("class") or "").split():
            self.depth = 1
        elif self.depth:
            self.tag = tag
            if tag == "span":
                self.values.append((a.get("data-counter") or "", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self.depth = 0
        self.tag = ""

    def handle_data(self, data: str) -> None:
        if self.depth and self.tag == "code":
            self.names.append(data)
        elif self.depth and self.tag == "span":
            name, _ = self.values[-1]
            self.values[-1] = (name, data)


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
    p = _Counters()
    p.feed(html)
    # by name; the float and the bool are left out, never printed as counts
    assert p.names == [CRAFTED, "nsir.candidates", "nsir.logic.fallback"]
    assert p.values == [(CRAFTED, "3"), ("nsir.candidates", "1,980"), ("nsir.logic.fallback", "1,271")]
    assert p.imgs == 0 and "&lt;img src=x onerror=alert(1)&gt;" in html
    line = re.search(r'<p class="note counters">(.*?)</p>', html, flags=re.S)
    assert line is not None and "half" not in line.group(1) and "flag" not in line.group(1)


def test_a_result_without_counts_has_no_such_line(tmp_path: Path) -> None:
    for extra, name in (({}, "none"), ({"counters": "not a mapping"}, "bad")):
        html = _page(tmp_path / name, extra)
        assert 'class="note counters"' not in html
