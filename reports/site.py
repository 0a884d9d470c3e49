"""Render the static leaderboard site from the results store (DESIGN.md §9).

The site is built from the store alone — no benchmark or retriever is loaded — so it can be
rendered anywhere a ``results.sqlite`` can be read. Every string that comes from the store
(labels, descriptions, spec values) is user-controlled and goes through Jinja's autoescaping;
no template marks store data ``|safe``. Anchors derived from names are slugified.

One grouping (:func:`collect`) feeds both the HTML tables and :func:`summary_rows`, which the CLI
prints after a run:

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
import math
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from harness.ledger import call_totals, phase_totals
from harness.metrics import parse_measure
from harness.store import BenchmarkInfo, ResultRecord, Store

TASK_ORDER = ("constraint", "completeness", "topical")
# Measures averaged over a subset of the judged queries: their count is shown when it differs.
COUNTED_BASES = ("V", "FVR", "Comp")
# Column order when a benchmark has no stored default measures.
_BASE_ORDER = ("nDCG", "MAP", "R", "P", "RR", "Comp", "V", "FVR", "PairAcc")
DASH = "–"


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


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _round(x: float, decimals: int) -> Decimal:
    """Round half up on the shortest decimal repr (0.6725 → 0.673, as a reader expects)."""
    d = Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return abs(d) if d == 0 else d


def fmt_num(x: float | None, decimals: int = 3) -> str:
    if not _finite(x):
        return DASH
    return f"{_round(x, decimals):.{decimals}f}"


def _measure_sort_key(name: str) -> tuple[int, int, str]:
    try:
        m = parse_measure(name)
        return (_BASE_ORDER.index(m.base), m.k or 0, name)
    except ValueError:
        return (len(_BASE_ORDER), 0, name)


def slugify(text: str, used: set[str] | None = None, prefix: str = "") -> str:
    """``[a-z0-9-]`` only; unique within ``used`` (which it updates)."""
    base = prefix + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")
    slug, i = base, 2
    while used is not None and slug in used:
        slug, i = f"{base}-{i}", i + 1
    if used is not None:
        used.add(slug)
    return slug


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
    def seeds(self) -> list[int]:
        return [r.seed for r in self.records]

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
        s.slug = slugify(s.name, used, prefix="bench-")
    return sections


def summary_rows(store: Store) -> list[dict[str, Any]]:
    """The per-benchmark leaderboard rows as plain dicts, in page order.

    Keys: ``benchmark``, ``benchmark_version``, ``label`` (disambiguated as on the page),
    ``spec_hash``, ``seeds`` (how many), ``n_queries``, then one key per shown measure with the
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
# view models (every string formatted here; the templates only place and escape them)


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


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _table_view(s: BenchmarkSection) -> dict[str, Any]:
    n_queries_all = {n for g in s.groups for n in g.n_queries}
    headers = []
    for m in s.measures:
        higher = measure_higher_is_better(m)
        n_note = n_title = ""
        if _measure_base(m) in COUNTED_BASES:
            ns = {n for g in s.groups for n in g.measure(m).n}
            if ns and ns != n_queries_all:
                n_note = "n=" + "/".join(str(n) for n in sorted(ns))
                n_title = f"{m} is averaged over {n_note[2:]} of the judged queries"
        headers.append({
            "name": m,
            "arrow": "↑" if higher else "↓",
            "direction": "higher is better" if higher else "lower is better",
            "n_note": n_note,
            "n_title": n_title,
        })

    aggs = [[g.measure(m) for m in s.measures] for g in s.groups]
    best: list[Decimal | None] = []
    for j, m in enumerate(s.measures):
        dec = measure_decimals(m)
        vals = [_round(row[j].mean, dec) for row in aggs if row[j].mean is not None]
        best.append((max(vals) if measure_higher_is_better(m) else min(vals)) if vals else None)

    rows = []
    for g, row_aggs in zip(s.groups, aggs):
        cells = []
        for j, (m, agg) in enumerate(zip(s.measures, row_aggs)):
            dec = measure_decimals(m)
            extra, title = "", ""
            if agg.mean is not None:
                if agg.std is not None:
                    extra = f"± {fmt_num(agg.std, dec)}"
                    title = "per seed: " + ", ".join(fmt_num(v, dec) for v in agg.values)
                elif agg.ci is not None:
                    extra = f"[{fmt_num(agg.ci[0], 2)}, {fmt_num(agg.ci[1], 2)}]"
                    title = "95% bootstrap CI"
                if _measure_base(m) in COUNTED_BASES and agg.n and set(agg.n) != set(g.n_queries):
                    title = (title + "; " if title else "") + "n=" + "/".join(map(str, agg.n))
            cells.append({
                "measure": m,
                "value": fmt_num(agg.mean, dec),
                "extra": extra,
                "title": title,
                "best": agg.mean is not None and best[j] is not None and _round(agg.mean, dec) == best[j],
            })
        nq = g.n_queries
        rows.append({
            "label": g.display,
            "spec_hash": g.spec_hash,
            "title": (f"spec {g.spec_hash} · benchmark version {g.benchmark_version} · harness "
                      + ", ".join(sorted({r.harness_version for r in g.records}))
                      + " · k=" + ", ".join(str(k) for k in sorted({r.k for r in g.records}))),
            "version": g.benchmark_version[:8],
            "cells": cells,
            "seeds": str(len(g.records)),
            "seeds_title": "seeds " + ", ".join(str(x) for x in g.seeds),
            "queries": "–".join(f"{n:,}" for n in ([nq[0], nq[-1]] if len(nq) > 1 else nq)),
            "missing": f"({g.n_missing:,} missing)" if g.n_missing > 0 else "",
        })

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
        "headers": headers,
        "rows": rows,
    }


def _efficiency_row(s: BenchmarkSection, g: ConfigGroup) -> dict[str, Any]:
    offline, online, qps, cpu, calls, cached, tokens, usd = [], [], [], [], [], [], [], []
    usd_unknown = False
    for r in g.records:
        t = phase_totals(r.phases)
        if t["offline_s"] is not None:
            offline.append(t["offline_s"])
        if t["online_s"] is not None:
            online.append(t["online_s"])
            if t["online_s"] > 0:
                qps.append((t["online_items"] or r.n_queries) / t["online_s"])
        if t["cpu_s"] is not None:
            cpu.append(t["cpu_s"])
        c = call_totals(r.llm_calls)
        calls.append(c["calls"])
        cached.append(c["cache_hits"])
        tokens.append(c["prompt_tokens"] + c["completion_tokens"])
        if c["usd"] is None:
            usd_unknown = True
        else:
            usd.append(c["usd"])
    n_calls = _mean(calls) or 0.0
    n_cached = _mean(cached) or 0.0
    q = _mean(qps)
    if n_calls == 0:
        calls_s, tokens_s, usd_s = DASH, DASH, "$0"
    else:
        calls_s = _fmt_count(n_calls) + (f" ({_fmt_count(n_cached)} cached)" if n_cached else "")
        tokens_s = _fmt_count(_mean(tokens) or 0.0)
        usd_s = "unknown" if usd_unknown else _fmt_usd(_mean(usd) or 0.0)
    return {
        "benchmark": s.name,
        "slug": s.slug,
        "label": g.display,
        "seeds": str(len(g.records)),
        "offline": _fmt_seconds(_mean(offline)),
        "online": _fmt_seconds(_mean(online)),
        "qps": f"{q:,.1f}" if q is not None else DASH,
        "cpu": _fmt_seconds(_mean(cpu)),
        "calls": calls_s,
        "tokens": tokens_s,
        "usd": usd_s,
    }


def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_site(store: Store, out_dir: Path, *, title: str = "beyondsim leaderboard",
                generated_at: _dt.datetime | None = None) -> Path:
    """Write ``index.html`` (self-contained: inline CSS, no scripts or network) and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = store.results()
    sections = collect(store, records)
    now = (generated_at or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    context = {
        "title": title,
        "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
        "generated_iso": now.isoformat(timespec="seconds"),
        "n_results": len(records),
        "harness_versions": sorted({r.harness_version for r in records}),
        "sections": [_table_view(s) for s in sections],
        "efficiency": [_efficiency_row(s, g) for s in sections for g in s.groups],
    }
    html = _environment().get_template("index.html").render(**context)
    path = out_dir / "index.html"
    path.write_text(html, encoding="utf-8")
    return path
