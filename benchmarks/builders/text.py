"""Sentences and passages: the regex sentence splitter and the split of a document into
passages of 1–3 sentences."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from harness.types import Document

MIN_SENTENCES = 4  # a candidate document has at least four passages' worth of sentences
MAX_GROUP_PASSAGES = 5
MAX_SENTENCES_PER_PASSAGE = 3

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
