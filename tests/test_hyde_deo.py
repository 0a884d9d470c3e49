"""HyDE and DEO: the optimiser against an independent formulation, the decomposition parsing and
its fallback, and both retrievers end to end through the runner and the CLI against a local
OpenAI-compatible server (cache reruns make no request; the budget stops a run cleanly)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openai")

from fake_llm import FakeLLMServer  # noqa: E402

from harness.core.ledger import Ledger  # noqa: E402
from harness.models.llm import LLMClient, LLMSettings  # noqa: E402
from harness.protocols import RunContext  # noqa: E402
from harness.store.results import Store  # noqa: E402
from harness.types import Corpus, Query  # noqa: E402
from tests.factories import make_corpus  # noqa: E402
from retrievers.deo import DEO, DeoParams, deo_loss, optimise_embeddings, parse_decomposition  # noqa: E402
from retrievers.hyde import PROMPTS, HyDE, HydeParams, prompt_for  # noqa: E402
from tests.test_cli import invoke, make_beir  # noqa: E402


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# -- the DEO optimiser ---------------------------------------------------------------------------


def numpy_deo(e0, P, N, lp, ln, lo, lr, steps, renormalize=True, b1=0.9, b2=0.999, eps=1e-8):
    """One query, analytic gradient of the unsquared loss, Adam written out (PyTorch's form)."""
    e = e0.astype(np.float64).copy()
    m = np.zeros_like(e)
    v = np.zeros_like(e)

    def grad(e):
        g = np.zeros_like(e)
        if len(P):
            g += lp * np.mean([(e - p) / np.sqrt(((e - p) ** 2).sum() + 1e-12) for p in P], axis=0)
        if len(N):
            g -= ln * np.mean([(e - n) / np.sqrt(((e - n) ** 2).sum() + 1e-12) for n in N], axis=0)
        d = e - e0
        g += lo * d / np.sqrt((d ** 2).sum() + 1e-12)
        return g

    for t in range(1, steps + 1):
        g = grad(e)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        e = e - lr * mhat / (np.sqrt(vhat) + eps)
        if renormalize:
            e = e / np.linalg.norm(e)
    return e


@pytest.fixture
def case():
    rng = np.random.default_rng(0)
    d = 16
    e0 = unit(rng.normal(size=(3, d))).astype(np.float32)
    P = [unit(rng.normal(size=(k, d))).astype(np.float32) for k in (2, 1, 3)]
    N = [unit(rng.normal(size=(k, d))).astype(np.float32) for k in (1, 0, 2)]
    return e0, P, N


def test_optimiser_matches_an_independent_numpy_adam(case):
    e0, P, N = case
    out, _ = optimise_embeddings(e0, P, N, lambda_p=1.0, lambda_n=1.0, lambda_o=0.2, lr=0.05, steps=20)
    for i in range(3):
        ref = numpy_deo(e0[i], P[i], N[i], 1.0, 1.0, 0.2, 0.05, 20)
        np.testing.assert_allclose(out[i], ref, atol=2e-5)
    # batched = one query at a time (Adam is element-wise; the loss is summed over queries)
    alone, _ = optimise_embeddings(e0[1:2], P[1:2], N[1:2], lr=0.05, steps=20)
    np.testing.assert_allclose(out[1], alone[0], atol=1e-6)


def test_optimiser_reduces_loss_and_moves_toward_positives_away_from_negatives(case):
    e0, P, N = case
    out, hist = optimise_embeddings(e0, P, N, lr=1e-2, steps=20, lambda_o=0.0, renormalize=False)
    assert (hist[-1] < hist[0] - 1e-3).all()
    for i in range(3):
        assert (P[i] @ out[i]).mean() > (P[i] @ e0[i]).mean() + 1e-3
        if len(N[i]):
            assert (N[i] @ out[i]).mean() < (N[i] @ e0[i]).mean() - 1e-3
    # with renormalisation the result stays on the unit sphere; with 0 steps nothing moves
    out2, _ = optimise_embeddings(e0, P, N, steps=20)
    np.testing.assert_allclose(np.linalg.norm(out2, axis=1), 1.0, atol=1e-5)
    same, h0 = optimise_embeddings(e0, P, N, steps=0)
    np.testing.assert_array_equal(same, e0)
    assert len(h0) == 1


def test_squared_loss_is_the_papers_eq4():
    import torch

    E = torch.tensor([[1.0, 0.0]])
    E0 = torch.tensor([[0.0, 1.0]])
    P = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    N = torch.tensor([[[1.0, 1.0]]])
    ones = torch.ones(1, 2)
    sq = deo_loss(E, E0, P, ones, N, torch.ones(1, 1), 1.0, 1.0, 0.2, squared=True)
    # mean(1, 1) - 1 + 0.2 * 2
    assert float(sq) == pytest.approx(1.0 - 1.0 + 0.4)
    un = deo_loss(E, E0, P, ones, N, torch.ones(1, 1), 1.0, 1.0, 0.2, squared=False)
    assert float(un) == pytest.approx(1.0 - 1.0 + 0.2 * np.sqrt(2), abs=1e-5)
    # a query with no negatives has no repulsion term
    none = deo_loss(E, E0, P, ones, N, torch.zeros(1, 1), 1.0, 1.0, 0.0)
    assert float(none) == pytest.approx(1.0)


@pytest.mark.parametrize("reply,expected", [
    ('{"positives": ["red wine regions"], "negatives": ["France"]}', (("red wine regions",), ("France",))),
    ('```json\n{"Positive": ["cats"], "negative": []}\n```', (("cats",), ())),
    ('{"positives": [["red wines", "wine regions"]], "negatives": "France"}', (("red wines", "wine regions"), ("France",))),
    # the query itself is never a positive, leakage is removed from the positives; none left → [query]
    ('{"positives": ["Wines not from France.", "France"], "negatives": ["France"]}', (("wines not from France",), ("France",))),
    ('{"positives": ["wines", "France"], "negatives": ["France"]}', (("wines",), ("France",))),
])
def test_parse_decomposition(reply, expected):
    d = parse_decomposition("wines not from France", reply)
    assert d is not None
    assert (d.positives, d.negatives) == expected


@pytest.mark.parametrize("reply", ["no json", '{"positives": "a string"}', '{"negatives": ["x"]}',
                                   '{"positives": [1, 2]}'])
def test_parse_decomposition_rejects(reply):
    assert parse_decomposition("q", reply) is None


# -- retrievers against a local server -----------------------------------------------------------


DOCS = {
    "d1": "Red wines from Bordeaux in France are blended from Merlot and Cabernet.",
    "d2": "Italian red wines such as Chianti come from Tuscany.",
    "d3": "Spanish Rioja is a red wine made mostly from Tempranillo grapes.",
    "d4": "The French Alps are popular for skiing in winter.",
    "d5": "Beer brewing uses malted barley and hops.",
}


def decomposer(body: dict) -> str:
    msgs = body["messages"]
    if msgs[0]["role"] == "system":  # a DEO decomposition request
        return json.dumps({"positives": ["red wine regions", "red wines and grapes"], "negatives": ["France", "Bordeaux"]})
    return "Red wine is made from dark grapes in many regions of Europe."  # a HyDE passage


@pytest.fixture
def server():
    s = FakeLLMServer(decomposer).start()
    yield s
    s.stop()


@pytest.fixture
def llm_ctx(ctx, server, tmp_path):
    client = LLMClient(LLMSettings(base_url=server.base_url, model="gpt-4.1-nano"), cache_path=tmp_path / "llm.sqlite")
    ctx.llm = client
    ctx.ledger = Ledger()
    yield ctx
    client.close()


def corpus() -> Corpus:
    return make_corpus(DOCS)


QUERIES = [Query("q1", "red wine not from France"), Query("q2", "red wines but not Bordeaux")]


def test_hyde_vector_is_the_mean_of_query_and_passages(llm_ctx, pool, server):
    h = HyDE(HydeParams(n=3))
    h.index(corpus(), llm_ctx)
    v = h.encode_queries(QUERIES, llm_ctx)
    q = pool.encode(h.params.model, [x.text for x in QUERIES])
    passages = [t for qid in ("q1", "q2") for t in h.last_passages[qid]]
    assert len(passages) == 6
    pe = pool.encode(h.params.model, passages)
    np.testing.assert_allclose(v[0], np.vstack([q[0:1], pe[0:3]]).mean(0), atol=1e-6)
    np.testing.assert_allclose(v[1], np.vstack([q[1:2], pe[3:6]]).mean(0), atol=1e-6)
    assert sorted(b["messages"][0]["content"] for b in server.requests) == sorted(
        PROMPTS["web search"].format(query=q.text) for q in QUERIES)
    body = server.requests[0]
    assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    assert (body["n"], body["temperature"], body["max_tokens"], body["top_p"]) == (3, 0.7, 512, 1.0)
    assert [c.purpose for c in llm_ctx.ledger.llm_calls] == ["hyde.generate"] * 2


def test_hyde_prompt_selection():
    assert prompt_for(HydeParams(), "beir/scifact") == PROMPTS["scifact"]
    assert prompt_for(HydeParams(), "nevir") == PROMPTS["web search"]
    assert prompt_for(HydeParams(task="fiqa"), "nevir") == PROMPTS["fiqa"]
    assert prompt_for(HydeParams(prompt="Q: {query}"), "beir/scifact") == "Q: {query}"
    with pytest.raises(ValueError):
        HydeParams(task="nope")


def test_deo_llm_decomposition_moves_queries_away_from_the_excluded(llm_ctx, pool, server):
    deo = DEO(DeoParams(lr=0.02))
    deo.index(corpus(), llm_ctx)
    e = deo.encode_queries(QUERIES, llm_ctx)
    e0 = pool.encode(deo.params.model, [q.text for q in QUERIES])
    neg = pool.encode(deo.params.model, ["France", "Bordeaux"])
    assert (e @ neg.T).mean() < (e0 @ neg.T).mean() - 0.01
    d = deo.last_decompositions["q1"]
    assert d.negatives == ("France", "Bordeaux") and d.source == "llm"
    assert server.count == 2 and server.requests[0]["response_format"] == {"type": "json_object"}
    assert server.requests[0]["temperature"] == 0.0
    assert llm_ctx.ledger.counters.get("deo.fallback", 0) == 0


def test_deo_reasks_then_falls_back(ctx, tmp_path):
    s = FakeLLMServer(lambda body: "I cannot answer that").start()
    try:
        s.push(("ok", "not json"), ("ok", "still not"), ("ok", '{"positives": ["x things"], "negatives": ["y"]}'))
        ctx.llm = LLMClient(LLMSettings(base_url=s.base_url, model="gpt-4.1-nano", concurrency=1), cache_path=None)
        ctx.ledger = Ledger()
        deo = DEO(DeoParams(max_reasks=2))
        decs = deo.decompose([Query("a", "x things without y"), Query("b", "other stuff")], ctx)
        # concurrency 1 answers in order: a, b (both bad); re-ask a (good), b (bad); re-ask b (bad)
        assert s.count == 5
        assert decs[0].source == "llm" and decs[0].negatives == ("y",)
        assert decs[1].source == "fallback" and decs[1].positives == ("other stuff",) and decs[1].negatives == ()
        assert ctx.ledger.counters["deo.reask"] == 3 and ctx.ledger.counters["deo.fallback"] == 1
        reask = s.requests[2]["messages"]
        assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
        assert reask[2]["content"] == "not json" and "JSON" in reask[3]["content"]
        assert len(s.requests[4]["messages"]) == 6
        ctx.llm.close()
    finally:
        s.stop()


def test_deo_rules_needs_no_llm(ctx):
    ctx.llm = None
    deo = DEO(DeoParams(decomposer="rules"))
    deo.index(corpus(), ctx)
    e = deo.encode_queries([Query("q", "red wines without France")], ctx)
    assert deo.last_decompositions["q"].source == "rules"
    assert deo.last_decompositions["q"].negatives
    assert e.shape == (1, 384)
    with pytest.raises(RuntimeError, match="deo needs an LLM"):
        DEO().decompose([Query("q", "x")], RunContext())


# -- end to end through the CLI --------------------------------------------------------------------


def test_cli_run_audit_and_zero_request_rerun(tmp_path: Path, home: Path, server):
    data = make_beir(tmp_path / "tiny")
    args = ["run", "hyde", "deo", "deo-rules", "--benchmark", str(data), "--k", "5", "--llm-base-url", server.base_url,
            "--llm-model", "gpt-4o-mini", "-p", "hyde.n=2"]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    first = server.count
    assert first > 0
    store = Store(home / "results.sqlite")
    recs = {r.retriever: store.get(r.key, full=True) for r in store.results()}
    assert set(recs) == {"hyde", "deo", "deo-rules"}
    assert recs["deo-rules"].llm_calls == []
    nq = recs["hyde"].n_queries
    assert len(recs["hyde"].llm_calls) == nq and len(recs["deo"].llm_calls) == nq
    assert all(c["phase"] == "search" and not c["cached"] for c in recs["hyde"].llm_calls)
    assert recs["hyde"].extra["llm"]["model"] == "gpt-4o-mini"

    res = invoke("audit", "--format", "json")
    rows = {r["retriever"]: r for r in json.loads(res.stdout)}
    assert rows["hyde"]["llm_calls"] == nq and rows["deo-rules"]["llm_calls"] == 0
    assert rows["hyde"]["usd"] > 0 and rows["deo-rules"]["usd"] == 0
    tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in recs["hyde"].llm_calls)
    assert rows["hyde"]["tokens_k"] == pytest.approx(tokens / 1000, abs=0.01)
    assert rows["deo-rules"]["tokens_k"] == 0 and rows["hyde"]["total_s"] > 0
    # the paper's cost table (CoDeR Table 4) has the six constraint settings as columns: a folder of
    # one's own is none of them, so no method has a row there
    assert json.loads(invoke("audit", "--view", "paper", "--format", "json").stdout) == []

    # a forced rerun is answered from the cache: no request, identical rankings, $0 new spend
    res = invoke(*args, "--force")
    assert res.exit_code == 0, res.output
    assert server.count == first
    again = {r.retriever: store.get(r.key, full=True) for r in store.results()}
    for name in ("hyde", "deo"):
        assert again[name].rankings == recs[name].rankings
        assert all(c["cached"] and c["usd"] == 0 for c in again[name].llm_calls)
        assert [c["prompt_tokens"] for c in again[name].llm_calls] == [c["prompt_tokens"] for c in recs[name].llm_calls]

    # another model is another result (the key includes the LLM), so it runs
    res = invoke("run", "deo", "--benchmark", str(data), "--k", "5", "--llm-base-url", server.base_url,
                 "--llm-model", "gpt-4.1-nano")
    assert res.exit_code == 0 and server.count > first
    store.close()


def test_cli_budget_stops_with_exit_3_and_resumes(tmp_path: Path, home: Path, server):
    data = make_beir(tmp_path / "tiny")
    base = ["run", "hyde", "--benchmark", str(data), "--k", "5", "--llm-base-url", server.base_url,
            "--llm-model", "gpt-4o-mini", "-p", "hyde.n=1", "--llm-concurrency", "1"]
    res = invoke(*base, "--max-calls", "2")
    assert res.exit_code == 3, res.output
    assert server.count == 2
    assert Store(home / "results.sqlite").results() == []
    res = invoke(*base)
    assert res.exit_code == 0, res.output
    recs = Store(home / "results.sqlite").results()
    assert len(recs) == 1
    n = recs[0].n_queries
    assert server.count == n  # the first two answers came from the cache
    full = Store(home / "results.sqlite").get(recs[0].key, full=True)
    assert sum(c["cached"] for c in full.llm_calls) == 2


def test_max_usd_with_unknown_price_is_refused(tmp_path: Path, home: Path, server):
    data = make_beir(tmp_path / "tiny")
    res = invoke("run", "hyde", "--benchmark", str(data), "--llm-base-url", server.base_url, "--llm-model", "mystery",
                 "--max-usd", "1")
    assert res.exit_code == 2
    assert "unknown" in res.output and server.count == 0


def test_deo_sends_a_bounding_schema_only_where_asked(llm_ctx, server):
    DEO(DeoParams(json_schema="on")).decompose([Query("a", "wine without France")], llm_ctx)
    fmt = server.requests[-1]["response_format"]
    assert fmt["type"] == "json_object"
    assert fmt["schema"]["properties"]["positives"]["maxItems"] == 3
    # "auto" sends it to the embedded llama.cpp server only; this client has a base URL
    DEO(DeoParams()).decompose([Query("b", "beer without hops")], llm_ctx)
    assert server.requests[-1]["response_format"] == {"type": "json_object"}


def test_compare_decomposers_counts_agreement(llm_ctx):
    from retrievers.decompose import agreement, rules_decompose
    from retrievers.deo import compare_decomposers

    qs = [Query("a", "red wines without France"), Query("b", "red wine regions of Europe")]
    res = compare_decomposers(qs, llm_ctx)
    s = res["summary"]
    assert s["n"] == 2 and s["llm_fallbacks"] == 0
    # the fake LLM always excludes France and Bordeaux; the rules find "France" only in query a
    a, b = res["queries"]
    assert a["rules"]["negatives"] == ["France"] and b["rules"]["negatives"] == []
    assert a["detect"] and not b["detect"]
    assert s["detect_rate"] == 0.5
    llm_a = parse_decomposition(qs[0].text, decomposer({"messages": [{"role": "system", "content": ""}]}))
    assert a["agree"] == agreement(rules_decompose(qs[0].text), llm_a)["agree"]


def test_scoring_pair_documents_after_search_asks_the_llm_nothing_more(llm_ctx, server):
    """PairAcc scores pair documents with the embedding the search ranked with: no second round of
    LLM requests, no cache hits in the ledger, and the scores of the ranking."""
    h = HyDE(HydeParams(n=2))
    h.index(corpus(), llm_ctx)
    run = h.search(QUERIES, 4, llm_ctx)
    calls, requests = len(llm_ctx.ledger.llm_calls), server.count
    direct = h.score(QUERIES, {q.id: [d for d, _ in run[q.id]] for q in QUERIES}, llm_ctx)
    assert (len(llm_ctx.ledger.llm_calls), server.count) == (calls, requests)
    for q in QUERIES:
        assert direct[q.id] == pytest.approx(dict(run[q.id]), abs=1e-5)


def test_the_nnn_family_does_not_score_as_dense():
    """Sparse decoding and MMR rank differently from an inner product, so they do not inherit
    dense's ``score``: PairAcc falls back to their own full ranking."""
    from harness.protocols import Scorer
    from retrievers.dense import DenseRetriever
    from retrievers.nnn import MMR, NNNFix

    assert isinstance(DenseRetriever(), Scorer) and isinstance(HyDE(), Scorer)
    assert not isinstance(NNNFix(), Scorer) and not isinstance(MMR(), Scorer)
