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
from typing import Iterator

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

    def wall(self, *names: str) -> float:
        return sum(self.phases[n].wall_s for n in names if n in self.phases)

    @property
    def offline_s(self) -> float:
        return self.wall(*OFFLINE_PHASES)

    @property
    def online_s(self) -> float:
        return self.wall(*ONLINE_PHASES)

    def llm_totals(self) -> dict[str, object]:
        billed = [c for c in self.llm_calls if not c.cached]
        usd_known = [c.usd for c in billed if c.usd is not None]
        return {
            "calls": len(self.llm_calls),
            "cache_hits": len(self.llm_calls) - len(billed),
            "prompt_tokens": sum(c.prompt_tokens for c in self.llm_calls),
            "completion_tokens": sum(c.completion_tokens for c in self.llm_calls),
            "usd": sum(usd_known) if len(usd_known) == len(billed) else None,
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "phases": {k: asdict(v) for k, v in self.phases.items()},
            "llm_calls": [asdict(c) for c in self.llm_calls],
        }
