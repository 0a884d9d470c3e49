"""``efficiency.html``: time, LLM calls, tokens and dollars per configuration × benchmark (means
over seeds), with totals per configuration; seconds are cold (harness/cost/figures.py: cached parts counted
at what computing them cost, marked ``*``), this run's seconds in a column of their own. Then the
paper's cost table (``audit --view paper``: per method over CoDeR Table 4's settings) and, per
suite, the headline measure against cold seconds per 1,000 queries (:func:`cost_points`)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from harness.cost.audit import paper_rows, paper_settings
from harness.cost.figures import Costs, Money
from harness.core.ledger import call_totals
from harness.registry import RegistryError, suites

from ..compare import ConfigGroup, measure_higher_is_better
from ..scatter import Point, scatter_svg
from ..text import DASH, finite
from . import rowfacts
from .page import Site, fmt_count, mean, raw


def _fmt_seconds(x: float | None) -> str:
    if not finite(x):
        return DASH
    return f"{x:,.2f}" if x < 1000 else f"{x:,.0f}"


def numbers(g: ConfigGroup, costs: Costs) -> dict[str, Any]:
    offline, online, items, calls, hits, pt, ct = [], [], [], [], [], [], []
    qps, offline_cpu, online_cpu, model, run = [], [], [], [], []
    usd, cold_usd = Money(), Money()
    cached: set[str] = set()
    bases: set[str] = set()
    tokens_unknown = False
    for r in g.records:
        c = costs.of(r)
        for xs, x in ((offline, c.offline_s), (offline_cpu, c.offline_cpu_s), (model, c.model_s), (run, c.run_total_s),
                      (online, c.online_s), (online_cpu, c.online_cpu_s)):
            if x is not None:
                xs.append(x)
        if c.online_s is not None:
            n = c.online_items or r.n_queries
            items.append(n)
            if c.online_s > 0:
                qps.append(n / c.online_s)
        cached.update(c.cached)
        if c.cold_basis.startswith("derived"):
            bases.add(c.cold_basis)
        t = call_totals(r.llm_calls)
        calls.append(t["calls"])
        hits.append(t["cache_hits"])
        pt.append(t["prompt_tokens_known"])
        ct.append(t["completion_tokens_known"])
        tokens_unknown = tokens_unknown or t["usage_unknown_calls"] > 0
        usd, cold_usd = usd + c.usd, cold_usd + c.cold_usd
    n_rec = max(1, len(g.records))
    return {
        "offline": mean(offline), "online": mean(online), "items": mean(items), "qps": mean(qps),
        "offline_cpu": mean(offline_cpu), "online_cpu": mean(online_cpu), "model": mean(model), "run": mean(run),
        "calls": mean(calls) or 0.0, "hits": mean(hits) or 0.0, "prompt": mean(pt) or 0.0,
        "completion": mean(ct) or 0.0, "tokens_unknown": tokens_unknown,
        "usd": usd.scaled(1 / n_rec), "cold_usd": cold_usd.scaled(1 / n_rec),
        "cached": sorted(cached), "bases": sorted(bases),
    }


def _tokens_cell(n: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Token counts: the known part, as "≥ N" (or "unknown") when some call reported none."""
    x = n[key]
    if not n["calls"]:
        return {"raw": raw(x), "value": DASH}
    if n["tokens_unknown"]:
        return {"raw": "", "value": f"≥ {fmt_count(x)}" if x else "unknown"}
    return {"raw": raw(x), "value": fmt_count(x)}


def _money_cell(m: Money) -> dict[str, Any]:
    return {"raw": raw(m.value) if m.value is not None else "", "value": m.text()}


def cells(n: Mapping[str, Any]) -> dict[str, Any]:
    calls = n["calls"]
    marked = bool(n["cached"] or n["bases"])
    why = "; ".join(([f"includes what the cached {', '.join(n['cached'])} cost to compute"] if n["cached"] else [])
                    + list(n["bases"]))
    return {
        "offline": {"raw": raw(n["offline"]), "value": _fmt_seconds(n["offline"]) + ("*" if marked else ""),
                    "title": why},
        "offline_cpu": {"raw": raw(n["offline_cpu"]), "value": _fmt_seconds(n["offline_cpu"])},
        "online": {"raw": raw(n["online"]), "value": _fmt_seconds(n["online"])},
        "online_cpu": {"raw": raw(n["online_cpu"]), "value": _fmt_seconds(n["online_cpu"])},
        "run": {"raw": raw(n["run"]), "value": _fmt_seconds(n["run"])},
        "model": {"raw": raw(n["model"]), "value": _fmt_seconds(n["model"])},
        "qps": {"raw": raw(n["qps"]), "value": f"{n['qps']:,.1f}" if n["qps"] is not None else DASH},
        "calls": {"raw": raw(calls), "value": fmt_count(calls) if calls else DASH},
        "hits": {"raw": raw(n["hits"]), "value": fmt_count(n["hits"]) if calls else DASH},
        "prompt": _tokens_cell(n, "prompt"),
        "completion": _tokens_cell(n, "completion"),
        "usd": _money_cell(n["usd"]),
        "cold_usd": _money_cell(n["cold_usd"]),
    }


DATA_FIELDS = ["retriever", "benchmark", "seeds", "offline_s", "online_s", "total_s", "run_s", "model_s", "cached",
               "cold_basis", "offline_cpu_s", "online_cpu_s", "queries_per_s", "llm_calls", "cache_hits",
               "prompt_tokens", "completion_tokens", "usd", "usd_known", "usd_unknown_calls", "cold_usd",
               "cold_usd_known", "command", "trained_on", "training_overlap", "model_facts"]


def data_row(label: str, benchmark: str, seeds: int, n: Mapping[str, Any], command: str = "") -> dict[str, Any]:
    """A row of the page's CSV/JSON: the figures of its table row, unrounded."""
    total = None if n["offline"] is None and n["online"] is None else (n["offline"] or 0.0) + (n["online"] or 0.0)
    return {"retriever": label, "benchmark": benchmark, "seeds": seeds, "offline_s": n["offline"],
            "online_s": n["online"], "total_s": total, "run_s": n["run"], "model_s": n["model"],
            "cached": ";".join(n["cached"]), "cold_basis": "; ".join(n["bases"]),
            "offline_cpu_s": n["offline_cpu"], "online_cpu_s": n["online_cpu"], "queries_per_s": n["qps"],
            "llm_calls": n["calls"], "cache_hits": n["hits"], "prompt_tokens": n["prompt"],
            "completion_tokens": n["completion"], **n["usd"].fields("usd"), **n["cold_usd"].fields("cold_usd"),
            "command": command}


def _total(ns: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Sums over a configuration's benchmarks of the per-benchmark means; queries/s over all together."""
    def add(k: str) -> float | None:
        xs = [n[k] for n in ns if n[k] is not None]
        return sum(xs) if xs else None

    timed = [(n["items"], n["online"]) for n in ns if n["online"] is not None and n["items"] is not None]
    online_s = sum(x for _, x in timed)
    return {**{k: add(k) for k in ("offline", "online", "offline_cpu", "online_cpu", "model", "run")},
            "qps": sum(i for i, _ in timed) / online_s if online_s > 0 else None,
            **{k: sum(n[k] for n in ns) for k in ("calls", "hits", "prompt", "completion")},
            "tokens_unknown": any(n["tokens_unknown"] for n in ns),
            "usd": sum((n["usd"] for n in ns), Money()), "cold_usd": sum((n["cold_usd"] for n in ns), Money()),
            "cached": sorted({c for n in ns for c in n["cached"]}), "bases": sorted({b for n in ns for b in n["bases"]})}


def paper_view(site: Site, costs: Costs) -> dict[str, Any] | None:
    """``audit --view paper`` on the board's results: per method over the paper's settings."""
    try:
        paper, settings = paper_settings(suites())
    except (ValueError, RegistryError):
        return None
    rows = paper_rows(site.board.records, settings, costs)
    if not rows:
        return None
    out = []
    for r in rows:
        cells = []
        for st in settings:
            c = r["settings"][st]
            if c["time_s"] is None:
                cells.append({"raw": "", "value": c["missing"], "title": c["missing"], "missing": True})
                continue
            cells.append({"raw": raw(c["time_s"]), "missing": False, "title": c["cold_basis"],
                          "value": f"{_fmt_seconds(c['time_s'])}{'*' if c['cold_basis'] or c.get('cached') else ''} s · "
                                   f"{Money.from_fields(c).text()} · {fmt_count(c['tokens_k_known'] * 1000)} tok"})
        total = Money.from_fields(r)
        out.append({"method": r["method"], "slug": site.retriever_slugs.get(r["method"], ""), "cells": cells,
                    "total": {"raw": raw(r["time_s"]), "value": ("≥ " if r["missing"] else "") +
                              f"{_fmt_seconds(r['time_s_known'])} s · {total.text()}",
                              "title": ("missing: " + ", ".join(r["missing"])) if r["missing"] else ""}})
    return {"name": paper, "settings": settings, "rows": out, "data": site.data_files("efficiency-paper", [
        {k: v for k, v in row.items()} for row in _flat(rows)])}


def _flat(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from harness.cost.audit import paper_csv_rows

    return paper_csv_rows(rows)


def cost_svg(site: Site, suite: Any, costs: Costs, href: Callable[[str], str], dollars: bool = False) -> str:
    """The suite's first headline measure (mean over its headline benchmarks, as on the overview)
    against cold seconds per 1,000 queries (mean over the same benchmarks of each one's cold offline
    + online seconds ÷ its queries × 1,000) — with ``dollars``, against cold dollars per 1,000
    queries, of the rows whose results called an LLM (a row with an unknown price has no point) —
    Pareto frontier drawn, log-scaled when the x values span two decades or more; ``href(label)``:
    where a point links. Empty when no row has both."""
    first = suite.first
    if first is None:
        return ""
    per_bench = {b.name: {g.display: g for g in b.groups} for b in site.board.benchmarks}

    def amount(rec: Any) -> float | None:
        c = costs.of(rec)
        if not dollars:
            return c.total_s
        return c.cold_usd.value if rec.llm_calls and not c.cold_usd.unknown else None

    points = []
    for row in suite.rows:
        rates = []
        for bname in suite.headline_benchmarks:
            g = per_bench.get(bname, {}).get(row.label)
            if g is None:
                continue
            ts = [(amount(r), costs.of(r).online_items or r.n_queries) for r in g.records]
            ts = [(t, q) for t, q in ts if t is not None and q]
            if ts:
                rates.append(sum(t / q for t, q in ts) / len(ts) * 1000)
        x = sum(rates) / len(rates) if rates and len(rates) == len(suite.headline_benchmarks) else None
        points.append(Point(row.label, x, row.means.get(first), href(row.label),
                            "chance" if row.chance else "ranked" if row.ranked else "apart"))
    if not any(p.x is not None and p.y is not None for p in points):
        return ""
    what = "cold $ / 1,000 queries" if dollars else "cold s / 1,000 queries"
    return scatter_svg(points, title=f"{suite.name}: {first} against {what.replace('/', 'per')}",
                       x_label=what, y_label=first, x_higher=False,
                       y_higher=measure_higher_is_better(first), x_log=None)


def cost_points(site: Site, costs: Costs) -> list[dict[str, Any]]:
    """:func:`cost_svg` of each suite with a headline; a point links to its row of the totals table."""
    out = []
    for suite in site.board.suites:
        link = lambda label: f"#efficiency-totals-row-{site.retriever_slugs[label]}"  # noqa: E731
        svg = cost_svg(site, suite, costs, link)
        if svg:
            out.append({"suite": suite.name, "svg": svg, "usd": {"svg": cost_svg(site, suite, costs, link, dollars=True)}})
    return out


def view(site: Site) -> dict[str, Any]:
    costs = Costs(site.board.all_records)  # (a second-stage result may have computed what another reuses)
    rows, data = [], []
    per_label: dict[str, list[dict[str, Any]]] = {}
    for b in site.board.benchmarks:
        for g in b.groups:
            n = numbers(g, costs)
            command = rowfacts.command([g])  # a folder benchmark by its folder name, never its path
            facts = rowfacts.data_fields([g])
            rows.append({"label": g.display, "slug": site.retriever_slugs[g.display],
                         "benchmark": b.section.display or b.name, "command": command,
                         "bench_slug": b.slug, "seeds": str(len(g.records)), **cells(n)})
            data.append({**data_row(g.display, b.section.display or b.name, len(g.records), n, command),
                         **{k: facts[k] for k in ("trained_on", "training_overlap", "model_facts")}})
            per_label.setdefault(g.display, []).append(n)
    total_rows, total_data = [], []
    for label, ns in sorted(per_label.items()):
        num = _total(ns)
        total_rows.append({"label": label, "slug": site.retriever_slugs[label], "benchmarks": str(len(ns)),
                           "anchor": f"efficiency-totals-row-{site.retriever_slugs[label]}", **cells(num)})
        total_data.append(data_row(label, f"total ({len(ns)} benchmarks)", 0, num))
    return {"rows": rows, "totals": total_rows, "paper": paper_view(site, costs),
            "tradeoffs": cost_points(site, costs),
            "data": site.data_files("efficiency-results", data, DATA_FIELDS),
            "totals_data": site.data_files("efficiency-totals", total_data, DATA_FIELDS)}


def render(site: Site) -> None:
    site.page("efficiency.html", "efficiency.html", eff=view(site))
