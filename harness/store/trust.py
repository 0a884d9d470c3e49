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

Four trust levels follow (:func:`trust_of`), shown on every row of the site. They are derived
here, from what this harness did, never from what a file says:

* ``reproduced blind``: computed by this harness here in a blind run (``run --blind``, ``submit
  --blind``; harness/run/blind.py): the retriever's ``prepare``, ``fit``, ``index`` and ``search``
  ran in a sandbox that held the corpus and the query texts but no judgment file, no data
  directory, no results store and no network. The runner records ``extra["blind"]``
  (:data:`BLIND_KEY`, the sandbox and its version) on such a result; it counts only on a result
  computed here (no ``extra["origin"]``, not a scored run file): an imported result's
  ``extra["blind"]`` is what a file says, and means nothing here;
* ``reproduced``: computed by this harness here (``run``, ``submit``; a run file scored here with
  ``evaluate --store`` is *verified*: its rankings were computed elsewhere), or an imported result that
  verified (below) *and* whose figures a ``beyondsim reproduce`` run of the *shipped* matrix
  recomputed here and matched (:func:`matched_figures`): the latest such run matched every
  reference row of its configuration and benchmark version, and the imported figure of each of
  those measures is within the row's tolerance of the figure recomputed. A matrix the user
  supplied (``--expected``) is a report, never an upgrade;
* ``verified``: imported, and its measures recomputed here from its rankings against the benchmark
  as it is here (``beyondsim verify``), every headline figure among them; a figure the rankings
  cannot give is *reported* (:func:`checked_measures` says which figures were checked). The one
  exception kept verified is a directly scored figure (:data:`DIRECTLY_SCORED`, NevIR's PairAcc
  when a pair document is not in the ranking): it is listed as not checked;
* ``reported``: imported without rankings, not checkable here, or with a headline figure its
  rankings cannot give: a number typed into a file as far as anyone here can tell. Reported rows
  are shown apart, never ranked above the others and never a significance reference.

What *verified* cannot prove: that the rankings came from the code the result names (anyone can
write rankings and the figures they give). What *reproduced* proves for an import: this harness
recomputed the same figures from the same configuration here. What *reproduced* cannot prove: that
the code did not read the judgments (a class that opens the qrels file and puts the satisfying
documents first is computed here like any other); *reproduced blind* proves it did not read them
while it ran — not that its weights, its code or a cache it was given were not made from them (a
model that memorised a test split).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

ORIGIN_KEY = "origin"
BLIND_KEY = "blind"  # a result's extra: how the blind run that computed it was sandboxed (harness/run/blind.py)
REPRODUCED_BLIND, REPRODUCED, VERIFIED, REPORTED = "reproduced blind", "reproduced", "verified", "reported"
LEVELS = (REPRODUCED_BLIND, REPRODUCED, VERIFIED, REPORTED)  # best first
MATCHED = ("OK", "OKish")  # reproduction statuses that count as reproduced

DIRECTLY_SCORED = ("PairAcc",)  # figures a runner scores on the pair documents, not from the ranking

DESCRIPTIONS = {
    REPRODUCED_BLIND: "computed by this harness on this machine in a blind run (beyondsim run --blind): the "
                      "retriever ran in a sandbox that held the corpus and the query texts but no judgment file, no "
                      "data directory and no network; what its model or code brought with them is not checked",
    REPRODUCED: "computed by this harness on this machine, or verified and recomputed here with the shipped "
                "reproduction matrix (beyondsim reproduce) and matched",
    VERIFIED: "imported; its figures recomputed here from its rankings and matched (the figures checked are "
              "listed); the rankings themselves could have come from any code",
    REPORTED: "imported as figures only (no rankings, rankings too shallow for a headline figure, or a benchmark "
              "that is not here): not checked",
}


def origin(extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The import record of a result's ``extra``, or ``None`` when it was computed here."""
    o = (extra or {}).get(ORIGIN_KEY)
    return dict(o) if isinstance(o, Mapping) else None


RUN_FILE_KEY = "run_file"  # a result's extra: the run file it was scored from (harness/run/scoring.py)


def from_run_file(extra: Mapping[str, Any] | None) -> bool:
    """Whether a result is a run file scored here (``beyondsim evaluate --store``): its figures were
    computed here, from rankings computed elsewhere, so it is *verified*, never *reproduced*."""
    return isinstance((extra or {}).get(RUN_FILE_KEY), Mapping)


def ran_blind(extra: Mapping[str, Any] | None) -> bool:
    """Whether a result was computed here in a blind run: no import record, not a run file scored
    here, and the runner's ``extra["blind"]`` naming its sandbox. An import's ``extra["blind"]`` is
    never read: a file can say anything."""
    blind = (extra or {}).get(BLIND_KEY)
    return (origin(extra) is None and not from_run_file(extra) and isinstance(blind, Mapping)
            and isinstance(blind.get("sandbox"), str) and bool(blind["sandbox"]))


def is_reference(extra: Mapping[str, Any] | None) -> bool:
    """Whether a result is one of the reference results shipped with the project."""
    o = origin(extra)
    return bool(o and o.get("reference"))


def checked_measures(extra: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The figures of a result that were checked here: ``None`` for a result computed here (all of
    them), the measures recomputed from its rankings for a verified import, else none."""
    o = origin(extra)
    if o is None:
        return None
    v = o.get("verified")
    return frozenset(str(m) for m in v.get("measures") or ()) if isinstance(v, Mapping) else frozenset()


def _family(measure: str) -> str:
    return measure.split("@", 1)[0]


def trust_of(extra: Mapping[str, Any] | None, reproduced: bool = False, headline: Iterable[str] = ()) -> str:
    """The trust level of a result from its ``extra`` (see the module docstring). ``headline``: the
    figures that must have been recomputed for *verified* (a directly scored one excepted);
    ``reproduced``: a reproduction of the shipped matrix recomputed and matched its figures, which
    counts only for a result that verified."""
    checked = checked_measures(extra)
    if checked is None:
        return VERIFIED if from_run_file(extra) else REPRODUCED_BLIND if ran_blind(extra) else REPRODUCED
    if not isinstance(origin(extra).get("verified"), Mapping):  # type: ignore[union-attr]
        return REPORTED
    if any(m not in checked and _family(m) not in DIRECTLY_SCORED for m in headline):
        return REPORTED
    return REPRODUCED if reproduced else VERIFIED


Matched = dict[tuple[str, str], dict[str, tuple[float, float]]]


def matched_figures(rows: Iterable[Mapping[str, Any]]) -> Matched:
    """``{(spec hash, benchmark version): {measure: (figure recomputed, tolerance)}}`` of the
    configurations whose every reference row in a reproduction matrix matched (a paper's figure,
    ``kind = "published"``, is reported beside them and never counts). Give it the rows of a run of
    the shipped matrix (:meth:`harness.store.results.Store.reproductions` with ``shipped=True``)."""
    figures: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    failed: set[tuple[str, str]] = set()
    for r in rows:
        if r.get("kind", "reference") != "reference":
            continue
        k = (str(r["spec_hash"]), str(r["benchmark_version"]))
        if r["status"] not in MATCHED or r.get("got") is None:
            failed.add(k)
            continue
        figures.setdefault(k, {})[str(r["measure"])] = (float(r["got"]), float(r["tolerance"]))
    return {k: v for k, v in figures.items() if k not in failed}


def reproduced_keys(rows: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """``(spec hash, benchmark version)`` pairs whose every reference row in a reproduction matrix
    matched (see :func:`matched_figures`)."""
    return set(matched_figures(rows))


def reproduces(spec_hash: str, benchmark_version: str, measures: Mapping[str, Any], matched: Matched) -> bool:
    """Whether a result's figures (``measures``: name → an object with ``mean``) are those a
    reproduction recomputed here: its configuration matched, and each measure of the matrix is among
    the result's figures within the row's tolerance of the figure recomputed."""
    want = matched.get((spec_hash, benchmark_version))
    if not want:
        return False
    for m, (got, tol) in want.items():
        mine = getattr(measures.get(m), "mean", None)
        if mine is None or abs(float(mine) - got) > max(tol, 1e-9):
            return False
    return True


def weakest_trust(results: Iterable[Any], headline: Iterable[str], matched: Matched) -> str:
    """The trust level of a board row: the weakest of its results' (:func:`trust_of`), each an
    object with ``extra``, ``spec_hash``, ``benchmark_version`` and ``measures`` (a stored result).
    ``headline``: the figures of the row's table that a *verified* result must have had recomputed
    (those of them the result holds); ``matched``: :func:`matched_figures` of the latest run of the
    shipped matrix, which decides *reproduced* (:func:`reproduces`). A row of no results is
    *reproduced* (nothing of it was imported)."""
    want = list(headline)
    levels = [trust_of(r.extra, reproduces(r.spec_hash, r.benchmark_version, r.measures, matched),
                       [m for m in want if m in r.measures]) for r in results]
    return max(levels, key=LEVELS.index) if levels else REPRODUCED
