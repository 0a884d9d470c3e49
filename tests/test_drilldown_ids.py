"""Query and document ids that name an object's own machinery in JavaScript (``__proto__``,
``constructor``, ``toString``, ``hasOwnProperty``) show as themselves on the drill-down: the data
files carry ids as values, never as object keys, and the page's script looks them up in Maps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.store.results import BenchmarkInfo, MeasureValue
from harness.types import Document, Query
from reports import render_site
from reports.pages import drilldown
from tests.factories import make_record, make_store

ODD = ["__proto__", "constructor", "toString", "hasOwnProperty", "q1"]
TEXT = {q: f"the text of query {q}" for q in ODD}
DOCS = {f"{q}": (f"title of doc {q}", f"body of doc {q}") for q in ODD}
# the keys the data files may use: their own vocabulary, never an id
VOCABULARY = {"queries", "docs", "measures", "docids", "marks", "mark_text", "has_qrels", "per_page", "q", "a", "m",
              "t", "r", "j", "v", *drilldown.MARK_TEXT}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("ids")
    rec = make_record("bm25", benchmark="odd", benchmark_version="oddv1",
                      measures={"nDCG@10": MeasureValue(0.5, len(ODD))},
                      per_query={"nDCG@10": {q: 0.5 for q in ODD}},
                      rankings={q: [(d, float(-i)) for i, d in enumerate(DOCS)] for q in ODD})
    with make_store(tmp, [rec], [BenchmarkInfo("odd", "oddv1", "topical", ["nDCG@10"], {"queries": len(ODD)})]) as s:
        s.save_benchmark_content("odd", "oddv1", [Query(q, TEXT[q]) for q in ODD], {q: {q: 1} for q in ODD})
        s.save_documents("oddv1", [Document(d, body, title) for d, (title, body) in DOCS.items()])
        render_site(s, tmp / "site", n_resamples=50)
    pages = sorted((tmp / "site" / "retriever" / "bm25").glob("*-seed0.html"))
    assert len(pages) == 1, pages
    return tmp / "site", str(pages[0].relative_to(tmp / "site"))


def keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_the_data_files_carry_ids_as_values(site: tuple[Path, str]) -> None:
    out, rel = site
    data = drilldown.page_data(out, rel)
    assert keys(data["content"]) | keys(data["result"]) <= VOCABULARY
    assert dict(data["content"]["queries"]) == TEXT
    assert {d: (t, s) for d, t, s in data["content"]["docs"]} == DOCS
    assert [q["q"] for q in data["result"]["queries"]] == ODD
    # the file is a script: no id may stand where an object literal would read it as a key
    for src in re.findall(r'<script src="([^"]+)"', (out / rel).read_text(encoding="utf-8")):
        text = ((out / rel).parent / src).read_text(encoding="utf-8")
        for q in ODD[:-1]:
            assert f'"{q}":' not in text


def test_the_page_shows_each_id_with_its_own_text(site: tuple[Path, str], browser_page: Any) -> None:
    out, rel = site
    page = browser_page
    page.goto((out / rel).as_uri())
    shown = page.eval_on_selector_all(
        "article.query", "as => as.map(a => [a.getAttribute('data-qid'), (a.querySelector('p.qtext') || {}).textContent,"
        " Array.from(a.querySelectorAll('tr.doc')).map(tr => [tr.getAttribute('data-doc'),"
        " tr.querySelector('td.doc-text').textContent])])")
    assert [q for q, _, _ in shown] == ODD
    for q, text, rows in shown:
        assert text == TEXT[q]
        assert [d for d, _ in rows] == list(DOCS)
        for d, cell in rows:
            assert cell == f"{DOCS[d][0]} {DOCS[d][1]}", (q, d, cell)
    assert "[object Object]" not in page.content() and "native code" not in page.content()
