"""The cost and efficiency audit behind ``beyondsim audit``
(docs/design/ledger-and-cost.md#the-audit): functions over stored
:class:`~harness.store.results.ResultRecord` s, free of the command line.

* :func:`group` sums phase times and LLM calls per retriever × benchmark pair, retriever,
  benchmark or LLM model. Cache hits and billed calls (``calls − cache hits``) are kept apart,
  with the tokens of each. ``usd`` is the new spend recorded at run time (a cache hit costs
  nothing new). A billed call of a model without a price, or whose reply reported no token
  counts, makes ``usd`` ``None`` ("unknown"), never 0; ``usd_known`` keeps the known part and
  ``usd_unknown_calls`` the number of billed calls it leaves out. Token sums follow the same
  rule: ``None`` when a term is unknown, the known part in ``*_known``.
* :func:`unfinished_runs` reads the journal of billed calls (:class:`~harness.core.ledger.CallJournal`)
  for the calls of runs whose result is not stored — stopped by the budget, failed, killed, or
  replaced by ``--force`` — and of calls made outside a run; :func:`group` lists them in rows of
  their own (``status``), so every billed call is counted once.
* :func:`select` keeps the results created at or after a time (:func:`parse_since`).
* :func:`project` estimates what running a suite would take per retriever: measured per-query
  rates (online seconds, LLM calls, tokens, and dollars with every recorded call — cached ones
  too — priced at today's prices, i.e. the cost without the cache) times each benchmark's query
  count, plus offline seconds measured on that benchmark, else the measured per-document rate
  times its corpus size. Calls whose purpose ends in :data:`PER_DOCUMENT` (made at most once per
  document) are capped at one per document of the benchmark. What cannot be measured or counted
  stays unknown.

Every number read from a stored result or the journal is checked (harness/cost/figures.py:
:func:`~harness.cost.figures.seconds`, :func:`~harness.cost.figures.usd_amount`): one that is not a
finite, non-negative amount below its bound is unknown, never 0 and never the bad value; every row
is finite (:func:`~harness.cost.figures.finite`: no ``Infinity`` or ``NaN`` ever, unknown is null).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .figures import Amount, Costs, Money, count, finite, phase_figures, seconds, usd_amount
from ..core.ledger import OFFLINE_PHASES, RESULT_RUN_KEY, read_journal
from ..models.llm import Price, cache_file, price_for
from ..store.results import BenchmarkInfo, ResultRecord

GROUPINGS = ("pair", "retriever", "benchmark", "model")
ALL = "*"
STORED, UNFINISHED, OUTSIDE = "stored", "unfinished run", "outside a run"

# -- --since ---------------------------------------------------------------------------------------

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _utc(t: _dt.datetime) -> _dt.datetime:
    return t.replace(tzinfo=_dt.timezone.utc) if t.tzinfo is None else t.astimezone(_dt.timezone.utc)


def parse_since(text: str, now: _dt.datetime | None = None) -> _dt.datetime:
    """An ISO date (``2026-01-31``: midnight), datetime (``2026-01-31T12:00``, optional UTC offset;
    without one it is UTC), or an age before ``now``: ``30m``, ``12h``, ``7d``, ``2w`` (also ``s``)."""
    m = _AGE.match(text)
    if m:
        now = _utc(now or _dt.datetime.now(_dt.timezone.utc))
        return now - _dt.timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2).lower()])
    try:
        return _utc(_dt.datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(f"--since {text!r}: expected an ISO date or datetime (2026-01-31, 2026-01-31T12:00, "
                         "2026-01-31T12:00+02:00; UTC when no offset is given) or an age: 30m, 12h, 7d, 2w") from None


def created_at(rec: ResultRecord) -> _dt.datetime | None:
    try:
        return _utc(_dt.datetime.fromisoformat(rec.created_at))
    except (TypeError, ValueError):
        return None


def select(records: Iterable[ResultRecord], since: _dt.datetime | None = None) -> list[ResultRecord]:
    """The records created at or after ``since`` (all when ``None``; one without a readable
    creation time only then)."""
    if since is None:
        return list(records)
    return [r for r in records if (t := created_at(r)) is not None and t >= since]


# -- runs without a stored result -------------------------------------------------------------------

@dataclass
class UnfinishedRun:
    """The journaled billed calls of one run whose result is not stored (``status`` UNFINISHED), or
    of the calls made outside any run (OUTSIDE, with empty label and benchmark). It has no phases."""

    key: str
    label: str
    benchmark: str
    status: str
    created_at: str
    llm_calls: list[dict[str, Any]]
    phases: dict[str, dict[str, float]] = field(default_factory=dict)


def unfinished_runs(home: Path, stored: Iterable[ResultRecord], *, benchmark: str | None = None,
                    retriever: str | None = None, since: _dt.datetime | None = None) -> list[UnfinishedRun]:
    """The billed calls in the journal of ``home`` that no stored result accounts for: those of a
    run whose id is not among ``stored`` (pass every stored result that ``benchmark`` and
    ``retriever`` select, before any ``since`` filter), made at or after ``since``."""
    finished = {rid for r in stored if isinstance(r.extra, dict) and (rid := r.extra.get(RESULT_RUN_KEY))}
    runs: dict[str, UnfinishedRun] = {}
    for row in read_journal(cache_file(home)):
        run_id = row["run_id"]
        if run_id in finished:
            continue
        if benchmark is not None and row["benchmark"] != benchmark:
            continue
        if retriever is not None and retriever not in (row["retriever"], row["label"]):
            continue
        when = row["created_at"]
        if since is not None:
            try:
                if _utc(_dt.datetime.fromisoformat(when)) < since:
                    continue
            except ValueError:
                continue
        key = run_id or OUTSIDE
        run = runs.get(key)
        if run is None:
            run = runs[key] = UnfinishedRun(key, row["label"] if run_id else "", row["benchmark"] if run_id else "",
                                            UNFINISHED if run_id else OUTSIDE, when, [])
        run.llm_calls.append({k: row[k] for k in ("model", "prompt_tokens", "completion_tokens", "latency_s", "usd",
                                                  "phase", "purpose")} | {"cached": False})
    return list(runs.values())


# -- grouping --------------------------------------------------------------------------------------

def _add(a: float | None, b: float | None) -> float | None:
    return a if b is None else (b if a is None else a + b)


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), nd)


def _tokens(x: Any) -> int | None:
    """A recorded token count, or ``None`` (unknown) when it is missing or not a count."""
    return count(x)


Partial = Amount  # a sum some of whose terms may be unknown (harness/cost/figures.py)


@dataclass
class Tally:
    """Sums over the results (and LLM calls) of one group."""

    results: set[str] = field(default_factory=set)
    unfinished: set[str] = field(default_factory=set)
    queries: int = 0
    offline_s: float | None = None  # cold (harness/cost/figures.py)
    online_s: float | None = None
    run_offline_s: float | None = None  # this run
    run_online_s: float | None = None
    cpu_s: float | None = None
    cached: set[str] = field(default_factory=set)
    reused_unknown: int = 0
    derived: int = 0  # results whose cold cost is derived (stored before artefacts recorded theirs)
    cold_usd: Money = field(default_factory=Money)
    calls: int = 0
    cache_hits: int = 0
    billed_prompt: Partial = field(default_factory=Partial)
    billed_completion: Partial = field(default_factory=Partial)
    cached_prompt: Partial = field(default_factory=Partial)
    cached_completion: Partial = field(default_factory=Partial)
    usage_unknown_calls: int = 0
    usd_known: float = 0.0
    unknown_calls: int = 0
    unpriced: set[str] = field(default_factory=set)
    latency_s: float = 0.0
    latency_unknown: int = 0  # billed calls whose latency is not a number of seconds

    def add_result(self, rec: ResultRecord | UnfinishedRun, costs: Costs | None = None) -> None:
        t = phase_figures(rec.phases)
        c = (costs or Costs([])).of(rec)
        self.queries += t["online_items"]
        self.offline_s = _add(self.offline_s, c.offline_s)
        self.online_s = _add(self.online_s, c.online_s)
        self.run_offline_s = _add(self.run_offline_s, c.run_offline_s)
        self.run_online_s = _add(self.run_online_s, c.run_online_s)
        self.cpu_s = _add(self.cpu_s, t["cpu_s"])
        self.cached.update(c.cached)
        self.reused_unknown += c.reused_unknown
        self.derived += c.cold_basis.startswith("derived")
        self.cold_usd = self.cold_usd + c.cold_usd
        self.add_calls(rec, rec.llm_calls)

    def add_calls(self, rec: ResultRecord | UnfinishedRun, calls: Iterable[Mapping[str, Any]]) -> None:
        (self.unfinished if isinstance(rec, UnfinishedRun) else self.results).add(rec.key)
        for c in calls:
            if not isinstance(c, Mapping):
                continue
            self.calls += 1
            pt, ct = _tokens(c.get("prompt_tokens")), _tokens(c.get("completion_tokens"))
            if pt is None or ct is None:
                self.usage_unknown_calls += 1
            if c["cached"]:
                self.cache_hits += 1
                self.cached_prompt = self.cached_prompt.plus(pt)
                self.cached_completion = self.cached_completion.plus(ct)
                continue
            self.billed_prompt = self.billed_prompt.plus(pt)
            self.billed_completion = self.billed_completion.plus(ct)
            lat = seconds(c.get("latency_s") or 0.0)
            if lat is None:
                self.latency_unknown += 1
            else:
                self.latency_s += lat
            usd = usd_amount(c.get("usd"))
            if usd is None:
                self.unknown_calls += 1
                if pt is not None and ct is not None and c.get("usd") is None:  # the price is what is missing
                    self.unpriced.add(str(c.get("model")))
            else:
                self.usd_known += usd

    @property
    def usd(self) -> float | None:
        return None if self.unknown_calls else self.usd_known

    @property
    def money(self) -> Money:
        """The new spend as one value."""
        return Money(self.usd_known, self.unknown_calls)

    def llm_fields(self) -> dict[str, Any]:
        prompt, completion = self.billed_prompt + self.cached_prompt, self.billed_completion + self.cached_completion
        tokens = prompt + completion
        return {
            "llm_calls": self.calls, "cache_hits": self.cache_hits, "billed_calls": self.calls - self.cache_hits,
            **prompt.fields("prompt_tokens"), **completion.fields("completion_tokens"),
            **self.billed_prompt.fields("billed_prompt_tokens"),
            **self.billed_completion.fields("billed_completion_tokens"),
            **self.cached_prompt.fields("cached_prompt_tokens"),
            **self.cached_completion.fields("cached_completion_tokens"),
            **Partial(tokens.known / 1000, tokens.unknown).fields("tokens_k", 3),
            "usage_unknown_calls": self.usage_unknown_calls,
            **self.money.fields("usd"), **self.cold_usd.fields("cold_usd"),
            "unpriced_models": ";".join(sorted(self.unpriced)),
        }

    def row(self, status: str = STORED, **labels: str) -> dict[str, Any]:
        total = None if self.offline_s is None and self.online_s is None else (self.offline_s or 0.0) + (self.online_s or 0.0)
        run_total = None if self.run_offline_s is None and self.run_online_s is None else \
            (self.run_offline_s or 0.0) + (self.run_online_s or 0.0)
        return finite({**labels, "status": status, "results": len(self.results), "unfinished_runs": len(self.unfinished),
                "queries": self.queries,
                "offline_s": _r(self.offline_s, 4), "online_s": _r(self.online_s, 4), "total_s": _r(total, 4),
                "run_offline_s": _r(self.run_offline_s, 4), "run_online_s": _r(self.run_online_s, 4),
                "run_total_s": _r(run_total, 4), "cached": ";".join(sorted(self.cached)),
                "reused_unrecorded": self.reused_unknown, "cold_derived": self.derived,
                "qps": _r(self.queries / self.online_s, 4) if self.online_s else None, "cpu_s": _r(self.cpu_s, 4),
                **self.llm_fields()})

    def model_row(self, model: str) -> dict[str, Any]:
        return finite({"model": model, "results": len(self.results), "unfinished_runs": len(self.unfinished),
                       **self.llm_fields(), "latency_s": None if self.latency_unknown else _r(self.latency_s, 4)})


@dataclass
class Audit:
    """``rows``: one per group, sorted. ``subtotals`` (``by="pair"``): retriever label → its sum,
    for each retriever with rows on two or more benchmarks. ``total``: the sum of every row
    (``None`` when there are none)."""

    by: str
    rows: list[dict[str, Any]]
    subtotals: dict[str, dict[str, Any]]
    total: dict[str, Any] | None


def group(records: Iterable[ResultRecord | UnfinishedRun], by: str = "pair", costs: Costs | None = None) -> Audit:
    """Sum the records per ``by``: ``pair`` (retriever × benchmark), ``retriever``, ``benchmark``,
    or ``model``: the LLM calls per model name across results (results without LLM calls do not
    appear; a result that used two models counts once under each; no phase times, as a result's
    time is not split between models — ``latency_s`` is the summed latency of the billed requests).
    Except by model, the calls of :class:`UnfinishedRun` s form rows of their own (``status``).
    Seconds are cold (harness/cost/figures.py; ``costs``: of every stored result, so results stored before
    artefacts recorded their cost are derived from their neighbours), with this run's beside them."""
    records = list(records)
    costs = costs or Costs([r for r in records if isinstance(r, ResultRecord)])
    if by not in GROUPINGS:
        raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}")
    tallies: dict[tuple[str, ...], Tally] = {}
    per_retriever: dict[str, Tally] = {}
    total = Tally()
    for r in records:
        if by == "model":
            models: dict[str, list[Mapping[str, Any]]] = {}
            for c in r.llm_calls:
                if isinstance(c, Mapping):
                    models.setdefault(str(c.get("model")), []).append(c)
            for m, calls in models.items():
                tallies.setdefault((m,), Tally()).add_calls(r, calls)
            if r.llm_calls:
                total.add_calls(r, r.llm_calls)
            continue
        status = r.status if isinstance(r, UnfinishedRun) else STORED
        key = {"retriever": (r.label, ALL), "benchmark": (ALL, r.benchmark)}.get(by, (r.label, r.benchmark))
        tallies.setdefault((*key, status), Tally()).add_result(r, costs)
        per_retriever.setdefault(r.label, Tally()).add_result(r, costs)
        total.add_result(r, costs)
    if by == "model":
        rows = [t.model_row(k[0]) for k, t in sorted(tallies.items())]
        return Audit(by, rows, {}, total.model_row("total") if rows else None)
    rows = [t.row(k[2], retriever=k[0], benchmark=k[1]) for k, t in sorted(tallies.items())]
    subtotals: dict[str, dict[str, Any]] = {}
    if by == "pair":
        n_rows: dict[str, int] = {}
        for k in tallies:
            n_rows[k[0]] = n_rows.get(k[0], 0) + 1
        subtotals = {lab: t.row(ALL, retriever=lab, benchmark=ALL) for lab, t in sorted(per_retriever.items())
                     if n_rows[lab] > 1}
    return Audit(by, rows, subtotals, total.row(ALL, retriever="total", benchmark=ALL) if rows else None)


PAPER_VIEW_KEY = "cost_table"  # a suite that declares it: its benchmarks are the settings of a paper's cost table


def paper_settings(suite_table: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """``(the paper's table, its settings)`` from the first suite that declares
    :data:`PAPER_VIEW_KEY` (benchmarks/suites.py: the constraint suite, CoDeR's Table 4)."""
    for name, entry in suite_table.items():
        if entry.get(PAPER_VIEW_KEY):
            return str(entry[PAPER_VIEW_KEY]), list(entry["benchmarks"])
    raise ValueError("--view paper: no suite declares the settings of a paper's cost table "
                     f"({PAPER_VIEW_KEY!r} in benchmarks/suites.py)")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def paper_rows(records: Iterable[ResultRecord], settings: Sequence[str], costs: Costs | None = None) -> list[dict[str, Any]]:
    """Per method (retriever label), CoDeR Table 4's view over ``settings``: per setting the mean over
    seeds of cold time (offline + online s, model loading included), $ of new spend and tokens K
    (prompt + completion, cache hits included), or why the cell is empty (not run; only a query
    slice run, whose cost is not the setting's); the totals over the settings that have figures,
    with the missing ones named (a total with a missing setting is a lower bound)."""
    records = [r for r in records if isinstance(r, ResultRecord)]
    costs = costs or Costs(records)
    by: dict[str, dict[str, list[ResultRecord]]] = {}
    for r in records:
        by.setdefault(r.label, {}).setdefault(r.benchmark, []).append(r)
    out = []
    for label, benches in sorted(by.items()):
        if not any(b in settings or base_benchmark(b) in settings for b in benches):
            continue
        cells: dict[str, dict[str, Any]] = {}
        time_s, usd, tokens, missing = Amount(), Money(), Amount(), []
        for s in settings:
            rs = benches.get(s, [])
            if not rs:
                slices = sorted(b for b in benches if base_benchmark(b) == s and b != s)
                why = f"only a query slice run ({', '.join(slices)})" if slices else "not run"
                cells[s] = {"time_s": None, "usd": None, "usd_known": 0.0, "tokens_k": None, "results": 0,
                            "cold_basis": "", "missing": why}
                missing.append(s)
                continue
            rc = [costs.of(r) for r in rs]
            t = None if any(c.total_s is None for c in rc) else _mean([c.total_s for c in rc])  # type: ignore[misc]
            m = sum((c.usd for c in rc), Money()).scaled(1 / len(rs))
            k = sum((Amount.of([None if x is None else x / 1000 for x in
                                (_tokens(c2.get("prompt_tokens")), _tokens(c2.get("completion_tokens")))])
                     for r in rs for c2 in r.llm_calls if isinstance(c2, Mapping)),
                    Amount()).scaled(1 / len(rs))
            bases = sorted({c.cold_basis for c in rc if c.cold_basis.startswith("derived")})
            cells[s] = {"time_s": _r(t, 2), **m.fields("usd"), **k.fields("tokens_k", 3), "results": len(rs),
                        "cached": ";".join(sorted({x for c in rc for x in c.cached})),
                        "cold_basis": "; ".join(bases), "missing": "" if t is not None else "time not recorded"}
            time_s, usd, tokens = time_s.plus(t), usd + m, tokens + k
        out.append(finite({"method": label, "settings": cells, **Amount(time_s.known, len(missing) + time_s.unknown).fields(
            "time_s", 2), **usd.fields("usd"), **tokens.fields("tokens_k", 3), "missing": missing}))
    return out


def paper_csv_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`paper_rows` flattened: one row per method × setting, then one per method total."""
    flat = [{"method": r["method"], "setting": s, **c} for r in rows for s, c in r["settings"].items()]
    return flat + [{"method": r["method"], "setting": "total", **{k: v for k, v in r.items()
                                                                  if k not in ("settings", "method", "missing")},
                    "missing": ";".join(r["missing"])} for r in rows]


# -- projection ------------------------------------------------------------------------------------

# The purpose suffix of LLM calls a retriever makes at most once per corpus document in a run (it
# keeps each document's answer, whatever number of queries retrieve it): project() caps their
# projected number — with their tokens, dollars and share of the search time — at one per document.
PER_DOCUMENT = "@document"


def base_benchmark(name: str) -> str:
    """``nevir[:50]`` (a query slice over the same corpus) → ``nevir``."""
    return re.sub(r"\[:\d+\]$", "", name)


@dataclass
class Cost:
    """LLM usage priced at today's prices, cache hits included; counts may be fractional once scaled."""

    calls: float = 0.0
    prompt: float = 0.0  # the known part when ``usage_unknown``
    completion: float = 0.0
    usd_known: float = 0.0
    unknown_calls: float = 0.0  # calls whose $ is unknown (no price, or no token counts)
    unpriced: frozenset[str] = frozenset()
    usage_unknown: float = 0.0  # calls that reported no token counts

    @classmethod
    def of(cls, calls: Iterable[Mapping[str, Any]], prices: Mapping[str, Price]) -> "Cost":
        out = cls()
        unpriced = set()
        for c in calls:
            pt, ct = _tokens(c.get("prompt_tokens")), _tokens(c.get("completion_tokens"))
            out.calls += 1
            out.prompt += pt or 0
            out.completion += ct or 0
            out.usage_unknown += pt is None or ct is None
            price = price_for(str(c.get("model")), prices)
            usd = None if price is None else price.cost_of(pt, ct)
            if usd is None:
                out.unknown_calls += 1
                if price is None:
                    unpriced.add(str(c.get("model")))
            else:
                out.usd_known += usd
        out.unpriced = frozenset(unpriced)
        return out

    def __add__(self, o: "Cost") -> "Cost":
        return Cost(self.calls + o.calls, self.prompt + o.prompt, self.completion + o.completion,
                    self.usd_known + o.usd_known, self.unknown_calls + o.unknown_calls, self.unpriced | o.unpriced,
                    self.usage_unknown + o.usage_unknown)

    def scaled(self, f: float) -> "Cost":
        return Cost(self.calls * f, self.prompt * f, self.completion * f, self.usd_known * f, self.unknown_calls * f,
                    self.unpriced, self.usage_unknown * f)

    @property
    def tokens(self) -> Partial:
        return Partial(self.prompt + self.completion, self.usage_unknown)

    @property
    def usd(self) -> float | None:
        return None if self.unknown_calls else self.usd_known


@dataclass
class Rates:
    """What one retriever's results measured: search seconds, queries and online LLM usage; offline
    (fit + index) seconds and LLM usage per base benchmark, and over the results whose indexed
    corpus size is recorded (the per-document rate)."""

    retriever: str
    queries: int = 0
    online_s: float = 0.0
    online: Cost = field(default_factory=Cost)
    measured_on: dict[str, int] = field(default_factory=dict)  # benchmark → queries searched there
    offline_by_benchmark: dict[str, list[tuple[float, Cost]]] = field(default_factory=dict)
    docs: int = 0
    docs_offline_s: float = 0.0
    docs_offline: Cost = field(default_factory=Cost)
    offline_llm: bool = False
    per_document: Cost = field(default_factory=Cost)  # the online calls marked PER_DOCUMENT ...
    other_online: Cost = field(default_factory=Cost)  # ... and the rest
    per_document_s: float = 0.0  # their share of online_s (by latency)

    def row(self) -> dict[str, Any]:
        q = self.queries
        per = (lambda x: x / q) if q else (lambda x: None)
        usage_known = not self.online.usage_unknown
        offline_unknown = sum(c.usage_unknown for runs in self.offline_by_benchmark.values() for _, c in runs)
        return {
            "retriever": self.retriever, "queries": q,
            "measured_on": dict(sorted(self.measured_on.items())),
            "online_s_per_query": _r(per(self.online_s), 6), "llm_calls_per_query": _r(per(self.online.calls), 4),
            "prompt_tokens_per_query": _r(per(self.online.prompt), 2) if usage_known else None,
            "completion_tokens_per_query": _r(per(self.online.completion), 2) if usage_known else None,
            "tokens_per_query": _r(per(self.online.prompt + self.online.completion), 2) if usage_known else None,
            "tokens_per_query_known": _r(per(self.online.prompt + self.online.completion), 2),
            "calls_without_usage": round(self.online.usage_unknown + offline_unknown, 2),
            "usd_per_query": _r(per(self.online.usd_known), 10) if not self.online.unknown_calls else None,
            "usd_known_per_query": _r(per(self.online.usd_known), 10),
            "unpriced_models": ";".join(sorted(self.online.unpriced | self.docs_offline.unpriced)),
            "offline_s_per_document": _r(self.docs_offline_s / self.docs, 8) if self.docs else None,
            "documents_measured": self.docs,
            "offline_measured_on": {b: len(v) for b, v in sorted(self.offline_by_benchmark.items())},
        }


def measure(records: Iterable[ResultRecord], prices: Mapping[str, Price]) -> dict[str, Rates]:
    """Per retriever label: the rates :func:`project` scales. LLM calls made in an offline phase
    (``fit``/``index``) count with the offline cost; all other calls per query. A result without
    a measured search phase adds no per-query rate."""
    out: dict[str, Rates] = {}
    for r in records:
        rt = out.setdefault(r.label, Rates(r.label))
        t = phase_figures(r.phases)
        calls = [c for c in r.llm_calls if isinstance(c, Mapping)]
        offline_calls = [c for c in calls if c.get("phase") in OFFLINE_PHASES]
        online_calls = [c for c in calls if c.get("phase") not in OFFLINE_PHASES]
        if t["online_s"] is not None and t["online_items"] > 0:
            rt.queries += t["online_items"]
            rt.online_s += t["online_s"]
            rt.online = rt.online + Cost.of(online_calls, prices)
            marked = [str(c.get("purpose") or "").endswith(PER_DOCUMENT) for c in online_calls]
            per_doc = [c for c, m in zip(online_calls, marked) if m]
            rt.per_document = rt.per_document + Cost.of(per_doc, prices)
            rt.other_online = rt.other_online + Cost.of([c for c, m in zip(online_calls, marked) if not m], prices)
            lat_doc = sum(seconds(c.get("latency_s")) or 0.0 for c in per_doc)
            lat_all = sum(seconds(c.get("latency_s")) or 0.0 for c in online_calls)
            if lat_doc > 0:  # requests may overlap: the wall time is split in proportion to latency
                rt.per_document_s += t["online_s"] * lat_doc / max(lat_all, t["online_s"])
            rt.measured_on[r.benchmark] = rt.measured_on.get(r.benchmark, 0) + t["online_items"]
        if t["offline_s"] is not None:
            off = Cost.of(offline_calls, prices)
            rt.offline_llm = rt.offline_llm or bool(offline_calls)
            rt.offline_by_benchmark.setdefault(base_benchmark(r.benchmark), []).append((t["offline_s"], off))
            docs = int(count((r.phases.get("index") or {}).get("items") if isinstance(r.phases, Mapping) else 0) or 0)
            if docs > 0:
                rt.docs += docs
                rt.docs_offline_s += t["offline_s"]
                rt.docs_offline = rt.docs_offline + off
    return out


@dataclass
class Counts:
    queries: int | None
    documents: int | None
    source: str  # "store", "registry", or why the counts are missing


def benchmark_counts(name: str, infos: Sequence[BenchmarkInfo], records: Sequence[ResultRecord] = (),
                     fallback: Callable[[str], Mapping[str, Any] | None] | None = None) -> Counts:
    """The query count (``judged_queries``: the queries a run searches; else ``queries``) and corpus
    size of benchmark ``name`` from the store's :class:`BenchmarkInfo` (the version of its latest
    result when several are stored), else from ``fallback(name)`` (stats of the benchmark loaded
    from disk), else unknown."""
    cands = [i for i in infos if i.name == name]
    if cands:
        latest = max((r for r in records if r.benchmark == name), key=lambda r: r.created_at or "", default=None)
        chosen = next((i for i in cands if latest is not None and i.version == latest.benchmark_version), cands[-1])
        stats: Mapping[str, Any] | None = chosen.stats
        source = "store"
    else:
        stats = fallback(name) if fallback is not None else None
        source = "registry"
    if stats is None:
        where = getattr(fallback, "where", None)
        return Counts(None, None, "not in the results store" + (f" and not on disk in {where}" if where else
                                                                 " and not loadable" if fallback else ""))
    q = stats.get("judged_queries", stats.get("queries"))
    d = stats.get("documents")
    if q is None:
        return Counts(None, None, f"no query count in its {source} statistics")
    return Counts(int(q), None if d is None else int(d), source)


def registry_stats(data_dir: Path) -> Callable[[str], Mapping[str, Any] | None]:
    """A :func:`benchmark_counts` fallback: the stats of a benchmark loaded through the registry
    from ``data_dir`` when all its files are there (never fetched); ``None`` on any failure."""
    from ..data.readers import missing_files
    from ..core.registry import get_benchmark_loader

    def stats(name: str) -> Mapping[str, Any] | None:
        try:
            loader, bname = get_benchmark_loader(name)
            check = getattr(loader, "missing_files", None)
            missing = check(bname, data_dir) if callable(check) else missing_files(data_dir, loader.info(bname).files)
            if missing:
                return None
            return dict(loader.load(bname, data_dir, online=False).stats())
        except Exception:  # noqa: BLE001 - an estimate is optional; any failure means "unknown"
            return None

    stats.where = str(data_dir)  # type: ignore[attr-defined]
    return stats


@dataclass
class Projection:
    targets: list[str]
    rates: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    totals: list[dict[str, Any]]
    not_projected: list[dict[str, str]]

    def to_dict(self) -> dict[str, Any]:
        return finite({"benchmarks": self.targets, "rates": self.rates, "rows": self.rows, "totals": self.totals,
                       "not_projected": self.not_projected})


def _cost_fields(c: Cost, unknown_offline: bool = False) -> dict[str, Any]:
    """LLM usage of a projection row; with ``unknown_offline`` (offline LLM calls that could not be
    scaled) its tokens and $ are incomplete, so ``None``, with the known part in ``*_known``."""
    unknown = unknown_offline or bool(c.usage_unknown)
    return {"llm_calls": round(c.calls, 2),
            "prompt_tokens": None if unknown else round(c.prompt, 1),
            "completion_tokens": None if unknown else round(c.completion, 1),
            "tokens_k": None if unknown else round((c.prompt + c.completion) / 1000, 3),
            "tokens_k_known": round((c.prompt + c.completion) / 1000, 3),
            "usage_unknown_calls": round(c.usage_unknown, 2),
            "usd": None if unknown_offline or c.unknown_calls else round(c.usd_known, 8),
            "usd_known": round(c.usd_known, 8), "usd_unknown_calls": round(c.unknown_calls, 2),
            "unpriced_models": ";".join(sorted(c.unpriced))}


def project(records: Sequence[ResultRecord], targets: Sequence[str], infos: Sequence[BenchmarkInfo],
            prices: Mapping[str, Price], fallback: Callable[[str], Mapping[str, Any] | None] | None = None) -> Projection:
    """For each retriever with a measured search phase and each target benchmark whose query count is
    known: online seconds and LLM usage = per-query rates × queries; offline seconds (and offline LLM
    usage) = the mean over the retriever's results on that benchmark (or a query slice of it), else
    the per-document rate × corpus size, else unmeasured (``None``). ``usd`` prices every recorded
    call at ``prices`` (the cost without the cache); ``None`` when a model has no price, or when the
    retriever made offline LLM calls and the offline part is unmeasured. Per retriever, ``totals``
    sums its projected benchmarks (``None`` where a part is unknown; ``*_known`` keep the rest)."""
    rates = measure(records, prices)
    if not any(rt.queries for rt in rates.values()):  # nothing to scale: do not count (or load) anything
        return Projection(list(targets), [rt.row() for _, rt in sorted(rates.items())], [], [],
                          [{"benchmark": b, "reason": "no selected result has a measured search phase"} for b in targets])
    counts = {b: benchmark_counts(b, infos, records, fallback) for b in targets}
    not_projected = [{"benchmark": b, "reason": c.source} for b, c in counts.items() if c.queries is None]
    rows: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for label, rt in sorted(rates.items()):
        if not rt.queries:
            not_projected.append({"retriever": label, "reason": "no measured search phase in the selected results"})
            continue
        mine: list[dict[str, Any]] = []
        tot_cost, tot_on, tot_off, off_known_s, unknown_off = Cost(), 0.0, 0.0, True, False
        for b in targets:
            c = counts[b]
            if c.queries is None:
                continue
            f = c.queries / rt.queries
            online_s, cost = rt.online_s * f, rt.online.scaled(f)
            capped = bool(rt.per_document.calls) and c.documents is not None and \
                rt.per_document.calls * f > c.documents
            if capped:  # at most one call per document: scale those by documents / calls, not by queries
                g = c.documents / rt.per_document.calls
                online_s -= rt.per_document_s * (f - g)
                cost = rt.other_online.scaled(f) + rt.per_document.scaled(g)
            measured = rt.offline_by_benchmark.get(base_benchmark(b))
            off_s: float | None
            off_cost: Cost | None
            if measured:
                off_s = sum(s for s, _ in measured) / len(measured)
                off_cost = sum((x for _, x in measured), Cost()).scaled(1 / len(measured))
                basis = f"measured on {base_benchmark(b)} ({len(measured)} result{'s' if len(measured) > 1 else ''})"
            elif rt.docs and c.documents is not None:
                per_doc = rt.docs_offline_s / rt.docs
                off_s, off_cost = per_doc * c.documents, rt.docs_offline.scaled(c.documents / rt.docs)
                basis = f"{per_doc:.3g} s/document × {c.documents:,} documents"
            else:
                off_s, off_cost = None, None
                why = ("corpus size unknown" if rt.docs else "no indexed corpus size recorded"
                       if rt.offline_by_benchmark else "no offline phase measured")
                basis = f"unmeasured ({why})"
            unknown_llm = off_cost is None and rt.offline_llm
            total_cost = cost + (off_cost or Cost())
            row = {"retriever": label, "benchmark": b, "queries": c.queries, "documents": c.documents,
                   "counts_from": c.source, "online_s": round(online_s, 4), "offline_s": _r(off_s, 4),
                   "per_document_capped": capped,
                   "total_s": None if off_s is None else round(online_s + off_s, 4), "offline_basis": basis,
                   **_cost_fields(total_cost, unknown_llm)}
            mine.append(row)
            tot_cost = tot_cost + total_cost
            tot_on += online_s
            if off_s is None:
                off_known_s = False
            else:
                tot_off += off_s
            unknown_off = unknown_off or unknown_llm
        if not mine:
            continue
        rows += mine
        n_targets = len(targets)
        totals.append({"retriever": label, "benchmark": f"total ({len(mine)} of {n_targets})", "queries": sum(r["queries"] for r in mine),
                       "documents": None if any(r["documents"] is None for r in mine) else sum(r["documents"] for r in mine),
                       "counts_from": "", "online_s": round(tot_on, 4), "offline_s": round(tot_off, 4) if off_known_s else None,
                       "offline_s_known": round(tot_off, 4),
                       "total_s": round(tot_on + tot_off, 4) if off_known_s else None,
                       "offline_basis": "" if off_known_s else "some benchmarks unmeasured",
                       **_cost_fields(tot_cost, unknown_off)})
    return Projection(list(targets), [rt.row() for _, rt in sorted(rates.items())], rows, totals, not_projected)


# -- the audit of a store, as the ``audit`` verb shows it ---------------------------------------


@dataclass
class StoreAudit:
    """What ``beyondsim audit`` shows of a store: the selected results (``records``), their audit
    grouped ``by`` (``grouped``; billed calls of runs that stored nothing included), and the rows
    to print (``rows``: the grouped rows, or CoDeR Table 4's view with ``paper`` and ``settings``)."""

    records: list[ResultRecord]
    infos: list[BenchmarkInfo]
    grouped: Audit
    rows: list[dict[str, Any]]
    scope: str
    paper: str = ""
    settings: list[str] = field(default_factory=list)

    @property
    def unpriced(self) -> list[str]:
        """The models no price was known for when they ran (their spend is unknown)."""
        return sorted({m for r in self.grouped.rows for m in r["unpriced_models"].split(";") if m})


def scope_text(retriever: str | None, benchmark: str | None, since: _dt.datetime | None) -> str:
    """The selection an audit covers, in words (empty for everything)."""
    return ", ".join(s for s in (f"retriever {retriever}" if retriever else "",
                                 f"benchmark {benchmark}" if benchmark else "",
                                 f"since {since.isoformat(timespec='seconds')}" if since else "") if s)


def select_from_store(store: Any, *, retriever: str | None = None, benchmark: str | None = None,
                      since: _dt.datetime | None = None) -> tuple[list[ResultRecord], list[ResultRecord],
                                                                  list[BenchmarkInfo]]:
    """The stored results a selection names, the selected ones (``since``) and the store's
    benchmark records."""
    stored = store.results(benchmark=benchmark, retriever=retriever)
    return stored, select(stored, since), store.benchmarks()


def audit_store(store: Any, home: Path, *, by: str | None = None, retriever: str | None = None,
                benchmark: str | None = None, since: _dt.datetime | None = None, view: str = "full",
                suite_table: Mapping[str, Mapping[str, Any]] | None = None) -> StoreAudit:
    """The audit of ``store``'s results (``retriever``/``benchmark``/``since`` select them), grouped
    ``by`` pair (default), retriever, benchmark or model, with the billed calls of the runs under
    ``home`` that stored no result; ``view="paper"``: CoDeR Table 4's view over ``suite_table``'s
    paper settings. A ValueError names what does not combine."""
    if view not in ("full", "paper"):
        raise ValueError("--view must be full or paper")
    if view == "paper" and by == "model":
        raise ValueError("--view paper aggregates per method: it does not combine with --by model")
    stored, records, infos = select_from_store(store, retriever=retriever, benchmark=benchmark, since=since)
    costs = Costs(store.results())  # every stored result: those without recorded reuse derive from the others
    unfinished = unfinished_runs(home, stored, benchmark=benchmark, retriever=retriever, since=since)
    grouped = group(records + unfinished, by or "pair", costs)
    out = StoreAudit(records, infos, grouped, grouped.rows, scope_text(retriever, benchmark, since))
    if view == "paper":
        out.paper, out.settings = paper_settings(suite_table or {})
        out.rows = paper_rows(records, out.settings, costs)
    return out


def projection_targets(target: str, suite_table: Mapping[str, Mapping[str, Any]],
                       known: Callable[[str], bool]) -> list[str]:
    """The benchmarks ``--project TARGET`` names: a suite's, or comma-separated names; a single
    name that is neither a suite nor a benchmark ``known`` knows is a ValueError."""
    if target in suite_table:
        return list(suite_table[target]["benchmarks"])
    benches = [b.strip() for b in target.split(",") if b.strip()]
    if len(benches) == 1 and "," not in target and not known(benches[0]):
        raise ValueError(f"--project {target!r} is neither a suite ({', '.join(sorted(suite_table))}) nor a benchmark")
    if not benches:
        raise ValueError("--project needs a suite or benchmark names")
    return benches
