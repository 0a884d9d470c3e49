"""The second-stage tables of the benchmark pages and the overview (:mod:`reports.second_stage`):
per pool its rerankers, ranked, and its three reference rows, one line per row.

A benchmark page's table shows each cell as its other tables do (the mean with the 95% bootstrap
CI for one seed, ± the std over seeds for several) and the pool above it (name, hash, first stage,
depth and ceiling); an overview table shows means over the suite's benchmarks that have the pool.
Every string from the store reaches the page through Jinja's autoescaping.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Mapping, Sequence

from ..ranking import measure_higher_is_better
from ..second_stage import NOT_ABOVE_SHUFFLED, REFERENCE_SHOWN, RERANKER, StageRow, StageTable
from ..text import DASH, finite, fmt_num, measure_decimals, rank_text, round_half_up, slugify
from .page import Site, fmt_count, header, initial_aria, legend, rank_title, raw

# what a reference row is, in its tag's tooltip and the legend
REFERENCE_WORDS = {
    "order": (REFERENCE_SHOWN["order"], "the pool in its own order: the first stage's ranking of its candidates"),
    "shuffled": (REFERENCE_SHOWN["shuffled"], "the pool shuffled (seeded): the level of a method that finds the "
                                              "topic and is blind to the constraint"),
    "oracle": (REFERENCE_SHOWN["oracle"], "the pool in its oracle order (satisfying documents first by grade, "
                                          "violating ones last): the best any reordering of it reaches"),
}


def _share(x: Any) -> str:
    return f"{100 * float(x):.1f}%" if finite(x) else DASH


def pool_facts(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What a table says of its pool: name, hash, first stage, depth, size and ceiling."""
    ceiling = manifest.get("ceiling") if isinstance(manifest.get("ceiling"), Mapping) else {}
    with_rel = ceiling.get("queries_with_relevant")
    return {
        "name": str(manifest.get("name", "")),
        "hash": str(manifest.get("hash", "")),
        "first_stage": str(manifest.get("first_stage_label", "")),
        "depth": str(manifest.get("depth", "")),
        "queries": fmt_count(float(manifest["queries"])) if finite(manifest.get("queries")) else DASH,
        "candidates": fmt_count(float(manifest["candidates"])) if finite(manifest.get("candidates")) else DASH,
        "satisfiable": _share(ceiling.get("satisfiable")),
        "satisfiable_raw": raw(ceiling.get("satisfiable")) if finite(ceiling.get("satisfiable")) else "",
        "with_relevant": fmt_count(float(with_rel)) if finite(with_rel) else DASH,
        "best": [{"measure": m, "value": fmt_num(ceiling.get(m), measure_decimals(m)),
                  "raw": raw(ceiling.get(m)) if finite(ceiling.get(m)) else ""}
                 for m in ("Sat@10", "nDCG@10") if m in ceiling],
    }


def _best(t: StageTable) -> dict[str, Decimal | None]:
    """Per column, the best rounded mean of a ranked reranker (what is shown in bold)."""
    out: dict[str, Decimal | None] = {}
    for m in t.measures:
        dec = measure_decimals(m)
        vals = [round_half_up(float(r.means[m]), dec) for r in t.ranked  # type: ignore[arg-type]
                if r.means.get(m) is not None]
        out[m] = (max(vals) if measure_higher_is_better(m) else min(vals)) if vals else None
    return out


def _cells(t: StageTable, row: StageRow, bench: str | None, best: Mapping[str, Decimal | None]) -> list[dict[str, Any]]:
    cells = []
    for m in t.measures:
        dec = measure_decimals(m)
        mean = row.means.get(m)
        extra, title = "", ""
        if bench is not None and bench in row.groups:
            agg = row.groups[bench].measure(m)
            if agg.mean is not None and agg.std is not None:
                extra = f"± {fmt_num(agg.std, dec)}"
                title = "per seed: " + ", ".join(fmt_num(v, dec) for v in agg.values)
            elif agg.mean is not None and agg.ci is not None:
                extra = f"[{fmt_num(agg.ci[0], 2)}, {fmt_num(agg.ci[1], 2)}]"
                title = "95% bootstrap CI"
        elif bench is None:
            n = row.counts.get(m, 0)
            title = (f"mean over {n} benchmark{'s' if n != 1 else ''} with this pool" if mean is not None
                     else "not ranked: not run on " + ", ".join(row.missing) if row.missing
                     else f"no {m} on these benchmarks")
        cells.append({"measure": m, "raw": raw(mean), "value": fmt_num(mean, dec), "extra": extra, "title": title,
                      "best": (row.ranked and mean is not None and best.get(m) is not None
                               and round_half_up(mean, dec) == best[m])})
    return cells


def _row(t: StageTable, row: StageRow, table_id: str, used: set[str], bench: str | None,
         best: Mapping[str, Decimal | None]) -> dict[str, Any]:
    kind, words = row.kind, REFERENCE_WORDS.get(row.kind, ("", ""))
    records = row.records
    if row.reference:
        rank, rank_raw, rank_tip = words[0], "", f"reference row, never ranked: {words[1]}"
    elif row.rank is not None:
        rank, rank_raw, rank_tip = rank_text(row.rank), str(row.rank[0]), rank_title(row.rank, t.rank_measure)
    else:
        rank, rank_raw, rank_tip = "", "", f"not ranked: {row.why}"
    groups = list(row.groups.values())
    title = " · ".join(x for x in (
        row.label,
        ", ".join(sorted({g.retriever for g in groups})),
        "spec " + ", ".join(sorted({g.spec_hash for g in groups})),
        "harness " + ", ".join(sorted({r.harness_version for r in records})),
    ) if x)
    seeds = sorted({r.seed for r in records})
    have = len(t.headline_benchmarks) - len(row.missing)
    return {
        "anchor": f"{table_id}-row-{slugify(row.label, used)}",
        "label": row.shown, "full_label": row.label, "title": title, "kind": kind,
        "reference": row.reference, "reference_title": words[1],
        "rank": rank, "rank_raw": rank_raw, "rank_title": rank_tip,
        "why": row.why, "below_shuffled": row.below_shuffled,
        "tag": ("not above the shuffled pool" if row.below_shuffled else "not ranked") if row.why else "",
        "trust": row.trust,
        "seeds": str(len(seeds)), "seeds_title": "seeds " + ", ".join(map(str, seeds)),
        "coverage": f"{have}/{len(t.headline_benchmarks)}",
        "cells": _cells(t, row, bench, best),
    }


def _data(t: StageTable, rows: Sequence[Mapping[str, Any]], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The table's rows for its CSV/JSON: what the page shows, unrounded."""
    out = []
    for r, view in zip(t.rows, rows):
        out.append({"label": r.label, "kind": r.kind,
                    "listed": "reference" if r.reference else "ranked" if r.ranked else "apart",
                    "rank_low": r.rank[0] if r.rank else None, "rank_high": r.rank[1] if r.rank else None,
                    "why_not_ranked": r.why, "trust": r.trust, "seeds": view["seeds"],
                    **{m: r.means.get(m) for m in t.measures},
                    "averaged_over": ";".join(names.get(b, b) for b in t.headline_benchmarks)})
    return out


def table_view(site: Site, t: StageTable, table_id: str, *, bench: str | None = None,
               names: Mapping[str, str] | None = None, stem: str = "") -> dict[str, Any]:
    """One second-stage table: on ``bench``'s page (cells with their CI, the pool's facts), or on the
    overview (``bench`` None: means over the benchmarks with the pool); its figures are written to
    ``data/<stem>.csv|json`` (``stem``: the table's id by default)."""
    names = dict(names or {})
    used: set[str] = set()
    best = _best(t)
    views = [_row(t, r, table_id, used, bench, best) for r in t.rows]
    n_rerank = len(t.ranked) + len(t.apart)
    first = t.rank_measure
    pools = [{"benchmark": names.get(b, b), **pool_facts(m)} for b, m in t.pools.items()]
    shuffled = t.reference("shuffled")
    return {
        "id": table_id,
        "pool_name": t.pool_name,
        "pool": pools[0] if bench is not None and pools else None,
        "pools": pools,
        "headers": [header(m, headline=True, aria=initial_aria(first) if m == first else "") for m in t.measures],
        "rank_measure": first or "",
        "relevance": t.relevance or "",
        "ranked": views[:len(t.ranked)],
        "apart": views[len(t.ranked):n_rerank],
        "references": views[n_rerank:],
        "has_shuffled": shuffled is not None,
        "notes": t.notes(),
        "tied": any(r.rank and r.rank[0] != r.rank[1] for r in t.ranked),
        "legend": legend(t.measures),
        "headline_benchmarks": [names.get(b, b) for b in t.headline_benchmarks],
        "empty": not t.rows,
        "data": site.data_files(stem or table_id, _data(t, views, names), pool=t.pool_name,
                                pools={names.get(b, b): m.get("hash") for b, m in t.pools.items()},
                                headline_benchmarks=[names.get(b, b) for b in t.headline_benchmarks]),
    }


def bench_view(site: Site, name: str, slug: str) -> dict[str, Any] | None:
    """The benchmark page's second-stage section: a table per pool, and the notes of results left out
    that belong to no stored pool; None when the benchmark has none."""
    track = site.board.second_stage
    tables = track.of(name)
    notes = track.notes.get(name, [])
    if not tables and not notes:
        return None
    used: set[str] = set()
    views = []
    for t in tables:
        tid = "second-stage-" + slugify(f"{t.pool_name}-{t.pool_hash[:8]}", used)
        views.append(table_view(site, t, tid, bench=name, stem=f"bench-{slug}-{tid}"))
    return {"tables": views, "notes": notes, "not_above": NOT_ABOVE_SHUFFLED,
            "measures": sorted({h["name"] for v in views for h in v["headers"]})}


def overview_view(site: Site) -> list[dict[str, Any]]:
    """The overview's second-stage sections: per suite, a table per pool name."""
    names = {b.name: b.section.display or b.name for b in site.board.benchmarks}
    names.update({s.name: s.display or s.name for s in site.board.second_stage.only})
    slugs = {b.name: b.slug for b in site.board.benchmarks}
    slugs.update({s.name: s.slug for s in site.board.second_stage.only})
    out = []
    used: set[str] = set()
    for suite in site.board.second_stage.suites:
        sid = "second-stage-" + slugify(suite.name, used)
        tables = []
        inner: set[str] = set()
        for t in suite.tables:
            tid = f"{sid}-{slugify(t.pool_name, inner)}"
            v = table_view(site, t, tid, names=names)
            v["benchmarks"] = [{"name": names.get(b, b), "slug": slugs.get(b, ""), "hash": str(m.get("hash", "")),
                                "first_stage": str(m.get("first_stage_label", "")), "depth": str(m.get("depth", "")),
                                "core": b in t.headline_benchmarks}
                               for b, m in t.pools.items()]
            tables.append(v)
        out.append({"name": suite.name, "id": sid, "tables": tables})
    return out


__all__ = ["REFERENCE_WORDS", "RERANKER", "bench_view", "overview_view", "pool_facts", "table_view"]
