"""How numbers and names are written, the same on every page and in every table format.

Numbers round half up on their shortest decimal repr (0.6725 → 0.673, as a reader expects);
a missing or non-finite value is written :data:`DASH`. Names become file-safe slugs
(``[a-z0-9-]``) that stay the same from one render to the next.
"""

from __future__ import annotations

import hashlib
import functools
import math
import numbers
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from harness.measures import PAIRS, Measure, parse_measure

DASH = "–"
SLUG_CHARS = 80  # a page name stays far below every file system's limit of 255 bytes


def finite(x: Any) -> bool:
    """Whether ``x`` is a value that a page, a table or a plot shows as a number: a real number
    (anything :class:`numbers.Real` holds: ``int``, ``float``, ``fractions.Fraction`` and numpy's
    integer and floating scalars, ``numpy.float32`` included) that is neither NaN nor ±inf and
    fits in a float. Not finite: ``None`` (missing); ``bool`` and ``numpy.bool_`` (a flag, not a
    measurement); ``str``, even ``"1.5"`` (no caller parses text); ``Decimal`` and ``complex``
    (not :class:`numbers.Real`); arrays; an ``int`` too large for a float."""
    if type(x) is float:  # the common case, without the ABC check
        return math.isfinite(x)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


@functools.lru_cache(maxsize=4096)
def _measure(name: str) -> Measure | None:
    """The harness's measure ``name``; None for a name it does not know (the functions below then
    give their default)."""
    try:
        return parse_measure(name)
    except ValueError:
        return None


def measure_decimals(name: str) -> int:
    """The measure's display precision (3 for a name the harness does not know)."""
    m = _measure(name)
    return 3 if m is None else m.decimals


def measure_per_query(name: str) -> bool:
    """Whether the measure's per-query values are keyed by query id (not by pair, as PairAcc's;
    True for a name the harness does not know)."""
    m = _measure(name)
    return m is None or m.averaged_over != PAIRS


def measure_counted(name: str) -> bool:
    """Whether the measure's mean is over a subset of the queries (its count is shown; False for a
    name the harness does not know)."""
    m = _measure(name)
    return m is not None and bool(m.counted)


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
