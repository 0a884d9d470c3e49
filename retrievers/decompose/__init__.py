"""Query decomposition for DEO: positive / negative sub-queries, a rule-based decomposer and an
agreement measure between two decompositions. DEO splits a search query into *positive*
sub-queries (what the user wants: expansions that keep the query's anchors and entities, never the
query verbatim) and *negative* sub-queries (the minimal set of explicitly excluded or negated
targets, with close aliases; nothing in both lists); an LLM usually answers
``{"positives": [...], "negatives": [...]}``, which :func:`clean_decomposition` normalises.
:func:`rules_decompose` is the LLM-free decomposer behind ``deo-rules`` (standard library only,
zero API cost), and :func:`agreement` / :func:`agreement_summary` compare two decompositions (e.g.
rules vs LLM). Every cue, the idioms that are not cues, the known limits, the agreement measure,
the measured detection rates and the modules are in docs/methods/deo.md#the-rule-based-decomposer
(the rules: docs/methods/deo.md#rules-of-rules_decompose).
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
