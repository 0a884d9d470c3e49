"""No junk submission wins: retrievers that ignore the query (random, the same list for every
query, the least similar documents, empty rankings, dense's ranking reversed), run on real
benchmarks of the constraint, topical and completeness suites beside bm25 and dense, are never
ranked above either of them — on any overview table, on any benchmark page's default order, in
the rendered HTML — and each is shown apart (below chance on relevance, or the chance row itself)
or at the bottom. The same holds with no chance row on the board, because the headlines need
relevance (Sat@10, nDCG@10, Comp@5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.store.results import Store
from reports.compare import CHANCE_LEVEL, Leaderboard, compare
from tests.dom import parse
from tests.test_site import table_rows
from tests.test_cli import invoke

JUNK = ["random", "tests.junk:SameList", "tests.junk:LeastSimilar", "tests.junk:Empty"]
REAL = ("bm25", "dense")


def _run(home: Path, data: Path, retrievers: list[str], benchmarks: list[str]) -> Store:
    args = ["run", *retrievers, "--data-dir", str(data)]
    for b in benchmarks:
        args += ["-b", b]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    return Store(home / "results.sqlite")


def _labels(store: Store) -> tuple[list[str], list[str]]:
    recs = store.results()
    real = sorted({r.label for r in recs if r.retriever in REAL})
    junk = sorted({r.label for r in recs if r.retriever not in REAL})
    return real, junk


def assert_no_junk_above(board: Leaderboard, real: list[str], junk: list[str], *, chance_row: bool) -> None:
    suites = {s.name for s in board.suites}
    assert {"constraint", "topical", "completeness"} <= suites
    for st in board.suites:
        ranked = [r.label for r in st.ranked]
        present = [x for x in real if x in {r.label for r in st.rows}]
        assert present and set(present) <= set(ranked), (st.name, ranked)
        bottom = max(ranked.index(x) for x in present)
        for r in st.rows:
            if r.label not in junk:
                continue
            # apart (below chance, or the chance row) or at the bottom, under every real method
            assert not r.ranked or ranked.index(r.label) > bottom, (st.name, r.label, ranked)
            if chance_row:
                assert not r.ranked, (st.name, r.label, r.means)
                assert r.chance or r.why_apart.startswith("below chance on relevance"), (st.name, r.label)
    for b in board.benchmarks:
        order = [g.display for g in b.groups]
        present = [x for x in real if x in order]
        assert present, b.name
        for i, g in enumerate(b.groups):
            if g.display in junk:
                assert i > max(order.index(x) for x in present), (b.name, order)
                if chance_row:
                    assert i in b.standing and i not in b.ranks, (b.name, g.display)
                    assert b.standing[i] == CHANCE_LEVEL or b.standing[i].startswith("below chance"), b.standing[i]


def test_junk_submissions_never_rank_above_bm25_or_dense(home: Path, shared_data: Path) -> None:
    store = _run(home, shared_data, ["bm25", "dense", *JUNK], ["diag/antonym", "diag/negation", "toolbank/numpy"])
    # topical: SciFact (bm25 and the junk; dense's SciFact run is the slow test's)
    _run(home, shared_data, ["bm25", *JUNK], ["beir/scifact"])
    real, junk = _labels(store)
    assert len(junk) == len(JUNK)
    board = compare(store, n_resamples=500)
    assert_no_junk_above(board, real, junk, chance_row=True)
    # the figures that made random head the old table: no violation at all, and chance-level PairAcc
    constraint = next(s for s in board.suites if s.name == "constraint")
    (chance,) = constraint.chance
    assert chance.label == "random" and chance.means["V@2"] < 0.05 and chance.means["Sat@10"] < 0.05
    empty = next(r for r in constraint.rows if r.label.endswith("Empty"))
    assert empty.means["V@2"] == 0.0 and empty.means["Sat@10"] == 0.0  # V@2 alone would rank it first

    # without the chance row the headlines still need relevance: junk stays below bm25 and dense
    no_chance = compare(store, n_resamples=500, include=lambda r: r.retriever != "random")
    assert_no_junk_above(no_chance, real, [j for j in junk if j != "random"], chance_row=False)

    # and the page says so: the ranked table holds bm25 and dense and no junk; the chance row is
    # in a body of its own, labelled, with no rank
    out = home / "site"
    res = invoke("leaderboard", "--out", str(out))
    assert res.exit_code == 0, res.output
    root = parse((out / "index.html").read_text(encoding="utf-8"))
    table = root.by_id("overview-constraint")
    bodies = [b for b in table.iter("tbody")]
    assert len(bodies) == 2 and "chance" in bodies[1].classes
    ranked = [tr.find("td").text().strip() for tr in bodies[0].iter("tr")]
    assert set(ranked) == set(real)
    (chance_tr,) = list(bodies[1].iter("tr"))
    tds = list(chance_tr.iter("td"))
    assert tds[0].text().strip().startswith("random") and tds[1].text().strip() == "chance"
    # the tables for a paper say the same: the chance level and the junk are not ranked
    tables = json.loads(invoke("leaderboard", "--format", "json", "--out", "-").stdout)
    rows = {r["label"]: r for r in next(s for s in tables["suites"] if s["suite"] == "constraint")["rows"]}
    assert rows["random"]["chance"] and not rows["random"]["ranked"] and rows["random"]["rank"] is None
    assert all(rows[j]["why_not_ranked"].startswith("below chance") for j in junk if j != "random")
    assert all(rows[x]["ranked"] and rows[x]["rank"][0] >= 1 for x in real)
    _, apart = table_rows(root.by_id("overview-constraint-apart"))
    assert {r[0].text().strip() for r in apart} == set(junk) - {"random"}
    assert all("below chance on relevance" in next(td for td in r if "missing" in td.classes).text() for r in apart)


@pytest.mark.slow
def test_junk_never_above_on_the_full_suites(home: Path, shared_data: Path, share_embeddings) -> None:
    """The same with dense's whole ranking reversed, and dense itself, on NegConstraint (constraint)
    and SciFact (topical) besides the small sets."""
    share_embeddings(home)
    store = _run(home, shared_data, ["bm25", "dense", *JUNK, "tests.junk:ReversedDense"],
                 ["negconstraint", "diag/antonym", "toolbank/numpy", "beir/scifact"])
    real, junk = _labels(store)
    assert len(junk) == len(JUNK) + 1
    assert_no_junk_above(compare(store, n_resamples=500), real, junk, chance_row=True)
