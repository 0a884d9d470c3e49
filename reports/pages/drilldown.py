"""``retriever/<slug>/<bench-slug>-seed<N>.html``: the per-query drill-down of one result — the
first :data:`DRILLDOWN_QUERIES` queries, the top :data:`DRILLDOWN_DEPTH` documents of each, marked
satisfying / violating / topical / non-relevant / unjudged from the judgments the store keeps.

The page itself is small: a header and a pager. The queries are rendered in the browser, a page of
:data:`PER_PAGE` at a time, by the constant ``templates/_drilldown.js`` from two data files the
page loads with ``<script src>`` (so it works from ``file://``, where a page cannot fetch JSON):

* ``data/content/<bench-slug>-<version>.js``: the query texts (``[query id, text]`` pairs) and the
  title and snippet of every document some shown ranking of that benchmark version has in its top
  :data:`DRILLDOWN_DEPTH` (``[doc id, title, snippet]``), written once per version however many
  results use it. Ids are never object keys in the data, so any id (``__proto__`` too) reads back
  as itself; the script looks them up in ``Map`` objects;
* ``data/<retriever-slug>/<bench-slug>-seed<N>.js``: this result's rankings (document indices,
  scores, mark indices) and per-query values of the benchmark's headline measures.

Each data file is one assignment, ``window.BEYONDSIM.<content|result> = <JSON>;``, with the JSON
ASCII-escaped; :func:`read_data` reads one back. A board of hundreds of results thus weighs tens
of kilobytes per result instead of megabytes, and stays responsive however many queries it has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.store.results import CONTENT_DEPTH, ResultRecord, Store

from ..compare import BenchmarkComparison, PerQuery
from ..text import finite, fmt_num, measure_decimals, measure_per_query, slugify
from . import downloads
from .page import TEMPLATES, Site, write

DRILLDOWN_QUERIES = 200
DRILLDOWN_DEPTH = CONTENT_DEPTH  # the documents the runner keeps and an export carries
PER_PAGE = 25  # queries rendered at a time

MARK_TEXT = {"satisfying": "✓ satisfying", "violating": "✗ violating", "topical": "~ topical",
             "non-relevant": "○ non-relevant", "unjudged": "· unjudged", "unknown": "? not stored"}
MARKS = list(MARK_TEXT)
DATA_RE = re.compile(r"^window\.BEYONDSIM\.(content|result) = (.*);\s*$", re.S)


def drilldown_script() -> str:
    """The text of the drill-down's inline script (the same on every drill-down page)."""
    return (TEMPLATES / "_drilldown.js").read_text(encoding="utf-8")


def data_text(kind: str, value: Any) -> str:
    """One data file: a prelude that makes ``window.BEYONDSIM`` and one assignment of ASCII JSON
    (no character of it can end a script or a string early)."""
    body = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return f"window.BEYONDSIM = window.BEYONDSIM || {{}};\nwindow.BEYONDSIM.{kind} = {body};\n"


def read_data(path: Path) -> tuple[str, Any]:
    """``(kind, value)`` of a data file written by :func:`data_text`."""
    text = Path(path).read_text(encoding="utf-8").split("\n", 1)[1]
    m = DATA_RE.match(text)
    if m is None:
        raise ValueError(f"{path}: not a drill-down data file")
    return m.group(1), json.loads(m.group(2))


def page_data(site_dir: Path, rel: str) -> dict[str, Any]:
    """What the drill-down page ``rel`` of the site in ``site_dir`` renders: ``{"content": …,
    "result": …}`` read from the data files it loads (for tests and other readers)."""
    page = Path(site_dir) / rel
    out: dict[str, Any] = {}
    for src in re.findall(r'<script src="([^"]+)"', page.read_text(encoding="utf-8")):
        kind, value = read_data((page.parent / src).resolve())
        out[kind] = value
    return out


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
    """Benchmark content from the store, read once per version; the documents each version's shown
    rankings need are gathered while the result pages are built and written once per version."""

    def __init__(self, store: Store):
        self.store = store
        self._queries: dict[str, list[dict[str, Any]]] = {}
        self._qrels: dict[str, tuple[dict[str, dict[str, int]], dict[str, set[str]]]] = {}
        self._qids: dict[str, list[str]] = {}
        self._qid_sets: dict[str, set[str]] = {}
        self._anchors: dict[str, dict[str, str]] = {}
        self.needed: dict[str, tuple[str, set[str], set[str]]] = {}  # version → (file, qids, docids)

    def queries(self, version: str) -> list[dict[str, Any]]:
        if version not in self._queries:
            self._queries[version] = self.store.queries_of(version)
            self._qids[version] = [q["qid"] for q in self._queries[version]]
            self._qid_sets[version] = set(self._qids[version])
        return self._queries[version]

    def qids(self, version: str) -> list[str]:
        self.queries(version)
        return self._qids[version]

    def qid_set(self, version: str) -> set[str]:
        self.queries(version)
        return self._qid_sets[version]

    def anchor(self, version: str, qid: str, used: set[str]) -> str:
        """The element id of a query on a drill-down page (a slug, unique on the page)."""
        base = self._anchors.setdefault(version, {}).get(qid)
        if base is None:
            base = self._anchors[version][qid] = slugify("q-" + slugify(qid))
        if base not in used:
            used.add(base)
            return base
        return slugify(base, used)

    def qrels(self, version: str) -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
        if version not in self._qrels:
            self._qrels[version] = self.store.qrels_of(version)
        return self._qrels[version]

    def file_of(self, version: str, bench_slug: str) -> str:
        """The content file of ``version`` (a path from the site root)."""
        if version not in self.needed:
            name = f"{bench_slug}-{slugify(version)[:12]}"
            used = {f for f, _, _ in self.needed.values()}
            rel = f"data/content/{name}.js"
            n = 2
            while rel in used:
                rel, n = f"data/content/{name}-{n}.js", n + 1
            self.needed[version] = (rel, set(), set())
        return self.needed[version][0]

    def write(self, site: Site) -> None:
        for version, (rel, qids, docids) in self.needed.items():
            texts = {q["qid"]: q["text"] for q in self.queries(version) if q["qid"] in qids}
            docs = self.store.documents_of(version, docids) if docids else {}
            # ids are data, never keys: a query or document named "__proto__" or "constructor" would
            # otherwise be read back from the object as the object's own machinery
            write(site.out_dir / rel, data_text("content", {
                "queries": [[q, t] for q, t in texts.items()],
                "docs": [[d, t, s] for d, (t, s) in sorted(docs.items())]}))
            site.written.add(rel)


def view(store: Store, content: Content, rec: ResultRecord, b: BenchmarkComparison,
         measures: Sequence[str], pq: PerQuery) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(page view, result data)`` of one result's drill-down."""
    version = rec.benchmark_version
    queries = content.queries(version)
    rel, viol = content.qrels(version)
    has_text = bool(queries)
    has_qrels = bool(rel) or bool(viol)
    graded = any(g >= 2 for docs in rel.values() for g in docs.values())
    ranked = store.ranked_qids(int(rec.id or 0))
    per_query = pq.result(rec)
    if has_text:
        qids = content.qids(version)
        known = content.qid_set(version)
        extra = [q for q in ranked if q not in known]
        if extra:
            qids = qids + extra
    else:
        qids = list(ranked)
        seen = set(qids)
        for m in measures:
            for q in per_query.get(m, {}):
                if q not in seen and measure_per_query(m):
                    qids.append(q)
                    seen.add(q)
    total = len(qids)
    shown = qids[:DRILLDOWN_QUERIES]
    rankings = store.rankings(int(rec.id or 0), shown)
    content_file = content.file_of(version, b.slug)
    _, want_q, want_d = content.needed[version]
    want_q.update(shown)
    docids: list[str] = []
    doc_index: dict[str, int] = {}
    counts = {k: 0 for k in MARK_TEXT}
    used: set[str] = set()
    out_queries = []
    for q in shown:
        grades = rel.get(q, {})
        vq = viol.get(q, set())
        top = []
        for d, score in rankings.get(q, [])[:DRILLDOWN_DEPTH]:
            mark = judge_mark(d, grades, vq, graded) if has_qrels else "unknown"
            counts[mark] += 1
            if d not in doc_index:
                doc_index[d] = len(docids)
                docids.append(d)
            top.append([doc_index[d], f"{float(score):.4f}" if finite(score) else None, MARKS.index(mark)])
        want_d.update(d for d, _ in rankings.get(q, [])[:DRILLDOWN_DEPTH])
        values = [fmt_num(per_query[m][q], measure_decimals(m)) if q in per_query.get(m, {}) else None
                  for m in measures]
        out_queries.append({"q": q, "a": content.anchor(version, q, used), "m": values, "t": top,
                            "r": q in rankings, "j": len(grades), "v": len(vq)})
    data = {"measures": list(measures), "docids": docids, "marks": MARKS, "mark_text": MARK_TEXT,
            "has_qrels": has_qrels, "per_page": PER_PAGE, "queries": out_queries}
    page = {
        "benchmark": b.section.display or b.name, "bench_slug": b.slug, "version": version, "seed": rec.seed,
        "k": rec.k, "has_text": has_text, "has_qrels": has_qrels, "graded": graded,
        "total": total, "n_shown": len(shown), "capped": total > len(shown), "cap": DRILLDOWN_QUERIES,
        "depth": DRILLDOWN_DEPTH, "per_page": PER_PAGE, "content_file": content_file,
        "counts": [{"mark": k, "text": MARK_TEXT[k], "n": v} for k, v in counts.items() if v],
        "counters": ledger_counters(rec),
    }
    return page, data


def ledger_counters(rec: ResultRecord) -> list[dict[str, Any]]:
    """The method's own counts in the result's ledger (``extra["counters"]``, e.g. how many of NS-IR's
    logic forms fell back to the text itself, or how many DEO decompositions fell back to the query),
    by name; a value that is not a whole number is left out, never printed as one."""
    raw = rec.extra.get("counters") if isinstance(rec.extra, Mapping) else None
    if not isinstance(raw, Mapping):
        return []
    return [{"name": str(k), "n": v} for k, v in sorted(raw.items(), key=lambda kv: str(kv[0]))
            if isinstance(v, int) and not isinstance(v, bool)]


def render(site: Site) -> None:
    content = Content(site.store)
    for label in site.board.labels():
        slug = site.retriever_slugs[label]
        for b, g in site.board.rows_of(label):
            for r in g.records:
                page_rel = site.drilldowns[int(r.id or 0)]
                data_rel = "data/" + page_rel.split("/", 1)[1][:-len(".html")] + ".js"
                dd, data = view(site.store, content, r, b, b.headline, site.board.per_query)
                write(site.out_dir / data_rel, data_text("result", data))
                site.written.add(data_rel)
                dd["downloads"] = downloads.query_files(site, r)
                site.page("drilldown.html", page_rel, label=label, slug=slug, dd=dd, data_file=data_rel)
    content.write(site)
