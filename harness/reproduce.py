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
                                    # "published": a paper's figure, reported, never fails it
    source = "reference run 2026-11-26"   # or "<paper>, Table N"
    quick = true                    # optional (false): one of the cheap rows --quick runs
    reason = "why the value is what it is (say why whenever it changes)"
    seed = 0                        # optional (0)

Every field is checked when the file is read; a bad row is one line,
``<file>: row N: <field>: <message>`` (rows are counted from 1 in file order).

:func:`reproduce` runs each (retriever spec, benchmark, seed) of the selected rows once, with the
runner, into a scratch results store (``<home>/reproduce/results.sqlite``, always recomputed) that
shares ``<home>/cache`` (embeddings, LLM responses) with ordinary runs, then compares each row:
``|got − expected| ≤ min(1e-4, tolerance)`` is ``OK``, ``≤ tolerance`` is ``OKish``, anything
else, a measure that was not computed or a run that failed is ``FAIL`` (with the reason). Rows on
a benchmark that is not on disk are skipped (``SKIP``), as suites skip absent benchmarks. The
compared rows are saved to the user's store (:meth:`harness.store.Store.save_reproductions`) with
the spec hash and benchmark version of the recomputed result, which :mod:`harness.trust` reads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .data import default_data_dir, missing_files
from .measures import parse_measure
from .protocols import Progress
from .registry import RegistryError, RetrieverSpec, get_benchmark_loader, looks_like_path, make_spec
from .runner import Runner, Settings
from .store import Store
from .types import split_slice

OK, OKISH, FAIL, SKIP = "OK", "OKish", "FAIL", "SKIP"
STATUSES = (OK, OKISH, FAIL)  # what a compared row can be (SKIP rows are not compared)
REFERENCE, PUBLISHED = "reference", "published"
KINDS = (REFERENCE, PUBLISHED)
EXACT = 1e-4  # a difference this small (or within a smaller tolerance) is a match, not an approximation
_SLACK = 1e-12  # float noise when a difference sits on the tolerance itself (0.51 − 0.50 > 0.01)
SCRATCH = Path("reproduce") / "results.sqlite"  # under the home

_REQUIRED = ("retriever", "benchmark", "measure", "expected", "tolerance", "kind", "source", "reason")
_OPTIONAL = ("params", "quick", "seed")
FIELDS = _REQUIRED + _OPTIONAL


class MatrixError(ValueError):
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
               seed=values.get("seed", 0))


def read_matrix(path: str | Path) -> list[Row]:
    """Every row of the matrix file at ``path``, checked (see the module docstring)."""
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
    rows = [parse_row(t, i, where) for i, t in enumerate(tables, 1)]
    seen: dict[tuple[str, str, str, str, str], int] = {}
    for r in rows:
        k = (r.spec.hash, r.benchmark, r.measure, r.kind, r.source)
        if k in seen:
            raise MatrixError(f"{where}: row {r.index}: measure: {r.key} ({r.kind}, {r.source}) is already "
                              f"row {seen[k]}; one figure per configuration, benchmark, measure and source")
        seen[k] = r.index
    return rows


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


def _groups(rows: Sequence[Row]) -> dict[tuple[str, str, int], list[Row]]:
    out: dict[tuple[str, str, int], list[Row]] = {}
    for r in rows:
        out.setdefault((r.spec.hash, r.benchmark, r.seed), []).append(r)
    return out


def reproduce(rows: Sequence[Row], settings: Settings, *, store: Store | None = None,
              progress: Progress | None = None, log: Callable[[str], None] = print,
              make_runner: Callable[..., Runner] | None = None) -> list[Outcome]:
    """Recompute every (spec, benchmark, seed) of ``rows`` once and compare each row (see the module
    docstring); outcomes in the order of ``rows``. When ``store`` is given, the compared rows are
    saved to it as one reproduction run. ``make_runner(settings, store, progress, log)`` builds the
    runner (default: a local :class:`Runner`; ``--ray`` gives one that sends each job to a cluster)."""
    data_dir = default_data_dir(settings.data_dir)
    scratch = Store(settings.home / SCRATCH)
    base = dataclasses.replace(settings, force=True, bootstrap=0)  # the means are compared, not their CIs
    done: dict[int, Outcome] = {}
    try:
        runner_of = make_runner or (lambda st, sc, pr, lg: Runner(st, sc, pr, log=lg))
        with runner_of(base, scratch, progress, log) as runner:
            for (_, bname, seed), group in _groups(rows).items():
                spec = group[0].spec
                if not settings.online and absent_on_disk(split_slice(bname)[0], data_dir):
                    for r in group:
                        done[r.index] = Outcome(r, SKIP, note=f"{bname} is not on disk in {data_dir}")
                    continue
                for o in _run_group(runner, base, spec, bname, seed, group):
                    done[o.row.index] = o
    finally:
        scratch.close()
    outcomes = [done[r.index] for r in rows]
    if store is not None:
        save(outcomes, store)
    return outcomes


def _run_group(runner: Runner, base: Settings, spec: RetrieverSpec, bname: str, seed: int,
               group: Sequence[Row]) -> list[Outcome]:
    """One run of ``spec`` on ``bname`` with ``seed`` in the scratch store, and its rows compared.
    ``bname`` may name a slice, ``nevir[:25]``: the run scores the first 25 judged queries, as
    ``max_queries`` does (the reference plan's slices)."""
    def failed(why: str, version: str = "", name: str = "") -> list[Outcome]:
        return [Outcome(r, FAIL, note=why, spec_hash=spec.hash, benchmark_version=version, benchmark_name=name)
                for r in group]

    whole, n = split_slice(bname)
    # A failure of one method (its data, its parameters, a bug) fails its rows and the matrix goes on.
    try:
        runner.s = dataclasses.replace(base, max_queries=n)
        try:
            bench, _ = runner.load_benchmark(whole)
        except Exception as e:  # noqa: BLE001
            return failed(f"{bname} did not load: {e}")
        has_viol, has_pairs = any(bench.judgments.violating.values()), bool(bench.pairs)
        why_not = {r.measure: parse_measure(r.measure).unsupported(has_viol, has_pairs) for r in group}
        supported = tuple(dict.fromkeys(m for m, w in why_not.items() if not w))
        runner.s = dataclasses.replace(runner.s, extra_measures=supported)
        try:
            results = runner.run([spec], [whole], [seed])
        except Exception as e:  # noqa: BLE001
            return failed(f"the run failed: {type(e).__name__}: {e}", bench.version, bench.name)
    finally:
        runner.s = base
    rec = results[0].record if results and results[0].status == "done" else None
    if rec is None:
        why = runner.budget_stop or (results[0].status if results else "no result")
        return failed(f"the run did not finish: {why}", bench.version, bench.name)
    out = []
    for r in group:
        mv = rec.measures.get(r.measure)
        got = None if mv is None or mv.mean is None else float(mv.mean)
        note = ""
        if why_not[r.measure]:
            note = f"{r.measure} cannot be computed on {bname}: {why_not[r.measure]}"
        elif got is None:
            note = f"{r.measure} was not computed" if mv is None else f"{r.measure} is undefined on {bname}"
        out.append(Outcome(r, status_of(got, r.expected, r.tolerance), got, note, rec.spec_hash, rec.benchmark_version,
                           rec.benchmark))
    return out


def store_rows(outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    """The compared outcomes as rows of the store's ``reproductions`` table (skipped rows are left out)."""
    return [{"spec_hash": o.spec_hash or o.row.spec.hash, "retriever": o.row.retriever, "label": o.row.label,
             "benchmark": o.benchmark_name or o.row.benchmark, "benchmark_version": o.benchmark_version,
             "measure": o.row.measure,
             "expected": o.row.expected, "tolerance": o.row.tolerance, "got": o.got, "status": o.status,
             "kind": o.row.kind, "source": o.row.source}
            for o in outcomes if o.status != SKIP]


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
