"""BM25 against an independent hand-written formula; dense against brute-force numpy search."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from harness.models.pool import EncoderPool
from harness.models.resolve import resolve_model
from harness.protocols import RunContext
from harness.core.topk import topk_indices
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


# ---------------------------------------------------------------------------------------------
# bm25: the compiled search and vectorised index against bm25s itself


def _bm25s_ranking(texts, queries, params: BM25Params, k: int):  # type: ignore[no-untyped-def]
    """The retriever's former path, independent of ours: bm25s tokenises (strings), indexes and
    scores each query; documents scoring > 0 ranked by (score descending, corpus order)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer(params.stemmer) if params.stemmer else None
    kw = dict(lower=True, stopwords=params.stopwords or [], stemmer=stemmer, return_ids=False, show_progress=False)
    model = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    model.index(bm25s.tokenize(texts, **kw), show_progress=False)
    out = {}
    for i, toks in enumerate(bm25s.tokenize(queries, **kw)):
        ids = model.get_tokens_ids(toks)
        s = model.get_scores_from_ids(ids) if ids else np.zeros(len(texts), np.float32)
        order = np.lexsort((np.arange(s.size), -s))
        out[f"q{i}"] = [(f"d{j}", float(s[j])) for j in order[:k] if s[j] > 0]
    return out


def _tie_heavy_corpus(n: int = 400, seed: int = 0) -> tuple[list[str], list[str]]:
    """Zipf-like texts, each written twice (every score ties with a copy), plus edge cases:
    non-ASCII text, punctuation, underscores, digits, capitals, one-letter words, stopwords only."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}x" for i in range(300)] + ["Cat", "cats", "running", "ran", "runs", "dog_house", "r2d2",
                                              "über", "straße", "İstanbul", "naïve", "café"]
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    p /= p.sum()
    base = []
    for _ in range(n // 2):
        toks = rng.choice(len(words), size=rng.integers(3, 40), p=p)
        sep = rng.choice([" ", ", ", "; ", "-", " (", ") ", ". ", "\n"], size=toks.size)
        base.append("".join(f"{words[t]}{s}" for t, s in zip(toks, sep)))
    texts = base + base + ["The of and a I x y z", "", "ÄÖÜ ÉÈ — “quoted” İstanbul's café-au-lait", "A b C d"]
    queries = [" ".join(rng.choice(words, size=rng.integers(1, 6), p=p)) for _ in range(40)]
    queries += ["the a of", "", "İstanbul café", "w0x w0x w0x", "Running CATS r2d2 dog_house", "unknownword"]
    return texts, queries


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize("stemmer", [None, "english"])
def test_bm25_rankings_equal_bm25s(method: str, stemmer: str | None) -> None:
    texts, queries = _tie_heavy_corpus()
    params = BM25Params(method=method, stemmer=stemmer, k1=1.2, b=0.7)
    r = BM25Retriever(params)
    r.index(Corpus(Document(f"d{i}", t) for i, t in enumerate(texts)), RunContext())
    qs = [Query(f"q{i}", t) for i, t in enumerate(queries)]
    for k in (1, 7, 50, len(texts) + 5):
        want = _bm25s_ranking(texts, queries, params, k)
        got = r.search(qs, k, RunContext())
        assert got == want, (method, stemmer, k)  # ids, float32 scores and tie order, exactly
    assert any(len(v) == 0 for v in got.values()) and any(len(v) > 50 for v in got.values())
    # the two copies of a document tie, and the lower index comes first
    tied = [v for v in got.values() if len(v) > 1 and v[0][1] == v[1][1]]
    assert tied and all(int(a[0][1:]) < int(b[0][1:]) for v in tied for a, b in zip(v, v[1:]) if a[1] == b[1])


def test_bm25_tokens_and_impacts_equal_bm25s() -> None:
    import bm25s
    import Stemmer

    texts, _ = _tie_heavy_corpus(120, seed=3)
    for stemmer in (None, "english"):
        st = Stemmer.Stemmer(stemmer) if stemmer else None
        r = BM25Retriever(BM25Params(stemmer=stemmer, method="bm25+"))
        toks = bm25s.tokenize(texts, stopwords="en", stemmer=st, return_ids=False, show_progress=False)
        assert r.tokenize(texts) == toks
        r.index(Corpus(Document(f"d{i}", t) for i, t in enumerate(texts)), RunContext())
        ref = bm25s.BM25(method="bm25+")
        ref.index(toks, show_progress=False)
        assert set(r._terms) == set(ref.vocab_dict) - {""}
        ip, rp = ref.scores["indptr"], r._indptr
        for term, t in r._terms.items():
            u = ref.vocab_dict[term]
            np.testing.assert_array_equal(r._indices[rp[t]:rp[t + 1]], ref.scores["indices"][ip[u]:ip[u + 1]])
            assert r._data[rp[t]:rp[t + 1]].tobytes() == ref.scores["data"][ip[u]:ip[u + 1]].tobytes(), term
            assert r._nonocc[t] == ref.nonoccurrence_array[u]
        q = r.tokenize(["w0x w1x über w0x"])[0]
        assert r.scores(q).tobytes() == ref.get_scores(q).tobytes()


def test_bm25_search_batches_and_small_k() -> None:
    texts, queries = _tie_heavy_corpus(60, seed=5)
    r = BM25Retriever()
    r.index(Corpus(Document(f"d{i}", t) for i, t in enumerate(texts)), RunContext())
    qs = [Query(f"q{i}", t) for i, t in enumerate(queries)]
    import retrievers.bm25 as bm25_module

    whole = r.search(qs, 10, RunContext())
    old = bm25_module._QUERY_BATCH
    bm25_module._QUERY_BATCH = 7  # several kernel calls give the same run
    try:
        assert r.search(qs, 10, RunContext()) == whole
    finally:
        bm25_module._QUERY_BATCH = old
    assert r.search([], 10, RunContext()) == {}


def test_run_from_matrix_empty_slots() -> None:
    from harness.core.topk import run_from_matrix

    ids = ["a", "b", "c", "d"]
    idx = np.array([[2, 0, -1], [3, 1, 0], [-1, -1, -1]])
    sc = np.array([[0.5, 0.25, 0.0], [3.0, 2.0, 1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    assert run_from_matrix(["x", "y", "z"], ids, idx, sc) == {"x": [("c", 0.5), ("a", 0.25)],
                                                             "y": [("d", 3.0), ("b", 2.0), ("a", 1.0)], "z": []}
    gap = np.array([[1, -1, 2]])  # an empty slot inside a row
    run = run_from_matrix(["x"], ids, gap, np.array([[0.75, 0.0, 0.5]], dtype=np.float32))
    assert run == {"x": [("b", 0.75), ("c", 0.5)]} and all(type(s) is float for _, s in run["x"])


# ---------------------------------------------------------------------------------------------
# bm25 presets: tokenizer (ours, CoDeR's, Lucene-like) and indexed fields


def test_bm25_tokenizer_presets_by_hand() -> None:
    text = "The U.S. price is $5 a Mother's-Day gift; naïve café"
    ours = BM25Retriever(BM25Params()).tokenize([text])[0]
    coder = BM25Retriever(BM25Params(tokenizer="coder", stopwords="")).tokenize([text])[0]
    lucene = BM25Retriever(BM25Params(tokenizer="lucene")).tokenize([text])[0]
    # ours: \w\w+ runs, Lucene's 33 stopwords dropped (the, is, a), one-character words dropped
    assert ours == ["price", "mother", "day", "gift", "naïve", "café"]
    # CoDeR's: [a-zA-Z0-9$]+ lowercased, every length, no stopwords; non-ASCII letters split words
    assert coder == ["the", "u", "s", "price", "is", "$5", "a", "mother", "s", "day", "gift", "na", "ve", "caf"]
    # Lucene-like: \w+ of every length, the possessive 's dropped, stopwords dropped
    assert lucene == ["u", "s", "price", "5", "mother", "day", "gift", "naïve", "café"]
    stemmed = BM25Retriever(BM25Params(tokenizer="lucene", stemmer="porter")).tokenize(["gifts priced"])[0]
    assert stemmed == ["gift", "price"]


def test_bm25_coder_preset_scores_by_hand() -> None:
    """CoDeR's tokens through the same Lucene scoring: the hand formula over those tokens."""
    r = BM25Retriever(BM25Params(tokenizer="coder", stopwords=""))
    corpus = toy_corpus()
    r.index(corpus, RunContext())
    doc_tokens = r.tokenize(corpus.texts())
    assert doc_tokens[0] == ["the", "cat", "sat", "on", "the", "mat", "with", "another", "cat"]
    for q in ["the cat", "a dog at the mat"]:
        qt = r.tokenize([q])[0]
        np.testing.assert_allclose(r.scores(qt), hand_bm25(qt, doc_tokens), rtol=1e-5, atol=1e-6)


def test_bm25_fields_text_leaves_the_title_out() -> None:
    corpus = Corpus([Document("d0", "about nothing in particular", title="Zebra"),
                     Document("d1", "a zebra crossing", title=""), Document("d2", "plain words", title="")])
    both, text = BM25Retriever(BM25Params()), BM25Retriever(BM25Params(fields="text"))
    both.index(corpus, RunContext())
    text.index(corpus, RunContext())
    q = [Query("q", "zebra")]
    assert [d for d, _ in both.search(q, 10, RunContext())["q"]] == ["d1", "d0"]  # d1 is shorter
    assert [d for d, _ in text.search(q, 10, RunContext())["q"]] == ["d1"]


@pytest.mark.parametrize("bad", [{"tokenizer": "whitespace"}, {"fields": "title"}])
def test_bm25_preset_parameters_are_checked(bad: dict) -> None:
    with pytest.raises(ValueError, match=f"{next(iter(bad))} must be one of"):
        BM25Params(**bad)
