"""Builders for the antonym, negation and exclusion diagnostic sets, from any corpus.

CoDeR (arXiv 2606.13204, Appendix A, Table 5) builds three controlled diagnostics: an antonym set
from SciFact (102 queries / 306 passages), a negation set from SciDocs (104 / 304) and an
exclusion set from NFCorpus (104 / 312). The builders here reproduce that construction for any
:class:`harness.types.Corpus`, with explicit, deterministic rules:

* every candidate document (at least four sentences) is split into passages of 1–3 consecutive
  sentences; a group keeps 3–5 passages of one document;
* ``antonym``: one passage is copied with an adjective ``w`` replaced by its WordNet antonym;
  two queries ("Find evidence that <sentence with w>." / "... with the antonym") share the
  group's passages. For each query its own passage is satisfying (grade 2), the swapped copy
  violating (0), the other passages neutral (1);
* ``negation``: the same with a negated copy of one sentence (``not`` after an auxiliary, or
  ``does not`` / ``did not`` before an unambiguous verb);
* ``exclusion``: "Find passages about X that do not mention Y." over three passages of one
  document: one with X and without Y (2), one with X and Y (0), one with neither (1).

Output records follow the released CoDeR schema (``queries_<set>.jsonl``: ``query_id, query,
category, topical_relevant_doc_ids, constraint_satisfying_doc_ids,
constraint_violating_doc_ids, graded_relevance``; ``corpus_<set>.jsonl``: ``doc_id, text``) with
provenance keys added (``source_doc_id``, the keyword / terms used, ``pair_id``). Passage ids are
``<set>-<source doc id>-p<k>`` (``k`` = 1-based passage position in the source document), the
modified copy ``...-p<k>-ant`` / ``...-p<k>-neg``; query ids ``<set>-q<n>``.

Sampling is deterministic: candidate documents are sorted by id, then ``random.Random(seed)``
samples ``max_queries // 2`` of them for pairs (antonym, negation) or ``max_queries`` (exclusion),
one group per document (``max_queries=None``: every candidate document). Within a document the
antonym/negation candidate is drawn with ``random.Random(f"{seed}:{doc_id}")``; the exclusion
triple is the one with the highest IDF(X) + IDF(Y). Every rejected candidate is counted by
reason in ``params["rejected"]``.

Use :func:`load_wordnet` for WordNet offline (the data directory's ``nltk_data-wordnet.tar.gz``,
Debian's ``wordnet-base``, or ``online=True``).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import random
import re
import tempfile
import weakref
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from harness.types import Corpus, Document
# re-exported: the WordNet loader lives in harness.wordnet (CoDeR's trainer uses it too)
from harness.wordnet import (WORDNET_TARBALL, WordNetUnavailable, extract_wordnet_tarball,  # noqa: F401
                             load_wordnet)

BUILDER_VERSION = "1.0"
SET_NAMES = ("antonym", "negation", "exclusion")
QUERY_TEMPLATE = "Find evidence that {clause}"
EXCLUSION_TEMPLATE = "Find passages about {x} that do not mention {y}."

MIN_SENTENCES = 4  # a candidate document has at least four passages' worth of sentences
MAX_GROUP_PASSAGES = 5
MAX_SENTENCES_PER_PASSAGE = 3
CLAUSE_MIN_WORDS, CLAUSE_MAX_WORDS = 8, 30

# --------------------------------------------------------------------------------------------
# Sentences and passages
# --------------------------------------------------------------------------------------------

# words that end with a dot without ending the sentence (units such as "min." are left out: they
# often do end one); "No." only capitalised ("No. 5")
ABBREVIATIONS = frozenset({
    "e.g", "i.e", "al", "fig", "figs", "vs", "cf", "approx", "ca", "dr", "mr", "mrs", "ms",
    "prof", "nos", "vol", "vols", "eq", "eqs", "ref", "refs", "resp", "st", "jr", "sr",
    "inc", "ltd", "co", "corp", "dept", "univ", "spp", "sp", "var", "eds", "pp",
    "sect", "suppl", "viz",
})
_BOUNDARY = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+")
_NEXT_STARTS_SENTENCE = re.compile(r"[\"'\u201c\u2018(\[]?[A-Z0-9]")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # e.g / i.e / U.S (final dot excluded)

# Section labels of structured abstracts ("BACKGROUND ...", "DESIGN, SETTING, AND PATIENTS ...",
# "[Purpose] ..."), removed from the start of a sentence.
SECTION_LABELS = frozenset({
    "abstract", "aim", "aims", "background", "conclusion", "conclusions", "context", "design",
    "discussion", "evidence", "findings", "funding", "importance", "interpretation",
    "intervention", "interventions", "introduction", "main", "materials", "measure", "measures",
    "measurement", "measurements", "method", "methods", "methodology", "motivation",
    "objective", "objectives", "outcome", "outcomes", "participants", "patients", "purpose",
    "rationale", "result", "results", "review", "setting", "settings", "significance", "study",
    "subjects", "summary", "synthesis", "trial", "unlabelled", "data", "sources", "selection",
    "extraction", "limitations", "registration", "population", "approach", "observations",
    "hypothesis", "principal", "case", "presentation", "and", "of", "&",
})
_CAPS_LABEL = re.compile(r"^((?:[A-Z&]{2,}[,:]?\s+)+)(?=[\"'(\[]?[A-Z0-9])")
_BRACKET_LABEL = re.compile(r"^\[[A-Za-z ]{2,40}\]:?\s*")


def _strip_label(sentence: str) -> str:
    s = _BRACKET_LABEL.sub("", sentence)
    m = _CAPS_LABEL.match(s)
    if m:
        words = [w.strip(",:").lower() for w in m.group(1).split()]
        if all(w in SECTION_LABELS for w in words) and any(w not in ("and", "of", "&") for w in words):
            s = s[m.end():]
    return s.strip()


def split_sentences(text: str) -> list[str]:
    """Regex sentence splitter (see :func:`_split_sentences`); results are cached by text."""
    return list(_split_sentences(text))


@lru_cache(maxsize=65536)
def _split_sentences(text: str) -> tuple[str, ...]:
    """Regex sentence splitter: a boundary is ``.``/``!``/``?`` (plus closing quotes or brackets)
    followed by whitespace and an upper-case letter, digit or opening bracket, unless the word
    before the dot is an abbreviation (``e.g.``, ``i.e.``, ``et al.``, ``Fig.``, ``vs.`` …), a
    dotted abbreviation (``U.S.``) or a single-letter initial (``J. Smith``). Decimals never split
    (no whitespace after their dot). Line breaks are hard boundaries. Section labels of
    structured abstracts (``BACKGROUND``, ``[Methods]``) are removed."""
    out: list[str] = []
    for block in re.split(r"\s*\n\s*", text):
        block = re.sub(r"\s+", " ", block).strip()
        if not block:
            continue
        start = 0
        for m in _BOUNDARY.finditer(block):
            if block[m.start()] == "." and _is_abbreviation(block[start:m.start()]):
                continue
            if not _NEXT_STARTS_SENTENCE.match(block, m.end()):
                continue
            out.append(block[start:m.end()].strip())
            start = m.end()
        out.append(block[start:].strip())
    sentences = [_strip_label(s) for s in out]
    return tuple(s for s in sentences if s)


def _is_abbreviation(before: str) -> bool:
    words = before.split()
    if not words:
        return False
    last = words[-1].lstrip("(\"'[")
    low = last.lower()
    if low in ABBREVIATIONS or _DOTTED.fullmatch(last) or last == "No":
        return True
    if len(last) == 1 and last.isalpha() and last.isupper():
        return True  # an initial
    return False


def passage_partition(n_sentences: int) -> list[tuple[int, int]]:
    """Sentence index ranges ``[start, end)`` of the passages of a document with
    ``n_sentences`` sentences: ``max(ceil(n/3), min(5, n))`` passages of balanced size (1–3
    sentences each)."""
    if n_sentences <= 0:
        return []
    p = max(math.ceil(n_sentences / MAX_SENTENCES_PER_PASSAGE), min(MAX_GROUP_PASSAGES, n_sentences))
    base, extra = divmod(n_sentences, p)
    spans, start = [], 0
    for i in range(p):
        size = base + (1 if i < extra else 0)
        spans.append((start, start + size))
        start += size
    return spans


@dataclass
class _Doc:
    """A source document split into sentences and passages (lists of sentence indices)."""

    id: str
    title: str
    sentences: list[str]
    spans: list[tuple[int, int]]

    @property
    def passages(self) -> list[str]:
        return [" ".join(self.sentences[a:b]) for a, b in self.spans]

    def window(self, k: int) -> list[int]:
        """Passage indices of the group around passage ``k`` (at most five, consecutive)."""
        n = len(self.spans)
        if n <= MAX_GROUP_PASSAGES:
            return list(range(n))
        lo = min(max(0, k - MAX_GROUP_PASSAGES // 2), n - MAX_GROUP_PASSAGES)
        return list(range(lo, lo + MAX_GROUP_PASSAGES))

    @property
    def full_text(self) -> str:
        return f"{self.title} {' '.join(self.sentences)}"


def _split_doc(doc: Document) -> _Doc:
    sentences = split_sentences(doc.text)
    return _Doc(doc.id, doc.title or "", sentences, passage_partition(len(sentences)))


# --------------------------------------------------------------------------------------------
# Words, matching, articles
# --------------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['\u2019-][A-Za-z0-9]+)*")
_ALPHA_WORD = re.compile(r"[A-Za-z]+")

STOPWORDS = frozenset("""
a about above across after again against all almost alone along already also although always am
among an and another any anybody anyone anything anywhere are around as at be became because
become becomes been before being below beside besides between beyond both but by can cannot
could did do does doing done down during each either else enough etc even ever every few for
from further had has have having he her here hers herself him himself his how however i if in
into is it its itself just least less many may me might more most much must my myself near
neither never no nobody none nor not nothing now of off often on once one only onto or other
others otherwise our ours ourselves out over own per perhaps rather same several shall she
should since so some something sometimes still such than that the their theirs them themselves
then there thereby therefore these they this those though through throughout thus to together
too toward towards under unless until up upon us very via was we well were what whatever when
whenever where whereas whereby wherein whether which while who whoever whole whom whose why will
with within without would yet you your yours yourself yourselves
""".split())

# words a query sentence must not contain (first person, anaphora, deixis): the sentence must
# read as a self-contained claim
ANAPHORA = frozenset({
    "we", "our", "ours", "us", "i", "my", "this", "these", "those", "it", "its", "they", "their",
    "them", "here", "herein", "hereby", "above", "below", "aforementioned", "latter", "former",
    "he", "she", "his", "her", "thereof", "therein", "respectively",
})
# first words (or first two words) that make a sentence depend on its context or not a claim
BAD_STARTS = frozenset({
    "however", "moreover", "furthermore", "additionally", "also", "thus", "therefore", "hence",
    "consequently", "finally", "first", "firstly", "second", "secondly", "third", "then",
    "overall", "together", "collectively", "similarly", "conversely", "nevertheless",
    "nonetheless", "indeed", "importantly", "notably", "interestingly", "specifically",
    "although", "though", "while", "whereas", "because", "since", "when", "if", "as", "to",
    "using", "based", "here", "both", "such", "and", "but", "or", "so", "yet", "accordingly",
    "alternatively", "surprisingly", "unexpectedly", "remarkably", "strikingly", "ultimately",
    "subsequently", "previously", "recently", "currently", "now", "next", "lastly", "further",
    "still", "again", "besides", "instead", "otherwise", "rather", "likewise", "altogether",
    "briefly", "objective", "objectives", "aim", "aims", "purpose", "background", "results",
    "conclusion", "conclusions", "methods", "design", "setting", "main", "what", "how", "why",
    "whether", "which", "who", "where", "one", "another", "other", "each", "all", "most", "some",
    "many", "several", "few", "none", "no", "neither", "either", "after", "before", "during",
    "following", "given", "compared", "among", "despite", "unlike", "like", "of", "for",
    "by", "with", "from", "at", "on", "upon", "within", "through", "via", "across", "once",
    "an", "a",
})
BAD_START_PAIRS = frozenset({
    ("in", "addition"), ("in", "contrast"), ("in", "conclusion"), ("in", "summary"),
    ("in", "particular"), ("in", "turn"), ("in", "fact"), ("in", "general"), ("in", "short"),
    ("in", "total"), ("in", "the"), ("in", "a"), ("in", "an"), ("in", "patients"),
    ("in", "vitro"), ("in", "vivo"), ("in", "mice"), ("in", "humans"), ("in", "women"),
    ("in", "men"), ("in", "children"), ("by", "contrast"), ("on", "the"), ("taken", "together"),
    ("for", "example"), ("for", "instance"), ("as", "a"), ("as", "expected"), ("to", "date"),
    ("of", "these"), ("of", "the"), ("the", "present"), ("the", "current"), ("the", "aim"),
    ("the", "purpose"), ("the", "objective"), ("the", "goal"), ("the", "results"),
    ("the", "findings"), ("the", "study"), ("the", "authors"), ("the", "data"),
    ("the", "following"), ("the", "same"), ("the", "former"), ("the", "latter"),
    ("the", "other"), ("the", "remaining"), ("the", "first"), ("the", "second"),
    ("the", "third"), ("the", "last"), ("the", "main"), ("the", "primary"), ("the", "secondary"),
    ("the", "trial"), ("the", "analysis"), ("the", "review"), ("the", "paper"),
})
# study-framing verbs: "X investigated ..." / "Results show that ..." are reports, not claims
REPORTING_WORDS = frozenset({
    "study", "studies", "studied", "investigate", "investigated", "investigates", "examine",
    "examined", "examines", "aim", "aimed", "aims", "objective", "assess", "assessed", "evaluate",
    "evaluated", "evaluates", "report", "reported", "reports", "describe", "described",
    "describes", "present", "presented", "presents", "hypothesis", "hypothesize", "hypothesized",
    "trial", "participants", "randomized", "randomised", "enrolled", "recruited", "cohort",
    "questionnaire", "interview", "interviews", "survey", "review", "reviewed", "meta-analysis",
    "analyzed", "analysed", "measured", "compared", "paper", "article", "authors", "conducted",
    "performed", "included", "identified", "determined", "explored", "explore", "sought",
    "discuss", "discussed", "propose", "proposed", "proposes", "data", "evidence", "suggest",
    "suggests", "suggested", "suggesting", "indicate", "indicates", "indicated", "show", "shows",
    "demonstrate", "demonstrates", "known", "unknown", "unclear", "remains", "remain",
    "question", "questions", "understood", "needed", "warranted", "focus", "focuses",
    "supplementary", "supplemental", "appendix", "figure", "table", "instructions", "software",
})
CONNECTIVES = frozenset({
    "however", "therefore", "thus", "moreover", "furthermore", "nevertheless", "nonetheless",
    "hence", "consequently", "additionally", "conversely", "accordingly", "notably",
    "importantly", "interestingly", "surprisingly", "finally",
})
NEGATION_WORDS = frozenset({
    "not", "no", "never", "neither", "nor", "none", "nobody", "nothing", "nowhere", "without",
    "cannot", "fail", "fails", "failed", "failing", "lack", "lacks", "lacked", "lacking",
    "absence", "absent", "unable", "non", "nonsignificant", "insignificant", "hardly",
    "barely", "scarcely", "rarely", "seldom", "unlikely", "little",
})
_NEG_CONTRACTION = re.compile(r"n['\u2019]t\b", re.I)


def word_pattern(term: str) -> re.Pattern[str]:
    """Case-insensitive whole-word pattern for ``term`` (letters/digits must not touch it; a
    hyphen or punctuation is a boundary)."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(term) + r"(?![A-Za-z0-9])", re.I)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
def _lower(text: str) -> str:
    """Lower-cased ``text`` with every character at the same offset (``str.lower`` unless it
    would change the length, then ASCII-only lower-casing)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


_ALNUM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def word_positions(text: str, term: str) -> list[int]:
    """Start offsets of ``term`` in ``text`` as a whole word, ignoring ASCII case: the same
    matches as :func:`word_pattern`, without compiling a regex per term."""
    return _positions_lower(_lower(text), _lower(term))


def _positions_lower(hay: str, needle: str) -> list[int]:
    n, out = len(needle), []
    if not n:
        return out
    i = hay.find(needle)
    while i != -1:
        if (i == 0 or hay[i - 1] not in _ALNUM_CHARS) and (i + n >= len(hay) or hay[i + n] not in _ALNUM_CHARS):
            out.append(i)
        i = hay.find(needle, i + 1)
    return out


def contains_word(text: str, term: str) -> bool:
    """``term`` occurs in ``text`` as a whole word (case-insensitive; hyphens and punctuation
    are boundaries)."""
    return bool(word_positions(text, term))


def count_word(text: str, term: str) -> int:
    return len(word_positions(text, term))


_AN_EXCEPTIONS = ("hour", "honest", "honor", "honour", "heir")
_A_EXCEPTIONS = ("unila", "unidir", "unimod", "unicam", "uniq", "unif", "univ", "unit", "union",
                 "unic", "unis", "unip", "unival", "uniparental", "use", "usu", "uti", "ure",
                 "uri", "uro", "ubiq", "eu", "ewe", "one", "once", "ukr")


def indefinite_article(word: str) -> str:
    """``"a"`` or ``"an"`` for ``word`` (by sound for common exceptions and acronyms)."""
    w = word.strip("\"'(")
    if not w:
        return "a"
    if len(w) > 1 and w.isupper() and w.isalpha():  # acronym: spoken letter by letter
        return "an" if w[0] in "AEFHILMNORSX" else "a"
    low = w.lower()
    if low.startswith(_AN_EXCEPTIONS):
        return "an"
    if low.startswith(_A_EXCEPTIONS):
        return "a"
    return "an" if low[0] in "aeiou" else "a"


_ARTICLE_BEFORE = re.compile(r"(?<![A-Za-z0-9])(a|an|A|An|AN)(\s+)$")


def replace_span(text: str, start: int, end: int, new: str) -> str:
    """Replace ``text[start:end]`` by ``new`` and fix an ``a``/``an`` right before it."""
    before, after = text[:start], text[end:]
    m = _ARTICLE_BEFORE.search(before)
    if m:
        art = indefinite_article(new)
        old = m.group(1)
        if old.lower() != art:
            fixed = art.capitalize() if old[0].isupper() else art
            before = before[:m.start(1)] + fixed + m.group(2)
    return before + new + after


def match_case(template: str, word: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# --------------------------------------------------------------------------------------------
# WordNet
# --------------------------------------------------------------------------------------------

class _WN:
    """Cached WordNet look-ups used by the rules."""

    def __init__(self, wn: Any):
        self.wn = wn
        self._pos: dict[str, frozenset[str]] = {}
        self._ant: dict[str, tuple[str | None, str]] = {}
        self._compound: dict[str, bool] = {}
        self._vbase: dict[str, list[str]] = {}
        self.variants_cache: dict[str, set[str]] = {}
        self.noun_like_cache: dict[str, bool] = {}
        self.finite_cache: dict[str, bool] = {}
        self.forms_cache: dict[str, Any] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._cntlist: dict[str, int] | None = None
        self._by_word: dict[str, dict[str, int]] | None = None
        self.clause_cache: dict[str, str | None] = {}

    def pos(self, word: str) -> frozenset[str]:
        """Parts of speech of ``word``'s senses (``n v a r``; satellites count as ``a``), from
        the lemma index (as ``synsets()`` finds them, without building the synsets)."""
        w = word.lower()
        got = self._pos.get(w)
        if got is None:
            index = getattr(self.wn, "_lemma_pos_offset_map", None)
            if index is None:
                got = frozenset("a" if s.pos() == "s" else s.pos() for s in self.wn.synsets(w))
            else:
                found = set()
                for p in ("n", "v", "a", "r"):
                    if any(p in index.get(form, ()) or (p == "a" and "s" in index.get(form, ()))
                           for form in self.wn._morphy(w, p)):
                        found.add(p)
                got = frozenset(found)
            self._pos[w] = got
        return got

    def pos_counts(self, word: str) -> dict[str, int]:
        """SemCor frequency of ``word``'s senses per part of speech (``n v a r``; only the parts
        of speech ``word`` has), summed over its base forms."""
        w = word.lower()
        got = self._counts.get(w)
        if got is None:
            by_word = self._sense_counts()
            got = {}
            for p in self.pos(w):
                forms = {w, *self.wn._morphy(w, p)}
                got[p] = sum(by_word.get(f, {}).get(p, 0) for f in forms)
            self._counts[w] = got
        return got

    def _sense_counts(self) -> dict[str, dict[str, int]]:
        """``cntlist.rev`` summed by lemma and part of speech (sense keys are
        ``lemma%<ss_type>:…``; ss_type 1 n, 2 v, 3/5 a, 4 r)."""
        if self._by_word is None:
            self._by_word = {}
            for key, count in self._cntlist_map().items():
                lemma, _, rest = key.partition("%")
                p = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}.get(rest[:1])
                if p and count:
                    d = self._by_word.setdefault(lemma.lower(), {})
                    d[p] = d.get(p, 0) + count
        return self._by_word

    def _cntlist_map(self) -> dict[str, int]:
        if self._cntlist is None:
            self._cntlist = {}
            try:
                with self.wn.open("cntlist.rev") as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 3 and parts[-1].isdigit():
                            self._cntlist[parts[0]] = int(parts[-1])
            except (OSError, LookupError, AttributeError):
                pass
        return self._cntlist

    def lemma_count(self, lemma: Any) -> int:
        """SemCor count of a lemma (``Lemma.count()``, from an in-memory ``cntlist.rev``)."""
        counts = self._cntlist_map()
        return counts.get(lemma.key(), 0) if counts else lemma.count()

    def noun_dominant(self, word: str) -> bool:
        """Has a noun sense at least as frequent as its verb/adjective/adverb senses."""
        counts = self.pos_counts(word)
        if "n" not in counts:
            return False
        return counts["n"] >= max(counts.values())

    def relational_adjective(self, word: str) -> bool:
        """An adjective pertaining to a noun (``venous`` → vein) or never seen in SemCor."""
        w = word.lower()
        counts = self.pos_counts(w)
        if not counts.get("a") and "a" in counts and len(counts) == 1:
            return True
        return any(l.pertainyms() for s in self.wn.synsets(w, "a") for l in s.lemmas() if l.name().lower() == w)

    def is_compound(self, phrase: str) -> bool:
        p = phrase.lower()
        if p not in self._compound:
            self._compound[p] = bool(self.wn.synsets(p))
        return self._compound[p]

    def verb_bases(self, word: str) -> list[str]:
        w = word.lower()
        if w not in self._vbase:
            self._vbase[w] = sorted(set(self.wn._morphy(w, "v")))
        return self._vbase[w]

    def _direct_antonyms(self, word: str) -> tuple[set[str], bool]:
        """Distinct direct antonyms over ``word``'s adjective senses, and whether the first
        (most frequent) adjective sense carries one."""
        ants: set[str] = set()
        first_has = False
        synsets = self.wn.synsets(word, "a")  # head and satellite adjectives, in sense order
        for i, s in enumerate(synsets):
            for lemma in s.lemmas():
                if lemma.name() != word:
                    continue
                found = {a.name() for a in lemma.antonyms()}
                ants |= found
                if i == 0 and found:
                    first_has = True
        return ants, first_has

    def is_lemma(self, word: str) -> bool:
        """``word`` itself is a WordNet lemma (not only an inflected form of one)."""
        index = getattr(self.wn, "_lemma_pos_offset_map", None)
        if index is not None:
            return word in index
        return any(l.name().lower() == word for s in self.wn.synsets(word) for l in s.lemmas())

    def antonyms_of(self, word: str) -> set[str]:
        """Direct antonyms over ``word``'s adjective senses."""
        return self._direct_antonyms(word.lower())[0]

    def unambiguous_antonym(self, word: str) -> tuple[str | None, str]:
        """``(antonym, "ok")`` when ``word`` is an adjective-only word with exactly one direct
        antonym that is a single adjective-only word whose only antonym is ``word``;
        else ``(None, reason)``."""
        w = word.lower()
        if w in self._ant:
            return self._ant[w]
        result: tuple[str | None, str]
        pos = self.pos(w)
        ants, first_has = self._direct_antonyms(w) if "a" in pos and self.is_lemma(w) else (set(), False)
        if not pos:
            result = (None, "not_in_wordnet")
        elif not self.is_lemma(w):
            result = (None, "inflected_form")
        elif not ants:
            result = (None, "no_antonym")
        elif pos != {"a"}:
            result = (None, "several_parts_of_speech")
        elif len(ants) != 1:
            result = (None, "several_antonyms")
        else:
            ant = next(iter(ants))
            if "_" in ant or "-" in ant or " " in ant:
                result = (None, "antonym_multiword")
            elif not first_has:
                result = (None, "antonym_not_first_sense")
            elif self.pos(ant) != {"a"} or self._direct_antonyms(ant)[0] != {w}:
                result = (None, "antonym_ambiguous")
            else:
                result = (ant, "ok")
        self._ant[w] = result
        return result


# --------------------------------------------------------------------------------------------
# Query clauses
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Negation rules
# --------------------------------------------------------------------------------------------

SUBORDINATORS = frozenset({
    "who", "which", "that", "whom", "whose", "when", "where", "whereas", "while", "although",
    "though", "because", "since", "if", "unless", "whether", "after", "before", "until", "as",
    "than", "once", "so",
})
# words after an auxiliary that make "<aux> not <word>" awkward or change its scope
AWKWARD_AFTER_AUX = frozenset({
    "also", "still", "only", "often", "usually", "always", "frequently", "generally",
    "typically", "commonly", "already", "thus", "therefore", "then", "now", "currently",
    "mostly", "mainly", "largely", "primarily", "predominantly", "consistently", "further",
    "hence", "indeed", "even", "particularly", "especially", "both", "either", "all", "each",
    "more", "most", "less", "least", "likely", "unlikely", "able", "similarly", "equally",
    "sometimes", "occasionally", "rarely", "seldom", "never", "just", "at", "shown", "known",
    "thought", "believed", "considered", "estimated", "expected", "predicted", "suggested",
    "proposed", "reported", "found", "observed", "seen", "demonstrated", "well", "there",
    "to", "approximately", "about", "around", "nearly", "almost", "up", "ubiquitously",
    "increasingly", "widely", "broadly", "in", "on", "of", "by", "for", "from", "with",
    "relatively", "slightly", "somewhat", "fairly", "rather", "moderately", "partially",
    "partly", "instead", "accordingly", "consequently", "first", "later", "finally", "that",
})
IRREGULAR_PARTICIPLES = frozenset({
    "been", "shown", "known", "found", "seen", "given", "taken", "made", "grown", "driven",
    "drawn", "become", "begun", "led", "held", "brought", "thought", "kept", "left", "lost",
    "met", "paid", "set", "put", "run", "undergone", "arisen", "risen", "fallen", "chosen",
    "written", "spoken", "proven", "won", "built", "sent", "spent", "bound", "understood",
})
NEGATION_RULES = ("aux_not", "can_cannot", "does_not", "did_not")


def _negative_prefixed(word: str, wn: _WN) -> bool:
    """An ``un-``/``non-`` adjective whose antonym is the bare word (``unsuccessful``)."""
    for prefix in ("un", "non"):
        if word.startswith(prefix) and len(word) > len(prefix) + 3:
            bare = word[len(prefix):].lstrip("-")
            if "a" in wn.pos(bare) and bare in wn.antonyms_of(word):
                return True
    return False


def has_negation(sentence: str) -> bool:
    low = [w.lower() for w in _WORD.findall(sentence)]
    if _NEG_CONTRACTION.search(sentence):
        return True
    return any(w in NEGATION_WORDS or w.startswith("non-") for w in low)


def negate(sentence: str, wn: _WN) -> tuple[str | None, str]:
    """Negate the main clause of ``sentence`` with a safe rule; ``(negated, rule)`` or
    ``(None, reason)``.

    Rules, tried on the first verb of the sentence (no comma or subordinating word before it):
    ``aux_not`` — ``not`` after ``is/are/was/were``, a modal (``could/may/might/will/would/
    should/must``), ``has/have/had`` + participle or ``do/does/did`` + base verb;
    ``can_cannot`` — ``can`` → ``cannot``; ``does_not`` — an unambiguous present verb
    (``reduces`` → ``does not reduce``); ``did_not`` — an unambiguous regular past verb with an
    object (``reduced the`` → ``did not reduce the``)."""
    if has_negation(sentence):
        return None, "already_negated"
    matches = list(_WORD.finditer(sentence))
    low = [m.group(0).lower() for m in matches]
    for i, m in enumerate(matches):
        w = low[i]
        prefix = sentence[:m.start()]
        blocked = "," in prefix or any(t in SUBORDINATORS for t in low[:i])
        nxt = low[i + 1] if i + 1 < len(low) else ""
        if w in AUXILIARIES and m.group(0) == w:
            if blocked:
                return None, "verb_in_subordinate_clause"
            if i == 0:
                return None, "no_subject"
            if not nxt or nxt in AWKWARD_AFTER_AUX:
                return None, "awkward_after_auxiliary"
            if _negative_prefixed(nxt, wn):
                return None, "double_negative"  # "was unsuccessful" → "was not unsuccessful"
            if w in ("has", "have", "had") and not (nxt.endswith("ed") or nxt in IRREGULAR_PARTICIPLES):
                return None, "have_as_main_verb"
            if w in ("does", "do", "did") and not ("v" in wn.pos(nxt) and nxt in wn.verb_bases(nxt)):
                return None, "do_as_main_verb"
            if w in MODALS and not (nxt in ("be", "have") or ("v" in wn.pos(nxt) and nxt in wn.verb_bases(nxt))):
                return None, "modal_without_verb"
            if w == "can":
                return sentence[:m.start()] + "cannot" + sentence[m.end():], "can_cannot"
            return sentence[:m.end()] + " not" + sentence[m.end():], "aux_not"
        if i == 0 or w in STOPWORDS or not w.isalpha() or m.group(0) != w:
            continue
        if not (w.endswith("s") or w.endswith("ed")):
            continue
        pos = wn.pos(w)
        if "v" not in pos or "n" in pos or (w.endswith("s") and pos != {"v"}):
            continue  # not unambiguously a verb ("-ed" may also be a participle adjective)
        bases = [b for b in wn.verb_bases(w) if b != w]
        if len(bases) != 1:
            return None, "verb_base_ambiguous"
        if blocked:
            return None, "verb_in_subordinate_clause"
        prev = low[i - 1]
        if prev in STOPWORDS and prev not in ("also",):
            return None, "verb_after_function_word"
        # "X specifically cleaves Y" → "X does not specifically cleave Y"
        at = m.start()
        if prev.endswith("ly") and "r" in wn.pos(prev):
            if i < 2 or low[i - 2] in STOPWORDS or low[i - 2].endswith("ly"):
                return None, "verb_after_function_word"
            at = matches[i - 1].start()
        base = bases[0]
        if w.endswith("ed"):
            # a past tense with a determiner-led object; otherwise likely a participle
            # ("Mice treated with …", "levels induced by …")
            if nxt not in ("a", "an", "the", "its", "their"):
                return None, "participle_or_passive"
            aux, rule = "did not", "did_not"
        elif w.endswith("s") and not w.endswith("ss"):
            if nxt in AWKWARD_AFTER_AUX or not nxt:
                return None, "awkward_after_verb"
            aux, rule = "does not", "does_not"
        else:
            return None, "no_negatable_verb"
        return sentence[:at] + f"{aux} " + sentence[at:m.start()] + base + sentence[m.end():], rule
    return None, "no_negatable_verb"


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------

@dataclass
class BuiltSet:
    """A built diagnostic set: passages, queries (released CoDeR schema plus provenance) and the
    build parameters."""

    name: str
    corpus: list[dict]
    queries: list[dict]
    params: dict = field(default_factory=dict)

    def stats(self) -> dict:
        """Counts in the style of CoDeR's Table 5, recomputed from the records."""
        grades: Counter[str] = Counter()
        pool_sizes, query_words = [], []
        for q in self.queries:
            for g in q["graded_relevance"].values():
                grades[str(int(g))] += 1
            pool_sizes.append(len(q["graded_relevance"]))
            query_words.append(len(q["query"].split()))
        sources = {d.get("source_doc_id") for d in self.corpus}
        return {
            "set": self.name,
            "source": self.params.get("source", ""),
            "queries": len(self.queries),
            "passages": len(self.corpus),
            "source_documents": len(sources),
            "judged": {g: grades.get(g, 0) for g in ("2", "1", "0")},
            "judged_total": sum(grades.values()),
            "avg_passages_per_query": round(sum(pool_sizes) / len(pool_sizes), 3) if pool_sizes else 0.0,
            "avg_query_words": round(sum(query_words) / len(query_words), 3) if query_words else 0.0,
            "avg_passage_words": (round(sum(len(d["text"].split()) for d in self.corpus) / len(self.corpus), 3)
                                  if self.corpus else 0.0),
            "candidates": self.params.get("candidates", 0),
            "candidate_documents": self.params.get("candidate_documents", 0),
            "rejected": dict(self.params.get("rejected", {})),
        }

    def write(self, out_dir: Path) -> list[Path]:
        """Write ``corpus_<name>.jsonl``, ``queries_<name>.jsonl`` and ``build.json`` (params and
        stats) into ``out_dir``, each atomically (temporary file, then ``os.replace``)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        files = [
            (out_dir / f"corpus_{self.name}.jsonl", "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in self.corpus)),
            (out_dir / f"queries_{self.name}.jsonl", "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in self.queries)),
            (out_dir / "build.json", json.dumps({"name": self.name, "params": self.params, "stats": self.stats()},
                                                indent=2, ensure_ascii=False) + "\n"),
        ]
        for path, text in files:
            _atomic_write(path, text)
        return [p for p, _ in files]


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------------
# Shared construction
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Antonym
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Negation
# --------------------------------------------------------------------------------------------

def _negation_candidates(d: _Doc, wn: _WN, rejected: Counter[str]) -> list[_PairCandidate]:
    out = []
    for k, passage, si, sentence, s_start in _clause_sentences(d, wn, rejected):
        negated, rule = negate(sentence, wn)
        if negated is None:
            rejected[f"negation_{rule}"] += 1
            continue
        new_passage = passage[:s_start] + negated + passage[s_start + len(sentence):]
        out.append(_PairCandidate(d.id, k, si, sentence, negated, new_passage,
                                  (("negation_rule", rule),)))
    return out


def build_negation(corpus: Corpus, *, seed: int = 0, max_queries: int | None = 104, source: str = "",
                   wordnet=None, data_dir: Path | None = None, online: bool = False) -> BuiltSet:
    """Negation diagnostic: pairs of queries "Find evidence that S." / "... that not-S." over
    the passages of one document plus the negated copy of the passage holding S."""
    wn = _wordnet(wordnet, data_dir, online)
    rejected: Counter[str] = Counter()
    docs = _prepare(corpus, rejected)
    by_doc = {}
    for d in docs:
        cands = _negation_candidates(d, wn, rejected)
        if cands:
            by_doc[d.id] = cands
    return _pair_set("negation", "neg", {d.id: d for d in docs}, by_doc, wn,
                     CaseModel(d.full_text for d in docs), seed, max_queries, source,
                     rejected, ("affirmed", "negated"))


def negation_from_released(corpus_path: Path) -> BuiltSet:
    """Queries for CoDeR's released negation passages (``diag/negation/corpus.jsonl``).

    Passages ``<paper>-1 … -n`` belong to one document; the highest-numbered one is the negated
    copy of one of the others (the one it is most similar to by ``difflib``). The sentence that
    differs gives the pair of queries "Find evidence that S." / "Find evidence that not-S.",
    graded as the built sets (own passage 2, the other member of the pair 0, the rest 1).
    Passage ids are kept as released. No WordNet is needed (first words are lower-cased unless
    they look like names or acronyms)."""
    corpus_path = Path(corpus_path)
    records = []
    with open(corpus_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    groups: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for r in records:
        prefix, _, num = r["doc_id"].rpartition("-")
        if not prefix or not num.isdigit():
            raise ValueError(f"{corpus_path}: unexpected passage id {r['doc_id']!r}")
        groups[prefix].append((int(num), r["doc_id"], r["text"]))
    case = CaseModel(r["text"] for r in records)
    case.prepare(_first_word(r["text"]) for r in records)
    corpus: list[dict] = []
    queries: list[dict] = []
    unpaired: list[str] = []
    sizes: Counter[int] = Counter()
    for prefix in sorted(groups):
        members = sorted(groups[prefix])
        sizes[len(members)] += 1
        for _, pid, text in members:
            corpus.append({"doc_id": pid, "text": text, "source_doc_id": prefix})
        pair = _released_pair(members)
        if pair is None:
            unpaired.append(prefix)
            continue
        orig_id, neg_id, sent, neg_sent, ratio = pair
        pool = [pid for _, pid, _ in members]
        pair_id = f"negation-pair{len(queries) // 2}"
        for s, good, bad, pol in ((sent, orig_id, neg_id, "affirmed"), (neg_sent, neg_id, orig_id, "negated")):
            graded = {pid: 1.0 for pid in pool}
            graded[good], graded[bad] = 2.0, 0.0
            queries.append({
                "query_id": f"negation-q{len(queries)}",
                "query": make_query(s, None, case),
                "category": "negation",
                "topical_relevant_doc_ids": list(pool),
                "constraint_satisfying_doc_ids": [good],
                "constraint_violating_doc_ids": [bad],
                "graded_relevance": graded,
                "source_doc_id": prefix,
                "pair_id": pair_id,
                "polarity": pol,
                "sentence": s,
                "similarity": round(ratio, 4),
            })
    params = {
        "builder": "negation",
        "version": BUILDER_VERSION,
        "from_released": str(corpus_path),
        "source": "CoDeR released negation passages (SciDocs)",
        "seed": None,
        "max_queries": None,
        "groups": len(groups),
        "group_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "candidate_documents": len(groups),
        "candidates": len(groups) - len(unpaired),
        "unpaired_groups": unpaired,
        "rejected": {"unpaired_group": len(unpaired)} if unpaired else {},
    }
    return BuiltSet(name="negation", corpus=corpus, queries=queries, params=params)


def _released_pair(members: list[tuple[int, str, str]]):
    """``(original_id, negated_id, sentence, negated_sentence, ratio)`` for a released group,
    or ``None`` when no passage pairs with the last one."""
    if len(members) < 2:
        return None
    _, neg_id, neg_text = members[-1]
    best = max(members[:-1], key=lambda m: difflib.SequenceMatcher(None, m[2].split(), neg_text.split()).ratio())
    ratio = difflib.SequenceMatcher(None, best[2].split(), neg_text.split()).ratio()
    if ratio < 0.8:
        return None
    s_orig, s_neg = split_sentences(best[2]), split_sentences(neg_text)
    if len(s_orig) != len(s_neg):
        return None
    diffs = [(a, b) for a, b in zip(s_orig, s_neg) if a != b]
    if len(diffs) != 1:
        return None
    a, b = diffs[0]
    added = _inserted_words(a, b)
    if not added & {"not", "no", "cannot", "never", "non", "nor"} and "n't" not in b:
        return None
    return best[1], neg_id, a, b, ratio


def _inserted_words(a: str, b: str) -> set[str]:
    sm = difflib.SequenceMatcher(None, a.lower().split(), b.lower().split())
    out: set[str] = set()
    bw = b.lower().split()
    for op, _, _, j1, j2 in sm.get_opcodes():
        if op in ("insert", "replace"):
            out |= {w.strip(".,;:") for w in bw[j1:j2]}
    return out


# --------------------------------------------------------------------------------------------
# Exclusion
# --------------------------------------------------------------------------------------------

MAX_TERM_DOC_FRACTION = 0.05   # a salient term occurs in at most 5% of the corpus documents
MIN_TERM_DF = 2                # … and in at least two (not a typo or a one-off string)
MIN_BIGRAM_ASSOCIATION = 0.3   # df(w1 w2) / min(df(w1), df(w2)): the pair is a fixed term
MAX_FRAGMENT_SHARE = 0.6       # a word that is mostly followed/preceded by one word is a fragment
GENERIC_TERMS = frozenset({
    "study", "studies", "patient", "patients", "result", "results", "data", "analysis", "effect",
    "effects", "method", "methods", "group", "groups", "level", "levels", "role", "evidence",
    "association", "increase", "decrease", "risk", "treatment", "model", "models", "use",
    "participants", "subjects", "trial", "trials", "cohort", "cases", "case", "control",
    "controls", "factor", "factors", "outcome", "outcomes", "years", "year", "months", "weeks",
    "days", "time", "rate", "rates", "number", "total", "significant", "change", "changes",
    "findings", "conclusion", "conclusions", "background", "objective", "purpose", "design",
    "setting", "measures", "intervention", "review", "paper", "approach", "mechanism",
    "mechanisms", "function", "functions", "activity", "expression", "response", "responses",
    "type", "types", "form", "forms", "process", "processes", "system", "systems", "values",
    "value", "ratio", "compared", "using", "based", "authors", "author", "aim", "aims",
    "introduction", "summary", "importance", "context", "interventions", "abstract",
    "samples", "sample", "first", "second", "third", "half", "twice", "part", "parts", "lack",
    "presence", "absence", "addition", "order", "terms", "way", "ways", "example", "fact",
    "need", "needs", "basis", "aspect", "aspects", "area", "areas", "field", "set", "sets",
})
_TERM_TOKEN_LOWER = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_OPENING = frozenset("([{\"'\u201c\u2018")
_CLOSING = frozenset(",;:.!?)]")
_EDGE_PUNCT = "()[]{}.,;:!?\"'\u201c\u201d\u2018\u2019"


def _term_tokens(text: str) -> list[str | None]:
    """Whitespace tokens with surrounding punctuation removed, lower-cased; ``None`` for a token
    that is not a clean word (``CX(3)CR1(lo)``, ``fibro/adipogenic``, numbers) and for a
    clause break (a token ending in punctuation), so that bigrams never cross either."""
    out: list[str | None] = []
    clean = _TERM_TOKEN_LOWER.fullmatch
    for raw in _lower(text).split():
        core = raw.strip(_EDGE_PUNCT)
        possessive = core.endswith(("'s", "\u2019s"))
        if possessive:
            core = core[:-2]
        if raw[0] in _OPENING and out and out[-1] is not None:
            out.append(None)
        out.append(core if clean(core) else None)
        if (possessive or raw[-1] in _CLOSING) and out[-1] is not None:
            out.append(None)  # no term across "Burkitt's lymphoma" or punctuation
    return out


NUMBER_WORDS = frozenset("""one two three four five six seven eight nine ten eleven twelve
twenty thirty forty fifty hundred thousand million single double triple multiple""".split())
_ADJ_SUFFIXES = ("ous", "al", "ic", "ive", "ary", "ory", "ible", "able", "ful", "less", "oid", "ular")


def _noun_like(word: str, wn: _WN) -> bool:
    got = wn.noun_like_cache.get(word)
    if got is None:
        got = wn.noun_like_cache[word] = _noun_like_uncached(word, wn)
    return got


def _noun_like_uncached(word: str, wn: _WN) -> bool:
    """A possible term (or term head): not a function, generic or number word; in WordNet only
    if it has a noun sense and is not a verb form (``-ing``/``-ed`` of a verb); outside WordNet
    (acronyms, gene names, technical words) not adjective-shaped (``glaucomatous``). In a
    hyphenated word the last part decides (``T-cell-dependent`` is not noun-like)."""
    if word in STOPWORDS or word in GENERIC_TERMS or word in NUMBER_WORDS or len(word) < 3:
        return False
    if word.isdigit() or word.endswith("ly"):
        return False
    parts = word.split("-")
    if len(parts) > 1:
        if parts[0] in NUMBER_WORDS or parts[0] in ("non", "post", "pre", "co", "anti", "self"):
            return False
        last = parts[-1]
        if last.isalpha() and len(last) >= 3 and not _noun_like(last, wn):
            return False
        return True
    if not word.isalpha():
        return True  # IL6, Cas9, p53 …
    pos = wn.pos(word)
    if not pos:
        return not word.endswith(_ADJ_SUFFIXES) and not word.endswith(("ing", "ed"))
    if "n" not in pos:
        return False
    if word.endswith(("ing", "ed")) and "v" in pos:
        return False
    return pos == {"n"} or wn.noun_dominant(word)  # "reverses", "specific", "British" are not


def _modifier_ok(word: str, wn: _WN) -> bool:
    """First word of a two-word term: a noun (``cell cycle``), a relational adjective
    (``venous thromboembolism``) or a word outside WordNet (``missense mutation``); not a
    descriptive adjective (``recent surge``, ``high levels``)."""
    pos = wn.pos(word) if word.isalpha() else frozenset()
    if not pos:
        return not word.endswith(("ing", "ed"))
    if word.endswith("s") and "n" in pos and any(b != word for b in wn.wn._morphy(word, "n")):
        return False  # a plural is not a modifier: "isoflavones genistein" is a list
    if pos == {"v"}:
        return False
    if "n" in pos and wn.noun_dominant(word):
        return True
    return "a" in pos and wn.relational_adjective(word)


def _variants(term: str, wn: _WN) -> set[str]:
    """Surface variants used to check absence: singular/plural and British/American -our."""
    t = term.lower()
    cached = wn.variants_cache.get(t)
    if cached is not None:
        return cached
    out = {t}
    head, sep, last = t.rpartition(" ")
    forms = {last, last + "s", last + "es"}
    if last.endswith("ies"):
        forms.add(last[:-3] + "y")
    if last.endswith("y"):
        forms.add(last[:-1] + "ies")
    if last.endswith("es"):
        forms.add(last[:-2])
    if last.endswith("s"):
        forms.add(last[:-1])
    if last.isalpha():
        forms |= set(wn.wn._morphy(last, "n"))
    if "our" in last:
        forms.add(last.replace("our", "or"))
    if "or" in last and "our" not in last:
        forms.add(last.replace("or", "our"))
    out |= {f"{head}{sep}{f}" for f in forms if f}
    wn.variants_cache[t] = out
    return out


def abbreviates(short: str, long: str) -> bool:
    """``short`` can be read as an abbreviation of ``long``: its letters appear in order in
    ``long``, the first one starting a word (Schwartz & Hearst), e.g. EPA / eicosapentaenoic
    acid, MRA / magnetic resonance angiography."""
    s = [c for c in short.lower() if c.isalnum()]
    lw = long.lower()
    if len(s) < 2 or len(s) >= len(lw) or " " not in lw.strip() and "-" not in lw:
        return False
    i = len(lw) - 1
    for k in range(len(s) - 1, -1, -1):
        c = s[k]
        while i >= 0 and (lw[i] != c or (k == 0 and i > 0 and lw[i - 1].isalnum())):
            i -= 1
        if i < 0:
            return False
        i -= 1
    return True


_SYNONYM_GAP = re.compile(r",? ?(?:aka|a\.k\.a\.|also known as|also called|also termed|also named|i\.e\.,?) ")


def _synonyms(x: str, y: str, text: str) -> bool:
    """The document gives X and Y as names of the same thing: "EBI2, aka GPR183", "EBI2 (also
    known as GPR183)", "EBI2 (GPR183)", "(EBI2; GPR183)", "(EBI2 or GPR183)"."""
    low = _lower(text)
    for first, second in ((x, y), (y, x)):
        ends = [i + len(first) for i in word_positions(low, first)]
        for j in word_positions(low, second):
            after = low[j + len(second):j + len(second) + 1]
            for e in ends:
                if not 0 < j - e <= 30:
                    continue
                gap = low[e:j]
                if _SYNONYM_GAP.fullmatch(gap) or _SYNONYM_GAP.fullmatch(gap.lstrip(" (")):
                    return True
                if gap == " (" and after == ")":
                    return True  # "EBI2 (GPR183)"
                if gap in ("; ", " or ", ", ") and after == ")" and low[e - len(first) - 1:e - len(first)] == "(":
                    return True  # "(EBI2; GPR183)"
    return False


def _related(x: str, y: str, wn: _WN) -> bool:
    """Y is a substring or a variant of X (or shares a word or a 5-letter stem with it, or one
    abbreviates the other)."""
    if abbreviates(x, y) or abbreviates(y, x):
        return True
    x, y = x.lower(), y.lower()
    if x in y or y in x:
        return True
    xs, ys = set(re.split(r"[ -]", x)), set(re.split(r"[ -]", y))
    if xs & ys:
        return True
    if _variants(x, wn) & _variants(y, wn):
        return True
    return any(len(a) >= 5 and len(b) >= 5 and a[:5] == b[:5] for a in xs for b in ys)


class _DocFreq:
    """Document frequencies of lower-cased words and of the adjacent word pairs that can be
    terms, over a corpus, and for each word the share of its occurrences taken by its most
    frequent neighbour."""

    def __init__(self, token_lists: Sequence[list[str | None]]):
        """``token_lists``: the :func:`_term_tokens` of each corpus document."""
        self.n = len(token_lists)
        self.df: Counter[str] = Counter()
        self.count: Counter[str] = Counter()
        self._uni: dict[str, bool] = {}
        self._bi: dict[tuple[str, str], bool] = {}
        pair_df: Counter[tuple[str, str]] = Counter()
        pair_count: Counter[tuple[str, str]] = Counter()
        for toks in token_lists:
            words = [t for t in toks if t is not None]
            self.df.update(set(words))
            pair_df.update(set(zip(toks, toks[1:])))
            # neighbours across punctuation ("C. elegans"), function words aside ("the cells")
            content = [t for t in words if t not in STOPWORDS]
            pair_count.update(zip(content, content[1:]))
            self.count.update(words)
        self.left: dict[str, int] = {}   # most frequent word before w: its count
        self.right: dict[str, int] = {}  # most frequent word after w: its count
        for (a, b), c in pair_count.items():
            if c > self.right.get(a, 0):
                self.right[a] = c
            if c > self.left.get(b, 0):
                self.left[b] = c
        # two-word terms: salient, and a fixed pair (df(a b) >= 0.3 min(df(a), df(b)))
        top = max(MIN_TERM_DF, MAX_TERM_DOC_FRACTION * self.n)
        self.pairs: set[tuple[str, str]] = set()
        for (a, b), c in pair_df.items():
            if a is None or b is None or not MIN_TERM_DF <= c <= top:
                continue
            if c >= MIN_BIGRAM_ASSOCIATION * min(self.df[a], self.df[b]):
                self.pairs.add((a, b))
                self.df[f"{a} {b}"] = c

    def idf(self, term: str) -> float:
        return math.log((self.n + 1) / (self.df.get(term.lower(), 0) + 1))

    def salient(self, term: str) -> bool:
        df = self.df.get(term.lower(), 0)
        return MIN_TERM_DF <= df <= max(MIN_TERM_DF, MAX_TERM_DOC_FRACTION * self.n)

    def fragment(self, word: str, side: str = "both") -> bool:
        """Mostly used inside one longer term ("phosphatidic acid", "Candida albicans"):
        one word follows (``side="right"``) or precedes (``"left"``) most of its occurrences."""
        c = self.count.get(word, 0)
        if c < 2:
            return False
        limit = MAX_FRAGMENT_SHARE * c
        if side in ("both", "left") and self.left.get(word, 0) >= limit:
            return True
        return side in ("both", "right") and self.right.get(word, 0) >= limit

    def unigram_ok(self, t: str, wn: _WN) -> bool:
        got = self._uni.get(t)
        if got is None:
            got = self._uni[t] = self.salient(t) and _noun_like(t, wn) and not self.fragment(t)
        return got

    def bigram_ok(self, a: str, b: str, wn: _WN) -> bool:
        """A two-word term: a fixed, salient pair (see ``pairs``) of a modifier and a noun,
        neither a fragment of a longer term."""
        key = (a, b)
        got = self._bi.get(key)
        if got is None:
            got = (key in self.pairs and a not in STOPWORDS and a not in GENERIC_TERMS and a[0].isalpha()
                   and not a.endswith("ly") and not self.fragment(a, "left") and not self.fragment(b, "right")
                   and _noun_like(b, wn) and _modifier_ok(a, wn))
            self._bi[key] = got
        return got


def _doc_terms(passage_tokens: list[list[str | None]], wn: _WN, dfs: _DocFreq) -> dict[str, set[int]]:
    """Salient uni-/bigram terms of a document → indices of the passages containing them."""
    where: dict[str, set[int]] = {}
    pairs = dfs.pairs
    for k, toks in enumerate(passage_tokens):
        cited = {toks[i] for i in range(len(toks) - 2) if toks[i + 1] == "et" and toks[i + 2] == "al"}
        for t in set(toks):
            # (an author in a citation, "Godfray et al., 2010", is no term)
            if t is not None and t not in cited and dfs.unigram_ok(t, wn):
                where.setdefault(t, set()).add(k)
        for pair in set(zip(toks, toks[1:])):
            if pair in pairs and dfs.bigram_ok(pair[0], pair[1], wn):
                where.setdefault(f"{pair[0]} {pair[1]}", set()).add(k)
    return where


class _PassageWords:
    """Fast whole-word look-ups in one passage (same matches as :func:`contains_word`)."""

    def __init__(self, text: str):
        self.low = _lower(text)
        self.words = set(_ALNUM_RUN.findall(self.low))
        self._pairs: set[str] | None = None

    @property
    def pairs(self) -> set[str]:
        if self._pairs is None:
            self._pairs = set(_ALNUM_PAIRS.findall(self.low))
        return self._pairs

    def has(self, term_low: str) -> bool:
        return self.has_any(_term_forms({term_low}))

    def has_any(self, forms: "_Forms") -> bool:
        if forms.words and not forms.words.isdisjoint(self.words):
            return True
        if forms.pairs and not forms.pairs.isdisjoint(self.pairs):
            return True
        return any(_positions_lower(self.low, t) for t in forms.other)


@dataclass(frozen=True)
class _Forms:
    words: frozenset[str]   # single alphanumeric runs
    pairs: frozenset[str]   # two runs separated by one space
    other: tuple[str, ...]  # anything else (hyphens, punctuation)


def _term_forms(terms: Iterable[str]) -> _Forms:
    words, pairs, other = set(), set(), []
    for t in terms:
        if _ALNUM_ONLY.fullmatch(t):
            words.add(t)
        elif _ALNUM_PAIR.fullmatch(t):
            pairs.add(t)
        else:
            other.append(t)
    return _Forms(frozenset(words), frozenset(pairs), tuple(sorted(other)))


def _variant_forms(term: str, wn: _WN) -> _Forms:
    got = wn.forms_cache.get(term)
    if got is None:
        got = wn.forms_cache[term] = _term_forms(_variants(term, wn))
    return got


_ALNUM_RUN = re.compile(r"[a-z0-9]+")
_ALNUM_PAIRS = re.compile(r"(?=(?<![a-z0-9])([a-z0-9]+ [a-z0-9]+)(?![a-z0-9]))")
_ALNUM_ONLY = re.compile(r"[a-z0-9]+")
_ALNUM_PAIR = re.compile(r"[a-z0-9]+ [a-z0-9]+")


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
_DEFINITION = re.compile(r" \(([A-Za-z][A-Za-z0-9-]{1,11})[),;]")


def _definitions(text: str) -> list[tuple[str, str]]:
    """``(words before, abbreviation)`` for each "… long form (ABBR)" in ``text`` (lower case)."""
    out = []
    for m in _DEFINITION.finditer(text):
        words = text[max(0, m.start() - 120):m.start()].split()[-7:]
        cut = max((i for i, w in enumerate(words) if not re.fullmatch(r"[\w-]+", w)), default=-1)
        if cut < len(words) - 1:
            out.append((" ".join(words[cut + 1:]).lower(), m.group(1).lower()))
    return out


def _aliases(term: str, definitions: list[tuple[str, str]]) -> set[str]:
    """Other names the document gives ``term`` through a definition "long form (ABBR)": the
    abbreviation of a long form, or the long form of an abbreviation (lower case)."""
    t = term.lower()
    out: set[str] = set()
    for before, abbr in definitions:
        words = before.split()
        if before.endswith(t) and any(abbreviates(abbr, " ".join(words[-k:]))
                                      for k in range(1, min(len(words), len(abbr) + 2) + 1)):
            out.add(abbr)  # also for the head of the long form: "aneurysm" / "intracranial aneurysm (IA)"
        elif t in (abbr, abbr + "s"):
            for k in range(1, min(len(words), len(abbr) + 2) + 1):
                phrase = " ".join(words[-k:])
                if abbreviates(abbr, phrase):
                    out.add(phrase)
                    break
    return out


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


BUILDERS: dict[str, Callable[..., BuiltSet]] = {
    "antonym": build_antonym,
    "negation": build_negation,
    "exclusion": build_exclusion,
}
