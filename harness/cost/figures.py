"""Cold-equivalent cost of stored results, and the one value type for money
(docs/design/ledger-and-cost.md#cold-cost).

A result that reuses a cached artefact — an embedding cache entry, an encoder's loaded weights, a
trained encoder, an LLM reply — did not pay for it in *this run*, but a run on a fresh machine
would. Each artefact records what computing it cost (wall and CPU seconds, dollars) when it is
written (:mod:`harness.models.pool`, :mod:`harness.models.llm`, the trained-encoder cards), and the ledger
of a result that reuses it records that cost under the phase that asked for it
(:meth:`harness.core.ledger.Ledger.reuse`; stored in ``extra["reused"]``). :func:`result_cost` adds
them up:

* *cold* figures — ``offline_s`` (fit + index + model loading + what they reused), ``online_s``
  (search + what it reused), ``total_s`` — do not depend on what ran before;
* *this run* figures — ``run_offline_s`` (fit + index, model loading apart), ``run_online_s``,
  ``run_total_s`` — are what the machine spent;
* ``cached`` names the parts that came from a cache (``embeddings``, ``model``, ``trained
  encoder``, ``llm``); ``usd`` is the new spend (a cache hit costs nothing new) and ``cold_usd``
  adds what the reused LLM replies cost when they were first paid for.

Results stored before artefacts recorded their cost (the shipped reference bundle among them)
have no ``extra["reused"]``; :func:`derive_cold` estimates their cold offline cost from the
other results with the same encoder (``model`` parameter) on the same benchmark: the largest
index time of a training-free result there, or, when every one of them read the corpus from the
cache, the encoder's median per-document rate on the other benchmarks (those not read from the
cache themselves: within a tenth of the largest rate) times the corpus size;
model loading from the encoder's median recorded load time. Such a figure says so
(``cold_basis``).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..core.ledger import OFFLINE_PHASES, ONLINE_PHASES

REUSED_KEY = "reused"  # the key of a stored result's ``extra`` that holds what it reused, per phase
ENCODER_PARAMS = ("model", "base_model", "encoder")


# -- amounts with an unknown part ------------------------------------------------------------------

@dataclass(frozen=True)
class Amount:
    """A sum some of whose terms are unknown: ``known`` sums the known ones, ``unknown`` counts the
    others (fractional once scaled); ``value`` is ``None`` when any is unknown."""

    known: float = 0  # an int while every term is one (token counts)
    unknown: float = 0

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Amount":
        known: float = 0
        unknown = 0
        for v in values:
            if v is None:
                unknown += 1
            else:
                known += v
        return cls(known, unknown)

    @property
    def value(self) -> float | None:
        return None if self.unknown else self.known

    def __add__(self, o: "Amount") -> Any:
        return type(self)(self.known + o.known, self.unknown + o.unknown)

    def plus(self, x: float | None) -> Any:
        return self + type(self).of([x])

    def scaled(self, f: float) -> Any:
        return type(self)(self.known * f, self.unknown * f)

    def fields(self, name: str, nd: int | None = None) -> dict[str, Any]:
        """``{name: value, name_known: known}``, rounded to ``nd`` places when given."""
        known = self.known if nd is None else round(self.known, nd)
        return {name: None if self.unknown else known, f"{name}_known": known}

    def text(self, nd: int = 2) -> str:
        """``1,234.50``; ``≥ 1,234.50`` when some terms are unknown; ``unknown`` when none is known."""
        s = f"{self.known:,.{nd}f}"
        return s if not self.unknown else (f"≥ {s}" if self.known else "unknown")


def dollars(v: float) -> str:
    """``$0``, ``$0.000012``, ``$0.0123``, ``$12.35``: one way of printing an amount of money."""
    if v == 0:
        return "$0"
    if abs(v) < 0.0001:
        return f"${v:.6f}"
    return f"${v:,.4f}" if abs(v) < 1 else f"${v:,.2f}"


@dataclass(frozen=True)
class Money(Amount):
    """US dollars with an unknown part: the spend of calls of a model without a price or whose reply
    reported no token counts is unknown, never $0. Used by the ledger's totals, the audit and the
    efficiency page alike."""

    def text(self, nd: int = 4) -> str:
        """``$0.0123``; ``≥ $0.0123`` when some terms are unknown; ``unknown`` when none is known."""
        if not self.unknown:
            return dollars(self.known)
        return f"≥ {dollars(self.known)}" if self.known else "unknown"

    def fields(self, name: str = "usd", nd: int | None = 8) -> dict[str, Any]:
        """``usd``, ``usd_known`` and ``usd_unknown_calls`` (the number of terms left out)."""
        return {**super().fields(name, nd), f"{name}_unknown_calls": self.unknown}

    @classmethod
    def from_fields(cls, row: Mapping[str, Any], name: str = "usd") -> "Money":
        """The amount a row's ``usd`` / ``usd_known`` / ``usd_unknown_calls`` fields describe."""
        known = row.get(f"{name}_known")
        if known is None:
            known = row.get(name) or 0.0
        unknown = row.get(f"{name}_unknown_calls")
        if unknown is None:
            unknown = 1 if row.get(name) is None and not known else 0
        if row.get(name) is None and not unknown:
            unknown = 1
        return cls(float(known), float(unknown))


# -- one result ------------------------------------------------------------------------------------

@dataclass
class ResultCost:
    """Cold and this-run seconds and dollars of one result (see the module docstring)."""

    offline_s: float | None
    online_s: float | None
    offline_cpu_s: float | None
    online_cpu_s: float | None
    run_offline_s: float | None
    run_online_s: float | None
    run_offline_cpu_s: float | None
    run_online_cpu_s: float | None
    model_s: float | None  # cold model loading (this run's, or what the reused model cost)
    online_items: int
    cached: tuple[str, ...]
    reused_unknown: int  # reused artefacts that recorded no cost (the cold figure is a lower bound)
    usd: Money  # new spend
    cold_usd: Money  # new spend + what the reused LLM replies cost
    cold_basis: str = "recorded"

    @property
    def total_s(self) -> float | None:
        return _sum(self.offline_s, self.online_s)

    @property
    def run_total_s(self) -> float | None:
        return _sum(self.run_offline_s, self.run_online_s)

    def fields(self) -> dict[str, Any]:
        """The figures as the audit's JSON keeps them (seconds rounded to 0.1 ms)."""
        return {"offline_s": _r(self.offline_s), "online_s": _r(self.online_s), "total_s": _r(self.total_s),
                "run_offline_s": _r(self.run_offline_s), "run_online_s": _r(self.run_online_s),
                "run_total_s": _r(self.run_total_s), "model_s": _r(self.model_s),
                "cached": ";".join(self.cached), "cold_basis": self.cold_basis,
                **self.cold_usd.fields("cold_usd")}


def _sum(*xs: float | None) -> float | None:
    known = [x for x in xs if x is not None]
    return float(sum(known)) if known else None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def reused(rec: Any) -> Mapping[str, Mapping[str, Any]] | None:
    """The per-phase record of reused artefacts of a stored result; ``None`` for a result stored
    before artefacts recorded their cost."""
    extra = rec.extra if isinstance(getattr(rec, "extra", None), dict) else {}
    r = extra.get(REUSED_KEY)
    return r if isinstance(r, Mapping) else None


def llm_money(calls: Iterable[Mapping[str, Any]]) -> Money:
    """The new spend of LLM-call records: the calls that were not cache hits."""
    return Money.of(c.get("usd") for c in calls if not c.get("cached"))


def result_cost(rec: Any, derived: "Derived | None" = None) -> ResultCost:
    """The cold and this-run cost of one stored result (:class:`~harness.store.results.ResultRecord` or
    anything with ``phases``, ``llm_calls`` and ``extra``); ``derived`` (from :func:`derive_cold`)
    fills in the cold part of a result that recorded none."""
    phases: Mapping[str, Mapping[str, float]] = rec.phases or {}
    off = [phases[p] for p in OFFLINE_PHASES if p in phases]
    on = [phases[p] for p in ONLINE_PHASES if p in phases]
    run_off = float(sum(p["wall_s"] for p in off)) if off else None
    run_off_cpu = float(sum(p["cpu_s"] for p in off)) if off else None
    run_on = float(sum(p["wall_s"] for p in on)) if len(on) == len(ONLINE_PHASES) else None
    run_on_cpu = float(sum(p["cpu_s"] for p in on)) if len(on) == len(ONLINE_PHASES) else None
    model_run = phases.get("model")
    new = llm_money(rec.llm_calls)
    r = reused(rec)
    if r is None:
        cold_usd = new + Money(0.0, sum(1 for c in rec.llm_calls if c.get("cached")))
        model = float(model_run["wall_s"]) if model_run else None
        if derived is None:
            return ResultCost(_sum(run_off, model) if run_off is not None else None, run_on,
                              _sum(run_off_cpu, float(model_run["cpu_s"]) if model_run else None)
                              if run_off_cpu is not None else None, run_on_cpu, run_off, run_on, run_off_cpu,
                              run_on_cpu, model, sum(int(p["items"]) for p in on), (), 0, new, cold_usd,
                              "this run only (stored before cached artefacts recorded their cost)")
        index = phases.get("index", {})
        extra_index = max(0.0, derived.index_s - float(index.get("wall_s", 0.0))) if derived.index_s else 0.0
        model = model if model is not None else derived.model_s
        cold_off = None if run_off is None else run_off + extra_index + (model or 0.0)
        cached = ("embeddings",) * bool(extra_index) + ("model",) * bool(not model_run and derived.model_s)
        return ResultCost(cold_off, run_on, run_off_cpu, run_on_cpu, run_off, run_on, run_off_cpu, run_on_cpu,
                          model, sum(int(p["items"]) for p in on), cached, 0, new, cold_usd,
                          derived.basis if (extra_index or cached) else "this run (no reuse found)")
    def part(phase: str, key: str) -> float:
        return float((r.get(phase) or {}).get(key) or 0.0)

    model_s = float(model_run["wall_s"]) if model_run else (part("model", "wall_s") if "model" in r else None)
    model_cpu = float(model_run["cpu_s"]) if model_run else part("model", "cpu_s")
    off_reused = sum(part(p, "wall_s") for p in OFFLINE_PHASES)
    off_reused_cpu = sum(part(p, "cpu_s") for p in OFFLINE_PHASES)
    cold_off = None if run_off is None else run_off + off_reused + (model_s or 0.0)
    cold_off_cpu = None if run_off_cpu is None else run_off_cpu + off_reused_cpu + model_cpu
    cold_on = None if run_on is None else run_on + sum(part(p, "wall_s") for p in ONLINE_PHASES)
    cold_on_cpu = None if run_on_cpu is None else run_on_cpu + sum(part(p, "cpu_s") for p in ONLINE_PHASES)
    kinds: list[str] = []
    for ph in r.values():
        for k in (ph.get("kinds") or {}):
            if k not in kinds:
                kinds.append(str(k))
    reused_usd = Money(sum(float(ph.get("usd") or 0.0) for ph in r.values()),
                       sum(float(ph.get("usd_unknown") or 0) for ph in r.values()))
    return ResultCost(cold_off, cold_on, cold_off_cpu, cold_on_cpu, run_off, run_on, run_off_cpu, run_on_cpu, model_s,
                      sum(int(p["items"]) for p in on), tuple(sorted(kinds)),
                      int(sum(int(ph.get("unknown") or 0) for ph in r.values())), new, new + reused_usd)


# -- results stored before artefacts recorded their cost -------------------------------------------

@dataclass(frozen=True)
class Derived:
    """The cold cost estimated for a result that recorded none: index seconds of a cold encoding of
    its corpus with its encoder, model loading seconds, and how they were found."""

    index_s: float
    model_s: float | None
    basis: str


def encoder_of(spec: Mapping[str, Any]) -> str:
    """The backbone encoder a result's spec names (``model``, ``base_model`` or ``encoder``)."""
    params = spec.get("params") or {} if isinstance(spec, Mapping) else {}
    for key in ENCODER_PARAMS:
        v = params.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _base(name: str) -> str:
    return re.sub(r"\[:\d+\]$", "", name)


def derive_cold(records: Sequence[Any]) -> dict[str, Derived]:
    """Result key → the estimated cold cost of each result without ``extra["reused"]`` that names
    an encoder (see the module docstring). The reference index time of (encoder, benchmark) is the
    largest index time of a training-free result (no ``fit`` phase) with that encoder there; it is
    taken as a cache hit when below a tenth of the encoder's median per-document rate times the
    corpus size, and replaced by that product then."""
    by_pair: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        enc = encoder_of(r.spec)
        if enc:
            by_pair.setdefault((enc, _base(r.benchmark)), []).append(r)
    ref: dict[tuple[str, str], tuple[float, int, str]] = {}
    for key, rs in by_pair.items():
        free = [r for r in rs if "fit" not in (r.phases or {}) and "index" in (r.phases or {})]
        if not free:
            continue
        best = max(free, key=lambda r: float(r.phases["index"]["wall_s"]))
        ref[key] = (float(best.phases["index"]["wall_s"]), int(best.phases["index"].get("items") or 0), best.label)
    rates: dict[str, list[float]] = {}
    for (enc, _), (s, docs, _) in ref.items():
        if docs:
            rates.setdefault(enc, []).append(s / docs)
    loads: dict[str, list[float]] = {}
    for r in records:
        enc = encoder_of(r.spec)
        if enc and "model" in (r.phases or {}):
            loads.setdefault(enc, []).append(float(r.phases["model"]["wall_s"]))
    for enc, rs in rates.items():  # a benchmark whose every result read the cache says nothing of the rate
        rates[enc] = [x for x in rs if x >= 0.1 * max(rs)]
    out: dict[str, Derived] = {}
    for (enc, bench), rs in by_pair.items():
        rate = statistics.median(rates[enc]) if rates.get(enc) else None
        model = statistics.median(loads[enc]) if loads.get(enc) else None
        s, docs, label = ref.get((enc, bench), (0.0, 0, ""))
        basis = f"derived: {label}'s index time on {bench}" if label else ""
        for r in rs:
            if reused(r) is not None:
                continue
            n = int((r.phases or {}).get("index", {}).get("items") or docs or 0)
            idx, why = s, basis
            if rate is not None and n and s < 0.1 * rate * n:
                idx, why = rate * n, f"derived: {enc.rsplit('/', 1)[-1]}'s median {rate:.3g} s/document × {n:,} documents"
            if model is not None and "model" not in (r.phases or {}):
                why = f"{why}; model loading: median of {len(loads[enc])} recorded" if why else \
                    f"derived: model loading, median of {len(loads[enc])} recorded"
            out[r.key] = Derived(idx, model, why)
    return out


@dataclass
class Costs:
    """:func:`result_cost` of many results at once, legacy ones derived from their neighbours."""

    records: Sequence[Any]
    derived: dict[str, Derived] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.derived = derive_cold(self.records)
        self._cache: dict[str, ResultCost] = {}

    def of(self, rec: Any) -> ResultCost:
        key = getattr(rec, "key", "") or str(id(rec))
        if key not in self._cache:
            self._cache[key] = result_cost(rec, self.derived.get(getattr(rec, "key", "")))
        return self._cache[key]
