"""Moving results between stores: ``beyondsim export`` / ``import`` as JSON lines
(docs/design/store.md#export-and-import).

One schema describes every line of an export, in both directions (pydantic models, ``extra="forbid"``,
strict types): a **result line** (:class:`ResultLine`, export schemas 1 and 2) and, from schema 2
on, a **benchmark content line** (:class:`ContentLine`: the query texts, judgments and top-10
document snippets the per-query drill-down shows). Numbers are finite (JSON has no NaN or
infinity), integers fit SQLite's 64-bit range, strings are strings and ids are not empty.

In a result line, ``null`` as a measure's ``mean`` means *undefined* (no query to average over)
and ``null`` as ``ci_low``/``ci_high`` means *no interval computed*; an export writes a stored
non-finite mean or bound as ``null`` for the same reason. Every other number must be finite: a
stored value that is not refuses the export, which then writes nothing.

An import is all or nothing: every line of the file is checked first, every problem is reported
as ``file:line: field: message``, and only a file without problems is written, in one
transaction. A results file is data: its retriever names and provenance are shown, never imported,
so a line whose retriever is given as ``module:Class`` is refused.

A file is bounded: at most :data:`MAX_IMPORT_BYTES` once decompressed, no line longer than
:data:`MAX_LINE_BYTES`, no id longer than :data:`MAX_ID_CHARS` and no other text longer than
:data:`MAX_TEXT_CHARS` (a label: ``MAX_LABEL_CHARS``, in normal form, harness/core/registry.py);
blank lines are skipped in runs, so reading stays linear in the file's size. A measure name must
parse as a measure (:func:`harness.measures.parse_measure`) and a parameter name must be an
identifier, so neither can become a spreadsheet formula or a second command line. Every text of a
file that a message prints goes through :func:`plain`, which shows one holding a control character
by its escapes.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import re
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Callable, Iterable, Iterator, Literal, Mapping, Optional, Sequence, TextIO, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, TypeAdapter,
                      ValidationError)

from ..core.errors import UserError
from ..core.registry import check_label
from ..measures import parse_measure
from .results import (CONTENT_DEPTH, IMPORTED, IMPORTED_CONTENT, BenchmarkInfo, MeasureValue, ResultRecord, Store,
                      finite_or_none, result_key, snippet)
from .trust import ORIGIN_KEY, VERIFIED, origin, trust_of

EXPORT_SCHEMA = 2  # 2: adds the "benchmark_content" lines (drill-down content); result lines as in 1
IMPORT_SCHEMAS = (1, 2)
CONTENT_KIND = "benchmark_content"
CUT_KEY = "rankings_cut_at"  # extra: the depth an export cut the rankings to (k when it did not cut them)
MAX_LISTED = 20  # problems listed in one error message; the rest are counted
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_IMPORT_BYTES = 1 << 30  # an import file, decompressed: the shipped bundle is ~0.2 GiB
MAX_LINE_BYTES = 64 << 20  # one line (a result with its rankings and per-query values: a few MiB)
MAX_ID_CHARS = 4096  # a key, query, document or benchmark id, a version, a measure or parameter name
MAX_TEXT_CHARS = 1 << 20  # any other text: a query, a snippet, a description, a string in extra
_READ_CHUNK = 1 << 20
_BLANK = re.compile(rb"[ \t\r\n\f\v]*")
_CONTROL = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _size(n: int) -> str:
    """``64 MiB``, ``1 GiB``: a limit in bytes as messages name it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def plain(text: Any) -> str:
    """A text from a file as a message prints it: as it is, or, when it holds a control, format or
    line-separator character (an escape sequence, a carriage return, a bidirectional override),
    as its ``repr`` (every such character escaped), so that nothing a file holds can move the
    cursor, rewrite a line or fake one in a terminal or a log."""
    import unicodedata

    text = str(text)
    return repr(text) if any(unicodedata.category(c) in _CONTROL for c in text) else text


class ExchangeError(UserError, ValueError):
    """A file that cannot be imported or a store that cannot be exported; the message lists the
    problems, one ``where: field: message`` line each."""


def _json_name(x: float) -> str:
    """How JSON's extensions spell a non-finite number: ``NaN``, ``Infinity``, ``-Infinity``."""
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _finite_json(value: JsonValue) -> JsonValue:
    """``value`` unchanged when every number in it is finite and every text (keys too) at most
    :data:`MAX_TEXT_CHARS` long; else a ValueError naming where."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{_json_name(v)} at {path or 'the top'} is not allowed (only finite numbers)")
        if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
            raise ValueError(f"the text at {path or 'the top'} is {len(v)} characters long, over the limit of "
                             f"{MAX_TEXT_CHARS} characters")
        if isinstance(v, dict):
            long_key = next((k for k in v if len(k) > MAX_TEXT_CHARS), None)
            if long_key is not None:
                raise ValueError(f"a key at {path or 'the top'} is {len(long_key)} characters long, over the limit of "
                                 f"{MAX_TEXT_CHARS} characters")
            stack += [(f"{path}[{k!r}]", x) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(f"{path}[{i}]", x) for i, x in enumerate(v)]
    return value


Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(allow_inf_nan=False, ge=0)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
JsonObject = Annotated[dict[str, JsonValue], AfterValidator(_finite_json)]


def _measure_name(name: str) -> str:
    """A measure name as the harness spells one (``nDCG@10``, ``nDCG(rel=1)@10``); else a ValueError:
    nothing else may head a column of the store, a page or a CSV file."""
    try:
        parse_measure(name)
    except ValueError as e:
        raise ValueError(f"{name!r} is not a measure name here ({plain(' '.join(str(e).split())[:200])})") from None
    return name


def _param_key(key: str) -> str:
    """A parameter name: an identifier, as every retriever's parameter dataclass field is; anything
    else (a space, a newline, a quote) could not be given to ``beyondsim run -p`` and could break the
    command line a page shows (harness.store.provenance.run_command)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise ValueError(f"parameter name {key!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return key


def _file_label(label: str) -> str:
    """A label as a file must write it: what :func:`~harness.core.registry.check_label` accepts, and
    already in its normal form (a label that normalising would change is refused, not rewritten)."""
    return check_label(label, normal_form=True)


MeasureName = Annotated[Id, AfterValidator(_measure_name)]
ParamsObject = Annotated[dict[Annotated[str, AfterValidator(_param_key)], JsonValue], AfterValidator(_finite_json)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _not_module_class(name: str) -> str:
    if any(_control(c) for c in name):
        raise ValueError(f"retriever name {name!r} holds a control or format character")
    if ":" in name:
        raise ValueError(f"{name!r} names a retriever class by module path (module:Class); a results file is "
                         "data and nothing in it is ever imported, so results of a retriever given as "
                         "module:Class cannot be imported (register it under a name, entry point group "
                         "beyondsim.retrievers, and run it again)")
    return name


def _control(c: str) -> bool:
    import unicodedata

    return unicodedata.category(c) in _CONTROL


RetrieverName = Annotated[Id, AfterValidator(_not_module_class)]


class MeasureLine(_Line):
    mean: Finite | None = Field(description="null: undefined (no query to average over)")
    n: Count
    ci_low: Finite | None = Field(None, description="null: no interval computed")
    ci_high: Finite | None = Field(None, description="null: no interval computed")


class PhaseLine(_Line):
    wall_s: NonNegative
    cpu_s: NonNegative
    items: Count


class LLMCallLine(_Line):
    model: Text
    prompt_tokens: Count | None = Field(description="null: the reply reported no usage")
    completion_tokens: Count | None = Field(description="null: the reply reported no usage")
    latency_s: NonNegative
    cached: bool
    usd: NonNegative | None = Field(None, description="null: the price of the model is unknown")
    phase: Text = ""
    purpose: Text = ""


class SpecLine(_Line):
    retriever: RetrieverName
    params: ParamsObject
    pool: Optional[Id] = Field(None, description="the content hash of the candidate pool it reranks "
                                                 "(docs/design/pools.md); absent for a first stage")


class BenchmarkInfoLine(_Line):
    name: Id
    version: Id
    task: Text
    default_measures: list[MeasureName] = []
    stats: JsonObject = {}
    description: Text = ""
    source: Text = ""
    license: Text = ""
    relevance_threshold: Union[Annotated[int, Field(ge=1)], None] = None  # absent in files written before it was kept


class ResultLine(_Line):
    """One stored result: every field of :class:`~harness.store.results.ResultRecord`, plus the description
    of its benchmark version when the exporting store had one."""

    schema_: Literal[1, 2] = Field(alias="schema")
    key: Id
    retriever: RetrieverName
    label: Annotated[Id, AfterValidator(_file_label)]
    spec_hash: Id
    spec: SpecLine
    benchmark: Id
    benchmark_version: Id
    seed: Int64
    k: Annotated[int, Field(ge=1, le=INT64_MAX)]
    harness_version: Id
    n_queries: Count
    n_missing: Count
    measures: dict[MeasureName, MeasureLine]
    per_query: dict[MeasureName, dict[Id, Finite]] = {}
    phases: dict[Id, PhaseLine] = {}
    llm_calls: list[LLMCallLine] = []
    rankings: dict[Id, list[tuple[Id, Finite]]] = {}
    environment: JsonObject = {}
    provenance: JsonObject = {}
    extra: JsonObject = {}
    created_at: Text = ""
    benchmark_info: BenchmarkInfoLine | None = None


class QueryItem(_Line):
    qid: Id
    text: Text
    meta: JsonObject = {}


class QrelItem(_Line):
    qid: Id
    docid: Id
    grade: Int64 | None = Field(description="null: a violating document without a grade")
    violating: bool


class DocumentItem(_Line):
    docid: Id
    title: Text
    snippet: Text


def _unique(*fields: str) -> Callable[[list[Any]], list[Any]]:
    def check(items: list[Any]) -> list[Any]:
        seen: dict[tuple[str, ...], int] = {}
        for i, x in enumerate(items):
            k = tuple(getattr(x, f) for f in fields)
            if k in seen:
                raise ValueError(f"[{i}] repeats the {'/'.join(fields)} {'/'.join(k)!r} of [{seen[k]}]")
            seen[k] = i
        return items

    return check


class ContentLine(_Line):
    """The drill-down content of one benchmark version (export schema 2 on)."""

    schema_: Literal[2] = Field(alias="schema")
    kind: Literal["benchmark_content"]
    benchmark: Id
    benchmark_version: Id
    queries: Annotated[list[QueryItem], AfterValidator(_unique("qid"))]
    qrels: Annotated[list[QrelItem], AfterValidator(_unique("qid", "docid"))]
    documents: Annotated[list[DocumentItem], AfterValidator(_unique("docid"))]


class _UnknownSchema(_Line):
    """Stands for a line of no known schema, so the only problem reported is the schema."""

    model_config = ConfigDict(extra="allow")
    schema_: Literal[1, 2] = Field(alias="schema")


class _UnknownKind(_Line):
    """Stands for a line of an unknown kind, so the only problem reported is the kind."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["benchmark_content"]


def _line_kind(v: Any) -> str | None:
    if not isinstance(v, dict):
        return None
    if type(v.get("schema")) is not int or v["schema"] not in IMPORT_SCHEMAS:
        return "unknown schema"
    if "kind" not in v:
        return "result line"
    return "content line" if v["kind"] == CONTENT_KIND else "unknown kind"


_TAGS = ("result line", "content line", "unknown schema", "unknown kind")
Line = Annotated[Union[Annotated[ResultLine, Tag(_TAGS[0])], Annotated[ContentLine, Tag(_TAGS[1])],
                       Annotated[_UnknownSchema, Tag(_TAGS[2])], Annotated[_UnknownKind, Tag(_TAGS[3])]],
                 Discriminator(_line_kind, custom_error_type="line_type",
                               custom_error_message="expected one JSON object per line")]
LINE = TypeAdapter(Line)


def _field(loc: tuple[str | int, ...]) -> str:
    """``measures['nDCG@10']['mean']``: the JSON path of a pydantic error location."""
    if not loc:
        return ""
    head, *rest = loc
    key = bool(rest) and rest[-1] == "[key]"  # a dict key's own problem: pydantic's location ends in "[key]"

    def step(x: str | int) -> str:
        if isinstance(x, int):
            return f"[{x}]"
        shown = repr(x)  # a key from the file: escaped, and cut when long
        return f"[{shown if len(shown) <= 60 else shown[:57] + '...'}]"

    path = str(head) + "".join(step(x) for x in (rest[:-1] if key else rest))
    return f"{path} (key)" if key else path


def _message(err: Mapping[str, Any]) -> str:
    kind, inp = err["type"], err.get("input")
    if kind == "json_invalid":
        return f"invalid JSON ({err['ctx']['error']})"
    if kind == "missing":
        return "missing value" if isinstance(err["loc"][-1], int) else "missing field"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "finite_number":
        return f"{_json_name(inp)} is not allowed (only finite numbers)"
    if kind == "string_too_long":
        return (f"a text of {len(inp)} characters, over the limit of {err['ctx']['max_length']} characters "
                "for this field")
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if err["loc"] == ("schema",) and kind == "literal_error":
        return f"unsupported export schema {inp!r} (expected {err['ctx']['expected']})"
    if err["loc"] == ("kind",) and kind == "literal_error":
        return f"unknown line kind {inp!r} (expected {CONTENT_KIND!r}, or no kind for a result line)"
    msg = err["msg"]
    if isinstance(inp, (str, int, float, bool)) or inp is None:
        shown = repr(inp)
        msg += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
    return msg


def _problems(text: str | bytes) -> tuple[Any, list[str]]:
    """The validated line and its problems (``field: message``), all of them."""
    try:
        return LINE.validate_json(text), []
    except ValidationError as e:
        out = []
        for err in e.errors():
            loc = tuple(err["loc"])
            if loc and loc[0] in _TAGS:  # the union's tag
                loc = loc[1:]
            err = dict(err, loc=loc)
            where = _field(loc)
            out.append(f"{where}: {_message(err)}" if where else _message(err))
        return None, out


def _report(what: str, problems: list[str], tail: str) -> ExchangeError:
    listed = problems[:MAX_LISTED]
    more = len(problems) - len(listed)
    return ExchangeError(f"{what}: {len(problems)} problem(s); {tail}:\n"
                         + "\n".join(f"  - {p}" for p in listed)
                         + (f"\n  ... and {more} more problem(s)" if more else ""))


# -- reading an export --------------------------------------------------------------------------


@dataclass
class ImportedContent:
    """One ``benchmark_content`` line of an export: a benchmark version's queries, judgments and
    document snippets for the drill-down, and where it was read from."""

    benchmark: str
    benchmark_version: str
    queries: list[dict[str, Any]]
    qrels: list[dict[str, Any]]
    documents: list[dict[str, Any]]
    source: str
    lineno: int
    source_is_file: bool = True  # False: built here from the benchmark as it loads (local_content)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"

    def save(self, store: Store) -> tuple[bool, int]:
        """Write into ``store`` what it does not have yet (the queries and judgments once per
        version, documents by id); returns (queries and judgments written, documents added)."""
        rel: dict[str, dict[str, int | None]] = {}
        viol: dict[str, list[str]] = {}
        for r in self.qrels:
            if r["grade"] is not None or not r["violating"]:
                rel.setdefault(r["qid"], {})[r["docid"]] = r["grade"]
            if r["violating"]:
                viol.setdefault(r["qid"], []).append(r["docid"])
        queries = [SimpleNamespace(id=q["qid"], text=q["text"], meta=q["meta"]) for q in self.queries]
        with store.transaction():
            wrote = store.save_benchmark_content(self.benchmark, self.benchmark_version, queries, rel, viol)
            added = store.save_documents(self.benchmark_version,
                                         [(d["docid"], d["title"], d["snippet"]) for d in self.documents])
            if self.source_is_file and (wrote or added):  # a run here replaces it with the local copy
                marked = set(store.get_meta(IMPORTED_CONTENT, []))
                store.set_meta(IMPORTED_CONTENT, sorted(marked | {self.benchmark_version}))
        return wrote, added


@dataclass
class ImportedLine:
    """One result line of an export: the result, the benchmark description it carries (if any)
    and where it was read from."""

    record: ResultRecord
    benchmark_info: BenchmarkInfo | None
    source: str
    lineno: int
    # set by a check made here (harness.record.verify) that recomputed the result's measures from its
    # rankings: only then does the import keep the record's extra["origin"]["verified"]
    verified_here: bool = False

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


def _imported(line: ResultLine | ContentLine, source: str, lineno: int) -> ImportedLine | ImportedContent:
    if isinstance(line, ContentLine):
        return ImportedContent(line.benchmark, line.benchmark_version,
                               [q.model_dump() for q in line.queries], [r.model_dump() for r in line.qrels],
                               [d.model_dump() for d in line.documents], source, lineno)
    d = line.model_dump(exclude={"schema_", "benchmark_info", "measures", "rankings"})
    rec = ResultRecord(**d, measures={m: MeasureValue(**v.model_dump()) for m, v in line.measures.items()},
                       rankings={q: list(r) for q, r in line.rankings.items()})
    info = line.benchmark_info
    it = ImportedLine(rec, None if info is None else BenchmarkInfo(**info.model_dump()), source, lineno)
    rekey(it)
    return it


def _checked_lines(lines: Iterable[tuple[int, str | bytes]], source: str) -> list[ImportedLine | ImportedContent]:
    items: list[ImportedLine | ImportedContent] = []
    problems: list[str] = []
    for lineno, text in lines:
        if len(text) > MAX_LINE_BYTES:
            raise ExchangeError(f"{source}:{lineno}: the line is {len(text)} characters long, over the limit of "
                                f"{_size(MAX_LINE_BYTES)} a line; nothing was imported")
        if not text.strip():
            continue
        line, found = _problems(text)
        if found:
            problems += [f"{source}:{lineno}: {p}" for p in found]
        elif not problems:
            items.append(_imported(line, source, lineno))
    if problems:
        raise _report(f"cannot import {plain(source)}", problems, "nothing was imported")
    return items


def read_export(lines: Iterable[str | bytes], source: str = "<input>") -> list[ImportedLine | ImportedContent]:
    """Every non-blank line of an export, checked against the schema. All lines are checked; when
    any has a problem, an :class:`ExchangeError` lists them as ``source:line: field: message``."""
    return _checked_lines(enumerate(lines, 1), source)


def _export_lines(stream: Any, source: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every non-blank line of a binary stream, read in chunks: at most
    :data:`MAX_IMPORT_BYTES` in all (the decompressed size, for a gzip stream) and
    :data:`MAX_LINE_BYTES` a line, else one :class:`ExchangeError` line naming the limit. A run of
    blank lines is skipped at once (counted, never split into lines)."""
    parts: list[bytes] = []  # the line being read, when it spans chunks
    size = 0  # its length so far
    lineno, total = 1, 0

    def too_long() -> ExchangeError:
        return ExchangeError(f"{source}:{lineno}: the line is longer than the limit of {_size(MAX_LINE_BYTES)} a "
                             "line; nothing was imported")

    def text(raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ExchangeError(f"{source}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None

    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_IMPORT_BYTES:
            raise ExchangeError(f"{source}: larger than the limit of {_size(MAX_IMPORT_BYTES)} (decompressed) an "
                                "import file may be; nothing was imported")
        pos, end = 0, len(chunk)
        while pos < end:
            if not parts:  # between lines: skip blank ones, however many, in one step
                stop = _BLANK.match(chunk, pos).end()  # type: ignore[union-attr]
                lineno += chunk.count(b"\n", pos, stop)
                pos = stop
                if pos == end:
                    break
            nl = chunk.find(b"\n", pos)
            piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
            size += len(piece)
            if size > MAX_LINE_BYTES:
                raise too_long()
            parts.append(piece)
            if nl < 0:
                break
            line = b"".join(parts)
            parts, size = [], 0
            yield lineno, text(line)
            lineno += 1
            pos = nl + 1
    if parts:
        yield lineno, text(b"".join(parts))


GZIP_MAGIC = b"\x1f\x8b"


@contextlib.contextmanager
def _open_binary(path: str | Path) -> Iterator[Any]:
    """An export file as a binary stream (``-``: stdin), gzip-decompressed when its first two bytes
    say it is compressed, whatever its name."""
    with contextlib.ExitStack() as files:
        raw = sys.stdin.buffer if str(path) == "-" else files.enter_context(open(path, "rb"))
        buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[arg-type]
        if buffered.peek(2)[:2] == GZIP_MAGIC:
            yield files.enter_context(gzip.GzipFile(fileobj=buffered, mode="rb"))  # closed first; the file after
        else:
            yield buffered


@contextlib.contextmanager
def open_export(path: str | Path) -> Iterator[TextIO]:
    """An export file as UTF-8 text (``-``: stdin), gzip-compressed or not whatever its name: its
    first two bytes tell."""
    with _open_binary(path) as stream:
        text = io.TextIOWrapper(stream, encoding="utf-8")
        try:
            yield text
        finally:
            text.detach()  # the stream closes with _open_binary's stack (stdin stays open)


def read_export_file(path: str) -> list[ImportedLine | ImportedContent]:
    """:func:`read_export` of a file (``-``: stdin), plain or gzip-compressed, read within the
    bounds of :func:`_export_lines`. A file that cannot be read, a damaged gzip stream, bytes that
    are not UTF-8 or a bound passed are one :class:`ExchangeError` line naming the file."""
    source = "<stdin>" if path == "-" else path
    try:
        with _open_binary(path) as stream:
            return _checked_lines(_export_lines(stream, source), source)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise ExchangeError(f"{source}: damaged gzip data ({type(e).__name__}: {e or 'truncated'})") from None
    except OSError as e:
        raise ExchangeError(f"{source}: cannot read: {e.strerror or e}") from None


# -- the benchmarks as they are here ------------------------------------------------------------


def base_name(name: str) -> str:
    """A benchmark name without its ``[:N]`` query slice."""
    return name.split("[", 1)[0]


def names_folder(name: str) -> bool:
    """Whether a benchmark name is a folder path (how results on ``--benchmark ./folder`` are
    stored) or climbs out of the data folder: such a name in a results file is never read here."""
    base = base_name(name)
    parts = re.split(r"[\\/]", base)
    return base.startswith(("/", ".", "~", "\\")) or bool(re.match(r"^[A-Za-z]:", base)) or ".." in parts


def shown_benchmark(name: str) -> str:
    """A benchmark name from a file as messages print it: a folder path as its last part only."""
    if not names_folder(name):
        return plain(name)
    last = re.split(r"[\\/]", base_name(name).rstrip("/\\"))[-1]
    return f"local folder {last!r}"


def _load_for_check(name: str, root: Path) -> Any:
    """The benchmark ``name`` as it loads here; ``<name>[:N]`` is the slice ``--max-queries N`` makes."""
    from ..core.registry import load_benchmark

    m = re.fullmatch(r"(.+)\[:(\d+)\]", name)
    bench = load_benchmark(m.group(1) if m else name, root, False)
    return bench.head(int(m.group(2))) if m else bench


class LocalBenchmarks:
    """Benchmarks loaded here for checking a file, once per name; a name that does not load keeps
    its reason (a string). A name that is a folder path (:func:`names_folder`) is never loaded,
    probed or printed unless ``read_folders`` (``beyondsim import`` of one's own export reads the
    folder it names; ``verify``, which a public CI runs on anyone's file, never does)."""

    def __init__(self, root: Path, log: Callable[[str], None] = lambda m: None, *, read_folders: bool = False):
        self.root, self.log, self.read_folders = Path(root), log, read_folders
        self._got: dict[str, Any] = {}

    def shown(self, name: str) -> str:
        """How messages print a benchmark name: a folder that is never read, by its last part only."""
        return plain(name) if self.read_folders else shown_benchmark(name)

    def get(self, name: str) -> Any:
        from ..data.readers import DataError, MissingDataError
        from ..core.registry import RegistryError

        if name not in self._got:
            if names_folder(name) and not self.read_folders:
                self._got[name] = "it names a local folder, and a folder named by a results file is never read"
                return self._got[name]
            self.log(f"loading {plain(name)} to check against it")
            try:
                self._got[name] = _load_for_check(name, self.root)
            except (MissingDataError, DataError, RegistryError, LookupError, OSError, ValueError) as e:
                self._got[name] = plain(" ".join(str(e).split())[:300] or type(e).__name__)
        return self._got[name]


def local_content(bench: Any, rankings: Iterable[Mapping[str, Sequence[Any]]]) -> ImportedContent:
    """The drill-down content of ``bench`` as the runner stores it (its judged queries, judgments
    and the documents of the top :data:`CONTENT_DEPTH` of ``rankings``), from the copy loaded here."""
    rel, viol = bench.judgments.relevance, bench.judgments.violating
    qrels = [{"qid": q, "docid": d, "grade": int(g), "violating": d in viol.get(q, ())}
             for q, grades in rel.items() for d, g in grades.items()]
    qrels += [{"qid": q, "docid": d, "grade": None, "violating": True}
              for q, ds in viol.items() for d in sorted(ds) if d not in rel.get(q, {})]
    ids = sorted({d for r in rankings for ranking in r.values() for d, _ in ranking[:CONTENT_DEPTH]})
    docs = [bench.corpus.get(d) for d in ids if d in bench.corpus]
    return ImportedContent(bench.name, bench.version,
                           [{"qid": q.id, "text": q.text, "meta": dict(q.meta)} for q in bench.eval_queries], qrels,
                           [{"docid": d.id, "title": d.title, "snippet": d.text} for d in docs],
                           f"{bench.name} loaded here", 0, source_is_file=False)


def _meta(meta: Any) -> str:
    return json.dumps(dict(meta or {}), sort_keys=True, default=str)


def content_differences(it: ImportedContent, bench: Any) -> str:
    """How a content line differs from the benchmark loaded here (empty: it does not): the texts
    of its queries, its judgments and its document snippets, each compared with the local copy."""
    local_q = {q.id: (q.text, _meta(q.meta)) for q in bench.eval_queries}
    queries = [q["qid"] for q in it.queries if local_q.get(q["qid"]) != (q["text"], _meta(q["meta"]))]
    queries += [q for q in local_q if q not in {x["qid"] for x in it.queries}]
    mine = {(r["qid"], r["docid"], r["grade"], bool(r["violating"])) for r in local_content(bench, []).qrels}
    theirs = {(r["qid"], r["docid"], r["grade"], bool(r["violating"])) for r in it.qrels}
    judgments = sorted({f"{q}/{d}" for q, d, _, _ in mine ^ theirs})
    local_docs = {d["docid"]: bench.corpus.get(d["docid"]) for d in it.documents}
    docs = [d["docid"] for d in it.documents if local_docs[d["docid"]] is None
            or snippet(d["title"], d["snippet"]) != snippet(local_docs[d["docid"]].title, local_docs[d["docid"]].text)]
    parts = [f"{len(xs)} {what} ({', '.join(plain(x) for x in xs[:3])}{', ...' if len(xs) > 3 else ''})"
             for what, xs in (("query text(s)", queries), ("judgment(s)", judgments), ("document(s)", docs)) if xs]
    return "; ".join(parts)


def rekey(it: ImportedLine) -> None:
    """Derive a result line's retriever, spec hash and key from its spec, as the runner makes them
    (:func:`harness.store.results.result_key`; an LLM retriever's key names the model its ``extra`` records),
    so no file can give a result another configuration's key or spec hash."""
    from ..core.registry import RetrieverSpec

    rec = it.record
    spec = RetrieverSpec.of(rec.spec)
    llm = rec.extra.get("llm")
    model = llm.get("model") if isinstance(llm, Mapping) else None
    rec.spec = spec.as_dict()
    rec.retriever, rec.spec_hash = spec.name, spec.hash
    rec.key = result_key(f"{spec.hash}|llm={model}" if model else spec.hash, rec.benchmark_version, rec.seed, rec.k,
                         rec.harness_version)


# -- checking benchmark versions ----------------------------------------------------------------


@dataclass
class VersionCheck:
    """What :func:`check_versions` found: the accepted lines (in file order), one message per
    refused line, warnings for benchmarks accepted unverified, and the descriptions of the local
    copies that were loaded."""

    accepted: list[ImportedLine | ImportedContent]
    refused: list[str]
    warnings: list[str]
    local_infos: dict[tuple[str, str], BenchmarkInfo] = field(default_factory=dict)


def check_versions(items: list[ImportedLine | ImportedContent], known: Mapping[str, set[str]], root: Path,
                   log: Callable[[str], None] = lambda m: None, *,
                   benches: LocalBenchmarks | None = None) -> VersionCheck:
    """Check each imported line's benchmark version against this store's versions of that
    benchmark (``known``), or, when the store does not know it, the version of the local copy
    under ``root``. A benchmark that cannot be loaded here: a result is accepted on the benchmark
    description it carries, a content line when a result of its version was. A content line of a
    benchmark that loads here must hold exactly the local copy's texts and judgments (its document
    snippets too), else it is refused: drill-down content comes from the benchmark, never from a
    file. ``benches`` (default: one that reads the folders a file names) loads the benchmarks."""

    benches = benches or LocalBenchmarks(root, log, read_folders=True)
    shown = benches.shown
    versions: dict[str, tuple[set[str] | None, str]] = {}
    local_infos: dict[tuple[str, str], BenchmarkInfo] = {}
    names = (it.benchmark if isinstance(it, ImportedContent) else it.record.benchmark for it in items)
    for name in dict.fromkeys(names):
        if name in known:
            versions[name] = (set(known[name]), "this store has")
            continue
        bench = benches.get(name)
        if isinstance(bench, str):
            versions[name] = (None, bench)
            continue
        versions[name] = ({bench.version}, "the local copy of the benchmark has")
        info = BenchmarkInfo.of(bench)
        local_infos[(info.name, info.version)] = info
    warnings: list[str] = []
    refused_at: dict[int, str] = {}
    warned: set[tuple[str, str]] = set()
    for it in items:
        if isinstance(it, ImportedContent):
            continue
        rec = it.record
        what = f"{it.where}: result {rec.key} ({plain(rec.label)}, seed {rec.seed}) on benchmark {shown(rec.benchmark)}"
        ok, why = versions[rec.benchmark]
        if ok is None:
            info = it.benchmark_info
            if info is None or (info.name, info.version) != (rec.benchmark, rec.benchmark_version):
                carried = ("no benchmark_info" if info is None else
                           f"a benchmark_info of {shown(info.name)} version {plain(info.version)}, not of this "
                           "result's benchmark")
                refused_at[id(it)] = (f"{what} version {plain(rec.benchmark_version)} cannot be verified: the benchmark is "
                                      f"not in this store and cannot be loaded here ({why}), and the line carries "
                                      f"{carried}")
                continue
            if (rec.benchmark, rec.benchmark_version) not in warned:
                warned.add((rec.benchmark, rec.benchmark_version))
                warnings.append(f"benchmark {shown(rec.benchmark)} version {plain(rec.benchmark_version)} was NOT verified: it is "
                                f"not in this store and cannot be loaded here ({why}); accepted on the exported "
                                "benchmark description")
        elif rec.benchmark_version not in ok:
            refused_at[id(it)] = (f"{what} was computed on version {plain(rec.benchmark_version)}, but {why} "
                                  f"version(s) {', '.join(plain(v) for v in sorted(ok))}; refusing to mix")
    for it in items:
        if not isinstance(it, ImportedContent):
            continue
        what = f"{it.where}: drill-down content of benchmark {shown(it.benchmark)}"
        ok, why = versions[it.benchmark]
        if ok is None:
            if (it.benchmark, it.benchmark_version) not in warned:
                refused_at[id(it)] = (f"{what} version {plain(it.benchmark_version)} cannot be verified: the benchmark is "
                                      f"not in this store and cannot be loaded here ({why}), and no result of that "
                                      "version in this file carries its description")
            continue
        if it.benchmark_version not in ok:
            refused_at[id(it)] = (f"{what} is of version {plain(it.benchmark_version)}, but {why} version(s) "
                                  f"{', '.join(plain(v) for v in sorted(ok))}; refusing to mix")
            continue
        bench = benches.get(it.benchmark)
        if isinstance(bench, str) or bench.version != it.benchmark_version:
            continue  # not here (the store's version was checked): kept until a run here replaces it
        differ = content_differences(it, bench)
        if differ:
            refused_at[id(it)] = (f"{what} version {plain(it.benchmark_version)} differs from the local copy of the "
                                  f"benchmark: {differ}; drill-down content comes from the benchmark, refusing it")
    return VersionCheck([it for it in items if id(it) not in refused_at],
                        [refused_at[id(it)] for it in items if id(it) in refused_at], warnings, local_infos)


# -- writing into a store -----------------------------------------------------------------------


@dataclass
class ImportCounts:
    results_added: int = 0
    results_present: int = 0
    content_lines: int = 0
    content_versions: int = 0
    documents_added: int = 0


def import_items(store: Store, items: Iterable[ImportedLine | ImportedContent],
                 local_infos: Mapping[tuple[str, str], BenchmarkInfo] | None = None, *,
                 origin: Mapping[str, Any] | None = None) -> ImportCounts:
    """Write checked lines into ``store`` in one transaction, each result in the store's imported
    slot (:mod:`harness.store.results`: a result computed here is never replaced or hidden by one): a
    result whose key is imported already is left as it is, unless the new one verified and the
    stored one did not; a benchmark the store does not describe yet gets the description of its
    local copy (``local_infos``), else the one the line carries. Each written result records where
    it came from in ``extra["origin"]`` (:mod:`harness.store.trust`): ``{"kind": "import", "source":
    <file>}`` plus ``origin``; an origin the line carried from an earlier import is replaced, and a
    ``verified`` entry is kept only when it was set by a check made here, in this import."""
    counts = ImportCounts()
    with store.transaction():
        have_info = {(b.name, b.version) for b in store.benchmarks()}
        for it in items:
            if isinstance(it, ImportedContent):
                wrote, n_docs = it.save(store)
                counts.content_lines += 1
                counts.content_versions += wrote
                counts.documents_added += n_docs
                continue
            rec = it.record
            carried = rec.extra.get(ORIGIN_KEY) if isinstance(rec.extra.get(ORIGIN_KEY), dict) else {}
            mark: dict[str, Any] = {"kind": "import", "source": it.source, **dict(origin or {})}
            if it.verified_here and isinstance(carried.get("verified"), dict):
                mark["verified"] = carried["verified"]
            rec.extra = {**rec.extra, ORIGIN_KEY: mark}
            ident = (rec.benchmark, rec.benchmark_version)
            if ident not in have_info:
                info = (local_infos or {}).get(ident) or it.benchmark_info
                if info is not None and (info.name, info.version) == ident:
                    store.save_benchmark(info)
                    have_info.add(ident)
            stored = store.get(rec.key, slot=IMPORTED)
            better = (stored is not None and trust_of(rec.extra) == VERIFIED
                      and trust_of(stored.extra) != VERIFIED)  # the order of imports decides nothing
            if store.save(rec, replace=better):
                counts.results_added += 1
            else:
                counts.results_present += 1
    return counts


# -- writing an export --------------------------------------------------------------------------


def whole_depth(rec: ResultRecord) -> int:
    """How deep the stored rankings of ``rec`` are known to be whole (every ranking as the run
    returned it down to that depth): ``k`` for a result computed here; for an imported one, the
    depth the file it came from said it cut them to (``extra[CUT_KEY]``), and when that file said
    nothing, no deeper than its longest stored ranking (the shipped bundle's rankings of top-100
    runs are cut to 10: an export may not claim them whole to 100)."""
    carried = rec.extra.get(CUT_KEY) if isinstance(rec.extra, Mapping) else None
    whole = rec.k
    if type(carried) is int and carried >= 1:
        whole = min(whole, carried)
    elif isinstance(rec.extra, Mapping) and origin(rec.extra) is not None:  # imported, cut unknown
        whole = min(whole, max((len(r) for r in rec.rankings.values()), default=0)) or whole
    return whole


def export_record(rec: ResultRecord) -> dict[str, Any]:
    """One result as a result line of export schema :data:`EXPORT_SCHEMA`: every field of the
    record (measures, per-query measures, phases, LLM calls, rankings, environment, provenance).
    A non-finite mean or interval bound is written as ``null`` (undefined)."""
    d = dict(rec.__dict__)
    d.pop("id", None)
    d["schema"] = EXPORT_SCHEMA
    d["measures"] = {m: {"mean": finite_or_none(v.mean), "n": v.n, "ci_low": finite_or_none(v.ci_low),
                         "ci_high": finite_or_none(v.ci_high)} for m, v in rec.measures.items()}
    d["rankings"] = {q: [[doc, s] for doc, s in r] for q, r in rec.rankings.items()}
    return d


def export_content(store: Store, benchmark: str, version: str, doc_ids: Iterable[str]) -> dict[str, Any] | None:
    """The drill-down content of one benchmark version as an export line of kind
    :data:`CONTENT_KIND`: its queries (in order), its judgments and the stored documents among
    ``doc_ids``; ``None`` when this store keeps none of these for the version."""
    queries = store.queries_of(version)
    rel, viol = store.qrels_of(version)
    docs = store.documents_of(version, sorted(set(doc_ids)))
    if not queries and not rel and not viol and not docs:
        return None
    qrels: dict[tuple[str, str], dict[str, Any]] = {}
    for q, grades in rel.items():
        for d, g in grades.items():
            qrels[(q, d)] = {"qid": q, "docid": d, "grade": g, "violating": False}
    for q, ds in viol.items():
        for d in ds:
            qrels.setdefault((q, d), {"qid": q, "docid": d, "grade": None, "violating": False})["violating"] = True
    return {
        "schema": EXPORT_SCHEMA, "kind": CONTENT_KIND, "benchmark": benchmark, "benchmark_version": version,
        "queries": [{"qid": q["qid"], "text": q["text"], "meta": q["meta"]} for q in queries],
        "qrels": [qrels[k] for k in sorted(qrels)],
        "documents": [{"docid": d, "title": t, "snippet": sn} for d, (t, sn) in sorted(docs.items())],
    }


def _json_line(d: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``d`` as one JSON line and what the import schema finds wrong with it."""
    try:
        text = json.dumps(d, sort_keys=True, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: the schema check below names where
        text = json.dumps(d, sort_keys=True)
    return text, _problems(text)[1]


def export_jsonl(store: Store, out: TextIO, *, benchmark: str | None = None, retriever: str | None = None,
                 depth: int | None = None, annotate: Callable[[ResultRecord], None] | None = None) -> int:
    """Write the stored results as JSON lines: one result line per result (per-query measures and
    rankings included) and, before the first result of each benchmark version, one benchmark
    content line when this store keeps drill-down content for it. Every line is checked against
    the import schema before anything reaches ``out``; a line an import would refuse refuses the
    whole export (:class:`ExchangeError`, every problem listed). ``depth`` cuts every ranking to
    its top ``depth`` documents (the per-query measures stay those of the full ranking);
    ``annotate`` may add to each record (its ``extra``) before it is written. Returns the number of
    results.

    Each line says in ``extra[CUT_KEY]`` how deep its rankings are whole (:func:`whole_depth`):
    verify recomputes every cutoff within it, and lists a deeper one as not recomputable."""
    bench = {(b.name, b.version): b for b in store.benchmarks()}
    records = store.results(benchmark=benchmark, retriever=retriever, full=True)
    for rec in records:  # how deep the written rankings are whole: verify recomputes every cutoff within it
        whole = whole_depth(rec)
        if depth is not None:
            rec.rankings = {q: r[:depth] for q, r in rec.rankings.items()}
            whole = min(whole, depth)
        rec.extra = {**rec.extra, CUT_KEY: whole}
    if annotate is not None:
        for rec in records:
            annotate(rec)
    top: dict[tuple[str, str], set[str]] = {}
    for rec in records:
        ids = top.setdefault((rec.benchmark, rec.benchmark_version), set())
        ids.update(d for r in rec.rankings.values() for d, _ in r[:CONTENT_DEPTH])
    written: set[tuple[str, str]] = set()
    problems: list[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        for rec in records:
            ident = (rec.benchmark, rec.benchmark_version)
            if ident not in written:
                written.add(ident)
                content = export_content(store, rec.benchmark, rec.benchmark_version, top[ident])
                if content is not None:
                    text, found = _json_line(content)
                    problems += [f"drill-down content of benchmark {plain(rec.benchmark)} version "
                                 f"{plain(rec.benchmark_version)}: {p}" for p in found]
                    spool.write(text + "\n")
            d = export_record(rec)
            b = bench.get(ident)
            if b is not None:
                d["benchmark_info"] = b.__dict__
            text, found = _json_line(d)
            problems += [f"result {plain(rec.key)} ({plain(rec.label)} on {plain(rec.benchmark)}, seed {rec.seed}): {p}"
                         for p in found]
            spool.write(text + "\n")
        if problems:
            raise _report("cannot export", problems, "nothing was written (-b/-r export the other results)")
        spool.seek(0)
        shutil.copyfileobj(spool, out)
    return len(records)
