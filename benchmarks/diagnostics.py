"""Diagnostic sets.

``diag/antonym`` — CoDeR's SciFact-Antonym diagnostic: pairs of scientific queries that differ by
an antonym ("intramolecular" / "intermolecular"), each over a small pool of topical passages.

Files under ``<data_dir>/diag/antonym/``:

* ``corpus_antonym.jsonl`` — ``{doc_id, text}``
* ``queries_antonym.jsonl`` — ``{query_id, query, category, topical_relevant_doc_ids,
  constraint_satisfying_doc_ids, constraint_violating_doc_ids, graded_relevance}``

Conventions: relevance is ``graded_relevance`` cast to int — 2 satisfies the constraint, 1 is
topical only, 0 violates it; ``relevance_threshold = 2`` (only satisfying documents are
relevant); ``violating`` = ``constraint_violating_doc_ids``. Every referenced document must exist,
satisfying documents must be graded 2 and violating ones 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from harness.data import DataError, get_field, iter_jsonl
from harness.types import Benchmark, Corpus, Judgments, Query

from .common import IdTracker, LoaderBase, Origin, build_corpus, check_doc_refs, get_id_list, require_text

CODER_DATA = "https://github.com/nice-hku-coder/coder_data"
GRADES = (0, 1, 2)


def read_graded(obj: dict[str, Any], origin: Origin, line: int | None, corpus: Corpus) -> dict[str, int]:
    """``graded_relevance`` ``{doc: 0.0|1.0|2.0}`` → ``{doc: int}``, every doc known."""
    graded = get_field(obj, "graded_relevance", origin, line, kind=dict)
    out: dict[str, int] = {}
    for doc_id, grade in graded.items():
        if doc_id not in corpus:
            raise DataError(origin, line, f"field 'graded_relevance' names unknown document {doc_id!r}")
        if isinstance(grade, bool) or not isinstance(grade, (int, float)) or grade not in GRADES:
            raise DataError(origin, line, f"field 'graded_relevance': grade of {doc_id!r} must be 0, 1 or 2, "
                                          f"got {grade!r}")
        out[doc_id] = int(grade)
    return out


class AntonymDiagnostic(LoaderBase):
    """``diag/antonym`` loader; see the module docstring for its conventions."""

    task: ClassVar[str] = "constraint"
    default_measures: ClassVar[tuple[str, ...]] = ("V@2", "V@10", "FVR@10", "nDCG@10", "MAP@10", "R@10")
    relevance_threshold: ClassVar[int] = 2
    subdir: ClassVar[str] = "diag/antonym"
    files: ClassVar[tuple[str, ...]] = ("corpus_antonym.jsonl", "queries_antonym.jsonl")
    description: ClassVar[str] = (
        "SciFact-Antonym diagnostic (CoDeR): antonym-contrasted queries over topical SciFact "
        "passages; grade 2 satisfies, 1 is topical only, 0 violates; relevance threshold 2."
    )
    source: ClassVar[str] = f"CoDeR data release nice-hku-coder/coder_data ({CODER_DATA})"
    license: ClassVar[str] = "CC BY-NC 2.0 (SciFact passages)"

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        """``online`` changes nothing: there is no automatic download (see ``source``)."""
        root = cls.require(name, data_dir)
        corpus_f, queries_f = (root / f for f in cls.files)
        corpus = build_corpus(
            ((line, get_field(o, "doc_id", corpus_f, line), "", get_field(o, "text", corpus_f, line))
             for line, o in iter_jsonl(corpus_f)),
            corpus_f,
        )

        seen = IdTracker(queries_f, "query")
        queries: list[Query] = []
        relevance: dict[str, dict[str, int]] = {}
        violating: dict[str, frozenset[str]] = {}
        for line, obj in iter_jsonl(queries_f):
            qid = get_field(obj, "query_id", queries_f, line)
            seen.add(qid, line)
            text = require_text(obj, "query", queries_f, line)
            category = get_field(obj, "category", queries_f, line)
            lists = {f: get_id_list(obj, f, queries_f, line) for f in (
                "topical_relevant_doc_ids", "constraint_satisfying_doc_ids", "constraint_violating_doc_ids")}
            for field_name, ids in lists.items():
                check_doc_refs(ids, corpus, queries_f, line, field_name)
            grades = read_graded(obj, queries_f, line, corpus)
            for field_name, want in (("constraint_satisfying_doc_ids", 2), ("constraint_violating_doc_ids", 0)):
                for d in lists[field_name]:
                    if grades.get(d) != want:
                        raise DataError(queries_f, line, f"field {field_name!r} lists {d!r}, but "
                                                         f"graded_relevance gives it {grades.get(d)!r}, not {want}")
            queries.append(Query(qid, text, {"category": category}))
            relevance[qid] = grades
            violating[qid] = frozenset(lists["constraint_violating_doc_ids"])

        n_sat = sum(1 for g in relevance.values() for v in g.values() if v == 2)
        n_top = sum(1 for g in relevance.values() for v in g.values() if v == 1)
        n_vio = sum(len(v) for v in violating.values())
        notes: dict[str, object] = {"satisfying_pairs": n_sat, "topical_pairs": n_top, "violating_pairs": n_vio}
        description = (
            f"SciFact-Antonym diagnostic (CoDeR): {len(queries)} antonym-contrasted queries over "
            f"{len(corpus)} SciFact passages; {n_sat} satisfying (grade 2), {n_top} topical-only "
            f"(grade 1) and {n_vio} violating (grade 0) judgments; relevance threshold 2."
        )
        return cls.build(name, corpus, queries, Judgments(relevance, violating),
                         description=description, notes=notes)
