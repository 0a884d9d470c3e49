"""The leaderboard read at a glance, in a real browser (headless Chromium through Playwright).

The board is the one a fresh home gets: the shipped reference results imported (``beyondsim reference
import``), one run of the shipped reproduction matrix on bm25's diag/antonym rows (so that a row is
*reproduced* and the reproduction page exists), then ``beyondsim leaderboard``. It is built once for the
module. At a laptop's window (1366×768) and a phone's (390×844) the tests measure what a reader meets:
the overview's ranked constraint table inside the window, one-line rows on the benchmark and efficiency
pages, no page that scrolls sideways; then the filters and the search, the trust badges and what they
open (with scripts and without), and the query-slice tables, whose figures are checked against the
stored results they come from.

Screenshots of every page type at both sizes go to ``$BEYONDSIM_ARTIFACTS/screenshots`` (default
``test-artifacts/screenshots``) as ``glance-<page>-<width>.png`` and are listed in the run's summary.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from harness.registry import registered_info
from harness.store.results import Store
from tests.conftest import SHARED_DATA
from tests.test_cli import invoke
from tests.test_site_browser import artifacts_dir

SIZES = [(1366, 768), (390, 844)]
ROW_MEDIAN_PX, ROW_P90_PX = 64, 100
SLICED_METHODS = ("hyde", "deo", "nsir")  # the papers' methods the bundle holds on query slices only


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Store]]:
    """A fresh home with the shipped results, a reproduction run of bm25 on diag/antonym, and its site."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    home = tmp_path_factory.mktemp("glance") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for var, value in (("BEYONDSIM_HOME", str(home)), ("BEYONDSIM_REFERENCE", "1"), ("HF_HUB_OFFLINE", "1"),
                           ("TRANSFORMERS_OFFLINE", "1"), ("BEYONDSIM_DATA", str(SHARED_DATA))):
            mp.setenv(var, value)
        for args in (("reference", "import"),
                     ("reproduce", "--only", "bm25:diag/antonym:*", "--device", "cpu"),
                     ("leaderboard", "--out", str(home / "site"))):
            res = invoke(*args)
            assert res.exit_code == 0, (args, res.output[-3000:])
        store = Store(home / "results.sqlite")
        try:
            yield home / "site", store
        finally:
            store.close()


def _clean(page: Any) -> None:
    assert page.console_errors == [] and page.page_errors == [] and page.external_requests == []


def _percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q * 100))


def _row_heights(page: Any, selector: str) -> list[float]:
    return page.eval_on_selector_all(selector, "rs => rs.filter(r => !r.hidden).map(r => r.getBoundingClientRect().height)")


def _no_sideways_scroll(page: Any) -> None:
    width, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
    assert width <= inner, (page.url, width, inner)


def _shoot(page: Any, name: str, log: list[Path]) -> None:
    path = artifacts_dir() / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000  # a rendered page, not a blank canvas
    log.append(path)


def _pages(site: Path) -> dict[str, Path]:
    """One page of each type, found through the site's own links."""
    from tests.dom import parse

    index = parse((site / "index.html").read_text(encoding="utf-8"))
    dense = next(a.attrs["href"] for a in index.by_id("overview-constraint").iter("a")
                 if a.text().strip() == "dense")
    retriever = site / dense
    page = parse(retriever.read_text(encoding="utf-8"))
    drill = next(a.attrs["href"] for a in page.by_id("results").iter("a") if a.attrs["href"].endswith("nevir-seed0.html"))
    return {"overview": site / "index.html", "benchmark": site / "bench" / "nevir.html",
            "efficiency": site / "efficiency.html", "retriever": retriever,
            "drilldown": (retriever.parent / drill).resolve(), "reproduction": site / "reproduction.html"}


@pytest.mark.parametrize("width,height", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_page_reads_at_a_glance(board, browser_page, screenshot_log, width: int, height: int) -> None:
    site, _ = board
    page = browser_page
    page.set_viewport_size({"width": width, "height": height})
    pages = _pages(site)
    assert all(p.is_file() for p in pages.values()), pages

    # the overview: the ranked constraint table inside the window at 1366 px, every column a reader
    # ranks by in view; on a phone the table scrolls in its own box, the retriever column kept in view
    page.goto(pages["overview"].as_uri())
    table = "table#overview-constraint"
    box = page.eval_on_selector(table, "t => { const r = t.getBoundingClientRect(); return [r.left, r.right, r.width]; }")
    wrap = page.eval_on_selector(table, "t => { const w = t.closest('.table-wrap'); const r = w.getBoundingClientRect();"
                                        " return [r.left, r.right, w.scrollWidth, w.clientWidth]; }")
    assert wrap[1] <= width
    heads = page.eval_on_selector_all(f"{table} thead th", "hs => hs.filter(h => h.offsetParent !== null)"
                                      ".map(h => [h.textContent.trim(), h.getBoundingClientRect().right])")
    names = [h for h, _ in heads]
    for want in ("retriever", "rank", "encoder", "trust", "Sat@10", "V@2", "FVR@10", "PairAcc", "nDCG@10"):
        assert any(n.startswith(want) for n in names), (want, names)
    ci = page.locator(f"{table} tbody tr").first.locator("td.measure.headline span.ci")
    assert ci.inner_text().startswith("[")  # the headline figure with its interval
    if width >= 1366:
        assert box[2] <= width, box  # the whole table in the window
        assert all(right <= width for _, right in heads), heads
    else:
        assert wrap[2] > wrap[3]  # it scrolls inside its box
        page.eval_on_selector(table, "t => { t.closest('.table-wrap').scrollLeft = 1e6; }")
        first = page.locator(f"{table} tbody tr").first.locator("td").first.bounding_box()
        assert abs(first["x"] - wrap[0]) <= 2  # the retriever column stays in view
    assert statistics.median(_row_heights(page, f"{table} tbody tr")) <= ROW_MEDIAN_PX

    # the benchmark page and the efficiency page: one-line rows
    for name, selector in (("benchmark", "table#results tbody tr"), ("efficiency", "table#efficiency-results tbody tr")):
        page.goto(pages[name].as_uri())
        heights = _row_heights(page, selector)
        assert len(heights) >= 10, (name, heights)
        assert statistics.median(heights) <= ROW_MEDIAN_PX, (name, statistics.median(heights))
        assert _percentile(heights, 0.9) <= ROW_P90_PX, (name, _percentile(heights, 0.9))

    # no page of any type scrolls sideways; each one photographed
    for name, path in pages.items():
        page.goto(path.as_uri())
        if name == "drilldown":
            page.wait_for_selector("article.query tr[data-doc]")
        _no_sideways_scroll(page)
        _shoot(page, f"glance-{name}-{width}.png", screenshot_log)
        _clean(page)


def _visible(page: Any, tables: list[str]) -> list[str]:
    return page.evaluate("ids => ids.flatMap(id => { const t = document.getElementById(id); return t ? "
                         "Array.from(t.tBodies).flatMap(b => Array.from(b.rows)).filter(r => !r.hidden)"
                         ".map(r => r.dataset.label) : []; })", tables)


def test_filters_and_search(board, browser_page) -> None:
    site, store = board
    page = browser_page
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto((site / "index.html").as_uri())
    form = page.locator("form#filters")
    assert form.is_visible()
    tables = form.get_attribute("data-tables").split()
    assert "overview-constraint" in tables and any(t.startswith("slices-") for t in tables)
    everything = _visible(page, tables)
    assert form.locator("output").inner_text() == f"{len(everything)} of {len(everything)} rows shown"

    # by family: the rows of dense retrievers, as their retrievers registered it, are left
    retriever_of = {r.label: r.retriever for r in store.results()}
    data = json.loads((site / "data" / "overview-constraint.json").read_text(encoding="utf-8"))
    before = _visible(page, ["overview-constraint"])
    assert sorted(before) == sorted(r["label"] for r in data["rows"] if r["listed"] in ("ranked", "chance"))
    want = [label for label in before if registered_info(retriever_of[label]).family == "dense"]
    assert 0 < len(want) < len(before)
    form.locator("select[name=family]").select_option("dense")
    assert _visible(page, ["overview-constraint"]) == want
    shown = _visible(page, tables)
    assert form.locator("output").inner_text() == f"{len(shown)} of {len(everything)} rows shown"
    assert all(registered_info(retriever_of[label]).family == "dense" for label in shown)

    # uses an LLM: the papers' LLM methods, all in the slice tables; of the ranked constraint rows only those
    # whose results made LLM calls (DEO, the one with full-set results on every constraint benchmark)
    form.locator("select[name=family]").select_option("")
    form.locator("select[name=llm]").select_option("yes")
    llm = _visible(page, tables)
    assert {"hyde", "deo", "nsir"} <= set(llm)
    with_calls = {r.label for r in store.results() if r.llm_calls}
    ranked_llm = [label for label in before if label in with_calls]
    assert ranked_llm == ["deo"] and _visible(page, ["overview-constraint"]) == ranked_llm
    form.locator("select[name=llm]").select_option("")
    assert _visible(page, tables) == everything

    # the search box on a benchmark page finds one row
    page.goto((site / "bench" / "nevir.html").as_uri())
    rows = _visible(page, ["results"])
    assert "coder-compat" in rows and len(rows) > 5
    page.locator("form#results-filters input[name=search]").fill("coder-compat")
    assert _visible(page, ["results"]) == ["coder-compat"]
    assert page.locator("form#results-filters output").inner_text() == f"1 of {len(rows)} rows shown"
    page.locator("form#results-filters input[name=search]").fill("")
    assert _visible(page, ["results"]) == rows
    _clean(page)


def test_trust_badges_open_what_was_checked(board, browser_page, _chromium) -> None:
    site, store = board
    page = browser_page
    page.goto((site / "bench" / "diag-antonym.html").as_uri())
    # bm25 on diag/antonym: reproduced by the matrix run, whose rows the badge lists
    matrix = [r for r in store.reproductions(shipped=True) if r["kind"] == "reference" and r["label"] == "bm25"
              and r["benchmark"] == "diag/antonym"]
    assert matrix and all(r["status"] in ("OK", "OKish") for r in matrix)
    cell = page.locator("table#results tr[data-label='bm25'] td.trust")
    body = cell.locator("div.pop-body")
    assert cell.inner_text().strip() == "reproduced" and not body.is_visible()
    cell.locator("summary").click()
    assert body.is_visible() and body.bounding_box()["height"] > 40  # the details, drawn over the table
    assert sorted(body.get_attribute("data-matrix").split()) == sorted(r["measure"] for r in matrix)
    lines = body.get_attribute("data-text").split("\n")
    for r in matrix:
        assert f"• diag/antonym · {r['measure']}: {r['got']:.4f} against {r['expected']:.4f} expected, {r['status']}" in lines
    assert body.evaluate("b => getComputedStyle(b, '::before').content").strip('"').startswith("reproduced: ")
    # the row stays one line: the details open over the table
    height = page.locator("table#results tr[data-label='bm25']").bounding_box()["height"]
    assert height <= ROW_MEDIAN_PX
    page.keyboard.press("Escape")  # closes it (as a click elsewhere does)
    assert not body.is_visible()
    # a verified row lists the figures recomputed from its rankings, as its import recorded them
    rec = next(r for r in store.results(benchmark="diag/antonym") if r.label == "dense")
    checked = rec.extra["origin"]["verified"]["measures"]
    cell = page.locator("table#results tr[data-label='dense'] td.trust")
    cell.locator("summary").click()
    assert page.locator("details.pop[open]").count() == 1  # one open at a time
    line = next(x for x in cell.locator("div.pop-body").get_attribute("data-text").split("\n")
                if x.startswith("figures checked here: "))
    assert set(line[len("figures checked here: "):-1].split(", ")) == set(checked)
    # the copy button copies the command the row's block shows
    page.keyboard.press("Escape")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    row = page.locator("table#results tr[data-label='dense']")
    command = row.locator("pre.command").text_content()
    assert command.startswith("beyondsim run dense ") and "-b diag/antonym" in command
    from playwright.sync_api import expect

    row.locator("button.copy").click()
    expect(row.locator("button.copy")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == command
    _clean(page)

    # without scripts every row is shown, the filters are hidden and a badge still opens on a click
    context = _chromium.new_context(java_script_enabled=False)
    try:
        plain = context.new_page()
        plain.goto((site / "bench" / "nevir.html").as_uri())
        assert not plain.locator("form#results-filters").is_visible()
        rows = json.loads((site / "data" / "bench-nevir.json").read_text(encoding="utf-8"))["rows"]
        assert plain.locator("table#results tbody tr").count() == len(rows) > 5
        assert not plain.locator("button.copy").first.is_visible()
        cell = plain.locator("table#results tbody tr").first.locator("td.trust")
        cell.locator("summary").click()
        assert cell.locator("div.pop-body").is_visible() and cell.locator("div.pop-body").bounding_box()["height"] > 40
        reproduce = plain.locator("table#results tbody tr").first.locator("td.reproduce")
        reproduce.locator("summary").click()
        assert reproduce.locator("pre.command").is_visible()
    finally:
        context.close()


def _cells(page: Any, table: str, label: str) -> dict[str, str]:
    """The headline cells of ``label``'s row in ``table`` (an id), by measure."""
    return page.eval_on_selector(
        f"table#{table}", f"""t => {{ const heads = Array.from(t.tHead.rows[0].cells).map(h => h.dataset.measure || '');
        const row = Array.from(t.tBodies).flatMap(b => Array.from(b.rows)).find(r => r.dataset.label === {json.dumps(label)});
        if (!row) return null;
        const out = {{}}; heads.forEach((m, i) => {{ if (m) out[m] = row.cells[i].dataset.value; }});
        out.source = row.dataset.source; return out; }}""")


def test_the_papers_methods_are_ranked_on_their_slices(board, browser_page) -> None:
    site, store = board
    page = browser_page
    page.goto((site / "index.html").as_uri())
    full_tables = page.eval_on_selector_all("table.overview:not(.slices)", "ts => ts.map(t => t.id)")
    slice_tables = page.eval_on_selector_all("table.overview.slices", "ts => ts.map(t => t.id)")
    assert "slices-constraint-25" in slice_tables
    records = store.results()
    # a slice never puts a method in a full-set table: one of the papers' methods is there only with
    # full-set results of its own (DEO's five full constraint sets and HyDE's four are in the bundle; NS-IR has
    # slices only)
    on_full_sets = {r.label for r in records if "[:" not in r.benchmark}
    in_full_tables = set(_visible(page, full_tables)) & set(SLICED_METHODS)
    assert in_full_tables == set(SLICED_METHODS) & on_full_sets
    per_query = {}

    def values(rec) -> dict[str, dict[str, float]]:
        if rec.id not in per_query:
            per_query[rec.id] = store.per_query(int(rec.id))
        return per_query[rec.id]

    def first_judged(full_version: str, n: int) -> list[str]:
        """The first ``n`` judged queries of a benchmark version, in its stored order."""
        relevance, _ = store.qrels_of(full_version)
        return [q["qid"] for q in store.queries_of(full_version) if q["qid"] in relevance][:n]

    found = set()
    for tid in slice_tables:
        base = tid[:-len("-apart")] if tid.endswith("-apart") else tid
        data = json.loads((site / "data" / f"{base}.json").read_text(encoding="utf-8"))
        slices = data["headline_benchmarks"]
        measures = [m for m in ("Sat@10", "V@2", "FVR@10", "PairAcc", "nDCG@10", "Comp@5", "R@5", "MAP@10")
                    if m in data["columns"]]
        for label in page.evaluate("id => Array.from(document.getElementById(id).tBodies).flatMap(b => "
                                   "Array.from(b.rows)).map(r => r.dataset.label)", tid):
            cells = _cells(page, tid, label)
            if cells["source"] == "stored":  # its own stored results on every headline slice
                stored = {b: next(r for r in records if r.label == label and r.benchmark == b) for b in slices}
                for m in measures:
                    want = np.mean([stored[b].measures[m].mean for b in slices if m in stored[b].measures])
                    assert float(cells[m]) == pytest.approx(want, abs=1e-12), (tid, label, m)
                if label in SLICED_METHODS:
                    found.add(label)
            elif cells["source"] == "restricted" and cells.get(measures[0]):
                # its full-set result's per-query values on the slice's queries: the first judged ones
                for m in [x for x in measures if x != "PairAcc"][:2]:
                    means = []
                    for b in slices:  # (the mean over its seeds of each seed's mean on those queries)
                        cut = next(r for r in records if r.benchmark == b)
                        seeds = [r for r in records if r.label == label and r.benchmark == b.rsplit("[:", 1)[0]]
                        if m not in seeds[0].measures:
                            continue  # (a benchmark without the measure is in no mean of it: negconstraint's V@2)
                        first = first_judged(seeds[0].benchmark_version, cut.n_queries)
                        means.append(np.mean([np.mean([values(r)[m][q] for q in first if q in values(r)[m]])
                                              for r in seeds]))
                    assert float(cells[m]) == pytest.approx(np.mean(means), abs=1e-9), (tid, label, m)
    assert found == set(SLICED_METHODS)

    # the slice's queries are the first N judged queries of the full set, in its order (pairs kept whole)
    for b in ("nevir[:25]", "excluir[:25]", "diag/antonym[:25]", "nevir[:2]"):
        rec = next(r for r in records if r.benchmark == b)
        full = next(r for r in records if r.benchmark == b.rsplit("[:", 1)[0])
        ids = set(values(rec)["Sat@10"])
        first = first_judged(full.benchmark_version, rec.n_queries)
        assert len(ids) == rec.n_queries and ids == set(first)
        assert [q["qid"] for q in store.queries_of(rec.benchmark_version) if q["qid"] in ids] == first  # in its order
    # the table says where its figures come from
    caption = page.locator("#slices-constraint-25-title ~ p.slice-sources").inner_text()
    assert "hyde" in caption and "deo" in caption and "restricted to exactly the slice’s query ids" in caption
    _clean(page)


def test_a_restricted_row_equals_the_stored_slice_run_of_the_same_configuration(board) -> None:
    """On nevir[:2] bm25 and dense have a stored slice run and a full-set result: the full-set values cut
    to the slice's queries give the slice run's figures and intervals exactly."""
    from reports.compare import PerQuery, collect, cut_from, restricted_group, slice_ids

    _, store = board
    sections = {s.name: s for s in collect(store)}
    piece, whole = sections["nevir[:2]"], sections["nevir"]
    pq = PerQuery(store)
    ids = slice_ids(piece, pq)
    assert len(ids["Sat@10"]) == 2 and len(ids["PairAcc"]) == 1
    for label in ("bm25", "dense"):
        stored = next(g for g in piece.groups if g.display == label).records[0]
        full = next(g for g in whole.groups if g.display == label)
        assert cut_from(piece, full.benchmark_version)
        got, values = restricted_group(full, piece, ids, pq)
        assert set(got.records[0].measures) == set(stored.measures)
        for m, v in stored.measures.items():
            mine = got.records[0].measures[m]
            assert (mine.mean, mine.n, mine.ci_low, mine.ci_high) == pytest.approx((v.mean, v.n, v.ci_low, v.ci_high),
                                                                                   abs=1e-12), (label, m)
            assert values[m] == pytest.approx(store.per_query(int(stored.id))[m], abs=1e-12)
