"""Builders for the antonym, negation and exclusion diagnostic sets, from any corpus.

CoDeR (arXiv 2606.13204, Appendix A, Table 5) builds three controlled diagnostics: an antonym set
from SciFact (102 queries / 306 passages), a negation set from SciDocs (104 / 304) and an
exclusion set from NFCorpus (104 / 312). The builders here reproduce that construction for any
:class:`harness.types.Corpus`, with explicit, deterministic rules:

* every candidate document (at least four sentences) is split into passages of 1–3 consecutive
  sentences; a group keeps 3–5 passages of one document;
* ``antonym``: one passage is copied with an adjective ``w`` replaced by its WordNet antonym;
  two queries ("Find evidence that <sentence with w>." / "... with the antonym") share the
  group's passages. For each query its own passage is satisfying (grade 2), the swapped copy
  violating (0), the other passages neutral (1);
* ``negation``: the same with a negated copy of one sentence (``not`` after an auxiliary, or
  ``does not`` / ``did not`` before an unambiguous verb);
* ``exclusion``: "Find passages about X that do not mention Y." over three passages of one
  document: one with X and without Y (2), one with X and Y (0), one with neither (1).

Output records follow the released CoDeR schema (``queries_<set>.jsonl``: ``query_id, query,
category, topical_relevant_doc_ids, constraint_satisfying_doc_ids,
constraint_violating_doc_ids, graded_relevance``; ``corpus_<set>.jsonl``: ``doc_id, text``) with
provenance keys added (``source_doc_id``, the keyword / terms used, ``pair_id``). Passage ids are
``<set>-<source doc id>-p<k>`` (``k`` = 1-based passage position in the source document), the
modified copy ``...-p<k>-ant`` / ``...-p<k>-neg``; query ids ``<set>-q<n>``.

Sampling is deterministic: candidate documents are sorted by id, then ``random.Random(seed)``
samples ``max_queries // 2`` of them for pairs (antonym, negation) or ``max_queries`` (exclusion),
one group per document (``max_queries=None``: every candidate document). Within a document the
antonym/negation candidate is drawn with ``random.Random(f"{seed}:{doc_id}")``; the exclusion
triple is the one with the highest IDF(X) + IDF(Y). Every rejected candidate is counted by
reason in ``params["rejected"]``.

Use :func:`load_wordnet` for WordNet offline (the data directory's ``nltk_data-wordnet.tar.gz``,
Debian's ``wordnet-base``, or ``online=True``).

The modules, in dependency order: :mod:`.text` (sentences and passages), :mod:`.words` (word
lists, whole-word matching, articles), :mod:`.wordnet_lookups` (cached WordNet look-ups),
:mod:`.clauses` (which sentences make a query, and the query text), :mod:`.negation_rules`,
:mod:`.built` (:class:`BuiltSet` and its files), :mod:`.construction` (sampling and the query
pairs shared by the antonym and negation sets), :mod:`.antonym`, :mod:`.negation`, :mod:`.terms`
(salient terms for exclusion) and :mod:`.exclusion`.
"""

from __future__ import annotations

from typing import Callable

# re-exported: the WordNet loader lives in harness.data.wordnet (CoDeR's trainer uses it too)
from harness.data.wordnet import WORDNET_TARBALL, WordNetUnavailable, extract_wordnet_tarball, load_wordnet

from .antonym import _antonym_candidates, antonym_swap, build_antonym
from .built import BUILDER_VERSION, SET_NAMES, BuiltSet
from .clauses import CaseModel, clause_problem, make_query
from .exclusion import build_exclusion
from .wordnet_lookups import _WN
from .negation import build_negation, negation_from_released
from .negation_rules import has_negation, negate
from .terms import _aliases, _definitions, _related, _synonyms, abbreviates
from .text import _split_doc, passage_partition, split_sentences
from .words import STOPWORDS, contains_word, indefinite_article

__all__ = [
    "BUILDERS", "BUILDER_VERSION", "SET_NAMES", "WORDNET_TARBALL", "BuiltSet", "CaseModel", "STOPWORDS",
    "WordNetUnavailable", "abbreviates", "antonym_swap", "build_antonym", "build_exclusion", "build_negation",
    "clause_problem", "contains_word", "extract_wordnet_tarball", "has_negation", "indefinite_article",
    "load_wordnet", "make_query", "negate", "negation_from_released", "passage_partition", "split_sentences",
    # private helpers, importable here for the tests
    "_WN", "_aliases", "_antonym_candidates", "_definitions", "_related", "_split_doc", "_synonyms",
]

BUILDERS: dict[str, Callable[..., BuiltSet]] = {
    "antonym": build_antonym,
    "negation": build_negation,
    "exclusion": build_exclusion,
}
