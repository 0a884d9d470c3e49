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
(``cold_basis``). Only results whose phase times were *measured by this harness* serve as those
neighbours (:func:`measured_here`): results computed here and the shipped reference bundle's. An
imported result's phase times are what its file says (a verified import had its rankings checked,
never its timings), and a run file's are what its metadata declares: such a result may be given a
derived cold cost, but never moves another row's.

Every number read from a stored result is checked (:func:`clean_phases`, :func:`seconds`): seconds
are finite, non-negative and below :data:`~harness.models.embedding_cache.MAX_SECONDS`, dollars below
:data:`~harness.models.embedding_cache.MAX_USD`; one that is not is unknown (``None``, a figure
that needs it ``None`` too), never 0 and never the bad value, so no figure is ever infinite or NaN.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..core.ledger import OFFLINE_PHASES, ONLINE_PHASES
from ..models.embedding_cache import MAX_SECONDS, MAX_USD, amount
from ..store.trust import from_run_file, is_reference, origin

REUSED_KEY = "reused"  # the key of a stored result's ``extra`` that holds what it reused, per phase
ENCODER_PARAMS = ("model", "base_model", "encoder")


# -- checked numbers -------------------------------------------------------------------------------

MAX_ITEMS = 10 ** 12


def seconds(x: Any) -> float | None:
    """``x`` as seconds when it is a finite number in ``[0, MAX_SECONDS)``, else ``None`` (unknown)."""
    return amount(x, MAX_SECONDS)


def usd_amount(x: Any) -> float | None:
    """``x`` as dollars when it is a finite number in ``[0, MAX_USD)``, else ``None`` (unknown)."""
    return amount(x, MAX_USD)


def count(x: Any) -> int | None:
    """``x`` as a count when it is a whole number in ``[0, MAX_ITEMS)``, else ``None``."""
    v = amount(x, MAX_ITEMS)
    return int(v) if v is not None and v.is_integer() else None


def finite(x: Any) -> Any:
    """``x`` with every float in it that is not finite replaced by ``None`` (dicts, lists, tuples walked):
    what goes into JSON is finite, unknown is null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def clean_phases(phases: Any) -> dict[str, dict[str, Any]]:
    """A stored result's phase records with every number checked: ``wall_s`` / ``cpu_s`` seconds or
    ``None`` (unknown), ``items`` a count (0 when it is not one)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(phases, Mapping):
        return out
    for name, p in phases.items():
        p = p if isinstance(p, Mapping) else {}
        out[str(name)] = {"wall_s": seconds(p.get("wall_s")), "cpu_s": seconds(p.get("cpu_s")),
                          "items": count(p.get("items")) or 0}
    return out


def _total(xs: Iterable[float | None]) -> float | None:
    """The sum, ``None`` when any term is unknown."""
    xs = list(xs)
    return None if any(x is None for x in xs) else float(sum(xs))  # type: ignore[arg-type]


def phase_figures(phases: Any) -> dict[str, Any]:
    """:func:`harness.core.ledger.phase_totals` of checked phases (:func:`clean_phases`): a figure
    with an unknown term is ``None``."""
    ph = clean_phases(phases)
    offline = [ph[p] for p in OFFLINE_PHASES if p in ph]
    online = [ph[p] for p in ONLINE_PHASES if p in ph]
    complete = len(online) == len(ONLINE_PHASES)
    return {
        "offline_s": _total(p["wall_s"] for p in offline) if offline else None,
        "offline_cpu_s": _total(p["cpu_s"] for p in offline) if offline else None,
        "online_s": _total(p["wall_s"] for p in online) if complete else None,
        "online_cpu_s": _total(p["cpu_s"] for p in online) if complete else None,
        "online_items": sum(int(p["items"]) for p in online),
        "model_s": ph["model"]["wall_s"] if "model" in ph else None,
        "cpu_s": _total(p["cpu_s"] for p in ph.values()) if ph else None,
    }


def measured_here(rec: Any) -> bool:
    """Whether a result's phase times were measured by this harness: computed here (no
    ``extra["origin"]``, and not a run file scored here, whose seconds its metadata declares), or one
    of the shipped reference results (an origin with ``reference``, set only by the bundle's import).
    Only those may be another result's reference for a derived cold cost."""
    extra = rec.extra if isinstance(getattr(rec, "extra", None), Mapping) else {}
    if from_run_file(extra):
        return False
    return origin(extra) is None or is_reference(extra)


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
        known = usd_amount(row.get(f"{name}_known"))
        if known is None:
            known = usd_amount(row.get(name)) or 0.0
        unknown = amount(row.get(f"{name}_unknown_calls"), MAX_ITEMS)
        if unknown is None:
            unknown = 1 if usd_amount(row.get(name)) is None and not known else 0
        if usd_amount(row.get(name)) is None and not unknown:
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
    return None if x is None or not math.isfinite(float(x)) else round(float(x), nd)


def reused(rec: Any) -> Mapping[str, Mapping[str, Any]] | None:
    """The per-phase record of reused artefacts of a stored result; ``None`` for a result stored
    before artefacts recorded their cost."""
    extra = rec.extra if isinstance(getattr(rec, "extra", None), dict) else {}
    r = extra.get(REUSED_KEY)
    return r if isinstance(r, Mapping) else None


def llm_money(calls: Iterable[Mapping[str, Any]]) -> Money:
    """The new spend of LLM-call records: the calls that were not cache hits (a ``usd`` that is not
    a checked amount of dollars, :func:`usd_amount`, is unknown)."""
    return Money.of(usd_amount(c.get("usd")) for c in calls if isinstance(c, Mapping) and not c.get("cached"))


def result_cost(rec: Any, derived: "Derived | None" = None) -> ResultCost:
    """The cold and this-run cost of one stored result (:class:`~harness.store.results.ResultRecord` or
    anything with ``phases``, ``llm_calls`` and ``extra``); ``derived`` (from :func:`derive_cold`)
    fills in the cold part of a result that recorded none. Every number is checked first: one that
    is not a cost is unknown (see the module docstring)."""
    phases = clean_phases(rec.phases)
    calls = [c for c in (rec.llm_calls or ()) if isinstance(c, Mapping)]
    off = [phases[p] for p in OFFLINE_PHASES if p in phases]
    on = [phases[p] for p in ONLINE_PHASES if p in phases]
    run_off = _total(p["wall_s"] for p in off) if off else None
    run_off_cpu = _total(p["cpu_s"] for p in off) if off else None
    run_on = _total(p["wall_s"] for p in on) if len(on) == len(ONLINE_PHASES) else None
    run_on_cpu = _total(p["cpu_s"] for p in on) if len(on) == len(ONLINE_PHASES) else None
    items = sum(int(p["items"]) for p in on)
    model_run = phases.get("model")
    # a model phase whose figure is unknown makes the cold offline figure unknown, never 0
    model_wall, model_cpu_run = (model_run["wall_s"], model_run["cpu_s"]) if model_run else (0.0, 0.0)
    new = llm_money(calls)
    r = reused(rec)
    if r is None:
        cold_usd = new + Money(0.0, sum(1 for c in calls if c.get("cached")))
        model = model_run["wall_s"] if model_run else None
        if derived is None:
            return ResultCost(None if run_off is None or model_wall is None else run_off + model_wall, run_on,
                              None if run_off_cpu is None or model_cpu_run is None else run_off_cpu + model_cpu_run,
                              run_on_cpu, run_off, run_on, run_off_cpu, run_on_cpu, model, items, (), 0, new, cold_usd,
                              "this run only (stored before cached artefacts recorded their cost)")
        index_s = (phases.get("index") or {}).get("wall_s", 0.0)
        extra_index = 0.0
        if derived.index_s:
            extra_index = max(0.0, derived.index_s - index_s) if index_s is not None else derived.index_s
        model = model if model_run else derived.model_s
        cold_off = None if run_off is None or (model_run and model is None) else run_off + extra_index + (model or 0.0)
        cached = ("embeddings",) * bool(extra_index) + ("model",) * bool(not model_run and derived.model_s)
        return ResultCost(cold_off, run_on, run_off_cpu, run_on_cpu, run_off, run_on, run_off_cpu, run_on_cpu,
                          model, items, cached, 0, new, cold_usd,
                          derived.basis if (extra_index or cached) else "this run (no reuse found)")
    bad = {"wall_s": 0, "cpu_s": 0, "usd": 0}  # reused figures present but not a cost: unknown

    def rec_of(phase: str) -> Mapping[str, Any]:
        ph = r.get(phase)
        return ph if isinstance(ph, Mapping) else {}

    def part(phase: str, key: str) -> float:
        v = rec_of(phase).get(key)
        if v is None:
            return 0.0
        got = seconds(v)
        if got is None:
            bad[key] += 1
            return 0.0
        return got

    phase_recs = [ph for ph in r.values() if isinstance(ph, Mapping)]
    model_s = model_run["wall_s"] if model_run else (part("model", "wall_s") if "model" in r else None)
    model_cpu = model_run["cpu_s"] if model_run else part("model", "cpu_s")
    off_reused = sum(part(p, "wall_s") for p in OFFLINE_PHASES)
    off_reused_cpu = sum(part(p, "cpu_s") for p in OFFLINE_PHASES)
    on_reused = sum(part(p, "wall_s") for p in ONLINE_PHASES)
    on_reused_cpu = sum(part(p, "cpu_s") for p in ONLINE_PHASES)
    cold_off = None if run_off is None or (model_run and model_s is None) else run_off + off_reused + (model_s or 0.0)
    cold_off_cpu = None if run_off_cpu is None or model_cpu is None or bad["cpu_s"] else \
        run_off_cpu + off_reused_cpu + model_cpu
    cold_on = None if run_on is None else run_on + on_reused
    cold_on_cpu = None if run_on_cpu is None or bad["cpu_s"] else run_on_cpu + on_reused_cpu
    kinds: list[str] = []
    for ph in phase_recs:
        k_map = ph.get("kinds")
        for k in (k_map if isinstance(k_map, Mapping) else {}):
            if str(k) not in kinds:
                kinds.append(str(k))
    usd_known, usd_unknown = 0.0, 0
    for ph in phase_recs:
        v = ph.get("usd")
        got = usd_amount(v) if v is not None else 0.0
        usd_unknown += (count(ph.get("usd_unknown")) or 0) + (got is None)
        usd_known += got or 0.0
    unknown = sum(count(ph.get("unknown")) or 0 for ph in phase_recs) + bad["wall_s"]
    return ResultCost(cold_off, cold_on, cold_off_cpu, cold_on_cpu, run_off, run_on, run_off_cpu, run_on_cpu, model_s,
                      items, tuple(sorted(kinds)), int(unknown), new, new + Money(usd_known, usd_unknown))


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
    largest index time of a training-free result (no ``fit`` phase) with that encoder there whose
    times were measured by this harness (:func:`measured_here`); it is taken as a cache hit when
    below a tenth of the encoder's median per-document rate times the corpus size, and replaced by
    that product then. Model loading is the median of the load times measured by this harness."""
    by_pair: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        enc = encoder_of(r.spec)
        if enc:
            by_pair.setdefault((enc, _base(r.benchmark)), []).append(r)
    ref: dict[tuple[str, str], tuple[float, int, str]] = {}
    for key, rs in by_pair.items():
        free = []
        for r in rs:
            ph = clean_phases(r.phases)
            if measured_here(r) and "fit" not in ph and "index" in ph and ph["index"]["wall_s"] is not None:
                free.append((ph["index"]["wall_s"], ph["index"]["items"], r.label))
        if free:
            ref[key] = max(free, key=lambda t: t[0])
    rates: dict[str, list[float]] = {}
    for (enc, _), (s, docs, _) in ref.items():
        if docs:
            rates.setdefault(enc, []).append(s / docs)
    loads: dict[str, list[float]] = {}
    for r in records:
        enc = encoder_of(r.spec)
        load = clean_phases(r.phases).get("model")
        if enc and load is not None and load["wall_s"] is not None and measured_here(r):
            loads.setdefault(enc, []).append(load["wall_s"])
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
            ph = clean_phases(r.phases)
            n = int((ph.get("index") or {}).get("items") or docs or 0)
            idx, why = s, basis
            if rate is not None and n and s < 0.1 * rate * n:
                idx, why = rate * n, f"derived: {enc.rsplit('/', 1)[-1]}'s median {rate:.3g} s/document × {n:,} documents"
            if model is not None and "model" not in ph:
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
