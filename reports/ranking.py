"""How the leaderboard's rows (:mod:`reports.rows`) are ranked and tested.

* :func:`significance`: every row of a benchmark against the best *comparator* row and the best
  *baseline* row, its two yardsticks (:class:`PairedTest`: a two-sided paired randomisation test on
  per-query values, Holm-adjusted across the rows compared with the same yardstick on the same
  measure);
* :func:`rank_intervals`: a rank interval per row from paired tests of every pair of rows;
* :func:`below_chance`: whether a row's topical quality is above the chance row's
  (:class:`ChanceCheck`, :func:`chance_floor`);
* :func:`lacking`: whether a row has what ranking it needs (the measure and its per-query values);
* :func:`order_rows`: a benchmark page's default order of its rows and why a row is not ranked;
* :func:`suite_comparison`: one overview table (:class:`SuiteComparison` of :class:`SuiteRow`),
  its headline figures averaged over the same benchmarks for every ranked row
  (:func:`headline_set`).

Nothing here reads the store; the rows come from :func:`reports.compare.collect`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.measures import parse_measure
from harness.measures.stats import holm, paired_randomization_tests
from harness.store.trust import REPORTED, REPRODUCED

from .rows import (Aggregate, BenchmarkSection, ConfigGroup, SuiteSpec, chance_preference, may_be_chance,
                   weakest_level)

ALPHA = 0.05
N_RESAMPLES = 10_000
# The two yardsticks every row is tested against (a PairedTest's kind): the best row of the
# suite's declared comparator retriever (†), and the best row of any declared baseline (‡). The
# values are words the outputs write (a JSON table's "against" values and the keys of its
# "references", the sig-<kind> class of a mark on the pages), so they stay as they were.
COMPARATOR, BASELINE = "reference", "baseline"
# The overview table of stored benchmarks that no suite with a headline lists.
OTHER_SUITE = "other"
CHANCE_LEVEL = "chance level"
BELOW_CHANCE = "below chance on relevance"  # how a row's reason to be listed apart begins (below_chance)
REPORTED_WHY = "reported figures, not checked here"


# --------------------------------------------------------------------------------------------
# measures and sort keys


def measure_higher_is_better(name: str) -> bool:
    """Direction of a measure; names the harness does not know are taken as higher-is-better."""
    try:
        return parse_measure(name).higher_is_better
    except ValueError:
        return True


def is_better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


def sort_value(agg: Aggregate, higher: bool) -> tuple[int, float]:
    """A sort key that lists a row best first on a measure, a row without a figure last."""
    if agg.mean is None:
        return (1, 0.0)
    return (0, -agg.mean if higher else agg.mean)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# --------------------------------------------------------------------------------------------
# each row against the two yardsticks


@dataclass(frozen=True)
class PairedTest:
    """One row against one yardstick row (the best comparator or baseline row) on one measure."""

    kind: str  # COMPARATOR or BASELINE
    yardstick: str  # the display label of the row tested against
    p_raw: float  # two-sided paired randomisation test on the queries both rows scored
    p_adj: float  # Holm-adjusted across the rows tested against this yardstick on this measure
    family: int  # the number of tests in that Holm family
    better: bool  # the row's mean is better than the yardstick row's
    wins: int  # queries on which the row's value is better than the yardstick row's
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
                 measures: Sequence[str], *, baselines: Sequence[str] = (), comparator: str | None = None,
                 n_resamples: int = N_RESAMPLES
                 ) -> tuple[dict[tuple[int, str], list[PairedTest]], dict[str, dict[str, int]]]:
    """Paired randomisation tests of every row against the best row of the ``comparator``
    retriever and against the best row of the ``baselines`` on each measure, on per-query values
    (means over seeds), Holm-corrected across the rows compared with the same yardstick on the same
    measure. A yardstick row is a trusted one (:meth:`ConfigGroup.trusted_for` the measure:
    reproduced, or verified on it): a reported figure is tested, never the yardstick. Returns
    ``{(row, measure): [PairedTest]}`` and ``{measure: {COMPARATOR/BASELINE: yardstick row}}``."""
    out: dict[tuple[int, str], list[PairedTest]] = {}
    yardsticks: dict[str, dict[str, int]] = {}
    plans: list[tuple[str, str, int, list[int], dict[int, float], bool]] = []
    needed: dict[tuple[int, int, str], int] = {}  # the two-sided test is symmetric: one per pair
    for m in measures:
        higher = measure_higher_is_better(m)
        means = {i: g.measure(m).mean for i, g in enumerate(groups)}
        # (a row whose per-query values are missing or fewer than its mean is over is tested with
        # nothing: its missing queries are never read as ties)
        cands = [i for i in range(len(groups)) if means[i] is not None and per_query[i].get(m)
                 and not _short(groups[i], per_query[i].get(m) or {}, m)]
        fin = {i: float(means[i]) for i in cands}  # type: ignore[arg-type]
        trusted = [i for i in cands if groups[i].trusted_for(m)]
        chosen = {
            COMPARATOR: _best_index((i for i in trusted if groups[i].retriever == comparator), fin, higher)
            if comparator is not None else None,
            BASELINE: _best_index((i for i in trusted if groups[i].retriever in baselines), fin, higher),
        }
        yardsticks[m] = {k: v for k, v in chosen.items() if v is not None}
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
    return out, yardsticks


# --------------------------------------------------------------------------------------------
# rank intervals


Values = Callable[[ConfigGroup], Mapping[str, Mapping[str, float]]]  # a row's per-query values


def rank_intervals(columns: Sequence[Mapping[str, float]], means: Sequence[float | None], higher: bool, *,
                   n_resamples: int = N_RESAMPLES, alpha: float = ALPHA) -> list[tuple[int, int]]:
    """The rank interval of each row: from 1 + the rows significantly better than it to the
    number of rows − the rows significantly worse, by two-sided paired randomisation tests of
    every pair of rows on their per-query values (``columns``), Holm-adjusted over all the pairs.
    A rank is a single number only when the tests separate the row from every other. Missing
    per-query values are never read as a tie: rows are ranked on per-query values only when every
    row has them (a ValueError when some have none; :func:`lacking` lists such a row apart before
    it gets here), and when none has them (a store written before they were kept) nothing is
    tested and every interval spans the table."""
    n = len(columns)
    if any(columns) and not all(columns):
        raise ValueError("rank intervals: a row without per-query values cannot be ranked beside rows with them "
                         "(it would be separated from none); list it apart first (reports.ranking.lacking)")
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


# --------------------------------------------------------------------------------------------
# the chance level


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
                 alpha: float = ALPHA, words: tuple[str, str] = (BELOW_CHANCE, "the chance row")) -> list[str]:
    """For each row, why it is below chance on ``measure`` ("" when it is above, or when nothing
    can be compared). A row is above chance when its mean is above the chance row's and a
    two-sided paired randomisation test on their per-query values rejects equality at ``alpha``
    (a ranking that hits a relevant document on a handful of queries is not above chance); a row
    without per-query values, when its mean is above the chance row's upper 95% bound. ``words``: how
    the reasons say what the row is and what it is compared with (the second-stage track compares
    a reranker with its pool shuffled: :mod:`reports.second_stage`)."""
    what, level = words
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
            out.append("" if above else f"{what}: {measure} {c.mine_mean:.3f} against {level}'s "
                                         f"{c.chance_mean:.3f} (paired randomisation test p = {p:.2g})")
        elif c.chance_high is not None:
            out.append("" if c.mine_mean > c.chance_high else
                       f"{what}: {measure} {c.mine_mean:.3f}, not above {level}'s upper 95% bound {c.chance_high:.3f}")
        else:
            out.append("")
    return out


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


# --------------------------------------------------------------------------------------------
# what ranking a row needs


def _short(g: ConfigGroup, col: Mapping[str, float], measure: str) -> int:
    """How many values the row's per-query column of ``measure`` lacks against the count its mean is
    over (0 when complete)."""
    n = max(g.measure(measure).n, default=0)
    return max(0, n - len(col))


def lacking(g: ConfigGroup, measures: Iterable[str | None], peers: Sequence[ConfigGroup],
            values: Values | None) -> str:
    """Why ``g`` cannot be ranked beside ``peers`` (the rows it would be ranked with, itself among
    them) on ``measures`` (the measure that orders the table, and the one a row must beat chance
    on): "" when it can. A measure some peer has a figure of must be among the row's figures
    ("no Sat@10": a file that leaves its headline figure out is never ranked on the others); where
    a peer has per-query values of it, the row needs them too, for every query its mean is over
    ("no per-query values of Sat@10"): a row without them would escape the tests against chance and
    separate from no row, so it would be ranked on a mean nobody tested. Where no peer has
    per-query values of a measure (a store written before they were kept), nothing is required of
    them."""
    for m in dict.fromkeys(x for x in measures if x):
        if g.measure(m).mean is None and any(p.measure(m).mean is not None for p in peers):
            return f"no {m}"
        if values is None or not any(values(p).get(m) for p in peers):
            continue  # no row to rank has per-query values of it: nothing to require
        col = values(g).get(m) or {}
        if not col:
            return f"no per-query values of {m}"
        short = _short(g, col, m)
        if short:
            n = max(g.measure(m).n, default=0)
            return f"per-query values of {m} for {n - short} of the {n} its mean is over"
    return ""


# --------------------------------------------------------------------------------------------
# a benchmark page's rows


def order_rows(s: BenchmarkSection, home: SuiteSpec | None, values: Values,
               n_resamples: int = N_RESAMPLES) -> tuple[str | None, dict[int, str]]:
    """Order a benchmark's rows as its page shows them by default, and say why each unranked row is
    not ranked: the ranked rows by the measure that orders its home suite's table (the suite's
    first headline measure, when the rows have it; else the benchmark's first measure, which then
    heads the columns), best first; then rows that lack that measure or its per-query values, or
    the ``relevance`` measure the chance test needs (:func:`lacking`), and rows below chance on it
    (:func:`below_chance`); then the chance row, and reported figures. The chance row is a row of
    the suite's ``chance`` retriever computed here or the shipped reference bundle's that verified
    (:func:`reports.rows.may_be_chance`; computed here first); a row of that retriever from any
    other file is an ordinary row, tested against it. Returns the ordering measure and ``{row
    index: why it is not ranked}``."""
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
    levels = sorted((g for g in s.groups if chance is not None and g.retriever == chance and may_be_chance(g)),
                    key=chance_preference)
    base = levels[0] if levels else None
    for g in s.groups:
        if any(g is c for c in levels):
            why[id(g)] = CHANCE_LEVEL
        elif g.trust == REPORTED:
            why[id(g)] = REPORTED_WHY
    peers = [g for g in s.groups if id(g) not in why]
    tested = relevance if base is not None and relevance is not None and base.measure(relevance).mean is not None \
        else None
    for g in peers:
        w = lacking(g, (rank_measure, tested), peers, values)
        if w:
            why[id(g)] = w
    if base is not None and tested is not None:
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
    s.groups.sort(key=lambda g: (place(g), sort_value(g.measure(rank_measure), higher) if rank_measure
                                 else (0, 0.0), g.display, g.benchmark_version))
    return rank_measure, {i: why[id(g)] for i, g in enumerate(s.groups) if id(g) in why}


# --------------------------------------------------------------------------------------------
# the overview tables


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
    lacks: str = ""  # what ranking it needs that it lacks on a headline benchmark (lacking; "" when nothing)

    @property
    def complete(self) -> bool:
        """Run on every headline benchmark of its table."""
        return not self.missing

    @property
    def ranked(self) -> bool:
        """Ranked with the others: complete, figures that someone here checked, not the chance
        level, the headline measure and its per-query values on every headline benchmark, and
        topical quality above chance."""
        return (self.complete and self.trust != REPORTED and not self.chance and not self.lacks
                and not self.below_chance)

    @property
    def why_apart(self) -> str:
        """Why the row is not ranked ("" when it is)."""
        if self.chance:
            return "chance level"
        if self.missing:
            return "not run on " + ", ".join(self.missing)
        if self.trust == REPORTED:
            return REPORTED_WHY
        return self.lacks or self.below_chance


@dataclass
class SuiteComparison:
    """One overview table. Its headline figures are means over the same benchmarks for every
    ranked row (:attr:`headline_benchmarks`, decided by the ranked rows: see
    :func:`suite_comparison`); rows that lack one of them (incomplete), rows of reported figures,
    rows without the headline measure or its per-query values and rows below chance on relevance
    are :attr:`apart`, with why, and never ranked above a ranked row; the chance level's row
    (:attr:`chance`) is shown on its own."""

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
    a benchmark the field ran is shown apart rather than the benchmark dropped. ``coverage`` must
    hold the rows that may be ranked only (:func:`suite_comparison` says which): a row the board
    sets apart never votes, so it can never shrink the set to let a row that skipped a benchmark
    be ranked."""
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


def suite_comparison(name: str, description: str, measures: Sequence[str],
                     secs: Sequence[BenchmarkSection], *, relevance: str | None = None,
                     chance: str | None = None, tradeoff: tuple[str, str] | None = None,
                     values: Values | None = None, n_resamples: int = N_RESAMPLES,
                     chance_words: tuple[str, str] = (BELOW_CHANCE, "the chance row")) -> SuiteComparison:
    """Per configuration label, per benchmark, the row of the shown version (else the newest);
    headline measures averaged over the table's headline benchmarks for the rows run on all of
    them, ordered by the first headline measure, best first, then by label, each with its rank
    interval (:func:`rank_intervals`, from ``values``, a row's per-query values); then the rows that
    are not ranked (:attr:`SuiteRow.why_apart`): those that lack a headline benchmark (incomplete:
    by how many they lack, with no headline figure), reported figures, rows without the first
    headline measure or its per-query values on a headline benchmark (:func:`lacking`), and rows
    whose ``relevance`` measure is not above the chance row's (:func:`below_chance`); then the
    chance row itself. ``chance_words``: how a row's reason to be apart names it.

    The chance row is the ``chance`` retriever's row computed here, else the shipped reference
    bundle's that verified (:func:`reports.rows.may_be_chance`); a row of that retriever from any
    other file is an ordinary row, never the chance level.

    Which benchmarks the headline averages over (:attr:`SuiteComparison.headline_benchmarks`) is
    decided by the rows that may be ranked, never by a row the board sets apart. The candidates are
    the rows that are neither the chance row nor reported; :func:`headline_set` of their coverage
    gives a set; a candidate that lacks what ranking needs on it (:func:`lacking`) or is below
    chance over it is set apart and no longer votes, and the set is chosen again from the rows
    left, until no row is set apart (the candidates only shrink, so this ends). The set is thus
    that of the rows left, complete ones (ranked) and incomplete ones (apart as "not run on …")
    alike: a row below chance, reported, the chance row or a row without per-query values cannot
    shrink it so as to rank a row that skipped one of its benchmarks, and every ranked row has a
    figure on each. A row set apart keeps the reason found when it was (its test over the set of
    that round)."""
    table: dict[str, dict[str, ConfigGroup]] = {}
    for s in secs:
        shown = s.info.version if s.info is not None else None
        for g in s.groups:
            cur = table.setdefault(g.display, {}).get(s.name)
            if cur is None or _prefer(g, cur, shown):
                table[g.display][s.name] = g
    order = [s.name for s in secs]
    shown_name = {s.name: s.display or s.name for s in secs}

    def weakest(per: Mapping[str, ConfigGroup]) -> str:
        return weakest_level(g.trust for g in per.values())

    def is_chance(per: Mapping[str, ConfigGroup]) -> bool:
        return chance is not None and all(g.retriever == chance and may_be_chance(g) for g in per.values())

    first = measures[0] if measures else None
    chance_labels = {label for label, per in table.items() if is_chance(per)}
    chance_rows: dict[str, ConfigGroup] = {}  # benchmark → the chance level there (computed here first)
    for label in sorted(chance_labels):
        for b, g in table[label].items():
            if b not in chance_rows or chance_preference(g) < chance_preference(chance_rows[b]):
                chance_rows[b] = g
    tested = relevance if relevance and any(g.measure(relevance).mean is not None for g in chance_rows.values()) \
        else None
    candidates = [label for label, per in table.items() if label not in chance_labels and weakest(per) != REPORTED]
    peers = {b: [table[label][b] for label in candidates if b in table[label]] for b in order}  # before exclusion
    lacks: dict[str, str] = {}
    below: dict[str, str] = {}
    live = list(candidates)
    while True:
        core = headline_set({label: frozenset(table[label]) for label in live}, order)
        core_order = [b for b in order if b in core]
        dropped: set[str] = set()
        for label in live:
            per = table[label]
            for b in core_order:
                w = lacking(per[b], (first, tested), peers[b], values) if b in per else ""
                if w:
                    lacks[label] = f"{w} on {shown_name[b]}"
                    dropped.add(label)
                    break
        rest = [label for label in live if label not in dropped]
        if tested and chance_rows and rest:
            checks = [_chance_check(table[label], chance_rows, core_order, tested, values) for label in rest]
            for label, why in zip(rest, below_chance(checks, tested, n_resamples=n_resamples, words=chance_words)):
                if why:
                    below[label] = why
                    dropped.add(label)
        if not dropped:
            break
        live = [label for label in live if label not in dropped]
    if not live:  # nothing to rank: the figures shown apart average over what the rows that are not chance ran
        core = headline_set({label: frozenset(per) for label, per in table.items() if label not in chance_labels}
                            or {label: frozenset(per) for label, per in table.items()}, order)
    core_order = [b for b in order if b in core]
    if tested and chance_rows:  # (informative only: the rows of reported figures, beside the chance row)
        info = [label for label in table if label not in chance_labels and label not in candidates]
        checks = [_chance_check(table[label], chance_rows, core_order, tested, values) for label in info]
        for label, why in zip(info, below_chance(checks, tested, n_resamples=n_resamples, words=chance_words)):
            if why:
                below[label] = why

    shown_measures = list(dict.fromkeys([*measures, *([relevance] if relevance else []), *(tradeoff or ())]))
    rows = []
    for label, per_bench in table.items():
        missing = [b for b in core_order if b not in per_bench]
        means: dict[str, float | None] = {}
        counts: dict[str, int] = {}
        for m in shown_measures:
            vals = [] if missing else [v for v in (per_bench[b].measure(m).mean for b in core_order)
                                       if v is not None]
            means[m], counts[m] = _mean(vals), len(vals)
        per_benchmark = {s.name: per_bench[s.name].measure(first).mean if first and s.name in per_bench else None
                         for s in secs}
        any_group = next(iter(per_bench.values()))
        row = SuiteRow(label, len(per_bench), means, counts, per_benchmark, missing, weakest(per_bench),
                       any_group.encoder, any_group.llm,
                       " ".join(dict.fromkeys(g.note for g in per_bench.values() if g.note)),
                       any_group.retriever, label in chance_labels, below.get(label, ""), lacks=lacks.get(label, ""))
        rows.append(row)

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
        cols = [_macro_column(table[r.label], core_order, first, values) for r in ranked]
        for r, interval in zip(ranked, rank_intervals(cols, [r.means[first] for r in ranked],
                                                      measure_higher_is_better(first), n_resamples=n_resamples)):
            r.rank = interval
    return SuiteComparison(name, description, list(measures), list(secs), rows, core_order,
                           relevance, chance, tradeoff)
