"""Folders written whole or not at all, and a lock between processes.

:func:`replacing_folder` writes a folder (an extracted model, a trained encoder) into a temporary
sibling and renames it into place, so that no reader ever sees half of one and a failed write
leaves the old folder as it was. :func:`exclusive_lock` serialises the writers of one place across
processes. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Callable, Iterator

TMP_SUFFIX = ".tmp"
"""What the name of every temporary sibling ends with: ``.<name>.<random>.tmp`` (a folder being
written) and ``.<name>.<random>.old.tmp`` (the old folder on its way out)."""


def _sibling(dest: Path, tag: str = "") -> Path:
    """A new, empty folder beside ``dest`` named ``.<name>.<random><tag>.tmp`` (made with the
    process's umask, like any folder it creates)."""
    while True:
        path = dest.parent / f".{dest.name}.{secrets.token_hex(6)}{tag}{TMP_SUFFIX}"
        try:
            path.mkdir()
        except FileExistsError:  # pragma: no cover - 48 random bits taken
            continue
        return path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _move_into_place(tmp: Path, dest: Path, keep_existing: Callable[[Path], bool] | None) -> None:
    """Rename ``tmp`` to ``dest``; a ``dest`` already there is moved aside first and removed after,
    unless ``keep_existing(dest)`` says to keep it (``tmp`` is left for the caller to remove)."""
    while True:
        try:
            os.rename(tmp, dest)  # an empty folder at dest is replaced; a full one refuses
            return
        except OSError:
            if not os.path.lexists(dest):
                raise  # not a folder in the way: a folder not writable, another file system
        if keep_existing is not None and keep_existing(dest):
            return
        aside = _sibling(dest, ".old")
        try:
            os.rename(dest, aside / dest.name)
        except FileNotFoundError:  # another writer moved it aside meanwhile: try again
            _remove(aside)
            continue
        except BaseException:
            _remove(aside)
            raise
        try:
            os.rename(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rename(aside / dest.name, dest)  # put the old folder back
            if os.path.lexists(dest):  # back (or another writer's is there): nothing of it left aside
                _remove(aside)
            raise
        _remove(aside)
        return


@contextlib.contextmanager
def replacing_folder(dest: Path | str, *, mode: int | None = None,
                     keep_existing: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Write the folder ``dest`` atomically: the ``with`` block writes into the empty folder it is
    given, a new sibling of ``dest`` (``.<name>.<random>.tmp``), and when the block ends without an
    exception that folder is renamed to ``dest``.

    - ``dest``'s parent folders are made when missing; ``mode`` (e.g. ``0o755``) is set on the new
      folder, which otherwise has the permissions the umask gives any new folder.
    - A ``dest`` that exists (one left from before, or one that a concurrent writer renamed into
      place meanwhile) is replaced: moved aside into ``.<name>.<random>.old.tmp``, the new folder
      renamed in, the old one removed (put back when that rename fails). ``keep_existing(dest)``,
      when given, is asked first: ``True`` keeps the folder that is there and drops the new one
      (e.g. another process wrote the same folder, whole, while this one wrote).
    - An exception in the block (or in the rename) removes the temporary folder and propagates; an
      existing ``dest`` is left as it was.

    Readers never see a half-written ``dest``. Concurrent writers each write their own temporary
    folder, and the last to finish is the one kept (``keep_existing`` aside); writers that must
    not do the work twice hold an :func:`exclusive_lock` around it. A process killed in the middle
    leaves its temporary folder behind: :func:`remove_temporaries` clears those, under that lock."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(dest)
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        yield tmp
        _move_into_place(tmp, dest, keep_existing)
    finally:
        if os.path.lexists(tmp):
            _remove(tmp)


def remove_temporaries(dest: Path | str) -> None:
    """Remove the temporary siblings that :func:`replacing_folder` left beside ``dest`` when its
    process was killed. Only while holding the lock that every writer of ``dest`` takes
    (:func:`exclusive_lock`): a temporary folder may be another writer's work in progress."""
    dest = Path(dest)
    for stale in dest.parent.glob(f".{dest.name}.*{TMP_SUFFIX}"):
        _remove(stale)


@contextlib.contextmanager
def exclusive_lock(path: Path | str) -> Iterator[bool]:
    """An exclusive lock on the file ``path`` between processes (POSIX ``flock``; the file is made
    when missing). Yields ``True``; where there is no ``flock`` it yields ``False`` and locks
    nothing (an atomic rename still keeps half-written work out of sight)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield False
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
