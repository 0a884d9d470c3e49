"""Words, whole-word matching and articles: the word lists the rules share, case-insensitive
whole-word look-ups and ``a``/``an`` fixing after a replacement."""

from __future__ import annotations

import re

from harness.data.stopwords import STOPWORDS  # noqa: F401  (the list the rules share with the decomposer)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['\u2019-][A-Za-z0-9]+)*")
_ALPHA_WORD = re.compile(r"[A-Za-z]+")


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
