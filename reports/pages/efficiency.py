"""``efficiency.html``: time, LLM calls, tokens and dollars per configuration × benchmark (means
over seeds), with totals per configuration."""

from __future__ import annotations

from typing import Any, Mapping

from harness.ledger import call_totals, phase_totals

from ..compare import ConfigGroup
from ..text import DASH, finite
from .common import Site, fmt_count, mean, raw


def _fmt_seconds(x: float | None) -> str:
    if not finite(x):
        return DASH
    return f"{x:,.2f}" if x < 1000 else f"{x:,.0f}"


def _fmt_usd(x: float) -> str:
    if x == 0:
        return "$0"
    return f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def numbers(g: ConfigGroup) -> dict[str, Any]:
    offline, online, items, calls, hits, pt, ct, usd = [], [], [], [], [], [], [], []
    qps, offline_cpu, online_cpu, model = [], [], [], []
    unknown = tokens_unknown = False
    for r in g.records:
        t = phase_totals(r.phases)
        if t["offline_s"] is not None:
            offline.append(t["offline_s"])
            offline_cpu.append(t["offline_cpu_s"])
        if t["model_s"] is not None:
            model.append(t["model_s"])
        if t["online_s"] is not None:
            online.append(t["online_s"])
            online_cpu.append(t["online_cpu_s"])
            n = t["online_items"] or r.n_queries
            items.append(n)
            if t["online_s"] > 0:
                qps.append(n / t["online_s"])
        c = call_totals(r.llm_calls)
        calls.append(c["calls"])
        hits.append(c["cache_hits"])
        pt.append(c["prompt_tokens_known"])
        ct.append(c["completion_tokens_known"])
        tokens_unknown = tokens_unknown or c["usage_unknown_calls"] > 0
        if c["usd"] is None:
            unknown = True
        else:
            usd.append(c["usd"])
    return {
        "offline": mean(offline), "online": mean(online), "items": mean(items), "qps": mean(qps),
        "offline_cpu": mean(offline_cpu), "online_cpu": mean(online_cpu), "model": mean(model),
        "calls": mean(calls) or 0.0, "hits": mean(hits) or 0.0, "prompt": mean(pt) or 0.0,
        "completion": mean(ct) or 0.0, "tokens_unknown": tokens_unknown,
        "usd": None if unknown else (mean(usd) or 0.0),
    }


def _tokens_cell(n: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Token counts: the known part, as "≥ N" (or "unknown") when some call reported none."""
    x = n[key]
    if not n["calls"]:
        return {"raw": raw(x), "value": DASH}
    if n["tokens_unknown"]:
        return {"raw": "", "value": f"≥ {fmt_count(x)}" if x else "unknown"}
    return {"raw": raw(x), "value": fmt_count(x)}


def cells(n: Mapping[str, Any]) -> dict[str, Any]:
    calls = n["calls"]
    return {
        "offline": {"raw": raw(n["offline"]), "value": _fmt_seconds(n["offline"])},
        "offline_cpu": {"raw": raw(n["offline_cpu"]), "value": _fmt_seconds(n["offline_cpu"])},
        "online": {"raw": raw(n["online"]), "value": _fmt_seconds(n["online"])},
        "online_cpu": {"raw": raw(n["online_cpu"]), "value": _fmt_seconds(n["online_cpu"])},
        "model": {"raw": raw(n["model"]), "value": _fmt_seconds(n["model"])},
        "qps": {"raw": raw(n["qps"]), "value": f"{n['qps']:,.1f}" if n["qps"] is not None else DASH},
        "calls": {"raw": raw(calls), "value": fmt_count(calls) if calls else DASH},
        "hits": {"raw": raw(n["hits"]), "value": fmt_count(n["hits"]) if calls else DASH},
        "prompt": _tokens_cell(n, "prompt"),
        "completion": _tokens_cell(n, "completion"),
        "usd": {"raw": raw(n["usd"]) if n["usd"] is not None else "",
                "value": "unknown" if n["usd"] is None else _fmt_usd(n["usd"])},
    }


def view(site: Site) -> dict[str, Any]:
    rows = []
    totals: dict[str, dict[str, Any]] = {}
    for b in site.board.benchmarks:
        for g in b.groups:
            n = numbers(g)
            rows.append({"label": g.display, "slug": site.retriever_slugs[g.display],
                         "benchmark": b.section.display or b.name,
                         "bench_slug": b.slug, "seeds": str(len(g.records)), **cells(n)})
            t = totals.setdefault(g.display, {"benchmarks": 0, "offline": [], "online": [], "items": [],
                                              "offline_cpu": [], "online_cpu": [], "model": [],
                                              "calls": 0.0, "hits": 0.0, "prompt": 0.0, "completion": 0.0,
                                              "tokens_unknown": False, "usd": 0.0})
            t["benchmarks"] += 1
            for k in ("offline", "online", "offline_cpu", "online_cpu", "model"):
                if n[k] is not None:
                    t[k].append(n[k])
            if n["online"] is not None and n["items"] is not None:
                t["items"].append((n["items"], n["online"]))
            for k in ("calls", "hits", "prompt", "completion"):
                t[k] += n[k]
            t["tokens_unknown"] = t["tokens_unknown"] or n["tokens_unknown"]
            t["usd"] = None if (t["usd"] is None or n["usd"] is None) else t["usd"] + n["usd"]
    total_rows = []
    for label, t in totals.items():
        online_s = sum(s for _, s in t["items"])
        num = {
            "offline": sum(t["offline"]) if t["offline"] else None,
            "online": sum(t["online"]) if t["online"] else None,
            "offline_cpu": sum(t["offline_cpu"]) if t["offline_cpu"] else None,
            "online_cpu": sum(t["online_cpu"]) if t["online_cpu"] else None,
            "model": sum(t["model"]) if t["model"] else None,
            "qps": (sum(i for i, _ in t["items"]) / online_s) if online_s > 0 else None,
            "calls": t["calls"], "hits": t["hits"], "prompt": t["prompt"], "completion": t["completion"],
            "tokens_unknown": t["tokens_unknown"], "usd": t["usd"],
        }
        total_rows.append({"label": label, "slug": site.retriever_slugs[label], "benchmarks": str(t["benchmarks"]),
                           **cells(num)})
    total_rows.sort(key=lambda r: r["label"])
    return {"rows": rows, "totals": total_rows}


def render(site: Site) -> None:
    site.page("efficiency.html", "efficiency.html", eff=view(site))
