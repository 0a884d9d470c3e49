"""The exclusion set: "Find passages about X that do not mention Y." over three passages of one
document."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.types import Corpus

from .built import BuiltSet
from .clauses import CaseModel
from .construction import _build_params, _sample, _wordnet
from .wordnet_lookups import _WN
from .terms import (MAX_TERM_DOC_FRACTION, _DocFreq, _PassageWords, _aliases, _definitions, _doc_terms,
                    _related, _synonyms, _term_forms, _term_tokens, _variants)
from .text import MIN_SENTENCES, _Doc, _split_doc
from .words import _ALPHA_WORD, word_positions

EXCLUSION_TEMPLATE = "Find passages about {x} that do not mention {y}."


def _surface(term: str, passages: Sequence[str], case: CaseModel, wn: _WN) -> str:
    """How ``term`` is written in the document: lower case when it occurs in lower case or is
    an ordinary word capitalised only by title case, else its most frequent form."""
    forms: Counter[str] = Counter()
    for p in passages:
        forms.update(p[i:i + len(term)] for i in word_positions(p, term))
    if not forms or term in forms:
        return term
    best = sorted(forms.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    words = best.split()
    if re.fullmatch(r"[A-Z][a-z]+", words[0]) and all(re.fullmatch(r"[A-Z]?[a-z]+", w) for w in words[1:]) \
            and not any(case.is_name(w, wn) for w in words if w[0].isupper()):
        return term  # capitalised only at a sentence start or in a title
    return best


@dataclass(frozen=True)
class _ExclCandidate:
    doc_id: str
    x: str
    y: str
    sat: int
    vio: int
    neu: int
    score: float


def _substantial(passage: str) -> bool:
    """A passage with at least eight words, most of them words (not a citation or a table row)."""
    words = passage.split()
    return len(words) >= 8 and sum(1 for w in words if _ALPHA_WORD.fullmatch(w.strip(".,;:()"))) >= 0.6 * len(words)


MAX_TERMS_TRIED = 40  # X and Y candidates tried per document, highest IDF first


def _exclusion_candidate(d: _Doc, passage_tokens: list[list[str | None]], wn: _WN, dfs: _DocFreq,
                         rejected: Counter[str]) -> _ExclCandidate | None:
    """The best (highest IDF(X) + IDF(Y)) exclusion triple of a document, or ``None``."""
    passages = d.passages
    index = [_PassageWords(p) for p in passages]
    substantial = [_substantial(p) for p in passages]
    n = len(passages)
    terms = _doc_terms(passage_tokens, wn, dfs)
    xs = sorted((t for t, ks in terms.items() if len(ks) >= 2), key=lambda t: (-dfs.idf(t), t))[:MAX_TERMS_TRIED]
    if not xs:
        rejected["no_repeated_term"] += 1
        return None
    # Y: a term in exactly one passage (checked lazily: no variant of it in any other passage)
    ys = sorted(((t, next(iter(ks))) for t, ks in terms.items() if len(ks) == 1),
                key=lambda yv: (-dfs.idf(yv[0]), yv[0]))
    if not ys:
        rejected["no_single_passage_term"] += 1
        return None
    valid: dict[str, bool] = {}
    doc_text = " ".join(passages)
    definitions = _definitions(doc_text)

    def only_in(y: str, vio: int) -> bool:
        """No variant or alias ("intracranial aneurysm" / "IA") of Y outside its passage."""
        if y not in valid:
            vs = _term_forms(_variants(y, wn) | _aliases(y, definitions))
            valid[y] = all(k == vio or not index[k].has_any(vs) for k in range(n))
        return valid[y]

    top_y = dfs.idf(ys[0][0])
    best: _ExclCandidate | None = None
    reasons: set[str] = set()
    for x in xs:
        idf_x = dfs.idf(x)
        if best is not None and idf_x + top_y <= best.score:
            break  # no later X (lower IDF) can beat the best pair
        x_in = [k for k in range(n) if index[k].has(x)]
        x_aliases = _aliases(x, definitions)
        vs = _term_forms(_variants(x, wn) | x_aliases)
        x_any = [k for k in range(n) if index[k].has_any(vs)]
        tried = 0
        for y, vio in ys:
            if vio not in x_in:
                continue
            if _related(x, y, wn):
                reasons.add("y_variant_of_x")
                continue
            if not only_in(y, vio):
                continue
            tried += 1
            if tried > MAX_TERMS_TRIED:
                break
            sats = [k for k in x_in if k != vio]
            neus = [k for k in range(n) if k not in x_any and k != vio and substantial[k]]
            if not sats:
                continue
            if not neus:
                reasons.add("no_neutral_passage")
                continue
            if _synonyms(x, y, doc_text) or any(y in a or a in y for a in x_aliases):
                reasons.add("y_variant_of_x")  # "EBI2" / "Epstein-Barr virus(-induced gene 2)"
                continue
            sat = min(sats, key=lambda k: (abs(k - vio), k))
            neu = min(neus, key=lambda k: (abs(k - vio), k))
            cand = _ExclCandidate(d.id, x, y, sat, vio, neu, idf_x + dfs.idf(y))
            if best is None or cand.score > best.score:
                best = cand
            break  # the rarest Y for this X
    if best is None:
        rejected["no_neutral_passage" if "no_neutral_passage" in reasons
                 else "y_variant_of_x" if "y_variant_of_x" in reasons else "no_x_y_pair"] += 1
    return best


def build_exclusion(corpus: Corpus, *, seed: int = 0, max_queries: int | None = 104, source: str = "",
                    wordnet=None, data_dir: Path | None = None, online: bool = False) -> BuiltSet:
    """Exclusion diagnostic: "Find passages about X that do not mention Y." over three passages
    of one document — one mentions X but not Y (satisfying, 2), one mentions X and Y
    (violating, 0), one mentions neither (neutral, 1)."""
    wn = _wordnet(wordnet, data_dir, online)
    rejected: Counter[str] = Counter()
    split = [_split_doc(doc) for doc in sorted(corpus, key=lambda d: d.id)]
    sent_tokens = {d.id: [_term_tokens(s) for s in d.sentences] for d in split}
    dfs = _DocFreq([_term_tokens(d.title) + [None] + [t for ts in sent_tokens[d.id] for t in ts]
                    for d in split])
    docs = []
    for d in split:
        if len(d.sentences) < MIN_SENTENCES:
            rejected["document_too_short"] += 1
        else:
            docs.append(d)
    by_doc: dict[str, _ExclCandidate] = {}
    for d in docs:
        passage_tokens = [[t for ts in sent_tokens[d.id][a:b] for t in ts] for a, b in d.spans]
        c = _exclusion_candidate(d, passage_tokens, wn, dfs, rejected)
        if c is not None:
            by_doc[d.id] = c
    chosen = _sample(list(by_doc), max_queries, seed)
    dmap = {d.id: d for d in docs}
    case = CaseModel(d.full_text for d in docs)
    corpus_out: list[dict] = []
    queries: list[dict] = []
    for doc_id in chosen:
        c = by_doc[doc_id]
        passages = dmap[doc_id].passages
        ids = {}
        for k in sorted((c.sat, c.vio, c.neu)):
            ids[k] = f"exclusion-{doc_id}-p{k + 1}"
            corpus_out.append({"doc_id": ids[k], "text": passages[k], "source_doc_id": doc_id})
        x, y = _surface(c.x, passages, case, wn), _surface(c.y, passages, case, wn)
        graded = {ids[c.sat]: 2.0, ids[c.vio]: 0.0, ids[c.neu]: 1.0}
        queries.append({
            "query_id": f"exclusion-q{len(queries)}",
            "query": EXCLUSION_TEMPLATE.format(x=x, y=y),
            "category": "exclusion",
            "topical_relevant_doc_ids": [ids[k] for k in sorted(ids)],
            "constraint_satisfying_doc_ids": [ids[c.sat]],
            "constraint_violating_doc_ids": [ids[c.vio]],
            "graded_relevance": graded,
            "source_doc_id": doc_id,
            "included_term": x,
            "excluded_term": y,
        })
    params = _build_params("exclusion", seed, max_queries, source, len(docs), rejected, len(by_doc), len(by_doc),
                           len(chosen), max_term_doc_fraction=MAX_TERM_DOC_FRACTION)
    return BuiltSet(name="exclusion", corpus=corpus_out, queries=queries, params=params)
