"""Shared construction: the WordNet helper per reader, document preparation, deterministic
sampling, build parameters, and the query pairs of the antonym and negation sets."""

from __future__ import annotations

import random
import weakref
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.types import Corpus
from harness.data.wordnet import load_wordnet

from .built import BUILDER_VERSION, BuiltSet
from .clauses import CaseModel, clause_problem, make_query
from .wordnet_lookups import _WN
from .text import MIN_SENTENCES, _Doc, _split_doc
from .words import _WORD


@dataclass(frozen=True)
class _PairCandidate:
    doc_id: str
    passage: int          # 0-based passage index in the document
    sentence: int         # 0-based sentence index in the document
    original: str         # the sentence as written
    modified: str         # the sentence after the swap / negation
    passage_modified: str
    info: tuple[tuple[str, str], ...]  # provenance (key, value)
    next_word: str = ""   # the word after the swapped keyword (collocation check)


_WN_CACHE: "weakref.WeakKeyDictionary[Any, _WN]" = weakref.WeakKeyDictionary()


def _wordnet(wordnet: Any, data_dir: Path | None = None, online: bool = False) -> _WN:
    """The look-up helper for a WordNet reader (one per reader, so its caches are shared by
    every build in the process); ``data_dir``/``online`` say where :func:`load_wordnet` may look."""
    reader = wordnet if wordnet is not None else load_wordnet(data_dir, online)
    try:
        helper = _WN_CACHE.get(reader)
        if helper is None:
            helper = _WN_CACHE[reader] = _WN(reader)
        return helper
    except TypeError:  # not weak-referenceable
        return _WN(reader)


def _prepare(corpus: Corpus, rejected: Counter[str]) -> list[_Doc]:
    docs = []
    for doc in sorted(corpus, key=lambda d: d.id):
        d = _split_doc(doc)
        if len(d.sentences) < MIN_SENTENCES:
            rejected["document_too_short"] += 1
            continue
        docs.append(d)
    return docs


def _sample(keys: list[str], k: int | None, seed: int) -> list[str]:
    keys = sorted(keys)
    if k is None or k >= len(keys):
        return keys
    return sorted(random.Random(seed).sample(keys, k))


def _pick(cands: list[Any], seed: int, doc_id: str) -> Any:
    return random.Random(f"{seed}:{doc_id}").choice(cands)


def _first_word(sentence: str) -> str:
    m = _WORD.match(sentence)
    return m.group(0).split("-")[0] if m else ""


def _build_params(name: str, seed: int, max_queries: int | None, source: str, n_docs: int,
                  rejected: Counter[str], candidate_documents: int, candidates: int, selected: int,
                  **extra: Any) -> dict:
    """The ``params`` record of a built set (written to ``build.json``); ``n_docs`` counts the
    documents long enough to use, the short ones are added back from ``rejected``."""
    return {
        "builder": name,
        "version": BUILDER_VERSION,
        "seed": seed,
        "max_queries": max_queries,
        "source": source,
        "documents": n_docs + rejected.get("document_too_short", 0),
        "candidate_documents": candidate_documents,
        "candidates": candidates,
        "selected_groups": selected,
        **extra,
        "rejected": dict(sorted(rejected.items())),
    }


def _pair_set(name: str, suffix: str, docs: dict[str, _Doc], by_doc: dict[str, list[_PairCandidate]],
              wn: _WN, case: CaseModel, seed: int, max_queries: int | None, source: str,
              rejected: Counter[str], polarity: tuple[str, str]) -> BuiltSet:
    n_pairs = None if max_queries is None else max(0, max_queries) // 2
    chosen_docs = _sample(list(by_doc), n_pairs, seed)
    corpus: list[dict] = []
    queries: list[dict] = []
    picks = {doc_id: _pick(by_doc[doc_id], seed, doc_id) for doc_id in chosen_docs}
    case.prepare(_first_word(s) for c in picks.values() for s in (c.original, c.modified))
    for pair_no, doc_id in enumerate(chosen_docs):
        c: _PairCandidate = picks[doc_id]
        d = docs[doc_id]
        window = d.window(c.passage)
        ids = [f"{name}-{doc_id}-p{k + 1}" for k in window]
        passages = d.passages
        for k, pid in zip(window, ids):
            corpus.append({"doc_id": pid, "text": passages[k], "source_doc_id": doc_id})
        sat = f"{name}-{doc_id}-p{c.passage + 1}"
        vio = f"{sat}-{suffix}"
        corpus.append({"doc_id": vio, "text": c.passage_modified, "source_doc_id": doc_id})
        pool = ids + [vio]
        pair_id = f"{name}-pair{pair_no}"
        for sentence, good, bad, pol in ((c.original, sat, vio, polarity[0]),
                                         (c.modified, vio, sat, polarity[1])):
            graded = {pid: 1.0 for pid in pool}
            graded[good], graded[bad] = 2.0, 0.0
            q = {
                "query_id": f"{name}-q{len(queries)}",
                "query": make_query(sentence, wn, case),
                "category": name,
                "topical_relevant_doc_ids": list(pool),
                "constraint_satisfying_doc_ids": [good],
                "constraint_violating_doc_ids": [bad],
                "graded_relevance": graded,
                "source_doc_id": doc_id,
                "pair_id": pair_id,
                "polarity": pol,
                "sentence": sentence,
            }
            q.update(dict(c.info))
            queries.append(q)
    params = _build_params(name, seed, max_queries, source, len(docs), rejected, len(by_doc),
                           sum(len(v) for v in by_doc.values()), len(chosen_docs))
    return BuiltSet(name=name, corpus=corpus, queries=queries, params=params)


def _clause_sentences(d: _Doc, wn: _WN, rejected: Counter[str]) -> Iterator[tuple[int, str, int, str, int]]:
    """``(passage index, passage, sentence index, sentence, start in passage)`` for every sentence
    of ``d`` that passes :func:`clause_problem` (the others are counted in ``rejected``)."""
    passages = d.passages
    for k, (a, b) in enumerate(d.spans):
        passage = passages[k]
        offset = 0
        for si in range(a, b):
            sentence = d.sentences[si]
            s_start = passage.index(sentence, offset)
            offset = s_start + len(sentence)
            problem = clause_problem(sentence, wn)
            if problem:
                rejected[problem] += 1
                continue
            yield k, passage, si, sentence, s_start
