"""The leaderboard as data: the results store turned into comparison objects (docs/design/store.md#the-site).

:func:`compare` reads the store alone (no benchmark or retriever is loaded) and returns a
:class:`Leaderboard` of plain dataclasses, with no HTML in them:

* one :class:`BenchmarkComparison` per benchmark name: its configuration rows
  (:class:`ConfigGroup`), each measure aggregated over a row's seeds (:class:`Aggregate`: the
  mean, the per-seed means, their standard deviation or, for one seed, the 95% bootstrap CI),
  and for every measure a :class:`PairedTest` of each row against the best *comparator* row and
  the best *baseline* row: a two-sided paired randomisation test on per-query values,
  Holm-adjusted across the rows compared with the same yardstick on the same measure, with the
  per-query win/tie/loss counts;
* one :class:`SuiteComparison` per overview table: the suite's headline measures averaged over
  the same benchmarks for every ranked row (:func:`headline_set` of the rows that may be ranked,
  never of a row set apart: :func:`reports.ranking.suite_comparison`); rows that lack one of them
  are shown apart with what they lack, a row without the headline measure or its per-query values
  is never ranked (:func:`reports.ranking.lacking`), and results on a query slice
  (``--max-queries``) are in no table;
* the stored parameter sweeps of each benchmark (:mod:`reports.sweeps` makes grids of them);
* the second-stage track (:class:`reports.second_stage.SecondStage`): rerankers on frozen candidate
  pools and each pool's reference rows, which are in none of the tables above.

The row classes are in :mod:`reports.rows`, the paired tests, rank intervals, chance checks and
overview tables in :mod:`reports.ranking`; this module assembles them and re-exports their names.
:mod:`reports.pages` renders these objects as the static site, :mod:`reports.tables` as JSON,
Markdown or LaTeX tables.

Which retrievers are baselines, which one is the comparator and which measures head a suite's
table are declared with the suites and read through :func:`harness.registry.suites` (see
:class:`SuiteSpec`); nothing here names a retriever.

Grouping (:func:`collect`, which also feeds :func:`summary_rows`):

* a *section* per benchmark name, ordered by task (constraint, completeness, topical, then any
  other) and name;
* a *row* per retriever configuration and slot: results grouped by ``(label, spec_hash,
  benchmark_version, slot)``, the slot being where they come from (:func:`reports.rows.slot_of`:
  computed here, the shipped reference bundle, or one imported file). Several seeds of one slot
  are aggregated (mean over seeds of each per-seed mean; the sample standard deviation,
  ``ddof=1``, when there are two or more); the seeds of two slots never are: an import of other
  seeds of the user's own configuration is a row of its own (shown with its slot,
  ``bm25 (from results.jsonl)``), and the user's row keeps its trust. Should the same seed be
  stored twice in one slot (another harness version or depth ``k``), the one shown is the most
  recent result computed here, else the import with the best evidence (verified before
  reported), then the smallest key: never a date or an order that a file could choose
  (:func:`shown_over`). A label run with several specs is shown as ``label (hash6)``; no two rows
  are ever shown by one name (:func:`reports.rows.shown_names`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from harness import registry
from harness.store.results import BenchmarkInfo, ResultRecord, Store
from harness.store.trust import matched_figures, origin, weakest_trust

# The rows live in reports.rows and the ranking machinery in reports.ranking; their public names
# are importable from here too.
from .ranking import (ALPHA, BASELINE, CHANCE_LEVEL, COMPARATOR, N_RESAMPLES, OTHER_SUITE, ChanceCheck, PairedTest,
                      SuiteComparison, SuiteRow, Values, below_chance, chance_floor, headline_set, is_better, lacking,
                      measure_higher_is_better, order_rows, rank_intervals, significance, sort_value,
                      suite_comparison, win_tie_loss)
from .rows import (ENCODER_PARAMS, OWN_SLOT, SLICE_RE, Aggregate, BenchmarkSection, ConfigGroup, SuiteSpec,
                   base_name, home_suite, is_local, local_display, may_be_chance, measure_sort_key, on_pool,
                   short_model, shown_names, shown_over, slot_of)
from . import second_stage
from .second_stage import SecondStage
from .text import finite, slugify

__all__ = [
    "ALPHA", "BASELINE", "CHANCE_LEVEL", "COMPARATOR", "ENCODER_PARAMS", "N_RESAMPLES", "OTHER_SUITE", "TASK_ORDER", "SLICE_RE",
    "Aggregate", "BenchmarkComparison", "BenchmarkSection", "ChanceCheck", "ConfigGroup", "Leaderboard", "PairedTest",
    "PerQuery", "SuiteComparison", "SuiteRow", "SuiteSpec", "Values", "assign_trust", "base_name", "below_chance",
    "chance_floor", "collect", "compare", "comparison_suite", "declared_suites", "headline_set", "home_suite",
    "is_better", "is_local", "local_display", "on_pool", "measure_higher_is_better", "measure_sort_key", "order_rows",
    "rank_intervals", "short_model", "shown_over", "significance", "suite_comparison", "suite_comparisons",
    "summary_rows", "win_tie_loss", "OWN_SLOT", "lacking", "may_be_chance", "shown_names", "slot_of",
]

TASK_ORDER = ("constraint", "completeness", "topical")


# --------------------------------------------------------------------------------------------
# what the suites declare


def declared_suites() -> list[SuiteSpec]:
    """The registered suites in registry order; none when a suite entry point is broken (every
    benchmark then goes to the ``other`` table and no row is tested)."""
    try:
        table = registry.suites()
    except LookupError:
        return []
    return [SuiteSpec.from_entry(name, entry or {}) for name, entry in table.items()]


def comparison_suite(name: str, task: str, specs: Sequence[SuiteSpec]) -> SuiteSpec | None:
    """Whose baselines and comparator a benchmark's rows are tested against: its home suite's when
    that declares them, else those of the first suite that does."""
    home = home_suite(name, task, specs)
    if home is not None and home.compares:
        return home
    return next((s for s in specs if s.compares), None)


def collect(store: Store, records: list[ResultRecord] | None = None) -> list[BenchmarkSection]:
    """Group the store's results into benchmark sections of configuration rows, sorted. The results
    of the second-stage track (rankings of a frozen pool and a pool's reference rows,
    :func:`reports.rows.on_pool`) are in no section: :mod:`reports.second_stage` compares them."""
    records = store.results() if records is None else records
    records = [r for r in records if not on_pool(r)]
    # an imported copy of a result computed here under the same name (the same key: the same
    # configuration, benchmark version, seed, depth and harness) is that very computation: the own
    # result stands for it, and the import's row keeps only the seeds the own slot lacks (so the
    # slots are still never mixed); an import under another name stays a row of its own
    own = {(r.key, r.label) for r in records if origin(r.extra) is None}
    records = [r for r in records if origin(r.extra) is None or (r.key, r.label) not in own]
    infos: dict[str, list[BenchmarkInfo]] = {}
    for b in store.benchmarks():
        infos.setdefault(b.name, []).append(b)

    # one result per (configuration, slot, seed): see shown_over; slots are never mixed
    groups: dict[tuple[str, str, str, str, str], dict[int, ResultRecord]] = {}
    for rec in records:
        key = (rec.benchmark, rec.label, rec.spec_hash, rec.benchmark_version, slot_of(rec))
        by_seed = groups.setdefault(key, {})
        old = by_seed.get(rec.seed)
        if old is None or shown_over(rec, old):
            by_seed[rec.seed] = rec

    names = shown_names((label, spec_hash, slot) for (_, label, spec_hash, _, slot) in groups)
    by_bench: dict[str, list[ConfigGroup]] = {}
    for (bench, label, spec_hash, version, slot), by_seed in groups.items():
        g = ConfigGroup(bench, version, label, spec_hash, [by_seed[s] for s in sorted(by_seed)],
                        names[(label, spec_hash, slot)], slot=slot)
        by_bench.setdefault(bench, []).append(g)

    sections: list[BenchmarkSection] = []
    for bench, glist in by_bench.items():
        versions = sorted({g.benchmark_version for g in glist})
        known = [b for b in infos.get(bench, []) if b.version in versions]
        # the version of the newest result decides the shown info; else any stored version
        newest = max((r for g in glist for r in g.records), key=lambda r: (r.created_at, r.id or 0))
        info = next((b for b in known if b.version == newest.benchmark_version), None)
        if info is None:
            info = known[0] if known else (infos[bench][-1] if infos.get(bench) else None)
        if info is not None and info.default_measures:
            measures = list(info.default_measures)
        else:
            present = {m for g in glist for r in g.records for m in r.measures}
            measures = sorted(present, key=measure_sort_key)
        task = info.task if info is not None else "unknown"
        if measures:
            first, higher = measures[0], measure_higher_is_better(measures[0])
            glist.sort(key=lambda g: (sort_value(g.measure(first), higher), g.display, g.benchmark_version))
        else:
            glist.sort(key=lambda g: (g.display, g.benchmark_version))
        sections.append(BenchmarkSection(bench, task, known, info, measures, glist, versions))

    def task_rank(s: BenchmarkSection) -> tuple[int, str, str]:
        rank = TASK_ORDER.index(s.task) if s.task in TASK_ORDER else len(TASK_ORDER) + (s.task == "unknown")
        return (rank, s.task, s.name)

    sections.sort(key=task_rank)
    names = {s.name: local_display(s.name) if s.local else s.name for s in sections}
    taken = [n for n in names.values()]
    for s in sections:
        shown = names[s.name]
        if s.local and (taken.count(shown) > 1 or shown in names):  # two folders of one name, or a registered name
            shown = f"{shown} ({hashlib.sha256(s.name.encode()).hexdigest()[:6]})"
        s.display = shown
    used: set[str] = set()
    for s in sections:
        s.slug = slugify(s.display, used)
    return sections


def summary_rows(store: Store) -> list[dict[str, Any]]:
    """The per-benchmark leaderboard rows as plain dicts, in page order.

    Keys: ``benchmark``, ``benchmark_version``, ``label`` (disambiguated as on the pages),
    ``spec_hash``, ``seeds`` (how many), ``n_queries``, then one key per headline measure with the
    mean over seeds (``None`` when missing), in column order.
    """
    rows: list[dict[str, Any]] = []
    for s in collect(store):
        for g in s.groups:
            row: dict[str, Any] = {
                "benchmark": s.name,
                "benchmark_version": g.benchmark_version,
                "label": g.display,
                "spec_hash": g.spec_hash,
                "seeds": len(g.records),
                "n_queries": max(g.n_queries, default=0),
            }
            for m in s.measures:
                row[m] = g.measure(m).mean
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# per-query values


class PerQuery:
    """Per-query values of each stored result, read once, and their means over a group's seeds."""

    def __init__(self, store: Store):
        self.store = store
        self._by_result: dict[int, dict[str, dict[str, float]]] = {}
        self._by_group: dict[tuple[int, ...], dict[str, dict[str, float]]] = {}

    def result(self, rec: ResultRecord) -> dict[str, dict[str, float]]:
        rid = int(rec.id or 0)
        if rid not in self._by_result:
            self._by_result[rid] = self.store.per_query(rid) if rec.id is not None else {}
        return self._by_result[rid]

    def group(self, g: ConfigGroup) -> dict[str, dict[str, float]]:
        """``{measure: {qid: mean over the seeds that scored the query}}``. A measure one of the
        seeds has a figure of but no per-query values for is left out: the row's mean of it is not
        what its per-query values average, so no test may read them as the row's (the board then
        lists the row apart where it needs them, :mod:`reports.ranking`)."""
        if len(g.records) == 1:  # one seed: its own values (read-only, shared with :meth:`result`)
            return self.result(g.records[0])
        ident = tuple(int(r.id or 0) for r in g.records)
        if ident in self._by_group and all(r.id is not None for r in g.records):
            return self._by_group[ident]
        acc: dict[str, dict[str, list[float]]] = {}
        gaps: set[str] = set()
        for r in g.records:
            values = self.result(r)
            gaps |= {m for m, v in r.measures.items() if finite(v.mean) and not values.get(m)}
            for m, col in values.items():
                d = acc.setdefault(m, {})
                for q, v in col.items():
                    d.setdefault(q, []).append(float(v))
        out = {m: {q: sum(v) / len(v) for q, v in col.items()} for m, col in acc.items() if m not in gaps}
        self._by_group[ident] = out
        return out


# --------------------------------------------------------------------------------------------
# the comparison objects


@dataclass
class BenchmarkComparison:
    """One benchmark: its rows and every row's tests against the two yardsticks (the best
    comparator row and the best baseline row)."""

    section: BenchmarkSection
    measures: list[str]  # every measure a row has: the headline ones first
    per_query: list[dict[str, dict[str, float]]]  # per row: {measure: {qid: mean over seeds}}
    tests: dict[tuple[int, str], list[PairedTest]]  # (row index, measure) → its tests
    yardsticks: dict[str, dict[str, int]]  # measure → {COMPARATOR/BASELINE: index of the row tested against}
    baselines: tuple[str, ...]
    comparator: str | None
    suite: str | None  # the suite whose baselines and comparator apply
    rank_measure: str | None = None  # what orders its rows: its home suite's first headline measure
    standing: dict[int, str] = field(default_factory=dict)  # row index → why it is not ranked (absent: ranked)
    ranks: dict[int, tuple[int, int]] = field(default_factory=dict)  # ranked row index → its rank interval
    relevance: str | None = None  # the topical measure a ranked row must beat chance on
    chance: str | None = None  # the retriever whose row is the chance level
    tradeoff: tuple[str, str] | None = None  # (violation, topical) measures of its trade-off plot

    @property
    def name(self) -> str:
        return self.section.name

    @property
    def task(self) -> str:
        return self.section.task

    @property
    def slug(self) -> str:
        return self.section.slug

    @property
    def groups(self) -> list[ConfigGroup]:
        return self.section.groups

    @property
    def headline(self) -> list[str]:
        return self.section.measures

    def is_baseline(self, g: ConfigGroup) -> bool:
        return g.retriever in self.baselines

    def tests_of(self, row: int, measure: str) -> list[PairedTest]:
        return self.tests.get((row, measure), [])


@dataclass
class Leaderboard:
    records: list[ResultRecord]  # the results of the ordinary tables (none of the second-stage track)
    benchmarks: list[BenchmarkComparison]
    suites: list[SuiteComparison]
    sweeps: dict[str, list[Mapping[str, Any]]]  # benchmark → its stored sweeps
    per_query: PerQuery
    n_resamples: int = N_RESAMPLES
    alpha: float = ALPHA
    second_stage: SecondStage = field(default_factory=SecondStage)  # rerankers on frozen pools

    @property
    def all_records(self) -> list[ResultRecord]:
        """Every result shown: the ordinary tables' and the second-stage track's (what the cost
        figures of each are derived from: one result may reuse what another computed)."""
        return [*self.records, *self.second_stage.records]

    @property
    def harness_versions(self) -> list[str]:
        return sorted({r.harness_version for r in self.all_records})

    @property
    def sweep_only(self) -> dict[str, list[Mapping[str, Any]]]:
        """The sweeps of benchmarks that have no leaderboard results (often train/dev splits)."""
        shown = {b.name for b in self.benchmarks} | {s.name for s in self.second_stage.only}
        return {name: ds for name, ds in self.sweeps.items() if name and name not in shown}

    @property
    def slices(self) -> list[BenchmarkComparison]:
        """The benchmarks stored on a query slice only (``--max-queries``): on no overview table."""
        return [b for b in self.benchmarks if b.section.query_slice is not None]

    def labels(self) -> list[str]:
        """Every configuration label shown, sorted."""
        return sorted({g.display for b in self.benchmarks for g in b.groups})

    def rows_of(self, label: str) -> list[tuple[BenchmarkComparison, ConfigGroup]]:
        """The rows of one configuration label, in benchmark order."""
        return [(b, g) for b in self.benchmarks for g in b.groups if g.display == label]


def suite_comparisons(sections: Sequence[BenchmarkSection], specs: Sequence[SuiteSpec], *,
                      values: Values | None = None, n_resamples: int = N_RESAMPLES) -> list[SuiteComparison]:
    """A table per suite with a headline that has stored benchmarks, in registry order, then the
    ``other`` table of the benchmarks none of them lists (headline: each one's home suite's, else
    its first measure). Query slices (``nevir[:10]``, from ``--max-queries``) are in no table: a
    smoke run never moves a headline figure; they keep their benchmark pages
    (:attr:`Leaderboard.slices`)."""
    members: list[tuple[SuiteSpec, list[BenchmarkSection]]] = []
    placed: set[str] = set()
    for spec in specs:
        if not spec.headline:
            continue
        names = list(spec.benchmarks)
        secs = [s for s in sections if s.name in names]
        secs.sort(key=lambda s: (names.index(s.name), s.name))
        if secs:
            members.append((spec, secs))
            placed |= {s.name for s in secs}
    out = [suite_comparison(spec.name, spec.description, spec.headline, secs, relevance=spec.relevance,
                            chance=spec.chance, tradeoff=spec.tradeoff, values=values, n_resamples=n_resamples)
           for spec, secs in members]
    rest = [s for s in sections if s.name not in placed and s.query_slice is None]
    if rest:
        measures: list[str] = []
        homes = [home_suite(s.name, s.task, specs) for s in rest]
        for s, home in zip(rest, homes):
            for m in (home.headline if home is not None else ()) or tuple(s.measures[:1]):
                if m not in measures:
                    measures.append(m)
        chance = next((h.chance for h in homes if h is not None and h.chance), None)
        relevance = next((h.relevance for h in homes if h is not None and h.relevance), None)
        out.append(suite_comparison(OTHER_SUITE, "", measures, rest, relevance=relevance, chance=chance,
                                    values=values, n_resamples=n_resamples))
    return out


def assign_trust(sections: Sequence[BenchmarkSection], reproductions: Sequence[Mapping[str, Any]],
                 specs: Sequence[SuiteSpec] = ()) -> None:
    """Each row's trust level (:func:`harness.store.trust.weakest_trust`, where trust is decided),
    given the headline of its benchmark's table: its home suite's headline, else the benchmark's
    first measure. ``reproductions``: the latest run of the shipped matrix."""
    matched = matched_figures(reproductions)
    for s in sections:
        home = home_suite(s.name, s.task, specs)
        headline = list(home.headline) if home is not None and home.headline else s.measures[:1]
        for g in s.groups:
            g.trust = weakest_trust(g.records, headline, matched)


def compare(store: Store, *, n_resamples: int = N_RESAMPLES,
            include: Callable[[ResultRecord], bool] | None = None) -> Leaderboard:
    """Every comparison the leaderboard shows, from the store and the registered suites; with
    ``include``, only the results it accepts (``leaderboard --no-reference`` leaves the shipped
    reference results out)."""
    records = store.results()
    if include is not None:
        records = [r for r in records if include(r)]
    pooled = [r for r in records if on_pool(r)]
    records = [r for r in records if not on_pool(r)]
    sections = collect(store, records)
    specs = declared_suites()
    reproductions = store.reproductions(shipped=True)
    assign_trust(sections, reproductions, specs)
    per_query = PerQuery(store)
    track = second_stage.build(store, pooled, sections, specs, values=per_query.group, n_resamples=n_resamples,
                               assign=lambda secs: assign_trust(secs, reproductions, specs))
    sweeps: dict[str, list[Mapping[str, Any]]] = {}
    for d in store.sweeps():
        sweeps.setdefault(str(d.get("benchmark", "")), []).append(d)

    benchmarks = []
    for s in sections:
        home = home_suite(s.name, s.task, specs)
        rank_measure, standing = order_rows(s, home, per_query.group, n_resamples)
        measures = s.all_measures()
        pq = [per_query.group(g) for g in s.groups]
        spec = comparison_suite(s.name, s.task, specs)
        baselines = spec.baselines if spec is not None else ()
        comparator = spec.comparator if spec is not None else None
        tests, yardsticks = significance(s.groups, pq, measures, baselines=baselines, comparator=comparator,
                                         n_resamples=n_resamples)
        ranks: dict[int, tuple[int, int]] = {}
        ranked = [i for i in range(len(s.groups)) if i not in standing]
        if rank_measure is not None and ranked:
            intervals = rank_intervals([pq[i].get(rank_measure) or {} for i in ranked],
                                       [s.groups[i].measure(rank_measure).mean for i in ranked],
                                       measure_higher_is_better(rank_measure), n_resamples=n_resamples)
            ranks = dict(zip(ranked, intervals))
        benchmarks.append(BenchmarkComparison(
            s, measures, pq, tests, yardsticks, baselines, comparator, spec.name if spec is not None else None,
            rank_measure, standing, ranks, home.relevance if home else None, home.chance if home else None,
            home.tradeoff if home else None))
    suites = suite_comparisons(sections, specs, values=per_query.group, n_resamples=n_resamples)
    return Leaderboard(records, benchmarks, suites, sweeps, per_query, n_resamples, second_stage=track)
