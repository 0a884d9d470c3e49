"""What a trained model saw, and the check that it is never scored on it.

A retriever built on a trained artifact (CoDeR's compatibility encoder) declares its training data
with ``training_data(ctx) -> TrainingData``; the runner calls :func:`check_unseen` before it
indexes, and refuses to score the retriever on a benchmark that shares anything with that data:

* the benchmark *version* of a split it was trained on (``nevir:train`` itself), or the split
  itself by name: a declared source named as the benchmark scored (``NEVIR`` when scored on
  ``nevir``; ``NevIR:train`` when scored on ``nevir:train``);
* a query id or document id of the same benchmark family (``nevir`` for ``nevir:train``) — ids of
  one family name the same items across its splits;
* a query text or a document text (normalised: lower case, whitespace collapsed) — catches the
  same item under another id or in another benchmark.

Benchmark names are compared as :func:`benchmark_key` writes them: case-insensitively, a query
slice (``[:20]``) and surrounding blanks aside — ``NevIR:train`` is nevir's train split. A
retriever whose registered metadata says it trains (``trains_on``) and that declares training data
naming no source is refused as well: an empty declaration would pass every check.

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


def benchmark_key(benchmark: Any) -> str:
    """A benchmark name as leakage checks compare it: lower case, without a query slice or blanks
    around it (``" NevIR:Train[:20] "`` → ``nevir:train``)."""
    return str(benchmark).split("[", 1)[0].strip().lower()


def family_key(benchmark: Any) -> str:
    """The family of a benchmark as leakage checks compare it (``NevIR:train`` → ``nevir``)."""
    return family(benchmark_key(benchmark))


def same_benchmark(a: Any, b: Any) -> bool:
    """Whether two names name the same split of the same benchmark (:func:`benchmark_key`)."""
    return benchmark_key(a) == benchmark_key(b)


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


def _by_family(ids: Mapping[str, Iterable[str]], fam: str) -> frozenset[str]:
    """The ids ``ids`` holds for family ``fam``, its keys compared as :func:`family_key` writes them."""
    out: set[str] = set()
    for k, v in ids.items():
        if family_key(k) == fam:
            out.update(v)
    return frozenset(out)


def overlap(td: TrainingData, bench: Benchmark) -> dict[str, list[str]]:
    """What ``bench`` shares with ``td``: ``{"version": [...], "name": [...], "query ids": [...],
    "document ids": [...], "query texts": [qid, ...], "document texts": [docid, ...]}`` (empty lists
    dropped). Names are compared case-insensitively (:func:`benchmark_key`)."""
    fam = family_key(bench.name)
    found: dict[str, list[str]] = {}
    sources = [s for s in td.sources if isinstance(s, Mapping)]
    versions = [str(s.get("benchmark", "?")) for s in sources if s.get("version") == bench.version]
    if versions:
        found["version"] = versions
    named = [str(s.get("benchmark")) for s in sources
             if s.get("version") != bench.version and same_benchmark(s.get("benchmark", ""), bench.name)]
    if named:
        found["name"] = named
    queries = bench.eval_queries
    ids = _by_family(td.query_ids, fam)
    found["query ids"] = [q.id for q in queries if q.id in ids]
    dids = _by_family(td.doc_ids, fam)
    found["document ids"] = [d for d in bench.corpus.ids if d in dids]
    found["query texts"] = [q.id for q in queries if text_digest(q.text) in td.query_texts]
    found["document texts"] = ([d.id for d in bench.corpus if text_digest(d.full_text) in td.doc_texts
                                or text_digest(d.text) in td.doc_texts] if td.doc_texts else [])
    return {k: v for k, v in found.items() if v}


def declared_trains_on(retriever: Any) -> str:
    """What a retriever (a class or an instance) registered it trains on (``trains_on``), ``""`` when
    nothing: read from the metadata :func:`harness.core.registry.register` attached."""
    info = getattr(retriever, "retriever_info", None)
    return str(getattr(info, "trains_on", "") or "")


def _registered_trains_on(who: str) -> str:
    """``trains_on`` of the registered retriever named ``who`` (a spec shown by its name), else ``""``."""
    from .registry import _retrievers  # the same layer; read lazily so that the registry stays optional here

    cls = _retrievers.get(who) if isinstance(who, str) else None
    return declared_trains_on(cls) if cls is not None else ""


def check_unseen(td: TrainingData, bench: Benchmark, who: str, *, retriever: Any = None,
                 trains_on: str | None = None) -> None:
    """Raise :class:`LeakageError` when ``bench`` shares a split, an id or a text with ``td``, or when
    the retriever trains (``trains_on``; else what ``retriever``, its class or instance, registered;
    else what the retriever registered under the name ``who`` registered) but ``td`` names no source
    it was trained on: a declaration with nothing in it cannot be checked, so it is refused."""
    if trains_on is None:
        trains_on = declared_trains_on(retriever) if retriever is not None else _registered_trains_on(who)
    if trains_on and not any(isinstance(s, Mapping) and str(s.get("benchmark") or "").strip() for s in td.sources):
        raise LeakageError(f"{who}: refusing to score on {bench.name}: it trains a model ({trains_on}) but declares "
                           "training data with no source (no benchmark it was trained on), so it cannot be checked "
                           "for overlap with what it is scored on; its artifact must list every source it learnt "
                           "from (a source that is no benchmark, such as WordNet, by its name and version)")
    found = overlap(td, bench)
    if found:
        parts = [f"{len(v)} {k} (e.g. {', '.join(map(str, v[:3]))})" for k, v in found.items()]
        trained_on = ", ".join(sorted({str(s.get("benchmark", "?")) for s in td.sources})) or "its training data"
        raise LeakageError(f"{who}: refusing to score on {bench.name}: its model was trained on {trained_on} and "
                           f"this split shares {'; '.join(parts)}")


def digests(texts: Iterable[str]) -> frozenset[str]:
    return frozenset(text_digest(t) for t in texts)
