"""``index.html``: one table per suite with a headline (in registry order), then ``other`` for
stored benchmarks no such suite lists. Rows are configuration labels, columns the suite's headline
measures averaged over the suite's benchmarks the row was run on, a ``benchmarks`` coverage count
and one column per benchmark with the first headline measure. Links to every other page."""

from __future__ import annotations

from typing import Any

from ..compare import SuiteComparison
from ..sweeps import sweep_grids
from ..text import fmt_num, measure_decimals, slugify
from .common import Site, header, initial_aria, raw

OTHER_DESCRIPTION = "Stored benchmarks that belong to none of the suites above."


def suite_view(site: Site, suite: SuiteComparison, used: set[str]) -> dict[str, Any]:
    first = suite.first
    rows = []
    for row in suite.rows:
        cells = []
        for m in suite.measures:
            n = row.counts[m]
            cells.append({
                "measure": m,
                "raw": raw(row.means[m]),
                "value": fmt_num(row.means[m], measure_decimals(m)),
                "title": f"mean over {n} benchmark{'s' if n != 1 else ''}" if n else f"no {m} on these benchmarks",
            })
        bench_cells = [{"raw": raw(row.per_benchmark[s.name]),
                        "value": fmt_num(row.per_benchmark[s.name], measure_decimals(first or "")), "slug": s.slug}
                       for s in suite.benchmarks]
        rows.append({"label": row.label, "slug": site.retriever_slugs[row.label], "coverage": row.coverage,
                     "cells": cells, "bench_cells": bench_cells})
    return {
        "name": suite.name,
        "id": "overview-" + slugify(suite.name, used),
        "description": OTHER_DESCRIPTION if suite.other else suite.description,
        "headers": [header(m, headline=True, aria=initial_aria(first) if m == first else "")
                    for m in suite.measures],
        "first": first or "",
        "benchmarks": [{"name": s.name, "slug": s.slug, "task": s.task} for s in suite.benchmarks],
        "rows": rows,
    }


def render(site: Site) -> None:
    board = site.board
    used: set[str] = set()
    benchmarks = [{"name": b.name, "slug": b.slug, "task": b.task, "rows": len(b.groups),
                   "results": sum(len(g.records) for g in b.groups),
                   "sweeps": len(sweep_grids(board.sweeps.get(b.name, [])))}
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
    site.page("index.html", "index.html", suites=[suite_view(site, s, used) for s in board.suites],
              benchmarks=benchmarks, sweep_benchmarks=sweep_benchmarks, retrievers=retrievers)
