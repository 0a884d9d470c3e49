"""Core data types shared by every part of beyondsim.

Conventions (see docs/design/types.md):

* ``Corpus`` keeps documents in a fixed order; that order is the row order of every embedding
  matrix built from it.
* ``Judgments.relevance`` is in pytrec_eval's format, graded 2 = satisfying, 1 = topical/neutral,
  0 = violating (binary datasets use 1). ``Judgments.violating`` lists violating documents per
  query; a document may violate one query and satisfy another.
* A ``Run`` maps query ids to ranked lists of ``(doc_id, score)``; list order is the ranking.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, Mapping, NamedTuple, Sequence

from .errors import UserError

TASKS = ("constraint", "topical", "completeness")

_SLICE = re.compile(r"^(?P<base>.+)\[:(?P<n>[0-9]+)\]$")


def slice_name(name: str, n: int) -> str:
    """``"nevir[:25]"``: the name :meth:`Benchmark.head` gives the first 25 judged queries of ``nevir``."""
    return f"{name}[:{n}]"


def split_slice(name: str) -> tuple[str, int | None]:
    """The inverse of :func:`slice_name`: ``("nevir", 25)`` for ``"nevir[:25]"``; ``(name, None)``
    for a name without a slice."""
    m = _SLICE.match(name)
    return (m["base"], int(m["n"])) if m else (name, None)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str = ""

    @property
    def full_text(self) -> str:
        """Title and body as one string (what encoders and BM25 index)."""
        return f"{self.title}. {self.text}" if self.title else self.text


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    meta: Mapping[str, object] = field(default_factory=dict)


class Candidate(NamedTuple):
    """One document of a query's candidate pool, as a reranker receives it: the document (id, title,
    text) and its first-stage score. Pools list each query's candidates in first-stage order
    (docs/design/pools.md)."""

    doc: Document
    score: float

    @property
    def id(self) -> str:
        return self.doc.id


class Corpus:
    """Ordered documents with an id → row map."""

    def __init__(self, documents: Iterable[Document]):
        self._docs: list[Document] = list(documents)
        self._row: dict[str, int] = {}
        for i, d in enumerate(self._docs):
            if d.id in self._row:
                raise ValueError(f"duplicate document id {d.id!r} in corpus")
            self._row[d.id] = i

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(self._docs)

    def __getitem__(self, i: int) -> Document:
        return self._docs[i]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._row

    def row(self, doc_id: str) -> int:
        return self._row[doc_id]

    def get(self, doc_id: str) -> Document:
        return self._docs[self._row[doc_id]]

    @property
    def ids(self) -> list[str]:
        return [d.id for d in self._docs]

    def texts(self) -> list[str]:
        return [d.full_text for d in self._docs]


@dataclass
class Judgments:
    """Graded relevance (pytrec_eval format) plus violating sets."""

    relevance: dict[str, dict[str, int]]
    violating: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def query_ids(self) -> list[str]:
        return list(self.relevance)

    def relevant(self, qid: str, threshold: int = 1) -> set[str]:
        return {d for d, r in self.relevance.get(qid, {}).items() if r >= threshold}

    def n_judged_pairs(self) -> int:
        return sum(len(v) for v in self.relevance.values())

    def n_violating_pairs(self) -> int:
        return sum(len(v) for v in self.violating.values())


@dataclass(frozen=True)
class Pair:
    """NevIR-style pair: d1 satisfies q1 and violates q2; d2 the other way round."""

    q1: str
    d1: str
    q2: str
    d2: str
    id: str = ""


@dataclass(frozen=True)
class BenchmarkMeta:
    """What a benchmark is, declared once by its loader (``info(name)`` of a ``beyondsim.benchmarks``
    entry point) and carried from there: the loaded :class:`Benchmark` gives it back as
    :attr:`Benchmark.meta`, the store keeps it in ``BenchmarkInfo`` (its ``meta``), and ``data
    status``, error messages and the pages read it (docs/design/types.md#what-a-benchmark-is-benchmarkmeta).

    ``files`` (relative to the data directory, or absolute for a folder benchmark) are the files a
    local load needs, ``subdir`` their folder, ``optional_files`` the ones read when present (labels,
    released alternatives), checksummed like ``files``. ``relevance_threshold``: the lowest grade
    that counts as relevant (2 on the graded constraint sets, so a topical-only document is not);
    ``default_measures``: the measures a run computes when not told.
    """

    name: str
    task: str
    description: str = ""
    source: str = ""
    license: str = ""
    files: list[str] = field(default_factory=list)
    subdir: str = ""
    optional_files: list[str] = field(default_factory=list)
    default_measures: tuple[str, ...] = ()
    relevance_threshold: int = 1


@dataclass
class Benchmark:
    name: str
    version: str
    corpus: Corpus
    queries: list[Query]
    judgments: Judgments
    task: str
    default_measures: tuple[str, ...]
    splits: dict[str, list[str]] = field(default_factory=dict)
    pairs: list[Pair] | None = None
    relevance_threshold: int = 1
    description: str = ""
    source: str = ""
    license: str = ""
    notes: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"benchmark {self.name}: task must be one of {TASKS}, got {self.task!r}")

    @property
    def meta(self) -> BenchmarkMeta:
        """The benchmark's description as its loader declares it (without the file lists, which
        belong to the loader's ``info``)."""
        return BenchmarkMeta(self.name, self.task, self.description, self.source, self.license,
                             default_measures=tuple(self.default_measures),
                             relevance_threshold=self.relevance_threshold)

    @property
    def eval_queries(self) -> list[Query]:
        """Queries that carry judgments: the ones a run is scored on."""
        judged = self.judgments.relevance
        return [q for q in self.queries if q.id in judged]

    def query_groups(self, max_groups: int = 50) -> dict[str, dict[str, str]]:
        """``{meta key: {qid: value}}`` over the judged queries for every ``Query.meta`` key whose
        values are strings with 2…``max_groups`` distinct values (query categories such as
        NegConstraint's ``A - a``): the keys a per-group breakdown of any measure can use."""
        queries = self.eval_queries
        values: dict[str, dict[str, str]] = {}
        for q in queries:
            for key, v in q.meta.items():
                if isinstance(v, str):
                    values.setdefault(key, {})[q.id] = v
        return {key: col for key, col in values.items()
                if 2 <= len(set(col.values())) <= min(max_groups, max(2, len(queries) // 2))}

    def head(self, n: int) -> "Benchmark":
        """The first ``n`` judged queries over the same corpus (a smoke-test slice; NevIR-style
        pairs are kept whole, so a slice may hold ``n + 1``). Named ``<name>[:n]``, with its own
        content version, so its results never mix with the full benchmark's."""
        if n < 1:
            raise ValueError("a query slice needs n ≥ 1")
        ids = [q.id for q in self.eval_queries]
        if self.pairs:
            keep: list[str] = []
            for p in self.pairs:
                if len(keep) >= n:
                    break
                keep += [q for q in (p.q1, p.q2) if q not in keep]
        else:
            keep = ids[:n]
        if len(keep) >= len(ids):
            return self
        ks = set(keep)
        judg = Judgments({q: r for q, r in self.judgments.relevance.items() if q in ks},
                         {q: v for q, v in self.judgments.violating.items() if q in ks})
        return replace(self, name=slice_name(self.name, n), version=content_hash([self.version, f"head:{n}"]),
                       queries=[q for q in self.queries if q.id in ks or q.id not in self.judgments.relevance],
                       judgments=judg, splits={k: [q for q in v if q in ks] for k, v in self.splits.items()},
                       pairs=[p for p in self.pairs if p.q1 in ks and p.q2 in ks] if self.pairs else self.pairs,
                       description=f"{self.description} (first {len(keep)} judged queries)".strip())

    def stats(self) -> dict[str, int]:
        return {
            "queries": len(self.queries),
            "judged_queries": len(self.eval_queries),
            "documents": len(self.corpus),
            "judged_pairs": self.judgments.n_judged_pairs(),
            "violating_pairs": self.judgments.n_violating_pairs(),
            "pairs": len(self.pairs or []),
        }


class RunError(UserError, ValueError):
    """A ranking that breaks the run format: a bad return from ``search``, a malformed TREC file."""


RUN_SHAPE = "a Run or a mapping {query_id: [(doc_id, score), ...]}"


def _what(value: object) -> str:
    """``value`` for a one-line message: its type and the start of its repr."""
    return "None" if value is None else f"{type(value).__name__} {' '.join(repr(value).split())[:60]}"


def as_run(value: object, source: str = "search") -> "Run":
    """``value`` as a :class:`Run`: a ``Run`` is returned as it is; a plain mapping of query id to
    ``[(doc_id, score), ...]`` (what MTEB and ranx take; a ``{doc_id: score}`` mapping per query is
    ranked by score, ties in its order) is copied into one, the ids checked to be strings and the
    scores numbers. Anything else is a :class:`RunError` in one line naming ``source`` (the
    retriever's ``search``), what is expected and what came. Order, uniqueness and finiteness are
    :meth:`Run.validate`'s to check."""
    if isinstance(value, Run):
        return value
    if not isinstance(value, Mapping):
        raise RunError(f"{source} returned {_what(value)}; expected {RUN_SHAPE}")
    run = Run()
    for qid, ranking in value.items():
        where = f"{source} returned a mapping whose"
        if not isinstance(qid, str):
            raise RunError(f"{where} key {_what(qid)} is not a query id (a string); expected {RUN_SHAPE}")
        if isinstance(ranking, Mapping):
            ranking = sorted(ranking.items(), key=lambda pair: -_score(pair[1], qid, where))
        elif isinstance(ranking, (str, bytes)) or not isinstance(ranking, Sequence):
            raise RunError(f"{where} ranking of query {qid!r} is {_what(ranking)}, not a list of (doc_id, score) "
                           f"pairs; expected {RUN_SHAPE}")
        pairs: list[tuple[str, float]] = []
        for rank, pair in enumerate(ranking, 1):
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise RunError(f"{where} ranking of query {qid!r} has {_what(pair)} at rank {rank}, not a "
                               f"(doc_id, score) pair; expected {RUN_SHAPE}")
            doc_id, score = pair
            if not isinstance(doc_id, str):
                raise RunError(f"{where} ranking of query {qid!r} has document id {_what(doc_id)} at rank {rank}; "
                               "document ids are strings")
            pairs.append((doc_id, _score(score, qid, where)))
        run[qid] = pairs
    return run


def _score(score: object, qid: str, where: str) -> float:
    if not isinstance(score, bool) and hasattr(type(score), "__float__"):
        try:
            return float(score)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            pass
    raise RunError(f"{where} ranking of query {qid!r} has score {_what(score)}; scores are numbers")


class Run(dict):
    """``dict[qid, list[(docid, score)]]`` — the list order is the ranking.

    Scores must be non-increasing down each list; ``validate`` enforces it together with
    unique document ids. ``to_trec``/``from_trec`` read and write the TREC run format.
    """

    def validate(self, corpus: Corpus | None = None) -> "Run":
        for qid, ranking in self.items():
            seen: set[str] = set()
            prev = math.inf
            for rank, (doc_id, score) in enumerate(ranking, 1):
                if doc_id in seen:
                    raise RunError(f"query {qid!r}: document {doc_id!r} appears twice (rank {rank})")
                seen.add(doc_id)
                if corpus is not None and doc_id not in corpus:
                    raise RunError(f"query {qid!r}: unknown document {doc_id!r} at rank {rank}")
                s = float(score)
                if not math.isfinite(s):
                    raise RunError(f"query {qid!r}: score {s} at rank {rank} (scores must be finite)")
                if s > prev:
                    raise RunError(
                        f"query {qid!r}: scores must not increase down the ranking "
                        f"(rank {rank}: {s} > {prev})"
                    )
                prev = s
        return self

    def truncate(self, k: int) -> "Run":
        return Run({q: list(r[:k]) for q, r in self.items()})

    def to_trec(self, path: str | Path, tag: str = "beyondsim") -> None:
        """Write the run as a TREC file whose order every trec_eval reads as the list order: each
        score is written exactly (the shortest text that reads back as the same float), and a score
        equal to the one above it is written one float step below it, since trec_eval breaks ties
        by document id, not by the list (docs/design/runfiles.md)."""
        with open(path, "w", encoding="utf-8") as f:
            for qid, ranking in self.items():
                prev = math.inf
                for rank, (doc_id, score) in enumerate(ranking, 1):
                    s = float(score)
                    if s >= prev:
                        s = math.nextafter(prev, -math.inf)
                    prev = s
                    f.write(f"{qid} Q0 {doc_id} {rank} {s!r} {tag}\n")

    @classmethod
    def from_trec(cls, path: str | Path) -> "Run":
        rows: dict[str, list[tuple[int, str, float]]] = {}
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                parts = line.split()
                if len(parts) != 6:
                    raise RunError(f"{path}:{lineno}: expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}")
                qid, _, doc_id, rank, score, _ = parts
                try:
                    rows.setdefault(qid, []).append((int(rank), doc_id, float(score)))
                except ValueError as e:
                    raise RunError(f"{path}:{lineno}: bad rank or score: {e}") from None
        return cls({q: [(d, s) for _, d, s in sorted(r, key=lambda t: t[0])] for q, r in rows.items()})


def content_hash(parts: Iterable[bytes | str]) -> str:
    """A short, stable sha256 over a sequence of parts (used for benchmark versions)."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8") if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]


def benchmark_fingerprint(corpus: Corpus, queries: Sequence[Query], judgments: Judgments,
                          pairs: Sequence[Pair] | None = None) -> str:
    """Content-hash version of a benchmark: changes when any text, id or label changes."""

    def parts() -> Iterator[str]:
        for d in corpus:
            yield f"D\t{d.id}\t{d.title}\t{d.text}"
        for q in queries:
            yield f"Q\t{q.id}\t{q.text}"
        yield "R\t" + json.dumps(judgments.relevance, sort_keys=True)
        yield "V\t" + json.dumps({k: sorted(v) for k, v in judgments.violating.items()}, sort_keys=True)
        for p in pairs or []:
            yield f"P\t{p.q1}\t{p.d1}\t{p.q2}\t{p.d2}"

    return content_hash(parts())
