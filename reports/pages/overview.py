"""``index.html``: one table per suite with a headline (in registry order), then ``other`` for
stored benchmarks no such suite lists. Rows are configuration labels; the columns a reader ranks by
fit the window: rank, encoder (with its size where its results recorded it), LLM, trust (a badge
that opens what was checked), the suite's headline measures averaged over the table's headline
benchmarks (the same for every ranked row; the first with its 95% bootstrap CI) and a coverage
count; the per-benchmark columns (the first headline measure on each) and the training, model and
command columns are shown on request. Rows that lack a headline benchmark follow in a table of
their own, unranked, with what they lack. Then the query slices (:class:`reports.compare.SliceTable`):
a table per suite and slice size, the rows stored on the slices ranked beside every full-set row
restricted to the slices' queries, each row saying where its figures come from. A filter bar over
every table (:func:`reports.pages.page.filter_view`). Local folders and query slices are marked in
the list of benchmarks. Links to every other page."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..compare import RESTRICTED, STORED, ConfigGroup, SliceTable, SuiteComparison, SuiteRow, Values
from ..ranking import _macro_column
from ..scatter import Point, scatter_svg
from ..sweeps import sweep_grids
from ..compare import measure_higher_is_better
from ..text import fmt_num, measure_decimals, rank_text, slugify
from harness.cost.figures import Costs
from harness.measures.stats import bootstrap_cis
from harness.store.trust import DESCRIPTIONS

from . import downloads, rowfacts, stage
from .page import Site, filter_view, header, initial_aria, legend, rank_title, raw, trust_levels, trust_view, unique_id
from .efficiency import cost_svg

OTHER_DESCRIPTION = "Stored benchmarks that belong to none of the suites above."


def data_rows(site: Site, suite: SuiteComparison, names: dict[str, str], views: Sequence[Mapping[str, Any]],
              table: SliceTable | None = None) -> list[dict[str, Any]]:
    """The suite table's figures for its CSV/JSON: per row its rank interval, where it is listed
    (ranked, apart, chance), the method's family and whether it calls an LLM, the headline means
    over the headline benchmarks (the same set for every ranked row; ``headline_benchmarks`` in the
    JSON) with their 95% CIs (the same as the page's, :func:`row_cis`), the first measure per
    benchmark, and the row facts (command, training data, model facts, BibTeX); for a slice table,
    where each benchmark's figures come from (``source``: ``stored`` or ``restricted``,
    :class:`reports.compare.SliceTable`)."""
    out = []
    by_label = {v["label"]: v for v in views}
    for kind, rows in (("ranked", suite.ranked), ("apart", suite.apart), ("chance", suite.chance)):
        for r in rows:
            v = by_label[r.label]
            out.append({"label": r.label, "listed": kind, "rank_low": r.rank[0] if r.rank else None,
                        "rank_high": r.rank[1] if r.rank else None, "why_not_ranked": "" if r.ranked else r.why_apart,
                        "trust": r.trust, "encoder": r.encoder, "llm": r.llm, "family": v["tags"]["family"],
                        "uses_llm": v["tags"]["llm"] == "yes",
                        **({"source": ";".join(f"{names[b]}={table.source(r.label, b)}" for b in names
                                               if b in v["per_bench"])} if table is not None else {}),
                        **{m: r.means.get(m) for m in suite.measures},
                        **downloads.ci_fields(suite.measures, v["cis"]),
                        "averaged_over": ";".join(names[b] for b in suite.headline_benchmarks),
                        **{f"{suite.first} {names[b]}": r.per_benchmark.get(b) for b in names},
                        **rowfacts.data_fields(v["groups"])})
    return out


def _headline_groups(suite: SuiteComparison, per_bench: Mapping[str, Any]) -> list[Any]:
    """A row's groups on the headline benchmarks it ran (all of its benchmarks when it ran none)."""
    core = [per_bench[b] for b in suite.headline_benchmarks if b in per_bench]
    return core or list(per_bench.values())


def row_cis(suite: SuiteComparison, row: SuiteRow, per_bench: Mapping[str, ConfigGroup], values: Values,
            seed: int = 0) -> dict[str, tuple[float, float] | None]:
    """A row's 95% CI of each headline measure: a percentile bootstrap
    (:data:`reports.pages.downloads.CI_RESAMPLES` resamples) of the mean of its per-query values over
    the headline benchmarks, each benchmark weighted as in the table's mean (the column the rank
    tests use, :func:`reports.ranking._macro_column`, of ``values``); None where the row has no mean."""
    benches = [b for b in suite.headline_benchmarks if b in per_bench]
    cols = {}
    for m in suite.measures:
        if row.means.get(m) is None or row.missing:
            continue
        col = _macro_column(per_bench, benches, m, values)
        if col:
            cols[m] = list(col.values())
    cis = bootstrap_cis(cols, n_resamples=downloads.CI_RESAMPLES, seed=seed) if cols else {}
    return {m: cis.get(m) for m in suite.measures}


def encoder_text(encoder: str, groups: Sequence[ConfigGroup]) -> str:
    """The encoder cell: the encoder's short name and, where its results recorded it, its size
    (``all-MiniLM-L6-v2 · 22.7M``); "" for a row that names no encoder."""
    if not encoder:
        return ""
    size = rowfacts.encoder_size(groups)
    return f"{encoder} · {size}" if size else encoder


def suite_view(site: Site, suite: SuiteComparison, used: set[str], costs: Costs | None,
               ids: set[str] | None = None, table: SliceTable | None = None) -> dict[str, Any]:
    """One suite's table; ``used``: the suite slugs taken, ``ids``: the element ids taken on the page
    (its rows' anchors are unique on it). ``table``: the slice table ``suite`` is the comparison of
    (its rows' per-query values and where each figure comes from; no plots), else a full-set table."""
    ids = set() if ids is None else ids
    first = suite.first
    core = set(suite.headline_benchmarks)
    n_core = len(core)
    names = {s.name: s.display or s.name for s in suite.benchmarks}
    values: Values = table.values if table is not None else site.board.per_query.group

    def groups_of(label: str) -> dict[str, ConfigGroup]:
        """The row's group per benchmark; a restricted slice row's full-set group (its facts, its
        command, what its trust checked)."""
        per = downloads.suite_groups(suite, label)
        return {b: (table.sources.get((label, b), g) if table is not None else g) for b, g in per.items()}

    def row_view(row: SuiteRow) -> dict[str, Any]:
        per_bench = downloads.suite_groups(suite, row.label)
        facts_groups = _headline_groups(suite, groups_of(row.label))
        cis = row_cis(suite, row, per_bench, values)
        cells = []
        for m in suite.measures:
            n = row.counts[m]
            if row.missing:
                title = "not ranked: not run on " + ", ".join(names[b] for b in row.missing)
            elif n:
                title = f"mean over the {n} headline benchmark{'s' if n != 1 else ''}"
            else:
                title = f"no {m} on these benchmarks"
            ci = cis.get(m)
            cells.append({"measure": m, "raw": raw(row.means[m]), "headline": m == first,
                          "value": fmt_num(row.means[m], measure_decimals(m)), "title": title,
                          "ci": f"[{fmt_num(ci[0], 2)}, {fmt_num(ci[1], 2)}]" if ci is not None and m == first else "",
                          "ci_title": "95% bootstrap CI of the mean over the headline benchmarks" if ci else ""})
        bench_cells = [{"raw": raw(row.per_benchmark[s.name]),
                        "value": fmt_num(row.per_benchmark[s.name], measure_decimals(first or "")), "slug": s.slug,
                        "core": s.name in core,
                        "source": table.source(row.label, s.name) if table is not None and s.name in per_bench else ""}
                       for s in suite.benchmarks]
        have = n_core - len(row.missing)
        slug = site.retriever_slugs[row.label]
        sources = ({table.source(row.label, b) for b in per_bench} if table is not None else set())
        tags = rowfacts.tags(facts_groups, label=row.label, trust=row.trust, encoder=row.encoder, llm=row.llm)
        return {"label": row.label, "slug": slug, "coverage": row.coverage,
                "facts": rowfacts.view(facts_groups), "groups": facts_groups, "per_bench": per_bench, "cis": cis,
                "encoder": row.encoder, "encoder_text": encoder_text(row.encoder, facts_groups), "llm": row.llm,
                "trust": row.trust, "trust_view": trust_view(site, row.trust, facts_groups), "note": row.note,
                "tags": tags, "core_coverage": f"{have}/{n_core}", "cells": cells, "bench_cells": bench_cells,
                "missing": [names[b] for b in row.missing], "chance": row.chance,
                "why": ("not run on " + ", ".join(names[b] for b in row.missing)) if row.missing else row.why_apart,
                "rank": rank_text(row.rank), "rank_raw": str(row.rank[0]) if row.rank else "",
                "rank_title": rank_title(row.rank, first), "anchor": anchors[row.label],
                "source": "|".join(sorted(sources)),
                "source_tag": ("" if table is None else "slice run" if sources == {STORED}
                               else "full set" if sources == {RESTRICTED} else "slice run + full set")}

    if table is None:
        table_id = unique_id("overview-" + slugify(suite.name, used), ids)
    else:
        table_id = unique_id("slices-" + slugify(f"{suite.name}-{table.size}", used), ids)
    for suffix in ("title", "apart", "apart-title", "tradeoff", "cost", "usd", "show-bench", "show-more"):
        ids.add(f"{table_id}-{suffix}")
    anchors = {r.label: unique_id(f"{table_id}-row-{site.retriever_slugs[r.label]}", ids) for r in suite.rows}
    ranked, apart, chance = ([row_view(r) for r in rows] for rows in (suite.ranked, suite.apart, suite.chance))
    views = [*ranked, *apart, *chance]
    headline = [names[b] for b in suite.headline_benchmarks]
    return {
        "name": suite.name,
        "id": table_id,
        "slice": table.size if table is not None else None,
        "stored": table.stored_labels() if table is not None else [],
        "description": OTHER_DESCRIPTION if suite.other and table is None else suite.description,
        "headers": [header(m, headline=True, aria=initial_aria(first) if m == first else "")
                    for m in suite.measures],
        "first": first or "",
        "benchmarks": [{"name": s.display or s.name, "slug": s.slug, "task": s.task, "core": s.name in core,
                        "local": s.local} for s in suite.benchmarks],
        "headline_benchmarks": headline,
        "outside": [names[b] for b in suite.outside_headline],
        "rows": ranked,
        "apart": apart,
        "chance": chance,
        "tables": [table_id] + ([f"{table_id}-apart"] if apart else []),
        "tags": [v["tags"] for v in views],
        "chance_retriever": suite.chance_retriever or "",
        "relevance": suite.relevance or "",
        "tied": any(r.rank and r.rank[0] != r.rank[1] for r in suite.ranked),
        "tradeoff": {"svg": tradeoff_plot(site, suite, table_id, anchors) if table is None else ""},
        "cost": {"svg": cost_svg(site, suite, costs, lambda label: f"#{anchors[label]}")
                 if costs is not None else ""},
        "cost_usd": {"svg": cost_svg(site, suite, costs, lambda label: f"#{anchors[label]}", dollars=True)
                     if costs is not None else ""},
        "data": site.data_files(table_id, data_rows(site, suite, names, views, table), headline_benchmarks=headline,
                                **({"slice": table.size, "sources": SOURCES} if table is not None else {})),
        "legend": legend(suite.measures),
        "trusts": trust_levels(r.trust for r in suite.rows),
    }


SOURCES = {STORED: "the configuration's own result stored on the slice",
           RESTRICTED: "its full-set result's per-query values restricted to the slice's query ids"}


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
    ids: set[str] = {"second-stage", "benchmarks", "retrievers", "slices", "filters"}
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
    suites = [suite_view(site, s, used, costs, ids) for s in board.suites]
    slices = [suite_view(site, t.comparison, used, None, ids, table=t) for t in board.slice_tables]
    filters = filter_view("filters", [t for st in suites + slices for t in st["tables"]],
                          [t for st in suites + slices for t in st["tags"]])
    site.page("index.html", "index.html", suites=suites, slices=slices, filters=filters,
              second_stage=stage.overview_view(site), trust_descriptions=DESCRIPTIONS,
              benchmarks=benchmarks, sweep_benchmarks=sweep_benchmarks, retrievers=retrievers)
