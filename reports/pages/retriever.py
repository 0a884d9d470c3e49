"""``retriever/<slug>.html``, one per configuration label: spec, provenance, environment, every
result with its headline measures and a link to its per-query drill-down, and retriever facts."""

from __future__ import annotations

import json
from typing import Any, Sequence

from harness.store.results import ResultRecord

from ..text import fmt_num, measure_decimals
from . import downloads, rowfacts
from .page import Site, json_dump, json_value
from harness.models.facts import facts_text


def distinct(records: Sequence[ResultRecord], attr: str) -> list[dict[str, Any]]:
    """Each key of a dict attribute (provenance, environment) with its distinct values, newest first."""
    values: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: (r.created_at, r.id or 0), reverse=True):
        d = getattr(r, attr) or {}
        if not isinstance(d, dict):
            continue
        for k, v in d.items():
            s = json_value(v)
            col = values.setdefault(str(k), [])
            if s not in col:
                col.append(s)
    return [{"key": k, "vals": v} for k, v in values.items()]


def view(site: Site, label: str) -> dict[str, Any]:
    rows = site.board.rows_of(label)
    records = [r for _, g in rows for r in g.records]
    newest = max(records, key=lambda r: (r.created_at, r.id or 0))
    params = newest.spec.get("params") if isinstance(newest.spec, dict) else None
    results = []
    facts = []
    for b, g in rows:
        for r in g.records:
            results.append({
                "benchmark": b.section.display or b.name, "bench_slug": b.slug, "version": r.benchmark_version[:8], "seed": r.seed,
                "k": r.k, "created": r.created_at, "n_queries": r.n_queries,
                "measures": [{"name": m, "value": fmt_num(r.measures[m].mean, measure_decimals(m))}
                             for m in b.headline if m in r.measures],
                "href": site.drilldowns[int(r.id or 0)].split("/", 1)[1],
                "downloads": {k: "../" + v for k, v in downloads.query_links(site, r).items()},
            })
            rf = r.extra.get("retriever") if isinstance(r.extra, dict) else None
            if isinstance(rf, dict) and rf:
                facts.append({"benchmark": b.section.display or b.name, "seed": r.seed,
                              "items": [{"key": str(k), "value": json_dump(v)} for k, v in rf.items()]})
    provenance, environment = distinct(records, "provenance"), distinct(records, "environment")
    return {
        "label": label, "slug": site.retriever_slugs[label], "retriever": newest.retriever,
        "spec_hash": newest.spec_hash, "raw_label": newest.label,
        "params": [{"key": str(k), "value": json_dump(v)} for k, v in sorted(params.items())]
        if isinstance(params, dict) else [],
        "spec_json": json.dumps(newest.spec, sort_keys=True, default=str),
        "provenance": provenance,
        "environment": environment,
        "varies": any(len(p["vals"]) > 1 for p in provenance + environment),
        "results": results, "facts": facts,
        "command": rowfacts.command([g for _, g in rows]),
        "bibtex": rowfacts.bibtex(newest.retriever),
        "training": rowfacts.training(g for _, g in rows),
        "model_facts": [facts_text(f) for f in rowfacts.model_facts(g for _, g in rows)],
    }


def render(site: Site) -> None:
    for label in site.board.labels():
        site.page("retriever.html", f"retriever/{site.retriever_slugs[label]}.html", r=view(site, label))
