"""Cost and time ledger (DESIGN.md §6).

Phases: ``load``, ``fit``, ``index`` (offline), ``search`` (online), ``evaluate``; each records
wall and CPU seconds and the number of items processed. LLM calls are recorded one by one with
model, tokens, latency, cache hit and dollars (``None`` when the price is unknown — never 0).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Mapping

PHASES = ("load", "fit", "index", "search", "evaluate")
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
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cached: bool
    usd: float | None
    phase: str = ""
    purpose: str = ""


@dataclass
class Ledger:
    phases: dict[str, PhaseTime] = field(default_factory=dict)
    llm_calls: list[LLMCall] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _current: str = ""

    @contextlib.contextmanager
    def phase(self, name: str, items: int = 0) -> Iterator[PhaseTime]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases are {PHASES}")
        rec = self.phases.setdefault(name, PhaseTime(name))
        prev, self._current = self._current, name
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield rec
        finally:
            rec.wall_s += time.perf_counter() - w0
            rec.cpu_s += time.process_time() - c0
            rec.items += items
            self._current = prev

    def record_llm_call(self, call: LLMCall) -> None:
        with self._lock:
            if not call.phase:
                call.phase = self._current
            self.llm_calls.append(call)

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


def call_totals(calls: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over LLM-call records (``LLMCall`` fields, as stored): ``usd`` is the spend of the
    non-cached calls, or ``None`` when any of them has no known price — never a silent 0."""
    calls = list(calls)
    billed = [c for c in calls if not c["cached"]]
    unknown = any(c["usd"] is None for c in billed)
    return {
        "calls": len(calls),
        "cache_hits": len(calls) - len(billed),
        "prompt_tokens": sum(int(c["prompt_tokens"]) for c in calls),
        "completion_tokens": sum(int(c["completion_tokens"]) for c in calls),
        "usd": None if unknown else float(sum(c["usd"] for c in billed)),
    }


def phase_totals(phases: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Offline (fit + index) and online (search) wall seconds, search items and CPU seconds of one
    result's phase records; a figure whose phases were not recorded is ``None``."""
    offline = [phases[p]["wall_s"] for p in OFFLINE_PHASES if p in phases]
    online = [phases[p] for p in ONLINE_PHASES if p in phases]
    return {
        "offline_s": float(sum(offline)) if offline else None,
        "online_s": float(sum(p["wall_s"] for p in online)) if len(online) == len(ONLINE_PHASES) else None,
        "online_items": sum(int(p["items"]) for p in online),
        "cpu_s": float(sum(p["cpu_s"] for p in phases.values())) if phases else None,
    }
