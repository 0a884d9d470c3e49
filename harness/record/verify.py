"""``beyondsim verify``: recompute a submitted result's measures from its rankings, here.

A results file (``beyondsim export``) carries, per result, its measures, its per-query values and
its rankings. :func:`verify_items` checks each result line against the benchmark as it loads here
(``--data-dir``) and recomputes every measure its rankings determine with
:func:`harness.measures.evaluate`, the function the runner scored it with. A result verifies when

* its benchmark loads here and has the version the result was computed on;
* it carries rankings (a result without them can only be imported as *reported*);
* every judged query of the benchmark is in its rankings or its per-query values, and its
  rankings name no query id that is not a judged query here;
* no ranking is longer than the result's ``k``, repeats a document or has a score that rises
  down the ranking, and every ranked document id is in the benchmark's corpus;
* every stored measure the rankings determine matches what they give here — the mean, the count
  it is averaged over, every per-query value and, when one is stored, the 95% bootstrap interval
  (the runner's 1000 resamples, seeded with the result's seed) — within :data:`TOLERANCE`
  (relative or absolute); ``n_queries`` and ``n_missing`` match too;
* a reranker's result (its spec names a candidate pool, docs/design/pools.md) ranks only documents
  of its pool, which must be here (the file's pools, the store's, or ``verify --pool FILE``) and
  be a pool of the same benchmark version;
* a trained retriever (its registered metadata says ``trains_on``, or the result records
  ``extra["training"]``) records in ``extra["training"]`` the splits it learnt from (at least one),
  none of them the scored split, and none that loads here sharing a query id with it; benchmark
  names in it are matched case-insensitively (``NevIR:train`` is nevir's train split);

A measure the rankings cannot determine is listed as *not recomputable*, which is no failure: a
cutoff deeper than the longest submitted ranking when the rankings are shorter than the run's
``k`` (the reference bundle ships top-10 rankings of top-100 runs, so ``R@100`` cannot be
recomputed from it), and ``PairAcc``, whose pair documents the runner scores directly, when a
pair document is missing from its query's ranking. A *headline* figure (what the benchmark's
overview table ranks by, :func:`headline_measures`) that the rankings are too shallow for is a
failure: its figure would be a claim nobody checked. A stored measure that is unknown here or that
the benchmark cannot support is a failure. A benchmark named by a folder path in the file is never
read, probed or printed (:class:`harness.store.exchange.LocalBenchmarks`).

A result that verifies is marked ``verified_here`` with ``extra["origin"]["verified"]``
(:mod:`harness.store.trust`), which :func:`harness.store.exchange.import_items` keeps; a
recomputed measure whose per-query values the line lacks gets them from the recomputation, so a
verified row always carries the per-query values the board's paired tests read. Every text of
the file a problem names (ids, labels, benchmark names) is printed through
:func:`harness.store.exchange.plain`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..store.exchange import (CUT_KEY, ImportedContent, ImportedLine, LocalBenchmarks, base_name, local_content,
                              plain, shown_benchmark)
from ..measures import evaluate, pair_documents, parse_measure
from ..measures.base import ALL_QUERIES
from ..store.results import BenchmarkInfo, MeasureValue, ResultRecord
from ..store.trust import ORIGIN_KEY
from ..core.types import Benchmark, Run

TOLERANCE = 1e-9  # relative or absolute, for every recomputed figure
SHOWN = 5  # ids shown in one problem line; the rest are counted
TRAINING_KEY = "training"


@dataclass
class LineReport:
    """What :func:`verify_items` found for one result line."""

    item: ImportedLine
    recomputed: list[str] = field(default_factory=list)  # measures recomputed from the rankings (and matched, if ok)
    not_recomputable: dict[str, str] = field(default_factory=dict)  # measure -> why the rankings cannot give it
    problems: list[str] = field(default_factory=list)  # one full line each: "file:line: result ...: problem"

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def what(self) -> str:
        """``file:line: result <key> (<label> on <benchmark>, seed N)``: how its problems start."""
        rec = self.item.record
        return (f"{self.item.where}: result {plain(rec.key)} ({plain(rec.label)} on {shown_benchmark(rec.benchmark)}, "
                f"seed {rec.seed})")


@dataclass
class VerifyReport:
    """Every result line's report (file order), the drill-down content of each verified benchmark
    version built from the copy loaded here, and the descriptions of those copies."""

    lines: list[LineReport]
    content: list[ImportedContent] = field(default_factory=list)
    local_infos: dict[tuple[str, str], BenchmarkInfo] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether there is at least one result and every result verified."""
        return bool(self.lines) and all(r.ok for r in self.lines)

    @property
    def problems(self) -> list[str]:
        return [p for r in self.lines for p in r.problems]

    @property
    def verified(self) -> list[ImportedLine]:
        return [r.item for r in self.lines if r.ok]


def _ids(ids: Sequence[str]) -> str:
    """``a, b, c`` — the first :data:`SHOWN` of ``ids``, and how many more."""
    shown = ", ".join(plain(x) for x in ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def _num(x: float | None) -> str:
    return "null" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.10g}"


def _same(stored: float | None, here: float | None) -> bool:
    """Equal within :data:`TOLERANCE`; ``None`` (undefined) matches NaN."""
    undefined = [v is None or (isinstance(v, float) and math.isnan(v)) for v in (stored, here)]
    if any(undefined):
        return all(undefined)
    return math.isclose(float(stored), float(here), rel_tol=TOLERANCE, abs_tol=TOLERANCE)  # type: ignore[arg-type]


def _differing(stored: Mapping[str, float | None], here: Mapping[str, float | None]) -> list[str]:
    """The queries of ``here`` that ``stored`` holds with another value: :func:`_same` on every
    shared query at once (a result carries a value per query and measure: thousands a result)."""
    qs = list(here) if stored.keys() >= here.keys() else [q for q in here if q in stored]
    if not qs:
        return []
    a = np.array(list(map(stored.__getitem__, qs)), dtype=np.float64)  # None becomes NaN
    b = np.array(list(map(here.__getitem__, qs)), dtype=np.float64)
    ua, ub = np.isnan(a), np.isnan(b)
    with np.errstate(invalid="ignore"):  # an infinite value is close only to itself (a == b), as in math.isclose
        near = np.abs(a - b) <= np.maximum(TOLERANCE * np.maximum(np.abs(a), np.abs(b)), TOLERANCE)
    close = (a == b) | (np.isfinite(a) & np.isfinite(b) & near)
    same = np.where(ua | ub, ua & ub, close)
    return [qs[i] for i in np.flatnonzero(~same).tolist()]


def _structure(rec: ResultRecord, bench: Benchmark) -> list[str]:
    """Problems of the rankings as data: queries, depth, duplicates, order, document ids."""
    problems: list[str] = []
    judged = [q.id for q in bench.eval_queries]
    judged_set = set(judged)
    present = set(rec.rankings)
    for m, col in rec.per_query.items():
        try:
            every_query = parse_measure(m).averaged_over == ALL_QUERIES
        except ValueError:
            continue
        if every_query:
            present |= set(col)
    missing = [q for q in judged if q not in present]
    if missing:
        problems.append(f"{len(missing)} of the {len(judged)} judged queries of {bench.name} are neither in its "
                        f"rankings nor in its per-query values: {_ids(missing)}")
    stray = [q for q in rec.rankings if q not in judged_set]
    if stray:
        problems.append(f"rankings of {len(stray)} query id(s) that are not judged queries of {bench.name} here: "
                        f"{_ids(stray)}")
    too_long = [f"{q} ({len(r)})" for q, r in rec.rankings.items() if len(r) > rec.k]
    if too_long:
        problems.append(f"depth not honoured: {len(too_long)} ranking(s) longer than k = {rec.k}: {_ids(too_long)}")
    repeated, rising, unknown = [], [], []
    for q, ranking in rec.rankings.items():
        docs = [d for d, _ in ranking]
        if len(set(docs)) != len(docs):
            repeated.append(q)
        scores = [float(s) for _, s in ranking]
        if any(b > a for a, b in zip(scores, scores[1:])):
            rising.append(q)
        unknown += [f"{d} (query {q})" for d in dict.fromkeys(docs) if d not in bench.corpus]
    if repeated:
        problems.append(f"{len(repeated)} ranking(s) repeat a document id: {_ids(repeated)}")
    if rising:
        problems.append(f"{len(rising)} ranking(s) have a score that rises down the ranking: {_ids(rising)}")
    if unknown:
        problems.append(f"{len(unknown)} ranked document id(s) are not in the corpus of {bench.name} here: "
                        f"{_ids(unknown)}")
    return problems


def headline_measures(bench: Benchmark) -> list[str]:
    """The figures a benchmark's overview table ranks by: the headline of the first suite that
    lists it with one, else of the suite named after its task, else its first default measure."""
    from ..core.registry import suites

    try:
        table = suites()
    except LookupError:
        table = {}
    base = base_name(bench.name)
    listed = [e for e in table.values() if (e or {}).get("headline") and base in (e or {}).get("benchmarks", ())]
    entry = listed[0] if listed else (table.get(bench.task) or {})
    return [str(m) for m in entry.get("headline") or bench.default_measures[:1]]


def _plan(rec: ResultRecord, bench: Benchmark) -> tuple[list[str], dict[str, str], list[str]]:
    """``(measures to recompute, {measure: why not recomputable}, problems)``. A headline figure
    (:func:`headline_measures`) whose cutoff the rankings are too shallow for is a problem: a result
    whose rankings cannot support its headline figures is not verified."""
    longest = max((len(r) for r in rec.rankings.values()), default=0)
    # rankings as deep as the run (its k, or the whole corpus) determine every cutoff, and so do
    # rankings all shorter than the depth an export says it cut them to (a claim that can only make
    # more figures recomputed, never fewer)
    cut = rec.extra.get(CUT_KEY)
    complete = longest >= min(rec.k, len(bench.corpus)) or (type(cut) is int and (longest < cut or cut >= rec.k))
    has_viol, has_pairs = any(bench.judgments.violating.values()), bool(bench.pairs)
    headline = set(headline_measures(bench))
    todo: list[str] = []
    skipped: dict[str, str] = {}
    problems: list[str] = []
    for name in rec.measures:
        try:
            m = parse_measure(name)
        except ValueError as e:
            problems.append(f"measure {plain(name)} cannot be checked here: {plain(e)}")
            continue
        why = m.unsupported(has_viol, has_pairs)
        if why:
            problems.append(f"measure {name} cannot be computed on {bench.name}: {why}")
        elif m.family == "PairAcc":
            wanted = pair_documents(bench.pairs or ())
            short = [q for q, docs in wanted.items() if not docs <= {d for d, _ in rec.rankings.get(q, ())}]
            if short:
                skipped[name] = (f"the pair documents are scored directly, and {len(short)} of the {len(wanted)} "
                                 "pair queries lack one in their ranking")
            else:
                todo.append(name)
        elif m.k is not None and m.k > longest and not complete:
            why = f"cutoff {m.k} is deeper than the longest submitted ranking ({longest}) of a run with k = {rec.k}"
            if name in headline:
                problems.append(f"headline measure {name} cannot be recomputed: {why}; a result whose rankings "
                                "cannot support its headline figures can only be imported as reported")
            else:
                skipped[name] = why
        else:
            todo.append(name)
    return todo, skipped, problems


def _compare(rec: ResultRecord, bench: Benchmark, todo: list[str],
             recomputed: dict[str, dict[str, float]] | None = None) -> list[str]:
    """Recompute ``todo`` from the rankings; the problems where the stored figures differ.
    ``recomputed`` (when given) receives the per-query values of every measure of ``todo``."""
    from ..measures.stats import BOOTSTRAP_RESAMPLES, bootstrap_cis

    qids = [q.id for q in bench.eval_queries]
    ev = evaluate(Run({q: list(r) for q, r in rec.rankings.items()}), bench.judgments, todo,
                  relevance_threshold=bench.relevance_threshold, pairs=bench.pairs, query_ids=qids)
    problems: list[str] = []
    if rec.n_queries != ev.n_queries:
        problems.append(f"n_queries is {rec.n_queries} in the file but {bench.name} has {ev.n_queries} judged "
                        "queries here")
    if rec.n_missing != ev.n_missing:
        problems.append(f"n_missing is {rec.n_missing} in the file but {ev.n_missing} judged queries have no "
                        "ranking")
    resamples = BOOTSTRAP_RESAMPLES
    # every interval of the result from one draw of resamples per length: the numbers of one
    # bootstrap_ci per measure with the result's seed (bootstrap_cis), at a fraction of the cost
    cis = bootstrap_cis({name: list(ev.per_query.get(name, {}).values()) for name in todo
                         if rec.measures[name].ci_low is not None or rec.measures[name].ci_high is not None},
                        n_resamples=resamples, seed=rec.seed)
    for name in todo:
        stored: MeasureValue = rec.measures[name]
        mean, n, col = ev.means[name], ev.counts[name], ev.per_query.get(name, {})
        if recomputed is not None:
            recomputed[name] = dict(col)
        if not _same(stored.mean, mean):
            problems.append(f"measure {name}: mean {_num(stored.mean)} in the file, {_num(mean)} recomputed from "
                            "its rankings")
        if stored.n != n:
            problems.append(f"measure {name}: averaged over {stored.n} in the file, over {n} recomputed from its "
                            "rankings")
        if name in rec.per_query:
            got = rec.per_query[name]
            differ = [f"{q}: {_num(got[q])} in the file, {_num(col[q])} recomputed" for q in _differing(got, col)]
            absent = [q for q in col if q not in got]
            extra = [q for q in got if q not in col]
            if differ:
                problems.append(f"measure {name}: {len(differ)} per-query value(s) differ from its rankings: "
                                f"{_ids(differ)}")
            if absent:
                problems.append(f"measure {name}: no per-query value for {len(absent)} id(s) the rankings score: "
                                f"{_ids(absent)}")
            if extra:
                problems.append(f"measure {name}: per-query values for {len(extra)} id(s) it is not computed over "
                                f"here: {_ids(extra)}")
        if stored.ci_low is not None or stored.ci_high is not None:
            lo, hi = cis[name]
            if not (_same(stored.ci_low, lo) and _same(stored.ci_high, hi)):
                problems.append(f"measure {name}: 95% interval [{_num(stored.ci_low)}, {_num(stored.ci_high)}] in "
                                f"the file, [{_num(lo)}, {_num(hi)}] recomputed from its rankings ({resamples} "
                                f"bootstrap resamples, seed {rec.seed})")
    return problems


def _training(rec: ResultRecord, bench: Benchmark, benches: LocalBenchmarks) -> list[str]:
    """Problems with a trained retriever's declared training data (see the module docstring)."""
    from ..core.registry import RegistryError, get_retriever_class, retriever_info

    try:
        trains_on = retriever_info(get_retriever_class(rec.retriever)).trains_on
    except (RegistryError, ImportError):  # not installed here: only what the result records is checked
        trains_on = ""
    declared = rec.extra.get(TRAINING_KEY)
    if declared is None:
        if not trains_on:
            return []
        return [f"retriever {plain(rec.retriever)} trains a model ({trains_on}) but the result records no "
                f"extra.{TRAINING_KEY}: cannot check that it was not trained on {bench.name}"]
    entries = [declared] if isinstance(declared, Mapping) else declared
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        return [f"extra.{TRAINING_KEY} must be an object or a list of objects with benchmark and "
                "benchmark_version"]
    if not entries:
        return [f"extra.{TRAINING_KEY} is an empty list: a trained retriever's result must name the split(s) it "
                f"learnt from, so that they can be checked to be disjoint from {bench.name}"]
    problems: list[str] = []
    scored = {q.id for q in bench.eval_queries}
    scored_base = base_name(rec.benchmark).casefold()
    for i, e in enumerate(entries):
        where = f"extra.{TRAINING_KEY}" + (f"[{i}]" if isinstance(declared, list) else "")
        name, version = e.get("benchmark"), e.get("benchmark_version")
        if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
            problems.append(f"{where}: benchmark and benchmark_version must be non-empty strings")
            continue
        shown = shown_benchmark(name)
        if version == rec.benchmark_version or base_name(name).casefold() == scored_base:
            problems.append(f"{where}: trained on {shown} version {plain(version)}, the split it is scored on "
                            f"({shown_benchmark(rec.benchmark)} version {plain(rec.benchmark_version)})")
            continue
        train = benches.get(name)
        if isinstance(train, str) and name.casefold() != name:  # benchmark names are lower case: "NevIR:train"
            train = benches.get(name.casefold())
        if isinstance(train, str):  # not loadable here: its name and version were checked above
            continue
        if train.version != version:
            problems.append(f"{where}: trained on {shown} version {plain(version)}, but {train.name} here is version "
                            f"{train.version}: cannot check that it is disjoint from {bench.name}")
            continue
        shared = sorted({q.id for q in train.queries} & scored)
        if shared:
            problems.append(f"{where}: the training split {shown} shares {len(shared)} query id(s) with "
                            f"{bench.name}: {_ids(shared)}")
    return problems


def _pool(rec: ResultRecord, pools: Callable[[str], Any] | None) -> list[str]:
    """What keeps a reranker's rankings from being a reordering of its pool (none for a first stage)."""
    from ..run.pools import outside

    wanted = rec.spec.get("pool") if isinstance(rec.spec, Mapping) else None
    if not wanted:
        return []
    pool = pools(str(wanted)) if pools is not None else None
    if pool is None:
        return [f"it reranks pool {plain(wanted)}, which is not here (`beyondsim pool export` writes it; `verify --pool FILE` "
                "reads it): cannot check that its rankings reorder that pool"]
    if pool.benchmark_version != rec.benchmark_version:
        return [f"its pool {plain(wanted)} is a pool of {plain(pool.benchmark)} version {plain(pool.benchmark_version)}, "
                f"not of version {plain(rec.benchmark_version)}"]
    bad = outside(rec.rankings, pool)
    if bad:
        q, d, rank, n = bad
        return [f"document {d!r} at rank {rank} of query {q!r} is not among its candidates in pool {plain(pool.name)} "
                f"({plain(wanted)}): a reranker reorders its pool ({n} such document(s) in all)"]
    return []


def verify_items(items: Iterable[ImportedLine | ImportedContent], data_dir: Path, *,
                 log: Callable[[str], None] = lambda m: None, benches: LocalBenchmarks | None = None,
                 pools: Callable[[str], Any] | None = None) -> VerifyReport:
    """Verify every result line of ``items`` (content lines are left out: the drill-down content
    of a verified benchmark version is rebuilt from the copy loaded here). Each result that
    verifies gets ``verified_here`` and ``extra["origin"]["verified"]``. ``pools``: a pool by its
    hash (``None`` when it is not here), for the results of rerankers."""

    benches = benches or LocalBenchmarks(Path(data_dir), log)
    reports: list[LineReport] = []
    verified: dict[tuple[str, str], tuple[Benchmark, list[Mapping[str, Sequence[Any]]]]] = {}
    for it in items:
        if not isinstance(it, ImportedLine):
            continue
        rec = it.record
        report = LineReport(it)
        reports.append(report)
        found: list[str] = []
        recomputed: dict[str, dict[str, float]] = {}
        bench = benches.get(rec.benchmark)
        if isinstance(bench, str):
            found.append(f"benchmark {shown_benchmark(rec.benchmark)} cannot be loaded here ({bench}), so nothing can "
                         "be recomputed")
        elif bench.version != rec.benchmark_version:
            found.append(f"computed on version {plain(rec.benchmark_version)} of {shown_benchmark(rec.benchmark)}, but "
                         f"the copy here is version {bench.version}")
        elif not rec.rankings:
            found.append("no rankings: can only be imported as reported (beyondsim import)")
        else:
            found += _structure(rec, bench)
            todo, report.not_recomputable, unusable = _plan(rec, bench)
            found += unusable
            found += _compare(rec, bench, todo, recomputed)
            found += _training(rec, bench, benches)
            found += _pool(rec, pools)
            report.recomputed = todo
        report.problems = [f"{report.what}: {p}" for p in found]
        if found:
            continue
        it.verified_here = True
        # a recomputed measure the line gave no per-query values for gets those it was checked with
        rec.per_query = {**rec.per_query, **{m: col for m, col in recomputed.items() if m not in rec.per_query}}
        rec.extra = {**rec.extra, ORIGIN_KEY: {"kind": "import", "verified": {
            "benchmark_version": bench.version, "measures": list(report.recomputed),
            "not_recomputable": list(report.not_recomputable)}}}
        verified.setdefault((bench.name, bench.version), (bench, []))[1].append(rec.rankings)
    content = [local_content(b, rankings) for b, rankings in verified.values()]
    infos = {(b.name, b.version): BenchmarkInfo.of(b) for b, _ in verified.values()}
    return VerifyReport(reports, content, infos)
