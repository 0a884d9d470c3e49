"""The leaderboard as data: the results store turned into comparison objects (DESIGN.md §9).

:func:`compare` reads the store alone (no benchmark or retriever is loaded) and returns a
:class:`Leaderboard` of plain dataclasses, with no HTML in them:

* one :class:`BenchmarkComparison` per benchmark name: its configuration rows
  (:class:`ConfigGroup`), each measure aggregated over a row's seeds (:class:`Aggregate`: the
  mean, the per-seed means, their standard deviation or, for one seed, the 95% bootstrap CI),
  and for every measure a :class:`PairedTest` of each row against the best *reference* row and
  the best *baseline* row: a two-sided paired randomisation test on per-query values,
  Holm-adjusted across the rows compared with the same reference on the same measure, with the
  per-query win/tie/loss counts;
* one :class:`SuiteComparison` per overview table: the suite's headline measures averaged over
  the same benchmarks for every ranked row (:func:`headline_set`); rows that lack one of them
  are shown apart with what they lack, and results on a query slice (``--max-queries``) are in no
  table;
* the stored parameter sweeps of each benchmark (:mod:`reports.sweeps` makes grids of them).

:mod:`reports.pages` renders these objects as the static site, :mod:`reports.tables` as JSON,
Markdown or LaTeX tables.

Which retrievers are baselines, which one is the reference and which measures head a suite's
table are declared with the suites and read through :func:`harness.registry.suites` (see
:class:`SuiteSpec`); nothing here names a retriever.

Grouping (:func:`collect`, which also feeds :func:`summary_rows`):

* a *section* per benchmark name, ordered by task (constraint, completeness, topical, then any
  other) and name;
* a *row* per retriever configuration: results grouped by ``(label, spec_hash,
  benchmark_version)``. Several seeds are aggregated (mean over seeds of each per-seed mean; the
  sample standard deviation, ``ddof=1``, when there are two or more). Should the same seed be
  stored twice for one configuration (another harness version or depth ``k``, or a result
  computed here beside an imported one), the one shown is the result computed here (the most
  recent of them), else the import with the best evidence (verified before reported), then the
  smallest key: never a date or an order that a file could choose
  (:func:`shown_over`). A label run with several specs is shown as ``label (hash6)``.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness import registry
from harness.measures import parse_measure, sort_key
from harness.stats import holm, paired_randomization_tests
from harness.store import BenchmarkInfo, ResultRecord, Store
from harness.trust import LEVELS, REPORTED, REPRODUCED, checked_measures, matched_figures, origin, reproduces, trust_of

from .text import finite, slugify

TASK_ORDER = ("constraint", "completeness", "topical")
# Measures averaged over a subset of the judged queries: their count is shown when it differs.
# The overview table of stored benchmarks that no suite with a headline lists.
OTHER_SUITE = "other"
ALPHA = 0.05
N_RESAMPLES = 10_000
# The two references every row is tested against: the best row of the declared reference
# retriever, and the best row of any declared baseline.
REFERENCE, BASELINE = "reference", "baseline"


# --------------------------------------------------------------------------------------------
# measures


def measure_higher_is_better(name: str) -> bool:
    """Direction of a measure; names the harness does not know are taken as higher-is-better."""
    try:
        return parse_measure(name).higher_is_better
    except ValueError:
        return True


def measure_sort_key(name: str) -> tuple[int, int, str]:
    """Column order when a benchmark has no stored default measures (the measures' own order)."""
    return sort_key(name)


def is_better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


SLICE_RE = re.compile(r"\[:(\d+)\]$")


ENCODER_PARAMS = ("model", "base_model", "encoder")


def short_model(name: str) -> str:
    """``sentence-transformers/all-MiniLM-L6-v2`` → ``all-MiniLM-L6-v2``; a path → its last part."""
    return re.split(r"[\\/]", name.rstrip("/\\"))[-1] or name


def base_name(name: str) -> str:
    """``nevir[:50]`` (a query slice) belongs where ``nevir`` does."""
    return SLICE_RE.sub("", name)


def is_local(name: str) -> bool:
    """Whether a stored benchmark name is a folder path (how the folder loader names a local
    BEIR-format folder, so the runner can reload it)."""
    return name.startswith("/") or bool(re.match(r"^[A-Za-z]:[\\/]", name))


def local_display(name: str) -> str:
    """A local folder's name as pages show it: its own folder name (plus any ``:split`` and query
    slice), never the absolute path, which says nothing to a reader and may name a temporary
    directory or a user's home."""
    sliced = SLICE_RE.search(name)
    rest = base_name(name)
    split = ""
    m = re.search(r":([A-Za-z0-9_-]+)$", rest)
    if m and not re.match(r"^[A-Za-z]:$", rest[:2] if len(rest) == 2 else ""):
        rest, split = rest[:m.start()], m.group(0)
    folder = re.split(r"[\\/]", rest.rstrip("/\\"))[-1] or rest
    return f"{folder}{split}{sliced.group(0) if sliced else ''}"


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# --------------------------------------------------------------------------------------------
# what the suites declare


@dataclass(frozen=True)
class SuiteSpec:
    """A suite as the leaderboard reads it from :func:`harness.registry.suites`.

    Besides ``description`` and ``benchmarks``, a suite may declare ``headline`` (the measures of
    its overview table, the first of which orders the rows; a suite without one has no table),
    ``baselines`` (the retrievers whose best row every row of its benchmarks is tested against)
    and ``reference`` (the retriever whose best row is the other reference)."""

    name: str
    description: str = ""
    benchmarks: tuple[str, ...] = ()
    headline: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()
    reference: str | None = None
    relevance: str | None = None  # the topical measure a ranked row must beat chance on
    chance: str | None = None  # the retriever whose row is the chance level
    tradeoff: tuple[str, str] | None = None  # (violation measure, topical measure) of its scatter

    @classmethod
    def from_entry(cls, name: str, entry: Mapping[str, Any]) -> SuiteSpec:
        def names(key: str) -> tuple[str, ...]:
            value = entry.get(key)
            return tuple(str(x) for x in value) if isinstance(value, (list, tuple)) else ()

        def one(key: str) -> str | None:
            value = entry.get(key)
            return str(value) if value else None

        pair = names("tradeoff")
        return cls(name, str(entry.get("description", "")), names("benchmarks"), names("headline"),
                   names("baselines"), one("reference"), one("relevance"), one("chance"),
                   (pair[0], pair[1]) if len(pair) == 2 else None)

    @property
    def compares(self) -> bool:
        return bool(self.baselines) or self.reference is not None


def declared_suites() -> list[SuiteSpec]:
    """The registered suites in registry order; none when a suite entry point is broken (every
    benchmark then goes to the ``other`` table and no row is tested)."""
    try:
        table = registry.suites()
    except LookupError:
        return []
    return [SuiteSpec.from_entry(name, entry or {}) for name, entry in table.items()]


def home_suite(name: str, task: str, specs: Sequence[SuiteSpec]) -> SuiteSpec | None:
    """The suite a benchmark is shown under: the first suite with a headline that lists it, else
    the suite named after its task (whose headline the ``other`` table borrows)."""
    base = base_name(name)
    listed = next((s for s in specs if s.headline and base in s.benchmarks), None)
    return listed or next((s for s in specs if s.name == task), None)


def comparison_suite(name: str, task: str, specs: Sequence[SuiteSpec]) -> SuiteSpec | None:
    """Whose baselines and reference a benchmark's rows are tested against: its home suite's when
    that declares them, else those of the first suite that does."""
    home = home_suite(name, task, specs)
    if home is not None and home.compares:
        return home
    return next((s for s in specs if s.compares), None)


# --------------------------------------------------------------------------------------------
# grouping and aggregation


@dataclass
class Aggregate:
    """One measure of one configuration, over its seeds."""

    mean: float | None
    std: float | None  # sample std over seeds, only with ≥ 2 seeds that have a value
    ci: tuple[float, float] | None  # the 95% bootstrap CI, only with a single seed
    n: list[int]  # distinct per-seed counts
    values: list[float]  # per-seed means that were averaged


@dataclass
class ConfigGroup:
    benchmark: str
    benchmark_version: str
    label: str
    spec_hash: str
    records: list[ResultRecord] = field(default_factory=list)  # one per seed, by seed
    display: str = ""
    trust: str = REPRODUCED  # the weakest trust level of its results (harness.trust)

    @property
    def retriever(self) -> str:
        return self.records[0].retriever if self.records else ""

    @property
    def encoder(self) -> str:
        """The backbone encoder its spec names (``model``, else ``base_model``), shortened to the
        model's own name; empty when the spec names none (bm25)."""
        params = (self.records[0].spec.get("params") or {}) if self.records else {}
        for key in ENCODER_PARAMS:
            v = params.get(key)
            if isinstance(v, str) and v:
                return short_model(v)
        return ""

    @property
    def llm(self) -> str:
        """The LLM its results were computed with (the runner records it for a retriever that calls
        one); empty when none did."""
        models = {str((r.extra.get("llm") or {}).get("model") or "") for r in self.records
                  if isinstance(r.extra.get("llm"), Mapping)}
        return ", ".join(sorted(short_model(m) for m in models if m))

    @property
    def note(self) -> str:
        """Why the configuration's results are what they are (a slice, a cap, a setting that differs
        from the paper), as the reference plan says it (``extra["reference"]["note"]`` of a
        bundled result); empty for any other result."""
        notes = [str(r.extra["reference"]["note"]) for r in self.records
                 if isinstance(r.extra.get("reference"), Mapping) and r.extra["reference"].get("note")]
        return " ".join(dict.fromkeys(notes))

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.records]

    @property
    def checked(self) -> frozenset[str] | None:
        """The figures checked here on every seed (:func:`harness.trust.checked_measures`):
        ``None`` when every result was computed here (all of them)."""
        sets = [c for c in (checked_measures(r.extra) for r in self.records) if c is not None]
        return frozenset.intersection(*sets) if sets else None

    def trusted_for(self, measure: str) -> bool:
        """Whether its figure of ``measure`` is reproduced, or verified on that measure."""
        if self.trust == REPORTED:
            return False
        checked = self.checked
        return checked is None or measure in checked

    @property
    def newest(self) -> ResultRecord:
        return max(self.records, key=lambda r: (r.created_at, r.id or 0))

    @property
    def n_queries(self) -> list[int]:
        return sorted({r.n_queries for r in self.records})

    @property
    def n_missing(self) -> int:
        return max((r.n_missing for r in self.records), default=0)

    def measure(self, name: str) -> Aggregate:
        vals = [r.measures[name] for r in self.records if name in r.measures]
        means = [float(v.mean) for v in vals if finite(v.mean)]
        ns = sorted({int(v.n) for v in vals})
        if not means:
            return Aggregate(None, None, None, ns, [])
        mean = float(sum(means) / len(means))
        std = None
        if len(means) >= 2:
            std = math.sqrt(sum((x - mean) ** 2 for x in means) / (len(means) - 1))
        ci = None
        if len(self.records) == 1 and len(vals) == 1 and finite(vals[0].ci_low) and finite(vals[0].ci_high):
            ci = (float(vals[0].ci_low), float(vals[0].ci_high))
        return Aggregate(mean, std, ci, ns, means)


@dataclass
class BenchmarkSection:
    name: str
    task: str
    infos: list[BenchmarkInfo]  # stored info for the versions that have results (may be empty)
    info: BenchmarkInfo | None  # the one whose default measures and stats are shown
    measures: list[str]  # the headline measures: the stored defaults, else every measure present
    groups: list[ConfigGroup]
    versions: list[str]
    slug: str = ""
    display: str = ""  # the name pages show: a local folder's own name, not its absolute path

    @property
    def fallback(self) -> bool:
        return self.info is None

    @property
    def local(self) -> bool:
        """A benchmark read from a folder given by path (``--benchmark ./folder``)."""
        return is_local(self.name)

    @property
    def query_slice(self) -> int | None:
        """``N`` for results on the first ``N`` queries (``--max-queries``, ``nevir[:N]``): a smoke
        slice, shown on its own page but never in an overview table."""
        m = SLICE_RE.search(self.name)
        return int(m.group(1)) if m else None

    def all_measures(self) -> list[str]:
        """The headline measures, then every other measure a row has, in column order."""
        present = {m for g in self.groups for r in g.records for m in r.measures}
        return list(self.measures) + sorted(present - set(self.measures), key=measure_sort_key)


def _sort_value(agg: Aggregate, higher: bool) -> tuple[int, float]:
    if agg.mean is None:
        return (1, 0.0)
    return (0, -agg.mean if higher else agg.mean)


def shown_over(a: ResultRecord, b: ResultRecord) -> bool:
    """Whether a row shows ``a`` rather than ``b``, two results of one configuration and seed: a
    result computed here before any import, and the most recent of those (its date is this
    store's); between imports, one that verified before one that did not, then the smaller key.
    Nothing a file supplies (its date, the order of imports) decides between imports."""
    mine_a, mine_b = origin(a.extra) is None, origin(b.extra) is None
    if mine_a != mine_b:
        return mine_a
    if mine_a:
        return (a.created_at, a.id or 0) > (b.created_at, b.id or 0)
    checked_a, checked_b = (isinstance(origin(r.extra).get("verified"), Mapping)  # type: ignore[union-attr]
                            for r in (a, b))
    if checked_a != checked_b:
        return checked_a
    return a.key < b.key


def collect(store: Store, records: list[ResultRecord] | None = None) -> list[BenchmarkSection]:
    """Group the store's results into benchmark sections of configuration rows, sorted."""
    records = store.results() if records is None else records
    infos: dict[str, list[BenchmarkInfo]] = {}
    for b in store.benchmarks():
        infos.setdefault(b.name, []).append(b)

    # one result per (configuration, seed): see shown_over
    groups: dict[tuple[str, str, str, str], dict[int, ResultRecord]] = {}
    for rec in records:
        key = (rec.benchmark, rec.label, rec.spec_hash, rec.benchmark_version)
        by_seed = groups.setdefault(key, {})
        old = by_seed.get(rec.seed)
        if old is None or shown_over(rec, old):
            by_seed[rec.seed] = rec

    hashes_per_label: dict[str, set[str]] = {}
    for (_, label, spec_hash, _) in groups:
        hashes_per_label.setdefault(label, set()).add(spec_hash)

    by_bench: dict[str, list[ConfigGroup]] = {}
    for (bench, label, spec_hash, version), by_seed in groups.items():
        display = label if len(hashes_per_label[label]) == 1 else f"{label} ({spec_hash[:6]})"
        g = ConfigGroup(bench, version, label, spec_hash, [by_seed[s] for s in sorted(by_seed)], display)
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
            glist.sort(key=lambda g: (_sort_value(g.measure(first), higher), g.display, g.benchmark_version))
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
# per-query values and paired tests


class PerQuery:
    """Per-query values of each stored result, read once, and their means over a group's seeds."""

    def __init__(self, store: Store):
        self.store = store
        self._by_result: dict[int, dict[str, dict[str, float]]] = {}

    def result(self, rec: ResultRecord) -> dict[str, dict[str, float]]:
        rid = int(rec.id or 0)
        if rid not in self._by_result:
            self._by_result[rid] = self.store.per_query(rid) if rec.id is not None else {}
        return self._by_result[rid]

    def group(self, g: ConfigGroup) -> dict[str, dict[str, float]]:
        """``{measure: {qid: mean over the seeds that scored the query}}``."""
        if len(g.records) == 1:  # one seed: its own values (read-only, shared with :meth:`result`)
            return self.result(g.records[0])
        acc: dict[str, dict[str, list[float]]] = {}
        for r in g.records:
            for m, col in self.result(r).items():
                d = acc.setdefault(m, {})
                for q, v in col.items():
                    d.setdefault(q, []).append(float(v))
        return {m: {q: sum(v) / len(v) for q, v in col.items()} for m, col in acc.items()}


@dataclass(frozen=True)
class PairedTest:
    """One row against one reference row on one measure."""

    kind: str  # REFERENCE or BASELINE
    reference: str  # the reference row's display label
    p_raw: float  # two-sided paired randomisation test on the queries both rows scored
    p_adj: float  # Holm-adjusted across the rows tested against this reference on this measure
    family: int  # the number of tests in that Holm family
    better: bool  # the row's mean is better than the reference row's
    wins: int  # queries on which the row's value is better than the reference row's
    ties: int  # … equal to it
    losses: int  # … worse than it

    @property
    def significant(self) -> bool:
        return self.p_adj == self.p_adj and self.p_adj < ALPHA


def win_tie_loss(a: Mapping[str, float], b: Mapping[str, float], higher: bool) -> tuple[int, int, int]:
    """How many of the queries both ``a`` and ``b`` scored ``a`` wins, ties (equal values) and loses."""
    wins = ties = losses = 0
    for q in a.keys() & b.keys():
        if a[q] == b[q]:
            ties += 1
        elif is_better(a[q], b[q], higher):
            wins += 1
        else:
            losses += 1
    return wins, ties, losses


def _best_index(idx: Iterable[int], means: Mapping[int, float], higher: bool) -> int | None:
    best: int | None = None
    for i in idx:
        if best is None or is_better(means[i], means[best], higher):
            best = i
    return best


def significance(groups: Sequence[ConfigGroup], per_query: Sequence[Mapping[str, Mapping[str, float]]],
                 measures: Sequence[str], *, baselines: Sequence[str] = (), reference: str | None = None,
                 n_resamples: int = N_RESAMPLES
                 ) -> tuple[dict[tuple[int, str], list[PairedTest]], dict[str, dict[str, int]]]:
    """Paired randomisation tests of every row against the best ``reference`` row and against the
    best row of the ``baselines`` on each measure, on per-query values (means over seeds),
    Holm-corrected across the rows compared with the same reference on the same measure. A
    reference row is a trusted one (:meth:`ConfigGroup.trusted_for` the measure: reproduced, or
    verified on it): a reported figure is tested, never the yardstick. Returns
    ``{(row, measure): [PairedTest]}`` and ``{measure: {REFERENCE/BASELINE: reference row}}``."""
    out: dict[tuple[int, str], list[PairedTest]] = {}
    refs: dict[str, dict[str, int]] = {}
    plans: list[tuple[str, str, int, list[int], dict[int, float], bool]] = []
    needed: dict[tuple[int, int, str], int] = {}  # the two-sided test is symmetric: one per pair
    for m in measures:
        higher = measure_higher_is_better(m)
        means = {i: g.measure(m).mean for i, g in enumerate(groups)}
        cands = [i for i in range(len(groups)) if means[i] is not None and per_query[i].get(m)]
        fin = {i: float(means[i]) for i in cands}  # type: ignore[arg-type]
        trusted = [i for i in cands if groups[i].trusted_for(m)]
        chosen = {
            REFERENCE: _best_index((i for i in trusted if groups[i].retriever == reference), fin, higher)
            if reference is not None else None,
            BASELINE: _best_index((i for i in trusted if groups[i].retriever in baselines), fin, higher),
        }
        refs[m] = {k: v for k, v in chosen.items() if v is not None}
        for kind, ref in chosen.items():
            if ref is None:
                continue
            plans.append((m, kind, ref, cands, fin, higher))
            for i in cands:
                if i != ref:
                    needed.setdefault((min(i, ref), max(i, ref), m), len(needed))
    pairs = [(per_query[i][m], per_query[r][m]) for (i, r, m) in needed]
    pvalues = paired_randomization_tests(pairs, n_resamples=n_resamples, seed=0)
    for m, kind, ref, cands, fin, higher in plans:
        raw = {str(i): pvalues[needed[(min(i, ref), max(i, ref), m)]] for i in cands if i != ref}
        adjusted = holm(raw)
        family = sum(1 for p in raw.values() if p == p)
        for key, p in raw.items():
            i = int(key)
            if p != p:
                continue
            out.setdefault((i, m), []).append(PairedTest(
                kind, groups[ref].display, p, adjusted[key], family, is_better(fin[i], fin[ref], higher),
                *win_tie_loss(per_query[i][m], per_query[ref][m], higher)))
    return out, refs


# --------------------------------------------------------------------------------------------
# the comparison objects


@dataclass
class BenchmarkComparison:
    """One benchmark: its rows and every row's tests against the two references."""

    section: BenchmarkSection
    measures: list[str]  # every measure a row has: the headline ones first
    per_query: list[dict[str, dict[str, float]]]  # per row: {measure: {qid: mean over seeds}}
    tests: dict[tuple[int, str], list[PairedTest]]  # (row index, measure) → its tests
    references: dict[str, dict[str, int]]  # measure → {REFERENCE/BASELINE: reference row index}
    baselines: tuple[str, ...]
    reference: str | None
    suite: str | None  # the suite whose baselines and reference apply
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
class SuiteRow:
    """One configuration label in a suite's table."""

    label: str
    coverage: int  # the suite's benchmarks the label ran on
    means: dict[str, float | None]  # measure → mean over the table's headline benchmarks
    counts: dict[str, int]  # measure → how many benchmarks that mean is over
    per_benchmark: dict[str, float | None]  # benchmark → its first headline measure (None: not run)
    missing: list[str] = field(default_factory=list)  # headline benchmarks the row was not run on
    trust: str = REPRODUCED  # the weakest trust level of its results on the table's benchmarks
    encoder: str = ""
    llm: str = ""
    note: str = ""  # the reference plan's note on the configuration (ConfigGroup.note)
    retriever: str = ""
    chance: bool = False  # the chance level (the suite's ``chance`` retriever): shown, never ranked
    below_chance: str = ""  # why its topical quality is not above chance ("" when it is, or unknown)
    rank: tuple[int, int] | None = None  # its rank interval among the ranked rows (rank_intervals)

    @property
    def complete(self) -> bool:
        """Run on every headline benchmark of its table."""
        return not self.missing

    @property
    def ranked(self) -> bool:
        """Ranked with the others: complete, figures that someone here checked, not the chance
        level, and topical quality above it."""
        return self.complete and self.trust != REPORTED and not self.chance and not self.below_chance

    @property
    def why_apart(self) -> str:
        """Why the row is not ranked ("" when it is)."""
        if self.chance:
            return "chance level"
        if self.missing:
            return "not run on " + ", ".join(self.missing)
        if self.trust == REPORTED:
            return "reported figures, not checked here"
        return self.below_chance


@dataclass
class SuiteComparison:
    """One overview table. Its headline figures are means over the same benchmarks for every
    ranked row (:attr:`headline_benchmarks`, see :func:`headline_set`); rows that lack one of them,
    rows of reported figures and rows below chance on relevance are :attr:`apart`, with why, and
    never ranked above a ranked row; the chance level's row (:attr:`chance`) is shown on its own."""

    name: str
    description: str
    measures: list[str]  # the headline measures; the first orders the rows
    benchmarks: list[BenchmarkSection]
    rows: list[SuiteRow]  # the ranked rows, best first, then the rows shown apart, then chance
    headline_benchmarks: list[str] = field(default_factory=list)  # names the headline figures average over
    relevance: str | None = None  # the topical measure a ranked row must beat chance on
    chance_retriever: str | None = None
    tradeoff: tuple[str, str] | None = None  # (violation measure, topical measure) of its trade-off plot

    @property
    def first(self) -> str | None:
        return self.measures[0] if self.measures else None

    @property
    def other(self) -> bool:
        return self.name == OTHER_SUITE

    @property
    def ranked(self) -> list[SuiteRow]:
        return [r for r in self.rows if r.ranked]

    @property
    def apart(self) -> list[SuiteRow]:
        return [r for r in self.rows if not r.ranked and not r.chance]

    @property
    def chance(self) -> list[SuiteRow]:
        return [r for r in self.rows if r.chance]

    @property
    def outside_headline(self) -> list[str]:
        """Benchmarks of the table that no headline figure averages (too few rows ran them)."""
        return [s.name for s in self.benchmarks if s.name not in self.headline_benchmarks]


@dataclass
class Leaderboard:
    records: list[ResultRecord]
    benchmarks: list[BenchmarkComparison]
    suites: list[SuiteComparison]
    sweeps: dict[str, list[Mapping[str, Any]]]  # benchmark → its stored sweeps
    per_query: PerQuery
    n_resamples: int = N_RESAMPLES
    alpha: float = ALPHA

    @property
    def harness_versions(self) -> list[str]:
        return sorted({r.harness_version for r in self.records})

    @property
    def sweep_only(self) -> dict[str, list[Mapping[str, Any]]]:
        """The sweeps of benchmarks that have no leaderboard results (often train/dev splits)."""
        shown = {b.name for b in self.benchmarks}
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


def _prefer(g: ConfigGroup, cur: ConfigGroup, shown: str | None) -> bool:
    if (g.benchmark_version == shown) != (cur.benchmark_version == shown):
        return g.benchmark_version == shown
    return (g.newest.created_at, g.newest.id or 0) > (cur.newest.created_at, cur.newest.id or 0)


def headline_set(coverage: Mapping[str, frozenset[str]], order: Sequence[str]) -> frozenset[str]:
    """The benchmarks a table's headline figures average over, so that every ranked row is
    measured on the same ones (MTEB's users' first complaint is rows averaged over different task
    sets). Among the rows' own coverage sets, the one that maximises *rows run on all of it ×
    its size* (ties: the larger set, then the earlier benchmarks of ``order``): a benchmark only one
    submission ran drops out of the headline rather than every other row, and a row that skipped
    a benchmark the field ran is shown apart rather than the benchmark dropped."""
    best: tuple[int, int, tuple[int, ...]] | None = None
    chosen: frozenset[str] = frozenset()
    for cand in sorted(set(coverage.values()), key=lambda c: sorted(order.index(b) for b in c)):
        if not cand:
            continue
        rows = sum(1 for c in coverage.values() if cand <= c)
        score = (rows * len(cand), len(cand), tuple(-order.index(b) for b in sorted(cand, key=order.index)))
        if best is None or score > best:
            best, chosen = score, cand
    return chosen


Values = Callable[[ConfigGroup], Mapping[str, Mapping[str, float]]]  # a row's per-query values


def chance_floor(chance: ConfigGroup | None, measure: str) -> float | None:
    """The upper end of the chance row's 95% interval on ``measure`` (its bootstrap CI with one
    seed; with several, the highest per-seed mean): what a row without per-query values must be
    above (:func:`below_chance`)."""
    if chance is None:
        return None
    agg = chance.measure(measure)
    if agg.mean is None:
        return None
    if agg.ci is not None:
        return agg.ci[1]
    return max(agg.values) if agg.values else agg.mean


@dataclass(frozen=True)
class ChanceCheck:
    """One row's topical figures beside the chance row's, on the same queries."""

    mine: Mapping[str, float]  # the row's per-query values (empty: none stored)
    chance: Mapping[str, float]  # the chance row's
    mine_mean: float | None
    chance_mean: float | None
    chance_high: float | None  # the chance row's upper 95% bound (chance_floor)


def below_chance(checks: Sequence[ChanceCheck], measure: str, *, n_resamples: int = N_RESAMPLES,
                 alpha: float = ALPHA) -> list[str]:
    """For each row, why it is below chance on ``measure`` ("" when it is above, or when nothing
    can be compared). A row is above chance when its mean is above the chance row's and a
    two-sided paired randomisation test on their per-query values rejects equality at ``alpha``
    (a ranking that hits a relevant document on a handful of queries is not above chance); a row
    without per-query values, when its mean is above the chance row's upper 95% bound."""
    tested = [i for i, c in enumerate(checks) if c.mine and c.chance]
    pvalues = dict(zip(tested, paired_randomization_tests([(checks[i].mine, checks[i].chance) for i in tested],
                                                          n_resamples=n_resamples, seed=0)))
    out = []
    for i, c in enumerate(checks):
        if c.mine_mean is None or c.chance_mean is None:
            out.append("")
        elif i in pvalues:
            p = pvalues[i]
            above = c.mine_mean > c.chance_mean and p == p and p < alpha
            out.append("" if above else f"below chance on relevance: {measure} {c.mine_mean:.3f} against the chance "
                                         f"row's {c.chance_mean:.3f} (paired randomisation test p = {p:.2g})")
        elif c.chance_high is not None:
            out.append("" if c.mine_mean > c.chance_high else
                       f"below chance on relevance: {measure} {c.mine_mean:.3f}, not above the chance row's upper "
                       f"95% bound {c.chance_high:.3f}")
        else:
            out.append("")
    return out


def rank_intervals(columns: Sequence[Mapping[str, float]], means: Sequence[float | None], higher: bool, *,
                   n_resamples: int = N_RESAMPLES, alpha: float = ALPHA) -> list[tuple[int, int]]:
    """The rank interval of each row: from 1 + the rows significantly better than it to the
    number of rows − the rows significantly worse, by two-sided paired randomisation tests of
    every pair of rows on their per-query values (``columns``), Holm-adjusted over all the pairs.
    A rank is a single number only when the tests separate the row from every other; a row without
    per-query values is separated from none."""
    n = len(columns)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    pvalues = paired_randomization_tests([(columns[i], columns[j]) for i, j in pairs],
                                         n_resamples=n_resamples, seed=0)
    adjusted = holm({f"{i},{j}": p for (i, j), p in zip(pairs, pvalues)})
    above = [0] * n  # rows significantly better
    below = [0] * n  # rows significantly worse
    for i, j in pairs:
        p = adjusted[f"{i},{j}"]
        a, b = means[i], means[j]
        if not (p == p and p < alpha) or a is None or b is None or a == b:
            continue
        win, lose = (i, j) if is_better(a, b, higher) else (j, i)
        above[lose] += 1
        below[win] += 1
    return [(1 + above[i], n - below[i]) for i in range(n)]


def _macro_column(per_bench: Mapping[str, ConfigGroup], benchmarks: Sequence[str], measure: str,
                  values: Values) -> dict[str, float]:
    """A row's per-query values of ``measure`` over ``benchmarks``, keyed ``benchmark\x1fquery``
    and weighted so that their mean is the mean of the per-benchmark means (each benchmark counts
    once, as in the table): the paired test of two such columns tests the difference of the
    table's figures."""
    cols = [(b, values(per_bench[b]).get(measure) or {}) for b in benchmarks]
    total = sum(len(c) for _, c in cols)
    nonempty = sum(1 for _, c in cols if c)
    out: dict[str, float] = {}
    for b, col in cols:
        if col:
            w = total / (nonempty * len(col))
            out.update({f"{b}\x1f{q}": float(v) * w for q, v in col.items()})
    return out


def suite_comparison(name: str, description: str, measures: Sequence[str],
                     secs: Sequence[BenchmarkSection], *, relevance: str | None = None,
                     chance: str | None = None, tradeoff: tuple[str, str] | None = None,
                     values: Values | None = None, n_resamples: int = N_RESAMPLES) -> SuiteComparison:
    """Per configuration label, per benchmark, the row of the shown version (else the newest);
    headline measures averaged over the table's headline benchmarks (:func:`headline_set`) for the
    rows run on all of them, ordered by the first headline measure, best first, then by label,
    each with its rank interval (:func:`rank_intervals`, from ``values``, a row's per-query values);
    then the rows that are not ranked (:attr:`SuiteRow.why_apart`): those that lack a headline
    benchmark (by how many they lack, with no headline figure), reported figures, and rows whose
    ``relevance`` measure is not above the ``chance`` row's (:func:`below_chance`); then the chance
    row itself."""
    table: dict[str, dict[str, ConfigGroup]] = {}
    for s in secs:
        shown = s.info.version if s.info is not None else None
        for g in s.groups:
            cur = table.setdefault(g.display, {}).get(s.name)
            if cur is None or _prefer(g, cur, shown):
                table[g.display][s.name] = g
    order = [s.name for s in secs]

    def weakest(per: Mapping[str, ConfigGroup]) -> str:
        return max((g.trust for g in per.values()), key=LEVELS.index, default=REPRODUCED)

    def is_chance(per: Mapping[str, ConfigGroup]) -> bool:
        return chance is not None and next(iter(per.values())).retriever == chance

    checked = {label: frozenset(per) for label, per in table.items()
               if weakest(per) != REPORTED and not is_chance(per)}
    core = headline_set(checked or {label: frozenset(per) for label, per in table.items()}, order)
    first = measures[0] if measures else None
    shown_measures = list(dict.fromkeys([*measures, *([relevance] if relevance else []), *(tradeoff or ())]))
    chance_rows = {b: g for per in table.values() if is_chance(per) for b, g in per.items()}
    rows = []
    for label, per_bench in table.items():
        missing = [b for b in order if b in core and b not in per_bench]
        means: dict[str, float | None] = {}
        counts: dict[str, int] = {}
        for m in shown_measures:
            vals = [] if missing else [v for v in (per_bench[b].measure(m).mean for b in order if b in core)
                                       if v is not None]
            means[m], counts[m] = _mean(vals), len(vals)
        per_benchmark = {s.name: per_bench[s.name].measure(first).mean if first and s.name in per_bench else None
                         for s in secs}
        any_group = next(iter(per_bench.values()))
        row = SuiteRow(label, len(per_bench), means, counts, per_benchmark, missing, weakest(per_bench),
                       any_group.encoder, any_group.llm,
                       " ".join(dict.fromkeys(g.note for g in per_bench.values() if g.note)),
                       any_group.retriever, is_chance(per_bench))
        rows.append(row)
    if relevance and chance_rows:
        others = [r for r in rows if not r.chance]
        checks = [_chance_check(table[r.label], chance_rows, [b for b in order if b in core], relevance, values)
                  for r in others]
        for r, why in zip(others, below_chance(checks, relevance, n_resamples=n_resamples)):
            r.below_chance = why

    def rank(r: SuiteRow) -> tuple[Any, ...]:
        if r.chance:
            return (2, 0, False, r.label)
        if not r.ranked:
            return (1, len(r.missing), r.trust == REPORTED, r.label)
        if first is None or r.means[first] is None:
            return (0, 0, (1, 0.0), r.label)
        v = r.means[first]
        return (0, 0, (0, -v if measure_higher_is_better(first) else v), r.label)

    rows.sort(key=rank)
    ranked = [r for r in rows if r.ranked]
    if first is not None and values is not None and ranked:
        core_order = [b for b in order if b in core]
        cols = [_macro_column(table[r.label], core_order, first, values) for r in ranked]
        for r, interval in zip(ranked, rank_intervals(cols, [r.means[first] for r in ranked],
                                                      measure_higher_is_better(first), n_resamples=n_resamples)):
            r.rank = interval
    return SuiteComparison(name, description, list(measures), list(secs), rows, [b for b in order if b in core],
                           relevance, chance, tradeoff)


def _chance_check(per_bench: Mapping[str, ConfigGroup], chance: Mapping[str, ConfigGroup], benchmarks: Sequence[str],
                  measure: str, values: Values | None) -> ChanceCheck:
    """A suite row beside the chance row on ``measure``, over the headline benchmarks both have a
    figure on (means of the per-benchmark means; per-query values weighted as in those means)."""
    both = [b for b in benchmarks if b in per_bench and b in chance
            and per_bench[b].measure(measure).mean is not None and chance[b].measure(measure).mean is not None]
    if not both:
        return ChanceCheck({}, {}, None, None, None)
    highs = [chance_floor(chance[b], measure) for b in both]
    mine = _macro_column(per_bench, both, measure, values) if values is not None else {}
    theirs = _macro_column(chance, both, measure, values) if values is not None else {}
    return ChanceCheck(mine, theirs, _mean([per_bench[b].measure(measure).mean for b in both]),  # type: ignore[misc]
                       _mean([chance[b].measure(measure).mean for b in both]),  # type: ignore[misc]
                       _mean(highs) if all(h is not None for h in highs) else None)  # type: ignore[arg-type]


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
    """Each row's trust level: the weakest of its results' (:func:`harness.trust.trust_of`). An
    imported result is *verified* only when every headline figure of its benchmark's table (its
    home suite's headline, else the benchmark's first measure) was recomputed here, and
    *reproduced* only when it verified and ``reproductions`` (the latest run of the shipped matrix)
    recomputed its figures here and matched (:func:`harness.trust.reproduces`)."""
    matched = matched_figures(reproductions)
    for s in sections:
        home = home_suite(s.name, s.task, specs)
        headline = list(home.headline) if home is not None and home.headline else s.measures[:1]
        for g in s.groups:
            levels = [trust_of(r.extra, reproduces(r.spec_hash, r.benchmark_version, r.measures, matched),
                               [m for m in headline if m in r.measures]) for r in g.records]
            g.trust = max(levels, key=LEVELS.index) if levels else REPRODUCED


CHANCE_LEVEL = "chance level"


def order_rows(s: BenchmarkSection, home: SuiteSpec | None, values: Values,
               n_resamples: int = N_RESAMPLES) -> tuple[str | None, dict[int, str]]:
    """Order a benchmark's rows as its page shows them by default, and say why each unranked row is
    not ranked: the ranked rows by the measure that orders its home suite's table (the suite's
    first headline measure, when the rows have it; else the benchmark's first measure, which then
    heads the columns), best first; then rows below chance on the suite's ``relevance`` measure
    (:func:`below_chance`), the chance row, and reported figures. Returns the ordering measure and
    ``{row index: why it is not ranked}``."""
    present = {m for g in s.groups for r in g.records for m in r.measures}
    rank_measure = home.headline[0] if home is not None and home.headline and home.headline[0] in present else None
    if rank_measure is not None and rank_measure in s.measures:
        s.measures.remove(rank_measure)
    if rank_measure is not None:
        s.measures.insert(0, rank_measure)
    rank_measure = rank_measure or (s.measures[0] if s.measures else None)
    chance = home.chance if home is not None else None
    relevance = home.relevance if home is not None else None
    why: dict[int, str] = {}  # by id() of the group, before the groups are sorted
    base = next((g for g in s.groups if chance is not None and g.retriever == chance), None)
    for g in s.groups:
        if chance is not None and g.retriever == chance:
            why[id(g)] = CHANCE_LEVEL
        elif g.trust == REPORTED:
            why[id(g)] = "reported figures, not checked here"
    if base is not None and relevance is not None:
        others = [g for g in s.groups if id(g) not in why]
        theirs = values(base).get(relevance) or {}
        checks = [ChanceCheck(values(g).get(relevance) or {}, theirs, g.measure(relevance).mean,
                              base.measure(relevance).mean, chance_floor(base, relevance)) for g in others]
        for g, w in zip(others, below_chance(checks, relevance, n_resamples=n_resamples)):
            if w:
                why[id(g)] = w

    def place(g: ConfigGroup) -> int:
        w = why.get(id(g), "")
        return 0 if not w else 3 if g.trust == REPORTED else 2 if w == CHANCE_LEVEL else 1

    higher = measure_higher_is_better(rank_measure) if rank_measure else True
    s.groups.sort(key=lambda g: (place(g), _sort_value(g.measure(rank_measure), higher) if rank_measure
                                 else (0, 0.0), g.display, g.benchmark_version))
    return rank_measure, {i: why[id(g)] for i, g in enumerate(s.groups) if id(g) in why}


def compare(store: Store, *, n_resamples: int = N_RESAMPLES,
            include: Callable[[ResultRecord], bool] | None = None) -> Leaderboard:
    """Every comparison the leaderboard shows, from the store and the registered suites; with
    ``include``, only the results it accepts (``leaderboard --no-reference`` leaves the shipped
    reference results out)."""
    records = store.results()
    if include is not None:
        records = [r for r in records if include(r)]
    sections = collect(store, records)
    specs = declared_suites()
    assign_trust(sections, store.reproductions(shipped=True), specs)
    per_query = PerQuery(store)
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
        reference = spec.reference if spec is not None else None
        tests, refs = significance(s.groups, pq, measures, baselines=baselines, reference=reference,
                                   n_resamples=n_resamples)
        ranks: dict[int, tuple[int, int]] = {}
        ranked = [i for i in range(len(s.groups)) if i not in standing]
        if rank_measure is not None and ranked:
            intervals = rank_intervals([pq[i].get(rank_measure) or {} for i in ranked],
                                       [s.groups[i].measure(rank_measure).mean for i in ranked],
                                       measure_higher_is_better(rank_measure), n_resamples=n_resamples)
            ranks = dict(zip(ranked, intervals))
        benchmarks.append(BenchmarkComparison(
            s, measures, pq, tests, refs, baselines, reference, spec.name if spec is not None else None,
            rank_measure, standing, ranks, home.relevance if home else None, home.chance if home else None,
            home.tradeoff if home else None))
    return Leaderboard(records, benchmarks, suite_comparisons(sections, specs, values=per_query.group, n_resamples=n_resamples), sweeps, per_query, n_resamples)
