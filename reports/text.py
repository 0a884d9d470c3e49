"""How numbers and names are written, the same on every page and in every table format.

Numbers round half up on their shortest decimal repr (0.6725 → 0.673, as a reader expects);
a missing or non-finite value is written :data:`DASH`. Names become file-safe slugs
(``[a-z0-9-]``) that stay the same from one render to the next.
"""

from __future__ import annotations

import hashlib
import functools
import math
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from harness.measures import PAIRS, parse_measure

DASH = "–"
SLUG_CHARS = 80  # a page name stays far below every file system's limit of 255 bytes


def finite(x: Any) -> bool:
    """A real number that is neither NaN nor infinite (``bool`` is not a number here)."""
    return x is not None and isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@functools.lru_cache(maxsize=4096)
def measure_decimals(name: str) -> int:
    """The measure's display precision (3 for a name the harness does not know)."""
    try:
        return parse_measure(name).decimals
    except ValueError:
        return 3


@functools.lru_cache(maxsize=4096)
def measure_per_query(name: str) -> bool:
    """Whether the measure's per-query values are keyed by query id (not by pair, as PairAcc's)."""
    try:
        return parse_measure(name).averaged_over != PAIRS
    except ValueError:
        return True


@functools.lru_cache(maxsize=4096)
def measure_counted(name: str) -> bool:
    """Whether the measure's mean is over a subset of the queries (its count is shown)."""
    try:
        return parse_measure(name).counted
    except ValueError:
        return False


def round_half_up(x: float, decimals: int) -> Decimal:
    """Round half up on the shortest decimal repr; never ``-0``."""
    d = Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return abs(d) if d == 0 else d


def fmt_num(x: float | None, decimals: int = 3) -> str:
    if not finite(x):
        return DASH
    return f"{round_half_up(x, decimals):.{decimals}f}"


def fmt_p(p: float) -> str:
    """How p-values are written in titles (four decimals)."""
    return f"{p:.4f}"


def slugify(text: str, used: set[str] | None = None, prefix: str = "") -> str:
    """A file-name-safe name for ``text``: ``[a-z0-9-]`` only, at most :data:`SLUG_CHARS` characters,
    and stable: a cut name, or one that collides with a name in ``used`` (which it updates), ends in a
    short hash of the whole text, so the same text keeps its page name from one render to the next."""
    base = prefix + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    if len(base) > SLUG_CHARS:
        base = base[:SLUG_CHARS - 9].rstrip("-") + "-" + digest
    slug, i = base, 2
    if used is not None and slug in used:
        slug = base = base[:SLUG_CHARS - 9].rstrip("-") + "-" + digest
    while used is not None and slug in used:  # the same text twice
        slug, i = f"{base}-{i}", i + 1
    if used is not None:
        used.add(slug)
    return slug


def rank_text(rank: tuple[int, int] | None) -> str:
    """A rank interval as the rank column prints it: ``3`` when the tests separate the row from
    every other, ``2–5`` when they do not; "–" for an unranked row."""
    if rank is None:
        return "–"
    lo, hi = rank
    return str(lo) if lo == hi else f"{lo}–{hi}"
