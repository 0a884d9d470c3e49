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

Layout
------
* :mod:`retrievers.decompose.record` — :class:`Decomposition`, :func:`clean_decomposition`.
* :mod:`retrievers.decompose.cues` — the word lists (stopwords from the list shared with the
  diagnostic builders, ``harness/data/stopwords.py``), :func:`content_words`.
* :mod:`retrievers.decompose.spans` — tokenisation and span extraction (objects, list items,
  clauses).
* :mod:`retrievers.decompose.rules` — one function per rule above: ``exclusion_with_object``
  (1), ``verbal_negation`` (2), ``nothing_excluded`` (3), ``cut_every_cue`` (4);
  :func:`rules_decompose`, :func:`explain`.
* :mod:`retrievers.decompose.agreement` — :func:`agreement`, :func:`agreement_summary`.
"""

from __future__ import annotations

from .agreement import agreement, agreement_summary
from .cues import content_words
from .record import MAX_ITEMS, Decomposition, clean_decomposition
from .rules import explain, rules_decompose

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
