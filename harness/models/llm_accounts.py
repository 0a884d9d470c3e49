"""What the LLM client keeps account of: the prices of models, the run's budget, and the response cache.

- **Prices** come from ``harness/models/prices.toml`` ($ per 1M tokens), with an extra file on top
  (:func:`load_prices`); :func:`price_for` matches a model name with or without its provider prefix
  and dated-snapshot suffix. An unknown model has an unknown cost (``None``), never 0.
- **Budget.** :class:`Budget` holds ``max_usd`` / ``max_calls``: each billed request reserves its
  worst-case cost before it is sent and settles with its real cost, so spend never passes the cap.
- **Cache.** :class:`ResponseCache` keeps replies in SQLite keyed by :func:`request_key` of
  ``(model, messages, params)``, in the home's :func:`cache_file` (which also holds the journal of
  billed calls).

:mod:`harness.models.llm` (the client) uses these and re-exports their names.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core.errors import UserError

DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
CACHE_SCHEMA = 1


class LLMError(UserError, RuntimeError):
    """A request failed for good (retries exhausted, or an error that retrying cannot fix)."""


class BudgetExceeded(LLMError):
    """The next billed request would pass ``max_usd`` or ``max_calls``; it was not sent."""


# -- secrets ----------------------------------------------------------------------------------

REDACTED = "***"
_SECRET_PATTERNS = (
    # a URL's user:password@
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:'\"]+:[^\s/@'\"]+@"), r"\1" + REDACTED + "@"),
    # an Authorization header, with or without its scheme: Authorization: Bearer X, "authorization": "X"
    (re.compile(r"(?i)(\bauthori[sz]ation\b[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?"
                r"[^\s\"',;}\]]+"),
     lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED),
    # Bearer X anywhere else
    (re.compile(r"(?i)\b(bearer)\s+[^\s\"',;}\]]+"), r"\1 " + REDACTED),
    # api_key=X, api-key: X, "apiKey": "X", x-api-key: X
    (re.compile(r"(?i)(\b(?:x-)?api[_-]?key\b[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}\]]+"), r"\1" + REDACTED),
    # access_token=X, "client_secret": "X", password=X (a parameter or a JSON key, not a word in a sentence)
    (re.compile(r"(?i)(\b(?:(?:access|auth|refresh|id)[_-]?token|client[_-]?secret|secret[_-]?key|password)"
                r"(?:=|[\"']\s*:\s*[\"']))[^\s\"'&,;}\]]+"), r"\1" + REDACTED),
    # OpenAI-style keys on their own: sk-..., sk-proj-...
    (re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"), "sk-" + REDACTED),
)


def redact(text: Any, secrets: Sequence[str] = ()) -> str:
    """``text`` with every secret in it replaced by ``***``: each of ``secrets`` wherever it appears
    (also JSON-escaped), then anything that looks like one — ``Bearer <token>``, an ``Authorization``
    header's value, ``api_key=…`` / ``"api-key": …``, ``access_token=…`` / ``"client_secret": "…"`` /
    ``password=…``, a
    URL's ``user:password@``, an ``sk-…`` key. Redact a text *before* cutting it short: a cut made
    first can leave a prefix of a key that no longer matches."""
    out = str(text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, json.dumps(secret)[1:-1]}:
            out = out.replace(form, REDACTED)
    for pattern, repl in _SECRET_PATTERNS:
        out = pattern.sub(repl, out)
    return out


def cache_file(home: str | Path) -> Path:
    """The LLM response cache of a home; it also holds the journal of billed calls."""
    return Path(home) / "cache" / "llm.sqlite"


# -- prices ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    input: float  # $ per 1M prompt tokens
    output: float  # $ per 1M completion tokens
    local: bool = False

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6

    @property
    def free(self) -> bool:
        return self.input == 0 and self.output == 0

    def cost_of(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """The cost of a reply whose token counts may be unknown: ``None`` then, unless it is free."""
        if self.free:
            return 0.0
        if prompt_tokens is None or completion_tokens is None:
            return None
        return self.cost(prompt_tokens, completion_tokens)


def load_prices(path: str | Path | None = None) -> dict[str, Price]:
    """Model → price from ``prices.toml`` (the packaged file, then ``path`` on top of it)."""
    out: dict[str, Price] = {}
    for p in [DEFAULT_PRICES] + ([Path(path)] if path else []):
        try:
            data = tomllib.loads(Path(p).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LLMError(f"{p}: price file not found") from None
        except tomllib.TOMLDecodeError as e:
            raise LLMError(f"{p}: invalid TOML: {e}") from None
        for name, entry in (data.get("models") or {}).items():
            try:
                out[name.lower()] = Price(float(entry["input"]), float(entry["output"]), bool(entry.get("local", False)))
            except (KeyError, TypeError, ValueError) as e:
                raise LLMError(f"{p}: [models.{name!r}]: needs numeric 'input' and 'output' ($ per 1M tokens): {e}") from None
    return out


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """Exact name, then without a ``provider/`` prefix, then without a dated-snapshot suffix."""
    name = model.lower()
    for cand in (name, name.rsplit("/", 1)[-1]):
        if cand in prices:
            return prices[cand]
        base = re.sub(r"-(\d{4}-\d{2}-\d{2}|\d{4})$", "", cand)
        if base in prices:
            return prices[base]
    return None


# -- budget ------------------------------------------------------------------------------------


class Budget:
    """Spend and call limits. Each billed request reserves its worst-case cost first and settles
    with its real cost (its reservation when that is unknown), so spend never passes the cap. A
    request that does not fit while others hold reservations waits for them to settle; it is
    refused only when nothing is in flight, i.e. less than one reservation below the cap."""

    def __init__(self, max_usd: float | None = None, max_calls: int | None = None):
        self.max_usd, self.max_calls = max_usd, max_calls
        self.spent_usd = 0.0  # counted against max_usd: real costs, reservations for unknown ones
        self.calls = 0
        self._reserved_usd = 0.0
        self._reserved_calls = 0
        self._cond = threading.Condition()

    def _refusal(self, est_usd: float | None) -> str | None:
        if self.max_calls is not None and self.calls + self._reserved_calls + 1 > self.max_calls:
            return (f"LLM call budget reached: {self.calls} of --max-calls {self.max_calls} made; "
                    "the next request was not sent")
        if self.max_usd is not None and est_usd is not None and \
                self.spent_usd + self._reserved_usd + est_usd > self.max_usd + 1e-12:
            return (f"LLM spend budget reached: ${self.spent_usd:.4f} spent, the next request could cost up to "
                    f"${est_usd:.4f}, --max-usd is ${self.max_usd:.4f}; the request was not sent")
        return None

    def reserve(self, est_usd: float | None) -> float:
        """Hold ``est_usd`` (the request's worst case) and one call; returns what to settle."""
        with self._cond:
            if self.max_usd is not None and est_usd is None:
                raise BudgetExceeded("--max-usd is set but this model's price is unknown; add it to a "
                                     "prices file (--prices) or drop --max-usd")
            while (why := self._refusal(est_usd)) is not None:
                if not self._reserved_calls:
                    raise BudgetExceeded(why)
                self._cond.wait()
            self._reserved_calls += 1
            self._reserved_usd += est_usd or 0.0
            return est_usd or 0.0

    def settle(self, reserved: float, actual_usd: float | None, sent: bool) -> None:
        """Release a reservation; a sent request counts its real cost, or ``reserved`` when unknown."""
        with self._cond:
            self._reserved_calls -= 1
            self._reserved_usd -= reserved
            if sent:
                self.calls += 1
                self.spent_usd += reserved if actual_usd is None else actual_usd
            self._cond.notify_all()


# -- cache -------------------------------------------------------------------------------------


def request_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    blob = json.dumps({"model": model, "messages": list(messages), "params": dict(params)},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """SQLite (WAL) store of responses: key → JSON ``{"texts", "prompt_tokens", "completion_tokens",
    "model", "usd"}``. Safe to share between threads; each ``put`` is its own transaction."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock, self._conn:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, "
                               "request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL, "
                               "schema INTEGER NOT NULL)")

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM responses WHERE key=? AND schema=?",
                                     (key, CACHE_SCHEMA)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, model: str, request: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?)",
                               (key, model, json.dumps(request, sort_keys=True, ensure_ascii=False),
                                json.dumps(response, sort_keys=True, ensure_ascii=False), time.time(), CACHE_SCHEMA))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            rows = self._conn.execute("SELECT model, COUNT(*) FROM responses GROUP BY model").fetchall()
        return {"path": str(self.path), "entries": sum(n for _, n in rows), "by_model": dict(rows)}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
