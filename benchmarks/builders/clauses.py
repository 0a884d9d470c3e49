"""Query clauses: which sentences can become a query, how the corpus writes a capitalised
first word, and the query text itself."""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from .wordnet_lookups import _WN
from .words import (ANAPHORA, BAD_START_PAIRS, BAD_STARTS, CONNECTIVES, REPORTING_WORDS, STOPWORDS, _WORD,
                    _lower, _positions_lower)

QUERY_TEMPLATE = "Find evidence that {clause}"
CLAUSE_MIN_WORDS, CLAUSE_MAX_WORDS = 8, 30

AUXILIARIES = ("is", "are", "was", "were", "has", "have", "had", "can", "could", "may", "might",
               "will", "would", "should", "must", "does", "do", "did")
MODALS = frozenset({"can", "could", "may", "might", "will", "would", "should", "must"})
_FORBIDDEN_CHARS = frozenset("()[]{};:=<>±%\u2264\u2265\u00b1|@#&*\"\u201c\u201d+")
_NUMERIC = re.compile(r"^[\d.,\u2013-]+$")
_HAS_DIGIT = re.compile(r"\d")


def clause_problem(sentence: str, wn: _WN) -> str | None:
    """Cached :func:`_clause_problem` (the antonym and negation builders test the same
    sentences)."""
    cache = wn.clause_cache
    if sentence not in cache:
        cache[sentence] = _clause_problem(sentence, wn)
    return cache[sentence]


def _clause_problem(sentence: str, wn: _WN) -> str | None:
    """Why ``sentence`` cannot become a query clause (``None`` when it can): it must be one
    self-contained declarative sentence of 8–30 words ending with a full stop, without
    brackets, semicolons, colons, citations, quotes or heavy numbers, not starting with a
    connective, pronoun or framing phrase, without first-person or anaphoric words, and with a
    finite verb."""
    words = sentence.split()
    if not (CLAUSE_MIN_WORDS <= len(words) <= CLAUSE_MAX_WORDS):
        return "clause_length"
    if not sentence.endswith(".") or sentence.endswith(("..", "etc.", "al.")):
        return "clause_not_declarative"
    if not sentence[0].isupper():
        return "clause_start"
    if not _FORBIDDEN_CHARS.isdisjoint(sentence) or " et al" in sentence:
        return "clause_punctuation"
    tokens = [w.strip(".,'\u2019") for w in words]
    if _HAS_DIGIT.search(sentence):
        with_digits = [t for t in tokens if _HAS_DIGIT.search(t)]
        numeric = sum(1 for t in with_digits if _NUMERIC.match(t))
        if numeric > 1 or len(with_digits) > 3:
            return "clause_numbers"
    low = [t.lower() for t in tokens]
    if low[0] in BAD_STARTS or (low[0], low[1]) in BAD_START_PAIRS or low[0].endswith("ing"):
        return "clause_start"
    if low[1] in ("with", "to", "of", "for") and "a" in wn.pos(low[0]) and "n" not in wn.pos(low[0]):
        return "clause_start"  # "Consistent with …, X did Y", "Similar to …"
    if any(t in CONNECTIVES for t in low):
        return "clause_connective"  # "The helmet, however, was …"
    if any(t in ANAPHORA for t in low):
        return "clause_anaphora"
    if any(t == "such" and (i + 1 >= len(low) or low[i + 1] != "as") for i, t in enumerate(low)):
        return "clause_anaphora"
    if any(t in REPORTING_WORDS for t in low):
        return "clause_reporting"
    if "?" in sentence or "!" in sentence:
        return "clause_not_declarative"
    if not any(t in AUXILIARIES for t in low) and not any(_finite_verb_like(t, wn) for t in low[1:]):
        return "clause_no_verb"
    return None


def _finite_verb_like(token: str, wn: _WN) -> bool:
    """An inflected (``-ed``/``-s``) form of a verb that has no noun reading."""
    if not token.endswith(("ed", "s")) or token in STOPWORDS or not token.isalpha():
        return False
    got = wn.finite_cache.get(token)
    if got is None:
        pos = wn.pos(token)
        got = "v" in pos and "n" not in pos and any(b != token for b in wn.verb_bases(token))
        wn.finite_cache[token] = got
    return got


class CaseModel:
    """Whether a capitalised sentence-initial word is an ordinary word (lower-cased in a query)
    or a name: decided by how the corpus writes the word inside sentences (after a lower-case
    word, digit or comma), with WordNet as the fallback for words seen nowhere else. Counts are
    gathered on demand for the words asked about (:meth:`prepare` does many in one pass)."""

    def __init__(self, texts: Iterable[str] = ()):
        self.text = "\n".join(texts)
        self._low: str | None = None
        self.lower: Counter[str] = Counter()
        self.upper: Counter[str] = Counter()
        self._done: set[str] = set()

    def prepare(self, words: Iterable[str]) -> None:
        todo = sorted({w.lower() for w in words if w and w.isalpha()} - self._done)
        if not todo:
            return
        self._done.update(todo)
        if self._low is None:
            self._low = _lower(self.text)
        text, low = self.text, self._low
        for w in todo:
            for i in _positions_lower(low, w):
                # inside a sentence: after "<lower-case letter, digit, comma or semicolon> "
                if i < 2 or low[i - 1] != " " or not (text[i - 2].islower() or text[i - 2].isdigit()
                                                      or text[i - 2] in ",;"):
                    continue
                after = text[i + len(w):i + len(w) + 1]
                if after in ("-", "/", "'", "\u2019", "("):
                    continue
                form = text[i:i + len(w)]
                if form[1:] != form[1:].lower():
                    continue
                (self.lower if form[0].islower() else self.upper)[w] += 1

    def is_name(self, word: str, wn: _WN | None) -> bool | None:
        low = word.lower()
        if low not in self._done:
            self.prepare([low])
        lo, up = self.lower.get(low, 0), self.upper.get(low, 0)
        if lo or up:
            return up > lo
        if wn is not None:
            return not _is_common_word(low, wn)
        return None


def lowercase_first(sentence: str, wn: _WN | None, case: CaseModel | None = None) -> str:
    """Lower-case the first letter unless the first word is a name, acronym or symbol (kept
    as written): function words are always lower-cased; other words when the corpus writes
    them in lower case inside sentences (``case``) or, failing that, when they are WordNet
    lemmas."""
    first_token = sentence.split(" ", 1)[0].rstrip(",.")
    m = _WORD.match(sentence)
    if not m:
        return sentence
    first = m.group(0)
    low = first.lower()
    if first_token != first and not re.fullmatch(r"[A-Za-z]+-[a-z0-9-]+", first_token):
        return sentence  # "Dot/Icm-translocated", "IL-6", "Sox2-bound" …
    if first[1:] != first[1:].lower() or any(c.isdigit() for c in first_token):
        return sentence  # acronym / mixed case / gene name
    head = low.split("-")[0]
    if head in STOPWORDS:
        return low + sentence[len(first):]
    name = case.is_name(head, wn) if case is not None else None
    if name is None:  # no evidence at all: a capitalised word at a sentence start is ordinary
        name = not _is_common_word(head, wn) if wn is not None else False
    return sentence if name else low + sentence[len(first):]


def _is_common_word(word: str, wn: _WN) -> bool:
    """``word`` (or a base form of it) is a lower-case WordNet lemma (not only a proper name)."""
    bases = {word}
    for pos in ("n", "v", "a", "r"):
        bases.update(wn.wn._morphy(word, pos))
    return any(lemma.name() in bases for s in wn.wn.synsets(word) for lemma in s.lemmas())


def make_query(sentence: str, wn: _WN | None, case: CaseModel | None = None) -> str:
    """``Find evidence that <sentence, first letter lower-cased unless a name>``."""
    return QUERY_TEMPLATE.format(clause=lowercase_first(sentence, wn, case))
