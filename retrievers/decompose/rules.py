"""The numbered rules of :func:`rules_decompose` (docs/methods/deo.md#rules-of-rules_decompose),
one function each: :func:`exclusion_with_object` (rule 1), :func:`verbal_negation` (rule 2),
:func:`nothing_excluded` (rule 3) and :func:`cut_every_cue` (rule 4); :func:`find_cues` applies
rules 1 and 2 left to right. The spans they read come from :mod:`retrievers.decompose.spans`."""

from __future__ import annotations

from .cues import (_AUX_FULL, ABSORB_BEFORE, ADDITIVE_CUES, AUX, DETERMINERS, DIRECTIVES, DO, FREE_STOP, HARD_PUNCT,
                      INSTRUCTION_NEXT, INSTRUCTION_PREV, INSTRUCTION_VERBS, NEG_WORDS, OBJECT_CUES, OTHER_WORDS,
                      PRONOUNS, QUOTES, STOPWORDS, SUBORDINATORS, WH, content_words)
from .record import Decomposition, clean_decomposition
from .spans import _content, _Cue, _is_word, _Spans


def find_cues(sp: _Spans) -> list[_Cue]:
    """Every cue of the query, in query order: at each token (quoted text and idioms skipped)
    rule 1, else rule 2 where the token negates a predicate; the scan resumes after a cue's
    span."""
    cues: list[_Cue] = []
    i = 0
    while i < sp.n:
        t = sp.t[i]
        if t.quoted or not _is_word(t) and t.low != "n't":
            i += 1
            continue
        skip = sp.idiom_len(i)
        if skip:
            i += skip
            continue
        cue = exclusion_with_object(sp, i)
        if cue is None and _negates_predicate(sp, i):
            cue = verbal_negation(sp, i, cues)
        if cue is None:
            i += 1
            continue
        cues.append(cue)
        i = max(cue.span[1], i + 1)
    return cues


# --------------------------------------------------------------------------------------------
# rule 1: exclusion with an object
# --------------------------------------------------------------------------------------------

def exclusion_with_object(sp: _Spans, i: int) -> _Cue | None:
    """Rule 1, exclusion with an object: the cue that starts at token ``i`` (an ``X-free`` word,
    a mention directive after a negation, "but not X", ``no`` as a determiner, or one of the
    object cues), its object's items as the negatives and the span cut from the positive; None
    when no exclusion starts there."""
    t, lw = sp.t[i], sp.low[i]
    if lw.endswith("-free") and lw[:-5] and lw[:-5].split("-")[-1] not in FREE_STOP:
        return _Cue("free", t.text, (i, i + 1), [t.text[:-5]])
    if lw in NEG_WORDS:
        return _mention_directive(sp, i) or _but_not(sp, i)
    if lw == "no":
        return _no_determiner(sp, i)
    return _object_cue(sp, i)


def _object_cue(sp: _Spans, i: int) -> _Cue | None:
    """The object cues (``without``, ``except``, ``other than``, ``instead of``, the instruction
    verbs and additive cues in their positions, ``non X``, "Who else but X" …)."""
    for seq in OBJECT_CUES:
        if not sp.seq_at(i, seq):
            continue
        head = seq[0]
        prev = sp.low_at(i - 1)
        nxt = sp.low_at(i + len(seq))
        sentence_start = sp.sentence_start(i)
        if head in {"disregarding", "ignoring"} and prev != "to":
            end, _ = sp.take_object(i + len(seq))
            if end >= sp.n or sp.low[end] in {"?", ".", "!", "？", "！"}:
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
            end, _ = sp.take_object(i + len(seq))
            outside = sp.low[:i] + sp.low[end:]
            at_end = end >= sp.n or sp.low[end] in {"?", ".", "!", "？", "！"}
            if not (OTHER_WORDS & set(outside) or
                    (seq in {("in", "addition", "to"), ("on", "top", "of")} and at_end) or
                    (seq in {("in", "addition", "to"), ("beyond",)} and sentence_start) or
                    (seq in {("beyond",), ("outside", "of")} and prev in {")", ","}) or
                    (seq == ("outside", "of") and nxt in {"his", "her", "their", "its"})):
                return None
        if seq == ("non",):  # "a non Islamic summary" (hyphenated non-X is not a cue)
            if i + 1 < sp.n and _is_word(sp.t[i + 1]):
                neg = sp.t[i + 1].text
                if content_words(neg):
                    return _Cue("object", "non", (i, i + 2), [neg])
            return None
        if seq == ("nothing", "to", "do", "with") and prev not in {"has", "have", "had",
                                                                    "having"}:
            return None
        stop = frozenset({"nor"}) if head == "neither" else frozenset()
        start = i + len(seq)
        end, items = sp.take_object(start, stop_at=stop)
        end, items = sp.extend_fronted(i, end, items)
        end, items = sp.extend_trailing(i, end, items)
        negs = sp.negatives(items)
        if not negs:
            return None
        if seq == ("nothing", "to", "do", "with"):
            i -= 1  # "has nothing to do with X": cut the verb too
        return _Cue("object", " ".join(seq), (i, end), negs)
    # "Who else but X": "but" after "else"
    if sp.low[i] == "but" and sp.low_at(i - 1) == "else" and sp.low_at(i + 1) != "not":
        end, items = sp.take_object(i + 1)
        negs = sp.negatives(items)
        if negs:
            return _Cue("object", "else but", (i, end), negs)
    return None


def _no_determiner(sp: _Spans, i: int) -> _Cue | None:
    """``no`` as a determiner: its object (``no longer`` is rule 2)."""
    nxt = sp.t[i + 1] if i + 1 < sp.n else None
    if nxt is None or not _is_word(nxt) or sp.hard_stop(i + 1):
        return None
    if nxt.low == "longer":
        return None  # "no longer": rule 2
    if sp.low_at(i - 1) in {"yes", "or"} or nxt.low in {"or", "and"}:
        return None
    end, items = sp.take_object(i + 1)
    negs = sp.negatives(items)
    if not negs:
        return None
    return _Cue("object", "no", (i, end), negs)


def _mention_directive(sp: _Spans, k: int) -> _Cue | None:
    """A negated mention directive: "do not mention X", "never discuss X", "not including X";
    None when the directive has no object ("… that Oceans didn't discuss?")."""
    lw = sp.low[k]
    j = k + 1
    while sp.low_at(j) in {"please", "to", "even", "explicitly", "directly", "actually",
                           "really", "specifically", "be"}:
        j += 1
    verb = sp.low_at(j)
    passive = sp.low_at(k - 1) in {"is", "are", "was", "were", "be", "been", "being"} and \
        sp.low_at(j) not in {"related", "interested", "looking", "concerned"}
    if verb in DIRECTIVES and not sp.t[j].quoted and not passive and _directive_ok(sp, j):
        j += 1
        while sp.low_at(j) in DIRECTIVES[verb]:
            j += 1
        while sp.low_at(j) in {"or", "and", "nor"} and sp.low_at(j + 1) in DIRECTIVES:
            verb = sp.low[j + 1]  # "not comparing or referencing X"
            j += 2
            while sp.low_at(j) in DIRECTIVES[verb]:
                j += 1
        start = k - 1 if (lw == "n't" or sp.low_at(k - 1) in AUX) and k > 0 else k
        end, items = sp.take_object(j)
        end, items = sp.extend_trailing(start, end, items)
        negs = sp.negatives(items)
        if negs:
            return _Cue("object", sp.text(min(start, k), j), (start, end), negs)
    return None


def _but_not(sp: _Spans, k: int) -> _Cue | None:
    """"but not X", ", not X", "though not X": the exclusion of a constituent (None when it keeps
    no content word; such a negation is then not read as a verbal one either)."""
    if not _is_but_not(sp, k):
        return None
    prev = sp.low_at(k - 1)
    end, items = sp.take_object(k + 1)
    end, items = sp.extend_trailing(k, end, items)
    negs = sp.negatives(items)
    if negs:
        return _Cue("object", f"{prev} not", (k, end), negs)
    return None


def _is_but_not(sp: _Spans, k: int) -> bool:
    return sp.low[k] == "not" and sp.low_at(k - 1) in {"but", ",", "though", "although", "yet", "and", "or", "("} \
        and sp.low_at(k + 1) not in AUX and k + 1 < sp.n and _is_word(sp.t[k + 1])


def _directive_ok(sp: _Spans, j: int) -> bool:
    verb, nxt = sp.low[j], sp.low_at(j + 1)
    if verb in {"want", "wants"}:  # "don't want to know about X", not "don't want to go"
        return (nxt == "to" and sp.low_at(j + 2) in {"know", "hear", "learn", "read", "see",
                                                     "get", "include", "mention"}) or \
            nxt in {"any", "anything", "information", "details", "mention", "references"}
    parts = DIRECTIVES[verb]
    return not parts or nxt in parts or verb in {"talk", "talks", "talking", "speak",
                                                 "speaks", "speaking"}


# --------------------------------------------------------------------------------------------
# rule 2: verbal / predicate negation
# --------------------------------------------------------------------------------------------

def _negates_predicate(sp: _Spans, i: int) -> bool:
    """Whether rule 2 reads token ``i`` (where rule 1 found no exclusion): a negation word other
    than the "but not X" kind, or ``no longer``."""
    lw = sp.low[i]
    if lw in NEG_WORDS:
        return not _is_but_not(sp, i)
    return lw == "no" and sp.low_at(i + 1) == "longer"


def verbal_negation(sp: _Spans, k: int, earlier: list[_Cue]) -> _Cue | None:
    """Rule 2, verbal / predicate negation at token ``k`` (``not``, ``n't``, ``cannot``,
    ``never``, ``no longer``, ``not yet``): the negative is the affirmative clause, the span cut
    from the positive the negated predicate. ``earlier``: the cues found before (their spans are
    not read again). None when the clause keeps no content word."""
    lw = sp.low[k]
    if lw == "no":  # "no longer" -> "still"
        length, replacement = 2, "still"
    else:
        length, replacement = (2 if sp.low_at(k + 1) == "yet" else 1), None
    neg_end = k + length
    if lw == "n't" or (k > 0 and sp.low[k - 1] in AUX and lw != "cannot"):
        a: int | None = k - 1
    elif lw == "cannot":
        a = k
    else:
        a = None
    L0 = sp.clause_left(k - 1)
    if a is not None and a < L0:
        a = None
    R = sp.clause_right(neg_end)
    subj_end = a if a is not None else k
    subject_content = any(_content(sp.t[x]) for x in range(L0, subj_end))
    L = L0
    boundary = sp.low_at(L0 - 1)
    if not subject_content and L0 > 0 and (
            boundary in {"that", "which", "who", "and", "but", "or", "whom"} or
            boundary in QUOTES):
        L = sp.clause_left(L0 - 2)
    elif not subject_content and boundary == ")":
        p = next((x for x in range(L0 - 2, max(-1, L0 - 12), -1) if sp.low[x] == "("), None)
        if p is not None:
            L = sp.clause_left(p - 1)
    taken = {x for c in earlier for x in range(*c.span)}
    if not any(_content(sp.t[x]) or sp.low[x] in PRONOUNS
               for x in range(L, subj_end) if x not in taken):
        # still no subject: fall back to the sentence up to the negation, minus other cues
        L = L0
        while L > 0 and not sp.sentence_start(L):
            L -= 1
    # negative: the affirmative clause
    drop = set(range(k, neg_end))
    repl: dict[int, str] = {}
    if a is not None and a != k:
        if sp.low[a] in DO:
            drop.add(a)
        elif sp.low[a] in _AUX_FULL:
            repl[a] = _AUX_FULL[sp.low[a]]
    elif lw == "cannot":
        drop.discard(k)
        repl[k] = "can"
    inverted: tuple[int, ...] = ()
    if a is None:  # inverted question: "What did the Germans not want …"
        for x in range(L0, min(k, L0 + 3)):
            if sp.low[x] in DO:
                drop.add(x)
                inverted = (x,)
                break
    if replacement:
        drop.discard(k)
        repl[k] = replacement
        drop.add(k + 1)
    idx = [x for x in range(L, R) if x not in drop and sp.t[x].low not in QUOTES
           and x not in taken]
    negative = sp.strip_leads(sp.join(idx, repl))
    # positive: the query with the negated predicate cut
    if not subject_content and boundary in SUBORDINATORS and L == L0:
        P = L0 - 1
    else:
        P = a if a is not None else k
    if not content_words(negative):
        return None
    return _Cue("verbal", sp.text(k, neg_end), (P, R), [negative], verbal=True,
                pos_drop=inverted if R >= sp.n or sp.hard_stop(R) else ())


# --------------------------------------------------------------------------------------------
# rules 3 and 4: the decomposition
# --------------------------------------------------------------------------------------------

def nothing_excluded(query: str) -> Decomposition:
    """Rule 3, no cue: positives ``(query,)``, negatives ``()``."""
    return clean_decomposition(query, [query], [], source="rules")


def cut_every_cue(sp: _Spans, cues: list[_Cue]) -> str:
    """Rule 4, several cues (one or more): the one positive, the query with every cue's span cut
    (with the words it leaves dangling); "" when no content word is left."""
    cut: set[int] = set()
    for c in cues:
        s, e = c.span
        while s > 0 and sp.low[s - 1] in ABSORB_BEFORE and not sp.t[s - 1].quoted \
                and (s - 1) not in cut:
            if sp.low[s - 1] in WH | {"that"} and (s == 1 or sp.hard_stop(s - 2)):
                break  # a sentence-initial "Which …" is not a relative pronoun
            s -= 1
        if sp.low_at(s) == "(" and sp.low_at(e) == ")":
            e += 1
        before = sp.low_at(s - 1)
        if sp.low_at(e) == "," and (s == 0 or before in {",", ";", "(", "."} or
                                    (s > 0 and sp.hard_stop(s - 1))):
            e += 1
        cut.update(range(s, e))
        cut.update(c.pos_drop)
    kept = [x for x in range(sp.n) if x not in cut]
    words = [x for x in kept if _is_word(sp.t[x])]
    cut_at_end = bool(words) and any(x in cut for x in range(words[-1] + 1, sp.n))
    if cut_at_end:  # "… because they [cut]" → "…"
        while len(kept) > 1 and (sp.low[kept[-1]] in STOPWORDS or
                                 sp.low[kept[-1]] in HARD_PUNCT - {")"}) and \
                any(_content(sp.t[x]) for x in kept[:-1]):
            kept.pop()
    # drop dangling punctuation at the start and function words / punctuation at the end
    while kept and (sp.low[kept[0]] in HARD_PUNCT or sp.low[kept[0]] in
                    {"and", "but", "or", "please", "also"}):
        kept.pop(0)
    while kept and ((sp.low[kept[-1]] in HARD_PUNCT | QUOTES | {"-", "–", "—"} and not (
            sp.low[kept[-1]] == ")" and sum(sp.low[x] == "(" for x in kept) >=
            sum(sp.low[x] == ")" for x in kept))) or
                    sp.low[kept[-1]] in {"and", "or", "but", "that", "which", "who",
                                         "while", "with", "by", "please", "also", "the",
                                         "a", "an", "do", "does", "did"}):
        if sp.low[kept[-1]] in QUOTES and sum(sp.low[x] in QUOTES for x in kept) % 2 == 0:
            break
        kept.pop()
    # a wh-word (+ auxiliary) before a verbless fragment: "Which animals" → "animals"
    if kept and sp.low[kept[0]] in WH and any(c.verbal for c in cues):
        rest = kept[1:]
        if rest and sp.low[rest[0]] in AUX:
            rest = rest[1:]
        if not any(sp.low[x] in AUX or sp.low[x] == "n't" for x in rest):
            kept = rest
    text = sp.join(kept).strip(" ,;:")
    if not any(_content(sp.t[x]) for x in kept):
        return ""
    return text


def rules_decompose(query: str) -> Decomposition:
    """LLM-free decomposition of ``query`` by the explicit-negation rules of this package
    (``source="rules"``). No cue → ``positives=(query,)``, ``negatives=()`` (rule 3); otherwise
    every cue's negatives in query order and one positive with every span cut (rule 4)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    sp = _Spans(query)
    cues = find_cues(sp)
    if not cues:
        return nothing_excluded(query)
    negatives = [n for c in cues for n in c.negatives]
    positive = cut_every_cue(sp, cues)
    return clean_decomposition(query, [positive] if positive else [], negatives, source="rules")


def explain(query: str) -> list[dict]:
    """The cues found in ``query``: ``[{"kind", "cue", "negatives", "span"}]`` (span in
    characters of the query), in query order. For debugging and tests."""
    sp = _Spans(query)
    out = []
    for c in find_cues(sp):
        s, e = c.span
        out.append({"kind": c.kind, "cue": c.cue, "negatives": list(c.negatives),
                    "span": (sp.t[s].start, sp.t[e - 1].end) if s < e else (0, 0)})
    return out
