"""Rendering tests for the leaderboard site (reports/): fabricated store rows, no models. The
benchmark tables live on ``bench/<slug>.html``; see tests/test_site.py for the other pages."""

from __future__ import annotations

import ast
import datetime as dt
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from harness.store.results import BenchmarkInfo, MeasureValue, Store, result_key
from reports import render_site, summary_rows
from reports import text
from reports.compare import measure_higher_is_better
from reports.pages.page import TEMPLATES, environment, sort_script
from tests.dom import Node, parse
from tests.factories import llm_call, make_record, make_store

HV = "0.1.0"
XSS = "<script>alert(1)</script>"


def results_table(root: Node) -> tuple[list[str], list[dict[str, Node]]]:
    """(measure headers, rows as {column name: td}) of a benchmark page's results table."""
    table = root.by_id("results")
    heads = [th for th in table.find("thead").iter("th")]
    names = [th.attrs.get("data-measure") or th.text().strip() for th in heads]
    rows = []
    for tr in table.find("tbody").iter("tr"):
        tds = list(tr.iter("td"))
        assert len(tds) == len(names)
        rows.append(dict(zip(names, tds)))
    measures = [th.attrs["data-measure"] for th in heads if "data-measure" in th.attrs]
    return measures, rows


def value(td: Node) -> str:
    return td.find("span", "value").text().strip()


def extra(td: Node) -> str:
    spans = list(td.iter("span", "extra"))
    return spans[0].text().strip() if spans else ""


def label(row: dict[str, Node]) -> str:
    return row["retriever"].find("a").text().strip()


def efficiency_rows(root: Node) -> list[dict[str, str]]:
    table = root.by_id("efficiency-results")
    names = [th.text().strip() for th in table.find("thead").iter("th")]
    return [dict(zip(names, (td.text().strip() for td in tr.iter("td"))))
            for tr in table.find("tbody").iter("tr")]


# --------------------------------------------------------------------------------------------
# a fabricated store


def mv(mean, n=8, lo=None, hi=None):
    return MeasureValue(mean, n, lo, hi)


def record(label, spec_hash, benchmark, version, seed, measures, *, n_queries=8, n_missing=0,
           phases=None, llm_calls=None, created_at=""):
    return make_record(
        label, retriever=label.split()[0], spec_hash=spec_hash, spec={"name": label}, benchmark=benchmark,
        benchmark_version=version, seed=seed, harness_version=HV, n_queries=n_queries, n_missing=n_missing,
        measures=measures, phases=phases or {}, llm_calls=llm_calls or [], created_at=created_at,
    )


def call(usd, cached=False, pt=100, ct=20):
    return llm_call(usd, cached=cached, prompt_tokens=pt, completion_tokens=ct)


DENSE_PAIR = [0.6123, 0.6481]  # PairAcc over two seeds
DENSE_V2 = [0.2011, 0.2398]
DENSE_NDCG = [0.5012, 0.5530]


@pytest.fixture()
def store(tmp_path: Path):
    s = make_store(tmp_path, benchmarks=[
        BenchmarkInfo("nevir", "nevirv1", "constraint", ["PairAcc", "V@2", "nDCG@10", "FVR@10"],
                      {"queries": 10, "judged_queries": 8, "documents": 20, "pairs": 4}, "Negation pairs <b>x</b>&"),
        BenchmarkInfo("diag/exclusion", "exclv1", "constraint", ["V@2", "nDCG@10"],
                      {"queries": 6, "judged_queries": 6, "documents": 30, "pairs": 0}, "Exclusion probes"),
        BenchmarkInfo("beir/scifact", "scifv1", "topical", ["nDCG@10", "R@100"],
                      {"queries": 300, "judged_queries": 300, "documents": 5183, "pairs": 0}, "SciFact"),
        BenchmarkInfo("toolbank/numpy", "tbv1", "completeness", ["Comp@5", "nDCG@10"],
                      {"queries": 50, "judged_queries": 50, "documents": 400}, "Tool sets")])

    # nevir: PairAcc order xss > bm25 > dense > hyde; V@2 lowest is hyde
    s.save(record("bm25", "bm25hash00", "nevir", "nevirv1", 0,
                  {"PairAcc": mv(0.6725, 4, 0.6312, 0.7149), "V@2": mv(0.3104, 5, 0.25, 0.37),
                   "nDCG@10": mv(0.4444, 8, 0.40, 0.49), "FVR@10": mv(3.456, 5, 3.0, 3.9)},
                  n_missing=2,
                  phases={"index": {"wall_s": 1.25, "cpu_s": 1.0, "items": 20},
                          "search": {"wall_s": 0.5, "cpu_s": 0.25, "items": 8},
                          "evaluate": {"wall_s": 0.1, "cpu_s": 0.5, "items": 8}}))
    for seed, (p, v, n) in enumerate(zip(DENSE_PAIR, DENSE_V2, DENSE_NDCG)):
        s.save(record("dense", "densehash0", "nevir", "nevirv1", seed,
                      {"PairAcc": mv(p, 4, p - 0.05, p + 0.05), "V@2": mv(v, 5, v - 0.1, v + 0.1),
                       "nDCG@10": mv(n, 8)},
                      phases={"fit": {"wall_s": 2.0, "cpu_s": 2.0, "items": 0},
                              "index": {"wall_s": 1.0, "cpu_s": 1.0, "items": 20},
                              "search": {"wall_s": 1.0 + 2 * seed, "cpu_s": 1.0, "items": 8}}))
    s.save(record(XSS, "xsshash000", "nevir", "nevirv1", 0,
                  {"PairAcc": mv(0.9, 4, 0.8, 1.0), "V@2": mv(0.5, 5), "nDCG@10": mv(0.3)}))
    s.save(record("hyde", "hydehash00", "nevir", "nevirv1", 0,
                  {"PairAcc": mv(0.25, 4), "V@2": mv(0.1, 5), "nDCG@10": mv(0.2)},
                  phases={"search": {"wall_s": 4.0, "cpu_s": 1.0, "items": 8}},
                  llm_calls=[call(0.001), call(None), call(0.002, cached=True)]))

    # diag/exclusion: first measure V@2 is lower-is-better → ascending
    s.save(record("bm25", "bm25hash00", "diag/exclusion", "exclv1", 0,
                  {"V@2": mv(0.40, 6), "nDCG@10": mv(0.70, 6)}, n_queries=6,
                  llm_calls=[call(0.001), call(0.002), call(0.5, cached=True)]))
    s.save(record("dense", "densehash0", "diag/exclusion", "exclv1", 0,
                  {"V@2": mv(0.15, 6), "nDCG@10": mv(0.60, 6)}, n_queries=6,
                  llm_calls=[call(None, cached=True)]))

    # beir/scifact: two configurations share the label "tuned"
    s.save(record("tuned", "abc123ffff", "beir/scifact", "scifv1", 0,
                  {"nDCG@10": mv(0.66, 300), "R@100": mv(0.9, 300)}, n_queries=300))
    s.save(record("tuned", "def456eeee", "beir/scifact", "scifv1", 0,
                  {"nDCG@10": mv(0.70, 300), "R@100": mv(0.85, 300)}, n_queries=300))

    s.save(record("bm25", "bm25hash00", "toolbank/numpy", "tbv1", 0,
                  {"Comp@5": mv(0.2, 40), "nDCG@10": mv(0.5, 50)}, n_queries=50))

    # a benchmark the store does not describe: fall back to the measures present
    s.save(record("bm25", "bm25hash00", "my-data", "mdv1", 0,
                  {"nDCG@10": mv(0.31), "MAP@10": mv(0.22)}))
    yield s
    s.close()


@pytest.fixture()
def page(store, tmp_path):
    path = render_site(store, tmp_path / "site",
                       generated_at=dt.datetime(2025, 1, 2, 3, 4, tzinfo=dt.timezone.utc), n_resamples=500)
    html = path.read_text(encoding="utf-8")
    return path, html, parse(html)


def bench(page, slug: str) -> tuple[str, Node]:
    html = (page[0].parent / "bench" / f"{slug}.html").read_text(encoding="utf-8")
    return html, parse(html)


def site_pages(page) -> list[Path]:
    return sorted(page[0].parent.rglob("*.html"))


# --------------------------------------------------------------------------------------------


def test_sections_rows_and_header(page, store):
    path, html, root = page
    assert path.name == "index.html" and path.is_file()
    assert "beyondsim leaderboard" in html
    assert "2025-01-02 03:04 UTC" in html
    header = root.find("header").text()
    assert "11 results" in header and HV in header

    links = [a.attrs["href"] for a in root.by_id("benchmarks").iter("a")]
    # task order (constraint, completeness, topical, undescribed), then name
    assert links == ["bench/diag-exclusion.html", "bench/nevir.html", "bench/toolbank-numpy.html",
                     "bench/beir-scifact.html", "bench/my-data.html"]
    _, nevir = bench(page, "nevir")
    _, rows = results_table(nevir)
    assert {label(r) for r in rows} == {"bm25", "dense", XSS, "hyde"}
    head = nevir.find("header", "benchmark")
    assert "constraint" in head.find("h1").text()
    meta = head.find("p", "meta").text()
    assert "nevirv1" in meta and "10 queries" in meta and "8 judged queries" in meta
    assert "20 documents" in meta and "4 pairs" in meta
    # pairs == 0 is not shown
    sci = bench(page, "beir-scifact")[1].find("header", "benchmark").find("p", "meta").text()
    assert "pairs" not in sci and "5,183 documents" in sci


def test_values_formatted_and_seed_aggregation(page):
    measures, rows = results_table(bench(page, "nevir")[1])
    assert measures == ["PairAcc", "V@2", "nDCG@10", "FVR@10"]
    row = {label(r): r for r in rows}
    bm25 = row["bm25"]
    assert value(bm25["PairAcc"]) == "0.673"  # 0.6725 rounds half up
    assert extra(bm25["PairAcc"]) == "[0.63, 0.71]"
    assert value(bm25["V@2"]) == "0.310"
    assert value(bm25["FVR@10"]) == "3.46"  # FVR has two decimals
    assert bm25["seeds"].attrs["data-value"] == "1"
    assert "8" in bm25["queries"].text() and "(2 missing)" in bm25["queries"].text()

    dense = row["dense"]
    for m, vals in (("PairAcc", DENSE_PAIR), ("V@2", DENSE_V2), ("nDCG@10", DENSE_NDCG)):
        assert value(dense[m]) == f"{np.mean(vals):.3f}"
        assert extra(dense[m]) == f"± {np.std(vals, ddof=1):.3f}"
    assert dense["seeds"].attrs["data-value"] == "2"
    assert "missing" not in dense["queries"].text()
    # dense has no FVR@10 → dash, no CI
    assert value(dense["FVR@10"]) == "–" and extra(dense["FVR@10"]) == ""
    # a single seed without a stored CI shows no bracket
    assert extra(row[XSS]["nDCG@10"]) == ""


def test_best_bold_and_sort_order(page):
    html, root = bench(page, "nevir")
    _, rows = results_table(root)
    # sorted by PairAcc, descending
    assert [label(r) for r in rows] == [XSS, "bm25", "dense", "hyde"]

    def bold(m):
        return [label(r) for r in rows if "best" in r[m].classes]

    assert bold("PairAcc") == [XSS]
    assert bold("V@2") == ["hyde"]  # lower is better: the LOWEST value
    assert bold("nDCG@10") == ["dense"]
    assert bold("FVR@10") == ["bm25"]  # the only value present
    assert "td.best .value { font-weight: 700; }" in html

    # a section whose first measure is lower-is-better sorts ascending
    _, excl = results_table(bench(page, "diag-exclusion")[1])
    assert [label(r) for r in excl] == ["dense", "bm25"]
    assert [label(r) for r in excl if "best" in r["V@2"].classes] == ["dense"]
    assert [label(r) for r in excl if "best" in r["nDCG@10"].classes] == ["bm25"]

    # direction arrows
    heads = {th.attrs["data-measure"]: th.text() for th in root.by_id("results").iter("th")
             if "data-measure" in th.attrs}
    assert "↓" in heads["V@2"] and "↑" not in heads["V@2"]
    assert "↑" in heads["PairAcc"] and "↑" in heads["FVR@10"]
    # the count beside V@k / FVR@k when it differs from n_queries; not beside PairAcc
    assert "n=5" in heads["V@2"] and "n=5" in heads["FVR@10"] and "n=" not in heads["PairAcc"]
    tb = {th.attrs["data-measure"]: th.text()
          for th in bench(page, "toolbank-numpy")[1].by_id("results").iter("th") if "data-measure" in th.attrs}
    assert "n=40" in tb["Comp@5"] and "n=" not in tb["nDCG@10"]


def test_label_disambiguation_and_fallback(page):
    _, sci = results_table(bench(page, "beir-scifact")[1])
    assert [label(r) for r in sci] == ["tuned (def456)", "tuned (abc123)"]
    measures, md = results_table(bench(page, "my-data")[1])
    assert measures == ["nDCG@10", "MAP@10"]
    assert value(md[0]["nDCG@10"]) == "0.310" and value(md[0]["MAP@10"]) == "0.220"
    # labels with a single spec hash stay as they are
    _, nev = results_table(bench(page, "nevir")[1])
    assert "bm25" in [label(r) for r in nev]
    # one retriever page per displayed label
    names = {p.name for p in (page[0].parent / "retriever").glob("*.html")}
    assert {"tuned-abc123.html", "tuned-def456.html", "bm25.html"} <= names


def test_escaping(page):
    html, root = bench(page, "nevir")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html and html.lower().count("<script") == 1
    assert "Negation pairs &lt;b&gt;x&lt;/b&gt;&amp;" in html
    assert "<b>x</b>" not in html
    # the parsed text round-trips to the original strings
    assert XSS in root.by_id("results").text()
    assert "Negation pairs <b>x</b>&" in root.find("p", "description").text()
    for p in site_pages(page):
        assert "<script>alert" not in p.read_text(encoding="utf-8"), p


def test_self_contained(page):
    script = sort_script()
    assert "http" not in script and "fetch" not in script
    for p in site_pages(page):
        html = p.read_text(encoding="utf-8")
        low = html.lower()
        assert 'href="http' not in low and 'src="http' not in low and "//cdn" not in low
        assert "<link" not in low and "<img" not in low and "@import" not in html
        drilldown = "/retriever/" in str(p) and p.parent.name != "retriever"
        assert low.count("<script>") == (2 if drilldown else 1) and script in html
        assert low.count("<script src=") == (2 if drilldown else 0)  # the drill-down's local data files
        assert html.count("<style>") == 1
        assert "font-variant-numeric: tabular-nums" in html


def test_efficiency(page):
    html = (page[0].parent / "efficiency.html").read_text(encoding="utf-8")
    rows = efficiency_rows(parse(html))
    by = {(r["retriever"], r["benchmark"]): r for r in rows}
    assert len(rows) == 10
    bm25 = by[("bm25", "nevir")]
    assert bm25["offline s"] == "1.25"  # index only
    assert bm25["online s"] == "0.50"
    assert bm25["queries/s"] == f"{8 / 0.5:.1f}"
    assert bm25["LLM calls"] == "–" and bm25["prompt tokens"] == "–" and bm25["$"] == "$0"
    dense = by[("dense", "nevir")]
    assert dense["offline s"] == "3.00"  # fit + index
    assert dense["online s"] == "2.00"  # mean of 1 and 3 seconds
    assert dense["queries/s"] == f"{np.mean([8 / 1.0, 8 / 3.0]):.1f}"
    assert dense["seeds"] == "2"
    hyde = by[("hyde", "nevir")]
    assert hyde["$"] == "≥ $0.0010"  # a billed call without a price: the known part, as the audit prints it
    assert hyde["LLM calls"] == "3" and hyde["cache hits"] == "1"
    assert hyde["prompt tokens"] == "300" and hyde["completion tokens"] == "60"
    assert hyde["queries/s"] == "2.0" and hyde["offline s"] == "–"
    # priced calls: the cached one is not billed
    assert by[("bm25", "diag/exclusion")]["$"] == "$0.0030"
    # only cached calls, even unpriced: nothing billed
    assert by[("dense", "diag/exclusion")]["$"] == "$0"
    assert by[("dense", "diag/exclusion")]["LLM calls"] == "1"
    assert by[("dense", "diag/exclusion")]["cache hits"] == "1"


def test_summary_rows_match_page(page, store):
    _, _, root = page
    rows = summary_rows(store)
    nevir = [r for r in rows if r["benchmark"] == "nevir"]
    assert [r["label"] for r in nevir] == [label(r) for r in results_table(bench(page, "nevir")[1])[1]]
    dense = next(r for r in nevir if r["label"] == "dense")
    assert dense["seeds"] == 2 and dense["spec_hash"] == "densehash0"
    assert dense["PairAcc"] == pytest.approx(np.mean(DENSE_PAIR))
    assert dense["FVR@10"] is None
    assert list(dense)[-4:] == ["PairAcc", "V@2", "nDCG@10", "FVR@10"]
    assert [r["benchmark"] for r in rows][0] == "diag/exclusion"
    assert {r["label"] for r in rows if r["benchmark"] == "beir/scifact"} == {"tuned (abc123)", "tuned (def456)"}


def test_latest_result_per_seed_and_single_seed_ci(tmp_path):
    s = Store(tmp_path / "results.sqlite")
    s.save_benchmark(BenchmarkInfo("b", "v", "topical", ["nDCG@10"], {}))
    old = record("x", "h", "b", "v", 0, {"nDCG@10": mv(0.1)}, created_at="2024-01-01T00:00:00+00:00")
    new = record("x", "h", "b", "v", 0, {"nDCG@10": mv(0.2, 8, 0.15, 0.25)},
                 created_at="2025-01-01T00:00:00+00:00")
    new.harness_version, new.key = "0.2.0", result_key("h", "v", 0, 100, "0.2.0")
    s.save(old)
    s.save(new)
    render_site(s, tmp_path / "o")
    _, rows = results_table(parse((tmp_path / "o" / "bench" / "b.html").read_text()))
    assert len(rows) == 1 and value(rows[0]["nDCG@10"]) == "0.200"
    assert extra(rows[0]["nDCG@10"]) == "[0.15, 0.25]" and rows[0]["seeds"].attrs["data-value"] == "1"


def test_slugs_are_safe_and_unique(tmp_path):
    s = Store(tmp_path / "results.sqlite")
    names = ["a/b", "a-b", '"><img src=x>', "Ünïcode Bench"]
    for i, name in enumerate(names):
        s.save(record("r", "h", name, f"v{i}", 0, {"nDCG@10": mv(0.5)}))
    html = render_site(s, tmp_path / "o").read_text()
    root = parse(html)
    files = sorted(p.name for p in (tmp_path / "o" / "bench").glob("*.html"))
    assert len(files) == len(set(files)) == 4
    assert all(re.fullmatch(r"[a-z0-9-]+\.html", f) for f in files)
    hrefs = [a.attrs["href"] for a in root.iter("a")]
    assert all(re.fullmatch(r"(#|bench/|retriever/|data/)?[a-z0-9-]+(\.html|\.csv|\.json)?", h) for h in hrefs), hrefs
    assert all((tmp_path / "o" / h).is_file() for h in hrefs if h.endswith((".html", ".csv", ".json")))
    assert "<img" not in html and "&#34;&gt;&lt;img src=x&gt;" in html
    assert text.slugify("A/B c", set()) == "a-b-c"


def test_empty_store_and_autoescape(tmp_path):
    s = Store(tmp_path / "results.sqlite")
    html = render_site(s, tmp_path / "o", title="T & <i>").read_text()
    assert "T &amp; &lt;i&gt;" in html and "0 results" in html
    parse(html)
    assert environment().autoescape is True
    for t in TEMPLATES.glob("*.html"):
        for m in re.finditer(r"\{\{([^}]*)\|\s*safe", t.read_text()):
            assert m.group(1).strip().endswith(".svg"), (t, m.group(0))  # only the plots' SVG
        assert "autoescape false" not in t.read_text(), t


def test_measure_formatting():
    assert text.fmt_num(0.6725) == "0.673"
    assert text.fmt_num(0.6724) == "0.672"
    assert text.fmt_num(None) == "–" and text.fmt_num(float("nan")) == "–"
    assert text.fmt_num(-0.0001) == "0.000"
    assert text.measure_decimals("FVR@10") == 2 and text.measure_decimals("V@2") == 3
    assert measure_higher_is_better("V@2") is False
    assert measure_higher_is_better("FVR@10") is True


@pytest.mark.parametrize("x,expected", [
    (0.5, True), (0, True), (-3, True), (np.float64(0.5), True), (np.float32(0.5), True),
    (np.int64(2), True), (Fraction(1, 3), True),
    (float("nan"), False), (float("inf"), False), (-float("inf"), False), (np.float32("nan"), False),
    (None, False), (True, False), (False, False), (np.bool_(True), False), ("1.5", False), ("nan", False),
    (Decimal("1.5"), False), (1j, False), (np.array([1.0]), False), (10 ** 400, False),
])
def test_finite_is_one_rule_for_text_and_plots(x, expected):
    """reports.text.finite decides what every page, table and plot shows as a number."""
    from reports import plots, scatter

    assert text.finite(x) is expected
    assert plots.finite is scatter.finite is text.finite
    assert (text.fmt_num(x) != "–") is expected


CONCRETE_RETRIEVERS = re.compile(r"\b(bm25|dense|hyde|mmr|coder|nnn|deo)\b", re.I)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_reports_name_no_concrete_retriever():
    """Baselines and the comparator come from the suites (benchmarks/suites.py through the
    registry): no string literal in reports/ names a retriever (docstrings and comments may)."""
    root = Path(__file__).resolve().parent.parent / "reports"
    files = sorted(root.glob("*.py")) + sorted((root / "pages").glob("*.py"))
    assert len(files) >= 10
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and CONCRETE_RETRIEVERS.search(node.value)):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value!r}")
    assert found == []
