"""BM25 against an independent hand-written formula; dense against brute-force numpy search."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from harness.encoders import EncoderPool, resolve_model
from harness.protocols import RunContext
from harness.ranking import topk_indices
from harness.types import Corpus, Document, Query
from retrievers.bm25 import BM25Params, BM25Retriever
from retrievers.dense import DenseParams, DenseRetriever

TOY = [
    "The cat sat on the mat with another cat.",
    "Dogs and cats are not the same animals.",
    "A dog barked at the mailman all morning long.",
    "Cats purr; dogs bark; birds sing in the morning.",
    "Nothing here matches anything at all.",
]


def toy_corpus() -> Corpus:
    return Corpus(Document(f"d{i}", t) for i, t in enumerate(TOY))


def hand_bm25(query_tokens, doc_tokens, k1=1.5, b=0.75):
    n = len(doc_tokens)
    avgdl = sum(len(d) for d in doc_tokens) / n
    df = Counter(t for d in doc_tokens for t in set(d))
    out = []
    for d in doc_tokens:
        tf = Counter(d)
        s = 0.0
        for t in query_tokens:
            if tf[t] == 0:
                continue
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (0.9, 0.4), (1.2, 1.0)])
def test_bm25_lucene_matches_hand_formula(k1: float, b: float) -> None:
    r = BM25Retriever(BM25Params(k1=k1, b=b))
    corpus = toy_corpus()
    r.index(corpus, RunContext())
    doc_tokens = r.tokenize(corpus.texts())
    assert doc_tokens[0] == ["cat", "sat", "mat", "another", "cat"]  # lowercased, stopwords gone
    for q in ["cat dog", "morning dogs", "mailman cat cat", "the a of"]:
        qt = r.tokenize([q])[0]
        expected = hand_bm25(qt, doc_tokens, k1, b)
        np.testing.assert_allclose(r.scores(qt), expected, rtol=1e-5, atol=1e-6)
        run = r.search([Query("q", q)], 10, RunContext())
        ranked = [d for d, _ in run["q"]]
        want = [f"d{i}" for i in np.lexsort((np.arange(len(expected)), -expected)) if expected[i] > 0]
        assert ranked == want  # zero-score documents are not returned


def test_bm25_stemming_parameter() -> None:
    corpus = toy_corpus()
    plain, stem = BM25Retriever(BM25Params()), BM25Retriever(BM25Params(stemmer="english"))
    plain.index(corpus, RunContext())
    stem.index(corpus, RunContext())
    q = [Query("q", "barking")]
    assert plain.search(q, 5, RunContext())["q"] == []
    assert stem.tokenize(["barking barked"])[0] == ["bark", "bark"]
    assert {d for d, _ in stem.search(q, 5, RunContext())["q"]} == {"d2", "d3"}
    with pytest.raises(ValueError):
        BM25Params(method="bm99")


def test_topk_indices_ties_and_cutoff() -> None:
    s = np.array([0.5, 0.9, 0.5, 0.5, 0.1, 0.9, 0.0])
    assert topk_indices(s, 3).tolist() == [1, 5, 0]
    assert topk_indices(s, 4).tolist() == [1, 5, 0, 2]
    assert topk_indices(s, 10).tolist() == [1, 5, 0, 2, 3, 4, 6]
    assert topk_indices(s, 10, drop_nonpositive=True).tolist() == [1, 5, 0, 2, 3, 4]
    rng = np.random.default_rng(0)
    big = rng.integers(0, 20, size=5000).astype(float)
    ref = np.lexsort((np.arange(big.size), -big))[:100]
    assert topk_indices(big, 100).tolist() == ref.tolist()


def test_packaged_encoder_resolves_offline() -> None:
    rm = resolve_model("all-MiniLM-L6-v2")
    assert rm.source == "package" and (rm.path / "model.safetensors").exists()


def test_dense_matches_bruteforce_and_caches(tmp_path, no_network) -> None:
    corpus = toy_corpus()
    pool = EncoderPool(tmp_path / "cache", "cpu")
    ctx = RunContext(encoders=pool, cache_dir=tmp_path / "cache")
    r = DenseRetriever(DenseParams(query_prefix="query: "))
    r.index(corpus, ctx)
    emb = np.asarray(r.doc_embeddings)
    assert emb.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    queries = [Query("a", "a cat on a mat"), Query("b", "barking dogs in the morning")]
    run = r.search(queries, 3, ctx)
    model = pool.model("all-MiniLM-L6-v2")
    qe = model.encode(["query: a cat on a mat", "query: barking dogs in the morning"], normalize_embeddings=True)
    de = model.encode(corpus.texts(), normalize_embeddings=True)
    sims = qe @ de.T
    for i, q in enumerate(queries):
        want = np.argsort(-sims[i])[:3]
        assert [d for d, _ in run[q.id]] == [f"d{j}" for j in want]
        np.testing.assert_allclose([s for _, s in run[q.id]], sims[i][want], atol=1e-4)
    assert run["a"][0][0] == "d0"
    # a second index + search re-encodes nothing
    encoded = pool.stats["encoded"]
    r2 = DenseRetriever(DenseParams(query_prefix="query: "))
    r2.index(corpus, ctx)
    run2 = r2.search(queries, 3, ctx)
    assert pool.stats["encoded"] == encoded and pool.stats["cache_hits"] >= 2
    assert run2 == run
    # a different prefix is a different cache entry
    DenseRetriever(DenseParams(doc_prefix="passage: ")).index(corpus, ctx)
    assert pool.stats["encoded"] == encoded + len(corpus)
    assert no_network == []
