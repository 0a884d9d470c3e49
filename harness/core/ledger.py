"""Cost and time ledger (docs/design/ledger-and-cost.md#the-ledger).

Phases: ``load``, ``model``, ``fit``, ``index`` (offline), ``search`` (online), ``evaluate``; each
records wall and CPU seconds and the number of items processed. ``model`` is the loading of model
weights (an encoder read from disk the first time a process uses it): it happens inside another
phase and is taken out of it, so a result's ``index`` time does not depend on whether an earlier
result of the same process had already loaded the model. LLM calls are recorded one by one with
model, tokens, latency, cache hit and dollars. A figure that is not known is ``None``, never 0:
tokens when the reply carried no usage, dollars when the price or the tokens are unknown.

A cached artefact a result reuses (embeddings, a loaded model, a trained encoder, an LLM reply) is
recorded with what it cost to compute when it was written (:meth:`Ledger.reuse`), under the phase
that asked for it, so the result's cold-equivalent cost (harness/cost/figures.py) does not depend on what
ran before it.

Every billed reply is also written to a :class:`CallJournal` (a table in the LLM cache's SQLite
file) the moment it arrives, tagged with the run it belongs to (:class:`RunTag`), so a run that
stops on its budget, fails or is killed still leaves every call it paid for on disk.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sqlite3
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

PHASES = ("load", "model", "fit", "index", "search", "evaluate")
OFFLINE_PHASES = ("fit", "index")
ONLINE_PHASES = ("search",)


@dataclass
class PhaseTime:
    phase: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    items: int = 0


@dataclass
class LLMCall:
    model: str
    prompt_tokens: int | None  # None: the reply carried no usage
    completion_tokens: int | None
    latency_s: float
    cached: bool
    usd: float | None  # None: unknown (no price, or no token counts)
    phase: str = ""
    purpose: str = ""


RESULT_RUN_KEY = "llm_run"  # the key of a stored result's ``extra`` that holds its run's RunTag.run_id


@dataclass(frozen=True)
class RunTag:
    """The run an LLM call belongs to: one attempt at one result. ``run_id`` is new for every
    attempt and is stored with the result, so the journal tells finished runs from the others."""

    run_id: str
    result_key: str = ""
    retriever: str = ""
    label: str = ""
    spec_hash: str = ""
    benchmark: str = ""
    seed: int | None = None

    @staticmethod
    def new(**fields: Any) -> "RunTag":
        return RunTag(uuid.uuid4().hex, **fields)


@dataclass
class Ledger:
    phases: dict[str, PhaseTime] = field(default_factory=dict)
    llm_calls: list[LLMCall] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    run: RunTag | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _current: str = ""
    _nested: list[list[float]] = field(default_factory=list, repr=False)  # per open phase: [wall, cpu] of its inner phases
    # per phase: what the cached artefacts it reused cost when they were computed (harness/cost/figures.py)
    reused: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def current_phase(self) -> str:
        return self._current

    @contextlib.contextmanager
    def phase(self, name: str, items: int = 0) -> Iterator[PhaseTime]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases are {PHASES}")
        rec = self.phases.setdefault(name, PhaseTime(name))
        prev, self._current = self._current, name
        inner = [0.0, 0.0]
        self._nested.append(inner)
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield rec
        finally:
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            self._nested.pop()
            # a phase opened inside another (model loading inside index) is counted once: in itself
            rec.wall_s += wall - inner[0]
            rec.cpu_s += cpu - inner[1]
            rec.items += items
            if self._nested:
                self._nested[-1][0] += wall
                self._nested[-1][1] += cpu
            self._current = prev

    def record_llm_call(self, call: LLMCall) -> None:
        with self._lock:
            if not call.phase:
                call.phase = self._current
            self.llm_calls.append(call)

    def reuse(self, kind: str, wall_s: float | None, cpu_s: float | None = None, *, usd: float | None = 0.0,
              phase: str | None = None) -> None:
        """A cached artefact of ``kind`` (``embeddings``, ``model``, ``trained encoder``, ``llm``) was
        reused in ``phase`` (default: the current one): it cost ``wall_s`` / ``cpu_s`` seconds and
        ``usd`` dollars when it was computed; ``None``: not recorded (counted as ``unknown`` /
        ``cpu_unknown`` / ``usd_unknown``)."""
        with self._lock:
            rec = self.reused.setdefault(phase or self._current or "index", {
                "wall_s": 0.0, "cpu_s": 0.0, "entries": 0, "unknown": 0, "cpu_unknown": 0, "usd": 0.0,
                "usd_unknown": 0, "kinds": {}})
            rec["entries"] += 1
            rec["kinds"][kind] = rec["kinds"].get(kind, 0) + 1
            if wall_s is None:
                rec["unknown"] += 1
            else:
                rec["wall_s"] += float(wall_s)
            if cpu_s is None:
                rec["cpu_unknown"] += 1
            else:
                rec["cpu_s"] += float(cpu_s)
            if usd is None:
                rec["usd_unknown"] += 1
            else:
                rec["usd"] += float(usd)

    def count(self, name: str, n: int = 1) -> None:
        """A named event counter (``llm.retries``, ``deo.fallback`` …), kept with the result."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def to_dict(self) -> dict[str, Any]:
        """``phases`` and ``llm_calls`` in the form the results store keeps."""
        return {
            "phases": {k: {"wall_s": v.wall_s, "cpu_s": v.cpu_s, "items": v.items} for k, v in self.phases.items()},
            "llm_calls": [asdict(c) for c in self.llm_calls],
        }


# -- the journal of billed calls -------------------------------------------------------------------

JOURNAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS billed_calls (
  id INTEGER PRIMARY KEY,
  created_at TEXT NOT NULL,
  run_id TEXT,
  result_key TEXT NOT NULL DEFAULT '',
  retriever TEXT NOT NULL DEFAULT '',
  label TEXT NOT NULL DEFAULT '',
  spec_hash TEXT NOT NULL DEFAULT '',
  benchmark TEXT NOT NULL DEFAULT '',
  seed INTEGER,
  model TEXT NOT NULL,
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
  latency_s REAL NOT NULL,
  usd REAL,
  phase TEXT NOT NULL,
  purpose TEXT NOT NULL
)
"""
_JOURNAL_COLUMNS = ("created_at", "run_id", "result_key", "retriever", "label", "spec_hash", "benchmark", "seed",
                    "model", "prompt_tokens", "completion_tokens", "latency_s", "usd", "phase", "purpose")


class CallJournal:
    """Append-only SQLite (WAL) record of billed LLM calls: each :meth:`record` is its own committed
    transaction, so a call is on disk before the code that asked for it sees the reply. Shared
    between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=60)
        with self._lock, self._conn:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(JOURNAL_SCHEMA)

    def record(self, call: LLMCall, run: RunTag | None = None) -> None:
        r = run or RunTag("")
        row = (_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"), r.run_id or None,
               r.result_key, r.retriever, r.label, r.spec_hash, r.benchmark, r.seed, call.model, call.prompt_tokens,
               call.completion_tokens, float(call.latency_s), call.usd, call.phase, call.purpose)
        with self._lock, self._conn:
            self._conn.execute(f"INSERT INTO billed_calls ({', '.join(_JOURNAL_COLUMNS)}) "
                               f"VALUES ({', '.join('?' * len(_JOURNAL_COLUMNS))})", row)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """Every journaled call, oldest first, as ``{column: value}`` (``run_id`` ``None``: made outside
    a run). Read-only; a missing file or a file without the journal table holds none; a file that
    is not readable SQLite is a ValueError naming it."""
    p = Path(path)
    if not p.is_file():
        return []
    try:
        conn = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
        try:
            conn.row_factory = sqlite3.Row
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='billed_calls'").fetchone() is None:
                return []
            return [dict(r) for r in conn.execute(f"SELECT {', '.join(_JOURNAL_COLUMNS)} FROM billed_calls ORDER BY id")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{p}: cannot read the journal of billed LLM calls: {e}") from None


# -- totals ----------------------------------------------------------------------------------------

def _known_sum(values: Iterable[int | None]) -> tuple[int, int]:
    """(sum of the known values, number of unknown ones)."""
    known, unknown = 0, 0
    for v in values:
        if v is None:
            unknown += 1
        else:
            known += int(v)
    return known, unknown


def call_totals(calls: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over LLM-call records (``LLMCall`` fields, as stored). ``usd`` is the spend of the
    non-cached calls; ``prompt_tokens`` / ``completion_tokens`` sum every call. Each is ``None``
    when a term is unknown — never a silent 0 — and ``*_known`` keeps the known part;
    ``usage_unknown_calls`` counts the calls without token counts."""
    calls = list(calls)
    billed = [c for c in calls if not c["cached"]]
    usd_known, usd_unknown = 0.0, 0
    for c in billed:
        if c["usd"] is None:
            usd_unknown += 1
        else:
            usd_known += float(c["usd"])
    pt, pt_unknown = _known_sum(c["prompt_tokens"] for c in calls)
    ct, ct_unknown = _known_sum(c["completion_tokens"] for c in calls)
    return {
        "calls": len(calls),
        "cache_hits": len(calls) - len(billed),
        "prompt_tokens": None if pt_unknown else pt,
        "completion_tokens": None if ct_unknown else ct,
        "prompt_tokens_known": pt,
        "completion_tokens_known": ct,
        "usage_unknown_calls": sum(c["prompt_tokens"] is None or c["completion_tokens"] is None for c in calls),
        "usd": None if usd_unknown else usd_known,
        "usd_known": usd_known,
    }


def phase_totals(phases: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Offline (fit + index) and online (search) wall and CPU seconds, search items, model loading
    seconds and total CPU seconds of one result's phase records; a figure whose phases were not
    recorded is ``None``. CPU seconds are this process's (all its threads): on a shared machine they
    measure the work where wall seconds also measure the other load."""
    offline = [phases[p] for p in OFFLINE_PHASES if p in phases]
    online = [phases[p] for p in ONLINE_PHASES if p in phases]
    complete = len(online) == len(ONLINE_PHASES)
    return {
        "offline_s": float(sum(p["wall_s"] for p in offline)) if offline else None,
        "offline_cpu_s": float(sum(p["cpu_s"] for p in offline)) if offline else None,
        "online_s": float(sum(p["wall_s"] for p in online)) if complete else None,
        "online_cpu_s": float(sum(p["cpu_s"] for p in online)) if complete else None,
        "online_items": sum(int(p["items"]) for p in online),
        "model_s": float(phases["model"]["wall_s"]) if "model" in phases else None,
        "cpu_s": float(sum(p["cpu_s"] for p in phases.values())) if phases else None,
    }
