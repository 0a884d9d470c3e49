"""What a trained model saw, and the check that it is never scored on it.

A retriever built on a trained artifact (CoDeR's compatibility encoder) declares its training data
with ``training_data(ctx) -> TrainingData``; the runner calls :func:`check_unseen` before it
indexes, and refuses to score the retriever on a benchmark that shares anything with that data:

* the benchmark *version* of a split it was trained on (``nevir:train`` itself);
* a query id or document id of the same benchmark family (``nevir`` for ``nevir:train``) — ids of
  one family name the same items across its splits;
* a query text or a document text (normalised: lower case, whitespace collapsed) — catches the
  same item under another id or in another benchmark.

Texts are kept as SHA-256 digests, so an artifact's card records what it saw without carrying the
data itself.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import UserError
from .types import Benchmark

_WS = re.compile(r"\s+")


class LeakageError(UserError, RuntimeError):
    """A retriever would be scored on data its model was trained on."""


def text_digest(text: str) -> str:
    """SHA-256 (first 32 hex digits) of the normalised text."""
    return hashlib.sha256(_WS.sub(" ", text.strip().lower()).encode("utf-8")).hexdigest()[:32]


def family(benchmark: str) -> str:
    """``nevir:train`` → ``nevir``; ``nevir[:20]`` → ``nevir``; ``diag/antonym`` → ``diag/antonym``."""
    return benchmark.split("[", 1)[0].split(":", 1)[0]


@dataclass(frozen=True)
class TrainingData:
    """The benchmarks, ids and text digests a model was trained on."""

    sources: tuple[Mapping[str, Any], ...] = ()  # {"benchmark", "version", ...}
    query_ids: Mapping[str, frozenset[str]] = field(default_factory=dict)  # family -> ids
    doc_ids: Mapping[str, frozenset[str]] = field(default_factory=dict)
    query_texts: frozenset[str] = frozenset()  # digests
    doc_texts: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainingData":
        return cls(tuple(d.get("sources", ())),
                   {k: frozenset(v) for k, v in d.get("query_ids", {}).items()},
                   {k: frozenset(v) for k, v in d.get("doc_ids", {}).items()},
                   frozenset(d.get("query_texts", ())), frozenset(d.get("doc_texts", ())))

    def to_dict(self) -> dict[str, Any]:
        return {"sources": [dict(s) for s in self.sources],
                "query_ids": {k: sorted(v) for k, v in sorted(self.query_ids.items())},
                "doc_ids": {k: sorted(v) for k, v in sorted(self.doc_ids.items())},
                "query_texts": sorted(self.query_texts), "doc_texts": sorted(self.doc_texts)}

    def merge(self, other: "TrainingData") -> "TrainingData":
        def union(a: Mapping[str, frozenset[str]], b: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
            return {k: a.get(k, frozenset()) | b.get(k, frozenset()) for k in set(a) | set(b)}

        return TrainingData(self.sources + other.sources, union(self.query_ids, other.query_ids),
                            union(self.doc_ids, other.doc_ids), self.query_texts | other.query_texts,
                            self.doc_texts | other.doc_texts)

    @property
    def empty(self) -> bool:
        return not (self.sources or self.query_texts or self.doc_texts or self.query_ids or self.doc_ids)


def overlap(td: TrainingData, bench: Benchmark) -> dict[str, list[str]]:
    """What ``bench`` shares with ``td``: ``{"version": [...], "query ids": [...], "document ids": [...],
    "query texts": [qid, ...], "document texts": [docid, ...]}`` (empty lists dropped)."""
    fam = family(bench.name)
    found: dict[str, list[str]] = {}
    versions = [str(s.get("benchmark", "?")) for s in td.sources if s.get("version") == bench.version]
    if versions:
        found["version"] = versions
    queries = bench.eval_queries
    ids = td.query_ids.get(fam, frozenset())
    found["query ids"] = [q.id for q in queries if q.id in ids]
    dids = td.doc_ids.get(fam, frozenset())
    found["document ids"] = [d for d in bench.corpus.ids if d in dids]
    found["query texts"] = [q.id for q in queries if text_digest(q.text) in td.query_texts]
    found["document texts"] = ([d.id for d in bench.corpus if text_digest(d.full_text) in td.doc_texts
                                or text_digest(d.text) in td.doc_texts] if td.doc_texts else [])
    return {k: v for k, v in found.items() if v}


def check_unseen(td: TrainingData, bench: Benchmark, who: str) -> None:
    """Raise :class:`LeakageError` when ``bench`` shares a split, an id or a text with ``td``."""
    found = overlap(td, bench)
    if found:
        parts = [f"{len(v)} {k} (e.g. {', '.join(map(str, v[:3]))})" for k, v in found.items()]
        trained_on = ", ".join(sorted({str(s.get("benchmark", "?")) for s in td.sources})) or "its training data"
        raise LeakageError(f"{who}: refusing to score on {bench.name}: its model was trained on {trained_on} and "
                           f"this split shares {'; '.join(parts)}")


def digests(texts: Iterable[str]) -> frozenset[str]:
    return frozenset(text_digest(t) for t in texts)
