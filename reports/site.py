"""Render the static leaderboard site from the results store (docs/design/store.md#the-site).

The site is built from the store alone — no benchmark or retriever is loaded — so it can be
rendered anywhere a ``results.sqlite`` can be read: :func:`reports.compare.compare` turns the store
into comparison objects, and each module of :mod:`reports.pages` writes its pages from them. Pages
work from ``file://``: inline CSS, relative links, no network request of any kind.

Pages (``out_dir``):

* ``index.html`` — overview: one table per suite that declares a headline
  (:func:`harness.registry.suites`), plus ``other`` for stored benchmarks in none of them; rows
  are retriever configurations, columns the suite's headline measures averaged over the suite's
  benchmarks the row was run on, a ``benchmarks`` coverage count, and one column per benchmark
  with the first headline measure. Links to every other page.
* ``bench/<slug>.html`` — one per benchmark: every stored measure (mean with the 95% bootstrap CI
  for one seed, ± the std over seeds for several), significance marks against the suite's
  reference retriever (†) and against the best baseline (‡), per-category breakdowns,
  violation-survival curves, score separation and sensitivity heatmaps. Benchmarks that only
  have parameter sweeps get a page too.
* ``efficiency.html`` — time, LLM calls, tokens and dollars per retriever × benchmark, with totals
  per retriever.
* ``retriever/<slug>.html`` — one per configuration label: spec, provenance, environment, every
  result, retriever facts; and ``retriever/<slug>/<bench-slug>-seed<N>.html``, the per-query
  drill-down of one result (the first ``DRILLDOWN_QUERIES`` queries of
  :mod:`reports.pages.drilldown`, top ``DRILLDOWN_DEPTH`` each, marked satisfying / violating /
  unjudged).

Stable hooks for browser tests:

* sortable tables are ``<table class="sortable" id="…">``; ids: ``overview-<suite>`` (suite name
  slugified; ``overview-other`` for benchmarks in no suite), ``results`` (benchmark page),
  ``breakdown-<key>-<measure>``, ``efficiency-results`` and ``efficiency-totals``;
* a sortable header is ``<th data-sort="num">`` or ``<th data-sort="text">`` in the table's single
  header row; the header the rows are ordered by carries ``aria-sort`` (``ascending`` /
  ``descending``), the others none;
* body cells of numeric columns carry ``data-value`` with the raw number (``""`` when missing);
  text columns sort on ``data-value`` when present, else on the cell text;
* clicking a header (or Enter/Space on it) sorts by that column ascending, or reverses the
  direction when it is already the sorted column; missing values always sort last; equal values
  keep their previous order. A click on a link inside a header (the overview's benchmark columns)
  follows the link instead. The one ``<script>`` of each page is the constant
  ``templates/_sort.js`` (:func:`sort_script`), the same on every page;
* as rendered, overview and results tables are ordered by their first headline measure (best
  first) and that header carries ``aria-sort``; overview cells: ``td.measure`` (suite means),
  ``td.coverage``, ``td.bench`` (one per ``th.bench[data-benchmark]``);
* significance marks: ``span.sig.sig-reference`` (†) / ``span.sig.sig-baseline`` (‡), class
  ``better``/``worse``, ``data-p`` the Holm-adjusted p, ``title`` its text;
* drill-down: ``article.query[data-qid]`` per query, ``tr[data-doc][data-mark]`` per ranked document
  (``satisfying``, ``violating``, ``topical``, ``non-relevant``, ``unjudged``, or ``unknown`` when
  the store has no judgments).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from typing import Callable

from harness.store import ResultRecord, Store

from .compare import N_RESAMPLES, compare
from .pages import PAGES
from .pages.common import Site, sort_script, write
from .text import SLUG_CHARS, slugify

# the list of pages a render wrote, so the next render into the same folder removes the pages that
# no longer exist (a retriever renamed, a result deleted) and nothing else in the folder
MANIFEST = ".beyondsim-site.json"


def _prune(out_dir: Path, written: set[str]) -> list[str]:
    """Delete the pages the previous render listed that this one did not write; return them."""
    try:
        previous = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8")).get("pages", [])
    except (OSError, ValueError, AttributeError):
        return []
    removed = []
    root = out_dir.resolve()
    for rel in previous:
        if not isinstance(rel, str) or rel in written or not rel.endswith((".html", ".js", ".csv", ".json")):
            continue
        path = (out_dir / rel).resolve()
        if root not in path.parents or not path.is_file():
            continue  # never outside the site folder
        path.unlink()
        removed.append(rel)
        for parent in path.parents:
            if parent == root or root not in parent.parents:
                break
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break
    return removed


def render_site(store: Store, out_dir: Path, *, title: str = "beyondsim leaderboard",
                generated_at: _dt.datetime | None = None, n_resamples: int = N_RESAMPLES,
                include: Callable[[ResultRecord], bool] | None = None) -> Path:
    """Write the site (see the module docstring for its pages) and return the path of ``index.html``;
    ``include`` keeps only the results it accepts (:func:`reports.compare.compare`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    board = compare(store, n_resamples=n_resamples, include=include)
    site = Site(out_dir, store, board, title, generated_at or _dt.datetime.now(_dt.timezone.utc))
    for page in PAGES:
        page.render(site)
    _prune(out_dir, site.written)
    write(out_dir / MANIFEST,
          json.dumps({"generated": site.common["generated_iso"], "pages": sorted(site.written)}, indent=1))
    return out_dir / "index.html"


__all__ = ["MANIFEST", "SLUG_CHARS", "render_site", "slugify", "sort_script"]
