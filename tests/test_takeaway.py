"""What a reader can take away from the board (reports/pages/downloads.py, reports/pages/rowfacts.py,
harness/core/citation.py, harness/models/facts.py): per-query files equal to the stored values, CIs in
the tables' files, one BibTeX entry per registered paper, the training column and its overlap flag,
and model facts read from the model."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re

import numpy as np
import pytest

from harness import registry
from harness.core.citation import Citation
from harness.registry import get_retriever_class, retriever_info
from harness.measures.stats import bootstrap_cis
from tests.test_site import (ANT, NQ, SUITES, build_store, negc, read, record, render_with_suites,
                             table_rows)

TRAINED = "nnn-tr"
HYDE_CALLS = [{"model": "gpt-4o-mini", "prompt_tokens": 100, "completion_tokens": 10, "latency_s": 0.1,
               "cached": False, "usd": 0.003, "phase": "search", "purpose": "x"},
              {"model": "gpt-4o-mini", "prompt_tokens": 100, "completion_tokens": 10, "latency_s": 0.1,
               "cached": True, "usd": 0.003, "phase": "search", "purpose": "x"}]


def parse_bibtex(text: str) -> tuple[str, str, dict[str, str]]:
    """``(type, key, fields)`` of a text that must hold exactly one ``@type{key, f = {v}, …}`` entry."""
    assert len(re.findall(r"^@", text, re.M)) == 1, text
    m = re.fullmatch(r"\s*@(\w+)\{([^,\s]+),\n(.*)\n\}\s*", text, re.S)
    assert m, text
    fields = {}
    for line in m.group(3).split(",\n"):
        fm = re.fullmatch(r"\s*(\w+) = \{(.*)\}", line, re.S)
        assert fm, line
        bare = fm.group(2).replace(r"\{", "").replace(r"\}", "")
        assert bare.count("{") == bare.count("}")
        fields[fm.group(1)] = fm.group(2)
    return m.group(1), m.group(2), fields


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("takeaway")
    store = build_store(tmp / "results.sqlite")
    trained = {"training": {"benchmark": "negconstraint:train", "benchmark_version": "t1", "queries": 80},
               "model_facts": [{"model": "sentence-transformers/all-MiniLM-L6-v2", "role": "encoder",
                                "parameters": 22713216, "dimension": 384, "max_tokens": 256}]}
    store.save(record("nnn-tr", TRAINED, "negconstraint", "negv1", 0, negc("dense1"), extra=trained,
                      params={"model": "all-MiniLM-L6-v2"}))
    store.save(record("nnn-tr", TRAINED, "diag/antonym", "antv1", 0, ANT["dense"], extra=trained,
                      params={"model": "all-MiniLM-L6-v2"}))
    for bench, version, pq in (("negconstraint", "negv1", negc("dense0")), ("diag/antonym", "antv1", ANT["bm25"])):
        store.save(record("hyde", "hyde", bench, version, 0, pq, llm_calls=HYDE_CALLS,
                          phases={"index": {"wall_s": 1.0, "cpu_s": 1.0, "items": 10},
                                  "search": {"wall_s": 2.0, "cpu_s": 1.0, "items": 4},
                                  "evaluate": {"wall_s": 0.0, "cpu_s": 0.0, "items": 4}},
                          extra={"llm": {"model": "gpt-4o-mini"},
                                 "reused": {"search": {"wall_s": 0.1, "cpu_s": 0.0, "entries": 1, "unknown": 0,
                                                       "cpu_unknown": 0, "usd": 0.003, "usd_unknown": 0,
                                                       "kinds": {"llm": 1}}}}))
    yield render_with_suites(store, tmp / "out"), store
    store.close()


def test_per_query_files_equal_the_stored_values(board):
    out, store = board
    _, root = read(out, "retriever/bm25.html")
    links = [a.attrs["href"] for a in root.iter("a") if "download" in a.classes]
    csv_link = next(h for h in links if "negconstraint-seed0-queries.csv" in h)
    rid = next(r.id for r in store.results() if r.label == "bm25" and r.benchmark == "negconstraint")
    stored = store.per_query(rid)
    assert csv_link.endswith(".csv.gz")  # the per-query files are gzip-compressed

    def unzipped(link: str) -> str:
        return gzip.decompress((out / "retriever" / link).resolve().read_bytes()).decode("utf-8")

    rows = list(csv.DictReader(io.StringIO(unzipped(csv_link))))
    assert len(rows) == NQ
    for row in rows:
        for m in ("V@2", "FVR@10", "nDCG@10"):
            want = stored[m].get(row["query"])
            assert (row[m] == "") if want is None else float(row[m]) == pytest.approx(want, abs=0)
    data = json.loads(unzipped(csv_link.replace(".csv", ".json")))
    assert data["result"]["seed"] == 0 and data["result"]["benchmark"] == "negconstraint"
    assert {r["query"]: r["nDCG@10"] for r in data["rows"]} == stored["nDCG@10"]
    # the benchmark page's seed links and the drill-down link the same files
    _, bench = read(out, "bench/negconstraint.html")
    assert any(a.attrs["href"] == csv_link for a in bench.iter("a") if "download" in a.classes)


def test_benchmark_and_overview_files_carry_the_cis(board):
    out, store = board
    data = json.loads((out / "data/bench-negconstraint.json").read_text())
    bm25 = next(r for r in data["rows"] if r["label"] == "bm25")
    rec = next(r for r in store.results() if r.label == "bm25" and r.benchmark == "negconstraint")
    assert bm25["nDCG@10"] == rec.measures["nDCG@10"].mean
    assert (bm25["nDCG@10 ci_low"], bm25["nDCG@10 ci_high"]) == (rec.measures["nDCG@10"].ci_low,
                                                                rec.measures["nDCG@10"].ci_high)
    dense = next(r for r in data["rows"] if r["label"] == "dense")  # two seeds: a std, no CI
    assert dense["nDCG@10 ci_low"] is None and dense["nDCG@10 std"] > 0
    assert bm25["command"].startswith("beyondsim run bm25 ") and "-b negconstraint" in bm25["command"]

    ov = json.loads((out / "data/overview-constraint.json").read_text())
    assert ov["headline_benchmarks"] == ["negconstraint", "diag/antonym"]
    row = next(r for r in ov["rows"] if r["label"] == "bm25")
    assert row["averaged_over"] == "negconstraint;diag/antonym"
    # the CI: bootstrap of the per-query values, each benchmark weighted as in the mean
    a, b = negc("bm25")["V@2"], ANT["bm25"]["V@2"]
    total = len(a) + len(b)
    col = [v * total / (2 * len(a)) for v in a.values()] + [v * total / (2 * len(b)) for v in b.values()]
    lo, hi = bootstrap_cis({"x": col}, n_resamples=2000, seed=0)["x"]
    assert (row["V@2 ci_low"], row["V@2 ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert lo <= row["V@2"] <= hi
    assert "-b negconstraint -b diag/antonym" in row["command"]
    text = (out / "data/overview-constraint.csv").read_text()
    assert "V@2 ci_low" in text.splitlines()[0]


def test_bibtex_of_a_registered_method_is_one_entry_with_its_declared_fields():
    for name in ("coder-seq", "coder-union", "deo", "nnn-fix", "nnn-tr", "l1-fix", "l2-fix", "mmr", "hyde", "nsir",
                 "colt", "bm25", "dense", "contriever"):
        c = retriever_info(get_retriever_class(name)).citation
        assert isinstance(c, Citation), name
        kind, key, fields = parse_bibtex(c.bibtex())
        assert (kind, key) == (c.entry, c.key)
        assert fields["title"] == c.title.replace("_", r"\_")
        assert ("author" in fields) == bool(c.authors)
    kind, key, fields = parse_bibtex(retriever_info(get_retriever_class("hyde")).citation.bibtex())
    assert (kind, key) == ("inproceedings", "gao2023hyde")
    assert fields == {"title": "Precise zero-shot dense retrieval without relevance labels",
                      "author": "L. Gao and X. Ma and J. Lin and J. Callan", "year": "2023",
                      "booktitle": "Proceedings of the 61st Annual Meeting of the Association for Computational "
                                   "Linguistics (Volume 1: Long Papers)",
                      "pages": "1762--1777", "eprint": "2212.10496", "archivePrefix": "arXiv"}
    # the NNN paper's text names no authors or year: none is written
    assert set(parse_bibtex(retriever_info(get_retriever_class("nnn-fix")).citation.bibtex())[2]) == {"title"}
    assert retriever_info(get_retriever_class("random")).citation is None
    # a value cannot close the entry early
    _, _, f = parse_bibtex(Citation("x1", "a } @evil{ b", ("A & B",), year=2020).bibtex())
    assert f["title"] == r"a \} @evil\{ b" and f["author"] == r"A \& B"


def test_bibtex_on_the_retriever_page_and_the_rows(board):
    out, _ = board
    _, root = read(out, "retriever/bm25.html")
    pre = root.by_id("bibtex")
    assert parse_bibtex(pre.text())[1] == "robertson2009bm25"
    _, bench = read(out, "bench/negconstraint.html")
    heads, rows = table_rows(bench.by_id("results"))
    bm25 = next(r for r in rows if r[0].find("a").text().strip() == "bm25")
    cite = bm25[-1]
    assert parse_bibtex(next(p for p in cite.iter("pre") if "bibtex" in p.classes).text())[1] == "robertson2009bm25"
    assert next(p for p in cite.iter("pre") if "command" in p.classes).text().startswith("beyondsim run bm25 ")


def test_training_overlap_is_flagged_on_its_family_only_and_never_moves_a_rank(board, tmp_path):
    out, store = board
    _, bench = read(out, "bench/negconstraint.html")
    _, rows = table_rows(bench.by_id("results"))
    row = next(r for r in rows if r[0].find("a").text().strip() == "nnn-tr")
    train = row[-3]
    assert train.attrs.get("data-overlap") == "1" and "negconstraint:train (80 queries)" in train.text()
    assert "same benchmark family as negconstraint" in train.attrs["title"]
    _, ant = read(out, "bench/diag-antonym.html")
    _, arows = table_rows(ant.by_id("results"))
    arow = next(r for r in arows if r[0].find("a").text().strip() == "nnn-tr")
    assert "data-overlap" not in arow[-3].attrs and "negconstraint:train" in arow[-3].text()
    assert next(r for r in arows if r[0].find("a").text().strip() == "bm25")[-3].text().strip() == "–"  # trains on nothing
    # the efficiency data say it too
    eff = json.loads((out / "data/efficiency-results.json").read_text())
    by = {(r["retriever"], r["benchmark"]): r for r in eff["rows"]}
    assert by[("nnn-tr", "negconstraint")]["training_overlap"] and not by[("nnn-tr", "diag/antonym")]["training_overlap"]
    # the flag changes no rank: the same board without the training record ranks the rows alike
    ov = json.loads((out / "data/overview-constraint.json").read_text())
    ranks = {r["label"]: (r["rank_low"], r["rank_high"], r["listed"]) for r in ov["rows"]}
    from reports.compare import compare
    mp = pytest.MonkeyPatch()
    mp.setattr(registry, "suites", lambda: SUITES)
    try:
        for r in store.results():
            r.extra.pop("training", None)
        board2 = compare(store)
    finally:
        mp.undo()
    suite = next(s for s in board2.suites if s.name == "constraint")
    assert {r.label: (r.rank[0] if r.rank else None, r.rank[1] if r.rank else None,
                      "ranked" if r.ranked else "chance" if r.chance else "apart") for r in suite.rows} == ranks


def test_model_facts_shown_where_known(board):
    out, _ = board
    _, bench = read(out, "bench/negconstraint.html")
    _, rows = table_rows(bench.by_id("results"))
    by = {r[0].find("a").text().strip(): r for r in rows}
    assert by["nnn-tr"][-2].text().strip() == "sentence-transformers/all-MiniLM-L6-v2: 22.7M params, 384-d, 256 tokens"
    assert by["bm25"][-2].text().strip() == "–"


@pytest.mark.slow
def test_model_facts_of_minilm_are_read_from_the_model(tmp_path):
    from harness.models.pool import EncoderPool
    from harness.core.ledger import Ledger
    from harness.models.facts import pool_facts

    pool = EncoderPool(tmp_path / "cache", "cpu")
    pool.ledger = Ledger()
    pool.encode("all-MiniLM-L6-v2", ["a query", "a document"])
    facts = pool_facts(pool)
    assert facts == [{"model": "all-MiniLM-L6-v2", "role": "encoder", "parameters": 22_713_216, "dimension": 384,
                      "max_tokens": 256}]
    model = pool.used_models()["all-MiniLM-L6-v2"]
    assert facts[0]["parameters"] == sum(int(p.numel()) for p in model.parameters())
    # a later result whose embeddings all come from the cache reads the facts recorded beside them
    fresh = EncoderPool(tmp_path / "cache", "cpu")
    fresh.ledger = Ledger()
    fresh.encode("all-MiniLM-L6-v2", ["a query", "a document"])
    assert fresh.used_models() == {"all-MiniLM-L6-v2": None}
    assert pool_facts(fresh) == facts


def test_dollar_scatter_beside_the_seconds_one(board):
    """Where an LLM is used: the headline measure against cold $ per 1,000 queries, the LLM rows only."""
    out, store = board
    _, root = read(out, "index.html")
    fig = root.by_id("overview-constraint-usd")
    points = {c.attrs["data-label"]: c for c in fig.iter("circle") if "data-label" in c.attrs}
    assert set(points) == {"hyde"}  # coder-seq calls one too, but ran one headline benchmark only
    from harness.cost.figures import Costs

    recs = [r for r in store.results() if r.label == "hyde"]
    costs = Costs(store.results())
    # each benchmark's cold dollars (new spend + the reused reply) per 1,000 queries searched, averaged
    want = np.mean([costs.of(r).cold_usd.value / (costs.of(r).online_items or r.n_queries) * 1000 for r in recs])
    assert costs.of(recs[0]).cold_usd.value == pytest.approx(0.006)
    assert float(points["hyde"].attrs["data-x"]) == pytest.approx(want, rel=1e-3)
    assert root.by_id("overview-constraint-cost") is not None  # the seconds one stays
    _, eff = read(out, "efficiency.html")
    assert eff.by_id("efficiency-usd-tradeoff-1") is not None
