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
  with the first headline measure (behind a toggle, so the ranking fits the window); a filter bar
  and search box over the rows' ``data-*`` tags; the query-slice tables (``slices-<suite>-<N>``:
  the methods stored on a slice only, ranked beside every method on the same queries). Links to
  every other page.
* ``bench/<slug>.html`` — one per benchmark: every stored measure (mean with the 95% bootstrap CI
  for one seed, ± the std over seeds for several), significance marks against the suite's
  comparator retriever (†) and against the best baseline (‡), per-category breakdowns,
  violation-survival curves, score separation and sensitivity heatmaps. Benchmarks that only
  have parameter sweeps get a page too.
* the second-stage track (:mod:`reports.second_stage`): rerankers on frozen candidate pools and
  each pool's three reference rows are on no ordinary table; a benchmark page's "Second stage"
  section has a table per pool (its name, hash, first stage, depth and ceiling above it), the
  overview a second-stage section per suite with a table per pool name. A benchmark with
  second-stage results only gets a page too.
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
* second-stage tables: ``table.second-stage`` with ``data-pool-name`` (and, on a benchmark page,
  ``data-pool``: the pool's hash), ids ``second-stage-<pool name>-<hash8>`` (benchmark page; the
  pool's facts in ``#<id>-pool``) and ``second-stage-<suite>-<pool name>`` (overview); its first
  ``tbody`` holds the ranked rerankers (the one the sort moves), ``tbody.apart`` those not ranked
  (``span.below-shuffled``: not above the shuffled pool), ``tbody.reference`` the reference rows;
  every row has ``data-kind`` (``reranker``, ``order``, ``shuffled``, ``oracle``) and
  ``data-label`` (the stored label); ``p.left-out``: a note counting the results left out;
* significance marks: ``span.sig.sig-reference`` (†, against the comparator: the class keeps its
  former name) / ``span.sig.sig-baseline`` (‡), class ``better``/``worse``, ``data-p`` the
  Holm-adjusted p, ``title`` its text;
* drill-down: ``article.query[data-qid]`` per query, ``tr[data-doc][data-mark]`` per ranked document
  (``satisfying``, ``violating``, ``topical``, ``non-relevant``, ``unjudged``, or ``unknown`` when
  the store has no judgments).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from harness.core.errors import UserError
from harness.store.results import ResultRecord, Store

from .compare import N_RESAMPLES, compare
from .pages import PAGES
from .pages.page import Site, sort_script, write
from .text import SLUG_CHARS, slugify

# the list of pages a render wrote, so the next render into the same folder removes the pages that
# no longer exist (a retriever renamed, a result deleted) and nothing else in the folder
MANIFEST = ".beyondsim-site.json"
# what a render writes, by the end of its name: only such a file the previous render listed is ever removed
SITE_FILES = (".html", ".js", ".csv", ".json", ".csv.gz", ".json.gz")


class SiteError(UserError, ValueError):
    """A folder the site may not be written into."""


def _previous_pages(out_dir: Path) -> list[str] | None:
    """The pages the previous render into ``out_dir`` wrote (its manifest); ``None``: no site there."""
    try:
        pages = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8")).get("pages", [])
    except (OSError, ValueError, AttributeError):
        return None
    return [p for p in pages if isinstance(p, str)] if isinstance(pages, list) else []


def check_site_folder(out_dir: Path, force: bool = False) -> None:
    """A :class:`SiteError` when the site may not be written into ``out_dir``: a file, or (unless
    ``force``) a folder that holds files and is not a site this module wrote (it has no manifest)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SiteError(f"{out_dir} is a file, not a folder: give a folder for the site")
    if force or not out_dir.is_dir() or _previous_pages(out_dir) is not None:
        return
    if any(out_dir.iterdir()):
        raise SiteError(f"{out_dir} holds files and is not a leaderboard site: give an empty or new folder, or "
                        f"write the site into it with `beyondsim leaderboard --out {out_dir} --force` (its pages "
                        "replace files of the same name)")


def _prune(out_dir: Path, written: set[str]) -> list[str]:
    """Delete the pages the previous render listed that this one did not write; return them."""
    previous = _previous_pages(out_dir)
    if previous is None:
        return []
    removed = []
    root = out_dir.resolve()
    for rel in previous:
        if not isinstance(rel, str) or rel in written or not rel.endswith(SITE_FILES):
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
                include: Callable[[ResultRecord], bool] | None = None, force: bool = False) -> Path:
    """Write the site (see the module docstring for its pages) and return the path of ``index.html``;
    ``include`` keeps only the results it accepts (:func:`reports.compare.compare`).

    The pages are rendered into a staging folder first and then moved into ``out_dir``. A file there
    that the previous render did not write (its manifest) is replaced only with ``force``; without
    it a :class:`SiteError` lists them and nothing is changed. No such file is ever deleted: only the
    pages the previous render listed and this one did not write are removed (:func:`_prune`)."""
    out_dir = Path(out_dir)
    check_site_folder(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    board = compare(store, n_resamples=n_resamples, include=include)
    staging = Path(tempfile.mkdtemp(prefix=".beyondsim-site-", dir=out_dir))
    try:
        site = Site(staging, store, board, title, generated_at or _dt.datetime.now(_dt.timezone.utc))
        for page in PAGES:
            page.render(site)
        ours = set(_previous_pages(out_dir) or ())
        clash = sorted(rel for rel in site.written if rel not in ours and (out_dir / rel).exists())
        if clash and not force:
            raise SiteError(f"{out_dir} holds {len(clash)} file(s) the site did not write where it would write its "
                            f"pages ({', '.join(clash[:5])}{', …' if len(clash) > 5 else ''}); nothing was changed "
                            "(`beyondsim leaderboard --force` replaces them)")
        for rel in sorted(site.written):
            target = out_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    site.out_dir = out_dir
    _prune(out_dir, site.written)
    write(out_dir / MANIFEST,
          json.dumps({"generated": site.common["generated_iso"], "pages": sorted(site.written)}, indent=1))
    return out_dir / "index.html"


__all__ = ["MANIFEST", "SLUG_CHARS", "SiteError", "check_site_folder", "render_site", "slugify", "sort_script"]
