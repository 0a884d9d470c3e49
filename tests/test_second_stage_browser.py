"""The second-stage track in a real browser (headless Chromium through Playwright).

The store comes from real runs (tests/test_second_stage_board.py: three tiny rerankers and
``dense`` on the ``bm25@100`` and ``dense@100`` pools of two constraint diagnostics), the site from ``beyondsim
leaderboard``. A benchmark page shows a second-stage table for each pool, its rerankers ranked and
the three reference rows below them, each row on one line at 1366 px; sorting a column reorders the
ranked rerankers only; the overview's second-stage section links to it. No page logs an error,
throws, or asks for anything over the network. Screenshots go to ``$BEYONDSIM_ARTIFACTS/screenshots``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.store.results import Store
from tests.test_cli import invoke
from tests.test_second_stage_board import POOLS, build_stage_home, label
from tests.test_site_browser import _clean, _shoot

WIDTH = 1366


@pytest.fixture
def stage_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    home = build_stage_home(tmp_path / "stage")
    monkeypatch.setenv("BEYONDSIM_HOME", str(home))
    site = tmp_path / "site"
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0, res.output
    return home, site


def _one_line_rows(page, table_sel: str) -> list[float]:
    """The height of each row of the table, after checking that no cell wraps: every cell's text is
    one line box (its height at most one line plus its padding)."""
    out = page.eval_on_selector(table_sel, """t => {
        const bad = [];
        for (const tr of t.querySelectorAll('tbody tr')) {
            for (const td of tr.cells) {
                const cs = getComputedStyle(td);
                const line = parseFloat(cs.lineHeight) || parseFloat(cs.fontSize) * 1.5;
                const inner = td.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom);
                if (inner > line * 1.6) bad.push([tr.dataset.label, td.cellIndex, inner, line]);
            }
        }
        return {bad, heights: Array.from(t.querySelectorAll('tbody tr')).map(r => r.getBoundingClientRect().height)};
    }""")
    assert out["bad"] == [], out["bad"]
    return out["heights"]


def _kinds(page, table_sel: str, body: str = "tbody") -> list[str]:
    return page.eval_on_selector_all(f"{table_sel} {body} tr", "rs => rs.map(r => r.dataset.kind)")


def test_benchmark_page_shows_both_pools_one_line_per_row(stage_site, browser_page, screenshot_log) -> None:
    home, site = stage_site
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    store = Store(home / "results.sqlite")
    pools = {m["name"]: m for m in store.pools("diag/negation")}
    assert sorted(pools) == sorted(POOLS)

    page.goto((site / "bench" / "diag-negation.html").as_uri())
    page.click("nav.toc a[href='#second-stage']")
    assert page.url.endswith("#second-stage")
    section = page.locator("section#second-stage")
    assert section.is_visible()
    tables = page.eval_on_selector_all("section#second-stage table.second-stage",
                                       "ts => ts.map(t => [t.id, t.dataset.poolName, t.dataset.pool])")
    assert [(name, h) for _, name, h in tables] == [(p, pools[p]["hash"]) for p in POOLS]
    for tid, name, h in tables:
        sel = f"table#{tid}"
        assert page.locator(sel).is_visible()
        title = page.locator(f"#{tid}-title").inner_text()
        assert name in title and h in title
        facts = page.locator(f"#{tid}-pool").inner_text()
        assert f"first stage {pools[name]['first_stage_label']}" in facts and "ceiling" in facts
        # rerankers ranked, the one below the shuffled pool apart, the reference rows last
        ranked = _kinds(page, sel, "tbody:not(.apart):not(.reference)")
        assert len(ranked) == 3 and set(ranked) == {"reranker"}  # Keep, Swap and dense
        assert _kinds(page, sel, "tbody.apart") == ["reranker"]
        assert _kinds(page, sel, "tbody.reference") == ["order", "shuffled", "oracle"]
        ranks = page.eval_on_selector_all(f"{sel} tbody.reference td.rank", "ts => ts.map(t => t.innerText.trim())")
        assert ranks == ["first stage", "shuffled", "ceiling"]
        apart = page.locator(f"{sel} tbody.apart tr")
        assert apart.get_attribute("data-label") == label("Rev", name)
        assert apart.locator("span.below-shuffled").inner_text() == "not above the shuffled pool"
        # one line per row, the table in its box without scrolling sideways
        heights = _one_line_rows(page, sel)
        assert len(heights) == 7 and max(heights) <= 1.25 * min(heights), heights
        wrap = page.eval_on_selector(sel, "t => { const w = t.closest('.table-wrap'); "
                                          "return [w.scrollWidth, w.clientWidth]; }")
        assert wrap[0] <= wrap[1] + 1, wrap
        # the oracle row is the pool's ceiling
        oracle = page.locator(f"{sel} tbody.reference tr[data-kind='oracle'] td[data-measure='Sat@10']")
        assert float(oracle.get_attribute("data-value")) == pytest.approx(pools[name]["ceiling"]["Sat@10"])
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")

    # sorting a column reorders the ranked rerankers only; the other bodies keep their rows
    tid = tables[0][0]
    sel = f"table#{tid}"
    header = page.locator(f"{sel} thead th[data-measure='V@2']")
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    values = [float(v) for v in page.eval_on_selector_all(
        f"{sel} tbody:not(.apart):not(.reference) td[data-measure='V@2']", "ts => ts.map(t => t.dataset.value)")]
    assert values == sorted(values)
    assert _kinds(page, sel, "tbody.reference") == ["order", "shuffled", "oracle"]
    section.screenshot(path=str(_shot_path("second-stage-benchmark.png", screenshot_log)))
    _clean(page)

    # the overview's second-stage section: a table per pool name, linking to the benchmark pages
    page.goto((site / "index.html").as_uri())
    for pool in POOLS:
        sel = f"table#second-stage-constraint-{pool.replace('@', '-')}"
        assert page.locator(sel).is_visible()
        assert _kinds(page, sel, "tbody.reference") == ["order", "shuffled", "oracle"]
        heights = _one_line_rows(page, sel)
        assert max(heights) <= 1.25 * min(heights), heights
    page.locator("section#second-stage").screenshot(path=str(_shot_path("second-stage-overview.png", screenshot_log)))
    page.click("section#second-stage a[href='bench/diag-antonym.html#second-stage']")
    page.wait_for_load_state()
    assert page.url.endswith("/bench/diag-antonym.html#second-stage")
    assert page.locator("section#second-stage table.second-stage").count() == len(POOLS)
    _shoot(page, "second-stage-antonym.png", screenshot_log)
    _clean(page)
    store.close()


def _shot_path(name: str, log: list[Path]) -> Path:
    from tests.test_site_browser import artifacts_dir

    path = artifacts_dir() / name
    log.append(path)
    return path
