"""The leaderboard's rows: stored results grouped per retriever configuration, and the suites' declarations.

* :class:`ConfigGroup`: one configuration's results on one benchmark (one per seed) from one *slot*
  (:func:`slot_of`: computed here, or one import source), each measure aggregated over the seeds
  (:class:`Aggregate`);
* :func:`shown_names`: the name each row is shown by, one per (label, spec hash, slot), never the
  name of another row;
* :func:`may_be_chance`: whether a row may be the chance level;
* :func:`trust_rank`, :func:`trust_class`: the trust levels of :mod:`harness.store.trust` in their
  order, whatever levels it declares;
* :class:`BenchmarkSection`: a benchmark's rows and its headline measures;
* :class:`SuiteSpec`: a suite as the registry declares it (headline, baselines, comparator, chance);
* how names are shown: a model's short name, a local folder's name, a query slice.

:func:`reports.compare.collect` builds the rows from the store; :mod:`reports.ranking` orders and
tests them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Sequence, TypeVar

from harness.core.registry import POOL_REFERENCE_NAMES
from harness.measures import sort_key
from harness.store import trust as _trust
from harness.store.results import BenchmarkInfo, ResultRecord
from harness.store.trust import REPORTED, REPRODUCED, checked_measures, from_run_file, origin

from .text import finite


# --------------------------------------------------------------------------------------------
# measures and names


def on_pool(rec: ResultRecord) -> bool:
    """Whether ``rec`` belongs to the second-stage track (:mod:`reports.second_stage`), never to an
    ordinary table: a ranking of a frozen candidate pool (its spec names the pool: a reranker, or a
    run file scored with ``--pool``) or one of a pool's reference rows."""
    spec = rec.spec if isinstance(rec.spec, Mapping) else {}
    return bool(spec.get("pool")) or rec.retriever in POOL_REFERENCE_NAMES


def measure_sort_key(name: str) -> tuple[int, int, str]:
    """Column order when a benchmark has no stored default measures (the measures' own order)."""
    return sort_key(name)


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




# --------------------------------------------------------------------------------------------
# trust levels, whatever harness.store.trust declares


def trust_rank(level: str) -> int:
    """A trust level's place in :data:`harness.store.trust.LEVELS` (best first, read when called, so
    a level added there is ordered as it is declared); a level it does not declare comes last."""
    levels = tuple(_trust.LEVELS)
    return levels.index(level) if level in levels else len(levels)


def weakest_level(levels: Iterable[str], default: str = REPRODUCED) -> str:
    """The weakest of ``levels`` (:func:`trust_rank`); ``default`` when there are none."""
    return max(levels, key=trust_rank, default=default)


def trust_class(level: str) -> str:
    """The CSS class of a trust badge: ``trust-`` and the level's name as a slug
    (``reproduced blind`` → ``trust-reproduced-blind``)."""
    return "trust-" + (re.sub(r"[^a-z0-9]+", "-", str(level).lower()).strip("-") or "unknown")


def trust_description(level: str) -> str:
    """What a trust level means (:data:`harness.store.trust.DESCRIPTIONS`); "" for one it does not describe."""
    return str(getattr(_trust, "DESCRIPTIONS", {}).get(level, ""))


# --------------------------------------------------------------------------------------------
# slots: where a row's results come from


OWN_SLOT = ""  # the results computed here (no extra["origin"])
REFERENCE_SLOT = "reference:"  # + the bundle id: the shipped reference results
IMPORT_SLOT = "import:"  # + the source: the results of one imported file


def slot_of(rec: ResultRecord) -> str:
    """The slot a result is grouped in: :data:`OWN_SLOT` for a result computed here (no
    ``extra["origin"]``, :func:`harness.store.trust.origin`); for an import, its shipped reference
    bundle (``origin["reference"]``, the bundle id), else the source it was read from
    (``origin["source"]``). A row averages the seeds of one slot only: an import never joins the
    seeds computed here, nor those of another file."""
    o = origin(rec.extra if isinstance(rec.extra, Mapping) else None)
    if o is None:
        return OWN_SLOT
    if o.get("reference"):
        return REFERENCE_SLOT + str(o["reference"])
    return IMPORT_SLOT + str(o.get("source") or "")


def slot_words(slot: str) -> str:
    """How a row of an imported slot is named beside its label: ``reference`` (the shipped bundle),
    ``from <file name>`` (the file's own name, never the folder it was read from); "" for results
    computed here."""
    if slot.startswith(REFERENCE_SLOT):
        return "reference"
    if slot.startswith(IMPORT_SLOT):
        source = slot[len(IMPORT_SLOT):]
        name = re.split(r"[\\/]", source.rstrip("/\\"))[-1] or "a file"
        return "from " + (name if len(name) <= 60 else name[:57] + "...")
    return ""


K = TypeVar("K", bound=Hashable)
NAME_ROUNDS = 16  # rounds of disambiguation before every row is named by its full digest


def _digest(key: Hashable) -> str:
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()


def shown_names(keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """The name the board shows each row by, for keys ``(label, spec hash, slot)`` (one row per key
    on every page: the same configuration computed here and read from a file are two rows).

    A label is shown as it is when it names one key; a label of several spec hashes is followed by
    the row's ``(hash6)``; a label in several slots names its imported rows' slot too
    (``bm25 (reference)``, ``bm25 (from results.jsonl)``). Then, against every shown name, until
    no two rows share one: the rows whose names clash (a label written as another row's shown name,
    ``bm25 (9868ca)``, or two files of one name) all get `` #`` and a digest of their key, longer
    each round; after :data:`NAME_ROUNDS` rounds every row is named ``label #<full digest>``,
    which no two keys share. No row keeps a name another row is shown by, so no row can show
    another's figures, page or command."""
    ordered = sorted(set(keys))
    hashes: dict[str, set[str]] = {}
    slots: dict[str, set[str]] = {}
    for label, h, slot in ordered:
        hashes.setdefault(label, set()).add(h)
        slots.setdefault(label, set()).add(slot)
    names: dict[tuple[str, str, str], str] = {}
    for key in ordered:
        label, h, slot = key
        name = label
        if len(hashes[label]) > 1:
            name += f" ({h[:6]})"
        if slot != OWN_SLOT and len(slots[label]) > 1:
            name += f" ({slot_words(slot)})"
        names[key] = name
    return _unique(names, NAME_ROUNDS)


def _unique(names: dict[K, str], rounds: int) -> dict[K, str]:
    for n in range(1, rounds + 1):
        count = Counter(names.values())
        clash = [k for k in names if count[names[k]] > 1]
        if not clash:
            return names
        for k in clash:
            names[k] = f"{names[k]} #{_digest(k)[:min(64, 4 + 4 * n)]}"
    if len(set(names.values())) == len(names):
        return names
    # every name is its key's label and a fixed-length digest: no two keys share one
    return {k: f"{k[0] if isinstance(k, tuple) and k else ''} #{_digest(k)}" for k in names}


# --------------------------------------------------------------------------------------------
# what the suites declare


# the former name of a suite's ``comparator`` key, still read from suites that declare it
LEGACY_COMPARATOR_KEY = "reference"


@dataclass(frozen=True)
class SuiteSpec:
    """A suite as the leaderboard reads it from :func:`harness.registry.suites`.

    Besides ``description`` and ``benchmarks``, a suite may declare ``headline`` (the measures of
    its overview table, the first of which orders the rows; a suite without one has no table),
    ``baselines`` (the retrievers whose best row every row of its benchmarks is tested against, ‡)
    and ``comparator`` (the retriever whose best row is the other row they are tested against, †).
    A suite from an older plug-in that declares the comparator as ``reference`` (its former name)
    is read the same way."""

    name: str
    description: str = ""
    benchmarks: tuple[str, ...] = ()
    headline: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()
    comparator: str | None = None
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
                   names("baselines"), one("comparator") or one(LEGACY_COMPARATOR_KEY), one("relevance"),
                   one("chance"),
                   (pair[0], pair[1]) if len(pair) == 2 else None)

    @property
    def compares(self) -> bool:
        return bool(self.baselines) or self.comparator is not None



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
    display: str = ""  # the name every page shows it by (shown_names: no other row's)
    trust: str = REPRODUCED  # the weakest trust level of its results (harness.store.trust)
    slot: str = OWN_SLOT  # where its results come from (slot_of): all of them from the same one

    @property
    def own(self) -> bool:
        """Computed here (no result of it imported)."""
        return self.slot == OWN_SLOT

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
        """The figures checked here on every seed (:func:`harness.store.trust.checked_measures`):
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


# --------------------------------------------------------------------------------------------
# where a row is shown, and which of two results of one configuration and seed


def home_suite(name: str, task: str, specs: Sequence[SuiteSpec]) -> SuiteSpec | None:
    """The suite a benchmark is shown under: the first suite with a headline that lists it, else
    the suite named after its task (whose headline the ``other`` table borrows)."""
    base = base_name(name)
    listed = next((s for s in specs if s.headline and base in s.benchmarks), None)
    return listed or next((s for s in specs if s.name == task), None)


def may_be_chance(g: ConfigGroup) -> bool:
    """Whether a row of the suite's ``chance`` retriever may be the chance level: its results were
    computed here (not a run file scored here: its rankings came from elsewhere), or they are the
    shipped reference bundle's and verified (its trust, given by :func:`reports.compare.assign_trust`,
    is not *reported*). A row of that retriever read from any other file is an ordinary row: a
    crafted ranking never moves the chance level."""
    if g.slot == OWN_SLOT:
        return not any(from_run_file(r.extra) for r in g.records)
    return g.slot.startswith(REFERENCE_SLOT) and g.trust != REPORTED


def chance_preference(g: ConfigGroup) -> tuple[int, str, str]:
    """Which chance row is the chance level when there are several: the one computed here before
    the reference bundle's, then by name and benchmark version."""
    return (0 if g.slot == OWN_SLOT else 1, g.display, g.benchmark_version)


def shown_over(a: ResultRecord, b: ResultRecord) -> bool:
    """Whether a row shows ``a`` rather than ``b``, two results of one configuration and seed in one
    slot (:func:`slot_of`): a result computed here before any import, and the most recent of those
    (its date is this store's); between imports, one that verified before one that did not, then
    the smaller key. Nothing a file supplies (its date, the order of imports) decides between
    imports."""
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
