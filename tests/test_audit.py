"""The cost audit (harness/cost/audit.py and `beyondsim audit`) on hand-made results: group sums, cache
hits apart from billed calls, --since, unknown prices kept unknown, and the suite projection."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from pathlib import Path

import pytest

from rich.console import Console

from harness.cost import audit as A
from harness.cost import tables as T
from harness.core.ledger import CallJournal, LLMCall, RunTag
from harness.models.llm import Price, cache_file
from harness.store.results import BenchmarkInfo, MeasureValue, ResultRecord, Store
from tests.factories import make_record
from tests.test_cli import invoke

MINI = 0.00027  # gpt-4o-mini: 1000 prompt + 200 completion tokens at $0.15 / $0.60 per 1M


def call(model: str, pt: int, ct: int, *, cached: bool = False, usd: float | None = 0.0, phase: str = "search") -> dict:
    return {"model": model, "prompt_tokens": pt, "completion_tokens": ct, "latency_s": 0.0 if cached else 0.5,
            "cached": cached, "usd": 0.0 if cached else usd, "phase": phase, "purpose": "test"}


def phases(index: float | None = None, docs: int = 0, search: float | None = None, queries: int = 0,
           fit: float | None = None) -> dict:
    out: dict[str, dict[str, float]] = {"evaluate": {"wall_s": 0.25, "cpu_s": 0.25, "items": queries}}
    if fit is not None:
        out["fit"] = {"wall_s": fit, "cpu_s": fit, "items": 0}
    if index is not None:
        out["index"] = {"wall_s": index, "cpu_s": index, "items": docs}
    if search is not None:
        out["search"] = {"wall_s": search, "cpu_s": search, "items": queries}
    return out


def rec(label: str, bench: str, created: str, ph: dict, calls: list[dict] | None = None, seed: int = 0) -> ResultRecord:
    return make_record(label, key=f"{label}|{bench}|{seed}|{created}", benchmark=bench, seed=seed, k=10,
                       harness_version="test", n_queries=10, measures={"nDCG@10": MeasureValue(0.5, 10)}, phases=ph,
                       llm_calls=list(calls or []), created_at=created)


JAN, FEB = "2026-01-10T00:00:00+00:00", "2026-02-01T12:00:00+00:00"


def usage_records() -> list[ResultRecord]:
    return [
        rec("hyde", "nevir", JAN, phases(fit=1.0, index=3.0, docs=100, search=2.0, queries=10),
            [call("gpt-4o-mini", 1000, 200, usd=MINI), call("gpt-4o-mini", 1000, 200, usd=MINI),
             call("gpt-4o-mini", 1000, 200, cached=True)]),
        rec("hyde", "negconstraint", FEB, phases(index=5.0, docs=200, search=4.0, queries=20),
            [call("mystery-llm", 500, 100, usd=None), call("gpt-4o-mini", 2000, 400, usd=2 * MINI),
             call("mystery-llm", 500, 100, cached=True)]),
        rec("bm25", "nevir", JAN, phases(index=1.0, docs=100, search=0.5, queries=10)),
        rec("bm25", "nevir", FEB, phases(index=1.5, docs=100, search=0.5, queries=10), seed=1),
    ]


@pytest.fixture
def usage_home(home: Path) -> Path:
    with Store(home / "results.sqlite") as store:
        for r in usage_records():
            store.save(r)
    return home


def by_key(rows: list[dict], *keys: str) -> dict[tuple, dict]:
    return {tuple(r[k] for k in keys): r for r in rows}


# -- grouping ----------------------------------------------------------------------------------------

def test_pair_sums_billed_vs_cached_and_unknown_propagation() -> None:
    a = A.group(usage_records(), "pair")
    rows = by_key(a.rows, "retriever", "benchmark")
    assert list(rows) == [("bm25", "nevir"), ("hyde", "negconstraint"), ("hyde", "nevir")]
    bm = rows[("bm25", "nevir")]
    assert (bm["results"], bm["queries"], bm["offline_s"], bm["online_s"], bm["total_s"], bm["qps"]) == (2, 20, 2.5, 1.0, 3.5, 20.0)
    assert (bm["llm_calls"], bm["usd"], bm["usd_known"], bm["usd_unknown_calls"]) == (0, 0.0, 0.0, 0)
    nev = rows[("hyde", "nevir")]
    assert (nev["offline_s"], nev["online_s"], nev["cpu_s"]) == (4.0, 2.0, 6.25)  # fit + index; + evaluate in cpu
    assert (nev["llm_calls"], nev["cache_hits"], nev["billed_calls"]) == (3, 1, 2)
    assert (nev["billed_prompt_tokens"], nev["billed_completion_tokens"]) == (2000, 400)
    assert (nev["cached_prompt_tokens"], nev["cached_completion_tokens"]) == (1000, 200)
    assert (nev["prompt_tokens"], nev["completion_tokens"], nev["tokens_k"]) == (3000, 600, 3.6)
    assert nev["usd"] == pytest.approx(2 * MINI) and nev["usd_unknown_calls"] == 0
    neg = rows[("hyde", "negconstraint")]
    assert (neg["llm_calls"], neg["cache_hits"], neg["billed_calls"]) == (3, 1, 2)
    assert (neg["billed_prompt_tokens"], neg["cached_prompt_tokens"]) == (2500, 500)
    assert neg["usd"] is None  # one billed call of a model without a price: unknown, not $0.00054
    assert neg["usd_known"] == pytest.approx(2 * MINI) and neg["usd_unknown_calls"] == 1
    assert neg["unpriced_models"] == "mystery-llm"

    assert set(a.subtotals) == {"hyde"}  # bm25 has a single benchmark row
    sub = a.subtotals["hyde"]
    assert (sub["results"], sub["llm_calls"], sub["cache_hits"], sub["billed_calls"]) == (2, 6, 2, 4)
    assert (sub["offline_s"], sub["online_s"], sub["usd"]) == (9.0, 6.0, None)
    assert sub["usd_known"] == pytest.approx(4 * MINI)
    tot = a.total
    assert (tot["results"], tot["queries"], tot["offline_s"], tot["online_s"], tot["llm_calls"]) == (4, 50, 11.5, 7.0, 6)
    assert tot["usd"] is None and tot["usd_known"] == pytest.approx(4 * MINI) and tot["usd_unknown_calls"] == 1


def test_group_by_retriever_benchmark_and_model() -> None:
    recs = usage_records()
    by_r = by_key(A.group(recs, "retriever").rows, "retriever")
    assert by_r[("hyde",)]["benchmark"] == "*" and by_r[("hyde",)]["billed_calls"] == 4
    assert by_r[("bm25",)]["results"] == 2 and by_r[("bm25",)]["usd"] == 0.0
    by_b = by_key(A.group(recs, "benchmark").rows, "benchmark")
    assert by_b[("nevir",)]["results"] == 3 and by_b[("nevir",)]["online_s"] == 3.0
    assert by_b[("nevir",)]["usd"] == pytest.approx(2 * MINI) and by_b[("negconstraint",)]["usd"] is None

    m = A.group(recs, "model")
    rows = by_key(m.rows, "model")
    assert list(rows) == [("gpt-4o-mini",), ("mystery-llm",)]
    mini = rows[("gpt-4o-mini",)]
    assert (mini["results"], mini["llm_calls"], mini["cache_hits"], mini["billed_calls"]) == (2, 4, 1, 3)
    assert mini["usd"] == pytest.approx(4 * MINI) and mini["latency_s"] == 1.5
    assert "online_s" not in mini and "offline_s" not in mini  # no time split between models
    myst = rows[("mystery-llm",)]
    assert (myst["llm_calls"], myst["cache_hits"], myst["billed_calls"], myst["usd"], myst["usd_known"]) == (2, 1, 1, None, 0.0)
    assert T.usd_text(myst) == "unknown" and T.usd_text(mini) == "$0.0011"
    assert (m.total["results"], m.total["llm_calls"], m.total["usd"]) == (2, 6, None)
    assert T.usd_text(m.total) == "≥ $0.0011"
    with pytest.raises(ValueError, match="--by"):
        A.group(recs, "seed")


def test_paper_rows() -> None:
    settings = ["nevir", "negconstraint", "excluir"]
    rows = A.paper_rows(usage_records(), settings)
    assert [r["method"] for r in rows] == ["bm25", "hyde"]
    bm25, hyde = rows
    # bm25: two seeds on nevir (0.5 + 1 s and 1.5 + 0.5 s... means 1.75 s), nothing elsewhere
    assert bm25["settings"]["nevir"]["time_s"] == 1.75 and bm25["settings"]["nevir"]["results"] == 2
    assert bm25["settings"]["excluir"] == {"time_s": None, "usd": None, "usd_known": 0.0, "tokens_k": None,
                                           "results": 0, "cold_basis": "", "missing": "not run"}
    assert bm25["time_s"] is None and bm25["time_s_known"] == 1.75 and bm25["missing"] == ["negconstraint", "excluir"]
    neg = hyde["settings"]["negconstraint"]
    assert (neg["time_s"], neg["usd"], neg["usd_known"], neg["tokens_k"]) == (9.0, None, pytest.approx(2 * MINI), 3.6)
    assert hyde["usd"] is None and hyde["usd_known"] == pytest.approx(4 * MINI) and hyde["tokens_k"] == 7.2
    sliced = A.paper_rows([rec("deo", "nevir[:25]", JAN, phases(index=1.0, search=1.0, queries=25))], settings)
    assert sliced[0]["settings"]["nevir"]["missing"] == "only a query slice run (nevir[:25])"


def test_calls_without_usage_make_token_and_dollar_sums_unknown() -> None:
    recs = usage_records() + [
        rec("hyde", "nevir", FEB, phases(search=1.0, queries=10),
            [call("gpt-4o-mini", None, None, usd=None), call("gpt-4o-mini", 1000, None, usd=None),
             call("gpt-4o-mini", None, None, cached=True)], seed=1)]
    a = A.group(recs, "pair")
    nev = by_key(a.rows, "retriever", "benchmark")[("hyde", "nevir")]
    # known before: 2 billed calls of 1000 + 200 tokens, 1 cached (3.6K); now 2 more billed (1000 known), 1 cached
    assert (nev["billed_calls"], nev["cache_hits"], nev["usage_unknown_calls"]) == (4, 2, 3)
    assert (nev["billed_prompt_tokens"], nev["billed_prompt_tokens_known"]) == (None, 3000)  # not 3000
    assert (nev["billed_completion_tokens"], nev["billed_completion_tokens_known"]) == (None, 400)
    assert (nev["cached_prompt_tokens"], nev["cached_prompt_tokens_known"]) == (None, 1000)
    assert (nev["prompt_tokens"], nev["tokens_k"], nev["tokens_k_known"]) == (None, None, 4.6)
    assert nev["usd"] is None and nev["usd_known"] == pytest.approx(2 * MINI) and nev["usd_unknown_calls"] == 2
    assert nev["unpriced_models"] == ""  # the price is known; the tokens are not
    assert T.usd_text(nev) == "≥ $0.0005" and T.partial_text(nev, "billed_prompt_tokens") == "≥ 3,000"
    assert a.total["tokens_k"] is None and a.total["usage_unknown_calls"] == 3
    model = by_key(A.group(recs, "model").rows, "model")[("gpt-4o-mini",)]
    assert (model["billed_prompt_tokens"], model["usd"]) == (None, None)
    paper = {r["method"]: r for r in A.paper_rows(recs, ["nevir"])}["hyde"]["settings"]["nevir"]
    assert (paper["tokens_k"], paper["tokens_k_known"], paper["usd"]) == (None, 2.3, None)  # mean of its 2 results

    out = io.StringIO()
    Console(file=out, width=250).print(T.audit_table(a, "t"))
    cells = table_rows(out.getvalue())["hyde nevir"]
    assert cells[10:] == ["≥ 3,000", "≥ 400", "≥ 1,200", "≥ $0.0005"]
    row = next(r for r in csv.DictReader(io.StringIO(T.to_csv(a.rows))) if r["benchmark"] == "nevir" and r["retriever"] == "hyde")
    assert (row["billed_prompt_tokens"], row["billed_prompt_tokens_known"], row["usd"]) == ("", "3000", "")
    assert json.loads(T.to_json(a.rows))[2]["billed_prompt_tokens"] is None
    # a figure that is not a number is null in the JSON, which a strict reader accepts
    strict = T.to_json([{"a": math.nan, "b": (math.inf, -math.inf, 1.5)}, {"c": {"d": math.nan}}])
    assert json.loads(strict, parse_constant=lambda c: pytest.fail(f"non-JSON token {c}")) == [
        {"a": None, "b": [None, None, 1.5]}, {"c": {"d": None}}]

    # projected: the tokens and $ of what reported no usage stay unknown
    p = A.project(recs, ["negconstraint"], INFOS, {"gpt-4o-mini": Price(0.15, 0.60)})
    h = by_key(p.rows, "retriever", "benchmark")[("hyde", "negconstraint")]
    assert (h["prompt_tokens"], h["tokens_k"], h["usd"]) == (None, None, None)
    assert h["tokens_k_known"] > 0 and h["usd_known"] > 0 and h["usage_unknown_calls"] > 0
    assert T.partial_text(h, "tokens_k", 1).startswith("≥ ")
    rate = {r["retriever"]: r for r in p.rates}["hyde"]
    assert rate["tokens_per_query"] is None and rate["calls_without_usage"] == 3
    assert any("3 recorded LLM calls reported no token counts" in n for n in T.projection_notes(p))


def test_unfinished_runs_come_from_the_journal_and_are_counted_once(tmp_path: Path) -> None:
    j = CallJournal(cache_file(tmp_path))
    done, stopped = RunTag.new(label="hyde", retriever="hyde", benchmark="nevir", seed=0), \
        RunTag.new(label="hyde", retriever="hyde", benchmark="nevir", seed=1)
    j.record(LLMCall("gpt-4o-mini", 1000, 200, 0.5, False, MINI, phase="search"), done)
    for pt in (1000, None):
        j.record(LLMCall("gpt-4o-mini", pt, None if pt is None else 200, 0.5, False, None if pt is None else MINI,
                         phase="search"), stopped)
    j.record(LLMCall("mystery-llm", 5, 1, 0.1, False, None, purpose="ping"))  # outside any run
    j.close()
    stored = rec("hyde", "nevir", JAN, phases(search=1.0, queries=10), [call("gpt-4o-mini", 1000, 200, usd=MINI)])
    stored.extra = {"llm_run": done.run_id}  # the run that produced it: its journaled call is in the result
    runs = A.unfinished_runs(tmp_path, [stored])
    assert sorted((r.status, r.label, len(r.llm_calls)) for r in runs) == [("outside a run", "", 1),
                                                                           ("unfinished run", "hyde", 2)]
    a = A.group([stored, *runs], "pair")
    rows = {(r["retriever"], r["benchmark"], r["status"]): r for r in a.rows}
    assert set(rows) == {("", "", "outside a run"), ("hyde", "nevir", "stored"), ("hyde", "nevir", "unfinished run")}
    un = rows[("hyde", "nevir", "unfinished run")]
    assert (un["results"], un["unfinished_runs"], un["billed_calls"], un["billed_prompt_tokens_known"]) == (0, 1, 2, 1000)
    assert un["usd"] is None and un["usd_known"] == pytest.approx(MINI)
    assert rows[("hyde", "nevir", "stored")]["billed_calls"] == 1
    assert (a.total["billed_calls"], a.total["results"], a.total["unfinished_runs"]) == (4, 1, 2)
    assert a.subtotals["hyde"]["billed_calls"] == 3
    model = A.group([stored, *runs], "model")
    assert {r["model"]: r["billed_calls"] for r in model.rows} == {"gpt-4o-mini": 3, "mystery-llm": 1}
    # filters: benchmark, retriever, time
    assert [r.status for r in A.unfinished_runs(tmp_path, [stored], benchmark="nevir")] == ["unfinished run"]
    assert A.unfinished_runs(tmp_path, [stored], retriever="bm25") == []
    assert A.unfinished_runs(tmp_path, [stored], since=A.parse_since("2999-01-01")) == []
    assert len(A.unfinished_runs(tmp_path, [])) == 3  # without its stored result, the finished run is listed too
    assert A.unfinished_runs(tmp_path / "elsewhere", []) == []  # no journal: nothing


def test_since_parsing_and_filter() -> None:
    now = dt.datetime(2026, 2, 5, 12, 0, tzinfo=dt.timezone.utc)
    assert A.parse_since("7d", now) == dt.datetime(2026, 1, 29, 12, 0, tzinfo=dt.timezone.utc)
    assert A.parse_since("12h", now) == dt.datetime(2026, 2, 5, 0, 0, tzinfo=dt.timezone.utc)
    assert A.parse_since("2w", now) == now - dt.timedelta(days=14)
    assert A.parse_since("2026-02-01") == dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    assert A.parse_since("2026-02-01T14:00+02:00") == dt.datetime(2026, 2, 1, 12, 0, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError, match="ISO date"):
        A.parse_since("last tuesday")
    recs = usage_records()
    assert len(A.select(recs, None)) == 4
    feb = A.select(recs, A.parse_since("2026-02-01T12:00:00Z"))  # at or after
    assert sorted((r.label, r.benchmark) for r in feb) == [("bm25", "nevir"), ("hyde", "negconstraint")]
    assert A.select(recs, A.parse_since("7d", now)) == feb
    assert A.select(recs, A.parse_since("2026-02-01T12:00:01")) == []
    assert A.select([rec("x", "b", "", phases())], A.parse_since("2000-01-01")) == []  # no date: not "since"
    t = A.group(feb, "pair").total
    assert (t["results"], t["llm_calls"], t["usd"], t["usd_known"]) == (2, 3, None, pytest.approx(2 * MINI))


# -- projection --------------------------------------------------------------------------------------

PRICES = {"test-llm": Price(1.0, 2.0)}  # 500 prompt + 250 completion tokens = $0.001


def projection_records() -> list[ResultRecord]:
    hyde_calls = [call("test-llm", 500, 250, usd=0.001) for _ in range(5)] + \
                 [call("test-llm", 500, 250, cached=True) for _ in range(5)]
    return [
        # 10 queries at 0.2 s and 1 call ($0.001 at current prices, cached or not) per query; 100 docs in 30 s
        rec("hyde", "nevir", JAN, phases(index=30.0, docs=100, search=2.0, queries=10), hyde_calls),
        # a 5-query slice of nevir: same corpus, so its offline time counts for nevir
        rec("bm25", "nevir[:5]", JAN, phases(index=2.0, docs=100, search=0.5, queries=5)),
        # no offline phase recorded; a model without a price
        rec("deo", "nevir", FEB, phases(search=1.0, queries=10),
            [call("mystery-llm", 100, 10, usd=None) for _ in range(10)]),
        # no search phase: nothing to scale per query
        rec("broken", "nevir", FEB, phases(index=1.0, docs=100)),
    ]


INFOS = [
    BenchmarkInfo("nevir", "v-nevir", "pairwise", ["PairAcc"], {"queries": 20, "judged_queries": 10, "documents": 100}),
    BenchmarkInfo("negconstraint", "v-neg", "constraint", ["R@5"], {"judged_queries": 300, "documents": 2000}),
    BenchmarkInfo("toollens", "v-tl", "completeness", ["Comp@5"], {"queries": 40}),
]
DISK = {"diag/antonym": {"queries": 60, "judged_queries": 50, "documents": 40}}


def test_projection_arithmetic() -> None:
    targets = ["nevir", "negconstraint", "excluir", "diag/antonym"]
    p = A.project(projection_records(), targets, INFOS, PRICES, fallback=DISK.get)
    rates = {r["retriever"]: r for r in p.rates}
    assert rates["hyde"]["online_s_per_query"] == 0.2 and rates["hyde"]["llm_calls_per_query"] == 1
    assert rates["hyde"]["usd_per_query"] == pytest.approx(0.001)  # cached calls priced too: no-cache cost
    assert rates["hyde"]["tokens_per_query"] == 750 and rates["hyde"]["offline_s_per_document"] == 0.3
    assert rates["deo"]["usd_per_query"] is None and rates["deo"]["unpriced_models"] == "mystery-llm"

    rows = by_key(p.rows, "retriever", "benchmark")
    neg = rows[("hyde", "negconstraint")]  # 300 queries × 0.2 s, × $0.001; offline 0.3 s/doc × 2000 docs
    assert (neg["queries"], neg["documents"], neg["counts_from"]) == (300, 2000, "store")
    assert neg["online_s"] == pytest.approx(60.0) and neg["usd"] == pytest.approx(0.30)
    assert neg["offline_s"] == pytest.approx(600.0) and neg["total_s"] == pytest.approx(660.0)
    assert neg["llm_calls"] == 300 and neg["tokens_k"] == 225.0
    assert neg["offline_basis"] == "0.3 s/document × 2,000 documents"
    nev = rows[("hyde", "nevir")]  # the judged queries, offline as measured there
    assert (nev["queries"], nev["online_s"], nev["offline_s"], nev["total_s"]) == (10, 2.0, 30.0, 32.0)
    assert nev["usd"] == pytest.approx(0.01) and nev["offline_basis"] == "measured on nevir (1 result)"
    ant = rows[("hyde", "diag/antonym")]  # counted from disk (the registry fallback)
    assert (ant["counts_from"], ant["online_s"], ant["offline_s"]) == ("registry", 10.0, 12.0)
    assert ant["usd"] == pytest.approx(0.05)
    tot = {t["retriever"]: t for t in p.totals}["hyde"]
    assert tot["benchmark"] == "total (3 of 4)" and tot["queries"] == 360
    assert (tot["online_s"], tot["offline_s"], tot["total_s"]) == (72.0, 642.0, 714.0)
    assert tot["usd"] == pytest.approx(0.36) and tot["llm_calls"] == 360

    bm = rows[("bm25", "negconstraint")]  # 0.1 s/query; 2 s per 100 docs
    assert (bm["online_s"], bm["offline_s"], bm["usd"], bm["llm_calls"]) == (30.0, 40.0, 0.0, 0)
    assert rows[("bm25", "nevir")]["offline_basis"] == "measured on nevir (1 result)"

    deo = rows[("deo", "negconstraint")]
    assert deo["online_s"] == 30.0 and deo["offline_s"] is None and deo["total_s"] is None
    assert deo["offline_basis"] == "unmeasured (no offline phase measured)"
    assert deo["usd"] is None and deo["usd_known"] == 0.0 and deo["usd_unknown_calls"] == 300
    assert T.usd_text(deo) == "unknown"
    dtot = {t["retriever"]: t for t in p.totals}["deo"]
    assert (dtot["offline_s"], dtot["total_s"], dtot["usd"]) == (None, None, None)

    assert {("excluir", "benchmark")} == {(x.get("benchmark"), "benchmark") for x in p.not_projected if "benchmark" in x}
    assert [x["retriever"] for x in p.not_projected if "retriever" in x] == ["broken"]
    notes = T.projection_notes(p)
    assert ("hyde: per-query rates from 10 queries (nevir: 10); offline seconds measured on nevir (1 result); "
            "per-document offline rate from 100 indexed documents") in notes
    assert rates["bm25"]["measured_on"] == {"nevir[:5]": 5} and rates["bm25"]["offline_measured_on"] == {"nevir": 1}
    assert "deo: per-query rates from 10 queries (nevir: 10); no offline seconds measured" in notes
    assert any(n.startswith("not projected: benchmark excluir: not in the results store") for n in notes)
    assert "query and document counts from the results store: nevir, negconstraint" in notes
    assert "query and document counts from the benchmark files on disk: diag/antonym" in notes
    assert any("no price for model(s) mystery-llm" in n for n in notes)


def test_projection_unknown_corpus_size_and_offline_llm() -> None:
    off_llm = rec("expand", "nevir", JAN, phases(index=10.0, docs=100, search=1.0, queries=10),
                  [call("test-llm", 500, 250, usd=0.001, phase="index")])
    p = A.project(projection_records() + [off_llm], ["toollens"], INFOS, PRICES)
    rows = by_key(p.rows, "retriever", "benchmark")
    h = rows[("hyde", "toollens")]  # 40 queries (no judged count stored), corpus size unknown
    assert (h["queries"], h["documents"], h["online_s"], h["offline_s"], h["total_s"]) == (40, None, 8.0, None, None)
    assert h["offline_basis"] == "unmeasured (corpus size unknown)" and h["usd"] == pytest.approx(0.04)
    e = rows[("expand", "toollens")]  # offline LLM calls whose amount cannot be scaled: $ unknown
    assert e["usd"] is None and e["usd_known"] == 0.0 and T.usd_text(e) == "unknown"
    p2 = A.project([off_llm], ["negconstraint"], INFOS, PRICES)
    e2 = p2.rows[0]  # per document: 1 call per 100 docs → 20 calls on 2000 docs, $0.02
    assert (e2["offline_s"], e2["llm_calls"], e2["usd"]) == (200.0, 20.0, pytest.approx(0.02))
    def never(name: str) -> None:
        raise AssertionError("no benchmark is counted when no result can be scaled")

    empty = A.project([rec("broken", "nevir", FEB, phases(index=1.0, docs=100))], ["excluir"], [], PRICES, never)
    assert empty.rows == [] and empty.not_projected == [
        {"benchmark": "excluir", "reason": "no selected result has a measured search phase"}]
    c = A.benchmark_counts("nevir", INFOS + [BenchmarkInfo("nevir", "v-old", "pairwise", [], {"judged_queries": 7})],
                           projection_records())
    assert (c.queries, c.source) == (10, "store")  # the version of the latest result


# -- the command line --------------------------------------------------------------------------------

def table_rows(text: str) -> dict[str, list[str]]:
    """First cell → cells of each body row of a rich table (box-drawing separators)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "│" in line:
            cells = [c.strip() for c in line.strip().strip("│").split("│")]
            out.setdefault(" ".join(cells[:2]).strip(), cells)
    return out


def test_cli_formats_agree(usage_home: Path) -> None:
    res = invoke("audit", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert rows == A.group(usage_records(), "pair").rows
    res = invoke("audit", "--format", "csv")
    assert res.exit_code == 0
    parsed = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(parsed) == len(rows)
    for c, j in zip(parsed, rows):
        assert c.keys() == j.keys()
        assert all(c[k] == ("" if v is None else str(v)) for k, v in j.items())
    res = invoke("audit")
    assert res.exit_code == 0
    t = table_rows(res.stdout)
    neg = t["hyde negconstraint"]
    assert neg[2:] == ["1", "5.00", "4.00", "9.00", "5.00", "3", "1", "2", "2,500", "500", "600", "≥ $0.0005"]
    assert t["hyde all benchmarks"][-1] == "≥ $0.0011" and t["hyde all benchmarks"][7:10] == ["6", "2", "4"]
    assert t["total"][2:5] == ["4", "11.50", "7.00"] and t["total"][-1] == "≥ $0.0011"
    assert t["bm25 nevir"][-1] == "$0"
    assert "no price was known for model(s) mystery-llm" in res.stderr


def test_cli_by_filters_since_and_paper(usage_home: Path) -> None:
    rows = json.loads(invoke("audit", "--by", "model", "-f", "json").stdout)
    assert [(r["model"], r["billed_calls"], r["usd"]) for r in rows] == \
        [("gpt-4o-mini", 3, pytest.approx(4 * MINI)), ("mystery-llm", 1, None)]
    t = table_rows(invoke("audit", "--by", "model").stdout)
    assert t["mystery-llm 1"][-1] == "unknown" and t["total 2"][-1] == "≥ $0.0011"
    rows = json.loads(invoke("audit", "--by", "retriever", "-r", "hyde", "-f", "json").stdout)
    assert [(r["retriever"], r["benchmark"], r["llm_calls"], r["usd"]) for r in rows] == [("hyde", "*", 6, None)]
    rows = list(csv.DictReader(io.StringIO(invoke("audit", "--by", "benchmark", "-b", "nevir", "-f", "csv").stdout)))
    assert [(r["benchmark"], r["results"], r["usd_unknown_calls"]) for r in rows] == [("nevir", "3", "0")]
    rows = json.loads(invoke("audit", "--since", "2026-02-01T12:00:00+00:00", "-f", "json").stdout)
    assert sorted((r["retriever"], r["benchmark"]) for r in rows) == [("bm25", "nevir"), ("hyde", "negconstraint")]
    res = invoke("audit", "--since", "2026-02-01T12:00:00+00:00")
    assert "since 2026-02-01T12:00:00+00:00" in res.stdout
    paper = json.loads(invoke("audit", "--view", "paper", "-f", "json").stdout)
    six = ["nevir", "excluir", "negconstraint", "diag/antonym", "diag/negation", "diag/exclusion"]
    assert paper == json.loads(json.dumps(A.paper_rows(usage_records(), six)))
    assert [r["method"] for r in paper] == ["bm25", "hyde"] and list(paper[1]["settings"]) == six
    t = table_rows(invoke("audit", "--view", "paper").stdout)
    assert t["hyde 6.00 s · $0.0005 · 3.6K"][3] == "9.00 s · ≥ $0.0005 · 3.6K" and t["hyde 6.00 s · $0.0005 · 3.6K"][2] == "not run"
    flat = list(csv.DictReader(io.StringIO(invoke("audit", "--view", "paper", "-f", "csv").stdout)))
    assert [(r["method"], r["setting"], r["time_s"]) for r in flat if r["method"] == "hyde" and r["time_s"]] == [
        ("hyde", "nevir", "6.0"), ("hyde", "negconstraint", "9.0")]
    for bad, msg in ((["--by", "seed"], "--by must be"), (["--format", "xml"], "--format"),
                     (["--since", "soon"], "ISO date"), (["--view", "paper", "--by", "model"], "--view paper"),
                     (["--project", "constraint", "--by", "model"], "--project does not combine"),
                     (["--project", "no-such-suite"], "neither a suite")):
        res = invoke("audit", *bad)
        assert res.exit_code == 2 and msg in res.output, (bad, res.output)


def test_cli_since_relative(home: Path) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    with Store(home / "results.sqlite") as store:
        for days, label in ((1, "recent"), (30, "old")):
            store.save(rec(label, "nevir", (now - dt.timedelta(days=days)).isoformat(timespec="seconds"),
                           phases(index=1.0, docs=10, search=1.0, queries=10)))
    rows = json.loads(invoke("audit", "--since", "7d", "-f", "json").stdout)
    assert [r["retriever"] for r in rows] == ["recent"]
    assert len(json.loads(invoke("audit", "--since", "60d", "-f", "json").stdout)) == 2


def test_cli_projection(home: Path, tmp_path: Path) -> None:
    with Store(home / "results.sqlite") as store:
        for r in projection_records():
            store.save(r)
        for i in INFOS:
            store.save_benchmark(i)
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."test-llm"]\ninput = 1.0\noutput = 2.0\n')
    empty = tmp_path / "no-data"
    empty.mkdir()
    args = ["audit", "--project", "constraint", "--prices", str(prices), "--data-dir", str(empty)]
    res = invoke(*args, "-f", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["target"] == "constraint" and d["benchmarks"][:3] == ["nevir", "excluir", "negconstraint"]
    rows = by_key(d["rows"], "retriever", "benchmark")
    assert sorted({b for _, b in rows}) == ["negconstraint", "nevir"]
    neg = rows[("hyde", "negconstraint")]
    assert (neg["online_s"], neg["offline_s"], neg["total_s"]) == (60.0, 600.0, 660.0)
    assert neg["usd"] == pytest.approx(0.30)
    assert {x["benchmark"] for x in d["not_projected"] if "benchmark" in x} == \
        {"excluir", "diag/antonym", "diag/negation", "diag/exclusion"}
    assert any("not on disk in" in n and "excluir" in n for n in d["notes"])

    res = invoke(*args, "-f", "csv")
    parsed = list(csv.DictReader(io.StringIO(res.stdout)))
    body = [r for r in parsed if r["kind"] == "benchmark"]
    assert len(body) == len(d["rows"])
    for c, j in zip(body, d["rows"]):
        assert all(c[k] == ("" if v is None else str(v)) for k, v in j.items())
    tot = {r["retriever"]: r for r in parsed if r["kind"] == "total"}
    assert tot["hyde"]["benchmark"] == "total (2 of 6)" and float(tot["hyde"]["usd"]) == pytest.approx(0.31)
    assert "not projected: benchmark excluir" in res.stderr

    res = invoke(*args)
    assert res.exit_code == 0, res.output
    t = table_rows(res.stdout)
    assert t["hyde negconstraint"][2:10] == ["300", "2,000", "60.00", "600.00", "660.00", "300.0", "225.0", "$0.3000"]
    assert t["hyde total (2 of 6)"][4:7] == ["62.00", "630.00", "692.00"] and t["hyde total (2 of 6)"][9] == "$0.3100"
    assert t["deo negconstraint"][5:7] == ["unmeasured", "unknown"] and t["deo negconstraint"][9] == "unknown"
    assert t["deo total (2 of 6)"][5:7] == ["unmeasured", "≥ 31.00"]
    assert "not projected: retriever broken" in res.stdout
    # a comma list of benchmarks; --benchmark restricts the measurements
    d = json.loads(invoke("audit", "--project", "negconstraint", "-b", "nevir[:5]", "--prices", str(prices),
                          "-f", "json").stdout)
    assert [(r["retriever"], r["online_s"], r["offline_s"]) for r in d["rows"]] == [("bm25", 30.0, 40.0)]
