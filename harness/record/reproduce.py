"""The reproduction matrix (``beyondsim reproduce``): expected figures, recomputed and compared.

The matrix is a TOML file of ``[[row]]`` tables (the shipped one is ``expected.toml`` of the
reference files, :func:`harness.registry.reference_files`)::

    [[row]]
    retriever = "NAME"              # a registered retriever (or module:Class)
    params = { key = value }        # optional; defaults filled in, as `run` does
    benchmark = "NAME"              # a benchmark id or folder; NAME[:N]: its first N judged
                                    # queries (the slice the reference plan's max_queries runs)
    measure = "nDCG@10"
    expected = 0.6912               # the figure
    tolerance = 0.002               # absolute
    kind = "reference"              # "reference": our reference runs, gates the command;
                                    # "published": a paper's figure, reported, never fails it;
                                    # "direction": a paper's claim that one method beats another
    source = "reference run 2026-11-26"   # or "<paper>, Table N"
    quick = true                    # optional (false): one of the cheap rows --quick runs
    reason = "why the value is what it is (say why whenever it changes)"
    seed = 0                        # optional (0)

A ``direction`` row states a paper's claim about two configurations on one benchmark rather than a
figure: ``baseline = { retriever = "dense", params = { … } }`` is the other side, ``claim`` is
``"better"`` (the row's configuration beats the baseline on the measure, in the measure's own
direction) or ``"same"`` (the two differ by at most ``tolerance``), and ``expected`` is the
difference (row − baseline) the paper reports. It is checked on the paired per-query differences
of the two recomputed runs: the 95 % percentile bootstrap interval of their mean (2,000 resamples,
seed 0, :func:`harness.measures.stats.bootstrap_ci`) must exclude 0 on the claimed side (``better``) or lie
inside ``±tolerance`` (``same``): ``OK``, else ``FAIL`` (a paper's claim: reported, never gating).

The shipped matrix is two parts: the reference rows, derived from the bundle and the plan
(:func:`reference_rows`: the bundle's figures, each configuration's tolerance and reason written
once in the plan), and ``expected.toml``, which holds only the hand-written rows, the papers'
figures and claims (:func:`shipped_matrix`).

Every field is checked when the file is read; a bad row is one line,
``<file>: row N: <field>: <message>`` (rows are counted from 1 in file order).

:func:`reproduce` runs each (retriever spec, benchmark, seed) of the selected rows once, with the
runner, into a scratch results store (``<home>/reproduce/results.sqlite``, always recomputed) that
shares ``<home>/cache`` (embeddings, LLM responses) with ordinary runs, then compares each row:
``|got − expected| ≤ min(1e-4, tolerance)`` is ``OK``, ``≤ tolerance`` is ``OKish``, anything
else, a measure that was not computed or a run that failed is ``FAIL`` (with the reason). Rows on
a benchmark that is not on disk are skipped (``SKIP``), as suites skip absent benchmarks. The
compared rows are saved to the user's store (:meth:`harness.store.results.Store.save_reproductions`) with
the spec hash and benchmark version of the recomputed result, which :mod:`harness.store.trust` reads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..data.readers import default_data_dir, missing_files
from ..core.errors import UserError
from ..measures import parse_measure
from ..core.protocols import Progress
from ..core.registry import RegistryError, RetrieverSpec, get_benchmark_loader, looks_like_path, make_spec
from ..run.runner import Runner, Settings
from ..store.results import Store, open_store
from ..core.types import split_slice

OK, OKISH, FAIL, SKIP = "OK", "OKish", "FAIL", "SKIP"
STATUSES = (OK, OKISH, FAIL)  # what a compared row can be (SKIP rows are not compared)
REFERENCE, PUBLISHED, DIRECTION = "reference", "published", "direction"
KINDS = (REFERENCE, PUBLISHED, DIRECTION)
CLAIMS = ("better", "same")
DIRECTION_RESAMPLES = 2000
EXACT = 1e-4  # a difference this small (or within a smaller tolerance) is a match, not an approximation
_SLACK = 1e-12  # float noise when a difference sits on the tolerance itself (0.51 − 0.50 > 0.01)
SCRATCH = Path("reproduce")  # the scratch home, under the home (its own results store)

_REQUIRED = ("retriever", "benchmark", "measure", "expected", "tolerance", "kind", "source", "reason")
_OPTIONAL = ("params", "quick", "seed", "baseline", "claim")
FIELDS = _REQUIRED + _OPTIONAL


class MatrixError(UserError, ValueError):
    """A matrix file that cannot be read: the message is one line naming file, row and field."""


@dataclass(frozen=True)
class Row:
    """One expected figure."""

    index: int  # 1-based position among the file's [[row]] tables
    spec: RetrieverSpec
    benchmark: str
    measure: str
    expected: float
    tolerance: float
    kind: str
    source: str
    reason: str
    quick: bool = False
    seed: int = 0
    baseline: RetrieverSpec | None = None  # a direction row's other side
    claim: str = ""  # a direction row's claim: "better" or "same"

    @property
    def retriever(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        return self.spec.display

    @property
    def key(self) -> str:
        """``retriever:benchmark:measure``, what ``--only`` matches."""
        return f"{self.retriever}:{self.benchmark}:{self.measure}"

    @property
    def paper(self) -> str:
        """The paper of a published or direction row's source (``"CoDeR (…)"`` of ``"CoDeR (…), Table 3"``)."""
        return self.source.split(", ")[0] if self.kind != REFERENCE else ""

    @property
    def table(self) -> str:
        """The table (or section) of the source, after the paper."""
        return self.source.partition(", ")[2] if self.kind != REFERENCE else ""

    @property
    def specs(self) -> list[RetrieverSpec]:
        """The configurations the row needs recomputed: its own, and a direction row's baseline."""
        return [self.spec] + ([self.baseline] if self.baseline is not None else [])


@dataclass
class Outcome:
    """A row compared with its recomputed figure."""

    row: Row
    status: str  # OK | OKish | FAIL | SKIP
    got: float | None = None
    note: str = ""  # why a row failed or was skipped
    spec_hash: str = ""
    benchmark_version: str = ""
    benchmark_name: str = ""  # as the results store names it (a folder path becomes its loader's name)
    interval: tuple[float, float] | None = None  # a direction row: the bootstrap interval of the difference

    @property
    def diff(self) -> float | None:
        return None if self.got is None else self.got - self.row.expected

    @property
    def gates(self) -> bool:
        """Whether this outcome fails the command: a reference row that did not reproduce."""
        return self.status == FAIL and self.row.kind == REFERENCE


# ---------------------------------------------------------------------------------------------
# reading the matrix


def _finite_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number, not {type(v).__name__} {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"must be a finite number, not {v!r}")
    return float(v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"must be a string, not {type(v).__name__} {v!r}")
    if not v.strip():
        raise ValueError("must not be empty")
    return v.strip()


def _check(name: str, v: Any) -> Any:
    """The value of field ``name`` as a row holds it; a ValueError says what is wrong with it."""
    if name in ("retriever", "benchmark", "source", "reason"):
        return _text(v)
    if name == "measure":
        return parse_measure(_text(v)).name
    if name == "expected":
        return _finite_number(v)
    if name == "tolerance":
        t = _finite_number(v)
        if t < 0:
            raise ValueError(f"must be ≥ 0, not {t!r}")
        return t
    if name == "kind":
        if v not in KINDS:
            raise ValueError(f"must be one of {', '.join(map(repr, KINDS))}, not {v!r}")
        return v
    if name == "quick":
        if not isinstance(v, bool):
            raise ValueError(f"must be true or false, not {v!r}")
        return v
    if name == "seed":
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"must be a whole number ≥ 0, not {v!r}")
        return v
    if name == "params":
        if not isinstance(v, dict):
            raise ValueError(f"must be a table of parameters, e.g. {{ k1 = 1.2 }}, not {v!r}")
        return v
    if name == "claim":
        if v not in CLAIMS:
            raise ValueError(f"must be one of {', '.join(map(repr, CLAIMS))}, not {v!r}")
        return v
    if name == "baseline":
        if not isinstance(v, dict) or not isinstance(v.get("retriever"), str) or set(v) - {"retriever", "params"}:
            raise ValueError(f"must be a table {{ retriever = NAME, params = {{ … }} }}, not {v!r}")
        try:
            return make_spec(v["retriever"], v.get("params") or {})
        except (RegistryError, ValueError) as e:
            raise ValueError(str(e)) from None
    raise AssertionError(name)  # pragma: no cover


def parse_row(table: Any, index: int, where: str) -> Row:
    """One ``[[row]]`` table as a :class:`Row`; a :class:`MatrixError` naming ``where``, the row
    and the field otherwise."""
    def bad(fieldname: str, msg: str) -> MatrixError:
        return MatrixError(f"{where}: row {index}: {fieldname}: {msg}")

    if not isinstance(table, dict):
        raise MatrixError(f"{where}: row {index}: must be a table ([[row]]), not {type(table).__name__}")
    extra = sorted(set(table) - set(FIELDS))
    if extra:
        raise bad(extra[0], f"unknown field; the fields are {', '.join(FIELDS)}")
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name not in table:
            if name in _REQUIRED:
                raise bad(name, "missing")
            continue
        try:
            values[name] = _check(name, table[name])
        except ValueError as e:
            raise bad(name, str(e)) from None
    try:
        spec = make_spec(values["retriever"], values.get("params", {}))
    except RegistryError as e:
        raise bad("retriever", str(e)) from None
    except ValueError as e:
        raise bad("params", str(e)) from None
    directional = values["kind"] == DIRECTION
    for name in ("baseline", "claim"):
        if directional and name not in values:
            raise bad(name, "missing (a direction row names its baseline and its claim)")
        if not directional and name in values:
            raise bad(name, f"only a direction row has one, not a {values['kind']} row")
    base, n = split_slice(values["benchmark"])
    if n is not None and n < 1:
        raise bad("benchmark", f"a slice [:N] needs N ≥ 1, not {values['benchmark']!r}")
    try:
        get_benchmark_loader(base)
    except (RegistryError, ValueError) as e:
        raise bad("benchmark", str(e)) from None
    return Row(index=index, spec=spec, benchmark=values["benchmark"], measure=values["measure"],
               expected=values["expected"], tolerance=values["tolerance"], kind=values["kind"],
               source=values["source"], reason=values["reason"], quick=values.get("quick", False),
               seed=values.get("seed", 0), baseline=values.get("baseline"), claim=values.get("claim", ""))


def read_matrix(path: str | Path, *, first: int = 1) -> list[Row]:
    """Every row of the matrix file at ``path``, checked (see the module docstring); rows are
    numbered from ``first``."""
    path = Path(path)
    where = str(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise MatrixError(f"{where}: no such file") from None
    except UnicodeDecodeError as e:
        raise MatrixError(f"{where}: not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{where}: invalid TOML: {e}") from None
    other = sorted(set(doc) - {"row"})
    if other:
        raise MatrixError(f"{where}: unknown top-level key {other[0]!r}; the matrix is a list of [[row]] tables")
    tables = doc.get("row")
    if not isinstance(tables, list) or not tables:
        raise MatrixError(f"{where}: no [[row]] tables")
    rows = [parse_row(t, i, where) for i, t in enumerate(tables, first)]
    check_unique(rows, where)
    return rows


def check_unique(rows: Sequence[Row], where: str) -> None:
    """One figure per configuration (and baseline), benchmark, measure, kind and source."""
    seen: dict[tuple[str, ...], int] = {}
    for r in rows:
        k = (r.spec.hash, r.baseline.hash if r.baseline else "", r.benchmark, r.measure, r.kind, r.source)
        if k in seen:
            raise MatrixError(f"{where}: row {r.index}: measure: {r.key} ({r.kind}, {r.source}) is already "
                              f"row {seen[k]}; one figure per configuration, benchmark, measure and source")
        seen[k] = r.index


def reference_rows(plan_path: str | Path, bundle_path: str | Path) -> list[Row]:
    """The reference rows the bundle and the plan give (rows numbered from 1): each result of the
    bundle with the plan's matrix seed, of a configuration of the plan (matched by its label), gives
    one row per measure the plan's ``matrix.measures`` names for its benchmark (a slice
    ``nevir[:25]`` is its benchmark's), expected = the bundle's figure (8 decimals), the
    configuration's tolerance (``FVR@k``: k times it where the configuration says ``scale_fvr``) and reason, quick when the configuration is
    and the benchmark is among ``matrix.quick_benchmarks``. Rows follow the plan's configuration
    order, then the bundle's order. A result of a configuration the plan lacks is left out."""
    from ..store.exchange import read_export_file
    from .bundle import bundle_id, load_plan

    plan = load_plan(Path(plan_path))
    configs = {c.display: c for c in plan.config}
    records = [it.record for it in read_export_file(str(bundle_path)) if getattr(it, "record", None) is not None]
    source = f"reference bundle {bundle_id(Path(bundle_path))}"
    specs = {name: make_spec(c.retriever, c.params, label=c.label) for name, c in configs.items()}
    order = {name: i for i, name in enumerate(configs)}
    records = sorted((r for r in records if r.label in configs and r.seed == plan.matrix.seed
                      and _same_configuration(r.spec, specs[r.label])), key=lambda r: order[r.label])
    rows: list[Row] = []
    for rec in records:
        c, spec = configs[rec.label], specs[rec.label]
        whole = split_slice(rec.benchmark)[0]
        wanted = plan.matrix.measures.get(whole, plan.matrix.default_measures)
        for m in wanted:
            mv = rec.measures.get(m)
            if mv is None or mv.mean is None or not math.isfinite(mv.mean):
                continue
            scale = (parse_measure(m).k or 1) if c.scale_fvr and m.startswith("FVR@") else 1
            rows.append(Row(index=len(rows) + 1, spec=spec, benchmark=rec.benchmark, measure=m,
                            expected=round(float(mv.mean), 8), tolerance=c.tolerance * scale,
                            kind=REFERENCE, source=source,
                            reason=(f"the bundle's figure (reference plan configuration {c.display!r}, seed "
                                    f"{rec.seed}); tolerance: {c.reason or 'none given'}"
                                    + (f"; FVR runs from 1 to {scale + 1}, so {scale} times that" if scale > 1 else "")),
                            quick=c.quick and whole in plan.matrix.quick_benchmarks, seed=rec.seed))
    check_unique(rows, str(bundle_path))
    return rows


def _same_configuration(stored: Mapping[str, Any], spec: RetrieverSpec) -> bool:
    """Whether a bundled result's spec (``{"retriever", "params"}``) is the plan configuration's:
    the same retriever, and the same value of every parameter the result records (a parameter
    added to the retriever since, at its default, does not make it another configuration)."""
    params = stored.get("params") or {}
    return stored.get("retriever") == spec.name and all(
        json.dumps(v, sort_keys=True, default=str) == json.dumps(spec.params.get(k), sort_keys=True, default=str)
        for k, v in params.items())


def shipped_matrix(files: Mapping[str, Path], *, quick: bool = False, only: Sequence[str] = ()) -> list[Row]:
    """The installed matrix (:func:`harness.registry.reference_files`): the reference rows derived
    from ``files["bundle"]`` and ``files["plan"]``, then the rows of ``files["expected"]`` (numbered
    on after them), as ``quick`` and ``only`` select (:func:`select`)."""
    plan, bundle = files.get("plan"), files.get("bundle")
    derived = reference_rows(plan, bundle) if plan and bundle and Path(bundle).is_file() else []
    written = read_matrix(files["expected"], first=len(derived) + 1)
    rows = derived + written
    check_unique(rows, str(files["expected"]))
    return select(rows, quick=quick, only=only)


def select(rows: Iterable[Row], *, quick: bool = False, only: Sequence[str] = ()) -> list[Row]:
    """The rows ``--quick`` (rows marked quick) and ``--only`` keep: a pattern (fnmatch, case
    sensitive) matches ``retriever:benchmark:measure`` or any one of the three; a row is kept
    when any pattern matches it."""
    def matches(r: Row, pattern: str) -> bool:
        return any(fnmatch.fnmatchcase(s, pattern) for s in (r.key, r.retriever, r.label, r.benchmark, r.measure))

    return [r for r in rows if (not quick or r.quick) and (not only or any(matches(r, p) for p in only))]


def load_matrix(path: str | Path, *, quick: bool = False, only: Sequence[str] = ()) -> list[Row]:
    """The rows of the matrix at ``path`` that ``quick`` and ``only`` select (:func:`select`)."""
    return select(read_matrix(path), quick=quick, only=only)


# ---------------------------------------------------------------------------------------------
# comparing


def status_of(got: float | None, expected: float, tolerance: float) -> str:
    """``OK`` within ``min(EXACT, tolerance)``, ``OKish`` within ``tolerance``, else ``FAIL``
    (a figure that was not computed fails)."""
    if got is None or not math.isfinite(got):
        return FAIL
    d = abs(got - expected)
    if d <= min(EXACT, tolerance) + _SLACK:
        return OK
    return OKISH if d <= tolerance + _SLACK else FAIL


def absent_on_disk(name: str, data_dir: Path) -> bool:
    """Whether benchmark ``name``'s files are missing from ``data_dir``. A folder named by its path,
    or a benchmark the registry does not know, is not "absent": loading it reports what is wrong."""
    if looks_like_path(name):
        return False
    try:
        loader, bname = get_benchmark_loader(name)
    except (RegistryError, ValueError):
        return False
    check = getattr(loader, "missing_files", None)
    try:
        if callable(check):
            return bool(check(bname, data_dir))
        return bool(missing_files(data_dir, loader.info(bname).files))
    except (OSError, ValueError):
        return False


@dataclass
class _Job:
    """One (configuration, benchmark, seed) run the selected rows need, and what it gave."""

    spec: RetrieverSpec
    benchmark: str
    seed: int
    measures: list[str] = field(default_factory=list)
    record: Any = None  # the recomputed ResultRecord, None when the run failed or was skipped
    failure: str = ""  # why there is no record
    skipped: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)  # measure → why the benchmark cannot give it
    version: str = ""
    name: str = ""


def _jobs(rows: Sequence[Row]) -> dict[tuple[str, str, int], _Job]:
    out: dict[tuple[str, str, int], _Job] = {}
    for r in rows:
        for spec in r.specs:
            job = out.setdefault((spec.hash, r.benchmark, r.seed), _Job(spec, r.benchmark, r.seed))
            if r.measure not in job.measures:
                job.measures.append(r.measure)
    return out


def reproduce(rows: Sequence[Row], settings: Settings, *, store: Store | None = None,
              progress: Progress | None = None, log: Callable[[str], None] = print,
              make_runner: Callable[..., Runner] | None = None) -> list[Outcome]:
    """Recompute every (spec, benchmark, seed) of ``rows`` (and of direction rows' baselines) once
    and compare each row (see the module docstring); outcomes in the order of ``rows``. When
    ``store`` is given, the compared rows are saved to it as one reproduction run.
    ``make_runner(settings, store, progress, log)`` builds the runner (default: a local
    :class:`Runner`; ``--ray`` gives one that sends each job to a cluster)."""
    data_dir = default_data_dir(settings.data_dir)
    scratch = open_store(settings.home / SCRATCH)
    base = dataclasses.replace(settings, force=True, bootstrap=0)  # the means are compared, not their CIs
    jobs = _jobs(rows)
    try:
        runner_of = make_runner or (lambda st, sc, pr, lg: Runner(st, sc, pr, log=lg))
        with runner_of(base, scratch, progress, log) as runner:
            for job in jobs.values():
                if not settings.online and absent_on_disk(split_slice(job.benchmark)[0], data_dir):
                    job.skipped, job.failure = True, f"{job.benchmark} is not on disk in {data_dir}"
                    continue
                _run_job(runner, base, job)
    finally:
        scratch.close()
    outcomes = [_compare(r, [jobs[(s.hash, r.benchmark, r.seed)] for s in r.specs]) for r in rows]
    if store is not None:
        save(outcomes, store)
    return outcomes


def _run_job(runner: Runner, base: Settings, job: _Job) -> None:
    """One run of ``job.spec`` on ``job.benchmark`` with ``job.seed`` in the scratch store; its
    record (or why there is none) is kept on the job. The benchmark may name a slice,
    ``nevir[:25]``: the run scores the first 25 judged queries, as ``max_queries`` does (the
    reference plan's slices). A failure of one method (its data, its parameters, a bug) fails its
    rows and the matrix goes on."""
    whole, n = split_slice(job.benchmark)
    try:
        runner.s = dataclasses.replace(base, max_queries=n)
        try:
            bench, _ = runner.load_benchmark(whole)
        except Exception as e:  # noqa: BLE001
            job.failure = f"{job.benchmark} did not load: {e}"
            return
        job.version, job.name = bench.version, bench.name
        has_viol, has_pairs = any(bench.judgments.violating.values()), bool(bench.pairs)
        job.unsupported = {m: parse_measure(m).unsupported(has_viol, has_pairs) for m in job.measures}
        supported = tuple(m for m in job.measures if not job.unsupported[m])
        runner.s = dataclasses.replace(runner.s, extra_measures=supported)
        try:
            results = runner.run([job.spec], [whole], [job.seed])
        except Exception as e:  # noqa: BLE001
            job.failure = f"the run failed: {type(e).__name__}: {e}"
            return
    finally:
        runner.s = base
    job.record = results[0].record if results and results[0].status == "done" else None
    if job.record is None:
        why = runner.budget_stop or (results[0].status if results else "no result")
        job.failure = f"the run did not finish: {why}"


def _compare(r: Row, jobs: Sequence[_Job]) -> Outcome:
    """Row ``r`` against the runs it needed (its own, then a direction row's baseline)."""
    own = jobs[0]
    ids = {"spec_hash": own.record.spec_hash if own.record else r.spec.hash,
           "benchmark_version": own.record.benchmark_version if own.record else own.version,
           "benchmark_name": own.record.benchmark if own.record else own.name}
    for job in jobs:
        if job.record is None:
            return Outcome(r, SKIP if job.skipped else FAIL, note=job.failure, **ids)
        if job.unsupported.get(r.measure):
            return Outcome(r, FAIL, note=f"{r.measure} cannot be computed on {r.benchmark}: "
                                         f"{job.unsupported[r.measure]}", **ids)
    if r.kind == DIRECTION:
        return _compare_direction(r, own.record, jobs[1].record, ids)
    mv = own.record.measures.get(r.measure)
    got = None if mv is None or mv.mean is None else float(mv.mean)
    note = ""
    if got is None:
        note = f"{r.measure} was not computed" if mv is None else f"{r.measure} is undefined on {r.benchmark}"
    return Outcome(r, status_of(got, r.expected, r.tolerance), got, note, **ids)


def paired_difference(a: Mapping[str, float], b: Mapping[str, float], *, n_resamples: int = DIRECTION_RESAMPLES,
                      seed: int = 0) -> tuple[float, tuple[float, float], int]:
    """The mean of ``a[q] − b[q]`` over the queries both score, its percentile bootstrap interval
    (:func:`harness.measures.stats.bootstrap_ci`) and the number of queries."""
    from ..measures.stats import bootstrap_ci

    common = [q for q in a if q in b]
    diffs = [a[q] - b[q] for q in common]
    if not diffs:
        return float("nan"), (float("nan"), float("nan")), 0
    return sum(diffs) / len(diffs), bootstrap_ci(diffs, n_resamples=n_resamples, seed=seed), len(diffs)


def claim_holds(claim: str, interval: tuple[float, float], higher_is_better: bool, tolerance: float) -> bool:
    """Whether the bootstrap interval of (row − baseline) supports the claim: ``better`` — it
    excludes 0 on the side the measure calls better; ``same`` — it lies within ``±tolerance``."""
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    if claim == "same":
        return -tolerance - _SLACK <= lo and hi <= tolerance + _SLACK
    return lo > 0 if higher_is_better else hi < 0


def _compare_direction(r: Row, mine: Any, theirs: Any, ids: Mapping[str, str]) -> Outcome:
    a, b = mine.per_query.get(r.measure), theirs.per_query.get(r.measure)
    if not a or not b:
        return Outcome(r, FAIL, note=f"{r.measure} has no per-query values on {r.benchmark}", **ids)
    diff, (lo, hi), n = paired_difference(a, b)
    ok = claim_holds(r.claim, (lo, hi), parse_measure(r.measure).higher_is_better, r.tolerance)
    what = ("better than" if r.claim == "better" else f"within ±{r.tolerance:g} of")
    note = (f"{r.label} − {r.baseline.display if r.baseline else '?'}: {diff:+.4f} over {n} paired queries, "
            f"95 % bootstrap interval [{lo:+.4f}, {hi:+.4f}]; the paper's claim ({what}) "
            f"{'holds' if ok else 'does not hold here'}")
    return Outcome(r, OK if ok else FAIL, diff, note, interval=(lo, hi), **ids)


def store_rows(outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    """The compared outcomes as rows of the store's ``reproductions`` table (skipped rows are left out)."""
    return [{"spec_hash": o.spec_hash or o.row.spec.hash, "retriever": o.row.retriever, "label": o.row.label,
             "benchmark": o.benchmark_name or o.row.benchmark, "benchmark_version": o.benchmark_version,
             "measure": o.row.measure,
             "expected": o.row.expected, "tolerance": o.row.tolerance, "got": o.got, "status": o.status,
             "kind": o.row.kind, "source": _stored_source(o.row)}
            for o in outcomes if o.status != SKIP]


def _stored_source(r: Row) -> str:
    """The source as stored: a direction row's names its baseline, so two claims about one
    configuration, benchmark and measure (over two baselines) are two stored rows."""
    return f"{r.source}; against {r.baseline.display}" if r.baseline is not None else r.source


def save(outcomes: Sequence[Outcome], store: Store) -> str | None:
    """Save the compared outcomes as one reproduction run; its id, or ``None`` when every row was skipped."""
    rows = store_rows(outcomes)
    return store.save_reproductions(rows) if rows else None


@dataclass
class Summary:
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind → status → rows
    skipped_benchmarks: list[str] = field(default_factory=list)
    failed: bool = False  # a reference row failed: the command exits 1


def summarise(outcomes: Sequence[Outcome]) -> Summary:
    s = Summary()
    for o in outcomes:
        s.counts.setdefault(o.row.kind, {}).setdefault(o.status, 0)
        s.counts[o.row.kind][o.status] += 1
        if o.status == SKIP and o.row.benchmark not in s.skipped_benchmarks:
            s.skipped_benchmarks.append(o.row.benchmark)
    s.failed = any(o.gates for o in outcomes)
    return s


def describe(s: Mapping[str, int]) -> str:
    """``"12 OK, 1 OKish, 0 FAIL"`` (and skipped rows when there are any)."""
    parts = [f"{s.get(k, 0)} {k}" for k in STATUSES]
    if s.get(SKIP):
        parts.append(f"{s[SKIP]} skipped")
    return ", ".join(parts)
