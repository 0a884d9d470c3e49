"""Salient terms for the exclusion set: term tokens, document frequencies of words and fixed
word pairs, noun-likeness, surface variants, synonyms, abbreviations and aliases."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from .wordnet_lookups import _WN
from .words import STOPWORDS, _lower, _positions_lower, word_positions

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


_ALNUM_RUN = re.compile(r"[a-z0-9]+")
_ALNUM_PAIRS = re.compile(r"(?=(?<![a-z0-9])([a-z0-9]+ [a-z0-9]+)(?![a-z0-9]))")
_ALNUM_ONLY = re.compile(r"[a-z0-9]+")
_ALNUM_PAIR = re.compile(r"[a-z0-9]+ [a-z0-9]+")


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
