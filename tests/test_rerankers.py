"""The registered methods as rerankers of a frozen pool (``rerank(queries, candidates, ctx)``,
docs/design/pools.md): each on small real cases against an independent formulation written here
with numpy (or, for the cross-encoder and NS-IR, the scores computed the way their own tests check
them), and each ranking checked to name only the query's candidates, once each, with finite
non-increasing scores, and to be empty for a query without candidates.

* ``dense`` (and ``deo-rules`` / ``deo`` through their ``encode_queries``): the cosine order of the
  candidates, the same as ``search`` over the corpus restricted to the pool;
* ``coder-seq``: on the ``dense`` top 100 it is exactly its own ``search`` (ids, order, scores), and
  ``coder-union`` is its policy over the pool;
* ``mmr``: the greedy selection over the pool, written out;
* ``nsir`` and ``rerank``: the pool's top N rescored, the rest in pool order, the first stage never
  indexed nor searched."""

from __future__ import annotations

import json
import math
from typing import Mapping, Sequence

import numpy as np
import pytest

from harness.core.ledger import Ledger
from harness.models.resolve import DEFAULT_ENCODER
from harness.protocols import Reranker, RunContext
from harness.types import Candidate, Corpus, Document, Query, Run
from tests.factories import make_corpus
from tests.test_rerank import cross_encoder_dir, direct_scores  # noqa: F401 - the module's cross-encoder fixture
from retrievers.coder import CoderSeq, CoderSeqParams, CoderUnion, CoderUnionParams
from retrievers.deo import DEO, DeoParams, DEORules
from retrievers.dense import DenseRetriever, PooledDenseParams, follow_below
from retrievers.nnn import MMR, MMRParams
from retrievers.rerank import Rerank, RerankParams

DOCS = [
    "The cat sat on the mat with another cat.",
    "Dogs and cats are not the same animals.",
    "A dog barked at the mailman all morning long.",
    "Cats purr; dogs bark; birds sing in the morning.",
    "Nothing here matches anything at all.",
    "Group a pandas dataframe by a column and sum.",
    "Reshape a numpy array into a matrix.",
    "Plot a histogram with matplotlib.",
    "Read a CSV file into a pandas dataframe.",
    "Compute the mean of a numpy array.",
    "Red wines from Bordeaux in France are blended from Merlot.",
    "Spanish Rioja is a red wine that is not made in France.",
]
QUERIES = [
    Query("pets", "a cat on a mat and a barking dog"),
    Query("numpy", "reshape a numpy array and plot a histogram of it"),
    Query("wine", "red wine not from France"),
    Query("none", "a query whose pool is empty"),
]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus(DOCS)


def pool_of(corpus: Corpus, ids: Mapping[str, Sequence[str]]) -> dict[str, list[Candidate]]:
    """Candidates in the given order, with made-up first-stage scores (decreasing: 10, 9, …)."""
    return {q: [Candidate(corpus.get(d), 10.0 - i) for i, d in enumerate(ds)] for q, ds in ids.items()}


# pools in an order no encoder gives (so "pool order" and "cosine order" differ), of different sizes;
# "none" has an empty pool and a query may be missing from the mapping altogether
POOL = {"pets": ["d9", "d3", "d0", "d1", "d5", "d2"],
        "numpy": ["d0", "d9", "d6", "d7", "d8", "d5", "d4"],
        "wine": ["d4", "d11", "d2", "d10", "d1", "d8"],
        "none": []}


def check_reranking(run: Run | Mapping, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
                    corpus: Corpus, *, complete: bool = True) -> Run:
    """What every reranker owes the runner: a ranking per query naming only its candidates, each
    once, finite non-increasing scores; an empty one without candidates; with ``complete`` every
    candidate is ranked."""
    run = Run(run).validate(corpus)
    assert set(run) == {q.id for q in queries}
    for q in queries:
        pool = [c.id for c in candidates.get(q.id, ())]
        got = [d for d, _ in run[q.id]]
        assert set(got) <= set(pool), q.id
        assert len(got) == len(set(got))
        assert all(math.isfinite(s) for _, s in run[q.id])
        if not pool:
            assert run[q.id] == []
        elif complete:
            assert sorted(got) == sorted(set(pool)), q.id
    return run


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def by_hand(pool, texts: Sequence[str], queries: Sequence[Query], model: str = DEFAULT_ENCODER,
            query_prefix: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Unit-length embeddings of the texts and the queries under ``model``, normalised here."""
    return (unit(pool.encode(model, list(texts), normalize=False)),
            unit(pool.encode(model, [query_prefix + q.text for q in queries], normalize=False)))


def cosine_order(ids: Sequence[str], scores: np.ndarray) -> list[str]:
    """``ids`` by score descending, ties in their order (written with Python's stable sort)."""
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: -scores[i])]


def assert_no_near_ties(scores: np.ndarray, gap: float = 1e-5) -> None:
    s = np.sort(np.asarray(scores))[::-1]
    assert np.all(np.diff(s) < -gap), "near-tied scores: the expected order would not be meaningful"


# --- dense and its subclasses --------------------------------------------------------------------


def test_dense_rerank_is_the_cosine_order_of_the_candidates(corpus: Corpus, ctx: RunContext, pool) -> None:
    r = DenseRetriever()
    r.index(corpus, ctx)
    cands = pool_of(corpus, POOL)
    queries = QUERIES + [Query("absent", "a query the mapping does not name")]
    run = check_reranking(r.rerank(queries, cands, ctx), queries, cands, corpus)
    assert isinstance(r, Reranker) and run["absent"] == []
    D, Q = by_hand(pool, corpus.texts(), queries)
    for i, q in enumerate(queries[:3]):
        ids = POOL[q.id]
        cos = D[[corpus.row(d) for d in ids]] @ Q[i]
        assert_no_near_ties(cos)
        assert [d for d, _ in run[q.id]] == cosine_order(ids, cos)
        np.testing.assert_allclose([s for _, s in run[q.id]], np.sort(cos)[::-1], atol=1e-5)
    # search restricted to the pool: the corpus ranking with the other documents left out
    full = r.search(queries[:3], len(corpus), ctx)
    for q in queries[:3]:
        assert [d for d, _ in run[q.id]] == [d for d, _ in full[q.id] if d in POOL[q.id]]
    # score (PairAcc) gives rerank's scores, with the embeddings rerank kept
    scored = r.score(queries[:1], {"pets": POOL["pets"][:2]}, ctx)
    assert scored["pets"] == pytest.approx({d: s for d, s in run["pets"] if d in POOL["pets"][:2]}, abs=1e-6)


def test_dense_rerank_ties_keep_the_pool_order_and_repeats_count_once(corpus: Corpus, ctx: RunContext) -> None:
    twin = Corpus([*corpus, *(Document(f"twin{i}", corpus[0].text) for i in range(2))])  # same text: a tie
    r = DenseRetriever()
    r.index(twin, ctx)
    order = ["twin1", "d0", "d4", "twin0", "d0"]
    cands = {"pets": [Candidate(twin.get(d), 0.0) for d in order]}
    run = check_reranking(r.rerank(QUERIES[:1], cands, ctx), QUERIES[:1], cands, twin)
    got = [d for d, _ in run["pets"]]
    assert len(got) == 4 and got.index("twin1") < got.index("d0") < got.index("twin0")  # tied: pool order
    with pytest.raises(ValueError, match="not in the indexed corpus"):
        r.rerank(QUERIES[:1], {"pets": [Candidate(Document("stranger", "x"), 1.0)]}, ctx)


def test_inner_product_without_normalisation(corpus: Corpus, ctx: RunContext, pool) -> None:
    """``normalize=false`` (contriever's scoring): the raw inner product, as its search ranks."""
    r = DenseRetriever(PooledDenseParams(normalize=False, pooling="mean"))
    r.index(corpus, ctx)
    cands = pool_of(corpus, POOL)
    run = check_reranking(r.rerank(QUERIES, cands, ctx), QUERIES, cands, corpus)
    D = pool.encode(DEFAULT_ENCODER, corpus.texts(), normalize=False, pooling="mean").astype(np.float64)
    Q = pool.encode(DEFAULT_ENCODER, [q.text for q in QUERIES], normalize=False, pooling="mean").astype(np.float64)
    for i, q in enumerate(QUERIES[:3]):
        ip = D[[corpus.row(d) for d in POOL[q.id]]] @ Q[i]
        assert [d for d, _ in run[q.id]] == cosine_order(POOL[q.id], ip)
        np.testing.assert_allclose([s for _, s in run[q.id]], np.sort(ip)[::-1], rtol=1e-5, atol=1e-6)


def test_deo_rules_reranks_with_its_optimised_query_embeddings(corpus: Corpus, ctx: RunContext, pool) -> None:
    """DEO restricted to a pool: the candidates by cosine with the optimised query embedding (the
    rules decomposer splits off "France"), which is not the plain query's order."""
    ctx.llm = None
    deo = DEORules(DeoParams(decomposer="rules", lr=0.05))
    deo.index(corpus, ctx)
    cands = pool_of(corpus, POOL)
    run = check_reranking(deo.rerank(QUERIES, cands, ctx), QUERIES, cands, corpus)
    assert deo.last_decompositions["wine"].negatives  # the optimisation ran for the queries with a pool
    assert set(deo.last_decompositions) == {"pets", "numpy", "wine"}  # not for the empty one
    optimised = unit(deo.encode_queries(QUERIES[:3], ctx))
    D, plain = by_hand(pool, corpus.texts(), QUERIES[:3])
    moved = False
    for i, q in enumerate(QUERIES[:3]):
        rows = [corpus.row(d) for d in POOL[q.id]]
        cos = D[rows] @ optimised[i]
        assert [d for d, _ in run[q.id]] == cosine_order(POOL[q.id], cos)
        np.testing.assert_allclose([s for _, s in run[q.id]], np.sort(cos)[::-1], atol=1e-5)
        moved |= not np.allclose(D[rows] @ plain[i], cos, atol=1e-3)
    assert moved  # the optimised embedding is not the query's: DEO's own second stage ran
    # and it is DEO's search restricted to the pool
    full = deo.search(QUERIES[:3], len(corpus), ctx)
    assert all([d for d, _ in run[q.id]] == [d for d, _ in full[q.id] if d in POOL[q.id]] for q in QUERIES[:3])


def test_deo_with_the_llm_decomposer_reranks_with_its_embeddings(corpus: Corpus, ctx: RunContext, tmp_path) -> None:
    pytest.importorskip("openai")
    from fake_llm import FakeLLMServer
    from harness.models.llm import LLMClient, LLMSettings

    reply = json.dumps({"positives": ["red wine regions"], "negatives": ["France", "Bordeaux"]})
    server = FakeLLMServer(lambda body: reply).start()
    try:
        ctx.llm = LLMClient(LLMSettings(base_url=server.base_url, model="gpt-4.1-nano"), cache_path=tmp_path / "llm")
        ctx.ledger = Ledger()
        deo = DEO(DeoParams(lr=0.05))
        deo.index(corpus, ctx)
        cands = pool_of(corpus, {"wine": POOL["wine"], "none": []})
        queries = [QUERIES[2], QUERIES[3]]
        run = check_reranking(deo.rerank(queries, cands, ctx), queries, cands, corpus)
        assert server.count == 1  # one decomposition: the query with candidates
        assert deo.last_decompositions["wine"].source == "llm"
        e = unit(deo.encode_queries([QUERIES[2]], ctx))[0]  # the cached reply: the same embedding
        D = unit(deo.doc_embeddings)
        cos = D[[corpus.row(d) for d in POOL["wine"]]] @ e
        assert [d for d, _ in run["wine"]] == cosine_order(POOL["wine"], cos)
        ctx.llm.close()
    finally:
        server.stop()
        ctx.llm, ctx.ledger = None, None


# --- MMR -------------------------------------------------------------------------------------------


def mmr_reference(rel: np.ndarray, sim: np.ndarray, lam: float) -> tuple[list[int], float]:
    """Greedy MMR written out: first the most relevant, then argmax λ·rel − (1−λ)·max sim to the
    chosen, ties to the earlier position. Also the smallest margin between the best and the
    runner-up over the steps (how far the order is from a tie)."""
    chosen: list[int] = []
    rest = list(range(len(rel)))
    margin = math.inf
    while rest:
        def value(i: int) -> float:
            return rel[i] if not chosen else lam * rel[i] - (1 - lam) * max(sim[i][c] for c in chosen)

        vals = sorted(((value(i), -i) for i in rest), reverse=True)
        if len(vals) > 1:
            margin = min(margin, vals[0][0] - vals[1][0])
        j = -vals[0][1]
        chosen.append(j)
        rest.remove(j)
    return chosen, margin


@pytest.mark.parametrize("lam", [0.5, 0.3])
def test_mmr_rerank_is_the_greedy_selection_over_the_pool(lam: float, corpus: Corpus, ctx: RunContext, pool) -> None:
    r = MMR(MMRParams(lam=lam, candidates=3))  # `candidates` is search's depth; the pool's size is rerank's
    r.index(corpus, ctx)
    cands = pool_of(corpus, POOL)
    run = check_reranking(r.rerank(QUERIES, cands, ctx), QUERIES, cands, corpus)
    D, Q = by_hand(pool, corpus.texts(), QUERIES)
    differs = False
    for i, q in enumerate(QUERIES[:3]):
        E = D[[corpus.row(d) for d in POOL[q.id]]]
        want, margin = mmr_reference(E @ Q[i], E @ E.T, lam)
        assert margin > 1e-5
        assert [d for d, _ in run[q.id]] == [POOL[q.id][j] for j in want]
        assert [s for _, s in run[q.id]] == [float(len(want) - r) for r in range(len(want))]
        differs |= want != sorted(range(len(want)), key=lambda j: -(E @ Q[i])[j])
    assert differs  # diversity changed some order: not the cosine order again
    assert r.last_stats["candidates"] == "pool" and r.last_stats["pool"]["max"] == 7


# --- CoDeR -----------------------------------------------------------------------------------------

# 150 distinct short documents (products × places × phrasings, half of them negated) and queries
# with and without an exclusion: enough for the topical top 100 to be a strict subset
PRODUCTS = ["red wine", "green tea", "black coffee", "dark chocolate", "olive oil", "aged cheese", "brown rice",
            "fresh bread", "citrus fruit", "wild honey"]
PLACES = ["France", "Italy", "Spain", "Japan", "Kenya"]
PHRASES = ["{p} from {c} is sold in many markets.", "{p} is not produced in {c} at all.",
           "Farmers in {c} grow the ingredients of {p}, but never export them."]
CODER_DOCS = [t.format(p=p, c=c) for p in PRODUCTS for c in PLACES for t in PHRASES]
CODER_QUERIES = [Query("q1", "red wine not from France"), Query("q2", "tea grown in Japan"),
                 Query("q3", "coffee but not from Kenya"), Query("q4", "cheese from Italy or Spain"),
                 Query("q5", "bread that is not made in Spain"), Query("q6", "honey exported by farmers")]
STAND_IN = dict(compat_model=DEFAULT_ENCODER, compat_query_prefix="query: ")  # untrained E_C; its own s_C scale


@pytest.fixture(scope="module")
def coder_corpus() -> Corpus:
    assert len(set(CODER_DOCS)) == 150
    return make_corpus(CODER_DOCS)


@pytest.fixture
def dense_top100(coder_corpus: Corpus, ctx: RunContext) -> dict[str, list[Candidate]]:
    """The ``dense`` retriever's top 100 (its defaults: the same encoder as coder-seq's topical one)."""
    dense = DenseRetriever()
    dense.index(coder_corpus, ctx)
    top = dense.search(CODER_QUERIES, 100, ctx)
    return {q: [Candidate(coder_corpus.get(d), s) for d, s in ranking] for q, ranking in top.items()}


@pytest.mark.parametrize("params", [dict(tau_quantile=0.6), dict(tau_quantile=0.4, fill="none", alpha=0.3),
                                    dict(tau=0.35, alpha=0.2)])
def test_coder_seq_rerank_of_the_dense_top_100_is_its_search(params, coder_corpus: Corpus, ctx: RunContext,
                                                             dense_top100) -> None:
    seq = CoderSeq(CoderSeqParams(**STAND_IN, **params))
    seq.prepare(ctx)
    seq.index(coder_corpus, ctx)
    queries = CODER_QUERIES + [Query("empty", "nothing in the pool")]
    cands = {**dense_top100, "empty": []}
    reranked = check_reranking(seq.rerank(queries, cands, ctx), queries, cands, coder_corpus,
                               complete=params.get("fill") != "none")
    assert reranked["empty"] == []
    tau = seq.filter_value
    for k in (100, 37, 10):
        full = seq.search(CODER_QUERIES, k, ctx)
        assert seq.filter_value == pytest.approx(tau, abs=1e-9)  # τ read from the same candidates
        for q in CODER_QUERIES:
            got, want = reranked[q.id][:k], full[q.id]
            assert [d for d, _ in got] == [d for d, _ in want], (q.id, k)
            np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
    # the filter did something: some candidates kept, some not, and the order is not the topical one
    assert 0 < seq.stats["kept"]["mean"] < 100
    assert any([d for d, _ in reranked[q.id]] != [c.id for c in dense_top100[q.id]][:len(reranked[q.id])]
               for q in CODER_QUERIES)
    # the candidates' scores and order are not trusted: shuffled and zeroed, the same ranking
    rng = np.random.default_rng(0)
    shuffled = {q: [Candidate(cs[j].doc, 0.0) for j in rng.permutation(len(cs))] for q, cs in dense_top100.items()}
    assert seq.rerank(CODER_QUERIES, shuffled, ctx) == Run({q.id: reranked[q.id] for q in CODER_QUERIES})


def union_reference(s_t: Sequence[float], s_c: Sequence[float], alpha: float, p: float) -> list[int]:
    """CoDeR-Union (drop direction) over one pool written out with Python sorting."""
    n = len(s_t)
    rt = {i: 1.0 / (r + 1) for r, i in enumerate(sorted(range(n), key=lambda i: (-s_t[i], -s_c[i], i)))}
    rc = {i: 1.0 / (r + 1) for r, i in enumerate(sorted(range(n), key=lambda i: (-s_c[i], -s_t[i], i)))}
    v = sorted(rc.values())
    pos = p * (n - 1)
    gamma = v[math.floor(pos)] + (v[math.ceil(pos)] - v[math.floor(pos)]) * (pos - math.floor(pos))
    keep = [i for i in range(n) if rc[i] >= gamma - 1e-12] or list(range(n))
    return sorted(keep, key=lambda i: (-(alpha * rt[i] + (1 - alpha) * rc[i]), -s_c[i], -s_t[i], i))


def test_coder_union_rerank_is_its_policy_over_the_pool(coder_corpus: Corpus, ctx: RunContext, pool) -> None:
    union = CoderUnion(CoderUnionParams(**STAND_IN, alpha=0.3, percentile=0.4))
    union.prepare(ctx)
    union.index(coder_corpus, ctx)
    rng = np.random.default_rng(1)
    ids = coder_corpus.ids
    pools = {q.id: [ids[j] for j in rng.choice(len(ids), 30, replace=False)] for q in CODER_QUERIES}
    cands = pool_of(coder_corpus, pools)
    run = check_reranking(union.rerank(CODER_QUERIES, cands, ctx), CODER_QUERIES, cands, coder_corpus,
                          complete=False)
    D, QT = by_hand(pool, coder_corpus.texts(), CODER_QUERIES)
    _, QC = by_hand(pool, coder_corpus.texts(), CODER_QUERIES, query_prefix="query: ")
    for i, q in enumerate(CODER_QUERIES):
        E = D[[coder_corpus.row(d) for d in pools[q.id]]]
        s_t, s_c = E @ QT[i], E @ QC[i]
        assert_no_near_ties(s_t, 1e-6)
        assert_no_near_ties(s_c, 1e-6)
        # the pool in topical order, as the method lists its candidates
        topical = np.argsort(-s_t, kind="stable")
        want = [pools[q.id][topical[j]] for j in union_reference(s_t[topical], s_c[topical], 0.3, 0.4)]
        assert [d for d, _ in run[q.id]] == want
        assert 0 < len(want) < 30  # the percentile dropped some
    assert union.stats["candidates"] == "pool" and union.stats["pool"]["max"] == 30


# --- NS-IR -----------------------------------------------------------------------------------------


def test_nsir_reranks_the_pools_top_n_and_never_builds_the_dense_index(corpus: Corpus, ctx: RunContext, pool,
                                                                        tmp_path) -> None:
    pytest.importorskip("ot")
    pytest.importorskip("openai")
    from fake_llm import FakeLLMServer
    from harness.models.llm import LLMClient, LLMSettings
    from retrievers.nsir import NSIR, NsirParams, nsir_score
    from tests.test_nsir import translate

    server = FakeLLMServer(translate).start()
    try:
        ctx.llm = LLMClient(LLMSettings(base_url=server.base_url, model="gpt-4o-mini"), cache_path=tmp_path / "llm")
        ctx.ledger = Ledger()
        r = NSIR(NsirParams(top_n=3))
        encoded = pool.stats["encoded"]
        r.index(corpus, ctx)
        cands = pool_of(corpus, POOL)
        run = check_reranking(r.rerank(QUERIES, cands, ctx), QUERIES, cands, corpus)
        assert r._index is None and r.doc_embeddings is None  # the dense first stage: not built
        assert pool.stats["encoded"] == encoded  # nothing encoded for it
        heads = {q: ids[:3] for q, ids in POOL.items()}
        asked = [b["messages"][-1]["content"].rsplit("\nPassage: ", 1)[1] for b in server.requests
                 if "\nPassage: " in b["messages"][-1]["content"]]
        assert sorted(asked) == sorted({corpus.get(d).full_text for h in heads.values() for d in h})
        for q in QUERIES[:3]:
            got = run[q.id]
            direct = [nsir_score(r._views[("query", q.text)], r._views[("document", corpus.get(d).full_text)])
                      for d in heads[q.id]]
            assert [d for d, _ in got[:3]] == cosine_order(heads[q.id], np.array(direct))
            assert [s for _, s in got[:3]] == pytest.approx(sorted(direct, reverse=True))
            # the pool's deeper candidates in pool order, below every reranked score, gaps kept
            assert [d for d, _ in got[3:]] == POOL[q.id][3:]
            assert got[3][1] < got[2][1]
            np.testing.assert_allclose(np.diff([s for _, s in got[3:]]), -1.0)
        assert ctx.ledger.counters["nsir.candidates"] == 9
        ctx.llm.close()
    finally:
        server.stop()
        ctx.llm, ctx.ledger = None, None


# --- rerank (a cross-encoder) --------------------------------------------------------------------


@pytest.mark.parametrize("keep_rest", [True, False])
def test_cross_encoder_rescores_the_pools_top_n_without_the_first_stage(keep_rest: bool, cross_encoder_dir,
                                                                        corpus: Corpus, ctx: RunContext,
                                                                        pool) -> None:
    ctx.ledger = Ledger()
    try:
        r = Rerank(RerankParams(first_stage="dense", model=str(cross_encoder_dir), top_n=3, keep_rest=keep_rest))
        encoded = pool.stats["encoded"]
        with ctx.ledger.phase("index", items=len(corpus)):
            r.index(corpus, ctx)

        def never(*args, **kwargs):
            raise AssertionError("the first stage was used on a pool")

        r.first.search = r.first.index = never
        cands = pool_of(corpus, POOL)
        with ctx.ledger.phase("search", items=len(QUERIES)):
            run = check_reranking(r.rerank(QUERIES, cands, ctx), QUERIES, cands, corpus, complete=keep_rest)
        assert pool.stats["encoded"] == encoded  # the dense first stage encoded nothing
        extra = r.result_extra()
        assert extra["first_stage"]["indexed"] is False
        assert all("first_stage" not in parts for parts in extra["stages"].values())
        assert ctx.ledger.counters["rerank.pairs"] == 9
        for q in QUERIES[:3]:
            head = POOL[q.id][:3]
            direct = direct_scores(cross_encoder_dir, [(q.text, corpus.get(d).full_text) for d in head])
            assert_no_near_ties(direct, 1e-4)
            got = run[q.id]
            assert [d for d, _ in got[:3]] == cosine_order(head, direct)
            np.testing.assert_allclose([s for _, s in got[:3]], np.sort(direct)[::-1], atol=1e-5)
            if keep_rest:  # the rest in pool order, the pool's gaps (1 apart here) kept, below the head
                assert [d for d, _ in got[3:]] == POOL[q.id][3:]
                assert got[3][1] < got[2][1]
                np.testing.assert_allclose(np.diff([s for _, s in got[3:]]), -1.0)
            else:
                assert len(got) == 3
    finally:
        ctx.ledger = None


def test_follow_below_keeps_gaps_and_repairs_odd_pool_scores() -> None:
    assert follow_below(0.5, [10.0, 8.0, 7.5]) == pytest.approx([-0.5, -2.5, -3.0])
    assert follow_below(0.5, []) == []
    odd = follow_below(0.0, [3.0, math.nan, 4.0, 1.0])  # a NaN, then a score that rises
    assert all(math.isfinite(s) for s in odd) and all(a >= b for a, b in zip([0.0, *odd], odd))
