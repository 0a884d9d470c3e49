"""The runner: benchmark → retriever → metrics → store, with phase timing (docs/design/overview.md#what-a-run-is).

For every (retriever spec, benchmark, seed) it computes the result key; an existing key is
skipped (and said so) unless ``force``. Each finished result is written to the store in one
transaction before the next starts, so an interrupted run loses at most the result in flight
and a rerun resumes where it stopped.

One loop serves every runner: :meth:`Runner.plan` lists the jobs, :meth:`Runner.run` skips those
stored and settles each result (:meth:`Runner.settle`: stored, stored meanwhile by another run, or
stopped by the LLM budget); only :meth:`Runner.execute`, how the jobs compute, differs between
this process and a Ray cluster (:class:`harness.run.distributed.RayRunner`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from .. import __version__ as HARNESS_VERSION
from ..cost.figures import REUSED_KEY
from ..data.readers import DataError, MissingDataError, default_data_dir
from ..models.pool import EncoderPool
from ..models.resolve import default_device
from ..models.facts import FACTS_KEY, pool_facts
from ..core.leakage import LeakageError, check_unseen
from ..core.ledger import RESULT_RUN_KEY, Ledger, PhaseTime, RunTag
from ..models.llm import BudgetExceeded, LLMClient, LLMSettings
from ..measures import TASK_DEFAULTS, MeasureError, evaluate, pair_documents, parse_measure
from ..core.protocols import (Analysable, DeclaresTrainingData, HasResultExtra, NullProgress, Preparable, Progress,
                              ProtocolError, RunContext, Scorer, Trainable, missing_protocol_members,
                              missing_reranker_members)
from ..store.provenance import environment, provenance
from ..core.registry import (RetrieverSpec, get_benchmark_loader, get_retriever_class, instantiate, looks_like_path,
                             params_class, parse_spec_text, retriever_info)
from ..measures.stats import BOOTSTRAP_RESAMPLES, bootstrap_cis
from ..store.results import (CONTENT_DEPTH, IMPORTED_CONTENT, BenchmarkInfo, MeasureValue, ResultRecord, Store,
                             result_key)
from ..core.types import Benchmark, Candidate, Query, Run, as_run, slice_name, split_slice
from ..store.trust import BLIND_KEY
from . import blind as blinding
from . import pools as pooling

DEFAULT_K = 100


@dataclass
class Settings:
    home: Path
    data_dir: Path | None = None
    k: int = DEFAULT_K
    force: bool = False
    online: bool = False
    device: str | None = None
    extra_measures: tuple[str, ...] = ()
    bootstrap: int = BOOTSTRAP_RESAMPLES
    llm: LLMSettings | None = None  # None: defaults (the embedded server, no budget)
    max_queries: int | None = None  # score only the first N judged queries (a named slice)
    # the frozen candidate pool every retriever of the run reranks (docs/design/pools.md): a name
    # "<first stage>@<depth>" or a pool file; None: the retrievers are first stages
    pool: str | None = None
    # the content hashes the reference plan pins for named pools: {pool name: {benchmark: hash}}
    pinned_pools: Mapping[str, Mapping[str, str]] | None = None
    # run each retriever in a sandbox that holds no judgment (harness/run/blind.py); a stored result
    # that was not computed blind is computed again and replaced
    blind: bool = False
    blind_cache: str = "shared"  # the embedding cache a blind run sees: "shared" (the home's) or "fresh"


@dataclass
class Outcome:
    spec: RetrieverSpec
    benchmark: str
    seed: int
    key: str
    status: str  # "done" | "skipped" | "budget" (stopped by the LLM budget before it finished)
    record: ResultRecord | None = None
    headline: tuple[str, ...] = ()  # the benchmark's default measures, for summaries


@dataclass(frozen=True, eq=False)
class Resolved:
    """A spec's class, looked up once per spec, and what its metadata says of the spec."""
    cls: type
    params: Mapping[str, Any]

    @functools.cached_property
    def uses_llm(self) -> bool:
        """Whether it calls an LLM, as its registered metadata declares (a flag, or a function of
        the params object when only some settings call one)."""
        return retriever_info(self.cls).calls_llm(params_class(self.cls)(**self.params))


@dataclass
class Job:
    """One (spec, benchmark, seed) of a run."""
    index: int  # its place in the run's order (the order of the outcomes)
    spec: RetrieverSpec
    bench: Benchmark
    seed: int
    round: int  # its seed's place among the run's seeds
    key: str
    name: str  # the benchmark as the run was given it
    load_s: float = 0.0

    @property
    def where(self) -> str:
        return f"{self.spec.display} on {self.bench.name} (seed {self.seed})"

    def outcome(self, status: str, record: ResultRecord | None = None) -> Outcome:
        return Outcome(self.spec, self.bench.name, self.seed, self.key, status, record, self.bench.default_measures)


# what a job's execution gives back: its record, or the LLM budget that stopped it
Computed = Union[ResultRecord, BudgetExceeded]


@dataclass
class Settled:
    """What one call of :meth:`Runner.run` has settled so far."""
    outcomes: dict[int, Outcome]
    stop: str | None = None  # why the LLM budget stopped it

    @property
    def done(self) -> int:
        return sum(o.status == "done" for o in self.outcomes.values())


# A retriever may leave a query without any document (BM25 with no matching term); more than this
# share of such queries in one result is worth a warning: they score 0 on nDCG and never violate.
EMPTY_RANKINGS_TOLERATED = 0.01


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


def measures_for(bench: Benchmark, extra: Iterable[str] = ()) -> list[str]:
    """The measures a result on ``bench`` gets: its defaults and its task's (those the benchmark
    cannot support are left out), plus ``extra``, where one that cannot be computed is an error."""
    names: list[str] = []
    has_viol, has_pairs = any(bench.judgments.violating.values()), bool(bench.pairs)
    requested = set(extra)
    for m in (*bench.default_measures, *TASK_DEFAULTS.get(bench.task, ()), *extra):
        why = parse_measure(m).unsupported(has_viol, has_pairs)
        if why:
            if m in requested:
                raise MeasureError(f"measure {m} cannot be computed on {bench.name}: {why}")
            continue
        if m not in names:
            names.append(m)
    return names


def check_protocols(specs: Sequence[RetrieverSpec], classes: Sequence[type] | None = None, *,
                    rerankers: bool = False) -> None:
    """Every spec's class (``classes``, when looked up already) implements the retriever protocol
    (``rerankers``: the reranker protocol, to run on a pool), checked before any work; else a
    TypeError naming the class and what it lacks."""
    for spec, cls in zip(specs, classes or [get_retriever_class(s.name) for s in specs]):
        missing = missing_reranker_members(cls) if rerankers else missing_protocol_members(cls)
        if missing:
            what = "Reranker protocol (it runs on a pool)" if rerankers else "Retriever protocol"
            raise ProtocolError(f"retriever {spec.name!r} ({cls.__module__}:{cls.__qualname__}) does not "
                            f"implement the {what}; missing: {', '.join(missing)}")


def save_content(store: Store, bench: Benchmark, rankings: Mapping[str, Sequence[tuple[str, float]]]) -> None:
    """What the reports' per-query drill-down shows: the benchmark's judged queries and judgments
    (once per version) and the documents of a result's top :data:`CONTENT_DEPTH`. Content an import
    brought for a benchmark that was not here is replaced by the benchmark's own (the documents it
    held rewritten from the corpus here)."""
    ids = {d for r in rankings.values() for d, _ in r[:CONTENT_DEPTH]}
    with store.transaction():
        imported = set(store.get_meta(IMPORTED_CONTENT, []))
        if bench.version in imported:
            ids |= set(store.forget_benchmark_content(bench.version))
            store.set_meta(IMPORTED_CONTENT, sorted(imported - {bench.version}))
        store.save_benchmark_content(bench.name, bench.version, bench.eval_queries,
                                     bench.judgments.relevance, bench.judgments.violating)
        store.save_documents(bench.version, (bench.corpus.get(d) for d in sorted(ids) if d in bench.corpus))


class Here:
    """A retriever computed in this process (a run that is not blind), step by step as the runner
    asks: :meth:`start` (``prepare``, ``training_data`` checked, ``fit``), :meth:`retrieve`
    (``index``, then ``search`` or ``rerank``), :meth:`pair_scores`, :meth:`extra`. A blind run
    has the same steps in a sandboxed child (:class:`harness.run.blind.Sandboxed`)."""

    def __init__(self, runner: "Runner", retriever: Any, spec: RetrieverSpec, bench: Benchmark,
                 queries: Sequence[Query], ctx: RunContext, k: int, pool: "pooling.Pool | None" = None):
        self.runner, self.retriever, self.spec, self.bench, self.queries = runner, retriever, spec, bench, queries
        self.ctx, self.k, self.pool = ctx, k, pool

    def __enter__(self) -> "Here":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def start(self) -> list[dict[str, Any]] | None:
        """``prepare``, ``training_data`` (checked against the benchmark before anything is indexed)
        and ``fit`` on the ``:train`` split: the splits its model learnt from, for ``beyondsim verify``."""
        retriever, ctx, ledger, bench = self.retriever, self.ctx, self.ctx.ledger, self.bench
        assert ledger is not None
        if isinstance(retriever, Preparable):
            with ledger.phase("fit"):
                retriever.prepare(ctx)
        training: list[dict[str, Any]] | None = None
        if isinstance(retriever, DeclaresTrainingData):
            seen = retriever.training_data(ctx)
            if seen is not None:
                check_unseen(seen, bench, self.spec.display)
                training = [{"benchmark": str(s.get("benchmark", "")), "benchmark_version": str(s.get("version", "")),
                             "queries": s.get("queries")} for s in seen.sources]
        if isinstance(retriever, Trainable):
            train = self.runner.train_benchmark(bench)
            training = [*(training or []), {"benchmark": train.name, "benchmark_version": train.version,
                                            "queries": len(train.eval_queries)}]
            ctx.validation = self.runner.validation_benchmark(bench)
            with ledger.phase("fit", items=len(train.eval_queries)):
                retriever.fit(train, ctx)
        return training

    def retrieve(self) -> Any:
        """``index`` (on a pool, only for a reranker that defines it), then ``search`` with the run's
        depth, or ``rerank`` of the pool's candidates: what it returned, for :func:`as_run`."""
        retriever, ctx, ledger, bench, pool, queries = (self.retriever, self.ctx, self.ctx.ledger, self.bench,
                                                        self.pool, self.queries)
        assert ledger is not None
        if pool is None or hasattr(retriever, "index"):
            with ledger.phase("index", items=len(bench.corpus)):
                retriever.index(bench.corpus, ctx)
        if pool is None:
            with ledger.phase("search", items=len(queries)):
                return retriever.search(queries, self.k, ctx)
        corpus = bench.corpus
        candidates = {q.id: [Candidate(corpus.get(d), s) for d, s in pool.rankings.get(q.id, ())] for q in queries}
        with ledger.phase("search", items=len(queries)):
            return retriever.rerank(queries, candidates, ctx)

    def pair_scores(self, run: Run) -> dict[str, dict[str, float]]:
        """PairAcc's scores (:meth:`Runner.pair_scores`), from the ranking cut at k."""
        return self.runner.pair_scores(self.retriever, self.bench, self.queries, run, self.ctx)

    def extra(self, analyse: bool = True) -> dict[str, Any]:
        """``result_extra``, ``analyse`` (when ``analyse``), the facts of the models it used and the
        encoder pool's statistics."""
        extra: dict[str, Any] = {}
        if isinstance(self.retriever, HasResultExtra):
            extra["retriever"] = self.retriever.result_extra()
        if analyse and isinstance(self.retriever, Analysable):
            extra["analysis"] = self.retriever.analyse(self.bench, self.ctx)
        facts = pool_facts(self.runner.encoders)
        if facts:
            extra[FACTS_KEY] = facts
        extra["encoder_stats"] = dict(self.runner.encoders.stats)
        return extra


class Runner:
    def __init__(self, settings: Settings, store: Store, progress: Progress | None = None,
                 log: Callable[[str], None] = print):
        self.s = settings
        self.store = store
        self.progress = progress or NullProgress()
        self.log = log
        self.device = settings.device or default_device()
        self.data_dir = default_data_dir(settings.data_dir)
        self.encoders = EncoderPool(settings.home / "cache", self.device, self.progress,
                                    warn=lambda m: log(f"warning: {m}"))
        self._benchmarks: dict[str, tuple[Benchmark, float]] = {}
        self.environment = environment(self.device)  # the same for every result of this run
        self._llm: LLMClient | None = None
        self.budget_stop: str | None = None  # why the run stopped early, when the LLM budget did it
        self._pools: dict[str, pooling.Pool] = {}  # by hash: the pools of this run
        self._shipped_pools: dict[str, pooling.Pool] | None = None  # the shipped pools file's, read when needed
        # (pool name, benchmark) → (the hash computed here, its agreement with the pinned pool when they differ)
        self.pool_agreements: dict[tuple[str, str], tuple[str, pooling.Agreement | None]] = {}
        self._resolved: dict[str, Resolved] = {}  # spec hash -> its class, looked up once
        self.settled = Settled({})  # the current (or last) run's outcomes, and whether the budget stopped it

    @property
    def llm(self) -> LLMClient:
        """The run's shared LLM client (one budget for the whole run). Built on first use; the
        embedded server behind it starts only when a request misses the cache."""
        if self._llm is None:
            self._llm = LLMClient(self.s.llm or LLMSettings(), cache_path=self.s.home / "cache" / "llm.sqlite")
        return self._llm

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_benchmark(self, name: str) -> tuple[Benchmark, float]:
        n = self.s.max_queries if not name.endswith((":train", ":dev")) else None
        key = name if n is None else slice_name(name, n)  # a slice and the whole set are kept apart
        if key not in self._benchmarks:
            loader, bname = get_benchmark_loader(name)
            ledger = Ledger()
            with ledger.phase("load"):
                bench = loader.load(bname, self.data_dir, online=self.s.online)
                if n is not None:
                    bench = bench.head(n)
            self._benchmarks[key] = (bench, ledger.phases["load"].wall_s)
            self.store.save_benchmark(BenchmarkInfo.of(bench))
        return self._benchmarks[key]

    def train_benchmark(self, bench: Benchmark) -> Benchmark:
        """The split a trainable retriever may learn from: ``<name>:train``, never the scored split."""
        name = bench.name.split(":", 1)[0] + ":train"
        try:
            train, _ = self.load_benchmark(name)
        except (LookupError, FileNotFoundError) as e:
            raise MissingDataError(f"{bench.name}: a trainable retriever needs the train split {name!r}: {e}") from e
        overlap = {q.id for q in train.queries} & {q.id for q in bench.eval_queries}
        if overlap or train.version == bench.version:
            raise LeakageError(f"{bench.name}: train split {name!r} shares {len(overlap)} queries with the "
                               "evaluated split; refusing to score a retriever on data it saw")
        return train

    def validation_benchmark(self, bench: Benchmark) -> Benchmark | None:
        """``<name>:dev`` when the benchmark has such a split (and it shares no query with the
        evaluated split), else ``None`` — a trainable retriever then holds out part of train."""
        name = bench.name.split(":", 1)[0] + ":dev"
        if name == bench.name:
            return None
        try:
            dev, _ = self.load_benchmark(name)
        except DataError:
            raise  # a dev split that exists but is broken is an error, not an absence
        except (LookupError, FileNotFoundError, ValueError):  # no such split
            return None
        if {q.id for q in dev.queries} & {q.id for q in bench.eval_queries} or dev.version == bench.version:
            return None
        return dev

    def resolve(self, spec: RetrieverSpec) -> Resolved:
        """``spec``'s class (by registered name, entry point or ``module:Class``), looked up on the
        first call for the spec and kept."""
        if spec.hash not in self._resolved:
            self._resolved[spec.hash] = Resolved(get_retriever_class(spec.name), dict(spec.params))
        return self._resolved[spec.hash]

    def uses_llm(self, spec: RetrieverSpec) -> bool:
        """Whether the retriever calls an LLM, as its registered metadata declares (a flag, or a
        function of the params object when only some settings call one)."""
        return self.resolve(spec).uses_llm

    def key(self, spec: RetrieverSpec, bench: Benchmark, seed: int, k: int | None = None) -> str:
        """The result key; an LLM retriever's includes the model, so the same method run with another
        LLM is another result (a reranker's spec hash covers its pool)."""
        spec_part = f"{spec.hash}|llm={self.llm.model}" if self.uses_llm(spec) else spec.hash
        return result_key(spec_part, bench.version, seed, self.s.k if k is None else k, HARNESS_VERSION)

    # -- candidate pools (docs/design/pools.md) --

    def pool_for(self, bench: Benchmark, given: str) -> pooling.Pool:
        """The pool ``given`` names on ``bench``: a pool file (checked against the benchmark), or
        ``<first stage>@<depth>``, the first stage's top ``depth`` here (its result at that depth from
        the store, else computed and stored). Kept in the store with its three reference rows; a
        named pool whose hash is not the one the reference plan pins is said so."""
        named = pooling.parse_pool_name(given)
        if named is None and self.s.blind:  # its order could carry the judgments into the sandbox
            raise blinding.BlindError(f"--blind: the candidates of pool file {given!r} were computed elsewhere; a "
                                      "blind run reranks a pool named <first stage>@<depth>, whose first stage "
                                      "it computes blind here")
        if named is None:
            pool = pooling.read_pool(given, bench)
        else:
            text, depth = named
            first = parse_spec_text(text, "pool first stage")
            if first.name in pooling.REFERENCE_RETRIEVERS:
                raise pooling.PoolError(f"pool {given!r}: a pool's first stage is a retriever")
            check_protocols([first], [self.resolve(first).cls])
            key = self.key(first, bench, 0, depth)
            stored = self.store.get(key)
            # a blind run's pool comes from a first stage computed blind (a stored one that was not is
            # computed again): the candidates' order reaches the sandbox
            if stored is None or self.s.force or self.upgrades(key):
                self.log(f"pool {given} on {bench.name}: running its first stage {first.display} to depth {depth}")
                rec = self.run_one(first, bench, 0, self._benchmarks.get(bench.name, (bench, 0.0))[1], k=depth)
                self.store.save(rec, replace=self.s.force or self.s.blind)
                self.save_content(bench, rec.rankings)
                rankings: Mapping[str, Sequence[tuple[str, float]]] = rec.rankings
            else:
                rankings = self.store.rankings(stored.id)
            pool = pooling.build_pool(bench, rankings, first, depth, given)
        pinned = ((self.s.pinned_pools or {}).get(pool.name) or {}).get(bench.name)
        self.pool_agreements[(pool.name, bench.name)] = (pool.hash, None)
        if pinned and pinned != pool.hash:
            ref = self._pinned_pool(pinned)
            agree = pooling.agreement(pool, ref) if ref is not None and ref.name == pool.name else None
            self.pool_agreements[(pool.name, bench.name)] = (pool.hash, agree)
            if agree is not None and agree.same_pool:
                # float rounding of this CPU: the reference candidates are the pool its rerankers rerank
                self.log(f"pool {pool.name} on {bench.name} is {pool.hash} here, with {agree.describe()}: its "
                         f"rerankers rerank the pinned reference pool {pinned}")
                pool = dataclasses.replace(ref, manifest={})
            else:
                self.log(f"warning: pool {pool.name} on {bench.name} is {pool.hash} here; the reference plan pins "
                         f"{pinned}" + (f" ({agree.describe()})" if agree is not None else
                                        " (not among the shipped pools here)")
                         + ": its rerankers are not on the reference pool (another first-stage build or CPU)")
        name = pool.name  # a file's manifest names the pool; its figures are computed here, never read
        pool.manifest = pooling.describe(pool, bench, measures_for(bench))
        assert pool.manifest["name"] == name
        self.store.save_pool(pool.manifest, pool.rankings)
        self._pools[pool.hash] = pool
        self.save_pool_references(pool, bench)
        return pool

    def _pinned_pool(self, pool_hash: str) -> pooling.Pool | None:
        """A pinned pool by hash: from the store (an imported bundle's), else from the shipped pools file."""
        got = pooling.pool_from_store(self.store, pool_hash)
        if got is not None:
            return got
        if self._shipped_pools is None:
            from ..core.registry import reference_files

            bundle = reference_files().get("bundle")
            path = pooling.pools_file(bundle) if bundle is not None else None
            try:
                self._shipped_pools = {p.hash: p for p in pooling.read_pool_lines(path)} if path and path.exists() else {}
            except pooling.PoolError as e:
                self.log(f"warning: {e}")
                self._shipped_pools = {}
        return self._shipped_pools.get(pool_hash)

    def pool_of(self, pool_hash: str, bench: Benchmark) -> pooling.Pool:
        """A pool of this run by hash (or from the store, where a worker finds the pools its head made)."""
        if pool_hash not in self._pools:
            got = pooling.pool_from_store(self.store, pool_hash)
            if got is None:
                raise pooling.PoolError(f"pool {pool_hash} is not in the results store {self.store.path}")
            self._pools[pool_hash] = got
        pool = self._pools[pool_hash]
        if pool.benchmark_version != bench.version:
            raise pooling.PoolError(f"pool {pool.name} ({pool_hash}) is a pool of {pool.benchmark} version "
                                    f"{pool.benchmark_version}, not of {bench.name} version {bench.version}")
        return pool

    def save_pool_references(self, pool: pooling.Pool, bench: Benchmark) -> None:
        """The pool's three reference rows (order, shuffled, oracle; seed 0) into the store, each
        computed from the pool and the benchmark unless stored."""
        for kind in pooling.REFERENCES:
            spec = pooling.reference_record_spec(pool, kind)
            key = result_key(spec.hash, bench.version, 0, pool.depth, HARNESS_VERSION)
            if self.store.has(key) and not self.s.force:
                continue
            ledger = Ledger()
            run = pooling.reference_run(pool, bench, kind, seed=0)
            rec = self.record(key, spec, bench, 0, run, ledger, k=pool.depth, pool=pool,
                              extra={pooling.REFERENCE_KEY: kind})
            self.store.save(rec, replace=self.s.force)
            self.save_content(bench, rec.rankings)

    # -- the run loop --

    def run(self, specs: Sequence[RetrieverSpec], benchmarks: Sequence[str], seeds: Sequence[int]) -> list[Outcome]:
        """Every spec on every benchmark with every seed, in that order: a stored result is skipped
        (unless ``force``), every other is computed (:meth:`execute`) and settled as it comes
        (:meth:`settle`). An LLM budget that runs out stops the run (``budget_stop`` says why)."""
        check_protocols(specs, [self.resolve(s).cls for s in specs], rerankers=bool(self.s.pool))
        self.settled = settled = Settled({})

        if self.s.blind:
            blinding.find_sandbox()  # no sandbox: one line before any work
            for s in specs:
                blinding.check_blind(s.display, self.uses_llm(s))

        def to_compute() -> Iterator[Job]:
            for job in self.plan(specs, benchmarks, seeds):
                if self.store.has(job.key) and not self.s.force and not self.upgrades(job.key):
                    settled.outcomes[job.index] = self.skip(job)
                else:
                    yield job

        for job, computed in self.execute(to_compute()):
            settled.outcomes[job.index] = self.settle(job, computed)
        if settled.stop is not None:
            self.log(f"stopped: {settled.stop}. {settled.done} result(s) of this run are stored; every LLM response "
                     "received is cached, so a rerun with a larger budget resumes without paying for them again")
        return [settled.outcomes[i] for i in sorted(settled.outcomes)]

    def plan(self, specs: Sequence[RetrieverSpec], benchmarks: Sequence[str], seeds: Sequence[int]) -> Iterator[Job]:
        """The run's jobs in order, benchmark by benchmark (each loaded, and its measures checked,
        when its first job is asked for)."""
        index = itertools.count()
        rounds = {seed: n for n, seed in enumerate(dict.fromkeys(seeds))}
        for bname in benchmarks:
            bench, load_s = self.load_benchmark(bname)
            measures_for(bench, self.s.extra_measures)  # a measure it cannot support stops the run here
            pool = self.pool_for(bench, self.s.pool) if self.s.pool else None
            for spec in specs:
                if pool is not None:
                    spec = spec.on_pool(pool.hash, pool.name)
                for seed in seeds:
                    yield Job(next(index), spec, bench, seed, rounds[seed], self.key(spec, bench, seed), bname, load_s)

    def execute(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Computed]]:
        """Compute ``jobs``, each with what it gave: here one after the other in this process,
        until the LLM budget stops the run (an error stops it at once)."""
        for job in jobs:
            if self.settled.stop is not None:
                return
            computed: Computed
            try:
                computed = self.run_one(job.spec, job.bench, job.seed, job.load_s)
            except BudgetExceeded as e:
                computed = e
            yield job, computed

    def hidden_paths(self) -> list[Path]:
        """What a blind child must not see wherever it lies: the data directory, the results store,
        and every benchmark folder this run named by its path (the home is hidden by the sandbox)."""
        out = [self.data_dir, Path(self.store.path)]
        for name in self._benchmarks:
            base = split_slice(name)[0]
            for cand in (base, base.rsplit(":", 1)[0]):
                if looks_like_path(cand) and Path(cand).expanduser().exists():
                    out.append(Path(cand).expanduser())
        return out

    def upgrades(self, key: str) -> bool:
        """Whether a blind run computes ``key`` again although it is stored: the stored result was
        not computed blind (a blind result replaces it)."""
        if not self.s.blind:
            return False
        stored = self.store.get(key)
        return stored is not None and not isinstance((stored.extra or {}).get(BLIND_KEY), Mapping)

    def skip(self, job: Job) -> Outcome:
        """``job``'s result is stored already: said so, and its benchmark's content saved if missing."""
        self.log(f"skip {job.where}: result exists [{job.key}] — use --force to recompute")
        stored = self.store.get(job.key)
        if stored is not None and not self.store.has_benchmark_content(job.bench.version):
            self.save_content(job.bench, self.store.rankings(stored.id))
        return job.outcome("skipped", stored)

    def settle(self, job: Job, computed: Computed) -> Outcome:
        """Store what ``job`` computed, with the benchmark content for the drill-down; a result
        another run stored meanwhile is kept and said so; a job the LLM budget stopped stops the run."""
        if isinstance(computed, BudgetExceeded):
            self.settled.stop = self.budget_stop = self.settled.stop or str(computed)
            return job.outcome("budget")
        replace = self.s.force or (self.s.blind and isinstance(computed.extra.get(BLIND_KEY), Mapping))
        if not self.store.save(computed, replace=replace):  # another run stored it meanwhile
            self.log(f"skip {job.where}: stored meanwhile by another run [{job.key}]")
            return job.outcome("skipped", self.store.get(job.key))
        self.save_content(job.bench, computed.rankings)
        return job.outcome("done", computed)

    def save_content(self, bench: Benchmark, rankings: Mapping[str, Sequence[tuple[str, float]]]) -> None:
        """:func:`save_content` into this run's store."""
        save_content(self.store, bench, rankings)

    @staticmethod
    def pair_scores(retriever: Any, bench: Benchmark, queries: Sequence[Query], run: Run,
                    ctx: RunContext) -> dict[str, dict[str, float]]:
        """The two documents of each pair scored against each of its queries, whatever the ranking
        depth (NevIR's protocol): by the retriever's ``score`` member when it has one, else from a
        ranking of the whole corpus for the queries whose pair documents are not all in ``run``."""
        wanted = pair_documents(bench.pairs or ())
        asked = [q for q in queries if q.id in wanted]
        if isinstance(retriever, Scorer):
            return retriever.score(asked, {q.id: sorted(wanted[q.id]) for q in asked}, ctx)
        short = [q for q in asked if not wanted[q.id] <= {d for d, _ in run.get(q.id, ())}]
        full = as_run(retriever.search(short, len(bench.corpus), ctx), f"{type(retriever).__name__}.search") \
            if short else Run()
        return {q.id: {d: s for d, s in full.get(q.id, ()) if d in wanted[q.id]} for q in short}

    def evaluate(self, run: Run, bench: Benchmark, seed: int, ledger: Ledger,
                 pair_scores: Mapping[str, Mapping[str, float]] | None = None) -> tuple[Any, dict[str, MeasureValue]]:
        """``run`` scored on ``bench`` with this run's measures, timed as the "evaluate" phase: the
        evaluation and each measure's mean with its bootstrap interval."""
        measures = measures_for(bench, self.s.extra_measures)
        queries = bench.eval_queries
        with ledger.phase("evaluate", items=len(queries)):
            ev = evaluate(run, bench.judgments, measures, relevance_threshold=bench.relevance_threshold,
                          pairs=bench.pairs, query_ids=[q.id for q in queries], pair_scores=pair_scores)
            cis = (bootstrap_cis({m: list(ev.per_query.get(m, {}).values()) for m in measures},
                                 n_resamples=self.s.bootstrap, seed=seed) if self.s.bootstrap > 0 else {})
            mvals = {m: MeasureValue(ev.means[m], ev.counts[m], *cis.get(m, (None, None))) for m in measures}
        return ev, mvals

    def record(self, key: str, spec: RetrieverSpec, bench: Benchmark, seed: int, run: Run, ledger: Ledger, *,
               k: int, pool: "pooling.Pool | None" = None, extra: Mapping[str, Any] | None = None) -> ResultRecord:
        """A result the harness computes without a retriever (a pool's reference rows): ``run``
        scored on ``bench``, with the phases of ``ledger``."""
        ev, mvals = self.evaluate(run, bench, seed, ledger)
        return ResultRecord(
            key=key, retriever=spec.name, label=spec.display, spec_hash=spec.hash, spec=spec.as_dict(),
            benchmark=bench.name, benchmark_version=bench.version, seed=seed, k=k, harness_version=HARNESS_VERSION,
            n_queries=ev.n_queries, n_missing=ev.n_missing, measures=mvals, per_query=ev.per_query,
            **ledger.to_dict(), rankings=dict(run), environment=self.environment, provenance={},
            extra={**({pooling.POOL_KEY: pool.ref()} if pool is not None else {}), **(extra or {})})

    def run_one(self, spec: RetrieverSpec, bench: Benchmark, seed: int, load_s: float = 0.0,
                analyse: bool = True, k: int | None = None) -> ResultRecord:
        seed_everything(seed)
        k = self.s.k if k is None else k
        key = self.key(spec, bench, seed, k)
        pool = self.pool_of(spec.pool, bench) if spec.pool else None
        # the tag goes into the journal with each billed LLM call, and its id into the stored result
        tag = RunTag.new(result_key=key, retriever=spec.name, label=spec.display, spec_hash=spec.hash,
                         benchmark=bench.name, seed=seed)
        ledger = Ledger(run=tag)
        ledger.phases["load"] = PhaseTime("load", wall_s=load_s)
        self.encoders.ledger = ledger  # model loading is this result's "model" phase, not its index time
        resolved = self.resolve(spec)
        uses_llm = resolved.uses_llm
        queries = bench.eval_queries
        measures = measures_for(bench, self.s.extra_measures)
        # on a pool, PairAcc reads the ranking only: scoring a pair document the pool left out would
        # read beyond the candidates
        wants_pairs = bool(bench.pairs) and "PairAcc" in measures and pool is None
        train: Benchmark | None = None  # a blind run's train split, handed over before the child starts
        if self.s.blind:
            blinding.check_blind(spec.display, uses_llm)
            trainable = issubclass(resolved.cls, Trainable)
            train = self.train_benchmark(bench) if trainable else None
            compute: Any = blinding.Sandboxed(
                spec=spec, cls=resolved.cls, bench=bench, queries=queries, seed=seed, k=k, device=self.device,
                home=self.s.home, ledger=ledger, progress=self.progress, log=self.log,
                candidates=None if pool is None else {q.id: pool.rankings.get(q.id, ()) for q in queries},
                train=train, validation=self.validation_benchmark(bench) if trainable else None,
                cache=self.s.blind_cache, hide=self.hidden_paths())
        else:
            ctx = RunContext(seed=seed, device=self.device, ledger=ledger, encoders=self.encoders,
                             llm=self.llm if uses_llm else None, progress=self.progress,
                             cache_dir=self.s.home / "cache", benchmark_name=bench.name, task=bench.task,
                             data_dir=self.data_dir, online=self.s.online, log=self.log)
            compute = Here(self, instantiate(spec, resolved.cls), spec, bench, queries, ctx, k, pool)
        with compute:
            training = compute.start()  # prepare, training_data (checked), fit
            if isinstance(compute, blinding.Sandboxed) and train is not None:
                training = [*(training or []), {"benchmark": train.name, "benchmark_version": train.version,
                                                "queries": len(train.eval_queries)}]
            self.log(f"run {spec.display} on {bench.name} (seed {seed}): {len(bench.corpus):,} documents, "
                     f"{len(queries):,} queries" + (f", reranking pool {pool.name} ({pool.hash})" if pool else ""))
            what = "rerank" if pool is not None else "search"
            run = as_run(compute.retrieve(), f"retriever {spec.display!r}: {what}")
            if pool is not None:
                pooling.check_reordering(run, pool, f"retriever {spec.display!r}: rerank")
            run.validate(bench.corpus)
            # a ranking deeper than k is cut at k: what is stored, exported and scored is the top k
            run = run.truncate(k)
            empty = sum(1 for q in queries if not run.get(q.id))
            if empty > EMPTY_RANKINGS_TOLERATED * len(queries):
                self.log(f"warning: {spec.display} returned an empty ranking for {empty:,} of {len(queries):,} "
                         f"queries on {bench.name}: those queries retrieve nothing, which scores 0 on relevance "
                         "measures and looks perfect on violation measures")
            pair_scores = None
            if wants_pairs:
                with ledger.phase("search"):
                    pair_scores = compute.pair_scores(run)
            extra: dict[str, Any] = compute.extra(analyse)
        ev, mvals = self.evaluate(run, bench, seed, ledger, pair_scores)
        return ResultRecord(
            key=key, retriever=spec.name, label=spec.display, spec_hash=spec.hash,
            spec=spec.as_dict(), benchmark=bench.name,
            benchmark_version=bench.version, seed=seed, k=k, harness_version=HARNESS_VERSION,
            n_queries=ev.n_queries, n_missing=ev.n_missing, measures=mvals, per_query=ev.per_query,
            **ledger.to_dict(),
            rankings=dict(run),
            environment=self.environment, provenance=provenance(resolved.cls),
            extra={"encoder_stats": extra.pop("encoder_stats", {}), "counters": dict(ledger.counters),
                   REUSED_KEY: ledger.reused,
                   **({"empty_rankings": empty} if empty else {}),
                   **({"llm": self.llm.describe(), RESULT_RUN_KEY: tag.run_id} if uses_llm else {}),
                   **({} if training is None else {"training": training[0] if len(training) == 1 else training}),
                   **({pooling.POOL_KEY: pool.ref()} if pool is not None else {}),
                   **extra},
        )
