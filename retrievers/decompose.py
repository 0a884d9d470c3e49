"""Query decomposition for DEO: positive / negative sub-queries, a rule-based decomposer and an
agreement measure between two decompositions.

DEO (Direct Embedding Optimization) splits a search query into *positive* sub-queries (what the
user wants: expansions that keep the query's anchors and entities, never the query verbatim) and
*negative* sub-queries (the minimal set of explicitly excluded or negated targets, with close
aliases; nothing in both lists). An LLM usually does this and answers
``{"positives": [...], "negatives": [...]}``; :func:`clean_decomposition` normalises such an
answer. :func:`rules_decompose` is the LLM-free decomposer behind ``deo-rules`` (zero API cost),
and :func:`agreement` / :func:`agreement_summary` compare two decompositions (e.g. rules vs LLM).

Only the standard library is used (no tagger, no downloaded data): the rules below work on a
regex tokenisation of the query and on small closed word lists.

Rules of :func:`rules_decompose`
--------------------------------
Cues are matched case-insensitively on whole tokens ("note", "nothing", "another", "knot",
"notwithstanding" never trigger; curly apostrophes count as ``'``). Text inside double quotes is
never read as a cue. Each cue yields zero or more negatives and a token span that is cut from
the query to form the single positive. A negative must keep a content word (or be a quoted
title); "has nothing to do with it" gives nothing.

1. **Exclusion with an object** — ``without``, ``except`` / ``except for`` / ``excepting`` /
   ``with the exception of`` / ``to the exclusion of``, ``excluding``, ``exclude(s)``,
   ``other than``, ``rather than``, ``instead of``, ``apart from``, ``aside from``,
   ``besides``, ``not including``, ``not counting``, ``free of`` / ``free from``, ``lacking`` /
   ``lack(s)`` (a verb, not "the lack of"), ``unrelated to`` / ``not related to``, ``barring``,
   ``nor``, ``neither … nor``, ``has nothing to do with``, ``refrain(ing) from``, "Who else but
   X", ``but not X`` (also ``, not X`` / ``though not X`` / ``and not X``), ``no X`` (``no`` as
   a determiner), ``non X`` (the separate word; hyphenated ``non-X`` is lexical, not a cue).
   Instruction verbs count only in instruction position (sentence start, after a comma /
   "while" / "but" / "and" / "please" / "let's", or before "any", "mentioning", "references"…):
   ``avoid(ing)``, ``ignore`` / ``ignoring``, ``disregard(ing)``, ``omit(ting)``,
   ``leave / leaving out``, ``leaving / setting aside``, ``rule(d) out`` — "How to avoid
   burnout" and "What country did the Germans want to avoid entering?" are topics, not
   exclusions. Additive cues ``in addition to``, ``on top of``, ``beyond``, ``outside (of)``,
   ``regardless of``, ``irrespective of`` count only when the query also asks for "other" /
   "else" / "another" / "additional" / "further" ("In addition to X, what other films …"),
   and ``in addition to`` / ``on top of`` also at the start or the end of a sentence,
   ``beyond`` / ``outside of`` also after ``)`` or ``,``, ``outside of`` also before
   "his/her/their/its" ("outside of Paris" is a place). Mention directives:
   ``do not / don't / never / not`` + ``mention``, ``include``, ``discuss``, ``cover``,
   ``reference``, ``refer to``, ``talk about``, ``contain``, ``involve``, ``feature``, ``cite``,
   ``touch on``, ``bring up``, ``concern``, ``relate(d) to``, ``consider``, ``compare``,
   ``count``, ``interested in``, ``looking for``, ``want to know / hear / …`` ("Find passages
   about jaguars that do not mention cars." → negative "cars"); after a form of "be" the
   participle is a passive ("was not mentioned as …") and the verbal rule applies instead.
   The object runs from the cue to the end of its clause: it stops at ``, ; : . ? ! ( )``
   (a ``.`` after an initial such as "T.S." or in "No. 9", a ``:`` before a capitalised word
   and a short parenthesis, as in film titles, do not stop it), at a word that opens a new
   clause ("but", "which", "that", "while", "because", "where", wh-words, auxiliaries,
   "please", pronouns …) or at the next cue. A fronted object keeps its appositions ("On top of
   Kanorado, the city in Sherman County, what other …" → "Kanorado, the city in Sherman
   County"); a trailing one (", excluding X …") keeps a relative clause or an apposition that
   runs to the end of the sentence. Lists split into separate negatives: "recipes without nuts
   or dairy" → ["nuts", "dairy"]; "or" / "nor" split, "and" splits unless both neighbours are
   capitalised ("Apple and Google", "Crime and Punishment" stay one negative); no split when
   the item holds a preposition ("the desire for resources and wealth"), when only the first
   item has a determiner or lower-case roles precede a name ("the American actor and
   professional chef David Burtka"); comma lists ("nuts, dairy, or gluten") split when every
   item is short (≤ 4 words). Quoted titles are atomic. Leading filler is stripped from the
   object ("without mentioning anything related to X", "excluding any information about X",
   "aside from those related to X", "except for being X", "without taking into account X"
   → X), as are quotes and trailing "at all" / "whatsoever".
   ``X-free`` (gluten-free, sugar-free) gives the negative X, except for fixed terms
   (toll-, hands-, duty-, tax-, care-, cell-, disease-, event-, progression-, relapse-,
   recurrence-, metastasis-, symptom-, scale-, model-, lock-, wait- … ``-free``).
2. **Verbal / predicate negation** — ``not``, ``n't`` (doesn't, isn't, don't, aren't, wasn't,
   weren't, hasn't, haven't, didn't, won't, can't …), ``cannot``, ``never``, ``no longer``,
   ``not yet``. The negated clause is delimited by punctuation and clause words (because,
   while, although, if, when, where, but, which, who …; "and" / "or" only before an auxiliary,
   pronoun, determiner or wh-word, or after a comma). When the part before the negation has no
   content word ("a drug that is not approved …", "X use … and are not simple …") the clause
   is extended left over the relative pronoun / conjunction to its head (or, failing that, to
   the sentence start, minus the spans of other cues). The **negative** is the affirmative
   clause: negation removed, do-support dropped ("Which animals do not have fur?" → "animals
   have fur"; "didn't become" → "become"), "can't"/"cannot" → "can", "won't" → "will", "no
   longer" → "still", "not yet" → affirmative without "yet"; a leading connector, wh-word
   (+ auxiliary) and imperative lead-in ("Find", "Find evidence that", "Can you recommend")
   are removed. The **positive** is the query with the negated predicate removed (with a
   dangling "that" / "which" / "and" / "by" / "with" …, or the whole subordinate clause when
   its subject is only a pronoun): "Which animals do not have fur?" → "animals", "a drug that
   is not approved by the FDA" → "a drug"; a leading wh-word (and auxiliary) is dropped when no
   verb is left. If no content word remains ("Who did not …?"), the positive list is empty and
   :func:`clean_decomposition` falls back to ``[query]`` (the query minus only the negation
   word would equal the negative, so it is never used).
3. **No cue** → positives ``(query,)``, negatives ``()`` ("nothing excluded").
4. **Several cues** → several negatives (in query order), one positive with every span cut.

Idioms that are *not* exclusions: "not only … but also", "not just", "not merely", "not simply",
"not solely", "not to mention", "not least", "not limited to" ("including but not limited
to"), "whether or not", "if not", "cannot / can't be overstated / overemphasized /
underestimated", "no doubt", "no matter", "no wonder", "no one", "no more than", "no less
than", "no fewer than", "no sooner", "nothing but", "lack thereof", "without a doubt",
"without question". "nothing", "none", "nobody", "nowhere", ``non-`` and ``un-`` prefixes
and antonyms are not cues.

Known limits: the scope of negation is approximated by clause boundaries, not parsed; double
negation ("not unlearned") gives the inner negated form as the negative; constituent negation
without an auxiliary ("can save not substantial energy") keeps the whole clause; "no X" takes
the object only ("had no love for the violin" → "love for the violin"); verbs after dropped
do-support stay in the base form ("didn't participate" → "participate"); lexical negation
("unable", "failed to", "minus", "lack of") and comparison ("differs from", "unlike") are not
detected; an object not followed by punctuation runs to the next stop word ("Tea rather than
coffee for breakfast" → "coffee for breakfast"); appositions after a mid-sentence object stay
in the positive.

Agreement
---------
:func:`agreement` compares the negatives of two decompositions: ``detect`` (both have a
negative or both have none), ``neg_overlap`` (max content-word Jaccard over negative pairs —
lowercased, stopwords removed, possessives and simple plurals stripped; 1.0 when both have
none, 0.0 when only one has none) and ``agree`` (``detect`` and ``neg_overlap ≥ 0.5``).

Measured on the shared benchmark data (tests/test_decompose.py recomputes and asserts these;
"cue word" = a plain regex over the cue list, without idiom handling): ExcluIR CoDeR test
667/691 = 96.5 % of queries get ≥ 1 negative (602/604 = 99.7 % of those with a cue word);
ExcluIR manual set 3,325/3,452 = 96.3 % (3,027/3,043 = 99.5 %); NegConstraint 365/366
(351/351); NevIR 941/961 = 97.9 % of queries with a cue word, 13/1,805 = 0.7 % of those
without one; negation diagnostic (CoDeR SciDocs): negated members 51/51, affirmed members
without a cue word 0/47; antonym diagnostic 0/90; SciFact test claims 32/33 with a cue word,
0/267 without.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

__all__ = [
    "Decomposition",
    "clean_decomposition",
    "rules_decompose",
    "explain",
    "agreement",
    "agreement_summary",
    "content_words",
    "MAX_ITEMS",
]

MAX_ITEMS = 8


# --------------------------------------------------------------------------------------------
# the decomposition record and its cleaning
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decomposition:
    """Positive and negative sub-queries of one query. ``source``: "llm", "rules", "fallback"."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:  # accept lists (e.g. straight from JSON)
        object.__setattr__(self, "positives", tuple(self.positives))
        object.__setattr__(self, "negatives", tuple(self.negatives))

    def to_dict(self) -> dict:
        return {"positives": list(self.positives), "negatives": list(self.negatives),
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Decomposition":
        return cls(tuple(d.get("positives") or ()), tuple(d.get("negatives") or ()),
                   str(d.get("source") or ""))


def _norm_ws(s: str) -> str:
    return " ".join(s.split())


_KEY_DROP = re.compile(r"[^\w\s]")


def _key(s: str) -> str:
    """Case- and punctuation-insensitive comparison key."""
    return " ".join(_KEY_DROP.sub(" ", s.replace("’", "'").replace("'", "")).lower().split())


def _items(x: Any) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        x = [x]
    try:
        seq = list(x)
    except TypeError:
        return []
    out = []
    for v in seq:
        if isinstance(v, str):
            v = _norm_ws(v)
            if v:
                out.append(v)
    return out


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for it in items:
        k = _key(it) or it.lower()
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def clean_decomposition(query: str, positives: Any, negatives: Any,
                        source: str = "llm") -> Decomposition:
    """Normalise a (possibly messy, e.g. LLM-produced) decomposition of ``query``.

    Whitespace is normalised, empty and non-string items dropped, each list deduplicated
    case-insensitively (first occurrence kept). Positives equal to the query (case- and
    punctuation-insensitive) are dropped, and so are negatives equal to the query (they would
    push away the query itself). Leakage: an item in both lists is dropped from the positives.
    Each list is capped at :data:`MAX_ITEMS` (8). No positive left → ``(query,)``.
    """
    q = _norm_ws(query if isinstance(query, str) else str(query))
    qkey = _key(q)
    pos = _dedupe(_items(positives))
    neg = _dedupe(_items(negatives))
    neg = [n for n in neg if _key(n) != qkey or not qkey]
    pos = [p for p in pos if _key(p) != qkey]
    neg_keys = {_key(n) or n.lower() for n in neg}
    pos = [p for p in pos if (_key(p) or p.lower()) not in neg_keys]
    pos, neg = pos[:MAX_ITEMS], neg[:MAX_ITEMS]
    if not pos:
        pos = [q]
    return Decomposition(tuple(pos), tuple(neg), source)


# --------------------------------------------------------------------------------------------
# word lists
# --------------------------------------------------------------------------------------------

STOPWORDS = frozenset("""
a about above after again against all also am an and any anything are as at be because been
before being below between both but by can could did do does doing down during each either
else etc ever every few for from further had has have having he her here hers herself him
himself his how however i if in into is it its itself just let like may me might more most
much must my myself neither no nor not now of off on once one only or other others our ours
ourselves out over own per please quite rather same shall she should so some such than that
the their theirs them themselves then there these they this those through thus to too under
until up upon us very via was we were what whatever when where whether which while who whom
whose why will with within would yet you your yours yourself yourselves thereof i'm i'd
i've we're you're let's
""".split())

WH = frozenset("what which who whom whose where when why how".split())
AUX = frozenset("""do does did is are was were am be been has have had can could will would
should shall may might must ca wo sha need""".split())
DO = frozenset({"do", "does", "did"})
_AUX_FULL = {"ca": "can", "wo": "will", "sha": "shall", "cannot": "can"}
PRONOUNS = frozenset("i you he she it we they me him her us them this these those there".split())
DETERMINERS = frozenset("a an the their his her its our my your this that these those".split())
# words that start a new clause (objects and lists stop before them)
CLAUSE_STARTERS = WH | (AUX - {"be", "been"}) | PRONOUNS | frozenset(
    "please also then provide tell explain describe give list discuss compare show find "
    "introduce name identify summarize summarise".split())
# words that end an object (after at least one word of it)
OBJECT_STOPS = WH | frozenset(
    "but which that while whilst because whereas although though so where when who whom whose "
    "if unless since please i you we they".split()) | (AUX - {"be", "been"})
# clause boundaries for verbal negation
LEFT_BOUNDARY_WORDS = frozenset(
    "and but or that which who whom whose because while whilst although though if when where "
    "whereas wherein whereby unless since so".split())
SUBORDINATORS = frozenset(
    "because while whilst although though if when where whereas unless since so".split())
RIGHT_BOUNDARY_WORDS = frozenset(
    "because while whilst although though if when where whereas wherein whereby unless since so "
    "but which who whom whose".split())
HARD_PUNCT = frozenset(", ; : . ? ! ( ) [ ] ？ ！ ， ； ：".split())
QUOTES = frozenset({'"', "“", "”", "«", "»"})
ABSORB_BEFORE = frozenset(
    ", ; but and or please while whilst that which who though although yet also with by however "
    "( - – — even i i'm we we're let's".split())
OTHER_WORDS = frozenset("other else another additional further".split())
DIRECTIVES = {
    # verb forms → particle words that may follow (skipped before the object)
    **{w: () for w in (
        "mention mentions mentioning mentioned include includes including included discuss "
        "discusses discussing discussed cover covers covering reference references referencing "
        "contain contains containing involve involves involving feature features featuring "
        "cite cites citing concern concerns concerning counting consider considers considering "
        "compare comparing want wants").split()},  # "want": see _directive_ok
    **{w: ("in",) for w in "interested".split()},
    **{w: ("for",) for w in "looking".split()},
    **{w: ("to",) for w in "refer refers referring relate relates relating related".split()},
    **{w: ("about", "of") for w in "talk talks talking speak speaks speaking".split()},
    **{w: ("on", "upon") for w in "touch touches touching".split()},
    **{w: ("up",) for w in "bring brings bringing".split()},
}
NEG_WORDS = frozenset({"not", "n't", "never", "cannot"})
FREE_STOP = frozenset(
    "toll hands duty tax care cell disease event progression relapse recurrence metastasis "
    "symptom scale model lock wait royalty rent fancy free hassle worry carefree trouble "
    "barrier feature".split())
INSTRUCTION_VERBS = frozenset(
    "avoid avoids avoiding ignore ignoring disregard disregarding omit omitting leave leaving "
    "setting rule ruling ruled refrain refraining".split())
INSTRUCTION_PREV = frozenset(", ; ( while whilst but and please also by when yet "
                             "let's deliberately specifically intentionally explicitly strictly "
                             "to".split())
INSTRUCTION_NEXT = frozenset(
    "any anything all mentioning mention references reference referencing discussing "
    "discussion information details including talking examples content".split())

# multi-word object cues (longest first at each position)
OBJECT_CUES: tuple[tuple[str, ...], ...] = tuple(sorted((
    ("with", "the", "exception", "of"), ("except", "for"), ("except",), ("excepting",),
    ("excluding",), ("exclude",), ("excludes",), ("other", "than"), ("rather", "than"),
    ("instead", "of"), ("apart", "from"), ("aside", "from"), ("besides",), ("without",),
    ("disregarding",), ("ignoring",), ("leaving", "aside"), ("setting", "aside"), ("omitting",),
    ("free", "of"), ("free", "from"), ("lacking",), ("lacks",), ("lack",), ("lacked",),
    ("avoid",), ("avoids",), ("avoiding",), ("unrelated", "to"), ("barring",), ("nor",),
    ("neither",), ("ignore",), ("disregard",), ("omit",), ("leave", "out"), ("leaving", "out"),
    ("leave", "aside"), ("refrain", "from"), ("refraining", "from"), ("rule", "out"),
    ("ruling", "out"), ("ruled", "out"), ("to", "the", "exclusion", "of"),
    ("nothing", "to", "do", "with"),
    # additive cues: exclusions only when the query asks for something "other" / "else"
    ("in", "addition", "to"), ("on", "top", "of"), ("beyond",), ("outside", "of"), ("outside",),
    ("non",),
    ("regardless", "of"), ("irrespective", "of"),
), key=len, reverse=True))
_STRONG_CUES = (("with", "the", "exception", "of"), ("except",), ("excepting",), ("excluding",),
                ("exclude",), ("excludes",), ("other", "than"), ("rather", "than"),
                ("instead", "of"), ("apart", "from"), ("aside", "from"), ("besides",),
                ("without",))
ADDITIVE_CUES = frozenset({("in", "addition", "to"), ("on", "top", "of"), ("beyond",),
                           ("outside", "of"), ("outside",), ("regardless", "of"),
                           ("irrespective", "of")})

# idioms: (token sequence) — matched at a position, skipped, never a cue
IDIOMS: tuple[tuple[str, ...], ...] = tuple(sorted((
    ("not", "only"), ("not", "just"), ("not", "merely"), ("not", "simply"), ("not", "solely"),
    ("not", "to", "mention"), ("not", "least"), ("not", "limited", "to"),
    ("but", "not", "limited", "to"), ("whether", "or", "not"), ("if", "not"),
    ("n't", "only"), ("n't", "just"), ("no", "doubt"), ("no", "matter"), ("no", "wonder"),
    ("no", "one"), ("no", "more", "than"), ("no", "less", "than"), ("no", "fewer", "than"),
    ("no", "sooner"), ("nothing", "but"), ("lack", "thereof"), ("without", "a", "doubt"),
    ("without", "doubt"),
    ("without", "question"), ("not", "more", "than"), ("not", "less", "than"),
    ("not", "fewer", "than"),
), key=len, reverse=True))
_ABBREVIATIONS = frozenset("e.g i.e etc vs dr mr mrs ms st jr sr inc co ltd no".split())
_PREPS = frozenset("of for in on with by from to about at into between among".split())
_OVERSTATED = frozenset("overstated overstate overemphasized overemphasised underestimated "
                        "overestimated exaggerated".split())

_LEAD_FILLER = re.compile(
    r"^(?:(?:please|also|even|any|anything|everything|all|of|the\s+fact\s+that|being|"
    r"(?:any\s+)?(?:mention(?:ing|s)?|includ(?:e|es|ing)|discuss(?:es|ing)?|referenc(?:e|es|ing)|"
    r"refer(?:ring)?\s+to|talk(?:ing)?\s+about|touch(?:ing)?\s+(?:on|upon)|focus(?:ing)?\s+on|"
    r"cover(?:ing)?|consider(?:ing)?|using|involv(?:e|ing)|bring(?:ing)?\s+up|"
    r"address(?:ing)?|deal(?:ing)?\s+with|describ(?:e|ing)|explor(?:e|ing)|"
    r"(?:tak(?:e|ing)|tak(?:e|ing)\s+into)\s+account(?:\s+of)?|count(?:ing)?|"
    r"(?:to\s+)?(?:know|hear|learn|read|see|get)(?:ing)?|hearing|learning|reading)|"
    r"(?:or|and)(?=\s+(?:mention|referenc|discuss|includ|cover|consider|us|involv|compar)\w*)|"
    r"(?:information|info|details?|references?|mentions?|discussions?|examples?|content|"
    r"(?:those|ones|things|anything|aspects?|parts?)(?=\s+(?:related|relating|about|regarding|"
    r"concerning|associated|connected|pertaining|involving|linked|tied|from|on)))|"
    r"related\s+to|relating\s+to|regarding|concerning|about|on|from|to|associated\s+with|"
    r"connected\s+(?:to|with)|pertaining\s+to|involving|in\s+relation\s+to|"
    r"with\s+respect\s+to|linked\s+to|tied\s+to|that\s+(?:is|are)|which\s+(?:is|are))\b[\s,]*)+",
    re.IGNORECASE)
_TRAIL_FILLER = re.compile(
    r"(?:[\s,]+(?:at\s+all|whatsoever|either|too|please|in\s+(?:the|your)\s+"
    r"(?:answer|response|results?|reply|search)|and|or|the|a|an|of))+$", re.IGNORECASE)
_LEAD_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:(?:can|could|would)\s+you\s+(?:please\s+)?)?(?:find|show|list|retrieve|"
    r"get|give|return|search\s+for|look\s+for|identify|fetch|provide|recommend|suggest|name|"
    r"tell|explain|describe|introduce)(?:\s+(?:me|us))?(?:\s+about)?\s+(?:(?:evidence|information|"
    r"passages?|documents?|papers?|articles?|texts?|sentences?)\s+(?:that|about|on|of|for|"
    r"showing|which|where|regarding)\s+)?", re.IGNORECASE)
_STRIP_CHARS = " \t\n,;:.?!-–—\"“”«»'？！，；："


# --------------------------------------------------------------------------------------------
# tokenisation
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|\w+(?:[-']\w+)*|[^\w\s]")
_CURLY = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})


@dataclass
class _Tok:
    text: str      # surface, from the original query
    low: str       # lower-cased, straight apostrophes
    start: int
    end: int
    quoted: bool = False   # inside double quotes (not the quote mark itself)


def _tokenize(query: str) -> list[_Tok]:
    norm = query.translate(_CURLY)
    toks: list[_Tok] = []
    open_q = False
    for m in _TOKEN.finditer(norm):
        t = _Tok(query[m.start():m.end()], m.group(0).lower(), m.start(), m.end())
        if t.low in QUOTES:
            if t.low == "“":
                open_q = True
            elif t.low == "”":
                open_q = False
            elif t.low == '"':
                open_q = not open_q
        else:
            t.quoted = open_q
        toks.append(t)
    if open_q:  # unbalanced quote: ignore quoting altogether
        for t in toks:
            t.quoted = False
    return toks


def _is_word(t: _Tok) -> bool:
    return t.low[:1].isalnum() or t.low[:1] == "_"


def _content(t: _Tok) -> bool:
    return _is_word(t) and t.low not in STOPWORDS and t.low not in AUX and t.low != "n't"


def _cap(t: _Tok | None) -> bool:
    return t is not None and t.text[:1].isupper()


# --------------------------------------------------------------------------------------------
# the analyser
# --------------------------------------------------------------------------------------------

@dataclass
class _Cue:
    kind: str                  # "object" | "verbal" | "free"
    cue: str                   # the cue words as found
    span: tuple[int, int]      # token span cut from the query for the positive
    negatives: list[str]
    verbal: bool = False
    pos_drop: tuple[int, ...] = ()   # extra tokens cut from the positive (inverted do-support)


@dataclass
class _Analysis:
    query: str
    tokens: list[_Tok]
    cues: list[_Cue] = field(default_factory=list)
    positive: str = ""


class _Analyser:
    def __init__(self, query: str):
        self.q = query
        self.t = _tokenize(query)
        self.n = len(self.t)
        self.low = [t.low for t in self.t]
        self.cues_so_far: list[_Cue] = []

    # -- helpers -----------------------------------------------------------------------------
    def low_at(self, i: int) -> str:
        return self.low[i] if 0 <= i < self.n else ""

    def seq_at(self, i: int, seq: Sequence[str]) -> bool:
        return i + len(seq) <= self.n and tuple(self.low[i:i + len(seq)]) == tuple(seq) and \
            not any(t.quoted for t in self.t[i:i + len(seq)])

    def hard_stop(self, j: int) -> bool:
        """Punctuation that ends a clause at token j (with the '.'/':' exceptions)."""
        t = self.t[j]
        if t.quoted or t.low not in HARD_PUNCT:
            return False
        if t.low == ".":
            prev = self.t[j - 1] if j > 0 else None
            nxt = self.t[j + 1] if j + 1 < self.n else None
            if prev is not None and (len(prev.low) == 1 and prev.low.isalpha() or
                                     prev.low in _ABBREVIATIONS):
                return False
            if nxt is not None and nxt.start == t.end:  # "3.5", "U.S"
                return False
            return True
        if t.low == ":":
            nxt = self.t[j + 1] if j + 1 < self.n else None
            if nxt is not None and _is_word(nxt) and _cap(nxt):
                return False
        return True

    def sentence_start(self, i: int) -> bool:
        return i == 0 or (self.low[i - 1] in {".", "?", "!", ";", ":", "？", "！", "；", "："}
                          and self.hard_stop(i - 1))

    def text(self, i: int, j: int) -> str:
        if i >= j:
            return ""
        return self.q[self.t[i].start:self.t[j - 1].end]

    def join(self, idx: Sequence[int], replace: dict[int, str] | None = None) -> str:
        """Text of the kept token indices: original spacing between neighbours, one space (or
        none before punctuation) across a cut."""
        replace = replace or {}
        out: list[str] = []
        prev = None
        for i in idx:
            s = replace.get(i, self.t[i].text)
            if prev is not None:
                if i == prev + 1:
                    gap = self.q[self.t[prev].end:self.t[i].start]
                    out.append(" " if gap else "")
                elif not (self.t[i].low in {",", ".", "?", "!", ";", ":", ")"} or
                          self.t[i].low == "n't"):
                    out.append(" ")
            if s:
                out.append(s)
            prev = i
        return _norm_ws("".join(out))

    # -- idioms --------------------------------------------------------------------------------
    def idiom_len(self, i: int) -> int:
        for seq in IDIOMS:
            if self.seq_at(i, seq):
                return len(seq)
        # "cannot / can't / can not be overstated"
        if self.low_at(i) in {"cannot", "n't", "not"} and self.low_at(i + 1) == "be" and \
                self.low_at(i + 2) in _OVERSTATED:
            return 3
        return 0

    # -- objects -------------------------------------------------------------------------------
    def _comma_list(self, j: int, depth: int = 0) -> bool:
        """Is the comma at j a list separator ("nuts, dairy, or gluten")?"""
        if depth > 8:
            return False
        k = j + 1
        seg: list[int] = []
        while k < self.n and not self.hard_stop(k):
            seg.append(k)
            k += 1
        final = bool(seg) and self.low[seg[0]] in {"and", "or", "nor"}
        rest = seg[1:] if final else seg
        if not 1 <= len(rest) <= 4:
            return False
        if any(self.low[x] in CLAUSE_STARTERS or self.low[x] in OBJECT_STOPS or
               self.low[x] in {"and", "or"} for x in rest):
            return False
        if final:
            return True
        return k < self.n and self.low[k] == "," and self._comma_list(k, depth + 1)

    def take_object(self, i: int, *, list_ok: bool = True,
                    stop_at: frozenset[str] = frozenset()) -> tuple[int, list[tuple[int, int]]]:
        """Object after a cue at token i: (end index, item spans)."""
        j = i
        cur = i
        pieces: list[tuple[int, int]] = []
        seps: list[str] = []
        sep_at: list[int] = []
        if self.low_at(i) == "that" and list_ok:  # "other than that it was written by X"
            j = i + 1
            while j < self.n and not self.hard_stop(j):
                j += 1
            return j, [(i + 1, j)]
        in_paren = any(self.low_at(x) == "(" for x in range(i - 4, i)) and not any(
            self.low_at(x) == ")" for x in range(i - 4, i))
        while j < self.n:
            t = self.t[j]
            lw = t.low
            if t.quoted or lw in QUOTES:
                j += 1
                continue
            if lw in stop_at:
                break
            if lw == "(" and j > cur and not in_paren:
                close = next((x for x in range(j + 1, min(self.n, j + 10)) if self.low[x] == ")"),
                             None)
                label = close == j + 2 and len(self.low[j + 1]) == 1  # "(a)", "(B)" labels
                if close is None or label:
                    break
                j = close + 1
                continue
            if self.hard_stop(j):
                if lw in {",", "，"} and list_ok and j > cur and self._comma_list(j):
                    pieces.append((cur, j))
                    seps.append(",")
                    sep_at.append(j)
                    j += 1
                    if self.low_at(j) in {"and", "or", "nor"}:
                        seps[-1] = self.low[j]
                        j += 1
                    cur = j
                    continue
                break
            if lw in {"and", "or", "nor", "&"} and not (j == cur and _cap(t)):
                nxt = self.t[j + 1] if j + 1 < self.n else None
                if j == cur or nxt is None or nxt.low in CLAUSE_STARTERS or self.hard_stop(j + 1) \
                        or self._cue_starts(j + 1):
                    break
                if list_ok and (lw == "nor" or (
                        not _PREPS & set(self.clean_object(cur, j).lower().split()) and
                        (lw == "or" or not (_cap(self.t[j - 1]) and _cap(nxt))))):
                    pieces.append((cur, j))
                    seps.append(lw)
                    sep_at.append(j)
                    cur = j + 1
                j += 1
                continue
            if j > cur and (lw in OBJECT_STOPS or self._cue_starts(j)):
                if pieces and self._cue_starts(j) and sep_at:
                    # "X other than A and Y other than B": the "and" joined clauses
                    j = sep_at[-1]
                    cur, _ = pieces.pop()
                    seps.pop()
                    sep_at.pop()
                break
            j += 1
        pieces.append((cur, j))
        pieces = [(a, b) for a, b in pieces if a < b]
        if len(pieces) > 1 and "nor" not in seps and self._one_phrase(pieces):
            pieces = [(pieces[0][0], pieces[-1][1])]
        return j, pieces

    def _one_phrase(self, pieces: list[tuple[int, int]]) -> bool:
        """Is a split list really one noun phrase? "the politician, farmer, and fighter pilot Ian
        Smith" (a determiner on the first item only), "the American actor and professional chef
        David Burtka" (roles in lower case, then a name)."""
        firsts = [self.clean_object(a, b).split()[:1] for a, b in pieces]
        dets = [bool(f) and f[0].lower() in {"the", "a", "an"} for f in firsts]
        if dets[0] and not all(dets[1:]):
            return True
        words = [[x for x in range(a, b) if _is_word(self.t[x])] for a, b in pieces]
        if not all(words):
            return False
        last = words[-1]
        name_tail = _cap(self.t[last[-1]]) and any(
            not _cap(self.t[x]) and self.low[x] not in STOPWORDS for x in last[:-1])
        return name_tail and all(not _cap(self.t[w[-1]]) for w in words[:-1])

    def extend_trailing(self, s: int, end: int, items: list[tuple[int, int]]
                        ) -> tuple[int, list[tuple[int, int]]]:
        """A cue in a trailing adjunct (", excluding X …" / ", but not X …"): a relative clause
        or an apposition that runs from the object to the end of the sentence belongs to X
        (", excluding the movie Z that E was in?", ", but not the film A, directed by W?")."""
        if not items:
            return end, items
        b = s - 1
        while b >= 0 and self.low[b] in {"but", "please", "and", "while", "whilst", "though",
                                         "yet", "also", "not", "do", "does", "did", "n't",
                                         "specifically", "deliberately", "however"}:
            b -= 1
        if b < 0 or self.low[b] not in {",", "，"}:
            return end, items
        final = {"?", ".", "!", "？", "！"}
        if self.low_at(end) in {"that", "which", "who"}:
            m = end
            while m < self.n and not self.hard_stop(m):
                m += 1
            if m >= self.n or self.low[m] in final:
                return m, items[:-1] + [(items[-1][0], m)]
        if self.low_at(end) in {",", "，"} and end + 1 < self.n:
            k = end + 1
            m = k
            while m < self.n and not (self.hard_stop(m) and self.low[m] not in {",", "，"}):
                m += 1
            first = self.low[k]
            starts = first in {"a", "an", "the", "one", "also"} or (
                first.endswith("ed") and first not in AUX and first not in CLAUSE_STARTERS)
            clean = not any(self.low[x] in WH or self.low[x] in (AUX - {"been", "be"}) or
                            self.low[x] in {"i", "you", "we", "please", "and"} or
                            self._cue_starts(x) for x in range(k, m))
            if starts and clean and m > k and (m >= self.n or self.low[m] in final):
                return m, items[:-1] + [(items[-1][0], m)]
        return end, items

    def extend_fronted(self, i: int, end: int, items: list[tuple[int, int]]
                       ) -> tuple[int, list[tuple[int, int]]]:
        """A sentence-initial cue ("On top of X, the city in Y, what other …"): appositions
        between the object and the main clause belong to the object."""
        if not self.sentence_start(i) or not items:
            return end, items
        for _ in range(3):
            if self.low_at(end) not in {",", "，"}:
                break
            k = end + 1
            m = k
            while m < self.n and not self.hard_stop(m):
                m += 1
            if m == k or m >= self.n or self.low[m] not in {",", "，"}:
                break
            first = self.low[k]
            if first in CLAUSE_STARTERS or first in OBJECT_STOPS or self._cue_starts(k) or \
                    any(self.low[x] in WH for x in range(k, m)):
                break
            items = items[:-1] + [(items[-1][0], m)]
            end = m
        return end, items

    def _cue_starts(self, j: int) -> bool:
        lw = self.low_at(j)
        if lw == "no" and (self.low_at(j + 1) == "." or self.low_at(j + 1)[:1].isdigit()):
            return False  # "Symphony No. 9"
        if lw in NEG_WORDS or lw == "no":
            return not self.idiom_len(j)
        return any(self.seq_at(j, seq) for seq in _STRONG_CUES)

    def clean_object(self, a: int, b: int) -> str:
        s = self.text(a, b)
        for ch in QUOTES:
            s = s.replace(ch, "")
        s = _norm_ws(s)
        prev = None
        while prev != s:
            prev = s
            m = _LEAD_FILLER.match(s)
            if m and m.end() < len(s):
                s = s[m.end():]
            s = _TRAIL_FILLER.sub("", s)
            s = s.strip(_STRIP_CHARS)
        return s

    # -- the scan ------------------------------------------------------------------------------
    def analyse(self) -> _Analysis:
        cues: list[_Cue] = []
        i = 0
        while i < self.n:
            t = self.t[i]
            if t.quoted or not _is_word(t) and t.low != "n't":
                i += 1
                continue
            skip = self.idiom_len(i)
            if skip:
                i += skip
                continue
            cue = None
            lw = t.low
            if lw.endswith("-free") and lw[:-5] and lw[:-5].split("-")[-1] not in FREE_STOP:
                neg = t.text[:-5]
                cue = _Cue("free", t.text, (i, i + 1), [neg])
            elif lw in NEG_WORDS:
                cue = self.negation(i)
            elif lw == "no":
                cue = self.no_cue(i)
            else:
                cue = self.object_cue(i)
            if cue is None:
                i += 1
                continue
            cues.append(cue)
            self.cues_so_far.append(cue)
            i = max(cue.span[1], i + 1)
        an = _Analysis(self.q, self.t, cues)
        an.positive = self.positive(cues)
        return an

    def object_cue(self, i: int) -> _Cue | None:
        for seq in OBJECT_CUES:
            if not self.seq_at(i, seq):
                continue
            head = seq[0]
            prev = self.low_at(i - 1)
            nxt = self.low_at(i + len(seq))
            sentence_start = self.sentence_start(i)
            if head in {"disregarding", "ignoring"} and prev != "to":
                end, _ = self.take_object(i + len(seq))
                if end >= self.n or self.low[end] in {"?", ".", "!", "？", "！"}:
                    # an adjunct to the end: "… Dennis Rader disregarding the telefilm X?"
                    sentence_start = True
            if head in INSTRUCTION_VERBS and head not in {"refrain", "refraining"}:
                if not (sentence_start or nxt in INSTRUCTION_NEXT or
                        (prev in INSTRUCTION_PREV and prev != "to")):
                    return None
            if head in {"lack", "lacks", "lacked"} and (nxt == "of" or prev in DETERMINERS):
                return None
            if seq == ("other", "than") and prev in {"none", "no"}:
                return None
            if seq in ADDITIVE_CUES:
                end, _ = self.take_object(i + len(seq))
                outside = self.low[:i] + self.low[end:]
                at_end = end >= self.n or self.low[end] in {"?", ".", "!", "？", "！"}
                if not (OTHER_WORDS & set(outside) or
                        (seq in {("in", "addition", "to"), ("on", "top", "of")} and at_end) or
                        (seq in {("in", "addition", "to"), ("beyond",)} and sentence_start) or
                        (seq in {("beyond",), ("outside", "of")} and prev in {")", ","}) or
                        (seq == ("outside", "of") and nxt in {"his", "her", "their", "its"})):
                    return None
            if seq == ("non",):  # "a non Islamic summary" (hyphenated non-X is not a cue)
                if i + 1 < self.n and _is_word(self.t[i + 1]):
                    neg = self.t[i + 1].text
                    if content_words(neg):
                        return _Cue("object", "non", (i, i + 2), [neg])
                return None
            if seq == ("nothing", "to", "do", "with") and prev not in {"has", "have", "had",
                                                                        "having"}:
                return None
            stop = frozenset({"nor"}) if head == "neither" else frozenset()
            start = i + len(seq)
            end, items = self.take_object(start, stop_at=stop)
            end, items = self.extend_fronted(i, end, items)
            end, items = self.extend_trailing(i, end, items)
            negs = self.negatives(items)
            if not negs:
                return None
            if seq == ("nothing", "to", "do", "with"):
                i -= 1  # "has nothing to do with X": cut the verb too
            return _Cue("object", " ".join(seq), (i, end), negs)
        # "Who else but X": "but" after "else"
        if self.low[i] == "but" and self.low_at(i - 1) == "else" and self.low_at(i + 1) != "not":
            end, items = self.take_object(i + 1)
            negs = self.negatives(items)
            if negs:
                return _Cue("object", "else but", (i, end), negs)
        return None

    def negatives(self, items: list[tuple[int, int]]) -> list[str]:
        """Cleaned object items that keep at least one content word."""
        out = []
        for a, b in items:
            x = self.clean_object(a, b)
            quoted = any(self.t[y].quoted for y in range(a, b))
            if content_words(x) or (quoted and any(ch.isalnum() for ch in x)):
                out.append(x)
        return out

    def no_cue(self, i: int) -> _Cue | None:
        nxt = self.t[i + 1] if i + 1 < self.n else None
        if nxt is None or not _is_word(nxt) or self.hard_stop(i + 1):
            return None
        if nxt.low == "longer":
            return self.verbal(i, 2, replacement="still")
        if self.low_at(i - 1) in {"yes", "or"} or nxt.low in {"or", "and"}:
            return None
        end, items = self.take_object(i + 1)
        negs = self.negatives(items)
        if not negs:
            return None
        return _Cue("object", "no", (i, end), negs)

    def negation(self, k: int) -> _Cue | None:
        lw = self.low[k]
        # directive: "do not mention X", "never discuss X", "not including X"
        j = k + 1
        while self.low_at(j) in {"please", "to", "even", "explicitly", "directly", "actually",
                                 "really", "specifically", "be"}:
            j += 1
        verb = self.low_at(j)
        passive = self.low_at(k - 1) in {"is", "are", "was", "were", "be", "been", "being"} and \
            self.low_at(j) not in {"related", "interested", "looking", "concerned"}
        if verb in DIRECTIVES and not self.t[j].quoted and not passive and self._directive_ok(j):
            j += 1
            while self.low_at(j) in DIRECTIVES[verb]:
                j += 1
            while self.low_at(j) in {"or", "and", "nor"} and self.low_at(j + 1) in DIRECTIVES:
                verb = self.low[j + 1]  # "not comparing or referencing X"
                j += 2
                while self.low_at(j) in DIRECTIVES[verb]:
                    j += 1
            start = k - 1 if (lw == "n't" or self.low_at(k - 1) in AUX) and k > 0 else k
            end, items = self.take_object(j)
            end, items = self.extend_trailing(start, end, items)
            negs = self.negatives(items)
            if negs:
                return _Cue("object", self.text(min(start, k), j), (start, end), negs)
            # no object ("… that Oceans didn't discuss?"): a plain verbal negation
        # "but not X", ", not X", "though not X": exclusion of a constituent
        prev = self.low_at(k - 1)
        if lw == "not" and prev in {"but", ",", "though", "although", "yet", "and", "or", "("} \
                and self.low_at(k + 1) not in AUX and k + 1 < self.n and _is_word(self.t[k + 1]):
            end, items = self.take_object(k + 1)
            end, items = self.extend_trailing(k, end, items)
            negs = self.negatives(items)
            if negs:
                return _Cue("object", f"{prev} not", (k, end), negs)
            return None
        length = 2 if self.low_at(k + 1) == "yet" else 1
        return self.verbal(k, length)

    def _directive_ok(self, j: int) -> bool:
        verb, nxt = self.low[j], self.low_at(j + 1)
        if verb in {"want", "wants"}:  # "don't want to know about X", not "don't want to go"
            return (nxt == "to" and self.low_at(j + 2) in {"know", "hear", "learn", "read", "see",
                                                           "get", "include", "mention"}) or \
                nxt in {"any", "anything", "information", "details", "mention", "references"}
        parts = DIRECTIVES[verb]
        return not parts or nxt in parts or verb in {"talk", "talks", "talking", "speak",
                                                     "speaks", "speaking"}

    # -- verbal negation -----------------------------------------------------------------------
    def clause_left(self, j: int) -> int:
        """Index of the first token of the clause ending at token j (scanning left). "and" /
        "or" open a clause only before an auxiliary, pronoun, determiner or wh-word, or after a
        comma ("side-by-side and feature-by-feature comparison … is not" is one clause)."""
        while j >= 0:
            t = self.t[j]
            if not t.quoted and (self.hard_stop(j) or t.low in QUOTES or
                                 t.low in LEFT_BOUNDARY_WORDS):
                if t.low in {"and", "or"} and not (
                        self.low_at(j + 1) in AUX | PRONOUNS | DETERMINERS | WH or
                        self.low_at(j - 1) == ","):
                    j -= 1
                    continue
                return j + 1
            j -= 1
        return 0

    def clause_right(self, j: int) -> int:
        while j < self.n:
            t = self.t[j]
            if not t.quoted:
                if self.hard_stop(j) or t.low in RIGHT_BOUNDARY_WORDS:
                    return j
                if t.low in {"and", "or"} and (self.low_at(j + 1) in CLAUSE_STARTERS or
                                               self.low_at(j + 1) in NEG_WORDS):
                    return j
            j += 1
        return self.n

    def verbal(self, k: int, length: int, replacement: str | None = None) -> _Cue | None:
        lw = self.low[k]
        neg_end = k + length
        if lw == "n't" or (k > 0 and self.low[k - 1] in AUX and lw != "cannot"):
            a: int | None = k - 1
        elif lw == "cannot":
            a = k
        else:
            a = None
        L0 = self.clause_left(k - 1)
        if a is not None and a < L0:
            a = None
        R = self.clause_right(neg_end)
        subj_end = a if a is not None else k
        subject_content = any(_content(self.t[x]) for x in range(L0, subj_end))
        L = L0
        boundary = self.low_at(L0 - 1)
        if not subject_content and L0 > 0 and (
                boundary in {"that", "which", "who", "and", "but", "or", "whom"} or
                boundary in QUOTES):
            L = self.clause_left(L0 - 2)
        elif not subject_content and boundary == ")":
            p = next((x for x in range(L0 - 2, max(-1, L0 - 12), -1) if self.low[x] == "("), None)
            if p is not None:
                L = self.clause_left(p - 1)
        taken = {x for c in self.cues_so_far for x in range(*c.span)}
        if not any(_content(self.t[x]) or self.low[x] in PRONOUNS
                   for x in range(L, subj_end) if x not in taken):
            # still no subject: fall back to the sentence up to the negation, minus other cues
            L = L0
            while L > 0 and not self.sentence_start(L):
                L -= 1
        # negative: the affirmative clause
        drop = set(range(k, neg_end))
        repl: dict[int, str] = {}
        if a is not None and a != k:
            if self.low[a] in DO:
                drop.add(a)
            elif self.low[a] in _AUX_FULL:
                repl[a] = _AUX_FULL[self.low[a]]
        elif lw == "cannot":
            drop.discard(k)
            repl[k] = "can"
        inverted: tuple[int, ...] = ()
        if a is None:  # inverted question: "What did the Germans not want …"
            for x in range(L0, min(k, L0 + 3)):
                if self.low[x] in DO:
                    drop.add(x)
                    inverted = (x,)
                    break
        if replacement:
            drop.discard(k)
            repl[k] = replacement
            drop.add(k + 1)
        idx = [x for x in range(L, R) if x not in drop and self.t[x].low not in QUOTES
               and x not in taken]
        negative = self._strip_leads(self.join(idx, repl))
        # positive: the query with the negated predicate cut
        if not subject_content and boundary in SUBORDINATORS and L == L0:
            P = L0 - 1
        else:
            P = a if a is not None else k
        if not content_words(negative):
            return None
        return _Cue("verbal", self.text(k, neg_end), (P, R), [negative], verbal=True,
                    pos_drop=inverted if R >= self.n or self.hard_stop(R) else ())

    @staticmethod
    def _strip_leads(s: str) -> str:
        s = s.strip(_STRIP_CHARS)
        s = _LEAD_IMPERATIVE.sub("", s)
        words = s.split()
        while words and words[0].lower() in {"and", "but", "or", "that", "which", "who", "so"}:
            words = words[1:]
        if words and words[0].lower() in WH:
            words = words[1:]
            if len(words) > 1 and words[0].lower() in AUX:
                words = words[1:]
        s = " ".join(words).strip(_STRIP_CHARS)
        return s

    # -- positive ------------------------------------------------------------------------------
    def positive(self, cues: list[_Cue]) -> str:
        if not cues:
            return self.q
        cut: set[int] = set()
        for c in cues:
            s, e = c.span
            while s > 0 and self.low[s - 1] in ABSORB_BEFORE and not self.t[s - 1].quoted \
                    and (s - 1) not in cut:
                if self.low[s - 1] in WH | {"that"} and (s == 1 or self.hard_stop(s - 2)):
                    break  # a sentence-initial "Which …" is not a relative pronoun
                s -= 1
            if self.low_at(s) == "(" and self.low_at(e) == ")":
                e += 1
            before = self.low_at(s - 1)
            if self.low_at(e) == "," and (s == 0 or before in {",", ";", "(", "."} or
                                          (s > 0 and self.hard_stop(s - 1))):
                e += 1
            cut.update(range(s, e))
            cut.update(c.pos_drop)
        kept = [x for x in range(self.n) if x not in cut]
        words = [x for x in kept if _is_word(self.t[x])]
        cut_at_end = bool(words) and any(x in cut for x in range(words[-1] + 1, self.n))
        if cut_at_end:  # "… because they [cut]" → "…"
            while len(kept) > 1 and (self.low[kept[-1]] in STOPWORDS or
                                     self.low[kept[-1]] in HARD_PUNCT - {")"}) and \
                    any(_content(self.t[x]) for x in kept[:-1]):
                kept.pop()
        # drop dangling punctuation at the start and function words / punctuation at the end
        while kept and (self.low[kept[0]] in HARD_PUNCT or self.low[kept[0]] in
                        {"and", "but", "or", "please", "also"}):
            kept.pop(0)
        while kept and ((self.low[kept[-1]] in HARD_PUNCT | QUOTES | {"-", "–", "—"} and not (
                self.low[kept[-1]] == ")" and sum(self.low[x] == "(" for x in kept) >=
                sum(self.low[x] == ")" for x in kept))) or
                        self.low[kept[-1]] in {"and", "or", "but", "that", "which", "who",
                                               "while", "with", "by", "please", "also", "the",
                                               "a", "an", "do", "does", "did"}):
            if self.low[kept[-1]] in QUOTES and sum(self.low[x] in QUOTES for x in kept) % 2 == 0:
                break
            kept.pop()
        # a wh-word (+ auxiliary) before a verbless fragment: "Which animals" → "animals"
        if kept and self.low[kept[0]] in WH and any(c.verbal for c in cues):
            rest = kept[1:]
            if rest and self.low[rest[0]] in AUX:
                rest = rest[1:]
            if not any(self.low[x] in AUX or self.low[x] == "n't" for x in rest):
                kept = rest
        text = self.join(kept).strip(" ,;:")
        if not any(_content(self.t[x]) for x in kept):
            return ""
        return text


# --------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------

def explain(query: str) -> list[dict]:
    """The cues found in ``query``: ``[{"kind", "cue", "negatives", "span"}]`` (span in
    characters of the query), in query order. For debugging and tests."""
    an = _Analyser(query).analyse()
    out = []
    for c in an.cues:
        s, e = c.span
        out.append({"kind": c.kind, "cue": c.cue, "negatives": list(c.negatives),
                    "span": (an.tokens[s].start, an.tokens[e - 1].end) if s < e else (0, 0)})
    return out


def rules_decompose(query: str) -> Decomposition:
    """LLM-free decomposition of ``query`` by the explicit-negation rules of this module
    (``source="rules"``). No cue → ``positives=(query,)``, ``negatives=()``."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    an = _Analyser(query).analyse()
    negatives: list[str] = []
    for c in an.cues:
        negatives.extend(c.negatives)
    positives = [an.positive] if an.positive else []
    return clean_decomposition(query, positives, negatives, source="rules")


# --------------------------------------------------------------------------------------------
# agreement
# --------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _singular(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes", "zes")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def content_words(text: str) -> frozenset[str]:
    """Lower-cased content words (stopwords removed, possessives and simple plurals stripped)."""
    out = set()
    for w in _WORD.findall(text.translate(_CURLY).lower()):
        w = w.split("'")[0]
        if w and w not in STOPWORDS and w != "n":
            out.add(_singular(w))
    return frozenset(out)


def _jaccard(a: str, b: str) -> float:
    ca, cb = content_words(a), content_words(b)
    if not ca and not cb:
        return 1.0 if _key(a) == _key(b) else 0.0
    return len(ca & cb) / len(ca | cb)


def agreement(a: Decomposition, b: Decomposition) -> dict[str, bool | float]:
    """``detect``: both have ≥ 1 negative or both have none; ``neg_overlap``: max content-word
    Jaccard over pairs of negatives (1.0 when both have none, 0.0 when exactly one has none);
    ``agree``: ``detect`` and ``neg_overlap ≥ 0.5``."""
    na, nb = list(a.negatives), list(b.negatives)
    detect = bool(na) == bool(nb)
    if not na and not nb:
        overlap = 1.0
    elif not na or not nb:
        overlap = 0.0
    else:
        overlap = max(_jaccard(x, y) for x in na for y in nb)
    return {"detect": detect, "neg_overlap": float(overlap),
            "agree": bool(detect and overlap >= 0.5)}


def agreement_summary(pairs: Iterable[tuple[Decomposition, Decomposition]]) -> dict:
    """Aggregate :func:`agreement` over pairs: ``n``, ``detect_rate``, ``agree_rate``,
    ``mean_neg_overlap`` and, per side, the share with ≥ 1 negative (``a_negated_rate``,
    ``b_negated_rate``). Rates are NaN when ``n == 0``."""
    n = 0
    det = agr = 0
    ov = 0.0
    a_neg = b_neg = 0
    for a, b in pairs:
        r = agreement(a, b)
        n += 1
        det += bool(r["detect"])
        agr += bool(r["agree"])
        ov += float(r["neg_overlap"])
        a_neg += bool(a.negatives)
        b_neg += bool(b.negatives)
    if n == 0:
        nan = math.nan
        return {"n": 0, "detect_rate": nan, "agree_rate": nan, "mean_neg_overlap": nan,
                "a_negated_rate": nan, "b_negated_rate": nan}
    return {"n": n, "detect_rate": det / n, "agree_rate": agr / n, "mean_neg_overlap": ov / n,
            "a_negated_rate": a_neg / n, "b_negated_rate": b_neg / n}
