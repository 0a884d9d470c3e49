"""Reading run files: the rankings of a system that did not run here (docs/design/runfiles.md).

Two formats, told apart by content (a ``.gz`` file is read through gzip whatever its name, when its
first bytes are gzip's):

* **TREC**: one line ``qid Q0 docid rank score tag`` per ranked document, fields separated by white
  space (trec_eval's format; Anserini, PyTerrier and every TREC track write it);
* **JSON**: ``{qid: {docid: score}}`` (ranx, ir_measures, pytrec_eval, MTEB) or
  ``{qid: [[docid, score], ...]}``.

The order within a query is trec_eval's, which pytrec_eval shares: score descending, ties broken by
document id in *descending* order of its code points (``strcmp``), whatever the rank column and the
line order say. So a file scores here as it does in trec_eval, ties included; the constraint
measures read the same order.

Every bad input is one :class:`RunFileError` naming the file, the line (JSON: the query and
document) and the field: a line without six fields, a rank that is no integer, a score that is
not a finite number, a document listed twice for one query, a query or document id the benchmark
does not have (unless ``skip_unknown``: those lines are dropped and counted), a file that is not
UTF-8 or not one of the two formats.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Container, Iterable, Mapping, Sequence

from ..core.errors import UserError
from ..core.types import Run

GZIP_MAGIC = b"\x1f\x8b"
POOL_FORMAT = "beyondsim-pool/1"  # a candidate pool's manifest (harness/run/pools.py)
MAX_RUN_BYTES = 2 * 1024 ** 3  # a decompressed run file larger than this is refused (a gzip bomb)


class RunFileError(UserError, ValueError):
    """A run file that cannot be read: one line naming file, line and field."""


@dataclass
class RunFile:
    """A run file as read: its rankings in trec_eval's order and what was found on the way."""

    run: Run
    path: str
    sha256: str  # of the file's bytes as given (compressed, if it is)
    format: str  # "trec" | "json"
    tags: list[str] = field(default_factory=list)  # TREC run tags, in order of first use
    lines: int = 0  # ranked documents read (TREC lines; JSON entries)
    skipped_queries: dict[str, int] = field(default_factory=dict)  # unknown query id → lines dropped
    skipped_documents: int = 0  # lines dropped for an unknown document id
    unjudged_queries: list[str] = field(default_factory=list)  # known queries without judgments (not scored)

    @property
    def tag(self) -> str:
        """The run tag (TREC files have one; several are joined with '+'; '' for JSON)."""
        return "+".join(self.tags)


def trec_order(pairs: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """``pairs`` in trec_eval's order: score descending, ties by document id descending."""
    out = sorted(pairs, key=itemgetter(0), reverse=True)
    out.sort(key=lambda p: -p[1])  # stable: ties keep the id order
    return out


def file_bytes(path: Path) -> tuple[bytes, str]:
    """The file's content (gunzipped when it starts as gzip does) and the SHA-256 of its bytes."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise RunFileError(f"{path}: cannot read the run file: {e.strerror or e}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if raw[:2] == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
                data = f.read(MAX_RUN_BYTES + 1)
        except (OSError, EOFError) as e:
            raise RunFileError(f"{path}: a gzip file that does not decompress: {e}") from None
        if len(data) > MAX_RUN_BYTES:
            raise RunFileError(f"{path}: decompresses to more than {MAX_RUN_BYTES:,} bytes; not read")
        raw = data
    return raw, digest


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise RunFileError(f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x})") from None


def _score(path: str, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RunFileError(f"{path}{where}: score: {_shown(value)} is not a number")
    try:
        s = float(value)
    except ValueError:
        raise RunFileError(f"{path}{where}: score: {_shown(value)} is not a number") from None
    if not math.isfinite(s):
        raise RunFileError(f"{path}{where}: score: {_shown(value)} is not a finite number")
    return s


def _shown(value: Any, limit: int = 40) -> str:
    """A value of the file as a message shows it: its repr, escapes visible, cut to ``limit``."""
    r = ascii(value) if isinstance(value, str) else ascii(json.dumps(value)) if not isinstance(value, float) else repr(value)
    return r if len(r) <= limit else r[:limit] + "…"


class _Reader:
    def __init__(self, path: Path, queries: Container[str] | None, documents: Container[str] | None,
                 judged: Container[str] | None, skip_unknown: bool):
        self.path, self.queries, self.documents, self.judged, self.skip = str(path), queries, documents, judged, skip_unknown
        self.rows: dict[str, dict[str, float]] = {}
        self.first: dict[tuple[str, str], str] = {}
        self.out = RunFile(Run(), self.path, "", "")
        self._unjudged: dict[str, None] = {}

    def add(self, where: str, qid: str, doc: str, score: float, at: str = "") -> None:
        out = self.out
        if self.queries is not None and qid not in self.queries:
            if not self.skip:
                raise RunFileError(f"{self.path}{where}: qid: unknown query {_shown(qid)} (not a query of the "
                                   "benchmark); --skip-unknown drops such lines and counts them")
            out.skipped_queries[qid] = out.skipped_queries.get(qid, 0) + 1
            return
        if self.documents is not None and doc not in self.documents:
            if not self.skip:
                raise RunFileError(f"{self.path}{where}: docid: unknown document {_shown(doc)} (not in the "
                                   "benchmark's corpus); --skip-unknown drops such lines and counts them")
            out.skipped_documents += 1
            return
        ranking = self.rows.setdefault(qid, {})
        if doc in ranking:
            raise RunFileError(f"{self.path}{where}: docid: document {_shown(doc)} is listed twice for query "
                               f"{_shown(qid)} (first at {self.first[(qid, doc)]})")
        ranking[doc] = score
        self.first[(qid, doc)] = at
        out.lines += 1

    def finish(self) -> RunFile:
        out = self.out
        for qid, ranking in self.rows.items():
            if self.judged is not None and qid not in self.judged:
                self._unjudged[qid] = None
                continue
            out.run[qid] = trec_order(ranking.items())
        out.unjudged_queries = list(self._unjudged)
        return out


def read_run(path: str | Path, *, queries: Container[str] | None = None, documents: Container[str] | None = None,
             judged: Container[str] | None = None, skip_unknown: bool = False) -> RunFile:
    """The run file at ``path`` (see the module docstring), its rankings in trec_eval's order.
    ``queries`` / ``documents``: the ids the benchmark has (an id outside them is an error, or with
    ``skip_unknown`` a dropped, counted line); ``judged``: the queries with judgments (the rankings
    of the others are left out and listed, as trec_eval leaves them out)."""
    p = Path(path)
    data, digest = file_bytes(p)
    text = _text(p, data)
    reader = _Reader(p, queries, documents, judged, skip_unknown)
    if text.lstrip()[:1] == "{":
        reader.out.format = "json"
        _read_json(p, text, reader)
    else:
        reader.out.format = "trec"
        _read_trec(p, text, reader)
    out = reader.finish()
    out.sha256 = digest
    if not out.lines and not out.skipped_documents and not out.skipped_queries:
        raise RunFileError(f"{p}: no ranked document in the file (a TREC run has lines 'qid Q0 docid rank score tag')")
    return out


def _read_trec(path: Path, text: str, reader: _Reader) -> None:
    tags: dict[str, None] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        where = f":{lineno}"
        if len(parts) != 6:
            raise RunFileError(f"{path}{where}: fields: expected 6 'qid Q0 docid rank score tag', got {len(parts)}")
        qid, _, doc, rank, score, tag = parts
        try:
            int(rank)
        except ValueError:
            raise RunFileError(f"{path}{where}: rank: {_shown(rank)} is not an integer") from None
        reader.add(where, qid, doc, _score(str(path), where, score), f"line {lineno}")
        tags.setdefault(tag, None)
    reader.out.tags = list(tags)


def _read_json(path: Path, text: str, reader: _Reader) -> None:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise RunFileError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
    if not isinstance(obj, Mapping):
        raise RunFileError(f"{path}: expected a JSON object {{qid: {{docid: score}}}} or {{qid: [[docid, score], …]}}")
    for qid, ranking in obj.items():
        if isinstance(ranking, Mapping):
            items: Iterable[Any] = ranking.items()
        elif isinstance(ranking, list):
            items = ranking
        else:
            raise RunFileError(f"{path}: query {_shown(qid)}: expected {{docid: score}} or [[docid, score], …], "
                               f"got {type(ranking).__name__}")
        for i, item in enumerate(items):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise RunFileError(f"{path}: query {_shown(qid)}, entry {i + 1}: expected [docid, score], "
                                   f"got {_shown(item)}")
            doc, score = item
            if not isinstance(doc, str):
                raise RunFileError(f"{path}: query {_shown(qid)}, entry {i + 1}: docid: {_shown(doc)} is not a string")
            where = f": query {_shown(qid)}, entry {i + 1} (document {_shown(doc)})"
            reader.add(where, qid, doc, _score(str(path), where, score), f"entry {i + 1}")


def pool_hash(benchmark_version: str, rankings: Mapping[str, Sequence[tuple[str, float]]]) -> str:
    """The content hash that names a pool: its benchmark version and each query's ordered ids (a
    query without candidates is left out, as a TREC file leaves it out)."""
    h = hashlib.sha256()
    h.update(f"{POOL_FORMAT}\n{benchmark_version}\n".encode())
    for q in sorted(q for q, r in rankings.items() if r):
        h.update(json.dumps([q, [d for d, _ in rankings[q]]], ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()[:16]
