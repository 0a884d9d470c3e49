"""``retriever/<slug>/<bench-slug>-seed<N>.html``: the per-query drill-down of one result — the
first :data:`DRILLDOWN_QUERIES` queries, the top :data:`DRILLDOWN_DEPTH` documents of each, marked
satisfying / violating / topical / non-relevant / unjudged from the judgments the store keeps."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from harness.store import CONTENT_DEPTH, ResultRecord, Store

from ..compare import BenchmarkComparison, PerQuery
from ..text import DASH, finite, fmt_num, measure_decimals, measure_per_query, slugify
from .common import Site

DRILLDOWN_QUERIES = 200
DRILLDOWN_DEPTH = CONTENT_DEPTH  # the documents the runner keeps and an export carries

MARK_TEXT = {"satisfying": "✓ satisfying", "violating": "✗ violating", "topical": "~ topical",
             "non-relevant": "○ non-relevant", "unjudged": "· unjudged", "unknown": "? not stored"}


def judge_mark(docid: str, grades: Mapping[str, int], violating: Iterable[str], graded: bool) -> str:
    """``violating`` (in the query's violating set), ``satisfying`` (grade ≥ 1, or 2 on a graded
    benchmark), ``topical`` (grade 1 on a graded benchmark), ``non-relevant`` (grade 0) or
    ``unjudged``."""
    if docid in violating:
        return "violating"
    g = grades.get(docid)
    if g is None:
        return "unjudged"
    if g >= (2 if graded else 1):
        return "satisfying"
    return "topical" if g >= 1 else "non-relevant"


class Content:
    """Benchmark content from the store, read once per version."""

    def __init__(self, store: Store):
        self.store = store
        self._queries: dict[str, list[dict[str, Any]]] = {}
        self._qrels: dict[str, tuple[dict[str, dict[str, int]], dict[str, set[str]]]] = {}

    def queries(self, version: str) -> list[dict[str, Any]]:
        if version not in self._queries:
            self._queries[version] = self.store.queries_of(version)
        return self._queries[version]

    def qrels(self, version: str) -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
        if version not in self._qrels:
            self._qrels[version] = self.store.qrels_of(version)
        return self._qrels[version]


def view(store: Store, content: Content, rec: ResultRecord, b: BenchmarkComparison,
         measures: Sequence[str], pq: PerQuery) -> dict[str, Any]:
    version = rec.benchmark_version
    queries = content.queries(version)
    rel, viol = content.qrels(version)
    has_text = bool(queries)
    has_qrels = bool(rel) or bool(viol)
    graded = any(g >= 2 for docs in rel.values() for g in docs.values())
    rankings = store.rankings(int(rec.id or 0))
    per_query = pq.result(rec)
    if has_text:
        qids = [q["qid"] for q in queries]
        texts = {q["qid"]: q["text"] for q in queries}
        known = set(qids)
        qids += [q for q in rankings if q not in known]
    else:
        texts = {}
        qids = list(rankings)
        seen = set(qids)
        for m in measures:
            for q in per_query.get(m, {}):
                if q not in seen and measure_per_query(m):
                    qids.append(q)
                    seen.add(q)
    total = len(qids)
    shown = qids[:DRILLDOWN_QUERIES]
    doc_ids = {d for q in shown for d, _ in rankings.get(q, [])[:DRILLDOWN_DEPTH]}
    docs = store.documents_of(version, doc_ids) if doc_ids else {}
    out_queries = []
    counts = {k: 0 for k in MARK_TEXT}
    for q in shown:
        grades = rel.get(q, {})
        vq = viol.get(q, set())
        top = []
        for rank, (d, score) in enumerate(rankings.get(q, [])[:DRILLDOWN_DEPTH], 1):
            mark = judge_mark(d, grades, vq, graded) if has_qrels else "unknown"
            counts[mark] += 1
            title, snippet = docs.get(d, ("", ""))
            top.append({"rank": rank, "doc": d, "title": title, "snippet": snippet, "stored": d in docs,
                        "score": f"{float(score):.4f}" if finite(score) else DASH, "mark": mark,
                        "mark_text": MARK_TEXT[mark]})
        qm = [{"name": m, "value": fmt_num(per_query[m][q], measure_decimals(m))}
              for m in measures if q in per_query.get(m, {})]
        out_queries.append({"qid": q, "anchor": "q-" + slugify(q), "text": texts.get(q, ""), "measures": qm,
                            "top": top, "in_run": q in rankings,
                            "n_judged": len(grades), "n_violating": len(vq)})
    used: set[str] = set()
    for oq in out_queries:  # unique anchors
        oq["anchor"] = slugify(oq["anchor"], used)
    return {
        "benchmark": b.name, "bench_slug": b.slug, "version": version, "seed": rec.seed, "k": rec.k,
        "has_text": has_text, "has_qrels": has_qrels, "graded": graded,
        "total": total, "n_shown": len(shown), "capped": total > len(shown), "cap": DRILLDOWN_QUERIES,
        "depth": DRILLDOWN_DEPTH, "queries": out_queries,
        "counts": [{"mark": k, "text": MARK_TEXT[k], "n": v} for k, v in counts.items() if v],
    }


def render(site: Site) -> None:
    content = Content(site.store)
    for label in site.board.labels():
        slug = site.retriever_slugs[label]
        for b, g in site.board.rows_of(label):
            for r in g.records:
                dd = view(site.store, content, r, b, b.measures, site.board.per_query)
                site.page("drilldown.html", site.drilldowns[int(r.id or 0)], label=label, slug=slug, dd=dd)
