"""Data-directory resolution and strict readers for benchmark files.

Every reader reports malformed input with the file, the line and the field at fault, and a
missing file with the list of files the loader needs plus the official source to fetch them from.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

from ..core.errors import UserError
from ..core.types import Benchmark, BenchmarkMeta


class DataError(UserError, ValueError):
    """Malformed benchmark input: names the file, line and problem."""

    def __init__(self, path: Path | str, line: int | None, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


class MissingDataError(UserError, FileNotFoundError):
    """A benchmark's files are absent; says which, where they were looked for, and the source."""

    def __init__(self, benchmark: str, root: Path, missing: Sequence[str], source: str):
        self.benchmark, self.root, self.missing, self.source = benchmark, root, list(missing), source
        files = "\n".join(f"  - {root / m}" for m in missing)
        super().__init__(
            f"benchmark {benchmark!r}: required files are missing:\n{files}\n"
            f"Official source: {source}\n"
            "Put the files there, or point --data-dir / BEYONDSIM_DATA at a folder that has them."
        )


NAME_MAX = 255
"""Bytes in one name of a path (a folder or a file) on the common file systems (ext4, XFS, APFS, NTFS)."""
PATH_MAX = 4096
"""Bytes in a whole path on Linux."""


def short_path(path: Path | str, n: int = 120, part: int = 40) -> str:
    """A path as a message quotes it: each name longer than ``part`` characters cut in its middle
    (``aaaa…aaaa (300 characters)``), then the whole cut in its middle to about ``n`` characters."""
    def cut(name: str) -> str:
        if len(name) <= part:
            return name
        keep = max(4, (part - 20) // 2)
        return f"{name[:keep]}…{name[-keep:]} ({len(name)} characters)"

    text = str(path)
    text = "/".join(cut(x) for x in text.split("/"))
    if len(text) > n:
        text = f"{text[:n // 2 - 1]}…{text[-(n // 2 - 1):]}"
    return text


def path_too_long(path: Path | str) -> str | None:
    """Why the file system cannot name ``path`` (a name in it longer than :data:`NAME_MAX` bytes, or
    the whole longer than :data:`PATH_MAX`), or ``None``."""
    text = os.fsencode(str(path))
    for name in text.split(b"/"):
        if len(name) > NAME_MAX:
            return (f"a name in this path is {len(name)} bytes long; file systems allow at most {NAME_MAX} "
                    "(is the path mistyped?)")
    if len(text) > PATH_MAX:
        return f"the path is {len(text)} bytes long; at most {PATH_MAX} are allowed"
    return None


def check_path(path: Path | str) -> Path:
    """``path``, or a ``DataError`` (naming it, shortened) when no file system can name it; call it
    before a benchmark's path is first looked at, so a mistyped path is one line, not a traceback."""
    why = path_too_long(path)
    if why is not None:
        raise DataError(short_path(path), None, why)
    return Path(path)


def _stat_error(path: Path, e: OSError) -> DataError:
    why = path_too_long(path) if e.errno == errno.ENAMETOOLONG else None
    return DataError(short_path(path), None, why or f"cannot be looked at: {os.strerror(e.errno or 0) or e}")


def _checked(path: Path | str, test: str) -> bool:
    """``Path.<test>()`` (``exists``, ``is_dir``, ``is_file``), an ``OSError`` it raises (a name
    too long, a folder it may not enter) turned into one ``DataError`` naming the path."""
    p = Path(path)
    try:
        return bool(getattr(p, test)())
    except OSError as e:
        raise _stat_error(p, e) from None


def path_exists(path: Path | str) -> bool:
    """``Path.exists`` that says what is wrong with a path it cannot look at (a name too long, a
    folder it may not enter) in one ``DataError`` naming it, instead of an ``OSError``."""
    return _checked(path, "exists")


def path_is_dir(path: Path | str) -> bool:
    """``Path.is_dir`` with :func:`path_exists`' errors."""
    return _checked(path, "is_dir")


def path_is_file(path: Path | str) -> bool:
    """``Path.is_file`` with :func:`path_exists`' errors."""
    return _checked(path, "is_file")


def default_data_dir(explicit: str | Path | None = None) -> Path:
    """``--data-dir``, else ``BEYONDSIM_DATA``, else ``../shared/data`` when present, else ``./data``."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get("BEYONDSIM_DATA")
    if env:
        return Path(env).expanduser().resolve()
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        cand = base.parent / "shared" / "data"
        if cand.is_dir():
            return cand.resolve()
    return (Path.cwd() / "data").resolve()


def default_home(explicit: str | Path | None = None) -> Path:
    """``explicit``, else ``BEYONDSIM_HOME``, else ``~/.beyondsim`` (resolved, not created)."""
    raw = explicit or os.environ.get("BEYONDSIM_HOME") or "~/.beyondsim"
    return Path(raw).expanduser().resolve()


def missing_files(root: Path, files: Sequence[str]) -> list[str]:
    """The entries of ``files`` (relative to ``root``) that do not exist; a path no file system can
    name is a ``DataError`` naming it (:func:`path_exists`)."""
    return [f for f in files if not path_exists(Path(root) / f)]


def require_files(benchmark: str, root: Path, files: Sequence[str], source: str) -> None:
    missing = missing_files(root, files)
    if missing:
        raise MissingDataError(benchmark, root, missing, source)


def not_utf8(path: Path) -> DataError:
    """The ``DataError`` for a file that is not UTF-8: names the first line holding a bad byte."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataError(path, lineno, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} "
                                               "of the line)")
    return DataError(path, None, "not valid UTF-8")


def read_lines(path: Path, newline: str | None = None) -> Iterator[str]:
    """The lines of a UTF-8 text file; a byte that is not UTF-8 raises ``DataError`` naming its line,
    a path no file system can name one naming the path."""
    check_path(path)
    with open(path, encoding="utf-8", newline=newline) as f:
        try:
            yield from f
        except UnicodeDecodeError:
            raise not_utf8(path) from None


def iter_jsonl(path: Path, *, blank_lines: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)``; blank lines are skipped (an error with ``blank_lines=False``),
    anything else must be a JSON object."""
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            if not blank_lines:
                raise DataError(path, lineno, "empty line")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def read_json(path: Path) -> Any:
    text = "".join(read_lines(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None


def get_field(obj: dict[str, Any], names: str | Sequence[str], path: Path, line: int | None,
              kind: type | tuple[type, ...] = str, default: Any = ...) -> Any:
    """The first present key of ``names``; a missing or mistyped field raises ``DataError``."""
    keys = [names] if isinstance(names, str) else list(names)
    for k in keys:
        if k in obj:
            v = obj[k]
            if kind is str and isinstance(v, (int,)) and not isinstance(v, bool):
                v = str(v)  # numeric ids are common in BEIR files
            if not isinstance(v, kind):
                want = kind.__name__ if isinstance(kind, type) else "/".join(t.__name__ for t in kind)
                raise DataError(path, line, f"field {k!r} must be {want}, got {type(v).__name__}")
            return v
    if default is not ...:
        return default
    raise DataError(path, line, f"missing field {' or '.join(repr(k) for k in keys)}")


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of a tab-separated judgment file: blank lines and a leading
    ``query-id`` header skipped; a line without tabs is split on whitespace."""
    for lineno, row in enumerate(csv.reader(read_lines(path, newline=""), delimiter="\t"), 1):
        if not row or not "".join(row).strip():
            continue
        if len(row) == 1:
            row = row[0].split()
        if lineno == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue
        yield lineno, row


def read_qrels_tsv(path: Path) -> Iterator[tuple[int, str, str, int]]:
    """BEIR qrels: ``query-id<TAB>corpus-id<TAB>score`` with an optional header line.
    Also accepts the 4-column TREC form ``qid 0 docid rel``."""
    for lineno, row in _tsv_rows(path):
        if len(row) == 4:
            row = [row[0], row[2], row[3]]
        if len(row) != 3:
            raise DataError(path, lineno, f"expected 3 tab-separated fields (query-id, corpus-id, score), got {len(row)}")
        qid, did, score = (c.strip() for c in row)
        yield lineno, qid, did, parse_grade(score, path, lineno)


def read_pairs_tsv(path: Path) -> Iterator[tuple[int, str, str]]:
    """``query-id<TAB>corpus-id`` rows (a list of judged pairs without grades, such as a
    ``violating`` file) with an optional header line; whitespace also separates the fields."""
    for lineno, row in _tsv_rows(path):
        if len(row) != 2:
            raise DataError(path, lineno, f"expected 2 tab-separated fields (query-id, corpus-id), got {len(row)}")
        qid, did = (c.strip() for c in row)
        for name, value in (("query-id", qid), ("corpus-id", did)):
            if not value:
                raise DataError(path, lineno, f"field {name!r} is empty")
        yield lineno, qid, did


def parse_grade(value: str, path: Path | str, line: int | None, field_name: str = "score") -> int:
    """A relevance grade written as a whole number (``2``, ``-1``, ``1.0``); a fraction, ``inf``,
    ``nan`` or anything that is not a number raises ``DataError``."""
    try:
        number = float(value)
    except ValueError:
        raise DataError(path, line, f"field {field_name!r} is not a number: {value!r}") from None
    if not math.isfinite(number) or not number.is_integer():
        raise DataError(path, line, f"field {field_name!r} must be a whole number, got {value!r}")
    return int(number)


def benchmark_warnings(bench: Benchmark, shown: int = 5) -> list[str]:
    """What is odd about a benchmark that loads: judged queries without a relevant document (every
    ranking scores 0 on them), judged queries without a violating document on a constraint
    benchmark (V@k and FVR@k skip them) and documents that repeat another's text (they tie)."""
    def ids(qids: list[str]) -> str:
        more = f", … ({len(qids) - shown} more)" if len(qids) > shown else ""
        return ", ".join(repr(q) for q in qids[:shown]) + more

    rel, viol, t = bench.judgments.relevance, bench.judgments.violating, bench.relevance_threshold
    out: list[str] = []
    no_rel = [q for q in rel if not any(g >= t for g in rel[q].values())]
    if no_rel:
        out.append(f"judged queries without a relevant document (none graded >= {t}): {len(no_rel)} ({ids(no_rel)}); "
                   "nDCG, MAP and R are 0 on them whatever the ranking")
    no_viol = [q for q in rel if not viol.get(q)]
    if bench.task == "constraint" and no_viol:
        out.append(f"judged queries without a violating document: {len(no_viol)} of {len(rel)} ({ids(no_viol)}); "
                   f"V@k and FVR@k are averaged over the other {len(rel) - len(no_viol)}")
    dup = len(bench.corpus) - len({(d.title, d.text) for d in bench.corpus})
    if dup:
        out.append(f"documents that repeat the title and text of an earlier one: {dup}; they tie with it in any "
                   "ranking")
    return out


DatasetInfo = BenchmarkMeta
"""The name loaders used for :class:`harness.types.BenchmarkMeta` before it was one type; kept for
plug-ins that import it."""


class BenchmarkLoader(Protocol):
    """What a benchmark entry point provides (a class)."""

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta: ...

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark: ...
