"""Timing of the bm25 retriever against rank-bm25 and bm25s on their own, in CPU seconds.

    python -m tests.perf.bm25 [--docs 100000] [--queries 1000] [--k 100] [--rank-bm25-queries 100]
                              [--corpus zipf,scifact] [--old] [--data-dir ../shared/data]

Corpora (one run times every figure on each):

* ``zipf``: ``--docs`` synthetic documents of 20–180 tokens (uniform) drawn from a Zipf law
  (exponent 1.07) over 50,000 random lowercase words of 3–10 letters; ``--queries`` queries of
  3–8 tokens drawn from the same law.
* ``scifact``: BEIR SciFact's 5,183 documents (through the benchmark loader) repeated until
  ``--docs`` (×20 gives 103,660; each copy its own id, so every score ties with its copies: the
  tie order is exercised too), and the first ``--queries`` of its 1,409 queries.

Timed (``time.process_time``, so other load on the machine does not count, and every thread of
the process does):

* ``ours``: :class:`retrievers.bm25.BM25Retriever` ``index`` and ``search`` (top ``--k``, the
  runner's depth by default), as the runner calls them. The numba kernels are compiled (or loaded
  from numba's cache) on a toy index first, and bm25s's numba search is warmed up the same way;
* ``bm25s alone``: ``bm25s.tokenize(texts, stopwords="en")`` + ``bm25s.BM25().index(...)`` (its
  default backend) — the index reference — and its numba-backend ``retrieve`` (single thread) on
  that index for the search, shown for information;
* ``rank-bm25``: ``BM25Okapi`` on the same tokens; search is ``get_scores`` + ``argsort`` top k
  per query (its ``get_top_n``), timed on the first ``--rank-bm25-queries`` queries and scaled
  linearly to all of them (its cost per query does not depend on the other queries): printed as
  an estimate;
* with ``--old``: the retriever as it was before the compiled search (bm25s tokenize to strings,
  ``BM25.index``, one ``get_scores_from_ids`` + ``harness.core.topk.topk_indices`` per query).

Afterwards (not timed) our rankings are checked equal — ids, scores and order — to bm25s's
scores ranked by (score descending, corpus order), over every query.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from harness.protocols import RunContext
from harness.core.topk import topk_indices
from harness.types import Corpus, Document, Query
from retrievers.bm25 import BM25Retriever

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def zipf_corpus(n_docs: int, n_queries: int, vocab: int = 50_000, s: float = 1.07,
                seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype="S1")
    words: dict[str, None] = {}
    while len(words) < vocab:
        for ln in rng.integers(3, 11, size=vocab):
            words[b"".join(rng.choice(letters, size=ln)).decode()] = None
    lex = np.array(list(words)[:vocab], dtype=object)
    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1) ** s)
    cdf /= cdf[-1]

    def draw(lo: int, hi: int, n: int) -> list[str]:
        lens = rng.integers(lo, hi + 1, size=n)
        toks = lex[np.minimum(np.searchsorted(cdf, rng.random(int(lens.sum()))), vocab - 1)]
        bounds = np.concatenate([[0], np.cumsum(lens)])
        return [" ".join(toks[bounds[i]:bounds[i + 1]]) for i in range(n)]

    return draw(20, 180, n_docs), draw(3, 8, n_queries)


def scifact_corpus(n_docs: int, n_queries: int, data_dir: Path) -> tuple[list[str], list[str]]:
    from harness.registry import load_benchmark

    base = load_benchmark("beir/scifact", data_dir).corpus.texts()
    texts = (base * (n_docs // len(base) + 1))[:n_docs] if n_docs > len(base) else base[:n_docs]
    with open(data_dir / "beir" / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:n_queries]
    return texts, queries


def cpu(fn):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


class OldBM25:
    """The retriever's path before the compiled search, kept here as the 'before' figure."""

    def __init__(self) -> None:
        import bm25s

        self.bm25s = bm25s

    def index(self, texts: list[str]) -> None:
        tokens = self.bm25s.tokenize(texts, lower=True, stopwords="en", return_ids=False, show_progress=False)
        self.model = self.bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        self.model.index(tokens, show_progress=False)
        self.n = len(texts)

    def search(self, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
        out = []
        for toks in self.bm25s.tokenize(queries, lower=True, stopwords="en", return_ids=False, show_progress=False):
            ids = self.model.get_tokens_ids(toks)
            s = self.model.get_scores_from_ids(ids) if ids else np.zeros(self.n, np.float32)
            idx = topk_indices(s, k, drop_nonpositive=True)
            out.append([(int(j), float(s[j])) for j in idx])
        return out


def warm_up() -> None:
    import bm25s

    r = BM25Retriever()
    r.index(Corpus([Document("a", "warm up words"), Document("b", "more words")]), RunContext())
    r.search([Query("q", "words")], 1, RunContext())
    r.scores(["words"])
    m = bm25s.BM25(backend="numba")
    m.index(bm25s.tokenize(["warm up words", "more words"], show_progress=False), show_progress=False)
    m.retrieve(bm25s.tokenize(["words"], show_progress=False, return_ids=False), k=1, show_progress=False)


def bench(name: str, texts: list[str], queries: list[str], args: argparse.Namespace) -> dict[str, float]:
    import bm25s
    from rank_bm25 import BM25Okapi

    print(f"\n== {name}: {len(texts):,} documents, {len(queries):,} queries, top {args.k}")
    corpus = Corpus(Document(f"d{i}", t) for i, t in enumerate(texts))
    qs = [Query(f"q{i}", t) for i, t in enumerate(queries)]
    ctx = RunContext()
    t: dict[str, float] = {}

    r = BM25Retriever()
    _, t["ours index"] = cpu(lambda: r.index(corpus, ctx))
    run, t["ours search"] = cpu(lambda: r.search(qs, args.k, ctx))

    tok, t_tok = cpu(lambda: bm25s.tokenize(texts, stopwords="en", show_progress=False))
    ref = bm25s.BM25()  # its default (numpy) backend: the numba one compiles its CSC builder per instance
    _, t_idx = cpu(lambda: ref.index(tok, show_progress=False))
    t["bm25s alone index"] = t_tok + t_idx
    print(f"bm25s alone: tokenize {t_tok:.2f} s + index {t_idx:.2f} s")
    ref.backend = "numba"  # search with its numba kernel (compiled in warm_up)
    qtok = bm25s.tokenize(queries, stopwords="en", show_progress=False, return_ids=False)
    _, t["bm25s alone search"] = cpu(lambda: ref.retrieve(qtok, k=args.k, show_progress=False, n_threads=1))

    tokens = r.tokenize(texts)
    qtokens = r.tokenize(queries)
    okapi, t["rank-bm25 index"] = cpu(lambda: BM25Okapi(tokens))
    n_rb = min(args.rank_bm25_queries, len(queries))

    def rank_bm25_search() -> None:
        for q in qtokens[:n_rb]:
            np.argsort(okapi.get_scores(q))[::-1][:args.k]

    _, t_rb = cpu(rank_bm25_search)
    t["rank-bm25 search"] = t_rb * len(queries) / n_rb
    del okapi

    if args.old:
        old = OldBM25()
        _, t["old index"] = cpu(lambda: old.index(texts))
        old_run, t["old search"] = cpu(lambda: old.search(queries, args.k))
        assert all(run[f"q{i}"] == [(f"d{j}", s) for j, s in got] for i, got in enumerate(old_run))
        print("rankings equal to the old path: yes")

    # not timed: our rankings against bm25s's own scores ranked by (score desc, corpus order)
    for i, toks in enumerate(qtok):
        ids = ref.get_tokens_ids(toks)
        s = ref.get_scores_from_ids(ids) if ids else np.zeros(len(texts), np.float32)
        order = np.lexsort((np.arange(s.size), -s))
        want = [(f"d{j}", float(s[j])) for j in order[:args.k] if s[j] > 0]
        assert run[f"q{i}"] == want, f"query {i}: rankings differ"
    print(f"rankings equal to bm25s's scores (ids, scores, tie order), all {len(queries):,} queries: yes")

    for key, v in t.items():
        est = f"  (estimated from {n_rb} queries)" if key == "rank-bm25 search" else ""
        print(f"{key:>20}: {v:9.3f} s{est}")
    print(f"search: rank-bm25 / ours = {t['rank-bm25 search'] / t['ours search']:.0f}×   "
          f"(target ≥ 500×; bm25s alone / ours = {t['bm25s alone search'] / t['ours search']:.2f}×)")
    print(f"index: ours / bm25s alone = {t['ours index'] / t['bm25s alone index']:.2f}   (target ≤ 1)")
    if args.old:
        print(f"before: search rank-bm25 / old = {t['rank-bm25 search'] / t['old search']:.0f}×, "
              f"index old / bm25s alone = {t['old index'] / t['bm25s alone index']:.2f}; "
              f"old / ours: search {t['old search'] / t['ours search']:.1f}×, index {t['old index'] / t['ours index']:.1f}×")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--rank-bm25-queries", type=int, default=100)
    ap.add_argument("--corpus", default="zipf,scifact")
    ap.add_argument("--old", action="store_true", help="also time the retriever's path before the compiled search")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    args = ap.parse_args()
    warm_up()
    for name in args.corpus.split(","):
        if name == "zipf":
            texts, queries = zipf_corpus(args.docs, args.queries)
        elif name == "scifact":
            texts, queries = scifact_corpus(args.docs, args.queries, args.data_dir)
        else:
            raise SystemExit(f"unknown corpus {name!r}: use zipf, scifact")
        bench(name, texts, queries, args)


if __name__ == "__main__":
    main()
