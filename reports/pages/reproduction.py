"""``reproduction.html``: the latest ``beyondsim reproduce`` matrix in the store: each expected
figure (our reference runs, and papers' figures on the same data and model), the figure
recomputed here, the difference, the tolerance and the status (OK, OKish, FAIL).

The page is written only when the store holds a reproduction run. This module comes first in
:data:`reports.pages.PAGES`: it sets the Jinja global ``reproduction_page``, which the site
navigation (``base.html``) links when it is defined, so every page of a render links it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..text import DASH, finite
from .page import Site, raw

PAGE = "reproduction.html"
STATUS_ORDER = ("FAIL", "OKish", "OK")
KIND_ORDER = ("reference", "published", "direction")
_NOTES = {
    "OK": "equal to the expected figure (within 1e-4, or the row's tolerance when that is smaller)",
    "OKish": "within the row's tolerance, not equal",
    "FAIL": "outside the tolerance, not computed, or the run failed",
}


def _fixed(x: float | None, signed: bool = False) -> str:
    if not finite(x):
        return DASH
    return f"{x:+.6f}" if signed else f"{x:.6f}"


def _row(r: Mapping[str, Any], links: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    got = r["got"] if finite(r["got"]) else None
    diff = None if got is None else got - float(r["expected"])
    status = str(r["status"])
    return {
        "label": str(r["label"]), "retriever": str(r["retriever"]), "benchmark": str(r["benchmark"]),
        "version": str(r["benchmark_version"]), "spec_hash": str(r["spec_hash"]), "measure": str(r["measure"]),
        "expected": {"raw": raw(r["expected"]), "value": _fixed(r["expected"])},
        "got": {"raw": raw(got), "value": _fixed(got)},
        "diff": {"raw": raw(diff), "value": _fixed(diff, signed=True)},
        "tolerance": {"raw": raw(r["tolerance"]), "value": f"{float(r['tolerance']):g}"},
        "status": status, "status_class": "status-" + status.lower() if status in STATUS_ORDER else "status-other",
        "kind": str(r["kind"]), "source": str(r["source"]),
        "retriever_href": links["retrievers"].get(str(r["label"]), ""),
        "bench_href": links["benchmarks"].get(str(r["benchmark"]), ""),
    }


def papers(rows: Sequence[Mapping[str, Any]], reasons: Mapping[tuple[str, str, str, str], str]) -> list[dict[str, Any]]:
    """The published and direction rows grouped by paper, then table (their ``source`` is ``"<paper>,
    <table>"``, a direction row's followed by ``"; against <baseline>"``; a paper's name may hold
    ``", "``, a table's does not, :class:`harness.record.matrix.Table`), in the order they come,
    each with its reason (``reasons``: ``(label, benchmark, measure, source) → reason``)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["kind"] not in ("published", "direction"):
            continue
        source, _, against = r["source"].partition("; against ")
        paper, _, table = source.rpartition(", ")
        g = groups.setdefault((paper, table), {"paper": paper, "table": table, "rows": []})
        g["rows"].append({**r, "against": against,
                          "reason": reasons.get((r["label"], r["benchmark"], r["measure"], source), "")})
    return list(groups.values())


def matrix_reasons() -> dict[tuple[str, str, str, str], str]:
    """The reasons of the installed matrix's hand-written rows (the store keeps figures, not
    reasons), read by the model ``reproduce`` reads (:func:`harness.record.matrix.read_matrix`)."""
    from harness.registry import reference_files
    from harness.record.matrix import read_matrix

    try:
        path = reference_files().get("expected")
        rows = read_matrix(path) if path is not None else []
    except Exception:  # noqa: BLE001 - a page without reasons rather than no page
        return {}
    return {(r.label, r.benchmark, r.measure, r.source): r.reason for r in rows}


def view(rows: Sequence[Mapping[str, Any]], links: Mapping[str, Mapping[str, str]] | None = None,
         reasons: Mapping[tuple[str, str, str, str], str] | None = None) -> dict[str, Any]:
    """The matrix for the template: reference rows, then published ones, each by benchmark,
    retriever and measure; the counts of each status per kind; when the run was made; the
    published and direction rows again by paper and table with their reasons (:func:`papers`).
    ``links``: ``{"retrievers": {label: page}, "benchmarks": {name: page}}`` for the rows the site
    has pages for."""
    links = links or {"retrievers": {}, "benchmarks": {}}
    shown = sorted((_row(r, links) for r in rows),
                   key=lambda r: (KIND_ORDER.index(r["kind"]) if r["kind"] in KIND_ORDER else len(KIND_ORDER),
                                  r["benchmark"], r["label"], r["measure"], r["source"]))
    counts: dict[str, dict[str, int]] = {}
    for r in shown:
        c = counts.setdefault(r["kind"], {s: 0 for s in STATUS_ORDER})
        c[r["status"]] = c.get(r["status"], 0) + 1
    return {
        "rows": shown,
        "papers": papers([r for r in (_row(x, links) for x in rows)], reasons or {}),
        "counts": [{"kind": k, "text": ", ".join(f"{n} {s}" for s, n in c.items())} for k, c in counts.items()],
        "created_at": str(rows[0]["created_at"]) if rows else "",
        "run_id": str(rows[0]["run_id"]) if rows else "",
        "statuses": [{"status": s, "class": "status-" + s.lower(), "note": _NOTES[s]} for s in reversed(STATUS_ORDER)],
    }


def render(site: Site) -> None:
    rows = site.store.reproductions(latest=True)
    if not rows:
        return
    site.env.globals["reproduction_page"] = PAGE
    links = {"retrievers": {label: f"retriever/{slug}.html" for label, slug in site.retriever_slugs.items()},
             "benchmarks": {b.name: f"bench/{b.slug}.html" for b in site.board.benchmarks}}
    site.page("reproduction.html", PAGE, repro=view(rows, links, matrix_reasons()))
