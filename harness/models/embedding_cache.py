"""The embedding cache: float32 matrices on disk, each file named by its key and the checksum of its
bytes, verified on every load, and beside them what computing each entry cost (harness/cost/figures.py reads
those records). harness/models/pool.py's EncoderPool keeps its embeddings here."""

from __future__ import annotations

import contextlib
import hashlib
import json
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
        """What ``<folder>/<name>.json`` recorded; ``None`` when absent or unreadable."""
        try:
            d = json.loads((self.root / folder / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

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
