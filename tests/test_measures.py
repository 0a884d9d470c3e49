"""Every measure family, table-driven: what it declares (direction, what it is averaged over, what
it needs, precision) and its value on one small hand-computed case. Adding a measure is one module
in harness/measures and one row in each table here."""

from __future__ import annotations

import pytest

from harness.measures import (ALL_QUERIES, PAIRS, RELEVANT_QUERIES, VIOLATING_QUERIES, evaluate, families,
                              format_value, parse_measure, sort_key)
from harness.types import Judgments, Pair, Run

#          name       higher  averaged over       needs           decimals
DECLARED = [
    ("nDCG@10", True, ALL_QUERIES, set(), 3),
    ("MAP@10", True, ALL_QUERIES, set(), 3),
    ("R@5", True, ALL_QUERIES, set(), 3),
    ("P@1", True, ALL_QUERIES, set(), 3),
    ("RR@10", True, ALL_QUERIES, set(), 3),
    ("Comp@3", True, RELEVANT_QUERIES, set(), 3),
    ("V@2", False, VIOLATING_QUERIES, {"violating"}, 3),
    ("FVR@10", True, VIOLATING_QUERIES, {"violating"}, 2),
    ("Sat@10", True, RELEVANT_QUERIES, set(), 3),
    ("PairAcc", True, PAIRS, {"pairs"}, 3),
    ("TR@5", True, VIOLATING_QUERIES, {"violating"}, 3),
]


def test_every_family_has_a_row() -> None:
    assert [parse_measure(n).family for n, *_ in DECLARED] == [f.family for f in families()]


@pytest.mark.parametrize("name, higher, over, needs, decimals", DECLARED)
def test_declared(name: str, higher: bool, over: str, needs: set[str], decimals: int) -> None:
    m = parse_measure(name)
    assert (m.name, str(m), m.higher_is_better, m.averaged_over, set(m.needs), m.decimals) == \
        (name, name, higher, over, needs, decimals)
    assert parse_measure(m) is m and parse_measure(name) == m and hash(parse_measure(name)) == hash(m)
    assert m.counted == (over in (RELEVANT_QUERIES, VIOLATING_QUERIES))
    assert bool(m.unsupported(False, False)) == bool(needs)
    assert m.unsupported(True, True) == ""
    assert format_value(name, 0.5) == f"{0.5:.{decimals}f}" and format_value(name, None) == "–"


# One query "a" ranking d1 d2 d3 d4; d2 relevant (grade 2), d4 relevant (grade 1), d3 violating.
# A second query "b" ranks nothing. Pairs: (a, d2 | b, d4).
RUN = Run({"a": [("d1", 4.0), ("d2", 3.0), ("d3", 2.0), ("d4", 1.0)], "b": []})
JUDGED = Judgments({"a": {"d2": 2, "d4": 1, "d3": 0}, "b": {"d4": 1}}, {"a": frozenset({"d3"})})
PAIR = [Pair("a", "d2", "b", "d4", "p")]
#          name       {query: value} by hand (threshold 1)
VALUES = [
    ("nDCG@10", {"a": (2 / 1.5849625 + 1 / 2.3219281) / (2 + 1 / 1.5849625), "b": 0.0}),
    ("MAP@10", {"a": (1 / 2 + 2 / 4) / 2, "b": 0.0}),
    ("R@2", {"a": 0.5, "b": 0.0}),
    ("P@1", {"a": 0.0, "b": 0.0}),
    ("RR@10", {"a": 0.5, "b": 0.0}),
    ("Comp@3", {"a": 0.0, "b": 0.0}),
    ("V@2", {"a": 0.0}),
    ("FVR@10", {"a": 3.0}),
    ("Sat@10", {"a": 1.0, "b": 0.0}),  # d2 (rank 2) before the violating d3 (rank 3); b ranks nothing
    ("Sat@1", {"a": 0.0, "b": 0.0}),
    ("PairAcc", {"p": 0.0}),
    ("TR@2", {"a": 1 / 3}),  # topical: d2, d4 (relevant) and d3 (violating); d2 in the top 2
]


@pytest.mark.parametrize("name, expected", VALUES)
def test_value_by_hand(name: str, expected: dict[str, float]) -> None:
    ev = evaluate(RUN, JUDGED, [name], pairs=PAIR)
    assert ev.per_query[name] == pytest.approx(expected, abs=1e-6)
    assert ev.counts[name] == len(expected)


def test_comp_needs_the_whole_set() -> None:
    assert evaluate(RUN, JUDGED, ["Comp@4"]).per_query["Comp@4"] == {"a": 1.0, "b": 0.0}


def test_sat_by_hand_on_violations_above_and_below() -> None:
    """Sat@k credits a query only when its first satisfying document (grade ≥ the threshold) is in
    the top k and no violating document comes before it."""
    run = Run({"v_first": [("v", 3.0), ("s", 2.0)], "s_first": [("s", 3.0), ("v", 2.0)],
               "deep": [("x", 3.0), ("y", 2.0), ("s", 1.0)], "weak": [("w", 2.0), ("s", 1.0)],
               "junk": [("x", 1.0)], "none": [("s", 1.0)]})
    rel = {q: {"s": 2, "v": 0} for q in run}
    rel["weak"]["w"] = 1  # topical but below the threshold of 2
    rel["none"] = {"v": 0}  # nothing satisfies it: not scored
    judged = Judgments(rel, {q: frozenset({"v"}) for q in run})
    ev = evaluate(run, judged, ["Sat@1", "Sat@2", "Sat@10"], relevance_threshold=2)
    assert ev.per_query["Sat@10"] == {"v_first": 0.0, "s_first": 1.0, "deep": 1.0, "weak": 1.0, "junk": 0.0}
    assert ev.per_query["Sat@2"] == {"v_first": 0.0, "s_first": 1.0, "deep": 0.0, "weak": 1.0, "junk": 0.0}
    assert ev.per_query["Sat@1"] == {"v_first": 0.0, "s_first": 1.0, "deep": 0.0, "weak": 0.0, "junk": 0.0}
    assert ev.means["Sat@10"] == pytest.approx(3 / 5)


@pytest.mark.parametrize("seed", range(5))
def test_sat_matches_a_direct_formulation(seed: int) -> None:
    """Sat@k against a loop over each ranking, on random runs, alone and beside deeper measures
    (which widen the rank matrix it reads)."""
    import random

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(30)]
    run, rel, viol = Run(), {}, {}
    for q in (f"q{i}" for i in range(40)):
        ranked = rng.sample(docs, rng.randint(0, 20))
        run[q] = [(d, float(30 - r)) for r, d in enumerate(ranked)]
        judged = rng.sample(docs, 6)
        rel[q] = {d: rng.choice((0, 1, 2)) for d in judged[:4]}
        viol[q] = frozenset(judged[4:4 + rng.randint(0, 2)])
    judgments = Judgments(rel, viol)

    def direct(q: str, k: int) -> float:
        for d, _ in run[q][:k]:
            if d in viol[q]:
                return 0.0
            if rel[q].get(d, 0) >= 2:
                return 1.0
        return 0.0

    for k in (1, 3, 10):
        want = {q: direct(q, k) for q in rel if any(g >= 2 for g in rel[q].values())}
        for names in ([f"Sat@{k}"], [f"Sat@{k}", "V@15", "nDCG@20"]):
            ev = evaluate(run, judgments, names, relevance_threshold=2)
            assert ev.per_query[f"Sat@{k}"] == want


def test_columns_follow_registration_order() -> None:
    names = ["PairAcc", "V@10", "V@2", "FVR@10", "Comp@5", "RR@10", "P@1", "R@100", "R@5", "MAP@10", "nDCG@10", "x"]
    assert sorted(names, key=sort_key) == ["nDCG@10", "MAP@10", "R@5", "R@100", "P@1", "RR@10", "Comp@5", "V@2",
                                           "V@10", "FVR@10", "PairAcc", "x"]


@pytest.mark.parametrize("seed", range(4))
def test_a_document_listed_twice_counts_at_its_first_rank(seed: int) -> None:
    """A ranking that lists a document twice (``Run.validate`` refuses one; a measure never
    crashes on it) is scored as if the later copy were an unjudged document: every family, the
    pytrec_eval ones included, at both depths the scan can take."""
    import random

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(40)]
    rel, viol, dup, clean = {}, {}, Run(), Run()
    for q in (f"q{i}" for i in range(12)):
        ranked = rng.sample(docs, 15)
        rel[q] = {d: rng.choice((0, 1, 2)) for d in rng.sample(ranked[:8], 3) + rng.sample(docs, 2)}
        viol[q] = frozenset(rng.sample(ranked[:6], 1))
        a, b = sorted(rng.sample(range(1, 15), 2))
        copy = ranked[:b] + [ranked[a - 1]] + ranked[b:]  # an earlier document again at rank b + 1
        dup[q] = [(d, float(20 - r)) for r, d in enumerate(copy)]
        clean[q] = [(d if r != b else f"unjudged{q}", float(20 - r)) for r, d in enumerate(copy)]
    pairs = [Pair("q0", next(iter(rel["q0"])), "q1", next(iter(rel["q1"])), "p0")]
    judged = Judgments(rel, viol)
    for names in (["nDCG@10", "MAP@10", "R@5", "R@10", "P@1", "RR@10", "Comp@5", "V@3", "FVR@10", "Sat@10",
                   "PairAcc"],
                  ["nDCG@5", "R@16", "V@16", "Sat@16", "PairAcc"]):
        got, want = evaluate(dup, judged, names, pairs=pairs), evaluate(clean, judged, names, pairs=pairs)
        assert got.per_query == want.per_query and got.means == want.means


def test_topical_recall_counts_violating_documents_and_matches_pytrec_eval() -> None:
    """TR@k is pytrec_eval's recall@k once every violating document is judged relevant too."""
    import pytrec_eval

    run = Run({"q1": [("s1", 3.0), ("x", 2.0), ("v1", 1.0)], "q2": [("v2", 2.0), ("y", 1.0)],
               "q3": [("z", 1.0)]})
    judged = Judgments({"q1": {"s1": 2, "v1": 0, "n1": 1}, "q2": {"s2": 2, "v2": 0}, "q3": {"s3": 2, "v3": 0}},
                       {q: frozenset({f"v{q[1]}"}) for q in ("q1", "q2", "q3")})
    for k in (1, 2, 3):
        ev = evaluate(run, judged, [f"TR@{k}"], relevance_threshold=2)
        by_hand = {1: {"q1": 1 / 2, "q2": 1 / 2, "q3": 0.0}, 2: {"q1": 1 / 2, "q2": 1 / 2, "q3": 0.0},
                   3: {"q1": 1.0, "q2": 1 / 2, "q3": 0.0}}[k]
        assert ev.per_query[f"TR@{k}"] == pytest.approx(by_hand)
        qrels = {q: {d: int(g >= 2 or d in judged.violating[q]) for d, g in r.items()}
                 for q, r in judged.relevance.items()}
        trec = pytrec_eval.RelevanceEvaluator(qrels, {f"recall.{k}"}).evaluate(
            {q: {d: float(10 - i) for i, (d, _) in enumerate(run[q])} for q in run})
        assert ev.per_query[f"TR@{k}"] == pytest.approx({q: v[f"recall_{k}"] for q, v in trec.items()})
    # plain R@k counts only the satisfying document
    assert evaluate(run, judged, ["R@3"], relevance_threshold=2).per_query["R@3"] == {"q1": 1.0, "q2": 0.0, "q3": 0.0}


def test_a_measure_names_its_relevance_level_and_is_scored_at_it() -> None:
    """``R(rel=1)@k`` on a benchmark whose threshold is 2 is pytrec_eval's recall at relevance
    level 1; the plain name keeps the benchmark's level; names, equality and parsing carry rel."""
    import pytrec_eval

    run = Run({"q1": [("t1", 3.0), ("s1", 2.0), ("x", 1.0)], "q2": [("t2", 2.0), ("y", 1.0)]})
    judged = Judgments({"q1": {"s1": 2, "t1": 1, "n1": 1}, "q2": {"s2": 2, "t2": 1}})
    names = ["R@1", "R(rel=1)@1", "R(rel=2)@1", "nDCG(rel=1)@3", "MAP(rel=1)@3", "P(rel=1)@2", "Comp(rel=1)@3",
             "Sat(rel=1)@1", "Sat@1"]
    ev = evaluate(run, judged, names, relevance_threshold=2)
    assert list(ev.means) == names
    assert ev.per_query["R@1"] == ev.per_query["R(rel=2)@1"] == {"q1": 0.0, "q2": 0.0}
    assert ev.per_query["R(rel=1)@1"] == pytest.approx({"q1": 1 / 3, "q2": 1 / 2})
    assert ev.per_query["Comp(rel=1)@3"] == {"q1": 0.0, "q2": 0.0}  # n1 / s2 are never retrieved
    assert ev.per_query["Sat(rel=1)@1"] == {"q1": 1.0, "q2": 1.0} and ev.per_query["Sat@1"] == {"q1": 0.0, "q2": 0.0}
    scored = {q: {d: float(10 - i) for i, (d, _) in enumerate(run[q])} for q in run}
    for level in (1, 2):
        trec = pytrec_eval.RelevanceEvaluator(judged.relevance, {"recall.1", "map_cut.3", "P.2", "ndcg_cut.3"},
                                              relevance_level=level).evaluate(scored)
        mine = evaluate(run, judged, [f"R(rel={level})@1", f"MAP(rel={level})@3", f"P(rel={level})@2",
                                      f"nDCG(rel={level})@3"], relevance_threshold=3 - level)
        for name, key in ((f"R(rel={level})@1", "recall_1"), (f"MAP(rel={level})@3", "map_cut_3"),
                          (f"P(rel={level})@2", "P_2"), (f"nDCG(rel={level})@3", "ndcg_cut_3")):
            assert mine.per_query[name] == pytest.approx({q: v[key] for q, v in trec.items()}), name
    m = parse_measure("nDCG(rel=2)@10")
    assert (m.name, m.k, m.rel, repr(m)) == ("nDCG(rel=2)@10", 10, 2, "NDCG(cutoff=10, rel=2)")
    assert m != parse_measure("nDCG@10") and m == parse_measure(" nDCG(rel=2)@10 ") and len({m, parse_measure(m.name)}) == 1
    for bad in ("V(rel=2)@2", "FVR(rel=1)@10", "PairAcc(rel=2)", "R(rel=0)@5", "nDCG(rel=x)@10", "nDCG@10(rel=2)"):
        with pytest.raises(ValueError):
            parse_measure(bad)
