"""The reproduction matrix (``beyondsim reproduce``): expected figures, recomputed and compared
(docs/design/reproduce.md#running-it).

The rows are read by :mod:`harness.record.matrix` (the file's model) and
:func:`harness.record.bundle.bundle_rows` (the rows the bundle's own figures give); :func:`choose` picks the matrix and its rows as the command's options say,
:func:`reproduce` recomputes and compares them, and :func:`verdict` says what it found.

:func:`reproduce` runs each (retriever spec, benchmark, seed) of the selected rows once, with the
runner, into a scratch results store (``<home>/reproduce/results.sqlite``, always recomputed) that
shares ``<home>/cache`` (embeddings, LLM responses) with ordinary runs, then compares each row:
``|got − expected| ≤ min(1e-4, tolerance)`` is ``OK``, ``≤ tolerance`` is ``OKish``, anything
else, a measure that was not computed or a run that failed is ``FAIL`` (with the reason). Rows on
a benchmark that is not on disk are skipped (``SKIP``), as suites skip absent benchmarks. The
compared rows are saved to the user's store (:meth:`harness.store.results.Store.save_reproductions`) with
the spec hash and benchmark version of the recomputed result, which :mod:`harness.store.trust` reads.
With ``settings.blind`` every configuration (a submitted class's included) is recomputed in the
blind sandbox (:mod:`harness.run.blind`), as ``run --blind`` computes it.

A ``direction`` row (a paper's claim about two configurations on one benchmark: its ``baseline``,
its ``claim``, ``better`` or ``same``, and as ``expected`` the difference row − baseline the paper
reports) is checked on the paired per-query differences of the two recomputed runs: the 95 %
percentile bootstrap interval of their mean (2,000 resamples, seed 0,
:func:`harness.measures.stats.bootstrap_ci`) must exclude 0 on the claimed side (``better``) or lie
inside ``±tolerance`` (``same``): ``OK``, else ``FAIL`` (a paper's claim: reported, never gating).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..core.protocols import Progress
from ..core.registry import RegistryError, RetrieverSpec, get_benchmark_loader, looks_like_path
from ..core.types import split_slice
from ..data.readers import default_data_dir, missing_files
from ..measures import parse_measure
from ..run.runner import Runner, Settings
from ..store.results import Store, open_store
from .bundle import bundle_rows
from .matrix import DIRECTION, REFERENCE, MatrixError, Row, check_unique, load_matrix, read_matrix, select

OK, OKISH, FAIL, SKIP = "OK", "OKish", "FAIL", "SKIP"
STATUSES = (OK, OKISH, FAIL)  # what a compared row can be (SKIP rows are not compared)
DIRECTION_RESAMPLES = 2000
EXACT = 1e-4  # a difference this small (or within a smaller tolerance) is a match, not an approximation
_SLACK = 1e-12  # float noise when a difference sits on the tolerance itself (0.51 − 0.50 > 0.01)
SCRATCH = Path("reproduce")  # the scratch home, under the home (its own results store)


@dataclass(frozen=True)
class Choice:
    """The matrix a run compares and its selected rows."""

    path: Path  # the matrix file
    rows: list[Row]
    shipped: bool  # the installed matrix: only its runs can make an imported figure "reproduced"


def choose(expected: Path | None = None, *, quick: bool = False, only: Sequence[str] = ()) -> Choice:
    """The matrix at ``expected`` (default: the installed one, :func:`harness.registry.reference_files`)
    and the rows ``quick`` and ``only`` select (:func:`harness.record.matrix.select`). The shipped
    matrix (the rows of the installed bundle and ``expected.toml``) is the only one whose run can
    make an imported figure reproduced (:mod:`harness.store.trust`): ``expected`` is it when its
    bytes are the installed file's; another file is a report. No matrix, or no row selected, is a
    :class:`MatrixError` in the command's words."""
    from ..core.registry import reference_files  # looked up when called: a test installs its own

    try:
        files = reference_files()
    except RegistryError:
        if expected is None:
            raise
        files = {}
    installed = files.get("expected")
    if expected is None and installed is None:
        raise MatrixError("no reproduction matrix is installed (entry point group beyondsim.reference); "
                          "give --expected FILE")
    shipped = installed is not None and (expected is None or _same_bytes(expected, installed))
    path = Path(expected or installed)  # type: ignore[arg-type]
    rows = shipped_matrix(files, quick=quick, only=only) if shipped else load_matrix(path, quick=quick, only=only)
    if not rows:
        raise MatrixError(f"{path}: no row is selected by{' --quick' if quick else ''}"
                          f"{''.join(f' --only {p!r}' for p in only)}")
    return Choice(path, rows, shipped)


def shipped_matrix(files: Mapping[str, Path], *, quick: bool = False, only: Sequence[str] = ()) -> list[Row]:
    """The installed matrix (:func:`harness.registry.reference_files`): the rows the bundle gives
    (:func:`harness.record.bundle.bundle_rows` of ``files["plan"]`` and ``files["bundle"]``), then
    the rows of ``files["expected"]`` (numbered on after them), as ``quick`` and ``only`` select
    (:func:`harness.record.matrix.select`)."""
    plan, bundle = files.get("plan"), files.get("bundle")
    derived = bundle_rows(plan, bundle) if plan and bundle and Path(bundle).is_file() else []
    rows = derived + read_matrix(files["expected"], first=len(derived) + 1)
    check_unique(rows, str(files["expected"]))
    return select(rows, quick=quick, only=only)


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return Path(a).read_bytes() == Path(b).read_bytes()
    except OSError:
        return False


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


def _jobs(rows: Sequence[Row]) -> dict[tuple[str, str, str, int], _Job]:
    out: dict[tuple[str, str, str, int], _Job] = {}
    for r in rows:
        for spec in r.specs:
            job = out.setdefault((spec.hash, spec.pool_name, r.benchmark, r.seed), _Job(spec, r.benchmark, r.seed))
            if r.measure not in job.measures:
                job.measures.append(r.measure)
    return out


def reproduce(rows: Sequence[Row], settings: Settings, *, store: Store | None = None, shipped: bool = False,
              progress: Progress | None = None, log: Callable[[str], None] = print,
              make_runner: Callable[..., Runner] | None = None) -> list[Outcome]:
    """Recompute every (spec, benchmark, seed) of ``rows`` (and of direction rows' baselines) once
    and compare each row (see the module docstring); outcomes in the order of ``rows``. When
    ``store`` is given, the compared rows are saved to it as one reproduction run (of the shipped
    matrix when ``shipped``, :attr:`Choice.shipped`).
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
    outcomes = [_compare(r, [jobs[(s.hash, s.pool_name, r.benchmark, r.seed)] for s in r.specs]) for r in rows]
    if store is not None:
        save(outcomes, store, shipped=shipped)
    return outcomes


def _run_job(runner: Runner, base: Settings, job: _Job) -> None:
    """One run of ``job.spec`` on ``job.benchmark`` with ``job.seed`` in the scratch store; its
    record (or why there is none) is kept on the job. The benchmark may name a slice,
    ``nevir[:25]``: the run scores the first 25 judged queries, as ``max_queries`` does (the
    reference plan's slices). A failure of one method (its data, its parameters, a bug) fails its
    rows and the matrix goes on."""
    whole, n = split_slice(job.benchmark)
    try:
        runner.s = dataclasses.replace(base, max_queries=n, pool=job.spec.pool_name or None)
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
            results = runner.run([dataclasses.replace(job.spec, pool_name="")], [whole], [job.seed])
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
    # (a reranker's row without a record: its configuration on its pool, which has no hash here)
    ids = {"spec_hash": own.record.spec_hash if own.record else (
               f"{r.spec.hash}@{r.spec.pool_name}" if r.spec.pool_name else r.spec.hash),
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


def save(outcomes: Sequence[Outcome], store: Store, *, shipped: bool = False) -> str | None:
    """Save the compared outcomes as one reproduction run; its id, or ``None`` when every row was skipped."""
    rows = store_rows(outcomes)
    return store.save_reproductions(rows, shipped=shipped) if rows else None


@dataclass
class Summary:
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind → status → rows
    skipped_benchmarks: list[str] = field(default_factory=list)
    failed: bool = False  # a reference row failed: the command exits 1
    compared: bool = False  # a row was compared (not every row skipped)

    def line(self, *, seconds: float, saved_to: Path | str, shipped: bool) -> str:
        """What the command concludes: the verdict, the counts per kind (reference rows first), the
        benchmarks skipped, the time taken, and where the matrix was saved."""
        parts = [f"{kind} rows: {describe(c)}" for kind, c in sorted(self.counts.items(), key=lambda kc: kc[0] != REFERENCE)]
        if self.skipped_benchmarks:
            parts.append(f"skipped (not on disk): {', '.join(self.skipped_benchmarks)}")
        verdict = ("FAIL: a reference row did not reproduce" if self.failed else "reproduced" if self.compared
                   else "nothing compared")
        saved = (f"; matrix saved to {saved_to}" + ("" if shipped else " (not the shipped matrix: it upgrades no "
                                                                     "trust level)")) if self.compared else ""
        return f"{verdict} — {'; '.join(parts)} ({seconds:.0f} s){saved}"


def summarise(outcomes: Sequence[Outcome]) -> Summary:
    s = Summary()
    for o in outcomes:
        s.counts.setdefault(o.row.kind, {}).setdefault(o.status, 0)
        s.counts[o.row.kind][o.status] += 1
        if o.status == SKIP and o.row.benchmark not in s.skipped_benchmarks:
            s.skipped_benchmarks.append(o.row.benchmark)
    s.failed = any(o.gates for o in outcomes)
    s.compared = any(o.status != SKIP for o in outcomes)
    return s


def describe(s: Mapping[str, int]) -> str:
    """``"12 OK, 1 OKish, 0 FAIL"`` (and skipped rows when there are any)."""
    parts = [f"{s.get(k, 0)} {k}" for k in STATUSES]
    if s.get(SKIP):
        parts.append(f"{s[SKIP]} skipped")
    return ", ".join(parts)


def notes(outcomes: Iterable[Outcome]) -> list[str]:
    """A line for each compared row with a note (why it failed; what a direction row found)."""
    return [f"row {o.row.index} ({o.row.key}, {o.row.kind}): {o.status}: {o.note}"
            for o in outcomes if o.note and o.status != SKIP]


# -- the reference pools ---------------------------------------------------------------------------


@dataclass
class PoolCheck:
    """One reference pool recomputed: the hash the plan pins and the one computed here."""

    name: str
    benchmark: str
    pinned: str
    got: str = ""
    status: str = ""  # OK | FAIL | SKIP
    note: str = ""


def check_pools(settings: Settings, *, quick: bool = False, progress: Progress | None = None,
                log: Callable[[str], None] = print) -> list[PoolCheck]:
    """Recompute the reference plan's pools (with ``quick``, on the plan's quick benchmarks only) in
    the scratch store and compare each content hash with the one the plan pins: OK when equal; OKISH
    when the hashes differ but the pool is the pinned one to float rounding (the same candidates of
    every query, every score within :data:`~harness.run.pools.SCORE_AGREEMENT`; the rerankers then rerank
    the pinned pool); FAIL otherwise (or when the first stage failed); SKIP when the benchmark is not
    on disk."""
    from ..core.registry import reference_files
    from .matrix import load_plan

    files = reference_files()
    if "plan" not in files:
        return []
    plan = load_plan(files["plan"])
    data_dir = default_data_dir(settings.data_dir)
    checks = [PoolCheck(p.name, b, h) for p in plan.pool for b, h in p.hashes.items()
              if not quick or b in plan.matrix.quick_benchmarks]
    if not checks:
        return []
    scratch = open_store(settings.home / SCRATCH)
    try:
        with Runner(dataclasses.replace(settings, bootstrap=0, pinned_pools=plan.pins()), scratch, progress,
                    log=log) as runner:
            for c in checks:
                if absent_on_disk(c.benchmark, data_dir):
                    c.status, c.note = SKIP, f"{c.benchmark} is not on disk in {data_dir}"
                    continue
                try:
                    bench, _ = runner.load_benchmark(c.benchmark)
                    runner.pool_for(bench, c.name)
                    c.got, agree = runner.pool_agreements[(c.name, bench.name)]
                except Exception as e:  # noqa: BLE001 - one failed pool fails its check, the others go on
                    c.status, c.note = FAIL, f"{type(e).__name__}: {e}"
                    continue
                if c.got == c.pinned:
                    c.status = OK
                elif agree is not None and agree.same_pool:
                    c.status, c.note = OKISH, f"{agree.describe()}: its rerankers rerank the pinned pool"
                else:
                    c.status = FAIL
                    c.note = ("the pool computed here is not the reference pool" +
                              (f" ({agree.describe()})" if agree is not None else "") +
                              ": its rerankers' rows are on another pool")
    finally:
        scratch.close()
    return checks
