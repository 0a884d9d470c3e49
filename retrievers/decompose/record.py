"""The decomposition record and its cleaning (an LLM's answer or the rules')."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_ITEMS = 8


@dataclass(frozen=True)
class Decomposition:
    """Positive and negative sub-queries of one query. ``source``: "llm", "rules", "fallback"."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:  # accept lists (e.g. straight from JSON)
        object.__setattr__(self, "positives", tuple(self.positives))
        object.__setattr__(self, "negatives", tuple(self.negatives))

    def to_dict(self) -> dict:
        return {"positives": list(self.positives), "negatives": list(self.negatives),
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Decomposition":
        return cls(tuple(d.get("positives") or ()), tuple(d.get("negatives") or ()),
                   str(d.get("source") or ""))


def _norm_ws(s: str) -> str:
    return " ".join(s.split())


_KEY_DROP = re.compile(r"[^\w\s]")


def _key(s: str) -> str:
    """Case- and punctuation-insensitive comparison key."""
    return " ".join(_KEY_DROP.sub(" ", s.replace("’", "'").replace("'", "")).lower().split())


def _items(x: Any) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        x = [x]
    try:
        seq = list(x)
    except TypeError:
        return []
    out = []
    for v in seq:
        if isinstance(v, str):
            v = _norm_ws(v)
            if v:
                out.append(v)
    return out


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for it in items:
        k = _key(it) or it.lower()
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def clean_decomposition(query: str, positives: Any, negatives: Any,
                        source: str = "llm") -> Decomposition:
    """Normalise a (possibly messy, e.g. LLM-produced) decomposition of ``query``.

    Whitespace is normalised, empty and non-string items dropped, each list deduplicated
    case-insensitively (first occurrence kept). Positives equal to the query (case- and
    punctuation-insensitive) are dropped, and so are negatives equal to the query (they would
    push away the query itself). Leakage: an item in both lists is dropped from the positives.
    Each list is capped at :data:`MAX_ITEMS` (8). No positive left → ``(query,)``.
    """
    q = _norm_ws(query if isinstance(query, str) else str(query))
    qkey = _key(q)
    pos = _dedupe(_items(positives))
    neg = _dedupe(_items(negatives))
    neg = [n for n in neg if _key(n) != qkey or not qkey]
    pos = [p for p in pos if _key(p) != qkey]
    neg_keys = {_key(n) or n.lower() for n in neg}
    pos = [p for p in pos if (_key(p) or p.lower()) not in neg_keys]
    pos, neg = pos[:MAX_ITEMS], neg[:MAX_ITEMS]
    if not pos:
        pos = [q]
    return Decomposition(tuple(pos), tuple(neg), source)

