"""The CoDeR constraint diagnostics: ``diag/antonym``, ``diag/negation``, ``diag/exclusion``.

Each set pairs queries with a small pool of topical passages per source document: for every
query one passage satisfies the constraint (grade 2), one violates it (grade 0: the antonym
swap, the negated assertion, or the passage that mentions the excluded term) and the other
passages of the same document are topical only (grade 1). ``relevance_threshold = 2``: only
satisfying passages are relevant; ``violating`` lists the grade-0 passages, so V@k and FVR apply.

Files of a set ``<set>`` (the released CoDeR format, also what ``beyondsim data
build-diagnostics`` writes):

* ``corpus_<set>.jsonl`` — ``{doc_id, text}``
* ``queries_<set>.jsonl`` — ``{query_id, query, category?, topical_relevant_doc_ids,
  constraint_satisfying_doc_ids, constraint_violating_doc_ids, graded_relevance}``
* ``build.json`` (built sets only) — the builder's parameters, source corpus and statistics.

Where a set is looked for, first match wins:

1. ``<data_dir>/diag/<set>/`` with the two files above (a released or user-supplied set);
2. ``$BEYONDSIM_HOME/diagnostics/<set>/`` — where ``beyondsim data build-diagnostics`` writes
   by default;
3. ``diag/negation`` only: CoDeR's released SciDocs negation passages
   ``<data_dir>/diag/negation/corpus.jsonl`` (ids ``paper-<hash>-1…5`` plus a negated copy
   ``-6``; no queries were released). The paired queries are built on load from the sentence
   that the negated copy changes (``benchmarks.builders.negation_from_released``).

Any folder holding ``corpus_<set>.jsonl`` and ``queries_<set>.jsonl`` also runs as a benchmark
by its path (``beyondsim run bm25 --benchmark ./my-diagnostics/exclusion``), whatever ``<set>`` is:
this is one of the two layouts of a constraint benchmark of your own (README, "Constraint
benchmarks of your own"; the other is a BEIR folder with negative grades). Its task is inferred:
``constraint`` when a query lists a violating document, else ``topical``.

Checks: every referenced document exists, satisfying documents are graded 2 and violating ones
0, grades are 0/1/2, ids are unique; errors name the file, the line and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Iterable

from harness.data import DataError, MissingDataError, default_home, get_field, iter_jsonl
from harness.registry import UnknownNameError
from harness.types import Benchmark, BenchmarkMeta, Corpus, Judgments, Query

from .loader import (CONSTRAINT_MEASURES, IdTracker, LoaderBase, Origin, build_corpus, check_doc_refs, get_id_list,
                     inferred_task, require_text, task_measures)

CODER_DATA = "https://github.com/nice-hku-coder/coder_data"
GRADES = (0, 1, 2)
ID_LISTS = ("topical_relevant_doc_ids", "constraint_satisfying_doc_ids", "constraint_violating_doc_ids")

# set → (paper's source corpus, license of the released passages, what the constraint is)
SETS: dict[str, tuple[str, str, str]] = {
    "antonym": ("SciFact", "CC BY-NC 2.0 (SciFact passages)",
                "antonym-contrasted queries (a keyword swapped for its WordNet antonym)"),
    "negation": ("SciDocs", "CC BY 4.0 (SciDocs passages)",
                 "assertion versus negated assertion"),
    "exclusion": ("NFCorpus", "CC BY-SA 4.0 (NFCorpus passages)",
                  "'X but not Y' queries: passages that do or do not mention Y"),
}
RELEASED_NEGATION = "corpus.jsonl"


def set_name(name: str) -> str:
    """``diag/antonym`` → ``antonym``."""
    base = name.split(":", 1)[0]
    prefix, _, which = base.partition("/")
    if prefix != "diag" or which not in SETS:
        raise UnknownNameError(f"unknown diagnostic set {name!r}; use one of "
                         + ", ".join(f"'diag/{s}'" for s in SETS))
    return which


def set_files(which: str) -> tuple[str, str]:
    return f"corpus_{which}.jsonl", f"queries_{which}.jsonl"


def find_set_files(folder: Path) -> tuple[str, Path, Path] | None:
    """``(set, corpus file, queries file)`` of a folder holding one diagnostic set, else None."""
    for which in SETS:
        c, q = (folder / f for f in set_files(which))
        if c.is_file() and q.is_file():
            return which, c, q
    found = sorted(p.name[len("queries_"):-len(".jsonl")] for p in folder.glob("queries_*.jsonl"))
    for which in found:
        c, q = (folder / f for f in set_files(which))
        if c.is_file():
            return which, c, q
    return None


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


def parse_diagnostic(corpus_rows: Iterable[tuple[int | None, dict[str, Any]]], corpus_origin: Origin,
                     query_rows: Iterable[tuple[int | None, dict[str, Any]]], queries_origin: Origin,
                     default_category: str) -> tuple[Corpus, list[Query], Judgments]:
    """Validate records in the diagnostic format and turn them into corpus, queries, judgments."""
    corpus = build_corpus(
        ((line, get_field(o, "doc_id", corpus_origin, line), "", require_text(o, "text", corpus_origin, line))
         for line, o in corpus_rows),
        corpus_origin,
    )
    seen = IdTracker(queries_origin, "query")
    queries: list[Query] = []
    relevance: dict[str, dict[str, int]] = {}
    violating: dict[str, frozenset[str]] = {}
    for line, obj in query_rows:
        qid = get_field(obj, "query_id", queries_origin, line)
        seen.add(qid, line)
        text = require_text(obj, "query", queries_origin, line)
        category = get_field(obj, "category", queries_origin, line, default=default_category)
        lists = {f: get_id_list(obj, f, queries_origin, line) for f in ID_LISTS}
        for field_name, ids in lists.items():
            check_doc_refs(ids, corpus, queries_origin, line, field_name)
        grades = read_graded(obj, queries_origin, line, corpus)
        for field_name, want in (("constraint_satisfying_doc_ids", 2), ("constraint_violating_doc_ids", 0)):
            for d in lists[field_name]:
                if grades.get(d) != want:
                    raise DataError(queries_origin, line, f"field {field_name!r} lists {d!r}, but "
                                                          f"graded_relevance gives it {grades.get(d)!r}, not {want}")
        meta: dict[str, object] = {"category": category}
        for key in ("source_doc_id", "pair_id", "keyword", "antonym", "included_term", "excluded_term"):
            if isinstance(obj.get(key), (str, int)):
                meta[key] = obj[key]
        queries.append(Query(qid, text, meta))
        relevance[qid] = grades
        violating[qid] = frozenset(lists["constraint_violating_doc_ids"])
    if not queries:
        raise DataError(queries_origin, None, "no queries found")
    return corpus, queries, Judgments(relevance, violating)


class DiagnosticSet(LoaderBase):
    """``diag/antonym``, ``diag/negation``, ``diag/exclusion``; see the module docstring."""

    task: ClassVar[str] = "constraint"
    default_measures: ClassVar[tuple[str, ...]] = CONSTRAINT_MEASURES
    relevance_threshold: ClassVar[int] = 2
    source: ClassVar[str] = f"CoDeR data release nice-hku-coder/coder_data ({CODER_DATA})"

    @classmethod
    def variants(cls) -> list[str]:
        return [f"diag/{s}" for s in SETS]

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        which = set_name(name)
        paper_corpus, license, what = SETS[which]
        subdir = f"diag/{which}"
        return cls.declare(
            name=f"diag/{which}",
            task=cls.task,
            description=(f"{which.capitalize()} diagnostic (CoDeR, built from {paper_corpus} in the paper): {what}; "
                         "grade 2 satisfies, 1 is topical only, 0 violates; relevance threshold 2."),
            source=(f"{cls.source}; or build it from any corpus with 'beyondsim data build-diagnostics' "
                    f"(written to {default_home() / 'diagnostics' / which})"),
            license=license,
            files=[f"{subdir}/{f}" for f in set_files(which)],
            subdir=subdir,
            optional_files=[f"{subdir}/{RELEASED_NEGATION}"] if which == "negation" else [],
        )

    @classmethod
    def locate(cls, name: str, data_dir: Path) -> tuple[str, Path]:
        """``(kind, folder)`` with kind ``files`` (released/user set), ``built`` or
        ``released-passages`` (negation only); MissingDataError when none is present."""
        which = set_name(name)
        for kind, folder in (("files", Path(data_dir) / "diag" / which),
                             ("built", default_home() / "diagnostics" / which)):
            if all((folder / f).is_file() for f in set_files(which)):
                return kind, folder
        released = Path(data_dir) / "diag" / which / RELEASED_NEGATION
        if which == "negation" and released.is_file():
            return "released-passages", released.parent
        info = cls.info(name)
        raise MissingDataError(
            info.name, Path(data_dir), info.files,
            f"{info.source}. Build it: beyondsim data build-diagnostics --corpus <benchmark> --set {which}",
        )

    @classmethod
    def files_in_use(cls, name: str, data_dir: Path) -> list[Path]:
        """The files a load reads (for checksums); empty when the set is absent."""
        try:
            kind, folder = cls.locate(name, data_dir)
        except MissingDataError:
            return []
        if kind == "released-passages":
            return [folder / RELEASED_NEGATION]
        which = set_name(name)
        return [p for p in (*(folder / f for f in set_files(which)), folder / "build.json") if p.is_file()]

    @classmethod
    def missing_files(cls, name: str, data_dir: Path) -> list[str]:
        try:
            cls.locate(name, data_dir)
        except MissingDataError as e:
            return list(e.missing)
        return []

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        """``online`` changes nothing: there is no automatic download (see ``source``)."""
        which = set_name(name)
        kind, folder = cls.locate(name, data_dir)
        if kind == "released-passages":
            from .builders import negation_from_released

            built = negation_from_released(folder / RELEASED_NEGATION)
            origin = folder / RELEASED_NEGATION
            corpus, queries, judgments = parse_diagnostic(
                ((i, r) for i, r in enumerate(built.corpus, 1)), origin,
                ((i, r) for i, r in enumerate(built.queries, 1)), f"{origin} (queries built on load)", which)
            provenance = {"kind": kind, "path": str(origin), "built": built.params}
            how = ("CoDeR's released SciDocs negation passages; paired queries built on load from the "
                   "sentence each negated passage changes")
            return cls._assemble(f"diag/{which}", which, corpus, queries, judgments, provenance, how)
        return cls.load_folder(folder, which, kind=kind, name=f"diag/{which}")

    @classmethod
    def load_folder(cls, folder: Path, which: str | None = None, *, kind: str = "folder",
                    name: str | None = None) -> Benchmark:
        """A folder with ``corpus_<set>.jsonl`` and ``queries_<set>.jsonl`` (and maybe ``build.json``)."""
        folder = Path(folder).expanduser().resolve()
        found = find_set_files(folder)
        if found is None:
            raise MissingDataError(name or str(folder), folder, ["corpus_<set>.jsonl", "queries_<set>.jsonl"],
                                   "a diagnostic set folder (see 'beyondsim data build-diagnostics')")
        which = which or found[0]
        corpus_f, queries_f = found[1], found[2]
        corpus, queries, judgments = parse_diagnostic(iter_jsonl(corpus_f), corpus_f, iter_jsonl(queries_f),
                                                      queries_f, which)
        provenance: dict[str, Any] = {"kind": kind, "path": str(folder), "files": [corpus_f.name, queries_f.name]}
        how = "released files" if kind == "files" else f"files in {folder}"
        build_f = folder / "build.json"
        if build_f.is_file():
            try:
                build = json.loads(build_f.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise DataError(build_f, e.lineno, f"invalid JSON ({e.msg})") from None
            if isinstance(build, dict):
                provenance["built"] = build.get("params", build)
                src = (build.get("params") or {}).get("source") or build.get("source")
                how = f"built by beyondsim from {src}" if src else "built by beyondsim"
        return cls._assemble(name or str(folder), which, corpus, queries, judgments, provenance, how)

    @classmethod
    def _assemble(cls, name: str, which: str, corpus: Corpus, queries: list[Query], judgments: Judgments,
                  provenance: dict[str, Any], how: str) -> Benchmark:
        grades = [v for g in judgments.relevance.values() for v in g.values()]
        n_sat, n_top, n_zero = (sum(1 for v in grades if v == g) for g in (2, 1, 0))
        n_vio = judgments.n_violating_pairs()
        notes: dict[str, object] = {"set": which, "satisfying_pairs": n_sat, "topical_pairs": n_top,
                                    "violating_pairs": n_vio, "provenance": provenance, "layout": "diagnostic"}
        task = inferred_task(judgments)
        known = which in SETS
        license = SETS[which][1] if known else "unknown (local folder)"
        what = f", {SETS[which][2]}," if known else ""
        violating = (f"{n_vio} violating (grade 0) judgments" if n_zero == n_vio else
                     f"{n_vio} violating judgments (of {n_zero} graded 0)")
        description = (
            f"{which.capitalize()} {'diagnostic' if known else 'constraint set'} ({how}): {len(queries)} queries"
            f"{what} over {len(corpus)} passages; {n_sat} satisfying (grade 2), {n_top} topical-only (grade 1) "
            f"and {violating}; relevance threshold 2"
            + ("." if task == "constraint" else "; no violating documents, so the task is topical.")
        )
        return cls.build(name, corpus, queries, judgments, description=description, notes=notes, task=task,
                         default_measures=cls.default_measures if task == "constraint" else task_measures(task),
                         license=license if provenance.get("kind") != "built" else "that of the source corpus",
                         source=cls.source if provenance.get("kind") in ("files", "released-passages")
                         else f"built by 'beyondsim data build-diagnostics' ({provenance.get('path')})")


# The loader of the released antonym set under its former name.
AntonymDiagnostic = DiagnosticSet
