"""Shared pieces of the benchmark loaders.

* :class:`LoaderBase` — ``info()`` from class attributes, the missing-file check and
  :meth:`LoaderBase.build`, which assembles a :class:`~harness.types.Benchmark` with its content
  fingerprint as ``version``.
* Strict builders that turn ``(line, ...)`` records into a corpus, a query list and a qrels
  table. They take records rather than paths so that a local file and an online source
  (``ir_datasets``, the Hugging Face hub) go through the same validation; ``origin`` is the file
  path (or a label such as ``ir_datasets:beir/scifact/test``) that error messages name.
* :func:`load_beir_folder` — a BEIR folder (``corpus.jsonl``, ``queries.jsonl``,
  ``qrels/<split>.tsv``, optionally ``qrels/<split>.violating.tsv``) read with those builders.
* :func:`inferred_task` — ``constraint`` when a benchmark has violating documents, else ``topical``.
* :func:`dedup_by_text` — collapse documents with identical text onto one canonical id.

Every malformed input raises :class:`harness.data.DataError` naming the file, the line and the
problem; absent files raise :class:`harness.data.MissingDataError` (via ``require_files``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Collection, Iterable, Iterator, Sequence

from harness.data import (DataError, get_field, iter_jsonl, missing_files, read_json, read_pairs_tsv,
                          read_qrels_tsv, require_files)
from harness.data.readers import check_path, path_is_file
from harness.registry import UnknownNameError
from harness.types import (Benchmark, BenchmarkMeta, Corpus, Document, Judgments, Pair, Query,
                           benchmark_fingerprint)

Origin = Path | str
"""Where records come from: a file path, or a label for an online source."""

SPLIT_SEED = 0
"""Seed of every split a loader makes where the dataset releases none (recorded in ``notes``)."""

CONSTRAINT_MEASURES = ("Sat@10", "V@2", "V@10", "FVR@10", "nDCG@10", "MAP@10", "R@10")
"""Headline measures of a benchmark with violating documents."""
TOPICAL_MEASURES = ("nDCG@10", "MAP@10", "R@100")
"""Headline measures of a benchmark that only grades relevance (BEIR's)."""


def inferred_task(judgments: Judgments) -> str:
    """``constraint`` when any query has a violating document, else ``topical``: the task of a
    benchmark whose format can carry either (a folder of your own)."""
    return "constraint" if any(judgments.violating.values()) else "topical"


def task_measures(task: str) -> tuple[str, ...]:
    """The headline measures of an inferred task."""
    return CONSTRAINT_MEASURES if task == "constraint" else TOPICAL_MEASURES


# ---------------------------------------------------------------------------------------------
# Loader base class


class LoaderBase:
    """Base class of the benchmark loaders.

    Subclasses set the class attributes below; ``files`` are relative to ``subdir``, which is
    relative to the data directory. Loaders whose files depend on the benchmark name (BEIR, NevIR
    splits) override :meth:`info`; everything else (the missing-file check, ``build``) goes
    through ``info`` so that it stays the single description of a dataset.
    """

    task: ClassVar[str] = "topical"
    description: ClassVar[str] = ""
    source: ClassVar[str] = ""
    license: ClassVar[str] = ""
    subdir: ClassVar[str] = ""
    files: ClassVar[tuple[str, ...]] = ()
    default_measures: ClassVar[tuple[str, ...]] = ()
    relevance_threshold: ClassVar[int] = 1

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        """The benchmark's one description (:class:`harness.types.BenchmarkMeta`): name, task,
        description, official source, license, the files (relative to the data directory) that a
        local load needs, its default measures and relevance threshold."""
        return cls.declare(name, files=[join_rel(cls.subdir, f) for f in cls.files])

    @classmethod
    def declare(cls, name: str, **fields: object) -> BenchmarkMeta:
        """A :class:`BenchmarkMeta` for ``name`` from the class attributes, ``fields`` replacing
        any of them (a loader whose texts or files depend on the name overrides :meth:`info` with
        this)."""
        base = {"task": cls.task, "description": cls.description, "source": cls.source, "license": cls.license,
                "subdir": cls.subdir, "default_measures": tuple(cls.default_measures),
                "relevance_threshold": cls.relevance_threshold}
        return BenchmarkMeta(name=name, **{**base, **fields})  # type: ignore[arg-type]

    @classmethod
    def protocol_variants(cls, name: str) -> dict[str, str]:
        """The benchmarks that score ``name``'s queries under a paper's protocol instead of ours
        (``nevir`` → ``nevir:coder``), each with how it differs; the benchmark pages name them."""
        return {}

    @classmethod
    def missing_files(cls, name: str, data_dir: Path) -> list[str]:
        """The files of ``info(name).files`` that are absent under ``data_dir``."""
        return missing_files(data_dir, cls.info(name).files)

    @classmethod
    def require(cls, name: str, data_dir: Path) -> Path:
        """Raise ``MissingDataError`` unless every required file exists; return the dataset folder."""
        info = cls.info(name)
        require_files(name, Path(data_dir), info.files, info.source)
        return Path(data_dir) / info.subdir

    @classmethod
    def build(
        cls,
        name: str,
        corpus: Corpus,
        queries: list[Query],
        judgments: Judgments,
        *,
        splits: dict[str, list[str]] | None = None,
        pairs: list[Pair] | None = None,
        description: str | None = None,
        source: str | None = None,
        license: str | None = None,
        notes: dict[str, object] | None = None,
        task: str | None = None,
        default_measures: Sequence[str] | None = None,
    ) -> Benchmark:
        """A :class:`Benchmark` whose ``version`` is the content fingerprint of what it holds.

        ``splits`` defaults to ``{"test": <ids of the judged queries>}``; unset texts come from
        :meth:`info` (called only when one of them is unset); ``task`` and ``default_measures``
        default to the class attributes (a loader that infers the task passes both).
        """
        check_judgments_consistent(name, corpus, queries, judgments, pairs)
        if description is None or source is None or license is None:
            meta = cls.info(name)
            description = meta.description if description is None else description
            source = meta.source if source is None else source
            license = meta.license if license is None else license
        if splits is None:
            splits = {"test": [q.id for q in queries if q.id in judgments.relevance]}
        return Benchmark(
            name=name,
            version=benchmark_fingerprint(corpus, queries, judgments, pairs),
            corpus=corpus,
            queries=queries,
            judgments=judgments,
            task=task or cls.task,
            default_measures=tuple(cls.default_measures if default_measures is None else default_measures),
            splits=splits,
            pairs=pairs,
            relevance_threshold=cls.relevance_threshold,
            description=description,
            source=source,
            license=license,
            notes=dict(notes or {}),
        )


def join_rel(subdir: str, file: str) -> str:
    """``subdir/file`` as a POSIX relative path (just ``file`` when ``subdir`` is empty)."""
    return f"{subdir.rstrip('/')}/{file}" if subdir else file


def check_judgments_consistent(name: str, corpus: Corpus, queries: Sequence[Query],
                               judgments: Judgments, pairs: Sequence[Pair] | None) -> None:
    """Loader bug guard: judgments and pairs may only name queries and documents that exist."""
    qids = {q.id for q in queries}
    for qid, docs in judgments.relevance.items():
        if qid not in qids:
            raise ValueError(f"benchmark {name!r}: judgments name unknown query {qid!r}")
        for d in docs:
            if d not in corpus:
                raise ValueError(f"benchmark {name!r}: judgments of {qid!r} name unknown document {d!r}")
    for qid, docs in judgments.violating.items():
        if qid not in qids or any(d not in corpus for d in docs):
            raise ValueError(f"benchmark {name!r}: violating set of {qid!r} names an unknown query or document")
    for p in pairs or []:
        if p.q1 not in qids or p.q2 not in qids or p.d1 not in corpus or p.d2 not in corpus:
            raise ValueError(f"benchmark {name!r}: pair {p.id!r} names an unknown query or document")


# ---------------------------------------------------------------------------------------------
# Strict builders


class IdTracker:
    """Remembers the line that introduced each id of one kind; a repeat raises ``DataError``."""

    def __init__(self, origin: Origin, kind: str):
        self.origin, self.kind = origin, kind
        self.lines: dict[str, int | None] = {}

    def add(self, id_: str, line: int | None) -> None:
        if id_ in self.lines:
            first = self.lines[id_]
            where = f" (first seen on line {first})" if first is not None else ""
            raise DataError(self.origin, line, f"duplicate {self.kind} id {id_!r}{where}")
        self.lines[id_] = line

    def __contains__(self, id_: object) -> bool:
        return id_ in self.lines


def require_text(obj: dict[str, Any], names: str | Sequence[str], origin: Origin, line: int | None) -> str:
    """A string field that must be present and not blank."""
    value = get_field(obj, names, origin, line)
    if not value.strip():
        key = names if isinstance(names, str) else names[0]
        raise DataError(origin, line, f"field {key!r} is empty")
    return value


def build_corpus(records: Iterable[tuple[int | None, str, str, str]], origin: Origin) -> Corpus:
    """``(line, id, title, text)`` records → :class:`Corpus`. Duplicate ids, a document whose
    title and text are both blank (nothing to retrieve it by) and an empty corpus raise ``DataError``."""
    seen = IdTracker(origin, "document")
    docs: list[Document] = []
    for line, doc_id, title, text in records:
        if not doc_id:
            raise DataError(origin, line, "empty document id")
        seen.add(doc_id, line)
        if not (title.strip() or text.strip()):
            raise DataError(origin, line, f"document {doc_id!r}: fields 'title' and 'text' are both empty")
        docs.append(Document(id=doc_id, text=text, title=title))
    if not docs:
        raise DataError(origin, None, "no documents found")
    return Corpus(docs)


def build_queries(records: Iterable[tuple[int | None, str, str]], origin: Origin) -> list[Query]:
    """``(line, id, text)`` records → queries. Duplicate ids, a blank query text and an empty
    query list raise ``DataError``."""
    seen = IdTracker(origin, "query")
    out: list[Query] = []
    for line, qid, text in records:
        if not qid:
            raise DataError(origin, line, "empty query id")
        seen.add(qid, line)
        if not text.strip():
            raise DataError(origin, line, f"query {qid!r}: field 'text' is empty")
        out.append(Query(id=qid, text=text))
    if not out:
        raise DataError(origin, None, "no queries found")
    return out


def build_relevance(records: Iterable[tuple[int | None, str, str, int]], origin: Origin,
                    doc_ids: Collection[str], query_ids: Collection[str],
                    threshold: int = 1) -> dict[str, dict[str, int]]:
    """``(line, qid, docid, grade)`` records → pytrec_eval qrels.

    A record naming an unknown query or document raises ``DataError``; so does a repeated
    ``(qid, docid)`` with a different grade (an identical repeat is harmless and kept once), and
    so do qrels in which no document reaches ``threshold`` (no rows, a header only, or only
    non-relevant grades): such a benchmark has no query to score.
    """
    rel: dict[str, dict[str, int]] = {}
    for line, qid, did, grade in records:
        if qid not in query_ids:
            raise DataError(origin, line, f"qrel names unknown query {qid!r}")
        if did not in doc_ids:
            raise DataError(origin, line, f"qrel of query {qid!r} names unknown document {did!r}")
        per_q = rel.setdefault(qid, {})
        if did in per_q and per_q[did] != grade:
            raise DataError(origin, line, f"conflicting grades for query {qid!r}, document {did!r}: "
                                          f"{per_q[did]} and {grade}")
        per_q[did] = grade
    if not rel:
        raise DataError(origin, None, "no judgments found (no qrels rows)")
    if not any(g >= threshold for docs in rel.values() for g in docs.values()):
        raise DataError(origin, None, f"no judgment has a grade >= {threshold}: no query has a relevant document")
    return rel


def check_doc_refs(ids: Iterable[str], corpus: Corpus | Collection[str], origin: Origin,
                   line: int | None, field_name: str) -> None:
    """Every id in ``ids`` must be a document of ``corpus``."""
    for d in ids:
        if d not in corpus:
            raise DataError(origin, line, f"field {field_name!r} names unknown document {d!r}")


def get_id_list(obj: dict[str, Any], name: str, origin: Origin, line: int | None) -> list[str]:
    """A list-of-ids field (ints are accepted and turned into strings)."""
    values = get_field(obj, name, origin, line, kind=list)
    out: list[str] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise DataError(origin, line, f"field {name!r} must hold string ids, got {type(v).__name__}")
        out.append(str(v))
    return out


# ---------------------------------------------------------------------------------------------
# BEIR format


def beir_corpus_records(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """``corpus.jsonl`` rows ``{"_id", "title"?, "text"}`` as ``(line, id, title, text)``; a missing
    or null title is ``""``."""
    for line, obj in iter_jsonl(path):
        doc_id = get_field(obj, "_id", path, line)
        title = get_field(obj, "title", path, line, kind=(str, type(None)), default="") or ""
        text = get_field(obj, "text", path, line)
        yield line, doc_id, title, text


def beir_query_records(path: Path) -> Iterator[tuple[int, str, str]]:
    """``queries.jsonl`` rows ``{"_id", "text"}`` as ``(line, id, text)``."""
    for line, obj in iter_jsonl(path):
        yield line, get_field(obj, "_id", path, line), get_field(obj, "text", path, line)


@dataclass
class BeirData:
    """A BEIR dataset read and validated, before it becomes a :class:`Benchmark`."""

    corpus: Corpus
    queries: list[Query]
    relevance: dict[str, dict[str, int]]
    queries_in_source: int
    notes: dict[str, object] = field(default_factory=dict)
    violating: dict[str, frozenset[str]] = field(default_factory=dict)
    violating_from: list[str] = field(default_factory=list)
    """Where the violating marks came from (negative grades, the violating file)."""

    @property
    def judgments(self) -> Judgments:
        return Judgments(self.relevance, dict(self.violating))


def assemble_beir(corpus: Corpus, queries: list[Query], relevance: dict[str, dict[str, int]],
                  keep_unjudged_queries: bool, violating: dict[str, frozenset[str]] | None = None) -> BeirData:
    """Keep all queries, or (BEIR's own convention) only the ones the qrels judge."""
    n = len(queries)
    if not keep_unjudged_queries:
        queries = [q for q in queries if q.id in relevance]
    distinct = len({(d.title, d.text) for d in corpus})
    notes: dict[str, object] = {
        "queries_in_source": n,
        "judged_queries": len(relevance),
        # documents whose (title, text) repeats an earlier one: they tie with it in any ranking
        "duplicate_document_texts": len(corpus) - distinct,
    }
    return BeirData(corpus=corpus, queries=queries, relevance=relevance, queries_in_source=n, notes=notes,
                    violating=dict(violating or {}))


def beir_files(split: str = "test") -> tuple[str, str, str]:
    """The files of a BEIR folder, relative to it."""
    return ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv")


def violating_file(split: str = "test") -> str:
    """The optional file of a BEIR folder that lists violating ``query-id corpus-id`` pairs."""
    return f"qrels/{split}.violating.tsv"


def negative_grades(relevance: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """``{qid: documents graded below 0}``: the violating documents a qrels table marks."""
    out: dict[str, set[str]] = {}
    for qid, docs in relevance.items():
        neg = {d for d, g in docs.items() if g < 0}
        if neg:
            out[qid] = neg
    return out


def add_violating(records: Iterable[tuple[int | None, str, str]], origin: Origin,
                  relevance: dict[str, dict[str, int]], violating: dict[str, set[str]],
                  doc_ids: Collection[str], query_ids: Collection[str], qrels_origin: Origin,
                  threshold: int = 1) -> None:
    """Add ``(line, qid, docid)`` records of a violating file to ``violating``. A pair the qrels do
    not grade joins ``relevance`` with grade -1, as if the qrels held that line. An unknown id, a
    pair the qrels grade relevant (``>= threshold``) and a file without rows raise ``DataError``."""
    rows = 0
    for line, qid, did in records:
        rows += 1
        if qid not in query_ids:
            raise DataError(origin, line, f"field 'query-id': unknown query {qid!r}")
        if did not in doc_ids:
            raise DataError(origin, line, f"field 'corpus-id': unknown document {did!r} (violating for query {qid!r})")
        grade = relevance.get(qid, {}).get(did)
        if grade is not None and grade >= threshold:
            raise DataError(origin, line, f"field 'corpus-id': document {did!r} is marked violating for query "
                                          f"{qid!r}, but {qrels_origin} grades it {grade} (relevant)")
        relevance.setdefault(qid, {}).setdefault(did, -1)
        violating.setdefault(qid, set()).add(did)
    if not rows:
        raise DataError(origin, None, "no violating pairs found (an empty file marks nothing: remove it)")


def load_beir_folder(root: Path, split: str = "test", keep_unjudged_queries: bool = False,
                     negative_violates: bool = True) -> BeirData:
    """Read a BEIR folder strictly.

    ``qrels/<split>.tsv`` may or may not start with a ``query-id corpus-id score`` header. By
    BEIR's convention only queries that the qrels judge are kept; ``keep_unjudged_queries``
    keeps every query of ``queries.jsonl`` (they are then searched but not scored).

    Violating documents: with ``negative_violates`` a qrels grade below 0 marks one (the grade
    stays in ``relevance``, where pytrec_eval counts it like 0: judged, not relevant, no gain);
    ``qrels/<split>.violating.tsv``, when present, lists more (see :func:`add_violating`).
    ``violating_from`` says which of the two the marks came from.
    """
    check_path(root)  # a path no file system can name: one DataError naming it, not an OSError
    corpus_f, queries_f, qrels_f = (root / f for f in beir_files(split))
    corpus = build_corpus(beir_corpus_records(corpus_f), corpus_f)
    queries = build_queries(beir_query_records(queries_f), queries_f)
    qids = {q.id for q in queries}
    relevance = build_relevance(read_qrels_tsv(qrels_f), qrels_f, corpus, qids)
    violating = negative_grades(relevance) if negative_violates else {}
    sources = [f"qrels/{split}.tsv grade < 0"] if violating else []
    viol_f = root / violating_file(split)
    if path_is_file(viol_f):
        add_violating(read_pairs_tsv(viol_f), viol_f, relevance, violating, corpus, qids, qrels_f)
        sources.append(violating_file(split))
    data = assemble_beir(corpus, queries, relevance, keep_unjudged_queries,
                         {q: frozenset(v) for q, v in violating.items()})
    data.violating_from = sources
    data.notes.update(violating_pairs=sum(len(v) for v in violating.values()), violating_from=sources)
    return data


# ---------------------------------------------------------------------------------------------
# De-duplication


@dataclass
class DedupResult:
    """Documents after exact-text de-duplication, with the id → canonical id map."""

    documents: list[Document]
    canonical: dict[str, str]

    @property
    def merged(self) -> int:
        """How many documents were folded into an earlier one with the same text."""
        return len(self.canonical) - len(self.documents)

    @property
    def shared_texts(self) -> int:
        """How many distinct texts were carried by more than one id."""
        counts: dict[str, int] = {}
        for canon in self.canonical.values():
            counts[canon] = counts.get(canon, 0) + 1
        return sum(1 for c in counts.values() if c > 1)


def dedup_by_text(documents: Iterable[Document]) -> DedupResult:
    """Keep the first document (in input order) of each exact ``(title, text)``.

    Every input id maps to the id of that first document, its canonical id.
    """
    first: dict[tuple[str, str], str] = {}
    kept: list[Document] = []
    canonical: dict[str, str] = {}
    for d in documents:
        key = (d.title, d.text)
        if key not in first:
            first[key] = d.id
            kept.append(d)
        canonical[d.id] = first[key]
    return DedupResult(kept, canonical)


# ---------------------------------------------------------------------------------------------
# JSON-list files, seeded splits and split names (ToolLens, ToolBank, MultiHop-RAG, ExcluIR)


def json_list(path: Path) -> list[Any]:
    """A file holding one JSON list."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, f"expected a JSON list, got {type(data).__name__}")
    return data


def item_field(obj: Any, names: str | Sequence[str], origin: Origin, where: str,
               kind: type | tuple[type, ...] = str, default: Any = ..., nonempty: bool = False) -> Any:
    """``get_field`` for an element of a JSON list or dict: errors name the file and ``where``
    (``item 17``, ``entry 'numpy.add'``) instead of a line."""
    if not isinstance(obj, dict):
        raise DataError(origin, None, f"{where}: expected a JSON object, got {type(obj).__name__}")
    try:
        value = get_field(obj, names, Path(str(origin)), None, kind=kind, default=default)
    except DataError as e:
        raise DataError(origin, None, f"{where}: {e.problem}") from None
    if nonempty and isinstance(value, (str, list)) and not (value.strip() if isinstance(value, str) else value):
        key = names if isinstance(names, str) else names[0]
        raise DataError(origin, None, f"{where}: field {key!r} is empty")
    return value


def seeded_partition(ids: Iterable[str], fractions: Sequence[tuple[str, float]], rest: str,
                     seed: int = SPLIT_SEED) -> dict[str, set[str]]:
    """Split ``ids`` at random: each ``(split, fraction)`` in order takes ``int(n * fraction)`` ids
    of the shuffled list, ``rest`` takes what is left. The ids are sorted before the shuffle (with
    ``random.Random(seed)``), so the result depends only on the set of ids and the seed."""
    order = sorted(set(ids))
    random.Random(seed).shuffle(order)
    n, start = len(order), 0
    out: dict[str, set[str]] = {}
    for split, frac in fractions:
        size = int(n * frac)
        out[split] = set(order[start:start + size])
        start += size
    out[rest] = set(order[start:])
    return out


def set_size_stats(relevance: dict[str, dict[str, int]], threshold: int = 1) -> dict[str, float]:
    """Relevant items per query: ``{"min", "max", "mean"}`` (mean rounded to 4 places)."""
    sizes = [sum(1 for g in docs.values() if g >= threshold) for docs in relevance.values()]
    if not sizes:
        return {"min": 0, "max": 0, "mean": 0.0}
    return {"min": min(sizes), "max": max(sizes), "mean": round(sum(sizes) / len(sizes), 4)}


def with_set_size(queries: Iterable[Query], relevance: dict[str, dict[str, int]]) -> list[Query]:
    """Queries with ``meta["set_size"]`` = how many relevant items they need (as a string, so
    that per-group breakdowns can use it)."""
    return [Query(q.id, q.text, {**q.meta, "set_size": str(sum(1 for g in relevance[q.id].values() if g >= 1))})
            for q in queries]


def split_of(name: str, base: str, splits: Sequence[str]) -> str:
    """``<base>`` / ``<base>:test`` → ``test``; ``<base>:<split>`` → ``split``."""
    b, sep, split = name.partition(":")
    split = split or ("" if sep else "test")
    if b != base or split not in splits:
        allowed = ", ".join(repr(base if s == "test" else f"{base}:{s}") for s in splits)
        raise UnknownNameError(f"unknown benchmark {name!r}; use {allowed}")
    return split


def split_name(base: str, split: str) -> str:
    return base if split == "test" else f"{base}:{split}"
