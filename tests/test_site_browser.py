"""The generated leaderboard in a real browser (headless Chromium through Playwright).

The site comes from real runs: ``bm25``, ``dense`` and ``random`` (the chance level) on two
constraint diagnostics and a tool benchmark from the shared data, then ``beyondsim leaderboard``. The test opens it from disk,
sorts a column and checks the new order against the stored values, follows links to a benchmark
page, a retriever page and a per-query drill-down, and asserts that no page logged a console
error, threw, or asked for anything over the network.

Screenshots of the overview (the constraint table under its Sat@10 headline, rank intervals and
the chance row), its trade-off plot, a benchmark page (at full width and scrolled at a narrow window), a
per-query drill-down and the cost page are written to
``$BEYONDSIM_ARTIFACTS/screenshots`` (default ``test-artifacts/screenshots`` in the repository)
and listed in the test run's summary, so a CI log points at them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from pathlib import Path

import pytest

from harness.measures import parse_measure
from harness.store.results import Store
from tests.test_cli import invoke

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = ("diag/antonym", "diag/negation", "toolbank/numpy")


def artifacts_dir() -> Path:
    root = Path(os.environ.get("BEYONDSIM_ARTIFACTS") or REPO / "test-artifacts")
    out = root / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def real_site(home: Path, shared_data: Path) -> tuple[Path, Path]:
    args = ["run", "bm25", "dense", "random", "--data-dir", str(shared_data)]
    for b in BENCHMARKS:
        args += ["-b", b]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    site = home / "site"
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0, res.output
    return home, site


def _column(page, table: str, index: int) -> list[str]:
    return page.eval_on_selector_all(
        f"table#{table} tbody:not(.chance) tr",
        f"rows => rows.map(r => (r.cells[{index}].getAttribute('data-value') ?? r.cells[{index}].textContent).trim())",
    )


def _shoot(page, name: str, log: list[Path]) -> Path:
    path = artifacts_dir() / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a rendered page, not a blank canvas
    log.append(path)
    return path


def _fetched(page, link) -> str:
    """What clicking a download link gets: the downloaded file's text (decompressed when it is
    gzip-compressed, as the per-query files are), or — where the browser opens
    the file instead (a ``download`` attribute does not apply to ``file:`` pages in Chromium) — the
    text it shows; then back to the page."""
    from playwright.sync_api import TimeoutError as NoDownload

    try:
        with page.expect_download(timeout=3000) as got:
            link.click()
        data = Path(got.value.path()).read_bytes()
        return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")  # (a .gz file)
    except NoDownload:  # opened, not downloaded
        page.wait_for_load_state()
        text = page.evaluate("document.body.innerText")
        page.go_back()
        return text


def _clean(page) -> None:
    assert page.console_errors == []
    assert page.page_errors == []
    assert page.external_requests == []


def test_site_in_browser(real_site, browser_page, screenshot_log) -> None:
    home, site = real_site
    page = browser_page
    store = Store(home / "results.sqlite")

    # ---- overview: ranked by Sat@10 (best first); the chance row in a body of its own, unranked
    page.goto((site / "index.html").as_uri())
    table = "overview-constraint"
    heads = page.eval_on_selector_all(f"table#{table} thead th", "hs => hs.map(h => h.textContent.trim())")
    v_col = next(i for i, h in enumerate(heads) if h.startswith("V@2"))
    sat_col = next(i for i, h in enumerate(heads) if h.startswith("Sat@10"))
    rank_col = heads.index("rank")
    label_col = 0
    labels_before = _column(page, table, label_col)
    assert sorted(labels_before) == ["bm25", "dense"]

    # the stored means of each retriever over the suite's benchmarks it ran on
    def suite_mean(label: str, measure: str) -> float:
        vals = [r.measures[measure].mean for r in store.results(retriever=label)
                if r.benchmark in ("diag/antonym", "diag/negation") and measure in r.measures]
        return sum(vals) / len(vals)

    sat = {label: suite_mean(label, "Sat@10") for label in labels_before}
    expected = {label: suite_mean(label, "V@2") for label in labels_before}
    assert labels_before == sorted(sat, key=sat.get, reverse=True)  # the page starts ranked by Sat@10
    assert page.locator(f"table#{table} thead th").nth(sat_col).get_attribute("aria-sort") == "descending"
    ranks = _column(page, table, rank_col)
    assert all(r.isdigit() for r in ranks)  # rank intervals: the first number sorts
    chance = page.locator(f"table#{table} tbody.chance tr")
    assert chance.count() == 1
    assert chance.locator("td").nth(label_col).inner_text().strip().startswith("random")
    assert chance.locator("td").nth(rank_col).inner_text().strip() == "chance"
    # random has the fewest violations: by V@2 alone it would head the table
    assert suite_mean("random", "V@2") < min(expected.values())
    assert suite_mean("random", "Sat@10") < min(sat.values())

    # sort by V@2 (lower is better), both directions: the chance row stays in its own body, last
    assert not parse_measure("V@2").higher_is_better
    header = page.locator(f"table#{table} thead th").nth(v_col)
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    values = [float(v) for v in _column(page, table, v_col)]
    assert values == sorted(values)
    assert _column(page, table, label_col) == sorted(expected, key=expected.get)
    for label, v in zip(_column(page, table, label_col), values):
        assert v == pytest.approx(expected[label], abs=1e-9)
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _column(page, table, label_col) == sorted(expected, key=expected.get, reverse=True)
    assert page.locator(f"table#{table} tbody.chance tr").count() == 1
    # sort by label text: alphabetical
    page.locator(f"table#{table} thead th").nth(label_col).click()
    assert _column(page, table, label_col) == ["bm25", "dense"]

    # the trade-off plot: one point per row (the chance point marked), each a link to its row
    fig = page.locator("figure#overview-constraint-tradeoff")
    points = page.eval_on_selector_all("figure#overview-constraint-tradeoff circle[data-label]",
                                       "cs => cs.map(c => [c.dataset.label, c.dataset.kind, Number(c.dataset.x), "
                                       "Number(c.dataset.y)])")
    assert sorted(p[0] for p in points) == ["bm25", "dense", "random"]
    assert {p[0]: p[1] for p in points}["random"] == "chance"
    for label, _, x, y in points:
        assert x == pytest.approx(suite_mean(label, "V@2")) and y == pytest.approx(suite_mean(label, "nDCG@10"))
    assert page.locator("figure#overview-constraint-tradeoff line.chance-line").count() == 2
    fig.screenshot(path=str(artifacts_dir() / "tradeoff.png"))
    screenshot_log.append(artifacts_dir() / "tradeoff.png")
    page.locator("figure#overview-constraint-tradeoff a.point:has(circle[data-label='dense'])").click()
    assert page.url.endswith("#overview-constraint-row-dense")
    assert page.locator("#overview-constraint-row-dense td").first.inner_text().strip() == "dense"
    _shoot(page, "overview.png", screenshot_log)
    _clean(page)

    # ---- follow the link to a benchmark page: its column header, shown once the per-benchmark columns are
    bench_head = page.locator("table#overview-constraint th.bench a[href='bench/diag-antonym.html']")
    assert not bench_head.is_visible()  # the per-benchmark columns are behind a toggle
    page.check("#overview-constraint-show-bench")
    assert bench_head.is_visible()
    bench_head.click()
    page.wait_for_load_state()
    assert page.url.endswith("/bench/diag-antonym.html")
    assert "diag/antonym" in page.locator("h1").inner_text()
    assert page.locator("table#results tbody tr").count() == 3
    # the chance row last, unranked; the others ranked
    assert page.locator("table#results tbody tr").last.locator("td.rank").inner_text().strip() == "chance"
    assert page.locator("svg[data-plot='line']").count() >= 1  # the violation-survival curves
    assert page.locator("figure#tradeoff svg[data-plot='scatter'] circle[data-label]").count() == 3
    # every measure of the table is defined in its legend, and in its header's tooltip
    measures = page.eval_on_selector_all("table#results th[data-measure]", "hs => hs.map(h => h.dataset.measure)")
    legend = page.eval_on_selector_all("dl.measures dt", "ds => ds.map(d => d.dataset.measures).join(' ').split(' ')")
    assert measures and set(measures) <= set(legend)
    assert "violates the query's constraint" in page.locator("th[data-measure='V@2']").get_attribute("title")
    _shoot(page, "benchmark.png", screenshot_log)

    # a wide table scrolls inside its box at a narrow window: the page itself never scrolls
    # sideways, the seeds column (the per-query links) is in view without scrolling, and the
    # retriever column stays in view when the table is scrolled to its last column
    page.set_viewport_size({"width": 900, "height": 900})
    wrap = "section#results-section .table-wrap"
    sizes = page.eval_on_selector(wrap, "w => [w.scrollWidth, w.clientWidth]")
    assert sizes[0] > sizes[1], sizes  # wider than its box: it scrolls
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    box = page.eval_on_selector(wrap, "w => w.getBoundingClientRect().right")
    seeds = page.locator("table#results td.seeds a").first
    assert seeds.bounding_box()["x"] + seeds.bounding_box()["width"] <= box
    page.eval_on_selector(wrap, "w => { w.scrollLeft = w.scrollWidth; }")
    last = page.locator("table#results tbody tr:first-child td:last-child").bounding_box()
    first = page.locator("table#results tbody tr:first-child td:first-child").bounding_box()
    wrap_box = page.eval_on_selector(wrap, "w => { const r = w.getBoundingClientRect(); return [r.left, r.right]; }")
    assert last["x"] + last["width"] <= wrap_box[1] + 1  # the last column scrolled into view
    assert abs(first["x"] - wrap_box[0]) <= 2  # the retriever column stuck at the left edge
    _shoot(page, "benchmark-wide.png", screenshot_log)
    page.set_viewport_size({"width": 1280, "height": 900})
    _clean(page)

    # ---- a retriever page, then the per-query drill-down of its diag/antonym result
    page.click("table#results a[href$='retriever/dense.html']")
    page.wait_for_load_state()
    assert page.url.endswith("/retriever/dense.html")
    page.click("a[href$='dense/diag-antonym-seed0.html']")
    page.wait_for_load_state()
    assert "/retriever/dense/" in page.url
    rec = next(r for r in store.results(retriever="dense", benchmark="diag/antonym", full=True))
    qids = [q["qid"] for q in store.queries_of(rec.benchmark_version)]
    per_page = 25
    # the script draws the first page of queries from the data files, in benchmark order
    shown = page.eval_on_selector_all("article.query", "as => as.map(a => a.dataset.qid)")
    assert shown == qids[:per_page]
    first_qid = qids[0]
    top = [d for d, _ in rec.rankings[first_qid][:10]]
    drawn = page.eval_on_selector_all(f"article.query[data-qid='{first_qid}'] tr[data-doc]",
                                      "rs => rs.map(r => r.dataset.doc)")
    assert drawn == top
    assert page.locator("[data-mark='violating']").count() > 0
    if len(qids) > per_page:  # the next page draws the next queries
        page.click("nav#pager a[data-page='2']")
        # the page is drawn on the hashchange event, which fires after the click returns
        page.wait_for_selector("main#queries[data-page='2']")
        shown = page.eval_on_selector_all("article.query", "as => as.map(a => a.dataset.qid)")
        assert shown == qids[per_page:2 * per_page] and page.url.endswith("#page-2")
    _shoot(page, "drilldown.png", screenshot_log)
    _clean(page)

    # ---- the cost page
    page.goto((site / "efficiency.html").as_uri())
    assert page.locator("table#efficiency-results tbody tr").count() == 3 * len(BENCHMARKS)
    heads = page.eval_on_selector_all("table#efficiency-results thead th", "hs => hs.map(h => h.textContent.trim())")
    assert {"offline s", "offline CPU s", "online s", "online CPU s", "model load s"} <= set(heads)
    # dense loaded its encoder once, in its first result: that time is in "model load s", not "offline s"
    cpu = page.eval_on_selector_all("table#efficiency-results td.online_cpu", "cs => cs.map(c => c.dataset.value)")
    assert all(v != "" for v in cpu)
    # cold offline seconds: dense needs an encoder, so none of its rows costs nothing offline, even those
    # whose model was already loaded by an earlier result of the same run (charged what loading it cost)
    rows = page.eval_on_selector_all("table#efficiency-results tbody tr", "rs => rs.map(r => [r.cells[0].textContent.trim(), "
                                     "r.querySelector('td.offline').dataset.value, r.querySelector('td.command pre.command').textContent])")
    dense = [float(v) for label, v, _ in rows if label == "dense"]
    assert len(dense) == len(BENCHMARKS) and min(dense) > 0.1, dense
    assert all(cmd.startswith(f"beyondsim run {label.split()[0]} ") for label, _, cmd in rows)
    # every table's CSV and JSON download and parse, with the rows and figures of the table
    for table in ("efficiency-results", "efficiency-totals"):
        shown = {r[0]: r for r in page.eval_on_selector_all(
            f"table#{table} tbody tr", "rs => rs.map(r => [r.cells[0].textContent.trim() + ' ' + r.cells[1].textContent.trim(), "
            "r.querySelector('td.offline').dataset.value])")}
        section = page.locator(f"section:has(table#{table})")
        rows_csv = list(csv.DictReader(io.StringIO(_fetched(page, section.locator("a.download[data-format='csv']")))))
        data = json.loads(_fetched(page, section.locator("a.download[data-format='json']")))
        assert len(rows_csv) == len(data["rows"]) == len(shown)
        for c, j in zip(rows_csv, data["rows"]):
            assert float(c["offline_s"]) == pytest.approx(j["offline_s"])
        if table == "efficiency-results":
            for j in data["rows"]:
                key = f"{j['retriever']} {j['benchmark']}"
                assert float(shown[key][1]) == pytest.approx(j["offline_s"])
    # the quality-against-cost scatter: each point links to the row of its configuration
    points = page.eval_on_selector_all("figure.tradeoff.cost a.point", "as => as.map(a => [a.getAttribute('href'), "
                                       "a.querySelector('circle').dataset.label])")
    assert points
    for href, label in points:
        assert page.eval_on_selector(f"tr{href}", "r => r.cells[0].textContent.trim()") == label
    page.locator("figure.tradeoff.cost a.point").first.click()
    assert page.url.endswith(points[0][0])
    _shoot(page, "cost.png", screenshot_log)
    _clean(page)

    # ---- the overview's downloads and its cost scatter
    page.goto((site / "index.html").as_uri())
    table = page.locator("table.sortable[id^='overview-']").first
    tid = table.get_attribute("id")
    data = json.loads(_fetched(page, page.locator(f"a.download[data-format='json'][href='data/{tid}.json']")))
    labels = page.eval_on_selector_all(f"table#{tid} tbody tr", "rs => rs.map(r => r.querySelector('td.label').dataset.value ?? r.querySelector('td.label').textContent.trim())")
    assert sorted(r["label"] for r in data["rows"]) == sorted(labels) and data["headline_benchmarks"]
    got = _fetched(page, page.locator(f"a.download[data-format='csv'][href='data/{tid}.csv']"))
    assert [r["label"] for r in csv.DictReader(io.StringIO(got))] == [r["label"] for r in data["rows"]]
    for href, label in page.eval_on_selector_all(f"figure#{tid}-cost a.point", "as => as.map(a => [a.getAttribute('href'), "
                                                 "a.querySelector('circle').dataset.label])"):
        assert page.locator(f"tr{href}").count() == 1, (href, label)
    _clean(page)

    # the overview's data carry each headline mean's CI and the benchmarks it averages, and each
    # row's command and BibTeX; the page shows the same command
    ranked = [r for r in data["rows"] if r["listed"] == "ranked"]
    first = next(c for c in data["columns"] if c.endswith(" ci_low"))[:-len(" ci_low")]
    assert ranked and all(r[f"{first} ci_low"] <= r[first] <= r[f"{first} ci_high"] for r in ranked)
    assert all(r["averaged_over"] == ";".join(data["headline_benchmarks"]) for r in data["rows"])
    bm25 = next(r for r in data["rows"] if r["label"] == "bm25")
    assert bm25["bibtex"].startswith("@book{robertson2009bm25,")
    shown_cmd = page.locator(f"table#{tid} tr#{tid}-row-bm25 pre.command").text_content()
    assert shown_cmd == bm25["command"] and shown_cmd.startswith("beyondsim run bm25 ")
    _clean(page)

    # ---- a benchmark page's table file (CIs) and a result's per-query values, from its seed links
    page.goto((site / "bench" / "diag-antonym.html").as_uri())
    section = page.locator("section#results-section")
    btable = json.loads(_fetched(page, section.locator("p.downloads a.download[data-format='json']")))
    brows = list(csv.DictReader(io.StringIO(_fetched(page, section.locator("p.downloads a.download[data-format='csv']")))))
    assert [r["label"] for r in brows] == [r["label"] for r in btable["rows"]] == page.eval_on_selector_all(
        "table#results tbody tr", "rs => rs.map(r => r.cells[0].dataset.value)")
    for r in btable["rows"]:
        rec = next(x for x in store.results(benchmark="diag/antonym") if x.label == r["label"])
        assert r["Sat@10"] == pytest.approx(rec.measures["Sat@10"].mean)
        assert (r["Sat@10 ci_low"], r["Sat@10 ci_high"]) == (pytest.approx(rec.measures["Sat@10"].ci_low),
                                                            pytest.approx(rec.measures["Sat@10"].ci_high))
    link = page.locator("table#results td.seeds a.download[data-format='csv']").first
    per_query = list(csv.DictReader(io.StringIO(_fetched(page, link))))
    meta = json.loads(_fetched(page, page.locator("table#results td.seeds a.download[data-format='json']").first))
    rec = next(x for x in store.results(benchmark="diag/antonym") if x.label == meta["result"]["retriever"])
    stored = store.per_query(int(rec.id))
    assert len(per_query) == len({q for col in stored.values() for q in col}) > 0
    for row in per_query:
        for m, col in stored.items():
            assert (row[m] == "") if row["query"] not in col else float(row[m]) == pytest.approx(col[row["query"]])
    _clean(page)
