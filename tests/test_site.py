"""The multi-page leaderboard site (reports/site.py, reports/pages/), the comparison objects it is
rendered from (reports/compare.py) and their JSON / Markdown / LaTeX tables (reports/tables.py) on
a hand-made store: real numbers checked against harness.measures.stats / harness.measures computed here
independently, every link resolved, no network reference, store strings escaped on every page."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

from harness import registry
from harness.measures import group_by
from harness.measures.stats import holm, paired_randomization_test
from harness.store.results import BenchmarkInfo, MeasureValue, ResultRecord, Store
from harness.types import Document, Query
from reports import compare, plots, render_site, summary_rows
from reports.compare import COMPARATOR, SuiteSpec
from reports.pages import drilldown
from reports.pages.page import TEMPLATES, environment, sort_script
from reports.site import MANIFEST
from reports.tables import combined, documents, md_escape, tex_escape
from reports.text import fmt_num, measure_decimals
from tests.dom import Node, parse
from tests.factories import llm_call, make_record, make_store

HV = "0.1.0"
XSS = "<script>alert(1)</script>"
XSS_ESC = "&lt;script&gt;alert(1)&lt;/script&gt;"

# --------------------------------------------------------------------------------------------
# the fabricated benchmark data

NQ = 30
QIDS = [f"q{i:02d}" for i in range(1, NQ + 1)]
VQIDS = QIDS[:20]  # queries with a violating document (V@k, FVR@k are averaged over these)
_rng = np.random.default_rng(7)


def _col(values, qids=QIDS) -> dict[str, float]:
    return {q: float(v) for q, v in zip(qids, values)}


_base = _rng.uniform(0.2, 0.6, NQ)
NDCG = {
    "bm25": _col(_base),
    "dense0": _col(np.clip(_base + _rng.normal(0.02, 0.05, NQ), 0, 1)),
    "dense1": _col(np.clip(_base + _rng.normal(0.04, 0.05, NQ), 0, 1)),
    "coder": _col(np.clip(_base + 0.25 + _rng.normal(0, 0.03, NQ), 0, 1)),
    "xss": _col(np.clip(_base - 0.01 + _rng.normal(0, 0.05, NQ), 0, 1)),
}
FVR = {
    "bm25": _col([1, 3, 11, 2, 11, 1, 5, 11, 2, 1, 4, 11, 1, 2, 3, 11, 7, 1, 2, 11], VQIDS),
    "dense0": _col([2, 3, 11, 2, 11, 1, 6, 11, 3, 1, 4, 11, 2, 2, 3, 11, 7, 1, 2, 11], VQIDS),
    "dense1": _col([2, 4, 11, 2, 11, 1, 6, 11, 3, 2, 4, 11, 2, 2, 3, 11, 8, 1, 2, 11], VQIDS),
    "coder": _col([11, 11, 11, 5, 11, 9, 11, 11, 11, 3, 11, 11, 11, 6, 11, 11, 11, 4, 11, 11], VQIDS),
    "xss": _col([1] * 20, VQIDS),
}


def _v2(fvr: dict[str, float]) -> dict[str, float]:
    return {q: float(r <= 2) for q, r in fvr.items()}


def _mv(col: dict[str, float]) -> MeasureValue:
    m = float(np.mean(list(col.values())))
    return MeasureValue(m, len(col), m - 0.05, m + 0.05)


def record(label: str, retriever: str, benchmark: str, version: str, seed: int,
           per_query: dict[str, dict[str, float]], *, spec_hash: str | None = None,
           rankings: dict | None = None, extra: dict | None = None, phases: dict | None = None,
           llm_calls: list | None = None, params: dict | None = None, created_at: str = "") -> ResultRecord:
    spec_hash = spec_hash or (re.sub(r"[^a-z0-9]", "", label.lower()) + "hash")[:10]
    return make_record(
        label, retriever=retriever, spec_hash=spec_hash,
        spec={"retriever": retriever, "params": params or {"k1": 0.9, "note": "<i>x</i>"}},
        benchmark=benchmark, benchmark_version=version, seed=seed, harness_version=HV,
        n_queries=NQ if benchmark == "negconstraint" else len(next(iter(per_query.values()))),
        measures={m: _mv(c) for m, c in per_query.items()}, per_query=per_query, rankings=rankings or {},
        extra=extra or {}, phases=phases or {}, llm_calls=llm_calls or [],
        environment={"python": "3.11.9", "device": "cpu", "torch": "2.4.0"},
        provenance={"class": f"retrievers.{retriever}:X", "package": "beyondsim", "package_version": HV,
                    "git_commit": "abc123", "git_dirty": False},
        created_at=created_at,
    )


def negc(key: str) -> dict[str, dict[str, float]]:
    return {"V@2": _v2(FVR[key]), "FVR@10": FVR[key], "nDCG@10": NDCG[key]}


# q01's top 5 for bm25: satisfying, violating, topical, unjudged, judged non-relevant
Q1_TOP = [("d-sat", 9.0), ("d-viol", 8.0), ("d-top", 7.0), ("d-unj", 6.0), ("d-zero", 5.0)]
QRELS = {q: {"d-sat": 2, "d-viol": 0, "d-top": 1, "d-zero": 0} for q in QIDS}
VIOLATING = {q: {"d-viol"} for q in VQIDS}
GROUPS = {q: ("A - a" if i % 3 == 0 else "B - b") for i, q in enumerate(QIDS)}
SEPARATION = {"score_separation": {
    "compat": {"model": "trained-<b>enc</b>", "queries": 4, "margin_mean": 0.2, "margin_median": 0.15,
               "positive_share": 0.75, "margins": {"q01": 0.3, "q02": 0.2, "q03": 0.1, "q04": -0.05},
               "satisfying": [0.5], "violating": [0.3]},
    "base": {"model": "base-enc", "queries": 4, "margin_mean": 0.01, "margin_median": 0.0,
             "positive_share": 0.5, "margins": {"q01": 0.05, "q02": -0.02, "q03": 0.01, "q04": 0.0},
             "satisfying": [0.5], "violating": [0.5]}}}
ANT_QIDS = ["a1", "a2", "a3", "a4"]
ANT = {
    "bm25": {"V@2": _col([1, 0, 1, 0], ANT_QIDS), "FVR@10": _col([1, 4, 2, 11], ANT_QIDS),
             "nDCG@10": _col([0.5, 0.6, 0.7, 0.8], ANT_QIDS), "PairAcc": {"p1": 1.0, "p2": 0.0}},
    "dense": {"V@2": _col([0, 0, 1, 0], ANT_QIDS), "FVR@10": _col([3, 4, 2, 11], ANT_QIDS),
              "nDCG@10": _col([0.6, 0.6, 0.7, 0.9], ANT_QIDS), "PairAcc": {"p1": 1.0, "p2": 1.0}},
}
COMPARED = {"baselines": ["bm25", "dense", "hyde", "mmr"], "comparator": "dense"}
SUITES = {
    "demo": {"description": "demo", "benchmarks": ["negconstraint", "beir/scifact"]},
    "constraint": {"description": "Constraint <em>suite</em>",
                   "benchmarks": ["nevir", "negconstraint", "diag/antonym"],
                   "headline": ["V@2", "FVR@10", "PairAcc", "nDCG@10"], **COMPARED},
    "topical": {"description": "Topical", "benchmarks": ["beir/scifact", "beir/nfcorpus"],
                "headline": ["nDCG@10", "MAP@10"], **COMPARED},
    "completeness": {"description": "Completeness", "benchmarks": ["toollens"], "headline": ["Comp@5", "R@5"],
                     **COMPARED},
}
SWEEP = {
    "retriever": "coder-seq", "benchmark": "negconstraint", "benchmark_version": "negv1", "seed": 0, "k": 100,
    "task": "constraint", "fixed": {"depth": 100}, "axes": {"alpha": [0.1, 0.2, 0.3], "tau": [0.3, 0.5]},
    "spec": {"alpha": 0.1, "tau": 0.3, "depth": 100},
    "points": [{"params": {"alpha": a, "tau": t}, "measures": {"R@10": round(0.5 + a - t / 10, 4),
                                                                "FVR@10": round(5 + 10 * a + t, 4), "nDCG@10": 0.4},
                "search_s": 0.1} for a in (0.1, 0.2, 0.3) for t in (0.3, 0.5)],
}


def build_store(path: Path) -> Store:
    s = make_store(path, benchmarks=[
        BenchmarkInfo("negconstraint", "negv1", "constraint", ["V@2", "FVR@10", "nDCG@10"],
                      {"queries": NQ, "judged_queries": NQ, "documents": 100, "pairs": 0,
                       "query_groups": {"category": GROUPS}}, "Negative constraints <b>bold</b>"),
        BenchmarkInfo("diag/antonym", "antv1", "constraint", ["PairAcc", "V@2", "nDCG@10"],
                      {"queries": 4, "judged_queries": 4, "documents": 8, "pairs": 2}),
        BenchmarkInfo("beir/scifact", "sciv1", "topical", ["nDCG@10", "MAP@10"],
                      {"queries": 3, "judged_queries": 3, "documents": 50}),
        BenchmarkInfo("my-data", "mdv1", "topical", ["nDCG@10"], {})])

    s.save(record("bm25", "bm25", "negconstraint", "negv1", 0, negc("bm25"), rankings={"q01": Q1_TOP},
                  phases={"index": {"wall_s": 2.0, "cpu_s": 1.0, "items": 100},
                          "model": {"wall_s": 2.5, "cpu_s": 2.25, "items": 0},
                          "search": {"wall_s": 0.5, "cpu_s": 0.5, "items": NQ}}))
    for seed in (0, 1):
        s.save(record("dense", "dense", "negconstraint", "negv1", seed, negc(f"dense{seed}"),
                      rankings={"q01": [("d-viol", 0.9), ("d-sat", 0.8)]},
                      phases={"fit": {"wall_s": 1.0, "cpu_s": 1.0, "items": 0},
                              "index": {"wall_s": 3.0, "cpu_s": 1.0, "items": 100},
                              "search": {"wall_s": 1.0 + seed, "cpu_s": 1.0, "items": NQ}}))
    s.save(record("coder-seq", "coder-seq", "negconstraint", "negv1", 0, negc("coder"),
                  extra={"analysis": SEPARATION, "retriever": {"policy": "seq", "compat": {"trained": True}}},
                  llm_calls=[llm_call(0.002, prompt_tokens=100, completion_tokens=10, purpose="x"),
                             llm_call(0.5, prompt_tokens=50, completion_tokens=5, cached=True, purpose="x")]))
    s.save(record(XSS, "mystery", "negconstraint", "negv1", 0, negc("xss"),
                  rankings={"q01": [("d-unj", 1.0)]}, extra={"analysis": SEPARATION},
                  llm_calls=[llm_call(None, model="unpriced", prompt_tokens=7, completion_tokens=3, purpose="x"),
                             # a server that reported no usage: tokens unknown, never 0
                             llm_call(None, model="unpriced", prompt_tokens=None, completion_tokens=None,
                                      purpose="x")]))

    s.save(record("bm25", "bm25", "diag/antonym", "antv1", 0, ANT["bm25"],
                  rankings={"a1": [("x1", 2.0), ("x2", 1.0)]}))
    s.save(record("dense", "dense", "diag/antonym", "antv1", 0, ANT["dense"]))

    sci = ["s1", "s2", "s3"]
    s.save(record("bm25", "bm25", "beir/scifact", "sciv1", 0,
                  {"nDCG@10": _col([0.7, 0.6, 0.8], sci), "MAP@10": _col([0.6, 0.5, 0.7], sci)},
                  rankings={"s1": [("doc9", 3.5), ("doc8", 2.5)]}))
    s.save(record("dense", "dense", "beir/scifact", "sciv1", 0,
                  {"nDCG@10": _col([0.6, 0.6, 0.7], sci), "MAP@10": _col([0.5, 0.5, 0.6], sci)}))
    s.save(record("bm25", "bm25", "my-data", "mdv1", 0, {"nDCG@10": _col([0.3, 0.5], ["m1", "m2"])}))

    s.save_benchmark_content("negconstraint", "negv1",
                             [Query(q, f"text of {q} <i>not</i>", {"category": GROUPS[q]}) for q in QIDS],
                             QRELS, VIOLATING)
    s.save_documents("negv1", [Document("d-sat", "satisfying body " * 40, "Sat <title>"),
                               Document("d-viol", "violating body", "Viol"),
                               Document("d-top", "topical body", ""),
                               Document("d-zero", "zero body", "Zero")])
    s.save_benchmark_content("diag/antonym", "antv1", [Query(q, f"antonym {q}") for q in ANT_QIDS],
                             {"a1": {"x1": 1}}, {"a1": {"x2"}})
    s.save_sweep(SWEEP)
    s.save_sweep({**SWEEP, "benchmark": "negconstraint:dev", "benchmark_version": "devv1"})
    return s


GENERATED = dt.datetime(2025, 1, 2, 3, 4, tzinfo=dt.timezone.utc)


def render_with_suites(store: Store, out: Path) -> Path:
    """The site of ``store`` rendered into ``out`` with this module's SUITES as the registered suites;
    returns the site folder."""
    mp = pytest.MonkeyPatch()
    mp.setattr(registry, "suites", lambda: SUITES)
    try:
        return render_site(store, out, generated_at=GENERATED).parent
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    store = build_store(tmp / "results.sqlite")
    yield render_with_suites(store, tmp / "out"), store
    store.close()


# --------------------------------------------------------------------------------------------
# reading pages back


def read(out: Path, rel: str) -> tuple[str, Node]:
    html = (out / rel).read_text(encoding="utf-8")
    return html, parse(html)


def table_rows(table: Node) -> tuple[list[Node], list[list[Node]]]:
    heads = list(table.find("thead").iter("th"))
    rows = [list(tr.iter("td")) for tr in table.find("tbody").iter("tr")]
    return heads, rows


def pages(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


# --------------------------------------------------------------------------------------------


def test_page_list(site):
    out, _ = site
    rel = sorted(str(p.relative_to(out)) for p in pages(out))
    xss_slug = "script-alert-1-script"
    assert rel == sorted([
        "index.html", "efficiency.html",
        "bench/negconstraint.html", "bench/diag-antonym.html", "bench/beir-scifact.html", "bench/my-data.html",
        "bench/negconstraint-dev.html",
        "retriever/bm25.html", "retriever/dense.html", "retriever/coder-seq.html", f"retriever/{xss_slug}.html",
        "retriever/bm25/negconstraint-seed0.html", "retriever/bm25/diag-antonym-seed0.html",
        "retriever/bm25/beir-scifact-seed0.html", "retriever/bm25/my-data-seed0.html",
        "retriever/dense/negconstraint-seed0.html", "retriever/dense/negconstraint-seed1.html",
        "retriever/dense/diag-antonym-seed0.html", "retriever/dense/beir-scifact-seed0.html",
        "retriever/coder-seq/negconstraint-seed0.html", f"retriever/{xss_slug}/negconstraint-seed0.html",
    ])


def test_overview_suite_averages_and_order(site):
    out, _ = site
    _, root = read(out, "index.html")
    table = root.by_id("overview-constraint")
    assert "sortable" in table.classes
    heads, rows = table_rows(table)
    names = [h.text().strip().rstrip("↑↓") for h in heads]
    assert names == ["retriever", "rank", "encoder", "LLM", "trust", "V@2", "FVR@10", "PairAcc", "nDCG@10", "benchmarks",
                     "negconstraint", "diag/antonym", "trained on", "models", "reproduce · cite"]
    assert all(h.attrs.get("data-sort") in ("num", "text") for h in heads)
    # rows ordered by the suite mean of V@2, ascending (lower is better)
    by = {r[0].text().strip(): r for r in rows}
    order = [r[0].text().strip() for r in rows]

    def neg_mean(key):
        return np.mean(list(_v2(FVR[key]).values()))

    dense_negc = np.mean([neg_mean("dense0"), neg_mean("dense1")])
    expect_v2 = {
        "bm25": np.mean([neg_mean("bm25"), np.mean(list(ANT["bm25"]["V@2"].values()))]),
        "dense": np.mean([dense_negc, np.mean(list(ANT["dense"]["V@2"].values()))]),
    }
    # equal footing: coder-seq and the XSS label ran negconstraint only, so they are not ranked
    # beside rows measured on both benchmarks (their one-benchmark mean would be another average)
    assert order == sorted(expect_v2, key=lambda k: expect_v2[k])
    for label, v in expect_v2.items():
        cell = by[label][5]
        assert float(cell.attrs["data-value"]) == pytest.approx(v)
        assert cell.find("span", "value").text().strip() == fmt_num(v)
        # the first headline figure carries its 95% bootstrap interval, which holds the mean
        lo, hi = (float(x) for x in cell.find("span", "ci").text().strip("[]").split(", "))
        assert lo - 0.005 <= v <= hi + 0.005 and lo < hi
    assert "negconstraint, diag/antonym" in root.find("p", "headline-set").text()
    aheads, arows = table_rows(root.by_id("overview-constraint-apart"))
    anames = [h.text().strip().rstrip("↑↓") for h in aheads]
    assert anames == ["retriever", "rank", "encoder", "LLM", "trust", "V@2", "FVR@10", "PairAcc", "nDCG@10",
                      "benchmarks", "why not ranked", "negconstraint", "diag/antonym", "trained on", "models",
                      "reproduce · cite"]
    apart = {r[0].text().strip(): r for r in arows}
    assert set(apart) == {"coder-seq", XSS}
    for label, key in (("coder-seq", "coder"), (XSS, "xss")):
        r = apart[label]
        assert r[1].text().strip() == "–"  # no rank
        assert [c.attrs["data-value"] for c in r[5:9]] == ["", "", "", ""]  # no headline figure
        assert "not run on diag/antonym" in r[5].attrs["title"]
        assert r[9].text().strip() == "1/2" and r[10].text().strip() == "not run on diag/antonym"
        assert float(r[11].attrs["data-value"]) == pytest.approx(neg_mean(key))  # its own benchmark is shown
        assert r[12].attrs["data-value"] == ""
    # computed here: reproduced; the test records name no encoder and no LLM
    assert [by["bm25"][i].text().strip() for i in (2, 3)] == ["–", "–"]
    assert by["bm25"][4].find("span", "trust").text().strip() == "reproduced"
    assert "every figure computed by this harness here" in by["bm25"][4].find("div", "pop-body").attrs["data-text"]
    # PairAcc exists on diag/antonym only
    assert float(by["dense"][7].attrs["data-value"]) == pytest.approx(1.0)
    # FVR@10 mean over the two benchmarks
    fvr_bm25 = np.mean([np.mean(list(FVR["bm25"].values())), np.mean(list(ANT["bm25"]["FVR@10"].values()))])
    assert float(by["bm25"][6].attrs["data-value"]) == pytest.approx(fvr_bm25)
    # coverage and per-benchmark columns (V@2 of each benchmark)
    assert by["bm25"][9].attrs["data-value"] == "2" and by["bm25"][9].text().strip() == "2/2"
    assert float(by["bm25"][10].attrs["data-value"]) == pytest.approx(neg_mean("bm25"))
    # the first headline header carries the initial sort state
    assert heads[5].attrs.get("aria-sort") == "ascending"
    assert [h for h in heads if "aria-sort" in h.attrs] == [heads[5]]
    # header links to benchmark pages, row links to retriever pages
    assert heads[10].find("a").attrs["href"] == "bench/negconstraint.html"
    assert by["bm25"][0].find("a").attrs["href"] == "retriever/bm25.html"

    # topical: nDCG@10 descending; the undescribed-suite benchmark goes to "other"
    _, trows = table_rows(root.by_id("overview-topical"))
    assert [r[0].text().strip() for r in trows] == ["bm25", "dense"]
    other = root.by_id("overview-other")
    oheads, orows = table_rows(other)
    assert [h.text().strip() for h in oheads][-4] == "my-data"
    assert float(orows[0][5].attrs["data-value"]) == pytest.approx(0.4)
    with pytest.raises(AssertionError):
        root.by_id("overview-completeness")  # no stored results: skipped
    links = {a.attrs["href"] for a in root.iter("a")}
    assert {"efficiency.html", "bench/negconstraint-dev.html", "retriever/coder-seq.html"} <= links


def test_benchmark_table_and_holm_marks(site):
    out, _ = site
    html, root = read(out, "bench/negconstraint.html")
    table = root.by_id("results")
    heads, rows = table_rows(table)
    measures = [h.attrs["data-measure"] for h in heads if "data-measure" in h.attrs]
    assert measures == ["V@2", "FVR@10", "nDCG@10"]
    labels = [r[0].text().replace("baseline", "").strip() for r in rows]
    # retriever, seeds (with the per-query links) and queries come first, so a wide table never
    # hides them; the measures follow
    assert [h.text().strip() for h in heads[:7]] == ["retriever", "rank", "seeds", "queries", "encoder", "LLM", "trust"]
    col = {m: 7 + i for i, m in enumerate(measures)}
    row = dict(zip(labels, rows))

    # per-query means over seeds for dense
    dense_avg = {m: {q: (negc("dense0")[m][q] + negc("dense1")[m][q]) / 2 for q in negc("dense0")[m]}
                 for m in measures}
    per_row = {"bm25": negc("bm25"), "dense": dense_avg, "coder-seq": negc("coder"), XSS: negc("xss")}
    means = {k: {m: np.mean(list(v[m].values())) for m in measures} for k, v in per_row.items()}
    means["dense"] = {m: np.mean([np.mean(list(negc(f"dense{s}")[m].values())) for s in (0, 1)]) for m in measures}

    seen_marks = 0
    for m in measures:
        higher = m != "V@2"
        pick = max if higher else min
        best_base = pick(["bm25", "dense"], key=lambda k: means[k][m])
        # (the sig-<kind> classes are the pages' markup: "reference" for the comparator's †, as before)
        for ref_kind, ref, symbol in (("reference", "dense", "†"), ("baseline", best_base, "‡")):
            raw = {k: paired_randomization_test(per_row[k][m], per_row[ref][m], n_resamples=10000, seed=0)
                   for k in per_row if k != ref}
            adj = holm(raw)
            for k, p in adj.items():
                cell = row[k][col[m]]
                assert f"Holm-adjusted p = {p:.4f}" in cell.attrs["title"]
                marks = [s for s in cell.iter("span", "sig") if f"sig-{ref_kind}" in s.classes]
                if p < 0.05:
                    assert len(marks) == 1 and marks[0].text() == symbol
                    assert float(marks[0].attrs["data-p"]) == pytest.approx(p)
                    assert f"Holm-adjusted p = {p:.4f}" in marks[0].attrs["title"]
                    better = means[k][m] > means[ref][m] if higher else means[k][m] < means[ref][m]
                    assert ("better" in marks[0].classes) == better
                    seen_marks += 1
                else:
                    assert marks == []
            # never compared with itself
            kind_text = "dense" if ref_kind == "reference" else "best baseline"
            assert f"vs {ref} ({kind_text})" not in row[ref][col[m]].attrs.get("title", "")
            assert not [s for s in row[ref][col[m]].iter("span", "sig") if f"sig-{ref_kind}" in s.classes]
    assert seen_marks >= 4  # coder-seq clearly beats both yardsticks on nDCG@10 and FVR@10
    cmarks = [s.text() for s in row["coder-seq"][col["nDCG@10"]].iter("span", "sig")]
    assert cmarks == ["†", "‡"]

    # CI for one seed, ± std for two
    bm = row["bm25"][col["nDCG@10"]]
    assert bm.find("span", "value").text() == fmt_num(means["bm25"]["nDCG@10"])
    m = means["bm25"]["nDCG@10"]
    assert bm.find("span", "extra").text() == f"[{fmt_num(m - 0.05, 2)}, {fmt_num(m + 0.05, 2)}]"
    seeds = [np.mean(list(negc(f"dense{s}")["nDCG@10"].values())) for s in (0, 1)]
    assert row["dense"][col["nDCG@10"]].find("span", "extra").text() == \
        f"± {fmt_num(float(np.std(seeds, ddof=1)))}"
    assert float(row["dense"][col["nDCG@10"]].attrs["data-value"]) == pytest.approx(np.mean(seeds))
    # V@k counted over the queries with a violating document
    assert "n=20" in heads[col["V@2"]].text()
    assert "†" in html and "‡" in html and "Holm" in html
    # the marks that appear are explained under the table, with every measure's definition
    assert "differs from <em>dense</em>" in html and "differs from the best baseline" in html
    legend = {dt.text().split()[0]: dd.text() for dt, dd in zip(root.iter("dt"), root.iter("dd"))}
    assert set(legend) >= {"V@2", "FVR@10", "nDCG@10"}
    assert "violates the query's constraint is in the top 2" in legend["V@2"]
    assert "lower is better" in legend["V@2"] and "queries with a violating document" in legend["V@2"]


def test_breakdown_by_query_group(site):
    out, _ = site
    _, root = read(out, "bench/negconstraint.html")
    table = root.by_id("breakdown-category-ndcg-10")
    heads, rows = table_rows(table)
    assert [h.attrs.get("data-group") for h in heads[1:]] == ["A - a", "B - b"]
    expect = group_by(negc("coder"), GROUPS, ["nDCG@10"])["nDCG@10"]
    row = next(r for r in rows if r[0].text().strip() == "coder-seq")
    assert float(row[1].attrs["data-value"]) == pytest.approx(expect["A - a"].mean)
    assert float(row[2].attrs["data-value"]) == pytest.approx(expect["B - b"].mean)
    assert heads[1].find("span").text() == f"n={expect['A - a'].n}"
    # V@2 groups count only queries with a violating document
    vheads, _ = table_rows(root.by_id("breakdown-category-v-2"))
    vexp = group_by(negc("bm25"), GROUPS, ["V@2"])["V@2"]
    assert vheads[1].find("span").text() == f"n={vexp['A - a'].n}"


def test_survival_curves(site):
    out, _ = site
    _, root = read(out, "bench/negconstraint.html")
    sec = root.by_id("survival")
    table = sec.find("table", "survival-values")
    heads, rows = table_rows(table)
    assert [h.text() for h in heads[2:]] == [f"r={r}" for r in range(11)]
    by = {r[0].text().strip(): r for r in rows}

    def s_of(ranks):
        ranks = np.asarray(list(ranks))
        return [float(np.mean(ranks > r)) for r in range(11)]

    for key, label in (("bm25", "bm25"), ("coder", "coder-seq")):
        got = [float(c.attrs["data-value"]) for c in by[label][2:]]
        assert got == pytest.approx(s_of(FVR[key].values()))
        assert got == pytest.approx(plots.survival_curve(list(FVR[key].values()), 10))
    # two seeds: the mean of the seeds' curves
    dense = [float(c.attrs["data-value"]) for c in by["dense"][2:]]
    assert dense == pytest.approx(np.mean([s_of(FVR["dense0"].values()), s_of(FVR["dense1"].values())], axis=0))
    assert by["bm25"][1].text() == "20"
    svg = sec.find("svg")
    assert svg.attrs.get("data-plot") == "line"
    assert {p.attrs.get("data-series") for p in svg.iter("polyline")} >= {"bm25", "dense", "coder-seq"}


def test_score_separation_and_heatmaps(site):
    out, _ = site
    html, root = read(out, "bench/negconstraint.html")
    sep = root.by_id("separation")
    figs = list(sep.iter("figure"))
    assert len(figs) == 2  # coder-seq and the XSS-labelled row
    svg = figs[0].find("svg")
    assert svg.attrs.get("data-plot") == "histogram"
    groups = {r.attrs.get("data-group") for r in svg.iter("rect", "bar")}
    assert groups == {"trained: trained-<b>enc</b>", "base: base-enc"}
    stats = sep.find("table", "separation-stats")
    _, srows = table_rows(stats)
    assert [c.text() for c in srows[0]] == ["trained-<b>enc</b> (trained)", "4", "0.200", "0.150", "0.750"]
    assert "<b>enc</b>" not in html

    sens = root.by_id("sensitivity")
    maps = [f for f in sens.iter("figure") if f.find("svg").attrs.get("data-plot") == "heatmap"]
    assert sorted(f.attrs["data-measure"] for f in maps) == ["FVR@10", "R@10"]
    r10 = next(f for f in maps if f.attrs["data-measure"] == "R@10").find("svg")
    cells = {(int(c.attrs["data-i"]), int(c.attrs["data-j"])): float(c.attrs["data-value"])
             for c in r10.iter("rect", "cell")}
    # z[i][j]: tau (y) i, alpha (x) j
    for i, t in enumerate((0.3, 0.5)):
        for j, a in enumerate((0.1, 0.2, 0.3)):
            assert cells[(i, j)] == pytest.approx(round(0.5 + a - t / 10, 4))
    # a benchmark with sweeps only gets its own page
    _, dev = read(out, "bench/negconstraint-dev.html")
    assert len(list(dev.by_id("sensitivity").iter("figure"))) == 2


def test_efficiency_page(site):
    out, _ = site
    _, root = read(out, "efficiency.html")
    heads, rows = table_rows(root.by_id("efficiency-results"))
    names = [h.text().strip() for h in heads]
    assert names == ["retriever", "benchmark", "seeds", "offline s", "offline CPU s", "online s", "online CPU s",
                     "this run s", "model load s", "queries/s", "LLM calls", "cache hits", "prompt tokens",
                     "completion tokens", "$", "$ cold", "reproduce"]
    by = {(r[0].text().strip(), r[1].text().strip()): dict(zip(names, r)) for r in rows}
    d = by[("dense", "negconstraint")]
    assert float(d["offline s"].attrs["data-value"]) == pytest.approx(4.0)
    assert float(d["offline CPU s"].attrs["data-value"]) == pytest.approx(2.0)  # fit 1 + index 1, CPU
    assert float(d["online s"].attrs["data-value"]) == pytest.approx(1.5)
    assert float(d["online CPU s"].attrs["data-value"]) == pytest.approx(1.0)
    assert d["model load s"].attrs["data-value"] == "" and d["model load s"].text() == "–"  # not recorded
    assert float(d["queries/s"].attrs["data-value"]) == pytest.approx(np.mean([NQ / 1.0, NQ / 2.0]))
    c = by[("coder-seq", "negconstraint")]
    assert c["LLM calls"].text() == "2" and c["cache hits"].text() == "1"
    assert c["prompt tokens"].text() == "150" and c["completion tokens"].text() == "15"
    assert c["$"].text() == "$0.0020"  # the cache hit costs nothing
    assert by[(XSS, "negconstraint")]["$"].text() == "unknown"
    x = by[(XSS, "negconstraint")]
    assert (x["prompt tokens"].text(), x["completion tokens"].text()) == ("≥ 7", "≥ 3")
    assert x["prompt tokens"].attrs["data-value"] == ""
    assert float(by[("bm25", "negconstraint")]["model load s"].attrs["data-value"]) == pytest.approx(2.5)
    # cold offline seconds include model loading (2 + 2.5); this run's leave it apart (2 offline + online)
    bm = by[("bm25", "negconstraint")]
    assert float(bm["offline s"].attrs["data-value"]) == pytest.approx(4.5)
    assert float(bm["this run s"].attrs["data-value"]) == pytest.approx(2.0 + float(bm["online s"].attrs["data-value"]))
    command = bm["reproduce"].find("pre", "command").text()
    assert command.startswith("beyondsim run bm25 ") and " -b negconstraint --seeds " in command
    assert bm["reproduce"].find("button", "copy").attrs["data-copy"] == command  # the copy button copies it
    # the CSV and JSON next to the table hold the same rows, unrounded
    data = json.loads((out / "data" / "efficiency-results.json").read_text(encoding="utf-8"))
    rows_csv = list(csv.DictReader(io.StringIO((out / "data" / "efficiency-results.csv").read_text(encoding="utf-8"))))
    assert len(data["rows"]) == len(rows_csv) == len(rows)
    j = {(r["retriever"], r["benchmark"]): r for r in data["rows"]}
    assert j[("bm25", "negconstraint")]["offline_s"] == pytest.approx(4.5)
    assert j[("bm25", "negconstraint")]["command"] == command
    assert j[(XSS, "negconstraint")]["usd"] is None and j[(XSS, "negconstraint")]["usd_unknown_calls"] > 0
    neutral = [r["retriever"] for r in rows_csv if r["retriever"].lstrip("'") != r["retriever"]]
    assert all(not r["retriever"].startswith(("=", "+", "-", "@")) for r in rows_csv), neutral
    assert by[("bm25", "negconstraint")]["$"].text() == "$0"
    assert by[("bm25", "negconstraint")]["LLM calls"].text() == "–"

    theads, trows = table_rows(root.by_id("efficiency-totals"))
    tnames = [h.text().strip() for h in theads]
    tot = {r[0].text().strip(): dict(zip(tnames, r)) for r in trows}
    assert tot["dense"]["benchmarks"].text() == "3"
    assert float(tot["dense"]["offline s"].attrs["data-value"]) == pytest.approx(4.0)
    assert tot[XSS]["$"].text() == "unknown" and tot["coder-seq"]["$"].text() == "$0.0020"
    assert tot[XSS]["prompt tokens"].text() == "≥ 7" and tot["coder-seq"]["prompt tokens"].text() == "150"


def drill(out: Path, rel: str) -> dict:
    """What the browser draws on the drill-down page ``rel``, read from the data files it loads:
    ``{anchor: {"qid", "text", "marks": {doc: mark}, "docs": [(doc, title, snippet, stored)],
    "measures": {name: text}}}`` in page order."""
    data = drilldown.page_data(out, rel)
    res = data["result"]
    content = {"queries": dict(data["content"]["queries"]),
               "docs": {d: (title, snippet) for d, title, snippet in data["content"]["docs"]}}
    out_q = {}
    for q in res["queries"]:
        docs = [res["docids"][i] for i, _, _ in q["t"]]
        out_q[q["a"]] = {
            "qid": q["q"], "text": content["queries"].get(q["q"], ""),
            "marks": {res["docids"][i]: res["marks"][m] for i, _, m in q["t"]},
            "docs": [(d, *content["docs"].get(d, ("", "")), d in content["docs"]) for d in docs],
            "measures": {m: v for m, v in zip(res["measures"], q["m"]) if v is not None},
        }
    return out_q


def test_retriever_page_and_drilldown_marks(site):
    out, _ = site
    html, root = read(out, "retriever/coder-seq.html")
    spec = root.by_id("spec")
    assert "coder-seq" in spec.text() and "coderseqha" in spec.text()
    params = {tr.find("td").text(): list(tr.iter("td"))[1].text() for tr in spec.find("table").find("tbody").iter("tr")}
    assert params == {"k1": "0.9", "note": '"<i>x</i>"'}  # JSON-dumped values
    prov = root.by_id("provenance").text()
    assert "retrievers.coder-seq:X" in prov and "abc123" in prov
    assert "3.11.9" in root.by_id("environment").text()
    facts = root.by_id("facts").text()
    assert "policy" in facts and '"seq"' in facts and json.dumps({"trained": True}) in facts
    hrefs = [a.attrs["href"] for a in root.by_id("results").iter("a")]
    assert "coder-seq/negconstraint-seed0.html" in hrefs and "../bench/negconstraint.html" in hrefs

    html, root = read(out, "retriever/bm25/negconstraint-seed0.html")
    assert root.by_id("queries").attrs["data-queries"] == str(NQ)
    dd = drill(out, "retriever/bm25/negconstraint-seed0.html")
    q1 = dd["q-q01"]
    assert "text of q01 <i>not</i>" == q1["text"]
    assert q1["marks"] == {"d-sat": "satisfying", "d-viol": "violating", "d-top": "topical", "d-unj": "unjudged",
                           "d-zero": "non-relevant"}
    doc, title, snippet, stored = q1["docs"][0]
    assert title == "Sat <title>" and "Sat <title>" not in html  # texts live in the data file, never in the markup
    assert len(snippet) <= 300 and snippet.endswith("…")
    assert q1["docs"][3][3] is False  # text not stored
    assert q1["measures"]["FVR@10"] == "1.00" and q1["measures"]["V@2"] == "1.000"
    assert len(dd) == NQ
    assert "not in this store" not in html

    # a binary benchmark: grade 1 satisfies
    assert drill(out, "retriever/bm25/diag-antonym-seed0.html")["q-a1"]["marks"] == \
        {"x1": "satisfying", "x2": "violating"}
    # no stored content (an imported result): ids only, said so
    html, root = read(out, "retriever/bm25/beir-scifact-seed0.html")
    assert "not in this store" in html
    dd = drill(out, "retriever/bm25/beir-scifact-seed0.html")
    assert [q["qid"] for q in dd.values()][0] == "s1"
    assert set(dd["q-s1"]["marks"].values()) == {"unknown"}


def test_drilldown_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(drilldown, "DRILLDOWN_QUERIES", 5)
    store = build_store(tmp_path / "r.sqlite")
    render_site(store, tmp_path / "o", n_resamples=200)
    html = (tmp_path / "o" / "retriever/bm25/negconstraint-seed0.html").read_text()
    root = parse(html)
    assert len(drill(tmp_path / "o", "retriever/bm25/negconstraint-seed0.html")) == 5
    assert "Showing the first 5 of 30 queries" in root.find("p", "cap").text()


def test_every_link_resolves_and_nothing_external(site):
    out, _ = site
    script = sort_script()
    for path in pages(out):
        html = path.read_text(encoding="utf-8")
        root = parse(html)
        ids = {n.attrs["id"] for n in root.iter() if "id" in n.attrs}
        for n in root.iter():
            for attr in ("href", "src", "xlink:href", "action", "srcset", "poster", "data"):
                if attr not in n.attrs or (attr == "data" and n.tag != "object"):
                    continue
                url = n.attrs[attr]
                assert "://" not in url and not url.startswith("//"), (path, url)
                parts = urlsplit(url)
                assert not parts.scheme, (path, url)
                if parts.path:
                    target = (path.parent / unquote(parts.path)).resolve()
                    assert target.is_file(), (path, url)
                    assert out.resolve() in target.parents, (path, url)
                elif parts.fragment:
                    assert parts.fragment in ids, (path, url)
        low = html.lower()
        assert "<link" not in low and "<img" not in low and "<iframe" not in low
        assert "@import" not in html
        assert not re.search(r"url\(\s*['\"]?(?!#)", html), path  # only in-page SVG references
        # inline scripts: the sort script, the same everywhere, and on a drill-down page the
        # drill-down script, also constant; the only other scripts are the drill-down's data files,
        # local and under data/, holding one assignment of JSON each
        inline = re.findall(r"<script>(.*?)</script>", html, flags=re.S | re.I)
        sources = re.findall(r'<script src="([^"]+)"></script>', html)
        assert len(re.findall(r"<script\b", html)) == len(inline) + len(sources), path
        drilldown_page = "/retriever/" in str(path) and path.parent.name != "retriever"
        expected_inline = [script.strip()] + ([drilldown.drilldown_script().strip()] if drilldown_page else [])
        assert sorted(x.strip() for x in inline) == sorted(expected_inline), path
        assert len(sources) == (2 if drilldown_page else 0), path
        for src in sources:
            target = (path.parent / src).resolve()
            assert (out / "data").resolve() in target.parents and target.suffix == ".js", (path, src)
            kind, value = drilldown.read_data(target)
            assert kind in ("content", "result") and isinstance(value, dict)
        for code in inline:
            assert "fetch(" not in code and "XMLHttpRequest" not in code and "innerHTML" not in code


def test_label_escaped_on_every_page(site):
    out, _ = site
    slug = "script-alert-1-script"
    must_show = {"index.html", "efficiency.html", "bench/negconstraint.html", f"retriever/{slug}.html",
                 f"retriever/{slug}/negconstraint-seed0.html"}
    for path in pages(out):
        html = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(out))
        assert "<script>alert" not in html, rel
        assert "<b>bold</b>" not in html and "<i>not</i>" not in html and "<em>suite</em>" not in html
        if rel in must_show:
            assert XSS_ESC in html, rel
            assert XSS in parse(html).text(), rel
    # the histogram title names the row: escaped inside the SVG too
    bench = (out / "bench/negconstraint.html").read_text()
    assert f"Score separation: {XSS_ESC}" in bench
    assert all(re.fullmatch(r"[a-z0-9/.-]+", str(p.relative_to(out))) for p in pages(out))


def test_only_svg_is_marked_safe():
    for t in TEMPLATES.glob("*.html"):
        text = t.read_text()
        assert "autoescape false" not in text, t
        for m in re.finditer(r"\{\{([^}]*)\|\s*safe", text):
            assert m.group(1).strip().endswith(".svg"), (t, m.group(0))
    assert environment().autoescape is True


def test_summary_rows_still_per_benchmark(site):
    _, store = site
    rows = summary_rows(store)
    negc_rows = [r for r in rows if r["benchmark"] == "negconstraint"]
    assert {r["label"] for r in negc_rows} == {"bm25", "dense", "coder-seq", XSS}
    dense = next(r for r in negc_rows if r["label"] == "dense")
    assert dense["seeds"] == 2 and list(dense)[-3:] == ["V@2", "FVR@10", "nDCG@10"]


def test_store_content_tables(tmp_path):
    s = Store(tmp_path / "c.sqlite")
    assert s.queries_of("v") == [] and s.qrels_of("v") == ({}, {})
    assert s.save_benchmark_content("b", "v", [Query("q2", "second", {"k": "x"}), Query("q1", "first")],
                                    {"q1": {"d1": 2, "d2": 0}}, {"q1": ["d2", "d3"]})
    assert not s.save_benchmark_content("b", "v", [Query("q9", "other")], {}, {})  # once per version
    assert [q["qid"] for q in s.queries_of("v")] == ["q2", "q1"]
    assert s.queries_of("v")[0]["meta"] == {"k": "x"}
    rel, viol = s.qrels_of("v")
    assert rel == {"q1": {"d1": 2, "d2": 0}} and viol == {"q1": {"d2", "d3"}}
    assert s.save_documents("v", [Document("d1", "x" * 1000, "T")]) == 1
    assert s.save_documents("v", [Document("d1", "changed", "T2"), ("d2", "", "short")]) == 1
    docs = s.documents_of("v", ["d1", "d2", "zz"])
    assert docs["d2"] == ("", "short") and docs["d1"][0] == "T" and len(docs["d1"][1]) == 300
    assert s.documents_of("other", ["d1"]) == {}
    s.close()
    # an older store (no content tables) gains them when opened
    import sqlite3

    old = tmp_path / "old.sqlite"
    Store(old).close()
    conn = sqlite3.connect(old)
    for t in ("bench_queries", "bench_qrels", "bench_documents"):
        conn.execute(f"DROP TABLE {t}")
    conn.commit()
    conn.close()
    s2 = Store(old)
    assert s2.queries_of("v") == [] and s2.documents_of("v", ["d"]) == {}
    s2.close()


def test_runner_saves_content_for_the_drilldown(tmp_path, home, no_network):
    from tests.test_cli import DOCS, QUERIES, QRELS, invoke, make_beir

    data = make_beir(tmp_path / "tiny-med")
    assert invoke("run", "bm25", "--benchmark", str(data), "--k", "3").exit_code == 0
    store = Store(home / "results.sqlite")
    rec = store.results()[0]
    version = rec.benchmark_version
    # the judged queries (not q4) with their texts, the judgments, and the top-10 documents only
    assert [(q["qid"], q["text"]) for q in store.queries_of(version)] == [(q, QUERIES[q]) for q in ("q1", "q2", "q3")]
    rel, viol = store.qrels_of(version)
    assert rel == {q: {d: g for qq, d, g in QRELS if qq == q} for q in ("q1", "q2", "q3")} and viol == {}
    top = {d for r in store.rankings(rec.id).values() for d, _ in r}
    docs = store.documents_of(version)
    assert set(docs) == top and all(docs[d][1] == DOCS[d] for d in docs)

    # an older store without content gains it on the next (skipped) run
    with store._conn:
        for t in ("bench_queries", "bench_qrels", "bench_documents"):
            store._conn.execute(f"DELETE FROM {t}")
    res = invoke("run", "bm25", "--benchmark", str(data), "--k", "3")
    assert res.exit_code == 0 and "result exists" in res.output
    assert len(store.queries_of(version)) == 3 and set(store.documents_of(version)) == top

    out = tmp_path / "site"
    assert invoke("leaderboard", "--out", str(out)).exit_code == 0
    rel = str(next((out / "retriever" / "bm25").glob("*.html")).relative_to(out))
    dd = {q["qid"]: q for q in drill(out, rel).values()}
    assert dd["q1"]["text"] == QUERIES["q1"] and any(snip == DOCS["d1"] for _, _, snip, _ in dd["q1"]["docs"])
    assert "satisfying" in dd["q1"]["marks"].values()
    store.close()
    assert no_network == []


def test_rerender_removes_stale_pages_only(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "suites", lambda: SUITES)
    store = build_store(tmp_path / "results.sqlite")
    out = tmp_path / "out"
    render_site(store, out, generated_at=GENERATED, n_resamples=200)
    (out / "notes.html").write_text("mine")  # a file the site did not write
    (out / "retriever" / "extra.html").write_text("mine")
    before = {str(p.relative_to(out)) for p in pages(out)}
    coder = [r for r in store.results() if r.label == "coder-seq"]
    assert len(coder) == 1
    store.delete(coder[0].key)
    render_site(store, out, generated_at=GENERATED, n_resamples=200)
    after = {str(p.relative_to(out)) for p in pages(out)}
    assert before - after == {"retriever/coder-seq.html", "retriever/coder-seq/negconstraint-seed0.html"}
    assert after - before == set()
    assert not (out / "retriever" / "coder-seq").exists()  # its emptied folder too
    assert (out / "notes.html").read_text() == "mine" and (out / "retriever" / "extra.html").exists()
    manifest = json.loads((out / MANIFEST).read_text())
    assert {p for p in manifest["pages"] if p.endswith(".html")} == after - {"notes.html", "retriever/extra.html"}
    # the result's data file went with its page; the benchmark content it shared stays
    assert "data/coder-seq/negconstraint-seed0.js" not in manifest["pages"]
    assert not (out / "data" / "coder-seq").exists()
    assert all((out / p).is_file() for p in manifest["pages"])
    store.close()


# --------------------------------------------------------------------------------------------
# the comparison objects (reports.compare) and the table formats (reports.tables)


def test_compare_objects_are_what_the_site_shows(site, monkeypatch):
    out, store = site
    monkeypatch.setattr(registry, "suites", lambda: SUITES)
    board = compare(store)
    for b in board.benchmarks:
        _, root = read(out, f"bench/{b.slug}.html")
        heads, rows = table_rows(root.by_id("results"))
        assert [h.attrs["data-measure"] for h in heads if "data-measure" in h.attrs] == b.measures
        assert len(rows) == len(b.groups)
        for i, (g, tds) in enumerate(zip(b.groups, rows)):
            assert tds[0].find("a").text() == g.display
            for j, m in enumerate(b.measures):
                cell, agg = tds[7 + j], g.measure(m)
                assert cell.attrs["data-value"] == ("" if agg.mean is None else repr(agg.mean))
                extras = [s.text() for s in cell.iter("span", "extra")]
                if agg.std is not None:
                    assert extras == [f"± {fmt_num(agg.std, measure_decimals(m))}"]
                elif agg.ci is not None:
                    assert extras == [f"[{fmt_num(agg.ci[0], 2)}, {fmt_num(agg.ci[1], 2)}]"]
                else:
                    assert extras == []
                marks = {(next(c[4:] for c in s.classes if c.startswith("sig-")), s.attrs["data-p"])
                         for s in cell.iter("span", "sig")}
                assert marks == {(t.kind, repr(t.p_adj)) for t in b.tests_of(i, m) if t.significant}
                for t in b.tests_of(i, m):
                    assert f"vs {t.yardstick} " in cell.attrs["title"]
                    assert f"Holm-adjusted p = {t.p_adj:.4f}" in cell.attrs["title"]

    # p-values: the paired test of harness.measures.stats on the per-query means over seeds, Holm over the rows
    negc_board = next(b for b in board.benchmarks if b.name == "negconstraint")
    row = {g.display: i for i, g in enumerate(negc_board.groups)}
    dense_avg = {q: (NDCG["dense0"][q] + NDCG["dense1"][q]) / 2 for q in QIDS}
    others = {"bm25": NDCG["bm25"], "coder-seq": NDCG["coder"], XSS: NDCG["xss"]}
    raw = {k: paired_randomization_test(v, dense_avg, n_resamples=10000, seed=0) for k, v in others.items()}
    adjusted = holm(raw)
    for label in others:
        (t,) = [t for t in negc_board.tests_of(row[label], "nDCG@10") if t.kind == COMPARATOR]
        assert t.yardstick == "dense" and t.family == 3
        assert t.p_raw == pytest.approx(raw[label]) and t.p_adj == pytest.approx(adjusted[label])

    # the overview: suite means and the per-benchmark column
    _, root = read(out, "index.html")
    constraint = next(s for s in board.suites if s.name == "constraint")
    _, rows = table_rows(root.by_id("overview-constraint"))
    _, apart = table_rows(root.by_id("overview-constraint-apart"))
    assert [r[0].text().strip() for r in rows] == [r.label for r in constraint.ranked]
    assert [r[0].text().strip() for r in apart] == [r.label for r in constraint.apart]
    # never a complete row below an incomplete one; the chance level last, on its own
    assert constraint.rows == constraint.ranked + constraint.apart + constraint.chance
    assert constraint.headline_benchmarks == ["negconstraint", "diag/antonym"]
    for tds, r in zip(rows + apart, constraint.rows):
        assert [td.attrs["data-value"] for td in tds[5:5 + len(constraint.measures)]] == \
            [repr(r.means[m]) if r.means[m] is not None else "" for m in constraint.measures]
        assert tds[-5].attrs["data-value"] == (repr(r.per_benchmark["negconstraint"])
                                               if r.per_benchmark["negconstraint"] is not None else "")


TINY = ["t1", "t2", "t3", "t4"]
ODD_LABEL = "a|b_c&d%"


def build_tiny(path: Path) -> Store:
    """Hand-made per-query values: the win/tie/loss counts below are read off these columns."""
    s = Store(path)
    s.save_benchmark(BenchmarkInfo("tiny", "tinyv1", "constraint", ["nDCG@10", "V@2"], {}))
    cols = {
        "dense": {"nDCG@10": [0.5, 0.5, 0.2, 0.9], "V@2": [1, 0, 1, 0]},
        "bm25": {"nDCG@10": [0.7, 0.7, 0.7, 0.7], "V@2": [1, 1, 1, 1]},
        ODD_LABEL: {"nDCG@10": [0.6, 0.5, 0.1, 0.95], "V@2": [0, 0, 1, 0]},
    }
    for label, pq in cols.items():
        retriever = label if label in ("dense", "bm25") else "mine"
        s.save(record(label, retriever, "tiny", "tinyv1", 0, {m: _col(v, TINY) for m, v in pq.items()}))
    return s


TINY_SUITES = {"tiny-suite": {"description": "Tiny", "benchmarks": ["tiny"], "headline": ["nDCG@10", "V@2"],
                              "baselines": ["bm25", "dense"], "comparator": "dense"}}


def test_win_tie_loss_against_both_yardsticks(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "suites", lambda: TINY_SUITES)
    store = build_tiny(tmp_path / "r.sqlite")
    (b,) = compare(store, n_resamples=200).benchmarks
    row = {g.display: i for i, g in enumerate(b.groups)}
    assert b.comparator == "dense" and b.baselines == ("bm25", "dense") and b.suite == "tiny-suite"

    def wtl(label, measure):
        return {t.kind: (t.yardstick, t.wins, t.ties, t.losses) for t in b.tests_of(row[label], measure)}

    # nDCG@10 (higher is better): the best baseline row is bm25 (mean 0.7), the comparator dense
    assert wtl(ODD_LABEL, "nDCG@10") == {COMPARATOR: ("dense", 2, 1, 1), "baseline": ("bm25", 1, 0, 3)}
    assert wtl("bm25", "nDCG@10") == {COMPARATOR: ("dense", 3, 0, 1)}  # never tested against itself
    assert wtl("dense", "nDCG@10") == {"baseline": ("bm25", 1, 0, 3)}
    # V@2 (lower is better): dense is both the comparator and the best baseline row
    assert wtl(ODD_LABEL, "V@2") == {COMPARATOR: ("dense", 1, 3, 0), "baseline": ("dense", 1, 3, 0)}
    assert wtl("bm25", "V@2")[COMPARATOR] == ("dense", 0, 2, 2)
    assert b.yardsticks["nDCG@10"] == {COMPARATOR: row["dense"], "baseline": row["bm25"]}
    store.close()


def test_baselines_comparator_and_headline_are_suite_data(tmp_path, monkeypatch):
    suites = {"tiny-suite": {**TINY_SUITES["tiny-suite"], "headline": ["V@2"], "baselines": ["dense"],
                             "comparator": "bm25"}}
    monkeypatch.setattr(registry, "suites", lambda: suites)
    store = build_tiny(tmp_path / "r.sqlite")
    out = render_site(store, tmp_path / "o", n_resamples=200).parent
    (b,) = compare(store, n_resamples=200).benchmarks
    row = {g.display: i for i, g in enumerate(b.groups)}
    assert {t.kind: t.yardstick for t in b.tests_of(row[ODD_LABEL], "nDCG@10")} == \
        {COMPARATOR: "bm25", "baseline": "dense"}
    html, root = read(out, "bench/tiny.html")
    # no row differs significantly here: the legend of the marks is left out, and says so instead
    assert not any(b.tests_of(i, m) and any(t.significant for t in b.tests_of(i, m))
                   for i in range(len(b.groups)) for m in b.measures)
    assert "differs from <em>" not in html and "†</strong>" not in html
    assert "No row differs significantly from <em>bm25</em> or the best baseline" in html
    _, rows = table_rows(root.by_id("results"))
    tagged = [r[0].find("a").text() for r in rows if list(r[0].iter("span", "baseline-tag"))]
    assert tagged == ["dense"]
    heads, _ = table_rows(read(out, "index.html")[1].by_id("overview-tiny-suite"))
    assert [h.attrs.get("data-measure") for h in heads if "data-measure" in h.attrs] == ["V@2"]

    # a suite that declares nothing: no marks, no legend for them
    monkeypatch.setattr(registry, "suites", lambda: {"bare": {"description": "", "benchmarks": ["tiny"]}})
    (b,) = compare(store, n_resamples=200).benchmarks
    assert b.tests == {} and b.comparator is None and b.baselines == ()
    html = render_site(store, tmp_path / "o2", n_resamples=200).parent.joinpath("bench/tiny.html").read_text()
    assert "Holm-adjusted p &lt;" not in html and 'class="sig' not in html
    store.close()


# a suite of another package that declares its comparator under the key's former name
LEGACY_SUITES = {"tiny-suite": {k: v for k, v in TINY_SUITES["tiny-suite"].items() if k != "comparator"}
                 | {"reference": "dense"}}


def test_a_plugin_suite_that_declares_reference_keeps_its_comparator(tmp_path, monkeypatch):
    """``"reference"`` was the name of a suite's ``comparator`` key: a suite that still declares it,
    from another package through the ``beyondsim.suites`` entry-point group, is read as declaring
    its comparator, and the board, its pages and its tables are those of the same suite declaring
    ``"comparator"``."""
    from importlib.metadata import EntryPoint

    assert SuiteSpec.from_entry("s", {"reference": "dense"}).comparator == "dense"
    assert SuiteSpec.from_entry("s", {"reference": "bm25", "comparator": "dense"}).comparator == "dense"
    store = build_tiny(tmp_path / "r.sqlite")
    installed = registry._entry_points

    def board_with(attr: str):
        plugin = EntryPoint("plugin", f"{__name__}:{attr}", registry.SUITE_GROUP)
        monkeypatch.setattr(registry, "_entry_points",
                            lambda group: {"plugin": plugin} if group == registry.SUITE_GROUP else installed(group))
        assert list(registry.suites()) == ["tiny-suite"]
        board = compare(store, n_resamples=200)
        page = render_site(store, tmp_path / attr, n_resamples=200).parent.joinpath("bench/tiny.html").read_text()
        return board, re.sub(r"<time [^>]*>[^<]*</time>", "<time>", page)  # (when it was generated)

    legacy, legacy_page = board_with("LEGACY_SUITES")
    current, current_page = board_with("TINY_SUITES")
    ((b, ours),) = zip(legacy.benchmarks, current.benchmarks)
    assert b.comparator == ours.comparator == "dense" and b.suite == "tiny-suite"
    assert b.tests == ours.tests and b.yardsticks == ours.yardsticks
    assert any(t.kind == COMPARATOR for ts in b.tests.values() for t in ts)
    assert dict(documents(legacy, "json")) == dict(documents(current, "json"))
    assert legacy_page == current_page and "<em>dense</em>" in legacy_page
    store.close()


def test_json_tables_are_strict_and_hold_the_stored_means(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "suites", lambda: SUITES)
    store = build_store(tmp_path / "r.sqlite")
    board = compare(store, n_resamples=200)
    docs = dict(documents(board, "json"))
    assert sorted(docs) == ["bench/beir-scifact.json", "bench/diag-antonym.json", "bench/my-data.json",
                            "bench/negconstraint.json", "suite/constraint.json", "suite/other.json",
                            "suite/topical.json"]
    data = {rel: json.loads(text) for rel, text in docs.items()}
    assert all("NaN" not in text and "Infinity" not in text for text in docs.values())
    negc_data = data["bench/negconstraint.json"]
    # (the JSON keeps its keys: "reference" names the comparator, "against": "reference" a test against it)
    assert negc_data["reference"] == "dense" and negc_data["headline"] == ["V@2", "FVR@10", "nDCG@10"]
    stored = {(r.label, r.seed): r for r in store.results(benchmark="negconstraint")}
    for row in negc_data["rows"]:
        seeds = row["seeds"]
        for m, v in row["measures"].items():
            assert v["per_seed"] == pytest.approx([stored[(row["label"], s)].measures[m].mean for s in seeds])
            assert v["mean"] == pytest.approx(np.mean(v["per_seed"]))
            assert (v["ci"] is None) == (len(seeds) > 1) and (v["std"] is None) == (len(seeds) == 1)
    coder = next(r for r in negc_data["rows"] if r["label"] == "coder-seq")
    (vs_dense,) = [t for t in coder["measures"]["nDCG@10"]["tests"] if t["against"] == "reference"]
    assert vs_dense["reference"] == "dense" and vs_dense["significant"] and vs_dense["wins"] == NQ
    # a measure a row lacks is null, never NaN
    antonym = data["bench/diag-antonym.json"]
    assert antonym["rows"][0]["measures"]["PairAcc"]["mean"] == pytest.approx(1.0)
    overview = data["suite/constraint.json"]
    coder_row = next(r for r in overview["rows"] if r["label"] == "coder-seq")
    assert coder_row["measures"]["PairAcc"] == {"mean": None, "benchmarks": 0}
    assert coder_row["per_benchmark"] == {"negconstraint": pytest.approx(np.mean(list(_v2(FVR["coder"]).values()))),
                                          "diag/antonym": None}
    # --out -: one object with the same tables
    assert json.loads(combined(board, "json")) == {"suites": [data[f"suite/{s}.json"] for s in
                                                              ("constraint", "topical", "other")],
                                                   "benchmarks": [data[f"bench/{b.slug}.json"]
                                                                  for b in board.benchmarks]}
    store.close()


def test_markdown_and_latex_escape_labels(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "suites", lambda: TINY_SUITES)
    store = build_tiny(tmp_path / "r.sqlite")
    board = compare(store, n_resamples=200)
    md = dict(documents(board, "md"))
    assert sorted(md) == ["bench/tiny.md", "suite/tiny-suite.md"]
    for text in md.values():
        row = next(line for line in text.splitlines() if "a\\|" in line)
        assert row.startswith("| a\\|b\\_c\\&d% | ")
        assert ODD_LABEL not in text
    bench_md = md["bench/tiny.md"].splitlines()
    assert bench_md[0] == "## tiny"
    assert bench_md[4] == "| retriever | nDCG@10 ↑ | V@2 ↓ | seeds | queries |"
    assert "| bm25 | **0.700** [0.65, 0.75] |" in md["bench/tiny.md"]

    tex = dict(documents(board, "latex"))
    assert sorted(tex) == ["bench/tiny.tex", "suite/tiny-suite.tex"]
    for text in tex.values():
        assert r"a\textbar{}b\_c\&d\%" in text and ODD_LABEL not in text
        assert text.count(r"\begin{tabular}") == 1 and text.count(r"\end{table}") == 1
    assert r"nDCG@10 $\uparrow$ & V@2 $\downarrow$" in tex["bench/tiny.tex"]

    assert md_escape("x`y") == "x\\`y" and md_escape("two\nlines") == "two lines"
    assert tex_escape(r"{a}~^\ $#") == r"\{a\}\textasciitilde{}\textasciicircum{}\textbackslash{} \$\#"
    store.close()


def test_leaderboard_command_formats(tmp_path, home, monkeypatch):
    from tests.test_cli import invoke

    monkeypatch.setattr(registry, "suites", lambda: TINY_SUITES)
    home.mkdir(parents=True)
    build_tiny(home / "results.sqlite").close()
    res = invoke("leaderboard", "--format", "json", "--out", "-")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [s["suite"] for s in data["suites"]] == ["tiny-suite"] and data["benchmarks"][0]["benchmark"] == "tiny"
    res = invoke("leaderboard", "-f", "latex", "-o", str(tmp_path / "tex"))
    assert res.exit_code == 0, res.output
    assert sorted(str(p.relative_to(tmp_path / "tex")) for p in (tmp_path / "tex").rglob("*")
                  if p.is_file()) == ["bench/tiny.tex", "suite/tiny-suite.tex"]
    res = invoke("leaderboard", "--format", "md", "--out", "-")
    assert res.exit_code == 0 and res.stdout.startswith("## tiny-suite\n")
    assert invoke("leaderboard", "--format", "html", "--out", "-").exit_code == 2
    assert invoke("leaderboard", "--format", "csv").exit_code == 2


def test_the_score_separation_names_a_model_never_a_path_of_the_machine() -> None:
    from reports.pages.benchmark import model_name

    assert model_name("/home/builder/.beyondsim/models/coder/3f2a9c1d") == "coder/3f2a9c1d"
    assert model_name("~/models/coder/3f2a9c1d/") == "coder/3f2a9c1d"
    assert model_name("./models/coder-bge") == "models/coder-bge"
    assert model_name("C:\\Users\\b\\models\\coder\\ab12") == "coder/ab12"
    assert model_name("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert model_name("BAAI/bge-large-en-v1.5") == "BAAI/bge-large-en-v1.5"


def test_a_benchmark_page_says_which_grade_a_plain_measure_counts_as_relevant(tmp_path, monkeypatch):
    """The threshold the store keeps with a benchmark is on its page; one not recorded (a store or
    file from before it was kept) is not shown as if known."""
    monkeypatch.setattr(registry, "suites", lambda: TINY_SUITES)
    for threshold, shown in ((2, "relevant: grade ≥ 2"), (None, None)):
        store = build_tiny(tmp_path / f"r{threshold}.sqlite")
        store.save_benchmark(BenchmarkInfo("tiny", "tinyv1", "constraint", ["nDCG@10", "V@2"], {},
                                           relevance_threshold=threshold))
        out = tmp_path / f"site{threshold}"
        render_site(store, out, generated_at=GENERATED, n_resamples=50)
        page = (out / "bench" / "tiny.html").read_text(encoding="utf-8")
        assert (shown in page) if shown else ("relevant: grade" not in page)
