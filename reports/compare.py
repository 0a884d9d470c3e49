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
  (``--max-queries``) are in none of them;
* one :class:`SliceTable` per suite and slice size: the query slices ranked among themselves, beside
  every full-set row restricted to the slice's queries (:func:`slice_tables`);
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

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from harness import registry
from harness.core.types import content_hash
from harness.measures.stats import BOOTSTRAP_RESAMPLES, bootstrap_cis
from harness.store.results import BenchmarkInfo, MeasureValue, ResultRecord, Store
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
    "PerQuery", "RESTRICTED", "STORED", "SliceTable", "SuiteComparison", "SuiteRow", "SuiteSpec", "Values",
    "assign_trust", "base_name", "below_chance", "chance_floor", "collect", "compare", "comparison_suite",
    "cut_from", "declared_suites", "headline_set", "home_suite", "is_better", "is_local", "local_display", "on_pool",
    "measure_higher_is_better", "measure_sort_key", "order_rows", "rank_intervals", "restricted_group", "short_model",
    "shown_over", "significance", "slice_ids", "slice_tables", "suite_comparison", "suite_comparisons", "summary_rows", "win_tie_loss", "OWN_SLOT", "lacking", "may_be_chance", "shown_names", "slot_of",
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
    slice_tables: list[SliceTable] = field(default_factory=list)  # the query slices, ranked among themselves

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
        """The benchmarks stored on a query slice only (``--max-queries``): on no full-set overview
        table; the overview ranks them among themselves in tables of their own (:attr:`slice_tables`)."""
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
    its first measure). Query slices (``nevir[:10]``, from ``--max-queries``) are in none of these
    tables: a smoke run never moves a headline figure; they keep their benchmark pages
    (:attr:`Leaderboard.slices`) and tables of their own (:func:`slice_tables`)."""
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
        measures, relevance, chance = _other_declarations(rest, specs)
        out.append(suite_comparison(OTHER_SUITE, "", measures, rest, relevance=relevance, chance=chance,
                                    values=values, n_resamples=n_resamples))
    return out


def _other_declarations(secs: Sequence[BenchmarkSection], specs: Sequence[SuiteSpec]
                        ) -> tuple[list[str], str | None, str | None]:
    """The headline measures, relevance measure and chance retriever of a table of benchmarks no
    suite with a headline lists: each one's home suite's headline (else its first measure), and the
    first relevance measure and chance retriever their home suites declare."""
    measures: list[str] = []
    homes = [home_suite(s.name, s.task, specs) for s in secs]
    for s, home in zip(secs, homes):
        for m in (home.headline if home is not None else ()) or tuple(s.measures[:1]):
            if m not in measures:
                measures.append(m)
    chance = next((h.chance for h in homes if h is not None and h.chance), None)
    relevance = next((h.relevance for h in homes if h is not None and h.relevance), None)
    return measures, relevance, chance


# --------------------------------------------------------------------------------------------
# the query slices, ranked among themselves

STORED, RESTRICTED = "stored", "restricted"  # where a slice row's figures come from (SliceTable.source)


@dataclass
class SliceTable:
    """One overview table of query slices (``nevir[:25]``, from ``--max-queries``): the benchmarks
    of one suite cut to their first :attr:`size` judged queries, ranked among themselves with the
    machinery of the full-set tables (:func:`reports.ranking.suite_comparison`: the same headline
    measures, equal footing, chance test and rank intervals), never beside a full-set row.

    Its rows are every configuration with a stored result on one of the slices, and every
    configuration of the full-set tables on the same benchmarks: a row's figures on a slice are its
    stored slice result where there is one (:data:`STORED`), else its full-set result's per-query
    values restricted to exactly the slice's query ids (:data:`RESTRICTED`: the ids the stored slice
    results were scored on, the first ``size`` judged queries of the version the slice was cut
    from, :meth:`harness.core.types.Benchmark.head`), their means and bootstrap intervals computed
    as the runner computes them. A restricted row comes only from the full-set version the slice's
    own version was derived from (``content_hash([version, "head:N"])``)."""

    comparison: SuiteComparison  # the table: its benchmarks are the slices, its rows both kinds
    size: int  # N of ``[:N]``
    sources: dict[tuple[str, str], ConfigGroup]  # (label, slice name) → the full-set row a restricted row comes from
    values: Values  # every row's per-query values on the slices (what its tests and intervals read)

    @property
    def name(self) -> str:
        return self.comparison.name

    def source(self, label: str, benchmark: str) -> str:
        """Where the figures of ``label`` on the slice ``benchmark`` come from: :data:`STORED` or
        :data:`RESTRICTED`."""
        return RESTRICTED if (label, benchmark) in self.sources else STORED

    def stored_labels(self) -> list[str]:
        """The rows with a stored result on at least one of the slices, in table order."""
        stored = {g.display for s in self.comparison.benchmarks for g in s.groups
                  if (g.display, s.name) not in self.sources}
        return [r.label for r in self.comparison.rows if r.label in stored]


def slice_ids(section: BenchmarkSection, per_query: PerQuery) -> dict[str, list[str]]:
    """Per measure, the ids a slice's stored results were scored on (queries, or pairs for a pair
    measure): what a restricted row keeps of its full-set values. Queries are in the slice's own
    order (its queries as the store keeps them, the order the runner scores and resamples them in);
    ids that are no query of it (pairs), and every id when the store keeps no queries, in the order
    the results stored them."""
    ids: dict[str, dict[str, None]] = {}
    for g in section.groups:
        for r in g.records:
            for m, col in per_query.result(r).items():
                ids.setdefault(m, {}).update(dict.fromkeys(col))
    position: dict[str, int] = {}
    for v in section.versions:
        for q in per_query.store.queries_of(v):
            position.setdefault(str(q["qid"]), len(position))
    last = len(position)
    return {m: sorted(col, key=lambda q: position.get(q, last)) for m, col in ids.items()}


def cut_from(section: BenchmarkSection, full_version: str) -> bool:
    """Whether the slice ``section`` was cut from the full set's version ``full_version``: its own
    version is the one :meth:`harness.core.types.Benchmark.head` derives from it."""
    n = section.query_slice
    return n is not None and any(v == content_hash([full_version, f"head:{n}"]) for v in section.versions)


def restricted_group(g: ConfigGroup, section: BenchmarkSection, ids: Mapping[str, Sequence[str]],
                     per_query: PerQuery) -> tuple[ConfigGroup, dict[str, dict[str, float]]] | None:
    """The full-set row ``g`` on the slice ``section``: per seed, its per-query values of each
    measure restricted to the slice's ids (a measure whose values lack one of them is left out),
    their mean and 95% percentile bootstrap interval (:data:`harness.measures.stats.BOOTSTRAP_RESAMPLES`
    resamples seeded with the result's seed, over the values in the slice's order, :func:`slice_ids`:
    as the runner computes a stored result's); and the row's per-query values (means over its seeds). ``None``
    when no measure is left."""
    version = section.info.version if section.info is not None else section.versions[0]
    n_queries = max((n for s in section.groups for n in s.n_queries), default=0)
    records: list[ResultRecord] = []
    per_seed: list[dict[str, dict[str, float]]] = []
    for r in g.records:
        values = per_query.result(r)
        cols = {m: [float(values[m][q]) for q in qs] for m, qs in ids.items()
                if qs and values.get(m) and all(q in values[m] for q in qs)}
        if not cols:
            continue
        cis = bootstrap_cis(cols, n_resamples=BOOTSTRAP_RESAMPLES, seed=r.seed)
        measures = {m: MeasureValue(sum(col) / len(col), len(col), *cis[m]) for m, col in cols.items()}
        records.append(dataclasses.replace(r, benchmark=section.name, benchmark_version=version, n_queries=n_queries,
                                           n_missing=0, measures=measures, per_query={}, rankings={}, id=None))
        per_seed.append({m: dict(zip(ids[m], col)) for m, col in cols.items()})
    if not records:
        return None
    common = set.intersection(*(set(p) for p in per_seed))
    means = {m: {q: sum(p[m][q] for p in per_seed) / len(per_seed) for q in ids[m]} for m in common}
    out = ConfigGroup(section.name, version, g.label, g.spec_hash, records, g.display, trust=g.trust, slot=g.slot)
    return out, means


def slice_tables(sections: Sequence[BenchmarkSection], specs: Sequence[SuiteSpec], per_query: PerQuery, *,
                 n_resamples: int = N_RESAMPLES) -> list[SliceTable]:
    """The overview's tables of query slices (:class:`SliceTable`): one per suite with a headline and
    slice size, the slices of benchmarks no such suite lists in an ``other`` table per size, in
    registry order then by size (largest first)."""
    full = {s.name: s for s in sections if s.query_slice is None}
    listed = [sp for sp in specs if sp.headline]
    by_table: dict[tuple[int, int], list[BenchmarkSection]] = {}
    for s in sections:
        if s.query_slice is None:
            continue
        base = base_name(s.name)
        where = next((i for i, sp in enumerate(listed) if base in sp.benchmarks), len(listed))
        by_table.setdefault((where, s.query_slice), []).append(s)
    out = []
    for (where, n) in sorted(by_table, key=lambda k: (k[0], -k[1])):
        slices = by_table[(where, n)]
        if where < len(listed):
            spec = listed[where]
            order = list(spec.benchmarks)
            slices.sort(key=lambda s: (order.index(base_name(s.name)), s.name))
            name, description, measures = spec.name, spec.description, list(spec.headline)
            relevance, chance, tradeoff = spec.relevance, spec.chance, spec.tradeoff
        else:
            name, description, tradeoff = OTHER_SUITE, "", None
            measures, relevance, chance = _other_declarations(slices, specs)
        sources: dict[tuple[str, str], ConfigGroup] = {}
        restricted: dict[int, dict[str, dict[str, float]]] = {}
        cut: list[BenchmarkSection] = []
        for s in slices:
            stored = {g.display for g in s.groups}
            extra = []
            whole = full.get(base_name(s.name))
            ids = slice_ids(s, per_query)
            for g in (whole.groups if whole is not None else []):
                if g.display in stored or not cut_from(s, g.benchmark_version):
                    continue
                got = restricted_group(g, s, ids, per_query)
                if got is None:
                    continue
                extra.append(got[0])
                restricted[id(got[0])] = got[1]
                sources[(g.display, s.name)] = g
            cut.append(dataclasses.replace(s, groups=[*s.groups, *extra], measures=list(s.measures)))

        def values(g: ConfigGroup, _restricted: dict[int, dict[str, dict[str, float]]] = restricted
                   ) -> Mapping[str, Mapping[str, float]]:
            return _restricted[id(g)] if id(g) in _restricted else per_query.group(g)

        table = suite_comparison(name, description, measures, cut, relevance=relevance, chance=chance,
                                 tradeoff=tradeoff, values=values, n_resamples=n_resamples)
        out.append(SliceTable(table, n, sources, values))
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
    slices = slice_tables(sections, specs, per_query, n_resamples=n_resamples)
    return Leaderboard(records, benchmarks, suites, sweeps, per_query, n_resamples, second_stage=track,
                       slice_tables=slices)
