"""The results store's tables, and the upgrades that bring a store made by an earlier version to them.

:data:`SCHEMA` creates every table ``IF NOT EXISTS``, so an older store gains new tables when it is
opened for writing; the functions below rebuild or extend the tables whose definition changed. A
store opened read-only cannot be upgraded: :func:`outdated` says whether it would need to be.
"""

from __future__ import annotations

import re
import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL,
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
  extra_json TEXT NOT NULL DEFAULT '{}',
  slot TEXT NOT NULL DEFAULT 'own',
  UNIQUE (key, slot)
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
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
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
  relevance_threshold INTEGER,
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
CREATE TABLE IF NOT EXISTS reproductions (
  run_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  spec_hash TEXT NOT NULL,
  retriever TEXT NOT NULL,
  label TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  benchmark_version TEXT NOT NULL,
  measure TEXT NOT NULL,
  expected REAL NOT NULL,
  tolerance REAL NOT NULL,
  got REAL,
  status TEXT NOT NULL,
  kind TEXT NOT NULL,
  source TEXT NOT NULL,
  shipped INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (run_id, spec_hash, benchmark, measure, kind, source)
);
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pools (
  hash TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  benchmark_version TEXT NOT NULL,
  manifest_json TEXT NOT NULL,
  rankings_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_documents (
  version TEXT NOT NULL,
  docid TEXT NOT NULL,
  title TEXT NOT NULL DEFAULT '',
  snippet TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (version, docid)
);
"""
SCHEMA_VERSION = 2  # 2: results kept per (key, slot)
OWN, IMPORTED = "own", "imported"  # the two slots of a key (see harness.store.results)


def rebuild_table(db: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` with its current definition in :data:`SCHEMA`, rows unchanged (inside the
    caller's transaction; its indexes are the caller's to recreate)."""
    create = next(stmt for stmt in SCHEMA.split(";") if f"CREATE TABLE IF NOT EXISTS {table}" in stmt)
    db.execute(create.replace(f"IF NOT EXISTS {table}", f"{table}_new"))
    db.execute(f"INSERT INTO {table}_new SELECT * FROM {table}")
    db.execute(f"DROP TABLE {table}")
    db.execute(f"ALTER TABLE {table}_new RENAME TO {table}")


def allow_unknown_tokens(db: sqlite3.Connection) -> None:
    """A store written before token counts could be unknown has ``NOT NULL`` on them: rebuild its
    ``llm_calls`` table with the current definition, rows unchanged (inside the caller's transaction)."""
    if not _tokens_not_null(db):
        return
    rebuild_table(db, "llm_calls")
    db.execute("CREATE INDEX IF NOT EXISTS llm_calls_result ON llm_calls(result_id)")


def mark_shipped_matrices(db: sqlite3.Connection) -> None:
    """A store made before reproductions said which matrix they ran gains the ``shipped`` column;
    its earlier matrices count as not shipped (inside the caller's transaction)."""
    if _unshipped(db):
        db.execute("ALTER TABLE reproductions ADD COLUMN shipped INTEGER NOT NULL DEFAULT 0")


def record_relevance_thresholds(db: sqlite3.Connection) -> None:
    """A store made before benchmarks kept their relevance threshold gains the column; the rows it
    has keep ``NULL`` there, "not recorded" (inside the caller's transaction)."""
    if _no_thresholds(db):
        db.execute("ALTER TABLE benchmarks ADD COLUMN relevance_threshold INTEGER")


def key_reproductions_by_source(db: sqlite3.Connection) -> None:
    """A store made when ``reproductions`` was keyed without ``kind`` and ``source`` (so a published
    figure could not sit beside the reference figure of the same measure): rebuild the table with
    the current key, rows unchanged (inside the caller's transaction)."""
    if not _reproductions_unkeyed(db):
        return
    rebuild_table(db, "reproductions")


def slot_results(conn: sqlite3.Connection) -> None:
    """A store made before results had slots keys each result once (``key UNIQUE``): rebuild its
    ``results`` table with the current definition, each row in the slot its ``extra`` gives
    (SQLite's table-rebuild procedure: foreign keys off, so the child rows stay as they are)."""
    if not _unslotted(conn):
        return
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _unslotted(conn):  # another process?
                create = next(stmt for stmt in SCHEMA.split(";") if "CREATE TABLE IF NOT EXISTS results " in stmt)
                conn.execute(create.replace("IF NOT EXISTS results ", "results_new "))
                cols = ("id, key, retriever, label, spec_hash, spec_json, benchmark, benchmark_version, seed, k, "
                        "harness_version, created_at, n_queries, n_missing, environment_json, provenance_json, "
                        "extra_json")
                conn.execute(f"INSERT INTO results_new ({cols}, slot) SELECT {cols}, CASE WHEN "
                             f"json_type(extra_json, '$.origin') = 'object' THEN '{IMPORTED}' ELSE '{OWN}' END "
                             "FROM results")
                conn.execute("DROP TABLE results")
                conn.execute("ALTER TABLE results_new RENAME TO results")
                conn.execute("CREATE INDEX IF NOT EXISTS results_bench ON results(benchmark)")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    finally:
        conn.execute("PRAGMA foreign_keys=ON")


def _tokens_not_null(db: sqlite3.Connection) -> bool:
    cols = {r[1]: r[3] for r in db.execute("PRAGMA table_info(llm_calls)")}
    return bool(cols.get("prompt_tokens") or cols.get("completion_tokens"))


def _unshipped(db: sqlite3.Connection) -> bool:
    return not any(r[1] == "shipped" for r in db.execute("PRAGMA table_info(reproductions)"))


def _no_thresholds(db: sqlite3.Connection) -> bool:
    return not any(r[1] == "relevance_threshold" for r in db.execute("PRAGMA table_info(benchmarks)"))


def _reproductions_unkeyed(db: sqlite3.Connection) -> bool:
    return not any(r[1] == "source" and r[5] for r in db.execute("PRAGMA table_info(reproductions)"))


def _unslotted(db: sqlite3.Connection) -> bool:
    return not any(r[1] == "slot" for r in db.execute("PRAGMA table_info(results)"))


def outdated(db: sqlite3.Connection) -> bool:
    """Whether the store lacks a table of :data:`SCHEMA` or needs one of the upgrades below."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)) - tables:
        return True
    return (_tokens_not_null(db) or _unshipped(db) or _reproductions_unkeyed(db) or _unslotted(db)
            or _no_thresholds(db))
