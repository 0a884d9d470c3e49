"""Issue 43d: five ways an import bent the board's ranking, each refused at its cause in ``reports/``
(own results from the real runner: bm25 and random on ``diag/negation`` of the shared data; the
imports written into the store as ``beyondsim import`` writes them, ``extra["origin"]``):

1. results were grouped by (label, spec hash, version) whatever their slot: imported seeds of the
   user's own configuration were averaged with the user's, and a figures-only import turned the
   user's row *reported* and out of the ranking. Now a row averages one slot (computed here, the
   shipped bundle, or one file): the import is a row of its own, ``bm25 (from file.jsonl)``;
2. any row of the suite's ``chance`` retriever was the chance level: crafted ``random`` seeds moved
   it until bm25 was "below chance on relevance". Now the chance row is computed here or the
   shipped bundle's, verified; a crafted ``random`` is an ordinary row;
3. rows the board sets apart (below chance, without per-query values) voted for the benchmarks the
   headline averages over, so that a row that skipped one was ranked 1. Now only the rows left to
   rank decide it;
4. a verified file without per-query values escaped the chance test and separated from nothing;
   one without Sat@10 (V@2 = 0 only) was ranked beside bm25. Now such a row is listed apart ("no
   per-query values of Sat@10", "no Sat@10"), and a missing per-query value is never a tie;
5. a label written as the board's disambiguated name of another row (``bm25 (9868ca)``) showed
   that row's figures and command. Now no two rows share a shown name, a page or an anchor.

And the trust levels of :mod:`harness.store.trust` are shown generically (``reproduced blind``,
or any level added to ``LEVELS``).
"""

from __future__ import annotations

import gzip

import copy
import importlib
import shutil
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from harness import registry
from harness.core.registry import RetrieverSpec
from harness.store import trust as trust_module
from harness.store.results import IMPORTED, BenchmarkInfo, MeasureValue, ResultRecord, Store, result_key
from reports import render_site
from reports.compare import CHANCE_LEVEL, compare, headline_set, rank_intervals, significance
from reports.rows import _unique, shown_names
from tests.conftest import SHARED_DATA
from tests.dom import Node, parse
from tests.factories import make_record, make_store
from tests.test_cli import invoke
from tests.test_site import table_rows

compare_module = importlib.import_module("reports.compare")  # (the package's ``compare`` is the function)

BENCH = "diag/negation"
N = 200  # resamples: enough for 102 queries, fast


# --------------------------------------------------------------------------------------------
# the user's own results (the real runner) and imports written as `beyondsim import` writes them


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bm25 and random computed here on diag/negation: the store's file."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    home = tmp_path_factory.mktemp("own")
    res = invoke("run", "bm25", "random", "-b", BENCH, "--data-dir", str(SHARED_DATA), "--home", str(home))
    assert res.exit_code == 0, res.output
    return home / "results.sqlite"


@pytest.fixture
def store(own: Path, tmp_path: Path) -> Iterator[Store]:
    path = tmp_path / "results.sqlite"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{own}{suffix}").exists():
            shutil.copy(f"{own}{suffix}", f"{path}{suffix}")
    s = Store(path)
    yield s
    s.close()


def mine(store: Store, label: str) -> ResultRecord:
    (rec,) = [r for r in store.results(full=True) if r.label == label and "origin" not in r.extra]
    return rec


def imported(rec: ResultRecord, *, source: str = "crafted.jsonl", label: str | None = None, seed: int | None = None,
             params: dict[str, Any] | None = None, verified: bool = True, reference: str | None = None,
             value: float | None = None, measures: dict[str, MeasureValue] | None = None,
             per_query: dict[str, dict[str, float]] | None = None) -> ResultRecord:
    """``rec`` as an import would store it: another seed, label or spec; every figure ``value`` (the
    per-query values too) or the ``measures`` and ``per_query`` given; its origin the file ``source``
    (or the shipped bundle ``reference``), verified (its figures recomputed from its rankings) or
    figures only."""
    r = copy.deepcopy(rec)
    r.id, r.created_at = None, ""
    if label is not None:
        r.label = label
    if seed is not None:
        r.seed = seed
    if params is not None:
        spec = RetrieverSpec(r.retriever, {**(r.spec.get("params") or {}), **params})
        r.spec, r.spec_hash = {**r.spec, "params": spec.params}, spec.hash
    if value is not None:
        r.measures = {m: MeasureValue(value, v.n, None, None) for m, v in r.measures.items()}
        r.per_query = {m: {q: value for q in col} for m, col in r.per_query.items()}
    if measures is not None:
        r.measures = dict(measures)
    if per_query is not None:
        r.per_query = dict(per_query)
    if not verified:
        r.rankings = {}
    origin: dict[str, Any] = {"kind": "import", "source": source}
    if reference is not None:
        origin["reference"] = reference
    if verified:
        origin["verified"] = {"benchmark_version": r.benchmark_version, "measures": sorted(r.measures)}
    r.extra = {**{k: v for k, v in r.extra.items() if k != "origin"}, "origin": origin}
    r.key = result_key(r.spec_hash, r.benchmark_version, r.seed, r.k, r.harness_version)
    return r


def negation(store: Store) -> Any:
    board = compare(store, n_resamples=N)
    (b,) = [b for b in board.benchmarks if b.name == BENCH]
    (suite,) = [s for s in board.suites if s.name == "constraint"]
    return board, b, suite


def group(b: Any, display: str) -> tuple[int, Any]:
    (hit,) = [(i, g) for i, g in enumerate(b.groups) if g.display == display]
    return hit


def suite_row(suite: Any, label: str) -> Any:
    (row,) = [r for r in suite.rows if r.label == label]
    return row


def page_ids(out: Path) -> None:
    """No element id twice on any page of the site."""
    for page in out.rglob("*.html"):
        ids = [n.attrs["id"] for n in parse(page.read_text(encoding="utf-8")).iter() if "id" in n.attrs]
        assert not [i for i, c in Counter(ids).items() if c > 1], page


# -- 1. a row averages the seeds of one slot -------------------------------------------------------


def test_1_imported_seeds_of_your_configuration_are_a_row_of_their_own(store: Store, tmp_path: Path) -> None:
    """Old: one row "bm25" of seeds 0 (here), 1 and 2 (a file of figures only), its mean theirs and
    its trust *reported*: the user's own bm25 was listed apart and left the ranking."""
    bm25 = mine(store, "bm25")
    for seed in (1, 2):
        store.save(imported(bm25, source="/home/someone/private/other-seeds.jsonl", seed=seed, verified=False,
                            value=0.999))
    board, b, suite = negation(store)
    assert sorted(g.display for g in b.groups) == ["bm25", "bm25 (from other-seeds.jsonl)", "random"]
    i, g = group(b, "bm25")
    assert g.seeds == [0] and g.own and g.trust == "reproduced"
    assert g.measure("Sat@10").mean == bm25.measures["Sat@10"].mean != 0.999
    assert i not in b.standing and i in b.ranks  # ranked, as before the import
    j, theirs = group(b, "bm25 (from other-seeds.jsonl)")
    assert theirs.seeds == [1, 2] and theirs.trust == "reported" and j in b.standing and j not in b.ranks
    assert theirs.measure("Sat@10").mean == pytest.approx(0.999)
    assert "bm25" in [r.label for r in suite.ranked] and suite_row(suite, "bm25").trust == "reproduced"
    assert "bm25 (from other-seeds.jsonl)" in [r.label for r in suite.apart]
    # a verified import of another seed is a row of its own too, never averaged into the user's
    store.save(imported(bm25, source="verified.jsonl", seed=3, value=0.9))
    _, b, _ = negation(store)
    assert group(b, "bm25")[1].seeds == [0] and group(b, "bm25 (from verified.jsonl)")[1].trust == "verified"
    out = render_site(store, tmp_path / "site", n_resamples=N).parent
    for page in out.rglob("*"):
        if page.is_file():  # (the per-query downloads are gzip-compressed)
            raw = gzip.decompress(page.read_bytes()) if page.suffix == ".gz" else page.read_bytes()
            assert "/home/someone" not in raw.decode("utf-8"), page  # a file by its name only
    assert {p.name for p in (out / "retriever").glob("*.html")} >= {"bm25.html", "bm25-from-other-seeds-jsonl.html"}
    page_ids(out)


# -- 2. the chance level -----------------------------------------------------------------------------


def test_2_crafted_random_seeds_never_move_the_chance_level(store: Store) -> None:
    """Old: the three crafted seeds (every figure 1.0, verified) joined the user's random row, the
    chance level, whose nDCG@10 rose above bm25's: bm25 "below chance on relevance". A crafted row
    of its own was still the chance level (any row of the chance retriever, the best first)."""
    rnd = mine(store, "random")
    for seed in (1, 2, 3):
        store.save(imported(rnd, seed=seed, value=1.0))
    _, b, suite = negation(store)
    i, bm25 = group(b, "bm25")
    assert i not in b.standing and i in b.ranks
    c, chance = group(b, "random")
    assert chance.own and chance.seeds == [0] and b.standing[c] == CHANCE_LEVEL
    k, crafted = group(b, "random (from crafted.jsonl)")
    assert crafted.seeds == [1, 2, 3] and crafted.trust == "verified" and b.standing.get(k) != CHANCE_LEVEL
    assert suite_row(suite, "bm25").ranked and not suite_row(suite, "bm25").below_chance
    assert suite_row(suite, "random").chance and not suite_row(suite, "random (from crafted.jsonl)").chance
    assert [r.label for r in suite.chance] == ["random"]


def test_2_the_chance_row_is_computed_here_or_the_shipped_bundles_verified(store: Store) -> None:
    rnd = mine(store, "random")
    store.delete(rnd.key)
    store.save(imported(rnd, source="bundle.jsonl.gz", reference="bundle-1"))  # the shipped bundle, verified
    store.save(imported(rnd, seed=1, value=1.0))  # a crafted file
    _, b, suite = negation(store)
    c, ref = group(b, "random (reference)")
    assert b.standing[c] == CHANCE_LEVEL and ref.trust == "verified"
    k, _ = group(b, "random (from crafted.jsonl)")
    assert b.standing.get(k) != CHANCE_LEVEL and not suite_row(suite, "random (from crafted.jsonl)").chance
    assert [r.label for r in suite.chance] == ["random (reference)"]
    assert suite_row(suite, "bm25").ranked
    # the bundle's row, reported (not verified here), is no chance level either
    store.delete(imported(rnd, source="bundle.jsonl.gz", reference="bundle-1").key, IMPORTED)
    store.save(imported(rnd, source="bundle.jsonl.gz", reference="bundle-1", verified=False))
    _, b, suite = negation(store)
    assert CHANCE_LEVEL not in b.standing.values() and suite.chance == []
    assert suite_row(suite, "bm25").ranked


# -- 3. which benchmarks the headline averages over ------------------------------------------------------

SUITES = {"constraint": {"description": "c", "benchmarks": ["b1", "b2"], "headline": ["Sat@10", "nDCG@10"],
                         "baselines": ["bm25"], "comparator": "dense", "relevance": "nDCG@10", "chance": "random",
                         "tradeoff": ["Sat@10", "nDCG@10"]}}
QIDS = [f"q{i:02d}" for i in range(40)]


@pytest.fixture
def suites(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "suites", lambda: SUITES)


def _levels(label: str, bench: str, level: float) -> dict[str, dict[str, float]]:
    """Sat@10 1 on the first ``level`` share of the queries, nDCG@10 about ``level``."""
    rng = np.random.default_rng(zlib.crc32(f"{label}/{bench}/{level}".encode()))
    hits = round(level * len(QIDS))
    return {"Sat@10": {q: float(i < hits) for i, q in enumerate(QIDS)},
            "nDCG@10": {q: float(x) for q, x in zip(QIDS, np.clip(level + rng.normal(0, 0.05, len(QIDS)), 0, 1))}}


def row_record(label: str, bench: str, level: float | None = None, *, values: dict[str, dict[str, float]] | None = None,
               per_query: bool = True, **fields: Any) -> ResultRecord:
    """One result of ``label`` on ``bench``: per-query values at ``level`` (or ``values``), their means."""
    cols = values if values is not None else _levels(label, bench, float(level))  # type: ignore[arg-type]
    measures = {m: MeasureValue(float(np.mean(list(c.values()))), len(c), None, None) for m, c in cols.items()}
    return make_record(label, benchmark=bench, benchmark_version=f"{bench}v", measures=measures,
                       per_query=cols if per_query else None, n_queries=len(QIDS), **fields)


def footing_store(path: Path, junk: str) -> Store:
    s = make_store(path, benchmarks=[BenchmarkInfo(b, f"{b}v", "constraint", ["Sat@10", "nDCG@10"], {})
                                     for b in ("b1", "b2")])
    chance = {b: _levels("random", b, 0.05) for b in ("b1", "b2")}
    for b in ("b1", "b2"):
        s.save(row_record("random", b, values=chance[b]))
        s.save(row_record("bm25", b, 0.5))
        s.save(row_record("dense", b, 0.6))
    s.save(row_record("partial", "b1", 0.95))  # skipped b2
    for n in range(5):  # rows the board sets apart, on b1 only
        if junk == "below chance":
            s.save(row_record(f"junk{n}", "b1", values=chance["b1"]))
        else:  # a verified file without per-query values
            s.save(row_record(f"junk{n}", "b1", 0.9, per_query=False,
                              extra={"origin": {"kind": "import", "source": f"j{n}.jsonl", "verified": {
                                  "benchmark_version": "b1v", "measures": ["Sat@10", "nDCG@10"]}}}))
    return s


@pytest.mark.parametrize("junk", ["below chance", "no per-query values"])
def test_3_rows_set_apart_never_decide_the_headline_benchmarks(tmp_path: Path, suites: None, junk: str) -> None:
    """Old: the five junk rows (set apart: below chance, or unrankable) counted in headline_set, so
    {b1} (8 rows × 1) beat {b1, b2} (2 × 2) and "partial", which skipped b2, was ranked 1."""
    s = footing_store(tmp_path / "r.sqlite", junk)
    # what the old rule chose: every row that was neither reported nor the chance row voted
    old = headline_set({label: frozenset(b for b in ("b1", "b2") if any(r.label == label and r.benchmark == b
                                                                        for r in s.results()))
                        for label in {r.label for r in s.results()} - {"random"}}, ["b1", "b2"])
    assert old == frozenset({"b1"})
    (suite,) = compare(s, n_resamples=N).suites
    assert suite.headline_benchmarks == ["b1", "b2"]
    assert [r.label for r in suite.ranked] == ["dense", "bm25"]
    partial = suite_row(suite, "partial")
    assert not partial.ranked and partial.rank is None and partial.why_apart == "not run on b2"
    for n in range(5):  # (shown as "not run on b2"; why they were set apart before that was known:)
        row = suite_row(suite, f"junk{n}")
        assert not row.ranked and row.why_apart == "not run on b2"
        why = row.below_chance if junk == "below chance" else row.lacks
        assert why.startswith("below chance" if junk == "below chance" else "no per-query values of Sat@10 on b1"), why
    assert suite_row(suite, "random").chance
    out = render_site(s, tmp_path / "site", n_resamples=N).parent
    _, ranked = table_rows(parse((out / "index.html").read_text(encoding="utf-8")).by_id("overview-constraint"))
    assert [r[0].text().strip() for r in ranked] == ["dense", "bm25"]
    s.close()


# -- 4. no per-query values, no headline figure -----------------------------------------------------------


def test_4_a_verified_row_without_per_query_values_or_without_sat10_is_never_ranked(store: Store) -> None:
    """Old: "fast" (no per-query values, every mean 0.99) passed the chance test on its mean alone
    and was ranked, separated from no row (a rank interval from 1); "nothing" (V@2 = 0 its only
    figure) was ranked beside bm25; "some" (per-query values on 5 of 102 queries, identical to
    bm25's there) tied with bm25 in every paired test."""
    bm25 = mine(store, "bm25")
    store.save(imported(bm25, label="fast", params={"k1": 0.3}, value=0.99, per_query={}))
    store.save(imported(bm25, label="nothing", params={"k1": 0.4},
                        measures={"V@2": MeasureValue(0.0, bm25.measures["V@2"].n, None, None)},
                        per_query={"V@2": {q: 0.0 for q in bm25.per_query["V@2"]}}))
    five = sorted(bm25.per_query["Sat@10"])[:5]
    store.save(imported(bm25, label="some", params={"k1": 0.5},
                        measures={**bm25.measures, "Sat@10": MeasureValue(0.95, 102, None, None)},
                        per_query={m: {q: col[q] for q in five} for m, col in bm25.per_query.items()}))
    _, b, suite = negation(store)
    why = {g.display: b.standing.get(i, "") for i, g in enumerate(b.groups)}
    assert why["fast"] == "no per-query values of Sat@10"
    assert why["nothing"] == "no Sat@10"
    assert why["some"] == "per-query values of Sat@10 for 5 of the 102 its mean is over"
    assert why["bm25"] == ""
    ranked = [b.groups[i].display for i in b.ranks]
    assert ranked == ["bm25"] and b.ranks[group(b, "bm25")[0]] == (1, 1)
    for label, reason in (("fast", "no per-query values of Sat@10"), ("nothing", "no Sat@10"),
                          ("some", "per-query values of Sat@10 for 5 of the 102 its mean is over")):
        row = suite_row(suite, label)
        assert not row.ranked and row.why_apart == f"{reason} on {BENCH}", row.why_apart
    # a missing per-query value is never a tie: "some" is tested with nothing on Sat@10
    tests, _ = significance(b.groups, b.per_query, ["Sat@10"], baselines=["bm25"], n_resamples=N)
    assert (group(b, "some")[0], "Sat@10") not in tests


def test_4_rank_intervals_never_read_missing_values_as_ties() -> None:
    a = {f"q{i}": 1.0 for i in range(30)}
    b = {f"q{i}": 0.0 for i in range(30)}
    assert rank_intervals([a, b], [1.0, 0.0], True, n_resamples=N) == [(1, 1), (2, 2)]
    with pytest.raises(ValueError, match="without per-query values"):
        rank_intervals([a, b, {}], [1.0, 0.0, 0.99], True, n_resamples=N)
    # a store from before per-query values were kept: nothing is tested, every interval spans the table
    assert rank_intervals([{}, {}], [1.0, 0.0], True, n_resamples=N) == [(1, 2), (1, 2)]


# -- 5. impersonation -----------------------------------------------------------------------------------


def test_5_a_label_written_as_another_rows_shown_name_never_takes_its_place(tmp_path: Path, suites: None) -> None:
    """Old: "bm25 (9868ca)", an imported label of one spec, was shown as itself, the name the board
    gives the bm25 of spec 9868ca…: one retriever page, one overview row and one name for both,
    showing the newest (the import's) figures and command."""
    victim = {"retriever": "bm25", "params": {"k1": 1.2}}
    other = {"retriever": "bm25", "params": {"k1": 0.9}}
    forged = {"retriever": "bm25", "params": {"k1": 99.0}}
    s = make_store(tmp_path / "r.sqlite", benchmarks=[BenchmarkInfo(b, f"{b}v", "constraint", ["Sat@10", "nDCG@10"], {})
                                                      for b in ("b1", "b2")])
    for b in ("b1", "b2"):
        s.save(row_record("random", b, 0.05))
        s.save(row_record("bm25", b, 0.5, spec_hash="9868ca0000", spec=victim, created_at="2025-01-01T00:00:00"))
        s.save(row_record("bm25", b, 0.4, spec_hash="abcdef0000", spec=other, created_at="2025-01-01T00:00:00"))
        s.save(row_record("bm25 (9868ca)", b, 0.99, retriever="bm25", spec_hash="ffff000000", spec=forged,
                          created_at="2099-01-01T00:00:00",
                          extra={"origin": {"kind": "import", "source": "x.jsonl", "verified": {
                              "benchmark_version": f"{b}v", "measures": ["Sat@10", "nDCG@10"]}}}))
    board = compare(s, n_resamples=N)
    for b in board.benchmarks:
        shown = [g.display for g in b.groups]
        assert len(shown) == len(set(shown)) == 4, shown
        by_hash = {g.spec_hash: g.display for g in b.groups}
        assert by_hash["9868ca0000"] != by_hash["ffff000000"]
        assert by_hash["abcdef0000"] == "bm25 (abcdef)"  # an innocent row keeps its name
    (suite,) = board.suites
    assert len({r.label for r in suite.rows}) == len(suite.rows) == 4
    victim_name = next(g.display for g in board.benchmarks[0].groups if g.spec_hash == "9868ca0000")
    assert suite_row(suite, victim_name).means["Sat@10"] < 0.7  # its own figures, not the forged 0.99

    out = render_site(s, tmp_path / "site", n_resamples=N).parent
    pages = sorted((out / "retriever").glob("*.html"))
    assert len(pages) == 4
    for page in pages:  # one configuration per page: its spec hash and its own command
        if page.name == "random.html":
            continue
        root = parse(page.read_text(encoding="utf-8"))
        hashes = {h for h in ("9868ca0000", "abcdef0000", "ffff000000") if h in root.by_id("spec").text()}
        assert len(hashes) == 1, (page, hashes)
        command = root.by_id("reproduce").text()
        assert ("99" in command) == (hashes == {"ffff000000"}), (page, command)
    index = parse((out / "index.html").read_text(encoding="utf-8"))
    labels = [r[0].text().strip() for table in ("overview-constraint", "overview-constraint-apart")
              if _has(index, table) for r in table_rows(index.by_id(table))[1]]
    assert len(labels) == len(set(labels))
    for bench in ("b1", "b2"):
        _, rows = table_rows(parse((out / "bench" / f"{bench}.html").read_text(encoding="utf-8")).by_id("results"))
        names = [r[0].find("a").text().strip() for r in rows]
        hrefs = [r[0].find("a").attrs["href"] for r in rows]
        assert len(set(names)) == len(names) == 4 and len(set(hrefs)) == 4
    page_ids(out)
    s.close()


def _has(root: Node, id_: str) -> bool:
    return any(n.attrs.get("id") == id_ for n in root.iter())


def test_5_shown_names_are_unique_against_every_shown_name() -> None:
    keys = [("bm25", "9868ca0000", ""), ("bm25", "abcdef0000", ""), ("bm25 (9868ca)", "ffff000000", "import:x.jsonl"),
            ("dense", "d1", ""), ("dense", "d1", "import:/a/x.jsonl"), ("dense", "d1", "import:/b/x.jsonl"),
            ("dense (from x.jsonl)", "d2", ""), ("random", "r1", ""), ("random", "r1", "reference:bundle-1")]
    names = shown_names(keys)
    assert len(set(names.values())) == len(keys)
    assert names[("bm25", "abcdef0000", "")] == "bm25 (abcdef)"
    assert names[("random", "r1", "")] == "random"
    assert names[("random", "r1", "reference:bundle-1")] == "random (reference)"
    assert names[("bm25", "9868ca0000", "")].startswith("bm25 (9868ca) #")  # both of the clash are told apart
    assert names[("bm25 (9868ca)", "ffff000000", "import:x.jsonl")].startswith("bm25 (9868ca) #")
    assert all("/a/" not in n and "/b/" not in n for n in names.values())  # a file by its own name
    # however many rounds a crafted chain of labels forces, the last resort names every row apart
    clash = {("x", str(i), ""): "same" for i in range(5)}
    assert len(set(_unique(dict(clash), 0).values())) == 5


# -- trust levels --------------------------------------------------------------------------------------


def test_every_trust_level_is_shown_and_ordered_as_declared(tmp_path: Path, suites: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    s = make_store(tmp_path / "r.sqlite",
                   benchmarks=[BenchmarkInfo("b1", "b1v", "constraint", ["Sat@10", "nDCG@10"], {})])
    s.save(row_record("random", "b1", 0.05))
    s.save(row_record("blind", "b1", 0.5, retriever="bm25", extra={"blind": {"sandbox": "bubblewrap 0.8.0"}}))
    s.save(row_record("audited", "b1", 0.6, retriever="bm25"))
    s.save(row_record("odd", "b1", 0.55, retriever="bm25"))
    assert {r.label: r.trust for r in compare(s, n_resamples=N).suites[0].rows}["blind"] == "reproduced blind"
    # a level someone adds to harness.store.trust (first, best first), and one it does not declare
    monkeypatch.setattr(trust_module, "LEVELS", ("audited twice", *trust_module.LEVELS))
    monkeypatch.setattr(trust_module, "DESCRIPTIONS", {**trust_module.DESCRIPTIONS, "audited twice": "checked twice"})
    real = compare_module.weakest_trust

    def weakest(results: Any, headline: Any, matched: Any) -> str:
        results = list(results)
        labels = {r.label for r in results}
        return "audited twice" if labels == {"audited"} else "mystery" if labels == {"odd"} else real(
            results, headline, matched)

    monkeypatch.setattr(compare_module, "weakest_trust", weakest)
    out = render_site(s, tmp_path / "site", n_resamples=N).parent
    index = parse((out / "index.html").read_text(encoding="utf-8"))
    _, rows = table_rows(index.by_id("overview-constraint"))
    cells = {r[0].text().strip(): r[4] for r in rows}
    assert cells["blind"].find("span").classes == {"trust", "trust-reproduced-blind"}
    assert cells["audited"].find("span").classes == {"trust", "trust-audited-twice"}
    assert cells["odd"].find("span").classes == {"trust", "trust-mystery"}
    order = sorted(cells, key=lambda k: cells[k].attrs["data-value"])
    assert order == ["audited", "blind", "odd"]  # as LEVELS orders them; an undeclared level last
    legend = [dt.text().strip() for dt in index.find("dl", "trust-legend").iter("dt")]
    assert legend == ["audited twice", "reproduced blind", "reproduced", "mystery"]  # (reproduced: the chance row)
    assert "checked twice" in index.find("dl", "trust-legend").text()
    head = next(th for th in index.by_id("overview-constraint").iter("th") if "trust" in th.classes)
    assert "audited twice, reproduced blind, reproduced, verified or reported" in head.attrs["title"]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "span.trust-reproduced-blind" in html and 'trust-reproduced blind' not in html
    bench = parse((out / "bench" / "b1.html").read_text(encoding="utf-8"))
    assert "trust-audited-twice" in {c for n in bench.by_id("results").iter("span") for c in n.classes}
    s.close()
