"""Render the static leaderboard site from the results store (DESIGN.md §9).

The site is built from the store alone — no benchmark or retriever is loaded — so it can be
rendered anywhere a ``results.sqlite`` can be read. Every string that comes from the store
(labels, descriptions, spec values, query and document texts) is user-controlled and goes through
Jinja's autoescaping; the only ``|safe`` in the templates inserts the SVG strings that
:mod:`reports.plots` builds (which escape their own text). File names and anchors derived from
names are slugified (``[a-z0-9-]``). Pages work from ``file://``: inline CSS, relative links, no
network request of any kind.

Pages (``out_dir``):

* ``index.html`` — overview: one table per suite (``constraint``, ``topical``, ``completeness``
  from :func:`harness.registry.suites`, plus ``other`` for stored benchmarks in none of them);
  rows are retriever configurations, columns the suite's headline measures (:data:`SUITE_HEADLINES`)
  averaged over the suite's benchmarks the row was run on, a ``benchmarks`` coverage count, and one
  column per benchmark with the first headline measure. Links to every other page.
* ``bench/<slug>.html`` — one per benchmark: every stored measure (mean with the 95% bootstrap CI
  for one seed, ± the std over seeds for several), significance marks against ``dense`` (†) and
  against the best baseline (‡), per-category breakdowns, violation-survival curves, score
  separation and sensitivity heatmaps. Benchmarks that only have parameter sweeps get a page too.
* ``efficiency.html`` — time, LLM calls, tokens and dollars per retriever × benchmark, with totals
  per retriever.
* ``retriever/<slug>.html`` — one per configuration label: spec, provenance, environment, every
  result, retriever facts; and ``retriever/<slug>/<bench-slug>-seed<N>.html``, the per-query
  drill-down of one result (the first :data:`DRILLDOWN_QUERIES` queries, top
  :data:`DRILLDOWN_DEPTH` each, marked satisfying / violating / unjudged).

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
* significance marks: ``span.sig.sig-dense`` (†) / ``span.sig.sig-baseline`` (‡), class
  ``better``/``worse``, ``data-p`` the Holm-adjusted p, ``title`` its text;
* drill-down: ``article.query[data-qid]`` per query, ``tr[data-doc][data-mark]`` per ranked document
  (``satisfying``, ``violating``, ``topical``, ``non-relevant``, ``unjudged``, or ``unknown`` when
  the store has no judgments).

One grouping (:func:`collect`) feeds every table and :func:`summary_rows`, which the CLI prints
after a run:

* a *section* per benchmark name, ordered by task (constraint, completeness, topical, then any
  other) and name;
* a *row* per retriever configuration: results grouped by ``(label, spec_hash,
  benchmark_version)``. Several seeds are aggregated (mean over seeds of each per-seed mean; the
  sample standard deviation, ``ddof=1``, when there are two or more). Should the same seed be
  stored twice for one configuration (another harness version or depth ``k``), the most recent
  result is the one shown.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined

from harness.ledger import call_totals, phase_totals
from harness.metrics import group_by, parse_measure
from harness.stats import holm, paired_randomization_tests
from harness.store import CONTENT_DEPTH, BenchmarkInfo, ResultRecord, Store

from . import plots

TASK_ORDER = ("constraint", "completeness", "topical")
# Measures averaged over a subset of the judged queries: their count is shown when it differs.
COUNTED_BASES = ("V", "FVR", "Comp")
# Column order when a benchmark has no stored default measures.
_BASE_ORDER = ("nDCG", "MAP", "R", "P", "RR", "Comp", "V", "FVR", "PairAcc")
DASH = "–"

# Overview: the suites shown and their headline measures (the first orders the rows).
SUITE_HEADLINES: dict[str, tuple[str, ...]] = {
    "constraint": ("V@2", "FVR@10", "PairAcc", "nDCG@10"),
    "topical": ("nDCG@10", "MAP@10"),
    "completeness": ("Comp@5", "R@5"),
}
OTHER_SUITE = "other"
# Significance: references are the best ``dense`` row and the best row of these retrievers.
DENSE = "dense"
BASELINES = ("bm25", "dense", "hyde", "mmr")
ALPHA = 0.05
N_RESAMPLES = 10_000
MARK_DENSE, MARK_BASELINE = "†", "‡"
# Drill-down pages.
DRILLDOWN_QUERIES = 200
DRILLDOWN_DEPTH = CONTENT_DEPTH  # the documents the runner keeps and an export carries
# Sensitivity heatmaps: these measures when a sweep has them, else its first two.
SWEEP_MEASURES = ("R@10", "FVR@10")



# --------------------------------------------------------------------------------------------
# measures: direction and formatting


def _measure_base(name: str) -> str | None:
    try:
        return parse_measure(name).base
    except ValueError:
        return None


def measure_higher_is_better(name: str) -> bool:
    """Direction of a measure; names the harness does not know are taken as higher-is-better."""
    try:
        return parse_measure(name).higher_is_better
    except ValueError:
        return True


def measure_decimals(name: str) -> int:
    return 2 if _measure_base(name) == "FVR" else 3


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _round(x: float, decimals: int) -> Decimal:
    """Round half up on the shortest decimal repr (0.6725 → 0.673, as a reader expects)."""
    d = Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return abs(d) if d == 0 else d


def fmt_num(x: float | None, decimals: int = 3) -> str:
    if not _finite(x):
        return DASH
    return f"{_round(x, decimals):.{decimals}f}"


def fmt_p(p: float) -> str:
    """How p-values are written in titles (four decimals)."""
    return f"{p:.4f}"


def _raw(x: float | None) -> str:
    """A ``data-value``: the number as Python writes it, empty when missing."""
    return repr(float(x)) if _finite(x) else ""


def _measure_sort_key(name: str) -> tuple[int, int, str]:
    try:
        m = parse_measure(name)
        return (_BASE_ORDER.index(m.base), m.k or 0, name)
    except ValueError:
        return (len(_BASE_ORDER), 0, name)


SLUG_CHARS = 80  # a page name stays far below every file system's limit of 255 bytes


def slugify(text: str, used: set[str] | None = None, prefix: str = "") -> str:
    """A file-name-safe name for ``text``: ``[a-z0-9-]`` only, at most :data:`SLUG_CHARS` characters,
    and stable: a cut name, or one that collides with a name in ``used`` (which it updates), ends in a
    short hash of the whole text, so the same text keeps its page name from one render to the next."""
    base = prefix + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    if len(base) > SLUG_CHARS:
        base = base[:SLUG_CHARS - 9].rstrip("-") + "-" + digest
    slug, i = base, 2
    if used is not None and slug in used:
        slug = base = base[:SLUG_CHARS - 9].rstrip("-") + "-" + digest
    while used is not None and slug in used:  # the same text twice
        slug, i = f"{base}-{i}", i + 1
    if used is not None:
        used.add(slug)
    return slug


def _better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


# --------------------------------------------------------------------------------------------
# grouping and aggregation (shared by the HTML and summary_rows)


@dataclass
class Aggregate:
    """One measure of one configuration, over its seeds."""

    mean: float | None
    std: float | None  # sample std over seeds, only with ≥ 2 seeds that have a value
    ci: tuple[float, float] | None  # the 95% bootstrap CI, only with a single seed
    n: list[int]  # distinct per-seed counts
    values: list[float]  # per-seed means that were averaged


@dataclass
class ConfigGroup:
    benchmark: str
    benchmark_version: str
    label: str
    spec_hash: str
    records: list[ResultRecord] = field(default_factory=list)  # one per seed, by seed
    display: str = ""

    @property
    def retriever(self) -> str:
        return self.records[0].retriever if self.records else ""

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.records]

    @property
    def newest(self) -> ResultRecord:
        return max(self.records, key=lambda r: (r.created_at, r.id or 0))

    @property
    def n_queries(self) -> list[int]:
        return sorted({r.n_queries for r in self.records})

    @property
    def n_missing(self) -> int:
        return max((r.n_missing for r in self.records), default=0)

    def measure(self, name: str) -> Aggregate:
        vals = [r.measures[name] for r in self.records if name in r.measures]
        means = [float(v.mean) for v in vals if _finite(v.mean)]
        ns = sorted({int(v.n) for v in vals})
        if not means:
            return Aggregate(None, None, None, ns, [])
        mean = float(sum(means) / len(means))
        std = None
        if len(means) >= 2:
            std = math.sqrt(sum((x - mean) ** 2 for x in means) / (len(means) - 1))
        ci = None
        if len(self.records) == 1 and len(vals) == 1 and _finite(vals[0].ci_low) and _finite(vals[0].ci_high):
            ci = (float(vals[0].ci_low), float(vals[0].ci_high))
        return Aggregate(mean, std, ci, ns, means)


@dataclass
class BenchmarkSection:
    name: str
    task: str
    infos: list[BenchmarkInfo]  # stored info for the versions that have results (may be empty)
    info: BenchmarkInfo | None  # the one whose default measures and stats are shown
    measures: list[str]
    groups: list[ConfigGroup]
    versions: list[str]
    slug: str = ""

    @property
    def fallback(self) -> bool:
        return self.info is None


def _sort_value(agg: Aggregate, higher: bool) -> tuple[int, float]:
    if agg.mean is None:
        return (1, 0.0)
    return (0, -agg.mean if higher else agg.mean)


def collect(store: Store, records: list[ResultRecord] | None = None) -> list[BenchmarkSection]:
    """Group the store's results into benchmark sections of configuration rows, sorted."""
    records = store.results() if records is None else records
    infos: dict[str, list[BenchmarkInfo]] = {}
    for b in store.benchmarks():
        infos.setdefault(b.name, []).append(b)

    # one result per (configuration, seed): the most recent
    groups: dict[tuple[str, str, str, str], dict[int, ResultRecord]] = {}
    for rec in records:
        key = (rec.benchmark, rec.label, rec.spec_hash, rec.benchmark_version)
        by_seed = groups.setdefault(key, {})
        old = by_seed.get(rec.seed)
        if old is None or (old.created_at, old.id or 0) <= (rec.created_at, rec.id or 0):
            by_seed[rec.seed] = rec

    hashes_per_label: dict[str, set[str]] = {}
    for (_, label, spec_hash, _) in groups:
        hashes_per_label.setdefault(label, set()).add(spec_hash)

    by_bench: dict[str, list[ConfigGroup]] = {}
    for (bench, label, spec_hash, version), by_seed in groups.items():
        display = label if len(hashes_per_label[label]) == 1 else f"{label} ({spec_hash[:6]})"
        g = ConfigGroup(bench, version, label, spec_hash, [by_seed[s] for s in sorted(by_seed)], display)
        by_bench.setdefault(bench, []).append(g)

    sections: list[BenchmarkSection] = []
    for bench, glist in by_bench.items():
        versions = sorted({g.benchmark_version for g in glist})
        known = [b for b in infos.get(bench, []) if b.version in versions]
        # the version of the newest result decides the shown info; else any stored version
        newest = max((r for g in glist for r in g.records), key=lambda r: (r.created_at, r.id or 0))
        info = next((b for b in known if b.version == newest.benchmark_version), None)
        if info is None:
            info = known[0] if known else (infos[bench][-1] if infos.get(bench) else None)
        if info is not None and info.default_measures:
            measures = list(info.default_measures)
        else:
            present = {m for g in glist for r in g.records for m in r.measures}
            measures = sorted(present, key=_measure_sort_key)
        task = info.task if info is not None else "unknown"
        if measures:
            first, higher = measures[0], measure_higher_is_better(measures[0])
            glist.sort(key=lambda g: (_sort_value(g.measure(first), higher), g.display, g.benchmark_version))
        else:
            glist.sort(key=lambda g: (g.display, g.benchmark_version))
        sections.append(BenchmarkSection(bench, task, known, info, measures, glist, versions))

    def task_rank(s: BenchmarkSection) -> tuple[int, str, str]:
        rank = TASK_ORDER.index(s.task) if s.task in TASK_ORDER else len(TASK_ORDER) + (s.task == "unknown")
        return (rank, s.task, s.name)

    sections.sort(key=task_rank)
    used: set[str] = set()
    for s in sections:
        s.slug = slugify(s.name, used)
    return sections


def summary_rows(store: Store) -> list[dict[str, Any]]:
    """The per-benchmark leaderboard rows as plain dicts, in page order.

    Keys: ``benchmark``, ``benchmark_version``, ``label`` (disambiguated as on the pages),
    ``spec_hash``, ``seeds`` (how many), ``n_queries``, then one key per headline measure with the
    mean over seeds (``None`` when missing), in column order.
    """
    rows: list[dict[str, Any]] = []
    for s in collect(store):
        for g in s.groups:
            row: dict[str, Any] = {
                "benchmark": s.name,
                "benchmark_version": g.benchmark_version,
                "label": g.display,
                "spec_hash": g.spec_hash,
                "seeds": len(g.records),
                "n_queries": max(g.n_queries, default=0),
            }
            for m in s.measures:
                row[m] = g.measure(m).mean
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# small formatting helpers


def _fmt_count(x: float) -> str:
    return f"{int(round(x)):,}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def _fmt_seconds(x: float | None) -> str:
    if not _finite(x):
        return DASH
    return f"{x:,.2f}" if x < 1000 else f"{x:,.0f}"


def _fmt_usd(x: float) -> str:
    if x == 0:
        return "$0"
    return f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _json_value(v: Any) -> str:
    return v if isinstance(v, str) else _json_dump(v)


def _json_dump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)


def _base_name(name: str) -> str:
    """``nevir[:50]`` (a query slice) belongs where ``nevir`` does."""
    return re.sub(r"\[:\d+\]$", "", name)


def _header(m: str, *, sort: str = "num", headline: bool = False, n_note: str = "", n_title: str = "",
            aria: str = "") -> dict[str, Any]:
    higher = measure_higher_is_better(m)
    return {
        "name": m,
        "arrow": "↑" if higher else "↓",
        "direction": "higher is better" if higher else "lower is better",
        "n_note": n_note,
        "n_title": n_title,
        "sort": sort,
        "headline": headline,
        "aria": aria,
    }


def _initial_aria(m: str | None) -> str:
    if m is None:
        return ""
    return "descending" if measure_higher_is_better(m) else "ascending"


# --------------------------------------------------------------------------------------------
# per-query values and significance


class _PerQuery:
    """Per-query values of each stored result, read once, and their means over a group's seeds."""

    def __init__(self, store: Store):
        self.store = store
        self._by_result: dict[int, dict[str, dict[str, float]]] = {}

    def result(self, rec: ResultRecord) -> dict[str, dict[str, float]]:
        rid = int(rec.id or 0)
        if rid not in self._by_result:
            self._by_result[rid] = self.store.per_query(rid) if rec.id is not None else {}
        return self._by_result[rid]

    def group(self, g: ConfigGroup) -> dict[str, dict[str, float]]:
        """``{measure: {qid: mean over the seeds that scored the query}}``."""
        acc: dict[str, dict[str, list[float]]] = {}
        for r in g.records:
            for m, col in self.result(r).items():
                d = acc.setdefault(m, {})
                for q, v in col.items():
                    d.setdefault(q, []).append(float(v))
        return {m: {q: sum(v) / len(v) for q, v in col.items()} for m, col in acc.items()}


@dataclass
class Comparison:
    """One row against one reference on one measure."""

    kind: str  # "dense" | "baseline"
    symbol: str
    reference: str  # the reference row's display label
    p_raw: float
    p_adj: float
    m: int  # comparisons in the Holm family
    better: bool

    @property
    def significant(self) -> bool:
        return self.p_adj == self.p_adj and self.p_adj < ALPHA

    @property
    def title(self) -> str:
        ref = "dense" if self.kind == "dense" else "the best baseline"
        word = "better" if self.better else "worse"
        return (f"{word} than {self.reference} ({ref}): Holm-adjusted p = {fmt_p(self.p_adj)} "
                f"(raw p = {fmt_p(self.p_raw)}, {self.m} comparison{'s' if self.m != 1 else ''})")


def _best_index(idx: Iterable[int], means: Mapping[int, float], higher: bool) -> int | None:
    best: int | None = None
    for i in idx:
        if best is None or _better(means[i], means[best], higher):
            best = i
    return best


def significance(groups: Sequence[ConfigGroup], per_query: Sequence[Mapping[str, Mapping[str, float]]],
                 measures: Sequence[str], *, n_resamples: int = N_RESAMPLES
                 ) -> tuple[dict[tuple[int, str], list[Comparison]], dict[str, dict[str, int]]]:
    """Paired randomisation tests of every row against the best ``dense`` row and against the best
    baseline row of each measure, on per-query values (means over seeds), Holm-corrected across the
    rows compared with the same reference on the same measure. Returns ``{(row, measure):
    [Comparison]}`` and ``{measure: {"dense"/"baseline": reference row}}``."""
    out: dict[tuple[int, str], list[Comparison]] = {}
    refs: dict[str, dict[str, int]] = {}
    plans: list[tuple[str, str, str, int, list[int], dict[int, float], bool]] = []
    needed: dict[tuple[int, int, str], int] = {}  # the two-sided test is symmetric: one per pair
    for m in measures:
        higher = measure_higher_is_better(m)
        means = {i: g.measure(m).mean for i, g in enumerate(groups)}
        cands = [i for i in range(len(groups)) if means[i] is not None and per_query[i].get(m)]
        fin = {i: float(means[i]) for i in cands}  # type: ignore[arg-type]
        chosen = {
            "dense": _best_index((i for i in cands if groups[i].retriever == DENSE), fin, higher),
            "baseline": _best_index((i for i in cands if groups[i].retriever in BASELINES), fin, higher),
        }
        refs[m] = {k: v for k, v in chosen.items() if v is not None}
        for kind, symbol in (("dense", MARK_DENSE), ("baseline", MARK_BASELINE)):
            ref = chosen[kind]
            if ref is None:
                continue
            plans.append((m, kind, symbol, ref, cands, fin, higher))
            for i in cands:
                if i != ref:
                    needed.setdefault((min(i, ref), max(i, ref), m), len(needed))
    pairs = [(per_query[i][m], per_query[r][m]) for (i, r, m) in needed]
    pvalues = paired_randomization_tests(pairs, n_resamples=n_resamples, seed=0)
    for m, kind, symbol, ref, cands, fin, higher in plans:
        raw = {str(i): pvalues[needed[(min(i, ref), max(i, ref), m)]] for i in cands if i != ref}
        adjusted = holm(raw)
        family = sum(1 for p in raw.values() if p == p)
        for key, p in raw.items():
            i = int(key)
            if p != p:
                continue
            out.setdefault((i, m), []).append(Comparison(
                kind, symbol, groups[ref].display, p, adjusted[key], family,
                _better(fin[i], fin[ref], higher)))
    return out, refs


# --------------------------------------------------------------------------------------------
# overview


def _suite_tables(sections: Sequence[BenchmarkSection], suite_table: Mapping[str, Mapping[str, Any]],
                  rslug: Mapping[str, str]) -> list[dict[str, Any]]:
    members: dict[str, list[BenchmarkSection]] = {}
    placed: set[str] = set()
    for suite in SUITE_HEADLINES:
        names = list((suite_table.get(suite) or {}).get("benchmarks", []))
        secs = [s for s in sections if _base_name(s.name) in names]
        secs.sort(key=lambda s: (names.index(_base_name(s.name)), s.name))
        if secs:
            members[suite] = secs
            placed |= {s.name for s in secs}
    rest = [s for s in sections if s.name not in placed]
    headlines = dict(SUITE_HEADLINES)
    if rest:
        members[OTHER_SUITE] = rest
        ms: list[str] = []
        for s in rest:
            for m in SUITE_HEADLINES.get(s.task) or tuple(s.measures[:1]):
                if m not in ms:
                    ms.append(m)
        headlines[OTHER_SUITE] = tuple(ms)
    used: set[str] = set()
    return [_suite_view(suite, headlines[suite], secs, suite_table.get(suite) or {}, rslug, used)
            for suite, secs in members.items()]


def _suite_view(suite: str, measures: Sequence[str], secs: Sequence[BenchmarkSection],
                meta: Mapping[str, Any], rslug: Mapping[str, str], used: set[str]) -> dict[str, Any]:
    # per configuration label, per benchmark: the group of the shown version, else the newest
    table: dict[str, dict[str, ConfigGroup]] = {}
    for s in secs:
        shown = s.info.version if s.info is not None else None
        for g in s.groups:
            cur = table.setdefault(g.display, {}).get(s.name)
            if cur is None or _prefer(g, cur, shown):
                table[g.display][s.name] = g
    first = measures[0] if measures else None
    rows = []
    for display, per_bench in table.items():
        cells = []
        avg: dict[str, float | None] = {}
        for m in measures:
            vals = [g.measure(m).mean for g in per_bench.values()]
            vals = [v for v in vals if v is not None]
            avg[m] = _mean(vals)
            cells.append({
                "measure": m,
                "raw": _raw(avg[m]),
                "value": fmt_num(avg[m], measure_decimals(m)),
                "title": (f"mean over {len(vals)} benchmark{'s' if len(vals) != 1 else ''}" if vals
                          else f"no {m} on these benchmarks"),
            })
        bench_cells = []
        for s in secs:
            g = per_bench.get(s.name)
            v = g.measure(first).mean if (g is not None and first) else None
            bench_cells.append({"raw": _raw(v), "value": fmt_num(v, measure_decimals(first or "")),
                                "slug": s.slug})
        rows.append({"label": display, "slug": rslug[display], "coverage": len(per_bench),
                     "cells": cells, "bench_cells": bench_cells, "avg": avg})
    if first:
        higher = measure_higher_is_better(first)
        rows.sort(key=lambda r: ((1, 0.0) if r["avg"][first] is None
                                 else (0, -r["avg"][first] if higher else r["avg"][first]), r["label"]))
    else:
        rows.sort(key=lambda r: r["label"])
    return {
        "name": suite,
        "id": "overview-" + slugify(suite, used),
        "description": str(meta.get("description", "")) if suite != OTHER_SUITE else
        "Stored benchmarks that belong to none of the suites above.",
        "headers": [_header(m, headline=True, aria=_initial_aria(first) if m == first else "") for m in measures],
        "first": first or "",
        "benchmarks": [{"name": s.name, "slug": s.slug, "task": s.task} for s in secs],
        "rows": rows,
    }


def _prefer(g: ConfigGroup, cur: ConfigGroup, shown: str | None) -> bool:
    if (g.benchmark_version == shown) != (cur.benchmark_version == shown):
        return g.benchmark_version == shown
    return (g.newest.created_at, g.newest.id or 0) > (cur.newest.created_at, cur.newest.id or 0)


# --------------------------------------------------------------------------------------------
# benchmark pages


def _all_measures(s: BenchmarkSection) -> list[str]:
    present = {m for g in s.groups for r in g.records for m in r.measures}
    rest = sorted(present - set(s.measures), key=_measure_sort_key)
    return list(s.measures) + rest


def _bench_meta(s: BenchmarkSection) -> dict[str, Any]:
    info = s.info
    stats = []
    if info is not None:
        st = info.stats or {}
        for key, name in (("queries", "queries"), ("judged_queries", "judged queries"),
                          ("documents", "documents"), ("pairs", "pairs")):
            v = st.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (key != "pairs" or v > 0):
                stats.append({"name": name, "value": _fmt_count(float(v))})
    return {
        "name": s.name,
        "slug": s.slug,
        "task": s.task,
        "fallback": s.fallback,
        "versions": s.versions,
        "version_shown": info.version if info is not None else "",
        "unregistered_versions": [v for v in s.versions if v not in {b.version for b in s.infos}],
        "multi_version": len(s.versions) > 1,
        "description": info.description if info is not None else "",
        "source": info.source if info is not None else "",
        "license": info.license if info is not None else "",
        "stats": stats,
    }


def _results_table(s: BenchmarkSection, measures: Sequence[str],
                   sig: Mapping[tuple[int, str], list[Comparison]], rslug: Mapping[str, str],
                   drill: Mapping[int, str]) -> dict[str, Any]:
    n_queries_all = {n for g in s.groups for n in g.n_queries}
    first = measures[0] if measures else None
    headers = []
    for m in measures:
        n_note = n_title = ""
        if _measure_base(m) in COUNTED_BASES:
            ns = {n for g in s.groups for n in g.measure(m).n}
            if ns and ns != n_queries_all:
                n_note = "n=" + "/".join(str(n) for n in sorted(ns))
                n_title = f"{m} is averaged over {n_note[2:]} of the judged queries"
        headers.append(_header(m, headline=m in s.measures, n_note=n_note, n_title=n_title,
                               aria=_initial_aria(first) if m == first else ""))

    aggs = [[g.measure(m) for m in measures] for g in s.groups]
    best: list[Decimal | None] = []
    for j, m in enumerate(measures):
        dec = measure_decimals(m)
        vals = [_round(row[j].mean, dec) for row in aggs if row[j].mean is not None]
        best.append((max(vals) if measure_higher_is_better(m) else min(vals)) if vals else None)

    rows = []
    for i, (g, row_aggs) in enumerate(zip(s.groups, aggs)):
        cells = []
        for j, (m, agg) in enumerate(zip(measures, row_aggs)):
            dec = measure_decimals(m)
            extra, title = "", []
            if agg.mean is not None:
                if agg.std is not None:
                    extra = f"± {fmt_num(agg.std, dec)}"
                    title.append("per seed: " + ", ".join(fmt_num(v, dec) for v in agg.values))
                elif agg.ci is not None:
                    extra = f"[{fmt_num(agg.ci[0], 2)}, {fmt_num(agg.ci[1], 2)}]"
                    title.append("95% bootstrap CI")
                if _measure_base(m) in COUNTED_BASES and agg.n and set(agg.n) != set(g.n_queries):
                    title.append("n=" + "/".join(map(str, agg.n)))
            comps = sig.get((i, m), [])
            marks = [{"symbol": c.symbol, "kind": c.kind, "title": c.title, "p": repr(c.p_adj),
                      "better": c.better} for c in comps if c.significant]
            title += [f"vs {c.reference} ({'dense' if c.kind == 'dense' else 'best baseline'}): "
                      f"Holm-adjusted p = {fmt_p(c.p_adj)}" for c in comps]
            cells.append({
                "measure": m,
                "raw": _raw(agg.mean),
                "value": fmt_num(agg.mean, dec),
                "extra": extra,
                "title": "; ".join(title),
                "best": agg.mean is not None and best[j] is not None and _round(agg.mean, dec) == best[j],
                "marks": marks,
            })
        nq = g.n_queries
        rows.append({
            "label": g.display,
            "slug": rslug[g.display],
            "retriever": g.retriever,
            "baseline": g.retriever in BASELINES,
            "spec_hash": g.spec_hash,
            "title": (f"{g.retriever} · spec {g.spec_hash} · benchmark version {g.benchmark_version} · harness "
                      + ", ".join(sorted({r.harness_version for r in g.records}))
                      + " · k=" + ", ".join(str(k) for k in sorted({r.k for r in g.records}))),
            "version": g.benchmark_version[:8],
            "cells": cells,
            "seeds": str(len(g.records)),
            "seed_links": [{"seed": r.seed, "href": drill[int(r.id or 0)]} for r in g.records
                           if int(r.id or 0) in drill],
            "seeds_title": "seeds " + ", ".join(str(x) for x in g.seeds),
            "n_queries_raw": str(max(nq, default=0)),
            "queries": "–".join(f"{n:,}" for n in ([nq[0], nq[-1]] if len(nq) > 1 else nq)),
            "missing": f"({g.n_missing:,} missing)" if g.n_missing > 0 else "",
        })
    return {"headers": headers, "rows": rows}


def _breakdowns(s: BenchmarkSection, pq: Sequence[Mapping[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    info = s.info
    groups_by_key = (info.stats or {}).get("query_groups") if info is not None else None
    if not isinstance(groups_by_key, dict) or not groups_by_key:
        return []
    out = []
    used: set[str] = set()
    for key, mapping in groups_by_key.items():
        if not isinstance(mapping, dict) or not mapping:
            continue
        for m in s.measures:
            per_row = [group_by({m: pq[i].get(m, {})}, mapping, [m])[m] for i in range(len(s.groups))]
            names = sorted({name for row in per_row for name in row})
            if not names:
                continue
            counts = {name: max((row[name].n for row in per_row if name in row), default=0) for name in names}
            rows = []
            for g, row in zip(s.groups, per_row):
                rows.append({"label": g.display, "cells": [
                    {"raw": _raw(row[n].mean) if n in row else "",
                     "value": fmt_num(row[n].mean, measure_decimals(m)) if n in row else DASH,
                     "title": f"{row[n].n} queries" if n in row else ""} for n in names]})
            out.append({
                "key": str(key),
                "measure": m,
                "id": "breakdown-" + slugify(f"{key}-{m}", used),
                "columns": [{"name": n, "n": counts[n]} for n in names],
                "higher": measure_higher_is_better(m),
                "rows": rows,
            })
    return out


def _fvr_measures(measures: Iterable[str]) -> list[tuple[str, int]]:
    out = []
    for m in measures:
        try:
            pm = parse_measure(m)
        except ValueError:
            continue
        if pm.base == "FVR" and pm.k:
            out.append((m, pm.k))
    return out


def _survival(s: BenchmarkSection, all_measures: Sequence[str], store_pq: _PerQuery) -> list[dict[str, Any]]:
    """One chart per FVR@k measure: S(r) per configuration, the mean over its seeds of each seed's
    curve over the queries that have a first-violating-rank value."""
    out = []
    for m, k in _fvr_measures(all_measures):
        series = []
        rows = []
        for g in s.groups:
            curves = []
            nq = []
            for r in g.records:
                ranks = list(store_pq.result(r).get(m, {}).values())
                if ranks:
                    curves.append(plots.survival_curve(ranks, k))
                    nq.append(len(ranks))
            if not curves:
                continue
            curve = [sum(c[i] for c in curves) / len(curves) for i in range(k + 1)]
            series.append((g.display, list(range(k + 1)), curve))
            rows.append({"label": g.display, "n": "/".join(str(n) for n in sorted(set(nq))),
                         "cells": [{"raw": repr(float(v)), "value": fmt_num(v, 3)} for v in curve]})
        if not series:
            continue
        svg = plots.line_chart_svg(series, title=f"Violation survival ({m})", x_label="rank r",
                                   y_label="share of queries with no violation in the top r")
        out.append({"measure": m, "k": k, "ranks": list(range(k + 1)), "svg": svg, "rows": rows})
    return out


def _separation(s: BenchmarkSection) -> list[dict[str, Any]]:
    out = []
    for g in s.groups:
        rec = next((r for r in g.records if _sep_of(r)), None)
        if rec is None:
            continue
        sep = _sep_of(rec)
        hist = []
        stats = []
        for role, word in (("compat", "trained" if "base" in sep else "compatibility"), ("base", "base")):
            d = sep.get(role)
            if not isinstance(d, dict) or not isinstance(d.get("margins"), dict) or not d["margins"]:
                continue
            model = str(d.get("model", role))
            margins = [float(v) for v in d["margins"].values() if _finite(v)]
            name = f"{model} ({word})"
            # an artifact directory is named by its last component in the legend (the full
            # path stays in the table below)
            short = model.rstrip("/").rsplit("/", 1)[-1] if model.startswith(("/", "~", ".")) else model
            hist.append((f"{word}: {short}", margins))
            stats.append({"name": name, "queries": str(d.get("queries", len(margins))),
                          "mean": fmt_num(d.get("margin_mean"), 3), "median": fmt_num(d.get("margin_median"), 3),
                          "positive": fmt_num(d.get("positive_share"), 3)})
        if not hist:
            continue
        svg = plots.histogram_svg(hist, title=f"Score separation: {g.display}",
                                  x_label="mean s(q, satisfying) − mean s(q, violating)")
        out.append({"label": g.display, "seed": rec.seed, "seeds": len(g.records), "svg": svg, "stats": stats})
    return out


def _sep_of(rec: ResultRecord) -> dict[str, Any]:
    analysis = rec.extra.get("analysis") if isinstance(rec.extra, dict) else None
    sep = analysis.get("score_separation") if isinstance(analysis, dict) else None
    return sep if isinstance(sep, dict) and sep else {}


def _axis_value(v: Any) -> float | str:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _same(a: Any, b: Any) -> bool:
    return a == b or json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _sweep_measures(points: Sequence[Mapping[str, Any]]) -> list[str]:
    present = {m for p in points for m, v in (p.get("measures") or {}).items() if _finite(v)}
    chosen = [m for m in SWEEP_MEASURES if m in present]
    return chosen or sorted(present, key=_measure_sort_key)[:2]


def _sweep_views(sweeps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A heatmap per (sweep, pair of swept parameters, measure); a line chart for a one-axis
    sweep. With more than two axes, each cell is the mean over the other axes' values."""
    out = []
    for d in sweeps:
        axes = d.get("axes") or {}
        points = d.get("points") or []
        if not isinstance(axes, dict) or not axes or not points:
            continue
        names = list(axes)
        measures = _sweep_measures(points)
        fixed = d.get("fixed") or {}
        caption = (f"seed {d.get('seed', 0)}, k={d.get('k', '')}, benchmark version "
                   f"{str(d.get('benchmark_version', ''))[:8]}"
                   + ("; fixed: " + ", ".join(f"{k}={_json_value(v)}" for k, v in fixed.items()) if fixed else ""))
        charts = []
        if len(names) == 1:
            a = names[0]
            xs = [_axis_value(v) for v in axes[a]]
            if all(isinstance(x, (int, float)) for x in xs):
                for m in measures:
                    ys = [_mean([float(p["measures"][m]) for p in points if _same(p["params"].get(a), v)
                                 and _finite(p["measures"].get(m))]) for v in axes[a]]
                    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
                    if pts:
                        charts.append({"measure": m, "axes": a, "svg": plots.line_chart_svg(
                            [(m, [p[0] for p in pts], [p[1] for p in pts])],
                            title=f"{d.get('retriever', '')}: {m} over {a}", x_label=a, y_label=m,
                            y_range=None), "note": ""})
        for a, b in itertools.combinations(names, 2):
            for m in measures:
                z: list[list[float | None]] = []
                for yv in axes[b]:
                    row: list[float | None] = []
                    for xv in axes[a]:
                        vals = [float(p["measures"][m]) for p in points
                                if _same(p["params"].get(a), xv) and _same(p["params"].get(b), yv)
                                and _finite((p.get("measures") or {}).get(m))]
                        row.append(_mean(vals))
                    z.append(row)
                if all(v is None for row in z for v in row):
                    continue
                svg = plots.heatmap_svg([_axis_value(v) for v in axes[a]], [_axis_value(v) for v in axes[b]], z,
                                        title=f"{d.get('retriever', '')}: {m} over {a} × {b}", x_label=a, y_label=b,
                                        higher_is_better=measure_higher_is_better(m),
                                        value_format="{:.2f}" if _measure_base(m) == "FVR" else "{:.3f}")
                charts.append({"measure": m, "axes": f"{a} × {b}", "svg": svg,
                               "note": "mean over the other swept parameters" if len(names) > 2 else ""})
        if charts:
            out.append({"retriever": str(d.get("retriever", "")), "caption": caption, "charts": charts})
    return out


def _legend_refs(s: BenchmarkSection, refs: Mapping[str, Mapping[str, int]],
                 measures: Sequence[str]) -> list[dict[str, str]]:
    out = []
    for m in measures:
        r = refs.get(m, {})
        if r:
            out.append({"measure": m,
                        "dense": s.groups[r["dense"]].display if "dense" in r else DASH,
                        "baseline": s.groups[r["baseline"]].display if "baseline" in r else DASH})
    return out


# --------------------------------------------------------------------------------------------
# efficiency


def _efficiency_numbers(g: ConfigGroup) -> dict[str, Any]:
    offline, online, items, calls, hits, pt, ct, usd = [], [], [], [], [], [], [], []
    qps = []
    unknown = False
    for r in g.records:
        t = phase_totals(r.phases)
        if t["offline_s"] is not None:
            offline.append(t["offline_s"])
        if t["online_s"] is not None:
            online.append(t["online_s"])
            n = t["online_items"] or r.n_queries
            items.append(n)
            if t["online_s"] > 0:
                qps.append(n / t["online_s"])
        c = call_totals(r.llm_calls)
        calls.append(c["calls"])
        hits.append(c["cache_hits"])
        pt.append(c["prompt_tokens"])
        ct.append(c["completion_tokens"])
        if c["usd"] is None:
            unknown = True
        else:
            usd.append(c["usd"])
    return {
        "offline": _mean(offline), "online": _mean(online), "items": _mean(items), "qps": _mean(qps),
        "calls": _mean(calls) or 0.0, "hits": _mean(hits) or 0.0, "prompt": _mean(pt) or 0.0,
        "completion": _mean(ct) or 0.0, "usd": None if unknown else (_mean(usd) or 0.0),
    }


def _efficiency_cells(n: Mapping[str, Any]) -> dict[str, Any]:
    calls = n["calls"]
    return {
        "offline": {"raw": _raw(n["offline"]), "value": _fmt_seconds(n["offline"])},
        "online": {"raw": _raw(n["online"]), "value": _fmt_seconds(n["online"])},
        "qps": {"raw": _raw(n["qps"]), "value": f"{n['qps']:,.1f}" if n["qps"] is not None else DASH},
        "calls": {"raw": _raw(calls), "value": _fmt_count(calls) if calls else DASH},
        "hits": {"raw": _raw(n["hits"]), "value": _fmt_count(n["hits"]) if calls else DASH},
        "prompt": {"raw": _raw(n["prompt"]), "value": _fmt_count(n["prompt"]) if calls else DASH},
        "completion": {"raw": _raw(n["completion"]), "value": _fmt_count(n["completion"]) if calls else DASH},
        "usd": {"raw": _raw(n["usd"]) if n["usd"] is not None else "",
                "value": "unknown" if n["usd"] is None else _fmt_usd(n["usd"])},
    }


def _efficiency(sections: Sequence[BenchmarkSection], rslug: Mapping[str, str]) -> dict[str, Any]:
    rows = []
    totals: dict[str, dict[str, Any]] = {}
    for s in sections:
        for g in s.groups:
            n = _efficiency_numbers(g)
            rows.append({"label": g.display, "slug": rslug[g.display], "benchmark": s.name, "bench_slug": s.slug,
                         "seeds": str(len(g.records)), **_efficiency_cells(n)})
            t = totals.setdefault(g.display, {"benchmarks": 0, "offline": [], "online": [], "items": [],
                                              "calls": 0.0, "hits": 0.0, "prompt": 0.0, "completion": 0.0,
                                              "usd": 0.0})
            t["benchmarks"] += 1
            for k in ("offline", "online"):
                if n[k] is not None:
                    t[k].append(n[k])
            if n["online"] is not None and n["items"] is not None:
                t["items"].append((n["items"], n["online"]))
            for k in ("calls", "hits", "prompt", "completion"):
                t[k] += n[k]
            t["usd"] = None if (t["usd"] is None or n["usd"] is None) else t["usd"] + n["usd"]
    total_rows = []
    for display, t in totals.items():
        online_s = sum(s for _, s in t["items"])
        num = {
            "offline": sum(t["offline"]) if t["offline"] else None,
            "online": sum(t["online"]) if t["online"] else None,
            "qps": (sum(i for i, _ in t["items"]) / online_s) if online_s > 0 else None,
            "calls": t["calls"], "hits": t["hits"], "prompt": t["prompt"], "completion": t["completion"],
            "usd": t["usd"],
        }
        total_rows.append({"label": display, "slug": rslug[display], "benchmarks": str(t["benchmarks"]),
                           **_efficiency_cells(num)})
    total_rows.sort(key=lambda r: r["label"])
    return {"rows": rows, "totals": total_rows}


# --------------------------------------------------------------------------------------------
# retriever pages and drill-downs


def _distinct(records: Sequence[ResultRecord], attr: str) -> list[dict[str, str]]:
    values: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: (r.created_at, r.id or 0), reverse=True):
        d = getattr(r, attr) or {}
        if not isinstance(d, dict):
            continue
        for k, v in d.items():
            s = _json_value(v)
            col = values.setdefault(str(k), [])
            if s not in col:
                col.append(s)
    return [{"key": k, "vals": v} for k, v in values.items()]


def judge_mark(docid: str, grades: Mapping[str, int], violating: Iterable[str], graded: bool) -> str:
    """``violating`` (in the query's violating set), ``satisfying`` (grade ≥ 1, or 2 on a graded
    benchmark), ``topical`` (grade 1 on a graded benchmark), ``non-relevant`` (grade 0) or
    ``unjudged``."""
    if docid in violating:
        return "violating"
    g = grades.get(docid)
    if g is None:
        return "unjudged"
    if g >= (2 if graded else 1):
        return "satisfying"
    return "topical" if g >= 1 else "non-relevant"


MARK_TEXT = {"satisfying": "✓ satisfying", "violating": "✗ violating", "topical": "~ topical",
             "non-relevant": "○ non-relevant", "unjudged": "· unjudged", "unknown": "? not stored"}


class _Content:
    """Benchmark content from the store, read once per version."""

    def __init__(self, store: Store):
        self.store = store
        self._queries: dict[str, list[dict[str, Any]]] = {}
        self._qrels: dict[str, tuple[dict[str, dict[str, int]], dict[str, set[str]]]] = {}

    def queries(self, version: str) -> list[dict[str, Any]]:
        if version not in self._queries:
            self._queries[version] = self.store.queries_of(version)
        return self._queries[version]

    def qrels(self, version: str) -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
        if version not in self._qrels:
            self._qrels[version] = self.store.qrels_of(version)
        return self._qrels[version]


def _drilldown(store: Store, content: _Content, rec: ResultRecord, s: BenchmarkSection,
               measures: Sequence[str], pq: _PerQuery) -> dict[str, Any]:
    version = rec.benchmark_version
    queries = content.queries(version)
    rel, viol = content.qrels(version)
    has_text = bool(queries)
    has_qrels = bool(rel) or bool(viol)
    graded = any(g >= 2 for docs in rel.values() for g in docs.values())
    rankings = store.rankings(int(rec.id or 0))
    per_query = pq.result(rec)
    if has_text:
        qids = [q["qid"] for q in queries]
        texts = {q["qid"]: q["text"] for q in queries}
        known = set(qids)
        qids += [q for q in rankings if q not in known]
    else:
        texts = {}
        qids = list(rankings)
        seen = set(qids)
        for m in measures:
            for q in per_query.get(m, {}):
                if q not in seen and _measure_base(m) != "PairAcc":
                    qids.append(q)
                    seen.add(q)
    total = len(qids)
    shown = qids[:DRILLDOWN_QUERIES]
    doc_ids = {d for q in shown for d, _ in rankings.get(q, [])[:DRILLDOWN_DEPTH]}
    docs = store.documents_of(version, doc_ids) if doc_ids else {}
    out_queries = []
    counts = {k: 0 for k in MARK_TEXT}
    for q in shown:
        grades = rel.get(q, {})
        vq = viol.get(q, set())
        top = []
        for rank, (d, score) in enumerate(rankings.get(q, [])[:DRILLDOWN_DEPTH], 1):
            mark = judge_mark(d, grades, vq, graded) if has_qrels else "unknown"
            counts[mark] += 1
            title, snippet = docs.get(d, ("", ""))
            top.append({"rank": rank, "doc": d, "title": title, "snippet": snippet, "stored": d in docs,
                        "score": f"{float(score):.4f}" if _finite(score) else DASH, "mark": mark,
                        "mark_text": MARK_TEXT[mark]})
        qm = [{"name": m, "value": fmt_num(per_query[m][q], measure_decimals(m))}
              for m in measures if q in per_query.get(m, {})]
        out_queries.append({"qid": q, "anchor": "q-" + slugify(q), "text": texts.get(q, ""), "measures": qm,
                            "top": top, "in_run": q in rankings,
                            "n_judged": len(grades), "n_violating": len(vq)})
    used: set[str] = set()
    for q in out_queries:  # unique anchors
        q["anchor"] = slugify(q["anchor"], used)
    return {
        "benchmark": s.name, "bench_slug": s.slug, "version": version, "seed": rec.seed, "k": rec.k,
        "has_text": has_text, "has_qrels": has_qrels, "graded": graded,
        "total": total, "n_shown": len(shown), "capped": total > len(shown), "cap": DRILLDOWN_QUERIES,
        "depth": DRILLDOWN_DEPTH, "queries": out_queries,
        "counts": [{"mark": k, "text": MARK_TEXT[k], "n": v} for k, v in counts.items() if v],
    }


# --------------------------------------------------------------------------------------------
# rendering


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def sort_script() -> str:
    """The text of the one inline script every page carries (column sorting)."""
    return (Path(__file__).parent / "templates" / "_sort.js").read_text(encoding="utf-8")


def _write(path: Path, html: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)


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
        if not isinstance(rel, str) or rel in written or not rel.endswith(".html"):
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
                generated_at: _dt.datetime | None = None, n_resamples: int = N_RESAMPLES) -> Path:
    """Write the site (see the module docstring for its pages) and return the path of ``index.html``."""
    from harness.registry import suites

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = store.results()
    sections = collect(store, records)
    now = (generated_at or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    env = _environment()
    common = {
        "title": title,
        "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
        "generated_iso": now.isoformat(timespec="seconds"),
        "n_results": len(records),
        "harness_versions": sorted({r.harness_version for r in records}),
    }

    written: set[str] = set()

    def page(template: str, path: Path, root: str, **ctx: Any) -> None:
        _write(path, env.get_template(template).render(**common, root=root, **ctx))
        written.add(path.relative_to(out_dir).as_posix())

    # slugs: benchmarks (collect), retrievers, drill-down pages
    rused: set[str] = set()
    displays = sorted({g.display for s in sections for g in s.groups})
    rslug = {d: slugify(d, rused) for d in displays}
    drill: dict[int, str] = {}  # result id → path relative to the site root
    drill_used: dict[str, set[str]] = {}
    for s in sections:
        for g in s.groups:
            used = drill_used.setdefault(g.display, set())
            for r in g.records:
                name = slugify(f"{s.slug}-seed{r.seed}", used)
                drill[int(r.id or 0)] = f"retriever/{rslug[g.display]}/{name}.html"

    # sweeps: on benchmarks with results, and on benchmarks (often train/dev splits) without
    all_sweeps = store.sweeps()
    bused = {s.slug for s in sections}
    sweep_only: dict[str, str] = {}
    for d in all_sweeps:
        b = str(d.get("benchmark", ""))
        if b and b not in {s.name for s in sections} and b not in sweep_only:
            sweep_only[b] = slugify(b, bused)

    pq = _PerQuery(store)
    content = _Content(store)
    bench_links = []
    for s in sections:
        measures = _all_measures(s)
        per_group = [pq.group(g) for g in s.groups]
        sig, refs = significance(s.groups, per_group, measures, n_resamples=n_resamples)
        drill_rel = {rid: "../" + p for rid, p in drill.items()}
        view = {
            **_bench_meta(s),
            "table": _results_table(s, measures, sig, rslug, drill_rel),
            "refs": _legend_refs(s, refs, measures),
            "breakdowns": _breakdowns(s, per_group),
            "survival": _survival(s, measures, pq),
            "separation": _separation(s),
            "sweeps": _sweep_views([d for d in all_sweeps if d.get("benchmark") == s.name]),
            "has_results": True,
        }
        page("bench.html", out_dir / "bench" / f"{s.slug}.html", "../", sec=view, baselines=BASELINES,
             alpha=ALPHA, n_resamples=n_resamples, mark_dense=MARK_DENSE, mark_baseline=MARK_BASELINE)
        bench_links.append({"name": s.name, "slug": s.slug, "task": s.task, "rows": len(s.groups),
                            "results": sum(len(g.records) for g in s.groups), "sweeps": len(view["sweeps"])})
    sweep_links = []
    for b, slug in sweep_only.items():
        sweeps = [d for d in all_sweeps if d.get("benchmark") == b]
        task = next((str(d.get("task")) for d in sweeps if d.get("task")), "unknown")
        view = {"name": b, "slug": slug, "task": task, "fallback": False, "versions": [], "version_shown": "",
                "unregistered_versions": [], "multi_version": False, "description": "", "source": "",
                "license": "", "stats": [], "table": {"headers": [], "rows": []}, "refs": [], "breakdowns": [],
                "survival": [], "separation": [], "sweeps": _sweep_views(sweeps), "has_results": False}
        page("bench.html", out_dir / "bench" / f"{slug}.html", "../", sec=view, baselines=BASELINES,
             alpha=ALPHA, n_resamples=n_resamples, mark_dense=MARK_DENSE, mark_baseline=MARK_BASELINE)
        sweep_links.append({"name": b, "slug": slug, "task": task, "sweeps": len(sweeps)})

    page("efficiency.html", out_dir / "efficiency.html", "", eff=_efficiency(sections, rslug))

    retriever_links = []
    for display in displays:
        groups = [(s, g) for s in sections for g in s.groups if g.display == display]
        recs = [r for _, g in groups for r in g.records]
        newest = max(recs, key=lambda r: (r.created_at, r.id or 0))
        params = newest.spec.get("params") if isinstance(newest.spec, dict) else None
        results = []
        facts = []
        for s, g in groups:
            for r in g.records:
                href = drill[int(r.id or 0)]
                results.append({
                    "benchmark": s.name, "bench_slug": s.slug, "version": r.benchmark_version[:8], "seed": r.seed,
                    "k": r.k, "created": r.created_at, "n_queries": r.n_queries,
                    "measures": [{"name": m, "value": fmt_num(r.measures[m].mean, measure_decimals(m))}
                                 for m in s.measures if m in r.measures],
                    "href": href.split("/", 1)[1],
                })
                rf = r.extra.get("retriever") if isinstance(r.extra, dict) else None
                if isinstance(rf, dict) and rf:
                    facts.append({"benchmark": s.name, "seed": r.seed,
                                  "items": [{"key": str(k), "value": _json_dump(v)} for k, v in rf.items()]})
                measures = _all_measures(s)
                dd = _drilldown(store, content, r, s, measures, pq)
                page("drilldown.html", out_dir / href, "../../", label=display, slug=rslug[display], dd=dd)
        view = {
            "label": display, "slug": rslug[display], "retriever": newest.retriever,
            "spec_hash": newest.spec_hash, "raw_label": newest.label,
            "params": [{"key": str(k), "value": _json_dump(v)} for k, v in sorted(params.items())]
            if isinstance(params, dict) else [],
            "spec_json": json.dumps(newest.spec, sort_keys=True, default=str),
            "provenance": _distinct(recs, "provenance"),
            "environment": _distinct(recs, "environment"),
            "varies": any(len(p["vals"]) > 1 for attr in ("provenance", "environment")
                          for p in _distinct(recs, attr)),
            "results": results, "facts": facts,
        }
        page("retriever.html", out_dir / "retriever" / f"{rslug[display]}.html", "../", r=view)
        retriever_links.append({"label": display, "slug": rslug[display], "retriever": newest.retriever,
                                "benchmarks": len(groups), "results": len(recs)})

    try:
        suite_table = suites()
    except LookupError:  # a broken suite entry point: every benchmark goes to "other"
        suite_table = {}
    overview = _suite_tables(sections, suite_table, rslug)
    page("index.html", out_dir / "index.html", "", suites=overview, benchmarks=bench_links,
         sweep_benchmarks=sweep_links, retrievers=retriever_links)
    _prune(out_dir, written)
    _write(out_dir / MANIFEST, json.dumps({"generated": common["generated_iso"], "pages": sorted(written)}, indent=1))
    return out_dir / "index.html"
