"""Builders the tests share: result records, LLM calls, stores, corpora and benchmarks.

Every builder takes the fields a test cares about and fills the rest with fixed values, so that a
test reads as what it varies. The defaults never change a figure a test asserts: a test that needs
a field passes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.store.results import BenchmarkInfo, MeasureValue, ResultRecord, Store, result_key
from harness.types import Benchmark, Corpus, Document, Judgments, Query

HV = "0"  # the harness version of a built record unless told


def make_record(label: str = "bm25", *, retriever: str | None = None, benchmark: str = "b",
                benchmark_version: str | None = None, seed: int = 0, k: int = 100, harness_version: str = HV,
                spec_hash: str | None = None, spec: Mapping[str, Any] | None = None, key: str | None = None,
                measures: Mapping[str, MeasureValue] | None = None,
                per_query: Mapping[str, Mapping[str, float]] | None = None, n_queries: int | None = None,
                n_missing: int = 0, **fields: Any) -> ResultRecord:
    """One result. By default the retriever is the label, the spec hash ``h<label>``, the spec
    ``{"retriever", "params": {}}``, the version ``v-<benchmark>``, the key
    :func:`harness.store.results.result_key` of them, and ``n_queries`` the number of queries of the first
    per-query column (else 10). ``fields`` sets any other :class:`ResultRecord` field (``phases``,
    ``llm_calls``, ``rankings``, ``extra``, ``created_at``, …)."""
    retriever = retriever if retriever is not None else label
    spec_hash = spec_hash if spec_hash is not None else f"h{label}"
    version = benchmark_version if benchmark_version is not None else f"v-{benchmark}"
    if n_queries is None:
        n_queries = len(next(iter(per_query.values()))) if per_query else 10
    return ResultRecord(
        key=key if key is not None else result_key(spec_hash, version, seed, k, harness_version),
        retriever=retriever, label=label, spec_hash=spec_hash,
        spec=dict(spec) if spec is not None else {"retriever": retriever, "params": {}},
        benchmark=benchmark, benchmark_version=version, seed=seed, k=k, harness_version=harness_version,
        n_queries=n_queries, n_missing=n_missing, measures=dict(measures or {}),
        per_query={m: dict(c) for m, c in (per_query or {}).items()}, **fields)


def llm_call(usd: float | None = None, *, model: str = "m", prompt_tokens: int | None = 100,
             completion_tokens: int | None = 20, cached: bool = False, latency_s: float = 0.1,
             phase: str = "search", purpose: str = "q") -> dict[str, Any]:
    """One recorded LLM call, as :attr:`ResultRecord.llm_calls` holds it."""
    return {"model": model, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "latency_s": latency_s, "cached": cached, "usd": usd, "phase": phase, "purpose": purpose}


def make_store(path: Path, records: Iterable[ResultRecord] = (), benchmarks: Iterable[BenchmarkInfo] = ()) -> Store:
    """A store at ``path`` (a file, or a folder to hold ``results.sqlite``) holding ``benchmarks``
    and ``records``, saved in that order; the caller closes it."""
    path = Path(path)
    store = Store(path / "results.sqlite" if path.suffix != ".sqlite" else path)
    for info in benchmarks:
        store.save_benchmark(info)
    for rec in records:
        store.save(rec)
    return store


def make_corpus(docs: Mapping[str, str] | Iterable[str]) -> Corpus:
    """A corpus from ``{doc id: text}``, or from texts numbered ``d0, d1, …`` in order."""
    if isinstance(docs, Mapping):
        return Corpus([Document(i, t) for i, t in docs.items()])
    return Corpus([Document(f"d{i}", t) for i, t in enumerate(docs)])


def make_benchmark(corpus: Corpus, queries: Sequence[Query] | Mapping[str, str],
                   relevance: Mapping[str, Mapping[str, int]], *, name: str = "b", version: str = "0",
                   task: str = "topical", default_measures: Sequence[str] = ("nDCG@10",), **fields: Any) -> Benchmark:
    """A benchmark over ``corpus`` with its queries (or ``{query id: text}``) and graded judgements;
    ``fields`` sets any other :class:`harness.types.Benchmark` field (``splits``, ``pairs``, …)."""
    qs = [Query(q, t) for q, t in queries.items()] if isinstance(queries, Mapping) else list(queries)
    return Benchmark(name=name, version=version, corpus=corpus, queries=qs,
                     judgments=Judgments({q: dict(j) for q, j in relevance.items()}), task=task,
                     default_measures=tuple(default_measures), **fields)
