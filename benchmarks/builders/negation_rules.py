"""Negation rules: detecting a negated sentence and negating the main clause of one with a
safe rule."""

from __future__ import annotations

from .clauses import AUXILIARIES, MODALS
from .wordnet_lookups import _WN
from .words import NEGATION_WORDS, STOPWORDS, _NEG_CONTRACTION, _WORD

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
