"""Measures: standard ones cross-checked against pytrec_eval, ours against hand-computed cases."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import pytrec_eval

from harness.measures import evaluate, pair_accuracy, parse_measure
from harness.measures.stats import bootstrap_ci, holm, paired_randomization_test
from harness.types import Judgments, Pair, Run


def random_case(seed: int, n_q: int = 40, n_docs: int = 60, graded: bool = True):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    qrels, run = {}, Run()
    for qi in range(n_q):
        q = f"q{qi}"
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[q] = {d: rng.choice([0, 1, 2] if graded else [0, 1]) for d in judged}
        if qi % 7 == 3:
            continue  # missing from the run
        ranked = rng.sample(docs, rng.randint(1, 30))
        scores = sorted(rng.sample(range(1, 10_000), len(ranked)), reverse=True)
        run[q] = [(d, s / 100.0) for d, s in zip(ranked, scores)]
    return qrels, run


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("threshold", [1, 2])
def test_standard_measures_match_pytrec_eval(seed: int, threshold: int) -> None:
    qrels, run = random_case(seed)
    ours = evaluate(run, Judgments(qrels), ["nDCG@10", "MAP@10", "R@10", "P@5", "nDCG@3"],
                    relevance_threshold=threshold)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10,3", "map_cut.10", "recall.10", "P.5"},
                                         relevance_level=threshold).evaluate(
        {q: {d: s for d, s in r} for q, r in run.items()})
    names = {"nDCG@10": "ndcg_cut_10", "MAP@10": "map_cut_10", "R@10": "recall_10", "P@5": "P_5", "nDCG@3": "ndcg_cut_3"}
    assert ours.n_queries == len(qrels)
    assert ours.n_missing == sum(1 for q in qrels if q not in run)
    for ours_name, trec_name in names.items():
        for q in qrels:
            expected = ref[q][trec_name] if q in ref else 0.0  # missing query = empty ranking
            assert ours.per_query[ours_name][q] == pytest.approx(expected, abs=1e-9), (ours_name, q)
        assert ours.means[ours_name] == pytest.approx(np.mean([ref.get(q, {}).get(trec_name, 0.0) for q in qrels]))


def test_ndcg_hand_computed_graded_linear_gain() -> None:
    j = Judgments({"q": {"a": 2, "b": 0, "c": 1}}, {"q": frozenset({"b"})})
    run = Run({"q": [("b", 3.0), ("a", 2.0), ("z", 1.0)]})
    ev = evaluate(run, j, ["nDCG@10"], relevance_threshold=2)
    dcg = 0 + 2 / math.log2(3) + 0
    idcg = 2 + 1 / math.log2(3)
    assert ev.means["nDCG@10"] == pytest.approx(dcg / idcg)


def test_list_order_is_the_ranking_even_with_tied_scores() -> None:
    # pytrec_eval on raw tied scores re-sorts by doc id (descending); ours follows the list order.
    j = Judgments({"q": {"a": 1}})
    run = Run({"q": [("a", 1.0), ("z", 1.0)]})
    ev = evaluate(run, j, ["P@1", "RR@10"])
    assert ev.means["P@1"] == 1.0 and ev.means["RR@10"] == 1.0
    raw = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"P.1"}).evaluate({"q": {"a": 1.0, "z": 1.0}})
    assert raw["q"]["P_1"] == 0.0  # what a naive use of pytrec_eval would report


def test_violation_measures_hand_computed() -> None:
    rel = {"q1": {"s": 2, "v": 0, "t": 1}, "q2": {"s2": 2, "v2": 0}, "q3": {"s3": 2, "v3": 0},
           "q4": {"x": 2}, "q5": {"s5": 2, "v5": 0}}
    viol = {"q1": frozenset({"v"}), "q2": frozenset({"v2"}), "q3": frozenset({"v3"}), "q5": frozenset({"v5"})}
    run = Run({
        "q1": [("t", 5), ("s", 4), ("v", 3), ("o", 2)],        # violation at rank 3
        "q2": [("v2", 9), ("s2", 1)],                          # violation at rank 1
        "q3": [("s3", 3)] + [(f"o{i}", 2 - i * 0.01) for i in range(12)] + [("v3", -1)],  # beyond 10
        "q4": [("v", 1.0)],                                    # no violating set: excluded
        # q5 missing from the run: empty ranking
    })
    ev = evaluate(run, Judgments(rel, viol), ["V@1", "V@2", "V@3", "V@10", "FVR@10", "FVR@2"], relevance_threshold=2)
    assert ev.per_query["V@1"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q5": 0.0}
    assert ev.per_query["V@2"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q5": 0.0}
    assert ev.per_query["V@3"]["q1"] == 1.0
    assert ev.per_query["V@10"] == {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q5": 0.0}
    assert ev.per_query["FVR@10"] == {"q1": 3.0, "q2": 1.0, "q3": 11.0, "q5": 11.0}
    assert ev.per_query["FVR@2"]["q1"] == 3.0  # k + 1 when no violation in the top 2
    assert ev.counts["V@2"] == 4 and ev.means["V@10"] == pytest.approx(0.5)
    assert ev.means["FVR@10"] == pytest.approx((3 + 1 + 11 + 11) / 4)
    assert ev.n_missing == 1


def test_completeness_hand_computed() -> None:
    rel = {"a": {"x": 1, "y": 1}, "b": {"x": 1, "y": 1, "z": 1}, "c": {"x": 1, "y": 1}, "d": {"n": 0}}
    run = Run({"a": [("y", 3), ("q", 2), ("x", 1)], "b": [("x", 3), ("y", 2), ("z", 1)], "c": [("x", 1)]})
    ev = evaluate(run, Judgments(rel), ["Comp@2", "Comp@3", "R@2"])
    assert ev.per_query["Comp@3"] == {"a": 1.0, "b": 1.0, "c": 0.0}
    assert ev.per_query["Comp@2"] == {"a": 0.0, "b": 0.0, "c": 0.0}  # b: |S|=3 > k
    assert ev.counts["Comp@3"] == 3  # d has no relevant document: excluded
    assert ev.per_query["R@2"]["b"] == pytest.approx(2 / 3)


def test_pair_accuracy_strict() -> None:
    pairs = [Pair("a1", "d1", "a2", "d2", "ok"), Pair("b1", "e1", "b2", "e2", "tie"),
             Pair("c1", "f1", "c2", "f2", "absent"), Pair("g1", "h1", "g2", "h2", "one-side"),
             Pair("m1", "n1", "m2", "n2", "missing-query")]
    run = Run({
        "a1": [("d1", 0.9), ("d2", 0.5)], "a2": [("d2", 0.8), ("d1", 0.1)],
        "b1": [("e1", 0.5), ("e2", 0.5)], "b2": [("e2", 0.9), ("e1", 0.1)],     # tie on q1: wrong
        "c1": [("f1", 0.3)], "c2": [("x", 0.4)],                              # c2 ranks neither: −∞ = −∞
        "g1": [("h1", 0.3)], "g2": [("h2", 0.4), ("h1", 0.2)],                # h2 absent for g1: −∞
        "m1": [("n1", 1.0)],                                                  # m2 missing entirely
    })
    acc = pair_accuracy(run, pairs)
    assert acc == {"ok": 1.0, "tie": 0.0, "absent": 0.0, "one-side": 1.0, "missing-query": 0.0}
    j = Judgments({q: {} for q in run} | {"m2": {}})
    ev = evaluate(run, j, ["PairAcc"], pairs=pairs)
    assert ev.means["PairAcc"] == pytest.approx(2 / 5) and ev.counts["PairAcc"] == 5
    with pytest.raises(ValueError, match="pairs"):
        evaluate(run, j, ["PairAcc"])


def test_parse_measure() -> None:
    assert parse_measure("nDCG@10").k == 10
    assert not parse_measure("V@2").higher_is_better and parse_measure("FVR@10").higher_is_better
    for bad in ("ndcg@10", "V@0", "Recall@5", "PairAcc@3"):
        with pytest.raises(ValueError):
            parse_measure(bad)


def test_bootstrap_ci_and_randomization_test() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.5, 0.1, size=400)
    lo, hi = bootstrap_ci(x, seed=3)
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert lo < x.mean() < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    a = {str(i): float(v) for i, v in enumerate(x)}
    b_same = dict(a)
    b_worse = {k: v - 0.05 + rng.normal(0, 0.01) for k, v in a.items()}
    assert paired_randomization_test(a, b_same) == 1.0
    assert paired_randomization_test(a, b_worse, n_resamples=2000) < 0.01
    noise = {k: v + rng.normal(0, 0.1) for k, v in a.items()}
    assert paired_randomization_test(a, noise, n_resamples=2000) > 0.01


def test_holm_adjustment_hand_computed() -> None:
    adj = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    assert adj["a"] == pytest.approx(0.03)
    assert adj["c"] == pytest.approx(0.06)
    assert adj["b"] == pytest.approx(0.06)  # monotone: max(0.06, 1 * 0.04)
    assert math.isnan(adj["d"])


# ---------------------------------------------------------------------------------------------
# per-group breakdowns


def test_group_by_hand_computed() -> None:
    from harness.measures import group_by

    per_query = {"R@5": {"a": 1.0, "b": 0.0, "c": 0.5, "d": 1.0}, "V@2": {"a": 1.0, "c": 0.0}}
    groups = {"a": "X", "b": "X", "c": "Y", "d": "Y", "e": "Y"}  # e has no value: not counted
    out = group_by(per_query, groups)
    assert {g: (v.mean, v.n) for g, v in out["R@5"].items()} == {"X": (0.5, 2), "Y": (0.75, 2)}
    # V@k only scored a and c: each group's mean is over the queries the measure scored
    assert {g: (v.mean, v.n) for g, v in out["V@2"].items()} == {"X": (1.0, 1), "Y": (0.0, 1)}
    # queries without a group are left out; the group means weighted by n give the overall mean
    assert group_by(per_query, {"a": "X"}, ["R@5"])["R@5"]["X"].n == 1
    total = sum(v.mean * v.n for v in out["R@5"].values()) / sum(v.n for v in out["R@5"].values())
    assert total == pytest.approx(np.mean(list(per_query["R@5"].values())))


def test_benchmark_query_groups() -> None:
    from harness.types import Benchmark, Corpus, Document, Query

    queries = [Query(f"q{i}", "t", {"category": "A" if i % 2 else "B", "pair_id": f"p{i}", "position": i})
               for i in range(6)]
    queries.append(Query("unjudged", "t", {"category": "C"}))
    b = Benchmark("x", "v", Corpus([Document("d", "t")]), queries,
                  Judgments({q.id: {"d": 1} for q in queries[:6]}), "topical", ())
    groups = b.query_groups()
    # category qualifies (2 values over 6 judged queries); pair_id is an identifier (6 values), position is not a string
    assert groups == {"category": {f"q{i}": ("A" if i % 2 else "B") for i in range(6)}}


def test_batched_randomization_tests_equal_single_tests() -> None:
    from harness.measures.stats import paired_randomization_test, paired_randomization_tests

    rng = np.random.default_rng(3)
    qids = [f"q{i}" for i in range(57)]
    cols = [{q: float(v) for q, v in zip(qids, rng.integers(0, 2, len(qids)))} for _ in range(4)]  # ties
    cols += [{q: float(v) for q, v in zip(qids, rng.normal(0.5, 0.2, len(qids)))} for _ in range(3)]
    cols.append({q: v + 0.3 for q, v in cols[-1].items()})  # a clear difference
    partial = {q: v for q, v in list(cols[0].items())[:30]}  # another key set
    pairs = [(cols[i], cols[j]) for i in range(len(cols)) for j in range(len(cols)) if i != j]
    pairs += [(partial, cols[1]), (cols[2], partial), (cols[3], cols[3]), ({}, cols[0])]
    batched = paired_randomization_tests(pairs, n_resamples=2000, seed=7)
    single = [paired_randomization_test(a, b, n_resamples=2000, seed=7) for a, b in pairs]
    assert batched[:-1] == single[:-1]
    assert np.isnan(batched[-1]) and np.isnan(single[-1])
    assert batched[-2] == 1.0
    assert min(batched[:-2]) < 0.05 < max(batched[:-2])  # a mix of clear and null differences


# ---------------------------------------------------------------------------------------------
# one scan per evaluation: every measure against an independent computation on whole rankings


def deep_case(seed: int, n_q: int = 60, n_docs: int = 400, max_depth: int = 150):
    """Rankings of 1..max_depth documents (distinct raw scores), 0–12 judged documents per query
    (some ranked, some deep, some unranked), violating sets, missing queries and pairs."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    qrels, viol, run = {}, {}, Run()
    for qi in range(n_q):
        q = f"q{qi}"
        ranked = rng.sample(docs, rng.randint(1, max_depth))
        judged = {}
        for _ in range(rng.randint(0 if qi % 11 else 1, 12)):
            d = rng.choice(ranked) if rng.random() < 0.6 else rng.choice(docs)
            judged[d] = rng.choice([0, 1, 2])
        qrels[q] = judged or {rng.choice(docs): 0}
        if qi % 3 == 0:
            viol[q] = frozenset(rng.choice(ranked) if rng.random() < 0.5 else rng.choice(docs)
                                for _ in range(rng.randint(1, 3)))
        if qi % 9 != 4:
            scores = sorted(rng.sample(range(1, 100_000), len(ranked)), reverse=True)
            run[q] = [(d, s / 7.0) for d, s in zip(ranked, scores)]
    pairs = [Pair(f"q{i}", next(iter(qrels[f"q{i}"])), f"q{i + 1}", next(iter(qrels[f"q{i + 1}"])), f"p{i}")
             for i in range(0, n_q - 1, 2)]
    return qrels, viol, run, pairs


TREC_NAMES = {"nDCG": "ndcg_cut", "MAP": "map_cut", "R": "recall", "P": "P"}
MEASURE_SETS = [
    ["nDCG@10", "MAP@10", "R@1", "R@5", "R@10", "R@100", "P@1"],  # the constraint defaults' pytrec part
    ["nDCG@3", "R@50", "P@20"],
    ["R@100"],  # a counting measure alone: no rank is kept exactly
    ["MAP@100", "R@5", "P@5", "nDCG@1"],  # the deepest cutoff is positional
    ["nDCG@10", "R@10", "V@30", "Comp@40"],  # other measures read deeper than pytrec_eval's
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("names", MEASURE_SETS, ids=lambda n: ",".join(n))
def test_pytrec_measures_equal_pytrec_eval_on_whole_rankings(seed: int, names: list[str]) -> None:
    qrels, viol, run, _ = deep_case(seed)
    for threshold in (1, 2):
        ev = evaluate(run, Judgments(qrels, viol), names, relevance_threshold=threshold)
        trec = [parse_measure(n) for n in names if parse_measure(n).family in TREC_NAMES]
        specs = {f"{TREC_NAMES[m.family]}.{m.k}" for m in trec}
        ref = pytrec_eval.RelevanceEvaluator(qrels, specs, relevance_level=threshold).evaluate(
            {q: dict(r) for q, r in run.items()})
        for m in trec:
            key = f"{TREC_NAMES[m.family]}_{m.k}"
            want = {q: ref[q][key] if q in ref else 0.0 for q in qrels}
            assert ev.per_query[m.name] == want, (m.name, threshold)  # exactly: the same arithmetic


def test_placeholder_ids_never_collide_with_judged_ones() -> None:
    # judged documents named like the placeholders an evaluation would use first
    qrels = {"a": {"\x1f0": 1, "\x1f1x": 2, "d3": 1}, "b": {"\x1f\x1f2": 1, "d1": 1}}
    run = Run({"a": [("d0", 4.0), ("d1", 3.0), ("d2", 2.0), ("d3", 1.0)],
               "b": [("d0", 3.0), ("d1", 2.0), ("\x1f\x1f2", 1.0)]})
    ev = evaluate(run, Judgments(qrels), ["nDCG@10", "MAP@10", "P@3", "R@2"])
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map_cut.10", "P.3", "recall.2"}).evaluate(
        {q: dict(r) for q, r in run.items()})
    for name, key in {"nDCG@10": "ndcg_cut_10", "MAP@10": "map_cut_10", "P@3": "P_3", "R@2": "recall_2"}.items():
        assert ev.per_query[name] == {q: ref[q][key] for q in qrels}
    assert ev.per_query["P@3"]["a"] == 0.0 and ev.per_query["R@2"]["b"] == 0.5


def _by_loops(run: Run, qrels, viol, pairs, threshold: int, ks=(1, 3, 10, 40)):  # type: ignore[no-untyped-def]
    """V@k, FVR@k, Comp@k, RR@k and PairAcc written plainly from each whole ranking."""
    out: dict[str, dict[str, float]] = {}
    for k in ks:
        out[f"V@{k}"], out[f"FVR@{k}"], out[f"Comp@{k}"], out[f"RR@{k}"] = {}, {}, {}, {}
        for q in qrels:
            docs = [d for d, _ in run.get(q, [])]
            rel = {d for d, g in qrels[q].items() if g >= threshold}
            if viol.get(q):
                first = next((i + 1 for i, d in enumerate(docs[:k]) if d in viol[q]), None)
                out[f"V@{k}"][q] = 0.0 if first is None else 1.0
                out[f"FVR@{k}"][q] = float(k + 1 if first is None else first)
            if rel:
                out[f"Comp@{k}"][q] = 1.0 if rel <= set(docs[:k]) else 0.0
            out[f"RR@{k}"][q] = next((1.0 / (i + 1) for i, d in enumerate(docs[:k]) if d in rel), 0.0)
    acc = {}
    for p in pairs:
        s1, s2 = dict(run.get(p.q1, [])), dict(run.get(p.q2, []))
        ok = (s1.get(p.d1, -math.inf) > s1.get(p.d2, -math.inf)) and (s2.get(p.d2, -math.inf) > s2.get(p.d1, -math.inf))
        acc[p.id] = 1.0 if ok else 0.0
    out["PairAcc"] = acc
    return out


@pytest.mark.parametrize("seed", range(4))
def test_rank_measures_equal_plain_loops(seed: int) -> None:
    qrels, viol, run, pairs = deep_case(seed + 10)
    # pairs whose documents are unjudged for one query and ranked below every cutoff
    extra = []
    for i, (q, r) in enumerate(list(run.items())[:6]):
        if len(r) > 60:
            extra.append(Pair(q, r[-1][0], q, r[55][0], f"deep{i}"))
    names = [f"{f}@{k}" for f in ("V", "FVR", "Comp", "RR") for k in (1, 3, 10, 40)] + ["PairAcc", "R@20"]
    for threshold in (1, 2):
        ev = evaluate(run, Judgments(qrels, viol), names, relevance_threshold=threshold, pairs=pairs + extra)
        want = _by_loops(run, qrels, viol, pairs + extra, threshold)
        for name, col in want.items():
            assert ev.per_query[name] == col, (name, threshold)
    assert len(extra) >= 2 and any(v == 1.0 for v in want["PairAcc"].values())
    # PairAcc alone (no cutoff: the scan reads whole rankings) and with a deep cutoff
    for names in (["PairAcc"], ["PairAcc", "V@2"]):
        assert evaluate(run, Judgments(qrels, viol), names, pairs=pairs + extra).per_query["PairAcc"] == want["PairAcc"]


def _loop_ci(x: np.ndarray, idx: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """The percentile interval from a resampling matrix, one resample at a time."""
    means = [float(np.mean([x[i] for i in row])) for row in idx]
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def test_bootstrap_cis_share_one_resampling_per_size() -> None:
    from harness.measures.stats import bootstrap_cis, resamples

    rng = np.random.default_rng(5)
    cols = {"ndcg": rng.random(300), "v": (rng.random(300) < 0.3).astype(float), "small": rng.random(40),
            "flat": np.full(300, 0.5), "one": [0.25], "none": []}
    cols["ndcg+1"] = cols["ndcg"] + 1.0
    cis = bootstrap_cis(cols, n_resamples=500, seed=11)
    for name in ("ndcg", "v", "small"):
        x = np.asarray(cols[name])
        idx = np.concatenate(list(resamples(x.size, 500, 11)))
        assert idx.shape == (500, x.size) and idx.min() >= 0 and idx.max() < x.size
        assert cis[name] == pytest.approx(_loop_ci(x, idx), abs=1e-12)
        assert cis[name] == bootstrap_ci(x, n_resamples=500, seed=11)  # one column alone: the same numbers
    # one draw per length: shifting a column shifts its interval
    assert np.array(cis["ndcg+1"]) - 1.0 == pytest.approx(np.array(cis["ndcg"]), abs=1e-12)
    assert cis["flat"] == (0.5, 0.5) and cis["one"] == (0.25, 0.25) and all(map(math.isnan, cis["none"]))
    # the draws are those of the loop the runner had, one bootstrap per measure: chunks of
    # default_rng(seed).integers(0, n, size=(chunk, n)), chunk = 2,000,000 // n resamples
    x = np.asarray(cols["ndcg"])
    r = np.random.default_rng(11)
    means = np.concatenate([x[r.integers(0, x.size, size=(c, x.size))].mean(axis=1) for c in (500,)])
    assert cis["ndcg"] == tuple(np.quantile(means, [0.025, 0.975]))
    big = rng.random(5000)  # chunks of 400 resamples
    r = np.random.default_rng(2)
    means = np.concatenate([big[r.integers(0, big.size, size=(c, big.size))].mean(axis=1) for c in (400, 400, 200)])
    assert bootstrap_cis({"b": big}, n_resamples=1000, seed=2)["b"] == tuple(np.quantile(means, [0.025, 0.975]))
    assert list(cis) == list(cols)
