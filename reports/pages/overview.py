"""``index.html``: one table per suite with a headline (in registry order), then ``other`` for
stored benchmarks no such suite lists. Rows are configuration labels, columns the suite's headline
measures averaged over the table's headline benchmarks (the same for every ranked row), a coverage
count and one column per benchmark with the first headline measure; rows that lack a headline
benchmark follow in a table of their own, unranked, with what they lack. Query slices and local
folders are marked in the list of benchmarks. Links to every other page."""

from __future__ import annotations

from typing import Any

from ..compare import SuiteComparison
from ..scatter import Point, scatter_svg
from ..sweeps import sweep_grids
from ..compare import measure_higher_is_better
from ..text import fmt_num, measure_decimals, rank_text, slugify
from harness.cost.figures import Costs
from harness.store.trust import DESCRIPTIONS

from . import downloads, rowfacts, stage
from .page import Site, header, initial_aria, legend, rank_title, raw, trust_levels, unique_id
from .efficiency import cost_svg

OTHER_DESCRIPTION = "Stored benchmarks that belong to none of the suites above."


def data_rows(site: Site, suite: SuiteComparison, names: dict[str, str]) -> list[dict[str, Any]]:
    """The suite table's figures for its CSV/JSON: per row its rank interval, where it is listed
    (ranked, apart, chance), the headline means over the headline benchmarks (the same set for every
    ranked row; ``headline_benchmarks`` in the JSON) with their 95% CIs
    (:func:`reports.pages.downloads.suite_cis`), the first measure per benchmark, and the row facts
    (command, training data, model facts, BibTeX)."""
    out = []
    for kind, rows in (("ranked", suite.ranked), ("apart", suite.apart), ("chance", suite.chance)):
        for r in rows:
            per_bench = downloads.suite_groups(suite, r.label)
            cis = downloads.suite_cis(site, suite, r.label, per_bench)
            out.append({"label": r.label, "listed": kind, "rank_low": r.rank[0] if r.rank else None,
                        "rank_high": r.rank[1] if r.rank else None, "why_not_ranked": "" if r.ranked else r.why_apart,
                        "trust": r.trust, "encoder": r.encoder, "llm": r.llm,
                        **{m: r.means.get(m) for m in suite.measures},
                        **downloads.ci_fields(suite.measures, cis),
                        "averaged_over": ";".join(names[b] for b in suite.headline_benchmarks),
                        **{f"{suite.first} {names[b]}": r.per_benchmark.get(b) for b in names},
                        **rowfacts.data_fields(_headline_groups(suite, per_bench))})
    return out


def _headline_groups(suite: SuiteComparison, per_bench: dict[str, Any]) -> list[Any]:
    """A row's groups on the headline benchmarks it ran (all of its benchmarks when it ran none)."""
    core = [per_bench[b] for b in suite.headline_benchmarks if b in per_bench]
    return core or list(per_bench.values())


def suite_view(site: Site, suite: SuiteComparison, used: set[str], costs: Costs,
               ids: set[str] | None = None) -> dict[str, Any]:
    """One suite's table; ``used``: the suite slugs taken, ``ids``: the element ids taken on the page
    (its rows' anchors are unique on it)."""
    ids = set() if ids is None else ids
    first = suite.first
    core = set(suite.headline_benchmarks)
    n_core = len(core)
    names = {s.name: s.display or s.name for s in suite.benchmarks}

    def row_view(row: Any) -> dict[str, Any]:
        cells = []
        for m in suite.measures:
            n = row.counts[m]
            if row.missing:
                title = "not ranked: not run on " + ", ".join(names[b] for b in row.missing)
            elif n:
                title = f"mean over the {n} headline benchmark{'s' if n != 1 else ''}"
            else:
                title = f"no {m} on these benchmarks"
            cells.append({"measure": m, "raw": raw(row.means[m]),
                          "value": fmt_num(row.means[m], measure_decimals(m)), "title": title})
        bench_cells = [{"raw": raw(row.per_benchmark[s.name]),
                        "value": fmt_num(row.per_benchmark[s.name], measure_decimals(first or "")), "slug": s.slug,
                        "core": s.name in core}
                       for s in suite.benchmarks]
        have = n_core - len(row.missing)
        slug = site.retriever_slugs[row.label]
        return {"label": row.label, "slug": slug, "coverage": row.coverage,
                "facts": rowfacts.view(_headline_groups(suite, downloads.suite_groups(suite, row.label))),
                "encoder": row.encoder, "llm": row.llm, "trust": row.trust, "note": row.note,
                "core_coverage": f"{have}/{n_core}", "cells": cells, "bench_cells": bench_cells,
                "missing": [names[b] for b in row.missing], "chance": row.chance,
                "why": ("not run on " + ", ".join(names[b] for b in row.missing)) if row.missing else row.why_apart,
                "rank": rank_text(row.rank), "rank_raw": str(row.rank[0]) if row.rank else "",
                "rank_title": rank_title(row.rank, first), "anchor": anchors[row.label]}

    table_id = unique_id("overview-" + slugify(suite.name, used), ids)
    for suffix in ("title", "apart", "apart-title", "tradeoff", "cost", "usd"):
        ids.add(f"{table_id}-{suffix}")
    anchors = {r.label: unique_id(f"{table_id}-row-{site.retriever_slugs[r.label]}", ids) for r in suite.rows}

    return {
        "name": suite.name,
        "id": table_id,
        "description": OTHER_DESCRIPTION if suite.other else suite.description,
        "headers": [header(m, headline=True, aria=initial_aria(first) if m == first else "")
                    for m in suite.measures],
        "first": first or "",
        "benchmarks": [{"name": s.display or s.name, "slug": s.slug, "task": s.task, "core": s.name in core,
                        "local": s.local} for s in suite.benchmarks],
        "headline_benchmarks": [names[b] for b in suite.headline_benchmarks],
        "outside": [names[b] for b in suite.outside_headline],
        "rows": [row_view(r) for r in suite.ranked],
        "apart": [row_view(r) for r in suite.apart],
        "chance": [row_view(r) for r in suite.chance],
        "chance_retriever": suite.chance_retriever or "",
        "relevance": suite.relevance or "",
        "tied": any(r.rank and r.rank[0] != r.rank[1] for r in suite.ranked),
        "tradeoff": {"svg": tradeoff_plot(site, suite, table_id, anchors)},
        "cost": {"svg": cost_svg(site, suite, costs, lambda label: f"#{anchors[label]}")},
        "cost_usd": {"svg": cost_svg(site, suite, costs, lambda label: f"#{anchors[label]}",
                                     dollars=True)},
        "data": site.data_files(table_id, data_rows(site, suite, names), headline_benchmarks=[
            names[b] for b in suite.headline_benchmarks]),
        "legend": legend(suite.measures),
        "trusts": trust_levels(r.trust for r in suite.rows),
    }


def tradeoff_plot(site: Site, suite: SuiteComparison, table_id: str, anchors: dict[str, str] | None = None) -> str:
    """The suite's trade-off scatter (its ``tradeoff`` measures, means over the headline
    benchmarks) of every row with both figures, each point linked to its row in the table."""
    if suite.tradeoff is None:
        return ""
    xm, ym = suite.tradeoff
    points = [Point(r.label, r.means.get(xm), r.means.get(ym),
                    "#" + (anchors.get(r.label) if anchors and r.label in anchors
                           else f"{table_id}-row-{site.retriever_slugs[r.label]}"),
                    "chance" if r.chance else "ranked" if r.ranked else "apart") for r in suite.rows]
    if not any(p.x is not None and p.y is not None for p in points):
        return ""
    return scatter_svg(points, title=f"{suite.name}: {xm} against {ym}", x_label=xm, y_label=ym,
                       x_higher=measure_higher_is_better(xm), y_higher=measure_higher_is_better(ym))


def render(site: Site) -> None:
    board = site.board
    used: set[str] = set()
    ids: set[str] = {"second-stage", "benchmarks", "retrievers"}
    benchmarks = [{"name": b.section.display or b.name, "slug": b.slug, "task": b.task, "rows": len(b.groups),
                   "results": sum(len(g.records) for g in b.groups), "local": b.section.local,
                   "slice": b.section.query_slice, "sweeps": len(sweep_grids(board.sweeps.get(b.name, []))),
                   "pools": len(board.second_stage.of(b.name))}
                  for b in board.benchmarks]
    sweep_benchmarks = []
    for name, sweeps in board.sweep_only.items():
        task = next((str(d.get("task")) for d in sweeps if d.get("task")), "unknown")
        sweep_benchmarks.append({"name": name, "slug": site.sweep_slugs[name], "task": task, "sweeps": len(sweeps)})
    retrievers = []
    for label in board.labels():
        rows = board.rows_of(label)
        records = [r for _, g in rows for r in g.records]
        newest = max(records, key=lambda r: (r.created_at, r.id or 0))
        retrievers.append({"label": label, "slug": site.retriever_slugs[label], "retriever": newest.retriever,
                           "benchmarks": len(rows), "results": len(records)})
    costs = Costs(board.all_records)  # (a second-stage result may have computed what another reuses)
    track = board.second_stage
    benchmarks += [{"name": s.display or s.name, "slug": s.slug, "task": s.task, "rows": 0, "results": 0,
                    "local": s.local, "slice": s.query_slice, "sweeps": len(sweep_grids(board.sweeps.get(s.name, []))),
                    "pools": len(track.of(s.name))} for s in track.only]
    site.page("index.html", "index.html", suites=[suite_view(site, s, used, costs, ids) for s in board.suites],
              second_stage=stage.overview_view(site), trust_descriptions=DESCRIPTIONS,
              benchmarks=benchmarks, sweep_benchmarks=sweep_benchmarks, retrievers=retrievers)
