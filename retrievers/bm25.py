"""BM25 with bm25s's scoring (Lù 2024): precomputed per-(term, document) impacts, searched by a
compiled kernel (:mod:`retrievers.bm25_kernels`).

Tokenisation is bm25s's: lowercase, ``\\w\\w+`` tokens (scikit-learn's pattern), stopwords
(English by default) removed, then Snowball stemming (PyStemmer) when ``stemmer`` is set.
``method`` picks the bm25s variant; the default ``lucene`` is
``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` times ``tf / (tf + k1·(1 − b + b·|d|/avgdl))``
(Lucene ≥ 8 drops the constant ``k1+1``) summed over query tokens (the test suite checks this
against a hand computation). Documents matching no query token are not returned; ties are
broken by corpus order.

What is ours and why: bm25s tokenises and indexes one token at a time in Python and searches one
query at a time over a dense score vector. Here the tokens are split per document in C
(``str.translate``/``str.split`` on ASCII text, bm25s's regular expression otherwise), stopwords
and stems are resolved once per distinct word, the impact matrix is built with scipy and
vectorised numpy using bm25s's own term-frequency and idf functions, and a batch of queries is
scored and cut to its top k in one compiled call. Impacts, scores and rankings are bit-identical
to bm25s's (tested against bm25s itself).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from itertools import chain
from typing import Mapping, Sequence

import numpy as np

from harness.protocols import RunContext
from harness.core.topk import run_from_matrix
from harness.registry import added_param, choice_param, register
from harness.types import Corpus, Query, Run
from . import citations

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
DELTA = 0.5  # bm25s's δ of BM25L and BM25+

# bm25s's (and scikit-learn's) token pattern: maximal runs of ≥ 2 word characters
_FINDALL = re.compile(r"(?u)\b\w\w+\b").findall
# ASCII text: the word characters are [A-Za-z0-9_]; everything else becomes a space, capitals
# become small, and str.split() yields the same runs (those of one character are dropped with
# the stopwords, once per distinct word)
_ASCII_WORDS = str.maketrans({**{i: " " for i in range(128) if not (chr(i).isalnum() or chr(i) == "_")},
                              **{ord(c): c.lower() for c in string.ascii_uppercase}})
_CHUNK = 8192  # documents split per step (bounds the memory of the token strings)
_QUERY_BATCH = 1024  # queries per kernel call (one progress step each)


def _split(text: str) -> list[str]:
    if text.isascii():
        return text.translate(_ASCII_WORDS).split()
    return _FINDALL(text.lower())


# CoDeR's BM25 tokens: maximal runs of ASCII letters, digits and "$", lowercased, any length
_CODER_FINDALL = re.compile(r"[a-z0-9$]+").findall
# A Lucene-like analyser (StandardTokenizer + LowerCaseFilter, roughly): maximal runs of word
# characters of any length, an English possessive "'s" dropped as Lucene's EnglishAnalyzer does
_LUCENE_FINDALL = re.compile(r"(?u)\w+").findall
_POSSESSIVE = re.compile(r"['’]s\b")

# tokenizer → (split a text into words, the shortest word kept)
TOKENIZERS = {
    "bm25s": (_split, 2),
    "coder": (lambda text: _CODER_FINDALL(text.lower()), 1),
    "lucene": (lambda text: _LUCENE_FINDALL(_POSSESSIVE.sub("", text.lower())), 1),
}
FIELDS = ("title+text", "text")


def _stemmers() -> list[str]:
    """The Snowball stemmers PyStemmer has (the values ``stemmer`` takes)."""
    import Stemmer

    return sorted(Stemmer.algorithms())


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str | None = choice_param(None, _stemmers)  # e.g. "english" (Snowball via PyStemmer)
    stopwords: str | None = "en"  # bm25s's English list (Lucene's 33 words); "" or None: none
    # see TOKENIZERS: "bm25s" (ours), "coder" (CoDeR's), "lucene" (Lucene-like)
    tokenizer: str = added_param("bm25s", since="0.2.0")
    # what is indexed: "title+text" ("<title>. <text>") or "text" alone
    fields: str = added_param("title+text", since="0.2.0")

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {tuple(TOKENIZERS)}, got {self.tokenizer!r}")
        if self.fields not in FIELDS:
            raise ValueError(f"fields must be one of {FIELDS}, got {self.fields!r}")
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError("need k1 ≥ 0 and 0 ≤ b ≤ 1")


@register("bm25", params=BM25Params, family="lexical", citation=citations.BM25,
          description="BM25 over bm25s (Lucene variant by default), English stopwords, optional stemming",
          paper="Robertson & Zaragoza 2009; bm25s: Lù 2024, arXiv:2407.03618")
class BM25Retriever:
    def __init__(self, params: BM25Params | None = None):
        from bm25s.tokenization import _infer_stopwords

        self.params = params or BM25Params()
        self._stop = frozenset(_infer_stopwords(self.params.stopwords or []))
        self._stemmer = None
        if self.params.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.params.stemmer)
        self._split, self._min_len = TOKENIZERS[self.params.tokenizer]
        self._doc_ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._terms: dict[str, int] = {}  # term (stemmed word) -> row of the impact matrix
        self._data = self._indices = self._indptr = None
        self._nonocc: np.ndarray | None = None  # BM25L/BM25+: each term's score in a document without it

    # ------------------------------------------------------------------ tokens

    def _terms_of_words(self, words: Sequence[str]) -> list[str | None]:
        """The term each distinct word counts as (``None``: a stopword or a word shorter than the
        tokenizer keeps)."""
        keep = [w for w in words if len(w) >= self._min_len and w not in self._stop]
        stems = self._stemmer.stemWords(keep) if self._stemmer is not None else keep
        term = dict(zip(keep, stems))
        return [term.get(w) for w in words]

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's terms, as ``bm25s.tokenize(texts, stopwords=…, stemmer=…, return_ids=False)``."""
        lists = [self._split(t) for t in texts]
        words = list(dict.fromkeys(chain.from_iterable(lists)))
        term = dict(zip(words, self._terms_of_words(words)))
        return [[t for t in map(term.__getitem__, ws) if t is not None] for ws in lists]

    def _query_terms(self, texts: Sequence[str]) -> list[list[int]]:
        """Each query's term ids in query order (duplicates kept, terms absent from the corpus dropped)."""
        rows = self._terms
        return [[rows[t] for t in toks if t in rows] for toks in self.tokenize(texts)]

    # ------------------------------------------------------------------ index

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import scipy.sparse as sp
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

        p = self.params
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}
        texts = corpus.texts() if p.fields == "title+text" else [d.text for d in corpus]
        n = len(texts)
        # 1. word ids per document, chunk by chunk (distinct words in order of first use)
        words: dict[str, int] = {}
        ids, lens = [], []
        for s in range(0, n, _CHUNK):
            lists = [self._split(t) for t in texts[s:s + _CHUNK]]
            flat = list(chain.from_iterable(lists))
            new = [w for w in dict.fromkeys(flat) if w not in words]
            words.update(zip(new, range(len(words), len(words) + len(new))))
            ids.append(np.fromiter(map(words.__getitem__, flat), np.int32, len(flat)))
            lens.append(np.fromiter(map(len, lists), np.int64, len(lists)))
        word_ids = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        doc_of = np.repeat(np.arange(n, dtype=np.int32), np.concatenate(lens) if lens else np.zeros(0, np.int64))
        # 2. words -> terms (stopwords and one-character words -> −1), once per distinct word
        wterm = self._terms_of_words(list(words))
        self._terms = {t: i for i, t in enumerate(dict.fromkeys(t for t in wterm if t is not None))}
        word_term = np.fromiter((-1 if t is None else self._terms[t] for t in wterm), np.int32, len(wterm))
        term_of = word_term[word_ids]
        kept = term_of >= 0
        term_of, doc_of = term_of[kept], doc_of[kept]
        n_terms = len(self._terms)
        # 3. term frequencies: a (terms × documents) CSR matrix, documents ascending in each row
        tf = sp.coo_matrix((np.ones(term_of.size, np.float32), (term_of, doc_of)), shape=(n_terms, n)).tocsr()
        tf.sum_duplicates()
        doc_len = np.bincount(doc_of, minlength=n)
        avgdl = np.asarray(doc_len).mean()  # as bm25s: the mean of the documents' kept-token counts
        df = np.diff(tf.indptr)
        # 4. impacts with bm25s's own functions (the same float64 operations, rounded to float32)
        idf_fn, tfc_fn = _select_idf_scorer(p.method), _select_tfc_scorer(p.method)
        idf = np.zeros(n_terms, np.float32)
        for t, f in enumerate(df.tolist()):
            idf[t] = idf_fn(f, N=n)
        tfc = tfc_fn(tf_array=tf.data, l_d=doc_len[tf.indices], l_avg=avgdl, k1=p.k1, b=p.b, delta=DELTA)
        term_rows = np.repeat(np.arange(n_terms), df)
        impact = idf[term_rows] * tfc
        self._nonocc = None
        if p.method in ("bm25l", "bm25+"):
            nonocc = np.zeros(n_terms, np.float32)
            tfc0 = tfc_fn(tf_array=0, l_d=avgdl, l_avg=avgdl, k1=p.k1, b=p.b, delta=DELTA)
            for t, f in enumerate(df.tolist()):
                nonocc[t] = idf_fn(f, N=n) * tfc0
            impact -= nonocc[term_rows]
            self._nonocc = nonocc
        self._data = impact.astype(np.float32)
        self._indices = tf.indices.astype(np.int32, copy=False)
        self._indptr = tf.indptr.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ search

    def _const(self, terms: Sequence[int]) -> np.float32:
        """BM25L/BM25+: what every document gets for the query's terms it lacks (bm25s's float32 sum)."""
        if self._nonocc is None or not terms:
            return np.float32(0)
        return self._nonocc[np.asarray(terms, dtype=np.int32)].sum()

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """Every document's score for one tokenised query (float32, corpus order)."""
        from .bm25_kernels import dense_scores

        assert self._data is not None, "index() must run before search()"
        ids = [self._terms[t] for t in query_tokens if t in self._terms]
        if not ids:
            return np.zeros(len(self._doc_ids), dtype=np.float32)
        s = dense_scores(np.asarray(ids, dtype=np.int32), self._data, self._indices, self._indptr, len(self._doc_ids))
        if self._nonocc is not None:
            s += self._const(ids)
        return s

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """The BM25 score of each query for the documents it names (0 where no term matches)."""
        out: dict[str, dict[str, float]] = {}
        for q, toks in zip(queries, self.tokenize([q.text for q in queries])):
            s = self.scores(toks)
            out[q.id] = {d: float(s[self._rows[d]]) for d in doc_ids.get(q.id, ())}
        return out

    def topk(self, query_terms: Sequence[Sequence[int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(queries × k) document rows and float32 scores of each query's top k (row −1: empty slot)."""
        from .bm25_kernels import topk_search

        assert self._data is not None, "index() must run before search()"
        qptr = np.zeros(len(query_terms) + 1, np.int64)
        np.cumsum([len(t) for t in query_terms], out=qptr[1:])
        flat = np.fromiter(chain.from_iterable(query_terms), np.int32, int(qptr[-1]))
        const = np.array([self._const(t) for t in query_terms] if self._nonocc is not None else
                         np.zeros(len(query_terms)), dtype=np.float32)
        return topk_search(qptr, flat, const, self._nonocc is not None, self._data, self._indices, self._indptr,
                           len(self._doc_ids), max(1, min(k, len(self._doc_ids))))

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        run = Run()
        terms = self._query_terms([q.text for q in queries])
        with ctx.progress.track(len(queries), "bm25 search") as advance:
            for s in range(0, len(queries), _QUERY_BATCH):
                idx, sc = self.topk(terms[s:s + _QUERY_BATCH], k)
                run.update(run_from_matrix([q.id for q in queries[s:s + _QUERY_BATCH]], self._doc_ids, idx, sc))
                advance(len(idx))
        return run
