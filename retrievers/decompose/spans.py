"""Span extraction for the rules of :mod:`retrievers.decompose.rules`: the tokenisation, a
cue's object (its end, list items, appositions, cleaned text) and the clause around a negation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .cues import (_ABBREVIATIONS, _CURLY, _LEAD_FILLER, _LEAD_IMPERATIVE, _OVERSTATED, _PREPS, _STRIP_CHARS,
                      _STRONG_CUES, _TRAIL_FILLER, AUX, CLAUSE_STARTERS, HARD_PUNCT, IDIOMS, LEFT_BOUNDARY_WORDS,
                      DETERMINERS, NEG_WORDS, OBJECT_STOPS, PRONOUNS, QUOTES, RIGHT_BOUNDARY_WORDS, STOPWORDS, WH,
                      content_words)
from .record import _norm_ws

_TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|\w+(?:[-']\w+)*|[^\w\s]")


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



@dataclass
class _Cue:
    kind: str                  # "object" | "verbal" | "free"
    cue: str                   # the cue words as found
    span: tuple[int, int]      # token span cut from the query for the positive
    negatives: list[str]
    verbal: bool = False
    pos_drop: tuple[int, ...] = ()   # extra tokens cut from the positive (inverted do-support)



class _Spans:
    """A tokenised query and the spans the rules read in it: clause boundaries, a cue's object
    and its list items, the cleaned text of a span."""

    def __init__(self, query: str):
        self.q = query
        self.t = _tokenize(query)
        self.n = len(self.t)
        self.low = [t.low for t in self.t]

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


    def negatives(self, items: list[tuple[int, int]]) -> list[str]:
        """Cleaned object items that keep at least one content word."""
        out = []
        for a, b in items:
            x = self.clean_object(a, b)
            quoted = any(self.t[y].quoted for y in range(a, b))
            if content_words(x) or (quoted and any(ch.isalnum() for ch in x)):
                out.append(x)
        return out


    # -- clauses ---------------------------------------------------------------------------------
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

    @staticmethod
    def strip_leads(s: str) -> str:
        """The negative of a verbal negation without its leading connector, wh-word (+ auxiliary)
        and imperative lead-in."""
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

