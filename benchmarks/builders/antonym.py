"""The antonym set: query pairs that differ by an adjective and its WordNet antonym."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from harness.types import Corpus

from .built import BuiltSet
from .clauses import CaseModel
from .construction import _PairCandidate, _clause_sentences, _pair_set, _prepare, _wordnet
from .wordnet_lookups import _WN
from .negation_rules import has_negation
from .text import _Doc
from .words import (STOPWORDS, _ALPHA_WORD, _WORD, _lower, contains_word, count_word, match_case,
                    replace_span)


def antonym_swap(passage: str, start: int, end: int, antonym: str) -> str:
    """``passage`` with ``passage[start:end]`` replaced by ``antonym`` (case kept, article
    fixed)."""
    return replace_span(passage, start, end, match_case(passage[start:end], antonym))


# Adjectives whose WordNet antonym fits another sense than the usual one in scientific text
# ("serious adverse events" → "frivolous", "profound apoptosis" → "superficial", "mild
# impairment" → "intense", "parental tumors" → "filial"): never swapped.
ANTONYM_DENYLIST = frozenset({
    "serious", "frivolous", "profound", "superficial", "sporadic", "continual", "parental",
    "filial", "adoptive", "biological", "mild", "intense", "modest", "immodest", "pure", "impure",
    "aggressive", "unaggressive", "mechanical", "nonmechanical", "spatial", "nonspatial",
    "critical", "uncritical", "verbal", "numerical", "identical", "fraternal", "confident",
    "diffident", "estimable", "contemptible", "virtuous", "wicked", "chaste", "unchaste",
    "political", "nonpolitical", "financial", "nonfinancial", "residential", "nonresidential",
    "destructive", "constructive", "noxious", "innocuous", "synonymous", "antonymous",
    "adaptive", "maladaptive", "physical", "mental",
})
MIN_ANTONYM_DF = 2        # the antonym occurs in at least two corpus documents …
MIN_ANTONYM_SEMCOR = 5    # … or is a common English word (SemCor count in WordNet)


def _word_df(corpus: Corpus) -> Counter[str]:
    """Document frequency of lower-cased alphabetic words."""
    df: Counter[str] = Counter()
    for doc in corpus:
        df.update(set(_ALPHA_WORD.findall(_lower(doc.full_text))))
    return df


MIN_COLLOCATION = 3  # "extracellular matrix" seen this often and "intracellular matrix" never: a fixed term


def _following_counts(corpus: Corpus, words: set[str]) -> Counter[tuple[str, str]]:
    """Counts of ``(w, next word)`` over the corpus for the words in ``words`` (lower case)."""
    out: Counter[tuple[str, str]] = Counter()
    if not words:
        return out
    pattern = re.compile(r"(?<![A-Za-z0-9-])(" + "|".join(sorted(map(re.escape, words))) + r") ([a-z]+)")
    for doc in corpus:
        for m in pattern.finditer(_lower(doc.full_text)):
            out[(m.group(1), m.group(2))] += 1
    return out


def _antonym_attested(ant: str, wn: _WN, df: Counter[str]) -> bool:
    if df.get(ant, 0) >= MIN_ANTONYM_DF:
        return True
    return sum(wn.lemma_count(l) for s in wn.wn.synsets(ant) for l in s.lemmas() if l.name() == ant) >= MIN_ANTONYM_SEMCOR


def _antonym_candidates(d: _Doc, wn: _WN, rejected: Counter[str], df: Counter[str]) -> list[_PairCandidate]:
    out = []
    full = d.full_text
    for k, passage, si, sentence, s_start in _clause_sentences(d, wn, rejected):
        if has_negation(sentence):  # "no therapy is available" → "… unavailable"
            rejected["clause_negated"] += 1
            continue
        words = list(_WORD.finditer(sentence))
        for wi, m in enumerate(words):
            tok = m.group(0)
            w = tok.lower()
            if not tok.isalpha() or len(w) < 4 or w in STOPWORDS:
                continue
            if tok != w and not (wi == 0 and tok == w.capitalize()):
                continue
            ant, why = wn.unambiguous_antonym(w)
            if ant is None:
                if why not in ("not_in_wordnet", "inflected_form", "no_antonym"):
                    rejected[f"keyword_{why}"] += 1  # a word with an antonym, rejected
                continue
            # the word must not start a WordNet compound ("white matter") with its neighbours
            nxt = [x.group(0) for x in words[wi + 1:wi + 3]]
            prv = words[wi - 1].group(0) if wi > 0 else ""
            if (nxt and wn.is_compound(f"{w}_{nxt[0]}")) or (len(nxt) == 2 and wn.is_compound(
                    f"{w}_{nxt[0]}_{nxt[1]}")) or (prv and wn.is_compound(f"{prv}_{w}")):
                rejected["keyword_in_compound"] += 1
                continue
            if sentence[m.end():m.end() + 1] == "-" or sentence[m.start() - 1:m.start()] == "-":
                rejected["keyword_in_compound"] += 1
                continue
            if w in ANTONYM_DENYLIST or ant in ANTONYM_DENYLIST:
                rejected["keyword_denylisted_sense"] += 1
                continue
            if not _antonym_attested(ant, wn, df):
                rejected["antonym_unattested"] += 1
                continue
            if count_word(passage, w) != 1:
                rejected["keyword_repeated_in_passage"] += 1
                continue
            if prv.lower() in ("less", "least", "non", "not"):
                rejected["keyword_after_degree_word"] += 1  # "less efficient" → "less inefficient"
                continue
            if contains_word(full, ant):
                rejected["antonym_in_document"] += 1
                continue
            new_sentence = antonym_swap(sentence, m.start(), m.end(), ant)
            new_passage = passage[:s_start] + new_sentence + passage[s_start + len(sentence):]
            follow = sentence[m.end():m.end() + 1] == " " and wi + 1 < len(words)
            out.append(_PairCandidate(
                d.id, k, si, sentence, new_sentence, new_passage,
                (("keyword", w), ("antonym", ant)),
                words[wi + 1].group(0).lower() if follow else ""))
    return out


def build_antonym(corpus: Corpus, *, seed: int = 0, max_queries: int | None = 104, source: str = "",
                  wordnet=None, data_dir: Path | None = None, online: bool = False) -> BuiltSet:
    """Antonym diagnostic: pairs of queries that differ by an adjective and its WordNet
    antonym, over the passages of one document plus the swapped copy of the keyword's
    passage."""
    wn = _wordnet(wordnet, data_dir, online)
    rejected: Counter[str] = Counter()
    docs = _prepare(corpus, rejected)
    df = _word_df(corpus)
    found = [c for d in docs for c in _antonym_candidates(d, wn, rejected, df)]
    pairs = _following_counts(corpus, {dict(c.info)[k] for c in found for k in ("keyword", "antonym")})
    by_doc: dict[str, list[_PairCandidate]] = {}
    for c in found:
        info = dict(c.info)
        if c.next_word and pairs[(info["keyword"], c.next_word)] >= MIN_COLLOCATION \
                and not pairs[(info["antonym"], c.next_word)]:
            rejected["antonym_breaks_collocation"] += 1
            continue
        by_doc.setdefault(c.doc_id, []).append(c)
    return _pair_set("antonym", "ant", {d.id: d for d in docs}, by_doc, wn,
                     CaseModel(d.full_text for d in docs), seed, max_queries, source,
                     rejected, ("original", "antonym"))
