"""Timing of ``harness.measures.evaluate`` (every measure family of a result) against pytrec_eval
alone, and of the runner's bootstrap CIs, in CPU seconds.

    python -m tests.perf.evaluate [--queries 10000] [--depths 100,1000] [--repeat 3] [--bootstrap 1000]

Data (seeded): ``--queries`` queries over 200,000 document ids; each query judges 1–12 documents
(grades 0/1/2, about half of them in its ranking), one in three has 1–3 violating documents (about
half of them ranked), one in fifty is missing from the run; every two consecutive queries form a
NevIR-style pair over two of their documents. The run ranks ``depth`` distinct documents per query
with strictly decreasing raw scores.

Measures: the constraint task's defaults (``V@1``…``V@10``, ``FVR@10``, ``nDCG@10``, ``MAP@10``,
``R@1``, ``R@5``, ``R@10``, ``R@100``) plus ``P@1``, ``RR@10``, ``Comp@3``, ``Comp@5``, ``Comp@10``
and ``PairAcc`` (scored from the ranking): every family.

Timed, on the same data, alternating ``--repeat`` times and keeping the best of each:

* reference: pytrec_eval alone — ``RelevanceEvaluator(qrels, measures).evaluate(run)`` for the
  pytrec_eval measures above (``ndcg_cut.10``, ``map_cut.10``, ``recall.1,5,10,100``, ``P.1``),
  handed its input ready-made: qrels and the run as ``{query: {doc: score}}`` dicts;
* ``evaluate``: :func:`harness.measures.evaluate` on the ``Run`` and ``Judgments``, all measures;
* ``evaluate + CIs``: the runner's whole evaluate phase: ``evaluate`` then a percentile bootstrap
  CI (``--bootstrap`` resamples) of every measure, through :func:`harness.measures.stats.bootstrap_cis`; and
  the CIs alone the way the runner computed them before (one resampling loop per measure, kept
  here as ``loop_bootstrap_ci``), for comparison.

Afterwards (not timed) the pytrec_eval measures are checked equal to pytrec_eval's own values.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from harness.measures import evaluate
from harness.measures.stats import bootstrap_cis
from harness.types import Judgments, Pair, Run

MEASURES = [f"V@{k}" for k in range(1, 11)] + ["FVR@10", "nDCG@10", "MAP@10", "R@1", "R@5", "R@10", "R@100",
                                               "P@1", "RR@10", "Comp@3", "Comp@5", "Comp@10", "PairAcc"]
TREC = {"ndcg_cut.10", "map_cut.10", "recall.1,5,10,100", "P.1"}


def make_case(n_queries: int, depth: int, n_docs: int = 200_000, seed: int = 0):
    rng = random.Random(seed)
    docs = [f"doc{i}" for i in range(n_docs)]
    rel: dict[str, dict[str, int]] = {}
    viol: dict[str, frozenset[str]] = {}
    run = Run()
    for i in range(n_queries):
        q = f"q{i}"
        ranked = rng.sample(docs, depth)
        judged = {}
        for _ in range(rng.randint(1, 12)):
            d = rng.choice(ranked) if rng.random() < 0.5 else rng.choice(docs)
            judged[d] = rng.choice((0, 1, 2))
        rel[q] = judged
        if i % 3 == 0:
            viol[q] = frozenset(rng.choice(ranked) if rng.random() < 0.5 else rng.choice(docs)
                                for _ in range(rng.randint(1, 3)))
        if i % 50 != 7:
            run[q] = [(d, float(depth - r) + 0.5) for r, d in enumerate(ranked)]
    pairs = []
    for i in range(0, n_queries - 1, 2):
        q1, q2 = f"q{i}", f"q{i + 1}"
        d1 = next(iter(rel[q1]))
        d2 = next(iter(rel[q2]))
        pairs.append(Pair(q1, d1, q2, d2, f"p{i}"))
    return run, Judgments(rel, viol), pairs


def loop_bootstrap_ci(values, n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0):  # type: ignore[no-untyped-def]
    """The runner's CI before: one call per measure, each drawing its own resamples."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1 or np.all(x == x[0]):
        return float(x.mean()), float(x.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    chunk = max(1, 2_000_000 // x.size)
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        means[start:stop] = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def cpu(fn):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def bench(n_queries: int, depth: int, repeat: int, n_boot: int) -> None:
    import pytrec_eval

    run, judged, pairs = make_case(n_queries, depth)
    qrels = {q: dict(r) for q, r in judged.relevance.items()}
    run_dict = {q: {d: s for d, s in r} for q, r in run.items()}
    best: dict[str, float] = {}

    def keep(name: str, t: float) -> None:
        best[name] = min(best.get(name, float("inf")), t)

    for _ in range(repeat):
        ref, t = cpu(lambda: pytrec_eval.RelevanceEvaluator(qrels, TREC, relevance_level=1).evaluate(run_dict))
        keep("pytrec_eval alone", t)
        ev, t = cpu(lambda: evaluate(run, judged, MEASURES, pairs=pairs))
        keep("evaluate", t)
        cols = {m: list(ev.per_query[m].values()) for m in MEASURES}
        cis, t_ci = cpu(lambda: bootstrap_cis(cols, n_resamples=n_boot, seed=0))
        keep("evaluate + CIs", t + t_ci)
        keep("CIs", t_ci)
    old, t_old = cpu(lambda: {m: loop_bootstrap_ci(v, n_resamples=n_boot, seed=0) for m, v in cols.items()})
    best["CIs, one loop per measure (before)"] = t_old
    names = {"nDCG@10": "ndcg_cut_10", "MAP@10": "map_cut_10", "R@1": "recall_1", "R@100": "recall_100", "P@1": "P_1"}
    for ours, trec in names.items():
        for q in judged.relevance:
            assert ev.per_query[ours][q] == ref.get(q, {}).get(trec, 0.0), (ours, q)
    worst = max(abs(a - b) for m in MEASURES for a, b in zip(cis[m], old[m]))
    print(f"\n== {n_queries:,} queries, depth {depth}, {len(MEASURES)} measures, {len(pairs):,} pairs "
          f"(best of {repeat})")
    for name, t in best.items():
        print(f"{name:>36}: {t:7.3f} s")
    base = best["pytrec_eval alone"]
    print(f"evaluate / pytrec_eval alone = {best['evaluate'] / base:.2f}   (target ≤ 1.2)")
    print(f"evaluate + CIs / pytrec_eval alone = {best['evaluate + CIs'] / base:.2f}; CIs one loop per measure / "
          f"one resampling per size = {t_old / best['CIs']:.1f}×; largest CI difference {worst:.1e}")
    print("pytrec_eval measures equal to pytrec_eval's: yes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depths", default="100,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()
    for depth in (int(x) for x in args.depths.split(",")):
        bench(args.queries, depth, args.repeat, args.bootstrap)


if __name__ == "__main__":
    main()
