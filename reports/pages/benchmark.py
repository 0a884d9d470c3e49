"""``bench/<slug>.html``, one per benchmark: every stored measure (mean with the 95% bootstrap CI
for one seed, ± the std over seeds for several), significance marks against the best comparator
row (†) and the best baseline row (‡), per-category breakdowns, violation-survival curves, score
separation and sensitivity heatmaps. Benchmarks that only have parameter sweeps get a page too."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable, Mapping, Sequence

from harness.measures import group_by, parse_measure
from harness.store.results import ResultRecord

from .. import plots
from harness import registry

from ..compare import (BASELINE, CHANCE_LEVEL, COMPARATOR, SLICE_RE, BenchmarkComparison, BenchmarkSection,
                       PairedTest, base_name, is_local, measure_higher_is_better)
from ..scatter import Point, scatter_svg
from ..sweeps import SweepGrid, sweep_grids
from ..text import DASH, finite, fmt_num, fmt_p, measure_counted, measure_decimals, rank_text, round_half_up, slugify
from harness.store.trust import DESCRIPTIONS

from . import downloads, rowfacts, stage
from .page import (Site, checked_text, filter_view, fmt_count, header, initial_aria, json_value, legend, rank_title,
                   raw, trust_levels, trust_view, unique_id)

MARKS = {COMPARATOR: "†", BASELINE: "‡"}


def yardstick_name(b: BenchmarkComparison, kind: str) -> str:
    """How the row a test is against is named in titles: the comparator retriever, or "best baseline"."""
    return str(b.comparator) if kind == COMPARATOR else "best baseline"


def mark_title(b: BenchmarkComparison, t: PairedTest) -> str:
    against = b.comparator if t.kind == COMPARATOR else "the best baseline"
    word = "better" if t.better else "worse"
    return (f"{word} than {t.yardstick} ({against}): Holm-adjusted p = {fmt_p(t.p_adj)} "
            f"(raw p = {fmt_p(t.p_raw)}, {t.family} comparison{'s' if t.family != 1 else ''})")


def protocol_variants(name: str) -> list[dict[str, str]]:
    """The papers' protocol variants of a registered benchmark (``nevir`` → ``nevir:coder``), with how
    each differs; none for a folder, a slice or a benchmark whose loader is not installed."""
    if is_local(name) or SLICE_RE.search(name):
        return []
    try:
        loader, bname = registry.get_benchmark_loader(name)
    except (LookupError, ValueError):
        return []
    variants = getattr(loader, "protocol_variants", None)
    try:
        return [{"name": v, "how": how} for v, how in (variants(bname) if callable(variants) else {}).items()]
    except ValueError:
        return []


def meta(b: BenchmarkComparison) -> dict[str, Any]:
    return section_meta(b.section)


def section_meta(s: BenchmarkSection) -> dict[str, Any]:
    """What a benchmark page's header says of the benchmark."""
    info = s.info
    stats = []
    if info is not None:
        st = info.stats or {}
        for key, name in (("queries", "queries"), ("judged_queries", "judged queries"),
                          ("documents", "documents"), ("pairs", "pairs")):
            v = st.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (key != "pairs" or v > 0):
                stats.append({"name": name, "value": fmt_count(float(v))})
    description = info.description if info is not None else ""
    source = info.source if info is not None else ""
    if s.local:  # the folder's path says nothing to a reader and may name a temporary or home directory
        folder = base_name(s.name).rsplit(":", 1)[0] if ":" in base_name(s.name)[2:] else base_name(s.name)
        description = description.replace(folder, s.display)
        source = "a local folder given by path (not shown)"
    return {
        "name": s.display or s.name,
        "slug": s.slug,
        "task": s.task,
        "local": s.local,
        "slice": s.query_slice,
        "full": base_name(s.display or s.name) if s.query_slice is not None else "",
        "fallback": s.fallback,
        "versions": s.versions,
        "version_shown": info.version if info is not None else "",
        "unregistered_versions": [v for v in s.versions if v not in {i.version for i in s.infos}],
        "multi_version": len(s.versions) > 1,
        "description": description,
        "source": source,
        "license": info.license if info is not None else "",
        # the grade a plain measure name (nDCG@10, R@k) counts as relevant here; None: not recorded
        "relevance_threshold": info.relevance_threshold if info is not None else None,
        "stats": stats,
        "protocols": protocol_variants(s.name),
    }


def results_table(site: Site, b: BenchmarkComparison) -> dict[str, Any]:
    measures = b.measures
    n_queries_all = {n for g in b.groups for n in g.n_queries}
    first = measures[0] if measures else None
    headers = []
    for m in measures:
        n_note = n_title = ""
        if measure_counted(m):
            ns = {n for g in b.groups for n in g.measure(m).n}
            if ns and ns != n_queries_all:
                n_note = "n=" + "/".join(str(n) for n in sorted(ns))
                n_title = f"{m} is averaged over {n_note[2:]} of the judged queries"
        headers.append(header(m, headline=m in b.headline, n_note=n_note, n_title=n_title,
                              aria=initial_aria(first) if m == first else ""))

    aggs = [[g.measure(m) for m in measures] for g in b.groups]
    best: list[Decimal | None] = []
    for j, m in enumerate(measures):
        dec = measure_decimals(m)
        # (the chance row and rows below chance on relevance are never the best of a column)
        vals = [round_half_up(row[j].mean, dec) for i, row in enumerate(aggs)
                if row[j].mean is not None and i not in b.standing]
        best.append((max(vals) if measure_higher_is_better(m) else min(vals)) if vals else None)

    rows = []
    anchors: set[str] = {"results", "results-section", "tradeoff"}  # (ids of the page the rows' may not take)
    for i, (g, row_aggs) in enumerate(zip(b.groups, aggs)):
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
                if measure_counted(m) and agg.n and set(agg.n) != set(g.n_queries):
                    title.append("n=" + "/".join(map(str, agg.n)))
            tests = b.tests_of(i, m)
            # (no mark on the chance row or a row below chance: "better than dense" on V@2 is no
            # credit to a ranking that retrieves nothing; the p-values stay in the tooltip)
            marks = [{"symbol": MARKS[t.kind], "kind": t.kind, "title": mark_title(b, t), "p": repr(t.p_adj),
                      "better": t.better} for t in tests if t.significant and i not in b.standing]
            title += [f"vs {t.yardstick} ({yardstick_name(b, t.kind)}): Holm-adjusted p = {fmt_p(t.p_adj)}"
                      for t in tests]
            cells.append({
                "measure": m,
                "raw": raw(agg.mean),
                "value": fmt_num(agg.mean, dec),
                "extra": extra,
                "title": "; ".join(title),
                "best": (i not in b.standing and agg.mean is not None and best[j] is not None
                         and round_half_up(agg.mean, dec) == best[j]),
                "marks": marks,
            })
        nq = g.n_queries
        why = b.standing.get(i, "")
        rank = b.ranks.get(i)
        rows.append({
            "rank": rank_text(rank), "rank_raw": str(rank[0]) if rank else "",
            "rank_title": rank_title(rank, b.rank_measure) if rank else f"not ranked: {why}",
            "why": why, "chance": why == CHANCE_LEVEL, "below_chance": why.startswith("below chance"),
            "anchor": unique_id("row-" + site.retriever_slugs[g.display]
                                + (f"-{g.benchmark_version[:8]}" if len(b.section.versions) > 1 else ""), anchors),
            "label": g.display,
            "slug": site.retriever_slugs[g.display],
            "retriever": g.retriever,
            "encoder": g.encoder,
            "llm": g.llm,
            "note": g.note,
            "trust": g.trust,
            "trust_view": trust_view(site, g.trust, [g]),
            "tags": rowfacts.tags([g], label=g.display, trust=g.trust, encoder=g.encoder, llm=g.llm),
            "checked": checked_text(g.checked),
            "baseline": b.is_baseline(g),
            "spec_hash": g.spec_hash,
            "title": (f"{g.retriever} · spec {g.spec_hash} · benchmark version {g.benchmark_version} · harness "
                      + ", ".join(sorted({r.harness_version for r in g.records}))
                      + " · k=" + ", ".join(str(k) for k in sorted({r.k for r in g.records}))),
            "version": g.benchmark_version[:8],
            "cells": cells,
            "seeds": str(len(g.records)),
            "seed_links": [{"seed": r.seed, "href": "../" + site.drilldowns[int(r.id or 0)],
                            **{k: "../" + v for k, v in downloads.query_links(site, r).items()}} for r in g.records
                           if int(r.id or 0) in site.drilldowns],
            "facts": rowfacts.view([g]),
            "seeds_title": "seeds " + ", ".join(str(x) for x in g.seeds),
            "n_queries_raw": str(max(nq, default=0)),
            "queries": "–".join(f"{n:,}" for n in ([nq[0], nq[-1]] if len(nq) > 1 else nq)),
            "missing": f"({g.n_missing:,} missing)" if g.n_missing > 0 else "",
        })
    notes = {r["label"]: r["note"] for r in rows if r["note"]}
    return {"headers": headers, "rows": rows, "legend": legend(measures), "rank_measure": b.rank_measure or "",
            "chance": b.chance or "", "relevance": b.relevance or "",
            "has_chance": any(r["chance"] for r in rows), "tied": any(r["rank"] and "–" in r["rank"] for r in rows),
            "tradeoff": {"svg": tradeoff_plot(b, rows)},
            "data": site.data_files(f"bench-{b.slug}", downloads.bench_rows(b, rows), benchmark=b.section.display or b.name,
                                    benchmark_versions=b.section.versions, n_resamples_ci="as stored with each result"),
            "notes": [{"label": k, "note": v} for k, v in notes.items()],
            "all_noted": bool(rows) and len(notes) == len(rows),
            "trusts": trust_levels(r["trust"] for r in rows),
            "marked": sorted({mk["kind"] for r in rows for c in r["cells"] for mk in c["marks"]}),
            "has_dash": any(c["raw"] == "" for r in rows for c in r["cells"]),
            "filters": filter_view("results-filters", ["results"], [r["tags"] for r in rows])}


def tradeoff_plot(b: BenchmarkComparison, rows: Sequence[Mapping[str, Any]]) -> str:
    """The benchmark's trade-off scatter (its home suite's ``tradeoff`` measures) of every row with
    both figures, each point linked to its row of the results table."""
    if b.tradeoff is None:
        return ""
    xm, ym = b.tradeoff
    by_label = {r["label"]: r for r in rows}
    points = []
    for i, g in enumerate(b.groups):
        r = by_label.get(g.display)
        kind = "chance" if b.standing.get(i) == CHANCE_LEVEL else "apart" if i in b.standing else "ranked"
        points.append(Point(g.display, g.measure(xm).mean, g.measure(ym).mean,
                            f"#{r['anchor']}" if r else "", kind))
    if sum(1 for p in points if p.x is not None and p.y is not None) < 2:
        return ""
    return scatter_svg(points, title=f"{b.section.display or b.name}: {xm} against {ym}", x_label=xm, y_label=ym,
                       x_higher=measure_higher_is_better(xm), y_higher=measure_higher_is_better(ym))


def legend_yardsticks(b: BenchmarkComparison) -> list[dict[str, str]]:
    """Per measure, the rows its tests are against: the best comparator row and the best baseline row."""
    out = []
    for m in b.measures:
        r = b.yardsticks.get(m, {})
        if r:
            out.append({"measure": m,
                        "comparator": b.groups[r[COMPARATOR]].display if COMPARATOR in r else DASH,
                        "baseline": b.groups[r[BASELINE]].display if BASELINE in r else DASH})
    return out


def breakdowns(b: BenchmarkComparison) -> list[dict[str, Any]]:
    info = b.section.info
    groups_by_key = (info.stats or {}).get("query_groups") if info is not None else None
    if not isinstance(groups_by_key, dict) or not groups_by_key:
        return []
    out = []
    used: set[str] = set()
    for key, mapping in groups_by_key.items():
        if not isinstance(mapping, dict) or not mapping:
            continue
        for m in b.headline:
            per_row = [group_by({m: pq.get(m, {})}, mapping, [m])[m] for pq in b.per_query]
            names = sorted({name for row in per_row for name in row})
            if not names:
                continue
            counts = {name: max((row[name].n for row in per_row if name in row), default=0) for name in names}
            rows = []
            for g, row in zip(b.groups, per_row):
                rows.append({"label": g.display, "cells": [
                    {"raw": raw(row[n].mean) if n in row else "",
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


def survival(site: Site, b: BenchmarkComparison) -> list[dict[str, Any]]:
    """One chart per FVR@k measure: S(r) per configuration, the mean over its seeds of each seed's
    curve over the queries that have a first-violating-rank value."""
    out = []
    for m, k in _fvr_measures(b.measures):
        series = []
        rows = []
        for g in b.groups:
            curves = []
            nq = []
            for r in g.records:
                ranks = list(site.board.per_query.result(r).get(m, {}).values())
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


def _separation_of(rec: ResultRecord) -> dict[str, Any]:
    analysis = rec.extra.get("analysis") if isinstance(rec.extra, dict) else None
    sep = analysis.get("score_separation") if isinstance(analysis, dict) else None
    return sep if isinstance(sep, dict) and sep else {}


def model_name(model: str) -> str:
    """A model as the pages name it: a hub or package name as is; a directory on the machine that
    ran it by its last two components — a trained artifact's kind and content hash
    (``…/models/coder/<hash>`` → ``coder/<hash>``) — never the rest of that machine's path."""
    if not model.startswith(("/", "~", ".")) and "\\" not in model:
        return model
    parts = [p for p in model.replace("\\", "/").split("/") if p not in ("", ".", "..", "~")]
    return "/".join(parts[-2:]) or model


def separation(b: BenchmarkComparison) -> list[dict[str, Any]]:
    out = []
    for g in b.groups:
        rec = next((r for r in g.records if _separation_of(r)), None)
        if rec is None:
            continue
        sep = _separation_of(rec)
        hist = []
        stats = []
        for role, word in (("compat", "trained" if "base" in sep else "compatibility"), ("base", "base")):
            d = sep.get(role)
            if not isinstance(d, dict) or not isinstance(d.get("margins"), dict) or not d["margins"]:
                continue
            model = model_name(str(d.get("model", role)))
            margins = [float(v) for v in d["margins"].values() if finite(v)]
            name = f"{model} ({word})"
            hist.append((f"{word}: {model}", margins))
            stats.append({"name": name, "queries": str(d.get("queries", len(margins))),
                          "mean": fmt_num(d.get("margin_mean"), 3), "median": fmt_num(d.get("margin_median"), 3),
                          "positive": fmt_num(d.get("positive_share"), 3)})
        if not hist:
            continue
        svg = plots.histogram_svg(hist, title=f"Score separation: {g.display}",
                                  x_label="mean s(q, satisfying) − mean s(q, violating)")
        out.append({"label": g.display, "seed": rec.seed, "seeds": len(g.records), "svg": svg, "stats": stats})
    return out


def sweep_views(grids: Sequence[SweepGrid]) -> list[dict[str, Any]]:
    """A line chart or heatmap per chart of each sweep grid."""
    out = []
    for grid in grids:
        caption = (f"seed {grid.seed}, k={grid.k}, benchmark version {grid.benchmark_version[:8]}"
                   + ("; fixed: " + ", ".join(f"{k}={json_value(v)}" for k, v in grid.fixed.items())
                      if grid.fixed else ""))
        charts = []
        for ch in grid.charts:
            m = ch.measure
            if not ch.heatmap:
                pts = [(x, y) for x, y in zip(ch.x, ch.line) if y is not None]
                charts.append({"measure": m, "axes": ch.x_name, "svg": plots.line_chart_svg(
                    [(m, [p[0] for p in pts], [p[1] for p in pts])],
                    title=f"{grid.retriever}: {m} over {ch.x_name}", x_label=ch.x_name, y_label=m,
                    y_range=None), "note": ""})
                continue
            axes = f"{ch.x_name} × {ch.y_name}"
            svg = plots.heatmap_svg(ch.x, ch.y, ch.z, title=f"{grid.retriever}: {m} over {axes}",
                                    x_label=ch.x_name, y_label=ch.y_name,
                                    higher_is_better=measure_higher_is_better(m),
                                    value_format=f"{{:.{measure_decimals(m)}f}}")
            charts.append({"measure": m, "axes": axes, "svg": svg,
                           "note": "mean over the other swept parameters" if ch.averaged else ""})
        out.append({"retriever": grid.retriever, "caption": caption, "charts": charts})
    return out


def _context(site: Site, comparator: str | None, baselines: Sequence[str]) -> dict[str, Any]:
    return {"comparator": comparator or "", "baselines": list(baselines), "alpha": site.board.alpha,
            "trust_descriptions": DESCRIPTIONS, "n_resamples": site.board.n_resamples,
            "kind_comparator": COMPARATOR, "kind_baseline": BASELINE,
            "mark_comparator": MARKS[COMPARATOR], "mark_baseline": MARKS[BASELINE]}


def _sweep_only_view(name: str, slug: str, sweeps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    task = next((str(d.get("task")) for d in sweeps if d.get("task")), "unknown")
    return {"name": name, "slug": slug, "task": task, "local": False, "slice": None, "full": "", "fallback": False,
            "versions": [], "version_shown": "",
            "unregistered_versions": [], "multi_version": False, "description": "", "source": "", "license": "",
            "relevance_threshold": None, "stats": [], "protocols": [], "table": {"headers": [], "rows": [], "legend": [], "marked": [], "has_dash": False,
                                   "trusts": [], "notes": [], "all_noted": False, "tradeoff": {"svg": ""}, "data": None,
                                   "filters": None}, "yardsticks": [], "breakdowns": [], "survival": [],
            "separation": [], "sweeps": sweep_views(sweep_grids(sweeps)), "has_results": False, "second_stage": None}


def render(site: Site) -> None:
    slugs = {b.name: b.slug for b in site.board.benchmarks}
    for b in site.board.benchmarks:
        info = meta(b)
        for v in info["protocols"]:
            v["slug"] = slugs.get(v["name"], "")
        view = {
            **info,
            "table": results_table(site, b),
            "yardsticks": legend_yardsticks(b),
            "breakdowns": breakdowns(b),
            "survival": survival(site, b),
            "separation": separation(b),
            "sweeps": sweep_views(sweep_grids(site.board.sweeps.get(b.name, []))),
            "has_results": True,
            "second_stage": stage.bench_view(site, b.name, b.slug),
        }
        site.page("bench.html", f"bench/{b.slug}.html", sec=view, **_context(site, b.comparator, b.baselines))
    for s in site.board.second_stage.only:  # benchmarks with second-stage results only
        view = {**_sweep_only_view(s.display or s.name, s.slug, site.board.sweeps.get(s.name, [])),
                **section_meta(s), "second_stage": stage.bench_view(site, s.name, s.slug)}
        site.page("bench.html", f"bench/{s.slug}.html", sec=view, **_context(site, None, ()))
    for name, sweeps in site.board.sweep_only.items():
        slug = site.sweep_slugs[name]
        view = _sweep_only_view(name, slug, sweeps)
        site.page("bench.html", f"bench/{slug}.html", sec=view, **_context(site, None, ()))
