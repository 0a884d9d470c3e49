"""The results store: SQLite in WAL mode (docs/design/store.md#the-store).

A result is keyed by ``(retriever spec hash, benchmark version, seed, depth k, harness version)``,
and kept in one of two *slots* per key: ``own`` (computed by this harness here: ``run``, ``submit``)
and ``imported`` (read from a file or the reference bundle: its ``extra["origin"]`` says so,
:mod:`harness.store.trust`). The slot follows from the record, so an import can never stand in for, hide
or replace a result the user computed, and ``run`` skips only on its own results.
Each result is written in one transaction — a crash leaves the whole result or none of it — and
a key is written once: :meth:`Store.save` takes the write lock before it looks for the key, so of
two processes saving one result, the second waits and then keeps the stored one (or, when told
to, replaces it in the same transaction). The store holds only what JSON can carry: an undefined
mean or interval bound is ``NULL``, and every other number must be finite.
Tables: ``results`` (spec, benchmark, seed, versions, environment, provenance), ``measures``
(mean, count, 95% CI), ``query_measures``, ``phases`` (wall/CPU seconds), ``llm_calls``,
``rankings`` (the stored run, for drill-down and re-evaluation), ``benchmarks`` (what the
reports need to know about each benchmark without loading it), ``sweeps``, ``reproductions``
(each ``beyondsim reproduce`` run's matrix of expected against recomputed figures), ``meta``
(small facts about the store itself, such as which reference bundle it holds), and the content the
per-query drill-down shows: ``bench_queries`` (texts and metadata), ``bench_qrels`` (grades and
violating flags) and ``bench_documents`` (title and a snippet of each document that appears in a
stored top 10). Tables are created ``IF NOT EXISTS``, so an older store gains them when opened.
Export and import live in :mod:`harness.store.exchange`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from ..core.errors import UserError
from ..core.types import Benchmark, BenchmarkMeta
from .schema import (IMPORTED, OWN, SCHEMA, SCHEMA_VERSION, allow_unknown_tokens, key_reproductions_by_source,
                     record_relevance_thresholds,
                     mark_shipped_matrices, outdated, slot_results)

STORE_FILE = "results.sqlite"  # the store's file in a home (open_store)
CONTENT_DEPTH = 10  # documents kept (title + snippet) per stored ranking, for the drill-down
BUSY_TIMEOUT_S = 60  # how long a writer waits for another process's transaction to finish

IMPORTED_CONTENT = "imported_content"  # meta: benchmark versions whose drill-down content came from a file
SNIPPET_CHARS = 300


def slot_of(extra: Mapping[str, Any] | None) -> str:
    """The slot a result is kept in: :data:`IMPORTED` when its ``extra`` records an origin
    (:func:`harness.store.trust.origin`), else :data:`OWN`."""
    from .trust import origin

    return OWN if origin(extra) is None else IMPORTED


def snippet(title: Any, text: Any) -> tuple[str, str]:
    """A document as the drill-down keeps it: its title and the first :data:`SNIPPET_CHARS`
    characters of its text, white space collapsed."""
    body = " ".join(str(text).split())
    if len(body) > SNIPPET_CHARS:
        body = body[: SNIPPET_CHARS - 1].rstrip() + "…"
    return str(title or "")[:SNIPPET_CHARS], body


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
    """What the store keeps about a benchmark version: its loader's :class:`BenchmarkMeta` (the
    texts, task, default measures and relevance threshold; :attr:`meta`), its version and its
    counts (``stats``, with the query groups that per-group breakdowns use under
    ``"query_groups"``). ``relevance_threshold`` is ``None`` where it was not recorded (a store or
    a file from before it was kept): a plain measure name on that benchmark then means the
    threshold its loader declares."""

    name: str
    version: str
    task: str
    default_measures: list[str]
    stats: dict[str, Any]
    description: str = ""
    source: str = ""
    license: str = ""
    relevance_threshold: int | None = None

    @classmethod
    def of(cls, bench: Benchmark) -> "BenchmarkInfo":
        """What the store keeps about ``bench``: its meta, version, counts and query groups
        (``stats["query_groups"]``: ``{meta key: {qid: value}}``)."""
        stats: dict[str, Any] = dict(bench.stats())
        groups = bench.query_groups()
        if groups:
            stats["query_groups"] = groups
        meta = bench.meta
        return cls(meta.name, bench.version, meta.task, list(meta.default_measures), stats, meta.description,
                   meta.source, meta.license, meta.relevance_threshold)

    @property
    def meta(self) -> BenchmarkMeta:
        """The benchmark's description as stored (a threshold not recorded reads as the default, 1)."""
        return BenchmarkMeta(self.name, self.task, self.description, self.source, self.license,
                             default_measures=tuple(self.default_measures),
                             relevance_threshold=1 if self.relevance_threshold is None else self.relevance_threshold)


def finite_or_none(x: float | None) -> float | None:
    """A mean or interval bound as stored (``NULL``) and as exported (``null``, by
    :mod:`harness.store.exchange`): ``None`` (undefined) unless it is a finite number, then a float."""
    return None if x is None or not math.isfinite(x) else float(x)


def _finite(x: Any, where: str) -> float:
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{where} is {v}; the store keeps finite numbers only")
    return v


def _json(value: Any, where: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except ValueError:
        raise ValueError(f"{where} holds a NaN or infinite number; the store keeps finite numbers only") from None


def _tokens(x: Any) -> int | None:
    """An LLM call's token count as stored: ``NULL`` when the reply reported none."""
    return None if x is None else int(x)


def _result_rows(rec: ResultRecord) -> dict[str, list[tuple[Any, ...]]]:
    """The child rows of ``rec`` (without the result id), checked: a non-finite mean or interval
    bound becomes ``NULL`` (undefined); any other non-finite number is a ValueError naming it."""
    w = f"result {rec.key}"
    return {
        "measures": [(m, finite_or_none(v.mean), int(v.n), finite_or_none(v.ci_low), finite_or_none(v.ci_high))
                     for m, v in rec.measures.items()],
        "query_measures": [(m, q, _finite(v, f"{w}: per-query {m} of query {q!r}"))
                           for m, col in rec.per_query.items() for q, v in col.items()],
        "phases": [(p, _finite(v.get("wall_s", 0), f"{w}: phase {p} wall_s"),
                    _finite(v.get("cpu_s", 0), f"{w}: phase {p} cpu_s"), int(v.get("items", 0)))
                   for p, v in rec.phases.items()],
        "llm_calls": [(c["model"], _tokens(c["prompt_tokens"]), _tokens(c["completion_tokens"]),
                       _finite(c["latency_s"], f"{w}: llm_calls[{i}] latency_s"), int(bool(c["cached"])),
                       None if c.get("usd") is None else _finite(c["usd"], f"{w}: llm_calls[{i}] usd"),
                       c.get("phase", ""), c.get("purpose", ""))
                      for i, c in enumerate(rec.llm_calls)],
        "rankings": [(q, json.dumps([d for d, _ in r]),
                      json.dumps([round(_finite(s, f"{w}: score of {d!r} for query {q!r}"), 7) for d, s in r]))
                     for q, r in rec.rankings.items()],
    }




class StoreError(UserError, sqlite3.DatabaseError):
    """The results store cannot be read or written: damaged, read-only here, locked, or the disk is
    full. The message names the file and says what to do; ``reason`` is one of ``damaged``,
    ``readonly``, ``outdated``, ``full``, ``locked``, ``io``."""

    def __init__(self, message: str, reason: str = "io"):
        super().__init__(message)
        self.reason = reason


def _failure(path: Path, e: BaseException) -> StoreError | None:
    """What a SQLite error on the store at ``path`` means to the user, or ``None`` for one that is a
    bug (a constraint or a misuse of the connection), which propagates as it is."""
    if isinstance(e, StoreError) or not isinstance(e, sqlite3.Error):
        return None
    name, text = getattr(e, "sqlite_errorname", "") or "", str(e)
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        return StoreError(f"{path}: the results store is damaged or not a results store ({text}); move the file "
                          "aside (a new store is made in its place) or put back a copy", "damaged")
    if name == "SQLITE_FULL" or "disk is full" in text:
        return StoreError(f"{path}: the disk is full ({text}); the write was rolled back and the results stored "
                          "before it are kept; free some space and try again", "full")
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return StoreError(f"{path}: the results store cannot be written here ({text}); make the file and its "
                          "folder writable", "readonly")
    if name.startswith("SQLITE_BUSY") or "database is locked" in text:
        return StoreError(f"{path}: the results store is locked by another process ({text}); try again when it "
                          "is done", "locked")
    if isinstance(e, sqlite3.OperationalError) and (name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM"))
                                                    or "unable to open" in text or "disk I/O" in text):
        return StoreError(f"{path}: the results store cannot be read or written ({text})", "io")
    return None


_F = TypeVar("_F", bound=Callable[..., Any])


def _reported(method: _F) -> _F:
    """``method`` of :class:`Store`, with a SQLite failure raised as a :class:`StoreError`."""
    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            err = _failure(self.path, e)
            if err is None:
                raise
            raise err from e
    return wrapper  # type: ignore[return-value]


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only. A store in WAL mode needs its ``-shm`` file, which SQLite creates
    beside it; in a folder that cannot be written it is opened as immutable (nothing writes it)."""
    if not path.exists():  # nothing stored yet: an empty store that lives in memory
        conn = sqlite3.connect(":memory:")
        conn.executescript(SCHEMA)
        return conn
    uri = path.absolute().as_uri()
    for option in ("mode=ro", "immutable=1"):
        conn = sqlite3.connect(f"{uri}?{option}", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError as e:
            conn.close()
            if option == "immutable=1" or "unable to open" not in str(e):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class Store:
    """The results store at ``path``. ``readonly``: opened for reading only (a file or folder that
    cannot be written: :func:`open_store`); every write then raises a :class:`StoreError`. A store
    that cannot be read (damaged, not a store), a full disk and a store locked past
    :data:`BUSY_TIMEOUT_S` are a :class:`StoreError` naming the file too; a failed write is rolled
    back whole."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._depth = 0  # nesting of transaction()
        try:
            self._open()
        except (sqlite3.Error, OSError) as e:
            if "_conn" in self.__dict__:
                self._conn.close()
            if isinstance(e, OSError):
                raise StoreError(f"{self.path}: cannot open the results store ({e.strerror or e})") from e
            err = _failure(self.path, e)
            if err is None:
                raise
            raise err from e

    def _open(self) -> None:
        if self.readonly:
            self._conn = _connect_readonly(self.path)
            self._conn.row_factory = sqlite3.Row
            if outdated(self._conn):
                raise StoreError(f"{self.path}: the results store was made by an earlier version and is read-only "
                                 "here; open it once where it can be written (any command upgrades it)", "outdated")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S)  # SQLite's busy_timeout
        self._conn.row_factory = sqlite3.Row
        self._use_wal()
        if self._conn.execute("SELECT 1 FROM sqlite_master WHERE name='results'").fetchone() is not None:
            slot_results(self._conn)
        self._conn.execute("PRAGMA foreign_keys=ON")
        with self.transaction():
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    self._conn.execute(stmt)
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            allow_unknown_tokens(self._conn)
            mark_shipped_matrices(self._conn)
            key_reproductions_by_source(self._conn)
            record_relevance_thresholds(self._conn)

    def _use_wal(self) -> None:
        """Switch the file to WAL. While another process creates the same store, the switch can fail
        at once with "database is locked" (SQLite calls no busy handler for it), so it is retried
        until :data:`BUSY_TIMEOUT_S` has passed."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "database is locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed when the block ends, rolled back when it raises. The
        write lock is taken up front (``BEGIN IMMEDIATE``), so a concurrent writer waits for it
        (up to :data:`BUSY_TIMEOUT_S`) instead of failing, and what the block reads cannot change
        before it commits. Nested blocks join the outermost transaction. A SQLite failure (a full
        disk, a lock held too long) is a :class:`StoreError`, raised after the rollback; a read-only
        store refuses at once."""
        if self.readonly:
            raise StoreError(f"{self.path}: the results store is open read-only (the file or its folder cannot be "
                             "written here); nothing was written", "readonly")
        if self._depth:
            self._depth += 1
            try:
                yield self._conn
            finally:
                self._depth -= 1
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            err = _failure(self.path, e)
            if err is None:
                raise
            raise err from e
        self._depth = 1
        try:
            yield self._conn
            self._conn.commit()  # a commit that fails (a full disk) is rolled back like the block
        except BaseException as e:
            with contextlib.suppress(sqlite3.Error):
                self._conn.rollback()
            err = _failure(self.path, e)
            if err is None:
                raise
            raise err from e
        finally:
            self._depth = 0

    def has(self, key: str, slot: str = OWN) -> bool:
        """Whether a result of ``key`` is stored in ``slot`` (by default: computed here)."""
        return self._conn.execute("SELECT 1 FROM results WHERE key=? AND slot=?", (key, slot)).fetchone() is not None

    def save_benchmark(self, info: BenchmarkInfo) -> None:
        with self.transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO benchmarks (name, version, task, default_measures_json, stats_json, "
                "description, source, license, relevance_threshold) VALUES (?,?,?,?,?,?,?,?,?)",
                (info.name, info.version, info.task, json.dumps(list(info.default_measures)),
                 json.dumps(info.stats), info.description, info.source, info.license,
                 None if info.relevance_threshold is None else int(info.relevance_threshold)),
            )

    def save(self, rec: ResultRecord, *, replace: bool = False) -> bool:
        """Write one result in one transaction, in the slot its ``extra`` gives (:func:`slot_of`);
        returns whether it wrote. A key already stored in that slot (by this process or another
        one) is kept and nothing is written, unless ``replace``: then the stored result is replaced
        in the same transaction, so a reader sees the old result or the new one, never a mix. The
        other slot is never touched. Every value is checked before anything is written (see
        :func:`_result_rows`); a non-finite one is a ValueError."""
        created = rec.created_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        head = (rec.key, rec.retriever, rec.label, rec.spec_hash, _json(rec.spec, f"result {rec.key}: spec"),
                rec.benchmark, rec.benchmark_version, int(rec.seed), int(rec.k), rec.harness_version, created,
                int(rec.n_queries), int(rec.n_missing),
                *(_json(getattr(rec, f), f"result {rec.key}: {f}") for f in ("environment", "provenance", "extra")))
        rows = _result_rows(rec)
        slot = slot_of(rec.extra)
        with self.transaction() as db:  # all rows or none; the write lock is held from here
            if db.execute("SELECT 1 FROM results WHERE key=? AND slot=?", (rec.key, slot)).fetchone() is not None:
                if not replace:
                    return False
                db.execute("DELETE FROM results WHERE key=? AND slot=?", (rec.key, slot))
            cur = db.execute(
                "INSERT INTO results (key, retriever, label, spec_hash, spec_json, benchmark, benchmark_version,"
                " seed, k, harness_version, created_at, n_queries, n_missing, environment_json, provenance_json,"
                " extra_json, slot) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (*head, slot))
            rid = int(cur.lastrowid)
            db.executemany("INSERT INTO measures VALUES (?,?,?,?,?,?)", [(rid, *r) for r in rows["measures"]])
            db.executemany("INSERT INTO query_measures VALUES (?,?,?,?)", [(rid, *r) for r in rows["query_measures"]])
            db.executemany("INSERT INTO phases VALUES (?,?,?,?,?)", [(rid, *r) for r in rows["phases"]])
            db.executemany("INSERT INTO llm_calls VALUES (?,?,?,?,?,?,?,?,?)", [(rid, *r) for r in rows["llm_calls"]])
            db.executemany("INSERT INTO rankings VALUES (?,?,?,?)", [(rid, *r) for r in rows["rankings"]])
        rec.id, rec.created_at = rid, created
        return True

    def delete(self, key: str, slot: str = OWN) -> None:
        with self.transaction():
            self._conn.execute("DELETE FROM results WHERE key=? AND slot=?", (key, slot))

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

    def get(self, key: str, *, full: bool = False, slot: str = OWN) -> ResultRecord | None:
        """The result of ``key`` in ``slot`` (by default: computed here), or ``None``."""
        row = self._conn.execute("SELECT * FROM results WHERE key=? AND slot=?", (key, slot)).fetchone()
        return self._row_to_record(row, full=full) if row else None

    def per_query(self, result_id: int, measure: str | None = None) -> dict[str, dict[str, float]]:
        sql, args = "SELECT measure, qid, value FROM query_measures WHERE result_id=?", [result_id]
        if measure:
            sql += " AND measure=?"
            args.append(measure)
        out: dict[str, dict[str, float]] = {}
        cur = self._conn.cursor()
        cur.row_factory = None  # plain tuples: this reads tens of thousands of rows per result
        for m, q, v in cur.execute(sql, args):
            col = out.get(m)
            if col is None:
                col = out[m] = {}
            col[q] = v
        return out

    def ranked_qids(self, result_id: int) -> list[str]:
        """The queries a result has a stored ranking for (without decoding the rankings)."""
        return [r[0] for r in self._conn.execute("SELECT qid FROM rankings WHERE result_id=?", (result_id,))]

    def rankings(self, result_id: int, qids: Iterable[str] | None = None) -> dict[str, list[tuple[str, float]]]:
        """The stored ranking of each query of a result (of ``qids`` only when given, read from the
        database by query, so a page that shows a few queries decodes only those)."""
        cur = self._conn.cursor()
        cur.row_factory = None
        sql = "SELECT qid, docids_json, scores_json FROM rankings WHERE result_id=?"
        if qids is None:
            rows = cur.execute(sql, (result_id,)).fetchall()
        else:
            wanted = list(dict.fromkeys(qids))
            rows = []
            for i in range(0, len(wanted), 500):
                part = wanted[i:i + 500]
                rows += cur.execute(sql + f" AND qid IN ({','.join('?' * len(part))})", (result_id, *part)).fetchall()
        return {q: list(zip(json.loads(d), json.loads(sc))) for q, d, sc in rows}

    def benchmarks(self) -> list[BenchmarkInfo]:
        return [
            BenchmarkInfo(r["name"], r["version"], r["task"], json.loads(r["default_measures_json"]),
                          json.loads(r["stats_json"]), r["description"], r["source"], r["license"],
                          r["relevance_threshold"])
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
        rows: dict[tuple[str, str], list[Any]] = {}
        for q, docs in qrels.items():
            for d, g in docs.items():
                rows[(q, d)] = [None if g is None else int(g), 0]
        for q, docs in (violating or {}).items():
            for d in docs:
                rows.setdefault((q, d), [None, 0])[1] = 1
        with self.transaction():
            if self.has_benchmark_content(version):
                return False
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
            rows.append((version, str(did), *snippet(title, text)))
        with self.transaction():
            cur = self._conn.executemany("INSERT OR IGNORE INTO bench_documents VALUES (?,?,?,?)", rows)
        return max(cur.rowcount, 0)

    def forget_benchmark_content(self, version: str) -> list[str]:
        """Remove a benchmark version's stored queries, judgments and document snippets (so that
        they can be written again from the benchmark itself); returns the ids of the documents that
        were stored."""
        with self.transaction() as db:
            ids = [r[0] for r in db.execute("SELECT docid FROM bench_documents WHERE version=?", (version,))]
            for table in ("bench_queries", "bench_qrels", "bench_documents"):
                db.execute(f"DELETE FROM {table} WHERE version=?", (version,))
        return ids

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
        with self.transaction():
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

    # -- reproduction matrices and facts about the store ------------------------------------------

    def save_reproductions(self, rows: Iterable[Mapping[str, Any]], *, shipped: bool = False) -> str:
        """Store one ``reproduce`` run's matrix (rows with the columns of table ``reproductions``
        but ``run_id``, ``created_at`` and ``shipped``) in one transaction; returns the run id.
        ``shipped``: the matrix was the one shipped with the project (only such a run can make an
        imported figure *reproduced*, :mod:`harness.store.trust`)."""
        run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%f")
        created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        cols = ("spec_hash", "retriever", "label", "benchmark", "benchmark_version", "measure", "expected",
                "tolerance", "got", "status", "kind", "source")
        with self.transaction() as db:
            db.executemany(f"INSERT INTO reproductions VALUES (?,?,{','.join('?' * len(cols))},?)",
                           [(run_id, created, *(r[c] for c in cols), int(shipped)) for r in rows])
        return run_id

    def reproductions(self, *, latest: bool = True, shipped: bool = False) -> list[dict[str, Any]]:
        """The rows of the latest ``reproduce`` run (all runs with ``latest=False``), in matrix order;
        with ``shipped``, of the runs of the shipped matrix only."""
        where = " WHERE shipped = 1" if shipped else ""
        q = "SELECT * FROM reproductions" + where
        if latest:
            q += (" AND" if shipped else " WHERE") + f" run_id = (SELECT MAX(run_id) FROM reproductions{where})"
        return [dict(r) for r in self._conn.execute(q + " ORDER BY run_id, retriever, benchmark, measure")]

    # -- frozen candidate pools (harness/run/pools.py) ---------------------------------------------

    def save_pool(self, manifest: Mapping[str, Any], rankings: Mapping[str, Iterable[tuple[str, float]]]) -> bool:
        """Keep a pool (its manifest and its rankings) under its hash, once; whether it was new."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM pools WHERE hash=?", (manifest["hash"],)).fetchone():
                return False
            db.execute("INSERT INTO pools VALUES (?,?,?,?,?,?)",
                       (manifest["hash"], manifest.get("name", ""), manifest["benchmark"],
                        manifest["benchmark_version"], _json(dict(manifest), f"pool {manifest['hash']}"),
                        json.dumps({q: [[d, s] for d, s in r] for q, r in rankings.items()})))
        return True

    def pool(self, pool_hash: str) -> tuple[dict[str, Any], dict[str, list[tuple[str, float]]]] | None:
        """A stored pool's manifest and rankings, or ``None``."""
        row = self._conn.execute("SELECT manifest_json, rankings_json FROM pools WHERE hash=?", (pool_hash,)).fetchone()
        if row is None:
            return None
        return (json.loads(row["manifest_json"]),
                {q: [(str(d), float(s)) for d, s in r] for q, r in json.loads(row["rankings_json"]).items()})

    def pools(self, benchmark: str | None = None) -> list[dict[str, Any]]:
        """The manifests of the stored pools (of one benchmark), by benchmark and name."""
        q, args = "SELECT manifest_json FROM pools", ()
        if benchmark is not None:
            q, args = q + " WHERE benchmark=?", (benchmark,)
        return [json.loads(r["manifest_json"]) for r in self._conn.execute(q + " ORDER BY benchmark, name, hash", args)]

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction():
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, _json(value, f"meta {key}")))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value_json FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row["value_json"]) if row else default


def store_path(home: Path) -> Path:
    """The results store of a home folder."""
    return Path(home) / STORE_FILE


# Every public method reports a SQLite failure as a StoreError naming the file.
for _name, _method in list(vars(Store).items()):
    if not _name.startswith("_") and _name != "transaction" and callable(_method):
        setattr(Store, _name, _reported(_method))


def writable(path: Path) -> bool:
    """Whether the store at ``path`` can be written here: the file (when it exists) and its folder
    (where SQLite keeps the write-ahead log), or the nearest folder above that exists."""
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


def open_store(home: Path, *, readonly: bool | None = None) -> Store:
    """The results store of a home (``home/results.sqlite``). By default it is opened for writing
    when it can be written here (:func:`writable`), else read-only, so that the commands that only
    read it (``leaderboard``, ``export``, ``audit``) work from a read-only home; a write to a
    read-only store raises a :class:`StoreError`. ``readonly=True``/``False`` decides instead."""
    path = store_path(home)
    if readonly is None:
        readonly = not writable(path)
        if not readonly:
            try:
                return Store(path)
            except StoreError as e:
                if e.reason not in ("readonly", "io"):
                    raise
                readonly = True  # a read-only file system can pass the access check
    return Store(path, readonly=readonly)
