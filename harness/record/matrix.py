"""The reference files as data: the plan (``plan.toml``) and the reproduction matrix
(``expected.toml``), each a pydantic model, and the matrix's rows (docs/design/reproduce.md#the-matrix-file).

* :class:`Plan` (:func:`load_plan`): which configurations the reference build runs, and which of
  the bundle's figures become rows of the matrix (``[matrix]``; docs/design/reference-and-trust.md#the-reference-files);
* :class:`Matrix` (:func:`read_matrix`): the hand-written figures, nested as Pyserini's 2CR files
  nest them: ``[[paper]]`` → ``[[paper.table]]`` → ``[[paper.table.condition]]``, a condition
  naming its configuration and protocol (retriever, params, benchmark, seed; a direction's
  baseline and claim) once, then its ``scores``; and ``[[condition]]`` tables of one's own
  figures (kind ``reference``: they gate the command), each naming its ``source``::

      [[paper]]
      name = "CoDeR (arXiv:2606.13204)"

      [[paper.table]]
      name = "Table 3"

      [[paper.table.condition]]
      kind = "published"            # or "direction": baseline = { retriever = … }, claim = "better" | "same"
      retriever = "bm25"
      params = { tokenizer = "coder" }
      benchmark = "nevir:coder"     # NAME[:N]: its first N judged queries
      tolerance = 0.023             # every score's, unless the score says otherwise
      reason = "why the figures are what they are"
      scores = { "V@2" = 0.43, "FVR@10" = { expected = 3.56, tolerance = 0.126 } }

  A score is a number, or a table ``{ expected, tolerance, reason, quick }`` overriding the
  condition's fields; a condition's ``quick`` (false) marks its rows among those ``--quick`` runs,
  its ``seed`` (0) the run's seed.
* a peer harness's published results (:class:`Harness`): ``[[harness]]`` names the harness, the
  package whose version wrote its files and the repository that holds them; each
  ``[[harness.result]]`` is one results file (``file``, its path there; ``version``, the package
  version the file records; ``commit``, the repository commit it was read at), the configuration
  and benchmark that run it the same way here, a ``label`` for the rows, its ``differences`` (what
  still differs from the run here) and, as a paper's condition, its tolerance, reason and scores::

      [[harness]]
      name = "MTEB"
      package = "mteb"
      repository = "embeddings-benchmark/results"

      [[harness.result]]
      file = "results/sentence-transformers__all-MiniLM-L6-v2/8b32…/SciFact.json"
      version = "1.12.75"
      retriever = "dense"
      params = { title_join = " " }
      benchmark = "beir/scifact"
      differences = ["the corpus is rebuilt from the allenai/scifact CSV", …]
      tolerance = 0.01
      reason = "why the figures may differ this much"
      scores = { "nDCG@10" = 0.64508 }

  Its rows are ``published`` rows (reported beside ours, never a failure) whose source is
  ``"<name> (<repository>), <file> (<package> <version>)"``; :class:`Row` carries the repository,
  file, version, commit and differences.
* the rows the bundle's own figures give (kind ``reference``, with the plan's tolerance and
  reason per configuration) are :func:`harness.record.bundle.bundle_rows`; the shipped matrix is
  those and the rows of ``expected.toml`` (:func:`harness.record.reproduce.shipped_matrix`).

A file that cannot be read is one :class:`MatrixError` (or :class:`PlanError`) line naming the
file, the row (``paper 'P', table 'T', condition 2 (bm25 on nevir:coder)``; ``config 3``) and the
field (``scores.V@2.tolerance``): pydantic's errors, translated (:func:`problems`).
"""

from __future__ import annotations

import fnmatch
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Sequence

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, FiniteFloat, StringConstraints,
                      ValidationError, ValidationInfo, field_validator, model_validator)

from ..core.errors import UserError
from ..core.registry import RegistryError, RetrieverSpec, get_benchmark_loader, make_spec
from ..core.types import split_slice
from ..measures import parse_measure

REFERENCE, PUBLISHED, DIRECTION = "reference", "published", "direction"
KINDS = (REFERENCE, PUBLISHED, DIRECTION)  # reference: a figure of our own, which gates the command
CLAIMS = ("better", "same")
BUNDLE_DEPTH = 10  # documents per query kept in the bundle's rankings


class MatrixError(UserError, ValueError):
    """A matrix file that cannot be read: the message is one line naming file, row and field."""


class PlanError(UserError, ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# reading a TOML file into a model, its errors translated


def _read_toml(path: Path, error: type[UserError]) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text: {e}") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (``list[M]``, ``dict[str, M]``, ``M | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in reversed(typing.get_args(annotation)):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _fields_at(root: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The fields of the model that holds the last element of ``loc``."""
    model = root
    for key in loc[:-1]:
        if isinstance(key, str) and key in model.model_fields:
            model = _model_of(model.model_fields[key].annotation) or model
    return list(model.model_fields)


Label = Callable[[str, int, Any], "str | None"]


def problems(e: ValidationError, path: Path, raw: Any, root: type[BaseModel], label: Label) -> list[str]:
    """Each of pydantic's errors as ``<file>: <row>: <field>: <message>``. ``label(key, i, table)``
    names the ``i``-th table of the list ``key`` (``config 3``), or is ``None`` when that list is
    a field, not rows; ``raw`` is the document as read, for the rows' names."""
    out = []
    for err in e.errors():
        loc = [k for k in err["loc"] if k != "[key]"]
        rows: list[str] = []
        fieldpath: list[str] = []
        node: Any = raw
        i = 0
        while i < len(loc):
            key = loc[i]
            if (not fieldpath and isinstance(key, str) and i + 1 < len(loc) and isinstance(loc[i + 1], int)
                    and isinstance(node, dict) and isinstance(node.get(key), list)):
                item = node[key][loc[i + 1]]
                name = label(key, loc[i + 1], item)
                if name is not None:
                    rows.append(name)
                    node, i = item, i + 2
                    continue
            fieldpath.append(str(key))
            if isinstance(node, dict):
                node = node.get(key)
            else:
                node = node[key] if isinstance(node, list) and isinstance(key, int) and key < len(node) else None
            i += 1
        kind, msg = err["type"], str(err["msg"]).removeprefix("Value error, ")
        if kind == "missing":
            msg = "missing"
        elif kind == "extra_forbidden":
            msg = f"unknown field; the fields are {', '.join(_fields_at(root, err['loc']))}"
        elif kind != "value_error" and isinstance(err.get("input"), (str, int, float, bool)):
            msg += f", not {err['input']!r}"
        out.append(": ".join([str(path), *([", ".join(rows)] if rows else []),
                              *([".".join(fieldpath)] if fieldpath else []), msg]))
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------
# the plan


class PlanConfig(_Strict):
    """One configuration of the plan."""

    retriever: str
    label: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0])
    suites: list[str] = Field(default_factory=list)  # default: the plan's
    benchmarks: list[str] = Field(default_factory=list)  # instead of suites
    max_queries: int | None = Field(default=None, ge=1)  # a slice: the first N judged queries
    note: str = ""  # why (shown with the results: a slice, a setting that differs from the paper)
    # the reproduction matrix's rows of this configuration (bundle_rows): how far a recomputed figure
    # may move and why, once per configuration; with scale_fvr, FVR@k gets k times the tolerance (FVR
    # runs from 1 to k + 1): for a tolerance that allows changed rankings, not one that allows float
    # noise only
    tolerance: float = Field(default=0.0, ge=0)
    reason: str = ""
    scale_fvr: bool = False
    quick: bool = False  # its rows on the plan's quick benchmarks are among those `reproduce --quick` runs
    # a reranker's pool, by name ("<first stage>@<depth>", one of the plan's [[pool]]): the
    # configuration reorders that pool (docs/design/pools.md)
    pool: str = ""

    @property
    def display(self) -> str:
        return self.label or (f"{self.retriever} [{self.pool}]" if self.pool else self.retriever)


class PlanPool(_Strict):
    """One reference pool: a first stage's top ``depth`` on each of its benchmarks, pinned by the
    content hash each must have (``hashes``: benchmark → hash; `reproduce --quick` recomputes them)."""

    first_stage: str
    depth: int = Field(default=100, ge=1)
    suites: list[str] = Field(default_factory=list)
    benchmarks: list[str] = Field(default_factory=list)
    hashes: dict[str, str] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.first_stage}@{self.depth}"


class PlanMatrix(_Strict):
    """Which figures of the bundle become rows of the reproduction matrix."""

    seed: int = 0  # the seed whose results are the bundle's figures in the matrix
    measures: dict[str, list[str]] = Field(default_factory=dict)  # benchmark (no slice) → measures
    default_measures: list[str] = Field(default_factory=lambda: ["nDCG@10"])  # a benchmark not listed
    quick_benchmarks: list[str] = Field(default_factory=list)


class Plan(_Strict):
    suites: list[str] = Field(default_factory=lambda: ["constraint", "completeness", "topical"])
    depth: int = Field(default=BUNDLE_DEPTH, ge=1)
    matrix: PlanMatrix = Field(default_factory=PlanMatrix)
    config: list[PlanConfig] = Field(default_factory=list)
    pool: list[PlanPool] = Field(default_factory=list)

    def pins(self) -> dict[str, dict[str, str]]:
        """``{pool name: {benchmark: content hash}}`` of the reference pools."""
        return {p.name: dict(p.hashes) for p in self.pool}

    @model_validator(mode="after")
    def _pools_named(self) -> "Plan":
        names = {p.name for p in self.pool}
        for c in self.config:
            if c.pool and c.pool not in names:
                raise ValueError(f"configuration {c.display!r}: pool {c.pool!r} is none of the plan's [[pool]] "
                                 f"({', '.join(sorted(names)) or 'none'})")
        return self


def _plan_label(key: str, i: int, table: Any) -> str | None:
    return f"config {i + 1}" if key == "config" else None


def load_plan(path: Path) -> Plan:
    """The plan at ``path``; a problem is a :class:`PlanError` naming the file, the configuration
    and the field (one line per problem)."""
    raw = _read_toml(Path(path), PlanError)
    try:
        return Plan.model_validate(raw)
    except ValidationError as e:
        raise PlanError("\n".join(problems(e, path, raw, Plan, _plan_label))) from None


# ---------------------------------------------------------------------------------------------
# the matrix


def _wrapped(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` with the registry's and the measures' errors as the ValueError pydantic reports."""
    def run(v: Any) -> Any:
        try:
            return check(v)
        except (RegistryError, ValueError) as e:
            raise ValueError(str(e)) from None
    return run


def _benchmark(name: str) -> str:
    base, n = split_slice(name)
    if n is not None and n < 1:
        raise ValueError(f"a slice [:N] needs N ≥ 1, not {name!r}")
    get_benchmark_loader(base)
    return name


def _score(v: Any) -> Any:
    """A bare number is ``{ expected = number }``."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"expected": v}
    if not isinstance(v, dict):
        raise ValueError(f"a score is a number or a table {{ expected = …, tolerance = … }}, not {v!r}")
    return v


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Measure = Annotated[str, AfterValidator(_wrapped(lambda m: parse_measure(m).name))]
Benchmark = Annotated[Text, AfterValidator(_wrapped(_benchmark))]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Score(_Model):
    """One figure of a condition; a field given here overrides the condition's."""

    expected: FiniteFloat
    tolerance: Tolerance | None = None
    reason: Text | None = None
    quick: bool | None = None


class Configuration(_Model):
    """A retriever and its parameters (defaults filled in when the row is built, as ``run`` does)."""

    retriever: Text
    params: dict[str, Any] = Field(default_factory=dict, validate_default=True)

    @field_validator("retriever")
    @classmethod
    def _known(cls, name: str) -> str:
        try:
            make_spec(name)
        except RegistryError as e:
            raise ValueError(str(e)) from None
        except ValueError:
            pass  # a parameter's fault: said under params
        return name

    @field_validator("params")
    @classmethod
    def _valid(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "retriever" in info.data:
            try:
                make_spec(info.data["retriever"], params)
            except RegistryError:
                pass
            except ValueError as e:
                raise ValueError(str(e)) from None
        return params

    @property
    def spec(self) -> RetrieverSpec:
        return make_spec(self.retriever, self.params)


class _Condition(Configuration):
    """A configuration on a benchmark (the protocol: the benchmark variant or slice, the seed) and its scores."""

    benchmark: Benchmark
    seed: int = Field(default=0, ge=0)
    tolerance: Tolerance
    reason: Text
    quick: bool = False
    scores: dict[Measure, Annotated[Score, BeforeValidator(_score)]] = Field(min_length=1)

    @field_validator("scores", mode="before")
    @classmethod
    def _one_name_each(cls, scores: Any) -> Any:
        """Two spellings of one measure (``"V@3"``, ``"V@3 "``) would be one score, the other lost."""
        seen: dict[str, str] = {}
        for name in scores if isinstance(scores, dict) else ():
            try:
                canonical = parse_measure(name).name
            except ValueError:
                continue  # said under its own name
            if canonical in seen:
                raise ValueError(f"{seen[canonical]!r} and {name!r} are one measure, {canonical}")
            seen[canonical] = name
        return scores


class Condition(_Condition):
    """One's own figures (kind ``reference``: they gate the command), with where they come from."""

    source: Text


class PaperCondition(_Condition):
    """A paper's figures (``published``) or its claim (``direction``: that this configuration beats,
    or equals, the ``baseline`` on the measure; each score the difference the paper reports)."""

    kind: Literal["published", "direction"]
    baseline: Configuration | None = None
    claim: Literal["better", "same"] | None = None

    @model_validator(mode="after")
    def _direction(self) -> "PaperCondition":
        for name in ("baseline", "claim"):
            given = getattr(self, name) is not None
            if self.kind == DIRECTION and not given:
                raise ValueError(f"{name}: missing (a direction condition names its baseline and its claim)")
            if self.kind != DIRECTION and given:
                raise ValueError(f"{name}: only a direction condition has one, not a {self.kind} one")
        return self


def _unique_names(tables: list[Any], what: str) -> list[Any]:
    names = [t.name for t in tables]
    again = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if again is not None:
        raise ValueError(f"two {what}s named {again!r}; one {what} holds all its conditions")
    return tables


def _table_name(name: str) -> str:
    if ", " in name:
        raise ValueError(f"a table's name has no ', ' (a row's source is '<paper>, <table>'), not {name!r}")
    return name


def _in_table_part(name: str) -> str:
    """A peer result's file or version: the table part of its rows' source, which holds no ``", "``."""
    if ", " in name:
        raise ValueError(f"no ', ' here (a peer row's source is '<harness> (<repository>), <file> (<package> "
                         f"<version>)'), not {name!r}")
    return name


class Table(_Model):
    name: Annotated[Text, AfterValidator(_table_name)]
    condition: list[PaperCondition] = Field(min_length=1)


class Paper(_Model):
    name: Text
    table: Annotated[list[Table], AfterValidator(lambda t: _unique_names(t, "table"))] = Field(min_length=1)


class PeerResult(_Condition):
    """One results file of a peer harness and the configuration that runs it the same way here: its
    path in the harness's repository, the harness version that wrote it, the repository commit it
    was read at, the label of its rows and the differences that remain (each one line)."""

    file: Annotated[Text, AfterValidator(_in_table_part)]
    version: Annotated[Text, AfterValidator(_in_table_part)]
    commit: Text | None = None
    label: Text | None = None
    differences: list[Text] = Field(min_length=1)

    @property
    def spec(self) -> RetrieverSpec:
        return make_spec(self.retriever, self.params, label=self.label or "")


class Harness(_Model):
    """A peer harness whose published results are rows of the matrix (kind ``published``)."""

    name: Text
    package: Text
    repository: Text
    result: list[PeerResult] = Field(min_length=1)

    def source(self, r: PeerResult) -> str:
        """A row's source: ``"<name> (<repository>), <file> (<package> <version>)"`` (the "paper,
        table" form: the reproduction page groups the rows by harness, then file)."""
        return f"{self.name} ({self.repository}), {r.file} ({self.package} {r.version})"


class Matrix(_Model):
    """The matrix file: one's own conditions, then the papers', then the peer harnesses' (the shipped
    file has papers and harnesses only)."""

    condition: list[Condition] = Field(default_factory=list)
    paper: Annotated[list[Paper], AfterValidator(lambda p: _unique_names(p, "paper"))] = Field(default_factory=list)
    harness: Annotated[list[Harness], AfterValidator(lambda h: _unique_names(h, "harness"))] = Field(
        default_factory=list)

    def rows(self, *, first: int = 1) -> list[Row]:
        """Every figure as a :class:`Row`, in file order (one's own conditions first, then the papers',
        then the peer harnesses'), numbered from ``first``."""
        out: list[Row] = []
        own = [(c, REFERENCE, c.source, "", "", f"condition {i}", {}) for i, c in enumerate(self.condition, 1)]
        papers = [(c, c.kind, f"{p.name}, {t.name}", p.name, t.name, f"paper {p.name!r}, table {t.name!r}, condition {i}",
                   {}) for p in self.paper for t in p.table for i, c in enumerate(t.condition, 1)]
        peers = [(r, PUBLISHED, h.source(r), *h.source(r).rsplit(", ", 1), f"harness {h.name!r}, result {i}",
                  {"peer": h.name, "repository": h.repository, "file": r.file, "peer_version": f"{h.package} {r.version}",
                   "commit": r.commit or "", "differences": tuple(r.differences)})
                 for h in self.harness for i, r in enumerate(h.result, 1)]
        for c, kind, source, paper, table, where, peer in own + papers + peers:
            spec = c.spec
            baseline = getattr(c, "baseline", None)
            for measure, s in c.scores.items():
                out.append(Row(index=first + len(out), spec=spec, benchmark=c.benchmark, measure=measure,
                               expected=float(s.expected), kind=kind, source=source, paper=paper, table=table,
                               tolerance=c.tolerance if s.tolerance is None else float(s.tolerance),
                               reason=s.reason or c.reason, quick=c.quick if s.quick is None else s.quick,
                               seed=c.seed, baseline=baseline.spec if baseline is not None else None,
                               claim=getattr(c, "claim", None) or "", where=f"{where}, {measure}", **peer))
        return out


def _matrix_label(key: str, i: int, table: Any) -> str | None:
    if key not in ("paper", "table", "condition", "harness", "result"):
        return None
    t = table if isinstance(table, dict) else {}
    if key not in ("condition", "result") and isinstance(t.get("name"), str):
        return f"{key} {t['name']!r}"
    what = f" ({t['retriever']} on {t['benchmark']})" if all(isinstance(t.get(k), str) for k in ("retriever", "benchmark")) else ""
    return f"{key} {i + 1}{what}"


@dataclass(frozen=True)
class Row:
    """One expected figure."""

    index: int  # 1-based position among the matrix's rows
    spec: RetrieverSpec
    benchmark: str
    measure: str
    expected: float
    tolerance: float
    kind: str
    source: str  # "<paper>, <table>" for a paper's row
    reason: str
    quick: bool = False
    seed: int = 0
    baseline: RetrieverSpec | None = None  # a direction row's other side
    claim: str = ""  # a direction row's claim: "better" or "same"
    paper: str = ""  # a published or direction row's paper and table (a peer row's: harness, file)
    table: str = ""
    where: str = ""  # where the row is written ("paper 'P', table 'T', condition 2, V@2"), for messages
    # a peer harness's row (:class:`Harness`): the harness, its results repository, the file there,
    # the version that wrote it ("mteb 1.12.75"), the commit it was read at, the differences that remain
    peer: str = ""
    repository: str = ""
    file: str = ""
    peer_version: str = ""
    commit: str = ""
    differences: tuple[str, ...] = ()

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
    def specs(self) -> list[RetrieverSpec]:
        """The configurations the row needs recomputed: its own, and a direction row's baseline."""
        return [self.spec] + ([self.baseline] if self.baseline is not None else [])


def read_matrix(path: str | Path, *, first: int = 1) -> list[Row]:
    """Every row of the matrix file at ``path`` (:class:`Matrix`), checked; rows are numbered from ``first``."""
    path = Path(path)
    raw = _read_toml(path, MatrixError)
    other = sorted(set(raw) - set(Matrix.model_fields))
    if other:
        flat = "; a [[row]] of the old flat form is a condition with one score" if "row" in other else ""
        raise MatrixError(f"{path}: unknown top-level key {other[0]!r}; a matrix holds [[paper]] tables (with "
                          f"[[paper.table]] and [[paper.table.condition]]), [[harness]] tables (with "
                          f"[[harness.result]]) and [[condition]] tables{flat}")
    if not raw.get("paper") and not raw.get("condition") and not raw.get("harness"):
        raise MatrixError(f"{path}: no [[paper]] or [[condition]] tables, nor [[harness]] tables")
    try:
        matrix = Matrix.model_validate(raw)
    except ValidationError as e:
        found = problems(e, path, raw, Matrix, _matrix_label)
        raise MatrixError(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")) from None
    rows = matrix.rows(first=first)
    check_unique(rows, str(path))
    return rows


def check_unique(rows: Sequence[Row], where: str) -> None:
    """One figure per configuration (and baseline), benchmark, measure, kind and source."""
    seen: dict[tuple[str, ...], Row] = {}
    for r in rows:
        k = (r.spec.hash, r.spec.pool_name, r.baseline.hash if r.baseline else "", r.benchmark, r.measure, r.kind,
             r.source)
        if k in seen:
            raise MatrixError(f"{where}: {r.where or f'row {r.index}'}: measure: {r.key} ({r.kind}, {r.source}) is "
                              f"already {seen[k].where or f'row {seen[k].index}'}; one figure per configuration, "
                              f"benchmark, measure and source")
        seen[k] = r


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
