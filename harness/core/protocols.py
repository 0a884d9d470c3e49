"""The retriever protocols and the context every retriever receives (docs/design/protocols.md).

A retriever never opens its own HTTP client, reads keys from the environment or times itself:
``RunContext`` hands out the shared LLM client, the encoder pool with its embedding cache, the
cost/time ledger and a progress reporter, so accounting is uniform and cannot be skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from .progress import NullProgress, Progress  # in a module of their own, so the encoder pool needs nothing here
from .errors import UserError
from .types import Benchmark, Candidate, Corpus, Query, Run

if TYPE_CHECKING:  # pragma: no cover
    from ..models.pool import EncoderPool
    from .leakage import TrainingData
    from .ledger import Ledger


@dataclass
class RunContext:
    seed: int = 0
    device: str = "cpu"
    ledger: "Ledger | None" = None
    encoders: "EncoderPool | None" = None
    llm: Any = None
    progress: Progress = field(default_factory=NullProgress)
    cache_dir: Path = field(default_factory=lambda: Path(".beyondsim/cache"))
    benchmark_name: str = ""
    # the benchmark's task family ("constraint", "topical", "completeness"): methods whose
    # published defaults differ by family (CoDeR) read it
    task: str = ""
    # where benchmarks are read from (a retriever that trains on other benchmarks' train splits
    # loads them through the registry with these), and a one-line log for long steps
    data_dir: Path | None = None
    online: bool = False
    log: Callable[[str], None] = field(default=lambda msg: None)
    # The validation split (``<benchmark>:dev``) for a trainable retriever's early stopping and
    # model selection, when the benchmark has one; never the evaluated split.
    validation: "Benchmark | None" = None

    def require_llm(self, who: str) -> Any:
        """The shared LLM client, or a clear error naming the retriever that needs one."""
        if self.llm is None:
            raise RuntimeError(f"{who} needs an LLM: run it with `beyondsim run` (which provides the shared client) "
                               "or pass RunContext(llm=harness.models.llm.LLMClient(...))")
        return self.llm

    def scratch(self, *parts: str) -> Path:
        p = self.cache_dir.joinpath(*parts)
        p.mkdir(parents=True, exist_ok=True)
        return p


@runtime_checkable
class Retriever(Protocol):
    """What every retriever implements: the runner indexes the corpus once, then searches with the
    benchmark's evaluated queries. ``search`` returns a :class:`~harness.types.Run` or a plain
    mapping ``{query_id: [(doc_id, score), ...]}`` (:func:`harness.types.as_run` reads it)."""

    def index(self, corpus: Corpus, ctx: RunContext) -> None: ...

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run | Mapping[str, Any]: ...


@runtime_checkable
class Reranker(Protocol):
    """A second stage: reorders each query's candidates from a frozen pool (``beyondsim run NAME
    --pool bm25@100``; docs/design/pools.md). ``candidates[qid]`` lists the query's pool documents
    in first-stage order as :class:`~harness.types.Candidate` ``(doc, score)`` pairs; ``rerank``
    returns a ranking of those documents only (a Run or a mapping, as ``search`` does), at most the
    run's depth. A reranker that also defines ``index(corpus, ctx)`` is given the whole corpus first
    (corpus-wide statistics, embeddings it caches); one that needs only the candidates' texts need
    not define it. A class may be both a retriever and a reranker (``coder-seq``: its own first
    stage with ``search``, a given pool with ``rerank``)."""

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run | Mapping[str, Any]: ...


# Optional members, each a named protocol the runner checks with ``isinstance`` (none is required).


@runtime_checkable
class Trainable(Protocol):
    """Learns from the benchmark's ``:train`` split: the runner calls ``fit`` before ``index``, timed
    as the "fit" phase, with the train split (never the scored one) and the ``:dev`` split as
    ``ctx.validation`` when there is one."""

    def fit(self, benchmark: Benchmark, ctx: RunContext) -> None: ...


@runtime_checkable
class Preparable(Protocol):
    """Builds or loads a trained artifact that does not come from the benchmark's own train split
    (CoDeR's compatibility encoder): the runner calls ``prepare`` first, before ``index``, timed as
    the "fit" phase."""

    def prepare(self, ctx: RunContext) -> None: ...


@runtime_checkable
class DeclaresTrainingData(Protocol):
    """Says what its model was trained on: the runner calls ``training_data`` after ``prepare`` and
    refuses to score the retriever on a benchmark that shares a split, an id or a text with it
    (:func:`harness.core.leakage.check_unseen`); ``None`` declares nothing."""

    def training_data(self, ctx: RunContext) -> "TrainingData | None": ...


@runtime_checkable
class HasResultExtra(Protocol):
    """Reports facts about the run: the runner calls ``result_extra`` after search and keeps the
    JSON-able dict in the result's ``extra["retriever"]`` (fit history, resolved defaults, an
    artifact's card)."""

    def result_extra(self) -> dict[str, Any]: ...


@runtime_checkable
class Analysable(Protocol):
    """Analyses its rankings with the judgments: the runner calls ``analyse`` after evaluation and
    keeps the JSON-able dict in ``extra["analysis"]`` (CoDeR's score separation); it never changes a
    ranking, and tuning and sweeps skip it."""

    def analyse(self, benchmark: Benchmark, ctx: RunContext) -> dict[str, Any]: ...


@runtime_checkable
class Scorer(Protocol):
    """Scores given documents directly: on a benchmark with pairs (NevIR) the runner calls ``score``
    after search with each query's two pair documents, for PairAcc, and expects
    ``{qid: {doc id: score}}`` on the scale of ``search``'s scores. Without it the runner ranks the
    whole corpus for the queries whose pair documents fall below the ranking depth."""

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]: ...


OPTIONAL_PROTOCOLS: tuple[type, ...] = (Trainable, Preparable, DeclaresTrainingData, HasResultExtra, Analysable,
                                        Scorer)


def _calls(protocol: type) -> list[tuple[str, tuple[str, ...]]]:
    """``(name, parameters after self)`` of each member ``protocol`` declares."""
    import inspect

    return [(name, tuple(inspect.signature(member).parameters)[1:]) for name, member in vars(protocol).items()
            if inspect.isfunction(member) and not name.startswith("_")]


# (name, parameters after self, required): the calls the runner makes, with their positional arguments
PROTOCOL_MEMBERS: tuple[tuple[str, tuple[str, ...], bool], ...] = tuple(
    (name, params, protocol is Retriever)
    for protocol in (Retriever, *OPTIONAL_PROTOCOLS) for name, params in _calls(protocol))


def _arity_problem(cls: type, name: str, params: tuple[str, ...]) -> str | None:
    """Why ``instance.<name>(*params)`` cannot be called positionally, or ``None`` when it can."""
    import inspect

    member = getattr(cls, name)
    try:
        sig = inspect.signature(member)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return None
    static = inspect.getattr_static(cls, name, None)
    bound_later = inspect.isfunction(static)  # a plain function gets the instance as first argument
    shown = [p for i, p in enumerate(sig.parameters.values()) if not (bound_later and i == 0)]
    try:
        sig.bind(*([None] * (len(params) + bound_later)))
    except TypeError:
        got = ", ".join(p.name if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) else
                        ("*" if p.kind == p.VAR_POSITIONAL else "**") + p.name for p in shown)
        return (f"{name}({', '.join(params)}): cannot be called with {len(params)} positional argument(s); "
                f"it is defined as {name}({got})")
    return None


class ProtocolError(UserError, TypeError):
    """A retriever class that does not implement the protocol."""


def missing_reranker_members(cls: type) -> list[str]:
    """What keeps ``cls`` from being run on a pool, one line each: ``rerank(queries, candidates,
    ctx)`` absent or not callable with those arguments, ``index(corpus, ctx)`` present but not
    callable with its arguments."""
    return _problems(cls, (("rerank", ("queries", "candidates", "ctx"), True), ("index", ("corpus", "ctx"), False)),
                     " (a reranker reorders a pool's candidates)")


def _problems(cls: type, members: Sequence[tuple[str, tuple[str, ...], bool]], absent: str = "") -> list[str]:
    """Each of ``members`` (name, parameters after self, required) that ``cls`` lacks (when
    required), has as a non-callable attribute, or cannot call with those arguments."""
    problems = []
    for name, params, required in members:
        call = f"{name}({', '.join(params)})"
        if not hasattr(cls, name):
            if required:
                problems.append(f"{call}: not defined{absent}")
            continue
        if not callable(getattr(cls, name)):
            problems.append(f"{call}: {type(getattr(cls, name)).__name__} attribute, not a method")
            continue
        arity = _arity_problem(cls, name, params)
        if arity:
            problems.append(arity)
    return problems


def missing_protocol_members(cls: type) -> list[str]:
    """Everything that keeps ``cls`` from being run as a retriever, one line each, for a clear
    message before any work starts: ``index(corpus, ctx)`` and ``search(queries, k, ctx)`` absent,
    not callable or not callable with those arguments; an optional member (``fit``, ``prepare``,
    ``training_data``, ``result_extra``, ``analyse``, ``score``) present but not callable with its arguments."""
    return _problems(cls, PROTOCOL_MEMBERS)
