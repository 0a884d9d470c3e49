"""The results store: SQLite in WAL mode (DESIGN.md §9).

A result is keyed by ``(retriever spec hash, benchmark version, seed, depth k, harness version)``.
Each result is written in one transaction — a crash leaves the whole result or none of it.
Tables: ``results`` (spec, benchmark, seed, versions, environment, provenance), ``measures``
(mean, count, 95% CI), ``query_measures``, ``phases`` (wall/CPU seconds), ``llm_calls``,
``rankings`` (the stored run, for drill-down and re-evaluation), ``benchmarks`` (what the
reports need to know about each benchmark without loading it), ``sweeps``, and the content the
per-query drill-down shows: ``bench_queries`` (texts and metadata), ``bench_qrels`` (grades and
violating flags) and ``bench_documents`` (title and a snippet of each document that appears in a
stored top 10). Tables are created ``IF NOT EXISTS``, so an older store gains them when opened.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator, Mapping, TextIO

EXPORT_SCHEMA = 2  # 2: adds the "benchmark_content" lines (drill-down content); result lines as in 1
IMPORT_SCHEMAS = (1, 2)
CONTENT_KIND = "benchmark_content"
CONTENT_DEPTH = 10  # documents kept (title + snippet) per stored ranking, for the drill-down

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  retriever TEXT NOT NULL,
  label TEXT NOT NULL,
  spec_hash TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  benchmark_version TEXT NOT NULL,
  seed INTEGER NOT NULL,
  k INTEGER NOT NULL,
  harness_version TEXT NOT NULL,
  created_at TEXT NOT NULL,
  n_queries INTEGER NOT NULL,
  n_missing INTEGER NOT NULL,
  environment_json TEXT NOT NULL DEFAULT '{}',
  provenance_json TEXT NOT NULL DEFAULT '{}',
  extra_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS results_bench ON results(benchmark);
CREATE TABLE IF NOT EXISTS measures (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  measure TEXT NOT NULL,
  mean REAL,
  n INTEGER NOT NULL,
  ci_low REAL,
  ci_high REAL,
  PRIMARY KEY (result_id, measure)
);
CREATE TABLE IF NOT EXISTS query_measures (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  measure TEXT NOT NULL,
  qid TEXT NOT NULL,
  value REAL NOT NULL,
  PRIMARY KEY (result_id, measure, qid)
);
CREATE TABLE IF NOT EXISTS phases (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  phase TEXT NOT NULL,
  wall_s REAL NOT NULL,
  cpu_s REAL NOT NULL,
  items INTEGER NOT NULL,
  PRIMARY KEY (result_id, phase)
);
CREATE TABLE IF NOT EXISTS llm_calls (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  model TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  latency_s REAL NOT NULL,
  cached INTEGER NOT NULL,
  usd REAL,
  phase TEXT NOT NULL,
  purpose TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_calls_result ON llm_calls(result_id);
CREATE TABLE IF NOT EXISTS rankings (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  qid TEXT NOT NULL,
  docids_json TEXT NOT NULL,
  scores_json TEXT NOT NULL,
  PRIMARY KEY (result_id, qid)
);
CREATE TABLE IF NOT EXISTS benchmarks (
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  task TEXT NOT NULL,
  default_measures_json TEXT NOT NULL,
  stats_json TEXT NOT NULL,
  description TEXT NOT NULL,
  source TEXT NOT NULL,
  license TEXT NOT NULL,
  PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS sweeps (
  key TEXT PRIMARY KEY,
  retriever TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  benchmark_version TEXT NOT NULL,
  seed INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  data_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_queries (
  benchmark TEXT NOT NULL,
  version TEXT NOT NULL,
  qid TEXT NOT NULL,
  pos INTEGER NOT NULL,
  text TEXT NOT NULL,
  meta_json TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (version, qid)
);
CREATE TABLE IF NOT EXISTS bench_qrels (
  version TEXT NOT NULL,
  qid TEXT NOT NULL,
  docid TEXT NOT NULL,
  grade INTEGER,
  violating INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (version, qid, docid)
);
CREATE TABLE IF NOT EXISTS bench_documents (
  version TEXT NOT NULL,
  docid TEXT NOT NULL,
  title TEXT NOT NULL DEFAULT '',
  snippet TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (version, docid)
);
"""
SCHEMA_VERSION = 1
SNIPPET_CHARS = 300


def result_key(spec_hash: str, benchmark_version: str, seed: int, k: int, harness_version: str) -> str:
    raw = json.dumps([spec_hash, benchmark_version, int(seed), int(k), harness_version])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


@dataclass
class MeasureValue:
    mean: float | None
    n: int
    ci_low: float | None = None
    ci_high: float | None = None


@dataclass
class ResultRecord:
    """Everything one (retriever, benchmark, seed) evaluation produced."""

    key: str
    retriever: str
    label: str
    spec_hash: str
    spec: dict[str, Any]
    benchmark: str
    benchmark_version: str
    seed: int
    k: int
    harness_version: str
    n_queries: int
    n_missing: int
    measures: dict[str, MeasureValue]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    rankings: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    id: int | None = None


@dataclass
class BenchmarkInfo:
    name: str
    version: str
    task: str
    default_measures: list[str]
    stats: dict[str, Any]
    description: str = ""
    source: str = ""
    license: str = ""


def _nan_to_none(x: float | None) -> float | None:
    return None if x is None or x != x else float(x)


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(SCHEMA)
        self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        return self._conn.execute("SELECT 1 FROM results WHERE key=?", (key,)).fetchone() is not None

    def save_benchmark(self, info: BenchmarkInfo) -> None:
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO benchmarks VALUES (?,?,?,?,?,?,?,?)",
                (info.name, info.version, info.task, json.dumps(list(info.default_measures)),
                 json.dumps(info.stats), info.description, info.source, info.license),
            )

    def save(self, rec: ResultRecord, *, replace: bool = False) -> int:
        """Write one result atomically. An existing key is an error unless ``replace``."""
        created = rec.created_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        with self._conn:  # one transaction: all rows or none
            if replace:
                self._conn.execute("DELETE FROM results WHERE key=?", (rec.key,))
            cur = self._conn.execute(
                "INSERT INTO results (key, retriever, label, spec_hash, spec_json, benchmark, benchmark_version,"
                " seed, k, harness_version, created_at, n_queries, n_missing, environment_json, provenance_json,"
                " extra_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (rec.key, rec.retriever, rec.label, rec.spec_hash, json.dumps(rec.spec, sort_keys=True),
                 rec.benchmark, rec.benchmark_version, rec.seed, rec.k, rec.harness_version, created,
                 rec.n_queries, rec.n_missing, json.dumps(rec.environment, sort_keys=True),
                 json.dumps(rec.provenance, sort_keys=True), json.dumps(rec.extra, sort_keys=True)),
            )
            rid = int(cur.lastrowid)
            self._conn.executemany(
                "INSERT INTO measures VALUES (?,?,?,?,?,?)",
                [(rid, m, _nan_to_none(v.mean), v.n, _nan_to_none(v.ci_low), _nan_to_none(v.ci_high))
                 for m, v in rec.measures.items()],
            )
            self._conn.executemany(
                "INSERT INTO query_measures VALUES (?,?,?,?)",
                [(rid, m, q, float(v)) for m, col in rec.per_query.items() for q, v in col.items()],
            )
            self._conn.executemany(
                "INSERT INTO phases VALUES (?,?,?,?,?)",
                [(rid, p, float(v.get("wall_s", 0)), float(v.get("cpu_s", 0)), int(v.get("items", 0)))
                 for p, v in rec.phases.items()],
            )
            self._conn.executemany(
                "INSERT INTO llm_calls VALUES (?,?,?,?,?,?,?,?,?)",
                [(rid, c["model"], int(c["prompt_tokens"]), int(c["completion_tokens"]), float(c["latency_s"]),
                  int(bool(c["cached"])), c.get("usd"), c.get("phase", ""), c.get("purpose", ""))
                 for c in rec.llm_calls],
            )
            self._conn.executemany(
                "INSERT INTO rankings VALUES (?,?,?,?)",
                [(rid, q, json.dumps([d for d, _ in r]), json.dumps([round(float(s), 7) for _, s in r]))
                 for q, r in rec.rankings.items()],
            )
        rec.id, rec.created_at = rid, created
        return rid

    def delete(self, key: str) -> None:
        with self._conn:
            self._conn.execute("DELETE FROM results WHERE key=?", (key,))

    # -- reading ---------------------------------------------------------------------------------

    def _row_to_record(self, row: sqlite3.Row, *, full: bool = False) -> ResultRecord:
        rid = int(row["id"])
        measures = {
            r["measure"]: MeasureValue(r["mean"], r["n"], r["ci_low"], r["ci_high"])
            for r in self._conn.execute("SELECT * FROM measures WHERE result_id=?", (rid,))
        }
        phases = {
            r["phase"]: {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "items": r["items"]}
            for r in self._conn.execute("SELECT * FROM phases WHERE result_id=?", (rid,))
        }
        rec = ResultRecord(
            key=row["key"], retriever=row["retriever"], label=row["label"], spec_hash=row["spec_hash"],
            spec=json.loads(row["spec_json"]), benchmark=row["benchmark"],
            benchmark_version=row["benchmark_version"], seed=row["seed"], k=row["k"],
            harness_version=row["harness_version"], n_queries=row["n_queries"], n_missing=row["n_missing"],
            measures=measures, phases=phases, environment=json.loads(row["environment_json"]),
            provenance=json.loads(row["provenance_json"]), extra=json.loads(row["extra_json"]),
            created_at=row["created_at"], id=rid,
        )
        rec.llm_calls = [
            {k: r[k] for k in ("model", "prompt_tokens", "completion_tokens", "latency_s", "usd", "phase", "purpose")}
            | {"cached": bool(r["cached"])}
            for r in self._conn.execute("SELECT * FROM llm_calls WHERE result_id=?", (rid,))
        ]
        if full:
            rec.per_query = self.per_query(rid)
            rec.rankings = self.rankings(rid)
        return rec

    def results(self, *, benchmark: str | None = None, retriever: str | None = None,
                full: bool = False) -> list[ResultRecord]:
        sql, args = "SELECT * FROM results WHERE 1=1", []
        if benchmark:
            sql += " AND benchmark=?"
            args.append(benchmark)
        if retriever:
            sql += " AND (retriever=? OR label=?)"
            args += [retriever, retriever]
        sql += " ORDER BY benchmark, label, seed, id"
        return [self._row_to_record(r, full=full) for r in self._conn.execute(sql, args).fetchall()]

    def get(self, key: str, *, full: bool = False) -> ResultRecord | None:
        row = self._conn.execute("SELECT * FROM results WHERE key=?", (key,)).fetchone()
        return self._row_to_record(row, full=full) if row else None

    def per_query(self, result_id: int, measure: str | None = None) -> dict[str, dict[str, float]]:
        sql, args = "SELECT measure, qid, value FROM query_measures WHERE result_id=?", [result_id]
        if measure:
            sql += " AND measure=?"
            args.append(measure)
        out: dict[str, dict[str, float]] = {}
        for r in self._conn.execute(sql, args):
            out.setdefault(r["measure"], {})[r["qid"]] = r["value"]
        return out

    def rankings(self, result_id: int, qids: Iterable[str] | None = None) -> dict[str, list[tuple[str, float]]]:
        rows = self._conn.execute("SELECT qid, docids_json, scores_json FROM rankings WHERE result_id=?", (result_id,))
        wanted = set(qids) if qids is not None else None
        out = {}
        for r in rows:
            if wanted is None or r["qid"] in wanted:
                out[r["qid"]] = list(zip(json.loads(r["docids_json"]), json.loads(r["scores_json"])))
        return out

    def benchmarks(self) -> list[BenchmarkInfo]:
        return [
            BenchmarkInfo(r["name"], r["version"], r["task"], json.loads(r["default_measures_json"]),
                          json.loads(r["stats_json"]), r["description"], r["source"], r["license"])
            for r in self._conn.execute("SELECT * FROM benchmarks ORDER BY name, version")
        ]

    # -- benchmark content (query texts, judgments, document snippets for the drill-down) ---------

    def has_benchmark_content(self, version: str) -> bool:
        return self._conn.execute("SELECT 1 FROM bench_queries WHERE version=? LIMIT 1",
                                  (version,)).fetchone() is not None

    def save_benchmark_content(self, name: str, version: str, queries: Iterable[Any],
                               qrels: Mapping[str, Mapping[str, int]],
                               violating: Mapping[str, Iterable[str]] | None = None) -> bool:
        """Keep a benchmark version's queries (objects with ``id``, ``text``, ``meta``, in order) and
        judgments: graded relevance plus the violating flag (a violating document without a grade
        is kept with grade ``NULL``). Written once per version; returns False when already stored."""
        if self.has_benchmark_content(version):
            return False
        rows: dict[tuple[str, str], list[Any]] = {}
        for q, docs in qrels.items():
            for d, g in docs.items():
                rows[(q, d)] = [None if g is None else int(g), 0]
        for q, docs in (violating or {}).items():
            for d in docs:
                rows.setdefault((q, d), [None, 0])[1] = 1
        with self._conn:
            self._conn.executemany(
                "INSERT OR IGNORE INTO bench_queries VALUES (?,?,?,?,?,?)",
                [(name, version, str(q.id), i, str(q.text),
                  json.dumps(dict(getattr(q, "meta", None) or {}), sort_keys=True, default=str))
                 for i, q in enumerate(queries)],
            )
            self._conn.executemany(
                "INSERT OR IGNORE INTO bench_qrels VALUES (?,?,?,?,?)",
                [(version, q, d, g, v) for (q, d), (g, v) in rows.items()],
            )
        return True

    def save_documents(self, version: str, docs: Iterable[Any]) -> int:
        """Keep title and the first :data:`SNIPPET_CHARS` characters of each document (objects with
        ``id``, ``title``, ``text``, or ``(id, title, text)`` tuples); stored ids are left alone."""
        rows = []
        for d in docs:
            did, title, text = (d.id, d.title, d.text) if hasattr(d, "id") else d
            text = " ".join(str(text).split())
            if len(text) > SNIPPET_CHARS:
                text = text[: SNIPPET_CHARS - 1].rstrip() + "…"
            rows.append((version, str(did), str(title or "")[:SNIPPET_CHARS], text))
        with self._conn:
            cur = self._conn.executemany("INSERT OR IGNORE INTO bench_documents VALUES (?,?,?,?)", rows)
        return max(cur.rowcount, 0)

    def queries_of(self, version: str) -> list[dict[str, Any]]:
        """``[{"qid", "text", "meta"}]`` in the benchmark's order; empty when not stored."""
        return [{"qid": r["qid"], "text": r["text"], "meta": json.loads(r["meta_json"])}
                for r in self._conn.execute("SELECT qid, text, meta_json FROM bench_queries WHERE version=?"
                                            " ORDER BY pos", (version,))]

    def qrels_of(self, version: str) -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
        """``(relevance, violating)``: graded judgments ``{qid: {docid: grade}}`` and violating sets."""
        rel: dict[str, dict[str, int]] = {}
        viol: dict[str, set[str]] = {}
        for r in self._conn.execute("SELECT qid, docid, grade, violating FROM bench_qrels WHERE version=?",
                                    (version,)):
            if r["grade"] is not None:
                rel.setdefault(r["qid"], {})[r["docid"]] = int(r["grade"])
            if r["violating"]:
                viol.setdefault(r["qid"], set()).add(r["docid"])
        return rel, viol

    def documents_of(self, version: str, ids: Iterable[str] | None = None) -> dict[str, tuple[str, str]]:
        """``{docid: (title, snippet)}`` for the stored documents among ``ids`` (all when ``None``)."""
        if ids is None:
            rows = self._conn.execute("SELECT docid, title, snippet FROM bench_documents WHERE version=?",
                                      (version,)).fetchall()
        else:
            wanted = list(dict.fromkeys(ids))
            rows = []
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                rows += self._conn.execute(
                    f"SELECT docid, title, snippet FROM bench_documents WHERE version=? AND docid IN "
                    f"({','.join('?' * len(chunk))})", (version, *chunk)).fetchall()
        return {r["docid"]: (r["title"], r["snippet"]) for r in rows}

    # -- parameter sweeps (sensitivity heatmaps; not results) -------------------------------------

    def save_sweep(self, data: Mapping[str, Any]) -> str:
        """Store one sweep (``beyondsim sweep``): the grid and every point's measures. Its key is the
        retriever, fixed parameters, grid axes, benchmark version and seed, so a rerun replaces it."""
        ident = json.dumps({k: data[k] for k in ("retriever", "fixed", "axes", "benchmark_version", "seed", "k")},
                           sort_keys=True, default=str)
        key = hashlib.sha256(ident.encode()).hexdigest()[:24]
        created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO sweeps VALUES (?,?,?,?,?,?,?)",
                               (key, data["retriever"], data["benchmark"], data["benchmark_version"],
                                int(data["seed"]), created, json.dumps(data, sort_keys=True, default=str)))
        return key

    def sweeps(self, *, retriever: str | None = None, benchmark: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT key, created_at, data_json FROM sweeps WHERE 1=1", []
        if retriever:
            q += " AND retriever=?"
            args.append(retriever)
        if benchmark:
            q += " AND benchmark=?"
            args.append(benchmark)
        out = []
        for r in self._conn.execute(q + " ORDER BY retriever, benchmark, created_at", args):
            d = json.loads(r["data_json"])
            d.update(key=r["key"], created_at=r["created_at"])
            out.append(d)
        return out

    # -- export / import -------------------------------------------------------------------------

    def export_jsonl(self, out: TextIO, *, benchmark: str | None = None, retriever: str | None = None) -> int:
        """One JSON object per result, per-query measures and rankings included; before the first
        result of each benchmark version, one ``benchmark_content`` line (:func:`export_content`)
        when this store keeps drill-down content for it. Returns the number of results."""
        bench = {(b.name, b.version): b for b in self.benchmarks()}
        records = self.results(benchmark=benchmark, retriever=retriever, full=True)
        top: dict[tuple[str, str], set[str]] = {}
        for rec in records:
            ids = top.setdefault((rec.benchmark, rec.benchmark_version), set())
            ids.update(d for r in rec.rankings.values() for d, _ in r[:CONTENT_DEPTH])
        written: set[tuple[str, str]] = set()
        n = 0
        for rec in records:
            ident = (rec.benchmark, rec.benchmark_version)
            if ident not in written:
                written.add(ident)
                content = export_content(self, rec.benchmark, rec.benchmark_version, top[ident])
                if content is not None:
                    out.write(json.dumps(content, sort_keys=True) + "\n")
            d = export_record(rec)
            b = bench.get(ident)
            if b is not None:
                d["benchmark_info"] = b.__dict__
            out.write(json.dumps(d, sort_keys=True) + "\n")
            n += 1
        return n

    def iter_records_jsonl(self, lines: Iterable[str],
                           source: str = "<input>") -> Iterator["ImportedLine | ImportedContent"]:
        """The lines of an export (:func:`iter_export`)."""
        return iter_export(lines, source)


def iter_export(lines: Iterable[str], source: str = "<input>") -> Iterator["ImportedLine | ImportedContent"]:
    """Every non-blank line of an export, parsed and checked (:func:`import_line`); a bad line
    raises ValueError naming ``source:line``."""
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            yield import_line(line, source, lineno)


def export_record(rec: ResultRecord) -> dict[str, Any]:
    """One result as a JSON-able dict of export schema :data:`EXPORT_SCHEMA`: every field of the
    record (measures, per-query measures, phases, LLM calls, rankings, environment, provenance)."""
    d = dict(rec.__dict__)
    d.pop("id", None)
    d["schema"] = EXPORT_SCHEMA
    d["measures"] = {m: dict(v.__dict__) for m, v in rec.measures.items()}
    d["rankings"] = {q: [[doc, s] for doc, s in r] for q, r in rec.rankings.items()}
    return d


def export_content(store: Store, benchmark: str, version: str, doc_ids: Iterable[str]) -> dict[str, Any] | None:
    """The drill-down content of one benchmark version as an export line of kind
    :data:`CONTENT_KIND`: its queries (in order), its judgments and the stored documents among
    ``doc_ids``; ``None`` when this store keeps none of these for the version."""
    queries = store.queries_of(version)
    rel, viol = store.qrels_of(version)
    docs = store.documents_of(version, sorted(set(doc_ids)))
    if not queries and not rel and not viol and not docs:
        return None
    qrels: dict[tuple[str, str], dict[str, Any]] = {}
    for q, grades in rel.items():
        for d, g in grades.items():
            qrels[(q, d)] = {"qid": q, "docid": d, "grade": g, "violating": False}
    for q, ds in viol.items():
        for d in ds:
            qrels.setdefault((q, d), {"qid": q, "docid": d, "grade": None, "violating": False})["violating"] = True
    return {
        "schema": EXPORT_SCHEMA, "kind": CONTENT_KIND, "benchmark": benchmark, "benchmark_version": version,
        "queries": [{"qid": q["qid"], "text": q["text"], "meta": q["meta"]} for q in queries],
        "qrels": [qrels[k] for k in sorted(qrels)],
        "documents": [{"docid": d, "title": t, "snippet": sn} for d, (t, sn) in sorted(docs.items())],
    }


@dataclass
class ImportedContent:
    """One ``benchmark_content`` line of an export: a benchmark version's queries, judgments and
    document snippets for the drill-down, and where it was read from."""

    benchmark: str
    benchmark_version: str
    queries: list[dict[str, Any]]
    qrels: list[dict[str, Any]]
    documents: list[dict[str, Any]]
    source: str
    lineno: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"

    def save(self, store: Store) -> tuple[bool, int]:
        """Write into ``store`` what it does not have yet (the queries and judgments once per
        version, documents by id); returns (queries and judgments written, documents added)."""
        rel: dict[str, dict[str, int | None]] = {}
        viol: dict[str, list[str]] = {}
        for r in self.qrels:
            if r["grade"] is not None or not r["violating"]:
                rel.setdefault(r["qid"], {})[r["docid"]] = r["grade"]
            if r["violating"]:
                viol.setdefault(r["qid"], []).append(r["docid"])
        queries = [SimpleNamespace(id=q["qid"], text=q["text"], meta=q.get("meta", {})) for q in self.queries]
        wrote = store.save_benchmark_content(self.benchmark, self.benchmark_version, queries, rel, viol)
        added = store.save_documents(self.benchmark_version,
                                     [(d["docid"], d["title"], d["snippet"]) for d in self.documents])
        return wrote, added


@dataclass
class ImportedLine:
    """One line of an export: the result, the benchmark description it carries (if any) and where
    it was read from."""

    record: ResultRecord
    benchmark_info: BenchmarkInfo | None
    source: str
    lineno: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


_NUMBER = (int, float)
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "key": (str,), "retriever": (str,), "label": (str,), "spec_hash": (str,), "spec": (dict,),
    "benchmark": (str,), "benchmark_version": (str,), "seed": (int,), "k": (int,), "harness_version": (str,),
    "n_queries": (int,), "n_missing": (int,), "measures": (dict,), "per_query": (dict,), "phases": (dict,),
    "llm_calls": (list,), "rankings": (dict,), "environment": (dict,), "provenance": (dict,), "extra": (dict,),
    "created_at": (str,),
}
_REQUIRED = ("key", "retriever", "spec_hash", "benchmark", "benchmark_version", "seed", "k", "harness_version",
             "measures")
_BENCHMARK_INFO_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "version": (str,), "task": (str,), "default_measures": (list,), "stats": (dict,),
    "description": (str,), "source": (str,), "license": (str,),
}


def _is(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _check_record(d: dict[str, Any]) -> None:
    """Raise ValueError naming the first field of an exported record that is absent or malformed."""
    unknown = sorted(set(d) - set(_RECORD_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    for f in _REQUIRED:
        if f not in d:
            raise ValueError(f"missing field {f!r}")
    for f, types in _RECORD_FIELDS.items():
        if f in d and not _is(d[f], types):
            raise ValueError(f"field {f!r} must be {' or '.join(t.__name__ for t in types)}, "
                             f"got {type(d[f]).__name__}")
    if not d["key"] or not d["benchmark"] or not d["benchmark_version"]:
        raise ValueError("key, benchmark and benchmark_version must not be empty")
    for m, v in d["measures"].items():
        if not isinstance(v, dict) or not _is(v.get("n"), (int,)) or any(
                v.get(x) is not None and not _is(v.get(x), _NUMBER) for x in ("mean", "ci_low", "ci_high")) \
                or set(v) - {"mean", "n", "ci_low", "ci_high"}:
            raise ValueError(f"measure {m!r}: expected {{mean, n, ci_low, ci_high}} with numbers, got {v!r}")
    for m, col in d.get("per_query", {}).items():
        if not isinstance(col, dict) or not all(_is(x, _NUMBER) for x in col.values()):
            raise ValueError(f"per_query[{m!r}] must map query ids to numbers")
    for p, v in d.get("phases", {}).items():
        if not isinstance(v, dict) or not all(_is(x, _NUMBER) for x in v.values()):
            raise ValueError(f"phases[{p!r}] must map wall_s/cpu_s/items to numbers")
    for i, c in enumerate(d.get("llm_calls", [])):
        if not isinstance(c, dict) or any(x not in c for x in ("model", "prompt_tokens", "completion_tokens",
                                                                  "latency_s", "cached")):
            raise ValueError(f"llm_calls[{i}] needs model, prompt_tokens, completion_tokens, latency_s and cached")
    for q, r in d.get("rankings", {}).items():
        if not isinstance(r, list) or not all(
                isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and _is(x[1], _NUMBER) for x in r):
            raise ValueError(f"rankings[{q!r}] must be a list of [docid, score] pairs")


def _benchmark_info(d: Any) -> BenchmarkInfo | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError("benchmark_info must be an object")
    missing = [f for f in ("name", "version", "task") if f not in d]
    unknown = sorted(set(d) - set(_BENCHMARK_INFO_FIELDS))
    bad = [f for f, t in _BENCHMARK_INFO_FIELDS.items() if f in d and not _is(d[f], t)]
    if missing or unknown or bad:
        raise ValueError("malformed benchmark_info: " + "; ".join(
            x for x in (missing and f"missing {', '.join(missing)}", unknown and f"unknown {', '.join(unknown)}",
                        bad and f"wrong type of {', '.join(bad)}") if x))
    return BenchmarkInfo(d["name"], d["version"], d["task"], list(d.get("default_measures", [])),
                         dict(d.get("stats", {})), d.get("description", ""), d.get("source", ""), d.get("license", ""))


_CONTENT_FIELDS: dict[str, tuple[type, ...]] = {
    "kind": (str,), "benchmark": (str,), "benchmark_version": (str,), "queries": (list,), "qrels": (list,),
    "documents": (list,),
}
_CONTENT_ITEMS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {  # field: (types, required)
    "queries": {"qid": ((str,), True), "text": ((str,), True), "meta": ((dict,), False)},
    "qrels": {"qid": ((str,), True), "docid": ((str,), True), "grade": ((int, type(None)), True),
              "violating": ((bool,), True)},
    "documents": {"docid": ((str,), True), "title": ((str,), True), "snippet": ((str,), True)},
}


def _check_content(d: dict[str, Any]) -> None:
    """Raise ValueError naming the first field of a ``benchmark_content`` line that is absent or malformed."""
    unknown = sorted(set(d) - set(_CONTENT_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    for f, types in _CONTENT_FIELDS.items():
        if f not in d:
            raise ValueError(f"missing field {f!r}")
        if not _is(d[f], types):
            raise ValueError(f"field {f!r} must be {' or '.join(t.__name__ for t in types)}, "
                             f"got {type(d[f]).__name__}")
    if not d["benchmark"] or not d["benchmark_version"]:
        raise ValueError("benchmark and benchmark_version must not be empty")
    for part, spec in _CONTENT_ITEMS.items():
        for i, x in enumerate(d[part]):
            if not isinstance(x, dict):
                raise ValueError(f"{part}[{i}] must be an object, got {type(x).__name__}")
            extra = sorted(set(x) - set(spec))
            if extra:
                raise ValueError(f"{part}[{i}]: unknown field(s) {', '.join(extra)}")
            for f, (types, required) in spec.items():
                if f not in x:
                    if required:
                        raise ValueError(f"{part}[{i}]: missing field {f!r}")
                elif not _is(x[f], types):
                    raise ValueError(f"{part}[{i}]: field {f!r} must be "
                                     f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}, "
                                     f"got {type(x[f]).__name__}")
    for part, key in (("queries", ("qid",)), ("qrels", ("qid", "docid")), ("documents", ("docid",))):
        seen: set[tuple[str, ...]] = set()
        for i, x in enumerate(d[part]):
            k = tuple(x[f] for f in key)
            if k in seen:
                raise ValueError(f"{part}[{i}]: duplicate {'/'.join(key)} {'/'.join(k)!r}")
            seen.add(k)


def _import_content(d: dict[str, Any], source: str, lineno: int) -> ImportedContent:
    where = f"{source}:{lineno}"
    try:
        _check_content(d)
    except ValueError as e:
        raise ValueError(f"{where}: malformed benchmark content line: {e}") from None
    return ImportedContent(d["benchmark"], d["benchmark_version"], d["queries"], d["qrels"], d["documents"],
                           source, lineno)


def import_line(line: str, source: str, lineno: int) -> ImportedLine | ImportedContent:
    """Parse and check one exported line; ValueError naming ``source:lineno`` when it is not a
    well-formed line of an export schema in :data:`IMPORT_SCHEMAS`: a result (any schema) or, from
    schema 2 on, a ``benchmark_content`` line (:class:`ImportedContent`)."""
    where = f"{source}:{lineno}"
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected one JSON object per line, got {type(d).__name__}")
    schema = d.get("schema")
    if not _is(schema, (int,)) or schema not in IMPORT_SCHEMAS:
        raise ValueError(f"{where}: unsupported export schema {schema!r} "
                         f"(expected {' or '.join(map(str, IMPORT_SCHEMAS))})")
    d.pop("schema")
    if schema >= 2 and "kind" in d:
        if d["kind"] == CONTENT_KIND:
            return _import_content(d, source, lineno)
        raise ValueError(f"{where}: unknown line kind {d['kind']!r} (expected {CONTENT_KIND!r} or a result)")
    info = d.pop("benchmark_info", None)
    try:
        _check_record(d)
        d["measures"] = {m: MeasureValue(**v) for m, v in d["measures"].items()}
        d["rankings"] = {q: [(doc, s) for doc, s in r] for q, r in d.get("rankings", {}).items()}
        rec = ResultRecord(**d)
        return ImportedLine(rec, _benchmark_info(info), source, lineno)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: malformed result record{' ' + repr(d.get('key')) if isinstance(d.get('key'), str) else ''}: {e}") from None


def import_record(line: str, source: str, lineno: int) -> ResultRecord:
    """The result of one exported line (see :func:`import_line`); ValueError for a content line."""
    it = import_line(line, source, lineno)
    if not isinstance(it, ImportedLine):
        raise ValueError(f"{source}:{lineno}: a {CONTENT_KIND} line, not a result")
    return it.record


def open_store(home: Path) -> Store:
    return Store(home / "results.sqlite")
