"""Cached WordNet look-ups (parts of speech, SemCor counts, compounds, verb bases,
unambiguous antonyms) used by the rules."""

from __future__ import annotations

from typing import Any


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
