"""The second-stage track (docs/design/pools.md): rerankers compared on frozen candidate pools.

A result on a pool (its spec names the pool's content hash: a reranker, or a run file scored with
``evaluate --pool``) and a pool's three reference rows are on no ordinary table
(:func:`reports.rows.on_pool`); they are compared here, each only with rankings of the same
candidates:

* :class:`StageTable` per benchmark and pool: the rerankers' rows, grouped as every row of the board
  is (one per label, spec hash, benchmark version and slot, seeds of one slot averaged, each with
  its trust; :func:`reports.rows.slot_of`, :func:`reports.rows.shown_names`), ranked
  by the suite's first headline measure with rank intervals
  (:func:`reports.ranking.suite_comparison` over this one benchmark). The pool shuffled plays the
  chance row's part: a reranker whose relevance measure (the suite's ``relevance``) is not above it
  (:func:`reports.ranking.below_chance`) is listed apart, "not above the shuffled pool". The pool's
  reference rows — the pool in its own order (the first stage), shuffled (seeded: a method that
  finds the topic and is blind to the constraint) and in its oracle order (the ceiling) — are
  shown beside them, never ranked and never counted in a rank interval. A reference row is the
  pool's own only when computed here or read from the shipped reference bundle and verified
  (:func:`reports.rows.may_be_chance`; computed here first); one read from any other file is left
  out (a note says so): a crafted shuffled row never moves the level a reranker must beat.
* per suite (:class:`StageSuite`) and pool name, the same over the suite's benchmarks that have a
  pool of that name: the rerankers' figures are means over the same benchmarks for every ranked
  row, as on the overview's tables (:func:`reports.ranking.headline_set`).

Only reorderings of a pool are shown: a result whose every stored ranking holds documents of its
query's pool only (the pool as :meth:`harness.store.results.Store.pool` keeps it). A result whose
pool is not in the store, that is on a pool of another benchmark version, or that ranks a document
outside the pool is left out, and a note under its table says how many and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.core.registry import RetrieverSpec
from harness.run.pools import REFERENCES
from harness.store.results import BenchmarkInfo, ResultRecord, Store
from harness.store.trust import REPRODUCED

from .ranking import N_RESAMPLES, OTHER_SUITE, SuiteComparison, SuiteRow, Values, suite_comparison
from .rows import (BenchmarkSection, ConfigGroup, SuiteSpec, base_name, chance_preference, home_suite,
                   local_display, may_be_chance, measure_sort_key, on_pool, shown_names, shown_over, slot_of,
                   trust_rank, weakest_level)
from .text import slugify

# a pool's reference rows: retriever name → kind ("order", "shuffled", "oracle"), in the order shown
REFERENCE_KINDS = {name: kind for kind, (name, _) in REFERENCES.items()}
SHUFFLED = REFERENCES["shuffled"][0]
RERANKER = "reranker"
# how a table's rank column names each reference row
REFERENCE_SHOWN = {"order": "first stage", "shuffled": "shuffled", "oracle": "ceiling"}
NOT_ABOVE_SHUFFLED = "not above the shuffled pool"
# how a reranker's reason to be listed apart names itself and the row it is compared with
SHUFFLED_WORDS = (NOT_ABOVE_SHUFFLED, "the shuffled pool")
# why a result is left out of the track
OUTSIDE = "a document outside its query's pool in the ranking: not a reordering of the pool"
NOT_STORED = "the pool is not in the results store, so the rankings cannot be checked against it"
OTHER_VERSION = "the pool is one of another benchmark or benchmark version"
NOT_THE_POOLS = ("a reference row of the pool read from a file other than the shipped reference bundle, or not "
                 "verified: the pool's own rows are computed from the pool here")
MAX_COLUMNS = 5  # a benchmark of no suite: its first default measures as the columns


@dataclass
class StageRow:
    """One row of a second-stage table: a reranker configuration or a reference row."""

    label: str  # the label as stored (shown on every page that names the row)
    kind: str  # RERANKER, or the reference row's kind ("order", "shuffled", "oracle")
    groups: dict[str, ConfigGroup]  # benchmark → the row's results there
    means: dict[str, float | None]  # measure → mean over the table's headline benchmarks
    rank: tuple[int, int] | None = None  # its rank interval among the ranked rerankers
    why: str = ""  # why a reranker is not ranked ("" when it is); the reference rows are never ranked
    trust: str = REPRODUCED
    missing: list[str] = field(default_factory=list)  # headline benchmarks the row was not run on
    pool_name: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # measure → how many benchmarks its mean is over

    @property
    def reference(self) -> bool:
        return self.kind != RERANKER

    @property
    def ranked(self) -> bool:
        return self.kind == RERANKER and not self.why

    @property
    def below_shuffled(self) -> bool:
        return self.why.startswith(NOT_ABOVE_SHUFFLED)

    @property
    def shown(self) -> str:
        """The label without the pool's name its table is headed by (``mmr [bm25@100]`` → ``mmr``)."""
        suffix = f" [{self.pool_name}]"
        if self.pool_name and self.label.endswith(suffix) and len(self.label) > len(suffix):
            return self.label[: -len(suffix)]
        return self.label

    @property
    def records(self) -> list[ResultRecord]:
        return [r for g in self.groups.values() for r in g.records]


@dataclass
class StageTable:
    """A pool's rerankers and reference rows: on one benchmark (:attr:`pools` holds one manifest), or
    over a suite's benchmarks that have a pool of this name (one manifest per benchmark)."""

    pool_name: str
    measures: list[str]  # the columns: the suite's headline measures the rows have; the first ranks
    relevance: str | None  # what a reranker must be above the shuffled pool on
    sections: list[BenchmarkSection]  # per benchmark, the pool's rows there
    headline_benchmarks: list[str]  # the benchmarks every figure averages over
    pools: dict[str, Mapping[str, Any]]  # benchmark → the pool's manifest
    ranked: list[StageRow]  # best first
    apart: list[StageRow]  # rerankers not ranked, with why
    references: list[StageRow]  # order, shuffled, oracle (those stored)
    left_out: dict[str, int] = field(default_factory=dict)  # why → how many results
    suite: str | None = None

    @property
    def rank_measure(self) -> str | None:
        return self.measures[0] if self.measures else None

    @property
    def rerankers(self) -> list[StageRow]:
        return self.ranked + self.apart

    @property
    def rows(self) -> list[StageRow]:
        return self.ranked + self.apart + self.references

    @property
    def pool_hash(self) -> str:
        """The pool's content hash (one benchmark's table); ``""`` over several."""
        hashes = {str(m.get("hash", "")) for m in self.pools.values()}
        return hashes.pop() if len(hashes) == 1 and len(self.pools) == 1 else ""

    def reference(self, kind: str) -> StageRow | None:
        return next((r for r in self.references if r.kind == kind), None)

    def row(self, label: str) -> StageRow | None:
        return next((r for r in self.rows if r.label == label), None)

    def notes(self) -> list[str]:
        return [left_out_note(n, why) for why, n in self.left_out.items()]


@dataclass
class StageSuite:
    """The overview's second-stage section of a suite: one table per pool name."""

    name: str
    description: str
    tables: list[StageTable]


@dataclass
class SecondStage:
    """The whole track: per benchmark its pool tables, per suite its pool-name tables."""

    tables: dict[str, list[StageTable]] = field(default_factory=dict)  # benchmark → its tables, by pool name
    notes: dict[str, list[str]] = field(default_factory=dict)  # benchmark → notes tied to no stored pool
    suites: list[StageSuite] = field(default_factory=list)
    records: list[ResultRecord] = field(default_factory=list)  # every result of the track the tables show
    only: list[BenchmarkSection] = field(default_factory=list)  # benchmarks with no ordinary rows

    def of(self, benchmark: str) -> list[StageTable]:
        return self.tables.get(benchmark, [])

    @property
    def benchmarks(self) -> list[str]:
        return list(dict.fromkeys([*self.tables, *self.notes]))


def left_out_note(n: int, why: str, where: str = "this table") -> str:
    return f"{n} result{'s' if n != 1 else ''} left out of {where}: {why}."


# --------------------------------------------------------------------------------------------
# which results are shown


class _Pools:
    """The store's pools by hash, read once: the manifest and each query's candidates."""

    def __init__(self, store: Store):
        self.store = store
        self._got: dict[str, tuple[dict[str, Any], dict[str, frozenset[str]]] | None] = {}

    def get(self, pool_hash: str) -> tuple[dict[str, Any], dict[str, frozenset[str]]] | None:
        if pool_hash not in self._got:
            got = self.store.pool(pool_hash) if pool_hash else None
            self._got[pool_hash] = None if got is None else (
                dict(got[0]), {q: frozenset(d for d, _ in r) for q, r in got[1].items()})
        return self._got[pool_hash]


def reorders(rankings: Mapping[str, Iterable[tuple[str, float]]], members: Mapping[str, frozenset[str]]) -> bool:
    """Whether every ranked document of every query is among that query's candidates."""
    empty: frozenset[str] = frozenset()
    return all(members.get(q, empty).issuperset([d for d, _ in ranking]) for q, ranking in rankings.items())


def pool_of(rec: ResultRecord) -> str:
    """The content hash of the pool ``rec`` ranks (its spec names it)."""
    spec = rec.spec if isinstance(rec.spec, Mapping) else {}
    return str(spec.get("pool") or "")


def _pool_name(rec: ResultRecord) -> str:
    ref = rec.extra.get("pool") if isinstance(rec.extra, Mapping) else None
    return str(ref.get("name") or "") if isinstance(ref, Mapping) else ""


def _kind(rec: ResultRecord) -> str:
    return REFERENCE_KINDS.get(rec.retriever, RERANKER)


def _base_hash(rec: ResultRecord) -> str:
    """The configuration's hash without its pool: one reranker on the pools of several benchmarks."""
    spec = rec.spec if isinstance(rec.spec, Mapping) else {}
    try:
        return RetrieverSpec(str(spec.get("retriever", rec.retriever)), dict(spec.get("params") or {})).hash
    except (TypeError, ValueError):
        return rec.spec_hash


# --------------------------------------------------------------------------------------------
# building the tables


def _table(pool_name: str, measures: Sequence[str], secs: Sequence[BenchmarkSection], pools: Mapping[str, Any],
           *, relevance: str | None, values: Values | None, n_resamples: int,
           suite: str | None = None) -> StageTable:
    """The pool's rerankers ranked over ``secs`` (one section per benchmark: the pool's rows there)
    by :func:`reports.ranking.suite_comparison`, the shuffled pool as its chance row, and the
    reference rows beside them."""
    present = {m for s in secs for g in s.groups for r in g.records for m in r.measures}
    columns = [m for m in measures if m in present]
    if relevance is not None and relevance not in present:
        relevance = None
    def own_reference(g: ConfigGroup) -> bool:
        return may_be_chance(g)

    kept = [dataclasses.replace(s, groups=[g for g in s.groups if _kind(g.records[0]) == RERANKER
                                           or (_kind(g.records[0]) == "shuffled" and own_reference(g))])
            for s in secs]
    comp: SuiteComparison = suite_comparison(pool_name, "", columns, kept, relevance=relevance, chance=SHUFFLED,
                                             values=values, n_resamples=n_resamples, chance_words=SHUFFLED_WORDS)
    core = list(comp.headline_benchmarks)
    per_label: dict[str, dict[str, ConfigGroup]] = {}
    for s in secs:
        for g in s.groups:
            per_label.setdefault(g.display, {})[s.name] = g

    def row(r: SuiteRow, kind: str) -> StageRow:
        return StageRow(r.label, kind, per_label.get(r.label, {}), {m: r.means.get(m) for m in columns}, r.rank,
                        "" if kind != RERANKER else r.why_apart, r.trust, list(r.missing), pool_name,
                        {m: r.counts.get(m, 0) for m in columns})

    def preference(label: str) -> tuple[int, str, str]:
        return min(chance_preference(g) for g in per_label[label].values())

    ranked = [row(r, RERANKER) for r in comp.ranked]
    apart = [row(r, RERANKER) for r in comp.apart]
    refs: dict[str, StageRow] = {}
    for r in sorted(comp.chance, key=lambda r: preference(r.label)):
        refs.setdefault("shuffled", row(r, "shuffled"))
    left_out = 0
    for label in sorted(per_label, key=preference):
        per_bench = per_label[label]
        kind = _kind(next(iter(per_bench.values())).records[0])
        if kind == RERANKER:
            continue
        if not all(own_reference(g) for g in per_bench.values()):
            left_out += sum(len(g.records) for g in per_bench.values())
            continue
        if kind not in ("order", "oracle") or kind in refs:
            continue
        missing = [b for b in core if b not in per_bench]
        means: dict[str, float | None] = {}
        counts: dict[str, int] = {}
        for m in columns:
            vals = [] if missing else [v for v in (per_bench[b].measure(m).mean for b in core) if v is not None]
            means[m], counts[m] = (sum(vals) / len(vals) if vals else None), len(vals)
        trust = weakest_level(g.trust for g in per_bench.values())
        refs[kind] = StageRow(label, kind, per_bench, means, None, "", trust, missing, pool_name, counts)
    references = [refs[k] for k in REFERENCES if k in refs]
    table = StageTable(pool_name, columns, relevance, list(secs), core, dict(pools), ranked, apart, references,
                       suite=suite)
    if left_out:
        table.left_out[NOT_THE_POOLS] = left_out
    return table


def _trust_order(level: str) -> int:
    return trust_rank(level)


def _home(name: str, task: str, specs: Sequence[SuiteSpec]) -> SuiteSpec | None:
    return home_suite(name, task, specs)


def _columns(s: BenchmarkSection, home: SuiteSpec | None) -> list[str]:
    if home is not None and home.headline:
        return list(home.headline)
    return list(s.measures[:MAX_COLUMNS])


def build(store: Store, records: Sequence[ResultRecord], sections: Sequence[BenchmarkSection],
          specs: Sequence[SuiteSpec], *, values: Values | None, n_resamples: int = N_RESAMPLES,
          assign: Callable[[Sequence[BenchmarkSection]], None] | None = None) -> SecondStage:
    """The track from ``records`` (those of the board; every one :func:`reports.rows.on_pool` holds is
    placed here): ``sections``, the board's ordinary benchmark sections (their display names and
    slugs are the track's too); ``assign(sections)`` gives each row its trust; ``values``: a row's
    per-query values."""
    out = SecondStage()
    pools = _Pools(store)
    infos: dict[tuple[str, str], BenchmarkInfo] = {(b.name, b.version): b for b in store.benchmarks()}
    valid: dict[tuple[str, str], list[ResultRecord]] = {}
    left: dict[tuple[str, str], dict[str, int]] = {}  # (benchmark, pool hash) → why → how many
    stray: dict[str, dict[str, int]] = {}  # benchmark → why → how many (no stored pool to attach it to)
    for rec in records:
        if not on_pool(rec):
            continue
        h = pool_of(rec)
        got = pools.get(h)
        if got is None:
            what = f"{_pool_name(rec) or 'a pool'} ({h or 'no hash'}): {NOT_STORED}"
            stray.setdefault(rec.benchmark, {}).setdefault(what, 0)
            stray[rec.benchmark][what] += 1
            continue
        manifest, members = got
        if (manifest.get("benchmark"), manifest.get("benchmark_version")) != (rec.benchmark, rec.benchmark_version):
            what = f"{manifest.get('name', h)} ({h}): {OTHER_VERSION}"
            stray.setdefault(rec.benchmark, {}).setdefault(what, 0)
            stray[rec.benchmark][what] += 1
            continue
        rankings = store.rankings(rec.id) if rec.id is not None else rec.rankings
        if not reorders(rankings, members):
            d = left.setdefault((rec.benchmark, h), {})
            d[OUTSIDE] = d.get(OUTSIDE, 0) + 1
            continue
        valid.setdefault((rec.benchmark, h), []).append(rec)

    # one result per configuration, slot and seed (as on every table: reports.rows.shown_over); one
    # name per (label, configuration without its pool, slot), never another row's
    names = shown_names({(r.label, _base_hash(r), slot_of(r)) for recs in valid.values() for r in recs})
    by_pool: dict[tuple[str, str], list[ConfigGroup]] = {}
    for (bench, h), recs in valid.items():
        groups: dict[tuple[str, str, str, str], dict[int, ResultRecord]] = {}
        for rec in recs:
            by_seed = groups.setdefault((rec.label, rec.spec_hash, rec.benchmark_version, slot_of(rec)), {})
            old = by_seed.get(rec.seed)
            if old is None or shown_over(rec, old):
                by_seed[rec.seed] = rec
        glist = []
        for (label, spec_hash, version, slot), by_seed in groups.items():
            recs_ = [by_seed[s] for s in sorted(by_seed)]
            display = names[(label, _base_hash(recs_[0]), slot)]
            glist.append(ConfigGroup(bench, version, label, spec_hash, recs_, display, slot=slot))
        by_pool[(bench, h)] = glist

    ordinary = {s.name: s for s in sections}
    used = {s.slug for s in sections}

    def page_of(bench: str, version: str) -> BenchmarkSection:
        """The benchmark's ordinary section, else its page in the track alone (made once)."""
        if bench in ordinary:
            return ordinary[bench]
        made = next((s for s in out.only if s.name == bench), None)
        if made is None:
            info = infos.get((bench, version)) or next((b for (n, _), b in infos.items() if n == bench), None)
            made = BenchmarkSection(bench, info.task if info is not None else "unknown",
                                    [info] if info is not None else [], info,
                                    list(info.default_measures) if info is not None else [], [],
                                    [version] if version else [])
            made.display = (f"{local_display(bench)} ({hashlib.sha256(bench.encode()).hexdigest()[:6]})"
                            if made.local else bench)
            made.slug = slugify(made.display, used)
            out.only.append(made)
        return made

    # a section per benchmark and pool: the pool's rows there (every pool with a result, shown or not)
    pool_secs: dict[tuple[str, str], BenchmarkSection] = {}
    for bench, h in sorted(set(by_pool) | set(left)):
        glist = by_pool.get((bench, h), [])
        version = str(pools.get(h)[0]["benchmark_version"])  # type: ignore[index]
        info = infos.get((bench, version))
        if info is not None and info.default_measures:
            measures = list(info.default_measures)
        else:
            measures = sorted({m for g in glist for r in g.records for m in r.measures}, key=measure_sort_key)
        sec = BenchmarkSection(bench, info.task if info is not None else "unknown", [info] if info is not None else [],
                               info, measures, glist, [version])
        home = page_of(bench, version)
        sec.display, sec.slug = home.display, home.slug
        pool_secs[(bench, h)] = sec
    for bench in stray:
        page_of(bench, "")
    if assign is not None:
        assign(list(pool_secs.values()))

    # per benchmark: a table per pool, by pool name then hash
    for (bench, h), sec in sorted(pool_secs.items(), key=lambda kv: (kv[0][0], _name_of(pools, kv[0][1]), kv[0][1])):
        home = _home(bench, sec.task, specs)
        manifest = pools.get(h)[0]  # type: ignore[index]
        t = _table(str(manifest.get("name", h)), _columns(sec, home), [sec], {bench: manifest},
                   relevance=home.relevance if home is not None else None, values=values, n_resamples=n_resamples,
                   suite=home.name if home is not None else None)
        t.left_out = {**dict(left.get((bench, h), {})), **t.left_out}
        out.tables.setdefault(bench, []).append(t)
    for bench, why in stray.items():
        out.notes[bench] = [left_out_note(n, w, "the second stage") for w, n in why.items()]
    out.records = [r for t in (t for ts in out.tables.values() for t in ts) for row in t.rows for r in row.records]
    out.suites = _suites({k: v for k, v in pool_secs.items() if v.groups}, pools, specs, values=values,
                         n_resamples=n_resamples)
    return out


def _name_of(pools: _Pools, h: str) -> str:
    got = pools.get(h)
    return str(got[0].get("name", h)) if got is not None else h


def _suites(pool_secs: Mapping[tuple[str, str], BenchmarkSection], pools: _Pools, specs: Sequence[SuiteSpec], *,
            values: Values | None, n_resamples: int) -> list[StageSuite]:
    """Per suite with a headline (registry order), then ``other`` for the benchmarks none lists: one
    table per pool name over the suite's benchmarks that have a pool of that name. Where a benchmark
    has several pools of one name (built apart, on other machines), the one with the most rows is
    used (then the smaller hash). Query slices are on no suite's table."""
    by_name: dict[str, dict[str, BenchmarkSection]] = {}  # pool name → benchmark → section
    for (bench, h), sec in sorted(pool_secs.items()):
        name = _name_of(pools, h)
        cur = by_name.setdefault(name, {}).get(bench)
        if cur is None or len(sec.groups) > len(cur.groups):
            by_name[name][bench] = sec
    benches = {b for per in by_name.values() for b in per}
    out: list[StageSuite] = []
    placed: set[str] = set()
    members: list[tuple[str, str, list[str], list[str], str | None]] = []
    for spec in specs:
        if not spec.headline:
            continue
        names = [b for b in spec.benchmarks if b in benches]
        if names:
            members.append((spec.name, spec.description, names, list(spec.headline), spec.relevance))
            placed |= set(names)
    rest = sorted(b for b in benches if b not in placed and base_name(b) == b)
    if rest:
        measures: list[str] = []
        relevance = None
        for b in rest:
            sec = next(iter(per[b] for per in by_name.values() if b in per))
            home = _home(b, sec.task, specs)
            for m in (home.headline if home is not None and home.headline else tuple(sec.measures[:1])):
                if m not in measures:
                    measures.append(m)
            relevance = relevance or (home.relevance if home is not None else None)
        members.append((OTHER_SUITE, "", rest, measures, relevance))
    for name, description, names, measures, relevance in members:
        tables = []
        for pool_name in sorted(by_name):
            secs = [by_name[pool_name][b] for b in names if b in by_name[pool_name]]
            if not secs:
                continue
            manifests = {s.name: pools.get(_hash_of(s))[0] for s in secs}  # type: ignore[index]
            tables.append(_table(pool_name, measures, secs, manifests, relevance=relevance, values=values,
                                 n_resamples=n_resamples, suite=name))
        if tables:
            out.append(StageSuite(name, description, tables))
    return out


def _hash_of(sec: BenchmarkSection) -> str:
    """The pool of a pool section (every row of it is on that pool)."""
    return pool_of(sec.groups[0].records[0]) if sec.groups else ""
