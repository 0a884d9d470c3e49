"""The embedding cache: float32 matrices on disk, each file named by its key and the checksum of its
bytes, verified on every load, and beside them what computing each entry cost (harness/cost/figures.py reads
those records). harness/models/pool.py's EncoderPool keeps its embeddings here."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


def _texts_hash(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


MAX_SECONDS = 1e7
"""The largest number of seconds a cost record may hold (about 116 days): a larger one, like a
negative one, is not a measurement."""
MAX_USD = 1e6
"""The largest number of dollars a cost record may hold."""
COST_BOUNDS = {"wall_s": MAX_SECONDS, "cpu_s": MAX_SECONDS, "latency_s": MAX_SECONDS, "usd": MAX_USD,
               "rows": 1e12}
"""The numeric fields of a cost record and the bound of each; each may be absent or null (unknown)."""


def amount(value: Any, bound: float) -> float | None:
    """``value`` as a float when it is a finite number in ``[0, bound)`` (a JSON number, never a
    bool or a string); ``None`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return v if math.isfinite(v) and 0 <= v < bound else None


def bad_cost_field(record: Any) -> tuple[str, Any] | None:
    """The first field of a cost record that is not a cost (:data:`COST_BOUNDS`), with its value;
    ``("(record)", record)`` when the record is not a JSON object; ``None`` when it is sound."""
    if not isinstance(record, dict):
        return "(record)", record
    for name, bound in COST_BOUNDS.items():
        v = record.get(name)
        if v is not None and amount(v, bound) is None:
            return name, v
    return None


def shown(value: Any, n: int = 40) -> str:
    """A value as a warning quotes it: its ``repr``, cut to ``n`` characters."""
    text = repr(value)
    return text if len(text) <= n else text[:n] + "…"


CHECKSUM_CHARS = 32
"""Hex characters of the SHA-256 of an entry's bytes kept in its file name (128 bits)."""


def sha256_hex(path: Path) -> str:
    """The SHA-256 of the file's bytes, in hex (read a megabyte at a time)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_checksum(path: Path) -> str:
    """The first :data:`CHECKSUM_CHARS` hex digits of the SHA-256 of the file's bytes."""
    return sha256_hex(path)[:CHECKSUM_CHARS]


def warn_stderr(message: str) -> None:
    """One ``warning: …`` line on standard error."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


class EmbeddingCache:
    """Float32 matrices on disk: ``<root>/<folder>/<key>-<checksum>.npy``.

    The checksum in the name is that of the file's bytes (:func:`file_checksum`), so an entry is
    written in one atomic rename and verified on every load: a file that is truncated, overwritten,
    unreadable or of the wrong shape is reported through ``warn`` (one line naming the path),
    deleted, and treated as missing, so the caller recomputes and stores it again. Files from
    before checksums (``<key>.npy``) are never read; they are removed when their entry is rewritten.
    """

    def __init__(self, root: Path, warn: Callable[[str], None] = warn_stderr):
        self.root, self.warn = Path(root), warn
        self.discarded = 0
        self._warned: set[Path] = set()  # the cost records already reported as bad (one line each)

    def entries(self, folder: str, key: str) -> list[Path]:
        """The checksummed files of ``key`` (normally one)."""
        return sorted((self.root / folder).glob(f"{key}-*.npy"))

    def get(self, folder: str, key: str, rows: int) -> np.ndarray | None:
        """The verified ``(rows, dim)`` float32 matrix of ``key``, memory-mapped; ``None`` when absent
        or damaged."""
        for path in self.entries(folder, key):
            try:
                return self._load_verified(path, rows)
            except (OSError, ValueError, EOFError) as e:
                self.discarded += 1
                self.warn(f"embedding cache entry {path} is damaged ({e}); removed, recomputing")
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        return None

    @staticmethod
    def _load_verified(path: Path, rows: int) -> np.ndarray:
        """The entry's matrix; ``ValueError`` when its bytes or its shape are not what they must be."""
        want = path.stem.rsplit("-", 1)[-1]
        got = file_checksum(path)
        if got != want:
            raise ValueError(f"its checksum is {got}, its name says {want}")
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if arr.dtype != np.float32 or arr.ndim != 2 or arr.shape[0] != rows:
            raise ValueError(f"it holds {arr.dtype} {arr.shape}, expected float32 with {rows} rows")
        return arr

    def record_cost(self, folder: str, name: str, cost: dict[str, Any]) -> None:
        """Write ``<folder>/<name>.json`` (what computing an artefact cost) through a temporary file;
        a failure is a warning, never an error."""
        directory = self.root / folder
        tmp = directory / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(cost, sort_keys=True), encoding="utf-8")
            os.replace(tmp, directory / f"{name}.json")
        except OSError as e:
            self.warn(f"cost record {directory / name}.json not written: {e}")
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    def recorded_cost(self, folder: str, name: str) -> dict[str, Any] | None:
        """What ``<folder>/<name>.json`` recorded; ``None`` when absent, unreadable or not a sound cost
        record (each of :data:`COST_BOUNDS` present a finite number in its range, or null): a record
        that is there but bad is reported through ``warn`` (one line naming the file and the field)
        and ignored, so what it was to say is unknown, never 0 and never the bad value."""
        path = self.root / folder / f"{name}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # ValueError: not UTF-8
            self._bad(path, f"unreadable ({type(e).__name__})")
            return None
        try:
            d = json.loads(text)
        except (ValueError, RecursionError):
            self._bad(path, "not valid JSON")
            return None
        bad = bad_cost_field(d)
        if bad is not None:
            field_name, value = bad
            bound = COST_BOUNDS.get(field_name)
            want = "a JSON object" if bound is None else f"a finite number in [0, {bound:g})"
            self._bad(path, f"{'the record' if bound is None else f'field {field_name!r}'} is {shown(value)}, "
                            f"must be {want}")
            return None
        return d

    def _bad(self, path: Path, problem: str) -> None:
        """One warning line per bad record (naming it and what is wrong), however often it is read."""
        if path in self._warned:
            return
        self._warned.add(path)
        self.warn(f"cost record {path}: {problem}; the record is ignored and what it records counted as unknown")

    def put(self, folder: str, key: str, arr: np.ndarray) -> Path:
        """Store ``arr`` under ``key`` (tmp file, checksum, rename) and drop the key's other files."""
        directory = self.root / folder
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "wb") as f:
                np.save(f, arr, allow_pickle=False)
            path = directory / f"{key}-{file_checksum(tmp)}.npy"
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        for other in [*self.entries(folder, key), directory / f"{key}.npy"]:
            if other != path:
                with contextlib.suppress(OSError):
                    other.unlink(missing_ok=True)
        return path
