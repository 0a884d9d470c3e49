"""Agreement between two decompositions of the same query (e.g. the rules' and an LLM's)."""

from __future__ import annotations

import math
from typing import Iterable

from .cues import content_words
from .record import Decomposition, _key


def _jaccard(a: str, b: str) -> float:
    ca, cb = content_words(a), content_words(b)
    if not ca and not cb:
        return 1.0 if _key(a) == _key(b) else 0.0
    return len(ca & cb) / len(ca | cb)


def agreement(a: Decomposition, b: Decomposition) -> dict[str, bool | float]:
    """``detect``: both have ≥ 1 negative or both have none; ``neg_overlap``: max content-word
    Jaccard over pairs of negatives (1.0 when both have none, 0.0 when exactly one has none);
    ``agree``: ``detect`` and ``neg_overlap ≥ 0.5``."""
    na, nb = list(a.negatives), list(b.negatives)
    detect = bool(na) == bool(nb)
    if not na and not nb:
        overlap = 1.0
    elif not na or not nb:
        overlap = 0.0
    else:
        overlap = max(_jaccard(x, y) for x in na for y in nb)
    return {"detect": detect, "neg_overlap": float(overlap),
            "agree": bool(detect and overlap >= 0.5)}


def agreement_summary(pairs: Iterable[tuple[Decomposition, Decomposition]]) -> dict:
    """Aggregate :func:`agreement` over pairs: ``n``, ``detect_rate``, ``agree_rate``,
    ``mean_neg_overlap`` and, per side, the share with ≥ 1 negative (``a_negated_rate``,
    ``b_negated_rate``). Rates are NaN when ``n == 0``."""
    n = 0
    det = agr = 0
    ov = 0.0
    a_neg = b_neg = 0
    for a, b in pairs:
        r = agreement(a, b)
        n += 1
        det += bool(r["detect"])
        agr += bool(r["agree"])
        ov += float(r["neg_overlap"])
        a_neg += bool(a.negatives)
        b_neg += bool(b.negatives)
    if n == 0:
        nan = math.nan
        return {"n": 0, "detect_rate": nan, "agree_rate": nan, "mean_neg_overlap": nan,
                "a_negated_rate": nan, "b_negated_rate": nan}
    return {"n": n, "detect_rate": det / n, "agree_rate": agr / n, "mean_neg_overlap": ov / n,
            "a_negated_rate": a_neg / n, "b_negated_rate": b_neg / n}
