"""Where a stored figure comes from, and how far it can be trusted.

Every result carries its origin in ``extra["origin"]`` (:data:`ORIGIN_KEY`); a result without one
was computed by this harness on this machine (``run``, ``submit``, ``reproduce``). An imported
result records::

    extra["origin"] = {
        "kind": "import",
        "source": "<file name>",          # where it was read from
        "reference": "<bundle id>",       # present for the reference results shipped with the project
        "verified": {                     # present when its measures were recomputed from its rankings
            "benchmark_version": "...",   # ... against this version of the benchmark, loaded here
            "measures": ["nDCG@10", ...], # the measures that were recomputed and matched
            "not_recomputable": [...],    # measures the submitted rankings cannot give (deeper than
        },                                #   the rankings, or PairAcc's directly scored pairs)
    }

Three trust levels follow (:func:`trust_of`), shown on every row of the site:

* ``reproduced``: computed here, or an imported figure that a ``beyondsim reproduce`` run (or a
  fresh run of the same configuration) recomputed here and matched;
* ``verified``: imported, and its measures recomputed from its rankings against the benchmark as
  it is here (``beyondsim verify``);
* ``reported``: imported without rankings, or not checkable here: a number typed into a file as
  far as anyone here can tell. Reported rows are shown apart and never ranked above the others.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

ORIGIN_KEY = "origin"
REPRODUCED, VERIFIED, REPORTED = "reproduced", "verified", "reported"
LEVELS = (REPRODUCED, VERIFIED, REPORTED)  # best first
MATCHED = ("OK", "OKish")  # reproduction statuses that count as reproduced

DESCRIPTIONS = {
    REPRODUCED: "computed by this harness on this machine, or recomputed here (beyondsim reproduce) and matched",
    VERIFIED: "imported; every measure that its rankings determine was recomputed here from them and matched",
    REPORTED: "imported as figures only (no rankings, or a benchmark that is not here): not checked",
}


def origin(extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The import record of a result's ``extra``, or ``None`` when it was computed here."""
    o = (extra or {}).get(ORIGIN_KEY)
    return dict(o) if isinstance(o, Mapping) else None


def is_reference(extra: Mapping[str, Any] | None) -> bool:
    """Whether a result is one of the reference results shipped with the project."""
    o = origin(extra)
    return bool(o and o.get("reference"))


def trust_of(extra: Mapping[str, Any] | None, reproduced: bool = False) -> str:
    """The trust level of a result from its ``extra`` (see the module docstring); ``reproduced``:
    a reproduction run matched its figures."""
    o = origin(extra)
    if o is None or reproduced:
        return REPRODUCED
    return VERIFIED if isinstance(o.get("verified"), Mapping) else REPORTED


def reproduced_keys(rows: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """``(spec hash, benchmark version)`` pairs whose every reference row in a reproduction matrix
    matched (a paper's figure, ``kind = "published"``, is reported beside them and never counts)."""
    status: dict[tuple[str, str], bool] = {}
    for r in rows:
        if r.get("kind", "reference") != "reference":
            continue
        k = (str(r["spec_hash"]), str(r["benchmark_version"]))
        status[k] = status.get(k, True) and r["status"] in MATCHED
    return {k for k, ok in status.items() if ok}
