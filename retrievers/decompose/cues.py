"""The decomposer's word lists and patterns (the rules that read them are in
:mod:`retrievers.decompose.rules`), and the content words of a text."""

from __future__ import annotations

import re

from harness.data.stopwords import STOPWORDS as SHARED_STOPWORDS

# The decomposer's stopwords: the shared list (harness/data/stopwords.py, also the diagnostic
# builders') less the words the decomposer must read as content, plus a few it must not. Taking
# the shared list as it is would change 20 of the 8,068 rule decompositions of the shared
# benchmark queries (ExcluIR, NegConstraint, NevIR, SciFact and the diagnostic sets), and so the
# deo-rules figures: e.g. "anyone", "whole" and "nothing" would no longer count as content words
# of a positive, and "please" / "let's" would.
_CONTENT_HERE = frozenset("""
across almost alone along already although always among another anybody anyone anywhere around
became become becomes beside besides beyond cannot done enough even least less many near never
nobody none nothing often onto otherwise perhaps several since something sometimes still thereby
therefore though throughout together toward towards unless well whenever whereas whereby wherein
whoever whole without
""".split())
_STOPWORDS_HERE = frozenset("""
i'd i'm i've let let's like please quite thereof we're you're
""".split())
STOPWORDS = (SHARED_STOPWORDS - _CONTENT_HERE) | _STOPWORDS_HERE

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
# content words (the negatives' test and the agreement measure)
# --------------------------------------------------------------------------------------------

_CURLY = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})
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

